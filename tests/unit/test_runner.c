/* test_runner.c - the batched, paged step on the CPU backend against model_forward (runner_check.h),
 * plus the step's argument checks and the synthetic-model presets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <cmocka.h>

#include "runner_check.h"

#include "aiinfra/fp8.h"

static void test_cpu_runner_matches_forward(void **state)
{
    backend be;
    ai_err err = {0};
    if (backend_cpu_init(&be, 2, &err) != AI_OK) fail_msg("%s", err.msg);
    for (size_t f = 0; f < sizeof runner_check_fusions / sizeof *runner_check_fusions; f++)
        for (int i = 0; runner_check_models[i]; i++)
            runner_check(&be, runner_check_models[i], RUNNER_KV_F32, 1e-4, runner_check_fusions[f]);
    backend_free(&be);
}

/* The CPU composes matmul_ex's SwiGLU epilogue from its own ops: bit-for-bit their result. */
static void test_cpu_matmul_glu(void **state)
{
    backend be;
    ai_err err = {0};
    if (backend_cpu_init(&be, 2, &err) != AI_OK) fail_msg("%s", err.msg);
    static const dtype types[] = {DTYPE_F32, DTYPE_BF16, DTYPE_Q8_0, DTYPE_Q4_0};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        for (int32_t n_tok = 1; n_tok <= 5; n_tok += 2) {
            matmul_glu_check(&be, types[i], 48, n_tok, false, 0.0);
            matmul_glu_check(&be, types[i], 48, n_tok, true, 0.0);
        }
    backend_free(&be);
}

/* The CPU composes the split norm from passes of its own (runner_check.h); bf16 and quantized products
 * round the scaled x, hence 1e-2 for the input side there. */
static void test_cpu_matmul_defer(void **state)
{
    backend be;
    ai_err err = {0};
    if (backend_cpu_init(&be, 2, &err) != AI_OK) fail_msg("%s", err.msg);
    static const dtype types[] = {DTYPE_F32, DTYPE_BF16, DTYPE_Q8_0, DTYPE_Q4_0};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        for (int32_t n_tok = 1; n_tok <= 5; n_tok += 2) matmul_defer_check(&be, types[i], 48, 1024, n_tok, types[i] == DTYPE_F32 ? 1e-5 : 1e-2);
    backend_free(&be);
}

/* The CPU composes the rope epilogue (matmul, then rope_store): runner_check.h's identity checks the
 * plumbing (which rows are q, k, v; the caches; the refusals). */
static void test_cpu_matmul_rope(void **state)
{
    backend be;
    ai_err err = {0};
    if (backend_cpu_init(&be, 2, &err) != AI_OK) fail_msg("%s", err.msg);
    static const dtype kvs[] = {DTYPE_F32, DTYPE_F16, DTYPE_F8_E4M3};
    for (size_t i = 0; i < sizeof kvs / sizeof *kvs; i++)
        for (int32_t n_tok = 1; n_tok <= 3; n_tok += 2) {
            matmul_rope_check(&be, DTYPE_BF16, n_tok, kvs[i], 1, 64, i == 0);
            matmul_rope_check(&be, DTYPE_F32, n_tok, kvs[i], 0, 32, i != 0);
        }
    backend_free(&be);
}

/* Rounded KV caches against the f32 forward. Rounding K and V to a p-bit mantissa perturbs each stored
 * value by at most u = 2^-p relative (f16: 2^-11, fp8 e4m3: 2^-4, below 448 * scale and above its
 * subnormals); the logits move by a first-order multiple of u. Over these 7 models the worst relative
 * logit error is 1.2e-3 = 2.5 u for f16 and 0.15 = 2.4 u for fp8 (2026-12-04): the same amplification
 * at both precisions, as first order predicts. Tolerance 4 u for each: 2e-3 and 0.25. At 0.25 the
 * greedy-token check of runner_check never fires (top-two gap > 4 tol * max |logit|); the exact checks
 * of the fp8 ops are test_cpu_fp8_kv_ops. */
static void test_cpu_runner_kv_fp8(void **state)
{
    backend be;
    ai_err err = {0};
    if (backend_cpu_init(&be, 2, &err) != AI_OK) fail_msg("%s", err.msg);
    for (int i = 0; runner_check_models[i]; i++) {
        runner_check(&be, runner_check_models[i], RUNNER_KV_F16, 4 * 0x1p-11, RUNNER_FUSE_AUTO);
        runner_check(&be, runner_check_models[i], RUNNER_KV_FP8, 4 * 0x1p-4, RUNNER_FUSE_AUTO);
    }
    backend_free(&be);
}

