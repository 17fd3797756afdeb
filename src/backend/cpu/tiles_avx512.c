/* tiles_avx512.c - AVX-512 (F + BW + VL) register tiles and dots: R weight rows x T activation rows.
 *
 * The same tiling as tiles_avx2.c (read that file's header for why tiles), with 512-bit registers:
 *  1. Quantized weights: one 512-bit step covers TWO 32-element blocks (block b in the low 256 bits,
 *     block b + 1 in the high 256 bits); an odd last block runs the same step with the high half
 *     zeroed (codes 0 and scales 0, so it adds exactly 0). The block integer sums are exact and equal
 *     to the AVX2 ones: maddubs (u8 x s8 -> i16 pairs, max 2*128*127 fits) + madd with ones; signed
 *     weights use |w| (vpabsb) x (x negated where w < 0) instead of vpsignb, which has no 512-bit
 *     form (where w = 0 the product is 0 either way). The 16 i32 lanes become f32 and are
 *     accumulated by one FMA with the scale products (dw*dx of block b in lanes 0..7, of b+1 in 8..15).
 *  2. Scales: (d, m|s) of blocks b, b+1 are interleaved into one xmm (d_b, d_b+1, m_b, m_b+1) for the
 *     weight row and (d_b, d_b+1, s_b, s_b+1) for the token, so ONE multiply gives both blocks'
 *     dw*dx (lanes 0, 1; broadcast to the halves by one vpermps) and q4_1's m*s terms (lanes 2, 3,
 *     accumulated in a separate xmm off the main chains).
 *  3. Float weights: 16 elements per step; the tail (n not a multiple of 16) is a masked load, which
 *     reads nothing past the row, so there is no scalar loop.
 *  4. The single-row dots are the 1 x 1 tile; the activation quantizers are the AVX2 ones (their
 *     bytes must equal the scalar reference's anyway, and they are not on the hot path).
 * Results differ from the scalar reference only in the order of the f32 accumulation.
 */
#include <string.h>

#include "backend/cpu/kernels.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 8")

#ifndef PF_GROUPS
#define PF_GROUPS 2
#endif

#define WBLOCK(wt) ((wt) == DTYPE_Q4_1 ? 20 : (wt) == DTYPE_Q4_0 ? 18 : 34)
#define WQS(wt) ((wt) == DTYPE_Q4_1 ? 4 : 2)
#define XBLOCK(wt) ((wt) == DTYPE_Q4_1 ? 36 : 34)
#define XQS(wt) ((wt) == DTYPE_Q4_1 ? 4 : 2)

/* Two f16 at p (d and the next field) -> lanes 0 and 1 (lanes 2, 3 = 0). */
TARGET INLINE __m128 f16x2(const void *p)
{
    uint32_t u;
    memcpy(&u, p, 4);
    return _mm_cvtph_ps(_mm_cvtsi32_si128((int)u));
}

/* (d, e) of block p0 and of p1 (p1 NULL: zeros) -> (d0, d1, e0, e1). */
TARGET INLINE __m128 scales2(const uint8_t *p0, const uint8_t *p1)
{
    return _mm_unpacklo_ps(f16x2(p0), p1 ? f16x2(p1) : _mm_setzero_ps());
}

/* 32 code bytes of block p0 (low half) and p1 (high half; NULL: zeros). */
TARGET INLINE __m512i bytes2(const uint8_t *p0, const uint8_t *p1)
{
    __m512i lo = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p0));
    return _mm512_inserti64x4(lo, p1 ? _mm256_loadu_si256((const __m256i *)p1) : _mm256_setzero_si256(), 1);
}

/* 16 nibble bytes of block p0 and p1 (NULL: zeros) -> 64 codes 0..15 in element order. */
TARGET INLINE __m512i nibbles2(const uint8_t *p0, const uint8_t *p1)
{
    __m128i t0 = _mm_loadu_si128((const __m128i *)p0);
    __m128i t1 = p1 ? _mm_loadu_si128((const __m128i *)p1) : _mm_setzero_si128();
    __m256i t = _mm256_set_m128i(t1, t0);
    __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(t), _mm256_srli_epi16(t, 4), 1); /* t0 t1 t0>>4 t1>>4 */
    z = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));                               /* t0 t0>>4 t1 t1>>4 */
    return _mm512_and_si512(z, _mm512_set1_epi8(0x0f));
}

