/* cmd_serve.c - `aiinfra serve`: the OpenAI-compatible HTTP server over the serving engine.
 *
 * Opens the model, its tokenizer and a backend (as `aiinfra run` does), starts the engine and the
 * server, prints one line "aiinfra serve: listening on http://HOST:PORT" on stderr (with --port 0 the
 * port the system chose: tests read it), then waits for SIGTERM or SIGINT in sigwait. Both signals
 * are blocked in every thread before any thread starts, so they always reach that sigwait. On a
 * signal: stop accepting (503), drain the requests in flight, stop, free, exit 0.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "aiinfra/backend.h"
#include "aiinfra/engine.h"
#include "aiinfra/runner.h"
#include "aiinfra/model.h"
#include "aiinfra/server.h"
#include "aiinfra/tokenizer.h"
#include "tools/cli.h"
#include "tools/commands.h"

static int usage(void)
{
    fprintf(stderr,
            "usage: aiinfra serve (-m MODEL | --arch NAME --random-weights --tokenizer PATH [--dtype T])\n"
            "                     [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--backend cpu|cuda]\n"
            "                     [-t THREADS] [--max-num-seqs N] [--max-num-batched-tokens N] [--ctx N]\n"
            "                     [--max-waiting N] [--kv-blocks N] [--kv-cache-dtype auto|f16|fp8]\n"
            "                     [--served-model-name NAME] [--max-body BYTES]\n"
            "  OpenAI-compatible API: /v1/completions /v1/chat/completions /v1/models /health /metrics\n"
            "  /tokenize /detokenize; SIGTERM/SIGINT drain the requests in flight and exit 0\n");
    return 2;
}

int cmd_serve(int argc, char **argv)
{
    const char *mpath = NULL, *host = "127.0.0.1", *api_key = NULL, *backend_name = "cpu", *name = NULL;
    const char *arch = NULL, *tokpath = NULL; /* a synthetic model: preset shape, random weights (speed tests) */
    bool random = false;
    runner_random rnd = {.type = DTYPE_BF16, .seed = 1};
    model_config rcfg;
    int port = 8080, threads = 0;
    size_t max_body = 0;
    engine_params ep = {0};
    double v;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && more) mpath = argv[++i];
        else if (!strcmp(a, "--host") && more) host = argv[++i];
        else if (!strcmp(a, "--api-key") && more) api_key = argv[++i];
        else if (!strcmp(a, "--backend") && more) backend_name = argv[++i];
        else if (!strcmp(a, "--served-model-name") && more) name = argv[++i];
        else if (!strcmp(a, "--no-prefix-cache")) ep.disable_prefix_cache = true;
        else if (!strcmp(a, "--arch") && more) arch = argv[++i];
        else if (!strcmp(a, "--tokenizer") && more) tokpath = argv[++i];
        else if (!strcmp(a, "--random-weights")) random = true;
        else if (!strcmp(a, "--kv-cache-dtype") && more) {
            if (!runner_kv_dtype_parse(argv[++i], &ep.kv_cache_dtype)) {
                fprintf(stderr, "aiinfra serve: --kv-cache-dtype takes auto, f16 or fp8, not '%s'\n", argv[i]);
                return 2;
            }
        }
        else if (!strcmp(a, "--dtype") && more) {
            const char *t = argv[++i];
            int found = -1;
            for (int d = 0; d < DTYPE_COUNT; d++)
                if (!strcmp(t, dtype_name((dtype)d))) found = d;
            if (found < 0) { fprintf(stderr, "aiinfra serve: unknown dtype '%s'\n", t); return 2; }
            rnd.type = (dtype)found;
        }
        else if (more && (!strcmp(a, "--port") || !strcmp(a, "-t") || !strcmp(a, "--max-num-seqs") ||
                          !strcmp(a, "--max-num-batched-tokens") || !strcmp(a, "--ctx") ||
                          !strcmp(a, "--max-waiting") || !strcmp(a, "--kv-blocks") || !strcmp(a, "--max-body"))) {
            const char *s = argv[++i];
            bool ok;
            if (!strcmp(a, "--port")) { ok = cli_parse_num(s, 0, 65535, &v); port = (int)v; }
            else if (!strcmp(a, "-t")) { ok = cli_parse_num(s, 1, 1024, &v); threads = (int)v; }
            else if (!strcmp(a, "--max-num-seqs")) { ok = cli_parse_num(s, 1, 1 << 16, &v); ep.max_num_seqs = (int32_t)v; }
            else if (!strcmp(a, "--max-num-batched-tokens")) { ok = cli_parse_num(s, 1, 1 << 24, &v); ep.max_num_batched_tokens = (int32_t)v; }
            else if (!strcmp(a, "--ctx")) { ok = cli_parse_num(s, 1, 1 << 24, &v); ep.n_ctx = (int32_t)v; }
            else if (!strcmp(a, "--max-waiting")) { ok = cli_parse_num(s, 1, 1 << 24, &v); ep.max_waiting = (int32_t)v; }
            else if (!strcmp(a, "--kv-blocks")) { ok = cli_parse_num(s, 1, 1e12, &v); ep.kv_blocks = (int64_t)v; }
            else { ok = cli_parse_num(s, 1024, 1 << 30, &v); max_body = (size_t)v; }
            if (!ok) { fprintf(stderr, "aiinfra serve: bad value '%s' for %s\n", s, a); return 2; }
        } else return usage();
    }
    if (!mpath == !arch || (arch && (!random || !tokpath))) return usage();

    /* before any thread exists: SIGTERM/SIGINT blocked everywhere, taken by sigwait below */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    ai_err err = {0};
    model *m = NULL;
    tokenizer *tok = NULL;
    backend be = {0};
    engine *e = NULL;
    server *srv = NULL;
    int rc = 1;
    if (arch) {
        if (model_config_preset(arch, &rcfg, &err) != AI_OK || tokenizer_load(&tok, tokpath, &err) != AI_OK) goto fail;
        ep.random_cfg = &rcfg;
        ep.random = &rnd;
        mpath = tokpath; /* the model's name, and where the chat template is looked up */
    } else {
        if (model_open(&m, mpath, &err) != AI_OK) goto fail;
        cli_prefetch_weights(m);
        if (model_load_tokenizer(m, &tok, &err) != AI_OK) goto fail;
    }
    if (cli_open_backend(backend_name, threads, &be, &err) != AI_OK) goto fail;
    if (engine_init(&e, m, tok, &be, &ep, &err) != AI_OK) goto fail;
    server_params sp = {.host = host, .port = port, .api_key = api_key, .model_name = name ? name : mpath,
                        .model_path = mpath, .max_body = max_body};
    if (server_init(&srv, e, tok, &sp, &err) != AI_OK || server_run(srv, &err) != AI_OK) goto fail;
    const model_config *mc = engine_model_config(e);
    fprintf(stderr, "aiinfra serve: %s%s (%s, %d layers, vocab %d), n_ctx %d, backend %s, kv cache %s\n",
            arch ? arch : mpath, arch ? " [random weights]" : "", model_arch_name(mc->arch), mc->n_layer, mc->n_vocab,
            engine_n_ctx(e), backend_name, runner_kv_dtype_name(ep.kv_cache_dtype));
    fprintf(stderr, "aiinfra serve: listening on http://%s:%d\n", host, server_port(srv));
    fflush(stderr);

    int sig = 0;
    while (sigwait(&sigs, &sig) != 0) {}
    fprintf(stderr, "aiinfra serve: %s, draining\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    server_stop(srv);
    fprintf(stderr, "aiinfra serve: stopped\n");
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "aiinfra serve: %s\n", err.msg);
done:
    server_free(srv);
    engine_free(e);
    backend_free(&be);
    tokenizer_free(tok);
    model_close(m);
    return rc;
}
