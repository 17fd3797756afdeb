/* attn_fa2_bwd.cu - v3b: FlashAttention-2 style backward (dQ, dK, dV from Q, K, V, O, dO and the
 * forward's lse), fp32 scalar FMA on 32 x 32 tiles in shared memory.
 *
 * Why faster than v1b: no (s, s) matrix touches device memory. P is rebuilt tile by tile from the saved
 * lse (P = exp(scale q.k - lse), no second softmax pass), dS = P * (dP - D) with D_i = dO_i . O_i
 * computed once per row up front (a d-long dot instead of v1b's s-long rowsum of P * dP). FA2's split
 * of the work:
 *   pre   D (b, h, s) = rowsum(dO * O), one warp per row
 *   dkdv  one CTA per (32-key tile, b*h) walks the query tiles (causal: only those at or after its
 *         keys) and keeps dK, dV for its keys in registers: each written once, no atomics
 *   dq    one CTA per (32-query tile, b*h) walks the key tiles (causal: up to its last row) and keeps
 *         dQ in registers
 * S and dP are recomputed in both passes (FA2's trade: 2 extra matmuls instead of atomics or an
 * (s, s) buffer). Deterministic. Not yet on tensor cores (the next step, see docs/kernels/attention.md).
 *
 * Thread mapping (128 threads = 4 warps): scores: lane = query row of the tile, warp * 8 + e = key
 * (e < 8): the Q / dO element is per lane (rows padded by one float: distinct banks), the K / V
 * element a broadcast. Accumulators: warp * 8 + e = the owned row (key for dK / dV, query for dQ),
 * lane + 32 i = the owned dims.
 */
#include "kernels/attention/attn_internal.h"

#define BW_T 32 /* tile rows (queries and keys) */
#define BW_E 8  /* owned rows per warp */

template <int D> struct bw_smem {
    float a[BW_T][D + 1], b[BW_T][D + 1]; /* dkdv: Q, dO of the query tile; dq: K, V of the key tile */
    float c[BW_T][D + 1], e[BW_T][D + 1]; /* dkdv: K, V (own); dq: Q, dO (own) */
    float p[BW_T][BW_T + 1], ds[BW_T][BW_T + 1];
    float lse2[BW_T], dd[BW_T]; /* per query row of the tile: lse * log2 e, D */
};

/* Loads rows r0.. of a (s, D) bf16 matrix into a [BW_T][D + 1] float tile (zero past s). */
template <int D> static __device__ __forceinline__ void bw_load(float (*t)[D + 1], const bf16 *x, int r0, int s)
{
    for (int i = threadIdx.x; i < BW_T * D / 2; i += 128) {
        const int r = i / (D / 2), c = (i % (D / 2)) * 2;
        float2 f = make_float2(0.f, 0.f);
        if (r0 + r < s) f = __bfloat1622float2(*(const __nv_bfloat162 *)(x + (int64_t)(r0 + r) * D + c));
        t[r][c] = f.x;
        t[r][c + 1] = f.y;
    }
}

__global__ void attn_bwd_pre(const bf16 *__restrict__ O, const bf16 *__restrict__ dO, float *__restrict__ Dv,
                             int64_t rows, int d)
{
    const int64_t r = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (r >= rows) return;
    float acc = 0.f;
    for (int c = lane; c < d; c += 32) acc += __bfloat162float(O[r * d + c]) * __bfloat162float(dO[r * d + c]);
    acc = attn_warp_sum(acc);
    if (lane == 0) Dv[r] = acc;
}

/* S and dP for the tile pair: qi = lane, keys warp * 8 + e; Qt/dOt indexed by query, Kt/Vt by key.
 * Writes P and dS (masked entries 0) into sm.p / sm.ds. */
template <int D>
static __device__ __forceinline__ void bw_scores(bw_smem<D> &sm, const float (*Qt)[D + 1], const float (*dOt)[D + 1],
                                                 const float (*Kt)[D + 1], const float (*Vt)[D + 1], int q0, int k0,
                                                 int s, float scale2, int causal)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float sc[BW_E], dp[BW_E];
