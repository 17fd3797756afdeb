/* test_cuda_attention.c - cuk_attention (split-KV decode, FlashAttention-2 prefill, generic kernel)
 * against a double-precision CPU reference.
 *
 * Every case builds a paged cache with a SHUFFLED block table: the blocks of all sequences come
 * from one random permutation, dealt round-robin, so a sequence's blocks are out of order and
 * interleaved with other sequences' blocks; spare blocks and every slot past a sequence's length
 * hold NaN, so a kernel that reads a key it must not read fails. Outputs are poisoned (NaN).
 * The reference uses the cache values as stored (f16-rounded for f16 caches) and, for f16 caches,
 * f16-rounded queries (both tensor-core kernels, prefill and decode, round q to f16).
 * Every case is then replayed twice in a CUDA graph of two calls and must give identical bits
 * (decode's last-CTA merge resets its counters and merges in a fixed order).
 * Tolerances (||out - ref|| / ||ref||): f16 cache 3e-3 (f16 P for P.V, fp32 accumulate, approximate
 * exp2); f32 cache (generic kernel, all fp32) 1e-4. fp8 e4m3 caches (scales 0.05 for K, 0.02 for V, so
 * codes span subnormals to ~50) are written by src/core/fp8.c and the reference reads the decoded values
 * times the scale: e4m3 -> f16 widening is exact, so the fp8 kernels carry the f16 kernels' error, and
 * take their tolerance, 3e-3. The fp8 NaN poison (0xFF) widens to an f16 NaN (cvt.rn.f16x2.e4m3x2), so a
 * stray read of it fails as for f16.
 * test_prefill_fa3 runs the Hopper prefill (AIINFRA_PREFILL=fa3) at the f16 tolerance: the same
 * arithmetic (f16 q after scaling, f16 P, fp32 accumulation); its lazy rescale keeps P <= 2^8, which
 * f16 holds with the same relative rounding.
 * Decode (k_attn_decode.cu, mma.sync with the GQA group as the 16 MMA rows) is covered for groups
 * 1, 2, 3, 4, 8, 16, d 64 and 128, block sizes 4, 8 (a 16-key tile spans two blocks), 16, 32 and 64,
 * one split per sequence (the (sequence, kv head) pairs fill the GPU: 8 x 64 kv heads) and many
 * (batch 1, long context: the last-CTA merge over up to ~100 partials), on the default 2D TMA variant;
 * test_decode_bulk runs all of it again on the bulk-copy path (AIINFRA_DEC_TMA=0).
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_test.h"
#include "aiinfra/dtype.h"
#include "aiinfra/fp8.h"
#include "backend/cuda/cuda_kernels.h"

typedef struct attn_case {
    const char *name;
    int n_seq;
    int seq_len[8], q_len[8];
    int n_head, n_head_kv, d, dv, bs;
    dtype kv;
    uint64_t seed;
} attn_case;

/* The same call twice inside a CUDA graph, the graph launched twice (4 calls on one work buffer,
 * poisoned output before the replays): every call must give the first call's bits. Catches a
 * decode counter that is not reset (the next call would never merge, or merge too early) and any
 * order dependence in the last-CTA merge. */
static void check_replay(const char *name, const cuk_attn_args *a, const float *first, size_t n_out)
{
    cudaStream_t s;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    ai_err err = {0};
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    ai_status st = cuk_attention((cuk_stream)s, a, &err);
    if (st == AI_OK) st = cuk_attention((cuk_stream)s, a, &err);
    cudaError_t e = cudaStreamEndCapture(s, &g);
    if (st != AI_OK) fail_msg("%s: cuk_attention in capture: %s", name, err.msg);
    CUDA_OK(e);
    CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
    CUDA_OK(cudaMemset(a->out, 0xFF, n_out * sizeof(float)));
    CUDA_OK(cudaGraphLaunch(ge, s));
    CUDA_OK(cudaGraphLaunch(ge, s));
    CUDA_OK(cudaStreamSynchronize(s));
    float *again = malloc(n_out * sizeof(float));
    cuda_test_get(again, a->out, n_out * sizeof(float));
    if (memcmp(again, first, n_out * sizeof(float)) != 0) fail_msg("%s: graph replay differs from the first call", name);
    free(again);
    CUDA_OK(cudaGraphExecDestroy(ge));
    CUDA_OK(cudaGraphDestroy(g));
    CUDA_OK(cudaStreamDestroy(s));
}

