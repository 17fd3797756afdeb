/* ladder.c - the kernel-ladder driver (see ladder.h): inputs, references, checks, timing, ceiling.
 *
 * Per op and shape: random inputs from a seeded xorshift (reduce: uniform [-1, 1); softmax: [-4, 4)),
 * one CPU reference in double (softmax rows stored rounded to float: 6e-8 relative, far below the
 * bounds), then per version: poison the output (0xFF bytes = NaN), run once, copy back and measure the
 * error (an unwritten element is NaN and fails), then 2 warm-up calls and `reps` timed calls, each
 * preceded by a 256 MiB memset that evicts the 50 MiB L2 so the input comes from HBM. The copy
 * ceiling is measured once per ladder_run with plain stream copies (a copy inside a CUDA graph
 * measures lower, see bench/cuda_bench.h; this file cannot use that header because its errors exit).
 * Invariants: 1. every CUDA error becomes an ai_err naming the call; all buffers are freed on every
 * path. 2. The timed region holds exactly one call of the version under test.
 */
#include "kernels/ladder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef AIINFRA_CUDA
#include <cuda_runtime_api.h>

#include "aiinfra/dtype.h"
#include "kernels/reduce/reduce.h"
#include "kernels/softmax/softmax.h"
#endif

void ladder_report_free(ladder_report *rep)
{
    if (!rep) return;
    free(rep->rows);
    memset(rep, 0, sizeof *rep);
}

#ifndef AIINFRA_CUDA

bool ladder_device_available(char *why, size_t len)
{
    if (why && len) snprintf(why, len, "built without CUDA (no nvcc at build time)");
    return false;
}

ai_status ladder_run(const char *op, const ladder_opts *o, ladder_report *rep, ai_err *err)
{
    (void)op, (void)o, (void)rep;
    return ai_err_set(err, AI_ERR_UNSUPPORTED, "kernel ladders: built without CUDA");
}

#else

bool ladder_device_available(char *why, size_t len)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess && n > 0) return true;
    if (why && len)
        snprintf(why, len, "no CUDA device (%s)", e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    return false;
}

#define FLUSH_BYTES ((size_t)256 << 20)

typedef struct ctx {
    const ladder_opts *o;
    ladder_report *rep;
    cudaStream_t s;
    cudaEvent_t a, b;
    void *flush;
    float *times;
    uint64_t rng;
} ctx;

#define CU(call, what)                                                                              \
    do {                                                                                            \
        cudaError_t e_ = (call);                                                                    \
        if (e_ != cudaSuccess)                                                                      \
            return ai_err_set(err, AI_ERR_RUNTIME, "%s: %s (%s)", (what), cudaGetErrorString(e_),   \
                              cudaGetErrorName(e_));                                                \
    } while (0)

static float rng_uniform(uint64_t *s) /* [-1, 1) */
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (float)((*s * 0x2545F4914F6CDD1DULL) >> 40) / (float)(1 << 23) - 1.0f;
}

static int cmp_float(const void *x, const void *y)
{
    float p = *(const float *)x, q = *(const float *)y;
    return (p > q) - (p < q);
}

static ladder_result *add_row(ladder_report *rep, ai_err *err)
{
    if (rep->n_rows == rep->cap) {
        int cap = rep->cap ? 2 * rep->cap : 16;
        ladder_result *r = realloc(rep->rows, (size_t)cap * sizeof *r);
        if (!r) return NULL;
        rep->rows = r;
        rep->cap = cap;
    }
    ladder_result *r = &rep->rows[rep->n_rows++];
    memset(r, 0, sizeof *r);
    return r;
}

static void fill_rates(ladder_result *r, const ladder_report *rep)
{
    const double sec = r->ms * 1e-3;
    r->gbps = sec > 0 ? r->bytes / sec / 1e9 : 0;
    r->gflops = sec > 0 ? r->flops / sec / 1e9 : 0;
    r->intensity = r->bytes > 0 ? r->flops / r->bytes : 0;
    r->frac_copy = rep->copy_gbps > 0 ? r->gbps / rep->copy_gbps : 0;
    r->ok = r->err <= r->tol; /* NaN compares false */
}

typedef int (*call_fn)(const void *arg);

