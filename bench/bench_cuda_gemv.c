/* bench_cuda_gemv.c - decode GEMV speed against the copy-bandwidth ceiling and cuBLASLt.
 *
 *   build/bench/bench_cuda_gemv [reps] [fuse|q|qfuse|step|split]   (only the fusion table, the quantized
 *                          table, both, the step table: bench_step, the tensor-core split-K table)
 *
 * For each Llama-3-8B matrix shape (n_out x n_in) x n_tok {1, 4, 16} x dtype {bf16, q4_0, q4_1, q8_0}:
 * the median time of one cuk_gemv, its effective bandwidth (weight bytes + x + y over time), that
 * as a fraction of the device-to-device copy bandwidth measured in this run (2 GB buffer, bytes read
 * + written), and cuBLASLt (bf16 weights, x rounded to bf16 by our small kernel, fp32 out; the same
 * path cuk_matmul takes for prefill) on the same shape.
 *
 * Timing: each measurement is a CUDA graph of N launches over N distinct copies of the weight
 * (N x bytes >= 512 MB, so L2 (50 MB) never serves weights), replayed `reps` times after a warm-up;
 * the per-launch time is the median replay time / N. Back-to-back launches in a graph are what a
 * decode step looks like. Weights are random (cuk_weight_fill_random), never zeros.
 * The "q" table also times the int8 tensor-core GEMV (k_gemv_qmma.cu) at 2-16 tokens, alone and with its
 * rounding kernel, against the dp4a kernel on the same shapes.
 * Then: bf16 CUDA cores vs tensor cores by n_tok; quantized n_tok > 1, the dp4a kernel (cuk_gemv's
 * pick) vs the float-decoding kernels it replaced; the n_tok = 1 tuning variants.
 * Then the fusions (cuk_gemv_ex, cuda_kernels.h) against their unfused pairs on the shapes the model
 * fuses them on: norm prologue vs cuk_rmsnorm + GEMV (stacked q|k|v, gate|up), swiglu prologue vs
 * cuk_swiglu_rows + GEMV (down), residual-add epilogue vs GEMV + cuk_add (wo, down), swiglu + add
 * (down, as the decode step runs it), the SwiGLU epilogue vs GEMV + cuk_swiglu_rows (gate|up, bf16
 * only); bf16 and q4_0, n_tok 1 and 4. Same graph timing; the saving
 * column is unfused - fused per call (positive: the fusion pays).
 * Last: the projected Llama-3-8B batch-1 decode time (GEMVs only) per dtype from the per-matrix medians.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/k_gemv.h"

#include "cuda_bench.h"

static ai_err err;

/* Per-launch median ms for one config: mode 0 cuk_gemv, 1 cuk_matmul_lt, 2 + v cuk_gemv_variant v,
 * -p: cuk_gemv_path p (1 CUDA cores, 2 tensor cores, 3 one n_tok = 1 pass per token, 4 dp4a),
 * MODE_SKINNY: cuk_skinny_bf16 (its default ring and flags, split picked) at any n_tok <= 16. */
#define MODE_SKINNY 1000
/* MODE_QMMA: cuk_gemv_dp4a_quantize + cuk_gemv_qmma_xq (what cuk_gemv_ex_work runs at 2-16 tokens);
 * MODE_QMMA_XQ: cuk_gemv_qmma_xq alone, on x rounded into work once before timing. */
#define MODE_QMMA 1001
#define MODE_QMMA_XQ 1002
static const char *variant_name;
static ai_status run_mode(int mode, cuk_gemm *gemm, cudaStream_t s, const cuk_weight *w, const float *x, int n_tok,
                          float *y, void *work, size_t ws)
{
    if (mode == MODE_SKINNY) return cuk_skinny_bf16(s, w, x, n_tok, y, 0, 0, &err);
    if (mode == MODE_QMMA || mode == MODE_QMMA_XQ) {
        if (mode == MODE_QMMA) {
            ai_status st = cuk_gemv_dp4a_quantize(s, w->type, x, n_tok, w->n_in, NULL, work, &err);
            if (st != AI_OK) return st;
        }
        return cuk_gemv_qmma_xq(s, w, work, n_tok, y, NULL, &err);
    }
    if (mode == 1) return cuk_matmul_lt(gemm, s, w, x, n_tok, y, work, ws, &err);
    if (mode >= 2) return cuk_gemv_variant(s, w, x, y, mode - 2, &variant_name, &err);
    if (mode < 0) return cuk_gemv_path(s, w, x, n_tok, y, -mode, &err);
    return cuk_gemv(s, w, x, n_tok, y, &err);
}

/* Copies of a random (n_out, n_in) weight totalling > 512 MiB (2..64 of them), so that timed calls
 * that rotate over them read from HBM, not from the 60 MiB L2. */
static cuk_weight *weights_alloc(cudaStream_t s, dtype t, int64_t n_out, int64_t n_in, int *copies)
{
    const size_t wb = cuk_weight_bytes(t, n_out, n_in);
    int n = (int)(((size_t)512 << 20) / wb) + 1;
    if (n < 2) n = 2;
    if (n > 64) n = 64;
    cuk_weight *w = calloc((size_t)n, sizeof *w);
    for (int i = 0; i < n; i++) {
        w[i] = (cuk_weight){.type = t, .n_out = n_out, .n_in = n_in};
        CK(cudaMalloc(&w[i].data, wb));
        AI(cuk_weight_fill_random(s, &w[i], 1000 + (uint64_t)i, 0.05f, &err));
    }
    *copies = n;
    return w;
}

static void weights_free(cuk_weight *w, int copies)
{
    for (int i = 0; i < copies; i++) cudaFree(w[i].data);
    free(w);
}

