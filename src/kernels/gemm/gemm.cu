/* gemm.cu - the GEMM ladder's version table (gemm.h). The kernels live by family:
 *   gemm_simt.cu    v1..v6  CUDA cores (fp32 FMA on bf16 converted on the fly)
 *   gemm_mma.cu     v7      tensor cores through mma.sync m16n8k16 (Ampere-style, runs on Hopper)
 *   gemm_hopper.cu  v8, v9  wgmma + TMA + mbarrier pipelines (sm_90a only)
 *   gemm_cluster.cu v10     v9 in 2-CTA clusters with TMA multicast of B
 *   gemm_streamk.cu v11, v12 v9 / v10 with a stream-K schedule (tail wave, small M);
 *                   v13 v12 with C written by TMA stores from shared memory
 * Every step's kernel comment says what changes and why it should be faster than the one before. */
#include "kernels/gemm/gemm_internal.cuh"

extern "C" const gemm_version gemm_versions[] = {
    { "v1_naive", "one thread per C element, A and B read straight from global memory", gemm_run_v1, false },
    { "v2_smem_tile", "32x32 tiles of A and B staged in shared memory: each global load reused 32 times", gemm_run_v2, false },
    { "v3_reg_tile", "64x64 block tile, each thread a 4x4 micro-tile in registers: 8 smem loads per 16 FMAs", gemm_run_v3, false },
    { "v4_vec_load", "128x128 tile, 8x8 per thread, 128-bit global loads and float4 shared loads", gemm_run_v4, true },
    { "v5_warp_tile", "warp tiles (64x32 per warp) with 4x4 sub-tiles: conflict-free broadcast shared reads", gemm_run_v5, true },
    { "v6_cp_async", "v5 with bf16 shared tiles filled by cp.async, double-buffered: loads overlap the FMAs", gemm_run_v6, true },
    { "v7_mma_sync", "tensor cores: mma.sync m16n8k16 bf16, ldmatrix fragments, 3-stage cp.async pipeline", gemm_run_v7, true },
    { "v8_wgmma_tma", "Hopper wgmma m64n128k16 from swizzled smem, TMA loads, 4-stage mbarrier pipeline", gemm_run_v8, true },
    { "v9_ws_persist", "warp-specialised: 1 TMA producer + 2 wgmma consumer warpgroups, 128x256 tiles, persistent", gemm_run_v9, true },
    { "v10_cluster_mc", "v9 in 2-CTA clusters: B tile multicast by TMA to both CTAs, 1/3 less L2 traffic", gemm_run_v10, true },
    { "v11_streamk", "v9 + stream-K: whole waves of tiles, then the leftover k-blocks split evenly over all SMs", gemm_run_v11, true },
    { "v12_cluster_sk", "v10 + stream-K (v11's instance when M <= 128)", gemm_run_v12, true },
    { "v13_tma_store", "v12 + C staged in swizzled smem, written by TMA stores nobody waits for; 8-pair tile groups", gemm_run_v13, true },
};
extern "C" const int gemm_n_versions = (int)(sizeof gemm_versions / sizeof gemm_versions[0]);

extern "C" size_t gemm_work_size(int M, int N, int K)
{
    return gemm_streamk_work_size(M, N, K); /* only v11..v13 use scratch */
}

extern "C" bool gemm_version_accepts(const gemm_version *v, const void *A, const void *B, const void *C, int M, int N,
                                     int K)
{
    return v && gemm_check(A, B, C, M, N, K, v->align8) == 0;
}
