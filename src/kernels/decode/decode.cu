/* decode.cu - the decode-attention ladder over a paged f16 KV cache (layout: decode.h).
 *
 * Decode attention reads every K and V byte of every sequence once per generated token and does
 * about one multiply-add per byte read: it is memory-bound, and the ceiling is the copy bandwidth
 * measured in the same run (src/kernels/ladder.c). Each step below removes one reason the naive
 * version cannot reach it:
 *
 *   v1 one CTA per (sequence, query head) walks the whole context: 4 warps, each warp takes 4 keys
 *      at a time (a lane loads 8 bytes of each K and V row: 256-byte coalesced rows), online softmax
 *      in fp32, the 4 warps merge in shared memory. Only n_seq * n_head CTAs: at batch 1 that is 32
 *      CTAs on 132 SMs, each with a few KB in flight, so most of HBM's bandwidth is idle; and the
 *      G = n_head / n_kv query heads of a group read the same K/V rows G times (from L2 if lucky).
 *   v2 split-KV (flash-decoding): the context is cut into DECODE_SPLIT_KEYS-key splits, one CTA per
 *      (split, query head, sequence); each writes a partial (max, sum, unnormalised o) and a second
 *      kernel merges them. Batch 1 x 32k now launches 64 x 32 CTAs: every SM streams.
 *   v3 GQA-packed: one CTA per (split, kv head, sequence) serves all G query heads of its group, so
 *      each K/V row is loaded once and used G times from registers: G x less traffic into the SMs
 *      (and from L2), G x fewer CTAs doing the same loads.
 *   v4 the backend's kernel (k_attn_decode.cu, called through cuk_attention: no second copy): v3's
 *      packing on tensor cores (mma.sync m16n8k16, the GQA group as the 16 MMA rows: ~5x fewer
 *      instructions per key than fp32 dots), a 3-stage ring of 16-key tiles per warp filled by bulk
 *      (TMA) copies of whole 256-byte rows on mbarriers (128 KB in flight per SM at d 128), a split count planned from the SM count and occupancy
 *      (no split when the pairs fill the GPU), and the merge done inside the same kernel by the
 *      last CTA of each group (no second launch).
 *
 * Scores are kept in the log2 domain (q pre-scaled by scale * log2 e; exp2f). Invariants: 1. a warp
 * only processes a 4-key step whose first key is valid, so its running max is finite afterwards and
 * exp2f(m_old - m_new) never sees inf - inf; 2. keys at or beyond the split end / seq_len are never
 * loaded (score -inf, value 0); 3. merges run in a fixed order (deterministic).
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.h"
#include "kernels/decode/decode.h"

#define DEC_WARPS 4
#define DEC_KPW 4 /* keys per warp per step */
#define DEC_LOG2E 1.4426950408889634f

// ---- the shared per-CTA body ---------------------------------------------------------------------

template <int D, int G> struct dec_cta_smem {
    float part[DEC_WARPS][G][D + 4]; /* per warp: m, l, pad, pad, o[D] */
    float res[G][D + 4];             /* the CTA's merged M, L, pad, pad, o[D] */
};

/* The lane's DPL = D / 32 contiguous dims of an f16 row, as floats. */
template <int DPL> static __device__ __forceinline__ void dec_load_row(const __half *row, int lane, float (&v)[DPL])
{
    if constexpr (DPL == 4) {
        const uint2 r = __ldg((const uint2 *)(row + lane * 4));
        const float2 a = __half22float2(*(const __half2 *)&r.x), b = __half22float2(*(const __half2 *)&r.y);
        v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y;
    } else {
        const float2 a = __half22float2(__ldg((const __half2 *)(row + lane * 2)));
        v[0] = a.x; v[1] = a.y;
    }
}

/* Keys [k0, k1) (k0 < k1) of sequence s for the ng <= G query heads h0 .. h0 + ng - 1, all on kv
 * head kvh. Leaves in sm.res[g] the CTA's M (log2 domain), L and unnormalised o. 128 threads. */
