/* kernels.h - the per-ISA kernel tables behind cpu_kernels.h (internal to src/backend/cpu).
 *
 * Each ISA provides one constant table; cpu_kernels_for() picks it. A NULL slot means "no kernel"
 * (e.g. the AVX2 table on a non-x86 build is absent altogether).
 */
#ifndef AIINFRA_CPU_KERNELS_INTERNAL_H
#define AIINFRA_CPU_KERNELS_INTERNAL_H

#include "aiinfra/cpu_kernels.h"

typedef struct cpu_kernels {
    cpu_dot_fn dot[DTYPE_COUNT]; /* indexed by the weight dtype */
    void (*quantize_q8_0)(const float *x, dtype_block_q8_0 *y, int64_t nb); /* nb blocks of 32 */
    void (*quantize_q8_1)(const float *x, dtype_block_q8_1 *y, int64_t nb);
} cpu_kernels;

extern const cpu_kernels cpu_kernels_scalar;
#if defined(__x86_64__) || defined(__i386__)
#define CPU_HAVE_AVX2_TABLE 1
extern const cpu_kernels cpu_kernels_avx2;
#endif

/* The table for isa, or NULL when the isa is not available on this CPU. */
const cpu_kernels *cpu_kernels_for(cpu_isa isa);

#endif
