/* presets.c - shapes of well-known models, for synthetic (random-weight) runs and benchmarks.
 *
 * Numbers are the models' published config.json values. Random weights measure speed, never accuracy:
 * a step moves the same bytes and does the same FLOPs whatever the values are.
 */
#include <string.h>

#include "aiinfra/runner.h"

const char *const runner_preset_names[] = {"llama3-8b", "llama-1b", "qwen2-7b", "smollm2-135m", NULL};

static model_config llama3(int32_t dim, int32_t n_layer, int32_t n_ff, int32_t n_head, float factor, bool tied)
{
    return (model_config){.arch = MODEL_ARCH_LLAMA, .n_vocab = 128256, .n_ctx_train = 131072, .dim = dim,
                          .n_layer = n_layer, .n_ff = n_ff, .n_head = n_head, .n_head_kv = 8,
                          .head_dim = dim / n_head, .head_dim_v = dim / n_head, .rope_dim = dim / n_head,
                          .norm_eps = 1e-5f, .rope_base = 500000.0f, .rope_kind = MODEL_ROPE_NORM,
                          .rope_scaling = MODEL_ROPE_SCALING_LLAMA3, .rope_factor = factor,
                          .rope_low_freq_factor = 1.0f, .rope_high_freq_factor = 4.0f, .rope_orig_ctx = 8192,
                          .tied_output = tied};
}

ai_status model_config_preset(const char *name, model_config *out, ai_err *err)
{
    if (!strcmp(name, "llama3-8b")) {
        *out = llama3(4096, 32, 14336, 32, 8.0f, false);
    } else if (!strcmp(name, "llama-1b")) { /* Llama-3.2-1B */
        *out = llama3(2048, 16, 8192, 32, 32.0f, true);
    } else if (!strcmp(name, "qwen2-7b")) {
        *out = (model_config){.arch = MODEL_ARCH_QWEN2, .n_vocab = 152064, .n_ctx_train = 32768, .dim = 3584,
                              .n_layer = 28, .n_ff = 18944, .n_head = 28, .n_head_kv = 4, .head_dim = 128,
                              .head_dim_v = 128, .rope_dim = 128, .norm_eps = 1e-6f, .rope_base = 1e6f,
                              .rope_kind = MODEL_ROPE_NEOX};
    } else if (!strcmp(name, "smollm2-135m")) {
        *out = (model_config){.arch = MODEL_ARCH_LLAMA, .n_vocab = 49152, .n_ctx_train = 8192, .dim = 576,
                              .n_layer = 30, .n_ff = 1536, .n_head = 9, .n_head_kv = 3, .head_dim = 64,
                              .head_dim_v = 64, .rope_dim = 64, .norm_eps = 1e-5f, .rope_base = 100000.0f,
                              .rope_kind = MODEL_ROPE_NORM, .tied_output = true};
    } else {
        return ai_err_set(err, AI_ERR_INVALID,
                          "unknown model preset '%s' (llama3-8b, llama-1b, qwen2-7b, smollm2-135m)", name);
    }
    return AI_OK;
}
