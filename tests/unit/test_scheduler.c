/* test_scheduler.c - continuous batching: hand cases and a randomized simulation with a fake model.
 *
 * The fake executor keeps a KV pool where the "KV" of position p is a rolling hash of tokens
 * 0..p. To compute [start, end) of a sequence it reads position start-1 through the block table
 * (which may be a prefix-cache hit, a forked parent's block or a copy-on-write copy) and writes
 * the rest; after every step every scheduled sequence's whole table is read back and compared
 * with the hash of its own tokens. Wrong sharing, a missed copy or a wrong prefix hit shows up as
 * a mismatch, independently of the scheduler's own bookkeeping.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "aiinfra/scheduler.h"

static void ok(ai_status st, const ai_err *err)
{
    if (st != AI_OK) fail_msg("%s", err->msg);
}

static scheduler *make(int32_t blocks, int32_t bs, int32_t budget, int32_t max_seqs, bool cache)
{
    scheduler *s = NULL;
    ai_err err = { 0 };
    scheduler_config cfg = { .num_blocks = blocks, .block_size = bs, .max_num_batched_tokens = budget,
                             .max_num_seqs = max_seqs, .enable_prefix_cache = cache };
    ok(scheduler_init(&s, &cfg, &err), &err);
    return s;
}

static void check(const scheduler *s)
{
    ai_err err = { 0 };
    if (scheduler_check(s, &err) != AI_OK) fail_msg("invariant: %s", err.msg);
}

static sched_state state_of(const scheduler *s, int64_t id)
{
    sched_seq_info info;
    ai_err err = { 0 };
    ok(scheduler_seq_info(s, id, &info, &err), &err);
    return info.state;
}

/* One step where every sampled token is `tok`; returns the step. */
static sched_step step_all(scheduler *s, int32_t tok)
{
    sched_step st;
    ai_err err = { 0 };
    ok(scheduler_schedule(s, &st, &err), &err);
    int32_t sampled[512];
    assert_true(st.n_entries <= 512);
    for (int32_t i = 0; i < st.n_entries; i++) sampled[i] = tok;
    ok(scheduler_postprocess(s, &st, sampled, &err), &err);
    check(s);
    return st;
}

static const sched_entry *entry_of(const sched_step *st, int64_t id)
{
    for (int32_t i = 0; i < st->n_entries; i++)
        if (st->entries[i].seq_id == id) return &st->entries[i];
    return NULL;
}

static void seq_prompt(int32_t *p, int32_t n, int32_t base)
{
    for (int32_t i = 0; i < n; i++) p[i] = base + i;
}

// --- hand cases --------------------------------------------------------------------------------

