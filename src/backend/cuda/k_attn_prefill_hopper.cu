/* k_attn_prefill_hopper.cu - the Hopper (sm_90a) prefill attention over the paged f16 KV cache: the
 * attention ladder's v4e_fa3_lazy (src/kernels/attention/attn_fa3.cu: wgmma + TMA, no producer
 * warpgroup, CTAs in L2-sized head sections, lazy rescale) on the backend's contract (cuk_attn_args:
 * f32 q and out, varlen batches, GQA, causal with the query rows the LAST q_len positions of their
 * sequence). Same arithmetic as the FA2 kernel (k_attn_prefill.cu): Q rounded to f16 after scaling
 * by scale * log2 e, S and O accumulated in fp32, P rounded to f16 for P V.
 *
 * Verified on the H200 2026-12-04 (test_cuda_attention's test_prefill_fa3 and the older prefill
 * cases pass at 3e-3; compute-sanitizer memcheck and racecheck clean on the ladder's v3_backend).
 * Causal, H200, FA2 -> this kernel in the same runs:
 *   ladder v3_backend b4 h32 s4096 d128   194 TFLOP/s -> 304   (the ladder's v4e, contiguous cache: 537)
 *   ladder v3_backend b4 h16 s4096 d64    181         -> 221
 *   ladder v3_backend b2 h16 s1024 d128   342         -> 455
 *   bench_cuda_attention 1 x 4096, 32/8 heads, block 16   214 -> 269
 *   bench_cuda_attention 8 x 512                          132 -> 117   (slower: short runs)
 * So k_attention.cu picks it for batches with a query run >= 1024 rows. Llama-3-8B prefill of 512
 * tokens (aiinfra bench, AIINFRA_PREFILL forced) 40,742 -> 40,843 tok/s: attention is small there.
 *
 * Invariants:
 *  1. A CTA is 2 consumer warpgroups (256 threads) of HP_BM = 128 query rows of one query head;
 *     warpgroup cw owns rows 64 cw .. 64 cw + 63, warp w of it 16 of those. Thread 0's warp issues
 *     every TMA copy (v4c's design: no producer warpgroup, so ptxas may use 255 registers and the
 *     key tile is 128 at d = 128 too).
 *  2. K and V arrive by 2D TMA over the cache viewed as a (rows = slots, n_head_kv * d) f16 matrix: a
 *     box is (64 columns, R = min(block_size, 128) rows), i.e. one 128-byte-swizzled piece of one
 *     cache block of one kv head; a 128-key tile is 128 / R boxes per 64 columns, the block of each
 *     looked up in the block table (lane i of the issuing warp reads box i's entry). block_size must
 *     be >= 8 so every box starts on a 1024-byte swizzle atom. The tensor map's row count is not
 *     known to the host (the cache size is not in the arguments): it is declared INT32_MAX rows and
 *     every row actually read is a slot of a block the table gives the sequence.
 *  3. Only boxes holding a key < kv_len (this CTA's last visible key + 1) are loaded. Rows of the
 *     last tile at or past kv_len may hold stale shared memory or cache rows past seq_len (NaN in the
 *     test): their scores are masked to -inf (assignment, not arithmetic) and, before the last P V,
 *     every consumer thread zeroes its share of those V rows in shared memory (then
 *     fence.proxy.async and a CTA barrier), so 0 * NaN never reaches O. Unlike the FA2 kernel this
 *     reads (but never uses) cache rows past seq_len inside the sequence's last block.
 *  4. Row i of sequence s sits at position seq_len[s] - q_len[s] + i and sees keys 0 .. position;
 *     every row sees key 0 in tile 0, so its running max is finite after it.
 *  5. Launch shapes depend only on by-value fields (graph capture): the grid is n_qt(max_q_len) x
 *     n_seq x n_head CTAs in a 1D order, and a CTA whose tile starts past its sequence's q_len exits.
 *
 * CTA order (v4d): units u = s * n_head + h (the heads of a GQA group adjacent, so they share K/V in
 * L2) in sections of hsec units whose K and V (4 max_seq_len d bytes per kv head, shared by the
 * group's query heads) fit half the L2; within a section the query tiles heaviest (last) first, the
 * section's units fastest.
 *
 * Pipeline per warpgroup, as v4e: S_j = Q K_j^T (wgmma, both operands in shared memory) and
 * O += P_{j-1} V_{j-1} (wgmma, P from registers) issued back to back, the softmax of S_j (lazy
 * rescale, attn_fa3_common.cuh) under the P V; K and V have separate "full" mbarriers, a stage is
 * refilled once the 8 consumer warps have arrived on its "empty" barrier.
 */
