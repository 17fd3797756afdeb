/* k_sample.cu - argmax and the filtered sampler (temperature, top-k, top-p, min-p, inverse CDF) on the
 * device, one block per row (argmax of 1-16 long rows: a cluster of blocks per row), without sorting
 * the vocabulary.
 *
 * The semantics are src/engine/sampler.c's (read its header): the kept set is a PREFIX of the total
 * order (logit desc, id asc) of the finite tokens, of length M = min(pool, m_p, m_minp) where
 *   pool   = top_k when 0 < top_k < n_finite, else n_finite;
 *   m_p    = the first j with cum_j >= top_p * Z_pool (cum_j = softmax mass of the first j tokens,
 *            Z_pool the mass of the pool: top-p is measured on what top-k kept, before min-p);
 *   m_minp = the number of tokens with p / p_max >= min_p (a threshold on the logit);
 * then the token is the first j of the order with cum_j > u * Z_M (inverse CDF). Note the order of
 * the filters is sampler.c's (top-k, top-p, min-p), not the one cuda_kernels.h's comment lists.
 *
 * How, with no sort: every quantity above is "the first position of the order at which a running
 * sum (a count or a mass) reaches a target". A radix select finds it exactly: the float logit is
 * mapped to an order-preserving 32-bit key and, 8 bits at a time from the top, one pass over the
 * row builds a 256-bucket histogram of counts and masses of the tokens that share the key prefix
 * found so far; one warp scans the buckets from the largest key down and picks the bucket where the
 * running sum crosses the target. Histograms are private per warp (96 KB of dynamic shared memory),
 * lanes that hit the same bucket are combined with __match_any_sync + __reduce_add_sync and one lane
 * updates it: no atomics (a first version with shared u64 atomics ran ~300 us per pass over a 128k
 * row on one SM, 16x an argmax pass). The first pass (no prefix yet) is the same for every select of
 * a row, so it is computed once and reused. Measured on the H200 (bench_cuda_ops, 2026-12-02),
 * rows x 128256: 256 rows T=1 3825 -> 977 us, top_p 0.95 7085 -> 1406 us, top_k 40 + top_p 0.9
 * 10314 -> 1981 us; one row top_p 0.95 3408 -> 648 us (argmax of 256 rows: 37 us). After 4 passes the crossing key K is exact; the tokens with key K
 * all have the same weight, so the rank r inside the tie follows by division, and one ordered pass
 * finds the r-th lowest id with key K (ties go to the lower id, as in the CPU order).
 *
 * Masses are fixed point: weight w = expf((l - l_max) / T) in (0, 1] becomes round(w * 2^40) as a
 * uint64 (n_vocab <= 2^22, so sums stay below 2^62). Integer sums are exact and independent of the
 * summation order, so (1) a row's result never depends on scheduling (reproducible runs) and
 * (2) the prefix masses computed by different passes agree to the last bit, which makes the
 * crossing searches consistent: u < 1 guarantees the pick lies inside the kept prefix. A weight
 * below 2^-41 rounds to 0: such a token is never drawn (the CPU's draw also skips tokens whose
 * probability underflowed); the error in any probability is below 2^-40 / Z <= 1e-12.
 *
 * Cost per sampled row: 2 passes (max, masses), 4 per select (top-p; the top-k mass when top-p
 * and top-k are both on, or when top-k alone bounds the set; the draw) less 1 for each select after
 * the first, 1 pass to find the token (ordered, with barriers, only when its logit is tied): at most
 * 13 passes over the row, mostly from L2. Greedy rows (temperature < 1e-5, sampler.h's
 * SAMPLER_GREEDY_EPS) take the first pass only.
 *
 * Invalid rows (a NaN or +inf logit, or every logit -inf: errors in sampler.c) give out[r] = -1.
 * cuk_argmax gives -1 for a row holding a NaN.
 *
 * Invariants:
 *   1. a block reads only its row and writes only out[row]; no global scratch (work size 0);
 *   2. all threads of a block run every pass and every __syncthreads (selects are block-uniform);
 *   3. histogram buckets are visited in descending key order, so "first crossing" = order position.
 */
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

