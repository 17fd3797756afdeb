/* k_gemv_dp4a.cu - decode GEMV for q8_0 / q4_0 / q4_1 weights with int8 activations and dp4a.
 *
 * Why: the float-decoding kernel (k_gemv.cu) spends ~4 instructions per 4-bit weight (mask, byte
 * permute, float subtract, FMA, plus the x loads): at the ~0.9 q4 blocks per SM per clock that HBM
 * delivers on the H200 that is over the SM's issue rate, so q4_0 streamed at only ~48% of copy
 * (bench 2026-12-02). Here a q4 block costs 8 masks/shifts + 8 dp4a + 2 shared loads + ~3 float
 * ops per token (~0.6 instruction per weight), as llama.cpp's mmvq does.
 *
 * Design:
 *  - Prologue (every CTA): x rows [0, n_tok) are rounded to int8 per 32-element block into shared
 *    memory: d = amax / 127, q = rn(x / d) (computed as rn(x * (127 / amax)), the same float ops as
 *    the test's emulated reference), plus one float2 per (token, block): {d, s} with
 *    s = -8 d sum(q) for q4_0 (the -8 offset of the nibbles folded in), s = sum(x) (float, exact x)
 *    for q4_1 (the m term), unused for q8_0. The CPU backend rounds activations the same way
 *    (llama.cpp does too); the added error is ~|x|/254 per element, ~3e-3 relative on a dot product.
 *  - Shared layout per token (tok_bytes = 1.5 n_in bytes, token t at t tok_bytes): the n_in / 32
 *    float4 {d, s, sum x, sum x^2 (FUSE_NORM)} of its blocks, then its int8 x: q4: block b's elements
 *    0..15 at [b * 16] and 16..31 at [n_in / 2 + b * 16], so lanes reading consecutive blocks read
 *    consecutive 16-byte words (no bank conflicts); q8: x as is (a q8 chunk is half a block, 16 values).
 *  - Split prologue (FUSE_XQ / FUSE_XQ_NORM, since 2026-12-04): cuk_gemv_dp4a_quantize rounds x once,
 *    in a kernel of its own (one 8-element item per thread, the same float ops), into global memory in
 *    exactly that layout; each GEMV CTA then copies its tokens with 16-byte cp.async (one L2 round
 *    trip) instead of loading f32 x and rounding it. The fused prologue repeats that work in every
 *    CTA: the down product (n_in 14336) has 264, each reading 2 x 57 KB of gate|up floats, 4 rounds
 *    of loads per thread, and 14336 expf. The CUDA backend splits the SwiGLU prologue this way
 *    (k_gemv.h cuk_gemv_ex_work); the norm prologue stays fused (split, it measured slower: below).
 *  - A warp owns R consecutive rows and walks them: lane c takes 16-byte chunks c, c + 32, ...
 *    (512 contiguous bytes per warp load, evict-first), U x R loads in flight per lane. Nibbles
 *    (byte j = element j low, j + 16 high) are masked into bytes, dp4a with the int8 x gives int32
 *    per block and token, scaled in float: q4_0 acc += d_w (d_x dot + s); q4_1 acc += d_w d_x dot +
 *    m_w s; q8_0 acc += d_w d_x dot. Warp shuffles reduce; one lane per (row, token) writes y.
 *  - Grid: persistent, min(row groups / 8 warps, CTAs resident per SM x SMs): the x prologue is paid
 *    once per CTA, not once per row group (the output matrix has 32k row groups). Device properties
 *    only (graph-capturable: invariant 2).
 *  - Tokens: one launch handles T tokens (T = 1, 2, 4, 8, 16 templated; a call with n_tok between
 *    reads x row min(t, n_tok - 1) and writes only t < n_tok) and reads W once for all of them.
 *    Shared memory is T n_in 1.25 bytes; T is capped so that it stays <= 100 KB (two CTAs per SM):
 *    n_in 4096 takes 16 tokens per pass, 14336 four (n_tok 8 on the down projection: two passes).
 *  - Rows per warp R, U loads in flight per lane and row: n_tok 1 R1U4 (R4U4 for n_in >= 8192), as
 *    measured (below); n_tok >= 2 R by n_out (R = 2 for 4096 rows: >= 2048 warps), at most 2 from
 *    T = 8 (registers). Each warp owns a contiguous, balanced share of the rows (n_out / warps, +-1):
 *    with the persistent grid, whole row groups per warp left 52 of 396 CTAs with a second round on
 *    the 14336-row matrices.
 *  - Each warp L2-prefetches its first rows before cuk_pdl_wait (cuk_gemv passes early = 1 since
 *    2026-12-04; a prefetch reads no data, so it cannot see a stale value): on an SM freed by the
 *    previous kernel's tail the weight stream starts at once, and it runs while the CTA rounds x.
 *  - q4_1 is computed centred: d_w d_x sum((nib - 8) q) + (m + 8 d_w) sum(x). The x rounding error
 *    then meets (nib - 8) d_w instead of nib d_w: half the error (the first GPU run measured 1.02e-2
 *    relative with nib d_w).
 *
 * Measured (H200, bench/bench_cuda_gemv.c, 2026-12-02, copy 4.23 TB/s, effective TB/s incl. x and y;
 * two runs, PDL on / off, spread 5-10% on the small shapes). n_tok 1, q4_0, shapes wq 4096x4096,
 * wk 1024x4096, gate 14336x4096, down 4096x14336, output 128256x4096:
 *   float-decoding kernel (before):  1.49 / 0.75 / 2.03 / 2.13 / 2.68
 *   dp4a R1U4:                       1.74 / 0.79 / 2.88 / 1.96 / 3.95   (run 2; 1.63 / 0.66 / 2.79 / 1.89 / 3.92)
 *   dp4a R4U4:                       1.73 / 0.60 / 2.86 / 2.20 / 3.99   (run 2; 1.55 / 0.52 / 2.71 / 2.11 / 4.00)
 * n_tok 4 (one pass, dp4a vs the previous one n_tok = 1 pass per token): q4_0 1.23 / 0.42 / 1.96 /
 * 1.55 / 3.34 vs 0.43 / 0.21 / 0.53 / 0.56 / 0.69; q4_1 1.34 / 0.45 / 2.06 / 1.69 / 3.45; q8_0 1.74 /
 * 0.73 / 2.66 / 2.19 / 3.90 vs the multi-token float kernel's 1.34 / 0.91 / 1.52 / 1.64 / 1.59.
 * The matrices of 9-33 MB stay at 40-70% of copy: a kernel there lasts 3-15 us, of which the x
 * prologue (an L2 round trip per 2 items per thread) and the launch/drain edges are a large share.
 * Registers (ptxas): 54-56 for R1U4 (3 CTAs of 256 per SM by __launch_bounds__), 125-128 for R4U4
 * (2 CTAs), 68-128 for the multi-token kernels; the 16-warp ones (T >= 4) at their 128-register cap spill
 * 4-72 bytes (ptxas -v, 2026-12-07; they run only where the int8 tensor-core GEMV has no kernel).
 *
 * Re-measured 2026-12-04 (H200, `bench_cuda_gemv 20 q`, copy 4.22-4.26 TB/s), n_tok 1 q4_0, us (% of
 * copy): wo 4096x4096 5.44 (40.8%), wk 1024x4096 3.03 (18.4%), q|k|v 6144x4096 7.46 (44.6%), gate|up
 * 28672x4096 19.01 (81.7%), down 4096x14336 15.22 (51.0%), output 128256x4096 76.1 (91.2%): batch-1
 * step GEMVs 1.586 ms (62.5%). With the prefetch before the wait (now the default): 4.95 / 3.07 / 7.32 /
 * 18.98 / 14.62 / 75.72 us, 1.544 ms (64.3%); q4_1 1.697 -> 1.653 ms. Tried that day and not kept (slower; the patch is not in the tree):
 *  - a "streaming" kernel: each warp walks its rows as one stream of 512-byte steps with D steps in
 *    flight per lane, refilled as used (rolling) or G at a time, the first D issued before the x
 *    prologue. gate|up: D8 rolling 28.6 us, D8 G4 30.6, D4 G2 25.3, D12 G4 36.8 vs R1U4 19.0; wo
 *    6.0-6.2 vs 5.4; output 98-157 vs 76; D16 spilled (35%). Fewer, larger bursts per warp (R1U4: a
 *    whole 2 KB row, then nothing) beat a steady trickle of 512-byte loads here.
 *  - 16 warps per CTA at n_tok 2 (instead of 8): gate|up 39.6 vs 31.5 us, output 164 vs 117.
 * n_tok 2-8 stay far below copy (gate|up n_tok 4: 38.7 us, 41%; n_tok 8: 64 us, 25%). By count (not
 * measured in isolation) the shared-memory reads bound them: per 16-byte chunk and token a lane
 * reads 48 bytes (int8 x halves + the float4 {d, s, sum x, sum x^2}), i.e. 12 of the SM's ~32 cycles
 * per 512-byte warp load at T = 1, 48 at T = 4, 96 at T = 8. Tried 2026-12-07 (H100): 4 rows per warp
 * at T = 8 sharing each x read (R4U1), 0.89x in the model step; {d, s} read as a float2 for q4_0, no
 * change. The backend's decode call (cuk_gemv_ex_work) now sends 2-16 tokens to the int8 tensor cores
 * (k_gemv_qmma.cu: 1.43x at 8 tokens) wherever that kernel exists.
 *
 * Tried 2026-12-07 (H100) and taken out: the gate|up product writing silu(g) * u and rounding it for the
 * down product itself (warps sharing gate|up row pairs, a counter per 32-block, the block's last writer
 * rounding it), to remove the rounding kernel between them. Bit-exact, but 0.91x in the q4_0 batch-1 step
 * (0.995x without PDL): docs/gpu.md, "The int8 hand-off".
 *
 * Fused variants (template M, cuk_mm_opts; k_gemv_fuse.h says why): the rmsnorm or SwiGLU of the
 * input is computed while x is loaded and the residual add is done by the thread that writes y.
 *
 * Measured 2026-12-04, second session (H200, `bench_cuda_gemv 20 step`, copy 4.238 TB/s), q4_0 n_tok 1,
 * us (% of copy, weight bytes only), wo / wk / qkv / gate|up / down / output: f32 x 4.98 (44.8%) /
 * 3.05 / 7.30 (45.8%) / 18.86 (82.6%) / 14.89 (52.4%) / 74.56 (93.5%); the same GEMV on pre-rounded x
 * (FUSE_XQ, the copy prologue) 3.96 (56.3%) / 2.19 / 6.26 (53.3%) / 17.83 (87.4%) / 12.61 (61.8%) /
 * 73.23 (95.2%): the rounding prologue costs ~1 us at n_in 4096 and 2.3 us at 14336. As the decode
 * step runs them: the down product with its SwiGLU as swiglu_rows + GEMV(+= y) 18.52 us, with the
 * SwiGLU prologue fused 19.53, split (quantize kernel + FUSE_XQ GEMV) 15.93; n_tok 4: 24.75 / 31.41 /
 * 18.68. The norm split loses (qkv 10.69 vs 8.62 fused, gate|up 20.83 vs 20.19): the extra kernel
 * boundary (~3 us) costs more than the n_in 4096 prologue. Whole step (`aiinfra bench --arch llama3-8b
 * --random-weights --dtype q4_0 --batch 1 --prompt 512 --gen 128`, two GPU runs): fuse norm,add
 * 480.8 / 484.1 / 481.0 tok/s (2.079 / 2.065 / 2.077 ms per step), with the split SwiGLU (now the
 * default) 502.9 / 500.3 / 499.0 / 499.3 (1.988 / 1.999 / 2.003 / 2.002 ms; 0.51 of the bandwidth
 * bound), norm split as well 474.7; bf16 unchanged (239.9 / 238.0 tok/s). q4_1 behaves the same
 * (down 19.29 -> 16.51 us).
 *
 * Invariants:
 *  1. A launch reads W rows [0, n_out) (the last row group re-reads row n_out - 1 for missing rows,
 *     never written), x rows [0, n_tok), writes exactly y[0..n_tok)[0..n_out). No atomics.
 *  2. The launch shape depends only on (dtype, n_out, n_in, n_tok) and the device.
 *  3. Every kernel calls cuk_pdl_wait() before touching memory and is launched by cuk_launch.
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuk_launch.h"
#include "backend/cuda/k_gemv.h"
#include "backend/cuda/k_gemv_fuse.h"

namespace {

constexpr size_t kSmemCap = (size_t)100 << 10; /* per CTA for T > 1: two CTAs per SM */
constexpr size_t kSmemMax = (size_t)220 << 10; /* T = 1 may use up to this (one CTA per SM) */
constexpr int kQU = 2;                         /* x prologue: items per thread with loads in flight */

