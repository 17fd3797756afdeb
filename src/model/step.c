/* step.c - the batched forward of the Llama family over backend ops, with a paged KV cache.
 *
 * A step takes n_seq sequences with q_len new tokens each (n_tok in all) and computes logits for the
 * last token of each sequence only (the only row sampling needs; for a 128k vocabulary that row
 * product is as large as a whole layer's). Per step:
 *   host:  tokens, positions, cache slots, q_start/seq_len, last-token rows, block tables -> one upload
 *   x = embed(tokens)
 *   per layer: q, k, v = (rmsnorm(x) * attn_norm) W^T (+ bias);  [qwen3: per-head rmsnorm of q, k]
 *              rope(q, k, pos) and kv_store(k, v -> slots) in one op;  att = paged causal GQA attention(q)
 *              x += att Wo^T
 *              gate|up = (rmsnorm(x) * ffn_norm) Wgu^T;  x += (silu(gate) * up) Wd^T
 *   logits (n_seq, n_vocab) = (rmsnorm(gather(x, last rows)) * output_norm) W_out^T;  next = argmax(logits)
 * The norms, the SwiGLU and the residual adds ride on the matrix products (matmul_ex, backend.h):
 * with stacked q|k|v and gate|up weights a layer is 6 ops (matmul_ex x4, rope_store, attention)
 * instead of 9, which at batch 1 on a GPU is ~3 launch latencies per layer. Where a product is not
 * stacked, the norm goes once into xn and the SwiGLU is its own op (the unfused sequence).
 * The split norm (RUNNER_FUSE_DEFER, pure decode steps): wo and down also write x * norm_w and the
 * rows' sum of squares as they finish x, and the next product scales by 1 / rms: no norm kernel.
 * The rope epilogue (RUNNER_FUSE_ROPE): the q|k|v product rotates q and k and stores k and v into the
 * cache itself (backend_mm_opts.rope_kv): no rope_store op.
 * Decode steps (q_len 1 everywhere) go through backend->run with a key per (batch size, context
 * bucket), so a GPU backend replays one captured graph per step instead of ~6 launches per layer.
 * The step's launch shapes depend on the key alone: the context bound is rounded up to a power of
 * two and the block tables are packed with as many columns as that bound needs.
 */
#include <math.h>
#include <string.h>

#include "model/runner_internal.h"

#define TRY(call)                           \
    do {                                    \
        ai_status st_ = (call);             \
        if (st_ != AI_OK) return st_;       \
    } while (0)

static int32_t *meta(runner *r, int section, bool device)
{
    return (device ? r->d_meta : r->h_meta) + runner_meta_offset(r, section);
}

/* A step that mixes decode tokens with prefill chunks runs attention as two calls: the scheduler
 * puts the decodes first (q_len 1 each, rows 0 .. n_dec-1), and those go to the backend's decode
 * path (split-KV, GQA-packed), the rest to its prefill path. As one call the whole batch would take
 * the prefill kernel, which gives each decode token a 64-row query tile per head: ~64x the
 * tensor-core work of its one row and a K/V read per query head instead of per KV head. */
static ai_status attend(runner *r, const backend_attn *at, ai_err *err)
{
    const backend_ops *o = r->be->ops;
    const int32_t nd = r->n_dec;
    if (nd == 0) return o->attention(r->be->ctx, at, err);
    backend_attn d = *at, p = *at;
    d.n_seq = d.n_tok = nd;
    d.max_q_len = 1;
    const int64_t out_stride = (int64_t)at->n_head * at->head_dim_v;
    p.out += nd * out_stride;
    p.q += nd * at->q_stride;
    p.q_start = meta(r, META_QSTART_P, true); /* q_start - n_dec, from row 0 of the part */
    p.seq_len += nd;
    p.block_tables += (size_t)nd * (size_t)at->max_blocks;
    p.n_seq -= nd;
    p.n_tok -= nd;
    TRY(o->attention(r->be->ctx, &d, err));
    return o->attention(r->be->ctx, &p, err);
}

