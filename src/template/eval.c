/* eval.c - the tree-walking evaluator: statements write text, expressions make values.
 *
 * Scoping follows Jinja2: a for-loop iteration and a macro call open a new scope, `if`
 * does not; `set` binds in the innermost scope, so a `set` inside a loop is invisible
 * after it (templates use namespace() for that, which we support). A macro closes over
 * the scope it was defined in. Attribute and subscript access follow Jinja's
 * environment.getattr/getitem: obj.x tries the Python attribute (dict methods such as
 * items/get) before the key, obj['x'] the key first; a missing key gives Undefined, and
 * only using an Undefined (calling it, taking its attribute, doing arithmetic) fails.
 * Text captured for {% set %}...{% endset %}, macros and filter blocks is rendered at the
 * tail of the one output buffer and cut off again, so no extra heap buffers exist while
 * an error can unwind (tpl.h invariant 3).
 */
#include <math.h>
#include <string.h>
#include <time.h>

#include "template/tpl.h"

struct scope {
    scope *parent;
    value *vars;  /* V_DICT */
};

typedef enum flow { FLOW_NORMAL, FLOW_BREAK, FLOW_CONTINUE } flow;

static flow exec_body(render_ctx *r, scope *sc, const node *body);

static scope *scope_new(render_ctx *r, scope *parent)
{
    scope *s = arena_alloc(&r->tc, sizeof *s);
    s->parent = parent;
    s->vars = v_dict(&r->tc);
    return s;
}

static void scope_set(render_ctx *r, scope *s, const char *name, size_t n, value *v)
{
    v_dict_set(&r->tc, s->vars, v_str_ref(&r->tc, name, n), v);
}

static value *scope_get(scope *s, const char *name, size_t n)
{
    for (; s; s = s->parent) {
        value *v = v_dict_get(s->vars, name, n);
        if (v) return v;
    }
    return NULL;
}

size_t scratch_begin(render_ctx *r) { return r->out->len; }

value *scratch_end(render_ctx *r, size_t mark)
{
    out_check(r, 0);
    value *v = v_str(&r->tc, r->out->data ? r->out->data + mark : "", r->out->len - mark);
    r->out->len = mark;
    if (r->out->data) r->out->data[mark] = '\0';
    return v;
}

void out_check(render_ctx *r, int line)
{
    if (r->out->oom) tpl_fail(&r->tc, AI_ERR_NOMEM, line, "out of memory while rendering");
    if (r->out->len - r->out_mark > TPL_MAX_OUTPUT)
        tpl_fail(&r->tc, AI_ERR_RANGE, line, "output larger than %u bytes", TPL_MAX_OUTPUT);
}

static void deeper(render_ctx *r, int line)
{
    if (++r->depth > TPL_MAX_EVAL_DEPTH)
        tpl_fail(&r->tc, AI_ERR_RANGE, line, "evaluation nested deeper than %d (runaway macro recursion?)",
                 TPL_MAX_EVAL_DEPTH);
}

_Noreturn static void undefined_error(render_ctx *r, int line, const value *u)
{
    tpl_fail(&r->tc, AI_ERR_RUNTIME, line, "'%.*s' is undefined", (int)u->u.str.n, u->u.str.s);
}

// --- attribute / item access

static value *loop_attr(render_ctx *r, int line, value *lv, const char *name, size_t n)
{
    loop_state *ls = lv->u.loop;
    tpl_ctx *c = &r->tc;
    if (name_is(name, n, "index")) return v_int(c, ls->index0 + 1);
    if (name_is(name, n, "index0")) return v_int(c, ls->index0);
    if (name_is(name, n, "revindex")) return v_int(c, ls->length - ls->index0);
    if (name_is(name, n, "revindex0")) return v_int(c, ls->length - ls->index0 - 1);
    if (name_is(name, n, "first")) return v_bool(c, ls->index0 == 0);
    if (name_is(name, n, "last")) return v_bool(c, ls->index0 == ls->length - 1);
    if (name_is(name, n, "length")) return v_int(c, ls->length);
    if (name_is(name, n, "depth")) return v_int(c, 1);
    if (name_is(name, n, "depth0")) return v_int(c, 0);
    if (name_is(name, n, "previtem"))
        return ls->index0 > 0 ? ls->items[ls->index0 - 1] : v_undef(c, "there is no previous item", 25);
    if (name_is(name, n, "nextitem"))
        return ls->index0 + 1 < ls->length ? ls->items[ls->index0 + 1] : v_undef(c, "there is no next item", 21);
    if (name_is(name, n, "cycle")) {
        value *m = v_new(c, V_METHOD);
        m->u.method.self = lv;
        m->u.method.name = "cycle";
        m->u.method.n = 5;
        return m;
    }
    (void)line;
    return v_undef(c, name, n);
}

static value *method_value(render_ctx *r, value *self, const char *name, size_t n)
{
    value *m = v_new(&r->tc, V_METHOD);
    m->u.method.self = self;
    m->u.method.name = name;
    m->u.method.n = n;
    return m;
}

