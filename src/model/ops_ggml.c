/* ops_ggml.c - attention over an f16 cache and SwiGLU in the float order of llama.cpp's CPU backend.
 *
 * Why: the llama.cpp parity test compares greedy continuations token for token, and both engines
 * quantize every activation row to q8 blocks, so a 1-ulp difference anywhere can flip an int8 code
 * and grow from there. With the matmuls already bit-identical (position 0, where attention is the
 * identity, gives identical logits), what is left is attention and SiLU. These functions compute
 * them with the operations and the rounding order ggml's AVX2 path uses (non-flash-attention
 * graph: KQ = K Q^T, softmax(scale * KQ + mask), KQV = V^T P), learned from ggml's public source:
 *  1. Q and K in f16, products in f32 with FMA. Two orders, because llama.cpp takes two routes:
 *     a batch of >= 2 tokens goes to its tiled sgemm (one 8-lane accumulator over k, summed
 *     high+low, then movehl, then movehdup), a single token to ggml_vec_dot_f16 (four 8-lane
 *     accumulators striding 32 elements, folded 0+2, 1+3, 0+1, then high+low and two hadds).
 *  2. softmax: x * scale, max, exp(x - max) with the SIMD expf (the polynomial below), each group
 *     of 8 positions summed as in (1) and added in double; the probabilities times (float)(1/sum).
 *  3. The probabilities are rounded to f16 (llama.cpp converts the f32 softmax row to the f16 of
 *     the V cache's dot product) and multiplied with V in the same two orders as (1), with
 *     positions as the reduction axis (lane = position mod 8 or mod 32). Positions past n_pos are
 *     llama.cpp's masked, padded cells: probability 0, which leaves every lane sum unchanged.
 *  4. SwiGLU: silu(g) * u with silu(g) = g / (1 + expf(-g)), expf the same polynomial.
 * Invariants: head dims are multiples of 8 (32 for the vec_dot order; otherwise the caller uses
 * model_attend_f16); the AVX2 path needs AVX2+FMA+F16C, else the caller falls back too.
 */
#include <math.h>
#include <string.h>

#include "aiinfra/cpu_kernels.h"
#include "model/model_internal.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define TGT __attribute__((target("avx2,fma,f16c")))
#define UNROLL8 _Pragma("GCC unroll 8") /* so that the 8 lane accumulators live in registers */

/* exp(x) for 8 floats: x = n ln2 + b (n = round(x / ln2), ln2 in two parts), exp(b) by a degree-5
 * polynomial, 2^n by building the exponent; |n| > 126 scales in two steps, |n| > 192 saturates. */
TGT static inline __m256 v_expf(__m256 x)
{
    const __m256 shifter = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), shifter);
    const __m256 n = _mm256_sub_ps(z, shifter);
    const __m256 hi = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f), hi);
    const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
    const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1.0f))));
    const __m256 absn = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
    const __m256 big = _mm256_cmp_ps(absn, _mm256_set1_ps(126.0f), _CMP_GT_OQ);
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 p_hi = _mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f));
    const __m256 p_lo = _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f));
    const __m256 j = _mm256_fmadd_ps(_mm256_fmadd_ps(p_hi, u, p_lo), u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
    const __m256 normal = _mm256_fmadd_ps(j, k, k);
    if (!_mm256_movemask_ps(big)) return normal;
    const __m256i g = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                                       _mm256_set1_epi32((int)0x82000000u));
    const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
    const __m256 huge = _mm256_cmp_ps(absn, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
    const __m256 scaled = _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1);
    const __m256 mid = _mm256_blendv_ps(normal, scaled, big);
    return _mm256_blendv_ps(mid, _mm256_mul_ps(s1, s1), huge);
}

/* high + low, then movehl, then movehdup: ggml's hsum of one 8-lane accumulator. */
TGT static inline float hsum_gemm(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ggml_vec_dot_f16's fold of four 8-lane accumulators. */
TGT static inline float hsum_vecdot(__m256 a0, __m256 a1, __m256 a2, __m256 a3)
{
    a0 = _mm256_add_ps(a0, a2);
    a1 = _mm256_add_ps(a1, a3);
    a0 = _mm256_add_ps(a0, a1);
    __m128 t = _mm_add_ps(_mm256_castps256_ps128(a0), _mm256_extractf128_ps(a0, 1));
    t = _mm_hadd_ps(t, t);
    t = _mm_hadd_ps(t, t);
    return _mm_cvtss_f32(t);
}

TGT static inline __m256 ld16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

/* q (f32 values already representable in f16) . k (f16), n a multiple of 8 (gemm) or 32 (vecdot). */
TGT static float dot_qk(const float *q, const uint16_t *k, int32_t n, bool gemm)
{
    if (gemm) {
        __m256 acc = _mm256_setzero_ps();
        for (int32_t i = 0; i < n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), ld16(k + i), acc);
        return hsum_gemm(acc);
    }
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int32_t i = 0; i < n; i += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), ld16(k + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), ld16(k + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 16), ld16(k + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 24), ld16(k + i + 24), a3);
    }
    return hsum_vecdot(a0, a1, a2, a3);
}

