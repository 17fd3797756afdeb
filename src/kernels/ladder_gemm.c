/* ladder_gemm.c - the GEMM ladder's driver part (kernels in gemm/): C = A x B, bf16 in, fp32
 * accumulate, bf16 out, row-major A (M, K), B (K, N), C (M, N); shapes are written "MxNxK".
 * Inputs uniform in [-1, 1), rounded to bf16; the reference is computed in double from those bf16
 * values. FLOPs 2MNK, bytes 2(MK + KN + MN) (each matrix moved once).
 *
 * Error (per element, worst over a sample): |c - ref| / sum_k |a_ik b_kj|, the error relative to
 * the magnitudes summed (meaningful when the dot product cancels). Bound LADDER_TOL_BF16 = 1e-2:
 * the bf16 output rounding alone is up to 2^-9 = 2e-3 relative to |ref| <= sum |a b|, fp32
 * accumulation adds ~K * 2^-24. Sample: 2048 random elements plus the four corners (full runs),
 * every element (small runs).
 *
 * Same-run reference: cuBLASLt (bf16 in, CUBLAS_COMPUTE_32F, bf16 out, the same row-major layout,
 * run as the column-major product C^T = B^T A^T) is timed on every shape: ref_name "cublasLt",
 * ref_ms; its rate at 8192^3 is the report's gemm_gflops (full runs). Its output must pass the same
 * error check, or the ladder fails (that also checks the reference itself).
 *
 * Shapes: full: 4096^3, 8192^3 and M in {1, 16, 128, 512, 4096} x (K, N) in {(4096, 14336),
 * (14336, 4096)}, run in increasing FLOPs; small: 1x72x40, 67x136x104, 130x264x136 (every version
 * accepts them: K % 8 == 0, N % 8 == 0, none a multiple of the tiles).
 * Skip rule (full runs, v1..v3 only): a version gets no row on a shape when one call would take
 * more than 50 ms, predicted from its best rate on earlier (smaller) shapes, or measured on the
 * untimed correctness call. Versions that do not accept a shape (gemm_version_accepts) get no row.
 *
 * To spend less GPU time (full runs only), two environment variables narrow the run:
 *   GEMM_LADDER_SHAPES="8192x8192x8192,4096x14336x4096"  only these of the full shapes
 *   GEMM_LADDER_FROM=9                                    only versions v9 and later
 */
#include <cublasLt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aiinfra/dtype.h"
#include "kernels/gemm/gemm.h"
#include "kernels/ladder_internal.h"

#define GEMM_SLOW_VERSIONS 3  /* v1..v3: the skip rule applies */
#define GEMM_SKIP_MS 50.0
#define GEMM_SAMPLES 2048
#define LT_WORK ((size_t)32 << 20)

typedef struct gemm_call {
    const gemm_version *v;
    cudaStream_t s;
    const bf16 *A, *B;
    bf16 *C;
    int M, N, K;
    void *work; /* gemm_work_size bytes (stream-K versions) */
    size_t work_size;
} gemm_call;

static int gemm_call_run(const void *arg)
{
    const gemm_call *g = arg;
    return g->v->fn(g->s, g->A, g->B, g->C, g->M, g->N, g->K, g->work, g->work_size);
}

typedef struct lt_call {
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    void *work;
    cudaStream_t s;
    const bf16 *A, *B;
    bf16 *C;
} lt_call;

static int lt_call_run(const void *arg)
{
    const lt_call *l = arg;
    const float alpha = 1.0f, beta = 0.0f;
    /* column-major: C^T (N, M) = B^T (N, K) x A^T (K, M); the row-major buffers are those matrices */
    cublasStatus_t st = cublasLtMatmul(l->lt, l->op, &alpha, l->B, l->la, l->A, l->lb, &beta, l->C, l->lc, l->C,
                                       l->lc, &l->algo, l->work, LT_WORK, l->s);
    return st == CUBLAS_STATUS_SUCCESS ? 0 : (int)cudaErrorUnknown;
}

static void lt_release(lt_call *l)
{
    if (l->lc) cublasLtMatrixLayoutDestroy(l->lc);
    if (l->lb) cublasLtMatrixLayoutDestroy(l->lb);
    if (l->la) cublasLtMatrixLayoutDestroy(l->la);
    if (l->op) cublasLtMatmulDescDestroy(l->op);
    l->lc = l->lb = l->la = NULL;
    l->op = NULL;
}

