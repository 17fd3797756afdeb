/* cmd_gguf.c - `aiinfra gguf FILE [--json]`: print a GGUF file's metadata and tensor table.
 *
 * Text mode is for people: one line per key (type, value; long arrays as type[n] and
 * their first elements; strings quoted and escaped), then one line per tensor.
 * --json is for tests: one JSON object with every array element, keys in file order
 * (an array of {key, type, value}, since JSON objects need not keep order). Integers
 * and floats are written as exact text (cJSON raw nodes) so u64 values above 2^53 and
 * f32 values survive the round trip; strings are escaped by hand so embedded NULs and
 * invalid UTF-8 (shown as U+FFFD) cannot cut or corrupt the output.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "aiinfra/buf.h"
#include "aiinfra/gguf.h"
#include "aiinfra/utf8.h"
#include "tools/commands.h"

#define TEXT_ARRAY_HEAD 8 /* array elements shown in text mode */

// --- value rendering

/* Appends s as a quoted string; json selects JSON escapes (\u00XX) over C-style ones. */
static void put_quoted(buf *b, gguf_str s, bool json)
{
    buf_putc(b, '"');
    size_t i = 0;
    while (i < s.len) {
        unsigned char c = (unsigned char)s.ptr[i];
        uint32_t cp;
        if (c == '"' || c == '\\') { buf_putc(b, '\\'); buf_putc(b, (char)c); i++; continue; }
        if (c == '\n') { buf_puts(b, "\\n"); i++; continue; }
        if (c == '\t') { buf_puts(b, "\\t"); i++; continue; }
        if (c == '\r') { buf_puts(b, "\\r"); i++; continue; }
        if (c < 0x20 || c == 0x7f) {
            buf_printf(b, json ? "\\u%04x" : "\\x%02x", c);
            i++;
            continue;
        }
        size_t n = utf8_decode((const unsigned char *)s.ptr + i, s.len - i, &cp);
        if (n == 0) n = 1;
        if (cp == 0xFFFD && !(n == 3 && !memcmp(s.ptr + i, "\xEF\xBF\xBD", 3))) {
            if (json) buf_puts(b, "\xEF\xBF\xBD");   /* ill-formed bytes: U+FFFD */
            else for (size_t k = 0; k < n; k++) buf_printf(b, "\\x%02x", (unsigned char)s.ptr[i + k]);
        } else {
            buf_append(b, s.ptr + i, n);
        }
        i += n;
    }
    buf_putc(b, '"');
}

/* Appends one fixed-size value at p (little-endian) as exact text. */
static void put_scalar(buf *b, enum gguf_type t, const unsigned char *p, bool json)
{
    uint64_t u = 0;
    for (size_t k = 0; k < gguf_type_size(t); k++) u |= (uint64_t)p[k] << (8 * k);
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_UINT32: case GGUF_TYPE_UINT64:
        buf_printf(b, "%" PRIu64, u);
        return;
    case GGUF_TYPE_INT8: buf_printf(b, "%d", (int)(int8_t)u); return;
    case GGUF_TYPE_INT16: buf_printf(b, "%d", (int)(int16_t)u); return;
    case GGUF_TYPE_INT32: buf_printf(b, "%" PRId32, (int32_t)u); return;
    case GGUF_TYPE_INT64: buf_printf(b, "%" PRId64, (int64_t)u); return;
    case GGUF_TYPE_BOOL: buf_puts(b, u ? "true" : "false"); return;
    case GGUF_TYPE_FLOAT32: case GGUF_TYPE_FLOAT64: {
        double d;
        if (t == GGUF_TYPE_FLOAT32) {
            uint32_t w = (uint32_t)u;
            float f;
            memcpy(&f, &w, 4);
            d = f;
        } else {
            memcpy(&d, &u, 8);
        }
        if (isnan(d)) buf_puts(b, json ? "NaN" : "nan");
        else if (isinf(d)) buf_puts(b, d > 0 ? (json ? "Infinity" : "inf") : (json ? "-Infinity" : "-inf"));
        else buf_printf(b, t == GGUF_TYPE_FLOAT32 ? "%.9g" : "%.17g", d);
        return;
    }
    default: buf_puts(b, "null"); return;
    }
}

/* Appends the value of key i: scalars whole; arrays whole (limit 0) or their first `limit`. */
static void put_value(buf *b, const gguf *g, int64_t i, uint64_t limit, bool json)
{
    enum gguf_type t = gguf_kv_type(g, i), et;
    uint64_t n;
    gguf_str s;
    if (t == GGUF_TYPE_STRING && gguf_kv_str(g, i, &s)) { put_quoted(b, s, json); return; }
    if (t != GGUF_TYPE_ARRAY) { put_scalar(b, t, gguf_kv_data(g, i), json); return; }
    gguf_kv_arr(g, i, &et, &n);
    if (et == GGUF_TYPE_ARRAY) { buf_puts(b, json ? "null" : "[...]"); return; } /* nested: not exposed */
    uint64_t show = limit && n > limit ? limit : n;
    const unsigned char *p = gguf_kv_data(g, i);
    buf_putc(b, '[');
    for (uint64_t j = 0; j < show && !b->oom; j++) {
        if (j) buf_puts(b, ", ");
        if (et == GGUF_TYPE_STRING) {
            gguf_kv_arr_str(g, i, j, &s);
            put_quoted(b, s, json);
        } else {
            put_scalar(b, et, p + j * gguf_type_size(et), json);
        }
    }
    if (show < n) buf_puts(b, ", ...");
    buf_putc(b, ']');
}

static const char *ggml_name(uint32_t type)
{
    const char *s = gguf_ggml_type_name(type);
    return s ? s : "?";
}

