/* vocab.c - token table, hash maps (xxHash) and the merge table.
 *
 * Design: all token strings live in one growable arena (t->strings) addressed by offsets,
 * so the table is two allocations however large the vocabulary. The key -> id map and the
 * (left, right) -> (rank, id) merge map are open-addressing tables sized to a power of two
 * at most half full, probed linearly; lookups cost one hash and usually one compare.
 * Control tokens and added tokens outside the model vocabulary are left out of the key map:
 * BPE must never produce them from plain text (they only come from added-token matching).
 */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "tokenizer/tok_internal.h"

ai_status tok_alloc(tokenizer **out, int32_t n_vocab, ai_err *err)
{
    *out = NULL;
    if (n_vocab <= 0 || n_vocab > (1 << 24))
        return ai_err_set(err, AI_ERR_RANGE, "vocabulary size %d out of range (1..16777216)", (int)n_vocab);
    tokenizer *t = calloc(1, sizeof *t);
    if (!t) return ai_err_set(err, AI_ERR_NOMEM, "out of memory");
    t->tok = calloc((size_t)n_vocab, sizeof *t->tok);
    if (!t->tok) { free(t); return ai_err_set(err, AI_ERR_NOMEM, "out of memory (%d tokens)", (int)n_vocab); }
    t->n_vocab = n_vocab;
    buf_init(&t->strings);
    buf_putc(&t->strings, '\0');  /* offset 0 = the empty string */
    t->unk_id = t->bos_id = t->eos_id = -1;
    for (int i = 0; i < 256; i++) t->byte_id[i] = -1;
    *out = t;
    return AI_OK;
}

static ai_status put_string(tokenizer *t, const char *s, size_t n, uint32_t *off, ai_err *err)
{
    if (t->strings.len + n + 1 > UINT32_MAX) return ai_err_set(err, AI_ERR_RANGE, "token strings exceed 4 GiB");
    *off = (uint32_t)t->strings.len;
    buf_append(&t->strings, s, n);
    buf_putc(&t->strings, '\0');
    if (t->strings.oom) return ai_err_set(err, AI_ERR_NOMEM, "out of memory (token strings)");
    return AI_OK;
}

ai_status tok_set_token(tokenizer *t, int32_t id, const char *text, size_t len, uint8_t attr, ai_err *err)
{
    if (id < 0 || id >= t->n_vocab)
        return ai_err_set(err, AI_ERR_RANGE, "token id %d out of range (vocabulary size %d)", (int)id, (int)t->n_vocab);
    if (len > 65536) return ai_err_set(err, AI_ERR_RANGE, "token %d: text of %zu bytes is too long", (int)id, len);
    uint32_t off;
    ai_status st = put_string(t, text, len, &off, err);
    if (st) return st;
    t->tok[id].text_off = off;
    t->tok[id].text_len = (uint32_t)len;
    t->tok[id].attr = attr;
    return AI_OK;
}

static uint32_t pow2_at_least(size_t n)
{
    uint32_t c = 16;
    while (c < n && c < (1u << 31)) c <<= 1;
    return c;
}

static bool in_map(const tok_entry *e)
{
    return !(e->attr & (TOK_ATTR_CONTROL | TOK_ATTR_NOT_MODEL));
}

int32_t tok_lookup(const tokenizer *t, const char *key, size_t len)
{
    if (!t->map.slots) return -1;
    uint64_t h = XXH3_64bits(key, len);
    uint32_t i = (uint32_t)h & t->map.mask, tag = (uint32_t)(h >> 32);
    for (;;) {
        uint64_t v = t->map.slots[i];
        if (!v) return -1;
        if ((uint32_t)(v >> 32) == tag) {
            uint32_t id = (uint32_t)v - 1;
            const tok_entry *e = &t->tok[id];
            if (e->key_len == len && !memcmp(t->strings.data + e->key_off, key, len)) return (int32_t)id;
        }
        i = (i + 1) & t->map.mask;
    }
}

int32_t tok_find_text(const tokenizer *t, const char *text, size_t len)
{
    for (int32_t i = 0; i < t->n_vocab; i++) {
        const tok_entry *e = &t->tok[i];
        if (e->text_len == len && !memcmp(t->strings.data + e->text_off, text, len)) return i;
    }
    return -1;
}

