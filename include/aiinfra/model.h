/* model.h - the Llama family (llama, mistral, qwen2, qwen3, smollm) as data, and one CPU forward.
 *
 * A `model` is a GGUF file opened read-only and mmapped: the config comes from its metadata
 * (`general.architecture` and the `<arch>.*` keys), every weight is a pointer into the map (no copy),
 * shape-checked against the config. A `model_ctx` is one sequence's state: the KV cache, the
 * activations for up to n_batch tokens, the logits and a thread pool, all sized up front and held in
 * ONE allocation, so a forward pass never calls malloc. See docs/model.md for the math.
 *
 * Invariants:
 *  1. Weight matrices are (n_out, n_in) row-major in their GGUF dtype: GGUF's ne[0] is n_in.
 *  2. Positions are absolute: model_forward(tokens, n, pos) writes KV rows [pos, pos + n); the
 *     rows [0, pos) must already hold the same sequence (the caller keeps track, see generate.h).
 *  3. Logits are for the last of the n tokens (n_vocab floats), or for all n when all_logits is set.
 */
#ifndef AIINFRA_MODEL_H
#define AIINFRA_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "aiinfra/dtype.h"
#include "aiinfra/gguf.h"
#include "aiinfra/status.h"

// --- config -----------------------------------------------------------------

typedef enum model_arch {
    MODEL_ARCH_LLAMA = 0,   /* also SmolLM (tied embeddings) and Llama-3 (rope_freqs / llama3 scaling) */
    MODEL_ARCH_MISTRAL,
    MODEL_ARCH_QWEN2,       /* + q/k/v biases */
    MODEL_ARCH_QWEN3,       /* + per-head RMSNorm of q and k before RoPE */
    MODEL_ARCH_COUNT
} model_arch;

typedef enum model_rope_kind {
    MODEL_ROPE_NORM = 0,    /* rotate adjacent pairs (x[2i], x[2i+1]): llama.cpp's GGUF llama/mistral */
    MODEL_ROPE_NEOX,        /* rotate halves (x[i], x[i + d/2]): qwen2/qwen3, HF safetensors llama */
} model_rope_kind;

typedef enum model_rope_scaling {
    MODEL_ROPE_SCALING_NONE = 0,
    MODEL_ROPE_SCALING_LINEAR,  /* positions divided by factor */
    MODEL_ROPE_SCALING_LLAMA3,  /* per-frequency factors (rope_freqs.weight or computed) */
} model_rope_scaling;

typedef struct model_config {
    model_arch arch;
    int32_t n_vocab;
    int32_t n_ctx_train;     /* <arch>.context_length */
    int32_t dim;             /* embedding_length */
    int32_t n_layer;         /* block_count */
    int32_t n_ff;            /* feed_forward_length */
    int32_t n_head;          /* attention.head_count */
    int32_t n_head_kv;       /* attention.head_count_kv (GQA: n_head a multiple of it) */
    int32_t head_dim;        /* attention.key_length, default dim / n_head */
    int32_t head_dim_v;      /* attention.value_length, default head_dim */
    int32_t rope_dim;        /* rope.dimension_count, default head_dim (even, <= head_dim) */
    float norm_eps;          /* attention.layer_norm_rms_epsilon */
    float rope_base;         /* rope.freq_base, default 10000 */
    model_rope_kind rope_kind;
    model_rope_scaling rope_scaling;
    float rope_factor;       /* rope.scaling.factor (linear, llama3) */
    float rope_low_freq_factor, rope_high_freq_factor; /* llama3 */
    int32_t rope_orig_ctx;   /* rope.scaling.original_context_length (llama3) */
    bool tied_output;        /* no output.weight: logits use token_embd */
} model_config;

const char *model_arch_name(model_arch a);
/* Reads and validates the config; errors name the key and the reason. */
ai_status model_config_from_gguf(model_config *cfg, const gguf *g, const char *name, ai_err *err);

// --- weights ----------------------------------------------------------------

/* A weight bound to mmapped bytes: a matrix (n_out, n_in) or a vector (n_out = 1). */
typedef struct model_weight {
    dtype type;
    const void *data;        /* into the GGUF map; NULL when the tensor is optional and absent */
    int64_t n_out, n_in;
    size_t nbytes;
} model_weight;

typedef struct model_layer {
    model_weight attn_norm;          /* (dim) f32 */
    model_weight wq;                 /* (n_head * head_dim, dim) */
    model_weight wk, wv;             /* (n_head_kv * head_dim[_v], dim) */
    model_weight bq, bk, bv;         /* qwen2 biases (out) f32, else data NULL */
    model_weight q_norm, k_norm;     /* qwen3 (head_dim) f32, else data NULL */
    model_weight wo;                 /* (dim, n_head * head_dim_v) */
    model_weight ffn_norm;           /* (dim) f32 */
    model_weight w_gate, w_up;       /* (n_ff, dim) */
    model_weight w_down;             /* (dim, n_ff) */
} model_layer;

struct safetensors_model;

typedef struct model {
    gguf *g;                  /* owned GGUF (NULL for an HF folder); weights point into its map */
    struct safetensors_model *st; /* owned safetensors (HF folder), else NULL */
    float *vec_arena;         /* HF only: norms/biases converted to f32 (vec_cap floats) */
    size_t vec_cap, vec_used;
    char *path;
    model_config cfg;
    model_weight tok_embd;    /* (n_vocab, dim) */
    model_weight output_norm; /* (dim) f32 */
    model_weight output;      /* (n_vocab, dim); = tok_embd when tied */
    model_weight rope_freqs;  /* (rope_dim / 2) f32 llama3 factors, or data NULL */
    model_layer *layers;      /* (n_layer) */
} model;