static void test_chunked_prefill_then_decode(void **state)
{
    (void)state;
    scheduler *s = make(64, 4, 8, 4, false);
    ai_err err = { 0 };
    int32_t p[20];
    seq_prompt(p, 20, 100);
    int64_t a, b;
    ok(scheduler_add(s, p, 20, &a, &err), &err);
    assert_int_equal(state_of(s, a), SCHED_WAITING);
    sched_step st = step_all(s, 7);
    assert_int_equal(st.n_entries, 1);
    assert_int_equal(st.entries[0].start, 0);
    assert_int_equal(st.entries[0].end, 8);
    assert_false(st.entries[0].sample);
    assert_int_equal(st.entries[0].n_blocks, 2);
    assert_int_equal(st.entries[0].tokens[0], 100);
    assert_int_equal(state_of(s, a), SCHED_RUNNING);
    st = step_all(s, 7);
    assert_int_equal(st.entries[0].start, 8);
    assert_int_equal(st.entries[0].end, 16);
    st = step_all(s, 7);
    assert_int_equal(st.entries[0].start, 16);
    assert_int_equal(st.entries[0].end, 20);
    assert_true(st.entries[0].sample);
    /* a decodes; a long prompt b arrives: a's decode comes first, b gets the rest of the budget */
    ok(scheduler_add(s, p, 20, &b, &err), &err);
    for (int k = 0; k < 3; k++) {
        st = step_all(s, 8 + k);
        assert_int_equal(st.n_entries, 2);
        assert_int_equal(st.entries[0].seq_id, a);
        assert_int_equal(st.entries[0].end - st.entries[0].start, 1);
        assert_true(st.entries[0].sample);
        assert_int_equal(st.entries[0].start, 20 + k);
        assert_int_equal(st.entries[1].seq_id, b);
        assert_int_equal(st.entries[1].start, 7 * k);
        assert_int_equal(st.entries[1].end, k < 2 ? 7 * (k + 1) : 20);
        assert_int_equal(st.n_tokens, 1 + st.entries[1].end - st.entries[1].start);
        assert_int_equal(st.n_decode, 1);
    }
    sched_seq_info info;
    ok(scheduler_seq_info(s, a, &info, &err), &err);
    assert_int_equal(info.n_tokens, 24);
    assert_int_equal(info.tokens[20], 7);
    assert_int_equal(info.tokens[23], 10);
    ok(scheduler_finish(s, a, SCHED_FINISH_STOP, &err), &err);
    ok(scheduler_finish(s, b, SCHED_FINISH_LENGTH, &err), &err);
    check(s);
    assert_int_equal(kv_blocks_num_used(scheduler_kv(s)), 0);
    ok(scheduler_seq_info(s, a, &info, &err), &err);
    assert_int_equal(info.finish, SCHED_FINISH_STOP);
    ok(scheduler_release(s, a, &err), &err);
    assert_int_equal(scheduler_seq_info(s, a, &info, &err), AI_ERR_INVALID);
    scheduler_stats stats = scheduler_get_stats(s);
    assert_int_equal(stats.steps, 6);
    assert_int_equal(stats.generation_tokens, 4 + 1);
    assert_true(stats.schedule_ns > 0);
    scheduler_free(s);
}

static void test_max_num_seqs_and_fcfs(void **state)
{
    (void)state;
    /* 6 blocks of 4 tokens */
    scheduler *s = make(6, 4, 64, 2, false);
    ai_err err = { 0 };
    int32_t p[16];
    seq_prompt(p, 16, 1);
    int64_t a, b, c, d;
    ok(scheduler_add(s, p, 15, &a, &err), &err);  /* 4 blocks */
    sched_step st = step_all(s, 0);
    assert_int_equal(st.n_entries, 1);
    ok(scheduler_add(s, p, 12, &b, &err), &err);  /* needs 3 blocks, 2 left */
    ok(scheduler_add(s, p, 2, &c, &err), &err);   /* would fit, but must not overtake b */
    st = step_all(s, 0);
    assert_int_equal(st.n_entries, 1);
    assert_int_equal(state_of(s, b), SCHED_WAITING);
    assert_int_equal(state_of(s, c), SCHED_WAITING);
    ok(scheduler_finish(s, a, SCHED_FINISH_STOP, &err), &err);
    ok(scheduler_add(s, p, 2, &d, &err), &err);
    st = step_all(s, 0);
    /* b then c admitted; max_num_seqs = 2 keeps d waiting */
    assert_int_equal(st.n_entries, 2);
    assert_int_equal(st.entries[0].seq_id, b);
    assert_int_equal(st.entries[1].seq_id, c);
    assert_int_equal(state_of(s, d), SCHED_WAITING);
    sched_seq_info ib, ic;
    ok(scheduler_seq_info(s, b, &ib, &err), &err);
    ok(scheduler_seq_info(s, c, &ic, &err), &err);
    assert_true(ib.first_admission < ic.first_admission);
    scheduler_free(s);
}