TGT static void attend_ggml_avx2(float *out, const float *q, const uint16_t *k, const uint16_t *v, int32_t n_pos,
                                 int32_t n, int32_t m, int64_t ks, int64_t vs, float scale, float *scores, bool gemm)
{
    float mx = -INFINITY;
    for (int32_t j = 0; j < n_pos; j++) {
        float d = dot_qk(q, k + (int64_t)j * ks, n, gemm) * scale;
        scores[j] = d;
        if (d > mx) mx = d;
    }
    /* exp in groups of 8 positions; the padded tail of the last group is exp(-inf) = 0 */
    double sum = 0.0;
    const __m256 vmx = _mm256_set1_ps(mx);
    for (int32_t j = 0; j < n_pos; j += 8) {
        float tmp[8];
        int32_t c = n_pos - j < 8 ? n_pos - j : 8;
        for (int i = 0; i < 8; i++) tmp[i] = i < c ? scores[j + i] : -INFINITY;
        __m256 e = v_expf(_mm256_sub_ps(_mm256_loadu_ps(tmp), vmx));
        _mm256_storeu_ps(tmp, e);
        memcpy(scores + j, tmp, (size_t)c * sizeof(float));
        sum += (double)hsum_gemm(e);
    }
    const float inv = (float)(1.0 / sum);
    int32_t j = 0;
    for (; j + 8 <= n_pos; j += 8) { /* f16 round trip, round to nearest even as llama.cpp's F16C */
        __m256 p = _mm256_mul_ps(_mm256_loadu_ps(scores + j), _mm256_set1_ps(inv));
        _mm256_storeu_ps(scores + j, _mm256_cvtph_ps(_mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT)));
    }
    for (; j < n_pos; j++) scores[j] = dtype_f16_to_f32(dtype_f32_to_f16(scores[j] * inv));

    /* V^T P: lane L of output dim i sums positions j = L (mod lanes), in position order. Per 8 output
     * dims, the lanes are done 8 at a time in registers (positions stride*s + 8G + l), then folded. */
    const int lanes = gemm ? 8 : 32;
    for (int32_t i = 0; i < m; i += 8) {
        __m256 L[32];
        for (int G = 0; G < lanes / 8; G++) {
            __m256 a[8];
            UNROLL8
            for (int l = 0; l < 8; l++) a[l] = _mm256_setzero_ps();
            int32_t base = 8 * G;
            for (; base + 8 <= n_pos; base += lanes) {
                const uint16_t *vb = v + (int64_t)base * vs + i;
                UNROLL8
                for (int l = 0; l < 8; l++)
                    a[l] = _mm256_fmadd_ps(_mm256_set1_ps(scores[base + l]), ld16(vb + (int64_t)l * vs), a[l]);
            }
            UNROLL8
            for (int l = 0; l < 8; l++) /* the last, partial group of positions */
                if (base + l < n_pos)
                    a[l] = _mm256_fmadd_ps(_mm256_set1_ps(scores[base + l]), ld16(v + (int64_t)(base + l) * vs + i), a[l]);
            UNROLL8
            for (int l = 0; l < 8; l++) L[8 * G + l] = a[l];
        }
        __m256 r;
        if (gemm) { /* hsum_gemm per dim: (4+0, 5+1, 6+2, 7+3), then (s0+s2, s1+s3), then u0+u1 */
            __m256 s0 = _mm256_add_ps(L[4], L[0]), s1 = _mm256_add_ps(L[5], L[1]);
            __m256 s2 = _mm256_add_ps(L[6], L[2]), s3 = _mm256_add_ps(L[7], L[3]);
            r = _mm256_add_ps(_mm256_add_ps(s0, s2), _mm256_add_ps(s1, s3));
        } else { /* four accumulators x_r lane l = L[8r + l]: x0+x2, x1+x3, x0+x1, high+low, hadd, hadd */
            __m256 x[8];
            for (int l = 0; l < 8; l++)
                x[l] = _mm256_add_ps(_mm256_add_ps(L[l], L[16 + l]), _mm256_add_ps(L[8 + l], L[24 + l]));
            __m256 t0 = _mm256_add_ps(x[0], x[4]), t1 = _mm256_add_ps(x[1], x[5]);
            __m256 t2 = _mm256_add_ps(x[2], x[6]), t3 = _mm256_add_ps(x[3], x[7]);
            r = _mm256_add_ps(_mm256_add_ps(t0, t1), _mm256_add_ps(t2, t3));
        }
        _mm256_storeu_ps(out + i, r);
    }
}

TGT static void swiglu_avx2(float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(g + i);
        __m256 e = v_expf(_mm256_sub_ps(_mm256_setzero_ps(), x));
        __m256 s = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}
#endif

void model_attend_f16_ggml(float *out, const float *q, const uint16_t *k, const uint16_t *v, int32_t n_pos,
                           int32_t head_dim, int32_t head_dim_v, int64_t k_stride, int64_t v_stride, float scale,
                           float *scores, bool batched)
{
#if defined(__x86_64__)
    int32_t mult = batched ? 8 : 32;
    if (head_dim % mult == 0 && head_dim_v % 8 == 0 && cpu_isa_available(CPU_ISA_AVX2)) {
        attend_ggml_avx2(out, q, k, v, n_pos, head_dim, head_dim_v, k_stride, v_stride, scale, scores, batched);
        return;
    }
#endif
    (void)batched;
    model_attend_f16(out, q, k, v, n_pos, head_dim, head_dim_v, k_stride, v_stride, scale, scores);
}

void model_swiglu(float *g, const float *u, int64_t n)
{
#if defined(__x86_64__)
    if (cpu_isa_available(CPU_ISA_AVX2)) {
        swiglu_avx2(g, u, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}
