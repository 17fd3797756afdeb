/* test_safetensors.c - safetensors reader and sharded model folders, on files this
 * test writes (u64 header length + JSON header + data, per the format description in
 * safetensors.h), then corrupted variants: every truncation of a valid file, and one
 * file per validation rule, each required to fail with a message naming the reason.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "aiinfra/safetensors.h"

static char dir[64];

static char *pathf(const char *name)
{
    static char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

static int group_setup(void **state)
{
    (void)state;
    strcpy(dir, "/tmp/test_st.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    const char *names[] = {"a.safetensors", "model.safetensors", "model.safetensors.index.json",
                           "s1.safetensors", "s2.safetensors"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) unlink(pathf(names[i]));
    rmdir(dir);
    return 0;
}

/* Writes u64 len(header) + header (padded with spaces to `pad`) + data_len bytes (k*5+1). */
static size_t write_st(const char *name, const char *header, size_t pad, size_t data_len)
{
    FILE *fp = fopen(pathf(name), "wb");
    assert_non_null(fp);
    size_t hl = strlen(header) + pad;
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    fwrite(le, 1, 8, fp);
    fputs(header, fp);
    for (size_t i = 0; i < pad; i++) fputc(' ', fp);
    for (size_t k = 0; k < data_len; k++) fputc((int)((k * 5 + 1) & 0xff), fp);
    assert_int_equal(fclose(fp), 0);
    return 8 + hl + data_len;
}

static void write_text(const char *name, const char *text)
{
    FILE *fp = fopen(pathf(name), "wb");
    assert_non_null(fp);
    fputs(text, fp);
    assert_int_equal(fclose(fp), 0);
}

static void expect_fail(const char *header, size_t data_len, const char *want)
{
    write_st("a.safetensors", header, 0, data_len);
    safetensors *st = (safetensors *)0x1;
    ai_err err = {0};
    ai_status rc = safetensors_open(&st, pathf("a.safetensors"), &err);
    if (rc == AI_OK || !strstr(err.msg, want) || !strstr(err.msg, "a.safetensors"))
        fail_msg("header %s: want failure with '%s', got %d '%s'", header, want, (int)rc, err.msg);
    assert_null(st);
}

/* 24 f32 bytes, 8 bf16 bytes, 8 i64 bytes (scalar), 0 u8 bytes, 4 f8 bytes, 3 bool bytes = 47 */
static const char *valid_header =
    "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"x\"},"
    "\"w.f32\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
    "\"w.bf16\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]},"
    "\"step\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]},"
    "\"empty\":{\"dtype\":\"U8\",\"shape\":[0,7],\"data_offsets\":[40,40]},"
    "\"w.f8\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,2],\"data_offsets\":[40,44]},"
    "\"mask\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[44,47]}}";

static void test_valid(void **state)
{
    (void)state;
    size_t total = write_st("a.safetensors", valid_header, 5, 47);
    safetensors *st;
    ai_err err;
    if (safetensors_open(&st, pathf("a.safetensors"), &err) != AI_OK) fail_msg("%s", err.msg);
    assert_int_equal(safetensors_n_tensors(st), 6);
    assert_string_equal(safetensors_metadata(st, "format"), "pt");
    assert_null(safetensors_metadata(st, "missing"));
    const char *mk, *mv;
    assert_true(safetensors_metadata_at(st, 1, &mk, &mv));
    assert_string_equal(mk, "note");
    assert_string_equal(mv, "x");
    assert_false(safetensors_metadata_at(st, 2, &mk, &mv));
    const safetensors_tensor *t = safetensors_find(st, "w.f32");
    assert_non_null(t);
    assert_ptr_equal(t, safetensors_tensor_at(st, 0));
    assert_int_equal(t->dtype, ST_F32);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->shape[0], 2);
    assert_int_equal(t->shape[1], 3);
    assert_int_equal(t->shape[2], 1);
    assert_int_equal(t->nbytes, 24);
    const unsigned char *base = t->data;
    size_t data_start = total - 47;
    (void)data_start;
    assert_int_equal(base[0], 1);
    assert_int_equal(base[1], 6);
    t = safetensors_find(st, "step");
    assert_int_equal(t->n_dims, 0);
    assert_int_equal(t->nbytes, 8);
    assert_ptr_equal(t->data, base + 32);
    t = safetensors_find(st, "empty");
    assert_int_equal(t->nbytes, 0);
    assert_int_equal(t->shape[0], 0);
    t = safetensors_find(st, "mask");
    assert_int_equal(t->dtype, ST_BOOL);
    assert_int_equal(((const unsigned char *)t->data)[2], (46 * 5 + 1) & 0xff);
    assert_int_equal(safetensors_find(st, "w.f8")->dtype, ST_F8_E4M3);
    assert_null(safetensors_find(st, "w"));
    assert_null(safetensors_find(st, "__metadata__"));
    assert_null(safetensors_tensor_at(st, 6));
    assert_string_equal(safetensors_dtype_name(ST_BF16), "BF16");
    assert_int_equal(safetensors_dtype_size(ST_F64), 8);
    assert_int_equal(safetensors_dtype_size(ST_F8_E5M2), 1);
    assert_null(safetensors_dtype_name(ST_DTYPE_COUNT));
    safetensors_close(st);
}