value *get_attr(render_ctx *r, int line, value *obj, const char *name, size_t n)
{
    switch (obj->t) {
    case V_UNDEF: undefined_error(r, line, obj);
    case V_DICT: {
        if (method_exists(obj, name, n)) return method_value(r, obj, name, n);
        value *v = v_dict_get(obj, name, n);
        return v ? v : v_undef(&r->tc, name, n);
    }
    case V_NS: {
        value *v = v_dict_get(obj, name, n);
        return v ? v : v_undef(&r->tc, name, n);
    }
    case V_LOOP: return loop_attr(r, line, obj, name, n);
    default:
        if (method_exists(obj, name, n)) return method_value(r, obj, name, n);
        return v_undef(&r->tc, name, n);
    }
}

value *get_item(render_ctx *r, int line, value *obj, value *key)
{
    tpl_ctx *c = &r->tc;
    switch (obj->t) {
    case V_UNDEF: undefined_error(r, line, obj);
    case V_DICT: case V_NS: {
        value *v = v_dict_getv(obj, key);
        if (v) return v;
        break;
    }
    case V_LIST:
        if (key->t == V_INT || key->t == V_BOOL) {
            int64_t i = key->t == V_INT ? key->u.i : key->u.b, n = (int64_t)obj->u.list.n;
            if (i < 0) i += n;
            if (i >= 0 && i < n) return obj->u.list.v[i];
        }
        break;
    case V_STR:
        if (key->t == V_INT) {
            int64_t i = key->u.i, n = (int64_t)utf8_cp_count(obj->u.str.s, obj->u.str.n);
            if (i < 0) i += n;
            if (i >= 0 && i < n) {
                size_t a = utf8_cp_offset(obj->u.str.s, obj->u.str.n, (size_t)i);
                size_t b = utf8_cp_offset(obj->u.str.s, obj->u.str.n, (size_t)i + 1);
                return v_str_ref(c, obj->u.str.s + a, b - a);
            }
        }
        break;
    default: break;
    }
    if (key->t == V_STR) {
        if (obj->t == V_LOOP) return loop_attr(r, line, obj, key->u.str.s, key->u.str.n);
        if (obj->t != V_NS && method_exists(obj, key->u.str.s, key->u.str.n))
            return method_value(r, obj, key->u.str.s, key->u.str.n);
        return v_undef(c, key->u.str.s, key->u.str.n);
    }
    return v_undef(c, "item", 4);
}

static int64_t slice_index(render_ctx *r, int line, value *v, int64_t dflt)
{
    if (!v || v->t == V_NONE) return dflt;
    if (v->t == V_INT) return v->u.i;
    if (v->t == V_BOOL) return v->u.b;
    tpl_fail(&r->tc, AI_ERR_RUNTIME, line, "slice indices must be integers or None, not %s", v_type_name(v));
}

static value *do_slice(render_ctx *r, int line, value *obj, value *va, value *vb, value *vc)
{
    tpl_ctx *c = &r->tc;
    if (obj->t == V_UNDEF) undefined_error(r, line, obj);
    bool is_str = obj->t == V_STR;
    if (!is_str && obj->t != V_LIST) return v_undef(c, "slice", 5);
    int64_t n = is_str ? (int64_t)utf8_cp_count(obj->u.str.s, obj->u.str.n) : (int64_t)obj->u.list.n;
    int64_t step = slice_index(r, line, vc, 1);
    if (step == 0) tpl_fail(c, AI_ERR_RUNTIME, line, "slice step cannot be zero");
    int64_t lo, hi;
    if (step > 0) {
        lo = slice_index(r, line, va, 0);
        hi = slice_index(r, line, vb, n);
        if (lo < 0) { lo += n; if (lo < 0) lo = 0; } else if (lo > n) lo = n;
        if (hi < 0) { hi += n; if (hi < 0) hi = 0; } else if (hi > n) hi = n;
    } else {
        lo = slice_index(r, line, va, n - 1);
        hi = slice_index(r, line, vb, INT64_MIN);
        if (lo < 0) { lo += n; if (lo < 0) lo = -1; } else if (lo >= n) lo = n - 1;
        if (hi == INT64_MIN) hi = -1;
        else if (hi < 0) { hi += n; if (hi < 0) hi = -1; } else if (hi >= n) hi = n - 1;
    }
    if (is_str && step == 1) {
        if (hi < lo) hi = lo;
        size_t a = utf8_cp_offset(obj->u.str.s, obj->u.str.n, (size_t)lo);
        size_t b = utf8_cp_offset(obj->u.str.s, obj->u.str.n, (size_t)hi);
        return v_str_ref(c, obj->u.str.s + a, b - a);
    }
    value *out = v_list(c, 0);
    out->tuple = obj->tuple;
    size_t mark = is_str ? scratch_begin(r) : 0;
    for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) {
        if (is_str) {
            size_t a = utf8_cp_offset(obj->u.str.s, obj->u.str.n, (size_t)i);
            size_t b = utf8_cp_offset(obj->u.str.s, obj->u.str.n, (size_t)i + 1);
            buf_append(r->out, obj->u.str.s + a, b - a);
        } else v_list_push(c, out, obj->u.list.v[i]);
    }
    return is_str ? scratch_end(r, mark) : out;
}

