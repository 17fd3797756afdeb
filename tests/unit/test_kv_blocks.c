/* test_kv_blocks.c - the KV block manager: tables, refcounts, fork, copy-on-write, out of blocks.
 *
 * Hand cases check exact block ids and refcounts. The randomized test runs a shadow executor:
 * a fake KV pool where each block holds one value per position; every append writes the
 * sequence's own values after performing the returned copies, and after every operation every
 * open sequence must read back exactly its own values through its table. That proves sharing and
 * copy-on-write are right (a write into a shared block would show up in the other sequence), not
 * just that the bookkeeping agrees with itself.
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

#include "aiinfra/kv_blocks.h"

static kv_blocks *make(int32_t n, int32_t bs, bool cache)
{
    kv_blocks *kv = NULL;
    ai_err err = { 0 };
    kv_blocks_config cfg = { .num_blocks = n, .block_size = bs, .enable_prefix_cache = cache };
    if (kv_blocks_init(&kv, &cfg, &err) != AI_OK) fail_msg("init: %s", err.msg);
    return kv;
}

static void check(const kv_blocks *kv)
{
    ai_err err = { 0 };
    if (kv_blocks_check(kv, &err) != AI_OK) fail_msg("invariant: %s", err.msg);
}

static void ok(ai_status st, const ai_err *err)
{
    if (st != AI_OK) fail_msg("%s", err->msg);
}

static void expect_table(const kv_blocks *kv, int32_t seq, int32_t n, const int32_t *want)
{
    int32_t nb;
    const int32_t *t = kv_blocks_table(kv, seq, &nb);
    assert_int_equal(nb, n);
    for (int32_t i = 0; i < n; i++) assert_int_equal(t[i], want[i]);
}

// --- hand cases --------------------------------------------------------------------------------

static void test_append_and_close(void **state)
{
    (void)state;
    kv_blocks *kv = make(8, 4, false);
    ai_err err = { 0 };
    int32_t a, n_cow;
    kv_copy cow[1];
    ok(kv_blocks_seq_open(kv, &a, &err), &err);
    assert_int_equal(kv_blocks_needed(kv, a, 5), 2);
    ok(kv_blocks_append(kv, a, 5, cow, &n_cow, &err), &err);
    assert_int_equal(n_cow, 0);
    expect_table(kv, a, 2, (int32_t[]){ 0, 1 });
    assert_int_equal(kv_blocks_seq_tokens(kv, a), 5);
    ok(kv_blocks_append(kv, a, 3, cow, &n_cow, &err), &err);  /* fills block 1, no new block */
    expect_table(kv, a, 2, (int32_t[]){ 0, 1 });
    ok(kv_blocks_append(kv, a, 1, cow, &n_cow, &err), &err);
    expect_table(kv, a, 3, (int32_t[]){ 0, 1, 2 });
    ok(kv_blocks_append(kv, a, 0, cow, &n_cow, &err), &err);   /* zero tokens: nothing */
    expect_table(kv, a, 3, (int32_t[]){ 0, 1, 2 });
    assert_int_equal(kv_blocks_num_used(kv), 3);
    assert_int_equal(kv_blocks_num_free(kv), 5);
    for (int b = 0; b < 3; b++) assert_int_equal(kv_blocks_refcount(kv, b), 1);
    check(kv);
    ok(kv_blocks_seq_close(kv, a, &err), &err);
    assert_int_equal(kv_blocks_num_used(kv), 0);
    assert_int_equal(kv_blocks_num_free(kv), 8);
    assert_int_equal(kv_blocks_num_seqs(kv), 0);
    check(kv);
    kv_blocks_free(kv);
}

