/* k_gemv_mma.cu - bf16 GEMV for several tokens on the tensor cores (mma.sync m16n8k16, fp32 accumulate).
 *
 * Why: with n_tok = 8..16 the CUDA-core GEMV needs 8..16 fp32 FMAs per weight value; at ~9 bf16
 * values per SM per clock (4.8 TB/s) that is 72..144 FMA/clock against 128 available, plus the x
 * traffic, so it cannot stay at the bandwidth roofline. The tensor cores do the products for free.
 *
 * Mapping (one mma: M = 16 tokens, N = 8 weight rows, K = 16):
 *  - lane (g = lane / 4, q = lane % 4) loads 16 bytes (8 bf16) of weight row g of the row group at
 *    columns c0 + 8q .. c0 + 8q + 7, c0 = 32 * tile. A dot product does not care in which order its
 *    k terms come, so we let the MMA's k slots {2q, 2q+1, 2q+8, 2q+9} stand for those columns:
 *    step 1 takes columns +0,+1 (slots 2q, 2q+1) and +2,+3 (slots 2q+8, 2q+9), step 2 takes +4..+7.
 *    The B fragment (k x n, col-major) is then the raw words of the load: {w.x, w.y}, {w.z, w.w}.
 *  - The A fragment (tokens x k) uses the same slot -> column map: lane (g, q) reads x rows g and
 *    g + 8 at the same 8 columns (two float4 each), zero past n_tok.
 *  - x is f32; bf16 would cost ~2^-9 per product. It is split x = hi + lo with hi = bf16(x),
 *    lo = bf16(x - hi) (~16 significant bits together, error ~2^-17), and each step runs two MMAs
 *    (hi, lo) into one fp32 accumulator: twice the tensor work, still far below its rate.
 *  - Block: 8 warps x RG row groups (8 * RG rows, RG by n_out below); warp w takes tiles w, w + 8, ... of 32 columns,
 *    each lane keeping U x RG 16-byte loads in flight. Partial accumulators (16 tokens x 8 RG rows
 *    per warp) meet in shared memory and thread (t, row) writes y[t][row] for t < n_tok.
 *  - Needs n_in % 32 == 0 and 16-byte aligned weights and x (the dispatcher checks).
 *
 * Split-K over a thread-block cluster (template S > 1; cuk_gemv_bf16_mma_split): every CTA reads all
 * of the x columns it covers from L2, n_tok * 4 bytes per column against 8 RG * 2 weight bytes, so x
 * traffic is 2 n_tok / (8 RG) weight bytes per weight byte: 1.0 at n_tok 8 with RG 2, i.e. the
 * SMs pull twice the weight bytes through L2. More rows per CTA (RG 8: 0.25) would leave too few
 * CTAs (n_out 4096 / 64 = 64 for 132 SMs), so the S CTAs of a cluster share one row block and each
 * takes 1/S of the columns: S * n_out / (8 RG) CTAs again, and x read once per row block. Their
 * partial sums (16 tokens x 8 RG rows each) are added through distributed shared memory, in rank
 * order, by the CTA that owns each output; FUSE_NORM's sum(x^2) is summed across the cluster too.
 *
 * Fused variants (template M, cuk_mm_opts; k_gemv_fuse.h says why): the rmsnorm or SwiGLU of the
 * input is computed while x is loaded and the residual add is done by the thread that writes y.
 *
 * Every kernel waits with cuk_pdl_wait() before touching memory and is launched by cuk_launch (PDL).
 *
 * Invariants: reads rows [0, n_out) (the last group re-reads row n_out - 1 for missing rows, never
 * written), x rows [0, n_tok); writes exactly y[0..n_tok)[0..n_out). Deterministic (no atomics).
 */
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cstdlib>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuk_launch.h"
#include "backend/cuda/cuk_mma.cuh"
#include "backend/cuda/k_gemv.h"
#include "backend/cuda/k_gemv_fuse.h"

namespace cg = cooperative_groups;

