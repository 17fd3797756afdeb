/* k_attn_decode.cu - split-KV ("flash-decoding") attention for q_len = 1, f16 cache, d in {64, 128}.
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
 * Every warp writes its partial (m, l, acc[D]) to `work`; kattn_decode_reduce merges the
 * 4 * n_split partials of each (sequence, head) and writes the output row.
 *
 * Invariants: 1. a processed tile always holds a valid key, so the running max is finite after it;
 * 2. a warp with no tile still writes m = -inf, l = 0, acc = 0 (weight 0 in the merge);
 * 3. the reducer only reads the partials of splits that start below seq_len (all written).
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
};

template <int D, int G>
__global__ void __launch_bounds__(128) kattn_decode_split(const cuk_attn_args a, int n_split, int chunk, float *work)
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
    if (k_begin >= seq_len) return;
    const int k_end = min(seq_len, k_begin + chunk);
    const int group = a.n_head / a.n_head_kv;

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

    const size_t pstride = D + 4;
    const int n_part = n_split * DEC_WARPS, pidx = split * DEC_WARPS + warp;
#pragma unroll
    for (int g = 0; g < G; g++) {
        if (g >= group) break;
        float l = lp[g];
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
        const int h = kvh * group + g;
        float *pw = work + (((size_t)s * a.n_head + h) * n_part + pidx) * pstride;
        if (lane == 0) {
            pw[0] = m[g];
            pw[1] = l;
        }
        if constexpr (DPL == 4) *(float4 *)(pw + 4 + lane * 4) = make_float4(acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
        else *(float2 *)(pw + 4 + lane * 2) = make_float2(acc[g][0], acc[g][1]);
    }
}

/* Grid (n_head, n_seq), D threads: merges the partials of the splits that ran (each thread walks all
 * 4 * n_split partials of its head in turn). Measured on the H200 (bench_cuda_attention, 2026-12-02): this
 * serial merge is the suspected cause (not confirmed) of the 1 x 32k figure (47 splits, 188 partials per head:
 * 69 us, 46% of copy, where 8 x 8k with 24 partials reaches 71%); a parallel merge is the next step. */
template <int D>
__global__ void __launch_bounds__(D) kattn_decode_reduce(const cuk_attn_args a, int n_split, int chunk, const float *work)
{
    cuk_pdl_wait();
    const int h = blockIdx.x, s = blockIdx.y, d = threadIdx.x;
    const int q0 = a.q_start[s];
    if (a.q_start[s + 1] - q0 < 1) return;
    const int seq_len = a.seq_len[s];
    const int n_act = seq_len > 0 ? min(n_split, (seq_len + chunk - 1) / chunk) * DEC_WARPS : 0;
    const size_t pstride = D + 4;
    const float *pw = work + ((size_t)s * a.n_head + h) * n_split * DEC_WARPS * pstride;
    float M = -INFINITY;
    for (int p = 0; p < n_act; p++) M = fmaxf(M, pw[p * pstride]);
    float L = 0.f, acc = 0.f;
    for (int p = 0; p < n_act; p++) {
        const float w = kattn_exp2(pw[p * pstride] - M);
        L = fmaf(w, pw[p * pstride + 1], L);
        acc = fmaf(w, pw[p * pstride + 4 + d], acc);
    }
    a.out[(size_t)q0 * a.n_head * D + (size_t)h * D + d] = L > 0.f ? acc / L : 0.f;
}


int kattn_decode_shape_ok(const cuk_attn_args *a)
{
    const int group = a->n_head / a->n_head_kv;
    return a->kv_type == DTYPE_F16 && a->head_dim == a->head_dim_v && (a->head_dim == 64 || a->head_dim == 128) &&
           group <= 16;
}

int kattn_decode_supported(const cuk_attn_args *a)
{
    return kattn_decode_shape_ok(a) && ((uintptr_t)a->k_cache & 15) == 0 && ((uintptr_t)a->v_cache & 15) == 0;
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

/* chunk (keys per split, a multiple of KATTN_DEC_CHUNK_ALIGN, >= 256 keys unless the context is
 * shorter) and the split count. Picks the split count with the least estimated time: waves of
 * resident CTAs x (keys per CTA + a fixed per-CTA cost of about 48 keys), so batch-1 long contexts
 * spread over every SM and large batches avoid a mostly empty last wave. */
static void dec_plan(const cuk_attn_args *a, int *n_split, int *chunk)
{
    const long pairs = (long)a->n_seq * a->n_head_kv;
    const int group = a->n_head / a->n_head_kv;
    const long slots = a->head_dim == 64 ? dec_slots_d<64>(group) : dec_slots_d<128>(group);
    long max_ns = (a->max_seq_len + 255) / 256;
    if (max_ns > 4 * slots / pairs) max_ns = 4 * slots / pairs; /* the work bound's cap */
    if (max_ns < 1) max_ns = 1;
    if (max_ns > 4096) max_ns = 4096;
    long best_ns = 1, best_ch = 0;
    double best_cost = 0;
    for (long ns = 1; ns <= max_ns; ns++) {
        long ch = (a->max_seq_len + ns - 1) / ns;
        ch = (ch + KATTN_DEC_CHUNK_ALIGN - 1) / KATTN_DEC_CHUNK_ALIGN * KATTN_DEC_CHUNK_ALIGN;
        const long real_ns = (a->max_seq_len + ch - 1) / ch;
        const long waves = (pairs * real_ns + slots - 1) / slots;
        const double cost = (double)waves * (double)(ch + 48);
        if (best_ch == 0 || cost < best_cost) {
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
    return (size_t)a->n_seq * a->n_head * kattn_decode_splits(a) * DEC_WARPS * (a->head_dim + 4) * sizeof(float);
}

size_t kattn_decode_work_bound(const cuk_attn_args *a)
{
    const long pairs = (long)a->n_seq * a->n_head_kv;
    const int group = a->n_head / a->n_head_kv;
    const long slots = a->head_dim == 64 ? dec_slots_d<64>(group) : dec_slots_d<128>(group);
    const long cap = pairs > 4 * slots ? pairs : 4 * slots;
    return (size_t)cap * group * DEC_WARPS * (a->head_dim + 4) * sizeof(float);
}

template <int D, int G> static cudaError_t dec_launch(cudaStream_t st, const cuk_attn_args *a, int ns, int ch)
{
    const size_t sm = dec_smem<D, G>::bytes;
    cudaError_t e = cudaFuncSetAttribute(kattn_decode_split<D, G>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    if (e != cudaSuccess) return e;
    dim3 grid((unsigned)ns, (unsigned)a->n_head_kv, (unsigned)a->n_seq);
    cuk_launch(kattn_decode_split<D, G>, dim3(grid), dim3(128), sm, st, *a, ns, ch, (float *)a->work);
    e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    cuk_launch(kattn_decode_reduce<D>, dim3((unsigned)a->n_head, (unsigned)a->n_seq), dim3(D), 0, st, *a, ns, ch,
               (const float *)a->work);
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
