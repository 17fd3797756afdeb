/* load.c - finds a model's chat template and bos/eos texts, and normalizes messages the
 * way transformers does before rendering.
 *
 * Sources, by what `path` is:
 *   *.gguf (or GGUF magic)   tokenizer.chat_template; bos/eos = tokenizer.ggml.tokens[
 *                            tokenizer.ggml.bos_token_id / eos_token_id ]
 *   a JSON file              tokenizer_config.json: "chat_template" (string, or a list of
 *                            {name, template} where "default" wins), "bos_token"/"eos_token"
 *                            (string or {"content": ...})
 *   a folder                 its tokenizer_config.json; chat_template.jinja or
 *                            chat_template.json there take precedence (newer HF layout)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aiinfra/fileio.h"
#include "aiinfra/gguf.h"
#include "aiinfra/template.h"

#define MAX_CONFIG_BYTES (64u << 20)


void chat_model_template_free(chat_model_template *m)
{
    if (!m) return;
    free(m->source);
    free(m->bos);
    free(m->eos);
    memset(m, 0, sizeof *m);
}

static char *dup_n(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

static ai_status load_gguf(chat_model_template *m, const char *path, ai_err *err)
{
    gguf *g = NULL;
    ai_status st = gguf_open(&g, path, err);
    if (st != AI_OK) return st;
    gguf_str s;
    if (!gguf_get_str(g, "tokenizer.chat_template", &s)) {
        gguf_close(g);
        return ai_err_set(err, AI_ERR_FORMAT, "%s: no tokenizer.chat_template key", path);
    }
    m->source = dup_n(s.ptr, (size_t)s.len);
    m->len = (size_t)s.len;
    const char *keys[2] = { "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id" };
    char **dst[2] = { &m->bos, &m->eos };
    for (int k = 0; k < 2; k++) {
        int64_t id;
        gguf_str tok;
        if (gguf_get_i64(g, keys[k], &id) && id >= 0 && gguf_arr_str(g, "tokenizer.ggml.tokens", (uint64_t)id, &tok))
            *dst[k] = dup_n(tok.ptr, (size_t)tok.len);
    }
    gguf_close(g);
    if (!m->source) { chat_model_template_free(m); return ai_err_set(err, AI_ERR_NOMEM, "out of memory"); }
    return AI_OK;
}

static char *token_text(const cJSON *j)
{
    if (cJSON_IsString(j)) return dup_n(j->valuestring, strlen(j->valuestring));
    if (cJSON_IsObject(j)) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "content");
        if (cJSON_IsString(c)) return dup_n(c->valuestring, strlen(c->valuestring));
    }
    return NULL;
}

/* "chat_template": a string or [{name, template}, ...] */
static ai_status pick_template(chat_model_template *m, const cJSON *ct, const char *path, ai_err *err)
{
    if (cJSON_IsString(ct)) {
        m->len = strlen(ct->valuestring);
        m->source = dup_n(ct->valuestring, m->len);
        return m->source ? AI_OK : ai_err_set(err, AI_ERR_NOMEM, "out of memory");
    }
    if (cJSON_IsArray(ct)) {
        for (const cJSON *e = ct->child; e; e = e->next) {
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
            const cJSON *tp = cJSON_GetObjectItemCaseSensitive(e, "template");
            if (cJSON_IsString(nm) && strcmp(nm->valuestring, "default") == 0 && cJSON_IsString(tp))
                return pick_template(m, tp, path, err);
        }
        return ai_err_set(err, AI_ERR_FORMAT, "%s: chat_template list has no entry named \"default\"", path);
    }
    return ai_err_set(err, AI_ERR_FORMAT, "%s: chat_template must be a string or a list of {name, template}", path);
}

static ai_status load_json(chat_model_template *m, const char *path, bool need_template, ai_err *err)
{
    char *data = NULL;
    size_t len = 0;
    ai_status st = file_read_all(path, MAX_CONFIG_BYTES, &data, &len, err);
    if (st != AI_OK) return st;
    cJSON *j = cJSON_ParseWithLength(data, len);
    free(data);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return ai_err_set(err, AI_ERR_FORMAT, "%s: not a JSON object", path);
    }
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(j, "chat_template");
    if (ct && !m->source) st = pick_template(m, ct, path, err);
    else if (!ct && need_template) st = ai_err_set(err, AI_ERR_FORMAT, "%s: no \"chat_template\" member", path);
    if (st == AI_OK) {
        if (!m->bos) m->bos = token_text(cJSON_GetObjectItemCaseSensitive(j, "bos_token"));
        if (!m->eos) m->eos = token_text(cJSON_GetObjectItemCaseSensitive(j, "eos_token"));
    }
    cJSON_Delete(j);
    return st;
}

