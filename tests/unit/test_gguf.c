/* test_gguf.c - the GGUF reader against files written by a tiny writer in this test.
 *
 * The writer (wb_*) follows the byte layout in gguf.h, independently of the reader.
 * One valid file holds every value type, arrays of every type (strings, nested arrays,
 * an empty one), and tensors of several ggml types at a non-default alignment; every
 * getter is checked on it. Then corruption: the valid file truncated at every length,
 * and one hand-made file per validation rule, each required to fail with an error that
 * names the file and the reason (ASan/UBSan catch any read outside the map).
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "aiinfra/gguf.h"

// --- a tiny GGUF writer

typedef struct wb {
    unsigned char *p;
    size_t len, cap;
} wb;

static void wb_bytes(wb *w, const void *src, size_t n)
{
    if (w->len + n > w->cap) {
        w->cap = (w->len + n) * 2 + 64;
        w->p = realloc(w->p, w->cap);
        assert_non_null(w->p);
    }
    memcpy(w->p + w->len, src, n);
    w->len += n;
}

static void wb_le(wb *w, uint64_t v, int n)
{
    unsigned char b[8];
    for (int i = 0; i < n; i++) b[i] = (unsigned char)(v >> (8 * i));
    wb_bytes(w, b, (size_t)n);
}

static void wb_u32(wb *w, uint32_t v) { wb_le(w, v, 4); }
static void wb_u64(wb *w, uint64_t v) { wb_le(w, v, 8); }
static void wb_str(wb *w, const char *s) { wb_u64(w, strlen(s)); wb_bytes(w, s, strlen(s)); }
static void wb_f32(wb *w, float f) { uint32_t u; memcpy(&u, &f, 4); wb_u32(w, u); }
static void wb_f64(wb *w, double d) { uint64_t u; memcpy(&u, &d, 8); wb_u64(w, u); }

static void wb_header(wb *w, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    wb_bytes(w, "GGUF", 4);
    wb_u32(w, version);
    wb_u64(w, n_tensors);
    wb_u64(w, n_kv);
}

static void wb_key(wb *w, const char *key, uint32_t type) { wb_str(w, key); wb_u32(w, type); }
static void wb_kv_u32(wb *w, const char *key, uint32_t v) { wb_key(w, key, GGUF_TYPE_UINT32); wb_u32(w, v); }

static void wb_tensor(wb *w, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off)
{
    wb_str(w, name);
    wb_u32(w, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) wb_u64(w, ne[d]);
    wb_u32(w, type);
    wb_u64(w, off);
}

static void wb_pad(wb *w, size_t align)
{
    while (w->len % align) wb_le(w, 0, 1);
}

// --- temp files

static char tmpdir[64];
static char path[128];

static int group_setup(void **state)
{
    (void)state;
    strcpy(tmpdir, "/tmp/test_gguf.XXXXXX");
    if (!mkdtemp(tmpdir)) return -1;
    snprintf(path, sizeof path, "%s/t.gguf", tmpdir);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    unlink(path);
    rmdir(tmpdir);
    return 0;
}

static void write_file(const void *p, size_t n)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    if (n) assert_int_equal(fwrite(p, 1, n, fp), n);
    assert_int_equal(fclose(fp), 0);
}

/* Opening w's bytes must fail with `code` and a message naming the file and containing `want`. */
static void expect_fail(wb *w, ai_status code, const char *want)
{
    write_file(w->p, w->len);
    gguf *g = (gguf *)0x1;
    ai_err err = {0};
    ai_status st = gguf_open(&g, path, &err);
    if (st == AI_OK || !strstr(err.msg, want) || !strstr(err.msg, path))
        fail_msg("want failure containing '%s', got status %d: '%s'", want, (int)st, err.msg);
    assert_int_equal(st, code);
    assert_null(g);
    free(w->p);
    memset(w, 0, sizeof *w);
}

static gguf *open_ok(wb *w)
{
    write_file(w->p, w->len);
    gguf *g = NULL;
    ai_err err = {0};
    if (gguf_open(&g, path, &err) != AI_OK) fail_msg("open failed: %s", err.msg);
    return g;
}

// --- the valid file

