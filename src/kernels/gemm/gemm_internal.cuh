/* gemm_internal.cuh - what the GEMM kernel files (gemm_simt.cu, gemm_mma.cu, gemm_hopper.cu,
 * gemm_cluster.cu) share:
 * the bf16 type, argument checks and each version's host entry point (gemm.cu lists them). */
#ifndef AIINFRA_KERNELS_GEMM_INTERNAL_CUH
#define AIINFRA_KERNELS_GEMM_INTERNAL_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/gemm/gemm.h"

typedef __nv_bfloat16 gbf; /* device view of bf16 */

__host__ __device__ static inline int gemm_cdiv(int a, int b) { return (a + b - 1) / b; }

/* 0 when the arguments satisfy gemm.h's invariants (align8: the vector/TMA ones too). */
static inline int gemm_check(const void *A, const void *B, const void *C, int M, int N, int K, bool align8)
{
    if (!A || !B || !C || M < 1 || N < 1 || K < 1 || C == A || C == B) return (int)cudaErrorInvalidValue;
    if (align8 && (K % 8 || N % 8 || ((uintptr_t)A | (uintptr_t)B | (uintptr_t)C) % 16)) return (int)cudaErrorInvalidValue;
    return 0;
}

/* Stores one or two adjacent outputs of row r (c even; the pair only when c + 1 < N, then 4-byte
 * aligned because N is even in every caller that passes pairs). */
__device__ __forceinline__ void gemm_store2(gbf *C, int M, int N, int r, int c, float x, float y)
{
    if (r >= M || c >= N) return;
    gbf *p = C + (size_t)r * N + c;
    if (c + 1 < N && !(N & 1)) {
        *(__nv_bfloat162 *)p = __floats2bfloat162_rn(x, y);
    } else {
        p[0] = __float2bfloat16(x);
        if (c + 1 < N) p[1] = __float2bfloat16(y);
    }
}

#define GEMM_RUN_ARGS void *stream, const bf16 *A, const bf16 *B, bf16 *C, int M, int N, int K, void *work, size_t work_size
int gemm_run_v1(GEMM_RUN_ARGS);
int gemm_run_v2(GEMM_RUN_ARGS);
int gemm_run_v3(GEMM_RUN_ARGS);
int gemm_run_v4(GEMM_RUN_ARGS);
int gemm_run_v5(GEMM_RUN_ARGS);
int gemm_run_v6(GEMM_RUN_ARGS);
int gemm_run_v7(GEMM_RUN_ARGS);
int gemm_run_v8(GEMM_RUN_ARGS);
int gemm_run_v9(GEMM_RUN_ARGS);
int gemm_run_v10(GEMM_RUN_ARGS);
int gemm_run_v11(GEMM_RUN_ARGS);
int gemm_run_v12(GEMM_RUN_ARGS);
int gemm_run_v13(GEMM_RUN_ARGS);
size_t gemm_streamk_work_size(int M, int N, int K); /* v11..v13's scratch (gemm_streamk.cu) */

#endif
