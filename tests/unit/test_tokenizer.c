/* test_tokenizer.c - unit tests for src/tokenizer: loaders reject corrupt input with clear
 * errors, the merge engine follows BPE's rules on hand-checked cases and stays fast on
 * pathological words, streaming decode never emits broken UTF-8 and equals one-shot decode.
 * Tests that need the real vocabularies (build/data/tokenizers, or $AIINFRA_DATA) skip without them.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "aiinfra/fileio.h"
#include "aiinfra/tokenizer.h"
#include "aiinfra/utf8.h"
#include "tokenizer/tok_internal.h"

// --- helpers

/* A byte-level tokenizer.json: the 256 single bytes (ids 0..255 in byte order), then `extra`
 * tokens (ids 256..) and `merges` ("a b" in byte-level spelling), plus <|end|> special. */
static char *make_json(const char *const *extra, const char *const *merges, const char *pre)
{
    buf b;
    buf_init(&b);
    buf_puts(&b, "{\"added_tokens\":[{\"id\":");
    int n_extra = 0;
    while (extra && extra[n_extra]) n_extra++;
    buf_printf(&b, "%d,\"content\":\"<|end|>\",\"special\":true}],", 256 + n_extra);
    buf_printf(&b, "\"pre_tokenizer\":%s,\"decoder\":{\"type\":\"ByteLevel\"},", pre);
    buf_puts(&b, "\"model\":{\"type\":\"BPE\",\"vocab\":{");
    for (int i = 0; i < 256; i++) {
        char c = (char)i;
        buf tmp;
        buf_init(&tmp);
        bytelevel_encode(&tmp, &c, 1);
        buf_putc(&b, '"');
        if (!strcmp(tmp.data, "\"") || !strcmp(tmp.data, "\\")) buf_putc(&b, '\\');
        buf_append(&b, tmp.data, tmp.len);
        buf_printf(&b, "\":%d,", i);
        buf_free(&tmp);
    }
    for (int i = 0; i < n_extra; i++) buf_printf(&b, "\"%s\":%d,", extra[i], 256 + i);
    b.len--;  /* trailing comma */
    buf_puts(&b, "},\"merges\":[");
    for (int i = 0; merges && merges[i]; i++) buf_printf(&b, "%s\"%s\"", i ? "," : "", merges[i]);
    buf_puts(&b, "]}}");
    return buf_detach(&b);
}

static const char *const AA_TOKENS[] = {"aa", "aaaa", "ab", "Ġa", NULL};
static const char *const AA_MERGES[] = {"a a", "aa aa", "a b", "Ġ a", NULL};
static const char BL_PRE[] = "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}";

static tokenizer *load_aa(void)
{
    char *json = make_json(AA_TOKENS, AA_MERGES, BL_PRE);
    tokenizer *t = NULL;
    ai_err err = {0};
    ai_status st = tokenizer_from_json(&t, json, strlen(json), NULL, 0, &err);
    if (st) fprintf(stderr, "load_aa: %s\n", err.msg);
    assert_int_equal(st, AI_OK);
    free(json);
    return t;
}

static void expect_ids(const tokenizer *t, const char *text, const int32_t *want, size_t n)
{
    tok_ids ids;
    tok_ids_init(&ids);
    ai_err err = {0};
    assert_int_equal(tokenizer_encode(t, text, strlen(text), TOK_PARSE_SPECIAL, &ids, &err), AI_OK);
    if (ids.len != n) fprintf(stderr, "'%s': %zu ids, want %zu\n", text, ids.len, n);
    assert_int_equal(ids.len, n);
    for (size_t i = 0; i < n; i++) assert_int_equal(ids.data[i], want[i]);
    tok_ids_free(&ids);
}

