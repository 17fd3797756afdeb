/* dtype.h - element types of tensors: floats and ggml's quantized blocks.
 *
 * A quantized row is a sequence of fixed-size blocks; each block holds `block_size` elements in
 * `block_bytes` bytes. The byte layouts below are exactly ggml's (what GGUF files store), little
 * endian, no padding:
 *
 *   f32   4 bytes per element
 *   f16   2 bytes per element, IEEE binary16
 *   bf16  2 bytes per element, the high half of an IEEE binary32
 *   q8_0  32 elements in 34 bytes:  f16 d | 32 x i8 q            value[i] = q[i] * d
 *   q8_1  32 elements in 36 bytes:  f16 d | f16 s | 32 x i8 q    value[i] = q[i] * d,  s = d * sum(q)
 *         (only used for activations: the dot product with q4_1 weights needs sum(q))
 *   q4_0  32 elements in 18 bytes:  f16 d | 16 bytes nibbles     value[i] = (nib[i] - 8) * d
 *   q4_1  32 elements in 20 bytes:  f16 d | f16 m | 16 bytes     value[i] = nib[i] * d + m
 *         nibbles of q4_0/q4_1: byte j (0..15) holds element j in its low 4 bits and element
 *         j + 16 in its high 4 bits.
 *   f8_e4m3  1 byte per element, OCP FP8 e4m3 (include/aiinfra/fp8.h); KV caches only, no GGUF type
 *   q4_K, q5_K, q6_K, q8_K: 256-element super-blocks (144, 176, 210, 292 bytes). Known so that
 *         sizes and names work for GGUF files; quantize/dequantize return AI_ERR_UNSUPPORTED.
 *
 * Quantizers for weights follow ggml's reference algorithm (quantize_row_*_ref) byte for byte,
 * so they match the `gguf` Python package's gguf.quants (tests/py/test_quant_parity.py).
 */
#ifndef AIINFRA_DTYPE_H
#define AIINFRA_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "aiinfra/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dtype {
    DTYPE_F32 = 0,
    DTYPE_F16,
    DTYPE_BF16,
    DTYPE_Q8_0,
    DTYPE_Q4_0,
    DTYPE_Q4_1,
    DTYPE_Q8_1,
    DTYPE_Q4_K,
    DTYPE_Q5_K,
    DTYPE_Q6_K,
    DTYPE_Q8_K,
    DTYPE_F8_E4M3, /* OCP FP8 e4m3 (fp8.h): the fp8 KV cache only, not a GGUF type (ggml_type -1) */
    DTYPE_COUNT
} dtype;

#define DTYPE_QK 32 /* elements per q8_0 / q8_1 / q4_0 / q4_1 block */

typedef struct dtype_block_q8_0 { uint16_t d; int8_t qs[32]; } dtype_block_q8_0;
typedef struct dtype_block_q8_1 { uint16_t d; uint16_t s; int8_t qs[32]; } dtype_block_q8_1;
typedef struct dtype_block_q4_0 { uint16_t d; uint8_t qs[16]; } dtype_block_q4_0;
typedef struct dtype_block_q4_1 { uint16_t d; uint16_t m; uint8_t qs[16]; } dtype_block_q4_1;

typedef struct dtype_traits {
    const char *name;      /* "q4_0", as ggml and gguf name it */
    int ggml_type;         /* GGML_TYPE_* number stored in GGUF files; -1: none */
    int64_t block_size;    /* elements per block (1 for plain floats) */
    size_t block_bytes;    /* bytes per block */
    bool quantized;        /* block_size > 1 */
    bool has_convert;      /* quantize/dequantize rows implemented */
} dtype_traits;

/* Traits of t, or NULL when t is not a valid dtype. */
const dtype_traits *dtype_get(dtype t);
const char *dtype_name(dtype t);                 /* "?" for an invalid dtype */
/* Maps a GGML_TYPE_* number to our dtype; AI_ERR_UNSUPPORTED names the number otherwise. */
ai_status dtype_from_ggml(uint32_t ggml_type, dtype *out, ai_err *err);
/* Bytes of a row of n elements; AI_ERR_INVALID if n is negative or not a multiple of the block
 * size, AI_ERR_RANGE on overflow. */
ai_status dtype_row_bytes(dtype t, int64_t n, size_t *out, ai_err *err);

/* ---- scalar conversions (exact: subnormals, infinities; NaN stays NaN) */
float dtype_f16_to_f32(uint16_t h);
uint16_t dtype_f32_to_f16(float f);  /* round to nearest even, overflow -> inf */
float dtype_bf16_to_f32(uint16_t h);
uint16_t dtype_f32_to_bf16(float f); /* round to nearest even, NaN -> quiet NaN (ggml's rule) */

/* Row conversions; use F16C when the CPU has it (same results as the scalar ones). */
void dtype_f16_to_f32_row(const uint16_t *x, float *y, int64_t n);
void dtype_f32_to_f16_row(const float *x, uint16_t *y, int64_t n);
/* The row converter dtype_f16_to_f32_row would use, picked now. The per-call check reads CPUID, which
 * traps to the hypervisor in a VM (~1-2 us): hot loops take the function once and keep it. */
typedef void (*dtype_f16_row_fn)(const uint16_t *x, float *y, int64_t n);
dtype_f16_row_fn dtype_f16_to_f32_row_fn(void);
void dtype_bf16_to_f32_row(const uint16_t *x, float *y, int64_t n);
void dtype_f32_to_bf16_row(const float *x, uint16_t *y, int64_t n);

/* x: (n) f32 -> dst: row of dtype t (dtype_row_bytes(t, n) bytes). f32, f16, bf16, q8_0, q8_1,
 * q4_0, q4_1, f8_e4m3 (scale 1). AI_ERR_INVALID for a bad n, AI_ERR_UNSUPPORTED for the K types. */
ai_status dtype_quantize_row(dtype t, const float *x, void *dst, int64_t n, ai_err *err);
/* src: row of dtype t -> y: (n) f32. */
ai_status dtype_dequantize_row(dtype t, const void *src, float *y, int64_t n, ai_err *err);

#ifdef __cplusplus
}
#endif

#endif
