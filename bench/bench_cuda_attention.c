/* bench_cuda_attention.c - speed of cuk_attention on Llama-3-8B heads (32 q heads, 8 kv heads,
 * d 128, f16 cache, block 16) against ceilings measured in the same run.
 *
 *   decode  (q_len 1): 1 x 32k, 8 x 8k, 8 x 1k, 64 x 1k, 256 x 1k contexts -> GB/s of K+V read, against the
 *           device-to-device copy bandwidth of a 2 GB buffer (bytes read + written); f16 cache, then the
 *           same shapes with an fp8 e4m3 cache (rows "fp8": GB/s of the fp8 bytes, half the f16 ones, and
 *           "x f16", the f16 row's time over this one's); each set twice: the bulk-copy kernel and its
 *           2D TMA variant (AIINFRA_DEC_TMA=0 / 1, rows "tma", "x bulk" the bulk row's time over this one's);
 *   prefill (causal, whole sequence as q): 1 x 4096, 8 x 512 -> TFLOP/s counting 4 * s^2 * d * heads / 2,
 *           against a cuBLASLt bf16 GEMM 8192^3 (f32 accumulate); once with the FA2 kernel and once
 *           with the Hopper one (rows "fa2" / "fa3": AIINFRA_PREFILL set per row; timing only, the
 *           correctness of both is test_cuda_attention's); then the same shapes over an fp8 e4m3 cache
 *           (rows "fp8", the default dispatch, the kernel it picked in brackets: FA2 on widened tiles).
 * Each figure is the median of 20 runs timed with CUDA events; a 256 MB read pass (ladder_flush_l2) runs
 * between runs so L2 (50 MB) never serves the cache. Until 2026-12-04 it was a memset, which left ~50 MB
 * of dirty lines in L2 whose write-back the timed kernel paid for (decode 8 x 1k: 21.3 us with it). Block tables are random permutations of all blocks (paged, out of
 * order); cache contents are random f16 in [-1, 1] (a 64 MB random pattern, tiled).
 * Usage: bench_cuda_attention            (prints "skipped: no CUDA device" where there is none)
 *        bench_cuda_attention sweep      decode only: every shape of the sweep table in main at each split
 *                                        size (AIINFRA_DEC_CHUNK), one line each: the data the split
 *                                        planner is checked against
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef AIINFRA_CUDA
int main(void)
{
    printf("skipped: built without CUDA\n");
    return 0;
}
#else
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "aiinfra/dtype.h"
#include "aiinfra/fp8.h"
#include "backend/cuda/cuda_kernels.h"
#include "kernels/ladder_flush.h"

#define RUNS 20
#include "cuda_bench.h"

#define CKL(call)                                                                                   \
    do {                                                                                            \
        cublasStatus_t e_ = (call);                                                                 \
        if (e_ != CUBLAS_STATUS_SUCCESS) {                                                          \
            fprintf(stderr, "%s:%d %s: cublas status %d\n", __FILE__, __LINE__, #call, (int)e_);    \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static float randf(void)
{
    rng ^= rng >> 12; rng ^= rng << 25; rng ^= rng >> 27;
    return (float)((rng * 0x2545F4914F6CDD1DULL) >> 40) / (float)(1 << 23) - 1.0f;
}

static int cmpf(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void *flush_buf;
static const size_t flush_bytes = 256u << 20;

/* Fills n bytes of device memory with a tiled 64 MB random f16 (or bf16) pattern. */
static void fill_random16(void *d, size_t n, int bf16)
{
    static void *pat = NULL;
    static int pat_bf16 = -1;
    const size_t pb = 64u << 20;
    if (!pat || pat_bf16 != bf16) {
        uint16_t *h = malloc(pb);
        for (size_t i = 0; i < pb / 2; i++) h[i] = bf16 ? dtype_f32_to_bf16(randf()) : dtype_f32_to_f16(randf());
        if (!pat) CK(cudaMalloc(&pat, pb));
        CK(cudaMemcpy(pat, h, pb, cudaMemcpyHostToDevice));
        free(h);
        pat_bf16 = bf16;
    }
    for (size_t off = 0; off < n; off += pb) CK(cudaMemcpy((char *)d + off, pat, n - off < pb ? n - off : pb, cudaMemcpyDeviceToDevice));
}

