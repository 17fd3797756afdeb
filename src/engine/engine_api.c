/* engine_api.c - the serving engine's public calls (engine.h): init/free, request validation and
 * submission, abort, drain, metrics snapshot. Everything here runs on the caller's thread and meets the
 * worker (engine.c) only through the mutex-protected queue and snapshot: a request is built and
 * validated completely here (sampler states, stop matchers, detokenizers), then handed over; from then
 * on only the worker touches it (engine.c invariant 1).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_internal.h"

double engine_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void engine_req_free(eng_req *r)
{
    if (!r) return;
    for (int32_t i = 0; r->s && i < r->n; i++) {
        if (r->s[i].ss_ok) sampler_seq_free(&r->s[i].ss);
        if (r->s[i].tx_ok) text_stream_free(&r->s[i].tx);
    }
    free(r->s);
    free(r->prompt);
    free(r);
}

/* Plain: no logit bias, penalties or logprobs, so only temperature and the top-k/top-p/min-p filters
 * shape the draw: the runner's argmax (greedy) or the backend's sampler (runner_sample) gives the
 * sampler's answer without the logits leaving the device. */
static bool plain_sampling(const sampler_params *sp)
{
    return sp->n_logit_bias == 0 && sp->repetition_penalty == 1.0f && sp->presence_penalty == 0.0f &&
           sp->frequency_penalty == 0.0f && sp->logprobs < 0;
}

static uint64_t read_entropy(void)
{
    uint64_t x = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(&x, sizeof x, 1, f) != 1) x = 0;
        fclose(f);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return x ^ ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec);
}

void engine_free(engine *e)
{
    if (!e) return;
    if (e->thread_ok) {
        pthread_mutex_lock(&e->mu);
        e->stopping = true;
        pthread_cond_signal(&e->work_cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    while (e->in_head) { /* only when the thread never started */
        eng_req *r = e->in_head;
        e->in_head = r->next;
        engine_req_free(r);
    }
    runner_free(e->run);
    scheduler_free(e->sch);
    if (e->smp_ok) sampler_free(&e->smp);
    free(e->logits);
    free(e->greedy);
    free(e->dev_tok);
    free(e->sparams);
    free(e->sampled);
    free(e->copy_src);
    free(e->copy_dst);
    free(e->rseqs);
    free(e->entry_sample);
    free(e->map.key);
    free(e->map.val);
    free(e->aborts);
    buf_free(&e->text);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->work_cv);
    pthread_cond_destroy(&e->idle_cv);
    free(e);
}

ai_status engine_init(engine **out, const model *m, const tokenizer *tok, backend *be, const engine_params *p,
                      ai_err *err)
{
    *out = NULL;
    engine_params q = p ? *p : (engine_params){0};
    if (!q.max_num_seqs) q.max_num_seqs = 64;
    if (!q.max_num_batched_tokens) q.max_num_batched_tokens = 512;
    if (!q.block_size) q.block_size = 16;
    if (!q.max_waiting) q.max_waiting = 1024;
    if (q.max_num_seqs < 1 || q.max_num_batched_tokens < q.max_num_seqs || q.max_waiting < 1 || q.n_ctx < 0 ||
        q.kv_blocks < 0)
        return ai_err_set(err, AI_ERR_INVALID,
                          "engine: bad params (max_num_seqs %d, max_num_batched_tokens %d must be >= it, "
                          "max_waiting %d, n_ctx %d, kv_blocks %lld)",
                          (int)q.max_num_seqs, (int)q.max_num_batched_tokens, (int)q.max_waiting, (int)q.n_ctx,
                          (long long)q.kv_blocks);
    if (!m && (!q.random_cfg || !q.random))
        return ai_err_set(err, AI_ERR_INVALID, "engine: no model and no random_cfg/random");
    const model_config *cfg = m ? &m->cfg : q.random_cfg;
    engine *e = calloc(1, sizeof *e);
    if (!e) return ai_err_set(err, AI_ERR_NOMEM, "engine: out of memory");
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->work_cv, NULL);
    pthread_cond_init(&e->idle_cv, NULL);
    buf_init(&e->text);
    e->m = m;
    e->tok = tok;
    e->p = q;
    e->cfg = *cfg;
    e->n_vocab = cfg->n_vocab;
    e->entropy = read_entropy();
    runner_params rp = {.max_tokens = q.max_num_batched_tokens, .max_seqs = q.max_num_seqs, .n_ctx = q.n_ctx,
                        .block_size = q.block_size, .kv_blocks = q.kv_blocks, .kv_dtype = q.kv_cache_dtype};
    ai_status st = runner_init(&e->run, be, cfg, m, m ? NULL : q.random, &rp, err);
    if (st != AI_OK) {
        engine_free(e);
        return ai_err_prefix(err, "engine");
    }
    e->n_ctx = runner_n_ctx(e->run);
    int64_t nb = runner_kv_blocks(e->run);
    if (nb > INT32_MAX) nb = INT32_MAX;
    e->pool_tokens = nb * runner_block_size(e->run);
    scheduler_config sc = {.num_blocks = (int32_t)nb, .block_size = runner_block_size(e->run),
                           .max_num_batched_tokens = q.max_num_batched_tokens, .max_num_seqs = q.max_num_seqs,
                           .enable_prefix_cache = !q.disable_prefix_cache, .skip_debug_checks = true};
    st = scheduler_init(&e->sch, &sc, err);
    if (st == AI_OK) {
        st = sampler_init(&e->smp, e->n_vocab, err);
        e->smp_ok = st == AI_OK;
    }
    if (st != AI_OK) {
        engine_free(e);
        return ai_err_prefix(err, "engine");
    }
    size_t ns = (size_t)q.max_num_seqs;
    e->logits = malloc(ns * (size_t)e->n_vocab * sizeof *e->logits);
    e->greedy = malloc(ns * sizeof *e->greedy);
    e->dev_tok = malloc(ns * sizeof *e->dev_tok);
    e->sparams = malloc(ns * sizeof *e->sparams);
    e->can_device_sample = runner_can_sample(e->run);
    e->sampled = malloc(ns * sizeof *e->sampled);
    e->copy_src = malloc(ns * sizeof *e->copy_src);
    e->copy_dst = malloc(ns * sizeof *e->copy_dst);
    e->rseqs = malloc(ns * sizeof *e->rseqs);
    e->entry_sample = malloc(ns * sizeof *e->entry_sample);
    if (!e->logits || !e->greedy || !e->dev_tok || !e->sparams || !e->sampled || !e->copy_src || !e->copy_dst || !e->rseqs || !e->entry_sample ||
        !seq_map_grow(&e->map)) {
        engine_free(e);
        return ai_err_set(err, AI_ERR_NOMEM, "engine: out of memory for %d sequences of %d logits",
                          (int)q.max_num_seqs, (int)e->n_vocab);
    }
    engine_hist_init(&e->wm.ttft, ENGINE_HIST_TTFT);
    engine_hist_init(&e->wm.itl, ENGINE_HIST_ITL);
    engine_hist_init(&e->wm.e2e, ENGINE_HIST_E2E);
    scheduler_stats ss = scheduler_get_stats(e->sch);
    e->snap = e->wm;
    engine_metrics_from_sched(&e->snap, &ss);
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        engine_free(e);
        return ai_err_set(err, AI_ERR_RUNTIME, "engine: cannot start the worker thread");
    }
    e->thread_ok = true;
    *out = e;
    return AI_OK;
}

