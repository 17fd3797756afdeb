/* k_attn_decode.cu - split-KV ("flash-decoding") attention for q_len = 1, f16 cache, d in {64, 128},
 * as ONE kernel on tensor cores: the split partials are merged in-kernel by the last CTA to finish.
 *
 * Grid (split, kv head, sequence), 128 threads (4 warps). A CTA serves ALL the query heads of its
 * GQA group (group = n_head / n_head_kv <= 16), so each K/V byte is read from memory once per
 * group. Its split is keys [split * chunk, +chunk) of the sequence; CTAs whose split starts at or
 * beyond seq_len exit (the grid comes from max_seq_len).
 *
 * Why this version (round 2) should be faster than the round-1 kernel (fp32 CUDA-core dots,
 * 2-stage cp.async of 16-key tiles per warp, 3 CTAs/SM; measured 58% of copy at 1 x 32k, 71% at
 * 8 x 8k). Nothing here was measured yet; the reasoning:
 *  1. Issue pressure, not bytes in flight, was the limit. Per key and kv head (512 bytes at d 128)
 *     the old kernel spent ~60 warp instructions (G x D FMAs for Q.K and again for P.V, f16->f32
 *     conversions, float4 q reads from shared memory, shuffles). HBM3e at 4.2 TB/s over 132 SMs
 *     is ~16 B per SM cycle, i.e. one key per 32 cycles per SM: ~2 of the 4 issue slots per cycle,
 *     with only 3 warps per scheduler to hide FMA chains, shared-memory latency and the cp.async
 *     waits. Here the group is the M dimension of mma.sync m16n8k16 (heads padded to 16 rows,
 *     padding rows have q = 0): per 16-key tile a warp issues 16 MMAs for S = Q K^T (K through
 *     non-transposed ldmatrix: the col-major B fragment), 16 for O += P V (V through
 *     ldmatrix.trans, P repacked from the S accumulators as the A fragment, as in FA2), 2 x D/16
 *     ldmatrix.x4 and ~70 softmax/rescale instructions: ~12 instructions per key, 5x fewer. The
 *     16-row padding wastes tensor-core work (4x at G = 4), which is free: ~8 KFLOP per 512 bytes
 *     is ~65 TFLOP/s at full bandwidth, a tenth of what mma.sync sustains. No f16->f32 conversion
 *     of K or V at all (the tensor cores read f16).
 *  2. Bytes in flight: each warp owns an NS-stage ring of 16-key tiles (K and V, 8 KB at d 128)
 *     and keeps NS - 1 tiles loading while it computes one. d 128: NS = 3, 96 KB of shared memory
 *     per CTA, 2 CTAs (8 warps) per SM, 2 x 8 KB x 8 = 128 KB in flight per SM; d 64: NS = 4, 64 KB
 *     per CTA, 3 CTAs per SM, 12 x 3 x 4 KB = 144 KB. Little's law for ~4.2 TB/s at ~1 us of
 *     loaded latency needs ~32 KB per SM; the 40-64 KB rule of thumb is met twice over. (TMA bulk
 *     copies were considered: a 16-token paged block of one kv head is NOT contiguous, its rows are
 *     n_kv * d * 2 bytes apart, so it would need a tiled tensor map built on the host per cache;
 *     16-byte cp.async with all NS - 1 tiles in flight reaches the same bytes in flight.)
 *  3. Block-table latency off the issue path: each lane looks up the cache row of its key of the
 *     NEXT tile it will issue one iteration ahead (the old kernel did a dependent global load of
 *     the table right before its cp.async). A lane pair copies one key's rows (two 16-byte chunks
 *     side by side: whole 32-byte sectors per instruction), so a tile's copies are CH cp.async per
 *     lane with immediate offsets, ~2 instructions each.
 *  4. Q is rounded to f16 once (A fragments in registers for the whole loop); scores are scaled by
 *     scale * log2 e in fp32 after the MMA and the softmax stays in fp32 in the log2 domain (ex2).
 *     P is rounded to f16 for P.V (as in FA2); the row sum l uses the fp32 P. Error vs the old
 *     fp32 kernel: ~1e-4 relative (q rounding ~2^-12 per element, P rounding ~2^-12), far inside the
 *     tests' 3e-3 / 5e-3 bounds.
 *  5. The last-CTA merge reads its partials with ~3 dependent L2 round trips instead of ~2 x
 *     n_act / 4: (m, l) of every (head, split) in one parallel pass into shared memory, the split
 *     weights exp2(m - M) in a second, then each thread streams its float4 column of all splits
 *     with 8 loads in flight. The merge is on the critical path (the last CTA runs it after
 *     everything else), ~2 us of a ~32 us call at 1 x 32k before.
 *
 * Shared memory: per warp NS stages of (K tile, V tile), each [16 keys][D] f16, 16-byte chunk c of
 * key r stored at chunk c ^ (r & 7) so the 8 row addresses of an ldmatrix phase hit distinct banks.
 * The end-of-kernel merges reuse the stages.
 *
 * Finish (kept from round 1): the 4 warps merge in shared memory into one partial (m, l, o[D]) per
 * head; a sequence that ran in a single CTA (n_act = 1) writes its output directly. Otherwise each
 * CTA stores its partial in `work`, fences, and bumps the (sequence, kv head) counter; the CTA that
 * draws the last ticket merges the n_act partials in split order (bitwise reproducible whichever CTA
 * is last) and resets the counter to 0.
 *
 * work layout: KATTN_DEC_COUNTERS uint32 counters (index s * n_head_kv + kvh; at a fixed place so
 * calls with any n_seq share them), then the partials (n_seq, n_head, n_split, D + 4) floats.
 *
 * Invariants: 1. a processed tile always holds a valid key (tiles start below k_end), so every
 * row's running max is finite after it (padding rows score 0); 2. a warp with no tile keeps
 * m = -inf, l = 0, o = 0 (weight 0 in the merges); 3. exactly the n_act = ceil(seq_len / chunk)
 * CTAs that run take a ticket, so the last ticket is n_act - 1; a sequence with q_len 0 touches
 * nothing; 4. control flow around ldmatrix/mma/shuffles is warp-uniform.
 */
