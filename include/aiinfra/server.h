/* server.h - the OpenAI-compatible HTTP front end of the serving engine (`aiinfra serve`).
 *
 * One libmicrohttpd daemon, one thread per connection. A generation request is parsed and tokenized on
 * its connection's thread, submitted to the engine, and its events (delivered on the engine thread)
 * are queued per request; the connection thread waits on that queue and writes the JSON response or the
 * SSE stream. Endpoints: /v1/completions, /v1/chat/completions, /v1/models, /health, /metrics,
 * /tokenize, /detokenize (see src/server/server.c for the HTTP side, api.c for the JSON).
 *
 * Lifecycle:
 *     server_init (engine, tokenizer and chat template borrowed/loaded; nothing listens yet)
 *       -> server_run (binds host:port, serves on MHD's threads, returns at once)
 *       -> server_stop (drain: /health and new requests answer 503, requests in flight complete,
 *                       their responses are written, then the daemon stops)
 *       -> server_free
 * The engine, model and tokenizer must outlive the server; the server never frees them.
 */
#ifndef AIINFRA_SERVER_H
#define AIINFRA_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "aiinfra/engine.h"
#include "aiinfra/status.h"
#include "aiinfra/tokenizer.h"

typedef struct server server;

typedef struct server_params {
    const char *host;        /* NULL = "127.0.0.1" */
    int port;                /* 0 = any free port (server_port tells which) */
    const char *api_key;     /* NULL = no authentication; else /v1/... need "Authorization: Bearer KEY" */
    const char *model_name;  /* the name clients use ("model"); required */
    const char *model_path;  /* where the chat template is read from (GGUF or HF folder); NULL = none */
    size_t max_body;         /* request body cap in bytes, beyond: 413; 0 = 4 MiB */
} server_params;

/* Loads the chat template when the model has one (chat requests fail with 400 otherwise). */
ai_status server_init(server **out, engine *e, const tokenizer *tok, const server_params *p, ai_err *err);
/* Binds and starts serving; returns once the socket listens. */
ai_status server_run(server *s, ai_err *err);
/* The port actually bound (after server_run). */
int server_port(const server *s);
/* Drains: stops accepting work (503), waits for requests in flight and their responses, stops the
 * daemon. Safe to call once from any thread except MHD's. */
void server_stop(server *s);
void server_free(server *s);

#endif
