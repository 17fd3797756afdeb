/* safetensors.c - opens one .safetensors file: maps it, parses the JSON header (cJSON),
 * validates every tensor entry against the file, and indexes names.
 *
 * Invariants after a successful safetensors_open:
 *   1. 8 + N <= file size, N <= 100 MB; bytes after the JSON value in the header are
 *      whitespace only (writers pad with spaces).
 *   2. Every tensor has a known dtype, 0..8 dims, and data_offsets [begin, end] with
 *      end - begin == prod(shape) * dtype size (overflow-checked).
 *   3. Sorted by begin, the tensors tile the data section exactly: the first begins at 0,
 *      each begins where the previous ended, the last ends at the file end. So no
 *      tensor overlaps another or the file end, and no bytes are unaccounted for (the
 *      same rule as the reference Rust implementation).
 *   4. Names are unique (JSON allows duplicate keys; we do not).
 * Numbers in the header pass through cJSON's double, so offsets and dims above 2^53 are
 * rejected as too large rather than silently rounded.
 */
#include "aiinfra/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "aiinfra/fileio.h"
#include "formats/name_table.h"

#define ST_MAX_HEADER (100u << 20)
#define ST_MAX_EXACT 9007199254740992.0 /* 2^53 */

struct safetensors {
    file_map map;                 /* the file, or the caller's bytes (owns_map false) */
    bool owns_map;
    cJSON *header;
    cJSON *metadata;              /* __metadata__ object or NULL */
    uint64_t data_start;          /* 8 + N */
    uint64_t n_tensors;
    safetensors_tensor *tensors;  /* (n_tensors), header order */
    name_table names;
};

static const struct {
    const char *name;
    size_t size;
} dtypes[ST_DTYPE_COUNT] = {
    [ST_BOOL] = {"BOOL", 1}, [ST_U8] = {"U8", 1},   [ST_I8] = {"I8", 1},
    [ST_U16] = {"U16", 2},   [ST_I16] = {"I16", 2}, [ST_U32] = {"U32", 4},
    [ST_I32] = {"I32", 4},   [ST_U64] = {"U64", 8}, [ST_I64] = {"I64", 8},
    [ST_F16] = {"F16", 2},   [ST_BF16] = {"BF16", 2}, [ST_F32] = {"F32", 4},
    [ST_F64] = {"F64", 8},   [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_F8_E5M2] = {"F8_E5M2", 1},
};

const char *safetensors_dtype_name(enum safetensors_dtype dt)
{
    return (unsigned)dt < ST_DTYPE_COUNT ? dtypes[dt].name : NULL;
}

size_t safetensors_dtype_size(enum safetensors_dtype dt)
{
    return (unsigned)dt < ST_DTYPE_COUNT ? dtypes[dt].size : 0;
}

// --- header entries

/* A JSON number that is a non-negative integer below 2^53. */
static bool json_u64(const cJSON *j, uint64_t *out)
{
    if (!cJSON_IsNumber(j)) return false;
    double d = j->valuedouble;
    if (!(d >= 0) || d >= ST_MAX_EXACT || floor(d) != d) return false; /* 2^53 may be a rounded 2^53+1 */
    *out = (uint64_t)d;
    return true;
}

static ai_status parse_entry(const cJSON *e, safetensors_tensor *t, uint64_t data_len, ai_err *err)
{
    if (!cJSON_IsObject(e)) return ai_err_set(err, AI_ERR_FORMAT, "entry is not a JSON object");
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt)) return ai_err_set(err, AI_ERR_FORMAT, "missing or non-string 'dtype'");
    int k = 0;
    while (k < ST_DTYPE_COUNT && strcmp(dtypes[k].name, dt->valuestring)) k++;
    if (k == ST_DTYPE_COUNT) return ai_err_set(err, AI_ERR_FORMAT, "unknown dtype '%.32s'", dt->valuestring);
    t->dtype = (enum safetensors_dtype)k;

    if (!cJSON_IsArray(shape)) return ai_err_set(err, AI_ERR_FORMAT, "missing or non-array 'shape'");
    int nd = cJSON_GetArraySize(shape);
    if (nd > SAFETENSORS_MAX_DIMS)
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "%d dims (at most %d)", nd, SAFETENSORS_MAX_DIMS);
    t->n_dims = (uint32_t)nd;
    uint64_t nelem = 1;
    bool zero = false;
    int d = 0;
    for (int i = 0; i < SAFETENSORS_MAX_DIMS; i++) t->shape[i] = 1;
    for (const cJSON *s = shape->child; s; s = s->next, d++) {
        if (!json_u64(s, &t->shape[d]))
            return ai_err_set(err, AI_ERR_FORMAT, "shape[%d] is not a non-negative integer below 2^53", d);
        if (t->shape[d] == 0) zero = true;
        else if (nelem > UINT64_MAX / t->shape[d]) return ai_err_set(err, AI_ERR_FORMAT, "shape overflows");
        else nelem *= t->shape[d];
    }
    if (zero) nelem = 0;
    if (nelem > UINT64_MAX / dtypes[k].size) return ai_err_set(err, AI_ERR_FORMAT, "byte size overflows");
    uint64_t want = nelem * dtypes[k].size;

    uint64_t begin, end;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !json_u64(offs->child, &begin) ||
        !json_u64(offs->child->next, &end))
        return ai_err_set(err, AI_ERR_FORMAT, "'data_offsets' must be [begin, end], integers below 2^53");
    if (begin > end)
        return ai_err_set(err, AI_ERR_FORMAT, "data_offsets [%llu, %llu]: begin after end",
                          (unsigned long long)begin, (unsigned long long)end);
    if (end > data_len)
        return ai_err_set(err, AI_ERR_FORMAT, "data_offsets [%llu, %llu] run past the %llu-byte data section",
                          (unsigned long long)begin, (unsigned long long)end, (unsigned long long)data_len);
    if (end - begin != want)
        return ai_err_set(err, AI_ERR_FORMAT, "data_offsets span %llu bytes but shape x %s needs %llu",
                          (unsigned long long)(end - begin), dtypes[k].name, (unsigned long long)want);
    t->offset = begin;
    t->nbytes = want;
    return AI_OK;
}

