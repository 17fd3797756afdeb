/* cuk_rope.cuh - the rope angle and the KV-cache element store, shared by k_rope_store
 * (k_elementwise.cu) and the GEMV epilogue that does the same work (k_gemv.cu, FUSE_ROPE), so both
 * produce the same bits; and the host-side check of their arguments.
 *
 * The angle is model_rope's (src/model/ops.c) operation for operation: theta_scale is the HOST's
 * powf(base, -2 / rope_dim) (the same float as the CPU's), theta the running product
 * pos * theta_scale^i in float, th = freq_scale * (theta / factor), then cosf / sinf (full range). */
#ifndef AIINFRA_CUDA_CUK_ROPE_CUH
#define AIINFRA_CUDA_CUK_ROPE_CUH

#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuk_fp8.cuh"

/* theta_scale on the host: model_rope's float (the kernels get it as an argument). */
static inline float rope_theta_scale(float base, int32_t rope_dim) { return powf(base, -2.0f / (float)rope_dim); }

/* cos and sin of the angle of pair i at position p. */
__device__ __forceinline__ void rope_angle(float p, int32_t i, float theta_scale, float freq_scale,
                                           const float *factors, float *c, float *s)
{
    float theta = p;
    for (int32_t j = 0; j < i; j++) theta *= theta_scale; /* model_rope's running product */
    const float ff = factors ? factors[i] : 1.0f, th = freq_scale * (theta / ff);
    *c = cosf(th);
    *s = sinf(th);
}

/* (x0, x1) rotated by (c, s): model_rope's two fmaf. */
__device__ __forceinline__ void rope_rotate(float &x0, float &x1, float c, float s)
{
    const float a = x0, b = x1;
    x0 = fmaf(a, c, -(b * s));
    x1 = fmaf(a, s, b * c);
}

/* KV element type of the store kernels: the cache dtype as a template argument (no per-element branch). */
enum { KVS_F32 = 0, KVS_F16 = 1, KVS_F8 = 2 };
template <int KV> __device__ __forceinline__ void kv_put(void *cache, int64_t i, float x, float scale)
{
    if (KV == KVS_F16) ((__half *)cache)[i] = __float2half_rn(x);
    else if (KV == KVS_F8) ((uint8_t *)cache)[i] = cuk_f8_from_f32(x / scale); /* IEEE division, as the CPU */
    else ((float *)cache)[i] = x;
}
/* The same with the cache dtype at run time (an epilogue's few elements). */
__device__ __forceinline__ void kv_put_any(int kv, void *cache, int64_t i, float x, float scale)
{
    if (kv == KVS_F16) kv_put<KVS_F16>(cache, i, x, scale);
    else if (kv == KVS_F8) kv_put<KVS_F8>(cache, i, x, scale);
    else kv_put<KVS_F32>(cache, i, x, scale);
}

static inline int kvs_of(dtype t) { return t == DTYPE_F16 ? KVS_F16 : t == DTYPE_F8_E4M3 ? KVS_F8 : KVS_F32; }

#define ROPE_MAX_HALF 4096 /* rope_dim <= 8192: k_rope's angle tables fit in 32 KB of shared memory */

/* AI_OK when rk describes a rope + store of n_tok tokens the kernels can do; who names the caller. */
static inline ai_status cuk_rope_kv_check(const cuk_rope_kv *rk, int32_t n_tok, const char *who, ai_err *err)
{
    if (rk->kv_type != DTYPE_F16 && rk->kv_type != DTYPE_F32 && rk->kv_type != DTYPE_F8_E4M3)
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "%s: cache dtype %d is not f16, f32 or f8_e4m3", who,
                          (int)rk->kv_type);
    if (rk->kv_type == DTYPE_F8_E4M3 && !(rk->k_scale > 0 && rk->v_scale > 0))
        return ai_err_set(err, AI_ERR_INVALID, "%s: fp8 scales must be > 0 (k %g, v %g)", who, (double)rk->k_scale,
                          (double)rk->v_scale);
    if (n_tok < 0 || n_tok > INT32_MAX / 2 || rk->n_head <= 0 || rk->n_head_kv <= 0 ||
        rk->n_head + rk->n_head_kv > 65535 || rk->head_dim <= 0 || rk->head_dim_v <= 0 || rk->rope_dim <= 0 ||
        rk->rope_dim % 2 || rk->rope_dim > rk->head_dim || (int64_t)rk->n_head_kv * rk->head_dim > INT32_MAX ||
        !(rk->base > 0) || (n_tok > 0 && (!rk->pos || !rk->k_cache || !rk->v_cache || !rk->slot)))
        return ai_err_set(err, AI_ERR_INVALID, "%s: bad arguments (n_tok %d, heads %d/%d, head_dim %d)", who, n_tok,
                          rk->n_head, rk->n_head_kv, rk->head_dim);
    if (rk->rope_dim / 2 > ROPE_MAX_HALF)
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "%s: rope_dim %d > %d", who, rk->rope_dim, 2 * ROPE_MAX_HALF);
    return AI_OK;
}

#endif
