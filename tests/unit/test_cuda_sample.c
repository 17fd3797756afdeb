/* test_cuda_sample.c - cuk_argmax and cuk_sample (k_sample.cu) against the CPU sampler.
 *
 * Reference: src/engine/sampler.c's sampler_filter gives the kept set and its renormalised
 * probabilities for the same logits and parameters; the test orders it by (logit desc, id asc) and
 * draws by inverse CDF in double with the same u (a float, as in cuk_sample_params). Each device row
 * is one draw: many rows hold the same logits with different u, so one launch checks
 *   1. per u: the device token equals the reference token, except where u lies within 1e-6 of a
 *      CDF boundary (the device's masses are 2^-40 fixed point, the CPU's double: measure zero);
 *   2. the frequencies of the drawn tokens against the reference probabilities (chi-square over bins
 *      of consecutive tokens of the order, expected count >= 5 each, bound dof + 6 sqrt(2 dof));
 * and separately argmax ties (lowest id), invalid rows (-1), greedy temperatures, all-equal logits.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test.h"

#include "aiinfra/sampler.h"
#include "backend/cuda/cuda_kernels.h"

static const float *g_logits; /* for the qsort comparator */

static int by_order(const void *a, const void *b)
{
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (g_logits[i] != g_logits[j]) return g_logits[i] > g_logits[j] ? -1 : 1;
    return i < j ? -1 : 1;
}

typedef struct ref_dist {
    int32_t *ids; /* (n) in the order (logit desc, id asc) */
    double *cum;  /* (n) cumulative probabilities */
    double *p;    /* (n) */
    int32_t n;
} ref_dist;

static void ref_dist_make(ref_dist *d, const float *logits, int32_t nv, const cuk_sample_params *cp)
{
    sampler sm;
    sampler_seq seq;
    ai_err e = { 0 };
    sampler_params p = sampler_params_default();
    p.temperature = cp->temperature;
    p.top_k = cp->top_k;
    p.top_p = cp->top_p;
    p.min_p = cp->min_p;
    assert_int_equal(sampler_init(&sm, nv, &e), AI_OK);
    if (sampler_seq_init(&seq, &p, nv, -1, 1, &e) != AI_OK) fail_msg("%s", e.msg);
    sampler_dist dist;
    if (sampler_filter(&sm, &seq, logits, &dist, &e) != AI_OK) fail_msg("%s", e.msg);
    d->n = (int32_t)dist.n;
    d->ids = malloc(dist.n * sizeof *d->ids);
    d->cum = malloc(dist.n * sizeof *d->cum);
    d->p = malloc(dist.n * sizeof *d->p);
    double *pid = calloc((size_t)nv, sizeof *pid);
    for (size_t j = 0; j < dist.n; j++) {
        d->ids[j] = dist.ids[j];
        pid[dist.ids[j]] = dist.probs[j];
    }
    g_logits = logits;
    qsort(d->ids, dist.n, sizeof *d->ids, by_order);
    double c = 0;
    for (int32_t j = 0; j < d->n; j++) {
        d->p[j] = pid[d->ids[j]];
        c += d->p[j];
        d->cum[j] = c;
    }
    free(pid);
    sampler_seq_free(&seq);
    sampler_free(&sm);
}

static void ref_dist_free(ref_dist *d)
{
    free(d->ids);
    free(d->cum);
    free(d->p);
}

/* Inverse CDF as sampler_sample walks it; *near = u within tol of a boundary. */
static int32_t ref_pick(const ref_dist *d, double u, int *near)
{
    int32_t pick = 0, j = 0;
    *near = 0;
    for (; j < d->n; j++) {
        if (fabs(u - d->cum[j]) < 1e-6) *near = 1;
        if (d->p[j] > 0) pick = j;
        if (u < d->cum[j]) break;
    }
    return d->ids[pick];
}