enum QKind { Q8_0, Q4_0, Q4_1 };

/* Warps per CTA: 16 from T = 4 (the x prologue is per CTA: fewer, larger CTAs read x fewer times). */
template <int T> struct Warps { static constexpr int W = T >= 4 ? 16 : 8; };

/* Bytes of one token's rounded x in shared memory (and in a cuk_gemv_dp4a_quantize buffer): n_in / 32
 * float4 {d, s, sum x, sum x^2}, then the n_in int8 values (header: layout). A multiple of 16. */
__host__ __device__ constexpr size_t tok_bytes(int n_in) { return (size_t)(n_in / 32) * 16 + (size_t)n_in; }
__host__ __device__ constexpr size_t smem_bytes(int T, int n_in) { return (size_t)T * tok_bytes(n_in); }
/* The token tile T a call with n tokens runs (launch_k). */
constexpr int tile_of(int n) { return n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : n <= 8 ? 8 : 16; }

__device__ __forceinline__ uint32_t pack4(int a, int b, int c, int d)
{
    return (uint32_t)(a & 0xFF) | (uint32_t)(b & 0xFF) << 8 | (uint32_t)(c & 0xFF) << 16 | (uint32_t)d << 24;
}

/* The fused input (k_gemv_fuse.h) of 4 x values at src: x * norm_w (sq += x^2), or silu(g) * u with
 * u n_in floats after g (expf, as cuk_swiglu_rows: the prologue runs once per CTA, not per row). */
