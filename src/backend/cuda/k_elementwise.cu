/* k_elementwise.cu - the memory-bound row and elementwise kernels of the CUDA backend: embedding
 * lookup (every weight dtype), rmsnorm (alone and fused with the residual add), bias, RoPE, SwiGLU,
 * the paged KV-cache store, row gather and fill.
 *
 * Design:
 *   - Everything here moves bytes and does almost no arithmetic, so the kernels aim at the copy
 *     roofline: 16-byte (float4) loads and stores where the sizes and pointers allow it, a scalar
 *     path otherwise, and enough blocks to fill the chip.
 *   - rmsnorm keeps a row in registers (up to 4 float4 per thread, 1024 threads: dim <= 16384) so
 *     each input byte is read once (rows of <= 512 floats: one warp per row, 8 rows per block); the sum of squares is a warp-shuffle reduction then one across
 *     warps through shared memory. Other dims take a scalar two-pass path (reads twice, from L1/L2).
 *   - RoPE matches model_rope (src/model/ops.c) operation for operation: theta_scale comes from the
 *     HOST's powf (so it is the same float as the CPU's), the angles are the same running product
 *     theta *= theta_scale in float (computed once per token by one thread into shared memory),
 *     th = freq_scale * (theta / factor), cosf/sinf (CUDA's full-range versions, <= 2 ulp), and the
 *     two fmaf of the CPU code. So the outputs agree with the CPU to a few ulp at any position.
 *
 * Invariants:
 *   1. launch shapes depend only on by-value arguments (graph-capturable);
 *   2. no kernel reads or writes past n / rows * dim; sizes of 0 launch nothing;
 *   3. out may alias in (rmsnorm) and gate (swiglu): each element is read before it is written, by
 *      the same thread.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

extern "C" {
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.h"
}
#include "backend/cuda/cuk_fp8.cuh"
#include "backend/cuda/cuk_launch.h"
#include "backend/cuda/cuk_rope.cuh"
#include "backend/cuda/k_gemv_fuse.h" /* fuse_silu_mul_acc */

#define EW_THREADS 256

static inline int ew_aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

static inline unsigned ew_blocks(int64_t n, int per_block)
{
    int64_t b = (n + per_block - 1) / per_block;
    return (unsigned)(b < 65536 * 4 ? (b < 1 ? 1 : b) : 65536 * 4); /* grid-stride beyond this */
}

// --- fill, add, swiglu -----------------------------------------------------------------------

__global__ void k_fill_f32(float *dst, int64_t n, float v)
{
    cuk_pdl_wait();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = v;
}

extern "C" ai_status cuk_fill_f32(cuk_stream s, float *dst, int64_t n, float value, ai_err *err)
{
    if (n < 0 || (n > 0 && !dst)) return ai_err_set(err, AI_ERR_INVALID, "cuk_fill_f32: bad arguments (n %lld)", (long long)n);
    if (n == 0) return AI_OK;
    cuk_launch(k_fill_f32, dim3(ew_blocks(n, EW_THREADS)), dim3(EW_THREADS), 0, (cudaStream_t)s, dst, n, value);
    CUK_LAUNCHED(err, "cuk_fill_f32");
    return AI_OK;
}

/* vec4: x and y 16-byte aligned and n % 4 == 0 (chosen on the host). */
template <bool VEC4> __global__ void k_add(float *x, const float *y, int64_t n)
{
    cuk_pdl_wait();
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    int64_t i0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (VEC4) {
        float4 *x4 = (float4 *)x;
        const float4 *y4 = (const float4 *)y;
        for (int64_t i = i0; i < n / 4; i += stride) {
            float4 a = x4[i], b = y4[i];
            a.x += b.x; a.y += b.y; a.z += b.z; a.w += b.w;
            x4[i] = a;
        }
    } else {
        for (int64_t i = i0; i < n; i += stride) x[i] += y[i];
    }
}

extern "C" ai_status cuk_add(cuk_stream s, float *x, const float *y, int64_t n, ai_err *err)
{
    if (n < 0 || (n > 0 && (!x || !y))) return ai_err_set(err, AI_ERR_INVALID, "cuk_add: bad arguments (n %lld)", (long long)n);
    if (n == 0) return AI_OK;
    if (n % 4 == 0 && ew_aligned16(x) && ew_aligned16(y))
        cuk_launch(k_add<true>, dim3(ew_blocks(n / 4, EW_THREADS)), dim3(EW_THREADS), 0, (cudaStream_t)s, x, y, n);
    else
        cuk_launch(k_add<false>, dim3(ew_blocks(n, EW_THREADS)), dim3(EW_THREADS), 0, (cudaStream_t)s, x, y, n);
    CUK_LAUNCHED(err, "cuk_add");
    return AI_OK;
}

