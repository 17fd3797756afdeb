/* k_gemv.cu - y (n_tok, n_out) = x (n_tok, n_in) . W^T for decode (1 <= n_tok <= 16), every weight dtype.
 *
 * Decode is memory-bound: W is read once per step and each byte meets at most 16 tokens, so the
 * kernel's job is to keep HBM busy. Design (numbers for the H200: ~4.3 TB/s copy, 132 SMs,
 * 1.98 GHz, i.e. ~16-18 weight bytes per SM per clock):
 *  - A "chunk" is 16 bytes of one weight row: 4 f32, 8 f16/bf16, 16 q8 or 32 q4 values (one q4
 *    block; half a q8 block). Lanes take consecutive chunks, so a warp reads 512 contiguous bytes
 *    of a row per load instruction. Weights are loaded evict-first (ld.global.cs): streamed once.
 *  - A block of 128 threads owns R consecutive rows and strides over the whole row; each thread
 *    issues U x R 16-byte loads before using any of them (bf16 n_tok 1: R 1, U 4 -> 64 B per
 *    thread in flight, ~16 blocks per SM: ~128 KB per SM, far above latency x bandwidth).
 *  - x (f32, tiny) is read through L1 (__ldg) and each x load is reused for the R rows a thread
 *    holds; each decoded weight is reused for all T tokens (T templated: 1, 2, 4, 8, 16; a call
 *    with n_tok between runs the next tile up, reading x row min(t, n_tok - 1) and writing only
 *    t < n_tok). The x bytes read per weight byte (4 T / (R x bytes per value)) are what limits the
 *    quantized kernels here. So quantized weights normally go to k_gemv_dp4a.cu (int8 x in shared
 *    memory, dp4a: q4_0/q4_1 at every n_tok, q8_0 from CUK_GEMV_Q8_DP4A_MIN_TOK); this file keeps
 *    q8_0 at n_tok 1-2 (ahead there) and every quantized call whose x does not fit in shared memory
 *    (q4 at n_tok >= 2 then runs one n_tok = 1 pass per token: CUK_GEMV_Q4_LOOP_MIN_TOK). The backend's
 *    decode call (cuk_gemv_ex_work) sends quantized 2-16 tokens to the int8 tensor cores (k_gemv_qmma.cu).
 *  - Quantized values are decoded in registers with byte permutes into the mantissa of 2^23 and one
 *    float subtract (exact), accumulated in fp32 per chunk and scaled once per chunk:
 *    q8_0: d * sum(q x); q4_0/q4_1: d * sum(nib x) + m * sum(x), with m = -8 d for q4_0.
 *  - Reduction: warp shuffles, then the block's 4 warps through shared memory; thread r*T+t writes
 *    y[t][row0 + r]. No atomics: results are deterministic and independent of launch state.
 *  - bf16 with n_tok >= CUK_GEMV_MMA_MIN_TOK goes to the tensor-core kernel (k_gemv_mma.cu).
 *  - Every kernel calls cuk_pdl_wait() first and is launched by cuk_launch (programmatic dependent
 *    launch; cuk_launch.h). H200 A/B with AIINFRA_NO_PDL=1 (2026-12-02): within the 5-10% run-to-run
 *    spread of this bench on every shape (a graph of back-to-back GEMVs).
 *  - Float rows whose length or alignment does not allow 16-byte loads use a plain one-dot-per-block
 *    kernel (correct, slow; real models never take it).
 *
 * Measured (H200, bench/bench_cuda_gemv.c, 2026-12-02, copy 4.26 TB/s, effective TB/s at n_tok 1):
 *   bf16  4096x4096 3.43, 1024x4096 2.17, 14336x4096 4.07, 4096x14336 3.94, 128256x4096 4.51
 *         (cuBLASLt bf16: 2.48, 1.08, 3.66, 3.57, 4.21);
 *   q4_0  1.46, 0.69, 2.04, 2.12, 2.57;  q8_0 (R 8 U 1, the variant now default) 2.77, 1.14, 3.38,
 *   3.65, 4.24. Small matrices lose to the fixed launch + ramp cost (~2-3 us per kernel).
 *
 * Fused variants (template M, cuk_mm_opts; k_gemv_fuse.h says why): the residual add is done by
 * the thread that writes y. The rmsnorm or SwiGLU prologue:
 *  - float weights, n_tok 1-4, T n_in 4 <= 100 KB (template S != XS_GLOBAL, "staged"): the CTA
 *    computes the fused input once into shared memory (stage_x), then runs the unfused kernel's
 *    dot loop (and shape: R1U4 for bf16 at n_tok 1) reading it from there, for several row groups:
 *    the grid is persistent (as many CTAs as fit at once). Why: the first version (below) computed
 *    x * norm_w and x^2 per load, i.e. per row and CTA: twice the L1 traffic of the unfused kernel
 *    per weight byte (x and norm_w) plus the arithmetic, for every row; the H200 measured ~22 us lost
 *    per norm-fused bf16 GEMV at batch 1 (167.9 tok/s fused, 222.8 unfused). Staged, the per-row
 *    work is the unfused kernel's; the prologue runs ~once per CTA slot instead of once per row.
 *  - otherwise (quantized float decoding, longer x, T >= 8): computed while x is loaded (S =
 *    XS_GLOBAL), with the shapes of Shape<K, T, M>.
 * The SwiGLU epilogue (M = FUSE_GLU, float weights, no prologue): W is gate|up stacked, and a CTA
 * owns rows i .. i + R/2 of both halves (R2U2 at n_tok 1: the same loads in flight per thread as
 * R1U4), so after the block reduction one thread holds gate_i and up_i and writes silu(gate) * up:
 * the separate swiglu_rows kernel disappears and the weight stream is unchanged. Same f32 dot products
 * and formula as GEMV + swiglu_rows. Measured (H100, 2026-12-06): 1.0-1.3 us per call saved, within
 * noise in the whole step alone (docs/gpu.md); AUTO takes it at one token with the split norm and rope.
 * The rope epilogue (M = FUSE_ROPE, float weights, no prologue) pairs rows the same way: a CTA owns the
 * row pairs one rotation mixes (rope_pair, k_gemv_fuse.h), and the thread holding both dot products
 * rotates them and writes q|k|v and the KV cache: no rope_store kernel (H100 batch 1, with the split
 * norm: 178.5-179.0 against 177.0-177.5 tok/s; AUTO with the SwiGLU epilogue at one token).
 *
 * Invariants:
 *  1. A launch reads exactly rows [0, n_out) and columns [0, n_in) of W and rows [0, n_tok) of x,
 *     writes exactly y[0..n_tok)[0..n_out) (FUSE_GLU: [0..n_out / 2)).
 *  2. The launch shape depends only on (dtype, n_out, n_in, n_tok) (graph-capturable).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuk_launch.h"
#include "backend/cuda/k_gemv.h"
#include "backend/cuda/k_gemv_fuse.h"

namespace {

constexpr int kThreads = 128;
/* Staged kernels: weight bytes prefetched into L2 while the CTAs stage x (a third of the 50 MB L2). */
constexpr size_t kPrefetchTotal = (size_t)16 << 20;

enum WKind { W_F32, W_F16, W_BF16, W_Q8_0, W_Q4_0, W_Q4_1 };

template <int K> struct Traits;
template <> struct Traits<W_F32> { static constexpr int E = 4; };
template <> struct Traits<W_F16> { static constexpr int E = 8; };
template <> struct Traits<W_BF16> { static constexpr int E = 8; };
template <> struct Traits<W_Q8_0> { static constexpr int E = 16; };
template <> struct Traits<W_Q4_0> { static constexpr int E = 32; };
template <> struct Traits<W_Q4_1> { static constexpr int E = 32; };

/* Weight loads (streamed once). L = 0: evict-first (ld.global.cs, __ldcs), the default: on the
 * H200 it beat the two others by 2-7% on the large matrices (bench, 2026-12-02); L = 1:
 * non-coherent with no L1 allocation and an L2 256-byte prefetch hint; L = 2: plain __ldg. */
