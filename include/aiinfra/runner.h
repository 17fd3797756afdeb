/* runner.h - a model on a backend: weights in backend memory, a paged KV pool, and the batched step.
 *
 * One `runner_step` runs a batch of sequences, each contributing q_len new tokens (a prefill chunk
 * or one decode token), through the model and produces logits for the LAST token of each sequence
 * only. KV memory is one pool of fixed-size blocks per layer, allocated once; each sequence names
 * its blocks in a block table (which blocks it owns is the caller's business: the engine's block
 * manager, or a benchmark's fixed plan). The model code (src/model/step.c) calls only backend ops,
 * so the same step runs on the CPU and the CUDA backend.
 *
 * Memory plan (runner_init, once; nothing is allocated per step):
 *   weights    as stored (CPU: the mmap itself) or uploaded/generated once on the device
 *   KV pool    (n_layer, kv_blocks * block_size, n_head_kv * head_dim[_v]) for K and for V, f16, f32 or
 *              f8_e4m3 (runner_params.kv_dtype; fp8 holds twice the tokens of f16 in the same bytes)
 *   arena      activations for max_tokens rows, logits for max_seqs rows, step metadata, attention work
 */
#ifndef AIINFRA_RUNNER_H
#define AIINFRA_RUNNER_H

#include <stdbool.h>
#include <stdint.h>

#include "aiinfra/backend.h"
#include "aiinfra/model.h"

/* Element type of the KV cache (`--kv-cache-dtype`). AUTO is f16 (f32 with the older kv_f32 flag). FP8 is OCP
 * e4m3 with a per-tensor scale (runner_params.k_scale, v_scale): vLLM's `--kv-cache-dtype fp8`. */
typedef enum runner_kv_dtype { RUNNER_KV_AUTO = 0, RUNNER_KV_F16, RUNNER_KV_F32, RUNNER_KV_FP8 } runner_kv_dtype;

typedef struct runner_params {
    int32_t max_tokens;   /* new tokens per step at most (prefill chunk budget); 0 = 512 */
    int32_t max_seqs;     /* sequences per step at most; 0 = 256 */
    int32_t n_ctx;        /* longest sequence; 0 = min(n_ctx_train, 8192) */
    int32_t block_size;   /* KV block size in tokens (power of two); 0 = 16 */
    int64_t kv_blocks;    /* blocks in the pool; 0 = fill kv_mem_frac of free memory (CPU: max_seqs * n_ctx) */
    float kv_mem_frac;    /* 0 = 0.9 */
    bool kv_f32;          /* f32 KV (tests), the same as kv_dtype RUNNER_KV_F32; default f16 */
    runner_kv_dtype kv_dtype; /* AUTO (0) = f16, or f32 with kv_f32 */
    float k_scale, v_scale;   /* fp8 KV: the per-tensor scales, stored = fp8(x / scale); 0 = 1.0 (uncalibrated) */
    bool no_graphs;       /* do not capture decode steps as graphs */
    unsigned fuse;        /* RUNNER_FUSE_* bits: the ops that run inside a matmul_ex (prologue or epilogue)
                           * instead of as kernels of their own; 0 = RUNNER_FUSE_AUTO */
} runner_params;

#define RUNNER_FUSE_NORM 1u   /* rmsnorm in the qkv / gate|up / output products' prologue */
#define RUNNER_FUSE_SWIGLU 2u /* silu(gate) * up in the down product's prologue */
#define RUNNER_FUSE_ADD 4u    /* the residual adds in the wo and down products' epilogue */
#define RUNNER_FUSE_EXACT 8u  /* use exactly the bits given (RUNNER_FUSE_EXACT alone: no fusion) */
#define RUNNER_FUSE_GLU 16u   /* silu(gate) * up in the gate|up product's epilogue (backend_mm_opts.swiglu_out);
                               * only in steps the backend serves with its GEMV, ignored in larger ones */
#define RUNNER_FUSE_DEFER 32u /* the norms split over the products around them (backend_mm_opts.in_ss / out_*):
                               * the residual-writing product also writes x * norm_w and sum(x^2), the
                               * reading one scales by 1 / rms; pure decode steps of GEMV size only;
                               * implies add and replaces norm there */
#define RUNNER_FUSE_ROPE 64u /* the rope and KV store in the q|k|v product's epilogue (backend_mm_opts.rope_kv);
                               * only in steps the backend serves with its GEMV, ignored in larger ones */
#define RUNNER_FUSE_AUTO 0u   /* the set measured fastest (docs/gpu.md): in steps the backend serves
                               * with its GEMV (below matmul_gemm_min_tok) norm + swiglu + add for
                               * quantized weights; for float weights defer + glu + rope in one-token
                               * steps where the backend fuses the split norm, else none; in larger
                               * steps norm + swiglu + add */