template <bool VEC4> __global__ void k_swiglu(float *out, const float *gate, const float *up, int64_t n)
{
    cuk_pdl_wait();
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    int64_t i0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (VEC4) {
        for (int64_t i = i0; i < n / 4; i += stride) {
            float4 g = ((const float4 *)gate)[i], u = ((const float4 *)up)[i];
            g.x = fuse_silu_mul_acc(g.x, u.x); g.y = fuse_silu_mul_acc(g.y, u.y);
            g.z = fuse_silu_mul_acc(g.z, u.z); g.w = fuse_silu_mul_acc(g.w, u.w);
            ((float4 *)out)[i] = g;
        }
    } else {
        for (int64_t i = i0; i < n; i += stride) out[i] = fuse_silu_mul_acc(gate[i], up[i]);
    }
}

extern "C" ai_status cuk_swiglu(cuk_stream s, float *out, const float *gate, const float *up, int64_t n, ai_err *err)
{
    if (n < 0 || (n > 0 && (!out || !gate || !up)))
        return ai_err_set(err, AI_ERR_INVALID, "cuk_swiglu: bad arguments (n %lld)", (long long)n);
    if (n == 0) return AI_OK;
    if (n % 4 == 0 && ew_aligned16(out) && ew_aligned16(gate) && ew_aligned16(up))
        cuk_launch(k_swiglu<true>, dim3(ew_blocks(n / 4, EW_THREADS)), dim3(EW_THREADS), 0, (cudaStream_t)s, out, gate, up, n);
    else
        cuk_launch(k_swiglu<false>, dim3(ew_blocks(n, EW_THREADS)), dim3(EW_THREADS), 0, (cudaStream_t)s, out, gate, up, n);
    CUK_LAUNCHED(err, "cuk_swiglu");
    return AI_OK;
}

/* Gate and up side by side in each row (a stacked gate|up weight): out (rows, n) = silu(gu[r, :n]) *
 * gu[r, n:2n]. Row r comes from blockIdx.y; float4 when n % 4 == 0 (rows stay 16-byte aligned). */
template <bool VEC4> __global__ void k_swiglu_rows(float *out, const float *gu, int32_t n)
{
    cuk_pdl_wait();
    const float *g = gu + (int64_t)blockIdx.y * 2 * n, *u = g + n;
    float *o = out + (int64_t)blockIdx.y * n;
    int32_t stride = gridDim.x * blockDim.x, i0 = blockIdx.x * blockDim.x + threadIdx.x;
    if (VEC4) {
        for (int32_t i = i0; i < n / 4; i += stride) {
            float4 a = ((const float4 *)g)[i], b = ((const float4 *)u)[i];
            a.x = fuse_silu_mul_acc(a.x, b.x); a.y = fuse_silu_mul_acc(a.y, b.y);
            a.z = fuse_silu_mul_acc(a.z, b.z); a.w = fuse_silu_mul_acc(a.w, b.w);
            ((float4 *)o)[i] = a;
        }
    } else {
        for (int32_t i = i0; i < n; i += stride) o[i] = fuse_silu_mul_acc(g[i], u[i]);
    }
}

extern "C" ai_status cuk_swiglu_rows(cuk_stream s, float *out, const float *gu, int32_t rows, int32_t n, ai_err *err)
{
    if (rows < 0 || rows > 65535 || n < 0 || ((int64_t)rows * n > 0 && (!out || !gu)))
        return ai_err_set(err, AI_ERR_INVALID, "cuk_swiglu_rows: bad arguments (rows %d, n %d)", rows, n);
    if ((int64_t)rows * n == 0) return AI_OK;
    bool v4 = n % 4 == 0 && ew_aligned16(out) && ew_aligned16(gu);
    int32_t per = v4 ? n / 4 : n, bx = (per + EW_THREADS - 1) / EW_THREADS;
    dim3 grid(bx > 64 ? 64 : bx, rows);
    if (v4) cuk_launch(k_swiglu_rows<true>, dim3(grid), dim3(EW_THREADS), 0, (cudaStream_t)s, out, gu, n);
    else cuk_launch(k_swiglu_rows<false>, dim3(grid), dim3(EW_THREADS), 0, (cudaStream_t)s, out, gu, n);
    CUK_LAUNCHED(err, "cuk_swiglu_rows");
    return AI_OK;
}

__global__ void k_add_bias(float *y, const float *b, int32_t n, int64_t row_stride)
{
    cuk_pdl_wait();
    float *row = y + (int64_t)blockIdx.y * row_stride;
    for (int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) row[i] += b[i];
}

extern "C" ai_status cuk_add_bias(cuk_stream s, float *y, const float *b, int32_t rows, int32_t n, int64_t row_stride,
                                  ai_err *err)
{
    if (rows < 0 || n < 0 || rows > 65535 || row_stride < n || ((int64_t)rows * n > 0 && (!y || !b)))
        return ai_err_set(err, AI_ERR_INVALID, "cuk_add_bias: bad arguments (rows %d, n %d, stride %lld)", rows, n,
                          (long long)row_stride);
    if ((int64_t)rows * n == 0) return AI_OK;
    dim3 grid((n + EW_THREADS - 1) / EW_THREADS, rows);
    cuk_launch(k_add_bias, dim3(grid), dim3(EW_THREADS), 0, (cudaStream_t)s, y, b, n, row_stride);
    CUK_LAUNCHED(err, "cuk_add_bias");
    return AI_OK;
}

