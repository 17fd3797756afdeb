/* engine.c - the serving engine: a submission queue in front of one worker thread that runs
 * schedule -> execute -> postprocess over a runner and a scheduler (see engine.h). This file is the
 * worker's side; the public calls (init, submit, abort, drain, metrics) are in engine_api.c and the
 * records in engine_internal.h.
 *
 * The worker loop (engine_main):
 *
 *   sleep on work_cv until: a submission, an abort, engine_free, or live sequences (no busy wait)
 *     |
 *   take the submissions and aborts (under mu), then without the lock:
 *   admit:  scheduler_add(prompt) for sample 0 of each new request (ERROR event if it cannot fit)
 *   abort:  scheduler_abort + release every sequence of the request, DONE(ABORT) per open sample
 *   step:   scheduler_schedule
 *           -> NO_SPACE finishes: LENGTH if the sample has output (the KV pool, like the context, bounds
 *              it: the text so far is a valid truncated answer), else ERROR "the prompt no longer fits"
 *           -> runner_copy_blocks(copies) -> runner_step(entries)
 *           -> sample: plain greedy rows take runner_step's argmax (no logits download); plain sampling
 *              rows (temperature, top-k/p, min-p only) are sampled by the backend (runner_sample, the
 *              uniform drawn here from the sample's rng); any other row downloads the step's logits once
 *              and runs the CPU sampler per sample
 *           -> scheduler_postprocess(sampled)
 *           -> per sampled sample: sampler_seq_accept (EOS / stop ids / max_tokens), text_stream
 *              (detokenize, withhold a possible stop-string prefix), TOKEN event; n > 1: fork the other
 *              samples off the first sample's sequence; finished samples: scheduler_finish + release,
 *              DONE event with usage
 *   publish the metrics snapshot and the count of ended requests (under mu); wake engine_drain
 *
 * n > 1: the prompt is added once (sample 0). When its first token is sampled, samples 1..n-1 sample
 * their own first token from the same logits row (each with its own sampler_seq, seeded seed + index
 * when a seed is given) and are forked off sample 0's sequence (scheduler_fork: shared blocks,
 * copy-on-write). If the fork is refused (max_num_seqs running), the sample is added as a new sequence
 * prompt + its first token instead (the prefix cache usually serves the prompt's blocks).
 *
 * Invariants:
 *  1. Only the worker touches the runner, the scheduler, the samplers and the active requests; a
 *     request is built by engine_submit and handed over through the queue, after which only the worker
 *     touches it. Callbacks run on the worker without mu held (so they may call engine_abort).
 *  2. Every submitted request ends exactly once (end_request): all its samples got DONE, or it got one
 *     ERROR; then it leaves the active list and in_flight drops by one at the next publish.
 *  3. A sample is in the scheduler (seq_id >= 0, in the id map) exactly while it is not done and has
 *     been added or forked; finishing it always releases its scheduler sequence.
 *  4. The metrics snapshot is published after the events of an iteration, so once a snapshot shows
 *     nothing running or waiting, its kv_used_blocks is that of the idle pool.
 */
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

// --- seq id -> sample (open addressing, linear probing, backward-shift deletion) -----------------

static size_t map_hash(int64_t k, size_t cap)
{
    uint64_t x = (uint64_t)k * 0x9e3779b97f4a7c15ull;
    return (size_t)(x >> 17) & (cap - 1);
}

bool seq_map_grow(seq_map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    int64_t *key = malloc(cap * sizeof *key);
    eng_sample **val = malloc(cap * sizeof *val);
    if (!key || !val) {
        free(key);
        free(val);
        return false;
    }
    for (size_t i = 0; i < cap; i++) key[i] = -1;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->key[i] < 0) continue;
        size_t j = map_hash(m->key[i], cap);
        while (key[j] >= 0) j = (j + 1) & (cap - 1);
        key[j] = m->key[i];
        val[j] = m->val[i];
    }
    free(m->key);
    free(m->val);
    m->key = key;
    m->val = val;
    m->cap = cap;
    return true;
}