template <int L> __device__ __forceinline__ uint4 ld_stream(const uint4 *p)
{
    if constexpr (L == 0) return __ldcs(p);
    if constexpr (L == 2) return __ldg(p);
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

/* Byte k (0..3) of w, read as an unsigned integer, as a float: 0x4B000000 | b is 2^23 + b. */
template <int k> __device__ __forceinline__ float byte_f(uint32_t w)
{
    return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540u | k)) - 8388608.0f;
}

/* Eight weight values of chunk word pair (a, b) as floats (the scale comes later). */
template <int K> __device__ __forceinline__ void decode8(uint32_t a, uint32_t b, float *f);

template <> __device__ __forceinline__ void decode8<W_BF16>(uint32_t a, uint32_t b, float *f)
{
    f[0] = __uint_as_float(a << 16); f[1] = __uint_as_float(a & 0xFFFF0000u);
    f[2] = __uint_as_float(b << 16); f[3] = __uint_as_float(b & 0xFFFF0000u);
}
template <> __device__ __forceinline__ void decode8<W_F16>(uint32_t a, uint32_t b, float *f)
{
    __half2 ha = *reinterpret_cast<__half2 *>(&a), hb = *reinterpret_cast<__half2 *>(&b);
    float2 fa = __half22float2(ha), fb = __half22float2(hb);
    f[0] = fa.x; f[1] = fa.y; f[2] = fb.x; f[3] = fb.y;
}
/* q8: a, b hold 8 int8 (already XORed with 0x80: unsigned = q + 128). */
template <> __device__ __forceinline__ void decode8<W_Q8_0>(uint32_t a, uint32_t b, float *f)
{
    const float o = 8388608.0f + 128.0f;
    f[0] = __uint_as_float(__byte_perm(a, 0x4B000000u, 0x7540u)) - o;
    f[1] = __uint_as_float(__byte_perm(a, 0x4B000000u, 0x7541u)) - o;
    f[2] = __uint_as_float(__byte_perm(a, 0x4B000000u, 0x7542u)) - o;
    f[3] = __uint_as_float(__byte_perm(a, 0x4B000000u, 0x7543u)) - o;
    f[4] = __uint_as_float(__byte_perm(b, 0x4B000000u, 0x7540u)) - o;
    f[5] = __uint_as_float(__byte_perm(b, 0x4B000000u, 0x7541u)) - o;
    f[6] = __uint_as_float(__byte_perm(b, 0x4B000000u, 0x7542u)) - o;
    f[7] = __uint_as_float(__byte_perm(b, 0x4B000000u, 0x7543u)) - o;
}
/* q4: a, b hold 8 nibbles already masked into the low half of each byte. */
__device__ __forceinline__ void decode8_nib(uint32_t a, uint32_t b, float *f)
{
    f[0] = byte_f<0>(a); f[1] = byte_f<1>(a); f[2] = byte_f<2>(a); f[3] = byte_f<3>(a);
    f[4] = byte_f<0>(b); f[5] = byte_f<1>(b); f[6] = byte_f<2>(b); f[7] = byte_f<3>(b);
}

/* The fused-input context of a thread: mode M's options, n_in, and the running x^2 sums (FUSE_NORM);
 * S: where x is read (k_gemv_fuse.h XS_*). */
template <int M, int T, int S = XS_GLOBAL> struct xin {
    const cuk_fuse &f;
    int n_in;
    float (&ss)[T];
};

/* acc[r][t] += sum_j f[r][j] * x_t[e0 + j], j < 8, for all R rows and T tokens; x loaded once (and
 * turned into the fused input, k_gemv_fuse.h). SUM: also sx[t] += sum_j x_t[e0 + j] (q4's offset
 * term), from the same loads. */
template <int T, int R, int M, int S, bool SUM = false>
__device__ __forceinline__ void fma8(const float (&f)[R][8], const float *const (&xt)[T], int e0, float (&acc)[R][T],
                                     const xin<M, T, S> &xi, float *sx = nullptr)
{
    const float4 na = fuse_nw4<M>(xi.f, e0), nb = fuse_nw4<M>(xi.f, e0 + 4);
#pragma unroll
    for (int t = 0; t < T; t++) {
        const float4 a = fuse_x4<M, S>(xt[t], xi.n_in, e0, na, xi.ss[t]);
        const float4 b = fuse_x4<M, S>(xt[t], xi.n_in, e0 + 4, nb, xi.ss[t]);
        if constexpr (SUM) sx[t] += ((a.x + a.y) + (a.z + a.w)) + ((b.x + b.y) + (b.z + b.w));
#pragma unroll
        for (int r = 0; r < R; r++) {
            float s = acc[r][t];
            s = fmaf(f[r][0], a.x, s); s = fmaf(f[r][1], a.y, s);
            s = fmaf(f[r][2], a.z, s); s = fmaf(f[r][3], a.w, s);
            s = fmaf(f[r][4], b.x, s); s = fmaf(f[r][5], b.y, s);
            s = fmaf(f[r][6], b.z, s); s = fmaf(f[r][7], b.w, s);
            acc[r][t] = s;
        }
    }
}

/* One chunk (index c) of R rows into acc. q[r]: the 16 raw bytes; sc: the rows' scale words. */
template <int K, int T, int R, int M, int S>
__device__ __forceinline__ void chunk(const uint4 (&q)[R], const uint32_t (&sc)[R], const float *const (&xt)[T],
                                      int c, float (&acc)[R][T], const xin<M, T, S> &xi)
{
    if constexpr (K == W_F32) {
        const int e0 = c * 4;
        const float4 nw = fuse_nw4<M>(xi.f, e0);
#pragma unroll
        for (int t = 0; t < T; t++) {
            const float4 a = fuse_x4<M, S>(xt[t], xi.n_in, e0, nw, xi.ss[t]);
#pragma unroll
            for (int r = 0; r < R; r++) {
                float s = acc[r][t];
                s = fmaf(__uint_as_float(q[r].x), a.x, s); s = fmaf(__uint_as_float(q[r].y), a.y, s);
                s = fmaf(__uint_as_float(q[r].z), a.z, s); s = fmaf(__uint_as_float(q[r].w), a.w, s);
                acc[r][t] = s;
            }
        }
    } else if constexpr (K == W_F16 || K == W_BF16) {
        float f[R][8];
#pragma unroll
        for (int r = 0; r < R; r++) {
            decode8<K>(q[r].x, q[r].y, &f[r][0]);
            decode8<K>(q[r].z, q[r].w, &f[r][4]);
        }
        fma8<T, R, M, S>(f, xt, c * 8, acc, xi);
    } else if constexpr (K == W_Q8_0) {
        float p[R][T] = {};
        float f[R][8];
#pragma unroll
        for (int r = 0; r < R; r++) decode8<W_Q8_0>(q[r].x ^ 0x80808080u, q[r].y ^ 0x80808080u, f[r]);
        fma8<T, R, M, S>(f, xt, c * 16, p, xi);
#pragma unroll
        for (int r = 0; r < R; r++) decode8<W_Q8_0>(q[r].z ^ 0x80808080u, q[r].w ^ 0x80808080u, f[r]);
        fma8<T, R, M, S>(f, xt, c * 16 + 8, p, xi);
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float d = __half2float(__ushort_as_half((unsigned short)(sc[r] & 0xFFFF)));
#pragma unroll
            for (int t = 0; t < T; t++) acc[r][t] = fmaf(d, p[r][t], acc[r][t]);
        }
    } else { /* q4_0, q4_1: byte j = element j (low nibble) and j + 16 (high nibble) */
        float p[R][T] = {};
        float f[R][8];
        float sx[T] = {};
        const int e0 = c * 32;
#pragma unroll
        for (int g = 0; g < 4; g++) {
#pragma unroll
            for (int r = 0; r < R; r++) {
                const uint32_t a = g & 1 ? q[r].z : q[r].x, b = g & 1 ? q[r].w : q[r].y;
                const uint32_t sh = g < 2 ? 0 : 4;
                decode8_nib((a >> sh) & 0x0F0F0F0Fu, (b >> sh) & 0x0F0F0F0Fu, f[r]);
            }
            fma8<T, R, M, S, true>(f, xt, e0 + (g & 1) * 8 + (g >> 1) * 16, p, xi, sx);
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float d = __half2float(__ushort_as_half((unsigned short)(sc[r] & 0xFFFF)));
            const float m = K == W_Q4_1 ? __half2float(__ushort_as_half((unsigned short)(sc[r] >> 16))) : -8.0f * d;
#pragma unroll
            for (int t = 0; t < T; t++) acc[r][t] = fmaf(d, p[r][t], fmaf(m, sx[t], acc[r][t]));
        }
    }
}