// --- rmsnorm -----------------------------------------------------------------------------------

/* Sum of v over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result. */
__device__ float ew_block_sum(float v, float *sh /* >= 33 floats */)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads(); /* sh may still be read by a previous call */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float t = lane < nw ? sh[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
        if (lane == 0) sh[32] = t;
    }
    __syncthreads();
    return sh[32];
}

#define NORM_VPT 4 /* float4 per thread: 1024 threads * 4 * 4 = 16384 floats per row at most */

/* The float4 elements first + k * stride (k < NORM_VPT) of row `base` into registers; ADD: x += delta,
 * written back. Returns this thread's sum of squares. */
template <bool ADD>
__device__ __forceinline__ float norm_load(float4 *v, float *x, const float *delta, int64_t base, int32_t d4,
                                           int32_t first, int32_t stride)
{
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < NORM_VPT; k++) {
        int32_t j = first + k * stride;
        if (j < d4) {
            v[k] = ((const float4 *)(x + base))[j];
            if (ADD) {
                float4 d = ((const float4 *)(delta + base))[j];
                v[k].x += d.x; v[k].y += d.y; v[k].z += d.z; v[k].w += d.w;
                ((float4 *)(x + base))[j] = v[k];
            }
            ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
        }
    }
    return ss;
}

/* out = v * scale (* w), the same elements as norm_load. */
__device__ __forceinline__ void norm_store(float *out, const float4 *v, const float *w, float scale, int64_t base,
                                           int32_t d4, int32_t first, int32_t stride)
{
#pragma unroll
    for (int k = 0; k < NORM_VPT; k++) {
        int32_t j = first + k * stride;
        if (j < d4) {
            float4 r = v[k];
            r.x *= scale; r.y *= scale; r.z *= scale; r.w *= scale;
            if (w) {
                float4 g = ((const float4 *)w)[j];
                r.x *= g.x; r.y *= g.y; r.z *= g.z; r.w *= g.w;
            }
            ((float4 *)(out + base))[j] = r;
        }
    }
}

/* One block per row; the row stays in registers. ADD: x += delta (written back) first. */
template <bool ADD>
__global__ void __launch_bounds__(1024) k_rmsnorm_vec(float *out, float *x, const float *delta, const float *w,
                                                      int32_t dim, float eps)
{
    cuk_pdl_wait();
    __shared__ float sh[33];
    const int64_t base = (int64_t)blockIdx.x * dim;
    const int32_t d4 = dim / 4;
    float4 v[NORM_VPT];
    float ss = ew_block_sum(norm_load<ADD>(v, x, delta, base, d4, threadIdx.x, blockDim.x), sh);
    norm_store(out, v, w, 1.0f / sqrtf(ss / (float)dim + eps), base, d4, threadIdx.x, blockDim.x);
}

/* dim % 4 == 0, dim <= 512 (per-head norms): one warp per row, NORM_VPT float4 per lane in registers,
 * 8 rows per block (a block per 128-float row would leave most of each block idle). */
template <bool ADD>
__global__ void __launch_bounds__(256) k_rmsnorm_warp(float *out, float *x, const float *delta, const float *w,
                                                      int32_t rows, int32_t dim, float eps)
{
    cuk_pdl_wait();
    const int32_t r = blockIdx.x * 8 + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (r >= rows) return; /* whole warps only: the shuffles below stay warp-uniform */
    const int64_t base = (int64_t)r * dim;
    const int32_t d4 = dim / 4;
    float4 v[NORM_VPT];
    float ss = norm_load<ADD>(v, x, delta, base, d4, lane, 32);
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    norm_store(out, v, w, 1.0f / sqrtf(ss / (float)dim + eps), base, d4, lane, 32);
}

/* Any dim, any alignment: two passes over the row (the second from cache). */
template <bool ADD>
__global__ void k_rmsnorm_scalar(float *out, float *x, const float *delta, const float *w, int32_t dim, float eps)
{
    cuk_pdl_wait();
    __shared__ float sh[33];
    const int64_t base = (int64_t)blockIdx.x * dim;
    float ss = 0.0f;
    for (int32_t j = threadIdx.x; j < dim; j += blockDim.x) {
        float a = x[base + j];
        if (ADD) {
            a += delta[base + j];
            x[base + j] = a;
        }
        ss += a * a;
    }
    ss = ew_block_sum(ss, sh);
    const float scale = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int32_t j = threadIdx.x; j < dim; j += blockDim.x) {
        float r = x[base + j] * scale;
        out[base + j] = w ? r * w[j] : r;
    }
}

