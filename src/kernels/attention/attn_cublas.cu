/* attn_cublas.cu - the same-run library baseline for the attention ladder ("cublas-unfused"): what an
 * unfused framework does (PyTorch's math path): S = scale Q K^T as one cuBLASLt strided-batched GEMM
 * (bf16 in, fp32 accumulate, bf16 S out), the causal mask written into S (when set), the softmax
 * ladder's bf16 row kernel (v6_vec_online_bf16) from S to P, and O = P V as a second batched GEMM.
 * Fast GEMMs, but S is written and read twice (three times when causal): the IO FlashAttention removes.
 *
 * Column-major views (cuBLASLt's convention) of the row-major (b*h) batches:
 *   S^T (s_k x s_q, ld s) = op_T(K^T as d x s_k, ld d) * (Q^T as d x s_q, ld d)
 *   O^T (d x s_q, ld d)   = (V^T as d x s_k, ld d) * (P^T as s_k x s_q, ld s)
 */
#include <cublasLt.h>
#include <stdlib.h>

#include "kernels/attention/attn_internal.h"
#include "kernels/softmax/softmax.h"

#define ATTN_LT_WS ((size_t)32 << 20)

struct attn_cublas {
    cublasLtHandle_t lt;
};

int attn_cublas_init(attn_cublas **out)
{
    attn_cublas *c = (attn_cublas *)calloc(1, sizeof *c);
    if (!c) return (int)cudaErrorMemoryAllocation;
    if (cublasLtCreate(&c->lt) != CUBLAS_STATUS_SUCCESS) {
        free(c);
        return (int)cudaErrorNotSupported;
    }
    *out = c;
    return 0;
}

void attn_cublas_free(attn_cublas *c)
{
    if (!c) return;
    cublasLtDestroy(c->lt);
    free(c);
}

/* S and P (bf16 each), then the GEMM workspace (256-byte aligned). */
size_t attn_cublas_work_size(const attn_args *a) { return 2 * attn_n_ss(a) * sizeof(bf16) + 256 + ATTN_LT_WS; }

/* Strided-batched column-major layout rows x cols (ld), batch, stride in elements. */
static cublasStatus_t lt_layout(cublasLtMatrixLayout_t *l, uint64_t rows, uint64_t cols, int64_t ld, int batch,
                                int64_t stride)
{
    cublasStatus_t st = cublasLtMatrixLayoutCreate(l, CUDA_R_16BF, rows, cols, ld);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
    return st;
}

/* D = alpha op(A) B, all bf16, fp32 compute; A is (k x m) when transa else (m x k). */
static cublasStatus_t lt_gemm(attn_cublas *c, cudaStream_t st, bool transa, int m, int n, int k, float alpha,
                              const void *A, int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb, void *D,
                              int64_t ldd, int64_t sd, int batch, void *ws)
{
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    const cublasOperation_t ta = transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
    cublasStatus_t s = cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    if (s == CUBLAS_STATUS_SUCCESS) s = lt_layout(&la, transa ? k : m, transa ? m : k, lda, batch, sa);
    if (s == CUBLAS_STATUS_SUCCESS) s = lt_layout(&lb, k, n, ldb, batch, sb);
    if (s == CUBLAS_STATUS_SUCCESS) s = lt_layout(&ld, m, n, ldd, batch, sd);
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    const uint64_t wsz = ATTN_LT_WS;
    /* The alignment every batch's A, B and D really has (odd s gives odd strides): the heuristic then
     * only offers kernels that are correct for it. */
    const uint64_t bits = (uint64_t)(uintptr_t)A | (uint64_t)(uintptr_t)B | (uint64_t)(uintptr_t)D |
                          (uint64_t)(2 * (lda | ldb | ldd | sa | sb | sd)) | 256;
    const uint32_t al = (uint32_t)(bits & (~bits + 1)); /* lowest set bit, at most 256 */
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatmulPreferenceCreate(&pref);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, sizeof wsz);
    const cublasLtMatmulPreferenceAttributes_t attrs[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES
    };
    for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; i++)
        s = cublasLtMatmulPreferenceSetAttribute(pref, attrs[i], &al, sizeof al);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatmulAlgoGetHeuristic(c->lt, op, la, lb, ld, ld, pref, 1, &res, &found);
    if (s == CUBLAS_STATUS_SUCCESS && !found) s = CUBLAS_STATUS_NOT_SUPPORTED;
    const float beta = 0.0f;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmul(c->lt, op, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &res.algo, ws, wsz, st);
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
    return s;
}

/* S(i, j) = -big for j > i (bf16 keeps fp32's range; -inf would give NaN in the vectorised softmax's
 * all-masked vectors, -1e30 gives exp() = 0 and the same result). */
__global__ void attn_causal_mask(bf16 *__restrict__ S, int s, int64_t total)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const int64_t r = i / s;
    const int j = (int)(i % s), row = (int)(r % s);
    if (j > row) S[i] = __float2bfloat16_rn(-1e30f);
}

/* No algorithm for this shape / alignment: cudaErrorNotSupported (the ladder leaves the row out);
 * any other cuBLASLt failure: cudaErrorLaunchFailure. */
static int lt_err(cublasStatus_t s)
{
    return s == CUBLAS_STATUS_NOT_SUPPORTED ? (int)cudaErrorNotSupported : (int)cudaErrorLaunchFailure;
}

int attn_cublas_run(attn_cublas *c, void *stream, const attn_args *a)
{
    if (!c || !attn_args_ok(a, 0, attn_cublas_work_size)) return (int)cudaErrorInvalidValue;
    cudaStream_t st = (cudaStream_t)stream;
    const int s = a->s, d = a->d, bh = a->b * a->h;
    const int64_t sq = (int64_t)s * d, ss = (int64_t)s * s;
    bf16 *S = (bf16 *)a->work, *P = S + (size_t)bh * ss;
    void *ws = (void *)(((uintptr_t)(P + (size_t)bh * ss) + 255) & ~(uintptr_t)255);
    cublasStatus_t cs = lt_gemm(c, st, true, s, s, d, a->scale, a->k, d, sq, a->q, d, sq, S, s, ss, bh, ws);
    if (cs != CUBLAS_STATUS_SUCCESS) return lt_err(cs);
    if (a->causal) {
        const int64_t total = (int64_t)bh * ss;
        attn_causal_mask<<<(unsigned)attn_cdiv(total, 256), 256, 0, st>>>(S, s, total);
    }
    const softmax_version *sm = NULL;
    for (int i = 0; i < softmax_n_versions; i++)
        if (softmax_versions[i].bf16) sm = &softmax_versions[i];
    if (!sm) return (int)cudaErrorNotSupported;
    int rc = sm->fn(stream, S, P, bh * s, s);
    if (rc) return rc;
    cs = lt_gemm(c, st, false, d, s, s, 1.0f, a->v, d, sq, P, s, ss, a->o, d, sq, bh, ws);
    if (cs != CUBLAS_STATUS_SUCCESS) return lt_err(cs);
    return (int)cudaGetLastError();
}