extern "C" {
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.h"
}
#include "backend/cuda/cuk_launch.h"

#define SMP_THREADS 1024
#define SMP_WARPS (SMP_THREADS / 32)
#define SMP_GREEDY_EPS 1e-5f     /* sampler.h's SAMPLER_GREEDY_EPS */
#define SMP_FIX 1099511627776.0f /* 2^40: weight fixed point */

typedef unsigned long long u64;

/* Order-preserving key: a < b (floats, no NaN) <=> key(a) < key(b); -0 and +0 share a key (l + 0.0f
 * turns -0 into +0: they are one logit value, ordered among themselves by id). */
__device__ __forceinline__ uint32_t smp_key(float l)
{
    uint32_t u = __float_as_uint(l + 0.0f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Loads elements i..i+3 (i % 4 == 0) of the row; out of range -> -inf (never kept). */
__device__ __forceinline__ float4 smp_load4(const float *row, int32_t n, int32_t i, bool vec)
{
    if (vec && i + 3 < n) return *(const float4 *)(row + i);
    float4 v;
    v.x = i < n ? row[i] : -INFINITY;
    v.y = i + 1 < n ? row[i + 1] : -INFINITY;
    v.z = i + 2 < n ? row[i + 2] : -INFINITY;
    v.w = i + 3 < n ? row[i + 3] : -INFINITY;
    return v;
}

__device__ __forceinline__ u64 smp_weight(float l, float lmax, float inv_t)
{
    return __float2ull_rn(expf((l - lmax) * inv_t) * SMP_FIX);
}

__device__ __forceinline__ u64 smp_warp_sum(u64 v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// --- argmax ------------------------------------------------------------------------------------

/* (v, i) beats (w, j) when v > w, or v == w and i < j. */
__device__ __forceinline__ void smp_better(float &v, int32_t &i, float w, int32_t j)
{
    if (w > v || (w == v && j < i)) {
        v = w;
        i = j;
    }
}

struct smp_stats {
    float vmax;
    int32_t imax;
    int bad;         /* NaN (argmax, sample) or +inf (sample) seen */
    int32_t n_finite;
};

/* One pass: max and its lowest index, NaN/+inf, count of finite logits. Result in *st (shared). part,
 * parts: this block reads the float4 chunks part, part + parts, ... of the row (k_argmax_cluster). */
__device__ void smp_row_stats(const float *row, int32_t n, bool vec, smp_stats *st, float *shv, int32_t *shi,
                              int *shb, int32_t *shn, int part = 0, int parts = 1)
{
    float v = -INFINITY;
    int32_t idx = 0x7fffffff;
    int bad = 0;
    int32_t nf = 0;
    for (int32_t i = (part * SMP_THREADS + threadIdx.x) * 4; i < n; i += parts * SMP_THREADS * 4) {
        float4 x = smp_load4(row, n, i, vec);
        float e[4] = { x.x, x.y, x.z, x.w };
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (i + k >= n) break;
            if (isnan(e[k])) bad |= 1;
            else if (e[k] == INFINITY) bad |= 2;
            if (e[k] > -INFINITY) nf++;
            smp_better(v, idx, e[k], i + k);
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        int32_t j = __shfl_xor_sync(0xffffffffu, idx, o);
        smp_better(v, idx, w, j);
        bad |= __shfl_xor_sync(0xffffffffu, bad, o);
        nf += __shfl_xor_sync(0xffffffffu, nf, o);
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) {
        shv[warp] = v;
        shi[warp] = idx;
        shb[warp] = bad;
        shn[warp] = nf;
    }
    __syncthreads();
    if (warp == 0) {
        v = shv[lane];
        idx = shi[lane];
        bad = shb[lane];
        nf = shn[lane];
        for (int o = 16; o > 0; o >>= 1) {
            float w = __shfl_xor_sync(0xffffffffu, v, o);
            int32_t j = __shfl_xor_sync(0xffffffffu, idx, o);
            smp_better(v, idx, w, j);
            bad |= __shfl_xor_sync(0xffffffffu, bad, o);
            nf += __shfl_xor_sync(0xffffffffu, nf, o);
        }
        if (lane == 0) {
            st->vmax = v;
            st->imax = idx;
            st->bad = bad;
            st->n_finite = nf;
        }
    }
    __syncthreads();
}

__global__ void __launch_bounds__(SMP_THREADS) k_argmax(const float *logits, int32_t n, int32_t *out, bool vec)
{
    cuk_pdl_wait();
    __shared__ smp_stats st;
    __shared__ float shv[SMP_WARPS];
    __shared__ int32_t shi[SMP_WARPS], shn[SMP_WARPS];
    __shared__ int shb[SMP_WARPS];
    const float *row = logits + (int64_t)blockIdx.x * n;
    smp_row_stats(row, n, vec, &st, shv, shi, shb, shn);
    if (threadIdx.x == 0) out[blockIdx.x] = (st.bad & 1) ? -1 : (st.imax < n ? st.imax : 0);
}

/* Few long rows (a decode step's logits: 1-16 rows of 128,256): one block per row reads its 513 KB at
 * what one SM pulls from L2 (22 us at one row, ncu on the H200, 2026-12-07), so a cluster of
 * SMP_CLUSTER blocks shares each row, interleaved by float4 chunks, and rank 0 merges their stats
 * through distributed shared memory (the tie rule is smp_better's, so the result is the one-block
 * kernel's). */
#define SMP_CLUSTER 8
#define SMP_CLUSTER_MAX_ROWS 16
#define SMP_CLUSTER_MIN_VOCAB (SMP_CLUSTER * SMP_THREADS * 4)

__global__ void __launch_bounds__(SMP_THREADS) k_argmax_cluster(const float *logits, int32_t n, int32_t *out, bool vec)
{
    namespace cg = cooperative_groups;
    cuk_pdl_wait();
    __shared__ smp_stats st;
    __shared__ float shv[SMP_WARPS];
    __shared__ int32_t shi[SMP_WARPS], shn[SMP_WARPS];
    __shared__ int shb[SMP_WARPS];
    cg::cluster_group cl = cg::this_cluster();
    const int part = (int)cl.block_rank(), r = (int)blockIdx.x / SMP_CLUSTER;
    smp_row_stats(logits + (int64_t)r * n, n, vec, &st, shv, shi, shb, shn, part, SMP_CLUSTER);
    cl.sync(); /* every block's stats written and visible cluster-wide */
    if (part == 0 && threadIdx.x == 0) {
        float v = st.vmax;
        int32_t idx = st.imax;
        int bad = st.bad;
        for (int k = 1; k < SMP_CLUSTER; k++) {
            const smp_stats *o = cl.map_shared_rank(&st, k);
            smp_better(v, idx, o->vmax, o->imax);
            bad |= o->bad;
        }
        out[r] = (bad & 1) ? -1 : (idx < n ? idx : 0);
    }
    cl.sync(); /* no block exits while rank 0 still reads its shared memory */
}

extern "C" ai_status cuk_argmax(cuk_stream s, const float *logits, int32_t n_rows, int32_t n_vocab, int32_t *out,
                                ai_err *err)
{
    if (n_rows < 0 || n_vocab <= 0 || (n_rows > 0 && (!logits || !out)))
        return ai_err_set(err, AI_ERR_INVALID, "cuk_argmax: bad arguments (rows %d, n_vocab %d)", n_rows, n_vocab);
    if (n_rows == 0) return AI_OK;
    const bool vec = n_vocab % 4 == 0 && ((uintptr_t)logits & 15) == 0;
    if (n_rows <= SMP_CLUSTER_MAX_ROWS && n_vocab >= SMP_CLUSTER_MIN_VOCAB) {
        CUK_TRY(err, cuk_launch_cluster(k_argmax_cluster, dim3((unsigned)n_rows * SMP_CLUSTER), dim3(SMP_THREADS), 0,
                                        (cudaStream_t)s, SMP_CLUSTER, logits, n_vocab, out, vec),
                "cuk_argmax (cluster)");
        CUK_LAUNCHED(err, "cuk_argmax (cluster)");
        return AI_OK;
    }
    cuk_launch(k_argmax, dim3(n_rows), dim3(SMP_THREADS), 0, (cudaStream_t)s, logits, n_vocab, out, vec);
    CUK_LAUNCHED(err, "cuk_argmax");
    return AI_OK;
}

// --- radix select -------------------------------------------------------------------------------

struct smp_shared {
    smp_stats st;
    float shv[SMP_WARPS];
    int32_t shi[SMP_WARPS], shn[SMP_WARPS];
    int shb[SMP_WARPS];
    u64 sum[SMP_WARPS][3];
    uint32_t cnt[256];  /* the merged histogram of the current pass */
    u64 mass[256];
    uint32_t cnt0[256]; /* the first pass (shift 24, no prefix) is the same for every select: kept */
    u64 mass0[256];
    int32_t have0;
    /* select state, written by warp 0 */
    uint32_t prefix, mask;
    u64 remaining, cnt_above, mass_above, bucket_cnt, bucket_mass;
    int32_t found;
    int32_t wcount[SMP_WARPS];
};

struct smp_sel {
    uint32_t key;   /* the key of the token at the crossing position */
    u64 cnt_above;  /* tokens with a larger key */
    u64 mass_above; /* their mass */
    u64 wq;         /* the weight of each token with this key */
    u64 rank;       /* 1-based rank of the crossing token among the tokens with this key */
    u64 n_key;      /* tokens with this key */
};

/* Per-warp private histograms (dynamic shared memory, SMP_HIST_BYTES): warp w owns
 * wcnt[w * 256 + b] and wmass[w * 256 + b], so no atomics are needed. */
#define SMP_HIST_BYTES (SMP_WARPS * 256 * (sizeof(uint32_t) + sizeof(u64)))

/* Adds (1, q) to bucket b of this warp's histogram for every active lane: the lanes that share a
 * bucket (__match_any_sync) sum their q with two 32-bit warp reductions (q <= 2^40 is split into
 * 20-bit halves, so 32 of them cannot overflow), and one lane per bucket updates it. */
__device__ __forceinline__ void smp_hist_add(uint32_t *wcnt, u64 *wmass, bool active, uint32_t b, u64 q)
{
    const unsigned act = __ballot_sync(0xffffffffu, active);
    if (!act) return; /* uniform */
    if (active) {
        const unsigned peers = __match_any_sync(act, b);
        const uint32_t hi = __reduce_add_sync(peers, (uint32_t)(q >> 20));
        const uint32_t lo = __reduce_add_sync(peers, (uint32_t)(q & 0xfffffu));
        if ((int)(__ffs(peers) - 1) == (int)(threadIdx.x & 31)) { /* one leader per bucket in this warp */
            wcnt[b] += (uint32_t)__popc(peers);
            wmass[b] += ((u64)hi << 20) + lo;
        }
    }
    __syncwarp(); /* the next update of a bucket may come from another lane */
}

/* The first position of the order (key desc, id asc) over finite tokens at which the running sum
 * of counts (by_mass = false) or masses reaches target (1 <= target <= the row's total). */
__device__ smp_sel smp_select(const float *row, int32_t n, bool vec, float lmax, float inv_t, bool by_mass,
                              u64 target, smp_shared *sh, uint32_t *hcnt, u64 *hmass)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    uint32_t *wcnt = hcnt + warp * 256;
    u64 *wmass = hmass + warp * 256;
    if (threadIdx.x == 0) {
        sh->prefix = 0;
        sh->mask = 0;
        sh->remaining = target;
        sh->cnt_above = 0;
        sh->mass_above = 0;
    }
    __syncthreads(); /* the compiler may load sh->prefix speculatively even at shift 24 */
    for (int shift = 24; shift >= 0; shift -= 8) {
        const bool cached = shift == 24 && sh->have0;
        if (!cached) {
            for (int j = lane; j < 256; j += 32) {
                wcnt[j] = 0;
                wmass[j] = 0;
            }
            __syncwarp();
            /* at shift 24 the prefix is empty: literal 0, not sh (thread 0 may not have reset it yet) */
            const uint32_t prefix = shift == 24 ? 0u : sh->prefix, mask = shift == 24 ? 0u : sh->mask;
            const int32_t n4 = (n + 3) & ~3;
            for (int32_t i0 = 0; i0 < n4; i0 += SMP_THREADS * 4) { /* uniform trip count: warp-wide ops inside */
                const int32_t i = i0 + threadIdx.x * 4;
                const float4 x = smp_load4(row, n, i, vec);
                const float e[4] = { x.x, x.y, x.z, x.w };
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const uint32_t key = smp_key(e[k]);
                    const bool active = e[k] > -INFINITY && (key & mask) == prefix;
                    const uint32_t b = (key >> shift) & 255u;
                    smp_hist_add(wcnt, wmass, active, b, active ? smp_weight(e[k], lmax, inv_t) : 0ull);
                }
            }
        }
        __syncthreads();
        for (int j = threadIdx.x; j < 256; j += SMP_THREADS) { /* merge the warps' histograms */
            uint32_t c = 0;
            u64 m = 0;
            if (cached) {
                c = sh->cnt0[j];
                m = sh->mass0[j];
            } else {
                for (int w = 0; w < SMP_WARPS; w++) {
                    c += hcnt[w * 256 + j];
                    m += hmass[w * 256 + j];
                }
                if (shift == 24) {
                    sh->cnt0[j] = c;
                    sh->mass0[j] = m;
                }
            }
            sh->cnt[j] = c;
            sh->mass[j] = m;
        }
        __syncthreads();
        if (threadIdx.x == 0 && shift == 24) sh->have0 = 1;
        if (warp == 0) { /* lane L owns buckets 255 - 8L .. 248 - 8L, in descending order */
            u64 c = 0, m = 0;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                c += sh->cnt[255 - 8 * lane - j];
                m += sh->mass[255 - 8 * lane - j];
            }
            u64 ci = c, mi = m; /* inclusive scans over lanes */
            for (int o = 1; o < 32; o <<= 1) {
                u64 tc = __shfl_up_sync(0xffffffffu, ci, o), tm = __shfl_up_sync(0xffffffffu, mi, o);
                if (lane >= o) {
                    ci += tc;
                    mi += tm;
                }
            }
            const u64 rem = sh->remaining;
            const unsigned hit = __ballot_sync(0xffffffffu, (by_mass ? mi : ci) >= rem);
            __syncwarp(); /* every lane has read sh->remaining before lane f rewrites it */
            /* hit != 0 because target <= total; guard anyway by taking the last lane */
            const int f = hit ? __ffs(hit) - 1 : 31;
            if (lane == f) {
                u64 cb = ci - c, mb = mi - m; /* sums of the buckets before this lane's */
                int bsel = 255 - 8 * lane - 7;
                for (int j = 0; j < 8; j++) {
                    const int b = 255 - 8 * lane - j;
                    const u64 bc = sh->cnt[b], bm = sh->mass[b];
                    if ((by_mass ? mb + bm : cb + bc) >= rem || j == 7) {
                        bsel = b;
                        break;
                    }
                    cb += bc;
                    mb += bm;
                }
                sh->remaining = rem - (by_mass ? mb : cb);
                sh->cnt_above += cb;
                sh->mass_above += mb;
                sh->prefix |= (uint32_t)bsel << shift;
                sh->mask |= 255u << shift;
                sh->bucket_cnt = sh->cnt[bsel];
                sh->bucket_mass = sh->mass[bsel];
            }
        }
        __syncthreads();
    }
    smp_sel r;
    r.key = sh->prefix;
    r.cnt_above = sh->cnt_above;
    r.mass_above = sh->mass_above;
    const u64 bc = sh->bucket_cnt ? sh->bucket_cnt : 1;
    r.n_key = bc;
    r.wq = sh->bucket_mass / bc;
    const u64 rem = sh->remaining;
    if (by_mass) r.rank = r.wq ? (rem + r.wq - 1) / r.wq : 1;
    else r.rank = rem;
    if (r.rank < 1) r.rank = 1;
    if (r.rank > bc) r.rank = bc;
    __syncthreads(); /* sh is reused by the next select */
    return r;
}

