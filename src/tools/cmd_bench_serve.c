/* cmd_bench_serve.c - `aiinfra bench serve`: a load generator for an OpenAI-compatible completions
 * server, reporting what vLLM's `vllm bench serve` reports (same metric names).
 *
 *   aiinfra bench serve --url URL [--endpoint /v1/completions] [--model NAME] [--api-key KEY]
 *       [--dataset random|PATH] [--num-prompts N] [--request-rate R|inf] [--max-concurrency C]
 *       [--input-len I] [--output-len O] [--ignore-eos] [--seed S] [--timeout SEC]
 *       [--max-duration SEC] [--goodput ttft:MS tpot:MS e2el:MS] [--json]
 *
 * Design:
 *   - One thread drives every stream through libcurl's multi interface in its event-driven form
 *     (curl_multi_socket_action over an epoll set: a wake-up costs the ready sockets, not all
 *     streams: against the mock, 256 streams cost 46-48 us of client CPU per token chunk this way and
 *     84-110 us with curl_multi_perform + poll; the rest is the kernel and libcurl). A write
 *     callback feeds the incremental SSE parser (bench_serve_sse.c) and timestamps each token chunk
 *     (CLOCK_MONOTONIC) as it arrives.
 *   - Request i is due at its arrival offset (Poisson, bench_serve_data.c) and starts at the first
 *     moment it is due and fewer than C requests are in flight (vLLM's semaphore semantics).
 *   - Each request carries "stream": true and "stream_options": {"include_usage": true}, and
 *     "ignore_eos": true for the random dataset (or with --ignore-eos) so outputs have the asked
 *     length; output tokens are usage.completion_tokens when the server sends usage, else the
 *     non-empty chunks. Without --model the first id of GET /v1/models is sent (as vLLM does).
 *   - TTFT = first non-empty chunk - start; ITL = every gap between consecutive non-empty chunks;
 *     TPOT = (E2EL - TTFT) / (output tokens - 1) for outputs of 2+ tokens; E2EL = end - start.
 *
 * Invariants:
 *   1. A request is "completed" only with HTTP 200, a clean transfer, every data event valid JSON,
 *      at least one token chunk and a final "data: [DONE]"; anything else is "failed" with a reason
 *      and contributes nothing to the latency statistics.
 *   2. Nothing waits without a bound: each transfer has --timeout, and the run has a deadline
 *      (--max-duration, default: last arrival + ceil(N / C) * timeout + 10 s); at the deadline every
 *      unfinished request is failed and the summary is still printed.
 *   3. Exit status: 0 when the run happened (whatever failed), 2 on bad arguments, 1 when it could
 *      not start (unreadable dataset, libcurl init failure).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sys/epoll.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include "aiinfra/buf.h"
#include "tools/bench_serve_data.h"
#include "tools/bench_serve_sse.h"
#include "tools/bench_serve_stats.h"
#include "tools/cli.h"
#include "tools/commands.h"


enum { MAX_ERROR_KINDS = 16, SSE_MAX_LINE = 1 << 20 };

typedef struct bs_opts {
    const char *url, *endpoint, *model, *api_key, *dataset;
    int num_prompts, max_concurrency, input_len, output_len;
    double request_rate, timeout_s, max_duration_s;
    bool ignore_eos, json;
    uint64_t seed;
    bs_slo slo;
} bs_opts;

/* The whole run: options, data, results and the multi handle. */
typedef struct bs_run {
    const bs_opts *o;
    bs_dataset data;
    char *full_url;
    const char *model; /* o->model or the server's first /v1/models entry; NULL = not sent */
    char *model_owned;
    struct curl_slist *headers;
    CURLM *multi;
    struct timespec t0;
    bs_result *res;  /* (N) */
    double *itl;     /* all inter-token gaps of completed requests, seconds */
    size_t n_itl, cap_itl;
    bs_errkind errs[MAX_ERROR_KINDS];
    int n_errkinds;
    int peak_active; /* most requests in flight at once */
    int epfd;         /* epoll set of libcurl's sockets */
    double timer_due; /* when libcurl wants its timeout action (seconds since t0; INFINITY = never) */
    double end_t; /* time of the last completion */
} bs_run;