static const uint64_t ne_f32[] = {4, 3}, ne_q40[] = {64, 2}, ne_q80[] = {32}, ne_bf16[] = {2, 2, 2, 2},
                      ne_q4k[] = {256};
#define ALIGN 64
#define N_VOCAB 300

/* Writes the valid test file; returns it (caller frees w->p). */
static void build_valid(wb *w, uint32_t version)
{
    wb_header(w, version, 5, 24);
    wb_key(w, "general.architecture", GGUF_TYPE_STRING); wb_str(w, "llama");
    wb_kv_u32(w, "general.alignment", ALIGN);
    wb_key(w, "u8", GGUF_TYPE_UINT8); wb_le(w, 200, 1);
    wb_key(w, "i8", GGUF_TYPE_INT8); wb_le(w, (uint8_t)-5, 1);
    wb_key(w, "u16", GGUF_TYPE_UINT16); wb_le(w, 65535, 2);
    wb_key(w, "i16", GGUF_TYPE_INT16); wb_le(w, (uint16_t)-300, 2);
    wb_kv_u32(w, "u32", 4000000000u);
    wb_key(w, "i32", GGUF_TYPE_INT32); wb_le(w, (uint32_t)-70000, 4);
    wb_key(w, "f32", GGUF_TYPE_FLOAT32); wb_f32(w, 1e-5f);
    wb_key(w, "bool", GGUF_TYPE_BOOL); wb_le(w, 1, 1);
    wb_key(w, "u64", GGUF_TYPE_UINT64); wb_u64(w, UINT64_MAX);
    wb_key(w, "i64", GGUF_TYPE_INT64); wb_u64(w, (uint64_t)INT64_MIN);
    wb_key(w, "f64", GGUF_TYPE_FLOAT64); wb_f64(w, 500000.25);
    wb_key(w, "empty", GGUF_TYPE_STRING); wb_str(w, "");
    /* arrays */
    wb_key(w, "arr.i32", GGUF_TYPE_ARRAY); wb_u32(w, GGUF_TYPE_INT32); wb_u64(w, 3);
    wb_le(w, (uint32_t)-1, 4); wb_le(w, 7, 4); wb_le(w, 0x7fffffff, 4);
    wb_key(w, "arr.f32", GGUF_TYPE_ARRAY); wb_u32(w, GGUF_TYPE_FLOAT32); wb_u64(w, 2);
    wb_f32(w, -0.5f); wb_f32(w, 3.25f);
    wb_key(w, "arr.u64", GGUF_TYPE_ARRAY); wb_u32(w, GGUF_TYPE_UINT64); wb_u64(w, 2);
    wb_u64(w, 5); wb_u64(w, UINT64_MAX);
    wb_key(w, "arr.bool", GGUF_TYPE_ARRAY); wb_u32(w, GGUF_TYPE_BOOL); wb_u64(w, 2);
    wb_le(w, 0, 1); wb_le(w, 1, 1);
    wb_key(w, "arr.f64", GGUF_TYPE_ARRAY); wb_u32(w, GGUF_TYPE_FLOAT64); wb_u64(w, 1); wb_f64(w, -2.5);
    wb_key(w, "arr.empty", GGUF_TYPE_ARRAY); wb_u32(w, GGUF_TYPE_UINT8); wb_u64(w, 0);
    wb_key(w, "tokenizer.ggml.tokens", GGUF_TYPE_ARRAY); wb_u32(w, GGUF_TYPE_STRING); wb_u64(w, N_VOCAB);
    for (int j = 0; j < N_VOCAB; j++) {
        char tok[32];
        snprintf(tok, sizeof tok, j % 7 ? "tok%d" : "", j);
        wb_str(w, tok);
    }
    /* nested: array of 2 arrays (u16 x2, string x1) */
    wb_key(w, "arr.nested", GGUF_TYPE_ARRAY); wb_u32(w, GGUF_TYPE_ARRAY); wb_u64(w, 2);
    wb_u32(w, GGUF_TYPE_UINT16); wb_u64(w, 2); wb_le(w, 1, 2); wb_le(w, 2, 2);
    wb_u32(w, GGUF_TYPE_STRING); wb_u64(w, 1); wb_str(w, "in");
    wb_key(w, "arr.str2", GGUF_TYPE_ARRAY); wb_u32(w, GGUF_TYPE_STRING); wb_u64(w, 2);
    wb_str(w, "a\"b"); wb_str(w, "\xE4\xB8\xAD");
    wb_key(w, "i16.small", GGUF_TYPE_INT16); wb_le(w, 12, 2);
    /* tensors, offsets multiples of ALIGN; the last one ends the file */
    wb_tensor(w, "tok_embd.weight", 2, ne_f32, 0, 0);        /* 48 bytes */
    wb_tensor(w, "blk.0.q4", 2, ne_q40, 2, 64);               /* 2 blocks/row * 2 rows * 18 = 72 */
    wb_tensor(w, "blk.0.q8", 1, ne_q80, 8, 192);              /* 34 */
    wb_tensor(w, "norm.bf16", 4, ne_bf16, 30, 256);           /* 32 */
    wb_tensor(w, "out.q4k", 1, ne_q4k, 12, 320);              /* 144 */
    wb_pad(w, ALIGN);
    size_t data = w->len;
    for (size_t k = 0; k < 320 + 144; k++) wb_le(w, (k * 7 + 3) & 0xff, 1);
    assert_int_equal(w->len, data + 464);
}

