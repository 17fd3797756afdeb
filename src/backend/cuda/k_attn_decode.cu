/* k_attn_decode.cu - split-KV ("flash-decoding") attention for q_len = 1, f16 cache, d in {64, 128},
 * as ONE kernel on tensor cores: the split partials are merged in-kernel by the last CTA to finish.
 *
 * Grid (split, kv head, sequence), 128 threads (4 warps). A CTA serves ALL the query heads of its
 * GQA group (group = n_head / n_head_kv <= 16), so each K/V byte is read from memory once per
 * group. Its split is keys [split * chunk, +chunk) of the sequence; CTAs whose split starts at or
 * beyond seq_len exit (the grid comes from max_seq_len).
 *
 * Measured (2026-12-04, H200, copy ceiling 4,267 GB/s, `aiinfra kernels bench decode`, Llama-3-8B
 * heads 32/8, d 128, f16 KV, 16-token blocks in random order, L2 evicted by a read pass before each
 * call; round 2 -> this version):
 *   b1 x 1024    11.4 ->  8.5 us    370 ->   496 GB/s   8.7% -> 11.6% (latency-bound)
 *   b1 x 8192    17.8 -> 16.2 us   1884 ->  2072 GB/s  44.5% -> 48.6%
 *   b1 x 32768   51.2 -> 43.6 us   2622 ->  3079 GB/s  61.9% -> 72.2%
 *   b8 x 8192    88.6 -> 74.6 us   3032 ->  3602 GB/s  71.6% -> 84.4%
 *   b64 x 2048  163.8 -> 138.8 us  3291 ->  3883 GB/s  77.7% -> 91.0%
 * Error vs a double reference 4e-4 .. 6e-4 of the row's max |o| (bound 5e-3).
 *
 * Design (round 3; round 2 = the same MMA core fed by 16-byte cp.async, 51.2 us = 62% at 1 x 32k):
 *  1. Tensor cores. The group is the M dimension of mma.sync m16n8k16 (heads padded to 16 rows,
 *     padding rows have q = 0): per 16-key tile a warp issues 16 MMAs for S = Q K^T (K through
 *     non-transposed ldmatrix: the col-major B fragment), 16 for O += P V (V through
 *     ldmatrix.trans, P repacked from the S accumulators as the A fragment, as in FA2), 2 x D/16
 *     ldmatrix.x4 and ~70 softmax/rescale instructions. The 16-row padding wastes tensor-core work
 *     (4x at G = 4), which is free: ~65 TFLOP/s at full bandwidth. No f16->f32 conversion of K, V.
 *  2. Bulk (TMA, non-tensor) copies. A paged row of one kv head (D * 2 = 256 contiguous bytes at
 *     d 128) is one cp.async.bulk completing on the stage's mbarrier: 32 copies per 16-key tile
 *     (lane l < 16 the K row of key l, lane 16 + l its V row). A read-only microbenchmark of
 *     exactly this access pattern (random 16-token blocks, 4 warps x 3 stages, 2 CTAs per SM)
 *     streamed 128 MB at 3,972 GB/s with bulk copies and at 2,895 GB/s with the 16-byte cp.async
 *     the round-2 kernel used (5 stages per warp: 3,080): the per-thread copies, not the scattered
 *     layout (sequential blocks: +3%), capped the kernel. Bulk copies cannot swizzle, so smem rows
 *     are padded to D + 8 halves: the 8 rows of an ldmatrix phase then fall in distinct banks.
 *  3. Bytes in flight: each warp owns an NS-stage ring and keeps NS - 1 tiles loading while it
 *     computes one. d 128: NS = 3, 102 KB per CTA, 2 CTAs (8 warps) per SM, 128 KB in flight per
 *     SM; d 64: NS = 4, 72 KB per CTA, 3 CTAs per SM.
 *  4. Short dependent chains at small contexts: the block-table entries of the first NS - 1 tiles
 *     are loaded speculatively (any key below max_seq_len is inside the table) in the same round
 *     trip as seq_len, before the PDL wait (they are host-uploaded: that round trip overlaps the
 *     previous kernel's tail), q is loaded after the first copies are issued, splits go down to 64 keys
 *     (one tile per warp) so 1 x 1k spreads over 128 CTAs, and the last-CTA merge is one pass (a
 *     thread loads (m, l, its float4 column) of 16 splits at once): b1 x 1k went from 11.4 to 8.2 us.
 *  5. Q is rounded to f16 once (A fragments in registers for the whole loop); scores are scaled by
 *     scale * log2 e in fp32 after the MMA and the softmax stays in fp32 in the log2 domain (ex2).
 *     P is rounded to f16 for P.V (as in FA2); the row sum l uses the fp32 P. Error vs a double
 *     reference: ~5e-4 of the row's max |o| (bench), inside the tests' 3e-3 / 5e-3 bounds.
 *
 * Shared memory: per warp NS stages of (K tile, V tile), each [16 keys][D + 8] f16 (row padding: see
 * 2), one mbarrier per stage (static). The end-of-kernel merge of the 4 warps reuses the stages.
 *
 * Finish (kept from round 1): the 4 warps merge in shared memory into one partial (m, l, o[D]) per
 * head; a sequence that ran in a single CTA (n_act = 1) writes its output directly. Otherwise each
 * CTA stores its partial in `work`, fences, and bumps the (sequence, kv head) counter; the CTA that
 * draws the last ticket merges the n_act partials in split order, 16 at a time (bitwise
 * reproducible whichever CTA is last) and resets the counter to 0.
 *
 * work layout: KATTN_DEC_COUNTERS uint32 counters (index s * n_head_kv + kvh; at a fixed place so
 * calls with any n_seq share them), then the partials (n_seq, n_head, n_split, D + 4) floats.
 *
 * Invariants: 1. a processed tile always holds a valid key (tiles start below k_end), so every
 * row's running max is finite after it (padding rows score 0); keys of a tile at or past k_end are
 * never read: their V rows are zeroed in shared memory (P = 0 must not meet a stale NaN), their
 * scores are replaced by -inf (a stale K row is harmless); 2. every tile issued is waited for, so no
 * bulk copy is in flight when the stages are reused by the merge or the CTA exits; 3. a warp with no tile keeps
 * m = -inf, l = 0, o = 0 (weight 0 in the merges); 4. exactly the n_act = ceil(seq_len / chunk)
 * CTAs that run take a ticket, so the last ticket is n_act - 1; a sequence with q_len 0 touches
 * nothing; 5. control flow around ldmatrix/mma/shuffles/mbarrier waits is warp-uniform.
 */
