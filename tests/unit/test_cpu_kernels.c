/* test_cpu_kernels.c - CPU kernels vs the scalar reference and vs a double-precision reference,
 * and the thread pool.
 *
 * Inputs are fresh random numbers (seeded by time; the seed is printed on a failure) at odd sizes;
 * outputs are poisoned with NaN before every run, so an element a kernel forgets to write fails.
 *
 * Tolerances (why):
 *  - Activation quantizers: bytes must be identical across ISAs (same f32 operations, order-free).
 *  - Quantized dots with unit scales (d = 1, m = 0): the result is the integer sum itself, which is
 *    exact in f32 below 2^24, so every ISA must equal the int64 reference exactly.
 *  - Everything else is compared with a double-precision sum over the decoded operands:
 *    |y - ref| <= 1e-5 * sum_i |w_i x_i| + 1e-30. Accumulating n products in f32 in any order has a
 *    typical error ~sqrt(n) * 2^-24 * sum|w x| (~2e-6 at n = 1000) and dropping or doubling one term
 *    of n ~ 1000 costs ~1e-3 of it, so the bound passes correct kernels and catches wrong ones. For
 *    quantized blocks the reference uses the stored f16 scales and q8_1 sums, the same numbers the
 *    kernel sees.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "aiinfra/cpu_kernels.h"
#include "aiinfra/dtype.h"
#include "aiinfra/threadpool.h"
#include "backend/cpu/kernels.h" /* the tile kernels, tested directly for exactness */

static uint64_t g_seed, g_rng;
static uint32_t rnd(void)
{
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(g_rng >> 33);
}
static float rndf(void) { return (float)rnd() / 2147483648.0f - 1.0f; } /* [-1, 1) */

static int setup_seed(void **state)
{
    (void)state;
    g_seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20);
    g_rng = g_seed;
    return 0;
}

#define CHECK(cond, ...) do { if (!(cond)) { \
    fprintf(stderr, "seed=%llu: ", (unsigned long long)g_seed); fprintf(stderr, __VA_ARGS__); \
    fprintf(stderr, "\n"); fail(); } } while (0)

static void poison(float *y, size_t n) { for (size_t i = 0; i < n; i++) y[i] = NAN; }

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    assert_non_null(p);
    return p;
}

/* Decodes element i of a row of dtype t into (value of weight code) for the double reference. */
static double ref_dot(dtype wt, const void *w, const void *xa, int64_t n, double *abs_sum)
{
    double s = 0, as = 0;
    if (cpu_act_dtype(wt) == DTYPE_F32) {
        float *wf = xmalloc((size_t)n * sizeof *wf);
        assert_int_equal(dtype_dequantize_row(wt, w, wf, n, NULL), AI_OK);
        const float *x = xa;
        for (int64_t i = 0; i < n; i++) { s += (double)wf[i] * x[i]; as += fabs((double)wf[i] * x[i]); }
        free(wf);
    } else {
        for (int64_t b = 0; b < n / 32; b++) {
            int8_t qx[32];
            double dx, sx = 0;
            if (wt == DTYPE_Q4_1) {
                const dtype_block_q8_1 *xb = (const dtype_block_q8_1 *)xa + b;
                memcpy(qx, xb->qs, 32); dx = dtype_f16_to_f32(xb->d); sx = dtype_f16_to_f32(xb->s);
            } else {
                const dtype_block_q8_0 *xb = (const dtype_block_q8_0 *)xa + b;
                memcpy(qx, xb->qs, 32); dx = dtype_f16_to_f32(xb->d);
            }
            double dw, mw = 0;
            int qw[32];
            if (wt == DTYPE_Q8_0) {
                const dtype_block_q8_0 *wb = (const dtype_block_q8_0 *)w + b;
                dw = dtype_f16_to_f32(wb->d);
                for (int j = 0; j < 32; j++) qw[j] = wb->qs[j];
            } else if (wt == DTYPE_Q4_0) {
                const dtype_block_q4_0 *wb = (const dtype_block_q4_0 *)w + b;
                dw = dtype_f16_to_f32(wb->d);
                for (int j = 0; j < 16; j++) { qw[j] = (wb->qs[j] & 15) - 8; qw[j + 16] = (wb->qs[j] >> 4) - 8; }
            } else {
                const dtype_block_q4_1 *wb = (const dtype_block_q4_1 *)w + b;
                dw = dtype_f16_to_f32(wb->d); mw = dtype_f16_to_f32(wb->m);
                for (int j = 0; j < 16; j++) { qw[j] = wb->qs[j] & 15; qw[j + 16] = wb->qs[j] >> 4; }
            }
            for (int j = 0; j < 32; j++) {
                double p = dw * qw[j] * dx * qx[j];
                s += p; as += fabs(p);
            }
            s += mw * sx; as += fabs(mw * sx);
        }
    }
    *abs_sum = as;
    return s;
}

