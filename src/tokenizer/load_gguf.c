/* load_gguf.c - tokenizer from GGUF metadata (llama.cpp's tokenizer.ggml.* keys).
 *
 *   tokenizer.ggml.model   "gpt2" -> byte-level BPE with tokenizer.ggml.merges ("a b" strings)
 *                          "llama" -> SentencePiece-style BPE: merges from tokenizer.ggml.scores
 *                                     (highest score first), byte fallback, U+2581 for spaces
 *   tokenizer.ggml.pre     pre-tokenizer regexes by name (regex.c, as llama.cpp picks them)
 *   tokenizer.ggml.tokens / token_type (1 normal, 2 unknown, 3 control, 4 user-defined,
 *                          5 unused, 6 byte) / bos, eos, unknown, eot, eom token ids /
 *                          add_bos_token, add_eos_token, add_space_prefix
 * Control, unknown and user-defined tokens are matched in the text before BPE (control ones
 * only with TOK_PARSE_SPECIAL), which is what llama.cpp and HF do.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

ai_status tok_load_gguf_path(tokenizer **out, const char *path, ai_err *err);

#define KEY(k) "tokenizer.ggml." k

static bool get_id(const gguf *g, const char *key, int32_t n, int32_t *out)
{
    int64_t v;
    if (!gguf_get_i64(g, key, &v) || v < 0 || v >= n) return false;
    *out = (int32_t)v;
    return true;
}

static int cmp_float_desc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x > y ? -1 : x < y;
}

/* rank[id] = dense rank of the token's score, highest score = 0; -1 for non-normal tokens */
static ai_status ranks_from_scores(const tokenizer *t, const gguf *g, int32_t *rank, ai_err *err)
{
    int32_t n = t->n_vocab;
    float *sc = malloc((size_t)n * sizeof *sc), *sorted = malloc((size_t)n * sizeof *sorted);
    if (!sc || !sorted) { free(sc); free(sorted); return ai_err_set(err, AI_ERR_NOMEM, "out of memory"); }
    for (int32_t i = 0; i < n; i++) {
        if (!gguf_arr_f32(g, KEY("scores"), (uint64_t)i, &sc[i])) {
            free(sc); free(sorted);
            return ai_err_set(err, AI_ERR_FORMAT, KEY("scores") " missing, not float or shorter than the token list");
        }
        if (sc[i] != sc[i]) sc[i] = -1e30f;  /* NaN sorts last */
        sorted[i] = sc[i];
    }
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_float_desc);
    for (int32_t i = 0; i < n; i++) {
        if (t->tok[i].attr) { rank[i] = -1; continue; }
        size_t lo = 0, hi = (size_t)n;   /* first index with sorted[idx] <= sc[i] */
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (sorted[mid] > sc[i]) lo = mid + 1; else hi = mid;
        }
        rank[i] = (int32_t)lo;           /* equal scores share a rank: ties go to the leftmost pair */
    }
    free(sc);
    free(sorted);
    return AI_OK;
}

