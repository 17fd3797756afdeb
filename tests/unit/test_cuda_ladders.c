/* test_cuda_ladders.c - every version of the reduce and softmax ladders (src/kernels/) against CPU
 * references computed in double, on fresh seeded random inputs, at sizes that are not multiples of
 * the block sizes, with outputs poisoned (0xFF bytes = NaN) so an element a kernel forgot fails.
 *
 * Tolerances:
 *   reduce   |sum_gpu - sum_ref| / sum |x_i| <= 1e-5 for inputs in [-1, 1) (n up to 1<<20 + 7), the
 *            conditioning-aware relative error; and for positive inputs in [0, 1), where that is the
 *            plain relative error |sum_gpu - sum_ref| / |sum_ref|: <= 1e-5 for the tree versions
 *            v2..v7, and <= 2e-4 for v1, whose atomics add into one running sum (its rounding error
 *            grows like u * sqrt(n / 3) relative, ~3.5e-5 expected at 1M, so 1e-5 would be wrong).
 *            v2..v7 must also give the same bits on a second call (deterministic order).
 *   softmax  per row ||y - ref|| / ||ref|| <= 1e-5 for fp32, <= 1e-2 for bf16 input and output (the
 *            reference sees the bf16-rounded input; the output's rounding is 2^-9 relative).
 *            Every row must sum to 1 within the same bound (times sqrt(cols) for bf16 absolute).
 *            Shapes: rows not a multiple of the rows packed per block, cols 1, 8, 1004, 1024, 4097
 *            (unaligned rows), 16392, 32768, 40000, 65536 (v8's clusters of 2..8 blocks) and 131080;
 *            and causal rows (all but the first r * cols / rows + 1 elements -1e30, as the unfused
 *            attention baseline masks): whole warps and cluster blocks that see only the mask.
 * Also: the ladder driver (ladder_run, small sizes) runs end to end and reports every version ok;
 * bad arguments are refused without a launch.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test.h"

#include "aiinfra/dtype.h"
#include "kernels/ladder.h"
#include "kernels/reduce/reduce.h"
#include "kernels/softmax/softmax.h"

// ---- reduce -----------------------------------------------------------------------------------

static void reduce_case(int64_t n, bool positive, uint64_t *seed)
{
    float *x = malloc((size_t)n * sizeof *x);
    assert_non_null(x);
    double ref = 0, mag = 0;
    for (int64_t i = 0; i < n; i++) {
        float v = cuda_test_randf(seed);
        x[i] = positive ? 0.5f * (v + 1.0f) : v;
        ref += x[i];
        mag += fabs(x[i]);
    }
    float *dx = cuda_test_dup(x, (size_t)n * sizeof *x);
    const size_t ws = reduce_work_size(n);
    void *work = cuda_test_dup(NULL, ws); /* scratch starts as garbage: versions must not rely on it */
    for (int v = 0; v < reduce_n_versions; v++) {
        const reduce_version *rv = &reduce_versions[v];
        float *dout = cuda_test_dup(NULL, sizeof(float));
        int rc = rv->fn(NULL, dx, n, dout, work, ws);
        if (rc != 0) fail_msg("reduce %s n=%lld: %s", rv->name, (long long)n, cudaGetErrorString((cudaError_t)rc));
        float got = NAN, again = NAN;
        cuda_test_get(&got, dout, sizeof got);
        CUDA_OK(cudaMemset(dout, 0xFF, sizeof(float)));
        assert_int_equal(rv->fn(NULL, dx, n, dout, work, ws), 0);
        cuda_test_get(&again, dout, sizeof again);
        CUDA_OK(cudaFree(dout));
        if (isnan(got)) fail_msg("reduce %s n=%lld: output left unwritten (NaN)", rv->name, (long long)n);
        double e, tol;
        if (positive) {
            e = fabs((double)got - ref) / fabs(ref);
            tol = v == 0 ? 2e-4 : 1e-5;
        } else {
            e = fabs((double)got - ref) / mag;
            tol = 1e-5;
        }
        if (!(e <= tol))
            fail_msg("reduce %s n=%lld %s: error %.3g > %.3g (got %.9g, ref %.9g)", rv->name, (long long)n,
                     positive ? "positive" : "signed", e, tol, got, ref);
        if (v > 0 && memcmp(&got, &again, sizeof got) != 0)
            fail_msg("reduce %s n=%lld: two calls differ (%.9g vs %.9g): order not deterministic (race?)", rv->name,
                     (long long)n, got, again);
    }
    CUDA_OK(cudaFree(work));
    CUDA_OK(cudaFree(dx));
    free(x);
}

static void test_reduce_versions(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    uint64_t seed = 0x1234567;
    const int64_t sizes[] = { 1, 31, 1000, (1 << 20) + 7 };
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        reduce_case(sizes[i], false, &seed);
        reduce_case(sizes[i], true, &seed);
    }
}

