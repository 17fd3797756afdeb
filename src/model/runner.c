/* runner.c - set-up of a model on a backend: weights (uploaded or random), the KV pool, the arena.
 *
 * Two-pass allocation: every size is computed first (weights, KV pool, activations, metadata,
 * attention scratch), then each region is allocated once. The step (step.c) allocates nothing.
 * On a CPU backend the weights stay in the model's mmap (the backend has no weight_upload).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/runner_internal.h"

#define ALIGN 256

static size_t al(size_t n) { return (n + ALIGN - 1) & ~(size_t)(ALIGN - 1); }

size_t runner_meta_offset(const runner *r, int section)
{
    size_t T = (size_t)r->p.max_tokens, S = (size_t)r->p.max_seqs;
    size_t sizes[META_COUNT] = {T, T, T, S + 1, S + 1, S, S, S, S * (size_t)r->max_blocks,
                                S * (sizeof(backend_sample_params) / sizeof(int32_t))};
    size_t off = 0;
    for (int i = 0; i < section; i++) off += (sizes[i] + 15) & ~(size_t)15; /* 64-byte sections */
    return off;
}

/* Every weight of the runner, for loops: the runner weight, its model source(s) (NULL for random
 * weights; several for a stacked matrix, whose rows are the sources' rows one after the other), and
 * whether it is a norm vector (ones for random weights). */
typedef struct wref {
    backend_weight *w;
    const model_weight *src[3];
    int n_src;
    bool norm;
} wref;

static int list_weights(runner *r, wref *out)
{
    const model *m = r->m;
    const model_config *c = &r->cfg;
    int n = 0;
#define ADD(dst, msrc, isnorm) \
    if (!m || (msrc).data) out[n++] = (wref){&(dst), {m ? &(msrc) : NULL}, 1, isnorm}
    ADD(r->tok_embd, m->tok_embd, false);
    ADD(r->output_norm, m->output_norm, true);
    if (!c->tied_output) ADD(r->output, m->output, false);
    for (int il = 0; il < c->n_layer; il++) {
        runner_layer *L = &r->layers[il];
        const model_layer *ML = m ? &m->layers[il] : NULL;
        ADD(L->attn_norm, ML->attn_norm, true);
        if (r->fuse_qkv) {
            out[n++] = (wref){&L->wqkv, {m ? &ML->wq : NULL, m ? &ML->wk : NULL, m ? &ML->wv : NULL}, 3, false};
        } else {
            ADD(L->wq, ML->wq, false);
            ADD(L->wk, ML->wk, false);
            ADD(L->wv, ML->wv, false);
        }
        if (c->arch == MODEL_ARCH_QWEN2) {
            ADD(L->bq, ML->bq, false);
            ADD(L->bk, ML->bk, false);
            ADD(L->bv, ML->bv, false);
        }
        if (c->arch == MODEL_ARCH_QWEN3) {
            ADD(L->q_norm, ML->q_norm, true);
            ADD(L->k_norm, ML->k_norm, true);
        }
        ADD(L->wo, ML->wo, false);
        ADD(L->ffn_norm, ML->ffn_norm, true);
        if (r->fuse_gu) {
            out[n++] = (wref){&L->w_gu, {m ? &ML->w_gate : NULL, m ? &ML->w_up : NULL}, 2, false};
        } else {
            ADD(L->w_gate, ML->w_gate, false);
            ADD(L->w_up, ML->w_up, false);
        }
        ADD(L->w_down, ML->w_down, false);
    }
#undef ADD
    return n;
}

