/* attn_versions.cu - the attention ladder's version table (attention.h): forward v1 -> v4, backward
 * v1b -> v3b. Each kernel file's header says what its step changes and why it should be faster.
 *
 *   v1_naive       S = scale Q K^T in memory (fp32), softmax rows, O = P V: naive GEMM loops
 *   v2_fa1_tiled   FA1 style: tiles, online softmax, K/V tiles in shared memory, S never in memory
 *   v3_fa2_mma     FA2 style: query blocks in parallel, a warp per 16 rows, mma.sync bf16 for Q K^T
 *                  and P V, P kept in registers, rescale deferred to the end, causal tiles skipped
 *   v4_fa3_wgmma   FA3 ideas on Hopper: wgmma for both matmuls (Q, K, V from shared memory, P from
 *                  registers), TMA into a K/V ring with mbarriers, a producer warp, 2 consumer
 *                  warpgroups x 64 rows, softmax of tile j overlapped with the P V wgmma of tile j-1
 *   v4b_fa3_pingpong  v4 + the two warpgroups take turns issuing their wgmma blocks (FA3 ping-pong)
 *   v4c_fa3_inline v4 without the producer warpgroup (256 threads: up to 255 registers, so 128-key
 *                  tiles at d 128 too); one consumer thread refills each stage once both groups free it
 *   v4d_fa3_l2     v4c with the CTAs ordered by head sections sized to the L2 (the resident CTAs
 *                  share their heads' K/V through L2 instead of each streaming its own from HBM)
 *   v4e_fa3_lazy   v4d + lazy rescale: a row keeps its max until a tile exceeds it by 2^8, and a warp
 *                  whose rows all kept theirs skips the O rescale
 *   v4f_fa3_lazy_pp  v4e + ping-pong of the two consumer warpgroups (v4b's turn barriers)
 *   v4g_fa3_prod_l2  v4 (producer warpgroup, 64-key tiles at d 128) + v4d's L2 order + v4e's lazy rescale
 *   v3_backend     the CUDA backend's prefill (Hopper from s 1024, else FA2; AIINFRA_PREFILL forces)
 *                  called through cuk_attention on this layout, conversions included; causal only (else cudaErrorNotSupported: no row)
 *   v1_naive_bwd   P, dP, dS as (s, s) fp32 matrices in memory, 5 naive GEMMs
 *   v3_fa2_bwd     FA2 style backward: P rebuilt from lse per tile, D = rowsum(dO * O) up front, one
 *                  pass for dK / dV over key tiles and one for dQ over query tiles, no atomics
 */
#include "kernels/attention/attn_internal.h"

static size_t no_work(const attn_args *a) { return 0; }

extern "C" const attn_version attn_versions[] = {
    { "v1_naive", "S = QK^T in memory (fp32), softmax rows, O = PV; naive GEMM loops", 0, 1, attn_v1_work, attn_v1_run },
    { "v2_fa1_tiled", "FA1: tiled, online softmax, K/V tiles in smem, no S in memory, fp32 FMA", 0, 1, no_work,
      attn_v2_run },
    { "v3_fa2_mma", "FA2: warp per 16 rows, mma.sync bf16 QK^T and PV, deferred rescale, causal skip", 0, 1, no_work,
      attn_v3_run },
    { "v4_fa3_wgmma", "FA3: wgmma QK^T and PV, TMA K/V ring + mbarriers, producer warp, softmax overlaps PV", 0, 1,
      no_work, attn_v4_run },
    { "v4b_fa3_pingpong", "v4 + ping-pong: the 2 consumer warpgroups take turns issuing wgmma (softmax under the other's MMA)",
      0, 1, no_work, attn_v4b_run },
    { "v4c_fa3_inline", "v4 with no producer warpgroup: 256 threads (255 registers), 128-key tiles at d 128, TMA issued by a consumer",
      0, 1, no_work, attn_v4c_run },
    { "v4d_fa3_l2", "v4c + CTAs ordered in head sections that fit L2 (K/V read from HBM ~once per section)", 0, 1,
      no_work, attn_v4d_run },
    { "v4e_fa3_lazy", "v4d + lazy rescale: row max kept until exceeded by 2^8, O rescale skipped per warp", 0, 1,
      no_work, attn_v4e_run },
    { "v4f_fa3_lazy_pp", "v4e + ping-pong: the 2 consumer warpgroups take turns issuing wgmma", 0, 1, no_work,
      attn_v4f_run },
    { "v4g_fa3_prod_l2", "v4 (producer warpgroup, 64-key tiles at d 128) + v4d's L2 order + v4e's lazy rescale", 0, 1,
      no_work, attn_v4g_run },
    { "v3_backend", "backend prefill via cuk_attention's dispatch (Hopper from s 1024, else FA2), conversions timed, causal", 0, 0,
      attn_vbe_work, attn_vbe_run },
    { "v1_naive_bwd", "P, dP, dS as (s,s) fp32 in memory; 5 naive GEMMs", 1, 0, attn_v1b_work, attn_v1b_run },
    { "v3_fa2_bwd", "FA2 bwd: P from lse per tile, dK/dV pass + dQ pass, no atomics, fp32 FMA", 1, 0, attn_v3b_work,
      attn_v3b_run },
};
extern "C" const int attn_n_versions = (int)(sizeof attn_versions / sizeof attn_versions[0]);
