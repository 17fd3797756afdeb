/* test_sampler.c - sampler: greedy, filters on hand-made logits, rng, penalties,
 * logprobs, finish reasons, stop strings, and an empirical distribution test.
 *
 * Expected values come from the definitions (docs/sampling.md), worked out by
 * hand in the comments or computed here by a naive reference (full sort,
 * full rescan) that shares no code with src/engine/. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "aiinfra/sampler.h"

// --- helpers ------------------------------------------------------------------

/* Test-local generator (not the one under test): a 64-bit LCG. */
static uint64_t lcg(uint64_t *x)
{
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return *x >> 11;
}
static double lcg_unif(uint64_t *x) { return (double)lcg(x) * 0x1.0p-53; }

typedef struct fixture {
    sampler sm;
    sampler_seq seq;
} fixture;

static void fix_open(fixture *f, const sampler_params *p, int32_t n_vocab, int32_t eos)
{
    ai_err e;
    assert_int_equal(sampler_init(&f->sm, n_vocab, &e), AI_OK);
    assert_int_equal(sampler_seq_init(&f->seq, p, n_vocab, eos, 12345, &e), AI_OK);
}

static void fix_close(fixture *f)
{
    sampler_seq_free(&f->seq);
    sampler_free(&f->sm);
}

/* Filters and returns the kept distribution sorted by id into ids/probs. */
static size_t kept_by_id(fixture *f, const float *logits, int32_t *ids, double *probs)
{
    ai_err e;
    sampler_dist d;
    assert_int_equal(sampler_filter(&f->sm, &f->seq, logits, &d, &e), AI_OK);
    for (size_t i = 0; i < d.n; i++) {
        ids[i] = d.ids[i];
        probs[i] = d.probs[i];
    }
    for (size_t i = 1; i < d.n; i++)  /* insertion sort by id */
        for (size_t j = i; j > 0 && ids[j - 1] > ids[j]; j--) {
            int32_t t = ids[j]; ids[j] = ids[j - 1]; ids[j - 1] = t;
            double q = probs[j]; probs[j] = probs[j - 1]; probs[j - 1] = q;
        }
    return d.n;
}

static void assert_kept(fixture *f, const float *logits, size_t n_exp, const int32_t *ids_exp,
                        const double *probs_exp)
{
    int32_t ids[64];
    double probs[64];
    size_t n = kept_by_id(f, logits, ids, probs);
    assert_int_equal(n, n_exp);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(ids[i], ids_exp[i]);
        if (probs_exp) assert_true(fabs(probs[i] - probs_exp[i]) < 1e-6);
    }
}

// --- greedy, temperature ----------------------------------------------------------

static void test_greedy(void **state)
{
    (void)state;
    sampler_params p = sampler_params_default();
    p.temperature = 0;
    fixture f;
    fix_open(&f, &p, 5, -1);
    const float l[5] = { 1.0f, 3.0f, -INFINITY, 3.0f, 2.0f };
    sampler_result r;
    ai_err e;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(sampler_sample(&f.sm, &f.seq, l, &r, &e), AI_OK);
        assert_int_equal(r.token, 1);  /* tie 1 vs 3: the lower id */
    }
    fix_close(&f);
}

static void test_temperature_limit(void **state)
{
    (void)state;
    const float l[6] = { 0.5f, 0.9f, 1.0f, 0.95f, -3.0f, 0.0f };
    ai_err e;
    sampler_result r;
    /* T = 2e-3: token 2 leads by 0.05 -> others have weight exp(-25) < 1.4e-11 */
    sampler_params p = sampler_params_default();
    p.temperature = 2e-3f;
    fixture f;
    fix_open(&f, &p, 6, -1);
    for (int i = 0; i < 2000; i++) {
        assert_int_equal(sampler_sample(&f.sm, &f.seq, l, &r, &e), AI_OK);
        assert_int_equal(r.token, 2);
    }
    fix_close(&f);
    /* below SAMPLER_GREEDY_EPS it is greedy outright (no draw) */
    p.temperature = 1e-6f;
    fix_open(&f, &p, 6, -1);
    sampler_dist d;
    assert_int_equal(sampler_filter(&f.sm, &f.seq, l, &d, &e), AI_OK);
    assert_true(d.greedy);
    assert_int_equal(d.n, 1);
    assert_int_equal(d.ids[0], 2);
    sampler_rng before = f.seq.rng;
    assert_int_equal(sampler_sample(&f.sm, &f.seq, l, &r, &e), AI_OK);
    assert_memory_equal(&before, &f.seq.rng, sizeof before);  /* greedy draws nothing */
    fix_close(&f);
}

