/* cuda_test.h - shared by the CUDA tests (tests/unit/test_cuda_*.c, cmocka).
 *
 * Where no CUDA device is present (CI, dev machines) every GPU test skips, and the binary prints
 * one line saying why. Helpers: device buffers that fail the test on error, poisoned outputs
 * (0xFF bytes = NaN for f32/f16/bf16, so an element a kernel forgot to write fails the check),
 * seeded random inputs, and the relative error ||out - ref|| / ||ref|| against a double reference.
 */
#ifndef AIINFRA_CUDA_TEST_H
#define AIINFRA_CUDA_TEST_H

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <setjmp.h>
#include <cmocka.h>
#include <cuda_runtime_api.h>

static inline int cuda_test_device(void)
{
    static int have = -1;
    if (have < 0) {
        int n = 0;
        cudaError_t e = cudaGetDeviceCount(&n);
        have = e == cudaSuccess && n > 0;
        if (!have)
            printf("skipped: no CUDA device (%s) - GPU tests run on a GPU machine (scripts/gpu-check.sh)\n",
                   e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    }
    return have;
}
#define CUDA_TEST_REQUIRE()            \
    do {                               \
        if (!cuda_test_device()) skip(); \
    } while (0)

/* CUDA_TEST_FILTER=pattern (cmocka's: * and ? wildcards) runs only the tests whose names match, e.g.
 * one test under compute-sanitizer on the GPU machine. Call first in main. */
static inline void cuda_test_filter(void)
{
    const char *f = getenv("CUDA_TEST_FILTER");
    if (f && *f) cmocka_set_test_filter(f);
}

#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) fail_msg("%s: %s", #call, cudaGetErrorString(e_));                   \
    } while (0)

/* Device copy of n bytes of host data (h may be NULL: then poisoned). */
static inline void *cuda_test_dup(const void *h, size_t n)
{
    void *d = NULL;
    CUDA_OK(cudaMalloc(&d, n ? n : 1));
    if (h) CUDA_OK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    else CUDA_OK(cudaMemset(d, 0xFF, n));
    return d;
}
static inline void cuda_test_get(void *h, const void *d, size_t n)
{
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
}

/* xorshift64*: uniform floats in [-1, 1). */
static inline float cuda_test_randf(uint64_t *s)
{
    *s ^= *s >> 12; *s ^= *s << 25; *s ^= *s >> 27;
    return (float)((*s * 0x2545F4914F6CDD1DULL) >> 40) / (float)(1 << 23) - 1.0f;
}
static inline void cuda_test_fill(float *x, size_t n, uint64_t *s, float scale)
{
    for (size_t i = 0; i < n; i++) x[i] = scale * cuda_test_randf(s);
}

/* ||out - ref|| / ||ref||; NaN anywhere gives INFINITY. */
static inline double cuda_test_rel_err(const float *out, const double *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(out[i])) return INFINITY;
        double d = out[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

#endif