template <int M>
__device__ __forceinline__ float4 fused4(const float *src, const float *nw, int n_in, float &sq)
{
    const float4 a = __ldg(reinterpret_cast<const float4 *>(src));
    if constexpr (M == FUSE_NORM) {
        const float4 w = __ldg(reinterpret_cast<const float4 *>(nw));
        sq = fmaf(a.x, a.x, fmaf(a.y, a.y, fmaf(a.z, a.z, fmaf(a.w, a.w, sq))));
        return make_float4(a.x * w.x, a.y * w.y, a.z * w.z, a.w * w.w);
    } else if constexpr (M == FUSE_SWIGLU) {
        const float4 u = __ldg(reinterpret_cast<const float4 *>(src + n_in));
        return make_float4(fuse_silu_mul_acc(a.x, u.x), fuse_silu_mul_acc(a.y, u.y), fuse_silu_mul_acc(a.z, u.z),
                           fuse_silu_mul_acc(a.w, u.w));
    } else {
        (void)nw; (void)n_in; (void)sq;
        return a;
    }
}

/* Rounds one item: elements e .. e + 7 (va, vb) of a token row whose rounded form starts at tok (layout:
 * header). The 4 consecutive lanes of a 32-block reduce its amax, sum(q), sum(x) and (NORM) sum(x^2)
 * with shuffles, so every lane of the warp calls this (valid = 0: a lane with no item, it stores
 * nothing). SPLIT: the q4 layout (elements 0..15 of block b at [b * 16], 16..31 at [n_in / 2 + b * 16]),
 * else the q8_0 one (x as is). */
template <bool SPLIT, bool NORM>
__device__ __forceinline__ void round_item(const float4 va, const float4 vb, float x2, bool valid, unsigned char *tok,
                                           int e, int n_in)
{
    float amax = fmaxf(fmaxf(fmaxf(fabsf(va.x), fabsf(va.y)), fmaxf(fabsf(va.z), fabsf(va.w))),
                       fmaxf(fmaxf(fabsf(vb.x), fabsf(vb.y)), fmaxf(fabsf(vb.z), fabsf(vb.w))));
    amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 2));
    const float d = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
    const int q0 = __float2int_rn(va.x * id), q1 = __float2int_rn(va.y * id), q2 = __float2int_rn(va.z * id),
              q3 = __float2int_rn(va.w * id), q4 = __float2int_rn(vb.x * id), q5 = __float2int_rn(vb.y * id),
              q6 = __float2int_rn(vb.z * id), q7 = __float2int_rn(vb.w * id);
    int sq = ((q0 + q1) + (q2 + q3)) + ((q4 + q5) + (q6 + q7));
    float sx = ((va.x + va.y) + (va.z + va.w)) + ((vb.x + vb.y) + (vb.z + vb.w));
    sq += __shfl_xor_sync(0xFFFFFFFFu, sq, 1);
    sq += __shfl_xor_sync(0xFFFFFFFFu, sq, 2);
    sx += __shfl_xor_sync(0xFFFFFFFFu, sx, 1);
    sx += __shfl_xor_sync(0xFFFFFFFFu, sx, 2);
    if constexpr (NORM) {
        x2 += __shfl_xor_sync(0xFFFFFFFFu, x2, 1);
        x2 += __shfl_xor_sync(0xFFFFFFFFu, x2, 2);
    }
    if (valid) {
        const int nblk = n_in / 32, blk = e >> 5, off = e & 31;
        const size_t pos = SPLIT ? (size_t)(off >> 4) * (n_in / 2) + blk * 16 + (off & 15) : (size_t)e;
        *reinterpret_cast<uint2 *>(tok + (size_t)nblk * 16 + pos) =
            make_uint2(pack4(q0, q1, q2, q3), pack4(q4, q5, q6, q7));
        if (off == 0) reinterpret_cast<float4 *>(tok)[blk] = make_float4(d, -8.0f * d * (float)sq, sx, x2);
    }
}

