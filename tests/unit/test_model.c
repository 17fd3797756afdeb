/* test_model.c - the Llama-family building blocks and the whole forward on tiny random models.
 *
 * References here share no code with src/model/: RoPE from the direct formula
 * theta_i = pos * base^(-2i/d) in double, RMSNorm and attention written plainly in double, and a
 * whole-model forward in double over the same f32 weights (no KV cache: it recomputes every
 * position). The tiny models are GGUF images written by this file (llama, qwen2 with biases, qwen3
 * with q/k norms), opened with gguf_open_memory, so config and shape errors can be provoked too.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "aiinfra/model.h"
#include "model/model_internal.h"

// --- helpers ------------------------------------------------------------------

static uint64_t lcg(uint64_t *x)
{
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return *x >> 11;
}
static float frand(uint64_t *x) { return (float)((double)lcg(x) * 0x1.0p-53 * 2.0 - 1.0); }

// --- a tiny GGUF writer ---------------------------------------------------------

typedef struct wbuf { uint8_t *p; size_t len, cap; } wbuf;
static void put(wbuf *w, const void *d, size_t n)
{
    if (w->len + n > w->cap) {
        w->cap = (w->len + n) * 2;
        w->p = realloc(w->p, w->cap);
        assert_non_null(w->p);
    }
    memcpy(w->p + w->len, d, n);
    w->len += n;
}
static void put_u32(wbuf *w, uint32_t v) { put(w, &v, 4); }
static void put_u64(wbuf *w, uint64_t v) { put(w, &v, 8); }
static void put_str(wbuf *w, const char *s) { put_u64(w, strlen(s)); put(w, s, strlen(s)); }
static void kv_u32(wbuf *w, const char *k, uint32_t v) { put_str(w, k); put_u32(w, 4); put_u32(w, v); }
static void kv_f32(wbuf *w, const char *k, float v) { put_str(w, k); put_u32(w, 6); put(w, &v, 4); }
static void kv_str(wbuf *w, const char *k, const char *v) { put_str(w, k); put_u32(w, 8); put_str(w, v); }

typedef struct tiny_cfg {
    const char *arch;
    int dim, n_head, n_head_kv, n_ff, n_layer, n_vocab, n_ctx;
    bool tied;
    const char *skip_key;     /* leave this metadata key out */
    const char *bad_tensor;   /* give this tensor a wrong shape */
} tiny_cfg;

typedef struct tensor_spec { char name[64]; int64_t ne0, ne1; float *data; } tensor_spec;

typedef struct tiny_model {
    tiny_cfg c;
    tensor_spec t[128];
    int n;
    wbuf img;
} tiny_model;

static float *add_tensor(tiny_model *m, uint64_t *rng, const char *name, int64_t ne0, int64_t ne1, float center)
{
    tensor_spec *t = &m->t[m->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ne0 = ne0;
    t->ne1 = ne1;
    t->data = malloc((size_t)(ne0 * ne1) * sizeof(float));
    for (int64_t i = 0; i < ne0 * ne1; i++) t->data[i] = center + 0.5f * frand(rng);
    return t->data;
}

static const float *find(const tiny_model *m, const char *name)
{
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->t[i].name, name)) return m->t[i].data;
    return NULL;
}

