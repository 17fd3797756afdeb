/* gemm_streamk.cu - GEMM ladder v11 (v9 + stream-K), v12 (v10 + stream-K) and v13 (v12 with TMA
 * stores of C): C (M, N) = A (M, K) x B (K, N), bf16 in, fp32 accumulate, bf16 out; same shape
 * rules, tile (128 x 256 x 64 per k-block) and shared-memory layout as v9/v10 (gemm_hopper.cu's header).
 *
 * v13 (measured 2026-12-04, second session, H200, cuBLASLt in the same runs): at 8192^3 790-812
 * TFLOP/s = 0.979-1.007 of cuBLASLt over 5 runs (v12 691-774 = 0.86-0.96 in the same runs); 4096^3
 * 0.98, 4096 x 14336 x 4096 0.96-0.97, 4096 x 4096 x 14336 0.97 (v12 0.87-0.95). Two changes:
 *  1. the epilogue (store_acc_tma): v12's consumers wrote C with 64 4-byte st.global per thread and
 *     issued no wgmma until they were done; v13 stages each 64 x 64 chunk in swizzled shared memory
 *     (conflict-free st.shared) and one thread hands it to a TMA store; nobody waits for the store,
 *     so the next tile's wgmmas start at once and C leaves in full lines. 32 KiB more shared memory
 *     (2 chunk buffers per consumer warpgroup: 225 KiB in all).
 *  2. groups of 8 tile pairs (16 tile rows) in the grouped order instead of 4: the 66 pairs in flight
 *     then span ~2048 rows of A x ~2112 columns of B (v12: 1024 x 4224), the squarest footprint, so
 *     fewer bytes per FLOP come from HBM. Measured alone at 8192^3 (one run each): v12 with 8-pair
 *     groups 774 against 708 / 744 with 4; v13 with 4-pair groups 774-794, with 8 790-812.
 *
 * WHY (measured round 1, H200): v9 reached 0.93x of cuBLASLt at 8192^3 and fell to 0.24..0.73x at
 * M <= 512. Both losses are scheduling, not the mainloop:
 *  - tail wave: 8192^3 has 64 x 32 = 2048 tiles on 132 SMs = 15.5 waves; the 16th round runs 68
 *    tiles while 64 SMs idle: 3% of the run (4096 x 14336 x 4096: 1792 tiles, 13.6 waves, 3%).
 *  - few tiles: M = 1..128 gives tiles_n tiles (56 at N = 14336, 16 at N = 4096), so 16..56 of
 *    132 SMs stream B from HBM; the rest idle (v9 at 1 x 4096 x 14336: 20% of the copy rate).
 * Stream-K fixes both with one schedule. "Units" are tiles (v11) or vertically adjacent tile pairs
 * run by a 2-CTA cluster (v12); "workers" are CTAs (v11) or clusters (v12), one per SM (pair).
 *   1. data-parallel part: the first dp_units = floor(units / W) * W units, whole, round robin
 *      (unit u to worker u % W), in the grouped order of v9/v10 (L2 reuse).
 *   2. stream-K part: the remaining R = units - dp_units units' k-blocks, R * nk in all, split into
 *      w_sk contiguous equal ranges, one per worker (w_sk = W, fewer when a range would be shorter
 *      than SK_MIN_KB k-blocks). A range crosses unit boundaries; each piece is a "segment" (unit,
 *      kb0, kb1). With R < W every range is shorter than nk, so every worker ends within one tile
 *      time of every other: the tail is R/W of a tile instead of a whole one, and at M = 1 all
 *      132 SMs stream their share of B.
 *   The remainder goes stream-K only when R <= 3W/4: above that the gain (< 1/4 tile time) does
 *   not pay for writing and re-reading the partials.
 * Partial tiles (fixup), deterministic, nobody waits: a segment that does not cover all of its
 * unit's k-blocks writes its fp32 accumulators to its own workspace slot (2 slots per worker: its
 * range's first and last segment), fences, and adds its k-block count to the (unit, CTA rank,
 * warpgroup) counter. The warpgroup that brings the counter to nk is the last one; it sums every
 * contributor's partial in worker order (its own from registers, at its place in that order) and
 * stores C. The sum ((p0 + p1) + p2) ... is the same whichever contributor finishes last, so two
 * runs give the same bits. Counters are zeroed by a memset on the stream before each launch. Rows
 * past M are neither written nor read (at M = 1 a partial is 4 threads' 512 bytes, not 128 KiB).
 * Each consumer warpgroup (64 rows of the tile) runs the protocol on its own, synchronised by a
 * named barrier of its 128 threads; the producer keeps loading the next segment meanwhile.
 *
 * Workspace (gemm_work_size): int counters (R * CL * 2), then per worker 2 slots x CL CTAs x 2
 * warpgroups of 64 x 256 fp32 (64 KiB each) laid out [float4 j (32)][thread (128)] so a warpgroup's
 * write and read of a slot are fully coalesced 16-byte accesses.
 */
