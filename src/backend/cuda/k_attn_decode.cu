/* k_attn_decode.cu - split-KV ("flash-decoding") attention for q_len = 1, f16 or fp8 e4m3 cache,
 * d in {64, 128}, as ONE kernel on tensor cores: the split partials are merged in-kernel by the last CTA
 * to finish.
 *
 * fp8 e4m3 cache (template F8): the mma B fragments are widened from the landed fp8 bytes in registers
 * by cvt.rn.f16x2.e4m3x2 (exact). Measured on the H200 (2026-12-04, bench_cuda_attention: Llama-3-8B
 * heads 32/8, d 128, block 16, copy 4,202 GB/s; "x f16" = the f16 kernel's time / this one's):
 *   1 x 32768  39.0 us  1.11x     8 x 8192    57.2 us  1.28x     8 x 1024  14.3 us  1.06x
 *   64 x 1024  54.8 us  1.37x     256 x 1024  194.7 us  1.40x (2,757 GB/s of fp8 bytes, 65.6% of copy)
 * Model (Llama-3-8B bf16, `aiinfra bench`, ms per step, fp8 vs f16 cache): batch 256 x 1k 14.32 vs 16.94,
 * batch 64 6.63 vs 7.28, batch 8 6.034 vs 6.015 (even). Serving (1000 requests 512/256, 256 concurrent):
 * 9,693-9,720 output tok/s vs 9,045. Passes test_cuda_attention at the f16 tolerance; compute-sanitizer
 * memcheck and racecheck clean on fp8 decode cases.
 *  Measured in the same run and dropped (x f16 at 1 x 32k / 8 x 8k / 8 x 1k / 64 x 1k / 256 x 1k):
 *  "reg", this path widening by bit moves (sign to bit 15, magnitude << 7: values times 2^-8),
 *  1.06/1.21/1.04/1.29/1.32x, step b256 14.86 ms, b64 6.72, b8 6.059: slower than cvt at every shape.
 *  It spent 7 integer ops per 4 codes (224 per tile at d 128) on pipes the conversion unit does not
 *  share, against cvt's 1 PRMT + 2 F2FP (96): more issue slots (static SASS of the tile loop at d 128:
 *  reg 557 instructions, cvt 453, f16 337), and the narrower conversion pipe was not the limit.
 *  "-deep" (one more stage: d 128 72 KB per CTA, 3 CTAs per SM): reg-deep 1.05/1.13/0.95/0.95/1.16x,
 *  cvt-deep 1.09/1.19/0.98/0.99/1.22x (b256 15.57 / 15.06 ms): warps per SM, not bytes in flight, set
 *  the pace, as for f16 (round 5). "widen", the first version (rows landed unpadded, each warp widened
 *  its tile pair into a padded f16 buffer in shared memory for the f16 code; 82 KB, 2 CTAs per SM):
 *  0.90/0.86/0.91/0.89/0.86x, step b256 17.87 ms, slower than f16: 16 LDS.64 + 64 cvt + 16 STS.128 per
 *  lane and tile added to warps whose per-warp work already set the pace.
 *  Layout: rows land padded to D + 16 bytes (conflict-free ldmatrix phases at 144 / 80 byte strides);
 *  ldmatrix (b16 view) reads 8 keys x 16 bytes per matrix, so one x4 covers two 16-dim chunks: 8 per
 *  tile at d 128 instead of 16. K (non-transposed): lane (g, j) = (lane / 4, lane % 4) gets bytes
 *  4j .. 4j + 3 of key g in the chunk; codes (0, 2) widened are b0, (1, 3) b1, so the head dim is
 *  permuted inside each chunk (logical k 2j, 2j + 1 <-> dims 4j, 4j + 2; k 2j + 8, 2j + 9 <-> 4j + 1,
 *  4j + 3) and Q's A fragments are loaded with the same permutation (Q K^T sums over the whole chunk
 *  either way). V (transposed): lane (g, j) gets dims 2g, 2g + 1 of keys 2j, 2j + 1, so codes (0, 2)
 *  are b0 of the n-tile whose column g is dim 16c + 2g and codes (1, 3) that of dim 16c + 2g + 1: the O
 *  accumulators hold dims permuted (o[2c + p] column g = dim 16c + 2g + p), and the warp merge stores
 *  them back in dim order (one float4 per chunk and row). P and the softmax are the f16 path's.
 *  Widening: cuk_f8x4_to_f16x4_cvt, 1 PRMT + 2 F2FP per 4 codes.
 *  No conversion buffer: (4 warps, 3 stages) is 54 KB per CTA at d 128 (40 KB at d 64), 4 CTAs (16
 *  warps) per SM at 128 registers a thread, twice the f16 kernel's warps. To fit 128 registers without
 *  spills, Q's A fragments live in shared memory (the row pads of the ring: 4 KB at d 128) and are
 *  re-read per tile (8 LDS.128), instead of 32 registers. k_scale is folded into the score scale,
 *  v_scale into the final 1 / L.
 *
 * 2D TMA variant (TM, kattn_decode_tma: block_size >= 8, the default; AIINFRA_DEC_TMA=0 forces the
 * bulk-copy kernel; docs/kernels/decode_attention.md): each K (V) tile of a warp lands by one
 * cp.async.bulk.tensor.2d box per cache block it spans (box = min(block_size, 16) rows x one swizzle
 * span of one kv head's row; f16 d 128: two boxes side by side) instead of 32 row copies per tile.
 * Rows are unpadded and swizzled (128B; 64B for fp8 d 64's 64-byte rows) so ldmatrix stays
 * conflict-free: chunk c of row r at c ^ (r & 7) (64B: c ^ ((r >> 1) & 3)), the ring on a 1024-byte
 * boundary. Boxes load whole blocks, so rows past k_end land too: their scores are -inf as before and
 * their V rows are zeroed after the tile has landed. fp8: Q's A fragments move from the (gone) row
 * pads to an area after the ring. Tensor maps: the caches as (INT32_MAX, n_kv * d) matrices, encoded
 * per call, __grid_constant__ parameters.
 * Measured (H200, 2026-12-04, bench_cuda_attention: Llama-3-8B heads 32/8, d 128, block 16, copy
 * 4,235 GB/s; us, bulk -> TMA):
 *   f16  1 x 32k 43.5 -> 43.2 (73.3% of copy), 8 x 8k 73.8 -> 75.6 (83.8%), 8 x 1k 15.1 -> 13.0 (61.1%),
 *        64 x 1k 75.1 -> 73.2 (86.6%), 256 x 1k 272.8 -> 265.0 (95.7%)
 *   fp8  1 x 32k 39.4 -> 32.7 (48.5% in fp8 bytes), 8 x 8k 56.7 -> 43.8 (72.3%), 8 x 1k 14.2 -> 13.8,
 *        64 x 1k 54.7 -> 41.1 (77.1%), 256 x 1k 194.4 -> 140.0 (90.5%; 1.89x the f16 bulk kernel)
 * So the per-row copies, not HBM, capped the fp8 kernel: one 128-byte copy per key row and K/V was
 * ~23 G copy operations/s. Llama-3-8B bf16 batch 256 x 1k, ms per step (bulk -> TMA): f16 KV 17.08 ->
 * 16.50, fp8 14.61 -> 12.71 (20,166 tok/s); batch 64: f16 7.23 -> 7.23, fp8 6.61 -> 6.11. Serving
 * (1,000 requests 512 / 256 at 256 concurrent): fp8 KV 10,162 output tok/s, f16 9,278.
 *
 * Grid (split, kv head, sequence), 128 threads (4 warps). A CTA serves ALL the query heads of its
 * GQA group (group = n_head / n_head_kv <= 16), so each K/V byte is read from memory once per
 * group. Its split is keys [split * chunk, +chunk) of the sequence; CTAs whose split starts at or
 * beyond seq_len exit (the grid comes from max_seq_len).
 *
 * Measured (2026-12-04, H200, second session, copy ceiling 4,217 GB/s, `aiinfra kernels bench
 * decode`: Llama-3-8B heads 32/8, d 128, f16 KV, 16-token blocks in random order, L2 evicted by a
 * read pass before each call; first session's round 3 in brackets):
 *   b1 x 1024     8.5 us    495 GB/s  11.7%  (8.5 us, 11.7%: latency-bound)
 *   b1 x 8192    15.8 us  2,129 GB/s  50.5%  (15.9 us, 49.9%)
 *   b1 x 32768   43.3 us  3,098 GB/s  73.5%  (43.0 us, 73.7%)
 *   b8 x 1024    15.0 us  2,258 GB/s  53.5%  (new shape)
 *   b8 x 8192    74.3 us  3,616 GB/s  85.7%  (74.3 us, 85.5%)
 *   b64 x 2048  136.0 us  3,962 GB/s  94.0%  (137.7 us, 92.6%)
 * Error vs a double reference 4e-4 .. 6e-4 of the row's max |o| (bound 5e-3). In the model (bf16
 * Llama-3-8B, CUDA graphs with PDL, ms per step): batch 8 x 1k 6.69 -> 6.00 (late PDL trigger, 6),
 * batch 1 x 640 4.221 -> 4.143 (copies before the PDL wait, 6).
 * Round 5 (same day, copy 4,269 GB/s: 1 x 32k 44.2-44.6 us = 70.5-71.2%): refilling a stage right
 * after its tile is computed, splitting the S mma chain, and (4, 2) rings at 3 CTAs/SM (12 warps per
 * SM) were all within 0.4 us at 1 x 32k (3 CTAs/SM: 64 x 2k 167 vs 139 us) and were dropped. Nsight
 * Compute at 1 x 32k: 43.2 us on the GPU, DRAM 65.8% of peak, SMs active 82% of the time on average
 * with an 18% / 13% spread below / above: the equal static splits finish at different times. The
 * lead to 85% is balancing work across SMs (docs/kernels/decode_attention.md, round 5).
 *
 * Design (round 3; round 2 = the same MMA core fed by 16-byte cp.async, 51.2 us = 62% at 1 x 32k):
 *  1. Tensor cores. The group is the M dimension of mma.sync m16n8k16 (heads padded to 16 rows,
 *     padding rows have q = 0): per 16-key tile a warp issues 16 MMAs for S = Q K^T (K through
 *     non-transposed ldmatrix: the col-major B fragment), 16 for O += P V (V through
 *     ldmatrix.trans, P repacked from the S accumulators as the A fragment, as in FA2), 2 x D/16
 *     ldmatrix.x4 and ~70 softmax/rescale instructions. The 16-row padding wastes tensor-core work
 *     (4x at G = 4), which is free: ~65 TFLOP/s at full bandwidth. No f16->f32 conversion of K, V.
 *  2. Bulk (TMA, non-tensor) copies. A paged row of one kv head (D * 2 = 256 contiguous bytes at
 *     d 128) is one cp.async.bulk completing on the stage's mbarrier: 32 copies per 16-key tile
 *     (lane l < 16 the K row of key l, lane 16 + l its V row). A read-only microbenchmark of
 *     exactly this access pattern (random 16-token blocks, 4 warps x 3 stages, 2 CTAs per SM)
 *     streamed 128 MB at 3,972 GB/s with bulk copies and at 2,895 GB/s with the 16-byte cp.async
 *     the round-2 kernel used (5 stages per warp: 3,080): the per-thread copies, not the scattered
 *     layout (sequential blocks: +3%), capped the kernel. Bulk copies cannot swizzle, so smem rows
 *     are padded to D + 8 halves: the 8 rows of an ldmatrix phase then fall in distinct banks.
 *  3. Bytes in flight: each warp owns an NS-stage ring and keeps NS - 1 tiles loading while it
 *     computes one. d 128: NS = 3, 102 KB per CTA, 2 CTAs (8 warps) per SM, 128 KB in flight per
 *     SM; d 64: NS = 4, 72 KB per CTA, 3 CTAs per SM.
 *  4. Short dependent chains at small contexts: the block-table entries of the first NS - 1 tiles
 *     are loaded speculatively (any key below max_seq_len is inside the table) in the same round
 *     trip as seq_len, before the PDL wait (they are host-uploaded: that round trip overlaps the
 *     previous kernel's tail), q is loaded after the first copies are issued, splits go down to 64 keys
 *     (one tile per warp) so 1 x 1k spreads over 128 CTAs, and the last-CTA merge is one pass (a
 *     thread loads (m, l, its float4 column) of 16 splits at once): b1 x 1k went from 11.4 to 8.2 us.
 *  5. Q is rounded to f16 once (A fragments in registers for the whole loop); scores are scaled by
 *     scale * log2 e in fp32 after the MMA and the softmax stays in fp32 in the log2 domain (ex2).
 *     P is rounded to f16 for P.V (as in FA2); the row sum l uses the fp32 P. Error vs a double
 *     reference: ~5e-4 of the row's max |o| (bench), inside the tests' 3e-3 / 5e-3 bounds.
 *  6. Neighbours in the step (round 4). Copies of every key the previous kernel did not write (all
 *     but the q_len newest) start before the PDL wait, so the first tiles load while rope + KV store
 *     runs (batch-1 step 4.221 -> 4.176 ms). And when the grid is one wave covering every SM, the
 *     next kernel may launch only once each CTA has published its partial (late trigger): with the
 *     trigger right after the wait, the batch-8 x 1k step took 6.69-6.76 ms, late 6.00-6.02, and no
 *     PDL at all 5.89 (dec_launch has the figures). The standalone benches cannot see either.
 *
 * Shared memory: per warp NS stages of (K tile, V tile), each [16 keys][D + 8] f16 (row padding: see
 * 2; fp8 [16][D + 16] bytes, Q's fragments in the row pads; TM: [16][D] swizzled, fp8 Q after the
 * ring), one mbarrier per stage (static). The end-of-kernel merge of the 4 warps reuses the stages.
 *
 * Finish (kept from round 1): the 4 warps merge in shared memory into one partial (m, l, o[D]) per
 * head; a sequence that ran in a single CTA (n_act = 1) writes its output directly. Otherwise each
 * CTA stores its partial in `work`, fences, and bumps the (sequence, kv head) counter; the CTA that
 * draws the last ticket merges the n_act partials in split order, 16 at a time (bitwise
 * reproducible whichever CTA is last) and resets the counter to 0.
 *
 * work layout: KATTN_DEC_COUNTERS uint32 counters (index s * n_head_kv + kvh; at a fixed place so
 * calls with any n_seq share them), then the partials (n_seq, n_head, n_split, D + 4) floats.
 *
 * Invariants: 1. a processed tile always holds a valid key (tiles start below k_end), so every
 * row's running max is finite after it (padding rows score 0); keys of a tile at or past k_end are
 * never used (TM loads those inside an issued box): their V rows are zeroed in shared memory (P = 0
 * must not meet a stale NaN), their scores are replaced by -inf (a stale K row is harmless); 2. every
 * tile issued is waited for, so no bulk copy is in flight when the stages are reused by the merge or
 * the CTA exits; 3. a warp with no tile keeps m = -inf, l = 0, o = 0 (weight 0 in the merges); 4.
 * exactly the n_act = ceil(seq_len / chunk) CTAs that run take a ticket, so the last ticket is
 * n_act - 1; a sequence with q_len 0 touches nothing; 5. control flow around ldmatrix / mma /
 * shuffles / mbarrier waits is warp-uniform;
 * 6. keys below seq_len - q_len were stored by kernels that completed before the previous kernel on
 * the stream passed its own PDL wait (every cuk_launch kernel waits before it triggers), so they
 * may be read before this kernel's wait; only the previous kernel's writes (the step's new rows,
 * q) are read after it.
 */