static ai_status ew_rmsnorm(cudaStream_t s, float *out, float *x, const float *delta, const float *w, int32_t rows,
                            int32_t dim, float eps, const char *name, ai_err *err)
{
    if (rows < 0 || dim <= 0 || !(eps >= 0) || (rows > 0 && (!out || !x)))
        return ai_err_set(err, AI_ERR_INVALID, "%s: bad arguments (rows %d, dim %d, eps %g)", name, rows, dim, (double)eps);
    if (rows == 0) return AI_OK;
    const bool add = delta != NULL;
    int32_t d4 = dim / 4;
    bool vec = dim % 4 == 0 && d4 <= 1024 * NORM_VPT && ew_aligned16(out) && ew_aligned16(x) &&
               (!delta || ew_aligned16(delta)) && (!w || ew_aligned16(w));
    if (vec && d4 <= 32 * NORM_VPT) {
        unsigned blocks = (unsigned)((rows + 7) / 8);
        if (add) cuk_launch(k_rmsnorm_warp<true>, dim3(blocks), dim3(256), 0, s, out, x, delta, w, rows, dim, eps);
        else cuk_launch(k_rmsnorm_warp<false>, dim3(blocks), dim3(256), 0, s, out, x, delta, w, rows, dim, eps);
    } else if (vec) {
        int threads = (d4 + NORM_VPT - 1) / NORM_VPT;
        threads = (threads + 31) / 32 * 32;
        if (threads < 32) threads = 32;
        if (add) cuk_launch(k_rmsnorm_vec<true>, dim3(rows), dim3(threads), 0, s, out, x, delta, w, dim, eps);
        else cuk_launch(k_rmsnorm_vec<false>, dim3(rows), dim3(threads), 0, s, out, x, delta, w, dim, eps);
    } else {
        int threads = dim >= 1024 ? 1024 : (dim + 31) / 32 * 32;
        if (add) cuk_launch(k_rmsnorm_scalar<true>, dim3(rows), dim3(threads), 0, s, out, x, delta, w, dim, eps);
        else cuk_launch(k_rmsnorm_scalar<false>, dim3(rows), dim3(threads), 0, s, out, x, delta, w, dim, eps);
    }
    CUK_LAUNCHED(err, name);
    return AI_OK;
}

extern "C" ai_status cuk_rmsnorm(cuk_stream s, float *out, const float *in, const float *w, int32_t rows, int32_t dim,
                                 float eps, ai_err *err)
{
    /* without ADD the kernels only read x, so casting away const is safe */
    return ew_rmsnorm((cudaStream_t)s, out, (float *)in, NULL, w, rows, dim, eps, "cuk_rmsnorm", err);
}

extern "C" ai_status cuk_add_rmsnorm(cuk_stream s, float *x, const float *delta, float *out, const float *w,
                                     int32_t rows, int32_t dim, float eps, ai_err *err)
{
    if (rows > 0 && !delta) return ai_err_set(err, AI_ERR_INVALID, "cuk_add_rmsnorm: delta is NULL");
    return ew_rmsnorm((cudaStream_t)s, out, x, delta, w, rows, dim, eps, "cuk_add_rmsnorm", err);
}

/* The split rmsnorm composed where no kernel fuses it (backend_mm_opts in_ss / out_xn: the CUDA
 * backend uses these around cuBLASLt). One block per row; rows are a few KB. */
__global__ void k_norm_split_out(float *xn, double *ss, const float *y, const float *w, int32_t dim)
{
    cuk_pdl_wait();
    const int64_t base = (int64_t)blockIdx.x * dim;
    double acc = 0.0; /* in double, as the GEMVs' atomics (backend_mm_opts.out_ss) */
    for (int32_t j = threadIdx.x; j < dim; j += blockDim.x) {
        const float v = y[base + j];
        acc += (double)v * v;
        xn[base + j] = v * w[j];
    }
    __shared__ double shd[32];
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) shd[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (int k = 0; k < (int)(blockDim.x >> 5); k++) t += shd[k];
        ss[(size_t)blockIdx.x * BACKEND_SS_LANES] += t; /* lane 0: one block per row */
    }
}

__global__ void k_norm_split_in(float *out, const float *x, const double *ss, int32_t dim, float eps)
{
    cuk_pdl_wait();
    const int64_t base = (int64_t)blockIdx.x * dim;
    double sum = 0.0; /* the row's lanes, in lane order (backend_mm_opts.in_ss) */
    for (int j = 0; j < BACKEND_SS_LANES; j++) sum += ss[(size_t)blockIdx.x * BACKEND_SS_LANES + j];
    const float r = 1.0f / sqrtf((float)(sum / (double)dim) + eps);
    for (int32_t j = threadIdx.x; j < dim; j += blockDim.x) out[base + j] = x[base + j] * r;
}

extern "C" ai_status cuk_norm_split_out(cuk_stream s, float *xn, double *ss, const float *y, const float *w,
                                        int32_t rows, int32_t dim, ai_err *err)
{
    if (rows < 0 || dim <= 0 || (rows > 0 && (!xn || !ss || !y || !w)))
        return ai_err_set(err, AI_ERR_INVALID, "cuk_norm_split_out: bad arguments (rows %d, dim %d)", rows, dim);
    if (rows == 0) return AI_OK;
    cuk_launch(k_norm_split_out, dim3(rows), dim3(256), 0, (cudaStream_t)s, xn, ss, y, w, dim);
    CUK_LAUNCHED(err, "cuk_norm_split_out");
    return AI_OK;
}

