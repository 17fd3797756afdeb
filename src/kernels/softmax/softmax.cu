/* softmax.cu - the softmax ladder over rows (row length 1k..32k and beyond): one kernel per step.
 *
 * A row softmax needs the row's maximum (for a safe exp), the sum of exp(x - max), then one write per
 * element: the minimum traffic is one read and one write of the matrix. Naive code reads the row
 * three times with poorly coalesced accesses; the ladder removes that waste step by step, and the
 * ceiling is the copy bandwidth measured in the same run (src/kernels/ladder.c).
 *
 *   v1 one thread per row, 3 passes (max, sum, normalise)
 *   v2 one block per row, shared-memory tree reductions (still 3 passes)
 *   v3 one warp per row, register shuffles (no shared memory, no __syncthreads)
 *   v4 one block per row sized to the row, warp shuffles + one shared slot per warp (long rows)
 *   v5 online softmax: max and sum in one pass (running max rescales the running sum), then write
 *   v6 v5 with 16-byte loads (float4, or 4 bf16) and the row held in registers: 1 read + 1 write;
 *      also a bf16 variant (bf16 in and out, fp32 math)
 *   v7 v6 without the online rescaling: the row is in registers, so take the max first, then one
 *      exp per element (ex2.approx, kept in registers for the write), and pack several short rows
 *      into one 256-thread block (a warp per row at 1k columns); bf16 variant too
 *   v8 v7 with 16-byte accesses in bf16 too (8 bf16, kept packed in registers, the exponent
 *      recomputed in the write), one exchange of (max, sum) pairs per row instead of two reductions,
 *      and rows past 16k fp32 / 32k bf16 split over a thread-block cluster of 3..8 blocks (the pairs
 *      through distributed shared memory)
 *   v9 v8 with "cache streaming" loads and stores (ld.global.cs / st.global.cs, evict-first): the
 *      matrix passes through the 50 MB L2 once, so its lines need not displace each other on the
 *      way (same kernel, template flag CS). Measured 2026-12-04 (second session), H200, one run,
 *      copy 4,206 GB/s, v8 in the same run: fp32 97.8 / 96.9 / 91.3% of copy at 1k / 4k / 32k
 *      columns (v8 96.2 / 94.4 / 89.7%), bf16 94.1 / 93.7 / 87.3% (v8 90.6 / 90.6 / 84.1%)
 *
 * Invariants: 1. the exponent is always exp(x - m) with m >= x for every element it is applied to, so
 * it never overflows; the online merge uses exp(m_old - m_new) <= 1. 2. every version handles any
 * cols >= 1 (partial vectors and warps guarded); v6 takes its 16-byte path only when cols % 4 == 0
 * and both pointers are 16-byte (fp32) / 8-byte (bf16) aligned, otherwise the same kernel runs with
 * scalar accesses; v7 takes its kernel under the same condition and cols <= 32768, otherwise it runs
 * v6; v8 takes its kernel when rows are 16-byte aligned (cols % 4 fp32, % 8 bf16, aligned pointers)
 * and cols <= 64k fp32 / 128k bf16, otherwise it runs v7 (v9 alike). 3. All math is fp32 (bf16 only as storage).
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "kernels/softmax/softmax.h"

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- reductions -------------------------------------------------------------------------------

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* 2^x on the SFU (ex2.approx: relative error ~2^-22, 2^-inf = 0). */
__device__ __forceinline__ float ex2(float x)
{
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}
#define KLOG2E 1.4426950408889634f

/* (m, d) pairs: d is a sum of exp(x - m). Merging rescales both to the larger max. */
__device__ __forceinline__ void md_merge(float &m, float &d, float m2, float d2)
{
    const float mm = fmaxf(m, m2);
    const float a = m == -INFINITY ? 0.0f : d * expf(m - mm);
    const float b = m2 == -INFINITY ? 0.0f : d2 * expf(m2 - mm);
    m = mm;
    d = a + b;
}
__device__ __forceinline__ void warp_md(float &m, float &d)
{
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), d2 = __shfl_xor_sync(0xffffffffu, d, o);
        md_merge(m, d, m2, d2);
    }
}

/* Block-wide max / sum / (m, d), result in every thread. blockDim.x a multiple of 32; all threads
 * call. The trailing barrier lets the shared slots be reused at once. */
__device__ __forceinline__ float block_max(float v)
{
    __shared__ float s[32];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    if (lane == 0) s[w] = v;
    __syncthreads();
    v = warp_max(lane < nw ? s[lane] : -INFINITY);
    __syncthreads();
    return v;
}
__device__ __forceinline__ float block_sum(float v)
{
    __shared__ float s[32];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) s[w] = v;
    __syncthreads();
    v = warp_sum(lane < nw ? s[lane] : 0.0f);
    __syncthreads();
    return v;
}
__device__ __forceinline__ void block_md(float &m, float &d)
{
    __shared__ float sm[32], sd[32];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    warp_md(m, d);
    if (lane == 0) sm[w] = m, sd[w] = d;
    __syncthreads();
    m = lane < nw ? sm[lane] : -INFINITY;
    d = lane < nw ? sd[lane] : 0.0f;
    warp_md(m, d);
    __syncthreads();
}

// ---- v1 ---------------------------------------------------------------------------------------