#include "backend/cuda/k_attn.h"
#include "backend/cuda/cuk_launch.h"

#define DEC_TK 16 /* keys per warp tile (the k extent of one P.V mma) */
#define DEC_WARPS 4
#define DEC_M 16  /* mma rows: the group's query heads, zero-padded */

/* Stages per warp: d 128 -> 3 (96 KB per CTA, 2 CTAs/SM), d 64 -> 4 (64 KB, 3 CTAs/SM). */
template <int D> struct dec_cfg {
    static constexpr int NS = D == 128 ? 3 : 4;
    static constexpr int TILE = DEC_TK * D;     /* halves of one K (or V) tile */
    static constexpr int STAGE = 2 * TILE;      /* K then V */
    static constexpr size_t bytes = (size_t)DEC_WARPS * NS * STAGE * 2;
    static constexpr int MIN_CTAS = D == 128 ? 2 : 3;
    /* the warp merge needs (DEC_WARPS, DEC_M, D + 4) floats of the stages */
    static_assert((size_t)DEC_WARPS * DEC_M * (D + 4) * 4 <= bytes, "warp merge fits the stages");
};

/* Most (head, split) entries the last-CTA merge keeps in shared memory (m, l, weight: 12 bytes). */
template <int D> static constexpr long dec_merge_cap() { return (long)(dec_cfg<D>::bytes / 12); }

static __device__ __forceinline__ void dec_ldsm4(uint32_t r[4], const __half *p)
{
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
static __device__ __forceinline__ void dec_ldsm4_t(uint32_t r[4], const __half *p)
{
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
/* c (16x8 f32) += a (16x16 f16, row) . b (16x8 f16, col) */
static __device__ __forceinline__ void dec_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
static __device__ __forceinline__ uint32_t dec_pack(float lo, float hi)
{
    __half2 h = __floats2half2_rn(lo, hi);
    return *(uint32_t *)&h;
}
/* 16-byte global -> shared copy to a shared-window address (cp.async.cg); ok = 0 zero-fills. */
static __device__ __forceinline__ void dec_cp16(uint32_t saddr, const void *gmem, bool ok)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(gmem), "r"(ok ? 16 : 0) : "memory");
}
/* Offset in halves of 16-byte chunk c of key r in a swizzled [16][D] tile. */
template <int D> static __device__ __forceinline__ int dec_sw(int r, int c) { return r * D + ((c ^ (r & 7)) << 3); }

