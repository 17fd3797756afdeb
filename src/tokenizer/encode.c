/* encode.c - the encode pipeline: sanitize, split on added tokens, normalize, pre-tokenize,
 * BPE every word, add the post-processor's special tokens.
 *
 * A word cache (word bytes -> ids) lives in the encoder (tok_encoder), never in the tokenizer,
 * so the tokenizer stays immutable and thread-safe: one encoder per thread. A long-lived encoder
 * keeps its cache across calls (a server's or a batch job's many short prompts share their common
 * words, as HF tokenizers' BPE cache does); tokenizer_encode makes a throw-away encoder whose cache
 * only pays off on long inputs. The cache is bounded in entries and word length, and is cleared
 * when full, so it cannot grow without limit.
 */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "aiinfra/utf8.h"
#include "tokenizer/tok_internal.h"

#define CACHE_MIN_TEXT 256     /* inputs shorter than this skip the cache */
#define CACHE_MAX_WORD 48
#define CACHE_MAX_SLOTS (1u << 16) /* slots grow with the input (about one per 8 bytes) up to this */

typedef struct cache_slot {
    uint64_t hash;   /* 0 = empty */
    uint32_t key_off, key_len;
    uint32_t ids_off, ids_len;
} cache_slot;

typedef struct word_cache {
    cache_slot *slots;
    buf keys;
    tok_ids ids;
    uint32_t used;
    uint32_t mask;  /* slots - 1 */
} word_cache;

struct tok_encoder {
    const tokenizer *t;
    bpe_scratch *bpe;
    tok_words words;
    buf norm;
    buf clean;           /* sanitized copy of invalid UTF-8 input */
    word_cache wc;
    word_cache *cache;   /* &wc once its slots exist, else NULL */
};
typedef struct tok_encoder enc_ctx;

static bool cache_alloc(word_cache *wc, uint32_t slots)
{
    wc->slots = calloc(slots, sizeof *wc->slots);
    if (!wc->slots) return false;
    wc->mask = slots - 1;
    wc->used = 0;
    buf_init(&wc->keys);
    tok_ids_init(&wc->ids);
    return true;
}

static void cache_clear(word_cache *wc)
{
    memset(wc->slots, 0, ((size_t)wc->mask + 1) * sizeof *wc->slots);
    wc->used = 0;
    buf_clear(&wc->keys);
    wc->keys.oom = false;
    wc->ids.len = 0;
}

static ai_status encode_word(enc_ctx *c, const char *w, size_t n, tok_ids *out, ai_err *err)
{
    word_cache *wc = c->cache;
    if (!wc || n > CACHE_MAX_WORD) return bpe_word(c->t, c->bpe, w, n, out, err);
    uint64_t h = XXH3_64bits(w, n) | 1;
    uint32_t i = (uint32_t)h & wc->mask;
    for (;;) {
        cache_slot *s = &wc->slots[i];
        if (!s->hash) break;
        if (s->hash == h && s->key_len == n && !memcmp(wc->keys.data + s->key_off, w, n)) {
            if (out->len + s->ids_len > out->cap) {
                size_t cap = out->cap ? out->cap : 64;
                while (cap < out->len + s->ids_len) cap *= 2;
                int32_t *d = realloc(out->data, cap * sizeof *d);
                if (!d) return ai_err_set(err, AI_ERR_NOMEM, "out of memory");
                out->data = d;
                out->cap = cap;
            }
            memcpy(out->data + out->len, wc->ids.data + s->ids_off, s->ids_len * sizeof *out->data);
            out->len += s->ids_len;
            return AI_OK;
        }
        i = (i + 1) & wc->mask;
    }
    size_t before = out->len;
    ai_status st = bpe_word(c->t, c->bpe, w, n, out, err);
    if (st) return st;
    if (wc->used >= (wc->mask + 1) / 2) {   /* full: start over (bounded memory, adapts to new text) */
        cache_clear(wc);
        for (i = (uint32_t)h & wc->mask; wc->slots[i].hash; i = (i + 1) & wc->mask) {}
    }
    cache_slot *s = &wc->slots[i];
    s->hash = h;
    s->key_off = (uint32_t)wc->keys.len;
    s->key_len = (uint32_t)n;
    s->ids_off = (uint32_t)wc->ids.len;
    s->ids_len = (uint32_t)(out->len - before);
    buf_append(&wc->keys, w, n);
    for (size_t k = before; k < out->len; k++)
        if (!tok_ids_push(&wc->ids, out->data[k])) { s->hash = 0; return AI_OK; }
    if (wc->keys.oom) s->hash = 0;
    else wc->used++;
    return AI_OK;
}

