/* k_gemv_xq.cuh - x rounded to int8 per 32-block for the quantized GEMVs, device side: the dp4a kernel's
 * prologue and its quantize kernel (k_gemv_dp4a.cu), and the int8 tensor-core kernel's float-input
 * prologue (k_gemv_qmma.cu) share it, so all three give the same codes and scales for the same x.
 *
 * A 32-block of x (one token, elements 32 b .. 32 b + 31) is held by 4 consecutive lanes, 8 values each;
 * which 8 is the caller's (the dp4a layout: 8 consecutive; the mma fragments: 4q..4q + 3 and 16 + 4q ..).
 * Its codes are q = round(x 127 / amax), its scale d = amax / 127 (0 for an all-zero block), and the
 * GEMVs also use sum(q) (the q4 offset: s = -8 d sum(q)) and sum(x) (q4_1's min term).
 */
#ifndef AIINFRA_CUDA_K_GEMV_XQ_CUH
#define AIINFRA_CUDA_K_GEMV_XQ_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/k_gemv_fuse.h"

__device__ __forceinline__ uint32_t xq_pack4(int a, int b, int c, int d)
{
    return (uint32_t)(a & 0xFF) | (uint32_t)(b & 0xFF) << 8 | (uint32_t)(c & 0xFF) << 16 | (uint32_t)d << 24;
}

/* The fused input (k_gemv_fuse.h) of 4 x values at src: x * norm_w (sq += x^2), or silu(g) * u with
 * u n_in floats after g (expf, as cuk_swiglu_rows), or x. */
template <int M>
__device__ __forceinline__ float4 xq_input4(const float *src, const float *nw, int n_in, float &sq)
{
    const float4 a = __ldg(reinterpret_cast<const float4 *>(src));
    if constexpr (M == FUSE_NORM) {
        const float4 w = __ldg(reinterpret_cast<const float4 *>(nw));
        sq = fmaf(a.x, a.x, fmaf(a.y, a.y, fmaf(a.z, a.z, fmaf(a.w, a.w, sq))));
        return make_float4(a.x * w.x, a.y * w.y, a.z * w.z, a.w * w.w);
    } else if constexpr (M == FUSE_SWIGLU) {
        const float4 u = __ldg(reinterpret_cast<const float4 *>(src + n_in));
        return make_float4(fuse_silu_mul_acc(a.x, u.x), fuse_silu_mul_acc(a.y, u.y), fuse_silu_mul_acc(a.z, u.z),
                           fuse_silu_mul_acc(a.w, u.w));
    } else {
        (void)nw; (void)n_in; (void)sq;
        return a;
    }
}

/* One block's rounding: this lane's codes packed in order (lo: va, hi: vb), and the block's d, sum(q),
 * sum(x), the same in its 4 lanes. Every lane of the warp calls it (shuffles over lanes ^ 1, ^ 2). */
struct xq_block {
    uint32_t lo, hi;
    float d, sx;
    int sq;
};
__device__ __forceinline__ xq_block xq_round8(const float4 va, const float4 vb)
{
    float amax = fmaxf(fmaxf(fmaxf(fabsf(va.x), fabsf(va.y)), fmaxf(fabsf(va.z), fabsf(va.w))),
                       fmaxf(fmaxf(fabsf(vb.x), fabsf(vb.y)), fmaxf(fabsf(vb.z), fabsf(vb.w))));
    amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 2));
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    const int q0 = __float2int_rn(va.x * id), q1 = __float2int_rn(va.y * id), q2 = __float2int_rn(va.z * id),
              q3 = __float2int_rn(va.w * id), q4 = __float2int_rn(vb.x * id), q5 = __float2int_rn(vb.y * id),
              q6 = __float2int_rn(vb.z * id), q7 = __float2int_rn(vb.w * id);
    xq_block r;
    r.lo = xq_pack4(q0, q1, q2, q3);
    r.hi = xq_pack4(q4, q5, q6, q7);
    r.d = amax / 127.0f;
    r.sq = ((q0 + q1) + (q2 + q3)) + ((q4 + q5) + (q6 + q7));
    r.sx = ((va.x + va.y) + (va.z + va.w)) + ((vb.x + vb.y) + (vb.z + vb.w));
    r.sq += __shfl_xor_sync(0xFFFFFFFFu, r.sq, 1);
    r.sq += __shfl_xor_sync(0xFFFFFFFFu, r.sq, 2);
    r.sx += __shfl_xor_sync(0xFFFFFFFFu, r.sx, 1);
    r.sx += __shfl_xor_sync(0xFFFFFFFFu, r.sx, 2);
    return r;
}

#endif
