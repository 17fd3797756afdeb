/* cmd_bench.c - `aiinfra bench`: prefill and decode speed of a model (a file, or a synthetic one
 * with random weights) on a backend, with the roofline measured in the same run.
 *
 *   aiinfra bench -m MODEL | --arch NAME --random-weights [--dtype bf16|f16|f32|q8_0|q4_0|q4_1]
 *                 [--backend cuda|cpu] [--batch B] [--prompt P] [--gen G] [--block N] [--chunk T]
 *                 [--no-graphs] [--fuse auto|none|all|norm,swiglu,add,glu,defer,rope] [--threads N] [--seed S] [--json]
 *                 [--skip-ops norm,rope,attn,swiglu]
 *
 * B sequences of P random prompt tokens are prefilled (steps of up to T tokens, sequences packed
 * into each step), then G decode steps run for all B at once (greedy). Reported: prefill tok/s,
 * decode tok/s and the median ms per decode step, and the bounds for the same shapes:
 *   decode step bytes  = weights read once (every matrix; embedding rows not counted)
 *                        + K and V of the mean context over all layers for each sequence
 *   decode step FLOPs  = 2 * matrix params * B + 4 * ctx * n_head * head_dim * n_layer * B
 *   prefill FLOPs      = 2 * matrix params * B * P + 2 * P^2 * n_head * head_dim * n_layer * B (causal)
 *   bound = max(bytes / copy bandwidth, FLOPs / matrix rate), both measured at the start of the run.
 * --skip-ops makes those ops no-ops (bench_skip.h): what they cost inside the step, not a real run.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aiinfra/backend.h"
#include "aiinfra/model.h"
#include "aiinfra/runner.h"
#include "tools/bench_skip.h"
#include "tools/cli.h"
#include "tools/commands.h"

static int usage(void)
{
    fprintf(stderr,
            "usage: aiinfra bench (-m MODEL | --arch NAME --random-weights) [--dtype bf16|f16|f32|q8_0|q4_0|q4_1]\n"
            "                     [--backend cuda|cpu] [--batch B] [--prompt P] [--gen G] [--block N] [--chunk T]\n"
            "                     [--no-graphs] [--fuse auto|none|all|norm,swiglu,add,glu,defer,rope] [--kv-cache-dtype auto|f16|fp8]\n"
            "                     [--threads N] [--seed S] [--json] [--skip-ops norm,rope,attn,swiglu]\n"
            "presets: llama3-8b, llama-1b, qwen2-7b, smollm2-135m\n"
            "       aiinfra bench serve --url URL ...   load generator for a running server (--help)\n");
    return 2;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct bench_opts {
    const char *model, *arch, *backend;
    dtype type;
    int batch, prompt, gen, block, chunk, threads;
    bool random, json, no_graphs;
    unsigned fuse; /* RUNNER_FUSE_* */
    unsigned skip; /* BENCH_SKIP_*: ops made no-ops (a measuring aid) */
    runner_kv_dtype kv;
    uint64_t seed;
} bench_opts;

/* "auto", "none", "all" or a list like "norm,add" -> RUNNER_FUSE_* bits; false on an unknown name. */
static bool parse_fuse(const char *v, unsigned *out)
{
    static const cli_flag names[] = {
        {"norm", RUNNER_FUSE_NORM}, {"swiglu", RUNNER_FUSE_SWIGLU}, {"add", RUNNER_FUSE_ADD}, {"glu", RUNNER_FUSE_GLU},
        {"defer", RUNNER_FUSE_DEFER}, {"rope", RUNNER_FUSE_ROPE}, {"none", 0},
        {"all", RUNNER_FUSE_NORM | RUNNER_FUSE_SWIGLU | RUNNER_FUSE_ADD}};
    *out = RUNNER_FUSE_EXACT;
    if (!strcmp(v, "auto")) return *out = RUNNER_FUSE_AUTO, true;
    return cli_parse_flags(v, names, sizeof names / sizeof names[0], out);
}