/* The common shape - one Isolated regex split, possibly followed by a ByteLevel step that only
 * maps bytes - needs no word list: matches and the gaps between them go straight to BPE. */
static const pcre2_code *single_regex(const tokenizer *t)
{
    const pcre2_code *re = NULL;
    for (size_t i = 0; i < t->n_pre; i++) {
        const pretok_step *p = &t->pre[i];
        if (p->kind == PRETOK_BYTELEVEL && !p->add_prefix_space && !p->re) continue;
        bool split = (p->kind == PRETOK_SPLIT && p->re && p->behavior == SPLIT_ISOLATED && !p->invert) ||
                     (p->kind == PRETOK_BYTELEVEL && !p->add_prefix_space && p->re);
        if (!split || re) return NULL;
        re = p->re;
    }
    return re;
}

static ai_status encode_direct(enc_ctx *c, const pcre2_code *re, const char *s, size_t n, tok_ids *out, ai_err *err)
{
    pcre2_match_data *md = pcre2_match_data_create(2, NULL);
    if (!md) return ai_err_set(err, AI_ERR_NOMEM, "out of memory (regex match data)");
    ai_status st = AI_OK;
    size_t pos = 0, done = 0;
    while (pos <= n && !st) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) { st = ai_err_set(err, AI_ERR_RUNTIME, "pre-tokenizer regex failed (%d)", rc); break; }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t a = ov[0], b = ov[1];
        if (b == a) {             /* empty match: step over one character */
            if (a >= n) break;
            pos = a + 1;
            while (pos < n && ((unsigned char)s[pos] & 0xC0) == 0x80) pos++;
            continue;
        }
        if (a > done) st = encode_word(c, s + done, a - done, out, err);   /* gap */
        if (!st) st = encode_word(c, s + a, b - a, out, err);
        done = pos = b;
    }
    if (!st && done < n) st = encode_word(c, s + done, n - done, out, err);
    pcre2_match_data_free(md);
    return st;
}

static ai_status encode_segment(enc_ctx *c, const char *s, size_t n, bool first, tok_ids *out, ai_err *err)
{
    const tokenizer *t = c->t;
    if (n == 0) return AI_OK;
    ai_status st;
    if (t->n_norm) {
        buf_clear(&c->norm);
        if ((st = tok_normalize(t, s, n, first, &c->norm, err))) return st;
        s = c->norm.data ? c->norm.data : "";
        n = c->norm.len;
    }
    const pcre2_code *re = single_regex(t);
    if (re) return encode_direct(c, re, s, n, out, err);
    if ((st = tok_pretokenize(t, s, n, first, &c->words, err))) return st;
    for (size_t i = 0; i < c->words.n; i++) {
        st = encode_word(c, c->words.text.data + c->words.span[2 * i], c->words.span[2 * i + 1], out, err);
        if (st) return st;
    }
    return AI_OK;
}

