/* config.c - the model config from GGUF metadata (`general.architecture` and its `<arch>.*` keys).
 *
 * Every number is range-checked here, once, so the forward can trust the config: a corrupt or
 * hostile file gives an error naming the key, never a huge allocation or a division by zero.
 * RoPE kind by architecture follows llama.cpp's mapping for GGUF files: llama and mistral tensors
 * were permuted by the converter so that adjacent pairs rotate ("normal"); qwen2/qwen3 keep HF's
 * half-split layout ("neox").
 */
#include <stdio.h>
#include <string.h>

#include "aiinfra/model.h"

#define MAX_DIM (1 << 16)       /* embedding / head dims */
#define MAX_FF (1 << 20)
#define MAX_LAYERS 4096
#define MAX_HEADS 4096
#define MAX_CTX (1 << 24)

static const char *const arch_names[MODEL_ARCH_COUNT] = {"llama", "mistral", "qwen2", "qwen3"};

const char *model_arch_name(model_arch a)
{
    return (unsigned)a < MODEL_ARCH_COUNT ? arch_names[a] : "?";
}

static bool str_eq(gguf_str s, const char *c) { return s.len == strlen(c) && memcmp(s.ptr, c, s.len) == 0; }

/* Reads <arch>.<key> as a u32 in [lo, hi]; `required` false keeps *out when absent. */
static ai_status get_i32(const gguf *g, const char *arch, const char *key, bool required, int64_t lo,
                         int64_t hi, int32_t *out, const char *name, ai_err *err)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    int64_t v;
    if (gguf_find_key(g, full) < 0) {
        if (required) return ai_err_set(err, AI_ERR_FORMAT, "%s: missing key %s", name, full);
        return AI_OK;
    }
    if (!gguf_get_i64(g, full, &v)) return ai_err_set(err, AI_ERR_FORMAT, "%s: key %s is not an integer", name, full);
    if (v < lo || v > hi)
        return ai_err_set(err, AI_ERR_FORMAT, "%s: key %s = %lld is outside [%lld, %lld]", name, full,
                          (long long)v, (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return AI_OK;
}

static ai_status get_f32(const gguf *g, const char *arch, const char *key, bool required, float lo, float hi,
                         float *out, const char *name, ai_err *err)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    float v;
    if (gguf_find_key(g, full) < 0) {
        if (required) return ai_err_set(err, AI_ERR_FORMAT, "%s: missing key %s", name, full);
        return AI_OK;
    }
    if (!gguf_get_f32(g, full, &v)) return ai_err_set(err, AI_ERR_FORMAT, "%s: key %s is not a float", name, full);
    if (!(v >= lo && v <= hi)) /* also rejects NaN */
        return ai_err_set(err, AI_ERR_FORMAT, "%s: key %s = %g is outside [%g, %g]", name, full, v, lo, hi);
    *out = v;
    return AI_OK;
}