static double time_config(cudaStream_t s, dtype t, int64_t n_out, int64_t n_in, int n_tok, int mode, cuk_gemm *gemm,
                          int reps)
{
    const int lt = mode == 1;
    int copies;
    cuk_weight *w = weights_alloc(s, t, n_out, n_in, &copies);
    float *x, *y;
    CK(cudaMalloc((void **)&x, (size_t)n_tok * n_in * sizeof(float)));
    CK(cudaMalloc((void **)&y, (size_t)n_tok * n_out * sizeof(float)));
    cuk_weight xw = {.type = DTYPE_F32, .n_out = n_tok, .n_in = n_in, .data = x};
    AI(cuk_weight_fill_random(s, &xw, 7, 1.0f, &err));
    const int qm = mode == MODE_QMMA || mode == MODE_QMMA_XQ;
    size_t ws = lt ? cuk_matmul_lt_work_size(&w[0], n_tok) : qm ? cuk_gemv_dp4a_xq_bytes(n_in, n_tok) : 0;
    void *work = NULL;
    if (ws) CK(cudaMalloc(&work, ws));
    if (mode == MODE_QMMA_XQ) AI(cuk_gemv_dp4a_quantize(s, t, x, n_tok, n_in, NULL, work, &err));
    /* one untimed call outside capture: creates the cuBLASLt plan (host allocation on first use) */
    AI(run_mode(mode, gemm, s, &w[0], x, n_tok, y, work, ws));
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < copies; i++) {
        AI(run_mode(mode, gemm, s, &w[i], x, n_tok, y, work, ws));
    }
    const double ms = time_capture(s, reps) / copies;
    weights_free(w, copies);
    cudaFree(x);
    cudaFree(y);
    cudaFree(work);
    return ms;
}

enum { FZ_NORM = 1, FZ_SWIGLU = 2, FZ_ADD = 4, FZ_GLU = 8 };

/* Per-call median ms of one fusion (FZ_* bits) on one shape: fused = one cuk_gemv_ex, else the
 * unfused pair (cuk_rmsnorm / cuk_swiglu_rows into a scratch row, cuk_gemv, cuk_add; FZ_GLU: cuk_gemv
 * into a scratch, cuk_swiglu_rows of it into y). */
static double time_fusion(cudaStream_t s, dtype t, int64_t n_out, int64_t n_in, int n_tok, int fz, int fused,
                          int reps)
{
    int copies;
    cuk_weight *w = weights_alloc(s, t, n_out, n_in, &copies);
    const int64_t xw = (fz & FZ_SWIGLU) ? 2 * n_in : n_in;
    float *x, *xin, *nw, *y, *tmp;
    CK(cudaMalloc((void **)&x, (size_t)n_tok * xw * sizeof(float)));
    CK(cudaMalloc((void **)&xin, (size_t)n_tok * n_in * sizeof(float)));
    CK(cudaMalloc((void **)&nw, (size_t)n_in * sizeof(float)));
    CK(cudaMalloc((void **)&y, (size_t)n_tok * n_out * sizeof(float)));
    CK(cudaMalloc((void **)&tmp, (size_t)n_tok * n_out * sizeof(float)));
    cuk_weight xr = {.type = DTYPE_F32, .n_out = n_tok, .n_in = xw, .data = x};
    AI(cuk_weight_fill_random(s, &xr, 7, 1.0f, &err));
    cuk_weight nr = {.type = DTYPE_F32, .n_out = 1, .n_in = n_in, .data = nw};
    AI(cuk_weight_fill_random(s, &nr, 8, 1.0f, &err));
    CK(cudaMemsetAsync(y, 0, (size_t)n_tok * n_out * sizeof(float), s));
    const cuk_mm_opts o = {.norm_w = (fz & FZ_NORM) ? nw : NULL, .eps = 1e-5f, .swiglu_in = (fz & FZ_SWIGLU) != 0,
                           .accumulate = (fz & FZ_ADD) != 0, .swiglu_out = (fz & FZ_GLU) != 0};
    for (int pass = 0; pass < 2; pass++) { /* pass 0: one untimed call outside capture (function attributes) */
        if (pass) CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < (pass ? copies : 1); i++) {
            if (fused) {
                AI(cuk_gemv_ex(s, &w[i], x, n_tok, y, &o, &err));
                continue;
            }
            const float *in = x;
            if (fz & FZ_NORM) AI(cuk_rmsnorm(s, xin, x, nw, n_tok, (int32_t)n_in, 1e-5f, &err));
            if (fz & FZ_SWIGLU) AI(cuk_swiglu_rows(s, xin, x, n_tok, (int32_t)n_in, &err));
            if (fz & (FZ_NORM | FZ_SWIGLU)) in = xin;
            AI(cuk_gemv(s, &w[i], in, n_tok, (fz & (FZ_ADD | FZ_GLU)) ? tmp : y, &err));
            if (fz & FZ_ADD) AI(cuk_add(s, y, tmp, (int64_t)n_tok * n_out, &err));
            if (fz & FZ_GLU) AI(cuk_swiglu_rows(s, y, tmp, n_tok, (int32_t)(n_out / 2), &err));
        }
        if (!pass) CK(cudaStreamSynchronize(s));
    }
    const double ms = time_capture(s, reps) / copies;
    weights_free(w, copies);
    cudaFree(x); cudaFree(xin); cudaFree(nw); cudaFree(y); cudaFree(tmp);
    return ms;
}

/* The quantized table ("q"): cuk_gemv on the shapes a Llama-3-8B step runs (stacked q|k|v and gate|up),
 * n_tok 1, 2, 4, 8, us per call and % of copy; the batch-1 step's GEMV time from them; the n_tok = 1
 * variants of q4_0 (k_gemv.cu cuk_gemv_variant) on the same shapes. bf16 n_tok 1 for reference. */