TARGET INLINE float hsum16(__m512 v) { return _mm512_reduce_add_ps(v); }

// --- quantized tiles

/* One step over blocks b (at byte offsets wb, xb) and b + 1 (when two). */
TARGET INLINE void qstep(const dtype wt, const int R, const int T, const bool two, const uint8_t *w, size_t w_row,
                         const uint8_t *x, size_t x_row, __m512 acc[CPU_TILE_R][CPU_TILE_T],
                         __m128 macc[CPU_TILE_R][CPU_TILE_T])
{
    const __m512i ones = _mm512_set1_epi16(1);
    const __m512i halves = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    __m512i qx[CPU_TILE_T];
    __m128 sx[CPU_TILE_T];
    UNROLL
    for (int t = 0; t < T; t++) {
        const uint8_t *xb = x + (size_t)t * x_row;
        sx[t] = scales2(xb, two ? xb + XBLOCK(wt) : NULL);
        qx[t] = bytes2(xb + XQS(wt), two ? xb + XBLOCK(wt) + XQS(wt) : NULL);
    }
    UNROLL
    for (int r = 0; r < R; r++) {
        const uint8_t *wb = w + (size_t)r * w_row;
        const uint8_t *wb1 = two ? wb + WBLOCK(wt) : NULL;
        const __m128 sw = scales2(wb, wb1);
        __m512i qw = wt == DTYPE_Q8_0 ? bytes2(wb + WQS(wt), two ? wb1 + WQS(wt) : NULL)
                                      : nibbles2(wb + WQS(wt), two ? wb1 + WQS(wt) : NULL);
        __mmask64 neg = 0;
        if (wt == DTYPE_Q4_0) qw = _mm512_sub_epi8(qw, _mm512_set1_epi8(8));
        if (wt != DTYPE_Q4_1) {
            neg = _mm512_movepi8_mask(qw); /* the sign of w moves onto x */
            qw = _mm512_abs_epi8(qw);
        }
        UNROLL
        for (int t = 0; t < T; t++) {
            __m512i xs = wt == DTYPE_Q4_1 ? qx[t] : _mm512_mask_sub_epi8(qx[t], neg, _mm512_setzero_si512(), qx[t]);
            __m512i p = _mm512_madd_epi16(_mm512_maddubs_epi16(qw, xs), ones);
            const __m128 s = _mm_mul_ps(sw, sx[t]); /* (dw*dx b, dw*dx b+1, mw*sx b, mw*sx b+1) */
            if (wt == DTYPE_Q4_1) macc[r][t] = _mm_add_ps(macc[r][t], s);
            const __m512 d = _mm512_permutexvar_ps(halves, _mm512_castps128_ps512(s));
            acc[r][t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc[r][t]);
        }
    }
}

TARGET INLINE void qtile(const dtype wt, const int R, const int T, int64_t nb, const uint8_t *w, size_t w_row,
                         const uint8_t *x, size_t x_row, float *y, size_t y_row)
{
    __m512 acc[CPU_TILE_R][CPU_TILE_T];
    __m128 macc[CPU_TILE_R][CPU_TILE_T];
    UNROLL
    for (int r = 0; r < R; r++)
        UNROLL
        for (int t = 0; t < T; t++) { acc[r][t] = _mm512_setzero_ps(); macc[r][t] = _mm_setzero_ps(); }
    /* R interleaved row streams: prefetch the next groups of R rows as this one is consumed */
    const uintptr_t pf = (uintptr_t)w + PF_GROUPS * (uintptr_t)R * w_row;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        for (int k = 0; k < 2 * R * WBLOCK(wt); k += 64)
            _mm_prefetch((const char *)(pf + (uintptr_t)(b * R * WBLOCK(wt) + k)), _MM_HINT_T0);
        qstep(wt, R, T, true, w + (size_t)b * WBLOCK(wt), w_row, x + (size_t)b * XBLOCK(wt), x_row, acc, macc);
    }
    if (b < nb) qstep(wt, R, T, false, w + (size_t)b * WBLOCK(wt), w_row, x + (size_t)b * XBLOCK(wt), x_row, acc, macc);
    UNROLL
    for (int t = 0; t < T; t++)
        UNROLL
        for (int r = 0; r < R; r++) {
            float m = 0.0f;
            if (wt == DTYPE_Q4_1) {
                float l[4];
                _mm_storeu_ps(l, macc[r][t]);
                m = l[2] + l[3];
            }
            y[(size_t)t * y_row + (size_t)r] = hsum16(acc[r][t]) + m;
        }
}