/* Median ms over reps timed calls of call(arg), L2 flushed before each, 2 warm-ups first. */
static ai_status time_calls(ctx *c, call_fn call, const void *arg, double *ms, ai_err *err)
{
    const int reps = c->o->reps;
    for (int i = 0; i < 2; i++) CU((cudaError_t)call(arg), "warm-up call");
    for (int i = 0; i < reps; i++) {
        CU(cudaMemsetAsync(c->flush, i & 0xFF, FLUSH_BYTES, c->s), "L2 flush");
        CU(cudaEventRecord(c->a, c->s), "cudaEventRecord");
        CU((cudaError_t)call(arg), "timed call");
        CU(cudaEventRecord(c->b, c->s), "cudaEventRecord");
        CU(cudaEventSynchronize(c->b), "cudaEventSynchronize");
        CU(cudaEventElapsedTime(&c->times[i], c->a, c->b), "cudaEventElapsedTime");
    }
    qsort(c->times, (size_t)reps, sizeof *c->times, cmp_float);
    *ms = reps % 2 ? c->times[reps / 2] : 0.5 * (c->times[reps / 2 - 1] + c->times[reps / 2]);
    return AI_OK;
}

static ai_status copy_ceiling(ctx *c, ai_err *err)
{
    const size_t n = c->o->small ? (size_t)64 << 20 : (size_t)2 << 30;
    void *x = NULL, *y = NULL;
    cudaError_t e = cudaMalloc(&x, n);
    if (e == cudaSuccess) e = cudaMalloc(&y, n);
    if (e == cudaSuccess) e = cudaMemsetAsync(x, 0x5A, n, c->s);
    for (int i = 0; i < 3 && e == cudaSuccess; i++) e = cudaMemcpyAsync(y, x, n, cudaMemcpyDeviceToDevice, c->s);
    for (int i = 0; i < c->o->reps && e == cudaSuccess; i++) {
        e = cudaEventRecord(c->a, c->s);
        if (e == cudaSuccess) e = cudaMemcpyAsync(y, x, n, cudaMemcpyDeviceToDevice, c->s);
        if (e == cudaSuccess) e = cudaEventRecord(c->b, c->s);
        if (e == cudaSuccess) e = cudaEventSynchronize(c->b);
        if (e == cudaSuccess) e = cudaEventElapsedTime(&c->times[i], c->a, c->b);
    }
    cudaFree(x);
    cudaFree(y);
    CU(e, "copy ceiling (device-to-device copies)");
    const int reps = c->o->reps;
    qsort(c->times, (size_t)reps, sizeof *c->times, cmp_float);
    const double ms = reps % 2 ? c->times[reps / 2] : 0.5 * (c->times[reps / 2 - 1] + c->times[reps / 2]);
    c->rep->copy_gbps = 2.0 * (double)n / (ms * 1e-3) / 1e9;
    return AI_OK;
}

// ---- reduce -----------------------------------------------------------------------------------

typedef struct reduce_call {
    const reduce_version *v;
    cudaStream_t s;
    const float *x;
    int64_t n;
    float *out;
    void *work;
    size_t work_size;
} reduce_call;

static int reduce_call_run(const void *arg)
{
    const reduce_call *r = arg;
    return r->v->fn(r->s, r->x, r->n, r->out, r->work, r->work_size);
}