static void test_preemption_recompute(void **state)
{
    (void)state;
    /* 4 blocks of 2: a and b take 2 blocks each after their prompts of 3 */
    scheduler *s = make(4, 2, 16, 4, true);
    ai_err err = { 0 };
    int32_t pa[3] = { 1, 2, 3 }, pb[3] = { 4, 5, 6 };
    int64_t a, b;
    ok(scheduler_add(s, pa, 3, &a, &err), &err);
    ok(scheduler_add(s, pb, 3, &b, &err), &err);
    sched_step st = step_all(s, 9);   /* both prefilled, each sampled one token: 4 tokens, 2 blocks */
    assert_int_equal(st.n_entries, 2);
    st = step_all(s, 9);              /* decode of position 3: fits in the second blocks */
    assert_int_equal(st.n_entries, 2);
    assert_int_equal(st.n_preempted, 0);
    /* position 4 needs a third block each: none free; b (newest) is preempted */
    st = step_all(s, 9);
    assert_int_equal(st.n_preempted, 1);
    assert_int_equal(st.n_entries, 1);
    assert_int_equal(st.entries[0].seq_id, a);
    sched_seq_info ib;
    ok(scheduler_seq_info(s, b, &ib, &err), &err);
    assert_int_equal(ib.state, SCHED_PREEMPTED);
    assert_int_equal(ib.n_preemptions, 1);
    assert_int_equal(ib.n_tokens, 5);   /* prompt 3 + 2 sampled, kept */
    assert_int_equal(ib.n_computed, 0);
    /* a's third block came from evicting b's most recent idle block (b released tail first);
     * a finishes: b comes back and recomputes, its first block still cached */
    ok(scheduler_finish(s, a, SCHED_FINISH_LENGTH, &err), &err);
    st = step_all(s, 9);
    const sched_entry *e = entry_of(&st, b);
    assert_non_null(e);
    assert_int_equal(e->start, 2);
    assert_int_equal(e->end, 5);
    assert_true(e->sample);
    assert_int_equal(e->tokens[0], 6);
    assert_int_equal(e->tokens[1], 9);   /* its sampled tokens are recomputed as input */
    ok(scheduler_seq_info(s, b, &ib, &err), &err);
    assert_int_equal(ib.state, SCHED_RUNNING);
    assert_int_equal(ib.n_cached_tokens, 2);
    assert_int_equal(ib.n_tokens, 6);
    assert_true(scheduler_get_stats(s).preemptions == 1);
    scheduler_free(s);
}

static void test_no_space_alone(void **state)
{
    (void)state;
    scheduler *s = make(2, 4, 16, 2, false);
    ai_err err = { 0 };
    int32_t p[9] = { 0 };
    int64_t a;
    assert_int_equal(scheduler_add(s, p, 9, &a, &err), AI_ERR_RANGE);  /* never fits */
    assert_int_equal(scheduler_add(s, p, 0, &a, &err), AI_ERR_INVALID);
    ok(scheduler_add(s, p, 6, &a, &err), &err);
    step_all(s, 1);  /* prefill 6, 7 tokens */
    step_all(s, 1);  /* 7 computed, 8 tokens */
    step_all(s, 1);  /* 8 computed: the pool is full, 9 tokens */
    sched_step st = step_all(s, 1);
    assert_int_equal(st.n_entries, 0);
    assert_int_equal(st.n_finished, 1);
    assert_int_equal(st.finished[0], a);
    sched_seq_info info;
    ok(scheduler_seq_info(s, a, &info, &err), &err);
    assert_int_equal(info.finish, SCHED_FINISH_NO_SPACE);
    assert_int_equal(kv_blocks_num_used(scheduler_kv(s)), 0);
    scheduler_free(s);
}

