/* gemm.cu - cuk_matmul: y (n_tok, n_out) f32 = x (n_tok, n_in) f32 . W^T, for any n_tok.
 *
 * n_tok <= CUK_GEMV_MAX_TOK runs our GEMV (k_gemv.cu). Larger n_tok (prefill) runs cuBLASLt on
 * the tensor cores until we have a faster GEMM of our own:
 *  - bf16 / f16 weights: x is rounded to the weight's 16-bit type in scratch (one small kernel),
 *    then bf16 x bf16 (f16 x f16) -> f32 with fp32 accumulation (CUBLAS_COMPUTE_32F). The rounding of
 *    x costs ~2^-9 relative per product (tests allow 1e-2 on the whole output).
 *  - f32 weights: f32 GEMM with CUBLAS_COMPUTE_32F (true fp32, no TF32: tests compare with f32).
 *  - q8_0 / q4_0 / q4_1: each tile of <= kTileBytes of rows is dequantized into a bf16 scratch, then
 *    the bf16 GEMM runs on it. Cost: the weight is read once quantized, written and read again as
 *    bf16 (about 4.5x (q4) / 2.9x (q8) the bytes of the quantized read); at n_tok >= 17 the GEMM
 *    itself (2 * n_tok * n_in FLOP per weight) is of the same order or larger, so this stays cheap
 *    relative to prefill, but a fused dequantizing GEMM is the better end state.
 *
 * cuBLASLt's column-major view: row-major W (n_out, n_in) is column-major (n_in, n_out), so with
 * op(A) = T it is the (n_out, n_in) operand; row-major x (n_tok, n_in) is column-major (n_in, n_tok)
 * with op N; y^T = W x^T is column-major (n_out, n_tok) with ld n_out, i.e. row-major y (n_tok, n_out).
 *
 * Plans: cuk_gemm holds a fixed table of kPlans entries (descriptors, layouts and the heuristic's
 * algorithm) keyed by (dtype, m, n, k, ldc). The first call of a shape creates its entry (cuBLASLt
 * allocates host memory for its descriptors then: that happens at warm-up, not per token); a full
 * table replaces entries round-robin. Later calls of the shape allocate nothing, and every call
 * uses the cuBLASLt workspace carved from `work`, so calls can be captured in a CUDA graph.
 *
 * Fused options (cuk_matmul_ex): here, above the GEMV sizes, the prologue (rmsnorm or SwiGLU) is
 * one kernel that writes the GEMM's 16-bit input directly (k_prologue_h: 2 bytes written per input
 * element, where an f32 result plus k_round_x would move 10), and accumulation is the GEMM's beta = 1
 * with C = D = y. For f32 weights the prologue is the existing kernel (cuk_rmsnorm / cuk_swiglu_rows)
 * into an f32 copy of x in the work area.
 *
 * Invariants:
 *  1. work layout: [cuBLASLt workspace kLtWork][bf16 weight tile (quantized only)][16-bit weights: x
 *     as 16-bit (n_tok, n_in) | f32 weights: the fused prologue's f32 input (n_tok, n_in)], each part
 *     256-byte aligned; cuk_matmul_lt_work_size(w, max_tok) covers it.
 *  2. Every pointer handed to cuBLASLt is 16-byte aligned (the plans are made for that alignment).
 */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/k_gemv.h"
#include "backend/cuda/cuk_launch.h"
#include "backend/cuda/k_gemv_fuse.h" /* fuse_silu_mul_acc */