value *v_iterate(render_ctx *r, int line, value *v)
{
    tpl_ctx *c = &r->tc;
    switch (v->t) {
    case V_UNDEF: return v_list(c, 0);
    case V_LIST: return v;
    case V_DICT: {
        value *l = v_list(c, v->u.dict.n);
        for (size_t i = 0; i < v->u.dict.n; i++) v_list_push(c, l, v->u.dict.k[i]);
        return l;
    }
    case V_STR: {
        size_t n = utf8_cp_count(v->u.str.s, v->u.str.n);
        value *l = v_list(c, n);
        for (size_t i = 0, p = 0; i < n; i++) {
            size_t q = p + 1;
            while (q < v->u.str.n && ((unsigned char)v->u.str.s[q] & 0xC0) == 0x80) q++;
            v_list_push(c, l, v_str_ref(c, v->u.str.s + p, q - p));
            p = q;
        }
        return l;
    }
    default:
        tpl_fail(c, AI_ERR_RUNTIME, line, "'%s' object is not iterable", v_type_name(v));
    }
}

// --- operators

static bool is_intlike(const value *v) { return v->t == V_INT || v->t == V_BOOL; }
static int64_t as_i(const value *v) { return v->t == V_INT ? v->u.i : v->u.b; }
static bool is_number(const value *v) { return v->t == V_INT || v->t == V_FLOAT || v->t == V_BOOL; }
static double as_f(const value *v) { return v->t == V_FLOAT ? v->u.f : (double)as_i(v); }

static const char *op_sym(int op)
{
    static const char *const s[] = { "+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", "<=", ">", ">=", "in", "not in" };
    return s[op];
}

_Noreturn static void type_error(render_ctx *r, int line, int op, const value *a, const value *b)
{
    if (a->t == V_UNDEF) undefined_error(r, line, a);
    if (b->t == V_UNDEF) undefined_error(r, line, b);
    tpl_fail(&r->tc, AI_ERR_RUNTIME, line, "unsupported operand type(s) for %s: '%s' and '%s'", op_sym(op),
             v_type_name(a), v_type_name(b));
}

static value *repeat(render_ctx *r, int line, value *seq, int64_t k)
{
    tpl_ctx *c = &r->tc;
    if (k < 0) k = 0;
    if (seq->t == V_STR) {
        if (seq->u.str.n && (uint64_t)k > TPL_MAX_OUTPUT / seq->u.str.n)
            tpl_fail(c, AI_ERR_RANGE, line, "string repetition too large");
        size_t mark = scratch_begin(r);
        for (int64_t i = 0; i < k; i++) buf_append(r->out, seq->u.str.s, seq->u.str.n);
        return scratch_end(r, mark);
    }
    if (seq->u.list.n && (uint64_t)k > 1000000 / seq->u.list.n) tpl_fail(c, AI_ERR_RANGE, line, "list repetition too large");
    value *l = v_list(c, 0);
    l->tuple = seq->tuple;
    for (int64_t i = 0; i < k; i++)
        for (size_t j = 0; j < seq->u.list.n; j++) v_list_push(c, l, seq->u.list.v[j]);
    return l;
}

static bool contains(render_ctx *r, int line, value *item, value *cont)
{
    switch (cont->t) {
    case V_STR:
        if (item->t != V_STR)
            tpl_fail(&r->tc, AI_ERR_RUNTIME, line, "'in <string>' requires string as left operand, not %s", v_type_name(item));
        if (item->u.str.n == 0) return true;
        if (item->u.str.n > cont->u.str.n) return false;
        for (size_t i = 0; i + item->u.str.n <= cont->u.str.n; i++)
            if (memcmp(cont->u.str.s + i, item->u.str.s, item->u.str.n) == 0) return true;
        return false;
    case V_LIST:
        for (size_t i = 0; i < cont->u.list.n; i++) if (v_equal(cont->u.list.v[i], item)) return true;
        return false;
    case V_DICT: case V_NS: return v_dict_getv(cont, item) != NULL;
    case V_UNDEF: return false;
    default:
        tpl_fail(&r->tc, AI_ERR_RUNTIME, line, "argument of type '%s' is not iterable", v_type_name(cont));
    }
}

