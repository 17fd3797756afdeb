/* server.c - the HTTP side of `aiinfra serve`: libmicrohttpd, routing, authentication, body limits,
 * and the hand-off between connection threads and the engine thread.
 *
 * Threads: MHD runs one thread per connection (MHD_USE_THREAD_PER_CONNECTION), so a connection may
 * block while it waits for its request's events: the non-stream handler waits in the access callback,
 * the stream's content reader waits inside MHD's read callback. Both wait on the job's condition
 * variable with a short timeout and peek at the socket between waits (recv MSG_PEEK: 0 = the client
 * hung up), so a client that goes away is noticed even while no token is produced (a long prefill);
 * MHD also ends a stream whose write fails. Either way the connection calls engine_abort and drops
 * its reference to the job (server_internal.h, invariants 1-4). The engine thread only copies events
 * into the job's queue and signals (never blocks on a client).
 *
 * Request flow (access handler calls):
 *   first call     route + method, API key (for /v1/...), Content-Length above the hard cap
 *                  (64 MiB: answered at once); errors decided here wait for the body to be read, so
 *                  that the client, still sending, is not reset before it reads the status
 *   upload calls   the body accumulates up to max_body; beyond it the rest is read and dropped (413)
 *   final call     dispatch: /health /metrics /v1/models /tokenize /detokenize, or a generation:
 *                  parse (api.c) -> engine_submit -> wait -> JSON body, or an SSE response whose
 *                  reader turns events into chunks (api_response.c)
 * Status codes: 400 bad request (message names the field), 401 API key, 404 path or model, 405
 * method, 413 body, 429 + Retry-After when the engine's waiting queue is full, 503 while draining,
 * 500 when the engine fails a request after accepting it.
 *
 * Draining (server_stop): `draining` makes /health and new work answer 503; engine_drain waits for the
 * requests in flight; then the server waits (bounded, 30 s) until their responses are fully written
 * (n_active, decremented by MHD's request-completed callback) and stops the daemon.
 */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <microhttpd.h>

#include "server/server_internal.h"

#define SRV_DEFAULT_MAX_BODY ((size_t)4 << 20)
#define SRV_HARD_MAX_BODY ((size_t)64 << 20)  /* beyond: answered before the body is read */
#define SRV_POLL_MS 100                        /* wait slice between hang-up checks */
#define SRV_STOP_WAIT_S 30                     /* server_stop: longest wait for responses in flight */

typedef enum route {
    R_NONE = 0, R_COMPLETIONS, R_CHAT, R_MODELS, R_HEALTH, R_METRICS, R_TOKENIZE, R_DETOKENIZE,
} route;

static const struct {
    const char *path, *method;
    route r;
} routes[] = {
    {"/v1/completions", "POST", R_COMPLETIONS}, {"/v1/chat/completions", "POST", R_CHAT},
    {"/v1/models", "GET", R_MODELS},            {"/health", "GET", R_HEALTH},
    {"/metrics", "GET", R_METRICS},             {"/tokenize", "POST", R_TOKENIZE},
    {"/detokenize", "POST", R_DETOKENIZE},
};

/* Per-connection-request state (MHD's con_cls). */
typedef struct srv_conn {
    route r;
    buf body;
    bool too_large;
    bool has_error;     /* decided at the first call, sent after the body is read */
    api_error err;
    bool counted;       /* a generation: n_active was incremented */
} srv_conn;

