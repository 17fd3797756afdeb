/* test_prefix_cache.c - prefix caching of full blocks through kv_blocks, and the index itself.
 *
 * Hand cases: a hit skips exactly the cached full blocks and never the last prompt token, the
 * chain makes a block's key depend on everything before it, eviction happens only when the free
 * list is empty and in LRU order, an admit that does not fit changes nothing (not even the LRU
 * order), duplicate computation of one prefix keeps one copy, and forced hash collisions (a hash
 * hook returning a constant) never return a wrong block, including a stale parent after eviction.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "aiinfra/kv_blocks.h"
#include "aiinfra/prefix_cache.h"

static kv_blocks *make(int32_t n, int32_t bs)
{
    kv_blocks *kv = NULL;
    ai_err err = { 0 };
    kv_blocks_config cfg = { .num_blocks = n, .block_size = bs, .enable_prefix_cache = true };
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

/* Runs a whole prompt through: admit, compute everything, commit. Returns the kv handle. */
static int32_t prefill(kv_blocks *kv, const int32_t *tokens, int32_t n, int32_t *n_cached)
{
    ai_err err = { 0 };
    int32_t seq, cached, chunk;
    ok(kv_blocks_admit(kv, tokens, n, 1 << 20, &seq, &cached, &chunk, &err), &err);
    assert_int_equal(cached + chunk, n);
    ok(kv_blocks_commit(kv, seq, tokens, n, &err), &err);
    check(kv);
    if (n_cached) *n_cached = cached;
    return seq;
}

static uint64_t const_hash(uint64_t parent, const int32_t *tokens, int32_t bs)
{
    (void)parent; (void)tokens; (void)bs;
    return 42;
}

// --- hits ------------------------------------------------------------------------------------

static void test_hit_skips_full_blocks_only(void **state)
{
    (void)state;
    kv_blocks *kv = make(16, 4);
    ai_err err = { 0 };
    int32_t p[10] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 }, cached, chunk, s, nb;
    int32_t a = prefill(kv, p, 10, &cached);
    assert_int_equal(cached, 0);
    assert_int_equal(prefix_cache_num_cached(kv_blocks_prefix_cache(kv)), 2);  /* 2 full blocks, not the half one */
    const int32_t *ta = kv_blocks_table(kv, a, &nb);
    int32_t a0 = ta[0], a1 = ta[1], a2 = ta[2];

    /* same prompt while a is still running: shares a's two full blocks, computes 2 tokens */
    ok(kv_blocks_admit(kv, p, 10, 100, &s, &cached, &chunk, &err), &err);
    assert_int_equal(cached, 8);
    assert_int_equal(chunk, 2);
    const int32_t *t = kv_blocks_table(kv, s, &nb);
    assert_int_equal(nb, 3);
    assert_int_equal(t[0], a0);
    assert_int_equal(t[1], a1);
    assert_true(t[2] != a2);
    assert_int_equal(kv_blocks_refcount(kv, a0), 2);
    check(kv);
    ok(kv_blocks_seq_close(kv, s, &err), &err);

    /* a prompt of exactly 8 tokens = 2 cached blocks: only 1 block is reused, the last token is computed */
    ok(kv_blocks_admit(kv, p, 8, 100, &s, &cached, &chunk, &err), &err);
    assert_int_equal(cached, 4);
    assert_int_equal(chunk, 4);
    ok(kv_blocks_seq_close(kv, s, &err), &err);
    /* 9 tokens: both blocks, 1 token computed */
    ok(kv_blocks_admit(kv, p, 9, 100, &s, &cached, &chunk, &err), &err);
    assert_int_equal(cached, 8);
    assert_int_equal(chunk, 1);
    ok(kv_blocks_seq_close(kv, s, &err), &err);
    /* a budget smaller than the rest: the chunk is cut, the hit is not */
    int32_t q[20];
    for (int i = 0; i < 20; i++) q[i] = i < 10 ? p[i] : 100 + i;
    ok(kv_blocks_admit(kv, q, 20, 3, &s, &cached, &chunk, &err), &err);
    assert_int_equal(cached, 8);
    assert_int_equal(chunk, 3);
    assert_int_equal(kv_blocks_seq_tokens(kv, s), 11);
    ok(kv_blocks_seq_close(kv, s, &err), &err);

    /* the key of block 1 depends on block 0: same second block after another first block misses */
    int32_t r[10] = { 99, 2, 3, 4, 5, 6, 7, 8, 9, 10 };
    ok(kv_blocks_admit(kv, r, 10, 100, &s, &cached, &chunk, &err), &err);
    assert_int_equal(cached, 0);
    ok(kv_blocks_seq_close(kv, s, &err), &err);
    /* a one-token prompt never hits */
    ok(kv_blocks_admit(kv, p, 1, 100, &s, &cached, &chunk, &err), &err);
    assert_int_equal(cached, 0);
    ok(kv_blocks_seq_close(kv, s, &err), &err);

    /* the blocks outlive their sequence: after a finishes they are idle, and still hit */
    ok(kv_blocks_seq_close(kv, a, &err), &err);
    assert_int_equal(kv_blocks_num_idle(kv), 2);
    assert_int_equal(kv_blocks_num_used(kv), 0);
    s = prefill(kv, p, 10, &cached);
    assert_int_equal(cached, 8);
    assert_int_equal(kv_blocks_num_idle(kv), 0);
    ok(kv_blocks_seq_close(kv, s, &err), &err);

    prefix_cache_stats st = prefix_cache_get_stats(kv_blocks_prefix_cache(kv));
    assert_int_equal(st.queries, 10 + 10 + 8 + 9 + 20 + 10 + 1 + 10);
    assert_int_equal(st.hits, 8 + 4 + 8 + 8 + 0 + 0 + 8);
    check(kv);
    kv_blocks_free(kv);
}