#include "backend/cuda/k_attn.h"
#include "backend/cuda/cuk_launch.h"
#include "backend/cuda/cuk_mma.cuh"

#define DEC_TK 16 /* keys per warp tile (the k extent of one P.V mma) */
#define DEC_WARPS 4
#define DEC_M 16  /* mma rows: the group's query heads, zero-padded */
#define DEC_MB 16 /* splits per load batch of the last-CTA merge */

/* Stages per warp: d 128 -> 3 (102 KB per CTA, 2 CTAs/SM), d 64 -> 4 (72 KB, 3 CTAs/SM). A tile row
 * is padded from D to D + 8 halves (RS): the bulk copies cannot swizzle, and a 16-byte pad puts the
 * 8 rows an ldmatrix phase reads in distinct bank groups. */
template <int D> struct dec_cfg {
    static constexpr int NS = D == 128 ? 3 : 4;
    static constexpr int RS = D + 8;            /* halves per smem row */
    static constexpr int TILE = DEC_TK * RS;    /* halves of one K (or V) tile */
    static constexpr int STAGE = 2 * TILE;      /* K then V */
    static constexpr size_t bytes = (size_t)DEC_WARPS * NS * STAGE * 2;
    static constexpr int MIN_CTAS = D == 128 ? 2 : 3;
    /* the warp merge needs (DEC_WARPS, DEC_M, D + 4) floats of the stages */
    static_assert((size_t)DEC_WARPS * DEC_M * (D + 4) * 4 <= bytes, "warp merge fits the stages");
    static_assert((size_t)MIN_CTAS * (bytes + 1024 + 256) <= 228 * 1024, "MIN_CTAS rings fit an SM");
};