#include "kernels/gemm/gemm_hopper.cuh"

#define SK_BM 128
#define SK_BN 256
#define SK_ST 4
#define SK_STAGE (A_TILE(SK_BM) + B_TILE(SK_BN))
#define SK_SMEM (SK_ST * SK_STAGE + 1024 + 128)
#define SK_CBUF 8192      /* v13: one 64 x 64 bf16 chunk of C staged for a TMA store */
#define SK_SMEM_EPI (SK_SMEM + 4 * SK_CBUF) /* + 2 chunk buffers per consumer warpgroup */
#define SK_GROUP_TILES 8  /* tile rows per group of the grouped order (4 pairs for v12) */
#define SK_GROUP_TILES_V13 16 /* v13: 8 pairs, so the 66 pairs in flight span ~2048 rows x ~2112 columns */
#define SK_MIN_KB 4       /* fewest k-blocks per stream-K range */
#define SK_SLOT_F4 (32 * 128) /* float4s per warpgroup slot: 64 x 256 fp32 */

typedef struct sk_params {
    gbf *C;          // (M, N)
    float4 *part;    // (W * 2 slots * CL * 2 warpgroups, 32, 128) partial accumulators
    int *cnt;        // (R * CL * 2) k-blocks accumulated per (stream-K unit, rank, warpgroup)
    int M, N, K, nk; // nk = cdiv(K, 64)
    int units_m, tiles_n, n_units, dp_units, sk_units, w_sk;
    int group;       // unit rows per group of the grouped order
} sk_params;

/* Unit u -> (unit row, tile column) in groups of `group` unit rows walked column by column. */
__device__ __forceinline__ void sk_coords(int u, int units_m, int tiles_n, int group, int *um, int *tn)
{
    const int per_group = group * tiles_n, first = u / per_group * group;
    const int rows = min(group, units_m - first), r = u % per_group;
    *um = first + r % rows;
    *tn = r / rows;
}

/* First global stream-K k-block of worker x's range (x = w_sk: the end). */
__device__ __forceinline__ long long sk_begin(const sk_params &p, int x)
{
    return (long long)x * p.sk_units * p.nk / p.w_sk;
}

/* Calls f(unit, kb0, kb1) for each segment of worker w, in order: its data-parallel units, then
 * the pieces of its stream-K range. Producer and consumers walk the same list. */
template <typename F> __device__ __forceinline__ void sk_for_each(const sk_params &p, int w, int W, F f)
{
    for (int u = w; u < p.dp_units; u += W) f(u, 0, p.nk);
    if (w >= p.w_sk) return;
    for (long long g = sk_begin(p, w), e = sk_begin(p, w + 1); g < e;) {
        const int q = (int)(g / p.nk), kb0 = (int)(g % p.nk);
        const int kb1 = (int)min((long long)p.nk, kb0 + (e - g));
        f(p.dp_units + q, kb0, kb1);
        g += kb1 - kb0;
    }
}

__device__ __forceinline__ void named_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }

/* v13's epilogue: writes a warpgroup's 64 x 256 fp32 accumulator tile d (store_acc's register
 * layout) to C at (r0, c0) as 4 chunks of 64 x 64 bf16, each staged in one of the warpgroup's two
 * 8 KiB buffers `buf` (128-byte swizzle, the layout of tmC's 64 x 64 box) and written by one TMA
 * store that clips rows >= M and columns >= N. The consumers do not wait for the stores: thread 0
 * waits only until the store that last read a buffer is done reading it (wait_group.read 1)
 * before the buffer is rewritten, so the next tile's wgmmas start while C drains. Swizzled
 * st.shared: in a warp, lane l writes row 16w + l/4 (+ 8) at 16-byte chunk j ^ (row % 8), byte
 * 4 (l % 4): 8 rows x 4 lanes cover all 32 banks once, no conflict. Chunk c uses buffer c % 2;
 * chunk 0 waits for all earlier stores to have read (those of the previous tile, a mainloop ago). */