template <int D>
__global__ void __launch_bounds__(128, dec_cfg<D>::MIN_CTAS)
    kattn_decode_split(const cuk_attn_args a, int n_split, int chunk, void *work)
{
    cuk_pdl_wait();
    constexpr int NS = dec_cfg<D>::NS, TILE = dec_cfg<D>::TILE, STAGE = dec_cfg<D>::STAGE;
    constexpr int CH = D / 8;                  /* 16-byte chunks per row */
    constexpr int KS = D / 16;                 /* k-steps of Q.K; also V ldmatrix.x4 per tile */
    constexpr int NT = D / 8;                  /* n-tiles of O */
    extern __shared__ __align__(128) unsigned char smem[];
    __half *stages = (__half *)smem;
    const int split = blockIdx.x, kvh = blockIdx.y, s = blockIdx.z;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;

    const int q0 = a.q_start[s];
    if (a.q_start[s + 1] - q0 < 1) return;
    const int seq_len = a.seq_len[s];
    const int k_begin = split * chunk;
    const int group = a.n_head / a.n_head_kv;
    if (k_begin >= seq_len) return; /* seq_len 0 is outside the contract (the row sits at seq_len - 1) */
    const int k_end = min(seq_len, k_begin + chunk);

    /* Q as mma A fragments (f16), rows r0 = lane / 4 and r0 + 8 = heads of the group (0 past it). */
    const int r0 = lane >> 2, cq = (lane & 3) * 2;
    uint32_t qa[KS][4];
    {
        const float *qp = a.q + (size_t)q0 * a.q_stride + (size_t)kvh * group * D;
        const bool ok0 = r0 < group, ok1 = r0 + 8 < group;
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            const int c = kk * 16 + cq;
            float v[8];
#pragma unroll
            for (int e = 0; e < 2; e++) {
                v[0 + e] = ok0 ? __ldg(qp + (size_t)r0 * D + c + e) : 0.f;
                v[2 + e] = ok1 ? __ldg(qp + (size_t)(r0 + 8) * D + c + e) : 0.f;
                v[4 + e] = ok0 ? __ldg(qp + (size_t)r0 * D + c + 8 + e) : 0.f;
                v[6 + e] = ok1 ? __ldg(qp + (size_t)(r0 + 8) * D + c + 8 + e) : 0.f;
            }
#pragma unroll
            for (int i = 0; i < 4; i++) qa[kk][i] = dec_pack(v[2 * i], v[2 * i + 1]);
        }
    }
    const float qscale = a.scale * KATTN_LOG2E;

    const int32_t *bt = a.block_tables + (size_t)s * a.max_blocks;
    const int bsh = __ffs(a.block_size) - 1, bmask = a.block_size - 1;
    const __half *kc = (const __half *)a.k_cache + (size_t)kvh * D, *vc = (const __half *)a.v_cache + (size_t)kvh * D;
    const size_t row = (size_t)a.n_head_kv * D;
    __half *ring = stages + warp * NS * STAGE;

    /* This warp's tiles: local i is tile warp + 4 i of the split. */
    const int n_tiles = (k_end - k_begin + DEC_TK - 1) / DEC_TK;
    const int nt = warp < n_tiles ? (n_tiles - warp + DEC_WARPS - 1) / DEC_WARPS : 0;
    /* Copy mapping: lane pair (2 key, 2 key + 1) owns key `key` of a tile and copies its 16-byte
     * chunks 2 u + sub (u < CH / 2) of the K and the V row: each cp.async instruction moves 16 full
     * 32-byte sectors, the lane's row address comes from its own table lookup (no shuffles), and
     * the smem chunks (2 u + sub) ^ (key & 7) of 8 consecutive keys hit distinct bank groups. */
    const int ckey = lane >> 1, csub = lane & 1;
    /* Cache row of key ckey of local tile i, or -1 past the split / sequence. */
    auto lookup = [&](int i) -> int {
        const int j = k_begin + (warp + DEC_WARPS * i) * DEC_TK + ckey;
        return (i < nt && j < k_end) ? __ldg(bt + (j >> bsh)) * a.block_size + (j & bmask) : -1;
    };
    /* Shared byte addresses of the lane's chunks in stage 0 (K tile; V is TILE halves further),
     * computed once: a copy is then one add and two cp.async. */
    uint32_t dst[CH / 2];
