/* k_skinny.cu - y (n_tok, n_out) f32 = bf16(x) (n_tok, n_in) . W^T for 1..16 tokens, bf16 weights, on
 * Hopper's asynchronous tensor cores (wgmma) with the weights streamed by TMA. What cuk_matmul runs
 * for bf16 weights at CUK_SKINNY_MIN_TOK (2) - CUK_SKINNY_MAX_TOK (8) tokens (CUK_SKINNY_DEFAULT;
 * AIINFRA_SKINNY=0 turns it off for A/B runs). Status (2026-12-06): faster than cuBLASLt per call and
 * than both cuBLASLt and our GEMV in the step at 2-8 tokens on the H100 (even at 12-16); on the H200
 * 1.12x at 4 tokens, even at 6-8, 5-11% behind cuBLASLt at 10-16 (docs/gpu.md, "The skinny wgmma
 * GEMM"); test_skinny passes in full, compute-sanitizer memcheck and racecheck clean (H100).
 *
 * Why: at 5-16 tokens per step our CUDA-core / mma.sync GEMVs (k_gemv.cu, k_gemv_mma.cu) keep their
 * weight bytes in flight in registers, U loads per thread, and leave HBM at 0.50-0.85 of copy; cuBLASLt
 * reaches 0.86-0.91 from 8 tokens. Here the bytes in flight are shared-memory stages filled by TMA,
 * independent of registers, and the tensor cores read both operands from shared memory.
 *
 * "Swap A and B": the GEMM is computed as D (64 weight rows x NT tokens) = W_tile (64 x k) . x^T
 * (k x NT), so that the weights are wgmma's A operand (M = 64, K-major: rows of W are contiguous in k)
 * and the 1-16 tokens its narrow N side (m64n8k16 or m64n16k16; x rows are K-major too, trans-b 0).
 * x arrives in f32 (what the GEMVs take): the threads read each stage's slice one block ahead into
 * registers and write it rounded to bf16 in the swizzled layout (XSlice), so no separate rounding
 * kernel runs before the GEMM (one launch per matrix fewer in the decode step). Weight columns past
 * n_in come from TMA's zero fill and x's from XSlice's, so any n_tok <= NT and any n_in % 8 == 0 work
 * (the weights' tensor map needs a row stride that is a multiple of 16 bytes).
 *
 * A CTA (one warpgroup, 128 threads) owns 64 rows and a range of k blocks (KS = 64 NB columns each):
 *  - stage = NB boxes of W (64 rows x 64 columns, 8 KB each, 128-byte swizzle) + NB boxes of x (NT
 *    rows x 64 columns); ST stages (kCfgs); thread 0 keeps every free stage's weights loading (one
 *    mbarrier per stage, expect_tx = the weight bytes, the zero-filled parts included). More boxes per
 *    stage means longer runs of each weight row per request, which HBM serves better (measured: 8
 *    boxes x 2 stages best, 2 x 4 up to 23% slower);
 *  - per block: every thread writes its part of the stage's x, fence.proxy.async (generic-proxy
 *    stores made visible to wgmma), one CTA barrier (which also says that block i - 1's wgmmas are
 *    done, so thread 0 refills that stage), the next block's x loads issued, then 4 NB wgmmas (k16
 *    steps: box kk / 4 at byte 32 (kk % 4) of each 128-byte row, as in the GEMM ladder's kernels),
 *    commit, wait;
 *  - split-K: a matrix with few row tiles (4096 rows: 64 tiles for 132 SMs) spreads each tile's k
 *    blocks over a cluster of S CTAs; their 64 x NT partials meet through distributed shared memory
 *    and output i is finished by rank i % S, adding the S partials in rank order (deterministic).
 * Output: thread (warp w, lane l) holds D rows 16w + l/4 (+ 8), token columns 8j + 2(l % 4) (+ 1), i.e.
 * y[token][row0 + row]; written (or added to y: accumulate) for token < n_tok, row < n_out, by
 * fuse_store (k_gemv_fuse.h), which also does the split norm's scale (in_ss) or outputs (out_xn).
 * Launched with PDL (cuk_launch_cluster); x and y wait for the previous kernel, and with
 * CUK_SKINNY_EARLY the first stages' weight boxes are requested before that wait.
 */
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuk_launch.h"
#include "backend/cuda/k_gemv.h"
#include "backend/cuda/k_gemv_fuse.h"
#include "kernels/gemm/gemm_hopper.cuh"

