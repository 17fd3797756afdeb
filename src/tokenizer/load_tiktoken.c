/* load_tiktoken.c - OpenAI *.tiktoken files: one "base64(token bytes) rank" per line.
 *
 * The file holds no pattern and no special tokens; both are known by the encoding's name
 * (cl100k_base, o200k_base), taken from the file name. tiktoken merges "the adjacent pair whose
 * concatenation has the lowest rank" and returns a piece whole when it is a token; that is a
 * rank-derived merge table plus ignore_merges (tok_merges_from_ranks), so bpe.c serves it too.
 */
#include <stdlib.h>
#include <string.h>

#include "aiinfra/fileio.h"
#include "tokenizer/tok_internal.h"

static const char RE_CL100K[] =
    "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}++|\\p{N}{1,3}+| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*+|\\s++$|"
    "\\s*[\\r\\n]|\\s+(?!\\S)|\\s";
static const char RE_O200K[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct special { const char *name; int32_t id; };
static const struct special CL100K_SPECIAL[] = {
    {"<|endoftext|>", 100257}, {"<|fim_prefix|>", 100258}, {"<|fim_middle|>", 100259},
    {"<|fim_suffix|>", 100260}, {"<|endofprompt|>", 100276}, {NULL, 0}};
static const struct special O200K_SPECIAL[] = {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}, {NULL, 0}};

static int b64val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Decodes base64 s[0..n) into out; false if malformed. */
static bool b64_decode(const char *s, size_t n, buf *out)
{
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '=') break;
        int v = b64val((unsigned char)s[i]);
        if (v < 0) return false;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            buf_putc(out, (char)((acc >> bits) & 0xFF));
        }
    }
    return true;
}

ai_status tok_load_tiktoken(tokenizer **out, const char *path, ai_err *err)
{
    *out = NULL;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *re;
    const struct special *sp;
    if (!strncmp(base, "cl100k_base", 11)) { re = RE_CL100K; sp = CL100K_SPECIAL; }
    else if (!strncmp(base, "o200k_base", 10)) { re = RE_O200K; sp = O200K_SPECIAL; }
    else return ai_err_set(err, AI_ERR_UNSUPPORTED, "%s: unknown tiktoken encoding (expected cl100k_base or o200k_base)", path);

    char *data;
    size_t len;
    ai_status st = file_read_all(path, 64u << 20, &data, &len, err);
    if (st) return st;
    /* pass 1: count lines and the largest rank */
    int64_t max_id = -1;
    for (const struct special *s = sp; s->name; s++) if (s->id > max_id) max_id = s->id;
    size_t i = 0;
    int line = 0;
    while (i < len) {
        size_t j = i;
        while (j < len && data[j] != '\n') j++;
        line++;
        if (j > i) {
            const char *spc = memchr(data + i, ' ', j - i);
            char *e;
            long r = spc ? strtol(spc + 1, &e, 10) : -1;
            if (!spc || r < 0 || r >= (1 << 24) || (e != data + j && *e != '\r')) {
                free(data);
                return ai_err_set(err, AI_ERR_FORMAT, "%s: line %d is not 'base64 rank'", path, line);
            }
            if (r > max_id) max_id = r;
        }
        i = j + 1;
    }
    tokenizer *t;
    if ((st = tok_alloc(&t, (int32_t)(max_id + 1), err))) { free(data); return st; }
    t->model = TOK_MODEL_BYTES;
    for (int32_t k = 0; k < t->n_vocab; k++) t->tok[k].attr = TOK_ATTR_UNUSED | TOK_ATTR_NOT_MODEL;
    buf raw, txt;
    buf_init(&raw);
    buf_init(&txt);
    i = 0;
    line = 0;
    while (i < len && !st) {
        size_t j = i;
        while (j < len && data[j] != '\n') j++;
        line++;
        if (j > i) {
            const char *spc = memchr(data + i, ' ', j - i);
            int32_t r = (int32_t)strtol(spc + 1, NULL, 10);
            buf_clear(&raw);
            buf_clear(&txt);
            if (!b64_decode(data + i, (size_t)(spc - (data + i)), &raw) || raw.len == 0) {
                st = ai_err_set(err, AI_ERR_FORMAT, "%s: line %d: bad base64", path, line);
                break;
            }
            bytelevel_encode(&txt, raw.data, raw.len);
            st = tok_set_token(t, r, txt.data, txt.len, 0, err);
        }
        i = j + 1;
    }
    for (const struct special *s = sp; s->name && !st; s++) {
        st = tok_set_token(t, s->id, s->name, strlen(s->name), TOK_ATTR_CONTROL, err);
        if (!st) st = tok_add_added(t, s->id, s->name, strlen(s->name), true, false, false, false, false, err);
    }
    int32_t *rank = NULL;
    if (!st) st = tok_finish(t, err);
    if (!st) {
        rank = malloc((size_t)t->n_vocab * sizeof *rank);
        if (!rank) st = ai_err_set(err, AI_ERR_NOMEM, "out of memory");
        for (int32_t k = 0; rank && k < t->n_vocab; k++) rank[k] = (t->tok[k].attr & (TOK_ATTR_NOT_MODEL | TOK_ATTR_CONTROL)) ? -1 : k;
    }
    if (!st) st = tok_merges_from_ranks(t, rank, err);
    free(rank);
    if (!st) {
        t->ignore_merges = true;
        t->dec_bytelevel = true;
        t->eos_id = sp[0].id;
        t->tok[t->eos_id].attr |= TOK_ATTR_EOG;
        t->pre[0].kind = PRETOK_SPLIT;
        t->pre[0].behavior = SPLIT_ISOLATED;
        st = tok_regex_compile(&t->pre[0].re, re, strlen(re), err);
        if (!st) t->n_pre = 1;
    }
    buf_free(&raw);
    buf_free(&txt);
    free(data);
    if (st) { tokenizer_free(t); return st; }
    *out = t;
    return AI_OK;
}
