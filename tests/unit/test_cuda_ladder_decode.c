/* test_cuda_ladder_decode.c - every version of the decode-attention ladder (src/kernels/decode/)
 * against a double CPU reference, and the ladder driver end to end.
 *
 * Each case builds a paged f16 cache of 16-token blocks from a random block permutation (a
 * sequence's blocks are scattered and interleaved with the others'); every slot no sequence owns
 * is NaN, so reading a key at or beyond seq_len fails. Lengths are mostly odd (1, 17, 555, 4097,
 * 6001: not whole 16-key tiles or 512-key splits), plus 2 and 16. Output poisoned (NaN) before every call. Tolerance DECODE_TOL
 * (5e-3, decode.h: worst row of max |o - ref| / max |ref|; the kernels are fp32 inside and land
 * near 1e-6, the bound leaves room for f16 P). Every version runs twice on the same work and must
 * give identical bits (v4's last-CTA merge resets its counters and merges in a fixed order).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test.h"
#include "aiinfra/dtype.h"
#include "kernels/decode/decode.h"
#include "kernels/ladder.h"

typedef struct dec_case {
    const char *name;
    int n_seq, len[4], n_head, n_kv, d;
    uint64_t seed;
} dec_case;

static void run_case(const dec_case *c)
{
    uint64_t rs = c->seed;
    const int n = c->n_seq, d = c->d, hkv = c->n_kv, G = c->n_head / hkv, bs = DECODE_BLOCK;
    int total = 3, max_len = 1;
    int32_t len[4], qs[5];
    for (int s = 0; s < n; s++) {
        len[s] = c->len[s];
        qs[s] = s;
        max_len = len[s] > max_len ? len[s] : max_len;
        total += (len[s] + bs - 1) / bs;
    }
    qs[n] = n;
    const int max_blocks = (max_len + bs - 1) / bs + 1; /* one unused column */
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)total);
    for (int i = 0; i < total; i++) perm[i] = i;
    for (int i = total - 1; i > 0; i--) {
        int j = (int)((cuda_test_randf(&rs) + 1.0f) * 0.5f * (float)(i + 1));
        if (j > i) j = i;
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int32_t *bt = calloc((size_t)n * max_blocks, sizeof(int32_t));
    int next = 0;
    for (int round = 0; round < max_blocks; round++)
        for (int s = 0; s < n; s++)
            if (round * bs < len[s]) bt[s * max_blocks + round] = perm[next++];
    const size_t row = (size_t)hkv * d, slots = (size_t)total * bs;
    uint16_t *hk = malloc(slots * row * 2), *hv = malloc(slots * row * 2);
    memset(hk, 0xFF, slots * row * 2);
    memset(hv, 0xFF, slots * row * 2);
    for (int s = 0; s < n; s++)
        for (int j = 0; j < len[s]; j++) {
            const size_t slot = (size_t)bt[s * max_blocks + j / bs] * bs + j % bs;
            for (size_t i = 0; i < row; i++) {
                hk[slot * row + i] = dtype_f32_to_f16(cuda_test_randf(&rs));
                hv[slot * row + i] = dtype_f32_to_f16(cuda_test_randf(&rs));
            }
        }
    const size_t nq = (size_t)n * c->n_head * d;
    float *hq = malloc(nq * sizeof(float));
    cuda_test_fill(hq, nq, &rs, 4.0f);

    /* reference in double */
    double *ref = calloc(nq, sizeof(double)), *sc = malloc(sizeof(double) * (size_t)max_len);
    const double scale = 1.0 / sqrt((double)d);
    for (int s = 0; s < n; s++)
        for (int h = 0; h < c->n_head; h++) {
            const int kh = h / G;
            const float *q = hq + ((size_t)s * c->n_head + h) * d;
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < len[s]; j++) {
                const size_t slot = (size_t)bt[s * max_blocks + j / bs] * bs + j % bs;
                double dot = 0;
                for (int i = 0; i < d; i++) dot += (double)q[i] * dtype_f16_to_f32(hk[slot * row + (size_t)kh * d + i]);
                sc[j] = dot * scale;
                mx = sc[j] > mx ? sc[j] : mx;
            }
            double *o = ref + ((size_t)s * c->n_head + h) * d;
            for (int j = 0; j < len[s]; j++) {
                const size_t slot = (size_t)bt[s * max_blocks + j / bs] * bs + j % bs;
                const double p = exp(sc[j] - mx);
                sum += p;
                for (int i = 0; i < d; i++) o[i] += p * dtype_f16_to_f32(hv[slot * row + (size_t)kh * d + i]);
            }
            for (int i = 0; i < d; i++) o[i] /= sum;
        }

    decode_problem p = { .n_seq = n, .max_blocks = max_blocks, .max_seq_len = max_len, .n_head = c->n_head,
                         .n_kv = hkv, .d = d, .scale = (float)scale };
    p.work_size = decode_work_size(&p);
    assert_true(p.work_size > 0);
    p.out = cuda_test_dup(NULL, nq * sizeof(float));
    p.q = cuda_test_dup(hq, nq * sizeof(float));
    p.k_cache = cuda_test_dup(hk, slots * row * 2);
    p.v_cache = cuda_test_dup(hv, slots * row * 2);
    p.block_tables = cuda_test_dup(bt, sizeof(int32_t) * (size_t)n * max_blocks);
    p.seq_len = cuda_test_dup(len, sizeof(int32_t) * (size_t)n);
    p.q_start = cuda_test_dup(qs, sizeof(int32_t) * (size_t)(n + 1));
    CUDA_OK(cudaMalloc(&p.work, p.work_size));
    CUDA_OK(cudaMemset(p.work, 0, p.work_size)); /* once, as decode.h asks */

    float *out = malloc(nq * sizeof(float)), *again = malloc(nq * sizeof(float));
    for (int v = 0; v < decode_n_versions; v++) {
        const decode_version *dv = &decode_versions[v];
        for (int rep = 0; rep < 2; rep++) {
            CUDA_OK(cudaMemset(p.out, 0xFF, nq * sizeof(float)));
            assert_int_equal(dv->fn(NULL, &p), 0);
            cuda_test_get(rep ? again : out, p.out, nq * sizeof(float));
        }
        double worst = 0;
        for (size_t r = 0; r < nq / (size_t)d; r++) {
            double num = 0, den = 0;
            for (int i = 0; i < d; i++) {
                const double g = out[r * d + i], w = ref[r * d + i];
                const double e = isnan(g) ? INFINITY : fabs(g - w);
                num = e > num ? e : num;
                den = fabs(w) > den ? fabs(w) : den;
            }
            const double e = num / (den > 0 ? den : 1);
            worst = e > worst ? e : worst;
        }
        printf("  %-34s %-18s err %.2e (tol %.0e)\n", c->name, dv->name, worst, DECODE_TOL);
        if (!(worst <= DECODE_TOL)) fail_msg("%s %s: err %g > %g", c->name, dv->name, worst, DECODE_TOL);
        if (memcmp(out, again, nq * sizeof(float)) != 0) fail_msg("%s %s: two calls differ", c->name, dv->name);
    }

    cudaFree(p.out);
    cudaFree((void *)p.q);
    cudaFree((void *)p.k_cache);
    cudaFree((void *)p.v_cache);
    cudaFree((void *)p.block_tables);
    cudaFree((void *)p.seq_len);
    cudaFree((void *)p.q_start);
    cudaFree(p.work);
    free(out);
    free(again);
    free(ref);
    free(sc);
    free(hq);
    free(hk);
    free(hv);
    free(bt);
    free(perm);
}