namespace cg = cooperative_groups;

namespace {

constexpr int kRows = 64;   /* weight rows per CTA: wgmma's M */
constexpr int kThreads = 128;

/* Tuning configurations (cuk_skinny_bf16_cfg): 64-column boxes per stage x stages in the ring. */
struct RingCfg { int boxes, stages; };
constexpr RingCfg kCfgs[CUK_SKINNY_CFGS] = {{8, 2}, {4, 3}, {2, 4}, {6, 3}, {4, 4}}; /* 0: the default */

template <int NT, int NB, int ST> struct Cfg {
    static constexpr int W_BOX = kRows * 128; /* bytes of one W box */
    static constexpr int X_BOX = NT * 128;    /* bytes of one x box */
    static constexpr int STAGE = NB * (W_BOX + X_BOX);
    static constexpr int SMEM = ST * STAGE + 1024; /* + the 1024-byte alignment of the base */
};

/* d (64 x NT fp32, NT / 2 per thread) += A (64 x 16, K-major) . B (16 x NT, K-major). */
template <int NT> __device__ __forceinline__ void wg_mma(float *d, uint64_t a, uint64_t b);
template <> __device__ __forceinline__ void wg_mma<8>(float *d, uint64_t a, uint64_t b)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "l"(a), "l"(b));
}
template <> __device__ __forceinline__ void wg_mma<16>(float *d, uint64_t a, uint64_t b)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, "
                 "1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                 : "l"(a), "l"(b));
}

/* TMA load of a weight box with an L2 evict-first policy: each weight byte is read once per step. */
__device__ __forceinline__ void tma_load_once(void *dst, const CUtensorMap *map, int c0, int c1, uint64_t *bar,
                                              uint64_t pol)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint "
                 "[%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(sm(dst)),
                 "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(sm(bar)), "l"(pol)
                 : "memory");
}

/* One finished value of D: y[token][row] (= or +=, and the split norm's parts: fuse_store). Returns the
 * square of the value stored (0 out of range), which the caller adds to out_ss per warp (ss_lanes_sum). */
__device__ __forceinline__ double put(float *y, int n_out, int n_in, int n_tok, const cuk_fuse &fz, int row, int tok,
                                      float v, const float *rs)
{
    if (tok >= n_tok || row >= n_out) return 0.0;
    v = fuse_store<FUSE_NONE, false>(fz, y, n_out, tok, row, v, 0.0f, n_in, rs[tok]);
    return (double)v * (double)v;
}

/* Stage i's slice of x: NT rows x KS columns, f32 in global memory (the previous kernel's output, L2
 * resident), rounded to bf16 here and written in the layout TMA's 128-byte swizzle gives (the B
 * descriptor expects it): 16-byte chunk c of row r of a box at r * 128 + 16 (c ^ (r % 8)). Thread t
 * owns chunks t, t + 128, ... of the stage, numbered row-major over (row, NB * 8 chunks), so a warp
 * reads one contiguous run of a row. Rows past n_tok and columns past n_in are zeros. */