static ai_status build_map(tokenizer *t, ai_err *err)
{
    uint32_t cap = pow2_at_least((size_t)t->n_vocab * 2);
    t->map.slots = calloc(cap, sizeof *t->map.slots);
    if (!t->map.slots) return ai_err_set(err, AI_ERR_NOMEM, "out of memory (token map)");
    t->map.mask = cap - 1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const tok_entry *e = &t->tok[id];
        if (!in_map(e)) continue;
        const char *k = t->strings.data + e->key_off;
        uint64_t h = XXH3_64bits(k, e->key_len);
        uint32_t i = (uint32_t)h & t->map.mask;
        uint64_t slot = (h >> 32 << 32) | ((uint64_t)id + 1);
        for (;;) {
            uint64_t v = t->map.slots[i];
            if (!v) { t->map.slots[i] = slot; break; }
            const tok_entry *o = &t->tok[(uint32_t)v - 1];
            if ((v >> 32) == (h >> 32) && o->key_len == e->key_len && !memcmp(t->strings.data + o->key_off, k, e->key_len)) {
                t->map.slots[i] = slot;  /* duplicate spelling: the later id wins (llama.cpp) */
                break;
            }
            i = (i + 1) & t->map.mask;
        }
    }
    return AI_OK;
}

static int parse_byte_token(const char *s, size_t n)
{
    /* "<0xXX>" */
    if (n != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

ai_status tok_finish(tokenizer *t, ai_err *err)
{
    buf tmp;
    buf_init(&tmp);
    ai_status st = AI_OK;
    for (int32_t id = 0; id < t->n_vocab && !st; id++) {
        tok_entry *e = &t->tok[id];
        e->key_off = e->text_off;
        e->key_len = e->text_len;
        const char *s = t->strings.data + e->text_off;
        if (t->model == TOK_MODEL_BYTES) {
            buf_clear(&tmp);
            if (bytelevel_decode(&tmp, s, e->text_len) && (tmp.len != e->text_len || memcmp(tmp.data, s, tmp.len))) {
                uint32_t off;
                st = put_string(t, tmp.data ? tmp.data : "", tmp.len, &off, err);
                e->key_off = off;
                e->key_len = (uint32_t)tmp.len;
            }
        } else {
            int b = parse_byte_token(s, e->text_len);
            if (b >= 0 && !(e->attr & TOK_ATTR_CONTROL)) {
                e->attr |= TOK_ATTR_BYTE;
                e->byte_val = (uint8_t)b;
                if (t->byte_id[b] < 0) t->byte_id[b] = id;
            }
        }
    }
    buf_free(&tmp);
    if (st) return st;
    if (t->strings.oom) return ai_err_set(err, AI_ERR_NOMEM, "out of memory (token strings)");
    if ((st = build_map(t, err))) return st;
    if (t->model == TOK_MODEL_BYTES)
        for (int b = 0; b < 256; b++) {
            char c = (char)b;
            t->byte_id[b] = tok_lookup(t, &c, 1);
        }
    tok_added_index(t);
    return AI_OK;
}

// --- merge map

static uint64_t pair_key(int32_t l, int32_t r) { return (((uint64_t)(uint32_t)l << 32) | (uint32_t)r) + 1; }
static uint32_t pair_hash(uint64_t k) { return (uint32_t)((k * 0x9E3779B97F4A7C15ull) >> 29); }

static ai_status merge_grow(tokenizer *t, size_t want, ai_err *err)
{
    tok_mergemap *m = &t->merges;
    uint32_t cap = m->slots ? (m->mask + 1) * 2 : 1024;
    while (cap < want * 2 && cap < (1u << 30)) cap *= 2;
    tok_merge *slots = calloc(cap, sizeof *slots);
    if (!slots) return ai_err_set(err, AI_ERR_NOMEM, "out of memory (merge table)");
    for (uint32_t i = 0; m->slots && i <= m->mask; i++) {
        if (!m->slots[i].key) continue;
        uint32_t j = pair_hash(m->slots[i].key) & (cap - 1);
        while (slots[j].key) j = (j + 1) & (cap - 1);
        slots[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = slots;
    m->mask = cap - 1;
    return AI_OK;
}

ai_status tok_merge_reserve(tokenizer *t, size_t n, ai_err *err)
{
    if (n > (1u << 28)) return ai_err_set(err, AI_ERR_RANGE, "%zu merges is too many", n);
    return t->merges.slots ? AI_OK : merge_grow(t, n, err);
}

ai_status tok_merge_add(tokenizer *t, int32_t left, int32_t right, int32_t rank, int32_t id, ai_err *err)
{
    tok_mergemap *m = &t->merges;
    if (!m->slots || (m->count + 1) * 2 > m->mask + 1) {
        ai_status st = merge_grow(t, 0, err);
        if (st) return st;
    }
    uint64_t k = pair_key(left, right);
    uint32_t i = pair_hash(k) & m->mask;
    while (m->slots[i].key && m->slots[i].key != k) i = (i + 1) & m->mask;
    tok_merge *e = &m->slots[i];
    if (e->key) {               /* the same pair twice: keep the earlier (lower) rank */
        if (rank < e->rank) { e->rank = rank; e->id = id; }
        return AI_OK;
    }
    *e = (tok_merge){k, rank, id};
    m->count++;
    return AI_OK;
}

bool tok_merge_get(const tokenizer *t, int32_t left, int32_t right, int32_t *rank, int32_t *id)
{
    const tok_mergemap *m = &t->merges;
    if (!m->slots) return false;
    uint64_t k = pair_key(left, right);
    uint32_t i = pair_hash(k) & m->mask;
    for (;;) {
        const tok_merge *e = &m->slots[i];
        if (!e->key) return false;
        if (e->key == k) { *rank = e->rank; *id = e->id; return true; }
        i = (i + 1) & m->mask;
    }
}

/* Every token with rank >= 0 becomes the result of each split of its key into two tokens:
 * "merge the adjacent pair whose concatenation is a token of the lowest rank" (tiktoken ranks,
 * SentencePiece scores) is then exactly a lookup in the merge table. */
ai_status tok_merges_from_ranks(tokenizer *t, const int32_t *rank, ai_err *err)
{
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (rank[id] < 0) continue;
        size_t n;
        const char *k = tok_key(t, id, &n);
        for (size_t i = 1; i < n; i++) {
            if (t->model == TOK_MODEL_CHARS && ((unsigned char)k[i] & 0xC0) == 0x80) continue;
            int32_t l = tok_lookup(t, k, i);
            if (l < 0) continue;
            int32_t r = tok_lookup(t, k + i, n - i);
            if (r < 0) continue;
            ai_status st = tok_merge_add(t, l, r, rank[id], id, err);
            if (st) return st;
        }
    }
    return AI_OK;
}

// --- added tokens

ai_status tok_add_added(tokenizer *t, int32_t id, const char *content, size_t len, bool special,
                        bool lstrip, bool rstrip, bool single_word, bool normalized, ai_err *err)
{
    if (id < 0 || id >= t->n_vocab)
        return ai_err_set(err, AI_ERR_RANGE, "added token id %d out of range (vocabulary size %d)", (int)id, (int)t->n_vocab);
    if (len == 0) return AI_OK;  /* an empty added token can never match */
    tok_added *a = realloc(t->added, (t->n_added + 1) * sizeof *a);
    if (!a) return ai_err_set(err, AI_ERR_NOMEM, "out of memory (added tokens)");
    t->added = a;
    char *c = malloc(len + 1);
    if (!c) return ai_err_set(err, AI_ERR_NOMEM, "out of memory (added tokens)");
    memcpy(c, content, len);
    c[len] = '\0';
    a[t->n_added++] = (tok_added){id, c, len, special, lstrip, rstrip, single_word, normalized};
    return AI_OK;
}

void tokenizer_free(tokenizer *t)
{
    if (!t) return;
    free(t->tok);
    buf_free(&t->strings);
    free(t->map.slots);
    free(t->merges.slots);
    for (size_t i = 0; i < t->n_added; i++) free(t->added[i].content);
    free(t->added);
    for (size_t i = 0; i < t->n_norm; i++) {
        free(t->norm[i].a); free(t->norm[i].b);
        pcre2_code_free(t->norm[i].re);
    }
    for (size_t i = 0; i < t->n_pre; i++) {
        pcre2_code_free(t->pre[i].re);
        free(t->pre[i].literal);
    }
    free(t);
}

void tok_ids_init(tok_ids *v) { v->data = NULL; v->len = v->cap = 0; }
void tok_ids_free(tok_ids *v) { free(v->data); tok_ids_init(v); }
bool tok_ids_push(tok_ids *v, int32_t id)
{
    if (v->len == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        int32_t *d = realloc(v->data, cap * sizeof *d);
        if (!d) return false;
        v->data = d; v->cap = cap;
    }
    v->data[v->len++] = id;
    return true;
}

int32_t tokenizer_n_vocab(const tokenizer *t) { return t->n_vocab; }
int32_t tokenizer_bos(const tokenizer *t) { return t->bos_id; }
int32_t tokenizer_eos(const tokenizer *t) { return t->eos_id; }
bool tokenizer_is_special(const tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab && (t->tok[id].attr & TOK_ATTR_CONTROL);
}
bool tokenizer_is_eog(const tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab && (id == t->eos_id || (t->tok[id].attr & TOK_ATTR_EOG));
}
const char *tokenizer_piece(const tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_vocab) return NULL;
    return tok_text(t, id, len);
}