/* v6/v7 read float4s after a scalar head: start x 1, 2 and 3 floats past a 16-byte boundary. */
static void test_reduce_unaligned(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    uint64_t seed = 99;
    const int64_t n = 100003;
    float *x = malloc((size_t)(n + 3) * sizeof *x);
    assert_non_null(x);
    cuda_test_fill(x, (size_t)n + 3, &seed, 1.0f);
    float *dx = cuda_test_dup(x, (size_t)(n + 3) * sizeof *x);
    const size_t ws = reduce_work_size(n);
    void *work = cuda_test_dup(NULL, ws);
    float *dout = cuda_test_dup(NULL, sizeof(float));
    for (int off = 1; off <= 3; off++) {
        for (int64_t m = 1; m <= n; m += n - 1) { /* n = 1 (head only) and the full length */
            double ref = 0, mag = 0;
            for (int64_t i = 0; i < m; i++) ref += x[off + i], mag += fabs(x[off + i]);
            for (int v = 0; v < reduce_n_versions; v++) {
                float got = NAN;
                CUDA_OK(cudaMemset(dout, 0xFF, sizeof(float)));
                assert_int_equal(reduce_versions[v].fn(NULL, dx + off, m, dout, work, ws), 0);
                cuda_test_get(&got, dout, sizeof got);
                double e = fabs((double)got - ref) / mag;
                if (!(e <= 1e-5))
                    fail_msg("reduce %s offset %d n=%lld: error %.3g", reduce_versions[v].name, off, (long long)m, e);
            }
        }
    }
    CUDA_OK(cudaFree(dout));
    CUDA_OK(cudaFree(work));
    CUDA_OK(cudaFree(dx));
    free(x);
}

static void test_reduce_bad_args(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    float *d = cuda_test_dup(NULL, 16);
    for (int v = 0; v < reduce_n_versions; v++) {
        assert_int_not_equal(reduce_versions[v].fn(NULL, d, 0, d, d, 16), 0);
        assert_int_not_equal(reduce_versions[v].fn(NULL, NULL, 4, d, d, 16), 0);
    }
    /* scratch too small for the multi-pass and fixed-grid versions */
    for (int v = 1; v < reduce_n_versions; v++) assert_int_not_equal(reduce_versions[v].fn(NULL, d, 1 << 20, d, d, 16), 0);
    CUDA_OK(cudaFree(d));
}

// ---- softmax ----------------------------------------------------------------------------------

/* causal: row r keeps its first r * cols / rows + 1 elements and the rest are -1e30, as the
 * unfused attention baseline writes its mask (whole warps of a row see nothing else). */
static void softmax_case(int rows, int cols, uint64_t *seed, bool causal)
{
    const size_t n = (size_t)rows * cols;
    float *x = malloc(n * sizeof *x), *xb = malloc(n * sizeof *xb), *y = malloc(n * sizeof *y);
    uint16_t *x16 = malloc(n * 2), *y16 = malloc(n * 2);
    double *ref = malloc(n * sizeof *ref), *refb = malloc(n * sizeof *refb);
    assert_true(x && xb && y && x16 && y16 && ref && refb);
    cuda_test_fill(x, n, seed, 6.0f);
    for (int r = 0; causal && r < rows; r++)
        for (int c = (int)((int64_t)r * cols / rows) + 1; c < cols; c++) x[(size_t)r * cols + c] = -1e30f;
    dtype_f32_to_bf16_row(x, x16, (int64_t)n);
    dtype_bf16_to_f32_row(x16, xb, (int64_t)n);
    for (int pass = 0; pass < 2; pass++) {
        const float *in = pass ? xb : x;
        double *out = pass ? refb : ref;
        for (int r = 0; r < rows; r++) {
            const float *xr = in + (size_t)r * cols;
            double m = -INFINITY, d = 0;
            for (int c = 0; c < cols; c++) m = xr[c] > m ? xr[c] : m;
            for (int c = 0; c < cols; c++) d += exp((double)xr[c] - m);
            for (int c = 0; c < cols; c++) out[(size_t)r * cols + c] = exp((double)xr[c] - m) / d;
        }
    }
    void *dx32 = cuda_test_dup(x, n * 4), *dx16 = cuda_test_dup(x16, n * 2);
    for (int v = 0; v < softmax_n_versions; v++) {
        const softmax_version *sv = &softmax_versions[v];
        const size_t esz = sv->bf16 ? 2 : 4;
        void *dy = cuda_test_dup(NULL, n * esz);
        int rc = sv->fn(NULL, sv->bf16 ? dx16 : dx32, dy, rows, cols);
        if (rc != 0) fail_msg("softmax %s %dx%d: %s", sv->name, rows, cols, cudaGetErrorString((cudaError_t)rc));
        if (sv->bf16) {
            cuda_test_get(y16, dy, n * 2);
            dtype_bf16_to_f32_row(y16, y, (int64_t)n);
        } else {
            cuda_test_get(y, dy, n * 4);
        }
        CUDA_OK(cudaFree(dy));
        const double tol = sv->bf16 ? 1e-2 : 1e-5;
        const double *rf = sv->bf16 ? refb : ref;
        for (int r = 0; r < rows; r++) {
            const size_t o = (size_t)r * cols;
            double e = cuda_test_rel_err(y + o, rf + o, (size_t)cols);
            if (!(e <= tol)) fail_msg("softmax %s %dx%d row %d: relative error %.3g > %.3g", sv->name, rows, cols, r, e, tol);
            double s = 0;
            for (int c = 0; c < cols; c++) s += y[o + c];
            const double stol = sv->bf16 ? tol : 1e-4; /* fp32 row sums: cols roundings of ~6e-8 each */
            if (!(fabs(s - 1.0) <= stol)) fail_msg("softmax %s %dx%d row %d: sums to %.9g", sv->name, rows, cols, r, s);
        }
    }
    CUDA_OK(cudaFree(dx32));
    CUDA_OK(cudaFree(dx16));
    free(x), free(xb), free(y), free(x16), free(y16), free(ref), free(refb);
}

