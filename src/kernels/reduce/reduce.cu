/* reduce.cu - the reduce ladder: sum of n fp32 values, one kernel per step from naive to the copy
 * bandwidth. Reading n floats once is the whole cost of a sum (1 FLOP per 4 bytes), so every step is
 * about keeping more bytes in flight and doing less work per byte; the ceiling is the device-to-device
 * copy bandwidth measured in the same run (src/kernels/ladder.c).
 *
 * Steps (each kernel's comment says what changes and why it should be faster):
 *   v1 atomicAdd per element      v2 shared-memory tree, interleaved addressing
 *   v3 sequential addressing      v4 first add during the global load
 *   v5 warp shuffles for the last 32 lanes
 *   v6 float4 loads + grid-stride loop (fixed grid, one small second pass)
 *   v7 single pass: the last block to finish sums the partials (counter in the scratch)
 *
 * Design: v2..v5 are multi-pass: one launch turns n values into ceil(n / per_block) partials, the
 * same kernel runs again on the partials until one value is left; the last pass writes *out. The
 * partials ping-pong between two halves of the scratch. v6/v7 use a fixed grid (8 blocks per SM, at
 * most REDUCE_MAX_GRID) so the second stage sums at most 2048 partials.
 * Invariants: 1. the order of every addition in v2..v7 depends only on n, the grid and the
 * alignment of x, never on timing (deterministic results); in v7 the last block sums the partials
 * in block order, whichever block arrives last. 2. Every kernel handles any n >= 1 (partial blocks
 * pad with 0, unaligned heads/tails of v6/v7 are read as scalars).
 */
#include <cuda_runtime.h>

#include "kernels/reduce/reduce.h"

#define RB 256                /* threads per block, every version */
#define REDUCE_MAX_GRID 2048  /* v6/v7 partials */

// ---- shared helpers ---------------------------------------------------------------------------

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, <= 1024); the result is valid in thread 0.
 * Every thread of the block must call it. */
__device__ __forceinline__ float block_sum(float v)
{
    __shared__ float part[32];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) part[w] = v;
    __syncthreads();
    if (w == 0) {
        v = lane < (int)(blockDim.x >> 5) ? part[lane] : 0.0f;
        v = warp_sum(v);
    }
    __syncthreads(); /* part[] may be reused by a later call */
    return v;
}

// ---- v1 ---------------------------------------------------------------------------------------

/* v1: every thread adds its element straight into *out with atomicAdd. Simple and correct, but all
 * n atomics hit one address: the L2 serialises them, so the rate is that of same-address atomics,
 * far below the bandwidth. The order of the additions changes from run to run. */
__global__ void reduce_v1_atomic(const float *__restrict__ x, int64_t n, float *out)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(out, x[i]);
}

// ---- v2 ---------------------------------------------------------------------------------------

/* v2: each block loads 256 values into shared memory and sums them in a tree (log2 256 = 8 steps),
 * one atomic-free partial per block. Interleaved addressing: at step s, thread t adds t + s when t is
 * a multiple of 2s. One global read per element instead of one atomic; but the `%` test makes the
 * active threads sparse, so every warp stays busy with a few lanes (divergence), and the strided
 * shared accesses conflict in the banks. */
__global__ void reduce_v2_interleaved(const float *__restrict__ x, int64_t n, float *__restrict__ part)
{
    __shared__ float s[RB];
    const unsigned t = threadIdx.x;
    const int64_t i = (int64_t)blockIdx.x * RB + t;
    s[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned st = 1; st < RB; st *= 2) {
        if (t % (2 * st) == 0) s[t] += s[t + st];
        __syncthreads();
    }
    if (t == 0) part[blockIdx.x] = s[0];
}

// ---- v3 ---------------------------------------------------------------------------------------

/* v3: sequential addressing: at step s (128, 64, ...) threads t < s add t + s. The active threads
 * are contiguous, so whole warps retire early instead of idling with one busy lane, and consecutive
 * lanes touch consecutive banks (no conflicts). Half the threads still idle from the first step. */
__global__ void reduce_v3_sequential(const float *__restrict__ x, int64_t n, float *__restrict__ part)
{
    __shared__ float s[RB];
    const unsigned t = threadIdx.x;
    const int64_t i = (int64_t)blockIdx.x * RB + t;
    s[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned st = RB / 2; st > 0; st >>= 1) {
        if (t < st) s[t] += s[t + st];
        __syncthreads();
    }
    if (t == 0) part[blockIdx.x] = s[0];
}

// ---- v4 ---------------------------------------------------------------------------------------

/* v4: each block covers 2 * 256 elements and every thread adds its two values while loading. Half
 * the blocks, so half the tree work and synchronisation per element, and two loads in flight per
 * thread instead of one. */
__global__ void reduce_v4_first_add(const float *__restrict__ x, int64_t n, float *__restrict__ part)
{
    __shared__ float s[RB];
    const unsigned t = threadIdx.x;
    const int64_t i = (int64_t)blockIdx.x * (2 * RB) + t;
    float v = i < n ? x[i] : 0.0f;
    if (i + RB < n) v += x[i + RB];
    s[t] = v;
    __syncthreads();
    for (unsigned st = RB / 2; st > 0; st >>= 1) {
        if (t < st) s[t] += s[t + st];
        __syncthreads();
    }
    if (t == 0) part[blockIdx.x] = s[0];
}

