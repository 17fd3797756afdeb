/* k_gemv.h - internal entry points of k_gemv.cu (benchmarks only; the model calls cuk_gemv). */
#ifndef AIINFRA_CUDA_K_GEMV_H
#define AIINFRA_CUDA_K_GEMV_H

#include "backend/cuda/cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CUK_GEMV_VARIANTS 8

/* The unstaged float/quantized-decoding GEMVs (k_gemv.cu) can prefetch the first bytes of their rows
 * into L2 before the PDL wait, so HBM streams while the previous kernel drains (gemv_pf_bytes;
 * AIINFRA_GEMV_PF = 0 off, 1 the first round of loads, 2 whole rows). */
#define CUK_GEMV_PF_DEFAULT 0
/* Tuning variant v (0 = what cuk_gemv runs) of the n_tok = 1 kernel for bf16 or q4_0 weights
 * (n_in % 32 == 0); *name gets a short label (rows per block R, unroll U, load flavour). */
ai_status cuk_gemv_variant(cuk_stream s, const cuk_weight *w, const float *x, float *y, int v, const char **name,
                           ai_err *err);

/* The bf16 skinny GEMM on wgmma + TMA (k_skinny.cu): y (n_tok, n_out) = (or += with accumulate)
 * bf16(x) (n_tok, n_in) . W^T, x f32 (rounded in the kernel), 1 <= n_tok <= 16; split: CTAs per
 * cluster sharing a row tile's k blocks (1, 2, 4, 8; 0 = cuk_skinny_split_pick). Weights and x
 * 16-byte aligned, n_in % 8 == 0.
 * cuk_matmul runs it (cfg 0, EARLY | EVICT) for bf16 weights at CUK_SKINNY_MIN_TOK..CUK_SKINNY_MAX_TOK tokens when
 * AIINFRA_SKINNY=1 at cuk_gemm_init, or CUK_SKINNY_DEFAULT (cuda_kernels.h; docs/gpu.md). */
ai_status cuk_skinny_bf16(cuk_stream s, const cuk_weight *w, const float *x, int32_t n_tok, float *y, int accumulate,
                          int split, ai_err *err);
int cuk_skinny_split_pick(int64_t n_out, int64_t n_in);
/* The same with a ring configuration (0 .. CUK_SKINNY_CFGS-1, k_skinny.cu's kCfgs: 64-column boxes
 * per stage x stages; 0 is cuk_skinny_bf16's), split 1/2/4/8, and CUK_SKINNY_* flags. */
#define CUK_SKINNY_CFGS 5
#define CUK_SKINNY_EARLY 1 /* the first stages' weights are requested before the PDL wait */
#define CUK_SKINNY_EVICT 2 /* weights loaded with an L2 evict-first policy */
ai_status cuk_skinny_bf16_cfg(cuk_stream s, const cuk_weight *w, const float *x, int32_t n_tok, float *y,
                              int accumulate, int split, int cfg, int flags, ai_err *err);
/* The same with matmul_ex options: accumulate and the split norm (in_ss, out_*); no prologue or
 * SwiGLU epilogue (cuk_matmul_ex runs the prologue first). */
ai_status cuk_skinny_bf16_ex(cuk_stream s, const cuk_weight *w, const float *x, int32_t n_tok, float *y,
                             const cuk_mm_opts *o, int split, int cfg, int flags, ai_err *err);

/* The tensor-core bf16 GEMV (k_gemv_mma.cu): n_in % 32 == 0, 16-byte aligned weights and x. */
ai_status cuk_gemv_bf16_mma(cuk_stream s, const cuk_weight *w, const float *x, int32_t n_tok, float *y,
                            const cuk_mm_opts *o, ai_err *err);

/* The same with the row-block / split-K shape forced (k_gemv_mma.cu): split 0 = one CTA per block of
 * 8 RG rows, RG by n_out (what cuk_gemv_bf16_mma ran before splits existed); 1 = RG 4 over clusters of
 * 2 CTAs, 2 = RG 8 over 4 CTAs. All compute the same function (split-K sums in a fixed order).
 * cuk_gemv_bf16_mma runs CUK_GEMV_MMA_SPLIT_DEFAULT (-1: cuk_gemv_mma_split_pick), or what
 * AIINFRA_GEMV_MMA_SPLIT says (A/B runs): a split number, or "auto" for the default pick. */