// --- responses ---------------------------------------------------------------------

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, const char *ctype, char *body)
{
    static char oom[] = "{\"error\": {\"message\": \"out of memory\", \"type\": \"server_error\", "
                        "\"param\": null, \"code\": 500}}";
    struct MHD_Response *r;
    if (body) {
        r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    } else {
        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        ctype = "application/json";
        r = MHD_create_response_from_buffer(sizeof oom - 1, oom, MHD_RESPMEM_PERSISTENT);
    }
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_error(struct MHD_Connection *c, const api_error *e)
{
    char *body = api_error_json(e);
    if (!body) return send_text(c, 500, NULL, NULL);
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (e->retry_after > 0) {
        char v[16];
        snprintf(v, sizeof v, "%d", e->retry_after);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
    if (e->status == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)e->status, r);
    MHD_destroy_response(r);
    return ret;
}

static bool is_draining(server *s)
{
    pthread_mutex_lock(&s->mu);
    bool d = s->draining;
    pthread_mutex_unlock(&s->mu);
    return d;
}

// --- jobs ---------------------------------------------------------------------------

static void job_free(srv_job *j)
{
    for (srv_event *ev = j->head, *next; ev; ev = next) {
        next = ev->next;
        free(ev);
    }
    for (int i = 0; i < SRV_MAX_N; i++) {
        buf_free(&j->samples[i].text);
        cJSON_Delete(j->samples[i].lp);
    }
    buf_free(&j->out);
    api_req_free(&j->req);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

static void job_release(srv_job *j)
{
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left == 0) job_free(j);
}

/* The engine callback (engine thread): copy, queue, signal; drop the engine's ref on the terminal
 * event. A lost copy (out of memory) is noticed by the connection as "over with nothing pending". */
static void job_on_event(void *user, const engine_event *ev)
{
    srv_job *j = user;
    const char *text = ev->kind == ENGINE_EV_TOKEN ? ev->text : ev->kind == ENGINE_EV_ERROR ? ev->error : NULL;
    size_t len = !text ? 0 : ev->kind == ENGINE_EV_TOKEN ? ev->text_len : strlen(text);
    srv_event *x = malloc(sizeof *x + len + 1);
    if (x) {
        memset(x, 0, sizeof *x);
        x->kind = ev->kind;
        x->index = ev->index;
        x->token = ev->token;
        x->logprob = ev->logprob;
        x->n_top = ev->top && ev->n_top > 0 ? (ev->n_top < SAMPLER_MAX_LOGPROBS ? ev->n_top : SAMPLER_MAX_LOGPROBS) : 0;
        if (x->n_top) memcpy(x->top, ev->top, (size_t)x->n_top * sizeof *x->top);
        x->finish = ev->finish;
        x->n_prompt = ev->n_prompt_tokens;
        x->n_completion = ev->n_completion_tokens;
        x->n_cached = ev->n_cached_tokens;
        x->len = len;
        if (len) memcpy(x->text, text, len);
        x->text[len] = '\0';
    }
    pthread_mutex_lock(&j->mu);
    if (x) {
        if (j->tail) j->tail->next = x;
        else j->head = x;
        j->tail = x;
    }
    bool terminal = ev->kind == ENGINE_EV_ERROR || (ev->kind == ENGINE_EV_DONE && ++j->engine_done >= j->req.n);
    int left = 1;
    if (terminal && !j->engine_over) {
        j->engine_over = true;
        left = --j->refs;
    }
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (left == 0) job_free(j);
}

static bool client_gone(int fd)
{
    if (fd < 0) return false;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Takes the pending events (waiting up to SRV_POLL_MS for one) and applies them. false when the
 * client hung up. */
static bool job_wait(srv_job *j)
{
    pthread_mutex_lock(&j->mu);
    if (!j->head && !j->engine_over) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += SRV_POLL_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
    }
    srv_event *list = j->head;
    j->head = j->tail = NULL;
    bool over = j->engine_over;
    pthread_mutex_unlock(&j->mu);
    bool got = list != NULL;
    for (srv_event *ev = list, *next; ev; ev = next) {
        next = ev->next;
        job_apply(j, ev);
        free(ev);
    }
    if (over && !j->finished) {
        /* the terminal event's copy was lost to an allocation failure */
        j->failed = j->finished = true;
        snprintf(j->error, sizeof j->error, "out of memory");
    }
    return got || j->finished || !client_gone(j->fd);
}

/* Connection side gives up the job: abort in the engine when it is still running. */
static void job_drop(srv_job *j)
{
    pthread_mutex_lock(&j->mu);
    bool over = j->engine_over;
    pthread_mutex_unlock(&j->mu);
    if (!over) engine_abort(j->srv->e, j->rid);
    job_release(j);
}

// --- streaming ----------------------------------------------------------------------

static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max)
{
    srv_job *j = cls;
    for (;;) {
        if (j->out.oom) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (j->out_off < j->out.len) {
            size_t n = j->out.len - j->out_off;
            if (n > max) n = max;
            memcpy(out, j->out.data + j->out_off, n);
            j->out_off += n;
            if (j->out_off == j->out.len) {
                buf_clear(&j->out);
                j->out_off = 0;
            }
            return (ssize_t)n;
        }
        if (j->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        if (j->finished) {
            job_stream_end(j);
            continue;
        }
        if (!job_wait(j)) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static void stream_free(void *cls)
{
    job_drop(cls);
}

// --- generation ------------------------------------------------------------------------

static void submit_error(server *s, ai_status st, const ai_err *err, api_error *e)
{
    if (is_draining(s)) {
        api_fail(e, 503, NULL, "the server is shutting down");
    } else if (st == AI_ERR_RANGE && engine_queue_full(s->e)) {
        api_fail(e, 429, NULL, "too many requests are waiting: %s", err->msg);
        e->retry_after = 1;
    } else if (st == AI_ERR_NOMEM) {
        api_fail(e, 500, NULL, "%s", err->msg);
    } else {
        static const char *const fields[] = {"max_tokens", "top_logprobs", "logprobs", "logit_bias", "stop_token_ids",
                                             "temperature", "top_p", "top_k", "min_p", "seed", "prompt"};
        const char *param = NULL;
        for (size_t i = 0; !param && i < sizeof fields / sizeof fields[0]; i++)
            if (strstr(err->msg, fields[i])) param = fields[i];
        if (!param && strstr(err->msg, "context")) param = "prompt";
        api_fail(e, 400, param, "%s", err->msg);
    }
}

static enum MHD_Result generate(server *s, srv_conn *cn, struct MHD_Connection *c, api_kind kind)
{
    api_error e;
    if (is_draining(s)) {
        api_fail(&e, 503, NULL, "the server is shutting down");
        return send_error(c, &e);
    }
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return send_text(c, 500, NULL, NULL);
    if (!api_parse_generate(s, kind, cn->body.data ? cn->body.data : "", cn->body.len, &j->req, &e)) {
        api_req_free(&j->req);
        free(j);
        return send_error(c, &e);
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->srv = s;
    j->refs = 2;
    for (int i = 0; i < SRV_MAX_N; i++) buf_init(&j->samples[i].text);
    buf_init(&j->out);
    j->created = (int64_t)time(NULL);
    pthread_mutex_lock(&s->mu);
    uint64_t seq = ++s->next_id;
    s->n_active++;
    pthread_mutex_unlock(&s->mu);
    cn->counted = true;
    snprintf(j->id, sizeof j->id, "%s-%016llx%08llx", kind == API_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)(s->started * 2654435761ULL ^ (uint64_t)(uintptr_t)s), (unsigned long long)seq);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = ci ? ci->connect_fd : -1;

    engine_request er = {
        .prompt = j->req.prompt.data, .n_prompt = (int32_t)j->req.prompt.len, .sp = j->req.sp,
        .stops = j->req.stops, .n_stops = j->req.n_stops, .n = j->req.n, .on_event = job_on_event, .user = j,
    };
    ai_err err = {0};
    ai_status st = engine_submit(s->e, &er, &j->rid, &err);
    if (st != AI_OK) {
        j->refs = 0; /* no event can follow a failed submit */
        job_free(j);
        submit_error(s, st, &err, &e);
        return send_error(c, &e);
    }

    if (j->req.stream) {
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, j,
                                                                   stream_free);
        if (!r) {
            job_drop(j);
            return MHD_NO;
        }
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream; charset=utf-8");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r); /* stream_free runs when MHD is done with it */
        return ret;
    }
    while (!j->finished) {
        if (!job_wait(j)) {
            job_drop(j);
            return MHD_NO; /* the client hung up: close */
        }
    }
    enum MHD_Result ret;
    if (j->failed) {
        api_fail(&e, 500, NULL, "%s", j->error);
        ret = send_error(c, &e);
    } else {
        ret = send_text(c, MHD_HTTP_OK, "application/json", job_response_json(j));
    }
    job_drop(j);
    return ret;
}

// --- routing -----------------------------------------------------------------------------

static bool key_ok(const server *s, struct MHD_Connection *c)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncmp(h, "Bearer ", 7)) return false;
    h += 7;
    size_t a = strlen(h), b = strlen(s->api_key);
    unsigned char diff = a != b;
    for (size_t i = 0; i < a && i < b; i++) diff |= (unsigned char)(h[i] ^ s->api_key[i]);
    return diff == 0;
}