static void bench_quant(cudaStream_t s, cuk_gemm *gemm, int reps, double copy)
{
    static const struct { const char *name; int64_t n_out, n_in; } sh[] = {
        {"wo", 4096, 4096},          {"wk", 1024, 4096},         {"qkv", 6144, 4096},
        {"gate_up", 28672, 4096},    {"down", 4096, 14336},      {"output", 128256, 4096},
    };
    enum { NS = sizeof sh / sizeof *sh };
    static const dtype types[] = {DTYPE_Q4_0, DTYPE_Q4_1, DTYPE_Q8_0, DTYPE_BF16};
    static const int toks[] = {1, 2, 4, 8};
    /* quantized 1-16 tokens: the int8 tensor cores (k_gemv_qmma.cu) alone and with their rounding kernel,
     * against the dp4a kernel (cuk_gemv's pick) on the same shapes; 1 token is not routed to the tensor
     * cores (the dp4a kernel rounds x in its prologue, no kernel of its own): the row says what it would give */
    static const int qtoks[] = {1, 2, 4, 8, 16};
    static const char *qname[] = {"qmma", "+round", "dp4a"};
    printf("quantized n_tok 1-16, us per call (%% of copy): qmma = k_gemv_qmma.cu on rounded x, +round = with "
           "cuk_gemv_dp4a_quantize (the model's pair), dp4a = cuk_gemv\n");
    for (int di = 0; di < 3; di++)
        for (int ti = 0; ti < 5; ti++)
            for (int k = 0; k < 3; k++) {
                printf("%-5s %-3d %-6s", dtype_name(types[di]), qtoks[ti], qname[k]);
                for (int si = 0; si < NS; si++) {
                    const int mode = k == 0 ? MODE_QMMA_XQ : k == 1 ? MODE_QMMA : 0;
                    const double ms = time_config(s, types[di], sh[si].n_out, sh[si].n_in, qtoks[ti], mode, gemm, reps);
                    const double bytes = (double)cuk_weight_bytes(types[di], sh[si].n_out, sh[si].n_in) +
                                         4.0 * qtoks[ti] * (double)(sh[si].n_in + sh[si].n_out);
                    printf("   %8.2f (%5.1f%%)   ", ms * 1e3, 100.0 * bytes / (ms * 1e-3) / copy);
                }
                printf("\n");
                fflush(stdout);
            }
    printf("\n");
    printf("quantized GEMVs: us per call (%% of copy), cuk_gemv's pick\n%-10s", "dtype n_tok");
    for (int si = 0; si < NS; si++) printf(" %11s %5lldx%-6lld", sh[si].name, (long long)sh[si].n_out, (long long)sh[si].n_in);
    printf("\n");
    for (int di = 0; di < 4; di++) {
        double t1[NS] = {0};
        for (int ti = 0; ti < (types[di] == DTYPE_BF16 ? 1 : 4); ti++) {
            printf("%-5s %-4d", dtype_name(types[di]), toks[ti]);
            for (int si = 0; si < NS; si++) {
                const double ms = time_config(s, types[di], sh[si].n_out, sh[si].n_in, toks[ti], 0, gemm, reps);
                const double bytes = (double)cuk_weight_bytes(types[di], sh[si].n_out, sh[si].n_in) +
                                     4.0 * toks[ti] * (double)(sh[si].n_in + sh[si].n_out);
                if (ti == 0) t1[si] = ms;
                printf("   %8.2f (%5.1f%%)   ", ms * 1e3, 100.0 * bytes / (ms * 1e-3) / copy);
            }
            printf("\n");
            fflush(stdout);
        }
        /* batch-1 step: 32 x (qkv + wo + gate_up + down) + output */
        const double ms = 32.0 * (t1[2] + t1[0] + t1[3] + t1[4]) + t1[5];
        const double bytes = 32.0 * ((double)cuk_weight_bytes(types[di], 6144, 4096) +
                                     (double)cuk_weight_bytes(types[di], 4096, 4096) +
                                     (double)cuk_weight_bytes(types[di], 28672, 4096) +
                                     (double)cuk_weight_bytes(types[di], 4096, 14336)) +
                             (double)cuk_weight_bytes(types[di], 128256, 4096);
        printf("  llama3-8b %s batch-1 GEMVs (stacked): %.3f ms/token, %.1f%% of copy\n", dtype_name(types[di]), ms,
               100.0 * bytes / (ms * 1e-3) / copy);
    }
    printf("\nq4_0 / q8_0 n_tok 1 variants: us (%% of copy)\n");
    for (int q = 0; q < 2; q++) {
        const dtype t = q ? DTYPE_Q8_0 : DTYPE_Q4_0;
        for (int v = 0; v < CUK_GEMV_VARIANTS; v++) {
            printf("%-5s %-9s", dtype_name(t), "");
            for (int si = 0; si < NS; si++) {
                const double ms = time_config(s, t, sh[si].n_out, sh[si].n_in, 1, 2 + v, gemm, reps);
                const double bytes = (double)cuk_weight_bytes(t, sh[si].n_out, sh[si].n_in) + 4.0 * (double)(sh[si].n_in + sh[si].n_out);
                printf("   %8.2f (%5.1f%%)   ", ms * 1e3, 100.0 * bytes / (ms * 1e-3) / copy);
            }
            printf(" %s\n", variant_name);
            fflush(stdout);
        }
    }
}

/* The batch-1 step's quantized products as the decode step runs them ("step" table): one sequence
 * per call, timed like time_fusion (a graph of N calls over N weight copies). */
enum {
    SQ_PLAIN,     /* cuk_gemv, f32 x */
    SQ_XQ,        /* cuk_gemv_dp4a_xq alone, x rounded beforehand (the prologue's cost = PLAIN - XQ) */
    SQ_NORM,      /* cuk_gemv_ex norm prologue (qkv, gate|up, output) */
    SQ_ADD,       /* cuk_gemv_ex accumulate (wo) */
    SQ_SW_ROWS,   /* cuk_swiglu_rows + cuk_gemv_ex accumulate (down, fuse norm,add) */
    SQ_SW_FUSED,  /* cuk_gemv_ex swiglu prologue + accumulate (down, one kernel) */
    SQ_SW_SPLIT,  /* cuk_gemv_ex_work swiglu + accumulate (down: cuk_gemv_dp4a_quantize + cuk_gemv_dp4a_xq) */
    SQ_NORM_SPLIT, /* cuk_gemv_dp4a_quantize with the norm + cuk_gemv_dp4a_xq (qkv, gate|up, output) */
};

