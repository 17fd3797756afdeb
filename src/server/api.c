/* api.c - OpenAI request bodies -> engine requests: type and range checks with messages that name the
 * field, the chat template for /v1/chat/completions, tokenization; also /tokenize, /detokenize,
 * /v1/models and the error body.
 *
 * Semantics follow OpenAI, and vLLM's where OpenAI is silent or where vLLM extends the API:
 *   - null means absent for every optional field (the clients send null for "not given");
 *   - completions: prompt is a string, a list of token ids, or a one-element list of either; max_tokens
 *     defaults to 16; logprobs is an integer 0..20; suffix is refused (no fill-in-the-middle);
 *   - chat: messages through the model's own template with add_generation_prompt; content may be a
 *     string or a list of {"type": "text"} parts (joined with "\n", as vLLM does); max_tokens (or
 *     max_completion_tokens) defaults to "until the context is full"; logprobs is a bool and
 *     top_logprobs 0..20 needs it;
 *   - top_k -1 or 0 is off; seed is any integer; stop is a string or a list of strings;
 *   - vLLM extensions: top_k, min_p, repetition_penalty, stop_token_ids, ignore_eos;
 *   - user is accepted and ignored; unknown fields are ignored (vLLM's default).
 * Ranges that the sampler knows (temperature >= 0, top_p in (0, 1], penalties in [-2, 2], ...) are
 * checked by sampler_params_check; its message names the field, which becomes the error's param.
 * Context limits (prompt longer than the context, max_tokens beyond it) are the engine's check at
 * engine_submit (server.c maps them to 400).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aiinfra/template.h"
#include "server/server_internal.h"

// --- errors -----------------------------------------------------------------------

bool api_fail(api_error *e, int status, const char *param, const char *fmt, ...)
{
    e->status = status;
    e->code = NULL;
    e->retry_after = 0;
    switch (status) {
    case 401: e->type = "authentication_error"; e->code = "invalid_api_key"; break;
    case 404: e->type = "not_found_error"; break;
    case 413: e->type = "invalid_request_error"; e->code = "request_too_large"; break;
    case 429: e->type = "rate_limit_error"; break;
    case 503: e->type = "service_unavailable_error"; break;
    case 500: e->type = "server_error"; break;
    default: e->type = "invalid_request_error"; break;
    }
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return false;
}

char *api_error_json(const api_error *e)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *in = cJSON_AddObjectToObject(o, "error");
    if (!in) { cJSON_Delete(o); return NULL; }
    cJSON_AddStringToObject(in, "message", e->message);
    cJSON_AddStringToObject(in, "type", e->type ? e->type : "invalid_request_error");
    if (e->param[0]) cJSON_AddStringToObject(in, "param", e->param);
    else cJSON_AddNullToObject(in, "param");
    if (e->code) cJSON_AddStringToObject(in, "code", e->code);
    else cJSON_AddNumberToObject(in, "code", e->status);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

// --- typed fields --------------------------------------------------------------------

/* The member, or NULL when absent or null. */
static cJSON *field(const cJSON *o, const char *name)
{
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static bool is_int(const cJSON *v)
{
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) && floor(v->valuedouble) == v->valuedouble;
}

/* Optional number in [lo, hi]; *out untouched when absent. */
static bool get_num(const cJSON *o, const char *name, double lo, double hi, float *out, api_error *e)
{
    cJSON *v = field(o, name);
    if (!v) return true;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return api_fail(e, 400, name, "'%s' must be a number", name);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return api_fail(e, 400, name, "'%s' = %g must be in [%g, %g]", name, v->valuedouble, lo, hi);
    *out = (float)v->valuedouble;
    return true;
}

static bool get_int(const cJSON *o, const char *name, double lo, double hi, int32_t *out, api_error *e)
{
    cJSON *v = field(o, name);
    if (!v) return true;
    if (!is_int(v)) return api_fail(e, 400, name, "'%s' must be an integer", name);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return api_fail(e, 400, name, "'%s' = %.0f must be in [%.0f, %.0f]", name, v->valuedouble, lo, hi);
    *out = (int32_t)v->valuedouble;
    return true;
}