/* Builds the request on the caller's thread (invariant 1: the worker owns it once queued). */
static ai_status build_request(engine *e, const engine_request *rq, eng_req **out, ai_err *err)
{
    *out = NULL;
    if (!rq || !rq->on_event) return ai_err_set(err, AI_ERR_INVALID, "engine: request without an event callback");
    if (!rq->prompt || rq->n_prompt < 1) return ai_err_set(err, AI_ERR_INVALID, "engine: empty prompt");
    if (rq->n_prompt >= e->n_ctx)
        return ai_err_set(err, AI_ERR_RANGE, "engine: prompt of %d tokens does not fit the context of %d (one token "
                          "must be left to generate)", (int)rq->n_prompt, (int)e->n_ctx);
    if (rq->n_prompt >= e->pool_tokens)
        return ai_err_set(err, AI_ERR_RANGE, "engine: prompt of %d tokens does not fit the KV cache of %lld tokens",
                          (int)rq->n_prompt, (long long)e->pool_tokens);
    for (int32_t i = 0; i < rq->n_prompt; i++)
        if (rq->prompt[i] < 0 || rq->prompt[i] >= e->n_vocab)
            return ai_err_set(err, AI_ERR_INVALID, "engine: prompt token %d at %d is not in the vocabulary of %d",
                              (int)rq->prompt[i], (int)i, (int)e->n_vocab);
    int32_t n = rq->n ? rq->n : 1;
    if (n < 1 || n > ENGINE_MAX_N) return ai_err_set(err, AI_ERR_INVALID, "engine: n %d not in 1..%d", (int)n, ENGINE_MAX_N);
    int32_t left = e->n_ctx - rq->n_prompt;
    if (rq->sp.max_tokens > left)
        return ai_err_set(err, AI_ERR_RANGE, "engine: max_tokens %d exceeds the %d tokens left in the context of %d "
                          "after a prompt of %d", (int)rq->sp.max_tokens, (int)left, (int)e->n_ctx, (int)rq->n_prompt);
    ai_status st = sampler_params_check(&rq->sp, e->n_vocab, err);
    if (st != AI_OK) return ai_err_prefix(err, "engine");
    if (rq->n_stops && !rq->stops) return ai_err_set(err, AI_ERR_INVALID, "engine: stops missing");

    eng_req *r = calloc(1, sizeof *r);
    int32_t *stop_ids = NULL;
    size_t n_stop_ids = 0;
    if (!r || !(r->s = calloc((size_t)n, sizeof *r->s)) ||
        !(r->prompt = malloc((size_t)rq->n_prompt * sizeof *r->prompt))) {
        engine_req_free(r);
        return ai_err_set(err, AI_ERR_NOMEM, "engine: out of memory");
    }
    memcpy(r->prompt, rq->prompt, (size_t)rq->n_prompt * sizeof *r->prompt);
    r->n_prompt = rq->n_prompt;
    r->n = n;
    r->on_event = rq->on_event;
    r->user = rq->user;
    r->plain_greedy = plain_sampling(&rq->sp) && rq->sp.temperature < SAMPLER_GREEDY_EPS;
    r->device_sample = e->can_device_sample && plain_sampling(&rq->sp) && !r->plain_greedy;
    sampler_params sp = rq->sp;
    if (sp.max_tokens == 0) sp.max_tokens = left;  /* the context bounds it */
    st = text_stop_ids(e->tok, e->n_vocab, &sp, &stop_ids, &n_stop_ids, err);
    sp.stop_token_ids = stop_ids;
    sp.n_stop_token_ids = n_stop_ids;
    uint64_t entropy = e->entropy ^ ((uint64_t)(uintptr_t)r * 0x9e3779b97f4a7c15ull);
    for (int32_t i = 0; i < n && st == AI_OK; i++) {
        eng_sample *s = &r->s[i];
        s->req = r;
        s->index = i;
        s->seq_id = -1;
        sampler_params spi = sp;
        if (spi.has_seed) spi.seed = sp.seed + (uint64_t)i;
        st = sampler_seq_init(&s->ss, &spi, e->n_vocab, tokenizer_eos(e->tok), entropy + (uint64_t)i * 0x51ed27ull, err);
        s->ss_ok = st == AI_OK;
        if (st == AI_OK) st = sampler_seq_add_prompt(&s->ss, r->prompt, (size_t)r->n_prompt, err);
        if (st == AI_OK) st = text_stream_init(&s->tx, e->tok, rq->stops, rq->n_stops, err);
        s->tx_ok = st == AI_OK;
    }
    free(stop_ids);
    if (st != AI_OK) {
        engine_req_free(r);
        return ai_err_prefix(err, "engine");
    }
    *out = r;
    return AI_OK;
}

