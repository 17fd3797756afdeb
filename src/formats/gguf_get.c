/* gguf_get.c - lookups on an opened GGUF: keys, typed scalar/array getters, tensors.
 *
 * Everything here trusts the invariants gguf.c established at open (all bytes in the
 * map, types known, keys unique), so getters only check the caller's arguments: index
 * ranges, types and numeric range. Integer getters convert between widths and signs
 * when the value fits, so callers need not care whether a writer stored u32 or i64.
 */
#include "formats/gguf_internal.h"

#include <string.h>

uint32_t gguf_version(const gguf *g) { return g->version; }
uint64_t gguf_n_kv(const gguf *g) { return g->n_kv; }
uint64_t gguf_n_tensors(const gguf *g) { return g->n_tensors; }
uint32_t gguf_alignment(const gguf *g) { return g->alignment; }
uint64_t gguf_data_offset(const gguf *g) { return g->data_start; }
uint64_t gguf_file_size(const gguf *g) { return g->map.len; }

// --- keys

int64_t gguf_find_key(const gguf *g, const char *key)
{
    return gguf_slot_find(g->kv_slots, g->kv_mask, g->kv, sizeof *g->kv, key, strlen(key));
}

static const struct gguf_kv *kv_at(const gguf *g, int64_t i)
{
    return i >= 0 && (uint64_t)i < g->n_kv ? &g->kv[i] : NULL;
}

static const struct gguf_kv *kv_named(const gguf *g, const char *key)
{
    return kv_at(g, gguf_find_key(g, key));
}

gguf_str gguf_key(const gguf *g, int64_t i)
{
    const struct gguf_kv *kv = kv_at(g, i);
    return kv ? kv->key : (gguf_str){NULL, 0};
}

enum gguf_type gguf_kv_type(const gguf *g, int64_t i)
{
    const struct gguf_kv *kv = kv_at(g, i);
    return kv ? kv->type : GGUF_TYPE_COUNT;
}

// --- numeric conversion: one integer representation, (negative?, magnitude)

struct ival {
    bool neg;
    uint64_t mag;
};

static bool is_int_type(enum gguf_type t)
{
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_INT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_INT16 ||
           t == GGUF_TYPE_UINT32 || t == GGUF_TYPE_INT32 || t == GGUF_TYPE_UINT64 || t == GGUF_TYPE_INT64;
}

static bool is_signed_type(enum gguf_type t)
{
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 || t == GGUF_TYPE_INT64;
}

static bool load_int(enum gguf_type t, const unsigned char *p, struct ival *v)
{
    if (!is_int_type(t)) return false;
    unsigned nb = (unsigned)gguf_type_size(t);
    uint64_t raw = gguf_le(p, nb);
    v->neg = false;
    v->mag = raw;
    if (is_signed_type(t) && (raw >> (8 * nb - 1)) & 1) {
        /* two's complement of an nb-byte value: magnitude = 2^(8nb) - raw */
        uint64_t mask = nb == 8 ? UINT64_MAX : (((uint64_t)1 << (8 * nb)) - 1);
        v->neg = true;
        v->mag = ((~raw) & mask) + 1;
    }
    return true;
}

static bool ival_i64(struct ival v, int64_t *out)
{
    if (!v.neg) {
        if (v.mag > (uint64_t)INT64_MAX) return false;
        *out = (int64_t)v.mag;
    } else {
        if (v.mag > (uint64_t)INT64_MAX + 1) return false;
        *out = v.mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v.mag;
    }
    return true;
}

static bool load_float(enum gguf_type t, const unsigned char *p, double *out)
{
    if (t == GGUF_TYPE_FLOAT32) {
        uint32_t u = (uint32_t)gguf_le(p, 4);
        float f;
        memcpy(&f, &u, 4);
        *out = f;
        return true;
    }
    if (t == GGUF_TYPE_FLOAT64) {
        uint64_t u = gguf_le(p, 8);
        memcpy(out, &u, 8);
        return true;
    }
    return false;
}

// --- scalars

bool gguf_get_str(const gguf *g, const char *key, gguf_str *out)
{
    const struct gguf_kv *kv = kv_named(g, key);
    return kv && gguf_kv_str(g, kv - g->kv, out);
}

bool gguf_kv_str(const gguf *g, int64_t i, gguf_str *out)
{
    const struct gguf_kv *kv = kv_at(g, i);
    if (!kv || kv->type != GGUF_TYPE_STRING) return false;
    out->len = gguf_le(kv->val, 8);
    out->ptr = (const char *)kv->val + 8;
    return true;
}