/* Descriptors and the heuristic's first algorithm for this shape (l->lt, work already set). */
static ai_status lt_plan(lt_call *l, int M, int N, int K, ai_err *err)
{
    cublasStatus_t st = cublasLtMatmulDescCreate(&l->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&l->la, CUDA_R_16BF, (uint64_t)N, (uint64_t)K, N);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&l->lb, CUDA_R_16BF, (uint64_t)K, (uint64_t)M, K);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&l->lc, CUDA_R_16BF, (uint64_t)N, (uint64_t)M, N);
    cublasLtMatmulPreference_t pref = NULL;
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceCreate(&pref);
    if (st == CUBLAS_STATUS_SUCCESS) {
        const uint64_t ws = LT_WORK;
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    }
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(l->lt, l->op, l->la, l->lb, l->lc, l->lc, pref, 1, &res, &found);
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found < 1) {
        lt_release(l);
        return ai_err_set(err, AI_ERR_RUNTIME, "cuBLASLt: no algorithm for %dx%dx%d (status %d)", M, N, K, (int)st);
    }
    l->algo = res.algo;
    return AI_OK;
}

typedef struct gemm_bufs {
    uint16_t *hA, *hB, *hC;
    int *si, *sj; /* sampled output coordinates */
    double *ref, *mag;
    void *dA, *dB, *dC;
    void *dW; /* the versions' scratch: the largest gemm_work_size over the shapes */
    size_t w_size;
    lt_call lt;
} gemm_bufs;

/* Worst |c - ref| / sum |a b| over the n samples; NaN when any sampled output is NaN. */
static double gemm_err(const gemm_bufs *b, int N, int n)
{
    double worst = 0;
    for (int s = 0; s < n; s++) {
        const double c = dtype_bf16_to_f32(b->hC[(size_t)b->si[s] * N + b->sj[s]]);
        if (isnan(c)) return NAN;
        const double e = fabs(c - b->ref[s]) / (b->mag[s] > 0 ? b->mag[s] : 1.0);
        worst = e > worst ? e : worst;
    }
    return worst;
}

/* Runs call once (untimed, after poisoning C), downloads C, returns the sampled error and the
 * call's time in *ms (events around it: includes a first launch's set-up). */
static ai_status gemm_check_once(ladder_ctx *c, gemm_bufs *b, ladder_call_fn call, const void *arg, const char *what,
                                 int M, int N, int n_samples, double *e, double *ms, ai_err *err)
{
    LADDER_CU(cudaMemsetAsync(b->dC, 0xFF, (size_t)M * N * 2, c->s), "poison output");
    LADDER_CU(cudaEventRecord(c->a, c->s), "cudaEventRecord");
    LADDER_CU((cudaError_t)call(arg), what);
    LADDER_CU(cudaEventRecord(c->b, c->s), "cudaEventRecord");
    LADDER_CU(cudaEventSynchronize(c->b), what);
    float f = 0;
    LADDER_CU(cudaEventElapsedTime(&f, c->a, c->b), "cudaEventElapsedTime");
    *ms = f;
    LADDER_CU(cudaMemcpy(b->hC, b->dC, (size_t)M * N * 2, cudaMemcpyDeviceToHost), "gemm output download");
    *e = gemm_err(b, N, n_samples);
    return AI_OK;
}

