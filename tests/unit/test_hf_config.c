/* test_hf_config.c - config.json parsing: published configs (Llama 3.1 8B, Qwen2.5 0.5B,
 * field values as released on the Hugging Face hub), a transformers-5 style config with
 * rope_parameters, defaults (those of transformers' LlamaConfig), and every error path. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "aiinfra/hf_config.h"

static ai_status parse(hf_config *c, const char *json, ai_err *err)
{
    return hf_config_parse(c, json, strlen(json), "config.json", err);
}

static const char *llama31_8b =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
    "\"bos_token_id\":128000,\"eos_token_id\":[128001,128008,128009],\"hidden_act\":\"silu\","
    "\"hidden_size\":4096,\"initializer_range\":0.02,\"intermediate_size\":14336,"
    "\"max_position_embeddings\":131072,\"mlp_bias\":false,\"model_type\":\"llama\","
    "\"num_attention_heads\":32,\"num_hidden_layers\":32,\"num_key_value_heads\":8,\"pretraining_tp\":1,"
    "\"rms_norm_eps\":1e-05,\"rope_scaling\":{\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
    "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"},\"rope_theta\":500000.0,"
    "\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.43.0.dev0\","
    "\"use_cache\":true,\"vocab_size\":128256}";

static void test_llama31(void **state)
{
    (void)state;
    hf_config c;
    ai_err err;
    if (parse(&c, llama31_8b, &err) != AI_OK) fail_msg("%s", err.msg);
    assert_string_equal(c.architecture, "LlamaForCausalLM");
    assert_string_equal(c.model_type, "llama");
    assert_int_equal(c.hidden_size, 4096);
    assert_int_equal(c.intermediate_size, 14336);
    assert_int_equal(c.num_hidden_layers, 32);
    assert_int_equal(c.num_attention_heads, 32);
    assert_int_equal(c.num_key_value_heads, 8);
    assert_int_equal(c.head_dim, 128);
    assert_int_equal(c.vocab_size, 128256);
    assert_int_equal(c.max_position_embeddings, 131072);
    assert_true(c.rms_norm_eps == 1e-5);
    assert_true(c.rope_theta == 500000.0);
    assert_int_equal(c.rope_scaling.type, HF_ROPE_LLAMA3);
    assert_string_equal(hf_rope_scaling_name(c.rope_scaling.type), "llama3");
    assert_true(c.rope_scaling.factor == 8.0);
    assert_true(c.rope_scaling.low_freq_factor == 1.0);
    assert_true(c.rope_scaling.high_freq_factor == 4.0);
    assert_int_equal(c.rope_scaling.original_max_position_embeddings, 8192);
    assert_false(c.tie_word_embeddings);
    assert_false(c.attention_bias);
    assert_string_equal(c.dtype, "bfloat16");
    assert_int_equal(c.bos_token_id, 128000);
    assert_int_equal(c.n_eos, 3);
    assert_int_equal(c.eos_token_ids[2], 128009);
}

static void test_qwen25(void **state)
{
    (void)state;
    const char *json =
        "{\"architectures\":[\"Qwen2ForCausalLM\"],\"attention_dropout\":0.0,\"bos_token_id\":151643,"
        "\"eos_token_id\":151643,\"hidden_act\":\"silu\",\"hidden_size\":896,\"initializer_range\":0.02,"
        "\"intermediate_size\":4864,\"max_position_embeddings\":32768,\"max_window_layers\":24,"
        "\"model_type\":\"qwen2\",\"num_attention_heads\":14,\"num_hidden_layers\":24,\"num_key_value_heads\":2,"
        "\"rms_norm_eps\":1e-06,\"rope_scaling\":null,\"rope_theta\":1000000.0,\"sliding_window\":32768,"
        "\"tie_word_embeddings\":true,\"torch_dtype\":\"bfloat16\",\"use_cache\":true,"
        "\"use_sliding_window\":false,\"vocab_size\":151936}";
    hf_config c;
    ai_err err;
    if (parse(&c, json, &err) != AI_OK) fail_msg("%s", err.msg);
    assert_string_equal(c.model_type, "qwen2");
    assert_int_equal(c.head_dim, 64);
    assert_int_equal(c.num_key_value_heads, 2);
    assert_true(c.tie_word_embeddings);
    assert_int_equal(c.rope_scaling.type, HF_ROPE_NONE);
    assert_true(c.rope_theta == 1e6);
    assert_int_equal(c.n_eos, 1);
    assert_int_equal(c.eos_token_ids[0], 151643);
}

static void test_v5_and_defaults(void **state)
{
    (void)state;
    /* transformers 5: rope_parameters, dtype; explicit head_dim != hidden/heads (qwen3 style) */
    const char *v5 =
        "{\"model_type\":\"qwen3\",\"hidden_size\":2048,\"intermediate_size\":6144,\"num_hidden_layers\":28,"
        "\"num_attention_heads\":16,\"num_key_value_heads\":8,\"head_dim\":128,\"vocab_size\":151936,"
        "\"rope_parameters\":{\"rope_theta\":1000000.0,\"rope_type\":\"linear\",\"factor\":2.0},"
        "\"dtype\":\"float16\",\"attention_bias\":true,\"bos_token_id\":null}";
    hf_config c;
    ai_err err;
    if (parse(&c, v5, &err) != AI_OK) fail_msg("%s", err.msg);
    assert_int_equal(c.head_dim, 128);
    assert_true(c.rope_theta == 1e6);
    assert_int_equal(c.rope_scaling.type, HF_ROPE_LINEAR);
    assert_true(c.rope_scaling.factor == 2.0);
    assert_string_equal(c.dtype, "float16");
    assert_true(c.attention_bias);
    assert_int_equal(c.bos_token_id, -1);
    assert_string_equal(c.architecture, "");

    /* defaults: LlamaConfig's */
    const char *min = "{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":128,"
                      "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"vocab_size\":100,"
                      "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000.0}}";
    if (parse(&c, min, &err) != AI_OK) fail_msg("%s", err.msg);
    assert_int_equal(c.num_key_value_heads, 4);
    assert_int_equal(c.head_dim, 16);
    assert_int_equal(c.max_position_embeddings, 2048);
    assert_true(c.rms_norm_eps == 1e-6);
    assert_true(c.rope_theta == 10000.0);
    assert_int_equal(c.rope_scaling.type, HF_ROPE_NONE);
    assert_false(c.tie_word_embeddings);
    assert_int_equal(c.n_eos, 0);
    assert_string_equal(c.dtype, "");
}

