/* k_attention.cu - attention over a paged KV cache: argument checks, dispatch, and the generic
 * kernel (any head_dim <= 256, f16, f32 or fp8 e4m3 cache) that backs every case the fast paths skip.
 *
 * Dispatch (cuk_attention):
 *   max_q_len == 1, f16 or fp8, d = dv in {64, 128}, group <= 16,
 *   16-byte aligned caches, out and work                     -> split-KV decode, one launch (k_attn_decode.cu)
 *   max_q_len  > 1, f16 or fp8, d = dv in {64, 128},
 *     aligned q, caches and out                              -> FlashAttention-2 (k_attn_prefill.cu; fp8
 *                                                             tiles widened to f16 in shared memory)
 *     ... and f16, block_size >= 8, an sm_90 device,
 *     max_q_len >= 1024 (or AIINFRA_PREFILL=fa3)            -> the Hopper prefill (k_attn_prefill_hopper.cu)
 *   anything else (f32 caches, other head sizes)             -> kattn_generic (this file)
 * An fp8 cache element reads as code * k_scale (K) or * v_scale (V); the generic kernel folds k_scale
 * into the query scale and v_scale into 1 / l, the FA2 kernel k_scale into the exp2 argument.
 * The generic kernel is one CTA of 128 threads per (query row, head): it walks the keys in chunks
 * of 128 (one score per thread), keeps the online-softmax max and sum in fp32 (natural exp, not
 * the approximate exp2, so it doubles as an f32 reference on the GPU) and accumulates P.V with
 * each thread owning head dims tid and tid + 128. Slow (K rows are read per thread, uncoalesced)
 * but simple enough to be obviously right.
 *
 * Measured on one H200 (bench/bench_cuda_attention.c, 2026-12-02; Llama-3-8B heads 32/8, d 128,
 * f16, block 16, shuffled tables; ceilings in the same run: D2D copy 4262 GB/s, cuBLASLt bf16
 * 8192^3 793 TFLOP/s): decode (the earlier split kernel + separate merge kernel) 1 x 32k 69.0 us = 1945 GB/s (46% of copy), 8 x 8k 88.5 us 3033 GB/s
 * (71%), 64 x 1k 96.9 us 2769 GB/s (65%), 256 x 1k 306.7 us 3501 GB/s (82%); prefill causal
 * 1 x 4096 641.5 us = 214 TFLOP/s (27% of the GEMM, 36% of SDPA's 591), 8 x 512 131 TFLOP/s.
 * 8-warp prefill CTAs (KATTN_FA_WARPS=8, 128-row tiles) measured the same (218 / 124 TFLOP/s).
 */
#include "backend/cuda/k_attn.h"

#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuk_fp8.cuh"
#include "backend/cuda/cuk_launch.h"

template <typename T> static __device__ __forceinline__ float kattn_ld(const T *p);
template <> __device__ __forceinline__ float kattn_ld<float>(const float *p) { return __ldg(p); }
template <> __device__ __forceinline__ float kattn_ld<__half>(const __half *p) { return __half2float(__ldg(p)); }
template <> __device__ __forceinline__ float kattn_ld<uint8_t>(const uint8_t *p) { return cuk_f8_to_f32(__ldg(p)); }

/* Reduction over the 128 threads (4 warps); red: 4 floats of shared memory. */
static __device__ __forceinline__ float kattn_block_reduce(float v, float *red, bool is_max)
{
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = red[0];
    for (int i = 1; i < 4; i++) r = is_max ? fmaxf(r, red[i]) : r + red[i];
    __syncthreads();
    return r;
}

