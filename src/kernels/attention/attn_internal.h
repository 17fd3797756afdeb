/* attn_internal.h - what the attention ladder's .cu files share: argument checks, the launch entry
 * points of each version (the table lives in attn_versions.cu), small device helpers. CUDA C++ only.
 *
 * Scores are kept in the log2 domain where a kernel uses exp2 (scale * log2 e folded into the dot
 * product); lse is always stored in natural-log units: lse = (m2 + log2(l)) * ln 2.
 */
#ifndef AIINFRA_KERNELS_ATTN_INTERNAL_H
#define AIINFRA_KERNELS_ATTN_INTERNAL_H

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "kernels/attention/attn_args.h"

#define ATTN_LOG2E 1.4426950408889634f
#define ATTN_LN2 0.6931471805599453f

typedef __nv_bfloat16 bf16;

static __device__ __forceinline__ float attn_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
static __device__ __forceinline__ float attn_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Entry points (attn_naive.cu, attn_fa1.cu, attn_fa2.cu, attn_backend.cu, attn_fa2_bwd.cu). */
size_t attn_v1_work(const attn_args *a);
int attn_v1_run(void *s, const attn_args *a);
size_t attn_v1b_work(const attn_args *a);
int attn_v1b_run(void *s, const attn_args *a);
int attn_v2_run(void *s, const attn_args *a);
int attn_v3_run(void *s, const attn_args *a);
size_t attn_vbe_work(const attn_args *a);
int attn_vbe_run(void *s, const attn_args *a);
size_t attn_v3b_work(const attn_args *a);
int attn_v3b_run(void *s, const attn_args *a);
int attn_v4_run(void *s, const attn_args *a); /* attn_fa3.cu */
int attn_v4b_run(void *s, const attn_args *a);
int attn_v4c_run(void *s, const attn_args *a);
int attn_v4d_run(void *s, const attn_args *a);
int attn_v4e_run(void *s, const attn_args *a);
int attn_v4f_run(void *s, const attn_args *a);
int attn_v4g_run(void *s, const attn_args *a);

#endif