/* x rows -> the rounded tokens [0, T) in shared memory (token t at smem + t tok_bytes; rows from
 * n_tok on repeat row n_tok - 1). 4 threads per 32-block, kQU items per thread with their loads
 * issued before any is used (the prologue is latency-bound). */
template <int K, int T, int W, int M>
__device__ __forceinline__ void quantize_x(const float *__restrict__ x, int n_tok, int n_in, unsigned char *smem,
                                           const float *__restrict__ nw)
{
    constexpr int NT = W * 32;
    const int per_tok = n_in / 8, total = T * per_tok;
    for (int i0 = 0; i0 < total; i0 += NT * kQU) { /* every lane runs every iteration (shuffles) */
        float4 a[kQU], b[kQU];
        float x2[kQU];
        int tt[kQU], ee[kQU];
#pragma unroll
        for (int k = 0; k < kQU; k++) {
            const int i = i0 + k * NT + (int)threadIdx.x;
            tt[k] = -1;
            ee[k] = 0;
            a[k] = make_float4(0, 0, 0, 0);
            b[k] = a[k];
            x2[k] = 0.0f;
            if (i < total) { /* the same for the 4 lanes of a block: total % 4 == 0 */
                tt[k] = i / per_tok;
                ee[k] = (i - tt[k] * per_tok) * 8;
                const float *src = x + (size_t)min(tt[k], n_tok - 1) * fuse_x_stride<M>(n_in) + ee[k];
                a[k] = fused4<M>(src, nw + ee[k], n_in, x2[k]);
                b[k] = fused4<M>(src + 4, nw + ee[k] + 4, n_in, x2[k]);
            }
        }
#pragma unroll
        for (int k = 0; k < kQU; k++)
            round_item<K != Q8_0, M == FUSE_NORM>(a[k], b[k], x2[k], tt[k] >= 0,
                                                  smem + (size_t)max(tt[k], 0) * tok_bytes(n_in), ee[k], n_in);
    }
}

/* Pre-rounded tokens (FUSE_XQ: cuk_gemv_dp4a_quantize's layout is the shared one) -> shared memory:
 * 16-byte cp.async copies, all issued before the one wait. Rows from n_tok on repeat row n_tok - 1. */
template <int T, int W>
__device__ __forceinline__ void copy_xq(const unsigned char *__restrict__ xq, int n_tok, int n_in, unsigned char *smem)
{
    const int n16 = (int)(tok_bytes(n_in) / 16);
    for (int t = 0; t < T; t++) {
        const uint4 *src = reinterpret_cast<const uint4 *>(xq + (size_t)min(t, n_tok - 1) * tok_bytes(n_in));
        unsigned char *dst = smem + (size_t)t * tok_bytes(n_in);
        for (int i = (int)threadIdx.x; i < n16; i += W * 32) {
            const unsigned sa = (unsigned)__cvta_generic_to_shared(dst + (size_t)i * 16);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(src + i) : "memory");
        }
    }
    asm volatile("cp.async.commit_group;\n\tcp.async.wait_all;" ::: "memory");
}

/* x rows (FUSE_NONE), x rows times nw (FUSE_NORM: the blocks' sum(x^2) kept for the GEMV's 1 / rms) or
 * gate|up rows (FUSE_SWIGLU) -> the rounded tokens, in global memory (cuk_gemv_dp4a_quantize): one item
 * per thread, each token at xq + t tok_bytes. */
template <bool SPLIT, int M>
__global__ void __launch_bounds__(128) k_quantize_x(const float *__restrict__ x, const float *__restrict__ nw,
                                                    unsigned char *__restrict__ xq, int n_tok, int n_in)
{
    cuk_pdl_wait();
    const int per_tok = n_in / 8;
    const int i = (int)blockIdx.x * 128 + (int)threadIdx.x;
    const bool valid = i < n_tok * per_tok; /* whole 4-lane blocks: per_tok % 4 == 0 */
    const int t = valid ? i / per_tok : 0, e = valid ? (i - t * per_tok) * 8 : 0;
    float4 a = make_float4(0, 0, 0, 0), b = a;
    float x2 = 0.0f;
    if (valid) {
        const float *src = x + (size_t)t * fuse_x_stride<M>(n_in) + e;
        a = fused4<M>(src, nw + e, n_in, x2);
        b = fused4<M>(src + 4, nw + e + 4, n_in, x2);
    }
    round_item<SPLIT, M == FUSE_NORM>(a, b, x2, valid, xq + (size_t)t * tok_bytes(n_in), e, n_in);
}

/* One 16-byte chunk c of R rows, all T tokens. q4_1 uses the centred form
 * d_w d_x sum((nib - 8) q) + (m + 8 d_w) sum(x): the x rounding then meets (nib - 8) d_w, about half
 * the size of nib d_w, so the error is q4_0's instead of twice it. */