/* Shapes (and for random weights the dtype) of every weight, from the config. */
static void shape_weights(runner *r, dtype t)
{
    const model_config *c = &r->cfg;
    int64_t qd = (int64_t)c->n_head * c->head_dim, kvd = (int64_t)c->n_head_kv * c->head_dim;
    int64_t kvdv = (int64_t)c->n_head_kv * c->head_dim_v, ad = (int64_t)c->n_head * c->head_dim_v;
#define SET(w, ty, o, i) (w) = (backend_weight){.type = (ty), .n_out = (o), .n_in = (i)}
    SET(r->tok_embd, t, c->n_vocab, c->dim);
    SET(r->output_norm, DTYPE_F32, 1, c->dim);
    SET(r->output, t, c->n_vocab, c->dim);
    for (int il = 0; il < c->n_layer; il++) {
        runner_layer *L = &r->layers[il];
        SET(L->attn_norm, DTYPE_F32, 1, c->dim);
        SET(L->wq, t, qd, c->dim);
        SET(L->wk, t, kvd, c->dim);
        SET(L->wv, t, kvdv, c->dim);
        SET(L->bq, DTYPE_F32, 1, qd);
        SET(L->bk, DTYPE_F32, 1, kvd);
        SET(L->bv, DTYPE_F32, 1, kvdv);
        SET(L->q_norm, DTYPE_F32, 1, c->head_dim);
        SET(L->k_norm, DTYPE_F32, 1, c->head_dim);
        SET(L->wo, t, c->dim, ad);
        SET(L->ffn_norm, DTYPE_F32, 1, c->dim);
        SET(L->w_gate, t, c->n_ff, c->dim);
        SET(L->w_up, t, c->n_ff, c->dim);
        SET(L->w_down, t, c->dim, c->n_ff);
        SET(L->wqkv, t, qd + kvd + kvdv, c->dim);
        SET(L->w_gu, t, 2 * (int64_t)c->n_ff, c->dim);
    }
#undef SET
}

static size_t wbytes(runner *r, const backend_weight *w)
{
    if (w->n_out == 1) return (size_t)w->n_in * sizeof(float);
    return r->be->ops->weight_bytes(r->be->ctx, w->type, w->n_out, w->n_in);
}

/* A stacked matrix from its sources' ggml rows, concatenated on the host, then uploaded as one. */
static ai_status upload_stacked(runner *r, const backend_weight *w, const model_weight *const *src, int n_src,
                                ai_err *err)
{
    size_t total = 0;
    for (int j = 0; j < n_src; j++) total += src[j]->nbytes;
    char *tmp = malloc(total), *p = tmp;
    if (!tmp) return ai_err_set(err, AI_ERR_NOMEM, "runner: cannot stage %zu bytes of stacked weights", total);
    for (int j = 0; j < n_src; j++) {
        memcpy(p, src[j]->data, src[j]->nbytes);
        p += src[j]->nbytes;
    }
    ai_status st = r->be->ops->weight_upload(r->be->ctx, w, tmp, err);
    free(tmp);
    return st;
}

/* Stacking needs a backend that copies weights anyway (the CPU reads the mmap in place), sources of
 * one dtype, and for q|k|v outputs that later ops may read strided (qwen3's per-head norms may not). */
static void plan_stacking(runner *r)
{
    const model *m = r->m;
    if (!r->be->ops->weight_upload || !r->be->ops->swiglu_rows) return;
    r->fuse_qkv = r->cfg.arch != MODEL_ARCH_QWEN3;
    r->fuse_gu = true;
    for (int il = 0; m && il < r->cfg.n_layer; il++) {
        const model_layer *L = &m->layers[il];
        if (L->wk.type != L->wq.type || L->wv.type != L->wq.type) r->fuse_qkv = false;
        if (L->w_up.type != L->w_gate.type) r->fuse_gu = false;
    }
}

