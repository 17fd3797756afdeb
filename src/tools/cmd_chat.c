/* cmd_chat.c - `aiinfra chat`: interactive multi-turn chat with streaming.
 *
 * Reads one user message per line from stdin (a TTY or not, so tests can pipe a conversation in),
 * renders the whole conversation with the model's chat template, and generates the reply. The
 * generate_session keeps the KV cache of the previous turns, so each turn only evaluates the tokens
 * after the common prefix (the new user message and the assistant header). Replies stream to stdout,
 * each followed by a newline; prompts ("> ") and tok/s go to stderr. "/reset" forgets the
 * conversation, "/exit" (or end of input) quits. A conversation that outgrows the context is reset
 * with a note on stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "aiinfra/backend.h"
#include "aiinfra/generate.h"
#include "aiinfra/model.h"
#include "aiinfra/runner.h"
#include "aiinfra/tokenizer.h"
#include "tools/cli.h"
#include "tools/commands.h"

static void add_msg(cJSON *msgs, const char *role, const char *content)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "role", role);
    cJSON_AddStringToObject(o, "content", content);
    cJSON_AddItemToArray(msgs, o);
}

static cJSON *new_conversation(const char *system)
{
    cJSON *msgs = cJSON_CreateArray();
    if (system) add_msg(msgs, "system", system);
    return msgs;
}

int cmd_chat(int argc, char **argv)
{
    const char *mpath = NULL, *system = NULL;
    char defpath[4096];
    generate_params gp = {.sp = sampler_params_default()};
    gp.sp.temperature = 0.0f;
    gp.sp.max_tokens = 512;
    model_ctx_params cp = {0};
    bool quiet = false;
    const char *backend_name = "cpu";
    backend be = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        double v = 0;
        bool more = i + 1 < argc, ok = true;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && more) mpath = argv[++i];
        else if (!strcmp(a, "--system") && more) system = argv[++i];
        else if (!strcmp(a, "-q")) quiet = true;
        else if (!strcmp(a, "--backend") && more) backend_name = argv[++i];
        else if (!strcmp(a, "--kv") && more && (!strcmp(argv[i + 1], "f16") || !strcmp(argv[i + 1], "f32")))
            cp.kv_f16 = !strcmp(argv[++i], "f16");
        else if (!strcmp(a, "--kv-cache-dtype") && more) {
            if (!cli_parse_kv_cache_dtype("chat", argv[++i], &cp)) return 2;
        }
        else if (!strcmp(a, "-n") && more) { ok = cli_parse_num(argv[++i], 1, 1 << 24, &v); gp.sp.max_tokens = (int32_t)v; }
        else if (!strcmp(a, "--temp") && more) { ok = cli_parse_num(argv[++i], 0, 100, &v); gp.sp.temperature = (float)v; }
        else if (!strcmp(a, "--top-p") && more) { ok = cli_parse_num(argv[++i], 0, 1, &v); gp.sp.top_p = (float)v; }
        else if (!strcmp(a, "--top-k") && more) { ok = cli_parse_num(argv[++i], 0, 1 << 24, &v); gp.sp.top_k = (int32_t)v; }
        else if (!strcmp(a, "--min-p") && more) { ok = cli_parse_num(argv[++i], 0, 1, &v); gp.sp.min_p = (float)v; }
        else if (!strcmp(a, "--repeat-penalty") && more) { ok = cli_parse_num(argv[++i], 1e-3, 100, &v); gp.sp.repetition_penalty = (float)v; }
        else if (!strcmp(a, "--seed") && more) { ok = cli_parse_num(argv[++i], 0, 1.8e19, &v); gp.sp.has_seed = true; gp.sp.seed = strtoull(argv[i], NULL, 10); }
        else if (!strcmp(a, "-t") && more) { ok = cli_parse_num(argv[++i], 1, 1024, &v); cp.n_threads = (int)v; }
        else if (!strcmp(a, "--ctx") && more) { ok = cli_parse_num(argv[++i], 16, 1 << 24, &v); cp.n_ctx = (int32_t)v; }
        else {
            fprintf(stderr, "usage: aiinfra chat [-m MODEL] [--system TEXT] [-n MAX_REPLY_TOKENS] [--temp T] [--top-p P]\n"
                            "                    [--top-k K] [--min-p P] [--repeat-penalty R] [--seed S] [-t THREADS]\n"
                            "                    [--ctx N] [--kv f32|f16] [--kv-cache-dtype auto|f16|fp8] [--backend cpu|cuda] [-q]\n"
                            "  one user message per stdin line; /reset, /exit\n");
            return 2;
        }
        if (!ok) { fprintf(stderr, "aiinfra chat: bad value for %s\n", a); return 2; }
    }
    ai_err err = {0};
    model *m = NULL;
    tokenizer *tok = NULL;
    model_ctx *ctx = NULL;
    chat_prompt cpr = {0};
    generate_session gs;
    bool gs_ok = false;
    cJSON *msgs = NULL;
    char *line = NULL;
    size_t line_cap = 0;
    buf text, reply;
    buf_init(&text);
    buf_init(&reply);
    tok_ids ids;
    tok_ids_init(&ids);
    int rc = 1;
    bool tty = isatty(STDIN_FILENO);

    if (!mpath) {
        if (model_default_path(defpath, sizeof defpath, &err) != AI_OK) goto fail;
        mpath = defpath;
    }
    if (model_open(&m, mpath, &err) != AI_OK) goto fail;
    cli_prefetch_weights(m);
    if (model_load_tokenizer(m, &tok, &err) != AI_OK) goto fail;
    /* cpu: the one-sequence forward of model_ctx itself, except for an fp8 cache (the runner on the CPU backend) */
    if (strcmp(backend_name, "cpu") || cp.kv_cache_dtype == RUNNER_KV_FP8) {
        if (cli_open_backend(backend_name, cp.n_threads, &be, &err) != AI_OK) goto fail;
        cp.backend = &be;
    }
    if (model_ctx_init(&ctx, m, &cp, &err) != AI_OK) goto fail;
    if (chat_prompt_load(&cpr, mpath, &err) != AI_OK) goto fail;
    if (generate_session_init(&gs, ctx, tok, &err) != AI_OK) goto fail;
    gs_ok = true;
    if (!quiet)
        fprintf(stderr, "aiinfra chat: %s (%s), n_ctx %d, %d threads. /reset forgets, /exit quits.\n", mpath,
                model_arch_name(m->cfg.arch), model_ctx_n_ctx(ctx), model_ctx_n_threads(ctx));
    msgs = new_conversation(system);
    gp.entropy = (uint64_t)time(NULL);
    for (;;) {
        if (tty) { fputs("> ", stderr); fflush(stderr); }
        ssize_t n = getline(&line, &line_cap, stdin);
        if (n < 0) break;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
        if (n == 0) continue;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
        if (!strcmp(line, "/reset")) {
            cJSON_Delete(msgs);
            msgs = new_conversation(system);
            if (!quiet) fprintf(stderr, "(conversation reset)\n");
            continue;
        }
        add_msg(msgs, "user", line);
        buf_clear(&text);
        ids.len = 0;
        if (chat_prompt_render(&cpr, msgs, true, &text, &err) != AI_OK) goto fail;
        if (tokenizer_encode(tok, text.data ? text.data : "", text.len, TOK_PARSE_SPECIAL, &ids, &err) != AI_OK)
            goto fail;
        if (ids.len + 16 >= (size_t)model_ctx_n_ctx(ctx)) { /* too long: start over with this message */
            if (!quiet) fprintf(stderr, "(context full: conversation reset)\n");
            cJSON_Delete(msgs);
            msgs = new_conversation(system);
            add_msg(msgs, "user", line);
            buf_clear(&text);
            ids.len = 0;
            if (chat_prompt_render(&cpr, msgs, true, &text, &err) != AI_OK) goto fail;
            if (tokenizer_encode(tok, text.data ? text.data : "", text.len, TOK_PARSE_SPECIAL, &ids, &err) != AI_OK)
                goto fail;
            if (ids.len + 16 >= (size_t)model_ctx_n_ctx(ctx)) {
                ai_err_set(&err, AI_ERR_RANGE, "the message alone does not fit the context of %d tokens",
                           model_ctx_n_ctx(ctx));
                goto fail;
            }
        }
        buf_clear(&reply);
        generate_stats st;
        if (generate_run(&gs, ids.data, ids.len, &gp, cli_emit_stdout, &reply, NULL, &st, &err) != AI_OK) goto fail;
        fputc('\n', stdout);
        fflush(stdout);
        add_msg(msgs, "assistant", reply.data ? reply.data : "");
        if (!quiet)
            fprintf(stderr, "[%d prompt tokens (%d reused) %.1f tok/s, %d generated %.1f tok/s]\n", st.n_prompt,
                    st.n_reused, st.prefill_s > 0 ? (st.n_prompt - st.n_reused) / st.prefill_s : 0.0, st.n_gen,
                    st.decode_s > 0 && st.n_decode ? st.n_decode / st.decode_s : 0.0);
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "aiinfra chat: %s\n", err.msg);
done:
    if (gs_ok) generate_session_free(&gs);
    chat_prompt_free(&cpr);
    model_ctx_free(ctx);
    backend_free(&be);
    tokenizer_free(tok);
    model_close(m);
    cJSON_Delete(msgs);
    free(line);
    buf_free(&text);
    buf_free(&reply);
    tok_ids_free(&ids);
    return rc;
}