/* One request in flight. */
typedef struct bs_req {
    bs_run *run;
    int idx;
    CURL *easy;
    char *body;
    double t_start, t_first, t_last;
    double *itl; /* gaps between this request's token chunks */
    size_t n_itl, cap_itl;
    long n_chunks, usage_prompt, usage_completion;
    long http;
    bool done_seen, failed;
    char err[96];
    bs_sse sse;
} bs_req;

static double now_s(const bs_run *r)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - r->t0.tv_sec) + (double)(t.tv_nsec - r->t0.tv_nsec) * 1e-9;
}

// --- arguments

static int usage(void)
{
    fprintf(stderr,
            "usage: aiinfra bench serve --url URL [--endpoint /v1/completions] [--model NAME] [--api-key KEY]\n"
            "         [--dataset random|PATH] [--num-prompts N] [--request-rate R|inf] [--max-concurrency C]\n"
            "         [--input-len I] [--output-len O] [--ignore-eos] [--seed S] [--timeout SEC]\n"
            "         [--max-duration SEC] [--goodput ttft:MS tpot:MS e2el:MS] [--json]\n"
            "  PATH: ShareGPT-style JSON [{\"conversations\": [{\"from\": \"human\", \"value\": ...},\n"
            "        {\"from\": \"gpt\", \"value\": ...}]}]; output length ceil(chars / 4) unless --output-len\n");
    return 2;
}

static bool parse_args(int argc, char **argv, bs_opts *o)
{
    *o = (bs_opts){.endpoint = "/v1/completions", .dataset = "random", .num_prompts = 1000, .input_len = 1024,
                   .output_len = -1, .request_rate = INFINITY, .timeout_s = 300};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double d;
        if (!strcmp(a, "--json")) o->json = true;
        else if (!strcmp(a, "--ignore-eos")) o->ignore_eos = true;
        else if (!strcmp(a, "--goodput")) {
            int k = 0;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) {
                if (!bs_slo_parse(argv[++i], &o->slo)) {
                    fprintf(stderr, "bench serve: bad --goodput item '%s' (want ttft:MS, tpot:MS or e2el:MS)\n",
                            argv[i]);
                    return false;
                }
                k++;
            }
            if (!k) return false;
        } else if (!v) {
            fprintf(stderr, "bench serve: unknown option or missing value: %s\n", a);
            return false;
        } else {
            i++;
            if (!strcmp(a, "--url") || !strcmp(a, "--base-url")) o->url = v;
            else if (!strcmp(a, "--endpoint")) o->endpoint = v;
            else if (!strcmp(a, "--model")) o->model = v;
            else if (!strcmp(a, "--api-key")) o->api_key = v;
            else if (!strcmp(a, "--dataset") || !strcmp(a, "--dataset-path")) o->dataset = v;
            else if (!strcmp(a, "--num-prompts") && cli_parse_num(v, 1, 1e7, &d)) o->num_prompts = (int)d;
            else if (!strcmp(a, "--max-concurrency") && cli_parse_num(v, 1, 1e6, &d)) o->max_concurrency = (int)d;
            else if (!strcmp(a, "--input-len") && cli_parse_num(v, 1, 1e6, &d)) o->input_len = (int)d;
            else if (!strcmp(a, "--output-len") && cli_parse_num(v, 1, 1e7, &d)) o->output_len = (int)d;
            else if (!strcmp(a, "--seed") && cli_parse_num(v, 0, 1e15, &d)) o->seed = (uint64_t)d;
            else if (!strcmp(a, "--timeout") && cli_parse_num(v, 1e-3, 1e6, &d)) o->timeout_s = d;
            else if (!strcmp(a, "--max-duration") && cli_parse_num(v, 1e-3, 1e7, &d)) o->max_duration_s = d;
            else if (!strcmp(a, "--request-rate") && !strcmp(v, "inf")) o->request_rate = INFINITY;
            else if (!strcmp(a, "--request-rate") && cli_parse_num(v, 1e-6, 1e9, &d)) o->request_rate = d;
            else {
                fprintf(stderr, "bench serve: bad option or value: %s %s\n", a, v);
                return false;
            }
        }
    }
    if (!o->url || (strncmp(o->url, "http://", 7) && strncmp(o->url, "https://", 8))) {
        fprintf(stderr, "bench serve: --url http://HOST:PORT is required\n");
        return false;
    }
    if (o->endpoint[0] != '/') {
        fprintf(stderr, "bench serve: --endpoint must start with '/'\n");
        return false;
    }
    return true;
}

