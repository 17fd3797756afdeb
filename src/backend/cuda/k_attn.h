/* k_attn.h - internal interface between the attention files (k_attention.cu dispatches to the
 * decode kernels in k_attn_decode.cu, the FlashAttention-2 prefill in k_attn_prefill.cu and its Hopper
 * version in k_attn_prefill_hopper.cu).
 * Not part of the contract (cuda_kernels.h); CUDA C++ only.
 *
 * Invariants shared by the paths:
 *  1. Launch shapes depend only on by-value fields of cuk_attn_args (graph capture).
 *  2. Keys at or beyond seq_len[s] never reach an output: the cp.async kernels never read them
 *     (zero fill); the Hopper prefill's TMA reads whole cache blocks, masks those scores to -inf
 *     and zeroes those V rows in shared memory, so stale or NaN cache rows cannot leak through 0 * NaN.
 *  3. A query row of sequence s sits at position seq_len - q_len + j and sees keys 0 .. position.
 *  4. Decode is one launch; its work buffer must be zero-filled once when allocated (see
 *     KATTN_DEC_COUNTERS), after which any number of calls and graph replays may share it.
 */
#ifndef AIINFRA_K_ATTN_H
#define AIINFRA_K_ATTN_H

#include <cuda.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#include "backend/cuda/cuda_kernels.h"

/* Split-KV decode: keys per split are a multiple of this (4 warps x 16-key tiles). */
#define KATTN_DEC_CHUNK_ALIGN 64
/* Decode's finishing counters at the start of work, one per (sequence, kv head) of a split call
 * (calls with more pairs never split). They must be zero the first time a work buffer is used
 * (zero-fill it once after allocating); every decode call leaves them zero. */
#define KATTN_DEC_COUNTERS 4096
#define KATTN_DEC_COUNTER_BYTES ((size_t)KATTN_DEC_COUNTERS * 4)

/* Number of KV splits decode uses for these arguments. */
int kattn_decode_splits(const cuk_attn_args *a);
/* 1 when the decode kernels handle this shape (f16, d = dv in {64, 128}, group <= 16); _supported
 * also checks the cache pointers' alignment. */
int kattn_decode_shape_ok(const cuk_attn_args *a);
int kattn_decode_supported(const cuk_attn_args *a);
/* Bytes of work this call needs: the counters, then (only when it splits) the partials,
 * n_seq * n_head * splits * (d + 4) floats. */
size_t kattn_decode_work_need(const cuk_attn_args *a);
/* An upper bound of kattn_decode_work_need over every call with the same heads, whatever its
 * n_seq and max_seq_len: a call splits only when n_seq * n_head_kv * splits <= 4 x resident CTAs. */
size_t kattn_decode_work_bound(const cuk_attn_args *a);
cudaError_t kattn_decode_launch(cudaStream_t s, const cuk_attn_args *a);

/* 1 when the FA2 prefill kernel handles these arguments (f16 or fp8 e4m3 cache, d = dv in {64, 128},
 * aligned q, out and caches). */
int kattn_prefill_supported(const cuk_attn_args *a);
cudaError_t kattn_prefill_launch(cudaStream_t s, const cuk_attn_args *a);
/* The Hopper prefill (k_attn_prefill_hopper.cu, wgmma + TMA; the default for max_q_len >= 1024):
 * _supported adds an f16 cache (fp8 stays on FA2), block_size >= 8 and a compute capability 9.0 device
 * to the FA2 kernel's conditions. */
int kattn_prefill_hopper_supported(const cuk_attn_args *a);
/* The paged K or V cache as a 2D TMA tensor map (k_attn_prefill_hopper.cu says how; shared with the
 * decode kernel's TMA variant). */
cudaError_t kattn_cache_tmap(CUtensorMap *m, const void *base, int eb, int cols, int swb, int box_rows, int row_bytes);
cudaError_t kattn_prefill_hopper_launch(cudaStream_t s, const cuk_attn_args *a);

/* Generic kernel: any head_dim, head_dim_v <= 256, f16 or f32 cache. */
cudaError_t kattn_generic_launch(cudaStream_t s, const cuk_attn_args *a);

/* 16-byte global -> shared copy (cp.async, L2 only); ok = 0 zero-fills the 16 bytes and reads
 * nothing (gmem must still be a valid address expression). */
static __device__ __forceinline__ void kattn_cp16(void *smem, const void *gmem, bool ok)
{
    unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    int n = ok ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(gmem), "r"(n) : "memory");
}
static __device__ __forceinline__ void kattn_cp_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> static __device__ __forceinline__ void kattn_cp_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
/* 2^x (ex2.approx: 2^-inf = +0). Scores are kept in the log2 domain (scale * log2 e folded in). */
static __device__ __forceinline__ float kattn_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
#define KATTN_LOG2E 1.4426950408889634f

/* Sequence of query row t: the s with q_start[s] <= t < q_start[s + 1] (binary search). */
static __device__ __forceinline__ int kattn_find_seq(const int32_t *q_start, int n_seq, int t)
{
    int lo = 0, hi = n_seq - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (__ldg(q_start + mid) <= t) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

#endif