static void check_valid(gguf *g, uint32_t version)
{
    assert_int_equal(gguf_version(g), version);
    assert_int_equal(gguf_n_kv(g), 24);
    assert_int_equal(gguf_n_tensors(g), 5);
    assert_int_equal(gguf_alignment(g), ALIGN);
    assert_int_equal(gguf_data_offset(g) % ALIGN, 0);
    assert_int_equal(gguf_file_size(g), gguf_data_offset(g) + 464);

    /* keys by index and by name */
    gguf_str k = gguf_key(g, 0);
    assert_int_equal(k.len, 20);
    assert_memory_equal(k.ptr, "general.architecture", 20);
    assert_int_equal(gguf_kv_type(g, 0), GGUF_TYPE_STRING);
    assert_int_equal(gguf_find_key(g, "u8"), 2);
    assert_int_equal(gguf_find_key(g, "i16.small"), 23);
    assert_int_equal(gguf_find_key(g, "nope"), -1);
    assert_int_equal(gguf_find_key(g, "u"), -1);
    assert_null(gguf_key(g, 24).ptr);
    assert_null(gguf_key(g, -1).ptr);
    assert_int_equal(gguf_kv_type(g, 99), GGUF_TYPE_COUNT);
    assert_int_equal(gguf_kv_type(g, gguf_find_key(g, "f64")), GGUF_TYPE_FLOAT64);

    /* strings */
    gguf_str s;
    assert_true(gguf_get_str(g, "general.architecture", &s));
    assert_int_equal(s.len, 5);
    assert_memory_equal(s.ptr, "llama", 5);
    assert_true(gguf_get_str(g, "empty", &s));
    assert_int_equal(s.len, 0);
    assert_false(gguf_get_str(g, "u8", &s));
    assert_false(gguf_get_str(g, "missing", &s));

    /* integers convert when the value fits */
    uint32_t u32;
    int64_t i64;
    assert_true(gguf_get_u32(g, "u8", &u32));
    assert_int_equal(u32, 200);
    assert_true(gguf_get_u32(g, "u32", &u32));
    assert_int_equal(u32, 4000000000u);
    assert_true(gguf_get_u32(g, "u16", &u32));
    assert_int_equal(u32, 65535);
    assert_true(gguf_get_u32(g, "i16.small", &u32));
    assert_int_equal(u32, 12);
    assert_false(gguf_get_u32(g, "i8", &u32));   /* negative */
    assert_false(gguf_get_u32(g, "u64", &u32));  /* too big */
    assert_false(gguf_get_u32(g, "f32", &u32));  /* not an integer */
    assert_false(gguf_get_u32(g, "bool", &u32));
    assert_true(gguf_get_i64(g, "i8", &i64));
    assert_int_equal(i64, -5);
    assert_true(gguf_get_i64(g, "i16", &i64));
    assert_int_equal(i64, -300);
    assert_true(gguf_get_i64(g, "i32", &i64));
    assert_int_equal(i64, -70000);
    assert_true(gguf_get_i64(g, "i64", &i64));
    assert_true(i64 == INT64_MIN);
    assert_true(gguf_get_i64(g, "u32", &i64));
    assert_int_equal(i64, 4000000000);
    assert_false(gguf_get_i64(g, "u64", &i64));  /* > INT64_MAX */
    assert_false(gguf_get_i64(g, "arr.i32", &i64));

    float f;
    bool b;
    assert_true(gguf_get_f32(g, "f32", &f));
    assert_true(f == 1e-5f);
    assert_true(gguf_get_f32(g, "f64", &f));
    assert_true(f == 500000.25f);
    assert_false(gguf_get_f32(g, "u8", &f));
    assert_true(gguf_get_bool(g, "bool", &b));
    assert_true(b);
    assert_false(gguf_get_bool(g, "u8", &b));

    /* numeric arrays */
    enum gguf_type et;
    uint64_t n;
    assert_true(gguf_get_arr(g, "arr.i32", &et, &n));
    assert_int_equal(et, GGUF_TYPE_INT32);
    assert_int_equal(n, 3);
    assert_true(gguf_arr_i64(g, "arr.i32", 0, &i64));
    assert_int_equal(i64, -1);
    assert_true(gguf_arr_i64(g, "arr.i32", 2, &i64));
    assert_int_equal(i64, 0x7fffffff);
    assert_false(gguf_arr_i64(g, "arr.i32", 3, &i64));
    assert_true(gguf_arr_f32(g, "arr.i32", 1, &f));
    assert_true(f == 7.0f);
    assert_true(gguf_arr_f32(g, "arr.f32", 0, &f));
    assert_true(f == -0.5f);
    assert_true(gguf_arr_f32(g, "arr.f64", 0, &f));
    assert_true(f == -2.5f);
    assert_false(gguf_arr_i64(g, "arr.f32", 0, &i64));
    assert_true(gguf_arr_i64(g, "arr.u64", 0, &i64));
    assert_int_equal(i64, 5);
    assert_false(gguf_arr_i64(g, "arr.u64", 1, &i64));
    assert_true(gguf_arr_i64(g, "arr.bool", 1, &i64));
    assert_int_equal(i64, 1);
    int32_t raw[3];
    const void *d = gguf_arr_data(g, "arr.i32");
    assert_non_null(d);
    memcpy(raw, d, sizeof raw);
    assert_int_equal(raw[1], 7);
    assert_null(gguf_arr_data(g, "tokenizer.ggml.tokens"));
    assert_null(gguf_arr_data(g, "u8"));
    assert_true(gguf_get_arr(g, "arr.empty", &et, &n));
    assert_int_equal(n, 0);
    assert_false(gguf_arr_i64(g, "arr.empty", 0, &i64));
    assert_false(gguf_get_arr(g, "u32", &et, &n));
    assert_false(gguf_get_arr(g, "missing", &et, &n));

    /* string arrays: every element */
    assert_true(gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n));
    assert_int_equal(et, GGUF_TYPE_STRING);
    assert_int_equal(n, N_VOCAB);
    for (uint64_t j = 0; j < N_VOCAB; j++) {
        char want[32];
        snprintf(want, sizeof want, j % 7 ? "tok%d" : "", (int)j);
        assert_true(gguf_arr_str(g, "tokenizer.ggml.tokens", j, &s));
        assert_int_equal(s.len, strlen(want));
        assert_memory_equal(s.ptr, want, s.len);
    }
    assert_false(gguf_arr_str(g, "tokenizer.ggml.tokens", N_VOCAB, &s));
    assert_false(gguf_arr_str(g, "arr.i32", 0, &s));
    assert_false(gguf_arr_i64(g, "tokenizer.ggml.tokens", 0, &i64));
    assert_true(gguf_arr_str(g, "arr.str2", 1, &s));
    assert_int_equal(s.len, 3);
    assert_memory_equal(s.ptr, "\xE4\xB8\xAD", 3);

    /* nested arrays: parsed, exposed as ARRAY of ARRAY, no element getters */
    assert_true(gguf_get_arr(g, "arr.nested", &et, &n));
    assert_int_equal(et, GGUF_TYPE_ARRAY);
    assert_int_equal(n, 2);
    assert_false(gguf_arr_i64(g, "arr.nested", 0, &i64));
    assert_null(gguf_arr_data(g, "arr.nested"));

    /* tensors */
    const gguf_tensor *t = gguf_tensor_at(g, 0);
    assert_non_null(t);
    assert_int_equal(t->name.len, strlen("tok_embd.weight"));
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 4);
    assert_int_equal(t->ne[1], 3);
    assert_int_equal(t->ne[2], 1);
    assert_int_equal(t->ne[3], 1);
    assert_int_equal(t->nbytes, 48);
    const unsigned char *base = (const unsigned char *)t->data;
    assert_int_equal(base[0], 3);
    assert_int_equal(base[1], 10);
    struct { const char *name; uint32_t type; uint64_t off, nbytes; } want[] = {
        {"tok_embd.weight", 0, 0, 48}, {"blk.0.q4", 2, 64, 72}, {"blk.0.q8", 8, 192, 34},
        {"norm.bf16", 30, 256, 32}, {"out.q4k", 12, 320, 144},
    };
    for (int i = 0; i < 5; i++) {
        t = gguf_find_tensor(g, want[i].name);
        assert_non_null(t);
        assert_ptr_equal(t, gguf_tensor_at(g, (uint64_t)i));
        assert_int_equal(t->ggml_type, want[i].type);
        assert_int_equal(t->offset, want[i].off);
        assert_int_equal(t->nbytes, want[i].nbytes);
        assert_ptr_equal(t->data, base + want[i].off);
        assert_int_equal(((const unsigned char *)t->data)[0], (want[i].off * 7 + 3) & 0xff);
    }
    assert_null(gguf_find_tensor(g, "blk.0"));
    assert_null(gguf_tensor_at(g, 5));
    t = gguf_find_tensor(g, "norm.bf16");
    assert_int_equal(t->n_dims, 4);
    assert_int_equal(t->ne[3], 2);
}

