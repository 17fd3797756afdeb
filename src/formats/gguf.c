/* gguf.c - opens a GGUF v2/v3 file: maps it, validates every byte it will ever hand
 * out, and builds the index tables (keys, tensors, string-array offsets, name hashes).
 *
 * Design:
 *   - The file is mmapped (file_map_open); strings, arrays and tensor data are pointers
 *     into the map. Nothing is copied, so opening a 10 GB model costs only the tables.
 *   - Two passes over the same parse code (parse_file): pass 1 validates everything and
 *     counts the string-array elements; then every table is allocated once; pass 2 walks
 *     the (now known-good) bytes again and fills the tables. One walker, so the passes
 *     cannot disagree.
 *   - Each string array gets a table of element offsets, so gguf_arr_str is O(1) even
 *     for a 150k-entry vocabulary. Keys and tensor names are hashed (xxHash) into open-
 *     addressed tables: lookups are O(1) and duplicate detection is not quadratic.
 *
 * Invariants (what a successful gguf_open guarantees to gguf_get.c and callers):
 *   1. Every gguf_str (key, name, string value, string-array element) lies in the map.
 *   2. Every scalar and every array's element bytes lie in the map; element types are
 *      known GGUF types; arrays nest at most GGUF_MAX_DEPTH deep.
 *   3. Keys are unique; tensor names are unique.
 *   4. alignment is a non-zero power of two; data_start = align_up(end of tensor table).
 *   5. Every tensor has 1..4 dims, each ne >= 1, a known ggml type with ne[0] a multiple
 *      of its block size, an offset that is a multiple of the alignment, and its nbytes
 *      lie inside the data section.
 *
 * Hostile input: counts are checked against the bytes left before any loop or
 * allocation (n_kv * 13 and n_tensors * 32 must fit: the smallest a key or a tensor
 * entry can be), all arithmetic on file values is overflow-checked, and nesting is
 * bounded, so work and memory stay linear in the file size.
 */
#include "formats/gguf_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#define GGUF_MAGIC 0x46554747u /* "GGUF" read little-endian */
#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_DEPTH 8       /* arrays of arrays of ... */
#define GGUF_MIN_KV_BYTES 13u  /* u64 key len + u32 type + 1-byte value */
#define GGUF_MIN_TENSOR_BYTES 32u /* u64 name len + u32 n_dims + u64 ne + u32 type + u64 offset */

// --- reader cursor: pos <= len always holds

typedef struct rd {
    const unsigned char *base;
    uint64_t len;
    uint64_t pos;
} rd;

static inline uint64_t rd_left(const rd *r) { return r->len - r->pos; }

static inline ai_status rd_need(const rd *r, uint64_t n, const char *what, ai_err *err)
{
    if (n > rd_left(r))
        return ai_err_set(err, AI_ERR_FORMAT, "%s needs %llu bytes at offset %llu but the file ends %llu bytes later",
                          what, (unsigned long long)n, (unsigned long long)r->pos,
                          (unsigned long long)rd_left(r));
    return AI_OK;
}

static inline uint64_t rd_take(rd *r, unsigned nbytes) /* after rd_need */
{
    uint64_t v = gguf_le(r->base + r->pos, nbytes);
    r->pos += nbytes;
    return v;
}

static inline ai_status rd_u32(rd *r, uint32_t *v, const char *what, ai_err *err)
{
    ai_status st = rd_need(r, 4, what, err);
    if (st == AI_OK) *v = (uint32_t)rd_take(r, 4);
    return st;
}

static inline ai_status rd_u64(rd *r, uint64_t *v, const char *what, ai_err *err)
{
    ai_status st = rd_need(r, 8, what, err);
    if (st == AI_OK) *v = rd_take(r, 8);
    return st;
}

static inline ai_status rd_str(rd *r, gguf_str *s, const char *what, ai_err *err)
{
    uint64_t n;
    ai_status st = rd_u64(r, &n, what, err);
    if (st != AI_OK) return st;
    if (n > rd_left(r))
        return ai_err_set(err, AI_ERR_FORMAT, "%s: length %llu at offset %llu exceeds the %llu bytes left in the file",
                          what, (unsigned long long)n, (unsigned long long)(r->pos - 8),
                          (unsigned long long)rd_left(r));
    s->ptr = (const char *)r->base + r->pos;
    s->len = n;
    r->pos += n;
    return AI_OK;
}

