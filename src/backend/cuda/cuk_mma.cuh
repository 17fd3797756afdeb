/* cuk_mma.cuh - the warp-level tensor-core primitives (mma.sync, ldmatrix; sm_80 and up) that the
 * CUDA backend's kernels and the kernel ladders share, one definition each, for .cu files.
 *
 * Fragment layouts are PTX's for mma.m16n8k16 (16-bit inputs, fp32 accumulators): per lane,
 * a[0..3] hold A (16 x 16, row-major) as four 8x8 pieces, b0 / b1 B (16 x 8, column-major) as two,
 * c[0..3] C (16 x 8): rows lane / 4 and lane / 4 + 8, columns 2 (lane % 4) + {0, 1}. ldmatrix.x4
 * loads four 8x8 b16 matrices from shared memory, lane l giving the address of row l % 8 of matrix
 * l / 8; .trans transposes each (how a row-major K or V tile becomes a column-major B operand).
 */
#ifndef AIINFRA_CUK_MMA_CUH
#define AIINFRA_CUK_MMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

/* r[0..3] = four 8x8 b16 matrices at this lane's shared-memory row address p. */
static __device__ __forceinline__ void cuk_ldsm4(uint32_t r[4], const void *p)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
/* The same, each matrix transposed. */
static __device__ __forceinline__ void cuk_ldsm4_t(uint32_t r[4], const void *p)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* c (16x8 f32) += a (16x16 f16, row) . b (16x8 f16, col) */
static __device__ __forceinline__ void cuk_mma_f16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* c (16x8 f32) += a (16x16 bf16, row) . b (16x8 bf16, col) */
static __device__ __forceinline__ void cuk_mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* d (16x8 s32) = a (16x32 8-bit, row) . b (32x8 s8, col) + c, for a of unsigned (AU: u8, e.g. 4-bit
 * quants 0..15) or signed bytes (s8). Fragments (PTX, m16n8k32 with 8-bit inputs): a0 / a1 rows lane / 4
 * and lane / 4 + 8 at k 4 (lane % 4) .. + 3, a2 / a3 the same rows at k + 16; b0 k 4 (lane % 4) .. + 3
 * and b1 k + 16 of column lane / 4; c / d as the f16 form's. */
template <bool AU>
static __device__ __forceinline__ void cuk_mma_i8(int d[4], const uint32_t a[4], uint32_t b0, uint32_t b1, const int c[4])
{
    if constexpr (AU)
        asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%10,%11,%12,%13};\n"
                     : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c[0]), "r"(c[1]),
                       "r"(c[2]), "r"(c[3]));
    else
        asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%10,%11,%12,%13};\n"
                     : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c[0]), "r"(c[1]),
                       "r"(c[2]), "r"(c[3]));
}

/* Two floats rounded to one 32-bit register of f16 / bf16 (lo in the low half): an A fragment word. */
static __device__ __forceinline__ uint32_t cuk_pack_f16(float lo, float hi)
{
    __half2 h = __floats2half2_rn(lo, hi);
    return *(uint32_t *)&h;
}
static __device__ __forceinline__ uint32_t cuk_pack_bf16(float lo, float hi)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&h;
}

/* Offset in elements of 16-byte chunk c of row r in a swizzled [rows][D] tile of 2-byte elements:
 * chunk c is stored at c ^ (r % 8), so the 8 rows an ldmatrix phase reads fall in distinct banks. */
template <int D> static __device__ __forceinline__ int cuk_sw(int r, int c) { return r * D + ((c ^ (r & 7)) << 3); }

#endif
