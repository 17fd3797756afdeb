/* hf_config.h - a Hugging Face config.json for the llama family (llama, mistral, qwen2/3,
 * smollm), read into a plain struct.
 *
 * Defaults follow transformers' LlamaConfig when a field is absent: num_key_value_heads =
 * num_attention_heads, head_dim = hidden_size / num_attention_heads, max_position_embeddings
 * 2048, rms_norm_eps 1e-6, rope_theta 10000, tie_word_embeddings and attention_bias false.
 * Both the transformers 4 spelling (rope_theta + rope_scaling) and the 5 spelling
 * (rope_parameters {rope_theta, rope_type, ...}) are read. Missing required fields, wrong
 * types and inconsistent sizes give an error naming the field.
 */
#ifndef AIINFRA_HF_CONFIG_H
#define AIINFRA_HF_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "aiinfra/status.h"

#define HF_MAX_EOS 8

enum hf_rope_scaling {
    HF_ROPE_NONE,    /* absent, null, or rope_type "default" */
    HF_ROPE_LINEAR,  /* positions divided by factor */
    HF_ROPE_LLAMA3,  /* Llama 3.1 frequency-dependent scaling */
};

typedef struct hf_config {
    char architecture[64];      /* architectures[0]; "" when absent */
    char model_type[32];        /* "llama", "qwen2", ... */
    int64_t hidden_size, intermediate_size, num_hidden_layers;
    int64_t num_attention_heads, num_key_value_heads, head_dim;
    int64_t vocab_size, max_position_embeddings;
    double rms_norm_eps;
    double rope_theta;
    struct {
        enum hf_rope_scaling type;
        double factor;                  /* linear, llama3 */
        double low_freq_factor;         /* llama3 */
        double high_freq_factor;        /* llama3 */
        int64_t original_max_position_embeddings; /* llama3 */
    } rope_scaling;
    bool tie_word_embeddings;
    bool attention_bias;
    char dtype[16];             /* torch_dtype or dtype ("bfloat16"); "" when absent */
    int64_t bos_token_id;       /* -1 when absent or null */
    int64_t eos_token_ids[HF_MAX_EOS]; /* eos_token_id: an int or a list */
    int n_eos;
} hf_config;

/* Parses config.json text; `name` is used in error messages. */
ai_status hf_config_parse(hf_config *c, const char *json, size_t len, const char *name, ai_err *err);
/* Reads PATH (a config.json, or a folder holding one). */
ai_status hf_config_load(hf_config *c, const char *path, ai_err *err);

const char *hf_rope_scaling_name(enum hf_rope_scaling t);

#endif