// --- eviction ----------------------------------------------------------------------------------

static void test_eviction_lru_after_free_list(void **state)
{
    (void)state;
    kv_blocks *kv = make(10, 2);
    ai_err err = { 0 };
    int32_t pa[5] = { 1, 2, 3, 4, 5 }, pb[5] = { 6, 7, 8, 9, 10 }, pc5[5] = { 11, 12, 13, 14, 15 };
    int32_t a = prefill(kv, pa, 5, NULL), b = prefill(kv, pb, 5, NULL), c = prefill(kv, pc5, 5, NULL);
    int32_t nb, blocks_a[3], blocks_b[3], blocks_c[3];
    memcpy(blocks_a, kv_blocks_table(kv, a, &nb), sizeof blocks_a);
    memcpy(blocks_b, kv_blocks_table(kv, b, &nb), sizeof blocks_b);
    memcpy(blocks_c, kv_blocks_table(kv, c, &nb), sizeof blocks_c);
    /* finish b, then a, then c: idle order b1 b0 a1 a0 c1 c0 (tails first) */
    ok(kv_blocks_seq_close(kv, b, &err), &err);
    ok(kv_blocks_seq_close(kv, a, &err), &err);
    ok(kv_blocks_seq_close(kv, c, &err), &err);
    int32_t order[8];
    assert_int_equal(prefix_cache_idle_order(kv_blocks_prefix_cache(kv), order, 8), 6);
    int32_t want[6] = { blocks_b[1], blocks_b[0], blocks_a[1], blocks_a[0], blocks_c[1], blocks_c[0] };
    for (int i = 0; i < 6; i++) assert_int_equal(order[i], want[i]);
    assert_int_equal(kv_blocks_num_free(kv), 4);  /* 1 never used + the three half blocks */

    /* a hit on a's first block refreshes it: it leaves the LRU list while used */
    int32_t s, cached, chunk;
    ok(kv_blocks_admit(kv, pa, 3, 100, &s, &cached, &chunk, &err), &err);
    assert_int_equal(cached, 2);
    /* 1 fresh block: from the free list, nothing evicted */
    assert_int_equal(prefix_cache_num_cached(kv_blocks_prefix_cache(kv)), 6);
    assert_int_equal(kv_blocks_num_free(kv), 3);
    ok(kv_blocks_seq_close(kv, s, &err), &err);  /* a0 goes to the MRU end */
    assert_int_equal(prefix_cache_idle_order(kv_blocks_prefix_cache(kv), order, 8), 6);
    int32_t want2[6] = { blocks_b[1], blocks_b[0], blocks_a[1], blocks_c[1], blocks_c[0], blocks_a[0] };
    for (int i = 0; i < 6; i++) assert_int_equal(order[i], want2[i]);

    /* 8 new tokens = 4 blocks, all from the free list; 4 more = 2 blocks: evict b1, then b0 */
    int32_t cow_n;
    kv_copy cow[1];
    ok(kv_blocks_seq_open(kv, &s, &err), &err);
    ok(kv_blocks_append(kv, s, 8, cow, &cow_n, &err), &err);
    assert_int_equal(prefix_cache_num_cached(kv_blocks_prefix_cache(kv)), 6);
    assert_int_equal(kv_blocks_num_free(kv), 0);
    ok(kv_blocks_append(kv, s, 4, cow, &cow_n, &err), &err);
    assert_int_equal(prefix_cache_num_cached(kv_blocks_prefix_cache(kv)), 4);
    assert_int_equal(prefix_cache_get_stats(kv_blocks_prefix_cache(kv)).evictions, 2);
    const int32_t *ts = kv_blocks_table(kv, s, &nb);
    assert_int_equal(ts[4], blocks_b[1]);
    assert_int_equal(ts[5], blocks_b[0]);
    /* b misses now, a and c still hit */
    ok(kv_blocks_seq_close(kv, s, &err), &err);
    int32_t t2;
    ok(kv_blocks_admit(kv, pb, 5, 100, &t2, &cached, &chunk, &err), &err);
    assert_int_equal(cached, 0);
    ok(kv_blocks_seq_close(kv, t2, &err), &err);
    ok(kv_blocks_admit(kv, pc5, 5, 100, &t2, &cached, &chunk, &err), &err);
    assert_int_equal(cached, 4);
    ok(kv_blocks_seq_close(kv, t2, &err), &err);
    check(kv);
    kv_blocks_free(kv);
}

