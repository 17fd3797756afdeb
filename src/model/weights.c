/* weights.c - binds a Llama-family model's weights to mmapped tensors, without copying: a GGUF file
 * or a Hugging Face folder (config.json + safetensors, single or sharded; see hf.c for the names).
 *
 * Each tensor is looked up by llama.cpp's name (token_embd, blk.N.attn_q, ...), its dtype mapped,
 * and its shape compared with what the config implies, so that the forward never reads past a
 * tensor: a mismatch names the tensor, the expected and the found shape. Matrices must be in a dtype
 * cpu_matmul multiplies (f32, f16, bf16, q8_0, q4_0, q4_1); norms and biases must be f32, which is
 * how llama.cpp's converter always writes 1-D tensors. HF folders store norms and biases in the model's
 * dtype (bf16/f16): those vectors, and only those, are converted once into one f32 arena.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "aiinfra/cpu_kernels.h"
#include "aiinfra/model.h"
#include "aiinfra/safetensors.h"
#include "model/model_internal.h"

enum { REQUIRED = 0, OPTIONAL = 1 };

/* Binds tensor `tname`: a matrix (n_out, n_in) when n_out > 0, else a vector of n_in f32. */
static ai_status bind(model *m, const char *name, const char *tname, int64_t n_out, int64_t n_in, int optional,
                      model_weight *w, ai_err *err)
{
    memset(w, 0, sizeof *w);
    model_src_tensor st;
    ai_status rs = model_src_find(m, tname, &st, err);
    if (rs != AI_OK) return rs;
    const model_src_tensor *t = &st;
    if (!t->data) {
        if (optional == OPTIONAL) return AI_OK;
        return ai_err_set(err, AI_ERR_FORMAT, "%s: missing tensor %s", name, t->name);
    }
    tname = t->name;
    dtype dt = t->type;
    ai_err e2;
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
    if (!matrix && dt != DTYPE_F32 && !(m->st && (dt == DTYPE_F16 || dt == DTYPE_BF16)))
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
    if (!matrix && dt != DTYPE_F32) { /* an HF vector in f16/bf16: convert into the arena */
        if (m->vec_used + (size_t)n_in > m->vec_cap)
            return ai_err_set(err, AI_ERR_FORMAT, "%s: tensor %s: more vector elements than counted", name, tname);
        float *dst = m->vec_arena + m->vec_used;
        if (dtype_dequantize_row(dt, t->data, dst, n_in, err) != AI_OK) return ai_err_prefix(err, "%s: %s", name, tname);
        m->vec_used += (size_t)n_in;
        w->type = DTYPE_F32;
        w->data = dst;
    }
    w->n_out = (int64_t)want1;
    w->n_in = n_in;
    w->nbytes = (size_t)t->nbytes;
    return AI_OK;
}

static ai_status bind_layer(model *m, const char *name, const model_config *c, int il, model_layer *L,
                            ai_err *err)
{
    char tn[96];
    ai_status st;
    int64_t q_out = (int64_t)c->n_head * c->head_dim, k_out = (int64_t)c->n_head_kv * c->head_dim;
    int64_t v_out = (int64_t)c->n_head_kv * c->head_dim_v, o_in = (int64_t)c->n_head * c->head_dim_v;
#define B(field, suffix, out, in, opt) \
    do { \
        snprintf(tn, sizeof tn, "blk.%d.%s", il, suffix); \
        if ((st = bind(m, name, tn, out, in, opt, &L->field, err)) != AI_OK) return st; \
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

/* Binds every weight of m (config already read). Frees nothing: the caller closes m on failure. */
ai_status model_bind(model *m, const char *name, ai_err *err)
{
    ai_status st;
    model_config *c = &m->cfg;
    model_src_tensor tes;
    if ((st = model_src_find(m, "token_embd.weight", &tes, err)) != AI_OK) return st;
    const model_src_tensor *te = &tes;
    if (!te->data) return ai_err_set(err, AI_ERR_FORMAT, "%s: missing tensor %s", name, te->name);
    if (te->ne[1] < 1 || te->ne[1] > (1u << 24)) {
        return ai_err_set(err, AI_ERR_FORMAT, "%s: %s has %llu rows (vocabulary size)", name, te->name,
                          (unsigned long long)te->ne[1]);
    }
    if (c->n_vocab != 0 && (uint64_t)c->n_vocab != te->ne[1])
        return ai_err_set(err, AI_ERR_FORMAT, "%s: vocab_size %d differs from %s's %llu rows", name, c->n_vocab,
                          te->name, (unsigned long long)te->ne[1]);
    c->n_vocab = (int32_t)te->ne[1];
    if ((st = bind(m, name, "token_embd.weight", c->n_vocab, c->dim, REQUIRED, &m->tok_embd, err)) != AI_OK) return st;
    if (!dtype_get(m->tok_embd.type)->has_convert)
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "%s: %s dtype %s cannot be dequantized yet", name, te->name,
                          dtype_name(m->tok_embd.type));
    if ((st = bind(m, name, "output_norm.weight", 0, c->dim, REQUIRED, &m->output_norm, err)) != AI_OK) return st;
    if ((st = bind(m, name, "output.weight", c->n_vocab, c->dim, OPTIONAL, &m->output, err)) != AI_OK) return st;
    if (!m->output.data) {
        c->tied_output = true;
        m->output = m->tok_embd;
    }
    if ((st = bind(m, name, "rope_freqs.weight", 0, c->rope_dim / 2, OPTIONAL, &m->rope_freqs, err)) != AI_OK)
        return st;
    if (m->rope_freqs.data) c->rope_scaling = MODEL_ROPE_SCALING_LLAMA3;

    m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
    if (!m->layers) return ai_err_set(err, AI_ERR_NOMEM, "%s: out of memory", name);
    for (int il = 0; il < c->n_layer; il++)
        if ((st = bind_layer(m, name, c, il, &m->layers[il], err)) != AI_OK) return st;
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
    if (!m->path) { st = ai_err_set(err, AI_ERR_NOMEM, "%s: out of memory", name); goto fail; }
    if ((st = model_config_from_gguf(&m->cfg, g, name, err)) != AI_OK) goto fail;
    if ((st = model_bind(m, name, err)) != AI_OK) goto fail;
    *out = m;
    return AI_OK;
fail:
    model_close(m);
    return st;
}

ai_status model_open(model **out, const char *path, ai_err *err)
{
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return model_open_hf(out, path, err);
    gguf *g;
    ai_status st = gguf_open(&g, path, err);
    if (st != AI_OK) return st;
    return model_from_gguf(out, g, path, err);
}

void model_close(model *m)
{
    if (!m) return;
    gguf_close(m->g);
    safetensors_model_close(m->st);
    free(m->vec_arena);
    free(m->layers);
    free(m->path);
    free(m);
}

void model_stats_get(const model *m, model_stats *st)
{
    memset(st, 0, sizeof *st);
    uint64_t n = model_src_n_tensors(m);
    for (uint64_t i = 0; i < n; i++) {
        model_src_tensor t;
        if (!model_src_at(m, i, &t)) continue;
        st->n_params += (int64_t)(t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]);
        st->weight_bytes += t.nbytes;
        if (t.type != DTYPE_COUNT) {
            st->bytes_by_dtype[t.type] += t.nbytes;
            st->n_by_dtype[t.type]++;
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