static void tiny_build(tiny_model *m, const tiny_cfg *c, uint64_t seed)
{
    memset(m, 0, sizeof *m);
    m->c = *c;
    uint64_t rng = seed;
    int hd = c->dim / c->n_head;
    char nm[64];
    add_tensor(m, &rng, "token_embd.weight", c->dim, c->n_vocab, 0.0f);
    add_tensor(m, &rng, "output_norm.weight", c->dim, 1, 1.0f);
    if (!c->tied) add_tensor(m, &rng, "output.weight", c->dim, c->n_vocab, 0.0f);
    for (int l = 0; l < c->n_layer; l++) {
#define T(suffix, a, b, center) do { snprintf(nm, sizeof nm, "blk.%d.%s", l, suffix); add_tensor(m, &rng, nm, a, b, center); } while (0)
        T("attn_norm.weight", c->dim, 1, 1.0f);
        T("attn_q.weight", c->dim, c->n_head * hd, 0.0f);
        T("attn_k.weight", c->dim, c->n_head_kv * hd, 0.0f);
        T("attn_v.weight", c->dim, c->n_head_kv * hd, 0.0f);
        T("attn_output.weight", c->n_head * hd, c->dim, 0.0f);
        if (!strcmp(c->arch, "qwen2")) {
            T("attn_q.bias", c->n_head * hd, 1, 0.0f);
            T("attn_k.bias", c->n_head_kv * hd, 1, 0.0f);
            T("attn_v.bias", c->n_head_kv * hd, 1, 0.0f);
        }
        if (!strcmp(c->arch, "qwen3")) {
            T("attn_q_norm.weight", hd, 1, 1.0f);
            T("attn_k_norm.weight", hd, 1, 1.0f);
        }
        T("ffn_norm.weight", c->dim, 1, 1.0f);
        T("ffn_gate.weight", c->dim, c->n_ff, 0.0f);
        T("ffn_up.weight", c->dim, c->n_ff, 0.0f);
        T("ffn_down.weight", c->n_ff, c->dim, 0.0f);
#undef T
    }
    /* metadata */
    wbuf kv = {0};
    int n_kv = 0;
    char k[96];
#define KEY(suffix) (snprintf(k, sizeof k, "%s.%s", c->arch, suffix), k)
#define SKIP(key) (c->skip_key && !strcmp(c->skip_key, key))
    kv_str(&kv, "general.architecture", c->arch); n_kv++;
    struct { const char *s; uint32_t v; } u[] = {
        {"context_length", (uint32_t)c->n_ctx}, {"embedding_length", (uint32_t)c->dim},
        {"block_count", (uint32_t)c->n_layer}, {"feed_forward_length", (uint32_t)c->n_ff},
        {"attention.head_count", (uint32_t)c->n_head}, {"attention.head_count_kv", (uint32_t)c->n_head_kv}};
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++)
        if (!SKIP(u[i].s)) { kv_u32(&kv, KEY(u[i].s), u[i].v); n_kv++; }
    if (!SKIP("attention.layer_norm_rms_epsilon")) { kv_f32(&kv, KEY("attention.layer_norm_rms_epsilon"), 1e-5f); n_kv++; }
    kv_f32(&kv, KEY("rope.freq_base"), 10000.0f); n_kv++;
#undef KEY
#undef SKIP
    /* tensor infos + data */
    wbuf *w = &m->img;
    put(w, "GGUF", 4);
    put_u32(w, 3);
    put_u64(w, (uint64_t)m->n);
    put_u64(w, (uint64_t)n_kv);
    put(w, kv.p, kv.len);
    free(kv.p);
    uint64_t off = 0;
    for (int i = 0; i < m->n; i++) {
        tensor_spec *t = &m->t[i];
        bool bad = c->bad_tensor && !strcmp(c->bad_tensor, t->name);
        put_str(w, t->name);
        put_u32(w, 2);
        put_u64(w, (uint64_t)t->ne0);
        put_u64(w, (uint64_t)(bad ? t->ne1 / 2 : t->ne1));
        put_u32(w, 0); /* f32 */
        put_u64(w, off);
        off += (uint64_t)((bad ? t->ne1 / 2 : t->ne1) * t->ne0 * 4);
        off = (off + 31) & ~(uint64_t)31;
    }
    static const uint8_t zeros[32];
    put(w, zeros, (32 - w->len % 32) % 32);
    for (int i = 0; i < m->n; i++) {
        tensor_spec *t = &m->t[i];
        bool bad = c->bad_tensor && !strcmp(c->bad_tensor, t->name);
        size_t nb = (size_t)((bad ? t->ne1 / 2 : t->ne1) * t->ne0 * 4);
        put(w, t->data, nb);
        put(w, zeros, (32 - nb % 32) % 32);
    }
}

