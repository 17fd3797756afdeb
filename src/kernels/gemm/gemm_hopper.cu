/* gemm_hopper.cu - GEMM ladder v8, v9: Hopper's warpgroup MMA (wgmma) fed by the tensor memory
 * accelerator (TMA) through mbarrier pipelines. C (M, N) = A (M, K) x B (K, N), bf16 in, fp32
 * accumulate (tensor core), bf16 out. Needs sm_90a, K % 8 == 0 and N % 8 == 0 (TMA: row strides
 * must be multiples of 16 bytes), 16-byte aligned pointers; any M, N, K otherwise: TMA fills
 * out-of-bounds tile elements with zeros, the epilogue stores only inside C.
 *
 * Shared-memory layout (both versions): per stage an A tile of BM rows x 64 k (128 bytes per row)
 * and a B tile of 64 k rows x BN columns stored as BN/64 column blocks of 64 k rows x 64 n (8 KiB
 * each), all written by TMA with the 128-byte swizzle (16-byte chunk index XOR row % 8), which is
 * the layout wgmma reads without bank conflicts:
 *   A, K-major:  rows of 128 bytes, 8-row groups 1024 bytes apart (SBO = 1024); k-step of 16 = +32 bytes
 *   B, N-major:  within a 64-column block, k row r at r * 128 bytes, 8-row groups 1024 apart (SBO);
 *                column blocks 8192 bytes apart (LBO = 8192); k-step of 16 = +2048 bytes
 * Tensor maps are encoded on the host per call (cuTensorMapEncodeTiled, reached through
 * cudaGetDriverEntryPointByVersion so nothing links libcuda) and passed as __grid_constant__.
 */
#include "kernels/gemm/gemm_hopper.cuh"

// ---- v8 ---------------------------------------------------------------------------------------

#define V8_BM 128
#define V8_BN 128
#define V8_ST 4
#define V8_STAGE (A_TILE(V8_BM) + B_TILE(V8_BN))
#define V8_SMEM (V8_ST * V8_STAGE + 1024 + 64)

/* v8: wgmma + TMA + mbarrier pipeline. Each of the 2 warpgroups computes 64x128 of a 128x128 tile
 * with m64n128k16 wgmmas that read both operands straight from shared memory (no ldmatrix, no
 * register fragments: v7 spent a large share of its issue slots on ldmatrix and address math).
 * One thread loads each stage with 3 TMA copies (A box 64x128, B 2 boxes 64x64) that complete on
 * the stage's mbarrier with a byte count, so no thread computes addresses or bounds for loads; 4
 * stages (128 KiB) keep 3 tiles in flight. The pipeline is not specialised: after its wgmmas all
 * 256 threads meet at a barrier before the stage is refilled, so load issue and MMA still take
 * turns in the same warps (v9 removes that). */
__global__ void __launch_bounds__(256, 1) gemm_v8_wgmma_tma(const __grid_constant__ CUtensorMap tmA,
                                                            const __grid_constant__ CUtensorMap tmB, gbf *C, int M,
                                                            int N, int K)
{
    extern __shared__ unsigned char smem8_raw[];
    unsigned char *smem = smem_base(smem8_raw);
    uint64_t *full = (uint64_t *)(smem + V8_ST * V8_STAGE);
    const int tid = threadIdx.x, wg = tid / 128;
    const int m0 = blockIdx.y * V8_BM, n0 = blockIdx.x * V8_BN;
    const int nk = gemm_cdiv(K, BK);
    auto sA = [&](int s) { return smem + s * V8_STAGE; };
    auto sB = [&](int s) { return smem + s * V8_STAGE + A_TILE(V8_BM); };
    auto issue = [&](int s, int kb) {
        mbar_expect_tx(&full[s], V8_STAGE);
        tma_load(sA(s), &tmA, kb * BK, m0, &full[s]);
        tma_load(sB(s), &tmB, n0, kb * BK, &full[s]);
        tma_load(sB(s) + 8192, &tmB, n0 + 64, kb * BK, &full[s]);
    };
    if (tid == 0) {
        for (int s = 0; s < V8_ST; s++) mbar_init(&full[s], 1);
        asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;\n" ::: "memory");
        for (int s = 0; s < V8_ST && s < nk; s++) issue(s, s);
    }
    __syncthreads();
    float d[64];
#pragma unroll
    for (int i = 0; i < 64; i++) d[i] = 0.0f;
    for (int kb = 0; kb < nk; kb++) {
        const int s = kb % V8_ST;
        mbar_wait(&full[s], (kb / V8_ST) & 1);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < BK / 16; ks++)
            wgmma_m64n128k16(d, DESC_A(sm(sA(s)) + wg * 64 * 128 + ks * 32), DESC_B(sm(sB(s)) + ks * 2048), 1);
        wgmma_commit();
        wgmma_wait<0>();
        __syncthreads(); /* both warpgroups are done reading stage s */
        if (tid == 0 && kb + V8_ST < nk) issue(s, kb + V8_ST);
    }
    store_acc<16>(d, C, M, N, m0 + wg * 64, n0, tid % 128);
}