static double time_seq(cudaStream_t s, dtype t, int64_t n_out, int64_t n_in, int n_tok, int how, int reps)
{
    int copies;
    cuk_weight *w = weights_alloc(s, t, n_out, n_in, &copies);
    const int sw = how == SQ_SW_ROWS || how == SQ_SW_FUSED || how == SQ_SW_SPLIT;
    const int64_t xw = sw ? 2 * n_in : n_in;
    float *x, *xin, *nw, *y;
    void *work;
    const size_t ws = cuk_gemv_dp4a_xq_bytes(n_in, n_tok) + cuk_gemv_work_size(&w[0], n_tok) + 16;
    CK(cudaMalloc((void **)&x, (size_t)n_tok * xw * sizeof(float)));
    CK(cudaMalloc((void **)&xin, (size_t)n_tok * n_in * sizeof(float)));
    CK(cudaMalloc((void **)&nw, (size_t)n_in * sizeof(float)));
    CK(cudaMalloc((void **)&y, (size_t)n_tok * n_out * sizeof(float)));
    CK(cudaMalloc(&work, ws));
    cuk_weight xr = {.type = DTYPE_F32, .n_out = n_tok, .n_in = xw, .data = x};
    AI(cuk_weight_fill_random(s, &xr, 7, 1.0f, &err));
    cuk_weight nr = {.type = DTYPE_F32, .n_out = 1, .n_in = n_in, .data = nw};
    AI(cuk_weight_fill_random(s, &nr, 8, 1.0f, &err));
    CK(cudaMemsetAsync(y, 0, (size_t)n_tok * n_out * sizeof(float), s));
    if (how == SQ_XQ) AI(cuk_gemv_dp4a_quantize(s, t, x, n_tok, n_in, NULL, work, &err));
    const cuk_mm_opts on = {.norm_w = nw, .eps = 1e-5f}, oa = {.accumulate = true},
                      osw = {.swiglu_in = true, .accumulate = true};
    for (int pass = 0; pass < 2; pass++) { /* pass 0: one untimed call outside capture (function attributes) */
        if (pass) CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < (pass ? copies : 1); i++) {
            switch (how) {
            case SQ_PLAIN: AI(cuk_gemv(s, &w[i], x, n_tok, y, &err)); break;
            case SQ_XQ: AI(cuk_gemv_dp4a_xq(s, &w[i], work, n_tok, y, NULL, &err)); break;
            case SQ_NORM_SPLIT:
                AI(cuk_gemv_dp4a_quantize(s, t, x, n_tok, n_in, &on, work, &err));
                AI(cuk_gemv_dp4a_xq(s, &w[i], work, n_tok, y, &on, &err));
                break;
            case SQ_NORM: AI(cuk_gemv_ex(s, &w[i], x, n_tok, y, &on, &err)); break;
            case SQ_ADD: AI(cuk_gemv_ex(s, &w[i], x, n_tok, y, &oa, &err)); break;
            case SQ_SW_ROWS:
                AI(cuk_swiglu_rows(s, xin, x, n_tok, (int32_t)n_in, &err));
                AI(cuk_gemv_ex(s, &w[i], xin, n_tok, y, &oa, &err));
                break;
            case SQ_SW_FUSED: AI(cuk_gemv_ex(s, &w[i], x, n_tok, y, &osw, &err)); break;
            default: AI(cuk_gemv_ex_work(s, &w[i], x, n_tok, y, &osw, work, ws, &err)); break;
            }
        }
        if (!pass) CK(cudaStreamSynchronize(s));
    }
    const double ms = time_capture(s, reps) / copies;
    weights_free(w, copies);
    cudaFree(x); cudaFree(xin); cudaFree(nw); cudaFree(y); cudaFree(work);
    return ms;
}

/* The "step" table: q4_0 (and q4_1) n_tok 1 and 4, each product of a Llama-3-8B layer as the decode step
 * runs it with fuse norm,add (the default before 2026-12-04's second session) and with the SwiGLU
 * split (cuk_gemv_ex_work), the plain and pre-rounded-x GEMVs per shape (the x prologue's cost), then
 * the q4_0 n_tok 1 tuning variants on the n_in 4096 shapes. */