template <typename KT> __global__ void __launch_bounds__(128) kattn_generic(const cuk_attn_args a)
{
    cuk_pdl_wait();
    __shared__ float qs[256];
    __shared__ float ps[128];
    __shared__ float red[4];
    const int t = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
    const int s = kattn_find_seq(a.q_start, a.n_seq, t);
    const int qb = a.q_start[s], q_len = a.q_start[s + 1] - qb;
    if (t < qb || t >= qb + q_len) return;
    const int seq_len = a.seq_len[s];
    const int pos = seq_len - q_len + (t - qb);
    const int n_keys = min(pos + 1, seq_len);
    const int D = a.head_dim, Dv = a.head_dim_v, bs = a.block_size;
    float *o = a.out + (size_t)t * a.n_head * Dv + (size_t)h * Dv;
    if (n_keys <= 0) {
        for (int d = tid; d < Dv; d += 128) o[d] = 0.f;
        return;
    }
    const int kvh = h / (a.n_head / a.n_head_kv);
    const float *qp = a.q + (size_t)t * a.q_stride + (size_t)h * D;
    const bool f8 = sizeof(KT) == 1;
    const float kmul = f8 ? a.k_scale : 1.f, vmul = f8 ? a.v_scale : 1.f;
    for (int d = tid; d < D; d += 128) qs[d] = qp[d] * (a.scale * kmul);
    __syncthreads();
    const int32_t *bt = a.block_tables + (size_t)s * a.max_blocks;
    const KT *kc = (const KT *)a.k_cache + (size_t)kvh * D;
    const KT *vc = (const KT *)a.v_cache + (size_t)kvh * Dv;
    const size_t krow = (size_t)a.n_head_kv * D, vrow = (size_t)a.n_head_kv * Dv;
    float m = -INFINITY, l = 0.f, acc0 = 0.f, acc1 = 0.f;
    for (int k0 = 0; k0 < n_keys; k0 += 128) {
        const int j = k0 + tid;
        float sc = -INFINITY;
        if (j < n_keys) {
            const size_t slot = (size_t)bt[j / bs] * bs + j % bs;
            const KT *kr = kc + slot * krow;
            float dot = 0.f;
            for (int i = 0; i < D; i++) dot = fmaf(qs[i], kattn_ld(kr + i), dot);
            sc = dot;
        }
        const float m_new = fmaxf(m, kattn_block_reduce(sc, red, true));
        const float p = j < n_keys ? expf(sc - m_new) : 0.f;
        const float corr = expf(m - m_new);
        ps[tid] = p;
        l = l * corr + kattn_block_reduce(p, red, false); /* its barriers also publish ps */
        m = m_new;
        acc0 *= corr;
        acc1 *= corr;
        const int nk = min(128, n_keys - k0);
        for (int kk = 0; kk < nk; kk++) {
            const int jj = k0 + kk;
            const size_t slot = (size_t)bt[jj / bs] * bs + jj % bs;
            const KT *vr = vc + slot * vrow;
            const float pk = ps[kk];
            if (tid < Dv) acc0 = fmaf(pk, kattn_ld(vr + tid), acc0);
            if (tid + 128 < Dv) acc1 = fmaf(pk, kattn_ld(vr + tid + 128), acc1);
        }
        __syncthreads(); /* ps is rewritten by the next chunk */
    }
    const float inv = vmul / l;
    if (tid < Dv) o[tid] = acc0 * inv;
    if (tid + 128 < Dv) o[tid + 128] = acc1 * inv;
}

cudaError_t kattn_generic_launch(cudaStream_t s, const cuk_attn_args *a)
{
    dim3 grid((unsigned)a->n_tok, (unsigned)a->n_head);
    if (a->kv_type == DTYPE_F16) cuk_launch(kattn_generic<__half>, dim3(grid), dim3(128), 0, s, *a);
    else if (a->kv_type == DTYPE_F8_E4M3) cuk_launch(kattn_generic<uint8_t>, dim3(grid), dim3(128), 0, s, *a);
    else cuk_launch(kattn_generic<float>, dim3(grid), dim3(128), 0, s, *a);
    return cudaGetLastError();
}

static int kattn_pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }

static int kattn_use_decode(const cuk_attn_args *a) { return a->max_q_len == 1 && kattn_decode_supported(a); }

/* The prefill choice: AIINFRA_PREFILL=fa2|fa3 forces one (read per call, like the decode knobs; A/B
 * runs); otherwise the Hopper kernel for batches whose longest query run is >= KATTN_FA3_MIN_Q rows,
 * FA2 below. H200, 2026-12-04, causal d 128, same runs: ladder v3_backend 194 -> 304 TFLOP/s at
 * s 4096, 181 -> 221 d 64, 342 -> 455 at s 1024; bench_cuda_attention (32 / 8 heads, block 16)
 * 1 x 4096 214 -> 269, but 8 x 512 132 -> 117: with 128-row tiles and one CTA per SM, short causal
 * runs leave the Hopper kernel too few key tiles per CTA to hide its prologue and too few CTAs for
 * the waves to even out. Where between 512 and 1024 it crosses is not measured. */
#ifndef KATTN_FA3_MIN_Q
#define KATTN_FA3_MIN_Q 1024
#endif
static int kattn_want_fa3(const cuk_attn_args *a)
{
    const char *e = getenv("AIINFRA_PREFILL");
    if (e && strcmp(e, "fa3") == 0) return 1;
    if (e && strcmp(e, "fa2") == 0) return 0;
    return a->max_q_len >= KATTN_FA3_MIN_Q;
}

