/* cuda_bench.h - what the CUDA benchmarks share (bench/bench_cuda_*.c): error checks that exit, the median,
 * median timing of a graph replay with CUDA events, and the copy-bandwidth ceiling measured in the same run
 * (plain device-to-device stream copies of 2 GiB, bytes read + written; a memcpy node inside a graph
 * measured only ~2.8 of the ~4.3 TB/s, so the ceiling is never taken from a graph). */
#ifndef AIINFRA_CUDA_BENCH_H
#define AIINFRA_CUDA_BENCH_H

#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#define CK(call)                                                                                  \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)
/* For calls that report through an ai_err named `err` in scope. */
#define AI(call)                                                                   \
    do {                                                                           \
        if ((call) != AI_OK) {                                                     \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, err.msg); \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

static int bench_cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static inline float median(float *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_f);
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

/* Median ms of one replay of graph g over reps runs (after 3 warm-up replays). */
static inline float time_graph(cudaGraphExec_t g, cudaStream_t s, int reps)
{
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 3; i++) CK(cudaGraphLaunch(g, s));
    float *t = malloc(sizeof(float) * (size_t)reps);
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(a, s));
        CK(cudaGraphLaunch(g, s));
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&t[i], a, b));
    }
    float m = median(t, reps);
    free(t);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return m;
}

/* Ends the capture running on s, then the median ms of one replay of the captured graph (time_graph). */
static inline float time_capture(cudaStream_t s, int reps)
{
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    const float ms = time_graph(ge, s, reps);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return ms;
}

/* Bytes/s of a 2 GiB device-to-device copy (read + written), median of reps after 3 warm-ups. */
static inline double copy_bandwidth(cudaStream_t s, int reps)
{
    const size_t n = (size_t)2 << 30;
    void *a, *b;
    CK(cudaMalloc(&a, n));
    CK(cudaMalloc(&b, n));
    CK(cudaMemset(a, 0x5A, n));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; i++) CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, s));
    float *t = malloc(sizeof(float) * (size_t)reps);
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(e0, s));
        CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&t[i], e0, e1));
    }
    const float ms = median(t, reps);
    free(t);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    return 2.0 * (double)n / (ms * 1e-3);
}

#endif
