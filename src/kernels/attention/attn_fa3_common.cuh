/* attn_fa3_common.cuh - the per-thread softmax pieces of the Hopper (wgmma) attention forward, shared by
 * the ladder's v4..v4g (attn_fa3.cu, bf16) and the CUDA backend's paged prefill
 * (src/backend/cuda/k_attn_prefill_hopper.cu, f16): one definition each, no second copy.
 *
 * Layout they assume: a warpgroup's 64 x BN score tile as a wgmma accumulator, 16 rows per warp;
 * thread (warp w, lane l) holds rows r0 = 16 w + l / 4 and r0 + 8, keys 8 j + 2 (l % 4) + {0, 1} in
 * s[4j..4j+3] (s[4j], s[4j+1]: row r0; s[4j+2], s[4j+3]: row r0 + 8). Scores are in the log2 domain
 * after the caller's scale2 = scale * log2 e.
 */
#ifndef AIINFRA_KERNELS_ATTN_FA3_COMMON_CUH
#define AIINFRA_KERNELS_ATTN_FA3_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#define FA3_LOG2E 1.4426950408889634f
#define FA3_LAZY_TH 8.0f /* log2 units: P stays <= 2^8, l <= 2^8 s: no fp32 range issue */
#define FA3_LN2 0.6931471805599453f

/* Pins register values at this point of the instruction stream: reads of wgmma results cannot move
 * above the wgmma_wait before it, and registers an in-flight wgmma still reads stay allocated. */
template <int N> static __device__ __forceinline__ void fa3_pin(float *x)
{
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(x[i])::"memory");
}
template <int N> static __device__ __forceinline__ void fa3_pin(uint32_t *x)
{
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+r"(x[i])::"memory");
}

/* 2^x, MUFU.EX2 alone: exp2f without -ftz adds a denormal range fix-up (compare, 2 multiplies) to
 * every call, and the softmax makes 64 calls per thread per tile; P below 2^-126 flushing to 0 is
 * harmless (it is rounded to 16 bits for P V anyway). */
static __device__ __forceinline__ float fa3_ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* Two floats -> one register of two bf16 (F16 = false) or f16 (F16 = true), lo in the low half. */
template <bool F16> static __device__ __forceinline__ uint32_t fa3_pack(float lo, float hi)
{
    if constexpr (F16) {
        __half2 h = __floats2half2_rn(lo, hi);
        return *(uint32_t *)&h;
    } else {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        return *(uint32_t *)&h;
    }
}

/* Online softmax of one 64 x BN score tile held as a wgmma accumulator (layout above), in place:
 * masks keys >= s_len and (causal) keys > row, where grow0 is this thread's first row's position
 * (its second row is grow0 + 8), updates the running max m (log2 domain: scale2 = scale log2 e folded
 * into one FFMA per score) and the thread-partial sums l, leaves P (fp32) in s and returns the O
 * rescale factors c. It writes only s (the S accumulators, whose wgmma is done) and scalars: writing
 * the P V wgmma's A registers while that wgmma is in flight makes ptxas serialise the wgmmas (C7513),
 * so the 16-bit packing (fa3_pack_p) comes after its wait. lazy (v4e): a row keeps its max until a
 * tile's exceeds it by FA3_LAZY_TH, so c = 1 and O needs no rescale. */
template <int BN>
static __device__ __forceinline__ void fa3_softmax(float *s, float *m, float *l, float *c, float scale2, int kbase,
                                                   int grow0, int s_len, int causal, bool need_mask, bool lazy)
{
    const int q = threadIdx.x & 3;
    if (need_mask) {
#pragma unroll
        for (int j = 0; j < BN / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = kbase + 8 * j + 2 * q + (e & 1), row = grow0 + (e < 2 ? 0 : 8);
                if (key >= s_len || (causal && key > row)) s[4 * j + e] = -INFINITY;
            }
    }
    float mx[2] = { -INFINITY, -INFINITY };
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
        mx[0] = fmaxf(mx[0], fmaxf(s[4 * j], s[4 * j + 1]));
        mx[1] = fmaxf(mx[1], fmaxf(s[4 * j + 2], s[4 * j + 3]));
    }
    float ms[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        mx[r] = fmaxf(m[r], mx[r] * scale2); /* scale2 > 0: the max commutes with the scaling */
        /* lazy: a max that grew by <= FA3_LAZY_TH is not taken (P <= 2^TH, exact by the final O / l
         * and lse = m + log2 l whatever m is), so c = 1 and O needs no rescale; m = -inf compares
         * NaN or inf, never <= TH. The 4 threads of a row hold the same m and mx: same choice. */
        if (lazy && mx[r] - m[r] <= FA3_LAZY_TH) {
            ms[r] = m[r];
            c[r] = 1.f;
            continue;
        }
        ms[r] = mx[r] == -INFINITY ? 0.f : mx[r]; /* nothing visible yet: exp2(-inf) = 0 below */
        c[r] = fa3_ex2(m[r] - ms[r]);
        m[r] = mx[r];
        l[r] *= c[r];
    }
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
#pragma unroll
        for (int e = 0; e < 4; e++) s[4 * j + e] = fa3_ex2(fmaf(s[4 * j + e], scale2, -ms[e >> 1]));
        l[0] += s[4 * j] + s[4 * j + 1];
        l[1] += s[4 * j + 2] + s[4 * j + 3];
    }
}

/* P (fp32, in the S accumulator layout) -> 16-bit A fragments of the P V wgmma: keys 16 kk + 2q (+8
 * for the odd 8-key block j) give a0 / a1 (rows r0 / r0 + 8), a2 / a3 for the upper 8 keys. */
template <int BN, bool F16 = false> static __device__ __forceinline__ void fa3_pack_p(const float *s, uint32_t (*p)[4])
{
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
        p[j >> 1][(j & 1) * 2] = fa3_pack<F16>(s[4 * j], s[4 * j + 1]);
        p[j >> 1][(j & 1) * 2 + 1] = fa3_pack<F16>(s[4 * j + 2], s[4 * j + 3]);
    }
}

/* O *= c per row (c[0]: row r0, c[1]: row r0 + 8) over an accumulator of N floats per thread; with
 * lazy, a warp whose 16 rows all kept their max skips the multiplies (a warp vote: no divergence). */
template <int N> static __device__ __forceinline__ void fa3_rescale_o(float *o, const float *c, bool lazy)
{
    if (!lazy || __any_sync(0xffffffffu, c[0] != 1.f || c[1] != 1.f)) {
#pragma unroll
        for (int i = 0; i < N / 4; i++) {
            o[4 * i] *= c[0];
            o[4 * i + 1] *= c[0];
            o[4 * i + 2] *= c[1];
            o[4 * i + 3] *= c[1];
        }
    }
}

#endif