/* Bulk (TMA, non-tensor) copy of `bytes` contiguous bytes global -> shared, completing on mbarrier
 * `bar` (shared-window addresses; the CTA is its own cluster). */
static __device__ __forceinline__ void dec_bulk(uint32_t saddr, const void *gmem, uint32_t bytes, uint32_t bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(saddr),
                 "l"(gmem), "r"(bytes), "r"(bar)
                 : "memory");
}
static __device__ __forceinline__ void dec_bar_init(uint32_t bar)
{
    asm volatile("mbarrier.init.shared.b64 [%0], 1;\n" ::"r"(bar) : "memory");
}
static __device__ __forceinline__ void dec_bar_expect(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void dec_bar_wait(uint32_t bar, uint32_t parity)
{
    asm volatile("{\n.reg .pred p;\nDEC_WAIT:\n"
                 "mbarrier.try_wait.parity.shared.b64 p, [%0], %1;\n@!p bra DEC_WAIT;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}

template <int D>
__global__ void __launch_bounds__(128, dec_cfg<D>::MIN_CTAS)
    kattn_decode_split(const cuk_attn_args a, int n_split, int chunk, void *work)
{
    using cfg = dec_cfg<D>;
    constexpr int NS = cfg::NS, RS = cfg::RS, TILE = cfg::TILE, STAGE = cfg::STAGE;
    constexpr int KS = D / 16;                 /* k-steps of Q.K; also V ldmatrix.x4 per tile */
    constexpr int NT = D / 8;                  /* n-tiles of O */
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) unsigned long long bars[DEC_WARPS][NS]; /* one mbarrier per stage */
    __half *stages = (__half *)smem;
    const int split = blockIdx.x, kvh = blockIdx.y, s = blockIdx.z;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int k_begin = split * chunk;
    const int group = a.n_head / a.n_head_kv;

    /* ---- 0. prologue: everything the first copies need that does not depend on seq_len is loaded
     * in the same round trip as seq_len itself: the block-table entries of this warp's first NS - 1
     * tiles are read speculatively for any key below max_seq_len (inside the table: max_seq_len <=
     * max_blocks * block_size); entries past seq_len are never used as addresses. */
    const int32_t *bt = a.block_tables + (size_t)s * a.max_blocks;
    const int bsh = __ffs(a.block_size) - 1, bmask = a.block_size - 1;
    const int kmax = min(a.max_seq_len, k_begin + chunk);
    /* Copy mapping: lane l < 16 copies the K row of key l of a tile, lane 16 + l its V row: one bulk
     * copy of D * 2 contiguous bytes each (a paged row of one kv head), 32 per 16-key tile. */
    const int ckey = lane & 15;
    /* Block of key ckey of local tile i (local i is tile warp + 4 i of the split); 0 past max_seq_len. */
    auto lookup = [&](int i) -> int {
        const int j = k_begin + (warp + DEC_WARPS * i) * DEC_TK + ckey;
        return j < kmax ? __ldg(bt + (j >> bsh)) : 0;
    };
    const uint32_t bar0 = (uint32_t)__cvta_generic_to_shared(&bars[warp][0]);
    if (lane == 0)
        for (int i = 0; i < NS; i++) dec_bar_init(bar0 + 8 * i);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    __syncwarp();
    int pf[NS - 1];
#pragma unroll
    for (int i = 0; i < NS - 1; i++) pf[i] = lookup(i);
    const int seq_len = a.seq_len[s];
    const int q0 = a.q_start[s], q_len = a.q_start[s + 1] - q0;
    if (q_len < 1 || k_begin >= seq_len) return; /* seq_len 0 is outside the contract */
    const int k_end = min(seq_len, k_begin + chunk);
    /* Everything above reads only what the host uploaded before the step (sequence lengths, query
     * starts, block tables), so it runs while the previous kernel (rope + KV store) drains; q and the
     * new K/V rows it wrote are read only after this wait (cuk_launch.h). */
    cuk_pdl_wait();

    const __half *kc = (const __half *)a.k_cache + (size_t)kvh * D, *vc = (const __half *)a.v_cache + (size_t)kvh * D;
    const size_t row = (size_t)a.n_head_kv * D;
    __half *ring = stages + warp * NS * STAGE;
    const int n_tiles = (k_end - k_begin + DEC_TK - 1) / DEC_TK;
    const int nt = warp < n_tiles ? (n_tiles - warp + DEC_WARPS - 1) / DEC_WARPS : 0;
    /* This lane's row in stage 0 (K rows for lanes < 16, V rows above): a copy is one add. */
    const uint32_t dst = (uint32_t)__cvta_generic_to_shared(ring + (lane >> 4) * TILE + ckey * RS);
    const __half *src_base = lane < 16 ? kc : vc;
    /* Starts the copies of local tile i (its key's block from lookup) into stage `st`. Keys at or
     * past k_end are not read: their V rows are zeroed instead (P = 0 there, and 0 * a stale NaN
     * would leak), their K rows are left as they are (their scores are replaced by -inf). */
    auto issue = [&](int i, int blk, int st) {
        if (i < nt) { /* warp-uniform */
            const int kt = k_begin + (warp + DEC_WARPS * i) * DEC_TK;
            const int nv = min(DEC_TK, k_end - kt); /* >= 1: the tile starts below k_end */
            const uint32_t bar = bar0 + 8 * st, d = dst + (uint32_t)(st * STAGE * 2);
            /* this stage was last read by ldmatrix (generic proxy) before the __syncwarp at the top of
             * the loop; order those reads before the async-proxy writes */
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            if (lane == 0) dec_bar_expect(bar, (uint32_t)(nv * 2 * D * 2));
            __syncwarp();
            if (ckey < nv) {
                const size_t off = ((size_t)blk * a.block_size + ((kt + ckey) & bmask)) * row;
                dec_bulk(d, src_base + off, D * 2, bar);
            } else if (lane >= 16) {
                __half *z = ring + st * STAGE + TILE + ckey * RS;
#pragma unroll
                for (int u = 0; u < D / 8; u++) *(uint4 *)(z + 8 * u) = make_uint4(0, 0, 0, 0);
            }
        }
    };
#pragma unroll
    for (int i = 0; i < NS - 1; i++) issue(i, pf[i], i);
    int nxt = lookup(NS - 1); /* block of the tile issued in the first iteration */

    /* Q as mma A fragments (f16), rows r0 = lane / 4 and r0 + 8 = heads of the group (0 past it);
     * loaded after the first copies are on their way, so the two round trips overlap. */
    const int r0 = lane >> 2, cq = (lane & 3) * 2;
    uint32_t qa[KS][4];
    {
        const float *qp = a.q + (size_t)q0 * a.q_stride + (size_t)kvh * group * D;
        const bool ok0 = r0 < group, ok1 = r0 + 8 < group;
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            const int c = kk * 16 + cq;
            float2 v[4];
            v[0] = ok0 ? __ldg((const float2 *)(qp + (size_t)r0 * D + c)) : make_float2(0.f, 0.f);
            v[1] = ok1 ? __ldg((const float2 *)(qp + (size_t)(r0 + 8) * D + c)) : make_float2(0.f, 0.f);
            v[2] = ok0 ? __ldg((const float2 *)(qp + (size_t)r0 * D + c + 8)) : make_float2(0.f, 0.f);
            v[3] = ok1 ? __ldg((const float2 *)(qp + (size_t)(r0 + 8) * D + c + 8)) : make_float2(0.f, 0.f);
#pragma unroll
            for (int i = 0; i < 4; i++) qa[kk][i] = cuk_pack_f16(v[i].x, v[i].y);
        }
    }
    const float qscale = a.scale * KATTN_LOG2E;

    float o[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f; /* rows r0, r0 + 8; l: this lane's columns */

    int st_c = 0, st_i = NS - 1; /* stages of the tile computed / issued next (i % NS, (i - 1) % NS) */
    uint32_t phase = 0;          /* parity of stage st_c's barrier for tile i: (i / NS) & 1 */
    /* ldmatrix lane addresses inside a tile: K (non-transposed), V (transposed) */
    const int k_row = ((lane >> 4) << 3) + (lane & 7), k_chk = (lane >> 3) & 1;
    const int v_row = (((lane >> 3) & 1) << 3) + (lane & 7), v_chk = lane >> 4;

    for (int i = 0; i < nt; i++) {
        dec_bar_wait(bar0 + 8 * st_c, phase);
        __syncwarp(); /* tile i landed (and its zeroed rows are visible); stage (i - 1) % NS is free again */
        {
            const int cur = nxt;
            nxt = lookup(i + NS);
            issue(i + NS - 1, cur, st_i);
        }
        const __half *ks = ring + st_c * STAGE, *vs = ks + TILE;
        st_i = st_c;
        if (st_c == NS - 1) {
            st_c = 0;
            phase ^= 1u;
        } else {
            st_c++;
        }

        /* S (16 heads x 16 keys) = Q K^T: n-tile j = keys 8j .. 8j + 7 */
        float sc[2][4] = { { 0.f, 0.f, 0.f, 0.f }, { 0.f, 0.f, 0.f, 0.f } };
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            uint32_t b[4];
            cuk_ldsm4(b, ks + k_row * RS + (2 * kk + k_chk) * 8);
            cuk_mma_f16(sc[0], qa[kk], b[0], b[1]);
            cuk_mma_f16(sc[1], qa[kk], b[2], b[3]);
        }
        /* online softmax (log2 domain); keys past the split / sequence score -inf */
        const int kt0 = k_begin + (warp + DEC_WARPS * i) * DEC_TK;
        float mx0 = m0, mx1 = m1;
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const bool valid = kt0 + 8 * j + cq + e < k_end;
                sc[j][e] = valid ? sc[j][e] * qscale : -INFINITY;
                sc[j][2 + e] = valid ? sc[j][2 + e] * qscale : -INFINITY;
                mx0 = fmaxf(mx0, sc[j][e]);
                mx1 = fmaxf(mx1, sc[j][2 + e]);
            }
#pragma unroll
        for (int off = 1; off < 4; off <<= 1) {
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
        }
        const float c0 = kattn_exp2(m0 - mx0), c1 = kattn_exp2(m1 - mx1); /* first tile: exp2(-inf) = 0 */
        m0 = mx0;
        m1 = mx1;
        float ps0 = 0.f, ps1 = 0.f;
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                sc[j][e] = kattn_exp2(sc[j][e] - mx0);
                sc[j][2 + e] = kattn_exp2(sc[j][2 + e] - mx1);
                ps0 += sc[j][e];
                ps1 += sc[j][2 + e];
            }
        l0 = fmaf(l0, c0, ps0);
        l1 = fmaf(l1, c1, ps1);
#pragma unroll
        for (int n = 0; n < NT; n++) {
            o[n][0] *= c0;
            o[n][1] *= c0;
            o[n][2] *= c1;
            o[n][3] *= c1;
        }
        /* O += P V: P (16 heads x 16 keys) as the A fragment straight from the S accumulators */
        const uint32_t pa[4] = { cuk_pack_f16(sc[0][0], sc[0][1]), cuk_pack_f16(sc[0][2], sc[0][3]),
                                 cuk_pack_f16(sc[1][0], sc[1][1]), cuk_pack_f16(sc[1][2], sc[1][3]) };
#pragma unroll
        for (int np = 0; np < KS; np++) {
            uint32_t b[4];
            cuk_ldsm4_t(b, vs + v_row * RS + (2 * np + v_chk) * 8);
            cuk_mma_f16(o[2 * np], pa, b[0], b[1]);
            cuk_mma_f16(o[2 * np + 1], pa, b[2], b[3]);
        }
    }
    /* every issued tile (i < nt) was waited for: no copy is in flight */

    /* ---- 1. the 4 warps of this CTA merge in shared memory (the stages are free: every warp has
     * drained its copies) into one (m, l, o[D]) per head. */
    __syncthreads();
    constexpr int PS = D + 4; /* floats per partial: m, l, 2 pad (16-byte alignment), o[D] */
    float *wm = (float *)smem; /* (DEC_WARPS, DEC_M, PS) */
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    {
        float *p0 = wm + (warp * DEC_M + r0) * PS, *p1 = p0 + 8 * PS;
        if ((lane & 3) == 0) {
            p0[0] = m0;
            p0[1] = l0;
            p1[0] = m1;
            p1[1] = l1;
        }
#pragma unroll
        for (int n = 0; n < NT; n++) {
            *(float2 *)(p0 + 4 + 8 * n + cq) = make_float2(o[n][0], o[n][1]);
            *(float2 *)(p1 + 4 + 8 * n + cq) = make_float2(o[n][2], o[n][3]);
        }
    }
    __syncthreads();

    /* Splits of this sequence that run (start below seq_len); only they take part in the merge. */
    const int n_act = min(n_split, (seq_len + chunk - 1) / chunk);
    float *parts = (float *)((char *)work + KATTN_DEC_COUNTER_BYTES);
    constexpr int C4 = D / 4; /* float4 columns per head */
    for (int it = tid; it < group * C4; it += 128) {
        const int g = it / C4, c = it % C4;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) M = fmaxf(M, wm[(w * DEC_M + g) * PS]);
        float L = 0.f;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) {
            const float *pw = wm + (w * DEC_M + g) * PS;
            const float sc = kattn_exp2(pw[0] - M); /* an idle warp has m = -inf: weight 0 */
            const float4 v = *(const float4 *)(pw + 4 + c * 4);
            L = fmaf(sc, pw[1], L);
            acc.x = fmaf(sc, v.x, acc.x); acc.y = fmaf(sc, v.y, acc.y);
            acc.z = fmaf(sc, v.z, acc.z); acc.w = fmaf(sc, v.w, acc.w);
        }
        const int h = kvh * group + g;
        if (n_act == 1) { /* the whole sequence was this CTA's: finish here */
            const float inv = 1.f / L;
            *(float4 *)(a.out + (size_t)q0 * a.n_head * D + (size_t)h * D + c * 4) =
                make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
        } else {
            float *pw = parts + (((size_t)s * a.n_head + h) * n_split + split) * PS;
            if (c == 0) {
                pw[0] = M;
                pw[1] = L;
            }
            *(float4 *)(pw + 4 + c * 4) = acc;
        }
    }
    if (n_act == 1) return;

    /* ---- 2. publish the partial; the last of the n_act CTAs of (sequence, kv head) to arrive
     * merges them all. Release: every writer fences before the barrier, then one atomic. */
    __shared__ int last;
    __threadfence();
    __syncthreads();
    if (tid == 0) {
        unsigned *cnt = (unsigned *)work + (size_t)s * a.n_head_kv + kvh;
        const unsigned ticket = atomicAdd(cnt, 1u);
        last = ticket == (unsigned)(n_act - 1);
        /* Every CTA of the group has counted: leave 0 for the next call (a later launch on this
         * stream starts only after this grid has completed, so nothing races with the reset). */
        if (last) atomicExch(cnt, 0u);
    }
    __syncthreads();
    if (!last) return;
    __threadfence(); /* acquire: the other CTAs' partials are read from L2 (ld.cg), never a stale L1 */

    /* ---- 3. merge the n_act partials of each head in split order (the same order whichever CTA is
     * last: bitwise reproducible), in one pass: a thread owns one float4 column of one head and
     * loads (m, l, column) of DEC_MB splits at once (one L2 round trip per DEC_MB splits; (m, l)
     * are the same address for the 32 threads of a head: one broadcast request), rescaling its
     * running sum whenever a batch raises the maximum. No shared memory, no barrier. */
    const size_t head0 = (size_t)s * a.n_head + (size_t)kvh * group;
    for (int it = tid; it < group * C4; it += 128) {
        const int g = it / C4, c = it % C4;
        const float *pb = parts + (head0 + g) * n_split * PS;
        float M = -INFINITY, L = 0.f;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int p0 = 0; p0 < n_act; p0 += DEC_MB) {
            float bm[DEC_MB], bl[DEC_MB];
            float4 bv[DEC_MB];
#pragma unroll
            for (int u = 0; u < DEC_MB; u++) {
                const float *pw = pb + (size_t)min(p0 + u, n_act - 1) * PS;
                bm[u] = __ldcg(pw);
                bl[u] = __ldcg(pw + 1);
                bv[u] = __ldcg((const float4 *)(pw + 4 + c * 4));
            }
            float Mn = M;
#pragma unroll
            for (int u = 0; u < DEC_MB; u++)
                if (p0 + u < n_act) Mn = fmaxf(Mn, bm[u]); /* every active split has a finite m */
            const float r = kattn_exp2(M - Mn); /* first batch: exp2(-inf) = 0 */
            L *= r;
            acc.x *= r; acc.y *= r; acc.z *= r; acc.w *= r;
            M = Mn;
#pragma unroll
            for (int u = 0; u < DEC_MB; u++) {
                const float w = p0 + u < n_act ? kattn_exp2(bm[u] - M) : 0.f;
                L = fmaf(w, bl[u], L);
                acc.x = fmaf(w, bv[u].x, acc.x); acc.y = fmaf(w, bv[u].y, acc.y);
                acc.z = fmaf(w, bv[u].z, acc.z); acc.w = fmaf(w, bv[u].w, acc.w);
            }
        }
        const float inv = 1.f / L;
        *(float4 *)(a.out + (size_t)q0 * a.n_head * D + (size_t)(kvh * group + g) * D + c * 4) =
            make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
    }
}