static bool get_bool(const cJSON *o, const char *name, bool *out, api_error *e)
{
    cJSON *v = field(o, name);
    if (!v) return true;
    if (!cJSON_IsBool(v)) return api_fail(e, 400, name, "'%s' must be a boolean", name);
    *out = cJSON_IsTrue(v);
    return true;
}

static cJSON *parse_object(const char *body, size_t len, api_error *e)
{
    /* body[len] is NUL (buf); an embedded NUL or trailing bytes after the value are errors */
    cJSON *root = memchr(body, 0, len) ? NULL : cJSON_ParseWithLengthOpts(body, len + 1, NULL, true);
    if (!root) {
        api_fail(e, 400, NULL, "the body is not valid JSON");
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        api_fail(e, 400, NULL, "the body must be a JSON object");
        return NULL;
    }
    return root;
}

/* A list of token ids into out (each in [0, n_vocab)). */
static bool get_ids(const cJSON *a, const char *name, int32_t n_vocab, tok_ids *out, api_error *e)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, a) {
        if (!is_int(it)) return api_fail(e, 400, name, "'%s' must be a list of integer token ids", name);
        if (it->valuedouble < 0 || it->valuedouble >= n_vocab)
            return api_fail(e, 400, name, "'%s': token id %.0f outside [0, %d)", name, it->valuedouble, n_vocab);
        if (!tok_ids_push(out, (int32_t)it->valuedouble)) return api_fail(e, 500, NULL, "out of memory");
    }
    return true;
}

static bool encode(server *s, const char *text, size_t len, int flags, tok_ids *out, api_error *e)
{
    ai_err err = {0};
    if (tokenizer_encode(s->tok, text, len, flags, out, &err) != AI_OK)
        return api_fail(e, 400, "prompt", "cannot tokenize: %s", err.msg);
    return true;
}

// --- prompts -----------------------------------------------------------------------

static bool completion_prompt(server *s, api_req *r, api_error *e)
{
    cJSON *p = field(r->root, "prompt");
    if (!p) return api_fail(e, 400, "prompt", "'prompt' is required");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && !cJSON_IsNumber(cJSON_GetArrayItem(p, 0)))
        p = cJSON_GetArrayItem(p, 0); /* ["text"] or [[ids]]: one prompt */
    int32_t n_vocab = tokenizer_n_vocab(s->tok);
    if (cJSON_IsString(p)) {
        size_t len = strlen(p->valuestring);
        if (!encode(s, p->valuestring, len, TOK_ADD_SPECIAL | TOK_PARSE_SPECIAL, &r->prompt, e)) return false;
        r->echo = strdup(p->valuestring);
        r->echo_len = len;
    } else if (cJSON_IsArray(p) && cJSON_GetArraySize(p) > 0) {
        if (!get_ids(p, "prompt", n_vocab, &r->prompt, e)) return false;
        buf b;
        buf_init(&b);
        ai_err err = {0};
        if (tokenizer_decode(s->tok, r->prompt.data, r->prompt.len, 0, &b, &err) != AI_OK) {
            buf_free(&b);
            return api_fail(e, 400, "prompt", "cannot detokenize the prompt: %s", err.msg);
        }
        r->echo_len = b.len;
        r->echo = b.data ? buf_detach(&b) : strdup("");
    } else {
        return api_fail(e, 400, "prompt", "'prompt' must be a string or a non-empty list of token ids "
                        "(batched prompts are not supported)");
    }
    if (!r->echo) return api_fail(e, 500, NULL, "out of memory");
    if (r->prompt.len == 0) return api_fail(e, 400, "prompt", "'prompt' encodes to no tokens");
    return true;
}

