/* engine.c - the serving engine: a submission queue in front of one worker thread that runs
 * schedule -> execute -> postprocess over a runner and a scheduler (see engine.h).
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
 *           -> sample: plain greedy rows take runner_step's argmax (no logits download); any other row
 *              downloads the step's logits once and runs the CPU sampler per sample
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
#include "aiinfra/engine.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aiinfra/runner.h"
#include "aiinfra/scheduler.h"
#include "engine_internal.h"
#include "text_stream.h"

#define ENGINE_MAX_N 16

// --- requests ------------------------------------------------------------------------------------

typedef struct eng_req eng_req;

typedef struct eng_sample {
    eng_req *req;
    int32_t index;
    int64_t seq_id;          /* scheduler sequence; -1 none (invariant 3) */
    sampler_seq ss;
    text_stream tx;
    bool ss_ok, tx_ok;
    bool done;
    int32_t n_gen;           /* tokens generated */
    int32_t token;           /* sampled this step */
    bool has_res;            /* res holds logprobs of token */
    sampler_result res;
    double t_last;           /* time of its last TOKEN event */
} eng_sample;

struct eng_req {
    uint64_t id;
    int32_t *prompt;         /* (n_prompt) */
    int32_t n_prompt;
    int32_t n;               /* samples */
    int32_t n_done;
    bool plain_greedy;       /* argmax of the raw logits: runner_step's out_tokens suffice */
    bool want_logprobs;
    bool forked;             /* samples 1..n-1 have their first token */
    int32_t n_cached;
    bool first_token;        /* TTFT observed */
    double t_submit;
    engine_event_fn on_event;
    void *user;
    eng_sample *s;           /* (n) */
    eng_req *prev, *next;    /* queue (submit) or active list (worker) */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void req_free(eng_req *r)
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

// --- seq id -> sample (open addressing, linear probing, backward-shift deletion) -----------------

typedef struct seq_map {
    int64_t *key;            /* (cap) -1 empty */
    eng_sample **val;        /* (cap) */
    size_t cap, n;           /* cap a power of two, n <= cap / 2 */
} seq_map;

static size_t map_hash(int64_t k, size_t cap)
{
    uint64_t x = (uint64_t)k * 0x9e3779b97f4a7c15ull;
    return (size_t)(x >> 17) & (cap - 1);
}

static bool map_grow(seq_map *m)
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
    if (2 * (m->n + 1) > m->cap && !map_grow(m)) return false;
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

// --- the engine ------------------------------------------------------------------------------------

struct engine {
    const model *m;
    const tokenizer *tok;
    runner *run;
    scheduler *sch;
    sampler smp;
    bool smp_ok;
    engine_params p;          /* defaults filled in */
    int32_t n_ctx, n_vocab;
    int64_t pool_tokens;      /* KV pool capacity in tokens */
    uint64_t entropy;
    /* worker-only scratch, (max_num_seqs) each; logits (max_num_seqs, n_vocab) */
    float *logits;
    int32_t *greedy, *sampled, *copy_src, *copy_dst;
    runner_seq *rseqs;
    eng_sample **entry_sample; /* sample of each entry of the current step (NULL: none) */
    int32_t n_entries;
    buf text;
    engine_logprob top[SAMPLER_MAX_LOGPROBS];
    seq_map map;
    eng_req *active;          /* admitted requests */
    int32_t n_ended;          /* ended since the last publish */
    engine_metrics wm;        /* worker's metrics: histograms, finish counts, step time */
    /* shared, under mu */
    pthread_mutex_t mu;
    pthread_cond_t work_cv, idle_cv;
    pthread_t thread;
    bool thread_ok;
    eng_req *in_head, *in_tail;
    int32_t n_incoming;       /* queued or taken but not yet in a published snapshot */
    uint64_t *aborts;
    size_t n_aborts, cap_aborts;
    uint64_t next_id;
    int64_t in_flight;
    bool stopping, draining, has_work;
    engine_metrics snap;
};

static void emit(const eng_req *r, const engine_event *ev) { r->on_event(r->user, ev); }

/* Invariant 2: the request is over. */
static void end_request(engine *e, eng_req *r)
{
    engine_hist_observe(&e->wm.e2e, now_s() - r->t_submit);
    if (r->prev) r->prev->next = r->next;
    else e->active = r->next;
    if (r->next) r->next->prev = r->prev;
    req_free(r);
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

/* Plain greedy: the runner's argmax is the sampler's answer (no bias, penalties or logprobs). */
static bool plain_greedy(const sampler_params *sp)
{
    return sp->temperature < SAMPLER_GREEDY_EPS && sp->n_logit_bias == 0 && sp->repetition_penalty == 1.0f &&
           sp->presence_penalty == 0.0f && sp->frequency_penalty == 0.0f && sp->logprobs < 0;
}

/* Samples s's next token from row e of the step (its argmax when greedy_ok). */
static ai_status sample_one(engine *e, eng_sample *s, int32_t row, bool use_greedy, ai_err *err)
{
    s->has_res = false;
    if (use_greedy) {
        s->token = e->greedy[row];
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

    double t = now_s();
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
    double t0 = now_s();
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
    bool need_logits = false, any_greedy = false;
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
        if (s->req->plain_greedy) any_greedy = true;
        else need_logits = true;
    }
    ai_status rc = AI_OK;
    for (int32_t i = 0; i < st.n_copies; i++) {
        e->copy_src[i] = st.copies[i].src;
        e->copy_dst[i] = st.copies[i].dst;
    }
    if (st.n_copies) rc = runner_copy_blocks(e->run, e->copy_src, e->copy_dst, st.n_copies, &err);
    if (rc == AI_OK && st.n_entries) rc = runner_step(e->run, e->rseqs, st.n_entries, any_greedy ? e->greedy : NULL, &err);
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
        for (int32_t k = 0; k < n && rc == AI_OK; k++)
            rc = sample_one(e, n > 1 ? &r->s[k] : s, i, r->plain_greedy, &err);
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
    e->wm.step_seconds += now_s() - t0;
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

static void *engine_main(void *arg)
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

// --- public API ----------------------------------------------------------------------------------------

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
        req_free(r);
    }
    runner_free(e->run);
    scheduler_free(e->sch);
    if (e->smp_ok) sampler_free(&e->smp);
    free(e->logits);
    free(e->greedy);
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
    engine *e = calloc(1, sizeof *e);
    if (!e) return ai_err_set(err, AI_ERR_NOMEM, "engine: out of memory");
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->work_cv, NULL);
    pthread_cond_init(&e->idle_cv, NULL);
    buf_init(&e->text);
    e->m = m;
    e->tok = tok;
    e->p = q;
    e->n_vocab = m->cfg.n_vocab;
    e->entropy = read_entropy();
    runner_params rp = {.max_tokens = q.max_num_batched_tokens, .max_seqs = q.max_num_seqs, .n_ctx = q.n_ctx,
                        .block_size = q.block_size, .kv_blocks = q.kv_blocks};
    ai_status st = runner_init(&e->run, be, &m->cfg, m, NULL, &rp, err);
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
    e->sampled = malloc(ns * sizeof *e->sampled);
    e->copy_src = malloc(ns * sizeof *e->copy_src);
    e->copy_dst = malloc(ns * sizeof *e->copy_dst);
    e->rseqs = malloc(ns * sizeof *e->rseqs);
    e->entry_sample = malloc(ns * sizeof *e->entry_sample);
    if (!e->logits || !e->greedy || !e->sampled || !e->copy_src || !e->copy_dst || !e->rseqs || !e->entry_sample ||
        !map_grow(&e->map)) {
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
        req_free(r);
        return ai_err_set(err, AI_ERR_NOMEM, "engine: out of memory");
    }
    memcpy(r->prompt, rq->prompt, (size_t)rq->n_prompt * sizeof *r->prompt);
    r->n_prompt = rq->n_prompt;
    r->n = n;
    r->on_event = rq->on_event;
    r->user = rq->user;
    r->plain_greedy = plain_greedy(&rq->sp);
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
        req_free(r);
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
        req_free(r);
        return ai_err_set(err, AI_ERR_RANGE, "engine: draining, not accepting requests");
    }
    if (e->n_incoming + e->snap.num_requests_waiting >= e->p.max_waiting) {
        pthread_mutex_unlock(&e->mu);
        req_free(r);
        return ai_err_set(err, AI_ERR_RANGE, "engine: queue full (%d requests waiting)", (int)e->p.max_waiting);
    }
    r->id = ++e->next_id;
    r->t_submit = now_s();
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

const model_config *engine_model_config(const engine *e) { return &e->m->cfg; }
int32_t engine_n_ctx(const engine *e) { return e->n_ctx; }
