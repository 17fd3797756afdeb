/* runner_check.h - the batched, paged step (runner_step) against the one-sequence forward
 * (model_forward), shared by test_runner.c (CPU backend) and test_cuda_runner.c (CUDA backend).
 *
 * Two sequences go through mixed steps: prefill chunks of different lengths in one step, a chunk of
 * one sequence beside a decode token of the other, then decode steps for both; their blocks are
 * interleaved in the pool in a shuffled order (block_size 4, so a few tokens span several blocks).
 * After every step the logits of each sequence's last token must match model_forward run on that
 * sequence alone with a contiguous f32 cache, within rel_tol (max |diff| / max |ref|), and the
 * greedy token must be the same whenever the reference's top two logits are apart by more than the
 * tolerance. fuse (runner_params) picks which ops run inside the matmuls: every combination must agree.
 * kv picks the cache's element type (f32, f16 or fp8 e4m3); the reference always keeps f32.
 */
#ifndef AIINFRA_RUNNER_CHECK_H
#define AIINFRA_RUNNER_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aiinfra/backend.h"
#include "aiinfra/model.h"
#include "aiinfra/runner.h"

#define RC_NSEQ 2
#define RC_LEN 24

static void runner_check(backend *be, const char *path, runner_kv_dtype kv, double rel_tol, unsigned fuse)
{
    ai_err err = {0};
    model *m = NULL;
    if (model_open(&m, path, &err) != AI_OK) fail_msg("%s", err.msg);
    const model_config *c = &m->cfg;
    runner *r = NULL;
    runner_params rp = {.max_tokens = 16, .max_seqs = 4, .n_ctx = 64, .block_size = 4, .kv_blocks = 40,
                        .kv_dtype = kv, .fuse = fuse};
    if (runner_init(&r, be, NULL, m, NULL, &rp, &err) != AI_OK) fail_msg("runner_init: %s", err.msg);
    model_ctx *ref[RC_NSEQ];
    for (int s = 0; s < RC_NSEQ; s++) {
        model_ctx_params mp = {.n_ctx = 64, .n_batch = 16, .n_threads = 2};
        if (model_ctx_init(&ref[s], m, &mp, &err) != AI_OK) fail_msg("%s", err.msg);
    }
    /* tokens and a shuffled, interleaved block plan: sequence s owns blocks perm[s + 2j] */
    int32_t toks[RC_NSEQ][RC_LEN], bt[RC_NSEQ][16], perm[40];
    uint64_t x = 0x1234567ull;
    for (int s = 0; s < RC_NSEQ; s++)
        for (int i = 0; i < RC_LEN; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            toks[s][i] = (int32_t)((x >> 33) % (uint64_t)c->n_vocab);
        }
    for (int i = 0; i < 40; i++) perm[i] = i;
    for (int i = 39; i > 0; i--) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int j = (int)((x >> 33) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int s = 0; s < RC_NSEQ; s++)
        for (int j = 0; j < 16; j++) bt[s][j] = perm[s + 2 * j];

    /* steps: new tokens per sequence (0 = the sequence sits this step out) */
    static const int plan[][RC_NSEQ] = {{5, 3}, {1, 6}, {7, 1}, {1, 1}, {1, 1}, {0, 5}, {1, 1}, {3, 1}, {1, 1}};
    int done[RC_NSEQ] = {0};
    float *logits = malloc((size_t)RC_NSEQ * (size_t)c->n_vocab * sizeof(float));
    assert_non_null(logits);
    double worst = 0;
    for (size_t st = 0; st < sizeof plan / sizeof plan[0]; st++) {
        runner_seq seqs[RC_NSEQ];
        int idx[RC_NSEQ], n = 0;
        for (int s = 0; s < RC_NSEQ; s++) {
            if (!plan[st][s]) continue;
            seqs[n] = (runner_seq){.tokens = toks[s] + done[s], .q_len = plan[st][s],
                                   .seq_len = done[s] + plan[st][s], .block_table = bt[s]};
            idx[n++] = s;
        }
        int32_t next[RC_NSEQ];
        if (runner_step(r, seqs, n, next, &err) != AI_OK) fail_msg("step %zu: %s", st, err.msg);
        if (runner_logits(r, logits, n, &err) != AI_OK) fail_msg("%s", err.msg);
        for (int i = 0; i < n; i++) {
            int s = idx[i];
            if (model_forward(ref[s], toks[s] + done[s], plan[st][s], done[s], &err) != AI_OK) fail_msg("%s", err.msg);
            const float *want = model_logits(ref[s], NULL), *got = logits + (size_t)i * (size_t)c->n_vocab;
            double md = 0, mr = 0;
            int32_t top = 0, second = -1;
            for (int32_t v = 0; v < c->n_vocab; v++) {
                if (isnan(got[v])) fail_msg("step %zu seq %d: NaN logit at %d", st, s, v);
                double d = fabs((double)got[v] - want[v]);
                if (d > md) md = d;
                if (fabs(want[v]) > mr) mr = fabs(want[v]);
                if (want[v] > want[top]) top = v;
            }
            for (int32_t v = 0; v < c->n_vocab; v++)
                if (v != top && (second < 0 || want[v] > want[second])) second = v;
            double rel = md / (mr > 0 ? mr : 1);
            if (rel > worst) worst = rel;
            if (rel > rel_tol)
                fail_msg("%s step %zu seq %d: max |logit diff| %.3g = %.3g relative (tolerance %.1g)", path, st, s, md,
                         rel, rel_tol);
            if (want[top] - want[second] > 4 * rel_tol * mr && next[i] != top)
                fail_msg("%s step %zu seq %d: greedy token %d, reference %d", path, st, s, next[i], top);
            done[s] += plan[st][s];
        }
    }
    printf("  %s (%s, kv %s, fuse %u): worst relative logit error %.2g over %zu steps\n", path, be->ops->name,
           dtype_name(runner_kv_type(r)), fuse, worst, sizeof plan / sizeof plan[0]);
    free(logits);
    for (int s = 0; s < RC_NSEQ; s++) model_ctx_free(ref[s]);
    runner_free(r);
    model_close(m);
}

