/* ladder_attention.c - the attention ladder's driver part (kernels in the .cu files of attention/,
 * table in attention/attn_versions.cu): bf16 Q, K, V (b, h, s, d), Q and K uniform in [-2, 2) (peaked
 * softmax rows), V and dO in [-1, 1); reference in double on the bf16-rounded inputs.
 *
 * Forward rows (op "attention", versions v1..v4 and "cublas_unfused", the same-run library baseline
 * whose time is also each row's ref_ms): error = worst over the checked rows of
 * max_c |o_c - ref_c| / max_c |ref_c| (relative to the row's max |O|), and for versions that write lse
 * also |lse - ref| / max(1, |ref|); bound 2e-2 (bf16 output rounding is 2^-9, P goes through bf16 in v3).
 * Full runs check 2 heads (first and last) x 48 rows spread over s (row 0 and s - 1 included);
 * small runs check every row. FLOPs = 4 b h s^2 d (halved when causal); bytes = Q + K + V + O once.
 * Backward rows (versions *_bwd, same op): dQ, dK, dV against a double reference on 2 heads (all
 * heads in small runs), error per head max |g - ref| / max |ref| (not per row: a gradient row can be
 * exactly 0, causal dQ row 0, or nearly cancel, and fp32 / bf16-O rounding there is an absolute
 * error; see the test's header for the arithmetic), worst over the three; bound 1e-2. FLOPs = 2.5 x the
 * forward's (5 GEMMs instead of 2); bytes = Q, K, V, O, dO in, dQ, dK, dV out. O and lse come from v3.
 * A version is left out (no row) where its work (S) would exceed 4 GiB, one call takes over 200 ms, or
 * it does not serve the shape (v3_backend: causal only).
 * AIINFRA_ATTN_VERSIONS="v4,v3_fa2" (comma-separated name prefixes) keeps only the versions it names
 * (the cuBLASLt baseline always runs: it is every row's ref_ms), to spend less GPU time on one step.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aiinfra/dtype.h"
#include "kernels/attention/attention.h"
#include "kernels/ladder_internal.h"

#define ATTN_TOL 2e-2
#define ATTN_TOL_GRAD 1e-2
#define ATTN_MAX_S_BYTES ((double)(4ull << 30))
#define ATTN_MAX_CALL_MS 200.0
#define ATTN_CHECK_ROWS 48

typedef struct attn_shape {
    int b, h, s, d, causal;
} attn_shape;

typedef struct attn_call {
    const attn_version *v; /* NULL: the cuBLAS baseline */
    attn_cublas *lt;
    cudaStream_t s;
    attn_args a;
} attn_call;

static int attn_call_run(const void *arg)
{
    const attn_call *c = arg;
    return c->v ? c->v->fn(c->s, &c->a) : attn_cublas_run(c->lt, c->s, &c->a);
}

/* Device and host buffers for one shape; freed by attn_bufs_free. */
typedef struct attn_bufs {
    uint16_t *hq, *hk, *hv, *hg, *hout; /* bf16 host copies; hout: a downloaded output */
    float *hlse;
    void *dq, *dk, *dv, *dg, *dO, *ddq, *ddk, *ddv, *work;
    float *dlse;
    size_t work_size;
} attn_bufs;

static void attn_bufs_free(attn_bufs *b)
{
    free(b->hq), free(b->hk), free(b->hv), free(b->hg), free(b->hout), free(b->hlse);
    cudaFree(b->dq), cudaFree(b->dk), cudaFree(b->dv), cudaFree(b->dg), cudaFree(b->dO);
    cudaFree(b->ddq), cudaFree(b->ddk), cudaFree(b->ddv), cudaFree(b->work), cudaFree(b->dlse);
    memset(b, 0, sizeof *b);
}

// ---- reference (double) -------------------------------------------------------------------------

/* true unless AIINFRA_ATTN_VERSIONS is set and no comma-separated prefix in it starts name */
static bool version_wanted(const char *name)
{
    const char *f = getenv("AIINFRA_ATTN_VERSIONS");
    if (!f || !*f) return true;
    while (*f) {
        const size_t n = strcspn(f, ",");
        if (n && !strncmp(name, f, n)) return true;
        f += n + (f[n] == ',');
    }
    return false;
}

static double bfd(uint16_t x) { return (double)dtype_bf16_to_f32(x); }