static void expect_fail(const char *json, ai_status code, const char *want)
{
    hf_config c;
    ai_err err = {0};
    ai_status rc = parse(&c, json, &err);
    if (rc != code || !strstr(err.msg, want) || strncmp(err.msg, "config.json: ", 13))
        fail_msg("%s: want %d '%s', got %d '%s'", json, (int)code, want, (int)rc, err.msg);
}

#define BASE "\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,\"vocab_size\":100"

static void test_errors(void **state)
{
    (void)state;
    expect_fail("{\"model_type\":\"llama\"", AI_ERR_FORMAT, "not valid JSON");
    expect_fail("[1]", AI_ERR_FORMAT, "not a JSON object");
    expect_fail("{" BASE "}", AI_ERR_FORMAT, "missing required field 'num_attention_heads'");
    expect_fail("{\"hidden_size\":64}", AI_ERR_FORMAT, "missing required field 'model_type'");
    expect_fail("{" BASE ",\"num_attention_heads\":\"4\"}", AI_ERR_FORMAT, "field 'num_attention_heads' must be an integer");
    expect_fail("{" BASE ",\"num_attention_heads\":4.5}", AI_ERR_FORMAT, "must be an integer");
    expect_fail("{" BASE ",\"num_attention_heads\":0}", AI_ERR_FORMAT, "'num_attention_heads' must be > 0");
    expect_fail("{" BASE ",\"num_attention_heads\":4,\"num_key_value_heads\":3}", AI_ERR_FORMAT,
                "num_key_value_heads 3 must be > 0 and divide num_attention_heads 4");
    expect_fail("{" BASE ",\"num_attention_heads\":6}", AI_ERR_FORMAT, "hidden_size 64 is not a multiple");
    expect_fail("{" BASE ",\"num_attention_heads\":4,\"rms_norm_eps\":\"x\"}", AI_ERR_FORMAT, "'rms_norm_eps' must be a number");
    expect_fail("{" BASE ",\"num_attention_heads\":4,\"rms_norm_eps\":0}", AI_ERR_FORMAT, "'rms_norm_eps' must be > 0");
    expect_fail("{" BASE ",\"num_attention_heads\":4,\"tie_word_embeddings\":1}", AI_ERR_FORMAT, "true or false");
    expect_fail("{" BASE ",\"num_attention_heads\":4,\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4}}",
                AI_ERR_UNSUPPORTED, "rope_scaling type 'yarn' is not supported");
    expect_fail("{" BASE ",\"num_attention_heads\":4,\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,"
                "\"high_freq_factor\":4,\"original_max_position_embeddings\":8192}}",
                AI_ERR_FORMAT, "rope_scaling: missing required field 'low_freq_factor'");
    expect_fail("{" BASE ",\"num_attention_heads\":4,\"rope_scaling\":{\"rope_type\":\"linear\"}}",
                AI_ERR_FORMAT, "missing required field 'factor'");
    expect_fail("{" BASE ",\"num_attention_heads\":4,\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":-1}}",
                AI_ERR_FORMAT, "rope_scaling.factor must be > 0");
    expect_fail("{" BASE ",\"num_attention_heads\":4,\"eos_token_id\":[1,2,3,4,5,6,7,8,9]}", AI_ERR_UNSUPPORTED,
                "more than 8 ids");
    expect_fail("{" BASE ",\"num_attention_heads\":4,\"eos_token_id\":[1,\"x\"]}", AI_ERR_FORMAT, "eos_token_id[1]");
    expect_fail("{" BASE ",\"num_attention_heads\":4,\"architectures\":\"Llama\"}", AI_ERR_FORMAT, "'architectures'");
    expect_fail("{" BASE ",\"num_attention_heads\":4,\"torch_dtype\":\"a-very-long-dtype-name\"}", AI_ERR_FORMAT,
                "'torch_dtype' is longer than 15 bytes");
}

static void test_load(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_hfc.XXXXXX", file[64];
    assert_non_null(mkdtemp(dir));
    snprintf(file, sizeof file, "%s/config.json", dir);
    FILE *fp = fopen(file, "w");
    fputs(llama31_8b, fp);
    fclose(fp);
    hf_config c;
    ai_err err;
    assert_int_equal(hf_config_load(&c, dir, &err), AI_OK);
    assert_int_equal(c.vocab_size, 128256);
    assert_int_equal(hf_config_load(&c, file, &err), AI_OK);
    unlink(file);
    assert_int_equal(hf_config_load(&c, dir, &err), AI_ERR_IO);
    assert_non_null(strstr(err.msg, "config.json"));
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama31),
        cmocka_unit_test(test_qwen25),
        cmocka_unit_test(test_v5_and_defaults),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