#define CUK_GEMV_MMA_SPLITS 3
#define CUK_GEMV_MMA_SPLIT_DEFAULT (-1)
ai_status cuk_gemv_bf16_mma_split(cuk_stream s, const cuk_weight *w, const float *x, int32_t n_tok, float *y,
                                  const cuk_mm_opts *o, int split, ai_err *err);
int cuk_gemv_mma_split_pick(int32_t n_tok);

/* cuk_gemv with the kernel family forced: path 0 = as cuk_gemv picks, 1 = CUDA cores with float
 * decoding (one pass for all tokens), 2 = tensor cores (bf16 with n_in % 32 == 0 only; AI_ERR_INVALID
 * otherwise), 3 = one float-decoding n_tok = 1 pass per token, 4 = int8 x and dp4a (q8_0/q4_0/q4_1
 * only; AI_ERR_INVALID otherwise). For tests and benchmarks. */
ai_status cuk_gemv_path(cuk_stream s, const cuk_weight *w, const float *x, int32_t n_tok, float *y, int path,
                        ai_err *err);
/* cuk_gemv_path with the fused prologue / epilogue of o (cuda_kernels.h; NULL = none). */
ai_status cuk_gemv_path_ex(cuk_stream s, const cuk_weight *w, const float *x, int32_t n_tok, float *y, int path,
                           const cuk_mm_opts *o, ai_err *err);

/* Smallest n_tok for which cuk_gemv sends bf16 weights to the tensor cores (bench 2026-12-02:
 * CUDA cores ahead at n_tok <= 4 on the Llama-3-8B shapes overall, tensor cores 1.4-2.3x ahead at 8). */
#define CUK_GEMV_MMA_MIN_TOK 5
/* Quantized weights with x rounded to int8 per 32-block in shared memory and dp4a products
 * (k_gemv_dp4a.cu; cuk_gemv's pick for q4_0/q4_1 at any n_tok and q8_0 from CUK_GEMV_Q8_DP4A_MIN_TOK,
 * when x fits).
 * rows (R, rows per warp) and unroll (U, loads in flight per lane and row) 0 = automatic; the
 * n_tok = 1 tuning pairs (1, 4), (1, 8), (2, 4), (2, 8), (4, 2), (4, 4) may be forced. early != 0:
 * the L2 prefetch of the first weight rows goes before cuk_pdl_wait (bench variant). x and data
 * 16-byte aligned, n_in % 32 == 0. */
ai_status cuk_gemv_dp4a(cuk_stream s, const cuk_weight *w, const float *x, int32_t n_tok, float *y, int rows,
                        int unroll, int early, ai_err *err);
/* cuk_gemv_dp4a with the fused prologue / epilogue of o (NULL = none): the norm / SwiGLU is applied to
 * x before its int8 rounding (the norm's 1 / rms scale after the dot products: rounding per 32-block
 * is scale-invariant). */
ai_status cuk_gemv_dp4a_ex(cuk_stream s, const cuk_weight *w, const float *x, int32_t n_tok, float *y, int rows,
                           int unroll, int early, const cuk_mm_opts *o, ai_err *err);
/* The dp4a kernel's x rounding as a kernel of its own (k_gemv_dp4a.cu): cuk_gemv_dp4a_quantize rounds
 * the fused input of o (NULL: x rows; o->swiglu_in: silu(g) * u of gate|up rows 2 n_in wide;
 * o->norm_w: x * norm_w, keeping the sum of x^2 for the 1 / rms) to int8 per 32-block, for weights of
 * type t (q8_0 / q4_0 / q4_1), into xq: cuk_gemv_dp4a_xq_bytes(n_in, n_tok) bytes in the dp4a kernel's
 * shared-memory layout. cuk_gemv_dp4a_xq runs the dp4a GEMV on it: each CTA copies x into shared
 * memory instead of rounding it; o->norm_w (not read, but non-NULL) and o->eps: scale by 1 / rms as
 * the norm prologue does; o->accumulate: y +=. x, xq, norm_w 16-byte aligned. */