static void bench_step(cudaStream_t s, int reps, double copy)
{
    static const struct { const char *name; int64_t n_out, n_in; } sh[] = {
        {"wo", 4096, 4096},       {"wk", 1024, 4096},    {"qkv", 6144, 4096},
        {"gate_up", 28672, 4096}, {"down", 4096, 14336}, {"output", 128256, 4096},
    };
    enum { NS = sizeof sh / sizeof *sh };
    static const dtype types[] = {DTYPE_Q4_0, DTYPE_Q4_1};
    static const int toks[] = {1, 4};
    for (int di = 0; di < 2; di++)
        for (int ti = 0; ti < 2; ti++) {
            const dtype t = types[di];
            const int nt = toks[ti];
            printf("%s n_tok %d: us per call (%% of copy)\n%-22s", dtype_name(t), nt, "");
            for (int si = 0; si < NS; si++) printf(" %17s", sh[si].name);
            printf("\n");
            static const struct { const char *name; int how; } rows[] = {{"plain f32 x", SQ_PLAIN}, {"pre-rounded x (xq)", SQ_XQ}};
            for (int ri = 0; ri < 2; ri++) {
                printf("%-22s", rows[ri].name);
                for (int si = 0; si < NS; si++) {
                    const double ms = time_seq(s, t, sh[si].n_out, sh[si].n_in, nt, rows[ri].how, reps);
                    const double bytes = (double)cuk_weight_bytes(t, sh[si].n_out, sh[si].n_in);
                    printf(" %8.2f (%5.1f%%)", ms * 1e3, 100.0 * bytes / (ms * 1e-3) / copy);
                }
                printf("\n");
                fflush(stdout);
            }
            /* the step's sequence per layer */
            const double qkv = time_seq(s, t, 6144, 4096, nt, SQ_NORM, reps), wo = time_seq(s, t, 4096, 4096, nt, SQ_ADD, reps),
                         gu = time_seq(s, t, 28672, 4096, nt, SQ_NORM, reps),
                         d_rows = time_seq(s, t, 4096, 14336, nt, SQ_SW_ROWS, reps),
                         d_fused = time_seq(s, t, 4096, 14336, nt, SQ_SW_FUSED, reps),
                         d_split = time_seq(s, t, 4096, 14336, nt, SQ_SW_SPLIT, reps),
                         out = time_seq(s, t, 128256, 4096, nt, SQ_NORM, reps),
                         qkv_s = time_seq(s, t, 6144, 4096, nt, SQ_NORM_SPLIT, reps),
                         gu_s = time_seq(s, t, 28672, 4096, nt, SQ_NORM_SPLIT, reps),
                         out_s = time_seq(s, t, 128256, 4096, nt, SQ_NORM_SPLIT, reps);
            printf("norm split (quantize + xq gemv): qkv %.2f, gate_up %.2f, output %.2f us -> step %+.3f ms\n",
                   qkv_s * 1e3, gu_s * 1e3, out_s * 1e3, 32 * (qkv_s - qkv + gu_s - gu) + out_s - out);
            printf("as the step runs them: qkv+norm %.2f, wo+add %.2f, gate_up+norm %.2f, output+norm %.2f us;\n"
                   "  down: swiglu_rows + gemv+add %.2f, one kernel (swiglu prologue) %.2f, split (quantize + xq gemv) "
                   "%.2f us\n  layer with swiglu_rows %.2f, split %.2f us -> step GEMVs %.3f -> %.3f ms (%+.3f)\n\n",
                   qkv * 1e3, wo * 1e3, gu * 1e3, out * 1e3, d_rows * 1e3, d_fused * 1e3, d_split * 1e3,
                   (qkv + wo + gu + d_rows) * 1e3, (qkv + wo + gu + d_split) * 1e3, 32 * (qkv + wo + gu + d_rows) + out,
                   32 * (qkv + wo + gu + d_split) + out, 32 * (d_split - d_rows));
            fflush(stdout);
        }
    printf("q4_0 n_tok 1 variants: us (%% of copy)\n");
    for (int v = 0; v < CUK_GEMV_VARIANTS - 1; v++) {
        printf("%-10s", "");
        const char *name = "";
        for (int si = 0; si < NS; si++) {
            if (si == 5) continue; /* output: large enough for any variant */
            const double ms = time_config(s, DTYPE_Q4_0, sh[si].n_out, sh[si].n_in, 1, 2 + v, NULL, reps);
            name = variant_name;
            printf(" %s %6.2f (%5.1f%%)", sh[si].name, ms * 1e3,
                   100.0 * (double)cuk_weight_bytes(DTYPE_Q4_0, sh[si].n_out, sh[si].n_in) / (ms * 1e-3) / copy);
        }
        printf("  %s\n", name);
        fflush(stdout);
    }
}

/* The fusion table (header). */
static void bench_fusions(cudaStream_t s, int reps)
{
    static const struct { const char *name; int64_t n_out, n_in; int fz; } rows[] = {
        {"norm   qkv", 6144, 4096, FZ_NORM},          {"norm   gate_up", 28672, 4096, FZ_NORM},
        {"swiglu down", 4096, 14336, FZ_SWIGLU},      {"add    wo", 4096, 4096, FZ_ADD},
        {"add    down", 4096, 14336, FZ_ADD},         {"sw+add down", 4096, 14336, FZ_SWIGLU | FZ_ADD},
        {"glu    gate_up", 28672, 4096, FZ_GLU}, /* the SwiGLU epilogue: float weights only */
    };
    static const dtype types[] = {DTYPE_BF16, DTYPE_Q4_0};
    static const int toks[] = {1, 4};
    printf("\nfusions: fused cuk_gemv_ex vs the unfused pair (us per call; saving = unfused - fused)\n");
    printf("%-15s %13s %5s %-5s %9s %11s %9s\n", "fusion", "n_out x n_in", "n_tok", "dtype", "fused_us", "unfused_us",
           "saving");
    for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++)
        for (int di = 0; di < 2; di++)
            for (int ti = 0; ti < 2; ti++) {
                if ((rows[ri].fz & FZ_GLU) && types[di] != DTYPE_BF16) continue;
                const double f = time_fusion(s, types[di], rows[ri].n_out, rows[ri].n_in, toks[ti], rows[ri].fz, 1, reps);
                const double u = time_fusion(s, types[di], rows[ri].n_out, rows[ri].n_in, toks[ti], rows[ri].fz, 0, reps);
                printf("%-15s %6lldx%-6lld %5d %-5s %9.2f %11.2f %+9.2f\n", rows[ri].name, (long long)rows[ri].n_out,
                       (long long)rows[ri].n_in, toks[ti], dtype_name(types[di]), f * 1e3, u * 1e3, (u - f) * 1e3);
                fflush(stdout);
            }
}

/* The bf16 matrices of a Llama-3-8B decode step. */
static const struct { const char *name; int64_t n_out, n_in; } step_mats[] = {
    {"qkv", 6144, 4096}, {"wo", 4096, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336}, {"output", 128256, 4096},
};

/* `bench_cuda_gemv R skinny`: the skinny wgmma GEMM (k_skinny.cu, called directly: cuk_matmul takes it
 * only at CUK_SKINNY_MIN_TOK..CUK_SKINNY_MAX_TOK tokens) against cuBLASLt (cuk_matmul_lt with the skinny
 * route off) and our GEMV, on the Llama-3-8B matrices at n_tok 1-16: us per call and TB/s of weight
 * bytes (cuBLASLt's row includes the kernel that rounds x to bf16; the skinny GEMM rounds its f32 x
 * itself). */