static void test_out_of_blocks_no_side_effects(void **state)
{
    (void)state;
    kv_blocks *kv = make(4, 4, false);
    ai_err err = { 0 };
    int32_t a, b, n_cow;
    kv_copy cow[1];
    ok(kv_blocks_seq_open(kv, &a, &err), &err);
    ok(kv_blocks_seq_open(kv, &b, &err), &err);
    ok(kv_blocks_append(kv, a, 12, cow, &n_cow, &err), &err);  /* 3 of 4 blocks */
    ok(kv_blocks_append(kv, b, 2, cow, &n_cow, &err), &err);   /* the 4th */
    /* b needs 2 more blocks for 7 more tokens: none left */
    assert_int_equal(kv_blocks_append(kv, b, 7, cow, &n_cow, &err), AI_ERR_RANGE);
    assert_non_null(strstr(err.msg, "out of blocks"));
    assert_int_equal(kv_blocks_seq_tokens(kv, b), 2);
    expect_table(kv, b, 1, (int32_t[]){ 3 });
    assert_int_equal(kv_blocks_num_free(kv), 0);
    check(kv);
    /* filling b's last block needs no block and works */
    ok(kv_blocks_append(kv, b, 2, cow, &n_cow, &err), &err);
    assert_int_equal(kv_blocks_append(kv, b, 1, cow, &n_cow, &err), AI_ERR_RANGE);
    ok(kv_blocks_seq_close(kv, a, &err), &err);
    /* a's blocks came back; the last one freed (block 0: closed last-first) is reused first */
    ok(kv_blocks_append(kv, b, 1, cow, &n_cow, &err), &err);
    expect_table(kv, b, 2, (int32_t[]){ 3, 0 });
    check(kv);
    /* bad handles and sizes */
    assert_int_equal(kv_blocks_append(kv, a, 1, cow, &n_cow, &err), AI_ERR_INVALID);
    assert_int_equal(kv_blocks_append(kv, 99, 1, cow, &n_cow, &err), AI_ERR_INVALID);
    assert_int_equal(kv_blocks_append(kv, -1, 1, cow, &n_cow, &err), AI_ERR_INVALID);
    assert_int_equal(kv_blocks_append(kv, b, -1, cow, &n_cow, &err), AI_ERR_RANGE);
    assert_int_equal(kv_blocks_append(kv, b, INT32_MAX, cow, &n_cow, &err), AI_ERR_RANGE);
    assert_int_equal(kv_blocks_seq_close(kv, a, &err), AI_ERR_INVALID);  /* closed twice */
    assert_int_equal(kv_blocks_fork(kv, a, &a, &err), AI_ERR_INVALID);
    check(kv);
    kv_blocks_free(kv);

    kv_blocks_config bad = { .num_blocks = 0, .block_size = 16 };
    assert_int_equal(kv_blocks_init(&kv, &bad, &err), AI_ERR_RANGE);
    assert_null(kv);
    bad = (kv_blocks_config){ .num_blocks = 4, .block_size = 0 };
    assert_int_equal(kv_blocks_init(&kv, &bad, &err), AI_ERR_RANGE);
    bad = (kv_blocks_config){ .num_blocks = 4, .block_size = 5000, .enable_prefix_cache = true };
    assert_int_equal(kv_blocks_init(&kv, &bad, &err), AI_ERR_RANGE);
}

