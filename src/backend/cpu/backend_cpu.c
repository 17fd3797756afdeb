/* backend_cpu.c - the CPU implementation of the backend op table (include/aiinfra/backend.h).
 *
 * Memory is host memory; ops run synchronously on the calling thread and the backend's thread
 * pool (matmuls and attention), so upload/download are memcpy and sync does nothing. Weights of a
 * model stay in its mmap (no weight_upload): the matmuls read the GGUF rows in place.
 * Attention walks each sequence's block table: for the token at position p, key j lives in cache
 * row block_tables[s][j / block_size] * block_size + j % block_size (softmax in f32, as
 * model_attend does for the contiguous cache).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "aiinfra/backend.h"
#include "aiinfra/cpu_kernels.h"
#include "aiinfra/fp8.h"
#include "aiinfra/model.h"
#include "aiinfra/threadpool.h"
#include "model/model_internal.h"

typedef struct cpu_be {
    threadpool *pool;
    cpu_isa isa;
    dtype_f16_row_fn f16_row; /* picked once: the per-call CPUID check costs a VM exit */
    void *work;        /* matmul scratch (quantized activations), grown by matmul_reserve */
    size_t work_size;
    float *pre;        /* matmul_ex: the prologue's input (max_tok, n_in), grown by matmul_reserve */
    float *acc;        /* matmul_ex: the product before it is added into y (max_tok, n_out) */
    size_t pre_n, acc_n; /* floats */
} cpu_be;

static void cb_free(void *ctx)
{
    cpu_be *b = ctx;
    threadpool_free(b->pool);
    free(b->work);
    free(b->pre);
    free(b->acc);
    free(b);
}

static ai_status cb_alloc(void *ctx, size_t bytes, void **out, ai_err *err)
{
    *out = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!*out) return ai_err_set(err, AI_ERR_NOMEM, "cpu backend: cannot allocate %zu bytes", bytes);
    return AI_OK;
}
static void cb_dealloc(void *ctx, void *p) { free(p); }
static ai_status cb_copy(void *ctx, void *dst, const void *src, size_t bytes, ai_err *err)
{
    memcpy(dst, src, bytes);
    return AI_OK;
}
static ai_status cb_sync(void *ctx, ai_err *err) { return AI_OK; }
static size_t cb_mem_free(void *ctx) { return 0; }

static size_t cb_weight_bytes(void *ctx, dtype t, int64_t n_out, int64_t n_in)
{
    size_t row = 0;
    if (dtype_row_bytes(t, n_in, &row, NULL) != AI_OK) return 0;
    return row * (size_t)n_out;
}

static uint64_t splitmix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static ai_status cb_weight_random(void *ctx, const backend_weight *w, uint64_t seed, float scale, ai_err *err)
{
    size_t row = cb_weight_bytes(ctx, w->type, 1, w->n_in);
    float *tmp = malloc((size_t)w->n_in * sizeof(float));
    if (!tmp) return ai_err_set(err, AI_ERR_NOMEM, "cpu backend: out of memory");
    ai_status st = AI_OK;
    for (int64_t r = 0; r < w->n_out && st == AI_OK; r++) {
        for (int64_t i = 0; i < w->n_in; i++) {
            uint64_t h = splitmix(seed ^ splitmix((uint64_t)(r * w->n_in + i)));
            tmp[i] = scale * ((float)(h >> 40) / (float)(1 << 23) - 1.0f);
        }
        st = dtype_quantize_row(w->type, tmp, (char *)w->data + (size_t)r * row, w->n_in, err);
    }
    free(tmp);
    return st;
}

static ai_status cb_fill_f32(void *ctx, float *dst, int64_t n, float value, ai_err *err)
{
    for (int64_t i = 0; i < n; i++) dst[i] = value;
    return AI_OK;
}

static ai_status cb_embed(void *ctx, float *out, const backend_weight *table, const int32_t *tokens, int32_t n,
                          ai_err *err)
{
    size_t row = cb_weight_bytes(ctx, table->type, 1, table->n_in);
    for (int32_t t = 0; t < n; t++) {
        ai_status st = dtype_dequantize_row(table->type, (const char *)table->data + (size_t)tokens[t] * row,
                                            out + (size_t)t * (size_t)table->n_in, table->n_in, err);
        if (st != AI_OK) return st;
    }
    return AI_OK;
}

