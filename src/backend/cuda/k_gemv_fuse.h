/* k_gemv_fuse.h - the fused prologue / epilogue of the decode GEMVs (k_gemv.cu, k_gemv_mma.cu,
 * k_gemv_dp4a.cu), device side. cuk_mm_opts (cuda_kernels.h) states the semantics.
 *
 * Why: at batch 1 the GEMVs already stream W near copy bandwidth; the kernels between them
 * (add + rmsnorm, swiglu_rows) move a few KB each and cost their launch + ramp latency (~2-3 us).
 * Folding them into the GEMV removes 3 launches per layer; the extra work lands on x, which is tiny
 * and L1/L2-resident, and on a few instructions per x element:
 *  - norm (M = FUSE_NORM): input = x * w * r with r = 1 / sqrt(mean(x^2) + eps) one number per token
 *    row, so the kernel takes x * w while loading x, sums x^2 from the same loads (each (token,
 *    column) is loaded by exactly one thread of a CTA, so the CTA's sum is the row's sum) and
 *    multiplies its finished dot products by r. No second pass over x, no grid-wide sync.
 *    Where x is read per row (the float GEMVs) doing this per load doubled the L1 traffic and cost
 *    more than the launch it saved; those kernels now stage x * w once per CTA in shared memory
 *    (k_gemv.cu, XS_* below).
 *  - swiglu (M = FUSE_SWIGLU): x rows are gate|up (2 n_in wide); input = silu(g) * u per element as
 *    it is loaded. That costs an exp and a division (2 MUFU ops on the float kernels) per x element
 *    and CTA: the kernels that reuse each x element over few weight rows take more rows per CTA in
 *    this mode (k_gemv.cu Shape), so that the MUFU rate (16 / clock / SM) stays under the weight rate.
 *  - accumulate (f.acc): y = y + dot, by the one thread that writes that element (no atomics).
 *  - the split norm (f.in_ss, f.out_xn; any mode, in fuse_store; docs/gpu.md): the product that
 *    finishes x also writes x * w and adds x^2 to a token's BACKEND_SS_LANES doubles (atomics, one per
 *    warp and token where the kernel pre-reduces: ss_warp_add, spread over the lanes: ss_add), and the
 *    product that reads x * w multiplies its results by 1 / rms: the norm costs no kernel and no prologue.
 * Every fused kernel still calls cuk_pdl_wait() before reading x, norm_w or y.
 */
#ifndef AIINFRA_CUDA_K_GEMV_FUSE_H
#define AIINFRA_CUDA_K_GEMV_FUSE_H

#include <cuda_runtime.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuk_rope.cuh"

/* FUSE_XQ, FUSE_XQ_NORM (k_gemv_dp4a.cu only): x is already rounded to int8 by cuk_gemv_dp4a_quantize
 * (the SwiGLU or the norm's x * norm_w, done there in a kernel of its own); the epilogue is FUSE_NONE's,
 * or FUSE_NORM's (1 / rms from the blocks' sum(x^2) in the rounded x). */
/* FUSE_GLU (k_gemv.cu, float weights): no prologue; the epilogue is the SwiGLU (swiglu_out): W is gate|up
 * stacked and a CTA owns rows i of both halves, so the thread that has both dot products writes
 * silu(gate) * up (one (n_tok, n_out / 2) output, no separate swiglu_rows kernel). */
/* FUSE_ROPE (k_gemv.cu, float weights): no prologue; the epilogue is rope_store's (backend_mm_opts.rope_kv):
 * W is q|k|v stacked and a CTA owns pairs of rows - the two rows a rope pair rotates together (rope_pair),
 * so the thread that has both dot products rotates them and writes y and the KV cache (no rope_store
 * kernel). */
enum { FUSE_NONE = 0, FUSE_NORM = 1, FUSE_SWIGLU = 2, FUSE_XQ = 3, FUSE_XQ_NORM = 4, FUSE_GLU = 5, FUSE_ROPE = 6 };