/* The id of the rank-th (1-based) token, in id order, whose key is `key` (n_key tokens have it). */
__device__ int32_t smp_find_rank(const float *row, int32_t n, bool vec, uint32_t key, u64 rank, u64 n_key,
                                 smp_shared *sh)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) sh->found = -1;
    __syncthreads();
    if (n_key == 1) { /* the usual case: a unique key, found by whichever thread holds it */
        for (int32_t i = threadIdx.x * 4; i < n; i += SMP_THREADS * 4) {
            const float4 x = smp_load4(row, n, i, vec);
            const float e[4] = { x.x, x.y, x.z, x.w };
#pragma unroll
            for (int k = 0; k < 4; k++)
                if (e[k] > -INFINITY && smp_key(e[k]) == key) sh->found = i + k;
        }
        __syncthreads();
        const int32_t f = sh->found;
        __syncthreads();
        return f;
    }
    u64 before = 0;
    for (int32_t i0 = 0; i0 < n; i0 += SMP_THREADS) {
        const int32_t i = i0 + threadIdx.x;
        const bool m = i < n && row[i] > -INFINITY && smp_key(row[i]) == key;
        const unsigned bal = __ballot_sync(0xffffffffu, m);
        if (lane == 0) sh->wcount[warp] = __popc(bal);
        __syncthreads();
        u64 mine = before, total = 0;
        for (int w = 0; w < SMP_WARPS; w++) {
            const int32_t c = sh->wcount[w];
            if (w < warp) mine += c;
            total += c;
        }
        mine += __popc(bal & ((1u << lane) - 1));
        if (m && mine + 1 == rank) sh->found = i;
        __syncthreads();
        if (before + total >= rank) break; /* uniform: every thread has the same before and total */
        before += total;
    }
    const int32_t f = sh->found;
    __syncthreads();
    return f;
}