/* Writes a printable, bounded rendering of s (for error messages). */
static void name_fmt(char *dst, size_t cap, gguf_str s)
{
    size_t o = 0;
    for (uint64_t i = 0; i < s.len && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (o > 60) { memcpy(dst + o, "...", 3); o += 3; break; }
        if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') dst[o++] = (char)c;
        else o += (size_t)snprintf(dst + o, cap - o, "\\x%02x", c);
    }
    dst[o] = '\0';
}

// --- values

static bool type_known(uint32_t t) { return t < GGUF_TYPE_COUNT; }

/* Parses one value of `type` at r. For a string array, offs (if not NULL) receives
 * each element's file offset; *n_str (if not NULL) counts them. Errors name the element. */
static ai_status parse_value(rd *r, uint32_t type, int depth, uint64_t *offs, uint64_t *n_str, ai_err *err)
{
    size_t sz = gguf_type_size((enum gguf_type)type);
    if (sz) {
        ai_status st = rd_need(r, sz, "value", err);
        if (st == AI_OK) r->pos += sz;
        return st;
    }
    if (type == GGUF_TYPE_STRING) {
        gguf_str s;
        return rd_str(r, &s, "string value", err);
    }
    if (type != GGUF_TYPE_ARRAY)
        return ai_err_set(err, AI_ERR_FORMAT, "unknown value type %u", type);
    if (depth >= GGUF_MAX_DEPTH)
        return ai_err_set(err, AI_ERR_FORMAT, "arrays nested deeper than %d levels", GGUF_MAX_DEPTH);
    uint32_t et;
    uint64_t n;
    ai_status st = rd_u32(r, &et, "array element type", err);
    if (st == AI_OK) st = rd_u64(r, &n, "array count", err);
    if (st != AI_OK) return st;
    if (!type_known(et)) return ai_err_set(err, AI_ERR_FORMAT, "unknown array element type %u", et);
    size_t esz = gguf_type_size((enum gguf_type)et);
    uint64_t min = esz ? esz : et == GGUF_TYPE_STRING ? 8 : 12; /* smallest element */
    if (n > rd_left(r) / min)
        return ai_err_set(err, AI_ERR_FORMAT, "array of %llu %s elements cannot fit in the %llu bytes left",
                          (unsigned long long)n, gguf_type_name((enum gguf_type)et),
                          (unsigned long long)rd_left(r));
    if (esz) {
        r->pos += n * esz;
        return AI_OK;
    }
    for (uint64_t j = 0; j < n; j++) {
        uint64_t at = r->pos;
        if (et == GGUF_TYPE_STRING) {
            gguf_str s;
            st = rd_str(r, &s, "string", err);
            if (st == AI_OK && depth == 0) {
                if (offs) offs[j] = at;
                if (n_str) ++*n_str;
            }
        } else {
            st = parse_value(r, et, depth + 1, NULL, NULL, err);
        }
        if (st != AI_OK) return ai_err_prefix(err, "element %llu", (unsigned long long)j);
    }
    return AI_OK;
}

// --- the walker: pass 1 (g->kv == NULL) validates and counts, pass 2 fills

struct walk {
    rd r;
    uint64_t n_str;          /* string-array elements so far */
    uint32_t alignment;
    uint64_t tensors_end;    /* file offset after the tensor table */
};

