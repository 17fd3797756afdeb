/* ladder_reduce.c - the reduce ladder's driver part (kernels in reduce/reduce.cu): one fp32 array
 * uniform in [-1, 1), the sum in double as reference, error |sum - ref| / sum |x_i| (ladder.h).
 * Bytes: 4n (each element read once); FLOPs: n adds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/ladder_internal.h"
#include "kernels/reduce/reduce.h"

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

static ai_status reduce_shape(ladder_ctx *c, int64_t n, void *dx, void *dout, void *work, float *hx, ai_err *err)
{
    double ref = 0, mag = 0;
    for (int64_t i = 0; i < n; i++) {
        hx[i] = ladder_rng_uniform(&c->rng);
        ref += hx[i];
        mag += fabs(hx[i]);
    }
    LADDER_CU(cudaMemcpy(dx, hx, (size_t)n * sizeof(float), cudaMemcpyHostToDevice), "reduce input upload");
    reduce_call rc = { .s = c->s, .x = dx, .n = n, .out = dout, .work = work, .work_size = reduce_work_size(n) };
    for (int v = 0; v < reduce_n_versions; v++) {
        rc.v = &reduce_versions[v];
        LADDER_CU(cudaMemsetAsync(dout, 0xFF, sizeof(float), c->s), "poison output");
        LADDER_CU((cudaError_t)reduce_call_run(&rc), rc.v->name);
        float got = 0;
        LADDER_CU(cudaMemcpyAsync(&got, dout, sizeof got, cudaMemcpyDeviceToHost, c->s), "reduce output download");
        LADDER_CU(cudaStreamSynchronize(c->s), rc.v->name);
        char shape[48];
        snprintf(shape, sizeof shape, "n=%lld", (long long)n);
        ladder_result *r = ladder_add_row(c, "reduce", rc.v->name, rc.v->desc, shape, "f32", err);
        if (!r) return AI_ERR_NOMEM;
        r->err = isnan(got) ? NAN : fabs((double)got - ref) / (mag > 0 ? mag : 1.0);
        r->tol = LADDER_TOL_F32;
        r->bytes = 4.0 * (double)n;
        r->flops = (double)n;
        ai_status st = ladder_time(c, reduce_call_run, &rc, &r->ms, err);
        if (st != AI_OK) return ai_err_prefix(err, "reduce %s", rc.v->name);
        ladder_fill_rates(r, c->rep);
    }
    return AI_OK;
}

ai_status ladder_reduce(ladder_ctx *c, ai_err *err)
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