static bool map_put(seq_map *m, int64_t k, eng_sample *v)
{
    if (2 * (m->n + 1) > m->cap && !seq_map_grow(m)) return false;
    size_t j = map_hash(k, m->cap);
    while (m->key[j] >= 0) j = (j + 1) & (m->cap - 1);
    m->key[j] = k;
    m->val[j] = v;
    m->n++;
    return true;
}

static eng_sample *map_get(const seq_map *m, int64_t k)
{
    if (!m->cap) return NULL;
    for (size_t j = map_hash(k, m->cap); m->key[j] >= 0; j = (j + 1) & (m->cap - 1))
        if (m->key[j] == k) return m->val[j];
    return NULL;
}

static void map_del(seq_map *m, int64_t k)
{
    if (!m->cap) return;
    size_t mask = m->cap - 1, j = map_hash(k, m->cap);
    while (m->key[j] >= 0 && m->key[j] != k) j = (j + 1) & mask;
    if (m->key[j] < 0) return;
    /* backward shift: move later members of the probe run into the hole when their home allows */
    for (size_t i = j, h;;) {
        m->key[i] = -1;
        for (;;) {
            j = (j + 1) & mask;
            if (m->key[j] < 0) {
                m->n--;
                return;
            }
            h = map_hash(m->key[j], m->cap);
            if (i <= j ? (h <= i || h > j) : (h <= i && h > j)) break;
        }
        m->key[i] = m->key[j];
        m->val[i] = m->val[j];
        i = j;
    }
}

// --- events and endings (worker) -------------------------------------------------------------------

static void emit(const eng_req *r, const engine_event *ev) { r->on_event(r->user, ev); }

/* Invariant 2: the request is over. */
static void end_request(engine *e, eng_req *r)
{
    engine_hist_observe(&e->wm.e2e, engine_now_s() - r->t_submit);
    if (r->prev) r->prev->next = r->next;
    else e->active = r->next;
    if (r->next) r->next->prev = r->prev;
    engine_req_free(r);
    e->n_ended++;
}

/* Takes the sample's sequence out of the scheduler (invariant 3). */
static void drop_seq(engine *e, eng_sample *s, sched_finish why)
{
    if (s->seq_id < 0) return;
    sched_seq_info info;
    if (scheduler_seq_info(e->sch, s->seq_id, &info, NULL) == AI_OK && info.state != SCHED_FINISHED)
        scheduler_finish(e->sch, s->seq_id, why, NULL);
    scheduler_release(e->sch, s->seq_id, NULL);
    map_del(&e->map, s->seq_id);
    s->seq_id = -1;
}

static sched_finish to_sched(engine_finish f)
{
    return f == ENGINE_FINISH_STOP ? SCHED_FINISH_STOP : f == ENGINE_FINISH_LENGTH ? SCHED_FINISH_LENGTH
                                                                                  : SCHED_FINISH_ABORT;
}

/* DONE for one sample; ends the request when it was the last. */
static void finish_sample(engine *e, eng_sample *s, engine_finish f)
{
    eng_req *r = s->req;
    drop_seq(e, s, to_sched(f));
    s->done = true;
    e->wm.requests_finished[f]++;
    engine_event ev = {.kind = ENGINE_EV_DONE, .request_id = r->id, .index = s->index, .finish = f,
                       .n_prompt_tokens = r->n_prompt, .n_completion_tokens = s->n_gen,
                       .n_cached_tokens = r->n_cached};
    emit(r, &ev);
    if (++r->n_done == r->n) end_request(e, r);
}