#define RUNNER_FUSE_GEMV_TOK 16 /* for a backend without matmul_gemm_min_tok: the largest step taken as served
                                 * by GEMVs; above it the products run as GEMMs whose prologue writes their
                                 * 16-bit input */

/* Synthetic weights: any architecture and size, generated on the backend (no file). */
typedef struct runner_random {
    dtype type;           /* weight dtype of the matrices (embeddings too); norms are f32 ones */
    uint64_t seed;
    float scale;          /* 0 = 0.035 (uniform, about the std of trained 4k-wide layers) */
} runner_random;

typedef struct runner runner;

/* Weights from m (uploaded once), or random ones when m is NULL (then rnd is required and cfg gives
 * the shapes). The runner keeps be and m; both must outlive it. */
ai_status runner_init(runner **out, backend *be, const model_config *cfg, const model *m, const runner_random *rnd,
                      const runner_params *p, ai_err *err);
void runner_free(runner *r);

typedef struct runner_seq {
    const int32_t *tokens;      /* (q_len) new tokens */
    int32_t q_len;              /* >= 1 */
    int32_t seq_len;            /* context after this step: the last new token sits at seq_len - 1 */
    const int32_t *block_table; /* ceil(seq_len / block_size) block ids < runner_kv_blocks */
} runner_seq;

/* Runs the step. out_tokens (n_seq, may be NULL): the greedy (argmax) next token of each sequence.
 * Steps where every sequence has q_len 1 are replayed from captured graphs (one per batch size). */
ai_status runner_step(runner *r, const runner_seq *seqs, int32_t n_seq, int32_t *out_tokens, ai_err *err);
/* Copies whole KV blocks (every layer, K and V): dst[i] becomes a copy of src[i], in order, before
 * the next step (the block manager's copy-on-write). Ids < runner_kv_blocks. */
ai_status runner_copy_blocks(runner *r, const int32_t *src, const int32_t *dst, int32_t n, ai_err *err);
/* Logits of the last step, (n_seq, n_vocab) floats copied into h_out. */
ai_status runner_logits(runner *r, float *h_out, int32_t n_seq, ai_err *err);
/* Samples the next token of each of the last step's first n_seq sequences on the backend, from its
 * logits, with h_params[s] (temperature, top-k/p, min-p and the host-drawn u; backend.h), into
 * out_tokens (-1: the row had NaN/+inf logits). Only the tokens cross to the host, not the logits.
 * AI_ERR_UNSUPPORTED where the backend has no sampling op (runner_can_sample: false). */
bool runner_can_sample(const runner *r);
ai_status runner_sample(runner *r, const backend_sample_params *h_params, int32_t n_seq, int32_t *out_tokens,
                        ai_err *err);

const model_config *runner_config(const runner *r);
int64_t runner_kv_blocks(const runner *r);
int32_t runner_block_size(const runner *r);
int32_t runner_n_ctx(const runner *r);
unsigned runner_fusions(const runner *r, int32_t n_tok); /* the RUNNER_FUSE_* bits a step of n_tok tokens uses */
/* ... and a decode step of n_tok sequences, one token each (AUTO may take the split norm there). */
unsigned runner_fusions_decode(const runner *r, int32_t n_tok);
/* Whether a step of n_tok tokens runs its layer products as GEMMs (backend matmul_gemm_min_tok) rather than GEMVs. */
bool runner_step_gemm(const runner *r, int32_t n_tok);
/* Bytes of weights a decode step reads (every matrix once; embedding rows not counted), and of the
 * KV cache per token (all layers, K + V). */
uint64_t runner_weight_bytes(const runner *r);
uint64_t runner_kv_bytes_per_token(const runner *r);
/* The KV cache's element dtype (DTYPE_F16, DTYPE_F32 or DTYPE_F8_E4M3) and its fp8 scales. */
dtype runner_kv_type(const runner *r);
void runner_kv_scales(const runner *r, float *k_scale, float *v_scale);
/* "auto", "f16", "f32", "fp8" or "fp8_e4m3" -> *out; false for anything else. runner_kv_dtype_name: the reverse. */
bool runner_kv_dtype_parse(const char *s, runner_kv_dtype *out);
const char *runner_kv_dtype_name(runner_kv_dtype k);

/* Shapes of well-known models for synthetic runs: "llama3-8b", "llama-1b", "qwen2-7b",
 * "smollm2-135m"; names listed in runner_preset_names. */
ai_status model_config_preset(const char *name, model_config *out, ai_err *err);
extern const char *const runner_preset_names[];

#endif