extern "C" ai_status cuk_norm_split_in(cuk_stream s, float *out, const float *x, const double *ss, int32_t rows,
                                       int32_t dim, float eps, ai_err *err)
{
    if (rows < 0 || dim <= 0 || !(eps >= 0) || (rows > 0 && (!out || !x || !ss)))
        return ai_err_set(err, AI_ERR_INVALID, "cuk_norm_split_in: bad arguments (rows %d, dim %d)", rows, dim);
    if (rows == 0) return AI_OK;
    cuk_launch(k_norm_split_in, dim3(rows), dim3(256), 0, (cudaStream_t)s, out, x, ss, dim, eps);
    CUK_LAUNCHED(err, "cuk_norm_split_in");
    return AI_OK;
}

// --- RoPE --------------------------------------------------------------------------------------

/* The angle table of position p into cs/sn (shared): one thread runs the CPU's running product. */
__device__ __forceinline__ void rope_table(float *cs, float *sn, int32_t p, int32_t half, float theta_scale,
                                           float freq_scale, const float *factors)
{
    if (threadIdx.x == 0) { /* the CPU's running product, in the same order */
        float theta = (float)p;
        for (int32_t i = 0; i < half; i++) {
            cs[i] = theta;
            theta *= theta_scale;
        }
    }
    __syncthreads();
    for (int32_t i = threadIdx.x; i < half; i += blockDim.x) {
        float ff = factors ? factors[i] : 1.0f;
        float th = freq_scale * (cs[i] / ff);
        float c = cosf(th), s = sinf(th);
        cs[i] = c;
        sn[i] = s;
    }
    __syncthreads();
}

/* Rotates the pairs of n_heads heads of one row (the block's threads share the work). */
__device__ __forceinline__ void rope_row(float *row, int32_t n_heads, int32_t head_dim, int32_t half,
                                         const float *cs, const float *sn, int neox)
{
    for (int32_t k = threadIdx.x; k < n_heads * half; k += blockDim.x) {
        int32_t h = k / half, i = k - h * half;
        float *v = row + (int64_t)h * head_dim;
        int32_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        rope_rotate(v[a], v[b], cs[i], sn[i]);
    }
}

/* One block per token. */
__global__ void k_rope(float *x, int32_t n_heads, int64_t row_stride, int32_t head_dim, int32_t half,
                       const int32_t *pos, float theta_scale, float freq_scale, const float *factors, int neox)
{
    cuk_pdl_wait();
    __shared__ float cs[ROPE_MAX_HALF], sn[ROPE_MAX_HALF];
    const int32_t t = blockIdx.x;
    rope_table(cs, sn, pos[t], half, theta_scale, freq_scale, factors);
    rope_row(x + (int64_t)t * row_stride, n_heads, head_dim, half, cs, sn, neox);
}

/* The decode step's fusion: rotate q and k, then write k and v into the paged cache (slot < 0: rotate
 * only). One launch instead of four, and one CTA per (token, head): grid (n_tok, n_head + n_head_kv),
 * CTAs y < n_head rotate q head y, the others rotate k head j = y - n_head and store k and v head j.
 * Why per head and not per token (the first version): at batch 1 one 256-thread CTA walked 40 heads in
 * 10 dependent rounds of global loads plus a serial angle table (~10 us per layer, ncu); here every
 * thread rotates at most a pair or two, and its angle comes from its own running product (the same
 * float multiplications, in the same order, as model_rope's loop: identical angles). */
template <int KV>
__global__ void __launch_bounds__(128) k_rope_store(float *q, int64_t q_stride, float *k, int64_t k_stride, const float *v,
                                                    int64_t v_stride, cuk_rope_kv rk, float theta_scale)
{
    cuk_pdl_wait();
    const int32_t t = blockIdx.x, y = blockIdx.y, is_k = y >= rk.n_head, h = is_k ? y - rk.n_head : y;
    const int32_t hd = rk.head_dim, half = rk.rope_dim / 2;
    float *row = is_k ? k + (int64_t)t * k_stride + (int64_t)h * hd : q + (int64_t)t * q_stride + (int64_t)h * hd;
    const float p = (float)rk.pos[t];
    for (int32_t i = threadIdx.x; i < half; i += blockDim.x) {
        float c, sn;
        rope_angle(p, i, theta_scale, rk.freq_scale, rk.factors, &c, &sn);
        const int32_t ia = rk.neox ? i : 2 * i, ib = rk.neox ? i + half : 2 * i + 1;
        rope_rotate(row[ia], row[ib], c, sn);
    }
    if (!is_k) return;
    const int32_t sl = rk.slot[t];
    if (sl < 0) return;
    __syncthreads(); /* this head's rotated k is complete (global writes of the block are visible to it) */
    const int32_t hdv = rk.head_dim_v, kvd = rk.n_head_kv * hd, kvdv = rk.n_head_kv * hdv;
    const float *vr = v + (int64_t)t * v_stride + (int64_t)h * hdv;
    const int64_t ko = (int64_t)sl * kvd + (int64_t)h * hd, vo = (int64_t)sl * kvdv + (int64_t)h * hdv;
    for (int32_t j = threadIdx.x; j < hd; j += blockDim.x) kv_put<KV>(rk.k_cache, ko + j, row[j], rk.k_scale);
    for (int32_t j = threadIdx.x; j < hdv; j += blockDim.x) kv_put<KV>(rk.v_cache, vo + j, vr[j], rk.v_scale);
}

