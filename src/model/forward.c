/* forward.c - one sequence's state (KV cache + activations in one allocation) and the forward pass.
 *
 * Memory plan (model_ctx_init computes every size first, then allocates once):
 *   k_cache (n_layer, n_ctx, n_head_kv * head_dim)    f32 or f16 (kv_f16)
 *   v_cache (n_layer, n_ctx, n_head_kv * head_dim_v)  f32 or f16; an f32 cache is written in place by
 *                                                     the K/V matmuls, an f16 one from kv_new rows
 *   kv_new  (n_batch, kv dims of K + V)               f32, only with kv_f16
 *   x, xn   (n_batch, dim)                            residual stream and normed/projected rows
 *   q       (n_batch, n_head * head_dim)   att (n_batch, n_head * head_dim_v)
 *   gate,up (n_batch, n_ff)                scores (n_threads, n_ctx)   rope factors (rope_dim / 2)
 *   logits  (n_batch or 1, n_vocab)        work: the largest quantized-activation scratch
 * Each piece starts on a 64-byte boundary. A forward call allocates nothing.
 *
 * Data flow of model_forward for tokens at positions [pos, pos + n):
 *   x = embed(tokens)
 *   per layer: xn = rmsnorm(x) * attn_norm;  q, k, v = xn W^T (+ bias);  [qwen3: per-head rmsnorm q, k]
 *              rope(q, k);  k, v -> cache rows [pos, pos + n);  att = causal GQA attention;
 *              x += att Wo^T;  xn = rmsnorm(x) * ffn_norm;  x += (silu(xn Wg^T) * xn Wu^T) Wd^T
 *   logits = rmsnorm(x[last]) * output_norm  W_out^T   (every row with all_logits)
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "aiinfra/cpu_kernels.h"
#include "aiinfra/model.h"
#include "aiinfra/runner.h"
#include "aiinfra/threadpool.h"
#include "model/model_internal.h"

struct model_ctx {
    const model *m;
    int32_t n_ctx, n_batch;
    bool all_logits;
    threadpool *pool;
    cpu_isa isa;
    void *mem;
    size_t mem_bytes;
    bool kv_f16;
    void *k_cache, *v_cache;  /* float or uint16_t, see kv_f16 */
    float *kv_new;            /* (n_batch, kvd + kvdv) f32 rows before conversion (kv_f16 only) */
    float *x, *xn, *q, *att, *gate, *up, *scores, *logits;
    float *rope_factors;     /* NULL when no per-frequency factors */
    void *work;
    size_t work_size;
    int32_t n_logit_rows;
    runner *run;              /* backend mode: the sequence lives here, logits copied into `logits` */
    int32_t *block_table;     /* backend mode: blocks 0 .. n_ctx / block_size */
};

/* Backend mode: one sequence as a runner with blocks 0..n-1 in order, host logits for one row. */
static ai_status ctx_init_backend(model_ctx *x, const model *m, const model_ctx_params *d, ai_err *err)
{
    if (d->all_logits) return ai_err_set(err, AI_ERR_UNSUPPORTED, "model_ctx: all_logits needs the CPU forward");
    runner_params rp = {.max_tokens = d->n_batch, .max_seqs = 1, .n_ctx = d->n_ctx,
                        .kv_dtype = (runner_kv_dtype)d->kv_cache_dtype};
    rp.kv_blocks = (d->n_ctx + 15) / 16;
    ai_status st = runner_init(&x->run, d->backend, NULL, m, NULL, &rp, err);
    if (st != AI_OK) return st;
    x->block_table = malloc((size_t)rp.kv_blocks * sizeof(int32_t));
    x->logits = malloc((size_t)m->cfg.n_vocab * sizeof(float));
    x->mem = x->logits;
    if (!x->block_table || !x->logits) return ai_err_set(err, AI_ERR_NOMEM, "model_ctx: out of memory");
    for (int32_t i = 0; i < rp.kv_blocks; i++) x->block_table[i] = i;
    x->mem_bytes = (size_t)m->cfg.n_vocab * sizeof(float);
    return AI_OK;
}

// --- sizing -------------------------------------------------------------------

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

