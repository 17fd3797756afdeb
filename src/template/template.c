/* template.c - public entry points: parse, render, free; JSON context to values.
 *
 * Both entry points own a tpl_ctx whose jmp_buf catches tpl_fail() (tpl.h invariant 3).
 * JSON numbers become ints when integral and within 2^53 (cJSON does not keep the
 * "1.0" vs "1" spelling; Python's json would give a float for "1.0" - a documented gap).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aiinfra/template.h"
#include "template/tpl.h"

struct chat_template {
    arena ar;
    node *root;
};

ai_status chat_template_parse(chat_template **out, const char *src, size_t len, ai_err *err)
{
    *out = NULL;
    if (len > TPL_MAX_SOURCE) return ai_err_set(err, AI_ERR_RANGE, "template: source of %zu bytes exceeds %u", len, TPL_MAX_SOURCE);
    chat_template *t = calloc(1, sizeof *t);
    if (!t) return ai_err_set(err, AI_ERR_NOMEM, "template: out of memory");
    t->ar.limit = TPL_MAX_ARENA;
    tpl_ctx c;
    ai_err local;
    c.err = err ? err : &local;
    c.ar = &t->ar;
    if (setjmp(c.jb)) {
        arena_free(&t->ar);
        free(t);
        return c.err->code;
    }
    token_list toks = { 0 };
    tpl_lex(&c, src ? src : "", src ? len : 0, &toks);
    t->root = tpl_parse(&c, &toks);
    *out = t;
    return AI_OK;
}

void chat_template_free(chat_template *t)
{
    if (!t) return;
    arena_free(&t->ar);
    free(t);
}

static value *from_json(tpl_ctx *c, const cJSON *j, int depth)
{
    if (depth > TPL_MAX_DEPTH) tpl_fail(c, AI_ERR_RANGE, 0, "context JSON nested deeper than %d", TPL_MAX_DEPTH);
    if (cJSON_IsNull(j)) return v_none(c);
    if (cJSON_IsTrue(j)) return v_bool(c, true);
    if (cJSON_IsFalse(j)) return v_bool(c, false);
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (d == floor(d) && fabs(d) <= 9007199254740992.0) return v_int(c, (int64_t)d);
        return v_float(c, d);
    }
    if (cJSON_IsString(j)) return v_str(c, j->valuestring, strlen(j->valuestring));
    if (cJSON_IsArray(j)) {
        value *l = v_list(c, 0);
        for (const cJSON *e = j->child; e; e = e->next) v_list_push(c, l, from_json(c, e, depth + 1));
        return l;
    }
    if (cJSON_IsObject(j)) {
        value *d = v_dict(c);
        for (const cJSON *e = j->child; e; e = e->next)
            v_dict_set(c, d, v_str(c, e->string, strlen(e->string)), from_json(c, e, depth + 1));
        return d;
    }
    tpl_fail(c, AI_ERR_FORMAT, 0, "unsupported JSON value in context");
}

ai_status chat_template_render_at(const chat_template *t, const cJSON *context, int64_t now, buf *out, ai_err *err)
{
    if (!t || !out) return ai_err_set(err, AI_ERR_INVALID, "template: render needs a template and an output buffer");
    if (context && !cJSON_IsObject(context))
        return ai_err_set(err, AI_ERR_INVALID, "template: the render context must be a JSON object");
    arena ar = { NULL, 0, TPL_MAX_ARENA };
    render_ctx r;
    memset(&r, 0, sizeof r);
    ai_err local;
    r.tc.err = err ? err : &local;
    r.tc.ar = &ar;
    r.out = out;
    r.now = now;
    r.out_mark = out->len;
    if (setjmp(r.tc.jb)) {
        arena_free(&ar);
        out->len = r.out_mark;
        if (out->data) out->data[out->len] = '\0';
        return r.tc.err->code;
    }
    value *vars = context ? from_json(&r.tc, context, 0) : v_dict(&r.tc);
    eval_render(&r, t->root, vars);
    out_check(&r, 0);
    arena_free(&ar);
    return AI_OK;
}

ai_status chat_template_render(const chat_template *t, const cJSON *context, buf *out, ai_err *err)
{
    return chat_template_render_at(t, context, (int64_t)time(NULL), out, err);
}
