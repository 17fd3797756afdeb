/* weights.c - binds a Llama-family model's weights to the mmapped GGUF tensors, without copying.
 *
 * Each tensor is looked up by llama.cpp's name (token_embd, blk.N.attn_q, ...), its dtype mapped,
 * and its shape compared with what the config implies, so that the forward never reads past a
 * tensor: a mismatch names the tensor, the expected and the found shape. Matrices must be in a dtype
 * cpu_matmul multiplies (f32, f16, bf16, q8_0, q4_0, q4_1); norms and biases must be f32, which is
 * how llama.cpp's converter always writes 1-D tensors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aiinfra/cpu_kernels.h"
#include "aiinfra/model.h"

enum { REQUIRED = 0, OPTIONAL = 1 };

/* Binds tensor `tname`: a matrix (n_out, n_in) when n_out > 0, else a vector of n_in f32. */
static ai_status bind(const gguf *g, const char *name, const char *tname, int64_t n_out, int64_t n_in, int optional,
                      model_weight *w, ai_err *err)
{
    memset(w, 0, sizeof *w);
    const gguf_tensor *t = gguf_find_tensor(g, tname);
    if (!t) {
        if (optional == OPTIONAL) return AI_OK;
        return ai_err_set(err, AI_ERR_FORMAT, "%s: missing tensor %s", name, tname);
    }
    dtype dt;
    ai_err e2;
    if (dtype_from_ggml(t->ggml_type, &dt, &e2) != AI_OK)
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "%s: tensor %s: %s", name, tname, e2.msg);
    bool matrix = n_out > 0;
    uint64_t want1 = matrix ? (uint64_t)n_out : 1;
    if (t->ne[0] != (uint64_t)n_in || t->ne[1] != want1 || t->ne[2] != 1 || t->ne[3] != 1)
        return ai_err_set(err, AI_ERR_FORMAT, "%s: tensor %s has shape [%llu, %llu, %llu, %llu], expected [%lld, %llu]",
                          name, tname, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                          (unsigned long long)t->ne[2], (unsigned long long)t->ne[3], (long long)n_in,
                          (unsigned long long)want1);
    if (matrix && cpu_act_dtype(dt) == DTYPE_COUNT)
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s, which has no CPU matmul kernel yet",
                          name, tname, dtype_name(dt));
    if (!matrix && dt != DTYPE_F32)
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s, expected f32", name, tname,
                          dtype_name(dt));
    size_t row;
    if (dtype_row_bytes(dt, n_in, &row, &e2) != AI_OK)
        return ai_err_set(err, AI_ERR_FORMAT, "%s: tensor %s: %s", name, tname, e2.msg);
    if ((uint64_t)row * want1 != t->nbytes)
        return ai_err_set(err, AI_ERR_FORMAT, "%s: tensor %s holds %llu bytes, its shape needs %llu", name, tname,
                          (unsigned long long)t->nbytes, (unsigned long long)row * want1);
    w->type = dt;
    w->data = t->data;
    w->n_out = (int64_t)want1;
    w->n_in = n_in;
    w->nbytes = (size_t)t->nbytes;
    return AI_OK;
}

static ai_status bind_layer(const gguf *g, const char *name, const model_config *c, int il, model_layer *L,
                            ai_err *err)
{
    char tn[96];
    ai_status st;
    int64_t q_out = (int64_t)c->n_head * c->head_dim, k_out = (int64_t)c->n_head_kv * c->head_dim;
    int64_t v_out = (int64_t)c->n_head_kv * c->head_dim_v, o_in = (int64_t)c->n_head * c->head_dim_v;
#define B(field, suffix, out, in, opt) \
    do { \
        snprintf(tn, sizeof tn, "blk.%d.%s", il, suffix); \
        if ((st = bind(g, name, tn, out, in, opt, &L->field, err)) != AI_OK) return st; \
    } while (0)
    B(attn_norm, "attn_norm.weight", 0, c->dim, REQUIRED);
    B(wq, "attn_q.weight", q_out, c->dim, REQUIRED);
    B(wk, "attn_k.weight", k_out, c->dim, REQUIRED);
    B(wv, "attn_v.weight", v_out, c->dim, REQUIRED);
    B(wo, "attn_output.weight", c->dim, o_in, REQUIRED);
    int bias = c->arch == MODEL_ARCH_QWEN2 ? REQUIRED : OPTIONAL;
    B(bq, "attn_q.bias", 0, q_out, bias);
    B(bk, "attn_k.bias", 0, k_out, bias);
    B(bv, "attn_v.bias", 0, v_out, bias);
    int qk = c->arch == MODEL_ARCH_QWEN3 ? REQUIRED : OPTIONAL;
    B(q_norm, "attn_q_norm.weight", 0, c->head_dim, qk);
    B(k_norm, "attn_k_norm.weight", 0, c->head_dim, qk);
    B(ffn_norm, "ffn_norm.weight", 0, c->dim, REQUIRED);
    B(w_gate, "ffn_gate.weight", c->n_ff, c->dim, REQUIRED);
    B(w_up, "ffn_up.weight", c->n_ff, c->dim, REQUIRED);
    B(w_down, "ffn_down.weight", c->dim, c->n_ff, REQUIRED);
#undef B
    return AI_OK;
}