static const dtype WTYPES[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16, DTYPE_Q8_0, DTYPE_Q4_0, DTYPE_Q4_1};
#define N_WTYPES (sizeof WTYPES / sizeof WTYPES[0])

static void fill_weights(dtype wt, void *w, int64_t n_out, int64_t n_in)
{
    size_t rb;
    assert_int_equal(dtype_row_bytes(wt, n_in, &rb, NULL), AI_OK);
    float *row = xmalloc((size_t)n_in * sizeof *row);
    for (int64_t r = 0; r < n_out; r++) {
        float scale = (r % 3 == 0) ? 0.01f : 1.0f;
        for (int64_t i = 0; i < n_in; i++) row[i] = rndf() * scale + (wt == DTYPE_Q4_1 ? 0.3f * scale : 0.0f);
        assert_int_equal(dtype_quantize_row(wt, row, (uint8_t *)w + (size_t)r * rb, n_in, NULL), AI_OK);
    }
    free(row);
}

// --- activation quantizer: every ISA gives the scalar bytes

static void test_quantize_act_bytes(void **state)
{
    (void)state;
    const int64_t n = 32 * 41;
    float *x = xmalloc(n * sizeof *x);
    for (int64_t i = 0; i < n; i++) x[i] = rndf() * ((i / 32) % 4 == 1 ? 1e-4f : 5.0f);
    for (int64_t i = 32; i < 64; i++) x[i] = 0.0f;                             /* amax 0 */
    for (int64_t i = 64; i < 96; i++) x[i] = (float)((int)(rnd() % 200) - 100) + 0.5f; /* ties */
    x[64] = 127.0f;
    const dtype acts[] = {DTYPE_Q8_0, DTYPE_Q8_1};
    for (int a = 0; a < 2; a++) {
        size_t rb;
        assert_int_equal(dtype_row_bytes(acts[a], n, &rb, NULL), AI_OK);
        uint8_t *ref = xmalloc(rb), *got = xmalloc(rb);
        assert_int_equal(cpu_quantize_act(CPU_ISA_SCALAR, acts[a], x, ref, n, NULL), AI_OK);
        /* round half to even: the tie block has d = 1, so code = rint(x) */
        const int8_t *q = (const int8_t *)ref + (a == 0 ? 2 * 34 + 2 : 2 * 36 + 4);
        for (int j = 1; j < 32; j++) CHECK(q[j] == (int)rintf(x[64 + j]), "tie %g -> %d", x[64 + j], q[j]);
        for (int isa = 1; isa < CPU_ISA_COUNT; isa++) {
            if (!cpu_isa_available((cpu_isa)isa)) continue;
            memset(got, 0xAB, rb);
            assert_int_equal(cpu_quantize_act((cpu_isa)isa, acts[a], x, got, n, NULL), AI_OK);
            for (size_t i = 0; i < rb; i++)
                CHECK(got[i] == ref[i], "%s %s byte %zu: %d vs %d", cpu_isa_name((cpu_isa)isa),
                      dtype_name(acts[a]), i, got[i], ref[i]);
        }
        free(ref); free(got);
    }
    free(x);
}

// --- integer exactness with unit scales

