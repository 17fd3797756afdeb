/* k_gemv_qmma.cu - decode GEMV for q4_0 / q4_1 / q8_0 weights at 2-16 tokens on the int8 tensor cores.
 *
 * Why: the dp4a kernel (k_gemv_dp4a.cu) reads, for every 16 weight bytes and every token, 48 bytes of
 * rounded x and its block scales from shared memory. At 8 tokens that is 24x the weight bytes, so the
 * shared-memory pipe, not HBM, sets its speed: Llama-3-8B q4_0 at 8 x 1k context ran at 0.36 of the
 * bandwidth bound on the H100, and 16 tokens took longer per step than bf16 weights do. One mma.sync
 * m16n8k32 does 16 rows x 8 tokens x 32 products of one block: the tensor core reads each weight byte
 * once from registers and each x byte once per 16 rows.
 *
 * Design:
 *  - x is rounded to int8 per 32-block once per call by cuk_gemv_dp4a_quantize (its layout: per token
 *    n_in / 32 float4 {d, s, sum x, sum x^2}, then the int8 values; q4: elements 0..15 of block b at
 *    [16 b], 16..31 at [n_in / 2 + 16 b]). The integer dot product of a block is then the dp4a
 *    kernel's, and so is the float scaling below: the two kernels differ only in the order in which
 *    the blocks' terms are added.
 *  - One mma: A = 16 weight rows x one block (q4: the nibbles 0..15 as u8, the -8 folded into s = -8 d
 *    sum(q) as the dp4a kernel does; q8_0: s8), B = that block of x for 8 tokens (s8), D = the 16 x 8
 *    integer dot products. Per D element: q4_0 acc += d_w (d_x dot + s); q4_1 the same plus (m + 8 d_w)
 *    sum(x); q8_0 acc += d_w d_x dot. The mma's accumulator input is 0x4B400000 (1.5 x 2^23 as a float),
 *    so D read as a float is 1.5 x 2^23 + dot exactly (|dot| < 2^22) and one float subtract gives dot:
 *    no int-to-float conversion (a quarter-rate unit).
 *  - Persistent CTAs of NW warps (one per SM). Warp w owns blocks [w KB, (w + 1) KB) of every row
 *    (KB = n_in / 32 / NW) and keeps the B fragments of its blocks for the 8 tokens in registers for the
 *    whole call, so x is read from L2 once per CTA. The CTA walks tiles of 16 rows; each warp streams
 *    its part of a tile (16 rows x KB blocks) through its own ring of shared-memory stages (4; 3 at NT 2) of 16
 *    rows x 128 bytes (cp.async; the 16-byte chunk k of row r is stored at k ^ (r % 8), so the 8 rows an
 *    ldmatrix phase reads fall in distinct banks) plus the rows' block scales. No CTA barrier in the
 *    stream: a warp waits only for its own copies (cp.async.wait_group + __syncwarp).
 *  - A fragments by ldmatrix.x4: lane (g, q) (g = lane / 4, q = lane % 4) receives word q of rows g and
 *    g + 8 of a block. For q4 that word holds elements 4q..4q+3 (low nibbles) and 16+4q.. (high
 *    nibbles): exactly the mma's k slots 4q.. (a0, a1) and 16+4q.. (a2, a3), so a mask and a shift make
 *    the fragment, and one ldmatrix.x4 serves two blocks. q8_0's 32-byte block is two 16-byte halves:
 *    one ldmatrix.x4 per block, no unpacking.
 *  - The warps' partial 16-row tiles meet in shared memory (two buffers, one CTA barrier per tile); one
 *    thread per (row, token) adds them in warp order and runs the fused epilogue of k_gemv_fuse.h (1 / rms of the norm
 *    or the split norm, residual add, the split norm's outputs), as the dp4a kernel does.
 *  - 9-16 tokens: one pass with two mmas per A fragment (NT = 2: 4 registers of x per block) where the
 *    x registers and shared memory allow it (16 warps of at most 16 blocks: n_in <= 8192), else passes
 *    of 8, each streaming W again.
 *  - The first stages of weights are copied before cuk_pdl_wait (AIINFRA_QMMA_EARLY=0: after it): weights
 *    are not written during a step, and the copies land in shared memory that no thread reads before the
 *    wait; x and y are touched only after it.
 *
 * Measured (H100, Llama-3-8B model step, against dp4a in the same run; docs/gpu.md): q4_0 8 x 1k context
 * 1.43x (0.51 of the bandwidth bound), 16 x 1k 1.64x, q4_1 and q8_0 at 8 x 1k 1.33x and 1.35x.
 *
 * Invariants:
 *  1. A launch reads W rows [0, n_out) (the last tile re-reads row n_out - 1), xq rows [0, n_tok), and
 *     writes exactly y[0..n_tok)[0..n_out). Deterministic: no atomics (the split norm's sums: one per
 *     warp and token, as k_gemv_dp4a.cu).
 *  2. The launch shape depends only on (dtype, n_out, n_in, n_tok) and the device (graph-capturable).
 *  3. Launched by cuk_launch; cuk_pdl_wait() comes before every access but the weight copies above.
 */