static ai_status place_weights(runner *r, const runner_random *rnd, ai_err *err)
{
    const backend_ops *o = r->be->ops;
    void *bc = r->be->ctx;
    size_t cap = 16 + 14 * (size_t)r->cfg.n_layer;
    wref *ws = calloc(cap, sizeof *ws);
    if (!ws) return ai_err_set(err, AI_ERR_NOMEM, "runner: out of memory");
    int n = list_weights(r, ws);
    ai_status st = AI_OK;
    if (r->m) /* the model's dtypes override the defaults of shape_weights */
        for (int i = 0; i < n; i++)
            if (!ws[i].norm && ws[i].w->n_out > 1) ws[i].w->type = ws[i].src[0]->type;

    if (r->m && !o->weight_upload) { /* CPU: read the mmap in place */
        for (int i = 0; i < n; i++) ws[i].w->data = (void *)ws[i].src[0]->data;
    } else {
        size_t total = 0;
        for (int i = 0; i < n; i++) total += al(wbytes(r, ws[i].w));
        if ((st = o->alloc(bc, total, &r->wmem, err)) != AI_OK) goto done;
        char *p = r->wmem;
        for (int i = 0; i < n && st == AI_OK; i++) {
            backend_weight *w = ws[i].w;
            w->data = p;
            p += al(wbytes(r, w));
            if (r->m) {
                if (w->n_out == 1) st = o->upload(bc, w->data, ws[i].src[0]->data, (size_t)w->n_in * sizeof(float), err);
                else if (ws[i].n_src == 1) st = o->weight_upload(bc, w, ws[i].src[0]->data, err);
                else st = upload_stacked(r, w, ws[i].src, ws[i].n_src, err);
                if (st == AI_OK) st = o->sync(bc, err); /* the source may be a page we unmap next */
            } else if (ws[i].norm) {
                st = o->fill_f32(bc, w->data, w->n_in, 1.0f, err);
            } else if (!o->weight_random) {
                st = ai_err_set(err, AI_ERR_UNSUPPORTED, "backend %s cannot generate random weights", o->name);
            } else {
                float scale = w->n_out == 1 ? 0.02f : (rnd->scale > 0 ? rnd->scale : 0.035f);
                backend_weight tmp = *w;
                if (w->n_out == 1) tmp = (backend_weight){.type = DTYPE_F32, .n_out = 1, .n_in = w->n_in, .data = w->data};
                st = o->weight_random(bc, &tmp, rnd->seed * 1000003u + (uint64_t)i, scale, err);
            }
        }
        if (st == AI_OK) st = o->sync(bc, err);
    }
    if (r->cfg.tied_output) r->output = r->tok_embd;
    r->weight_bytes = 0;
    for (int i = 0; i < n; i++)
        if (ws[i].w != &r->tok_embd) r->weight_bytes += wbytes(r, ws[i].w);
    if (r->cfg.tied_output) r->weight_bytes += wbytes(r, &r->output); /* read again as the output matrix */
done:
    free(ws);
    return st;
}

static ai_status reserve_matmuls(runner *r, ai_err *err)
{
    const backend_ops *o = r->be->ops;
    if (!o->matmul_reserve) return AI_OK;
    int32_t mt = r->p.max_tokens > r->p.max_seqs ? r->p.max_tokens : r->p.max_seqs;
    ai_status st = o->matmul_reserve(r->be->ctx, &r->output, r->p.max_seqs, err);
    for (int il = 0; il < r->cfg.n_layer && st == AI_OK; il++) {
        runner_layer *L = &r->layers[il];
        const backend_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down, &L->wqkv, &L->w_gu};
        for (size_t j = 0; j < sizeof ws / sizeof ws[0] && st == AI_OK; j++)
            if (ws[j]->data) st = o->matmul_reserve(r->be->ctx, ws[j], mt, err);
    }
    return st;
}

