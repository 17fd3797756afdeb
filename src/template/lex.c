/* lex.c - splits a template into data and tag tokens, the way Jinja2's lexer does with
 * transformers' settings (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False).
 *
 * Whitespace rules, in order of precedence (they decide the exact output bytes):
 *  1. "{%-", "{{-", "{#-" strip all whitespace (newlines too) before the tag;
 *     "-%}", "-}}", "-#}" strip all whitespace after it.
 *  2. lstrip_blocks: spaces/tabs between the start of a line and "{%" or "{#" are dropped,
 *     unless the tag opens with "{%+". A line start is a '\n' inside the preceding text, or
 *     the start of the template, or a preceding tag whose consumed text ended in '\n'.
 *  3. trim_blocks: one '\n' right after "%}" or "#}" is dropped, unless the tag ends "+%}".
 *  4. "\r\n" and "\r" become "\n" first; one trailing newline of the template is dropped.
 * Inside tags, "}}" only ends a {{ }} tag when braces are balanced (dict literals).
 */
#include <stdlib.h>
#include <string.h>

#include "template/tpl.h"

static void push(tpl_ctx *c, token_list *l, token t)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        token *nv = arena_alloc(c, cap * sizeof *nv);
        if (l->n) memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = t;
}

static bool is_ws(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v'; }
static bool is_name0(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_'; }
static bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }

static void put_utf8(char *o, size_t *k, unsigned cp)
{
    if (cp < 0x80) o[(*k)++] = (char)cp;
    else if (cp < 0x800) { o[(*k)++] = (char)(0xC0 | (cp >> 6)); o[(*k)++] = (char)(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) {
        o[(*k)++] = (char)(0xE0 | (cp >> 12)); o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        o[(*k)++] = (char)(0xF0 | (cp >> 18)); o[(*k)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    }
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* Python "unicode-escape" decoding of a string literal body [s, s+n). */
static char *unescape(tpl_ctx *c, int line, const char *s, size_t n, size_t *outn)
{
    char *o = arena_alloc(c, n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 >= n) { o[k++] = s[i]; continue; }
        char e = s[++i];
        int digits = 0;
        switch (e) {
        case 'n': o[k++] = '\n'; break;
        case 't': o[k++] = '\t'; break;
        case 'r': o[k++] = '\r'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'v': o[k++] = '\v'; break;
        case 'a': o[k++] = '\a'; break;
        case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': {
            unsigned v = 0;
            int m = 0;
            while (m < 3 && i < n && s[i] >= '0' && s[i] <= '7') { v = v * 8 + (unsigned)(s[i] - '0'); i++; m++; }
            i--;
            put_utf8(o, &k, v);
            break;
        }
        case '\n': break;
        case '\\': case '\'': case '"': o[k++] = e; break;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default: o[k++] = '\\'; o[k++] = e; break;
        }
        if (digits) {
            unsigned v = 0;
            for (int d = 0; d < digits; d++) {
                int h = i + 1 + (size_t)d < n ? hexval(s[i + 1 + (size_t)d]) : -1;
                if (h < 0) tpl_fail(c, AI_ERR_FORMAT, line, "bad \\%c escape in string literal", e);
                v = v * 16 + (unsigned)h;
            }
            if (v > 0x10FFFF || (v >= 0xD800 && v < 0xE000))
                tpl_fail(c, AI_ERR_FORMAT, line, "escape \\%c%X is not a valid code point", e, v);
            i += (size_t)digits;
            put_utf8(o, &k, v);
        }
    }
    o[k] = '\0';
    *outn = k;
    return o;
}

static const char *const OPS2[] = { "==", "!=", "<=", ">=", "//", "**", NULL };
static const char OPS1[] = "+-*/%~<>=()[]{}.,:|";

typedef struct lexer {
    tpl_ctx *c;
    const char *s;
    size_t n, pos;
    int line;
    token_list *out;
} lexer;

static int count_nl(const char *s, size_t a, size_t b)
{
    int k = 0;
    for (size_t i = a; i < b; i++) k += s[i] == '\n';
    return k;
}

/* Lexes the inside of a {{ }} or {% %} tag; returns the position after the end marker
 * and sets *strip_after / *keep_nl from "-" / "+". */
static size_t lex_tag(lexer *L, bool is_var, bool *strip_after, bool *plus_after)
{
    tpl_ctx *c = L->c;
    const char *s = L->s;
    size_t i = L->pos;
    int depth = 0, line0 = L->line;
    for (;;) {
        while (i < L->n && is_ws(s[i])) { if (s[i] == '\n') L->line++; i++; }
        if (i >= L->n) tpl_fail(c, AI_ERR_FORMAT, line0, "unexpected end of template, unclosed '%s'", is_var ? "{{" : "{%");
        /* end markers */
        const char *endm = is_var ? "}}" : "%}";
        if (depth == 0 || !is_var) {
            if ((s[i] == '-' || s[i] == '+') && i + 2 < L->n && strncmp(s + i + 1, endm, 2) == 0) {
                *strip_after = s[i] == '-';
                *plus_after = s[i] == '+';
                push(c, L->out, (token){ is_var ? T_VAR_END : T_BLOCK_END, L->line, NULL, 0, 0, 0 });
                return i + 3;
            }
            if (i + 1 < L->n && strncmp(s + i, endm, 2) == 0 && (depth == 0)) {
                push(c, L->out, (token){ is_var ? T_VAR_END : T_BLOCK_END, L->line, NULL, 0, 0, 0 });
                return i + 2;
            }
        }
        char ch = s[i];
        token t = { T_OP, L->line, s + i, 1, 0, 0 };
        if (is_name0(ch)) {
            size_t j = i + 1;
            while (j < L->n && (is_name0(s[j]) || is_digit(s[j]))) j++;
            t.type = T_NAME;
            t.n = j - i;
            i = j;
        } else if (ch == '\'' || ch == '"') {
            size_t j = i + 1;
            while (j < L->n && s[j] != ch) { if (s[j] == '\\') j++; j++; }
            if (j >= L->n) tpl_fail(c, AI_ERR_FORMAT, L->line, "unterminated string literal");
            t.type = T_STRING;
            t.s = unescape(c, L->line, s + i + 1, j - i - 1, &t.n);
            L->line += count_nl(s, i, j);
            i = j + 1;
        } else if (is_digit(ch)) {
            size_t j = i;
            char num[128];
            size_t k = 0;
            bool isf = false;
            while (j < L->n && (is_digit(s[j]) || s[j] == '_')) { if (s[j] != '_' && k < 100) num[k++] = s[j]; j++; }
            if (j + 1 < L->n && s[j] == '.' && is_digit(s[j + 1])) {
                isf = true;
                if (k < 100) num[k++] = s[j];
                j++;
                while (j < L->n && (is_digit(s[j]) || s[j] == '_')) { if (s[j] != '_' && k < 100) num[k++] = s[j]; j++; }
            }
            if (j < L->n && (s[j] == 'e' || s[j] == 'E')) {
                size_t e = j + 1;
                if (e < L->n && (s[e] == '+' || s[e] == '-')) e++;
                if (e < L->n && is_digit(s[e])) {
                    isf = true;
                    while (j < e && k < 100) num[k++] = s[j++];
                    while (j < L->n && is_digit(s[j])) { if (k < 100) num[k++] = s[j]; j++; }
                }
            }
            num[k] = '\0';
            if (isf) { t.type = T_FLOAT; t.f = strtod(num, NULL); }
            else {
                t.type = T_INT;
                unsigned long long v = strtoull(num, NULL, 10);
                if (k > 18 && (k > 19 || v > (unsigned long long)INT64_MAX))
                    tpl_fail(c, AI_ERR_UNSUPPORTED, L->line, "integer literal %s is too large", num);
                t.i = (int64_t)v;
            }
            i = j;
        } else {
            bool found = false;
            for (int k = 0; OPS2[k]; k++)
                if (i + 1 < L->n && s[i] == OPS2[k][0] && s[i + 1] == OPS2[k][1]) { t.n = 2; found = true; break; }
            if (!found && !strchr(OPS1, ch))
                tpl_fail(c, AI_ERR_FORMAT, L->line, "unexpected character '%c' in tag", ch);
            if (ch == '{' || ch == '[' || ch == '(') depth++;
            if ((ch == '}' || ch == ']' || ch == ')') && depth > 0) depth--;
            i += t.n;
        }
        push(c, L->out, t);
    }
}

void tpl_lex(tpl_ctx *c, const char *src, size_t len, token_list *out)
{
    /* normalize newlines, drop one trailing newline */
    char *s = arena_alloc(c, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') { s[n++] = '\n'; if (i + 1 < len && src[i + 1] == '\n') i++; }
        else s[n++] = src[i];
    }
    if (n && s[n - 1] == '\n') n--;
    s[n] = '\0';

    lexer L = { c, s, n, 0, 1, out };
    bool strip_next = false, trim_nl = false, line_start = true;
    while (L.pos < n) {
        size_t start = L.pos;
        if (strip_next) while (start < n && is_ws(s[start])) { if (s[start] == '\n') L.line++; start++; }
        else if (trim_nl && start < n && s[start] == '\n') { start++; L.line++; }
        if (strip_next || trim_nl) line_start = start > 0 && s[start - 1] == '\n';
        strip_next = trim_nl = false;
        /* find next tag opener */
        size_t t = start;
        while (t + 1 < n && !(s[t] == '{' && (s[t + 1] == '{' || s[t + 1] == '%' || s[t + 1] == '#'))) t++;
        if (t + 1 >= n) t = n;
        size_t dend = t;
        int data_line = L.line;
        char kind = t < n ? s[t + 1] : 0;
        char mod = (t + 2 < n && (s[t + 2] == '-' || s[t + 2] == '+')) ? s[t + 2] : 0;
        if (t < n) {
            if (mod == '-') {
                while (dend > start && is_ws(s[dend - 1])) dend--;
            } else if (mod != '+' && kind != '{') {
                size_t lp = dend;
                while (lp > start && (s[lp - 1] == ' ' || s[lp - 1] == '\t' || s[lp - 1] == '\f' || s[lp - 1] == '\v')) lp--;
                bool at_nl = lp > start && s[lp - 1] == '\n';
                if (at_nl || (lp == start && line_start)) dend = lp;
            }
        }
        if (dend > start) push(c, out, (token){ T_DATA, data_line, s + start, dend - start, 0, 0 });
        L.line += count_nl(s, start, t);
        if (t >= n) break;
        size_t body = t + 2 + (mod ? 1 : 0);
        if (kind == '#') {
            size_t e = body;
            while (e + 1 < n && !(s[e] == '#' && s[e + 1] == '}')) e++;
            if (e + 1 >= n) tpl_fail(c, AI_ERR_FORMAT, L.line, "unclosed comment '{#'");
            L.line += count_nl(s, t, e);
            bool dash = e > body && s[e - 1] == '-', plus = e > body && s[e - 1] == '+';
            L.pos = e + 2;
            strip_next = dash;
            trim_nl = !dash && !plus;
            line_start = false;
            continue;
        }
        bool is_var = kind == '{';
        push(c, out, (token){ is_var ? T_VAR_BEGIN : T_BLOCK_BEGIN, L.line, NULL, 0, 0, 0 });
        L.pos = body;
        bool sa = false, pa = false;
        L.pos = lex_tag(&L, is_var, &sa, &pa);
        strip_next = sa;
        trim_nl = !is_var && !sa && !pa;
        line_start = false;
        /* {% raw %} ... {% endraw %}: the body is data */
        token *tk = out->v + out->n;
        if (!is_var && out->n >= 3 && tk[-1].type == T_BLOCK_END && tk[-2].type == T_NAME &&
            name_is(tk[-2].s, tk[-2].n, "raw") && tk[-3].type == T_BLOCK_BEGIN) {
            out->n -= 3;
            size_t b0 = L.pos;
            if (strip_next) while (b0 < n && is_ws(s[b0])) b0++;
            else if (trim_nl && b0 < n && s[b0] == '\n') b0++;
            const char *e = NULL;
            for (size_t p = b0; p + 1 < n; p++) {
                if (s[p] == '{' && s[p + 1] == '%') {
                    size_t q = p + 2;
                    if (q < n && (s[q] == '-' || s[q] == '+')) q++;
                    while (q < n && is_ws(s[q])) q++;
                    if (n - q >= 6 && strncmp(s + q, "endraw", 6) == 0) { e = s + p; break; }
                }
            }
            if (!e) tpl_fail(c, AI_ERR_FORMAT, L.line, "missing {%% endraw %%}");
            size_t de = (size_t)(e - s);
            if (e[2] == '-') while (de > b0 && is_ws(s[de - 1])) de--;
            if (de > b0) push(c, out, (token){ T_DATA, L.line, s + b0, de - b0, 0, 0 });
            L.line += count_nl(s, L.pos, (size_t)(e - s));
            L.pos = (size_t)(e - s);
            strip_next = trim_nl = false;
        }
    }
    push(c, out, (token){ T_EOF, L.line, NULL, 0, 0, 0 });
}