#include <climits>
#include <cstdlib>

#include <cuda.h>
#include <cudaTypedefs.h>

#include <type_traits>

#include "backend/cuda/k_attn.h"
#include "backend/cuda/cuk_fp8.cuh"
#include "backend/cuda/cuk_launch.h"
#include "backend/cuda/cuk_mma.cuh"

#define DEC_TK 16 /* keys per warp tile (the k extent of one P.V mma) */
#define DEC_M 16  /* mma rows: the group's query heads, zero-padded */
#define DEC_MB 16 /* splits per load batch of the last-CTA merge */
#define DEC_W 4        /* warps per CTA */
#define DEC_NS128 3    /* stages per warp at d 128, f16 cache */
#define DEC_NS64 4     /* stages per warp at d 64, f16 cache */
#define DEC_NS128_F8 3 /* fp8 cache, d 128: 54 KB per CTA, 4 CTAs (16 warps) per SM */
#define DEC_NS64_F8 4  /* fp8 cache, d 64: 40 KB per CTA, 4 CTAs per SM */

/* W warps per CTA, NS stages per warp: d 128 -> (4, 3) (102 KB per CTA, 2 CTAs/SM), d 64 -> (4, 4)
 * (72 KB, 3 CTAs/SM). Measured on 2026-12-04 and dropped: (4, 2) at 3 CTAs/SM (1 x 32k 46.2 us vs
 * 43.8, 64 x 2k 167.5 vs 138.7, b8 x 1k 15.3 vs 16.9), (2, 6) and (4, 6) (fewer warps per SM, more
 * tiles in flight: 20-45% slower at every shape): warps per SM, not bytes in flight, set the pace.
 * A tile row is padded from D to D + 8 halves (RS), an fp8 row from D to D + 16 bytes: the bulk copies
 * cannot swizzle, and a 16-byte pad puts the 8 rows an ldmatrix phase reads in distinct bank groups (row
 * strides 272 / 144 / 80 bytes are odd multiples of 16 at d 128 f16 / d 128 fp8 / d 64 fp8; d 64 f16 is
 * 144). fp8 cache (F8: B fragments widened in registers): (4, 3) at d 128 is 54 KB per CTA, 4 CTAs per
 * SM (MIN_CTAS caps there: 128 registers a thread), twice the f16 kernel's warps per SM. */