/* Row i of head z: o (d) and lse. sc: s doubles of scratch. */
static void ref_fwd_row(const uint16_t *q, const uint16_t *k, const uint16_t *v, int s, int d, int causal,
                        double scale, int i, double *o, double *lse, double *sc)
{
    const int n = causal ? i + 1 : s;
    double m = -INFINITY, l = 0;
    for (int j = 0; j < n; j++) {
        double dot = 0;
        for (int c = 0; c < d; c++) dot += bfd(q[(size_t)i * d + c]) * bfd(k[(size_t)j * d + c]);
        sc[j] = scale * dot;
        m = sc[j] > m ? sc[j] : m;
    }
    for (int c = 0; c < d; c++) o[c] = 0;
    for (int j = 0; j < n; j++) {
        const double p = exp(sc[j] - m);
        l += p;
        for (int c = 0; c < d; c++) o[c] += p * bfd(v[(size_t)j * d + c]);
    }
    for (int c = 0; c < d; c++) o[c] /= l;
    *lse = m + log(l);
}

/* max_c |g_c - r_c| / max_c |r_c| for one row of d (NaN in g: NaN). */
static double row_err(const uint16_t *g, const double *r, int d)
{
    double num = 0, den = 0;
    for (int c = 0; c < d; c++) {
        const double x = bfd(g[c]);
        if (isnan(x)) return NAN;
        num = fmax(num, fabs(x - r[c]));
        den = fmax(den, fabs(r[c]));
    }
    return num / (den > 1e-30 ? den : 1e-30);
}

/* max_i |g_i - r_i| / max_i |r_i| over one head's n elements (NaN in g: NaN). */
static double head_err(const uint16_t *g, const double *r, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double x = bfd(g[i]);
        if (isnan(x)) return NAN;
        num = fmax(num, fabs(x - r[i]));
        den = fmax(den, fabs(r[i]));
    }
    return num / (den > 1e-30 ? den : 1e-30);
}

/* Gradients of one head (all rows) into gq, gk, gv (s x d each); p, dp: s x s scratch; o: s x d;
 * x: 4 x s x d doubles (the head's Q, K, V, dO converted once). */
static void ref_bwd_head(const uint16_t *q16, const uint16_t *k16, const uint16_t *v16, const uint16_t *g16, int s,
                         int d, int causal, double scale, double *gq, double *gk, double *gv, double *p, double *dp,
                         double *o, double *x)
{
    const size_t hs = (size_t)s * d;
    double *q = x, *k = x + hs, *v = x + 2 * hs, *g = x + 3 * hs;
    for (size_t i = 0; i < hs; i++) q[i] = bfd(q16[i]), k[i] = bfd(k16[i]), v[i] = bfd(v16[i]), g[i] = bfd(g16[i]);
    for (int i = 0; i < s; i++) {
        double lse;
        ref_fwd_row(q16, k16, v16, s, d, causal, scale, i, o + (size_t)i * d, &lse, dp + (size_t)i * s);
        for (int j = 0; j < s; j++) {
            const bool vis = !causal || j <= i;
            p[(size_t)i * s + j] = vis ? exp(dp[(size_t)i * s + j] - lse) : 0;
        }
    }
    memset(gq, 0, hs * sizeof *gq);
    memset(gk, 0, hs * sizeof *gk);
    memset(gv, 0, hs * sizeof *gv);
    for (int i = 0; i < s; i++) {
        const double *gi = g + (size_t)i * d, *qi = q + (size_t)i * d;
        double di = 0;
        for (int c = 0; c < d; c++) di += gi[c] * o[(size_t)i * d + c];
        for (int j = 0; j < s; j++) {
            const double pij = p[(size_t)i * s + j];
            if (pij == 0) continue;
            const double *vj = v + (size_t)j * d, *kj = k + (size_t)j * d;
            double dpij = 0;
            for (int c = 0; c < d; c++) dpij += gi[c] * vj[c];
            const double ds = pij * (dpij - di) * scale;
            for (int c = 0; c < d; c++) {
                gv[(size_t)j * d + c] += pij * gi[c];
                gk[(size_t)j * d + c] += ds * qi[c];
                gq[(size_t)i * d + c] += ds * kj[c];
            }
        }
    }
}

// ---- helpers ------------------------------------------------------------------------------------

static void fill_bf16(ladder_ctx *c, uint16_t *x, size_t n, float amp)
{
    for (size_t i = 0; i < n; i++) x[i] = dtype_f32_to_bf16(amp * ladder_rng_uniform(&c->rng));
}

