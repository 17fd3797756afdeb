/* filters.c - Jinja2's built-in filters and tests, as transformers' environment has them.
 *
 * Each filter follows jinja2/filters.py (argument order, defaults, and quirks such as
 * `default` only replacing Undefined, `sort`/`unique`/`dictsort` comparing strings
 * case-insensitively by default, and `indent` not indenting the first line), except
 * `tojson`, which is transformers' json.dumps(ensure_ascii=False, ...) override.
 * Filters Jinja2 has but we do not are rejected at parse time by filter_known().
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/text.h"
#include "template/tpl.h"

/* one filter application: the N_FILTER node (name and line, for messages) and its arguments */
typedef struct fargs {
    render_ctx *r;
    const node *n;
    const call_args *args;
} fargs;

static value *arg(fargs *a, size_t i, const char *name) { return call_arg(a->args, i, name); }

_Noreturn static void ferr(fargs *a, const char *fmt, const char *x)
{
    tpl_fail(&a->r->tc, AI_ERR_RUNTIME, a->n->line, fmt, (int)a->n->n, a->n->s, x);
}

static value *str_of(render_ctx *r, value *v) { return v_as_str(&r->tc, v); }

static bool truthy_arg(value *v, bool dflt) { return v ? v_truthy(v) : dflt; }

static value *lower_key(render_ctx *r, value *v)
{
    if (v->t != V_STR) return v;
    size_t mark = scratch_begin(r);
    str_case(r->out, v->u.str.s, v->u.str.n, CASE_LOWER);
    return scratch_end(r, mark);
}

/* attribute lookup for map/selectattr/sort(attribute=...): dotted paths, ints as indexes */
static value *attr_path(render_ctx *r, int line, value *v, value *path)
{
    if (path->t == V_INT) return get_item(r, line, v, path);
    value *p = str_of(r, path);
    const char *s = p->u.str.s;
    size_t n = p->u.str.n, i = 0;
    while (i <= n) {
        size_t j = i;
        while (j < n && s[j] != '.') j++;
        char *e;
        char tmp[24];
        size_t k = j - i < 23 ? j - i : 23;
        memcpy(tmp, s + i, k);
        tmp[k] = '\0';
        long long idx = strtoll(tmp, &e, 10);
        if (k && *e == '\0') v = get_item(r, line, v, v_int(&r->tc, idx));
        else v = get_item(r, line, v, v_str_ref(&r->tc, s + i, j - i));
        i = j + 1;
    }
    return v;
}

/* sort helper: insertion-based merge sort on keys (stable, like Python's sorted) */
static void sort_values(render_ctx *r, int line, value **items, value **keys, size_t n, bool reverse)
{
    if (n < 2) return;
    value **ti = arena_alloc(&r->tc, n * sizeof *ti), **tk = arena_alloc(&r->tc, n * sizeof *tk);
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int cmp = v_compare(&r->tc, line, keys[j], keys[i]);
                bool take_right = reverse ? cmp > 0 : cmp < 0;
                if (take_right) { ti[k] = items[j]; tk[k++] = keys[j++]; }
                else { ti[k] = items[i]; tk[k++] = keys[i++]; }
            }
            while (i < mid) { ti[k] = items[i]; tk[k++] = keys[i++]; }
            while (j < hi) { ti[k] = items[j]; tk[k++] = keys[j++]; }
        }
        memcpy(items, ti, n * sizeof *ti);
        memcpy(keys, tk, n * sizeof *tk);
    }
}

