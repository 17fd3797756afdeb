/* api_response.c - engine events -> OpenAI response JSON: the whole body of a non-stream request, or SSE
 * chunks ("data: {...}\n\n" ... "data: [DONE]\n\n") of a streaming one.
 *
 * Shapes (OpenAI; vLLM's where OpenAI has none):
 *   completions  {"id": "cmpl-..", "object": "text_completion", "created", "model",
 *                 "choices": [{"index", "text", "logprobs", "finish_reason"}], "usage"}
 *                logprobs {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}
 *   chat         {"id": "chatcmpl-..", "object": "chat.completion", ..., "choices": [{"index",
 *                 "message": {"role": "assistant", "content"}, "logprobs", "finish_reason"}], "usage"}
 *                logprobs {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}
 *   chat chunks  first chunk of a sample: delta {"role": "assistant", "content": ""}; then
 *                delta {"content"}; last: delta {} with finish_reason; object "chat.completion.chunk"
 *   usage        {"prompt_tokens", "completion_tokens" (all samples), "total_tokens",
 *                 "prompt_tokens_details": {"cached_tokens"}}; in streams only with
 *                 stream_options.include_usage, as a last chunk with "choices": [].
 * Token strings in logprobs are the token decoded alone. A chunk whose text is empty (the engine is
 * holding back a possible stop string or an incomplete UTF-8 character) is not sent unless it carries
 * logprobs. finish_reason "abort" (vLLM's) appears only when the engine aborted the request.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_internal.h"

static const char *finish_str(engine_finish f)
{
    switch (f) {
    case ENGINE_FINISH_STOP: return "stop";
    case ENGINE_FINISH_LENGTH: return "length";
    case ENGINE_FINISH_ABORT: return "abort";
    default: return NULL;
    }
}

/* The token decoded alone (empty on failure). */
static cJSON *token_string(const tokenizer *t, int32_t id)
{
    buf b;
    buf_init(&b);
    ai_err err = {0};
    if (tokenizer_decode(t, &id, 1, 0, &b, &err) != AI_OK) buf_clear(&b);
    cJSON *s = cJSON_CreateString(b.data ? b.data : "");
    buf_free(&b);
    return s;
}

static cJSON *token_bytes(const cJSON *str)
{
    cJSON *a = cJSON_CreateArray();
    for (const unsigned char *p = (const unsigned char *)str->valuestring; a && *p; p++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(*p));
    return a;
}

static cJSON *chat_logprob_item(const tokenizer *t, int32_t token, float lp)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *s = token_string(t, token);
    cJSON_AddItemToObject(o, "token", s);
    cJSON_AddNumberToObject(o, "logprob", lp);
    if (s) cJSON_AddItemToObject(o, "bytes", token_bytes(s));
    return o;
}

/* Appends one token's logprobs to lp (created on first use: *lp NULL). */
static void logprob_append(srv_job *j, cJSON **lp, const srv_event *ev, size_t text_off)
{
    const tokenizer *t = j->srv->tok;
    if (j->req.kind == API_CHAT) {
        if (!*lp) {
            *lp = cJSON_CreateObject();
            cJSON_AddArrayToObject(*lp, "content");
        }
        cJSON *item = chat_logprob_item(t, ev->token, ev->logprob);
        cJSON *tops = cJSON_AddArrayToObject(item, "top_logprobs");
        for (int32_t i = 0; tops && i < ev->n_top; i++)
            cJSON_AddItemToArray(tops, chat_logprob_item(t, ev->top[i].token, ev->top[i].logprob));
        cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(*lp, "content"), item);
        return;
    }
    if (!*lp) {
        *lp = cJSON_CreateObject();
        cJSON_AddArrayToObject(*lp, "tokens");
        cJSON_AddArrayToObject(*lp, "token_logprobs");
        cJSON_AddArrayToObject(*lp, "top_logprobs");
        cJSON_AddArrayToObject(*lp, "text_offset");
    }
    cJSON *o = *lp;
    cJSON *s = token_string(t, ev->token);
    cJSON *top = cJSON_CreateObject();
    bool has_chosen = false;
    for (int32_t i = 0; top && i < ev->n_top; i++) {
        cJSON *ts = token_string(t, ev->top[i].token);
        if (ts && !cJSON_GetObjectItemCaseSensitive(top, ts->valuestring))
            cJSON_AddNumberToObject(top, ts->valuestring, ev->top[i].logprob);
        has_chosen |= ev->top[i].token == ev->token;
        cJSON_Delete(ts);
    }
    /* vLLM: the sampled token is always among the top entries */
    if (top && s && !has_chosen && !cJSON_GetObjectItemCaseSensitive(top, s->valuestring))
        cJSON_AddNumberToObject(top, s->valuestring, ev->logprob);
    cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(o, "tokens"), s);
    cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(o, "token_logprobs"), cJSON_CreateNumber(ev->logprob));
    cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(o, "top_logprobs"), top);
    cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(o, "text_offset"), cJSON_CreateNumber((double)text_off));
}