static void expect_load_error(const char *json, ai_status code, const char *needle)
{
    tokenizer *t = NULL;
    ai_err err = {0};
    ai_status st = tokenizer_from_json(&t, json, strlen(json), NULL, 0, &err);
    if (st != code || !strstr(err.msg, needle))
        fprintf(stderr, "json %.80s: status %d msg '%s' (want %d, '%s')\n", json, st, err.msg, code, needle);
    assert_int_equal(st, code);
    assert_non_null(strstr(err.msg, needle));
    assert_null(t);
}

// --- BPE rules on hand-checked cases

static void test_bpe_rules(void **state)
{
    (void)state;
    tokenizer *t = load_aa();
    /* ids: bytes = their value; aa 256, aaaa 257, ab 258, Ġa 259, <|end|> 260 */
    expect_ids(t, "a", (int32_t[]){'a'}, 1);
    expect_ids(t, "aa", (int32_t[]){256}, 1);
    expect_ids(t, "aaa", (int32_t[]){256, 'a'}, 2);            /* leftmost pair first */
    expect_ids(t, "aaaaa", (int32_t[]){257, 'a'}, 2);
    expect_ids(t, "aab", (int32_t[]){256, 'b'}, 2);            /* a a (rank 0) beats a b (rank 2) */
    expect_ids(t, "ab aa", (int32_t[]){258, ' ', 256}, 3);    /* " aa": a a (rank 0) merges before Ġ a (rank 3) */
    expect_ids(t, "x<|end|>aa", (int32_t[]){'x', 260, 256}, 3);
    expect_ids(t, "", NULL, 0);
    /* without TOK_PARSE_SPECIAL the special text is plain text */
    tok_ids ids;
    tok_ids_init(&ids);
    ai_err err;
    assert_int_equal(tokenizer_encode(t, "<|end|>", 7, 0, &ids, &err), AI_OK);
    assert_int_equal(ids.len, 7);
    tok_ids_free(&ids);
    assert_int_equal(tokenizer_n_vocab(t), 261);
    assert_true(tokenizer_is_special(t, 260));
    assert_false(tokenizer_is_special(t, 256));
    size_t len;
    const char *p = tokenizer_piece(t, 259, &len);
    assert_int_equal(len, 3);
    assert_memory_equal(p, "\xC4\xA0" "a", 3);
    assert_null(tokenizer_piece(t, 261, &len));
    tokenizer_free(t);
}

/* 1 MB of one letter and 1 MB without spaces: one huge word each; must be O(n log n). */
static void test_long_words(void **state)
{
    (void)state;
    tokenizer *t = load_aa();
    size_t n = 1 << 20;
    char *s = malloc(n);
    assert_non_null(s);
    memset(s, 'a', n);
    tok_ids ids;
    tok_ids_init(&ids);
    ai_err err;
    assert_int_equal(tokenizer_encode(t, s, n, 0, &ids, &err), AI_OK);
    assert_int_equal(ids.len, n / 4);                  /* all "aaaa" */
    for (size_t i = 0; i < ids.len; i++) assert_int_equal(ids.data[i], 257);
    for (size_t i = 0; i < n; i++) s[i] = "abx"[i % 3];
    ids.len = 0;
    assert_int_equal(tokenizer_encode(t, s, n, 0, &ids, &err), AI_OK);
    assert_true(ids.len > n / 3 && ids.len < n);
    buf out;
    buf_init(&out);
    assert_int_equal(tokenizer_decode(t, ids.data, ids.len, 0, &out, &err), AI_OK);
    assert_int_equal(out.len, n);
    assert_memory_equal(out.data, s, n);
    buf_free(&out);
    tok_ids_free(&ids);
    free(s);
    tokenizer_free(t);
}

static void test_invalid_utf8_input(void **state)
{
    (void)state;
    tokenizer *t = load_aa();
    /* "a\xFF" -> 'a' + U+FFFD (EF BF BD as three byte tokens) */
    expect_ids(t, "a\xFF", (int32_t[]){'a', 0xEF, 0xBF, 0xBD}, 4);
    expect_ids(t, "\xE4\xB8", (int32_t[]){0xEF, 0xBF, 0xBD}, 3);   /* truncated sequence: one U+FFFD */
    tokenizer_free(t);
}

