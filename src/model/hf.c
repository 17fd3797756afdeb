/* hf.c - the two tensor sources behind model_src_*: GGUF (llama.cpp names) and Hugging Face folders
 * (config.json + safetensors, single or sharded), plus opening an HF folder as a model.
 *
 * HF names map onto llama.cpp's one to one:
 *   token_embd <- model.embed_tokens      output_norm <- model.norm        output <- lm_head
 *   blk.N.attn_norm <- model.layers.N.input_layernorm     blk.N.ffn_norm <- ...post_attention_layernorm
 *   blk.N.attn_{q,k,v}[.bias] <- ...self_attn.{q,k,v}_proj    blk.N.attn_output <- ...self_attn.o_proj
 *   blk.N.attn_{q,k}_norm <- ...self_attn.{q,k}_norm          blk.N.ffn_{gate,up,down} <- ...mlp.*_proj
 * HF keeps Wq/Wk unpermuted, so every HF architecture rotates halves (neox RoPE). Safetensors shapes
 * are row-major [out, in]; reversed they are GGUF's [in, out].
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aiinfra/hf_config.h"
#include "aiinfra/safetensors.h"
#include "aiinfra/tokenizer.h"
#include "model/model_internal.h"

static const struct { const char *gguf, *hf; } layer_names[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},   {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.weight", "self_attn.k_proj.weight"},   {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.weight", "self_attn.v_proj.weight"},   {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"}, {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};

/* llama.cpp name -> HF name; false when HF has no such tensor (rope_freqs). */
static bool hf_name(const char *g, char *out, size_t cap)
{
    if (!strcmp(g, "token_embd.weight")) return snprintf(out, cap, "model.embed_tokens.weight") > 0;
    if (!strcmp(g, "output_norm.weight")) return snprintf(out, cap, "model.norm.weight") > 0;
    if (!strcmp(g, "output.weight")) return snprintf(out, cap, "lm_head.weight") > 0;
    int layer, off = 0;
    if (sscanf(g, "blk.%d.%n", &layer, &off) == 1 && off > 0)
        for (size_t i = 0; i < sizeof layer_names / sizeof layer_names[0]; i++)
            if (!strcmp(g + off, layer_names[i].gguf))
                return snprintf(out, cap, "model.layers.%d.%s", layer, layer_names[i].hf) > 0;
    return false;
}

static void from_st(const safetensors_tensor *t, model_src_tensor *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", t->name);
    out->type = t->dtype == ST_F32 ? DTYPE_F32 : t->dtype == ST_F16 ? DTYPE_F16 : t->dtype == ST_BF16 ? DTYPE_BF16
                                                                                               : DTYPE_COUNT;
    for (int i = 0; i < 4; i++) out->ne[i] = 1;
    uint32_t nd = t->n_dims;
    for (uint32_t i = 0; i < nd; i++) {
        uint64_t v = t->shape[nd - 1 - i];
        if (i < 4) out->ne[i] = v;
        else out->ne[3] *= v; /* > 4 dims: folded so the shape check fails */
    }
    out->nbytes = t->nbytes;
    out->data = t->data;
}

static void from_gguf(const gguf_tensor *t, model_src_tensor *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%.*s", (int)(t->name.len > 150 ? 150 : t->name.len), t->name.ptr);
    ai_err e;
    if (dtype_from_ggml(t->ggml_type, &out->type, &e) != AI_OK) out->type = DTYPE_COUNT;
    memcpy(out->ne, t->ne, sizeof out->ne);
    out->nbytes = t->nbytes;
    out->data = t->data;
}