/* Staged fused input (S != XS_GLOBAL; float weights, M = FUSE_NORM or FUSE_SWIGLU): x rows [0, T)
 * (row min(t, n_tok - 1) for t >= n_tok) turned into the GEMV input once per CTA and written to xs
 * (T rows of n_in floats in source S's layout): x * norm_w, or silu(g) * u with the accurate expf
 * and division (once per CTA, so their cost no longer matters; the same formula as cuk_swiglu_rows
 * and the CPU backend). FUSE_NORM: ssum[t] = sum(x^2) of row t (block reduction), the 1 / rms scale
 * is applied to the finished dot products (fuse_store): one multiply per output instead of a second
 * pass over x, and the staged values are exactly the ones the unstaged kernel multiplied.
 * KS float4 items per thread with their loads issued before any is used (the prologue is latency-
 * bound: ~1 L2 round trip per KS x 4 x 128 elements). Ends with __syncthreads. n_in % 4 == 0. */
template <int M, int T, int S>
__device__ __forceinline__ void stage_x(const float *__restrict__ x, int n_tok, int n_in, const float *__restrict__ nw,
                                        float *xs, float *ssum)
{
    constexpr int KS = 4;
    const int n4 = n_in >> 2;
    float ss[T];
#pragma unroll
    for (int t = 0; t < T; t++) {
        const float *xr = x + (size_t)min(t, n_tok - 1) * fuse_x_stride<M>(n_in);
        float *xo = xs + (size_t)t * n_in;
        ss[t] = 0.0f;
        for (int i0 = threadIdx.x; i0 < n4; i0 += kThreads * KS) {
            float4 a[KS], b[KS];
#pragma unroll
            for (int k = 0; k < KS; k++) {
                const int i = i0 + k * kThreads;
                a[k] = b[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (i < n4) {
                    a[k] = __ldg(reinterpret_cast<const float4 *>(xr) + i);
                    if constexpr (M == FUSE_NORM) b[k] = __ldg(reinterpret_cast<const float4 *>(nw) + i);
                    else b[k] = __ldg(reinterpret_cast<const float4 *>(xr + n_in) + i);
                }
            }
#pragma unroll
            for (int k = 0; k < KS; k++) {
                const int i = i0 + k * kThreads;
                const float4 g = a[k], v = b[k];
                float4 o;
                if constexpr (M == FUSE_NORM) {
                    ss[t] = fmaf(g.x, g.x, fmaf(g.y, g.y, fmaf(g.z, g.z, fmaf(g.w, g.w, ss[t]))));
                    o = make_float4(g.x * v.x, g.y * v.y, g.z * v.z, g.w * v.w);
                } else {
                    o = make_float4(fuse_silu_mul_acc(g.x, v.x), fuse_silu_mul_acc(g.y, v.y),
                                    fuse_silu_mul_acc(g.z, v.z), fuse_silu_mul_acc(g.w, v.w));
                }
                if (i < n4) *reinterpret_cast<float4 *>(xo + xs_index<S>(4 * i, n_in)) = o;
            }
        }
    }
    if constexpr (M == FUSE_NORM) {
        __shared__ float part[kThreads / 32][T];
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
        for (int t = 0; t < T; t++) {
            float v = ss[t];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
            if (lane == 0) part[warp][t] = v;
        }
        __syncthreads();
        if (threadIdx.x < T) {
            float v = 0.0f;
#pragma unroll
            for (int k = 0; k < kThreads / 32; k++) v += part[k][threadIdx.x];
            ssum[threadIdx.x] = v;
        }
    } else {
        (void)nw; (void)ssum; (void)ss;
    }
    __syncthreads();
}

/* The weight row that row slot r (0..R) of a CTA starting at row0 reads (see gemv_rows); past the end:
 * the last row again (recomputed, not written). */
template <int R, int M>
__device__ __forceinline__ int weight_row(int r, int row0, int n_out, const cuk_fuse &fz)
{
    constexpr bool paired = M == FUSE_GLU || M == FUSE_ROPE;
    constexpr int H = paired ? R / 2 : R; /* rows per half */
    const int n_rows = paired ? n_out / 2 : n_out;
    const int i = min(row0 + r % H, n_rows - 1);
    if constexpr (M == FUSE_ROPE) {
        int rot;
        const int2 rr = rope_pair(fz.rk, i, &rot);
        return r < H ? rr.x : rr.y;
    }
    return (r < H ? 0 : n_rows) + i;
}

/* L2 prefetch of the first pf bytes of each of the CTA's R weight rows (k_gemv: before the PDL wait). */
template <int K, int R, int M>
__device__ __forceinline__ void prefetch_rows(const unsigned char *w, int n_out, int n_in, int row0, int pf,
                                              const cuk_fuse &fz)
{
    const size_t row_bytes = (size_t)(n_in / Traits<K>::E) * 16;
    const unsigned pre = (unsigned)min((size_t)pf, row_bytes);
#pragma unroll 1
    for (int r = 0; r < R; r++) {
        const unsigned char *p = w + (size_t)weight_row<R, M>(r, row0, n_out, fz) * row_bytes;
        for (unsigned off = threadIdx.x * 128u; off < pre; off += kThreads * 128u)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(p + off));
    }
}

/* Rows [row0, row0 + R) of y for all T tokens: the dot loop over x rows xt (source S, mode MD for
 * the loads) and the block reduction; M for the store. sq_staged: the staged rows' sum(x^2).
 * ss_run: the split norm's sum of squares of the stored values (ss_warp_add; thread t < T, token t).
 * M = FUSE_GLU: rows [row0, row0 + R / 2) of each half of W (gate, up), output row width n_out / 2.
 * M = FUSE_ROPE: pairs [row0, row0 + R / 2) of rows (rope_pair), the first rows of each pair, then the
 * second ones. */
