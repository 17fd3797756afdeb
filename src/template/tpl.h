/* tpl.h - private types of the chat-template engine (a Jinja2 subset).
 *
 * Pipeline: source --lex.c--> tokens --parse.c--> AST (node) --eval.c--> output text.
 * Values (value.c) model Python objects closely enough that output is byte-identical to
 * transformers' Jinja2 rendering: str/int/float/bool/None, lists/tuples, insertion-ordered
 * dicts, Jinja's Undefined, namespaces, macros, bound methods and the loop object.
 *
 * Invariants:
 *  1. Every AST node and every string it references lives in the template's arena and is
 *     never written after parse: renders from several threads may share one template.
 *  2. Every value made during a render lives in that render's arena; there is no per-value
 *     free and no reference count. The arena is dropped as a whole when the render ends.
 *  3. Errors inside the lexer/parser/evaluator are raised with tpl_fail(), which fills the
 *     ai_err and longjmps back to the public entry point; only arena memory can be live at
 *     that point, so nothing leaks.
 *  4. Values are immutable once built, except namespaces (ns.x = ...), matching the
 *     ImmutableSandboxedEnvironment transformers uses (list.append etc. are errors there).
 */
#ifndef AIINFRA_TPL_H
#define AIINFRA_TPL_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "aiinfra/buf.h"
#include "aiinfra/status.h"

/* ---- limits (runaway input guards) */
#define TPL_MAX_DEPTH       200             /* parser/evaluator nesting */
#define TPL_MAX_OUTPUT      (64u << 20)     /* rendered bytes */
#define TPL_MAX_EVAL_DEPTH  1000            /* evaluator recursion (macros included) */
#define TPL_MAX_ITER        1000000         /* loop iterations per render */
#define TPL_MAX_ARENA       ((size_t)1 << 30) /* bytes of values per render */
#define TPL_MAX_SOURCE      (16u << 20)     /* template source bytes */

/* ---- arena */
typedef struct arena_chunk arena_chunk;
typedef struct arena {
    arena_chunk *head;
    size_t used_total;
    size_t limit;
} arena;

/* ---- failure context shared by lexer, parser and evaluator */
typedef struct tpl_ctx {
    jmp_buf jb;
    ai_err *err;
    arena *ar;
} tpl_ctx;