/* matmul_ex with the SwiGLU epilogue (swiglu_out) against its definition on the same backend:
 * matmul (after rmsnorm, for the norm prologue) then swiglu_rows, within rel_tol (max |diff| /
 * max |ref|; 0 = bit-for-bit, what a composing backend gives). A (2 x 48 or 2 x 2053) x 1024 weight of
 * type t, n_tok rows of x; then the refusals: accumulate, an odd n_out. */
static void matmul_glu_check(backend *be, dtype t, int64_t n_ff, int32_t n_tok, bool norm, double rel_tol)
{
    const backend_ops *o = be->ops;
    void *c = be->ctx;
    ai_err err = {0};
    /* buffer lengths rounded up to 64 floats: every part starts 256-byte aligned, as the runner's do */
    const int64_t n_in = 1024, nx = (int64_t)n_tok * n_in, ngu = ((int64_t)n_tok * 2 * n_ff + 63) & ~63,
                  ny = ((int64_t)n_tok * n_ff + 63) & ~63;
    backend_weight w = {.type = t, .n_out = 2 * n_ff, .n_in = n_in};
    float *h = malloc((size_t)(nx + n_in + 2 * ny) * sizeof(float)), *d = NULL, *dgu = NULL;
    assert_non_null(h);
    float *href = h + nx + n_in, *hy = href + ny;
    uint64_t st = 0x9E3779B97F4A7C15ull ^ (uint64_t)(t * 131 + n_tok);
    for (int64_t i = 0; i < nx + n_in; i++) { /* x in [-1, 1), norm weights in [0.5, 1.5) */
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = (float)((double)(st >> 11) / 9007199254740992.0) * 2.0f - 1.0f + (i >= nx ? 1.0f : 0.0f);
    }
    if (o->alloc(c, o->weight_bytes(c, t, w.n_out, n_in), &w.data, &err) ||
        o->alloc(c, (size_t)(nx + n_in + 2 * ny) * sizeof(float), (void **)&d, &err) ||
        o->alloc(c, (size_t)(ngu + nx) * sizeof(float), (void **)&dgu, &err) ||
        o->weight_random(c, &w, 11 + (uint64_t)t, 0.05f, &err) || o->matmul_reserve(c, &w, n_tok, &err) ||
        o->upload(c, d, h, (size_t)(nx + n_in) * sizeof(float), &err))
        fail_msg("matmul_glu_check set-up: %s", err.msg);
    float *dx = d, *dnw = d + nx, *dref = dnw + n_in, *dy = dref + ny, *dxn = dgu + ngu;
    const backend_mm_opts opts = {.norm_w = norm ? dnw : NULL, .eps = 1e-5f, .swiglu_out = true};
    if ((norm && o->rmsnorm(c, dxn, dx, dnw, n_tok, (int32_t)n_in, 1e-5f, &err)) ||
        o->matmul(c, &w, norm ? dxn : dx, n_tok, dgu, &err) || o->swiglu_rows(c, dref, dgu, n_tok, (int32_t)n_ff, &err) ||
        o->matmul_ex(c, &w, dx, n_tok, dy, &opts, &err) ||
        o->download(c, href, dref, (size_t)(2 * ny) * sizeof(float), &err))
        fail_msg("matmul_glu_check %s n_tok %d: %s", dtype_name(t), n_tok, err.msg);
    double dmax = 0, rmax = 0;
    for (int64_t i = 0; i < (int64_t)n_tok * n_ff; i++) {
        if (!isfinite(hy[i])) fail_msg("matmul_glu_check %s n_tok %d: y[%lld] = %g", dtype_name(t), n_tok, (long long)i, hy[i]);
        dmax = fmax(dmax, fabs((double)hy[i] - href[i]));
        rmax = fmax(rmax, fabs((double)href[i]));
    }
    if (!(dmax <= rel_tol * rmax))
        fail_msg("matmul_glu_check %s %lld n_tok %d norm %d: max diff %.3g of max %.3g (tolerance %.1g)", dtype_name(t),
                 (long long)n_ff, n_tok, norm, dmax, rmax, rel_tol);
    const backend_mm_opts acc = {.swiglu_out = true, .accumulate = true};
    assert_int_equal(o->matmul_ex(c, &w, dx, n_tok, dy, &acc, &err), AI_ERR_INVALID);
    backend_weight odd = w;
    odd.n_out--;
    assert_int_not_equal(o->matmul_ex(c, &odd, dx, n_tok, dy, &opts, &err), AI_OK);
    o->dealloc(c, dgu);
    o->dealloc(c, d);
    o->dealloc(c, w.data);
    free(h);
}

