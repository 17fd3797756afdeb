/* format.c - Python's text forms of values: str(), repr(), float repr and json.dumps.
 *
 * Output must be byte-identical to CPython, so:
 *  1. floats use the shortest digit string that round-trips (repr), printed in fixed
 *     notation when the decimal exponent is in [-4, 16) and as d.ddde+XX otherwise;
 *  2. repr() of a str picks single quotes unless the text has ' and no ", and escapes
 *     non-printable code points (\n, \xNN, \uNNNN) like str.isprintable() decides;
 *  3. tojson follows json.dumps(x, ensure_ascii=False, indent=..., separators=...,
 *     sort_keys=...): keys become strings, NaN/Infinity are written bare, control
 *     characters become \uXXXX, and non-ASCII text stays raw unless ensure_ascii.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "template/tpl.h"

void fmt_float(double f, buf *out)
{
    if (isnan(f)) { buf_puts(out, "nan"); return; }
    if (isinf(f)) { buf_puts(out, f < 0 ? "-inf" : "inf"); return; }
    char tmp[64];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp = [-]d[.ddd]e[+-]XX */
    char digits[32];
    size_t nd = 0;
    const char *q = tmp;
    bool neg = false;
    if (*q == '-') { neg = true; q++; }
    for (; *q && *q != 'e'; q++) if (*q != '.') digits[nd++] = *q;
    int e = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = '\0';
    if (neg) buf_putc(out, '-');
    if (e >= -4 && e < 16) {
        int decpt = e + 1;
        if (decpt <= 0) {
            buf_puts(out, "0.");
            for (int i = 0; i < -decpt; i++) buf_putc(out, '0');
            buf_append(out, digits, nd);
        } else if ((size_t)decpt >= nd) {
            buf_append(out, digits, nd);
            for (size_t i = nd; i < (size_t)decpt; i++) buf_putc(out, '0');
            buf_puts(out, ".0");
        } else {
            buf_append(out, digits, (size_t)decpt);
            buf_putc(out, '.');
            buf_append(out, digits + decpt, nd - (size_t)decpt);
        }
    } else {
        buf_putc(out, digits[0]);
        if (nd > 1) { buf_putc(out, '.'); buf_append(out, digits + 1, nd - 1); }
        buf_printf(out, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
}

static void repr_str(const char *s, size_t n, buf *out)
{
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char qc = (has_sq && !has_dq) ? '"' : '\'';
    buf_putc(out, qc);
    size_t i = 0;
    while (i < n) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0) { buf_printf(out, "\\x%02x", (unsigned char)s[i]); i++; continue; }
        if (cp == '\\' || cp == qc) { buf_putc(out, '\\'); buf_putc(out, (char)cp); }
        else if (cp == '\n') buf_puts(out, "\\n");
        else if (cp == '\r') buf_puts(out, "\\r");
        else if (cp == '\t') buf_puts(out, "\\t");
        else {
            utf8proc_category_t cat = utf8proc_category(cp);
            bool printable = cp == ' ' || !(cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF ||
                cat == UTF8PROC_CATEGORY_CS || cat == UTF8PROC_CATEGORY_CO || cat == UTF8PROC_CATEGORY_CN ||
                cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP || cat == UTF8PROC_CATEGORY_ZS);
            if (printable) buf_append(out, s + i, (size_t)k);
            else if (cp < 0x100) buf_printf(out, "\\x%02x", (unsigned)cp);
            else if (cp < 0x10000) buf_printf(out, "\\u%04x", (unsigned)cp);
            else buf_printf(out, "\\U%08x", (unsigned)cp);
        }
        i += (size_t)k;
    }
    buf_putc(out, qc);
}

/* "k1: v1, k2: v2" with repr() of each key and value: the inside of a dict's or namespace's text */
static void repr_items(tpl_ctx *c, const value *v, buf *out)
{
    for (size_t i = 0; i < v->u.dict.n; i++) {
        if (i) buf_puts(out, ", ");
        v_repr(c, v->u.dict.k[i], out);
        buf_puts(out, ": ");
        v_repr(c, v->u.dict.v[i], out);
    }
}