ai_status model_from_gguf(model **out, gguf *g, const char *name, ai_err *err)
{
    *out = NULL;
    model *m = calloc(1, sizeof *m);
    if (!m) {
        gguf_close(g);
        return ai_err_set(err, AI_ERR_NOMEM, "%s: out of memory", name);
    }
    m->g = g;
    m->path = strdup(name);
    ai_status st;
    model_config *c = &m->cfg;
    if (!m->path) { st = ai_err_set(err, AI_ERR_NOMEM, "%s: out of memory", name); goto fail; }
    if ((st = model_config_from_gguf(c, g, name, err)) != AI_OK) goto fail;

    const gguf_tensor *te = gguf_find_tensor(g, "token_embd.weight");
    if (!te) { st = ai_err_set(err, AI_ERR_FORMAT, "%s: missing tensor token_embd.weight", name); goto fail; }
    if (te->ne[1] < 1 || te->ne[1] > (1u << 24)) {
        st = ai_err_set(err, AI_ERR_FORMAT, "%s: token_embd.weight has %llu rows (vocabulary size)", name,
                        (unsigned long long)te->ne[1]);
        goto fail;
    }
    if (c->n_vocab != 0 && (uint64_t)c->n_vocab != te->ne[1]) {
        st = ai_err_set(err, AI_ERR_FORMAT, "%s: %s.vocab_size %d differs from token_embd.weight's %llu rows", name,
                        model_arch_name(c->arch), c->n_vocab, (unsigned long long)te->ne[1]);
        goto fail;
    }
    c->n_vocab = (int32_t)te->ne[1];
    if ((st = bind(g, name, "token_embd.weight", c->n_vocab, c->dim, REQUIRED, &m->tok_embd, err)) != AI_OK) goto fail;
    if (!dtype_get(m->tok_embd.type)->has_convert) {
        st = ai_err_set(err, AI_ERR_UNSUPPORTED, "%s: token_embd.weight dtype %s cannot be dequantized yet", name,
                        dtype_name(m->tok_embd.type));
        goto fail;
    }
    if ((st = bind(g, name, "output_norm.weight", 0, c->dim, REQUIRED, &m->output_norm, err)) != AI_OK) goto fail;
    if ((st = bind(g, name, "output.weight", c->n_vocab, c->dim, OPTIONAL, &m->output, err)) != AI_OK) goto fail;
    if (!m->output.data) {
        c->tied_output = true;
        m->output = m->tok_embd;
    }
    if ((st = bind(g, name, "rope_freqs.weight", 0, c->rope_dim / 2, OPTIONAL, &m->rope_freqs, err)) != AI_OK)
        goto fail;
    if (m->rope_freqs.data) c->rope_scaling = MODEL_ROPE_SCALING_LLAMA3;

    m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
    if (!m->layers) { st = ai_err_set(err, AI_ERR_NOMEM, "%s: out of memory", name); goto fail; }
    for (int il = 0; il < c->n_layer; il++)
        if ((st = bind_layer(g, name, c, il, &m->layers[il], err)) != AI_OK) goto fail;
    *out = m;
    return AI_OK;
fail:
    model_close(m);
    return st;
}

ai_status model_open(model **out, const char *path, ai_err *err)
{
    *out = NULL;
    gguf *g;
    ai_status st = gguf_open(&g, path, err);
    if (st != AI_OK) return st;
    return model_from_gguf(out, g, path, err);
}

void model_close(model *m)
{
    if (!m) return;
    gguf_close(m->g);
    free(m->layers);
    free(m->path);
    free(m);
}

void model_stats_get(const model *m, model_stats *st)
{
    memset(st, 0, sizeof *st);
    uint64_t n = gguf_n_tensors(m->g);
    for (uint64_t i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_tensor_at(m->g, i);
        int64_t ne = (int64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        st->n_params += ne;
        st->weight_bytes += t->nbytes;
        dtype dt;
        ai_err e;
        if (dtype_from_ggml(t->ggml_type, &dt, &e) == AI_OK) {
            st->bytes_by_dtype[dt] += t->nbytes;
            st->n_by_dtype[dt]++;
        }
    }
    /* A decode step reads every layer matrix, the output matrix, and one embedding row. */
    const model_config *c = &m->cfg;
    uint64_t per = m->output.nbytes + m->output_norm.nbytes + m->tok_embd.nbytes / (uint64_t)c->n_vocab;
    for (int il = 0; il < c->n_layer; il++) {
        const model_layer *L = &m->layers[il];
        const model_weight *ws[] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->bq, &L->bk, &L->bv, &L->q_norm,
                                    &L->k_norm, &L->wo, &L->ffn_norm, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t j = 0; j < sizeof ws / sizeof ws[0]; j++) per += ws[j]->nbytes;
    }
    st->weight_bytes_per_token = per;
    st->kv_bytes_per_token = (uint64_t)c->n_layer * (uint64_t)c->n_head_kv *
                             (uint64_t)(c->head_dim + c->head_dim_v) * sizeof(float);
}

ai_status model_default_path(char *out, size_t cap, ai_err *err)
{
    const char *cache = getenv("AIINFRA_CACHE");
    const char *home = getenv("HOME");
    int n;
    if (cache && *cache) n = snprintf(out, cap, "%s/%s", cache, MODEL_DEFAULT_NAME);
    else n = snprintf(out, cap, "%s/.cache/aiinfra/%s", home ? home : ".", MODEL_DEFAULT_NAME);
    if (n < 0 || (size_t)n >= cap) return ai_err_set(err, AI_ERR_RANGE, "default model path is too long");
    FILE *f = fopen(out, "rb");
    if (!f)
        return ai_err_set(err, AI_ERR_IO, "default model %s is absent: run scripts/fetch_model.sh (or pass -m MODEL)",
                          out);
    fclose(f);
    return AI_OK;
}
