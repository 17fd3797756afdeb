/* cuda_kernels.h - the C interface of aiinfra's CUDA kernels (the .cu files beside it, built for sm_90a).
 *
 * Conventions (every function below):
 *  - Pointers are device pointers unless their name starts with h_. Shapes in comments are
 *    row-major: (n_tok, dim) means n_tok rows of dim contiguous elements.
 *  - A call enqueues work on `s` (a cudaStream_t) and returns at once; it checks its arguments and
 *    the launch (cudaGetLastError) and reports failures as ai_status with the kernel's name in err.
 *  - Nothing allocates device memory: scratch comes from the caller, sized by the matching
 *    *_size / *_work_size function (two-pass allocation). No cudaMalloc on the token path.
 *  - Launch configurations depend only on arguments passed by value, never on values in device
 *    memory, so every call can be captured in a CUDA graph and replayed with new data in the same
 *    buffers (the data-dependent parts, e.g. a sequence's length, are read on the device, with the
 *    by-value arguments as upper bounds).
 *  - Activations are f32. Weights keep their stored dtype; KV caches are f16 (or f32 for tests).
 */
#ifndef AIINFRA_CUDA_KERNELS_H
#define AIINFRA_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "aiinfra/backend.h"
#include "aiinfra/dtype.h"
#include "aiinfra/status.h"

typedef struct CUstream_st *cuk_stream; /* = cudaStream_t */

// --- weights on the device ------------------------------------------------------------------

/* A weight matrix (n_out, n_in) on the device, y = x W^T. Layout of `data`:
 *   f32, f16, bf16: row-major as stored (n_out rows of n_in elements).
 *   q8_0, q4_0, q4_1 ("planar", so that quants are 16-byte aligned for vector loads):
 *     qs     (n_out, n_in / 32, 32 bytes) for q8_0 (int8), (n_out, n_in / 32, 16 bytes) for q4_*,
 *            the bytes of each block exactly as in the GGUF block (nibble order of dtype.h);
 *     scales at byte offset cuk_weight_qs_bytes(): (n_out, n_in / 32) f16 d (q8_0, q4_0), or
 *            (n_out, n_in / 32) pairs of f16 {d, m} (q4_1).
 * n_in is a multiple of 32 for quantized types. A vector (norm weight, bias) is n_out = 1, f32. */
typedef backend_weight cuk_weight; /* the backend's weight type (include/aiinfra/backend.h) */

/* Bytes of the quants part of a planar weight (0 for float types); total device bytes. */
size_t cuk_weight_qs_bytes(dtype t, int64_t n_out, int64_t n_in);
size_t cuk_weight_bytes(dtype t, int64_t n_out, int64_t n_in);
/* Host-side repack from GGUF rows (h_src, n_out rows of dtype_row_bytes) into the device layout
 * (h_dst, cuk_weight_bytes); float types are copied. AI_ERR_UNSUPPORTED for other dtypes. */
ai_status cuk_weight_pack(dtype t, const void *h_src, int64_t n_out, int64_t n_in, void *h_dst, ai_err *err);

/* Fills a weight (any supported dtype, planar layout) with reproducible pseudo-random values on the
 * device: floats uniform in [-scale, scale]; quantized blocks with random quants and scales chosen
 * so values lie within about [-scale, scale]. Same (seed, sizes) -> same bytes. */
ai_status cuk_weight_fill_random(cuk_stream s, const cuk_weight *w, uint64_t seed, float scale, ai_err *err);
/* f32 vector of n values, all equal to value (norm weights of random models). */
ai_status cuk_fill_f32(cuk_stream s, float *dst, int64_t n, float value, ai_err *err);

// --- elementwise and row kernels (k_elementwise.cu) -----------------------------------------

/* out (n, dim) f32 = rows tokens[0..n) of the embedding table (n_vocab, dim) in any weight dtype
 * (planar layout for quantized). Token ids are checked on the host by the caller. */
ai_status cuk_embed(cuk_stream s, float *out, const cuk_weight *table, const int32_t *tokens, int32_t n,
                    ai_err *err);