static ai_status add_work(const model_weight *w, int64_t n_tok, size_t *mx, ai_err *err)
{
    if (!w->data) return AI_OK;
    size_t s;
    ai_status st = cpu_matmul_work_size(w->type, w->n_in, n_tok, &s, err);
    if (st == AI_OK && s > *mx) *mx = s;
    return st;
}

ai_status model_ctx_init(model_ctx **out, const model *m, const model_ctx_params *p, ai_err *err)
{
    *out = NULL;
    const model_config *c = &m->cfg;
    model_ctx_params d = p ? *p : (model_ctx_params){0};
    if (d.n_ctx < 0 || d.n_batch < 0 || d.n_threads < 0)
        return ai_err_set(err, AI_ERR_INVALID, "model_ctx: n_ctx, n_batch and n_threads must be >= 0");
    if (d.n_ctx == 0) d.n_ctx = c->n_ctx_train < 4096 ? c->n_ctx_train : 4096;
    if (d.n_ctx > c->n_ctx_train)
        return ai_err_set(err, AI_ERR_RANGE, "model_ctx: n_ctx %d exceeds the model's context length %d", d.n_ctx,
                          c->n_ctx_train);
    if (d.n_batch == 0) d.n_batch = 256;
    if (d.n_batch > d.n_ctx) d.n_batch = d.n_ctx;
    if (d.n_threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        d.n_threads = n > 0 ? (int)(n > 256 ? 256 : n) : 1;
    }
    if (d.n_threads > 1024) return ai_err_set(err, AI_ERR_RANGE, "model_ctx: n_threads %d > 1024", d.n_threads);
    if (!d.backend && d.kv_cache_dtype != RUNNER_KV_AUTO && d.kv_cache_dtype != RUNNER_KV_F16 &&
        d.kv_cache_dtype != RUNNER_KV_F32)
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "model_ctx: a %s KV cache needs a backend (the paged runner)",
                          runner_kv_dtype_name((runner_kv_dtype)d.kv_cache_dtype));

    model_ctx *x = calloc(1, sizeof *x);
    if (!x) return ai_err_set(err, AI_ERR_NOMEM, "model_ctx: out of memory");
    x->m = m;
    x->n_ctx = d.n_ctx;
    x->n_batch = d.n_batch;
    x->all_logits = d.all_logits;
    x->isa = cpu_isa_best();
    ai_status st;
    if (d.backend) {
        if ((st = ctx_init_backend(x, m, &d, err)) != AI_OK) goto fail;
        if ((st = threadpool_init(&x->pool, 1, err)) != AI_OK) goto fail;
        *out = x;
        return AI_OK;
    }

    size_t work = 0;
    for (int il = 0; il < c->n_layer; il++) {
        const model_layer *L = &m->layers[il];
        const model_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t j = 0; j < sizeof ws / sizeof ws[0]; j++)
            if ((st = add_work(ws[j], d.n_batch, &work, err)) != AI_OK) goto fail;
    }
    int64_t n_logit_rows = d.all_logits ? d.n_batch : 1;
    if ((st = add_work(&m->output, n_logit_rows, &work, err)) != AI_OK) goto fail;

    /* All products below are of numbers bounded in config.c (dims <= 2^16..2^20, layers <= 4096,
     * ctx <= 2^24) and so fit in size_t on a 64-bit host; the total is checked against SIZE_MAX / 2. */
    size_t kvd = (size_t)c->n_head_kv * (size_t)c->head_dim, kvdv = (size_t)c->n_head_kv * (size_t)c->head_dim_v;
    size_t nb = (size_t)d.n_batch, f = sizeof(float), fk = d.kv_f16 ? sizeof(uint16_t) : sizeof(float);
    x->kv_f16 = d.kv_f16;
    size_t sz[13] = {
        (size_t)c->n_layer * (size_t)d.n_ctx * kvd * fk,            /* k_cache */
        (size_t)c->n_layer * (size_t)d.n_ctx * kvdv * fk,           /* v_cache */
        nb * (size_t)c->dim * f,                                    /* x */
        nb * (size_t)(c->dim > c->n_ff ? c->dim : c->n_ff) * f,     /* xn */
        nb * (size_t)c->n_head * (size_t)c->head_dim * f,           /* q */
        nb * (size_t)c->n_head * (size_t)c->head_dim_v * f,         /* att */
        nb * (size_t)c->n_ff * f,                                   /* gate */
        nb * (size_t)c->n_ff * f,                                   /* up */
        (size_t)d.n_threads * (size_t)d.n_ctx * f,                  /* scores */
        (size_t)n_logit_rows * (size_t)c->n_vocab * f,              /* logits */
        (size_t)(c->rope_dim / 2) * f,                              /* rope factors */
        work,
        d.kv_f16 ? nb * (kvd + kvdv) * f : 0,                       /* kv_new */
    };
    size_t total = 0;
    for (int i = 0; i < 13; i++) {
        if (sz[i] > SIZE_MAX / 4 || total > SIZE_MAX / 4) {
            st = ai_err_set(err, AI_ERR_RANGE, "model_ctx: memory plan overflows");
            goto fail;
        }
        total += align64(sz[i]);
    }
    x->mem = aligned_alloc(64, total);
    if (!x->mem) {
        st = ai_err_set(err, AI_ERR_NOMEM, "model_ctx: cannot allocate %zu bytes (KV cache %zu for n_ctx %d)", total,
                        sz[0] + sz[1], d.n_ctx);
        goto fail;
    }
    x->mem_bytes = total;
    char *base = x->mem;
    void *ptrs[13];
    for (int i = 0; i < 13; i++) {
        ptrs[i] = base;
        base += align64(sz[i]);
    }
    x->k_cache = ptrs[0]; x->v_cache = ptrs[1]; x->x = ptrs[2]; x->xn = ptrs[3]; x->q = ptrs[4];
    x->att = ptrs[5]; x->gate = ptrs[6]; x->up = ptrs[7]; x->scores = ptrs[8]; x->logits = ptrs[9];
    x->work = work ? ptrs[11] : NULL;
    x->work_size = work;
    x->kv_new = d.kv_f16 ? ptrs[12] : NULL;
    if (m->rope_freqs.data) {
        x->rope_factors = ptrs[10];
        memcpy(x->rope_factors, m->rope_freqs.data, sz[10]);
    } else if (c->rope_scaling == MODEL_ROPE_SCALING_LLAMA3) {
        x->rope_factors = ptrs[10];
        model_rope_llama3_factors(c, x->rope_factors);
    }
    if ((st = threadpool_init(&x->pool, d.n_threads, err)) != AI_OK) goto fail;
    *out = x;
    return AI_OK;
