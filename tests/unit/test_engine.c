/* test_engine.c - the serving engine on the CPU backend with the tiny HF fixtures.
 *
 * Reference: the one-sequence path, generate_run on a model_ctx whose forward runs as a runner on the
 * same CPU backend (f16 paged KV, as the engine's runner). The CPU runner computes each row of a batch
 * independently (no cross-row reductions), so greedy tokens must be EXACTLY equal whatever the batch,
 * the chunking of the prompt or a recompute after preemption. Every test ends by waiting until the
 * engine reports nothing running or waiting and then checks that no KV block is referenced
 * (engine.h invariant 2). No wait is unbounded: condvar waits have a 20 s deadline.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aiinfra/engine.h"
#include "aiinfra/generate.h"

#define DEADLINE_S 20
#define MAXS 16    /* samples per request */
#define MAXT 256   /* tokens per sample */

// --- event sink ----------------------------------------------------------------------------------

typedef struct rec {
    int32_t tok[MAXS][MAXT];
    int32_t n_tok[MAXS];
    float lp[MAXS][MAXT];
    engine_logprob top[MAXS][4][SAMPLER_MAX_LOGPROBS];  /* of the first 4 tokens */
    int32_t n_top[MAXS][4];
    char text[MAXS][4096];
    size_t text_len[MAXS];
    int32_t n;                  /* samples expected */
    int32_t n_done;
    bool done[MAXS];
    engine_finish finish[MAXS];
    int32_t n_prompt, n_completion[MAXS], n_cached;
    bool error;
    char error_msg[256];
    int32_t after_terminal;     /* events after a terminal event (must stay 0) */
    int32_t abort_at;           /* > 0: engine_abort from the callback at this token of sample 0 */
    engine *e;
    uint64_t id;
    struct sink *sink;
} rec;

typedef struct sink {
    pthread_mutex_t mu;
    pthread_cond_t cv;
} sink;

static void sink_init(sink *s)
{
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &a);
    pthread_condattr_destroy(&a);
}

static void sink_free(sink *s)
{
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
}

static bool rec_over(const rec *r) { return r->error || r->n_done == r->n; }

static void on_event(void *user, const engine_event *ev)
{
    rec *r = user;
    pthread_mutex_lock(&r->sink->mu);
    int32_t i = ev->index;
    if (rec_over(r) || i < 0 || i >= r->n || r->done[i]) r->after_terminal++;
    else if (ev->kind == ENGINE_EV_TOKEN) {
        int32_t k = r->n_tok[i]++;
        if (k < MAXT) {
            r->tok[i][k] = ev->token;
            r->lp[i][k] = ev->logprob;
            if (k < 4) {
                r->n_top[i][k] = ev->n_top;
                for (int32_t j = 0; j < ev->n_top; j++) r->top[i][k][j] = ev->top[j];
            }
        }
        if (r->text_len[i] + ev->text_len < sizeof r->text[i]) {
            memcpy(r->text[i] + r->text_len[i], ev->text, ev->text_len);
            r->text_len[i] += ev->text_len;
        }
        if (r->abort_at && i == 0 && r->n_tok[0] == r->abort_at) engine_abort(r->e, ev->request_id);
    } else if (ev->kind == ENGINE_EV_DONE) {
        r->done[i] = true;
        r->n_done++;
        r->finish[i] = ev->finish;
        r->n_prompt = ev->n_prompt_tokens;
        r->n_completion[i] = ev->n_completion_tokens;
        r->n_cached = ev->n_cached_tokens;
    } else {
        r->error = true;
        snprintf(r->error_msg, sizeof r->error_msg, "%s", ev->error ? ev->error : "(null)");
    }
    pthread_cond_broadcast(&r->sink->cv);
    pthread_mutex_unlock(&r->sink->mu);
}

static void wait_recs(sink *s, rec *recs, int n)
{
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += DEADLINE_S;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < n; i++)
        while (!rec_over(&recs[i]))
            if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) != 0) {
                pthread_mutex_unlock(&s->mu);
                fail_msg("request %d not finished after %d s (%d of %d samples done)", i, DEADLINE_S,
                         recs[i].n_done, recs[i].n);
            }
    pthread_mutex_unlock(&s->mu);
}