static value *binop_eval(render_ctx *r, int line, int op, value *a, value *b)
{
    tpl_ctx *c = &r->tc;
    int64_t x, y, z;
    switch (op) {
    case OP_EQ: return v_bool(c, v_equal(a, b));
    case OP_NE: return v_bool(c, !v_equal(a, b));
    case OP_LT: case OP_LE: case OP_GT: case OP_GE: {
        if (a->t == V_UNDEF) undefined_error(r, line, a);
        if (b->t == V_UNDEF) undefined_error(r, line, b);
        int k = v_compare(c, line, a, b);
        return v_bool(c, op == OP_LT ? k < 0 : op == OP_LE ? k <= 0 : op == OP_GT ? k > 0 : k >= 0);
    }
    case OP_IN: return v_bool(c, contains(r, line, a, b));
    case OP_NOTIN: return v_bool(c, !contains(r, line, a, b));
    case OP_CONCAT: {
        size_t mark = scratch_begin(r);
        v_to_str(c, a, r->out);
        v_to_str(c, b, r->out);
        return scratch_end(r, mark);
    }
    case OP_ADD:
        if (is_intlike(a) && is_intlike(b)) {
            if (__builtin_add_overflow(as_i(a), as_i(b), &z)) tpl_fail(c, AI_ERR_RANGE, line, "integer overflow");
            return v_int(c, z);
        }
        if (is_number(a) && is_number(b)) return v_float(c, as_f(a) + as_f(b));
        if (a->t == V_STR && b->t == V_STR) {
            /* Markup + str escapes the plain side (markupsafe's __add__/__radd__) */
            bool safe = a->safe || b->safe;
            if (safe && !a->safe) a = html_escape(r, a);
            if (safe && !b->safe) b = html_escape(r, b);
            size_t mark = scratch_begin(r);
            buf_append(r->out, a->u.str.s, a->u.str.n);
            buf_append(r->out, b->u.str.s, b->u.str.n);
            value *v = scratch_end(r, mark);
            v->safe = safe;
            return v;
        }
        if (a->t == V_LIST && b->t == V_LIST && a->tuple == b->tuple) {
            value *l = v_list(c, a->u.list.n + b->u.list.n);
            l->tuple = a->tuple;
            for (size_t i = 0; i < a->u.list.n; i++) v_list_push(c, l, a->u.list.v[i]);
            for (size_t i = 0; i < b->u.list.n; i++) v_list_push(c, l, b->u.list.v[i]);
            return l;
        }
        type_error(r, line, op, a, b);
    case OP_SUB:
        if (is_intlike(a) && is_intlike(b)) {
            if (__builtin_sub_overflow(as_i(a), as_i(b), &z)) tpl_fail(c, AI_ERR_RANGE, line, "integer overflow");
            return v_int(c, z);
        }
        if (is_number(a) && is_number(b)) return v_float(c, as_f(a) - as_f(b));
        type_error(r, line, op, a, b);
    case OP_MUL:
        if (is_intlike(a) && is_intlike(b)) {
            if (__builtin_mul_overflow(as_i(a), as_i(b), &z)) tpl_fail(c, AI_ERR_RANGE, line, "integer overflow");
            return v_int(c, z);
        }
        if (is_number(a) && is_number(b)) return v_float(c, as_f(a) * as_f(b));
        if ((a->t == V_STR || a->t == V_LIST) && is_intlike(b)) return repeat(r, line, a, as_i(b));
        if ((b->t == V_STR || b->t == V_LIST) && is_intlike(a)) return repeat(r, line, b, as_i(a));
        type_error(r, line, op, a, b);
    case OP_DIV:
        if (!is_number(a) || !is_number(b)) type_error(r, line, op, a, b);
        if (as_f(b) == 0.0) tpl_fail(c, AI_ERR_RUNTIME, line, "division by zero");
        return v_float(c, as_f(a) / as_f(b));
    case OP_FLOORDIV: case OP_MOD:
        if (!is_number(a) || !is_number(b)) {
            if (op == OP_MOD && a->t == V_STR)
                tpl_fail(c, AI_ERR_UNSUPPORTED, line, "unsupported construct: printf-style '%%' string formatting");
            type_error(r, line, op, a, b);
        }
        if (is_intlike(a) && is_intlike(b)) {
            x = as_i(a);
            y = as_i(b);
            if (y == 0) tpl_fail(c, AI_ERR_RUNTIME, line, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) tpl_fail(c, AI_ERR_RANGE, line, "integer overflow");
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) { q--; m += y; }
            return v_int(c, op == OP_FLOORDIV ? q : m);
        } else {
            double fx = as_f(a), fy = as_f(b);
            if (fy == 0.0) tpl_fail(c, AI_ERR_RUNTIME, line, "float division by zero");
            double m = fmod(fx, fy);
            if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
            if (op == OP_MOD) return v_float(c, m);
            return v_float(c, floor((fx - m) / fy + 0.0));
        }
    case OP_POW:
        if (!is_number(a) || !is_number(b)) type_error(r, line, op, a, b);
        if (is_intlike(a) && is_intlike(b) && as_i(b) >= 0) {
            x = as_i(a);
            y = as_i(b);
            z = 1;
            while (y-- > 0)
                if (__builtin_mul_overflow(z, x, &z)) tpl_fail(c, AI_ERR_RANGE, line, "integer overflow");
            return v_int(c, z);
        }
        return v_float(c, pow(as_f(a), as_f(b)));
    }
    type_error(r, line, op, a, b);
}

// --- expressions

static value *eval_in(render_ctx *r, scope *sc, const node *n);

