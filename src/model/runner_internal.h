/* runner_internal.h - what runner.c (set-up) and step.c (the forward) share. */
#ifndef AIINFRA_RUNNER_INTERNAL_H
#define AIINFRA_RUNNER_INTERNAL_H

#include "aiinfra/runner.h"

typedef struct runner_layer {
    backend_weight attn_norm, wq, wk, wv, bq, bk, bv, q_norm, k_norm, wo, ffn_norm, w_gate, w_up, w_down;
    backend_weight wqkv;  /* (qd + kvd + kvdv, dim): wq|wk|wv stacked, when r->fuse_qkv (wq.. unused) */
    backend_weight w_gu;  /* (2 n_ff, dim): w_gate|w_up stacked, when r->fuse_gu */
} runner_layer;

struct runner {
    backend *be;
    model_config cfg;
    const model *m;
    runner_params p;
    int32_t max_blocks;          /* block-table columns: ceil(n_ctx / block_size) */
    runner_layer *layers;        /* (n_layer) */
    backend_weight tok_embd, output_norm, output;
    float *rope_factors;         /* backend (rope_dim / 2) or NULL */
    float freq_scale;
    bool fuse_qkv, fuse_gu;      /* stacked projections (backends with weight_upload) */
    unsigned fuse, fuse_big;     /* RUNNER_FUSE_* bits in use (p.fuse, AUTO resolved): fuse in steps of fewer
                                  * than gemm_min_tok tokens, fuse_big in larger ones, */
    unsigned fuse_one;           /* fuse_one in steps of one token */
    unsigned fuse_dec;           /* fuse_dec in decode steps of 2 .. defer_tok tokens (one per sequence) */
    int32_t defer_tok;           /* the most tokens up to which the backend fuses the split norm */
    int32_t gemm_min_tok;        /* backend matmul_gemm_min_tok of the layer weights' type */
    void *wmem;                  /* backend memory holding every weight (NULL when they are host mmap) */
    void *kv;                    /* K of every layer, then V of every layer */
    size_t kv_k_layer, kv_v_layer; /* bytes per layer */
    dtype kv_type;               /* DTYPE_F16, DTYPE_F32 or DTYPE_F8_E4M3 */
    float k_scale, v_scale;      /* f8_e4m3 cache: stored = fp8(x / scale) */
    void *arena;
    float *x, *xn, *q, *k, *v, *att, *tmp, *gate, *up, *xl, *logits;
    double *ss;                  /* RUNNER_FUSE_DEFER: sums of squares, (2 n_layer + 1, RUNNER_FUSE_GEMV_TOK, BACKEND_SS_LANES) */
    int32_t *d_meta, *h_meta;    /* step metadata, device and host copies (meta_ints ints) */
    size_t meta_ints;
    void *attn_work;
    size_t attn_work_size;
    uint64_t weight_bytes;

    /* the step in flight (written by runner_step, read by the step body) */
    int32_t n_tok, n_seq, max_q, len_bound, bt_cols;
    int32_t n_dec; /* leading sequences with q_len 1 in a step that also prefills (0 otherwise) */
};

/* Offsets (in ints) of the metadata sections: tokens, pos, slot (max_tokens each), q_start
 * (max_seqs + 1), q_start of the prefill part of a split step (max_seqs + 1, step.c), seq_len, last, out
 * (max_seqs each), block tables (max_seqs * max_blocks), then the
 * sampling parameters of runner_sample (max_seqs backend_sample_params, 5 ints each). */
enum { META_TOKENS, META_POS, META_SLOT, META_QSTART, META_QSTART_P, META_SEQLEN, META_LAST, META_OUT, META_BT, META_SPARAMS,
       META_COUNT };
size_t runner_meta_offset(const runner *r, int section);

#endif
