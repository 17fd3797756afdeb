/* server_internal.h - what server.c (HTTP, threads), api.c (request JSON), api_response.c (response
 * JSON) and metrics.c (Prometheus text) share.
 *
 * A generation request is a `srv_job`, shared by two owners:
 *   - the connection thread that parsed it and writes its response,
 *   - the engine, from engine_submit until the request's terminal event (every sample DONE, or ERROR).
 * Invariants:
 *  1. job->refs counts those owners; whoever drops it to 0 frees the job (under no lock).
 *  2. the engine callback (engine thread) only appends a copied event to job->head/tail under job->mu
 *     and signals job->cv: it never blocks on the connection and never touches connection state;
 *  3. the connection thread alone pops events and folds them into the per-sample state and output;
 *  4. a connection that goes away before the terminal event calls engine_abort(rid) and drops its ref;
 *     the job lives on until the engine's terminal event arrives.
 */
#ifndef AIINFRA_SERVER_INTERNAL_H
#define AIINFRA_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "aiinfra/buf.h"
#include "aiinfra/engine.h"
#include "aiinfra/generate.h"
#include "aiinfra/server.h"
#include "aiinfra/tokenizer.h"

#define SRV_MAX_N 16          /* samples per request (engine.h: n in 1..16) */
#define SRV_MAX_STOPS 16      /* stop strings per request */
#define SRV_MAX_STOP_IDS 256  /* stop_token_ids per request */
#define SRV_MAX_BIAS 1024     /* logit_bias entries per request (OpenAI: 300) */

struct server {
    engine *e;                 /* borrowed */
    const tokenizer *tok;      /* borrowed */
    chat_prompt chat;          /* the model's chat template, when has_chat */
    bool has_chat;
    char *host, *api_key, *model_name;
    int port;
    size_t max_body;
    int64_t started;           /* unix seconds, "created" of /v1/models */
    void *daemon;              /* struct MHD_Daemon * */
    pthread_mutex_t mu;        /* guards the fields below */
    pthread_cond_t cv;
    bool draining;             /* set by server_stop: /health and new work answer 503 */
    int64_t n_active;          /* requests whose response is not yet fully sent */
    uint64_t next_id;          /* for response ids */
};

// --- errors ---------------------------------------------------------------------

typedef struct api_error {
    int status;                /* HTTP status */
    const char *type;          /* OpenAI error type ("invalid_request_error", ...) */
    const char *code;          /* NULL or a code ("model_not_found", ...) */
    char param[64];            /* the offending field, "" = null */
    char message[512];
    int retry_after;           /* seconds for 429, 0 = no header */
} api_error;

/* Sets e (status -> type) and returns false, so parsers can `return api_fail(...)`. */
bool api_fail(api_error *e, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* {"error": {"message", "type", "param", "code"}}; NULL on out-of-memory. */
char *api_error_json(const api_error *e);

// --- requests (api.c) -------------------------------------------------------------

typedef enum api_kind { API_COMPLETION = 0, API_CHAT } api_kind;

typedef struct api_req {
    api_kind kind;
    cJSON *root;               /* the parsed body; stops point into it */
    tok_ids prompt;
    char *echo;                /* prompt text for echo (completions), or NULL */
    size_t echo_len;
    sampler_params sp;         /* sp.logit_bias / stop_token_ids point at bias / stop_ids */
    sampler_bias *bias;        /* (n_bias) */
    int32_t *stop_ids;         /* (n_stop_ids) */
    const char *stops[SRV_MAX_STOPS];
    size_t n_stops;
    int32_t n;                 /* samples, 1..16 */
    bool stream, include_usage;
    int32_t logprobs;          /* -1 none; else top alternatives (completions: logprobs, chat: top_logprobs) */
} api_req;

/* Parses and validates a /v1/completions or /v1/chat/completions body, renders the chat template,
 * tokenizes. false with e filled (400/404) on a bad request. The caller frees r with api_req_free in both
 * cases (r starts zeroed). body[len] must be NUL (the request buffer is; cJSON is asked to see it). */
bool api_parse_generate(server *s, api_kind kind, const char *body, size_t len, api_req *r, api_error *e);
void api_req_free(api_req *r);

/* /tokenize and /detokenize: the response body, or NULL with e filled. */
char *api_tokenize(server *s, const char *body, size_t len, api_error *e);
char *api_detokenize(server *s, const char *body, size_t len, api_error *e);
char *api_models_json(server *s);

// --- jobs and responses (api_response.c) -------------------------------------------

/* An engine event, copied off the engine thread. */
typedef struct srv_event {
    struct srv_event *next;
    engine_ev_kind kind;
    int32_t index, token;
    float logprob;
    int32_t n_top;
    engine_logprob top[SAMPLER_MAX_LOGPROBS];
    engine_finish finish;
    int32_t n_prompt, n_completion, n_cached;
    size_t len;
    char text[];               /* (len + 1): TOKEN text or ERROR message */
} srv_event;

typedef struct srv_sample {
    buf text;                  /* non-stream: the completion text */
    cJSON *lp;                 /* non-stream logprobs object, or NULL */
    size_t text_off;           /* completions text_offset of the next token */
    engine_finish finish;
    int32_t n_completion;
    bool started, done;        /* stream: first chunk (role/echo) sent; DONE seen */
} srv_sample;

typedef struct srv_job {
    server *srv;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_event *head, *tail;    /* under mu: events not yet taken by the connection */
    int refs;                  /* under mu: connection + engine (invariant 1) */
    int32_t engine_done;       /* under mu: DONE events seen by the callback */
    bool engine_over;          /* under mu: terminal event delivered */
    uint64_t rid;
    api_req req;
    char id[64];
    int64_t created;
    /* connection side only (invariant 3) */
    int fd;                    /* the client socket, to notice a hang-up while waiting */
    srv_sample samples[SRV_MAX_N];
    int32_t n_done;
    int32_t n_prompt, n_cached;
    bool failed;               /* an ERROR event arrived */
    char error[512];
    bool finished;             /* every sample done or failed: nothing more will come */
    buf out;                   /* stream: SSE bytes not yet handed to MHD */
    size_t out_off;
    bool ended;                /* stream: [DONE] written */
} srv_job;

/* Folds one event into the job (connection thread). Streaming jobs append SSE chunks to job->out. */
void job_apply(srv_job *j, const srv_event *ev);
/* The non-stream response body after job->finished; NULL on out-of-memory. */
char *job_response_json(srv_job *j);
/* Stream: the closing chunks (usage when asked, error when failed) and "data: [DONE]". */
void job_stream_end(srv_job *j);

// --- metrics (metrics.c) ------------------------------------------------------------

/* Prometheus text exposition of the engine's metrics, vLLM's names, label model_name. */
void metrics_render(engine *e, const char *model_name, buf *out);

#endif
