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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_traits),
        cmocka_unit_test(test_f16_exhaustive),
        cmocka_unit_test(test_f16_ties),
        cmocka_unit_test(test_bf16_exhaustive),
        cmocka_unit_test(test_quant_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