/* the arguments of an N_CALL/N_FILTER/N_TEST node (kids, then names = kw), names resolving in sc */
static call_args eval_args(render_ctx *r, scope *sc, const node *n)
{
    call_args a = {0};
    a.npos = n->nkids;
    if (n->nkids) a.pos = arena_alloc(&r->tc, n->nkids * sizeof(value *));
    for (size_t i = 0; i < n->nkids; i++) a.pos[i] = eval_in(r, sc, n->kids[i]);
    a.nkw = n->nnames;
    a.kwn = n->names;
    a.kwl = n->namelens;
    if (n->nnames) a.kwv = arena_alloc(&r->tc, n->nnames * sizeof(value *));
    for (size_t i = 0; i < n->nnames; i++) a.kwv[i] = eval_in(r, sc, n->kw[i]);
    return a;
}

static value *call_macro(render_ctx *r, int line, value *m, const call_args *a);
static value *lookup_name(render_ctx *r, scope *sc, const char *s, size_t n);

value *eval_expr(render_ctx *r, const node *n)
{
    tpl_ctx *c = &r->tc;
    value *v = NULL;
    deeper(r, n->line);
    switch (n->kind) {
    case N_STR: v = v_str_ref(c, n->s, n->n); break;
    case N_INT: v = v_int(c, n->i); break;
    case N_FLOAT: v = v_float(c, n->f); break;
    case N_BOOL: v = v_bool(c, n->op != 0); break;
    case N_NONE: v = v_none(c); break;
    case N_NAME: v = lookup_name(r, r->cur, n->s, n->n); break;
    case N_LIST: case N_TUPLE:
        v = v_list(c, n->nkids);
        v->tuple = n->kind == N_TUPLE;
        for (size_t i = 0; i < n->nkids; i++) v_list_push(c, v, eval_expr(r, n->kids[i]));
        break;
    case N_DICT:
        v = v_dict(c);
        for (size_t i = 0; i < n->nkids; i++) {
            value *k = eval_expr(r, n->kids[i]);
            if (k->t == V_LIST && !k->tuple) tpl_fail(c, AI_ERR_RUNTIME, n->line, "unhashable type: 'list'");
            if (k->t == V_DICT) tpl_fail(c, AI_ERR_RUNTIME, n->line, "unhashable type: 'dict'");
            v_dict_set(c, v, k, eval_expr(r, n->kw[i]));
        }
        break;
    case N_ATTR: v = get_attr(r, n->line, eval_expr(r, n->a), n->s, n->n); break;
    case N_SUBSCRIPT: {
        value *o = eval_expr(r, n->a);
        v = get_item(r, n->line, o, eval_expr(r, n->b));
        break;
    }
    case N_SLICE: {
        value *o = eval_expr(r, n->a);
        value *x = n->b ? eval_expr(r, n->b) : NULL, *y = n->c ? eval_expr(r, n->c) : NULL;
        value *z = n->d ? eval_expr(r, n->d) : NULL;
        v = do_slice(r, n->line, o, x, y, z);
        break;
    }
    case N_CALL: {
        value *fn = eval_expr(r, n->a);
        call_args a = eval_args(r, r->cur, n);
        v = call_value(r, n->line, fn, &a);
        break;
    }
    case N_FILTER: {
        value *t = eval_expr(r, n->a);
        call_args a = eval_args(r, r->cur, n);
        v = filter_apply(r, n, t, &a);
        break;
    }
    case N_TEST: {
        value *t = eval_expr(r, n->a);
        call_args a = eval_args(r, r->cur, n);
        bool ok = test_apply(r, n, t, a.pos, a.npos);
        v = v_bool(c, n->op ? !ok : ok);
        break;
    }
    case N_BINOP: {
        value *x = eval_expr(r, n->a);
        v = binop_eval(r, n->line, n->op, x, eval_expr(r, n->b));
        break;
    }
    case N_NEG: case N_POS: {
        value *x = eval_expr(r, n->a);
        if (x->t == V_UNDEF) undefined_error(r, n->line, x);
        if (!is_number(x))
            tpl_fail(c, AI_ERR_RUNTIME, n->line, "bad operand type for unary %c: '%s'", n->kind == N_NEG ? '-' : '+', v_type_name(x));
        if (n->kind == N_POS) v = x->t == V_BOOL ? v_int(c, x->u.b) : x;
        else if (x->t == V_FLOAT) v = v_float(c, -x->u.f);
        else {
            if (as_i(x) == INT64_MIN) tpl_fail(c, AI_ERR_RANGE, n->line, "integer overflow");
            v = v_int(c, -as_i(x));
        }
        break;
    }
    case N_NOT: v = v_bool(c, !v_truthy(eval_expr(r, n->a))); break;
    case N_AND: {
        value *x = eval_expr(r, n->a);
        v = v_truthy(x) ? eval_expr(r, n->b) : x;
        break;
    }
    case N_OR: {
        value *x = eval_expr(r, n->a);
        v = v_truthy(x) ? x : eval_expr(r, n->b);
        break;
    }
    case N_COND:
        if (v_truthy(eval_expr(r, n->b))) v = eval_expr(r, n->a);
        else v = n->c ? eval_expr(r, n->c) : v_undef(c, "inline if", 9);
        break;
    default:
        tpl_fail(c, AI_ERR_INVALID, n->line, "internal: node %d is not an expression", (int)n->kind);
    }
    r->depth--;
    return v;
}