/* Waits until the engine reports nothing running or waiting; then no KV block may be referenced. */
static void wait_idle(engine *e)
{
    engine_metrics m;
    for (int i = 0; i < DEADLINE_S * 1000; i++) {
        engine_get_metrics(e, &m);
        if (m.num_requests_running == 0 && m.num_requests_waiting == 0) break;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(m.num_requests_running, 0);
    assert_int_equal(m.num_requests_waiting, 0);
    assert_int_equal(m.kv_used_blocks, 0);
}

// --- fixture -------------------------------------------------------------------------------------

typedef struct fix {
    backend be;
    model *m;
    tokenizer *tok;
    model_ctx *ref_ctx;
    generate_session ref;
    engine *e;
    sink sk;
} fix;

static void fix_open(fix *f, const char *name, const engine_params *p)
{
    memset(f, 0, sizeof *f);
    ai_err err = {0};
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/hf/%s", name);
    if (backend_cpu_init(&f->be, 2, &err) != AI_OK) fail_msg("%s", err.msg);
    if (model_open(&f->m, path, &err) != AI_OK) fail_msg("%s", err.msg);
    if (model_load_tokenizer(f->m, &f->tok, &err) != AI_OK) fail_msg("%s", err.msg);
    model_ctx_params mp = {.n_ctx = 256, .n_batch = 64, .n_threads = 2, .backend = &f->be,
                           .kv_cache_dtype = p ? (int)p->kv_cache_dtype : 0}; /* the engine's KV dtype */
    if (model_ctx_init(&f->ref_ctx, f->m, &mp, &err) != AI_OK) fail_msg("%s", err.msg);
    if (generate_session_init(&f->ref, f->ref_ctx, f->tok, &err) != AI_OK) fail_msg("%s", err.msg);
    if (engine_init(&f->e, f->m, f->tok, &f->be, p, &err) != AI_OK) fail_msg("engine_init: %s", err.msg);
    sink_init(&f->sk);
}

static void fix_close(fix *f)
{
    if (f->e) wait_idle(f->e);
    engine_free(f->e);
    generate_session_free(&f->ref);
    model_ctx_free(f->ref_ctx);
    tokenizer_free(f->tok);
    model_close(f->m);
    backend_free(&f->be);
    sink_free(&f->sk);
}

static void rec_init(rec *r, fix *f, int32_t n)
{
    memset(r, 0, sizeof *r);
    r->n = n ? n : 1;
    r->sink = &f->sk;
    r->e = f->e;
}

static sampler_params greedy_params(int32_t max_tokens)
{
    sampler_params sp = sampler_params_default();
    sp.temperature = 0;
    sp.max_tokens = max_tokens;
    return sp;
}

static void submit(fix *f, rec *r, const int32_t *prompt, int32_t n_prompt, const sampler_params *sp,
                   const char *const *stops, size_t n_stops, int32_t n)
{
    rec_init(r, f, n);
    r->n_prompt = n_prompt;
    engine_request rq = {.prompt = prompt, .n_prompt = n_prompt, .sp = *sp, .stops = stops, .n_stops = n_stops,
                         .n = n, .on_event = on_event, .user = r};
    ai_err err = {0};
    pthread_mutex_lock(&f->sk.mu);  /* r->id is read by nobody else before this returns */
    pthread_mutex_unlock(&f->sk.mu);
    if (engine_submit(f->e, &rq, &r->id, &err) != AI_OK) fail_msg("engine_submit: %s", err.msg);
}

/* The reference: generate_run alone. Returns the number of tokens; text into text (may be NULL). */
typedef struct ref_text {
    char s[4096];
    size_t len;
} ref_text;

static bool ref_emit(void *user, const char *t, size_t n)
{
    ref_text *rt = user;
    if (rt->len + n < sizeof rt->s) {
        memcpy(rt->s + rt->len, t, n);
        rt->len += n;
    }
    return true;
}

static int32_t reference(fix *f, const int32_t *prompt, int32_t n, const sampler_params *sp, int32_t *out,
                         ref_text *text, float *prompt_logits)
{
    tok_ids ids;
    tok_ids_init(&ids);
    generate_params gp = {.sp = *sp, .prompt_logits = prompt_logits};
    generate_stats st;
    ai_err err = {0};
    if (text) text->len = 0;
    if (generate_run(&f->ref, prompt, (size_t)n, &gp, text ? ref_emit : NULL, text, &ids, &st, &err) != AI_OK)
        fail_msg("generate_run: %s", err.msg);
    int32_t k = (int32_t)ids.len;
    if (out) memcpy(out, ids.data, ids.len * sizeof *out);
    tok_ids_free(&ids);
    return k;
}

static void make_prompt(int32_t *p, int32_t n, uint64_t seed, int32_t n_vocab)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int32_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = 2 + (int32_t)((x >> 33) % (uint64_t)(n_vocab - 2));  /* not BOS/EOS */
    }
}

static void expect_tokens(const rec *r, int32_t sample, const int32_t *ref, int32_t n_ref, const char *what)
{
    if (r->error) fail_msg("%s: error %s", what, r->error_msg);
    assert_int_equal(r->after_terminal, 0);
    if (r->n_tok[sample] != n_ref) fail_msg("%s: %d tokens, reference %d", what, r->n_tok[sample], n_ref);
    for (int32_t i = 0; i < n_ref; i++)
        if (r->tok[sample][i] != ref[i])
            fail_msg("%s: token %d is %d, reference %d", what, i, r->tok[sample][i], ref[i]);
    assert_int_equal(r->n_completion[sample], n_ref);
}

