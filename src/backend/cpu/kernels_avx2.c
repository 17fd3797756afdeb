/* kernels_avx2.c - AVX2 + FMA + F16C kernels (x86-64), chosen at run time.
 *
 * Every function carries __attribute__((target(...))) instead of the file being built with -mavx2,
 * so the library still runs on any x86-64: cpu_kernels_for() hands this table out only when
 * __builtin_cpu_supports says the CPU has AVX2, FMA and F16C.
 *
 * Design (same idea as llama.cpp's x86 kernels, written from the formats):
 *  1. Quantized blocks: 32 weight codes are widened to 32 bytes, multiplied with the 32 q8 bytes by
 *     _mm256_maddubs_epi16 (u8 x s8 -> pairs summed into i16; the largest pair, 2*128*127, fits
 *     in i16) and summed into 8 x i32 lanes by _mm256_madd_epi16 with ones. Signed weights (q4_0,
 *     q8_0) use the sign trick: |w| x (x * sign(w)). The block integer sums are exact; the 8 lanes
 *     are converted to f32 and accumulated with one FMA by the block's scale product.
 *  2. Float dots: 4 independent 8-wide FMA accumulators (hides the FMA latency), a scalar tail for
 *     n not a multiple of 8.
 *  3. Activation quantizers: the same f32 operations as the scalar reference (max is exact,
 *     _mm256_round_ps nearest = rintf), so the bytes are identical to kernels_scalar.c.
 */
#include "backend/cpu/kernels.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define TARGET __attribute__((target("avx2,fma,f16c")))
#define ROUND_NEAREST (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC) /* must be a constant for clang */

TARGET static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

TARGET static inline int hsum8_i32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_extracti128_si256(v, 1), _mm256_castsi256_si128(v));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* One f16 scale to f32 with the F16C instruction (the portable converter is a call with branches,
 * which at 2-4 scales per 32-element block costs more than the block's arithmetic). */
TARGET static inline float f16(uint16_t h) { return _cvtsh_ss(h); }

/* 16 bytes of nibbles -> 32 bytes: low nibbles (elements 0..15) then high nibbles (16..31). */
TARGET static inline __m256i unpack_nibbles(const uint8_t *qs)
{
    __m128i t = _mm_loadu_si128((const __m128i *)qs);
    __m256i b = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
    return _mm256_and_si256(b, _mm256_set1_epi8(0x0f));
}

/* 8 x i32 lanes of sum(u[i] * s[i]) for u unsigned bytes, s signed bytes. */
TARGET static inline __m256i dot_u8s8(__m256i u, __m256i s)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* Same for two signed operands: |a| * (b * sign(a)). */
TARGET static inline __m256i dot_s8s8(__m256i a, __m256i b)
{
    return dot_u8s8(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

// --- activation quantizers

TARGET static inline __m256i quantize_block32(const float *x, float *d_out)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
    __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
    __m256 m = _mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1));
    m = _mm256_max_ps(m, _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    *d_out = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, id), ROUND_NEAREST));
    __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, id), ROUND_NEAREST));
    __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, id), ROUND_NEAREST));
    __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, id), ROUND_NEAREST));
    /* packs work within 128-bit lanes; the permute puts the 32 bytes back in element order */
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

TARGET void cpu_quantize_q8_0_avx2(const float *x, dtype_block_q8_0 *y, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, x += 32) {
        float d;
        __m256i q = quantize_block32(x, &d);
        y[b].d = dtype_f32_to_f16(d);
        _mm256_storeu_si256((__m256i *)y[b].qs, q);
    }
}

TARGET void cpu_quantize_q8_1_avx2(const float *x, dtype_block_q8_1 *y, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, x += 32) {
        float d;
        __m256i q = quantize_block32(x, &d);
        y[b].d = dtype_f32_to_f16(d);
        _mm256_storeu_si256((__m256i *)y[b].qs, q);
        /* sum of the 32 codes: widen bytes to i16 pairs via maddubs with ones (|pair| <= 256) */
        __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);
        int sum = hsum8_i32(_mm256_madd_epi16(s16, _mm256_set1_epi16(1)));
        y[b].s = dtype_f32_to_f16(d * (float)sum);
    }
}

// --- float dots

TARGET static float dot_f32_avx2(int64_t n, const void *w, const void *x)
{
    const float *a = w, *b = x;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

TARGET static inline __m256 load_f16x8(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

TARGET static inline __m256 load_bf16x8(const uint16_t *p)
{
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

TARGET static float dot_f16_avx2(int64_t n, const void *w, const void *x)
{
    const uint16_t *a = w;
    const float *b = x;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(load_f16x8(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(load_f16x8(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(load_f16x8(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(load_f16x8(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(load_f16x8(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) s += dtype_f16_to_f32(a[i]) * b[i];
    return s;
}

TARGET static float dot_bf16_avx2(int64_t n, const void *w, const void *x)
{
    const uint16_t *a = w;
    const float *b = x;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(load_bf16x8(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(load_bf16x8(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(load_bf16x8(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(load_bf16x8(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(load_bf16x8(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) s += dtype_bf16_to_f32(a[i]) * b[i];
    return s;
}

// --- quantized dots

TARGET static float dot_q8_0_avx2(int64_t n, const void *w, const void *x)
{
    const dtype_block_q8_0 *a = w, *b = x;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        __m256i qa = _mm256_loadu_si256((const __m256i *)a[i].qs);
        __m256i qb = _mm256_loadu_si256((const __m256i *)b[i].qs);
        const float d = f16(a[i].d) * f16(b[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(dot_s8s8(qa, qb)), acc);
    }
    return hsum8(acc);
}

TARGET static float dot_q4_0_avx2(int64_t n, const void *w, const void *x)
{
    const dtype_block_q4_0 *a = w;
    const dtype_block_q8_0 *b = x;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        __m256i qa = _mm256_sub_epi8(unpack_nibbles(a[i].qs), _mm256_set1_epi8(8));
        __m256i qb = _mm256_loadu_si256((const __m256i *)b[i].qs);
        const float d = f16(a[i].d) * f16(b[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(dot_s8s8(qa, qb)), acc);
    }
    return hsum8(acc);
}

TARGET static float dot_q4_1_avx2(int64_t n, const void *w, const void *x)
{
    const dtype_block_q4_1 *a = w;
    const dtype_block_q8_1 *b = x;
    __m256 acc = _mm256_setzero_ps();
    float sm = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        __m256i qa = unpack_nibbles(a[i].qs); /* 0..15, unsigned */
        __m256i qb = _mm256_loadu_si256((const __m256i *)b[i].qs);
        const float d = f16(a[i].d) * f16(b[i].d);
        sm += f16(a[i].m) * f16(b[i].s);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(dot_u8s8(qa, qb)), acc);
    }
    return hsum8(acc) + sm;
}

const cpu_kernels cpu_kernels_avx2 = {
    .dot = {
        [DTYPE_F32] = dot_f32_avx2, [DTYPE_F16] = dot_f16_avx2, [DTYPE_BF16] = dot_bf16_avx2,
        [DTYPE_Q8_0] = dot_q8_0_avx2, [DTYPE_Q4_0] = dot_q4_0_avx2, [DTYPE_Q4_1] = dot_q4_1_avx2,
    },
    .tile = cpu_tiles_avx2,
    .quantize_q8_0 = cpu_quantize_q8_0_avx2,
    .quantize_q8_1 = cpu_quantize_q8_1_avx2,
};

#endif
