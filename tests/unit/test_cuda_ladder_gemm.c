/* test_cuda_ladder_gemm.c - every version of the GEMM ladder (src/kernels/gemm/) against a CPU
 * reference in double on the same bf16 inputs, at every output element, on fresh seeded inputs in
 * [-1, 1), at shapes that are not multiples of any tile, with C poisoned (0xFF bytes = bf16 NaN)
 * before each call so an element a kernel forgot fails.
 *
 * Tolerance: per element |c - ref| / sum_k |a_ik b_kj| <= 1e-2 (LADDER_TOL_BF16). The bf16 output
 * rounding alone is up to 2^-9 ~ 2e-3 relative to |ref| <= sum |a b|; fp32 accumulation adds about
 * K * 2^-24 (< 1e-4 here); a wrong element (a missing k-block, a swapped tile) is off by O(1).
 * Shapes: aligned ones (K % 8 == 0, N % 8 == 0) run every version; unaligned ones run the versions
 * that accept them (v1..v3) and must be refused by the others. 1100x4104x136 has 9 x 17 = 153 tiles
 * of v9 (more than the H200's 132 SMs: the persistent loop takes a second tile) and 3 k-blocks;
 * for v10 that is 5 x 17 = 85 tile pairs on 66 clusters, the last pair's second tile row past M;
 * 200x520x264 has 5 k-blocks (v8/v9's 4-stage ring wraps, mbarrier parity flips).
 * Stream-K (v11, v12; W = 132 CTAs or 66 clusters on an H200): 1100x4104x136 runs 132 whole tiles
 * then 21 tiles' 63 k-blocks over 15 workers (ranges longer than a tile: whole-tile segments between
 * partial ones); 1100x4104x512 runs 132 whole tiles then 21 tiles x 8 k-blocks over 42 workers of
 * 4 k-blocks (2 contributors per tile; v12: 85 pairs = 66 whole + 19 split); 1x520x2048 is all
 * stream-K (3 tiles x 32 k-blocks over 24 workers: 8 contributors per tile, rows past M skipped);
 * small shapes (1 tile, 1..3 k-blocks) run with a single worker. The scratch buffer is filled with
 * 0xFF before the first call (no version may rely on zeroed scratch) and reused by the second.
 * Also: two calls give the same bits (deterministic, no race); bad arguments are refused without a
 * launch; the driver (ladder_run "gemm", small) runs end to end with every row ok and a cuBLASLt
 * reference time, and its cuBLASLt output passes the same check (ladder_gemm fails otherwise).
 * GEMM_TEST_SHORT=1 (for compute-sanitizer, which runs kernels 10-100x slower) leaves out the
 * aligned shapes above 5M multiply-adds (200x520x264 and the two 1100x4104 ones); the all-stream-K
 * 1x520x2048 still wraps the 4-stage ring 8 times and runs the multi-contributor fixup.
 * GEMM_TEST_VERSIONS="v1_naive,v9_ws_persist" runs only the listed versions and skips the driver
 * test (racecheck stops at the first 2-CTA-cluster kernel, v10: see docs/kernels/gemm.md).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test.h"

#include "aiinfra/dtype.h"
#include "kernels/gemm/gemm.h"
#include "kernels/ladder.h"

/* true unless GEMM_TEST_VERSIONS is set and does not list name (comma-separated). */
static bool version_selected(const char *name)
{
    const char *only = getenv("GEMM_TEST_VERSIONS");
    if (!only) return true;
    const size_t len = strlen(name);
    for (const char *q = strstr(only, name); q; q = strstr(q + 1, name))
        if ((q == only || q[-1] == ',') && (q[len] == ',' || q[len] == 0)) return true;
    return false;
}