__device__ __forceinline__ void store_acc_tma(const float *d, unsigned char *buf, const CUtensorMap *tmC, int M, int N,
                                              int r0, int c0, int cw, int wtid)
{
    if (r0 >= M) return; /* the second tile of a pair past M */
    const int w = wtid / 32, lane = wtid % 32, rl = w * 16 + lane / 4;
    /* bits 4..6 of rl * 128 + 4 (l % 4) are 0: + (jj ^ (rl % 8)) * 16 is ^ jj * 16 of this */
    const uint32_t base = sm(buf) + (uint32_t)(rl * 128 + (rl & 7) * 16 + (lane % 4) * 4);
#pragma unroll
    for (int c = 0; c < 4; c++) {
        if (c0 + 64 * c >= N) break;
        const uint32_t b = base + (c & 1) * SK_CBUF;
        if (wtid == 0) {
            if (c == 0)
                asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
            else
                asm volatile("cp.async.bulk.wait_group.read 1;\n" ::: "memory");
        }
        named_sync(1 + cw, 128); /* the buffer's previous store has read it */
#pragma unroll
        for (int jj = 0; jj < 8; jj++) {
            const int j = 8 * c + jj;
            asm volatile("{\n.reg .b32 lo, hi;\ncvt.rn.bf16x2.f32 lo, %2, %1;\ncvt.rn.bf16x2.f32 hi, %4, %3;\n"
                         "st.shared.b32 [%0], lo;\nst.shared.b32 [%0+1024], hi;\n}\n" ::"r"(b ^ (jj << 4)),
                         "f"(d[4 * j]), "f"(d[4 * j + 1]), "f"(d[4 * j + 2]), "f"(d[4 * j + 3])
                         : "memory");
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* generic writes -> TMA reads */
        named_sync(1 + cw, 128);
        if (wtid == 0)
            asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
                         "cp.async.bulk.commit_group;\n" ::"l"((uint64_t)tmC),
                         "r"(c0 + 64 * c), "r"(r0), "r"(sm(buf) + (c & 1) * SK_CBUF)
                         : "memory");
    }
}

/* Fixup of one warpgroup's 64 x 256 sub-tile of stream-K unit q (see the header). d: this
 * thread's 128 accumulators of k-blocks [kb0, kb1); w: this worker; rank: CTA in the cluster; cw:
 * consumer warpgroup; live: this thread's rows are inside M. Returns true when this warpgroup was
 * the last contributor and d now holds the whole sum (then it stores C). */
template <int CL>
__device__ __forceinline__ bool sk_fixup(const sk_params &p, float *d, int q, int kb0, int kb1, int w, int rank, int cw,
                                         int wtid, bool live, int *flag)
{
    const long long u0 = (long long)q * p.nk;
    const auto slot = [&](int x) {
        const int which = sk_begin(p, x) >= u0 ? 0 : 1; /* range starts in this unit: first slot */
        return p.part + ((size_t)((x * 2 + which) * CL + rank) * 2 + cw) * SK_SLOT_F4 + wtid;
    };
    if (live) {
        float4 *s = slot(w);
#pragma unroll
        for (int j = 0; j < 32; j++) __stcg(s + j * 128, make_float4(d[4 * j], d[4 * j + 1], d[4 * j + 2], d[4 * j + 3]));
    }
    __threadfence();
    named_sync(1 + cw, 128);
    if (wtid == 0) {
        int *c = p.cnt + ((size_t)q * CL + rank) * 2 + cw;
        *flag = atomicAdd(c, kb1 - kb0) + (kb1 - kb0) == p.nk;
    }
    named_sync(1 + cw, 128);
    const bool last = *flag != 0;
    named_sync(1 + cw, 128); /* everyone has read the flag before the next segment may rewrite it */
    if (!last) return false;
    __threadfence();
    if (!live) return true;
    /* contributors: the workers whose ranges meet [u0, u0 + nk), ascending */
    int x_lo = (int)(u0 * p.w_sk / ((long long)p.sk_units * p.nk));
    while (x_lo + 1 < p.w_sk && sk_begin(p, x_lo + 1) <= u0) x_lo++;
    while (x_lo > 0 && sk_begin(p, x_lo) > u0) x_lo--;
    int x_hi = x_lo;
    while (x_hi + 1 < p.w_sk && sk_begin(p, x_hi + 1) < u0 + p.nk) x_hi++;
#pragma unroll
    for (int jc = 0; jc < 32; jc += 8) {
        float t[32];
#pragma unroll
        for (int i = 0; i < 32; i++) t[i] = 0.0f;
        for (int x = x_lo; x < w; x++) { /* those before this worker */
            const float4 *s = slot(x);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float4 v = __ldcg(s + (jc + j) * 128);
                t[4 * j] += v.x, t[4 * j + 1] += v.y, t[4 * j + 2] += v.z, t[4 * j + 3] += v.w;
            }
        }
#pragma unroll
        for (int i = 0; i < 32; i++) d[4 * jc + i] = t[i] + d[4 * jc + i];
        for (int x = w + 1; x <= x_hi; x++) { /* and after */
            const float4 *s = slot(x);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float4 v = __ldcg(s + (jc + j) * 128);
                float *o = d + 4 * (jc + j);
                o[0] += v.x, o[1] += v.y, o[2] += v.z, o[3] += v.w;
            }
        }
    }
    return true;
}

