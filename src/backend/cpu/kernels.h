/* kernels.h - the per-ISA kernel tables behind cpu_kernels.h (internal to src/backend/cpu).
 *
 * Each ISA provides one constant table; cpu_kernels_for() picks it. A NULL slot means "no kernel"
 * (e.g. the AVX2 table on a non-x86 build is absent altogether).
 */
#ifndef AIINFRA_CPU_KERNELS_INTERNAL_H
#define AIINFRA_CPU_KERNELS_INTERNAL_H

#include "aiinfra/cpu_kernels.h"

/* Tiled products: y[t * y_row + r] = dot(w row r, x row t) for every r < nr, t < nt (any sizes;
 * SIMD versions work in register tiles of up to CPU_TILE_R rows x CPU_TILE_T tokens). Weight rows are w_row bytes apart, activation rows (cpu_act_dtype) x_row
 * bytes apart, n elements each (a multiple of 32 for quantized weights). */
#define CPU_TILE_R 4
#define CPU_TILE_T 2
typedef void (*cpu_tile_fn)(int64_t n, const void *w, size_t w_row, int nr, const void *x, size_t x_row, int nt,
                            float *y, size_t y_row);

typedef struct cpu_kernels {
    cpu_dot_fn dot[DTYPE_COUNT];         /* indexed by the weight dtype */
    const cpu_tile_fn *tile;             /* (DTYPE_COUNT), indexed by the weight dtype */
    void (*quantize_q8_0)(const float *x, dtype_block_q8_0 *y, int64_t nb); /* nb blocks of 32 */
    void (*quantize_q8_1)(const float *x, dtype_block_q8_1 *y, int64_t nb);
} cpu_kernels;

extern const cpu_kernels cpu_kernels_scalar;
extern const cpu_tile_fn cpu_tiles_scalar[DTYPE_COUNT];
#if defined(__x86_64__) || defined(__i386__)
#define CPU_HAVE_AVX2_TABLE 1
extern const cpu_kernels cpu_kernels_avx2;
extern const cpu_tile_fn cpu_tiles_avx2[DTYPE_COUNT]; /* tiles_avx2.c */
extern const cpu_kernels cpu_kernels_avx512;            /* tiles_avx512.c */
/* The AVX2 activation quantizers (kernels_avx2.c), shared by the AVX-512 table. */
void cpu_quantize_q8_0_avx2(const float *x, dtype_block_q8_0 *y, int64_t nb);
void cpu_quantize_q8_1_avx2(const float *x, dtype_block_q8_1 *y, int64_t nb);
#endif

/* The table for isa, or NULL when the isa is not available on this CPU. */
const cpu_kernels *cpu_kernels_for(cpu_isa isa);

#endif