// --- errors

static void count_error(bs_run *run, const char *what)
{
    for (int k = 0; k < run->n_errkinds; k++)
        if (!strcmp(run->errs[k].what, what)) {
            run->errs[k].count++;
            return;
        }
    /* the last slot collects every reason beyond the first MAX_ERROR_KINDS - 1 */
    int k = run->n_errkinds < MAX_ERROR_KINDS - 1 ? run->n_errkinds++ : MAX_ERROR_KINDS - 1;
    if (k == MAX_ERROR_KINDS - 1) {
        snprintf(run->errs[k].what, sizeof run->errs[k].what, "other");
        run->n_errkinds = MAX_ERROR_KINDS;
    } else {
        snprintf(run->errs[k].what, sizeof run->errs[k].what, "%s", what);
    }
    run->errs[k].count++;
}

static void req_fail(bs_req *q, const char *fmt, const char *arg)
{
    if (q->failed) return; /* the first reason wins */
    q->failed = true;
    snprintf(q->err, sizeof q->err, fmt, arg ? arg : "");
}

// --- one stream: SSE events -> timestamps

static bool push_gap(double **v, size_t *n, size_t *cap, double x)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        double *nv = realloc(*v, nc * sizeof *nv);
        if (!nv) return false;
        *v = nv;
        *cap = nc;
    }
    (*v)[(*n)++] = x;
    return true;
}

static bool on_event(void *user, const char *data, size_t len)
{
    bs_req *q = user;
    if (q->done_seen) return true; /* nothing counts after [DONE] */
    if (len == 6 && !memcmp(data, "[DONE]", 6)) {
        q->done_seen = true;
        return true;
    }
    cJSON *j = cJSON_ParseWithLength(data, len);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        req_fail(q, "malformed SSE: data event is not a JSON object", NULL);
        return false;
    }
    bool ok = true;
    const cJSON *error = cJSON_GetObjectItemCaseSensitive(j, "error");
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(j, "choices");
    const cJSON *usage = cJSON_GetObjectItemCaseSensitive(j, "usage");
    if (error && !cJSON_IsNull(error)) {
        req_fail(q, "server error event in the stream", NULL);
        ok = false;
    } else if (cJSON_IsArray(choices) && cJSON_GetArraySize(choices) > 0) {
        const cJSON *c0 = cJSON_GetArrayItem(choices, 0);
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(c0, "text");
        if (!text) text = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c0, "delta"), "content");
        if (text && !cJSON_IsString(text) && !cJSON_IsNull(text)) {
            req_fail(q, "malformed SSE: choices[0].text is not a string", NULL);
            ok = false;
        } else if (cJSON_IsString(text) && text->valuestring[0]) {
            double t = now_s(q->run);
            if (q->n_chunks == 0) q->t_first = t;
            else if (!push_gap(&q->itl, &q->n_itl, &q->cap_itl, t - q->t_last)) {
                req_fail(q, "out of memory", NULL);
                ok = false;
            }
            q->t_last = t;
            q->n_chunks++;
        }
    }
    if (ok && cJSON_IsObject(usage)) {
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(usage, "completion_tokens");
        const cJSON *pt = cJSON_GetObjectItemCaseSensitive(usage, "prompt_tokens");
        if (cJSON_IsNumber(ct) && ct->valuedouble >= 0) q->usage_completion = (long)ct->valuedouble;
        if (cJSON_IsNumber(pt) && pt->valuedouble >= 0) q->usage_prompt = (long)pt->valuedouble;
    }
    cJSON_Delete(j);
    return ok;
}