template <int K, int T, int R>
__device__ __forceinline__ void dot_chunk(const uint4 (&q)[R], const uint32_t (&sc)[R], const unsigned char *smem, int c,
                                          int nblk, int n_in, float (&acc)[R][T])
{
    if constexpr (K == Q8_0) {
        float dw[R];
#pragma unroll
        for (int r = 0; r < R; r++) dw[r] = __half2float(__ushort_as_half((unsigned short)(sc[r] & 0xFFFF)));
#pragma unroll
        for (int t = 0; t < T; t++) {
            const unsigned char *tok = smem + (size_t)t * tok_bytes(n_in);
            const uint4 xv = *reinterpret_cast<const uint4 *>(tok + (size_t)nblk * 16 + c * 16);
            const float dx = reinterpret_cast<const float4 *>(tok)[c >> 1].x;
#pragma unroll
            for (int r = 0; r < R; r++) {
                int s = __dp4a((int)q[r].x, (int)xv.x, 0);
                s = __dp4a((int)q[r].y, (int)xv.y, s);
                s = __dp4a((int)q[r].z, (int)xv.z, s);
                s = __dp4a((int)q[r].w, (int)xv.w, s);
                acc[r][t] = fmaf(dw[r] * dx, (float)s, acc[r][t]);
            }
        }
    } else {
        uint32_t lo[R][4], hi[R][4];
        float dw[R], mw[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            const uint32_t v[4] = {q[r].x, q[r].y, q[r].z, q[r].w};
#pragma unroll
            for (int k = 0; k < 4; k++) {
                lo[r][k] = v[k] & 0x0F0F0F0Fu;
                hi[r][k] = (v[k] >> 4) & 0x0F0F0F0Fu;
            }
            dw[r] = __half2float(__ushort_as_half((unsigned short)(sc[r] & 0xFFFF)));
            mw[r] = K == Q4_1 ? fmaf(8.0f, dw[r], __half2float(__ushort_as_half((unsigned short)(sc[r] >> 16)))) : 0.0f;
        }
#pragma unroll
        for (int t = 0; t < T; t++) {
            const unsigned char *tok = smem + (size_t)t * tok_bytes(n_in), *xt = tok + (size_t)nblk * 16 + c * 16;
            const uint4 xl = *reinterpret_cast<const uint4 *>(xt);
            const uint4 xh = *reinterpret_cast<const uint4 *>(xt + n_in / 2);
            const float4 s4 = reinterpret_cast<const float4 *>(tok)[c];
#pragma unroll
            for (int r = 0; r < R; r++) {
                int s = __dp4a((int)lo[r][0], (int)xl.x, 0);
                s = __dp4a((int)lo[r][1], (int)xl.y, s);
                s = __dp4a((int)lo[r][2], (int)xl.z, s);
                s = __dp4a((int)lo[r][3], (int)xl.w, s);
                s = __dp4a((int)hi[r][0], (int)xh.x, s);
                s = __dp4a((int)hi[r][1], (int)xh.y, s);
                s = __dp4a((int)hi[r][2], (int)xh.z, s);
                s = __dp4a((int)hi[r][3], (int)xh.w, s);
                if constexpr (K == Q4_0) acc[r][t] = fmaf(dw[r], fmaf(s4.x, (float)s, s4.y), acc[r][t]);
                else acc[r][t] = fmaf(dw[r], fmaf(s4.x, (float)s, s4.y), fmaf(mw[r], s4.z, acc[r][t]));
            }
        }
    }
}

/* L2 prefetch of a warp's first rows (one instruction per lane per 128-byte line): the weight stream
 * starts while the CTA rounds x. */
__device__ __forceinline__ void prefetch_rows(const unsigned char *w, size_t row_bytes, int row0, int nrows, int lane)
{
    for (int r = 0; r < nrows; r++) {
        const unsigned char *p = w + (size_t)(row0 + r) * row_bytes;
        for (size_t off = (size_t)lane * 128; off < row_bytes; off += 32 * 128)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(p + off));
    }
}

/* Warp g of G (all CTAs) owns rows [n_out g / G, n_out (g + 1) / G): every SM gets the same number of
 * rows (+-1 per warp) whatever n_out is, and walks them R at a time. early: the L2 prefetch of the
 * first rows is issued before cuk_pdl_wait (it reads no data, so it cannot see a stale value; the
 * weights are not written during a decode step) - a bench variant for now. */
