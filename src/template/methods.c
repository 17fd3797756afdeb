/* methods.c - Python str / dict / list methods callable from templates (x.strip(), d.items()).
 *
 * Only methods that do not modify their object are callable: transformers renders in an
 * ImmutableSandboxedEnvironment, where list.append, dict.update, dict.pop and friends raise
 * a SecurityError, so here they fail with the same kind of message.
 * str.format supports "{}", "{0}" and "{name}" fields without format specs.
 */
#include <string.h>

#include "template/text.h"
#include "template/tpl.h"

static const char *const STR_METHODS[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "upper", "lower", "title",
    "capitalize", "replace", "find", "rfind", "index", "rindex", "count", "format", "join", "isdigit",
    "isalpha", "isalnum", "isspace", "islower", "isupper", "splitlines", "removeprefix", "removesuffix", NULL
};
static const char *const DICT_METHODS[] = { "items", "keys", "values", "get", "copy",
    "pop", "popitem", "update", "setdefault", "clear", NULL };
static const char *const LIST_METHODS[] = { "index", "count", "copy",
    "append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear", NULL };
static const char *const UNSAFE[] = { "pop", "popitem", "update", "setdefault", "clear", "append", "extend",
    "insert", "remove", "reverse", "sort", NULL };

static bool in_list(const char *const *l, const char *s, size_t n)
{
    for (int i = 0; l[i]; i++) if (name_is(s, n, l[i])) return true;
    return false;
}

bool method_exists(const value *self, const char *name, size_t n)
{
    switch (self->t) {
    case V_STR: return in_list(STR_METHODS, name, n);
    case V_DICT: return in_list(DICT_METHODS, name, n);
    case V_LIST: return in_list(LIST_METHODS, name, n) && !(self->tuple && in_list(UNSAFE, name, n));
    default: return false;
    }
}

/* one method call: the method's name (for messages) and its arguments */
typedef struct margs {
    render_ctx *r;
    int line;
    const char *name;
    size_t n;
    const call_args *args;
} margs;

static value *marg(margs *a, size_t i, const char *kw) { return call_arg(a->args, i, kw); }

_Noreturn static void merr(margs *a, const char *what)
{
    tpl_fail(&a->r->tc, AI_ERR_RUNTIME, a->line, "%.*s(): %s", (int)a->n, a->name, what);
}

static value *need_str(margs *a, value *v)
{
    if (!v || v->t != V_STR) merr(a, "expected a str argument");
    return v;
}

static int64_t opt_int(margs *a, value *v, int64_t dflt)
{
    if (!v || v->t == V_NONE) return dflt;
    if (v->t == V_INT) return v->u.i;
    merr(a, "expected an int argument");
}

static value *split(margs *a, value *s, bool right)
{
    tpl_ctx *c = &a->r->tc;
    value *sep = marg(a, 0, "sep");
    int64_t maxsplit = opt_int(a, marg(a, 1, "maxsplit"), -1);
    value *out = v_list(c, 0);
    const char *p = s->u.str.s;
    size_t n = s->u.str.n;
    if (!sep || sep->t == V_NONE) {
        /* runs of whitespace; no empty strings */
        value *parts = v_list(c, 0);
        size_t i = 0;
        int64_t done = 0;
        if (!right) {
            while (i < n) {
                size_t k;
                while (i < n && cp_is_space(cp_decode(p + i, n - i, &k))) i += k;
                if (i >= n) break;
                if (maxsplit >= 0 && done == maxsplit) {
                    size_t x, y;
                    str_strip(p + i, n - i, NULL, 0, false, true, &x, &y);
                    v_list_push(c, out, v_str_ref(c, p + i, y));
                    break;
                }
                size_t j = i;
                while (j < n && !cp_is_space(cp_decode(p + j, n - j, &k))) j += k;
                v_list_push(c, out, v_str_ref(c, p + i, j - i));
                done++;
                i = j;
            }
            return out;
        }
        size_t j = n;
        while (j > 0) {
            size_t x, y;
            str_strip(p, j, NULL, 0, false, true, &x, &y);
            j = y;
            if (j == 0) break;
            if (maxsplit >= 0 && done == maxsplit) { v_list_push(c, parts, v_str_ref(c, p, j)); break; }
            size_t b = j;
            while (b > 0) {
                size_t q = b - 1;
                while (q > 0 && ((unsigned char)p[q] & 0xC0) == 0x80) q--;
                size_t k;
                if (cp_is_space(cp_decode(p + q, b - q, &k))) break;
                b = q;
            }
            v_list_push(c, parts, v_str_ref(c, p + b, j - b));
            done++;
            j = b;
        }
        for (size_t k = parts->u.list.n; k-- > 0;) v_list_push(c, out, parts->u.list.v[k]);
        return out;
    }
    need_str(a, sep);
    if (sep->u.str.n == 0) merr(a, "empty separator");
    size_t sn = sep->u.str.n;
    if (!right) {
        size_t i = 0;
        int64_t done = 0;
        for (;;) {
            const char *h = (maxsplit < 0 || done < maxsplit) ? mem_find(p, n, sep->u.str.s, sn, i) : NULL;
            if (!h) { v_list_push(c, out, v_str_ref(c, p + i, n - i)); break; }
            v_list_push(c, out, v_str_ref(c, p + i, (size_t)(h - p) - i));
            i = (size_t)(h - p) + sn;
            done++;
        }
        return out;
    }
    value *parts = v_list(c, 0);
    size_t j = n;
    int64_t done = 0;
    for (;;) {
        const char *h = (maxsplit < 0 || done < maxsplit) ? mem_rfind(p, j, sep->u.str.s, sn) : NULL;
        if (!h) { v_list_push(c, parts, v_str_ref(c, p, j)); break; }
        size_t hp = (size_t)(h - p);
        v_list_push(c, parts, v_str_ref(c, p + hp + sn, j - hp - sn));
        j = hp;
        done++;
    }
    for (size_t k = parts->u.list.n; k-- > 0;) v_list_push(c, out, parts->u.list.v[k]);
    return out;
}

