/* fuzz_api.c - libFuzzer target for the server's request parsing: the JSON bodies of /v1/completions,
 * /v1/chat/completions, /tokenize and /detokenize.
 *
 * A server over the tiny llama fixture (CPU backend, engine started once) parses each input as all four
 * kinds of body. Every call must either succeed or fail with an HTTP status in 400..499 and an OpenAI error
 * JSON; nothing may crash, leak or read out of bounds (ASan/UBSan). Input byte 0 picks nothing: the whole
 * input is the body, so seeds are plain JSON files (fuzz/seeds/fuzz_api).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "aiinfra/backend.h"
#include "aiinfra/engine.h"
#include "aiinfra/model.h"
#include "aiinfra/server.h"
#include "aiinfra/tokenizer.h"
#include "server/server_internal.h"

/* the harness's one server (tooling: a fuzz process serves one target) */
static model *g_model;
static tokenizer *g_tok;
static backend g_be;
static engine *g_engine;
static server *g_server;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    ai_err err = {0};
    const char *path = "tests/fixtures/hf/llama";
    if (model_open(&g_model, path, &err) != AI_OK || model_load_tokenizer(g_model, &g_tok, &err) != AI_OK ||
        backend_cpu_init(&g_be, 1, &err) != AI_OK) {
        fprintf(stderr, "fuzz_api: %s (run from the repository root)\n", err.msg);
        exit(1);
    }
    engine_params ep = {.max_num_seqs = 2, .max_num_batched_tokens = 64, .n_ctx = 128, .kv_blocks = 16};
    server_params sp = {.model_name = "m", .model_path = path};
    if (engine_init(&g_engine, g_model, g_tok, &g_be, &ep, &err) != AI_OK ||
        server_init(&g_server, g_engine, g_tok, &sp, &err) != AI_OK) {
        fprintf(stderr, "fuzz_api: %s\n", err.msg);
        exit(1);
    }
    return 0;
}

static void check_error(const api_error *e)
{
    if (e->status < 400 || e->status > 499) abort();
    char *j = api_error_json(e);
    cJSON *o = j ? cJSON_Parse(j) : NULL;
    if (!o || !cJSON_GetObjectItem(o, "error")) abort();
    cJSON_Delete(o);
    free(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    char *body = malloc(n + 1); /* the parsers' contract: body[len] is NUL, as the server's request buffer */
    if (!body) return 0;
    memcpy(body, d, n);
    body[n] = '\0';
    for (int k = 0; k < 2; k++) {
        api_req r;
        api_error e;
        memset(&r, 0, sizeof r);
        memset(&e, 0, sizeof e);
        if (!api_parse_generate(g_server, k ? API_CHAT : API_COMPLETION, body, n, &r, &e)) check_error(&e);
        api_req_free(&r); /* on success and on failure (api_parse_generate's contract) */
    }
    api_error e;
    memset(&e, 0, sizeof e);
    char *out = api_tokenize(g_server, body, n, &e);
    if (out) free(out);
    else check_error(&e);
    memset(&e, 0, sizeof e);
    out = api_detokenize(g_server, body, n, &e);
    if (out) free(out);
    else check_error(&e);
    free(body);
    return 0;
}
