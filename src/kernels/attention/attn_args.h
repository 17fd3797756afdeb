/* attn_args.h - the attention ladder's argument checks and sizes, without any device type: shared by
 * attn_internal.h (the mma.sync / SIMT files) and attn_fa3.cu, which includes the GEMM ladder's Hopper
 * helpers (gemm_hopper.cuh) whose bf16 is a different type than attn_internal.h's. C++ (CUDA) only.
 */
#ifndef AIINFRA_KERNELS_ATTN_ARGS_H
#define AIINFRA_KERNELS_ATTN_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/attention/attention.h"

static inline int64_t attn_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Elements of one (b, h, s, d) tensor and of one (b, h, s, s) score matrix. */
static inline size_t attn_n_qkv(const attn_args *a) { return (size_t)a->b * a->h * a->s * a->d; }
static inline size_t attn_n_ss(const attn_args *a) { return (size_t)a->b * a->h * a->s * a->s; }

/* 1 when the shape, the pointers a forward (bwd = 0) or backward version needs, and the work (sized by
 * wf after the shape is known to be valid; NULL: none) are valid. */
static inline int attn_args_ok(const attn_args *a, int bwd, attn_work_fn wf)
{
    if (!a || a->b < 1 || a->h < 1 || a->s < 1 || (a->d != 64 && a->d != 128)) return 0;
    if ((int64_t)a->b * a->h > 65535) return 0; /* grid.y / grid.z limit */
    if (!a->q || !a->k || !a->v || !a->o) return 0;
    if (bwd && (!a->lse || !a->dout || !a->dq || !a->dk || !a->dv)) return 0;
    const size_t work_need = wf ? wf(a) : 0;
    if (work_need && (!a->work || a->work_size < work_need)) return 0;
    return 1;
}

#endif