// --- filters on hand-made logits --------------------------------------------------

/* probabilities 1/2, 1/4, 1/8, 1/8 at T = 1 */
static const float quart[4] = { -0.69314718f, -1.38629436f, -2.07944154f, -2.07944154f };

static void test_top_k(void **state)
{
    (void)state;
    sampler_params p = sampler_params_default();
    fixture f;
    p.top_k = 2;
    fix_open(&f, &p, 4, -1);
    assert_kept(&f, quart, 2, (const int32_t[]){ 0, 1 }, (const double[]){ 2.0 / 3, 1.0 / 3 });
    fix_close(&f);
    p.top_k = 3;  /* the tie at 1/8 goes to the lower id */
    fix_open(&f, &p, 4, -1);
    assert_kept(&f, quart, 3, (const int32_t[]){ 0, 1, 2 }, (const double[]){ 4.0 / 7, 2.0 / 7, 1.0 / 7 });
    fix_close(&f);
    p.top_k = 10;  /* larger than the vocabulary: off */
    fix_open(&f, &p, 4, -1);
    assert_kept(&f, quart, 4, (const int32_t[]){ 0, 1, 2, 3 }, (const double[]){ .5, .25, .125, .125 });
    fix_close(&f);
    /* masked tokens are never kept, even when k would reach them */
    const float masked[4] = { 0.0f, -INFINITY, 1.0f, -INFINITY };
    fix_open(&f, &p, 4, -1);
    assert_kept(&f, masked, 2, (const int32_t[]){ 0, 2 }, NULL);
    fix_close(&f);
}

static void test_top_p(void **state)
{
    (void)state;
    sampler_params p = sampler_params_default();
    fixture f;
    /* keep j iff the mass before it < p: 0 | .5 | .75 | .875 */
    p.top_p = 0.45f;
    fix_open(&f, &p, 4, -1);
    assert_kept(&f, quart, 1, (const int32_t[]){ 0 }, (const double[]){ 1.0 });
    fix_close(&f);
    p.top_p = 0.55f;
    fix_open(&f, &p, 4, -1);
    assert_kept(&f, quart, 2, (const int32_t[]){ 0, 1 }, (const double[]){ 2.0 / 3, 1.0 / 3 });
    fix_close(&f);
    p.top_p = 0.8f;  /* the 1/8 tie splits: id 2 kept, id 3 not */
    fix_open(&f, &p, 4, -1);
    assert_kept(&f, quart, 3, (const int32_t[]){ 0, 1, 2 }, (const double[]){ 4.0 / 7, 2.0 / 7, 1.0 / 7 });
    fix_close(&f);
    /* top-p sees the top-k renormalized mass: probs .4 .3 .2 .1, k = 2 -> 4/7, 3/7 */
    const float l[4] = { logf(0.4f), logf(0.3f), logf(0.2f), logf(0.1f) };
    p.top_p = 0.5f;
    fix_open(&f, &p, 4, -1);
    assert_kept(&f, l, 2, (const int32_t[]){ 0, 1 }, NULL);  /* no top-k: .4 < .5 keeps 1 */
    fix_close(&f);
    p.top_k = 2;
    fix_open(&f, &p, 4, -1);
    assert_kept(&f, l, 1, (const int32_t[]){ 0 }, NULL);  /* 4/7 >= .5 */
    fix_close(&f);
}

static void test_temperature_before_top_p(void **state)
{
    (void)state;
    sampler_params p = sampler_params_default();
    fixture f;
    p.top_p = 0.7f;
    fix_open(&f, &p, 4, -1);  /* T = 1: masses before: 0 .5 .75 -> keep 2 */
    assert_kept(&f, quart, 2, (const int32_t[]){ 0, 1 }, NULL);
    fix_close(&f);
    /* T = 2: weights sqrt(.5) sqrt(.25) sqrt(.125) x2, sum 1.9142;
     * masses before: 0 .369 .631 .816 -> keep 3 */
    p.temperature = 2.0f;
    fix_open(&f, &p, 4, -1);
    double s = sqrt(.5) + sqrt(.25) + sqrt(.125);
    assert_kept(&f, quart, 3, (const int32_t[]){ 0, 1, 2 },
                (const double[]){ sqrt(.5) / s, sqrt(.25) / s, sqrt(.125) / s });
    fix_close(&f);
}