#pragma unroll
    for (int e = 0; e < BW_E; e++) sc[e] = dp[e] = 0.f;
    for (int c = 0; c < D; c++) {
        const float qv = Qt[lane][c], gv = dOt[lane][c];
#pragma unroll
        for (int e = 0; e < BW_E; e++) {
            sc[e] = fmaf(qv, Kt[warp * BW_E + e][c], sc[e]);
            dp[e] = fmaf(gv, Vt[warp * BW_E + e][c], dp[e]);
        }
    }
    const int qi = q0 + lane;
#pragma unroll
    for (int e = 0; e < BW_E; e++) {
        const int kj = k0 + warp * BW_E + e;
        const bool ok = qi < s && kj < s && !(causal && kj > qi);
        const float p = ok ? exp2f(sc[e] * scale2 - sm.lse2[lane]) : 0.f;
        sm.p[lane][warp * BW_E + e] = p;
        sm.ds[lane][warp * BW_E + e] = p * (dp[e] - sm.dd[lane]);
    }
}

template <int D> static __device__ __forceinline__ void bw_row_stats(bw_smem<D> &sm, const float *lse, const float *Dv, int q0, int s)
{
    if (threadIdx.x < BW_T) {
        const int r = q0 + threadIdx.x;
        sm.lse2[threadIdx.x] = r < s ? lse[r] * ATTN_LOG2E : 0.f;
        sm.dd[threadIdx.x] = r < s ? Dv[r] : 0.f;
    }
}

template <int D>
__global__ void __launch_bounds__(128) attn_bwd_dkdv(const bf16 *__restrict__ Q, const bf16 *__restrict__ K,
                                                    const bf16 *__restrict__ V, const bf16 *__restrict__ dO,
                                                    const float *__restrict__ lse, const float *__restrict__ Dv,
                                                    bf16 *__restrict__ dK, bf16 *__restrict__ dV, int s, float scale,
                                                    int causal)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bw_smem<D> &sm = *(bw_smem<D> *)smem_raw;
    constexpr int DL = D / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int k0 = blockIdx.x * BW_T;
    const int64_t base = (int64_t)blockIdx.y * s * D, rbase = (int64_t)blockIdx.y * s;
    bw_load<D>(sm.c, K + base, k0, s);
    bw_load<D>(sm.e, V + base, k0, s);
    float gk[BW_E][DL], gv[BW_E][DL];
#pragma unroll
    for (int e = 0; e < BW_E; e++)
#pragma unroll
        for (int i = 0; i < DL; i++) gk[e][i] = gv[e][i] = 0.f;
    const float scale2 = scale * ATTN_LOG2E;
    for (int q0 = causal ? k0 : 0; q0 < s; q0 += BW_T) {
        __syncthreads(); /* previous tile's readers done */
        bw_load<D>(sm.a, Q + base, q0, s);
        bw_load<D>(sm.b, dO + base, q0, s);
        bw_row_stats<D>(sm, lse + rbase, Dv + rbase, q0, s);
        __syncthreads();
        bw_scores<D>(sm, sm.a, sm.b, sm.c, sm.e, q0, k0, s, scale2, causal);
        __syncthreads();
        for (int qi = 0; qi < BW_T; qi++) {
            float qv[DL], gov[DL];
#pragma unroll
            for (int i = 0; i < DL; i++) qv[i] = sm.a[qi][lane + 32 * i], gov[i] = sm.b[qi][lane + 32 * i];
#pragma unroll
            for (int e = 0; e < BW_E; e++) {
                const float p = sm.p[qi][warp * BW_E + e], ds = sm.ds[qi][warp * BW_E + e];
#pragma unroll
                for (int i = 0; i < DL; i++) {
                    gv[e][i] = fmaf(p, gov[i], gv[e][i]);
                    gk[e][i] = fmaf(ds, qv[i], gk[e][i]);
                }
            }
        }
    }
#pragma unroll
    for (int e = 0; e < BW_E; e++) {
        const int kj = k0 + warp * BW_E + e;
        if (kj >= s) continue;
#pragma unroll
        for (int i = 0; i < DL; i++) {
            dK[base + (int64_t)kj * D + lane + 32 * i] = __float2bfloat16_rn(gk[e][i] * scale);
            dV[base + (int64_t)kj * D + lane + 32 * i] = __float2bfloat16_rn(gv[e][i]);
        }
    }
}