#pragma unroll
    for (int u = 0; u < CH / 2; u++)
        dst[u] = (uint32_t)__cvta_generic_to_shared(ring + dec_sw<D>(ckey, 2 * u + csub));
    /* Starts the copies of local tile i (row `slot` from lookup) into stage `st`; one group. */
    auto issue = [&](int i, int slot, int st) {
        if (i < nt) {
            const bool ok = slot >= 0;
            const size_t off = ok ? (size_t)slot * row + csub * 8 : 0;
            const __half *kp = kc + off, *vp = vc + off;
            const uint32_t sb = (uint32_t)(st * STAGE * 2);
#pragma unroll
            for (int u = 0; u < CH / 2; u++) {
                dec_cp16(dst[u] + sb, kp + 16 * u, ok);
                dec_cp16(dst[u] + sb + TILE * 2, vp + 16 * u, ok);
            }
        }
        kattn_cp_commit();
    };

    float o[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f; /* rows r0, r0 + 8; l: this lane's columns */

    int pf = lookup(0);
#pragma unroll
    for (int i = 0; i < NS - 1; i++) {
        const int cur = pf;
        pf = lookup(i + 1);
        issue(i, cur, i);
    }
    int st_c = 0, st_i = NS - 1; /* stages of the tile computed / issued next (i % NS, (i - 1) % NS) */
    /* ldmatrix lane addresses inside a tile: K (non-transposed), V (transposed) */
    const int k_row = ((lane >> 4) << 3) + (lane & 7), k_chk = (lane >> 3) & 1;
    const int v_row = (((lane >> 3) & 1) << 3) + (lane & 7), v_chk = lane >> 4;

    for (int i = 0; i < nt; i++) {
        kattn_cp_wait<NS - 2>();
        __syncwarp(); /* tile i landed for every lane; stage (i - 1) % NS is free again */
        {
            const int cur = pf;
            pf = lookup(i + NS);
            issue(i + NS - 1, cur, st_i);
        }
        const __half *ks = ring + st_c * STAGE, *vs = ks + TILE;
        st_i = st_c;
        st_c = st_c == NS - 1 ? 0 : st_c + 1;

        /* S (16 heads x 16 keys) = Q K^T: n-tile j = keys 8j .. 8j + 7 */
        float sc[2][4] = { { 0.f, 0.f, 0.f, 0.f }, { 0.f, 0.f, 0.f, 0.f } };
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            uint32_t b[4];
            dec_ldsm4(b, ks + dec_sw<D>(k_row, 2 * kk + k_chk));
            dec_mma(sc[0], qa[kk], b[0], b[1]);
            dec_mma(sc[1], qa[kk], b[2], b[3]);
        }
        /* online softmax (log2 domain); keys past the split / sequence score -inf */
        const int kt0 = k_begin + (warp + DEC_WARPS * i) * DEC_TK;
        float mx0 = m0, mx1 = m1;
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const bool valid = kt0 + 8 * j + cq + e < k_end;
                sc[j][e] = valid ? sc[j][e] * qscale : -INFINITY;
                sc[j][2 + e] = valid ? sc[j][2 + e] * qscale : -INFINITY;
                mx0 = fmaxf(mx0, sc[j][e]);
                mx1 = fmaxf(mx1, sc[j][2 + e]);
            }
#pragma unroll
        for (int off = 1; off < 4; off <<= 1) {
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
        }
        const float c0 = kattn_exp2(m0 - mx0), c1 = kattn_exp2(m1 - mx1); /* first tile: exp2(-inf) = 0 */
        m0 = mx0;
        m1 = mx1;
        float ps0 = 0.f, ps1 = 0.f;
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                sc[j][e] = kattn_exp2(sc[j][e] - mx0);
                sc[j][2 + e] = kattn_exp2(sc[j][2 + e] - mx1);
                ps0 += sc[j][e];
                ps1 += sc[j][2 + e];
            }
        l0 = fmaf(l0, c0, ps0);
        l1 = fmaf(l1, c1, ps1);
