/* cmd_template.c - `aiinfra template`: render a chat template like transformers'
 * apply_chat_template.
 *
 *   template (-m MODEL | --template FILE.jinja) --messages FILE.json [--add-generation-prompt]
 *            [--tools FILE.json] [--bos TEXT] [--eos TEXT]
 *       prints the prompt exactly (no newline added); errors on stderr, exit 1; usage exit 2.
 *   template (-m MODEL | --template FILE) --batch FILE.jsonl
 *       (for tests) every line is a whole render context {"messages": ..., ...}; prints one
 *       JSON line per case: {"out": TEXT} or {"error": MESSAGE}. Exit 0 unless I/O fails.
 * strftime_now() uses SOURCE_DATE_EPOCH when set, so output can be reproduced.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aiinfra/fileio.h"
#include "aiinfra/template.h"
#include "tools/commands.h"

#define JSON_MAX ((size_t)256 << 20)

static int usage(void)
{
    fprintf(stderr, "usage: aiinfra template (-m MODEL | --template FILE.jinja) --messages FILE.json "
                    "[--add-generation-prompt] [--tools FILE.json] [--bos TEXT] [--eos TEXT]\n");
    return 2;
}

static cJSON *read_json(const char *path, ai_err *err)
{
    char *data = NULL;
    size_t len = 0;
    if (file_read_all(path, JSON_MAX, &data, &len, err) != AI_OK) return NULL;
    cJSON *j = cJSON_ParseWithLength(data, len);
    free(data);
    if (!j) ai_err_set(err, AI_ERR_FORMAT, "%s: invalid JSON", path);
    return j;
}

static int64_t fixed_now(void)
{
    const char *e = getenv("SOURCE_DATE_EPOCH");
    if (e && *e) {
        char *end;
        long long v = strtoll(e, &end, 10);
        if (*end == '\0') return v;
    }
    return (int64_t)time(NULL);
}

/* fills bos/eos unless the context has them; normalizes messages */
static ai_status prepare(cJSON *ctx, const char *bos, const char *eos, ai_err *err)
{
    cJSON *m = cJSON_GetObjectItemCaseSensitive(ctx, "messages");
    if (!m) return ai_err_set(err, AI_ERR_INVALID, "context has no \"messages\"");
    ai_status st = chat_messages_normalize(m, err);
    if (st != AI_OK) return st;
    if (bos && !cJSON_GetObjectItemCaseSensitive(ctx, "bos_token")) cJSON_AddStringToObject(ctx, "bos_token", bos);
    if (eos && !cJSON_GetObjectItemCaseSensitive(ctx, "eos_token")) cJSON_AddStringToObject(ctx, "eos_token", eos);
    return AI_OK;
}

static int run_batch(const chat_template *t, const char *path, const char *bos, const char *eos)
{
    ai_err err = { 0 };
    char *data = NULL;
    size_t len = 0;
    if (file_read_all(path, JSON_MAX, &data, &len, &err) != AI_OK) {
        fprintf(stderr, "aiinfra template: %s\n", err.msg);
        return 1;
    }
    int64_t now = fixed_now();
    buf out;
    buf_init(&out);
    char *line = data;
    while (line < data + len) {
        char *nl = memchr(line, '\n', (size_t)(data + len - line));
        size_t ll = nl ? (size_t)(nl - line) : (size_t)(data + len - line);
        if (ll > 0) {
            cJSON *ctx = cJSON_ParseWithLength(line, ll), *res = cJSON_CreateObject();
            buf_clear(&out);
            ai_status st = ctx && cJSON_IsObject(ctx) ? prepare(ctx, bos, eos, &err)
                                                     : ai_err_set(&err, AI_ERR_FORMAT, "batch line is not a JSON object");
            if (st == AI_OK) st = chat_template_render_at(t, ctx, now, &out, &err);
            if (st == AI_OK) cJSON_AddItemToObject(res, "out", cJSON_CreateString(out.data ? out.data : ""));
            else cJSON_AddStringToObject(res, "error", err.msg);
            char *s = cJSON_PrintUnformatted(res);
            if (s) { fputs(s, stdout); fputc('\n', stdout); }
            free(s);
            cJSON_Delete(res);
            cJSON_Delete(ctx);
        }
        if (!nl) break;
        line = nl + 1;
    }
    buf_free(&out);
    free(data);
    return 0;
}

int cmd_template(int argc, char **argv)
{
    const char *model = NULL, *tfile = NULL, *msgs = NULL, *tools = NULL, *bos = NULL, *eos = NULL, *batch = NULL;
    bool gen = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && more) model = argv[++i];
        else if (!strcmp(a, "--template") && more) tfile = argv[++i];
        else if (!strcmp(a, "--messages") && more) msgs = argv[++i];
        else if (!strcmp(a, "--tools") && more) tools = argv[++i];
        else if (!strcmp(a, "--bos") && more) bos = argv[++i];
        else if (!strcmp(a, "--eos") && more) eos = argv[++i];
        else if (!strcmp(a, "--batch") && more) batch = argv[++i];
        else if (!strcmp(a, "--add-generation-prompt")) gen = true;
        else return usage();
    }
    if ((!model) == (!tfile) || (!msgs) == (!batch)) return usage();

    ai_err err = { 0 };
    chat_model_template mt = { 0 };
    ai_status st;
    if (model) st = chat_model_template_load(&mt, model, &err);
    else st = file_read_all(tfile, JSON_MAX, &mt.source, &mt.len, &err);
    if (st != AI_OK) {
        fprintf(stderr, "aiinfra template: %s\n", err.msg);
        return 1;
    }
    if (!bos) bos = mt.bos;
    if (!eos) eos = mt.eos;
    chat_template *t = NULL;
    st = chat_template_parse(&t, mt.source, mt.len, &err);
    if (st != AI_OK) {
        fprintf(stderr, "aiinfra template: %s\n", err.msg);
        chat_model_template_free(&mt);
        return 1;
    }
    int rc = 1;
    cJSON *ctx = NULL;
    buf out;
    buf_init(&out);
    if (batch) { rc = run_batch(t, batch, bos, eos); goto done; }
    ctx = cJSON_CreateObject();
    cJSON *m = read_json(msgs, &err);
    if (!m) goto fail;
    if (!cJSON_IsArray(m)) { cJSON_Delete(m); ai_err_set(&err, AI_ERR_FORMAT, "%s: expected a JSON array of messages", msgs); goto fail; }
    cJSON_AddItemToObject(ctx, "messages", m);
    if (tools) {
        cJSON *tl = read_json(tools, &err);
        if (!tl) goto fail;
        cJSON_AddItemToObject(ctx, "tools", tl);
    } else cJSON_AddNullToObject(ctx, "tools");
    cJSON_AddNullToObject(ctx, "documents");
    cJSON_AddBoolToObject(ctx, "add_generation_prompt", gen);
    if (prepare(ctx, bos, eos, &err) != AI_OK) goto fail;
    if (chat_template_render_at(t, ctx, fixed_now(), &out, &err) != AI_OK) goto fail;
    if (out.len && fwrite(out.data, 1, out.len, stdout) != out.len) { ai_err_set(&err, AI_ERR_IO, "stdout: write failed"); goto fail; }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "aiinfra template: %s\n", err.msg);
    rc = 1;
done:
    cJSON_Delete(ctx);
    buf_free(&out);
    chat_template_free(t);
    chat_model_template_free(&mt);
    return rc;
}
