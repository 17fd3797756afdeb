/* attn_naive.cu - v1 (forward) and v1b (backward): attention written the obvious way, with the full
 * (s, s) score matrix in device memory. The baseline every later step is measured against, and the
 * GPU check of the fast backward.
 *
 * v1  S = scale Q K^T (one thread per score, causal entries -inf) -> fp32 S in memory (b*h*s*s*4 bytes)
 *     -> one warp per row: softmax in place (P) and lse -> O = P V (one thread per output element).
 *     Why slow: S is written once and read twice (softmax, then PV) and is s/d times bigger than Q, K, V
 *     (32x at s = 4096, d = 128): the traffic is dominated by S, not by the inputs, and the GEMMs read
 *     their operands from global memory with no reuse (naive loops, no tiling, no tensor cores).
 * v1b P = exp(scale Q K^T - lse) rebuilt from the saved lse; dP = dO V^T; dS = P * (dP - rowsum(P * dP));
 *     dV = P^T dO; dK = scale dS^T Q; dQ = scale dS K: every intermediate (s, s) in fp32 in memory.
 */
#include "kernels/attention/attn_internal.h"

static __device__ __forceinline__ float ld_f(const float *p) { return *p; }
static __device__ __forceinline__ float ld_f(const bf16 *p) { return __bfloat162float(*p); }
static __device__ __forceinline__ void st_f(float *p, float v) { *p = v; }
static __device__ __forceinline__ void st_f(bf16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* C[z](m, n) = alpha * sum_k A[z](m, k) B[z](k, n), element addresses from strides (in elements).
 * One thread per C element (16 x 16 threads per block, grid.z = batch); mask = 1 writes -inf where
 * n > m (causal scores) without computing them. No shared memory, no reuse: naive on purpose. */
template <typename TA, typename TB, typename TC>
__global__ void attn_naive_mm(const TA *__restrict__ A, int64_t sAb, int64_t sAm, int64_t sAk, const TB *__restrict__ B,
                              int64_t sBb, int64_t sBk, int64_t sBn, TC *__restrict__ C, int64_t sCb, int64_t ldc, int M,
                              int N, int K, float alpha, int mask)
{
    const int n = blockIdx.x * 16 + threadIdx.x, m = blockIdx.y * 16 + threadIdx.y;
    const int64_t z = blockIdx.z;
    if (m >= M || n >= N) return;
    TC *c = C + z * sCb + (int64_t)m * ldc + n;
    if (mask && n > m) {
        st_f(c, -INFINITY);
        return;
    }
    const TA *a = A + z * sAb + (int64_t)m * sAm;
    const TB *b = B + z * sBb + (int64_t)n * sBn;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) acc = fmaf(ld_f(a + k * sAk), ld_f(b + k * sBk), acc);
    st_f(c, alpha * acc);
}

template <typename TA, typename TB, typename TC>
static void naive_mm(cudaStream_t st, const TA *A, int64_t sAb, int64_t sAm, int64_t sAk, const TB *B, int64_t sBb,
                     int64_t sBk, int64_t sBn, TC *C, int64_t sCb, int64_t ldc, int M, int N, int K, int batch,
                     float alpha, int mask)
{
    dim3 grid((unsigned)attn_cdiv(N, 16), (unsigned)attn_cdiv(M, 16), (unsigned)batch);
    attn_naive_mm<TA, TB, TC><<<grid, dim3(16, 16), 0, st>>>(A, sAb, sAm, sAk, B, sBb, sBk, sBn, C, sCb, ldc, M, N, K,
                                                             alpha, mask);
}

/* One warp per row of S (rows = b*h*s, n columns): P = softmax in place, lse[row] = max + log(sum). */
__global__ void attn_naive_softmax(float *__restrict__ S, float *__restrict__ lse, int64_t rows, int n)
{
    const int64_t r = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (r >= rows) return;
    float *x = S + r * n;
    float m = -INFINITY;
    for (int j = lane; j < n; j += 32) m = fmaxf(m, x[j]);
    m = attn_warp_max(m); /* finite: key 0 is never masked */
    float l = 0.0f;
    for (int j = lane; j < n; j += 32) l += expf(x[j] - m);
    l = attn_warp_sum(l);
    const float inv = 1.0f / l;
    for (int j = lane; j < n; j += 32) x[j] = expf(x[j] - m) * inv;
    if (lane == 0 && lse) lse[r] = m + logf(l);
}

/* P = exp(S - lse[row]) in place (S holds the scaled, masked scores; -inf gives 0). */
__global__ void attn_naive_p_from_lse(float *__restrict__ S, const float *__restrict__ lse, int64_t rows, int n)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * n) return;
    S[i] = expf(S[i] - lse[i / n]);
}