ai_status runner_init(runner **out, backend *be, const model_config *cfg, const model *m, const runner_random *rnd,
                      const runner_params *p, ai_err *err)
{
    *out = NULL;
    if (!m && !rnd) return ai_err_set(err, AI_ERR_INVALID, "runner: neither a model nor random weights");
    if (!m) { /* the weight types every backend's matmul takes */
        const dtype t = rnd->type;
        if (t != DTYPE_F32 && t != DTYPE_F16 && t != DTYPE_BF16 && t != DTYPE_Q8_0 && t != DTYPE_Q4_0 && t != DTYPE_Q4_1)
            return ai_err_set(err, AI_ERR_UNSUPPORTED,
                              "runner: random weights of type %s (supported: f32, f16, bf16, q8_0, q4_0, q4_1)",
                              dtype_name(t));
    }
    if (m) cfg = &m->cfg;
    runner_params d = p ? *p : (runner_params){0};
    if (d.max_tokens <= 0) d.max_tokens = 512;
    if (d.max_seqs <= 0) d.max_seqs = 256;
    if (d.n_ctx <= 0) d.n_ctx = cfg->n_ctx_train < 8192 ? cfg->n_ctx_train : 8192;
    if (d.block_size <= 0) d.block_size = 16;
    if (d.kv_mem_frac <= 0) d.kv_mem_frac = 0.9f;
    if (d.n_ctx > cfg->n_ctx_train)
        return ai_err_set(err, AI_ERR_RANGE, "runner: n_ctx %d exceeds the model's context %d", d.n_ctx, cfg->n_ctx_train);
    if ((d.block_size & (d.block_size - 1)) || d.block_size > 1024)
        return ai_err_set(err, AI_ERR_INVALID, "runner: block_size %d is not a power of two <= 1024", d.block_size);
    if (d.max_tokens > (1 << 20) || d.max_seqs > (1 << 16) || d.max_seqs > d.max_tokens * 64)
        return ai_err_set(err, AI_ERR_RANGE, "runner: max_tokens %d / max_seqs %d out of range", d.max_tokens, d.max_seqs);

    runner *r = calloc(1, sizeof *r);
    if (!r) return ai_err_set(err, AI_ERR_NOMEM, "runner: out of memory");
    r->be = be;
    r->cfg = *cfg;
    r->m = m;
    r->p = d;
    /* AUTO (docs/gpu.md): in decode steps of GEMV size where the backend does the split norm in its
     * kernels (a composing backend, the CPU, would only add passes), the split norm: it removes the add +
     * norm kernels between the products, and the prologue fusions lose there for float weights (the
     * float GEMV is at ~96% of copy bandwidth alone and a prologue delays every CTA's stream). Float
     * weights add the SwiGLU and rope epilogues at one token (H100, 2026-12-07: 183.3-184.7 tok/s against
     * 173.0-173.3 unfused; the H200 lost with it, 228.6-229.0 against 236.0, before the epilogue's loads
     * moved ahead of the dot loop and the sums spread over lanes, and has not run since). Quantized
     * weights add the split SwiGLU prologue (a quantize kernel, then the dp4a down product copies int8 x):
     * with the sums over BACKEND_SS_LANES, q4_0 on the H100 441.5 tok/s at batch 1 and 1,251.6 at batch 4
     * against 432.6 and 1,142.4 with norm + swiglu + add (before the lanes the split norm lost there,
     * 403 against 432: 4096 warps' atomics on one address). Steps that mix prefill chunks keep norm +
     * swiglu + add (the split norm needs one row per sequence), and above the GEMV sizes every prologue
     * fusion saves bytes: the GEMM's prologue writes its 16-bit input in place of an f32 copy + rounding,
     * and the residual add is the GEMM's beta = 1. */
    const dtype wt = m ? m->layers[0].wq.type : rnd->type;
    if (d.fuse & RUNNER_FUSE_EXACT) {
        r->fuse = r->fuse_one = r->fuse_big = d.fuse & ~RUNNER_FUSE_EXACT;
    } else {
        const bool quant = dtype_get(wt) && dtype_get(wt)->quantized;
        const bool split = be->ops->matmul_fuses_defer && be->ops->matmul_fuses_defer(be->ctx, wt, 1);
        r->fuse = quant ? RUNNER_FUSE_NORM | RUNNER_FUSE_SWIGLU | RUNNER_FUSE_ADD : 0;
        r->fuse_one = !split ? r->fuse
                      : quant ? RUNNER_FUSE_DEFER | RUNNER_FUSE_SWIGLU
                              : RUNNER_FUSE_DEFER | RUNNER_FUSE_GLU | RUNNER_FUSE_ROPE;
        /* decode steps of 2+ tokens where the backend fuses the split norm: the same set (bf16 runs them on
         * the skinny GEMM, which keeps the split norm only). H200 2-8 tokens even to 1.011x the previous
         * default, H100 1.02-1.03x (bf16), 1.096x (q4_0, 4 tokens) (perf.md, 2026-12-07). */
        r->fuse_dec = split ? r->fuse_one : 0;
        while (r->fuse_dec && r->defer_tok < RUNNER_FUSE_GEMV_TOK &&
               be->ops->matmul_fuses_defer(be->ctx, wt, r->defer_tok + 1))
            r->defer_tok++;
        r->fuse_big = RUNNER_FUSE_NORM | RUNNER_FUSE_SWIGLU | RUNNER_FUSE_ADD;
    }
    r->gemm_min_tok = be->ops->matmul_gemm_min_tok ? be->ops->matmul_gemm_min_tok(be->ctx, wt) : RUNNER_FUSE_GEMV_TOK + 1;
    r->max_blocks = (d.n_ctx + d.block_size - 1) / d.block_size;
    switch (d.kv_dtype) {
    case RUNNER_KV_AUTO: r->kv_type = d.kv_f32 ? DTYPE_F32 : DTYPE_F16; break;
    case RUNNER_KV_F16: r->kv_type = DTYPE_F16; break;
    case RUNNER_KV_F32: r->kv_type = DTYPE_F32; break;
    case RUNNER_KV_FP8: r->kv_type = DTYPE_F8_E4M3; break;
    default:
        runner_free(r);
        return ai_err_set(err, AI_ERR_INVALID, "runner: unknown kv_dtype %d", (int)d.kv_dtype);
    }
    r->k_scale = d.k_scale > 0 ? d.k_scale : 1.0f;
    r->v_scale = d.v_scale > 0 ? d.v_scale : 1.0f;
    if (!(d.k_scale >= 0 && isfinite(d.k_scale) && d.v_scale >= 0 && isfinite(d.v_scale))) {
        runner_free(r);
        return ai_err_set(err, AI_ERR_INVALID, "runner: KV scales must be finite and > 0 (k %g, v %g)",
                          (double)d.k_scale, (double)d.v_scale);
    }
    {
        bool ok = be->ops->kv_type_ok ? be->ops->kv_type_ok(be->ctx, r->kv_type)
                                      : r->kv_type == DTYPE_F16 || r->kv_type == DTYPE_F32;
        if (!ok) {
            const dtype kt = r->kv_type;
            runner_free(r);
            return ai_err_set(err, AI_ERR_UNSUPPORTED, "runner: the %s backend has no %s KV cache (--kv-cache-dtype)",
                              be->ops->name, dtype_name(kt));
        }
    }
    r->freq_scale = cfg->rope_scaling == MODEL_ROPE_SCALING_LINEAR ? 1.0f / cfg->rope_factor : 1.0f;
    const backend_ops *o = be->ops;
    void *bc = be->ctx;
    ai_status st;
    r->layers = calloc((size_t)cfg->n_layer, sizeof *r->layers);
    if (!r->layers) {
        st = ai_err_set(err, AI_ERR_NOMEM, "runner: out of memory");
        goto fail;
    }
    shape_weights(r, rnd ? rnd->type : DTYPE_F32);
    plan_stacking(r);
    if ((st = place_weights(r, rnd, err)) != AI_OK) goto fail;
    if ((st = reserve_matmuls(r, err)) != AI_OK) goto fail;

    /* arena: activations (T rows), last-token rows and logits (S rows), rope factors, metadata */
    const model_config *c = cfg;
    size_t T = (size_t)d.max_tokens, S = (size_t)d.max_seqs, f = sizeof(float);
    size_t qd = (size_t)c->n_head * (size_t)c->head_dim, kvd = (size_t)c->n_head_kv * (size_t)c->head_dim;
    size_t kvdv = (size_t)c->n_head_kv * (size_t)c->head_dim_v, ad = (size_t)c->n_head * (size_t)c->head_dim_v;
    r->meta_ints = runner_meta_offset(r, META_COUNT);
    /* q holds q|k|v rows when stacked, gate holds gate|up rows */
    size_t sz[] = {T * (size_t)c->dim * f, T * (size_t)c->dim * f, T * (qd + kvd + kvdv) * f, T * kvd * f, T * kvdv * f,
                   T * ad * f, T * (size_t)c->dim * f, 2 * T * (size_t)c->n_ff * f, T * (size_t)c->n_ff * f,
                   S * (size_t)c->dim * f,
                   S * (size_t)c->n_vocab * f, (size_t)(c->rope_dim / 2) * f, r->meta_ints * sizeof(int32_t),
                   (2 * (size_t)c->n_layer + 1) * RUNNER_FUSE_GEMV_TOK * BACKEND_SS_LANES * sizeof(double)};
    enum { N_SZ = sizeof sz / sizeof sz[0] };
    backend_attn aw = {.kv_type = r->kv_type, .n_seq = d.max_seqs, .n_tok = d.max_tokens, .max_blocks = r->max_blocks,
                       .max_q_len = d.max_tokens, .max_seq_len = d.n_ctx, .n_head = c->n_head,
                       .n_head_kv = c->n_head_kv, .head_dim = c->head_dim, .head_dim_v = c->head_dim_v,
                       .block_size = d.block_size};
    r->attn_work_size = o->attention_work_size(bc, &aw);
    size_t total = al(r->attn_work_size);
    for (int i = 0; i < N_SZ; i++) total += al(sz[i]);
    if ((st = o->alloc(bc, total, &r->arena, err)) != AI_OK) goto fail;
    char *a = r->arena;
    void **dst[N_SZ] = {(void **)&r->x, (void **)&r->xn, (void **)&r->q, (void **)&r->k, (void **)&r->v,
                        (void **)&r->att, (void **)&r->tmp, (void **)&r->gate, (void **)&r->up, (void **)&r->xl,
                        (void **)&r->logits, (void **)&r->rope_factors, (void **)&r->d_meta, (void **)&r->ss};
    for (int i = 0; i < N_SZ; i++) {
        *dst[i] = a;
        a += al(sz[i]);
    }
    r->attn_work = a;
    r->h_meta = calloc(r->meta_ints, sizeof(int32_t));
    if (!r->h_meta) {
        st = ai_err_set(err, AI_ERR_NOMEM, "runner: out of memory");
        goto fail;
    }
    if (sz[11] && (c->rope_scaling == MODEL_ROPE_SCALING_LLAMA3 || (m && m->rope_freqs.data))) {
        float *h = malloc(sz[11]);
        if (!h) {
            st = ai_err_set(err, AI_ERR_NOMEM, "runner: out of memory");
            goto fail;
        }
        if (m && m->rope_freqs.data) memcpy(h, m->rope_freqs.data, sz[11]);
        else model_rope_llama3_factors(c, h);
        st = o->upload(bc, r->rope_factors, h, sz[11], err);
        if (st == AI_OK) st = o->sync(bc, err);
        free(h);
        if (st != AI_OK) goto fail;
    } else {
        r->rope_factors = NULL;
    }

    /* KV pool last: on a GPU it takes a fraction of what is left */
    size_t es = dtype_get(r->kv_type)->block_bytes;
    r->kv_k_layer = 0;
    size_t per_block = (size_t)c->n_layer * (size_t)d.block_size * (kvd + kvdv) * es;
    int64_t nb = d.kv_blocks;
    if (nb <= 0) {
        size_t fr = o->mem_free ? o->mem_free(bc) : 0;
        nb = fr ? (int64_t)((double)fr * d.kv_mem_frac / (double)per_block)
                : (int64_t)(S < 16 ? S : 16) * r->max_blocks;
    }
    if (nb < 1) {
        st = ai_err_set(err, AI_ERR_NOMEM, "runner: no memory left for a single KV block (%zu bytes)", per_block);
        goto fail;
    }
    if ((uint64_t)nb * (uint64_t)d.block_size > (uint64_t)INT32_MAX) nb = INT32_MAX / d.block_size;
    r->p.kv_blocks = nb;
    r->kv_k_layer = (size_t)nb * (size_t)d.block_size * kvd * es;
    r->kv_v_layer = (size_t)nb * (size_t)d.block_size * kvdv * es;
    if ((st = o->alloc(bc, (size_t)c->n_layer * (r->kv_k_layer + r->kv_v_layer), &r->kv, err)) != AI_OK) {
        ai_err_prefix(err, "runner: KV pool of %lld blocks", (long long)nb);
        goto fail;
    }
    *out = r;
    return AI_OK;
fail:
    runner_free(r);
    return st;
}