namespace {

constexpr int kWarps = 8;

/* Weights are streamed once: no L1 allocation, L2 256-byte prefetch hint. Here this beat
 * evict-first (__ldcs, k_gemv.cu's pick) by 5-13% at n_tok 8 (H200 runs of 2026-12-02). */
__device__ __forceinline__ uint4 ld_stream(const uint4 *p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

/* hi/lo bf16 pairs of (a, b): a = hi.x + lo.x to ~16 bits. */
__device__ __forceinline__ void split2(float a, float b, uint32_t &hi, uint32_t &lo)
{
    hi = cuk_pack_bf16(a, b);
    const float ha = __uint_as_float(hi << 16), hb = __uint_as_float(hi & 0xFFFF0000u);
    lo = cuk_pack_bf16(a - ha, b - hb);
}

/* A fragment (a0..a3) of rows g / g + 8 built from the x fragments, times the w tile's b0, b1. */
__device__ __forceinline__ void mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                    uint32_t b1)
{
    const uint32_t a[4] = { a0, a1, a2, a3 };
    cuk_mma_bf16(c, a, b0, b1);
}

/* x fragment of one lane for one tile: 8 columns of token rows g (a*) and g + 8 (b*), hi and lo. */
struct xfrag {
    uint32_t ah[4], al[4], bh[4], bl[4];
};

/* x in mode M (k_gemv_fuse.h): ssa, ssb collect sum(x^2) of rows g, g + 8 (FUSE_NORM). */
template <bool HI16, int M>
__device__ __forceinline__ void load_x(xfrag &f, const float *xa, const float *xb, bool va, bool vb, int col,
                                       const cuk_fuse &fz, int n_in, float &ssa, float &ssb)
{
    float4 a0 = make_float4(0, 0, 0, 0), a1 = a0, b0 = a0, b1 = a0;
    const float4 n0 = fuse_nw4<M>(fz, col), n1 = fuse_nw4<M>(fz, col + 4);
    if (va) {
        a0 = fuse_x4<M>(xa, n_in, col, n0, ssa);
        a1 = fuse_x4<M>(xa, n_in, col + 4, n1, ssa);
    }
    split2(a0.x, a0.y, f.ah[0], f.al[0]);
    split2(a0.z, a0.w, f.ah[1], f.al[1]);
    split2(a1.x, a1.y, f.ah[2], f.al[2]);
    split2(a1.z, a1.w, f.ah[3], f.al[3]);
    if constexpr (HI16) {
        if (vb) {
            b0 = fuse_x4<M>(xb, n_in, col, n0, ssb);
            b1 = fuse_x4<M>(xb, n_in, col + 4, n1, ssb);
        }
        split2(b0.x, b0.y, f.bh[0], f.bl[0]);
        split2(b0.z, b0.w, f.bh[1], f.bl[1]);
        split2(b1.x, b1.y, f.bh[2], f.bl[2]);
        split2(b1.z, b1.w, f.bh[3], f.bl[3]);
    } else {
        (void)xb; (void)vb; (void)ssb;
#pragma unroll
        for (int i = 0; i < 4; i++) f.bh[i] = f.bl[i] = 0u;
    }
}

/* c += x_tile (16 tokens x 32 cols) . w_tile (8 rows x 32 cols)^T, hi and lo parts. */
__device__ __forceinline__ void tile_mma(float (&c)[4], const xfrag &f, const uint4 &w)
{
    mma(c, f.ah[0], f.bh[0], f.ah[1], f.bh[1], w.x, w.y);
    mma(c, f.al[0], f.bl[0], f.al[1], f.bl[1], w.x, w.y);
    mma(c, f.ah[2], f.bh[2], f.ah[3], f.bh[3], w.z, w.w);
    mma(c, f.al[2], f.bl[2], f.al[3], f.bl[3], w.z, w.w);
}

/* HI16: n_tok > 8 (tokens 8..15 present). S > 1: split-K over a cluster of S CTAs (see the header). */
template <int RG, int U, bool HI16, int M, int S>
__global__ void __launch_bounds__(kWarps * 32) k_gemv_mma(const __nv_bfloat16 *__restrict__ w,
                                                          const float *__restrict__ x, float *__restrict__ y,
                                                          int n_out, int n_in, int n_tok, cuk_fuse fz)
{
    cuk_pdl_wait();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    const int row0 = (blockIdx.x / S) * 8 * RG;
    /* tiles [tb, te) of 32 columns: all of them, or this CTA's slice of the cluster's */
    const int per = (n_in / 32 + S - 1) / S;
    const int tb = S > 1 ? (int)cg::this_cluster().block_rank() * per : 0;
    const int te = min(n_in / 32, tb + per);
    const uint4 *wr[RG];
#pragma unroll
    for (int j = 0; j < RG; j++) {
        const int r = min(row0 + 8 * j + g, n_out - 1);
        wr[j] = reinterpret_cast<const uint4 *>(w + (size_t)r * n_in) + q; /* + 4 uint4 per tile */
    }
    const bool va = g < n_tok, vb = g + 8 < n_tok;
    const size_t xs = fuse_x_stride<M>(n_in);
    const float *xa = x + (size_t)min(g, n_tok - 1) * xs + 8 * q;
    const float *xb = x + (size_t)min(g + 8, n_tok - 1) * xs + 8 * q;
    const float *nwq = fz.nw + 8 * q; /* the norm weight at this lane's columns (FUSE_NORM) */
    const cuk_fuse fq{M == FUSE_NORM ? nwq : nullptr, fz.eps, fz.acc};
    float ssa = 0.0f, ssb = 0.0f; /* FUSE_NORM: sum(x^2) of token rows g, g + 8 over this lane's columns */
    __shared__ float rs[16];      /* the split norm's 1 / rms per token (read after the __syncthreads below) */
    fuse_rs_table<16>(fz, n_tok, n_in, rs);

    float c[RG][4] = {};
    for (int t0 = tb + warp; t0 < te; t0 += kWarps * U) {
        uint4 wv[U][RG];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int t = t0 + u * kWarps;
#pragma unroll
            for (int j = 0; j < RG; j++) wv[u][j] = t < te ? ld_stream(wr[j] + 4 * t) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int t = t0 + u * kWarps;
            if (t < te) {
                xfrag f;
                load_x<HI16, M>(f, xa, xb, va, vb, 32 * t, fq, n_in, ssa, ssb);
#pragma unroll
                for (int j = 0; j < RG; j++) tile_mma(c[j], f, wv[u][j]);
            }
        }
    }

