/* ladder_decode.c - the decode-attention ladder's driver part (kernels in decode/decode.cu).
 *
 * Llama-3-8B heads (32 query heads, 8 kv heads, d 128). Per shape: a paged f16 cache of 16-token
 * blocks whose block tables come from one random permutation (a sequence's blocks are scattered),
 * every slot no sequence owns (the tail of its last block, spare blocks) NaN so a kernel that reads
 * a key it must not read fails; K, V uniform in [-1, 1) rounded to f16; q uniform in [-4, 4) f32.
 * Reference in double from the stored f16 values. Error: worst row (sequence, head) of
 * max_d |o - ref| / max_d |ref| (DECODE_TOL, decode.h, says why 5e-3).
 * Bytes: K and V of every sequence once + q + out; FLOPs: 4 * n_head * d per key (Q.K and P.V).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aiinfra/dtype.h"
#include "kernels/decode/decode.h"
#include "kernels/ladder_internal.h"

#define DEC_HEADS 32
#define DEC_KV 8
#define DEC_D 128

typedef struct decode_shape {
    int n_seq;
    int len[3]; /* one entry: every sequence has len[0] keys */
} decode_shape;

typedef struct decode_call {
    const decode_version *v;
    cudaStream_t s;
    const decode_problem *p;
} decode_call;

static int decode_call_run(const void *arg)
{
    const decode_call *c = arg;
    return c->v->fn(c->s, c->p);
}

typedef struct decode_host {
    int n_seq, max_len, max_blocks, n_slots;
    int32_t *len, *bt, *qs;
    uint16_t *k, *v; /* (n_slots, DEC_KV, DEC_D) */
    float *q, *ref, *out;
    const float *lut; /* f16 bits -> float (not owned) */
} decode_host;

static void decode_host_free(decode_host *h)
{
    free(h->len);
    free(h->bt);
    free(h->qs);
    free(h->k);
    free(h->v);
    free(h->q);
    free(h->ref);
    free(h->out);
}

/* Inputs for one shape (h zeroed but for lut); false when out of memory. */
static bool decode_make(ladder_ctx *c, const decode_shape *sh, decode_host *h)
{
    const int n = sh->n_seq;
    h->n_seq = n;
    h->len = malloc(sizeof(int32_t) * (size_t)n);
    h->qs = malloc(sizeof(int32_t) * (size_t)(n + 1));
    if (!h->len || !h->qs) return false;
    int total = 2; /* two spare (NaN) blocks */
    h->max_len = 1;
    for (int s = 0; s < n; s++) {
        h->len[s] = sh->len[s < 3 && sh->len[s] ? s : 0];
        h->qs[s] = s;
        h->max_len = h->len[s] > h->max_len ? h->len[s] : h->max_len;
        total += (h->len[s] + DECODE_BLOCK - 1) / DECODE_BLOCK;
    }
    h->qs[n] = n;
    h->max_blocks = (h->max_len + DECODE_BLOCK - 1) / DECODE_BLOCK;
    h->n_slots = total * DECODE_BLOCK;
    const size_t row = (size_t)DEC_KV * DEC_D, nq = (size_t)n * DEC_HEADS * DEC_D;
    h->bt = calloc((size_t)n * h->max_blocks, sizeof(int32_t));
    h->k = malloc((size_t)h->n_slots * row * 2);
    h->v = malloc((size_t)h->n_slots * row * 2);
    h->q = malloc(nq * sizeof(float));
    h->ref = malloc(nq * sizeof(float));
    h->out = malloc(nq * sizeof(float));
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)total);
    if (!h->bt || !h->k || !h->v || !h->q || !h->ref || !h->out || !perm) {
        free(perm);
        return false;
    }
    ladder_reseed(c, (uint64_t)n * 1000003u + (uint64_t)h->max_len);
    for (int i = 0; i < total; i++) perm[i] = i;
    for (int i = total - 1; i > 0; i--) {
        int j = (int)(c->rng % (uint64_t)(i + 1));
        (void)ladder_rng_uniform(&c->rng);
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    memset(h->k, 0xFF, (size_t)h->n_slots * row * 2); /* NaN wherever no sequence owns the slot */
    memset(h->v, 0xFF, (size_t)h->n_slots * row * 2);
    int next = 0;
    for (int s = 0; s < n; s++)
        for (int b = 0; b * DECODE_BLOCK < h->len[s]; b++) h->bt[(size_t)s * h->max_blocks + b] = perm[next++];
    free(perm);
    for (int s = 0; s < n; s++)
        for (int j = 0; j < h->len[s]; j++) {
            const size_t slot = (size_t)h->bt[(size_t)s * h->max_blocks + j / DECODE_BLOCK] * DECODE_BLOCK + j % DECODE_BLOCK;
            for (size_t i = 0; i < row; i++) {
                h->k[slot * row + i] = dtype_f32_to_f16(ladder_rng_uniform(&c->rng));
                h->v[slot * row + i] = dtype_f32_to_f16(ladder_rng_uniform(&c->rng));
            }
        }
    for (size_t i = 0; i < nq; i++) h->q[i] = 4.0f * ladder_rng_uniform(&c->rng);
    return true;
}