template <int K, int T, int R, int U, int W, int M>
__global__ void __launch_bounds__(W * 32, W == 16 ? 1 : (T == 1 && R * U <= 8) ? 3 : 2) k_gemv_dp4a(const unsigned char *__restrict__ w,
                                                                     const unsigned char *__restrict__ scales,
                                                                     const float *__restrict__ x,
                                                                     float *__restrict__ y, int n_out, int n_in,
                                                                     int n_tok, int early, cuk_fuse fz)
{
    const int nblk = n_in / 32;
    const int nc = K == Q8_0 ? n_in / 16 : nblk; /* 16-byte chunks per row */
    const size_t row_bytes = (size_t)nc * 16;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long long gw = (long long)blockIdx.x * W + warp, nw = (long long)gridDim.x * W;
    const int r_begin = (int)(n_out * gw / nw), r_end = (int)(n_out * (gw + 1) / nw);
    const int npre = min(R, r_end - r_begin);
    if (early) prefetch_rows(w, row_bytes, r_begin, npre, lane);
    cuk_pdl_wait();
    if (!early) prefetch_rows(w, row_bytes, r_begin, npre, lane);

    extern __shared__ __align__(16) unsigned char smem[];
    if constexpr (M == FUSE_XQ || M == FUSE_XQ_NORM)
        copy_xq<T, W>(reinterpret_cast<const unsigned char *>(x), n_tok, n_in, smem);
    else quantize_x<K, T, W, M>(x, n_tok, n_in, smem, fz.nw);
    __shared__ float rs[T]; /* FUSE_NORM: sum(x^2) of each token row (warp t sums row t's blocks) */
    __syncthreads();
    constexpr int MS = M == FUSE_XQ_NORM ? FUSE_NORM : M == FUSE_XQ ? FUSE_NONE : M; /* the epilogue's mode */
    if constexpr (MS == FUSE_NORM) {
        if (warp < T) { /* W >= T (Warps) */
            const float4 *xs = reinterpret_cast<const float4 *>(smem + (size_t)warp * tok_bytes(n_in));
            float v = 0.0f;
            for (int b = lane; b < nblk; b += 32) v += xs[b].w;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
            if (lane == 0) rs[warp] = v;
        }
        __syncthreads();
    }

    double ss_run = 0.0; /* the split norm (out_xn): this warp's sum of squares of token lane (lane < T) */
    /* The epilogue's inputs, loaded before each group's dot loop (k_gemv_fuse.h fuse_pre: a warp's row
     * group is one round of weight loads at n_in 4096, so loads at the store were a dependent L2 round
     * trip per group). R T <= 32: lane l stores (row r = l / T, token t = l % T) of each group, once. */
    static_assert(R * T <= 32, "one stored (row, token) per lane and group");
    const int pr = lane / T, pt = lane % T; /* the (row, token) this lane stores in each group */
    const bool pown = lane < R * T && pt < n_tok;
    const float prs = pown && fz.in_ss ? fuse_in_scale(fz, pt, n_in) : 1.0f; /* once: one token per lane */
    for (int row0 = r_begin; row0 < r_end; row0 += R) {
        const int nv = min(R, r_end - row0); /* valid rows of this group; the others load nothing */
        fuse_pre pre = {0.0f, prs, 0.0f};
        if (pown && pr < nv) {
            if (fz.acc) pre.y = y[(size_t)pt * n_out + row0 + pr];
            if (fz.out_xn) pre.nw = fz.out_nw[row0 + pr];
        }
        const uint4 *wr[R];
        int srow[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            srow[r] = row0 + min(r, nv - 1);
            wr[r] = reinterpret_cast<const uint4 *>(w + (size_t)srow[r] * row_bytes);
        }
        float acc[R][T] = {};
        for (int c0 = lane; c0 < nc; c0 += 32 * U) {
            uint4 q[U][R];
            uint32_t sc[U][R];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = c0 + u * 32;
#pragma unroll
                for (int r = 0; r < R; r++) {
                    if (c < nc && r < nv) {
                        q[u][r] = __ldcs(wr[r] + c);
                        if constexpr (K == Q4_1)
                            sc[u][r] = __ldg(reinterpret_cast<const unsigned int *>(scales) + (size_t)srow[r] * nblk + c);
                        else
                            sc[u][r] = __ldg(reinterpret_cast<const unsigned short *>(scales) + (size_t)srow[r] * nblk +
                                             (K == Q8_0 ? c >> 1 : c));
                    } else {
                        q[u][r] = make_uint4(0, 0, 0, 0);
                        sc[u][r] = 0;
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = c0 + u * 32;
                if (c < nc) dot_chunk<K, T, R>(q[u], sc[u], smem, c, nblk, n_in, acc);
            }
        }
        double q = 0.0; /* squares of this lane's store, of token lane % T (T divides 32) */
#pragma unroll
        for (int r = 0; r < R; r++) {
#pragma unroll
            for (int t = 0; t < T; t++) {
                float v = acc[r][t];
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
                if (lane == r * T + t && r < nv && t < n_tok) {
                    v = fuse_store_pre<MS, false>(fz, y, n_out, t, row0 + r, v, MS == FUSE_NORM ? rs[t] : 0.0f, n_in,
                                                  pre);
                    q += (double)v * (double)v;
                }
            }
        }
        if (fz.out_xn) ss_warp_add<T>(ss_run, q);
    }
    ss_warp_flush<T>(fz, ss_run, lane, n_tok);
}

template <int K, int T, int R, int U>
cudaError_t launch(cudaStream_t s, const cuk_weight *w, const float *x, int n_tok, float *y, int early, int m,
                   cuk_fuse f)
{
    constexpr int W = Warps<T>::W;
    static_assert(W >= T, "the FUSE_NORM row sums take one warp per token");
    void (*kern)(const unsigned char *, const unsigned char *, const float *, float *, int, int, int, int, cuk_fuse) =
        m == FUSE_NORM     ? k_gemv_dp4a<K, T, R, U, W, FUSE_NORM>
        : m == FUSE_SWIGLU ? k_gemv_dp4a<K, T, R, U, W, FUSE_SWIGLU>
        : m == FUSE_XQ     ? k_gemv_dp4a<K, T, R, U, W, FUSE_XQ>
        : m == FUSE_XQ_NORM ? k_gemv_dp4a<K, T, R, U, W, FUSE_XQ_NORM>
                           : k_gemv_dp4a<K, T, R, U, W, FUSE_NONE>;
    const int n_in = (int)w->n_in, n_out = (int)w->n_out;
    const size_t smem = smem_bytes(T, n_in);
    long long cap = 0;
    const cudaError_t e = cuk_resident_ctas(kern, W * 32, smem, &cap);
    if (e != cudaSuccess) return e;
    const long long groups = ((long long)n_out + R - 1) / R, need = (groups + W - 1) / W;
    const unsigned grid = (unsigned)(need < cap ? need : cap);
    const unsigned char *base = static_cast<const unsigned char *>(w->data);
    const unsigned char *sc = base + cuk_weight_qs_bytes(w->type, w->n_out, w->n_in);
    return cuk_launch(kern, dim3(grid), dim3(W * 32), smem, s, base, sc, x, y, n_out, n_in, n_tok, early, f);
}

/* (R, U) for T tokens: auto (R = 0) or one of the n_tok = 1 tuning pairs. */
template <int K, int T>
cudaError_t launch_t(cudaStream_t s, const cuk_weight *w, const float *x, int n_tok, float *y, int R, int U, int early,
                     int m, cuk_fuse f)
{
    if (R == 0) {
        if constexpr (T == 1) {
            /* best or within noise of the best variant on every Llama-3-8B shape in two H200 runs
             * (2026-12-02): R1U4 on n_in 4096, R4U4 on the down projection (n_in 14336) */
            R = w->n_in >= 8192 ? 4 : 1;
            U = 4;
        } else {
            R = w->n_out >= 8192 ? 4 : w->n_out >= 4096 ? 2 : 1;
            if (T >= 8 && R > 2) R = 2; /* U stays 0: the automatic U below */
        }
    }
    (void)U; /* only the T = 1 tuning pairs look at it */
    if constexpr (T == 1) {
        if (R == 1 && U == 4) return launch<K, T, 1, 4>(s, w, x, n_tok, y, early, m, f);
        if (R == 2 && U == 8) return launch<K, T, 2, 8>(s, w, x, n_tok, y, early, m, f);
        if (R == 4 && U == 4) return launch<K, T, 4, 4>(s, w, x, n_tok, y, early, m, f);
    }
    if constexpr (T >= 8) {
        if (R == 1) return launch<K, T, 1, 4>(s, w, x, n_tok, y, early, m, f);
        return launch<K, T, 2, 2>(s, w, x, n_tok, y, early, m, f);
    } else {
        if (R == 1) return launch<K, T, 1, 8>(s, w, x, n_tok, y, early, m, f);
        if (R == 2) return launch<K, T, 2, 4>(s, w, x, n_tok, y, early, m, f);
        return launch<K, T, 4, 2>(s, w, x, n_tok, y, early, m, f);
    }
}

template <int K>
cudaError_t launch_k(cudaStream_t s, const cuk_weight *w, const float *x, int n_tok, float *y, int R, int U, int early,
                     int m, cuk_fuse f)
{
    if (n_tok == 1) return launch_t<K, 1>(s, w, x, n_tok, y, R, U, early, m, f);
    if (n_tok == 2) return launch_t<K, 2>(s, w, x, n_tok, y, R, U, early, m, f);
    if (n_tok <= 4) return launch_t<K, 4>(s, w, x, n_tok, y, R, U, early, m, f);
    if (n_tok <= 8) return launch_t<K, 8>(s, w, x, n_tok, y, R, U, early, m, f);
    return launch_t<K, 16>(s, w, x, n_tok, y, R, U, early, m, f);
}

/* One launch per pass of at most cuk_gemv_dp4a_max_tok tokens; x rows are x_stride bytes apart. */
ai_status run_passes(cuk_stream s, const cuk_weight *w, const float *x, size_t x_stride, int32_t n_tok, float *y,
                     int rows, int unroll, int early, int m, cuk_fuse f, ai_err *err)
{
    const int tmax = cuk_gemv_dp4a_max_tok(w->n_in);
    cudaStream_t cs = (cudaStream_t)s;
    for (int32_t t0 = 0; t0 < n_tok; t0 += tmax) {
        const int cnt = n_tok - t0 < tmax ? n_tok - t0 : tmax;
        const float *xp = reinterpret_cast<const float *>(reinterpret_cast<const unsigned char *>(x) + (size_t)t0 * x_stride);
        float *yp = y + (size_t)t0 * (size_t)w->n_out;
        cuk_fuse fp = f; /* the split norm's per-token rows move with the pass */
        if (fp.in_ss) fp.in_ss += (size_t)t0 * BACKEND_SS_LANES;
        if (fp.out_xn) {
            fp.out_xn += (size_t)t0 * (size_t)w->n_out;
            fp.out_ss += (size_t)t0 * BACKEND_SS_LANES;
        }
        cudaError_t e;
        if (w->type == DTYPE_Q8_0) e = launch_k<Q8_0>(cs, w, xp, cnt, yp, rows, unroll, early != 0, m, fp);
        else if (w->type == DTYPE_Q4_0) e = launch_k<Q4_0>(cs, w, xp, cnt, yp, rows, unroll, early != 0, m, fp);
        else e = launch_k<Q4_1>(cs, w, xp, cnt, yp, rows, unroll, early != 0, m, fp);
        if (e == cudaSuccess) e = cudaGetLastError();
        if (e != cudaSuccess)
            return ai_err_set(err, AI_ERR_RUNTIME, "cuk_gemv_dp4a (%s %lld x %lld, %d tokens, mode %d, %zu B shared): %s (%s)",
                              dtype_name(w->type), (long long)w->n_out, (long long)w->n_in, cnt, m,
                              smem_bytes(tile_of(cnt), (int)w->n_in), cudaGetErrorString(e), cudaGetErrorName(e));
    }
    return AI_OK;
}

} // namespace

