/* attn_fa1.cu - v2: FlashAttention-1 style forward. Tiled, online softmax, K/V tiles staged in shared
 * memory, fp32 scalar FMA (no tensor cores): the step that is about IO, not about math.
 *
 * Why faster than v1: S never reaches device memory. A CTA owns 32 query rows of one (b, h); it walks
 * the keys in tiles of 32, each K/V tile loaded once from HBM into shared memory and used by all 32
 * rows. Per row a running max m and sum l rescale the output accumulator when the max grows (online
 * softmax), so one pass over the keys suffices. Traffic falls from O(s^2) (S written and read twice)
 * to Q + O once and K + V once per 32-row tile; causal CTAs stop at their last row's key tile.
 * Still slow: every score is a scalar dot product from shared memory (about 2 shared loads per FMA).
 *
 * CTA: 128 threads = 4 warps x 8 query rows. Scores: lane j of a warp computes key j of the tile for
 * the warp's 8 rows at once (K rows padded by one float: lanes hit distinct banks; the Q element is
 * a broadcast). P V: p_j is broadcast with a shuffle, lane owns output dims lane + 32 i.
 * Invariant: key 0 is in the first tile and visible to every row, so m is finite after it.
 */
#include "kernels/attention/attn_internal.h"

#define FA1_BQ 32
#define FA1_BK 32
#define FA1_RW 8 /* rows per warp */

template <int D> struct fa1_smem {
    float q[FA1_BQ][D];
    float k[FA1_BK][D + 1];
    float v[FA1_BK][D];
};

template <int D>
__global__ void __launch_bounds__(128) attn_fa1_fwd(const bf16 *__restrict__ Q, const bf16 *__restrict__ K,
                                                   const bf16 *__restrict__ V, bf16 *__restrict__ O,
                                                   float *__restrict__ lse, int s, float scale2, int causal)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    fa1_smem<D> &sm = *(fa1_smem<D> *)smem_raw;
    constexpr int DL = D / 32; /* output dims per lane */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int q0 = blockIdx.x * FA1_BQ;
    const int64_t base = (int64_t)blockIdx.y * s * D;
    const bf16 *q = Q + base, *k = K + base, *v = V + base;

    for (int i = tid; i < FA1_BQ * D; i += 128) {
        const int r = i / D, c = i % D;
        sm.q[r][c] = q0 + r < s ? __bfloat162float(q[(int64_t)(q0 + r) * D + c]) * scale2 : 0.0f;
    }
    float o[FA1_RW][DL], m[FA1_RW], l[FA1_RW];
#pragma unroll
    for (int r = 0; r < FA1_RW; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int i = 0; i < DL; i++) o[r][i] = 0.0f;
    }
    const int kv_end = causal ? min(s, q0 + FA1_BQ) : s;
    for (int k0 = 0; k0 < kv_end; k0 += FA1_BK) {
        __syncthreads(); /* previous tile consumed (and, first time, Q written) */
        for (int i = tid; i < FA1_BK * D; i += 128) {
            const int r = i / D, c = i % D;
            const bool ok = k0 + r < s;
            sm.k[r][c] = ok ? __bfloat162float(k[(int64_t)(k0 + r) * D + c]) : 0.0f;
            sm.v[r][c] = ok ? __bfloat162float(v[(int64_t)(k0 + r) * D + c]) : 0.0f;
        }
        __syncthreads();
        float sc[FA1_RW];
#pragma unroll
        for (int r = 0; r < FA1_RW; r++) sc[r] = 0.0f;
        for (int c = 0; c < D; c++) {
            const float kv = sm.k[lane][c];
#pragma unroll
            for (int r = 0; r < FA1_RW; r++) sc[r] = fmaf(sm.q[warp * FA1_RW + r][c], kv, sc[r]);
        }
        const int key = k0 + lane;
        float p[FA1_RW];
#pragma unroll
        for (int r = 0; r < FA1_RW; r++) {
            const int row = q0 + warp * FA1_RW + r;
            if (key >= s || (causal && key > row)) sc[r] = -INFINITY;
            const float mn = fmaxf(m[r], attn_warp_max(sc[r]));
            const float ms = mn == -INFINITY ? 0.0f : mn; /* a row past s with every key masked */
            const float corr = exp2f(m[r] - ms);
            p[r] = exp2f(sc[r] - ms);
            l[r] = l[r] * corr + attn_warp_sum(p[r]);
            m[r] = mn;
#pragma unroll
            for (int i = 0; i < DL; i++) o[r][i] *= corr;
        }
        for (int j = 0; j < FA1_BK; j++) {
            float vv[DL];
#pragma unroll
            for (int i = 0; i < DL; i++) vv[i] = sm.v[j][lane + 32 * i];
#pragma unroll
            for (int r = 0; r < FA1_RW; r++) {
                const float pj = __shfl_sync(0xffffffffu, p[r], j);
#pragma unroll
                for (int i = 0; i < DL; i++) o[r][i] = fmaf(pj, vv[i], o[r][i]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < FA1_RW; r++) {
        const int row = q0 + warp * FA1_RW + r;
        if (row >= s) continue;
        const float inv = 1.0f / l[r];
#pragma unroll
        for (int i = 0; i < DL; i++) O[base + (int64_t)row * D + lane + 32 * i] = __float2bfloat16_rn(o[r][i] * inv);
        if (lane == 0 && lse) lse[(int64_t)blockIdx.y * s + row] = (m[r] + log2f(l[r])) * ATTN_LN2;
    }
}

template <int D> static int fa1_launch(cudaStream_t st, const attn_args *a)
{
    const size_t sm = sizeof(fa1_smem<D>);
    cudaError_t e = cudaFuncSetAttribute(attn_fa1_fwd<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    if (e != cudaSuccess) return (int)e;
    dim3 grid((unsigned)attn_cdiv(a->s, FA1_BQ), (unsigned)(a->b * a->h));
    attn_fa1_fwd<D><<<grid, 128, sm, st>>>((const bf16 *)a->q, (const bf16 *)a->k, (const bf16 *)a->v, (bf16 *)a->o,
                                            a->lse, a->s, a->scale * ATTN_LOG2E, a->causal);
    return (int)cudaGetLastError();
}

int attn_v2_run(void *stream, const attn_args *a)
{
    if (!attn_args_ok(a, 0, NULL)) return (int)cudaErrorInvalidValue;
    return a->d == 64 ? fa1_launch<64>((cudaStream_t)stream, a) : fa1_launch<128>((cudaStream_t)stream, a);
}