void runner_free(runner *r)
{
    if (!r) return;
    const backend_ops *o = r->be->ops;
    if (o->forget_graphs) o->forget_graphs(r->be->ctx); /* graphs hold this runner's buffer addresses */
    if (r->kv) o->dealloc(r->be->ctx, r->kv);
    if (r->arena) o->dealloc(r->be->ctx, r->arena);
    if (r->wmem) o->dealloc(r->be->ctx, r->wmem);
    free(r->h_meta);
    free(r->layers);
    free(r);
}

const model_config *runner_config(const runner *r) { return &r->cfg; }
int64_t runner_kv_blocks(const runner *r) { return r->p.kv_blocks; }
int32_t runner_block_size(const runner *r) { return r->p.block_size; }
int32_t runner_n_ctx(const runner *r) { return r->p.n_ctx; }
bool runner_step_gemm(const runner *r, int32_t n_tok) { return n_tok >= r->gemm_min_tok; }
unsigned runner_fusions(const runner *r, int32_t n_tok)
{
    if (runner_step_gemm(r, n_tok)) return r->fuse_big & ~(RUNNER_FUSE_GLU | RUNNER_FUSE_ROPE);
    return n_tok == 1 ? r->fuse_one : r->fuse;
}
unsigned runner_fusions_decode(const runner *r, int32_t n_tok)
{
    if (n_tok < 2 || n_tok > r->defer_tok || !r->fuse_dec) return runner_fusions(r, n_tok);
    return runner_step_gemm(r, n_tok) ? r->fuse_dec & ~(RUNNER_FUSE_GLU | RUNNER_FUSE_ROPE) : r->fuse_dec;
}
uint64_t runner_weight_bytes(const runner *r) { return r->weight_bytes; }
uint64_t runner_kv_bytes_per_token(const runner *r)
{
    const model_config *c = &r->cfg;
    return (uint64_t)c->n_layer * (uint64_t)c->n_head_kv * (uint64_t)(c->head_dim + c->head_dim_v) *
           dtype_get(r->kv_type)->block_bytes;
}
dtype runner_kv_type(const runner *r) { return r->kv_type; }
void runner_kv_scales(const runner *r, float *k_scale, float *v_scale)
{
    *k_scale = r->k_scale;
    *v_scale = r->v_scale;
}

static const char *const KV_NAMES[] = {[RUNNER_KV_AUTO] = "auto", [RUNNER_KV_F16] = "f16", [RUNNER_KV_F32] = "f32",
                                       [RUNNER_KV_FP8] = "fp8"};

bool runner_kv_dtype_parse(const char *s, runner_kv_dtype *out)
{
    for (int k = 0; k < (int)(sizeof KV_NAMES / sizeof KV_NAMES[0]); k++)
        if (!strcmp(s, KV_NAMES[k])) {
            *out = (runner_kv_dtype)k;
            return true;
        }
    if (strcmp(s, "fp8_e4m3")) return false;
    *out = RUNNER_KV_FP8;
    return true;
}

const char *runner_kv_dtype_name(runner_kv_dtype k)
{
    return (unsigned)k < sizeof KV_NAMES / sizeof KV_NAMES[0] ? KV_NAMES[k] : "?";
}