namespace {

constexpr int kPlans = 64;
constexpr int kCand = 8;        /* cuBLASLt heuristic candidates kept per plan (tuning) */
constexpr int kTuneMaxTok = 512; /* tuning only at decode sizes */
constexpr size_t kLtWork = (size_t)32 << 20;
constexpr size_t kTileBytes = (size_t)64 << 20;

struct plan {
    int used;
    dtype type;
    int64_t m, n, k, ldc;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;              /* the one in use: cand[0], or the tuned pick */
    cublasLtMatmulAlgo_t cand[kCand];
    int n_cand, tuned;
};

size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

bool is_quant(dtype t) { return t == DTYPE_Q8_0 || t == DTYPE_Q4_0 || t == DTYPE_Q4_1; }

/* Rows of one dequantized tile: all rows if they fit kTileBytes, else a multiple of 256. */
int64_t tile_rows(const cuk_weight *w)
{
    const size_t row = (size_t)w->n_in * 2;
    if ((size_t)w->n_out * row <= kTileBytes) return w->n_out;
    int64_t r = (int64_t)(kTileBytes / row) / 256 * 256;
    return r < 256 ? 256 : r;
}

void plan_release(plan *p)
{
    if (!p->used) return;
    cublasLtMatrixLayoutDestroy(p->lc);
    cublasLtMatrixLayoutDestroy(p->lb);
    cublasLtMatrixLayoutDestroy(p->la);
    cublasLtMatmulDescDestroy(p->op);
    p->used = 0;
}

// --- small kernels --------------------------------------------------------------------------

template <typename H> __device__ __forceinline__ H to_h(float v);
template <> __device__ __forceinline__ __nv_bfloat16 to_h<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half to_h<__half>(float v) { return __float2half_rn(v); }

template <typename H>
__global__ void k_round_x(const float *__restrict__ x, H *__restrict__ out, size_t n)
{
    cuk_pdl_wait();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = to_h<H>(x[i]);
}

/* The fused prologues written straight in the GEMM's 16-bit input type: at prefill sizes an f32
 * result plus k_round_x would move 4 + 4 + 2 bytes per input element where these move 2 (the input
 * is read either way). Same arithmetic as cuk_rmsnorm / cuk_swiglu_rows: x * (1 / sqrt(mean(x^2) +
 * eps)) * w, and g / (1 + exp(-g)) * u, then one rounding. V4: n % 4 == 0 (rows stay 16-byte
 * aligned), float4 loads and one 8-byte store of four 16-bit values. */
template <typename H> __device__ __forceinline__ void store4_h(H *o, float a, float b, float c, float d)
{
    H v[4] = {to_h<H>(a), to_h<H>(b), to_h<H>(c), to_h<H>(d)};
    *reinterpret_cast<uint2 *>(o) = *reinterpret_cast<const uint2 *>(v);
}

/* x (rows, 2 n) gate|up -> out (rows, n); rows blockIdx.y + k gridDim.y, columns over gridDim.x CTAs */
template <typename H, bool V4>
__global__ void __launch_bounds__(256) k_swiglu_h(const float *__restrict__ x, int64_t rows, int32_t n,
                                                  H *__restrict__ out)
{
    cuk_pdl_wait();
    const int32_t stride = gridDim.x * 256, i0 = blockIdx.x * 256 + threadIdx.x;
    for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
        const float *g = x + row * 2 * n, *u = g + n;
        H *o = out + row * n;
        if (V4) {
            for (int32_t i = i0; i < n / 4; i += stride) {
                const float4 a = reinterpret_cast<const float4 *>(g)[i], b = reinterpret_cast<const float4 *>(u)[i];
                store4_h(o + 4 * i, fuse_silu_mul_acc(a.x, b.x), fuse_silu_mul_acc(a.y, b.y),
                         fuse_silu_mul_acc(a.z, b.z), fuse_silu_mul_acc(a.w, b.w));
            }
        } else {
            for (int32_t i = i0; i < n; i += stride) o[i] = to_h<H>(fuse_silu_mul_acc(g[i], u[i]));
        }
    }
}