/* matmul_ex's split norm (backend_mm_opts in_ss / out_*) against its definition on the same backend, a
 * (2 n_ff) x n_in weight of type t and n_tok rows of x:
 *  - out: y = y0 + x W^T, xn = y * nw, ss = 0.5 + sum(y^2): against matmul, then the host's add,
 *    product and double sum (the same product: tolerance 1e-5 relative, ss 1e-5);
 *  - in: y = x W^T / sqrt(ss_t / n_in + eps), and with the SwiGLU epilogue silu(r g) * (r u): against
 *    matmul scaled on the host (in_tol: a backend may scale x before rounding it to 16 bits);
 *  - the refusals: in_ss with a prologue, out_xn without its sums. */
static void matmul_defer_check(backend *be, dtype t, int64_t n_ff, int64_t n_in, int32_t n_tok, double in_tol)
{
    const backend_ops *o = be->ops;
    void *c = be->ctx;
    ai_err err = {0};
    /* every part starts 256-byte aligned, as the runner's buffers do (cuBLASLt needs 16 bytes) */
    const int64_t n_out = 2 * n_ff, nx = (int64_t)n_tok * n_in, ny = ((int64_t)n_tok * n_out + 63) & ~63;
    const int64_t nw = (n_out + 63) & ~63;
    backend_weight w = {.type = t, .n_out = n_out, .n_in = n_in};
    /* host: x, norm weights (n_out, padded to nw), y0, then results: ref, y, xn, glu */
    float *h = malloc((size_t)(nx + nw + 5 * ny) * sizeof(float)), *d = NULL;
    enum { L = BACKEND_SS_LANES };
    double hss[2][16 * L], *dss = NULL; /* [0] in, [1] out: (16, L) each */
    assert_non_null(h);
    assert_true(n_tok <= 16);
    float *hnw = h + nx, *hy0 = hnw + nw, *href = hy0 + ny, *hy = href + ny, *hxn = hy + ny, *hg = hxn + ny;
    uint64_t st = 0xD1B54A32D192ED03ull ^ (uint64_t)(t * 131 + n_tok);
    for (int64_t i = 0; i < nx + nw + ny; i++) { /* x, y0 in [-1, 1), norm weights in [0.5, 1.5) */
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = (float)((double)(st >> 11) / 9007199254740992.0) * 2.0f - 1.0f;
        if (i >= nx && i < nx + nw) h[i] = h[i] * 0.5f + 1.0f;
    }
    memset(hss, 0, sizeof hss);
    for (int32_t k = 0; k < n_tok; k++) { /* in: 300 (k + 1) spread over the lanes (exact in double); out: 0.5 */
        for (int j = 0; j < L; j++) hss[0][k * L + j] = 300.0 * (k + 1) * (j + 1) / (L * (L + 1) / 2);
        hss[1][k * L] = 0.5;
    }
    if (o->alloc(c, o->weight_bytes(c, t, n_out, n_in), &w.data, &err) ||
        o->alloc(c, (size_t)(nx + nw + 5 * ny) * sizeof(float), (void **)&d, &err) ||
        o->alloc(c, sizeof hss, (void **)&dss, &err) || o->weight_random(c, &w, 23 + (uint64_t)t, 0.05f, &err) ||
        o->matmul_reserve(c, &w, n_tok, &err) || o->upload(c, d, h, (size_t)(nx + nw + ny) * sizeof(float), &err) ||
        o->upload(c, dss, hss, sizeof hss, &err))
        fail_msg("matmul_defer_check set-up: %s", err.msg);
    float *dx = d, *dnw = d + nx, *dy0 = dnw + nw, *dref = dy0 + ny, *dy = dref + ny, *dxn = dy + ny, *dg = dxn + ny;
    const backend_mm_opts out = {.accumulate = true, .out_xn = dxn, .out_nw = dnw, .out_ss = dss + 16 * L};
    const backend_mm_opts in = {.in_ss = dss, .eps = 1e-5f}, glu = {.in_ss = dss, .eps = 1e-5f, .swiglu_out = true};
    if (o->matmul(c, &w, dx, n_tok, dref, &err) || o->copy(c, dy, dy0, (size_t)ny * sizeof(float), &err) ||
        o->matmul_ex(c, &w, dx, n_tok, dy, &out, &err) ||
        o->download(c, href, dref, (size_t)(3 * ny) * sizeof(float), &err) ||
        o->download(c, hss, dss, sizeof hss, &err))
        fail_msg("matmul_defer_check %s n_tok %d (out): %s", dtype_name(t), n_tok, err.msg);
    double dmax = 0, rmax = 0, xmax = 0;
    for (int32_t k = 0; k < n_tok; k++) {
        double ss = 0.5;
        for (int64_t j = 0; j < n_out; j++) {
            const int64_t i = k * n_out + j;
            const float want = hy0[i] + href[i];
            ss += (double)want * want;
            dmax = fmax(dmax, fabs((double)hy[i] - want));
            rmax = fmax(rmax, fabs((double)want));
            xmax = fmax(xmax, fabs((double)hxn[i] - (double)want * hnw[j]));
        }
        double got = 0;
        for (int j = 0; j < L; j++) got += hss[1][k * L + j];
        if (!(fabs(got - ss) <= 1e-5 * ss))
            fail_msg("matmul_defer_check %s n_tok %d: sum of squares %.9g, want %.9g", dtype_name(t), n_tok, got, ss);
    }
    if (!(dmax <= 1e-5 * rmax) || !(xmax <= 1.5e-5 * rmax))
        fail_msg("matmul_defer_check %s n_tok %d (out): max diff y %.3g xn %.3g of max %.3g", dtype_name(t), n_tok, dmax,
                 xmax, rmax);
    if (o->matmul_ex(c, &w, dx, n_tok, dy, &in, &err) || o->matmul_ex(c, &w, dx, n_tok, dg, &glu, &err) ||
        o->download(c, hy, dy, (size_t)ny * sizeof(float), &err) ||
        o->download(c, hg, dg, (size_t)ny * sizeof(float), &err))
        fail_msg("matmul_defer_check %s n_tok %d (in): %s", dtype_name(t), n_tok, err.msg);
    dmax = rmax = 0;
    double gmax = 0, grmax = 0;
    for (int32_t k = 0; k < n_tok; k++) {
        const double r = 1.0 / sqrt(300.0 * (k + 1) / (double)n_in + 1e-5);
        for (int64_t j = 0; j < n_out; j++) {
            const double want = href[k * n_out + j] * r;
            dmax = fmax(dmax, fabs(hy[k * n_out + j] - want));
            rmax = fmax(rmax, fabs(want));
        }
        for (int64_t j = 0; j < n_ff; j++) {
            const double g = href[k * n_out + j] * r, u = href[k * n_out + n_ff + j] * r, want = g / (1 + exp(-g)) * u;
            gmax = fmax(gmax, fabs(hg[k * n_ff + j] - want));
            grmax = fmax(grmax, fabs(want));
        }
    }
    if (!(dmax <= in_tol * rmax) || !(gmax <= in_tol * grmax))
        fail_msg("matmul_defer_check %s n_tok %d (in): max diff %.3g of %.3g, with swiglu %.3g of %.3g (tolerance %.1g)",
                 dtype_name(t), n_tok, dmax, rmax, gmax, grmax, in_tol);
    const backend_mm_opts bad1 = {.in_ss = dss, .norm_w = dnw}, bad2 = {.out_xn = dxn, .out_nw = dnw};
    assert_int_equal(o->matmul_ex(c, &w, dx, n_tok, dy, &bad1, &err), AI_ERR_INVALID);
    assert_int_equal(o->matmul_ex(c, &w, dx, n_tok, dy, &bad2, &err), AI_ERR_INVALID);
    o->dealloc(c, dss);
    o->dealloc(c, d);
    o->dealloc(c, w.data);
    free(h);
}

