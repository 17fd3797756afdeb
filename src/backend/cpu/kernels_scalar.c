/* kernels_scalar.c - portable reference kernels: activation quantizers and dot products.
 *
 * These define the results the SIMD versions are tested against:
 *  1. Activation quantizers follow llama.cpp's x86 path (not ggml's _ref): d = amax/127,
 *     id = 127/amax, codes = round-half-even(x * id). Pure f32 operations whose result does not
 *     depend on evaluation order (max is exact), so SIMD versions must match these bytes exactly.
 *  2. Quantized dots: the per-block integer sum is exact (int32); it is scaled in f32 as
 *     isum * (dw * dx) like ggml's generic code. Only the order of the f32 accumulation across
 *     blocks may differ in SIMD versions.
 */
#include <math.h>

#include "backend/cpu/kernels.h"

// --- activation quantizers

static inline int round_clamp_i8(float v)
{
    float r = rintf(v); /* default rounding mode: nearest, ties to even (= _mm256_round_ps NEAREST) */
    if (!(r == r)) return 0;
    return r > 127.0f ? 127 : r < -128.0f ? -128 : (int)r;
}

static inline float block_amax(const float *x)
{
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) {
        float a = fabsf(x[j]);
        amax = a > amax ? a : amax;
    }
    return amax;
}

static void quantize_q8_0_scalar(const float *x, dtype_block_q8_0 *y, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, x += 32) {
        const float amax = block_amax(x);
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        y[b].d = dtype_f32_to_f16(d);
        for (int j = 0; j < 32; j++) y[b].qs[j] = (int8_t)round_clamp_i8(x[j] * id);
    }
}

static void quantize_q8_1_scalar(const float *x, dtype_block_q8_1 *y, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, x += 32) {
        const float amax = block_amax(x);
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int sum = 0;
        y[b].d = dtype_f32_to_f16(d);
        for (int j = 0; j < 32; j++) {
            int q = round_clamp_i8(x[j] * id);
            y[b].qs[j] = (int8_t)q;
            sum += q;
        }
        y[b].s = dtype_f32_to_f16(d * (float)sum);
    }
}

// --- float dots (f32 activations)

static float dot_f32(int64_t n, const void *w, const void *x)
{
    const float *a = w, *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static float dot_f16(int64_t n, const void *w, const void *x)
{
    const uint16_t *a = w;
    const float *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += dtype_f16_to_f32(a[i]) * b[i];
    return s;
}

static float dot_bf16(int64_t n, const void *w, const void *x)
{
    const uint16_t *a = w;
    const float *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += dtype_bf16_to_f32(a[i]) * b[i];
    return s;
}

// --- quantized dots

static float dot_q8_0(int64_t n, const void *w, const void *x)
{
    const dtype_block_q8_0 *a = w, *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        int isum = 0;
        for (int j = 0; j < 32; j++) isum += a[i].qs[j] * b[i].qs[j];
        s += (float)isum * (dtype_f16_to_f32(a[i].d) * dtype_f16_to_f32(b[i].d));
    }
    return s;
}

static float dot_q4_0(int64_t n, const void *w, const void *x)
{
    const dtype_block_q4_0 *a = w;
    const dtype_block_q8_0 *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            isum += ((a[i].qs[j] & 0x0f) - 8) * b[i].qs[j];
            isum += ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + 16];
        }
        s += (float)isum * (dtype_f16_to_f32(a[i].d) * dtype_f16_to_f32(b[i].d));
    }
    return s;
}

static float dot_q4_1(int64_t n, const void *w, const void *x)
{
    const dtype_block_q4_1 *a = w;
    const dtype_block_q8_1 *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            isum += (a[i].qs[j] & 0x0f) * b[i].qs[j];
            isum += (a[i].qs[j] >> 4) * b[i].qs[j + 16];
        }
        s += (float)isum * (dtype_f16_to_f32(a[i].d) * dtype_f16_to_f32(b[i].d))
           + dtype_f16_to_f32(a[i].m) * dtype_f16_to_f32(b[i].s);
    }
    return s;
}

// --- tiles: one dot per (row, token), the reference for the SIMD tiles

#define SCALAR_TILE(name)                                                                              \
    static void tile_##name(int64_t n, const void *w, size_t w_row, int nr, const void *x, size_t x_row, \
                            int nt, float *y, size_t y_row)                                             \
    {                                                                                                  \
        for (int t = 0; t < nt; t++)                                                                   \
            for (int r = 0; r < nr; r++)                                                               \
                y[(size_t)t * y_row + (size_t)r] =                                                     \
                    dot_##name(n, (const uint8_t *)w + (size_t)r * w_row, (const uint8_t *)x + (size_t)t * x_row); \
    }
SCALAR_TILE(f32)
SCALAR_TILE(f16)
SCALAR_TILE(bf16)
SCALAR_TILE(q8_0)
SCALAR_TILE(q4_0)
SCALAR_TILE(q4_1)

const cpu_tile_fn cpu_tiles_scalar[DTYPE_COUNT] = {
    [DTYPE_F32] = tile_f32, [DTYPE_F16] = tile_f16, [DTYPE_BF16] = tile_bf16,
    [DTYPE_Q8_0] = tile_q8_0, [DTYPE_Q4_0] = tile_q4_0, [DTYPE_Q4_1] = tile_q4_1,
};

const cpu_kernels cpu_kernels_scalar = {
    .dot = {
        [DTYPE_F32] = dot_f32, [DTYPE_F16] = dot_f16, [DTYPE_BF16] = dot_bf16,
        [DTYPE_Q8_0] = dot_q8_0, [DTYPE_Q4_0] = dot_q4_0, [DTYPE_Q4_1] = dot_q4_1,
    },
    .tile = cpu_tiles_scalar,
    .quantize_q8_0 = quantize_q8_0_scalar,
    .quantize_q8_1 = quantize_q8_1_scalar,
};