template <int D, int W, int NS_, bool F8 = false, bool TM = false> struct dec_cfg {
    static constexpr int NS = NS_;
    static constexpr int TH = W * 32;              /* threads per CTA */
    static constexpr int RS = D + 8;               /* halves per f16 smem row */
    static constexpr int EB = F8 ? 1 : 2;          /* bytes per cache element */
    /* TM (2D TMA variant): rows unpadded, a tile is NB column regions of DEC_TK rows x SWB bytes,
     * SWB the swizzle span (128, 64 for fp8 d 64: an fp8 d 64 row is 64 bytes) */
    static constexpr int SWB = TM && F8 && D == 64 ? 64 : 128;
    static constexpr int NB = TM ? D * EB / SWB : 1;
    static constexpr int RROW = TM ? D * EB : F8 ? D + 16 : RS * 2; /* bytes per row of a landing stage */
    static constexpr int RTILE = DEC_TK * RROW;    /* bytes of one landed K (or V) tile */
    static constexpr int RSTAGE = 2 * RTILE;       /* bytes of one landing stage */
    static constexpr size_t RING = (size_t)W * NS * RSTAGE; /* every warp's stages */
    /* TM + F8: Q's A fragments in their own area after the ring (D / 16 x 32 lanes x 16 bytes); TM:
     * 1024 bytes of slack to align the ring to the 128-byte swizzle's 1024-byte atom */
    static constexpr size_t QB = TM && F8 ? (size_t)D / 16 * 32 * 16 : 0;
    static constexpr size_t bytes = RING + QB + (TM ? 1024 : 0);
    static constexpr int MIN_CTAS_RAW = (int)((size_t)228 * 1024 / (bytes + 1024 + 256));
    static constexpr int MIN_CTAS = MIN_CTAS_RAW < 1 ? 1 : MIN_CTAS_RAW > 4 ? 4 : MIN_CTAS_RAW;
    /* the warp merge needs (W, DEC_M, D + 4) floats of the stages */
    static_assert((size_t)W * DEC_M * (D + 4) * 4 <= RING, "warp merge fits the stages");
    static_assert(bytes + 1024 <= 227 * 1024, "one CTA fits an SM");
    static_assert(RROW % 16 == 0, "bulk copies and ldmatrix rows need 16-byte aligned rows");
    static_assert(TM || !F8 || W * NS * 2 * DEC_TK >= D / 16 * 32, "the Q fragments fit the row pads");
    static_assert(!TM || (RTILE % 1024 == 0 && NB * SWB == D * EB), "TM tiles are whole swizzle atoms");
};

/* Bulk (TMA, non-tensor) copy of `bytes` contiguous bytes global -> shared, completing on mbarrier
 * `bar` (shared-window addresses; the CTA is its own cluster). */