/* A loaded tokenizer is immutable: four threads encoding at once get the single-thread ids. */
struct thread_job {
    const tokenizer *t;
    const char *text;
    size_t len;
    tok_ids ids;
    ai_status st;
};

static void *encode_thread(void *arg)
{
    struct thread_job *j = arg;
    ai_err err;
    tok_ids_init(&j->ids);
    j->st = AI_OK;
    for (int rep = 0; rep < 20 && !j->st; rep++) {
        j->ids.len = 0;
        j->st = tokenizer_encode(j->t, j->text, j->len, TOK_PARSE_SPECIAL, &j->ids, &err);
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    tokenizer *t = load_aa();
    buf text;
    buf_init(&text);
    for (int i = 0; i < 400; i++) buf_puts(&text, i % 3 ? "aaab ab aaaa b<|end|>" : " \xE4\xB8\xAD aaaaaaa ");
    struct thread_job ref = {t, text.data, text.len, {0}, AI_OK}, jobs[4];
    encode_thread(&ref);
    assert_int_equal(ref.st, AI_OK);
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = ref;
        assert_int_equal(pthread_create(&th[i], NULL, encode_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(jobs[i].st, AI_OK);
        assert_int_equal(jobs[i].ids.len, ref.ids.len);
        assert_memory_equal(jobs[i].ids.data, ref.ids.data, ref.ids.len * sizeof(int32_t));
        tok_ids_free(&jobs[i].ids);
    }
    tok_ids_free(&ref.ids);
    buf_free(&text);
    tokenizer_free(t);
}

/* One encoder reused over many calls (its word cache carries over, fills up and is cleared)
 * gives exactly tokenizer_encode's ids, including for invalid UTF-8 and special tokens. */
static void test_encoder_reuse(void **state)
{
    (void)state;
    tokenizer *t = load_aa();
    tok_encoder *enc = NULL;
    ai_err err = {0};
    assert_int_equal(tok_encoder_init(&enc, t, &err), AI_OK);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    buf line;
    buf_init(&line);
    tok_ids want, got;
    tok_ids_init(&want);
    tok_ids_init(&got);
    for (int call = 0; call < 5000; call++) {   /* ~125k words, ~45k distinct: more than the cache holds */
        buf_clear(&line);
        for (int w = 0; w < 25; w++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            int len = 1 + (int)(x % 18);
            buf_putc(&line, ' ');
            for (int k = 0; k < len; k++) buf_putc(&line, (x >> (k + 8)) & 1 ? 'a' : 'b');
        }
        if (call % 97 == 0) buf_puts(&line, " \xFF<|end|>\xE4\xB8");
        want.len = got.len = 0;
        assert_int_equal(tokenizer_encode(t, line.data, line.len, TOK_PARSE_SPECIAL, &want, &err), AI_OK);
        assert_int_equal(tok_encoder_encode(enc, line.data, line.len, TOK_PARSE_SPECIAL, &got, &err), AI_OK);
        assert_int_equal(got.len, want.len);
        assert_memory_equal(got.data, want.data, want.len * sizeof(int32_t));
    }
    tok_ids_free(&want);
    tok_ids_free(&got);
    buf_free(&line);
    tok_encoder_free(enc);
    tokenizer_free(t);
}

// --- loaders reject corrupt input

static void test_json_errors(void **state)
{
    (void)state;
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0", AI_ERR_FORMAT, "invalid JSON");
    expect_load_error("[1, 2]", AI_ERR_FORMAT, "not an object");
    expect_load_error("{}", AI_ERR_FORMAT, "'model' missing");
    expect_load_error("{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", AI_ERR_UNSUPPORTED, "model type 'Unigram' unsupported");
    expect_load_error("{\"model\": {\"type\": \"BPE\"}}", AI_ERR_FORMAT, "vocab missing");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}}", AI_ERR_FORMAT, "invalid id");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 1e12}, \"merges\": []}}", AI_ERR_FORMAT, "invalid id");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}",
                      AI_ERR_FORMAT, "not in the vocabulary");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"ab\"]}}",
                      AI_ERR_FORMAT, "is not 'a b'");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [[\"a\"]]}}",
                      AI_ERR_FORMAT, "neither");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}}", AI_ERR_FORMAT, "merges missing");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
                      "\"pre_tokenizer\": {\"type\": \"Fancy\"}}", AI_ERR_UNSUPPORTED, "pre_tokenizer type 'Fancy' unsupported");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
                      "\"normalizer\": {\"type\": \"Precompiled\"}}", AI_ERR_UNSUPPORTED, "normalizer type 'Precompiled' unsupported");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
                      "\"decoder\": {\"type\": \"WordPiece\"}}", AI_ERR_UNSUPPORTED, "decoder type 'WordPiece' unsupported");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
                      "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}}",
                      AI_ERR_FORMAT, "regex");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], \"unk_token\": \"<unk>\"}}",
                      AI_ERR_FORMAT, "unk_token");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
                      "\"added_tokens\": [{\"id\": -5, \"content\": \"x\"}]}", AI_ERR_FORMAT, "added_tokens");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
                      "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}}]}}",
                      AI_ERR_FORMAT, "unknown special token '<s>'");

    /* every truncation of a valid file fails cleanly (no crash, no leak) */
    char *json = make_json(AA_TOKENS, AA_MERGES, BL_PRE);
    size_t n = strlen(json);
    for (size_t cut = 0; cut < n; cut += (cut < 200 ? 1 : 97)) {
        tokenizer *t = NULL;
        ai_err err = {0};
        assert_int_not_equal(tokenizer_from_json(&t, json, cut, NULL, 0, &err), AI_OK);
        assert_null(t);
        assert_true(err.msg[0] != '\0');
    }
    free(json);

    tokenizer *t = NULL;
    ai_err err = {0};
    assert_int_equal(tokenizer_load(&t, "/nonexistent/tokenizer.json", &err), AI_ERR_IO);
    assert_non_null(strstr(err.msg, "/nonexistent/tokenizer.json"));
}