static ai_status load_merges(tokenizer *t, const gguf *g, ai_err *err)
{
    enum gguf_type et;
    uint64_t n;
    if (!gguf_get_arr(g, KEY("merges"), &et, &n) || et != GGUF_TYPE_STRING)
        return ai_err_set(err, AI_ERR_FORMAT, KEY("merges") " missing or not a string array");
    ai_status st = tok_merge_reserve(t, n, err);
    if (st) return st;
    buf ka, kb, cat;
    buf_init(&ka); buf_init(&kb); buf_init(&cat);
    for (uint64_t j = 0; j < n && !st; j++) {
        gguf_str s;
        if (!gguf_arr_str(g, KEY("merges"), j, &s)) { st = ai_err_set(err, AI_ERR_FORMAT, KEY("merges") "[%llu] unreadable", (unsigned long long)j); break; }
        const char *sp = memchr(s.ptr, ' ', s.len);
        if (!sp) { st = ai_err_set(err, AI_ERR_FORMAT, KEY("merges") "[%llu] is not 'a b'", (unsigned long long)j); break; }
        buf_clear(&ka); buf_clear(&kb); buf_clear(&cat);
        size_t an = (size_t)(sp - s.ptr), bn = s.len - an - 1;
        if (!bytelevel_decode(&ka, s.ptr, an)) buf_append(&ka, s.ptr, an);
        if (!bytelevel_decode(&kb, sp + 1, bn)) buf_append(&kb, sp + 1, bn);
        buf_append(&cat, ka.data, ka.len);
        buf_append(&cat, kb.data, kb.len);
        int32_t l = tok_lookup(t, ka.data ? ka.data : "", ka.len), r = tok_lookup(t, kb.data ? kb.data : "", kb.len);
        int32_t id = tok_lookup(t, cat.data ? cat.data : "", cat.len);
        if (l < 0 || r < 0 || id < 0) {
            st = ai_err_set(err, AI_ERR_FORMAT, KEY("merges") "[%llu] '%.*s' names a token not in the vocabulary",
                            (unsigned long long)j, (int)(s.len > 60 ? 60 : s.len), s.ptr);
            break;
        }
        st = tok_merge_add(t, l, r, (int32_t)(j > INT32_MAX ? INT32_MAX : j), id, err);
    }
    buf_free(&ka); buf_free(&kb); buf_free(&cat);
    return st;
}

static ai_status set_step_norm(tokenizer *t, enum norm_kind kind, const char *a, const char *b, ai_err *err)
{
    norm_step *s = &t->norm[t->n_norm];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->a_len = strlen(a);
    s->a = malloc(s->a_len + 1);
    if (b) { s->b_len = strlen(b); s->b = malloc(s->b_len + 1); }
    if (!s->a || (b && !s->b)) { free(s->a); free(s->b); return ai_err_set(err, AI_ERR_NOMEM, "out of memory"); }
    memcpy(s->a, a, s->a_len + 1);
    if (b) memcpy(s->b, b, s->b_len + 1);
    t->n_norm++;
    return AI_OK;
}

