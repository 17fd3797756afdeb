/* backend_cuda.c - the CUDA implementation of the backend op table (host C; the kernels are in the
 * .cu files beside it, declared in cuda_kernels.h).
 *
 * Everything runs in order on one stream. Memory is cudaMalloc'd at set-up only; the matmul scratch
 * (bf16 activations, dequantized tiles, the cuBLASLt workspace; at decode sizes the quantized down
 * product's int8-rounded SwiGLU input, k_gemv.h cuk_gemv_ex_work) is one buffer sized by the largest
 * matmul_reserve. Decode steps arrive through `run` with a key: the first time a key is seen the
 * step runs eagerly (kernels load, cuBLASLt picks its algorithms), the second time it is captured
 * into a CUDA graph and every later step with that key is one cudaGraphLaunch. A captured graph
 * bakes in the buffers' addresses, so keys must stand for identical launches (step.c's rule).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "aiinfra/backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/k_gemv.h"

#define MAX_GRAPHS 64

typedef struct graph_slot {
    uint64_t key;
    int state; /* 1 = seen once (ran eagerly), 2 = captured */
    cudaGraphExec_t exec;
    uint64_t last_use;
} graph_slot;

typedef struct cuda_be {
    int device;
    cudaStream_t stream;
    cuk_gemm *gemm;
    void *mm_work;
    size_t mm_work_size;
    float *glu;   /* matmul_ex's swiglu_out where no kernel fuses it: the product (<= 16 rows, n_out) */
    size_t glu_n; /* floats */
    float *pre;   /* matmul_ex's in_ss where no kernel fuses it: the scaled input (<= 16 rows, n_in) */
    size_t pre_n; /* floats */
    graph_slot graphs[MAX_GRAPHS];
    uint64_t tick;
} cuda_be;

static void cu_free(void *ctx)
{
    cuda_be *b = ctx;
    cudaSetDevice(b->device);
    for (int i = 0; i < MAX_GRAPHS; i++)
        if (b->graphs[i].state == 2) cudaGraphExecDestroy(b->graphs[i].exec);
    if (b->mm_work) cudaFree(b->mm_work);
    if (b->glu) cudaFree(b->glu);
    if (b->pre) cudaFree(b->pre);
    cuk_gemm_free(b->gemm);
    if (b->stream) cudaStreamDestroy(b->stream);
    free(b);
}

static ai_status cu_alloc(void *ctx, size_t bytes, void **out, ai_err *err)
{
    *out = NULL;
    cudaError_t e = cudaMalloc(out, bytes ? bytes : 1);
    /* zero-filled in order with the ops (set-up only): attention's work keeps decode counters that
     * must start at 0 (cuk_attention_work_size) */
    if (e == cudaSuccess && (e = cudaMemsetAsync(*out, 0, bytes ? bytes : 1, ((cuda_be *)ctx)->stream)) != cudaSuccess) {
        cudaFree(*out);
        *out = NULL;
    }
    if (e != cudaSuccess) {
        size_t fr = 0, tot = 0;
        cudaGetLastError();
        cudaMemGetInfo(&fr, &tot);
        return ai_err_set(err, AI_ERR_NOMEM, "cuda: cannot allocate %.2f GiB (%.2f GiB free of %.2f): %s",
                          (double)bytes / (1 << 30), (double)fr / (1 << 30), (double)tot / (1 << 30),
                          cudaGetErrorString(e));
    }
    return AI_OK;
}
static void cu_dealloc(void *ctx, void *p) { cudaFree(p); }

