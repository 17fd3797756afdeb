/* attn_fa3.cu - v4 .. v4g: the Hopper forward (FlashAttention-3 ideas): wgmma for Q K^T and P V, K/V
 * by TMA into a multi-stage shared-memory ring guarded by mbarriers, a producer warp, and the softmax
 * of one key tile overlapped with the P V wgmma of the previous one; v4b adds the ping-pong between
 * the two consumer warpgroups, v4c drops the producer, v4d orders the CTAs for L2 reuse, v4e adds the
 * lazy rescale (the fastest at d 128), v4f / v4g combine. bf16 (b, h, s, d) in and out, d = 64 or 128,
 * any s, causal or not; writes lse (same contract as v3, attention.h).
 *
 * Measured 2026-12-04 (second session), H200, b4 h32 s4096 d128, TFLOP/s (% of PyTorch SDPA's 591
 * causal / 696 non-causal at b8): v4e 543.7 causal (92%), 573.1 non-causal (82%); v4c 469.7 / 512.1,
 * v4 448.4 / 478.0 in the same run. d64 causal b4 h16: v4c 352.4 (97% of SDPA's 362 at s 2048), v4e
 * 333.9 (92%). Table and analysis: docs/kernels/attention.md.
 *
 * Why faster than v3 (mma.sync, 283 TFLOP/s at b4h32 s4096 d128 causal on the H200):
 *  - wgmma (HGMMA) runs a 64 x N x 16 product per warpgroup instruction at about twice mma.sync's
 *    per-SM rate, reading Q and K straight from shared memory: no ldmatrix, no fragment address math
 *    (the GEMM ladder went 327 -> 498 TFLOP/s from v7 to v8 on the same change).
 *  - TMA: one thread issues each K / V tile (d/64 boxes of BN rows x 128 bytes, 128-byte swizzle,
 *    the layout wgmma reads conflict-free) and the bytes complete on an mbarrier; the 256 consumer
 *    threads spend no issue slots or registers on loads. Warp specialisation: warps 0-7 are two
 *    consumer warpgroups, warpgroup 2 the producer (384 threads, one of them issuing). Registers: the
 *    register file is four sub-partitions of 16384, one per warp scheduler, and warps are dealt to
 *    them round robin, so any block of 9-12 warps is capped at 168 per thread (a first version with
 *    288 threads at 205 registers failed to launch: "too many resources requested"). ptxas
 *    allocates the whole kernel at that cap (setmaxnreg, which moves registers from the producer
 *    group to the consumers at run time, did not change its allocation: 256 bytes of spills), so
 *    at d = 128 the key tile is BN = 64 (O 64 + S 32 + P 16 registers, 168 used, no spills); at
 *    d = 64, BN = 128 (O 32 + S 64 + P 32). The setmaxnreg pair stays, harmless by ptxas's account
 *    (same registers and spills with or without it); its run-time effect was not timed on its own.
 *  - v4c (IN = 1): no producer warpgroup, 256 threads (207 registers at d 128 with 128-key tiles,
 *    3 stages of 64 KiB); thread 0 issues the TMA loads, refilling a stage once both groups have
 *    released it. Alone it gained little over v4 (469.7 vs 448.4 causal), because both were held by
 *    HBM, not by the tile (next point).
 *  - CTA order (v4d..v4g): v4..v4c issue every head's heaviest causal tile first, so the ~132 resident
 *    CTAs stream ~132 different heads' K/V and share nothing in L2: each reads its head's whole K/V
 *    from HBM, 4.4 GB per causal call at 3.7 TB/s (90% of the copy ceiling; arithmetic on the tiling,
 *    no counters). v4d orders the CTAs in sections of heads whose K/V fit half the L2 (12 at s 4096 d
 *    128), heaviest tiles first within a section: the resident CTAs walk the same heads' keys in step
 *    and hit in L2. +12% causal, +6% non-causal at d 128; -5% at d 64 (not bandwidth-bound there).
 *  - Lazy rescale (v4e, FA3_LAZY): a row's max is kept until a tile exceeds it by 2^8 (P <= 256, exact
 *    since O / l and lse use the same m), and a warp whose rows all kept theirs skips the O rescale:
 *    +3% causal, +6% non-causal over v4d. Ping-pong on top (v4f) loses 11%.
 *  - K and V have separate "full" barriers, so Q K^T of a tile starts while its V is still landing;
 *    a stage is refilled as soon as the 8 consumer warps arrive on its "empty" barrier (no
 *    __syncthreads in the loop). 4 stages, each a 16 KiB K tile and a 16 KiB V tile.
 *  - Intra-warpgroup pipelining (FA3's algorithm 2): in iteration j a warpgroup issues S_j = Q K_j^T
 *    and O += P_{j-1} V_{j-1} back to back, waits only for S_j, and computes the softmax of S_j
 *    (max, exp2, row sums; P_j stays fp32 in the S registers) while the tensor core still runs
 *    P_{j-1} V_{j-1}; then it waits for that, releases the stage, rescales O and packs P_j to bf16.
 *    The two consumer warpgroups (64 query rows each, 128 per CTA) interleave on top of that, so the exp / rescale work FA2 serialises with its
 *    matmuls is mostly hidden behind wgmma.
 *  - v4b / v4f only, ping-pong: the two warpgroups take turns issuing their wgmma blocks (two
 *    mbarriers pass the turn), so one group's softmax runs while the tensor core works on the other's
 *    block. v4 lets the two groups' wgmmas interleave freely; measured, the free order wins (v4b -5%
 *    vs v4, v4f -11% vs v4e causal d 128).
 *  - P goes from the S accumulators to the P V wgmma's A operand in registers: the wgmma accumulator
 *    layout of 16 rows x 16 keys is exactly the m16n8k16 A fragment (bf16 packing only).
 *  - Causal: key tiles past the CTA's last row are never loaded, CTAs are issued heaviest first (over
 *    all heads, or within a head section: the light tiles fill the tail instead of the heavy ones),
 *    and the mask is applied only on tiles that reach past the warp's first row (or past s).
 * Rows and keys past s: the tensor maps span all b*h*s rows, so a tile may read the next head's rows
 * (or TMA zero fill past the end): those keys get -inf scores (P = 0 times finite V) and those query
 * rows are computed but not stored.
 * Shared helpers (mbarriers, TMA, wgmma fence/commit/wait, descriptors, tensor maps) come from the GEMM
 * ladder's gemm_hopper.cuh; the attention-specific wgmma shapes from attn_wgmma.cuh; the softmax, P
 * packing and O rescale from attn_fa3_common.cuh, which the backend's Hopper prefill
 * (src/backend/cuda/k_attn_prefill_hopper.cu) shares.
 */