_Noreturn void tpl_fail(tpl_ctx *c, ai_status code, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void *arena_alloc(tpl_ctx *c, size_t n);           /* zeroed; fails (longjmp) over the limit */
char *arena_strdup(tpl_ctx *c, const char *s, size_t n);
void arena_free(arena *a);

/* ---- tokens */
typedef enum tok_type {
    T_EOF, T_DATA, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END,
    T_NAME, T_STRING, T_INT, T_FLOAT, T_OP
} tok_type;

typedef struct token {
    tok_type type;
    int line;
    const char *s;   /* T_DATA/T_NAME/T_STRING (unescaped)/T_OP text */
    size_t n;
    int64_t i;
    double f;
} token;

typedef struct token_list { token *v; size_t n, cap; } token_list;
void tpl_lex(tpl_ctx *c, const char *src, size_t len, token_list *out);

/* ---- AST */
typedef enum node_kind {
    /* expressions */
    N_STR, N_INT, N_FLOAT, N_BOOL, N_NONE, N_NAME, N_LIST, N_TUPLE, N_DICT,
    N_ATTR, N_SUBSCRIPT, N_SLICE, N_CALL, N_FILTER, N_TEST, N_BINOP, N_NEG, N_POS, N_NOT,
    N_AND, N_OR, N_COND,
    /* statements */
    N_BODY, N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_SETATTR, N_SETBLOCK, N_MACRO,
    N_BREAK, N_CONTINUE, N_FILTERBLOCK, N_GENERATION, N_CALLBLOCK
} node_kind;

typedef enum binop {
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN
} binop;

typedef struct node node;
struct node {
    node_kind kind;
    int line;
    int op;              /* binop; N_TEST: 1 = negated; N_BOOL: value */
    const char *s;       /* name / string / attribute / filter / test */
    size_t n;
    int64_t i;
    double f;
    node *a, *b, *c, *d; /* sub-nodes (see parse.c for each kind) */
    node **kids;         /* positional args / items / body statements */
    size_t nkids;
    node **kw;           /* keyword arg values (N_CALL/N_FILTER), dict values, macro defaults */
    const char **names;  /* keyword names, for/set targets, macro params */
    size_t *namelens;
    size_t nnames;       /* also = count of kw */
};

node *tpl_parse(tpl_ctx *c, const token_list *toks);

/* ---- values */
typedef enum vtype {
    V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_NS,
    V_FUNC, V_MACRO, V_METHOD, V_LOOP
} vtype;

typedef enum builtin_fn {
    F_RANGE, F_NAMESPACE, F_DICT, F_RAISE, F_STRFTIME, F_LOOP_CYCLE, F_CALLER
} builtin_fn;

typedef struct value value;
typedef struct loop_state loop_state;
struct value {
    vtype t;
    bool tuple;                                  /* V_LIST made from a tuple */
    bool gen;                                    /* V_LIST standing for a Jinja generator (map/select) */
    bool safe;                                   /* V_STR that is Markup (|safe, |escape) */
    union {
        bool b;
        int64_t i;
        double f;
        struct { const char *s; size_t n; } str;  /* V_STR; V_UNDEF: the missing name */
        struct { value **v; size_t n, cap; } list;
        struct { value **k, **v; size_t n, cap; } dict;  /* V_DICT and V_NS */
        builtin_fn fn;
        struct { const node *def; value *caller; void *closure; } macro;
        struct { value *self; const char *name; size_t n; } method;
        loop_state *loop;
    } u;
};

struct loop_state {
    int64_t index0, length;
    value **items;
};

value *v_new(tpl_ctx *c, vtype t);
value *v_undef(tpl_ctx *c, const char *name, size_t n);
value *v_none(tpl_ctx *c);
value *v_bool(tpl_ctx *c, bool b);
value *v_int(tpl_ctx *c, int64_t i);
value *v_float(tpl_ctx *c, double f);
value *v_str(tpl_ctx *c, const char *s, size_t n);      /* copies */
value *v_str_ref(tpl_ctx *c, const char *s, size_t n);  /* points to s (arena/AST memory) */
value *v_list(tpl_ctx *c, size_t cap);
value *v_dict(tpl_ctx *c);
void v_list_push(tpl_ctx *c, value *l, value *x);
void v_dict_set(tpl_ctx *c, value *d, value *k, value *x);
value *v_dict_get(const value *d, const char *k, size_t n);  /* NULL when absent */
value *v_dict_getv(const value *d, const value *k);
const char *v_type_name(const value *v);
bool v_truthy(const value *v);
bool v_equal(const value *a, const value *b);
/* <0, 0, >0; fails with a Python-like TypeError for unorderable types */
int v_compare(tpl_ctx *c, int line, const value *a, const value *b);

/* text forms (format.c) */
void v_to_str(tpl_ctx *c, const value *v, buf *out);         /* Python str() */
void v_repr(tpl_ctx *c, const value *v, buf *out);           /* Python repr() */
void fmt_float(double f, buf *out);                          /* Python repr(float) */
typedef struct json_opts { int indent; bool sort_keys; bool ensure_ascii;
                           const char *item_sep; const char *key_sep; } json_opts;
void v_to_json(tpl_ctx *c, int line, const value *v, const json_opts *o, buf *out);
value *v_as_str(tpl_ctx *c, const value *v);                 /* str() as a value */
size_t utf8_cp_count(const char *s, size_t n);
size_t utf8_cp_offset(const char *s, size_t n, size_t cp);  /* byte offset of code point cp */

/* ---- evaluator */
typedef struct scope scope;
typedef struct render_ctx {
    tpl_ctx tc;
    scope *globals;
    scope *cur;                /* the scope names resolve in */
    buf *out;
    int depth;
    int64_t iterations;
    int64_t now;               /* seconds since the epoch for strftime_now */
    size_t out_mark;           /* the caller's output length at entry (restored on error) */
} render_ctx;

/* temporary text built at the tail of the output buffer, then moved into the arena */
size_t scratch_begin(render_ctx *r);
value *scratch_end(render_ctx *r, size_t mark);
void out_check(render_ctx *r, int line);

/* the evaluated arguments of one call, filter or method: f(pos[0], ..., kwn[k]=kwv[k], ...).
 * Keyword names point into the AST (kwl[k] bytes each, not NUL-terminated). */
typedef struct call_args {
    value **pos;
    size_t npos;
    const char **kwn;
    size_t *kwl;
    value **kwv;
    size_t nkw;
} call_args;
/* positional argument i, else the keyword argument `name` (NULL: positional only), else NULL */
value *call_arg(const call_args *a, size_t i, const char *name);

value *eval_expr(render_ctx *r, const node *n);
void eval_render(render_ctx *r, const node *root, value *vars);
value *call_value(render_ctx *r, int line, value *fn, const call_args *args);
value *filter_apply(render_ctx *r, const node *n, value *target, const call_args *args);
bool filter_known(const char *name, size_t n);
value *html_escape(render_ctx *r, value *t);   /* markupsafe.escape, as a plain str */
bool test_apply(render_ctx *r, const node *n, value *target, value **args, size_t nargs);
bool test_known(const char *name, size_t n);
value *method_call(render_ctx *r, int line, value *self, const char *name, size_t nlen, const call_args *args);
bool method_exists(const value *self, const char *name, size_t n);
value *get_attr(render_ctx *r, int line, value *obj, const char *name, size_t n);
value *get_item(render_ctx *r, int line, value *obj, value *key);
/* iteration: a list of items (dict -> keys, str -> characters); fails for non-iterables */
value *v_iterate(render_ctx *r, int line, value *v);

static inline bool name_is(const char *s, size_t n, const char *lit)
{
    size_t i = 0;
    for (; i < n && lit[i]; i++) if (s[i] != lit[i]) return false;
    return i == n && lit[i] == '\0';
}

#endif