#include <limits.h>

#include "backend/cuda/k_attn.h"
#include "backend/cuda/cuk_launch.h"
#include "kernels/attention/attn_fa3_common.cuh"
#include "kernels/attention/attn_wgmma.cuh"
#include "kernels/gemm/gemm_hopper.cuh"

#define HP_BM 128      /* query rows per CTA: 64 per consumer warpgroup */
#define HP_BN 128      /* keys per tile */
#define HP_THREADS 256 /* two consumer warpgroups */
#define HP_MIN_BS 8    /* smallest block size: a box of 8 rows x 128 bytes is one swizzle atom */

template <int D> struct hp_cfg {
    static constexpr int NS = D == 128 ? 3 : 4;        /* K/V stages */
    static constexpr int KB = D / 64;                  /* 64-column boxes per row */
    static constexpr int Q_BYTES = HP_BM * D * 2;      /* KB boxes of HP_BM rows x 128 bytes */
    static constexpr int KV_BYTES = HP_BN * D * 2;     /* one K (or V) tile: KB boxes of HP_BN rows */
    static constexpr int BAR_OFF = Q_BYTES + 2 * NS * KV_BYTES;
    static constexpr int SMEM = BAR_OFF + 3 * NS * 8 + 1024; /* + barriers + alignment slack */
};

