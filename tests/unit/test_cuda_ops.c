/* test_cuda_ops.c - the elementwise and row kernels of k_elementwise.cu against CPU references.
 *
 * References: double-precision formulas for add, swiglu, rmsnorm; the CPU model's own model_rmsnorm
 * and model_rope (src/model/ops.c) for the ops the GPU must reproduce to rounding; dtype.h's
 * quantizers/dequantizers for the embedding table (GGUF rows repacked here into the planar layout
 * of cuda_kernels.h). Sizes avoid multiples of the kernels' tiles; outputs start poisoned (NaN), and
 * strided/padded regions must keep their values.
 *
 * Tolerances (relative, ||out - ref|| / ||ref||): add, gather, kv_store, f32/f16/bf16 embed: exact;
 * quantized embed: 1e-6 (the GPU may fuse nib * d + m); swiglu: 1e-6 (expf differs by ulps);
 * rmsnorm: 1e-5 against double and against model_rmsnorm; rope: 1e-5 against model_rope at
 * positions up to 32767 (what is measured is printed).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test.h"

#include "aiinfra/dtype.h"
#include "aiinfra/fp8.h"
#include "aiinfra/model.h"
#include "backend/cuda/cuda_kernels.h"

#define OK(call)                                                                    \
    do {                                                                            \
        ai_err e_ = { 0 };                                                          \
        ai_status st_ = (call);                                                     \
        if (st_ != AI_OK) fail_msg("%s: %s", #call, e_.msg[0] ? e_.msg : "failed"); \
    } while (0)

/* calls taking &e_ as their ai_err */
#define ERR (&e_)

static float *rnd(size_t n, uint64_t *seed, float scale)
{
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    cuda_test_fill(x, n, seed, scale);
    return x;
}

static void check_rel(const char *what, const float *out, const double *ref, size_t n, double tol)
{
    double e = cuda_test_rel_err(out, ref, n);
    if (!(e <= tol)) fail_msg("%s: relative error %.3g > %.3g", what, e, tol);
}

// --- fill, add, swiglu, bias ------------------------------------------------------------------

static void test_fill_add(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    uint64_t seed = 11;
    const int64_t sizes[] = { 1, 3, 1003, 4096 };
    for (size_t c = 0; c < sizeof sizes / sizeof *sizes; c++) {
        int64_t n = sizes[c];
        float *x = rnd((size_t)n, &seed, 2), *y = rnd((size_t)n, &seed, 2), *o = malloc((size_t)n * 4);
        double *ref = malloc((size_t)n * sizeof *ref);
        float *dx = cuda_test_dup(x, (size_t)n * 4), *dy = cuda_test_dup(y, (size_t)n * 4);
        OK(cuk_add(NULL, dx, dy, n, ERR));
        cuda_test_get(o, dx, (size_t)n * 4);
        for (int64_t i = 0; i < n; i++) ref[i] = (double)(x[i] + y[i]);
        check_rel("add", o, ref, (size_t)n, 0);
        float *df = cuda_test_dup(NULL, (size_t)n * 4);
        OK(cuk_fill_f32(NULL, df, n, -1.25f, ERR));
        cuda_test_get(o, df, (size_t)n * 4);
        for (int64_t i = 0; i < n; i++) assert_true(o[i] == -1.25f);
        cudaFree(dx); cudaFree(dy); cudaFree(df);
        free(x); free(y); free(o); free(ref);
    }
}

static void test_swiglu(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    uint64_t seed = 12;
    const int64_t sizes[] = { 5, 1001, 4096 };
    for (size_t c = 0; c < sizeof sizes / sizeof *sizes; c++) {
        for (int alias = 0; alias < 2; alias++) {
            int64_t n = sizes[c];
            size_t b = (size_t)n * 4;
            float *g = rnd((size_t)n, &seed, 8), *u = rnd((size_t)n, &seed, 3), *o = malloc(b);
            double *ref = malloc((size_t)n * sizeof *ref);
            for (int64_t i = 0; i < n; i++) ref[i] = (double)g[i] / (1.0 + exp(-(double)g[i])) * (double)u[i];
            float *dg = cuda_test_dup(g, b), *du = cuda_test_dup(u, b), *dout = alias ? dg : cuda_test_dup(NULL, b);
            OK(cuk_swiglu(NULL, dout, dg, du, n, ERR));
            cuda_test_get(o, dout, b);
            check_rel("swiglu", o, ref, (size_t)n, 1e-6);
            if (!alias) cudaFree(dout);
            cudaFree(dg); cudaFree(du);
            free(g); free(u); free(o); free(ref);
        }
    }
}