static void test_fork_cow_diverge(void **state)
{
    (void)state;
    kv_blocks *kv = make(8, 4, false);
    ai_err err = { 0 };
    int32_t a, c, n_cow;
    kv_copy cow[1];
    ok(kv_blocks_seq_open(kv, &a, &err), &err);
    ok(kv_blocks_append(kv, a, 6, cow, &n_cow, &err), &err);  /* [0 full][1 half] */
    ok(kv_blocks_fork(kv, a, &c, &err), &err);
    expect_table(kv, c, 2, (int32_t[]){ 0, 1 });
    assert_int_equal(kv_blocks_seq_tokens(kv, c), 6);
    assert_int_equal(kv_blocks_refcount(kv, 0), 2);
    assert_int_equal(kv_blocks_refcount(kv, 1), 2);
    assert_int_equal(kv_blocks_num_used(kv), 2);
    check(kv);
    /* a writes position 6 into the shared half block: it gets a copy first */
    assert_int_equal(kv_blocks_needed(kv, a, 1), 1);
    ok(kv_blocks_append(kv, a, 1, cow, &n_cow, &err), &err);
    assert_int_equal(n_cow, 1);
    assert_int_equal(cow[0].src, 1);
    assert_int_equal(cow[0].dst, 2);
    expect_table(kv, a, 2, (int32_t[]){ 0, 2 });
    assert_int_equal(kv_blocks_refcount(kv, 1), 1);
    assert_int_equal(kv_blocks_refcount(kv, 2), 1);
    assert_int_equal(kv_blocks_refcount(kv, 0), 2);  /* the full block stays shared */
    /* c is now the only owner of block 1: writes in place */
    assert_int_equal(kv_blocks_needed(kv, c, 1), 0);
    ok(kv_blocks_append(kv, c, 1, cow, &n_cow, &err), &err);
    assert_int_equal(n_cow, 0);
    expect_table(kv, c, 2, (int32_t[]){ 0, 1 });
    /* diverge further: new blocks are private */
    ok(kv_blocks_append(kv, a, 5, cow, &n_cow, &err), &err);
    ok(kv_blocks_append(kv, c, 5, cow, &n_cow, &err), &err);
    assert_int_equal(n_cow, 0);
    expect_table(kv, a, 3, (int32_t[]){ 0, 2, 3 });
    expect_table(kv, c, 3, (int32_t[]){ 0, 1, 4 });
    check(kv);
    ok(kv_blocks_seq_close(kv, a, &err), &err);
    assert_int_equal(kv_blocks_refcount(kv, 0), 1);
    ok(kv_blocks_seq_close(kv, c, &err), &err);
    assert_int_equal(kv_blocks_num_free(kv), 8);
    check(kv);

    /* a full last block is never copied: the fork appends into a fresh block */
    ok(kv_blocks_seq_open(kv, &a, &err), &err);
    ok(kv_blocks_append(kv, a, 8, cow, &n_cow, &err), &err);
    ok(kv_blocks_fork(kv, a, &c, &err), &err);
    assert_int_equal(kv_blocks_needed(kv, c, 1), 1);
    ok(kv_blocks_append(kv, c, 1, cow, &n_cow, &err), &err);
    assert_int_equal(n_cow, 0);
    check(kv);
    kv_blocks_free(kv);  /* open sequences are freed with the manager */
}

static void test_cow_out_of_blocks(void **state)
{
    (void)state;
    kv_blocks *kv = make(2, 4, false);
    ai_err err = { 0 };
    int32_t a, c, n_cow;
    kv_copy cow[1];
    ok(kv_blocks_seq_open(kv, &a, &err), &err);
    ok(kv_blocks_append(kv, a, 5, cow, &n_cow, &err), &err);  /* both blocks */
    ok(kv_blocks_fork(kv, a, &c, &err), &err);
    assert_int_equal(kv_blocks_append(kv, c, 1, cow, &n_cow, &err), AI_ERR_RANGE);
    assert_int_equal(n_cow, 0);
    expect_table(kv, c, 2, (int32_t[]){ 0, 1 });
    assert_int_equal(kv_blocks_refcount(kv, 1), 2);
    assert_int_equal(kv_blocks_seq_tokens(kv, c), 5);
    check(kv);
    ok(kv_blocks_seq_close(kv, a, &err), &err);  /* now c owns block 1 alone: no copy needed */
    ok(kv_blocks_append(kv, c, 3, cow, &n_cow, &err), &err);
    assert_int_equal(n_cow, 0);
    check(kv);
    kv_blocks_free(kv);
}

// --- randomized, with a shadow executor ----------------------------------------------------------

static uint64_t rng_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

#define R_SEQS 24

typedef struct shadow_seq {
    int32_t id;          /* kv handle, -1 = not open */
    int32_t *vals;       /* expected value of each position */
    int32_t n, cap;
} shadow_seq;

static void shadow_push(shadow_seq *s, int32_t v)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->vals = realloc(s->vals, (size_t)s->cap * sizeof *s->vals);
        assert_non_null(s->vals);
    }
    s->vals[s->n++] = v;
}