/* A backend without kv_type_ok has f16 and f32 caches only: runner_init refuses fp8 with the backend's
 * name and the flag in the message (the CUDA backend until its fp8 kernels land); bad scales are refused. */
static void test_runner_kv_dtype_checks(void **state)
{
    backend cpu;
    ai_err err = {0};
    assert_int_equal(backend_cpu_init(&cpu, 1, &err), AI_OK);
    backend_ops ops = *cpu.ops;
    ops.kv_type_ok = NULL;
    ops.name = "nofp8";
    backend be = {.ops = &ops, .ctx = cpu.ctx};
    model *m = NULL;
    if (model_open(&m, "tests/fixtures/hf/llama", &err) != AI_OK) fail_msg("%s", err.msg);
    runner *r = NULL;
    runner_params rp = {.max_tokens = 8, .max_seqs = 2, .n_ctx = 32, .block_size = 4, .kv_blocks = 8,
                        .kv_dtype = RUNNER_KV_FP8};
    assert_int_equal(runner_init(&r, &be, NULL, m, NULL, &rp, &err), AI_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "nofp8"));
    assert_non_null(strstr(err.msg, "f8_e4m3"));
    assert_null(r);
    rp.kv_dtype = RUNNER_KV_F16;
    assert_int_equal(runner_init(&r, &be, NULL, m, NULL, &rp, &err), AI_OK);
    assert_int_equal(runner_kv_type(r), DTYPE_F16);
    assert_int_equal(runner_kv_bytes_per_token(r), (uint64_t)m->cfg.n_layer * m->cfg.n_head_kv *
                                                       (m->cfg.head_dim + m->cfg.head_dim_v) * 2);
    runner_free(r);
    rp.kv_dtype = RUNNER_KV_FP8;
    rp.k_scale = 0.5f;
    assert_int_equal(runner_init(&r, &cpu, NULL, m, NULL, &rp, &err), AI_OK);
    assert_int_equal(runner_kv_type(r), DTYPE_F8_E4M3);
    assert_int_equal(runner_kv_bytes_per_token(r), (uint64_t)m->cfg.n_layer * m->cfg.n_head_kv *
                                                       (m->cfg.head_dim + m->cfg.head_dim_v));
    float ks, vs;
    runner_kv_scales(r, &ks, &vs);
    assert_true(ks == 0.5f && vs == 1.0f);
    runner_free(r);
    const float bad[] = {-1.0f, NAN, INFINITY};
    for (int i = 0; i < 3; i++) {
        rp.v_scale = bad[i];
        assert_int_equal(runner_init(&r, &cpu, NULL, m, NULL, &rp, &err), AI_ERR_INVALID);
    }
    runner_kv_dtype k;
    assert_true(runner_kv_dtype_parse("fp8", &k) && k == RUNNER_KV_FP8);
    assert_true(runner_kv_dtype_parse("fp8_e4m3", &k) && k == RUNNER_KV_FP8);
    assert_true(runner_kv_dtype_parse("auto", &k) && k == RUNNER_KV_AUTO);
    assert_true(runner_kv_dtype_parse("f16", &k) && k == RUNNER_KV_F16);
    assert_false(runner_kv_dtype_parse("fp8_e5m2", &k));
    assert_false(runner_kv_dtype_parse("", &k));
    assert_string_equal(runner_kv_dtype_name(RUNNER_KV_FP8), "fp8");
    model_close(m);
    backend_free(&cpu);
}

/* The two fp8 ops on the CPU backend, on fresh random data with odd sizes and scales != 1:
 *  1. rope_store into an fp8 cache ropes q, k exactly as into an f32 cache, and stores
 *     fp8(x / scale) of the f32 cache's value in every written slot (slot -1: nothing);
 *  2. attention over the fp8 cache equals, bit for bit, attention over an f32 cache holding the decoded
 *     values (decode * scale): the fp8 reader is the f32 attention after an exact widening. */