template <int NT, int NB> struct XSlice {
    static_assert(NT * NB * 8 % kThreads == 0, "every thread owns the same number of x chunks");
    static constexpr int CH = NT * NB * 8 / kThreads; /* chunks per thread */
    float4 v[CH][2];
    __device__ __forceinline__ void load(const float *x, int n_in, int n_tok, int k0)
    {
#pragma unroll
        for (int j = 0; j < CH; j++) {
            const int q = (int)threadIdx.x + j * kThreads, r = q / (NB * 8), k = k0 + (q % (NB * 8)) * 8;
            if (r < n_tok && k < n_in) { /* n_in % 8 == 0: a chunk is wholly in or out */
                const float4 *p = (const float4 *)(x + (size_t)r * n_in + k);
                v[j][0] = __ldcg(p); /* L2 only: under PDL no L1 line may predate the producer's */
                v[j][1] = __ldcg(p + 1);
            } else {
                v[j][0] = v[j][1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
        }
    }
    __device__ __forceinline__ void store(unsigned char *xs) const
    {
#pragma unroll
        for (int j = 0; j < CH; j++) {
            const int q = (int)threadIdx.x + j * kThreads, r = q / (NB * 8), cc = q % (NB * 8), c = cc & 7;
            const __nv_bfloat162 a = __floats2bfloat162_rn(v[j][0].x, v[j][0].y),
                                 b = __floats2bfloat162_rn(v[j][0].z, v[j][0].w),
                                 e = __floats2bfloat162_rn(v[j][1].x, v[j][1].y),
                                 f = __floats2bfloat162_rn(v[j][1].z, v[j][1].w);
            uint4 u;
            u.x = *(const uint32_t *)&a;
            u.y = *(const uint32_t *)&b;
            u.z = *(const uint32_t *)&e;
            u.w = *(const uint32_t *)&f;
            *(uint4 *)(xs + (cc >> 3) * (NT * 128) + r * 128 + ((c ^ (r & 7)) << 4)) = u;
        }
    }
};

/* flags: CUK_SKINNY_EARLY (weights of the first stages requested before the PDL wait),
 * CUK_SKINNY_EVICT (weights loaded evict-first). */
template <int NT, int S, int NB, int ST>
__global__ void __launch_bounds__(kThreads, 1) k_skinny(const __grid_constant__ CUtensorMap tw,
                                                         const float *__restrict__ x, float *__restrict__ y,
                                                         int n_out, int n_in, int n_tok, cuk_fuse fz, int flags)
{
    using C = Cfg<NT, NB, ST>;
    constexpr int KS = 64 * NB; /* columns per stage */
    extern __shared__ unsigned char raw[];
    unsigned char *sb = smem_base(raw);
    __shared__ __align__(8) uint64_t full[ST];
    const int tid = threadIdx.x;
    const int rank = S > 1 ? (int)cg::this_cluster().block_rank() : 0;
    const int row0 = (int)(blockIdx.x / S) * kRows;
    const int nkb = (n_in + KS - 1) / KS, per = (nkb + S - 1) / S;
    const int kb0 = rank * per, nloc = max(0, min(nkb, kb0 + per) - kb0);
    uint64_t pol = 0;
    if (flags & CUK_SKINNY_EVICT) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
    auto issue_w = [&](int i) { /* local k block i's weight boxes into stage i % ST */
        const int st = i % ST;
        unsigned char *sp = sb + st * C::STAGE;
        mbar_expect_tx(&full[st], NB * C::W_BOX);
#pragma unroll
        for (int b = 0; b < NB; b++) {
            const int k = (kb0 + i) * KS + b * 64;
            if (flags & CUK_SKINNY_EVICT) tma_load_once(sp + b * C::W_BOX, &tw, k, row0, &full[st], pol);
            else tma_load(sp + b * C::W_BOX, &tw, k, row0, &full[st]);
        }
    };
    const int early = flags & CUK_SKINNY_EARLY;
    if (tid == 0) {
        asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)&tw) : "memory");
        for (int s = 0; s < ST; s++) mbar_init(&full[s], 1);
        asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;\n" ::: "memory");
        if (early) /* the weights are never written by a kernel: safe before the wait */
            for (int i = 0; i < ST && i < nloc; i++) issue_w(i);
    }
    __syncthreads();
    cuk_pdl_wait(); /* x is the previous kernel's output; y may still be read by it */
    /* the split norm's 1 / rms per token: read after the k loop's __syncthreads (S = 1: nloc >= 1) or
     * the cluster's sync (S > 1) */
    __shared__ float rs[NT];
    fuse_rs_table<NT>(fz, n_tok, n_in, rs);
    if (tid == 0 && !early)
        for (int i = 0; i < ST && i < nloc; i++) issue_w(i);
    XSlice<NT, NB> xv;
    if (nloc > 0) xv.load(x, n_in, n_tok, kb0 * KS);

    float d[NT / 2];
