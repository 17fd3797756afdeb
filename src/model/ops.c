/* ops.c - the per-token building blocks of a Llama-family layer: RMSNorm, RoPE, one attention head.
 *
 * Each follows the order of operations llama.cpp's CPU backend uses, because the parity test
 * compares greedy continuations token for token and a different rounding order can flip a near
 * tie: RMSNorm sums squares in double and scales before multiplying by the weight; RoPE builds its
 * angles by repeated multiplication by base^(-2/d) in float (ggml_rope_cache_init); softmax
 * subtracts the max, sums in double and multiplies by 1/sum; the RoPE rotation uses fmaf as
 * llama.cpp's compiled code does.
 *
 * model_attend has an AVX2+FMA path (8-lane dot products and axpy over the head dimension, chosen at
 * run time) because attention is O(n^2) in prefill: at 554 prompt tokens the scalar loop took ~40% of
 * the prefill time. Its sums are reassociated (8 lanes), which moves scores by ~1 ulp of the sum.
 */
#include <math.h>
#if defined(__x86_64__)
#include <immintrin.h>
#define OPS_HAVE_AVX2 1
#endif

#include "aiinfra/cpu_kernels.h"
#include "aiinfra/model.h"

void model_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps)
{
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    float mean = (float)(sum / (double)n);
    float scale = 1.0f / sqrtf(mean + eps);
    if (w)
        for (int64_t i = 0; i < n; i++) y[i] = (x[i] * scale) * w[i];
    else
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale;
}

void model_rope_llama3_factors(const model_config *cfg, float *factors)
{
    const double pi = 3.14159265358979323846;
    double factor = cfg->rope_factor, lo = cfg->rope_low_freq_factor, hi = cfg->rope_high_freq_factor;
    double orig = cfg->rope_orig_ctx;
    double low_wavelen = orig / lo, high_wavelen = orig / hi;
    for (int32_t i = 0; i < cfg->rope_dim / 2; i++) {
        double freq = 1.0 / pow(cfg->rope_base, (2.0 * i) / cfg->rope_dim);
        double wavelen = 2.0 * pi / freq;
        double f;
        if (wavelen < high_wavelen) f = 1.0;
        else if (wavelen > low_wavelen) f = factor;
        else {
            double smooth = (orig / wavelen - lo) / (hi - lo);
            f = 1.0 / ((1.0 - smooth) / factor + smooth);
        }
        factors[i] = (float)f;
    }
}

void model_rope(float *x, int32_t n_heads, int32_t head_dim, int32_t rope_dim, int32_t pos, float base,
                float freq_scale, const float *freq_factors, model_rope_kind kind)
{
    /* Angles once per call (every head shares them); rope_dim <= 2^16 per config.c. */
    float theta_scale = powf(base, -2.0f / (float)rope_dim);
    float theta = (float)pos;
    int32_t half = rope_dim / 2;
    for (int32_t i = 0; i < half; i++) {
        float ff = freq_factors ? freq_factors[i] : 1.0f;
        float th = freq_scale * (theta / ff);
        float c = cosf(th), s = sinf(th);
        for (int32_t h = 0; h < n_heads; h++) {
            float *v = x + (int64_t)h * head_dim;
            int32_t a = kind == MODEL_ROPE_NORM ? 2 * i : i;
            int32_t b = kind == MODEL_ROPE_NORM ? 2 * i + 1 : i + half;
            float x0 = v[a], x1 = v[b];
            /* llama.cpp's build contracts x0*c - x1*s and x0*s + x1*c into one FMA each, with the
             * first product fused (GCC's -ffp-contract=fast); bit-exact prefill needs the same. */
            v[a] = fmaf(x0, c, -(x1 * s));
            v[b] = fmaf(x0, s, x1 * c);
        }
        theta *= theta_scale;
    }
}

/* scores[j] = exp(scores[j] - mx) in place; returns 1 / sum (the sum kept in double). */
static float softmax_unnormalized(float *scores, int32_t n_pos, float mx)
{
    double sum = 0.0;
    for (int32_t j = 0; j < n_pos; j++) {
        float e = expf(scores[j] - mx);
        scores[j] = e;
        sum += (double)e;
    }
    return (float)(1.0 / sum);
}

