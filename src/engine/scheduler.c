/* scheduler.c - continuous batching with chunked prefill, FCFS admission, preemption by recompute.
 *
 * States and the function behind each transition:
 *
 *                        scheduler_add
 *                             |
 *                             v
 *                        +---------+   schedule: admitted (head of the queue, blocks for its
 *            +---------- | WAITING | ---------------------------+  first chunk)
 *            |           +---------+                            |
 *            |                                                  v
 *            |           +-----------+   schedule: re-admitted +---------+
 *            |     +---- | PREEMPTED | ----------------------> | RUNNING |
 *            |     |     +-----------+ <---------------------- +---------+
 *            |     |     (queue front)   schedule: out of          |
 *            |     |                     blocks, the newest        |
 *            |     |                     RUNNING is preempted      |
 *            |     |                                               |
 *  scheduler_abort, or schedule: nothing      scheduler_finish, scheduler_abort, or
 *  runs and it still does not fit (NO_SPACE)  schedule: alone and no room (NO_SPACE)
 *            |     |                                               |
 *            v     v                                               v
 *       +-----------------------------------------------------------------+
 *       |                            FINISHED                             |
 *       +-----------------------------------------------------------------+
 *                             | scheduler_release
 *                             v
 *                          (gone)
 *
 * One step (scheduler_schedule), budget B = max_num_batched_tokens:
 *   1. decodes: every RUNNING sequence with exactly one token left (its last sample) gets it,
 *      oldest admission first. B >= max_num_seqs, so they always fit the budget.
 *   2. chunked prefill of RUNNING sequences still in their prompt (or recompute), oldest first:
 *      min(left, B remaining, what the free blocks hold) tokens each. A long prompt thus takes
 *      several steps and never delays the decodes of step 1.
 *   3. admission from the waiting queue while B remains and fewer than max_num_seqs run: the
 *      head gets min(left after its prefix-cache hit, B remaining) tokens. Skipped in a step that
 *      preempted: blocks are short, and re-admitting the victim at once would only thrash.
 *   Out of blocks for a RUNNING sequence (1 or 2, when not even one token fits): the newest
 *   RUNNING sequence (latest admission) is preempted: its blocks are freed, its entry in this
 *   step (if any) is withdrawn, it goes to the FRONT of the waiting queue, and later recomputes
 *   prompt + sampled tokens (its full blocks are usually still in the prefix cache). If the
 *   sequence that needs blocks is itself the only one running, it can never fit: NO_SPACE.
 *
 * No-starvation rule (FCFS): admission only ever takes the head of the waiting queue. If the head
 * does not fit (blocks or max_num_seqs), admission stops for this step: a later, smaller request
 * never overtakes it. Preempted sequences go back to the front in their original order, so the
 * order of first admission equals arrival order. Everything running eventually finishes (the
 * caller bounds lengths), freeing blocks, so the head is admitted after finitely many steps; if
 * nothing is running and the head still does not fit, it can never fit: it finishes NO_SPACE.
 *
 * Invariants (scheduler_check):
 *   1. RUNNING sequences are exactly those in `running`, in admission order, at most max_num_seqs;
 *      each holds a kv handle whose token count is n_computed (between steps) and whose table
 *      covers them. WAITING/PREEMPTED sequences are exactly those in `waiting` and hold no blocks.
 *      FINISHED sequences are in neither and hold no blocks.
 *   2. Between steps every RUNNING sequence has n_computed < n_tokens (it has work left).
 *   3. A step's tokens sum to <= max_num_batched_tokens; each sequence appears at most once.
 */
#include "aiinfra/scheduler.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sched_seq.h"

typedef struct entry_copy {
    kv_copy copy;
    int32_t entry;      /* index in entries being built */
} entry_copy;

