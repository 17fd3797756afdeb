/* gemm.h - the GEMM ladder: C = A x B on the GPU, bf16 in, fp32 accumulate, bf16 out, from a naive
 * kernel to Hopper wgmma + TMA with warp specialisation, 2-CTA clusters and stream-K.
 *
 * Layout: row-major A (M, K), B (K, N), C (M, N), no leading-dimension padding. Every version has
 * the same C interface so the ladder driver (src/kernels/ladder_gemm.c) and the tests
 * (tests/unit/test_cuda_ladder_gemm.c) run them all alike:
 *   fn(stream, A, B, C, M, N, K, work, work_size) -> 0 (cudaSuccess) or a cudaError_t value
 *     stream  a cudaStream_t (void * so this header needs no CUDA include)
 *     work    device scratch of gemm_work_size(M, N, K) bytes (only the stream-K versions v11..v13
 *             use it: partial tiles and counters; the others ignore it). Its contents need no
 *             initialisation and are garbage afterwards; one call at a time per buffer.
 * Invariants: 1. M, N, K >= 1, A, B, C non-NULL, C distinct from A and B; otherwise
 * cudaErrorInvalidValue and nothing is launched; so is a work buffer smaller than gemm_work_size
 * (stream-K versions). 2. Versions with `align8` set (v4..v13: 16-byte
 * vector loads, cp.async, TMA) also need K % 8 == 0, N % 8 == 0 and A, B, C 16-byte aligned (every
 * row then starts on a 16-byte boundary); they refuse other shapes the same way. M, N, K need not
 * be multiples of any tile in any version. 3. Every version is asynchronous on the stream, writes
 * every element of C exactly once and is deterministic (fixed summation order per element).
 */
#ifndef AIINFRA_KERNELS_GEMM_H
#define AIINFRA_KERNELS_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t bf16; /* bits of a bfloat16 (the high half of an IEEE binary32) */

typedef int (*gemm_fn)(void *stream, const bf16 *A, const bf16 *B, bf16 *C, int M, int N, int K, void *work,
                       size_t work_size);

typedef struct gemm_version {
    const char *name; /* "v1_naive" ... */
    const char *desc; /* one line: what this step changes */
    gemm_fn fn;
    bool align8;      /* needs K % 8 == 0, N % 8 == 0, 16-byte aligned A, B, C */
} gemm_version;

extern const gemm_version gemm_versions[];
extern const int gemm_n_versions;

/* Scratch bytes every version needs for this shape on the current device (the maximum over the
 * versions; 0 when no version needs any; up to ~34 MB at 132 SMs). */
size_t gemm_work_size(int M, int N, int K);

/* true when version v accepts the shape and pointers (the invariants above). */
bool gemm_version_accepts(const gemm_version *v, const void *A, const void *B, const void *C, int M, int N, int K);

#ifdef __cplusplus
}
#endif

#endif
