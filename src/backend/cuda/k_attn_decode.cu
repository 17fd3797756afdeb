/* k_attn_decode.cu - split-KV ("flash-decoding") attention for q_len = 1, f16 cache, d in {64, 128},
 * as ONE kernel: the split partials are merged in-kernel by the last CTA to finish.
 *
 * Grid (split, kv head, sequence), 128 threads. A CTA serves ALL the query heads of its GQA group
 * (G = n_head / n_head_kv, padded to a power of two up to 16), so each K/V byte is read from memory
 * once per group, not once per query head. Its split is keys [split * chunk, +chunk) of the
 * sequence; CTAs whose split starts at or beyond seq_len exit (the grid comes from max_seq_len).
 *
 * Each warp works alone (no block barriers in the loop): it takes 16-key tiles w, w + 4, ... of
 * the split, copies K and V rows into its own shared-memory stage with 16-byte cp.async (two stages,
 * the next tile loads while this one computes; keys past the split/sequence are zero-filled, never
 * read), then
 *   Q.K: lane = 2 * key + half; the half takes the interleaved 16-byte chunks 2i + half of the row,
 *        dots them with the G scaled queries (f32, shared memory, broadcast reads), one shuffle
 *        joins the halves. K rows are padded by 32 bytes so the 8 lanes of a 16-byte phase hit
 *        distinct banks.
 *   softmax: fp32 online softmax in the log2 domain (scale * log2 e folded into q), per head.
 *   P.V: lane owns D / 32 dims for all G heads, reads V rows (8 or 4 bytes per lane, contiguous)
 *        and the tile's probabilities (broadcast) from shared memory.
 * Bytes in flight: each warp has one 16-key K+V tile loading while it computes the other (8 KB at
 * d = 128), 32 KB per CTA, ~96 KB per SM at the 3 CTAs/SM the shared memory allows (d 128, G 4).
 *
 * Finish (why this version is faster than the previous split kernel + separate merge kernel): the
 * 4 warps merge in shared memory into one partial (m, l, o[D]) per head; a sequence that ran in a
 * single CTA (n_act = 1: no split, or a short sequence) writes its output directly. Otherwise each
 * CTA stores its partial in `work`, fences, and bumps the (sequence, kv head) counter; the CTA
 * that draws the last ticket merges the n_act partials (in split order: bitwise reproducible
 * whichever CTA is last) and resets the counter to 0. No second launch (2-3 us per layer at
 * batch 1), the merge runs while other CTAs still stream K/V, and a CTA writes 1 partial per head
 * instead of 4 (one per warp), so the merge reads 4x less.
 *
 * work layout: KATTN_DEC_COUNTERS uint32 counters (index s * n_head_kv + kvh; at a fixed place so
 * calls with any n_seq share them), then the partials (n_seq, n_head, n_split, D + 4) floats.
 * The counters must be zero when the buffer is first used (callers zero-fill work once after
 * allocating it); every call leaves them zero again, so graph replays stay correct.
 *
 * Invariants: 1. a processed tile always holds a valid key, so the running max is finite after it;
 * 2. a warp with no tile keeps m = -inf, l = 0, acc = 0 (weight 0 in the merges);
 * 3. exactly the n_act = ceil(seq_len / chunk) CTAs that run take a ticket, so the last ticket is
 *    n_act - 1; a sequence with q_len 0 touches nothing.
 */
#include "backend/cuda/k_attn.h"
#include "backend/cuda/cuk_launch.h"

#define DEC_TK 16    /* keys per warp tile */
#define DEC_WARPS 4

template <int D, int G> struct dec_smem {
    static constexpr int KST = D + 16; /* K row stride in halves (32-byte pad) */
    static constexpr int STAGE = DEC_TK * (KST + D); /* halves per warp stage (K then V) */
    static constexpr size_t bytes =
        (size_t)G * D * 4 + (size_t)DEC_WARPS * 2 * STAGE * 2 + (size_t)DEC_WARPS * DEC_TK * G * 4;
    /* the end-of-kernel warp merge reuses the K/V stages for (DEC_WARPS, G, D + 4) floats */
    static_assert((size_t)DEC_WARPS * G * (D + 4) * 4 <= (size_t)DEC_WARPS * 2 * STAGE * 2, "merge fits the stages");
};