/* path: a GGUF file, or an HF folder (config.json + model.safetensors or a sharded index). */
ai_status model_open(model **out, const char *path, ai_err *err);
/* Binds to an already-open GGUF; takes ownership of g on success AND on failure. */
ai_status model_from_gguf(model **out, gguf *g, const char *name, ai_err *err);
void model_close(model *m);
/* The model's tokenizer: from the GGUF metadata, or the HF folder's tokenizer.json. */
struct tokenizer;
ai_status model_load_tokenizer(const model *m, struct tokenizer **out, ai_err *err);

#define MODEL_DEFAULT_NAME "SmolLM2-135M-Instruct.Q4_1.gguf"
/* The default model's path, $AIINFRA_CACHE (or ~/.cache/aiinfra) / MODEL_DEFAULT_NAME, into out.
 * AI_ERR_IO (with the hint to run scripts/fetch_model.sh) when the file is absent. */
ai_status model_default_path(char *out, size_t cap, ai_err *err);

/* Bytes of weight data the model maps (every tensor of the source). */
uint64_t model_weight_bytes(const model *m);
/* Touches every page of the mmapped weights so the first forward does not stall on page faults;
 * progress (may be NULL) is called about every 1% with bytes done and the total. */
typedef void (*model_progress_fn)(void *user, uint64_t done, uint64_t total);
void model_prefetch(const model *m, model_progress_fn progress, void *user);

/* Counts and bytes for `aiinfra info`. bytes_by_dtype has DTYPE_COUNT entries. */
typedef struct model_stats {
    int64_t n_params;
    uint64_t bytes_by_dtype[DTYPE_COUNT];
    int64_t n_by_dtype[DTYPE_COUNT];     /* tensors of each dtype */
    uint64_t weight_bytes;               /* all tensors in the file */
    uint64_t weight_bytes_per_token;     /* bytes a decode step reads (tied output counted twice) */
    uint64_t kv_bytes_per_token;         /* f32 K + V over all layers */
} model_stats;
void model_stats_get(const model *m, model_stats *st);

// --- one sequence's state and the forward -------------------------------------

typedef struct model_ctx_params {
    int32_t n_ctx;       /* KV capacity in tokens; 0 = min(n_ctx_train, 4096) */
    int32_t n_batch;     /* tokens per forward call at most; 0 = 256 */
    int n_threads;       /* 0 = number of online cores */
    bool all_logits;     /* keep logits for every token of a call (tests), else the last only */
    bool kv_f16;         /* K/V cache in f16 (half the memory; llama.cpp's default). Queries are then
                          * rounded to f16 too, as llama.cpp does before its f16 K products. */
    struct backend *backend; /* NULL: the CPU forward of this file. Else the sequence runs as a runner
                          * (runner.h) on that backend (e.g. CUDA) with an f16 paged KV cache; the
                          * logits of the last token are copied back after each forward; all_logits
                          * is then refused. The backend must outlive the context. */
    int kv_cache_dtype;  /* backend mode: the paged cache's runner_kv_dtype (runner.h; 0 = auto, f16). fp8 needs
                          * backend mode (run the CPU backend for it); the CPU forward refuses it */
} model_ctx_params;

typedef struct model_ctx model_ctx;

ai_status model_ctx_init(model_ctx **out, const model *m, const model_ctx_params *p, ai_err *err);
void model_ctx_free(model_ctx *c);
const model *model_ctx_model(const model_ctx *c);
int32_t model_ctx_n_ctx(const model_ctx *c);
int32_t model_ctx_n_batch(const model_ctx *c);
int model_ctx_n_threads(const model_ctx *c);
size_t model_ctx_bytes(const model_ctx *c);  /* the one allocation: KV cache + activations */

/* Runs tokens[0..n) at positions [pos, pos + n); 1 <= n <= n_batch, pos + n <= n_ctx. */
ai_status model_forward(model_ctx *c, const int32_t *tokens, int32_t n, int32_t pos, ai_err *err);
/* Logits of the last call: (n_rows, n_vocab); n_rows = 1, or n with all_logits. */
const float *model_logits(const model_ctx *c, int32_t *n_rows);

// --- building blocks (exposed for tests; src/model/ops.c) ----------------------

/* y[i] = x[i] / sqrt(mean(x^2) + eps) * w[i] (w NULL: no scale). y may alias x. */
void model_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps);

/* Per-frequency divisors for llama3 scaling, (rope_dim / 2) floats (as llama.cpp's rope_freqs). */
void model_rope_llama3_factors(const model_config *cfg, float *factors);

/* Rotates the first rope_dim dims of each of n_heads heads (head_dim apart) at position pos.
 * freq_factors: (rope_dim / 2) divisors or NULL. freq_scale: 1 / linear factor (1 = none). */
void model_rope(float *x, int32_t n_heads, int32_t head_dim, int32_t rope_dim, int32_t pos,
                float base, float freq_scale, const float *freq_factors, model_rope_kind kind);

/* Causal attention for one query head over positions [0, n_pos): out (head_dim_v) =
 * softmax(q . k_j * scale) . v_j, with k_j at k + j * k_stride, v_j at v + j * v_stride.
 * scores: (n_pos) scratch. */
void model_attend(float *out, const float *q, const float *k, const float *v, int32_t n_pos,
                  int32_t head_dim, int32_t head_dim_v, int64_t k_stride, int64_t v_stride,
                  float scale, float *scores);
/* The same over an f16 cache (k, v hold IEEE half bits). */
void model_attend_f16(float *out, const float *q, const uint16_t *k, const uint16_t *v, int32_t n_pos,
                      int32_t head_dim, int32_t head_dim_v, int64_t k_stride, int64_t v_stride,
                      float scale, float *scores);

#endif
