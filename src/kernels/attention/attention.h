/* attention.h - the attention ladder (issue 6, ladder 4): O = softmax(scale * Q K^T [+ causal mask]) V
 * per (batch, head), forward and backward, from naive (S in memory) to FlashAttention-2 on tensor cores.
 *
 * Layout (every version): Q, K, V, O, dO, dQ, dK, dV are bf16, (b, h, s, d) contiguous; self-attention
 * (the same s for queries and keys); d = 64 or 128; any s >= 1. lse (b, h, s) fp32 is the natural-log
 * logsumexp of each query row's scaled, masked scores: the forward writes it, the backward reads it.
 * Causal: query i sees keys 0..i. All softmax and accumulation math is fp32.
 *
 * Interface shared by every version (src/kernels/ladder_attention.c and the tests run them alike):
 *   work_size(args) -> bytes of device scratch the call needs (0: none); the caller allocates it
 *   fn(stream, args) -> 0 (cudaSuccess) or a cudaError_t value; asynchronous on the stream
 * Invariants: 1. bad shapes, NULL pointers or a short work buffer give cudaErrorInvalidValue without
 * a launch; a valid shape a version does not serve gives cudaErrorNotSupported without a launch
 * (v3_backend: non-causal, s < 2). 2. Every output element is written (no reliance on zeroed outputs), inputs only read.
 * 3. Deterministic: no atomics, so two calls give the same bits.
 */
#ifndef AIINFRA_KERNELS_ATTENTION_H
#define AIINFRA_KERNELS_ATTENTION_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct attn_args {
    int b, h, s, d;   /* batch, heads, sequence, head dim (64 or 128) */
    int causal;       /* 1: query i sees keys 0..i */
    float scale;      /* usually 1 / sqrt(d) */
    const void *q, *k, *v; /* (b, h, s, d) bf16 */
    void *o;          /* (b, h, s, d) bf16, forward output */
    float *lse;       /* (b, h, s): forward output where .lse is set (may be NULL there); backward input */
    const void *dout; /* (b, h, s, d) bf16, backward input dO (the forward's o and lse are inputs too) */
    void *dq, *dk, *dv; /* (b, h, s, d) bf16, backward outputs */
    void *work;       /* work_size(args) bytes of device memory, or NULL when that is 0 */
    size_t work_size;
} attn_args;

typedef int (*attn_fn)(void *stream, const attn_args *a);
typedef size_t (*attn_work_fn)(const attn_args *a);

typedef struct attn_version {
    const char *name; /* "v1_naive" ... ; backward versions end in "_bwd" */
    const char *desc; /* one line: what this step changes */
    int bwd;          /* 0: forward (q, k, v -> o, lse); 1: backward (q, k, v, o, lse, dout -> dq, dk, dv) */
    int lse;          /* forward: 1 when it writes lse */
    attn_work_fn work_size;
    attn_fn fn;
} attn_version;

extern const attn_version attn_versions[];
extern const int attn_n_versions;

/* v4e (attn_fa3.cu) with its schedule's heads per section forced to hsec (>= 1; v4e itself sizes it
 * from the L2, which at test sizes is every head: one section). For the test, which needs sections
 * that split the heads unevenly on shapes small enough for its CPU reference. */
int attn_v4e_sections_run(void *stream, const attn_args *a, int hsec);

/* The same-run library baseline: cuBLASLt batched GEMMs for S = scale Q K^T (bf16 out) and O = P V,
 * between them the causal mask (when set) and the softmax ladder's bf16 row kernel. Needs
 * attn_cublas_work_size bytes of work (S, P and the GEMM workspace). The handle is opaque.
 * cudaErrorNotSupported when cuBLASLt has no algorithm for the shape's alignment (odd s). */
typedef struct attn_cublas attn_cublas;
int attn_cublas_init(attn_cublas **out);
void attn_cublas_free(attn_cublas *c);
size_t attn_cublas_work_size(const attn_args *a);
int attn_cublas_run(attn_cublas *c, void *stream, const attn_args *a);

#ifdef __cplusplus
}
#endif

#endif
