/* k_attn_prefill.cu - FlashAttention-2 forward over a paged f16 or fp8 e4m3 KV cache (q_len > 1, mixed
 * batches), head_dim = head_dim_v in {64, 128}, tensor cores through mma.sync m16n8k16 (f16 in, f32
 * accumulate).
 *
 * Grid (q tile, head, sequence); the q-tile count comes from the by-value max_q_len, and CTAs whose
 * tile starts past their sequence's q_len exit, so one launch serves every sequence (varlen) and
 * the launch does not read device data. Tiles run heaviest first (reversed x) for causal balance.
 * A CTA is KATTN_FA_WARPS warps, 16 query rows each, of one head; GQA maps head h to kv head h / group.
 *
 *  - Q: f32 rows scaled by scale * log2 e, rounded to f16 into shared memory, then held in registers
 *    as mma A fragments (ldmatrix) for the whole key loop.
 *  - K, V: 64-key tiles gathered row by row through the block table with 16-byte cp.async into a
 *    two-stage ring (the next tile loads during this one's math); keys >= seq_len are zero-filled.
 *    Shared rows are swizzled (16-byte chunk c of row r stored at c ^ (r & 7)) so ldmatrix is
 *    conflict-free.
 *  - S = Q K^T: ldmatrix (non-transposed) of K rows gives the col-major B fragments directly.
 *  - online softmax on the accumulators (rows g and g + 8 of the warp; a quad of lanes shares a row),
 *    exp2 in the log2 domain; the causal mask (key > row position) is applied only on tiles that
 *    reach past the warp's first row position.
 *  - O += P V: the S accumulators are repacked into f16 A fragments in registers (FA2), V through
 *    ldmatrix.trans.
 * Invariant: every query row sees key 0 in the first tile, so its running max is finite afterwards
 * (a later, fully masked tile then contributes exp2(-inf) = 0).
 *
 * fp8 e4m3 cache (template F8, 2026-12-04; verified on the H200, test_prefill_fp8 with memcheck and
 * racecheck clean; bench_cuda_attention: 195 TFLOP/s at 1 x 4096 and 126 at 8 x 512, 0.91 / 0.95 of
 * the f16 instantiation). The codes of a 64-key tile land by the same 16-byte cp.async (16 codes each, half the
 * bytes) into a two-stage ring of unswizzled fp8 tiles; after the tile's barrier every thread widens
 * its share into ONE f16 K / V tile in the swizzled layout above (cvt.rn.f16x2.e4m3x2: exact, every
 * e4m3 value is an f16) and a second barrier publishes it; the ldmatrix / mma code then runs unchanged.
 * Shared memory and barriers per tile are the f16 kernel's (one f16 stage plus two half-size fp8
 * stages = two f16 stages; the end-of-tile barrier is not needed: the next tile's first barrier
 * orders the f16 tile's reuse, and a code stage is refilled only after the barrier that follows its
 * widening). Scales: the scores are dots of the f16 query with the codes; k_scale enters in f32 inside
 * the exp2 argument, p = 2^(s k_scale - m k_scale) with m the raw running max (k_scale > 0 keeps the
 * order; one fma, like the f16 kernel's subtraction), so the f16 query's range is not narrowed by a
 * small k_scale; v_scale multiplies the final 1 / l. Zero-filled keys past kv_len widen to 0, so NaN
 * cache rows are never read, as for f16. Why widen in shared memory rather than build fragments in
 * registers (ldmatrix on the fp8 bytes with a permuted head dim, byte permutes for V's transpose):
 * prefill is compute-bound, and per tile a CTA widens 2 x 64 x D codes (one 16-byte load, four
 * cvt.f16x2 and two 16-byte stores per 16 codes) against 4 x 64 x 64 x D MMA FLOPs (S and P V), while
 * the mma code and its verified fragment layouts stay exactly the f16 kernel's. The f16
 * instantiation's PTX is the pre-template kernel's, instruction for instruction (diffed, labels aside).
 *
 * Hopper version: k_attn_prefill_hopper.cu (the attention ladder's v4e design on this contract: wgmma,
 * K/V by TMA one cache block per box, L2 sections, lazy rescale), the default where it applies (f16,
 * block_size >= 8, sm_90); this kernel is the fallback (block_size < 8, AIINFRA_PREFILL=fa2) and the
 * fp8 prefill. Ladder row v3_backend (both through cuk_attention), 2026-12-04 H200: this kernel
 * 197.0 TFLOP/s at b4 h32 s4096 d128 causal, against v4e's 543.7 on bf16 without the paging.
 * To measure next (GPU session): test_cuda_attention (test_prefill_fa3), memcheck / racecheck on it,
 * then `AIINFRA_PREFILL=fa2|fa3 AIINFRA_ATTN_VERSIONS=v3_backend build/aiinfra kernels bench attention`
 * and bench/bench_cuda_attention (engine shapes: 1 x 4096 and 8 x 512 at 32/8 heads, block 16).
 */