static ai_status cu_upload(void *ctx, void *dst, const void *h_src, size_t bytes, ai_err *err)
{
    cuda_be *b = ctx;
    CUK_TRY(err, cudaMemcpyAsync(dst, h_src, bytes, cudaMemcpyHostToDevice, b->stream), "cuda upload");
    return AI_OK;
}
static ai_status cu_copy(void *ctx, void *dst, const void *src, size_t bytes, ai_err *err)
{
    cuda_be *b = ctx;
    CUK_TRY(err, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, b->stream), "cuda copy");
    return AI_OK;
}
static ai_status cu_sync(void *ctx, ai_err *err)
{
    cuda_be *b = ctx;
    CUK_TRY(err, cudaStreamSynchronize(b->stream), "cuda stream");
    return AI_OK;
}
static ai_status cu_download(void *ctx, void *h_dst, const void *src, size_t bytes, ai_err *err)
{
    cuda_be *b = ctx;
    CUK_TRY(err, cudaMemcpyAsync(h_dst, src, bytes, cudaMemcpyDeviceToHost, b->stream), "cuda download");
    return cu_sync(ctx, err);
}
static size_t cu_mem_free(void *ctx)
{
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) return 0;
    return fr > ((size_t)1 << 30) ? fr - ((size_t)1 << 30) : 1; /* keep 1 GiB for the driver and cuBLASLt */
}

static size_t cu_weight_bytes(void *ctx, dtype t, int64_t n_out, int64_t n_in)
{
    return cuk_weight_bytes(t, n_out, n_in);
}

static ai_status cu_weight_upload(void *ctx, const backend_weight *w, const void *h_src, ai_err *err)
{
    size_t n = cuk_weight_bytes(w->type, w->n_out, w->n_in);
    if (!n) return ai_err_set(err, AI_ERR_UNSUPPORTED, "cuda: weights of type %s are not supported", dtype_name(w->type));
    if (!cuk_weight_qs_bytes(w->type, w->n_out, w->n_in)) return cu_upload(ctx, w->data, h_src, n, err);
    void *tmp = malloc(n);
    if (!tmp) return ai_err_set(err, AI_ERR_NOMEM, "cuda: cannot stage %zu bytes of weights", n);
    ai_status st = cuk_weight_pack(w->type, h_src, w->n_out, w->n_in, tmp, err);
    if (st == AI_OK) st = cu_upload(ctx, w->data, tmp, n, err);
    if (st == AI_OK) st = cu_sync(ctx, err);
    free(tmp);
    return st;
}

static ai_status cu_weight_random(void *ctx, const backend_weight *w, uint64_t seed, float scale, ai_err *err)
{
    return cuk_weight_fill_random(((cuda_be *)ctx)->stream, w, seed, scale, err);
}
static ai_status cu_fill_f32(void *ctx, float *dst, int64_t n, float value, ai_err *err)
{
    return cuk_fill_f32(((cuda_be *)ctx)->stream, dst, n, value, err);
}

#define S(ctx) (((cuda_be *)(ctx))->stream)

static ai_status cu_embed(void *ctx, float *out, const backend_weight *table, const int32_t *tokens, int32_t n,
                          ai_err *err)
{
    return cuk_embed(S(ctx), out, table, tokens, n, err);
}
static ai_status cu_rmsnorm(void *ctx, float *out, const float *in, const float *w, int32_t rows, int32_t dim,
                            float eps, ai_err *err)
{
    return cuk_rmsnorm(S(ctx), out, in, w, rows, dim, eps, err);
}
static ai_status cu_add_rmsnorm(void *ctx, float *x, const float *delta, float *out, const float *w, int32_t rows,
                                int32_t dim, float eps, ai_err *err)
{
    return cuk_add_rmsnorm(S(ctx), x, delta, out, w, rows, dim, eps, err);
}
static ai_status cu_add_bias(void *ctx, float *y, const float *bias, int32_t rows, int32_t n, int64_t row_stride,
                             ai_err *err)
{
    return cuk_add_bias(S(ctx), y, bias, rows, n, row_stride, err);
}
static ai_status cu_swiglu(void *ctx, float *out, const float *gate, const float *up, int64_t n, ai_err *err)
{
    return cuk_swiglu(S(ctx), out, gate, up, n, err);
}
static ai_status cu_swiglu_rows(void *ctx, float *out, const float *gu, int32_t rows, int32_t n, ai_err *err)
{
    return cuk_swiglu_rows(S(ctx), out, gu, rows, n, err);
}
static ai_status cu_rope_store(void *ctx, float *q, int64_t q_stride, float *k, int64_t k_stride, const float *v,
                               int64_t v_stride, int32_t n_tok, const backend_rope_kv *rk, ai_err *err)
{
    return cuk_rope_store(S(ctx), q, q_stride, k, k_stride, v, v_stride, n_tok, rk, err);
}
static ai_status cu_gather_rows(void *ctx, float *out, const float *in, const int32_t *idx, int32_t n, int32_t dim,
                                ai_err *err)
{
    return cuk_gather_rows(S(ctx), out, in, idx, n, dim, err);
}

