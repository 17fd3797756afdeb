/* normalize.c - HF normalizers: NFC/NFKC/NFD/NFKD (utf8proc), Lowercase, Prepend, Replace, Strip.
 *
 * Steps run in order on a copy of the segment. Unicode forms skip pure-ASCII text (already in
 * every normal form), which keeps English fast. Prepend, like HF, does nothing on empty text.
 */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "aiinfra/utf8.h"
#include "tokenizer/tok_internal.h"

static ai_status unicode_chunk(buf *out, const char *s, size_t n, utf8proc_option_t opt, ai_err *err)
{
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst, opt | UTF8PROC_STABLE);
    if (r < 0) return ai_err_set(err, AI_ERR_RUNTIME, "normalizer: %s", utf8proc_errmsg(r));
    buf_append(out, dst, (size_t)r);
    free(dst);
    return AI_OK;
}

/* Characters that every normal form leaves alone and that never combine with a neighbour:
 * ASCII, CJK unified ideographs, CJK punctuation (minus the combining tone marks U+302A..302F)
 * and fullwidth ASCII variants. Only runs of other characters (plus the one safe character
 * before each run, which may be a base for combining marks) go through utf8proc; the rest is
 * copied. English and Chinese text thus skip utf8proc almost entirely. */
static bool nf_stable(uint32_t cp)
{
    return cp < 0x80 || (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3000 && cp <= 0x3029) ||
           (cp >= 0x3030 && cp <= 0x303F) || (cp >= 0xFF01 && cp <= 0xFF5E);
}

static ai_status unicode_form(buf *out, const char *s, size_t n, utf8proc_option_t opt, ai_err *err)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, copied = 0, prev = 0;   /* prev: start of the previous (stable) character */
    while (i < n) {
        uint32_t cp = p[i];
        size_t k = cp < 0x80 ? 1 : utf8_decode(p + i, n - i, &cp);
        if (nf_stable(cp)) { prev = i; i += k; continue; }
        size_t a = i > copied ? prev : i;    /* include the preceding stable character */
        size_t b = i + k;
        while (b < n) {
            uint32_t c2 = p[b];
            size_t k2 = c2 < 0x80 ? 1 : utf8_decode(p + b, n - b, &c2);
            if (nf_stable(c2)) break;
            b += k2;
        }
        buf_append(out, s + copied, a - copied);
        ai_status st = unicode_chunk(out, s + a, b - a, opt, err);
        if (st) return st;
        copied = i = b;
    }
    buf_append(out, s + copied, n - copied);
    return AI_OK;
}

static ai_status apply(const norm_step *st, const char *s, size_t n, buf *out, ai_err *err)
{
    switch (st->kind) {
    case NORM_NFC: return unicode_form(out, s, n, UTF8PROC_COMPOSE, err);
    case NORM_NFKC: return unicode_form(out, s, n, UTF8PROC_COMPOSE | UTF8PROC_COMPAT, err);
    case NORM_NFD: return unicode_form(out, s, n, UTF8PROC_DECOMPOSE, err);
    case NORM_NFKD: return unicode_form(out, s, n, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, err);
    case NORM_LOWER: {
        size_t i = 0;
        char tmp[4];
        while (i < n) {
            uint32_t cp;
            size_t k = utf8_decode((const unsigned char *)s + i, n - i, &cp);
            size_t m = utf8_encode((uint32_t)utf8proc_tolower((utf8proc_int32_t)cp), tmp);
            buf_append(out, tmp, m);
            i += k;
        }
        return AI_OK;
    }
    case NORM_PREPEND:
        if (n) buf_append(out, st->a, st->a_len);
        buf_append(out, s, n);
        return AI_OK;
    case NORM_REPLACE:
        if (st->re) {
            pcre2_match_data *md = pcre2_match_data_create(1, NULL);
            if (!md) return ai_err_set(err, AI_ERR_NOMEM, "out of memory");
            size_t pos = 0, last = 0;
            while (pos <= n) {
                int rc = pcre2_match(st->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
                if (rc < 0) break;
                PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
                if (ov[1] == ov[0]) {
                    if (ov[0] >= n) break;
                    pos = ov[0] + 1;
                    while (pos < n && ((unsigned char)s[pos] & 0xC0) == 0x80) pos++;
                    continue;
                }
                buf_append(out, s + last, ov[0] - last);
                buf_append(out, st->b, st->b_len);
                last = pos = ov[1];
            }
            buf_append(out, s + last, n - last);
            pcre2_match_data_free(md);
            return AI_OK;
        } else {
            size_t i = 0, last = 0;
            while (st->a_len && i + st->a_len <= n) {
                if (s[i] == st->a[0] && !memcmp(s + i, st->a, st->a_len)) {
                    buf_append(out, s + last, i - last);
                    buf_append(out, st->b, st->b_len);
                    i += st->a_len;
                    last = i;
                } else {
                    i++;
                }
            }
            buf_append(out, s + last, n - last);
            return AI_OK;
        }
    case NORM_STRIP: {
        size_t a = 0, b = n;
        if (st->left) while (a < b && (s[a] == ' ' || (s[a] >= '\t' && s[a] <= '\r'))) a++;
        if (st->right) while (b > a && (s[b - 1] == ' ' || (s[b - 1] >= '\t' && s[b - 1] <= '\r'))) b--;
        buf_append(out, s + a, b - a);
        return AI_OK;
    }
    }
    return AI_OK;
}

ai_status tok_normalize(const tokenizer *t, const char *s, size_t n, bool first, buf *out, ai_err *err)
{
    (void)first;
    buf cur, nxt;
    buf_init(&cur);
    buf_init(&nxt);
    buf_append(&cur, s, n);
    ai_status st = AI_OK;
    for (size_t i = 0; i < t->n_norm && !st; i++) {
        buf_clear(&nxt);
        st = apply(&t->norm[i], cur.data ? cur.data : "", cur.len, &nxt, err);
        buf x = cur; cur = nxt; nxt = x;
    }
    if (!st && (cur.oom || nxt.oom)) st = ai_err_set(err, AI_ERR_NOMEM, "out of memory (normalizer)");
    if (!st) buf_append(out, cur.data ? cur.data : "", cur.len);
    buf_free(&cur);
    buf_free(&nxt);
    return st;
}