extern "C" int cuk_gemv_dp4a_max_tok(int64_t n_in)
{
    if (n_in < 32 || n_in % 32 || n_in > (1 << 30)) return 0;
    for (int t = 16; t >= 2; t /= 2)
        if (smem_bytes(t, (int)n_in) <= kSmemCap) return t;
    return smem_bytes(1, (int)n_in) <= kSmemMax ? 1 : 0;
}

extern "C" ai_status cuk_gemv_dp4a(cuk_stream s, const cuk_weight *w, const float *x, int32_t n_tok, float *y,
                                   int rows, int unroll, int early, ai_err *err)
{
    return cuk_gemv_dp4a_ex(s, w, x, n_tok, y, rows, unroll, early, NULL, err);
}

extern "C" ai_status cuk_gemv_dp4a_ex(cuk_stream s, const cuk_weight *w, const float *x, int32_t n_tok, float *y,
                                      int rows, int unroll, int early, const cuk_mm_opts *o, ai_err *err)
{
    if (!w || !w->data || !x || !y || n_tok < 1 || n_tok > CUK_GEMV_MAX_TOK || w->n_out < 1 || w->n_out > (1 << 30) ||
        (w->type != DTYPE_Q8_0 && w->type != DTYPE_Q4_0 && w->type != DTYPE_Q4_1) || (uintptr_t)w->data % 16 ||
        (uintptr_t)x % 16 || (o && o->norm_w && (o->swiglu_in || (uintptr_t)o->norm_w % 16)))
        return ai_err_set(err, AI_ERR_INVALID, "cuk_gemv_dp4a: bad arguments");
    const int m = cuk_fuse_mode(o);
    const cuk_fuse f = cuk_fuse_of(o);
    const size_t xstride = m == FUSE_SWIGLU ? 2 * (size_t)w->n_in : (size_t)w->n_in;
    const int tmax = cuk_gemv_dp4a_max_tok(w->n_in);
    if (tmax < 1)
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "cuk_gemv_dp4a: n_in %lld (x does not fit in shared memory)",
                          (long long)w->n_in);
    const bool pair_ok = (rows == 0 && unroll == 0) ||
                         (n_tok == 1 && ((rows == 1 && (unroll == 4 || unroll == 8)) ||
                                         (rows == 2 && (unroll == 4 || unroll == 8)) ||
                                         (rows == 4 && (unroll == 2 || unroll == 4))));
    if (!pair_ok) return ai_err_set(err, AI_ERR_INVALID, "cuk_gemv_dp4a: no kernel for R %d U %d", rows, unroll);
    return run_passes(s, w, x, xstride * sizeof(float), n_tok, y, rows, unroll, early, m, f, err);
}

