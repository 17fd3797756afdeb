/* backend.h - the op interface the model is written against, implemented by the CPU and CUDA backends.
 *
 * A backend is a function table plus its context ({ops, ctx}, as ggml's backends and redis' dict
 * types do it). The batched forward (src/model/step.c) calls only these ops, on memory the backend
 * allocated, so the same model code runs on the CPU and on a GPU. Ops are asynchronous on GPU
 * backends (enqueued on one stream, in order); `sync` and `download` wait.
 *
 * Conventions: pointers are backend memory (device memory for CUDA) unless named h_*; activations
 * are f32; shapes are row-major and written in comments as (rows, cols). Each op's semantics are
 * those of the CUDA kernel of the same name in src/backend/cuda/cuda_kernels.h, which states them
 * in full; the CPU backend computes the same function with the CPU kernels.
 */
#ifndef AIINFRA_BACKEND_H
#define AIINFRA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "aiinfra/dtype.h"
#include "aiinfra/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A weight matrix (n_out, n_in) in backend memory, y = x W^T; vectors are n_out = 1, f32.
 * CPU: ggml rows as stored (usually pointing into the mmapped file). CUDA: the device layout of
 * cuda_kernels.h (float types as stored, quantized types "planar"). */
typedef struct backend_weight {
    dtype type;
    int64_t n_out, n_in;
    void *data;
} backend_weight;

/* Attention over a paged KV cache for a batch of sequences (the full statement of the semantics is
 * at cuk_attn_args in src/backend/cuda/cuda_kernels.h). Sequence s owns query rows
 * [q_start[s], q_start[s+1]), its keys 0 .. seq_len[s]-1 live in cache rows
 * block_tables[s][j / block_size] * block_size + j % block_size, and its query rows are its last
 * q_len positions, each attending causally. */
typedef struct backend_attn {
    float *out;                  /* (n_tok, n_head * head_dim_v) */
    const float *q;              /* (n_tok, q_stride) */
    int64_t q_stride;
    const void *k_cache, *v_cache; /* (num_slots, n_head_kv * head_dim[_v]) */
    dtype kv_type;               /* DTYPE_F16, DTYPE_F32 or DTYPE_F8_E4M3 (backends that accept it: kv_type_ok) */
    float k_scale, v_scale;      /* f8_e4m3: an element reads as decode(code) * scale (fp8.h); else unused */
    const int32_t *block_tables; /* (n_seq, max_blocks) */
    const int32_t *q_start;      /* (n_seq + 1) */
    const int32_t *seq_len;      /* (n_seq) */
    int32_t n_seq, n_tok;
    int32_t max_blocks, max_q_len, max_seq_len;
    int32_t n_head, n_head_kv, head_dim, head_dim_v, block_size;
    float scale;
    void *work;
    size_t work_size;
} backend_attn;

/* Per-row sampling parameters for backend_ops.sample (the full statement is at cuk_sample in
 * src/backend/cuda/cuda_kernels.h; the same pipeline as src/engine/sampler.c without penalties and
 * logit bias). temperature < SAMPLER_GREEDY_EPS: argmax. top_k <= 0, top_p >= 1, min_p <= 0: off.
 * u: the uniform draw in [0, 1) from the sequence's seeded rng, so a run is reproducible. */
typedef struct backend_sample_params {
    float temperature, top_p, min_p, u;
    int32_t top_k;
} backend_sample_params;

/* rope of q and k and the store of k and v into a paged KV cache (backend_ops.rope_store, and
 * backend_mm_opts.rope_kv where it rides on the q|k|v product). Token t is at position pos[t] and goes
 * to cache row slot[t] (< 0: rotate only). neox: pairs (i, i + rope_dim / 2) of a head, else (2i, 2i+1);
 * dims from rope_dim on are not rotated. An f8_e4m3 cache stores fp8(k / k_scale) and fp8(v / v_scale)
 * (fp8.h: nearest even, saturated to +-448); the scales are ignored for f16/f32. */