static ai_status step_body(void *arg, ai_err *err)
{
    runner *r = arg;
    const backend_ops *o = r->be->ops;
    void *bc = r->be->ctx;
    const model_config *c = &r->cfg;
    const int32_t n = r->n_tok, dim = c->dim;
    const int32_t qd = c->n_head * c->head_dim, kvd = c->n_head_kv * c->head_dim, kvdv = c->n_head_kv * c->head_dim_v;
    const int32_t *tok = meta(r, META_TOKENS, true), *pos = meta(r, META_POS, true), *slot = meta(r, META_SLOT, true);
    backend_rope_kv rk = {.n_head = c->n_head, .n_head_kv = c->n_head_kv, .head_dim = c->head_dim,
                          .head_dim_v = c->head_dim_v, .rope_dim = c->rope_dim, .pos = pos, .base = c->rope_base,
                          .freq_scale = r->freq_scale, .factors = r->rope_factors,
                          .neox = c->rope_kind == MODEL_ROPE_NEOX, .kv_type = r->kv_type, .k_scale = r->k_scale,
                          .v_scale = r->v_scale, .slot = slot};
    backend_attn at = {.out = r->att, .q = r->q, .q_stride = qd, .kv_type = r->kv_type, .k_scale = r->k_scale,
                       .v_scale = r->v_scale,
                       .block_tables = meta(r, META_BT, true), .q_start = meta(r, META_QSTART, true),
                       .seq_len = meta(r, META_SEQLEN, true), .n_seq = r->n_seq, .n_tok = n,
                       .max_blocks = r->bt_cols, .max_q_len = r->max_q, .max_seq_len = r->len_bound,
                       .n_head = c->n_head, .n_head_kv = c->n_head_kv, .head_dim = c->head_dim,
                       .head_dim_v = c->head_dim_v, .block_size = r->p.block_size, .work = r->attn_work,
                       .work_size = r->attn_work_size};
    at.scale = 1.0f / sqrtf((float)c->head_dim);

    /* Fusions (backend.h, matmul_ex), each chosen by runner_params.fuse (r->fuse, r->fuse_big):
     * norm: the rmsnorm rides in the prologue of the product that reads it; swiglu: silu(gate) * up in
     * the down product's prologue; add: the residual add in the wo / down products' epilogue. Without
     * add, the old fused add_rmsnorm (x += tmp, xn = rmsnorm(x)) also makes the next norm's xn. */
    const unsigned fuse = n == r->n_seq ? runner_fusions_decode(r, n) : runner_fusions(r, n);
    const bool f_norm = fuse & RUNNER_FUSE_NORM, f_swiglu = fuse & RUNNER_FUSE_SWIGLU;
    const bool f_glu = fuse & RUNNER_FUSE_GLU;
    /* defer: the split norm (backend_mm_opts.in_ss / out_*), in pure decode steps (row t is sequence
     * t's only token, so the logits need no gather) of GEMV size; the sums of squares go to slot 2 il
     * (attention input of layer il), 2 il + 1 (its FFN input), 2 n_layer (the output norm), (n, BACKEND_SS_LANES) each. */
    const bool f_defer = (fuse & RUNNER_FUSE_DEFER) && n == r->n_seq && n <= RUNNER_FUSE_GEMV_TOK;
    const bool f_add = (fuse & RUNNER_FUSE_ADD) || f_defer;
    const backend_mm_opts add = {.accumulate = true};
#define SS_SLOT(j) (r->ss + (size_t)(j) * (size_t)n * BACKEND_SS_LANES)

    TRY(o->embed(bc, r->x, &r->tok_embd, tok, n, err));
    if (f_defer)
        TRY(o->fill_f32(bc, (float *)r->ss, 2 * (2 * (int64_t)c->n_layer + 1) * n * BACKEND_SS_LANES, 0.0f, err));
    for (int32_t il = 0; il < c->n_layer; il++) {
        const runner_layer *L = &r->layers[il];
        const bool defer_qkv = f_defer && il > 0; /* (layer 0's norm reads the embedding: a kernel) */
        const bool norm_qkv = f_norm && r->fuse_qkv && !defer_qkv, norm_gu = f_norm && r->fuse_gu && !f_defer;
        const backend_mm_opts attn_in = {.norm_w = L->attn_norm.data, .eps = c->norm_eps};
        const backend_mm_opts ffn_in = {.norm_w = L->ffn_norm.data, .eps = c->norm_eps};
        /* the plain products' options: with defer, the scale by 1 / rms of their input */
        const backend_mm_opts qkv_o = {.in_ss = defer_qkv ? SS_SLOT(2 * il) : NULL, .eps = c->norm_eps};
        const backend_mm_opts gu_o = {.in_ss = f_defer ? SS_SLOT(2 * il + 1) : NULL, .eps = c->norm_eps};
        const float *next = il + 1 < c->n_layer ? r->layers[il + 1].attn_norm.data : r->output_norm.data;
        rk.k_cache = (char *)r->kv + (size_t)il * r->kv_k_layer;
        rk.v_cache = (char *)r->kv + (size_t)c->n_layer * r->kv_k_layer + (size_t)il * r->kv_v_layer;
        /* rope: the rope and KV store in the q|k|v product's epilogue (nothing between them to do) */
        const bool f_rope = (fuse & RUNNER_FUSE_ROPE) && r->fuse_qkv && !L->bq.data && !L->q_norm.data;
        float *q = r->q, *k = r->k, *v = r->v;
        int64_t qs = qd, ks = kvd, vs = kvdv; /* row strides */
        /* (without add, the previous add_rmsnorm made xn; with defer, the previous down product) */
        if (!norm_qkv && !defer_qkv && (il == 0 || f_add))
            TRY(o->rmsnorm(bc, r->xn, r->x, L->attn_norm.data, n, dim, c->norm_eps, err));
        if (r->fuse_qkv) { /* one product for q|k|v: rows of qd + kvd + kvdv */
            backend_mm_opts qkv_opts = norm_qkv ? attn_in : qkv_o;
            qkv_opts.rope_kv = f_rope ? &rk : NULL;
            TRY(o->matmul_ex(bc, &L->wqkv, norm_qkv ? r->x : r->xn, n, r->q, &qkv_opts, err));
            k = q + qd;
            v = k + kvd;
            qs = ks = vs = qd + kvd + kvdv;
        } else {
            TRY(o->matmul_ex(bc, &L->wq, r->xn, n, q, &qkv_o, err));
            TRY(o->matmul_ex(bc, &L->wk, r->xn, n, k, &qkv_o, err));
            TRY(o->matmul_ex(bc, &L->wv, r->xn, n, v, &qkv_o, err));
        }
        if (L->bq.data) {
            TRY(o->add_bias(bc, q, L->bq.data, n, qd, qs, err));
            TRY(o->add_bias(bc, k, L->bk.data, n, kvd, ks, err));
            TRY(o->add_bias(bc, v, L->bv.data, n, kvdv, vs, err));
        }
        if (L->q_norm.data) { /* never stacked: rows are contiguous heads */
            TRY(o->rmsnorm(bc, q, q, L->q_norm.data, n * c->n_head, c->head_dim, c->norm_eps, err));
            TRY(o->rmsnorm(bc, k, k, L->k_norm.data, n * c->n_head_kv, c->head_dim, c->norm_eps, err));
        }
        if (!f_rope) TRY(o->rope_store(bc, q, qs, k, ks, v, vs, n, &rk, err));
        at.k_cache = rk.k_cache;
        at.v_cache = rk.v_cache;
        at.q_stride = qs;
        TRY(attend(r, &at, err));
        if (f_defer) { /* x += att Wo^T, xn = x * ffn_norm, its sum of squares */
            const backend_mm_opts wo_o = {.accumulate = true, .out_xn = r->xn, .out_nw = L->ffn_norm.data,
                                          .out_ss = SS_SLOT(2 * il + 1)};
            TRY(o->matmul_ex(bc, &L->wo, r->att, n, r->x, &wo_o, err));
        } else if (f_add) {
            TRY(o->matmul_ex(bc, &L->wo, r->att, n, r->x, &add, err));
            if (!norm_gu) TRY(o->rmsnorm(bc, r->xn, r->x, L->ffn_norm.data, n, dim, c->norm_eps, err));
        } else {
            TRY(o->matmul(bc, &L->wo, r->att, n, r->tmp, err));
            TRY(o->add_rmsnorm(bc, r->x, r->tmp, r->xn, L->ffn_norm.data, n, dim, c->norm_eps, err));
        }
        const float *act;           /* the down product's input */
        backend_mm_opts down = add; /* its options */
        if (r->fuse_gu && f_glu) { /* the SwiGLU in the gate|up product's epilogue */
            backend_mm_opts gu = norm_gu ? ffn_in : gu_o;
            gu.swiglu_out = true;
            TRY(o->matmul_ex(bc, &L->w_gu, norm_gu ? r->x : r->xn, n, r->up, &gu, err));
            act = r->up;
        } else if (r->fuse_gu) { /* gate|up rows of 2 n_ff */
            TRY(o->matmul_ex(bc, &L->w_gu, norm_gu ? r->x : r->xn, n, r->gate, norm_gu ? &ffn_in : &gu_o, err));
            down.swiglu_in = f_swiglu;
            act = r->gate;
            if (!f_swiglu) {
                TRY(o->swiglu_rows(bc, r->up, r->gate, n, c->n_ff, err));
                act = r->up;
            }
        } else {
            TRY(o->matmul_ex(bc, &L->w_gate, r->xn, n, r->gate, &gu_o, err));
            TRY(o->matmul_ex(bc, &L->w_up, r->xn, n, r->up, &gu_o, err));
            TRY(o->swiglu(bc, r->gate, r->gate, r->up, (int64_t)n * c->n_ff, err));
            act = r->gate;
        }
        if (f_defer) { /* x += act Wd^T, xn = x * the next norm's weight, its sum of squares */
            down.out_xn = r->xn;
            down.out_nw = next;
            down.out_ss = SS_SLOT(2 * il + 2);
        }
        if (f_add) {
            TRY(o->matmul_ex(bc, &L->w_down, act, n, r->x, &down, err));
        } else {
            down.accumulate = false;
            TRY(o->matmul_ex(bc, &L->w_down, act, n, r->tmp, &down, err));
            TRY(o->add_rmsnorm(bc, r->x, r->tmp, r->xn, next, n, dim, c->norm_eps, err));
        }
    }
    if (f_defer) { /* xn rows are the sequences' last rows already */
        const backend_mm_opts out_in = {.in_ss = SS_SLOT(2 * c->n_layer), .eps = c->norm_eps};
        TRY(o->matmul_ex(bc, &r->output, r->xn, r->n_seq, r->logits, &out_in, err));
    } else if (f_norm) {
        const backend_mm_opts out_in = {.norm_w = r->output_norm.data, .eps = c->norm_eps};
        TRY(o->gather_rows(bc, r->xl, r->x, meta(r, META_LAST, true), r->n_seq, dim, err));
        TRY(o->matmul_ex(bc, &r->output, r->xl, r->n_seq, r->logits, &out_in, err));
    } else {
        if (f_add) TRY(o->rmsnorm(bc, r->xn, r->x, r->output_norm.data, n, dim, c->norm_eps, err));
        TRY(o->gather_rows(bc, r->xl, r->xn, meta(r, META_LAST, true), r->n_seq, dim, err));
        TRY(o->matmul(bc, &r->output, r->xl, r->n_seq, r->logits, err));
    }
    return o->argmax(bc, r->logits, r->n_seq, c->n_vocab, meta(r, META_OUT, true), err);
#undef SS_SLOT
}