static __device__ __forceinline__ void dec_bulk(uint32_t saddr, const void *gmem, uint32_t bytes, uint32_t bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(saddr), "l"(gmem), "r"(bytes), "r"(bar)
                 : "memory");
}
static __device__ __forceinline__ void dec_bar_init(uint32_t bar)
{
    asm volatile("mbarrier.init.shared.b64 [%0], 1;\n" ::"r"(bar) : "memory");
}
static __device__ __forceinline__ void dec_bar_expect(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void dec_bar_wait(uint32_t bar, uint32_t parity)
{
    asm volatile("{\n.reg .pred p;\nDEC_WAIT:\n"
                 "mbarrier.try_wait.parity.shared.b64 p, [%0], %1;\n@!p bra DEC_WAIT;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}

/* TM: 2D TMA (tensor) copy of the box at (c0 inner, c1 outer) of `map` into saddr, completing on bar */
static __device__ __forceinline__ void dec_tma(uint32_t saddr, const CUtensorMap *map, int c0, int c1, uint32_t bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
                 "%3}], [%4];\n" ::"r"(saddr),
                 "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
}
/* TM: the swizzle's XOR key of row r of a region of SWB-byte rows: 16-byte chunk c of row r lands at
 * chunk c ^ key (128B swizzle: byte bits 4-6 ^= bits 7-9, key r & 7; 64B: bits 4-5 ^= bits 7-8,
 * key (r >> 1) & 3), for a region aligned to the swizzle atom (1024 / 512 bytes) */
template <int SWB> static __device__ __forceinline__ int dec_swz(int r) { return ((r * SWB) >> 7) & (SWB / 16 - 1); }

/* The kernel body; kattn_decode_split (bulk row copies) and kattn_decode_tma (TM: 2D TMA boxes,
 * tk / tv the K / V cache's tensor maps) are its two entry points. */
template <int D, int W, int NS, bool F8, bool TM>
static __device__ __forceinline__ void dec_body(const cuk_attn_args &a, int n_split, int chunk, int early, int late,
                                                void *work, const CUtensorMap *tk, const CUtensorMap *tv)
{
    using cfg = dec_cfg<D, W, NS, F8, TM>;
    using KT = typename std::conditional<F8, uint8_t, __half>::type; /* a cache element */
    constexpr int RS = cfg::RS, TH = cfg::TH;
    constexpr int RROW = cfg::RROW, RTILE = cfg::RTILE, RSTAGE = cfg::RSTAGE;
    constexpr uint32_t RB = D * sizeof(KT); /* bytes of one paged row of one kv head */
    constexpr int KS = D / 16;                 /* k-steps of Q.K; also V ldmatrix.x4 per tile */
    constexpr int NT = D / 8;                  /* n-tiles of O */
    constexpr int SWB = cfg::SWB, CPR = SWB / 16, NB = cfg::NB; /* TM: swizzle span, its chunks, regions */
    extern __shared__ __align__(128) unsigned char dec_smem[];
    /* TM: the ring starts on a 1024-byte boundary (the swizzle atom; cfg::bytes has the slack) */
    unsigned char *const smem =
        TM ? dec_smem + ((1024u - ((uint32_t)__cvta_generic_to_shared(dec_smem) & 1023u)) & 1023u) : dec_smem;
    __shared__ __align__(8) unsigned long long bars[W][NS]; /* one mbarrier per stage */
    const int split = blockIdx.x, kvh = blockIdx.y, s = blockIdx.z;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int k_begin = split * chunk;
    const int group = a.n_head / a.n_head_kv;

    /* ---- 0. prologue: everything the first copies need that does not depend on seq_len is loaded
     * in the same round trip as seq_len itself: the block-table entries of this warp's first NS - 1
     * tiles are read speculatively for any key below max_seq_len (inside the table: max_seq_len <=
     * max_blocks * block_size); entries past seq_len are never used as addresses. */
    const int32_t *bt = a.block_tables + (size_t)s * a.max_blocks;
    const int bsh = __ffs(a.block_size) - 1, bmask = a.block_size - 1;
    const int kmax = min(a.max_seq_len, k_begin + chunk);
    /* Copy mapping: lane l < 16 copies the K row of key l of a tile, lane 16 + l its V row: one bulk
     * copy of D * 2 contiguous bytes each (a paged row of one kv head), 32 per 16-key tile. */
    const int ckey = lane & 15;
    /* Block of key ckey of local tile i (local i is tile warp + 4 i of the split); 0 past max_seq_len. */
    auto lookup = [&](int i) -> int {
        const int j = k_begin + (warp + W * i) * DEC_TK + ckey;
        return j < kmax ? __ldg(bt + (j >> bsh)) : 0;
    };
    const uint32_t bar0 = (uint32_t)__cvta_generic_to_shared(&bars[warp][0]);
    if (lane == 0)
        for (int i = 0; i < NS; i++) dec_bar_init(bar0 + 8 * i);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    __syncwarp();
    int pf[NS - 1];
#pragma unroll
    for (int i = 0; i < NS - 1; i++) pf[i] = lookup(i);
    const int seq_len = a.seq_len[s];
    const int q0 = a.q_start[s], q_len = a.q_start[s + 1] - q0;
    if (q_len < 1 || k_begin >= seq_len) return; /* seq_len 0 is outside the contract */
    const int k_end = min(seq_len, k_begin + chunk);

    const KT *kc = (const KT *)a.k_cache + (size_t)kvh * D, *vc = (const KT *)a.v_cache + (size_t)kvh * D;
    const size_t row = (size_t)a.n_head_kv * D;
    unsigned char *ring = smem + (size_t)warp * NS * RSTAGE;
    const int n_tiles = (k_end - k_begin + DEC_TK - 1) / DEC_TK;
    const int nt = warp < n_tiles ? (n_tiles - warp + W - 1) / W : 0;
    /* This lane's row in stage 0 (K rows for lanes < 16, V rows above): a copy is one add. TM: the
     * first row of the box that starts at key ckey (rows of a region are SWB bytes apart). */
    const uint32_t dst = (uint32_t)__cvta_generic_to_shared(ring + (lane >> 4) * RTILE + ckey * (TM ? SWB : RROW));
    const KT *src_base = lane < 16 ? kc : vc;
    /* TM: rows per box (the tensor maps' box height: a whole block, at most one tile) and its log2 */
    const int bro = TM ? min(a.block_size, DEC_TK) : 0, brsh = TM ? __ffs(bro) - 1 : 0;
    /* TM: one box of bro keys (all of the row's NB column regions) per block the tile spans, issued by
     * the lane of its first key (lane < 16: K, above: V) when it holds a key below k_end; a box belongs
     * to the call whose [lo, hi) holds its LAST key, so a box goes before the PDL wait only when every
     * key of it is below k_safe. head arms the barrier for every box of the tile. Rows of an issued box
     * at or past k_end land too (stale cache rows): their V rows are zeroed once the tile has landed
     * (the loop below), as are those of boxes never issued (stale shared memory). */
    auto issue_box = [&](int i, int blk, int st, int lo, int hi, bool head) {
        if (i < nt) { /* warp-uniform */
            const int kt = k_begin + (warp + W * i) * DEC_TK;
            const int nv = min(DEC_TK, k_end - kt); /* >= 1: the tile starts below k_end */
            const uint32_t bar = bar0 + 8 * st, d = dst + (uint32_t)(st * RSTAGE);
            if (head) {
                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* as in issue_row */
                if (lane == 0) dec_bar_expect(bar, (uint32_t)(((nv + bro - 1) >> brsh) << brsh) * 2 * RB);
                __syncwarp();
            }
            const int kb = kt + ckey, kl = kb + bro - 1;
            if ((ckey & (bro - 1)) == 0 && kb < k_end && kl >= lo && kl < hi) {
                const int r = blk * a.block_size + (kb & bmask); /* the box's first cache row */
                const CUtensorMap *m = lane < 16 ? tk : tv;
#pragma unroll
                for (int c = 0; c < NB; c++)
                    dec_tma(d + (uint32_t)(c * DEC_TK * SWB), m, kvh * D + c * SWB / (int)sizeof(KT), r, bar);
            }
        }
    };
    /* Copies of local tile i (its key's block from lookup) into stage `st`, keys [lo, hi) of it only.
     * head: also arms the stage's barrier for every valid key of the tile and zeroes the V rows of
     * keys at or past k_end, which are never read (P = 0 there, and 0 * a stale NaN would leak;
     * their K rows are left as they are: their scores are replaced by -inf). A tile's copies may
     * come in two calls (head first), both before its barrier is waited for. */
    auto issue_row = [&](int i, int blk, int st, int lo, int hi, bool head) {
        if (i < nt) { /* warp-uniform */
            const int kt = k_begin + (warp + W * i) * DEC_TK;
            const int nv = min(DEC_TK, k_end - kt); /* >= 1: the tile starts below k_end */
            const uint32_t bar = bar0 + 8 * st, d = dst + (uint32_t)(st * RSTAGE);
            if (head) {
                /* this stage was last read by ldmatrix (generic proxy) before the __syncwarp at the top
                 * of the loop; order those reads before the async-proxy writes */
                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
                if (lane == 0) dec_bar_expect(bar, (uint32_t)nv * 2 * RB);
                __syncwarp();
            }
            if (ckey < nv) {
                if (kt + ckey >= lo && kt + ckey < hi) {
                    const size_t off = ((size_t)blk * a.block_size + ((kt + ckey) & bmask)) * row;
                    dec_bulk(d, src_base + off, RB, bar);
                }
            } else if (head && lane >= 16) {
                unsigned char *z = ring + st * RSTAGE + RTILE + ckey * RROW; /* fp8 code 0 is +0 too */
#pragma unroll
                for (int u = 0; u < (int)RB / 16; u++) *(uint4 *)(z + 16 * u) = make_uint4(0, 0, 0, 0);
            }
        }
    };
    auto issue = [&](int i, int blk, int st, int lo, int hi, bool head) {
        if constexpr (TM) issue_box(i, blk, st, lo, hi, head);
        else issue_row(i, blk, st, lo, hi, head);
    };
    /* Keys below k_safe were stored before the previous kernel on the stream started: with early
     * = 1 their copies start before the PDL wait (invariant 6); the new rows (keys seq_len - q_len
     * .. seq_len - 1, stored by the previous kernel, rope + KV store) only after it. */
    const int k_safe = early ? seq_len - q_len : 0;
#pragma unroll
    for (int i = 0; i < NS - 1; i++) issue(i, pf[i], i, 0, k_safe, true);
    /* Everything above reads only what the host uploaded before the step (sequence lengths, query
     * starts, block tables) and cache rows stored by kernels before the previous one, so it runs
     * while the previous kernel (rope + KV store) drains; q and the new K/V rows it wrote are read
     * only after this wait (cuk_launch.h). With late = 1 the next kernel is let launch only when
     * every CTA has published its partial (below), not here. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (!late) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
#pragma unroll
    for (int i = 0; i < NS - 1; i++) issue(i, pf[i], i, k_safe, INT_MAX, false);
    int nxt = lookup(NS - 1); /* block of the tile issued in the first iteration */

    /* Q as mma A fragments (f16), rows r0 = lane / 4 and r0 + 8 = heads of the group (0 past it);
     * loaded after the first copies are on their way, so the two round trips overlap.
     * fp8: the head dim is permuted inside each 16-dim chunk kk the way its K B fragments come out of
     * ldmatrix (below): logical k (2j, 2j + 1) <-> dims 16 kk + 4j + (0, 2), logical k (2j + 8, 2j + 9)
     * <-> dims 16 kk + 4j + (1, 3), j = lane % 4. Q K^T is a sum over all 16 dims of the chunk either
     * way. */
    const int r0 = lane >> 2, cq = (lane & 3) * 2;
    /* f16: all KS fragments in registers for the whole loop. fp8: in shared memory instead (32
     * registers fewer: 128 a thread at 4 CTAs per SM), fragment kk of lane l in the 16 pad bytes of ring
     * row 32 kk + l (rows are RROW apart across all warps' stages; the copies and the V zeroing write
     * only the first D bytes of a row, the warp merge comes after a barrier); warp w stores fragments
     * w, w + W, ..., the CTA syncs, and each tile re-reads them (LDS.128, 8 consecutive lanes in 8
     * distinct bank groups). TM (rows unpadded): in the QB area after the ring instead, fragment kk
     * of lane l at 16 (32 kk + l) (a warp's LDS.128 reads 512 consecutive bytes). */
    uint32_t qa[F8 ? 1 : KS][4];
    const uint32_t qpad = (uint32_t)__cvta_generic_to_shared(smem) +
                          (TM ? (uint32_t)(cfg::RING + lane * 16) : (uint32_t)(lane * RROW + D));
    constexpr uint32_t QSTEP = TM ? 32 * 16 : 32 * RROW; /* bytes from fragment kk to kk + 1 */
    {
        const float *qp = a.q + (size_t)q0 * a.q_stride + (size_t)kvh * group * D;
        const bool ok0 = r0 < group, ok1 = r0 + 8 < group;
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            if (F8 && kk % W != warp) continue; /* warp-uniform */
            /* f16: v[0..3] = dims c, c + 1 of rows r0, r0 + 8, then dims c + 8, c + 9 (c = 16 kk + 2j);
             * fp8: dims c, c + 1 then c + 2, c + 3 (c = 16 kk + 4j) */
            const int c = F8 ? kk * 16 + 2 * cq : kk * 16 + cq, c2 = F8 ? c + 2 : c + 8;
            float2 v[4];
            v[0] = ok0 ? __ldg((const float2 *)(qp + (size_t)r0 * D + c)) : make_float2(0.f, 0.f);
            v[1] = ok1 ? __ldg((const float2 *)(qp + (size_t)(r0 + 8) * D + c)) : make_float2(0.f, 0.f);
            v[2] = ok0 ? __ldg((const float2 *)(qp + (size_t)r0 * D + c2)) : make_float2(0.f, 0.f);
            v[3] = ok1 ? __ldg((const float2 *)(qp + (size_t)(r0 + 8) * D + c2)) : make_float2(0.f, 0.f);
            if constexpr (F8) {
                const uint32_t f0 = cuk_pack_f16(v[0].x, v[2].x); /* dims 4j, 4j + 2 of row r0 */
                const uint32_t f1 = cuk_pack_f16(v[1].x, v[3].x); /* the same of row r0 + 8 */
                const uint32_t f2 = cuk_pack_f16(v[0].y, v[2].y); /* dims 4j + 1, 4j + 3 */
                const uint32_t f3 = cuk_pack_f16(v[1].y, v[3].y);
                asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(qpad + (uint32_t)kk * QSTEP),
                             "r"(f0), "r"(f1), "r"(f2), "r"(f3)
                             : "memory");
            } else {
#pragma unroll
                for (int i = 0; i < 4; i++) qa[kk][i] = cuk_pack_f16(v[i].x, v[i].y);
            }
        }
        if constexpr (F8) __syncthreads(); /* every warp reaches it: the early return above is CTA-uniform */
    }
    /* fp8: k_scale folded into the score scale, v_scale applied with the final 1 / L */
    const float qscale = F8 ? a.scale * a.k_scale * KATTN_LOG2E : a.scale * KATTN_LOG2E;
    const float vmul = F8 ? a.v_scale : 1.f;

    float o[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f; /* rows r0, r0 + 8; l: this lane's columns */

    int st_c = 0, st_i = NS - 1; /* stages of the tile computed / issued next (i % NS, (i - 1) % NS) */
    uint32_t phase = 0;          /* parity of stage st_c's barrier for tile i: (i / NS) & 1 */
    /* ldmatrix lane addresses inside a tile: K (non-transposed), V (transposed) */
    const int k_row = ((lane >> 4) << 3) + (lane & 7), k_chk = (lane >> 3) & 1;
    const int v_row = (((lane >> 3) & 1) << 3) + (lane & 7), v_chk = lane >> 4;
    /* TM: the same rows in the swizzled tiles. 16-byte chunk g of a row (g = 2 s + chk, s the
     * unrolled step, chk this lane's 0 / 1) is in column region g / CPR = 2 s / CPR, at chunk
     * (2 s % CPR + chk) ^ key = (2 s % CPR) ^ (chk ^ key) of the row: k_off / v_off hold the row and
     * chk ^ key, and the step XORs in its even constant (it touches chunk bits only). */
    const int k_off = TM ? k_row * SWB + ((k_chk ^ dec_swz<SWB>(k_row)) << 4) : 0;
    const int v_off = TM ? v_row * SWB + ((v_chk ^ dec_swz<SWB>(v_row)) << 4) : 0;

    for (int i = 0; i < nt; i++) {
        dec_bar_wait(bar0 + 8 * st_c, phase);
        if constexpr (TM) {
            /* the split's last tile: zero its V rows of keys at or past k_end (stale cache rows landed
             * with the box, or stale shared memory where no box was issued), every column region; the
             * swizzle permutes chunks within a row only */
            const int nv = min(DEC_TK, k_end - (k_begin + (warp + W * i) * DEC_TK));
            if (nv < DEC_TK) { /* warp-uniform */
                unsigned char *z = ring + st_c * RSTAGE + RTILE;
                static_assert(RTILE % (16 * 32) == 0, "whole rounds of 16-byte stores");
#pragma unroll
                for (int t = 0; t < RTILE / 16 / 32; t++) {
                    const int u = lane + 32 * t; /* 16-byte piece u of the tile: row (16 u % 16 SWB) / SWB */
                    if ((u * 16) % (DEC_TK * SWB) / SWB >= nv) *(uint4 *)(z + 16 * u) = make_uint4(0, 0, 0, 0);
                }
            }
        }
        __syncwarp(); /* tile i landed (and its zeroed rows are visible); stage (i - 1) % NS is free again */
        {
            const int cur = nxt;
            nxt = lookup(i + NS);
            issue(i + NS - 1, cur, st_i, 0, INT_MAX, true);
        }
        /* K tile of this stage, V tile after it */
        const unsigned char *ks = ring + st_c * RSTAGE, *vs = ks + RTILE;
        st_i = st_c;
        if (st_c == NS - 1) {
            st_c = 0;
            phase ^= 1u;
        } else {
            st_c++;
        }

        /* S (16 heads x 16 keys) = Q K^T: n-tile j = keys 8j .. 8j + 7 */
        float sc[2][4] = { { 0.f, 0.f, 0.f, 0.f }, { 0.f, 0.f, 0.f, 0.f } };
        if constexpr (F8) {
            /* One ldmatrix.x4 (b16 view of the fp8 bytes) per two 16-byte chunks 2q, 2q + 1 of the row:
             * matrices (keys 0-7, chunk 2q), (keys 8-15, 2q), (keys 0-7, 2q + 1), (keys 8-15, 2q + 1);
             * lane (g = lane / 4, j = lane % 4) gets bytes 4j .. 4j + 3 of key g (+ 8) of the chunk:
             * codes 0, 2 widened are b0 (logical k 2j, 2j + 1), codes 1, 3 are b1 (k 2j + 8, 2j + 9),
             * matching Q's permuted A fragments above. */
#pragma unroll
            for (int q = 0; q < KS / 2; q++) {
                uint32_t b[4];
                if constexpr (TM) cuk_ldsm4(b, ks + (2 * q / CPR) * DEC_TK * SWB + (v_off ^ ((2 * q % CPR) << 4)));
                else cuk_ldsm4(b, ks + v_row * RROW + (2 * q + v_chk) * 16);
#pragma unroll
                for (int m = 0; m < 2; m++) {
                    uint32_t qf[4], lo, hi;
                    /* volatile + memory: re-read every tile (not hoisted into 32 registers), after the
                     * __syncthreads that published the fragments */
                    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                                 : "=r"(qf[0]), "=r"(qf[1]), "=r"(qf[2]), "=r"(qf[3])
                                 : "r"(qpad + (uint32_t)(2 * q + m) * QSTEP)
                                 : "memory");
                    cuk_f8x4_to_f16x4_cvt(b[2 * m], lo, hi);
                    cuk_mma_f16(sc[0], qf, lo, hi);
                    cuk_f8x4_to_f16x4_cvt(b[2 * m + 1], lo, hi);
                    cuk_mma_f16(sc[1], qf, lo, hi);
                }
            }
        } else {
#pragma unroll
            for (int kk = 0; kk < KS; kk++) {
                uint32_t b[4];
                if constexpr (TM) cuk_ldsm4(b, ks + (2 * kk / CPR) * DEC_TK * SWB + (k_off ^ ((2 * kk % CPR) << 4)));
                else cuk_ldsm4(b, (const __half *)ks + k_row * RS + (2 * kk + k_chk) * 8);
                cuk_mma_f16(sc[0], qa[kk], b[0], b[1]);
                cuk_mma_f16(sc[1], qa[kk], b[2], b[3]);
            }
        }
        /* online softmax (log2 domain); keys past the split / sequence score -inf */
        const int kt0 = k_begin + (warp + W * i) * DEC_TK;
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
        const uint32_t pa[4] = { cuk_pack_f16(sc[0][0], sc[0][1]), cuk_pack_f16(sc[0][2], sc[0][3]),
                                 cuk_pack_f16(sc[1][0], sc[1][1]), cuk_pack_f16(sc[1][2], sc[1][3]) };
        if constexpr (F8) {
            /* One ldmatrix.x4.trans per two chunks 2q, 2q + 1, matrices as for K: lane (g, j) gets the
             * b16 pair (bytes 2g, 2g + 1) of key 2j in its low half and of key 2j + 1 in its high half,
             * i.e. codes (key 2j, dim 16c + 2g), (2j, 16c + 2g + 1), (2j + 1, 16c + 2g), (2j + 1,
             * 16c + 2g + 1) of chunk c. Widened, codes 0, 2 are b0 (keys 2j, 2j + 1) of the n-tile whose
             * column g is dim 16c + 2g, codes 1, 3 that of dim 16c + 2g + 1; keys 8-15 give b1. So
             * o[2c + p] column g holds dim 16c + 2g + p: accumulator e of lane j in o[2c + p] is dim
             * 16c + 4j + 2e + p, undone at the warp merge. */
#pragma unroll
            for (int q = 0; q < KS / 2; q++) {
                uint32_t b[4];
                if constexpr (TM) cuk_ldsm4_t(b, vs + (2 * q / CPR) * DEC_TK * SWB + (v_off ^ ((2 * q % CPR) << 4)));
                else cuk_ldsm4_t(b, vs + v_row * RROW + (2 * q + v_chk) * 16);
#pragma unroll
                for (int m = 0; m < 2; m++) {
                    uint32_t lo0, hi0, lo1, hi1;
                    cuk_f8x4_to_f16x4_cvt(b[2 * m], lo0, hi0);     /* keys 0-7 */
                    cuk_f8x4_to_f16x4_cvt(b[2 * m + 1], lo1, hi1); /* keys 8-15 */
                    cuk_mma_f16(o[2 * (2 * q + m)], pa, lo0, lo1);
                    cuk_mma_f16(o[2 * (2 * q + m) + 1], pa, hi0, hi1);
                }
            }
        } else {
#pragma unroll
            for (int np = 0; np < KS; np++) {
                uint32_t b[4];
                if constexpr (TM) cuk_ldsm4_t(b, vs + (2 * np / CPR) * DEC_TK * SWB + (v_off ^ ((2 * np % CPR) << 4)));
                else cuk_ldsm4_t(b, (const __half *)vs + v_row * RS + (2 * np + v_chk) * 8);
                cuk_mma_f16(o[2 * np], pa, b[0], b[1]);
                cuk_mma_f16(o[2 * np + 1], pa, b[2], b[3]);
            }
        }
    }
    /* every issued tile (i < nt) was waited for: no copy is in flight */

    /* ---- 1. the 4 warps of this CTA merge in shared memory (the stages are free: every warp has
     * drained its copies) into one (m, l, o[D]) per head. */
    __syncthreads();
    constexpr int PS = D + 4; /* floats per partial: m, l, 2 pad (16-byte alignment), o[D] */
    float *wm = (float *)smem; /* (W, DEC_M, PS) */
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
        if constexpr (F8) {
            /* o[2c + p][e] (rows r0 / r0 + 8 for e < 2 / e >= 2) is dim 16c + 4j + 2 (e & 1) + p: this
             * lane's dims 16c + 4j .. + 3 in order are o[2c][0], o[2c + 1][0], o[2c][1], o[2c + 1][1] */
#pragma unroll
            for (int c = 0; c < KS; c++) {
                float4 *d0 = (float4 *)(p0 + 4 + 16 * c + 2 * cq), *d1 = (float4 *)(p1 + 4 + 16 * c + 2 * cq);
                *d0 = make_float4(o[2 * c][0], o[2 * c + 1][0], o[2 * c][1], o[2 * c + 1][1]);
                *d1 = make_float4(o[2 * c][2], o[2 * c + 1][2], o[2 * c][3], o[2 * c + 1][3]);
            }
        } else {
#pragma unroll
            for (int n = 0; n < NT; n++) {
                *(float2 *)(p0 + 4 + 8 * n + cq) = make_float2(o[n][0], o[n][1]);
                *(float2 *)(p1 + 4 + 8 * n + cq) = make_float2(o[n][2], o[n][3]);
            }
        }
    }
    __syncthreads();

    /* Splits of this sequence that run (start below seq_len); only they take part in the merge. */
    const int n_act = min(n_split, (seq_len + chunk - 1) / chunk);
    float *parts = (float *)((char *)work + KATTN_DEC_COUNTER_BYTES);
    constexpr int C4 = D / 4; /* float4 columns per head */
    for (int it = tid; it < group * C4; it += TH) {
        const int g = it / C4, c = it % C4;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < W; w++) M = fmaxf(M, wm[(w * DEC_M + g) * PS]);
        float L = 0.f;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int w = 0; w < W; w++) {
            const float *pw = wm + (w * DEC_M + g) * PS;
            const float sc = kattn_exp2(pw[0] - M); /* an idle warp has m = -inf: weight 0 */
            const float4 v = *(const float4 *)(pw + 4 + c * 4);
            L = fmaf(sc, pw[1], L);
            acc.x = fmaf(sc, v.x, acc.x); acc.y = fmaf(sc, v.y, acc.y);
            acc.z = fmaf(sc, v.z, acc.z); acc.w = fmaf(sc, v.w, acc.w);
        }
        const int h = kvh * group + g;
        if (n_act == 1) { /* the whole sequence was this CTA's: finish here */
            const float inv = vmul / L;
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
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (late) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
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
     * last: bitwise reproducible), in one pass: a thread owns one float4 column of one head and
     * loads (m, l, column) of DEC_MB splits at once (one L2 round trip per DEC_MB splits; (m, l)
     * are the same address for the 32 threads of a head: one broadcast request), rescaling its
     * running sum whenever a batch raises the maximum. No shared memory, no barrier. */
    const size_t head0 = (size_t)s * a.n_head + (size_t)kvh * group;
    for (int it = tid; it < group * C4; it += TH) {
        const int g = it / C4, c = it % C4;
        const float *pb = parts + (head0 + g) * n_split * PS;
        float M = -INFINITY, L = 0.f;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int p0 = 0; p0 < n_act; p0 += DEC_MB) {
            float bm[DEC_MB], bl[DEC_MB];
            float4 bv[DEC_MB];
#pragma unroll
            for (int u = 0; u < DEC_MB; u++) {
                const float *pw = pb + (size_t)min(p0 + u, n_act - 1) * PS;
                bm[u] = __ldcg(pw);
                bl[u] = __ldcg(pw + 1);
                bv[u] = __ldcg((const float4 *)(pw + 4 + c * 4));
            }
            float Mn = M;
#pragma unroll
            for (int u = 0; u < DEC_MB; u++)
                if (p0 + u < n_act) Mn = fmaxf(Mn, bm[u]); /* every active split has a finite m */
            const float r = kattn_exp2(M - Mn); /* first batch: exp2(-inf) = 0 */
            L *= r;
            acc.x *= r; acc.y *= r; acc.z *= r; acc.w *= r;
            M = Mn;
#pragma unroll
            for (int u = 0; u < DEC_MB; u++) {
                const float w = p0 + u < n_act ? kattn_exp2(bm[u] - M) : 0.f;
                L = fmaf(w, bl[u], L);
                acc.x = fmaf(w, bv[u].x, acc.x); acc.y = fmaf(w, bv[u].y, acc.y);
                acc.z = fmaf(w, bv[u].z, acc.z); acc.w = fmaf(w, bv[u].w, acc.w);
            }
        }
        const float inv = vmul / L;
        *(float4 *)(a.out + (size_t)q0 * a.n_head * D + (size_t)(kvh * group + g) * D + c * 4) =
            make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
    }
}

