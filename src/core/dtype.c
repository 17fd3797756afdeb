/* dtype.c - dtype traits, f16/bf16 conversions, and quantize/dequantize of ggml blocks.
 *
 * Design choices:
 *  1. Conversions are written with integer bit manipulation so they are exact and do not depend on
 *     the compiler's _Float16 support or on the FPU rounding mode. Round to nearest, ties to even.
 *  2. The F16C row conversions must give the same bits as the scalar ones for every input
 *     (tests/unit/test_dtype.c checks all 65536 halves). NaNs are made quiet in both directions,
 *     which is what the hardware does, so the scalar code does it too.
 *  3. Weight quantizers reproduce ggml's reference (quantize_row_*_ref) step by step, in f32
 *     arithmetic with the same operation order (the build uses -std=c11, so no FMA contraction),
 *     so the bytes equal those of llama.cpp's and the gguf package's quantizers. Casts from float to
 *     integer are clamped first, so NaN/inf inputs give defined (if meaningless) codes, never UB.
 */
#include "aiinfra/dtype.h"
#include "aiinfra/fp8.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define DTYPE_X86 1
#endif

#ifdef __clang__
/* clang contracts a*b+c into FMA even in ISO C mode; the quantizers need the two roundings */
#pragma STDC FP_CONTRACT OFF
#endif

// --- traits

static const dtype_traits TRAITS[DTYPE_COUNT] = {
    [DTYPE_F32]  = {"f32", 0, 1, 4, false, true},
    [DTYPE_F16]  = {"f16", 1, 1, 2, false, true},
    [DTYPE_BF16] = {"bf16", 30, 1, 2, false, true},
    [DTYPE_Q8_0] = {"q8_0", 8, 32, sizeof(dtype_block_q8_0), true, true},
    [DTYPE_Q4_0] = {"q4_0", 2, 32, sizeof(dtype_block_q4_0), true, true},
    [DTYPE_Q4_1] = {"q4_1", 3, 32, sizeof(dtype_block_q4_1), true, true},
    [DTYPE_Q8_1] = {"q8_1", 9, 32, sizeof(dtype_block_q8_1), true, true},
    [DTYPE_Q4_K] = {"q4_K", 12, 256, 144, true, false},
    [DTYPE_Q5_K] = {"q5_K", 13, 256, 176, true, false},
    [DTYPE_Q6_K] = {"q6_K", 14, 256, 210, true, false},
    [DTYPE_Q8_K] = {"q8_K", 15, 256, 292, true, false},
    [DTYPE_F8_E4M3] = {"f8_e4m3", -1, 1, 1, false, true},
};

_Static_assert(sizeof(dtype_block_q8_0) == 34, "q8_0 block is 34 bytes");
_Static_assert(sizeof(dtype_block_q8_1) == 36, "q8_1 block is 36 bytes");
_Static_assert(sizeof(dtype_block_q4_0) == 18, "q4_0 block is 18 bytes");
_Static_assert(sizeof(dtype_block_q4_1) == 20, "q4_1 block is 20 bytes");

const dtype_traits *dtype_get(dtype t)
{
    if ((int)t < 0 || t >= DTYPE_COUNT) return NULL;
    return &TRAITS[t];
}

const char *dtype_name(dtype t)
{
    const dtype_traits *tr = dtype_get(t);
    return tr ? tr->name : "?";
}

ai_status dtype_from_ggml(uint32_t ggml_type, dtype *out, ai_err *err)
{
    for (int t = 0; t < DTYPE_COUNT; t++) {
        if (TRAITS[t].ggml_type >= 0 && (uint32_t)TRAITS[t].ggml_type == ggml_type) {
            *out = (dtype)t;
            return AI_OK;
        }
    }
    return ai_err_set(err, AI_ERR_UNSUPPORTED, "ggml type %u is not supported", ggml_type);
}

ai_status dtype_row_bytes(dtype t, int64_t n, size_t *out, ai_err *err)
{
    const dtype_traits *tr = dtype_get(t);
    if (!tr) return ai_err_set(err, AI_ERR_INVALID, "invalid dtype %d", (int)t);
    if (n < 0 || n % tr->block_size != 0)
        return ai_err_set(err, AI_ERR_INVALID, "%s row of %lld elements: not a multiple of the block size %lld",
                          tr->name, (long long)n, (long long)tr->block_size);
    uint64_t nb = (uint64_t)(n / tr->block_size);
    if (nb > SIZE_MAX / tr->block_bytes)
        return ai_err_set(err, AI_ERR_RANGE, "%s row of %lld elements: byte size overflows", tr->name, (long long)n);
    *out = (size_t)nb * tr->block_bytes;
    return AI_OK;
}

// --- scalar conversions

static inline uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float dtype_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0x1f) /* inf or NaN (made quiet) */
        return bits_f32(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0));
    if (exp == 0) {
        if (mant == 0) return bits_f32(sign);
        /* subnormal: value = mant * 2^-24; normalise the mantissa */
        uint32_t e = 113; /* 127 - 15 + 1 */
        while (!(mant & 0x400)) { mant <<= 1; e--; }
        return bits_f32(sign | (e << 23) | ((mant & 0x3ff) << 13));
    }
    return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

