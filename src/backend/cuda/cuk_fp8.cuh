/* cuk_fp8.cuh - OCP FP8 e4m3 on the GPU: the conversions the fp8 KV cache uses (format and policies:
 * include/aiinfra/fp8.h). Stores are cvt.rn.satfinite.e4m3x2.f32 (nearest even, saturated to +-448,
 * NaN -> 0x7F): the same bytes src/core/fp8.c writes on the CPU. Reads widen to f16, which holds every
 * e4m3 value exactly (3 mantissa bits < 10, 2^-9 .. 448 inside f16's range), so an fp8 tile converted
 * in shared memory feeds the f16 tensor-core paths unchanged; the per-tensor scale is applied in f32
 * outside (folded into the score scale for K, into the final 1 / l for V). The decode kernel widens in
 * registers instead (cuk_f8x4_to_f16x4_cvt). CUDA C++ only. */
#ifndef AIINFRA_CUK_FP8_CUH
#define AIINFRA_CUK_FP8_CUH

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

static __device__ __forceinline__ uint8_t cuk_f8_from_f32(float x)
{
    return (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
}

static __device__ __forceinline__ float cuk_f8_to_f32(uint8_t c)
{
    return __half2float(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)c, __NV_E4M3)));
}

/* 8 codes (little-endian bytes of v) -> 8 halves (cvt.rn.f16x2.e4m3x2, exact). */
static __device__ __forceinline__ uint4 cuk_f8x8_to_f16x8(uint2 v)
{
    uint32_t h[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t w = i < 2 ? v.x : v.y;
        const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)((w >> (16 * (i & 1))) & 0xFFFFu), __NV_E4M3);
        h[i] = (uint32_t)r.x | ((uint32_t)r.y << 16);
    }
    return make_uint4(h[0], h[1], h[2], h[3]);
}

/* 4 codes (the little-endian bytes c0..c3 of w) -> two f16x2 words, lo = (c0, c2), hi = (c1, c3), each
 * with its first code in the low half: the pairing the fp8 decode kernel's ldmatrix fragments need
 * (k_attn_decode.cu). Exact values: a byte permute, then cvt.rn.f16x2.e4m3x2 on each 16-bit half, whose
 * low byte goes to the low half (1 PRMT + 2 F2FP). Measured on the H200 against widening by bit moves
 * (sign to bit 15, magnitude << 7: values times 2^-8, 7 integer ops per 4 codes): the cvt form was
 * faster at every decode shape (k_attn_decode.cu has the figures). */
static __device__ __forceinline__ void cuk_f8x4_to_f16x4_cvt(uint32_t w, uint32_t &lo, uint32_t &hi)
{
    const uint32_t p = __byte_perm(w, 0u, 0x3120); /* bytes c0, c2, c1, c3 */
    const __half2_raw l = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(p & 0xFFFFu), __NV_E4M3);
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(p >> 16), __NV_E4M3);
    lo = (uint32_t)l.x | ((uint32_t)l.y << 16);
    hi = (uint32_t)h.x | ((uint32_t)h.y << 16);
}

#endif
