/* bench_skip.h - `aiinfra bench --skip-ops LIST`: a measuring aid, not a way to run a model.
 *
 * At batch 1 a decode step is a chain of ~300 kernels inside one CUDA graph; what one kind of small
 * kernel costs there (its launch, ramp and drain between two GEMVs, with PDL overlapping some of it)
 * is not what it costs alone in a kernel benchmark. Running the same step with that kind of op made a
 * no-op measures it directly: the difference in ms/step. The outputs are then wrong (the bench says
 * so), and the greedy tokens it feeds back are clamped into the vocabulary.
 */
#ifndef AIINFRA_TOOLS_BENCH_SKIP_H
#define AIINFRA_TOOLS_BENCH_SKIP_H

#include <stdbool.h>

#include "aiinfra/backend.h"

#define BENCH_SKIP_NORM 1u   /* rmsnorm, add_rmsnorm */
#define BENCH_SKIP_ROPE 2u   /* rope_store (RoPE of q and k, the KV cache writes) */
#define BENCH_SKIP_ATTN 4u   /* attention */
#define BENCH_SKIP_SWIGLU 8u /* swiglu, swiglu_rows */

/* "norm,rope,attn,swiglu" (any subset) -> mask; false on an unknown name. */
bool bench_skip_parse(const char *v, unsigned *mask);
/* Replaces the ops of mask in *ops with no-ops that return AI_OK. */
void bench_skip_apply(backend_ops *ops, unsigned mask);

#endif