extern "C" ai_status cuk_rope_store(cuk_stream s, float *q, int64_t q_stride, float *k, int64_t k_stride,
                                    const float *v, int64_t v_stride, int32_t n_tok, const cuk_rope_kv *rk,
                                    ai_err *err)
{
    ai_status st = cuk_rope_kv_check(rk, n_tok, "cuk_rope_store", err);
    if (st != AI_OK) return st;
    if (q_stride < (int64_t)rk->n_head * rk->head_dim || k_stride < (int64_t)rk->n_head_kv * rk->head_dim ||
        v_stride < (int64_t)rk->n_head_kv * rk->head_dim_v || (n_tok > 0 && (!q || !k || !v)))
        return ai_err_set(err, AI_ERR_INVALID, "cuk_rope_store: bad rows (strides %lld, %lld, %lld)",
                          (long long)q_stride, (long long)k_stride, (long long)v_stride);
    if (n_tok == 0) return AI_OK;
    const float theta_scale = rope_theta_scale(rk->base, rk->rope_dim);
    const dim3 grid(n_tok, rk->n_head + rk->n_head_kv), block(rk->rope_dim / 2 >= 128 || rk->head_dim > 64 ? 128 : 64);
#define ROPE_STORE(KV)                                                                                              \
    cuk_launch(k_rope_store<KV>, grid, block, 0, (cudaStream_t)s, q, q_stride, k, k_stride, v, v_stride, *rk,        \
               theta_scale)
    switch (kvs_of(rk->kv_type)) {
    case KVS_F16: ROPE_STORE(KVS_F16); break;
    case KVS_F8: ROPE_STORE(KVS_F8); break;
    default: ROPE_STORE(KVS_F32);
    }
#undef ROPE_STORE
    CUK_LAUNCHED(err, "cuk_rope_store");
    return AI_OK;
}

extern "C" ai_status cuk_rope(cuk_stream s, float *x, int32_t n_tok, int32_t n_heads, int64_t row_stride,
                              int32_t head_dim, int32_t rope_dim, const int32_t *pos, float base, float freq_scale,
                              const float *factors, int neox, ai_err *err)
{
    if (n_tok < 0 || n_heads <= 0 || head_dim <= 0 || rope_dim <= 0 || rope_dim % 2 || rope_dim > head_dim ||
        row_stride < (int64_t)n_heads * head_dim || (n_tok > 0 && (!x || !pos)) || !(base > 0))
        return ai_err_set(err, AI_ERR_INVALID,
                          "cuk_rope: bad arguments (n_tok %d, n_heads %d, head_dim %d, rope_dim %d, stride %lld)",
                          n_tok, n_heads, head_dim, rope_dim, (long long)row_stride);
    if (rope_dim / 2 > ROPE_MAX_HALF)
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "cuk_rope: rope_dim %d > %d", rope_dim, 2 * ROPE_MAX_HALF);
    if (n_tok == 0) return AI_OK;
    /* host powf: the very float model_rope computes (invariant of this file's header) */
    const float theta_scale = rope_theta_scale(base, rope_dim);
    int32_t work = n_heads * (rope_dim / 2);
    int threads = work >= 256 ? 256 : (work + 31) / 32 * 32;
    cuk_launch(k_rope, dim3(n_tok), dim3(threads), 0, (cudaStream_t)s, x, n_heads, row_stride, head_dim, rope_dim / 2, pos, theta_scale,
                                                   freq_scale, factors, neox);
    CUK_LAUNCHED(err, "cuk_rope");
    return AI_OK;
}

// --- KV store, gather ----------------------------------------------------------------------------

template <int KV> __global__ void k_kv_store(void *cache, const float *src, int64_t stride, int32_t width,
                                             const int32_t *slot, float scale)
{
    cuk_pdl_wait();
    const int32_t t = blockIdx.y;
    const int32_t sl = slot[t];
    if (sl < 0) return;
    const float *r = src + (int64_t)t * stride;
    for (int32_t j = blockIdx.x * blockDim.x + threadIdx.x; j < width; j += gridDim.x * blockDim.x)
        kv_put<KV>(cache, (int64_t)sl * width + j, r[j], scale);
}

