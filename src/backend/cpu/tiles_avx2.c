/* tiles_avx2.c - AVX2 + FMA + F16C register-tiled kernels: R weight rows x T activation rows per call.
 *
 * Why tiles: a single (row, token) dot has one accumulator, so every 32-element block waits for the
 * previous block's FMA (4-5 cycles of latency) and re-reads the activation block for every row; in
 * prefill it also re-unpacks every weight block for every token. A tile keeps R*T accumulators in
 * registers, unpacks each weight block once for T tokens, loads each activation block once for R
 * rows, and its R*T independent FMA chains hide the latency.
 *
 * Design:
 *  1. One always-inline body per family (quantized, float) with the dtype, R and T as compile-time
 *     constants; the public entry points instantiate the shapes matmul.c uses: R = 4 (1 for the
 *     leftover rows) and T = 1 (decode) or CPU_TILE_T (prefill), and the single-row dots are the
 *     1 x 1 tile. One body means the integer arithmetic is written once for every shape.
 *  2. Quantized blocks: integer block sums exactly as kernels_avx2.c describes (maddubs + madd with
 *     ones, the sign trick for signed weights; |w| computed once per weight block, not per token).
 *     Scales: the block's f16 pair (d, m) or (d, s) is loaded as 32 bits and converted by one
 *     vcvtph2ps; d_w * d_x is one vector multiply of broadcasts per (row, token) pair, and q4_1's
 *     m_w * s_x is one xmm FMA per (row, block) for all T tokens (the s of token t in lane 2 + t),
 *     off the (row, token) accumulators' dependency chains.
 *  3. Float weights: 8 elements per step, R weight vectors (converted once) x T activation vectors,
 *     a scalar tail for n not a multiple of 8.
 * Results differ from the scalar reference only in the order of the f32 accumulation.
 */
#include <string.h>

#include "backend/cpu/kernels.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define TARGET __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 8") /* the R x T loops must be unrolled so acc[][] lives in registers */

TARGET INLINE float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Two f16 at p (d and the next field) -> lanes 0 and 1 (lanes 2, 3 = 0). */
TARGET INLINE __m128 f16x2(const void *p)
{
    uint32_t u;
    memcpy(&u, p, 4);
    return _mm_cvtph_ps(_mm_cvtsi32_si128((int)u));
}

/* 16 bytes of nibbles -> 32 bytes: low nibbles (elements 0..15) then high nibbles (16..31). */
TARGET INLINE __m256i unpack_nibbles(const uint8_t *qs)
{
    __m128i t = _mm_loadu_si128((const __m128i *)qs);
    __m256i b = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
    return _mm256_and_si256(b, _mm256_set1_epi8(0x0f));
}

// --- quantized tiles

_Static_assert(CPU_TILE_T <= 2, "qtile keeps q4_1's m * s of token t in lane 2 + t of an xmm");

#ifndef PF_GROUPS
#define PF_GROUPS 2
#endif

/* Block sizes and field offsets of the weight / activation blocks of a quantized weight dtype. */
#define WBLOCK(wt) ((wt) == DTYPE_Q4_1 ? 20 : (wt) == DTYPE_Q4_0 ? 18 : 34)
#define WQS(wt) ((wt) == DTYPE_Q4_1 ? 4 : 2)
#define XBLOCK(wt) ((wt) == DTYPE_Q4_1 ? 36 : 34)
#define XQS(wt) ((wt) == DTYPE_Q4_1 ? 4 : 2)

