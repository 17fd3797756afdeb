/* test_dtype.c - dtype traits, exhaustive f16/bf16 conversions, quantize/dequantize round trips.
 *
 * Byte parity of the quantizers with ggml's reference is checked in tests/py/test_quant_parity.py
 * (against the gguf package); here we check the properties that need no reference: exactness of
 * the conversions over every 16-bit input, rounding ties, and the error bound of each block format.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "aiinfra/dtype.h"
#include "aiinfra/fp8.h"

static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static uint64_t rng_state;
static uint32_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}
static float rnd_normalish(void) { return ((float)rnd() / 2147483648.0f - 1.0f) * 2.0f; }

/* Independent f16 decoder from the IEEE definition (ldexp), for the exhaustive check. */
static float f16_ref(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    float v;
    if (e == 0) v = ldexpf((float)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexpf((float)(1024 + m), e - 25);
    return s ? -v : v;
}

static void test_traits(void **state)
{
    (void)state;
    static const struct { dtype t; const char *name; int ggml; int64_t bs; size_t bb; } want[] = {
        {DTYPE_F32, "f32", 0, 1, 4}, {DTYPE_F16, "f16", 1, 1, 2}, {DTYPE_BF16, "bf16", 30, 1, 2},
        {DTYPE_Q8_0, "q8_0", 8, 32, 34}, {DTYPE_Q4_0, "q4_0", 2, 32, 18}, {DTYPE_Q4_1, "q4_1", 3, 32, 20},
        {DTYPE_Q8_1, "q8_1", 9, 32, 36}, {DTYPE_Q4_K, "q4_K", 12, 256, 144}, {DTYPE_Q6_K, "q6_K", 14, 256, 210},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const dtype_traits *tr = dtype_get(want[i].t);
        assert_non_null(tr);
        assert_string_equal(tr->name, want[i].name);
        assert_int_equal(tr->ggml_type, want[i].ggml);
        assert_int_equal(tr->block_size, want[i].bs);
        assert_int_equal(tr->block_bytes, want[i].bb);
        dtype t;
        assert_int_equal(dtype_from_ggml((uint32_t)want[i].ggml, &t, NULL), AI_OK);
        assert_int_equal(t, want[i].t);
    }
    assert_null(dtype_get(DTYPE_COUNT));
    assert_null(dtype_get((dtype)-1));
    ai_err e;
    dtype t;
    assert_int_equal(dtype_from_ggml(6, &t, &e), AI_ERR_UNSUPPORTED); /* q5_0: not ours */
    assert_non_null(strstr(e.msg, "6"));

    size_t nb;
    assert_int_equal(dtype_row_bytes(DTYPE_Q4_0, 4096, &nb, NULL), AI_OK);
    assert_int_equal(nb, 128 * 18);
    assert_int_equal(dtype_row_bytes(DTYPE_F16, 7, &nb, NULL), AI_OK);
    assert_int_equal(nb, 14);
    assert_int_equal(dtype_row_bytes(DTYPE_Q4_1, 33, &nb, &e), AI_ERR_INVALID);
    assert_non_null(strstr(e.msg, "q4_1"));
    assert_int_equal(dtype_row_bytes(DTYPE_Q8_0, -32, &nb, NULL), AI_ERR_INVALID);
    assert_int_equal(dtype_row_bytes(DTYPE_F32, INT64_MAX, &nb, NULL), AI_ERR_RANGE);
    float x[256] = {0};
    uint8_t out[292];
    assert_int_equal(dtype_quantize_row(DTYPE_Q4_K, x, out, 256, &e), AI_ERR_UNSUPPORTED);
    assert_int_equal(dtype_dequantize_row(DTYPE_Q6_K, out, x, 256, &e), AI_ERR_UNSUPPORTED);
}

/* All 65536 halves: decode equals the IEEE definition, the row (F16C) path gives the same bits as
 * the scalar one, and encode(decode(h)) == h (NaNs: stay NaN, sign kept, made quiet). */
static void test_f16_exhaustive(void **state)
{
    (void)state;
    uint16_t *h = malloc(65536 * sizeof *h), *h2 = malloc(65536 * sizeof *h2);
    float *f = malloc(65536 * sizeof *f);
    assert_non_null(h); assert_non_null(h2); assert_non_null(f);
    for (uint32_t i = 0; i < 65536; i++) { h[i] = (uint16_t)i; f[i] = NAN; }
    dtype_f16_to_f32_row(h, f, 65536);
    dtype_f32_to_f16_row(f, h2, 65536);
    for (uint32_t i = 0; i < 65536; i++) {
        float s = dtype_f16_to_f32((uint16_t)i), r = f16_ref((uint16_t)i);
        assert_int_equal(f32_bits(s), f32_bits(f[i]));
        if (isnan(r)) {
            assert_true(isnan(s));
            assert_int_equal(f32_bits(s) >> 31, i >> 15);
            assert_int_equal(h2[i], i | 0x200); /* quiet bit set, payload kept */
            assert_int_equal(dtype_f32_to_f16(s), i | 0x200);
        } else {
            assert_int_equal(f32_bits(s), f32_bits(r));
            assert_int_equal(h2[i], i);
            assert_int_equal(dtype_f32_to_f16(s), i);
        }
    }
    free(h); free(h2); free(f);
}

/* Rounding f32 -> f16 at every tie: the midpoint between two adjacent finite halves must go to the
 * even one, and one f32 ulp either side must go to the nearer one. Scalar and row paths agree. */
static void test_f16_ties(void **state)
{
    (void)state;
    for (uint32_t i = 0; i < 0x7c00; i++) {
        for (int sgn = 0; sgn < 2; sgn++) {
            uint16_t a = (uint16_t)(i | (sgn << 15)), b = (uint16_t)(a + 1);
            float fa = dtype_f16_to_f32(a), fb = dtype_f16_to_f32(b); /* b may be inf at the top */
            float mid = (i == 0x7bff) ? (sgn ? -65520.0f : 65520.0f) : (fa + fb) * 0.5f; /* exact */
            uint16_t even = (a & 1) ? b : a;
            float xs[3] = {mid, nextafterf(mid, fa), nextafterf(mid, sgn ? -INFINITY : INFINITY)};
            uint16_t want[3] = {even, a, b}, got[3];
            dtype_f32_to_f16_row(xs, got, 3);
            for (int k = 0; k < 3; k++) {
                assert_int_equal(dtype_f32_to_f16(xs[k]), want[k]);
                assert_int_equal(got[k], want[k]);
            }
        }
    }
    assert_int_equal(dtype_f32_to_f16(1e10f), 0x7c00);
    assert_int_equal(dtype_f32_to_f16(-INFINITY), 0xfc00);
    assert_int_equal(dtype_f32_to_f16(1e-30f), 0);
    assert_int_equal(dtype_f32_to_f16(-1e-30f), 0x8000);
}

/* All 65536 bf16 values decode to the f32 with those high bits and re-encode to themselves (NaNs:
 * quiet bit forced). Rounding is checked at the ties of random bf16 pairs. */
static void test_bf16_exhaustive(void **state)
{
    (void)state;
    uint16_t h[1], back[1];
    float f[1];
    for (uint32_t i = 0; i < 65536; i++) {
        h[0] = (uint16_t)i;
        f[0] = NAN;
        dtype_bf16_to_f32_row(h, f, 1);
        assert_int_equal(f32_bits(f[0]), i << 16);
        assert_int_equal(f32_bits(dtype_bf16_to_f32((uint16_t)i)), i << 16);
        dtype_f32_to_bf16_row(f, back, 1);
        if (isnan(f[0])) assert_int_equal(back[0], i | 0x40);
        else assert_int_equal(back[0], i);
        /* tie between i and i+1 (finite, not crossing into inf/NaN) */
        if ((i & 0x7fff) < 0x7f7f) {
            float mid = bits_f32((i << 16) | 0x8000);
            uint16_t even = (i & 1) ? (uint16_t)(i + 1) : (uint16_t)i;
            assert_int_equal(dtype_f32_to_bf16(mid), even);
            assert_int_equal(dtype_f32_to_bf16(bits_f32((i << 16) | 0x7fff)), i);
            assert_int_equal(dtype_f32_to_bf16(bits_f32((i << 16) | 0x8001)), i + 1);
        }
    }
    assert_int_equal(dtype_f32_to_bf16(bits_f32(0x7f800001)), 0x7fc0); /* sNaN -> quiet NaN */
}

/* Quantize -> dequantize error is within the format's step: q8_0 |e| <= d/2 (+ f16 rounding of d),
 * q4_0 |e| <= d/2 (codes clamp at 15 so the top value may err by d), q4_1 |e| <= d/2 (+ rounding of
 * d and m). We use a bound of one step plus 1e-3 relative slack for the f16-rounded scale. */
static void test_quant_roundtrip(void **state)
{
    (void)state;
    rng_state = (uint64_t)time(NULL);
    const uint64_t seed = rng_state;
    const dtype types[] = {DTYPE_Q8_0, DTYPE_Q8_1, DTYPE_Q4_0, DTYPE_Q4_1};
    const int64_t n = 32 * 37;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    uint8_t *q = malloc(n * 2);
    assert_non_null(x); assert_non_null(y); assert_non_null(q);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        dtype t = types[ti];
        for (int64_t i = 0; i < n; i++) x[i] = rnd_normalish() * ((i / 32) % 3 == 0 ? 0.01f : 3.0f);
        for (int64_t i = 64; i < 96; i++) x[i] = 0.0f;
        assert_int_equal(dtype_quantize_row(t, x, q, n, NULL), AI_OK);
        for (int64_t i = 0; i < n; i++) y[i] = NAN;
        assert_int_equal(dtype_dequantize_row(t, q, y, n, NULL), AI_OK);
        for (int64_t b = 0; b < n / 32; b++) {
            float lo = INFINITY, hi = -INFINITY, amax = 0;
            for (int j = 0; j < 32; j++) {
                float v = x[b * 32 + j];
                lo = fminf(lo, v); hi = fmaxf(hi, v); amax = fmaxf(amax, fabsf(v));
            }
            float step = (t == DTYPE_Q4_1) ? (hi - lo) / 15 : (t == DTYPE_Q4_0) ? amax / 8 : amax / 127;
            float tol = step + 1e-3f * amax + 1e-7f;
            for (int j = 0; j < 32; j++) {
                float e = fabsf(y[b * 32 + j] - x[b * 32 + j]);
                if (!(e <= tol)) {
                    fprintf(stderr, "seed=%llu %s block %lld elem %d: x=%g y=%g tol=%g\n",
                            (unsigned long long)seed, dtype_name(t), (long long)b, j, x[b * 32 + j],
                            y[b * 32 + j], tol);
                    fail();
                }
            }
        }
    }
    /* q8_1: s == d * sum(q) rounded to f16 */
    assert_int_equal(dtype_quantize_row(DTYPE_Q8_1, x, q, n, NULL), AI_OK);
    const dtype_block_q8_1 *b1 = (const dtype_block_q8_1 *)q;
    for (int64_t b = 0; b < n / 32; b++) {
        int sum = 0;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) {
            sum += b1[b].qs[j];
            amax = fmaxf(amax, fabsf(x[b * 32 + j]));
        }
        assert_int_equal(b1[b].d, dtype_f32_to_f16(amax / 127.0f));
        assert_int_equal(b1[b].s, dtype_f32_to_f16((float)sum * (amax / 127.0f)));
    }
    free(x); free(y); free(q);
}

