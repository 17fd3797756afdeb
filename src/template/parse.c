/* parse.c - recursive-descent parser from tokens to the AST, following Jinja2's grammar.
 *
 * Expression precedence, loosest first (as in jinja2/parser.py):
 *   x if c else y  <  or  <  and  <  not  <  comparisons, in, not in
 *   <  + -  <  ~  <  * / // %  <  **  <  unary - +  <  primary with .attr [sub] (call)
 *   followed by |filter and `is test` chains.
 * Node fields per kind: N_ATTR a.s; N_SUBSCRIPT a[b]; N_SLICE a[b:c:d] (NULL = omitted);
 * N_CALL a(kids, names=kw); N_FILTER s(a, kids, names=kw); N_TEST a is [not] s(kids);
 * N_BINOP a op b; N_COND a if b else c; N_IF if a: b else c; N_FOR names in a if b: c else d;
 * N_SET names = a; N_SETATTR s.names[0] = a; N_SETBLOCK names = body c | filters in kids;
 * N_MACRO s(names = kw defaults) body c; N_FILTERBLOCK filters kids, body c.
 * Unknown statements fail here. Unknown filters and tests fail when evaluated, as in Jinja2 3.x,
 * where a filter inside code that never runs (e.g. an untaken if) is not an error.
 */
#include <stdio.h>
#include <string.h>

#include "template/tpl.h"

typedef struct parser {
    tpl_ctx *c;
    const token *t;
    size_t n, i;
    int depth;
} parser;

static const token *cur(parser *p) { return &p->t[p->i]; }
static const token *peek(parser *p, size_t k) { return p->i + k < p->n ? &p->t[p->i + k] : &p->t[p->n - 1]; }
static void adv(parser *p) { if (p->i + 1 < p->n) p->i++; }

static bool is_op(const token *t, const char *op) { return t->type == T_OP && name_is(t->s, t->n, op); }
static bool is_name(const token *t, const char *nm) { return t->type == T_NAME && name_is(t->s, t->n, nm); }

static const char *tok_desc(const token *t)
{
    switch (t->type) {
    case T_EOF: return "end of template";
    case T_DATA: return "text";
    case T_VAR_BEGIN: return "'{{'";
    case T_VAR_END: return "'}}'";
    case T_BLOCK_BEGIN: return "'{%'";
    case T_BLOCK_END: return "'%}'";
    case T_NAME: return "name";
    case T_STRING: return "string";
    case T_INT: case T_FLOAT: return "number";
    default: return "operator";
    }
}

_Noreturn static void unexpected(parser *p, const char *want)
{
    const token *t = cur(p);
    if (t->type == T_NAME || t->type == T_OP)
        tpl_fail(p->c, AI_ERR_FORMAT, t->line, "expected %s, got '%.*s'", want, (int)t->n, t->s);
    tpl_fail(p->c, AI_ERR_FORMAT, t->line, "expected %s, got %s", want, tok_desc(t));
}

static void expect_op(parser *p, const char *op)
{
    if (!is_op(cur(p), op)) {
        char w[16];
        w[0] = '\'';
        size_t k = strlen(op);
        memcpy(w + 1, op, k);
        w[k + 1] = '\'';
        w[k + 2] = '\0';
        unexpected(p, w);
    }
    adv(p);
}

static void expect_type(parser *p, tok_type ty, const char *want)
{
    if (cur(p)->type != ty) unexpected(p, want);
    adv(p);
}

static node *mk(parser *p, node_kind k, int line)
{
    node *n = arena_alloc(p->c, sizeof *n);
    n->kind = k;
    n->line = line;
    return n;
}