#pragma unroll
        for (int n = 0; n < NT; n++) {
            o[n][0] *= c0;
            o[n][1] *= c0;
            o[n][2] *= c1;
            o[n][3] *= c1;
        }
        /* O += P V: P (16 heads x 16 keys) as the A fragment straight from the S accumulators */
        const uint32_t pa[4] = { dec_pack(sc[0][0], sc[0][1]), dec_pack(sc[0][2], sc[0][3]),
                                 dec_pack(sc[1][0], sc[1][1]), dec_pack(sc[1][2], sc[1][3]) };
#pragma unroll
        for (int np = 0; np < KS; np++) {
            uint32_t b[4];
            dec_ldsm4_t(b, vs + dec_sw<D>(v_row, 2 * np + v_chk));
            dec_mma(o[2 * np], pa, b[0], b[1]);
            dec_mma(o[2 * np + 1], pa, b[2], b[3]);
        }
    }
    kattn_cp_wait<0>(); /* the trailing (empty or unused) groups */

    /* ---- 1. the 4 warps of this CTA merge in shared memory (the stages are free: every warp has
     * drained its copies) into one (m, l, o[D]) per head. */
    __syncthreads();
    constexpr int PS = D + 4; /* floats per partial: m, l, 2 pad (16-byte alignment), o[D] */
    float *wm = (float *)smem; /* (DEC_WARPS, DEC_M, PS) */
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    {
        float *p0 = wm + (warp * DEC_M + r0) * PS, *p1 = p0 + 8 * PS;
        if ((lane & 3) == 0) {
            p0[0] = m0;
            p0[1] = l0;
            p1[0] = m1;
            p1[1] = l1;
        }
#pragma unroll
        for (int n = 0; n < NT; n++) {
            *(float2 *)(p0 + 4 + 8 * n + cq) = make_float2(o[n][0], o[n][1]);
            *(float2 *)(p1 + 4 + 8 * n + cq) = make_float2(o[n][2], o[n][3]);
        }
    }
    __syncthreads();

    /* Splits of this sequence that run (start below seq_len); only they take part in the merge. */
    const int n_act = min(n_split, (seq_len + chunk - 1) / chunk);
    float *parts = (float *)((char *)work + KATTN_DEC_COUNTER_BYTES);
    constexpr int C4 = D / 4; /* float4 columns per head */
    for (int it = tid; it < group * C4; it += 128) {
        const int g = it / C4, c = it % C4;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) M = fmaxf(M, wm[(w * DEC_M + g) * PS]);
        float L = 0.f;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) {
            const float *pw = wm + (w * DEC_M + g) * PS;
            const float sc = kattn_exp2(pw[0] - M); /* an idle warp has m = -inf: weight 0 */
            const float4 v = *(const float4 *)(pw + 4 + c * 4);
            L = fmaf(sc, pw[1], L);
            acc.x = fmaf(sc, v.x, acc.x); acc.y = fmaf(sc, v.y, acc.y);
            acc.z = fmaf(sc, v.z, acc.z); acc.w = fmaf(sc, v.w, acc.w);
        }
        const int h = kvh * group + g;
        if (n_act == 1) { /* the whole sequence was this CTA's: finish here */
            const float inv = 1.f / L;
            *(float4 *)(a.out + (size_t)q0 * a.n_head * D + (size_t)h * D + c * 4) =
                make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
        } else {
            float *pw = parts + (((size_t)s * a.n_head + h) * n_split + split) * PS;
            if (c == 0) {
                pw[0] = M;
                pw[1] = L;
            }
            *(float4 *)(pw + 4 + c * 4) = acc;
        }
    }
    if (n_act == 1) return;

    /* ---- 2. publish the partial; the last of the n_act CTAs of (sequence, kv head) to arrive
     * merges them all. Release: every writer fences before the barrier, then one atomic. */
    __shared__ int last;
    __threadfence();
    __syncthreads();
    if (tid == 0) {
        unsigned *cnt = (unsigned *)work + (size_t)s * a.n_head_kv + kvh;
        const unsigned ticket = atomicAdd(cnt, 1u);
        last = ticket == (unsigned)(n_act - 1);
        /* Every CTA of the group has counted: leave 0 for the next call (a later launch on this
         * stream starts only after this grid has completed, so nothing races with the reset). */
        if (last) atomicExch(cnt, 0u);
    }
    __syncthreads();
    if (!last) return;
    __threadfence(); /* acquire: the other CTAs' partials are read from L2 (ld.cg), never a stale L1 */

    /* ---- 3. merge the n_act partials of each head in split order (the same order whichever CTA is
     * last: bitwise reproducible). (m, l) of every (head, split) first, in one parallel pass
     * (group * n_act <= dec_merge_cap, dec_plan makes sure), then the weights, then the columns. */
    const int ne = group * n_act;
    float *mm = (float *)smem, *ll = mm + ne, *ww = ll + ne; /* (group, n_act) each */
    const size_t head0 = (size_t)s * a.n_head + (size_t)kvh * group;
    for (int e = tid; e < ne; e += 128) {
        const int g = e / n_act, p = e % n_act;
        const float *pw = parts + ((head0 + g) * n_split + p) * PS;
        mm[e] = __ldcg(pw);
        ll[e] = __ldcg(pw + 1);
    }
    __syncthreads();
    for (int e = tid; e < ne; e += 128) {
        const float *mg = mm + (e / n_act) * n_act;
        float M = -INFINITY;
        for (int p = 0; p < n_act; p++) M = fmaxf(M, mg[p]);
        ww[e] = kattn_exp2(mm[e] - M);
    }
    __syncthreads();
    for (int it = tid; it < group * C4; it += 128) {
        const int g = it / C4, c = it % C4;
        const float *wg = ww + g * n_act, *lg = ll + g * n_act;
        const float *pb = parts + (head0 + g) * n_split * PS + 4 + c * 4;
        float L = 0.f;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 8
        for (int p = 0; p < n_act; p++) {
            const float w = wg[p];
            const float4 v = __ldcg((const float4 *)(pb + (size_t)p * PS));
            L = fmaf(w, lg[p], L);
            acc.x = fmaf(w, v.x, acc.x); acc.y = fmaf(w, v.y, acc.y);
            acc.z = fmaf(w, v.z, acc.z); acc.w = fmaf(w, v.w, acc.w);
        }
        const float inv = 1.f / L;
        *(float4 *)(a.out + (size_t)q0 * a.n_head * D + (size_t)(kvh * group + g) * D + c * 4) =
            make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
    }
}