static void test_quantized_dot_exact(void **state)
{
    (void)state;
    const int64_t n = 32 * 67;
    const int64_t nb = n / 32;
    dtype_block_q8_0 *x0 = xmalloc(nb * sizeof *x0);
    dtype_block_q8_1 *x1 = xmalloc(nb * sizeof *x1);
    dtype_block_q8_0 *w8 = xmalloc(nb * sizeof *w8);
    dtype_block_q4_0 *w40 = xmalloc(nb * sizeof *w40);
    dtype_block_q4_1 *w41 = xmalloc(nb * sizeof *w41);
    const uint16_t one = dtype_f32_to_f16(1.0f);
    int64_t ref8 = 0, ref40 = 0, ref41 = 0;
    for (int64_t b = 0; b < nb; b++) {
        x0[b].d = x1[b].d = w8[b].d = w40[b].d = w41[b].d = one;
        w41[b].m = 0; x1[b].s = 0;
        for (int j = 0; j < 32; j++) {
            /* full code ranges, including -128 in the weights (activations never hold -128) */
            int8_t xv = (int8_t)((int)(rnd() % 255) - 127);
            x0[b].qs[j] = x1[b].qs[j] = xv;
            w8[b].qs[j] = (int8_t)(rnd() % 256 - 128);
            ref8 += (int64_t)w8[b].qs[j] * xv;
        }
        for (int j = 0; j < 16; j++) {
            uint8_t c = (uint8_t)rnd();
            w40[b].qs[j] = w41[b].qs[j] = c;
            ref40 += (int64_t)((c & 15) - 8) * x0[b].qs[j] + (int64_t)((c >> 4) - 8) * x0[b].qs[j + 16];
            ref41 += (int64_t)(c & 15) * x0[b].qs[j] + (int64_t)(c >> 4) * x0[b].qs[j + 16];
        }
    }
    for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_isa_available((cpu_isa)isa)) continue;
        float r8 = cpu_dot_get((cpu_isa)isa, DTYPE_Q8_0)(n, w8, x0);
        float r40 = cpu_dot_get((cpu_isa)isa, DTYPE_Q4_0)(n, w40, x0);
        float r41 = cpu_dot_get((cpu_isa)isa, DTYPE_Q4_1)(n, w41, x1);
        CHECK(r8 == (float)ref8, "%s q8_0: %.1f vs %lld", cpu_isa_name((cpu_isa)isa), r8, (long long)ref8);
        CHECK(r40 == (float)ref40, "%s q4_0: %.1f vs %lld", cpu_isa_name((cpu_isa)isa), r40, (long long)ref40);
        CHECK(r41 == (float)ref41, "%s q4_1: %.1f vs %lld", cpu_isa_name((cpu_isa)isa), r41, (long long)ref41);
    }
    free(x0); free(x1); free(w8); free(w40); free(w41);
}

/* The register tiles (every shape the cover uses: 4 or 1 rows x CPU_TILE_T or 1 tokens, plus the
 * leftovers) with unit scales must give the exact integer sums, for every (row, token). */