/* growable node arrays during parse */
typedef struct nvec { node **v; size_t n, cap; } nvec;
static void nv_push(parser *p, nvec *v, node *x)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 8;
        node **nn = arena_alloc(p->c, cap * sizeof *nn);
        if (v->n) memcpy(nn, v->v, v->n * sizeof *nn);
        v->v = nn;
        v->cap = cap;
    }
    v->v[v->n++] = x;
}
typedef struct svec { const char **v; size_t *l; size_t n, cap; } svec;
static void sv_push(parser *p, svec *v, const char *s, size_t n)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 8;
        const char **nn = arena_alloc(p->c, cap * sizeof *nn);
        size_t *nl = arena_alloc(p->c, cap * sizeof *nl);
        if (v->n) { memcpy(nn, v->v, v->n * sizeof *nn); memcpy(nl, v->l, v->n * sizeof *nl); }
        v->v = nn;
        v->l = nl;
        v->cap = cap;
    }
    v->v[v->n] = s;
    v->l[v->n++] = n;
}

static node *parse_expr(parser *p);
static node *parse_or(parser *p);
static node *parse_unary(parser *p, bool with_filter);

static void enter(parser *p, int line)
{
    if (++p->depth > TPL_MAX_DEPTH) tpl_fail(p->c, AI_ERR_RANGE, line, "nesting deeper than %d", TPL_MAX_DEPTH);
}

/* (args) after a callee/filter/test: positional and keyword arguments */
static void parse_args(parser *p, node *n)
{
    nvec pos = {0}, kw = {0};
    svec names = {0};
    expect_op(p, "(");
    while (!is_op(cur(p), ")")) {
        if (pos.n + kw.n) expect_op(p, ",");
        if (is_op(cur(p), ")")) break;
        if (is_op(cur(p), "*")) tpl_fail(p->c, AI_ERR_UNSUPPORTED, cur(p)->line, "unsupported construct '*args' in call");
        if (cur(p)->type == T_NAME && is_op(peek(p, 1), "=")) {
            sv_push(p, &names, cur(p)->s, cur(p)->n);
            adv(p);
            adv(p);
            nv_push(p, &kw, parse_expr(p));
        } else {
            if (kw.n) tpl_fail(p->c, AI_ERR_FORMAT, cur(p)->line, "positional argument after keyword argument");
            nv_push(p, &pos, parse_expr(p));
        }
    }
    adv(p);
    n->kids = pos.v;
    n->nkids = pos.n;
    n->kw = kw.v;
    n->names = names.v;
    n->namelens = names.l;
    n->nnames = names.n;
}

static node *parse_primary(parser *p)
{
    const token *t = cur(p);
    node *n;
    switch (t->type) {
    case T_NAME:
        adv(p);
        if (is_name(t, "true") || is_name(t, "True")) { n = mk(p, N_BOOL, t->line); n->op = 1; return n; }
        if (is_name(t, "false") || is_name(t, "False")) { n = mk(p, N_BOOL, t->line); n->op = 0; return n; }
        if (is_name(t, "none") || is_name(t, "None")) return mk(p, N_NONE, t->line);
        n = mk(p, N_NAME, t->line);
        n->s = t->s;
        n->n = t->n;
        return n;
    case T_STRING: {
        /* adjacent literals concatenate */
        size_t total = 0, j = p->i;
        while (p->t[j].type == T_STRING) total += p->t[j++].n;
        n = mk(p, N_STR, t->line);
        char *s = arena_alloc(p->c, total + 1);
        size_t k = 0;
        while (cur(p)->type == T_STRING) { memcpy(s + k, cur(p)->s, cur(p)->n); k += cur(p)->n; adv(p); }
        n->s = s;
        n->n = total;
        return n;
    }
    case T_INT: n = mk(p, N_INT, t->line); n->i = t->i; adv(p); return n;
    case T_FLOAT: n = mk(p, N_FLOAT, t->line); n->f = t->f; adv(p); return n;
    case T_OP:
        if (is_op(t, "(")) {
            adv(p);
            if (is_op(cur(p), ")")) { adv(p); return mk(p, N_TUPLE, t->line); }
            node *e = parse_expr(p);
            if (!is_op(cur(p), ",")) { expect_op(p, ")"); return e; }
            nvec items = {0};
            nv_push(p, &items, e);
            while (is_op(cur(p), ",")) {
                adv(p);
                if (is_op(cur(p), ")")) break;
                nv_push(p, &items, parse_expr(p));
            }
            expect_op(p, ")");
            n = mk(p, N_TUPLE, t->line);
            n->kids = items.v;
            n->nkids = items.n;
            return n;
        }
        if (is_op(t, "[")) {
            adv(p);
            nvec items = {0};
            while (!is_op(cur(p), "]")) {
                if (items.n) expect_op(p, ",");
                if (is_op(cur(p), "]")) break;
                nv_push(p, &items, parse_expr(p));
            }
            adv(p);
            n = mk(p, N_LIST, t->line);
            n->kids = items.v;
            n->nkids = items.n;
            return n;
        }
        if (is_op(t, "{")) {
            adv(p);
            nvec keys = {0}, vals = {0};
            while (!is_op(cur(p), "}")) {
                if (keys.n) expect_op(p, ",");
                if (is_op(cur(p), "}")) break;
                nv_push(p, &keys, parse_expr(p));
                expect_op(p, ":");
                nv_push(p, &vals, parse_expr(p));
            }
            adv(p);
            n = mk(p, N_DICT, t->line);
            n->kids = keys.v;
            n->nkids = keys.n;
            n->kw = vals.v;
            return n;
        }
        break;
    default: break;
    }
    unexpected(p, "an expression");
}