static void test_decode_errors(void **state)
{
    (void)state;
    tokenizer *t = load_aa();
    buf out;
    buf_init(&out);
    ai_err err = {0};
    int32_t bad[] = {'a', 5000};
    assert_int_equal(tokenizer_decode(t, bad, 2, 0, &out, &err), AI_ERR_RANGE);
    assert_non_null(strstr(err.msg, "5000"));
    int32_t neg[] = {-1};
    assert_int_equal(tokenizer_decode(t, neg, 1, 0, &out, &err), AI_ERR_RANGE);
    buf_free(&out);
    tokenizer_free(t);
}

// --- GGUF, GPT-2 and tiktoken loaders

static void put_u32(buf *b, uint32_t v) { buf_append(b, &v, 4); }
static void put_u64(buf *b, uint64_t v) { buf_append(b, &v, 8); }
static void put_str(buf *b, const char *s) { put_u64(b, strlen(s)); buf_append(b, s, strlen(s)); }

/* A GGUF v3 file with no tensors and these tokenizer keys (x86 is little-endian like GGUF). */
static void write_gguf(const char *path, const char *model, const char *const *tokens, int n_types,
                       const char *const *merges)
{
    buf b;
    buf_init(&b);
    int n_tok = 0, n_merge = 0;
    while (tokens[n_tok]) n_tok++;
    while (merges && merges[n_merge]) n_merge++;
    buf_append(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, 0);
    put_u64(&b, 2 + (n_types >= 0) + (merges != NULL));
    put_str(&b, "tokenizer.ggml.model"); put_u32(&b, 8); put_str(&b, model);
    put_str(&b, "tokenizer.ggml.tokens"); put_u32(&b, 9); put_u32(&b, 8); put_u64(&b, (uint64_t)n_tok);
    for (int i = 0; i < n_tok; i++) put_str(&b, tokens[i]);
    if (n_types >= 0) {
        put_str(&b, "tokenizer.ggml.token_type"); put_u32(&b, 9); put_u32(&b, 5); put_u64(&b, (uint64_t)n_types);
        for (int i = 0; i < n_types; i++) put_u32(&b, 1);
    }
    if (merges) {
        put_str(&b, "tokenizer.ggml.merges"); put_u32(&b, 9); put_u32(&b, 8); put_u64(&b, (uint64_t)n_merge);
        for (int i = 0; i < n_merge; i++) put_str(&b, merges[i]);
    }
    while (b.len % 32) buf_putc(&b, 0);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    fwrite(b.data, 1, b.len, fp);
    fclose(fp);
    buf_free(&b);
}