static void test_tile_exact(void **state)
{
    (void)state;
    const int64_t nb = 13, n = 32 * nb;
    enum { NR = 9, NT = 5 };
    const dtype qts[] = {DTYPE_Q8_0, DTYPE_Q4_0, DTYPE_Q4_1};
    const uint16_t one = dtype_f32_to_f16(1.0f);
    for (size_t qi = 0; qi < 3; qi++) {
        const dtype wt = qts[qi];
        size_t wrow, xrow;
        assert_int_equal(dtype_row_bytes(wt, n, &wrow, NULL), AI_OK);
        assert_int_equal(dtype_row_bytes(cpu_act_dtype(wt), n, &xrow, NULL), AI_OK);
        uint8_t *w = xmalloc(wrow * NR), *x = xmalloc(xrow * NT);
        int wc[NR][32 * 13], xc[NT][32 * 13];
        for (int r = 0; r < NR; r++)
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *blk = w + (size_t)r * wrow + (size_t)b * (wrow / (size_t)nb);
                memcpy(blk, &one, 2);
                if (wt == DTYPE_Q4_1) memset(blk + 2, 0, 2); /* m = 0 */
                uint8_t *qs = blk + (wt == DTYPE_Q4_1 ? 4 : 2);
                if (wt == DTYPE_Q8_0) {
                    for (int j = 0; j < 32; j++) { int8_t v = (int8_t)(rnd() % 256 - 128); qs[j] = (uint8_t)v; wc[r][b * 32 + j] = v; }
                } else {
                    const int off = wt == DTYPE_Q4_0 ? 8 : 0;
                    for (int j = 0; j < 16; j++) {
                        uint8_t c = (uint8_t)rnd();
                        qs[j] = c;
                        wc[r][b * 32 + j] = (c & 15) - off;
                        wc[r][b * 32 + j + 16] = (c >> 4) - off;
                    }
                }
            }
        for (int t = 0; t < NT; t++)
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *blk = x + (size_t)t * xrow + (size_t)b * (xrow / (size_t)nb);
                memcpy(blk, &one, 2);
                if (wt == DTYPE_Q4_1) memset(blk + 2, 0, 2); /* s = 0 */
                int8_t *qs = (int8_t *)(blk + (wt == DTYPE_Q4_1 ? 4 : 2));
                for (int j = 0; j < 32; j++) { qs[j] = (int8_t)((int)(rnd() % 255) - 127); xc[t][b * 32 + j] = qs[j]; }
            }
        for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
            const cpu_kernels *k = cpu_kernels_for((cpu_isa)isa);
            if (!k) continue;
            for (int nr = 1; nr <= NR; nr++)
                for (int nt = 1; nt <= NT; nt++) {
                    float y[NT][NR + 1];
                    poison(&y[0][0], sizeof y / sizeof(float));
                    k->tile[wt](n, w, wrow, nr, x, xrow, nt, &y[0][0], NR + 1);
                    for (int t = 0; t < NT; t++)
                        for (int r = 0; r <= NR; r++) {
                            if (t >= nt || r >= nr) { CHECK(isnan(y[t][r]), "tile wrote outside %dx%d", nr, nt); continue; }
                            int64_t ref = 0;
                            for (int64_t i = 0; i < n; i++) ref += (int64_t)wc[r][i] * xc[t][i];
                            CHECK(y[t][r] == (float)ref, "%s %s tile %dx%d y[%d][%d] = %.1f, exact %lld",
                                  cpu_isa_name((cpu_isa)isa), dtype_name(wt), nr, nt, t, r, y[t][r], (long long)ref);
                        }
                }
        }
        free(w); free(x);
    }
}

// --- matmul: every dtype x ISA x threads vs the double reference

static void check_matmul(threadpool *pool, cpu_isa isa, dtype wt, int64_t n_out, int64_t n_in, int64_t n_tok)
{
    size_t rb, ws, arb;
    assert_int_equal(dtype_row_bytes(wt, n_in, &rb, NULL), AI_OK);
    assert_int_equal(cpu_matmul_work_size(wt, n_in, n_tok, &ws, NULL), AI_OK);
    dtype at = cpu_act_dtype(wt);
    assert_int_equal(dtype_row_bytes(at, n_in, &arb, NULL), AI_OK);
    uint8_t *w = xmalloc(rb * (size_t)n_out);
    float *x = xmalloc((size_t)(n_tok * n_in) * sizeof *x);
    float *y = xmalloc((size_t)(n_tok * n_out) * sizeof *y);
    uint8_t *work = xmalloc(ws), *xa = xmalloc(arb);
    fill_weights(wt, w, n_out, n_in);
    for (int64_t i = 0; i < n_tok * n_in; i++) x[i] = rndf() * 2.0f;
    poison(y, (size_t)(n_tok * n_out));
    ai_err e;
    ai_status st = cpu_matmul(pool, isa, wt, w, n_out, n_in, x, n_tok, y, work, ws, &e);
    CHECK(st == AI_OK, "cpu_matmul: %s", e.msg);
    for (int64_t t = 0; t < n_tok; t++) {
        /* the reference multiplies with the scalar quantizer's codes (bytes equal on every ISA) */
        assert_int_equal(cpu_quantize_act(CPU_ISA_SCALAR, at, x + t * n_in, xa, n_in, NULL), AI_OK);
        for (int64_t r = 0; r < n_out; r++) {
            double as, ref = ref_dot(wt, w + (size_t)r * rb, xa, n_in, &as);
            float got = y[t * n_out + r];
            CHECK(fabs(got - ref) <= 1e-5 * as + 1e-30, "%s %s threads=%d n_out=%lld n_in=%lld n_tok=%lld "
                  "y[%lld][%lld] = %.9g, reference %.9g (sum|wx| %.3g)", cpu_isa_name(isa), dtype_name(wt),
                  threadpool_n_threads(pool), (long long)n_out, (long long)n_in, (long long)n_tok,
                  (long long)t, (long long)r, got, ref, as);
        }
    }
    free(w); free(x); free(y); free(work); free(xa);
}