static size_t on_write(char *p, size_t size, size_t nmemb, void *user)
{
    bs_req *q = user;
    size_t n = size * nmemb;
    if (!q->http) curl_easy_getinfo(q->easy, CURLINFO_RESPONSE_CODE, &q->http);
    if (q->http != 200 || q->failed) return n; /* an error body: drained, not parsed */
    const char *why = NULL;
    if (!bs_sse_feed(&q->sse, p, n, on_event, q, &why)) {
        if (why) req_fail(q, "malformed SSE: %s", why);
        return 0; /* aborts the transfer (CURLE_WRITE_ERROR) */
    }
    return n;
}

// --- starting and finishing requests

static char *request_body(const bs_run *run, int i)
{
    const bs_opts *o = run->o;
    bool chat = strstr(o->endpoint, "chat/completions") != NULL;
    cJSON *b = cJSON_CreateObject();
    if (run->model) cJSON_AddStringToObject(b, "model", run->model);
    if (chat) {
        cJSON *msgs = cJSON_AddArrayToObject(b, "messages");
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", run->data.prompt[i]);
        cJSON_AddItemToArray(msgs, m);
    } else {
        cJSON_AddStringToObject(b, "prompt", run->data.prompt[i]);
    }
    cJSON_AddNumberToObject(b, "max_tokens", run->data.output_len[i]);
    cJSON_AddNumberToObject(b, "temperature", 0.0);
    cJSON_AddBoolToObject(b, "stream", true);
    cJSON *so = cJSON_AddObjectToObject(b, "stream_options");
    cJSON_AddBoolToObject(so, "include_usage", true);
    if (o->ignore_eos || !strcmp(o->dataset, "random")) cJSON_AddBoolToObject(b, "ignore_eos", true);
    char *s = cJSON_PrintUnformatted(b);
    cJSON_Delete(b);
    return s;
}

static void req_free(bs_req *q)
{
    if (q->easy) curl_easy_cleanup(q->easy);
    cJSON_free(q->body);
    free(q->itl);
    bs_sse_free(&q->sse);
    free(q);
}

/* Books a finished transfer (rc = curl's result) into run->res and frees q. */
static void req_finish(bs_run *run, bs_req *q, CURLcode rc)
{
    double t_end = now_s(run);
    curl_multi_remove_handle(run->multi, q->easy);
    if (!q->failed) {
        long http = 0;
        curl_easy_getinfo(q->easy, CURLINFO_RESPONSE_CODE, &http);
        char code[32];
        snprintf(code, sizeof code, "%ld", http);
        const char *why = NULL;
        if (rc == CURLE_OPERATION_TIMEDOUT) req_fail(q, "timeout (--timeout)", NULL);
        else if (rc != CURLE_OK) req_fail(q, "%s", curl_easy_strerror(rc));
        else if (http != 200) req_fail(q, "HTTP %s", code);
        else if (!bs_sse_finish(&q->sse, on_event, q, &why)) req_fail(q, "malformed SSE: %s", why ? why : "?");
        else if (!q->done_seen) req_fail(q, "stream ended without data: [DONE]", NULL);
        else if (q->n_chunks == 0) req_fail(q, "stream carried no token", NULL);
    }
    bs_result *r = &run->res[q->idx];
    if (q->failed) {
        count_error(run, q->err);
    } else {
        r->ok = true;
        r->ttft = q->t_first - q->t_start;
        r->e2el = t_end - q->t_start;
        r->out_tokens = q->usage_completion >= 0 ? q->usage_completion : q->n_chunks;
        r->prompt_from_usage = q->usage_prompt >= 0;
        r->prompt_tokens = r->prompt_from_usage ? q->usage_prompt : run->data.prompt_est[q->idx];
        for (size_t k = 0; k < q->n_itl; k++)
            if (!push_gap(&run->itl, &run->n_itl, &run->cap_itl, q->itl[k])) break;
    }
    if (t_end > run->end_t) run->end_t = t_end;
    req_free(q);
}