static ai_status gemm_shape(ladder_ctx *c, int M, int N, int K, gemm_bufs *b, double *best_rate, ai_err *err)
{
    const size_t nA = (size_t)M * K, nB = (size_t)K * N;
    ladder_reseed(c, (uint64_t)M * 1000003u + (uint64_t)N * 1009u + (uint64_t)K);
    for (size_t i = 0; i < nA; i++) b->hA[i] = dtype_f32_to_bf16(ladder_rng_uniform(&c->rng));
    for (size_t i = 0; i < nB; i++) b->hB[i] = dtype_f32_to_bf16(ladder_rng_uniform(&c->rng));
    LADDER_CU(cudaMemcpy(b->dA, b->hA, nA * 2, cudaMemcpyHostToDevice), "gemm A upload");
    LADDER_CU(cudaMemcpy(b->dB, b->hB, nB * 2, cudaMemcpyHostToDevice), "gemm B upload");

    /* the sample: everything (small), or the corners plus random elements */
    int n = 0;
    if (c->o->small || (int64_t)M * N <= GEMM_SAMPLES) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) b->si[n] = i, b->sj[n] = j, n++;
    } else {
        const int ci[4] = { 0, 0, M - 1, M - 1 }, cj[4] = { 0, N - 1, 0, N - 1 };
        for (; n < 4; n++) b->si[n] = ci[n], b->sj[n] = cj[n];
        for (; n < GEMM_SAMPLES + 4; n++) {
            b->si[n] = (int)(0.5f * (ladder_rng_uniform(&c->rng) + 1.0f) * (float)M) % M;
            b->sj[n] = (int)(0.5f * (ladder_rng_uniform(&c->rng) + 1.0f) * (float)N) % N;
        }
    }
    for (int s = 0; s < n; s++) {
        const uint16_t *a = b->hA + (size_t)b->si[s] * K, *bc = b->hB + b->sj[s];
        double ref = 0, mag = 0;
        for (int k = 0; k < K; k++) {
            const double p = (double)dtype_bf16_to_f32(a[k]) * (double)dtype_bf16_to_f32(bc[(size_t)k * N]);
            ref += p;
            mag += fabs(p);
        }
        b->ref[s] = ref, b->mag[s] = mag;
    }

    char shape[48];
    snprintf(shape, sizeof shape, "%dx%dx%d", M, N, K);
    const double flops = 2.0 * M * N * K, bytes = 2.0 * ((double)M * K + (double)K * N + (double)M * N);

    /* cuBLASLt first: its time is every row's ref_ms */
    b->lt.s = c->s, b->lt.A = b->dA, b->lt.B = b->dB, b->lt.C = b->dC;
    ai_status st = lt_plan(&b->lt, M, N, K, err);
    if (st != AI_OK) return st;
    double e = 0, first_ms = 0, lt_ms = 0;
    st = gemm_check_once(c, b, lt_call_run, &b->lt, "cublasLtMatmul", M, N, n, &e, &first_ms, err);
    if (st == AI_OK && !(e <= LADDER_TOL_BF16))
        st = ai_err_set(err, AI_ERR_RUNTIME, "gemm %s: cuBLASLt fails the reference check (error %.3g > %.3g)", shape, e,
                        LADDER_TOL_BF16);
    if (st == AI_OK) st = ladder_time(c, lt_call_run, &b->lt, &lt_ms, err);
    lt_release(&b->lt);
    if (st != AI_OK) return ai_err_prefix(err, "gemm %s cuBLASLt", shape);
    if (!c->o->small && M == 8192 && N == 8192 && K == 8192) c->rep->gemm_gflops = flops / (lt_ms * 1e-3) / 1e9;

    const char *from = c->o->small ? NULL : getenv("GEMM_LADDER_FROM");
    const int first = from ? atoi(from) - 1 : 0;
    for (int v = first > 0 ? first : 0; v < gemm_n_versions; v++) {
        const gemm_version *gv = &gemm_versions[v];
        if (!gemm_version_accepts(gv, b->dA, b->dB, b->dC, M, N, K)) continue;
        const bool skippable = !c->o->small && v < GEMM_SLOW_VERSIONS;
        if (skippable && best_rate[v] > 0 && flops / best_rate[v] * 1e3 > GEMM_SKIP_MS) continue;
        gemm_call gc = { .v = gv, .s = c->s, .A = b->dA, .B = b->dB, .C = b->dC, .M = M, .N = N, .K = K,
                         .work = b->dW, .work_size = b->w_size };
        st = gemm_check_once(c, b, gemm_call_run, &gc, gv->name, M, N, n, &e, &first_ms, err);
        if (st != AI_OK) return ai_err_prefix(err, "gemm %s %s", gv->name, shape);
        if (skippable && first_ms > GEMM_SKIP_MS) {
            const double rate = flops / (first_ms * 1e-3);
            best_rate[v] = rate > best_rate[v] ? rate : best_rate[v];
            continue;
        }
        ladder_result *r = ladder_add_row(c, "gemm", gv->name, gv->desc, shape, "bf16", err);
        if (!r) return AI_ERR_NOMEM;
        r->err = e;
        r->tol = LADDER_TOL_BF16;
        r->flops = flops;
        r->bytes = bytes;
        snprintf(r->ref_name, sizeof r->ref_name, "cublasLt");
        r->ref_ms = lt_ms;
        st = ladder_time(c, gemm_call_run, &gc, &r->ms, err);
        if (st != AI_OK) return ai_err_prefix(err, "gemm %s %s", gv->name, shape);
        ladder_fill_rates(r, c->rep);
        const double rate = flops / (r->ms * 1e-3);
        if (v < GEMM_SLOW_VERSIONS) best_rate[v] = rate > best_rate[v] ? rate : best_rate[v];
    }
    return AI_OK;
}

typedef struct gemm_shape_t {
    int M, N, K;
} gemm_shape_t;

static int cmp_flops(const void *x, const void *y)
{
    const gemm_shape_t *p = x, *q = y;
    const double a = (double)p->M * p->N * p->K, b = (double)q->M * q->N * q->K;
    return (a > b) - (a < b);
}