template <int D>
__global__ void __launch_bounds__(HP_THREADS, 1)
    kattn_fa3(const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv, const cuk_attn_args a,
              int n_qt, int hsec, int box_rows)
{
    typedef hp_cfg<D> C;
    constexpr int NS = C::NS, BN = HP_BN, KB = C::KB;
    cuk_pdl_wait();
    extern __shared__ unsigned char hp_raw[];
    unsigned char *smem = smem_base(hp_raw);
    unsigned char *Qs = smem, *Ks = smem + C::Q_BYTES, *Vs = Ks + NS * C::KV_BYTES;
    uint64_t *full_k = (uint64_t *)(smem + C::BAR_OFF), *full_v = full_k + NS, *empty = full_v + NS;
    const int tid = threadIdx.x, cw = tid / 128, wtid = tid & 127, warp = wtid >> 5, lane = tid & 31;

    /* tile order: sections of hsec (sequence, head) units, heaviest query tile first in each */
    const int units = a.n_seq * a.n_head;
    const int sec0 = (int)(blockIdx.x / ((unsigned)hsec * n_qt)) * hsec, gs = min(hsec, units - sec0);
    const int loc = (int)blockIdx.x - sec0 * n_qt;
    const int qt = n_qt - 1 - loc / gs, u = sec0 + loc % gs;
    const int s = u / a.n_head, h = u - s * a.n_head;
    const int q0 = a.q_start[s], q_len = a.q_start[s + 1] - q0;
    const int row0 = qt * HP_BM;
    if (row0 >= q_len) return;
    const int seq_len = a.seq_len[s], pos0 = seq_len - q_len;
    const int kv_len = min(seq_len, pos0 + min(row0 + HP_BM, q_len)); /* keys this CTA needs */
    const size_t ostride = (size_t)a.n_head * D;
    if (kv_len <= 0) { /* no visible key (seq_len < q_len): zeros, as the FA2 kernel writes */
        for (int i = tid; i < HP_BM * D; i += HP_THREADS) {
            const int r = row0 + i / D;
            if (r < q_len) a.out[(size_t)(q0 + r) * ostride + (size_t)h * D + i % D] = 0.f;
        }
        return;
    }
    const int n_kt = (kv_len + BN - 1) / BN;
    const int kvh = h / (a.n_head / a.n_head_kv);

    if (tid == 0) {
        for (int i = 0; i < NS; i++) mbar_init(&full_k[i], 1), mbar_init(&full_v[i], 1), mbar_init(&empty[i], 8);
        asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;\n" ::: "memory");
    }
    __syncthreads();

    /* K / V tile j into stage j % NS once it is free (the first round passes at once); called by all
     * 32 lanes of warp 0: lane i looks up box i's block, lane 0 issues the copies */
    const int32_t *bt = a.block_tables + (size_t)s * a.max_blocks;
    const int bsh = __ffs(a.block_size) - 1, rsh = __ffs(box_rows) - 1, bmask = a.block_size - 1;
    auto load_kv = [&](int j) {
        const int st = j % NS, kb = j * BN;
        const int nbox = (min(BN, kv_len - kb) + box_rows - 1) >> rsh; /* boxes with a key < kv_len */
        int row = 0;
        if (lane < nbox) {
            const int key = kb + (lane << rsh);
            row = __ldg(bt + (key >> bsh)) * a.block_size + (key & bmask);
        }
        mbar_wait(&empty[st], ((j / NS) & 1) ^ 1);
        unsigned char *k = Ks + st * C::KV_BYTES, *v = Vs + st * C::KV_BYTES;
        if (lane == 0) {
            const unsigned bytes = (unsigned)(nbox * box_rows * 128 * KB);
            mbar_expect_tx(&full_k[st], bytes);
            mbar_expect_tx(&full_v[st], bytes);
        }
        for (int i = 0; i < nbox; i++) {
            const int r = __shfl_sync(0xffffffffu, row, i);
            if (lane == 0) {
#pragma unroll
                for (int c = 0; c < KB; c++)
                    tma_load(k + c * BN * 128 + i * box_rows * 128, &tk, kvh * D + c * 64, r, &full_k[st]);
#pragma unroll
                for (int c = 0; c < KB; c++)
                    tma_load(v + c * BN * 128 + i * box_rows * 128, &tv, kvh * D + c * 64, r, &full_v[st]);
            }
        }
    };
    if (tid < 32)
        for (int j = 0; j < min(NS, n_kt); j++) load_kv(j);

    /* Q: this warpgroup's 64 rows, f32 * scale * log2 e -> f16, stored as the TMA would (box c / 64
     * of HP_BM rows x 128 bytes, 16-byte chunk k of row r at k ^ (r % 8)); rows past q_len are 0 */
    const float qscale = a.scale * FA3_LOG2E;
    for (int i = wtid; i < 64 * D / 4; i += 128) {
        const int r = cw * 64 + i / (D / 4), col = (i % (D / 4)) * 4;
        float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
        if (row0 + r < q_len) x = *(const float4 *)(a.q + (size_t)(q0 + row0 + r) * a.q_stride + (size_t)h * D + col);
        uint2 w;
        w.x = fa3_pack<true>(x.x * qscale, x.y * qscale);
        w.y = fa3_pack<true>(x.z * qscale, x.w * qscale);
        *(uint2 *)(Qs + (col >> 6) * HP_BM * 128 + r * 128 + ((((col & 63) >> 3) ^ (r & 7)) << 4) + (col & 7) * 2) = w;
    }
    /* generic-proxy writes read by wgmma (async proxy): fence in each writer, then the group's barrier */
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    if (cw == 0) asm volatile("bar.sync 1, 128;\n" ::: "memory"); /* immediate ids: ptxas reserves */
    else asm volatile("bar.sync 2, 128;\n" ::: "memory");         /* all 16 for a register id */

    const int wpos = pos0 + row0 + cw * 64 + warp * 16; /* position of the warp's first row */
    const int gpos0 = wpos + (lane >> 2);               /* this thread's rows: gpos0, gpos0 + 8 */
    const uint32_t q_addr = sm(Qs) + cw * 64 * 128;
    auto need_mask = [&](int j) {
        const int kb = j * BN;
        return kb + BN > seq_len || kb + BN - 1 > wpos;
    };
    /* S = Q K_j^T: D/16 k-steps; step kk is in box kk/4 at byte 32 (kk%4) of each 128-byte row */
    auto issue_s = [&](float *sacc, int st) {
        const uint64_t qd = gdesc(q_addr, 16, 1024), kd = gdesc(sm(Ks + st * C::KV_BYTES), 16, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            const uint64_t qa = qd + (((kk >> 2) * HP_BM * 128 + (kk & 3) * 32) >> 4),
                           kbd = kd + (((kk >> 2) * BN * 128 + (kk & 3) * 32) >> 4);
            fa3_ss_f16_n128(sacc, qa, kbd, kk > 0);
        }
        wgmma_commit();
    };
    /* O += P V_j: BN/16 k-steps of 16 keys (16 rows x 128 bytes); the D columns are KB boxes of BN
     * rows (LBO = BN * 128 bytes apart) */
    auto issue_pv = [&](float *oacc, uint32_t (*pf)[4], int st) {
        const uint64_t vd = gdesc(sm(Vs + st * C::KV_BYTES), BN * 128, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) {
            const uint64_t vb = vd + ((kk * 2048) >> 4);
            if (D == 128) fa3_rs_f16_n128(oacc, pf[kk], vb, 1);
            else fa3_rs_f16_n64(oacc, pf[kk], vb, 1);
        }
        wgmma_commit();
    };

    float o[D / 2], sacc[BN / 2], m[2] = { -INFINITY, -INFINITY }, l[2] = { 0.f, 0.f }, c[2];
    uint32_t p[BN / 16][4];
#pragma unroll
    for (int i = 0; i < D / 2; i++) o[i] = 0.f;
#pragma unroll
    for (int i = 0; i < BN / 2; i++) sacc[i] = 0.f;

    mbar_wait(&full_k[0], 0);
    issue_s(sacc, 0);
    wgmma_wait<0>();
    fa3_pin<BN / 2>(sacc);
    fa3_softmax<BN>(sacc, m, l, c, 1.f, 0, gpos0, seq_len, 1, need_mask(0), true);
    fa3_pack_p<BN, true>(sacc, p);

    for (int j = 1; j < n_kt; j++) {
        const int st = j % NS, pst = (j - 1) % NS;
        mbar_wait(&full_k[st], (j / NS) & 1);
        /* every non-wgmma write to the registers both wgmmas use is pinned before the first fence */
        fa3_pin<BN / 2>(sacc);
        fa3_pin<D / 2>(o);
        fa3_pin<BN / 4>(&p[0][0]);
        mbar_wait(&full_v[pst], ((j - 1) / NS) & 1);
        issue_s(sacc, st);
        issue_pv(o, p, pst);
        wgmma_wait<1>(); /* S_j done; P_{j-1} V_{j-1} may still run */
        fa3_pin<BN / 2>(sacc);
        fa3_softmax<BN>(sacc, m, l, c, 1.f, j * BN, gpos0, seq_len, 1, need_mask(j), true);
        wgmma_wait<0>();
        fa3_pin<D / 2>(o);
        fa3_pin<BN / 4>(&p[0][0]); /* the in-flight wgmma read p until here */
        if (lane == 0) mbar_arrive(&empty[pst]);
        if (tid < 32 && j - 1 + NS < n_kt) load_kv(j - 1 + NS); /* refill once both groups released it */
        fa3_rescale_o<D / 2>(o, c, true);
        fa3_pack_p<BN, true>(sacc, p);
    }
    {
        const int pst = (n_kt - 1) % NS, valid = kv_len - (n_kt - 1) * BN; /* CTA-uniform */
        mbar_wait(&full_v[pst], ((n_kt - 1) / NS) & 1);
        if (valid < BN) { /* invariant 3: V rows valid .. BN - 1 of the last tile -> 0 */
            unsigned char *v = Vs + pst * C::KV_BYTES + valid * 128;
            const int n16 = (BN - valid) * 8; /* 16-byte pieces per box */
            for (int i = tid; i < KB * n16; i += HP_THREADS)
                *(uint4 *)(v + (i / n16) * BN * 128 + (i % n16) * 16) = make_uint4(0u, 0u, 0u, 0u);
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            __syncthreads();
        }
        fa3_pin<D / 2>(o);
        fa3_pin<BN / 4>(&p[0][0]);
        issue_pv(o, p, pst);
        wgmma_wait<0>();
        fa3_pin<D / 2>(o);
        fa3_pin<BN / 4>(&p[0][0]);
    }

#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
    const float i0 = l[0] > 0.f ? 1.f / l[0] : 0.f, i1 = l[1] > 0.f ? 1.f / l[1] : 0.f;
    const int r0 = row0 + cw * 64 + warp * 16 + (lane >> 2);
    if (r0 < q_len) {
        float *out0 = a.out + (size_t)(q0 + r0) * ostride + (size_t)h * D + 2 * (lane & 3);
#pragma unroll
        for (int i = 0; i < D / 8; i++) *(float2 *)(out0 + i * 8) = make_float2(o[4 * i] * i0, o[4 * i + 1] * i0);
    }
    if (r0 + 8 < q_len) {
        float *out1 = a.out + (size_t)(q0 + r0 + 8) * ostride + (size_t)h * D + 2 * (lane & 3);
#pragma unroll
        for (int i = 0; i < D / 8; i++) *(float2 *)(out1 + i * 8) = make_float2(o[4 * i + 2] * i1, o[4 * i + 3] * i1);
    }
}