template <int K, int T, int R, int U, int L, int M, int S, int MD>
__device__ __forceinline__ void gemv_rows(const unsigned char *__restrict__ w, const unsigned char *__restrict__ scales,
                                          const float *const (&xt)[T], float *__restrict__ y, int n_out, int n_in,
                                          int n_tok, const cuk_fuse &fz, int row0, const float *sq_staged,
                                          double &ss_run)
{
    constexpr int E = Traits<K>::E;
    constexpr bool quant = K >= W_Q8_0;
    const int nc = n_in / E;                              /* chunks per row */
    const size_t row_bytes = (size_t)nc * 16;
    constexpr bool glu = M == FUSE_GLU, rope = M == FUSE_ROPE;
    static_assert(!(glu || rope) || R % 2 == 0, "FUSE_GLU and FUSE_ROPE take rows in pairs");
    constexpr int H = glu || rope ? R / 2 : R; /* rows per half */
    const int n_rows = glu || rope ? n_out / 2 : n_out;
    const uint4 *wr[R];
    int srow[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        srow[r] = weight_row<R, M>(r, row0, n_out, fz);
        wr[r] = reinterpret_cast<const uint4 *>(w + (size_t)srow[r] * row_bytes);
    }
    /* the epilogue's other inputs, loaded now (fuse_pre_load): thread i < R T stores (row i / T, token
     * i % T); the paired modes' thread i < H T needs only the 1 / rms of token i % T */
    fuse_pre pre = {0.0f, 1.0f, 0.0f};
    if constexpr (glu || rope) {
        if (fz.in_ss && threadIdx.x < H * T && (int)threadIdx.x % T < n_tok)
            pre.rs = fuse_in_scale(fz, threadIdx.x % T, n_in);
    } else if (threadIdx.x < R * T) {
        pre = fuse_pre_load(fz, y, n_out, threadIdx.x % T, row0 + threadIdx.x / T, n_tok, n_in);
    }
    float acc[R][T] = {};
    float ss[T] = {}; /* unstaged FUSE_NORM: this thread's share of sum(x^2) per token */
    const xin<MD, T, S> xi{fz, n_in, ss};
    const int nblk = n_in / 32;
    for (int c0 = threadIdx.x; c0 < nc; c0 += kThreads * U) {
        uint4 q[U][R];
        uint32_t sc[U][R];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + u * kThreads;
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (c < nc) {
                    q[u][r] = ld_stream<L>(wr[r] + c);
                    if constexpr (K == W_Q4_1)
                        sc[u][r] = __ldg(reinterpret_cast<const unsigned int *>(scales) + (size_t)srow[r] * nblk + c);
                    else if constexpr (quant)
                        sc[u][r] = __ldg(reinterpret_cast<const unsigned short *>(scales) + (size_t)srow[r] * nblk +
                                         (K == W_Q8_0 ? c >> 1 : c));
                    else
                        sc[u][r] = 0;
                } else {
                    q[u][r] = make_uint4(0, 0, 0, 0);
                    sc[u][r] = 0;
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + u * kThreads;
            if (c < nc) chunk<K, T, R, MD, S>(q[u], sc[u], xt, c, acc, xi);
        }
    }

    __shared__ float red[kThreads / 32][R * T + T]; /* dot products, then (FUSE_NORM) sum(x^2) per token */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int r = 0; r < R; r++) {
#pragma unroll
        for (int t = 0; t < T; t++) {
            float v = acc[r][t];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
            if (lane == 0) red[warp][r * T + t] = v;
        }
    }
    if constexpr (MD == FUSE_NORM) {
#pragma unroll
        for (int t = 0; t < T; t++) {
            float v = ss[t];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
            if (lane == 0) red[warp][R * T + t] = v;
        }
    }
    __syncthreads();
    if constexpr (glu || rope) { /* one thread gets both dot products of a pair */
        for (int i = threadIdx.x; i < H * T; i += kThreads) {
            const int r = i / T, t = i % T;
            float a = 0.0f, b = 0.0f;
#pragma unroll
            for (int k = 0; k < kThreads / 32; k++) {
                a += red[k][i];
                b += red[k][H * T + i];
            }
            if (row0 + r < n_rows && t < n_tok) {
                if (fz.in_ss) { /* the split norm's 1 / rms goes on both products (before the silu) */
                    a *= pre.rs;
                    b *= pre.rs;
                }
                if constexpr (glu) y[(size_t)t * n_rows + row0 + r] = fuse_silu_mul_acc(a, b); /* gate, up */
                else rope_pair_store(fz, y, n_out, t, row0 + r, a, b);
            }
        }
    } else {
        static_assert(R * T <= 32, "the stores in warp 0: thread i stores token i % T (ss_warp_add)");
        double q = 0.0;
        for (int i = threadIdx.x; i < R * T; i += kThreads) {
            const int r = i / T, t = i % T;
            float v = 0.0f, sq = 0.0f;
#pragma unroll
            for (int k = 0; k < kThreads / 32; k++) v += red[k][i];
            if constexpr (MD == FUSE_NORM) {
#pragma unroll
                for (int k = 0; k < kThreads / 32; k++) sq += red[k][R * T + t];
            } else if constexpr (S != XS_GLOBAL && M == FUSE_NORM) {
                sq = sq_staged[t];
            }
            if (row0 + r < n_out && t < n_tok) {
                v = fuse_store_pre<M, false>(fz, y, n_out, t, row0 + r, v, sq, n_in, pre);
                q = (double)v * (double)v;
            }
        }
        if (fz.out_xn && threadIdx.x < 32) ss_warp_add<T>(ss_run, q);
    }
}

/* S = XS_GLOBAL: one row group of R rows per CTA (grid = row groups), x read from global memory,
 * the fused input (mode M) computed per load. S != XS_GLOBAL (float weights, M != FUSE_NONE):
 * persistent - the CTA stages the fused input once (stage_x), then walks row groups blockIdx.x,
 * + gridDim.x, ... with the unfused kernel's dot loop reading x from shared memory (mode FUSE_NONE
 * for the loads; M only for the store: the 1 / rms scale and the accumulate). While it stages, the
 * CTA's first row group is prefetched into L2 so that HBM is not idle during the prologue. */
template <int K, int T, int R, int U, int L, int M, int S = XS_GLOBAL>
__global__ void __launch_bounds__(kThreads, 4) k_gemv(const unsigned char *__restrict__ w,
                                                   const unsigned char *__restrict__ scales,
                                                   const float *__restrict__ x, float *__restrict__ y, int n_out,
                                                   int n_in, int n_tok, int pf, cuk_fuse fz)
{
    constexpr bool staged = S != XS_GLOBAL;
    static_assert(!staged || (K <= W_BF16 && M != FUSE_NONE), "staging is for the fused float kernels");
    const float *xt[T];
    double ss_run = 0.0; /* the split norm (out_xn): this CTA's sum of squares of token threadIdx.x */
    if constexpr (staged) {
        extern __shared__ float4 xs_dyn[]; /* (T, n_in) fused input */
        __shared__ float ssum[T];          /* FUSE_NORM: sum(x^2) per token */
        float *xs = reinterpret_cast<float *>(xs_dyn);
        const size_t row_bytes = (size_t)(n_in / Traits<K>::E) * 16;
        const int ngroups = (n_out + R - 1) / R;
        /* L2 prefetch of the CTA's first groups, ~kPrefetchTotal over the grid (at least one group,
         * at most 4): staging takes a few L2 round trips (~2 us for 112 KB of gate|up per CTA), and
         * this is what HBM streams meanwhile. */
        const size_t gbytes = (size_t)R * row_bytes;
        const int npre = (int)min((size_t)4, max((size_t)1, kPrefetchTotal / gridDim.x / gbytes));
        if (!pf) cuk_pdl_wait();
        for (int k = 0; k < npre; k++) {
            const int g = (int)blockIdx.x + k * (int)gridDim.x;
            if (g >= ngroups) break;
            const unsigned char *first = w + (size_t)g * gbytes;
            const size_t pre = (size_t)min(R, n_out - g * R) * row_bytes;
            for (size_t off = (size_t)threadIdx.x * 128; off < pre; off += (size_t)kThreads * 128)
                asm volatile("prefetch.global.L2 [%0];" ::"l"(first + off));
        }
        if (pf) cuk_pdl_wait(); /* pf: the prefetch (it reads no data) went before the wait */
        stage_x<M, T, S>(x, n_tok, n_in, fz.nw, xs, ssum);
#pragma unroll
        for (int t = 0; t < T; t++) xt[t] = xs + (size_t)t * n_in;
        for (int grp = blockIdx.x; grp < ngroups; grp += gridDim.x) {
            gemv_rows<K, T, R, U, L, M, S, FUSE_NONE>(w, scales, xt, y, n_out, n_in, n_tok, fz, grp * R, ssum, ss_run);
            if (grp + (int)gridDim.x < ngroups) __syncthreads(); /* the reduction's shared memory is reused */
        }
    } else {
#pragma unroll
        for (int t = 0; t < T; t++) xt[t] = x + (size_t)min(t, n_tok - 1) * fuse_x_stride<M>(n_in);
        constexpr bool paired = M == FUSE_GLU || M == FUSE_ROPE;
        constexpr int MD = paired ? FUSE_NONE : M; /* epilogue-only modes: plain loads */
        const int row0 = (int)blockIdx.x * (paired ? R / 2 : R);
        if (pf) prefetch_rows<K, R, M>(w, n_out, n_in, row0, pf, fz); /* reads no data: before the wait */
        cuk_pdl_wait();
        gemv_rows<K, T, R, U, L, M, S, MD>(w, scales, xt, y, n_out, n_in, n_tok, fz, row0, nullptr, ss_run);
    }
    ss_warp_flush<T>(fz, ss_run, threadIdx.x, n_tok); /* one atomic per CTA and token */
}