/* v >> s rounded to nearest, ties to even (1 <= s <= 31). */
static inline uint32_t shift_rne(uint32_t v, unsigned s)
{
    uint32_t r = v >> s, rem = v & ((1u << s) - 1), half = 1u << (s - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return r;
}

uint16_t dtype_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    x &= 0x7fffffffu;
    if (x > 0x7f800000u) return (uint16_t)(sign | 0x7e00 | ((x >> 13) & 0x3ff)); /* quiet NaN */
    if (x >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* >= 65520 rounds to inf */
    if (x < 0x38800000u) { /* below 2^-14: f16 subnormal or zero, value = m * 2^-24 */
        if (x <= 0x33000000u) return sign; /* <= 2^-25 (the tie goes to even 0) */
        uint32_t e = x >> 23, mant = (x & 0x7fffff) | 0x800000;
        return (uint16_t)(sign | shift_rne(mant, 126 - e));
    }
    /* normal: rebias the exponent, round the 13 dropped bits (a carry moves into the exponent) */
    return (uint16_t)(sign | shift_rne(x - (112u << 23), 13));
}

float dtype_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t dtype_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64); /* quiet NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

// --- row conversions (F16C when available)

#ifdef DTYPE_X86
__attribute__((target("avx,f16c")))
static void f16_to_f32_f16c(const uint16_t *x, float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    for (; i < n; i++) y[i] = dtype_f16_to_f32(x[i]);
}

__attribute__((target("avx,f16c")))
static void f32_to_f16_f16c(const float *x, uint16_t *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = dtype_f32_to_f16(x[i]);
}

/* CPUID.1:ECX bit 29 is F16C (clang's __builtin_cpu_supports does not know "f16c"). */
static bool has_f16c(void)
{
    unsigned a, b, c, d;
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
#endif

void dtype_f16_to_f32_row(const uint16_t *x, float *y, int64_t n)
{
#ifdef DTYPE_X86
    if (has_f16c()) { f16_to_f32_f16c(x, y, n); return; }
#endif
    for (int64_t i = 0; i < n; i++) y[i] = dtype_f16_to_f32(x[i]);
}

static void f16_to_f32_scalar(const uint16_t *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = dtype_f16_to_f32(x[i]);
}

dtype_f16_row_fn dtype_f16_to_f32_row_fn(void)
{
#ifdef DTYPE_X86
    if (has_f16c()) return f16_to_f32_f16c;
#endif
    return f16_to_f32_scalar;
}

void dtype_f32_to_f16_row(const float *x, uint16_t *y, int64_t n)
{
#ifdef DTYPE_X86
    if (has_f16c()) { f32_to_f16_f16c(x, y, n); return; }
#endif
    for (int64_t i = 0; i < n; i++) y[i] = dtype_f32_to_f16(x[i]);
}

void dtype_bf16_to_f32_row(const uint16_t *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = dtype_bf16_to_f32(x[i]);
}

void dtype_f32_to_bf16_row(const float *x, uint16_t *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = dtype_f32_to_bf16(x[i]);
}

// --- quantize (ggml reference algorithms)

/* Truncating float -> int code clamped to [lo, hi]; NaN gives lo. Same as a C cast for in-range values. */
static inline int trunc_clamp(float v, int lo, int hi)
{
    if (!(v >= (float)lo)) return lo;
    if (v >= (float)hi) return hi;
    return (int)v;
}

/* One block of 32 values -> int8 codes with scale d = amax / 127 (ggml's reference: round half away
 * from zero); returns d and stores the sum of the codes (q8_1 keeps it for the q4_1 dot). */
static float quantize_q8_block(const float *x, int8_t *qs, int *sum)
{
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) {
        float a = fabsf(x[j]);
        amax = amax > a ? amax : a;
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    *sum = 0;
    for (int j = 0; j < 32; j++) {
        float r = roundf(x[j] * id);
        int q = r != r ? 0 : r > 127.0f ? 127 : r < -128.0f ? -128 : (int)r;
        qs[j] = (int8_t)q;
        *sum += q;
    }
    return d;
}

static void quantize_q8_0(const float *x, dtype_block_q8_0 *y, int64_t nb)
{
    int sum;
    for (int64_t b = 0; b < nb; b++, x += 32) y[b].d = dtype_f32_to_f16(quantize_q8_block(x, y[b].qs, &sum));
}

static void quantize_q8_1(const float *x, dtype_block_q8_1 *y, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, x += 32) {
        int sum;
        const float d = quantize_q8_block(x, y[b].qs, &sum);
        y[b].d = dtype_f32_to_f16(d);
        y[b].s = dtype_f32_to_f16((float)sum * d);
    }
}