bool gguf_get_u32(const gguf *g, const char *key, uint32_t *out)
{
    const struct gguf_kv *kv = kv_named(g, key);
    struct ival v;
    if (!kv || !load_int(kv->type, kv->val, &v) || v.neg || v.mag > UINT32_MAX) return false;
    *out = (uint32_t)v.mag;
    return true;
}

bool gguf_get_i64(const gguf *g, const char *key, int64_t *out)
{
    const struct gguf_kv *kv = kv_named(g, key);
    struct ival v;
    return kv && load_int(kv->type, kv->val, &v) && ival_i64(v, out);
}

bool gguf_get_f32(const gguf *g, const char *key, float *out)
{
    const struct gguf_kv *kv = kv_named(g, key);
    double d;
    if (!kv || !load_float(kv->type, kv->val, &d)) return false;
    *out = (float)d;
    return true;
}

bool gguf_get_bool(const gguf *g, const char *key, bool *out)
{
    const struct gguf_kv *kv = kv_named(g, key);
    if (!kv || kv->type != GGUF_TYPE_BOOL) return false;
    *out = kv->val[0] != 0;
    return true;
}

// --- arrays

bool gguf_kv_arr(const gguf *g, int64_t i, enum gguf_type *elem_type, uint64_t *n)
{
    const struct gguf_kv *kv = kv_at(g, i);
    if (!kv || kv->type != GGUF_TYPE_ARRAY) return false;
    if (elem_type) *elem_type = kv->elem_type;
    if (n) *n = kv->n;
    return true;
}

bool gguf_get_arr(const gguf *g, const char *key, enum gguf_type *elem_type, uint64_t *n)
{
    return gguf_kv_arr(g, gguf_find_key(g, key), elem_type, n);
}

/* Element j of a fixed-size numeric array, or NULL. */
static const unsigned char *arr_elem(const struct gguf_kv *kv, uint64_t j)
{
    if (!kv || kv->type != GGUF_TYPE_ARRAY || j >= kv->n) return NULL;
    size_t sz = gguf_type_size(kv->elem_type);
    return sz ? kv->val + j * sz : NULL;
}

bool gguf_arr_i64(const gguf *g, const char *key, uint64_t j, int64_t *out)
{
    const struct gguf_kv *kv = kv_named(g, key);
    const unsigned char *p = arr_elem(kv, j);
    struct ival v;
    if (!p) return false;
    if (kv->elem_type == GGUF_TYPE_BOOL) {
        *out = p[0] != 0;
        return true;
    }
    return load_int(kv->elem_type, p, &v) && ival_i64(v, out);
}

bool gguf_arr_f32(const gguf *g, const char *key, uint64_t j, float *out)
{
    const struct gguf_kv *kv = kv_named(g, key);
    const unsigned char *p = arr_elem(kv, j);
    double d;
    struct ival v;
    if (!p) return false;
    if (load_float(kv->elem_type, p, &d)) {
        *out = (float)d;
        return true;
    }
    if (!load_int(kv->elem_type, p, &v)) return false;
    *out = v.neg ? -(float)v.mag : (float)v.mag;
    return true;
}

const void *gguf_kv_data(const gguf *g, int64_t i)
{
    const struct gguf_kv *kv = kv_at(g, i);
    if (!kv) return NULL;
    if (kv->type == GGUF_TYPE_ARRAY) return gguf_type_size(kv->elem_type) ? kv->val : NULL;
    return gguf_type_size(kv->type) ? kv->val : NULL;
}

const void *gguf_arr_data(const gguf *g, const char *key)
{
    const struct gguf_kv *kv = kv_named(g, key);
    return kv && kv->type == GGUF_TYPE_ARRAY ? gguf_kv_data(g, kv - g->kv) : NULL;
}

bool gguf_kv_arr_str(const gguf *g, int64_t i, uint64_t j, gguf_str *out)
{
    const struct gguf_kv *kv = kv_at(g, i);
    if (!kv || kv->type != GGUF_TYPE_ARRAY || kv->elem_type != GGUF_TYPE_STRING || j >= kv->n) return false;
    const unsigned char *p = g->map.data + kv->str_off[j];
    out->len = gguf_le(p, 8);
    out->ptr = (const char *)p + 8;
    return true;
}

bool gguf_arr_str(const gguf *g, const char *key, uint64_t j, gguf_str *out)
{
    return gguf_kv_arr_str(g, gguf_find_key(g, key), j, out);
}

// --- tensors

const gguf_tensor *gguf_tensor_at(const gguf *g, uint64_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf *g, const char *name)
{
    int64_t i = gguf_slot_find(g->tensor_slots, g->tensor_mask, g->tensors, sizeof *g->tensors, name,
                               strlen(name));
    return i < 0 ? NULL : &g->tensors[i];
}