/* v1: one thread per row, three passes over the row (max, sum of exp, write). The obvious loop.
 * Neighbouring threads read addresses a whole row apart, so each warp load touches 32 different
 * cache lines (no coalescing), only `rows` threads exist (a few thousand: the GPU is mostly idle),
 * and the row is read three times. The sum is kept in double: one fp32 running sum over 32k terms
 * loses ~4e-5 relative (measured with numpy's float32 cumsum), over the 1e-5 bound of the tests, and
 * the naive version should be slow for the reasons above, not wrong. */
__global__ void softmax_v1_naive(const float *__restrict__ x, float *__restrict__ y, int rows, int cols)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float *xr = x + (int64_t)r * cols;
    float *yr = y + (int64_t)r * cols;
    float m = -INFINITY;
    for (int c = 0; c < cols; c++) m = fmaxf(m, xr[c]);
    double d = 0.0;
    for (int c = 0; c < cols; c++) d += expf(xr[c] - m);
    const float inv = (float)(1.0 / d);
    for (int c = 0; c < cols; c++) yr[c] = expf(xr[c] - m) * inv;
}

// ---- v2 ---------------------------------------------------------------------------------------

/* v2: one block of 256 threads per row: consecutive threads read consecutive elements (coalesced),
 * and rows * 256 threads keep the GPU busy. Max and sum are reduced through a shared-memory tree
 * (8 steps, a __syncthreads each). Still three passes over the row. */
__global__ void softmax_v2_block_shared(const float *__restrict__ x, float *__restrict__ y, int rows, int cols)
{
    __shared__ float s[256];
    const int t = threadIdx.x;
    const float *xr = x + (int64_t)blockIdx.x * cols;
    float *yr = y + (int64_t)blockIdx.x * cols;
    float m = -INFINITY;
    for (int c = t; c < cols; c += 256) m = fmaxf(m, xr[c]);
    s[t] = m;
    __syncthreads();
    for (int st = 128; st > 0; st >>= 1) {
        if (t < st) s[t] = fmaxf(s[t], s[t + st]);
        __syncthreads();
    }
    m = s[0];
    __syncthreads();
    float d = 0.0f;
    for (int c = t; c < cols; c += 256) d += expf(xr[c] - m);
    s[t] = d;
    __syncthreads();
    for (int st = 128; st > 0; st >>= 1) {
        if (t < st) s[t] += s[t + st];
        __syncthreads();
    }
    const float inv = 1.0f / s[0];
    for (int c = t; c < cols; c += 256) yr[c] = expf(xr[c] - m) * inv;
}

// ---- v3 ---------------------------------------------------------------------------------------

/* v3: one warp per row (4 rows per block of 128): the reductions are 5 register shuffles, with no
 * shared memory and no block barriers, and a warp never waits for another. Good for short rows; for
 * 32k-element rows 32 lanes have too few loads in flight to cover the memory latency. */
__global__ void softmax_v3_warp(const float *__restrict__ x, float *__restrict__ y, int rows, int cols)
{
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= rows) return; /* whole warps leave together: the shuffles stay full-mask */
    const float *xr = x + (int64_t)r * cols;
    float *yr = y + (int64_t)r * cols;
    float m = -INFINITY;
    for (int c = lane; c < cols; c += 32) m = fmaxf(m, xr[c]);
    m = warp_max(m);
    float d = 0.0f;
    for (int c = lane; c < cols; c += 32) d += expf(xr[c] - m);
    const float inv = 1.0f / warp_sum(d);
    for (int c = lane; c < cols; c += 32) yr[c] = expf(xr[c] - m) * inv;
}

// ---- v4 ---------------------------------------------------------------------------------------

/* v4: one block per row sized to the row (up to 1024 threads, about 8 elements each) for long rows:
 * many more loads in flight per row than v3, and the block reductions are warp shuffles plus a
 * single shared slot per warp (2 barriers per reduction instead of v2's 8). Three passes remain;
 * for rows up to a few hundred KiB the 2nd and 3rd mostly hit L2. */
__global__ void softmax_v4_block_shuffle(const float *__restrict__ x, float *__restrict__ y, int rows, int cols)
{
    const float *xr = x + (int64_t)blockIdx.x * cols;
    float *yr = y + (int64_t)blockIdx.x * cols;
    const int t = threadIdx.x, bd = blockDim.x;
    float m = -INFINITY;
    for (int c = t; c < cols; c += bd) m = fmaxf(m, xr[c]);
    m = block_max(m);
    float d = 0.0f;
    for (int c = t; c < cols; c += bd) d += expf(xr[c] - m);
    const float inv = 1.0f / block_sum(d);
    for (int c = t; c < cols; c += bd) yr[c] = expf(xr[c] - m) * inv;
}

// ---- v5 ---------------------------------------------------------------------------------------

/* v5: online softmax. Each thread keeps a running max m and a running sum d of exp(x - m); a larger
 * element rescales d by exp(m_old - m_new). Max and sum come out of one pass, the (m, d) pairs merge
 * across the block the same way: two passes over the row instead of three. */
__global__ void softmax_v5_online(const float *__restrict__ x, float *__restrict__ y, int rows, int cols)
{
    const float *xr = x + (int64_t)blockIdx.x * cols;
    float *yr = y + (int64_t)blockIdx.x * cols;
    const int t = threadIdx.x, bd = blockDim.x;
    float m = -INFINITY, d = 0.0f;
    for (int c = t; c < cols; c += bd) {
        const float v = xr[c];
        if (v > m) {
            d = (m == -INFINITY ? 0.0f : d * expf(m - v)) + 1.0f;
            m = v;
        } else {
            d += expf(v - m);
        }
    }
    block_md(m, d);
    const float inv = 1.0f / d;
    for (int c = t; c < cols; c += bd) yr[c] = expf(xr[c] - m) * inv;
}