static void bench_skinny(cudaStream_t s, int reps, double copy)
{
    static const int toks[] = {1, 4, 5, 8, 12, 16};
    setenv("AIINFRA_SKINNY", "0", 1);
    cuk_gemm *gemm = NULL;
    AI(cuk_gemm_init(&gemm, &err));
    unsetenv("AIINFRA_SKINNY");
    printf("%-8s %5s | %18s | %18s | %18s | %s\n", "matrix", "n_tok", "skinny us (TB/s)", "cuBLASLt us (TB/s)",
           "our GEMV us (TB/s)", "skinny vs cuBLASLt");
    for (size_t si = 0; si < sizeof step_mats / sizeof *step_mats; si++)
        for (size_t ti = 0; ti < sizeof toks / sizeof *toks; ti++) {
            const int nt = toks[ti];
            const double bytes = (double)cuk_weight_bytes(DTYPE_BF16, step_mats[si].n_out, step_mats[si].n_in);
            const double sk = time_config(s, DTYPE_BF16, step_mats[si].n_out, step_mats[si].n_in, nt, MODE_SKINNY, gemm, reps);
            const double lt = time_config(s, DTYPE_BF16, step_mats[si].n_out, step_mats[si].n_in, nt, 1, gemm, reps);
            const double gv = time_config(s, DTYPE_BF16, step_mats[si].n_out, step_mats[si].n_in, nt, 0, gemm, reps);
            printf("%-8s %5d | %8.2f (%5.2f)   | %8.2f (%5.2f)   | %8.2f (%5.2f)   | %.2fx  (%.0f%% of copy)\n",
                   step_mats[si].name, nt, sk * 1e3, bytes / (sk * 1e-3) / 1e12, lt * 1e3, bytes / (lt * 1e-3) / 1e12,
                   gv * 1e3, bytes / (gv * 1e-3) / 1e12, lt / sk, 100.0 * bytes / (sk * 1e-3) / copy);
            fflush(stdout);
        }
    cuk_gemm_free(gemm);
}

/* `bench_cuda_gemv R skinnycfg`: k_skinny.cu's ring configurations (boxes per stage x stages) by
 * split-K cluster size and CUK_SKINNY_* flags (f32 x, rounded inside), TB/s of weight bytes and % of
 * copy. */
static void bench_skinny_cfg(cudaStream_t s, int reps, double copy)
{
    static const int toks[] = {1, 4, 8, 16};
    static const int cols[][2] = {{1, 0}, {1, 1}, {2, 1}, {1, 3}, {0, 1}}; /* split, flags */
    const int ncol = (int)(sizeof cols / sizeof *cols);
    printf("skinny wgmma GEMM: TB/s of weights (%% of copy) by ring configuration, split (0: picked) and flags\n"
           "%-8s %5s %3s", "matrix", "n_tok", "cfg");
    for (int i = 0; i < ncol; i++) printf("  %9s%d f%d ", "split ", cols[i][0], cols[i][1]);
    printf("\n");
    for (size_t si = 0; si < sizeof step_mats / sizeof *step_mats; si++) {
        int copies;
        cuk_weight *w = weights_alloc(s, DTYPE_BF16, step_mats[si].n_out, step_mats[si].n_in, &copies);
        cuk_weight xw = {.type = DTYPE_F32, .n_out = 16, .n_in = step_mats[si].n_in};
        float *y;
        CK(cudaMalloc(&xw.data, (size_t)16 * step_mats[si].n_in * sizeof(float)));
        CK(cudaMalloc((void **)&y, (size_t)16 * step_mats[si].n_out * sizeof(float)));
        AI(cuk_weight_fill_random(s, &xw, 7, 1.0f, &err));
        const double bytes = (double)cuk_weight_bytes(DTYPE_BF16, step_mats[si].n_out, step_mats[si].n_in);
        for (size_t ti = 0; ti < sizeof toks / sizeof *toks; ti++)
            for (int cfg = 0; cfg < CUK_SKINNY_CFGS; cfg++) {
                printf("%-8s %5d %3d", step_mats[si].name, toks[ti], cfg);
                for (int col = 0; col < ncol; col++) {
                    const int split = cols[col][0], fl = cols[col][1];
                    AI(cuk_skinny_bf16_cfg(s, &w[0], xw.data, toks[ti], y, 0, split, cfg, fl, &err));
                    CK(cudaStreamSynchronize(s));
                    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
                    for (int i = 0; i < copies; i++)
                        AI(cuk_skinny_bf16_cfg(s, &w[i], xw.data, toks[ti], y, 0, split, cfg, fl, &err));
                    const double ms = time_capture(s, reps) / copies, bw = bytes / (ms * 1e-3);
                    printf("  %6.3f (%3.0f%%)", bw / 1e12, 100.0 * bw / copy);
                }
                printf("\n");
                fflush(stdout);
            }
        cudaFree(xw.data);
        cudaFree(y);
        weights_free(w, copies);
    }
}

/* The tensor-core kernel's row-block / split-K shapes (k_gemv.h, AIINFRA_GEMV_MMA_SPLIT; the last
 * column: "auto", the default pick) on the calls of a bf16 decode step, fused (cuk_gemv_ex with the
 * step's prologue / epilogue) and plain, at n_tok 5, 8, 16: TB/s of weight bytes and % of copy. */