#include <cstdlib>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuk_launch.h"
#include "backend/cuda/cuk_mma.cuh"
#include "backend/cuda/k_gemv.h"
#include "backend/cuda/k_gemv_fuse.h"

namespace {

enum QKind { QM_Q8_0, QM_Q4_0, QM_Q4_1 };

constexpr int kNS = 4;              /* ring stages per warp: three loading while one is used */
constexpr int kStageQ = 2048;       /* quant bytes per stage: 16 rows x 128 bytes */
constexpr int kStageS = 512;        /* scale bytes per stage (at most: q4_1, 16 rows x 8 blocks x {d, m}) */
constexpr int kStage = kStageQ + kStageS;
constexpr int kTok = 8;             /* tokens per mma: its n (a pass runs NT = 1 or 2 of them) */
constexpr int kMagic = 0x4B400000;  /* 1.5 x 2^23 as a float */
constexpr size_t kSmemMax = 232448; /* the H100 / H200 opt-in limit per CTA (227 KB) */

/* BB: bytes of one block of one row; SB: blocks per stage (128 bytes per row); SC: scale bytes per block */
template <int K> struct QT;
template <> struct QT<QM_Q4_0> { static constexpr int BB = 16, SB = 8, SC = 2; };
template <> struct QT<QM_Q4_1> { static constexpr int BB = 16, SB = 8, SC = 4; };
template <> struct QT<QM_Q8_0> { static constexpr int BB = 32, SB = 4, SC = 2; };

/* Ring stages per warp for NT token tiles: 16 tokens need room for twice the partial tiles and scales. */
__host__ __device__ constexpr int stages(int nt) { return nt == 2 ? 3 : kNS; }

__device__ __forceinline__ void cp16(unsigned dst, const void *src)
{
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp4(unsigned dst, const void *src)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

/* Stage of blocks [blk0, blk0 + nb) of rows row0 .. row0 + 15 (rows past n_out repeat the last one) into
 * st: quants swizzled (header), then the scales, row r's at kStageQ + r SB SC. nb is even. */
template <int K>
__device__ __forceinline__ void issue_stage(unsigned char *st, const unsigned char *__restrict__ w,
                                            const unsigned char *__restrict__ sc, size_t row_bytes, int nblk, int row0,
                                            int n_out, int blk0, int nb, int lane)
{
    constexpr int BB = QT<K>::BB, SB = QT<K>::SB, SC = QT<K>::SC, WPR = SB * SC / 4;
    const unsigned s = (unsigned)__cvta_generic_to_shared(st);
    const int cpr = nb * BB / 16; /* 16-byte chunks per row */
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int c = lane + 32 * i, r = c >> 3, k = c & 7;
        if (k < cpr) {
            const int row = min(row0 + r, n_out - 1);
            cp16(s + r * 128 + ((k ^ (r & 7)) << 4), w + (size_t)row * row_bytes + (size_t)blk0 * BB + k * 16);
        }
    }
    const int wpr = nb * SC / 4; /* 4-byte words of scales per row */
#pragma unroll
    for (int c = lane; c < 16 * WPR; c += 32) {
        const int r = c / WPR, k = c % WPR;
        if (k < wpr) {
            const int row = min(row0 + r, n_out - 1);
            cp4(s + kStageQ + (r * WPR + k) * 4, sc + ((size_t)row * nblk + blk0) * SC + k * 4);
        }
    }
}

/* Row r's block scales of a stage as floats: d[j], and (q4_1) m[j] + 8 d[j] (the centred form). */
template <int K>
__device__ __forceinline__ void stage_scales(const unsigned char *ss, int r, float (&d)[QT<K>::SB], float (&m)[QT<K>::SB])
{
    constexpr int SB = QT<K>::SB, SC = QT<K>::SC;
    uint32_t v[SB * SC / 4];
#pragma unroll
    for (int i = 0; i < SB * SC / 4; i += 2) {
        const uint2 u = *reinterpret_cast<const uint2 *>(ss + r * SB * SC + i * 4);
        v[i] = u.x;
        v[i + 1] = u.y;
    }
#pragma unroll
    for (int j = 0; j < SB; j++) {
        if constexpr (K == QM_Q4_1) {
            d[j] = __half2float(__ushort_as_half((unsigned short)(v[j] & 0xFFFF)));
            m[j] = fmaf(8.0f, d[j], __half2float(__ushort_as_half((unsigned short)(v[j] >> 16))));
        } else {
            d[j] = __half2float(__ushort_as_half((unsigned short)(v[j >> 1] >> (16 * (j & 1)))));
            m[j] = 0.0f;
        }
    }
}

/* acc (rows g, g + 8 x tokens 2q, 2q + 1) += one block's scaled dot products dd (the mma's output).
 * ds: {d, s} of tokens 2q, 2q + 1; sx2: their sum(x) (q4_1). */
template <int K>
__device__ __forceinline__ void scale_block(float (&acc)[4], const int (&dd)[4], float4 ds, float2 sx2, float dwa,
                                            float dwb, float mwa, float mwb)
{
    float f[4];
#pragma unroll
    for (int i = 0; i < 4; i++) f[i] = __int_as_float(dd[i]) - 12582912.0f; /* exact: the integer dot */
    if constexpr (K == QM_Q8_0) {
        acc[0] = fmaf(dwa * ds.x, f[0], acc[0]);
        acc[1] = fmaf(dwa * ds.z, f[1], acc[1]);
        acc[2] = fmaf(dwb * ds.x, f[2], acc[2]);
        acc[3] = fmaf(dwb * ds.z, f[3], acc[3]);
    } else if constexpr (K == QM_Q4_0) {
        acc[0] = fmaf(dwa, fmaf(ds.x, f[0], ds.y), acc[0]);
        acc[1] = fmaf(dwa, fmaf(ds.z, f[1], ds.w), acc[1]);
        acc[2] = fmaf(dwb, fmaf(ds.x, f[2], ds.y), acc[2]);
        acc[3] = fmaf(dwb, fmaf(ds.z, f[3], ds.w), acc[3]);
    } else {
        acc[0] = fmaf(dwa, fmaf(ds.x, f[0], ds.y), fmaf(mwa, sx2.x, acc[0]));
        acc[1] = fmaf(dwa, fmaf(ds.z, f[1], ds.w), fmaf(mwa, sx2.y, acc[1]));
        acc[2] = fmaf(dwb, fmaf(ds.x, f[2], ds.y), fmaf(mwb, sx2.x, acc[2]));
        acc[3] = fmaf(dwb, fmaf(ds.z, f[3], ds.w), fmaf(mwb, sx2.y, acc[3]));
    }
}

/* y (n_tok <= 8 NT, n_out) = xq . W^T with the epilogue of fz (MS: FUSE_NORM = 1 / rms from xq's sums).
 * NT = 2: 16 tokens in one pass, two mmas per A fragment (x fragments: 4 registers per block). */
template <int K, int KBMAX, int NW, int MS, int NT>
__global__ void __launch_bounds__(NW * 32, 1)
    k_gemv_qmma(const unsigned char *__restrict__ w, const unsigned char *__restrict__ sc,
                const unsigned char *__restrict__ xq, size_t tb, float *__restrict__ y, int n_out, int n_in, int n_tok,
                int early, cuk_fuse fz)
{
    constexpr bool Q4 = K != QM_Q8_0;
    constexpr int BB = QT<K>::BB, SB = QT<K>::SB, SPTMAX = (KBMAX + SB - 1) / SB, TT = kTok * NT, NS = stages(NT);
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ float rs[TT]; /* MS == FUSE_NORM: sum(x^2) of each token row */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    const int nblk = n_in / 32, kb = nblk / NW, spt = (kb + SB - 1) / SB, ntiles = (n_out + 15) / 16;
    const int my_tiles = (int)blockIdx.x < ntiles ? (ntiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
    const int n_stages = my_tiles * spt;
    const size_t row_bytes = (size_t)nblk * BB;
    unsigned char *ring = smem + (size_t)warp * NS * kStage;
    float *red = reinterpret_cast<float *>(smem + (size_t)NW * NS * kStage); /* [2][NW][16 rows x TT tokens] */
    float2 *sx = reinterpret_cast<float2 *>(red + 2 * NW * 16 * TT);        /* [nblk][TT]: {d, s} */
    float *sm = reinterpret_cast<float *>(sx + (size_t)nblk * TT);           /* q4_1: [nblk][TT]: sum(x) */

    auto issue = [&](int s) {
        if (s >= n_stages) return;
        const int ti = s / spt, p = s - ti * spt;
        issue_stage<K>(ring + (s % NS) * kStage, w, sc, row_bytes, nblk, ((int)blockIdx.x + ti * (int)gridDim.x) * 16,
                       n_out, warp * kb + p * SB, min(SB, kb - p * SB), lane);
    };
    /* the first stages (weights: not written during a step) stream while the previous kernel finishes */
    if (early)
#pragma unroll
        for (int s = 0; s < NS - 1; s++) {
            issue(s);
            cp_commit();
        }
    cuk_pdl_wait();
    if (!early)
#pragma unroll
        for (int s = 0; s < NS - 1; s++) {
            issue(s);
            cp_commit();
        }
    /* the (token, block) scales, block-major so that a lane reads its two tokens with one load */
    for (int i = threadIdx.x; i < nblk * TT; i += NW * 32) {
        const int t = i / nblk, b = i - t * nblk;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (t < n_tok) v = *reinterpret_cast<const float4 *>(xq + (size_t)t * tb + (size_t)b * 16);
        sx[b * TT + t] = make_float2(v.x, v.y);
        if constexpr (K == QM_Q4_1) sm[b * TT + t] = v.z;
    }
    if constexpr (MS == FUSE_NORM) { /* the same sum, in the same order, as the dp4a kernel */
        static_assert(NW >= TT, "one warp per token row");
        if (warp < TT) {
            float v = 0.0f;
            if (warp < n_tok)
                for (int b = lane; b < nblk; b += 32) v += reinterpret_cast<const float4 *>(xq + (size_t)warp * tb)[b].w;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
            if (lane == 0) rs[warp] = v;
        }
    }
    /* B fragments of this warp's blocks: token g (+ 8 nt), bytes 4q.. (b0) and 16 + 4q.. (b1) of each block */
    uint32_t xf[NT][2 * KBMAX];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const int tok = g + kTok * nt;
        const unsigned char *xt = xq + (size_t)min(tok, n_tok - 1) * tb + (size_t)nblk * 16;
#pragma unroll
        for (int j = 0; j < KBMAX; j++) {
            uint32_t b0 = 0, b1 = 0;
            if (j < kb && tok < n_tok) {
                const int b = warp * kb + j;
                const unsigned char *lo = xt + (size_t)b * (Q4 ? 16 : 32) + 4 * q;
                b0 = *reinterpret_cast<const uint32_t *>(lo);
                b1 = *reinterpret_cast<const uint32_t *>(lo + (Q4 ? n_in / 2 : 16));
            }
            xf[nt][2 * j] = b0;
            xf[nt][2 * j + 1] = b1;
        }
    }
    /* the epilogue's (row in tile, token) of threads 0 .. 16 TT - 1 (lane % TT = token: ss_warp_add's layout) */
    const int erl = (int)threadIdx.x / TT, et = (int)threadIdx.x % TT;
    const bool epi = (int)threadIdx.x < 16 * TT; /* whole warps */
    const float prs = epi && fz.in_ss && et < n_tok ? fuse_in_scale(fz, et, n_in) : 1.0f;
    __syncthreads();

    const int magic[4] = {kMagic, kMagic, kMagic, kMagic};
    /* ldmatrix: lane l gives row (l % 8) + 8 ((l / 8) % 2) of matrix l / 8 */
    const int lrow = (lane & 7) + ((lane >> 3) & 1) * 8, lhi = lane >> 4;
    int sq = 0, buf = 0;
    double ss_run = 0.0;
    for (int ti = 0; ti < my_tiles; ti++) {
        float acc[NT][4] = {};
#pragma unroll
        for (int p = 0; p < SPTMAX; p++) {
            if (p < spt) {
                issue(sq + NS - 1);
                cp_commit();
                cp_wait<NS - 1>();
                __syncwarp();
                const unsigned char *st = ring + (sq % NS) * kStage;
                float dwa[SB], dwb[SB], mwa[SB], mwb[SB];
                stage_scales<K>(st + kStageQ, g, dwa, mwa);
                stage_scales<K>(st + kStageQ, g + 8, dwb, mwb);
#pragma unroll
                for (int jj = 0; jj < SB; jj += Q4 ? 2 : 1) {
                    const int j = p * SB + jj; /* block in this warp's slice */
                    if (j < kb) {
                        const int b = warp * kb + j;
                        uint32_t r[4];
                        const int chunk = Q4 ? jj + lhi : 2 * jj + lhi;
                        cuk_ldsm4(r, st + lrow * 128 + ((chunk ^ (lrow & 7)) << 4));
                        int dd[4];
                        if constexpr (Q4) { /* r: rows g / g + 8 of block j, then of block j + 1 */
#pragma unroll
                            for (int h = 0; h < 2; h++) {
                                const uint32_t a[4] = {r[2 * h] & 0x0F0F0F0Fu, r[2 * h + 1] & 0x0F0F0F0Fu,
                                                       (r[2 * h] >> 4) & 0x0F0F0F0Fu, (r[2 * h + 1] >> 4) & 0x0F0F0F0Fu};
#pragma unroll
                                for (int nt = 0; nt < NT; nt++) {
                                    const int o = (b + h) * TT + kTok * nt + 2 * q; /* tokens 2q, 2q + 1 of tile nt */
                                    cuk_mma_i8<true>(dd, a, xf[nt][2 * (j + h)], xf[nt][2 * (j + h) + 1], magic);
                                    const float4 ds = *reinterpret_cast<const float4 *>(sx + o);
                                    float2 s2 = make_float2(0.0f, 0.0f);
                                    if constexpr (K == QM_Q4_1) s2 = *reinterpret_cast<const float2 *>(sm + o);
                                    scale_block<K>(acc[nt], dd, ds, s2, dwa[jj + h], dwb[jj + h], mwa[jj + h], mwb[jj + h]);
                                }
                            }
                        } else {
#pragma unroll
                            for (int nt = 0; nt < NT; nt++) {
                                cuk_mma_i8<false>(dd, r, xf[nt][2 * j], xf[nt][2 * j + 1], magic);
                                const float4 ds = *reinterpret_cast<const float4 *>(sx + b * TT + kTok * nt + 2 * q);
                                scale_block<K>(acc[nt], dd, ds, make_float2(0.0f, 0.0f), dwa[jj], dwb[jj], 0.0f, 0.0f);
                            }
                        }
                    }
                }
                __syncwarp(); /* the slot is refilled by the next issue */
                sq++;
            }
        }
        float *rw = red + (buf * NW + warp) * 16 * TT; /* [16 rows][TT tokens] */
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const int c = kTok * nt + 2 * q;
            rw[g * TT + c] = acc[nt][0];
            rw[g * TT + c + 1] = acc[nt][1];
            rw[(g + 8) * TT + c] = acc[nt][2];
            rw[(g + 8) * TT + c + 1] = acc[nt][3];
        }
        __syncthreads();
        if (epi) { /* warp-uniform */
            const float *rb = red + buf * NW * 16 * TT + threadIdx.x;
            float v = 0.0f;
#pragma unroll
            for (int k = 0; k < NW; k++) v += rb[k * 16 * TT];
            const int row = ((int)blockIdx.x + ti * (int)gridDim.x) * 16 + erl;
            double qq = 0.0;
            if (row < n_out && et < n_tok) {
                const fuse_pre pre = {fz.acc ? y[(size_t)et * n_out + row] : 0.0f, prs, fz.out_xn ? fz.out_nw[row] : 0.0f};
                v = fuse_store_pre<MS, false>(fz, y, n_out, et, row, v, MS == FUSE_NORM ? rs[et] : 0.0f, n_in, pre);
                qq = (double)v * (double)v;
            }
            if (fz.out_xn) ss_warp_add<TT>(ss_run, qq);
        }
        buf ^= 1;
    }
    cp_wait<0>(); /* no copy outlives the CTA */
    if (epi) ss_warp_flush<TT>(fz, ss_run, lane, n_tok);
}