    /* c[j]: {(token g, row 2q), (g, 2q + 1), (g + 8, 2q), (g + 8, 2q + 1)} of row group j */
    __shared__ float red[kWarps][16][8 * RG];
    __shared__ float ssr[kWarps][16]; /* FUSE_NORM: per warp, sum(x^2) of each token row */
    if constexpr (M == FUSE_NORM) {
        ssa += __shfl_xor_sync(0xFFFFFFFFu, ssa, 1);
        ssa += __shfl_xor_sync(0xFFFFFFFFu, ssa, 2);
        ssb += __shfl_xor_sync(0xFFFFFFFFu, ssb, 1);
        ssb += __shfl_xor_sync(0xFFFFFFFFu, ssb, 2);
        if (q == 0) {
            ssr[warp][g] = ssa;
            ssr[warp][g + 8] = ssb;
        }
    }
#pragma unroll
    for (int j = 0; j < RG; j++) {
        red[warp][g][8 * j + 2 * q] = c[j][0];
        red[warp][g][8 * j + 2 * q + 1] = c[j][1];
        red[warp][g + 8][8 * j + 2 * q] = c[j][2];
        red[warp][g + 8][8 * j + 2 * q + 1] = c[j][3];
    }
    __syncthreads();
    constexpr int E = 16 * 8 * RG; /* (token, row) outputs of the block */
    __shared__ float ssp[16];      /* S > 1, FUSE_NORM: this CTA's sum(x^2) of each token row */
    for (int i = threadIdx.x; i < E; i += kWarps * 32) {
        const int t = i / (8 * RG), r = i % (8 * RG);
        float v = 0.0f, sq = 0.0f;
#pragma unroll
        for (int k = 0; k < kWarps; k++) v += red[k][t][r];
        if constexpr (M == FUSE_NORM) {
#pragma unroll
            for (int k = 0; k < kWarps; k++) sq += ssr[k][t];
        }
        if constexpr (S == 1) {
            double q = 0.0;
            if (t < n_tok && row0 + r < n_out) {
                v = fuse_store<M, false>(fz, y, n_out, t, row0 + r, v, sq, n_in, rs[t]);
                q = (double)v * (double)v;
            }
            if (fz.out_xn) ss_group_flush<(8 * RG < 32 ? 8 * RG : 32)>(fz, q, t, n_tok); /* a token's 8 RG rows */
        } else {
            red[0][t][r] = v; /* read only by this thread above */
            if (r == 0) ssp[t] = sq;
        }
    }
    if constexpr (S > 1) {
        /* Partials of the S CTAs meet through distributed shared memory: output i is finished by
         * CTA i % S, which adds the S partials in rank order (deterministic). */
        cg::cluster_group cl = cg::this_cluster();
        cl.sync(); /* every CTA's partials written and visible cluster-wide */
        const int rank = (int)cl.block_rank();
        static_assert(E / S % 32 == 0 && 8 * RG % (16 * S) == 0, "whole warps; 16 lanes per token");
        for (int j = threadIdx.x; j < E / S; j += kWarps * 32) {
            const int i = j * S + rank, t = i / (8 * RG), r = i % (8 * RG); /* t = j / (8 RG / S) */
            double q = 0.0;
            if (t < n_tok && row0 + r < n_out) {
                float v = 0.0f, sq = 0.0f;
#pragma unroll
                for (int k = 0; k < S; k++) {
                    v += *cl.map_shared_rank(&red[0][t][r], k);
                    if constexpr (M == FUSE_NORM) sq += *cl.map_shared_rank(&ssp[t], k);
                }
                v = fuse_store<M, false>(fz, y, n_out, t, row0 + r, v, sq, n_in, rs[t]);
                q = (double)v * (double)v;
            }
            if (fz.out_xn) ss_group_flush<16>(fz, q, t, n_tok);
        }
        cl.sync(); /* no CTA exits while another still reads its shared memory */
    }
}