static void expect_file_error(const char *path, ai_status code, const char *needle)
{
    tokenizer *t = NULL;
    ai_err err = {0};
    ai_status st = tokenizer_load(&t, path, &err);
    if (st != code || !strstr(err.msg, needle)) fprintf(stderr, "%s: status %d '%s' (want %d '%s')\n", path, st, err.msg, code, needle);
    assert_int_equal(st, code);
    assert_non_null(strstr(err.msg, needle));
    assert_null(t);
}

static void test_other_loaders(void **state)
{
    (void)state;
    char dir[] = "/tmp/aiinfra-tok-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    const char *const toks[] = {"a", "b", "ab", NULL};
    const char *const good_merges[] = {"a b", NULL};
    const char *const bad_merges[] = {"a c", NULL};

    snprintf(path, sizeof path, "%s/ok.gguf", dir);
    write_gguf(path, "gpt2", toks, 3, good_merges);
    tokenizer *t = NULL;
    ai_err err = {0};
    /* no tokenizer.ggml.pre: llama.cpp's "default" */
    assert_int_equal(tokenizer_load(&t, path, &err), AI_OK);
    expect_ids(t, "abab", (int32_t[]){2, 2}, 2);
    tokenizer_free(t);

    write_gguf(path, "bert", toks, 3, good_merges);
    expect_file_error(path, AI_ERR_UNSUPPORTED, "tokenizer.ggml.model 'bert' unsupported");
    write_gguf(path, "gpt2", toks, 3, NULL);
    expect_file_error(path, AI_ERR_FORMAT, "merges missing");
    write_gguf(path, "gpt2", toks, 3, bad_merges);
    expect_file_error(path, AI_ERR_FORMAT, "not in the vocabulary");
    write_gguf(path, "gpt2", toks, 2, good_merges);
    expect_file_error(path, AI_ERR_FORMAT, "token_type has 2 entries");
    write_gguf(path, "llama", toks, 3, NULL);
    expect_file_error(path, AI_ERR_FORMAT, "scores");
    remove(path);

    /* tiktoken: name decides the pattern; bad lines are errors */
    snprintf(path, sizeof path, "%s/cl100k_base.tiktoken", dir);
    FILE *fp = fopen(path, "w");
    fputs("YQ== 0\nYg== 1\n!!!! 2\n", fp);
    fclose(fp);
    expect_file_error(path, AI_ERR_FORMAT, "bad base64");
    fp = fopen(path, "w");
    fputs("YQ== zero\n", fp);
    fclose(fp);
    expect_file_error(path, AI_ERR_FORMAT, "line 1");
    remove(path);
    snprintf(path, sizeof path, "%s/other.tiktoken", dir);
    fp = fopen(path, "w");
    fputs("YQ== 0\n", fp);
    fclose(fp);
    expect_file_error(path, AI_ERR_UNSUPPORTED, "unknown tiktoken encoding");
    remove(path);

    /* GPT-2 folder with a broken encoder.json */
    snprintf(path, sizeof path, "%s/encoder.json", dir);
    fp = fopen(path, "w");
    fputs("{\"a\": 0, \"b\": ", fp);
    fclose(fp);
    snprintf(path, sizeof path, "%s/vocab.bpe", dir);
    fp = fopen(path, "w");
    fputs("#version: 0.2\na b\n", fp);
    fclose(fp);
    expect_file_error(dir, AI_ERR_FORMAT, "encoder.json");
    remove(path);
    snprintf(path, sizeof path, "%s/encoder.json", dir);
    remove(path);
    expect_file_error(dir, AI_ERR_IO, "no tokenizer.json or encoder.json");
    rmdir(dir);
}