/* Warps per CTA and the register slice bound for n_in (0: no kernel): 16 warps when every warp gets an
 * even number of blocks, else 8; at most 32 blocks per warp (64 registers of x). nt: token tiles per
 * pass (2 only with 16 warps of at most 16 blocks: the x registers double). */
struct plan {
    int nw, kbmax, nt;
    size_t smem;
};
static size_t smem_of(dtype t, int64_t nblk, int nw, int nt)
{
    const size_t tt = (size_t)kTok * nt;
    return (size_t)nw * stages(nt) * kStage + 2 * (size_t)nw * 16 * tt * sizeof(float) + (size_t)nblk * tt * sizeof(float2) +
           (t == DTYPE_Q4_1 ? (size_t)nblk * tt * sizeof(float) : 0);
}
static plan plan_of(dtype t, int64_t n_in, int n_tok)
{
    plan p = {0, 0, 1, 0};
    if (n_in < 32 || n_in % 32 || n_in > (1 << 20)) return p;
    const int64_t nblk = n_in / 32;
    if (nblk % 32 == 0 && nblk / 16 <= 32) p.nw = 16;
    else if (nblk % 16 == 0 && nblk / 8 <= 32) p.nw = 8;
    else return p;
    const int64_t kb = nblk / p.nw;
    p.kbmax = kb <= 8 ? 8 : kb <= 16 ? 16 : 32;
    if (n_tok > kTok && p.nw == 16 && p.kbmax <= 16 && smem_of(t, nblk, 16, 2) <= kSmemMax) {
        const char *e = getenv("AIINFRA_QMMA_NT2"); /* A/B runs: 0 = 9-16 tokens as two passes of 8 */
        if (!(e && *e == '0')) p.nt = 2;
    }
    p.smem = smem_of(t, nblk, p.nw, p.nt);
    if (p.smem > kSmemMax) p.nw = 0;
    return p;
}