/* ref (n_seq, DEC_HEADS, DEC_D) in double from the f16 cache; sc: DEC_HEADS / DEC_KV * max_len doubles. */
static void decode_reference(const decode_host *h, double *sc)
{
    const int G = DEC_HEADS / DEC_KV;
    const size_t row = (size_t)DEC_KV * DEC_D;
    const double scale = 1.0 / sqrt((double)DEC_D);
    for (int s = 0; s < h->n_seq; s++)
        for (int kh = 0; kh < DEC_KV; kh++) {
            const int L = h->len[s];
            double mx[DEC_HEADS / DEC_KV], sum[DEC_HEADS / DEC_KV], o[DEC_HEADS / DEC_KV][DEC_D];
            memset(o, 0, sizeof o);
            for (int g = 0; g < G; g++) mx[g] = -INFINITY, sum[g] = 0;
            for (int j = 0; j < L; j++) {
                const size_t slot = (size_t)h->bt[(size_t)s * h->max_blocks + j / DECODE_BLOCK] * DECODE_BLOCK + j % DECODE_BLOCK;
                const uint16_t *kr = h->k + slot * row + (size_t)kh * DEC_D;
                double kd[DEC_D];
                for (int i = 0; i < DEC_D; i++) kd[i] = h->lut[kr[i]];
                for (int g = 0; g < G; g++) {
                    const float *q = h->q + ((size_t)s * DEC_HEADS + kh * G + g) * DEC_D;
                    double dot = 0;
                    for (int i = 0; i < DEC_D; i++) dot += (double)q[i] * kd[i];
                    sc[(size_t)g * h->max_len + j] = dot * scale;
                    if (dot * scale > mx[g]) mx[g] = dot * scale;
                }
            }
            for (int j = 0; j < L; j++) {
                const size_t slot = (size_t)h->bt[(size_t)s * h->max_blocks + j / DECODE_BLOCK] * DECODE_BLOCK + j % DECODE_BLOCK;
                const uint16_t *vr = h->v + slot * row + (size_t)kh * DEC_D;
                for (int g = 0; g < G; g++) {
                    const double p = exp(sc[(size_t)g * h->max_len + j] - mx[g]);
                    sum[g] += p;
                    for (int i = 0; i < DEC_D; i++) o[g][i] += p * h->lut[vr[i]];
                }
            }
            for (int g = 0; g < G; g++)
                for (int i = 0; i < DEC_D; i++)
                    h->ref[((size_t)s * DEC_HEADS + kh * G + g) * DEC_D + i] = (float)(o[g][i] / sum[g]);
        }
}

/* Worst row of max |o - ref| / max |ref|; NaN when any output is NaN. */
static double decode_err(const float *o, const float *ref, size_t rows)
{
    double worst = 0;
    for (size_t r = 0; r < rows; r++) {
        double num = 0, den = 0;
        for (int i = 0; i < DEC_D; i++) {
            const double g = o[r * DEC_D + i], w = ref[r * DEC_D + i];
            if (isnan(g)) return NAN;
            num = fabs(g - w) > num ? fabs(g - w) : num;
            den = fabs(w) > den ? fabs(w) : den;
        }
        const double e = num / (den > 0 ? den : 1);
        worst = e > worst ? e : worst;
    }
    return worst;
}

typedef struct decode_dev {
    void *k, *v, *q, *out, *bt, *len, *qs, *work;
} decode_dev;

static ai_status decode_versions_run(ladder_ctx *c, const decode_host *h, decode_problem *p, const char *shape, ai_err *err)
{
    const size_t nq = (size_t)h->n_seq * DEC_HEADS * DEC_D;
    double kv = 0, keys = 0;
    for (int s = 0; s < h->n_seq; s++) keys += h->len[s];
    kv = keys * DEC_KV * DEC_D * 2.0 * 2.0;
    for (int v = 0; v < decode_n_versions; v++) {
        const decode_version *dv = &decode_versions[v];
        decode_call dc = { .v = dv, .s = c->s, .p = p };
        LADDER_CU(cudaMemsetAsync(p->out, 0xFF, nq * sizeof(float), c->s), "poison output");
        LADDER_CU((cudaError_t)decode_call_run(&dc), dv->name);
        LADDER_CU(cudaStreamSynchronize(c->s), dv->name);
        LADDER_CU(cudaMemcpy(h->out, p->out, nq * sizeof(float), cudaMemcpyDeviceToHost), "decode output download");
        ladder_result *r = ladder_add_row(c, "decode", dv->name, dv->desc, shape, "f16", err);
        if (!r) return AI_ERR_NOMEM;
        r->err = decode_err(h->out, h->ref, (size_t)h->n_seq * DEC_HEADS);
        r->tol = DECODE_TOL;
        r->bytes = kv + 2.0 * (double)nq * sizeof(float);
        r->flops = 4.0 * DEC_HEADS * DEC_D * keys;
        ai_status st = ladder_time(c, decode_call_run, &dc, &r->ms, err);
        if (st != AI_OK) return ai_err_prefix(err, "decode %s %s", dv->name, shape);
        ladder_fill_rates(r, c->rep);
    }
    return AI_OK;
}