static value *seq_filter(fargs *a, value *t, bool by_attr, bool keep)
{
    render_ctx *r = a->r;
    int line = a->n->line;
    value *it = v_truthy(t) ? v_iterate(r, line, t) : v_list(&r->tc, 0);  /* jinja: "if value:" */
    value *out = v_list(&r->tc, 0);
    out->gen = true;
    size_t first = by_attr ? 1 : 0;
    value *attr = by_attr ? arg(a, 0, "attribute") : NULL;
    if (by_attr && !attr) ferr(a, "%.*s: missing attribute argument%s", "");
    const node *tn = NULL;
    node fake;
    if (a->args->npos > first) {
        value *tname = a->args->pos[first];
        if (tname->t != V_STR || !test_known(tname->u.str.s, tname->u.str.n))
            ferr(a, "%.*s: unsupported test %s", tname->t == V_STR ? tname->u.str.s : "?");
        memset(&fake, 0, sizeof fake);
        fake.kind = N_TEST;
        fake.line = line;
        fake.s = tname->u.str.s;
        fake.n = tname->u.str.n;
        tn = &fake;
    }
    for (size_t i = 0; i < it->u.list.n; i++) {
        value *x = it->u.list.v[i];
        value *subject = by_attr ? attr_path(r, line, x, attr) : x;
        bool ok = tn ? test_apply(r, tn, subject, a->args->pos + first + 1, a->args->npos - first - 1) : v_truthy(subject);
        if (ok == keep) v_list_push(&r->tc, out, x);
    }
    return out;
}

static value *do_tojson(fargs *a, value *t)
{
    render_ctx *r = a->r;
    json_opts o = { -1, false, false, ", ", ": " };
    value *ea = arg(a, 0, "ensure_ascii"), *ind = arg(a, 1, "indent"), *sep = arg(a, 2, "separators"),
          *sk = arg(a, 3, "sort_keys");
    if (ea) o.ensure_ascii = v_truthy(ea);
    if (ind && ind->t != V_NONE) {
        if (ind->t != V_INT) ferr(a, "%.*s: indent must be an integer%s", "");
        o.indent = ind->u.i < 0 ? 0 : (int)(ind->u.i > 64 ? 64 : ind->u.i);
        o.item_sep = ",";
    }
    if (sep && sep->t != V_NONE) {
        if (sep->t != V_LIST || sep->u.list.n != 2 || sep->u.list.v[0]->t != V_STR || sep->u.list.v[1]->t != V_STR)
            ferr(a, "%.*s: separators must be a pair of strings%s", "");
        o.item_sep = arena_strdup(&r->tc, sep->u.list.v[0]->u.str.s, sep->u.list.v[0]->u.str.n);
        o.key_sep = arena_strdup(&r->tc, sep->u.list.v[1]->u.str.s, sep->u.list.v[1]->u.str.n);
    }
    if (sk) o.sort_keys = v_truthy(sk);
    size_t mark = scratch_begin(r);
    v_to_json(&r->tc, a->n->line, t, &o, r->out);
    return scratch_end(r, mark);
}

static value *do_indent(fargs *a, value *t)
{
    render_ctx *r = a->r;
    value *w = arg(a, 0, "width"), *first = arg(a, 1, "first"), *blank = arg(a, 2, "blank");
    value *s = str_of(r, t);
    size_t mark0 = scratch_begin(r);
    if (!w) buf_puts(r->out, "    ");
    else if (w->t == V_STR) buf_append(r->out, w->u.str.s, w->u.str.n);
    else if (w->t == V_INT) for (int64_t i = 0; i < w->u.i && i < 1000; i++) buf_putc(r->out, ' ');
    else ferr(a, "%.*s: width must be int or str%s", "");
    value *ind = scratch_end(r, mark0);
    /* s + "\n", then splitlines */
    const char *p = s->u.str.s;
    size_t n = s->u.str.n;
    size_t mark = scratch_begin(r);
    if (truthy_arg(first, false)) buf_append(r->out, ind->u.str.s, ind->u.str.n);
    size_t i = 0, line_no = 0;
    /* iterate lines of s + "\n" */
    while (i < n || (i == n && line_no == 0 && n == 0)) {
        size_t j = i, bl = 0;
        while (j < n && !line_break_at(p, n, j, &bl)) j++;
        if (line_no > 0) {
            buf_putc(r->out, '\n');
            if (truthy_arg(blank, false) || j > i) buf_append(r->out, ind->u.str.s, ind->u.str.n);
        }
        buf_append(r->out, p + i, j - i);
        line_no++;
        if (j >= n) break;
        i = j + bl;
        if (i == n) break;  /* trailing break: the added "\n" makes no extra line */
    }
    return scratch_end(r, mark);
}