static void tiny_free(tiny_model *m)
{
    for (int i = 0; i < m->n; i++) free(m->t[i].data);
    free(m->img.p);
}

static ai_status tiny_open(model **out, tiny_model *tm, ai_err *err)
{
    gguf *g;
    ai_status st = gguf_open_memory(&g, tm->img.p, tm->img.len, "tiny", err);
    if (st != AI_OK) return st;
    return model_from_gguf(out, g, "tiny", err);
}

// --- naive double-precision reference forward ---------------------------------------

static void ref_rmsnorm(double *y, const double *x, const float *w, int n)
{
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double s = 1.0 / sqrt(ss / n + 1e-5);
    for (int i = 0; i < n; i++) y[i] = x[i] * s * (w ? w[i] : 1.0);
}

static void ref_matvec(double *y, const float *W, const double *x, int n_out, int n_in)
{
    for (int o = 0; o < n_out; o++) {
        double s = 0;
        for (int i = 0; i < n_in; i++) s += (double)W[(size_t)o * n_in + i] * x[i];
        y[o] = s;
    }
}

static void ref_rope(double *v, int hd, int pos, bool neox)
{
    for (int i = 0; i < hd / 2; i++) {
        double th = pos * pow(10000.0, -2.0 * i / hd);
        int a = neox ? i : 2 * i, b = neox ? i + hd / 2 : 2 * i + 1;
        double x0 = v[a], x1 = v[b];
        v[a] = x0 * cos(th) - x1 * sin(th);
        v[b] = x0 * sin(th) + x1 * cos(th);
    }
}

/* Logits (n_vocab) of the last of tokens[0..n), recomputing every position (no cache). */
static void ref_forward(const tiny_model *tm, const int32_t *tokens, int n, double *logits)
{
    const tiny_cfg *c = &tm->c;
    int D = c->dim, H = c->n_head, KV = c->n_head_kv, hd = D / H, F = c->n_ff;
    bool neox = strcmp(c->arch, "llama") != 0, qwen2 = !strcmp(c->arch, "qwen2"), qwen3 = !strcmp(c->arch, "qwen3");
    double *x = calloc((size_t)n * D, sizeof *x), *h = malloc(sizeof(double) * D);
    double *q = malloc(sizeof(double) * (size_t)n * H * hd), *k = malloc(sizeof(double) * (size_t)n * KV * hd);
    double *v = malloc(sizeof(double) * (size_t)n * KV * hd), *att = malloc(sizeof(double) * H * hd);
    double *o = malloc(sizeof(double) * D), *g = malloc(sizeof(double) * F), *u = malloc(sizeof(double) * F);
    double *p = malloc(sizeof(double) * n);
    const float *emb = find(tm, "token_embd.weight");
    for (int t = 0; t < n; t++)
        for (int i = 0; i < D; i++) x[t * D + i] = emb[(size_t)tokens[t] * D + i];
    char nm[64];
    for (int l = 0; l < c->n_layer; l++) {
#define W(suffix) (snprintf(nm, sizeof nm, "blk.%d.%s", l, suffix), find(tm, nm))
        for (int t = 0; t < n; t++) {
            ref_rmsnorm(h, x + t * D, W("attn_norm.weight"), D);
            ref_matvec(q + t * H * hd, W("attn_q.weight"), h, H * hd, D);
            ref_matvec(k + t * KV * hd, W("attn_k.weight"), h, KV * hd, D);
            ref_matvec(v + t * KV * hd, W("attn_v.weight"), h, KV * hd, D);
            if (qwen2) {
                for (int i = 0; i < H * hd; i++) q[t * H * hd + i] += W("attn_q.bias")[i];
                for (int i = 0; i < KV * hd; i++) k[t * KV * hd + i] += W("attn_k.bias")[i];
                for (int i = 0; i < KV * hd; i++) v[t * KV * hd + i] += W("attn_v.bias")[i];
            }
            for (int hh = 0; hh < H; hh++) {
                if (qwen3) ref_rmsnorm(q + t * H * hd + hh * hd, q + t * H * hd + hh * hd, W("attn_q_norm.weight"), hd);
                ref_rope(q + t * H * hd + hh * hd, hd, t, neox);
            }
            for (int hh = 0; hh < KV; hh++) {
                if (qwen3) ref_rmsnorm(k + t * KV * hd + hh * hd, k + t * KV * hd + hh * hd, W("attn_k_norm.weight"), hd);
                ref_rope(k + t * KV * hd + hh * hd, hd, t, neox);
            }
        }
        for (int t = 0; t < n; t++) {
            for (int hh = 0; hh < H; hh++) {
                int kh = hh / (H / KV);
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    double d = 0;
                    for (int i = 0; i < hd; i++) d += q[t * H * hd + hh * hd + i] * k[j * KV * hd + kh * hd + i];
                    p[j] = d / sqrt(hd);
                    if (p[j] > mx) mx = p[j];
                }
                for (int j = 0; j <= t; j++) sum += (p[j] = exp(p[j] - mx));
                for (int i = 0; i < hd; i++) {
                    double s = 0;
                    for (int j = 0; j <= t; j++) s += p[j] / sum * v[j * KV * hd + kh * hd + i];
                    att[hh * hd + i] = s;
                }
            }
            ref_matvec(o, W("attn_output.weight"), att, D, H * hd);
            for (int i = 0; i < D; i++) x[t * D + i] += o[i];
            ref_rmsnorm(h, x + t * D, W("ffn_norm.weight"), D);
            ref_matvec(g, W("ffn_gate.weight"), h, F, D);
            ref_matvec(u, W("ffn_up.weight"), h, F, D);
            for (int i = 0; i < F; i++) g[i] = g[i] / (1 + exp(-g[i])) * u[i];
            ref_matvec(o, W("ffn_down.weight"), g, D, F);
            for (int i = 0; i < D; i++) x[t * D + i] += o[i];
        }
#undef W
    }
    ref_rmsnorm(h, x + (n - 1) * D, find(tm, "output_norm.weight"), D);
    const float *out = find(tm, c->tied ? "token_embd.weight" : "output.weight");
    ref_matvec(logits, out, h, c->n_vocab, D);
    free(x); free(h); free(q); free(k); free(v); free(att); free(o); free(g); free(u); free(p);
}