// --- host ----------------------------------------------------------------------------------------

/* The paged K or V cache at base as a (INT32_MAX rows, cols) matrix of eb-byte elements, for 2D TMA
 * boxes of (swb bytes of columns, box_rows rows) with a swb-byte swizzle (128 or 64) and L2 promotion of
 * row_bytes (64 / 128 / 256). The cache size is not in cuk_attn_args: every row a kernel reads is a slot
 * of a block the table gives its sequence. Used here (f16, 128-byte boxes) and by the decode kernel. */
cudaError_t kattn_cache_tmap(CUtensorMap *m, const void *base, int eb, int cols, int swb, int box_rows, int row_bytes)
{
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q;
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess) return e;
    if (q != cudaDriverEntryPointSuccess || !fn) return cudaErrorNotSupported;
    const cuuint64_t dims[2] = { (cuuint64_t)cols, (cuuint64_t)INT_MAX };
    const cuuint64_t strides[1] = { (cuuint64_t)cols * eb };
    const cuuint32_t box[2] = { (cuuint32_t)(swb / eb), (cuuint32_t)box_rows }, estr[2] = { 1, 1 };
    const CUtensorMapL2promotion l2 = row_bytes >= 256   ? CU_TENSOR_MAP_L2_PROMOTION_L2_256B
                                      : row_bytes >= 128 ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B
                                                         : CU_TENSOR_MAP_L2_PROMOTION_L2_64B;
    const CUtensorMapDataType ty = eb == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    const CUtensorMapSwizzle sw = swb == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B;
    CUresult r = ((PFN_cuTensorMapEncodeTiled_v12000)fn)(m, ty, 2, (void *)base, dims, strides, box, estr,
                                                          CU_TENSOR_MAP_INTERLEAVE_NONE, sw, l2,
                                                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorNotSupported;
}

