/* reduce.h - the reduce ladder: sum of an fp32 array on the GPU, from naive to bandwidth-bound.
 *
 * Every version has the same C interface so the ladder driver (src/kernels/ladder.c) and the tests
 * (tests/unit/test_cuda_ladders.c) can run them all alike:
 *   fn(stream, x, n, out, work, work_size) -> 0 (cudaSuccess) or a cudaError_t value
 *     stream     a cudaStream_t (passed as void * so this header needs no CUDA include)
 *     x          n device floats (any 4-byte alignment)
 *     out        one device float, written with the sum (never read)
 *     work       device scratch of at least reduce_work_size(n) bytes (contents need not be set)
 * Invariants: 1. n >= 1 (n <= 0 is refused with cudaErrorInvalidValue). 2. Every version is
 * asynchronous on the stream and launches nothing else. 3. Versions v2..v7 are deterministic: the
 * same x gives the same bits on every call (v1's atomics are not).
 */
#ifndef AIINFRA_KERNELS_REDUCE_H
#define AIINFRA_KERNELS_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int (*reduce_fn)(void *stream, const float *x, int64_t n, float *out, void *work, size_t work_size);

typedef struct reduce_version {
    const char *name; /* "v1_atomic" ... */
    const char *desc; /* one line: what this step changes */
    reduce_fn fn;
} reduce_version;

extern const reduce_version reduce_versions[];
extern const int reduce_n_versions;

/* Scratch bytes every version needs for n elements (the maximum over the versions). */
size_t reduce_work_size(int64_t n);

#ifdef __cplusplus
}
#endif

#endif