/* x (rows, n) -> out (rows, n), one CTA per row: sum of squares, then the scaled row (from L1/L2) */
template <typename H, bool V4>
__global__ void __launch_bounds__(256) k_rmsnorm_h(const float *__restrict__ x, const float *__restrict__ w, float eps,
                                                   int32_t n, H *__restrict__ out)
{
    cuk_pdl_wait();
    __shared__ float part[8];
    const int64_t row = blockIdx.x;
    const float *xr = x + row * n;
    H *o = out + row * n;
    float ss = 0.0f;
    if (V4) {
        for (int32_t i = threadIdx.x; i < n / 4; i += 256) {
            const float4 a = reinterpret_cast<const float4 *>(xr)[i];
            ss += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
        }
    } else {
        for (int32_t i = threadIdx.x; i < n; i += 256) ss += xr[i] * xr[i];
    }
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
    __syncthreads();
    ss = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; k++) ss += part[k];
    const float sc = 1.0f / sqrtf(ss / (float)n + eps);
    if (V4) {
        for (int32_t i = threadIdx.x; i < n / 4; i += 256) {
            const float4 a = reinterpret_cast<const float4 *>(xr)[i], b = reinterpret_cast<const float4 *>(w)[i];
            store4_h(o + 4 * i, a.x * sc * b.x, a.y * sc * b.y, a.z * sc * b.z, a.w * sc * b.w);
        }
    } else {
        for (int32_t i = threadIdx.x; i < n; i += 256) o[i] = to_h<H>(xr[i] * sc * w[i]);
    }
}

template <typename H>
void prologue_h(cudaStream_t cs, const float *x, const cuk_mm_opts *o, int64_t n_tok, int32_t n, H *out)
{
    const bool v4 = n % 4 == 0 && (uintptr_t)x % 16 == 0 && (!o->norm_w || (uintptr_t)o->norm_w % 16 == 0);
    if (o->norm_w) {
        if (v4) cuk_launch(k_rmsnorm_h<H, true>, dim3((unsigned)n_tok), dim3(256), 0, cs, x, o->norm_w, o->eps, n, out);
        else cuk_launch(k_rmsnorm_h<H, false>, dim3((unsigned)n_tok), dim3(256), 0, cs, x, o->norm_w, o->eps, n, out);
        return;
    }
    const int32_t per = v4 ? n / 4 : n, bx = (per + 255) / 256;
    const dim3 grid((unsigned)(bx > 64 ? 64 : bx), (unsigned)(n_tok > 65535 ? 65535 : n_tok));
    if (v4) cuk_launch(k_swiglu_h<H, true>, grid, dim3(256), 0, cs, x, n_tok, n, out);
    else cuk_launch(k_swiglu_h<H, false>, grid, dim3(256), 0, cs, x, n_tok, n, out);
}

/* Rows [r0, r0 + rows) of a planar quantized weight -> bf16 (rows, n_in). One thread per 8 outputs
 * of a 32-value block: an 8-byte load of quants, one 16-byte store, so a warp reads and writes
 * contiguous memory (the first version, a thread per block with 32 two-byte stores 64 bytes apart,
 * made q4_0 prefill 7x slower than bf16). */
__global__ void k_dequant_rows(const unsigned char *__restrict__ qs, const unsigned char *__restrict__ sc, dtype t,
                               int64_t r0, int64_t rows, int64_t n_in, __nv_bfloat16 *__restrict__ out)
{
    cuk_pdl_wait();
    const int64_t nb = n_in / 32, total = rows * nb * 4;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t lb = i >> 2, gb = r0 * nb + lb; /* block within the tile, global block */
        const int g = (int)(i & 3);                   /* outputs [8g, 8g + 8) of the block */
        float v[8];
        if (t == DTYPE_Q8_0) {
            const float d = __half2float(reinterpret_cast<const __half *>(sc)[gb]);
            const uint2 raw = *reinterpret_cast<const uint2 *>(qs + gb * 32 + g * 8);
            const signed char *q = reinterpret_cast<const signed char *>(&raw);
#pragma unroll
            for (int e = 0; e < 8; e++) v[e] = d * (float)q[e];
        } else {
            float d, m;
            if (t == DTYPE_Q4_1) {
                d = __half2float(reinterpret_cast<const __half *>(sc)[2 * gb]);
                m = __half2float(reinterpret_cast<const __half *>(sc)[2 * gb + 1]);
            } else {
                d = __half2float(reinterpret_cast<const __half *>(sc)[gb]);
                m = -8.0f * d;
            }
            /* element j < 16 is the low nibble of byte j, element j + 16 its high nibble */
            const uint2 raw = *reinterpret_cast<const uint2 *>(qs + gb * 16 + (g & 1) * 8);
            const unsigned char *q = reinterpret_cast<const unsigned char *>(&raw);
            const int sh = (g >> 1) * 4;
#pragma unroll
            for (int e = 0; e < 8; e++) v[e] = fmaf((float)((q[e] >> sh) & 0xF), d, m);
        }
        uint4 packed;
        __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&packed);