// --- tests: building blocks ----------------------------------------------------------

static void test_rmsnorm(void **state)
{
    (void)state;
    uint64_t rng = 1;
    for (int n = 1; n <= 257; n += 37) {
        float x[300], w[300], y[300];
        for (int i = 0; i < n; i++) { x[i] = 3.0f * frand(&rng); w[i] = frand(&rng); }
        model_rmsnorm(y, x, w, n, 1e-6f);
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
        double s = 1.0 / sqrt(ss / n + 1e-6);
        for (int i = 0; i < n; i++) assert_true(fabs(y[i] - x[i] * s * w[i]) <= 1e-5 * (1 + fabs(x[i] * s * w[i])));
        model_rmsnorm(x, x, NULL, n, 1e-6f); /* in place, no weight */
        for (int i = 0; i < n; i++) assert_true(fabs(x[i] - y[i] / w[i]) <= 1e-3 * (1 + fabs(x[i])) || fabs(w[i]) < 1e-3);
    }
}

static void test_rope(void **state)
{
    (void)state;
    uint64_t rng = 2;
    const int hd = 64, H = 3;
    int positions[] = {0, 1, 7, 100, 1000, 4000};
    for (int kind = 0; kind < 2; kind++)
        for (size_t pi = 0; pi < sizeof positions / sizeof positions[0]; pi++) {
            int pos = positions[pi];
            for (int rd = 32; rd <= hd; rd += 32) {
                float x[H * 64];
                double r[H * 64];
                for (int i = 0; i < H * hd; i++) r[i] = x[i] = frand(&rng);
                model_rope(x, H, hd, rd, pos, 10000.0f, 1.0f, NULL, (model_rope_kind)kind);
                for (int h = 0; h < H; h++)
                    for (int i = 0; i < rd / 2; i++) {
                        double th = pos * pow(10000.0, -2.0 * i / rd);
                        int a = kind == MODEL_ROPE_NORM ? 2 * i : i, b = kind == MODEL_ROPE_NORM ? 2 * i + 1 : i + rd / 2;
                        double x0 = r[h * hd + a], x1 = r[h * hd + b];
                        double y0 = x0 * cos(th) - x1 * sin(th), y1 = x0 * sin(th) + x1 * cos(th);
                        /* float angles: |d theta| ~ pos * 1e-7 relative */
                        double tol = 1e-5 + 4e-7 * pos;
                        assert_true(fabs(x[h * hd + a] - y0) < tol);
                        assert_true(fabs(x[h * hd + b] - y1) < tol);
                    }
                for (int h = 0; h < H; h++) /* dims past rope_dim untouched */
                    for (int i = rd; i < hd; i++) assert_true(x[h * hd + i] == (float)r[h * hd + i]);
            }
        }
    /* position 0 is the identity; linear scaling by 4 at pos 8 equals no scaling at pos 2 */
    float a[64], b[64];
    for (int i = 0; i < 64; i++) a[i] = b[i] = frand(&rng);
    model_rope(a, 1, 64, 64, 8, 10000.0f, 0.25f, NULL, MODEL_ROPE_NEOX);
    model_rope(b, 1, 64, 64, 2, 10000.0f, 1.0f, NULL, MODEL_ROPE_NEOX);
    for (int i = 0; i < 64; i++) assert_true(fabs(a[i] - b[i]) < 1e-5);
    /* frequency factors divide the angle */
    float ff[32];
    for (int i = 0; i < 32; i++) ff[i] = 2.0f;
    for (int i = 0; i < 64; i++) a[i] = b[i];
    model_rope(a, 1, 64, 64, 10, 10000.0f, 1.0f, ff, MODEL_ROPE_NORM);
    model_rope(b, 1, 64, 64, 5, 10000.0f, 1.0f, NULL, MODEL_ROPE_NORM);
    for (int i = 0; i < 64; i++) assert_true(fabs(a[i] - b[i]) < 1e-5);
}