fail:
    model_ctx_free(x);
    return st;
}

void model_ctx_free(model_ctx *c)
{
    if (!c) return;
    threadpool_free(c->pool);
    runner_free(c->run);
    free(c->block_table);
    free(c->mem);
    free(c);
}

const model *model_ctx_model(const model_ctx *c) { return c->m; }
int32_t model_ctx_n_ctx(const model_ctx *c) { return c->n_ctx; }
int32_t model_ctx_n_batch(const model_ctx *c) { return c->n_batch; }
int model_ctx_n_threads(const model_ctx *c) { return threadpool_n_threads(c->pool); }
size_t model_ctx_bytes(const model_ctx *c) { return c->mem_bytes; }

const float *model_logits(const model_ctx *c, int32_t *n_rows)
{
    if (n_rows) *n_rows = c->n_logit_rows;
    return c->logits;
}

// --- attention job ----------------------------------------------------------------

typedef struct attn_job {
    const model_config *c;
    const float *q;          /* (n, n_head * head_dim) */
    const void *kc, *vc;     /* this layer's cache (n_ctx, kv dims), f32 or f16 */
    bool f16;
    bool batched;            /* >= 2 tokens in this forward: llama.cpp's sgemm order (ops_ggml.c) */
    float *att;              /* (n, n_head * head_dim_v) */
    float *scores;           /* (n_threads, n_ctx) */
    int32_t n_ctx, pos;
    float scale;
} attn_job;