// ---- v6 ---------------------------------------------------------------------------------------

#define V6_K 8 /* vectors of W elements each thread keeps in registers */

template <typename T> struct io;
template <> struct io<float> {
    static __device__ __forceinline__ float4 ld4(const float *p, int64_t i) { return ((const float4 *)p)[i]; }
    static __device__ __forceinline__ void st4(float *p, int64_t i, float4 v) { ((float4 *)p)[i] = v; }
    static __device__ __forceinline__ float ld1(const float *p, int64_t i) { return p[i]; }
    static __device__ __forceinline__ void st1(float *p, int64_t i, float v) { p[i] = v; }
};
template <> struct io<__nv_bfloat16> {
    typedef __nv_bfloat16 bf;
    static __device__ __forceinline__ float4 ld4(const bf *p, int64_t i)
    {
        const uint2 u = ((const uint2 *)p)[i];
        const __nv_bfloat162 a = *(const __nv_bfloat162 *)&u.x, b = *(const __nv_bfloat162 *)&u.y;
        const float2 fa = __bfloat1622float2(a), fb = __bfloat1622float2(b);
        return make_float4(fa.x, fa.y, fb.x, fb.y);
    }
    static __device__ __forceinline__ void st4(bf *p, int64_t i, float4 v)
    {
        const __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
        uint2 u;
        u.x = *(const unsigned *)&a;
        u.y = *(const unsigned *)&b;
        ((uint2 *)p)[i] = u;
    }
    static __device__ __forceinline__ float ld1(const bf *p, int64_t i) { return __bfloat162float(p[i]); }
    static __device__ __forceinline__ void st1(bf *p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }
};

/* Loads vector i (W elements; W = 4 or 1) of row p as a float4 (unused lanes -inf). */
template <typename T, int W> __device__ __forceinline__ float4 v6_load(const T *p, int64_t i)
{
    if (W == 4) return io<T>::ld4(p, i);
    return make_float4(io<T>::ld1(p, i), -INFINITY, -INFINITY, -INFINITY);
}
template <typename T, int W> __device__ __forceinline__ void v6_store(T *p, int64_t i, float4 v)
{
    if (W == 4) io<T>::st4(p, i, v);
    else io<T>::st1(p, i, v.x);
}
__device__ __forceinline__ void v6_update(float &m, float &d, float4 v)
{
    const float mm = fmaxf(fmaxf(m, v.x), fmaxf(fmaxf(v.y, v.z), v.w));
    d = (m == -INFINITY ? 0.0f : d * expf(m - mm)) + expf(v.x - mm) + expf(v.y - mm) + expf(v.z - mm) +
        expf(v.w - mm);
    m = mm;
}
__device__ __forceinline__ float4 v6_norm(float4 v, float m, float inv)
{
    return make_float4(expf(v.x - m) * inv, expf(v.y - m) * inv, expf(v.z - m) * inv, expf(v.w - m) * inv);
}

/* v6: v5 with 16-byte accesses (4 fp32, or 4 bf16 in 8 bytes) and the row kept in registers: each
 * thread loads up to 8 vectors once, updates its (m, d) from registers, and after the block merge
 * writes exp(x - m) / d from the same registers: the row is read once and written once, the minimum.
 * A quarter of the memory instructions of v5. Rows longer than blockDim * 8 * W (32k fp32 at 1024
 * threads) are still correct: the excess is read again in the write pass. W = 1 is the same kernel
 * with scalar accesses for rows that are not 16-byte aligned (cols % 4 != 0). */
template <typename T, int W>
__global__ void softmax_v6_vec_online(const T *__restrict__ x, T *__restrict__ y, int rows, int cols)
{
    const T *xr = x + (int64_t)blockIdx.x * cols;
    T *yr = y + (int64_t)blockIdx.x * cols;
    const int t = threadIdx.x, bd = blockDim.x, nv = cols / W;
    float4 v[V6_K];
    float m = -INFINITY, d = 0.0f;
#pragma unroll
    for (int j = 0; j < V6_K; j++) {
        const int c = t + j * bd;
        if (c < nv) {
            v[j] = v6_load<T, W>(xr, c);
            v6_update(m, d, v[j]);
        }
    }
    for (int c = t + V6_K * bd; c < nv; c += bd) v6_update(m, d, v6_load<T, W>(xr, c));
    block_md(m, d);
    const float inv = 1.0f / d;
#pragma unroll
    for (int j = 0; j < V6_K; j++) {
        const int c = t + j * bd;
        if (c < nv) v6_store<T, W>(yr, c, v6_norm(v[j], m, inv));
    }
    for (int c = t + V6_K * bd; c < nv; c += bd) v6_store<T, W>(yr, c, v6_norm(v6_load<T, W>(xr, c), m, inv));
}

// ---- v7 ---------------------------------------------------------------------------------------

#define V7_VPT 8        /* 4-element vectors per thread: the whole row in registers */
#define V7_MAX_COLS (1024 * V7_VPT * 4)

/* Max (op 0) or sum (op 1) over the tpr threads of this thread's row group (tpr a multiple of 32
 * dividing blockDim.x; a group is tpr / 32 consecutive warps). All threads of the block call. */