#include <limits.h>
#include <math.h>

#include "kernels/attention/attn_args.h"
#include "kernels/attention/attn_fa3_common.cuh"
#include "kernels/attention/attn_wgmma.cuh"
#include "kernels/gemm/gemm_hopper.cuh"

#define FA3_BM 128 /* query rows per CTA: 64 per consumer warpgroup */
#define FA3_THREADS 384 /* 2 consumer warpgroups + 1 producer warpgroup (one thread of it issues TMA) */
#define FA3_REG_CONSUMER 232 /* setmaxnreg: per SM sub-partition one warp of each group, */
#define FA3_REG_PRODUCER 40  /* (232 + 232 + 40) x 32 = 16128 of its 16384 registers */
#define FA3_PINGPONG 1 /* flags: the two consumer warpgroups take turns issuing wgmma (v4b) */
#define FA3_LAZY 2     /* flags: keep a row's max until a tile exceeds it by FA3_LAZY_TH (v4e) */

/* IN = 0 (v4, v4b): a producer warpgroup, 384 threads; BN keys per tile: 128 at d = 64, 64 at d = 128,
 * where the per-thread O (64 floats), S (BN / 2) and packed P (BN / 4) must fit ptxas's 168-register
 * cap of a 384-thread block (see the header). IN = 1 (v4c): no producer warpgroup, 256 threads, so up
 * to 255 registers and 128-key tiles at both head dims; d 128 then has room for 3 stages of 64 KiB. */