/* v11 (CL = 1) / v12 (CL = 2): the v9 / v10 kernel with the stream-K schedule above. Warpgroup 0
 * produces (one thread issues TMA), warpgroups 1 and 2 consume 64 x 256 each; per stage a `full`
 * barrier (TMA bytes) and an `empty` barrier (8 * CL consumer warps: with CL = 2 the peer's too,
 * since B is multicast into both CTAs). */
template <int CL, int EPI>
__global__ void __launch_bounds__(384, 1) gemm_sk_kernel(const __grid_constant__ CUtensorMap tmA,
                                                         const __grid_constant__ CUtensorMap tmB,
                                                         const __grid_constant__ CUtensorMap tmC, const sk_params p)
{
    extern __shared__ unsigned char smemsk_raw[];
    __shared__ int flag[2];
    unsigned char *smem = smem_base(smemsk_raw);
    uint64_t *full = (uint64_t *)(smem + SK_ST * SK_STAGE + (EPI ? 4 * SK_CBUF : 0)), *empty = full + SK_ST;
    const int tid = threadIdx.x, wg = tid / 128;
    const int rank = (int)(blockIdx.x % CL), w = (int)(blockIdx.x / CL), W = (int)(gridDim.x / CL);
    if (tid == 0) {
        for (int s = 0; s < SK_ST; s++) mbar_init(&full[s], 1), mbar_init(&empty[s], 8 * CL);
        asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;\n" ::: "memory");
    }
    if constexpr (CL == 2)
        asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
    else
        __syncthreads();
    const unsigned peer_smem_rank = (unsigned)(rank ^ 1); /* CL = 2 only */
    (void)peer_smem_rank;
    if (wg == 0) { /* producer */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid == 0) {
            int it = 0;
            sk_for_each(p, w, W, [&](int u, int kb0, int kb1) {
                int um, tn;
                sk_coords(u, p.units_m, p.tiles_n, p.group, &um, &tn);
                const int tm = um * CL + rank;
                for (int kb = kb0; kb < kb1; kb++, it++) {
                    const int s = it % SK_ST;
                    mbar_wait(&empty[s], ((it / SK_ST) & 1) ^ 1);
                    unsigned char *a = smem + s * SK_STAGE, *b = a + A_TILE(SK_BM);
                    mbar_expect_tx(&full[s], SK_STAGE);
                    tma_load(a, &tmA, kb * BK, tm * SK_BM, &full[s]);
                    if constexpr (CL == 1) {
#pragma unroll
                        for (int c = 0; c < 4; c++) tma_load(b + c * 8192, &tmB, tn * SK_BN + c * 64, kb * BK, &full[s]);
                    } else {
#pragma unroll
                        for (int h = 0; h < 2; h++) {
                            const int c = 2 * rank + h;
                            asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                                         ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(sm(b + c * 8192)),
                                         "l"((uint64_t)&tmB), "r"(tn * SK_BN + c * 64), "r"(kb * BK), "r"(sm(&full[s])),
                                         "h"((unsigned short)0x3)
                                         : "memory");
                        }
                    }
                }
            });
        }
        __syncwarp();
    } else { /* consumers */
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        const int cw = wg - 1, wtid = tid % 128, lane = tid % 32;
        int it = 0;
        float d[128];
        const auto release = [&](int s) {
            if (lane != 0) return;
            mbar_arrive(&empty[s]);
            if constexpr (CL == 2)
                asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
                             "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(sm(&empty[s])),
                             "r"(peer_smem_rank)
                             : "memory");
        };
        sk_for_each(p, w, W, [&](int u, int kb0, int kb1) {
            int um, tn;
            sk_coords(u, p.units_m, p.tiles_n, p.group, &um, &tn);
            const int r0 = (um * CL + rank) * SK_BM + cw * 64;
#pragma unroll
            for (int i = 0; i < 128; i++) d[i] = 0.0f;
            for (int kb = kb0; kb < kb1; kb++, it++) {
                const int s = it % SK_ST;
                mbar_wait(&full[s], (it / SK_ST) & 1);
                const uint32_t a = sm(smem + s * SK_STAGE) + cw * 64 * 128, b = sm(smem + s * SK_STAGE) + A_TILE(SK_BM);
                wgmma_fence();
#pragma unroll
                for (int ks = 0; ks < BK / 16; ks++) wgmma_m64n256k16(d, DESC_A(a + ks * 32), DESC_B(b + ks * 2048), 1);
                wgmma_commit();
                wgmma_wait<1>();
                if (kb > kb0) release((it - 1) % SK_ST);
            }
            wgmma_wait<0>();
            release((it - 1) % SK_ST);
            if (kb1 - kb0 < p.nk) {
                const bool live = r0 + (wtid / 32) * 16 + (wtid % 32) / 4 < p.M;
                if (!sk_fixup<CL>(p, d, u - p.dp_units, kb0, kb1, w, rank, cw, wtid, live, &flag[cw])) return;
            }
            if constexpr (EPI == 0)
                store_acc<32>(d, p.C, p.M, p.N, r0, tn * SK_BN, wtid);
            else
                store_acc_tma(d, smem + SK_ST * SK_STAGE + cw * 2 * SK_CBUF, &tmC, p.M, p.N, r0, tn * SK_BN, cw, wtid);
        });
    }
    if constexpr (EPI == 1) /* this thread's TMA stores (consumer thread 0's) have read their smem */
        asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
    if constexpr (CL == 2) /* no CTA exits while its peer may still signal or write it */
        asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