/* One ERROR for the whole request; every open sample's sequence is dropped. */
static void fail_request(engine *e, eng_req *r, const char *msg)
{
    for (int32_t i = 0; i < r->n; i++) drop_seq(e, &r->s[i], SCHED_FINISH_ABORT);
    engine_event ev = {.kind = ENGINE_EV_ERROR, .request_id = r->id, .error = msg};
    emit(r, &ev);
    end_request(e, r);
}

static void abort_request(engine *e, eng_req *r)
{
    for (int32_t i = 0; i < r->n; i++) {
        if (r->s[i].done) continue;
        bool last = r->n_done + 1 == r->n;
        finish_sample(e, &r->s[i], ENGINE_FINISH_ABORT);
        if (last) return;  /* r was freed */
    }
}

// --- admission and aborts (worker) -----------------------------------------------------------------

static void admit(engine *e, eng_req *r)
{
    r->prev = NULL;
    r->next = e->active;
    if (e->active) e->active->prev = r;
    e->active = r;
    ai_err err = {0};
    eng_sample *s = &r->s[0];
    ai_status st = scheduler_add(e->sch, r->prompt, r->n_prompt, &s->seq_id, &err);
    if (st == AI_OK && !map_put(&e->map, s->seq_id, s)) {
        scheduler_abort(e->sch, s->seq_id, NULL);
        scheduler_release(e->sch, s->seq_id, NULL);
        st = ai_err_set(&err, AI_ERR_NOMEM, "engine: out of memory");
    }
    if (st != AI_OK) {
        s->seq_id = -1;
        fail_request(e, r, err.msg);
    }
}

static void apply_abort(engine *e, uint64_t id)
{
    for (eng_req *r = e->active; r; r = r->next)
        if (r->id == id) {
            abort_request(e, r);
            return;
        }
}

// --- one step (worker) -----------------------------------------------------------------------------

/* Where a sample's next token comes from this step. */
typedef enum { FROM_ARGMAX, FROM_DEVICE, FROM_HOST } token_source;

/* The sample's parameters for the backend's sampler; draws its uniform now (the host sampler draws it
 * after filtering, once per non-greedy token too: a seeded request gets the same draws either way). */
static backend_sample_params device_params(eng_sample *s)
{
    const sampler_params *p = &s->ss.p;
    float u = (float)sampler_rng_uniform(&s->ss.rng);
    if (u >= 1.0f) u = 0x1.fffffep-1f; /* double u < 1 can round up to 1.0f */
    return (backend_sample_params){.temperature = p->temperature, .top_p = p->top_p, .min_p = p->min_p, .u = u,
                                   .top_k = p->top_k};
}

/* Samples s's next token from row `row` of the step, from `src`. */
static ai_status sample_one(engine *e, eng_sample *s, int32_t row, token_source src, ai_err *err)
{
    s->has_res = false;
    if (src == FROM_ARGMAX) {
        s->token = e->greedy[row];
        return AI_OK;
    }
    if (src == FROM_DEVICE) {
        s->token = e->dev_tok[row];
        if (s->token < 0) return ai_err_set(err, AI_ERR_RANGE, "sampler: the logits hold NaN or +inf");
        return AI_OK;
    }
    ai_status st = sampler_sample(&e->smp, &s->ss, e->logits + (size_t)row * (size_t)e->n_vocab, &s->res, err);
    if (st != AI_OK) return st;
    s->token = s->res.token;
    s->has_res = s->ss.p.logprobs >= 0;
    return AI_OK;
}