static void test_min_p(void **state)
{
    (void)state;
    sampler_params p = sampler_params_default();
    fixture f;
    p.min_p = 0.3f;  /* ratios to the max: 1, .5, .25, .25 */
    fix_open(&f, &p, 4, -1);
    assert_kept(&f, quart, 2, (const int32_t[]){ 0, 1 }, (const double[]){ 2.0 / 3, 1.0 / 3 });
    fix_close(&f);
    p.min_p = 0.2f;
    fix_open(&f, &p, 4, -1);
    assert_kept(&f, quart, 4, (const int32_t[]){ 0, 1, 2, 3 }, NULL);
    fix_close(&f);
    p.min_p = 0.3f;  /* T = 4: ratios 1, .841, .707, .707 */
    p.temperature = 4.0f;
    fix_open(&f, &p, 4, -1);
    assert_kept(&f, quart, 4, (const int32_t[]){ 0, 1, 2, 3 }, NULL);
    fix_close(&f);
    p.min_p = 0.75f;
    fix_open(&f, &p, 4, -1);
    assert_kept(&f, quart, 2, (const int32_t[]){ 0, 1 }, NULL);
    fix_close(&f);
}

/* Naive reference from the definitions: full sort, then each filter in order. */
typedef struct naive_pair {
    float l;
    int32_t id;
} naive_pair;