static void attn_task(void *ctx, int64_t task, int thread)
{
    const attn_job *j = ctx;
    const model_config *c = j->c;
    int32_t t = (int32_t)(task / c->n_head), h = (int32_t)(task % c->n_head);
    int32_t kvh = h / (c->n_head / c->n_head_kv);
    int64_t kvd = (int64_t)c->n_head_kv * c->head_dim, kvdv = (int64_t)c->n_head_kv * c->head_dim_v;
    float *out = j->att + ((int64_t)t * c->n_head + h) * c->head_dim_v;
    const float *q = j->q + ((int64_t)t * c->n_head + h) * c->head_dim;
    float *scores = j->scores + (int64_t)thread * j->n_ctx;
    if (j->f16)
        model_attend_f16_ggml(out, q, (const uint16_t *)j->kc + (int64_t)kvh * c->head_dim,
                              (const uint16_t *)j->vc + (int64_t)kvh * c->head_dim_v, j->pos + t + 1, c->head_dim,
                              c->head_dim_v, kvd, kvdv, j->scale, scores, j->batched);
    else
        model_attend(out, q, (const float *)j->kc + (int64_t)kvh * c->head_dim,
                     (const float *)j->vc + (int64_t)kvh * c->head_dim_v, j->pos + t + 1, c->head_dim, c->head_dim_v,
                     kvd, kvdv, j->scale, scores);
}

// --- forward ----------------------------------------------------------------------

static ai_status matmul(model_ctx *x, const model_weight *w, const float *in, int64_t n_tok, float *out, ai_err *err)
{
    return cpu_matmul(x->pool, x->isa, w->type, w->data, w->n_out, w->n_in, in, n_tok, out, x->work, x->work_size,
                      err);
}

static void add_bias(float *y, const model_weight *b, int32_t n)
{
    if (!b->data) return;
    const float *bb = b->data;
    for (int32_t t = 0; t < n; t++)
        for (int64_t i = 0; i < b->n_in; i++) y[t * b->n_in + i] += bb[i];
}