static ai_status parse_kvs(gguf *g, struct walk *w, ai_err *err)
{
    static const char align_key[] = "general.alignment";
    char name[96];
    for (uint64_t i = 0; i < g->n_kv; i++) {
        gguf_str key = {0};
        uint32_t type = 0;
        ai_status st = rd_str(&w->r, &key, "key", err);
        name[0] = '\0';
        if (st == AI_OK) name_fmt(name, sizeof name, key);
        if (st == AI_OK) st = rd_u32(&w->r, &type, "value type", err);
        if (st == AI_OK && !type_known(type))
            st = ai_err_set(err, AI_ERR_FORMAT, "unknown value type %u", type);
        uint64_t at = w->r.pos;
        uint64_t *offs = g->kv ? g->str_off + w->n_str : NULL;
        if (st == AI_OK) st = parse_value(&w->r, type, 0, offs, &w->n_str, err);
        if (st != AI_OK) return ai_err_prefix(err, "kv[%llu] '%s'", (unsigned long long)i, name);

        bool is_align = key.len == sizeof align_key - 1 && !memcmp(key.ptr, align_key, key.len);
        if (is_align) {
            uint32_t a = 0;
            if (type != GGUF_TYPE_UINT32)
                return ai_err_set(err, AI_ERR_FORMAT, "kv[%llu] 'general.alignment': type %s, expected uint32",
                                  (unsigned long long)i, gguf_type_name((enum gguf_type)type));
            a = (uint32_t)gguf_le(w->r.base + at, 4);
            if (a == 0 || (a & (a - 1)))
                return ai_err_set(err, AI_ERR_FORMAT,
                                  "kv[%llu] 'general.alignment': %u is not a non-zero power of two",
                                  (unsigned long long)i, a);
            w->alignment = a;
        }
        if (g->kv) {
            struct gguf_kv *kv = &g->kv[i];
            kv->key = key;
            kv->type = (enum gguf_type)type;
            kv->val = w->r.base + at;
            if (type == GGUF_TYPE_ARRAY) {
                kv->elem_type = (enum gguf_type)gguf_le(kv->val, 4);
                kv->n = gguf_le(kv->val + 4, 8);
                kv->val += 12;
                if (kv->elem_type == GGUF_TYPE_STRING) kv->str_off = offs;
            }
        }
    }
    return AI_OK;
}

static ai_status parse_tensor(gguf *g, struct walk *w, uint64_t i, ai_err *err)
{
    gguf_tensor t = {0};
    uint32_t blk, bpb;
    ai_status st = rd_str(&w->r, &t.name, "name", err);
    if (st == AI_OK) st = rd_u32(&w->r, &t.n_dims, "n_dims", err);
    if (st == AI_OK && (t.n_dims == 0 || t.n_dims > 4))
        st = ai_err_set(err, AI_ERR_FORMAT, "n_dims %u (must be 1..4)", t.n_dims);
    uint64_t nelem = 1;
    for (uint32_t d = 0; st == AI_OK && d < 4; d++) {
        t.ne[d] = 1;
        if (d >= t.n_dims) continue;
        st = rd_u64(&w->r, &t.ne[d], "ne", err);
        if (st != AI_OK) break;
        if (t.ne[d] == 0)
            st = ai_err_set(err, AI_ERR_FORMAT, "ne[%u] is 0", d);
        else if (t.ne[d] > (uint64_t)INT64_MAX / nelem)
            st = ai_err_set(err, AI_ERR_FORMAT, "ne[%u]=%llu makes the element count overflow", d,
                            (unsigned long long)t.ne[d]);
        else
            nelem *= t.ne[d];
    }
    if (st == AI_OK) st = rd_u32(&w->r, &t.ggml_type, "ggml type", err);
    if (st == AI_OK && !gguf_ggml_type_size(t.ggml_type, &blk, &bpb))
        st = ai_err_set(err, AI_ERR_FORMAT, "unknown ggml type %u", t.ggml_type);
    if (st == AI_OK && t.ne[0] % blk)
        st = ai_err_set(err, AI_ERR_FORMAT, "ne[0]=%llu is not a multiple of the %s block size %u",
                        (unsigned long long)t.ne[0], gguf_ggml_type_name(t.ggml_type), blk);
    if (st == AI_OK && nelem / blk > UINT64_MAX / bpb)
        st = ai_err_set(err, AI_ERR_FORMAT, "byte size overflows");
    if (st == AI_OK) st = rd_u64(&w->r, &t.offset, "offset", err);
    if (st != AI_OK) {
        char name[96] = "";
        if (t.name.ptr) name_fmt(name, sizeof name, t.name);
        return ai_err_prefix(err, "tensor[%llu] '%s'", (unsigned long long)i, name);
    }
    t.nbytes = nelem / blk * bpb;
    if (g->tensors) g->tensors[i] = t;
    return AI_OK;
}

static ai_status parse_file(gguf *g, struct walk *w, ai_err *err)
{
    w->r.pos = 24;
    w->n_str = 0;
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    ai_status st = parse_kvs(g, w, err);
    for (uint64_t i = 0; st == AI_OK && i < g->n_tensors; i++) st = parse_tensor(g, w, i, err);
    w->tensors_end = w->r.pos;
    return st;
}

// --- index tables

static uint64_t slots_for(uint64_t n)
{
    uint64_t c = 8;
    while (c < 2 * n) c *= 2;
    return c;
}

