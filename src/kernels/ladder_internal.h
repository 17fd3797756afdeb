/* ladder_internal.h - what the per-operator ladder files (ladder_<op>.c) share with the driver
 * (ladder.c): the run context, rows, timing and the seeded input generator. Only for src/kernels/.
 *
 * A ladder file defines `ai_status ladder_<op>(ladder_ctx *c, ai_err *err)`: for each shape it makes
 * fresh inputs from c->rng, a CPU reference, then per version: poison the output, run once, measure
 * the error, append a row (ladder_add_row), time it (ladder_time) and ladder_fill_rates. Rows that
 * are compared with a library (cuBLAS, ...) in the same run set ref_name and ref_ms first.
 */
#ifndef AIINFRA_KERNELS_LADDER_INTERNAL_H
#define AIINFRA_KERNELS_LADDER_INTERNAL_H

#include <cuda_runtime_api.h>

#include "kernels/ladder.h"

typedef struct ladder_ctx {
    const ladder_opts *o; /* reps >= 3, seed != 0 */
    ladder_report *rep;
    cudaStream_t s;
    cudaEvent_t a, b;
    void *flush;  /* LADDER_FLUSH_BYTES, memset before each timed call to evict the L2 */
    float *times; /* o->reps */
    uint64_t rng; /* xorshift state, never 0 */
} ladder_ctx;

#define LADDER_FLUSH_BYTES ((size_t)256 << 20)

/* Turns a failed CUDA runtime call into `return ai_err_set(err, ...)` naming it. */
#define LADDER_CU(call, what)                                                                       \
    do {                                                                                            \
        cudaError_t e_ = (call);                                                                    \
        if (e_ != cudaSuccess)                                                                      \
            return ai_err_set(err, AI_ERR_RUNTIME, "%s: %s (%s)", (what), cudaGetErrorString(e_),   \
                              cudaGetErrorName(e_));                                                \
    } while (0)

/* Uniform in [-1, 1) from the xorshift state *s. */
float ladder_rng_uniform(uint64_t *s);

/* Reseeds c->rng from the shape (so every shape's inputs are fresh but reproducible). */
void ladder_reseed(ladder_ctx *c, uint64_t salt);

/* Appends a zeroed row with its labels; NULL (and err set) when out of memory. */
ladder_result *ladder_add_row(ladder_ctx *c, const char *op, const char *version, const char *desc,
                              const char *shape, const char *dtype, ai_err *err);

/* From ms, bytes, flops (and ref_ms when set): rates, intensity, fractions, ok = err <= tol. */
void ladder_fill_rates(ladder_result *r, const ladder_report *rep);

/* Median ms over c->o->reps timed calls of call(arg) (returns a cudaError_t as int), each after an
 * L2 flush, with 2 untimed warm-up calls first. The timed region holds exactly one call. */
typedef int (*ladder_call_fn)(const void *arg);
ai_status ladder_time(ladder_ctx *c, ladder_call_fn call, const void *arg, double *ms, ai_err *err);

/* The ladders (one file each). */
ai_status ladder_reduce(ladder_ctx *c, ai_err *err);
ai_status ladder_softmax(ladder_ctx *c, ai_err *err);
ai_status ladder_attention(ladder_ctx *c, ai_err *err);

#endif