/* matmul_ex with the rope + KV store epilogue (backend_mm_opts.rope_kv) against its definition on the
 * same backend: matmul_ex without it, then rope_store on the q|k|v rows. A q|k|v weight of type t for
 * 4 query and 2 kv heads of 64 dims (v heads of 32), rope over all 64 dims or the first 32, neox or
 * not, with the split norm's input scale (in_ss) or without; n_tok tokens at scattered positions, the
 * second one without a cache slot (rotate only). Both the outputs and every byte of both caches (junk
 * where no token is stored) must be identical: a fusing backend runs the same dot products and the
 * same rotation (cuk_rope.cuh), a composing one the same ops. Then the refusals: rope_kv with
 * accumulate, and with rows that are not q|k|v. */
static void matmul_rope_check(backend *be, dtype t, int32_t n_tok, dtype kv, int neox, int32_t rope_dim, bool scaled)
{
    const backend_ops *o = be->ops;
    void *c = be->ctx;
    ai_err err = {0};
    enum { NH = 4, NKV = 2, HD = 64, HDV = 32, SLOTS = 24 };
    const int64_t n_in = 1024, n_out = (NH + NKV) * HD + NKV * HDV, nx = (int64_t)n_tok * n_in;
    const int64_t ny = ((int64_t)n_tok * n_out + 63) & ~63, es = kv == DTYPE_F32 ? 4 : kv == DTYPE_F16 ? 2 : 1;
    const size_t kb = (size_t)SLOTS * NKV * HD * es, vb = (size_t)SLOTS * NKV * HDV * es;
    backend_weight w = {.type = t, .n_out = n_out, .n_in = n_in};
    assert_true(n_tok <= 16);
    float *h = malloc((size_t)(nx + 2 * ny) * sizeof(float));
    unsigned char *junk = malloc(kb), *hc = malloc(4 * kb);
    int32_t meta[32];
    double ss[16 * BACKEND_SS_LANES] = {0};
    assert_true(h && junk && hc);
    uint64_t st = 0x2545F4914F6CDD1Dull ^ (uint64_t)(t * 131 + n_tok * 7 + rope_dim);
    for (int64_t i = 0; i < nx; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = (float)((double)(st >> 11) / 9007199254740992.0) * 2.0f - 1.0f;
    }
    for (size_t i = 0; i < kb; i++) junk[i] = (unsigned char)(i * 29 + 7);
    for (int32_t k = 0; k < n_tok; k++) {
        meta[k] = (int32_t)((k * 2654435761u) % 9000u);     /* positions */
        meta[16 + k] = k == 1 ? -1 : (k * 5 + 3) % SLOTS;   /* slots: distinct, token 1 none */
        ss[k * BACKEND_SS_LANES + k % BACKEND_SS_LANES] = 200.0 * (k + 1); /* one lane, not always lane 0 */
    }
    float *d = NULL;
    unsigned char *dc = NULL;
    int32_t *dm = NULL;
    double *dss = NULL;
    if (o->alloc(c, o->weight_bytes(c, t, n_out, n_in), &w.data, &err) ||
        o->alloc(c, (size_t)(nx + 2 * ny) * sizeof(float), (void **)&d, &err) ||
        o->alloc(c, 4 * kb, (void **)&dc, &err) || o->alloc(c, sizeof meta, (void **)&dm, &err) ||
        o->alloc(c, sizeof ss, (void **)&dss, &err) || o->weight_random(c, &w, 31 + (uint64_t)t, 0.05f, &err) ||
        o->matmul_reserve(c, &w, n_tok, &err) || o->upload(c, d, h, (size_t)nx * sizeof(float), &err) ||
        o->upload(c, dm, meta, sizeof meta, &err) || o->upload(c, dss, ss, sizeof ss, &err))
        fail_msg("matmul_rope_check set-up: %s", err.msg);
    for (int i = 0; i < 4; i++)
        if (o->upload(c, dc + i * kb, junk, i % 2 ? vb : kb, &err)) fail_msg("matmul_rope_check: %s", err.msg);
    float *dx = d, *dref = d + nx, *dy = dref + ny;
    backend_rope_kv rref = {.n_head = NH, .n_head_kv = NKV, .head_dim = HD, .head_dim_v = HDV, .rope_dim = rope_dim,
                            .pos = dm, .base = 500000.0f, .freq_scale = 1.0f, .neox = neox, .k_cache = dc,
                            .v_cache = dc + kb, .kv_type = kv, .k_scale = 0.3f, .v_scale = 1.7f, .slot = dm + 16};
    backend_rope_kv rfus = rref;
    rfus.k_cache = dc + 2 * kb, rfus.v_cache = dc + 3 * kb;
    const backend_mm_opts plain = {.in_ss = scaled ? dss : NULL, .eps = 1e-5f};
    backend_mm_opts fused = plain;
    fused.rope_kv = &rfus;
    const int64_t qd = NH * HD, kvd = NKV * HD;
    if (o->matmul_ex(c, &w, dx, n_tok, dref, &plain, &err) ||
        o->rope_store(c, dref, n_out, dref + qd, n_out, dref + qd + kvd, n_out, n_tok, &rref, &err) ||
        o->matmul_ex(c, &w, dx, n_tok, dy, &fused, &err) ||
        o->download(c, h + nx, dref, (size_t)(2 * ny) * sizeof(float), &err) || o->download(c, hc, dc, 4 * kb, &err))
        fail_msg("matmul_rope_check %s n_tok %d: %s", dtype_name(t), n_tok, err.msg);
    const char *what = memcmp(h + nx, h + nx + ny, (size_t)n_tok * n_out * sizeof(float)) ? "q|k|v rows"
                       : memcmp(hc, hc + 2 * kb, kb)                                       ? "k cache"
                       : memcmp(hc + kb, hc + 3 * kb, vb)                                  ? "v cache"
                                                                                          : NULL;
    if (what)
        fail_msg("matmul_rope_check %s n_tok %d kv %s neox %d rope_dim %d scaled %d: %s not as matmul_ex + rope_store give them",
                 dtype_name(t), n_tok, dtype_name(kv), neox, rope_dim, scaled, what);
    backend_mm_opts bad = fused;
    bad.accumulate = true;
    assert_int_equal(o->matmul_ex(c, &w, dx, n_tok, dy, &bad, &err), AI_ERR_INVALID);
    backend_weight short_w = w;
    short_w.n_out -= 2;
    assert_int_not_equal(o->matmul_ex(c, &short_w, dx, n_tok, dy, &fused, &err), AI_OK);
    o->dealloc(c, dss);
    o->dealloc(c, dm);
    o->dealloc(c, dc);
    o->dealloc(c, d);
    o->dealloc(c, w.data);
    free(h);
    free(junk);
    free(hc);
}