template <int D, int G>
static __device__ void dec_attend(const decode_problem &p, int s, int kvh, int h0, int ng, int k0, int k1,
                                  dec_cta_smem<D, G> &sm)
{
    constexpr int DPL = D / 32;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const float qscale = p.scale * DEC_LOG2E;
    float qr[G][DPL], m[G], l[G], acc[G][DPL];
#pragma unroll
    for (int g = 0; g < G; g++) {
        m[g] = -INFINITY;
        l[g] = 0.f;
#pragma unroll
        for (int e = 0; e < DPL; e++) {
            qr[g][e] = g < ng ? p.q[((size_t)s * p.n_head + h0 + g) * D + lane * DPL + e] * qscale : 0.f;
            acc[g][e] = 0.f;
        }
    }
    const int32_t *bt = p.block_tables + (size_t)s * p.max_blocks;
    const size_t row = (size_t)p.n_kv * D;
    const __half *kc = (const __half *)p.k_cache + (size_t)kvh * D, *vc = (const __half *)p.v_cache + (size_t)kvh * D;

    for (int j0 = k0 + warp * DEC_KPW; j0 < k1; j0 += DEC_WARPS * DEC_KPW) {
        float kf[DEC_KPW][DPL], vf[DEC_KPW][DPL];
#pragma unroll
        for (int k = 0; k < DEC_KPW; k++) { /* all loads of the step first: 8 rows in flight per warp */
            const int j = j0 + k;
            if (j < k1) {
                const size_t off = ((size_t)__ldg(bt + j / DECODE_BLOCK) * DECODE_BLOCK + j % DECODE_BLOCK) * row;
                dec_load_row<DPL>(kc + off, lane, kf[k]);
                dec_load_row<DPL>(vc + off, lane, vf[k]);
            } else {
#pragma unroll
                for (int e = 0; e < DPL; e++) kf[k][e] = vf[k][e] = 0.f;
            }
        }
#pragma unroll
        for (int g = 0; g < G; g++) {
            float sc[DEC_KPW], mx = m[g];
#pragma unroll
            for (int k = 0; k < DEC_KPW; k++) {
                float dot = 0.f;
#pragma unroll
                for (int e = 0; e < DPL; e++) dot = fmaf(qr[g][e], kf[k][e], dot);
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
                sc[k] = j0 + k < k1 ? dot : -INFINITY;
                mx = fmaxf(mx, sc[k]);
            }
            const float corr = exp2f(m[g] - mx); /* m = -inf on the first step: 0 */
            m[g] = mx;
            float ps = 0.f;
#pragma unroll
            for (int e = 0; e < DPL; e++) acc[g][e] *= corr;
#pragma unroll
            for (int k = 0; k < DEC_KPW; k++) {
                const float pk = exp2f(sc[k] - mx);
                ps += pk;
#pragma unroll
                for (int e = 0; e < DPL; e++) acc[g][e] = fmaf(pk, vf[k][e], acc[g][e]);
            }
            l[g] = fmaf(l[g], corr, ps);
        }
    }

    /* the 4 warps' partials -> shared memory -> one per head (a warp without keys has m = -inf) */
#pragma unroll
    for (int g = 0; g < G; g++) {
        if (lane == 0) {
            sm.part[warp][g][0] = m[g];
            sm.part[warp][g][1] = l[g];
        }
#pragma unroll
        for (int e = 0; e < DPL; e++) sm.part[warp][g][4 + lane * DPL + e] = acc[g][e];
    }
    __syncthreads();
    for (int it = tid; it < ng * D; it += blockDim.x) {
        const int g = it / D, d = it % D;
        float M = -INFINITY, L = 0.f, o = 0.f;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) M = fmaxf(M, sm.part[w][g][0]);
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) {
            const float c = exp2f(sm.part[w][g][0] - M);
            L = fmaf(c, sm.part[w][g][1], L);
            o = fmaf(c, sm.part[w][g][4 + d], o);
        }
        sm.res[g][4 + d] = o;
        if (d == 0) {
            sm.res[g][0] = M;
            sm.res[g][1] = L;
        }
    }
    __syncthreads();
}

// ---- v1: one CTA per (sequence, query head), whole context ----------------------------------------

template <int D> __global__ void __launch_bounds__(128) dec_v1(const decode_problem p)
{
    __shared__ dec_cta_smem<D, 1> sm;
    const int h = blockIdx.x, s = blockIdx.y, seq_len = p.seq_len[s];
    float *o = p.out + ((size_t)s * p.n_head + h) * D;
    if (seq_len <= 0) {
        for (int d = threadIdx.x; d < D; d += blockDim.x) o[d] = 0.f;
        return;
    }
    dec_attend<D, 1>(p, s, h / (p.n_head / p.n_kv), h, 1, 0, seq_len, sm);
    for (int d = threadIdx.x; d < D; d += blockDim.x) o[d] = sm.res[0][4 + d] / sm.res[0][1];
}

// ---- v2, v3: split-KV partials + a separate merge kernel ------------------------------------------

static __host__ __device__ int dec_n_split(const decode_problem &p)
{
    return (p.max_seq_len + DECODE_SPLIT_KEYS - 1) / DECODE_SPLIT_KEYS;
}

/* The v2/v3 partials: (n_seq, n_head, n_split, D + 4) floats after the backend's work. */
static __host__ __device__ size_t dec_parts_offset(size_t attn_bytes) { return (attn_bytes + 255) / 256 * 256; }