static void test_cpu_fp8_kv_ops(void **state)
{
    backend be;
    ai_err err = {0};
    assert_int_equal(backend_cpu_init(&be, 2, &err), AI_OK);
    const backend_ops *o = be.ops;
    assert_true(o->kv_type_ok(be.ctx, DTYPE_F8_E4M3));
    enum { NH = 6, NKV = 2, HD = 40, HDV = 24, RD = 24, BS = 4, NB = 9, NT = 7 };
    const int32_t kvd = NKV * HD, kvdv = NKV * HDV, qd = NH * HD, slots = NB * BS;
    uint64_t seed = (uint64_t)time(NULL), x = seed;
    printf("  fp8 kv ops seed %llu\n", (unsigned long long)seed);
#define RND() (x = x * 6364136223846793005ull + 1442695040888963407ull, (float)((x >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f)
    const float ks = 0.37f, vs = 2.5f;
    float q[NT * NH * HD], k[NT * NKV * HD], v[NT * NKV * HDV], q2[NT * NH * HD], k2[NT * NKV * HD];
    for (int i = 0; i < NT * qd; i++) q[i] = 3 * RND();
    for (int i = 0; i < NT * kvd; i++) k[i] = 4 * RND();
    for (int i = 0; i < NT * kvdv; i++) v[i] = 6 * RND();
    k[5] = 1000.0f, v[7] = -5000.0f, v[8] = 1e-5f; /* saturation, underflow */
    memcpy(q2, q, sizeof q);
    memcpy(k2, k, sizeof k);
    /* seq 0: 5 tokens at positions 2..6 in blocks {7, 1}; seq 1: 2 tokens at 4..5 in blocks {3, 0} (its
     * first 4 positions are filled with random codes below); token 6 is skipped (slot -1) */
    int32_t bt[2][2] = {{7, 1}, {3, 0}}, pos[NT] = {2, 3, 4, 5, 6, 4, 5}, slot[NT];
    for (int t = 0; t < NT; t++) {
        int s = t < 5 ? 0 : 1;
        slot[t] = bt[s][pos[t] / BS] * BS + pos[t] % BS;
    }
    slot[4] = -1;
    float *kf = calloc((size_t)slots * kvd, sizeof(float)), *vf = calloc((size_t)slots * kvdv, sizeof(float));
    uint8_t *k8 = calloc((size_t)slots, (size_t)kvd), *v8 = calloc((size_t)slots, (size_t)kvdv);
    assert_true(kf && vf && k8 && v8);
    for (int i = 0; i < slots * kvd; i++) k8[i] = (uint8_t)((x = x * 6364136223846793005ull + 1) >> 56);
    for (int i = 0; i < slots * kvdv; i++) v8[i] = (uint8_t)((x = x * 6364136223846793005ull + 1) >> 56);
    for (int i = 0; i < slots * kvd; i++) k8[i] = (k8[i] & 0x7F) == 0x7F ? 0x3F : k8[i]; /* no NaN codes */
    for (int i = 0; i < slots * kvdv; i++) v8[i] = (v8[i] & 0x7F) == 0x7F ? 0xBF : v8[i];
    for (int i = 0; i < slots * kvd; i++) kf[i] = fp8_e4m3_to_f32(k8[i]) * ks;
    for (int i = 0; i < slots * kvdv; i++) vf[i] = fp8_e4m3_to_f32(v8[i]) * vs;
    uint8_t *k8_before = malloc((size_t)slots * kvd);
    memcpy(k8_before, k8, (size_t)slots * kvd);
    float *kf_before = malloc((size_t)slots * kvd * sizeof(float));
    memcpy(kf_before, kf, (size_t)slots * kvd * sizeof(float));
    backend_rope_kv rf = {.n_head = NH, .n_head_kv = NKV, .head_dim = HD, .head_dim_v = HDV, .rope_dim = RD,
                          .pos = pos, .base = 10000.0f, .freq_scale = 1.0f, .neox = 1, .k_cache = kf, .v_cache = vf,
                          .kv_type = DTYPE_F32, .slot = slot};
    backend_rope_kv r8 = rf;
    r8.k_cache = k8, r8.v_cache = v8, r8.kv_type = DTYPE_F8_E4M3, r8.k_scale = ks, r8.v_scale = vs;
    assert_int_equal(o->rope_store(be.ctx, q, qd, k, kvd, v, kvdv, NT, &rf, &err), AI_OK);
    assert_int_equal(o->rope_store(be.ctx, q2, qd, k2, kvd, v, kvdv, NT, &r8, &err), AI_OK);
    assert_memory_equal(q, q2, sizeof q);
    assert_memory_equal(k, k2, sizeof k);
    for (int t = 0; t < NT; t++) {
        if (slot[t] < 0) continue;
        for (int i = 0; i < kvd; i++) {
            size_t c = (size_t)slot[t] * kvd + i;
            if (k8[c] != fp8_e4m3_from_f32(kf[c] / ks)) fail_msg("token %d k[%d]: 0x%02x for %g", t, i, k8[c], kf[c]);
            kf[c] = fp8_e4m3_to_f32(k8[c]) * ks; /* now the decoded cache */
        }
        for (int i = 0; i < kvdv; i++) {
            size_t c = (size_t)slot[t] * kvdv + i;
            if (v8[c] != fp8_e4m3_from_f32(vf[c] / vs)) fail_msg("token %d v[%d]: 0x%02x for %g", t, i, v8[c], vf[c]);
            vf[c] = fp8_e4m3_to_f32(v8[c]) * vs;
        }
    }
    assert_int_equal(k8[(size_t)slot[0] * kvd + 5], 0x7E); /* 1000 / 0.37 saturates to 448 */
    /* the skipped token's slot (seq 0, position 6 -> block 1 row 2) is untouched */
    size_t skip = (size_t)(1 * BS + 2) * kvd;
    assert_memory_equal(k8 + skip, k8_before + skip, (size_t)kvd);
    assert_memory_equal(kf + skip, kf_before + skip, (size_t)kvd * sizeof(float));

    /* attention: seq 0 queries tokens 0..3 (seq_len 6: its positions 0..1 hold the random codes), seq 1
     * tokens 5..6 (seq_len 6) */
    int32_t qs[3] = {0, 4, 6}, sl[2] = {6, 6}, bts[4] = {7, 1, 3, 0};
    float out8[NT * NH * HDV], outf[NT * NH * HDV];
    backend_attn a = {.q = q, .q_stride = qd, .block_tables = bts, .q_start = qs, .seq_len = sl, .n_seq = 2,
                      .n_tok = 6, .max_blocks = 2, .max_q_len = 4, .max_seq_len = 6, .n_head = NH, .n_head_kv = NKV,
                      .head_dim = HD, .head_dim_v = HDV, .block_size = BS, .scale = 0.158f};
    a.kv_type = DTYPE_F32;
    size_t ws = o->attention_work_size(be.ctx, &a);
    void *work = malloc(ws);
    a.work = work, a.work_size = ws;
    a.out = outf, a.k_cache = kf, a.v_cache = vf;
    assert_int_equal(o->attention(be.ctx, &a, &err), AI_OK);
    a.out = out8, a.k_cache = k8, a.v_cache = v8, a.kv_type = DTYPE_F8_E4M3, a.k_scale = ks, a.v_scale = vs;
    assert_int_equal(o->attention(be.ctx, &a, &err), AI_OK);
    assert_memory_equal(out8, outf, (size_t)6 * NH * HDV * sizeof(float));
#undef RND
    free(work);
    free(kf), free(vf), free(k8), free(v8), free(k8_before), free(kf_before);
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
    runner_random rnd = {.type = DTYPE_F8_E4M3, .seed = 7};
    runner_params rp = {.max_tokens = 8, .max_seqs = 1, .n_ctx = 64, .kv_blocks = 4};
    runner *bad = NULL; /* a KV-cache type, not a weight type the matmuls take */
    assert_int_equal(runner_init(&bad, &be, &c, NULL, &rnd, &rp, &err), AI_ERR_UNSUPPORTED);
    assert_null(bad);
    rnd.type = DTYPE_Q8_0;
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
        cmocka_unit_test(test_cpu_matmul_glu),
        cmocka_unit_test(test_cpu_matmul_defer),
        cmocka_unit_test(test_cpu_matmul_rope),
        cmocka_unit_test(test_cpu_runner_kv_fp8),
        cmocka_unit_test(test_cpu_fp8_kv_ops),
        cmocka_unit_test(test_runner_kv_dtype_checks),
        cmocka_unit_test(test_step_rejects_bad_batches),
        cmocka_unit_test(test_copy_blocks_fork),
        cmocka_unit_test(test_presets_and_random_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