void v_repr(tpl_ctx *c, const value *v, buf *out)
{
    switch (v->t) {
    case V_STR: repr_str(v->u.str.s, v->u.str.n, out); return;
    case V_LIST:
        buf_putc(out, v->tuple ? '(' : '[');
        for (size_t i = 0; i < v->u.list.n; i++) {
            if (i) buf_puts(out, ", ");
            v_repr(c, v->u.list.v[i], out);
        }
        if (v->tuple && v->u.list.n == 1) buf_putc(out, ',');
        buf_putc(out, v->tuple ? ')' : ']');
        return;
    case V_DICT:
        buf_putc(out, '{');
        repr_items(c, v, out);
        buf_putc(out, '}');
        return;
    case V_UNDEF: buf_puts(out, "Undefined"); return;
    default: v_to_str(c, v, out);
    }
}

void v_to_str(tpl_ctx *c, const value *v, buf *out)
{
    switch (v->t) {
    case V_UNDEF: return;
    case V_NONE: buf_puts(out, "None"); return;
    case V_BOOL: buf_puts(out, v->u.b ? "True" : "False"); return;
    case V_INT: buf_printf(out, "%lld", (long long)v->u.i); return;
    case V_FLOAT: fmt_float(v->u.f, out); return;
    case V_STR: buf_append(out, v->u.str.s, v->u.str.n); return;
    case V_LIST:
        if (v->gen) { buf_puts(out, "<generator object>"); return; }
        v_repr(c, v, out);
        return;
    case V_DICT: v_repr(c, v, out); return;
    case V_NS:
        buf_puts(out, "<Namespace {");
        repr_items(c, v, out);
        buf_puts(out, "}>");
        return;
    case V_MACRO: buf_puts(out, "<Macro>"); return;
    case V_LOOP: buf_puts(out, "<LoopContext>"); return;
    default: buf_puts(out, "<function>"); return;
    }
}

value *v_as_str(tpl_ctx *c, const value *v)
{
    if (v->t == V_STR) return (value *)v;
    buf b;
    buf_init(&b);
    v_to_str(c, v, &b);
    if (b.oom) { buf_free(&b); tpl_fail(c, AI_ERR_NOMEM, 0, "out of memory"); }
    value *r = v_str(c, b.data ? b.data : "", b.len);
    buf_free(&b);
    return r;
}

// --- json.dumps

static void json_str(const char *s, size_t n, bool ascii, buf *out)
{
    buf_putc(out, '"');
    size_t i = 0;
    while (i < n) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"') buf_puts(out, "\\\"");
        else if (ch == '\\') buf_puts(out, "\\\\");
        else if (ch == '\n') buf_puts(out, "\\n");
        else if (ch == '\r') buf_puts(out, "\\r");
        else if (ch == '\t') buf_puts(out, "\\t");
        else if (ch == '\b') buf_puts(out, "\\b");
        else if (ch == '\f') buf_puts(out, "\\f");
        else if (ch < 0x20) buf_printf(out, "\\u%04x", ch);
        else if (ch < 0x80 || !ascii) { buf_putc(out, (char)ch); }
        else {
            utf8proc_int32_t cp;
            utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
            if (k <= 0) { buf_printf(out, "\\u%04x", 0xfffd); i++; continue; }
            if (cp >= 0x10000) {
                unsigned v = (unsigned)cp - 0x10000;
                buf_printf(out, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
            } else buf_printf(out, "\\u%04x", (unsigned)cp);
            i += (size_t)k;
            continue;
        }
        i++;
    }
    buf_putc(out, '"');
}

static void json_newline(const json_opts *o, int level, buf *out)
{
    buf_putc(out, '\n');
    for (int i = 0; i < o->indent * level; i++) buf_putc(out, ' ');
}