int kattn_prefill_hopper_supported(const cuk_attn_args *a)
{
    /* f16 only: an fp8 cache runs the FA2 kernel (it widens landed fp8 tiles; this one's TMA boxes
     * feed wgmma straight from the swizzled f16 layout) */
    if (!kattn_prefill_supported(a) || a->kv_type != DTYPE_F16 || a->block_size < HP_MIN_BS) return 0;
    const int64_t units = (int64_t)a->n_seq * a->n_head, n_qt = (a->max_q_len + HP_BM - 1) / HP_BM;
    if (units * n_qt > INT_MAX) return 0;
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev)) {
        (void)cudaGetLastError();
        return 0;
    }
    return major == 9 && minor == 0; /* built for sm_90a only */
}

/* Units (sequence, query head) per section: as many as keep the K and V they read (f16, 4
 * max_seq_len d bytes per kv head, shared by the group's query heads) within half the L2. */
static int hp_hsec(const cuk_attn_args *a, cudaError_t *e)
{
    const int units = a->n_seq * a->n_head, group = a->n_head / a->n_head_kv;
    int dev = 0, l2 = 0;
    *e = cudaGetDevice(&dev);
    if (*e == cudaSuccess) *e = cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev);
    const int64_t g = (int64_t)l2 / 2 / ((int64_t)4 * a->max_seq_len * a->head_dim) * group;
    return (int)(g < 1 ? 1 : g > units ? units : g);
}

template <int D> static cudaError_t hp_launch(cudaStream_t st, const cuk_attn_args *a)
{
    typedef hp_cfg<D> C;
    const int box_rows = a->block_size < HP_BN ? a->block_size : HP_BN;
    const int cols = a->n_head_kv * D, n_qt = (a->max_q_len + HP_BM - 1) / HP_BM;
    CUtensorMap tk, tv;
    cudaError_t e = kattn_cache_tmap(&tk, a->k_cache, 2, cols, 128, box_rows, 256);
    if (e == cudaSuccess) e = kattn_cache_tmap(&tv, a->v_cache, 2, cols, 128, box_rows, 256);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(kattn_fa3<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
    const int hsec = e == cudaSuccess ? hp_hsec(a, &e) : 1;
    if (e != cudaSuccess) return e;
    const unsigned grid = (unsigned)(n_qt * a->n_seq * a->n_head);
    e = cuk_launch(kattn_fa3<D>, dim3(grid), dim3(HP_THREADS), (size_t)C::SMEM, st, tk, tv, *a, n_qt, hsec, box_rows);
    return e != cudaSuccess ? e : cudaGetLastError();
}

cudaError_t kattn_prefill_hopper_launch(cudaStream_t st, const cuk_attn_args *a)
{
    return a->head_dim == 64 ? hp_launch<64>(st, a) : hp_launch<128>(st, a);
}