/* The fusion sets every backend is checked with: each combination of norm, swiglu and add, the SwiGLU
 * epilogue alone and with the others (it replaces the swiglu prologue), the split norm alone and with
 * the others (it replaces norm and implies add in pure decode steps), the rope epilogue alone, with the
 * split norm and SwiGLU epilogue (the fewest kernels per layer) and with norm, swiglu, add; then AUTO. */
#define RC_X RUNNER_FUSE_EXACT
static const unsigned runner_check_fusions[] = {
    RC_X, RC_X | 1, RC_X | 2, RC_X | 3, RC_X | 4, RC_X | 5, RC_X | 6, RC_X | 7, RC_X | RUNNER_FUSE_GLU,
    RC_X | RUNNER_FUSE_GLU | RUNNER_FUSE_NORM, RC_X | RUNNER_FUSE_GLU | RUNNER_FUSE_ADD, RC_X | RUNNER_FUSE_GLU | 7,
    RC_X | RUNNER_FUSE_DEFER, RC_X | RUNNER_FUSE_DEFER | RUNNER_FUSE_SWIGLU, RC_X | RUNNER_FUSE_DEFER | RUNNER_FUSE_GLU,
    RC_X | RUNNER_FUSE_DEFER | 7, RC_X | RUNNER_FUSE_ROPE, RC_X | RUNNER_FUSE_ROPE | RUNNER_FUSE_DEFER | RUNNER_FUSE_GLU,
    RC_X | RUNNER_FUSE_ROPE | 7, RUNNER_FUSE_AUTO};
#undef RC_X

static const char *const runner_check_models[] = {
    "tests/fixtures/hf/llama", "tests/fixtures/hf/llama3_rope", "tests/fixtures/hf/llama_bf16",
    "tests/fixtures/hf/mistral", "tests/fixtures/hf/qwen2", "tests/fixtures/hf/qwen3", "tests/fixtures/hf/smollm",
    NULL};

#endif