static value *do_round(fargs *a, value *t)
{
    render_ctx *r = a->r;
    value *pr = arg(a, 0, "precision"), *meth = arg(a, 1, "method");
    int64_t prec = pr && pr->t == V_INT ? pr->u.i : 0;
    if (t->t != V_INT && t->t != V_FLOAT && t->t != V_BOOL) ferr(a, "%.*s: expected a number%s", "");
    double x = t->t == V_FLOAT ? t->u.f : (double)(t->t == V_INT ? t->u.i : t->u.b);
    double p10 = pow(10.0, (double)prec);
    if (meth && meth->t == V_STR && name_is(meth->u.str.s, meth->u.str.n, "floor")) return v_float(&r->tc, floor(x * p10) / p10);
    if (meth && meth->t == V_STR && name_is(meth->u.str.s, meth->u.str.n, "ceil")) return v_float(&r->tc, ceil(x * p10) / p10);
    if (t->t != V_FLOAT) return t->t == V_BOOL ? v_int(&r->tc, t->u.b) : t;
    char tmp[400];
    if (prec < 0 || prec > 300) return v_float(&r->tc, nearbyint(x * p10) / p10);
    snprintf(tmp, sizeof tmp, "%.*f", (int)prec, x);
    return v_float(&r->tc, strtod(tmp, NULL));
}

static value *do_join(fargs *a, value *t)
{
    render_ctx *r = a->r;
    value *d = arg(a, 0, "d"), *attr = arg(a, 1, "attribute");
    value *it = v_iterate(r, a->n->line, t);
    size_t mark = scratch_begin(r);
    for (size_t i = 0; i < it->u.list.n; i++) {
        if (i && d) v_to_str(&r->tc, d, r->out);
        value *x = it->u.list.v[i];
        if (attr) x = attr_path(r, a->n->line, x, attr);
        v_to_str(&r->tc, x, r->out);
    }
    return scratch_end(r, mark);
}

static value *do_minmax(fargs *a, value *t, bool want_max)
{
    render_ctx *r = a->r;
    value *cs = arg(a, 0, "case_sensitive"), *attr = arg(a, 1, "attribute");
    value *it = v_iterate(r, a->n->line, t);
    if (it->u.list.n == 0) return v_undef(&r->tc, "no items", 8);
    value *best = NULL, *bestk = NULL;
    for (size_t i = 0; i < it->u.list.n; i++) {
        value *x = it->u.list.v[i], *k = attr ? attr_path(r, a->n->line, x, attr) : x;
        if (!truthy_arg(cs, false)) k = lower_key(r, k);
        if (!best) { best = x; bestk = k; continue; }
        int c = v_compare(&r->tc, a->n->line, k, bestk);
        if (want_max ? c > 0 : c < 0) { best = x; bestk = k; }
    }
    return best;
}

static const char *const FILTERS[] = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape",
    "first", "float", "indent", "int", "items", "join", "last", "length", "list", "lower", "map", "max",
    "min", "reject", "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr", "sort",
    "string", "sum", "title", "tojson", "trim", "unique", "upper", "wordcount", "forceescape", NULL
};

bool filter_known(const char *name, size_t n)
{
    for (int i = 0; FILTERS[i]; i++) if (name_is(name, n, FILTERS[i])) return true;
    return false;
}

static int64_t py_len(fargs *a, value *t)
{
    switch (t->t) {
    case V_STR: return (int64_t)utf8_cp_count(t->u.str.s, t->u.str.n);
    case V_LIST: if (t->gen) break; return (int64_t)t->u.list.n;
    case V_DICT: return (int64_t)t->u.dict.n;
    case V_UNDEF: return 0;
    default: break;
    }
    {
        tpl_fail(&a->r->tc, AI_ERR_RUNTIME, a->n->line, "object of type '%s' has no len()", v_type_name(t));
    }
}

value *html_escape(render_ctx *r, value *t)
{
    value *s = str_of(r, t);
    size_t mark = scratch_begin(r);
    for (size_t i = 0; i < s->u.str.n; i++) {
        char ch = s->u.str.s[i];
        switch (ch) {
        case '&': buf_puts(r->out, "&amp;"); break;
        case '<': buf_puts(r->out, "&lt;"); break;
        case '>': buf_puts(r->out, "&gt;"); break;
        case '"': buf_puts(r->out, "&#34;"); break;
        case '\'': buf_puts(r->out, "&#39;"); break;
        default: buf_putc(r->out, ch);
        }
    }
    return scratch_end(r, mark);
}