// --- fp8 e4m3

/* Independent decoder from the format's definition (fp8.h): sign, exponent bias 7, 3 mantissa bits. */
static double fp8_ref(int c)
{
    int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    if (e == 15 && m == 7) return NAN;
    double v = e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);
    return s ? -v : v;
}

/* Reference encoder: the nearest of the 127 non-negative finite codes by exhaustive search, ties to the
 * even code (mantissa lsb clear), beyond 448 saturated, NaN -> 0x7F. */
static uint8_t fp8_enc_ref(float x)
{
    if (isnan(x)) return 0x7F;
    int s = signbit(x) ? 0x80 : 0;
    double a = fabs((double)x);
    if (a >= 448.0) return (uint8_t)(s | 0x7E);
    static double val[0x7F];
    if (val[1] == 0)
        for (int c = 0; c <= 0x7E; c++) val[c] = fp8_ref(c);
    int best = 0;
    for (int c = 1; c <= 0x7E; c++) {
        double dc = fabs(val[c] - a), db = fabs(val[best] - a);
        if (dc < db || (dc == db && (c & 1) == 0)) best = c;
    }
    return (uint8_t)(s | best);
}

static void test_fp8_decode_all(void **state)
{
    (void)state;
    for (int c = 0; c < 256; c++) {
        float v = fp8_e4m3_to_f32((uint8_t)c);
        double r = fp8_ref(c);
        if (isnan(r)) {
            assert_true(isnan(v));
            continue;
        }
        if ((double)v != r || (signbit(v) != 0) != (c >= 128)) fail_msg("code 0x%02x decodes to %a, want %a", c, v, r);
    }
    assert_true(fp8_e4m3_to_f32(0x7E) == FP8_E4M3_MAX && fp8_e4m3_to_f32(0xFE) == -FP8_E4M3_MAX);
    assert_true(fp8_e4m3_to_f32(0x01) == 0x1p-9f && fp8_e4m3_to_f32(0x08) == 0x1p-6f);
    assert_true(fp8_e4m3_to_f32(0x38) == 1.0f);
}