/* Accepts s->token: sampler state, text, TOKEN event. Returns how the sample finished (NONE: runs on). */
static engine_finish accept_token(engine *e, eng_sample *s, ai_err *err)
{
    eng_req *r = s->req;
    ai_err aerr = {0};
    sampler_finish fin = sampler_seq_accept(&s->ss, s->token, &aerr);
    if (fin == SAMPLER_RUNNING && aerr.code != AI_OK) {
        *err = aerr;
        return ENGINE_FINISH_NONE;
    }
    s->n_gen++;
    buf_clear(&e->text);
    ai_status st = AI_OK;
    bool stopped = false;
    if (fin != SAMPLER_FINISH_STOP) st = text_stream_push(&s->tx, s->token, &e->text, &stopped, err);
    if (st == AI_OK && stopped) fin = SAMPLER_FINISH_STOP;
    if (st == AI_OK && fin != SAMPLER_RUNNING) st = text_stream_finish(&s->tx, &e->text, err);
    if (st != AI_OK) return ENGINE_FINISH_NONE;

    double t = engine_now_s();
    if (!r->first_token) {
        r->first_token = true;
        engine_hist_observe(&e->wm.ttft, t - r->t_submit);
    }
    if (s->n_gen > 1) engine_hist_observe(&e->wm.itl, t - s->t_last);
    s->t_last = t;
    engine_event ev = {.kind = ENGINE_EV_TOKEN, .request_id = r->id, .index = s->index, .token = s->token,
                       .text = e->text.data ? e->text.data : "", .text_len = e->text.len};
    if (s->has_res) {
        ev.logprob = s->res.logprob;
        ev.n_top = s->res.n_top;
        for (int32_t i = 0; i < s->res.n_top; i++)
            e->top[i] = (engine_logprob){.token = s->res.top[i].token, .logprob = s->res.top[i].logprob};
        ev.top = e->top;
    }
    emit(r, &ev);
    /* max_tokens was capped by the context left at submit, so LENGTH covers a full context too */
    return fin == SAMPLER_FINISH_STOP ? ENGINE_FINISH_STOP : fin == SAMPLER_FINISH_LENGTH ? ENGINE_FINISH_LENGTH
                                                                                           : ENGINE_FINISH_NONE;
}

/* Samples 1..n-1 join after sample 0's first token: fork (or re-add) the ones still running. */
static ai_status fork_samples(engine *e, eng_req *r, const engine_finish *fin, ai_err *err)
{
    for (int32_t k = 1; k < r->n; k++) {
        eng_sample *c = &r->s[k];
        if (fin[k] != ENGINE_FINISH_NONE) continue;
        ai_status st = scheduler_fork(e->sch, r->s[0].seq_id, c->token, &c->seq_id, err);
        if (st == AI_ERR_RANGE) { /* max_num_seqs running: queue prompt + its first token instead */
            int32_t *toks = malloc(((size_t)r->n_prompt + 1) * sizeof *toks);
            if (!toks) return ai_err_set(err, AI_ERR_NOMEM, "engine: out of memory");
            memcpy(toks, r->prompt, (size_t)r->n_prompt * sizeof *toks);
            toks[r->n_prompt] = c->token;
            st = scheduler_add(e->sch, toks, r->n_prompt + 1, &c->seq_id, err);
            free(toks);
        }
        if (st != AI_OK) {
            c->seq_id = -1;
            return st;
        }
        if (!map_put(&e->map, c->seq_id, c)) {
            drop_seq(e, c, SCHED_FINISH_ABORT);
            return ai_err_set(err, AI_ERR_NOMEM, "engine: out of memory");
        }
    }
    r->forked = true;
    return AI_OK;
}

/* fail_request for a request with entries in the current step: its later entries are forgotten first
 * (they point into the request, which fail_request frees). */
static void fail_in_step(engine *e, eng_req *r, const char *msg)
{
    for (int32_t j = 0; j < e->n_entries; j++)
        if (e->entry_sample[j] && e->entry_sample[j]->req == r) e->entry_sample[j] = NULL;
    fail_request(e, r, msg);
}