static node *parse_postfix(parser *p, node *n)
{
    for (;;) {
        const token *t = cur(p);
        if (is_op(t, ".")) {
            adv(p);
            const token *a = cur(p);
            if (a->type == T_NAME) {
                node *x = mk(p, N_ATTR, a->line);
                x->a = n;
                x->s = a->s;
                x->n = a->n;
                adv(p);
                n = x;
            } else if (a->type == T_INT) {
                node *x = mk(p, N_SUBSCRIPT, a->line);
                x->a = n;
                x->b = mk(p, N_INT, a->line);
                x->b->i = a->i;
                adv(p);
                n = x;
            } else unexpected(p, "attribute name");
        } else if (is_op(t, "[")) {
            adv(p);
            node *parts[3] = { NULL, NULL, NULL };
            int k = 0;
            bool slice = false;
            for (;;) {
                if (is_op(cur(p), ":")) {
                    slice = true;
                    if (++k > 2) unexpected(p, "']'");
                    adv(p);
                    continue;
                }
                if (is_op(cur(p), "]")) break;
                if (parts[k]) unexpected(p, "']'");
                parts[k] = parse_expr(p);
            }
            adv(p);
            node *x = mk(p, slice ? N_SLICE : N_SUBSCRIPT, t->line);
            x->a = n;
            x->b = parts[0];
            x->c = parts[1];
            x->d = parts[2];
            if (!slice && !parts[0]) tpl_fail(p->c, AI_ERR_FORMAT, t->line, "empty subscript");
            n = x;
        } else if (is_op(t, "(")) {
            node *x = mk(p, N_CALL, t->line);
            x->a = n;
            parse_args(p, x);
            n = x;
        } else return n;
    }
}

static bool starts_test_arg(const token *t)
{
    if (t->type == T_NAME)
        return !(is_name(t, "else") || is_name(t, "or") || is_name(t, "and") || is_name(t, "in") ||
                 is_name(t, "if") || is_name(t, "is") || is_name(t, "not"));
    return t->type == T_STRING || t->type == T_INT || t->type == T_FLOAT ||
           is_op(t, "[") || is_op(t, "{") || is_op(t, "-");
}