template <int D, int IN> struct fa3_cfg {
    static constexpr int THREADS = IN ? 256 : FA3_THREADS;
    static constexpr int BN = D == 128 && !IN ? 64 : 128;
    static constexpr int NS = D == 128 && IN ? 3 : 4;       /* K/V stages */
    static constexpr int Q_BYTES = FA3_BM * D * 2;          /* D/64 boxes of BM rows x 128 bytes */
    static constexpr int KV_BYTES = BN * D * 2;             /* one K (or V) tile: D/64 boxes of BN rows */
    static constexpr int BAR_OFF = Q_BYTES + 2 * NS * KV_BYTES;
    static constexpr int SMEM = BAR_OFF + (3 + 3 * NS) * 8 + 1024; /* + barriers + alignment slack */
};

template <int D, int IN>
__global__ void __launch_bounds__(fa3_cfg<D, IN>::THREADS, 1)
    attn_fa3_fwd(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                 const __grid_constant__ CUtensorMap tv, gbf *__restrict__ O, float *__restrict__ lse, int s_len,
                 float scale2, int causal, int n_qt, int bh, int hsec, int flags)
{
    typedef fa3_cfg<D, IN> C;
    constexpr int NS = C::NS, BN = C::BN, KB = D / 64; /* 64-column boxes per row */
    extern __shared__ unsigned char fa3_raw[];
    unsigned char *smem = smem_base(fa3_raw);
    unsigned char *Qs = smem, *Ks = smem + C::Q_BYTES, *Vs = Ks + NS * C::KV_BYTES;
    uint64_t *qbar = (uint64_t *)(smem + C::BAR_OFF), *full_k = qbar + 1, *full_v = full_k + NS,
             *empty = full_v + NS, *turn = empty + NS;
    const int tid = threadIdx.x, wg = tid / 128;
    const bool pingpong = flags & FA3_PINGPONG, lazy = flags & FA3_LAZY;
    /* Tile order (1D grid, issued in index order): heads in sections of hsec; within a section the
     * query tiles heaviest first, the section's heads fastest. hsec = b*h (v4, v4b, v4c): every head's
     * heaviest causal tile before any head's next one, the best tail but the ~132 resident CTAs stream
     * ~132 different heads' K/V, none shared through L2. hsec from the L2 size (fa3_hsec): the
     * resident CTAs share a few heads, so each K/V tile comes from HBM about once per section. */
    const int sec0 = blockIdx.x / (hsec * n_qt) * hsec, gs = min(hsec, bh - sec0);
    const int loc = blockIdx.x - sec0 * n_qt;
    const int qt = n_qt - 1 - loc / gs;
    const int row0 = qt * FA3_BM, z = sec0 + loc % gs;
    const int hrow = z * s_len; /* the head's first row in the (b*h*s, D) tensor maps */
    const int kv_len = causal ? min(s_len, row0 + FA3_BM) : s_len;
    const int n_kt = (kv_len + BN - 1) / BN;

    if (tid == 0) {
        mbar_init(qbar, 1);
        for (int i = 0; i < NS; i++) mbar_init(&full_k[i], 1), mbar_init(&full_v[i], 1), mbar_init(&empty[i], 8);
        mbar_init(&turn[0], 4), mbar_init(&turn[1], 4);
        asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;\n" ::: "memory");
    }
    __syncthreads();

    /* the TMA issue of Q, and of K / V tile j once its stage is free (the first round passes at once) */
    auto load_q = [&]() {
        mbar_expect_tx(qbar, C::Q_BYTES);
        for (int c = 0; c < KB; c++) tma_load(Qs + c * FA3_BM * 128, &tq, c * 64, hrow + row0, qbar);
    };
    auto load_kv = [&](int j) {
        const int st = j % NS;
        mbar_wait(&empty[st], ((j / NS) & 1) ^ 1);
        unsigned char *k = Ks + st * C::KV_BYTES, *v = Vs + st * C::KV_BYTES;
        mbar_expect_tx(&full_k[st], C::KV_BYTES);
        for (int c = 0; c < KB; c++) tma_load(k + c * BN * 128, &tk, c * 64, hrow + j * BN, &full_k[st]);
        mbar_expect_tx(&full_v[st], C::KV_BYTES);
        for (int c = 0; c < KB; c++) tma_load(v + c * BN * 128, &tv, c * 64, hrow + j * BN, &full_v[st]);
    };
    if constexpr (!IN) {
        if (wg == 2) { /* producer warpgroup: gives its registers to the consumers; one thread issues every TMA copy */
            asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(FA3_REG_PRODUCER));
            if (tid == 256) {
                load_q();
                for (int j = 0; j < n_kt; j++) load_kv(j);
            }
            return;
        }
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(FA3_REG_CONSUMER));
    } else {
        /* v4c: thread 0 fills the whole ring up front; the loop refills each stage after both groups
         * release it (below) */
        if (tid == 0) {
            load_q();
            for (int j = 0; j < min(NS, n_kt); j++) load_kv(j);
        }
    }

    /* consumers */
    const int cw = wg, wtid = tid & 127, warp = wtid >> 5, lane = tid & 31;
    const int wrow = row0 + cw * 64 + warp * 16; /* the warp's first query row */
    const int grow0 = wrow + (lane >> 2);        /* this thread's rows: grow0, grow0 + 8 */
    const uint32_t q_addr = sm(Qs) + cw * 64 * 128;
    auto k_addr = [&](int st) { return sm(Ks + st * C::KV_BYTES); };
    auto v_addr = [&](int st) { return sm(Vs + st * C::KV_BYTES); };
    auto need_mask = [&](int j) {
        const int kb = j * BN;
        return kb + BN > s_len || (causal && kb + BN - 1 > wrow);
    };
    /* S = Q K_j^T: D/16 k-steps; step kk is in box kk/4 at byte 32 (kk%4) of each 128-byte row */
    auto issue_s = [&](float *sacc, int st) {
        /* a descriptor's address field is (byte address >> 4) in its low bits (no carry: shared
         * addresses < 256 KiB), so offsets are added to one base descriptor per operand */
        const uint64_t qd = gdesc(q_addr, 16, 1024), kd = gdesc(k_addr(st), 16, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            const uint64_t a = qd + (((kk >> 2) * FA3_BM * 128 + (kk & 3) * 32) >> 4),
                           b = kd + (((kk >> 2) * BN * 128 + (kk & 3) * 32) >> 4);
            if (BN == 128) wgmma_m64n128k16<0>(sacc, a, b, kk > 0);
            else wgmma_m64n64k16<0>(sacc, a, b, kk > 0);
        }
        wgmma_commit();
    };
    /* O += P V_j: BN/16 k-steps of 16 keys (16 rows x 128 bytes = 2048 bytes); the D columns are KB
     * boxes of BN rows (LBO = BN * 128 bytes apart) */
    auto issue_pv = [&](float *oacc, uint32_t (*pf)[4], int st) {
        const uint64_t vd = gdesc(v_addr(st), BN * 128, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) {
            const uint64_t b = vd + ((kk * 2048) >> 4);
            if (D == 128) fa3_rs_n128(oacc, pf[kk], b, 1);
            else fa3_rs_n64(oacc, pf[kk], b, 1);
        }
        wgmma_commit();
    };

    /* Ping-pong (pingpong = 1): the two warpgroups take turns issuing their wgmma blocks (S_j and
     * P_{j-1} V_{j-1}), so the tensor core runs one group's block while the other does its softmax,
     * instead of both groups' wgmmas interleaving and both softmaxes waiting for both blocks. turn[w]
     * completes a phase when the other group's 4 warps have issued a block; group 1 opens the first
     * phase of turn[0]. Both groups issue n_kt + 1 blocks; the last arrival on turn[0] is unmatched
     * (harmless). mbarriers rather than named barriers: a broken count traps in mbar_wait, no hang. */
    int n_turn = 0;
    auto turn_wait = [&]() {
        if (pingpong) mbar_wait(&turn[cw], n_turn & 1);
    };
    auto turn_pass = [&]() {
        if (pingpong && lane == 0) mbar_arrive(&turn[cw ^ 1]);
        n_turn++;
    };
    if (pingpong && cw == 1 && lane == 0) mbar_arrive(&turn[0]);

    float o[D / 2], sacc[BN / 2], m[2] = { -INFINITY, -INFINITY }, l[2] = { 0.f, 0.f }, c[2];
    uint32_t p[BN / 16][4];