// --- 1. one greedy request ----------------------------------------------------------------------------

static void test_one_greedy(void **state)
{
    fix f;
    fix_open(&f, "llama", &(engine_params){.max_num_seqs = 8, .max_num_batched_tokens = 64, .n_ctx = 256});
    int32_t nv = f.m->cfg.n_vocab, prompt[20], ref[64];
    make_prompt(prompt, 20, 1, nv);
    sampler_params sp = greedy_params(24);
    ref_text rt;
    int32_t n_ref = reference(&f, prompt, 20, &sp, ref, &rt, NULL);
    rec *r = calloc(1, sizeof *r);
    submit(&f, r, prompt, 20, &sp, NULL, 0, 1);
    wait_recs(&f.sk, r, 1);
    expect_tokens(r, 0, ref, n_ref, "greedy");
    assert_int_equal(r->n_prompt, 20);
    assert_int_equal(r->finish[0], n_ref == 24 ? ENGINE_FINISH_LENGTH : ENGINE_FINISH_STOP);
    assert_int_equal(r->text_len[0], rt.len);
    assert_memory_equal(r->text[0], rt.s, rt.len);
    free(r);
    fix_close(&f);
}

// --- 2. batch invariance and 3. chunked prefill ------------------------------------------------------------

static void run_many(const char *model_name, const engine_params *p, int n_req, int32_t min_len, int32_t max_len,
                     bool print)
{
    fix f;
    fix_open(&f, model_name, p);
    int32_t nv = f.m->cfg.n_vocab;
    int32_t (*prompts)[128] = calloc((size_t)n_req, sizeof *prompts);
    int32_t (*refs)[64] = calloc((size_t)n_req, sizeof *refs);
    int32_t *n_ref = calloc((size_t)n_req, sizeof *n_ref), *len = calloc((size_t)n_req, sizeof *len);
    rec *recs = calloc((size_t)n_req, sizeof *recs);
    for (int i = 0; i < n_req; i++) {
        len[i] = min_len + (int32_t)((i * 37) % (max_len - min_len + 1));
        make_prompt(prompts[i], len[i], 100 + (uint64_t)i, nv);
        sampler_params sp = greedy_params(8 + (i * 7) % 17);
        n_ref[i] = reference(&f, prompts[i], len[i], &sp, refs[i], NULL, NULL);
    }
    for (int i = 0; i < n_req; i++) {
        sampler_params sp = greedy_params(8 + (i * 7) % 17);
        submit(&f, &recs[i], prompts[i], len[i], &sp, NULL, 0, 1);
    }
    wait_recs(&f.sk, recs, n_req);
    for (int i = 0; i < n_req; i++) {
        char what[64];
        snprintf(what, sizeof what, "%s request %d (prompt %d)", model_name, i, len[i]);
        expect_tokens(&recs[i], 0, refs[i], n_ref[i], what);
    }
    wait_idle(f.e);
    engine_metrics m;
    engine_get_metrics(f.e, &m);
    uint64_t fin = m.requests_finished[1] + m.requests_finished[2] + m.requests_finished[3];
    assert_int_equal(fin, (uint64_t)n_req);
    assert_int_equal(m.e2e.n, (uint64_t)n_req);
    assert_int_equal(m.ttft.n, (uint64_t)n_req);
    assert_true(m.itl.n > 0);
    assert_int_equal(m.e2e.count[ENGINE_HIST_BUCKETS - 1], m.e2e.n);
    assert_true(m.steps > 0 && m.step_seconds > 0 && m.scheduler_seconds > 0);
    uint64_t gen = 0;
    for (int i = 0; i < n_req; i++) gen += (uint64_t)n_ref[i];
    assert_int_equal(m.generation_tokens_total, gen);
    if (print)
        printf("  %d requests: %llu steps, scheduler %.1f us/step, step %.2f ms (tiny model, CPU backend)\n", n_req,
               (unsigned long long)m.steps, 1e6 * m.scheduler_seconds / (double)m.steps,
               1e3 * m.step_seconds / (double)m.steps);
    free(prompts);
    free(refs);
    free(n_ref);
    free(len);
    free(recs);
    fix_close(&f);
}

static void test_batch_invariance(void **state)
{
    run_many("llama", &(engine_params){.max_num_seqs = 32, .max_num_batched_tokens = 256, .n_ctx = 256}, 32, 4,
             60, true);
    run_many("qwen2", &(engine_params){.max_num_seqs = 8, .max_num_batched_tokens = 64, .n_ctx = 256}, 12, 4, 40,
             false);
}

static void test_chunked_prefill(void **state)
{
    run_many("llama", &(engine_params){.max_num_seqs = 4, .max_num_batched_tokens = 16, .n_ctx = 256}, 6, 60, 60,
             false);
}

/* An fp8 e4m3 KV cache (--kv-cache-dtype fp8): batched, chunked requests give the same greedy tokens as
 * each prompt run alone through an fp8 runner (rounding K/V is per value, so batching cannot change it). */