template <int D, int W, int NS, bool F8>
__global__ void __launch_bounds__(W * 32, dec_cfg<D, W, NS, F8>::MIN_CTAS)
    kattn_decode_split(const cuk_attn_args a, int n_split, int chunk, int early, int late, void *work)
{
    dec_body<D, W, NS, F8, false>(a, n_split, chunk, early, late, work, nullptr, nullptr);
}

/* TM (the default; AIINFRA_DEC_TMA=0 turns it off): K / V tiles by 2D TMA boxes over tk / tv (kattn_cache_tmap) */
template <int D, int W, int NS, bool F8>
__global__ void __launch_bounds__(W * 32, dec_cfg<D, W, NS, F8, true>::MIN_CTAS)
    kattn_decode_tma(const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv,
                     const cuk_attn_args a, int n_split, int chunk, int early, int late, void *work)
{
    dec_body<D, W, NS, F8, true>(a, n_split, chunk, early, late, work, &tk, &tv);
}

int kattn_decode_shape_ok(const cuk_attn_args *a)
{
    const int group = a->n_head / a->n_head_kv;
    return (a->kv_type == DTYPE_F16 || a->kv_type == DTYPE_F8_E4M3) && a->head_dim == a->head_dim_v &&
           (a->head_dim == 64 || a->head_dim == 128) && group <= 16;
}