#pragma unroll
    for (int i = 0; i < D / 2; i++) o[i] = 0.f;
#pragma unroll
    for (int i = 0; i < BN / 2; i++) sacc[i] = 0.f;

    mbar_wait(qbar, 0);
    mbar_wait(&full_k[0], 0);
    turn_wait();
    issue_s(sacc, 0);
    turn_pass();
    wgmma_wait<0>();
    fa3_pin<BN / 2>(sacc);
    fa3_softmax<BN>(sacc, m, l, c, scale2, 0, grow0, s_len, causal, need_mask(0), lazy);
    fa3_pack_p<BN>(sacc, p);

    for (int j = 1; j < n_kt; j++) {
        const int st = j % NS, pst = (j - 1) % NS;
        mbar_wait(&full_k[st], (j / NS) & 1);
        /* every non-wgmma write to the registers both wgmmas use (softmax, rescale, P copy) is
         * pinned before the first fence: none may land inside the pipeline stage */
        fa3_pin<BN / 2>(sacc);
        fa3_pin<D / 2>(o);
        fa3_pin<BN / 4>(&p[0][0]);
        mbar_wait(&full_v[pst], ((j - 1) / NS) & 1);
        turn_wait();
        issue_s(sacc, st);
        issue_pv(o, p, pst);
        turn_pass();
        wgmma_wait<1>(); /* S_j done; P_{j-1} V_{j-1} may still run */
        fa3_pin<BN / 2>(sacc);
        fa3_softmax<BN>(sacc, m, l, c, scale2, j * BN, grow0, s_len, causal, need_mask(j), lazy);
        wgmma_wait<0>();
        fa3_pin<D / 2>(o);
        fa3_pin<BN / 4>(&p[0][0]); /* the in-flight wgmma read p until here */
        if (lane == 0) mbar_arrive(&empty[pst]);
        if constexpr (IN) { /* v4c: refill the stage just released with tile j - 1 + NS once the other group is done with it too */
            if (tid == 0 && j - 1 + NS < n_kt) load_kv(j - 1 + NS);
            __syncwarp();
        }
        /* lazy: after the first tiles a row's max rarely grows by 2^8, and a warp whose 16 rows all
         * kept theirs skips the 64 multiplies (a warp vote: no divergence) */
        fa3_rescale_o<D / 2>(o, c, lazy);
        fa3_pack_p<BN>(sacc, p);
    }
    {
        const int pst = (n_kt - 1) % NS;
        mbar_wait(&full_v[pst], ((n_kt - 1) / NS) & 1);
        fa3_pin<D / 2>(o);
        fa3_pin<BN / 4>(&p[0][0]);
        turn_wait();
        issue_pv(o, p, pst);
        turn_pass();
        wgmma_wait<0>();
        fa3_pin<D / 2>(o);
        fa3_pin<BN / 4>(&p[0][0]);
        if (lane == 0) mbar_arrive(&empty[pst]);
    }