/* By-value kernel argument (graph-capturable: pointers and scalars only). */
struct cuk_fuse {
    const float *nw; /* (n_in) norm weight (FUSE_NORM) */
    float eps;
    int acc;         /* y += */
    /* the split rmsnorm (backend_mm_opts.in_ss / out_*; any mode, applied in fuse_store): */
    const double *in_ss; /* (n_tok, BACKEND_SS_LANES): scale each output by 1 / sqrt(sum of t's lanes / n_in + eps) */
    float *out_xn;       /* (n_tok, n_out): final y * out_nw ... */
    const float *out_nw;
    double *out_ss;      /* ... and final y^2 added to one of token t's lanes (ss_add) */
    /* FUSE_ROPE: the rope + KV store (backend_mm_opts.rope_kv), by value; theta_scale from the host's powf */
    cuk_rope_kv rk;
    float theta_scale;
    int kvs; /* KVS_* of rk.kv_type */
};

/* M of an options struct; FUSE_NONE for NULL. */
static inline int cuk_fuse_mode(const cuk_mm_opts *o)
{
    return !o ? FUSE_NONE : o->norm_w ? FUSE_NORM : o->swiglu_in ? FUSE_SWIGLU : FUSE_NONE;
}

static inline cuk_fuse cuk_fuse_of(const cuk_mm_opts *o)
{
    cuk_fuse f;
    f.nw = o ? o->norm_w : nullptr;
    f.eps = o ? o->eps : 0.0f;
    f.acc = o && o->accumulate;
    f.in_ss = o ? o->in_ss : nullptr;
    f.out_xn = o ? o->out_xn : nullptr;
    f.out_nw = o ? o->out_nw : nullptr;
    f.out_ss = o ? o->out_ss : nullptr;
    f.rk = o && o->rope_kv ? *o->rope_kv : cuk_rope_kv{};
    f.theta_scale = o && o->rope_kv ? rope_theta_scale(f.rk.base, f.rk.rope_dim) : 0.0f;
    f.kvs = kvs_of(f.rk.kv_type);
    return f;
}

/* Floats between consecutive x rows in mode M. */
template <int M> __host__ __device__ __forceinline__ size_t fuse_x_stride(int n_in)
{
    return M == FUSE_SWIGLU ? 2 * (size_t)n_in : (size_t)n_in;
}

/* silu(g) * u with the fast exp and division (the float GEMVs' per-load prologue) ... */
__device__ __forceinline__ float fuse_silu_mul(float g, float u) { return __fdividef(g, 1.0f + __expf(-g)) * u; }
/* ... and with expf and a true division: swiglu_rows' formula, used wherever a result must match it
 * (the staged and dp4a prologues, the FUSE_GLU epilogue, k_elementwise.cu, gemm.cu). */
__device__ __forceinline__ float fuse_silu_mul_acc(float g, float u) { return g / (1.0f + expf(-g)) * u; }

/* Where a GEMV's dot loop reads x (k_gemv.cu): XS_GLOBAL: the caller's rows through L1 (__ldg);
 * XS_SMEM: a (T, n_in) copy of the fused input in shared memory, element order unchanged (f32
 * weights: a lane reads 4 consecutive floats per chunk, conflict-free); XS_SMEM8: the same, each
 * row split in halves for 8-value chunks (f16/bf16): elements 8j..8j+3 at [4j], 8j+4..8j+7 at
 * [n_in / 2 + 4j], so the 32 lanes of a warp read 512 contiguous bytes per float4 load instead
 * of 1 KB with a 2-way bank conflict. */
enum { XS_GLOBAL = 0, XS_SMEM = 1, XS_SMEM8 = 2 };

/* Index in a staged row of element e (e % 4 == 0) for source S. */
template <int S> __host__ __device__ __forceinline__ int xs_index(int e, int n_in)
{
    if constexpr (S == XS_SMEM8) return ((e >> 3) << 2) + ((e & 4) ? (n_in >> 1) : 0);
    else return e;
}

/* Columns e .. e + 3 of x row xr (in source S's layout). */
template <int S> __device__ __forceinline__ float4 ld_x4(const float *xr, int e, int n_in)
{
    if constexpr (S == XS_GLOBAL) return __ldg(reinterpret_cast<const float4 *>(xr + e));
    else return *reinterpret_cast<const float4 *>(xr + xs_index<S>(e, n_in));
}