/* Fills n bytes of device memory with a tiled 64 MB pattern of fp8 e4m3 codes of 8 x [-1, 1] (no NaN
 * codes; read with scales 1 / 8, the values of the f16 fill). */
static void fill_random_f8(void *d, size_t n)
{
    static void *pat = NULL;
    const size_t pb = 64u << 20;
    if (!pat) {
        uint8_t *h = malloc(pb);
        for (size_t i = 0; i < pb; i++) h[i] = fp8_e4m3_from_f32(8.f * randf());
        CK(cudaMalloc(&pat, pb));
        CK(cudaMemcpy(pat, h, pb, cudaMemcpyHostToDevice));
        free(h);
    }
    for (size_t off = 0; off < n; off += pb) CK(cudaMemcpy((char *)d + off, pat, n - off < pb ? n - off : pb, cudaMemcpyDeviceToDevice));
}

typedef void (*run_fn)(void *ctx);

/* Median milliseconds of RUNS timed calls, L2 flushed before each. */
static float time_median(run_fn fn, void *ctx, int flush)
{
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; i++) fn(ctx);
    float ms[RUNS];
    for (int i = 0; i < RUNS; i++) {
        if (flush) CK((cudaError_t)ladder_flush_l2(NULL, flush_buf, flush_bytes, (unsigned *)((char *)flush_buf + flush_bytes)));
        CK(cudaEventRecord(e0, 0));
        fn(ctx);
        CK(cudaEventRecord(e1, 0));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms[i], e0, e1));
    }
    CK(cudaGetLastError());
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    qsort(ms, RUNS, sizeof(float), cmpf);
    return ms[RUNS / 2];
}

typedef struct copy_ctx { void *dst, *src; size_t n; } copy_ctx;
static void run_copy(void *c)
{
    copy_ctx *x = c;
    CK(cudaMemcpyAsync(x->dst, x->src, x->n, cudaMemcpyDeviceToDevice, 0));
}

typedef struct gemm_ctx {
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    void *a, *b, *c, *ws;
    size_t ws_size;
} gemm_ctx;
static void run_gemm(void *p)
{
    gemm_ctx *g = p;
    float alpha = 1.f, beta = 0.f;
    CKL(cublasLtMatmul(g->lt, g->op, &alpha, g->a, g->la, g->b, g->lb, &beta, g->c, g->lc, g->c, g->lc, &g->algo, g->ws,
                       g->ws_size, 0));
}