int kattn_decode_supported(const cuk_attn_args *a)
{
    return kattn_decode_shape_ok(a) && ((uintptr_t)a->k_cache & 15) == 0 && ((uintptr_t)a->v_cache & 15) == 0 &&
           ((uintptr_t)a->out & 15) == 0 && ((uintptr_t)a->work & 15) == 0;
}

static int dec_env(const char *name, int def)
{
    const char *e = getenv(name);
    return e && *e ? atoi(e) : def;
}

/* SMs of the current device (132 when it cannot be asked: no GPU, the launch fails anyway). */
static int dec_sms(void)
{
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms < 1) {
        (void)cudaGetLastError();
        return 132;
    }
    return sms;
}

/* The kernel of a configuration: bulk row copies, or (TM) 2D TMA boxes */
template <int D, int W, int NS, bool F8, bool TM> static constexpr auto dec_kernel()
{
    if constexpr (TM) return kattn_decode_tma<D, W, NS, F8>;
    else return kattn_decode_split<D, W, NS, F8>;
}

/* CTAs of the kernel resident on the whole GPU (SMs x occupancy); MIN_CTAS x 132 when the device
 * cannot be asked (no GPU: the launch fails anyway). */
template <int D, int W, int NS, bool F8, bool TM> static long dec_slots_v(void)
{
    using cfg = dec_cfg<D, W, NS, F8, TM>;
    const auto kern = dec_kernel<D, W, NS, F8, TM>();
    int occ = 0;
    const size_t sm = cfg::bytes;
    if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, cfg::TH, sm) != cudaSuccess || occ < 1) {
        (void)cudaGetLastError();
        return (long)cfg::MIN_CTAS * 132;
    }
    return (long)dec_sms() * occ;
}