/* Columns e .. e + 3 of x row xr in mode M; nw4: norm_w at e (FUSE_NORM); ss += x^2 (FUSE_NORM).
 * A staged source (S != XS_GLOBAL) holds the finished input: M is then FUSE_NONE. */
template <int M, int S = XS_GLOBAL>
__device__ __forceinline__ float4 fuse_x4(const float *xr, int n_in, int e, const float4 &nw4, float &ss)
{
    static_assert(S == XS_GLOBAL || M == FUSE_NONE, "a staged x is already the fused input");
    const float4 a = ld_x4<S>(xr, e, n_in);
    if constexpr (M == FUSE_NORM) {
        ss = fmaf(a.x, a.x, fmaf(a.y, a.y, fmaf(a.z, a.z, fmaf(a.w, a.w, ss))));
        return make_float4(a.x * nw4.x, a.y * nw4.y, a.z * nw4.z, a.w * nw4.w);
    } else if constexpr (M == FUSE_SWIGLU) {
        const float4 u = __ldg(reinterpret_cast<const float4 *>(xr + n_in + e));
        return make_float4(fuse_silu_mul(a.x, u.x), fuse_silu_mul(a.y, u.y), fuse_silu_mul(a.z, u.z),
                           fuse_silu_mul(a.w, u.w));
    } else {
        (void)n_in; (void)nw4; (void)ss;
        return a;
    }
}