/* Writes the CTA's result for heads h0 .. h0 + ng - 1 as split `split`'s partials. */
template <int D, int G>
static __device__ void dec_store_parts(const decode_problem &p, float *parts, int s, int h0, int ng, int split,
                                       const dec_cta_smem<D, G> &sm)
{
    const int ns = dec_n_split(p);
    for (int it = threadIdx.x; it < ng * (D + 4); it += blockDim.x) {
        const int g = it / (D + 4), i = it % (D + 4);
        parts[(((size_t)s * p.n_head + h0 + g) * ns + split) * (D + 4) + i] = sm.res[g][i];
    }
}

template <int D> __global__ void __launch_bounds__(128) dec_v2(const decode_problem p, float *parts)
{
    __shared__ dec_cta_smem<D, 1> sm;
    const int split = blockIdx.x, h = blockIdx.y, s = blockIdx.z, seq_len = p.seq_len[s];
    const int k0 = split * DECODE_SPLIT_KEYS;
    if (k0 >= seq_len) return; /* the merge skips splits past the sequence */
    dec_attend<D, 1>(p, s, h / (p.n_head / p.n_kv), h, 1, k0, min(seq_len, k0 + DECODE_SPLIT_KEYS), sm);
    dec_store_parts<D, 1>(p, parts, s, h, 1, split, sm);
}

template <int D, int G> __global__ void __launch_bounds__(128) dec_v3(const decode_problem p, float *parts)
{
    __shared__ dec_cta_smem<D, G> sm;
    const int split = blockIdx.x, kvh = blockIdx.y, s = blockIdx.z, seq_len = p.seq_len[s];
    const int k0 = split * DECODE_SPLIT_KEYS, group = p.n_head / p.n_kv;
    if (k0 >= seq_len) return;
    dec_attend<D, G>(p, s, kvh, kvh * group, group, k0, min(seq_len, k0 + DECODE_SPLIT_KEYS), sm);
    dec_store_parts<D, G>(p, parts, s, kvh * group, group, split, sm);
}

/* Grid (n_head, n_seq), D threads: merges the splits that ran, in split order. */
template <int D> __global__ void __launch_bounds__(D) dec_merge(const decode_problem p, const float *parts)
{
    const int h = blockIdx.x, s = blockIdx.y, d = threadIdx.x, ns = dec_n_split(p), seq_len = p.seq_len[s];
    const int n_act = seq_len > 0 ? min(ns, (seq_len + DECODE_SPLIT_KEYS - 1) / DECODE_SPLIT_KEYS) : 0;
    const float *pb = parts + ((size_t)s * p.n_head + h) * ns * (D + 4);
    float M = -INFINITY, L = 0.f, o = 0.f;
    for (int i = 0; i < n_act; i++) M = fmaxf(M, pb[(size_t)i * (D + 4)]);
    for (int i = 0; i < n_act; i++) {
        const float *pw = pb + (size_t)i * (D + 4);
        const float c = exp2f(pw[0] - M);
        L = fmaf(c, pw[1], L);
        o = fmaf(c, pw[4 + d], o);
    }
    p.out[((size_t)s * p.n_head + h) * D + d] = L > 0.f ? o / L : 0.f;
}

// ---- host side ------------------------------------------------------------------------------------

static backend_attn dec_backend_args(const decode_problem *p)
{
    backend_attn a = {};
    a.out = p->out;
    a.q = p->q;
    a.q_stride = (int64_t)p->n_head * p->d;
    a.k_cache = p->k_cache;
    a.v_cache = p->v_cache;
    a.kv_type = DTYPE_F16;
    a.block_tables = p->block_tables;
    a.q_start = p->q_start;
    a.seq_len = p->seq_len;
    a.n_seq = p->n_seq;
    a.n_tok = p->n_seq;
    a.max_blocks = p->max_blocks;
    a.max_q_len = 1;
    a.max_seq_len = p->max_seq_len;
    a.n_head = p->n_head;
    a.n_head_kv = p->n_kv;
    a.head_dim = a.head_dim_v = p->d;
    a.block_size = DECODE_BLOCK;
    a.scale = p->scale;
    return a;
}

static bool dec_shape_ok(const decode_problem *p)
{
    return p && (p->d == 64 || p->d == 128) && p->n_kv >= 1 && p->n_head % p->n_kv == 0 && p->n_head / p->n_kv <= 8 &&
           p->n_head <= 65535 && p->n_seq >= 1 && p->n_seq <= 65535 && p->max_seq_len >= 1 &&
           (int64_t)p->max_seq_len <= (int64_t)p->max_blocks * DECODE_BLOCK;
}

extern "C" size_t decode_work_size(const decode_problem *p)
{
    if (!dec_shape_ok(p)) return 0;
    const backend_attn a = dec_backend_args(p);
    return dec_parts_offset(cuk_attention_work_size(&a)) +
           (size_t)p->n_seq * p->n_head * dec_n_split(*p) * (p->d + 4) * sizeof(float);
}