// --- streaming

/* Streams ids one at a time: every chunk is valid UTF-8, the running output is always a prefix
 * of the one-shot decode, and the total equals it. */
static void check_stream(const tokenizer *t, const int32_t *ids, size_t n)
{
    buf full, acc, chunk;
    buf_init(&full); buf_init(&acc); buf_init(&chunk);
    ai_err err;
    assert_int_equal(tokenizer_decode(t, ids, n, 0, &full, &err), AI_OK);
    assert_true(utf8_valid(full.data, full.len));
    tok_stream s;
    tok_stream_init(&s, t, 0);
    for (size_t i = 0; i < n; i++) {
        buf_clear(&chunk);
        assert_int_equal(tok_stream_push(&s, ids[i], &chunk, &err), AI_OK);
        assert_true(utf8_valid(chunk.data, chunk.len));
        buf_append(&acc, chunk.data, chunk.len);
        assert_true(acc.len <= full.len);
        if (acc.len) assert_memory_equal(acc.data, full.data, acc.len);
    }
    buf_clear(&chunk);
    tok_stream_flush(&s, &chunk);
    assert_true(utf8_valid(chunk.data, chunk.len));
    buf_append(&acc, chunk.data, chunk.len);
    assert_int_equal(acc.len, full.len);
    if (acc.len) assert_memory_equal(acc.data, full.data, acc.len);
    tok_stream_free(&s);
    buf_free(&full); buf_free(&acc); buf_free(&chunk);
}

static void test_stream_bytelevel_split_chars(void **state)
{
    (void)state;
    tokenizer *t = load_aa();
    /* 中 = E4 B8 AD as three byte tokens; 😀 = F0 9F 98 80; a dangling lead byte; stray continuation */
    int32_t ids[] = {'a', 0xE4, 0xB8, 0xAD, ' ', 0xF0, 0x9F, 0x98, 0x80, 0xE4, 'a', 0x80, 0xF0, 0x9F};
    size_t n = sizeof ids / sizeof ids[0];
    for (size_t k = 0; k <= n; k++) check_stream(t, ids, k);   /* every prefix */
    tok_stream s;
    tok_stream_init(&s, t, 0);
    buf out;
    buf_init(&out);
    ai_err err;
    assert_int_equal(tok_stream_push(&s, 0xE4, &out, &err), AI_OK);
    assert_int_equal(out.len, 0);                 /* half a character is held back */
    assert_int_equal(tok_stream_push(&s, 0xB8, &out, &err), AI_OK);
    assert_int_equal(out.len, 0);
    assert_int_equal(tok_stream_push(&s, 0xAD, &out, &err), AI_OK);
    assert_int_equal(out.len, 3);
    assert_memory_equal(out.data, "\xE4\xB8\xAD", 3);
    tok_stream_free(&s);
    buf_free(&out);
    tokenizer_free(t);
}