static node *parse_filters(parser *p, node *n)
{
    for (;;) {
        const token *t = cur(p);
        if (is_op(t, "|")) {
            adv(p);
            const token *f = cur(p);
            if (f->type != T_NAME) unexpected(p, "filter name");
            node *x = mk(p, N_FILTER, f->line);
            x->a = n;
            x->s = f->s;
            x->n = f->n;
            adv(p);
            if (is_op(cur(p), "(")) parse_args(p, x);
            n = x;
        } else if (is_name(t, "is")) {
            adv(p);
            node *x = mk(p, N_TEST, t->line);
            if (is_name(cur(p), "not")) { x->op = 1; adv(p); }
            const token *f = cur(p);
            if (f->type != T_NAME && !is_op(f, "==") && !is_op(f, "!=") && !is_op(f, "<") && !is_op(f, ">") &&
                !is_op(f, "<=") && !is_op(f, ">="))
                unexpected(p, "test name");
            if (f->type == T_NAME && (is_name(f, "none") || is_name(f, "true") || is_name(f, "false"))) { /* ok */ }
            x->a = n;
            x->s = f->s;
            x->n = f->n;
            adv(p);
            if (is_op(cur(p), "(")) parse_args(p, x);
            else if (starts_test_arg(cur(p))) {
                node *arg = parse_unary(p, false);
                arg = parse_postfix(p, arg);
                x->kids = arena_alloc(p->c, sizeof(node *));
                x->kids[0] = arg;
                x->nkids = 1;
            }
            n = x;
        } else return n;
    }
}

static node *parse_unary(parser *p, bool with_filter)
{
    const token *t = cur(p);
    node *n;
    enter(p, t->line);
    if (is_op(t, "-") || is_op(t, "+")) {
        adv(p);
        n = mk(p, is_op(t, "-") ? N_NEG : N_POS, t->line);
        n->a = parse_unary(p, false);
    } else {
        n = parse_postfix(p, parse_primary(p));
    }
    if (with_filter) n = parse_filters(p, n);
    p->depth--;
    return n;
}