/* Grows the scratch *buf to n floats (set-up only). */
static ai_status grow_f32(void *ctx, float **buf, size_t *have, size_t n, ai_err *err)
{
    if (n <= *have) return AI_OK;
    if (*buf) cudaFree(*buf);
    *buf = NULL;
    *have = 0;
    ai_status st = cu_alloc(ctx, n * sizeof(float), (void **)buf, err);
    if (st == AI_OK) *have = n;
    return st;
}

static ai_status cu_matmul_reserve(void *ctx, const backend_weight *w, int32_t max_tok, ai_err *err)
{
    cuda_be *b = ctx;
    size_t need = cuk_matmul_work_size(w, max_tok), gemv = cuk_gemv_work_size(w, max_tok);
    if (gemv > need) need = gemv;
    const size_t rows = (size_t)(max_tok < CUK_GEMV_MAX_TOK ? max_tok : CUK_GEMV_MAX_TOK);
    ai_status st = grow_f32(ctx, &b->glu, &b->glu_n, rows * (size_t)w->n_out, err);
    if (st == AI_OK) st = grow_f32(ctx, &b->pre, &b->pre_n, rows * (size_t)w->n_in, err);
    if (st != AI_OK) return st;
    if (need <= b->mm_work_size) return AI_OK;
    if (b->mm_work) cudaFree(b->mm_work);
    b->mm_work = NULL;
    b->mm_work_size = 0;
    st = cu_alloc(ctx, need, &b->mm_work, err);
    if (st == AI_OK) b->mm_work_size = need;
    return st;
}
static ai_status cu_matmul(void *ctx, const backend_weight *w, const float *x, int32_t n_tok, float *y, ai_err *err)
{
    cuda_be *b = ctx;
    return cuk_matmul(b->gemm, b->stream, w, x, n_tok, y, b->mm_work, b->mm_work_size, err);
}
static ai_status cu_matmul_ex(void *ctx, const backend_weight *w, const float *x, int32_t n_tok, float *y,
                              const backend_mm_opts *opts, ai_err *err)
{
    cuda_be *b = ctx;
    const bool gemv = cuk_matmul_runs_gemv(b->gemm, w, n_tok);
    if (opts && ((opts->in_ss && (opts->norm_w || opts->swiglu_in)) ||
                 (opts->out_xn && (!opts->out_nw || !opts->out_ss || opts->swiglu_out))))
        return ai_err_set(err, AI_ERR_INVALID, "matmul_ex: in_ss takes no prologue; out_xn needs out_nw and out_ss "
                                               "and no swiglu epilogue");
    if (opts && opts->rope_kv && !(gemv && cuk_gemv_rope_fused(w, x, n_tok, opts))) {
        /* no kernel fuses this case: the product, then rope_store on its q|k|v rows */
        if (!backend_rope_kv_fits(opts, w->n_out))
            return ai_err_set(err, AI_ERR_INVALID, "matmul_ex: rope_kv needs q|k|v rows (n_out %lld) and no "
                              "accumulate, swiglu or out_xn epilogue", (long long)w->n_out);
        const backend_rope_kv *rk = opts->rope_kv;
        backend_mm_opts in = *opts;
        in.rope_kv = NULL;
        ai_status st = cu_matmul_ex(ctx, w, x, n_tok, y, &in, err);
        const int64_t qd = (int64_t)rk->n_head * rk->head_dim, kvd = (int64_t)rk->n_head_kv * rk->head_dim;
        return st != AI_OK ? st
                           : cuk_rope_store(b->stream, y, w->n_out, y + qd, w->n_out, y + qd + kvd, w->n_out, n_tok, rk,
                                            err);
    }
    if (opts && (opts->in_ss || opts->out_xn) && !cuk_matmul_fuses_split_norm(b->gemm, w, n_tok)) {
        /* the split norm where no kernel fuses it (cuBLASLt): the input scaled into b->pre, the product,
         * then x * w and the sums of squares */
        if (n_tok < 1 || (opts->in_ss && (size_t)n_tok * (size_t)w->n_in > b->pre_n))
            return ai_err_set(err, AI_ERR_INVALID, "matmul_ex: in_ss needs at most %d reserved rows (%d given)",
                              CUK_GEMV_MAX_TOK, (int)n_tok);
        backend_mm_opts in = *opts;
        in.in_ss = NULL;
        in.out_xn = NULL;
        ai_status st = AI_OK;
        if (opts->in_ss) {
            st = cuk_norm_split_in(b->stream, b->pre, x, opts->in_ss, n_tok, (int32_t)w->n_in, opts->eps, err);
            x = b->pre;
        }
        if (st == AI_OK) st = cu_matmul_ex(ctx, w, x, n_tok, y, &in, err);
        if (st != AI_OK || !opts->out_xn) return st;
        return cuk_norm_split_out(b->stream, opts->out_xn, opts->out_ss, y, opts->out_nw, n_tok, (int32_t)w->n_out,
                                  err);
    }
    if (opts && opts->swiglu_out && !(gemv && cuk_gemv_glu_fused(w, x, n_tok, opts))) {
        /* no kernel fuses this case: the product into b->glu, then swiglu_rows */
        if (n_tok < 1 || (size_t)n_tok * (size_t)w->n_out > b->glu_n || w->n_out % 2 || opts->accumulate)
            return ai_err_set(err, AI_ERR_INVALID,
                              "matmul_ex: the swiglu epilogue needs an even n_out, no accumulate and at most %d "
                              "reserved rows (%d given)",
                              CUK_GEMV_MAX_TOK, (int)n_tok);
        backend_mm_opts in = *opts;
        in.swiglu_out = false;
        ai_status st = cu_matmul_ex(ctx, w, x, n_tok, b->glu, &in, err);
        return st != AI_OK ? st : cuk_swiglu_rows(b->stream, y, b->glu, n_tok, (int32_t)(w->n_out / 2), err);
    }
    if (gemv) /* the decode GEMVs, with scratch for the split SwiGLU (k_gemv.h) */
        return cuk_gemv_ex_work(b->stream, w, x, n_tok, y, opts, b->mm_work, b->mm_work_size, err);
    return cuk_matmul_ex(b->gemm, b->stream, w, x, n_tok, y, opts, b->mm_work, b->mm_work_size, err);
}
static int32_t cu_matmul_gemm_min_tok(void *ctx, dtype t) { return cuk_matmul_lt_min_tok(((cuda_be *)ctx)->gemm, t); }
/* Every decode GEMV (float, tensor-core, dp4a) and the skinny GEMM do the split norm in their stores;
 * cuBLASLt steps compose it. */