template <int RG, int U, int S, int M>
void launch_m(cudaStream_t cs, const cuk_weight *w, const float *x, int32_t n_tok, float *y, cuk_fuse f)
{
    const unsigned blocks = (unsigned)((w->n_out + 8 * RG - 1) / (8 * RG)) * S;
    const __nv_bfloat16 *wd = static_cast<const __nv_bfloat16 *>(w->data);
    if (n_tok > 8)
        cuk_launch_cluster(k_gemv_mma<RG, U, true, M, S>, dim3(blocks), dim3(kWarps * 32), 0, cs, S, wd, x, y,
                           (int)w->n_out, (int)w->n_in, n_tok, f);
    else
        cuk_launch_cluster(k_gemv_mma<RG, U, false, M, S>, dim3(blocks), dim3(kWarps * 32), 0, cs, S, wd, x, y,
                           (int)w->n_out, (int)w->n_in, n_tok, f);
}

template <int RG, int U, int S = 1>
void launch(cudaStream_t cs, const cuk_weight *w, const float *x, int32_t n_tok, float *y, int m, cuk_fuse f)
{
    if (m == FUSE_NORM) launch_m<RG, U, S, FUSE_NORM>(cs, w, x, n_tok, y, f);
    else if (m == FUSE_SWIGLU) launch_m<RG, U, S, FUSE_SWIGLU>(cs, w, x, n_tok, y, f);
    else launch_m<RG, U, S, FUSE_NONE>(cs, w, x, n_tok, y, f);
}

} // namespace