/* out (rows, dim) = in / sqrt(mean(in^2) + eps) * w; w (dim) f32 or NULL; out may alias in. */
ai_status cuk_rmsnorm(cuk_stream s, float *out, const float *in, const float *w, int32_t rows, int32_t dim,
                      float eps, ai_err *err);
/* x (rows, dim) += delta; then out = rmsnorm(x) * w (the residual add fused with the next norm). */
ai_status cuk_add_rmsnorm(cuk_stream s, float *x, const float *delta, float *out, const float *w, int32_t rows,
                          int32_t dim, float eps, ai_err *err);
/* The split rmsnorm (backend_mm_opts in_ss / out_*) as kernels of their own, where the product
 * cannot fuse it: xn (rows, dim) = y * w and sum(y[r]^2) in double added to ss's lane 0 of row r;
 * out (rows, dim) = x / sqrt(ss_r / dim + eps), ss_r the sum of row r's lanes (ss: (rows,
 * BACKEND_SS_LANES)); out may alias x. */
ai_status cuk_norm_split_out(cuk_stream s, float *xn, double *ss, const float *y, const float *w, int32_t rows,
                             int32_t dim, ai_err *err);
ai_status cuk_norm_split_in(cuk_stream s, float *out, const float *x, const double *ss, int32_t rows, int32_t dim,
                            float eps, ai_err *err);
/* x[i] += y[i], i < n. */
ai_status cuk_add(cuk_stream s, float *x, const float *y, int64_t n, ai_err *err);
/* y (rows, n) += b (n) for each row; rows are row_stride floats apart. */
ai_status cuk_add_bias(cuk_stream s, float *y, const float *b, int32_t rows, int32_t n, int64_t row_stride,
                       ai_err *err);
/* RoPE in place on x (n_tok rows, row_stride floats apart; n_heads heads of head_dim at h * head_dim),
 * rotating the first rope_dim dims of each head at position pos[t] (device, per token).
 * theta_i = pos * freq_scale * base^(-2i / rope_dim) / (factors ? factors[i] : 1), i < rope_dim / 2.
 * neox = 0: pairs (x[2i], x[2i+1]) (llama.cpp's NORM); neox = 1: pairs (x[i], x[i + rope_dim/2]).
 * factors: device (rope_dim / 2) f32 or NULL. Same math as model_rope (src/model/ops.c). */
ai_status cuk_rope(cuk_stream s, float *x, int32_t n_tok, int32_t n_heads, int64_t row_stride, int32_t head_dim,
                   int32_t rope_dim, const int32_t *pos, float base, float freq_scale, const float *factors,
                   int neox, ai_err *err);
/* cuk_rope on q (n_head heads) and k (n_head_kv heads), then cuk_kv_store of k and v (v rows are
 * n_head_kv * head_dim_v wide): the three in one launch, one block per (token, head). The arguments
 * (heads, positions, cache, slots) are backend_rope_kv's (include/aiinfra/backend.h). */
typedef backend_rope_kv cuk_rope_kv;
ai_status cuk_rope_store(cuk_stream s, float *q, int64_t q_stride, float *k, int64_t k_stride, const float *v,
                         int64_t v_stride, int32_t n_tok, const cuk_rope_kv *rk, ai_err *err);
/* out[i] = silu(gate[i]) * up[i] = gate / (1 + exp(-gate)) * up, i < n; out may alias gate. */
ai_status cuk_swiglu(cuk_stream s, float *out, const float *gate, const float *up, int64_t n, ai_err *err);
/* out (rows, n) = silu(gu[r, 0:n]) * gu[r, n:2n]: the output of a stacked gate|up weight. */
ai_status cuk_swiglu_rows(cuk_stream s, float *out, const float *gu, int32_t rows, int32_t n, ai_err *err);
/* Writes n_tok new K and V rows into a paged cache. k: (n_tok, kvd) rows k_stride floats apart,
 * v: (n_tok, kvdv) rows v_stride apart; cache row `slot[t]` (= block * block_size + offset) of
 * k_cache (num_slots, kvd) and v_cache (num_slots, kvdv), converted to kv_type (DTYPE_F16, DTYPE_F32, or
 * DTYPE_F8_E4M3: fp8(x / k_scale) and fp8(v / v_scale), nearest even, saturated; the scales are ignored
 * otherwise). slot[t] < 0 skips the token (padding). */