uint64_t gguf_hash(const char *p, uint64_t len) { return XXH3_64bits(p, (size_t)len); }

int64_t gguf_slot_find(const uint64_t *slots, uint64_t mask, const void *items, size_t stride,
                       const char *name, uint64_t len)
{
    if (!slots) return -1;
    for (uint64_t h = gguf_hash(name, len) & mask;; h = (h + 1) & mask) {
        if (!slots[h]) return -1;
        const gguf_str *s = (const gguf_str *)((const char *)items + (slots[h] - 1) * stride);
        if (s->len == len && !memcmp(s->ptr, name, len)) return (int64_t)(slots[h] - 1);
    }
}

/* Inserts items[0..n) by name; fails on the first duplicate. */
static ai_status slots_fill(uint64_t *slots, uint64_t mask, const void *items, size_t stride, uint64_t n,
                            const char *what, ai_err *err)
{
    for (uint64_t i = 0; i < n; i++) {
        const gguf_str *s = (const gguf_str *)((const char *)items + i * stride);
        uint64_t h = gguf_hash(s->ptr, s->len) & mask;
        for (; slots[h]; h = (h + 1) & mask) {
            const gguf_str *o = (const gguf_str *)((const char *)items + (slots[h] - 1) * stride);
            if (o->len == s->len && !memcmp(o->ptr, s->ptr, s->len)) {
                char name[96];
                name_fmt(name, sizeof name, *s);
                return ai_err_set(err, AI_ERR_FORMAT, "duplicate %s '%s' (%s[%llu] and %s[%llu])", what, name,
                                  what, (unsigned long long)(slots[h] - 1), what, (unsigned long long)i);
            }
        }
        slots[h] = i + 1;
    }
    return AI_OK;
}

static void *calloc_n(uint64_t n, size_t size)
{
    if (n == 0) n = 1;
    if (n > SIZE_MAX / size) return NULL;
    return calloc((size_t)n, size);
}

// --- open / close

static ai_status check_header(gguf *g, ai_err *err)
{
    const unsigned char *p = g->map.data;
    uint64_t len = g->map.len;
    if (len < 24)
        return ai_err_set(err, AI_ERR_FORMAT, "file too short for a GGUF header (%llu bytes, need 24)",
                          (unsigned long long)len);
    uint32_t magic = (uint32_t)gguf_le(p, 4);
    if (magic != GGUF_MAGIC)
        return ai_err_set(err, AI_ERR_FORMAT, "bad magic %02x %02x %02x %02x (expected \"GGUF\"): not a GGUF file",
                          p[0], p[1], p[2], p[3]);
    g->version = (uint32_t)gguf_le(p + 4, 4);
    if (g->version == 1)
        return ai_err_set(err, AI_ERR_UNSUPPORTED,
                          "GGUF v1 is not supported (only v2 and v3); re-convert the model with a current llama.cpp");
    if (g->version == 0x02000000u || g->version == 0x03000000u)
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "big-endian GGUF is not supported");
    if (g->version != 2 && g->version != 3)
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "unsupported GGUF version %u (expected 2 or 3)", g->version);
    g->n_tensors = gguf_le(p + 8, 8);
    g->n_kv = gguf_le(p + 16, 8);
    uint64_t room = len - 24;
    if (g->n_kv > room / GGUF_MIN_KV_BYTES)
        return ai_err_set(err, AI_ERR_FORMAT, "n_kv %llu is more than a %llu-byte file could hold",
                          (unsigned long long)g->n_kv, (unsigned long long)len);
    room -= g->n_kv * GGUF_MIN_KV_BYTES;
    if (g->n_tensors > room / GGUF_MIN_TENSOR_BYTES)
        return ai_err_set(err, AI_ERR_FORMAT, "n_tensors %llu is more than a %llu-byte file could hold",
                          (unsigned long long)g->n_tensors, (unsigned long long)len);
    return AI_OK;
}