static void run_random(uint64_t seed, int32_t n_blocks, int32_t bs, int steps)
{
    kv_blocks *kv = make(n_blocks, bs, false);
    int32_t *pool = calloc((size_t)n_blocks * (size_t)bs, sizeof *pool);  /* the fake KV */
    shadow_seq seqs[R_SEQS];
    memset(seqs, 0, sizeof seqs);
    for (int i = 0; i < R_SEQS; i++) seqs[i].id = -1;
    uint64_t x = seed | 1;
    int32_t next_val = 1, n_fail = 0, n_cow_total = 0;
    ai_err err = { 0 };
    for (int step = 0; step < steps; step++) {
        int i = (int)(rng_next(&x) % R_SEQS);
        shadow_seq *s = &seqs[i];
        int op = (int)(rng_next(&x) % 10);
        if (s->id < 0) {
            if (op < 5) {
                ok(kv_blocks_seq_open(kv, &s->id, &err), &err);
                s->n = 0;
            } else {  /* fork some open sequence into slot i */
                int j = (int)(rng_next(&x) % R_SEQS);
                if (seqs[j].id < 0) continue;
                ok(kv_blocks_fork(kv, seqs[j].id, &s->id, &err), &err);
                s->n = 0;
                for (int32_t p = 0; p < seqs[j].n; p++) shadow_push(s, seqs[j].vals[p]);
            }
        } else if (op == 0) {
            ok(kv_blocks_seq_close(kv, s->id, &err), &err);
            s->id = -1;
        } else {
            int32_t k = (int32_t)(rng_next(&x) % (op < 8 ? 3 : (uint64_t)(3 * bs)));
            int32_t need = kv_blocks_needed(kv, s->id, k), before = kv_blocks_num_available(kv);
            kv_copy cow[1];
            int32_t n_cow;
            ai_status st = kv_blocks_append(kv, s->id, k, cow, &n_cow, &err);
            if (st == AI_ERR_RANGE) {
                assert_true(need > before);
                assert_int_equal(kv_blocks_num_available(kv), before);
                assert_int_equal(kv_blocks_seq_tokens(kv, s->id), s->n);
                n_fail++;
            } else {
                ok(st, &err);
                assert_int_equal(kv_blocks_num_available(kv), before - need);
                /* executor: copies first, then writes the new positions */
                for (int32_t c = 0; c < n_cow; c++)
                    memcpy(pool + (size_t)cow[c].dst * bs, pool + (size_t)cow[c].src * bs, (size_t)bs * sizeof *pool);
                n_cow_total += n_cow;
                int32_t nb;
                const int32_t *t = kv_blocks_table(kv, s->id, &nb);
                for (int32_t p = s->n; p < s->n + k; p++) {
                    int32_t b = t[p / bs];
                    assert_int_equal(kv_blocks_refcount(kv, b), 1);  /* invariant 4 */
                    pool[(size_t)b * bs + p % bs] = next_val + (p - s->n);
                }
                for (int32_t p = 0; p < k; p++) shadow_push(s, next_val++);
            }
        }
        check(kv);
        int32_t used = 0;
        for (int j = 0; j < R_SEQS; j++) {
            if (seqs[j].id < 0) continue;
            int32_t nb;
            const int32_t *t = kv_blocks_table(kv, seqs[j].id, &nb);
            assert_int_equal(kv_blocks_seq_tokens(kv, seqs[j].id), seqs[j].n);
            for (int32_t p = 0; p < seqs[j].n; p++)
                if (pool[(size_t)t[p / bs] * bs + p % bs] != seqs[j].vals[p])
                    fail_msg("seed %llu step %d: sequence %d position %d reads %d, wrote %d", (unsigned long long)seed,
                             step, j, p, pool[(size_t)t[p / bs] * bs + p % bs], seqs[j].vals[p]);
            used++;
        }
        assert_int_equal(kv_blocks_num_seqs(kv), used);
    }
    for (int j = 0; j < R_SEQS; j++) {
        if (seqs[j].id >= 0) ok(kv_blocks_seq_close(kv, seqs[j].id, &err), &err);
        free(seqs[j].vals);
    }
    assert_int_equal(kv_blocks_num_free(kv), n_blocks);
    check(kv);
    if (bs > 1) assert_true(n_cow_total > 0);   /* the run did exercise copy-on-write */
    assert_true(n_fail > 0);        /* ... and running out of blocks */
    free(pool);
    kv_blocks_free(kv);
}

static void test_random_shadow(void **state)
{
    (void)state;
    uint64_t seed = getenv("KV_SEED") ? strtoull(getenv("KV_SEED"), NULL, 0) : (uint64_t)time(NULL);
    printf("test_random_shadow: seed %llu (rerun with KV_SEED=%llu)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    run_random(seed, 24, 4, 6000);
    run_random(seed + 1, 64, 16, 4000);
    run_random(seed + 2, 9, 1, 4000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_and_close),
        cmocka_unit_test(test_out_of_blocks_no_side_effects),
        cmocka_unit_test(test_fork_cow_diverge),
        cmocka_unit_test(test_cow_out_of_blocks),
        cmocka_unit_test(test_random_shadow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