template <int OP> __device__ __forceinline__ float group_reduce(float v, int tpr)
{
    v = OP == 0 ? warp_max(v) : warp_sum(v);
    if (tpr == 32) return v;
    __shared__ float s[32];
    const int w = threadIdx.x >> 5, wpg = tpr >> 5, g0 = w - w % wpg;
    if ((threadIdx.x & 31) == 0) s[w] = v;
    __syncthreads();
    v = s[g0];
    for (int i = 1; i < wpg; i++) v = OP == 0 ? fmaxf(v, s[g0 + i]) : v + s[g0 + i];
    __syncthreads();
    return v;
}

/* v7: with the row already in registers (v6), the online (m, d) rescaling is wasted work: v6 pays
 * 1.25 expf per element in its first pass (one per element plus a rescale per vector) and another
 * in the write. v7 takes the row max first (no exp), then computes e = 2^((x - m) log2 e) once per
 * element with the SFU's ex2.approx, keeps e in the same registers, sums, and writes e / d: one
 * exp per element, half of v6's. Short rows are packed several to a 256-thread block (at 1k fp32
 * columns one warp per row, reductions by shuffles alone, no barriers), so each SM keeps more rows
 * - and more loads - in flight than with v6's one-warp blocks. */
template <typename T>
__global__ void __launch_bounds__(1024) softmax_v7_regs(const T *__restrict__ x, T *__restrict__ y, int rows,
                                                        int cols, int tpr)
{
    const int g = threadIdx.x / tpr, t = threadIdx.x % tpr;
    const int row = blockIdx.x * (blockDim.x / tpr) + g;
    const bool live = row < rows; /* dead groups still take part in the barriers */
    const T *xr = x + (int64_t)(live ? row : 0) * cols;
    T *yr = y + (int64_t)row * cols;
    const int nv = cols / 4;
    float4 v[V7_VPT];
    float m = -INFINITY;
#pragma unroll
    for (int j = 0; j < V7_VPT; j++) {
        const int c = t + j * tpr;
        v[j] = live && c < nv ? io<T>::ld4(xr, c) : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
        m = fmaxf(m, fmaxf(fmaxf(v[j].x, v[j].y), fmaxf(v[j].z, v[j].w)));
    }
    m = group_reduce<0>(m, tpr);
    const float ml = m * KLOG2E;
    float d = 0.0f;
#pragma unroll
    for (int j = 0; j < V7_VPT; j++) { /* 2^(-inf) = 0: padding adds nothing */
        v[j] = make_float4(ex2(fmaf(v[j].x, KLOG2E, -ml)), ex2(fmaf(v[j].y, KLOG2E, -ml)),
                           ex2(fmaf(v[j].z, KLOG2E, -ml)), ex2(fmaf(v[j].w, KLOG2E, -ml)));
        d += (v[j].x + v[j].y) + (v[j].z + v[j].w);
    }
    d = group_reduce<1>(d, tpr);
    if (!live) return;
    const float inv = 1.0f / d;
#pragma unroll
    for (int j = 0; j < V7_VPT; j++) {
        const int c = t + j * tpr;
        if (c < nv) io<T>::st4(yr, c, make_float4(v[j].x * inv, v[j].y * inv, v[j].z * inv, v[j].w * inv));
    }
}

// ---- v8 ---------------------------------------------------------------------------------------

#define V8_K 8       /* 16-byte vectors per thread, held in registers */
#define V8_TPB 256     /* threads per block packing short rows, and per cluster block */
#define V8_ROW_MAX 512 /* threads of a row in one block: longer rows go to a cluster */
#define V8_MAX_CLUSTER 8
#define V8_TPB_MAX 512   /* the largest block: V8_ROW_MAX */
#define V8_MIN_BLOCKS 2  /* 2 blocks of 512: at most 64 registers, so 4 blocks of 256 fit an SM */
#define V8_SLOTS (V8_MAX_CLUSTER * V8_TPB_MAX / 32)

/* Per dtype: one 16-byte vector (4 fp32 or 8 bf16), its padding (-inf) and its maximum. */
/* CS (v9): ld.global.cs / st.global.cs, "cache streaming": the lines are marked evict-first, so the
 * matrix streaming through does not push out lines still to be read or written back. */
template <bool CS = false> __device__ __forceinline__ float4 v8_ld(const float *p, int64_t i)
{
    return CS ? __ldcs((const float4 *)p + i) : ((const float4 *)p)[i];
}
template <bool CS = false> __device__ __forceinline__ uint4 v8_ld(const __nv_bfloat16 *p, int64_t i)
{
    return CS ? __ldcs((const uint4 *)p + i) : ((const uint4 *)p)[i];
}
__device__ __forceinline__ void v8_pad(float4 &v) { v = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY); }
__device__ __forceinline__ void v8_pad(uint4 &v) { v = make_uint4(0xFF80FF80u, 0xFF80FF80u, 0xFF80FF80u, 0xFF80FF80u); }
__device__ __forceinline__ float v8_max(float m, const float4 &v)
{
    return fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
}
__device__ __forceinline__ float v8_max(float m, const uint4 &v) /* packed bf16x2 max: 4 instructions per 8 */
{
    const __nv_bfloat162 a = __hmax2(*(const __nv_bfloat162 *)&v.x, *(const __nv_bfloat162 *)&v.y);
    const __nv_bfloat162 b = __hmax2(*(const __nv_bfloat162 *)&v.z, *(const __nv_bfloat162 *)&v.w);
    const __nv_bfloat162 c = __hmax2(a, b);
    return fmaxf(m, fmaxf(__low2float(c), __high2float(c)));
}
__device__ __forceinline__ float bf_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf_hi(unsigned w) { return __uint_as_float(w & 0xFFFF0000u); }
/* The same unpacking written as byte permutes, for the write pass: written alike, the compiler keeps
 * pass 2's 64 unpacked floats alive across the sum reduction (109 registers, ptxas) instead of
 * unpacking again from the 32 packed registers (one instruction per element either way). */