ai_status cuk_kv_store(cuk_stream s, void *k_cache, void *v_cache, dtype kv_type, float k_scale, float v_scale,
                       const float *k, int64_t k_stride, const float *v, int64_t v_stride, int32_t n_tok, int32_t kvd,
                       int32_t kvdv, const int32_t *slot, ai_err *err);
/* out (n, dim) = rows idx[0..n) of in (*, dim). */
ai_status cuk_gather_rows(cuk_stream s, float *out, const float *in, const int32_t *idx, int32_t n, int32_t dim,
                          ai_err *err);

// --- matrix products (k_gemv.cu, gemm.cu) ----------------------------------------------------

/* Owns the cuBLASLt handle and its cached plans. One per stream user; not thread-safe. */
typedef struct cuk_gemm cuk_gemm;
ai_status cuk_gemm_init(cuk_gemm **out, ai_err *err);
void cuk_gemm_free(cuk_gemm *g);
/* on = 1: until called with 0, each cuBLASLt plan of <= 512 tokens (batched decode) used for the
 * first time is tuned: its heuristic candidates are timed on the call's operands and the fastest is
 * kept (synchronizes; never inside a graph capture). For warm-up runs only (the backend turns it on
 * for the eager first run of a decode graph key). AIINFRA_GEMM_TUNE=0 keeps the heuristic's pick. */
void cuk_gemm_tuning(cuk_gemm *g, int on);
/* Scratch bytes cuk_matmul needs for this weight and up to max_tok rows (bf16 copies of the
 * activations, dequantized weight tiles, the cuBLASLt workspace). */
size_t cuk_matmul_work_size(const cuk_weight *w, int64_t max_tok);
/* y (n_tok, n_out) f32 = x (n_tok, n_in) f32 . W^T. Small n_tok (decode) runs our GEMV kernels,
 * which read each weight byte once and dequantize in registers; large n_tok runs a tensor-core
 * GEMM (cuBLASLt where ours is not yet faster). work: cuk_matmul_work_size bytes. */
ai_status cuk_matmul(cuk_gemm *g, cuk_stream s, const cuk_weight *w, const float *x, int64_t n_tok, float *y,
                     void *work, size_t work_size, ai_err *err);
/* The GEMV path alone (1 <= n_tok <= CUK_GEMV_MAX_TOK), for tests and benchmarks. */
#define CUK_GEMV_MAX_TOK 16
/* Float weights (bf16, f16) run cuBLASLt from cuk_matmul_lt_min_tok(g, type) tokens on, also below
 * CUK_GEMV_MAX_TOK: CUK_LT_MIN_TOK, or AIINFRA_LT_MIN_TOK for A/B runs (read by cuk_gemm_init for g;
 * g NULL: read now); other types never below. cuk_matmul_runs_gemv: whether cuk_matmul(_ex) with g of
 * this weight and n_tok runs the GEMV. Why from 5 (where cuk_gemv would switch to its tensor-core
 * kernel, CUK_GEMV_MMA_MIN_TOK): Llama-3-8B bf16 steps, one H100 call (2026-12-06), our GEMV ->
 * cuBLASLt with the runner's fused 16-bit prologue: batch 8 7.160 / 7.178 -> 6.651 / 6.651 ms, batch 16
 * 8.680 / 8.687 -> 6.936 / 7.005 (docs/gpu.md). With the skinny wgmma GEMM on (k_skinny.cu; AIINFRA_SKINNY
 * = 1 / 0, else CUK_SKINNY_DEFAULT) bf16 weights run it from CUK_SKINNY_MIN_TOK tokens instead: H100,
 * 2026-12-06, batch 4 5.985 -> 5.729 ms against our GEMV, batch 1 5.485 -> 5.544 (so not there), batch
 * 5 / 8 4-5% faster than cuBLASLt, 12 / 16 even; with the f32 x path (2026-12-06, eighth and ninth
 * sessions) batch 2 343.0-343.6 -> 345.7-347.5 tok/s and batch 3 500.6-501.7 -> 512.3-512.8 against our
 * GEMV, batch 4 / 8 3.5% / 4.9% faster than before; batch 1 stays on the GEMV (5.485 -> 5.544 ms
 * there). On by default since test_skinny passed in full on the GPU (memcheck and racecheck clean). */
