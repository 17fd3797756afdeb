/* safetensors.h - reader for Hugging Face .safetensors files, single or sharded.
 *
 * Byte layout of one file:
 *   u64 N (little-endian) | N bytes of JSON header (UTF-8, may be padded with spaces) | data
 *   header = { "NAME": {"dtype": "F16", "shape": [d0, d1, ...], "data_offsets": [begin, end]},
 *              ..., "__metadata__": {"key": "string value", ...} (optional) }
 *   begin/end are relative to the start of the data (8 + N); shape is row-major (d0 slowest);
 *   end - begin == prod(shape) * dtype size; tensors do not overlap and cover the data.
 *
 * A sharded model is a folder with model.safetensors.index.json:
 *   {"metadata": {...}, "weight_map": {"NAME": "model-00001-of-00004.safetensors", ...}}
 * safetensors_model opens every shard named there and finds any tensor by name.
 *
 * Files are mmapped; tensor data points into the map (nothing copied). Every offset is
 * checked against the file size, and errors name the file, the tensor and the reason.
 */
#ifndef AIINFRA_SAFETENSORS_H
#define AIINFRA_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "aiinfra/status.h"

#define SAFETENSORS_MAX_DIMS 8

enum safetensors_dtype {
    ST_BOOL, ST_U8, ST_I8, ST_U16, ST_I16, ST_U32, ST_I32, ST_U64, ST_I64,
    ST_F16, ST_BF16, ST_F32, ST_F64, ST_F8_E4M3, ST_F8_E5M2,
    ST_DTYPE_COUNT
};

typedef struct safetensors_tensor {
    const char *name;               /* NUL-terminated, owned by the handle */
    enum safetensors_dtype dtype;
    uint32_t n_dims;                /* 0 (a scalar) .. SAFETENSORS_MAX_DIMS */
    uint64_t shape[SAFETENSORS_MAX_DIMS]; /* row-major: shape[0] slowest; unused = 1 */
    uint64_t offset;                /* begin, relative to the data section */
    uint64_t nbytes;                /* end - begin == prod(shape) * dtype size */
    const void *data;               /* into the map */
} safetensors_tensor;

typedef struct safetensors safetensors;

ai_status safetensors_open(safetensors **out, const char *path, ai_err *err);
/* The same on bytes already in memory (not copied: they must outlive the handle);
 * `name` is used in error messages. For fuzzing and embedded files. */
ai_status safetensors_open_memory(safetensors **out, const void *data, size_t len, const char *name, ai_err *err);
void safetensors_close(safetensors *st);

uint64_t safetensors_n_tensors(const safetensors *st);
/* Tensors in header order (i < n_tensors), or by name (NULL when absent). */
const safetensors_tensor *safetensors_tensor_at(const safetensors *st, uint64_t i);
const safetensors_tensor *safetensors_find(const safetensors *st, const char *name);
/* A __metadata__ string value, NULL when absent. */
const char *safetensors_metadata(const safetensors *st, const char *key);
/* All __metadata__ entries in header order: false when i is out of range. */
bool safetensors_metadata_at(const safetensors *st, uint64_t i, const char **key, const char **value);

/* "F16", ... and bytes per element; NULL / 0 for an out-of-range dtype. */
const char *safetensors_dtype_name(enum safetensors_dtype dt);
size_t safetensors_dtype_size(enum safetensors_dtype dt);

/* ---- a model folder: model.safetensors.index.json + shards, or one model.safetensors.
 * `path` may also be a single .safetensors file. */
typedef struct safetensors_model safetensors_model;

ai_status safetensors_model_open(safetensors_model **out, const char *path, ai_err *err);
void safetensors_model_close(safetensors_model *m);

size_t safetensors_model_n_shards(const safetensors_model *m);
const safetensors *safetensors_model_shard(const safetensors_model *m, size_t i);
uint64_t safetensors_model_n_tensors(const safetensors_model *m);
/* Finds a tensor across shards (NULL when absent). */
const safetensors_tensor *safetensors_model_find(const safetensors_model *m, const char *name);

#endif