/* One call timed alone (the size guard): ms, or *unsupported when the version does not serve the
 * shape (cudaErrorNotSupported, returned before any launch). */
static ai_status time_once(ladder_ctx *c, const attn_call *ac, double *ms, bool *unsupported, ai_err *err)
{
    LADDER_CU(cudaEventRecord(c->a, c->s), "cudaEventRecord");
    const int rc = attn_call_run(ac);
    *unsupported = rc == (int)cudaErrorNotSupported;
    if (*unsupported) return AI_OK;
    LADDER_CU((cudaError_t)rc, ac->v ? ac->v->name : "cublas_unfused");
    LADDER_CU(cudaEventRecord(c->b, c->s), "cudaEventRecord");
    LADDER_CU(cudaEventSynchronize(c->b), "cudaEventSynchronize");
    float f = 0;
    LADDER_CU(cudaEventElapsedTime(&f, c->a, c->b), "cudaEventElapsedTime");
    *ms = f;
    return AI_OK;
}

/* "b4h32 s4096 d128 c": c causal, f full (non-causal); fits the table's 18-wide shape column. */
static void shape_str(char *buf, size_t n, const attn_shape *sh)
{
    snprintf(buf, n, "b%dh%d s%d d%d %s", sh->b, sh->h, sh->s, sh->d, sh->causal ? "c" : "f");
}

static double fwd_flops(const attn_shape *sh)
{
    return 4.0 * sh->b * sh->h * (double)sh->s * sh->s * sh->d * (sh->causal ? 0.5 : 1.0);
}

static ai_status alloc_dev(void **p, size_t n, ai_err *err)
{
    LADDER_CU(cudaMalloc(p, n ? n : 1), "attention buffers");
    return AI_OK;
}

// ---- forward ------------------------------------------------------------------------------------