ai_status tokenizer_from_gguf(tokenizer **out, const gguf *g, ai_err *err)
{
    if (!out || !g) return ai_err_set(err, AI_ERR_INVALID, "tokenizer_from_gguf: NULL argument");
    *out = NULL;
    gguf_str ms;
    if (!gguf_get_str(g, KEY("model"), &ms)) return ai_err_set(err, AI_ERR_FORMAT, KEY("model") " missing");
    bool spm;
    if (ms.len == 4 && !memcmp(ms.ptr, "gpt2", 4)) spm = false;
    else if (ms.len == 5 && !memcmp(ms.ptr, "llama", 5)) spm = true;
    else return ai_err_set(err, AI_ERR_UNSUPPORTED, KEY("model") " '%.*s' unsupported (gpt2 or llama)", (int)(ms.len > 40 ? 40 : ms.len), ms.ptr);
    enum gguf_type et;
    uint64_t n;
    if (!gguf_get_arr(g, KEY("tokens"), &et, &n) || et != GGUF_TYPE_STRING)
        return ai_err_set(err, AI_ERR_FORMAT, KEY("tokens") " missing or not a string array");
    if (n == 0 || n > (1u << 24)) return ai_err_set(err, AI_ERR_RANGE, KEY("tokens") ": %llu tokens out of range", (unsigned long long)n);
    tokenizer *t;
    ai_status st = tok_alloc(&t, (int32_t)n, err);
    if (st) return st;
    t->model = spm ? TOK_MODEL_CHARS : TOK_MODEL_BYTES;
    uint64_t n_types = 0;
    enum gguf_type tt;
    bool has_types = gguf_get_arr(g, KEY("token_type"), &tt, &n_types);
    if (has_types && n_types != n) { st = ai_err_set(err, AI_ERR_FORMAT, KEY("token_type") " has %llu entries, tokens %llu", (unsigned long long)n_types, (unsigned long long)n); goto fail; }
    for (uint64_t i = 0; i < n && !st; i++) {
        gguf_str s;
        if (!gguf_arr_str(g, KEY("tokens"), i, &s)) { st = ai_err_set(err, AI_ERR_FORMAT, KEY("tokens") "[%llu] unreadable", (unsigned long long)i); break; }
        int64_t type = 1;
        if (has_types && !gguf_arr_i64(g, KEY("token_type"), i, &type)) { st = ai_err_set(err, AI_ERR_FORMAT, KEY("token_type") "[%llu] unreadable", (unsigned long long)i); break; }
        uint8_t attr = type == 2 ? TOK_ATTR_UNKNOWN : type == 3 ? TOK_ATTR_CONTROL : type == 4 ? TOK_ATTR_USER
                     : type == 5 ? TOK_ATTR_UNUSED : type == 6 ? TOK_ATTR_BYTE : 0;
        if (type == 6) attr = 0;  /* byte tokens are found by spelling in tok_finish */
        st = tok_set_token(t, (int32_t)i, s.ptr, s.len, attr, err);
        if (!st && (type == 2 || type == 3 || type == 4) && s.len)
            st = tok_add_added(t, (int32_t)i, s.ptr, s.len, type != 4, false, false, false, false, err);
    }
    if (st) goto fail;
    if ((st = tok_finish(t, err))) goto fail;
    int32_t id;
    if (get_id(g, KEY("bos_token_id"), t->n_vocab, &id)) t->bos_id = id;
    if (get_id(g, KEY("eos_token_id"), t->n_vocab, &id)) t->eos_id = id;
    if (get_id(g, KEY("unknown_token_id"), t->n_vocab, &id)) t->unk_id = id;
    static const char *const eog_keys[] = {KEY("eos_token_id"), KEY("eot_token_id"), KEY("eom_token_id"), NULL};
    for (int k = 0; eog_keys[k]; k++)
        if (get_id(g, eog_keys[k], t->n_vocab, &id)) t->tok[id].attr |= TOK_ATTR_EOG;
    bool add_bos = spm, add_eos = false, add_space = spm;
    gguf_get_bool(g, KEY("add_bos_token"), &add_bos);
    gguf_get_bool(g, KEY("add_eos_token"), &add_eos);
    gguf_get_bool(g, KEY("add_space_prefix"), &add_space);
    if (add_bos && t->bos_id >= 0) t->prefix[t->n_prefix++] = t->bos_id;
    if (add_eos && t->eos_id >= 0) t->suffix[t->n_suffix++] = t->eos_id;

    if (spm) {
        int32_t *rank = malloc((size_t)t->n_vocab * sizeof *rank);
        if (!rank) { st = ai_err_set(err, AI_ERR_NOMEM, "out of memory"); goto fail; }
        st = ranks_from_scores(t, g, rank, err);
        if (!st) st = tok_merges_from_ranks(t, rank, err);
        free(rank);
        if (st) goto fail;
        t->byte_fallback = true;
        if (add_space && (st = set_step_norm(t, NORM_PREPEND, "\xE2\x96\x81", NULL, err))) goto fail;
        if ((st = set_step_norm(t, NORM_REPLACE, " ", "\xE2\x96\x81", err))) goto fail;
        t->dec_meta = true;
        t->dec_byte_fallback = true;
        t->dec_strip_lead = add_space ? 1 : 0;
    } else {
        if ((st = load_merges(t, g, err))) goto fail;
        gguf_str pre;
        char name[64] = "default";
        if (gguf_get_str(g, KEY("pre"), &pre)) {
            size_t k = pre.len < sizeof name - 1 ? pre.len : sizeof name - 1;
            memcpy(name, pre.ptr, k);
            name[k] = '\0';
        }
        if ((st = tok_pre_from_name(t, name, err))) goto fail;
        t->ignore_merges = !strcmp(name, "llama-bpe") || !strcmp(name, "llama3") || !strcmp(name, "llama-v3");
        if ((st = bpe_mark_self(t, err))) goto fail;
        t->dec_bytelevel = true;
    }
    *out = t;
    return AI_OK;
fail:
    tokenizer_free(t);
    return st;
}

ai_status tok_load_gguf_path(tokenizer **out, const char *path, ai_err *err)
{
    gguf *g;
    ai_status st = gguf_open(&g, path, err);
    if (st) return st;
    st = tokenizer_from_gguf(out, g, err);
    if (st) ai_err_prefix(err, "%s", path);
    gguf_close(g);
    return st;
}