static ai_status cb_rmsnorm(void *ctx, float *out, const float *in, const float *w, int32_t rows, int32_t dim,
                           float eps, ai_err *err)
{
    for (int32_t r = 0; r < rows; r++) model_rmsnorm(out + (size_t)r * dim, in + (size_t)r * dim, w, dim, eps);
    return AI_OK;
}

static ai_status cb_add_rmsnorm(void *ctx, float *x, const float *delta, float *out, const float *w, int32_t rows,
                               int32_t dim, float eps, ai_err *err)
{
    for (size_t i = 0; i < (size_t)rows * (size_t)dim; i++) x[i] += delta[i];
    return cb_rmsnorm(ctx, out, x, w, rows, dim, eps, err);
}

static ai_status cb_add_bias(void *ctx, float *y, const float *b, int32_t rows, int32_t n, int64_t row_stride,
                             ai_err *err)
{
    for (int32_t r = 0; r < rows; r++)
        for (int32_t i = 0; i < n; i++) y[r * row_stride + i] += b[i];
    return AI_OK;
}

static ai_status cb_rope(void *ctx, float *x, int32_t n_tok, int32_t n_heads, int64_t row_stride, int32_t head_dim,
                         int32_t rope_dim, const int32_t *pos, float base, float freq_scale, const float *factors,
                         int neox, ai_err *err)
{
    for (int32_t t = 0; t < n_tok; t++)
        model_rope(x + t * row_stride, n_heads, head_dim, rope_dim, pos[t], base, freq_scale, factors,
                   neox ? MODEL_ROPE_NEOX : MODEL_ROPE_NORM);
    return AI_OK;
}

static ai_status cb_swiglu(void *ctx, float *out, const float *gate, const float *up, int64_t n, ai_err *err)
{
    if (out != gate) memcpy(out, gate, (size_t)n * sizeof(float));
    model_swiglu(out, up, n);
    return AI_OK;
}

static ai_status cb_swiglu_rows(void *ctx, float *out, const float *gu, int32_t rows, int32_t n, ai_err *err)
{
    for (int32_t r = 0; r < rows; r++) {
        const float *g = gu + (size_t)r * 2 * (size_t)n;
        float *o = out + (size_t)r * (size_t)n;
        memmove(o, g, (size_t)n * sizeof(float));
        model_swiglu(o, g + n, n);
    }
    return AI_OK;
}

static ai_status cb_kv_store(void *ctx, void *k_cache, void *v_cache, dtype kv_type, float k_scale, float v_scale,
                             const float *k, int64_t k_stride, const float *v, int64_t v_stride, int32_t n_tok,
                             int32_t kvd, int32_t kvdv, const int32_t *slot, ai_err *err)
{
    for (int32_t t = 0; t < n_tok; t++) {
        if (slot[t] < 0) continue;
        size_t s = (size_t)slot[t];
        if (kv_type == DTYPE_F8_E4M3) {
            fp8_e4m3_quantize_row(k + t * k_stride, (uint8_t *)k_cache + s * (size_t)kvd, kvd, k_scale);
            fp8_e4m3_quantize_row(v + t * v_stride, (uint8_t *)v_cache + s * (size_t)kvdv, kvdv, v_scale);
        } else if (kv_type == DTYPE_F16) {
            dtype_f32_to_f16_row(k + t * k_stride, (uint16_t *)k_cache + s * (size_t)kvd, kvd);
            dtype_f32_to_f16_row(v + t * v_stride, (uint16_t *)v_cache + s * (size_t)kvdv, kvdv);
        } else {
            memcpy((float *)k_cache + s * (size_t)kvd, k + t * k_stride, (size_t)kvd * sizeof(float));
            memcpy((float *)v_cache + s * (size_t)kvdv, v + t * v_stride, (size_t)kvdv * sizeof(float));
        }
    }
    return AI_OK;
}