ai_status model_src_find(const model *m, const char *gname, model_src_tensor *out, ai_err *err)
{
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", gname);
    if (m->g) {
        const gguf_tensor *t = gguf_find_tensor(m->g, gname);
        if (!t) return AI_OK;
        from_gguf(t, out);
        if (out->type == DTYPE_COUNT)
            return ai_err_set(err, AI_ERR_UNSUPPORTED, "%s: tensor %s has ggml type %u (%s), not supported", m->path,
                              out->name, t->ggml_type,
                              gguf_ggml_type_name(t->ggml_type) ? gguf_ggml_type_name(t->ggml_type) : "unknown");
        return AI_OK;
    }
    char hn[160];
    if (!hf_name(gname, hn, sizeof hn)) return AI_OK;
    snprintf(out->name, sizeof out->name, "%s", hn);
    const safetensors_tensor *t = safetensors_model_find(m->st, hn);
    if (!t) return AI_OK;
    from_st(t, out);
    if (out->type == DTYPE_COUNT)
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s (expected F32, F16 or BF16)", m->path,
                          hn, safetensors_dtype_name(t->dtype));
    return AI_OK;
}

uint64_t model_src_n_tensors(const model *m)
{
    return m->g ? gguf_n_tensors(m->g) : safetensors_model_n_tensors(m->st);
}

bool model_src_at(const model *m, uint64_t i, model_src_tensor *out)
{
    if (m->g) {
        const gguf_tensor *t = gguf_tensor_at(m->g, i);
        if (!t) return false;
        from_gguf(t, out);
        return true;
    }
    for (size_t s = 0; s < safetensors_model_n_shards(m->st); s++) {
        const safetensors *sh = safetensors_model_shard(m->st, s);
        uint64_t n = safetensors_n_tensors(sh);
        if (i < n) {
            from_st(safetensors_tensor_at(sh, i), out);
            return true;
        }
        i -= n;
    }
    return false;
}

static ai_status config_from_hf(model_config *c, const hf_config *h, const char *path, ai_err *err)
{
    memset(c, 0, sizeof *c);
    static const struct { const char *type; model_arch arch; } archs[] = {
        {"llama", MODEL_ARCH_LLAMA}, {"mistral", MODEL_ARCH_MISTRAL}, {"qwen2", MODEL_ARCH_QWEN2},
        {"qwen3", MODEL_ARCH_QWEN3}};
    int a = -1;
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (!strcmp(h->model_type, archs[i].type)) a = (int)i;
    if (a < 0)
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "%s: config.json model_type '%s' is not supported (llama, mistral, "
                          "qwen2, qwen3)", path, h->model_type);
    c->arch = archs[a].arch;
#define RANGE(field, v, lo, hi) \
    do { \
        if ((v) < (lo) || (v) > (hi)) \
            return ai_err_set(err, AI_ERR_FORMAT, "%s: config.json %s = %lld is outside [%lld, %lld]", path, field, \
                              (long long)(v), (long long)(lo), (long long)(hi)); \
    } while (0)
    RANGE("hidden_size", h->hidden_size, 1, 1 << 16);
    RANGE("intermediate_size", h->intermediate_size, 1, 1 << 20);
    RANGE("num_hidden_layers", h->num_hidden_layers, 1, 4096);
    RANGE("num_attention_heads", h->num_attention_heads, 1, 4096);
    RANGE("num_key_value_heads", h->num_key_value_heads, 1, 4096);
    RANGE("head_dim", h->head_dim, 2, 1 << 16);
    RANGE("vocab_size", h->vocab_size, 1, 1 << 24);
    RANGE("max_position_embeddings", h->max_position_embeddings, 1, 1 << 24);