static int cmp_offset(const void *a, const void *b)
{
    const safetensors_tensor *x = *(const safetensors_tensor *const *)a, *y = *(const safetensors_tensor *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes; /* empty tensors first */
}

/* Invariant 3: sorted by offset, the tensors tile [0, data_len). */
static ai_status check_tiling(safetensors *st, uint64_t data_len, ai_err *err)
{
    if (st->n_tensors == 0) {
        if (data_len) return ai_err_set(err, AI_ERR_FORMAT, "%llu data bytes but no tensors", (unsigned long long)data_len);
        return AI_OK;
    }
    const safetensors_tensor **by = malloc(st->n_tensors * sizeof *by);
    if (!by) return ai_err_set(err, AI_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < st->n_tensors; i++) by[i] = &st->tensors[i];
    qsort(by, st->n_tensors, sizeof *by, cmp_offset);
    uint64_t at = 0;
    ai_status rc = AI_OK;
    for (uint64_t i = 0; i < st->n_tensors && rc == AI_OK; i++) {
        const safetensors_tensor *t = by[i];
        if (t->offset < at)
            rc = ai_err_set(err, AI_ERR_FORMAT, "tensor '%.200s' [%llu, %llu) overlaps tensor '%.200s' (ends at %llu)",
                            t->name, (unsigned long long)t->offset, (unsigned long long)(t->offset + t->nbytes),
                            by[i - 1]->name, (unsigned long long)at);
        else if (t->offset > at)
            rc = ai_err_set(err, AI_ERR_FORMAT, "data bytes [%llu, %llu) belong to no tensor (a hole before '%.200s')",
                            (unsigned long long)at, (unsigned long long)t->offset, t->name);
        at = t->offset + t->nbytes;
    }
    if (rc == AI_OK && at != data_len)
        rc = ai_err_set(err, AI_ERR_FORMAT, "the tensors end at data byte %llu but the data section has %llu bytes",
                        (unsigned long long)at, (unsigned long long)data_len);
    free(by);
    return rc;
}

static ai_status parse_header(safetensors *st, ai_err *err)
{
    const unsigned char *p = st->map.data;
    uint64_t len = st->map.len;
    if (len < 8) return ai_err_set(err, AI_ERR_FORMAT, "file too short (%llu bytes) for the header length", (unsigned long long)len);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)p[i] << (8 * i);
    if (n > len - 8)
        return ai_err_set(err, AI_ERR_FORMAT, "header length %llu exceeds the file (%llu bytes): not a safetensors file or truncated",
                          (unsigned long long)n, (unsigned long long)len);
    if (n > ST_MAX_HEADER)
        return ai_err_set(err, AI_ERR_FORMAT, "header length %llu is over the %u-byte limit", (unsigned long long)n, ST_MAX_HEADER);
    const char *h = (const char *)p + 8;
    if (n < 2 || h[0] != '{') return ai_err_set(err, AI_ERR_FORMAT, "header does not start with '{'");
    const char *end = NULL;
    st->header = cJSON_ParseWithLengthOpts(h, (size_t)n, &end, 0);
    if (!st->header) {
        size_t at = end && end >= h && end <= h + n ? (size_t)(end - h) : 0;
        return ai_err_set(err, AI_ERR_FORMAT, "header is not valid JSON (near header byte %zu)", at);
    }
    for (const char *q = end; q < h + n; q++)
        if (*q != ' ' && *q != '\t' && *q != '\n' && *q != '\r')
            return ai_err_set(err, AI_ERR_FORMAT, "header has bytes after its JSON object (header byte %zu)",
                              (size_t)(q - h));
    if (!cJSON_IsObject(st->header)) return ai_err_set(err, AI_ERR_FORMAT, "header is not a JSON object");
    st->data_start = 8 + n;
    return AI_OK;
}