static bool affix(margs *a, value *s, value *x, bool end)
{
    if (x && x->t == V_LIST && x->tuple) {
        for (size_t i = 0; i < x->u.list.n; i++) if (affix(a, s, x->u.list.v[i], end)) return true;
        return false;
    }
    need_str(a, x);
    if (x->u.str.n > s->u.str.n) return false;
    const char *p = end ? s->u.str.s + s->u.str.n - x->u.str.n : s->u.str.s;
    return memcmp(p, x->u.str.s, x->u.str.n) == 0;
}

static value *str_format(margs *a, value *s)
{
    render_ctx *r = a->r;
    size_t mark = scratch_begin(r);
    size_t auto_i = 0;
    const char *p = s->u.str.s;
    size_t n = s->u.str.n;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '{' && i + 1 < n && p[i + 1] == '{') { buf_putc(r->out, '{'); i++; continue; }
        if (p[i] == '}' && i + 1 < n && p[i + 1] == '}') { buf_putc(r->out, '}'); i++; continue; }
        if (p[i] == '}') merr(a, "single '}' encountered in format string");
        if (p[i] != '{') { buf_putc(r->out, p[i]); continue; }
        size_t j = i + 1;
        while (j < n && p[j] != '}') j++;
        if (j >= n) merr(a, "single '{' encountered in format string");
        const char *f = p + i + 1;
        size_t fl = j - i - 1;
        if (memchr(f, ':', fl) || memchr(f, '!', fl) || memchr(f, '.', fl) || memchr(f, '[', fl))
            tpl_fail(&r->tc, AI_ERR_UNSUPPORTED, a->line, "unsupported construct: str.format field '{%.*s}'", (int)fl, f);
        value *v = NULL;
        if (fl == 0) v = marg(a, auto_i++, NULL);
        else if (f[0] >= '0' && f[0] <= '9') {
            size_t k = 0;
            for (size_t q = 0; q < fl; q++) k = k * 10 + (size_t)(f[q] - '0');
            v = marg(a, k, NULL);
        } else {
            for (size_t k = 0; k < a->args->nkw; k++)
                if (a->args->kwl[k] == fl && memcmp(a->args->kwn[k], f, fl) == 0) v = a->args->kwv[k];
        }
        if (!v) merr(a, "format field has no matching argument");
        v_to_str(&r->tc, v, r->out);
        i = j;
    }
    return scratch_end(r, mark);
}