/* rows copies of logits (nv), one u each; checks per-u agreement and the chi-square of the draws. */
static void sample_case(const char *what, const float *logits, int32_t nv, cuk_sample_params base, int32_t rows,
                        uint64_t *seed)
{
    ref_dist d;
    ref_dist_make(&d, logits, nv, &base);
    float *big = malloc((size_t)rows * nv * sizeof *big);
    cuk_sample_params *pp = malloc((size_t)rows * sizeof *pp);
    for (int32_t r = 0; r < rows; r++) {
        memcpy(big + (size_t)r * nv, logits, (size_t)nv * sizeof *big);
        pp[r] = base;
        float u = 0.5f + 0.5f * cuda_test_randf(seed); /* [0, 1) */
        pp[r].u = u;
    }
    float *dl = cuda_test_dup(big, (size_t)rows * nv * sizeof *big);
    cuk_sample_params *dp = cuda_test_dup(pp, (size_t)rows * sizeof *pp);
    int32_t *dout = cuda_test_dup(NULL, (size_t)rows * 4), *out = malloc((size_t)rows * 4);
    size_t ws = cuk_sample_work_size(rows, nv);
    void *work = ws ? cuda_test_dup(NULL, ws) : NULL;
    ai_err e = { 0 };
    if (cuk_sample(NULL, dl, rows, nv, dp, dout, work, ws, &e) != AI_OK) fail_msg("%s: %s", what, e.msg);
    cuda_test_get(out, dout, (size_t)rows * 4);

    int mismatches = 0;
    int32_t *count = calloc((size_t)nv, sizeof *count);
    for (int32_t r = 0; r < rows; r++) {
        int near;
        int32_t want = ref_pick(&d, (double)pp[r].u, &near);
        if (out[r] < 0 || out[r] >= nv) fail_msg("%s: row %d token %d out of range", what, r, out[r]);
        count[out[r]]++;
        if (out[r] != want) {
            if (!near) fail_msg("%s: u = %.9g: device token %d, reference %d (kept %d)", what, (double)pp[r].u, out[r],
                                want, d.n);
            mismatches++;
        }
    }
    /* every drawn token must be in the kept set */
    char *kept = calloc((size_t)nv, 1);
    for (int32_t j = 0; j < d.n; j++) kept[d.ids[j]] = 1;
    for (int32_t t = 0; t < nv; t++)
        if (count[t] && !kept[t]) fail_msg("%s: token %d drawn %d times, outside the kept set", what, t, count[t]);
    /* chi-square over bins of consecutive tokens (in the order) with expectation >= 5 each; a
     * short last bin joins the one before */
    double chi = 0, bin_e = 0, bin_o = 0, last_e = 0, last_o = 0;
    int dof = 0;
    for (int32_t j = 0; j < d.n; j++) {
        bin_e += d.p[j] * rows;
        bin_o += count[d.ids[j]];
        if (bin_e >= 5) {
            if (dof) chi += (last_o - last_e) * (last_o - last_e) / last_e;
            last_e = bin_e;
            last_o = bin_o;
            dof++;
            bin_e = bin_o = 0;
        }
    }
    last_e += bin_e;
    last_o += bin_o;
    if (last_e > 0) chi += (last_o - last_e) * (last_o - last_e) / last_e;
    if (!dof) dof = 1;
    dof = dof > 1 ? dof - 1 : 1;
    double bound = dof + 6 * sqrt(2.0 * dof);
    printf("%-28s kept %6d  chi2 %8.1f (dof %d, bound %.0f)  near-boundary mismatches %d\n", what, d.n, chi, dof,
           bound, mismatches);
    if (chi > bound) fail_msg("%s: chi-square %.1f > %.1f", what, chi, bound);
    if (mismatches > rows / 100 + 1) fail_msg("%s: %d near-boundary mismatches", what, mismatches);
    cudaFree(dl); cudaFree(dp); cudaFree(dout);
    if (work) cudaFree(work);
    free(big); free(pp); free(out); free(count); free(kept);
    ref_dist_free(&d);
}

static float *logits_random(int32_t nv, uint64_t *seed, float scale, int ties, int neg_inf)
{
    float *l = malloc((size_t)nv * sizeof *l);
    cuda_test_fill(l, (size_t)nv, seed, scale);
    for (int k = 0; k < ties; k++) { /* copy a value to another position: equal logits, ids decide */
        int32_t a = (int32_t)((cuda_test_randf(seed) * 0.5f + 0.5f) * nv) % nv;
        int32_t b = (int32_t)((cuda_test_randf(seed) * 0.5f + 0.5f) * nv) % nv;
        l[b] = l[a];
    }
    for (int k = 0; k < neg_inf; k++) l[(int32_t)((cuda_test_randf(seed) * 0.5f + 0.5f) * nv) % nv] = -INFINITY;
    return l;
}