static value *parse_number(render_ctx *r, value *t, bool want_int, value *dflt)
{
    tpl_ctx *c = &r->tc;
    if (t->t == V_INT) return want_int ? t : v_float(c, (double)t->u.i);
    if (t->t == V_BOOL) return want_int ? v_int(c, t->u.b) : v_float(c, t->u.b);
    if (t->t == V_FLOAT) {
        if (!want_int) return t;
        if (isfinite(t->u.f) && fabs(t->u.f) < 9.2e18) return v_int(c, (int64_t)t->u.f);
        return dflt;
    }
    if (t->t == V_STR) {
        char tmp[128];
        size_t a0, b0;
        str_strip(t->u.str.s, t->u.str.n, NULL, 0, true, true, &a0, &b0);
        size_t k = 0;
        for (size_t i = a0; i < b0 && k < sizeof tmp - 1; i++) if (t->u.str.s[i] != '_') tmp[k++] = t->u.str.s[i];
        tmp[k] = '\0';
        if (k == 0 || b0 - a0 >= sizeof tmp - 1) return dflt;
        char *e;
        if (want_int) {
            long long v = strtoll(tmp, &e, 10);
            if (*e == '\0') return v_int(c, v);
        }
        double f = strtod(tmp, &e);
        if (*e != '\0' || (tmp[0] == '0' && (tmp[1] == 'x' || tmp[1] == 'X'))) return dflt;
        if (!want_int) return v_float(c, f);
        if (isfinite(f) && fabs(f) < 9.2e18) return v_int(c, (int64_t)f);
    }
    return dflt;
}

