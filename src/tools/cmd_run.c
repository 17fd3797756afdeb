/* cmd_run.c - `aiinfra run`: generate text from a prompt with a GGUF model on the CPU.
 *
 * stdout carries only the generated text, streamed and flushed per token; logs and tok/s go to
 * stderr. Greedy when --temp is 0 (the default). --chat renders the prompt with the model's chat
 * template (add_generation_prompt), --system adds a system message first.
 * For tests: --dump FILE writes prompt/generated ids and timings as JSON, --logits FILE the raw f32
 * logits of the prompt's last position, --all-logits FILE every prompt position's (n_prompt, n_vocab)
 * from one extra forward; --prompt-ids gives the prompt as token ids instead of text.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "aiinfra/fileio.h"
#include "aiinfra/generate.h"
#include "aiinfra/backend.h"
#include "aiinfra/model.h"
#include "aiinfra/runner.h"
#include "aiinfra/tokenizer.h"
#include "tools/cli.h"
#include "tools/commands.h"

#define MAX_STOPS 16

static int usage(void)
{
    fprintf(stderr,
            "usage: aiinfra run [-m MODEL] (-p PROMPT | -f FILE) [-n N] [--temp T] [--top-p P] [--top-k K]\n"
            "                   [--min-p P] [--seed S] [--repeat-penalty R] [--chat] [--system TEXT]\n"
            "                   [-t THREADS] [--ctx N] [--batch N] [--kv f32|f16] [--stop TEXT]... [--ignore-eos]\n"
            "                   [--dump FILE.json] [--logits FILE.f32] [--all-logits FILE.f32]\n"
            "                   [--prompt-ids \"ID ID ...\"] [--backend cpu|cuda] [--kv-cache-dtype auto|f16|fp8] [-q]\n"
            "  prints only the generated text on stdout; -m defaults to the default model\n"
            "  --kv-cache-dtype fp8 runs the sequence through the paged runner (on the CPU: the CPU backend)\n");
    return 2;
}

static bool write_dump(const char *path, const tok_ids *prompt, const tok_ids *gen, const generate_stats *st)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *a = cJSON_AddArrayToObject(o, "prompt_ids");
    for (size_t i = 0; i < prompt->len; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(prompt->data[i]));
    a = cJSON_AddArrayToObject(o, "gen_ids");
    for (size_t i = 0; i < gen->len; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(gen->data[i]));
    cJSON_AddNumberToObject(o, "prefill_s", st->prefill_s);
    cJSON_AddNumberToObject(o, "decode_s", st->decode_s);
    cJSON_AddNumberToObject(o, "n_decode", st->n_decode);
    cJSON_AddStringToObject(o, "finish", sampler_finish_str(st->finish) ? sampler_finish_str(st->finish) : "");
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    FILE *f = s ? fopen(path, "w") : NULL;
    bool ok = f && fputs(s, f) >= 0;
    if (f && fclose(f) != 0) ok = false;
    free(s);
    return ok;
}

/* Every prompt position's logits from one forward over the whole prompt (a context of its own). */
static ai_status write_all_logits(const model *m, const tok_ids *ids, bool kv_f16, const char *path, ai_err *err)
{
    model_ctx *c;
    model_ctx_params p = {.n_ctx = (int32_t)ids->len, .n_batch = (int32_t)ids->len, .all_logits = true,
                          .kv_f16 = kv_f16};
    if (ids->len > (size_t)m->cfg.n_ctx_train)
        return ai_err_set(err, AI_ERR_RANGE, "--all-logits: the prompt is longer than the model's context");
    ai_status st = model_ctx_init(&c, m, &p, err);
    if (st != AI_OK) return st;
    st = model_forward(c, ids->data, (int32_t)ids->len, 0, err);
    if (st == AI_OK) {
        int32_t rows;
        const float *lg = model_logits(c, &rows);
        size_t n = (size_t)rows * (size_t)m->cfg.n_vocab;
        FILE *f = fopen(path, "wb");
        bool ok = f && fwrite(lg, sizeof *lg, n, f) == n;
        if (f && fclose(f) != 0) ok = false;
        if (!ok) st = ai_err_set(err, AI_ERR_IO, "%s: cannot write", path);
    }
    model_ctx_free(c);
    return st;
}