static void test_fp8_roundtrip_codes(void **state)
{
    (void)state;
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7F) == 0x7F) continue;
        uint8_t back = fp8_e4m3_from_f32(fp8_e4m3_to_f32((uint8_t)c));
        if (back != c) fail_msg("code 0x%02x -> %a -> 0x%02x", c, fp8_e4m3_to_f32((uint8_t)c), back);
    }
}

static void check_enc(float x)
{
    uint8_t got = fp8_e4m3_from_f32(x), want = fp8_enc_ref(x);
    if (got != want) fail_msg("fp8(%a) = 0x%02x, reference 0x%02x", x, got, want);
}

static void test_fp8_round_random(void **state)
{
    (void)state;
    rng_state = (uint64_t)time(NULL) ^ 0xf8f8;
    const uint64_t seed = rng_state;
    print_message("fp8 rounding seed %llu\n", (unsigned long long)seed);
    /* every midpoint between neighbours (ties: exact in f32), and one f32 ulp either side */
    for (int c = 0; c < 0x7E; c++) {
        float lo = fp8_e4m3_to_f32((uint8_t)c), hi = fp8_e4m3_to_f32((uint8_t)(c + 1));
        float mid = (float)(((double)lo + (double)hi) / 2);
        assert_true((double)mid == ((double)lo + (double)hi) / 2);
        for (int sgn = 0; sgn < 2; sgn++) {
            float m = sgn ? -mid : mid;
            check_enc(m);
            check_enc(nextafterf(m, INFINITY));
            check_enc(nextafterf(m, -INFINITY));
        }
    }
    check_enc(464.0f); /* the tie between 448 and the NaN code: saturates */
    /* random floats with exponents from 2^-14 to 2^10 (subnormal, normal and saturated e4m3) */
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (rnd() & 0x807FFFFFu) | ((uint32_t)(127 - 14 + rnd() % 25) << 23);
        check_enc(bits_f32(u));
    }
    /* random bit patterns over the whole f32 range (zeros, f32 subnormals, inf, NaN) */
    for (int i = 0; i < 100000; i++) check_enc(bits_f32(rnd() ^ (rnd() << 16)));
}