static float *dec_parts(const decode_problem *p)
{
    const backend_attn a = dec_backend_args(p);
    return (float *)((char *)p->work + dec_parts_offset(cuk_attention_work_size(&a)));
}

static int dec_check(const decode_problem *p, bool needs_work)
{
    if (!dec_shape_ok(p) || !p->out || !p->q || !p->k_cache || !p->v_cache || !p->block_tables || !p->seq_len)
        return (int)cudaErrorInvalidValue;
    if (needs_work && (!p->work || p->work_size < decode_work_size(p))) return (int)cudaErrorInvalidValue;
    return 0;
}

static int run_v1(void *stream, const decode_problem *p)
{
    int e = dec_check(p, false);
    if (e) return e;
    const dim3 grid((unsigned)p->n_head, (unsigned)p->n_seq);
    if (p->d == 128) dec_v1<128><<<grid, 128, 0, (cudaStream_t)stream>>>(*p);
    else dec_v1<64><<<grid, 128, 0, (cudaStream_t)stream>>>(*p);
    return (int)cudaGetLastError();
}

template <int D> static void dec_launch_merge(cudaStream_t st, const decode_problem *p, const float *parts)
{
    dec_merge<D><<<dim3((unsigned)p->n_head, (unsigned)p->n_seq), D, 0, st>>>(*p, parts);
}

static int run_v2(void *stream, const decode_problem *p)
{
    int e = dec_check(p, true);
    if (e) return e;
    cudaStream_t st = (cudaStream_t)stream;
    float *parts = dec_parts(p);
    const dim3 grid((unsigned)dec_n_split(*p), (unsigned)p->n_head, (unsigned)p->n_seq);
    if (p->d == 128) dec_v2<128><<<grid, 128, 0, st>>>(*p, parts);
    else dec_v2<64><<<grid, 128, 0, st>>>(*p, parts);
    if ((e = (int)cudaGetLastError())) return e;
    if (p->d == 128) dec_launch_merge<128>(st, p, parts);
    else dec_launch_merge<64>(st, p, parts);
    return (int)cudaGetLastError();
}

template <int D> static void dec_launch_v3(cudaStream_t st, const decode_problem *p, float *parts)
{
    const dim3 grid((unsigned)dec_n_split(*p), (unsigned)p->n_kv, (unsigned)p->n_seq);
    const int group = p->n_head / p->n_kv;
    if (group <= 1) dec_v3<D, 1><<<grid, 128, 0, st>>>(*p, parts);
    else if (group <= 2) dec_v3<D, 2><<<grid, 128, 0, st>>>(*p, parts);
    else if (group <= 4) dec_v3<D, 4><<<grid, 128, 0, st>>>(*p, parts);
    else dec_v3<D, 8><<<grid, 128, 0, st>>>(*p, parts);
}

static int run_v3(void *stream, const decode_problem *p)
{
    int e = dec_check(p, true);
    if (e) return e;
    cudaStream_t st = (cudaStream_t)stream;
    float *parts = dec_parts(p);
    if (p->d == 128) dec_launch_v3<128>(st, p, parts);
    else dec_launch_v3<64>(st, p, parts);
    if ((e = (int)cudaGetLastError())) return e;
    if (p->d == 128) dec_launch_merge<128>(st, p, parts);
    else dec_launch_merge<64>(st, p, parts);
    return (int)cudaGetLastError();
}

/* v4: the backend's single-launch kernel through its C entry point, on the first part of work. */
static int run_v4(void *stream, const decode_problem *p)
{
    int e = dec_check(p, true);
    if (e) return e;
    if (!p->q_start) return (int)cudaErrorInvalidValue;
    backend_attn a = dec_backend_args(p);
    a.work = p->work;
    a.work_size = cuk_attention_work_size(&a);
    ai_err err = {};
    if (cuk_attention((cuk_stream)stream, &a, &err) == AI_OK) return 0;
    const cudaError_t ce = cudaGetLastError();
    return ce != cudaSuccess ? (int)ce : (int)cudaErrorInvalidValue;
}

extern "C" const decode_version decode_versions[] = {
    { "v1_block_per_head", "one CTA per (sequence, query head), whole context, warp per 4 keys", run_v1 },
    { "v2_split_kv", "flash-decoding: 512-key splits, one CTA per (split, head), separate merge kernel", run_v2 },
    { "v3_gqa_packed", "v2 with one CTA per (split, kv head) serving its 4 query heads: K/V read once", run_v3 },
    { "v4_backend", "the backend: mma.sync GQA tiles, 3-stage bulk-copy ring, planned splits, last-CTA merge", run_v4 },
};
extern "C" const int decode_n_versions = (int)(sizeof decode_versions / sizeof decode_versions[0]);