/* One warp per row: Di = sum_j P dP; dP <- dS = P * (dP - Di) in place. */
__global__ void attn_naive_ds(const float *__restrict__ P, float *__restrict__ dP, int64_t rows, int n)
{
    const int64_t r = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (r >= rows) return;
    const float *p = P + r * n;
    float *g = dP + r * n;
    float di = 0.0f;
    for (int j = lane; j < n; j += 32) di += p[j] * g[j];
    di = attn_warp_sum(di);
    for (int j = lane; j < n; j += 32) g[j] = p[j] * (g[j] - di);
}

size_t attn_v1_work(const attn_args *a) { return attn_n_ss(a) * sizeof(float); }
size_t attn_v1b_work(const attn_args *a) { return 2 * attn_n_ss(a) * sizeof(float); }

int attn_v1_run(void *stream, const attn_args *a)
{
    if (!attn_args_ok(a, 0, attn_v1_work)) return (int)cudaErrorInvalidValue;
    cudaStream_t st = (cudaStream_t)stream;
    const int s = a->s, d = a->d, bh = a->b * a->h;
    const int64_t sq = (int64_t)s * d, ss = (int64_t)s * s, rows = (int64_t)bh * s;
    const bf16 *q = (const bf16 *)a->q, *k = (const bf16 *)a->k, *v = (const bf16 *)a->v;
    float *S = (float *)a->work;
    /* S(i, j) = scale * sum_c Q(i, c) K(j, c) */
    naive_mm(st, q, sq, (int64_t)d, (int64_t)1, k, sq, (int64_t)1, (int64_t)d, S, ss, (int64_t)s, s, s, d, bh, a->scale,
             a->causal);
    attn_naive_softmax<<<(unsigned)attn_cdiv(rows, 8), 256, 0, st>>>(S, a->lse, rows, s);
    /* O(i, c) = sum_j P(i, j) V(j, c) */
    naive_mm(st, (const float *)S, ss, (int64_t)s, (int64_t)1, v, sq, (int64_t)d, (int64_t)1, (bf16 *)a->o, sq,
             (int64_t)d, s, d, s, bh, 1.0f, 0);
    return (int)cudaGetLastError();
}

int attn_v1b_run(void *stream, const attn_args *a)
{
    if (!attn_args_ok(a, 1, attn_v1b_work)) return (int)cudaErrorInvalidValue;
    cudaStream_t st = (cudaStream_t)stream;
    const int s = a->s, d = a->d, bh = a->b * a->h;
    const int64_t sq = (int64_t)s * d, ss = (int64_t)s * s, rows = (int64_t)bh * s;
    const bf16 *q = (const bf16 *)a->q, *k = (const bf16 *)a->k, *v = (const bf16 *)a->v, *dout = (const bf16 *)a->dout;
    float *P = (float *)a->work, *dS = P + rows * s;
    naive_mm(st, q, sq, (int64_t)d, (int64_t)1, k, sq, (int64_t)1, (int64_t)d, P, ss, (int64_t)s, s, s, d, bh, a->scale,
             a->causal);
    attn_naive_p_from_lse<<<(unsigned)attn_cdiv(rows * s, 256), 256, 0, st>>>(P, a->lse, rows, s);
    /* dP(i, j) = sum_c dO(i, c) V(j, c) */
    naive_mm(st, dout, sq, (int64_t)d, (int64_t)1, v, sq, (int64_t)1, (int64_t)d, dS, ss, (int64_t)s, s, s, d, bh, 1.0f, 0);
    attn_naive_ds<<<(unsigned)attn_cdiv(rows, 8), 256, 0, st>>>(P, dS, rows, s);
    /* dV(j, c) = sum_i P(i, j) dO(i, c) */
    naive_mm(st, (const float *)P, ss, (int64_t)1, (int64_t)s, dout, sq, (int64_t)d, (int64_t)1, (bf16 *)a->dv, sq,
             (int64_t)d, s, d, s, bh, 1.0f, 0);
    /* dK(j, c) = scale * sum_i dS(i, j) Q(i, c) */
    naive_mm(st, (const float *)dS, ss, (int64_t)1, (int64_t)s, q, sq, (int64_t)d, (int64_t)1, (bf16 *)a->dk, sq,
             (int64_t)d, s, d, s, bh, a->scale, 0);
    /* dQ(i, c) = scale * sum_j dS(i, j) K(j, c) */
    naive_mm(st, (const float *)dS, ss, (int64_t)s, (int64_t)1, k, sq, (int64_t)d, (int64_t)1, (bf16 *)a->dq, sq,
             (int64_t)d, s, d, s, bh, a->scale, 0);
    return (int)cudaGetLastError();
}