static void test_abort_everywhere(void **state)
{
    (void)state;
    scheduler *s = make(8, 2, 4, 2, true);
    ai_err err = { 0 };
    int32_t p[6] = { 1, 2, 3, 4, 5, 6 };
    int64_t a, b, c;
    ok(scheduler_add(s, p, 6, &a, &err), &err);
    ok(scheduler_add(s, p, 6, &b, &err), &err);
    ok(scheduler_add(s, p, 6, &c, &err), &err);
    ok(scheduler_abort(s, c, &err), &err);                      /* WAITING */
    sched_step st;
    ok(scheduler_schedule(s, &st, &err), &err);
    assert_int_equal(scheduler_schedule(s, &st, &err), AI_ERR_INVALID);  /* twice */
    ok(scheduler_abort(s, a, &err), &err);                      /* RUNNING, in flight */
    int32_t sampled[4] = { 0 };
    ok(scheduler_postprocess(s, &st, sampled, &err), &err);    /* a's entry is ignored */
    assert_int_equal(scheduler_postprocess(s, &st, sampled, &err), AI_ERR_INVALID);
    check(s);
    assert_int_equal(state_of(s, a), SCHED_FINISHED);
    step_all(s, 0);
    ok(scheduler_abort(s, b, &err), &err);                      /* RUNNING, between steps */
    assert_int_equal(scheduler_abort(s, b, &err), AI_ERR_INVALID);  /* already finished */
    assert_int_equal(scheduler_abort(s, 12345, &err), AI_ERR_INVALID);
    assert_int_equal(scheduler_release(s, 12345, &err), AI_ERR_INVALID);
    check(s);
    assert_int_equal(kv_blocks_num_used(scheduler_kv(s)), 0);
    ok(scheduler_release(s, a, &err), &err);
    ok(scheduler_release(s, b, &err), &err);
    ok(scheduler_release(s, c, &err), &err);
    /* a released id stays unknown even when its slot is reused */
    int64_t d;
    ok(scheduler_add(s, p, 6, &d, &err), &err);
    assert_true(d != a && d != b && d != c);
    assert_int_equal(scheduler_abort(s, a, &err), AI_ERR_INVALID);
    scheduler_free(s);  /* with a live sequence: freed */

    scheduler_config bad = { .num_blocks = 8, .block_size = 2, .max_num_batched_tokens = 2, .max_num_seqs = 4 };
    assert_int_equal(scheduler_init(&s, &bad, &err), AI_ERR_RANGE);
    bad.max_num_batched_tokens = 8;
    bad.block_size = 0;
    assert_int_equal(scheduler_init(&s, &bad, &err), AI_ERR_RANGE);
}

static void test_fork_cow(void **state)
{
    (void)state;
    scheduler *s = make(16, 4, 16, 4, false);
    ai_err err = { 0 };
    int32_t p[5] = { 1, 2, 3, 4, 5 };
    int64_t a, c;
    ok(scheduler_add(s, p, 5, &a, &err), &err);
    assert_int_equal(scheduler_fork(s, a, 42, &c, &err), AI_ERR_INVALID);  /* not sampled yet */
    step_all(s, 41);
    ok(scheduler_fork(s, a, 42, &c, &err), &err);
    check(s);
    sched_step st;
    ok(scheduler_schedule(s, &st, &err), &err);
    assert_int_equal(st.n_entries, 2);
    assert_int_equal(st.n_copies, 1);    /* the half-filled second block was shared */
    const sched_entry *ea = entry_of(&st, a), *ec = entry_of(&st, c);
    assert_int_equal(ea->tokens[0], 41);
    assert_int_equal(ec->tokens[0], 42);
    assert_int_equal(ea->block_table[0], ec->block_table[0]);  /* full block shared */
    assert_true(ea->block_table[1] != ec->block_table[1]);
    /* a, scheduled first, wrote into the shared block first: it got the copy, c kept the original */
    assert_int_equal(st.copies[0].src, ec->block_table[1]);
    assert_int_equal(st.copies[0].dst, ea->block_table[1]);
    int32_t sampled[2] = { 0, 0 };
    ok(scheduler_postprocess(s, &st, sampled, &err), &err);
    check(s);
    scheduler_free(s);
}