/* The 2D TMA variant (TM) wherever it applies: blocks of >= 8 tokens (a box is one block of one kv
 * head; 8 rows of 128 bytes are one swizzle atom); AIINFRA_DEC_TMA=0 forces the bulk-copy kernel (A/B
 * runs, tests). The default since the H200 measured it (header: 1.01-1.17x the bulk kernel with f16
 * KV except 0.98x at 8 x 8k, 1.03-1.39x with fp8). */
static bool dec_tma_on(const cuk_attn_args *a) { return a->block_size >= 8 && dec_env("AIINFRA_DEC_TMA", 1) != 0; }

/* Calls f.template operator()<D, W, NS, F8, TM>() for the kernel of call a (head dim, cache type,
 * tm: the TMA variant). */
template <bool TM, class F> static auto dec_dispatch_v(const cuk_attn_args *a, const F &f)
{
    const bool d64 = a->head_dim == 64;
    if (a->kv_type == DTYPE_F8_E4M3)
        return d64 ? f.template operator()<64, DEC_W, DEC_NS64_F8, true, TM>()
                   : f.template operator()<128, DEC_W, DEC_NS128_F8, true, TM>();
    return d64 ? f.template operator()<64, DEC_W, DEC_NS64, false, TM>()
               : f.template operator()<128, DEC_W, DEC_NS128, false, TM>();
}
template <class F> static auto dec_dispatch(const cuk_attn_args *a, bool tm, const F &f)
{
    return tm ? dec_dispatch_v<true>(a, f) : dec_dispatch_v<false>(a, f);
}