static ai_status check_tensors(gguf *g, uint64_t tensors_end, ai_err *err)
{
    uint64_t len = g->map.len, a = g->alignment;
    uint64_t pad = (a - tensors_end % a) % a;
    g->data_start = tensors_end + pad; /* tensors_end <= len < 2^63: no overflow */
    if (g->n_tensors == 0) {  /* no data section: the file may end without padding */
        if (g->data_start > len) g->data_start = len;
        return AI_OK;
    }
    if (g->data_start > len)
        return ai_err_set(err, AI_ERR_FORMAT, "data section starts at %llu, past the end of the file (%llu bytes)",
                          (unsigned long long)g->data_start, (unsigned long long)len);
    uint64_t room = len - g->data_start;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        char name[96];
        name_fmt(name, sizeof name, t->name);
        if (t->offset % a)
            return ai_err_set(err, AI_ERR_FORMAT, "tensor[%llu] '%s': offset %llu is not a multiple of the alignment %u",
                              (unsigned long long)i, name, (unsigned long long)t->offset, g->alignment);
        if (t->offset > room || t->nbytes > room - t->offset)
            return ai_err_set(err, AI_ERR_FORMAT,
                              "tensor[%llu] '%s': data [%llu, +%llu) is outside the %llu-byte data section",
                              (unsigned long long)i, name, (unsigned long long)t->offset,
                              (unsigned long long)t->nbytes, (unsigned long long)room);
        t->data = g->map.data + g->data_start + t->offset;
    }
    return AI_OK;
}

static ai_status gguf_build(gguf *g, ai_err *err)
{
    ai_status st = check_header(g, err);
    if (st != AI_OK) return st;
    struct walk w = {.r = {g->map.data, g->map.len, 24}};
    st = parse_file(g, &w, err); /* pass 1: validate, count */
    if (st != AI_OK) return st;
    g->alignment = w.alignment;

    uint64_t kv_cap = slots_for(g->n_kv), t_cap = slots_for(g->n_tensors);
    g->kv = calloc_n(g->n_kv, sizeof *g->kv);
    g->tensors = calloc_n(g->n_tensors, sizeof *g->tensors);
    g->str_off = calloc_n(w.n_str, sizeof *g->str_off);
    g->kv_slots = calloc_n(kv_cap, sizeof *g->kv_slots);
    g->tensor_slots = calloc_n(t_cap, sizeof *g->tensor_slots);
    if (!g->kv || !g->tensors || !g->str_off || !g->kv_slots || !g->tensor_slots)
        return ai_err_set(err, AI_ERR_NOMEM, "out of memory for the index of %llu keys, %llu tensors",
                          (unsigned long long)g->n_kv, (unsigned long long)g->n_tensors);
    g->kv_mask = kv_cap - 1;
    g->tensor_mask = t_cap - 1;

    st = parse_file(g, &w, err); /* pass 2: fill (cannot fail: same bytes) */
    if (st == AI_OK) st = slots_fill(g->kv_slots, g->kv_mask, g->kv, sizeof *g->kv, g->n_kv, "kv", err);
    if (st == AI_OK)
        st = slots_fill(g->tensor_slots, g->tensor_mask, g->tensors, sizeof *g->tensors, g->n_tensors,
                        "tensor", err);
    if (st == AI_OK) st = check_tensors(g, w.tensors_end, err);
    return st;
}

ai_status gguf_open(gguf **out, const char *path, ai_err *err)
{
    *out = NULL;
    gguf *g = calloc(1, sizeof *g);
    if (!g) return ai_err_set(err, AI_ERR_NOMEM, "%s: out of memory", path);
    ai_status st = file_map_open(&g->map, path, err);
    g->owns_map = st == AI_OK;
    if (st == AI_OK) {
        st = gguf_build(g, err);
        if (st != AI_OK) ai_err_prefix(err, "%s", path);
    }
    if (st != AI_OK) {
        gguf_close(g);
        return st;
    }
    *out = g;
    return AI_OK;
}

ai_status gguf_open_memory(gguf **out, const void *data, size_t len, const char *name, ai_err *err)
{
    *out = NULL;
    gguf *g = calloc(1, sizeof *g);
    if (!g) return ai_err_set(err, AI_ERR_NOMEM, "%s: out of memory", name);
    g->map.data = len ? data : NULL;
    g->map.len = len;
    ai_status st = gguf_build(g, err);
    if (st != AI_OK) {
        ai_err_prefix(err, "%s", name);
        gguf_close(g);
        return st;
    }
    *out = g;
    return AI_OK;
}

void gguf_close(gguf *g)
{
    if (!g) return;
    if (g->owns_map) file_map_close(&g->map);
    free(g->kv);
    free(g->tensors);
    free(g->str_off);
    free(g->kv_slots);
    free(g->tensor_slots);
    free(g);
}
