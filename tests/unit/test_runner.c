/* test_runner.c - the batched, paged step on the CPU backend against model_forward (runner_check.h),
 * plus the step's argument checks and the synthetic-model presets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "runner_check.h"

static void test_cpu_runner_matches_forward(void **state)
{
    backend be;
    ai_err err = {0};
    if (backend_cpu_init(&be, 2, &err) != AI_OK) fail_msg("%s", err.msg);
    for (unsigned f = 0; f < 9; f++) /* every combination of RUNNER_FUSE_*, then AUTO */
        for (int i = 0; runner_check_models[i]; i++)
            runner_check(&be, runner_check_models[i], true, 1e-4, f < 8 ? RUNNER_FUSE_EXACT | f : RUNNER_FUSE_AUTO);
    backend_free(&be);
}

static void test_step_rejects_bad_batches(void **state)
{
    backend be;
    ai_err err = {0};
    assert_int_equal(backend_cpu_init(&be, 1, &err), AI_OK);
    model *m = NULL;
    if (model_open(&m, "tests/fixtures/hf/llama", &err) != AI_OK) fail_msg("%s", err.msg);
    runner *r = NULL;
    runner_params rp = {.max_tokens = 8, .max_seqs = 2, .n_ctx = 32, .block_size = 4, .kv_blocks = 8, .kv_f32 = true};
    assert_int_equal(runner_init(&r, &be, NULL, m, NULL, &rp, &err), AI_OK);
    int32_t toks[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, bt[8] = {0, 1, 2, 3, 4, 5, 6, 7}, bad_bt[2] = {0, 8};
    runner_seq ok = {.tokens = toks, .q_len = 3, .seq_len = 3, .block_table = bt};
    assert_int_equal(runner_step(r, &ok, 1, NULL, &err), AI_OK);
    runner_seq s = ok;
    s.q_len = 9, s.seq_len = 9;
    assert_int_equal(runner_step(r, &s, 1, NULL, &err), AI_ERR_RANGE); /* > max_tokens */
    s = ok, s.seq_len = 2;
    assert_int_equal(runner_step(r, &s, 1, NULL, &err), AI_ERR_RANGE); /* seq_len < q_len */
    s = ok, s.seq_len = 33;
    assert_int_equal(runner_step(r, &s, 1, NULL, &err), AI_ERR_RANGE); /* beyond n_ctx */
    s = (runner_seq){.tokens = toks, .q_len = 1, .seq_len = 5, .block_table = bad_bt};
    assert_int_equal(runner_step(r, &s, 1, NULL, &err), AI_ERR_RANGE); /* block outside the pool */
    int32_t bad_tok = 1 << 30;
    s = (runner_seq){.tokens = &bad_tok, .q_len = 1, .seq_len = 1, .block_table = bt};
    assert_int_equal(runner_step(r, &s, 1, NULL, &err), AI_ERR_RANGE);
    runner_seq three[3] = {ok, ok, ok};
    assert_int_equal(runner_step(r, three, 3, NULL, &err), AI_ERR_INVALID); /* > max_seqs */
    assert_int_equal(runner_step(r, &ok, 0, NULL, &err), AI_ERR_INVALID);
    runner_free(r);
    model_close(m);
    backend_free(&be);
}

/* Copy-on-write: a sequence forked after 6 tokens gets a copy of the partly filled block 1 (as block 3)
 * and must then produce the same logits as the parent for the same next token. */
static void test_copy_blocks_fork(void **state)
{
    backend be;
    ai_err err = {0};
    assert_int_equal(backend_cpu_init(&be, 1, &err), AI_OK);
    model *m = NULL;
    if (model_open(&m, "tests/fixtures/hf/qwen2", &err) != AI_OK) fail_msg("%s", err.msg);
    runner *r = NULL;
    runner_params rp = {.max_tokens = 8, .max_seqs = 2, .n_ctx = 32, .block_size = 4, .kv_blocks = 8, .kv_f32 = true};
    assert_int_equal(runner_init(&r, &be, NULL, m, NULL, &rp, &err), AI_OK);
    int32_t toks[7] = {5, 17, 3, 9, 44, 2, 60}, parent[2] = {0, 1}, child[2] = {0, 3}, src = 1, dst = 3;
    runner_seq s = {.tokens = toks, .q_len = 6, .seq_len = 6, .block_table = parent};
    assert_int_equal(runner_step(r, &s, 1, NULL, &err), AI_OK);
    assert_int_equal(runner_copy_blocks(r, &src, &dst, 1, &err), AI_OK);
    int32_t bad = 8;
    assert_int_equal(runner_copy_blocks(r, &src, &bad, 1, &err), AI_ERR_RANGE);
    runner_seq both[2] = {{.tokens = toks + 6, .q_len = 1, .seq_len = 7, .block_table = parent},
                          {.tokens = toks + 6, .q_len = 1, .seq_len = 7, .block_table = child}};
    assert_int_equal(runner_step(r, both, 2, NULL, &err), AI_OK);
    int32_t nv = m->cfg.n_vocab;
    float *l = malloc(2 * (size_t)nv * sizeof(float));
    assert_int_equal(runner_logits(r, l, 2, &err), AI_OK);
    for (int32_t v = 0; v < nv; v++) assert_float_equal(l[v], l[nv + v], 0.0f);
    free(l);
    runner_free(r);
    model_close(m);
    backend_free(&be);
}

static void test_presets_and_random_cpu(void **state)
{
    ai_err err = {0};
    model_config c;
    for (int i = 0; runner_preset_names[i]; i++) assert_int_equal(model_config_preset(runner_preset_names[i], &c, &err), AI_OK);
    assert_int_equal(model_config_preset("gpt-5", &c, &err), AI_ERR_INVALID);
    assert_int_equal(model_config_preset("llama3-8b", &c, &err), AI_OK);
    assert_int_equal(c.dim, 4096);
    assert_int_equal(c.n_vocab, 128256);
    /* a random smollm2-135m-shaped model steps on the CPU and gives finite logits */
    assert_int_equal(model_config_preset("smollm2-135m", &c, &err), AI_OK);
    c.n_layer = 2;
    backend be;
    assert_int_equal(backend_cpu_init(&be, 2, &err), AI_OK);
    runner *r = NULL;
    runner_random rnd = {.type = DTYPE_Q8_0, .seed = 7};
    runner_params rp = {.max_tokens = 8, .max_seqs = 1, .n_ctx = 64, .kv_blocks = 4};
    if (runner_init(&r, &be, &c, NULL, &rnd, &rp, &err) != AI_OK) fail_msg("%s", err.msg);
    int32_t toks[4] = {1, 2, 3, 4}, bt[4] = {3, 2, 1, 0}, next;
    runner_seq s = {.tokens = toks, .q_len = 4, .seq_len = 4, .block_table = bt};
    assert_int_equal(runner_step(r, &s, 1, &next, &err), AI_OK);
    assert_true(next >= 0 && next < c.n_vocab);
    float *l = malloc((size_t)c.n_vocab * sizeof(float));
    assert_int_equal(runner_logits(r, l, 1, &err), AI_OK);
    for (int32_t v = 0; v < c.n_vocab; v++) assert_true(isfinite(l[v]));
    free(l);
    runner_free(r);
    backend_free(&be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_runner_matches_forward),
        cmocka_unit_test(test_step_rejects_bad_batches),
        cmocka_unit_test(test_copy_blocks_fork),
        cmocka_unit_test(test_presets_and_random_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