/* Content parts [{"type": "text", "text": ...}] -> one string, as vLLM does for string templates. */
static bool flatten_content(cJSON *msg, size_t i, api_error *e)
{
    cJSON *c = cJSON_GetObjectItemCaseSensitive(msg, "content");
    if (!c || cJSON_IsNull(c) || cJSON_IsString(c)) return true;
    if (!cJSON_IsArray(c))
        return api_fail(e, 400, "messages", "messages[%zu].content must be a string or a list of parts", i);
    buf b;
    buf_init(&b);
    const cJSON *part;
    size_t k = 0;
    cJSON_ArrayForEach(part, c) {
        cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text)) {
            buf_free(&b);
            return api_fail(e, 400, "messages", "messages[%zu].content[%zu]: only {\"type\": \"text\", \"text\": ...} "
                            "parts are supported", i, k);
        }
        if (k++) buf_putc(&b, '\n');
        buf_puts(&b, text->valuestring);
    }
    cJSON *str = cJSON_CreateString(b.data ? b.data : "");
    bool oom = b.oom || !str;
    buf_free(&b);
    if (oom || !cJSON_ReplaceItemInObjectCaseSensitive(msg, "content", str)) {
        cJSON_Delete(str);
        return api_fail(e, 500, NULL, "out of memory");
    }
    return true;
}

/* Checks messages (a non-empty list of {"role": string, "content": ...}) and renders them with the
 * model's chat template into text. */
static bool render_messages(server *s, cJSON *msgs, bool add_generation_prompt, buf *text, api_error *e)
{
    if (!s->has_chat)
        return api_fail(e, 400, "messages", "the model has no chat template; use /v1/completions");
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0)
        return api_fail(e, 400, "messages", "'messages' must be a non-empty list");
    size_t i = 0;
    cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role))
            return api_fail(e, 400, "messages", "messages[%zu] must be an object with a string 'role'", i);
        if (!flatten_content(m, i, e)) return false;
        i++;
    }
    ai_err err = {0};
    if (chat_messages_normalize(msgs, &err) != AI_OK ||
        chat_prompt_render(&s->chat, msgs, add_generation_prompt, text, &err) != AI_OK)
        return api_fail(e, 400, "messages", "chat template: %s", err.msg);
    return true;
}

static bool chat_prompt_tokens(server *s, api_req *r, api_error *e)
{
    cJSON *msgs = field(r->root, "messages");
    if (!msgs) return api_fail(e, 400, "messages", "'messages' is required");
    buf text;
    buf_init(&text);
    bool ok = render_messages(s, msgs, true, &text, e) &&
              encode(s, text.data ? text.data : "", text.len, TOK_PARSE_SPECIAL, &r->prompt, e);
    buf_free(&text);
    if (ok && r->prompt.len == 0) return api_fail(e, 400, "messages", "the conversation encodes to no tokens");
    return ok;
}

// --- sampling and stopping --------------------------------------------------------------