static bool parse(int argc, char **argv, bench_opts *o)
{
    *o = (bench_opts){.type = DTYPE_BF16, .batch = 1, .prompt = 512, .gen = 128, .block = 16, .seed = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double d;
#define NUM(flag, lo, hi, dst)                                                   \
    if (!strcmp(a, flag)) {                                                      \
        if (!v || !cli_parse_num(v, lo, hi, &d)) return false;                   \
        dst = (int)d;                                                            \
        i++;                                                                     \
        continue;                                                                \
    }
        NUM("--batch", 1, 4096, o->batch)
        NUM("--prompt", 1, 1 << 20, o->prompt)
        NUM("--gen", 1, 1 << 20, o->gen)
        NUM("--block", 1, 1024, o->block)
        NUM("--chunk", 1, 1 << 20, o->chunk)
        NUM("--threads", 1, 1024, o->threads)
#undef NUM
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v) o->model = argv[++i];
        else if (!strcmp(a, "--arch") && v) o->arch = argv[++i];
        else if (!strcmp(a, "--backend") && v) o->backend = argv[++i];
        else if (!strcmp(a, "--seed") && v && cli_parse_num(v, 0, 1e15, &d)) o->seed = (uint64_t)d, i++;
        else if (!strcmp(a, "--dtype") && v) {
            bool ok = false;
            for (int t = 0; t < DTYPE_COUNT; t++)
                if (!strcmp(v, dtype_name((dtype)t))) o->type = (dtype)t, ok = true;
            if (!ok) return false;
            i++;
        } else if (!strcmp(a, "--random-weights")) o->random = true;
        else if (!strcmp(a, "--json")) o->json = true;
        else if (!strcmp(a, "--no-graphs")) o->no_graphs = true;
        else if (!strcmp(a, "--fuse") && v && parse_fuse(v, &o->fuse)) i++;
        else if (!strcmp(a, "--kv-cache-dtype") && v && runner_kv_dtype_parse(v, &o->kv)) i++;
        else if (!strcmp(a, "--skip-ops") && v && bench_skip_parse(v, &o->skip)) i++;
        else return false;
    }
    return (o->model != NULL) != (o->arch != NULL) && (!o->arch || o->random);
}

static ai_status open_backend(const bench_opts *o, backend *be, ai_err *err)
{
    if (!o->backend || !strcmp(o->backend, "cuda")) {
        ai_status st = backend_cuda_init(be, 0, err);
        if (st == AI_OK || o->backend) return st;
    } else if (strcmp(o->backend, "cpu")) {
        return ai_err_set(err, AI_ERR_INVALID, "unknown backend '%s' (cuda, cpu)", o->backend);
    }
    return backend_cpu_init(be, o->threads, err);
}

/* "none" or the RUNNER_FUSE_* names joined by commas */
static void fuse_name(char out[48], unsigned fu)
{
    snprintf(out, 48, "%s%s%s%s%s%s%s", fu ? "" : "none", fu & RUNNER_FUSE_NORM ? "norm," : "",
             fu & RUNNER_FUSE_SWIGLU ? "swiglu," : "", fu & RUNNER_FUSE_ADD ? "add," : "", fu & RUNNER_FUSE_GLU ? "glu," : "",
             fu & RUNNER_FUSE_DEFER ? "defer," : "", fu & RUNNER_FUSE_ROPE ? "rope," : "");
    if (fu) out[strlen(out) - 1] = 0;
}