/* Any n_in and alignment, float weights: block (row, token) computes one dot product. */
template <int K, int M>
__global__ void __launch_bounds__(kThreads) k_gemv_any(const void *__restrict__ w, const float *__restrict__ x,
                                                       float *__restrict__ y, int n_out, int n_in, cuk_fuse fz)
{
    cuk_pdl_wait();
    const int row = blockIdx.x, t = blockIdx.y;
    const float *xr = x + (size_t)t * fuse_x_stride<M>(n_in);
    float s = 0.0f, ss = 0.0f;
    for (int i = threadIdx.x; i < n_in; i += kThreads) {
        const size_t k = (size_t)row * n_in + i;
        float v, xv = xr[i];
        if constexpr (K == W_F32) v = static_cast<const float *>(w)[k];
        else if constexpr (K == W_F16) v = __half2float(static_cast<const __half *>(w)[k]);
        else v = __bfloat162float(static_cast<const __nv_bfloat16 *>(w)[k]);
        if constexpr (M == FUSE_NORM) {
            ss = fmaf(xv, xv, ss);
            xv *= fz.nw[i];
        } else if constexpr (M == FUSE_SWIGLU) {
            xv = fuse_silu_mul(xv, xr[n_in + i]);
        }
        s = fmaf(v, xv, s);
    }
    __shared__ float red[2][kThreads / 32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        s += __shfl_xor_sync(0xFFFFFFFFu, s, o);
        ss += __shfl_xor_sync(0xFFFFFFFFu, ss, o);
    }
    if ((threadIdx.x & 31) == 0) {
        red[0][threadIdx.x >> 5] = s;
        red[1][threadIdx.x >> 5] = ss;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float v = 0.0f, sq = 0.0f;
        for (int k = 0; k < kThreads / 32; k++) {
            v += red[0][k];
            sq += red[1][k];
        }
        fuse_store<M>(fz, y, n_out, t, row, v, sq, n_in, fz.in_ss ? fuse_in_scale(fz, t, n_in) : 1.0f);
    }
}

/* Rows per block R and loads per thread in flight U for tile T: x reuse in registers against
 * spills (0 spill bytes for all of these; ptxas -v). n_tok = 1 picks were measured (bench variants). */
/* FUSE_SWIGLU at T = 1 on float weights: R 4 U 2 (a bench variant, "R4U2"): silu costs 2 MUFU ops
 * per x element and CTA; with one row per CTA that is 2 per weight value, ~18 per SM and clock at
 * the bf16 weight rate against 16 available, with four rows 0.5 (k_gemv_fuse.h). */
/* Fused quantized at T = 1: R 4 (R 8 spilled with the fused prologue's registers). */
template <int K, int T, int M = FUSE_NONE> struct Shape {
    static constexpr bool q4 = K == W_Q4_0 || K == W_Q4_1;
    static constexpr bool fl = K == W_F32 || K == W_F16 || K == W_BF16;
    static constexpr bool sw1 = M == FUSE_SWIGLU && T == 1 && fl;
    static constexpr int R = sw1 ? 4 : (T == 1 && M != FUSE_NONE && !fl) ? 4 : T == 1 ? (fl ? 1 : 8) : T == 2 ? 4 : T == 4 ? (q4 ? 2 : 4) : (q4 && T == 16) ? 1 : 2;
    static constexpr int U = sw1 ? 2 : fl ? (T <= 2 ? 4 : T <= 8 ? 2 : 1) : 1;
};
/* FUSE_GLU and FUSE_ROPE (float weights): an even R - R2U2 at T = 1, the same 4 loads per thread in
 * flight as R1U4. */
template <int K, int T> struct PairShape {
    static constexpr int R = Shape<K, T>::R == 1 ? 2 : Shape<K, T>::R;
    static constexpr int U = Shape<K, T>::R == 1 ? 2 : Shape<K, T>::U;
    static_assert(R % 2 == 0, "pairs of rows");
};
template <int K, int T> struct Shape<K, T, FUSE_GLU> : PairShape<K, T> {};
template <int K, int T> struct Shape<K, T, FUSE_ROPE> : PairShape<K, T> {};

/* Bytes of each weight row an unstaged k_gemv CTA prefetches into L2 before its PDL wait
 * (AIINFRA_GEMV_PF: 0 none, 1 the first round of loads (round_bytes), 2 the whole row; default
 * CUK_GEMV_PF_DEFAULT). Weights are never written during a step, and a prefetch returns no data, so
 * it cannot observe a value the previous kernel is still writing (the register loads of commit
 * 4ca146d could not be shown safe: docs/gpu.md, "Early weight loads under PDL"). The staged kernels
 * take any nonzero value as "their L2 prefetch before the wait". */
static int gemv_pf_bytes(int round_bytes)
{
    const char *e = getenv("AIINFRA_GEMV_PF");
    const int mode = e && *e ? atoi(e) : CUK_GEMV_PF_DEFAULT;
    return mode <= 0 ? 0 : mode == 1 ? round_bytes : 1 << 30; /* the kernel clamps to its row bytes */
}

template <int K, int T, int R, int U, int L, int M = FUSE_NONE>
void launch_v(cuk_stream s, const cuk_weight *w, const float *x, int n_tok, float *y, cuk_fuse f = cuk_fuse{})
{
    const unsigned char *base = static_cast<const unsigned char *>(w->data);
    const unsigned char *sc = base + cuk_weight_qs_bytes(w->type, w->n_out, w->n_in);
    constexpr bool paired = M == FUSE_GLU || M == FUSE_ROPE;
    const int rows = paired ? R / 2 : R; /* FUSE_GLU: R / 2 rows of each half per CTA; FUSE_ROPE: R / 2 pairs */
    const int64_t n = paired ? w->n_out / 2 : w->n_out;
    const unsigned blocks = (unsigned)((n + rows - 1) / rows);
    cuk_launch(k_gemv<K, T, R, U, L, M>, dim3(blocks), dim3(kThreads), 0, (cudaStream_t)s, base, sc, x, y,
               (int)w->n_out, (int)w->n_in, n_tok, gemv_pf_bytes(kThreads * U * 16), f);
}

template <int K, int T, int M>
void launch_t(cuk_stream s, const cuk_weight *w, const float *x, int n_tok, float *y, cuk_fuse f)
{
    launch_v<K, T, Shape<K, T, M>::R, Shape<K, T, M>::U, 0, M>(s, w, x, n_tok, y, f);
}

/* Staged fused float kernels (k_gemv with S != XS_GLOBAL): T n_in floats of shared memory per
 * CTA, at most kStageMax (>= 2 CTAs per SM); longer inputs (n_tok >= 2 on the 14336-wide down
 * projection) and T >= 8 keep the unstaged fused kernel. */
constexpr size_t kStageMax = (size_t)100 << 10;
/* Above this (T = 1, n_in > 8192: the down projection, 56 KB, 3 CTAs per SM) the staged kernel
 * keeps 8 loads per thread in flight instead of 4 (R1U8, an unfused bench variant): with 3 x 128
 * threads per SM, U 4 leaves ~24 KB in flight per SM, about latency x bandwidth (~1 us x 18 B/clk). */
constexpr size_t kStageWide = (size_t)32 << 10;

template <int K, int T> constexpr bool stageable() { return (K == W_F32 || K == W_F16 || K == W_BF16) && T <= 4; }

static bool stage_fits(const cuk_weight *w, int T) { return (size_t)T * (size_t)w->n_in * sizeof(float) <= kStageMax; }

/* Persistent grid: as many CTAs as fit on the device at once (occupancy with this shared memory),
 * each taking the same number of row groups (ceil(groups / CTAs)), so that they finish together;
 * device properties only (invariant 2). */
template <int K, int T, int R, int U, int M>
cudaError_t launch_staged_v(cudaStream_t s, const cuk_weight *w, const float *x, int n_tok, float *y, cuk_fuse f)
{
    constexpr int S = K == W_F32 ? XS_SMEM : XS_SMEM8;
    void (*kern)(const unsigned char *, const unsigned char *, const float *, float *, int, int, int, int,
                 cuk_fuse) = k_gemv<K, T, R, U, 0, M, S>;
    const int n_in = (int)w->n_in, n_out = (int)w->n_out;
    const size_t smem = (size_t)T * (size_t)n_in * sizeof(float);
    long long cap = 0;
    const cudaError_t e = cuk_resident_ctas(kern, kThreads, smem, &cap);
    if (e != cudaSuccess) return e;
    const long long groups = ((long long)n_out + R - 1) / R;
    const long long per_cta = (groups + cap - 1) / cap;
    const unsigned grid = (unsigned)((groups + per_cta - 1) / per_cta);
    const unsigned char *base = static_cast<const unsigned char *>(w->data);
    return cuk_launch(kern, dim3(grid), dim3(kThreads), smem, s, base, base, x, y, n_out, n_in, n_tok,
                      gemv_pf_bytes(1) ? 1 : 0, f);
}