static bool parse_stops(api_req *r, api_error *e)
{
    cJSON *st = field(r->root, "stop");
    if (st) {
        if (cJSON_IsString(st)) {
            if (st->valuestring[0]) r->stops[r->n_stops++] = st->valuestring;
        } else if (cJSON_IsArray(st)) {
            const cJSON *it;
            cJSON_ArrayForEach(it, st) {
                if (!cJSON_IsString(it)) return api_fail(e, 400, "stop", "'stop' must be a string or a list of strings");
                if (!it->valuestring[0]) continue;
                if (r->n_stops == SRV_MAX_STOPS) return api_fail(e, 400, "stop", "at most %d stop strings", SRV_MAX_STOPS);
                if (strlen(it->valuestring) > SAMPLER_MAX_STOP_LEN)
                    return api_fail(e, 400, "stop", "a stop string is longer than %d bytes", SAMPLER_MAX_STOP_LEN);
                r->stops[r->n_stops++] = it->valuestring;
            }
        } else {
            return api_fail(e, 400, "stop", "'stop' must be a string or a list of strings");
        }
        if (cJSON_IsString(st) && strlen(st->valuestring) > SAMPLER_MAX_STOP_LEN)
            return api_fail(e, 400, "stop", "a stop string is longer than %d bytes", SAMPLER_MAX_STOP_LEN);
    }
    cJSON *ids = field(r->root, "stop_token_ids");
    if (ids) {
        int n = cJSON_IsArray(ids) ? cJSON_GetArraySize(ids) : -1;
        if (n < 0) return api_fail(e, 400, "stop_token_ids", "'stop_token_ids' must be a list of integers");
        if (n > SRV_MAX_STOP_IDS) return api_fail(e, 400, "stop_token_ids", "at most %d stop_token_ids", SRV_MAX_STOP_IDS);
        r->stop_ids = malloc((size_t)(n ? n : 1) * sizeof *r->stop_ids);
        if (!r->stop_ids) return api_fail(e, 500, NULL, "out of memory");
        const cJSON *it;
        cJSON_ArrayForEach(it, ids) {
            if (!is_int(it) || it->valuedouble < 0 || it->valuedouble > INT32_MAX)
                return api_fail(e, 400, "stop_token_ids", "'stop_token_ids' must be a list of non-negative integers");
            r->stop_ids[r->sp.n_stop_token_ids++] = (int32_t)it->valuedouble;
        }
        r->sp.stop_token_ids = r->stop_ids;
    }
    return true;
}

static bool parse_bias(api_req *r, api_error *e)
{
    cJSON *lb = field(r->root, "logit_bias");
    if (!lb) return true;
    if (!cJSON_IsObject(lb)) return api_fail(e, 400, "logit_bias", "'logit_bias' must be an object {token id: bias}");
    int n = cJSON_GetArraySize(lb);
    if (n > SRV_MAX_BIAS) return api_fail(e, 400, "logit_bias", "at most %d logit_bias entries", SRV_MAX_BIAS);
    r->bias = malloc((size_t)(n ? n : 1) * sizeof *r->bias);
    if (!r->bias) return api_fail(e, 500, NULL, "out of memory");
    const cJSON *it;
    cJSON_ArrayForEach(it, lb) {
        char *end;
        long long id = strtoll(it->string, &end, 10);
        if (end == it->string || *end || id < 0 || id > INT32_MAX)
            return api_fail(e, 400, "logit_bias", "logit_bias key '%.32s' is not a token id", it->string);
        if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
            return api_fail(e, 400, "logit_bias", "logit_bias['%.32s'] must be a number", it->string);
        r->bias[r->sp.n_logit_bias++] = (sampler_bias){.token = (int32_t)id, .bias = (float)it->valuedouble};
    }
    r->sp.logit_bias = r->bias;
    return true;
}