static ai_status cb_rope_store(void *ctx, float *q, int64_t q_stride, float *k, int64_t k_stride, const float *v,
                               int64_t v_stride, int32_t n_tok, const backend_rope_kv *rk, ai_err *err)
{
    cb_rope(ctx, q, n_tok, rk->n_head, q_stride, rk->head_dim, rk->rope_dim, rk->pos, rk->base, rk->freq_scale,
            rk->factors, rk->neox, err);
    cb_rope(ctx, k, n_tok, rk->n_head_kv, k_stride, rk->head_dim, rk->rope_dim, rk->pos, rk->base, rk->freq_scale,
            rk->factors, rk->neox, err);
    return cb_kv_store(ctx, rk->k_cache, rk->v_cache, rk->kv_type, rk->k_scale, rk->v_scale, k, k_stride, v, v_stride,
                       n_tok, rk->n_head_kv * rk->head_dim, rk->n_head_kv * rk->head_dim_v, rk->slot, err);
}

static ai_status cb_gather_rows(void *ctx, float *out, const float *in, const int32_t *idx, int32_t n, int32_t dim,
                                ai_err *err)
{
    for (int32_t i = 0; i < n; i++) memcpy(out + (size_t)i * dim, in + (size_t)idx[i] * dim, (size_t)dim * sizeof(float));
    return AI_OK;
}

/* Grows *buf to n floats (set-up only). */
static ai_status grow_f32(float **buf, size_t *have, size_t n, ai_err *err)
{
    if (n <= *have) return AI_OK;
    float *p = malloc(n * sizeof(float));
    if (!p) return ai_err_set(err, AI_ERR_NOMEM, "cpu backend: cannot allocate %zu floats of matmul_ex scratch", n);
    free(*buf);
    *buf = p;
    *have = n;
    return AI_OK;
}

static ai_status cb_matmul_reserve(void *ctx, const backend_weight *w, int32_t max_tok, ai_err *err)
{
    cpu_be *b = ctx;
    size_t need;
    ai_status st = cpu_matmul_work_size(w->type, w->n_in, max_tok, &need, err);
    if (st == AI_OK) st = grow_f32(&b->pre, &b->pre_n, (size_t)max_tok * (size_t)w->n_in, err);
    if (st == AI_OK) st = grow_f32(&b->acc, &b->acc_n, (size_t)max_tok * (size_t)w->n_out, err);
    if (st != AI_OK || need <= b->work_size) return st;
    void *p = aligned_alloc(64, (need + 63) & ~(size_t)63);
    if (!p) return ai_err_set(err, AI_ERR_NOMEM, "cpu backend: cannot allocate %zu bytes of matmul scratch", need);
    free(b->work);
    b->work = p;
    b->work_size = need;
    return AI_OK;
}

static ai_status cb_matmul(void *ctx, const backend_weight *w, const float *x, int32_t n_tok, float *y, ai_err *err)
{
    cpu_be *b = ctx;
    return cpu_matmul(b->pool, b->isa, w->type, w->data, w->n_out, w->n_in, x, n_tok, y, b->work, b->work_size, err);
}

/* The composition the fused GPU kernels must match: rmsnorm or swiglu_rows into `pre` (in_ss: x times
 * its row's 1 / rms), the matmul (into `acc` when accumulating or with the swiglu epilogue), then
 * y += acc or y = swiglu_rows(acc), then (out_xn) y * out_nw and the rows' sum of y^2 in double. The
 * norm and SwiGLU options are the same ops in the same order as the unfused sequence, so the CPU
 * forward with them is bit-for-bit what it was before matmul_ex. */