ai_status tok_encoder_init(tok_encoder **out, const tokenizer *t, ai_err *err)
{
    *out = NULL;
    if (!t) return ai_err_set(err, AI_ERR_INVALID, "tok_encoder_init: NULL tokenizer");
    enc_ctx *c = calloc(1, sizeof *c);
    if (!c) return ai_err_set(err, AI_ERR_NOMEM, "out of memory");
    c->t = t;
    tok_words_init(&c->words);
    buf_init(&c->norm);
    buf_init(&c->clean);
    c->bpe = bpe_scratch_new();
    if (!c->bpe) {
        tok_encoder_free(c);
        return ai_err_set(err, AI_ERR_NOMEM, "out of memory");
    }
    *out = c;
    return AI_OK;
}

void tok_encoder_free(tok_encoder *c)
{
    if (!c) return;
    if (c->cache) {
        free(c->wc.slots);
        buf_free(&c->wc.keys);
        tok_ids_free(&c->wc.ids);
    }
    bpe_scratch_free(c->bpe);
    tok_words_free(&c->words);
    buf_free(&c->norm);
    buf_free(&c->clean);
    free(c);
}

/* slots: the cache size to create if there is none yet (0: none) */
static ai_status encode(enc_ctx *c, const char *text, size_t len, int flags, uint32_t slots, tok_ids *out,
                        ai_err *err)
{
    const tokenizer *t = c->t;
    if (!text && len) return ai_err_set(err, AI_ERR_INVALID, "tokenizer_encode: NULL text");
    if (!utf8_valid(text, len)) {
        buf_clear(&c->clean);
        utf8_sanitize(&c->clean, text, len);
        if (c->clean.oom) return ai_err_set(err, AI_ERR_NOMEM, "out of memory");
        text = c->clean.data;
        len = c->clean.len;
    }
    if (!c->cache && slots && cache_alloc(&c->wc, slots)) c->cache = &c->wc;
    ai_status st = AI_OK;
    if (flags & TOK_ADD_SPECIAL)
        for (size_t i = 0; i < t->n_prefix && !st; i++)
            if (!tok_ids_push(out, t->prefix[i])) st = ai_err_set(err, AI_ERR_NOMEM, "out of memory");
    size_t pos = 0;
    while (!st && pos <= len) {
        size_t ms, me;
        int32_t id;
        bool hit = tok_added_next(t, text, len, pos, flags & TOK_PARSE_SPECIAL, &ms, &me, &id);
        size_t seg_end = hit ? ms : len;
        st = encode_segment(c, text + pos, seg_end - pos, pos == 0, out, err);
        if (st || !hit) break;
        if (!tok_ids_push(out, id)) st = ai_err_set(err, AI_ERR_NOMEM, "out of memory");
        pos = me;
    }
    if (!st && (flags & TOK_ADD_SPECIAL))
        for (size_t i = 0; i < t->n_suffix && !st; i++)
            if (!tok_ids_push(out, t->suffix[i])) st = ai_err_set(err, AI_ERR_NOMEM, "out of memory");
    return st;
}

ai_status tok_encoder_encode(tok_encoder *c, const char *text, size_t len, int flags, tok_ids *out, ai_err *err)
{
    if (!c) return ai_err_set(err, AI_ERR_INVALID, "tok_encoder_encode: NULL encoder");
    return encode(c, text, len, flags, CACHE_MAX_SLOTS, out, err);
}

ai_status tokenizer_encode(const tokenizer *t, const char *text, size_t len, int flags, tok_ids *out, ai_err *err)
{
    if (!t) return ai_err_set(err, AI_ERR_INVALID, "tokenizer_encode: NULL tokenizer");
    enc_ctx *c;
    ai_status st = tok_encoder_init(&c, t, err);
    if (st) return st;
    uint32_t slots = 0;   /* a throw-away cache sized to the input (about one slot per 8 bytes) */
    if (len >= CACHE_MIN_TEXT)
        for (slots = 256; slots < CACHE_MAX_SLOTS && slots < len / 8;) slots *= 2;
    st = encode(c, text, len, flags, slots, out, err);
    tok_encoder_free(c);
    return st;
}