ai_status ladder_gemm(ladder_ctx *c, ai_err *err)
{
    gemm_shape_t shapes[12];
    int ns = 0;
    if (c->o->small) {
        shapes[ns++] = (gemm_shape_t){ 1, 72, 40 };
        shapes[ns++] = (gemm_shape_t){ 67, 136, 104 };
        shapes[ns++] = (gemm_shape_t){ 130, 264, 136 };
    } else {
        static const int ms[] = { 1, 16, 128, 512, 4096 };
        static const int kn[][2] = { { 4096, 14336 }, { 14336, 4096 } };
        shapes[ns++] = (gemm_shape_t){ 4096, 4096, 4096 };
        shapes[ns++] = (gemm_shape_t){ 8192, 8192, 8192 };
        for (int i = 0; i < 5; i++)
            for (int j = 0; j < 2; j++) shapes[ns++] = (gemm_shape_t){ ms[i], kn[j][1], kn[j][0] };
        qsort(shapes, (size_t)ns, sizeof *shapes, cmp_flops);
        const char *only = getenv("GEMM_LADDER_SHAPES");
        if (only) { /* keep the listed ones, in FLOP order */
            int kept = 0;
            for (int i = 0; i < ns; i++) {
                char name[48];
                snprintf(name, sizeof name, "%dx%dx%d", shapes[i].M, shapes[i].N, shapes[i].K);
                const size_t len = strlen(name);
                for (const char *q = strstr(only, name); q; q = strstr(q + 1, name))
                    if ((q == only || q[-1] == ',') && (q[len] == ',' || q[len] == 0)) {
                        shapes[kept++] = shapes[i];
                        break;
                    }
            }
            ns = kept;
        }
    }
    size_t maxA = 0, maxB = 0, maxC = 0;
    for (int i = 0; i < ns; i++) {
        const size_t a = (size_t)shapes[i].M * shapes[i].K, bb = (size_t)shapes[i].K * shapes[i].N,
                     cc = (size_t)shapes[i].M * shapes[i].N;
        maxA = a > maxA ? a : maxA, maxB = bb > maxB ? bb : maxB, maxC = cc > maxC ? cc : maxC;
    }
    size_t maxW = 0;
    for (int i = 0; i < ns; i++) {
        const size_t w = gemm_work_size(shapes[i].M, shapes[i].N, shapes[i].K);
        maxW = w > maxW ? w : maxW;
    }
    const size_t max_samples = c->o->small ? maxC : GEMM_SAMPLES + 4;
    gemm_bufs b = { 0 };
    b.hA = malloc(maxA * 2), b.hB = malloc(maxB * 2), b.hC = malloc(maxC * 2);
    b.si = malloc(max_samples * sizeof(int)), b.sj = malloc(max_samples * sizeof(int));
    b.ref = malloc(max_samples * sizeof(double)), b.mag = malloc(max_samples * sizeof(double));
    ai_status st = AI_OK;
    cudaError_t e = b.hA && b.hB && b.hC && b.si && b.sj && b.ref && b.mag ? cudaSuccess : cudaErrorMemoryAllocation;
    if (e == cudaSuccess) e = cudaMalloc(&b.dA, maxA * 2);
    if (e == cudaSuccess) e = cudaMalloc(&b.dB, maxB * 2);
    if (e == cudaSuccess) e = cudaMalloc(&b.dC, maxC * 2);
    if (e == cudaSuccess) e = cudaMalloc(&b.lt.work, LT_WORK);
    if (e == cudaSuccess && maxW) e = cudaMalloc(&b.dW, maxW);
    b.w_size = b.dW ? maxW : 0;
    if (e != cudaSuccess) st = ai_err_set(err, AI_ERR_NOMEM, "gemm buffers: %s", cudaGetErrorString(e));
    bool have_lt = false;
    if (st == AI_OK) {
        cublasStatus_t ls = cublasLtCreate(&b.lt.lt);
        have_lt = ls == CUBLAS_STATUS_SUCCESS;
        if (!have_lt) st = ai_err_set(err, AI_ERR_RUNTIME, "cublasLtCreate failed (status %d)", (int)ls);
    }
    double best_rate[GEMM_SLOW_VERSIONS] = { 0 }; /* FLOP/s, for the skip rule */
    for (int i = 0; i < ns && st == AI_OK; i++) st = gemm_shape(c, shapes[i].M, shapes[i].N, shapes[i].K, &b, best_rate, err);
    if (have_lt) cublasLtDestroy(b.lt.lt);
    cudaFree(b.dA), cudaFree(b.dB), cudaFree(b.dC), cudaFree(b.lt.work), cudaFree(b.dW);
    free(b.hA), free(b.hB), free(b.hC), free(b.si), free(b.sj), free(b.ref), free(b.mag);
    return st;
}