static bool parse_sampling(server *s, api_req *r, api_error *e)
{
    const cJSON *o = r->root;
    sampler_params *sp = &r->sp;
    int32_t max_tokens = r->kind == API_COMPLETION ? 16 : 0, top_k = 0;
    if (!get_int(o, "max_tokens", 1, INT32_MAX, &max_tokens, e)) return false;
    if (r->kind == API_CHAT && !get_int(o, "max_completion_tokens", 1, INT32_MAX, &max_tokens, e)) return false;
    sp->max_tokens = max_tokens;
    if (!get_num(o, "temperature", 0, 1e6, &sp->temperature, e) ||
        !get_num(o, "top_p", -INFINITY, INFINITY, &sp->top_p, e) ||
        !get_int(o, "top_k", -1, INT32_MAX, &top_k, e) ||
        !get_num(o, "min_p", -INFINITY, INFINITY, &sp->min_p, e) ||
        !get_num(o, "presence_penalty", -INFINITY, INFINITY, &sp->presence_penalty, e) ||
        !get_num(o, "frequency_penalty", -INFINITY, INFINITY, &sp->frequency_penalty, e) ||
        !get_num(o, "repetition_penalty", -INFINITY, INFINITY, &sp->repetition_penalty, e) ||
        !get_bool(o, "ignore_eos", &sp->ignore_eos, e))
        return false;
    sp->top_k = top_k > 0 ? top_k : 0;
    cJSON *seed = field(o, "seed");
    if (seed) {
        if (!is_int(seed) || fabs(seed->valuedouble) > 9.2e18) return api_fail(e, 400, "seed", "'seed' must be an integer");
        sp->has_seed = true;
        sp->seed = (uint64_t)(int64_t)seed->valuedouble;
    }
    if (!parse_stops(r, e) || !parse_bias(r, e)) return false;

    r->n = 1;
    if (!get_int(o, "n", 1, SRV_MAX_N, &r->n, e)) return false;
    cJSON *best_of = field(o, "best_of");
    if (best_of && (!is_int(best_of) || best_of->valuedouble != r->n))
        return api_fail(e, 400, "best_of", "'best_of' other than n is not supported");

    if (r->kind == API_COMPLETION) {
        if (!get_int(o, "logprobs", 0, SAMPLER_MAX_LOGPROBS, &r->logprobs, e)) return false;
    } else {
        bool want = false;
        int32_t top = 0;
        if (!get_bool(o, "logprobs", &want, e) ||
            !get_int(o, "top_logprobs", 0, SAMPLER_MAX_LOGPROBS, &top, e))
            return false;
        if (field(o, "top_logprobs") && !want)
            return api_fail(e, 400, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        r->logprobs = want ? top : -1;
    }
    sp->logprobs = r->logprobs;

    ai_err err = {0};
    if (sampler_params_check(sp, tokenizer_n_vocab(s->tok), &err) != AI_OK) {
        /* "sampler: FIELD ..." -> param FIELD */
        const char *m = strncmp(err.msg, "sampler: ", 9) ? err.msg : err.msg + 9;
        char param[64];
        size_t k = 0;
        while (m[k] && m[k] != ' ' && m[k] != '[' && k + 1 < sizeof param) { param[k] = m[k]; k++; }
        param[k] = '\0';
        return api_fail(e, 400, param, "%s", m);
    }
    return true;
}

static bool parse_stream(api_req *r, api_error *e)
{
    if (!get_bool(r->root, "stream", &r->stream, e)) return false;
    cJSON *so = field(r->root, "stream_options");
    if (!so) return true;
    if (!cJSON_IsObject(so)) return api_fail(e, 400, "stream_options", "'stream_options' must be an object");
    if (!r->stream) return api_fail(e, 400, "stream_options", "'stream_options' needs 'stream': true");
    return get_bool(so, "include_usage", &r->include_usage, e);
}

bool api_parse_generate(server *s, api_kind kind, const char *body, size_t len, api_req *r, api_error *e)
{
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->logprobs = -1;
    r->sp = sampler_params_default();
    tok_ids_init(&r->prompt);
    r->root = parse_object(body, len, e);
    if (!r->root) return false;

    cJSON *mname = field(r->root, "model");
    if (mname && !cJSON_IsString(mname)) return api_fail(e, 400, "model", "'model' must be a string");
    if (mname && strcmp(mname->valuestring, s->model_name)) {
        api_fail(e, 404, "model", "The model `%.200s` does not exist.", mname->valuestring);
        e->code = "model_not_found";
        return false;
    }
    cJSON *user = field(r->root, "user");
    if (user && !cJSON_IsString(user)) return api_fail(e, 400, "user", "'user' must be a string");
    if (!parse_stream(r, e) || !parse_sampling(s, r, e)) return false;

    if (kind == API_COMPLETION) {
        bool echo = false;
        if (!get_bool(r->root, "echo", &echo, e)) return false;
        if (field(r->root, "suffix")) return api_fail(e, 400, "suffix", "'suffix' is not supported");
        if (!completion_prompt(s, r, e)) return false;
        if (!echo) {
            free(r->echo);
            r->echo = NULL;
            r->echo_len = 0;
        } else if (r->logprobs >= 0) {
            return api_fail(e, 400, "echo", "'echo' with 'logprobs' (prompt logprobs) is not supported");
        }
    } else if (!chat_prompt_tokens(s, r, e)) {
        return false;
    }
    return true;
}

void api_req_free(api_req *r)
{
    cJSON_Delete(r->root);
    tok_ids_free(&r->prompt);
    free(r->echo);
    free(r->bias);
    free(r->stop_ids);
    memset(r, 0, sizeof *r);
}

// --- /tokenize, /detokenize, /v1/models -------------------------------------------------

static char *print_delete(cJSON *o, api_error *e)
{
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!s) api_fail(e, 500, NULL, "out of memory");
    return s;
}