/* Checks every version on one shape; returns the number of failing versions (each printed). */
static int gemm_case(int M, int N, int K, uint64_t *seed)
{
    int bad = 0;
    const size_t nA = (size_t)M * K, nB = (size_t)K * N, nC = (size_t)M * N;
    float *a = malloc(nA * sizeof *a), *b = malloc(nB * sizeof *b);
    uint16_t *a16 = malloc(nA * 2), *b16 = malloc(nB * 2), *c16 = malloc(nC * 2), *c16b = malloc(nC * 2);
    double *ref = malloc(nC * sizeof *ref), *mag = calloc(nC, sizeof *mag);
    assert_true(a && b && a16 && b16 && c16 && c16b && ref && mag);
    cuda_test_fill(a, nA, seed, 1.0f);
    cuda_test_fill(b, nB, seed, 1.0f);
    dtype_f32_to_bf16_row(a, a16, (int64_t)nA);
    dtype_f32_to_bf16_row(b, b16, (int64_t)nB);
    dtype_bf16_to_f32_row(a16, a, (int64_t)nA); /* the reference sees the rounded inputs */
    dtype_bf16_to_f32_row(b16, b, (int64_t)nB);
    for (size_t i = 0; i < nC; i++) ref[i] = 0;
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++) {
            const double x = a[(size_t)i * K + k];
            const float *br = b + (size_t)k * N;
            double *rr = ref + (size_t)i * N, *mr = mag + (size_t)i * N;
            for (int j = 0; j < N; j++) rr[j] += x * br[j], mr[j] += fabs(x * br[j]);
        }
    /* C is followed by a 4 KiB guard, poisoned with C and checked after each call: no version may
     * write past C's last row (the TMA stores of v13 clip at M only by the tensor map's bounds) */
    enum { GUARD = 4096 };
    unsigned char guard[GUARD];
    void *dA = cuda_test_dup(a16, nA * 2), *dB = cuda_test_dup(b16, nB * 2), *dC = cuda_test_dup(NULL, nC * 2 + GUARD);
    const size_t w_size = gemm_work_size(M, N, K);
    void *dW = w_size ? cuda_test_dup(NULL, w_size) : NULL;
    if (dW) CUDA_OK(cudaMemset(dW, 0xFF, w_size)); /* garbage scratch: versions must not rely on zeros */
    for (int v = 0; v < gemm_n_versions; v++) {
        const gemm_version *gv = &gemm_versions[v];
        if (!version_selected(gv->name)) continue;
        if (!gemm_version_accepts(gv, dA, dB, dC, M, N, K)) {
            if (!gv->align8) fail_msg("gemm %s refuses %dx%dx%d", gv->name, M, N, K);
            assert_int_not_equal(gv->fn(NULL, dA, dB, dC, M, N, K, dW, w_size), 0);
            continue;
        }
        for (int call = 0; call < 2; call++) {
            CUDA_OK(cudaMemset(dC, 0xFF, nC * 2 + GUARD));
            int rc = gv->fn(NULL, dA, dB, dC, M, N, K, dW, w_size);
            if (rc == 0) rc = (int)cudaDeviceSynchronize();
            if (rc != 0) fail_msg("gemm %s %dx%dx%d: %s", gv->name, M, N, K, cudaGetErrorString((cudaError_t)rc));
            cuda_test_get(call ? c16b : c16, dC, nC * 2);
            cuda_test_get(guard, (char *)dC + nC * 2, GUARD);
            for (int g = 0; g < GUARD; g++)
                if (guard[g] != 0xFF) fail_msg("gemm %s %dx%dx%d wrote past C (guard byte %d)", gv->name, M, N, K, g);
        }
        double worst = 0;
        size_t at = 0;
        for (size_t i = 0; i < nC; i++) {
            const double c = dtype_bf16_to_f32(c16[i]);
            const double e = isnan(c) ? INFINITY : fabs(c - ref[i]) / (mag[i] > 0 ? mag[i] : 1.0);
            if (e > worst) worst = e, at = i;
        }
        size_t n_bad = 0;
        for (size_t i = 0; i < nC; i++) {
            const double c = dtype_bf16_to_f32(c16[i]);
            n_bad += !(fabs(c - ref[i]) <= LADDER_TOL_BF16 * (mag[i] > 0 ? mag[i] : 1.0));
        }
        if (!(worst <= LADDER_TOL_BF16)) {
            printf("FAIL gemm %s %dx%dx%d: error %.3g > %.3g at (%zu, %zu): got %.6g, ref %.6g; %zu of %zu elements bad\n",
                   gv->name, M, N, K, worst, LADDER_TOL_BF16, at / (size_t)N, at % (size_t)N,
                   dtype_bf16_to_f32(c16[at]), ref[at], n_bad, nC);
            bad++;
        } else if (memcmp(c16, c16b, nC * 2) != 0) {
            printf("FAIL gemm %s %dx%dx%d: two calls differ (race or nondeterministic order)\n", gv->name, M, N, K);
            bad++;
        }
    }
    CUDA_OK(cudaFree(dA));
    CUDA_OK(cudaFree(dB));
    CUDA_OK(cudaFree(dC));
    if (dW) CUDA_OK(cudaFree(dW));
    free(a), free(b), free(a16), free(b16), free(c16), free(c16b), free(ref), free(mag);
    return bad;
}