// --- the sampler --------------------------------------------------------------------------------

/* Block sums of three u64 values (every thread gets them). */
__device__ void smp_block_sum3(u64 v[3], smp_shared *sh)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int k = 0; k < 3; k++) v[k] = smp_warp_sum(v[k]);
    if (lane == 0)
        for (int k = 0; k < 3; k++) sh->sum[warp][k] = v[k];
    __syncthreads();
    for (int k = 0; k < 3; k++) {
        v[k] = 0;
        for (int w = 0; w < SMP_WARPS; w++) v[k] += sh->sum[w][k];
    }
    __syncthreads();
}

__global__ void __launch_bounds__(SMP_THREADS) k_sample(const float *logits, int32_t n,
                                                        const cuk_sample_params *params, int32_t *out, bool vec)
{
    cuk_pdl_wait();
    __shared__ smp_shared sh;
    extern __shared__ u64 smp_dyn[]; /* SMP_HIST_BYTES: the warps' private histograms */
    u64 *hmass = smp_dyn;
    uint32_t *hcnt = (uint32_t *)(smp_dyn + SMP_WARPS * 256);
    const float *row = logits + (int64_t)blockIdx.x * n;
    if (threadIdx.x == 0) sh.have0 = 0; /* published by the barriers in smp_row_stats */
    smp_row_stats(row, n, vec, &sh.st, sh.shv, sh.shi, sh.shb, sh.shn);
    const cuk_sample_params p = params[blockIdx.x];
    const smp_stats st = sh.st;
    if (st.bad || st.n_finite == 0) {
        if (threadIdx.x == 0) out[blockIdx.x] = -1;
        return;
    }
    if (!(p.temperature >= SMP_GREEDY_EPS)) {
        if (threadIdx.x == 0) out[blockIdx.x] = st.imax;
        return;
    }
    const float lmax = st.vmax, inv_t = 1.0f / p.temperature;
    const bool use_p = p.top_p < 1.0f, use_minp = p.min_p > 0.0f;
    const float log_minp = use_minp ? fminf(logf(p.min_p), 0.0f) : -INFINITY;

    /* pass 2: Z of all finite tokens; count and mass of the min-p survivors (a logit threshold) */
    u64 v[3] = { 0, 0, 0 };
    for (int32_t i = threadIdx.x * 4; i < n; i += SMP_THREADS * 4) {
        const float4 x = smp_load4(row, n, i, vec);
        const float e[4] = { x.x, x.y, x.z, x.w };
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (!(e[k] > -INFINITY)) continue;
            const u64 q = smp_weight(e[k], lmax, inv_t);
            v[0] += q;
            if ((e[k] - lmax) * inv_t >= log_minp) {
                v[1] += 1;
                v[2] += q;
            }
        }
    }
    smp_block_sum3(v, &sh);
    const u64 z_all = v[0], n_minp = v[1], z_minp = v[2];

    const bool k_cuts = p.top_k > 0 && p.top_k < st.n_finite;
    u64 m = k_cuts ? (u64)p.top_k : (u64)st.n_finite; /* the pool */
    u64 zm = z_all;
    bool zm_known = !k_cuts;
    if (use_p && k_cuts) {
        const smp_sel s = smp_select(row, n, vec, lmax, inv_t, false, m, &sh, hcnt, hmass);
        zm = s.mass_above + s.rank * s.wq;
        zm_known = true;
    }
    const u64 z_pool = zm;
    if (use_minp && n_minp <= m) {
        m = n_minp;
        zm = z_minp;
        zm_known = true;
    }
    if (use_p) {
        double tgt = ceil((double)p.top_p * (double)z_pool);
        u64 t = tgt < 1.0 ? 1 : (u64)tgt;
        if (t > z_pool) t = z_pool;
        const smp_sel s = smp_select(row, n, vec, lmax, inv_t, true, t, &sh, hcnt, hmass);
        const u64 m_p = s.cnt_above + s.rank;
        if (m_p < m) {
            m = m_p;
            zm = s.mass_above + s.rank * s.wq;
        }
    } else if (!zm_known) { /* top-k alone bounds the set: its mass */
        const smp_sel s = smp_select(row, n, vec, lmax, inv_t, false, m, &sh, hcnt, hmass);
        zm = s.mass_above + s.rank * s.wq;
    }

    /* the draw: first position with cum > u * Z_M, i.e. cum >= floor(u * Z_M) + 1 */
    double u = p.u;
    if (!(u >= 0.0)) u = 0.0;
    double tu = floor(u * (double)zm) + 1.0;
    u64 t = (u64)tu;
    if (t > zm) t = zm;
    if (t < 1) t = 1;
    const smp_sel s = smp_select(row, n, vec, lmax, inv_t, true, t, &sh, hcnt, hmass);
    const int32_t id = smp_find_rank(row, n, vec, s.key, s.rank, s.n_key, &sh);
    if (threadIdx.x == 0) out[blockIdx.x] = id;
}