typedef struct backend_rope_kv {
    int32_t n_head, n_head_kv, head_dim, head_dim_v, rope_dim;
    const int32_t *pos;      /* (n_tok) */
    float base, freq_scale;
    const float *factors;    /* (rope_dim / 2) frequency divisors or NULL */
    int neox;
    void *k_cache, *v_cache; /* (num_slots, n_head_kv * head_dim[_v]) */
    dtype kv_type;
    float k_scale, v_scale;
    const int32_t *slot;     /* (n_tok) */
} backend_rope_kv;

/* Doubles per row of a split norm's sum of squares (backend_mm_opts in_ss / out_ss). */
#define BACKEND_SS_LANES 32

/* Options of matmul_ex: the small decode ops around a matrix product folded into it. Batch-1 decode
 * is a chain of ~9 kernels per layer; the GEMVs stream the weights at ~90-97% of copy bandwidth, and
 * what is left is the launch + ramp latency of the small kernels between them (residual add + norm,
 * SwiGLU), ~2-3 us each, not bytes. So those ops ride on the GEMV: its prologue computes the input
 * while loading x, its epilogue adds into y. One op with options (not one op per combination) keeps
 * the table small and lets step.c keep one layer loop; `matmul` stays for every other caller.
 * The two prologues are exclusive; a backend without a fused kernel for a case composes its own ops
 * (CPU always; CUDA above 16 tokens, where cuBLASLt runs: rmsnorm / swiglu_rows into its scratch). */
typedef struct backend_mm_opts {
    const float *norm_w; /* (n_in) f32 or NULL: the input row is rmsnorm(x row) * norm_w, x (n_tok, n_in) */
    float eps;           /* the rmsnorm epsilon (with norm_w) */
    bool swiglu_in;      /* x is (n_tok, 2 n_in) gate|up rows; the input row is silu(gate) * up (not with norm_w) */
    bool accumulate;     /* y += input W^T (the residual add) instead of y = input W^T; y must not alias x */
    bool swiglu_out;     /* W is gate|up stacked (2 n_ff rows, gate first); y (n_tok, n_ff) = silu(input Wg^T) *
                          * (input Wu^T): the SwiGLU in the epilogue (not with accumulate) */
    /* The rmsnorm split over two products (RUNNER_FUSE_DEFER, pure decode): a norm needs the sum of
     * squares of the whole row before its first output, which the GEMV reading it cannot have before
     * its weights stream (the prologues above pay that wait in every CTA). But rmsnorm(x) * w . W^T =
     * r * ((x * w) . W^T) with r = 1 / sqrt(mean(x^2) + eps): so the product that finishes x (wo or
     * down, accumulating into the residual) also writes x * w and adds up x^2 as each element is
     * final, and the product that reads it scales its results by r. No kernel in between.
     * A sum of squares is BACKEND_SS_LANES doubles per row, (n_tok, BACKEND_SS_LANES): row t's sum is the
     * sum of its lanes (read in lane order); a writer adds its partial sums to any of t's lanes (a GPU
     * spreads its atomics over them: same-address atomics serialise). */
    const double *in_ss; /* (n_tok, BACKEND_SS_LANES) or NULL: x rows are already times the norm weight; row
                          * t's product is multiplied by 1 / sqrt(ss_t / n_in + eps), ss_t the sum of t's
                          * lanes (not with norm_w or swiglu_in) */
    float *out_xn;       /* (n_tok, n_out) or NULL: out_xn = final y * out_nw, row by row ... */
    const float *out_nw; /* (n_out) */
    double *out_ss;      /* ... and the sum over row t of final y^2, in double, added to t's lanes of
                          * out_ss (n_tok, BACKEND_SS_LANES) (the caller zeroes it; a GPU adds with
                          * atomics in any order, which moves the double sum by ~2^-41 of itself: the
                          * float r made from it changes only near a float rounding boundary, docs/gpu.md) */
    /* The rope and KV store in the q|k|v product's epilogue (RUNNER_FUSE_ROPE): y rows are q|k|v
     * (n_out = (n_head + n_head_kv) head_dim + n_head_kv head_dim_v); after the product, y's q and k
     * parts are rotated and k, v stored as rope_store does. Not with accumulate, swiglu_out or out_xn. */
    const backend_rope_kv *rope_kv;
} backend_mm_opts;

