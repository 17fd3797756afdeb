/* cuk_launch.h - kernel launches with programmatic dependent launch (PDL), for .cu files.
 *
 * A decode step is ~400 small kernels in a row. Normally kernel N+1 is launched only after kernel N
 * has finished and its memory is flushed, which leaves the GPU idle for the launch latency (a couple
 * of microseconds) at every boundary. With PDL (Hopper), kernel N+1 is launched early: its CTAs are
 * scheduled as N's CTAs drain and wait at `griddepcontrol.wait` until N has completed and its writes
 * are visible. So:
 *   - every kernel launched through cuk_launch() must call cuk_pdl_wait() before it reads anything a
 *     previous kernel wrote, and before it writes anything a previous kernel may still read (first
 *     thing in the kernel is simplest). Without the PDL attribute the wait is a no-op, so a kernel may
 *     also be launched the ordinary way;
 *   - CUDA graphs capture the programmatic edges (CUDA >= 12.3), so replays keep the overlap.
 * Set AIINFRA_NO_PDL=1 in the environment to launch without the attribute (A/B measurements).
 */
#ifndef AIINFRA_CUK_LAUNCH_H
#define AIINFRA_CUK_LAUNCH_H

#include <cstdlib>
#include <cuda_runtime.h>

/* Waits for the previous kernel (its writes are then visible), then lets the next kernel launch: its
 * CTAs get scheduled while this one runs and park in their own wait. Without the early trigger the
 * next launch would only start when this grid exits, and the overlap would be lost. Since this grid
 * has passed its own wait, at most two grids are resident at once. */
__device__ __forceinline__ void cuk_pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

static inline bool cuk_pdl_enabled()
{
    const char *e = std::getenv("AIINFRA_NO_PDL");
    return !(e && *e && *e != '0');
}

/* Lets kernel launch with smem bytes of dynamic shared memory. Without the opt-in a CTA gets at most
 * 48 KB of static and dynamic shared memory together, so the limit to compare with is the kernel's
 * maxDynamicSharedSizeBytes (48 KB minus its static shared memory until raised), not 48 KB: a dp4a GEMV
 * at 8 tokens x n_in 4096 asks for exactly 48 KB beside ~1 KB of static tables. The limit is only ever
 * raised (a captured graph may hold a launch that needed the higher one). */
template <typename... KArgs>
static inline cudaError_t cuk_smem_optin(void (*kernel)(KArgs...), size_t smem)
{
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, kernel);
    if (e != cudaSuccess || smem <= (size_t)fa.maxDynamicSharedSizeBytes) return e;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
}

/* The grid of a persistent kernel: opts kernel in to smem bytes of dynamic shared memory (cuk_smem_optin)
 * and sets *slots to how many of its CTAs of `threads` threads are resident at once on the current device
 * (CTAs per SM x SMs). cudaErrorInvalidConfiguration when not even one fits on an SM. */
template <typename... KArgs>
static inline cudaError_t cuk_resident_ctas(void (*kernel)(KArgs...), int threads, size_t smem, long long *slots)
{
    cudaError_t e;
    int dev = 0, nsm = 0, per_sm = 0;
    if ((e = cuk_smem_optin(kernel, smem)) != cudaSuccess) return e;
    if ((e = cudaGetDevice(&dev)) != cudaSuccess) return e;
    if ((e = cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return e;
    if ((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem)) != cudaSuccess) return e;
    if (per_sm < 1) return cudaErrorInvalidConfiguration;
    *slots = (long long)per_sm * nsm;
    return cudaSuccess;
}

/* cuk_launch_cluster(kernel, grid, block, shared_bytes, stream, cluster_x, args...): as
 * kernel<<<...>>>(args...) with the PDL attribute set and, for cluster_x > 1, thread-block clusters of
 * cluster_x consecutive CTAs along x (grid.x a multiple of cluster_x). Returns the launch's cudaError_t. */
template <typename... KArgs, typename... Args>
static inline cudaError_t cuk_launch_cluster(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                             cudaStream_t s, unsigned cluster_x, Args... args)
{
    cudaLaunchAttribute attr[2];
    unsigned n = 0;
    if (cuk_pdl_enabled()) {
        attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[n++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster_x > 1) {
        attr[n].id = cudaLaunchAttributeClusterDimension;
        attr[n].val.clusterDim.x = cluster_x;
        attr[n].val.clusterDim.y = 1;
        attr[n++].val.clusterDim.z = 1;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = n;
    return cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...);
}

/* cuk_launch(kernel, grid, block, shared_bytes, stream, args...): no clusters. */
template <typename... KArgs, typename... Args>
static inline cudaError_t cuk_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                     Args... args)
{
    return cuk_launch_cluster(kernel, grid, block, smem, s, 1u, args...);
}

#endif
