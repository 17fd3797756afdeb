/* attn_fa2.cu - v3: FlashAttention-2 style forward on tensor cores (mma.sync m16n8k16, bf16 in, fp32
 * accumulate), bf16 (b, h, s, d) in and out, causal or not, d = 64 / 128, any s; writes lse.
 *
 * Why faster than v2: the two matmuls move to tensor cores and the work between them shrinks.
 *  - Parallel over query blocks (grid: 64-row tiles x (b*h)), heaviest causal tiles first; each warp
 *    owns 16 query rows, so the softmax statistics stay in one warp (quad shuffles, no shared memory).
 *  - Q stays in registers as mma A fragments for the whole key loop (loaded once with ldmatrix).
 *  - K and V tiles of 64 keys come in with 16-byte cp.async into a two-stage ring: the next tile
 *    loads while this one is multiplied. Rows are swizzled (16-byte chunk c of row r at c ^ (r & 7))
 *    so ldmatrix reads are bank-conflict free.
 *  - S = Q K^T in registers; P is repacked from the S accumulators into bf16 A fragments directly
 *    (no shared-memory round trip), V through ldmatrix.trans. The division by the row sum is deferred
 *    to the end (one multiply per output instead of per tile); the running rescale uses exp2 with
 *    scale * log2 e folded in.
 *  - Causal: key tiles past the CTA's last row are never loaded; the mask is applied only on tiles
 *    that reach past the warp's first row (or past s).
 * This is the same design as the backend's paged prefill (src/backend/cuda/k_attn_prefill.cu), which
 * cannot serve this layout and dtype: it takes f32 Q, an f16 paged cache and f32 output, is causal
 * only and returns no lse (see docs/kernels/attention.md for the decision and the row that calls it).
 * Invariant: key 0 is in tile 0 and visible to every query row, so each row's max is finite after it.
 */
#include "backend/cuda/cuk_mma.cuh"
#include "kernels/attention/attn_internal.h"

#define FA2_BN 64
#define FA2_NW 4 /* warps per CTA, 16 query rows each */
#define FA2_BM (16 * FA2_NW)

static __device__ __forceinline__ void fa2_cp16(void *smem, const void *gmem, bool ok)
{
    const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    const int n = ok ? 16 : 0; /* 0: zero-fill, read nothing */
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(gmem), "r"(n) : "memory");
}
static __device__ __forceinline__ void fa2_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> static __device__ __forceinline__ void fa2_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

template <int D> struct fa2_cfg {
    static constexpr size_t smem = (size_t)(FA2_BM * D + 4 * FA2_BN * D) * 2; /* Q, 2 x (K, V) */
};