static void test_kv_fp8(void **state)
{
    run_many("llama", &(engine_params){.max_num_seqs = 8, .max_num_batched_tokens = 32, .n_ctx = 256,
                                       .kv_cache_dtype = RUNNER_KV_FP8}, 10, 4, 60, false);
    run_many("qwen3", &(engine_params){.max_num_seqs = 4, .max_num_batched_tokens = 16, .n_ctx = 256,
                                       .kv_cache_dtype = RUNNER_KV_FP8}, 5, 30, 50, false);
}

// --- 4. preemption --------------------------------------------------------------------------------------------

static void test_preemption(void **state)
{
    /* 24 blocks of 4 tokens: each request needs up to 20 + 24 = 44 tokens (11 blocks) */
    engine_params p = {.max_num_seqs = 8, .max_num_batched_tokens = 32, .n_ctx = 128, .block_size = 4, .kv_blocks = 24};
    fix f;
    fix_open(&f, "llama", &p);
    enum { N = 8 };
    int32_t nv = f.m->cfg.n_vocab, prompts[N][20], refs[N][64], n_ref[N];
    rec *recs = calloc(N, sizeof *recs);
    sampler_params sp = greedy_params(24);
    sp.ignore_eos = true;
    for (int i = 0; i < N; i++) {
        make_prompt(prompts[i], 20, 500 + (uint64_t)i, nv);
        n_ref[i] = reference(&f, prompts[i], 20, &sp, refs[i], NULL, NULL);
    }
    for (int i = 0; i < N; i++) submit(&f, &recs[i], prompts[i], 20, &sp, NULL, 0, 1);
    wait_recs(&f.sk, recs, N);
    for (int i = 0; i < N; i++) {
        expect_tokens(&recs[i], 0, refs[i], n_ref[i], "preemption");
        assert_int_equal(recs[i].finish[0], ENGINE_FINISH_LENGTH);
    }
    wait_idle(f.e);
    engine_metrics m;
    engine_get_metrics(f.e, &m);
    assert_true(m.preemptions > 0);
    assert_int_equal(m.kv_num_blocks, 24);
    free(recs);
    fix_close(&f);
}

/* A sequence alone outgrows the pool (8 blocks of 4 = 32 tokens): the scheduler finishes it NO_SPACE and
 * the engine reports LENGTH with the tokens generated so far (a valid truncated answer). */
static void test_no_space(void **state)
{
    engine_params p = {.max_num_seqs = 2, .max_num_batched_tokens = 16, .n_ctx = 128, .block_size = 4, .kv_blocks = 8};
    fix f;
    fix_open(&f, "llama", &p);
    int32_t nv = f.m->cfg.n_vocab, prompt[40], ref[64];
    make_prompt(prompt, 40, 4242, nv);
    sampler_params sp = greedy_params(0);  /* to the context end (128), far beyond the pool */
    sp.ignore_eos = true;
    sampler_params ref_sp = greedy_params(20);
    ref_sp.ignore_eos = true;
    int32_t n_ref = reference(&f, prompt, 20, &ref_sp, ref, NULL, NULL);
    rec *r = calloc(1, sizeof *r);
    submit(&f, r, prompt, 20, &sp, NULL, 0, 1);
    wait_recs(&f.sk, r, 1);
    assert_false(r->error);
    assert_int_equal(r->finish[0], ENGINE_FINISH_LENGTH);
    assert_true(r->n_tok[0] >= 12 && r->n_tok[0] <= 13);  /* 32 tokens computed, the last one sampled */
    expect_tokens(r, 0, ref, r->n_tok[0] <= n_ref ? r->n_tok[0] : n_ref, "no space");
    /* a prompt larger than the pool is refused at once */
    engine_request rq = {.prompt = prompt, .n_prompt = 32, .sp = sp, .on_event = on_event, .user = r};
    ai_err err = {0};
    uint64_t id;
    assert_int_equal(engine_submit(f.e, &rq, &id, &err), AI_ERR_RANGE);
    free(r);
    fix_close(&f);
}

// --- 5. aborts -------------------------------------------------------------------------------------------------

typedef struct aborter {
    engine *e;
    rec *recs;
    int n;
    uint64_t seed;
} aborter;

static void *abort_thread(void *arg)
{
    aborter *a = arg;
    uint64_t x = a->seed;
    for (int i = 0; i < a->n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        struct timespec ts = {0, (long)((x >> 33) % 3000000)};  /* 0-3 ms */
        nanosleep(&ts, NULL);
        engine_abort(a->e, a->recs[i].id);
    }
    return NULL;
}

