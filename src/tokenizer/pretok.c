/* pretok.c - pre-tokenization: cut a normalized segment into words that BPE sees one at a time.
 *
 * Each step of t->pre maps a list of pieces to a new list (HF's PreTokenizedString::split):
 * a step finds "matches" in each piece (regex, literal, digits, whitespace ...), which together
 * with the gaps between them cover the piece, then a behavior (Isolated, Removed,
 * MergedWithPrevious, MergedWithNext, Contiguous; optionally inverted) turns the spans
 * into pieces, dropping empty ones. Pieces are (offset, length) pairs into a text buffer;
 * a step that rewrites text (prefix space, Metaspace) writes a new buffer.
 *
 * Regex matching runs on each piece as its own subject, as HF does, so look-arounds stop at
 * piece boundaries. Empty matches are skipped (one character forward).
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

void tok_words_init(tok_words *w)
{
    buf_init(&w->text);
    w->span = NULL;
    w->n = w->cap = 0;
}

void tok_words_free(tok_words *w)
{
    buf_free(&w->text);
    free(w->span);
    w->span = NULL;
    w->n = w->cap = 0;
}

static bool words_push(tok_words *w, size_t off, size_t len)
{
    if (len == 0) return true;
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 256;
        size_t *s = realloc(w->span, cap * 2 * sizeof *s);
        if (!s) return false;
        w->span = s;
        w->cap = cap;
    }
    w->span[2 * w->n] = off;
    w->span[2 * w->n + 1] = len;
    w->n++;
    return true;
}

/* matches of one piece: (start, end) pairs, increasing, non-overlapping */
typedef struct match_list {
    size_t *m;
    size_t n, cap;
    bool oom;
} match_list;

static void ml_push(match_list *ml, size_t s, size_t e)
{
    if (ml->n == ml->cap) {
        size_t cap = ml->cap ? ml->cap * 2 : 64;
        size_t *m = realloc(ml->m, cap * 2 * sizeof *m);
        if (!m) { ml->oom = true; return; }
        ml->m = m;
        ml->cap = cap;
    }
    ml->m[2 * ml->n] = s;
    ml->m[2 * ml->n + 1] = e;
    ml->n++;
}

static size_t char_len(const char *s, size_t n, size_t i)
{
    size_t k = 1;
    while (i + k < n && ((unsigned char)s[i + k] & 0xC0) == 0x80) k++;
    return k;
}