static ai_status reduce_shape(ctx *c, int64_t n, void *dx, void *dout, void *work, float *hx, ai_err *err)
{
    double ref = 0, mag = 0;
    for (int64_t i = 0; i < n; i++) {
        hx[i] = rng_uniform(&c->rng);
        ref += hx[i];
        mag += fabs(hx[i]);
    }
    CU(cudaMemcpy(dx, hx, (size_t)n * sizeof(float), cudaMemcpyHostToDevice), "reduce input upload");
    reduce_call rc = { .s = c->s, .x = dx, .n = n, .out = dout, .work = work, .work_size = reduce_work_size(n) };
    for (int v = 0; v < reduce_n_versions; v++) {
        rc.v = &reduce_versions[v];
        CU(cudaMemsetAsync(dout, 0xFF, sizeof(float), c->s), "poison output");
        CU((cudaError_t)reduce_call_run(&rc), rc.v->name);
        float got = 0;
        CU(cudaMemcpyAsync(&got, dout, sizeof got, cudaMemcpyDeviceToHost, c->s), "reduce output download");
        CU(cudaStreamSynchronize(c->s), rc.v->name);
        ladder_result *r = add_row(c->rep, err);
        if (!r) return ai_err_set(err, AI_ERR_NOMEM, "ladder: out of memory");
        snprintf(r->op, sizeof r->op, "reduce");
        snprintf(r->version, sizeof r->version, "%s", rc.v->name);
        snprintf(r->desc, sizeof r->desc, "%s", rc.v->desc);
        snprintf(r->shape, sizeof r->shape, "n=%lld", (long long)n);
        snprintf(r->dtype, sizeof r->dtype, "f32");
        r->err = isnan(got) ? NAN : fabs((double)got - ref) / (mag > 0 ? mag : 1.0);
        r->tol = LADDER_TOL_F32;
        r->bytes = 4.0 * (double)n;
        r->flops = (double)n;
        ai_status st = time_calls(c, reduce_call_run, &rc, &r->ms, err);
        if (st != AI_OK) return ai_err_prefix(err, "reduce %s", rc.v->name);
        fill_rates(r, c->rep);
    }
    return AI_OK;
}

static ai_status reduce_all(ctx *c, ai_err *err)
{
    const int64_t n = c->o->small ? 1000003 : (int64_t)1 << 26;
    void *dx = NULL, *dout = NULL, *work = NULL;
    float *hx = malloc((size_t)n * sizeof *hx);
    ai_status st = AI_OK;
    cudaError_t e = hx ? cudaMalloc(&dx, (size_t)n * sizeof(float)) : cudaErrorMemoryAllocation;
    if (e == cudaSuccess) e = cudaMalloc(&dout, sizeof(float));
    if (e == cudaSuccess) e = cudaMalloc(&work, reduce_work_size(n));
    if (e != cudaSuccess) st = ai_err_set(err, AI_ERR_NOMEM, "reduce buffers (n = %lld): %s", (long long)n, cudaGetErrorString(e));
    else st = reduce_shape(c, n, dx, dout, work, hx, err);
    cudaFree(dx);
    cudaFree(dout);
    cudaFree(work);
    free(hx);
    return st;
}

// ---- softmax ----------------------------------------------------------------------------------

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

static ai_status softmax_shape(ctx *c, int rows, int cols, softmax_bufs *b, ai_err *err)
{
    const int64_t n = (int64_t)rows * cols;
    for (int precision = 0; precision < 2; precision++) { /* 0: fp32 versions, 1: bf16 versions */
        c->rng = (c->rng ^ (uint64_t)n * 0x9E3779B97F4A7C15ULL) | 1; /* xorshift must not reach 0 */
        for (int64_t i = 0; i < n; i++) b->hx[i] = 4.0f * rng_uniform(&c->rng);
        if (precision) {
            dtype_f32_to_bf16_row(b->hx, b->h16, n);
            dtype_bf16_to_f32_row(b->h16, b->hx, n); /* the reference sees the rounded input */
            CU(cudaMemcpy(b->dx, b->h16, (size_t)n * 2, cudaMemcpyHostToDevice), "softmax input upload");
        } else {
            CU(cudaMemcpy(b->dx, b->hx, (size_t)n * 4, cudaMemcpyHostToDevice), "softmax input upload");
        }
        softmax_ref(b->hx, b->ref, rows, cols);
        for (int v = 0; v < softmax_n_versions; v++) {
            const softmax_version *sv = &softmax_versions[v];
            if (sv->bf16 != precision) continue;
            const size_t esz = sv->bf16 ? 2 : 4;
            softmax_call sc = { .v = sv, .s = c->s, .x = b->dx, .y = b->dy, .rows = rows, .cols = cols };
            CU(cudaMemsetAsync(b->dy, 0xFF, (size_t)n * esz, c->s), "poison output");
            CU((cudaError_t)softmax_call_run(&sc), sv->name);
            CU(cudaStreamSynchronize(c->s), sv->name);
            if (sv->bf16) {
                CU(cudaMemcpy(b->h16, b->dy, (size_t)n * 2, cudaMemcpyDeviceToHost), "softmax output download");
                dtype_bf16_to_f32_row(b->h16, b->hy, n);
            } else {
                CU(cudaMemcpy(b->hy, b->dy, (size_t)n * 4, cudaMemcpyDeviceToHost), "softmax output download");
            }
            ladder_result *r = add_row(c->rep, err);
            if (!r) return ai_err_set(err, AI_ERR_NOMEM, "ladder: out of memory");
            snprintf(r->op, sizeof r->op, "softmax");
            snprintf(r->version, sizeof r->version, "%s", sv->name);
            snprintf(r->desc, sizeof r->desc, "%s", sv->desc);
            snprintf(r->shape, sizeof r->shape, "%dx%d", rows, cols);
            snprintf(r->dtype, sizeof r->dtype, "%s", sv->bf16 ? "bf16" : "f32");
            r->err = softmax_err(b->hy, b->ref, rows, cols);
            r->tol = sv->bf16 ? LADDER_TOL_BF16 : LADDER_TOL_F32;
            r->bytes = 2.0 * (double)esz * (double)n;
            r->flops = 5.0 * (double)n;
            ai_status st = time_calls(c, softmax_call_run, &sc, &r->ms, err);
            if (st != AI_OK) return ai_err_prefix(err, "softmax %s %dx%d", sv->name, rows, cols);
            fill_rates(r, c->rep);
        }
    }
    return AI_OK;
}