extern "C" size_t cuk_gemv_dp4a_xq_bytes(int64_t n_in, int32_t n_tok)
{
    if (n_in < 32 || n_in % 32 || n_in > (1 << 30) || n_tok < 1) return 0;
    return (size_t)n_tok * tok_bytes((int)n_in);
}

extern "C" ai_status cuk_gemv_dp4a_quantize(cuk_stream s, dtype t, const float *x, int32_t n_tok, int64_t n_in,
                                            const cuk_mm_opts *o, void *xq, ai_err *err)
{
    if (!x || !xq || n_tok < 1 || n_tok > (1 << 20) || n_in < 32 || n_in % 32 || n_in > (1 << 24) ||
        (t != DTYPE_Q8_0 && t != DTYPE_Q4_0 && t != DTYPE_Q4_1) || (uintptr_t)x % 16 || (uintptr_t)xq % 16 ||
        (o && o->norm_w && (o->swiglu_in || (uintptr_t)o->norm_w % 16)))
        return ai_err_set(err, AI_ERR_INVALID, "cuk_gemv_dp4a_quantize: bad arguments");
    const int m = cuk_fuse_mode(o);
    const long long items = (long long)n_tok * (n_in / 8);
    const dim3 grid((unsigned)((items + 127) / 128)), block(128);
    const int ni = (int)n_in, nt = (int)n_tok;
    const float *nw = o ? o->norm_w : nullptr;
    unsigned char *q = static_cast<unsigned char *>(xq);
    cudaStream_t cs = (cudaStream_t)s;
    cudaError_t e;
    if (t == DTYPE_Q8_0)
        e = m == FUSE_NORM     ? cuk_launch(k_quantize_x<false, FUSE_NORM>, grid, block, 0, cs, x, nw, q, nt, ni)
            : m == FUSE_SWIGLU ? cuk_launch(k_quantize_x<false, FUSE_SWIGLU>, grid, block, 0, cs, x, nw, q, nt, ni)
                               : cuk_launch(k_quantize_x<false, FUSE_NONE>, grid, block, 0, cs, x, nw, q, nt, ni);
    else
        e = m == FUSE_NORM     ? cuk_launch(k_quantize_x<true, FUSE_NORM>, grid, block, 0, cs, x, nw, q, nt, ni)
            : m == FUSE_SWIGLU ? cuk_launch(k_quantize_x<true, FUSE_SWIGLU>, grid, block, 0, cs, x, nw, q, nt, ni)
                               : cuk_launch(k_quantize_x<true, FUSE_NONE>, grid, block, 0, cs, x, nw, q, nt, ni);
    CUK_TRY(err, e, "cuk_gemv_dp4a_quantize");
    CUK_LAUNCHED(err, "cuk_gemv_dp4a_quantize");
    return AI_OK;
}

extern "C" ai_status cuk_gemv_dp4a_xq(cuk_stream s, const cuk_weight *w, const void *xq, int32_t n_tok, float *y,
                                      const cuk_mm_opts *o, ai_err *err)
{
    if (!w || !w->data || !xq || !y || n_tok < 1 || n_tok > CUK_GEMV_MAX_TOK || w->n_out < 1 || w->n_out > (1 << 30) ||
        (w->type != DTYPE_Q8_0 && w->type != DTYPE_Q4_0 && w->type != DTYPE_Q4_1) || (uintptr_t)w->data % 16 ||
        (uintptr_t)xq % 16)
        return ai_err_set(err, AI_ERR_INVALID, "cuk_gemv_dp4a_xq: bad arguments");
    if (cuk_gemv_dp4a_max_tok(w->n_in) < 1)
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "cuk_gemv_dp4a_xq: n_in %lld (x does not fit in shared memory)",
                          (long long)w->n_in);
    return run_passes(s, w, static_cast<const float *>(xq), tok_bytes((int)w->n_in), n_tok, y, 0, 0, 1,
                      o && o->norm_w ? FUSE_XQ_NORM : FUSE_XQ, cuk_fuse_of(o), err);
}