template <int M> __device__ __forceinline__ float4 fuse_nw4(const cuk_fuse &f, int e)
{
    if constexpr (M == FUSE_NORM) return __ldg(reinterpret_cast<const float4 *>(f.nw + e));
    else return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

/* 1 / rms of token row t from the split norm's sum of squares (f.in_ss: the sum of t's lanes, added in
 * lane order). 16 independent 16-byte loads: a kernel calls this once per thread (or warp) and token,
 * not per output (fuse_rs_table). */
__device__ __forceinline__ float fuse_in_scale(const cuk_fuse &f, int t, int n_in)
{
    static_assert(BACKEND_SS_LANES % 2 == 0, "lanes in pairs");
    const double2 *l = reinterpret_cast<const double2 *>(f.in_ss + (size_t)t * BACKEND_SS_LANES);
    double2 v[BACKEND_SS_LANES / 2];
#pragma unroll
    for (int i = 0; i < BACKEND_SS_LANES / 2; i++) v[i] = l[i];
    double s = 0.0;
#pragma unroll
    for (int i = 0; i < BACKEND_SS_LANES / 2; i++) s += v[i].x + v[i].y;
    return 1.0f / sqrtf((float)(s / (double)n_in) + f.eps);
}

/* rs[t] = fuse_in_scale of tokens t < min(T, n_tok) (1 without in_ss), by warp 0 with one lane per token;
 * the caller syncs the CTA before reading rs. For the kernels whose threads store outputs of many tokens
 * (the tensor-core GEMV, the skinny GEMM). */
template <int T> __device__ __forceinline__ void fuse_rs_table(const cuk_fuse &f, int n_tok, int n_in, float *rs)
{
    static_assert(T <= 32, "one lane per token");
    if (threadIdx.x < T) rs[threadIdx.x] = f.in_ss && (int)threadIdx.x < n_tok ? fuse_in_scale(f, threadIdx.x, n_in) : 1.0f;
}

/* The lane of out_ss a warp adds its sums to: why lanes - same-address double atomics serialise in L2
 * (~1.3 ns each on the H100: 4096 warps adding to one address at the end of a persistent GEMV cost 5.3
 * us, measured 2026-12-07), so the warps of a product spread theirs over BACKEND_SS_LANES addresses. */
__device__ __forceinline__ int ss_lane() { return (int)((blockIdx.x + (threadIdx.x >> 5)) % BACKEND_SS_LANES); }

/* Token t's sum of squares += q (one of its lanes). */
__device__ __forceinline__ void ss_add(const cuk_fuse &f, int t, double q)
{
    atomicAdd(f.out_ss + (size_t)t * BACKEND_SS_LANES + ss_lane(), q);
}

/* The epilogue's inputs that do not depend on the dot product: y[t][row] (accumulate), the split norm's
 * 1 / rms of token t (in_ss) and its norm weight out_nw[row] (out_xn). Why: where a CTA's life is one
 * round of weight loads (the float GEMVs at one token: one row of 8 KB per CTA), loading these after
 * the reduction added up to three dependent L2 round trips to each CTA - fewer bytes in flight per SM.
 * fuse_pre_load issues them before the dot loop (after cuk_pdl_wait: in_ss and y are the previous
 * kernels' outputs); out of range (row, t) loads nothing. */
struct fuse_pre {
    float y, rs, nw;
};

__device__ __forceinline__ fuse_pre fuse_pre_load(const cuk_fuse &f, const float *y, int n_out, int t, int row,
                                                  int n_tok, int n_in)
{
    fuse_pre p = {0.0f, 1.0f, 0.0f};
    if (t >= n_tok || row >= n_out) return p;
    if (f.acc) p.y = y[(size_t)t * n_out + row];
    if (f.in_ss) p.rs = fuse_in_scale(f, t, n_in);
    if (f.out_xn) p.nw = f.out_nw[row];
    return p;
}

/* Writes y[t][row] from one finished dot product v of token row t, whose sum of squares is ss
 * (FUSE_NORM); then the split norm's outputs for the element (f.out_xn). p: fuse_pre_load's values
 * for (t, row). Returns the value written.
 * kSsAtomic: y^2 added to out_ss here, one double atomic per output (the kernels that hold one output per
 * CTA); the GEMVs that own many outputs per warp pass false, sum the squares of the values it returns
 * per token across lanes (ss_lanes_sum, ss_warp_add, ss_group_flush) and add them once per warp or lane group. */
template <int M, bool kSsAtomic = true>
__device__ __forceinline__ float fuse_store_pre(const cuk_fuse &f, float *y, int n_out, int t, int row, float v,
                                                float ss, int n_in, const fuse_pre &p)
{
    if constexpr (M == FUSE_NORM) v *= 1.0f / sqrtf(ss / (float)n_in + f.eps);
    if (f.in_ss) v *= p.rs;
    if (f.acc) v += p.y;
    y[(size_t)t * n_out + row] = v;
    if (f.out_xn) {
        f.out_xn[(size_t)t * n_out + row] = v * p.nw;
        if constexpr (kSsAtomic) ss_add(f, t, (double)v * (double)v);
    }
    return v;
}

/* fuse_store_pre with the loads at the store (the kernels whose CTAs stream long enough to hide them);
 * rs: token t's 1 / rms (fuse_in_scale, fuse_rs_table; unused without in_ss). */
template <int M, bool kSsAtomic = true>
__device__ __forceinline__ float fuse_store(const cuk_fuse &f, float *y, int n_out, int t, int row, float v, float ss,
                                            int n_in, float rs)
{
    const fuse_pre p = {f.acc ? y[(size_t)t * n_out + row] : 0.0f, rs, f.out_xn ? f.out_nw[row] : 0.0f};
    return fuse_store_pre<M, kSsAtomic>(f, y, n_out, t, row, v, ss, n_in, p);
}

/* The split norm's pre-reduced sum of squares. Why: out_ss[t] is one address per token, and same-address
 * atomics serialise in L2 - 4096 per product and token (n_out), so at 2-4 tokens the atomics outlasted
 * the weight stream. The kernels that store many outputs per warp sum their squares per token across
 * lanes first and add each warp's (or lane group's) sum once.
 * ss_lanes_sum: the sum of q over the lanes congruent to this one mod P (P a power of 2 up to 32).
 * Warp-uniform call (all 32 lanes). */
template <int P> __device__ __forceinline__ double ss_lanes_sum(double q)
{
    static_assert(P >= 1 && P <= 32 && (P & (P - 1)) == 0, "P a power of 2");
#pragma unroll
    for (int o = 16; o >= P; o >>= 1) q += __shfl_xor_sync(0xFFFFFFFFu, q, o);
    return q;
}

/* Lane l of a warp holds q, the squares of its stored values, all of token l % T (the GEMVs' stores go
 * to lane (r T + t) % 32); run (lanes < T) accumulates the warp's sum for token l. Warp-uniform. */
template <int T> __device__ __forceinline__ void ss_warp_add(double &run, double q) { run += ss_lanes_sum<T>(q); }

/* ss_warp_add's sum: added to out_ss once per warp and token: n_out / (rows per warp) atomics instead of n_out. */
template <int T> __device__ __forceinline__ void ss_warp_flush(const cuk_fuse &f, double run, int lane, int n_tok)
{
    if (f.out_xn && lane < T && lane < n_tok) ss_add(f, lane, run);
}

/* Lanes in aligned groups of G (a power of 2 up to 32) hold the squares q of stored values of one token
 * t each: adds each group's sum to out_ss[t] once. Warp-uniform call. */
template <int G> __device__ __forceinline__ void ss_group_flush(const cuk_fuse &f, double q, int t, int n_tok)
{
    static_assert(G >= 1 && G <= 32 && (G & (G - 1)) == 0, "G a power of 2");
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1) q += __shfl_xor_sync(0xFFFFFFFFu, q, o);
    if ((threadIdx.x & (G - 1)) == 0 && t < n_tok) ss_add(f, t, q);
}