/* The staged kernels run the unfused kernel's shape (Shape<K, T>: R1U4 for bf16 at n_tok 1, the
 * fastest unfused), except R1U8 past kStageWide (above). The fused shapes of Shape<K, T, M> (R4U2
 * for swiglu) were there to spread per-load MUFU work over more rows; staging computes silu once. */
template <int K, int T, int M>
cudaError_t launch_staged(cudaStream_t s, const cuk_weight *w, const float *x, int n_tok, float *y, cuk_fuse f)
{
    using Sh = Shape<K, T>;
    if constexpr (T == 1) {
        if ((size_t)w->n_in * sizeof(float) > kStageWide)
            return launch_staged_v<K, T, 1, 8, M>((cudaStream_t)s, w, x, n_tok, y, f);
    }
    return launch_staged_v<K, T, Sh::R, Sh::U, M>((cudaStream_t)s, w, x, n_tok, y, f);
}

/* Fused float tile T: staged when x fits (launch_staged), else x read per load (launch_t). */
template <int K, int T, int M>
cudaError_t launch_tf(cuk_stream s, const cuk_weight *w, const float *x, int n_tok, float *y, cuk_fuse f)
{
    if constexpr (M != FUSE_NONE && stageable<K, T>()) {
        if (stage_fits(w, T)) return launch_staged<K, T, M>((cudaStream_t)s, w, x, n_tok, y, f);
    }
    launch_t<K, T, M>(s, w, x, n_tok, y, f);
    return cudaSuccess;
}

/* Fused quantized kernels exist for T = 1, 2 only (the T >= 4 ones spilled); cuk_gemv_path_ex runs
 * one n_tok = 1 pass per token there - a path real models never take (dp4a covers them). */
template <int K, int M>
cudaError_t launch_km(cuk_stream s, const cuk_weight *w, const float *x, int n_tok, float *y, cuk_fuse f)
{
    if constexpr (M == FUSE_NONE && K <= W_BF16) {
        /* the split norm's writer (wo, down) at one token: R2U2 (the same 4 loads per thread in flight as
         * R1U4) halves the CTAs that end in an atomic on out_ss and the ends with dependent loads. H100,
         * 2026-12-07, bf16 batch 1: 183.3 / 183.4 tok/s against 182.2 / 182.6 with R1U4 (R4U1: 180.7). */
        if (n_tok == 1 && f.out_xn) {
            launch_v<K, 1, 2, 2, 0, M>(s, w, x, n_tok, y, f);
            return cudaSuccess;
        }
    }
    if (n_tok == 1) return launch_tf<K, 1, M>(s, w, x, n_tok, y, f);
    if constexpr (K >= W_Q8_0 && M != FUSE_NONE) {
        launch_t<K, 2, M>(s, w, x, n_tok, y, f); /* n_tok == 2: the dispatcher loops above */
        return cudaSuccess;
    } else {
        if (n_tok == 2) return launch_tf<K, 2, M>(s, w, x, n_tok, y, f);
        if (n_tok <= 4) return launch_tf<K, 4, M>(s, w, x, n_tok, y, f);
        if (n_tok <= 8) launch_t<K, 8, M>(s, w, x, n_tok, y, f);
        else launch_t<K, 16, M>(s, w, x, n_tok, y, f);
        return cudaSuccess;
    }
}

template <int K>
cudaError_t launch_k(cuk_stream s, const cuk_weight *w, const float *x, int n_tok, float *y, int m, cuk_fuse f)
{
    if (m == FUSE_NORM) return launch_km<K, FUSE_NORM>(s, w, x, n_tok, y, f);
    if (m == FUSE_SWIGLU) return launch_km<K, FUSE_SWIGLU>(s, w, x, n_tok, y, f);
    return launch_km<K, FUSE_NONE>(s, w, x, n_tok, y, f);
}

/* The epilogue-only modes (FUSE_GLU, FUSE_ROPE): the float kernels' tiles, shapes Shape<K, T, M> */
template <int K, int M> void launch_paired(cuk_stream s, const cuk_weight *w, const float *x, int n_tok, float *y, cuk_fuse f)
{
    if (n_tok == 1) launch_t<K, 1, M>(s, w, x, n_tok, y, f);
    else if (n_tok == 2) launch_t<K, 2, M>(s, w, x, n_tok, y, f);
    else if (n_tok <= 4) launch_t<K, 4, M>(s, w, x, n_tok, y, f);
    else if (n_tok <= 8) launch_t<K, 8, M>(s, w, x, n_tok, y, f);
    else launch_t<K, 16, M>(s, w, x, n_tok, y, f);
}
template <int M> void launch_paired_any(cuk_stream s, const cuk_weight *w, const float *x, int n_tok, float *y, cuk_fuse f)
{
    if (w->type == DTYPE_F32) launch_paired<W_F32, M>(s, w, x, n_tok, y, f);
    else if (w->type == DTYPE_F16) launch_paired<W_F16, M>(s, w, x, n_tok, y, f);
    else launch_paired<W_BF16, M>(s, w, x, n_tok, y, f);
}

template <int K, int M>
void launch_any_m(cuk_stream s, const cuk_weight *w, const float *x, int n_tok, float *y, cuk_fuse f)
{
    cuk_launch(k_gemv_any<K, M>, dim3((unsigned)w->n_out, (unsigned)n_tok), dim3(kThreads), 0, (cudaStream_t)s,
               w->data, x, y, (int)w->n_out, (int)w->n_in, f);
}

template <int K>
void launch_any(cuk_stream s, const cuk_weight *w, const float *x, int n_tok, float *y, int m, cuk_fuse f)
{
    if (m == FUSE_NORM) launch_any_m<K, FUSE_NORM>(s, w, x, n_tok, y, f);
    else if (m == FUSE_SWIGLU) launch_any_m<K, FUSE_SWIGLU>(s, w, x, n_tok, y, f);
    else launch_any_m<K, FUSE_NONE>(s, w, x, n_tok, y, f);
}

} // namespace