static void test_truncate_every_length(void **state)
{
    (void)state;
    size_t total = write_st("model.safetensors", valid_header, 3, 47);
    FILE *fp = fopen(pathf("model.safetensors"), "rb");
    unsigned char *bytes = malloc(total);
    assert_int_equal(fread(bytes, 1, total, fp), total);
    fclose(fp);
    for (size_t len = 0; len < total; len++) { /* exact-size heap copies: ASan sees any over-read */
        unsigned char *copy = malloc(len ? len : 1);
        memcpy(copy, bytes, len);
        safetensors *st = NULL;
        ai_err err = {0};
        ai_status rc = safetensors_open_memory(&st, copy, len, "cut", &err);
        free(copy);
        if (rc == AI_OK) fail_msg("truncated to %zu of %zu bytes: opened", len, total);
    }
    for (size_t len = 0; len < total; len += 37) {
        fp = fopen(pathf("a.safetensors"), "wb");
        fwrite(bytes, 1, len, fp);
        fclose(fp);
        safetensors *st = NULL;
        ai_err err = {0};
        if (safetensors_open(&st, pathf("a.safetensors"), &err) == AI_OK)
            fail_msg("truncated to %zu of %zu bytes: opened", len, total);
        assert_non_null(strstr(err.msg, "a.safetensors"));
    }
    /* the same bytes from memory */
    safetensors *st;
    ai_err err;
    assert_int_equal(safetensors_open_memory(&st, bytes, total, "mem", &err), AI_OK);
    assert_int_equal(safetensors_n_tensors(st), 6);
    assert_ptr_equal(safetensors_find(st, "w.f32")->data, bytes + (total - 47));
    safetensors_close(st);
    assert_int_equal(safetensors_open_memory(&st, bytes, 7, "mem", &err), AI_ERR_FORMAT);
    assert_string_equal(err.msg, "mem: file too short (7 bytes) for the header length");
    free(bytes);
    unlink(pathf("model.safetensors"));
}

