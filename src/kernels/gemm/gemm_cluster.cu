/* gemm_cluster.cu - GEMM ladder v10: v9 plus 2-CTA clusters with TMA multicast. C (M, N) =
 * A (M, K) x B (K, N), bf16 in, fp32 accumulate, bf16 out; same shape rules and shared-memory
 * layout as v8/v9 (gemm_hopper.cu).
 */
#include "kernels/gemm/gemm_hopper.cuh"

#define BM 128
#define BN 256
#define ST 4
#define STAGE (A_TILE(BM) + B_TILE(BN))
#define SMEM (ST * STAGE + 1024 + 128)
#define GROUP 4 /* tile-row pairs per group of the persistent schedule */

__device__ __forceinline__ unsigned cluster_rank()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
/* Every thread of both CTAs; orders shared-memory writes (barrier init) before the peer's use. */
__device__ __forceinline__ void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
/* Arrive on the mbarrier at the same shared-memory offset in CTA `rank` of the cluster.
 * Default semantics (release at CTA scope), deliberately not `.release.cluster`: ptxas lowers the
 * cluster-scope release to MEMBAR.ALL.CTA + MEMBAR.ALL.GPU before the remote arrive, a full GPU
 * fence that waits for every outstanding memory operation of the thread (the previous tile's C
 * stores included) once per k-block per consumer warp. That fence was v10's round-1 slowdown
 * (0.53x of cuBLASLt vs v9's 0.93x, and 2x slower than v9 even at M = 1). No fence is needed:
 * the arrival only says "this warp's wgmmas have finished reading the stage" (wgmma.wait_group
 * already guarantees that), and the peer's TMA write that follows is ordered by the barrier. */
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t *b, unsigned rank)
{
    asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
                 "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(sm(b)),
                 "r"(rank)
                 : "memory");
}
/* TMA load written to the same offset in every CTA of `mask`, completing bytes on each one's
 * mbarrier at bar's offset. */
__device__ __forceinline__ void tma_load_mc(void *dst, const CUtensorMap *map, int c0, int c1, uint64_t *bar,
                                            unsigned short mask)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster "
                 "[%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(sm(dst)),
                 "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(sm(bar)), "h"(mask)
                 : "memory");
}

/* Pair p of the schedule -> (tile-row pair, tile column), grouped like v9's tile_coords. */
__device__ __forceinline__ void pair_coords(int p, int pairs_m, int tiles_n, int *pm, int *tn)
{
    const int per_group = GROUP * tiles_n, g = p / per_group, first = g * GROUP;
    const int rows = min(GROUP, pairs_m - first), r = p % per_group;
    *pm = first + r % rows;
    *tn = r / rows;
}