#ifdef OPS_HAVE_AVX2
__attribute__((target("avx2,fma"))) static float dot_avx2(const float *a, const float *b, int32_t n)
{
    __m256 acc = _mm256_setzero_ps();
    for (int32_t i = 0; i < n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* n, m multiples of 8 (checked by the caller). */
__attribute__((target("avx2,fma"))) static void attend_avx2(float *out, const float *q, const float *k,
                                                             const float *v, int32_t n_pos, int32_t n, int32_t m,
                                                             int64_t ks, int64_t vs, float scale, float *scores)
{
    float mx = -INFINITY;
    for (int32_t j = 0; j < n_pos; j++) {
        float d = dot_avx2(q, k + (int64_t)j * ks, n) * scale;
        scores[j] = d;
        if (d > mx) mx = d;
    }
    float inv = softmax_unnormalized(scores, n_pos, mx);
    for (int32_t i = 0; i < m; i += 8) {
        __m256 acc = _mm256_setzero_ps();
        for (int32_t j = 0; j < n_pos; j++)
            acc = _mm256_fmadd_ps(_mm256_set1_ps(scores[j] * inv), _mm256_loadu_ps(v + (int64_t)j * vs + i), acc);
        _mm256_storeu_ps(out + i, acc);
    }
}
#endif

void model_attend(float *out, const float *q, const float *k, const float *v, int32_t n_pos, int32_t head_dim,
                  int32_t head_dim_v, int64_t k_stride, int64_t v_stride, float scale, float *scores)
{
#ifdef OPS_HAVE_AVX2
    if (head_dim % 8 == 0 && head_dim_v % 8 == 0 && cpu_isa_available(CPU_ISA_AVX2)) {
        attend_avx2(out, q, k, v, n_pos, head_dim, head_dim_v, k_stride, v_stride, scale, scores);
        return;
    }
#endif
    float mx = -INFINITY;
    for (int32_t j = 0; j < n_pos; j++) {
        const float *kj = k + (int64_t)j * k_stride;
        float d = 0.0f;
        for (int32_t i = 0; i < head_dim; i++) d += q[i] * kj[i];
        d *= scale;
        scores[j] = d;
        if (d > mx) mx = d;
    }
    float inv = softmax_unnormalized(scores, n_pos, mx);
    for (int32_t i = 0; i < head_dim_v; i++) out[i] = 0.0f;
    for (int32_t j = 0; j < n_pos; j++) {
        const float *vj = v + (int64_t)j * v_stride;
        float p = scores[j] * inv;
        for (int32_t i = 0; i < head_dim_v; i++) out[i] += p * vj[i];
    }
}

// --- attention over an f16 cache ---------------------------------------------------

#ifdef OPS_HAVE_AVX2
__attribute__((target("avx2,fma,f16c"))) static void attend_f16_avx2(float *out, const float *q, const uint16_t *k,
                                                                      const uint16_t *v, int32_t n_pos, int32_t n,
                                                                      int32_t m, int64_t ks, int64_t vs, float scale,
                                                                      float *scores)
{
    float mx = -INFINITY;
    for (int32_t j = 0; j < n_pos; j++) {
        const uint16_t *kj = k + (int64_t)j * ks;
        __m256 acc = _mm256_setzero_ps();
        for (int32_t i = 0; i < n; i += 8)
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kj + i))),
                                  acc);
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        float d = _mm_cvtss_f32(s) * scale;
        scores[j] = d;
        if (d > mx) mx = d;
    }
    float inv = softmax_unnormalized(scores, n_pos, mx);
    for (int32_t i = 0; i < m; i += 8) {
        __m256 acc = _mm256_setzero_ps();
        for (int32_t j = 0; j < n_pos; j++)
            acc = _mm256_fmadd_ps(_mm256_set1_ps(scores[j] * inv),
                                  _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + (int64_t)j * vs + i))), acc);
        _mm256_storeu_ps(out + i, acc);
    }
}
#endif

void model_attend_f16(float *out, const float *q, const uint16_t *k, const uint16_t *v, int32_t n_pos,
                      int32_t head_dim, int32_t head_dim_v, int64_t k_stride, int64_t v_stride, float scale,
                      float *scores)
{
#ifdef OPS_HAVE_AVX2
    if (head_dim % 8 == 0 && head_dim_v % 8 == 0 && cpu_isa_available(CPU_ISA_AVX2)) {
        attend_f16_avx2(out, q, k, v, n_pos, head_dim, head_dim_v, k_stride, v_stride, scale, scores);
        return;
    }
#endif
    float mx = -INFINITY;
    for (int32_t j = 0; j < n_pos; j++) {
        const uint16_t *kj = k + (int64_t)j * k_stride;
        float d = 0.0f;
        for (int32_t i = 0; i < head_dim; i++) d += q[i] * dtype_f16_to_f32(kj[i]);
        d *= scale;
        scores[j] = d;
        if (d > mx) mx = d;
    }
    float inv = softmax_unnormalized(scores, n_pos, mx);
    for (int32_t i = 0; i < head_dim_v; i++) out[i] = 0.0f;
    for (int32_t j = 0; j < n_pos; j++) {
        const uint16_t *vj = v + (int64_t)j * v_stride;
        float p = scores[j] * inv;
        for (int32_t i = 0; i < head_dim_v; i++) out[i] += p * dtype_f16_to_f32(vj[i]);
    }
}