static ai_status softmax_all(ctx *c, ai_err *err)
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

// ---- entry ------------------------------------------------------------------------------------

ai_status ladder_run(const char *op, const ladder_opts *opts, ladder_report *rep, ai_err *err)
{
    if (!op || !rep) return ai_err_set(err, AI_ERR_INVALID, "ladder_run: op and report required");
    const bool do_reduce = !strcmp(op, "reduce") || !strcmp(op, "all");
    const bool do_softmax = !strcmp(op, "softmax") || !strcmp(op, "all");
    if (!do_reduce && !do_softmax)
        return ai_err_set(err, AI_ERR_INVALID, "kernel ladder '%s': expected reduce, softmax or all", op);
    char why[160];
    if (!ladder_device_available(why, sizeof why)) return ai_err_set(err, AI_ERR_UNSUPPORTED, "%s", why);

    ladder_opts o = opts ? *opts : (ladder_opts){ 0 };
    if (o.reps <= 0) o.reps = 20;
    if (o.reps < 3) o.reps = 3;
    if (!o.seed) o.seed = 1;
    ctx c = { .o = &o, .rep = rep, .rng = o.seed * 0x9E3779B97F4A7C15ULL | 1 };
    struct cudaDeviceProp prop;
    int dev = 0;
    CU(cudaGetDevice(&dev), "cudaGetDevice");
    CU(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
    snprintf(rep->device, sizeof rep->device, "%s", prop.name);

    ai_status st = AI_OK;
    c.times = malloc((size_t)o.reps * sizeof *c.times);
    if (!c.times) return ai_err_set(err, AI_ERR_NOMEM, "ladder: out of memory");
    cudaError_t e = cudaStreamCreateWithFlags(&c.s, cudaStreamNonBlocking);
    bool have_s = e == cudaSuccess, have_a = false, have_b = false;
    if (e == cudaSuccess) have_a = (e = cudaEventCreate(&c.a)) == cudaSuccess;
    if (e == cudaSuccess) have_b = (e = cudaEventCreate(&c.b)) == cudaSuccess;
    if (e == cudaSuccess) e = cudaMalloc(&c.flush, FLUSH_BYTES);
    if (e != cudaSuccess) st = ai_err_set(err, AI_ERR_RUNTIME, "ladder set-up: %s", cudaGetErrorString(e));
    if (st == AI_OK) st = copy_ceiling(&c, err);
    if (st == AI_OK && do_reduce) st = reduce_all(&c, err);
    if (st == AI_OK && do_softmax) st = softmax_all(&c, err);
    cudaFree(c.flush);
    if (have_a) cudaEventDestroy(c.a);
    if (have_b) cudaEventDestroy(c.b);
    if (have_s) cudaStreamDestroy(c.s);
    free(c.times);
    return st;
}

#endif