size_t cuk_gemv_dp4a_xq_bytes(int64_t n_in, int32_t n_tok);
ai_status cuk_gemv_dp4a_quantize(cuk_stream s, dtype t, const float *x, int32_t n_tok, int64_t n_in,
                                 const cuk_mm_opts *o, void *xq, ai_err *err);
ai_status cuk_gemv_dp4a_xq(cuk_stream s, const cuk_weight *w, const void *xq, int32_t n_tok, float *y,
                           const cuk_mm_opts *o, ai_err *err);
/* cuk_gemv_ex with scratch (work, >= cuk_gemv_work_size(w, n_tok) bytes, 16-byte aligned; NULL = none):
 * where cuk_gemv_ex would run the dp4a kernel with a prologue in CUK_GEMV_SPLIT_DEFAULT (or
 * AIINFRA_GEMV_SPLIT, for A/B runs: bit 1 = SwiGLU, 2 = norm), it runs cuk_gemv_dp4a_quantize into work
 * and cuk_gemv_dp4a_xq instead (two launches: the fused prologue rounds x in every CTA).
 * Otherwise, or without enough work, exactly cuk_gemv_ex. The CUDA backend's decode path. */
#define CUK_GEMV_SPLIT_SWIGLU 1
#define CUK_GEMV_SPLIT_NORM 2
#define CUK_GEMV_SPLIT_DEFAULT CUK_GEMV_SPLIT_SWIGLU
size_t cuk_gemv_work_size(const cuk_weight *w, int32_t max_tok);
ai_status cuk_gemv_ex_work(cuk_stream s, const cuk_weight *w, const float *x, int32_t n_tok, float *y,
                           const cuk_mm_opts *o, void *work, size_t work_size, ai_err *err);
/* Quantized weights at 2-16 tokens on the int8 tensor cores (k_gemv_qmma.cu): on x rounded by
 * cuk_gemv_dp4a_quantize (xq), the dp4a kernel's per-block integer dot products and float scaling,
 * by mma.sync m16n8k32 (16 tokens in one pass up to n_in 8192, else passes of 8). o: accumulate,
 * norm_w (1 / rms from xq's sums, as cuk_gemv_dp4a_xq), the split norm; no swiglu_out or rope_kv.
 * cuk_gemv_qmma_ok: whether a kernel exists for w (its n_in / 32 blocks split evenly into an even
 * number per warp over 16 or 8 warps, at most 32 per warp; 16-byte aligned data).
 * cuk_gemv_ex_work sends quantized calls of cuk_gemv_qmma_min_tok() tokens or more here:
 * CUK_GEMV_QMMA_MIN_TOK, or AIINFRA_GEMV_QMMA_MIN (A/B runs; 0 or more than 16 = never). */
#define CUK_GEMV_QMMA_MIN_TOK 2
bool cuk_gemv_qmma_ok(const cuk_weight *w);
int cuk_gemv_qmma_min_tok(void);
ai_status cuk_gemv_qmma_xq(cuk_stream s, const cuk_weight *w, const void *xq, int32_t n_tok, float *y,
                           const cuk_mm_opts *o, ai_err *err);
/* Tokens per pass over W of cuk_gemv_dp4a for this n_in (16, 8, 4, 2, 1: x must fit in shared
 * memory); 0 when even one token does not fit (cuk_gemv then decodes to float: k_gemv.cu). */
int cuk_gemv_dp4a_max_tok(int64_t n_in);
/* Smallest n_tok for which q8_0 takes the dp4a kernel (q4_0/q4_1 take it at every n_tok): at n_tok 1
 * and 2 the float-decoding kernels were ahead on 4 of the 5 Llama-3-8B shapes, at 4 dp4a on 4 of 5
 * (two H200 runs, 2026-12-02). */
#define CUK_GEMV_Q8_DP4A_MIN_TOK 3
/* Where the dp4a kernel cannot run (x too long for shared memory): smallest n_tok for which q4_0/q4_1
 * run one float-decoding n_tok = 1 pass per token instead of the multi-token float kernel, whose f32
 * x traffic per 4.5-bit weight made it 6x slower than that at n_tok 4 (bench 2026-12-02). */
#define CUK_GEMV_Q4_LOOP_MIN_TOK 2

#ifdef __cplusplus
}
#endif

#endif