// --- text mode

static int print_text(const gguf *g)
{
    buf b;
    buf_init(&b);
    printf("GGUF v%u, alignment %u, %" PRIu64 " keys, %" PRIu64 " tensors, data at byte %" PRIu64
           ", file %" PRIu64 " bytes\n",
           gguf_version(g), gguf_alignment(g), gguf_n_kv(g), gguf_n_tensors(g), gguf_data_offset(g),
           gguf_file_size(g));
    for (int64_t i = 0; i < (int64_t)gguf_n_kv(g); i++) {
        buf_clear(&b);
        put_quoted(&b, gguf_key(g, i), false);
        enum gguf_type t = gguf_kv_type(g, i), et;
        uint64_t n;
        if (gguf_kv_arr(g, i, &et, &n)) buf_printf(&b, "  %s[%" PRIu64 "]  ", gguf_type_name(et), n);
        else buf_printf(&b, "  %s  ", gguf_type_name(t));
        put_value(&b, g, i, TEXT_ARRAY_HEAD, false);
        printf("kv[%" PRId64 "] %s\n", i, b.data);
    }
    printf("tensors:\n");
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        buf_clear(&b);
        put_quoted(&b, t->name, false);
        buf_printf(&b, "  %s  [", ggml_name(t->ggml_type));
        for (uint32_t d = 0; d < t->n_dims; d++) buf_printf(&b, d ? ", %" PRIu64 : "%" PRIu64, t->ne[d]);
        buf_printf(&b, "]  offset %" PRIu64 "  bytes %" PRIu64, t->offset, t->nbytes);
        printf("  [%" PRIu64 "] %s\n", i, b.data);
    }
    bool oom = b.oom;
    buf_free(&b);
    if (oom) { fprintf(stderr, "aiinfra gguf: out of memory\n"); return 1; }
    return 0;
}

// --- JSON mode

static cJSON *raw(buf *b)
{
    return cJSON_CreateRaw(b->data ? b->data : "");
}

static int print_json(const gguf *g)
{
    cJSON *root = cJSON_CreateObject(), *kvs = cJSON_CreateArray(), *ts = cJSON_CreateArray();
    buf b;
    buf_init(&b);
    cJSON_AddNumberToObject(root, "version", gguf_version(g));
    cJSON_AddNumberToObject(root, "alignment", gguf_alignment(g));
    cJSON_AddNumberToObject(root, "data_offset", (double)gguf_data_offset(g));
    cJSON_AddNumberToObject(root, "file_size", (double)gguf_file_size(g));
    cJSON_AddItemToObject(root, "kv", kvs);
    cJSON_AddItemToObject(root, "tensors", ts);
    for (int64_t i = 0; i < (int64_t)gguf_n_kv(g); i++) {
        cJSON *o = cJSON_CreateObject();
        enum gguf_type t = gguf_kv_type(g, i), et;
        uint64_t n;
        buf_clear(&b);
        put_quoted(&b, gguf_key(g, i), true);
        cJSON_AddItemToObject(o, "key", raw(&b));
        cJSON_AddStringToObject(o, "type", gguf_type_name(t));
        if (gguf_kv_arr(g, i, &et, &n)) {
            cJSON_AddStringToObject(o, "elem_type", gguf_type_name(et));
            cJSON_AddNumberToObject(o, "n", (double)n);
        }
        buf_clear(&b);
        put_value(&b, g, i, 0, true);
        cJSON_AddItemToObject(o, "value", raw(&b));
        cJSON_AddItemToArray(kvs, o);
    }
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        cJSON *o = cJSON_CreateObject(), *shape = cJSON_CreateArray();
        buf_clear(&b);
        put_quoted(&b, t->name, true);
        cJSON_AddItemToObject(o, "name", raw(&b));
        cJSON_AddStringToObject(o, "type", ggml_name(t->ggml_type));
        cJSON_AddNumberToObject(o, "type_id", t->ggml_type);
        for (uint32_t d = 0; d < t->n_dims; d++) {
            buf_clear(&b);
            buf_printf(&b, "%" PRIu64, t->ne[d]);
            cJSON_AddItemToArray(shape, raw(&b));
        }
        cJSON_AddItemToObject(o, "shape", shape);
        buf_clear(&b);
        buf_printf(&b, "%" PRIu64, t->offset);
        cJSON_AddItemToObject(o, "offset", raw(&b));
        buf_clear(&b);
        buf_printf(&b, "%" PRIu64, t->nbytes);
        cJSON_AddItemToObject(o, "nbytes", raw(&b));
        cJSON_AddItemToArray(ts, o);
    }
    char *s = b.oom ? NULL : cJSON_PrintUnformatted(root);
    buf_free(&b);
    cJSON_Delete(root);
    if (!s) { fprintf(stderr, "aiinfra gguf: out of memory\n"); return 1; }
    fputs(s, stdout);
    fputc('\n', stdout);
    free(s);
    return 0;
}

int cmd_gguf(int argc, char **argv)
{
    const char *path = NULL;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: aiinfra gguf FILE [--json]\n");
            return 0;
        } else if (!path && argv[i][0] != '-') path = argv[i];
        else {
            fprintf(stderr, "aiinfra gguf: unexpected argument '%s'\nusage: aiinfra gguf FILE [--json]\n", argv[i]);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "usage: aiinfra gguf FILE [--json]\n");
        return 2;
    }
    gguf *g;
    ai_err err;
    if (gguf_open(&g, path, &err) != AI_OK) {
        fprintf(stderr, "aiinfra gguf: %s\n", err.msg);
        return 1;
    }
    int rc = json ? print_json(g) : print_text(g);
    gguf_close(g);
    return rc;
}