static void test_llama3_factors(void **state)
{
    (void)state;
    model_config c = {.rope_dim = 128, .rope_base = 500000.0f, .rope_factor = 8.0f, .rope_low_freq_factor = 1.0f,
                      .rope_high_freq_factor = 4.0f, .rope_orig_ctx = 8192};
    float f[64];
    model_rope_llama3_factors(&c, f);
    assert_true(f[0] == 1.0f);             /* highest frequency: wavelength 2 pi < 2048 */
    assert_true(f[63] == 8.0f);            /* lowest: wavelength > 8192 */
    for (int i = 1; i < 64; i++) assert_true(f[i] >= f[i - 1]); /* monotone in between */
}

static void test_attention(void **state)
{
    (void)state;
    uint64_t rng = 3;
    int sizes[][3] = {{1, 8, 8}, {5, 16, 16}, {33, 64, 64}, {70, 32, 48}};
    for (size_t s = 0; s < 4; s++) {
        int n = sizes[s][0], hd = sizes[s][1], hdv = sizes[s][2], ks = hd * 3, vs = hdv * 2;
        float *q = malloc(sizeof(float) * hd), *k = malloc(sizeof(float) * n * ks), *v = malloc(sizeof(float) * n * vs);
        float *out = malloc(sizeof(float) * hdv), *sc = malloc(sizeof(float) * n);
        for (int i = 0; i < hd; i++) q[i] = 2 * frand(&rng);
        for (int i = 0; i < n * ks; i++) k[i] = 2 * frand(&rng);
        for (int i = 0; i < n * vs; i++) v[i] = frand(&rng);
        float scale = 1.0f / sqrtf((float)hd);
        /* the f16 cache: same inputs rounded to f16 must give the same result as f32 on the rounded values */
        uint16_t *k16 = malloc(sizeof(uint16_t) * n * ks), *v16 = malloc(sizeof(uint16_t) * n * vs);
        float *out16 = malloc(sizeof(float) * hdv);
        for (int i = 0; i < n * ks; i++) { k16[i] = dtype_f32_to_f16(k[i]); k[i] = dtype_f16_to_f32(k16[i]); }
        for (int i = 0; i < n * vs; i++) { v16[i] = dtype_f32_to_f16(v[i]); v[i] = dtype_f16_to_f32(v16[i]); }
        model_attend_f16(out16, q, k16, v16, n, hd, hdv, ks, vs, scale, sc);
        model_attend(out, q, k, v, n, hd, hdv, ks, vs, scale, sc);
        for (int i = 0; i < hdv; i++) assert_true(fabs(out[i] - out16[i]) < 1e-6);
        free(k16); free(v16); free(out16);
        double p[80], mx = -INFINITY, sum = 0;
        for (int j = 0; j < n; j++) {
            double d = 0;
            for (int i = 0; i < hd; i++) d += (double)q[i] * k[j * ks + i];
            p[j] = d * scale;
            mx = fmax(mx, p[j]);
        }
        for (int j = 0; j < n; j++) sum += (p[j] = exp(p[j] - mx));
        for (int i = 0; i < hdv; i++) {
            double r = 0;
            for (int j = 0; j < n; j++) r += p[j] / sum * v[j * vs + i];
            assert_true(fabs(out[i] - r) < 1e-5);
        }
        free(q); free(k); free(v); free(out); free(sc);
    }
}