/* Rows per block (8 RG): each block reads all of x (n_tok x n_in f32) through L1/L2, so x traffic
 * per weight byte is 2 n_tok / (8 RG); more rows per block cut it, as long as there are still
 * >= ~2 blocks per SM (n_out 4096: RG 2 -> 256 blocks; 1024: RG 1 -> 128). Measured: RG 4 pays
 * only at n_tok > 8 (gate/up 2.26 -> 2.43 TB/s at 16; at 8 and below RG 2 was faster). */
extern "C" ai_status cuk_gemv_bf16_mma_split(cuk_stream s, const cuk_weight *w, const float *x, int32_t n_tok,
                                             float *y, const cuk_mm_opts *o, int split, ai_err *err)
{
    if (!w || w->type != DTYPE_BF16 || !w->data || !x || !y || n_tok < 1 || n_tok > 16 || w->n_out < 1 ||
        w->n_in < 32 || w->n_in % 32 || w->n_out > (1 << 30) || w->n_in > (1 << 30) || (uintptr_t)w->data % 16 ||
        (uintptr_t)x % 16 || (o && o->norm_w && (o->swiglu_in || (uintptr_t)o->norm_w % 16)))
        return ai_err_set(err, AI_ERR_INVALID, "cuk_gemv_bf16_mma: bad arguments");
    if (split < 0 || split >= CUK_GEMV_MMA_SPLITS) return ai_err_set(err, AI_ERR_INVALID, "cuk_gemv_bf16_mma: bad split %d", split);
    cudaStream_t cs = (cudaStream_t)s;
    const int m = cuk_fuse_mode(o);
    const cuk_fuse f = cuk_fuse_of(o);
    if (split == 1) launch<4, 2, 2>(cs, w, x, n_tok, y, m, f);
    else if (split == 2) launch<8, 1, 4>(cs, w, x, n_tok, y, m, f);
    else if (w->n_out >= 8192 && n_tok > 8) launch<4, 2>(cs, w, x, n_tok, y, m, f);
    else if (w->n_out >= 2048) launch<2, 4>(cs, w, x, n_tok, y, m, f);
    else launch<1, 8>(cs, w, x, n_tok, y, m, f);
    CUK_LAUNCHED(err, "cuk_gemv_bf16_mma");
    return AI_OK;
}

/* The split for this call where none is forced. Measured (H200, 2026-12-06): `bench_cuda_gemv 20 split`,
 * TB/s of weights, split 0 -> 2, with the step's fused prologues: at 16 tokens q|k|v 1.40 -> 1.99, wo
 * 1.64 -> 1.70, gate|up 2.28 -> 2.41, down 1.24 -> 2.05, LM head 2.78 -> 2.89; the Llama-3-8B step at
 * batch 16 x 1k 7.866 -> 7.648 ms. At 5-8 tokens the kernel bench has split 1 ahead on q|k|v and
 * gate|up (2.52 -> 2.72, 2.95 -> 3.20) and split 2 on down (1.96 -> 2.51), but the whole step at
 * batch 8 was slower with either everywhere (5.956 ms unsplit, 6.027 split 1, 6.317 split 2): it stays
 * unsplit until a per-shape choice is measured in the step. */
extern "C" int cuk_gemv_mma_split_pick(int32_t n_tok) { return n_tok > 8 ? 2 : 0; }

extern "C" ai_status cuk_gemv_bf16_mma(cuk_stream s, const cuk_weight *w, const float *x, int32_t n_tok, float *y,
                                       const cuk_mm_opts *o, ai_err *err)
{
    const char *e = std::getenv("AIINFRA_GEMV_MMA_SPLIT");
    int split = e && *e ? (e[0] >= '0' && e[0] <= '9' ? std::atoi(e) : -1) : CUK_GEMV_MMA_SPLIT_DEFAULT;
    if (split < 0 || split >= CUK_GEMV_MMA_SPLITS) split = cuk_gemv_mma_split_pick(n_tok);
    return cuk_gemv_bf16_mma_split(s, w, x, n_tok, y, o, split, err);
}