// --- float tiles

#define FSIZE(wt) ((wt) == DTYPE_F32 ? 4 : 2)

/* 16 weights at p as f32; lanes not in mask read nothing and are 0. */
TARGET INLINE __m512 load_w16(const dtype wt, const uint8_t *p, __mmask16 m)
{
    if (wt == DTYPE_F32) return _mm512_maskz_loadu_ps(m, p);
    __m256i h = _mm256_maskz_loadu_epi16(m, p);
    if (wt == DTYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); /* bf16 */
}

TARGET INLINE void fstep(const dtype wt, const int R, const int T, __mmask16 m, const uint8_t *w, size_t w_row,
                         const uint8_t *x, size_t x_row, __m512 acc[CPU_TILE_R][CPU_TILE_T])
{
    __m512 xv[CPU_TILE_T];
    UNROLL
    for (int t = 0; t < T; t++) xv[t] = _mm512_maskz_loadu_ps(m, x + (size_t)t * x_row);
    UNROLL
    for (int r = 0; r < R; r++) {
        __m512 wv = load_w16(wt, w + (size_t)r * w_row, m);
        UNROLL
        for (int t = 0; t < T; t++) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
    }
}

TARGET INLINE void ftile(const dtype wt, const int R, const int T, int64_t n, const uint8_t *w, size_t w_row,
                         const uint8_t *x, size_t x_row, float *y, size_t y_row)
{
    __m512 acc[CPU_TILE_R][CPU_TILE_T];
    UNROLL
    for (int r = 0; r < R; r++)
        UNROLL
        for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        fstep(wt, R, T, 0xffff, w + (size_t)i * FSIZE(wt), w_row, x + (size_t)i * 4, x_row, acc);
    if (i < n)
        fstep(wt, R, T, (__mmask16)((1u << (n - i)) - 1), w + (size_t)i * FSIZE(wt), w_row, x + (size_t)i * 4, x_row, acc);
    UNROLL
    for (int t = 0; t < T; t++)
        UNROLL
        for (int r = 0; r < R; r++) y[(size_t)t * y_row + (size_t)r] = hsum16(acc[r][t]);
}

// --- entry points: shapes (4 or 1) x (CPU_TILE_T or 1)

#include "backend/cpu/tile_cover.h"

#define ENTRY(name, wt)                                                                              \
    TARGET static void tile_##name(int64_t n, const void *w, size_t w_row, int nr, const void *x,      \
                                   size_t x_row, int nt, float *y, size_t y_row)                      \
    { tile_cover(wt, n, w, w_row, nr, x, x_row, nt, y, y_row); }                                       \
    TARGET static float dot_##name(int64_t n, const void *w, const void *x)                            \
    { float y; any_tile(wt, n, w, 0, 1, 1, x, 0, &y, 0); return y; }

ENTRY(f32, DTYPE_F32)
ENTRY(f16, DTYPE_F16)
ENTRY(bf16, DTYPE_BF16)
ENTRY(q8_0, DTYPE_Q8_0)
ENTRY(q4_0, DTYPE_Q4_0)
ENTRY(q4_1, DTYPE_Q4_1)

static const cpu_tile_fn tiles_avx512[DTYPE_COUNT] = {
    [DTYPE_F32] = tile_f32, [DTYPE_F16] = tile_f16, [DTYPE_BF16] = tile_bf16,
    [DTYPE_Q8_0] = tile_q8_0, [DTYPE_Q4_0] = tile_q4_0, [DTYPE_Q4_1] = tile_q4_1,
};

const cpu_kernels cpu_kernels_avx512 = {
    .dot = {
        [DTYPE_F32] = dot_f32, [DTYPE_F16] = dot_f16, [DTYPE_BF16] = dot_bf16,
        [DTYPE_Q8_0] = dot_q8_0, [DTYPE_Q4_0] = dot_q4_0, [DTYPE_Q4_1] = dot_q4_1,
    },
    .tile = tiles_avx512,
    .quantize_q8_0 = cpu_quantize_q8_0_avx2,
    .quantize_q8_1 = cpu_quantize_q8_1_avx2,
};

#endif