int cmd_run(int argc, char **argv)
{
    const char *mpath = NULL, *prompt = NULL, *pfile = NULL, *system = NULL, *dump = NULL, *logits_out = NULL;
    const char *all_out = NULL, *prompt_ids = NULL;
    const char *stops[MAX_STOPS];
    size_t n_stops = 0;
    bool chat = false, quiet = false;
    const char *backend_name = "cpu";
    backend be = {0};
    double v = 0;
    generate_params gp = {.sp = sampler_params_default()};
    gp.sp.temperature = 0.0f;
    model_ctx_params cp = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && more) mpath = argv[++i];
        else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && more) prompt = argv[++i];
        else if (!strcmp(a, "-f") && more) pfile = argv[++i];
        else if (!strcmp(a, "--system") && more) system = argv[++i];
        else if (!strcmp(a, "--chat")) chat = true;
        else if (!strcmp(a, "--ignore-eos")) gp.sp.ignore_eos = true;
        else if (!strcmp(a, "-q")) quiet = true;
        else if (!strcmp(a, "--dump") && more) dump = argv[++i];
        else if (!strcmp(a, "--logits") && more) logits_out = argv[++i];
        else if (!strcmp(a, "--all-logits") && more) all_out = argv[++i];
        else if (!strcmp(a, "--prompt-ids") && more) prompt_ids = argv[++i];
        else if (!strcmp(a, "--backend") && more) backend_name = argv[++i];
        else if (!strcmp(a, "--kv") && more) {
            const char *t = argv[++i];
            if (strcmp(t, "f16") && strcmp(t, "f32")) { fprintf(stderr, "aiinfra run: --kv takes f32 or f16\n"); return 2; }
            cp.kv_f16 = !strcmp(t, "f16");
        }
        else if (!strcmp(a, "--kv-cache-dtype") && more) {
            if (!cli_parse_kv_cache_dtype("run", argv[++i], &cp)) return 2;
        }
        else if (!strcmp(a, "--stop") && more) {
            if (n_stops == MAX_STOPS) { fprintf(stderr, "aiinfra run: at most %d --stop\n", MAX_STOPS); return 2; }
            stops[n_stops++] = argv[++i];
        } else if (more && (!strcmp(a, "-n") || !strcmp(a, "--temp") || !strcmp(a, "--top-p") ||
                            !strcmp(a, "--top-k") || !strcmp(a, "--min-p") || !strcmp(a, "--seed") ||
                            !strcmp(a, "--repeat-penalty") || !strcmp(a, "-t") || !strcmp(a, "--ctx") ||
                            !strcmp(a, "--batch"))) {
            const char *s = argv[++i];
            bool ok;
            if (!strcmp(a, "-n")) { ok = cli_parse_num(s, 0, 1 << 24, &v); gp.sp.max_tokens = (int32_t)v; }
            else if (!strcmp(a, "--temp")) { ok = cli_parse_num(s, 0, 100, &v); gp.sp.temperature = (float)v; }
            else if (!strcmp(a, "--top-p")) { ok = cli_parse_num(s, 0, 1, &v); gp.sp.top_p = (float)v; }
            else if (!strcmp(a, "--top-k")) { ok = cli_parse_num(s, 0, 1 << 24, &v); gp.sp.top_k = (int32_t)v; }
            else if (!strcmp(a, "--min-p")) { ok = cli_parse_num(s, 0, 1, &v); gp.sp.min_p = (float)v; }
            else if (!strcmp(a, "--seed")) { ok = cli_parse_num(s, 0, 18446744073709551615.0, &v); gp.sp.has_seed = true; gp.sp.seed = strtoull(s, NULL, 10); }
            else if (!strcmp(a, "--repeat-penalty")) { ok = cli_parse_num(s, 1e-3, 100, &v); gp.sp.repetition_penalty = (float)v; }
            else if (!strcmp(a, "-t")) { ok = cli_parse_num(s, 1, 1024, &v); cp.n_threads = (int)v; }
            else if (!strcmp(a, "--ctx")) { ok = cli_parse_num(s, 1, 1 << 24, &v); cp.n_ctx = (int32_t)v; }
            else { ok = cli_parse_num(s, 1, 1 << 16, &v); cp.n_batch = (int32_t)v; }
            if (!ok) { fprintf(stderr, "aiinfra run: bad value '%s' for %s\n", s, a); return 2; }
        } else return usage();
    }
    if ((prompt != NULL) + (pfile != NULL) + (prompt_ids != NULL) != 1) return usage();
    if (prompt_ids && chat) { fprintf(stderr, "aiinfra run: --prompt-ids and --chat exclude each other\n"); return 2; }
    if (system && !chat) { fprintf(stderr, "aiinfra run: --system needs --chat\n"); return 2; }

    ai_err err = {0};
    char defpath[4096];
    model *m = NULL;
    tokenizer *tok = NULL;
    model_ctx *ctx = NULL;
    chat_prompt cpr = {0};
    generate_session gs = {0};
    bool gs_ok = false;
    char *ptext = NULL;
    size_t plen = 0;
    float *lg = NULL;
    buf text;
    buf_init(&text);
    tok_ids ids, gen;
    tok_ids_init(&ids);
    tok_ids_init(&gen);
    int rc = 1;

    if (!mpath) {
        if (model_default_path(defpath, sizeof defpath, &err) != AI_OK) goto fail;
        mpath = defpath;
    }
    if (pfile) {
        if (file_read_all(pfile, (size_t)1 << 26, &ptext, &plen, &err) != AI_OK) goto fail;
        prompt = ptext;
    } else if (prompt) plen = strlen(prompt);
    if (model_open(&m, mpath, &err) != AI_OK) goto fail;
    cli_prefetch_weights(m);
    if (model_load_tokenizer(m, &tok, &err) != AI_OK) goto fail;
    /* cpu: the one-sequence forward of model_ctx itself, except for an fp8 cache (the runner on the CPU backend) */
    if (strcmp(backend_name, "cpu") || cp.kv_cache_dtype == RUNNER_KV_FP8) {
        if (cli_open_backend(backend_name, cp.n_threads, &be, &err) != AI_OK) goto fail;
        cp.backend = &be;
    }
    if (model_ctx_init(&ctx, m, &cp, &err) != AI_OK) goto fail;
    if (!quiet)
        fprintf(stderr, "aiinfra run: %s (%s, %d layers, dim %d, vocab %d), n_ctx %d, %d threads, %.1f MiB state\n",
                mpath, model_arch_name(m->cfg.arch), m->cfg.n_layer, m->cfg.dim, m->cfg.n_vocab, model_ctx_n_ctx(ctx),
                model_ctx_n_threads(ctx), (double)model_ctx_bytes(ctx) / (1 << 20));

    int flags = TOK_PARSE_SPECIAL | TOK_ADD_SPECIAL;
    if (chat) {
        if (chat_prompt_load(&cpr, mpath, &err) != AI_OK) goto fail;
        cJSON *msgs = cJSON_CreateArray();
        if (system) {
            cJSON *s = cJSON_CreateObject();
            cJSON_AddStringToObject(s, "role", "system");
            cJSON_AddStringToObject(s, "content", system);
            cJSON_AddItemToArray(msgs, s);
        }
        cJSON *u = cJSON_CreateObject();
        cJSON_AddStringToObject(u, "role", "user");
        cJSON *content = cJSON_CreateString("");
        cJSON_SetValuestring(content, prompt);
        cJSON_AddItemToObject(u, "content", content);
        cJSON_AddItemToArray(msgs, u);
        ai_status st = chat_prompt_render(&cpr, msgs, true, &text, &err);
        cJSON_Delete(msgs);
        if (st != AI_OK) goto fail;
        prompt = text.data ? text.data : "";
        plen = text.len;
        flags = TOK_PARSE_SPECIAL; /* the template wrote the special tokens */
    }
    if (prompt_ids) {
        for (const char *s = prompt_ids; *s;) {
            char *end;
            long long id = strtoll(s, &end, 10);
            if (end == s) {
                if (*s == ' ' || *s == ',' || *s == '\t' || *s == '\n') { s++; continue; }
                ai_err_set(&err, AI_ERR_INVALID, "--prompt-ids: not a number at '%.16s'", s);
                goto fail;
            }
            if (id < 0 || id >= m->cfg.n_vocab) {
                ai_err_set(&err, AI_ERR_RANGE, "--prompt-ids: id %lld outside [0, %d)", id, m->cfg.n_vocab);
                goto fail;
            }
            if (!tok_ids_push(&ids, (int32_t)id)) { ai_err_set(&err, AI_ERR_NOMEM, "out of memory"); goto fail; }
            s = end;
        }
    } else if (tokenizer_encode(tok, prompt, plen, flags, &ids, &err) != AI_OK) goto fail;
    if (ids.len == 0) { ai_err_set(&err, AI_ERR_INVALID, "the prompt encodes to no tokens"); goto fail; }
    if (all_out && write_all_logits(m, &ids, cp.kv_f16, all_out, &err) != AI_OK) goto fail;
    if (generate_session_init(&gs, ctx, tok, &err) != AI_OK) goto fail;
    gs_ok = true;
    if (logits_out) {
        lg = malloc((size_t)m->cfg.n_vocab * sizeof *lg);
        if (!lg) { ai_err_set(&err, AI_ERR_NOMEM, "out of memory"); goto fail; }
        gp.prompt_logits = lg;
    }
    gp.stops = stops;
    gp.n_stops = n_stops;
    gp.entropy = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    generate_stats st;
    if (generate_run(&gs, ids.data, ids.len, &gp, cli_emit_stdout, NULL, &gen, &st, &err) != AI_OK) goto fail;
    fflush(stdout);
    if (!quiet) {
        fprintf(stderr, "\naiinfra run: prompt %d tokens in %.3f s (%.1f tok/s), generated %d tokens, decode %.1f tok/s (%s)\n",
                st.n_prompt, st.prefill_s, st.prefill_s > 0 ? (st.n_prompt - st.n_reused) / st.prefill_s : 0.0,
                st.n_gen, st.decode_s > 0 && st.n_decode ? st.n_decode / st.decode_s : 0.0,
                sampler_finish_str(st.finish) ? sampler_finish_str(st.finish) : "?");
    }
    if (dump && !write_dump(dump, &ids, &gen, &st)) { ai_err_set(&err, AI_ERR_IO, "%s: cannot write", dump); goto fail; }
    if (logits_out) {
        FILE *f = fopen(logits_out, "wb");
        bool ok = f && fwrite(lg, sizeof *lg, (size_t)m->cfg.n_vocab, f) == (size_t)m->cfg.n_vocab;
        if (f && fclose(f) != 0) ok = false;
        if (!ok) { ai_err_set(&err, AI_ERR_IO, "%s: cannot write", logits_out); goto fail; }
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "aiinfra run: %s\n", err.msg);
done:
    if (gs_ok) generate_session_free(&gs);
    chat_prompt_free(&cpr);
    model_ctx_free(ctx);
    backend_free(&be);
    tokenizer_free(tok);
    model_close(m);
    tok_ids_free(&ids);
    tok_ids_free(&gen);
    buf_free(&text);
    free(ptext);
    free(lg);
    return rc;
}
