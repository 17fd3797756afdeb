/* bench_skip.c - the no-op ops of `aiinfra bench --skip-ops` (bench_skip.h says why). */
#include "tools/bench_skip.h"

#include "tools/cli.h"

static ai_status skip_rmsnorm(void *ctx, float *out, const float *in, const float *w, int32_t rows, int32_t dim,
                              float eps, ai_err *err)
{
    (void)ctx, (void)out, (void)in, (void)w, (void)rows, (void)dim, (void)eps, (void)err;
    return AI_OK;
}

static ai_status skip_add_rmsnorm(void *ctx, float *x, const float *delta, float *out, const float *w, int32_t rows,
                                  int32_t dim, float eps, ai_err *err)
{
    (void)ctx, (void)x, (void)delta, (void)out, (void)w, (void)rows, (void)dim, (void)eps, (void)err;
    return AI_OK;
}

static ai_status skip_rope_store(void *ctx, float *q, int64_t q_stride, float *k, int64_t k_stride, const float *v,
                                 int64_t v_stride, int32_t n_tok, const backend_rope_kv *rk, ai_err *err)
{
    (void)ctx, (void)q, (void)q_stride, (void)k, (void)k_stride, (void)v, (void)v_stride, (void)n_tok, (void)rk;
    (void)err;
    return AI_OK;
}

static ai_status skip_attention(void *ctx, const backend_attn *a, ai_err *err)
{
    (void)ctx, (void)a, (void)err;
    return AI_OK;
}

static ai_status skip_swiglu(void *ctx, float *out, const float *gate, const float *up, int64_t n, ai_err *err)
{
    (void)ctx, (void)out, (void)gate, (void)up, (void)n, (void)err;
    return AI_OK;
}

static ai_status skip_swiglu_rows(void *ctx, float *out, const float *gu, int32_t rows, int32_t n, ai_err *err)
{
    (void)ctx, (void)out, (void)gu, (void)rows, (void)n, (void)err;
    return AI_OK;
}

bool bench_skip_parse(const char *v, unsigned *mask)
{
    static const cli_flag names[] = {
        {"norm", BENCH_SKIP_NORM}, {"rope", BENCH_SKIP_ROPE}, {"attn", BENCH_SKIP_ATTN}, {"swiglu", BENCH_SKIP_SWIGLU}};
    *mask = 0;
    return cli_parse_flags(v, names, sizeof names / sizeof names[0], mask) && *mask != 0;
}

void bench_skip_apply(backend_ops *ops, unsigned mask)
{
    if (mask & BENCH_SKIP_NORM) {
        ops->rmsnorm = skip_rmsnorm;
        ops->add_rmsnorm = skip_add_rmsnorm;
    }
    if (mask & BENCH_SKIP_ROPE) ops->rope_store = skip_rope_store;
    if (mask & BENCH_SKIP_ATTN) ops->attention = skip_attention;
    if (mask & BENCH_SKIP_SWIGLU) {
        ops->swiglu = skip_swiglu;
        ops->swiglu_rows = skip_swiglu_rows;
    }
}
