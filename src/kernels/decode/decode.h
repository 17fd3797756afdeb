/* decode.h - the decode-attention ladder: one new query token per sequence attends to that
 * sequence's whole paged KV cache, o[s][h] = softmax(q[s][h] . K_s^T * scale) . V_s, from one CTA per
 * (sequence, query head) to the backend's single-launch split-KV GQA kernel.
 *
 * The paged cache is the backend's layout (src/backend/cuda/k_attn_decode.cu, cuda_kernels.h):
 *   key j of sequence s is cache row slot = block_tables[s * max_blocks + j / 16] * 16 + j % 16 of
 *   k_cache and v_cache, each (num_slots, n_kv, d) f16; query head h reads kv head h / (n_head / n_kv).
 *   q (n_seq, n_head, d) f32 and out (n_seq, n_head, d) f32 (the backend's q and out dtype).
 *
 * Interface shared by every version (the driver src/kernels/ladder_decode.c and the tests run them alike):
 *   fn(stream, problem) -> 0 (cudaSuccess) or a cudaError_t value
 * Invariants: 1. d in {64, 128}, n_head a multiple of n_kv with group <= 8 (v4: <= 16), every seq_len
 * in 1 .. max_seq_len <= max_blocks * 16, else cudaErrorInvalidValue. 2. out is written completely;
 * keys at or beyond seq_len are never read. 3. Asynchronous on the stream and deterministic (v4's
 * last-CTA merge combines the partials in a fixed order). 4. work: decode_work_size bytes, zero-filled
 * ONCE after allocation (the backend keeps its finishing counters at its start and leaves them zero).
 */
#ifndef AIINFRA_KERNELS_DECODE_H
#define AIINFRA_KERNELS_DECODE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DECODE_BLOCK 16        /* tokens per cache block (the backend's usual block size) */
#define DECODE_SPLIT_KEYS 512  /* keys per split in v2 and v3 */
/* Error bound of the ladder and tests: worst row (sequence, head) of max_d |o - ref| / max_d |ref|,
 * ref in double from the same f16 cache values. The kernels keep q, scores, P and o in fp32 (with
 * approximate exp2 in v4), so they land near 1e-6; 5e-3 is ~10 f16 ulps (2^-11 each): a version may
 * round P or o to f16 (tensor-core P.V) and pass, while a wrong, missing or NaN key fails by far. */
#define DECODE_TOL 5e-3

typedef struct decode_problem {
    float *out;                    /* (n_seq, n_head, d) */
    const float *q;                /* (n_seq, n_head, d) */
    const void *k_cache, *v_cache; /* (num_slots, n_kv, d) f16 */
    const int32_t *block_tables;   /* (n_seq, max_blocks) */
    const int32_t *seq_len;        /* (n_seq) */
    const int32_t *q_start;        /* (n_seq + 1): 0, 1, ..., n_seq (the backend's row map) */
    int n_seq, max_blocks, max_seq_len;
    int n_head, n_kv, d;
    float scale;     /* usually 1 / sqrt(d) */
    void *work;      /* decode_work_size bytes, zeroed once */
    size_t work_size;
} decode_problem;

/* Bytes of work the versions need: the backend's attention work (first, so its counters stay at
 * a fixed place), then the v2/v3 split partials. Host only; the pointers may be NULL. */
size_t decode_work_size(const decode_problem *p);

typedef int (*decode_fn)(void *stream, const decode_problem *p);

typedef struct decode_version {
    const char *name; /* "v1_block_per_head" ... */
    const char *desc; /* one line: what this step changes */
    decode_fn fn;
} decode_version;

extern const decode_version decode_versions[];
extern const int decode_n_versions;

#ifdef __cplusplus
}
#endif

#endif