// ---- host ---------------------------------------------------------------------------------------

/* The schedule for this shape on `ctas` resident CTAs; returns the workspace bytes it needs. */
static size_t sk_plan(sk_params *p, int M, int N, int K, int ctas, int cl, int group_tiles)
{
    const int W = ctas / cl;
    p->M = M, p->N = N, p->K = K, p->nk = gemm_cdiv(K, BK);
    p->units_m = gemm_cdiv(gemm_cdiv(M, SK_BM), cl), p->tiles_n = gemm_cdiv(N, SK_BN);
    p->n_units = p->units_m * p->tiles_n;
    p->group = group_tiles / cl > 0 ? group_tiles / cl : 1;
    const int R = p->n_units % W;
    const bool sk = R > 0 && (p->n_units < W || 4 * R <= 3 * W);

    p->dp_units = sk ? p->n_units - R : p->n_units;
    p->sk_units = sk ? R : 0;
    const long long total = (long long)p->sk_units * p->nk;
    p->w_sk = (int)(total / SK_MIN_KB < W ? total / SK_MIN_KB : W);
    if (p->sk_units > 0 && p->w_sk < 1) p->w_sk = 1;
    if (p->sk_units == 0) p->w_sk = 0;
    const size_t cnt_bytes = ((size_t)p->sk_units * cl * 2 * sizeof(int) + 255) / 256 * 256;
    return p->sk_units ? cnt_bytes + (size_t)p->w_sk * 2 * cl * 2 * SK_SLOT_F4 * sizeof(float4) : 0;
}