static int32_t pow2_at_least(int32_t v, int32_t lo)
{
    int32_t b = lo;
    while (b < v) b *= 2;
    return b;
}

ai_status runner_step(runner *r, const runner_seq *seqs, int32_t n_seq, int32_t *out_tokens, ai_err *err)
{
    const model_config *c = &r->cfg;
    const int32_t bs = r->p.block_size;
    if (n_seq < 1 || n_seq > r->p.max_seqs)
        return ai_err_set(err, AI_ERR_INVALID, "runner_step: %d sequences, expected 1..%d", n_seq, r->p.max_seqs);
    int32_t n_tok = 0, max_q = 0, max_len = 0;
    for (int32_t s = 0; s < n_seq; s++) {
        const runner_seq *q = &seqs[s];
        if (q->q_len < 1 || q->seq_len < q->q_len || q->seq_len > r->p.n_ctx)
            return ai_err_set(err, AI_ERR_RANGE, "runner_step: sequence %d has q_len %d, seq_len %d (context %d)", s,
                              q->q_len, q->seq_len, r->p.n_ctx);
        if (q->q_len > r->p.max_tokens - n_tok)
            return ai_err_set(err, AI_ERR_RANGE, "runner_step: more than %d tokens in one step", r->p.max_tokens);
        n_tok += q->q_len;
        if (q->q_len > max_q) max_q = q->q_len;
        if (q->seq_len > max_len) max_len = q->seq_len;
    }
    int32_t bound = pow2_at_least(max_len, 64);
    if (bound > r->max_blocks * bs) bound = r->max_blocks * bs;
    int32_t cols = (bound + bs - 1) / bs;

    int32_t *tok = meta(r, META_TOKENS, false), *pos = meta(r, META_POS, false), *slot = meta(r, META_SLOT, false);
    int32_t *qs = meta(r, META_QSTART, false), *sl = meta(r, META_SEQLEN, false), *last = meta(r, META_LAST, false);
    int32_t *bt = meta(r, META_BT, false);
    int32_t t = 0;
    for (int32_t s = 0; s < n_seq; s++) {
        const runner_seq *q = &seqs[s];
        int32_t nb = (q->seq_len + bs - 1) / bs;
        for (int32_t j = 0; j < nb; j++) {
            int32_t b = q->block_table[j];
            if (b < 0 || b >= r->p.kv_blocks)
                return ai_err_set(err, AI_ERR_RANGE, "runner_step: sequence %d names block %d (pool of %lld)", s, b,
                                  (long long)r->p.kv_blocks);
            bt[(size_t)s * cols + j] = b;
        }
        for (int32_t j = nb; j < cols; j++) bt[(size_t)s * cols + j] = 0;
        qs[s] = t;
        sl[s] = q->seq_len;
        for (int32_t i = 0; i < q->q_len; i++, t++) {
            if (q->tokens[i] < 0 || q->tokens[i] >= c->n_vocab)
                return ai_err_set(err, AI_ERR_RANGE, "runner_step: token id %d is outside the vocabulary [0, %d)",
                                  q->tokens[i], c->n_vocab);
            int32_t p = q->seq_len - q->q_len + i;
            tok[t] = q->tokens[i];
            pos[t] = p;
            slot[t] = q->block_table[p / bs] * bs + p % bs;
        }
        last[s] = t - 1;
    }
    qs[n_seq] = t;
    int32_t n_dec = 0; /* attend(): leading decodes of a step that also prefills */
    while (max_q > 1 && n_dec < n_seq && seqs[n_dec].q_len == 1) n_dec++;
    int32_t *qp = meta(r, META_QSTART_P, false);
    for (int32_t s = n_dec; n_dec && s <= n_seq; s++) qp[s - n_dec] = qs[s] - n_dec;
    r->n_dec = n_dec;
    r->n_tok = n_tok;
    r->n_seq = n_seq;
    r->max_q = max_q;
    r->len_bound = bound;
    r->bt_cols = cols;

    const backend_ops *o = r->be->ops;
    size_t up = runner_meta_offset(r, META_BT) + (size_t)n_seq * (size_t)cols;
    TRY(o->upload(r->be->ctx, r->d_meta, r->h_meta, up * sizeof(int32_t), err));
    uint64_t key = 0;
    if (max_q == 1 && !r->p.no_graphs) /* + 15 bits of this runner's address: runners sharing a backend */
        key = (1ull << 63) | ((((uint64_t)(uintptr_t)r >> 6) & 0x7FFF) << 48) | ((uint64_t)n_seq << 32) | (uint64_t)bound;
    TRY(o->run(r->be->ctx, key, step_body, r, err));
    if (out_tokens)
        TRY(o->download(r->be->ctx, out_tokens, meta(r, META_OUT, true), (size_t)n_seq * sizeof(int32_t), err));
    return AI_OK;
}

