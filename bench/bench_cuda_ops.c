/* bench_cuda_ops.c - the memory-bound row kernels and the sampler against the copy ceiling.
 *
 *   build/bench/bench_cuda_ops [reps]
 *
 * rmsnorm and add_rmsnorm at (512, 4096), swiglu at 512 x 14336, argmax and cuk_sample at
 * (256, 128256). Each measurement is a CUDA graph of N launches over N distinct buffer sets
 * (N x bytes >= 256 MB, so L2 never serves the inputs), replayed `reps` times after warm-up; the
 * per-launch time is the median replay / N. Bandwidth counts the fewest bytes the op must move
 * (each input read once, each output written once) and is compared with the device-to-device copy
 * of a 2 GB buffer (read + written) measured in the same run. For the sampler the figure is the
 * time per call and the effective bandwidth of ONE read of the logits (it makes several passes).
 * Inputs are random, never zeros.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_kernels.h"

#include "cuda_bench.h"

static ai_err err;

/* n floats uniform in [-scale, scale) on the device, via a host buffer (random, not zeros). */
static float *dev_random(size_t n, uint64_t *seed, float scale)
{
    float *h = malloc(n * sizeof *h), *d;
    for (size_t i = 0; i < n; i++) {
        *seed ^= *seed >> 12; *seed ^= *seed << 25; *seed ^= *seed >> 27;
        h[i] = scale * ((float)((*seed * 0x2545F4914F6CDD1DULL) >> 40) / (float)(1 << 23) - 1.0f);
    }
    CK(cudaMalloc((void **)&d, n * sizeof *d));
    CK(cudaMemcpy(d, h, n * sizeof *d, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

enum { OP_RMS, OP_ADD_RMS, OP_SWIGLU, OP_ARGMAX, OP_SAMPLE };

typedef struct bench_case {
    const char *name;
    int op;
    int32_t rows, dim;
    cuk_sample_params sp;
} bench_case;

int main(int argc, char **argv)
{
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        printf("skipped: no CUDA device\n");
        return 0;
    }
    const int reps = argc > 1 ? atoi(argv[1]) : 25;
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    const double ceil_gbs = copy_bandwidth(s, reps);
    const bench_case cases[] = {
        { .name = "rmsnorm 512x4096", .op = OP_RMS, .rows = 512, .dim = 4096 },
        { .name = "add_rmsnorm 512x4096", .op = OP_ADD_RMS, .rows = 512, .dim = 4096 },
        { .name = "rmsnorm 16384x128 (head)", .op = OP_RMS, .rows = 16384, .dim = 128 },
        { .name = "swiglu 512x14336", .op = OP_SWIGLU, .rows = 512, .dim = 14336 },
        { .name = "argmax 256x128256", .op = OP_ARGMAX, .rows = 256, .dim = 128256 },
        { .name = "sample 256x128256 T1", .op = OP_SAMPLE, .rows = 256, .dim = 128256,
          .sp = { .temperature = 1, .top_p = 1 } },
        { .name = "sample 256x128256 p.95", .op = OP_SAMPLE, .rows = 256, .dim = 128256,
          .sp = { .temperature = 1, .top_p = 0.95f } },
        { .name = "sample 256x128256 k40 p.9", .op = OP_SAMPLE, .rows = 256, .dim = 128256,
          .sp = { .temperature = 0.7f, .top_p = 0.9f, .top_k = 40 } },
        { .name = "sample 1x128256 p.95", .op = OP_SAMPLE, .rows = 1, .dim = 128256,
          .sp = { .temperature = 1, .top_p = 0.95f } },
    };
    printf("copy ceiling (D2D 1 GB -> 1 GB, read + written): %.0f GB/s\n", ceil_gbs);
    printf("%-28s %10s %10s %8s\n", "op", "us/call", "GB/s", "of copy");
    uint64_t seed = 7;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const bench_case *bc = &cases[c];
        const size_t n = (size_t)bc->rows * bc->dim, bytes1 = n * sizeof(float);
        int sets = (int)((256u << 20) / bytes1);
        if (sets < 2) sets = 2;
        if (sets > 64) sets = 64;
        float **a = calloc((size_t)sets, sizeof *a), **b = calloc((size_t)sets, sizeof *b),
              **o = calloc((size_t)sets, sizeof *o);
        float *w = dev_random((size_t)bc->dim, &seed, 1);
        int32_t *ids;
        CK(cudaMalloc((void **)&ids, (size_t)bc->rows * sizeof *ids));
        cuk_sample_params *dp = NULL;
        if (bc->op == OP_SAMPLE) {
            cuk_sample_params *hp = malloc((size_t)bc->rows * sizeof *hp);
            for (int32_t r = 0; r < bc->rows; r++) {
                hp[r] = bc->sp;
                hp[r].u = (float)(r + 0.5) / (float)bc->rows;
            }
            CK(cudaMalloc((void **)&dp, (size_t)bc->rows * sizeof *dp));
            CK(cudaMemcpy(dp, hp, (size_t)bc->rows * sizeof *dp, cudaMemcpyHostToDevice));
            free(hp);
        }
        for (int k = 0; k < sets; k++) {
            a[k] = dev_random(n, &seed, bc->op >= OP_ARGMAX ? 4.0f : 2.0f);
            if (bc->op <= OP_SWIGLU) {
                b[k] = dev_random(n, &seed, 1);
                CK(cudaMalloc((void **)&o[k], bytes1));
            }
        }
        double bytes = 0;
        switch (bc->op) {
        case OP_RMS: bytes = 2.0 * bytes1; break;
        case OP_ADD_RMS: bytes = 4.0 * bytes1; break;
        case OP_SWIGLU: bytes = 3.0 * bytes1; break;
        default: bytes = (double)bytes1; break;
        }
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        for (int k = 0; k < sets; k++) {
            switch (bc->op) {
            case OP_RMS: AI(cuk_rmsnorm(s, o[k], a[k], w, bc->rows, bc->dim, 1e-5f, &err)); break;
            case OP_ADD_RMS: AI(cuk_add_rmsnorm(s, a[k], b[k], o[k], w, bc->rows, bc->dim, 1e-5f, &err)); break;
            case OP_SWIGLU: AI(cuk_swiglu(s, o[k], a[k], b[k], (int64_t)n, &err)); break;
            case OP_ARGMAX: AI(cuk_argmax(s, a[k], bc->rows, bc->dim, ids, &err)); break;
            case OP_SAMPLE: AI(cuk_sample(s, a[k], bc->rows, bc->dim, dp, ids, NULL, 0, &err)); break;
            }
        }
        const float ms = time_capture(s, reps) / (float)sets;
        CK(cudaGetLastError());
        const double gbs = bytes / (ms * 1e-3) / 1e9;
        printf("%-28s %10.2f %10.0f %7.1f%%\n", bc->name, ms * 1e3, gbs, 100.0 * gbs / ceil_gbs);
        for (int k = 0; k < sets; k++) {
            cudaFree(a[k]);
            if (b[k]) cudaFree(b[k]);
            if (o[k]) cudaFree(o[k]);
        }
        free(a); free(b); free(o);
        cudaFree(w);
        cudaFree(ids);
        if (dp) cudaFree(dp);
    }
    cudaStreamDestroy(s);
    return 0;
}