/* First call: route, method, key, declared size. Returns MHD_NO only to drop the connection. */
static enum MHD_Result first_call(server *s, srv_conn *cn, struct MHD_Connection *c, const char *url,
                                  const char *method)
{
    bool path_known = false;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (strcmp(url, routes[i].path)) continue;
        path_known = true;
        if (!strcmp(method, routes[i].method)) cn->r = routes[i].r;
    }
    if (!path_known) {
        cn->has_error = true;
        api_fail(&cn->err, 404, NULL, "not found: %s %.200s", method, url);
    } else if (cn->r == R_NONE) {
        cn->has_error = true;
        api_fail(&cn->err, 405, NULL, "method %s not allowed for %.200s", method, url);
    } else if (s->api_key && !strncmp(url, "/v1/", 4) && !key_ok(s, c)) {
        cn->has_error = true;
        api_fail(&cn->err, 401, NULL, "missing or wrong API key (Authorization: Bearer KEY)");
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {
        unsigned long long n = strtoull(cl, NULL, 10);
        if (n > s->max_body) {
            cn->too_large = true;
            if (n > SRV_HARD_MAX_BODY) {
                api_error e;
                api_fail(&e, 413, NULL, "the body (%llu bytes) is larger than %zu bytes", n, s->max_body);
                return send_error(c, &e);
            }
        }
    }
    return MHD_YES;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    server *s = cls;
    srv_conn *cn = *con_cls;
    if (!cn) {
        cn = calloc(1, sizeof *cn);
        if (!cn) return MHD_NO;
        buf_init(&cn->body);
        *con_cls = cn;
        return first_call(s, cn, c, url, method);
    }
    if (*upload_size) {
        if (!cn->has_error && !cn->too_large) {
            if (cn->body.len + *upload_size > s->max_body) {
                cn->too_large = true;
                buf_free(&cn->body);
            } else {
                buf_append(&cn->body, upload, *upload_size);
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    api_error e;
    if (cn->has_error) return send_error(c, &cn->err);
    if (cn->too_large) {
        api_fail(&e, 413, NULL, "the body is larger than %zu bytes", s->max_body);
        return send_error(c, &e);
    }
    if (cn->body.oom) return send_text(c, 500, NULL, NULL);
    const char *body = cn->body.data ? cn->body.data : "";
    char *out;
    switch (cn->r) {
    case R_COMPLETIONS: return generate(s, cn, c, API_COMPLETION);
    case R_CHAT: return generate(s, cn, c, API_CHAT);
    case R_HEALTH:
        if (is_draining(s)) {
            api_fail(&e, 503, NULL, "the server is shutting down");
            return send_error(c, &e);
        }
        return send_text(c, MHD_HTTP_OK, "application/json", strdup("{\"status\":\"ok\"}"));
    case R_METRICS: {
        buf b;
        buf_init(&b);
        metrics_render(s->e, s->model_name, &b);
        if (b.oom) {
            buf_free(&b);
            return send_text(c, 500, NULL, NULL);
        }
        return send_text(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", buf_detach(&b));
    }
    case R_MODELS: return send_text(c, MHD_HTTP_OK, "application/json", api_models_json(s));
    case R_TOKENIZE:
    case R_DETOKENIZE:
        out = cn->r == R_TOKENIZE ? api_tokenize(s, body, cn->body.len, &e) : api_detokenize(s, body, cn->body.len, &e);
        return out ? send_text(c, MHD_HTTP_OK, "application/json", out) : send_error(c, &e);
    default: break;
    }
    api_fail(&e, 404, NULL, "not found");
    return send_error(c, &e);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    server *s = cls;
    srv_conn *cn = *con_cls;
    if (!cn) return;
    if (cn->counted) {
        pthread_mutex_lock(&s->mu);
        s->n_active--;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
    buf_free(&cn->body);
    free(cn);
    *con_cls = NULL;
}

// --- lifecycle --------------------------------------------------------------------------------

ai_status server_init(server **out, engine *e, const tokenizer *tok, const server_params *p, ai_err *err)
{
    *out = NULL;
    if (!p->model_name || !p->model_name[0]) return ai_err_set(err, AI_ERR_INVALID, "server: model_name is required");
    if (p->port < 0 || p->port > 65535) return ai_err_set(err, AI_ERR_RANGE, "server: port %d outside [0, 65535]", p->port);
    server *s = calloc(1, sizeof *s);
    if (!s) return ai_err_set(err, AI_ERR_NOMEM, "server: out of memory");
    s->e = e;
    s->tok = tok;
    s->port = p->port;
    s->max_body = p->max_body ? p->max_body : SRV_DEFAULT_MAX_BODY;
    s->host = strdup(p->host ? p->host : "127.0.0.1");
    s->model_name = strdup(p->model_name);
    s->api_key = p->api_key ? strdup(p->api_key) : NULL;
    s->started = (int64_t)time(NULL);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (!s->host || !s->model_name || (p->api_key && !s->api_key)) {
        server_free(s);
        return ai_err_set(err, AI_ERR_NOMEM, "server: out of memory");
    }
    ai_err cerr = {0};
    /* no template (or one we cannot parse): chat requests answer 400, completions still work */
    if (p->model_path && chat_prompt_load(&s->chat, p->model_path, &cerr) == AI_OK) s->has_chat = true;
    *out = s;
    return AI_OK;
}

ai_status server_run(server *s, ai_err *err)
{
    if (s->daemon) return ai_err_set(err, AI_ERR_INVALID, "server: already running");
    char port[16];
    snprintf(port, sizeof port, "%d", s->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    int rc = getaddrinfo(s->host, port, &hints, &ai);
    if (rc != 0 || !ai) return ai_err_set(err, AI_ERR_INVALID, "server: host '%s': %s", s->host, gai_strerror(rc));
    unsigned flags = MHD_USE_AUTO | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    s->daemon = MHD_start_daemon(flags, (uint16_t)s->port, NULL, NULL, handle, s,
                                 MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                                 MHD_OPTION_NOTIFY_COMPLETED, completed, s,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)1000,
                                 MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)256 * 1024,
                                 MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1,
                                 MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->daemon) return ai_err_set(err, AI_ERR_IO, "server: cannot listen on %s:%d (port in use?)", s->host, s->port);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    if (di && di->port) s->port = di->port;
    return AI_OK;
}

int server_port(const server *s)
{
    return s->port;
}

void server_stop(server *s)
{
    if (!s->daemon) return;
    pthread_mutex_lock(&s->mu);
    s->draining = true;
    pthread_mutex_unlock(&s->mu);
    engine_drain(s->e);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += SRV_STOP_WAIT_S;
    pthread_mutex_lock(&s->mu);
    while (s->n_active > 0)
        if (pthread_cond_timedwait(&s->cv, &s->mu, &until) == ETIMEDOUT) break;
    pthread_mutex_unlock(&s->mu);
    MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
}

void server_free(server *s)
{
    if (!s) return;
    if (s->daemon) MHD_stop_daemon(s->daemon);
    if (s->has_chat) chat_prompt_free(&s->chat);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->host);
    free(s->model_name);
    free(s->api_key);
    free(s);
}