/* SPM-style: byte-fallback tokens and U+2581 spaces, leading space stripped once. */
static void test_stream_byte_fallback(void **state)
{
    (void)state;
    const char *json =
        "{\"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"fuse_unk\": true, \"unk_token\": \"<unk>\","
        " \"vocab\": {\"<unk>\": 0, \"<0xE4>\": 1, \"<0xB8>\": 2, \"<0xAD>\": 3, \"\xE2\x96\x81\": 4, \"h\": 5, \"i\": 6,"
        " \"hi\": 7, \"\xE2\x96\x81hi\": 8, \"<0xFF>\": 9},"
        " \"merges\": [\"h i\", \"\xE2\x96\x81 hi\"]},"
        " \"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true}],"
        " \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"\xE2\x96\x81\"},"
        "   {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\xE2\x96\x81\"}]},"
        " \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": \"\xE2\x96\x81\"},"
        "   \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"},"
        "   {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]}}";
    tokenizer *t = NULL;
    ai_err err = {0};
    assert_int_equal(tokenizer_from_json(&t, json, strlen(json), NULL, 0, &err), AI_OK);
    expect_ids(t, "hi", (int32_t[]){8}, 1);
    expect_ids(t, "hi\xE4\xB8\xAD", (int32_t[]){8, 1, 2, 3}, 4);         /* 中 not in vocab: byte fallback */
    expect_ids(t, "hi \xC3\xA9\xC3\xA9", (int32_t[]){8, 4, 0}, 3);       /* é not in vocab, no byte tokens: fused <unk> */
    int32_t ids[] = {8, 1, 2, 3, 4, 5, 9, 1, 8};
    size_t n = sizeof ids / sizeof ids[0];
    for (size_t k = 0; k <= n; k++) check_stream(t, ids, k);
    buf out;
    buf_init(&out);
    assert_int_equal(tokenizer_decode(t, ids, n, 0, &out, &err), AI_OK);
    /* "▁hi" -> "hi" (strip), 中, " ", "h", <0xFF> alone: U+FFFD, <0xE4> alone: U+FFFD, " hi" */
    const char want[] = "hi\xE4\xB8\xAD h\xEF\xBF\xBD\xEF\xBF\xBD hi";
    assert_int_equal(out.len, strlen(want));
    assert_memory_equal(out.data, want, out.len);
    buf_free(&out);
    tokenizer_free(t);
}

/* The real llama3 / llama2 vocabularies: stream every prefix of a multilingual text. */
static void test_stream_real_vocab(void **state)
{
    (void)state;
    const char *data = getenv("AIINFRA_DATA") ? getenv("AIINFRA_DATA") : "build/data";
    const char *names[] = {"hf/llama3", "hf/llama2"};
    int loaded = 0;
    for (int k = 0; k < 2; k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/tokenizers/%s", data, names[k]);
        if (!file_is_dir(path)) continue;
        tokenizer *t = NULL;
        ai_err err = {0};
        assert_int_equal(tokenizer_load(&t, path, &err), AI_OK);
        const char *text = "Hello 世界! 👨‍👩‍👧 emoji, ελληνικά, \xF0\x9F\x87\xAB\xF0\x9F\x87\xB7 日本語 \xE2\x96\x81x  \n\t end";
        tok_ids ids;
        tok_ids_init(&ids);
        assert_int_equal(tokenizer_encode(t, text, strlen(text), TOK_ADD_SPECIAL | TOK_PARSE_SPECIAL, &ids, &err), AI_OK);
        for (size_t n = 0; n <= ids.len; n++) check_stream(t, ids.data, n);
        tok_ids_free(&ids);
        tokenizer_free(t);
        loaded++;
    }
    if (!loaded) skip();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bpe_rules),
        cmocka_unit_test(test_long_words),
        cmocka_unit_test(test_invalid_utf8_input),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_json_errors),
        cmocka_unit_test(test_decode_errors),
        cmocka_unit_test(test_other_loaders),
        cmocka_unit_test(test_stream_bytelevel_split_chars),
        cmocka_unit_test(test_stream_byte_fallback),
        cmocka_unit_test(test_stream_real_vocab),
        cmocka_unit_test(test_encoder_reuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