enum { KATTN_DECODE, KATTN_FA2, KATTN_FA3, KATTN_GENERIC };
static int kattn_pick(const cuk_attn_args *a)
{
    if (kattn_use_decode(a)) return KATTN_DECODE;
    if (a->max_q_len > 1 && kattn_prefill_supported(a))
        return kattn_want_fa3(a) && kattn_prefill_hopper_supported(a) ? KATTN_FA3 : KATTN_FA2;
    return KATTN_GENERIC;
}

extern "C" const char *cuk_attention_path(const cuk_attn_args *a)
{
    static const char *const names[] = { "decode", "fa2", "fa3", "generic" };
    return a ? names[kattn_pick(a)] : "generic";
}

/* The fields cuk_attention_work_size reads: the heads and the sequence bound. */
static const char *kattn_check_shape(const cuk_attn_args *a)
{
    if (a->kv_type != DTYPE_F16 && a->kv_type != DTYPE_F32 && a->kv_type != DTYPE_F8_E4M3)
        return "kv_type must be f16, f32 or f8_e4m3";
    if (a->n_seq < 1 || a->n_seq > 65535 || a->n_tok < 0) return "n_seq must be 1..65535, n_tok >= 0";
    if (a->n_head < 1 || a->n_head_kv < 1 || a->n_head % a->n_head_kv != 0 || a->n_head > 65535)
        return "n_head must be a positive multiple of n_head_kv";
    if (a->head_dim < 1 || a->head_dim > 256 || a->head_dim_v < 1 || a->head_dim_v > 256)
        return "head_dim and head_dim_v must be 1..256";
    if (a->max_seq_len < 1) return "max_seq_len must be >= 1";
    return NULL;
}

static const char *kattn_check_all(const cuk_attn_args *a)
{
    if (!a) return "args is NULL";
    if (!a->out || !a->q || !a->k_cache || !a->v_cache || !a->block_tables || !a->q_start || !a->seq_len)
        return "NULL pointer (out, q, k_cache, v_cache, block_tables, q_start, seq_len)";
    const char *w = kattn_check_shape(a);
    if (w) return w;
    if (!kattn_pow2(a->block_size) || a->block_size > 4096) return "block_size must be a power of two";
    if (a->max_blocks < 1 || a->max_q_len < 1 || (int64_t)a->max_seq_len > (int64_t)a->max_blocks * a->block_size)
        return "need max_blocks, max_q_len >= 1 and max_seq_len <= max_blocks * block_size";
    if (a->q_stride < (int64_t)a->n_head * a->head_dim) return "q_stride < n_head * head_dim";
    if (a->kv_type == DTYPE_F8_E4M3 && !(a->k_scale > 0 && a->v_scale > 0)) return "fp8 k_scale, v_scale must be > 0";
    return NULL;
}

static ai_status kattn_check(const cuk_attn_args *a, ai_err *err)
{
    const char *w = kattn_check_all(a);
    return w ? ai_err_set(err, AI_ERR_INVALID, "cuk_attention: %s", w) : AI_OK;
}

/* Sizing may be asked with bounds only (pointers NULL, max_q_len of a prefill batch): the answer
 * covers every later call with the same heads and at most a->n_seq sequences, decode included
 * (prefill and the generic kernel need no work). The caller zero-fills the work once after
 * allocating it: decode keeps its finishing counters there and leaves them zero after each call. */
extern "C" size_t cuk_attention_work_size(const cuk_attn_args *a)
{
    if (!a || kattn_check_shape(a) || !kattn_decode_shape_ok(a)) return 0;
    return kattn_decode_work_bound(a);
}

extern "C" ai_status cuk_attention(cuk_stream s, const cuk_attn_args *a, ai_err *err)
{
    ai_status st = kattn_check(a, err);
    if (st != AI_OK) return st;
    if (a->n_tok == 0) return AI_OK;
    cudaStream_t cs = (cudaStream_t)s;
    const int path = kattn_pick(a);
    if (path == KATTN_DECODE) {
        size_t need = kattn_decode_work_need(a);
        if (!a->work || a->work_size < need)
            return ai_err_set(err, AI_ERR_INVALID, "cuk_attention: work is %zu bytes, decode needs %zu",
                              a->work ? a->work_size : (size_t)0, need);
        CUK_TRY(err, kattn_decode_launch(cs, a), "cuk_attention (split-KV decode)");
    } else if (path == KATTN_FA3) {
        CUK_TRY(err, kattn_prefill_hopper_launch(cs, a), "cuk_attention (Hopper prefill)");
    } else if (path == KATTN_FA2) {
        CUK_TRY(err, kattn_prefill_launch(cs, a), "cuk_attention (flash prefill)");
    } else {
        CUK_TRY(err, kattn_generic_launch(cs, a), "cuk_attention (generic)");
    }
    return AI_OK;
}
