/* gemm_hopper.cuh - what the Hopper GEMM kernels (gemm_hopper.cu: v8, v9; gemm_cluster.cu: v10)
 * share: PTX wrappers for mbarriers, TMA and wgmma, the shared-memory matrix descriptors, the
 * accumulator store and the tensor-map encoding on the host. The layout they assume is described
 * in gemm_hopper.cu's header. */
#ifndef AIINFRA_KERNELS_GEMM_HOPPER_CUH
#define AIINFRA_KERNELS_GEMM_HOPPER_CUH

#include <cuda.h>
#include <cudaTypedefs.h>

#include "kernels/gemm/gemm_internal.cuh"
#include "kernels/gemm/gemm_wgmma.cuh"

#define BK 64                 /* k per stage: 64 bf16 = one 128-byte swizzle row */
#define A_TILE(bm) ((bm) * BK * 2)
#define B_TILE(bn) ((bn) * BK * 2)

// ---- PTX wrappers -------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t sm(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(uint64_t *b, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(sm(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t *b, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(sm(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *b)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(sm(b)) : "memory");
}
__device__ __forceinline__ unsigned mbar_try(uint64_t *b, unsigned parity)
{
    unsigned done;
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(sm(b)), "r"(parity)
                 : "memory");
    return done;
}
/* Waits until the phase of parity `parity` has completed. A phase that never completes (a TMA
 * byte count that does not add up, a lost arrival) would hang the GPU; after ~4e9 cycles (about
 * 2 s) the kernel traps instead, so the launch fails with an error the caller sees. */
__device__ __forceinline__ void mbar_wait(uint64_t *b, unsigned parity)
{
    if (mbar_try(b, parity)) return;
    const long long t0 = clock64();
    while (!mbar_try(b, parity))
        if (clock64() - t0 > 4000000000LL) __trap();
}
/* 2D TMA load of the box at (c0 inner, c1 outer) into dst; completes `bytes` on bar. */
__device__ __forceinline__ void tma_load(void *dst, const CUtensorMap *map, int c0, int c1, uint64_t *bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
                 "[%4];\n" ::"r"(sm(dst)),
                 "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(sm(bar))
                 : "memory");
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

/* Shared-memory matrix descriptor, 128-byte swizzle (layout type 1 in bits 62-63). */
__device__ __forceinline__ uint64_t gdesc(uint32_t saddr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | (uint64_t)((lbo >> 4) & 0x3FFF) << 16 |
           (uint64_t)((sbo >> 4) & 0x3FFF) << 32 | 1ull << 62;
}
#define DESC_A(addr) gdesc((addr), 16, 1024)
#define DESC_B(addr) gdesc((addr), 8192, 1024)

/* Round the dynamic shared-memory base up to 1024 bytes (the 128-byte swizzle atom). */
__device__ __forceinline__ unsigned char *smem_base(unsigned char *raw)
{
    return raw + ((1024 - (sm(raw) & 1023)) & 1023);
}

/* Writes a warpgroup's 64 x (8 * NJ) fp32 accumulator tile d to C at (r0, c0): warp w of the group
 * owns rows 16w..16w+15; lane l holds, per 8-column block j, (row l/4, cols 2(l%4)+{0,1}) in
 * d[4j], d[4j+1] and row l/4 + 8 in d[4j+2], d[4j+3]. */
template <int NJ>
__device__ __forceinline__ void store_acc(const float *d, gbf *C, int M, int N, int r0, int c0, int wtid)
{
    const int w = wtid / 32, lane = wtid % 32;
    const int r = r0 + w * 16 + lane / 4, c = c0 + (lane % 4) * 2;
    if (r >= M) return;
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        gemm_store2(C, M, N, r, c + 8 * j, d[4 * j], d[4 * j + 1]);
        gemm_store2(C, M, N, r + 8, c + 8 * j, d[4 * j + 2], d[4 * j + 3]);
    }
}

// ---- host ---------------------------------------------------------------------------------------

/* How many CTAs of `kernel` (384 threads, smem bytes of dynamic shared memory, cluster size
 * `cluster`: compile-time (__cluster_dims__) unless launch_attr, then given at launch as
 * cudaLaunchAttributeClusterDimension) can be resident at once: the persistent grid. For clusters this asks
 * cudaOccupancyMaxActiveClusters instead of assuming SMs / cluster: a cluster's CTAs must sit in
 * one GPC, and a grid with more clusters than fit runs the extra ones as a second wave after the
 * first ones finish their whole tile list (a persistent kernel's worst case: twice the time). */
template <typename F>
static inline cudaError_t gemm_persistent_ctas(F *kernel, int smem, int cluster, bool launch_attr, int *ctas)
{
    int dev = 0, sms = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    *ctas = sms;
    if (cluster == 1) return cudaSuccess;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(sms / cluster * cluster));
    cfg.blockDim = dim3(384);
    cfg.dynamicSmemBytes = (size_t)smem;
    cudaLaunchAttribute at[1];
    if (launch_attr) {
        at[0].id = cudaLaunchAttributeClusterDimension;
        at[0].val.clusterDim.x = (unsigned)cluster, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
        cfg.attrs = at, cfg.numAttrs = 1;
    }
    int n = 0;
    e = cudaOccupancyMaxActiveClusters(&n, (void *)kernel, &cfg);
    if (e != cudaSuccess) return e;
    if (n < 1) return cudaErrorNotSupported;
    *ctas = (n * cluster < sms ? n : sms / cluster) * cluster;
    return cudaSuccess;
}

/* A 2D tensor map over a row-major bf16 matrix (rows x cols), box (box_rows x 64 columns), 128-byte
 * swizzle, zero fill outside. */
static inline cudaError_t tmap_2d(CUtensorMap *m, const void *base, int rows, int cols, int box_rows)
{
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q;
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess) return e;
    if (q != cudaDriverEntryPointSuccess || !fn) return cudaErrorNotSupported;
    const cuuint64_t dims[2] = { (cuuint64_t)cols, (cuuint64_t)rows };
    const cuuint64_t strides[1] = { (cuuint64_t)cols * 2 };
    const cuuint32_t box[2] = { 64, (cuuint32_t)box_rows }, estr[2] = { 1, 1 };
    CUresult r = ((PFN_cuTensorMapEncodeTiled_v12000)fn)(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dims,
                                                          strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                                          CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

#endif
