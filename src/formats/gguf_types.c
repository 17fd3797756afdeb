/* gguf_types.c - the ggml tensor type table: name, elements per block, bytes per block.
 *
 * Why a table: a GGUF tensor records only its ggml type id and shape; its size in bytes
 * (needed to bounds-check the data) follows from (ne[0]*ne[1]*... / block_elems) * block_bytes.
 * Ids are ggml's public GGML_TYPE enum. Ids that ggml retired (4, 5: q4_2/q4_3; 31..33 and
 * 36..38: repacked variants that never appear in files) are unknown here on purpose.
 * Verified against the gguf Python package (gguf.GGMLQuantizationType, gguf.GGML_QUANT_SIZES)
 * by tests/py/test_gguf_parity.py.
 */
#include "aiinfra/gguf.h"

struct ggml_type_info {
    const char *name;     /* NULL: unknown id */
    uint32_t block_elems; /* elements per block (1 for plain types) */
    uint32_t block_bytes; /* bytes per block */
};

static const struct ggml_type_info ggml_types[] = {
    [0] = {"f32", 1, 4},          [1] = {"f16", 1, 2},
    [2] = {"q4_0", 32, 18},       [3] = {"q4_1", 32, 20},
    [6] = {"q5_0", 32, 22},       [7] = {"q5_1", 32, 24},
    [8] = {"q8_0", 32, 34},       [9] = {"q8_1", 32, 40},
    [10] = {"q2_K", 256, 84},     [11] = {"q3_K", 256, 110},
    [12] = {"q4_K", 256, 144},    [13] = {"q5_K", 256, 176},
    [14] = {"q6_K", 256, 210},    [15] = {"q8_K", 256, 292},
    [16] = {"iq2_xxs", 256, 66},  [17] = {"iq2_xs", 256, 74},
    [18] = {"iq3_xxs", 256, 98},  [19] = {"iq1_s", 256, 50},
    [20] = {"iq4_nl", 32, 18},    [21] = {"iq3_s", 256, 110},
    [22] = {"iq2_s", 256, 82},    [23] = {"iq4_xs", 256, 136},
    [24] = {"i8", 1, 1},          [25] = {"i16", 1, 2},
    [26] = {"i32", 1, 4},         [27] = {"i64", 1, 8},
    [28] = {"f64", 1, 8},         [29] = {"iq1_m", 256, 56},
    [30] = {"bf16", 1, 2},
    [34] = {"tq1_0", 256, 54},    [35] = {"tq2_0", 256, 66},
    [39] = {"mxfp4", 32, 17},     [40] = {"nvfp4", 64, 36},
    [41] = {"q1_0", 128, 18},
};

#define N_GGML_TYPES (sizeof ggml_types / sizeof ggml_types[0])

const char *gguf_ggml_type_name(uint32_t ggml_type)
{
    return ggml_type < N_GGML_TYPES ? ggml_types[ggml_type].name : NULL;
}

bool gguf_ggml_type_size(uint32_t ggml_type, uint32_t *block_elems, uint32_t *block_bytes)
{
    if (ggml_type >= N_GGML_TYPES || !ggml_types[ggml_type].name) return false;
    if (block_elems) *block_elems = ggml_types[ggml_type].block_elems;
    if (block_bytes) *block_bytes = ggml_types[ggml_type].block_bytes;
    return true;
}

const char *gguf_type_name(enum gguf_type t)
{
    static const char *const names[GGUF_TYPE_COUNT] = {
        "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool",
        "string", "array", "uint64", "int64", "float64",
    };
    return (unsigned)t < GGUF_TYPE_COUNT ? names[t] : "unknown";
}

size_t gguf_type_size(enum gguf_type t)
{
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}