static bool has_gguf_magic(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    char mg[4] = { 0 };
    size_t k = fread(mg, 1, 4, f);
    fclose(f);
    return k == 4 && memcmp(mg, "GGUF", 4) == 0;
}

ai_status chat_model_template_load(chat_model_template *m, const char *path, ai_err *err)
{
    memset(m, 0, sizeof *m);
    ai_status st;
    if (file_is_dir(path)) {
        char p[4096];
        snprintf(p, sizeof p, "%s/chat_template.jinja", path);
        if (file_is_regular(p)) {
            st = file_read_all(p, MAX_CONFIG_BYTES, &m->source, &m->len, err);
            if (st != AI_OK) return st;
        } else {
            snprintf(p, sizeof p, "%s/chat_template.json", path);
            if (file_is_regular(p)) {
                st = load_json(m, p, true, err);
                if (st != AI_OK) { chat_model_template_free(m); return st; }
            }
        }
        snprintf(p, sizeof p, "%s/tokenizer_config.json", path);
        if (file_is_regular(p)) st = load_json(m, p, m->source == NULL, err);
        else st = m->source ? AI_OK : ai_err_set(err, AI_ERR_IO, "%s: no tokenizer_config.json or chat_template.jinja", path);
        if (st != AI_OK) chat_model_template_free(m);
        return st;
    }
    if (!file_is_regular(path)) return ai_err_set(err, AI_ERR_IO, "%s: no such file or folder", path);
    if (has_gguf_magic(path)) st = load_gguf(m, path, err);
    else st = load_json(m, path, true, err);
    if (st != AI_OK) chat_model_template_free(m);
    return st;
}

// --- message normalization (transformers' _normalize_chat_messages + _alias_reasoning_fields)

ai_status chat_messages_normalize(cJSON *messages, ai_err *err)
{
    if (!cJSON_IsArray(messages)) return ai_err_set(err, AI_ERR_INVALID, "messages: expected a JSON array");
    static const char *const alias[3] = { "reasoning_content", "thinking", "reasoning" };
    for (cJSON *msg = messages->child; msg; msg = msg->next) {
        if (!cJSON_IsObject(msg)) return ai_err_set(err, AI_ERR_INVALID, "messages: every message must be a JSON object");
        for (cJSON *e = msg->child; e;) {
            cJSON *nx = e->next;
            if (cJSON_IsNull(e)) cJSON_Delete(cJSON_DetachItemViaPointer(msg, e));
            e = nx;
        }
        cJSON *reason = NULL;
        for (int k = 0; k < 3 && !reason; k++) reason = cJSON_GetObjectItemCaseSensitive(msg, alias[k]);
        if (!reason) continue;
        /* {"thinking": r, **message, "reasoning_content": r}: thinking first unless present */
        /* Python's {"thinking": r, **message, ...} puts "thinking" first, keeping its value */
        cJSON *t = cJSON_DetachItemFromObjectCaseSensitive(msg, "thinking");
        if (!t) {
            t = cJSON_Duplicate(reason, true);
            if (!t) return ai_err_set(err, AI_ERR_NOMEM, "out of memory");
            cJSON_free(t->string);  /* the duplicate carries the alias's member name */
            t->string = strdup("thinking");
            if (!t->string) { cJSON_Delete(t); return ai_err_set(err, AI_ERR_NOMEM, "out of memory"); }
        }
        {
            t->next = msg->child;
            if (msg->child) { t->prev = msg->child->prev; msg->child->prev = t; }
            else t->prev = t;
            msg->child = t;
        }
        cJSON *rc = cJSON_Duplicate(reason, true);
        if (!rc) return ai_err_set(err, AI_ERR_NOMEM, "out of memory");
        if (cJSON_GetObjectItemCaseSensitive(msg, "reasoning_content"))
            cJSON_ReplaceItemInObjectCaseSensitive(msg, "reasoning_content", rc);
        else cJSON_AddItemToObject(msg, "reasoning_content", rc);
    }
    return AI_OK;
}