static void bench_mma_splits(cudaStream_t s, int reps, double copy)
{
    static const struct { const char *name; int64_t n_out, n_in; int fz; } rows[] = {
        {"norm   qkv", 6144, 4096, FZ_NORM},     {"add    wo", 4096, 4096, FZ_ADD},
        {"norm   gate_up", 28672, 4096, FZ_NORM}, {"sw+add down", 4096, 14336, FZ_SWIGLU | FZ_ADD},
        {"qkv", 6144, 4096, 0},                  {"wo", 4096, 4096, 0},
        {"gate_up", 28672, 4096, 0},             {"down", 4096, 14336, 0},
        {"output", 128256, 4096, 0},
    };
    static const int toks[] = {5, 8, 16};
    printf("\nbf16 tensor-core GEMV by split (k_gemv.h CUK_GEMV_MMA_SPLITS): TB/s of weights (%%copy)\n%-15s %5s",
           "call", "n_tok");
    for (int sp = 0; sp < CUK_GEMV_MMA_SPLITS; sp++) printf("  %15s%d", "split ", sp);
    printf("  %16s\n", "auto");
    for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++)
        for (int ti = 0; ti < 3; ti++) {
            printf("%-15s %5d", rows[ri].name, toks[ti]);
            for (int sp = 0; sp <= CUK_GEMV_MMA_SPLITS; sp++) {
                char v[8];
                snprintf(v, sizeof v, "%d", sp);
                setenv("AIINFRA_GEMV_MMA_SPLIT", sp < CUK_GEMV_MMA_SPLITS ? v : "auto", 1);
                const double ms = time_fusion(s, DTYPE_BF16, rows[ri].n_out, rows[ri].n_in, toks[ti], rows[ri].fz, 1, reps);
                const double bw = (double)cuk_weight_bytes(DTYPE_BF16, rows[ri].n_out, rows[ri].n_in) / (ms * 1e-3);
                printf("  %7.3f (%5.1f%%)", bw / 1e12, 100.0 * bw / copy);
            }
            printf("\n");
            fflush(stdout);
        }
    unsetenv("AIINFRA_GEMV_MMA_SPLIT");
}