static double gemm_tflops(void)
{
    const int n = 8192;
    gemm_ctx g = {0};
    const size_t mb = (size_t)n * n * 2;
    CK(cudaMalloc(&g.a, mb));
    CK(cudaMalloc(&g.b, mb));
    CK(cudaMalloc(&g.c, mb));
    g.ws_size = 64u << 20;
    CK(cudaMalloc(&g.ws, g.ws_size));
    fill_random16(g.a, mb, 1);
    fill_random16(g.b, mb, 1);
    CKL(cublasLtCreate(&g.lt));
    CKL(cublasLtMatmulDescCreate(&g.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CKL(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CKL(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    CKL(cublasLtMatrixLayoutCreate(&g.la, CUDA_R_16BF, n, n, n));
    CKL(cublasLtMatrixLayoutCreate(&g.lb, CUDA_R_16BF, n, n, n));
    CKL(cublasLtMatrixLayoutCreate(&g.lc, CUDA_R_16BF, n, n, n));
    cublasLtMatmulPreference_t pref;
    CKL(cublasLtMatmulPreferenceCreate(&pref));
    CKL(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &g.ws_size,
                                             sizeof g.ws_size));
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    CKL(cublasLtMatmulAlgoGetHeuristic(g.lt, g.op, g.la, g.lb, g.lc, g.lc, pref, 1, &res, &nres));
    if (nres < 1) {
        fprintf(stderr, "cublasLt: no algorithm\n");
        exit(1);
    }
    g.algo = res.algo;
    float ms = time_median(run_gemm, &g, 0);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(g.la);
    cublasLtMatrixLayoutDestroy(g.lb);
    cublasLtMatrixLayoutDestroy(g.lc);
    cublasLtMatmulDescDestroy(g.op);
    cublasLtDestroy(g.lt);
    cudaFree(g.a);
    cudaFree(g.b);
    cudaFree(g.c);
    cudaFree(g.ws);
    return 2.0 * n * n * (double)n / (ms * 1e-3) / 1e12;
}

typedef struct attn_ctx { cuk_attn_args a; } attn_ctx;
static void run_attn(void *p)
{
    attn_ctx *c = p;
    ai_err err = {0};
    if (cuk_attention(NULL, &c->a, &err) != AI_OK) {
        fprintf(stderr, "cuk_attention: %s\n", err.msg);
        exit(1);
    }
}

static void sweep_attn(attn_ctx *c, int n_seq, int ctx, double bytes);

/* One configuration: n_seq sequences of ctx keys each, q_len queries each (1 = decode), max_seq_len
 * bound >= ctx (the engine passes a power of two at least the longest sequence, capped at its
 * context), cache element kv (DTYPE_F16 or DTYPE_F8_E4M3). Returns ms; with sweep, prints the decode
 * sweep instead (returns 0). path (may be NULL): the kernel the dispatch picked. */
static float bench_attn_kv(int n_seq, int ctx, int bound, int q_len, double *kv_bytes, int sweep, dtype kv,
                           const char **path)
{
    const int n_head = 32, n_kv = 8, d = 128, bs = 16;
    const int nb = (bound + bs - 1) / bs, n_blocks = n_seq * nb;
    const size_t esz = kv == DTYPE_F8_E4M3 ? 1 : 2;
    const size_t row = (size_t)n_kv * d * esz, cache = (size_t)n_blocks * bs * row;
    int32_t *perm = malloc(sizeof(int32_t) * n_blocks);
    for (int i = 0; i < n_blocks; i++) perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        int j = (int)((uint64_t)((randf() + 1.f) * 0.5f * (float)(i + 1)));
        if (j > i) j = i;
        int t = perm[i]; perm[i] = perm[j]; perm[j] = t;
    }
    const int n_tok = n_seq * q_len;
    int32_t *qs = malloc(sizeof(int32_t) * (n_seq + 1)), *sl = malloc(sizeof(int32_t) * n_seq);
    for (int s = 0; s <= n_seq; s++) qs[s] = s * q_len;
    for (int s = 0; s < n_seq; s++) sl[s] = ctx;
    float *hq = malloc(sizeof(float) * (size_t)n_tok * n_head * d);
    for (size_t i = 0; i < (size_t)n_tok * n_head * d; i++) hq[i] = randf();
    attn_ctx c;
    memset(&c, 0, sizeof c);
    cuk_attn_args *a = &c.a;
    void *k, *v, *q, *o, *bt, *dqs, *dsl;
    CK(cudaMalloc(&k, cache));
    CK(cudaMalloc(&v, cache));
    if (esz == 1) {
        fill_random_f8(k, cache);
        fill_random_f8(v, cache);
    } else {
        fill_random16(k, cache, 0);
        fill_random16(v, cache, 0);
    }
    CK(cudaMalloc(&q, sizeof(float) * (size_t)n_tok * n_head * d));
    CK(cudaMemcpy(q, hq, sizeof(float) * (size_t)n_tok * n_head * d, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&o, sizeof(float) * (size_t)n_tok * n_head * d));
    CK(cudaMalloc(&bt, sizeof(int32_t) * n_blocks));
    CK(cudaMemcpy(bt, perm, sizeof(int32_t) * n_blocks, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&dqs, sizeof(int32_t) * (n_seq + 1)));
    CK(cudaMemcpy(dqs, qs, sizeof(int32_t) * (n_seq + 1), cudaMemcpyHostToDevice));
    CK(cudaMalloc(&dsl, sizeof(int32_t) * n_seq));
    CK(cudaMemcpy(dsl, sl, sizeof(int32_t) * n_seq, cudaMemcpyHostToDevice));
    a->out = o;
    a->q = q;
    a->q_stride = n_head * d;
    a->k_cache = k;
    a->v_cache = v;
    a->kv_type = kv;
    a->k_scale = a->v_scale = esz == 1 ? 0.125f : 1.f;
    a->block_tables = bt;
    a->q_start = dqs;
    a->seq_len = dsl;
    a->n_seq = n_seq;
    a->n_tok = n_tok;
    a->max_blocks = nb;
    a->max_q_len = q_len;
    a->max_seq_len = bound;
    a->n_head = n_head;
    a->n_head_kv = n_kv;
    a->head_dim = a->head_dim_v = d;
    a->block_size = bs;
    a->scale = 0.08838834764831845f;
    a->work_size = cuk_attention_work_size(a);
    if (a->work_size) CK(cudaMalloc(&a->work, a->work_size));
    if (a->work_size) CK(cudaMemset(a->work, 0, a->work_size)); /* decode's counters start at 0 */
    *kv_bytes = 2.0 * (double)n_seq * ctx * row;
    if (path) *path = cuk_attention_path(a);
    float ms = 0;
    if (sweep) sweep_attn(&c, n_seq, ctx, *kv_bytes);
    else ms = time_median(run_attn, &c, 1);
    cudaFree(k); cudaFree(v); cudaFree(q); cudaFree(o); cudaFree(bt); cudaFree(dqs); cudaFree(dsl);
    if (a->work) cudaFree(a->work);
    free(perm); free(qs); free(sl); free(hq);
    return ms;
}

static float bench_attn(int n_seq, int ctx, int bound, int q_len, double *kv_bytes, int sweep)
{
    return bench_attn_kv(n_seq, ctx, bound, q_len, kv_bytes, sweep, DTYPE_F16, NULL);
}

static double copy_gbs;

/* Decode at every split size (AIINFRA_DEC_CHUNK) plus the planner's own choice (chunk 0 = "auto").
 * Split counts past the planner's cap (n_seq x 8 x splits <= 4 x 264 CTAs) are skipped: the override
 * would fall back to the plan. */
static void sweep_attn(attn_ctx *c, int n_seq, int ctx, double bytes)
{
    static const int chunks[] = {0, 64, 128, 192, 256, 320, 384, 512, 640, 768, 1024, 1536, 2048, 4096, 8192, 32768};
    const int bound = c->a.max_seq_len, pairs = n_seq * 8;
    int last_ns = -1;
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
        int ch = chunks[i], ns = 0;
        if (ch) {
            if (ch > (bound + 63) / 64 * 64) ch = (bound + 63) / 64 * 64;
            ns = (bound + ch - 1) / ch;
            if (ns == last_ns || pairs * ns > 4 * 264) continue;
            last_ns = ns;
            char cs[16];
            snprintf(cs, sizeof cs, "%d", ch);
            setenv("AIINFRA_DEC_CHUNK", cs, 1);
        } else {
            unsetenv("AIINFRA_DEC_CHUNK");
        }
        /* fresh counters: a forced plan may use more of them than the sizing call saw */
        CK(cudaMemset(c->a.work, 0, c->a.work_size));
        const float ms = time_median(run_attn, c, 1);
        const double gbs = bytes / (ms * 1e-3) / 1e9;
        printf("sweep %3d x %5d bound %5d chunk %5d ns %3d  %8.2f us %6.0f GB/s %5.1f%%%s\n", n_seq, ctx, bound, ch, ns,
               ms * 1e3, gbs, 100.0 * gbs / copy_gbs, ch ? "" : "  (auto plan)");
    }
    unsetenv("AIINFRA_DEC_CHUNK");
}

int main(int argc, char **argv)
{
    const int sweep = argc > 1 && !strcmp(argv[1], "sweep");
    int n_dev = 0;
    cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e != cudaSuccess || n_dev < 1) {
        printf("skipped: no CUDA device (%s)\n", e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
        return 0;
    }
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    CK(cudaMalloc(&flush_buf, flush_bytes + 16)); /* + the flush's sink */
    CK(cudaMemset(flush_buf, 0x5A, flush_bytes + 16));

    copy_ctx cp = {0};
    cp.n = (size_t)2 << 30;
    CK(cudaMalloc(&cp.dst, cp.n));
    CK(cudaMalloc(&cp.src, cp.n));
    CK(cudaMemset(cp.src, 1, cp.n));
    copy_gbs = 2.0 * cp.n / (time_median(run_copy, &cp, 0) * 1e-3) / 1e9;
    cudaFree(cp.dst);
    cudaFree(cp.src);
    if (sweep) {
        printf("device %s, %d SMs; copy %.0f GB/s (2 GB D2D, read+write)\n", prop.name, prop.multiProcessorCount, copy_gbs);
        static const int sw[][3] = {{1, 576, 640}, {1, 1024, 1024}, {1, 2048, 2048}, {1, 8192, 8192}, {1, 32768, 32768},
                                    {8, 1056, 1088}, {8, 1024, 1024}, {8, 8192, 8192}, {64, 1024, 1024}, {64, 2048, 2048}};
        for (size_t i = 0; i < sizeof sw / sizeof sw[0]; i++) {
            double bytes;
            bench_attn(sw[i][0], sw[i][1], sw[i][2], 1, &bytes, 1);
        }
        cudaFree(flush_buf);
        return 0;
    }
    const double gemm = gemm_tflops();
    printf("device %s, %d SMs; ceilings: copy %.0f GB/s (2 GB D2D, read+write), cuBLASLt bf16 8192^3 %.0f TFLOP/s\n",
           prop.name, prop.multiProcessorCount, copy_gbs, gemm);
    printf("Llama-3-8B heads: 32 q / 8 kv, d 128, f16 cache, block 16, shuffled block tables; median of %d\n", RUNS);

    static const int dec[][2] = {{1, 32768}, {8, 8192}, {8, 1024}, {64, 1024}, {256, 1024}};
    enum { N_DEC = sizeof dec / sizeof dec[0] };
    /* Each decode row twice: the bulk-copy kernel (AIINFRA_DEC_TMA=0) and its 2D TMA variant (=1, rows
     * "tma"; "x bulk" = the bulk row's time / this one). The caller's AIINFRA_DEC_TMA is restored after. */
    const char *env_tma = getenv("AIINFRA_DEC_TMA");
    char *saved_tma = env_tma ? strdup(env_tma) : NULL;
    float f16_ms[2][N_DEC], f8_ms[2][N_DEC];
    for (int t = 0; t < 2; t++) {
        setenv("AIINFRA_DEC_TMA", t ? "1" : "0", 1);
        printf("%-26s %10s %10s %8s %7s\n", t ? "decode tma" : "decode", "us", "GB/s", "of copy", t ? "x bulk" : "");
        for (size_t i = 0; i < N_DEC; i++) {
            double bytes;
            float ms = bench_attn(dec[i][0], dec[i][1], dec[i][1], 1, &bytes, 0);
            double gbs = bytes / (ms * 1e-3) / 1e9;
            char name[64];
            snprintf(name, sizeof name, "%d x %d%s", dec[i][0], dec[i][1], t ? " tma" : "");
            printf("%-26s %10.1f %10.0f %7.1f%%", name, ms * 1e3, gbs, 100.0 * gbs / copy_gbs);
            if (t) printf(" %6.2fx", f16_ms[0][i] / ms);
            printf("\n");
            f16_ms[t][i] = ms;
        }
        /* fp8 e4m3 cache: GB/s of the fp8 bytes read; "x f16" = the f16 row's time (same setting) / this one */
        printf("%-26s %10s %10s %8s %7s %7s\n", t ? "decode fp8 tma" : "decode fp8", "us", "GB/s", "of copy", "x f16",
               t ? "x bulk" : "");
        for (size_t i = 0; i < N_DEC; i++) {
            double bytes;
            float ms = bench_attn_kv(dec[i][0], dec[i][1], dec[i][1], 1, &bytes, 0, DTYPE_F8_E4M3, NULL);
            double gbs = bytes / (ms * 1e-3) / 1e9;
            char name[64];
            snprintf(name, sizeof name, "%d x %d fp8%s", dec[i][0], dec[i][1], t ? " tma" : "");
            printf("%-26s %10.1f %10.0f %7.1f%% %6.2fx", name, ms * 1e3, gbs, 100.0 * gbs / copy_gbs,
                   f16_ms[t][i] / ms);
            if (t) printf(" %6.2fx", f8_ms[0][i] / ms);
            printf("\n");
            f8_ms[t][i] = ms;
        }
    }
    if (saved_tma) setenv("AIINFRA_DEC_TMA", saved_tma, 1);
    else unsetenv("AIINFRA_DEC_TMA");
    free(saved_tma);
    /* prefill: the FA2 kernel and the Hopper one (AIINFRA_PREFILL, k_attention.cu's dispatch) */
    static const int pre[][2] = {{1, 4096}, {8, 512}};
    static const char *const pre_path[] = {"fa2", "fa3"};
    const char *env_pre = getenv("AIINFRA_PREFILL");
    char *saved_pre = env_pre ? strdup(env_pre) : NULL;
    printf("%-26s %10s %10s %8s\n", "prefill (causal)", "us", "TFLOP/s", "of GEMM");
    for (size_t k = 0; k < sizeof pre_path / sizeof pre_path[0]; k++) {
        setenv("AIINFRA_PREFILL", pre_path[k], 1);
        for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++) {
            double bytes;
            float ms = bench_attn(pre[i][0], pre[i][1], pre[i][1], pre[i][1], &bytes, 0);
            const double s = pre[i][1];
            double flop = pre[i][0] * 4.0 * s * s * 128 * 32 / 2;
            double tf = flop / (ms * 1e-3) / 1e12;
            char name[64];
            snprintf(name, sizeof name, "%d x %d %s", pre[i][0], pre[i][1], pre_path[k]);
            printf("%-26s %10.1f %10.1f %7.1f%%\n", name, ms * 1e3, tf, 100.0 * tf / gemm);
        }
    }
    /* fp8 cache, the default dispatch (the Hopper prefill is f16-only: FA2 on widened tiles) */
    unsetenv("AIINFRA_PREFILL");
    for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++) {
        double bytes;
        const char *path = "?";
        float ms = bench_attn_kv(pre[i][0], pre[i][1], pre[i][1], pre[i][1], &bytes, 0, DTYPE_F8_E4M3, &path);
        const double s = pre[i][1];
        double flop = pre[i][0] * 4.0 * s * s * 128 * 32 / 2;
        double tf = flop / (ms * 1e-3) / 1e12;
        char name[64];
        snprintf(name, sizeof name, "%d x %d fp8 (%s)", pre[i][0], pre[i][1], path);
        printf("%-26s %10.1f %10.1f %7.1f%%\n", name, ms * 1e3, tf, 100.0 * tf / gemm);
    }
    if (saved_pre) setenv("AIINFRA_PREFILL", saved_pre, 1);
    else unsetenv("AIINFRA_PREFILL");
    free(saved_pre);
    cudaFree(flush_buf);
    return 0;
}
#endif