static cuk_sample_params sp(float t, int32_t k, float p, float minp)
{
    cuk_sample_params s = { .temperature = t, .top_p = p, .min_p = minp, .u = 0, .top_k = k };
    return s;
}

static void test_sample_small(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    uint64_t seed = 21;
    const int32_t nv = 3001;
    float *l = logits_random(nv, &seed, 4, 200, 30);
    /* the top few tied, so ties sit inside the kept sets */
    l[17] = l[2900] = l[1234] = 4.5f;
    sample_case("T0.7 plain", l, nv, sp(0.7f, 0, 1, 0), 4096, &seed);
    sample_case("T1 top_k 40", l, nv, sp(1, 40, 1, 0), 2048, &seed);
    sample_case("T1.3 top_p 0.9", l, nv, sp(1.3f, 0, 0.9f, 0), 4096, &seed);
    sample_case("T0.8 min_p 0.05", l, nv, sp(0.8f, 0, 1, 0.05f), 2048, &seed);
    sample_case("k50 p0.8 min_p0.02", l, nv, sp(1, 50, 0.8f, 0.02f), 2048, &seed);
    sample_case("k2000 p0.95", l, nv, sp(1.1f, 2000, 0.95f, 0), 2048, &seed);
    sample_case("k3 (ties at the max)", l, nv, sp(1, 3, 1, 0), 1024, &seed);
    sample_case("k2 p0.5 min_p0.9", l, nv, sp(1, 2, 0.5f, 0.9f), 512, &seed);
    sample_case("min_p 1 (the tied max)", l, nv, sp(2, 0, 1, 1), 512, &seed);
    sample_case("top_p 0.999 T5", l, nv, sp(5, 0, 0.999f, 0), 4096, &seed);
    free(l);
    /* all logits equal: the draw walks ids in order */
    float *eq = malloc(1000 * sizeof *eq);
    for (int i = 0; i < 1000; i++) eq[i] = 0.25f;
    sample_case("all equal", eq, 1000, sp(1, 0, 1, 0), 4096, &seed);
    sample_case("all equal top_p 0.3", eq, 1000, sp(1, 0, 0.3f, 0), 2048, &seed);
    free(eq);
}

static void test_sample_vocab(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    uint64_t seed = 22;
    const int32_t nv = 128256;
    float *l = logits_random(nv, &seed, 1.5f, 1000, 100); /* flat: huge top-p sets */
    sample_case("128k plain", l, nv, sp(1, 0, 1, 0), 512, &seed);
    sample_case("128k top_p 0.95", l, nv, sp(1, 0, 0.95f, 0), 512, &seed);
    sample_case("128k k40 p0.9 T0.6", l, nv, sp(0.6f, 40, 0.9f, 0), 512, &seed);
    sample_case("128k k100000 p0.5", l, nv, sp(1, 100000, 0.5f, 0), 256, &seed);
    sample_case("128k min_p 0.3", l, nv, sp(1, 0, 1, 0.3f), 256, &seed);
    free(l);
    /* an odd vocabulary (scalar loads) */
    const int32_t nv2 = 151937;
    float *l2 = logits_random(nv2, &seed, 6, 100, 10);
    sample_case("151937 top_p 0.9", l2, nv2, sp(0.9f, 0, 0.9f, 0), 256, &seed);
    free(l2);
}