__device__ __forceinline__ float bf_lo2(unsigned w) { return __uint_as_float(__byte_perm(w, 0u, 0x1044)); }
__device__ __forceinline__ float bf_hi2(unsigned w) { return __uint_as_float(__byte_perm(w, 0u, 0x3244)); }

/* 2^((x - m) log2e) for a shift m with ml = m log2e (rounded): one FFMA when |m| <= V8_EXACT_MAX, else
 * the subtraction first. fmaf(x, log2e, -ml) is off by ml's rounding, 0.5 ulp(|m| log2e): harmless
 * for ordinary logits (< 4e-6 at |m| <= 64), but a warp whose slice is all -1e30 (a causal mask
 * written as a large negative number) would get 2^(1e23) = inf. `big` is uniform over a row group. */
#define V8_EXACT_MAX 64.0f
__device__ __forceinline__ float v8_e(float x, float m, float ml, bool big)
{
    return ex2(big ? (x - m) * KLOG2E : fmaf(x, KLOG2E, -ml));
}
/* Pass 2, sum of 2^((x - m) log2e). fp32 keeps e in place of x for the write (v7); bf16 keeps the
 * packed input (half the registers per element) and recomputes the exponent in the write. */
__device__ __forceinline__ float v8_exp_sum(float4 &v, float m, float ml, bool big)
{
    v = make_float4(v8_e(v.x, m, ml, big), v8_e(v.y, m, ml, big), v8_e(v.z, m, ml, big), v8_e(v.w, m, ml, big));
    return (v.x + v.y) + (v.z + v.w);
}
__device__ __forceinline__ float v8_exp_sum(uint4 &v, float m, float ml, bool big)
{
    const unsigned w[4] = { v.x, v.y, v.z, v.w };
    float d = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; i++) d += v8_e(bf_lo(w[i]), m, ml, big) + v8_e(bf_hi(w[i]), m, ml, big);
    return d;
}
/* Pass 3: y = e / d (fp32), or y = 2^((x - M) log2e - log2 d) rounded to bf16 (one ex2, no divide;
 * cl = M log2e + log2 d). */
template <bool CS = false>
__device__ __forceinline__ void v8_store(float *p, int64_t i, const float4 &e, float inv, float, float, float, bool)
{
    const float4 o = make_float4(e.x * inv, e.y * inv, e.z * inv, e.w * inv);
    if (CS) __stcs((float4 *)p + i, o);
    else ((float4 *)p)[i] = o;
}
__device__ __forceinline__ unsigned bf2_pack(float lo, float hi)
{
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *(const unsigned *)&h;
}
__device__ __forceinline__ float v8_y(float x, float M, float cl, float l2d, bool big)
{
    return ex2(big ? fmaf(x - M, KLOG2E, -l2d) : fmaf(x, KLOG2E, -cl));
}
template <bool CS = false>
__device__ __forceinline__ void v8_store(__nv_bfloat16 *p, int64_t i, const uint4 &v, float, float M, float cl,
                                         float l2d, bool big)
{
    const unsigned w[4] = { v.x, v.y, v.z, v.w };
    unsigned o[4];
#pragma unroll
    for (int k = 0; k < 4; k++)
        o[k] = bf2_pack(v8_y(bf_lo2(w[k]), M, cl, l2d, big), v8_y(bf_hi2(w[k]), M, cl, l2d, big));
    if (CS) __stcs((uint4 *)p + i, make_uint4(o[0], o[1], o[2], o[3]));
    else ((uint4 *)p)[i] = make_uint4(o[0], o[1], o[2], o[3]);
}
__device__ __forceinline__ float lg2(float x)
{
    float r;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

/* Cluster barrier halves (sm_90). arrive.relaxed orders nothing: used only to know that every block
 * of the cluster has started before one writes into another's shared memory. */
__device__ __forceinline__ void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
/* Stores v into slot i of the shared array s of cluster block `rank` (distributed shared memory). */
__device__ __forceinline__ void dsmem_store(float *s, int i, unsigned rank, float v)
{
    unsigned a = (unsigned)__cvta_generic_to_shared(s + i), r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
    asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(r), "f"(v) : "memory");
}

/* Max (OP 0) or sum (OP 1) within a warp over groups of tpr threads (tpr a power of two <= 32, or
 * any multiple of 32: then over the whole warp). */
template <int OP> __device__ __forceinline__ float v8_warp(float v, int tpr)
{
    for (int o = (tpr < 32 ? tpr : 32) >> 1; o > 0; o >>= 1) {
        const float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = OP == 0 ? fmaxf(v, u) : v + u;
    }
    return v;
}