static void test_abort(void **state)
{
    engine_params p = {.max_num_seqs = 4, .max_num_batched_tokens = 16, .n_ctx = 256};
    fix f;
    fix_open(&f, "llama", &p);
    enum { N = 12 };
    int32_t nv = f.m->cfg.n_vocab, prompts[N][60];
    rec *recs = calloc(N, sizeof *recs);
    sampler_params sp = greedy_params(40);
    sp.ignore_eos = true;
    for (int i = 0; i < N; i++) make_prompt(prompts[i], 60, 900 + (uint64_t)i, nv);
    /* before admission: submit + abort at once; mid-decode: from the callback at the 3rd token */
    submit(&f, &recs[0], prompts[0], 60, &sp, NULL, 0, 1);
    engine_abort(f.e, recs[0].id);
    rec_init(&recs[1], &f, 1);
    recs[1].abort_at = 3;
    engine_request rq = {.prompt = prompts[1], .n_prompt = 60, .sp = sp, .on_event = on_event, .user = &recs[1]};
    ai_err err = {0};
    assert_int_equal(engine_submit(f.e, &rq, &recs[1].id, &err), AI_OK);
    /* the rest: from another thread at random times (queued, mid-prefill of 60 tokens in 16-token chunks,
     * mid-decode or after the end) */
    for (int i = 2; i < N; i++) submit(&f, &recs[i], prompts[i], 60, &sp, NULL, 0, 1);
    aborter a = {.e = f.e, .recs = recs + 2, .n = N - 2, .seed = 77};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, abort_thread, &a), 0);
    pthread_join(th, NULL);
    wait_recs(&f.sk, recs, N);
    int n_abort = 0;
    for (int i = 0; i < N; i++) {
        assert_false(recs[i].error);
        assert_int_equal(recs[i].after_terminal, 0);
        assert_true(recs[i].done[0]);
        assert_int_equal(recs[i].n_completion[0], recs[i].n_tok[0]);
        if (recs[i].finish[0] == ENGINE_FINISH_ABORT) n_abort++;
        else assert_int_equal(recs[i].finish[0], ENGINE_FINISH_LENGTH);
    }
    assert_int_equal(recs[0].finish[0], ENGINE_FINISH_ABORT);
    assert_int_equal(recs[0].n_tok[0], 0);
    assert_int_equal(recs[1].finish[0], ENGINE_FINISH_ABORT);
    assert_int_equal(recs[1].n_tok[0], 3);
    assert_true(n_abort >= 2);
    wait_idle(f.e);
    engine_abort(f.e, recs[5].id);  /* a finished id: ignored */
    engine_abort(f.e, 123456789);   /* unknown */
    wait_idle(f.e);

    /* engine_free with requests in flight: each gets its terminal ABORT */
    for (int i = 0; i < 4; i++) submit(&f, &recs[i], prompts[i], 60, &sp, NULL, 0, 1);
    engine_free(f.e);
    f.e = NULL;
    for (int i = 0; i < 4; i++) {
        assert_true(recs[i].done[0]);
        assert_int_equal(recs[i].after_terminal, 0);
    }
    free(recs);
    fix_close(&f);
}

// --- 6. stops, length, n > 1, logprobs ---------------------------------------------------------------------------

static void test_stops_and_length(void **state)
{
    fix f;
    fix_open(&f, "llama", &(engine_params){.max_num_seqs = 8, .max_num_batched_tokens = 64, .n_ctx = 128});
    int32_t nv = f.m->cfg.n_vocab, prompt[12], ref[128];
    make_prompt(prompt, 12, 7, nv);
    sampler_params sp = greedy_params(40);
    sp.ignore_eos = true;
    ref_text rt;
    int32_t n_ref = reference(&f, prompt, 12, &sp, ref, &rt, NULL);
    assert_int_equal(n_ref, 40);
    rec *r = calloc(1, sizeof *r);

    /* max_tokens -> LENGTH */
    submit(&f, r, prompt, 12, &sp, NULL, 0, 1);
    wait_recs(&f.sk, r, 1);
    expect_tokens(r, 0, ref, 40, "length");
    assert_int_equal(r->finish[0], ENGINE_FINISH_LENGTH);

    /* a stop token id: the first occurrence of ref[6] ends the sample (the token is reported) */
    int32_t first = 0;
    while (ref[first] != ref[6]) first++;
    sampler_params s2 = sp;
    int32_t stop_id = ref[6];
    s2.stop_token_ids = &stop_id;
    s2.n_stop_token_ids = 1;
    submit(&f, r, prompt, 12, &s2, NULL, 0, 1);
    wait_recs(&f.sk, r, 1);
    expect_tokens(r, 0, ref, first + 1, "stop id");
    assert_int_equal(r->finish[0], ENGINE_FINISH_STOP);

    /* a stop string taken from the middle of the reference text: output ends right before it */
    assert_true(rt.len >= 12);
    char stop[4] = {0};
    size_t at = rt.len / 2;
    memcpy(stop, rt.s + at, 3);
    const char *stops[1] = {stop};
    char *hit = strstr(rt.s, stop);  /* rt.s is NUL-terminated below */
    (void)hit;
    rt.s[rt.len] = 0;
    hit = strstr(rt.s, stop);
    assert_non_null(hit);
    submit(&f, r, prompt, 12, &sp, stops, 1, 1);
    wait_recs(&f.sk, r, 1);
    assert_false(r->error);
    assert_int_equal(r->finish[0], ENGINE_FINISH_STOP);
    assert_int_equal(r->text_len[0], (size_t)(hit - rt.s));
    assert_memory_equal(r->text[0], rt.s, r->text_len[0]);
    assert_true(r->n_tok[0] < 40);

    /* context full -> LENGTH: max_tokens 0 runs to n_ctx */
    sampler_params s3 = sp;
    s3.max_tokens = 0;
    int32_t long_prompt[120];
    make_prompt(long_prompt, 120, 8, nv);
    submit(&f, r, long_prompt, 120, &s3, NULL, 0, 1);
    wait_recs(&f.sk, r, 1);
    assert_int_equal(r->finish[0], ENGINE_FINISH_LENGTH);
    assert_int_equal(r->n_tok[0], 128 - 120);
    free(r);
    fix_close(&f);
}