static bool cu_matmul_fuses_defer(void *ctx, dtype t, int32_t n_tok)
{
    const backend_weight w = {.type = t};
    return cuk_matmul_fuses_split_norm(((cuda_be *)ctx)->gemm, &w, n_tok);
}
static bool cu_kv_type_ok(void *ctx, dtype t) { return t == DTYPE_F16 || t == DTYPE_F32 || t == DTYPE_F8_E4M3; }
static size_t cu_attention_work_size(void *ctx, const backend_attn *a) { return cuk_attention_work_size(a); }
static ai_status cu_attention(void *ctx, const backend_attn *a, ai_err *err) { return cuk_attention(S(ctx), a, err); }
static ai_status cu_sample(void *ctx, const float *logits, int32_t n_rows, int32_t n_vocab,
                           const backend_sample_params *params, int32_t *out, ai_err *err)
{
    return cuk_sample(S(ctx), logits, n_rows, n_vocab, params, out, NULL, 0, err); /* work: 0 bytes */
}

static ai_status cu_argmax(void *ctx, const float *logits, int32_t n_rows, int32_t n_vocab, int32_t *out, ai_err *err)
{
    return cuk_argmax(S(ctx), logits, n_rows, n_vocab, out, err);
}

static graph_slot *graph_find(cuda_be *b, uint64_t key)
{
    graph_slot *lru = &b->graphs[0];
    for (int i = 0; i < MAX_GRAPHS; i++) {
        graph_slot *g = &b->graphs[i];
        if (g->state && g->key == key) return g;
        if (!g->state || (lru->state && g->last_use < lru->last_use)) lru = g;
    }
    if (lru->state == 2) cudaGraphExecDestroy(lru->exec);
    *lru = (graph_slot){.key = key};
    return lru;
}