/* v8: v7 with every access 16 bytes wide, one barrier per row, and long rows split over a cluster.
 *  - bf16: 8 elements per 16-byte access (v7: 4 per 8 bytes, so twice the memory instructions per
 *    byte) kept packed in registers: 2 bytes of register per element in flight instead of v7's 4, so
 *    an SM holds twice the bf16 bytes in flight (Little's law: bytes in flight = bandwidth x latency,
 *    and v7 bf16 held half of fp32's). The max is taken on packed pairs (bf16x2 max); the write
 *    recomputes the exponent with the normalisation folded in, y = 2^(x log2e - (M log2e + log2 D)),
 *    one ex2 and half a bf16x2 pack per element and no multiply. fp32 keeps v7's e in registers.
 *  - one exchange per row instead of two reductions: each warp takes its own max m_w (shuffles),
 *    its e = 2^((x - m_w) log2e) and their sum d_w; the warps of a row then swap (m_w, d_w) pairs
 *    once and merge them, M = max m_w, D = sum d_w 2^((m_w - M) log2e), and scale their e by
 *    2^((m_w - M) log2e) / D (the merge of online softmax, done once per warp, not per element).
 *    Rows of at most 32 threads need no exchange at all (shuffles only, as in v7).
 *  - rows up to V8_ROW_MAX * V8_K vectors (16k fp32, 32k bf16) in one block: tpr threads per row,
 *    tpr down to 1 (a 1k bf16 row is 16 threads), packed several rows per 256-thread block as in v7;
 *    the exchange is one shared slot pair per warp and one barrier.
 *  - longer rows (up to 64k fp32, 128k bf16): a cluster of csize <= 8 blocks of <= 256 threads per
 *    row, each holding its slice in registers; every warp stores its pair into every block's slots
 *    through distributed shared memory, then one cluster barrier. (One more barrier, arrived at
 *    before the loads and waited on after them, makes sure no block writes into a block that has not
 *    started.) v7 ran a 32k fp32 row as one 1024-thread block: one block per SM, whose memory traffic
 *    stops during its two block reductions; 256-thread blocks of different rows overlap their load,
 *    exchange and store phases on each SM.
 * Measured 2026-12-04, H200, copy 4,235-4,265 GB/s, two runs (v7 in the same runs):
 *   fp32  32768x1024 95.7 / 96.0% (v7 95.4 / 96.0), 8192x4096 94.2 / 95.0% (95.1 / 95.6),
 *         1024x32768 89.2 / 89.2% (80.9 / 82.1): a cluster of 4 blocks of 256 per row;
 *   bf16  32768x1024 90.8 / 91.6% (v7 78.3 / 79.2), 8192x4096 90.8 / 91.4% (69.9 / 72.1),
 *         1024x32768 84.6 / 85.5% (48.5 / 48.9): one 512-thread block per row.
 * The 32k bf16 row is one block, not a cluster, because a cluster launch itself cost there: the same
 * row as a cluster of 2 x 256 ran at 78.9 / 79.8%, and a "cluster" of one 512-thread block, launched
 * with the cluster attribute, at 78.7%, against 84.6 / 85.5% plainly launched. For 32k fp32 the
 * cluster still wins (89% against v7's 82% with one 1024-thread block, which a plain launch needs).
 * 63 (fp32) and 64 (bf16) registers (ptxas), no spills, 1 KiB of shared slots. */
template <typename T, bool CL, bool CS = false>
__global__ void __launch_bounds__(V8_TPB_MAX, V8_MIN_BLOCKS) softmax_v8_cluster(const T *__restrict__ x,
                                                                                T *__restrict__ y, int rows,
                                                                                int cols, int tpr, int csize)
{
    typedef typename std::conditional<sizeof(T) == 4, float4, uint4>::type R;
    const int W = 16 / (int)sizeof(T);
    __shared__ float s_m[V8_SLOTS], s_d[V8_SLOTS];
    if (CL) cluster_arrive_relaxed();
    const int nv = cols / W;
    int row, t, base, cnt;
    if (CL) {
        row = blockIdx.x / csize;
        const int per = (nv + csize - 1) / csize;
        base = (blockIdx.x % csize) * per;
        cnt = min(per, nv - base);
        t = threadIdx.x;
    } else {
        row = blockIdx.x * (blockDim.x / tpr) + threadIdx.x / tpr;
        t = threadIdx.x % tpr;
        base = 0;
        cnt = row < rows ? nv : 0; /* dead groups still take part in the barriers */
    }
    const int64_t off = (int64_t)(row < rows ? row : 0) * cols + (int64_t)base * W;
    const T *xr = x + off;
    T *yr = y + off;
    R v[V8_K];
    float m = -INFINITY;
#pragma unroll
    for (int j = 0; j < V8_K; j++) {
        const int c = t + j * tpr;
        if (c < cnt) v[j] = v8_ld<CS>(xr, c);
        else v8_pad(v[j]);
        m = v8_max(m, v[j]);
    }
    m = v8_warp<0>(m, tpr);
    /* a warp of padding only: m = -inf, shift 0 so e = 0, d = 0 */
    const float ms = m == -INFINITY ? 0.0f : m, ml = ms * KLOG2E;
    const bool big = fabsf(ms) > V8_EXACT_MAX;
    float d = 0.0f;
#pragma unroll
    for (int j = 0; j < V8_K; j++) d += v8_exp_sum(v[j], ms, ml, big); /* 2^(-inf) = 0: padding adds nothing */
    d = v8_warp<1>(d, tpr);
    float M = ms; /* the row's max (unscaled: differences of maxima stay exact where it matters) */
    if (CL || tpr > 32) {
        const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
        int g0, n; /* this row's slots */
        if (CL) {
            const int nw = blockDim.x >> 5;
            cluster_wait();
            if (lane < csize) {
                dsmem_store(s_m, (blockIdx.x % csize) * nw + w, (unsigned)lane, m);
                dsmem_store(s_d, (blockIdx.x % csize) * nw + w, (unsigned)lane, d);
            }
            cluster_arrive();
            cluster_wait();
            g0 = 0, n = csize * nw;
        } else {
            if (lane == 0) s_m[w] = m, s_d[w] = d; /* -inf for padding: weight 0 below */
            __syncthreads();
            n = tpr >> 5, g0 = w - w % n;
        }
        M = -INFINITY;
        for (int i = lane; i < n; i += 32) M = fmaxf(M, s_m[g0 + i]);
        M = warp_max(M);
        float dd = 0.0f;
        for (int i = lane; i < n; i += 32) dd += s_d[g0 + i] * ex2((s_m[g0 + i] - M) * KLOG2E);
        d = warp_sum(dd);
    }
    if (row >= rows) return;
    const float inv = ex2((ms - M) * KLOG2E) / d, l2d = lg2(d), cl = fmaf(M, KLOG2E, l2d);
    const bool bigM = fabsf(M) > V8_EXACT_MAX;
#pragma unroll
    for (int j = 0; j < V8_K; j++) {
        const int c = t + j * tpr;
        if (c < cnt) v8_store<CS>(yr, c, v[j], inv, M, cl, l2d, bigM);
    }
}