static void test_add_bias(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    uint64_t seed = 13;
    const int32_t rows = 7, n = 300;
    const int64_t stride = 310;
    size_t tot = (size_t)rows * stride;
    float *y = rnd(tot, &seed, 1), *bias = rnd((size_t)n, &seed, 1), *o = malloc(tot * 4);
    float *dy = cuda_test_dup(y, tot * 4), *db = cuda_test_dup(bias, (size_t)n * 4);
    OK(cuk_add_bias(NULL, dy, db, rows, n, stride, ERR));
    cuda_test_get(o, dy, tot * 4);
    for (int32_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < stride; j++) {
            float want = j < n ? y[r * stride + j] + bias[j] : y[r * stride + j];
            assert_true(o[r * stride + j] == want);
        }
    cudaFree(dy); cudaFree(db);
    free(y); free(bias); free(o);
}

// --- rmsnorm -------------------------------------------------------------------------------------

static void rmsnorm_case(int32_t rows, int32_t dim, int with_w, int add, int alias, uint64_t *seed)
{
    const float eps = 1e-5f;
    size_t n = (size_t)rows * dim, b = n * 4;
    float *x = rnd(n, seed, 3), *d = rnd(n, seed, 1), *w = rnd((size_t)dim, seed, 2), *o = malloc(b);
    float *xo = malloc(b), *cpu = malloc(b), *xs = malloc(b);
    double *ref = malloc(n * sizeof *ref);
    for (size_t i = 0; i < n; i++) xs[i] = add ? x[i] + d[i] : x[i];
    for (int32_t r = 0; r < rows; r++) {
        const float *xr = xs + (size_t)r * dim;
        double ss = 0;
        for (int32_t j = 0; j < dim; j++) ss += (double)xr[j] * xr[j];
        double sc = 1.0 / sqrt(ss / dim + eps);
        for (int32_t j = 0; j < dim; j++) ref[(size_t)r * dim + j] = xr[j] * sc * (with_w ? w[j] : 1.0);
        model_rmsnorm(cpu + (size_t)r * dim, xr, with_w ? w : NULL, dim, eps);
    }
    float *dx = cuda_test_dup(x, b), *dd = cuda_test_dup(d, b), *dw = cuda_test_dup(w, (size_t)dim * 4);
    float *dout = alias ? dx : cuda_test_dup(NULL, b);
    if (add) OK(cuk_add_rmsnorm(NULL, dx, dd, dout, with_w ? dw : NULL, rows, dim, eps, ERR));
    else OK(cuk_rmsnorm(NULL, dout, dx, with_w ? dw : NULL, rows, dim, eps, ERR));
    cuda_test_get(o, dout, b);
    char what[96];
    snprintf(what, sizeof what, "%srmsnorm rows %d dim %d w %d alias %d", add ? "add_" : "", rows, dim, with_w, alias);
    check_rel(what, o, ref, n, 1e-5);
    double *cref = calloc(n, sizeof *cref);
    for (size_t i = 0; i < n; i++) cref[i] = cpu[i];
    check_rel(what, o, cref, n, 1e-5);
    if (add && !alias) { /* the residual stream itself: exactly x + delta */
        cuda_test_get(xo, dx, b);
        for (size_t i = 0; i < n; i++) assert_true(xo[i] == xs[i]);
    }
    if (!alias) cudaFree(dout);
    cudaFree(dx); cudaFree(dd); cudaFree(dw);
    free(x); free(d); free(w); free(o); free(xo); free(cpu); free(xs); free(ref); free(cref);
}

static void test_rmsnorm(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    uint64_t seed = 14;
    const int32_t shapes[][2] = { { 3, 4096 }, { 5, 100 }, { 2, 16384 }, { 2, 16388 }, { 7, 130 }, { 64, 128 }, { 1, 1 },
                                  { 3, 4100 }, { 9, 512 }, { 13, 516 }, { 17, 4 } };
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++)
        for (int add = 0; add < 2; add++) {
            rmsnorm_case(shapes[c][0], shapes[c][1], 1, add, 0, &seed);
            rmsnorm_case(shapes[c][0], shapes[c][1], 0, add, 0, &seed);
            rmsnorm_case(shapes[c][0], shapes[c][1], 1, add, 1, &seed);
        }
    ai_err e = { 0 };
    assert_int_equal(cuk_rmsnorm(NULL, (float *)16, (float *)16, NULL, 1, 0, 1e-5f, &e), AI_ERR_INVALID);
    assert_non_null(strstr(e.msg, "cuk_rmsnorm"));
}