static void test_admit_out_of_blocks_no_side_effects(void **state)
{
    (void)state;
    kv_blocks *kv = make(4, 2);
    ai_err err = { 0 };
    int32_t p[5] = { 1, 2, 3, 4, 5 };
    int32_t a = prefill(kv, p, 5, NULL);  /* 3 blocks, 2 cached */
    ok(kv_blocks_seq_close(kv, a, &err), &err);
    int32_t order[4], n0 = prefix_cache_idle_order(kv_blocks_prefix_cache(kv), order, 4);
    assert_int_equal(n0, 2);
    /* 9 tokens: hit 4, needs 3 more blocks, only 2 free + 0 other idle -> fails */
    int32_t q[9] = { 1, 2, 3, 4, 9, 9, 9, 9, 9 }, s, cached, chunk;
    assert_int_equal(kv_blocks_admit(kv, q, 9, 100, &s, &cached, &chunk, &err), AI_ERR_RANGE);
    int32_t order2[4];
    assert_int_equal(prefix_cache_idle_order(kv_blocks_prefix_cache(kv), order2, 4), 2);
    assert_memory_equal(order, order2, sizeof(int32_t) * 2);
    assert_int_equal(kv_blocks_num_seqs(kv), 0);
    assert_int_equal(kv_blocks_num_free(kv), 2);
    check(kv);
    /* with a budget of 3 tokens it fits: hit 4 + 3 computed = 4 blocks */
    ok(kv_blocks_admit(kv, q, 9, 3, &s, &cached, &chunk, &err), &err);
    assert_int_equal(cached, 4);
    assert_int_equal(chunk, 3);
    assert_int_equal(kv_blocks_admit(kv, p, 0, 3, &s, &cached, &chunk, &err), AI_ERR_INVALID);
    assert_int_equal(kv_blocks_admit(kv, p, 5, 0, &s, &cached, &chunk, &err), AI_ERR_INVALID);
    check(kv);
    kv_blocks_free(kv);
}