static void test_valid_v3(void **state)
{
    (void)state;
    wb w = {0};
    build_valid(&w, 3);
    gguf *g = open_ok(&w);
    check_valid(g, 3);
    gguf_close(g);
    free(w.p);
}

static void test_valid_v2(void **state)
{
    (void)state;
    wb w = {0};
    build_valid(&w, 2);
    gguf *g = open_ok(&w);
    check_valid(g, 2);
    gguf_close(g);
    free(w.p);
}

/* No alignment key: the default 32; no tensors: the file may end right after the keys. */
static void test_defaults_and_empty(void **state)
{
    (void)state;
    wb w = {0};
    wb_header(&w, 3, 0, 0);
    gguf *g = open_ok(&w);
    assert_int_equal(gguf_alignment(g), 32);
    assert_int_equal(gguf_n_kv(g), 0);
    assert_int_equal(gguf_find_key(g, "x"), -1);
    assert_null(gguf_find_tensor(g, "x"));
    gguf_close(g);
    free(w.p);
    memset(&w, 0, sizeof w);

    uint64_t ne[] = {8};
    wb_header(&w, 3, 1, 1);
    wb_kv_u32(&w, "k", 1);
    wb_tensor(&w, "t", 1, ne, 0, 0);
    wb_pad(&w, 32);
    for (int i = 0; i < 32; i++) wb_le(&w, (uint64_t)i, 1);
    g = open_ok(&w);
    assert_int_equal(gguf_alignment(g), 32);
    assert_int_equal(gguf_data_offset(g) % 32, 0);
    assert_int_equal(((const unsigned char *)gguf_tensor_at(g, 0)->data)[5], 5);
    gguf_close(g);
    free(w.p);
}