static ai_status build(safetensors *st, ai_err *err)
{
    ai_status rc = parse_header(st, err);
    if (rc != AI_OK) return rc;
    uint64_t data_len = st->map.len - st->data_start;
    for (const cJSON *e = st->header->child; e; e = e->next) /* pass 1: count */
        if (strcmp(e->string, "__metadata__")) st->n_tensors++;
    st->tensors = calloc(st->n_tensors ? st->n_tensors : 1, sizeof *st->tensors);
    if (!st->tensors || !name_table_init(&st->names, st->n_tensors))
        return ai_err_set(err, AI_ERR_NOMEM, "out of memory for %llu tensors", (unsigned long long)st->n_tensors);
    uint64_t i = 0;
    for (const cJSON *e = st->header->child; e; e = e->next) { /* pass 2: fill */
        if (!strcmp(e->string, "__metadata__")) {
            if (st->metadata) return ai_err_set(err, AI_ERR_FORMAT, "duplicate '__metadata__'");
            if (!cJSON_IsObject(e)) return ai_err_set(err, AI_ERR_FORMAT, "'__metadata__' is not an object");
            for (const cJSON *m = e->child; m; m = m->next)
                if (!cJSON_IsString(m))
                    return ai_err_set(err, AI_ERR_FORMAT, "__metadata__ '%.200s': value is not a string", m->string);
            st->metadata = (cJSON *)e;
            continue;
        }
        safetensors_tensor *t = &st->tensors[i];
        t->name = e->string;
        rc = parse_entry(e, t, data_len, err);
        if (rc != AI_OK) return ai_err_prefix(err, "tensor '%.200s'", e->string);
        if (name_table_put(&st->names, t->name, t))
            return ai_err_set(err, AI_ERR_FORMAT, "duplicate tensor name '%.200s'", t->name);
        t->data = st->map.data + st->data_start + t->offset;
        i++;
    }
    return check_tiling(st, data_len, err);
}

ai_status safetensors_open(safetensors **out, const char *path, ai_err *err)
{
    *out = NULL;
    safetensors *st = calloc(1, sizeof *st);
    if (!st) return ai_err_set(err, AI_ERR_NOMEM, "%s: out of memory", path);
    ai_status rc = file_map_open(&st->map, path, err);
    st->owns_map = rc == AI_OK;
    if (rc == AI_OK && (rc = build(st, err)) != AI_OK) ai_err_prefix(err, "%s", path);
    if (rc != AI_OK) {
        safetensors_close(st);
        return rc;
    }
    *out = st;
    return AI_OK;
}

ai_status safetensors_open_memory(safetensors **out, const void *data, size_t len, const char *name, ai_err *err)
{
    *out = NULL;
    safetensors *st = calloc(1, sizeof *st);
    if (!st) return ai_err_set(err, AI_ERR_NOMEM, "%s: out of memory", name);
    st->map.data = len ? data : NULL;
    st->map.len = len;
    ai_status rc = build(st, err);
    if (rc != AI_OK) {
        ai_err_prefix(err, "%s", name);
        safetensors_close(st);
        return rc;
    }
    *out = st;
    return AI_OK;
}

void safetensors_close(safetensors *st)
{
    if (!st) return;
    if (st->owns_map) file_map_close(&st->map);
    cJSON_Delete(st->header);
    free(st->tensors);
    name_table_free(&st->names);
    free(st);
}

uint64_t safetensors_n_tensors(const safetensors *st) { return st->n_tensors; }

const safetensors_tensor *safetensors_tensor_at(const safetensors *st, uint64_t i)
{
    return i < st->n_tensors ? &st->tensors[i] : NULL;
}

const safetensors_tensor *safetensors_find(const safetensors *st, const char *name)
{
    return name_table_find(&st->names, name);
}

const char *safetensors_metadata(const safetensors *st, const char *key)
{
    const cJSON *v = st->metadata ? cJSON_GetObjectItemCaseSensitive(st->metadata, key) : NULL;
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

bool safetensors_metadata_at(const safetensors *st, uint64_t i, const char **key, const char **value)
{
    const cJSON *m = st->metadata ? st->metadata->child : NULL;
    for (; m && i; i--) m = m->next;
    if (!m) return false;
    *key = m->string;
    *value = m->valuestring; /* strings only: checked at open */
    return true;
}