// --- randomized simulation ------------------------------------------------------------------------

static uint64_t rnd(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static uint64_t kv_of(uint64_t prev, int32_t tok) { return (prev ^ (uint64_t)(uint32_t)tok) * 0x100000001b3ull + 7; }

typedef struct sim_seq {
    int64_t id;
    int32_t target;      /* tokens to generate */
    bool forked, done;
    uint64_t arrival, admission;
    int32_t left_before; /* tokens left before the current step */
} sim_seq;

static void run_sim(uint64_t seed, int n_steps)
{
    uint64_t x = (seed + 1) * 0x9e3779b97f4a7c15ull;  /* splitmix-style spread: nearby seeds differ */
    x ^= x >> 31;
    x |= 1;
    int32_t bs = (int32_t[]){ 1, 2, 4, 16 }[rnd(&x) % 4];
    int32_t max_seqs = 1 + (int32_t)(rnd(&x) % 8);
    int32_t budget = max_seqs + (int32_t)(rnd(&x) % 48);
    int32_t blocks = 8 + (int32_t)(rnd(&x) % (uint64_t)(256 / bs + 8));
    bool cache = rnd(&x) % 4 != 0;
    bool cap_ctx = rnd(&x) % 2;  /* else sequences may outgrow the pool: NO_SPACE */
    scheduler *s = make(blocks, bs, budget, max_seqs, cache);
    ai_err err = { 0 };
    uint64_t *pool = calloc((size_t)blocks * (size_t)bs, sizeof *pool);
    int32_t cap = 4096, n = 0;
    sim_seq *seqs = calloc((size_t)cap, sizeof *seqs);
    int32_t sys[3][40];
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 40; i++) sys[k][i] = (int32_t)(rnd(&x) % 50);
    int32_t prompt[512], sampled[64];
    int64_t max_ctx = (int64_t)blocks * bs;
    int n_finished = 0, n_nospace = 0, drain_steps = 0;
    for (int step = 0; ; step++) {
        bool draining = step >= n_steps;
        if (draining && n_finished == n) break;
        if (draining && ++drain_steps > 200000) fail_msg("seed %llu: starvation, %d of %d finished", (unsigned long long)seed, n_finished, n);
        /* arrivals */
        int arrivals = draining ? 0 : (int)(rnd(&x) % 3);
        for (int k = 0; k < arrivals && n < cap; k++) {
            int32_t len = 1 + (int32_t)(rnd(&x) % (uint64_t)(3 * budget));
            if (len > 500) len = 500;
            if (len > max_ctx) len = (int32_t)max_ctx;
            int32_t shared = rnd(&x) % 2 ? (int32_t)(rnd(&x) % 41) : 0;
            if (shared > len) shared = len;
            int sp = (int)(rnd(&x) % 3);
            for (int32_t i = 0; i < len; i++) prompt[i] = i < shared ? sys[sp][i] : (int32_t)(rnd(&x) % 50);
            sim_seq *q = &seqs[n];
            ok(scheduler_add(s, prompt, len, &q->id, &err), &err);
            q->target = 1 + (int32_t)(rnd(&x) % 24);
            sched_seq_info info;
            ok(scheduler_seq_info(s, q->id, &info, &err), &err);
            q->arrival = info.arrival;
            n++;
        }
        /* remember which running sequences are due a decode */
        for (int32_t i = 0; i < n; i++) {
            sched_seq_info info;
            seqs[i].left_before = -1;
            if (seqs[i].done) continue;
            ok(scheduler_seq_info(s, seqs[i].id, &info, &err), &err);
            if (info.state == SCHED_RUNNING) seqs[i].left_before = info.n_tokens - info.n_computed;
        }
        sched_step st;
        ok(scheduler_schedule(s, &st, &err), &err);
        assert_true(st.n_tokens <= budget);
        assert_true(st.n_entries <= max_seqs);
        int32_t sum = 0;
        bool seen_prefill = false;
        for (int32_t e = 0; e < st.n_entries; e++) {
            const sched_entry *en = &st.entries[e];
            assert_true(en->end > en->start);
            sum += en->end - en->start;
            for (int32_t f = 0; f < e; f++) assert_true(st.entries[f].seq_id != en->seq_id);
            sim_seq *q = NULL;
            for (int32_t i = 0; i < n; i++) if (seqs[i].id == en->seq_id) q = &seqs[i];
            assert_non_null(q);
            bool decode = q->left_before == 1;
            if (decode) assert_false(seen_prefill);   /* decodes first */
            else seen_prefill = true;
        }
        assert_int_equal(sum, st.n_tokens);
        /* every sequence that was due a decode got it, unless preempted or out of room */
        for (int32_t i = 0; i < n; i++) {
            if (seqs[i].left_before != 1) continue;
            sched_seq_info info;
            ok(scheduler_seq_info(s, seqs[i].id, &info, &err), &err);
            if (info.state == SCHED_RUNNING) assert_non_null(entry_of(&st, seqs[i].id));
        }
        /* the fake executor: copies, then compute each entry through its table */
        for (int32_t c = 0; c < st.n_copies; c++)
            memcpy(pool + (size_t)st.copies[c].dst * bs, pool + (size_t)st.copies[c].src * bs, (size_t)bs * sizeof *pool);
        for (int32_t e = 0; e < st.n_entries; e++) {
            const sched_entry *en = &st.entries[e];
            assert_true((int64_t)en->n_blocks * bs >= en->end);
            uint64_t h = en->start ? pool[(size_t)en->block_table[(en->start - 1) / bs] * bs + (en->start - 1) % bs] : 0;
            for (int32_t p = en->start; p < en->end; p++) {
                h = kv_of(h, en->tokens[p - en->start]);
                pool[(size_t)en->block_table[p / bs] * bs + p % bs] = h;
            }
            sampled[e] = (int32_t)(rnd(&x) % 50);
        }
        /* verify every entry's whole KV against its own tokens */
        for (int32_t e = 0; e < st.n_entries; e++) {
            const sched_entry *en = &st.entries[e];
            sched_seq_info info;
            ok(scheduler_seq_info(s, en->seq_id, &info, &err), &err);
            uint64_t h = 0;
            for (int32_t p = 0; p < en->end; p++) {
                h = kv_of(h, info.tokens[p]);
                if (pool[(size_t)en->block_table[p / bs] * bs + p % bs] != h)
                    fail_msg("seed %llu step %d: KV of position %d of sequence %lld is wrong", (unsigned long long)seed,
                             step, p, (long long)en->seq_id);
            }
        }
        /* an abort while the step is in flight */
        if (n > 0 && rnd(&x) % 16 == 0) {
            sim_seq *q = &seqs[rnd(&x) % (uint64_t)n];
            sched_seq_info info;
            if (!q->done) {
                ok(scheduler_seq_info(s, q->id, &info, &err), &err);
                if (info.state != SCHED_FINISHED) ok(scheduler_abort(s, q->id, &err), &err);
            }
        }
        ok(scheduler_postprocess(s, &st, sampled, &err), &err);
        /* the caller's decisions: length, random aborts, forks */
        for (int32_t i = 0; i < n; i++) {
            sim_seq *q = &seqs[i];
            if (q->done) continue;
            sched_seq_info info;
            ok(scheduler_seq_info(s, q->id, &info, &err), &err);
            if (info.state == SCHED_FINISHED) {
                if (info.finish == SCHED_FINISH_NO_SPACE) {
                    n_nospace++;
                    assert_true(info.n_tokens >= max_ctx);  /* only when it alone fills the pool */
                }
                q->done = true;
                q->admission = info.first_admission;
                n_finished++;
                ok(scheduler_release(s, q->id, &err), &err);
                continue;
            }
            int32_t gen = info.n_tokens - info.n_prompt;
            if (gen >= q->target || (cap_ctx && info.n_tokens >= max_ctx)) {
                ok(scheduler_finish(s, q->id, SCHED_FINISH_LENGTH, &err), &err);
            } else if (info.state == SCHED_RUNNING && gen == 1 && info.n_computed == info.n_tokens - 1 &&
                       rnd(&x) % 8 == 0 && n < cap && !draining) {
                sim_seq *c = &seqs[n];
                if (scheduler_fork(s, q->id, (int32_t)(rnd(&x) % 50), &c->id, &err) == AI_OK) {
                    c->target = q->target;
                    c->forked = true;
                    n++;
                }
            } else if (rnd(&x) % 200 == 0) {
                ok(scheduler_abort(s, q->id, &err), &err);
            }
        }
        check(s);
        /* used blocks are exactly the running sequences' blocks; idle blocks only when cached */
        const kv_blocks *kv = scheduler_kv(s);
        assert_int_equal(kv_blocks_num_used(kv) + kv_blocks_num_free(kv) + kv_blocks_num_idle(kv), blocks);
    }
    /* FCFS: first admissions in arrival order (forks are admitted at birth, left out) */
    uint64_t last = 0;
    for (int32_t i = 0; i < n; i++) {
        if (seqs[i].forked || !seqs[i].admission) continue;
        if (seqs[i].admission <= last && seqs[i].admission)
            fail_msg("seed %llu: sequence %d (arrival %llu) admitted out of order", (unsigned long long)seed, i,
                     (unsigned long long)seqs[i].arrival);
        last = seqs[i].admission;
    }
    scheduler_stats stats = scheduler_get_stats(s);
    assert_int_equal(stats.num_running, 0);
    assert_int_equal(stats.num_waiting, 0);
    assert_int_equal(kv_blocks_num_used(scheduler_kv(s)), 0);
    if (cache) assert_int_equal(kv_blocks_num_idle(scheduler_kv(s)),
                                prefix_cache_num_cached(kv_blocks_prefix_cache(scheduler_kv_mut(s))));
    printf("  sim seed %llu: bs %d blocks %d budget %d max_seqs %d cache %d: %d seqs, %llu steps, %llu preemptions, "
           "%d no-space, prefix hits %llu/%llu tokens, %.1f us/step\n", (unsigned long long)seed, bs, blocks, budget,
           max_seqs, cache, n, (unsigned long long)stats.steps, (unsigned long long)stats.preemptions, n_nospace,
           (unsigned long long)stats.prefix_hits, (unsigned long long)stats.prefix_queries,
           stats.steps ? (stats.schedule_ns + stats.postprocess_ns) / 1e3 / (double)stats.steps : 0.0);
    free(pool);
    free(seqs);
    scheduler_free(s);
}

static void test_simulation(void **state)
{
    (void)state;
    uint64_t seed = getenv("SCHED_SEED") ? strtoull(getenv("SCHED_SEED"), NULL, 0) : (uint64_t)time(NULL);
    int runs = getenv("SCHED_RUNS") ? atoi(getenv("SCHED_RUNS")) : 12;
    printf("test_simulation: seed %llu (rerun with SCHED_SEED=%llu)\n", (unsigned long long)seed, (unsigned long long)seed);
    for (int r = 0; r < runs; r++) run_sim(seed * 1000003ull + (uint64_t)r, 1500);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunked_prefill_then_decode),
        cmocka_unit_test(test_max_num_seqs_and_fcfs),
        cmocka_unit_test(test_preemption_recompute),
        cmocka_unit_test(test_no_space_alone),
        cmocka_unit_test(test_abort_everywhere),
        cmocka_unit_test(test_fork_cow),
        cmocka_unit_test(test_simulation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