#include "backend/cuda/k_attn.h"
#include "backend/cuda/cuk_fp8.cuh"
#include "backend/cuda/cuk_launch.h"
#include "backend/cuda/cuk_mma.cuh"

#define FA_BN 64
/* Warps per CTA (16 query rows each): 4 -> 64-row tiles, 8 -> 128-row tiles. */
#ifndef KATTN_FA_WARPS
#define KATTN_FA_WARPS 4
#endif


/* Shared memory: f16 Q, then f16: 2 stages of (K, V); fp8: one widened f16 (K, V) and 2 stages of fp8
 * (K, V) codes. Both come to the same bytes: 2 x 2 x 64 x D x 2 = 2 x 64 x D x 2 + 2 x 2 x 64 x D. */
template <int D, int NW, bool F8> struct fa_cfg {
    static constexpr size_t smem = F8 ? (size_t)(16 * NW * D + 2 * FA_BN * D) * 2 + (size_t)4 * FA_BN * D
                                      : (size_t)(16 * NW * D + 4 * FA_BN * D) * 2;
};

/* fp8 tile widening: 16 landed codes (chunk p of a row of D codes) -> f16 chunks 2p, 2p + 1 of the
 * swizzled f16 row (cuk_f8x8_to_f16x8, exact). The chunk written first is the odd one for p >= D / 32:
 * the 8 lanes of a store phase (one row at d 128, two rows at d 64) then hit 8 distinct 16-byte bank
 * groups in each of the two stores (2p alone would repeat p and p + D / 32's banks). */
template <int D> static __device__ __forceinline__ void fa_widen16(__half *row_tile, int r, int p, uint4 c)
{
    const uint4 lo = cuk_f8x8_to_f16x8(make_uint2(c.x, c.y)), hi = cuk_f8x8_to_f16x8(make_uint2(c.z, c.w));
    const bool sw = p >= D / 32;
    *(uint4 *)(row_tile + cuk_sw<D>(r, 2 * p + sw)) = sw ? hi : lo;
    *(uint4 *)(row_tile + cuk_sw<D>(r, 2 * p + !sw)) = sw ? lo : hi;
}