static void test_duplicate_computation(void **state)
{
    (void)state;
    kv_blocks *kv = make(16, 2);
    ai_err err = { 0 };
    int32_t p[5] = { 1, 2, 3, 4, 5 }, q[5] = { 1, 2, 7, 8, 9 };
    int32_t s1, s2, c, k, nb;
    /* both admitted before either commits: each computes the shared first block */
    ok(kv_blocks_admit(kv, p, 5, 100, &s1, &c, &k, &err), &err);
    ok(kv_blocks_admit(kv, q, 5, 100, &s2, &c, &k, &err), &err);
    assert_int_equal(c, 0);
    int32_t b1_0 = kv_blocks_table(kv, s1, &nb)[0];
    const int32_t *t2 = kv_blocks_table(kv, s2, &nb);
    int32_t b2_1 = t2[1];
    ok(kv_blocks_commit(kv, s1, p, 5, &err), &err);
    ok(kv_blocks_commit(kv, s2, q, 5, &err), &err);
    /* s2's first block equals s1's: not entered twice; its second block chains after s1's first */
    assert_int_equal(prefix_cache_num_cached(kv_blocks_prefix_cache(kv)), 3);
    ok(kv_blocks_seq_close(kv, s1, &err), &err);
    ok(kv_blocks_seq_close(kv, s2, &err), &err);
    assert_int_equal(kv_blocks_num_idle(kv), 3);
    int32_t r[6] = { 1, 2, 7, 8, 0, 0 }, s3;
    ok(kv_blocks_admit(kv, r, 6, 100, &s3, &c, &k, &err), &err);
    assert_int_equal(c, 4);
    const int32_t *t3 = kv_blocks_table(kv, s3, &nb);
    assert_int_equal(t3[0], b1_0);
    assert_int_equal(t3[1], b2_1);
    check(kv);
    /* committing less than a block, or again, adds nothing */
    ok(kv_blocks_commit(kv, s3, r, 5, &err), &err);
    ok(kv_blocks_commit(kv, s3, r, 5, &err), &err);
    assert_int_equal(prefix_cache_num_cached(kv_blocks_prefix_cache(kv)), 3);
    assert_int_equal(kv_blocks_commit(kv, s3, r, 7, &err), AI_ERR_RANGE);
    assert_int_equal(kv_blocks_commit(kv, 77, r, 1, &err), AI_ERR_INVALID);
    kv_blocks_free(kv);
}

// --- collisions ----------------------------------------------------------------------------------

static void test_forced_collisions(void **state)
{
    (void)state;
    kv_blocks *kv = make(32, 2);
    ai_err err = { 0 };
    assert_int_equal(prefix_cache_set_hash_fn(kv_blocks_prefix_cache(kv), const_hash, &err), AI_OK);
    /* every block of every prompt has key 42 */
    int32_t p[5] = { 1, 2, 3, 4, 0 }, q[5] = { 5, 6, 3, 4, 0 }, r[5] = { 1, 2, 5, 6, 0 };
    int32_t a = prefill(kv, p, 5, NULL), b = prefill(kv, q, 5, NULL), nb, s, c, k;
    int32_t ta[2], tb[2];
    memcpy(ta, kv_blocks_table(kv, a, &nb), sizeof ta);
    memcpy(tb, kv_blocks_table(kv, b, &nb), sizeof tb);
    assert_int_equal(prefix_cache_num_cached(kv_blocks_prefix_cache(kv)), 4);
    /* each prompt finds its own blocks, the second block is told apart by its parent */
    ok(kv_blocks_admit(kv, q, 5, 100, &s, &c, &k, &err), &err);
    assert_int_equal(c, 4);
    assert_memory_equal(kv_blocks_table(kv, s, &nb), tb, sizeof tb);
    ok(kv_blocks_seq_close(kv, s, &err), &err);
    ok(kv_blocks_admit(kv, p, 5, 100, &s, &c, &k, &err), &err);
    assert_int_equal(c, 4);
    assert_memory_equal(kv_blocks_table(kv, s, &nb), ta, sizeof ta);
    ok(kv_blocks_seq_close(kv, s, &err), &err);
    /* same first block as p, other second block: only the first hits */
    ok(kv_blocks_admit(kv, r, 5, 100, &s, &c, &k, &err), &err);
    assert_int_equal(c, 2);
    assert_int_equal(kv_blocks_table(kv, s, &nb)[0], ta[0]);
    ok(kv_blocks_seq_close(kv, s, &err), &err);
    check(kv);
    /* the hook may not change under a non-empty cache */
    assert_int_equal(prefix_cache_set_hash_fn(kv_blocks_prefix_cache(kv), NULL, &err), AI_ERR_INVALID);
    kv_blocks_free(kv);
}