/* After postprocess: the sampled sample of entry i (and, for the first token of n > 1, its siblings). */
static void settle_entry(engine *e, eng_sample *s0)
{
    eng_req *r = s0->req;
    ai_err err = {0};
    bool first_of_n = s0->index == 0 && r->n > 1 && !r->forked;
    if (s0->index == 0 && s0->n_gen == 0) {
        sched_seq_info info;
        if (scheduler_seq_info(e->sch, s0->seq_id, &info, NULL) == AI_OK) r->n_cached = info.n_cached_tokens;
    }
    int32_t n = first_of_n ? r->n : 1;
    engine_finish fin[ENGINE_MAX_N];
    for (int32_t k = 0; k < n; k++) {
        eng_sample *s = first_of_n ? &r->s[k] : s0;
        err.code = AI_OK;
        fin[k] = accept_token(e, s, &err);
        if (err.code != AI_OK) {
            fail_in_step(e, r, err.msg);
            return;
        }
    }
    if (first_of_n && fork_samples(e, r, fin, &err) != AI_OK) {
        fail_in_step(e, r, err.msg);
        return;
    }
    for (int32_t k = 0; k < n; k++) {
        eng_sample *s = first_of_n ? &r->s[k] : s0;
        bool last = r->n_done + 1 == r->n;
        if (fin[k] == ENGINE_FINISH_NONE) continue;
        finish_sample(e, s, fin[k]);
        if (last) return;  /* r was freed */
    }
}

/* Every request in the step fails (runner or scheduler error): the engine itself stays usable. */
static void fail_all(engine *e, const char *msg)
{
    while (e->active) fail_request(e, e->active, msg);
}

static void engine_step(engine *e)
{
    double t0 = engine_now_s();
    ai_err err = {0};
    sched_step st;
    if (scheduler_schedule(e->sch, &st, &err) != AI_OK) {
        fail_all(e, err.msg);
        return;
    }
    for (int32_t i = 0; i < st.n_finished; i++) { /* NO_SPACE */
        eng_sample *s = map_get(&e->map, st.finished[i]);
        if (!s) continue;
        if (s->n_gen > 0) finish_sample(e, s, ENGINE_FINISH_LENGTH);
        else fail_request(e, s->req, "the prompt no longer fits in the KV cache");
    }
    bool need_logits = false, any_greedy = false, any_device = false;
    e->n_entries = st.n_entries;
    for (int32_t i = 0; i < st.n_entries; i++) {
        const sched_entry *en = &st.entries[i];
        e->rseqs[i] = (runner_seq){.tokens = en->tokens, .q_len = en->end - en->start, .seq_len = en->end,
                                   .block_table = en->block_table};
        e->entry_sample[i] = NULL;
        e->sampled[i] = 0;
        if (!en->sample) continue;
        eng_sample *s = map_get(&e->map, en->seq_id);
        e->entry_sample[i] = s;
        if (!s) continue;
        eng_req *r = s->req;
        e->sparams[i] = (backend_sample_params){0}; /* temperature 0: argmax, no draw */
        if (r->plain_greedy) any_greedy = true;
        else if (r->device_sample && !(s->index == 0 && r->n > 1 && !r->forked)) any_device = true;
        else need_logits = true; /* (the first token of n > 1 samples: n draws from one row, on the host) */
    }
    ai_status rc = AI_OK;
    for (int32_t i = 0; i < st.n_copies; i++) {
        e->copy_src[i] = st.copies[i].src;
        e->copy_dst[i] = st.copies[i].dst;
    }
    if (st.n_copies) rc = runner_copy_blocks(e->run, e->copy_src, e->copy_dst, st.n_copies, &err);
    if (rc == AI_OK && st.n_entries) rc = runner_step(e->run, e->rseqs, st.n_entries, any_greedy ? e->greedy : NULL, &err);
    if (rc == AI_OK && any_device) {
        for (int32_t i = 0; i < st.n_entries; i++) {
            eng_sample *s = e->entry_sample[i];
            if (s && s->req->device_sample && !(s->index == 0 && s->req->n > 1 && !s->req->forked))
                e->sparams[i] = device_params(s);
        }
        rc = runner_sample(e->run, e->sparams, st.n_entries, e->dev_tok, &err);
    }
    if (rc == AI_OK && need_logits) rc = runner_logits(e->run, e->logits, st.n_entries, &err);
    if (rc != AI_OK) {
        ai_err_prefix(&err, "engine: step %llu", (unsigned long long)st.step);
        fail_all(e, err.msg);
        scheduler_postprocess(e->sch, &st, e->sampled, NULL);  /* every entry is finished: ignored */
        return;
    }
    /* sample */
    for (int32_t i = 0; i < st.n_entries; i++) {
        eng_sample *s = e->entry_sample[i];
        if (!s) continue;
        eng_req *r = s->req;
        int32_t n = s->index == 0 && r->n > 1 && !r->forked ? r->n : 1;
        token_source src = r->plain_greedy ? FROM_ARGMAX : r->device_sample && n == 1 ? FROM_DEVICE : FROM_HOST;
        for (int32_t k = 0; k < n && rc == AI_OK; k++)
            rc = sample_one(e, n > 1 ? &r->s[k] : s, i, src, &err);
        if (rc != AI_OK) { /* NaN logits and the like: this request only */
            fail_in_step(e, r, err.msg);
            rc = AI_OK;
            continue;
        }
        e->sampled[i] = s->token;
    }
    if (scheduler_postprocess(e->sch, &st, e->sampled, &err) != AI_OK) {
        fail_all(e, err.msg);
        return;
    }
    for (int32_t i = 0; i < st.n_entries; i++)
        if (e->entry_sample[i]) settle_entry(e, e->entry_sample[i]);
    e->wm.step_seconds += engine_now_s() - t0;
}