template <int D, int NW, bool F8>
__global__ void __launch_bounds__(NW * 32, 8 / NW) kattn_fa2(const cuk_attn_args a)
{
    cuk_pdl_wait();
    constexpr int CH = D / 8, NB = FA_BN / 8, DB = D / 8, FA_BM = 16 * NW, NT = NW * 32;
    constexpr int FC = D / 16; /* fp8: 16-byte chunks per cache row */
    extern __shared__ __align__(128) unsigned char smem[];
    __half *Qs = (__half *)smem, *Ks = Qs + FA_BM * D, *Vs = Ks + (F8 ? 1 : 2) * FA_BN * D;
    uint8_t *K8 = (uint8_t *)(Vs + FA_BN * D); /* fp8 only: stage st's K codes at st * 2 * FA_BN * D, V after */
    const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, s = blockIdx.z;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int q0 = a.q_start[s], q_len = a.q_start[s + 1] - q0;
    const int row0 = qt * FA_BM;
    if (row0 >= q_len) return;
    const int seq_len = a.seq_len[s];
    const int pos0 = seq_len - q_len; /* position of the sequence's query row 0 */
    const int kv_len = min(seq_len, pos0 + min(row0 + FA_BM, q_len)); /* keys this tile needs */
    const int kvh = h / (a.n_head / a.n_head_kv);

    /* Q tile -> f16, scaled, swizzled */
    const float qscale = a.scale * KATTN_LOG2E;
    /* fp8: scores are code dots; k_scale multiplies them inside the exp2 argument (fma with the row's
     * max, in f32: no f16 range limit on it), v_scale the final 1 / l. f16: both 1, unused. */
    const float kmul = F8 ? a.k_scale : 1.f, vmul = F8 ? a.v_scale : 1.f;
    for (int i = tid; i < FA_BM * D / 4; i += NT) {
        const int r = i / (D / 4), d = (i % (D / 4)) * 4;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (row0 + r < q_len) v = *(const float4 *)(a.q + (size_t)(q0 + row0 + r) * a.q_stride + (size_t)h * D + d);
        __half *dst = Qs + cuk_sw<D>(r, d >> 3) + (d & 7);
        *(__half2 *)dst = __floats2half2_rn(v.x * qscale, v.y * qscale);
        *(__half2 *)(dst + 2) = __floats2half2_rn(v.z * qscale, v.w * qscale);
    }

    const int32_t *bt = a.block_tables + (size_t)s * a.max_blocks;
    const int bsh = __ffs(a.block_size) - 1, bmask = a.block_size - 1;
    const __half *kc = (const __half *)a.k_cache, *vc = (const __half *)a.v_cache;
    const size_t rowsz = (size_t)a.n_head_kv * D;
    const uint8_t *kc8 = (const uint8_t *)a.k_cache, *vc8 = (const uint8_t *)a.v_cache;
    auto load_kv = [&](int kt, int st) {
        if constexpr (F8) { /* codes land unswizzled: chunk p of row r at r * D + 16 p */
            uint8_t *k8 = K8 + st * 2 * FA_BN * D, *v8 = k8 + FA_BN * D;
#pragma unroll
            for (int i = 0; i < FA_BN * FC / NT; i++) {
                const int c = tid + NT * i, r = c / FC, part = c % FC, j = kt * FA_BN + r;
                const bool ok = j < kv_len;
                size_t off = 0;
                if (ok) off = ((size_t)bt[j >> bsh] * a.block_size + (j & bmask)) * rowsz + (size_t)kvh * D + part * 16;
                kattn_cp16(k8 + c * 16, kc8 + off, ok);
                kattn_cp16(v8 + c * 16, vc8 + off, ok);
            }
        } else {
            __half *ks = Ks + st * FA_BN * D, *vs = Vs + st * FA_BN * D;
#pragma unroll
            for (int i = 0; i < FA_BN * CH / NT; i++) {
                const int c = tid + NT * i, r = c / CH, part = c % CH, j = kt * FA_BN + r;
                const bool ok = j < kv_len;
                size_t off = 0;
                if (ok) off = ((size_t)bt[j >> bsh] * a.block_size + (j & bmask)) * rowsz + (size_t)kvh * D + part * 8;
                const int so = cuk_sw<D>(r, part);
                kattn_cp16(ks + so, kc + off, ok);
                kattn_cp16(vs + so, vc + off, ok);
            }
        }
        kattn_cp_commit();
    };

    const int n_kt = kv_len > 0 ? (kv_len + FA_BN - 1) / FA_BN : 0;
    if (n_kt > 0) load_kv(0, 0);
    __syncthreads(); /* Q tile written */

    uint32_t qf[D / 16][4];
    {
        const int r = warp * 16 + (lane & 15);
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) cuk_ldsm4(qf[kk], Qs + cuk_sw<D>(r, kk * 2 + (lane >> 4)));
    }
    float o[DB][4];