static ai_status cb_matmul_ex(void *ctx, const backend_weight *w, const float *x, int32_t n_tok, float *y,
                              const backend_mm_opts *o, ai_err *err)
{
    cpu_be *b = ctx;
    if (!o) return cb_matmul(ctx, w, x, n_tok, y, err);
    if (o->norm_w && o->swiglu_in)
        return ai_err_set(err, AI_ERR_INVALID, "matmul_ex: the norm and swiglu prologues are exclusive");
    if (o->swiglu_out && (o->accumulate || w->n_out % 2))
        return ai_err_set(err, AI_ERR_INVALID, "matmul_ex: the swiglu epilogue needs an even n_out and no accumulate");
    if (o->in_ss && (o->norm_w || o->swiglu_in))
        return ai_err_set(err, AI_ERR_INVALID, "matmul_ex: in_ss takes a finished input (no norm or swiglu prologue)");
    if (o->out_xn && (!o->out_nw || !o->out_ss || o->swiglu_out))
        return ai_err_set(err, AI_ERR_INVALID, "matmul_ex: out_xn needs out_nw and out_ss (and no swiglu epilogue)");
    if (o->rope_kv && !backend_rope_kv_fits(o, w->n_out))
        return ai_err_set(err, AI_ERR_INVALID, "matmul_ex: rope_kv needs q|k|v rows (n_out %lld) and no accumulate, "
                          "swiglu or out_xn epilogue", (long long)w->n_out);
    const bool pro = o->norm_w || o->swiglu_in || o->in_ss, via_acc = o->accumulate || o->swiglu_out;
    const size_t nin = (size_t)n_tok * (size_t)w->n_in, nout = (size_t)n_tok * (size_t)w->n_out;
    if (n_tok < 1 || (pro && nin > b->pre_n) || (via_acc && nout > b->acc_n))
        return ai_err_set(err, AI_ERR_INVALID, "matmul_ex: %d rows of %lld -> %lld: scratch not reserved (matmul_reserve)",
                          n_tok, (long long)w->n_in, (long long)w->n_out);
    const float *in = x;
    if (o->norm_w) cb_rmsnorm(ctx, b->pre, x, o->norm_w, n_tok, (int32_t)w->n_in, o->eps, err);
    else if (o->swiglu_in) cb_swiglu_rows(ctx, b->pre, x, n_tok, (int32_t)w->n_in, err);
    else if (o->in_ss)
        for (int32_t t = 0; t < n_tok; t++) {
            double ss = 0;
            for (int j = 0; j < BACKEND_SS_LANES; j++) ss += o->in_ss[(size_t)t * BACKEND_SS_LANES + j];
            const float r = 1.0f / sqrtf((float)(ss / (double)w->n_in) + o->eps);
            for (int64_t i = 0; i < w->n_in; i++) b->pre[t * w->n_in + i] = x[t * w->n_in + i] * r;
        }
    if (pro) in = b->pre;
    float *out = via_acc ? b->acc : y;
    ai_status st = cb_matmul(ctx, w, in, n_tok, out, err);
    if (st != AI_OK) return st;
    if (o->swiglu_out) return cb_swiglu_rows(ctx, y, out, n_tok, (int32_t)(w->n_out / 2), err);
    if (via_acc)
        for (size_t i = 0; i < nout; i++) y[i] += out[i];
    if (o->out_xn)
        for (int32_t t = 0; t < n_tok; t++) {
            const float *yr = y + t * w->n_out;
            double ss = 0;
            for (int64_t i = 0; i < w->n_out; i++) {
                ss += (double)yr[i] * yr[i];
                o->out_xn[t * w->n_out + i] = yr[i] * o->out_nw[i];
            }
            o->out_ss[(size_t)t * BACKEND_SS_LANES] += ss;
        }
    if (o->rope_kv) {
        const backend_rope_kv *rk = o->rope_kv;
        const int64_t qd = (int64_t)rk->n_head * rk->head_dim, kvd = (int64_t)rk->n_head_kv * rk->head_dim;
        return cb_rope_store(ctx, y, w->n_out, y + qd, w->n_out, y + qd + kvd, w->n_out, n_tok, rk, err);
    }
    return AI_OK;
}

// --- paged attention ------------------------------------------------------------------------


/* One (query token, head) per task. Each thread's scratch: scores (max_seq_len), then one K row and one V
 * row converted to f32 (F16C through dtype_f16_to_f32_row for an f16 cache; for fp8 a lookup in a
 * 256-entry table per tensor that has the scale folded in), so the products run on the vectorized f32
 * dot of the CPU kernels instead of a scalar conversion per element. */
typedef struct attn_ctx {
    const backend_attn *a;
    cpu_dot_fn dot;
    dtype_f16_row_fn f16_row;
    float k_tab[256], v_tab[256]; /* fp8 cache: decode(code) * k_scale / v_scale */
} attn_ctx;