value *filter_apply(render_ctx *r, const node *n, value *t, const call_args *args)
{
    fargs A = { r, n, args }, *a = &A;
    tpl_ctx *c = &r->tc;
    const char *f = n->s;
    size_t fn = n->n;
    int line = n->line;
#define IS(x) name_is(f, fn, x)
    if (IS("default") || IS("d")) {
        value *dv = arg(a, 0, "default_value"), *bo = arg(a, 1, "boolean");
        if (t->t == V_UNDEF || (truthy_arg(bo, false) && !v_truthy(t))) return dv ? dv : v_str_ref(c, "", 0);
        return t;
    }
    if (IS("safe")) {
        value *s = v_new(c, V_STR);
        *s = *str_of(r, t);
        s->safe = true;
        return s;
    }
    if (IS("string")) return str_of(r, t);
    if (IS("tojson")) return do_tojson(a, t);
    if (IS("length") || IS("count")) return v_int(c, py_len(a, t));
    if (IS("trim")) {
        value *s = str_of(r, t), *ch = arg(a, 0, "chars");
        size_t x, y;
        if (ch && ch->t == V_STR) str_strip(s->u.str.s, s->u.str.n, ch->u.str.s, ch->u.str.n, true, true, &x, &y);
        else str_strip(s->u.str.s, s->u.str.n, NULL, 0, true, true, &x, &y);
        return v_str_ref(c, s->u.str.s + x, y - x);
    }
    if (IS("upper") || IS("lower") || IS("capitalize")) {
        value *s = str_of(r, t);
        size_t mark = scratch_begin(r);
        str_case(r->out, s->u.str.s, s->u.str.n, IS("upper") ? CASE_UPPER : IS("lower") ? CASE_LOWER : CASE_CAPITALIZE);
        return scratch_end(r, mark);
    }
    if (IS("title")) { /* jinja: split at runs of [-\s({\[<], capitalize each piece */
        value *s = str_of(r, t);
        size_t mark = scratch_begin(r);
        bool start = true;
        for (size_t i = 0; i < s->u.str.n;) {
            size_t k;
            int32_t cp = cp_decode(s->u.str.s + i, s->u.str.n - i, &k);
            bool sep = cp_is_space(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
            cp_put(r->out, sep ? cp : start ? cp_upper(cp) : cp_lower(cp));
            start = sep;
            i += k;
        }
        return scratch_end(r, mark);
    }
    if (IS("replace")) {
        value *s = str_of(r, t), *o = arg(a, 0, "old"), *nw = arg(a, 1, "new"), *cnt = arg(a, 2, "count");
        if (!o || !nw) ferr(a, "%.*s: needs old and new%s", "");
        value *args3[3] = { str_of(r, o), str_of(r, nw), cnt ? cnt : v_int(c, -1) };
        return method_call(r, line, s, "replace", 7, &(call_args){ .pos = args3, .npos = 3 });
    }
    if (IS("join")) return do_join(a, t);
    if (IS("first") || IS("last")) {
        value *it = v_iterate(r, line, t);
        if (it->u.list.n == 0) return v_undef(c, "no items", 8);
        return IS("first") ? it->u.list.v[0] : it->u.list.v[it->u.list.n - 1];
    }
    if (IS("list")) {
        value *it = v_iterate(r, line, t);
        value *l = v_list(c, it->u.list.n);
        for (size_t i = 0; i < it->u.list.n; i++) v_list_push(c, l, it->u.list.v[i]);
        return l;
    }
    if (IS("items")) {
        if (t->t == V_UNDEF) return v_list(c, 0);
        if (t->t != V_DICT && t->t != V_NS) ferr(a, "%.*s: expected a mapping%s", "");
        return method_call(r, line, t, "items", 5, &(call_args){ 0 });
    }
    if (IS("dictsort")) {
        value *cs = arg(a, 0, "case_sensitive"), *by = arg(a, 1, "by"), *rev = arg(a, 2, "reverse");
        if (t->t != V_DICT) ferr(a, "%.*s: expected a dict%s", "");
        value *items = method_call(r, line, t, "items", 5, &(call_args){ 0 });
        size_t k = items->u.list.n;
        bool by_value = by && by->t == V_STR && name_is(by->u.str.s, by->u.str.n, "value");
        value **keys = arena_alloc(c, (k + 1) * sizeof *keys);
        for (size_t i = 0; i < k; i++) {
            value *x = items->u.list.v[i]->u.list.v[by_value ? 1 : 0];
            keys[i] = truthy_arg(cs, false) ? x : lower_key(r, x);
        }
        sort_values(r, line, items->u.list.v, keys, k, truthy_arg(rev, false));
        return items;
    }
    if (IS("sort")) {
        value *rev = arg(a, 0, "reverse"), *cs = arg(a, 1, "case_sensitive"), *attr = arg(a, 2, "attribute");
        value *it = v_iterate(r, line, t);
        value *l = v_list(c, it->u.list.n);
        value **keys = arena_alloc(c, (it->u.list.n + 1) * sizeof *keys);
        for (size_t i = 0; i < it->u.list.n; i++) {
            value *x = it->u.list.v[i], *k = attr ? attr_path(r, line, x, attr) : x;
            keys[i] = truthy_arg(cs, false) ? k : lower_key(r, k);
            v_list_push(c, l, x);
        }
        sort_values(r, line, l->u.list.v, keys, l->u.list.n, truthy_arg(rev, false));
        return l;
    }
    if (IS("unique")) {
        value *cs = arg(a, 0, "case_sensitive"), *attr = arg(a, 1, "attribute");
        value *it = v_iterate(r, line, t);
        value *l = v_list(c, 0), *seen = v_list(c, 0);
        for (size_t i = 0; i < it->u.list.n; i++) {
            value *x = it->u.list.v[i], *k = attr ? attr_path(r, line, x, attr) : x;
            if (!truthy_arg(cs, false)) k = lower_key(r, k);
            bool dup = false;
            for (size_t j = 0; j < seen->u.list.n && !dup; j++) dup = v_equal(seen->u.list.v[j], k);
            if (!dup) { v_list_push(c, seen, k); v_list_push(c, l, x); }
        }
        return l;
    }
    if (IS("reverse")) {
        if (t->t == V_STR) {
            value *it = v_iterate(r, line, t);
            size_t mark = scratch_begin(r);
            for (size_t i = it->u.list.n; i-- > 0;) buf_append(r->out, it->u.list.v[i]->u.str.s, it->u.list.v[i]->u.str.n);
            return scratch_end(r, mark);
        }
        value *it = v_iterate(r, line, t);
        value *l = v_list(c, it->u.list.n);
        for (size_t i = it->u.list.n; i-- > 0;) v_list_push(c, l, it->u.list.v[i]);
        return l;
    }
    if (IS("map")) {
        value *it = v_truthy(t) ? v_iterate(r, line, t) : v_list(c, 0);
        value *l = v_list(c, it->u.list.n);
        l->gen = true;
        value *attr = arg(a, 99, "attribute");
        if (attr) {
            value *dflt = arg(a, 99, "default");
            for (size_t i = 0; i < it->u.list.n; i++) {
                value *x = attr_path(r, line, it->u.list.v[i], attr);
                if (x->t == V_UNDEF && dflt) x = dflt;
                v_list_push(c, l, x);
            }
            return l;
        }
        value *name = arg(a, 0, NULL);
        if (!name || name->t != V_STR || !filter_known(name->u.str.s, name->u.str.n))
            ferr(a, "%.*s: unsupported filter %s", name && name->t == V_STR ? name->u.str.s : "argument");
        node fake = *n;
        fake.s = name->u.str.s;
        fake.n = name->u.str.n;
        call_args rest = *args;   /* map(name, *rest, **kw) applies name(x, *rest, **kw) */
        rest.pos++;
        rest.npos--;
        for (size_t i = 0; i < it->u.list.n; i++) v_list_push(c, l, filter_apply(r, &fake, it->u.list.v[i], &rest));
        return l;
    }
    if (IS("select")) return seq_filter(a, t, false, true);
    if (IS("reject")) return seq_filter(a, t, false, false);
    if (IS("selectattr")) return seq_filter(a, t, true, true);
    if (IS("rejectattr")) return seq_filter(a, t, true, false);
    if (IS("int")) {
        value *dflt = arg(a, 0, "default");
        return parse_number(r, t, true, dflt ? dflt : v_int(c, 0));
    }
    if (IS("float")) {
        value *dflt = arg(a, 0, "default");
        return parse_number(r, t, false, dflt ? dflt : v_float(c, 0.0));
    }
    if (IS("abs")) {
        if (t->t == V_INT) return t->u.i == INT64_MIN ? t : v_int(c, t->u.i < 0 ? -t->u.i : t->u.i);
        if (t->t == V_FLOAT) return v_float(c, fabs(t->u.f));
        if (t->t == V_BOOL) return v_int(c, t->u.b);
        ferr(a, "%.*s: bad operand type%s", "");
    }
    if (IS("round")) return do_round(a, t);
    if (IS("indent")) return do_indent(a, t);
    if (IS("min")) return do_minmax(a, t, false);
    if (IS("max")) return do_minmax(a, t, true);
    if (IS("sum")) {
        value *attr = arg(a, 0, "attribute"), *start = arg(a, 1, "start");
        value *it = v_iterate(r, line, t), *acc = start ? start : v_int(c, 0);
        for (size_t i = 0; i < it->u.list.n; i++) {
            value *x = attr ? attr_path(r, line, it->u.list.v[i], attr) : it->u.list.v[i];
            node add = { .kind = N_BINOP, .line = line, .op = OP_ADD };
            (void)add;
            if ((acc->t == V_INT || acc->t == V_BOOL) && (x->t == V_INT || x->t == V_BOOL)) {
                int64_t z;
                if (__builtin_add_overflow(acc->t == V_INT ? acc->u.i : acc->u.b, x->t == V_INT ? x->u.i : x->u.b, &z))
                    ferr(a, "%.*s: integer overflow%s", "");
                acc = v_int(c, z);
            } else if ((acc->t == V_INT || acc->t == V_FLOAT || acc->t == V_BOOL) &&
                       (x->t == V_INT || x->t == V_FLOAT || x->t == V_BOOL)) {
                double p = acc->t == V_FLOAT ? acc->u.f : (double)(acc->t == V_INT ? acc->u.i : acc->u.b);
                double q = x->t == V_FLOAT ? x->u.f : (double)(x->t == V_INT ? x->u.i : x->u.b);
                acc = v_float(c, p + q);
            } else ferr(a, "%.*s: unsupported operand types%s", "");
        }
        return acc;
    }
    if (IS("attr")) {
        value *nm = arg(a, 0, "name");
        if (!nm || nm->t != V_STR) ferr(a, "%.*s: needs an attribute name%s", "");
        return get_attr(r, line, t, nm->u.str.s, nm->u.str.n);
    }
    if (IS("batch")) {
        value *cnt = arg(a, 0, "linecount"), *fill = arg(a, 1, "fill_with");
        if (!cnt || cnt->t != V_INT || cnt->u.i <= 0) ferr(a, "%.*s: needs a positive count%s", "");
        value *it = v_iterate(r, line, t), *l = v_list(c, 0), *cur = NULL;
        for (size_t i = 0; i < it->u.list.n; i++) {
            if (!cur || (int64_t)cur->u.list.n == cnt->u.i) { cur = v_list(c, 0); v_list_push(c, l, cur); }
            v_list_push(c, cur, it->u.list.v[i]);
        }
        if (cur && fill && fill->t != V_NONE) while ((int64_t)cur->u.list.n < cnt->u.i) v_list_push(c, cur, fill);
        return l;
    }
    if (IS("center")) {
        value *w = arg(a, 0, "width"), *s = str_of(r, t);
        int64_t width = w && w->t == V_INT ? w->u.i : 80, len = (int64_t)utf8_cp_count(s->u.str.s, s->u.str.n);
        if (width <= len) return s;
        if (width > 100000) ferr(a, "%.*s: width too large%s", "");
        int64_t pad = width - len, left = pad / 2 + (pad & width & 1);
        size_t mark = scratch_begin(r);
        for (int64_t i = 0; i < left; i++) buf_putc(r->out, ' ');
        buf_append(r->out, s->u.str.s, s->u.str.n);
        for (int64_t i = 0; i < pad - left; i++) buf_putc(r->out, ' ');
        return scratch_end(r, mark);
    }
    if (IS("wordcount")) {
        value *s = str_of(r, t);
        int64_t k = 0;
        bool in = false;
        for (size_t i = 0; i < s->u.str.n;) {
            size_t len;
            int32_t cp = cp_decode(s->u.str.s + i, s->u.str.n - i, &len);
            bool w = cp_is_alpha(cp) || cp_is_digit(cp) || cp == '_';
            if (w && !in) k++;
            in = w;
            i += len;
        }
        return v_int(c, k);
    }
    if (IS("escape") || IS("e") || IS("forceescape")) {
        if (t->t == V_STR && t->safe && !IS("forceescape")) return t;
        value *e = html_escape(r, t);
        e->safe = true;
        return e;
    }
#undef IS
    tpl_fail(c, AI_ERR_UNSUPPORTED, line, "unsupported filter '%.*s'", (int)fn, f);
}

// --- tests

static const char *const TESTS[] = {
    "defined", "undefined", "none", "string", "number", "integer", "float", "mapping", "iterable",
    "sequence", "boolean", "true", "false", "equalto", "eq", "==", "ne", "!=", "lt", "<", "le", "<=",
    "gt", ">", "ge", ">=", "in", "odd", "even", "divisibleby", "callable", "sameas", "lower", "upper",
    "escaped", NULL
};

bool test_known(const char *name, size_t n)
{
    for (int i = 0; TESTS[i]; i++) if (name_is(name, n, TESTS[i])) return true;
    return false;
}

bool test_apply(render_ctx *r, const node *n, value *t, value **args, size_t nargs)
{
    tpl_ctx *c = &r->tc;
    const char *f = n->s;
    size_t fn = n->n;
    int line = n->line;
#define IS(x) name_is(f, fn, x)
#define NEED1() do { if (nargs < 1) tpl_fail(c, AI_ERR_RUNTIME, line, "test '%.*s' needs an argument", (int)fn, f); } while (0)
    if (IS("defined")) return t->t != V_UNDEF;
    if (IS("undefined")) return t->t == V_UNDEF;
    if (IS("none")) return t->t == V_NONE;
    if (IS("string")) return t->t == V_STR;
    if (IS("number")) return t->t == V_INT || t->t == V_FLOAT || t->t == V_BOOL;
    if (IS("integer")) return t->t == V_INT;
    if (IS("float")) return t->t == V_FLOAT;
    if (IS("mapping")) return t->t == V_DICT;
    if (IS("iterable")) return t->t == V_STR || t->t == V_LIST || t->t == V_DICT || t->t == V_UNDEF;
    if (IS("sequence")) return t->t == V_STR || t->t == V_LIST || t->t == V_DICT || t->t == V_UNDEF;
    if (IS("boolean")) return t->t == V_BOOL;
    if (IS("true")) return t->t == V_BOOL && t->u.b;
    if (IS("false")) return t->t == V_BOOL && !t->u.b;
    if (IS("callable")) return t->t == V_FUNC || t->t == V_MACRO || t->t == V_METHOD;
    if (IS("escaped")) return false;
    if (IS("lower") || IS("upper")) {
        value *s = v_as_str(c, t);
        bool cased = false;
        for (size_t i = 0; i < s->u.str.n;) {
            size_t k;
            int32_t cp = cp_decode(s->u.str.s + i, s->u.str.n - i, &k);
            if (IS("lower") ? cp_is_cased_upper(cp) : cp_is_cased_lower(cp)) return false;
            if (cp_is_cased_upper(cp) || cp_is_cased_lower(cp)) cased = true;
            i += k;
        }
        return cased;
    }
    if (IS("odd") || IS("even")) {
        if (t->t != V_INT && t->t != V_BOOL) tpl_fail(c, AI_ERR_RUNTIME, line, "test '%.*s' needs an integer", (int)fn, f);
        int64_t v = t->t == V_INT ? t->u.i : t->u.b;
        return IS("odd") ? (v % 2 != 0) : (v % 2 == 0);
    }
    NEED1();
    value *o = args[0];
    if (IS("equalto") || IS("eq") || IS("==")) return v_equal(t, o);
    if (IS("ne") || IS("!=")) return !v_equal(t, o);
    if (IS("lt") || IS("<")) return v_compare(c, line, t, o) < 0;
    if (IS("le") || IS("<=")) return v_compare(c, line, t, o) <= 0;
    if (IS("gt") || IS(">")) return v_compare(c, line, t, o) > 0;
    if (IS("ge") || IS(">=")) return v_compare(c, line, t, o) >= 0;
    if (IS("sameas")) {
        if (t->t != o->t) return false;
        if (t->t == V_NONE || t->t == V_UNDEF) return true;
        if (t->t == V_BOOL) return t->u.b == o->u.b;
        return t == o || ((t->t == V_INT) && t->u.i == o->u.i && t->u.i >= -5 && t->u.i <= 256);
    }
    if (IS("in")) {
        value *cont = o;
        if (cont->t == V_STR) {
            if (t->t != V_STR) tpl_fail(c, AI_ERR_RUNTIME, line, "'in <string>' requires string as left operand");
            return t->u.str.n == 0 || mem_find(cont->u.str.s, cont->u.str.n, t->u.str.s, t->u.str.n, 0) != NULL;
        }
        if (cont->t == V_LIST) { for (size_t i = 0; i < cont->u.list.n; i++) if (v_equal(cont->u.list.v[i], t)) return true; return false; }
        if (cont->t == V_DICT) return v_dict_getv(cont, t) != NULL;
        tpl_fail(c, AI_ERR_RUNTIME, line, "argument of type '%s' is not iterable", v_type_name(cont));
    }
    if (IS("divisibleby")) {
        if ((t->t != V_INT && t->t != V_BOOL) || (o->t != V_INT && o->t != V_BOOL))
            tpl_fail(c, AI_ERR_RUNTIME, line, "test 'divisibleby' needs integers");
        int64_t x = t->t == V_INT ? t->u.i : t->u.b, y = o->t == V_INT ? o->u.i : o->u.b;
        if (y == 0) tpl_fail(c, AI_ERR_RUNTIME, line, "integer division or modulo by zero");
        if (y == -1) return true;
        return x % y == 0;
    }
#undef IS
#undef NEED1
    tpl_fail(c, AI_ERR_UNSUPPORTED, line, "unsupported test '%.*s'", (int)fn, f);
}