/* Every strict prefix of the valid file must be rejected cleanly. Each prefix is an
 * exact-size heap copy, so ASan flags a read even one byte past it (a file map would
 * hide over-reads up to the page end); a few go through real files too. */
static void test_truncate_every_length(void **state)
{
    (void)state;
    wb w = {0};
    build_valid(&w, 3);
    for (size_t len = 0; len < w.len; len++) {
        unsigned char *copy = malloc(len ? len : 1);
        memcpy(copy, w.p, len);
        gguf *g = NULL;
        ai_err err = {0};
        ai_status st = gguf_open_memory(&g, copy, len, "cut", &err);
        free(copy);
        if (st == AI_OK) fail_msg("truncated to %zu of %zu bytes: opened", len, w.len);
        assert_null(g);
        assert_memory_equal(err.msg, "cut: ", 5);
    }
    for (size_t len = 0; len < w.len; len += 97) {
        write_file(w.p, len);
        gguf *g = NULL;
        ai_err err = {0};
        assert_int_not_equal(gguf_open(&g, path, &err), AI_OK);
        assert_non_null(strstr(err.msg, path));
    }
    free(w.p);
}

static void test_bad_header(void **state)
{
    (void)state;
    wb w = {0};
    wb_bytes(&w, "GGUX", 4); wb_u32(&w, 3); wb_u64(&w, 0); wb_u64(&w, 0);
    expect_fail(&w, AI_ERR_FORMAT, "bad magic");
    wb_header(&w, 1, 0, 0);
    expect_fail(&w, AI_ERR_UNSUPPORTED, "GGUF v1 is not supported");
    wb_header(&w, 4, 0, 0);
    expect_fail(&w, AI_ERR_UNSUPPORTED, "unsupported GGUF version 4");
    wb_header(&w, 0x03000000u, 0, 0);
    expect_fail(&w, AI_ERR_UNSUPPORTED, "big-endian");
    wb_header(&w, 3, 0, UINT64_MAX);
    expect_fail(&w, AI_ERR_FORMAT, "n_kv 18446744073709551615 is more than");
    wb_header(&w, 3, 0, 3); /* 3 keys cannot fit in 0 bytes */
    expect_fail(&w, AI_ERR_FORMAT, "n_kv 3");
    wb_header(&w, 3, (uint64_t)1 << 60, 0);
    expect_fail(&w, AI_ERR_FORMAT, "n_tensors 1152921504606846976 is more than");
    wb_bytes(&w, "GGUF", 4);
    expect_fail(&w, AI_ERR_FORMAT, "too short");
}

