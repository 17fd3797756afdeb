/* fp8.h - the OCP FP8 e4m3 format ("e4m3fn"), the 8-bit element of the fp8 KV cache.
 *
 * Byte layout of one value:  bit 7 sign | bits 6..3 exponent e (bias 7) | bits 2..0 mantissa m
 *   e = 1..15:  (-1)^s * (1 + m/8) * 2^(e-7)      largest finite: S.1111.110 = 448
 *   e = 0:      (-1)^s * m * 2^-9                 subnormals, smallest 2^-9; 0x00 = +0, 0x80 = -0
 *   S.1111.111: NaN (0x7F, 0xFF). There are no infinities.
 *
 * Policies (the same as the CUDA conversion cvt.rn.satfinite.e4m3x2.f32, so the CPU and GPU caches hold the
 * same bytes for the same floats):
 *   1. round to nearest, ties to even (the even one of two neighbours is the code with mantissa bit 0 clear);
 *   2. saturation: every finite value beyond 448, and +-inf, stores +-448 (0x7E / 0xFE);
 *   3. NaN stores 0x7F (the canonical NaN, whatever the input's sign); 0x7F and 0xFF read as NaN.
 *
 * A cache keeps a per-tensor scale (float): the stored code is fp8(x / scale) and reads as value * scale.
 * 1.0 is vLLM's uncalibrated default: the largest magnitude is then 448 and values below 2^-10 flush to zero,
 * ample for post-norm K/V (|x| up to a few tens); a calibrated scale (max|x| / 448) can come later.
 */
#ifndef AIINFRA_FP8_H
#define AIINFRA_FP8_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FP8_E4M3_MAX 448.0f
#define FP8_E4M3_NAN 0x7F

float fp8_e4m3_to_f32(uint8_t c);
uint8_t fp8_e4m3_from_f32(float x);

/* q[i] = fp8(x[i] / scale), i < n. */
void fp8_e4m3_quantize_row(const float *x, uint8_t *q, int64_t n, float scale);
/* y[i] = decode(q[i]) * scale through a table built by fp8_e4m3_table (256 floats). */
void fp8_e4m3_table(float scale, float *table);
static inline void fp8_e4m3_dequantize_row(const float *table, const uint8_t *q, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = table[q[i]];
}

#ifdef __cplusplus
}
#endif

#endif