// ---- host side --------------------------------------------------------------------------------

static bool bad_args(const void *x, const void *y, int rows, int cols)
{
    return !x || !y || x == y || rows < 1 || cols < 1 || cols > SOFTMAX_MAX_COLS;
}

/* Threads for a block per row: about `per` elements each, a multiple of 32 in [lo, 1024]. */
static int row_threads(int64_t elems, int per, int lo)
{
    int64_t t = cdiv(cdiv(elems, per), 32) * 32;
    if (t < lo) t = lo;
    return t > 1024 ? 1024 : (int)t;
}

static int run_v1(void *s, const void *x, void *y, int rows, int cols)
{
    if (bad_args(x, y, rows, cols)) return (int)cudaErrorInvalidValue;
    softmax_v1_naive<<<(unsigned)cdiv(rows, 128), 128, 0, (cudaStream_t)s>>>((const float *)x, (float *)y, rows, cols);
    return (int)cudaGetLastError();
}
static int run_v2(void *s, const void *x, void *y, int rows, int cols)
{
    if (bad_args(x, y, rows, cols)) return (int)cudaErrorInvalidValue;
    softmax_v2_block_shared<<<rows, 256, 0, (cudaStream_t)s>>>((const float *)x, (float *)y, rows, cols);
    return (int)cudaGetLastError();
}
static int run_v3(void *s, const void *x, void *y, int rows, int cols)
{
    if (bad_args(x, y, rows, cols)) return (int)cudaErrorInvalidValue;
    softmax_v3_warp<<<(unsigned)cdiv(rows, 4), 128, 0, (cudaStream_t)s>>>((const float *)x, (float *)y, rows, cols);
    return (int)cudaGetLastError();
}
static int run_v4(void *s, const void *x, void *y, int rows, int cols)
{
    if (bad_args(x, y, rows, cols)) return (int)cudaErrorInvalidValue;
    softmax_v4_block_shuffle<<<rows, row_threads(cols, 8, 64), 0, (cudaStream_t)s>>>((const float *)x, (float *)y,
                                                                                       rows, cols);
    return (int)cudaGetLastError();
}
static int run_v5(void *s, const void *x, void *y, int rows, int cols)
{
    if (bad_args(x, y, rows, cols)) return (int)cudaErrorInvalidValue;
    softmax_v5_online<<<rows, row_threads(cols, 8, 64), 0, (cudaStream_t)s>>>((const float *)x, (float *)y, rows,
                                                                                cols);
    return (int)cudaGetLastError();
}

template <typename T> static int run_v6_t(void *s, const void *x, void *y, int rows, int cols)
{
    if (bad_args(x, y, rows, cols)) return (int)cudaErrorInvalidValue;
    const uintptr_t align = 4 * sizeof(T);
    const bool vec = cols % 4 == 0 && ((uintptr_t)x % align) == 0 && ((uintptr_t)y % align) == 0;
    cudaStream_t st = (cudaStream_t)s;
    if (vec)
        softmax_v6_vec_online<T, 4><<<rows, row_threads(cols / 4, V6_K, 32), 0, st>>>((const T *)x, (T *)y, rows, cols);
    else
        softmax_v6_vec_online<T, 1><<<rows, row_threads(cols, V6_K, 32), 0, st>>>((const T *)x, (T *)y, rows, cols);
    return (int)cudaGetLastError();
}
static int run_v6(void *s, const void *x, void *y, int rows, int cols) { return run_v6_t<float>(s, x, y, rows, cols); }
static int run_v6_bf16(void *s, const void *x, void *y, int rows, int cols)
{
    return run_v6_t<__nv_bfloat16>(s, x, y, rows, cols);
}

