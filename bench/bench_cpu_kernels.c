/* bench_cpu_kernels.c - weight-streaming bandwidth of the CPU matvec per dtype, against memcpy.
 *
 * Decode is memory bound: y = W x reads every weight byte once and does ~2 flops per element, so
 * the figure of merit is weight bytes / second, compared with what the memory system gives a plain
 * memcpy measured in the same run (roofline). Each timed run walks round-robin over enough copies
 * of the weight matrix to exceed 3 x the LLC (>= 96 MiB), so the weights come from DRAM and the
 * pool's wake-up cost is amortised as in a real forward pass. Each figure is the median of `iters`.
 *
 * Also measures prefill tiling: one call with n_tok = 64 versus 64 calls with n_tok = 1.
 *
 *   bench_cpu_kernels [n_threads=2] [iters=7] [isa=best|scalar|avx2|avx512]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aiinfra/cpu_kernels.h"
#include "aiinfra/dtype.h"
#include "aiinfra/threadpool.h"

#define COLD_BYTES (96u << 20)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p) { fprintf(stderr, "out of memory (%zu bytes)\n", n); exit(1); }
    return p;
}

static uint64_t rng = 88172645463325252ull;
static float rndf(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)(rng >> 40) / 8388608.0f - 1.0f;
}

int main(int argc, char **argv)
{
    int n_threads = argc > 1 ? atoi(argv[1]) : 2;
    int iters = argc > 2 ? atoi(argv[2]) : 7;
    cpu_isa isa = cpu_isa_best();
    if (argc > 3 && strcmp(argv[3], "scalar") == 0) isa = CPU_ISA_SCALAR;
    if (argc > 3 && strcmp(argv[3], "avx2") == 0) isa = CPU_ISA_AVX2;
    if (argc > 3 && strcmp(argv[3], "avx512") == 0) isa = CPU_ISA_AVX512;
    if (iters < 1 || iters > 100 || !cpu_isa_available(isa)) { fprintf(stderr, "bad arguments\n"); return 2; }
    ai_err err;
    threadpool *pool;
    if (threadpool_init(&pool, n_threads, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    double *t = xmalloc(sizeof(double) * (size_t)iters);

    /* memcpy roofline: 256 MiB, bytes read + bytes written per second */
    size_t mc = 256u << 20;
    unsigned char *src = xmalloc(mc), *dst = xmalloc(mc);
    memset(src, 1, mc); memset(dst, 2, mc);
    for (int i = 0; i < iters; i++) {
        double t0 = now();
        memcpy(dst, src, mc);
        t[i] = now() - t0;
    }
    const double memcpy_gbs = 2.0 * (double)mc / median(t, iters) / 1e9;
    free(src); free(dst);
    printf("isa %s, threads %d, iters %d (median)\n", cpu_isa_name(isa), n_threads, iters);
    printf("memcpy: %.2f GB/s (read + write)\n", memcpy_gbs);
    printf("%-6s %-12s %10s %10s %10s %12s\n", "dtype", "shape", "MB", "ms", "GB/s", "vs memcpy");

    static const dtype types[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16, DTYPE_Q8_0, DTYPE_Q4_0, DTYPE_Q4_1};
    static const int64_t shapes[][2] = {{4096, 4096}, {14336, 4096}};
    for (size_t s = 0; s < 2; s++) {
        const int64_t n_out = shapes[s][0], n_in = shapes[s][1];
        float *row = xmalloc((size_t)n_in * sizeof *row);
        float *x = xmalloc((size_t)(64 * n_in) * sizeof *x);
        float *y = xmalloc((size_t)(64 * n_out) * sizeof *y);
        for (int64_t i = 0; i < 64 * n_in; i++) x[i] = rndf();
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            dtype wt = types[ti];
            size_t rb, ws;
            if (dtype_row_bytes(wt, n_in, &rb, &err) || cpu_matmul_work_size(wt, n_in, 64, &ws, &err)) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
            const size_t wbytes = rb * (size_t)n_out;
            const size_t copies = (COLD_BYTES + wbytes - 1) / wbytes;
            unsigned char *w = xmalloc(wbytes * copies), *work = xmalloc(ws ? ws : 1);
            for (int64_t r = 0; r < n_out; r++) {
                for (int64_t i = 0; i < n_in; i++) row[i] = rndf();
                dtype_quantize_row(wt, row, w + (size_t)r * rb, n_in, NULL);
            }
            for (size_t c = 1; c < copies; c++) memcpy(w + c * wbytes, w, wbytes);
            for (int i = 0; i < iters; i++) {
                double t0 = now();
                for (size_t c = 0; c < copies; c++) {
                    if (cpu_matmul(pool, isa, wt, w + c * wbytes, n_out, n_in, x, 1, y, work, ws, &err)) {
                        fprintf(stderr, "%s\n", err.msg);
                        return 1;
                    }
                }
                t[i] = (now() - t0) / (double)copies;
            }
            double dt = median(t, iters), mb = (double)wbytes / 1e6;
            char shape[32];
            snprintf(shape, sizeof shape, "%lldx%lld", (long long)n_out, (long long)n_in);
            printf("%-6s %-12s %10.1f %10.3f %10.2f %11.0f%%\n", dtype_name(wt), shape, mb, dt * 1e3,
                   mb / 1e3 / dt, 100.0 * mb / 1e3 / dt / memcpy_gbs);
            if (s == 0) {
                /* prefill: 64 tokens in one call vs 64 decode calls (weights warm in L3 after the
                 * first of those, which flatters the 64-call side) */
                int pi = iters < 3 ? iters : 3;
                double tp[3], td[3];
                for (int i = 0; i < pi; i++) {
                    double t0 = now();
                    cpu_matmul(pool, isa, wt, w, n_out, n_in, x, 64, y, work, ws, NULL);
                    tp[i] = now() - t0;
                    t0 = now();
                    for (int k = 0; k < 64; k++)
                        cpu_matmul(pool, isa, wt, w, n_out, n_in, x + k * n_in, 1, y + k * n_out, work, ws, NULL);
                    td[i] = now() - t0;
                }
                double a = median(tp, pi), b = median(td, pi);
                printf("       prefill 64 tok: %.1f ms in one call, %.1f ms as 64 calls (x%.2f)\n",
                       a * 1e3, b * 1e3, b / a);
            }
            free(w); free(work);
        }
        free(row); free(x); free(y);
    }
    free(t);
    threadpool_free(pool);
    return 0;
}