static void json_key(tpl_ctx *c, int line, const value *k, const json_opts *o, buf *out)
{
    switch (k->t) {
    case V_STR: json_str(k->u.str.s, k->u.str.n, o->ensure_ascii, out); return;
    case V_INT: buf_printf(out, "\"%lld\"", (long long)k->u.i); return;
    case V_FLOAT: buf_putc(out, '"'); fmt_float(k->u.f, out); buf_putc(out, '"'); return;
    case V_BOOL: buf_puts(out, k->u.b ? "\"true\"" : "\"false\""); return;
    case V_NONE: buf_puts(out, "\"null\""); return;
    default:
        tpl_fail(c, AI_ERR_RUNTIME, line, "tojson: keys must be str, int, float, bool or None, not %s",
                 v_type_name(k));
    }
}

static void json_rec(tpl_ctx *c, int line, const value *v, const json_opts *o, int level, buf *out)
{
    if (level > TPL_MAX_DEPTH) tpl_fail(c, AI_ERR_RANGE, line, "tojson: nesting deeper than %d", TPL_MAX_DEPTH);
    switch (v->t) {
    case V_NONE: buf_puts(out, "null"); return;
    case V_BOOL: buf_puts(out, v->u.b ? "true" : "false"); return;
    case V_INT: buf_printf(out, "%lld", (long long)v->u.i); return;
    case V_FLOAT:
        if (isnan(v->u.f)) buf_puts(out, "NaN");
        else if (isinf(v->u.f)) buf_puts(out, v->u.f < 0 ? "-Infinity" : "Infinity");
        else fmt_float(v->u.f, out);
        return;
    case V_STR: json_str(v->u.str.s, v->u.str.n, o->ensure_ascii, out); return;
    case V_LIST:
        if (v->gen) break;
        if (v->u.list.n == 0) { buf_puts(out, "[]"); return; }
        buf_putc(out, '[');
        for (size_t i = 0; i < v->u.list.n; i++) {
            if (i) buf_puts(out, o->item_sep);
            if (o->indent >= 0) json_newline(o, level + 1, out);
            json_rec(c, line, v->u.list.v[i], o, level + 1, out);
        }
        if (o->indent >= 0) json_newline(o, level, out);
        buf_putc(out, ']');
        return;
    case V_DICT: {
        size_t n = v->u.dict.n;
        if (n == 0) { buf_puts(out, "{}"); return; }
        size_t *ord = arena_alloc(c, n * sizeof *ord);
        for (size_t i = 0; i < n; i++) ord[i] = i;
        if (o->sort_keys) /* insertion sort: stable, dicts are small */
            for (size_t i = 1; i < n; i++)
                for (size_t j = i; j > 0 && v_compare(c, line, v->u.dict.k[ord[j - 1]], v->u.dict.k[ord[j]]) > 0; j--) {
                    size_t t = ord[j]; ord[j] = ord[j - 1]; ord[j - 1] = t;
                }
        buf_putc(out, '{');
        for (size_t i = 0; i < n; i++) {
            if (i) buf_puts(out, o->item_sep);
            if (o->indent >= 0) json_newline(o, level + 1, out);
            json_key(c, line, v->u.dict.k[ord[i]], o, out);
            buf_puts(out, o->key_sep);
            json_rec(c, line, v->u.dict.v[ord[i]], o, level + 1, out);
        }
        if (o->indent >= 0) json_newline(o, level, out);
        buf_putc(out, '}');
        return;
    }
    default: break;
    }
    {
        tpl_fail(c, AI_ERR_RUNTIME, line, "tojson: Object of type %s is not JSON serializable", v_type_name(v));
    }
}

void v_to_json(tpl_ctx *c, int line, const value *v, const json_opts *o, buf *out)
{
    json_rec(c, line, v, o, 0, out);
}