/* Directly on the index: a child entry whose parent block was evicted and reused for other tokens
 * must not be found, even though hash and tokens of the child match. */
static void test_stale_parent(void **state)
{
    (void)state;
    prefix_cache *pc = NULL;
    ai_err err = { 0 };
    ok(prefix_cache_init(&pc, 4, 2, &err), &err);
    ok(prefix_cache_set_hash_fn(pc, const_hash, &err), &err);
    int32_t A[2] = { 1, 2 }, B[2] = { 3, 4 }, C[2] = { 5, 6 };
    prefix_link link = PREFIX_LINK_ROOT;
    assert_int_equal(prefix_cache_insert(pc, &link, A, 0), 0);
    assert_int_equal(prefix_cache_insert(pc, &link, B, 1), 1);
    int32_t refs[4] = { 0, 0, 0, 0 };
    prefix_cache_idle_push(pc, 1);
    prefix_cache_idle_push(pc, 0);
    assert_int_equal(prefix_cache_check(pc, refs, &err), AI_OK);
    /* a checker that can fail: claim block 0 is referenced while idle */
    refs[0] = 1;
    assert_int_equal(prefix_cache_check(pc, refs, &err), AI_ERR_RUNTIME);
    refs[0] = 0;
    int32_t out[4], prompt[5] = { 1, 2, 3, 4, 9 };
    assert_int_equal(prefix_cache_match(pc, prompt, 5, out, 4, &link), 2);
    /* evict 1 (LRU head) then 0, reuse 0 for C at the root */
    prefix_cache_idle_remove(pc, 1);   /* block 1 referenced again */
    assert_int_equal(prefix_cache_evict(pc), 0);
    link = PREFIX_LINK_ROOT;
    assert_int_equal(prefix_cache_insert(pc, &link, C, 0), 0);
    int32_t prompt2[5] = { 5, 6, 3, 4, 9 };  /* C then B: B's entry has parent (0, old generation) */
    assert_int_equal(prefix_cache_match(pc, prompt2, 5, out, 4, &link), 1);
    assert_int_equal(out[0], 0);
    assert_int_equal(prefix_cache_match(pc, prompt, 5, out, 4, &link), 0);  /* A is gone */
    assert_int_equal(prefix_cache_match(pc, prompt2, 5, out, 0, &link), 0);  /* max_blocks */
    assert_int_equal(prefix_cache_num_idle(pc), 0);
    assert_int_equal(prefix_cache_evict(pc), -1);
    prefix_cache_free(pc);
    assert_int_equal(prefix_cache_init(&pc, 0, 2, &err), AI_ERR_RANGE);
    assert_int_equal(prefix_cache_init(&pc, 4, 0, &err), AI_ERR_RANGE);
}

static void test_xxh3_chain(void **state)
{
    (void)state;
    /* the default hash is XXH3_64 over parent bytes || token bytes: chained and order-sensitive */
    int32_t t1[4] = { 1, 2, 3, 4 }, t2[4] = { 2, 1, 3, 4 };
    uint64_t h1 = prefix_cache_xxh3(0, t1, 4), h2 = prefix_cache_xxh3(0, t2, 4);
    assert_true(h1 != h2);
    assert_true(prefix_cache_xxh3(h1, t1, 4) != prefix_cache_xxh3(h2, t1, 4));
    assert_true(prefix_cache_xxh3(0, t1, 4) == h1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hit_skips_full_blocks_only),
        cmocka_unit_test(test_eviction_lru_after_free_list),
        cmocka_unit_test(test_admit_out_of_blocks_no_side_effects),
        cmocka_unit_test(test_duplicate_computation),
        cmocka_unit_test(test_forced_collisions),
        cmocka_unit_test(test_stale_parent),
        cmocka_unit_test(test_xxh3_chain),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
