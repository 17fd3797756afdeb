/* ladder_softmax.c - the softmax ladder's driver part (kernels in softmax/softmax.cu): rows of
 * inputs uniform in [-4, 4), per-row reference in double (stored as float), error = worst row's
 * ||y - ref|| / ||ref||. Each shape runs the fp32 versions, then the bf16 ones on the bf16-rounded
 * input. Bytes: input + output once; FLOPs: 5 per element. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "aiinfra/dtype.h"
#include "kernels/ladder_internal.h"
#include "kernels/softmax/softmax.h"

typedef struct softmax_call {
    const softmax_version *v;
    cudaStream_t s;
    const void *x;
    void *y;
    int rows, cols;
} softmax_call;

static int softmax_call_run(const void *arg)
{
    const softmax_call *r = arg;
    return r->v->fn(r->s, r->x, r->y, r->rows, r->cols);
}

/* Reference rows (double math, stored as float) for inputs hx (already rounded to bf16 where bf16). */
static void softmax_ref(const float *hx, float *ref, int rows, int cols)
{
    for (int r = 0; r < rows; r++) {
        const float *x = hx + (int64_t)r * cols;
        float *y = ref + (int64_t)r * cols;
        double m = -INFINITY, d = 0;
        for (int i = 0; i < cols; i++) m = x[i] > m ? x[i] : m;
        for (int i = 0; i < cols; i++) d += exp((double)x[i] - m);
        for (int i = 0; i < cols; i++) y[i] = (float)(exp((double)x[i] - m) / d);
    }
}

static double softmax_err(const float *y, const float *ref, int rows, int cols)
{
    double worst = 0;
    for (int r = 0; r < rows; r++) {
        double num = 0, den = 0;
        for (int i = 0; i < cols; i++) {
            const double g = y[(int64_t)r * cols + i], w = ref[(int64_t)r * cols + i];
            if (isnan(g)) return NAN;
            num += (g - w) * (g - w);
            den += w * w;
        }
        const double e = sqrt(num / (den > 0 ? den : 1));
        worst = e > worst ? e : worst;
    }
    return worst;
}

typedef struct softmax_bufs {
    float *hx, *ref, *hy;
    uint16_t *h16;
    void *dx, *dy;
} softmax_bufs;

static ai_status softmax_shape(ladder_ctx *c, int rows, int cols, softmax_bufs *b, ai_err *err)
{
    const int64_t n = (int64_t)rows * cols;
    for (int precision = 0; precision < 2; precision++) { /* 0: fp32 versions, 1: bf16 versions */
        ladder_reseed(c, (uint64_t)n);
        for (int64_t i = 0; i < n; i++) b->hx[i] = 4.0f * ladder_rng_uniform(&c->rng);
        if (precision) {
            dtype_f32_to_bf16_row(b->hx, b->h16, n);
            dtype_bf16_to_f32_row(b->h16, b->hx, n); /* the reference sees the rounded input */
            LADDER_CU(cudaMemcpy(b->dx, b->h16, (size_t)n * 2, cudaMemcpyHostToDevice), "softmax input upload");
        } else {
            LADDER_CU(cudaMemcpy(b->dx, b->hx, (size_t)n * 4, cudaMemcpyHostToDevice), "softmax input upload");
        }
        softmax_ref(b->hx, b->ref, rows, cols);
        for (int v = 0; v < softmax_n_versions; v++) {
            const softmax_version *sv = &softmax_versions[v];
            if (sv->bf16 != precision) continue;
            const size_t esz = sv->bf16 ? 2 : 4;
            softmax_call sc = { .v = sv, .s = c->s, .x = b->dx, .y = b->dy, .rows = rows, .cols = cols };
            LADDER_CU(cudaMemsetAsync(b->dy, 0xFF, (size_t)n * esz, c->s), "poison output");
            LADDER_CU((cudaError_t)softmax_call_run(&sc), sv->name);
            LADDER_CU(cudaStreamSynchronize(c->s), sv->name);
            if (sv->bf16) {
                LADDER_CU(cudaMemcpy(b->h16, b->dy, (size_t)n * 2, cudaMemcpyDeviceToHost), "softmax output download");
                dtype_bf16_to_f32_row(b->h16, b->hy, n);
            } else {
                LADDER_CU(cudaMemcpy(b->hy, b->dy, (size_t)n * 4, cudaMemcpyDeviceToHost), "softmax output download");
            }
            char shape[48];
            snprintf(shape, sizeof shape, "%dx%d", rows, cols);
            ladder_result *r = ladder_add_row(c, "softmax", sv->name, sv->desc, shape, sv->bf16 ? "bf16" : "f32", err);
            if (!r) return AI_ERR_NOMEM;
            r->err = softmax_err(b->hy, b->ref, rows, cols);
            r->tol = sv->bf16 ? LADDER_TOL_BF16 : LADDER_TOL_F32;
            r->bytes = 2.0 * (double)esz * (double)n;
            r->flops = 5.0 * (double)n;
            ai_status st = ladder_time(c, softmax_call_run, &sc, &r->ms, err);
            if (st != AI_OK) return ai_err_prefix(err, "softmax %s %dx%d", sv->name, rows, cols);
            ladder_fill_rates(r, c->rep);
        }
    }
    return AI_OK;
}

ai_status ladder_softmax(ladder_ctx *c, ai_err *err)
{
    /* Full runs: 32M elements per shape (128 MiB of fp32 in, as much out: well beyond the L2). */
    static const int big[][2] = { { 32768, 1024 }, { 8192, 4096 }, { 1024, 32768 } };
    static const int small[][2] = { { 7, 1000 }, { 5, 4097 }, { 2, 32768 } };
    const int(*shapes)[2] = c->o->small ? small : big;
    int64_t maxn = 0;
    for (int i = 0; i < 3; i++) maxn = (int64_t)shapes[i][0] * shapes[i][1] > maxn ? (int64_t)shapes[i][0] * shapes[i][1] : maxn;
    softmax_bufs b = { 0 };
    b.hx = malloc((size_t)maxn * sizeof(float));
    b.ref = malloc((size_t)maxn * sizeof(float));
    b.hy = malloc((size_t)maxn * sizeof(float));
    b.h16 = malloc((size_t)maxn * sizeof(uint16_t));
    ai_status st = AI_OK;
    cudaError_t e = b.hx && b.ref && b.hy && b.h16 ? cudaMalloc(&b.dx, (size_t)maxn * 4) : cudaErrorMemoryAllocation;
    if (e == cudaSuccess) e = cudaMalloc(&b.dy, (size_t)maxn * 4);
    if (e != cudaSuccess) st = ai_err_set(err, AI_ERR_NOMEM, "softmax buffers: %s", cudaGetErrorString(e));
    for (int i = 0; i < 3 && st == AI_OK; i++) st = softmax_shape(c, shapes[i][0], shapes[i][1], &b, err);
    cudaFree(b.dx);
    cudaFree(b.dy);
    free(b.hx);
    free(b.ref);
    free(b.hy);
    free(b.h16);
    return st;
}