// --- calls

static value *call_builtin(render_ctx *r, int line, builtin_fn fn, const call_args *a);

value *call_arg(const call_args *a, size_t i, const char *name)
{
    if (i < a->npos) return a->pos[i];
    if (name)
        for (size_t k = 0; k < a->nkw; k++)
            if (name_is(a->kwn[k], a->kwl[k], name)) return a->kwv[k];
    return NULL;
}

value *call_value(render_ctx *r, int line, value *fn, const call_args *args)
{
    switch (fn->t) {
    case V_FUNC: return call_builtin(r, line, fn->u.fn, args);
    case V_MACRO: return call_macro(r, line, fn, args);
    case V_METHOD: return method_call(r, line, fn->u.method.self, fn->u.method.name, fn->u.method.n, args);
    case V_UNDEF: undefined_error(r, line, fn);
    default: tpl_fail(&r->tc, AI_ERR_RUNTIME, line, "'%s' object is not callable", v_type_name(fn));
    }
}

static value *call_macro(render_ctx *r, int line, value *m, const call_args *a)
{
    tpl_ctx *c = &r->tc;
    const node *def = m->u.macro.def;
    scope *sc = scope_new(r, (scope *)m->u.macro.closure);
    if (def->kind == N_MACRO) {
        if (a->npos > def->nnames)
            tpl_fail(c, AI_ERR_RUNTIME, line, "macro '%.*s' takes not more than %zu argument(s)", (int)def->n, def->s, def->nnames);
        value **bound = arena_alloc(c, (def->nnames + 1) * sizeof *bound);
        for (size_t i = 0; i < a->npos; i++) bound[i] = a->pos[i];
        for (size_t k = 0; k < a->nkw; k++) {
            size_t i = 0;
            while (i < def->nnames && !(def->namelens[i] == a->kwl[k] && memcmp(def->names[i], a->kwn[k], a->kwl[k]) == 0)) i++;
            if (i == def->nnames) {
                if (name_is(a->kwn[k], a->kwl[k], "caller")) { scope_set(r, sc, "caller", 6, a->kwv[k]); continue; }
                tpl_fail(c, AI_ERR_RUNTIME, line, "macro '%.*s' takes no keyword argument '%.*s'", (int)def->n, def->s,
                         (int)a->kwl[k], a->kwn[k]);
            }
            bound[i] = a->kwv[k];
        }
        for (size_t i = 0; i < def->nnames; i++) {
            value *v = bound[i];
            if (!v) v = def->kw[i] ? eval_in(r, sc, def->kw[i]) : v_undef(c, def->names[i], def->namelens[i]);
            scope_set(r, sc, def->names[i], def->namelens[i], v);
        }
        if (m->u.macro.caller) scope_set(r, sc, "caller", 6, m->u.macro.caller);
    } else if (a->npos || a->nkw) {
        tpl_fail(c, AI_ERR_UNSUPPORTED, line, "unsupported construct: arguments to caller()");
    }
    deeper(r, line);
    size_t mark = scratch_begin(r);
    exec_body(r, sc, def->c);
    r->depth--;
    return scratch_end(r, mark);
}

static int64_t int_arg(render_ctx *r, int line, value *v, const char *what)
{
    if (v->t == V_INT) return v->u.i;
    if (v->t == V_BOOL) return v->u.b;
    tpl_fail(&r->tc, AI_ERR_RUNTIME, line, "%s: '%s' object cannot be interpreted as an integer", what, v_type_name(v));
}