static ai_status cu_run(void *ctx, uint64_t key, ai_status (*fn)(void *arg, ai_err *err), void *arg, ai_err *err)
{
    cuda_be *b = ctx;
    if (!key) return fn(arg, err);
    graph_slot *g = graph_find(b, key);
    g->last_use = ++b->tick;
    if (g->state == 0) { /* first sight: run eagerly so modules load and plans are made (and tuned) outside capture */
        g->state = 1;
        cuk_gemm_tuning(b->gemm, 1);
        ai_status st = fn(arg, err);
        cuk_gemm_tuning(b->gemm, 0);
        return st;
    }
    if (g->state == 1) {
        cudaGraph_t graph = NULL;
        CUK_TRY(err, cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal), "graph capture");
        ai_status st = fn(arg, err);
        cudaError_t e = cudaStreamEndCapture(b->stream, &graph);
        if (st != AI_OK) {
            if (graph) cudaGraphDestroy(graph);
            g->state = 0;
            return ai_err_prefix(err, "while capturing a decode graph");
        }
        if (e != cudaSuccess) {
            g->state = 0;
            return ai_err_set(err, AI_ERR_RUNTIME, "graph capture: %s", cudaGetErrorString(e));
        }
        e = cudaGraphInstantiate(&g->exec, graph, 0);
        cudaGraphDestroy(graph);
        if (e != cudaSuccess) {
            g->state = 0;
            return ai_err_set(err, AI_ERR_RUNTIME, "graph instantiate: %s", cudaGetErrorString(e));
        }
        g->state = 2;
    }
    CUK_TRY(err, cudaGraphLaunch(g->exec, b->stream), "graph launch");
    return AI_OK;
}

static void cu_forget_graphs(void *ctx)
{
    cuda_be *b = ctx;
    cudaStreamSynchronize(b->stream);
    for (int i = 0; i < MAX_GRAPHS; i++) {
        if (b->graphs[i].state == 2) cudaGraphExecDestroy(b->graphs[i].exec);
        b->graphs[i] = (graph_slot){0};
    }
}

static double cu_elapsed_ms(void *ctx)
{
    cudaStreamSynchronize(S(ctx));
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Copy: a 1 GiB device-to-device copy, best of 10 after a warm-up, counting bytes read + written.
 * Matrix rate: our matmul on an 8192 x 8192 bf16 weight and 8192 f32 rows (cuBLASLt underneath,
 * plus the f32 -> bf16 conversion of the rows, about 3% of the time), best of 5. */
static ai_status cu_ceilings(void *ctx, double *copy_gbs, double *matmul_tflops, ai_err *err)
{
    cuda_be *b = ctx;
    size_t n = (size_t)1 << 30;
    const int64_t g = 8192;
    void *src = NULL, *dst = NULL, *w = NULL, *x = NULL, *y = NULL, *work = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    ai_status st = AI_OK;
    backend_weight wt = {.type = DTYPE_BF16, .n_out = g, .n_in = g};
    size_t work_size = cuk_matmul_work_size(&wt, g);
    if ((st = cu_alloc(ctx, n, &src, err)) || (st = cu_alloc(ctx, n, &dst, err)) ||
        (st = cu_alloc(ctx, (size_t)(g * g * 2), &w, err)) || (st = cu_alloc(ctx, (size_t)(g * g * 4), &x, err)) ||
        (st = cu_alloc(ctx, (size_t)(g * g * 4), &y, err)) || (st = cu_alloc(ctx, work_size, &work, err)))
        goto done;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaMemsetAsync(src, 1, n, b->stream);
    float best = 1e30f, ms = 0;
    for (int i = 0; i < 11; i++) {
        cudaEventRecord(e0, b->stream);
        cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, b->stream);
        cudaEventRecord(e1, b->stream);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms, e0, e1);
        if (i && ms < best) best = ms;
    }
    *copy_gbs = 2.0 * (double)n / ((double)best * 1e6);
    wt.data = w;
    backend_weight xt = {.type = DTYPE_F32, .n_out = g, .n_in = g, .data = x};
    if ((st = cuk_weight_fill_random(b->stream, &wt, 1, 0.05f, err)) || (st = cuk_weight_fill_random(b->stream, &xt, 2, 1.0f, err)))
        goto done;
    best = 1e30f;
    for (int i = 0; i < 6 && st == AI_OK; i++) {
        cudaEventRecord(e0, b->stream);
        st = cuk_matmul(b->gemm, b->stream, &wt, x, g, y, work, work_size, err);
        cudaEventRecord(e1, b->stream);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms, e0, e1);
        if (i && ms < best) best = ms;
    }
    *matmul_tflops = 2.0 * (double)g * (double)g * (double)g / ((double)best * 1e9);
    CUK_TRY(err, cudaGetLastError(), "ceilings");