static ai_status decode_shape_run(ladder_ctx *c, const decode_shape *sh, const float *lut, ai_err *err)
{
    decode_host h = { 0 };
    decode_dev d = { 0 };
    ai_status st = AI_OK;
    double *sc = NULL;
    h.lut = lut;
    if (!decode_make(c, sh, &h) ||
        !(sc = malloc(sizeof(double) * (size_t)(DEC_HEADS / DEC_KV) * (size_t)h.max_len))) {
        st = ai_err_set(err, AI_ERR_NOMEM, "decode ladder: out of memory");
        goto done;
    }
    decode_reference(&h, sc);
    const size_t kvb = (size_t)h.n_slots * DEC_KV * DEC_D * 2, nq = (size_t)h.n_seq * DEC_HEADS * DEC_D;
    decode_problem p = { .n_seq = h.n_seq, .max_blocks = h.max_blocks, .max_seq_len = h.max_len, .n_head = DEC_HEADS,
                         .n_kv = DEC_KV, .d = DEC_D, .scale = (float)(1.0 / sqrt((double)DEC_D)) };
    p.work_size = decode_work_size(&p);
    cudaError_t e = cudaMalloc(&d.k, kvb);
    if (e == cudaSuccess) e = cudaMalloc(&d.v, kvb);
    if (e == cudaSuccess) e = cudaMalloc(&d.q, nq * sizeof(float));
    if (e == cudaSuccess) e = cudaMalloc(&d.out, nq * sizeof(float));
    if (e == cudaSuccess) e = cudaMalloc(&d.bt, sizeof(int32_t) * (size_t)h.n_seq * h.max_blocks);
    if (e == cudaSuccess) e = cudaMalloc(&d.len, sizeof(int32_t) * (size_t)h.n_seq);
    if (e == cudaSuccess) e = cudaMalloc(&d.qs, sizeof(int32_t) * (size_t)(h.n_seq + 1));
    if (e == cudaSuccess) e = cudaMalloc(&d.work, p.work_size ? p.work_size : 1);
    if (e == cudaSuccess) e = cudaMemset(d.work, 0, p.work_size ? p.work_size : 1); /* once: the counters */
    if (e == cudaSuccess) e = cudaMemcpy(d.k, h.k, kvb, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(d.v, h.v, kvb, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(d.q, h.q, nq * sizeof(float), cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(d.bt, h.bt, sizeof(int32_t) * (size_t)h.n_seq * h.max_blocks, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(d.len, h.len, sizeof(int32_t) * (size_t)h.n_seq, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(d.qs, h.qs, sizeof(int32_t) * (size_t)(h.n_seq + 1), cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        st = ai_err_set(err, AI_ERR_NOMEM, "decode buffers: %s", cudaGetErrorString(e));
        goto done;
    }
    p.out = d.out;
    p.q = d.q;
    p.k_cache = d.k;
    p.v_cache = d.v;
    p.block_tables = d.bt;
    p.seq_len = d.len;
    p.q_start = d.qs;
    p.work = d.work;
    char shape[48];
    if (sh->len[1]) snprintf(shape, sizeof shape, "b%d ctx<=%d", h.n_seq, h.max_len);
    else snprintf(shape, sizeof shape, "b%d x %d", h.n_seq, h.max_len);
    st = decode_versions_run(c, &h, &p, shape, err);
done:
    cudaFree(d.k);
    cudaFree(d.v);
    cudaFree(d.q);
    cudaFree(d.out);
    cudaFree(d.bt);
    cudaFree(d.len);
    cudaFree(d.qs);
    cudaFree(d.work);
    free(sc);
    decode_host_free(&h);
    return st;
}

ai_status ladder_decode(ladder_ctx *c, ai_err *err)
{
    static const decode_shape big[] = {
        { 1, { 1024 } }, { 1, { 8192 } }, { 1, { 32768 } }, { 8, { 1024 } }, { 8, { 8192 } }, { 64, { 2048 } },
    }; /* b8 x 1k: a short batch, latency-bound like b1 (where decode round 3 lost at batch 8, docs/perf.md) */
    static const decode_shape small[] = { /* odd lengths, never a multiple of 16 except by accident */
        { 1, { 1000 } }, { 3, { 1, 17, 555 } }, { 2, { 4097, 33 } },
    };
    const decode_shape *shapes = c->o->small ? small : big;
    const int n = c->o->small ? (int)(sizeof small / sizeof small[0]) : (int)(sizeof big / sizeof big[0]);
    float *lut = malloc(65536 * sizeof(float));
    if (!lut) return ai_err_set(err, AI_ERR_NOMEM, "decode ladder: out of memory");
    for (int i = 0; i < 65536; i++) lut[i] = dtype_f16_to_f32((uint16_t)i);
    ai_status st = AI_OK;
    for (int i = 0; i < n && st == AI_OK; i++) st = decode_shape_run(c, &shapes[i], lut, err);
    free(lut);
    return st;
}