/* Bench-only tuning variants at n_tok 1 (k_gemv.h); variant 0 is what cuk_gemv runs. */
extern "C" ai_status cuk_gemv_variant(cuk_stream s, const cuk_weight *w, const float *x, float *y, int v,
                                      const char **name, ai_err *err)
{
    static const char *const bf16_names[] = {"R1U4",     "R2U4",     "R1U8", "R1U4 nalc",
                                             "R1U2",     "R2U2",     "R1U4 ldg", "R4U2"};
    /* quantized: 0 = cuk_gemv's pick, 1-6 = dp4a (k_gemv_dp4a.cu) with R rows per warp and U loads per
     * lane forced or automatic with the early L2 prefetch, 7 = the float-decoding kernel (R8U1, the
     * q4 default before dp4a and q8_0's n_tok = 1 pick) for q4, dp4a automatic for q8_0 */
    static const char *const q_names[] = {"pick", "dq R1U4", "dq R1U8", "dq R2U4", "dq early", "dq R4U2", "dq R4U4",
                                          "f R8U1"};
    static const int q_ru[][3] = {{0, 0, 0}, {1, 4, 0}, {1, 8, 0}, {2, 4, 0}, {0, 0, 1}, {4, 2, 0}, {4, 4, 0}};
    if (!w || !w->data || v < 0 || v >= CUK_GEMV_VARIANTS || w->n_in % 32 ||
        (w->type != DTYPE_BF16 && w->type != DTYPE_Q4_0 && w->type != DTYPE_Q4_1 && w->type != DTYPE_Q8_0))
        return ai_err_set(err, AI_ERR_INVALID, "cuk_gemv_variant: bad arguments");
    if (w->type == DTYPE_BF16) {
        *name = bf16_names[v];
        switch (v) {
        case 0: launch_v<W_BF16, 1, 1, 4, 0>(s, w, x, 1, y); break;
        case 1: launch_v<W_BF16, 1, 2, 4, 0>(s, w, x, 1, y); break;
        case 2: launch_v<W_BF16, 1, 1, 8, 0>(s, w, x, 1, y); break;
        case 3: launch_v<W_BF16, 1, 1, 4, 1>(s, w, x, 1, y); break;
        case 4: launch_v<W_BF16, 1, 1, 2, 0>(s, w, x, 1, y); break;
        case 5: launch_v<W_BF16, 1, 2, 2, 0>(s, w, x, 1, y); break;
        case 6: launch_v<W_BF16, 1, 1, 4, 2>(s, w, x, 1, y); break;
        default: launch_v<W_BF16, 1, 4, 2, 0>(s, w, x, 1, y); break;
        }
    } else {
        *name = v == 7 && w->type == DTYPE_Q8_0 ? "dq auto" : q_names[v];
        if (v == 0) return cuk_gemv_path(s, w, x, 1, y, 0, err);
        if (v < 7) return cuk_gemv_dp4a(s, w, x, 1, y, q_ru[v][0], q_ru[v][1], q_ru[v][2], err);
        if (w->type == DTYPE_Q8_0) return cuk_gemv_dp4a(s, w, x, 1, y, 0, 0, 0, err);
        else if (w->type == DTYPE_Q4_0) launch_v<W_Q4_0, 1, 8, 1, 0>(s, w, x, 1, y);
        else launch_v<W_Q4_1, 1, 8, 1, 0>(s, w, x, 1, y);
    }
    CUK_LAUNCHED(err, "cuk_gemv_variant");
    return AI_OK;
}

/* 16-byte loads need 16-byte aligned rows of weights and x. */
static bool vec_ok(const cuk_weight *w, const float *x)
{
    const int per16 = w->type == DTYPE_F32 ? 4 : 8;
    return w->n_in % per16 == 0 && (uintptr_t)w->data % 16 == 0 && (uintptr_t)x % 16 == 0;
}

/* Whether the float kernels take this call with an epilogue-only mode (no prologue, even n_out). */
static bool paired_ok(const cuk_weight *w, const float *x, int32_t n_tok, const cuk_mm_opts *o)
{
    if (!w || !w->data || !x || o->norm_w || o->swiglu_in || o->accumulate || o->out_xn || w->n_out % 2 || n_tok < 1 ||
        n_tok > CUK_GEMV_MAX_TOK)
        return false;
    const bool fl = w->type == DTYPE_F32 || w->type == DTYPE_F16 || w->type == DTYPE_BF16;
    return fl && vec_ok(w, x) && !(w->type == DTYPE_BF16 && n_tok >= CUK_GEMV_MMA_MIN_TOK);
}

extern "C" bool cuk_gemv_glu_fused(const cuk_weight *w, const float *x, int32_t n_tok, const cuk_mm_opts *o)
{
    return o && o->swiglu_out && !o->rope_kv && paired_ok(w, x, n_tok, o);
}

extern "C" bool cuk_gemv_rope_fused(const cuk_weight *w, const float *x, int32_t n_tok, const cuk_mm_opts *o)
{
    if (!o || !o->rope_kv || o->swiglu_out || !paired_ok(w, x, n_tok, o) || !backend_rope_kv_fits(o, w->n_out))
        return false;
    const cuk_rope_kv *rk = o->rope_kv;
    ai_err e;
    return rk->head_dim % 2 == 0 && rk->head_dim_v % 2 == 0 && cuk_rope_kv_check(rk, n_tok, "", &e) == AI_OK;
}

/* Whether cuk_gemv_path_ex(path 0) sends this call to the dp4a kernel (quantized, 16-byte aligned, x fits). */
static bool dq_pick(const cuk_weight *w, const float *x, int32_t n_tok)
{
    const bool quant = w->type == DTYPE_Q8_0 || w->type == DTYPE_Q4_0 || w->type == DTYPE_Q4_1;
    return quant && w->n_in % 32 == 0 && (uintptr_t)w->data % 16 == 0 && (uintptr_t)x % 16 == 0 &&
           cuk_gemv_dp4a_max_tok(w->n_in) > 0 && (w->type != DTYPE_Q8_0 || n_tok >= CUK_GEMV_Q8_DP4A_MIN_TOK);
}

extern "C" size_t cuk_gemv_work_size(const cuk_weight *w, int32_t max_tok)
{
    if (!w || max_tok < 1) return 0;
    if (w->type != DTYPE_Q8_0 && w->type != DTYPE_Q4_0 && w->type != DTYPE_Q4_1) return 0;
    return cuk_gemv_dp4a_xq_bytes(w->n_in, max_tok < CUK_GEMV_MAX_TOK ? max_tok : CUK_GEMV_MAX_TOK);
}

static int split_mask(void)
{
    const char *e = getenv("AIINFRA_GEMV_SPLIT");
    return e && *e ? atoi(e) : CUK_GEMV_SPLIT_DEFAULT;
}

extern "C" ai_status cuk_gemv_ex_work(cuk_stream s, const cuk_weight *w, const float *x, int32_t n_tok, float *y,
                                      const cuk_mm_opts *o, void *work, size_t work_size, ai_err *err)
{
    /* quantized 2-16 tokens: x rounded once, then the int8 tensor cores (k_gemv_qmma.cu); q8_0 keeps its
     * exact-x float kernel below CUK_GEMV_Q8_DP4A_MIN_TOK */
    const int qmin = cuk_gemv_qmma_min_tok();
    const bool qmma_opts = !o || (!o->swiglu_out && !o->rope_kv && !(o->swiglu_in && o->norm_w));
    if (qmin > 0 && n_tok >= qmin && n_tok <= CUK_GEMV_MAX_TOK && qmma_opts && cuk_gemv_qmma_ok(w) &&
        (w->type != DTYPE_Q8_0 || n_tok >= CUK_GEMV_Q8_DP4A_MIN_TOK) && x && (uintptr_t)x % 16 == 0 && work &&
        (uintptr_t)work % 16 == 0 && work_size >= cuk_gemv_dp4a_xq_bytes(w->n_in, n_tok)) {
        ai_status st = cuk_gemv_dp4a_quantize(s, w->type, x, n_tok, w->n_in, o, work, err);
        if (st != AI_OK) return st;
        return cuk_gemv_qmma_xq(s, w, work, n_tok, y, o, err);
    }
    /* a fused prologue makes each of the dp4a kernel's ~264-396 CTAs read and round all of x (the
     * down product: two rows of 14336 floats and 14336 expf); split, one small kernel does it once
     * and the CTAs copy the int8 result (header of k_gemv_dp4a.cu) */
    const int want = !o || o->swiglu_out ? 0 : o->swiglu_in ? CUK_GEMV_SPLIT_SWIGLU : o->norm_w ? CUK_GEMV_SPLIT_NORM : 0;
    if (want && (split_mask() & want) && !(o->swiglu_in && o->norm_w) && w && w->data && x && n_tok >= 1 &&
        n_tok <= CUK_GEMV_MAX_TOK && dq_pick(w, x, n_tok) && work && (uintptr_t)work % 16 == 0 &&
        work_size >= cuk_gemv_dp4a_xq_bytes(w->n_in, n_tok)) {
        ai_status st = cuk_gemv_dp4a_quantize(s, w->type, x, n_tok, w->n_in, o, work, err);
        if (st != AI_OK) return st;
        return cuk_gemv_dp4a_xq(s, w, work, n_tok, y, o, err);
    }
    return cuk_gemv_ex(s, w, x, n_tok, y, o, err);
}

extern "C" ai_status cuk_gemv(cuk_stream s, const cuk_weight *w, const float *x, int32_t n_tok, float *y, ai_err *err)
{
    return cuk_gemv_path(s, w, x, n_tok, y, 0, err);
}