static void test_matmul_all(void **state)
{
    (void)state;
    static const int64_t n_in_f[] = {1, 7, 31, 33, 257, 1001};
    static const int64_t n_in_q[] = {32, 96, 32 * 33};
    static const int64_t shapes[][2] = {{1, 1}, {3, 2}, {37, 5}, {130, 19}}; /* n_out, n_tok */
    for (int nt = 1; nt <= 3; nt += 2) {
        threadpool *pool = NULL;
        if (nt > 1) assert_int_equal(threadpool_init(&pool, nt, NULL), AI_OK);
        for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
            if (!cpu_isa_available((cpu_isa)isa)) continue;
            for (size_t ti = 0; ti < N_WTYPES; ti++) {
                dtype wt = WTYPES[ti];
                bool q = cpu_act_dtype(wt) != DTYPE_F32;
                const int64_t *ns = q ? n_in_q : n_in_f;
                size_t nn = q ? 3 : 6;
                for (size_t a = 0; a < nn; a++)
                    for (size_t s = 0; s < 4; s++)
                        check_matmul(pool, (cpu_isa)isa, wt, shapes[s][0], ns[a], shapes[s][1]);
            }
        }
        threadpool_free(pool);
    }
}

/* Scalar and SIMD dots agree on the same operands (also covers the raw dot API). */
static void test_dot_isa_agree(void **state)
{
    (void)state;
    for (size_t ti = 0; ti < N_WTYPES; ti++) {
        dtype wt = WTYPES[ti], at = cpu_act_dtype(wt);
        int64_t n = at == DTYPE_F32 ? 1 + (int64_t)(rnd() % 3000) : 32 * (1 + (int64_t)(rnd() % 100));
        size_t rb, arb;
        assert_int_equal(dtype_row_bytes(wt, n, &rb, NULL), AI_OK);
        assert_int_equal(dtype_row_bytes(at, n, &arb, NULL), AI_OK);
        uint8_t *w = xmalloc(rb), *xa = xmalloc(arb);
        float *x = xmalloc((size_t)n * sizeof *x);
        fill_weights(wt, w, 1, n);
        for (int64_t i = 0; i < n; i++) x[i] = rndf();
        assert_int_equal(cpu_quantize_act(CPU_ISA_SCALAR, at, x, xa, n, NULL), AI_OK);
        double as, ref = ref_dot(wt, w, xa, n, &as);
        for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
            cpu_dot_fn f = cpu_dot_get((cpu_isa)isa, wt);
            if (!cpu_isa_available((cpu_isa)isa)) { assert_null(f); continue; }
            assert_non_null(f);
            float got = f(n, w, xa);
            CHECK(fabs(got - ref) <= 1e-5 * as, "%s %s n=%lld: %.9g vs %.9g", cpu_isa_name((cpu_isa)isa),
                  dtype_name(wt), (long long)n, got, ref);
        }
        free(w); free(xa); free(x);
    }
}

static void test_matmul_errors(void **state)
{
    (void)state;
    ai_err e;
    float x[64] = {0}, y[4];
    uint8_t w[4 * 18] = {0}, work[68];
    size_t ws;
    assert_int_equal(cpu_matmul_work_size(DTYPE_Q4_0, 33, 1, &ws, &e), AI_ERR_INVALID);
    assert_int_equal(cpu_matmul_work_size(DTYPE_Q4_K, 256, 1, &ws, &e), AI_ERR_UNSUPPORTED);
    assert_int_equal(cpu_matmul_work_size(DTYPE_Q4_0, 64, 1, &ws, NULL), AI_OK);
    assert_int_equal(ws, 68);
    assert_int_equal(cpu_matmul(NULL, CPU_ISA_SCALAR, DTYPE_Q4_0, w, 2, 64, x, 1, y, work, 10, &e), AI_ERR_INVALID);
    assert_non_null(strstr(e.msg, "work"));
    assert_int_equal(cpu_matmul(NULL, CPU_ISA_SCALAR, DTYPE_Q4_0, w, 2, 48, x, 1, y, work, 68, &e), AI_ERR_INVALID);
    assert_int_equal(cpu_matmul(NULL, CPU_ISA_SCALAR, DTYPE_Q4_0, NULL, 2, 64, x, 1, y, work, 68, &e), AI_ERR_INVALID);
    assert_int_equal(cpu_matmul(NULL, CPU_ISA_COUNT, DTYPE_F32, w, 1, 4, x, 1, y, NULL, 0, &e), AI_ERR_UNSUPPORTED);
    assert_int_equal(cpu_matmul(NULL, CPU_ISA_SCALAR, DTYPE_Q4_0, w, 2, 64, x, 1, y, work, 68, &e), AI_OK);
    assert_int_equal(cpu_quantize_act(CPU_ISA_SCALAR, DTYPE_Q4_0, x, work, 32, &e), AI_ERR_UNSUPPORTED);
#if defined(__x86_64__)
    /* the SIMD tests above must not silently skip AVX2 on a machine that has it */
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        assert_true(cpu_isa_available(CPU_ISA_AVX2));
        if (!getenv("AIINFRA_CPU_ISA")) assert_true(cpu_isa_best() >= CPU_ISA_AVX2);
    }