static value *str_method(margs *a, value *s)
{
    render_ctx *r = a->r;
    tpl_ctx *c = &r->tc;
    const char *p = s->u.str.s;
    size_t n = s->u.str.n;
#define IS(x) name_is(a->name, a->n, x)
    if (IS("strip") || IS("lstrip") || IS("rstrip")) {
        value *ch = marg(a, 0, "chars");
        size_t x, y;
        bool l = !IS("rstrip"), rr = !IS("lstrip");
        if (ch && ch->t != V_NONE) { need_str(a, ch); str_strip(p, n, ch->u.str.s, ch->u.str.n, l, rr, &x, &y); }
        else str_strip(p, n, NULL, 0, l, rr, &x, &y);
        return v_str_ref(c, p + x, y - x);
    }
    if (IS("split")) return split(a, s, false);
    if (IS("rsplit")) return split(a, s, true);
    if (IS("startswith") || IS("endswith")) return v_bool(c, affix(a, s, marg(a, 0, NULL), IS("endswith")));
    if (IS("upper") || IS("lower") || IS("title") || IS("capitalize")) {
        size_t mark = scratch_begin(r);
        str_case(r->out, p, n, IS("upper") ? CASE_UPPER : IS("lower") ? CASE_LOWER : IS("title") ? CASE_TITLE : CASE_CAPITALIZE);
        return scratch_end(r, mark);
    }
    if (IS("replace")) {
        value *o = need_str(a, marg(a, 0, NULL)), *nw = need_str(a, marg(a, 1, NULL));
        int64_t cnt = opt_int(a, marg(a, 2, "count"), -1);
        size_t mark = scratch_begin(r), i = 0;
        int64_t done = 0;
        if (o->u.str.n == 0) {  /* insert between every code point */
            for (;;) {
                if (cnt >= 0 && done >= cnt) { buf_append(r->out, p + i, n - i); break; }
                buf_append(r->out, nw->u.str.s, nw->u.str.n);
                done++;
                if (i >= n) break;
                size_t k;
                cp_decode(p + i, n - i, &k);
                buf_append(r->out, p + i, k);
                i += k;
            }
            return scratch_end(r, mark);
        }
        for (;;) {
            const char *h = (cnt < 0 || done < cnt) ? mem_find(p, n, o->u.str.s, o->u.str.n, i) : NULL;
            if (!h) { buf_append(r->out, p + i, n - i); break; }
            buf_append(r->out, p + i, (size_t)(h - p) - i);
            buf_append(r->out, nw->u.str.s, nw->u.str.n);
            i = (size_t)(h - p) + o->u.str.n;
            done++;
            out_check(r, a->line);
        }
        return scratch_end(r, mark);
    }
    if (IS("find") || IS("rfind") || IS("index") || IS("rindex")) {
        value *x = need_str(a, marg(a, 0, NULL));
        if (a->args->npos > 1) tpl_fail(c, AI_ERR_UNSUPPORTED, a->line, "unsupported construct: %.*s() with start/end", (int)a->n, a->name);
        const char *h = (IS("find") || IS("index")) ? mem_find(p, n, x->u.str.s, x->u.str.n, 0) : mem_rfind(p, n, x->u.str.s, x->u.str.n);
        if (!h && (IS("index") || IS("rindex"))) merr(a, "substring not found");
        return v_int(c, h ? (int64_t)utf8_cp_count(p, (size_t)(h - p)) : -1);
    }
    if (IS("count")) {
        value *x = need_str(a, marg(a, 0, NULL));
        if (x->u.str.n == 0) return v_int(c, (int64_t)utf8_cp_count(p, n) + 1);
        int64_t k = 0;
        for (const char *h = mem_find(p, n, x->u.str.s, x->u.str.n, 0); h;
             h = mem_find(p, n, x->u.str.s, x->u.str.n, (size_t)(h - p) + x->u.str.n)) k++;
        return v_int(c, k);
    }
    if (IS("format")) return str_format(a, s);
    if (IS("join")) {
        value *it = v_iterate(r, a->line, marg(a, 0, NULL) ? marg(a, 0, NULL) : v_list(c, 0));
        size_t mark = scratch_begin(r);
        for (size_t i = 0; i < it->u.list.n; i++) {
            if (it->u.list.v[i]->t != V_STR) merr(a, "sequence item is not a str");
            if (i) buf_append(r->out, p, n);
            buf_append(r->out, it->u.list.v[i]->u.str.s, it->u.list.v[i]->u.str.n);
        }
        return scratch_end(r, mark);
    }
    if (IS("isdigit") || IS("isalpha") || IS("isalnum") || IS("isspace")) {
        if (n == 0) return v_bool(c, false);
        for (size_t i = 0; i < n;) {
            size_t k;
            int32_t cp = cp_decode(p + i, n - i, &k);
            bool ok = IS("isdigit") ? cp_is_digit(cp) : IS("isalpha") ? cp_is_alpha(cp) :
                      IS("isalnum") ? (cp_is_alpha(cp) || cp_is_digit(cp)) : cp_is_space(cp);
            if (!ok) return v_bool(c, false);
            i += k;
        }
        return v_bool(c, true);
    }
    if (IS("islower") || IS("isupper")) {
        bool cased = false;
        for (size_t i = 0; i < n;) {
            size_t k;
            int32_t cp = cp_decode(p + i, n - i, &k);
            if (IS("islower") ? cp_is_cased_upper(cp) : cp_is_cased_lower(cp)) return v_bool(c, false);
            if (cp_is_cased_upper(cp) || cp_is_cased_lower(cp)) cased = true;
            i += k;
        }
        return v_bool(c, cased);
    }
    if (IS("splitlines")) {
        value *keep = marg(a, 0, "keepends");
        value *out = v_list(c, 0);
        size_t i = 0;
        while (i < n) {
            size_t j = i, bl = 0;
            while (j < n && !line_break_at(p, n, j, &bl)) j++;
            size_t e = j < n && keep && v_truthy(keep) ? j + bl : j;
            v_list_push(c, out, v_str_ref(c, p + i, e - i));
            i = j < n ? j + bl : n;
        }
        return out;
    }
    if (IS("removeprefix") || IS("removesuffix")) {
        value *x = need_str(a, marg(a, 0, NULL));
        if (!affix(a, s, x, IS("removesuffix"))) return s;
        return IS("removeprefix") ? v_str_ref(c, p + x->u.str.n, n - x->u.str.n) : v_str_ref(c, p, n - x->u.str.n);
    }
#undef IS
    merr(a, "unsupported str method");
}