static void test_bad_kv(void **state)
{
    (void)state;
    wb w = {0};
    /* huge key length */
    wb_header(&w, 3, 0, 1); wb_u64(&w, UINT64_MAX - 3); wb_u32(&w, 0); wb_le(&w, 0, 1);
    expect_fail(&w, AI_ERR_FORMAT, "kv[0] '': key: length 18446744073709551612");
    /* huge string value length */
    wb_header(&w, 3, 0, 1); wb_key(&w, "s", GGUF_TYPE_STRING); wb_u64(&w, 1000); wb_bytes(&w, "abc", 3);
    expect_fail(&w, AI_ERR_FORMAT, "kv[0] 's': string value: length 1000");
    /* unknown value type */
    wb_header(&w, 3, 0, 1); wb_key(&w, "x", 13); wb_u32(&w, 0);
    expect_fail(&w, AI_ERR_FORMAT, "kv[0] 'x': unknown value type 13");
    /* unknown array element type */
    wb_header(&w, 3, 0, 1); wb_key(&w, "a", GGUF_TYPE_ARRAY); wb_u32(&w, 99); wb_u64(&w, 0);
    expect_fail(&w, AI_ERR_FORMAT, "unknown array element type 99");
    /* huge array count (numeric and string) */
    wb_header(&w, 3, 0, 1); wb_key(&w, "a", GGUF_TYPE_ARRAY); wb_u32(&w, GGUF_TYPE_UINT32);
    wb_u64(&w, (uint64_t)1 << 62); wb_u32(&w, 0);
    expect_fail(&w, AI_ERR_FORMAT, "array of 4611686018427387904 uint32 elements cannot fit");
    wb_header(&w, 3, 0, 1); wb_key(&w, "a", GGUF_TYPE_ARRAY); wb_u32(&w, GGUF_TYPE_STRING);
    wb_u64(&w, UINT64_MAX); wb_str(&w, "x");
    expect_fail(&w, AI_ERR_FORMAT, "elements cannot fit");
    /* a bad element deep in a string array is named */
    wb_header(&w, 3, 0, 1); wb_key(&w, "tokenizer.ggml.tokens", GGUF_TYPE_ARRAY); wb_u32(&w, GGUF_TYPE_STRING);
    wb_u64(&w, 4); wb_str(&w, "a"); wb_str(&w, "b"); wb_u64(&w, 1u << 30); wb_str(&w, "d");
    expect_fail(&w, AI_ERR_FORMAT, "kv[0] 'tokenizer.ggml.tokens': element 2: string: length 1073741824");
    /* nesting too deep */
    wb_header(&w, 3, 0, 1); wb_key(&w, "deep", GGUF_TYPE_ARRAY);
    for (int i = 0; i < 20; i++) { wb_u32(&w, GGUF_TYPE_ARRAY); wb_u64(&w, 1); }
    wb_u32(&w, GGUF_TYPE_UINT8); wb_u64(&w, 0);
    expect_fail(&w, AI_ERR_FORMAT, "nested deeper");
    /* duplicate keys */
    wb_header(&w, 3, 0, 3); wb_kv_u32(&w, "a", 1); wb_kv_u32(&w, "b", 2); wb_kv_u32(&w, "a", 3);
    expect_fail(&w, AI_ERR_FORMAT, "duplicate kv 'a' (kv[0] and kv[2])");
    /* alignment: zero, not a power of two, wrong type */
    wb_header(&w, 3, 0, 1); wb_kv_u32(&w, "general.alignment", 0);
    expect_fail(&w, AI_ERR_FORMAT, "0 is not a non-zero power of two");
    wb_header(&w, 3, 0, 1); wb_kv_u32(&w, "general.alignment", 48);
    expect_fail(&w, AI_ERR_FORMAT, "48 is not a non-zero power of two");
    wb_header(&w, 3, 0, 1); wb_key(&w, "general.alignment", GGUF_TYPE_UINT64); wb_u64(&w, 32);
    expect_fail(&w, AI_ERR_FORMAT, "'general.alignment': type uint64, expected uint32");
}