struct dec_slots_f {
    template <int D, int W, int NS, bool F8, bool TM> long operator()() const
    {
        return dec_slots_v<D, W, NS, F8, TM>();
    }
};
static long dec_slots(const cuk_attn_args *a, bool tm) { return dec_dispatch(a, tm, dec_slots_f{}); }

/* chunk (keys per split, a multiple of KATTN_DEC_CHUNK_ALIGN) and the split count.
 * No split at all when the (sequence, kv head) pairs already fill every resident CTA slot (or
 * exceed the counters). Otherwise the split count with the least estimated time: waves of
 * resident CTAs x (keys per CTA + a fixed per-CTA cost of about 48 keys: filling the tile
 * pipeline and the finish) + the last CTA's merge (about 6 keys per split), splits of at least
 * 64 keys (one tile per warp: short contexts spread over more SMs, which shortens the dependent
 * chain of tiles per warp) and at most 4 x slots CTAs in all (the work bound's cap).
 * Batch 1 at long context spreads over every SM in one wave. Checked against every split size by
 * `bench_cuda_attention sweep` (H200, 2026-12-04): the plan is the fastest or within 0.6 us of it
 * at 1 x {640, 1k, 2k, 8k, 32k}, 8 x {1k, 1088, 8k}, 64 x {1k, 2k}; the merge weight is bracketed
 * by 1 x 1k (64-key splits 8.7 us < 128-key 9.9: weight < 8) and 1 x 2k (128-key 10.1 < 64-key
 * 11.0: weight > 4; it was 1, which picked 64-key splits there).
 * AIINFRA_DEC_CHUNK=c forces splits of c keys (rounded up to the alignment; measurements, tests). */
static void dec_plan(const cuk_attn_args *a, int *n_split, int *chunk)
{
    const long pairs = (long)a->n_seq * a->n_head_kv;
    const long slots = dec_slots(a, dec_tma_on(a)), cap = 4 * slots;
    const long al = KATTN_DEC_CHUNK_ALIGN, full = ((long)a->max_seq_len + al - 1) / al * al;
    *n_split = 1;
    *chunk = (int)full;
    if (pairs > KATTN_DEC_COUNTERS) return;
    const long force = dec_env("AIINFRA_DEC_CHUNK", 0);
    if (force > 0) {
        long ch = (force + KATTN_DEC_CHUNK_ALIGN - 1) / KATTN_DEC_CHUNK_ALIGN * KATTN_DEC_CHUNK_ALIGN;
        if (ch > full) ch = full;
        const long ns = (a->max_seq_len + ch - 1) / ch;
        if (pairs * ns <= cap) {
            *chunk = (int)ch;
            *n_split = (int)ns;
            return;
        }
    }
    if (pairs >= slots) return;
    long max_ns = (a->max_seq_len + 63) / 64;
    if (max_ns > cap / pairs) max_ns = cap / pairs;
    long best_ns = 1, best_ch = full;
    double best_cost = 0;
    for (long ns = 1; ns <= max_ns; ns++) {
        long ch = (a->max_seq_len + ns - 1) / ns;
        ch = (ch + KATTN_DEC_CHUNK_ALIGN - 1) / KATTN_DEC_CHUNK_ALIGN * KATTN_DEC_CHUNK_ALIGN;
        const long real_ns = (a->max_seq_len + ch - 1) / ch;
        const long waves = (pairs * real_ns + slots - 1) / slots;
        const double cost = (double)waves * (double)(ch + 48) + (real_ns > 1 ? 6.0 * (double)real_ns : 0.0);
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
     * 4 x slots x group of them, whatever n_seq and max_seq_len (and whichever variant runs). */
    const int group = a->n_head / a->n_head_kv;
    const long sb = dec_slots(a, false), st = dec_slots(a, true), slots = sb > st ? sb : st;
    return KATTN_DEC_COUNTER_BYTES + (size_t)(4 * slots) * group * (a->head_dim + 4) * sizeof(float);
}

/* PDL trigger: early (right after the wait) or late (once the CTA has published its partial).
 * Late when the grid is one wave that covers every SM: an early-launched next kernel then lands on
 * the SMs the decode CTAs stream on. Llama-3-8B bf16 steps on the H200 (2026-12-04, ms per step,
 * early -> late): batch 8 x 1k (256 CTAs, one wave) 6.755 -> 6.000; batch 1 x 640 (80 CTAs)
 * 4.143 -> 4.154; batch 64 x 1k (512 CTAs, two waves: the early trigger fires only once the second
 * wave has started anyway) 7.619 -> 7.645. AIINFRA_DEC_LATE=0/1 and AIINFRA_DEC_EARLY=0 (no copies
 * before the wait) override (A/B measurements, tests). */
template <int D, int W, int NS, bool F8, bool TM>
static cudaError_t dec_launch(cudaStream_t st, const cuk_attn_args *a, int ns, int ch)
{
    using cfg = dec_cfg<D, W, NS, F8, TM>;
    const auto kern = dec_kernel<D, W, NS, F8, TM>();
    const size_t sm = cfg::bytes;
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    if (e != cudaSuccess) return e;
    const long ctas = (long)ns * a->n_head_kv * a->n_seq;
    const int early = dec_env("AIINFRA_DEC_EARLY", 1) != 0;
    const int late = dec_env("AIINFRA_DEC_LATE", ctas >= dec_sms() && ctas <= dec_slots_v<D, W, NS, F8, TM>()) != 0;
    dim3 grid((unsigned)ns, (unsigned)a->n_head_kv, (unsigned)a->n_seq);
    if constexpr (TM) {
        /* encoded per call: graph capture keeps the kernel's by-value parameters */
        CUtensorMap tk, tv;
        const int cols = a->n_head_kv * D, bro = a->block_size < DEC_TK ? a->block_size : DEC_TK;
        e = kattn_cache_tmap(&tk, a->k_cache, cfg::EB, cols, cfg::SWB, bro, D * cfg::EB);
        if (e == cudaSuccess) e = kattn_cache_tmap(&tv, a->v_cache, cfg::EB, cols, cfg::SWB, bro, D * cfg::EB);
        if (e != cudaSuccess) return e;
        cuk_launch(kern, dim3(grid), dim3(cfg::TH), sm, st, tk, tv, *a, ns, ch, early, late, a->work);
    } else {
        cuk_launch(kern, dim3(grid), dim3(cfg::TH), sm, st, *a, ns, ch, early, late, a->work);
    }
    return cudaGetLastError();
}

struct dec_launch_f {
    cudaStream_t st;
    const cuk_attn_args *a;
    int ns, ch;
    template <int D, int W, int NS, bool F8, bool TM> cudaError_t operator()() const
    {
        return dec_launch<D, W, NS, F8, TM>(st, a, ns, ch);
    }
};

cudaError_t kattn_decode_launch(cudaStream_t st, const cuk_attn_args *a)
{
    int ns, ch;
    dec_plan(a, &ns, &ch);
    return dec_dispatch(a, dec_tma_on(a), dec_launch_f{st, a, ns, ch});
}