static void test_gemm_versions(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    uint64_t seed = 0x6E6D;
    static const int aligned[][3] = { { 1, 72, 40 },      { 67, 136, 104 },   { 130, 264, 136 },
                                      { 200, 520, 264 },  { 1100, 4104, 136 }, { 16, 8, 8 },
                                      { 1, 520, 2048 },   { 1100, 4104, 512 } };
    const bool short_run = getenv("GEMM_TEST_SHORT") != NULL;
    int bad = 0;
    for (size_t i = 0; i < sizeof aligned / sizeof *aligned; i++) {
        if (short_run && (double)aligned[i][0] * aligned[i][1] * aligned[i][2] > 5e6) continue;
        bad += gemm_case(aligned[i][0], aligned[i][1], aligned[i][2], &seed);
    }
    if (bad) fail_msg("%d (version, shape) pairs failed (listed above)", bad);
}

static void test_gemm_unaligned(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    uint64_t seed = 0xA11;
    static const int odd[][3] = { { 67, 129, 97 }, { 3, 5, 7 }, { 1, 1, 1 }, { 33, 40, 12 } };
    int bad = 0;
    for (size_t i = 0; i < sizeof odd / sizeof *odd; i++) bad += gemm_case(odd[i][0], odd[i][1], odd[i][2], &seed);
    if (bad) fail_msg("%d (version, shape) pairs failed (listed above)", bad);
}

static void test_gemm_bad_args(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    char *d = cuda_test_dup(NULL, 4096);
    bf16 *A = (bf16 *)d, *B = (bf16 *)(d + 1024), *C = (bf16 *)(d + 2048);
    for (int v = 0; v < gemm_n_versions; v++) {
        const gemm_version *gv = &gemm_versions[v];
        assert_int_not_equal(gv->fn(NULL, A, B, C, 0, 8, 8, NULL, 0), 0);
        assert_int_not_equal(gv->fn(NULL, A, B, C, 8, 0, 8, NULL, 0), 0);
        assert_int_not_equal(gv->fn(NULL, A, B, C, 8, 8, 0, NULL, 0), 0);
        assert_int_not_equal(gv->fn(NULL, NULL, B, C, 8, 8, 8, NULL, 0), 0);
        assert_int_not_equal(gv->fn(NULL, A, NULL, C, 8, 8, 8, NULL, 0), 0);
        assert_int_not_equal(gv->fn(NULL, A, B, NULL, 8, 8, 8, NULL, 0), 0);
        assert_int_not_equal(gv->fn(NULL, A, B, A, 8, 8, 8, NULL, 0), 0);
        if (gv->align8) {
            assert_int_not_equal(gv->fn(NULL, A, B, C, 8, 8, 12, NULL, 0), 0); /* K % 8 */
            assert_int_not_equal(gv->fn(NULL, A, B, C, 8, 12, 8, NULL, 0), 0); /* N % 8 */
            assert_int_not_equal(gv->fn(NULL, A + 1, B, C, 8, 8, 8, NULL, 0), 0); /* 2-byte aligned A */
        }
    }
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaFree(d));
}

static void test_gemm_ladder_driver(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    if (getenv("GEMM_TEST_VERSIONS")) skip(); /* the driver runs every version */
    ladder_report rep = { 0 };
    ai_err err = { 0 };
    ladder_opts o = { .reps = 3, .seed = 11, .small = true };
    if (ladder_run("gemm", &o, &rep, &err) != AI_OK) fail_msg("ladder_run gemm: %s", err.msg);
    assert_int_equal(rep.n_rows, 3 * gemm_n_versions); /* small shapes: every version accepts them */
    for (int i = 0; i < rep.n_rows; i++) {
        const ladder_result *r = &rep.rows[i];
        assert_string_equal(r->op, "gemm");
        if (!r->ok) fail_msg("gemm %s %s: error %.3g > %.3g", r->version, r->shape, r->err, r->tol);
        assert_string_equal(r->ref_name, "cublasLt");
        assert_true(r->ms > 0 && r->ref_ms > 0 && r->frac_ref > 0 && r->gflops > 0 && r->intensity > 0);
    }
    ladder_report_free(&rep);
}

int main(void)
{
    cuda_test_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_versions),
        cmocka_unit_test(test_gemm_unaligned),
        cmocka_unit_test(test_gemm_bad_args),
        cmocka_unit_test(test_gemm_ladder_driver),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