// --- rope ----------------------------------------------------------------------------------------

static void test_rope(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    uint64_t seed = 15;
    const int32_t n_tok = 6, n_heads = 3, pos[6] = { 0, 1, 4097, 20000, 31111, 32767 };
    struct { int32_t head_dim, rope_dim; float base, freq_scale; int factors, neox; } cases[] = {
        { 128, 128, 500000.0f, 1.0f, 1, 0 }, { 128, 128, 10000.0f, 1.0f, 0, 1 }, { 128, 64, 10000.0f, 0.25f, 0, 0 },
        { 64, 32, 1000000.0f, 1.0f, 1, 1 },  { 96, 96, 10000.0f, 0.5f, 1, 0 },   { 80, 40, 10000.0f, 1.0f, 0, 1 },
    };
    double worst = 0;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const int32_t hd = cases[c].head_dim, rd = cases[c].rope_dim;
        const int64_t stride = (int64_t)n_heads * hd + 8;
        size_t n = (size_t)n_tok * stride;
        float *x = rnd(n, &seed, 2), *cpu = malloc(n * 4), *o = malloc(n * 4);
        float *ff = malloc((size_t)rd / 2 * 4);
        for (int32_t i = 0; i < rd / 2; i++) ff[i] = 1.0f + 7.0f * (0.5f + 0.5f * cuda_test_randf(&seed));
        memcpy(cpu, x, n * 4);
        for (int32_t t = 0; t < n_tok; t++)
            model_rope(cpu + t * stride, n_heads, hd, rd, pos[t], cases[c].base, cases[c].freq_scale,
                       cases[c].factors ? ff : NULL, cases[c].neox ? MODEL_ROPE_NEOX : MODEL_ROPE_NORM);
        float *dx = cuda_test_dup(x, n * 4), *dff = cuda_test_dup(ff, (size_t)rd / 2 * 4);
        int32_t *dpos = cuda_test_dup(pos, sizeof pos);
        OK(cuk_rope(NULL, dx, n_tok, n_heads, stride, hd, rd, dpos, cases[c].base, cases[c].freq_scale,
                    cases[c].factors ? dff : NULL, cases[c].neox, ERR));
        cuda_test_get(o, dx, n * 4);
        /* padding and the unrotated dims are untouched */
        for (int32_t t = 0; t < n_tok; t++) {
            for (int64_t j = (int64_t)n_heads * hd; j < stride; j++) assert_true(o[t * stride + j] == x[t * stride + j]);
            for (int32_t h = 0; h < n_heads; h++)
                for (int32_t j = rd; j < hd; j++) assert_true(o[t * stride + h * hd + j] == x[t * stride + h * hd + j]);
        }
        double *ref = malloc(n * sizeof *ref);
        for (size_t i = 0; i < n; i++) ref[i] = cpu[i];
        double e = cuda_test_rel_err(o, ref, n);
        if (e > worst) worst = e;
        if (!(e <= 1e-5)) fail_msg("rope case %zu: relative error %.3g vs model_rope", c, e);
        /* per position 32767 alone (the largest angles) */
        double e_last = cuda_test_rel_err(o + 5 * stride, ref + 5 * stride, (size_t)stride);
        if (!(e_last <= 1e-5)) fail_msg("rope case %zu at pos 32767: relative error %.3g", c, e_last);
        cudaFree(dx); cudaFree(dff); cudaFree(dpos);
        free(x); free(cpu); free(o); free(ff); free(ref);
    }
    printf("rope: worst relative error vs model_rope %.3g\n", worst);
}

/* cuk_rope_store = cuk_rope on q and k, then cuk_kv_store: the same bits (same angles, same math),
 * for the three cache dtypes (fp8 with scales != 1), partial rope, neox and not, padded strides, a slot < 0 (rotate only). */