// --- the worker --------------------------------------------------------------------------------------

/* Publishes the snapshot and the ended requests (invariant 4). Called with mu held. */
static void publish(engine *e, int32_t n_taken)
{
    scheduler_stats ss = scheduler_get_stats(e->sch);
    engine_metrics m = e->wm;
    engine_metrics_from_sched(&m, &ss);
    e->snap = m;
    e->n_incoming -= n_taken;
    e->in_flight -= e->n_ended;
    e->n_ended = 0;
    e->has_work = ss.num_running + ss.num_waiting > 0;
    if (e->in_flight == 0) pthread_cond_broadcast(&e->idle_cv);
}

void *engine_main(void *arg)
{
    engine *e = arg;
    uint64_t *aborts = NULL;
    size_t cap = 0;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->stopping && !e->in_head && !e->n_aborts && !e->has_work) pthread_cond_wait(&e->work_cv, &e->mu);
        eng_req *in = e->in_head;
        e->in_head = e->in_tail = NULL;
        int32_t n_taken = 0;
        for (eng_req *r = in; r; r = r->next) n_taken++;
        size_t n_ab = e->n_aborts;
        if (n_ab > cap) { /* swap the buffers: the worker keeps the filled one */
            uint64_t *t = aborts;
            aborts = e->aborts;
            e->aborts = t;
            size_t c = cap;
            cap = e->cap_aborts;
            e->cap_aborts = c;
        } else if (n_ab) {
            memcpy(aborts, e->aborts, n_ab * sizeof *aborts);
        }
        e->n_aborts = 0;
        bool stop = e->stopping;
        pthread_mutex_unlock(&e->mu);

        while (in) {
            eng_req *next = in->next;
            admit(e, in);
            in = next;
        }
        for (size_t i = 0; i < n_ab; i++) apply_abort(e, aborts[i]);
        if (stop) {
            while (e->active) abort_request(e, e->active);
        } else {
            scheduler_stats ss = scheduler_get_stats(e->sch);
            if (ss.num_running + ss.num_waiting > 0) engine_step(e);
        }
        pthread_mutex_lock(&e->mu);
        publish(e, n_taken);
        if (stop && !e->in_head) break;
    }
    pthread_mutex_unlock(&e->mu);
    free(aborts);
    return NULL;
}