extern "C" ai_status cuk_gemv_path(cuk_stream s, const cuk_weight *w, const float *x, int32_t n_tok, float *y,
                                   int path, ai_err *err)
{
    return cuk_gemv_path_ex(s, w, x, n_tok, y, path, NULL, err);
}

extern "C" ai_status cuk_gemv_ex(cuk_stream s, const cuk_weight *w, const float *x, int32_t n_tok, float *y,
                                 const cuk_mm_opts *o, ai_err *err)
{
    return cuk_gemv_path_ex(s, w, x, n_tok, y, 0, o, err);
}

extern "C" ai_status cuk_gemv_path_ex(cuk_stream s, const cuk_weight *w, const float *x, int32_t n_tok, float *y,
                                      int path, const cuk_mm_opts *o, ai_err *err)
{
    if (!w || !w->data || !x || !y || n_tok < 1 || n_tok > CUK_GEMV_MAX_TOK || w->n_out < 1 || w->n_in < 1 ||
        w->n_out > (1 << 30) || w->n_in > (1 << 30))
        return ai_err_set(err, AI_ERR_INVALID, "cuk_gemv: bad arguments (n_tok %d)", (int)n_tok);
    if (o && o->norm_w && o->swiglu_in)
        return ai_err_set(err, AI_ERR_INVALID, "cuk_gemv: norm and swiglu prologues are exclusive");
    if (o && ((o->in_ss && (o->norm_w || o->swiglu_in)) || (o->out_xn && (!o->out_nw || !o->out_ss))))
        return ai_err_set(err, AI_ERR_INVALID, "cuk_gemv: in_ss takes no prologue; out_xn needs out_nw and out_ss");
    if (o && o->swiglu_out) {
        if ((path != 0 && path != 1) || !cuk_gemv_glu_fused(w, x, n_tok, o))
            return ai_err_set(err, AI_ERR_UNSUPPORTED,
                              "cuk_gemv: the swiglu epilogue needs float weights (bf16 below %d tokens), an even n_out, "
                              "aligned rows, no prologue and no accumulate",
                              CUK_GEMV_MMA_MIN_TOK);
        launch_paired_any<FUSE_GLU>(s, w, x, n_tok, y, cuk_fuse_of(o));
        CUK_LAUNCHED(err, "cuk_gemv (swiglu epilogue)");
        return AI_OK;
    }
    if (o && o->rope_kv) {
        if ((path != 0 && path != 1) || !cuk_gemv_rope_fused(w, x, n_tok, o)) {
            ai_status st = cuk_rope_kv_check(o->rope_kv, n_tok, "cuk_gemv (rope epilogue)", err);
            return st != AI_OK ? st
                               : ai_err_set(err, AI_ERR_UNSUPPORTED,
                                            "cuk_gemv: the rope epilogue needs float weights (bf16 below %d tokens), "
                                            "q|k|v rows, even head dims, aligned rows, no prologue and no other "
                                            "epilogue", CUK_GEMV_MMA_MIN_TOK);
        }
        launch_paired_any<FUSE_ROPE>(s, w, x, n_tok, y, cuk_fuse_of(o));
        CUK_LAUNCHED(err, "cuk_gemv (rope epilogue)");
        return AI_OK;
    }
    const int m = cuk_fuse_mode(o);
    const cuk_fuse fz = cuk_fuse_of(o);
    const size_t xstride = m == FUSE_SWIGLU ? 2 * (size_t)w->n_in : (size_t)w->n_in;
    if (m == FUSE_NORM && (uintptr_t)o->norm_w % 16) /* read as float4 beside x */
        return ai_err_set(err, AI_ERR_INVALID, "cuk_gemv: norm weight not 16-byte aligned");
    const bool quant = w->type == DTYPE_Q8_0 || w->type == DTYPE_Q4_0 || w->type == DTYPE_Q4_1;
    if (quant && w->n_in % 32)
        return ai_err_set(err, AI_ERR_INVALID, "cuk_gemv: n_in %lld of %s is not a multiple of 32",
                          (long long)w->n_in, dtype_name(w->type));
    const bool vec = vec_ok(w, x);
    const bool mma_ok = w->type == DTYPE_BF16 && vec && w->n_in % 32 == 0;
    if (path == 2 && !mma_ok) return ai_err_set(err, AI_ERR_INVALID, "cuk_gemv: no tensor-core path for this weight");
    if (path == 4 && !quant) return ai_err_set(err, AI_ERR_INVALID, "cuk_gemv: no dp4a path for %s", dtype_name(w->type));
    /* quantized: int8 x + dp4a whenever x fits in shared memory (k_gemv_dp4a.cu), except q8_0 below
     * CUK_GEMV_Q8_DP4A_MIN_TOK tokens, where the float-decoding kernels stay ahead (k_gemv.h). With the
     * L2 prefetch of each warp's first rows before cuk_pdl_wait ("dq early"): q4_0 n_tok 1 wo 4.99 vs
     * 5.45 us, down 14.83 vs 15.22, the other shapes within 1% (H200, 2026-12-04, one run). */
    const bool dq_default = dq_pick(w, x, n_tok);
    if (path == 4 || (path == 0 && dq_default)) return cuk_gemv_dp4a_ex(s, w, x, n_tok, y, 0, 0, 1, o, err);
    if (path == 2 || (path == 0 && mma_ok && n_tok >= CUK_GEMV_MMA_MIN_TOK))
        return cuk_gemv_bf16_mma(s, w, x, n_tok, y, o, err);
    const bool q4 = w->type == DTYPE_Q4_0 || w->type == DTYPE_Q4_1;
    if (n_tok > 1 && (path == 3 || (path == 0 && q4 && n_tok >= CUK_GEMV_Q4_LOOP_MIN_TOK) ||
                      (quant && m != FUSE_NONE && n_tok > 2))) {
        /* one n_tok = 1 pass per token (reads W n_tok times; see CUK_GEMV_Q4_LOOP_MIN_TOK) */
        for (int32_t t = 0; t < n_tok; t++) {
            cuk_mm_opts ot = o ? *o : cuk_mm_opts{};
            if (ot.in_ss) ot.in_ss += (size_t)t * BACKEND_SS_LANES;
            if (ot.out_xn) {
                ot.out_xn += (size_t)t * w->n_out;
                ot.out_ss += (size_t)t * BACKEND_SS_LANES;
            }
            ai_status st = cuk_gemv_path_ex(s, w, x + (size_t)t * xstride, 1, y + (size_t)t * w->n_out, 1, &ot, err);
            if (st != AI_OK) return st;
        }
        return AI_OK;
    }
    cudaError_t e = cudaSuccess;
    switch (w->type) {
    case DTYPE_F32:
        if (vec) e = launch_k<W_F32>(s, w, x, n_tok, y, m, fz);
        else launch_any<W_F32>(s, w, x, n_tok, y, m, fz);
        break;
    case DTYPE_F16:
        if (vec) e = launch_k<W_F16>(s, w, x, n_tok, y, m, fz);
        else launch_any<W_F16>(s, w, x, n_tok, y, m, fz);
        break;
    case DTYPE_BF16:
        if (vec) e = launch_k<W_BF16>(s, w, x, n_tok, y, m, fz);
        else launch_any<W_BF16>(s, w, x, n_tok, y, m, fz);
        break;
    case DTYPE_Q8_0:
    case DTYPE_Q4_0:
    case DTYPE_Q4_1:
        if (!vec) return ai_err_set(err, AI_ERR_INVALID, "cuk_gemv: weights or x not 16-byte aligned");
        if (w->type == DTYPE_Q8_0) e = launch_k<W_Q8_0>(s, w, x, n_tok, y, m, fz);
        else if (w->type == DTYPE_Q4_0) e = launch_k<W_Q4_0>(s, w, x, n_tok, y, m, fz);
        else e = launch_k<W_Q4_1>(s, w, x, n_tok, y, m, fz);
        break;
    default: return ai_err_set(err, AI_ERR_UNSUPPORTED, "cuk_gemv: dtype %s", dtype_name(w->type));
    }
    CUK_TRY(err, e, "cuk_gemv (staged launch)");
    CUK_LAUNCHED(err, "cuk_gemv");
    return AI_OK;
}