/* model_attend_f16_ggml (llama.cpp's float order, f16 probabilities) against model_attend_f16: the
 * same attention up to the f16 rounding of the probabilities (relative 2^-11) and the summation
 * order; one position must give the V row exactly (probability 1, sums of exact zeros). */
static void test_attention_ggml(void **state)
{
    (void)state;
    uint64_t rng = 11;
    int sizes[][3] = {{1, 64, 64}, {7, 64, 64}, {33, 64, 64}, {70, 32, 48}, {300, 64, 64}, {9, 16, 24}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int n = sizes[s][0], hd = sizes[s][1], hdv = sizes[s][2], ks = hd * 3, vs = hdv * 2;
        float *q = malloc(sizeof(float) * hd), *sc = malloc(sizeof(float) * n);
        uint16_t *k16 = malloc(sizeof(uint16_t) * n * ks), *v16 = malloc(sizeof(uint16_t) * n * vs);
        float ref[64], out[64];
        for (int i = 0; i < hd; i++) q[i] = dtype_f16_to_f32(dtype_f32_to_f16(3 * frand(&rng)));
        for (int i = 0; i < n * ks; i++) k16[i] = dtype_f32_to_f16(2 * frand(&rng));
        for (int i = 0; i < n * vs; i++) v16[i] = dtype_f32_to_f16(frand(&rng));
        float scale = 1.0f / sqrtf((float)hd);
        model_attend_f16(ref, q, k16, v16, n, hd, hdv, ks, vs, scale, sc);
        for (int batched = 0; batched < 2; batched++) {
            model_attend_f16_ggml(out, q, k16, v16, n, hd, hdv, ks, vs, scale, sc, batched);
            for (int i = 0; i < hdv; i++) {
                if (n == 1) assert_true(out[i] == dtype_f16_to_f32(v16[i]));
                assert_true(fabsf(out[i] - ref[i]) < 2e-3f);
            }
        }
        free(q); free(sc); free(k16); free(v16);
    }
}

/* model_swiglu (SIMD expf on AVX2) against a double reference, including the far tails where the
 * expf overflows to infinity or goes below 2^-126, and a length that leaves a scalar tail. */
static void test_swiglu(void **state)
{
    (void)state;
    uint64_t rng = 5;
    enum { N = 203 };
    float g[N], u[N];
    double r[N];
    for (int i = 0; i < N; i++) {
        g[i] = 20 * frand(&rng);
        u[i] = frand(&rng);
    }
    g[0] = 100.0f; g[1] = -100.0f; g[2] = 95.0f; g[3] = -95.0f; g[4] = 0.0f; g[5] = 88.0f; g[6] = -88.5f;
    for (int i = 0; i < N; i++) r[i] = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
    model_swiglu(g, u, N);
    for (int i = 0; i < N; i++) assert_true(fabs(g[i] - r[i]) <= 1e-6 * fabs(r[i]) + 1e-30);
}

