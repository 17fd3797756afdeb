/* ladder.c - the kernel-ladder driver (see ladder.h): the op table, timing, the copy ceiling.
 *
 * Per op and shape (ladder_<op>.c): random inputs from a seeded xorshift, one CPU reference in double,
 * then per version: poison the output (0xFF bytes = NaN), run once, copy back and measure the error
 * (an unwritten element is NaN and fails), then 2 warm-up calls and `reps` timed calls, each preceded
 * by a 256 MiB memset that evicts the 50 MiB L2 so the input comes from HBM. The copy ceiling is
 * measured once per ladder_run with plain stream copies (a copy inside a CUDA graph measures lower,
 * see bench/cuda_bench.h; this file cannot use that header because its errors exit).
 * Invariants: 1. every CUDA error becomes an ai_err naming the call; all buffers are freed on every
 * path. 2. The timed region holds exactly one call of the version under test.
 */
#include "kernels/ladder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef AIINFRA_CUDA
#include "kernels/ladder_internal.h"
#endif

static const char *const op_names[] = { LADDER_OPS };
#define N_OPS ((int)(sizeof op_names / sizeof op_names[0]))

bool ladder_op_known(const char *op)
{
    if (!op) return false;
    if (!strcmp(op, "all")) return true;
    for (int i = 0; i < N_OPS; i++)
        if (!strcmp(op, op_names[i])) return true;
    return false;
}

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

/* The ladders, in LADDER_OPS order. */
static ai_status (*const op_fns[])(ladder_ctx *, ai_err *) = { ladder_reduce, ladder_softmax, ladder_attention };
_Static_assert(sizeof op_fns / sizeof op_fns[0] == sizeof op_names / sizeof op_names[0], "one function per op name");

#define CU LADDER_CU

float ladder_rng_uniform(uint64_t *s)
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

void ladder_reseed(ladder_ctx *c, uint64_t salt)
{
    c->rng = (c->rng ^ salt * 0x9E3779B97F4A7C15ULL) | 1; /* xorshift must not reach 0 */
}

ladder_result *ladder_add_row(ladder_ctx *c, const char *op, const char *version, const char *desc,
                              const char *shape, const char *dtype, ai_err *err)
{
    ladder_report *rep = c->rep;
    if (rep->n_rows == rep->cap) {
        int cap = rep->cap ? 2 * rep->cap : 16;
        ladder_result *r = realloc(rep->rows, (size_t)cap * sizeof *r);
        if (!r) {
            ai_err_set(err, AI_ERR_NOMEM, "ladder: out of memory");
            return NULL;
        }
        rep->rows = r;
        rep->cap = cap;
    }
    ladder_result *r = &rep->rows[rep->n_rows++];
    memset(r, 0, sizeof *r);
    snprintf(r->op, sizeof r->op, "%s", op);
    snprintf(r->version, sizeof r->version, "%s", version);
    snprintf(r->desc, sizeof r->desc, "%s", desc);
    snprintf(r->shape, sizeof r->shape, "%s", shape);
    snprintf(r->dtype, sizeof r->dtype, "%s", dtype);
    return r;
}

void ladder_fill_rates(ladder_result *r, const ladder_report *rep)
{
    const double sec = r->ms * 1e-3;
    r->gbps = sec > 0 ? r->bytes / sec / 1e9 : 0;
    r->gflops = sec > 0 ? r->flops / sec / 1e9 : 0;
    r->intensity = r->bytes > 0 ? r->flops / r->bytes : 0;
    r->frac_copy = rep->copy_gbps > 0 ? r->gbps / rep->copy_gbps : 0;
    r->frac_ref = r->ref_ms > 0 && r->ms > 0 ? r->ref_ms / r->ms : 0;
    r->ok = r->err <= r->tol; /* NaN compares false */
}

ai_status ladder_time(ladder_ctx *c, ladder_call_fn call, const void *arg, double *ms, ai_err *err)
{
    const int reps = c->o->reps;
    for (int i = 0; i < 2; i++) CU((cudaError_t)call(arg), "warm-up call");
    for (int i = 0; i < reps; i++) {
        CU(cudaMemsetAsync(c->flush, i & 0xFF, LADDER_FLUSH_BYTES, c->s), "L2 flush");
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

static ai_status copy_ceiling(ladder_ctx *c, ai_err *err)
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

// ---- entry ------------------------------------------------------------------------------------

ai_status ladder_run(const char *op, const ladder_opts *opts, ladder_report *rep, ai_err *err)
{
    if (!op || !rep) return ai_err_set(err, AI_ERR_INVALID, "ladder_run: op and report required");
    if (!ladder_op_known(op)) return ai_err_set(err, AI_ERR_INVALID, "kernel ladder '%s': unknown (see ladder.h)", op);
    char why[160];
    if (!ladder_device_available(why, sizeof why)) return ai_err_set(err, AI_ERR_UNSUPPORTED, "%s", why);

    ladder_opts o = opts ? *opts : (ladder_opts){ 0 };
    if (o.reps <= 0) o.reps = 20;
    if (o.reps < 3) o.reps = 3;
    if (!o.seed) o.seed = 1;
    ladder_ctx c = { .o = &o, .rep = rep, .rng = o.seed * 0x9E3779B97F4A7C15ULL | 1 };
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
    if (e == cudaSuccess) e = cudaMalloc(&c.flush, LADDER_FLUSH_BYTES);
    if (e != cudaSuccess) st = ai_err_set(err, AI_ERR_RUNTIME, "ladder set-up: %s", cudaGetErrorString(e));
    if (st == AI_OK) st = copy_ceiling(&c, err);
    for (int i = 0; i < N_OPS && st == AI_OK; i++)
        if (!strcmp(op, "all") || !strcmp(op, op_names[i])) st = op_fns[i](&c, err);
    cudaFree(c.flush);
    if (have_a) cudaEventDestroy(c.a);
    if (have_b) cudaEventDestroy(c.b);
    if (have_s) cudaStreamDestroy(c.s);
    free(c.times);
    return st;
}

#endif