static node *mk_binop(parser *p, int line, int op, node *a, node *b)
{
    node *n = mk(p, N_BINOP, line);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static node *parse_pow(parser *p)
{
    node *n = parse_unary(p, true);
    while (is_op(cur(p), "**")) {
        int line = cur(p)->line;
        adv(p);
        n = mk_binop(p, line, OP_POW, n, parse_unary(p, true));
    }
    return n;
}

static node *parse_math2(parser *p)
{
    node *n = parse_pow(p);
    for (;;) {
        const token *t = cur(p);
        int op = is_op(t, "*") ? OP_MUL : is_op(t, "/") ? OP_DIV : is_op(t, "//") ? OP_FLOORDIV :
                 is_op(t, "%") ? OP_MOD : -1;
        if (op < 0) return n;
        adv(p);
        n = mk_binop(p, t->line, op, n, parse_pow(p));
    }
}

static node *parse_concat(parser *p)
{
    node *n = parse_math2(p);
    while (is_op(cur(p), "~")) {
        int line = cur(p)->line;
        adv(p);
        n = mk_binop(p, line, OP_CONCAT, n, parse_math2(p));
    }
    return n;
}

static node *parse_math1(parser *p)
{
    node *n = parse_concat(p);
    for (;;) {
        const token *t = cur(p);
        int op = is_op(t, "+") ? OP_ADD : is_op(t, "-") ? OP_SUB : -1;
        if (op < 0) return n;
        adv(p);
        n = mk_binop(p, t->line, op, n, parse_concat(p));
    }
}

static node *parse_compare(parser *p)
{
    node *n = parse_math1(p);
    for (;;) {
        const token *t = cur(p);
        int op = is_op(t, "==") ? OP_EQ : is_op(t, "!=") ? OP_NE : is_op(t, "<") ? OP_LT :
                 is_op(t, "<=") ? OP_LE : is_op(t, ">") ? OP_GT : is_op(t, ">=") ? OP_GE :
                 is_name(t, "in") ? OP_IN : -1;
        if (op < 0 && is_name(t, "not") && is_name(peek(p, 1), "in")) { op = OP_NOTIN; adv(p); }
        if (op < 0) return n;
        adv(p);
        n = mk_binop(p, t->line, op, n, parse_math1(p));
    }
}

static node *parse_not(parser *p)
{
    if (is_name(cur(p), "not")) {
        const token *t = cur(p);
        adv(p);
        enter(p, t->line);
        node *n = mk(p, N_NOT, t->line);
        n->a = parse_not(p);
        p->depth--;
        return n;
    }
    return parse_compare(p);
}

/* left-associative chain `x kw y kw z` of one boolean keyword, operands parsed by sub */
static node *parse_bool_chain(parser *p, const char *kw, node_kind kind, node *(*sub)(parser *))
{
    node *n = sub(p);
    while (is_name(cur(p), kw)) {
        node *x = mk(p, kind, cur(p)->line);
        adv(p);
        x->a = n;
        x->b = sub(p);
        n = x;
    }
    return n;
}

static node *parse_and(parser *p) { return parse_bool_chain(p, "and", N_AND, parse_not); }
static node *parse_or(parser *p) { return parse_bool_chain(p, "or", N_OR, parse_and); }

static node *parse_expr(parser *p)
{
    enter(p, cur(p)->line);
    node *n = parse_or(p);
    while (is_name(cur(p), "if")) {
        node *x = mk(p, N_COND, cur(p)->line);
        adv(p);
        x->a = n;
        x->b = parse_or(p);
        if (is_name(cur(p), "else")) { adv(p); x->c = parse_expr(p); }
        n = x;
    }
    p->depth--;
    return n;
}

// --- statements

static node *parse_body(parser *p, const char *const *ends);

static bool at_block(parser *p, const char *const *names)
{
    if (cur(p)->type != T_BLOCK_BEGIN) return false;
    const token *t = peek(p, 1);
    for (int k = 0; names[k]; k++) if (is_name(t, names[k])) return true;
    return false;
}

static void end_block(parser *p) { expect_type(p, T_BLOCK_END, "'%}'"); }

/* the body of a block statement and its closing "{% end", up to (not including) the "%}" */
static node *parse_block_body(parser *p, const char *end)
{
    const char *const ends[] = { end, NULL };
    node *body = parse_body(p, ends);
    if (!at_block(p, ends)) {
        char w[32];
        snprintf(w, sizeof w, "'%s'", end);
        unexpected(p, w);
    }
    adv(p); adv(p);
    return body;
}

static const token *name_tok(parser *p)
{
    const token *t = cur(p);
    if (t->type != T_NAME) unexpected(p, "a name");
    adv(p);
    return t;
}

/* targets "a" or "a, b" (optionally parenthesised) */
static void parse_targets(parser *p, svec *names)
{
    bool paren = is_op(cur(p), "(");
    if (paren) adv(p);
    do {
        if (names->n) adv(p);
        const token *t = name_tok(p);
        sv_push(p, names, t->s, t->n);
    } while (is_op(cur(p), ","));
    if (paren) expect_op(p, ")");
}

static void set_names(node *n, svec *sv)
{
    n->names = sv->v;
    n->namelens = sv->l;
    n->nnames = sv->n;
}

/* a chain "f | g(x)" as used by {% filter %} and {% set x | f %}: N_FILTER nodes with a == NULL */
static void parse_filter_chain(parser *p, node *n)
{
    nvec fs = {0};
    do {
        if (fs.n) adv(p);
        const token *f = name_tok(p);
        node *x = mk(p, N_FILTER, f->line);
        x->s = f->s;
        x->n = f->n;
        if (is_op(cur(p), "(")) parse_args(p, x);
        nv_push(p, &fs, x);
    } while (is_op(cur(p), "|"));
    n->kids = fs.v;
    n->nkids = fs.n;
}

static node *parse_statement(parser *p)
{
    const token *bt = cur(p);
    adv(p); /* {% */
    const token *kw = cur(p);
    int line = kw->line;
    if (kw->type != T_NAME) unexpected(p, "statement name");
    adv(p);
    node *n;
    enter(p, line);
    if (is_name(kw, "if")) {
        n = mk(p, N_IF, line);
        n->a = parse_expr(p);
        end_block(p);
        static const char *const ends[] = { "elif", "else", "endif", NULL };
        n->b = parse_body(p, ends);
        node *tail = n;
        for (;;) {
            if (!at_block(p, ends)) unexpected(p, "'endif'");
            adv(p);
            const token *e = cur(p);
            adv(p);
            if (is_name(e, "elif")) {
                node *x = mk(p, N_IF, e->line);
                x->a = parse_expr(p);
                end_block(p);
                x->b = parse_body(p, ends);
                tail->c = x;
                tail = x;
            } else if (is_name(e, "else")) {
                end_block(p);
                static const char *const e2[] = { "endif", NULL };
                tail->c = parse_body(p, e2);
            } else { end_block(p); break; }
        }
    } else if (is_name(kw, "for")) {
        n = mk(p, N_FOR, line);
        svec names = {0};
        parse_targets(p, &names);
        set_names(n, &names);
        if (!is_name(cur(p), "in")) unexpected(p, "'in'");
        adv(p);
        n->a = parse_or(p);  /* not parse_expr: "if" here is the loop filter */
        if (is_name(cur(p), "if")) { adv(p); n->b = parse_expr(p); }
        if (is_name(cur(p), "recursive"))
            tpl_fail(p->c, AI_ERR_UNSUPPORTED, cur(p)->line, "unsupported construct 'recursive' loop");
        end_block(p);
        static const char *const ends[] = { "else", "endfor", NULL };
        n->c = parse_body(p, ends);
        if (!at_block(p, ends)) unexpected(p, "'endfor'");
        adv(p);
        bool is_else = is_name(cur(p), "else");
        adv(p);
        end_block(p);
        if (is_else) {
            n->d = parse_block_body(p, "endfor");
            end_block(p);
        }
    } else if (is_name(kw, "set")) {
        const token *t = name_tok(p);
        if (is_op(cur(p), ".")) {
            adv(p);
            const token *a = name_tok(p);
            n = mk(p, N_SETATTR, line);
            n->s = t->s;
            n->n = t->n;
            svec sv = {0};
            sv_push(p, &sv, a->s, a->n);
            set_names(n, &sv);
            expect_op(p, "=");
            n->a = parse_expr(p);
            end_block(p);
        } else {
            svec names = {0};
            sv_push(p, &names, t->s, t->n);
            while (is_op(cur(p), ",")) { adv(p); const token *x = name_tok(p); sv_push(p, &names, x->s, x->n); }
            if (is_op(cur(p), "=")) {
                adv(p);
                n = mk(p, N_SET, line);
                set_names(n, &names);
                node *e = parse_expr(p);
                if (is_op(cur(p), ",")) {  /* set a = 1, 2 -> tuple */
                    nvec items = {0};
                    nv_push(p, &items, e);
                    while (is_op(cur(p), ",")) { adv(p); nv_push(p, &items, parse_expr(p)); }
                    e = mk(p, N_TUPLE, line);
                    e->kids = items.v;
                    e->nkids = items.n;
                }
                n->a = e;
                end_block(p);
            } else {
                if (names.n != 1) unexpected(p, "'='");
                n = mk(p, N_SETBLOCK, line);
                set_names(n, &names);
                if (is_op(cur(p), "|")) { adv(p); parse_filter_chain(p, n); }
                end_block(p);
                n->c = parse_block_body(p, "endset");
                end_block(p);
            }
        }
    } else if (is_name(kw, "macro")) {
        const token *t = name_tok(p);
        n = mk(p, N_MACRO, line);
        n->s = t->s;
        n->n = t->n;
        svec names = {0};
        nvec defs = {0};
        expect_op(p, "(");
        while (!is_op(cur(p), ")")) {
            if (names.n) expect_op(p, ",");
            const token *a = name_tok(p);
            sv_push(p, &names, a->s, a->n);
            node *d = NULL;
            if (is_op(cur(p), "=")) { adv(p); d = parse_expr(p); }
            else if (defs.n && defs.v[defs.n - 1])
                tpl_fail(p->c, AI_ERR_FORMAT, a->line, "non-default argument follows default argument");
            nv_push(p, &defs, d);
        }
        adv(p);
        set_names(n, &names);
        n->kw = defs.v;
        end_block(p);
        n->c = parse_block_body(p, "endmacro");
        if (cur(p)->type == T_NAME) adv(p);
        end_block(p);
    } else if (is_name(kw, "break") || is_name(kw, "continue")) {
        n = mk(p, is_name(kw, "break") ? N_BREAK : N_CONTINUE, line);
        end_block(p);
    } else if (is_name(kw, "filter")) {
        n = mk(p, N_FILTERBLOCK, line);
        parse_filter_chain(p, n);
        end_block(p);
        n->c = parse_block_body(p, "endfilter");
        end_block(p);
    } else if (is_name(kw, "generation")) {
        n = mk(p, N_GENERATION, line);
        end_block(p);
        n->c = parse_block_body(p, "endgeneration");
        end_block(p);
    } else if (is_name(kw, "call")) {
        n = mk(p, N_CALLBLOCK, line);
        if (is_op(cur(p), "(")) tpl_fail(p->c, AI_ERR_UNSUPPORTED, line, "unsupported construct 'call' with caller arguments");
        n->a = parse_expr(p);
        if (n->a->kind != N_CALL) tpl_fail(p->c, AI_ERR_FORMAT, line, "'call' needs a macro call");
        end_block(p);
        n->c = parse_block_body(p, "endcall");
        end_block(p);
    } else if (is_name(kw, "endraw")) {
        n = mk(p, N_BODY, line);
        end_block(p);
    } else {
        (void)bt;
        tpl_fail(p->c, AI_ERR_UNSUPPORTED, line, "unsupported statement '%.*s'", (int)kw->n, kw->s);
    }
    p->depth--;
    return n;
}

static node *parse_body(parser *p, const char *const *ends)
{
    node *body = mk(p, N_BODY, cur(p)->line);
    nvec v = {0};
    for (;;) {
        const token *t = cur(p);
        if (t->type == T_EOF) {
            if (ends) {
                int k = 0;
                while (ends[k + 1]) k++;
                tpl_fail(p->c, AI_ERR_FORMAT, t->line, "unexpected end of template, expected '%s'", ends[k]);
            }
            break;
        }
        if (ends && at_block(p, ends)) break;
        if (t->type == T_DATA) {
            node *x = mk(p, N_TEXT, t->line);
            x->s = t->s;
            x->n = t->n;
            nv_push(p, &v, x);
            adv(p);
        } else if (t->type == T_VAR_BEGIN) {
            adv(p);
            node *x = mk(p, N_OUTPUT, t->line);
            x->a = parse_expr(p);
            expect_type(p, T_VAR_END, "'}}'");
            nv_push(p, &v, x);
        } else if (t->type == T_BLOCK_BEGIN) {
            const token *k = peek(p, 1);
            if (k->type == T_NAME && (name_is(k->s, 3, "end") || is_name(k, "else") || is_name(k, "elif")) &&
                !is_name(k, "endraw"))
                tpl_fail(p->c, AI_ERR_FORMAT, k->line, "unexpected '%.*s'", (int)k->n, k->s);
            nv_push(p, &v, parse_statement(p));
        } else unexpected(p, "text or a tag");
    }
    body->kids = v.v;
    body->nkids = v.n;
    return body;
}

node *tpl_parse(tpl_ctx *c, const token_list *toks)
{
    parser p = { c, toks->v, toks->n, 0, 0 };
    return parse_body(&p, NULL);
}