template <int K, int KBMAX, int NW, int NT>
cudaError_t launch(cudaStream_t s, const cuk_weight *w, const unsigned char *xq, size_t tb, int n_tok, float *y, int ms,
                   size_t smem, cuk_fuse f)
{
    void (*kern)(const unsigned char *, const unsigned char *, const unsigned char *, size_t, float *, int, int, int, int,
                 cuk_fuse) =
        ms == FUSE_NORM ? k_gemv_qmma<K, KBMAX, NW, FUSE_NORM, NT> : k_gemv_qmma<K, KBMAX, NW, FUSE_NONE, NT>;
    long long cap = 0;
    const cudaError_t e = cuk_resident_ctas(kern, NW * 32, smem, &cap);
    if (e != cudaSuccess) return e;
    const long long tiles = (w->n_out + 15) / 16;
    const unsigned grid = (unsigned)(tiles < cap ? tiles : cap);
    const unsigned char *base = static_cast<const unsigned char *>(w->data);
    const unsigned char *sc = base + cuk_weight_qs_bytes(w->type, w->n_out, w->n_in);
    const char *ev = getenv("AIINFRA_QMMA_EARLY"); /* A/B runs: 0 = weight copies after the PDL wait */
    const int early = ev && *ev ? *ev != '0' : 1;
    return cuk_launch(kern, dim3(grid), dim3(NW * 32), smem, s, base, sc, xq, tb, y, (int)w->n_out, (int)w->n_in, n_tok,
                      early, f);
}