TARGET INLINE void qtile(const dtype wt, const int R, const int T, int64_t nb, const uint8_t *w, size_t w_row,
                         const uint8_t *x, size_t x_row, float *y, size_t y_row)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[CPU_TILE_R][CPU_TILE_T];
    __m128 macc[CPU_TILE_R]; /* q4_1: lane 2 + t accumulates m_w * s_x of token t (lanes 0, 1 unused) */
    UNROLL
    for (int r = 0; r < R; r++) macc[r] = _mm_setzero_ps();
    UNROLL
    for (int r = 0; r < R; r++)
        UNROLL
        for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    /* The R rows are R short interleaved streams, which the hardware prefetcher does not follow;
     * fetch the next group of R rows (contiguous) at the rate this group is consumed. */
    const uintptr_t pf = (uintptr_t)w + PF_GROUPS * (uintptr_t)R * w_row;
    for (int64_t b = 0; b < nb; b++) {
        for (int k = 0; k < R * WBLOCK(wt); k += 64)
            _mm_prefetch((const char *)(pf + (uintptr_t)(b * R * WBLOCK(wt) + k)), _MM_HINT_T0);
        __m256i qx[CPU_TILE_T];
        __m256 dx[CPU_TILE_T];
        __m128 ds[CPU_TILE_T];
        UNROLL
        for (int t = 0; t < T; t++) {
            const uint8_t *xb = x + (size_t)t * x_row + (size_t)b * XBLOCK(wt);
            ds[t] = f16x2(xb); /* q8_1: (d, s); q8_0: (d, first two codes: unused) */
            qx[t] = _mm256_loadu_si256((const __m256i *)(xb + XQS(wt)));
            dx[t] = _mm256_broadcastss_ps(ds[t]);
        }
        /* (dx0, dx1, sx0, sx1): the s of token t in lane 2 + t */
        const __m128 sxt = _mm_unpacklo_ps(ds[0], ds[T - 1]);
        UNROLL
        for (int r = 0; r < R; r++) {
            const uint8_t *wb = w + (size_t)r * w_row + (size_t)b * WBLOCK(wt);
            __m128 dm = f16x2(wb);
            __m256 dw = _mm256_broadcastss_ps(dm);
            __m256i qw;
            if (wt == DTYPE_Q8_0) qw = _mm256_loadu_si256((const __m256i *)(wb + WQS(wt)));
            else qw = unpack_nibbles(wb + WQS(wt));
            if (wt == DTYPE_Q4_1) {
                macc[r] = _mm_fmadd_ps(_mm_permute_ps(dm, 0x55), sxt, macc[r]); /* m_w * (.., .., sx0, sx1) */
                UNROLL
                for (int t = 0; t < T; t++) {
                    __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(qw, qx[t]), ones);
                    acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx[t]), _mm256_cvtepi32_ps(p), acc[r][t]);
                }
            } else {
                if (wt == DTYPE_Q4_0) qw = _mm256_sub_epi8(qw, _mm256_set1_epi8(8));
                __m256i aw = _mm256_sign_epi8(qw, qw); /* |w|; the sign moves onto x */
                UNROLL
                for (int t = 0; t < T; t++) {
                    __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(qx[t], qw)), ones);
                    acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx[t]), _mm256_cvtepi32_ps(p), acc[r][t]);
                }
            }
        }
    }
    float m[CPU_TILE_R][4];
    UNROLL
    for (int r = 0; r < R; r++) _mm_storeu_ps(m[r], macc[r]);
    UNROLL
    for (int t = 0; t < T; t++)
        UNROLL
        for (int r = 0; r < R; r++)
            y[(size_t)t * y_row + (size_t)r] = hsum8(acc[r][t]) + (wt == DTYPE_Q4_1 ? m[r][2 + t] : 0.0f);
}

// --- float tiles

#define FSIZE(wt) ((wt) == DTYPE_F32 ? 4 : 2)

TARGET INLINE __m256 load_w8(const dtype wt, const uint8_t *p)
{
    if (wt == DTYPE_F32) return _mm256_loadu_ps((const float *)p);
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (wt == DTYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); /* bf16 */
}

INLINE float load_w1(const dtype wt, const uint8_t *p)
{
    uint16_t h;
    if (wt == DTYPE_F32) { float f; memcpy(&f, p, 4); return f; }
    memcpy(&h, p, 2);
    return wt == DTYPE_F16 ? dtype_f16_to_f32(h) : dtype_bf16_to_f32(h);
}

TARGET INLINE void ftile(const dtype wt, const int R, const int T, int64_t n, const uint8_t *w, size_t w_row,
                         const uint8_t *x, size_t x_row, float *y, size_t y_row)
{
    __m256 acc[CPU_TILE_R][CPU_TILE_T];
    UNROLL
    for (int r = 0; r < R; r++)
        UNROLL
        for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 xv[CPU_TILE_T];
        UNROLL
        for (int t = 0; t < T; t++) xv[t] = _mm256_loadu_ps((const float *)(x + (size_t)t * x_row) + i);
        UNROLL
        for (int r = 0; r < R; r++) {
            __m256 wv = load_w8(wt, w + (size_t)r * w_row + (size_t)i * FSIZE(wt));
            UNROLL
            for (int t = 0; t < T; t++) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
        }
    }
    UNROLL
    for (int t = 0; t < T; t++) {
        const float *xt = (const float *)(x + (size_t)t * x_row);
        UNROLL
        for (int r = 0; r < R; r++) {
            float s = hsum8(acc[r][t]);
            for (int64_t k = i; k < n; k++) s += load_w1(wt, w + (size_t)r * w_row + (size_t)k * FSIZE(wt)) * xt[k];
            y[(size_t)t * y_row + (size_t)r] = s;
        }
    }
}

// --- entry points: shapes (4 or 1) x (CPU_TILE_T or 1)

#include "backend/cpu/tile_cover.h"

#define ENTRY(name, wt)                                                                              \
    TARGET static void tile_##name(int64_t n, const void *w, size_t w_row, int nr, const void *x,      \
                                   size_t x_row, int nt, float *y, size_t y_row)                      \
    { tile_cover(wt, n, w, w_row, nr, x, x_row, nt, y, y_row); }

ENTRY(f32, DTYPE_F32)
ENTRY(f16, DTYPE_F16)
ENTRY(bf16, DTYPE_BF16)
ENTRY(q8_0, DTYPE_Q8_0)
ENTRY(q4_0, DTYPE_Q4_0)
ENTRY(q4_1, DTYPE_Q4_1)

const cpu_tile_fn cpu_tiles_avx2[DTYPE_COUNT] = {
    [DTYPE_F32] = tile_f32, [DTYPE_F16] = tile_f16, [DTYPE_BF16] = tile_bf16,
    [DTYPE_Q8_0] = tile_q8_0, [DTYPE_Q4_0] = tile_q4_0, [DTYPE_Q4_1] = tile_q4_1,
};

#endif