/* Starts request i; NULL when it could not even be started (then already booked as failed). */
static bs_req *req_start(bs_run *run, int i)
{
    bs_req *q = calloc(1, sizeof *q);
    if (!q) {
        count_error(run, "out of memory");
        return NULL;
    }
    q->run = run;
    q->idx = i;
    q->usage_prompt = q->usage_completion = -1;
    bs_sse_init(&q->sse, SSE_MAX_LINE);
    q->body = request_body(run, i);
    q->easy = curl_easy_init();
    if (!q->body || !q->easy) {
        count_error(run, "out of memory");
        req_free(q);
        return NULL;
    }
    CURL *e = q->easy;
    long timeout_ms = (long)ceil(run->o->timeout_s * 1000);
    curl_easy_setopt(e, CURLOPT_URL, run->full_url);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, q->body);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, run->headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, q);
    curl_easy_setopt(e, CURLOPT_PRIVATE, q);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 10000 ? timeout_ms : 10000L);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    q->t_start = now_s(run);
    if (curl_multi_add_handle(run->multi, e) != CURLM_OK) {
        count_error(run, "curl_multi_add_handle failed");
        req_free(q);
        return NULL;
    }
    return q;
}

// --- the run

static size_t collect(char *p, size_t size, size_t nmemb, void *user)
{
    buf *b = user;
    size_t n = size * nmemb;
    if (b->len + n > (1u << 20)) return 0;
    buf_append(b, p, n);
    return b->oom ? 0 : n;
}

/* GET {url}/v1/models and take data[0].id (what vLLM does without --model); NULL when unavailable. */
static char *fetch_model(const bs_opts *o, const char *base)
{
    CURL *e = curl_easy_init();
    if (!e) return NULL;
    buf url, body;
    buf_init(&url);
    buf_init(&body);
    buf_printf(&url, "%s/v1/models", base);
    struct curl_slist *h = NULL;
    char auth[512];
    if (o->api_key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", o->api_key);
        h = curl_slist_append(h, auth);
    }
    long ms = (long)ceil(fmin(o->timeout_s, 10) * 1000);
    curl_easy_setopt(e, CURLOPT_URL, url.data);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, ms);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    long http = 0;
    char *id = NULL;
    if (!url.oom && curl_easy_perform(e) == CURLE_OK && !curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &http) &&
        http == 200 && body.len) {
        cJSON *j = cJSON_ParseWithLength(body.data, body.len);
        const cJSON *d0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "data"), 0);
        const cJSON *idj = cJSON_GetObjectItemCaseSensitive(d0, "id");
        if (cJSON_IsString(idj)) id = strdup(idj->valuestring);
        cJSON_Delete(j);
    }
    curl_slist_free_all(h);
    curl_easy_cleanup(e);
    buf_free(&url);
    buf_free(&body);
    return id;
}

/* libcurl asks to watch socket s for `what`: mirror it into the epoll set. */
static int on_socket(CURL *e, curl_socket_t s, int what, void *user, void *socketp)
{
    bs_run *run = user;
    if (what == CURL_POLL_REMOVE) {
        epoll_ctl(run->epfd, EPOLL_CTL_DEL, s, NULL); /* may already be closed: ignored */
        return 0;
    }
    struct epoll_event ev = {.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0u) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0u),
                             .data.fd = s};
    if (epoll_ctl(run->epfd, EPOLL_CTL_MOD, s, &ev) && errno == ENOENT) epoll_ctl(run->epfd, EPOLL_CTL_ADD, s, &ev);
    return 0;
}

