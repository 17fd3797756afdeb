/* fp8.c - FP8 e4m3 conversions (fp8.h states the format and the policies).
 *
 * Both directions work on the IEEE binary32 bits, so they do not depend on the FPU rounding mode:
 *  - decode: the 7 magnitude bits shifted to f32 bits 26..20 are an f32 whose exponent field is e and whose
 *    mantissa starts with m; as a number it is the e4m3 value times 2^-120 (subnormals included, since an f32
 *    with exponent field 0 is m/8 * 2^-126). Multiplying by 2^120 is exact.
 *  - encode: |x| >= 2^-6 (normal e4m3): rebias the f32 exponent by -120 and round the mantissa to 3 bits with
 *    the usual add-half-minus-one-plus-lsb trick; a carry into the exponent is the right result, and a
 *    result past 0x7E saturates. |x| < 2^-6: the value in units of 2^-9 is |x| * 512 < 8 (exact: a power of
 *    two), rounded to an integer 0..8; 8 is 2^-6, whose code 0x08 is exactly 8, so the integer is the code.
 */
#include "aiinfra/fp8.h"

#include <string.h>

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float fp8_e4m3_to_f32(uint8_t c)
{
    if ((c & 0x7F) == 0x7F) return bits_f32(0x7FC00000u);
    float v = bits_f32((uint32_t)(c & 0x7F) << 20) * 0x1p120f;
    return c & 0x80 ? -v : v;
}

uint8_t fp8_e4m3_from_f32(float x)
{
    uint32_t u = f32_bits(x), s = (u >> 24) & 0x80, a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return FP8_E4M3_NAN;
    if (a >= 0x3C800000u) { /* >= 2^-6 */
        uint32_t r = (a - (120u << 23) + 0x7FFFFu + ((a >> 20) & 1)) >> 20;
        return (uint8_t)(s | (r > 0x7E ? 0x7E : r));
    }
    float f = bits_f32(a) * 512.0f; /* < 8, exact */
    uint32_t i = (uint32_t)f;
    float frac = f - (float)i; /* exact: f has at most 24 significant bits and i <= 7 */
    if (frac > 0.5f || (frac == 0.5f && (i & 1))) i++;
    return (uint8_t)(s | i);
}

void fp8_e4m3_quantize_row(const float *x, uint8_t *q, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++) q[i] = fp8_e4m3_from_f32(x[i] / scale);
}

void fp8_e4m3_table(float scale, float *table)
{
    for (int c = 0; c < 256; c++) table[c] = fp8_e4m3_to_f32((uint8_t)c) * scale;
}