#pragma unroll
        for (int e = 0; e < 4; e++) h[e] = __floats2bfloat162_rn(v[2 * e], v[2 * e + 1]);
        *reinterpret_cast<uint4 *>(out + lb * 32 + g * 8) = packed;
    }
}

unsigned grid_for(size_t n)
{
    size_t b = (n + 255) / 256;
    return (unsigned)(b < 4096 ? (b ? b : 1) : 4096);
}

} // namespace

struct cuk_gemm {
    cublasLtHandle_t lt;
    plan plans[kPlans];
    int evict;
    int tune; /* cuk_gemm_tuning: new decode-sized plans are timed (plan_tune) */
    int lt_min_f16, lt_min_bf16; /* cuk_matmul_lt_min_tok of f16 / bf16 weights, read once (the per-call route) */
    int skinny;       /* bf16 weights at <= 16 tokens run k_skinny.cu, not cuBLASLt (skinny_on) */
    int skinny_cfg, skinny_flags; /* AIINFRA_SKINNY_CFG, AIINFRA_SKINNY_FLAGS (k_gemv.h), for A/B runs */
};

#define LT_TRY(err, call, what)                                                                            \
    do {                                                                                                   \
        cublasStatus_t lt_s_ = (call);                                                                     \
        if (lt_s_ != CUBLAS_STATUS_SUCCESS)                                                                \
            return ai_err_set((err), AI_ERR_RUNTIME, "cuk_matmul: %s failed (cublas status %d)", (what),    \
                              (int)lt_s_);                                                                 \
    } while (0)

// --- plans ----------------------------------------------------------------------------------

static ai_status plan_make(cuk_gemm *g, plan *p, dtype t, int64_t m, int64_t n, int64_t k, int64_t ldc, ai_err *err)
{
    const cudaDataType_t ab = t == DTYPE_F32 ? CUDA_R_32F : t == DTYPE_F16 ? CUDA_R_16F : CUDA_R_16BF;
    memset(p, 0, sizeof *p);
    LT_TRY(err, cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    const cublasOperation_t opt = CUBLAS_OP_T, opn = CUBLAS_OP_N;
    cublasStatus_t st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opt, sizeof opt);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opn, sizeof opn);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&p->la, ab, (uint64_t)k, (uint64_t)m, k);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&p->lb, ab, (uint64_t)k, (uint64_t)n, k);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&p->lc, CUDA_R_32F, (uint64_t)m, (uint64_t)n, ldc);
    cublasLtMatmulPreference_t pref = NULL;
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceCreate(&pref);
    if (st == CUBLAS_STATUS_SUCCESS) {
        const uint64_t ws = kLtWork;
        const uint32_t al = 16;
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
        const cublasLtMatmulPreferenceAttributes_t attrs[4] = {
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
        for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; i++)
            st = cublasLtMatmulPreferenceSetAttribute(pref, attrs[i], &al, sizeof al);
    }
    cublasLtMatmulHeuristicResult_t res[kCand];
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(g->lt, p->op, p->la, p->lb, p->lc, p->lc, pref, kCand, res, &found);
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found < 1) {
        if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
        if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
        if (p->la) cublasLtMatrixLayoutDestroy(p->la);
        cublasLtMatmulDescDestroy(p->op);
        memset(p, 0, sizeof *p);
        return ai_err_set(err, AI_ERR_RUNTIME, "cuk_matmul: no cuBLASLt algorithm for %s %lldx%lldx%lld (status %d)",
                          dtype_name(t), (long long)m, (long long)n, (long long)k, (int)st);
    }
    for (int i = 0; i < found && i < kCand; i++) p->cand[i] = res[i].algo;
    p->n_cand = found < kCand ? found : kCand;
    p->algo = p->cand[0];
    p->type = t;
    p->m = m, p->n = n, p->k = k, p->ldc = ldc;
    p->used = 1;
    return AI_OK;
}