// ---- v5 ---------------------------------------------------------------------------------------

/* v5: as v4, but once 64 values are left the first warp finishes with register shuffles
 * (__shfl_down_sync): no shared-memory round trips and no __syncthreads for the last 6 steps, which
 * were pure overhead (one warp working, the whole block waiting). */
__global__ void reduce_v5_warp_shuffle(const float *__restrict__ x, int64_t n, float *__restrict__ part)
{
    __shared__ float s[RB];
    const unsigned t = threadIdx.x;
    const int64_t i = (int64_t)blockIdx.x * (2 * RB) + t;
    float v = i < n ? x[i] : 0.0f;
    if (i + RB < n) v += x[i + RB];
    s[t] = v;
    __syncthreads();
    for (unsigned st = RB / 2; st > 32; st >>= 1) {
        if (t < st) s[t] += s[t + st];
        __syncthreads();
    }
    if (t < 32) {
        v = warp_sum(s[t] + s[t + 32]);
        if (t == 0) part[blockIdx.x] = v;
    }
}

// ---- v6 / v7 ----------------------------------------------------------------------------------

/* This thread's share of x over a grid-stride loop with 16-byte loads: a scalar head up to the first
 * 16-byte boundary, float4 body (4 loads in flight per thread per iteration), scalar tail. */
__device__ __forceinline__ float thread_sum_vec4(const float *__restrict__ x, int64_t n)
{
    int64_t head = (int64_t)(((16u - ((uintptr_t)x & 15u)) & 15u) >> 2);
    if (head > n) head = n;
    const float4 *__restrict__ xv = (const float4 *)(x + head);
    const int64_t nv = (n - head) >> 2, tail0 = head + nv * 4;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    int64_t i = tid;
    for (; i + 3 * stride < nv; i += 4 * stride) {
        const float4 p = xv[i], q = xv[i + stride], r = xv[i + 2 * stride], u = xv[i + 3 * stride];
        a0 += (p.x + p.y) + (p.z + p.w);
        a1 += (q.x + q.y) + (q.z + q.w);
        a2 += (r.x + r.y) + (r.z + r.w);
        a3 += (u.x + u.y) + (u.z + u.w);
    }
    for (; i < nv; i += stride) {
        const float4 p = xv[i];
        a0 += (p.x + p.y) + (p.z + p.w);
    }
    if (tid < head) a1 += x[tid];
    if (tid < n - tail0) a2 += x[tail0 + tid];
    return (a0 + a1) + (a2 + a3);
}

/* v6: a fixed grid (8 blocks of 256 per SM) walks x with a grid-stride loop of float4 loads: a
 * quarter of the load instructions, 4 independent 16-byte loads in flight per thread, and the block
 * reduction (shuffles, then one warp) runs once per block instead of once per 512 elements. A second
 * launch of the same kernel, with one block, sums the <= 2048 partials. */
__global__ void reduce_v6_vec4_grid_stride(const float *__restrict__ x, int64_t n, float *__restrict__ part)
{
    const float v = block_sum(thread_sum_vec4(x, n));
    if (threadIdx.x == 0) part[blockIdx.x] = v;
}

/* v7: v6 in one launch. Each block writes its partial, makes it visible (__threadfence) and takes a
 * ticket from a counter; the block that draws the last ticket sums all partials in block order and
 * writes *out. Saves the second launch and its gap (a few microseconds: matters for small n, and in
 * a decode step full of small kernels). The counter is zeroed by a 4-byte memset before the launch
 * (so the scratch needs no set-up) and the order of the final sum does not depend on which block
 * came last. */