value *method_call(render_ctx *r, int line, value *self, const char *name, size_t nlen, const call_args *args)
{
    margs A = { r, line, name, nlen, args }, *a = &A;
    tpl_ctx *c = &r->tc;
    if (self->t == V_LOOP && name_is(name, nlen, "cycle")) {
        if (args->npos == 0) tpl_fail(c, AI_ERR_RUNTIME, line, "no items for cycling given");
        return args->pos[self->u.loop->index0 % (int64_t)args->npos];
    }
    if ((self->t == V_DICT || self->t == V_LIST) && in_list(UNSAFE, name, nlen))
        tpl_fail(c, AI_ERR_RUNTIME, line, "access to attribute '%.*s' of '%s' object is unsafe (the template "
                 "sandbox forbids modifying values)", (int)nlen, name, v_type_name(self));
    if (self->t == V_STR) return str_method(a, self);
    if (self->t == V_DICT) {
        if (name_is(name, nlen, "items") || name_is(name, nlen, "keys") || name_is(name, nlen, "values")) {
            value *l = v_list(c, self->u.dict.n);
            for (size_t i = 0; i < self->u.dict.n; i++) {
                if (name_is(name, nlen, "keys")) v_list_push(c, l, self->u.dict.k[i]);
                else if (name_is(name, nlen, "values")) v_list_push(c, l, self->u.dict.v[i]);
                else {
                    value *t = v_list(c, 2);
                    t->tuple = true;
                    v_list_push(c, t, self->u.dict.k[i]);
                    v_list_push(c, t, self->u.dict.v[i]);
                    v_list_push(c, l, t);
                }
            }
            return l;
        }
        if (name_is(name, nlen, "get")) {
            value *k = marg(a, 0, "key"), *d = marg(a, 1, "default");
            if (!k) merr(a, "expected at least 1 argument");
            value *v = v_dict_getv(self, k);
            return v ? v : d ? d : v_none(c);
        }
        if (name_is(name, nlen, "copy")) {
            value *d = v_dict(c);
            for (size_t i = 0; i < self->u.dict.n; i++) v_dict_set(c, d, self->u.dict.k[i], self->u.dict.v[i]);
            return d;
        }
    }
    if (self->t == V_LIST) {
        if (name_is(name, nlen, "index") || name_is(name, nlen, "count")) {
            value *x = marg(a, 0, NULL);
            if (!x) merr(a, "expected an argument");
            int64_t k = 0;
            for (size_t i = 0; i < self->u.list.n; i++) {
                if (!v_equal(self->u.list.v[i], x)) continue;
                if (name_is(name, nlen, "index")) return v_int(c, (int64_t)i);
                k++;
            }
            if (name_is(name, nlen, "index")) merr(a, "value is not in list");
            return v_int(c, k);
        }
        if (name_is(name, nlen, "copy")) {
            value *l = v_list(c, self->u.list.n);
            for (size_t i = 0; i < self->u.list.n; i++) v_list_push(c, l, self->u.list.v[i]);
            return l;
        }
    }
    tpl_fail(c, AI_ERR_UNSUPPORTED, line, "unsupported method '%.*s' of '%s'", (int)nlen, name, v_type_name(self));
}