int kattn_decode_shape_ok(const cuk_attn_args *a)
{
    const int group = a->n_head / a->n_head_kv;
    return a->kv_type == DTYPE_F16 && a->head_dim == a->head_dim_v && (a->head_dim == 64 || a->head_dim == 128) &&
           group <= 16;
}

int kattn_decode_supported(const cuk_attn_args *a)
{
    return kattn_decode_shape_ok(a) && ((uintptr_t)a->k_cache & 15) == 0 && ((uintptr_t)a->v_cache & 15) == 0 &&
           ((uintptr_t)a->out & 15) == 0 && ((uintptr_t)a->work & 15) == 0;
}

/* CTAs of kattn_decode_split<D> resident on the whole GPU (SMs x occupancy); MIN_CTAS x 132 when
 * the device cannot be asked (no GPU: the launch fails anyway). */
template <int D> static long dec_slots_d(void)
{
    int dev = 0, sms = 0, occ = 0;
    const size_t sm = dec_cfg<D>::bytes;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaFuncSetAttribute(kattn_decode_split<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm) !=
            cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kattn_decode_split<D>, 128, sm) != cudaSuccess ||
        sms < 1 || occ < 1) {
        (void)cudaGetLastError();
        return (long)dec_cfg<D>::MIN_CTAS * 132;
    }
    return (long)sms * occ;
}