// ---- v9 ---------------------------------------------------------------------------------------

#define V9_BM 128
#define V9_BN 256
#define V9_ST 4
#define V9_STAGE (A_TILE(V9_BM) + B_TILE(V9_BN))
#define V9_SMEM (V9_ST * V9_STAGE + 1024 + 128)
#define V9_GROUP 8 /* tile rows per group in the persistent schedule (L2 reuse) */

/* Tile t of the persistent schedule -> (tile row, tile column): groups of V9_GROUP tile rows are
 * walked column by column, so the CTAs running at once share a few A row-blocks and B
 * column-blocks in L2 instead of streaming all of B for every row-block. */
__device__ __forceinline__ void tile_coords(int t, int tiles_m, int tiles_n, int *tm, int *tn)
{
    const int per_group = V9_GROUP * tiles_n, g = t / per_group, first = g * V9_GROUP;
    const int rows = min(V9_GROUP, tiles_m - first), r = t % per_group;
    *tm = first + r % rows;
    *tn = r / rows;
}

/* v9: warp specialisation + persistence. 3 warpgroups: warpgroup 0 is the producer (one thread
 * issues the TMA loads; setmaxnreg gives its registers away, 40 per thread), warpgroups 1 and 2
 * are consumers (232 registers each) that each own 64x256 of a 128x256 tile (128 fp32
 * accumulators per thread, m64n256k16: twice v8's work per B byte read from shared memory). The
 * stages have two mbarriers: `full` (the producer's TMA bytes arrived) and `empty` (all 8
 * consumer warps released it), so the producer runs up to 4 stages ahead without any
 * __syncthreads, and the consumers keep one wgmma group in flight (wait_group 1) while releasing
 * the previous stage. The grid is one CTA per SM; each CTA walks tiles t = blockIdx.x, +gridDim.x,
 * ... in a grouped order (tile_coords), and the producer already loads the next tile while the
 * consumers store the current one: no launch or prologue per tile, no tail of idle SMs waiting
 * for a second wave. */