#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
    const float i0 = l[0] > 0.f ? 1.f / l[0] : 0.f, i1 = l[1] > 0.f ? 1.f / l[1] : 0.f;
    gbf *out0 = O + ((size_t)hrow + grow0) * D + 2 * (lane & 3), *out1 = out0 + 8 * D;
#pragma unroll
    for (int i = 0; i < D / 8; i++) {
        if (grow0 < s_len) *(__nv_bfloat162 *)(out0 + i * 8) = __floats2bfloat162_rn(o[4 * i] * i0, o[4 * i + 1] * i0);
        if (grow0 + 8 < s_len)
            *(__nv_bfloat162 *)(out1 + i * 8) = __floats2bfloat162_rn(o[4 * i + 2] * i1, o[4 * i + 3] * i1);
    }
    if (lse && (lane & 3) == 0) {
        float *lr = lse + hrow;
        if (grow0 < s_len) lr[grow0] = (m[0] + log2f(l[0])) * FA3_LN2;
        if (grow0 + 8 < s_len) lr[grow0 + 8] = (m[1] + log2f(l[1])) * FA3_LN2;
    }
}

/* Heads per schedule section. req < 0: all heads, one section (v4, v4b, v4c); 0: as many as keep
 * their K and V (2 s d bf16 each) within half the L2, the rest left for Q, O and the section still
 * draining; > 0: req heads (the test's attn_v4e_sections_run). */