static ai_status find_regex(const pcre2_code *re, pcre2_match_data *md, const char *s, size_t n, match_list *ml, ai_err *err)
{
    size_t pos = 0;
    while (pos <= n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[120];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return ai_err_set(err, AI_ERR_RUNTIME, "pre-tokenizer regex: %s", (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t a = ov[0], b = ov[1];
        if (b == a) {                 /* empty match: step over one character */
            if (a >= n) break;
            pos = a + char_len(s, n, a);
            continue;
        }
        ml_push(ml, a, b);
        pos = b;
    }
    return ml->oom ? ai_err_set(err, AI_ERR_NOMEM, "out of memory (pre-tokenizer)") : AI_OK;
}

static void find_literal(const char *lit, size_t ln, const char *s, size_t n, match_list *ml)
{
    if (ln == 0) return;
    size_t i = 0;
    while (i + ln <= n) {
        if (s[i] == lit[0] && !memcmp(s + i, lit, ln)) {
            ml_push(ml, i, i + ln);
            i += ln;
        } else {
            i++;
        }
    }
}

/* Applies `behavior` to the spans of piece [0, n) given its matches; pushes to out (offsets + base). */
static bool apply_behavior(enum split_behavior bh, bool invert, const match_list *ml, size_t n, size_t base, tok_words *out)
{
    /* build the full span list: (start, end, is_match) */
    size_t cnt = 0, pos = 0;
    size_t total = ml->n * 2 + 1;
    size_t *sp = malloc(total * 3 * sizeof *sp);
    if (!sp) return false;
    for (size_t i = 0; i < ml->n; i++) {
        size_t a = ml->m[2 * i], b = ml->m[2 * i + 1];
        if (a > pos) { sp[3 * cnt] = pos; sp[3 * cnt + 1] = a; sp[3 * cnt + 2] = invert; cnt++; }
        sp[3 * cnt] = a; sp[3 * cnt + 1] = b; sp[3 * cnt + 2] = !invert; cnt++;
        pos = b;
    }
    if (pos < n) { sp[3 * cnt] = pos; sp[3 * cnt + 1] = n; sp[3 * cnt + 2] = invert; cnt++; }

    /* fold into pieces (same rules as HF's SplitDelimiterBehavior) */
    size_t *ps = malloc((cnt + 1) * 2 * sizeof *ps);
    if (!ps) { free(sp); return false; }
    size_t np = 0;
    bool prev_match = false;
    switch (bh) {
    case SPLIT_ISOLATED:
        for (size_t i = 0; i < cnt; i++) { ps[2 * np] = sp[3 * i]; ps[2 * np + 1] = sp[3 * i + 1]; np++; }
        break;
    case SPLIT_REMOVED:
        for (size_t i = 0; i < cnt; i++)
            if (!sp[3 * i + 2]) { ps[2 * np] = sp[3 * i]; ps[2 * np + 1] = sp[3 * i + 1]; np++; }
        break;
    case SPLIT_MERGED_PREV:
        for (size_t i = 0; i < cnt; i++) {
            bool m = sp[3 * i + 2];
            if (m && !prev_match && np > 0) ps[2 * np - 1] = sp[3 * i + 1];
            else { ps[2 * np] = sp[3 * i]; ps[2 * np + 1] = sp[3 * i + 1]; np++; }
            prev_match = m;
        }
        break;
    case SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < cnt; i++) {
            bool m = sp[3 * i + 2];
            if (m == prev_match && np > 0) ps[2 * np - 1] = sp[3 * i + 1];
            else { ps[2 * np] = sp[3 * i]; ps[2 * np + 1] = sp[3 * i + 1]; np++; }
            prev_match = m;
        }
        break;
    case SPLIT_MERGED_NEXT:
        for (size_t j = cnt; j-- > 0;) {
            bool m = sp[3 * j + 2];
            if (m && !prev_match && np > 0) ps[2 * np - 2] = sp[3 * j];
            else { ps[2 * np] = sp[3 * j]; ps[2 * np + 1] = sp[3 * j + 1]; np++; }
            prev_match = m;
        }
        for (size_t i = 0; i < np / 2; i++) {   /* back to text order */
            size_t a = ps[2 * i], b = ps[2 * i + 1];
            ps[2 * i] = ps[2 * (np - 1 - i)]; ps[2 * i + 1] = ps[2 * (np - 1 - i) + 1];
            ps[2 * (np - 1 - i)] = a; ps[2 * (np - 1 - i) + 1] = b;
        }
        break;
    }
    bool ok = true;
    for (size_t i = 0; i < np && ok; i++) ok = words_push(out, base + ps[2 * i], ps[2 * i + 1] - ps[2 * i]);
    free(ps);
    free(sp);
    return ok;
}

static const char PUNCT_RE[] = "[\\p{P}!-/:-@\\[-`{-~]";
static const char DIGIT_RE[] = "\\p{N}";

/* One step over all pieces of `in`, results in `out` (whose text is a copy or a rewrite). */
static ai_status run_step(const tokenizer *t, const pretok_step *st, bool first, const tok_words *in, tok_words *out,
                          pcre2_code **aux, pcre2_match_data *md, ai_err *err)
{
    ai_status rc = AI_OK;
    match_list ml = {0};
    for (size_t i = 0; i < in->n && !rc; i++) {
        const char *p = in->text.data + in->span[2 * i];
        size_t n = in->span[2 * i + 1];
        size_t base = out->text.len;
        ml.n = 0;
        switch (st->kind) {
        case PRETOK_BYTELEVEL:
            if (st->add_prefix_space && p[0] != ' ') { buf_putc(&out->text, ' '); n++; }
            buf_append(&out->text, p, st->add_prefix_space && p[0] != ' ' ? n - 1 : n);
            p = out->text.data + base;
            if (!st->re) { if (!words_push(out, base, n)) rc = AI_ERR_NOMEM; continue; }
            if ((rc = find_regex(st->re, md, p, n, &ml, err))) break;
            if (!apply_behavior(SPLIT_ISOLATED, false, &ml, n, base, out)) rc = AI_ERR_NOMEM;
            continue;
        case PRETOK_METASPACE: {
            bool pre = st->scheme == PREPEND_ALWAYS || (st->scheme == PREPEND_FIRST && first && i == 0);
            size_t start = out->text.len;
            for (size_t k = 0; k < n; k++) {
                if (p[k] == ' ') buf_append(&out->text, st->repl, st->repl_len);
                else buf_putc(&out->text, p[k]);
            }
            const char *q = out->text.data ? out->text.data + start : "";
            size_t qn = out->text.len - start;
            if (pre && !(qn >= st->repl_len && !memcmp(q, st->repl, st->repl_len))) {
                /* prepend: rebuild with the replacement first */
                buf tmp;
                buf_init(&tmp);
                buf_append(&tmp, st->repl, st->repl_len);
                buf_append(&tmp, q, qn);
                out->text.len = start;
                buf_append(&out->text, tmp.data, tmp.len);
                buf_free(&tmp);
                qn += st->repl_len;
            }
            n = qn;
            p = out->text.data + base;
            if (!st->split) { if (!words_push(out, base, n)) rc = AI_ERR_NOMEM; continue; }
            find_literal(st->repl, st->repl_len, p, n, &ml);
            if (!apply_behavior(SPLIT_MERGED_NEXT, false, &ml, n, base, out)) rc = AI_ERR_NOMEM;
            continue;
        }
        default:
            break;
        }
        if (rc) break;
        buf_append(&out->text, p, n);
        p = out->text.data + base;
        enum split_behavior bh = st->behavior;
        bool inv = st->invert;
        switch (st->kind) {
        case PRETOK_SPLIT:
            if (st->re) rc = find_regex(st->re, md, p, n, &ml, err);
            else find_literal(st->literal, st->literal_len, p, n, &ml);
            break;
        case PRETOK_DIGITS:
            rc = find_regex(aux[0], md, p, n, &ml, err);
            bh = st->individual ? SPLIT_ISOLATED : SPLIT_CONTIGUOUS;
            inv = false;
            break;
        case PRETOK_PUNCT:
            rc = find_regex(aux[1], md, p, n, &ml, err);
            inv = false;
            break;
        case PRETOK_WHITESPACE:
            rc = find_regex(st->re, md, p, n, &ml, err);
            bh = SPLIT_REMOVED; inv = true;
            break;
        case PRETOK_WSPLIT:
            rc = find_regex(st->re, md, p, n, &ml, err);
            bh = SPLIT_REMOVED; inv = false;
            break;
        default:
            break;
        }
        if (!rc && !apply_behavior(bh, inv, &ml, n, base, out)) rc = AI_ERR_NOMEM;
    }
    free(ml.m);
    if (ml.oom || out->text.oom) rc = AI_ERR_NOMEM;
    if (rc == AI_ERR_NOMEM) return ai_err_set(err, AI_ERR_NOMEM, "out of memory (pre-tokenizer)");
    (void)t;
    return rc;
}

ai_status tok_pretokenize(const tokenizer *t, const char *s, size_t n, bool first, tok_words *w, ai_err *err)
{
    w->n = 0;
    buf_clear(&w->text);
    buf_append(&w->text, s, n);
    if (w->text.oom || !words_push(w, 0, n)) return ai_err_set(err, AI_ERR_NOMEM, "out of memory (pre-tokenizer)");
    if (t->n_pre == 0 || n == 0) return AI_OK;

    pcre2_match_data *md = pcre2_match_data_create(2, NULL);
    if (!md) return ai_err_set(err, AI_ERR_NOMEM, "out of memory (regex match data)");
    pcre2_code *aux[2] = {NULL, NULL};
    ai_status st = AI_OK;
    for (size_t i = 0; i < t->n_pre && !st; i++) {
        if (t->pre[i].kind == PRETOK_DIGITS && !aux[0]) st = tok_regex_compile(&aux[0], DIGIT_RE, strlen(DIGIT_RE), err);
        if (t->pre[i].kind == PRETOK_PUNCT && !aux[1]) st = tok_regex_compile(&aux[1], PUNCT_RE, strlen(PUNCT_RE), err);
    }
    tok_words tmp;
    tok_words_init(&tmp);
    for (size_t i = 0; i < t->n_pre && !st; i++) {
        tmp.n = 0;
        buf_clear(&tmp.text);
        st = run_step(t, &t->pre[i], first, w, &tmp, aux, md, err);
        tok_words x = *w; *w = tmp; tmp = x;
    }
    tok_words_free(&tmp);
    pcre2_code_free(aux[0]);
    pcre2_code_free(aux[1]);
    pcre2_match_data_free(md);
    return st;
}