struct scheduler {
    scheduler_config cfg;
    kv_blocks *kv;
    sched_seqs seqs;
    sched_queue waiting;          /* WAITING and PREEMPTED, head first */
    sched_queue running;          /* RUNNING, oldest admission first */
    int32_t n_live;               /* not FINISHED */
    uint64_t arrivals, admissions;
    bool in_flight;               /* between schedule and postprocess */
    /* the step being built / handed out */
    sched_step step;
    sched_entry *entries;         /* (max_num_seqs) */
    bool *dead;                   /* (max_num_seqs) entry withdrawn by a preemption */
    entry_copy *ecopies;          /* (max_num_seqs) at most one copy per entry */
    kv_copy *copies;              /* (max_num_seqs) */
    int64_t *finished;            /* (max_num_seqs) */
    int32_t *arena;               /* token and table copies */
    size_t arena_cap;
    scheduler_stats stats;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

ai_status scheduler_init(scheduler **out, const scheduler_config *cfg, ai_err *err)
{
    *out = NULL;
    if (cfg->max_num_seqs < 1 || cfg->max_num_seqs > (1 << 20))
        return ai_err_set(err, AI_ERR_RANGE, "scheduler: max_num_seqs %d not in [1, 2^20]", (int)cfg->max_num_seqs);
    if (cfg->max_num_batched_tokens < cfg->max_num_seqs || cfg->max_num_batched_tokens > (1 << 24))
        return ai_err_set(err, AI_ERR_RANGE, "scheduler: max_num_batched_tokens %d not in [max_num_seqs %d, 2^24]",
                          (int)cfg->max_num_batched_tokens, (int)cfg->max_num_seqs);
    scheduler *s = calloc(1, sizeof *s);
    if (!s) return ai_err_set(err, AI_ERR_NOMEM, "scheduler: out of memory");
    s->cfg = *cfg;
    s->seqs.free_slot = -1;
    kv_blocks_config kc = { .num_blocks = cfg->num_blocks, .block_size = cfg->block_size,
                            .enable_prefix_cache = cfg->enable_prefix_cache,
                            .skip_debug_checks = cfg->skip_debug_checks };
    ai_status st = kv_blocks_init(&s->kv, &kc, err);
    if (st != AI_OK) {
        free(s);
        return ai_err_prefix(err, "scheduler");
    }
    size_t m = (size_t)cfg->max_num_seqs;
    s->entries = malloc(m * sizeof *s->entries);
    s->dead = malloc(m * sizeof *s->dead);
    s->ecopies = malloc(m * sizeof *s->ecopies);
    s->copies = malloc(m * sizeof *s->copies);
    s->finished = malloc(m * sizeof *s->finished);
    if (!s->entries || !s->dead || !s->ecopies || !s->copies || !s->finished ||
        sched_queue_reserve(&s->running, cfg->max_num_seqs, err) != AI_OK) {
        scheduler_free(s);
        return ai_err_set(err, AI_ERR_NOMEM, "scheduler: out of memory for %d sequences", (int)cfg->max_num_seqs);
    }
    s->stats.kv_num_blocks = cfg->num_blocks;
    *out = s;
    return AI_OK;
}

void scheduler_free(scheduler *s)
{
    if (!s) return;
    kv_blocks_free(s->kv);
    sched_seqs_free(&s->seqs);
    sched_queue_free(&s->waiting);
    sched_queue_free(&s->running);
    free(s->entries);
    free(s->dead);
    free(s->ecopies);
    free(s->copies);
    free(s->finished);
    free(s->arena);
    free(s);
}

ai_status scheduler_add(scheduler *s, const int32_t *prompt, int32_t n_prompt, int64_t *seq_id, ai_err *err)
{
    int32_t bs = s->cfg.block_size;
    if (n_prompt < 1) return ai_err_set(err, AI_ERR_INVALID, "scheduler: empty prompt");
    if ((int64_t)n_prompt > (int64_t)s->cfg.num_blocks * bs)
        return ai_err_set(err, AI_ERR_RANGE, "scheduler: prompt of %d tokens exceeds the KV pool (%d blocks of %d)",
                          (int)n_prompt, (int)s->cfg.num_blocks, (int)bs);
    ai_status st = sched_queue_reserve(&s->waiting, s->n_live + 1, err);
    if (st != AI_OK) return st;
    int32_t slot;
    st = sched_seqs_new(&s->seqs, prompt, n_prompt, &slot, seq_id, err);
    if (st != AI_OK) return st;
    s->seqs.seq[slot].arrival = ++s->arrivals;
    sched_queue_push_back(&s->waiting, slot);
    s->n_live++;
    s->stats.prompt_tokens += (uint64_t)n_prompt;
    return AI_OK;
}

// --- transitions -------------------------------------------------------------------------------

/* Withdraws the entry of q from the step being built (a preemption or finish inside schedule). */
static void withdraw_entry(scheduler *s, sched_seq *q)
{
    if (q->entry < 0) return;
    s->dead[q->entry] = true;
    s->step.n_tokens -= s->entries[q->entry].end - s->entries[q->entry].start;
    q->entry = -1;
}

static void release_blocks(scheduler *s, sched_seq *q)
{
    if (q->kv >= 0) kv_blocks_seq_close(s->kv, q->kv, NULL);  /* a valid handle: cannot fail but for a broken invariant */
    q->kv = -1;
    q->n_computed = 0;
}

/* RUNNING -> PREEMPTED (front of the waiting queue). */
static void preempt(scheduler *s, int32_t slot)
{
    sched_seq *q = &s->seqs.seq[slot];
    withdraw_entry(s, q);
    release_blocks(s, q);
    sched_queue_remove(&s->running, slot);
    q->state = SCHED_PREEMPTED;
    q->n_preemptions++;
    sched_queue_push_front(&s->waiting, slot);  /* room: waiting was reserved for every live sequence */
    s->step.n_preempted++;
    s->stats.preemptions++;
}

/* any live state -> FINISHED */
static void finish(scheduler *s, int32_t slot, sched_finish reason)
{
    sched_seq *q = &s->seqs.seq[slot];
    withdraw_entry(s, q);
    release_blocks(s, q);
    if (q->state == SCHED_RUNNING) sched_queue_remove(&s->running, slot);
    else sched_queue_remove(&s->waiting, slot);
    q->state = SCHED_FINISHED;
    q->finish = reason;
    s->n_live--;
}

// --- one step ----------------------------------------------------------------------------------

static void add_entry(scheduler *s, int32_t slot, int32_t start, int32_t end, const kv_copy *cow, int32_t n_cow)
{
    sched_seq *q = &s->seqs.seq[slot];
    int32_t e = s->step.n_entries++;
    s->entries[e] = (sched_entry){ .seq_id = sched_seqs_id(&s->seqs, slot), .start = start, .end = end,
                                   .sample = end == q->n_tokens };
    s->dead[e] = false;
    if (n_cow) s->ecopies[s->step.n_copies++] = (entry_copy){ cow[0], e };
    s->step.n_tokens += end - start;
    q->entry = e;
}

/* Largest c in [0, want] whose blocks fit in what is available. */
static int32_t fit_tokens(const scheduler *s, int32_t kvh, int32_t want)
{
    int32_t avail = kv_blocks_num_available(s->kv);
    if (kv_blocks_needed(s->kv, kvh, want) <= avail) return want;
    int32_t lo = 0, hi = want;  /* needed(lo) fits, needed(hi) does not */
    while (hi - lo > 1) {
        int32_t mid = lo + (hi - lo) / 2;
        if (kv_blocks_needed(s->kv, kvh, mid) <= avail) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* Gives RUNNING sequence `slot` up to `want` tokens (fewer if allow_partial and the blocks run
 * short), preempting the newest sequences while not even that fits. The sequence may end up
 * preempted itself, or finished NO_SPACE when it runs alone. */
static ai_status schedule_running(scheduler *s, int32_t slot, int32_t want, bool allow_partial, ai_err *err)
{
    sched_seq *q = &s->seqs.seq[slot];
    for (;;) {
        int32_t c = fit_tokens(s, q->kv, want);
        if (c == want || (allow_partial && c > 0)) {
            kv_copy cow[1];
            int32_t n_cow;
            ai_status st = kv_blocks_append(s->kv, q->kv, c, cow, &n_cow, err);
            if (st != AI_OK) return st;
            add_entry(s, slot, q->n_computed, q->n_computed + c, cow, n_cow);
            return AI_OK;
        }
        int32_t victim = s->running.slot[s->running.n - 1];
        if (victim == slot && s->running.n == 1) {
            finish(s, slot, SCHED_FINISH_NO_SPACE);
            s->finished[s->step.n_finished++] = sched_seqs_id(&s->seqs, slot);
            return AI_OK;
        }
        preempt(s, victim);
        if (victim == slot) return AI_OK;
    }
}

static ai_status build_outputs(scheduler *s, ai_err *err)
{
    /* compact entries and copies, then copy tokens and tables into the arena */
    int32_t n = 0;
    size_t need = 0;
    for (int32_t e = 0; e < s->step.n_entries; e++) {
        if (s->dead[e]) continue;
        s->entries[n] = s->entries[e];
        int32_t slot = sched_seqs_find(&s->seqs, s->entries[n].seq_id);
        int32_t nb;
        kv_blocks_table(s->kv, s->seqs.seq[slot].kv, &nb);
        need += (size_t)(s->entries[n].end - s->entries[n].start) + (size_t)nb;
        for (int32_t c = 0; c < s->step.n_copies; c++)
            if (s->ecopies[c].entry == e) s->ecopies[c].entry = -2 - n;  /* live, renumbered */
        n++;
    }
    int32_t nc = 0;
    for (int32_t c = 0; c < s->step.n_copies; c++)
        if (s->ecopies[c].entry <= -2) s->copies[nc++] = s->ecopies[c].copy;
    s->step.n_entries = n;
    s->step.n_copies = nc;
    if (need > s->arena_cap) {
        size_t cap = s->arena_cap ? s->arena_cap : 1024;
        while (cap < need) cap *= 2;
        int32_t *p = realloc(s->arena, cap * sizeof *p);
        if (!p) return ai_err_set(err, AI_ERR_NOMEM, "scheduler: out of memory for a step of %zu entries", need);
        s->arena = p;
        s->arena_cap = cap;
    }
    size_t off = 0;
    int32_t n_decode = 0;
    for (int32_t e = 0; e < n; e++) {
        sched_entry *en = &s->entries[e];
        sched_seq *q = &s->seqs.seq[sched_seqs_find(&s->seqs, en->seq_id)];
        q->entry = -1;
        int32_t len = en->end - en->start, nb;
        memcpy(s->arena + off, q->tokens + en->start, (size_t)len * sizeof *s->arena);
        en->tokens = s->arena + off;
        off += (size_t)len;
        const int32_t *t = kv_blocks_table(s->kv, q->kv, &nb);
        memcpy(s->arena + off, t, (size_t)nb * sizeof *s->arena);
        en->block_table = s->arena + off;
        en->n_blocks = nb;
        off += (size_t)nb;
        n_decode += len == 1 && en->start >= q->n_prompt;
    }
    s->step.entries = s->entries;
    s->step.copies = s->copies;
    s->step.finished = s->finished;
    s->step.n_decode = n_decode;
    return AI_OK;
}

ai_status scheduler_schedule(scheduler *s, sched_step *out, ai_err *err)
{
    if (s->in_flight)
        return ai_err_set(err, AI_ERR_INVALID, "scheduler: schedule called twice without postprocess");
    uint64_t t0 = now_ns();
    s->step = (sched_step){ .step = s->stats.steps + 1 };
    int32_t budget = s->cfg.max_num_batched_tokens;

    /* 1. decodes, 2. prefill chunks of running sequences; both oldest first */
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t i = 0; i < s->running.n; i++) {
            int32_t slot = s->running.slot[i];
            sched_seq *q = &s->seqs.seq[slot];
            int32_t left = q->n_tokens - q->n_computed;
            if (q->entry >= 0 || (pass == 0) != (left == 1)) continue;
            int32_t room = budget - s->step.n_tokens;
            if (room <= 0) break;
            ai_status st = schedule_running(s, slot, left < room ? left : room, pass == 1, err);
            if (st != AI_OK) return st;
            /* a preemption only removes the tail: sequences after i, or i itself (the loop ends) */
        }
    }
    /* 3. FCFS admission from the head of the waiting queue */
    while (s->step.n_preempted == 0 && s->waiting.n > 0 && s->running.n < s->cfg.max_num_seqs &&
           s->step.n_tokens < budget) {
        int32_t slot = s->waiting.slot[0];
        sched_seq *q = &s->seqs.seq[slot];
        int32_t kvh, cached, chunk;
        ai_status st = kv_blocks_admit(s->kv, q->tokens, q->n_tokens, budget - s->step.n_tokens, &kvh, &cached,
                                       &chunk, err);
        if (st == AI_ERR_RANGE) {
            if (s->running.n > 0 || s->step.n_finished == s->cfg.max_num_seqs) break;  /* the head waits */
            finish(s, slot, SCHED_FINISH_NO_SPACE);  /* nothing runs and it still does not fit */
            s->finished[s->step.n_finished++] = sched_seqs_id(&s->seqs, slot);
            continue;
        }
        if (st != AI_OK) return st;
        sched_queue_remove_at(&s->waiting, 0);
        sched_queue_push_back(&s->running, slot);
        q->state = SCHED_RUNNING;
        q->kv = kvh;
        q->n_computed = cached;
        q->n_cached = cached;
        if (!q->first_admission) q->first_admission = ++s->admissions;
        add_entry(s, slot, cached, cached + chunk, NULL, 0);
    }
    ai_status st = build_outputs(s, err);
    if (st != AI_OK) return st;
    s->in_flight = true;
    *out = s->step;
    uint64_t dt = now_ns() - t0;
    s->stats.schedule_ns += dt;
    s->stats.last_step_ns = dt;
    s->stats.computed_tokens += (uint64_t)s->step.n_tokens;
    return AI_OK;
}

ai_status scheduler_postprocess(scheduler *s, const sched_step *step, const int32_t *sampled, ai_err *err)
{
    if (!s->in_flight || step->step != s->stats.steps + 1)
        return ai_err_set(err, AI_ERR_INVALID, "scheduler: postprocess without a matching schedule");
    uint64_t t0 = now_ns();
    ai_status st = AI_OK;
    for (int32_t e = 0; e < step->n_entries && st == AI_OK; e++) {
        const sched_entry *en = &step->entries[e];
        int32_t slot = sched_seqs_find(&s->seqs, en->seq_id);
        if (slot < 0 || s->seqs.seq[slot].state != SCHED_RUNNING) continue;  /* aborted or finished meanwhile */
        sched_seq *q = &s->seqs.seq[slot];
        if (q->n_computed != en->start) {
            st = ai_err_set(err, AI_ERR_INVALID, "scheduler: step entry %d of %lld starts at %d, computed %d",
                            (int)e, (long long)en->seq_id, (int)en->start, (int)q->n_computed);
            break;
        }
        q->n_computed = en->end;
        st = kv_blocks_commit(s->kv, q->kv, q->tokens, q->n_computed, err);
        if (st == AI_OK && en->sample) {
            st = sched_seq_push_token(q, sampled[e], err);
            s->stats.generation_tokens++;
        }
    }
    s->in_flight = false;
    s->stats.steps++;
    uint64_t dt = now_ns() - t0;
    s->stats.postprocess_ns += dt;
    s->stats.last_step_ns += dt;
    if (s->stats.last_step_ns > s->stats.max_step_ns) s->stats.max_step_ns = s->stats.last_step_ns;
    return st;
}

// --- caller's transitions ----------------------------------------------------------------------

static int32_t find_live(const scheduler *s, int64_t id, const char *what, ai_err *err)
{
    int32_t slot = sched_seqs_find(&s->seqs, id);
    if (slot < 0) {
        ai_err_set(err, AI_ERR_INVALID, "scheduler: %s of unknown sequence %lld", what, (long long)id);
        return -1;
    }
    if (s->seqs.seq[slot].state == SCHED_FINISHED) {
        ai_err_set(err, AI_ERR_INVALID, "scheduler: %s of finished sequence %lld", what, (long long)id);
        return -1;
    }
    return slot;
}

ai_status scheduler_finish(scheduler *s, int64_t id, sched_finish reason, ai_err *err)
{
    if (reason == SCHED_FINISH_NONE)
        return ai_err_set(err, AI_ERR_INVALID, "scheduler: finish of %lld without a reason", (long long)id);
    int32_t slot = find_live(s, id, "finish", err);
    if (slot < 0) return AI_ERR_INVALID;
    finish(s, slot, reason);
    return AI_OK;
}

ai_status scheduler_abort(scheduler *s, int64_t id, ai_err *err)
{
    return scheduler_finish(s, id, SCHED_FINISH_ABORT, err);
}

ai_status scheduler_fork(scheduler *s, int64_t parent, int32_t token, int64_t *child, ai_err *err)
{
    int32_t ps = find_live(s, parent, "fork", err);
    if (ps < 0) return AI_ERR_INVALID;
    const sched_seq *p = &s->seqs.seq[ps];
    if (s->in_flight || p->state != SCHED_RUNNING || p->n_computed != p->n_tokens - 1 || p->n_tokens <= p->n_prompt)
        return ai_err_set(err, AI_ERR_INVALID, "scheduler: fork of %lld: only right after its first sample, between steps",
                          (long long)parent);
    if (s->running.n >= s->cfg.max_num_seqs)
        return ai_err_set(err, AI_ERR_RANGE, "scheduler: fork of %lld: %d sequences already running",
                          (long long)parent, (int)s->running.n);
    ai_status st = sched_queue_reserve(&s->waiting, s->n_live + 1, err);
    if (st != AI_OK) return st;
    int32_t cs;
    st = sched_seqs_new(&s->seqs, p->tokens, p->n_tokens, &cs, child, err);  /* may move p */
    if (st != AI_OK) return st;
    p = &s->seqs.seq[ps];
    sched_seq *c = &s->seqs.seq[cs];
    st = kv_blocks_fork(s->kv, p->kv, &c->kv, err);
    if (st != AI_OK) {
        sched_seqs_delete(&s->seqs, cs);
        return st;
    }
    c->tokens[c->n_tokens - 1] = token;
    c->n_prompt = p->n_prompt;
    c->n_computed = p->n_computed;
    c->state = SCHED_RUNNING;
    c->arrival = ++s->arrivals;
    c->first_admission = ++s->admissions;
    sched_queue_push_back(&s->running, cs);
    s->n_live++;
    return AI_OK;
}

ai_status scheduler_release(scheduler *s, int64_t id, ai_err *err)
{
    int32_t slot = sched_seqs_find(&s->seqs, id);
    if (slot < 0 || s->seqs.seq[slot].state != SCHED_FINISHED)
        return ai_err_set(err, AI_ERR_INVALID, "scheduler: release of %lld, which is not a finished sequence",
                          (long long)id);
    sched_seqs_delete(&s->seqs, slot);
    return AI_OK;
}

// --- queries -----------------------------------------------------------------------------------

ai_status scheduler_seq_info(const scheduler *s, int64_t id, sched_seq_info *info, ai_err *err)
{
    int32_t slot = sched_seqs_find(&s->seqs, id);
    if (slot < 0) return ai_err_set(err, AI_ERR_INVALID, "scheduler: unknown sequence %lld", (long long)id);
    const sched_seq *q = &s->seqs.seq[slot];
    *info = (sched_seq_info){ .state = q->state, .finish = q->finish, .n_prompt = q->n_prompt,
                              .n_tokens = q->n_tokens, .n_computed = q->n_computed, .tokens = q->tokens,
                              .arrival = q->arrival, .first_admission = q->first_admission,
                              .n_preemptions = q->n_preemptions, .n_cached_tokens = q->n_cached };
    return AI_OK;
}

scheduler_stats scheduler_get_stats(const scheduler *s)
{
    scheduler_stats st = s->stats;
    st.num_running = s->running.n;
    st.num_waiting = s->waiting.n;
    st.kv_used_blocks = kv_blocks_num_used(s->kv);
    prefix_cache *pc = kv_blocks_prefix_cache(s->kv);
    if (pc) {
        prefix_cache_stats ps = prefix_cache_get_stats(pc);
        st.prefix_queries = ps.queries;
        st.prefix_hits = ps.hits;
    }
    return st;
}

const kv_blocks *scheduler_kv(const scheduler *s) { return s->kv; }
kv_blocks *scheduler_kv_mut(scheduler *s) { return s->kv; }

ai_status scheduler_check(const scheduler *s, ai_err *err)
{
    ai_status st = kv_blocks_check(s->kv, err);
    if (st != AI_OK) return st;
    if (s->running.n > s->cfg.max_num_seqs)
        return ai_err_set(err, AI_ERR_RUNTIME, "scheduler: invariant 1: %d running > max_num_seqs %d",
                          (int)s->running.n, (int)s->cfg.max_num_seqs);
    int32_t n_running = 0, n_waiting = 0, n_live = 0, bs = s->cfg.block_size;
    for (int32_t i = 0; i < s->running.n; i++) {
        const sched_seq *q = &s->seqs.seq[s->running.slot[i]];
        if (q->state != SCHED_RUNNING || q->kv < 0)
            return ai_err_set(err, AI_ERR_RUNTIME, "scheduler: invariant 1: running slot %d in state %d",
                              (int)s->running.slot[i], (int)q->state);
        int32_t held = kv_blocks_seq_tokens(s->kv, q->kv), nb;
        kv_blocks_table(s->kv, q->kv, &nb);
        if (!s->in_flight && (held != q->n_computed || q->n_computed >= q->n_tokens))
            return ai_err_set(err, AI_ERR_RUNTIME, "scheduler: invariant 1/2: slot %d holds %d, computed %d of %d",
                              (int)s->running.slot[i], (int)held, (int)q->n_computed, (int)q->n_tokens);
        if ((int64_t)nb * bs < held)
            return ai_err_set(err, AI_ERR_RUNTIME, "scheduler: invariant 1: slot %d table too short", (int)s->running.slot[i]);
    }
    for (int32_t i = 0; i < s->waiting.n; i++) {
        const sched_seq *q = &s->seqs.seq[s->waiting.slot[i]];
        if ((q->state != SCHED_WAITING && q->state != SCHED_PREEMPTED) || q->kv >= 0)
            return ai_err_set(err, AI_ERR_RUNTIME, "scheduler: invariant 1: waiting slot %d in state %d holding kv %d",
                              (int)s->waiting.slot[i], (int)q->state, (int)q->kv);
    }
    for (int32_t i = 0; i < s->seqs.n_slots; i++) {
        const sched_seq *q = &s->seqs.seq[i];
        if (!q->used) continue;
        n_running += q->state == SCHED_RUNNING;
        n_waiting += q->state == SCHED_WAITING || q->state == SCHED_PREEMPTED;
        n_live += q->state != SCHED_FINISHED;
        if (q->state == SCHED_FINISHED && q->kv >= 0)
            return ai_err_set(err, AI_ERR_RUNTIME, "scheduler: invariant 1: finished slot %d holds blocks", (int)i);
    }
    if (n_running != s->running.n || n_waiting != s->waiting.n || n_live != s->n_live)
        return ai_err_set(err, AI_ERR_RUNTIME, "scheduler: invariant 1: %d/%d running, %d/%d waiting, %d/%d live",
                          (int)n_running, (int)s->running.n, (int)n_waiting, (int)s->waiting.n, (int)n_live, (int)s->n_live);
    if (kv_blocks_num_seqs(s->kv) != s->running.n)
        return ai_err_set(err, AI_ERR_RUNTIME, "scheduler: invariant 1: %d kv sequences for %d running",
                          (int)kv_blocks_num_seqs(s->kv), (int)s->running.n);
    return AI_OK;
}
