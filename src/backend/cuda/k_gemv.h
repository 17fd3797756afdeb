/* k_gemv.h - internal entry points of k_gemv.cu (benchmarks only; the model calls cuk_gemv). */
#ifndef AIINFRA_CUDA_K_GEMV_H
#define AIINFRA_CUDA_K_GEMV_H

#include "backend/cuda/cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CUK_GEMV_VARIANTS 8
/* Tuning variant v (0 = what cuk_gemv runs) of the n_tok = 1 kernel for bf16 or q4_0 weights
 * (n_in % 32 == 0); *name gets a short label (rows per block R, unroll U, load flavour). */
ai_status cuk_gemv_variant(cuk_stream s, const cuk_weight *w, const float *x, float *y, int v, const char **name,
                           ai_err *err);

/* The tensor-core bf16 GEMV (k_gemv_mma.cu): n_in % 32 == 0, 16-byte aligned weights and x. */
ai_status cuk_gemv_bf16_mma(cuk_stream s, const cuk_weight *w, const float *x, int32_t n_tok, float *y, ai_err *err);

/* cuk_gemv with the kernel family forced: path 0 = as cuk_gemv picks, 1 = CUDA cores (one pass
 * for all tokens), 2 = tensor cores (bf16 with n_in % 32 == 0 only; AI_ERR_INVALID otherwise),
 * 3 = one CUDA-core n_tok = 1 pass per token. For tests and benchmarks. */
ai_status cuk_gemv_path(cuk_stream s, const cuk_weight *w, const float *x, int32_t n_tok, float *y, int path,
                        ai_err *err);

/* Smallest n_tok for which cuk_gemv sends bf16 weights to the tensor cores (bench 2026-12-02:
 * CUDA cores ahead at n_tok <= 4 on the Llama-3-8B shapes overall, tensor cores 1.4-2.3x ahead at 8). */
#define CUK_GEMV_MMA_MIN_TOK 5
/* Smallest n_tok for which q4_0/q4_1 run one n_tok = 1 pass per token instead of the multi-token
 * CUDA-core kernel, whose f32 x traffic per 4.5-bit weight made it 6x slower than that at n_tok 4
 * (bench 2026-12-02). A tensor-core kernel for quantized weights is the real fix. */
#define CUK_GEMV_Q4_LOOP_MIN_TOK 2

#ifdef __cplusplus
}
#endif

#endif