#endif
}

/* The loops above cover every available ISA; this makes sure AVX-512 is among them where the CPU
 * has it (gcc's own CPUID reading, independent of matmul.c's), and says once when it is not. */
static void test_avx512_present(void **state)
{
    (void)state;
#if defined(__x86_64__)
    __builtin_cpu_init();
    const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                     __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx2") &&
                     __builtin_cpu_supports("fma");
    assert_int_equal(cpu_isa_available(CPU_ISA_AVX512), has);
    if (!has) {
        assert_null(cpu_kernels_for(CPU_ISA_AVX512));
        print_message("[  NOTE    ] this CPU has no AVX-512: the avx512 kernels are not exercised here\n");
        return;
    }
    assert_non_null(cpu_kernels_for(CPU_ISA_AVX512));
    if (!getenv("AIINFRA_CPU_ISA")) assert_int_equal(cpu_isa_best(), CPU_ISA_AVX512);
    print_message("[  NOTE    ] AVX-512 present: the avx512 kernels were compared with the scalar reference\n");
#else
    assert_false(cpu_isa_available(CPU_ISA_AVX512));
#endif
}

// --- thread pool

typedef struct tp_ctx {
    atomic_int *hits;   /* (n_tasks) */
    atomic_int bad_thread;
    int n_threads;
} tp_ctx;

static void tp_task(void *ctx, int64_t task, int thread)
{
    tp_ctx *c = ctx;
    atomic_fetch_add(&c->hits[task], 1);
    if (thread < 0 || thread >= c->n_threads) atomic_store(&c->bad_thread, 1);
}

static void test_threadpool(void **state)
{
    (void)state;
    for (int nt = 1; nt <= 4; nt++) {
        threadpool *pool;
        assert_int_equal(threadpool_init(&pool, nt, NULL), AI_OK);
        assert_int_equal(threadpool_n_threads(pool), nt);
        for (int run = 0; run < 300; run++) {
            int64_t n = (run * 7919) % 1000; /* includes 0 and 1 */
            tp_ctx c = {.hits = xmalloc((size_t)(n ? n : 1) * sizeof(atomic_int)), .n_threads = nt};
            atomic_init(&c.bad_thread, 0);
            for (int64_t i = 0; i < n; i++) atomic_init(&c.hits[i], 0);
            threadpool_run(pool, n, tp_task, &c);
            for (int64_t i = 0; i < n; i++) CHECK(atomic_load(&c.hits[i]) == 1, "threads=%d run %d task %lld ran %d times",
                                                  nt, run, (long long)i, atomic_load(&c.hits[i]));
            assert_int_equal(atomic_load(&c.bad_thread), 0);
            free(c.hits);
        }
        threadpool_free(pool);
    }
    threadpool *p;
    ai_err e;
    assert_int_equal(threadpool_init(&p, 0, &e), AI_ERR_INVALID);
    assert_null(p);
    threadpool_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quantize_act_bytes),
        cmocka_unit_test(test_quantized_dot_exact),
        cmocka_unit_test(test_dot_isa_agree),
        cmocka_unit_test(test_tile_exact),
        cmocka_unit_test(test_matmul_all),
        cmocka_unit_test(test_matmul_errors),
        cmocka_unit_test(test_avx512_present),
        cmocka_unit_test(test_threadpool),
    };
    return cmocka_run_group_tests(tests, setup_seed, NULL);
}