static void test_n_samples(void **state)
{
    fix f;
    fix_open(&f, "llama", &(engine_params){.max_num_seqs = 8, .max_num_batched_tokens = 64, .n_ctx = 128,
                                           .block_size = 4});
    int32_t nv = f.m->cfg.n_vocab, prompt[22];
    make_prompt(prompt, 22, 11, nv);
    sampler_params sp = sampler_params_default();
    sp.temperature = 1.0f;
    sp.has_seed = true;
    sp.seed = 1234;
    sp.max_tokens = 16;
    sp.ignore_eos = true;
    rec *r = calloc(4, sizeof *r);
    engine_metrics m0, m1;
    engine_get_metrics(f.e, &m0);
    submit(&f, &r[0], prompt, 22, &sp, NULL, 0, 3);
    wait_recs(&f.sk, r, 1);
    engine_get_metrics(f.e, &m1);
    assert_false(r[0].error);
    assert_int_equal(r[0].after_terminal, 0);
    for (int k = 0; k < 3; k++) {
        assert_true(r[0].done[k]);
        assert_int_equal(r[0].n_tok[k], 16);
        assert_int_equal(r[0].finish[k], ENGINE_FINISH_LENGTH);
    }
    /* the prompt was added once (the samples share it) */
    assert_int_equal(m1.prompt_tokens_total - m0.prompt_tokens_total, 22);
    /* distinct samples */
    assert_true(memcmp(r[0].tok[0], r[0].tok[1], 16 * sizeof(int32_t)) != 0 ||
                memcmp(r[0].tok[0], r[0].tok[2], 16 * sizeof(int32_t)) != 0);
    /* sample k equals a lone n = 1 request seeded seed + k: forked KV (copy-on-write) is the parent's */
    for (int k = 0; k < 3; k++) {
        sampler_params sk = sp;
        sk.seed = sp.seed + (uint64_t)k;
        submit(&f, &r[1], prompt, 22, &sk, NULL, 0, 1);
        wait_recs(&f.sk, &r[1], 1);
        char what[32];
        snprintf(what, sizeof what, "sample %d", k);
        expect_tokens(&r[1], 0, r[0].tok[k], 16, what);
    }
    /* greedy n = 2 with a small pool of sequences (fork refused -> re-added): equal samples */
    sampler_params g = greedy_params(10);
    g.ignore_eos = true;
    int32_t ref[16];
    int32_t n_ref = reference(&f, prompt, 22, &g, ref, NULL, NULL);
    for (int i = 0; i < 3; i++) submit(&f, &r[1 + i], prompt, 22, &g, NULL, 0, 4);
    wait_recs(&f.sk, &r[1], 3);
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++) expect_tokens(&r[1 + i], k, ref, n_ref, "greedy n=4");
    free(r);
    fix_close(&f);
}