#pragma unroll
    for (int j = 0; j < NT / 2; j++) d[j] = 0.0f;
    for (int i = 0; i < nloc; i++) {
        const int st = i % ST;
        unsigned char *sp = sb + st * C::STAGE;
        xv.store(sp + NB * C::W_BOX); /* this stage's x was last read by the wgmmas of block i - ST */
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* visible to wgmma (async proxy) */
        __syncthreads(); /* x written by every thread; every warp's wgmmas of block i - 1 have read their stage */
        if (tid == 0 && i > 0 && i - 1 + ST < nloc) issue_w(i - 1 + ST);
        if (i + 1 < nloc) xv.load(x, n_in, n_tok, (kb0 + i + 1) * KS); /* in flight during this block's wgmmas */
        mbar_wait(&full[st], (unsigned)(i / ST) & 1u);
        const uint32_t a = sm(sp), b = a + NB * C::W_BOX;
        const uint64_t ad = gdesc(a, 16, 1024), bd = gdesc(b, 16, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < KS / 16; kk++)
            wg_mma<NT>(d, ad + (uint64_t)((((kk >> 2) * C::W_BOX) + (kk & 3) * 32) >> 4),
                       bd + (uint64_t)((((kk >> 2) * C::X_BOX) + (kk & 3) * 32) >> 4));
        wgmma_commit();
        wgmma_wait<0>();
    }

    const int w = tid >> 5, lane = tid & 31, r = 16 * w + (lane >> 2), c = 2 * (lane & 3);
    if constexpr (S == 1) {
#pragma unroll
        for (int j = 0; j < NT / 8; j++) {
            double q0 = put(y, n_out, n_in, n_tok, fz, row0 + r, 8 * j + c, d[4 * j], rs);
            double q1 = put(y, n_out, n_in, n_tok, fz, row0 + r, 8 * j + c + 1, d[4 * j + 1], rs);
            q0 += put(y, n_out, n_in, n_tok, fz, row0 + r + 8, 8 * j + c, d[4 * j + 2], rs);
            q1 += put(y, n_out, n_in, n_tok, fz, row0 + r + 8, 8 * j + c + 1, d[4 * j + 3], rs);
            if (fz.out_xn) { /* tokens 8 j + c, + 1 are held by the lanes with the same lane % 4 */
                q0 = ss_lanes_sum<4>(q0);
                q1 = ss_lanes_sum<4>(q1);
                if (lane < 4 && 8 * j + c < n_tok) ss_add(fz, 8 * j + c, q0);
                if (lane < 4 && 8 * j + c + 1 < n_tok) ss_add(fz, 8 * j + c + 1, q1);
            }
        }
    } else {
        __shared__ float red[kRows][NT];
#pragma unroll
        for (int j = 0; j < NT / 8; j++) {
            red[r][8 * j + c] = d[4 * j];
            red[r][8 * j + c + 1] = d[4 * j + 1];
            red[r + 8][8 * j + c] = d[4 * j + 2];
            red[r + 8][8 * j + c + 1] = d[4 * j + 3];
        }
        cg::cluster_group cl = cg::this_cluster();
        cl.sync(); /* every CTA's partial written and visible cluster-wide */
        /* S kThreads is a multiple of NT: a thread's outputs are all of token (rank + S tid) % NT, and
         * the lanes congruent mod NT / S (or all, S >= NT) share it */
        constexpr int P = NT / S > 0 ? NT / S : 1;
        static_assert(S * kThreads % NT == 0, "one token a thread");
        double q = 0.0;
        for (int i = rank + S * tid; i < kRows * NT; i += S * kThreads) {
            const int rr = i / NT, tt = i % NT;
            float v = 0.0f;
#pragma unroll
            for (int k = 0; k < S; k++) v += *cl.map_shared_rank(&red[rr][tt], k);
            q += put(y, n_out, n_in, n_tok, fz, row0 + rr, tt, v, rs);
        }
        if (fz.out_xn) {
            q = ss_lanes_sum<P>(q);
            const int tt = (rank + S * tid) % NT;
            if (lane < P && tt < n_tok && rank + S * tid < kRows * NT) ss_add(fz, tt, q);
        }
        cl.sync(); /* no CTA exits while a peer still reads its shared memory */
    }
}

struct Args {
    const CUtensorMap *mw;
    const float *x;
    float *y;
    int n_out, n_in, n_tok;
    cuk_fuse fz;
    int flags;
};

template <int NT, int S, int NB, int ST> cudaError_t launch(cudaStream_t s, const Args &a)
{
    auto kern = k_skinny<NT, S, NB, ST>;
    constexpr int smem = Cfg<NT, NB, ST>::SMEM;
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    const unsigned tiles = (unsigned)((a.n_out + kRows - 1) / kRows);
    return cuk_launch_cluster(kern, dim3(tiles * S), dim3(kThreads), (size_t)smem, s, (unsigned)S, *a.mw, a.x, a.y,
                              a.n_out, a.n_in, a.n_tok, a.fz, a.flags);
}

template <int NT, int NB, int ST> cudaError_t launch_split(cudaStream_t s, const Args &a, int split)
{
    if (split == 8) return launch<NT, 8, NB, ST>(s, a);
    if (split == 4) return launch<NT, 4, NB, ST>(s, a);
    if (split == 2) return launch<NT, 2, NB, ST>(s, a);
    return launch<NT, 1, NB, ST>(s, a);
}