#define CUK_LT_MIN_TOK 5
#define CUK_SKINNY_MIN_TOK 2
/* ... up to CUK_SKINNY_MAX_TOK tokens; cuBLASLt above. H200, 2026-12-06 (tenth session), ms/step skinny /
 * cuBLASLt: batch 6 4.668 / 4.718, 8 4.893-4.902 / 4.910-4.985, 10 5.044 / 4.815, 12 5.217 / 4.796, 16
 * 5.554-5.580 / 4.961-4.965 (the H100 had 12 and 16 even). */
#define CUK_SKINNY_MAX_TOK 8
#define CUK_SKINNY_DEFAULT 1
int cuk_matmul_lt_min_tok(const cuk_gemm *g, dtype t);
bool cuk_matmul_runs_gemv(const cuk_gemm *g, const cuk_weight *w, int64_t n_tok);
/* Whether cuk_matmul_ex does the split norm (in_ss, out_*) inside its kernels at n_tok: the GEMVs and
 * the skinny GEMM do (in their stores), cuBLASLt does not (AI_ERR_UNSUPPORTED: the caller composes it
 * with cuk_norm_split_in / _out). w->n_in 0: any row length. */
bool cuk_matmul_fuses_split_norm(const cuk_gemm *g, const cuk_weight *w, int64_t n_tok);
ai_status cuk_gemv(cuk_stream s, const cuk_weight *w, const float *x, int32_t n_tok, float *y, ai_err *err);

/* Fused variants (backend_mm_opts, include/aiinfra/backend.h; o NULL = the plain call):
 *   o->norm_w:    input = rmsnorm(x) * norm_w, x (n_tok, n_in): each GEMV CTA multiplies x by norm_w
 *                 as it loads it, sums x^2 on the side and scales its dot products by
 *                 1 / sqrt(mean(x^2) + eps) at the end (the scale is one number per token row);
 *   o->swiglu_in: x (n_tok, 2 n_in) gate|up rows, input = silu(gate) * up, computed while loading;
 *   o->accumulate: y += product (one thread owns each y element: no atomics);
 *   o->swiglu_out: y (n_tok, n_out / 2) = silu(gate rows' product) * up rows' product, fused only where
 *                 cuk_gemv_glu_fused says (the float GEMVs, no prologue); cuk_matmul_ex and cuk_gemv_ex
 *                 refuse it elsewhere (AI_ERR_UNSUPPORTED) and the CUDA backend composes it then;
 *   o->rope_kv:   y rows are q|k|v; rotated and stored as cuk_rope_store does, fused only where
 *                 cuk_gemv_rope_fused says (the float GEMVs, no prologue; in_ss allowed), refused
 *                 elsewhere like swiglu_out.
 * Where cuk_matmul_ex runs cuBLASLt (!cuk_matmul_runs_gemv) the prologue is a kernel that writes the
 * GEMM's 16-bit input into the work area (f32 weights: cuk_rmsnorm / cuk_swiglu_rows), then the GEMM,
 * with beta = 1 when accumulating. cuk_matmul_work_size covers both. */
typedef backend_mm_opts cuk_mm_opts;
ai_status cuk_matmul_ex(cuk_gemm *g, cuk_stream s, const cuk_weight *w, const float *x, int64_t n_tok, float *y,
                        const cuk_mm_opts *o, void *work, size_t work_size, ai_err *err);
ai_status cuk_gemv_ex(cuk_stream s, const cuk_weight *w, const float *x, int32_t n_tok, float *y, const cuk_mm_opts *o,
                      ai_err *err);
bool cuk_gemv_glu_fused(const cuk_weight *w, const float *x, int32_t n_tok, const cuk_mm_opts *o);
bool cuk_gemv_rope_fused(const cuk_weight *w, const float *x, int32_t n_tok, const cuk_mm_opts *o);

// --- attention over a paged KV cache (k_attention.cu) ----------------------------------------