static void test_logprobs(void **state)
{
    fix f;
    fix_open(&f, "qwen2", &(engine_params){.max_num_seqs = 4, .max_num_batched_tokens = 64, .n_ctx = 128});
    int32_t nv = f.m->cfg.n_vocab, prompt[40], ref[16];
    make_prompt(prompt, 16, 21, nv);
    sampler_params sp = greedy_params(6);
    sp.ignore_eos = true;
    int32_t n_ref = reference(&f, prompt, 16, &sp, ref, NULL, NULL);
    sp.logprobs = 3;  /* the CPU sampler path (logits downloaded) */
    rec *r = calloc(1, sizeof *r);
    submit(&f, r, prompt, 16, &sp, NULL, 0, 1);
    wait_recs(&f.sk, r, 1);
    expect_tokens(r, 0, ref, n_ref, "logprobs greedy");
    float *lg = malloc((size_t)nv * sizeof *lg);
    for (int32_t k = 0; k < 4; k++) {
        /* logits of the position that produced token k: the prompt plus the first k tokens */
        memcpy(prompt + 16, ref, (size_t)k * sizeof *ref);
        sampler_params one = greedy_params(1);
        reference(&f, prompt, 16 + k, &one, NULL, NULL, lg);
        double mx = -INFINITY, z = 0;
        for (int32_t v = 0; v < nv; v++) mx = lg[v] > mx ? lg[v] : mx;
        for (int32_t v = 0; v < nv; v++) z += exp((double)lg[v] - mx);
        double lse = mx + log(z);
        assert_float_equal(r->lp[0][k], (double)lg[ref[k]] - lse, 1e-4);
        assert_int_equal(r->n_top[0][k], 3);
        assert_int_equal(r->top[0][k][0].token, ref[k]);  /* greedy: the chosen token is the most likely */
        for (int j = 0; j < 3; j++) {
            int32_t t = r->top[0][k][j].token;
            assert_float_equal(r->top[0][k][j].logprob, (double)lg[t] - lse, 1e-4);
            if (j) assert_true(r->top[0][k][j].logprob <= r->top[0][k][j - 1].logprob);
        }
    }
    free(lg);
    free(r);
    fix_close(&f);
}

/* Everything at once in a small pool: greedy requests and seeded n = 3 requests (forks, copy-on-write,
 * fork refused at max_num_seqs, preemption of forked samples, chunked prefill). Each greedy request must
 * equal generate_run; each sample k of an n = 3 request must equal the same request with n = 1 and seed
 * + k run alone afterwards. */
static void test_mixed_stress(void **state)
{
    engine_params p = {.max_num_seqs = 6, .max_num_batched_tokens = 16, .n_ctx = 128, .block_size = 4, .kv_blocks = 40};
    fix f;
    fix_open(&f, "llama", &p);
    enum { NG = 6, NS = 3 };
    int32_t nv = f.m->cfg.n_vocab, prompts[NG + NS][30], refs[NG][32], n_ref[NG];
    rec *recs = calloc(NG + NS + 1, sizeof *recs);
    sampler_params g = greedy_params(20), sm = sampler_params_default();
    g.ignore_eos = true;
    sm.temperature = 0.8f, sm.top_k = 50, sm.has_seed = true, sm.max_tokens = 18, sm.ignore_eos = true;
    for (int i = 0; i < NG + NS; i++) make_prompt(prompts[i], 10 + 2 * i, 700 + (uint64_t)i, nv);
    for (int i = 0; i < NG; i++) n_ref[i] = reference(&f, prompts[i], 10 + 2 * i, &g, refs[i], NULL, NULL);
    for (int i = 0; i < NG + NS; i++) {
        if (i < NG) {
            submit(&f, &recs[i], prompts[i], 10 + 2 * i, &g, NULL, 0, 1);
        } else {
            sm.seed = 50 + (uint64_t)i;
            submit(&f, &recs[i], prompts[i], 10 + 2 * i, &sm, NULL, 0, NS);
        }
    }
    wait_recs(&f.sk, recs, NG + NS);
    for (int i = 0; i < NG; i++) expect_tokens(&recs[i], 0, refs[i], n_ref[i], "mixed greedy");
    engine_metrics m;
    engine_get_metrics(f.e, &m);
    assert_true(m.preemptions > 0);
    rec *alone = &recs[NG + NS];
    for (int i = NG; i < NG + NS; i++)
        for (int k = 0; k < NS; k++) {
            assert_int_equal(recs[i].n_tok[k], 18);
            sm.seed = 50 + (uint64_t)i + (uint64_t)k;
            submit(&f, alone, prompts[i], 10 + 2 * i, &sm, NULL, 0, 1);
            wait_recs(&f.sk, alone, 1);
            char what[48];
            snprintf(what, sizeof what, "mixed request %d sample %d", i, k);
            expect_tokens(alone, 0, recs[i].tok[k], 18, what);
        }
    free(recs);
    fix_close(&f);
}

// --- 7. prefix cache -------------------------------------------------------------------------------------------

static void test_prefix_cache(void **state)
{
    fix f;
    fix_open(&f, "llama", &(engine_params){.max_num_seqs = 4, .max_num_batched_tokens = 64, .n_ctx = 128});
    int32_t nv = f.m->cfg.n_vocab, a[60], b[60], ref[16];
    make_prompt(a, 60, 31, nv);
    memcpy(b, a, 48 * sizeof *a);  /* 48-token shared system prefix */
    make_prompt(b + 48, 12, 32, nv);
    sampler_params sp = greedy_params(8);
    rec *r = calloc(2, sizeof *r);
    submit(&f, &r[0], a, 60, &sp, NULL, 0, 1);
    wait_recs(&f.sk, &r[0], 1);
    submit(&f, &r[1], b, 60, &sp, NULL, 0, 1);
    wait_recs(&f.sk, &r[1], 1);
    int32_t n_ref = reference(&f, b, 60, &sp, ref, NULL, NULL);
    expect_tokens(&r[1], 0, ref, n_ref, "prefix-cached");
    assert_int_equal(r[0].n_cached, 0);
    assert_true(r[1].n_cached >= 32 && r[1].n_cached <= 48);
    wait_idle(f.e);
    engine_metrics m;
    engine_get_metrics(f.e, &m);
    assert_true(m.prefix_cache_hits >= 32);
    assert_true(m.prefix_cache_queries >= 120);
    free(r);
    fix_close(&f);
}