template <int K>
cudaError_t launch_k(cudaStream_t s, const cuk_weight *w, const unsigned char *xq, size_t tb, int n_tok, float *y,
                     int ms, const plan &p, cuk_fuse f)
{
    if (p.nw == 16) {
        if (p.nt == 2) return p.kbmax == 8 ? launch<K, 8, 16, 2>(s, w, xq, tb, n_tok, y, ms, p.smem, f)
                                           : launch<K, 16, 16, 2>(s, w, xq, tb, n_tok, y, ms, p.smem, f);
        if (p.kbmax == 8) return launch<K, 8, 16, 1>(s, w, xq, tb, n_tok, y, ms, p.smem, f);
        if (p.kbmax == 16) return launch<K, 16, 16, 1>(s, w, xq, tb, n_tok, y, ms, p.smem, f);
        return launch<K, 32, 16, 1>(s, w, xq, tb, n_tok, y, ms, p.smem, f);
    }
    if (p.kbmax <= 16) return launch<K, 16, 8, 1>(s, w, xq, tb, n_tok, y, ms, p.smem, f);
    return launch<K, 32, 8, 1>(s, w, xq, tb, n_tok, y, ms, p.smem, f);
}

} // namespace

extern "C" bool cuk_gemv_qmma_ok(const cuk_weight *w)
{
    return w && w->data && (w->type == DTYPE_Q8_0 || w->type == DTYPE_Q4_0 || w->type == DTYPE_Q4_1) &&
           w->n_out >= 1 && w->n_out <= (1 << 30) && (uintptr_t)w->data % 16 == 0 && plan_of(w->type, w->n_in, 1).nw > 0;
}