/* A file with one tensor (after `kv` keys) whose fields are given. */
static void one_tensor(wb *w, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off, size_t data)
{
    wb_header(w, 3, 1, 0);
    wb_tensor(w, "t.weight", n_dims, ne, type, off);
    wb_pad(w, 32);
    for (size_t i = 0; i < data; i++) wb_le(w, 0, 1);
}

static void test_bad_tensors(void **state)
{
    (void)state;
    wb w = {0};
    uint64_t ne[5] = {32, 2, 1, 1, 1};
    one_tensor(&w, 2, ne, 0, 0, 256);
    gguf *g = open_ok(&w); /* the baseline is valid */
    gguf_close(g);
    free(w.p);
    memset(&w, 0, sizeof w);

    one_tensor(&w, 0, ne, 0, 0, 256);
    expect_fail(&w, AI_ERR_FORMAT, "tensor[0] 't.weight': n_dims 0 (must be 1..4)");
    one_tensor(&w, 5, ne, 0, 0, 256);
    expect_fail(&w, AI_ERR_FORMAT, "n_dims 5");
    one_tensor(&w, 2, ne, 4, 0, 256);
    expect_fail(&w, AI_ERR_FORMAT, "unknown ggml type 4");
    one_tensor(&w, 2, ne, 1000, 0, 256);
    expect_fail(&w, AI_ERR_FORMAT, "unknown ggml type 1000");
    one_tensor(&w, 2, ne, 0, 256, 256);      /* data [256, 512) past the 256-byte section */
    expect_fail(&w, AI_ERR_FORMAT, "outside the 256-byte data section");
    one_tensor(&w, 2, ne, 0, UINT64_MAX - 31, 256);
    expect_fail(&w, AI_ERR_FORMAT, "outside");
    one_tensor(&w, 2, ne, 0, 16, 256);
    expect_fail(&w, AI_ERR_FORMAT, "offset 16 is not a multiple of the alignment 32");
    one_tensor(&w, 2, ne, 2, 0, 256);        /* q4_0 needs 1 block/row: fine */
    g = open_ok(&w);
    gguf_close(g);
    free(w.p);
    memset(&w, 0, sizeof w);
    uint64_t ne_odd[] = {33, 1};
    one_tensor(&w, 2, ne_odd, 2, 0, 256);
    expect_fail(&w, AI_ERR_FORMAT, "ne[0]=33 is not a multiple of the q4_0 block size 32");
    uint64_t ne_zero[] = {4, 0};
    one_tensor(&w, 2, ne_zero, 0, 0, 256);
    expect_fail(&w, AI_ERR_FORMAT, "ne[1] is 0");
    uint64_t ne_huge[] = {1ull << 40, 1ull << 40};
    one_tensor(&w, 2, ne_huge, 0, 0, 256);
    expect_fail(&w, AI_ERR_FORMAT, "overflow");
    uint64_t ne_big[] = {1ull << 61};
    one_tensor(&w, 1, ne_big, 0, 0, 256);    /* 2^61 f32 = 2^63 bytes: fits u64, not the file */
    expect_fail(&w, AI_ERR_FORMAT, "outside");
    /* duplicate tensor names */
    wb_header(&w, 3, 2, 0);
    wb_tensor(&w, "t", 1, ne, 0, 0);
    wb_tensor(&w, "t", 1, ne, 0, 128);
    wb_pad(&w, 32);
    for (int i = 0; i < 256; i++) wb_le(&w, 0, 1);
    expect_fail(&w, AI_ERR_FORMAT, "duplicate tensor 't' (tensor[0] and tensor[1])");
    /* data section start past the end (tensor table ends mid-padding) */
    wb_header(&w, 3, 1, 0);
    wb_tensor(&w, "t", 1, ne, 0, 0);
    expect_fail(&w, AI_ERR_FORMAT, "past the end of the file");
}