static long dec_slots(const cuk_attn_args *a)
{
    return a->head_dim == 64 ? dec_slots_d<64>() : dec_slots_d<128>();
}

/* chunk (keys per split, a multiple of KATTN_DEC_CHUNK_ALIGN) and the split count.
 * No split at all when the (sequence, kv head) pairs already fill every resident CTA slot (or
 * exceed the counters). Otherwise the split count with the least estimated time: waves of
 * resident CTAs x (keys per CTA + a fixed per-CTA cost of about 48 keys: filling the tile
 * pipeline and the finish) + the last CTA's merge (about one key per split), splits of at least
 * 64 keys (one tile per warp: short contexts spread over more SMs, which shortens the dependent
 * chain of tiles per warp) and at most 4 x slots CTAs in all (the work bound's cap).
 * Batch 1 at long context spreads over every SM in one wave. */
static void dec_plan(const cuk_attn_args *a, int *n_split, int *chunk)
{
    const long pairs = (long)a->n_seq * a->n_head_kv;
    const long slots = dec_slots(a);
    const long full = ((long)a->max_seq_len + KATTN_DEC_CHUNK_ALIGN - 1) / KATTN_DEC_CHUNK_ALIGN * KATTN_DEC_CHUNK_ALIGN;
    *n_split = 1;
    *chunk = (int)full;
    if (pairs >= slots || pairs > KATTN_DEC_COUNTERS) return;
    long max_ns = (a->max_seq_len + 63) / 64;
    if (max_ns > 4 * slots / pairs) max_ns = 4 * slots / pairs;
    long best_ns = 1, best_ch = full;
    double best_cost = 0;
    for (long ns = 1; ns <= max_ns; ns++) {
        long ch = (a->max_seq_len + ns - 1) / ns;
        ch = (ch + KATTN_DEC_CHUNK_ALIGN - 1) / KATTN_DEC_CHUNK_ALIGN * KATTN_DEC_CHUNK_ALIGN;
        const long real_ns = (a->max_seq_len + ch - 1) / ch;
        const long waves = (pairs * real_ns + slots - 1) / slots;
        const double cost = (double)waves * (double)(ch + 48) + (real_ns > 1 ? (double)real_ns : 0.0);
        if (ns == 1 || cost < best_cost) {
            best_cost = cost;
            best_ns = real_ns;
            best_ch = ch;
        }
    }
    *chunk = (int)best_ch;
    *n_split = (int)best_ns;
}