template <int CL, int EPI> static int sk_run(GEMM_RUN_ARGS)
{
    if (int e = gemm_check(A, B, C, M, N, K, true)) return e;
    CUtensorMap ta, tb, tc;
    int ctas = 0;
    const int smem = EPI ? SK_SMEM_EPI : SK_SMEM;
    cudaError_t e = tmap_2d(&ta, A, M, K, SK_BM);
    if (e == cudaSuccess) e = tmap_2d(&tb, B, K, N, BK);
    if (e == cudaSuccess) e = EPI ? tmap_2d(&tc, C, M, N, 64) : tmap_2d(&tc, B, K, N, BK); /* v11/v12: unused */
    if (e == cudaSuccess) e = gemm_persistent_ctas(gemm_sk_kernel<CL, EPI>, smem, CL, CL > 1, &ctas);
    if (e != cudaSuccess) return (int)e;
    sk_params p;
    const size_t need = sk_plan(&p, M, N, K, ctas, CL, EPI ? SK_GROUP_TILES_V13 : SK_GROUP_TILES);
    if (need > work_size || (need && !work)) return (int)cudaErrorInvalidValue;
    p.C = (gbf *)C;
    p.cnt = (int *)work;
    p.part = (float4 *)((char *)work + ((size_t)p.sk_units * CL * 2 * sizeof(int) + 255) / 256 * 256);
    if (p.sk_units && (e = cudaMemsetAsync(p.cnt, 0, (size_t)p.sk_units * CL * 2 * sizeof(int), (cudaStream_t)stream)))
        return (int)e;
    const int W = ctas / CL, workers = p.n_units < W ? p.w_sk : W; /* all-stream-K: w_sk workers */
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(workers * CL));
    cfg.blockDim = dim3(384);
    cfg.dynamicSmemBytes = (size_t)smem;
    cfg.stream = (cudaStream_t)stream;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = CL, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
    cfg.attrs = at, cfg.numAttrs = CL > 1 ? 1 : 0;
    return (int)cudaLaunchKernelEx(&cfg, gemm_sk_kernel<CL, EPI>, ta, tb, tc, p);
}

/* Scratch of v11..v13 for this shape on the current device (0 when the device can't be asked). */
size_t gemm_streamk_work_size(int M, int N, int K)
{
    if (M < 1 || N < 1 || K < 1) return 0;
    int c[4] = { 0, 0, 0, 0 };
    if (gemm_persistent_ctas(gemm_sk_kernel<1, 0>, SK_SMEM, 1, false, &c[0]) != cudaSuccess) return 0;
    if (gemm_persistent_ctas(gemm_sk_kernel<2, 0>, SK_SMEM, 2, true, &c[1]) != cudaSuccess) return 0;
    if (gemm_persistent_ctas(gemm_sk_kernel<1, 1>, SK_SMEM_EPI, 1, false, &c[2]) != cudaSuccess) return 0;
    if (gemm_persistent_ctas(gemm_sk_kernel<2, 1>, SK_SMEM_EPI, 2, true, &c[3]) != cudaSuccess) return 0;
    size_t most = 0;
    for (int i = 0; i < 4; i++) {
        sk_params p;
        const size_t n = sk_plan(&p, M, N, K, c[i], i % 2 ? 2 : 1, SK_GROUP_TILES);
        most = n > most ? n : most;
    }
    return most;
}

int gemm_run_v11(GEMM_RUN_ARGS) { return sk_run<1, 0>(stream, A, B, C, M, N, K, work, work_size); }

/* v12 runs v11's instance when the tiles form one row (M <= 128): a pair's second tile row would
 * be past M, doubling the CTAs per unit of work for nothing. */
int gemm_run_v12(GEMM_RUN_ARGS)
{
    if (gemm_cdiv(M, SK_BM) == 1) return sk_run<1, 0>(stream, A, B, C, M, N, K, work, work_size);
    return sk_run<2, 0>(stream, A, B, C, M, N, K, work, work_size);
}

/* v13: v12 with the TMA-store epilogue (store_acc_tma); the same one-tile-row rule. */
int gemm_run_v13(GEMM_RUN_ARGS)
{
    if (gemm_cdiv(M, SK_BM) == 1) return sk_run<1, 1>(stream, A, B, C, M, N, K, work, work_size);
    return sk_run<2, 1>(stream, A, B, C, M, N, K, work, work_size);
}