static value *call_builtin(render_ctx *r, int line, builtin_fn fn, const call_args *a)
{
    tpl_ctx *c = &r->tc;
    switch (fn) {
    case F_RANGE: {
        if (a->nkw || a->npos < 1 || a->npos > 3) tpl_fail(c, AI_ERR_RUNTIME, line, "range expected 1 to 3 arguments");
        int64_t lo = 0, hi, st = 1;
        if (a->npos == 1) hi = int_arg(r, line, a->pos[0], "range");
        else {
            lo = int_arg(r, line, a->pos[0], "range");
            hi = int_arg(r, line, a->pos[1], "range");
            if (a->npos == 3) st = int_arg(r, line, a->pos[2], "range");
        }
        if (st == 0) tpl_fail(c, AI_ERR_RUNTIME, line, "range() arg 3 must not be zero");
        double cnt = st > 0 ? ceil(((double)hi - (double)lo) / (double)st) : ceil(((double)lo - (double)hi) / (double)-st);
        if (cnt > 100000) tpl_fail(c, AI_ERR_RANGE, line, "range too big (more than 100000 items)");
        value *l = v_list(c, cnt > 0 ? (size_t)cnt : 0);
        for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) v_list_push(c, l, v_int(c, i));
        return l;
    }
    case F_NAMESPACE: case F_DICT: {
        value *d = v_new(c, fn == F_NAMESPACE ? V_NS : V_DICT);
        if (a->npos > 1) tpl_fail(c, AI_ERR_RUNTIME, line, "%s expected at most 1 positional argument",
                                  fn == F_NAMESPACE ? "namespace" : "dict");
        if (a->npos == 1) {
            value *src = a->pos[0];
            if (src->t == V_DICT || src->t == V_NS) {
                for (size_t i = 0; i < src->u.dict.n; i++) v_dict_set(c, d, src->u.dict.k[i], src->u.dict.v[i]);
            } else {
                value *it = v_iterate(r, line, src);
                for (size_t i = 0; i < it->u.list.n; i++) {
                    value *pair = it->u.list.v[i];
                    if (pair->t != V_LIST || pair->u.list.n != 2)
                        tpl_fail(c, AI_ERR_RUNTIME, line, "dictionary update sequence element #%zu has the wrong shape", i);
                    v_dict_set(c, d, pair->u.list.v[0], pair->u.list.v[1]);
                }
            }
        }
        for (size_t k = 0; k < a->nkw; k++) {
            if (fn == F_NAMESPACE && a->kwl[k] && a->kwn[k][0] == '_')
                tpl_fail(c, AI_ERR_RUNTIME, line, "Chat templates cannot store underscore-prefixed attributes on a namespace");
            v_dict_set(c, d, v_str_ref(c, a->kwn[k], a->kwl[k]), a->kwv[k]);
        }
        return d;
    }
    case F_RAISE: {
        size_t mark = scratch_begin(r);
        if (a->npos) v_to_str(c, a->pos[0], r->out);
        value *m = scratch_end(r, mark);
        tpl_fail(c, AI_ERR_RUNTIME, line, "raise_exception: %.*s", (int)(m->u.str.n > 300 ? 300 : m->u.str.n), m->u.str.s);
    }
    case F_STRFTIME: {
        if (a->npos != 1 || a->pos[0]->t != V_STR) tpl_fail(c, AI_ERR_RUNTIME, line, "strftime_now expects one format string");
        char fmt[256], outs[512];
        size_t n = a->pos[0]->u.str.n;
        if (n >= sizeof fmt) tpl_fail(c, AI_ERR_RANGE, line, "strftime_now format too long");
        memcpy(fmt, a->pos[0]->u.str.s, n);
        fmt[n] = '\0';
        time_t t = (time_t)r->now;
        struct tm tmv;
        if (!localtime_r(&t, &tmv)) tpl_fail(c, AI_ERR_RUNTIME, line, "strftime_now: bad time");
        size_t k = n ? strftime(outs, sizeof outs, fmt, &tmv) : 0;
        if (n && k == 0) outs[0] = '\0';
        return v_str(c, outs, k);
    }
    default:
        tpl_fail(c, AI_ERR_INVALID, line, "internal: bad builtin");
    }
}

// --- statements

static value *lookup_name(render_ctx *r, scope *sc, const char *s, size_t n)
{
    value *v = scope_get(sc, s, n);
    if (v) return v;
    static const struct { const char *name; builtin_fn fn; } B[] = {
        { "range", F_RANGE }, { "namespace", F_NAMESPACE }, { "dict", F_DICT },
        { "raise_exception", F_RAISE }, { "strftime_now", F_STRFTIME },
    };
    for (size_t i = 0; i < sizeof B / sizeof B[0]; i++)
        if (name_is(s, n, B[i].name)) { v = v_new(&r->tc, V_FUNC); v->u.fn = B[i].fn; return v; }
    return v_undef(&r->tc, s, n);
}

/* evaluates n with names resolving in sc */
static value *eval_in(render_ctx *r, scope *sc, const node *n)
{
    scope *old = r->cur;
    r->cur = sc;
    value *v = eval_expr(r, n);
    r->cur = old;
    return v;
}

static void assign_targets(render_ctx *r, scope *sc, const node *n, value *v)
{
    if (n->nnames == 1) { scope_set(r, sc, n->names[0], n->namelens[0], v); return; }
    value *it = v_iterate(r, n->line, v);
    if (it->u.list.n != n->nnames)
        tpl_fail(&r->tc, AI_ERR_RUNTIME, n->line, "cannot unpack %zu values into %zu names", it->u.list.n, n->nnames);
    for (size_t i = 0; i < n->nnames; i++) scope_set(r, sc, n->names[i], n->namelens[i], it->u.list.v[i]);
}

static value *apply_filter_chain(render_ctx *r, scope *sc, const node *chain, value *v)
{
    for (size_t i = 0; i < chain->nkids; i++) {
        const node *f = chain->kids[i];
        call_args a = eval_args(r, sc, f);
        v = filter_apply(r, f, v, &a);
    }
    return v;
}