static cJSON *usage_json(const srv_job *j)
{
    int64_t completion = 0;
    for (int32_t i = 0; i < j->req.n; i++) completion += j->samples[i].n_completion;
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", j->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)completion);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(j->n_prompt + completion));
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    if (d) cJSON_AddNumberToObject(d, "cached_tokens", j->n_cached);
    return u;
}

static cJSON *envelope(const srv_job *j, const char *object)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", j->srv->model_name);
    return o;
}

// --- streaming --------------------------------------------------------------------------

static void sse_put(srv_job *j, cJSON *o)
{
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!s) { j->out.oom = true; return; }
    buf_puts(&j->out, "data: ");
    buf_puts(&j->out, s);
    buf_puts(&j->out, "\n\n");
    free(s);
}

/* One chunk for sample k: text (may be NULL), logprobs (taken, may be NULL), finish reason. */
static void stream_chunk(srv_job *j, int32_t k, const char *text, size_t len, cJSON *lp, const char *finish)
{
    bool chat = j->req.kind == API_CHAT;
    cJSON *o = envelope(j, chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", k);
    cJSON *t = NULL;
    if (text) {
        t = cJSON_CreateString("");
        char *copy = malloc(len + 1);
        if (copy && t) {
            memcpy(copy, text, len);
            copy[len] = '\0';
            cJSON_SetValuestring(t, copy);
        }
        free(copy);
    }
    if (chat) {
        cJSON *delta = cJSON_AddObjectToObject(c, "delta");
        if (!j->samples[k].started) cJSON_AddStringToObject(delta, "role", "assistant");
        if (t) cJSON_AddItemToObject(delta, "content", t);
        else if (!j->samples[k].started) cJSON_AddStringToObject(delta, "content", "");
    } else {
        cJSON_AddItemToObject(c, "text", t ? t : cJSON_CreateString(""));
    }
    j->samples[k].started = true;
    if (lp) cJSON_AddItemToObject(c, "logprobs", lp);
    else cJSON_AddNullToObject(c, "logprobs");
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    sse_put(j, o);
}

static void stream_token(srv_job *j, const srv_event *ev)
{
    srv_sample *s = &j->samples[ev->index];
    cJSON *lp = NULL;
    if (j->req.logprobs >= 0) logprob_append(j, &lp, ev, s->text_off);
    s->text_off += ev->len;
    if (!s->started && j->req.echo) {
        /* echo: the prompt text leads the sample's first chunk */
        buf b;
        buf_init(&b);
        buf_append(&b, j->req.echo, j->req.echo_len);
        buf_append(&b, ev->text, ev->len);
        stream_chunk(j, ev->index, b.data ? b.data : "", b.len, lp, NULL);
        buf_free(&b);
    } else if (ev->len || lp || (!s->started && j->req.kind == API_CHAT)) {
        stream_chunk(j, ev->index, ev->text, ev->len, lp, NULL);
    }
}

void job_stream_end(srv_job *j)
{
    if (j->ended) return;
    j->ended = true;
    if (j->failed) {
        api_error e;
        api_fail(&e, 500, NULL, "%s", j->error);
        char *s = api_error_json(&e);
        if (s) {
            buf_printf(&j->out, "data: %s\n\n", s);
            free(s);
        }
    } else if (j->req.include_usage) {
        cJSON *o = envelope(j, j->req.kind == API_CHAT ? "chat.completion.chunk" : "text_completion");
        cJSON_AddArrayToObject(o, "choices");
        cJSON_AddItemToObject(o, "usage", usage_json(j));
        sse_put(j, o);
    }
    buf_puts(&j->out, "data: [DONE]\n\n");
}

// --- events ------------------------------------------------------------------------------

void job_apply(srv_job *j, const srv_event *ev)
{
    if (j->finished) return;
    if (ev->kind == ENGINE_EV_ERROR) {
        j->failed = true;
        snprintf(j->error, sizeof j->error, "%s", ev->len ? ev->text : "the request failed");
        j->finished = true;
        return;
    }
    if (ev->index < 0 || ev->index >= j->req.n) return; /* not ours: ignore rather than crash */
    srv_sample *s = &j->samples[ev->index];
    if (s->done) return;
    if (ev->kind == ENGINE_EV_TOKEN) {
        if (j->req.stream) {
            stream_token(j, ev);
            return;
        }
        if (j->req.logprobs >= 0) logprob_append(j, &s->lp, ev, j->req.echo_len + s->text.len);
        buf_append(&s->text, ev->text, ev->len);
        return;
    }
    /* DONE */
    s->done = true;
    s->finish = ev->finish;
    s->n_completion = ev->n_completion;
    j->n_prompt = ev->n_prompt;
    j->n_cached = ev->n_cached;
    if (j->req.stream) {
        if (!s->started && j->req.echo) stream_chunk(j, ev->index, j->req.echo, j->req.echo_len, NULL, NULL);
        stream_chunk(j, ev->index, NULL, 0, NULL, finish_str(s->finish));
    }
    if (++j->n_done == j->req.n) j->finished = true;
}

// --- non-stream body ------------------------------------------------------------------------

char *job_response_json(srv_job *j)
{
    bool chat = j->req.kind == API_CHAT;
    cJSON *o = envelope(j, chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    for (int32_t k = 0; k < j->req.n; k++) {
        srv_sample *s = &j->samples[k];
        cJSON *c = cJSON_CreateObject();
        cJSON_AddItemToArray(choices, c);
        cJSON_AddNumberToObject(c, "index", k);
        buf text;
        buf_init(&text);
        if (j->req.echo) buf_append(&text, j->req.echo, j->req.echo_len);
        buf_append(&text, s->text.data ? s->text.data : "", s->text.len);
        if (chat) {
            cJSON *m = cJSON_AddObjectToObject(c, "message");
            cJSON_AddStringToObject(m, "role", "assistant");
            cJSON_AddStringToObject(m, "content", text.data ? text.data : "");
        } else {
            cJSON_AddStringToObject(c, "text", text.data ? text.data : "");
        }
        buf_free(&text);
        if (s->lp) {
            cJSON_AddItemToObject(c, "logprobs", s->lp);
            s->lp = NULL;
        } else if (j->req.logprobs >= 0) {
            /* no token was generated: an empty logprobs object, not null */
            cJSON *lp = NULL;
            srv_event none = {.token = 0};
            logprob_append(j, &lp, &none, 0);
            cJSON *first;
            cJSON_ArrayForEach(first, lp) cJSON_DeleteItemFromArray(first, 0);
            cJSON_AddItemToObject(c, "logprobs", lp);
        } else {
            cJSON_AddNullToObject(c, "logprobs");
        }
        const char *f = finish_str(s->finish);
        if (f) cJSON_AddStringToObject(c, "finish_reason", f);
        else cJSON_AddNullToObject(c, "finish_reason");
    }
    cJSON_AddItemToObject(o, "usage", usage_json(j));
    char *out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return out;
}
