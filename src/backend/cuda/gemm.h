/* gemm.h - internal entry points of gemm.cu (for tests and benchmarks; the model uses cuk_matmul).
 */
#ifndef AIINFRA_CUDA_GEMM_H
#define AIINFRA_CUDA_GEMM_H

#include "backend/cuda/cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cuk_matmul's tensor-core (cuBLASLt) path at any n_tok >= 1, bypassing the GEMV: the benchmark
 * compares our GEMV against it at decode sizes. Same arguments and scratch as cuk_matmul
 * (work: cuk_matmul_lt_work_size, which counts the GEMM scratch even for n_tok <= 16). */
size_t cuk_matmul_lt_work_size(const cuk_weight *w, int64_t max_tok);
ai_status cuk_matmul_lt(cuk_gemm *g, cuk_stream s, const cuk_weight *w, const float *x, int64_t n_tok, float *y,
                        void *work, size_t work_size, ai_err *err);

#ifdef __cplusplus
}
#endif

#endif
