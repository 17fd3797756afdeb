/* attn_backend.cu - v3_backend: the CUDA backend's prefill attention called through its C entry point
 * cuk_attention on this ladder's layout, so the ladder measures the kernel the engine runs (whatever
 * cuk_attention's dispatch picks: the Hopper kernel, src/backend/cuda/k_attn_prefill_hopper.cu, for
 * s >= 1024 where it applies (block size >= 8, i.e. s a multiple of 8 here), the FlashAttention-2
 * kernel, k_attn_prefill.cu, otherwise; AIINFRA_PREFILL=fa2|fa3 forces one) instead of keeping a second copy of it.
 *
 * The backend kernel reads f32 Q (n_tok, q_stride), an f16 paged KV cache addressed through a block
 * table, and writes f32 O; it is causal only (query j of a sequence sees keys up to its position) and
 * writes no lse. A contiguous (b, h, s, d) tensor is such a cache when every (b, h) is one sequence
 * with one head (n_head = n_head_kv = 1, q_stride = d): with block_size = the largest power of two
 * dividing s (at most 4096), sequence z's table is z * s / bs + 0, 1, 2, ... So the call here is:
 *   convert Q bf16 -> f32, K and V bf16 -> f16, fill tables (one kernel) -> cuk_attention -> O f32 ->
 *   bf16 (one kernel).
 * The conversions are inside the timed call (about 10 bytes per element of Q, K, V, O: a few percent
 * of the attention time at s = 4096); they are what using this kernel on bf16 data costs. Non-causal
 * shapes and s < 2 (which the backend sends to its decode path) return cudaErrorNotSupported, and the
 * ladder leaves that row out. Why v3_fa2_mma exists beside it: bf16, non-causal and lse (for the
 * backward) are beyond the backend kernel's interface, which this ladder must not change.
 */
#include "kernels/attention/attn_internal.h"

#include <cuda_fp16.h>
#include <string.h>

#include "backend/cuda/cuda_kernels.h"

/* Work layout: q f32 (n), k, v f16 (n each), out f32 (n), then int32 tables, offsets 256-aligned. */
typedef struct be_layout {
    size_t q, k, v, out, bt, qs, sl, total;
    int bs, max_blocks;
} be_layout;

static size_t be_up(size_t x) { return (x + 255) & ~(size_t)255; }

static be_layout be_plan(const attn_args *a)
{
    be_layout L;
    const size_t n = attn_n_qkv(a), bh = (size_t)a->b * a->h;
    L.bs = a->s & -a->s;
    if (L.bs > 4096) L.bs = 4096;
    L.max_blocks = a->s / L.bs;
    L.q = 0;
    L.k = be_up(L.q + n * 4);
    L.v = be_up(L.k + n * 2);
    L.out = be_up(L.v + n * 2);
    L.bt = be_up(L.out + n * 4);
    L.qs = be_up(L.bt + bh * L.max_blocks * 4);
    L.sl = be_up(L.qs + (bh + 1) * 4);
    L.total = be_up(L.sl + bh * 4);
    return L;
}

__global__ void attn_be_in(const bf16 *__restrict__ q, const bf16 *__restrict__ k, const bf16 *__restrict__ v,
                           float *__restrict__ qf, __half *__restrict__ kh, __half *__restrict__ vh, int64_t n,
                           int32_t *__restrict__ bt, int32_t *__restrict__ qs, int32_t *__restrict__ sl, int bh, int s,
                           int max_blocks)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        qf[i] = __bfloat162float(q[i]);
        kh[i] = __float2half_rn(__bfloat162float(k[i]));
        vh[i] = __float2half_rn(__bfloat162float(v[i]));
    }
    if (i < (int64_t)bh * max_blocks) bt[i] = (int32_t)i; /* sequence z, block j -> z * max_blocks + j */
    if (i <= bh) qs[i] = (int32_t)(i * s);
    if (i < bh) sl[i] = s;
}

__global__ void attn_be_out(const float *__restrict__ of, bf16 *__restrict__ o, int64_t n)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[i] = __float2bfloat16_rn(of[i]);
}

size_t attn_vbe_work(const attn_args *a) { return be_plan(a).total; }

int attn_vbe_run(void *stream, const attn_args *a)
{
    if (!attn_args_ok(a, 0, attn_vbe_work)) return (int)cudaErrorInvalidValue;
    if (!a->causal || a->s < 2) return (int)cudaErrorNotSupported;
    cudaStream_t st = (cudaStream_t)stream;
    const be_layout L = be_plan(a);
    const int64_t n = (int64_t)attn_n_qkv(a);
    const int bh = a->b * a->h;
    char *w = (char *)a->work;
    float *qf = (float *)(w + L.q), *of = (float *)(w + L.out);
    __half *kh = (__half *)(w + L.k), *vh = (__half *)(w + L.v);
    int32_t *bt = (int32_t *)(w + L.bt), *qs = (int32_t *)(w + L.qs), *sl = (int32_t *)(w + L.sl);
    const int64_t m = n > (int64_t)bh * L.max_blocks + 1 ? n : (int64_t)bh * L.max_blocks + 1;
    attn_be_in<<<(unsigned)attn_cdiv(m, 256), 256, 0, st>>>((const bf16 *)a->q, (const bf16 *)a->k,
                                                            (const bf16 *)a->v, qf, kh, vh, n, bt, qs, sl, bh, a->s,
                                                            L.max_blocks);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return (int)e;
    cuk_attn_args ba;
    memset(&ba, 0, sizeof ba);
    ba.out = of;
    ba.q = qf;
    ba.q_stride = a->d;
    ba.k_cache = kh;
    ba.v_cache = vh;
    ba.kv_type = DTYPE_F16;
    ba.block_tables = bt;
    ba.q_start = qs;
    ba.seq_len = sl;
    ba.n_seq = bh;
    ba.n_tok = bh * a->s;
    ba.max_blocks = L.max_blocks;
    ba.max_q_len = a->s;
    ba.max_seq_len = a->s;
    ba.n_head = ba.n_head_kv = 1;
    ba.head_dim = ba.head_dim_v = a->d;
    ba.block_size = L.bs;
    ba.scale = a->scale;
    ai_err err;
    memset(&err, 0, sizeof err);
    if (cuk_attention((cuk_stream)st, &ba, &err) != AI_OK) return (int)cudaErrorLaunchFailure;
    attn_be_out<<<(unsigned)attn_cdiv(n, 256), 256, 0, st>>>(of, (bf16 *)a->o, n);
    return (int)cudaGetLastError();
}