done:
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    void *ps[] = {src, dst, w, x, y, work};
    for (int i = 0; i < 6; i++)
        if (ps[i]) cudaFree(ps[i]);
    return st;
}

static const backend_ops cuda_ops = {
    .name = "cuda", .free = cu_free, .alloc = cu_alloc, .dealloc = cu_dealloc, .upload = cu_upload, .copy = cu_copy,
    .download = cu_download, .sync = cu_sync, .mem_free = cu_mem_free, .weight_bytes = cu_weight_bytes,
    .weight_upload = cu_weight_upload, .weight_random = cu_weight_random, .fill_f32 = cu_fill_f32,
    .embed = cu_embed, .rmsnorm = cu_rmsnorm, .add_rmsnorm = cu_add_rmsnorm, .add_bias = cu_add_bias,
    .swiglu = cu_swiglu, .swiglu_rows = cu_swiglu_rows, .gather_rows = cu_gather_rows, .rope_store = cu_rope_store,
    .matmul = cu_matmul, .matmul_ex = cu_matmul_ex, .matmul_reserve = cu_matmul_reserve,
    .matmul_gemm_min_tok = cu_matmul_gemm_min_tok, .matmul_fuses_defer = cu_matmul_fuses_defer, .kv_type_ok = cu_kv_type_ok,
    .attention_work_size = cu_attention_work_size,
    .attention = cu_attention, .argmax = cu_argmax, .sample = cu_sample, .run = cu_run, .forget_graphs = cu_forget_graphs, .elapsed_ms = cu_elapsed_ms, .ceilings = cu_ceilings,
};

bool backend_cuda_describe(int device, char *buf, size_t cap)
{
    struct cudaDeviceProp p;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || device < 0 || device >= n) {
        cudaGetLastError();
        return false;
    }
    if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return false;
    snprintf(buf, cap, "%s, %.1f GiB, %d SMs, sm_%d%d, L2 %d MiB", p.name, (double)p.totalGlobalMem / (1 << 30),
             p.multiProcessorCount, p.major, p.minor, p.l2CacheSize >> 20);
    return true;
}

ai_status backend_cuda_init(backend *out, int device, ai_err *err)
{
    *out = (backend){0};
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        cudaGetLastError();
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "cuda: no device (%s)",
                          e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    }
    if (device < 0 || device >= n) return ai_err_set(err, AI_ERR_INVALID, "cuda: device %d of %d", device, n);
    cuda_be *b = calloc(1, sizeof *b);
    if (!b) return ai_err_set(err, AI_ERR_NOMEM, "cuda backend: out of memory");
    b->device = device;
    ai_status st = AI_OK;
    if ((e = cudaSetDevice(device)) != cudaSuccess || (e = cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking)) != cudaSuccess)
        st = ai_err_set(err, AI_ERR_RUNTIME, "cuda: %s", cudaGetErrorString(e));
    if (st == AI_OK) st = cuk_gemm_init(&b->gemm, err);
    if (st != AI_OK) {
        cu_free(b);
        return st;
    }
    out->ops = &cuda_ops;
    out->ctx = b;
    return AI_OK;
}