/* A batch of n_seq sequences with n_tok query tokens in all. Sequence s owns query rows
 * [q_start[s], q_start[s+1]) and, after this step's cuk_kv_store, keys 0 .. seq_len[s]-1; its
 * query rows are its LAST q_len = q_start[s+1] - q_start[s] positions: row q_start[s] + j sits at
 * position seq_len[s] - q_len + j and attends causally to keys 0 .. that position.
 * Key j of sequence s is cache row block_tables[s * max_blocks + j / block_size] * block_size
 * + j % block_size of k_cache (num_slots, n_head_kv, head_dim) and v_cache (num_slots, n_head_kv,
 * head_dim_v). GQA: query head h reads kv head h / (n_head / n_head_kv).
 * Decode is q_len = 1 for every sequence; prefill chunks and decode tokens may be mixed. */
typedef backend_attn cuk_attn_args; /* fields (include/aiinfra/backend.h):
 *   out (n_tok, n_head * head_dim_v); q (n_tok, q_stride), head h at h * head_dim;
 *   k_cache, v_cache; kv_type (DTYPE_F16, DTYPE_F32 or DTYPE_F8_E4M3, whose elements read as code *
 *   k_scale / v_scale); block_tables (n_seq, max_blocks);
 *   q_start (n_seq + 1); seq_len (n_seq); n_seq, n_tok; max_blocks (columns of block_tables);
 *   max_q_len (host bound on any q_len, 1 for pure decode); max_seq_len (host bound on any seq_len,
 *   <= max_blocks * block_size); n_head, n_head_kv, head_dim, head_dim_v, block_size; scale
 *   (usually 1 / sqrt(head_dim)); work, work_size (cuk_attention_work_size bytes: split-KV partials
 *   and counters; zero-fill work once after allocating it, every call leaves the counters zero) */

/* May be called with bounds only (NULL pointers): the result covers any call with <= n_seq
 * sequences, the same heads, and any context. */
size_t cuk_attention_work_size(const cuk_attn_args *a);
ai_status cuk_attention(cuk_stream s, const cuk_attn_args *a, ai_err *err);
/* The kernel cuk_attention would run for a (valid) a: "decode", "fa2" (FlashAttention-2 prefill,
 * f16 or fp8 cache), "fa3" (the Hopper prefill, f16 cache only: where it supports a and
 * max_q_len >= 1024, or AIINFRA_PREFILL=fa3 asks; AIINFRA_PREFILL=fa2 never) or "generic". For tests and
 * benchmarks that must know which path they measured. */
const char *cuk_attention_path(const cuk_attn_args *a);

// --- sampling (k_sample.cu) ------------------------------------------------------------------

/* out[r] = argmax of logits row r (n_rows, n_vocab); ties go to the lowest index. */
ai_status cuk_argmax(cuk_stream s, const float *logits, int32_t n_rows, int32_t n_vocab, int32_t *out,
                     ai_err *err);

/* Per-row sampling parameters (device array of n_rows). temperature < 1e-5 (SAMPLER_GREEDY_EPS)
 * means greedy. top_k <= 0: off; top_p >= 1: off; min_p <= 0: off. u: a uniform number in [0, 1)
 * drawn by the host's seeded RNG, so a run is reproducible. Order as src/engine/sampler.c: scale by
 * 1/temperature; top_k, then top_p on the softmax of the top-k set, then min_p (p / p_max >= min_p);
 * the kept set is the shortest of the three prefixes of the order (logit desc, id asc); pick by u
 * over the renormalised set in that order. out[r] = -1 for a row with a NaN or +inf logit or with
 * every logit -inf (cuk_argmax: -1 on NaN). */
typedef backend_sample_params cuk_sample_params; /* {temperature, top_p, min_p, u; top_k} */

size_t cuk_sample_work_size(int32_t n_rows, int32_t n_vocab); /* 0 today: work may be NULL */
/* Without a full sort of the vocabulary. */
ai_status cuk_sample(cuk_stream s, const float *logits, int32_t n_rows, int32_t n_vocab,
                     const cuk_sample_params *params, int32_t *out, void *work, size_t work_size, ai_err *err);

#ifdef __cplusplus
}
#endif

#endif