ai_status engine_submit(engine *e, const engine_request *rq, uint64_t *request_id, ai_err *err)
{
    eng_req *r;
    ai_status st = build_request(e, rq, &r, err);
    if (st != AI_OK) return st;
    pthread_mutex_lock(&e->mu);
    if (e->draining || e->stopping) {
        pthread_mutex_unlock(&e->mu);
        engine_req_free(r);
        return ai_err_set(err, AI_ERR_RANGE, "engine: draining, not accepting requests");
    }
    if (e->n_incoming + e->snap.num_requests_waiting >= e->p.max_waiting) {
        pthread_mutex_unlock(&e->mu);
        engine_req_free(r);
        return ai_err_set(err, AI_ERR_RANGE, "engine: queue full (%d requests waiting)", (int)e->p.max_waiting);
    }
    r->id = ++e->next_id;
    r->t_submit = engine_now_s();
    r->next = NULL;
    r->prev = e->in_tail;
    if (e->in_tail) e->in_tail->next = r;
    else e->in_head = r;
    e->in_tail = r;
    e->n_incoming++;
    e->in_flight++;
    if (request_id) *request_id = r->id;
    pthread_cond_signal(&e->work_cv);
    pthread_mutex_unlock(&e->mu);
    return AI_OK;
}

bool engine_queue_full(const engine *e)
{
    engine *w = (engine *)e;  /* the mutex is not part of the observable state */
    pthread_mutex_lock(&w->mu);
    bool full = e->n_incoming + e->snap.num_requests_waiting >= e->p.max_waiting;
    pthread_mutex_unlock(&w->mu);
    return full;
}

void engine_abort(engine *e, uint64_t request_id)
{
    pthread_mutex_lock(&e->mu);
    if (e->n_aborts == e->cap_aborts) {
        size_t cap = e->cap_aborts ? 2 * e->cap_aborts : 16;
        uint64_t *a = realloc(e->aborts, cap * sizeof *a);
        if (!a) { /* out of memory: the abort is lost; the request still ends on its own */
            pthread_mutex_unlock(&e->mu);
            return;
        }
        e->aborts = a;
        e->cap_aborts = cap;
    }
    e->aborts[e->n_aborts++] = request_id;
    pthread_cond_signal(&e->work_cv);
    pthread_mutex_unlock(&e->mu);
}

void engine_drain(engine *e)
{
    pthread_mutex_lock(&e->mu);
    e->draining = true;
    while (e->in_flight > 0) pthread_cond_wait(&e->idle_cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
}

void engine_get_metrics(engine *e, engine_metrics *out)
{
    pthread_mutex_lock(&e->mu);
    *out = e->snap;
    out->num_requests_waiting += e->n_incoming;
    pthread_mutex_unlock(&e->mu);
}

const model_config *engine_model_config(const engine *e) { return &e->cfg; }
int32_t engine_n_ctx(const engine *e) { return e->n_ctx; }