/* expect: the kernel cuk_attention must pick (cuk_attention_path); NULL: not checked */
static void run_case_path(const attn_case *c, const char *expect)
{
    uint64_t rs = c->seed;
    const int n_seq = c->n_seq, bs = c->bs, d = c->d, dv = c->dv, hkv = c->n_head_kv;
    int32_t q_start[9], seq_len[8];
    int n_tok = 0, max_q = 1, max_seq = 1, max_blocks = 1, total_blocks = 3;
    for (int s = 0; s < n_seq; s++) {
        q_start[s] = n_tok;
        n_tok += c->q_len[s];
        seq_len[s] = c->seq_len[s];
        if (c->q_len[s] > max_q) max_q = c->q_len[s];
        if (c->seq_len[s] > max_seq) max_seq = c->seq_len[s];
        int nb = (c->seq_len[s] + bs - 1) / bs;
        if (nb > max_blocks) max_blocks = nb;
        total_blocks += nb;
    }
    q_start[n_seq] = n_tok;
    max_blocks += 1; /* an unused column */

    /* shuffled, interleaved block tables */
    int32_t *perm = malloc(sizeof(int32_t) * total_blocks);
    for (int i = 0; i < total_blocks; i++) perm[i] = i;
    for (int i = total_blocks - 1; i > 0; i--) {
        int j = (int)((cuda_test_randf(&rs) + 1.0f) * 0.5f * (float)(i + 1));
        if (j > i) j = i;
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int32_t *bt = calloc((size_t)n_seq * max_blocks, sizeof(int32_t));
    int next = 0;
    for (int round = 0; round < max_blocks; round++)
        for (int s = 0; s < n_seq; s++)
            if (round * bs < seq_len[s]) bt[s * max_blocks + round] = perm[next++];

    /* caches: NaN everywhere, random values in the rows the sequences own */
    const size_t slots = (size_t)total_blocks * bs, kel = slots * hkv * d, vel = slots * hkv * dv;
    const size_t esz = c->kv == DTYPE_F16 ? 2 : c->kv == DTYPE_F8_E4M3 ? 1 : 4;
    const float ksc = 0.05f, vsc = 0.02f; /* fp8 only */
    unsigned char *hk = malloc(kel * esz), *hv = malloc(vel * esz);
    memset(hk, 0xFF, kel * esz);
    memset(hv, 0xFF, vel * esz);
    double *kd = malloc(sizeof(double) * kel), *vd = malloc(sizeof(double) * vel);
    for (int s = 0; s < n_seq; s++)
        for (int j = 0; j < seq_len[s]; j++) {
            size_t slot = (size_t)bt[s * max_blocks + j / bs] * bs + j % bs;
            for (size_t i = 0; i < (size_t)hkv * d; i++) {
                size_t e = slot * hkv * d + i;
                float x = cuda_test_randf(&rs);
                if (esz == 1) {
                    hk[e] = fp8_e4m3_from_f32(x / ksc);
                    kd[e] = (double)fp8_e4m3_to_f32(hk[e]) * ksc;
                } else if (esz == 2) {
                    ((uint16_t *)hk)[e] = dtype_f32_to_f16(x);
                    kd[e] = dtype_f16_to_f32(((uint16_t *)hk)[e]);
                } else {
                    ((float *)hk)[e] = x;
                    kd[e] = x;
                }
            }
            for (size_t i = 0; i < (size_t)hkv * dv; i++) {
                size_t e = slot * hkv * dv + i;
                float x = cuda_test_randf(&rs);
                if (esz == 1) {
                    hv[e] = fp8_e4m3_from_f32(x / vsc);
                    vd[e] = (double)fp8_e4m3_to_f32(hv[e]) * vsc;
                } else if (esz == 2) {
                    ((uint16_t *)hv)[e] = dtype_f32_to_f16(x);
                    vd[e] = dtype_f16_to_f32(((uint16_t *)hv)[e]);
                } else {
                    ((float *)hv)[e] = x;
                    vd[e] = x;
                }
            }
        }

    const int64_t q_stride = (int64_t)c->n_head * d + 4;
    float *hq = malloc(sizeof(float) * (size_t)n_tok * q_stride);
    cuda_test_fill(hq, (size_t)n_tok * q_stride, &rs, 1.5f);
    const size_t n_out = (size_t)n_tok * c->n_head * dv;
    double *ref = calloc(n_out, sizeof(double));
    double *sc = malloc(sizeof(double) * (size_t)max_seq), qr[256];
    const double scale = 1.0 / sqrt((double)d);
    const int group = c->n_head / hkv;
    for (int s = 0; s < n_seq; s++)
        for (int jq = 0; jq < c->q_len[s]; jq++) {
            const int t = q_start[s] + jq, pos = seq_len[s] - c->q_len[s] + jq;
            for (int h = 0; h < c->n_head; h++) {
                const int kh = h / group;
                double mx = -INFINITY;
                for (int i = 0; i < d; i++) {
                    float qv = hq[(size_t)t * q_stride + (size_t)h * d + i];
                    qr[i] = esz <= 2 ? dtype_f16_to_f32(dtype_f32_to_f16(qv)) : qv;
                }
                for (int j = 0; j <= pos; j++) {
                    size_t slot = (size_t)bt[s * max_blocks + j / bs] * bs + j % bs;
                    const double *kr = kd + (slot * hkv + kh) * d;
                    double dot = 0;
                    for (int i = 0; i < d; i++) dot += qr[i] * kr[i];
                    sc[j] = dot * scale;
                    if (sc[j] > mx) mx = sc[j];
                }
                double sum = 0;
                for (int j = 0; j <= pos; j++) {
                    sc[j] = exp(sc[j] - mx);
                    sum += sc[j];
                }
                double *o = ref + (size_t)t * c->n_head * dv + (size_t)h * dv;
                for (int j = 0; j <= pos; j++) {
                    size_t slot = (size_t)bt[s * max_blocks + j / bs] * bs + j % bs;
                    const double *vr = vd + (slot * hkv + kh) * dv;
                    for (int i = 0; i < dv; i++) o[i] += sc[j] / sum * vr[i];
                }
            }
        }

    cuk_attn_args a = {0};
    a.out = cuda_test_dup(NULL, n_out * sizeof(float));
    a.q = cuda_test_dup(hq, sizeof(float) * (size_t)n_tok * q_stride);
    a.q_stride = q_stride;
    a.k_cache = cuda_test_dup(hk, kel * esz);
    a.v_cache = cuda_test_dup(hv, vel * esz);
    a.kv_type = c->kv;
    a.k_scale = esz == 1 ? ksc : 1.0f;
    a.v_scale = esz == 1 ? vsc : 1.0f;
    a.block_tables = cuda_test_dup(bt, sizeof(int32_t) * (size_t)n_seq * max_blocks);
    a.q_start = cuda_test_dup(q_start, sizeof(int32_t) * (size_t)(n_seq + 1));
    a.seq_len = cuda_test_dup(seq_len, sizeof(int32_t) * (size_t)n_seq);
    a.n_seq = n_seq;
    a.n_tok = n_tok;
    a.max_blocks = max_blocks;
    a.max_q_len = max_q;
    a.max_seq_len = max_seq;
    a.n_head = c->n_head;
    a.n_head_kv = hkv;
    a.head_dim = d;
    a.head_dim_v = dv;
    a.block_size = bs;
    a.scale = (float)scale;
    /* size the work the way the runner does: bounds only (no pointers, a prefill-sized max_q_len,
     * a larger context bound); cuk_attention fails if the decode it picks needs more */
    cuk_attn_args bounds = a;
    bounds.out = NULL;
    bounds.q = NULL;
    bounds.k_cache = bounds.v_cache = NULL;
    bounds.block_tables = bounds.q_start = bounds.seq_len = NULL;
    bounds.q_stride = 0;
    bounds.max_q_len = 4096;
    bounds.max_seq_len = 2 * max_seq;
    a.work_size = cuk_attention_work_size(&bounds);
    a.work = NULL;
    if (a.work_size) { /* zero-filled once, as the contract asks (decode's counters live there) */
        CUDA_OK(cudaMalloc(&a.work, a.work_size));
        CUDA_OK(cudaMemset(a.work, 0, a.work_size));
    }
    const char *path = cuk_attention_path(&a);
    if (expect && strcmp(path, expect) != 0) fail_msg("%s: dispatch picked %s, expected %s", c->name, path, expect);
    ai_err err = {0};
    ai_status st = cuk_attention(NULL, &a, &err);
    if (st != AI_OK) fail_msg("%s: cuk_attention: %s", c->name, err.msg);
    float *out = malloc(n_out * sizeof(float));
    cuda_test_get(out, a.out, n_out * sizeof(float));
    const double tol = c->kv == DTYPE_F32 ? 1e-4 : 3e-3;
    const double rel = cuda_test_rel_err(out, ref, n_out);
    printf("  %-44s %-7s n_tok %5d  work %8zu B  rel err %.2e (tol %.0e)\n", c->name, path, n_tok, a.work_size, rel,
           tol);
    if (!(rel < tol)) fail_msg("%s: rel err %g >= %g", c->name, rel, tol);
    check_replay(c->name, &a, out, n_out);

    cudaFree(a.out);
    cudaFree((void *)a.q);
    cudaFree((void *)a.k_cache);
    cudaFree((void *)a.v_cache);
    cudaFree((void *)a.block_tables);
    cudaFree((void *)a.q_start);
    cudaFree((void *)a.seq_len);
    cudaFree(a.work);
    free(out);
    free(sc);
    free(ref);
    free(hq);
    free(kd);
    free(vd);
    free(hk);
    free(hv);
    free(bt);
    free(perm);
}

static void run_case(const attn_case *c) { run_case_path(c, NULL); }

#define LENS7 {1, 15, 16, 17, 100, 1000, 1100}
#define ONES7 {1, 1, 1, 1, 1, 1, 1}

/* fp8 e4m3 cache on the tensor-core decode kernel: every group size (1, 2, 3, 4, 8, 16) at d 128 and
 * d 64 (the fp8 path permutes the head dim inside each 16-dim chunk and unpermutes at the warp merge),
 * one split and many, blocks 8 .. 64. */
static const attn_case dec_fp8_cases[] = {
    {"decode fp8 d128 gqa4 bs16", 7, LENS7, ONES7, 8, 2, 128, 128, 16, DTYPE_F8_E4M3, 61},
    {"decode fp8 d64 gqa1 bs32", 7, LENS7, ONES7, 4, 4, 64, 64, 32, DTYPE_F8_E4M3, 62},
    {"decode fp8 d128 32/8 heads bs16 1 x 20001", 1, {20001}, {1}, 32, 8, 128, 128, 16, DTYPE_F8_E4M3, 63},
    {"decode fp8 d64 gqa8 bs16 1 x 12345", 1, {12345}, {1}, 16, 2, 64, 64, 16, DTYPE_F8_E4M3, 64},
    {"decode fp8 d128 gqa16 bs64 3 x 700/33/1", 3, {700, 33, 1}, {1, 1, 1}, 16, 1, 128, 128, 64, DTYPE_F8_E4M3, 65},
    {"decode fp8 d128 mha bs8 2 x 3001/77", 2, {3001, 77}, {1, 1}, 4, 4, 128, 128, 8, DTYPE_F8_E4M3, 66},
    {"decode fp8 d128 gqa2 bs16 8 x 64 kv heads (no split)", 8, {1, 15, 16, 17, 100, 300, 500, 333},
     {1, 1, 1, 1, 1, 1, 1, 1}, 128, 64, 128, 128, 16, DTYPE_F8_E4M3, 67},
    {"decode fp8 d64 gqa16 bs32 3 x 2049/16/5", 3, {2049, 16, 5}, {1, 1, 1}, 32, 2, 64, 64, 32, DTYPE_F8_E4M3, 71},
    {"decode fp8 d64 9/3 heads bs16", 7, LENS7, ONES7, 9, 3, 64, 64, 16, DTYPE_F8_E4M3, 72},
    {"decode fp8 d128 gqa8 bs32 2 x 8192/300", 2, {8192, 300}, {1, 1}, 16, 2, 128, 128, 32, DTYPE_F8_E4M3, 73},
    {"decode fp8 d64 mha bs16 8 x 64 kv heads (no split)", 8, {7, 900, 16, 17, 640, 500, 1, 333},
     {1, 1, 1, 1, 1, 1, 1, 1}, 64, 64, 64, 64, 16, DTYPE_F8_E4M3, 74},
    {"decode fp8 d128 gqa1 bs16 1 x 4097", 1, {4097}, {1}, 8, 8, 128, 128, 16, DTYPE_F8_E4M3, 75},
    /* blocks of 8 at d 64 (the TMA variant: two 8-row boxes of 64-byte rows per tile, 64B swizzle) */
    {"decode fp8 d64 gqa4 bs8 3 x 1001/9/130", 3, {1001, 9, 130}, {1, 1, 1}, 8, 2, 64, 64, 8, DTYPE_F8_E4M3, 76},
    {"decode fp8 d64 gqa2 bs8 1 x 6007", 1, {6007}, {1}, 4, 2, 64, 64, 8, DTYPE_F8_E4M3, 77},
    /* blocks of 4: below the TMA variant's box (it keeps the bulk-copy kernel) */
    {"decode fp8 d128 gqa4 bs4 2 x 333/5", 2, {333, 5}, {1, 1}, 8, 2, 128, 128, 4, DTYPE_F8_E4M3, 78},
};

/* every decode case (f16, fp8, the generic kernel's shapes) under the current environment */
static void run_decode_cases(void)
{
    static const attn_case cases[] = {
        {"decode f16 d128 gqa4 bs16", 7, LENS7, ONES7, 8, 2, 128, 128, 16, DTYPE_F16, 11},
        {"decode f16 d64 gqa1 bs32", 7, LENS7, ONES7, 4, 4, 64, 64, 32, DTYPE_F16, 12},
        {"decode f16 d64 9/3 heads bs16", 7, LENS7, ONES7, 9, 3, 64, 64, 16, DTYPE_F16, 13},
        {"decode f16 d128 gqa8 bs32 8k (split-KV)", 2, {8192, 300}, {1, 1}, 16, 2, 128, 128, 32, DTYPE_F16, 14},
        {"decode f16 d128 32/8 heads bs16 4k x4", 4, {4096, 3000, 1, 2049}, {1, 1, 1, 1}, 32, 8, 128, 128, 16,
         DTYPE_F16, 15},
        {"decode f16 d128 gqa16 bs16", 3, {700, 33, 1}, {1, 1, 1}, 16, 1, 128, 128, 16, DTYPE_F16, 16},
        /* batch 1, long context: many splits, merged by the last CTA (Llama-3-8B heads) */
        {"decode f16 d128 32/8 heads bs16 1 x 20001", 1, {20001}, {1}, 32, 8, 128, 128, 16, DTYPE_F16, 30},
        {"decode f16 d64 gqa2 bs16 1 x 5000", 1, {5000}, {1}, 4, 2, 64, 64, 16, DTYPE_F16, 31},
        /* round 2 (tensor-core decode): every group size on both head dims, small and large blocks */
        {"decode f16 d128 mha bs8 2 x 3001/77", 2, {3001, 77}, {1, 1}, 4, 4, 128, 128, 8, DTYPE_F16, 32},
        {"decode f16 d64 gqa8 bs16 1 x 12345", 1, {12345}, {1}, 16, 2, 64, 64, 16, DTYPE_F16, 33},
        {"decode f16 d128 gqa16 bs64 1 x 30000", 1, {30000}, {1}, 16, 1, 128, 128, 64, DTYPE_F16, 34},
        {"decode f16 d64 gqa16 bs32 3 x 2049/16/5", 3, {2049, 16, 5}, {1, 1, 1}, 32, 2, 64, 64, 32, DTYPE_F16, 35},
        {"decode f16 d128 gqa2 bs16 8 x 64 kv heads (no split)", 8, {1, 15, 16, 17, 100, 300, 500, 333},
         {1, 1, 1, 1, 1, 1, 1, 1}, 128, 64, 128, 128, 16, DTYPE_F16, 36},
        {"decode f16 d64 mha bs16 8 x 64 kv heads (no split)", 8, {7, 900, 16, 17, 640, 500, 1, 333},
         {1, 1, 1, 1, 1, 1, 1, 1}, 64, 64, 64, 64, 16, DTYPE_F16, 37},
        /* blocks of 8 at d 64 and in a long split context; blocks of 4 (bulk copies under AIINFRA_DEC_TMA) */
        {"decode f16 d64 gqa4 bs8 3 x 1001/9/130", 3, {1001, 9, 130}, {1, 1, 1}, 8, 2, 64, 64, 8, DTYPE_F16, 38},
        {"decode f16 d128 32/8 heads bs8 1 x 5003", 1, {5003}, {1}, 32, 8, 128, 128, 8, DTYPE_F16, 39},
        {"decode f16 d128 gqa4 bs4 2 x 333/5", 2, {333, 5}, {1, 1}, 8, 2, 128, 128, 4, DTYPE_F16, 40},
        {"decode f16 d96 (generic) bs16", 4, {1, 17, 100, 1000}, {1, 1, 1, 1}, 8, 2, 96, 96, 16, DTYPE_F16, 17},
        {"decode f32 d128 (generic) bs16", 7, LENS7, ONES7, 8, 2, 128, 128, 16, DTYPE_F32, 18},
        {"decode f32 d64 (generic) bs32 8k", 1, {8192}, {1}, 4, 1, 64, 64, 32, DTYPE_F32, 19},
        {"decode fp8 d96 (generic) bs16", 4, {1, 17, 100, 1000}, {1, 1, 1, 1}, 8, 2, 96, 96, 16, DTYPE_F8_E4M3, 68},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
    for (size_t i = 0; i < sizeof dec_fp8_cases / sizeof dec_fp8_cases[0]; i++) run_case(&dec_fp8_cases[i]);
}

static void test_decode(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    run_decode_cases();
}

/* Decode at forced split sizes (AIINFRA_DEC_CHUNK: one-tile splits, an odd multiple of the
 * alignment, 1024, no split), with and without the copies issued before the PDL wait
 * (AIINFRA_DEC_EARLY=0) and with either PDL trigger (AIINFRA_DEC_LATE=0/1): the planner and the
 * launch may pick any of them. */
static void run_decode_forced(void)
{
    static const attn_case cases[] = {
        {"decode forced d128 gqa4 bs16", 7, LENS7, ONES7, 8, 2, 128, 128, 16, DTYPE_F16, 51},
        {"decode forced d128 32/8 bs16 4 x 4k", 4, {4096, 3000, 1, 2049}, {1, 1, 1, 1}, 32, 8, 128, 128, 16,
         DTYPE_F16, 52},
        {"decode forced d128 gqa16 bs32", 3, {700, 33, 1}, {1, 1, 1}, 16, 1, 128, 128, 32, DTYPE_F16, 53},
        {"decode forced d128 32/8 bs16 1 x 9001", 1, {9001}, {1}, 32, 8, 128, 128, 16, DTYPE_F16, 54},
        {"decode forced d64 gqa2 bs16 2 x 5000/77", 2, {5000, 77}, {1, 1}, 4, 2, 64, 64, 16, DTYPE_F16, 55},
        {"decode forced fp8 d128 32/8 bs16 1 x 9001", 1, {9001}, {1}, 32, 8, 128, 128, 16, DTYPE_F8_E4M3, 56},
        {"decode forced fp8 d64 gqa2 bs16 2 x 5000/77", 2, {5000, 77}, {1, 1}, 4, 2, 64, 64, 16, DTYPE_F8_E4M3, 57},
    };
    static const struct { const char *chunk, *early, *late; } combos[] = {
        {NULL, "0", "0"}, {NULL, NULL, "1"}, {"64", NULL, "0"}, {"64", "0", "1"}, {"192", NULL, NULL},
        {"1024", NULL, "1"}, {"100000", NULL, "0"},
    };
    for (size_t k = 0; k < sizeof combos / sizeof combos[0]; k++) {
        const char *names[] = {"AIINFRA_DEC_CHUNK", "AIINFRA_DEC_EARLY", "AIINFRA_DEC_LATE"};
        const char *vals[] = {combos[k].chunk, combos[k].early, combos[k].late};
        for (int e = 0; e < 3; e++) {
            if (vals[e]) setenv(names[e], vals[e], 1);
            else unsetenv(names[e]);
        }
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
    }
    unsetenv("AIINFRA_DEC_EARLY");
    unsetenv("AIINFRA_DEC_LATE");
    unsetenv("AIINFRA_DEC_CHUNK");
}

static void test_decode_forced(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    run_decode_forced();
}

/* The decode kernel's bulk-copy path (AIINFRA_DEC_TMA=0: one bulk copy per key row into padded rows;
 * what blocks of fewer than 8 tokens always run) on every case of test_decode and test_decode_forced,
 * which run the default 2D TMA variant (K / V tiles land as one swizzled box per cache block; blocks
 * of 8 take two boxes per tile; the cases' last blocks hold NaN past the sequence end, which the boxes
 * load: their scores must be masked and their V rows zeroed before P V). Same tolerances: the layouts
 * differ, the arithmetic does not. */
static void test_decode_bulk(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    setenv("AIINFRA_DEC_TMA", "0", 1);
    run_decode_cases();
    run_decode_forced();
    unsetenv("AIINFRA_DEC_TMA");
}

static const attn_case prefill_cases[] = {
        {"mixed f16 d128 gqa4 bs16", 7, {1, 15, 16, 17, 100, 1000, 1200}, {1, 15, 1, 17, 37, 1000, 37}, 8, 2, 128,
         128, 16, DTYPE_F16, 21},
        {"mixed f16 d64 gqa1 bs32", 7, {1, 15, 16, 17, 100, 1000, 1200}, {1, 1, 16, 17, 37, 130, 37}, 4, 4, 64, 64,
         32, DTYPE_F16, 22},
        {"prefill f16 d64 9/3 heads bs32", 3, {64, 130, 77}, {64, 37, 1}, 9, 3, 64, 64, 32, DTYPE_F16, 23},
        {"prefill f16 d128 gqa8 bs16 causal 333", 1, {333}, {333}, 16, 2, 128, 128, 16, DTYPE_F16, 24},
        {"prefill f16 d96 (generic) bs16", 2, {50, 200}, {50, 37}, 6, 2, 96, 96, 16, DTYPE_F16, 25},
        {"prefill f16 d128/dv64 (generic) bs32", 2, {50, 100}, {50, 37}, 4, 2, 128, 64, 32, DTYPE_F16, 26},
        {"prefill f32 d128 (generic) bs16", 3, {17, 300, 100}, {17, 37, 1}, 8, 1, 128, 128, 16, DTYPE_F32, 27},
        {"prefill f32 d256 (generic) bs16", 2, {40, 90}, {40, 5}, 2, 1, 256, 256, 16, DTYPE_F32, 28},
        /* fp8 prefill: test_prefill_fp8 */
};

static void test_prefill(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    /* FA2 (the fallback for blocks < 8 and AIINFRA_PREFILL=fa2); test_prefill_fa3 runs these under the default */
    setenv("AIINFRA_PREFILL", "fa2", 1);
    for (size_t i = 0; i < sizeof prefill_cases / sizeof prefill_cases[0]; i++) run_case(&prefill_cases[i]);
    unsetenv("AIINFRA_PREFILL");
}

/* The Hopper prefill (k_attn_prefill_hopper.cu: wgmma, K/V by TMA per cache block), selected with
 * AIINFRA_PREFILL=fa3: every case must dispatch to it (path "fa3") except where it does not apply.
 * Prefixes already cached (q_len < seq_len), odd lengths, q_len 1 rows inside a prefill batch,
 * several sequences, GQA 4, d 64 and 128, block sizes 8 (one swizzle atom per box, 16 boxes per
 * 128-key tile), 16, 32, 128 and 256 (a block larger than a tile), a sequence whose last tile holds
 * 1 key (the V rows past it are NaN in the cache and must be zeroed), several 128-row query tiles
 * per sequence (the 2-stage-ahead refill wraps the 3 / 4-stage ring). Then the existing prefill
 * cases under fa3 (where it applies) and the dispatch's default and fa2 choices. */
static void test_prefill_fa3(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    static const struct { attn_case c; const char *path; } cases[] = {
        {{"fa3 d128 gqa4 bs16 prefix cached", 5, {1200, 333, 77, 1000, 130}, {37, 333, 77, 129, 1}, 8, 2, 128, 128,
          16, DTYPE_F16, 61}, "fa3"},
        {{"fa3 d64 gqa4 bs32", 4, {517, 64, 300, 1}, {517, 63, 131, 1}, 16, 4, 64, 64, 32, DTYPE_F16, 62}, "fa3"},
        {{"fa3 d128 gqa4 bs8", 2, {255, 1030}, {200, 257}, 8, 2, 128, 128, 8, DTYPE_F16, 63}, "fa3"},
        {{"fa3 d64 mha bs256 (block > tile)", 2, {700, 129}, {300, 129}, 4, 4, 64, 64, 256, DTYPE_F16, 64}, "fa3"},
        {{"fa3 d128 gqa4 bs128 1 x 1537 (12 tiles)", 1, {1537}, {1537}, 8, 2, 128, 128, 128, DTYPE_F16, 65}, "fa3"},
        {{"fa3 d64 gqa4 bs16 last tile 1 key", 3, {129, 257, 385}, {129, 2, 385}, 8, 2, 64, 64, 16, DTYPE_F16, 66},
         "fa3"},
        {{"fa3 d128 mha bs64 ladder-like (1 head, 8 seqs)", 8, {256, 256, 256, 256, 256, 256, 256, 256},
          {256, 256, 256, 256, 256, 256, 256, 256}, 1, 1, 128, 128, 64, DTYPE_F16, 67}, "fa3"},
        {{"fa3 requested, bs4 -> fa2", 2, {100, 37}, {100, 5}, 4, 1, 128, 128, 4, DTYPE_F16, 68}, "fa2"},
        {{"fa3 requested, d96 -> generic", 2, {50, 200}, {50, 37}, 6, 2, 96, 96, 16, DTYPE_F16, 69}, "generic"},
    };
    setenv("AIINFRA_PREFILL", "fa3", 1);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case_path(&cases[i].c, cases[i].path);
    for (size_t i = 0; i < sizeof prefill_cases / sizeof prefill_cases[0]; i++) run_case(&prefill_cases[i]);
    /* the choice: by default fa3 from a 1024-row query run (cases[4]: 1537), fa2 below (cases[0]: 333) */
    attn_case c = cases[4].c;
    c.name = "fa3 case, AIINFRA_PREFILL=fa2";
    setenv("AIINFRA_PREFILL", "fa2", 1);
    run_case_path(&c, "fa2");
    unsetenv("AIINFRA_PREFILL");
    c.name = "fa3 case, AIINFRA_PREFILL unset (default fa3: q_len 1537)";
    run_case_path(&c, "fa3");
    c = cases[0].c;
    c.name = "fa3 case, AIINFRA_PREFILL unset (default fa2: q_len <= 333)";
    run_case_path(&c, "fa2");
}

/* fp8 e4m3 prefill: the FA2 kernel on tiles widened to f16 in shared memory (k_attn_prefill.cu,
 * template F8); the Hopper prefill refuses fp8, so the path is "fa2" under the default and under
 * AIINFRA_PREFILL=fa3 and =fa2 alike. Tolerance 3e-3 as f16 (the widening is exact; run_case_path).
 * Mixed batches with q_len 1 rows (split as in the runner), prefixes already cached (q_len < seq_len),
 * odd lengths, GQA 1 / 3 / 4 / 8, d 64 and 128, block sizes 4, 8, 16, 32, 64, many 64-row query tiles
 * (333, 517, 1537 rows), long sequences (1537 keys, a 1900-key prefix), sequences whose last 64-key tile
 * holds 1 key (65, 129, 385: the rest of that block is NaN in the cache and must not be read), and the
 * shapes the kernel does not take (d 96, d 128 / dv 64), which stay on the generic kernel. */
static void test_prefill_fp8(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    static const struct { attn_case c; const char *path; } cases[] = {
        {{"mixed fp8 d128 gqa4 bs16", 7, {1, 15, 16, 17, 100, 1000, 1200}, {1, 15, 1, 17, 37, 100, 37}, 8, 2, 128, 128,
          16, DTYPE_F8_E4M3, 29}, "fa2"},
        {{"prefill fp8 d64 9/3 heads bs32", 3, {64, 130, 77}, {64, 37, 1}, 9, 3, 64, 64, 32, DTYPE_F8_E4M3, 20}, "fa2"},
        {{"fp8 d128 gqa4 bs16 prefix cached", 5, {1200, 333, 77, 1000, 130}, {37, 333, 77, 129, 1}, 8, 2, 128, 128, 16,
          DTYPE_F8_E4M3, 71}, "fa2"},
        {{"fp8 d128 gqa4 bs8", 2, {255, 1030}, {200, 257}, 8, 2, 128, 128, 8, DTYPE_F8_E4M3, 72}, "fa2"},
        {{"fp8 d64 gqa4 bs32", 4, {517, 64, 300, 1}, {517, 63, 131, 1}, 16, 4, 64, 64, 32, DTYPE_F8_E4M3, 73}, "fa2"},
        {{"fp8 d128 gqa4 bs16 1 x 1537 (25 q tiles)", 1, {1537}, {1537}, 8, 2, 128, 128, 16, DTYPE_F8_E4M3, 74}, "fa2"},
        {{"fp8 d128 32/8 heads bs16 1900 cached + 211", 1, {2111}, {211}, 32, 8, 128, 128, 16, DTYPE_F8_E4M3, 75},
         "fa2"},
        {{"fp8 d64 gqa4 bs16 last tile 1 key", 3, {129, 257, 385}, {129, 2, 385}, 8, 2, 64, 64, 16, DTYPE_F8_E4M3, 76},
         "fa2"},
        {{"fp8 d128 gqa8 bs4 last tile 1 key", 2, {65, 333}, {65, 333}, 16, 2, 128, 128, 4, DTYPE_F8_E4M3, 77}, "fa2"},
        {{"fp8 d128 mha bs64", 2, {700, 129}, {300, 129}, 4, 4, 128, 128, 64, DTYPE_F8_E4M3, 78}, "fa2"},
        {{"fp8 d96 (generic) bs16", 2, {50, 200}, {50, 37}, 6, 2, 96, 96, 16, DTYPE_F8_E4M3, 79}, "generic"},
        {{"fp8 d128/dv64 (generic) bs32", 2, {50, 100}, {50, 37}, 4, 2, 128, 64, 32, DTYPE_F8_E4M3, 80}, "generic"},
    };
    unsetenv("AIINFRA_PREFILL");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case_path(&cases[i].c, cases[i].path);
    static const char *const forced[] = {"fa3", "fa2"};
    for (size_t k = 0; k < 2; k++) {
        attn_case c = cases[2].c;
        c.name = k == 0 ? "fp8 case, AIINFRA_PREFILL=fa3 (-> fa2)" : "fp8 case, AIINFRA_PREFILL=fa2";
        setenv("AIINFRA_PREFILL", forced[k], 1);
        run_case_path(&c, "fa2");
    }
    unsetenv("AIINFRA_PREFILL");
}

static void test_bad_args(void **state)
{
    (void)state;
    CUDA_TEST_REQUIRE();
    float dummy[4];
    int32_t iz[2] = {0, 1};
    cuk_attn_args a = {0};
    a.out = dummy;
    a.q = dummy;
    a.k_cache = dummy;
    a.v_cache = dummy;
    a.block_tables = iz;
    a.q_start = iz;
    a.seq_len = iz;
    a.kv_type = DTYPE_F16;
    a.n_seq = 1;
    a.n_tok = 1;
    a.max_blocks = 1;
    a.max_q_len = 1;
    a.max_seq_len = 16;
    a.n_head = 4;
    a.n_head_kv = 2;
    a.head_dim = a.head_dim_v = 64;
    a.q_stride = 256;
    a.block_size = 16;
    a.scale = 0.125f;
    ai_err err = {0};
    /* the decode path needs work: none given */
    assert_int_equal(cuk_attention(NULL, &a, &err), AI_ERR_INVALID);
    assert_non_null(strstr(err.msg, "work"));
    assert_true(cuk_attention_work_size(&a) > 0);
    cuk_attn_args b = a;
    b.n_head = 3;
    assert_int_equal(cuk_attention(NULL, &b, &err), AI_ERR_INVALID);
    b = a;
    b.kv_type = DTYPE_BF16;
    assert_int_equal(cuk_attention(NULL, &b, &err), AI_ERR_INVALID);
    b = a;
    b.kv_type = DTYPE_F8_E4M3; /* fp8 needs its scales */
    b.k_scale = 0.0f;
    b.v_scale = 1.0f;
    assert_int_equal(cuk_attention(NULL, &b, &err), AI_ERR_INVALID);
    assert_non_null(strstr(err.msg, "scale"));
    assert_true(cuk_attention_work_size(&b) > 0); /* sizing does not need them */
    b = a;
    b.block_size = 24;
    assert_int_equal(cuk_attention(NULL, &b, &err), AI_ERR_INVALID);
    b = a;
    b.max_seq_len = 17; /* > max_blocks * block_size */
    assert_int_equal(cuk_attention(NULL, &b, &err), AI_ERR_INVALID);
    b = a;
    b.head_dim = 300;
    assert_int_equal(cuk_attention(NULL, &b, &err), AI_ERR_INVALID);
    b = a;
    b.q_stride = 100;
    assert_int_equal(cuk_attention(NULL, &b, &err), AI_ERR_INVALID);
    assert_int_equal(cuk_attention(NULL, NULL, &err), AI_ERR_INVALID);
    assert_int_equal(cuk_attention_work_size(NULL), 0);
    /* sizing from bounds alone (NULL pointers, prefill max_q_len) still covers decode */
    b = a;
    b.out = NULL;
    b.q = NULL;
    b.k_cache = b.v_cache = NULL;
    b.block_tables = b.q_start = b.seq_len = NULL;
    b.q_stride = 0;
    b.max_q_len = 512;
    assert_true(cuk_attention_work_size(&b) >= cuk_attention_work_size(&a));
    b.kv_type = DTYPE_F32; /* generic kernel: no work */
    assert_int_equal(cuk_attention_work_size(&b), 0);
}

/* An argument selects tests by name (cmocka's filter: '*' and '?' wildcards), e.g. for one test
 * under compute-sanitizer: test_cuda_attention 'test_prefill_fp8'. */
int main(int argc, char **argv)
{
    cuda_test_filter();
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_decode_forced),
        cmocka_unit_test(test_decode_bulk),
        cmocka_unit_test(test_prefill),
        cmocka_unit_test(test_prefill_fa3),
        cmocka_unit_test(test_prefill_fp8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