/* FUSE_ROPE: rows (x, y) of pair p of a q|k|v product; *rot = the pair's rope frequency index, or -1 for
 * a pair that is not rotated. Pairs 0 .. (n_head + n_head_kv) head_dim / 2 - 1 are q and k heads in
 * order, head_dim / 2 per head: pair j < rope_dim / 2 is what rope rotates ((j, j + rope_dim / 2) with
 * neox, else (2j, 2j + 1)), the others are dims (2j, 2j + 1), not rotated. The v rows follow, in
 * consecutive pairs: since q|k take 2 qk rows, pair p >= qk is rows (2p, 2p + 1). */
__device__ __forceinline__ int2 rope_pair(const cuk_rope_kv &rk, int p, int *rot)
{
    const int hh = rk.head_dim / 2, half = rk.rope_dim / 2, qk = (rk.n_head + rk.n_head_kv) * hh;
    *rot = -1;
    if (p >= qk) return make_int2(2 * p, 2 * p + 1);
    const int h = p / hh, j = p - h * hh, base = h * rk.head_dim;
    if (j >= half || !rk.neox) {
        if (j < half) *rot = j;
        return make_int2(base + 2 * j, base + 2 * j + 1);
    }
    *rot = j;
    return make_int2(base + j, base + j + half);
}

/* FUSE_ROPE's store of pair p of token t from its two finished dot products (a, b): rotated as
 * rope_store rotates, written to y and, for k and v rows of a token with a slot, to the cache. */
__device__ __forceinline__ void rope_pair_store(const cuk_fuse &f, float *y, int n_out, int t, int p, float a, float b)
{
    const cuk_rope_kv &rk = f.rk;
    int i;
    const int2 rr = rope_pair(rk, p, &i);
    if (i >= 0) {
        float c, s;
        rope_angle((float)rk.pos[t], i, f.theta_scale, rk.freq_scale, rk.factors, &c, &s);
        rope_rotate(a, b, c, s);
    }
    float *yr = y + (size_t)t * n_out;
    yr[rr.x] = a;
    yr[rr.y] = b;
    const int qd = rk.n_head * rk.head_dim, kvd = rk.n_head_kv * rk.head_dim, sl = rk.slot[t];
    if (sl < 0 || rr.x < qd) return;
    if (rr.x < qd + kvd) { /* a pair never straddles heads or the k | v boundary */
        const int64_t o = (int64_t)sl * kvd - qd;
        kv_put_any(f.kvs, rk.k_cache, o + rr.x, a, rk.k_scale);
        kv_put_any(f.kvs, rk.k_cache, o + rr.y, b, rk.k_scale);
    } else {
        const int64_t o = (int64_t)sl * rk.n_head_kv * rk.head_dim_v - qd - kvd;
        kv_put_any(f.kvs, rk.v_cache, o + rr.x, a, rk.v_scale);
        kv_put_any(f.kvs, rk.v_cache, o + rr.y, b, rk.v_scale);
    }
}

#endif