/* v10: v9 in clusters of 2 CTAs that compute vertically adjacent 128x256 tiles (tile rows 2p and
 * 2p+1, the same tile column), so they need the same B tile. Each CTA's producer loads its own A
 * (16 KiB) and half of B (2 of the 4 column blocks, 16 KiB) with a multicast TMA that writes it
 * into both CTAs' shared memory: per k-block a CTA pulls 32 KiB from L2 instead of 48 KiB. At
 * 4096 FLOPs per cycle per SM, v9 needs 48 bytes per cycle per SM from L2 (~11.6 TB/s over the
 * chip), near the L2's limit; v10 needs 32. The price is coupling: a stage may be refilled only
 * when the consumers of both CTAs have released it, so each consumer warp arrives on the `empty`
 * barrier of both CTAs (16 arrivals per phase), and each `full` barrier counts 48 KiB from two
 * producers. Both CTAs walk the same pair sequence; a CTA whose tile row is past M still loads
 * and multicasts (zeros for A) and stores nothing. Cluster barriers after the barrier set-up and
 * before exit keep a CTA from being written or signalled by its peer after it is gone.
 * Round 2 (measured 0.53x of cuBLASLt, slower than v9 at every shape, 2x even at M = 1 where the
 * tensor cores idle): the remote arrival carried `.release.cluster`, which ptxas turns into a
 * MEMBAR.ALL.GPU in every consumer warp on every k-block (see mbar_arrive_cluster); now a plain
 * remote arrive. The grid is sized by cudaOccupancyMaxActiveClusters (gemm_persistent_ctas) so no
 * cluster waits for a second wave. */
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384, 1)
    gemm_v10_cluster_mc(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB, gbf *C,
                        int M, int N, int K)
{
    extern __shared__ unsigned char smem10_raw[];
    unsigned char *smem = smem_base(smem10_raw);
    uint64_t *full = (uint64_t *)(smem + ST * STAGE), *empty = full + ST;
    const int tid = threadIdx.x, wg = tid / 128;
    const unsigned rank = cluster_rank(), peer = rank ^ 1;
    const int tiles_m = gemm_cdiv(M, BM), pairs_m = gemm_cdiv(tiles_m, 2), tiles_n = gemm_cdiv(N, BN);
    const int n_pairs = pairs_m * tiles_n, nk = gemm_cdiv(K, BK);
    const int cluster = blockIdx.x / 2, n_clusters = gridDim.x / 2;
    if (tid == 0) {
        for (int s = 0; s < ST; s++) mbar_init(&full[s], 1), mbar_init(&empty[s], 16);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    cluster_sync();
    if (wg == 0) { /* producer */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid == 0) {
            int it = 0;
            for (int p = cluster; p < n_pairs; p += n_clusters) {
                int pm, tn;
                pair_coords(p, pairs_m, tiles_n, &pm, &tn);
                const int tm = 2 * pm + (int)rank;
                for (int kb = 0; kb < nk; kb++, it++) {
                    const int s = it % ST;
                    mbar_wait(&empty[s], ((it / ST) & 1) ^ 1); /* both CTAs' consumers released it */
                    unsigned char *a = smem + s * STAGE, *b = a + A_TILE(BM);
                    mbar_expect_tx(&full[s], STAGE);          /* own A + both halves of B */
                    tma_load(a, &tmA, kb * BK, tm * BM, &full[s]);
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int c = 2 * (int)rank + h;
                        tma_load_mc(b + c * 8192, &tmB, tn * BN + c * 64, kb * BK, &full[s], 0x3);
                    }
                }
            }
        }
    } else { /* consumers */
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        const int cw = wg - 1, wtid = tid % 128, lane = tid % 32;
        int it = 0;
        float d[128];
        for (int p = cluster; p < n_pairs; p += n_clusters) {
            int pm, tn;
            pair_coords(p, pairs_m, tiles_n, &pm, &tn);
            const int tm = 2 * pm + (int)rank;
#pragma unroll
            for (int i = 0; i < 128; i++) d[i] = 0.0f;
            for (int kb = 0; kb < nk; kb++, it++) {
                const int s = it % ST;
                mbar_wait(&full[s], (it / ST) & 1);
                const uint32_t a = sm(smem + s * STAGE) + cw * 64 * 128, b = sm(smem + s * STAGE) + A_TILE(BM);
                wgmma_fence();
#pragma unroll
                for (int ks = 0; ks < BK / 16; ks++) wgmma_m64n256k16(d, DESC_A(a + ks * 32), DESC_B(b + ks * 2048), 1);
                wgmma_commit();
                wgmma_wait<1>();
                if (kb > 0 && lane == 0) {
                    const int ps = (it - 1) % ST;
                    mbar_arrive(&empty[ps]);
                    mbar_arrive_cluster(&empty[ps], peer);
                }
            }
            wgmma_wait<0>();
            if (lane == 0) {
                const int ps = (it - 1) % ST;
                mbar_arrive(&empty[ps]);
                mbar_arrive_cluster(&empty[ps], peer);
            }
            store_acc<32>(d, C, M, N, tm * BM + cw * 64, tn * BN, wtid);
        }
    }
    cluster_sync(); /* no CTA exits while its peer may still signal or write it */
}

int gemm_run_v10(GEMM_RUN_ARGS)
{
    if (int e = gemm_check(A, B, C, M, N, K, true)) return e;
    CUtensorMap ta, tb;
    int ctas = 0;
    cudaError_t e = tmap_2d(&ta, A, M, K, BM);
    if (e == cudaSuccess) e = tmap_2d(&tb, B, K, N, BK);
    if (e == cudaSuccess) e = gemm_persistent_ctas(gemm_v10_cluster_mc, SMEM, 2, false, &ctas);
    if (e != cudaSuccess) return (int)e;
    const int pairs = gemm_cdiv(gemm_cdiv(M, BM), 2) * gemm_cdiv(N, BN);
    const int clusters = pairs < ctas / 2 ? pairs : ctas / 2;
    gemm_v10_cluster_mc<<<2 * clusters, 384, SMEM, (cudaStream_t)stream>>>(ta, tb, (gbf *)C, M, N, K);
    return (int)cudaGetLastError();
}