static void test_open_memory(void **state)
{
    (void)state;
    wb w = {0};
    build_valid(&w, 3);
    gguf *g = NULL;
    ai_err err = {0};
    assert_int_equal(gguf_open_memory(&g, w.p, w.len, "mem", &err), AI_OK);
    check_valid(g, 3);
    gguf_close(g);
    w.p[4] = 9; /* version 9 */
    assert_int_equal(gguf_open_memory(&g, w.p, w.len, "mem", &err), AI_ERR_UNSUPPORTED);
    assert_null(g);
    assert_string_equal(err.msg, "mem: unsupported GGUF version 9 (expected 2 or 3)");
    assert_int_equal(gguf_open_memory(&g, NULL, 0, "empty", &err), AI_ERR_FORMAT);
    free(w.p);
}

static void test_missing_file(void **state)
{
    (void)state;
    gguf *g = (gguf *)0x1;
    ai_err err;
    assert_int_equal(gguf_open(&g, "/nonexistent/x.gguf", &err), AI_ERR_IO);
    assert_null(g);
    assert_non_null(strstr(err.msg, "/nonexistent/x.gguf"));
    gguf_close(NULL);
}

static void test_type_tables(void **state)
{
    (void)state;
    uint32_t be, bb;
    assert_true(gguf_ggml_type_size(2, &be, &bb));
    assert_int_equal(be, 32);
    assert_int_equal(bb, 18);
    assert_true(gguf_ggml_type_size(30, &be, &bb));
    assert_int_equal(bb, 2);
    assert_false(gguf_ggml_type_size(5, &be, &bb));
    assert_false(gguf_ggml_type_size(42, &be, &bb));
    assert_string_equal(gguf_ggml_type_name(14), "q6_K");
    assert_null(gguf_ggml_type_name(31));
    assert_string_equal(gguf_type_name(GGUF_TYPE_FLOAT64), "float64");
    assert_string_equal(gguf_type_name(GGUF_TYPE_COUNT), "unknown");
    assert_int_equal(gguf_type_size(GGUF_TYPE_STRING), 0);
    assert_int_equal(gguf_type_size(GGUF_TYPE_INT16), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_v3),
        cmocka_unit_test(test_valid_v2),
        cmocka_unit_test(test_defaults_and_empty),
        cmocka_unit_test(test_truncate_every_length),
        cmocka_unit_test(test_bad_header),
        cmocka_unit_test(test_bad_kv),
        cmocka_unit_test(test_bad_tensors),
        cmocka_unit_test(test_open_memory),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_type_tables),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