static void test_softmax_versions(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    uint64_t seed = 0xABCDEF;
    softmax_case(3, 1000, &seed, false);
    softmax_case(64, 4097, &seed, false);
    softmax_case(8, 32768, &seed, false);
    softmax_case(5, 1, &seed, false);     /* one element: exactly 1 */
    softmax_case(2, 40000, &seed, false); /* beyond v6's registers (1024 threads x 8 x 4): re-read path */
    /* v8: rows packed per block (8 fp32 / 16 bf16 rows of 1k per 256 threads) with a partial last
     * block; cols a multiple of 4 but not of 8 (bf16 takes v7); groups of 1 or 2 threads per row */
    softmax_case(13, 1024, &seed, false);
    softmax_case(7, 1004, &seed, false);
    softmax_case(9, 8, &seed, false);
    /* v8 clusters (fp32 / bf16 blocks per row): 16392 = 3 / one block of 288 threads, 32768 above
     * = 4 / one of 512, 40000 above = 5 / 3, 65536 = 8 / 4; 131080 is past 8 blocks in both dtypes
     * (v8 falls back to v7, v7 to v6) */
    softmax_case(3, 16392, &seed, false);
    softmax_case(3, 65536, &seed, false);
    softmax_case(2, 131080, &seed, false);
    /* causal masks of -1e30: warps (and cluster blocks) whose whole slice is masked */
    softmax_case(64, 4096, &seed, true);
    softmax_case(16, 32768, &seed, true);
    softmax_case(8, 40000, &seed, true);
}

static void test_softmax_bad_args(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    void *a = cuda_test_dup(NULL, 64), *b = cuda_test_dup(NULL, 64);
    for (int v = 0; v < softmax_n_versions; v++) {
        const softmax_version *sv = &softmax_versions[v];
        assert_int_not_equal(sv->fn(NULL, a, b, 0, 4), 0);
        assert_int_not_equal(sv->fn(NULL, a, b, 4, 0), 0);
        assert_int_not_equal(sv->fn(NULL, a, a, 1, 4), 0);
        assert_int_not_equal(sv->fn(NULL, NULL, b, 1, 4), 0);
    }
    CUDA_OK(cudaFree(a));
    CUDA_OK(cudaFree(b));
}

// ---- the driver -------------------------------------------------------------------------------

static void test_ladder_driver(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    ladder_report rep = { 0 };
    ai_err err = { 0 };
    ladder_opts o = { .reps = 3, .seed = 7, .small = true };
    /* reduce: one shape; softmax: 3 shapes x every version (the other ladders: their own tests) */
    const char *ops[] = { "reduce", "softmax" };
    const int rows[] = { reduce_n_versions, 3 * softmax_n_versions };
    for (int k = 0; k < 2; k++) {
        if (ladder_run(ops[k], &o, &rep, &err) != AI_OK) fail_msg("ladder_run %s: %s", ops[k], err.msg);
        assert_int_equal(rep.n_rows, rows[k]);
        assert_true(rep.copy_gbps > 0);
        for (int i = 0; i < rep.n_rows; i++) {
            const ladder_result *r = &rep.rows[i];
            if (!r->ok) fail_msg("%s %s %s: error %.3g > %.3g", r->op, r->version, r->shape, r->err, r->tol);
            assert_string_equal(r->op, ops[k]);
            assert_true(r->ms > 0 && r->gbps > 0 && r->intensity > 0);
        }
        ladder_report_free(&rep);
    }
    assert_true(ladder_op_known("all") && ladder_op_known("gemm") && !ladder_op_known("nosuch"));
    assert_int_not_equal(ladder_run("nosuch", &o, &rep, &err), AI_OK);
    ladder_report_free(&rep);
}

int main(void)
{
    cuda_test_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reduce_versions),  cmocka_unit_test(test_reduce_unaligned),
        cmocka_unit_test(test_reduce_bad_args),  cmocka_unit_test(test_softmax_versions),
        cmocka_unit_test(test_softmax_bad_args), cmocka_unit_test(test_ladder_driver),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