static void quantize_q4_0(const float *x, dtype_block_q4_0 *y, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, x += 32) {
        float amax = 0.0f, max = 0.0f; /* max: the signed value of largest magnitude (first one) */
        for (int j = 0; j < 32; j++) {
            if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = dtype_f32_to_f16(d);
        for (int j = 0; j < 16; j++) {
            int lo = trunc_clamp(x[j] * id + 8.5f, 0, 15);
            int hi = trunc_clamp(x[j + 16] * id + 8.5f, 0, 15);
            y[b].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

static void quantize_q4_1(const float *x, dtype_block_q4_1 *y, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, x += 32) {
        float min = INFINITY, max = -INFINITY;
        for (int j = 0; j < 32; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = dtype_f32_to_f16(d);
        y[b].m = dtype_f32_to_f16(min);
        for (int j = 0; j < 16; j++) {
            int lo = trunc_clamp((x[j] - min) * id + 0.5f, 0, 15);
            int hi = trunc_clamp((x[j + 16] - min) * id + 0.5f, 0, 15);
            y[b].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

ai_status dtype_quantize_row(dtype t, const float *x, void *dst, int64_t n, ai_err *err)
{
    size_t bytes;
    ai_status st = dtype_row_bytes(t, n, &bytes, err);
    if (st) return st;
    const int64_t nb = n / DTYPE_QK;
    switch (t) {
    case DTYPE_F32: memcpy(dst, x, bytes); return AI_OK;
    case DTYPE_F16: dtype_f32_to_f16_row(x, dst, n); return AI_OK;
    case DTYPE_BF16: dtype_f32_to_bf16_row(x, dst, n); return AI_OK;
    case DTYPE_Q8_0: quantize_q8_0(x, dst, nb); return AI_OK;
    case DTYPE_Q8_1: quantize_q8_1(x, dst, nb); return AI_OK;
    case DTYPE_Q4_0: quantize_q4_0(x, dst, nb); return AI_OK;
    case DTYPE_Q4_1: quantize_q4_1(x, dst, nb); return AI_OK;
    case DTYPE_F8_E4M3: fp8_e4m3_quantize_row(x, dst, n, 1.0f); return AI_OK;
    default:
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "quantize to %s is not implemented", dtype_name(t));
    }
}

// --- dequantize

/* one block of 32 int8 codes with an f16 scale (q8_0 and q8_1 share this part of the layout) */
static void dequantize_q8(const int8_t *qs, uint16_t d16, float *y)
{
    const float d = dtype_f16_to_f32(d16);
    for (int j = 0; j < 32; j++) y[j] = (float)qs[j] * d;
}

ai_status dtype_dequantize_row(dtype t, const void *src, float *y, int64_t n, ai_err *err)
{
    size_t bytes;
    ai_status st = dtype_row_bytes(t, n, &bytes, err);
    if (st) return st;
    const int64_t nb = n / DTYPE_QK;
    switch (t) {
    case DTYPE_F32: memcpy(y, src, bytes); return AI_OK;
    case DTYPE_F16: dtype_f16_to_f32_row(src, y, n); return AI_OK;
    case DTYPE_BF16: dtype_bf16_to_f32_row(src, y, n); return AI_OK;
    case DTYPE_F8_E4M3:
        for (int64_t i = 0; i < n; i++) y[i] = fp8_e4m3_to_f32(((const uint8_t *)src)[i]);
        return AI_OK;
    case DTYPE_Q8_0: {
        const dtype_block_q8_0 *b = src;
        for (int64_t i = 0; i < nb; i++, y += 32) dequantize_q8(b[i].qs, b[i].d, y);
        return AI_OK;
    }
    case DTYPE_Q8_1: {
        const dtype_block_q8_1 *b = src;   /* the sum field s is not needed to dequantize */
        for (int64_t i = 0; i < nb; i++, y += 32) dequantize_q8(b[i].qs, b[i].d, y);
        return AI_OK;
    }
    case DTYPE_Q4_0: {
        const dtype_block_q4_0 *b = src;
        for (int64_t i = 0; i < nb; i++, y += 32) {
            const float d = dtype_f16_to_f32(b[i].d);
            for (int j = 0; j < 16; j++) {
                y[j] = (float)((b[i].qs[j] & 0x0f) - 8) * d;
                y[j + 16] = (float)((b[i].qs[j] >> 4) - 8) * d;
            }
        }
        return AI_OK;
    }
    case DTYPE_Q4_1: {
        const dtype_block_q4_1 *b = src;
        for (int64_t i = 0; i < nb; i++, y += 32) {
            const float d = dtype_f16_to_f32(b[i].d), m = dtype_f16_to_f32(b[i].m);
            for (int j = 0; j < 16; j++) {
                y[j] = (float)(b[i].qs[j] & 0x0f) * d + m;
                y[j + 16] = (float)(b[i].qs[j] >> 4) * d + m;
            }
        }
        return AI_OK;
    }
    default:
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "dequantize from %s is not implemented", dtype_name(t));
    }
}