static void test_fp8_saturate_nan(void **state)
{
    (void)state;
    const float big[] = {448.0f, 449.0f, 464.0f, 480.0f, 1e6f, 3.4e38f, INFINITY};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        assert_int_equal(fp8_e4m3_from_f32(big[i]), 0x7E);
        assert_int_equal(fp8_e4m3_from_f32(-big[i]), 0xFE);
    }
    assert_int_equal(fp8_e4m3_from_f32(NAN), FP8_E4M3_NAN);
    assert_int_equal(fp8_e4m3_from_f32(-NAN), FP8_E4M3_NAN);
    assert_int_equal(fp8_e4m3_from_f32(bits_f32(0x7F800001u)), FP8_E4M3_NAN); /* signalling */
    assert_int_equal(fp8_e4m3_from_f32(bits_f32(0xFFC12345u)), FP8_E4M3_NAN);
    assert_true(isnan(fp8_e4m3_to_f32(0x7F)) && isnan(fp8_e4m3_to_f32(0xFF)));
    /* underflow: 2^-10 is the tie between 0 and 2^-9 (even: 0); just above rounds up */
    assert_int_equal(fp8_e4m3_from_f32(0x1p-10f), 0x00);
    assert_int_equal(fp8_e4m3_from_f32(-0x1p-10f), 0x80);
    assert_int_equal(fp8_e4m3_from_f32(nextafterf(0x1p-10f, 1.0f)), 0x01);
    assert_int_equal(fp8_e4m3_from_f32(1e-30f), 0x00);
    assert_int_equal(fp8_e4m3_from_f32(-0.0f), 0x80);
}