static void test_rope_store(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    uint64_t seed = 21;
    const int32_t n_tok = 5, nh = 6, nkv = 2, pos[5] = { 0, 3, 511, 4097, 30000 }, slot[5] = { 4, -1, 0, 9, 2 };
    const int32_t slots = 11;
    struct { int32_t hd, rd, neox; } cases[] = { { 128, 128, 0 }, { 64, 32, 1 }, { 80, 80, 1 } };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (int f16 = 0; f16 < 3; f16++) { /* 0 f32, 1 f16, 2 fp8 e4m3 */
            const int32_t hd = cases[c].hd, rd = cases[c].rd, kvd = nkv * hd;
            const int64_t qs = (int64_t)nh * hd + 4, ks = kvd + 12, vs = kvd + 3;
            const size_t es = f16 == 2 ? 1 : f16 ? 2 : 4, cb = (size_t)slots * kvd * es;
            const float ksc = f16 == 2 ? 0.37f : 1.0f, vsc = f16 == 2 ? 2.5f : 1.0f;
            float *q = rnd((size_t)n_tok * qs, &seed, 2), *k = rnd((size_t)n_tok * ks, &seed, 2);
            float *v = rnd((size_t)n_tok * vs, &seed, 2);
            float *dq[2], *dk[2], *dv = cuda_test_dup(v, (size_t)n_tok * vs * 4);
            void *dkc[2], *dvc[2];
            unsigned char *junk = malloc(cb);
            for (size_t i = 0; i < cb; i++) junk[i] = (unsigned char)(i * 13 + 5);
            for (int i = 0; i < 2; i++) {
                dq[i] = cuda_test_dup(q, (size_t)n_tok * qs * 4);
                dk[i] = cuda_test_dup(k, (size_t)n_tok * ks * 4);
                dkc[i] = cuda_test_dup(junk, cb);
                dvc[i] = cuda_test_dup(junk, cb);
            }
            int32_t *dpos = cuda_test_dup(pos, sizeof pos), *dslot = cuda_test_dup(slot, sizeof slot);
            const dtype kt = f16 == 2 ? DTYPE_F8_E4M3 : f16 ? DTYPE_F16 : DTYPE_F32;
            OK(cuk_rope(NULL, dq[0], n_tok, nh, qs, hd, rd, dpos, 10000.0f, 1.0f, NULL, cases[c].neox, ERR));
            OK(cuk_rope(NULL, dk[0], n_tok, nkv, ks, hd, rd, dpos, 10000.0f, 1.0f, NULL, cases[c].neox, ERR));
            OK(cuk_kv_store(NULL, dkc[0], dvc[0], kt, ksc, vsc, dk[0], ks, dv, vs, n_tok, kvd, kvd, dslot, ERR));
            const cuk_rope_kv rk = {.n_head = nh, .n_head_kv = nkv, .head_dim = hd, .head_dim_v = hd, .rope_dim = rd,
                                    .pos = dpos, .base = 10000.0f, .freq_scale = 1.0f, .neox = cases[c].neox,
                                    .k_cache = dkc[1], .v_cache = dvc[1], .kv_type = kt, .k_scale = ksc,
                                    .v_scale = vsc, .slot = dslot};
            OK(cuk_rope_store(NULL, dq[1], qs, dk[1], ks, dv, vs, n_tok, &rk, ERR));
            const size_t nq = (size_t)n_tok * qs * 4, nk = (size_t)n_tok * ks * 4;
            unsigned char *a = malloc(nq > cb ? nq : cb), *b = malloc(nq > cb ? nq : cb);
            cuda_test_get(a, dq[0], nq), cuda_test_get(b, dq[1], nq);
            if (memcmp(a, b, nq)) fail_msg("rope_store case %zu f16 %d: q differs from cuk_rope", c, f16);
            cuda_test_get(a, dk[0], nk), cuda_test_get(b, dk[1], nk);
            if (memcmp(a, b, nk)) fail_msg("rope_store case %zu f16 %d: k differs from cuk_rope", c, f16);
            cuda_test_get(a, dkc[0], cb), cuda_test_get(b, dkc[1], cb);
            if (memcmp(a, b, cb)) fail_msg("rope_store case %zu f16 %d: k cache differs from cuk_kv_store", c, f16);
            cuda_test_get(a, dvc[0], cb), cuda_test_get(b, dvc[1], cb);
            if (memcmp(a, b, cb)) fail_msg("rope_store case %zu f16 %d: v cache differs from cuk_kv_store", c, f16);
            for (int i = 0; i < 2; i++) cudaFree(dq[i]), cudaFree(dk[i]), cudaFree(dkc[i]), cudaFree(dvc[i]);
            cudaFree(dv), cudaFree(dpos), cudaFree(dslot);
            free(q), free(k), free(v), free(junk), free(a), free(b);
        }
}