static size_t attn_stride(const backend_attn *a) { return (size_t)a->max_seq_len + (size_t)a->head_dim + (size_t)a->head_dim_v; }

static const float *kv_row(const attn_ctx *c, const void *cache, size_t base, int32_t n, float *buf,
                           const float *fp8_tab)
{
    if (c->a->kv_type == DTYPE_F32) return (const float *)cache + base;
    if (c->a->kv_type == DTYPE_F8_E4M3) {
        fp8_e4m3_dequantize_row(fp8_tab, (const uint8_t *)cache + base, buf, n);
        return buf;
    }
    c->f16_row((const uint16_t *)cache + base, buf, n);
    return buf;
}

static void attn_task(void *ctx, int64_t task, int thread)
{
    const attn_ctx *c = ctx;
    const backend_attn *a = c->a;
    int32_t t = (int32_t)(task / a->n_head), h = (int32_t)(task % a->n_head);
    int32_t lo = 0, hi = a->n_seq - 1; /* the sequence s with q_start[s] <= t < q_start[s+1] */
    while (lo < hi) {
        int32_t mid = (lo + hi + 1) / 2;
        if (a->q_start[mid] <= t) lo = mid;
        else hi = mid - 1;
    }
    int32_t s = lo, q_len = a->q_start[s + 1] - a->q_start[s];
    int32_t p = a->seq_len[s] - q_len + (t - a->q_start[s]);
    int32_t kvh = h / (a->n_head / a->n_head_kv);
    size_t kvd = (size_t)a->n_head_kv * (size_t)a->head_dim, kvdv = (size_t)a->n_head_kv * (size_t)a->head_dim_v;
    const float *q = a->q + t * a->q_stride + (int64_t)h * a->head_dim;
    float *out = a->out + ((int64_t)t * a->n_head + h) * a->head_dim_v;
    float *scores = (float *)a->work + (size_t)thread * attn_stride(a);
    float *kbuf = scores + a->max_seq_len, *vbuf = kbuf + a->head_dim;
    const int32_t *bt = a->block_tables + (size_t)s * (size_t)a->max_blocks;
    float mx = -INFINITY;
    for (int32_t j = 0; j <= p; j++) {
        size_t row = (size_t)bt[j / a->block_size] * (size_t)a->block_size + (size_t)(j % a->block_size);
        const float *k = kv_row(c, a->k_cache, row * kvd + (size_t)kvh * (size_t)a->head_dim, a->head_dim, kbuf, c->k_tab);
        scores[j] = c->dot(a->head_dim, k, q) * a->scale;
        if (scores[j] > mx) mx = scores[j];
    }
    float sum = 0;
    for (int32_t j = 0; j <= p; j++) {
        scores[j] = expf(scores[j] - mx);
        sum += scores[j];
    }
    for (int32_t i = 0; i < a->head_dim_v; i++) out[i] = 0;
    for (int32_t j = 0; j <= p; j++) {
        size_t row = (size_t)bt[j / a->block_size] * (size_t)a->block_size + (size_t)(j % a->block_size);
        const float *v = kv_row(c, a->v_cache, row * kvdv + (size_t)kvh * (size_t)a->head_dim_v,
                                a->head_dim_v, vbuf, c->v_tab);
        float w = scores[j] / sum;
        for (int32_t i = 0; i < a->head_dim_v; i++) out[i] += w * v[i];
    }
}

static bool cb_kv_type_ok(void *ctx, dtype t) { return t == DTYPE_F16 || t == DTYPE_F32 || t == DTYPE_F8_E4M3; }

static size_t cb_attention_work_size(void *ctx, const backend_attn *a)
{
    cpu_be *b = ctx;
    return (size_t)threadpool_n_threads(b->pool) * attn_stride(a) * sizeof(float);
}