static ai_status plan_get(cuk_gemm *g, dtype t, int64_t m, int64_t n, int64_t k, int64_t ldc, plan **out, ai_err *err)
{
    for (int i = 0; i < kPlans; i++) {
        plan *p = &g->plans[i];
        if (p->used && p->type == t && p->m == m && p->n == n && p->k == k && p->ldc == ldc) {
            *out = p;
            return AI_OK;
        }
    }
    plan *p = NULL;
    for (int i = 0; i < kPlans && !p; i++)
        if (!g->plans[i].used) p = &g->plans[i];
    if (!p) {
        p = &g->plans[g->evict];
        g->evict = (g->evict + 1) % kPlans;
        plan_release(p);
    }
    ai_status s = plan_make(g, p, t, m, n, k, ldc, err);
    if (s == AI_OK) *out = p;
    return s;
}

/* Times every heuristic candidate of plan p on this call's operands (B, the weight A) and keeps the
 * fastest, if it beats the heuristic's first pick by more than 3% (so a pick does not flip on timing
 * noise from run to run). Only where the stream is not capturing; the output goes to a scratch
 * buffer allocated for the tuning and freed after it (the step's y may hold the residual that a
 * beta = 1 call adds to). Each candidate: one untimed call, then 5 timed back to back. */
static void plan_tune(cuk_gemm *g, plan *p, cudaStream_t cs, const void *a, const void *b, void *ws)
{
    p->tuned = 1;
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (p->n_cand < 2 || cudaStreamIsCapturing(cs, &cap) != cudaSuccess || cap != cudaStreamCaptureStatusNone) {
        (void)cudaGetLastError();
        return;
    }
    void *ty = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    if (cudaMalloc(&ty, (size_t)p->m * (size_t)p->n * sizeof(float)) != cudaSuccess ||
        cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
        (void)cudaGetLastError();
        if (e0) cudaEventDestroy(e0);
        if (ty) cudaFree(ty);
        return;
    }
    const float alpha = 1.0f, beta = 0.0f;
    float best = 0.0f, first = 0.0f;
    int pick = 0;
    for (int i = 0; i < p->n_cand; i++) {
        bool ok = cublasLtMatmul(g->lt, p->op, &alpha, a, p->la, b, p->lb, &beta, ty, p->lc, ty, p->lc, &p->cand[i],
                                 ws, kLtWork, cs) == CUBLAS_STATUS_SUCCESS;
        ok = ok && cudaEventRecord(e0, cs) == cudaSuccess;
        for (int r = 0; r < 5 && ok; r++)
            ok = cublasLtMatmul(g->lt, p->op, &alpha, a, p->la, b, p->lb, &beta, ty, p->lc, ty, p->lc, &p->cand[i],
                                ws, kLtWork, cs) == CUBLAS_STATUS_SUCCESS;
        float ms = 0.0f;
        ok = ok && cudaEventRecord(e1, cs) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess &&
             cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess;
        if (!ok) {
            (void)cudaGetLastError();
            if (i == 0) break; /* the default itself failed here: leave it to the real call to report */
            continue;
        }
        if (i == 0) first = best = ms;
        else if (ms < best) best = ms, pick = i;
    }
    if (pick && best < 0.97f * first) p->algo = p->cand[pick];
    cudaStreamSynchronize(cs);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(ty);
}

// --- public ---------------------------------------------------------------------------------

extern "C" void cuk_gemm_tuning(cuk_gemm *g, int on)
{
    if (g) g->tune = on && !(getenv("AIINFRA_GEMM_TUNE") && !strcmp(getenv("AIINFRA_GEMM_TUNE"), "0"));
}

/* The skinny GEMM for bf16 weights at CUK_SKINNY_MIN_TOK..CUK_SKINNY_MAX_TOK tokens: AIINFRA_SKINNY=1 / 0, else
 * CUK_SKINNY_DEFAULT. */
static bool skinny_on(void)
{
    const char *sk = getenv("AIINFRA_SKINNY");
    return sk && *sk ? *sk == '1' : CUK_SKINNY_DEFAULT;
}

