/* k_prefetch.cu - cuk_prefetch_l2: start moving the first bytes of a weight matrix from HBM into L2.
 *
 * Why: at batch 1 a decode layer is four weight-streaming GEMVs separated by small kernels (rope +
 * KV store, attention, add + RMSNorm, SwiGLU) that move a few KB each and last 2-8 us. During those
 * microseconds HBM is idle: the next GEMV cannot start streaming before its input exists. Its
 * weights, though, do not depend on anything, so their first megabytes can be on their way into L2
 * while the small kernels run; the GEMV then finds them there and its stream is that much shorter.
 * The backend runs this kernel on a second stream forked after the previous product (backend_cuda.c,
 * cu_prefetch), so it overlaps the small kernels instead of adding a launch to the chain.
 *
 * How: each thread issues cp.async.bulk.prefetch.L2 (the Hopper TMA's fire-and-forget bulk prefetch:
 * one instruction for up to kChunk bytes, no registers or shared memory, nothing to wait for) on
 * 16 KB chunks, dealt round-robin over the grid so that the chunks near the start of the matrix,
 * which the GEMV's CTAs read first, are requested first. The lines land with the normal L2 priority;
 * the GEMVs load weights evict-first, so their own stream does not push these lines out first.
 * Nothing is written: a prefetch cannot change a result, only the time it takes.
 */
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.h"

namespace {

constexpr size_t kChunk = 16384; /* bytes per prefetch instruction */
constexpr int kThreads = 32;

__global__ void k_prefetch_l2(const char *p, size_t bytes)
{
    const size_t n_chunks = (bytes + kChunk - 1) / kChunk;
    const size_t stride = (size_t)gridDim.x * kThreads;
    for (size_t c = (size_t)blockIdx.x * kThreads + threadIdx.x; c < n_chunks; c += stride) {
        const size_t off = c * kChunk;
        const unsigned n = (unsigned)(bytes - off < kChunk ? bytes - off : kChunk);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off), "r"(n) : "memory");
    }
}

} // namespace

extern "C" ai_status cuk_prefetch_l2(cuk_stream s, const void *p, size_t bytes, int max_ctas, ai_err *err)
{
    bytes &= ~(size_t)15; /* the bulk prefetch takes multiples of 16 bytes from a 16-byte aligned address */
    if (!bytes) return AI_OK;
    if (((uintptr_t)p & 15) || max_ctas < 1) return ai_err_set(err, AI_ERR_INVALID, "cuk_prefetch_l2: unaligned or no CTAs");
    const size_t n_chunks = (bytes + kChunk - 1) / kChunk;
    size_t grid = (n_chunks + kThreads - 1) / kThreads;
    if (grid > (size_t)max_ctas) grid = (size_t)max_ctas;
    k_prefetch_l2<<<(unsigned)grid, kThreads, 0, (cudaStream_t)s>>>((const char *)p, bytes);
    CUK_LAUNCHED(err, "k_prefetch_l2");
    return AI_OK;
}