int kattn_decode_splits(const cuk_attn_args *a)
{
    int ns, ch;
    dec_plan(a, &ns, &ch);
    return ns;
}

size_t kattn_decode_work_need(const cuk_attn_args *a)
{
    const int ns = kattn_decode_splits(a);
    const size_t parts = ns > 1 ? (size_t)a->n_seq * a->n_head * ns * (a->head_dim + 4) * sizeof(float) : 0;
    return KATTN_DEC_COUNTER_BYTES + parts;
}

size_t kattn_decode_work_bound(const cuk_attn_args *a)
{
    /* A call splits only when n_seq * n_head_kv * n_split <= 4 x slots, so its partials are at most
     * 4 x slots x group of them, whatever n_seq and max_seq_len. */
    const int group = a->n_head / a->n_head_kv;
    return KATTN_DEC_COUNTER_BYTES + (size_t)(4 * dec_slots(a)) * group * (a->head_dim + 4) * sizeof(float);
}

template <int D> static cudaError_t dec_launch(cudaStream_t st, const cuk_attn_args *a, int ns, int ch)
{
    const size_t sm = dec_cfg<D>::bytes;
    cudaError_t e = cudaFuncSetAttribute(kattn_decode_split<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    if (e != cudaSuccess) return e;
    dim3 grid((unsigned)ns, (unsigned)a->n_head_kv, (unsigned)a->n_seq);
    cuk_launch(kattn_decode_split<D>, dim3(grid), dim3(128), sm, st, *a, ns, ch, a->work);
    return cudaGetLastError();
}

cudaError_t kattn_decode_launch(cudaStream_t st, const cuk_attn_args *a)
{
    int ns, ch;
    dec_plan(a, &ns, &ch);
    return a->head_dim == 64 ? dec_launch<64>(st, a, ns, ch) : dec_launch<128>(st, a, ns, ch);
}