/* libcurl wants curl_multi_socket_action(CURL_SOCKET_TIMEOUT) after ms (-1: no timer). */
static int on_timer(CURLM *m, long ms, void *user)
{
    bs_run *run = user;
    run->timer_due = ms < 0 ? INFINITY : now_s(run) + (double)ms * 1e-3;
    return 0;
}

/* Books every transfer libcurl reports as done; returns how many. */
static int drain_done(bs_run *run, bs_req **live)
{
    CURLMsg *m;
    int left, done = 0;
    while ((m = curl_multi_info_read(run->multi, &left))) {
        if (m->msg != CURLMSG_DONE) continue;
        bs_req *q = NULL;
        CURLcode rc = m->data.result;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&q);
        live[q->idx] = NULL;
        req_finish(run, q, rc);
        done++;
    }
    return done;
}

/* Drives every request to completion or to the deadline: an epoll loop over libcurl's sockets
 * (curl_multi_socket_action), so each wake-up costs the sockets that are ready, not all streams. */
static void run_requests(bs_run *run, const double *arrival)
{
    const bs_opts *o = run->o;
    int n = run->data.n, cmax = o->max_concurrency > 0 ? o->max_concurrency : n;
    double deadline = o->max_duration_s > 0
                          ? o->max_duration_s
                          : arrival[n - 1] + ceil((double)n / cmax) * o->timeout_s + 10;
    bs_req **live = calloc((size_t)n, sizeof *live);
    int next = 0, active = 0, finished = 0, running = 0;
    enum { MAX_EVENTS = 64 };
    struct epoll_event evs[MAX_EVENTS];
    run->timer_due = INFINITY;
    run->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (!live || run->epfd < 0) {
        for (int i = 0; i < n; i++) count_error(run, "out of memory or epoll_create1 failed");
        free(live);
        return;
    }
    curl_multi_setopt(run->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(run->multi, CURLMOPT_SOCKETDATA, run);
    curl_multi_setopt(run->multi, CURLMOPT_TIMERFUNCTION, on_timer);
    curl_multi_setopt(run->multi, CURLMOPT_TIMERDATA, run);
    clock_gettime(CLOCK_MONOTONIC, &run->t0);
    while (finished < n) {
        double t = now_s(run);
        if (t >= deadline) break;
        while (next < n && active < cmax && arrival[next] <= t) {
            bs_req *q = req_start(run, next);
            if (q) live[next] = q, active++;
            else finished++;
            next++;
        }
        if (active > run->peak_active) run->peak_active = active;
        if (run->timer_due <= now_s(run)) {
            run->timer_due = INFINITY;
            curl_multi_socket_action(run->multi, CURL_SOCKET_TIMEOUT, 0, &running);
        }
        int done = drain_done(run, live);
        active -= done, finished += done;
        if (finished >= n) break;
        if (done) continue; /* slots freed: start what is due before sleeping */
        t = now_s(run);
        double wait = fmin(0.1, run->timer_due - t); /* wake at least every 100 ms to check the deadline */
        if (next < n && active < cmax) wait = fmin(wait, arrival[next] - t);
        wait = fmin(wait, deadline - t);
        int k = epoll_wait(run->epfd, evs, MAX_EVENTS, wait > 0 ? (int)ceil(wait * 1000) : 0);
        for (int i = 0; i < k; i++) {
            int flags = ((evs[i].events & EPOLLIN) ? CURL_CSELECT_IN : 0) |
                        ((evs[i].events & EPOLLOUT) ? CURL_CSELECT_OUT : 0) |
                        ((evs[i].events & (EPOLLERR | EPOLLHUP)) ? CURL_CSELECT_ERR : 0);
            curl_multi_socket_action(run->multi, evs[i].data.fd, flags, &running);
        }
        done = drain_done(run, live);
        active -= done, finished += done;
    }
    for (int i = 0; i < n; i++) /* only at the deadline: what is still in flight or unsent */
        if (live[i]) {
            req_fail(live[i], "aborted at the run deadline (--max-duration)", NULL);
            req_finish(run, live[i], CURLE_OK);
        }
    for (int i = next; i < n; i++) count_error(run, "not sent before the run deadline (--max-duration)");
    double t = now_s(run);
    if (finished < n && t > run->end_t) run->end_t = t;
    close(run->epfd);
    run->epfd = -1;
    free(live);
}

// --- the command

static void run_free(bs_run *run)
{
    if (run->multi) curl_multi_cleanup(run->multi);
    curl_slist_free_all(run->headers);
    bs_dataset_free(&run->data);
    free(run->full_url);
    free(run->model_owned);
    free(run->res);
    free(run->itl);
}

int cmd_bench_serve(int argc, char **argv)
{
    bs_opts o;
    if (!parse_args(argc, argv, &o)) return usage();
    bool random = !strcmp(o.dataset, "random");
    bs_run run = {.o = &o};
    ai_err err = {0};
    ai_status st = random ? bs_dataset_random(&run.data, o.num_prompts, o.input_len,
                                              o.output_len > 0 ? o.output_len : 128, o.seed, &err)
                          : bs_dataset_sharegpt(&run.data, o.dataset, o.num_prompts, o.output_len, o.seed, &err);
    if (st) {
        fprintf(stderr, "bench serve: %s\n", err.msg);
        return 1;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "bench serve: curl_global_init failed\n");
        bs_dataset_free(&run.data);
        return 1;
    }
    int n = run.data.n, rc = 1;
    size_t base_len = strlen(o.url);
    while (base_len && o.url[base_len - 1] == '/') base_len--;
    buf url;
    buf_init(&url);
    buf_printf(&url, "%.*s%s", (int)base_len, o.url, o.endpoint);
    run.full_url = buf_detach(&url);
    char *base = strndup(o.url, base_len);
    run.model = o.model;
    if (!run.model && base) run.model = run.model_owned = fetch_model(&o, base);
    free(base);
    char auth[600];
    run.headers = curl_slist_append(NULL, "Content-Type: application/json");
    run.headers = curl_slist_append(run.headers, "Accept: text/event-stream");
    run.headers = curl_slist_append(run.headers, "Expect:"); /* no 100-continue round trip */
    if (o.api_key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", o.api_key);
        run.headers = curl_slist_append(run.headers, auth);
    }
    run.multi = curl_multi_init();
    run.res = calloc((size_t)n, sizeof *run.res);
    double *arrival = malloc((size_t)n * sizeof *arrival);
    if (!run.full_url || !run.headers || !run.multi || !run.res || !arrival) {
        fprintf(stderr, "bench serve: out of memory or libcurl failure while setting up\n");
        goto done;
    }
    bs_arrivals(arrival, n, o.request_rate, o.seed);
    if (!o.json)
        fprintf(stderr, "bench serve: %d requests to %s (model %s), rate %s, max concurrency %d\n", n, run.full_url,
                run.model ? run.model : "(none)", isfinite(o.request_rate) ? "poisson" : "inf",
                o.max_concurrency > 0 ? o.max_concurrency : n);
    run_requests(&run, arrival);
    bs_metrics m;
    bs_metrics_compute(run.res, n, run.itl, run.n_itl, &o.slo, run.end_t, &m);
    m.peak_concurrency = run.peak_active;
    bs_config cfg = {.url = o.url, .endpoint = o.endpoint, .model = run.model, .dataset = o.dataset,
                     .request_rate = o.request_rate, .max_concurrency = o.max_concurrency, .slo = o.slo,
                     .errs = run.errs, .n_errs = run.n_errkinds};
    bs_report_print(&cfg, &m, o.json);
    rc = 0;
done:
    free(arrival);
    run_free(&run);
    curl_global_cleanup();
    return rc;
}