extern "C" int cuk_gemv_qmma_min_tok(void)
{
    const char *e = getenv("AIINFRA_GEMV_QMMA_MIN");
    return e && *e ? atoi(e) : CUK_GEMV_QMMA_MIN_TOK;
}

extern "C" ai_status cuk_gemv_qmma_xq(cuk_stream s, const cuk_weight *w, const void *xq, int32_t n_tok, float *y,
                                      const cuk_mm_opts *o, ai_err *err)
{
    if (!w || !xq || !y || n_tok < 1 || n_tok > CUK_GEMV_MAX_TOK || (uintptr_t)xq % 16 ||
        (o && (o->swiglu_out || o->rope_kv)))
        return ai_err_set(err, AI_ERR_INVALID, "cuk_gemv_qmma_xq: bad arguments");
    if (!cuk_gemv_qmma_ok(w))
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "cuk_gemv_qmma_xq: no kernel for %s %lld x %lld", dtype_name(w->type),
                          (long long)w->n_out, (long long)w->n_in);
    const plan p = plan_of(w->type, w->n_in, n_tok);
    const int ms = o && o->norm_w ? FUSE_NORM : FUSE_NONE, per = kTok * p.nt;
    const size_t tb = cuk_gemv_dp4a_xq_bytes(w->n_in, 1); /* one token of the xq layout */
    cudaStream_t cs = (cudaStream_t)s;
    for (int32_t t0 = 0; t0 < n_tok; t0 += per) { /* passes of 8 or 16 tokens (as k_gemv_dp4a.cu run_passes) */
        const int cnt = n_tok - t0 < per ? n_tok - t0 : per;
        const unsigned char *xp = static_cast<const unsigned char *>(xq) + (size_t)t0 * tb;
        float *yp = y + (size_t)t0 * (size_t)w->n_out;
        cuk_fuse f = cuk_fuse_of(o);
        if (f.in_ss) f.in_ss += (size_t)t0 * BACKEND_SS_LANES;
        if (f.out_xn) {
            f.out_xn += (size_t)t0 * (size_t)w->n_out;
            f.out_ss += (size_t)t0 * BACKEND_SS_LANES;
        }
        cudaError_t e = w->type == DTYPE_Q8_0   ? launch_k<QM_Q8_0>(cs, w, xp, tb, cnt, yp, ms, p, f)
                        : w->type == DTYPE_Q4_0 ? launch_k<QM_Q4_0>(cs, w, xp, tb, cnt, yp, ms, p, f)
                                                : launch_k<QM_Q4_1>(cs, w, xp, tb, cnt, yp, ms, p, f);
        if (e == cudaSuccess) e = cudaGetLastError();
        if (e != cudaSuccess)
            return ai_err_set(err, AI_ERR_RUNTIME, "cuk_gemv_qmma (%s %lld x %lld, %d tokens, %d warps, %zu B shared): %s",
                              dtype_name(w->type), (long long)w->n_out, (long long)w->n_in, cnt, p.nw, p.smem,
                              cudaGetErrorString(e));
    }
    return AI_OK;
}