static flow exec_stmt(render_ctx *r, scope *sc, const node *n)
{
    tpl_ctx *c = &r->tc;
    switch (n->kind) {
    case N_TEXT:
        buf_append(r->out, n->s, n->n);
        out_check(r, n->line);
        return FLOW_NORMAL;
    case N_OUTPUT:
        v_to_str(c, eval_in(r, sc, n->a), r->out);
        out_check(r, n->line);
        return FLOW_NORMAL;
    case N_BODY: return exec_body(r, sc, n);
    case N_IF:
        if (v_truthy(eval_in(r, sc, n->a))) return exec_body(r, sc, n->b);
        if (n->c) return n->c->kind == N_IF ? exec_stmt(r, sc, n->c) : exec_body(r, sc, n->c);
        return FLOW_NORMAL;
    case N_FOR: {
        value *src = v_iterate(r, n->line, eval_in(r, sc, n->a));
        value *items = src;
        if (n->b) {
            items = v_list(c, src->u.list.n);
            for (size_t i = 0; i < src->u.list.n; i++) {
                scope *fs = scope_new(r, sc);
                assign_targets(r, fs, n, src->u.list.v[i]);
                if (v_truthy(eval_in(r, fs, n->b))) v_list_push(c, items, src->u.list.v[i]);
            }
        }
        size_t len = items->u.list.n;
        if (len == 0) return n->d ? exec_body(r, sc, n->d) : FLOW_NORMAL;
        loop_state *ls = arena_alloc(c, sizeof *ls);
        ls->length = (int64_t)len;
        ls->items = items->u.list.v;
        value *lv = v_new(c, V_LOOP);
        lv->u.loop = ls;
        for (size_t i = 0; i < len; i++) {
            if (++r->iterations > TPL_MAX_ITER)
                tpl_fail(c, AI_ERR_RANGE, n->line, "more than %d loop iterations", TPL_MAX_ITER);
            ls->index0 = (int64_t)i;
            scope *is = scope_new(r, sc);
            scope_set(r, is, "loop", 4, lv);
            assign_targets(r, is, n, items->u.list.v[i]);
            if (exec_body(r, is, n->c) == FLOW_BREAK) break;
        }
        return FLOW_NORMAL;
    }
    case N_SET: assign_targets(r, sc, n, eval_in(r, sc, n->a)); return FLOW_NORMAL;
    case N_SETATTR: {
        value *ns = scope_get(sc, n->s, n->n);
        if (!ns || ns->t != V_NS)
            tpl_fail(c, AI_ERR_RUNTIME, n->line, "cannot assign attribute on non-namespace object '%.*s'", (int)n->n, n->s);
        if (n->namelens[0] && n->names[0][0] == '_')
            tpl_fail(c, AI_ERR_RUNTIME, n->line, "Chat templates cannot store underscore-prefixed attributes on a namespace");
        v_dict_set(c, ns, v_str_ref(c, n->names[0], n->namelens[0]), eval_in(r, sc, n->a));
        return FLOW_NORMAL;
    }
    case N_SETBLOCK: {
        size_t mark = scratch_begin(r);
        exec_body(r, sc, n->c);
        value *v = scratch_end(r, mark);
        if (n->nkids) v = apply_filter_chain(r, sc, n, v);
        scope_set(r, sc, n->names[0], n->namelens[0], v);
        return FLOW_NORMAL;
    }
    case N_FILTERBLOCK: {
        size_t mark = scratch_begin(r);
        exec_body(r, sc, n->c);
        value *v = apply_filter_chain(r, sc, n, scratch_end(r, mark));
        v_to_str(c, v, r->out);
        out_check(r, n->line);
        return FLOW_NORMAL;
    }
    case N_MACRO: {
        value *m = v_new(c, V_MACRO);
        m->u.macro.def = n;
        m->u.macro.closure = sc;
        scope_set(r, sc, n->s, n->n, m);
        return FLOW_NORMAL;
    }
    case N_CALLBLOCK: {
        value *caller = v_new(c, V_MACRO);
        caller->u.macro.def = n;
        caller->u.macro.closure = sc;
        const node *call = n->a;
        value *fn = eval_in(r, sc, call->a);
        if (fn->t != V_MACRO) tpl_fail(c, AI_ERR_RUNTIME, n->line, "'call' block needs a macro");
        value *fn2 = v_new(c, V_MACRO);
        *fn2 = *fn;
        fn2->u.macro.caller = caller;
        scope *old = r->cur;
        r->cur = sc;
        call_args a = eval_args(r, sc, call);
        value *res = call_value(r, n->line, fn2, &a);
        r->cur = old;
        v_to_str(c, res, r->out);
        out_check(r, n->line);
        return FLOW_NORMAL;
    }
    case N_GENERATION: return exec_body(r, sc, n->c);
    case N_BREAK: return FLOW_BREAK;
    case N_CONTINUE: return FLOW_CONTINUE;
    default:
        tpl_fail(c, AI_ERR_INVALID, n->line, "internal: node %d is not a statement", (int)n->kind);
    }
}

static flow exec_body(render_ctx *r, scope *sc, const node *body)
{
    deeper(r, body->line);
    for (size_t i = 0; i < body->nkids; i++) {
        flow f = exec_stmt(r, sc, body->kids[i]);
        if (f != FLOW_NORMAL) { r->depth--; return f; }
    }
    r->depth--;
    return FLOW_NORMAL;
}

/* entry for template.c: renders the root body in a fresh top-level scope holding vars */
void eval_render(render_ctx *r, const node *root, value *vars)
{
    scope *g = scope_new(r, NULL);
    g->vars = vars;
    r->globals = g;
    r->cur = g;
    exec_body(r, g, root);
}
