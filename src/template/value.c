/* value.c - the render arena and the value model (Python objects as Jinja2 sees them).
 *
 * All values are arena-allocated (tpl.h invariant 2): no reference counts, no frees.
 * Dicts keep insertion order (Python 3.7+ semantics) with a linear key search; chat
 * dicts are small, and a linear scan keeps the code short.
 * Equality and ordering follow Python: 1 == 1.0 == True, "a" != 1, "a" < 1 raises TypeError.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/tpl.h"

// --- failure and arena

void tpl_fail(tpl_ctx *c, ai_status code, int line, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (line > 0) ai_err_set(c->err, code, "template line %d: %s", line, msg);
    else ai_err_set(c->err, code, "template: %s", msg);
    longjmp(c->jb, 1);
}

struct arena_chunk {
    arena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *arena_alloc(tpl_ctx *c, size_t n)
{
    arena *a = c->ar;
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    if (!a->head || a->head->cap - a->head->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        if (a->used_total + cap > a->limit)
            tpl_fail(c, AI_ERR_RANGE, 0, "memory limit of %zu bytes exceeded", a->limit);
        arena_chunk *ch = malloc(sizeof *ch + cap);
        if (!ch) tpl_fail(c, AI_ERR_NOMEM, 0, "out of memory");
        ch->next = a->head;
        ch->used = 0;
        ch->cap = cap;
        a->head = ch;
        a->used_total += cap;
    }
    void *p = a->head->data + a->head->used;
    a->head->used += n;
    memset(p, 0, n);
    return p;
}

char *arena_strdup(tpl_ctx *c, const char *s, size_t n)
{
    char *p = arena_alloc(c, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void arena_free(arena *a)
{
    arena_chunk *ch = a->head;
    while (ch) {
        arena_chunk *nx = ch->next;
        free(ch);
        ch = nx;
    }
    a->head = NULL;
    a->used_total = 0;
}

// --- constructors

value *v_new(tpl_ctx *c, vtype t)
{
    value *v = arena_alloc(c, sizeof *v);
    v->t = t;
    return v;
}

value *v_undef(tpl_ctx *c, const char *name, size_t n)
{
    value *v = v_new(c, V_UNDEF);
    v->u.str.s = name ? name : "";
    v->u.str.n = name ? n : 0;
    return v;
}

value *v_none(tpl_ctx *c) { return v_new(c, V_NONE); }
value *v_bool(tpl_ctx *c, bool b) { value *v = v_new(c, V_BOOL); v->u.b = b; return v; }
value *v_int(tpl_ctx *c, int64_t i) { value *v = v_new(c, V_INT); v->u.i = i; return v; }
value *v_float(tpl_ctx *c, double f) { value *v = v_new(c, V_FLOAT); v->u.f = f; return v; }

value *v_str(tpl_ctx *c, const char *s, size_t n)
{
    value *v = v_new(c, V_STR);
    v->u.str.s = arena_strdup(c, s, n);
    v->u.str.n = n;
    return v;
}

value *v_str_ref(tpl_ctx *c, const char *s, size_t n)
{
    value *v = v_new(c, V_STR);
    v->u.str.s = s;
    v->u.str.n = n;
    return v;
}

value *v_list(tpl_ctx *c, size_t cap)
{
    value *v = v_new(c, V_LIST);
    if (cap) v->u.list.v = arena_alloc(c, cap * sizeof(value *));
    v->u.list.cap = cap;
    return v;
}

value *v_dict(tpl_ctx *c) { return v_new(c, V_DICT); }

void v_list_push(tpl_ctx *c, value *l, value *x)
{
    if (l->u.list.n == l->u.list.cap) {
        size_t cap = l->u.list.cap ? l->u.list.cap * 2 : 8;
        value **nv = arena_alloc(c, cap * sizeof *nv);
        if (l->u.list.n) memcpy(nv, l->u.list.v, l->u.list.n * sizeof *nv);
        l->u.list.v = nv;
        l->u.list.cap = cap;
    }
    l->u.list.v[l->u.list.n++] = x;
}

value *v_dict_getv(const value *d, const value *k)
{
    for (size_t i = 0; i < d->u.dict.n; i++)
        if (v_equal(d->u.dict.k[i], k)) return d->u.dict.v[i];
    return NULL;
}

value *v_dict_get(const value *d, const char *k, size_t n)
{
    for (size_t i = 0; i < d->u.dict.n; i++) {
        const value *kk = d->u.dict.k[i];
        if (kk->t == V_STR && kk->u.str.n == n && memcmp(kk->u.str.s, k, n) == 0)
            return d->u.dict.v[i];
    }
    return NULL;
}

void v_dict_set(tpl_ctx *c, value *d, value *k, value *x)
{
    for (size_t i = 0; i < d->u.dict.n; i++)
        if (v_equal(d->u.dict.k[i], k)) { d->u.dict.v[i] = x; return; }
    if (d->u.dict.n == d->u.dict.cap) {
        size_t cap = d->u.dict.cap ? d->u.dict.cap * 2 : 8;
        value **nk = arena_alloc(c, cap * sizeof *nk), **nv = arena_alloc(c, cap * sizeof *nv);
        if (d->u.dict.n) {
            memcpy(nk, d->u.dict.k, d->u.dict.n * sizeof *nk);
            memcpy(nv, d->u.dict.v, d->u.dict.n * sizeof *nv);
        }
        d->u.dict.k = nk;
        d->u.dict.v = nv;
        d->u.dict.cap = cap;
    }
    d->u.dict.k[d->u.dict.n] = k;
    d->u.dict.v[d->u.dict.n++] = x;
}

// --- Python semantics

const char *v_type_name(const value *v)
{
    switch (v->t) {
    case V_UNDEF: return "Undefined";
    case V_NONE: return "NoneType";
    case V_BOOL: return "bool";
    case V_INT: return "int";
    case V_FLOAT: return "float";
    case V_STR: return "str";
    case V_LIST: return v->gen ? "generator" : v->tuple ? "tuple" : "list";
    case V_DICT: return "dict";
    case V_NS: return "Namespace";
    case V_FUNC: case V_METHOD: return "function";
    case V_MACRO: return "Macro";
    case V_LOOP: return "LoopContext";
    }
    return "object";
}

bool v_truthy(const value *v)
{
    switch (v->t) {
    case V_UNDEF: case V_NONE: return false;
    case V_BOOL: return v->u.b;
    case V_INT: return v->u.i != 0;
    case V_FLOAT: return v->u.f != 0.0;
    case V_STR: return v->u.str.n != 0;
    case V_LIST: return v->gen || v->u.list.n != 0;
    case V_DICT: return v->u.dict.n != 0;
    default: return true;
    }
}

static bool is_num(const value *v) { return v->t == V_INT || v->t == V_FLOAT || v->t == V_BOOL; }
static double num_f(const value *v)
{
    return v->t == V_FLOAT ? v->u.f : v->t == V_INT ? (double)v->u.i : (double)v->u.b;
}

bool v_equal(const value *a, const value *b)
{
    if (is_num(a) && is_num(b)) {
        if (a->t != V_FLOAT && b->t != V_FLOAT) {
            int64_t x = a->t == V_INT ? a->u.i : a->u.b, y = b->t == V_INT ? b->u.i : b->u.b;
            return x == y;
        }
        return num_f(a) == num_f(b);
    }
    if (a->t != b->t) return false;
    switch (a->t) {
    case V_UNDEF: case V_NONE: return true;
    case V_STR: return a->u.str.n == b->u.str.n && memcmp(a->u.str.s, b->u.str.s, a->u.str.n) == 0;
    case V_LIST:
        if (a->tuple != b->tuple || a->u.list.n != b->u.list.n) return false;
        for (size_t i = 0; i < a->u.list.n; i++)
            if (!v_equal(a->u.list.v[i], b->u.list.v[i])) return false;
        return true;
    case V_DICT:
        if (a->u.dict.n != b->u.dict.n) return false;
        for (size_t i = 0; i < a->u.dict.n; i++) {
            value *o = v_dict_getv(b, a->u.dict.k[i]);
            if (!o || !v_equal(a->u.dict.v[i], o)) return false;
        }
        return true;
    case V_FUNC: return a->u.fn == b->u.fn;
    default: return a == b;
    }
}

int v_compare(tpl_ctx *c, int line, const value *a, const value *b)
{
    if (is_num(a) && is_num(b)) {
        if (a->t != V_FLOAT && b->t != V_FLOAT) {
            int64_t x = a->t == V_INT ? a->u.i : a->u.b, y = b->t == V_INT ? b->u.i : b->u.b;
            return (x > y) - (x < y);
        }
        double x = num_f(a), y = num_f(b);
        return (x > y) - (x < y);
    }
    if (a->t == V_STR && b->t == V_STR) {
        size_t n = a->u.str.n < b->u.str.n ? a->u.str.n : b->u.str.n;
        int r = memcmp(a->u.str.s, b->u.str.s, n);   /* UTF-8 byte order == code point order */
        if (r) return r < 0 ? -1 : 1;
        return (a->u.str.n > b->u.str.n) - (a->u.str.n < b->u.str.n);
    }
    if (a->t == V_LIST && b->t == V_LIST && a->tuple == b->tuple) {
        for (size_t i = 0; i < a->u.list.n && i < b->u.list.n; i++) {
            if (v_equal(a->u.list.v[i], b->u.list.v[i])) continue;
            return v_compare(c, line, a->u.list.v[i], b->u.list.v[i]);
        }
        return (a->u.list.n > b->u.list.n) - (a->u.list.n < b->u.list.n);
    }
    tpl_fail(c, AI_ERR_RUNTIME, line, "'<' not supported between instances of '%s' and '%s'",
             v_type_name(a), v_type_name(b));
}

size_t utf8_cp_count(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) if (((unsigned char)s[i] & 0xC0) != 0x80) k++;
    return k;
}

size_t utf8_cp_offset(const char *s, size_t n, size_t cp)
{
    size_t k = 0, i = 0;
    for (; i < n; i++) {
        if (((unsigned char)s[i] & 0xC0) != 0x80) {
            if (k == cp) return i;
            k++;
        }
    }
    return n;
}