template <int D>
__global__ void __launch_bounds__(128) attn_bwd_dq(const bf16 *__restrict__ Q, const bf16 *__restrict__ K,
                                                  const bf16 *__restrict__ V, const bf16 *__restrict__ dO,
                                                  const float *__restrict__ lse, const float *__restrict__ Dv,
                                                  bf16 *__restrict__ dQ, int s, float scale, int causal)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bw_smem<D> &sm = *(bw_smem<D> *)smem_raw;
    constexpr int DL = D / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int q0 = blockIdx.x * BW_T;
    const int64_t base = (int64_t)blockIdx.y * s * D, rbase = (int64_t)blockIdx.y * s;
    bw_load<D>(sm.c, Q + base, q0, s);
    bw_load<D>(sm.e, dO + base, q0, s);
    bw_row_stats<D>(sm, lse + rbase, Dv + rbase, q0, s);
    float gq[BW_E][DL];
#pragma unroll
    for (int e = 0; e < BW_E; e++)
#pragma unroll
        for (int i = 0; i < DL; i++) gq[e][i] = 0.f;
    const float scale2 = scale * ATTN_LOG2E;
    const int kv_end = causal ? min(s, q0 + BW_T) : s;
    for (int k0 = 0; k0 < kv_end; k0 += BW_T) {
        __syncthreads();
        bw_load<D>(sm.a, K + base, k0, s);
        bw_load<D>(sm.b, V + base, k0, s);
        __syncthreads();
        bw_scores<D>(sm, sm.c, sm.e, sm.a, sm.b, q0, k0, s, scale2, causal);
        __syncthreads();
        for (int kj = 0; kj < BW_T; kj++) {
            float kv[DL];
#pragma unroll
            for (int i = 0; i < DL; i++) kv[i] = sm.a[kj][lane + 32 * i];
#pragma unroll
            for (int e = 0; e < BW_E; e++) {
                const float ds = sm.ds[warp * BW_E + e][kj];
#pragma unroll
                for (int i = 0; i < DL; i++) gq[e][i] = fmaf(ds, kv[i], gq[e][i]);
            }
        }
    }
#pragma unroll
    for (int e = 0; e < BW_E; e++) {
        const int qi = q0 + warp * BW_E + e;
        if (qi >= s) continue;
#pragma unroll
        for (int i = 0; i < DL; i++) dQ[base + (int64_t)qi * D + lane + 32 * i] = __float2bfloat16_rn(gq[e][i] * scale);
    }
}

size_t attn_v3b_work(const attn_args *a) { return (size_t)a->b * a->h * a->s * sizeof(float); }

template <int D> static int bwd_launch(cudaStream_t st, const attn_args *a)
{
    const size_t sm = sizeof(bw_smem<D>);
    cudaError_t e = cudaFuncSetAttribute(attn_bwd_dkdv<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(attn_bwd_dq<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    if (e != cudaSuccess) return (int)e;
    const int64_t rows = (int64_t)a->b * a->h * a->s;
    const bf16 *q = (const bf16 *)a->q, *k = (const bf16 *)a->k, *v = (const bf16 *)a->v, *g = (const bf16 *)a->dout;
    float *Dv = (float *)a->work;
    attn_bwd_pre<<<(unsigned)attn_cdiv(rows, 8), 256, 0, st>>>((const bf16 *)a->o, g, Dv, rows, D);
    dim3 grid((unsigned)attn_cdiv(a->s, BW_T), (unsigned)(a->b * a->h));
    attn_bwd_dkdv<D><<<grid, 128, sm, st>>>(q, k, v, g, a->lse, Dv, (bf16 *)a->dk, (bf16 *)a->dv, a->s, a->scale,
                                            a->causal);
    attn_bwd_dq<D><<<grid, 128, sm, st>>>(q, k, v, g, a->lse, Dv, (bf16 *)a->dq, a->s, a->scale, a->causal);
    return (int)cudaGetLastError();
}

int attn_v3b_run(void *stream, const attn_args *a)
{
    if (!attn_args_ok(a, 1, attn_v3b_work)) return (int)cudaErrorInvalidValue;
    return a->d == 64 ? bwd_launch<64>((cudaStream_t)stream, a) : bwd_launch<128>((cudaStream_t)stream, a);
}