int main(int argc, char **argv)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        printf("skipped: no CUDA device\n");
        return 0;
    }
    const int reps = argc > 1 ? atoi(argv[1]) : 30;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cuk_gemm *gemm = NULL;
    AI(cuk_gemm_init(&gemm, &err));
    const double copy = copy_bandwidth(s, reps);
    printf("copy bandwidth (D2D 2 GB, read+write): %.3f TB/s\n\n", copy / 1e12);
    if (argc > 2 && strcmp(argv[2], "split") == 0) {
        bench_mma_splits(s, reps, copy);
        cuk_gemm_free(gemm);
        cudaStreamDestroy(s);
        return 0;
    }
    if (argc > 2 && strcmp(argv[2], "skinnycfg") == 0) {
        bench_skinny_cfg(s, reps, copy);
        cuk_gemm_free(gemm);
        cudaStreamDestroy(s);
        return 0;
    }
    if (argc > 2 && strcmp(argv[2], "skinny") == 0) {
        bench_skinny(s, reps, copy);
        cuk_gemm_free(gemm);
        cudaStreamDestroy(s);
        return 0;
    }
    if (argc > 2 && strcmp(argv[2], "step") == 0) {
        bench_step(s, reps, copy);
        cuk_gemm_free(gemm);
        cudaStreamDestroy(s);
        return 0;
    }
    if (argc > 2 && (strcmp(argv[2], "fuse") == 0 || strcmp(argv[2], "q") == 0 || strcmp(argv[2], "qfuse") == 0)) {
        if (argv[2][0] == 'q') bench_quant(s, gemm, reps, copy); /* the quantized table */
        if (strcmp(argv[2], "q") != 0) bench_fusions(s, reps); /* the fusion table */
        cuk_gemm_free(gemm);
        cudaStreamDestroy(s);
        return 0;
    }

    static const struct { const char *name; int64_t n_out, n_in; int per_layer; } shapes[] = {
        {"wq/wo", 4096, 4096, 2}, {"wk/wv", 1024, 4096, 2}, {"gate/up", 14336, 4096, 2},
        {"down", 4096, 14336, 1}, {"output", 128256, 4096, 0},
    };
    static const int toks[] = {1, 4, 8, 16};
    static const dtype types[] = {DTYPE_BF16, DTYPE_Q4_0, DTYPE_Q4_1, DTYPE_Q8_0};
    double t1[4][5] = {{0}}; /* n_tok 1 ms per [dtype][shape] */
    printf("%-8s %13s %5s %-5s %9s %8s %7s | %12s %8s %8s\n", "matrix", "n_out x n_in", "n_tok", "dtype", "gemv_us",
           "TB/s", "%copy", "cublasLt_us", "TB/s", "speedup");
    for (int si = 0; si < 5; si++) {
        for (int ti = 0; ti < 4; ti++) {
            const int nt = toks[ti];
            const int64_t no = shapes[si].n_out, ni = shapes[si].n_in;
            const double lt_ms = time_config(s, DTYPE_BF16, no, ni, nt, 1, gemm, reps);
            const double lt_bytes = (double)cuk_weight_bytes(DTYPE_BF16, no, ni) + 4.0 * nt * (double)(ni + no);
            for (int di = 0; di < 4; di++) {
                const dtype t = types[di];
                const double ms = time_config(s, t, no, ni, nt, 0, gemm, reps);
                const double bytes = (double)cuk_weight_bytes(t, no, ni) + 4.0 * nt * (double)(ni + no);
                const double bw = bytes / (ms * 1e-3);
                if (nt == 1) t1[di][si] = ms;
                printf("%-8s %6lldx%-6lld %5d %-5s %9.2f %8.3f %6.1f%% | %12.2f %8.3f %7.2fx\n", shapes[si].name,
                       (long long)no, (long long)ni, nt, dtype_name(t), ms * 1e3, bw / 1e12, 100.0 * bw / copy,
                       lt_ms * 1e3, lt_bytes / (lt_ms * 1e-3) / 1e12, lt_ms / ms);
                fflush(stdout);
            }
        }
    }
    /* bf16: CUDA-core vs tensor-core kernel at each n_tok (cuk_gemv switches at CUK_GEMV_MMA_MIN_TOK) */
    printf("\nbf16 kernels, TB/s effective: CUDA cores / tensor cores (mma)\n%-8s", "n_tok");
    for (int si = 0; si < 5; si++) printf(" %17s", shapes[si].name);
    printf("\n");
    static const int ptoks[] = {1, 2, 3, 4, 8, 16};
    for (int ti = 0; ti < 6; ti++) {
        printf("%-8d", ptoks[ti]);
        for (int si = 0; si < 5; si++) {
            const int64_t no = shapes[si].n_out, ni = shapes[si].n_in;
            const double bytes = (double)cuk_weight_bytes(DTYPE_BF16, no, ni) + 4.0 * ptoks[ti] * (double)(ni + no);
            const double a = time_config(s, DTYPE_BF16, no, ni, ptoks[ti], -1, gemm, reps);
            const double b = time_config(s, DTYPE_BF16, no, ni, ptoks[ti], -2, gemm, reps);
            printf("    %6.3f / %6.3f", bytes / (a * 1e-3) / 1e12, bytes / (b * 1e-3) / 1e12);
        }
        printf("\n");
        fflush(stdout);
    }
    /* tuning variants of the n_tok = 1 kernel (variant 0 is the one cuk_gemv runs) */
    /* quantized, n_tok > 1: the dp4a kernel (path 4, cuk_gemv's pick) vs the float-decoding kernel that
     * was picked before it (q4: one n_tok = 1 pass per token, path 3; q8_0: one multi-token pass, path 1) */
    printf("\nquantized n_tok > 1, TB/s effective: dp4a (int8 x) / float decoding (previous pick)\n%-14s", "dtype n_tok");
    for (int si = 0; si < 5; si++) printf(" %17s", shapes[si].name);
    printf("\n");
    static const int qtoks[] = {2, 4, 8, 16};
    for (int q = 0; q < 3; q++) {
        const dtype t = q == 0 ? DTYPE_Q4_0 : q == 1 ? DTYPE_Q4_1 : DTYPE_Q8_0;
        for (int ti = 0; ti < 4; ti++) {
            printf("%-5s %-8d", dtype_name(t), qtoks[ti]);
            for (int si = 0; si < 5; si++) {
                const int64_t no = shapes[si].n_out, ni = shapes[si].n_in;
                const double bytes = (double)cuk_weight_bytes(t, no, ni) + 4.0 * qtoks[ti] * (double)(ni + no);
                const double a = time_config(s, t, no, ni, qtoks[ti], -4, gemm, reps);
                const double b = time_config(s, t, no, ni, qtoks[ti], t == DTYPE_Q8_0 ? -1 : -3, gemm, reps);
                printf("    %6.3f / %6.3f", bytes / (a * 1e-3) / 1e12, bytes / (b * 1e-3) / 1e12);
            }
            printf("\n");
            fflush(stdout);
        }
    }
    printf("\nn_tok 1 variants (TB/s effective; %%copy)\n");
    for (int q = 0; q < 3; q++) {
        const dtype t = q == 2 ? DTYPE_Q8_0 : q ? DTYPE_Q4_0 : DTYPE_BF16;
        for (int v = 0; v < CUK_GEMV_VARIANTS; v++) {
            double bw[5];
            for (int si = 0; si < 5; si++) {
                const int64_t no = shapes[si].n_out, ni = shapes[si].n_in;
                const double ms = time_config(s, t, no, ni, 1, 2 + v, gemm, reps);
                bw[si] = ((double)cuk_weight_bytes(t, no, ni) + 4.0 * (double)(ni + no)) / (ms * 1e-3);
            }
            printf("%-5s %-10s", dtype_name(t), variant_name);
            for (int si = 0; si < 5; si++) printf("  %s %.3f (%.1f%%)", shapes[si].name, bw[si] / 1e12, 100.0 * bw[si] / copy);
            printf("\n");
            fflush(stdout);
        }
    }
    bench_fusions(s, reps);
    /* Llama-3-8B: 32 layers x (wq, wk, wv, wo, gate, up, down) + output, GEMVs only */
    for (int di = 0; di < 4; di++) {
        const double *tt = t1[di];
        const dtype t = types[di];
        double ms = tt[4], bytes = (double)cuk_weight_bytes(t, 128256, 4096);
        for (int si = 0; si < 4; si++) {
            ms += 32.0 * shapes[si].per_layer * tt[si];
            bytes += 32.0 * shapes[si].per_layer * (double)cuk_weight_bytes(t, shapes[si].n_out, shapes[si].n_in);
        }
        printf("\nllama3-8b %s batch-1 GEMVs: %.3f ms/token (%.1f tok/s), %.2f GB of weights -> %.3f TB/s = %.1f%% of copy\n",
               dtype_name(t), ms, 1e3 / ms, bytes / 1e9, bytes / (ms * 1e-3) / 1e12, 100.0 * bytes / (ms * 1e-3) / copy);
        /* the same with wq|wk|wv stacked into one (6144, 4096) weight and gate|up into (28672, 4096) */
        const double qkv = time_config(s, t, 6144, 4096, 1, 0, gemm, reps);
        const double gu = time_config(s, t, 28672, 4096, 1, 0, gemm, reps);
        const double fms = tt[4] + 32.0 * (qkv + tt[0] + gu + tt[3]);
        printf("llama3-8b %s fused qkv (%.2f us) + gate_up (%.2f us): %.3f ms/token (%.1f tok/s) -> %.3f TB/s = %.1f%% of copy\n",
               dtype_name(t), qkv * 1e3, gu * 1e3, fms, 1e3 / fms, bytes / (fms * 1e-3) / 1e12,
               100.0 * bytes / (fms * 1e-3) / copy);
        fflush(stdout);
    }
    cuk_gemm_free(gemm);
    cudaStreamDestroy(s);
    return 0;
}