int kattn_decode_shape_ok(const cuk_attn_args *a)
{
    const int group = a->n_head / a->n_head_kv;
    return a->kv_type == DTYPE_F16 && a->head_dim == a->head_dim_v && (a->head_dim == 64 || a->head_dim == 128) &&
           group <= 16;
}

int kattn_decode_supported(const cuk_attn_args *a)
{
    return kattn_decode_shape_ok(a) && ((uintptr_t)a->k_cache & 15) == 0 && ((uintptr_t)a->v_cache & 15) == 0 &&
           ((uintptr_t)a->out & 15) == 0 && ((uintptr_t)a->work & 15) == 0;
}

/* CTAs of kattn_decode_split<D> resident on the whole GPU (SMs x occupancy); MIN_CTAS x 132 when
 * the device cannot be asked (no GPU: the launch fails anyway). */
template <int D> static long dec_slots_d(void)
{
    int dev = 0, sms = 0, occ = 0;
    const size_t sm = dec_cfg<D>::bytes;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaFuncSetAttribute(kattn_decode_split<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm) !=
            cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kattn_decode_split<D>, 128, sm) != cudaSuccess ||
        sms < 1 || occ < 1) {
        (void)cudaGetLastError();
        return (long)dec_cfg<D>::MIN_CTAS * 132;
    }
    return (long)sms * occ;
}

static long dec_slots(const cuk_attn_args *a) { return a->head_dim == 64 ? dec_slots_d<64>() : dec_slots_d<128>(); }