ai_status runner_copy_blocks(runner *r, const int32_t *src, const int32_t *dst, int32_t n, ai_err *err)
{
    const backend_ops *o = r->be->ops;
    const model_config *c = &r->cfg;
    size_t kb = r->kv_k_layer / (size_t)r->p.kv_blocks, vb = r->kv_v_layer / (size_t)r->p.kv_blocks; /* bytes/block */
    char *k0 = r->kv, *v0 = (char *)r->kv + (size_t)c->n_layer * r->kv_k_layer;
    for (int32_t i = 0; i < n; i++) {
        if (src[i] < 0 || src[i] >= r->p.kv_blocks || dst[i] < 0 || dst[i] >= r->p.kv_blocks)
            return ai_err_set(err, AI_ERR_RANGE, "runner_copy_blocks: block %d -> %d outside the pool of %lld", src[i],
                              dst[i], (long long)r->p.kv_blocks);
        for (int32_t il = 0; il < c->n_layer; il++) {
            char *kl = k0 + (size_t)il * r->kv_k_layer, *vl = v0 + (size_t)il * r->kv_v_layer;
            TRY(o->copy(r->be->ctx, kl + (size_t)dst[i] * kb, kl + (size_t)src[i] * kb, kb, err));
            TRY(o->copy(r->be->ctx, vl + (size_t)dst[i] * vb, vl + (size_t)src[i] * vb, vb, err));
        }
    }
    return AI_OK;
}

ai_status runner_logits(runner *r, float *h_out, int32_t n_seq, ai_err *err)
{
    if (n_seq < 1 || n_seq > r->n_seq)
        return ai_err_set(err, AI_ERR_INVALID, "runner_logits: %d rows, the last step had %d", n_seq, r->n_seq);
    return r->be->ops->download(r->be->ctx, h_out, r->logits, (size_t)n_seq * (size_t)r->cfg.n_vocab * sizeof(float),
                                err);
}