__global__ void __launch_bounds__(384, 1) gemm_v9_ws_persist(const __grid_constant__ CUtensorMap tmA,
                                                             const __grid_constant__ CUtensorMap tmB, gbf *C, int M,
                                                             int N, int K)
{
    extern __shared__ unsigned char smem9_raw[];
    unsigned char *smem = smem_base(smem9_raw);
    uint64_t *full = (uint64_t *)(smem + V9_ST * V9_STAGE), *empty = full + V9_ST;
    const int tid = threadIdx.x, wg = tid / 128;
    const int tiles_m = gemm_cdiv(M, V9_BM), tiles_n = gemm_cdiv(N, V9_BN), n_tiles = tiles_m * tiles_n;
    const int nk = gemm_cdiv(K, BK);
    if (tid == 0) {
        for (int s = 0; s < V9_ST; s++) mbar_init(&full[s], 1), mbar_init(&empty[s], 8);
        asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;\n" ::: "memory");
    }
    __syncthreads();
    if (wg == 0) { /* producer */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid == 0) {
            int it = 0;
            for (int t = blockIdx.x; t < n_tiles; t += gridDim.x) {
                int tm, tn;
                tile_coords(t, tiles_m, tiles_n, &tm, &tn);
                for (int kb = 0; kb < nk; kb++, it++) {
                    const int s = it % V9_ST;
                    mbar_wait(&empty[s], ((it / V9_ST) & 1) ^ 1); /* first round passes at once */
                    unsigned char *a = smem + s * V9_STAGE, *b = a + A_TILE(V9_BM);
                    mbar_expect_tx(&full[s], V9_STAGE);
                    tma_load(a, &tmA, kb * BK, tm * V9_BM, &full[s]);
#pragma unroll
                    for (int c = 0; c < V9_BN / 64; c++) tma_load(b + c * 8192, &tmB, tn * V9_BN + c * 64, kb * BK, &full[s]);
                }
            }
        }
    } else { /* consumers */
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        const int cw = wg - 1, wtid = tid % 128, lane = tid % 32;
        int it = 0;
        float d[128];
        for (int t = blockIdx.x; t < n_tiles; t += gridDim.x) {
            int tm, tn;
            tile_coords(t, tiles_m, tiles_n, &tm, &tn);
#pragma unroll
            for (int i = 0; i < 128; i++) d[i] = 0.0f;
            for (int kb = 0; kb < nk; kb++, it++) {
                const int s = it % V9_ST;
                mbar_wait(&full[s], (it / V9_ST) & 1);
                const uint32_t a = sm(smem + s * V9_STAGE) + cw * 64 * 128, b = sm(smem + s * V9_STAGE) + A_TILE(V9_BM);
                wgmma_fence();
#pragma unroll
                for (int ks = 0; ks < BK / 16; ks++) wgmma_m64n256k16(d, DESC_A(a + ks * 32), DESC_B(b + ks * 2048), 1);
                wgmma_commit();
                wgmma_wait<1>(); /* the previous stage's wgmmas are done: release it */
                if (kb > 0 && lane == 0) mbar_arrive(&empty[(it - 1) % V9_ST]);
            }
            wgmma_wait<0>();
            if (lane == 0) mbar_arrive(&empty[(it - 1) % V9_ST]);
            store_acc<32>(d, (gbf *)C, M, N, tm * V9_BM + cw * 64, tn * V9_BN, wtid);
        }
    }
}

// ---- host ---------------------------------------------------------------------------------------

int gemm_run_v8(GEMM_RUN_ARGS)
{
    if (int e = gemm_check(A, B, C, M, N, K, true)) return e;
    CUtensorMap ta, tb;
    cudaError_t e = tmap_2d(&ta, A, M, K, V8_BM);
    if (e == cudaSuccess) e = tmap_2d(&tb, B, K, N, BK);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(gemm_v8_wgmma_tma, cudaFuncAttributeMaxDynamicSharedMemorySize, V8_SMEM);
    if (e != cudaSuccess) return (int)e;
    dim3 grid(gemm_cdiv(N, V8_BN), gemm_cdiv(M, V8_BM));
    gemm_v8_wgmma_tma<<<grid, 256, V8_SMEM, (cudaStream_t)stream>>>(ta, tb, (gbf *)C, M, N, K);
    return (int)cudaGetLastError();
}

int gemm_run_v9(GEMM_RUN_ARGS)
{
    if (int e = gemm_check(A, B, C, M, N, K, true)) return e;
    CUtensorMap ta, tb;
    int dev = 0, sms = 0;
    cudaError_t e = tmap_2d(&ta, A, M, K, V9_BM);
    if (e == cudaSuccess) e = tmap_2d(&tb, B, K, N, BK);
    if (e == cudaSuccess) e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(gemm_v9_ws_persist, cudaFuncAttributeMaxDynamicSharedMemorySize, V9_SMEM);
    if (e != cudaSuccess) return (int)e;
    const int tiles = gemm_cdiv(M, V9_BM) * gemm_cdiv(N, V9_BN);
    gemm_v9_ws_persist<<<tiles < sms ? tiles : sms, 384, V9_SMEM, (cudaStream_t)stream>>>(ta, tb, (gbf *)C, M, N, K);
    return (int)cudaGetLastError();
}