#undef RANGE
    c->dim = (int32_t)h->hidden_size;
    c->n_ff = (int32_t)h->intermediate_size;
    c->n_layer = (int32_t)h->num_hidden_layers;
    c->n_head = (int32_t)h->num_attention_heads;
    c->n_head_kv = (int32_t)h->num_key_value_heads;
    c->head_dim = c->head_dim_v = c->rope_dim = (int32_t)h->head_dim;
    c->n_vocab = (int32_t)h->vocab_size;
    c->n_ctx_train = (int32_t)h->max_position_embeddings;
    c->norm_eps = (float)h->rms_norm_eps;
    c->rope_base = (float)h->rope_theta;
    c->rope_kind = MODEL_ROPE_NEOX;
    if (c->n_head % c->n_head_kv != 0)
        return ai_err_set(err, AI_ERR_FORMAT, "%s: config.json num_attention_heads %d is not a multiple of "
                          "num_key_value_heads %d", path, c->n_head, c->n_head_kv);
    if (c->head_dim % 2 != 0) return ai_err_set(err, AI_ERR_FORMAT, "%s: config.json head_dim %d is odd", path, c->head_dim);
    if (!(c->norm_eps >= 0.0f && c->norm_eps <= 1.0f) || !(c->rope_base >= 1.0f))
        return ai_err_set(err, AI_ERR_FORMAT, "%s: config.json rms_norm_eps or rope_theta out of range", path);
    c->rope_factor = 1.0f;
    c->rope_low_freq_factor = 1.0f;
    c->rope_high_freq_factor = 4.0f;
    c->rope_orig_ctx = 8192;
    if (h->rope_scaling.type != HF_ROPE_NONE) {
        if (!(h->rope_scaling.factor > 0.0 && h->rope_scaling.factor < 1e6))
            return ai_err_set(err, AI_ERR_FORMAT, "%s: config.json rope_scaling.factor out of range", path);
        c->rope_factor = (float)h->rope_scaling.factor;
        c->rope_scaling = h->rope_scaling.type == HF_ROPE_LINEAR ? MODEL_ROPE_SCALING_LINEAR : MODEL_ROPE_SCALING_LLAMA3;
        if (h->rope_scaling.type == HF_ROPE_LLAMA3) {
            c->rope_low_freq_factor = (float)h->rope_scaling.low_freq_factor;
            c->rope_high_freq_factor = (float)h->rope_scaling.high_freq_factor;
            c->rope_orig_ctx = (int32_t)h->rope_scaling.original_max_position_embeddings;
            if (!(c->rope_high_freq_factor > c->rope_low_freq_factor && c->rope_low_freq_factor > 0.0f) ||
                c->rope_orig_ctx < 1)
                return ai_err_set(err, AI_ERR_FORMAT, "%s: config.json rope_scaling llama3 factors out of range", path);
        }
    }
    return AI_OK;
}

ai_status model_open_hf(model **out, const char *path, ai_err *err)
{
    *out = NULL;
    hf_config h;
    ai_status st = hf_config_load(&h, path, err);
    if (st != AI_OK) return st;
    model *m = calloc(1, sizeof *m);
    if (!m) return ai_err_set(err, AI_ERR_NOMEM, "%s: out of memory", path);
    m->path = strdup(path);
    if (!m->path) { st = ai_err_set(err, AI_ERR_NOMEM, "%s: out of memory", path); goto fail; }
    if ((st = config_from_hf(&m->cfg, &h, path, err)) != AI_OK) goto fail;
    if ((st = safetensors_model_open(&m->st, path, err)) != AI_OK) goto fail;
    /* one arena for the f16/bf16 vectors (norms, biases) converted to f32 */
    uint64_t n = safetensors_model_n_tensors(m->st), vec = 0;
    for (uint64_t i = 0; i < n; i++) {
        model_src_tensor t;
        if (model_src_at(m, i, &t) && t.ne[1] == 1 && t.ne[2] == 1 && t.ne[3] == 1 && t.ne[0] <= (1u << 24) &&
            (t.type == DTYPE_F16 || t.type == DTYPE_BF16))
            vec += t.ne[0];
    }
    m->vec_cap = (size_t)vec;
    if (vec && !(m->vec_arena = malloc((size_t)vec * sizeof(float)))) {
        st = ai_err_set(err, AI_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    if ((st = model_bind(m, path, err)) != AI_OK) goto fail;
    *out = m;
    return AI_OK;
fail:
    model_close(m);
    return st;
}

ai_status model_load_tokenizer(const model *m, tokenizer **out, ai_err *err)
{
    if (m->g) return tokenizer_from_gguf(out, m->g, err);
    return tokenizer_load(out, m->path, err);
}