/* B prompts of P tokens, packed into steps of up to `chunk` tokens (a prompt may span steps). */
static ai_status prefill_all(runner *r, const int32_t *toks, const int32_t *bt, int B, int P, int nbps, int chunk,
                             runner_seq *seqs, int32_t *next, ai_err *err)
{
    int s0 = 0, done0 = 0; /* the first unfinished prompt and how much of it is done */
    while (s0 < B) {
        int n = 0, used = 0, s = s0, done = done0;
        while (s < B && used < chunk) {
            int take = P - done < chunk - used ? P - done : chunk - used;
            seqs[n++] = (runner_seq){.tokens = toks + (size_t)s * P + done, .q_len = take, .seq_len = done + take,
                                     .block_table = bt + (size_t)s * nbps};
            used += take;
            if (done + take == P) s++, done = 0;
            else done += take;
        }
        ai_status st = runner_step(r, seqs, n, next, err);
        if (st != AI_OK) return st;
        s0 = s;
        done0 = done;
    }
    return AI_OK;
}

int cmd_bench(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "serve")) return cmd_bench_serve(argc - 1, argv + 1);
    bench_opts o;
    if (!parse(argc, argv, &o)) return usage();
    ai_err err = {0};
    backend be = {0};
    model *m = NULL;
    runner *r = NULL;
    int32_t *toks = NULL, *bt = NULL, *next = NULL;
    double *step_ms = NULL;
    runner_seq *seqs = NULL;
    int rc = 1;
    model_config cfg;
    if (o.model ? model_open(&m, o.model, &err) : model_config_preset(o.arch, &cfg, &err)) goto fail;
    if (m) cfg = m->cfg;
    if (open_backend(&o, &be, &err) != AI_OK) goto fail;
    char gpu[256] = "";
    if (!strcmp(be.ops->name, "cuda")) backend_cuda_describe(0, gpu, sizeof gpu);

    double copy_gbs = 0, mm_tflops = 0;
    if (be.ops->ceilings(be.ctx, &copy_gbs, &mm_tflops, &err) != AI_OK) goto fail;

    const int B = o.batch, P = o.prompt, G = o.gen, bs = o.block;
    int ctx = P + G, nbps = (ctx + bs - 1) / bs;
    int chunk = o.chunk ? o.chunk : (B * P < 8192 ? B * P : 8192);
    if (chunk < B) chunk = B;
    runner_params rp = {.max_tokens = chunk, .max_seqs = B, .n_ctx = nbps * bs, .block_size = bs,
                        .kv_blocks = (int64_t)B * nbps, .no_graphs = o.no_graphs,
                        .fuse = o.fuse, .kv_dtype = o.kv};
    if (rp.n_ctx > cfg.n_ctx_train) rp.n_ctx = cfg.n_ctx_train;
    if (ctx > rp.n_ctx) {
        ai_err_set(&err, AI_ERR_RANGE, "prompt + gen = %d exceeds the model's context %d", ctx, cfg.n_ctx_train);
        goto fail;
    }
    runner_random rnd = {.type = o.type, .seed = o.seed};
    backend_ops skip_ops = *be.ops; /* the runner's ops: the backend's, some made no-ops by --skip-ops */
    bench_skip_apply(&skip_ops, o.skip);
    backend run_be = {.ops = &skip_ops, .ctx = be.ctx};
    double t0 = be.ops->elapsed_ms(be.ctx);
    if (runner_init(&r, &run_be, &cfg, m, m ? NULL : &rnd, &rp, &err) != AI_OK) goto fail;
    double load_ms = be.ops->elapsed_ms(be.ctx) - t0;

    toks = malloc((size_t)B * (size_t)P * sizeof *toks);
    bt = malloc((size_t)B * (size_t)nbps * sizeof *bt);
    next = malloc((size_t)B * sizeof *next);
    step_ms = malloc((size_t)G * sizeof *step_ms);
    seqs = malloc((size_t)B * sizeof *seqs);
    if (!toks || !bt || !next || !step_ms || !seqs) {
        ai_err_set(&err, AI_ERR_NOMEM, "out of memory");
        goto fail;
    }
    uint64_t x = o.seed * 2654435761u + 1;
    for (size_t i = 0; i < (size_t)B * (size_t)P; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (int32_t)((x >> 33) % (uint64_t)cfg.n_vocab);
    }
    for (int i = 0; i < B * nbps; i++) bt[i] = i;

    /* prefill twice: a warm-up (kernels load, cuBLASLt picks its algorithms), then the timed run,
     * which rewrites the same cache rows */
    double prefill_ms = 0;
    for (int rep = 0; rep < 2; rep++) {
        t0 = be.ops->elapsed_ms(be.ctx);
        if (prefill_all(r, toks, bt, B, P, nbps, chunk, seqs, next, &err) != AI_OK) goto fail;
        prefill_ms = be.ops->elapsed_ms(be.ctx) - t0;
    }
    /* next[] of the last prefill step holds only the sequences of that step: start decode from a
     * fixed token for the others (speed does not depend on the token). */
    int32_t *cur = malloc((size_t)B * sizeof *cur);
    if (!cur) goto fail;
    for (int s = 0; s < B; s++) cur[s] = toks[(size_t)s * P + P - 1];

    for (int g = 0; g < G; g++) {
        for (int s = 0; s < B; s++)
            seqs[s] = (runner_seq){.tokens = &cur[s], .q_len = 1, .seq_len = P + g + 1, .block_table = bt + (size_t)s * nbps};
        double a = be.ops->elapsed_ms(be.ctx);
        if (runner_step(r, seqs, B, next, &err) != AI_OK) {
            free(cur);
            goto fail;
        }
        step_ms[g] = be.ops->elapsed_ms(be.ctx) - a;
        memcpy(cur, next, (size_t)B * sizeof *cur);
        for (int s = 0; s < B && o.skip; s++) /* skipped ops leave the logits undefined (bench_skip.h) */
            if (cur[s] < 0 || cur[s] >= cfg.n_vocab) cur[s] = 0;
    }
    free(cur);
    /* decode figures from the steps after the first two (eager run + graph capture) */
    int skip = G > 4 ? 2 : 0, nt = G - skip;
    double total = 0;
    for (int g = skip; g < G; g++) total += step_ms[g];
    qsort(step_ms + skip, (size_t)nt, sizeof *step_ms, cmp_double);
    double med = step_ms[skip + nt / 2];
    double decode_tps = (double)B * nt / (total / 1e3), prefill_tps = (double)B * P / (prefill_ms / 1e3);

    /* the bounds */
    const model_config *c = &cfg;
    double mat_params = (double)c->n_layer * ((double)c->dim * (c->n_head * c->head_dim + c->n_head_kv * (c->head_dim + c->head_dim_v)) +
                                              (double)c->n_head * c->head_dim_v * c->dim + 3.0 * c->dim * c->n_ff) +
                        (double)c->n_vocab * c->dim;
    double att_unit = (double)c->n_head * c->head_dim * c->n_layer; /* per (query, key) pair: 2 FLOPs x 2 products */
    double mean_ctx = P + (G + 1) / 2.0;
    double step_bytes = (double)runner_weight_bytes(r) + (double)B * mean_ctx * (double)runner_kv_bytes_per_token(r);
    double step_flops = 2.0 * mat_params * B + 4.0 * mean_ctx * att_unit * B;
    double t_mem = step_bytes / (copy_gbs * 1e9), t_cmp = mm_tflops > 0 ? step_flops / (mm_tflops * 1e12) : 0;
    double decode_bound = B / (t_mem > t_cmp ? t_mem : t_cmp);
    double pf_flops = 2.0 * mat_params * B * P + 2.0 * (double)P * P * att_unit * B;
    double prefill_bound = mm_tflops > 0 ? (double)B * P / (pf_flops / (mm_tflops * 1e12)) : 0;

    const char *src = m ? o.model : o.arch;
    char fuse[48], fuse_pf[48]; /* the fusions of a decode step (B tokens) and of a prefill step */
    fuse_name(fuse, runner_fusions_decode(r, B));
    fuse_name(fuse_pf, runner_fusions(r, chunk));
    if (o.json) {
        printf("{\"model\": \"%s\", \"random_weights\": %s, \"dtype\": \"%s\", \"backend\": \"%s\", \"device\": \"%s\", "
               "\"batch\": %d, \"prompt\": %d, \"gen\": %d, \"block_size\": %d, \"kv_cache_dtype\": \"%s\", "
               "\"graphs\": %s, \"decode_matmul\": \"%s\", \"fuse\": \"%s\", "
               "\"fuse_prefill\": \"%s\", "
               "\"load_ms\": %.1f, \"prefill_tok_s\": %.1f, \"decode_tok_s\": %.1f, \"decode_ms_per_step\": %.4f, "
               "\"copy_gb_s\": %.3f, \"matmul_tflop_s\": %.3f, \"decode_step_bytes\": %.0f, \"decode_step_flops\": %.0f, "
               "\"decode_bound_tok_s\": %.1f, \"decode_frac_of_bound\": %.4f, \"prefill_bound_tok_s\": %.1f, "
               "\"prefill_frac_of_bound\": %.4f, \"skip_ops\": %u}\n",
               src, m ? "false" : "true", m ? "model" : dtype_name(o.type), be.ops->name, gpu, B, P, G, bs,
               dtype_name(runner_kv_type(r)), o.no_graphs ? "false" : "true", runner_step_gemm(r, B) ? "gemm" : "gemv",
               fuse, fuse_pf, load_ms, prefill_tps, decode_tps, med, copy_gbs, mm_tflops, step_bytes,
               step_flops, decode_bound, decode_tps / decode_bound, prefill_bound,
               prefill_bound > 0 ? prefill_tps / prefill_bound : 0, o.skip);
    } else {
        if (o.skip) printf("SKIPPED    ops made no-ops (--skip-ops, mask %u): a measurement of what they cost, not a run\n", o.skip);
        printf("model      %s%s (%s weights), backend %s%s%s\n", src, m ? "" : " [random]", m ? "stored" : dtype_name(o.type),
               be.ops->name, gpu[0] ? ": " : "", gpu);
        printf("ceilings   copy %.0f GB/s (read + write), bf16 matmul %.0f TFLOP/s (measured now)\n", copy_gbs, mm_tflops);
        printf("load       %.0f ms (weights %.2f GiB), fused into the matmuls: %s (decode), %s (prefill)\n", load_ms,
               (double)runner_weight_bytes(r) / (1 << 30), fuse, fuse_pf);
        printf("matmuls    decode steps of %d tokens run %s\n", B, runner_step_gemm(r, B) ? "GEMMs" : "GEMVs");
        printf("kv cache   %s, %llu bytes per token\n", dtype_name(runner_kv_type(r)),
               (unsigned long long)runner_kv_bytes_per_token(r));
        printf("prefill    %d x %d tokens: %.0f tok/s", B, P, prefill_tps);
        if (prefill_bound > 0) printf("  (compute bound %.0f tok/s: %.0f%%)", prefill_bound, 100 * prefill_tps / prefill_bound);
        printf("\ndecode     %d x %d steps: %.1f tok/s, %.3f ms/step (median)\n", B, nt, decode_tps, med);
        printf("bound      %.2f GB + %.2f GFLOP per step -> %.1f tok/s (%s-bound): %.0f%% of it\n", step_bytes / 1e9,
               step_flops / 1e9, decode_bound, t_mem >= t_cmp ? "memory" : "compute", 100 * decode_tps / decode_bound);
    }
    rc = 0;
fail:
    if (rc) fprintf(stderr, "aiinfra bench: %s\n", err.msg);
    free(toks);
    free(bt);
    free(next);
    free(step_ms);
    free(seqs);
    runner_free(r);
    backend_free(&be);
    model_close(m);
    return rc;
}