static ai_status attn_fwd_shape(ladder_ctx *c, const attn_shape *sh, attn_cublas *lt, ai_err *err)
{
    const size_t n = (size_t)sh->b * sh->h * sh->s * sh->d, nr = (size_t)sh->b * sh->h * sh->s;
    const int bh = sh->b * sh->h, s = sh->s, d = sh->d;
    const double scale = 1.0 / sqrt((double)d);
    char shape[48];
    shape_str(shape, sizeof shape, sh);
    attn_bufs b = { 0 };
    attn_args a = { .b = sh->b, .h = sh->h, .s = s, .d = d, .causal = sh->causal, .scale = (float)scale };
    size_t work = attn_cublas_work_size(&a);
    for (int v = 0; v < attn_n_versions; v++) {
        const size_t w = attn_versions[v].work_size(&a);
        if (attn_versions[v].bwd || (double)w > ATTN_MAX_S_BYTES) continue;
        work = w > work ? w : work;
    }
    ai_status st = AI_OK;
    b.hq = malloc(n * 2), b.hk = malloc(n * 2), b.hv = malloc(n * 2), b.hout = malloc(n * 2);
    b.hlse = malloc(nr * sizeof(float));
    if (!b.hq || !b.hk || !b.hv || !b.hout || !b.hlse) st = ai_err_set(err, AI_ERR_NOMEM, "attention: out of memory");
    if (st == AI_OK) st = alloc_dev(&b.dq, n * 2, err);
    if (st == AI_OK) st = alloc_dev(&b.dk, n * 2, err);
    if (st == AI_OK) st = alloc_dev(&b.dv, n * 2, err);
    if (st == AI_OK) st = alloc_dev(&b.dO, n * 2, err);
    if (st == AI_OK) st = alloc_dev((void **)&b.dlse, nr * sizeof(float), err);
    if (st == AI_OK) st = alloc_dev(&b.work, work, err);
    if (st != AI_OK) {
        attn_bufs_free(&b);
        return st;
    }
    ladder_reseed(c, (uint64_t)n * 31 + (uint64_t)sh->causal);
    fill_bf16(c, b.hq, n, 2.0f);
    fill_bf16(c, b.hk, n, 2.0f);
    fill_bf16(c, b.hv, n, 1.0f);
    cudaError_t e = cudaMemcpy(b.dq, b.hq, n * 2, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(b.dk, b.hk, n * 2, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(b.dv, b.hv, n * 2, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        attn_bufs_free(&b);
        LADDER_CU(e, "attention input upload");
    }
    a.q = b.dq, a.k = b.dk, a.v = b.dv, a.o = b.dO, a.work = b.work, a.work_size = work;

    /* the checked rows and their reference */
    const bool all = c->o->small;
    const int n_heads = all ? bh : (bh > 1 ? 2 : 1), n_rows = all || s <= ATTN_CHECK_ROWS ? s : ATTN_CHECK_ROWS;
    double *ro = malloc((size_t)n_heads * n_rows * d * sizeof *ro), *rl = malloc((size_t)n_heads * n_rows * sizeof *rl);
    double *sc = malloc((size_t)s * sizeof *sc);
    int *rows = malloc((size_t)n_rows * sizeof *rows);
    if (!ro || !rl || !sc || !rows) st = ai_err_set(err, AI_ERR_NOMEM, "attention: out of memory");
    for (int i = 0; st == AI_OK && i < n_rows; i++)
        rows[i] = n_rows == s ? i : (int)((int64_t)i * (s - 1) / (n_rows - 1));
    for (int hi = 0; st == AI_OK && hi < n_heads; hi++) {
        const int z = all ? hi : hi * (bh - 1);
        const size_t hb = (size_t)z * s * d;
        for (int i = 0; i < n_rows; i++)
            ref_fwd_row(b.hq + hb, b.hk + hb, b.hv + hb, s, d, sh->causal, scale, rows[i],
                        ro + ((size_t)hi * n_rows + i) * d, rl + (size_t)hi * n_rows + i, sc);
    }

    double ref_ms = 0;
    for (int v = -1; st == AI_OK && v < attn_n_versions; v++) { /* -1: the cuBLAS baseline, first */
        const attn_version *av = v < 0 ? NULL : &attn_versions[v];
        if (av && (av->bwd || (double)av->work_size(&a) > ATTN_MAX_S_BYTES || !version_wanted(av->name))) continue;
        attn_call ac = { .v = av, .lt = lt, .s = c->s, .a = a };
        ac.a.lse = av && av->lse ? b.dlse : NULL;
        e = cudaMemsetAsync(b.dO, 0xFF, n * 2, c->s);
        if (e == cudaSuccess) e = cudaMemsetAsync(b.dlse, 0xFF, nr * sizeof(float), c->s);
        if (e != cudaSuccess) {
            st = ai_err_set(err, AI_ERR_RUNTIME, "poison: %s", cudaGetErrorString(e));
            break;
        }
        double once = 0;
        bool unsupported = false;
        st = time_once(c, &ac, &once, &unsupported, err);
        if (st != AI_OK) break;
        if (unsupported || once > ATTN_MAX_CALL_MS) continue;
        e = cudaMemcpy(b.hout, b.dO, n * 2, cudaMemcpyDeviceToHost);
        if (e == cudaSuccess) e = cudaMemcpy(b.hlse, b.dlse, nr * sizeof(float), cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) {
            st = ai_err_set(err, AI_ERR_RUNTIME, "attention output download: %s", cudaGetErrorString(e));
            break;
        }
        double worst = 0;
        for (int hi = 0; hi < n_heads; hi++) {
            const int z = all ? hi : hi * (bh - 1);
            for (int i = 0; i < n_rows; i++) {
                const size_t r = (size_t)z * s + rows[i];
                double eo = row_err(b.hout + r * d, ro + ((size_t)hi * n_rows + i) * d, d);
                if (ac.a.lse) {
                    const double ref = rl[(size_t)hi * n_rows + i];
                    const double el = fabs((double)b.hlse[r] - ref) / fmax(1.0, fabs(ref));
                    eo = isnan(eo) || isnan(el) ? NAN : fmax(eo, el);
                }
                worst = isnan(eo) || isnan(worst) ? NAN : fmax(worst, eo);
            }
        }
        ladder_result *r = ladder_add_row(c, "attention", av ? av->name : "cublas_unfused",
                                          av ? av->desc : "cuBLASLt S = QK^T, mask, softmax v6 bf16, cuBLASLt O = PV",
                                          shape, "bf16", err);
        if (!r) {
            st = AI_ERR_NOMEM;
            break;
        }
        r->err = worst;
        r->tol = ATTN_TOL;
        r->bytes = 4.0 * (double)n * 2;
        r->flops = fwd_flops(sh);
        st = ladder_time(c, attn_call_run, &ac, &r->ms, err);
        if (st != AI_OK) {
            ai_err_prefix(err, "attention %s %s", av ? av->name : "cublas_unfused", shape);
            break;
        }
        if (!av) ref_ms = r->ms;
        if (av && ref_ms > 0) {
            snprintf(r->ref_name, sizeof r->ref_name, "cublas-unfused");
            r->ref_ms = ref_ms;
        }
        ladder_fill_rates(r, c->rep);
    }
    free(ro), free(rl), free(sc), free(rows);
    attn_bufs_free(&b);
    return st;
}

// ---- backward -----------------------------------------------------------------------------------

static ai_status attn_bwd_shape(ladder_ctx *c, const attn_shape *sh, ai_err *err)
{
    const size_t n = (size_t)sh->b * sh->h * sh->s * sh->d, nr = (size_t)sh->b * sh->h * sh->s;
    const int bh = sh->b * sh->h, s = sh->s, d = sh->d;
    const double scale = 1.0 / sqrt((double)d);
    char shape[48];
    shape_str(shape, sizeof shape, sh);
    attn_bufs b = { 0 };
    attn_args a = { .b = sh->b, .h = sh->h, .s = s, .d = d, .causal = sh->causal, .scale = (float)scale };
    size_t work = 0;
    for (int v = 0; v < attn_n_versions; v++) {
        if (!attn_versions[v].bwd) continue;
        const size_t w = attn_versions[v].work_size(&a);
        work = w > work ? w : work;
    }
    ai_status st = AI_OK;
    b.hq = malloc(n * 2), b.hk = malloc(n * 2), b.hv = malloc(n * 2), b.hg = malloc(n * 2), b.hout = malloc(n * 2);
    if (!b.hq || !b.hk || !b.hv || !b.hg || !b.hout) st = ai_err_set(err, AI_ERR_NOMEM, "attention: out of memory");
    void **dev[] = { &b.dq, &b.dk, &b.dv, &b.dg, &b.dO, &b.ddq, &b.ddk, &b.ddv };
    for (size_t i = 0; i < sizeof dev / sizeof *dev && st == AI_OK; i++) st = alloc_dev(dev[i], n * 2, err);
    if (st == AI_OK) st = alloc_dev((void **)&b.dlse, nr * sizeof(float), err);
    if (st == AI_OK) st = alloc_dev(&b.work, work, err);
    if (st != AI_OK) {
        attn_bufs_free(&b);
        return st;
    }
    ladder_reseed(c, (uint64_t)n * 37 + 5 + (uint64_t)sh->causal);
    fill_bf16(c, b.hq, n, 2.0f);
    fill_bf16(c, b.hk, n, 2.0f);
    fill_bf16(c, b.hv, n, 1.0f);
    fill_bf16(c, b.hg, n, 1.0f);
    cudaError_t e = cudaMemcpy(b.dq, b.hq, n * 2, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(b.dk, b.hk, n * 2, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(b.dv, b.hv, n * 2, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(b.dg, b.hg, n * 2, cudaMemcpyHostToDevice);
    a.q = b.dq, a.k = b.dk, a.v = b.dv, a.o = b.dO, a.lse = b.dlse, a.dout = b.dg;
    a.dq = b.ddq, a.dk = b.ddk, a.dv = b.ddv, a.work = b.work, a.work_size = work;
    const attn_version *fwd = NULL; /* v3 gives O and lse (checked on its own rows; v4 stays out of the backward's inputs) */
    for (int v = 0; v < attn_n_versions; v++)
        if (!strcmp(attn_versions[v].name, "v3_fa2_mma")) fwd = &attn_versions[v];
    if (e == cudaSuccess) e = fwd ? (cudaError_t)fwd->fn(c->s, &a) : cudaErrorNotSupported;
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->s);
    if (e != cudaSuccess) {
        attn_bufs_free(&b);
        LADDER_CU(e, "attention backward set-up (upload, v3 forward)");
    }

    const bool all = c->o->small;
    const int n_heads = all ? bh : (bh > 1 ? 2 : 1);
    const size_t hs = (size_t)s * d;
    double *ref = malloc(3 * (size_t)n_heads * hs * sizeof *ref), *p = malloc((size_t)s * s * sizeof *p);
    double *dp = malloc((size_t)s * s * sizeof *dp), *o = malloc(hs * sizeof *o), *x = malloc(4 * hs * sizeof *x);
    if (!ref || !p || !dp || !o || !x) st = ai_err_set(err, AI_ERR_NOMEM, "attention: out of memory");
    for (int hi = 0; st == AI_OK && hi < n_heads; hi++) {
        const size_t hb = (size_t)(all ? hi : hi * (bh - 1)) * hs;
        double *g3 = ref + (size_t)hi * 3 * hs;
        ref_bwd_head(b.hq + hb, b.hk + hb, b.hv + hb, b.hg + hb, s, d, sh->causal, scale, g3, g3 + hs, g3 + 2 * hs, p,
                     dp, o, x);
    }
    void *outs[3] = { b.ddq, b.ddk, b.ddv };
    for (int v = 0; st == AI_OK && v < attn_n_versions; v++) {
        const attn_version *av = &attn_versions[v];
        if (!av->bwd || !version_wanted(av->name)) continue;
        attn_call ac = { .v = av, .s = c->s, .a = a };
        for (int t = 0; t < 3 && e == cudaSuccess; t++) e = cudaMemsetAsync(outs[t], 0xFF, n * 2, c->s);
        if (e != cudaSuccess) {
            st = ai_err_set(err, AI_ERR_RUNTIME, "poison: %s", cudaGetErrorString(e));
            break;
        }
        double once = 0;
        bool unsupported = false;
        st = time_once(c, &ac, &once, &unsupported, err);
        if (st != AI_OK || unsupported || once > ATTN_MAX_CALL_MS) continue;
        double worst = 0;
        for (int t = 0; t < 3 && st == AI_OK; t++) {
            e = cudaMemcpy(b.hout, outs[t], n * 2, cudaMemcpyDeviceToHost);
            if (e != cudaSuccess) {
                st = ai_err_set(err, AI_ERR_RUNTIME, "gradient download: %s", cudaGetErrorString(e));
                break;
            }
            for (int hi = 0; hi < n_heads; hi++) {
                const size_t hb = (size_t)(all ? hi : hi * (bh - 1)) * hs;
                const double *r3 = ref + ((size_t)hi * 3 + t) * hs;
                const double er = head_err(b.hout + hb, r3, hs);
                worst = isnan(er) || isnan(worst) ? NAN : fmax(worst, er);
            }
        }
        if (st != AI_OK) break;
        ladder_result *r = ladder_add_row(c, "attention", av->name, av->desc, shape, "bf16", err);
        if (!r) {
            st = AI_ERR_NOMEM;
            break;
        }
        r->err = worst;
        r->tol = ATTN_TOL_GRAD;
        r->bytes = 8.0 * (double)n * 2 + (double)nr * 4;
        r->flops = 2.5 * fwd_flops(sh);
        st = ladder_time(c, attn_call_run, &ac, &r->ms, err);
        if (st != AI_OK) {
            ai_err_prefix(err, "attention %s %s", av->name, shape);
            break;
        }
        ladder_fill_rates(r, c->rep);
    }
    free(ref), free(p), free(dp), free(o), free(x);
    attn_bufs_free(&b);
    return st;
}

// ---- entry --------------------------------------------------------------------------------------

ai_status ladder_attention(ladder_ctx *c, ai_err *err)
{
    /* Full: SDPA's d = 128 shape family at b4 h32 s4096 (PEERS.md: b8), d = 64, and s = 1024 where v1 fits. */
    static const attn_shape fwd_big[] = {
        { 4, 32, 4096, 128, 1 }, { 4, 32, 4096, 128, 0 }, { 4, 16, 4096, 64, 1 },
        { 2, 16, 1024, 128, 1 }, { 2, 16, 1024, 64, 0 },
    };
    static const attn_shape bwd_big[] = { { 2, 16, 1024, 128, 1 }, { 2, 16, 1024, 64, 0 } };
    static const attn_shape fwd_small[] = { { 1, 3, 77, 64, 1 }, { 2, 2, 130, 128, 0 }, { 1, 2, 200, 128, 1 } };
    static const attn_shape bwd_small[] = { { 1, 2, 77, 64, 1 }, { 1, 2, 130, 128, 0 } };
    const bool sm = c->o->small;
    const attn_shape *fwd = sm ? fwd_small : fwd_big, *bwd = sm ? bwd_small : bwd_big;
    const int n_fwd = sm ? 3 : 5, n_bwd = 2;
    attn_cublas *lt = NULL;
    int rc = attn_cublas_init(&lt);
    if (rc) return ai_err_set(err, AI_ERR_RUNTIME, "attention: cuBLASLt init failed (%d)", rc);
    ai_status st = AI_OK;
    for (int i = 0; i < n_fwd && st == AI_OK; i++) st = attn_fwd_shape(c, &fwd[i], lt, err);
    for (int i = 0; i < n_bwd && st == AI_OK; i++) st = attn_bwd_shape(c, &bwd[i], err);
    attn_cublas_free(lt);
    return st;
}