#pragma unroll
    for (int i = 0; i < DB; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
    const int wpos = pos0 + row0 + warp * 16;  /* first row position of this warp */
    const int rp0 = wpos + (lane >> 2), rp1 = rp0 + 8;

    for (int kt = 0; kt < n_kt; kt++) {
        const int st = kt & 1;
        if (kt + 1 < n_kt) {
            load_kv(kt + 1, st ^ 1);
            kattn_cp_wait<1>();
        } else {
            kattn_cp_wait<0>();
        }
        __syncthreads(); /* fp8: also every warp is done with the previous tile's widened K, V */
        if constexpr (F8) { /* widen stage st into the one f16 (K, V) tile; the next iteration refills st */
            const uint8_t *k8 = K8 + st * 2 * FA_BN * D, *v8 = k8 + FA_BN * D;
#pragma unroll
            for (int i = 0; i < FA_BN * FC / NT; i++) {
                const int c = tid + NT * i, r = c / FC, part = c % FC;
                fa_widen16<D>(Ks, r, part, *(const uint4 *)(k8 + c * 16));
                fa_widen16<D>(Vs, r, part, *(const uint4 *)(v8 + c * 16));
            }
            __syncthreads();
        }
        const __half *ks = Ks + (F8 ? 0 : st * FA_BN * D), *vs = Vs + (F8 ? 0 : st * FA_BN * D);

        float sc[NB][4];
#pragma unroll
        for (int i = 0; i < NB; i++) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
#pragma unroll
            for (int nb2 = 0; nb2 < NB / 2; nb2++) {
                uint32_t b[4];
                const int r = nb2 * 16 + (lane & 7) + ((lane >> 4) << 3);
                cuk_ldsm4(b, ks + cuk_sw<D>(r, kk * 2 + ((lane >> 3) & 1)));
                cuk_mma_f16(sc[2 * nb2], qf[kk], b[0], b[1]);
                cuk_mma_f16(sc[2 * nb2 + 1], qf[kk], b[2], b[3]);
            }
        }
        const int kbase = kt * FA_BN;
        if (kbase + FA_BN - 1 > wpos) {
#pragma unroll
            for (int nb = 0; nb < NB; nb++) {
                const int key = kbase + nb * 8 + 2 * (lane & 3);
                if (key > rp0) sc[nb][0] = -INFINITY;
                if (key + 1 > rp0) sc[nb][1] = -INFINITY;
                if (key > rp1) sc[nb][2] = -INFINITY;
                if (key + 1 > rp1) sc[nb][3] = -INFINITY;
            }
        }
        float mx0 = m0, mx1 = m1;
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
            mx0 = fmaxf(mx0, fmaxf(sc[nb][0], sc[nb][1]));
            mx1 = fmaxf(mx1, fmaxf(sc[nb][2], sc[nb][3]));
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        const float ms0 = mx0 == -INFINITY ? 0.f : mx0, ms1 = mx1 == -INFINITY ? 0.f : mx1;
        const float c0 = kattn_exp2(F8 ? (m0 - ms0) * kmul : m0 - ms0);
        const float c1 = kattn_exp2(F8 ? (m1 - ms1) * kmul : m1 - ms1);
        const float nk0 = -ms0 * kmul, nk1 = -ms1 * kmul; /* fp8: p = 2^(s k_scale - m k_scale) */
        m0 = mx0;
        m1 = mx1;
        l0 *= c0;
        l1 *= c1;
#pragma unroll
        for (int i = 0; i < DB; i++) {
            o[i][0] *= c0;
            o[i][1] *= c0;
            o[i][2] *= c1;
            o[i][3] *= c1;
        }
#pragma unroll
        for (int kk = 0; kk < FA_BN / 16; kk++) {
            float p[8];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                if constexpr (F8) {
                    p[e] = kattn_exp2(fmaf(sc[2 * kk][e], kmul, e < 2 ? nk0 : nk1));
                    p[4 + e] = kattn_exp2(fmaf(sc[2 * kk + 1][e], kmul, e < 2 ? nk0 : nk1));
                } else {
                    p[e] = kattn_exp2(sc[2 * kk][e] - (e < 2 ? ms0 : ms1));
                    p[4 + e] = kattn_exp2(sc[2 * kk + 1][e] - (e < 2 ? ms0 : ms1));
                }
            }
            l0 += p[0] + p[1] + p[4] + p[5];
            l1 += p[2] + p[3] + p[6] + p[7];
            uint32_t pa[4] = {cuk_pack_f16(p[0], p[1]), cuk_pack_f16(p[2], p[3]), cuk_pack_f16(p[4], p[5]), cuk_pack_f16(p[6], p[7])};
#pragma unroll
            for (int db2 = 0; db2 < DB / 2; db2++) {
                uint32_t b[4];
                const int r = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
                cuk_ldsm4_t(b, vs + cuk_sw<D>(r, db2 * 2 + (lane >> 4)));
                cuk_mma_f16(o[2 * db2], pa, b[0], b[1]);
                cuk_mma_f16(o[2 * db2 + 1], pa, b[2], b[3]);
            }
        }
        if constexpr (!F8) __syncthreads(); /* this stage is refilled two tiles later */
        /* fp8: the next iteration's first barrier protects the f16 tile; the codes' stage was read
         * before this iteration's second barrier, so the next iteration's refill of it is safe */
    }

    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float i0 = l0 > 0.f ? vmul / l0 : 0.f, i1 = l1 > 0.f ? vmul / l1 : 0.f;
    const int r0 = row0 + warp * 16 + (lane >> 2), r1 = r0 + 8;
    const size_t ostride = (size_t)a.n_head * D;
    float *out0 = a.out + (size_t)(q0 + r0) * ostride + (size_t)h * D + 2 * (lane & 3);
    float *out1 = out0 + 8 * ostride;
