/* gguf.h - reader for GGUF v2/v3 files (llama.cpp's model format).
 *
 * Byte layout (little-endian):
 *   u32 magic "GGUF" | u32 version (2 or 3) | u64 n_tensors | u64 n_kv
 *   n_kv x { gguf_str key | u32 type | value }
 *       gguf_str = u64 len | len bytes (UTF-8, not NUL-terminated)
 *       value    = scalar of `type`, or for ARRAY: u32 elem_type | u64 n | n x elem
 *   n_tensors x { gguf_str name | u32 n_dims | n_dims x u64 ne | u32 ggml_type | u64 offset }
 *   padding to `general.alignment` (default 32)
 *   tensor data: each tensor at data_start + offset (offset a multiple of the alignment)
 *
 * The whole file is mmapped; strings, arrays and tensor data point into the map,
 * nothing is copied. Every length, count and offset is checked against the file
 * size before it is used, so a corrupt or truncated file gives an error naming
 * the file, the field and the reason, never an out-of-bounds read.
 */
#ifndef AIINFRA_GGUF_H
#define AIINFRA_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "aiinfra/status.h"

enum gguf_type {
    GGUF_TYPE_UINT8 = 0, GGUF_TYPE_INT8 = 1, GGUF_TYPE_UINT16 = 2, GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4, GGUF_TYPE_INT32 = 5, GGUF_TYPE_FLOAT32 = 6, GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8, GGUF_TYPE_ARRAY = 9, GGUF_TYPE_UINT64 = 10, GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
};

typedef struct gguf_str {
    const char *ptr;  /* into the map, NOT NUL-terminated */
    uint64_t len;
} gguf_str;

typedef struct gguf_tensor {
    gguf_str name;
    uint32_t n_dims;       /* 1..4 */
    uint64_t ne[4];        /* elements per dim, ne[0] fastest-varying; unused dims = 1 */
    uint32_t ggml_type;    /* GGML_TYPE_* number as stored (0 f32, 1 f16, 2 q4_0, 3 q4_1, 8 q8_0, 30 bf16, ...) */
    uint64_t offset;       /* relative to the data section */
    uint64_t nbytes;       /* computed from type and shape */
    const void *data;      /* into the map */
} gguf_tensor;

typedef struct gguf gguf;

ai_status gguf_open(gguf **out, const char *path, ai_err *err);
void gguf_close(gguf *g);

uint32_t gguf_version(const gguf *g);
uint64_t gguf_n_kv(const gguf *g);
uint64_t gguf_n_tensors(const gguf *g);
uint32_t gguf_alignment(const gguf *g);

/* Metadata by index (0 <= i < n_kv) or by key (-1 when absent). */
int64_t gguf_find_key(const gguf *g, const char *key);
gguf_str gguf_key(const gguf *g, int64_t i);
enum gguf_type gguf_kv_type(const gguf *g, int64_t i);

/* Scalars: return false when the key is absent or of another type
 * (integers of any width/sign convert when the value fits). */
bool gguf_get_str(const gguf *g, const char *key, gguf_str *out);
bool gguf_get_u32(const gguf *g, const char *key, uint32_t *out);
bool gguf_get_i64(const gguf *g, const char *key, int64_t *out);
bool gguf_get_f32(const gguf *g, const char *key, float *out);
bool gguf_get_bool(const gguf *g, const char *key, bool *out);

/* Arrays: element type and count (false when absent or not an array). */
bool gguf_get_arr(const gguf *g, const char *key, enum gguf_type *elem_type, uint64_t *n);
/* Numeric element j of an array key, converted (false on type mismatch / range). */
bool gguf_arr_i64(const gguf *g, const char *key, uint64_t j, int64_t *out);
bool gguf_arr_f32(const gguf *g, const char *key, uint64_t j, float *out);
/* Raw pointer to a numeric array's packed elements (may be unaligned: memcpy). */
const void *gguf_arr_data(const gguf *g, const char *key);
/* String element j of a string array. */
bool gguf_arr_str(const gguf *g, const char *key, uint64_t j, gguf_str *out);

/* Tensors. */
const gguf_tensor *gguf_tensor_at(const gguf *g, uint64_t i);
const gguf_tensor *gguf_find_tensor(const gguf *g, const char *name);

const char *gguf_type_name(enum gguf_type t);

/* ---- additions (the API above is fixed; these only extend it) ---------------------- */

/* Bytes of one value of a fixed-size type (0 for string, array, unknown). */
size_t gguf_type_size(enum gguf_type t);

/* ggml tensor types (GGML_TYPE_* ids): name ("q4_0"), elements and bytes per block.
 * NULL / false for an id ggml does not define (or retired). */
const char *gguf_ggml_type_name(uint32_t ggml_type);
bool gguf_ggml_type_size(uint32_t ggml_type, uint32_t *block_elems, uint32_t *block_bytes);

/* By-index access (0 <= i < n_kv), for tools that walk every key: a key may hold
 * bytes (e.g. NUL) that the by-name lookups cannot express. */
bool gguf_kv_arr(const gguf *g, int64_t i, enum gguf_type *elem_type, uint64_t *n);
/* Scalar value bytes (fixed-size types) or a numeric array's packed elements; NULL otherwise.
 * Little-endian, maybe unaligned: memcpy. */
const void *gguf_kv_data(const gguf *g, int64_t i);
bool gguf_kv_str(const gguf *g, int64_t i, gguf_str *out);                   /* string scalar */
bool gguf_kv_arr_str(const gguf *g, int64_t i, uint64_t j, gguf_str *out);   /* O(1) */

/* Opens a GGUF image already in memory (for fuzzing, or a file read some other way).
 * `data` is not copied: it must outlive the handle. `name` is used in error messages. */
ai_status gguf_open_memory(gguf **out, const void *data, size_t len, const char *name, ai_err *err);

/* Byte offset of the data section in the file, and the file size. */
uint64_t gguf_data_offset(const gguf *g);
uint64_t gguf_file_size(const gguf *g);

#endif