static ai_status cb_attention(void *ctx, const backend_attn *a, ai_err *err)
{
    cpu_be *b = ctx;
    if (a->work_size < cb_attention_work_size(ctx, a))
        return ai_err_set(err, AI_ERR_INVALID, "cpu attention: work of %zu bytes is too small", a->work_size);
    if (!cb_kv_type_ok(ctx, a->kv_type))
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "cpu attention: KV dtype %s", dtype_name(a->kv_type));
    attn_ctx c = {.a = a, .dot = cpu_dot_get(b->isa, DTYPE_F32), .f16_row = b->f16_row};
    if (!c.dot) c.dot = cpu_dot_get(CPU_ISA_SCALAR, DTYPE_F32);
    if (a->kv_type == DTYPE_F8_E4M3) {
        fp8_e4m3_table(a->k_scale, c.k_tab);
        fp8_e4m3_table(a->v_scale, c.v_tab);
    }
    threadpool_run(b->pool, (int64_t)a->n_tok * a->n_head, attn_task, &c);
    return AI_OK;
}

static ai_status cb_argmax(void *ctx, const float *logits, int32_t n_rows, int32_t n_vocab, int32_t *out, ai_err *err)
{
    for (int32_t r = 0; r < n_rows; r++) {
        const float *l = logits + (size_t)r * (size_t)n_vocab;
        int32_t best = 0;
        for (int32_t i = 1; i < n_vocab; i++)
            if (l[i] > l[best]) best = i;
        out[r] = best;
    }
    return AI_OK;
}

static ai_status cb_run(void *ctx, uint64_t key, ai_status (*fn)(void *arg, ai_err *err), void *arg, ai_err *err)
{
    return fn(arg, err);
}

static double cb_elapsed_ms(void *ctx)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static ai_status cb_ceilings(void *ctx, double *copy_gbs, double *matmul_tflops, ai_err *err)
{
    size_t n = (size_t)256 << 20;
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b) {
        free(a);
        free(b);
        return ai_err_set(err, AI_ERR_NOMEM, "cpu ceilings: out of memory");
    }
    memset(a, 1, n);
    memset(b, 2, n);
    double best = 1e30;
    for (int i = 0; i < 5; i++) {
        double t0 = cb_elapsed_ms(ctx);
        memcpy(b, a, n);
        double t = cb_elapsed_ms(ctx) - t0;
        if (t < best) best = t;
    }
    *copy_gbs = 2.0 * (double)n / (best * 1e6);
    *matmul_tflops = 0;
    free(a);
    free(b);
    return AI_OK;
}

static const backend_ops cpu_ops = {
    .name = "cpu", .free = cb_free, .alloc = cb_alloc, .dealloc = cb_dealloc, .upload = cb_copy, .copy = cb_copy,
    .download = cb_copy, .sync = cb_sync, .mem_free = cb_mem_free, .weight_bytes = cb_weight_bytes,
    .weight_upload = NULL, .weight_random = cb_weight_random, .fill_f32 = cb_fill_f32, .embed = cb_embed,
    .rmsnorm = cb_rmsnorm, .add_rmsnorm = cb_add_rmsnorm, .add_bias = cb_add_bias,
    .swiglu = cb_swiglu, .swiglu_rows = cb_swiglu_rows, .gather_rows = cb_gather_rows, .rope_store = cb_rope_store, .matmul = cb_matmul, .matmul_ex = cb_matmul_ex,
    .matmul_reserve = cb_matmul_reserve, .kv_type_ok = cb_kv_type_ok, .attention_work_size = cb_attention_work_size,
    .attention = cb_attention, .argmax = cb_argmax, .run = cb_run, .elapsed_ms = cb_elapsed_ms, .ceilings = cb_ceilings,
};

ai_status backend_cpu_init(backend *out, int n_threads, ai_err *err)
{
    *out = (backend){0};
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)(n > 256 ? 256 : n) : 1;
    }
    cpu_be *b = calloc(1, sizeof *b);
    if (!b) return ai_err_set(err, AI_ERR_NOMEM, "cpu backend: out of memory");
    b->isa = cpu_isa_best();
    b->f16_row = dtype_f16_to_f32_row_fn();
    ai_status st = threadpool_init(&b->pool, n_threads, err);
    if (st != AI_OK) {
        free(b);
        return st;
    }
    out->ops = &cpu_ops;
    out->ctx = b;
    return AI_OK;
}

void backend_free(backend *b)
{
    if (b && b->ops) b->ops->free(b->ctx);
    if (b) *b = (backend){0};
}