extern "C" ai_status cuk_gemm_init(cuk_gemm **out, ai_err *err)
{
    *out = NULL;
    cuk_gemm *g = (cuk_gemm *)calloc(1, sizeof *g);
    if (!g) return ai_err_set(err, AI_ERR_NOMEM, "cuk_gemm_init: out of memory");
    cublasStatus_t st = cublasLtCreate(&g->lt);
    if (st != CUBLAS_STATUS_SUCCESS) {
        free(g);
        return ai_err_set(err, AI_ERR_RUNTIME, "cuk_gemm_init: cublasLtCreate failed (status %d)", (int)st);
    }
    g->lt_min_f16 = cuk_matmul_lt_min_tok(NULL, DTYPE_F16);
    g->lt_min_bf16 = cuk_matmul_lt_min_tok(NULL, DTYPE_BF16);
    g->skinny = skinny_on();
    const char *sc = getenv("AIINFRA_SKINNY_CFG"), *sf = getenv("AIINFRA_SKINNY_FLAGS");
    g->skinny_cfg = sc && *sc ? atoi(sc) : 0;
    g->skinny_flags = sf && *sf ? atoi(sf) : CUK_SKINNY_EARLY | CUK_SKINNY_EVICT;
    *out = g;
    return AI_OK;
}

extern "C" void cuk_gemm_free(cuk_gemm *g)
{
    if (!g) return;
    for (int i = 0; i < kPlans; i++) plan_release(&g->plans[i]);
    cublasLtDestroy(g->lt);
    free(g);
}

extern "C" size_t cuk_matmul_lt_work_size(const cuk_weight *w, int64_t max_tok)
{
    if (!w || max_tok < 1 || w->n_in < 1 || w->n_out < 1) return 0;
    size_t n = kLtWork;
    if (is_quant(w->type)) n += align256((size_t)tile_rows(w) * (size_t)w->n_in * 2);
    /* the GEMM's input: 16-bit x, or f32 for f32 weights and for the skinny GEMM's prologue */
    const size_t x16 = (size_t)max_tok * (size_t)w->n_in * 2,
                 x32 = (size_t)(max_tok < CUK_SKINNY_MAX_TOK ? max_tok : CUK_SKINNY_MAX_TOK) * (size_t)w->n_in * 4;
    if (w->type == DTYPE_F32) n += align256((size_t)max_tok * (size_t)w->n_in * 4);
    else n += align256(w->type == DTYPE_BF16 && x32 > x16 ? x32 : x16);
    return n;
}

extern "C" int cuk_matmul_lt_min_tok(const cuk_gemm *g, dtype t)
{
    if (t != DTYPE_BF16 && t != DTYPE_F16) return CUK_GEMV_MAX_TOK + 1;
    if (g) return t == DTYPE_BF16 ? g->lt_min_bf16 : g->lt_min_f16;
    const char *e = getenv("AIINFRA_LT_MIN_TOK");
    if (e && *e) return atoi(e);
    return t == DTYPE_BF16 && skinny_on() ? CUK_SKINNY_MIN_TOK : CUK_LT_MIN_TOK;
}

extern "C" bool cuk_matmul_runs_gemv(const cuk_gemm *g, const cuk_weight *w, int64_t n_tok)
{
    return n_tok >= 1 && n_tok <= CUK_GEMV_MAX_TOK && (!w || n_tok < cuk_matmul_lt_min_tok(g, w->type));
}

extern "C" bool cuk_matmul_fuses_split_norm(const cuk_gemm *g, const cuk_weight *w, int64_t n_tok)
{
    if (cuk_matmul_runs_gemv(g, w, n_tok)) return true;
    return w && g && w->type == DTYPE_BF16 && g->skinny && n_tok <= CUK_SKINNY_MAX_TOK && (!w->n_in || w->n_in % 8 == 0);
}

extern "C" size_t cuk_matmul_work_size(const cuk_weight *w, int64_t max_tok)
{
    if (!w || (max_tok <= CUK_GEMV_MAX_TOK && max_tok < cuk_matmul_lt_min_tok(NULL, w->type))) return 0;
    return cuk_matmul_lt_work_size(w, max_tok);
}