extern "C" size_t cuk_sample_work_size(int32_t n_rows, int32_t n_vocab)
{
    (void)n_rows;
    (void)n_vocab;
    return 0; /* everything lives in shared memory (invariant 1) */
}

extern "C" ai_status cuk_sample(cuk_stream s, const float *logits, int32_t n_rows, int32_t n_vocab,
                                const cuk_sample_params *params, int32_t *out, void *work, size_t work_size,
                                ai_err *err)
{
    if (n_rows < 0 || n_vocab <= 0 || n_vocab > (1 << 22) || (n_rows > 0 && (!logits || !params || !out)))
        return ai_err_set(err, AI_ERR_INVALID, "cuk_sample: bad arguments (rows %d, n_vocab %d)", n_rows, n_vocab);
    if (n_rows == 0) return AI_OK;
    const bool vec = n_vocab % 4 == 0 && ((uintptr_t)logits & 15) == 0;
    /* above the 48 KB default: a function attribute, not a stream operation (fine under capture) */
    CUK_TRY(err, cudaFuncSetAttribute(k_sample, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMP_HIST_BYTES),
            "cuk_sample: shared memory limit");
    cuk_launch(k_sample, dim3(n_rows), dim3(SMP_THREADS), SMP_HIST_BYTES, (cudaStream_t)s, logits, n_vocab, params, out, vec);
    CUK_LAUNCHED(err, "cuk_sample");
    return AI_OK;
}