static int naive_cmp(const void *pa, const void *pb)
{
    const naive_pair *a = pa, *b = pb;
    if (a->l != b->l) return a->l > b->l ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

static size_t naive_filter(const float *l, int32_t n, const sampler_params *p, int32_t *keep)
{
    naive_pair *o = malloc((size_t)n * sizeof *o);
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++)
        if (l[i] != -INFINITY) o[m++] = (naive_pair){ l[i], i };
    qsort(o, (size_t)m, sizeof *o, naive_cmp);
    if (p->top_k > 0 && p->top_k < m) m = p->top_k;
    double t = p->temperature, z = 0, cum = 0;
    for (int32_t j = 0; j < m; j++) z += exp(((double)o[j].l - o[0].l) / t);
    int32_t mp = 0;
    for (; mp < m; mp++) {
        if (p->top_p < 1 && cum >= p->top_p * z) break;
        cum += exp(((double)o[mp].l - o[0].l) / t);
    }
    size_t k = 0;
    for (int32_t j = 0; j < mp; j++)
        if (exp(((double)o[j].l - o[0].l) / t) >= p->min_p) keep[k++] = o[j].id;
    free(o);
    return k;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static void test_filters_large_vs_naive(void **state)
{
    (void)state;
    enum { V = 3000 };
    float *l = malloc(V * sizeof *l);
    int32_t *ref = malloc(V * sizeof *ref), *got = malloc(V * sizeof *got);
    double *pr = malloc(V * sizeof *pr);
    uint64_t x = 7;
    for (int trial = 0; trial < 24; trial++) {
        double scale = (trial % 3 == 0) ? 0.05 : 3.0;  /* flat rows force top-p past one chunk */
        for (int i = 0; i < V; i++) l[i] = (float)(scale * (lcg_unif(&x) * 2 - 1));
        if (trial % 4 == 1)
            for (int i = 0; i < V; i += 7) l[i] = l[(i * 13) % V];  /* many exact ties */
        if (trial % 5 == 2)
            for (int i = 0; i < V; i += 3) l[i] = -INFINITY;
        sampler_params p = sampler_params_default();
        p.temperature = (float)(0.3 + 1.5 * lcg_unif(&x));
        p.top_k = (trial % 2) ? (int32_t)(lcg(&x) % 2000) : 0;
        p.top_p = (trial % 3 != 2) ? (float)(0.5 + 0.5 * lcg_unif(&x)) : 1.0f;
        p.min_p = (trial % 4 == 3) ? (float)(0.3 * lcg_unif(&x)) : 0.0f;
        fixture f;
        fix_open(&f, &p, V, -1);
        size_t nr = naive_filter(l, V, &p, ref);
        size_t ng = kept_by_id(&f, l, got, pr);
        qsort(ref, nr, sizeof *ref, cmp_i32);
        assert_int_equal(ng, nr);
        assert_memory_equal(got, ref, nr * sizeof *ref);
        double s = 0;
        for (size_t i = 0; i < ng; i++) s += pr[i];
        assert_true(fabs(s - 1) < 1e-9);
        fix_close(&f);
    }
    free(l);
    free(ref);
    free(got);
    free(pr);
}

// --- rng and seeds --------------------------------------------------------------

static void draw_seq(const sampler_params *p, uint64_t entropy, int32_t *out, int n)
{
    enum { V = 1000 };
    static float l[V];
    uint64_t x = 99;
    for (int i = 0; i < V; i++) l[i] = (float)(lcg_unif(&x) * 4);
    sampler sm;
    sampler_seq s;
    ai_err e;
    sampler_result r;
    assert_int_equal(sampler_init(&sm, V, &e), AI_OK);
    assert_int_equal(sampler_seq_init(&s, p, V, -1, entropy, &e), AI_OK);
    for (int i = 0; i < n; i++) {
        assert_int_equal(sampler_sample(&sm, &s, l, &r, &e), AI_OK);
        out[i] = r.token;
    }
    sampler_seq_free(&s);
    sampler_free(&sm);
}

/* Published reference outputs: xoshiro256** from state {1, 2, 3, 4} (the
 * reference C code's vector, as used by rand_xoshiro's tests) and splitmix64
 * from state 0 (first three outputs). */
static void test_rng_reference(void **state)
{
    (void)state;
    sampler_rng r = { { 1, 2, 3, 4 } };
    const uint64_t expect[10] = { 11520u, 0u, 1509978240u, 1215971899390074240u, 1216172134540287360u,
                                  607988272756665600u, 16172922978634559625u, 8476171486693032832u,
                                  10595114339597558777u, 2904607092377533576u };
    for (int i = 0; i < 10; i++) assert_true(sampler_rng_next(&r) == expect[i]);
    sampler_rng_seed(&r, 0);
    assert_true(r.s[0] == 0xE220A8397B1DCDAFull);
    assert_true(r.s[1] == 0x6E789E6AA1B965F4ull);
    assert_true(r.s[2] == 0x06C45D188009454Full);
}

static void test_seeds(void **state)
{
    (void)state;
    int32_t a[64], b[64], c[64], d[64];
    sampler_params p = sampler_params_default();
    p.top_p = 0.95f;
    p.has_seed = true;
    p.seed = 42;
    draw_seq(&p, 1, a, 64);
    draw_seq(&p, 2, b, 64);  /* entropy is ignored when a seed is given */
    assert_memory_equal(a, b, sizeof a);
    p.seed = 43;
    draw_seq(&p, 1, c, 64);
    assert_memory_not_equal(a, c, sizeof a);
    p.has_seed = false;  /* no seed: the caller's entropy decides */
    draw_seq(&p, 1, c, 64);
    draw_seq(&p, 2, d, 64);
    assert_memory_not_equal(c, d, sizeof c);

    /* uniform() stays in [0, 1) and its mean is 1/2 within 5 sigma */
    sampler_rng r;
    sampler_rng_seed(&r, 0);
    double sum = 0;
    for (int i = 0; i < 100000; i++) {
        double u = sampler_rng_uniform(&r);
        assert_true(u >= 0 && u < 1);
        sum += u;
    }
    assert_true(fabs(sum / 100000 - 0.5) < 5 * sqrt(1.0 / 12 / 100000));
}

// --- penalties --------------------------------------------------------------------

static void test_penalties_known(void **state)
{
    (void)state;
    sampler_params p = sampler_params_default();
    p.repetition_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    fixture f;
    ai_err e;
    fix_open(&f, &p, 5, -1);
    assert_int_equal(sampler_seq_add_prompt(&f.seq, (const int32_t[]){ 0 }, 1, &e), AI_OK);
    sampler_seq_accept(&f.seq, 1, &e);
    sampler_seq_accept(&f.seq, 2, &e);
    sampler_seq_accept(&f.seq, 2, &e);
    float l[5] = { 2.0f, -2.0f, 1.0f, 0.5f, -1.0f };
    sampler_apply_penalties(&f.seq, l);
    assert_float_equal(l[0], 1.0f, 1e-7);    /* prompt only: 2 / 2 */
    assert_float_equal(l[1], -4.75f, 1e-7);  /* -2 * 2 - 0.5 * 1 - 0.25 */
    assert_float_equal(l[2], -0.75f, 1e-7);  /* 1 / 2 - 0.5 * 2 - 0.25 */
    assert_float_equal(l[3], 0.5f, 0);       /* never seen */
    assert_float_equal(l[4], -1.0f, 0);
    fix_close(&f);

    /* logit_bias moves the argmax */
    sampler_bias b[1] = { { 0, -100.0f } };
    p = sampler_params_default();
    p.temperature = 0;
    p.logit_bias = b;
    p.n_logit_bias = 1;
    fix_open(&f, &p, 5, -1);
    sampler_result r;
    const float l2[5] = { 5.0f, 4.0f, 1.0f, 0.0f, 0.0f };
    assert_int_equal(sampler_sample(&f.sm, &f.seq, l2, &r, &e), AI_OK);
    assert_int_equal(r.token, 1);
    fix_close(&f);
}

static void test_penalties_incremental(void **state)
{
    (void)state;
    enum { V = 500, NP = 40, NO = 300 };
    sampler_params p = sampler_params_default();
    p.repetition_penalty = 1.3f;
    p.frequency_penalty = 0.4f;
    p.presence_penalty = -0.7f;
    fixture f;
    ai_err e;
    fix_open(&f, &p, V, -1);
    uint64_t x = 5;
    int32_t prompt[NP], out[NO];
    for (int i = 0; i < NP; i++) prompt[i] = (int32_t)(lcg(&x) % 60);
    assert_int_equal(sampler_seq_add_prompt(&f.seq, prompt, NP, &e), AI_OK);
    float base[V], inc[V], ref[V];
    for (int i = 0; i < V; i++) base[i] = (float)(lcg_unif(&x) * 6 - 3);
    for (int step = 0; step < NO; step++) {
        out[step] = (int32_t)(lcg(&x) % 120);  /* skewed: many repeats */
        sampler_seq_accept(&f.seq, out[step], &e);
        memcpy(inc, base, sizeof base);
        sampler_apply_penalties(&f.seq, inc);
        /* recompute from scratch: rescan the whole history for every token */
        for (int t = 0; t < V; t++) {
            int in_prompt = 0, count = 0;
            for (int i = 0; i < NP; i++) in_prompt |= prompt[i] == t;
            for (int i = 0; i <= step; i++) count += out[i] == t;
            float v = base[t];
            if (in_prompt || count) v = v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty;
            if (count) {
                v -= p.frequency_penalty * (float)count;
                v -= p.presence_penalty;
            }
            ref[t] = v;
        }
        assert_memory_equal(inc, ref, sizeof ref);  /* bit-exact: same float operations */
    }
    assert_true(f.seq.n_seen <= 120);
    fix_close(&f);
}

// --- logprobs ---------------------------------------------------------------------

static void test_logprobs(void **state)
{
    (void)state;
    const float l[6] = { 1.0f, 2.0f, 3.0f, 4.0f, 3.0f, -INFINITY };
    long double z = expl(1) + expl(2) + expl(3) + expl(4) + expl(3);
    sampler_result r;
    ai_err e;
    assert_int_equal(sampler_logprobs(l, 6, 1, 3, &r, &e), AI_OK);
    assert_float_equal(r.logprob, (float)(2 - logl(z)), 1e-6);
    assert_int_equal(r.rank, 4);  /* 4, 3, 3 are larger */
    assert_int_equal(r.n_top, 3);
    assert_int_equal(r.top[0].token, 3);
    assert_int_equal(r.top[1].token, 2);  /* tie 2 vs 4: lower id first */
    assert_int_equal(r.top[2].token, 4);
    assert_float_equal(r.top[0].logprob, (float)(4 - logl(z)), 1e-6);
    assert_int_equal(sampler_logprobs(l, 6, 5, 0, &r, &e), AI_OK);
    assert_true(r.logprob == -INFINITY);
    assert_int_equal(r.n_top, 0);

    /* through sampler_sample: raw logprobs, unaffected by temperature/penalties */
    sampler_params p = sampler_params_default();
    p.temperature = 0;
    p.logprobs = 2;
    p.presence_penalty = 2.0f;
    fixture f;
    fix_open(&f, &p, 6, -1);
    sampler_seq_accept(&f.seq, 3, &e);  /* 4 - 2 = 2 < 3: greedy now picks 2 */
    assert_int_equal(sampler_sample(&f.sm, &f.seq, l, &r, &e), AI_OK);
    assert_int_equal(r.token, 2);
    assert_float_equal(r.logprob, (float)(3 - logl(z)), 1e-6);
    assert_int_equal(r.top[0].token, 3);
    fix_close(&f);

    /* a big row: top-20 equals the naive full-sort answer */
    enum { V = 20000 };
    float *big = malloc(V * sizeof *big);
    int32_t *ord = malloc(V * sizeof *ord);
    uint64_t x = 3;
    for (int i = 0; i < V; i++) big[i] = (float)(lcg(&x) % 5000) * 0.01f;  /* ties likely */
    assert_int_equal(sampler_logprobs(big, V, 17, 20, &r, &e), AI_OK);
    sampler_params q = sampler_params_default();
    q.temperature = 1;
    size_t n = naive_filter(big, V, &q, ord);  /* full sorted order, no filter */
    assert_int_equal(n, V);
    for (int i = 0; i < 20; i++) assert_int_equal(r.top[i].token, ord[i]);
    free(big);
    free(ord);
}

// --- finish reasons, errors ------------------------------------------------------------

static void test_finish(void **state)
{
    (void)state;
    sampler_params p = sampler_params_default();
    fixture f;
    ai_err e;
    p.max_tokens = 3;
    p.stop_token_ids = (const int32_t[]){ 7 };
    p.n_stop_token_ids = 1;
    fix_open(&f, &p, 10, 2);
    assert_int_equal(sampler_seq_accept(&f.seq, 1, &e), SAMPLER_RUNNING);
    assert_int_equal(sampler_seq_accept(&f.seq, 2, &e), SAMPLER_FINISH_STOP);  /* EOS */
    fix_close(&f);
    p.ignore_eos = true;
    fix_open(&f, &p, 10, 2);
    assert_int_equal(sampler_seq_accept(&f.seq, 2, &e), SAMPLER_RUNNING);
    assert_int_equal(sampler_seq_accept(&f.seq, 2, &e), SAMPLER_RUNNING);
    assert_int_equal(sampler_seq_accept(&f.seq, 7, &e), SAMPLER_FINISH_STOP);  /* stop id beats length */
    assert_string_equal(sampler_finish_str(f.seq.finish), "stop");
    fix_close(&f);
    fix_open(&f, &p, 10, 2);
    for (int i = 0; i < 2; i++) assert_int_equal(sampler_seq_accept(&f.seq, 1, &e), SAMPLER_RUNNING);
    assert_int_equal(sampler_seq_accept(&f.seq, 1, &e), SAMPLER_FINISH_LENGTH);
    assert_string_equal(sampler_finish_str(f.seq.finish), "length");
    fix_close(&f);
}

static void test_errors(void **state)
{
    (void)state;
    sampler_params p = sampler_params_default();
    sampler_seq s;
    ai_err e;
    p.top_p = 0;
    assert_int_equal(sampler_seq_init(&s, &p, 10, -1, 0, &e), AI_ERR_INVALID);
    assert_non_null(strstr(e.msg, "top_p"));
    p = sampler_params_default();
    p.temperature = NAN;
    assert_int_equal(sampler_seq_init(&s, &p, 10, -1, 0, &e), AI_ERR_INVALID);
    assert_non_null(strstr(e.msg, "temperature"));
    p = sampler_params_default();
    p.logprobs = 21;
    assert_int_equal(sampler_seq_init(&s, &p, 10, -1, 0, &e), AI_ERR_INVALID);
    p = sampler_params_default();
    sampler_bias b = { 10, 1.0f };
    p.logit_bias = &b;
    p.n_logit_bias = 1;
    assert_int_equal(sampler_seq_init(&s, &p, 10, -1, 0, &e), AI_ERR_RANGE);
    assert_non_null(strstr(e.msg, "logit_bias"));

    p = sampler_params_default();
    fixture f;
    fix_open(&f, &p, 4, -1);
    sampler_result r;
    const float nan_row[4] = { 0, NAN, 1, 2 };
    assert_int_equal(sampler_sample(&f.sm, &f.seq, nan_row, &r, &e), AI_ERR_INVALID);
    assert_non_null(strstr(e.msg, "token 1"));
    const float inf_row[4] = { 0, 1, INFINITY, 2 };
    assert_int_equal(sampler_sample(&f.sm, &f.seq, inf_row, &r, &e), AI_ERR_INVALID);
    const float masked[4] = { -INFINITY, -INFINITY, -INFINITY, -INFINITY };
    assert_int_equal(sampler_sample(&f.sm, &f.seq, masked, &r, &e), AI_ERR_INVALID);
    assert_non_null(strstr(e.msg, "-inf"));
    assert_int_equal(sampler_seq_add_prompt(&f.seq, (const int32_t[]){ 4 }, 1, &e), AI_OK); /* rep off: ignored */
    fix_close(&f);
    p.repetition_penalty = 1.1f;
    fix_open(&f, &p, 4, -1);
    assert_int_equal(sampler_seq_add_prompt(&f.seq, (const int32_t[]){ 4 }, 1, &e), AI_ERR_RANGE);
    fix_close(&f);
}

// --- empirical distribution ------------------------------------------------------------

/* 200k seeded draws after top-k, top-p and min-p against the exact filtered
 * softmax. Logits (ids shuffled): T = 0.9, k = 7 drops {5,1,7}; top-p 0.9 drops
 * {3} (mass before it .948); min-p .2 drops {9} (ratio .189). Kept: 2 4 0 8 6,
 * df = 4. Bound: chi2 < 40 fails a correct sampler with p < 5e-8; the seed is
 * fixed, so the test cannot flake - it only fails if the sampler changes. */
static void test_distribution(void **state)
{
    (void)state;
    enum { V = 10, N = 200000 };
    const float l[V] = { 1.2f, -0.5f, 2.0f, 0.3f, 1.5f, 0.0f, 0.8f, -1.0f, 1.0f, 0.5f };
    sampler_params p = sampler_params_default();
    p.temperature = 0.9f;
    p.top_k = 7;
    p.top_p = 0.9f;
    p.min_p = 0.2f;
    p.has_seed = true;
    p.seed = 20261202;
    fixture f;
    fix_open(&f, &p, V, -1);
    int32_t keep[V];
    size_t nk = naive_filter(l, V, &p, keep);
    assert_int_equal(nk, 5);
    double expect[V] = { 0 }, z = 0;
    for (size_t j = 0; j < nk; j++) z += exp((l[keep[j]] - 2.0) / 0.9);
    for (size_t j = 0; j < nk; j++) expect[keep[j]] = exp((l[keep[j]] - 2.0) / 0.9) / z;
    long count[V] = { 0 };
    sampler_result r;
    ai_err e;
    for (int i = 0; i < N; i++) {
        assert_int_equal(sampler_sample(&f.sm, &f.seq, l, &r, &e), AI_OK);
        count[r.token]++;
    }
    double chi2 = 0;
    for (int t = 0; t < V; t++) {
        if (expect[t] == 0) {
            assert_int_equal(count[t], 0);  /* filtered tokens are never drawn */
            continue;
        }
        double ex = expect[t] * N;
        chi2 += (count[t] - ex) * (count[t] - ex) / ex;
    }
    assert_true(chi2 < 40.0);
    fix_close(&f);
}

// --- stop strings ------------------------------------------------------------------------

/* Feeds pieces, concatenates what is emitted (flushing at the end when no
 * stop); returns whether a stop happened. */
static bool stream(const char *const *stops, size_t ns, const char *const *pieces, size_t np, buf *out,
                   int32_t *which)
{
    stop_matcher m;
    ai_err e;
    stop_result r;
    assert_int_equal(stop_matcher_init(&m, stops, ns, &e), AI_OK);
    bool stopped = false;
    for (size_t i = 0; i < np && !stopped; i++) {
        assert_int_equal(stop_matcher_feed(&m, pieces[i], strlen(pieces[i]), &r, &e), AI_OK);
        buf_append(out, r.emit, r.emit_len);
        stopped = r.stopped;
        if (stopped) *which = r.stop_index;
    }
    if (!stopped) {
        stop_matcher_flush(&m, &r);
        buf_append(out, r.emit, r.emit_len);
    }
    stop_matcher_free(&m);
    return stopped;
}

static void test_stop_strings(void **state)
{
    (void)state;
    stop_matcher m;
    ai_err e;
    stop_result r;
    const char *aab[] = { "aab" };
    assert_int_equal(stop_matcher_init(&m, aab, 1, &e), AI_OK);
    /* "aaab" one byte at a time: held tails "a", "aa", "aa", then the match */
    assert_int_equal(stop_matcher_feed(&m, "a", 1, &r, &e), AI_OK);
    assert_int_equal(r.emit_len, 0);
    assert_int_equal(stop_matcher_feed(&m, "a", 1, &r, &e), AI_OK);
    assert_int_equal(r.emit_len, 0);
    assert_int_equal(stop_matcher_feed(&m, "a", 1, &r, &e), AI_OK);
    assert_int_equal(r.emit_len, 1);  /* the first "a" can no longer start "aab" */
    assert_memory_equal(r.emit, "a", 1);
    assert_false(r.stopped);
    assert_int_equal(stop_matcher_feed(&m, "b", 1, &r, &e), AI_OK);
    assert_true(r.stopped);
    assert_int_equal(r.emit_len, 0);
    assert_int_equal(stop_matcher_feed(&m, "zz", 2, &r, &e), AI_OK);  /* after a stop: nothing */
    assert_int_equal(r.emit_len, 0);
    stop_matcher_free(&m);

    buf out;
    int32_t which = -1;
    const char *stops[] = { "world", "\n\n", "orl" };
    /* across tokens: "Hello wor" + "ld" -> "orl" completes first (at 'l') */
    buf_init(&out);
    assert_true(stream(stops, 3, (const char *[]){ "Hello w", "o", "r", "ld", "!" }, 5, &out, &which));
    assert_string_equal(out.data, "Hello w");
    assert_int_equal(which, 2);
    buf_free(&out);
    buf_init(&out);
    assert_true(stream(stops, 3, (const char *[]){ "line one\n", "\nline two" }, 2, &out, &which));
    assert_string_equal(out.data, "line one");
    assert_int_equal(which, 1);
    buf_free(&out);
    /* no stop: everything comes out, the held tail at flush */
    buf_init(&out);
    assert_false(stream(stops, 3, (const char *[]){ "the w", "o" }, 2, &out, &which));
    assert_string_equal(out.data, "the wo");
    buf_free(&out);
    /* UTF-8 stop string split inside a code point */
    const char *cjk[] = { "\xE3\x80\x82" };  /* U+3002 ideographic full stop */
    buf_init(&out);
    assert_true(stream(cjk, 1, (const char *[]){ "\xE4\xBD\xA0\xE5\xA5\xBD\xE3", "\x80", "\x82\xE5" }, 3, &out, &which));
    assert_string_equal(out.data, "\xE4\xBD\xA0\xE5\xA5\xBD");
    buf_free(&out);

    /* include_stop (vLLM include_stop_str_in_output): the match is released too */
    assert_int_equal(stop_matcher_init(&m, stops, 3, &e), AI_OK);
    m.include_stop = true;
    assert_int_equal(stop_matcher_feed(&m, "say wo", 6, &r, &e), AI_OK);
    assert_int_equal(r.emit_len, 4);  /* "say ": "wo" may start "world" */
    assert_int_equal(stop_matcher_feed(&m, "rld!", 4, &r, &e), AI_OK);
    assert_true(r.stopped);
    assert_int_equal(r.stop_index, 2);  /* "orl" completes before "world" */
    assert_int_equal(r.emit_len, 4);  /* output "say worl": up to the end of the match */
    assert_memory_equal(r.emit, "worl", 4);
    stop_matcher_free(&m);

    const char *bad[] = { "" };
    assert_int_equal(stop_matcher_init(&m, bad, 1, &e), AI_ERR_INVALID);
}

/* Random texts over a 3-letter alphabet, random splits: the emitted text is
 * always the prefix before the earliest-ending occurrence (naive search),
 * whatever the chunking, and nothing after it is ever emitted. */
static void test_stop_random(void **state)
{
    (void)state;
    uint64_t x = 11;
    const char *stops[] = { "aab", "ba", "cac", "abcab" };
    for (int trial = 0; trial < 400; trial++) {
        char text[64];
        size_t n = 1 + lcg(&x) % 60;
        for (size_t i = 0; i < n; i++) text[i] = "abc"[lcg(&x) % 3];
        text[n] = 0;
        size_t ns = 1 + lcg(&x) % 4;
        /* naive: the smallest end, then the earliest start among those ending there */
        size_t best_end = SIZE_MAX, cut = n;
        for (size_t end = 1; end <= n && best_end == SIZE_MAX; end++)
            for (size_t s = 0; s < ns; s++) {
                size_t L = strlen(stops[s]);
                if (L <= end && memcmp(text + end - L, stops[s], L) == 0 && (best_end == SIZE_MAX || end - L < cut)) {
                    best_end = end;
                    cut = end - L;
                }
            }
        char pieces[64][64];
        const char *pp[64];
        size_t np = 0;
        for (size_t i = 0; i < n;) {
            size_t k = 1 + lcg(&x) % 5;
            if (k > n - i) k = n - i;
            memcpy(pieces[np], text + i, k);
            pieces[np][k] = 0;
            pp[np] = pieces[np];
            np++;
            i += k;
        }
        buf out;
        buf_init(&out);
        int32_t which = -1;
        bool st = stream(stops, ns, pp, np, &out, &which);
        assert_int_equal(st, best_end != SIZE_MAX);
        assert_int_equal(out.len, cut);
        if (cut) assert_memory_equal(out.data, text, cut);
        buf_free(&out);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_temperature_limit),
        cmocka_unit_test(test_top_k),
        cmocka_unit_test(test_top_p),
        cmocka_unit_test(test_temperature_before_top_p),
        cmocka_unit_test(test_min_p),
        cmocka_unit_test(test_filters_large_vs_naive),
        cmocka_unit_test(test_rng_reference),
        cmocka_unit_test(test_seeds),
        cmocka_unit_test(test_penalties_known),
        cmocka_unit_test(test_penalties_incremental),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_finish),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_distribution),
        cmocka_unit_test(test_stop_strings),
        cmocka_unit_test(test_stop_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