static int fa3_hsec(const attn_args *a, int req, cudaError_t *e)
{
    const int bh = a->b * a->h;
    if (req) return req < 0 || req > bh ? bh : req;
    int dev = 0, l2 = 0;
    *e = cudaGetDevice(&dev);
    if (*e == cudaSuccess) *e = cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev);
    const int64_t g = (int64_t)l2 / 2 / ((int64_t)4 * a->s * a->d);
    return (int)(g < 1 ? 1 : g > bh ? bh : g);
}

template <int D, int IN> static int fa3_launch(cudaStream_t st, const attn_args *a, int flags, int hsec_req)
{
    const int64_t rows = (int64_t)a->b * a->h * a->s;
    const int bh = a->b * a->h, n_qt = (int)attn_cdiv(a->s, FA3_BM);
    if (rows > INT_MAX || (int64_t)bh * n_qt > INT_MAX ||
        ((uintptr_t)a->q | (uintptr_t)a->k | (uintptr_t)a->v | (uintptr_t)a->o) % 16)
        return (int)cudaErrorNotSupported;
    CUtensorMap tq, tk, tv;
    cudaError_t e = tmap_2d(&tq, a->q, (int)rows, D, FA3_BM);
    typedef fa3_cfg<D, IN> C;
    if (e == cudaSuccess) e = tmap_2d(&tk, a->k, (int)rows, D, C::BN);
    if (e == cudaSuccess) e = tmap_2d(&tv, a->v, (int)rows, D, C::BN);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(attn_fa3_fwd<D, IN>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
    const int hsec = e == cudaSuccess ? fa3_hsec(a, hsec_req, &e) : bh;
    if (e != cudaSuccess) return (int)e;
    attn_fa3_fwd<D, IN><<<(unsigned)(bh * n_qt), C::THREADS, C::SMEM, st>>>(
        tq, tk, tv, (gbf *)a->o, a->lse, a->s, a->scale * FA3_LOG2E, a->causal, n_qt, bh, hsec, flags);
    return (int)cudaGetLastError();
}

template <int IN> static int fa3_run(void *stream, const attn_args *a, int flags, int hsec_req)
{
    if (!attn_args_ok(a, 0, NULL)) return (int)cudaErrorInvalidValue;
    return a->d == 64 ? fa3_launch<64, IN>((cudaStream_t)stream, a, flags, hsec_req)
                      : fa3_launch<128, IN>((cudaStream_t)stream, a, flags, hsec_req);
}

int attn_v4_run(void *stream, const attn_args *a) { return fa3_run<0>(stream, a, 0, -1); }
int attn_v4b_run(void *stream, const attn_args *a) { return fa3_run<0>(stream, a, FA3_PINGPONG, -1); }
int attn_v4c_run(void *stream, const attn_args *a) { return fa3_run<1>(stream, a, 0, -1); }
int attn_v4d_run(void *stream, const attn_args *a) { return fa3_run<1>(stream, a, 0, 0); }
int attn_v4e_run(void *stream, const attn_args *a) { return fa3_run<1>(stream, a, FA3_LAZY, 0); }
int attn_v4f_run(void *stream, const attn_args *a) { return fa3_run<1>(stream, a, FA3_LAZY | FA3_PINGPONG, 0); }
int attn_v4g_run(void *stream, const attn_args *a) { return fa3_run<0>(stream, a, FA3_LAZY, 0); }
extern "C" int attn_v4e_sections_run(void *stream, const attn_args *a, int hsec)
{
    if (hsec < 1) return (int)cudaErrorInvalidValue;
    return fa3_run<1>(stream, a, FA3_LAZY, hsec);
}