static void test_versions(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    static const dec_case cases[] = {
        { "llama3 heads 3 seqs 1/17/555", 3, { 1, 17, 555 }, 32, 8, 128, 41 },
        { "llama3 heads 1 x 6001 (splits)", 1, { 6001 }, 32, 8, 128, 42 },
        { "d64 4/2 heads 2 seqs 4097/33", 2, { 4097, 33 }, 4, 2, 64, 43 },
        { "d128 gqa8 4 seqs", 4, { 1000, 2, 1501, 16 }, 16, 2, 128, 44 },
        { "d64 mha 2 seqs", 2, { 31, 700 }, 3, 3, 64, 45 },
        { "d128 mha 1 x 3333 (splits)", 1, { 3333 }, 2, 2, 128, 46 },
        { "d64 gqa8 1 x 9001 (splits)", 1, { 9001 }, 8, 1, 64, 47 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
}

static void test_bad_args(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    void *d = NULL;
    CUDA_OK(cudaMalloc(&d, 1 << 16));
    decode_problem p = { .out = d, .q = d, .k_cache = d, .v_cache = d, .block_tables = d, .seq_len = d, .q_start = d,
                         .n_seq = 1, .max_blocks = 1, .max_seq_len = 16, .n_head = 4, .n_kv = 2, .d = 128,
                         .scale = 0.1f, .work = d, .work_size = 1 << 16 };
    for (int v = 0; v < decode_n_versions; v++) {
        decode_problem b = p;
        b.d = 96;
        assert_int_not_equal(decode_versions[v].fn(NULL, &b), 0);
        b = p;
        b.max_seq_len = 17; /* > max_blocks * 16 */
        assert_int_not_equal(decode_versions[v].fn(NULL, &b), 0);
        b = p;
        b.n_head = 5;
        assert_int_not_equal(decode_versions[v].fn(NULL, &b), 0);
        b = p;
        b.out = NULL;
        assert_int_not_equal(decode_versions[v].fn(NULL, &b), 0);
    }
    for (int v = 1; v < decode_n_versions; v++) { /* the split versions need work */
        decode_problem b = p;
        b.work_size = 16;
        assert_int_not_equal(decode_versions[v].fn(NULL, &b), 0);
    }
    (void)cudaGetLastError();
    cudaFree(d);
}

static void test_ladder_run(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    ladder_report rep = { 0 };
    ai_err err = { 0 };
    ladder_opts o = { .reps = 3, .seed = 5, .small = true };
    if (ladder_run("decode", &o, &rep, &err) != AI_OK) fail_msg("ladder_run decode: %s", err.msg);
    assert_int_equal(rep.n_rows, 3 * decode_n_versions);
    for (int i = 0; i < rep.n_rows; i++) {
        const ladder_result *r = &rep.rows[i];
        printf("  %-8s %-18s %-14s %8.3f ms  %7.1f GB/s  err %.2e\n", r->op, r->version, r->shape, r->ms, r->gbps,
               r->err);
        assert_string_equal(r->op, "decode");
        assert_true(r->ok);
        assert_true(r->ms > 0 && r->gbps > 0 && r->bytes > 0 && r->flops > 0);
    }
    ladder_report_free(&rep);
}

int main(void)
{
    cuda_test_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_versions),
        cmocka_unit_test(test_ladder_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