/* Rows with a scale: q = fp8(x / scale), read back through the table as code * scale; within the normal
 * range the relative error is at most half an ulp of a 3-bit mantissa, 2^-4. */
static void test_fp8_rows(void **state)
{
    (void)state;
    rng_state = (uint64_t)time(NULL) ^ 0x5ca1e;
    const int64_t n = 1237;
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y), tab[256];
    uint8_t *q = malloc((size_t)n);
    assert_true(x && y && q);
    const float scales[] = {1.0f, 0.0371f, 3.5f};
    for (size_t si = 0; si < 3; si++) {
        float sc = scales[si];
        for (int64_t i = 0; i < n; i++) x[i] = rnd_normalish() * 8.0f * sc;
        fp8_e4m3_quantize_row(x, q, n, sc);
        fp8_e4m3_table(sc, tab);
        fp8_e4m3_dequantize_row(tab, q, y, n);
        for (int64_t i = 0; i < n; i++) {
            assert_int_equal(q[i], fp8_e4m3_from_f32(x[i] / sc));
            assert_true(y[i] == fp8_e4m3_to_f32(q[i]) * sc);
            float a = fabsf(x[i] / sc);
            if (a >= 0x1p-6f && a <= FP8_E4M3_MAX)
                assert_true(fabs((double)y[i] - x[i]) <= 0x1p-4 * fabs((double)x[i]) * (1 + 1e-6));
        }
    }
    /* the dtype API: scale 1 */
    ai_err e;
    assert_int_equal(dtype_quantize_row(DTYPE_F8_E4M3, x, q, n, &e), AI_OK);
    assert_int_equal(dtype_dequantize_row(DTYPE_F8_E4M3, q, y, n, &e), AI_OK);
    for (int64_t i = 0; i < n; i++) {
        assert_int_equal(q[i], fp8_e4m3_from_f32(x[i]));
        assert_true(y[i] == fp8_e4m3_to_f32(q[i]));
    }
    size_t nb;
    assert_int_equal(dtype_row_bytes(DTYPE_F8_E4M3, 77, &nb, NULL), AI_OK);
    assert_int_equal(nb, 77);
    assert_string_equal(dtype_name(DTYPE_F8_E4M3), "f8_e4m3");
    dtype t;
    assert_int_equal(dtype_from_ggml(0xFFFFFFFFu, &t, NULL), AI_ERR_UNSUPPORTED); /* no GGUF type */
    free(x); free(y); free(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_traits),
        cmocka_unit_test(test_f16_exhaustive),
        cmocka_unit_test(test_f16_ties),
        cmocka_unit_test(test_bf16_exhaustive),
        cmocka_unit_test(test_quant_roundtrip),
        cmocka_unit_test(test_fp8_decode_all),
        cmocka_unit_test(test_fp8_roundtrip_codes),
        cmocka_unit_test(test_fp8_round_random),
        cmocka_unit_test(test_fp8_saturate_nan),
        cmocka_unit_test(test_fp8_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