/* chunk (keys per split, a multiple of KATTN_DEC_CHUNK_ALIGN) and the split count.
 * No split at all when the (sequence, kv head) pairs already fill every resident CTA slot (or
 * exceed the counters). Otherwise the split count with the least estimated time: waves of
 * resident CTAs x (keys per CTA + a fixed per-CTA cost of about 48 keys: filling the NS - 1 tile
 * pipeline and the finish) + the last CTA's merge (about one key per split), splits of at least
 * 256 keys, at most 4 x slots CTAs in all (the work bound's cap) and at most dec_merge_cap / group
 * splits (the last CTA's merge keeps (m, l, weight) of every (head, split) in shared memory).
 * Batch 1 at long context spreads over every SM in one wave. */
static void dec_plan(const cuk_attn_args *a, int *n_split, int *chunk)
{
    const long pairs = (long)a->n_seq * a->n_head_kv;
    const long slots = dec_slots(a);
    const long group = a->n_head / a->n_head_kv;
    const long full = ((long)a->max_seq_len + KATTN_DEC_CHUNK_ALIGN - 1) / KATTN_DEC_CHUNK_ALIGN * KATTN_DEC_CHUNK_ALIGN;
    *n_split = 1;
    *chunk = (int)full;
    if (pairs >= slots || pairs > KATTN_DEC_COUNTERS) return;
    long max_ns = (a->max_seq_len + 255) / 256;
    if (max_ns > 4 * slots / pairs) max_ns = 4 * slots / pairs;
    const long cap = (a->head_dim == 64 ? dec_merge_cap<64>() : dec_merge_cap<128>()) / group;
    if (max_ns > cap) max_ns = cap;
    long best_ns = 1, best_ch = full;
    double best_cost = 0;
    for (long ns = 1; ns <= max_ns; ns++) {
        long ch = (a->max_seq_len + ns - 1) / ns;
        ch = (ch + KATTN_DEC_CHUNK_ALIGN - 1) / KATTN_DEC_CHUNK_ALIGN * KATTN_DEC_CHUNK_ALIGN;
        const long real_ns = (a->max_seq_len + ch - 1) / ch;
        const long waves = (pairs * real_ns + slots - 1) / slots;
        const double cost = (double)waves * (double)(ch + 48) + (real_ns > 1 ? (double)real_ns : 0.0);
        if (ns == 1 || cost < best_cost) {
            best_cost = cost;
            best_ns = real_ns;
            best_ch = ch;
        }
    }
    *chunk = (int)best_ch;
    *n_split = (int)best_ns;
}

int kattn_decode_splits(const cuk_attn_args *a)
{
    int ns, ch;
    dec_plan(a, &ns, &ch);
    return ns;
}

size_t kattn_decode_work_need(const cuk_attn_args *a)
{
    const int ns = kattn_decode_splits(a);
    const size_t parts = ns > 1 ? (size_t)a->n_seq * a->n_head * ns * (a->head_dim + 4) * sizeof(float) : 0;
    return KATTN_DEC_COUNTER_BYTES + parts;
}

size_t kattn_decode_work_bound(const cuk_attn_args *a)
{
    /* A call splits only when n_seq * n_head_kv * n_split <= 4 x slots, so its partials are at most
     * 4 x slots x group of them, whatever n_seq and max_seq_len. */
    const int group = a->n_head / a->n_head_kv;
    return KATTN_DEC_COUNTER_BYTES + (size_t)(4 * dec_slots(a)) * group * (a->head_dim + 4) * sizeof(float);
}

template <int D> static cudaError_t dec_launch(cudaStream_t st, const cuk_attn_args *a, int ns, int ch)
{
    const size_t sm = dec_cfg<D>::bytes;
    cudaError_t e = cudaFuncSetAttribute(kattn_decode_split<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    if (e != cudaSuccess) return e;
    dim3 grid((unsigned)ns, (unsigned)a->n_head_kv, (unsigned)a->n_seq);
    cuk_launch(kattn_decode_split<D>, dim3(grid), dim3(128), sm, st, *a, ns, ch, a->work);
    return cudaGetLastError();
}

cudaError_t kattn_decode_launch(cudaStream_t st, const cuk_attn_args *a)
{
    int ns, ch;
    dec_plan(a, &ns, &ch);
    return a->head_dim == 64 ? dec_launch<64>(st, a, ns, ch) : dec_launch<128>(st, a, ns, ch);
}