extern "C" ai_status cuk_kv_store(cuk_stream s, void *k_cache, void *v_cache, dtype kv_type, float k_scale,
                                  float v_scale, const float *k, int64_t k_stride, const float *v, int64_t v_stride,
                                  int32_t n_tok, int32_t kvd, int32_t kvdv, const int32_t *slot, ai_err *err)
{
    if (kv_type != DTYPE_F16 && kv_type != DTYPE_F32 && kv_type != DTYPE_F8_E4M3)
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "cuk_kv_store: cache dtype %d is not f16, f32 or f8_e4m3", (int)kv_type);
    if (kv_type == DTYPE_F8_E4M3 && !(k_scale > 0 && v_scale > 0))
        return ai_err_set(err, AI_ERR_INVALID, "cuk_kv_store: fp8 scales must be > 0");
    if (n_tok < 0 || n_tok > 65535 || kvd <= 0 || kvdv <= 0 || k_stride < kvd || v_stride < kvdv ||
        (n_tok > 0 && (!k_cache || !v_cache || !k || !v || !slot)))
        return ai_err_set(err, AI_ERR_INVALID, "cuk_kv_store: bad arguments (n_tok %d, kvd %d, kvdv %d)", n_tok, kvd,
                          kvdv);
    if (n_tok == 0) return AI_OK;
    cudaStream_t st = (cudaStream_t)s;
    dim3 gk((kvd + EW_THREADS - 1) / EW_THREADS, n_tok), gv((kvdv + EW_THREADS - 1) / EW_THREADS, n_tok);
#define KV_STORE(KV)                                                                                          \
    do {                                                                                                      \
        cuk_launch(k_kv_store<KV>, dim3(gk), dim3(EW_THREADS), 0, st, k_cache, k, k_stride, kvd, slot, k_scale);   \
        cuk_launch(k_kv_store<KV>, dim3(gv), dim3(EW_THREADS), 0, st, v_cache, v, v_stride, kvdv, slot, v_scale);  \
    } while (0)
    if (kv_type == DTYPE_F16) KV_STORE(KVS_F16);
    else if (kv_type == DTYPE_F8_E4M3) KV_STORE(KVS_F8);
    else KV_STORE(KVS_F32);
#undef KV_STORE
    CUK_LAUNCHED(err, "cuk_kv_store");
    return AI_OK;
}

template <bool VEC4> __global__ void k_gather_rows(float *out, const float *in, const int32_t *idx, int32_t dim)
{
    cuk_pdl_wait();
    const int64_t src = (int64_t)idx[blockIdx.y] * dim, dst = (int64_t)blockIdx.y * dim;
    if (VEC4) {
        for (int32_t j = blockIdx.x * blockDim.x + threadIdx.x; j < dim / 4; j += gridDim.x * blockDim.x)
            ((float4 *)(out + dst))[j] = ((const float4 *)(in + src))[j];
    } else {
        for (int32_t j = blockIdx.x * blockDim.x + threadIdx.x; j < dim; j += gridDim.x * blockDim.x)
            out[dst + j] = in[src + j];
    }
}

extern "C" ai_status cuk_gather_rows(cuk_stream s, float *out, const float *in, const int32_t *idx, int32_t n,
                                     int32_t dim, ai_err *err)
{
    if (n < 0 || n > 65535 || dim <= 0 || (n > 0 && (!out || !in || !idx)))
        return ai_err_set(err, AI_ERR_INVALID, "cuk_gather_rows: bad arguments (n %d, dim %d)", n, dim);
    if (n == 0) return AI_OK;
    if (dim % 4 == 0 && ew_aligned16(out) && ew_aligned16(in)) {
        dim3 g((dim / 4 + EW_THREADS - 1) / EW_THREADS, n);
        cuk_launch(k_gather_rows<true>, dim3(g), dim3(EW_THREADS), 0, (cudaStream_t)s, out, in, idx, dim);
    } else {
        dim3 g((dim + EW_THREADS - 1) / EW_THREADS, n);
        cuk_launch(k_gather_rows<false>, dim3(g), dim3(EW_THREADS), 0, (cudaStream_t)s, out, in, idx, dim);
    }
    CUK_LAUNCHED(err, "cuk_gather_rows");
    return AI_OK;
}

// --- embedding -----------------------------------------------------------------------------------

