/* cpu_kernels.h - CPU dot products and matrix products over f32/f16/bf16/q8_0/q4_0/q4_1 weights.
 *
 * The product the model needs is Y = X W^T:
 *   W (n_out, n_in) rows in a weight dtype, X (n_tok, n_in) f32 activations, Y (n_tok, n_out) f32.
 * For quantized weights the activations are first quantized (llama.cpp's scheme) and the dot product
 * runs in integers per 32-element block, scaled by the two block scales:
 *   q8_0, q4_0 weights  x  q8_0 activations:  sum_b dw_b * dx_b * sum_i qw_i * qx_i
 *   q4_1 weights        x  q8_1 activations:  sum_b dw_b * dx_b * sum_i qw_i * qx_i + mw_b * sx_b
 *   f32, f16, bf16 weights x f32 activations: a float dot product
 * The activation quantizer is the one llama.cpp runs on x86 (d = amax/127, 1/d computed as
 * 127/amax, round half to even), so the codes match what llama.cpp multiplies with on this CPU.
 *
 * Every kernel has a scalar reference; AVX2+FMA and AVX-512 versions are chosen at run time
 * (cpu_isa_best). The integer block sums are exact on every ISA; only the f32 summation order differs.
 * See docs/cpu-kernels.md.
 */
#ifndef AIINFRA_CPU_KERNELS_H
#define AIINFRA_CPU_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "aiinfra/dtype.h"
#include "aiinfra/status.h"
#include "aiinfra/threadpool.h"

typedef enum cpu_isa {
    CPU_ISA_SCALAR = 0, /* portable C, the reference */
    CPU_ISA_AVX2,       /* x86-64 with AVX2 + FMA + F16C */
    CPU_ISA_AVX512,     /* AVX2's set + AVX-512 F, BW, VL (and the OS saving the zmm/k state) */
    CPU_ISA_COUNT
} cpu_isa;

bool cpu_isa_available(cpu_isa isa);
/* The fastest available on this CPU, unless the environment variable AIINFRA_CPU_ISA
 * (scalar|avx2|avx512, read once per process) names an available one: that one is returned instead,
 * so tests and benchmarks can pin a path. An unknown or unavailable name is ignored. */
cpu_isa cpu_isa_best(void);
const char *cpu_isa_name(cpu_isa isa);

/* Dtype of the activation row a weight row of `wtype` is multiplied with: f32 for f32/f16/bf16,
 * q8_0 for q8_0/q4_0, q8_1 for q4_1; DTYPE_COUNT when wtype has no kernel. */
dtype cpu_act_dtype(dtype wtype);

/* x (n) f32 -> dst, a row of act_type (q8_0 or q8_1; f32 copies). n a multiple of 32 for q8_*. */
ai_status cpu_quantize_act(cpu_isa isa, dtype act_type, const float *x, void *dst, int64_t n, ai_err *err);

/* Dot product of one weight row w (n elements of wtype) with one activation row x (n elements of
 * cpu_act_dtype(wtype)). n must be a multiple of the block size. */
typedef float (*cpu_dot_fn)(int64_t n, const void *w, const void *x);
cpu_dot_fn cpu_dot_get(cpu_isa isa, dtype wtype); /* NULL when unsupported or isa unavailable */

/* Bytes of scratch cpu_matmul needs for the quantized activations (0 for float weights). */
ai_status cpu_matmul_work_size(dtype wtype, int64_t n_in, int64_t n_tok, size_t *out, ai_err *err);

/* y = x w^T, parallel over output rows on `pool` (NULL: the calling thread only).
 *   w: (n_out, n_in) of wtype, rows contiguous     x: (n_tok, n_in) f32
 *   y: (n_tok, n_out) f32                           work: cpu_matmul_work_size bytes (may be NULL if 0)
 * Each weight row is read from memory once and used for all tokens (token tiles stay in cache). */
ai_status cpu_matmul(threadpool *pool, cpu_isa isa, dtype wtype, const void *w, int64_t n_out, int64_t n_in,
                     const float *x, int64_t n_tok, float *y, void *work, size_t work_size, ai_err *err);

#endif