char *api_tokenize(server *s, const char *body, size_t len, api_error *e)
{
    cJSON *root = parse_object(body, len, e);
    if (!root) return NULL;
    tok_ids ids;
    tok_ids_init(&ids);
    bool ok = true;
    cJSON *prompt = field(root, "prompt"), *msgs = field(root, "messages");
    if ((prompt != NULL) == (msgs != NULL)) {
        ok = api_fail(e, 400, "prompt", "give exactly one of 'prompt' and 'messages'");
    } else if (prompt) {
        bool special = true;
        if (!cJSON_IsString(prompt)) ok = api_fail(e, 400, "prompt", "'prompt' must be a string");
        else ok = get_bool(root, "add_special_tokens", &special, e) &&
                  encode(s, prompt->valuestring, strlen(prompt->valuestring),
                         TOK_PARSE_SPECIAL | (special ? TOK_ADD_SPECIAL : 0), &ids, e);
    } else {
        bool agp = true;
        buf text;
        buf_init(&text);
        ok = get_bool(root, "add_generation_prompt", &agp, e) && render_messages(s, msgs, agp, &text, e) &&
             encode(s, text.data ? text.data : "", text.len, TOK_PARSE_SPECIAL, &ids, e);
        buf_free(&text);
    }
    cJSON_Delete(root);
    char *out = NULL;
    if (ok) {
        cJSON *o = cJSON_CreateObject();
        cJSON *a = cJSON_AddArrayToObject(o, "tokens");
        for (size_t i = 0; a && i < ids.len; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids.data[i]));
        cJSON_AddNumberToObject(o, "count", (double)ids.len);
        cJSON_AddNumberToObject(o, "max_model_len", engine_n_ctx(s->e));
        out = print_delete(o, e);
    }
    tok_ids_free(&ids);
    return out;
}

char *api_detokenize(server *s, const char *body, size_t len, api_error *e)
{
    cJSON *root = parse_object(body, len, e);
    if (!root) return NULL;
    tok_ids ids;
    tok_ids_init(&ids);
    buf text;
    buf_init(&text);
    char *out = NULL;
    cJSON *t = field(root, "tokens");
    bool ok = t ? cJSON_IsArray(t) || api_fail(e, 400, "tokens", "'tokens' must be a list of token ids")
                : api_fail(e, 400, "tokens", "'tokens' is required");
    ok = ok && get_ids(t, "tokens", tokenizer_n_vocab(s->tok), &ids, e);
    ai_err err = {0};
    if (ok && tokenizer_decode(s->tok, ids.data, ids.len, 0, &text, &err) != AI_OK)
        ok = api_fail(e, 400, "tokens", "cannot detokenize: %s", err.msg);
    if (ok) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "prompt", text.data ? text.data : "");
        out = print_delete(o, e);
    }
    cJSON_Delete(root);
    tok_ids_free(&ids);
    buf_free(&text);
    return out;
}

char *api_models_json(server *s)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *a = cJSON_AddArrayToObject(o, "data");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddItemToArray(a, m);
    cJSON_AddStringToObject(m, "id", s->model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->started);
    cJSON_AddStringToObject(m, "owned_by", "aiinfra");
    cJSON_AddNumberToObject(m, "max_model_len", engine_n_ctx(s->e));
    char *out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return out;
}