static void test_corrupt(void **state)
{
    (void)state;
    /* header length past the file, and absurd */
    FILE *fp = fopen(pathf("a.safetensors"), "wb");
    fwrite("\xff\xff\xff\xff\xff\xff\xff\x7f{}", 1, 10, fp);
    fclose(fp);
    safetensors *st;
    ai_err err;
    assert_int_equal(safetensors_open(&st, pathf("a.safetensors"), &err), AI_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "header length 9223372036854775807 exceeds the file"));

    expect_fail("[1,2]", 0, "does not start with '{'");
    expect_fail("{\"a\":", 0, "not valid JSON");
    expect_fail("{} x", 0, "bytes after its JSON object");
    expect_fail("{\"a\":{\"dtype\":\"F4\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "tensor 'a': unknown dtype 'F4'");
    expect_fail("{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "missing or non-string 'dtype'");
    expect_fail("{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1, "'shape'");
    expect_fail("{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}", 1, "shape[0] is not a non-negative");
    expect_fail("{\"a\":{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,1]}}", 1, "shape[0]");
    expect_fail("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, "9 dims");
    expect_fail("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", 1, "'data_offsets' must be");
    expect_fail("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,0]}}", 1, "begin after end");
    expect_fail("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 2, "run past the 2-byte data section");
    expect_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "span 4 bytes but shape x F32 needs 8");
    expect_fail("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", 6, "overlaps tensor 'a'");
    expect_fail("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[6,10]}}", 10, "data bytes [4, 6) belong to no tensor");
    expect_fail("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 5, "end at data byte 4 but the data section has 5");
    expect_fail("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}", 4, "duplicate tensor name 'a'");
    expect_fail("{\"__metadata__\":{\"k\":1}}", 0, "__metadata__ 'k': value is not a string");
    expect_fail("{\"a\":{\"dtype\":\"U8\",\"shape\":[9007199254740993],\"data_offsets\":[0,1]}}", 1, "below 2^53");
    expect_fail("{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,1]}}", 1, "overflows");
    expect_fail("{}", 3, "3 data bytes but no tensors");
    /* the empty header with no data is a valid (empty) file */
    write_st("a.safetensors", "{}", 0, 0);
    assert_int_equal(safetensors_open(&st, pathf("a.safetensors"), &err), AI_OK);
    assert_int_equal(safetensors_n_tensors(st), 0);
    safetensors_close(st);
    assert_int_equal(safetensors_open(&st, pathf("nope"), &err), AI_ERR_IO);
    assert_null(st);
}

static const char *shard1 = "{\"x.a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]},"
                            "\"x.b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[4,7]}}";
static const char *shard2 = "{\"y.c\":{\"dtype\":\"I32\",\"shape\":[1,2],\"data_offsets\":[0,8]}}";

static void expect_model_fail(const char *index, const char *want)
{
    write_text("model.safetensors.index.json", index);
    safetensors_model *m = (safetensors_model *)0x1;
    ai_err err = {0};
    ai_status rc = safetensors_model_open(&m, dir, &err);
    if (rc == AI_OK || !strstr(err.msg, want)) fail_msg("index %s: want '%s', got %d '%s'", index, want, (int)rc, err.msg);
    assert_null(m);
}

static void test_sharded(void **state)
{
    (void)state;
    write_st("s1.safetensors", shard1, 0, 7);
    write_st("s2.safetensors", shard2, 0, 8);
    write_text("model.safetensors.index.json",
               "{\"metadata\":{\"total_size\":15},\"weight_map\":{\"x.a\":\"s1.safetensors\","
               "\"y.c\":\"s2.safetensors\",\"x.b\":\"s1.safetensors\"}}");
    safetensors_model *m;
    ai_err err;
    if (safetensors_model_open(&m, dir, &err) != AI_OK) fail_msg("%s", err.msg);
    assert_int_equal(safetensors_model_n_shards(m), 2);
    assert_int_equal(safetensors_model_n_tensors(m), 3);
    const safetensors_tensor *t = safetensors_model_find(m, "y.c");
    assert_non_null(t);
    assert_int_equal(t->dtype, ST_I32);
    assert_int_equal(t->shape[1], 2);
    assert_ptr_equal(t, safetensors_find(safetensors_model_shard(m, 1), "y.c"));
    t = safetensors_model_find(m, "x.b");
    assert_int_equal(((const unsigned char *)t->data)[0], (4 * 5 + 1) & 0xff);
    assert_null(safetensors_model_find(m, "z"));
    assert_null(safetensors_model_shard(m, 2));
    safetensors_model_close(m);

    expect_model_fail("{\"weight_map\":{\"x.a\":\"s1.safetensors\",\"q\":\"s1.safetensors\"}}",
                      "tensor 'q' is mapped to s1.safetensors, which does not hold it");
    expect_model_fail("{\"weight_map\":{\"x.a\":\"../s1.safetensors\"}}", "shard must be a file name");
    expect_model_fail("{\"weight_map\":{\"x.a\":\"s9.safetensors\"}}", "s9.safetensors: cannot open");
    expect_model_fail("{\"metadata\":{}}", "no \"weight_map\" object");
    expect_model_fail("{\"weight_map\":{}}", "weight_map is empty");
    expect_model_fail("{\"weight_map\":", "not valid JSON");
    expect_model_fail("{\"weight_map\":{\"x.a\":\"s1.safetensors\",\"x.a\":\"s1.safetensors\"}}", "lists 'x.a' twice");
    /* a corrupt shard is reported with its file name */
    write_st("s2.safetensors", shard2, 0, 7);
    expect_model_fail("{\"weight_map\":{\"y.c\":\"s2.safetensors\"}}", "s2.safetensors: tensor 'y.c'");
    unlink(pathf("model.safetensors.index.json"));

    /* no index: model.safetensors; or a file path */
    write_st("model.safetensors", shard2, 0, 8);
    assert_int_equal(safetensors_model_open(&m, dir, &err), AI_OK);
    assert_int_equal(safetensors_model_n_shards(m), 1);
    assert_non_null(safetensors_model_find(m, "y.c"));
    safetensors_model_close(m);
    assert_int_equal(safetensors_model_open(&m, pathf("s1.safetensors"), &err), AI_OK);
    assert_non_null(safetensors_model_find(m, "x.a"));
    assert_int_equal(safetensors_model_n_tensors(m), 2);
    safetensors_model_close(m);
    unlink(pathf("model.safetensors"));
    assert_int_equal(safetensors_model_open(&m, dir, &err), AI_ERR_IO);
    assert_non_null(strstr(err.msg, "neither"));
    assert_int_equal(safetensors_model_open(&m, pathf("missing"), &err), AI_ERR_IO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_truncate_every_length),
        cmocka_unit_test(test_corrupt),
        cmocka_unit_test(test_sharded),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