/* Greedy temperatures, invalid rows, top_k 1: exact expectations. */
static void test_sample_special(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    uint64_t seed = 23;
    const int32_t nv = 5003, rows = 8;
    float *l = malloc((size_t)rows * nv * sizeof *l);
    cuk_sample_params p[8];
    for (int r = 0; r < rows; r++) {
        cuda_test_fill(l + (size_t)r * nv, (size_t)nv, &seed, 3);
        p[r] = sp(1, 0, 1, 0);
        p[r].u = 0.7f;
    }
    float *x;
    x = l + 0 * nv; x[100] = x[4000] = 9; p[0].temperature = 0;        /* greedy: 100 */
    x = l + 1 * nv; x[77] = x[78] = 9; p[1].temperature = 1e-6f;       /* below SAMPLER_GREEDY_EPS: 77 */
    x = l + 2 * nv; x[50] = NAN;                                       /* -1 */
    x = l + 3 * nv; x[9] = INFINITY;                                   /* -1 */
    x = l + 4 * nv; for (int i = 0; i < nv; i++) x[i] = -INFINITY;     /* -1 */
    x = l + 5 * nv; x[3333] = x[3334] = 9; p[5].top_k = 1; p[5].u = 0.99f; /* 3333 */
    x = l + 6 * nv; for (int i = 0; i < nv; i++) x[i] = -INFINITY; x[4242] = -50; /* the only finite: 4242 */
    x = l + 7 * nv; x[5002] = 20; p[7].temperature = 0.05f;            /* mass ~1 on 5002 */
    const int32_t want[8] = { 100, 77, -1, -1, -1, 3333, 4242, 5002 };
    float *dl = cuda_test_dup(l, (size_t)rows * nv * 4);
    cuk_sample_params *dp = cuda_test_dup(p, sizeof p);
    int32_t *dout = cuda_test_dup(NULL, rows * 4), out[8];
    ai_err e = { 0 };
    assert_int_equal(cuk_sample(NULL, dl, rows, nv, dp, dout, NULL, 0, &e), AI_OK);
    cuda_test_get(out, dout, sizeof out);
    for (int r = 0; r < rows; r++)
        if (out[r] != want[r]) fail_msg("row %d: %d, want %d", r, out[r], want[r]);
    cudaFree(dl); cudaFree(dp); cudaFree(dout);
    free(l);
}

static void test_argmax(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    uint64_t seed = 24;
    /* 1-16 rows of >= 32768: the cluster kernel (ties, NaN and the all -inf row across its blocks' slices) */
    const int32_t shapes[][2] = { { 37, 5003 }, { 8, 128256 }, { 3, 1 }, { 5, 7 }, { 1, 128256 }, { 5, 40001 },
                                  { 17, 32768 } };
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++) {
        const int32_t rows = shapes[c][0], nv = shapes[c][1];
        float *l = malloc((size_t)rows * nv * 4);
        int32_t *want = malloc((size_t)rows * 4), *out = malloc((size_t)rows * 4);
        cuda_test_fill(l, (size_t)rows * nv, &seed, 10);
        for (int32_t r = 0; r < rows; r++) {
            float *x = l + (size_t)r * nv;
            if (r % 3 == 1 && nv > 2) x[nv - 1] = x[nv / 2] = 11; /* tie: the lower id */
            if (r == 2 && nv > 2) x[1] = NAN;
            if (r == 4) for (int32_t i = 0; i < nv; i++) x[i] = -INFINITY;
            int32_t a = 0;
            for (int32_t i = 1; i < nv; i++)
                if (x[i] > x[a]) a = i;
            want[r] = (r == 2 && nv > 2) ? -1 : a;
        }
        float *dl = cuda_test_dup(l, (size_t)rows * nv * 4);
        int32_t *dout = cuda_test_dup(NULL, (size_t)rows * 4);
        ai_err e = { 0 };
        assert_int_equal(cuk_argmax(NULL, dl, rows, nv, dout, &e), AI_OK);
        cuda_test_get(out, dout, (size_t)rows * 4);
        for (int32_t r = 0; r < rows; r++)
            if (out[r] != want[r]) fail_msg("argmax %dx%d row %d: %d, want %d", rows, nv, r, out[r], want[r]);
        cudaFree(dl); cudaFree(dout);
        free(l); free(want); free(out);
    }
}

int main(void)
{
    cuda_test_filter();
    (void)cuda_test_rel_err; /* shared helper, unused here */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_argmax),
        cmocka_unit_test(test_sample_special),
        cmocka_unit_test(test_sample_small),
        cmocka_unit_test(test_sample_vocab),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