template <int D>
__global__ void __launch_bounds__(FA2_NW * 32, 2)
    attn_fa2_fwd(const bf16 *__restrict__ Q, const bf16 *__restrict__ K, const bf16 *__restrict__ V,
                 bf16 *__restrict__ O, float *__restrict__ lse, int s, float scale2, int causal)
{
    constexpr int CH = D / 8, NB = FA2_BN / 8, DB = D / 8, NT = FA2_NW * 32;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Qs = (bf16 *)smem, *Ks = Qs + FA2_BM * D, *Vs = Ks + 2 * FA2_BN * D;
    const int qt = gridDim.x - 1 - blockIdx.x; /* heaviest causal tiles first */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int row0 = qt * FA2_BM;
    const int64_t base = (int64_t)blockIdx.y * s * D;
    const bf16 *q = Q + base, *k = K + base, *v = V + base;
    const int kv_len = causal ? min(s, row0 + FA2_BM) : s;

    for (int i = tid; i < FA2_BM * CH; i += NT) {
        const int r = i / CH, part = i % CH;
        const bool ok = row0 + r < s;
        fa2_cp16(Qs + cuk_sw<D>(r, part), q + (ok ? (int64_t)(row0 + r) * D + part * 8 : 0), ok);
    }
    auto load_kv = [&](int kt, int st) {
        bf16 *ks = Ks + st * FA2_BN * D, *vs = Vs + st * FA2_BN * D;
#pragma unroll
        for (int i = 0; i < FA2_BN * CH / NT; i++) {
            const int c = tid + NT * i, r = c / CH, part = c % CH, j = kt * FA2_BN + r;
            const bool ok = j < kv_len;
            const int64_t off = ok ? (int64_t)j * D + part * 8 : 0;
            fa2_cp16(ks + cuk_sw<D>(r, part), k + off, ok);
            fa2_cp16(vs + cuk_sw<D>(r, part), v + off, ok);
        }
        fa2_commit();
    };
    const int n_kt = (kv_len + FA2_BN - 1) / FA2_BN; /* >= 1: s >= 1 and row0 < s */
    load_kv(0, 0); /* the same group as Q */

    uint32_t qf[D / 16][4];
    float o[DB][4];
#pragma unroll
    for (int i = 0; i < DB; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
    const int wrow = row0 + warp * 16; /* first row of this warp */
    const int rp0 = wrow + (lane >> 2), rp1 = rp0 + 8;

    for (int kt = 0; kt < n_kt; kt++) {
        const int st = kt & 1;
        if (kt + 1 < n_kt) {
            load_kv(kt + 1, st ^ 1);
            fa2_wait<1>();
        } else {
            fa2_wait<0>();
        }
        __syncthreads();
        if (kt == 0) {
            const int r = warp * 16 + (lane & 15);
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) cuk_ldsm4(qf[kk], Qs + cuk_sw<D>(r, kk * 2 + (lane >> 4)));
        }
        const bf16 *ks = Ks + st * FA2_BN * D, *vs = Vs + st * FA2_BN * D;

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
                cuk_mma_bf16(sc[2 * nb2], qf[kk], b[0], b[1]);
                cuk_mma_bf16(sc[2 * nb2 + 1], qf[kk], b[2], b[3]);
            }
        }
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) sc[nb][e] *= scale2;
        const int kbase = kt * FA2_BN;
        if (kbase + FA2_BN > s || (causal && kbase + FA2_BN - 1 > wrow)) {
#pragma unroll
            for (int nb = 0; nb < NB; nb++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = kbase + nb * 8 + 2 * (lane & 3) + (e & 1), rp = e < 2 ? rp0 : rp1;
                    if (key >= s || (causal && key > rp)) sc[nb][e] = -INFINITY;
                }
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
        const float c0 = exp2f(m0 - ms0), c1 = exp2f(m1 - ms1);
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
        for (int kk = 0; kk < FA2_BN / 16; kk++) {
            float p[8];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                p[e] = exp2f(sc[2 * kk][e] - (e < 2 ? ms0 : ms1));
                p[4 + e] = exp2f(sc[2 * kk + 1][e] - (e < 2 ? ms0 : ms1));
            }
            l0 += p[0] + p[1] + p[4] + p[5];
            l1 += p[2] + p[3] + p[6] + p[7];
            const uint32_t pa[4] = { cuk_pack_bf16(p[0], p[1]), cuk_pack_bf16(p[2], p[3]), cuk_pack_bf16(p[4], p[5]),
                                     cuk_pack_bf16(p[6], p[7]) };
#pragma unroll
            for (int db2 = 0; db2 < DB / 2; db2++) {
                uint32_t b[4];
                const int r = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
                cuk_ldsm4_t(b, vs + cuk_sw<D>(r, db2 * 2 + (lane >> 4)));
                cuk_mma_bf16(o[2 * db2], pa, b[0], b[1]);
                cuk_mma_bf16(o[2 * db2 + 1], pa, b[2], b[3]);
            }
        }
        __syncthreads(); /* this stage is refilled by the next iteration's prefetch */
    }

    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float i0 = l0 > 0.f ? 1.f / l0 : 0.f, i1 = l1 > 0.f ? 1.f / l1 : 0.f;
    bf16 *out0 = O + base + (int64_t)rp0 * D + 2 * (lane & 3), *out1 = out0 + 8 * D;
#pragma unroll
    for (int i = 0; i < DB; i++) {
        if (rp0 < s) *(__nv_bfloat162 *)(out0 + i * 8) = __floats2bfloat162_rn(o[i][0] * i0, o[i][1] * i0);
        if (rp1 < s) *(__nv_bfloat162 *)(out1 + i * 8) = __floats2bfloat162_rn(o[i][2] * i1, o[i][3] * i1);
    }
    if (lse && (lane & 3) == 0) {
        float *lr = lse + (int64_t)blockIdx.y * s;
        if (rp0 < s) lr[rp0] = (m0 + log2f(l0)) * ATTN_LN2;
        if (rp1 < s) lr[rp1] = (m1 + log2f(l1)) * ATTN_LN2;
    }
}

template <int D> static int fa2_launch(cudaStream_t st, const attn_args *a)
{
    const size_t sm = fa2_cfg<D>::smem;
    cudaError_t e = cudaFuncSetAttribute(attn_fa2_fwd<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    if (e != cudaSuccess) return (int)e;
    dim3 grid((unsigned)attn_cdiv(a->s, FA2_BM), (unsigned)(a->b * a->h));
    attn_fa2_fwd<D><<<grid, FA2_NW * 32, sm, st>>>((const bf16 *)a->q, (const bf16 *)a->k, (const bf16 *)a->v,
                                                   (bf16 *)a->o, a->lse, a->s, a->scale * ATTN_LOG2E, a->causal);
    return (int)cudaGetLastError();
}

int attn_v3_run(void *stream, const attn_args *a)
{
    if (!attn_args_ok(a, 0, NULL)) return (int)cudaErrorInvalidValue;
    return a->d == 64 ? fa2_launch<64>((cudaStream_t)stream, a) : fa2_launch<128>((cudaStream_t)stream, a);
}