ai_status model_config_from_gguf(model_config *cfg, const gguf *g, const char *name, ai_err *err)
{
    memset(cfg, 0, sizeof *cfg);
    gguf_str a;
    if (!gguf_get_str(g, "general.architecture", &a))
        return ai_err_set(err, AI_ERR_FORMAT, "%s: missing string key general.architecture", name);
    int arch = -1;
    for (int i = 0; i < MODEL_ARCH_COUNT; i++)
        if (str_eq(a, arch_names[i])) arch = i;
    if (arch < 0)
        return ai_err_set(err, AI_ERR_UNSUPPORTED,
                          "%s: general.architecture '%.*s' is not supported (llama, mistral, qwen2, qwen3)", name,
                          (int)(a.len > 64 ? 64 : a.len), a.ptr);
    cfg->arch = (model_arch)arch;
    const char *an = arch_names[arch];
    ai_status st;
#define I32(key, req, lo, hi, field) \
    do { if ((st = get_i32(g, an, key, req, lo, hi, &cfg->field, name, err)) != AI_OK) return st; } while (0)
#define F32(key, req, lo, hi, field) \
    do { if ((st = get_f32(g, an, key, req, lo, hi, &cfg->field, name, err)) != AI_OK) return st; } while (0)
    I32("context_length", true, 1, MAX_CTX, n_ctx_train);
    I32("embedding_length", true, 1, MAX_DIM, dim);
    I32("block_count", true, 1, MAX_LAYERS, n_layer);
    I32("feed_forward_length", true, 1, MAX_FF, n_ff);
    I32("attention.head_count", true, 1, MAX_HEADS, n_head);
    cfg->n_head_kv = cfg->n_head;
    I32("attention.head_count_kv", false, 1, MAX_HEADS, n_head_kv);
    F32("attention.layer_norm_rms_epsilon", true, 0.0f, 1.0f, norm_eps);
    cfg->rope_base = 10000.0f;
    F32("rope.freq_base", false, 1.0f, 1e12f, rope_base);
    cfg->head_dim = 0;
    I32("attention.key_length", false, 1, MAX_DIM, head_dim);
    if (cfg->head_dim == 0) {
        if (cfg->dim % cfg->n_head != 0)
            return ai_err_set(err, AI_ERR_FORMAT, "%s: %s.embedding_length %d is not a multiple of head_count %d "
                              "and attention.key_length is absent", name, an, cfg->dim, cfg->n_head);
        cfg->head_dim = cfg->dim / cfg->n_head;
    }
    cfg->head_dim_v = cfg->head_dim;
    I32("attention.value_length", false, 1, MAX_DIM, head_dim_v);
    cfg->rope_dim = cfg->head_dim;
    I32("rope.dimension_count", false, 2, MAX_DIM, rope_dim);
    cfg->n_vocab = 0;
    I32("vocab_size", false, 1, 1 << 24, n_vocab);
#undef I32

    if (cfg->n_head % cfg->n_head_kv != 0)
        return ai_err_set(err, AI_ERR_FORMAT, "%s: %s.attention.head_count %d is not a multiple of head_count_kv %d",
                          name, an, cfg->n_head, cfg->n_head_kv);
    if (cfg->head_dim < 2 || cfg->head_dim % 2 != 0)
        return ai_err_set(err, AI_ERR_FORMAT, "%s: head dimension %d must be even (%s.attention.key_length or "
                          "embedding_length / head_count)", name, cfg->head_dim, an);
    if (cfg->rope_dim % 2 != 0 || cfg->rope_dim > cfg->head_dim)
        return ai_err_set(err, AI_ERR_FORMAT, "%s: %s.rope.dimension_count %d must be even and <= head dim %d", name,
                          an, cfg->rope_dim, cfg->head_dim);
    cfg->rope_kind = (cfg->arch == MODEL_ARCH_QWEN2 || cfg->arch == MODEL_ARCH_QWEN3) ? MODEL_ROPE_NEOX
                                                                                       : MODEL_ROPE_NORM;

    /* RoPE scaling: llama.cpp writes rope.scaling.type (none|linear|yarn|longrope) + factor; llama3
     * scaling arrives as the rope_freqs.weight tensor (bound in weights.c). */
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", an);
    gguf_str stype;
    cfg->rope_factor = 1.0f;
    if (gguf_get_str(g, key, &stype) && !str_eq(stype, "none")) {
        if (str_eq(stype, "linear")) cfg->rope_scaling = MODEL_ROPE_SCALING_LINEAR;
        else if (str_eq(stype, "llama3")) cfg->rope_scaling = MODEL_ROPE_SCALING_LLAMA3;
        else
            return ai_err_set(err, AI_ERR_UNSUPPORTED, "%s: %s = '%.*s' is not supported (none, linear, llama3)", name,
                              key, (int)(stype.len > 32 ? 32 : stype.len), stype.ptr);
        if ((st = get_f32(g, an, "rope.scaling.factor", true, 1e-3f, 1e6f, &cfg->rope_factor, name, err)) != AI_OK)
            return st;
    } else {
        float lin = 0.0f;
        if ((st = get_f32(g, an, "rope.scale_linear", false, 1e-3f, 1e6f, &lin, name, err)) != AI_OK) return st;
        if (lin > 0.0f && lin != 1.0f) {
            cfg->rope_scaling = MODEL_ROPE_SCALING_LINEAR;
            cfg->rope_factor = lin;
        }
    }
    cfg->rope_low_freq_factor = 1.0f;
    cfg->rope_high_freq_factor = 4.0f;
    cfg->rope_orig_ctx = 8192;
    if ((st = get_i32(g, an, "rope.scaling.original_context_length", false, 1, MAX_CTX, &cfg->rope_orig_ctx, name,
                      err)) != AI_OK)
        return st;
    return AI_OK;
}