// --- tests: whole model ----------------------------------------------------------------

static const tiny_cfg base_cfg = {.arch = "llama", .dim = 64, .n_head = 4, .n_head_kv = 2, .n_ff = 96,
                                  .n_layer = 2, .n_vocab = 50, .n_ctx = 64, .tied = true};

static void check_forward(const tiny_cfg *c)
{
    tiny_model tm;
    tiny_build(&tm, c, 42);
    model *m;
    ai_err err;
    assert_int_equal(tiny_open(&m, &tm, &err), AI_OK);
    assert_int_equal(m->cfg.tied_output, c->tied);
    int32_t toks[12] = {3, 17, 0, 49, 8, 8, 22, 31, 5, 40, 11, 2};
    double ref[50];
    /* prefill 7 tokens at once, then decode the rest one by one; check each step's logits */
    for (int threads = 1; threads <= 3; threads += 2) {
        model_ctx *x;
        model_ctx_params p = {.n_ctx = 32, .n_batch = 8, .n_threads = threads};
        assert_int_equal(model_ctx_init(&x, m, &p, &err), AI_OK);
        for (int n = 7; n <= 12; n++) {
            if (n == 7) assert_int_equal(model_forward(x, toks, 7, 0, &err), AI_OK);
            else assert_int_equal(model_forward(x, toks + n - 1, 1, n - 1, &err), AI_OK);
            int32_t rows;
            const float *lg = model_logits(x, &rows);
            assert_int_equal(rows, 1);
            ref_forward(&tm, toks, n, ref);
            for (int i = 0; i < c->n_vocab; i++) assert_true(fabs(lg[i] - ref[i]) <= 1e-4 * (1 + fabs(ref[i])));
        }
        model_ctx_free(x);
    }
    /* f16 KV cache: logits move by the f16 rounding of q, k, v only */
    {
        model_ctx *x;
        model_ctx_params p = {.n_ctx = 32, .n_batch = 4, .n_threads = 2, .kv_f16 = true};
        assert_int_equal(model_ctx_init(&x, m, &p, &err), AI_OK);
        for (int t = 0; t < 12; t += 4) assert_int_equal(model_forward(x, toks + t, 4, t, &err), AI_OK);
        const float *lg = model_logits(x, NULL);
        ref_forward(&tm, toks, 12, ref);
        for (int i = 0; i < c->n_vocab; i++) assert_true(fabs(lg[i] - ref[i]) <= 2e-2 * (1 + fabs(ref[i])));
        model_ctx_free(x);
    }
    /* all_logits: each row equals the logits of that prefix */
    model_ctx *x;
    model_ctx_params p = {.n_ctx = 16, .n_batch = 12, .n_threads = 2, .all_logits = true};
    assert_int_equal(model_ctx_init(&x, m, &p, &err), AI_OK);
    assert_int_equal(model_forward(x, toks, 12, 0, &err), AI_OK);
    int32_t rows;
    const float *lg = model_logits(x, &rows);
    assert_int_equal(rows, 12);
    ref_forward(&tm, toks, 4, ref);
    for (int i = 0; i < c->n_vocab; i++) assert_true(fabs(lg[3 * c->n_vocab + i] - ref[i]) <= 1e-4 * (1 + fabs(ref[i])));
    /* bad calls */
    assert_int_equal(model_forward(x, toks, 13, 0, &err), AI_ERR_INVALID);
    assert_int_equal(model_forward(x, toks, 2, 15, &err), AI_ERR_RANGE);
    int32_t bad = 50;
    assert_int_equal(model_forward(x, &bad, 1, 0, &err), AI_ERR_RANGE);
    assert_non_null(strstr(err.msg, "token id 50"));
    model_ctx_free(x);
    model_close(m);
    tiny_free(&tm);
}