/* Whether o->rope_kv may ride on a product of n_out rows (the rows are q|k|v; no other epilogue). */
static inline bool backend_rope_kv_fits(const backend_mm_opts *o, int64_t n_out)
{
    const backend_rope_kv *rk = o->rope_kv;
    return !o->accumulate && !o->swiglu_out && !o->out_xn &&
           n_out == ((int64_t)rk->n_head + rk->n_head_kv) * rk->head_dim + (int64_t)rk->n_head_kv * rk->head_dim_v;
}

typedef struct backend_ops {
    const char *name;
    void (*free)(void *ctx);

    // memory: alloc/dealloc are for set-up only (never on the token path)
    ai_status (*alloc)(void *ctx, size_t bytes, void **out, ai_err *err);
    void (*dealloc)(void *ctx, void *p);
    /* Copies in order with the ops; h_src must stay valid until the next sync (GPU: pinned staging). */
    ai_status (*upload)(void *ctx, void *dst, const void *h_src, size_t bytes, ai_err *err);
    /* Waits for every op before it, then copies. */
    ai_status (*download)(void *ctx, void *h_dst, const void *src, size_t bytes, ai_err *err);
    ai_status (*sync)(void *ctx, ai_err *err);
    /* Backend-to-backend copy, in order with the ops (KV block copy-on-write). */
    ai_status (*copy)(void *ctx, void *dst, const void *src, size_t bytes, ai_err *err);
    /* Bytes the backend can still allocate (GPU: free device memory); 0 when unbounded/unknown. */
    size_t (*mem_free)(void *ctx);

    // weights
    /* Backend bytes for a weight of this dtype/shape, and the upload from ggml rows (h_src). A backend
     * with weight_upload gets stacked weights (wq|wk|wv and w_gate|w_up as one matrix each: one
     * launch and one pass over x instead of three or two); one without reads the model in place. */
    size_t (*weight_bytes)(void *ctx, dtype t, int64_t n_out, int64_t n_in);
    ai_status (*weight_upload)(void *ctx, const backend_weight *w, const void *h_src, ai_err *err);
    /* Reproducible random values in about [-scale, scale] (synthetic models); NULL if unsupported. */
    ai_status (*weight_random)(void *ctx, const backend_weight *w, uint64_t seed, float scale, ai_err *err);
    ai_status (*fill_f32)(void *ctx, float *dst, int64_t n, float value, ai_err *err);

    // ops (semantics: cuda_kernels.h)
    ai_status (*embed)(void *ctx, float *out, const backend_weight *table, const int32_t *tokens, int32_t n,
                       ai_err *err);
    ai_status (*rmsnorm)(void *ctx, float *out, const float *in, const float *w, int32_t rows, int32_t dim,
                         float eps, ai_err *err);
    ai_status (*add_rmsnorm)(void *ctx, float *x, const float *delta, float *out, const float *w, int32_t rows,
                             int32_t dim, float eps, ai_err *err);
    ai_status (*add_bias)(void *ctx, float *y, const float *b, int32_t rows, int32_t n, int64_t row_stride,
                          ai_err *err);
    ai_status (*swiglu)(void *ctx, float *out, const float *gate, const float *up, int64_t n, ai_err *err);
    ai_status (*swiglu_rows)(void *ctx, float *out, const float *gu, int32_t rows, int32_t n, ai_err *err);
    /* rope of q and k (n_tok rows each, in place), then the store of k and v (backend_rope_kv), in one
     * op (GPU: one launch). */
    ai_status (*rope_store)(void *ctx, float *q, int64_t q_stride, float *k, int64_t k_stride, const float *v,
                            int64_t v_stride, int32_t n_tok, const backend_rope_kv *rk, ai_err *err);
    ai_status (*gather_rows)(void *ctx, float *out, const float *in, const int32_t *idx, int32_t n, int32_t dim,
                             ai_err *err);
    /* y (n_tok, n_out) = x (n_tok, n_in) W^T; scratch is the backend's own (sized by matmul_reserve). */
    ai_status (*matmul)(void *ctx, const backend_weight *w, const float *x, int32_t n_tok, float *y, ai_err *err);
    /* matmul with a fused prologue / epilogue (backend_mm_opts; opts NULL = matmul). */
    ai_status (*matmul_ex)(void *ctx, const backend_weight *w, const float *x, int32_t n_tok, float *y,
                           const backend_mm_opts *opts, ai_err *err);
    /* Called once per weight at set-up with the largest n_tok: the backend sizes its scratch (for
     * matmul and matmul_ex). */
    ai_status (*matmul_reserve)(void *ctx, const backend_weight *w, int32_t max_tok, ai_err *err);
    /* The smallest n_tok from which matmul(_ex) of a weight of type t runs as a GEMM whose prologue
     * writes a 16-bit input (the runner then fuses as for large steps). Optional: NULL =
     * RUNNER_FUSE_GEMV_TOK + 1. */
    int32_t (*matmul_gemm_min_tok)(void *ctx, dtype t);
    /* Whether matmul_ex of weights of type t at n_tok tokens does in_ss / out_xn inside its kernel
     * (otherwise it composes them from extra passes, which a default should not ask for).
     * Optional: NULL = never. */
    bool (*matmul_fuses_defer)(void *ctx, dtype t, int32_t n_tok);
    /* Whether rope_store and attention take a KV cache of dtype t. Optional: NULL = f16 and f32 only. */
    bool (*kv_type_ok)(void *ctx, dtype t);
    size_t (*attention_work_size)(void *ctx, const backend_attn *a);
    ai_status (*attention)(void *ctx, const backend_attn *a, ai_err *err);
    ai_status (*argmax)(void *ctx, const float *logits, int32_t n_rows, int32_t n_vocab, int32_t *out, ai_err *err);
    /* out[r] = token sampled from logits row r with params[r] (backend memory, n_rows), -1 for a row with
     * NaN/+inf logits. Optional: NULL where the caller samples on the host (the CPU backend, whose
     * logits are host memory already). */
    ai_status (*sample)(void *ctx, const float *logits, int32_t n_rows, int32_t n_vocab,
                        const backend_sample_params *params, int32_t *out, ai_err *err);

    /* Runs fn(arg), which enqueues ops. A GPU backend captures it as a graph the first time a key is
     * seen and replays the graph afterwards (fn must then enqueue the same ops on the same buffers
     * for that key; only buffer contents may change). key 0 = never capture. */
    ai_status (*run)(void *ctx, uint64_t key, ai_status (*fn)(void *arg, ai_err *err), void *arg, ai_err *err);
    /* Drops every captured graph: their buffers are about to be freed (a runner's runner_free). */
    void (*forget_graphs)(void *ctx);

    // timing (benchmarks): a monotonic clock in ms that has waited for the ops before it
    double (*elapsed_ms)(void *ctx);
    /* The two ceilings a benchmark reports against, measured now: copy bandwidth (GB/s, bytes read +
     * written by a large device-to-device copy) and the dense bf16 matrix-product rate (TFLOP/s,
     * 8192^3; 0 where not measured). */
    ai_status (*ceilings)(void *ctx, double *copy_gbs, double *matmul_tflops, ai_err *err);
} backend_ops;

typedef struct backend {
    const backend_ops *ops;
    void *ctx;
} backend;

/* CPU backend: n_threads 0 = all online cores. */
ai_status backend_cpu_init(backend *out, int n_threads, ai_err *err);

/* CUDA backend on device `device`. AI_ERR_UNSUPPORTED with the reason when the build has no CUDA or
 * no device is present. */
ai_status backend_cuda_init(backend *out, int device, ai_err *err);
/* A one-line description of the GPU (name, memory, SMs) into buf; false when there is none. */
bool backend_cuda_describe(int device, char *buf, size_t cap);

void backend_free(backend *b);

#ifdef __cplusplus
}
#endif

#endif