template <int D, int G>
__global__ void __launch_bounds__(128) kattn_decode_split(const cuk_attn_args a, int n_split, int chunk, void *work)
{
    cuk_pdl_wait();
    constexpr int CH = D / 8, KST = dec_smem<D, G>::KST, STAGE = dec_smem<D, G>::STAGE, DPL = D / 32;
    extern __shared__ __align__(16) unsigned char smem[];
    float *qs = (float *)smem;
    __half *stage_base = (__half *)(qs + G * D);
    const int split = blockIdx.x, kvh = blockIdx.y, s = blockIdx.z;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    float *ps = (float *)(stage_base + DEC_WARPS * 2 * STAGE) + warp * DEC_TK * G;

    const int q0 = a.q_start[s];
    if (a.q_start[s + 1] - q0 < 1) return;
    const int seq_len = a.seq_len[s];
    const int k_begin = split * chunk;
    const int group = a.n_head / a.n_head_kv;
    if (k_begin >= seq_len) return; /* seq_len 0 is outside the contract (the row sits at seq_len - 1) */
    const int k_end = min(seq_len, k_begin + chunk);

    const float qscale = a.scale * KATTN_LOG2E;
    for (int i = tid; i < G * D; i += 128) {
        const int g = i / D, d = i % D;
        qs[i] = g < group ? a.q[(size_t)q0 * a.q_stride + (size_t)(kvh * group + g) * D + d] * qscale : 0.f;
    }
    __syncthreads();

    const int32_t *bt = a.block_tables + (size_t)s * a.max_blocks;
    const int bsh = __ffs(a.block_size) - 1, bmask = a.block_size - 1;
    const __half *kc = (const __half *)a.k_cache, *vc = (const __half *)a.v_cache;
    const size_t row = (size_t)a.n_head_kv * D;
    __half *my_stage = stage_base + warp * 2 * STAGE;

    auto load_tile = [&](int tile, int st) {
        const int kt0 = k_begin + tile * DEC_TK;
        __half *ks = my_stage + st * STAGE, *vs = ks + DEC_TK * KST;
#pragma unroll
        for (int i = 0; i < DEC_TK * CH / 32; i++) {
            const int c = lane + 32 * i, key = c / CH, part = c % CH, j = kt0 + key;
            const bool ok = j < k_end;
            size_t off = 0;
            if (ok) off = ((size_t)bt[j >> bsh] * a.block_size + (j & bmask)) * row + (size_t)kvh * D + part * 8;
            kattn_cp16(ks + key * KST + part * 8, kc + off, ok);
            kattn_cp16(vs + key * D + part * 8, vc + off, ok);
        }
        kattn_cp_commit();
    };

    float m[G], lp[G], acc[G][DPL];
#pragma unroll
    for (int g = 0; g < G; g++) {
        m[g] = -INFINITY;
        lp[g] = 0.f;
#pragma unroll
        for (int e = 0; e < DPL; e++) acc[g][e] = 0.f;
    }

    const int n_tiles = (k_end - k_begin + DEC_TK - 1) / DEC_TK;
    const int key = lane >> 1, hf = lane & 1;
    int st = 0;
    if (warp < n_tiles) load_tile(warp, 0);
    for (int tile = warp; tile < n_tiles; tile += DEC_WARPS) {
        if (tile + DEC_WARPS < n_tiles) {
            load_tile(tile + DEC_WARPS, st ^ 1);
            kattn_cp_wait<1>();
        } else {
            kattn_cp_wait<0>();
        }
        __syncwarp();
        const __half *ks = my_stage + st * STAGE, *vs = ks + DEC_TK * KST;

        float sc[G];
#pragma unroll
        for (int g = 0; g < G; g++) sc[g] = 0.f;
#pragma unroll
        for (int i = 0; i < CH / 2; i++) {
            const int part = 2 * i + hf;
            const uint4 kr = *(const uint4 *)(ks + key * KST + part * 8);
            const float2 k0 = __half22float2(*(const __half2 *)&kr.x), k1 = __half22float2(*(const __half2 *)&kr.y);
            const float2 k2 = __half22float2(*(const __half2 *)&kr.z), k3 = __half22float2(*(const __half2 *)&kr.w);
#pragma unroll
            for (int g = 0; g < G; g++) {
                const float4 qa = *(const float4 *)(qs + g * D + part * 8);
                const float4 qb = *(const float4 *)(qs + g * D + part * 8 + 4);
                float v = sc[g];
                v = fmaf(qa.x, k0.x, v); v = fmaf(qa.y, k0.y, v); v = fmaf(qa.z, k1.x, v); v = fmaf(qa.w, k1.y, v);
                v = fmaf(qb.x, k2.x, v); v = fmaf(qb.y, k2.y, v); v = fmaf(qb.z, k3.x, v); v = fmaf(qb.w, k3.y, v);
                sc[g] = v;
            }
        }
        const bool valid = k_begin + tile * DEC_TK + key < k_end;
#pragma unroll
        for (int g = 0; g < G; g++) {
            float v = sc[g] + __shfl_xor_sync(0xffffffffu, sc[g], 1);
            v = valid ? v : -INFINITY;
            float mx = v;
#pragma unroll
            for (int o = 2; o < 32; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            const float m_new = fmaxf(m[g], mx);
            const float corr = kattn_exp2(m[g] - m_new);
            const float p = kattn_exp2(v - m_new);
            m[g] = m_new;
            lp[g] = lp[g] * corr + (hf ? 0.f : p);
            if (!hf) ps[key * G + g] = p;
#pragma unroll
            for (int e = 0; e < DPL; e++) acc[g][e] *= corr;
        }
        __syncwarp();
#pragma unroll 4
        for (int kk = 0; kk < DEC_TK; kk++) {
            float v[DPL];
            if constexpr (DPL == 4) {
                const uint2 vr = *(const uint2 *)(vs + kk * D + lane * 4);
                const float2 a0 = __half22float2(*(const __half2 *)&vr.x), a1 = __half22float2(*(const __half2 *)&vr.y);
                v[0] = a0.x; v[1] = a0.y; v[2] = a1.x; v[3] = a1.y;
            } else {
                const float2 a0 = __half22float2(*(const __half2 *)(vs + kk * D + lane * 2));
                v[0] = a0.x; v[1] = a0.y;
            }
            const float *pk = ps + kk * G;
#pragma unroll
            for (int g = 0; g < G; g++) {
                const float p = pk[g];
#pragma unroll
                for (int e = 0; e < DPL; e++) acc[g][e] = fmaf(p, v[e], acc[g][e]);
            }
        }
        __syncwarp();
        st ^= 1;
    }

    /* ---- 1. the 4 warps of this CTA merge in shared memory (the K/V stages are free now: every
     * warp has waited for its last cp.async group) into one (m, l, o[D]) per head. */
    __syncthreads();
    constexpr int PS = D + 4; /* floats per partial: m, l, 2 pad (16-byte alignment), o[D] */
    float *wm = (float *)stage_base; /* (DEC_WARPS, G, PS) */
#pragma unroll
    for (int g = 0; g < G; g++) {
        if (g >= group) break;
        float l = lp[g];
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
        float *pw = wm + (warp * G + g) * PS;
        if (lane == 0) {
            pw[0] = m[g];
            pw[1] = l;
        }
        if constexpr (DPL == 4) *(float4 *)(pw + 4 + lane * 4) = make_float4(acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
        else *(float2 *)(pw + 4 + lane * 2) = make_float2(acc[g][0], acc[g][1]);
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
        for (int w = 0; w < DEC_WARPS; w++) M = fmaxf(M, wm[(w * G + g) * PS]);
        float L = 0.f;
        float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) {
            const float *pw = wm + (w * G + g) * PS;
            const float sc = kattn_exp2(pw[0] - M); /* an idle warp has m = -inf: weight 0 */
            const float4 v = *(const float4 *)(pw + 4 + c * 4);
            L = fmaf(sc, pw[1], L);
            o.x = fmaf(sc, v.x, o.x); o.y = fmaf(sc, v.y, o.y); o.z = fmaf(sc, v.z, o.z); o.w = fmaf(sc, v.w, o.w);
        }
        const int h = kvh * group + g;
        if (n_act == 1) { /* the whole sequence was this CTA's: finish here */
            const float inv = 1.f / L;
            *(float4 *)(a.out + (size_t)q0 * a.n_head * D + (size_t)h * D + c * 4) =
                make_float4(o.x * inv, o.y * inv, o.z * inv, o.w * inv);
        } else {
            float *pw = parts + (((size_t)s * a.n_head + h) * n_split + split) * PS;
            if (c == 0) {
                pw[0] = M;
                pw[1] = L;
            }
            *(float4 *)(pw + 4 + c * 4) = o;
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
     * last, so the result is bitwise reproducible). */
    for (int it = tid; it < group * C4; it += 128) {
        const int g = it / C4, c = it % C4, h = kvh * group + g;
        const float *pb = parts + ((size_t)s * a.n_head + h) * n_split * PS;
        float M = -INFINITY;
        for (int p = 0; p < n_act; p++) M = fmaxf(M, __ldcg(pb + (size_t)p * PS));
        float L = 0.f;
        float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
        for (int p = 0; p < n_act; p++) {
            const float *pw = pb + (size_t)p * PS;
            const float sc = kattn_exp2(__ldcg(pw) - M);
            const float4 v = __ldcg((const float4 *)(pw + 4 + c * 4));
            L = fmaf(sc, __ldcg(pw + 1), L);
            o.x = fmaf(sc, v.x, o.x); o.y = fmaf(sc, v.y, o.y); o.z = fmaf(sc, v.z, o.z); o.w = fmaf(sc, v.w, o.w);
        }
        const float inv = 1.f / L;
        *(float4 *)(a.out + (size_t)q0 * a.n_head * D + (size_t)h * D + c * 4) =
            make_float4(o.x * inv, o.y * inv, o.z * inv, o.w * inv);
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

/* CTAs of kattn_decode_split<D, G> resident on the whole GPU (SMs x occupancy); 3 x 132 when the
 * device cannot be asked (no GPU: the launch fails anyway). */
template <int D, int G> static long dec_slots_g(void)
{
    int dev = 0, sms = 0, occ = 0;
    const size_t sm = dec_smem<D, G>::bytes;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaFuncSetAttribute(kattn_decode_split<D, G>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm) !=
            cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kattn_decode_split<D, G>, 128, sm) != cudaSuccess ||
        sms < 1 || occ < 1) {
        (void)cudaGetLastError();
        return 3L * 132;
    }
    return (long)sms * occ;
}

template <int D> static long dec_slots_d(int group)
{
    if (group <= 1) return dec_slots_g<D, 1>();
    if (group <= 2) return dec_slots_g<D, 2>();
    if (group <= 4) return dec_slots_g<D, 4>();
    if (group <= 8) return dec_slots_g<D, 8>();
    return dec_slots_g<D, 16>();
}

static long dec_slots(const cuk_attn_args *a)
{
    const int group = a->n_head / a->n_head_kv;
    return a->head_dim == 64 ? dec_slots_d<64>(group) : dec_slots_d<128>(group);
}

/* chunk (keys per split, a multiple of KATTN_DEC_CHUNK_ALIGN) and the split count.
 * No split at all when the (sequence, kv head) pairs already fill every resident CTA slot (or
 * exceed the counters). Otherwise the split count with the least estimated time: waves of
 * resident CTAs x (keys per CTA + a fixed per-CTA cost of about 48 keys) + the last CTA's merge
 * (about one key per split), splits of at least 256 keys, at most 4 x slots CTAs in all (the
 * work bound's cap). Batch 1 at long context spreads over every SM in one wave. */
static void dec_plan(const cuk_attn_args *a, int *n_split, int *chunk)
{
    const long pairs = (long)a->n_seq * a->n_head_kv;
    const long slots = dec_slots(a);
    const long full = ((long)a->max_seq_len + KATTN_DEC_CHUNK_ALIGN - 1) / KATTN_DEC_CHUNK_ALIGN * KATTN_DEC_CHUNK_ALIGN;
    *n_split = 1;
    *chunk = (int)full;
    if (pairs >= slots || pairs > KATTN_DEC_COUNTERS) return;
    long max_ns = (a->max_seq_len + 255) / 256;
    if (max_ns > 4 * slots / pairs) max_ns = 4 * slots / pairs;
    if (max_ns > 4096) max_ns = 4096;
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

template <int D, int G> static cudaError_t dec_launch(cudaStream_t st, const cuk_attn_args *a, int ns, int ch)
{
    const size_t sm = dec_smem<D, G>::bytes;
    cudaError_t e = cudaFuncSetAttribute(kattn_decode_split<D, G>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    if (e != cudaSuccess) return e;
    dim3 grid((unsigned)ns, (unsigned)a->n_head_kv, (unsigned)a->n_seq);
    cuk_launch(kattn_decode_split<D, G>, dim3(grid), dim3(128), sm, st, *a, ns, ch, a->work);
    return cudaGetLastError();
}

template <int D> static cudaError_t dec_launch_d(cudaStream_t st, const cuk_attn_args *a, int ns, int ch)
{
    const int group = a->n_head / a->n_head_kv;
    if (group <= 1) return dec_launch<D, 1>(st, a, ns, ch);
    if (group <= 2) return dec_launch<D, 2>(st, a, ns, ch);
    if (group <= 4) return dec_launch<D, 4>(st, a, ns, ch);
    if (group <= 8) return dec_launch<D, 8>(st, a, ns, ch);
    return dec_launch<D, 16>(st, a, ns, ch);
}

cudaError_t kattn_decode_launch(cudaStream_t st, const cuk_attn_args *a)
{
    int ns, ch;
    dec_plan(a, &ns, &ch);
    return a->head_dim == 64 ? dec_launch_d<64>(st, a, ns, ch) : dec_launch_d<128>(st, a, ns, ch);
}