static void test_forward_llama(void **state) { (void)state; check_forward(&base_cfg); }
static void test_forward_llama_untied(void **state)
{
    (void)state;
    tiny_cfg c = base_cfg;
    c.tied = false;
    c.n_head_kv = 4; /* plain multi-head */
    check_forward(&c);
}
static void test_forward_qwen2(void **state)
{
    (void)state;
    tiny_cfg c = base_cfg;
    c.arch = "qwen2";
    check_forward(&c);
}
static void test_forward_qwen3(void **state)
{
    (void)state;
    tiny_cfg c = base_cfg;
    c.arch = "qwen3";
    c.n_head_kv = 1;
    check_forward(&c);
}

static void expect_error(const tiny_cfg *c, ai_status code, const char *needle)
{
    tiny_model tm;
    tiny_build(&tm, c, 7);
    model *m = NULL;
    ai_err err = {0};
    ai_status st = tiny_open(&m, &tm, &err);
    if (st != code) fail_msg("expected status %d, got %d (%s) for '%s'", code, st, err.msg, needle);
    assert_null(m);
    if (!strstr(err.msg, needle)) fail_msg("error '%s' lacks '%s'", err.msg, needle);
    tiny_free(&tm);
}

static void test_config_errors(void **state)
{
    (void)state;
    tiny_cfg c = base_cfg;
    c.skip_key = "block_count";
    expect_error(&c, AI_ERR_FORMAT, "missing key llama.block_count");
    c = base_cfg;
    c.skip_key = "attention.layer_norm_rms_epsilon";
    expect_error(&c, AI_ERR_FORMAT, "llama.attention.layer_norm_rms_epsilon");
    c = base_cfg;
    c.n_head_kv = 3;
    expect_error(&c, AI_ERR_FORMAT, "not a multiple of head_count_kv 3");
    c = base_cfg;
    c.arch = "gpt2";
    expect_error(&c, AI_ERR_UNSUPPORTED, "general.architecture 'gpt2' is not supported");
    c = base_cfg;
    c.bad_tensor = "blk.1.attn_k.weight";
    expect_error(&c, AI_ERR_FORMAT, "tensor blk.1.attn_k.weight has shape [64, 16, 1, 1], expected [64, 32]");
    c = base_cfg;
    c.bad_tensor = "blk.0.ffn_down.weight";
    expect_error(&c, AI_ERR_FORMAT, "tensor blk.0.ffn_down.weight has shape [96, 32, 1, 1], expected [96, 64]");
    c = base_cfg;
    c.n_ctx = 0;
    expect_error(&c, AI_ERR_FORMAT, "llama.context_length = 0 is outside");
}

static void test_ctx_errors(void **state)
{
    (void)state;
    tiny_model tm;
    tiny_build(&tm, &base_cfg, 9);
    model *m;
    ai_err err;
    assert_int_equal(tiny_open(&m, &tm, &err), AI_OK);
    model_ctx *x = NULL;
    model_ctx_params p = {.n_ctx = 65};
    assert_int_equal(model_ctx_init(&x, m, &p, &err), AI_ERR_RANGE);
    assert_null(x);
    p = (model_ctx_params){.n_ctx = -1};
    assert_int_equal(model_ctx_init(&x, m, &p, &err), AI_ERR_INVALID);
    assert_int_equal(model_ctx_init(&x, m, NULL, &err), AI_OK); /* defaults */
    assert_int_equal(model_ctx_n_ctx(x), 64);
    model_ctx_free(x);
    model_stats st;
    model_stats_get(m, &st);
    assert_true(st.kv_bytes_per_token == 2u * 2 * 2 * 16 * 4); /* layers * (K + V) * kv heads * hd * f32 */
    model_close(m);
    tiny_free(&tm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_llama3_factors),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_attention_ggml),
        cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_forward_llama),
        cmocka_unit_test(test_forward_llama_untied),
        cmocka_unit_test(test_forward_qwen2),
        cmocka_unit_test(test_forward_qwen3),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_ctx_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
