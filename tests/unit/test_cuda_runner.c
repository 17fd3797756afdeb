/* test_cuda_runner.c - the whole batched step on the CUDA backend against model_forward on the CPU
 * (runner_check.h), on the 7 tiny HF models (f32 and bf16 weights): with an f32 KV cache the GPU's
 * logits must match to 1e-4 relative (f32 GEMV, fp32 softmax); with the f16 cache (the default)
 * to 2e-2 (K, V and q rounded to 11-bit mantissas), greedy tokens equal where the reference's top
 * two logits are apart by more than that. Skips with one line where there is no GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cuda_test.h"
#include "runner_check.h"

static void test_cuda_runner_kv_f32(void **state)
{
    CUDA_TEST_REQUIRE();
    backend be;
    ai_err err = {0};
    if (backend_cuda_init(&be, 0, &err) != AI_OK) fail_msg("%s", err.msg);
    for (int i = 0; runner_check_models[i]; i++) runner_check(&be, runner_check_models[i], true, 1e-4);
    backend_free(&be);
}

static void test_cuda_runner_kv_f16(void **state)
{
    CUDA_TEST_REQUIRE();
    backend be;
    ai_err err = {0};
    if (backend_cuda_init(&be, 0, &err) != AI_OK) fail_msg("%s", err.msg);
    for (int i = 0; runner_check_models[i]; i++) runner_check(&be, runner_check_models[i], false, 2e-2);
    backend_free(&be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_runner_kv_f32),
        cmocka_unit_test(test_cuda_runner_kv_f16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