__global__ void reduce_v7_single_pass(const float *__restrict__ x, int64_t n, float *__restrict__ part,
                                      unsigned *counter, float *out)
{
    __shared__ bool last;
    const float v = block_sum(thread_sum_vec4(x, n));
    if (threadIdx.x == 0) {
        part[blockIdx.x] = v;
        __threadfence();
        last = atomicAdd(counter, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    float s = 0.0f;
    for (unsigned i = threadIdx.x; i < gridDim.x; i += blockDim.x) s += ((volatile float *)part)[i];
    s = block_sum(s);
    if (threadIdx.x == 0) *out = s;
}

// ---- host side --------------------------------------------------------------------------------

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Floats of the first ping-pong half (v2/v3: one partial per 256 elements). */
static int64_t half_elems(int64_t n) { return cdiv(n, RB) + 4; }

extern "C" size_t reduce_work_size(int64_t n)
{
    if (n < 1) n = 1;
    const int64_t pingpong = half_elems(n) + cdiv(n, (int64_t)RB * RB) + 4;
    const int64_t v67 = REDUCE_MAX_GRID + 4; /* partials + counter */
    return (size_t)(pingpong > v67 ? pingpong : v67) * sizeof(float);
}

typedef void (*pass_kernel)(const float *, int64_t, float *);

/* v2..v5: repeat the kernel (per_block elements per block) until one value is left. */
static int multipass(pass_kernel k, int per_block, cudaStream_t s, const float *x, int64_t n, float *out,
                     void *work, size_t work_size)
{
    if (n < 1 || !x || !out) return (int)cudaErrorInvalidValue;
    if (!work || work_size < reduce_work_size(n)) return (int)cudaErrorInvalidValue;
    float *buf[2] = { (float *)work, (float *)work + half_elems(n) };
    const float *in = x;
    int which = 0;
    for (;;) {
        const int64_t nb = cdiv(n, per_block);
        float *dst = nb == 1 ? out : buf[which];
        k<<<(unsigned)nb, RB, 0, s>>>(in, n, dst);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess || nb == 1) return (int)e;
        in = dst;
        n = nb;
        which ^= 1;
    }
}

static int grid_v67(int64_t n)
{
    int dev = 0, sms = 132;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
        sms = 132;
    int64_t g = cdiv(cdiv(n, 4), RB);
    const int64_t cap = (int64_t)sms * 8 < REDUCE_MAX_GRID ? (int64_t)sms * 8 : REDUCE_MAX_GRID;
    if (g > cap) g = cap;
    return g < 1 ? 1 : (int)g;
}

static int run_v1(void *stream, const float *x, int64_t n, float *out, void *work, size_t work_size)
{
    cudaStream_t s = (cudaStream_t)stream;
    if (n < 1 || !x || !out) return (int)cudaErrorInvalidValue;
    cudaError_t e = cudaMemsetAsync(out, 0, sizeof(float), s);
    if (e != cudaSuccess) return (int)e;
    reduce_v1_atomic<<<(unsigned)cdiv(n, RB), RB, 0, s>>>(x, n, out);
    return (int)cudaGetLastError();
}
static int run_v2(void *st, const float *x, int64_t n, float *out, void *w, size_t ws)
{
    return multipass(reduce_v2_interleaved, RB, (cudaStream_t)st, x, n, out, w, ws);
}
static int run_v3(void *st, const float *x, int64_t n, float *out, void *w, size_t ws)
{
    return multipass(reduce_v3_sequential, RB, (cudaStream_t)st, x, n, out, w, ws);
}
static int run_v4(void *st, const float *x, int64_t n, float *out, void *w, size_t ws)
{
    return multipass(reduce_v4_first_add, 2 * RB, (cudaStream_t)st, x, n, out, w, ws);
}
static int run_v5(void *st, const float *x, int64_t n, float *out, void *w, size_t ws)
{
    return multipass(reduce_v5_warp_shuffle, 2 * RB, (cudaStream_t)st, x, n, out, w, ws);
}
static int run_v6(void *stream, const float *x, int64_t n, float *out, void *work, size_t work_size)
{
    cudaStream_t s = (cudaStream_t)stream;
    if (n < 1 || !x || !out || !work || work_size < reduce_work_size(n)) return (int)cudaErrorInvalidValue;
    const int g = grid_v67(n);
    float *part = (float *)work;
    reduce_v6_vec4_grid_stride<<<g, RB, 0, s>>>(x, n, g == 1 ? out : part);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || g == 1) return (int)e;
    reduce_v6_vec4_grid_stride<<<1, RB, 0, s>>>(part, g, out);
    return (int)cudaGetLastError();
}
static int run_v7(void *stream, const float *x, int64_t n, float *out, void *work, size_t work_size)
{
    cudaStream_t s = (cudaStream_t)stream;
    if (n < 1 || !x || !out || !work || work_size < reduce_work_size(n)) return (int)cudaErrorInvalidValue;
    const int g = grid_v67(n);
    float *part = (float *)work;
    unsigned *counter = (unsigned *)(part + REDUCE_MAX_GRID);
    cudaError_t e = cudaMemsetAsync(counter, 0, sizeof *counter, s);
    if (e != cudaSuccess) return (int)e;
    reduce_v7_single_pass<<<g, RB, 0, s>>>(x, n, part, counter, out);
    return (int)cudaGetLastError();
}

extern "C" const reduce_version reduce_versions[] = {
    { "v1_atomic", "atomicAdd of every element into one address", run_v1 },
    { "v2_interleaved", "shared-memory tree per block, interleaved addressing (t % 2s)", run_v2 },
    { "v3_sequential", "shared-memory tree, sequential addressing (t < s): no divergence, no bank conflicts", run_v3 },
    { "v4_first_add", "two elements per thread added during the load: half the blocks", run_v4 },
    { "v5_warp_shuffle", "last 6 tree steps as warp shuffles, no __syncthreads", run_v5 },
    { "v6_vec4_grid", "float4 loads, grid-stride loop over a fixed grid, 2nd pass of <= 2048 partials", run_v6 },
    { "v7_single_pass", "v6 in one launch: last block (ticket counter) sums the partials in block order", run_v7 },
};
extern "C" const int reduce_n_versions = (int)(sizeof reduce_versions / sizeof reduce_versions[0]);