template <typename T> static int run_v7_t(void *s, const void *x, void *y, int rows, int cols)
{
    if (bad_args(x, y, rows, cols)) return (int)cudaErrorInvalidValue;
    const uintptr_t align = 4 * sizeof(T);
    if (cols % 4 || cols > V7_MAX_COLS || (uintptr_t)x % align || (uintptr_t)y % align)
        return run_v6_t<T>(s, x, y, rows, cols);
    const int tpr = row_threads(cols / 4, V7_VPT, 32); /* a multiple of 32, <= 1024 */
    int tpb = tpr;
    while (tpb < 256) tpb *= 2; /* 256 / tpr rows per block when tpr divides 256 */
    if (tpb % tpr) tpb = tpr;
    const int rpb = tpb / tpr;
    softmax_v7_regs<T><<<(unsigned)cdiv(rows, rpb), tpb, 0, (cudaStream_t)s>>>((const T *)x, (T *)y, rows, cols, tpr);
    return (int)cudaGetLastError();
}
static int run_v7(void *s, const void *x, void *y, int rows, int cols) { return run_v7_t<float>(s, x, y, rows, cols); }
static int run_v7_bf16(void *s, const void *x, void *y, int rows, int cols)
{
    return run_v7_t<__nv_bfloat16>(s, x, y, rows, cols);
}

/* v8 launch: a row of at most V8_ROW_MAX * V8_K vectors (16k fp32, 32k bf16) takes one group of tpr
 * threads, several groups per 256-thread block while tpr < 256; a longer row takes a cluster of
 * csize <= 8 blocks of <= 256 threads. Rows not 16-byte aligned (cols % 4 fp32, % 8 bf16, or the
 * pointers) and rows past 8 blocks (64k fp32, 128k bf16) take v7, which takes v6 past 32k. */
template <typename T, bool CS = false> static int run_v8_t(void *s, const void *x, void *y, int rows, int cols)
{
    if (bad_args(x, y, rows, cols)) return (int)cudaErrorInvalidValue;
    const int W = 16 / (int)sizeof(T);
    if (cols % W || (uintptr_t)x % 16 || (uintptr_t)y % 16) return run_v7_t<T>(s, x, y, rows, cols);
    const int nv = cols / W;
    cudaStream_t st = (cudaStream_t)s;
    if (nv <= V8_ROW_MAX * V8_K) {
        int tpr = 1;
        while (tpr < 32 && tpr * V8_K < nv) tpr *= 2;
        if (tpr * V8_K < nv) tpr = row_threads(nv, V8_K, 32);
        const int tpb = tpr >= V8_TPB ? tpr : (V8_TPB / tpr) * tpr, rpb = tpb / tpr;
        softmax_v8_cluster<T, false, CS><<<(unsigned)cdiv(rows, rpb), tpb, 0, st>>>((const T *)x, (T *)y, rows, cols, tpr, 1);
        return (int)cudaGetLastError();
    }
    const int csize = (int)cdiv(nv, V8_TPB * V8_K);
    if (csize > V8_MAX_CLUSTER || (int64_t)rows * csize > 0x7FFFFFFF) return run_v7_t<T>(s, x, y, rows, cols);
    const int tpr = row_threads(cdiv(nv, csize), V8_K, 32); /* <= V8_TPB */
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)((int64_t)rows * csize));
    cfg.blockDim = dim3((unsigned)tpr);
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = (unsigned)csize;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    const T *xt = (const T *)x;
    T *yt = (T *)y;
    return (int)cudaLaunchKernelEx(&cfg, softmax_v8_cluster<T, true, CS>, xt, yt, rows, cols, tpr, csize);
}
static int run_v8(void *s, const void *x, void *y, int rows, int cols) { return run_v8_t<float>(s, x, y, rows, cols); }
static int run_v8_bf16(void *s, const void *x, void *y, int rows, int cols)
{
    return run_v8_t<__nv_bfloat16>(s, x, y, rows, cols);
}
static int run_v9(void *s, const void *x, void *y, int rows, int cols) { return run_v8_t<float, true>(s, x, y, rows, cols); }
static int run_v9_bf16(void *s, const void *x, void *y, int rows, int cols)
{
    return run_v8_t<__nv_bfloat16, true>(s, x, y, rows, cols);
}

extern "C" const softmax_version softmax_versions[] = {
    { "v1_naive", "one thread per row, 3 passes (max, sum, normalise), uncoalesced", 0, run_v1 },
    { "v2_block_shared", "block of 256 per row, coalesced, shared-memory tree reductions", 0, run_v2 },
    { "v3_warp", "one warp per row, shuffle reductions (no shared memory, no barriers)", 0, run_v3 },
    { "v4_block_shuffle", "block per row sized to the row, warp shuffles + one shared slot per warp", 0, run_v4 },
    { "v5_online", "online softmax: max and sum in one pass, then normalise (2 reads)", 0, run_v5 },
    { "v6_vec_online", "v5 with float4 accesses and the row in registers (1 read + 1 write)", 0, run_v6 },
    { "v6_vec_online_bf16", "v6 with bf16 input and output (fp32 math), 4 bf16 per 8-byte access", 1, run_v6_bf16 },
    { "v7_regs", "row in registers: max, then one ex2 per element kept for the write; rows packed per block", 0, run_v7 },
    { "v7_regs_bf16", "v7 with bf16 input and output (fp32 math)", 1, run_v7_bf16 },
    { "v8_cluster", "v7 + 1 barrier per reduction; rows past 8k split over a cluster (max, sum through DSMEM)", 0, run_v8 },
    { "v8_cluster_bf16", "v8 with 8 bf16 per 16-byte access kept packed, bf16x2 max, exponent recomputed in the write", 1, run_v8_bf16 },
    { "v9_stream", "v8 with streaming (evict-first) loads and stores: ld.global.cs / st.global.cs", 0, run_v9 },
    { "v9_stream_bf16", "v8 bf16 with streaming (evict-first) loads and stores", 1, run_v9_bf16 },
};
extern "C" const int softmax_n_versions = (int)(sizeof softmax_versions / sizeof softmax_versions[0]);