ai_status model_forward(model_ctx *x, const int32_t *tokens, int32_t n, int32_t pos, ai_err *err)
{
    const model *m = x->m;
    const model_config *c = &m->cfg;
    if (n < 1 || n > x->n_batch)
        return ai_err_set(err, AI_ERR_INVALID, "model_forward: %d tokens, expected 1..%d per call", n, x->n_batch);
    if (pos < 0 || pos > x->n_ctx - n)
        return ai_err_set(err, AI_ERR_RANGE, "model_forward: positions [%d, %d) exceed the context of %d tokens", pos,
                          pos + n, x->n_ctx);
    ai_status st;
    if (x->run) {
        runner_seq s = {.tokens = tokens, .q_len = n, .seq_len = pos + n, .block_table = x->block_table};
        if ((st = runner_step(x->run, &s, 1, NULL, err)) != AI_OK) return st;
        x->n_logit_rows = 1;
        return runner_logits(x->run, x->logits, 1, err);
    }
    const int64_t dim = c->dim, qd = (int64_t)c->n_head * c->head_dim;
    const int64_t kvd = (int64_t)c->n_head_kv * c->head_dim, kvdv = (int64_t)c->n_head_kv * c->head_dim_v;
    const size_t emb_row = m->tok_embd.nbytes / (size_t)c->n_vocab;
    for (int32_t t = 0; t < n; t++) {
        if (tokens[t] < 0 || tokens[t] >= c->n_vocab)
            return ai_err_set(err, AI_ERR_RANGE, "model_forward: token id %d at %d is outside the vocabulary [0, %d)",
                              tokens[t], t, c->n_vocab);
        const char *row = (const char *)m->tok_embd.data + (size_t)tokens[t] * emb_row;
        if ((st = dtype_dequantize_row(m->tok_embd.type, row, x->x + t * dim, dim, err)) != AI_OK) return st;
    }
    float freq_scale = c->rope_scaling == MODEL_ROPE_SCALING_LINEAR ? 1.0f / c->rope_factor : 1.0f;
    attn_job aj = {.c = c, .q = x->q, .att = x->att, .scores = x->scores, .n_ctx = x->n_ctx, .pos = pos, .f16 = x->kv_f16,
                   .batched = n >= 2,
                   .scale = 1.0f / sqrtf((float)c->head_dim)};

    for (int32_t il = 0; il < c->n_layer; il++) {
        const model_layer *L = &m->layers[il];
        size_t es = x->kv_f16 ? sizeof(uint16_t) : sizeof(float);
        char *kc = (char *)x->k_cache + (size_t)il * (size_t)x->n_ctx * (size_t)kvd * es;
        char *vc = (char *)x->v_cache + (size_t)il * (size_t)x->n_ctx * (size_t)kvdv * es;
        /* new K/V rows: straight into an f32 cache, or into kv_new for conversion to f16 */
        float *k = x->kv_f16 ? x->kv_new : (float *)(kc + (size_t)pos * (size_t)kvd * es);
        float *v = x->kv_f16 ? x->kv_new + (size_t)n * (size_t)kvd : (float *)(vc + (size_t)pos * (size_t)kvdv * es);

        for (int32_t t = 0; t < n; t++) model_rmsnorm(x->xn + t * dim, x->x + t * dim, L->attn_norm.data, dim, c->norm_eps);
        if ((st = matmul(x, &L->wq, x->xn, n, x->q, err)) != AI_OK) return st;
        if ((st = matmul(x, &L->wk, x->xn, n, k, err)) != AI_OK) return st;
        if ((st = matmul(x, &L->wv, x->xn, n, v, err)) != AI_OK) return st;
        add_bias(x->q, &L->bq, n);
        add_bias(k, &L->bk, n);
        add_bias(v, &L->bv, n);
        for (int32_t t = 0; t < n; t++) {
            float *qt = x->q + t * qd, *kt = k + t * kvd;
            if (L->q_norm.data) {
                for (int32_t h = 0; h < c->n_head; h++)
                    model_rmsnorm(qt + h * c->head_dim, qt + h * c->head_dim, L->q_norm.data, c->head_dim, c->norm_eps);
                for (int32_t h = 0; h < c->n_head_kv; h++)
                    model_rmsnorm(kt + h * c->head_dim, kt + h * c->head_dim, L->k_norm.data, c->head_dim, c->norm_eps);
            }
            model_rope(qt, c->n_head, c->head_dim, c->rope_dim, pos + t, c->rope_base, freq_scale, x->rope_factors,
                       c->rope_kind);
            model_rope(kt, c->n_head_kv, c->head_dim, c->rope_dim, pos + t, c->rope_base, freq_scale, x->rope_factors,
                       c->rope_kind);
        }
        if (x->kv_f16) { /* llama.cpp rounds K, V (stored) and Q (before the f16 products) to f16 */
            dtype_f32_to_f16_row(k, (uint16_t *)kc + (size_t)pos * (size_t)kvd, (int64_t)n * kvd);
            dtype_f32_to_f16_row(v, (uint16_t *)vc + (size_t)pos * (size_t)kvdv, (int64_t)n * kvdv);
            for (int64_t i = 0; i < (int64_t)n * qd; i++) x->q[i] = dtype_f16_to_f32(dtype_f32_to_f16(x->q[i]));
        }
        aj.kc = kc;
        aj.vc = vc;
        threadpool_run(x->pool, (int64_t)n * c->n_head, attn_task, &aj);
        if ((st = matmul(x, &L->wo, x->att, n, x->xn, err)) != AI_OK) return st;
        for (int64_t i = 0; i < n * dim; i++) x->x[i] += x->xn[i];

        for (int32_t t = 0; t < n; t++) model_rmsnorm(x->xn + t * dim, x->x + t * dim, L->ffn_norm.data, dim, c->norm_eps);
        if ((st = matmul(x, &L->w_gate, x->xn, n, x->gate, err)) != AI_OK) return st;
        if ((st = matmul(x, &L->w_up, x->xn, n, x->up, err)) != AI_OK) return st;
        model_swiglu(x->gate, x->up, (int64_t)n * c->n_ff);
        if ((st = matmul(x, &L->w_down, x->gate, n, x->xn, err)) != AI_OK) return st;
        for (int64_t i = 0; i < n * dim; i++) x->x[i] += x->xn[i];
    }

    int32_t first = x->all_logits ? 0 : n - 1, rows = n - first;
    for (int32_t t = 0; t < rows; t++)
        model_rmsnorm(x->xn + t * dim, x->x + (first + t) * dim, m->output_norm.data, dim, c->norm_eps);
    if ((st = matmul(x, &m->output, x->xn, rows, x->logits, err)) != AI_OK) return st;
    x->n_logit_rows = rows;
    return AI_OK;
}