/* The norm or SwiGLU prologue as its own kernel, f32 out (n_tok, n_in). */
static ai_status prologue_f32(cuk_stream s, const float *x, const cuk_mm_opts *o, int64_t n_tok, int32_t n_in, float *out,
                              ai_err *err)
{
    return o->norm_w ? cuk_rmsnorm(s, out, x, o->norm_w, (int32_t)n_tok, n_in, o->eps, err)
                     : cuk_swiglu_rows(s, out, x, (int32_t)n_tok, n_in, err);
}

static ai_status matmul_lt(cuk_gemm *g, cuk_stream s, const cuk_weight *w, const float *x, int64_t n_tok, float *y,
                           const cuk_mm_opts *o, void *work, size_t work_size, ai_err *err)
{
    if (!g || !w || !w->data || !x || !y || n_tok < 1 || w->n_out < 1 || w->n_in < 1 || n_tok > (1 << 30) ||
        (o && o->norm_w && o->swiglu_in))
        return ai_err_set(err, AI_ERR_INVALID, "cuk_matmul: bad arguments (n_tok %lld)", (long long)n_tok);
    if (o && (o->swiglu_out || o->rope_kv)) /* only the float GEMVs fuse them (cuk_gemv_glu_fused,
                                               * cuk_gemv_rope_fused); backend_cuda.c composes the rest */
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "cuk_matmul: no swiglu or rope epilogue on the GEMM routes");
    if (o && (o->in_ss || o->out_xn) && !cuk_matmul_fuses_split_norm(g, w, n_tok))
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "cuk_matmul: no split norm on the cuBLASLt route");
    const dtype t = w->type;
    if (t != DTYPE_F32 && t != DTYPE_F16 && t != DTYPE_BF16 && !is_quant(t))
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "cuk_matmul: dtype %s", dtype_name(t));
    if (is_quant(t) && w->n_in % 32)
        return ai_err_set(err, AI_ERR_INVALID, "cuk_matmul: n_in %lld of %s is not a multiple of 32",
                          (long long)w->n_in, dtype_name(t));
    const size_t need = cuk_matmul_lt_work_size(w, n_tok);
    if (!work || work_size < need)
        return ai_err_set(err, AI_ERR_INVALID, "cuk_matmul: work of %zu bytes, %zu needed for %lld rows", work_size,
                          need, (long long)n_tok);
    if ((uintptr_t)work % 256 || (uintptr_t)x % 16 || (uintptr_t)y % 16 || (uintptr_t)w->data % 16)
        return ai_err_set(err, AI_ERR_INVALID, "cuk_matmul: x, y, weights must be 16-byte aligned, work 256-byte");
    cudaStream_t cs = (cudaStream_t)s;
    unsigned char *ws = (unsigned char *)work;
    unsigned char *tile = ws + kLtWork;
    unsigned char *xh = tile + (is_quant(t) ? align256((size_t)tile_rows(w) * (size_t)w->n_in * 2) : 0);
    const size_t nx = (size_t)n_tok * (size_t)w->n_in;
    const bool pro = o && (o->norm_w || o->swiglu_in);
    const void *b = xh; /* the GEMM's input (invariant 1) */
    if (t == DTYPE_BF16 && g->skinny && n_tok <= CUK_SKINNY_MAX_TOK && w->n_in % 8 == 0) {
        /* k_skinny.cu rounds an f32 x to bf16 itself; a prologue writes its f32 result into the work */
        const float *xs = x;
        if (pro) {
            ai_status st = prologue_f32(s, x, o, n_tok, (int32_t)w->n_in, (float *)xh, err);
            if (st != AI_OK) return st;
            xs = (const float *)xh;
        }
        cuk_mm_opts so = o ? *o : cuk_mm_opts{}; /* the prologue is done: accumulate and the split norm remain */
        so.norm_w = nullptr;
        so.swiglu_in = false;
        return cuk_skinny_bf16_ex(s, w, xs, (int32_t)n_tok, y, &so, 0, g->skinny_cfg, g->skinny_flags, err);
    }
    if (t == DTYPE_F32) {
        b = x;
        if (pro) { /* the prologue into the f32 part */
            ai_status st = prologue_f32(s, x, o, n_tok, (int32_t)w->n_in, (float *)xh, err);
            if (st != AI_OK) return st;
            b = xh;
        }
    } else if (pro) { /* the prologue writes the 16-bit input itself */
        if (t == DTYPE_F16) prologue_h(cs, x, o, n_tok, (int32_t)w->n_in, (__half *)xh);
        else prologue_h(cs, x, o, n_tok, (int32_t)w->n_in, (__nv_bfloat16 *)xh);
        CUK_LAUNCHED(err, "cuk_matmul: k_prologue_h");
    } else if (t == DTYPE_F16) {
        cuk_launch(k_round_x<__half>, dim3(grid_for(nx)), dim3(256), 0, cs, x, (__half *)xh, nx);
        CUK_LAUNCHED(err, "cuk_matmul: k_round_x");
    } else {
        cuk_launch(k_round_x<__nv_bfloat16>, dim3(grid_for(nx)), dim3(256), 0, cs, x, (__nv_bfloat16 *)xh, nx);
        CUK_LAUNCHED(err, "cuk_matmul: k_round_x");
    }
    const float alpha = 1.0f, beta = o && o->accumulate ? 1.0f : 0.0f; /* C = D = y */
    if (!is_quant(t)) {
        plan *p;
        ai_status st = plan_get(g, t, w->n_out, n_tok, w->n_in, w->n_out, &p, err);
        if (st != AI_OK) return st;
        if (g->tune && !p->tuned && n_tok <= kTuneMaxTok) plan_tune(g, p, cs, w->data, b, ws);
        LT_TRY(err,
               cublasLtMatmul(g->lt, p->op, &alpha, w->data, p->la, b, p->lb, &beta, y, p->lc, y, p->lc, &p->algo, ws,
                              kLtWork, cs),
               "cublasLtMatmul");
        return AI_OK;
    }
    const int64_t tr = tile_rows(w);
    const unsigned char *qs = (const unsigned char *)w->data;
    const unsigned char *sc = qs + cuk_weight_qs_bytes(t, w->n_out, w->n_in);
    for (int64_t r0 = 0; r0 < w->n_out; r0 += tr) {
        const int64_t rows = w->n_out - r0 < tr ? w->n_out - r0 : tr;
        cuk_launch(k_dequant_rows, dim3(grid_for((size_t)rows * (size_t)(w->n_in / 32) * 4)), dim3(256), 0, cs,
            qs, sc, t, r0, rows, w->n_in, (__nv_bfloat16 *)tile);
        CUK_LAUNCHED(err, "cuk_matmul: k_dequant_rows");
        plan *p;
        ai_status st = plan_get(g, DTYPE_BF16, rows, n_tok, w->n_in, w->n_out, &p, err);
        if (st != AI_OK) return st;
        LT_TRY(err,
               cublasLtMatmul(g->lt, p->op, &alpha, tile, p->la, b, p->lb, &beta, y + r0, p->lc, y + r0, p->lc,
                              &p->algo, ws, kLtWork, cs),
               "cublasLtMatmul");
    }
    return AI_OK;
}

extern "C" ai_status cuk_matmul_lt(cuk_gemm *g, cuk_stream s, const cuk_weight *w, const float *x, int64_t n_tok,
                                   float *y, void *work, size_t work_size, ai_err *err)
{
    return matmul_lt(g, s, w, x, n_tok, y, NULL, work, work_size, err);
}

extern "C" ai_status cuk_matmul(cuk_gemm *g, cuk_stream s, const cuk_weight *w, const float *x, int64_t n_tok,
                                float *y, void *work, size_t work_size, ai_err *err)
{
    return cuk_matmul_ex(g, s, w, x, n_tok, y, NULL, work, work_size, err);
}

extern "C" ai_status cuk_matmul_ex(cuk_gemm *g, cuk_stream s, const cuk_weight *w, const float *x, int64_t n_tok,
                                   float *y, const cuk_mm_opts *o, void *work, size_t work_size, ai_err *err)
{
    if (cuk_matmul_runs_gemv(g, w, n_tok)) return cuk_gemv_ex(s, w, x, (int32_t)n_tok, y, o, err);
    return matmul_lt(g, s, w, x, n_tok, y, o, work, work_size, err);
}