// --- kv store, gather ------------------------------------------------------------------------------

static void test_kv_store(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    uint64_t seed = 16;
    const int32_t n_tok = 6, kvd = 40, kvdv = 24, slots = 9, slot[6] = { 3, -1, 0, 7, 5, -1 };
    const int64_t ks = 48, vs = 30;
    float *k = rnd((size_t)n_tok * ks, &seed, 100), *v = rnd((size_t)n_tok * vs, &seed, 100);
    for (int f16 = 0; f16 < 3; f16++) { /* 0 f32, 1 f16, 2 fp8 e4m3 against src/core/fp8.c */
        if (f16 == 2) v[2] = NAN, v[3] = INFINITY, k[4] = -1e5f; /* NaN -> 0x7F, saturation */
        size_t es = f16 == 2 ? 1 : f16 ? 2 : 4, kb = (size_t)slots * kvd * es, vb = (size_t)slots * kvdv * es;
        const float ksc = 0.1f, vsc = 3.0f;
        unsigned char *kc0 = malloc(kb), *vc0 = malloc(vb), *kc = malloc(kb), *vc = malloc(vb);
        for (size_t i = 0; i < kb; i++) kc0[i] = (unsigned char)(i * 7 + 1);
        for (size_t i = 0; i < vb; i++) vc0[i] = (unsigned char)(i * 5 + 3);
        void *dkc = cuda_test_dup(kc0, kb), *dvc = cuda_test_dup(vc0, vb);
        float *dk = cuda_test_dup(k, (size_t)n_tok * ks * 4), *dv = cuda_test_dup(v, (size_t)n_tok * vs * 4);
        int32_t *dslot = cuda_test_dup(slot, sizeof slot);
        OK(cuk_kv_store(NULL, dkc, dvc, f16 == 2 ? DTYPE_F8_E4M3 : f16 ? DTYPE_F16 : DTYPE_F32, ksc, vsc, dk, ks, dv, vs, n_tok, kvd, kvdv, dslot, ERR));
        cuda_test_get(kc, dkc, kb);
        cuda_test_get(vc, dvc, vb);
        for (int pass = 0; pass < 2; pass++) {
            const int32_t w = pass ? kvdv : kvd;
            const int64_t st = pass ? vs : ks;
            const float *src = pass ? v : k;
            unsigned char *c = pass ? vc : kc, *c0 = pass ? vc0 : kc0;
            for (int32_t s = 0; s < slots; s++) {
                int32_t t = -1;
                for (int32_t i = 0; i < n_tok; i++)
                    if (slot[i] == s) t = i;
                for (int32_t j = 0; j < w; j++) {
                    size_t off = ((size_t)s * w + j) * es;
                    if (t < 0) {
                        assert_memory_equal(c + off, c0 + off, es);
                    } else if (f16 == 2) {
                        uint8_t want = fp8_e4m3_from_f32(src[t * st + j] / (pass ? vsc : ksc));
                        if (c[off] != want)
                            fail_msg("kv_store fp8 slot %d [%d]: 0x%02x, CPU 0x%02x for %g", s, j, c[off], want,
                                     (double)src[t * st + j]);
                    } else if (f16) {
                        uint16_t h, want = dtype_f32_to_f16(src[t * st + j]);
                        memcpy(&h, c + off, 2);
                        assert_int_equal(h, want);
                    } else {
                        assert_memory_equal(c + off, &src[t * st + j], 4);
                    }
                }
            }
        }
        cudaFree(dkc); cudaFree(dvc); cudaFree(dk); cudaFree(dv); cudaFree(dslot);
        free(kc0); free(vc0); free(kc); free(vc);
    }
    free(k); free(v);
}

static void test_gather(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    uint64_t seed = 17;
    const int32_t idx[4] = { 4, 0, 4, 9 }, dims[2] = { 36, 37 };
    for (int c = 0; c < 2; c++) {
        const int32_t dim = dims[c];
        float *in = rnd((size_t)10 * dim, &seed, 1), *o = malloc((size_t)4 * dim * 4);
        float *din = cuda_test_dup(in, (size_t)10 * dim * 4), *dout = cuda_test_dup(NULL, (size_t)4 * dim * 4);
        int32_t *didx = cuda_test_dup(idx, sizeof idx);
        OK(cuk_gather_rows(NULL, dout, din, didx, 4, dim, ERR));
        cuda_test_get(o, dout, (size_t)4 * dim * 4);
        for (int r = 0; r < 4; r++) assert_memory_equal(o + r * dim, in + idx[r] * dim, (size_t)dim * 4);
        cudaFree(din); cudaFree(dout); cudaFree(didx);
        free(in); free(o);
    }
}