#pragma unroll
    for (int i = 0; i < DB; i++) {
        if (r0 < q_len) *(float2 *)(out0 + i * 8) = make_float2(o[i][0] * i0, o[i][1] * i0);
        if (r1 < q_len) *(float2 *)(out1 + i * 8) = make_float2(o[i][2] * i1, o[i][3] * i1);
    }
}

int kattn_prefill_supported(const cuk_attn_args *a)
{
    return (a->kv_type == DTYPE_F16 || a->kv_type == DTYPE_F8_E4M3) && a->head_dim == a->head_dim_v &&
           (a->head_dim == 64 || a->head_dim == 128) &&
           a->q_stride % 4 == 0 && ((uintptr_t)a->q & 15) == 0 && ((uintptr_t)a->out & 7) == 0 &&
           ((uintptr_t)a->k_cache & 15) == 0 && ((uintptr_t)a->v_cache & 15) == 0;
}

template <int D, bool F8> static cudaError_t fa_launch(cudaStream_t st, const cuk_attn_args *a)
{
    constexpr int NW = KATTN_FA_WARPS, BM = 16 * NW;
    const size_t sm = fa_cfg<D, NW, F8>::smem;
    cudaError_t e = cudaFuncSetAttribute(kattn_fa2<D, NW, F8>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    if (e != cudaSuccess) return e;
    dim3 grid((unsigned)((a->max_q_len + BM - 1) / BM), (unsigned)a->n_head, (unsigned)a->n_seq);
    cuk_launch(kattn_fa2<D, NW, F8>, dim3(grid), dim3(NW * 32), sm, st, *a);
    return cudaGetLastError();
}

cudaError_t kattn_prefill_launch(cudaStream_t st, const cuk_attn_args *a)
{
    if (a->kv_type == DTYPE_F8_E4M3)
        return a->head_dim == 64 ? fa_launch<64, true>(st, a) : fa_launch<128, true>(st, a);
    return a->head_dim == 64 ? fa_launch<64, false>(st, a) : fa_launch<128, false>(st, a);
}