// --- 8. bad requests ---------------------------------------------------------------------------------------------

static void test_bad_requests(void **state)
{
    fix f;
    fix_open(&f, "llama", &(engine_params){.max_num_seqs = 1, .max_num_batched_tokens = 16, .n_ctx = 128,
                                           .max_waiting = 2});
    int32_t prompt[200];
    make_prompt(prompt, 200, 41, f.m->cfg.n_vocab);
    rec r;
    rec_init(&r, &f, 1);
    sampler_params sp = greedy_params(4);
    engine_request rq = {.prompt = prompt, .n_prompt = 10, .sp = sp, .on_event = on_event, .user = &r};
    ai_err err = {0};
    uint64_t id;
    engine_request bad = rq;
    bad.n_prompt = 0;
    assert_int_equal(engine_submit(f.e, &bad, &id, &err), AI_ERR_INVALID);
    bad = rq, bad.n_prompt = 128;
    assert_int_equal(engine_submit(f.e, &bad, &id, &err), AI_ERR_RANGE);
    bad = rq, bad.n_prompt = 200;
    assert_int_equal(engine_submit(f.e, &bad, &id, &err), AI_ERR_RANGE);
    bad = rq, bad.sp.max_tokens = 119;  /* 118 left */
    assert_int_equal(engine_submit(f.e, &bad, &id, &err), AI_ERR_RANGE);
    bad = rq, bad.sp.top_p = 0;
    assert_int_equal(engine_submit(f.e, &bad, &id, &err), AI_ERR_INVALID);
    bad = rq, bad.sp.temperature = -1;
    assert_int_equal(engine_submit(f.e, &bad, &id, &err), AI_ERR_INVALID);
    bad = rq, bad.n = 17;
    assert_int_equal(engine_submit(f.e, &bad, &id, &err), AI_ERR_INVALID);
    int32_t bad_tok[2] = {5, 1 << 20};
    bad = rq, bad.prompt = bad_tok, bad.n_prompt = 2;
    assert_int_equal(engine_submit(f.e, &bad, &id, &err), AI_ERR_INVALID);
    bad = rq, bad.on_event = NULL;
    assert_int_equal(engine_submit(f.e, &bad, &id, &err), AI_ERR_INVALID);

    /* queue full: one runs (max_num_seqs 1), long generations, at most 2 wait */
    enum { N = 12 };
    rec *recs = calloc(N, sizeof *recs);
    sampler_params lng = greedy_params(100);
    lng.ignore_eos = true;
    int accepted = 0;
    bool full = false;
    for (int i = 0; i < N && !full; i++) {
        rec_init(&recs[i], &f, 1);
        engine_request q = {.prompt = prompt, .n_prompt = 10, .sp = lng, .on_event = on_event, .user = &recs[i]};
        ai_status st = engine_submit(f.e, &q, &recs[i].id, &err);
        if (st == AI_OK) {
            accepted++;
        } else {
            assert_int_equal(st, AI_ERR_RANGE);
            assert_true(engine_queue_full(f.e));
            full = true;
        }
    }
    assert_true(full);
    assert_true(accepted >= 2 && accepted <= 4);
    for (int i = 0; i < accepted; i++) engine_abort(f.e, recs[i].id);
    wait_recs(&f.sk, recs, accepted);
    wait_idle(f.e);
    assert_false(engine_queue_full(f.e));

    /* drain: then nothing is accepted */
    rec_init(&r, &f, 1);
    assert_int_equal(engine_submit(f.e, &rq, &r.id, &err), AI_OK);
    engine_drain(f.e);
    assert_true(rec_over(&r));
    assert_int_equal(engine_submit(f.e, &rq, &id, &err), AI_ERR_RANGE);
    assert_int_equal(engine_n_ctx(f.e), 128);
    assert_int_equal(engine_model_config(f.e)->n_vocab, f.m->cfg.n_vocab);
    free(recs);
    fix_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_greedy),       cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_chunked_prefill),  cmocka_unit_test(test_preemption),
        cmocka_unit_test(test_no_space),         cmocka_unit_test(test_mixed_stress),
        cmocka_unit_test(test_abort),            cmocka_unit_test(test_stops_and_length),
        cmocka_unit_test(test_n_samples),        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_prefix_cache),     cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_kv_fp8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