// --- embedding -----------------------------------------------------------------------------------

/* GGUF rows (n_out rows of dtype_row_bytes) -> the planar layout of cuda_kernels.h. */
static void planar_pack(dtype t, const unsigned char *src, int64_t n_out, int64_t n_in, unsigned char *dst)
{
    const size_t bs = t == DTYPE_Q8_0 ? 34 : t == DTYPE_Q4_0 ? 18 : 20, qb = t == DTYPE_Q8_0 ? 32 : 16,
                 sb = t == DTYPE_Q4_1 ? 4 : 2, nb = (size_t)(n_in / 32);
    const size_t qs_bytes = (size_t)n_out * nb * qb;
    for (size_t b = 0; b < (size_t)n_out * nb; b++) {
        memcpy(dst + qs_bytes + b * sb, src + b * bs, sb);   /* d (and m) */
        memcpy(dst + b * qb, src + b * bs + sb, qb);          /* quants */
    }
}

static void test_embed(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    uint64_t seed = 18;
    const int32_t n_vocab = 37, tokens[5] = { 5, 0, 36, 5, 17 };
    const dtype types[] = { DTYPE_F32, DTYPE_F16, DTYPE_BF16, DTYPE_Q8_0, DTYPE_Q4_0, DTYPE_Q4_1 };
    const int64_t dims[] = { 96, 50, 64 };
    int32_t *dtok = cuda_test_dup(tokens, sizeof tokens);
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
        for (size_t di = 0; di < sizeof dims / sizeof *dims; di++) {
            const dtype t = types[ti];
            const int64_t dim = dims[di];
            const int quant = t == DTYPE_Q8_0 || t == DTYPE_Q4_0 || t == DTYPE_Q4_1;
            if (quant && dim % 32) continue;
            size_t rb = 0;
            ai_err e = { 0 };
            assert_int_equal(dtype_row_bytes(t, dim, &rb, &e), AI_OK);
            float *tab = rnd((size_t)n_vocab * dim, &seed, 2), *deq = malloc((size_t)n_vocab * dim * 4);
            unsigned char *rows = malloc(rb * n_vocab), *dev = malloc(rb * n_vocab);
            for (int32_t r = 0; r < n_vocab; r++) {
                assert_int_equal(dtype_quantize_row(t, tab + r * dim, rows + r * rb, dim, &e), AI_OK);
                assert_int_equal(dtype_dequantize_row(t, rows + r * rb, deq + r * dim, dim, &e), AI_OK);
            }
            if (quant) planar_pack(t, rows, n_vocab, dim, dev);
            else memcpy(dev, rows, rb * n_vocab);
            void *dtab = cuda_test_dup(dev, rb * n_vocab);
            float *dout = cuda_test_dup(NULL, (size_t)5 * dim * 4), *o = malloc((size_t)5 * dim * 4);
            cuk_weight w = { .type = t, .n_out = n_vocab, .n_in = dim, .data = dtab };
            OK(cuk_embed(NULL, dout, &w, dtok, 5, ERR));
            cuda_test_get(o, dout, (size_t)5 * dim * 4);
            double *ref = malloc((size_t)5 * dim * sizeof *ref);
            for (int r = 0; r < 5; r++)
                for (int64_t j = 0; j < dim; j++) ref[r * dim + j] = deq[tokens[r] * dim + j];
            char what[64];
            snprintf(what, sizeof what, "embed %s dim %lld", dtype_name(t), (long long)dim);
            check_rel(what, o, ref, (size_t)5 * dim, quant ? 1e-6 : 0);
            cudaFree(dtab); cudaFree(dout);
            free(tab); free(deq); free(rows); free(dev); free(o); free(ref);
        }
    cudaFree(dtok);
}

int main(void)
{
    cuda_test_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fill_add), cmocka_unit_test(test_swiglu),   cmocka_unit_test(test_add_bias),
        cmocka_unit_test(test_rmsnorm),  cmocka_unit_test(test_rope), cmocka_unit_test(test_rope_store),     cmocka_unit_test(test_kv_store),
        cmocka_unit_test(test_gather),   cmocka_unit_test(test_embed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