/* One element of row r, column j of a table in any supported layout (planar for quantized). */
template <int T> __device__ __forceinline__ float ew_table_at(const void *data, int64_t r, int64_t n_in, int64_t j,
                                                              size_t qs_bytes)
{
    const uint8_t *b = (const uint8_t *)data;
    if (T == DTYPE_F32) return ((const float *)data)[r * n_in + j];
    if (T == DTYPE_F16) return __half2float(((const __half *)data)[r * n_in + j]);
    if (T == DTYPE_BF16) return __bfloat162float(((const __nv_bfloat16 *)data)[r * n_in + j]);
    const int64_t blk = r * (n_in / 32) + j / 32;
    const int e = (int)(j % 32);
    if (T == DTYPE_Q8_0) {
        float d = __half2float(((const __half *)(b + qs_bytes))[blk]);
        return (float)(int8_t)b[blk * 32 + e] * d;
    }
    const uint8_t q = b[blk * 16 + (e & 15)];
    const int nib = e < 16 ? (q & 15) : (q >> 4);
    if (T == DTYPE_Q4_0) {
        float d = __half2float(((const __half *)(b + qs_bytes))[blk]);
        return (float)(nib - 8) * d;
    }
    float d = __half2float(((const __half *)(b + qs_bytes))[2 * blk]);
    float m = __half2float(((const __half *)(b + qs_bytes))[2 * blk + 1]);
    return (float)nib * d + m;
}

template <int T> __global__ void k_embed(float *out, const void *data, int64_t n_in, const int32_t *tokens,
                                         size_t qs_bytes)
{
    cuk_pdl_wait();
    const int64_t r = tokens[blockIdx.y];
    float *o = out + (int64_t)blockIdx.y * n_in;
    if (T == DTYPE_F32 && n_in % 4 == 0) {
        const float4 *src = (const float4 *)data + r * (n_in / 4);
        for (int64_t j = blockIdx.x * blockDim.x + threadIdx.x; j < n_in / 4; j += (int64_t)gridDim.x * blockDim.x)
            ((float4 *)o)[j] = src[j];
        return;
    }
    for (int64_t j = blockIdx.x * blockDim.x + threadIdx.x; j < n_in; j += (int64_t)gridDim.x * blockDim.x)
        o[j] = ew_table_at<T>(data, r, n_in, j, qs_bytes);
}

extern "C" ai_status cuk_embed(cuk_stream s, float *out, const cuk_weight *table, const int32_t *tokens, int32_t n,
                               ai_err *err)
{
    if (!table || n < 0 || n > 65535 || table->n_in <= 0 || table->n_out <= 0 ||
        (n > 0 && (!out || !tokens || !table->data)))
        return ai_err_set(err, AI_ERR_INVALID, "cuk_embed: bad arguments (n %d)", n);
    const dtype t = table->type;
    const int64_t n_in = table->n_in;
    const bool quant = t == DTYPE_Q8_0 || t == DTYPE_Q4_0 || t == DTYPE_Q4_1;
    if (quant && n_in % 32)
        return ai_err_set(err, AI_ERR_INVALID, "cuk_embed: n_in %lld is not a multiple of 32", (long long)n_in);
    if (n == 0) return AI_OK;
    /* the planar layout of cuda_kernels.h: quants of all rows, then the scales */
    const size_t qs_bytes = quant ? (size_t)table->n_out * (size_t)(n_in / 32) * (t == DTYPE_Q8_0 ? 32u : 16u) : 0;
    const int64_t per = t == DTYPE_F32 && n_in % 4 == 0 ? n_in / 4 : n_in;
    dim3 g((unsigned)((per + EW_THREADS - 1) / EW_THREADS), n);
    cudaStream_t st = (cudaStream_t)s;
    if (t == DTYPE_F32 && n_in % 4 == 0 && !ew_aligned16(table->data))
        return ai_err_set(err, AI_ERR_INVALID, "cuk_embed: f32 table is not 16-byte aligned");
    if (t == DTYPE_F32 && n_in % 4 == 0 && !ew_aligned16(out))
        return ai_err_set(err, AI_ERR_INVALID, "cuk_embed: out is not 16-byte aligned");
    switch (t) {
    case DTYPE_F32: cuk_launch(k_embed<DTYPE_F32>, dim3(g), dim3(EW_THREADS), 0, st, out, table->data, n_in, tokens, qs_bytes); break;
    case DTYPE_F16: cuk_launch(k_embed<DTYPE_F16>, dim3(g), dim3(EW_THREADS), 0, st, out, table->data, n_in, tokens, qs_bytes); break;
    case DTYPE_BF16: cuk_launch(k_embed<DTYPE_BF16>, dim3(g), dim3(EW_THREADS), 0, st, out, table->data, n_in, tokens, qs_bytes); break;
    case DTYPE_Q8_0: cuk_launch(k_embed<DTYPE_Q8_0>, dim3(g), dim3(EW_THREADS), 0, st, out, table->data, n_in, tokens, qs_bytes); break;
    case DTYPE_Q4_0: cuk_launch(k_embed<DTYPE_Q4_0>, dim3(g), dim3(EW_THREADS), 0, st, out, table->data, n_in, tokens, qs_bytes); break;
    case DTYPE_Q4_1: cuk_launch(k_embed<DTYPE_Q4_1>, dim3(g), dim3(EW_THREADS), 0, st, out, table->data, n_in, tokens, qs_bytes); break;
    default: return ai_err_set(err, AI_ERR_UNSUPPORTED, "cuk_embed: table dtype %d", (int)t);
    }
    CUK_LAUNCHED(err, "cuk_embed");
    return AI_OK;
}
