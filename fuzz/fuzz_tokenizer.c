/* fuzz_tokenizer.c - libFuzzer target for src/tokenizer.
 *
 * The first byte picks a mode:
 *   0..5   a real vocabulary (loaded once, from $AIINFRA_DATA or build/data): the rest is text
 *          to encode (with and without special-token parsing) and the ids are decoded one-shot
 *          and streamed; checks: ids in range, decode output valid UTF-8, stream == one-shot,
 *          and for byte-level vocabularies decode(encode(x)) == x when x is valid UTF-8 without
 *          special-token text.
 *   6..7   the rest is fed to the tokenizer.json loader (must fail cleanly or load).
 * Vocabularies that are absent are skipped.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aiinfra/tokenizer.h"
#include "aiinfra/utf8.h"

static const char *const VOCABS[] = {
    "tokenizers/hf/llama3", "tokenizers/hf/llama2", "tokenizers/gguf/ggml-vocab-qwen2.gguf",
    "tokenizers/gguf/ggml-vocab-phi-3.gguf", "tokenizers/gpt2", "tokenizers/tiktoken/cl100k_base.tiktoken",
};
#define N_VOCABS (sizeof VOCABS / sizeof VOCABS[0])

static tokenizer *cache[N_VOCABS];   /* fuzzer-harness state: each vocabulary loaded once */
static int tried[N_VOCABS];

static tokenizer *get_vocab(size_t k)
{
    if (!tried[k]) {
        tried[k] = 1;
        const char *data = getenv("AIINFRA_DATA") ? getenv("AIINFRA_DATA") : "build/data";
        char path[512];
        snprintf(path, sizeof path, "%s/%s", data, VOCABS[k]);
        ai_err err;
        if (tokenizer_load(&cache[k], path, &err)) cache[k] = NULL;
    }
    return cache[k];
}

static void check_text(const tokenizer *t, size_t k, const char *s, size_t n)
{
    ai_err err;
    for (int pass = 0; pass < 2; pass++) {
        tok_ids ids;
        tok_ids_init(&ids);
        int flags = pass ? TOK_PARSE_SPECIAL | TOK_ADD_SPECIAL : 0;
        if (tokenizer_encode(t, s, n, flags, &ids, &err)) abort();
        for (size_t i = 0; i < ids.len; i++)
            if (ids.data[i] < 0 || ids.data[i] >= tokenizer_n_vocab(t)) abort();
        buf one, streamed;
        buf_init(&one);
        buf_init(&streamed);
        if (tokenizer_decode(t, ids.data, ids.len, 0, &one, &err)) abort();
        if (!utf8_valid(one.data, one.len)) abort();
        tok_stream st;
        tok_stream_init(&st, t, 0);
        for (size_t i = 0; i < ids.len; i++)
            if (tok_stream_push(&st, ids.data[i], &streamed, &err)) abort();
        tok_stream_flush(&st, &streamed);
        tok_stream_free(&st);
        if (streamed.len != one.len || (one.len && memcmp(streamed.data, one.data, one.len))) abort();
        /* byte-level vocabularies are lossless on valid UTF-8 (k: llama3, qwen2, gpt2, cl100k) */
        int lossless = (k == 0 || k == 4 || k == 5) && pass == 0 && utf8_valid(s, n);
        if (lossless && (one.len != n || (n && memcmp(one.data, s, n)))) abort();
        buf_free(&one);
        buf_free(&streamed);
        tok_ids_free(&ids);
    }
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);
int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 1) return 0;
    unsigned mode = data[0] % 8;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    if (mode < N_VOCABS) {
        tokenizer *t = get_vocab(mode);
        if (t) check_text(t, mode, s, n);
    } else {
        tokenizer *t = NULL;
        ai_err err;
        if (tokenizer_from_json(&t, s, n, NULL, 0, &err) == AI_OK) {
            tok_ids ids;
            tok_ids_init(&ids);
            if (tokenizer_encode(t, "hello world 123", 15, TOK_PARSE_SPECIAL | TOK_ADD_SPECIAL, &ids, &err) == AI_OK) {
                buf out;
                buf_init(&out);
                (void)tokenizer_decode(t, ids.data, ids.len, 0, &out, &err);
                buf_free(&out);
            }
            tok_ids_free(&ids);
            tokenizer_free(t);
        }
    }
    return 0;
}