template <int NT> cudaError_t launch_cfg(cudaStream_t s, const Args &a, int split, int cfg)
{
    switch (cfg) {
    case 1: return launch_split<NT, kCfgs[1].boxes, kCfgs[1].stages>(s, a, split);
    case 2: return launch_split<NT, kCfgs[2].boxes, kCfgs[2].stages>(s, a, split);
    case 3: return launch_split<NT, kCfgs[3].boxes, kCfgs[3].stages>(s, a, split);
    case 4: return launch_split<NT, kCfgs[4].boxes, kCfgs[4].stages>(s, a, split);
    default: return launch_split<NT, kCfgs[0].boxes, kCfgs[0].stages>(s, a, split);
    }
}

} // namespace

/* Measured (H100, docs/gpu.md): a cluster split only pays where there are too few row tiles to keep
 * most SMs streaming; from 48 tiles (3072 rows) one CTA per tile is fastest, even with 64 tiles on 132
 * SMs. Below that, split so that about 64 CTAs run, never into more parts than there are k blocks. */
extern "C" int cuk_skinny_split_pick(int64_t n_out, int64_t n_in)
{
    const int64_t tiles = (n_out + kRows - 1) / kRows, nkb = (n_in + 64 * kCfgs[0].boxes - 1) / (64 * kCfgs[0].boxes);
    int split = 1;
    while (split < 8 && tiles * split < 64 && tiles < 48 && 2 * split <= nkb) split *= 2;
    return split;
}

extern "C" ai_status cuk_skinny_bf16_ex(cuk_stream s, const cuk_weight *w, const float *x, int32_t n_tok, float *y,
                                        const cuk_mm_opts *o, int split, int cfg, int flags, ai_err *err)
{
    if (o && (o->norm_w || o->swiglu_in || o->swiglu_out || (o->out_xn && (!o->out_nw || !o->out_ss))))
        return ai_err_set(err, AI_ERR_INVALID, "cuk_skinny_bf16: no prologue or swiglu epilogue here");
    if (!w || w->type != DTYPE_BF16 || !w->data || !x || !y || n_tok < 1 || n_tok > 16 || w->n_out < 1 ||
        w->n_in < 8 || w->n_in % 8 || w->n_out > (1 << 30) || w->n_in > (1 << 30) || (uintptr_t)w->data % 16 ||
        (uintptr_t)x % 16 || cfg < 0 || cfg >= CUK_SKINNY_CFGS)
        return ai_err_set(err, AI_ERR_INVALID, "cuk_skinny_bf16: bad arguments");
    if (split == 0) split = cuk_skinny_split_pick(w->n_out, w->n_in);
    if (split != 1 && split != 2 && split != 4 && split != 8)
        return ai_err_set(err, AI_ERR_INVALID, "cuk_skinny_bf16: split %d (1, 2, 4 or 8)", split);
    const int nt = n_tok <= 8 ? 8 : 16;
    CUtensorMap mw;
    cudaError_t e = tmap_2d(&mw, w->data, (int)w->n_out, (int)w->n_in, kRows);
    CUK_TRY(err, e, "cuk_skinny_bf16: tensor map");
    const Args a = {&mw, x, y, (int)w->n_out, (int)w->n_in, n_tok, cuk_fuse_of(o), flags};
    e = nt == 8 ? launch_cfg<8>((cudaStream_t)s, a, split, cfg) : launch_cfg<16>((cudaStream_t)s, a, split, cfg);
    CUK_TRY(err, e, "cuk_skinny_bf16 (launch)");
    CUK_LAUNCHED(err, "cuk_skinny_bf16");
    return AI_OK;
}

extern "C" ai_status cuk_skinny_bf16_cfg(cuk_stream s, const cuk_weight *w, const float *x, int32_t n_tok, float *y,
                                         int accumulate, int split, int cfg, int flags, ai_err *err)
{
    cuk_mm_opts o = {};
    o.accumulate = accumulate != 0;
    return cuk_skinny_bf16_ex(s, w, x, n_tok, y, &o, split, cfg, flags, err);
}

extern "C" ai_status cuk_skinny_bf16(cuk_stream s, const cuk_weight *w, const float *x, int32_t n_tok, float *y,
                                     int accumulate, int split, ai_err *err)
{
    return cuk_skinny_bf16_cfg(s, w, x, n_tok, y, accumulate, split, 0, CUK_SKINNY_EARLY | CUK_SKINNY_EVICT, err);
}
