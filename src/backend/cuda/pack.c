/* pack.c - sizes of device weights and the host-side repack from GGUF rows to the device layout.
 *
 * Why planar: a GGUF q8_0/q4_0/q4_1 block puts its f16 scale(s) in front of the quants (34, 18 and
 * 20 bytes), so quants are never 16-byte aligned and a GPU thread cannot fetch them with one
 * 16-byte load. The device layout (cuda_kernels.h) splits every matrix into two planes:
 *
 *   qs     (n_out, n_in / 32, QB) bytes, QB = 32 (q8_0) or 16 (q4_*), the block's quants verbatim
 *   scales (n_out, n_in / 32) x {d} (q8_0, q4_0) or {d, m} (q4_1), f16, at cuk_weight_qs_bytes()
 *
 * Invariants:
 *  1. cuk_weight_qs_bytes is a multiple of 16 (n_in % 32 == 0), so the scale plane stays aligned.
 *  2. Packing moves bytes only: the values a kernel decodes are bit-for-bit those of
 *     dtype_dequantize_row on the GGUF row (tests/unit/test_cuda_gemv.c checks it through GEMV).
 */
#include <string.h>

#include "backend/cuda/cuda_kernels.h"

// --- sizes ----------------------------------------------------------------------------------

/* Bytes of quants per 32-element block (0 for float types / unsupported). */
static size_t qs_per_block(dtype t)
{
    switch (t) {
    case DTYPE_Q8_0: return 32;
    case DTYPE_Q4_0:
    case DTYPE_Q4_1: return 16;
    default: return 0;
    }
}

static size_t scale_per_block(dtype t)
{
    switch (t) {
    case DTYPE_Q8_0:
    case DTYPE_Q4_0: return 2;
    case DTYPE_Q4_1: return 4;
    default: return 0;
    }
}

static size_t float_size(dtype t)
{
    switch (t) {
    case DTYPE_F32: return 4;
    case DTYPE_F16:
    case DTYPE_BF16: return 2;
    default: return 0;
    }
}

size_t cuk_weight_qs_bytes(dtype t, int64_t n_out, int64_t n_in)
{
    if (n_out < 0 || n_in < 0 || n_in % DTYPE_QK) return 0;
    return (size_t)n_out * (size_t)(n_in / DTYPE_QK) * qs_per_block(t);
}

size_t cuk_weight_bytes(dtype t, int64_t n_out, int64_t n_in)
{
    if (n_out < 0 || n_in < 0) return 0;
    if (float_size(t)) return (size_t)n_out * (size_t)n_in * float_size(t);
    if (!qs_per_block(t) || n_in % DTYPE_QK) return 0;
    return cuk_weight_qs_bytes(t, n_out, n_in) + (size_t)n_out * (size_t)(n_in / DTYPE_QK) * scale_per_block(t);
}

// --- repack ---------------------------------------------------------------------------------

ai_status cuk_weight_pack(dtype t, const void *h_src, int64_t n_out, int64_t n_in, void *h_dst, ai_err *err)
{
    if (!h_src || !h_dst || n_out <= 0 || n_in <= 0)
        return ai_err_set(err, AI_ERR_INVALID, "cuk_weight_pack: bad arguments (n_out %lld, n_in %lld)",
                          (long long)n_out, (long long)n_in);
    if (float_size(t)) {
        memcpy(h_dst, h_src, cuk_weight_bytes(t, n_out, n_in));
        return AI_OK;
    }
    size_t qb = qs_per_block(t), sb = scale_per_block(t);
    if (!qb) return ai_err_set(err, AI_ERR_UNSUPPORTED, "cuk_weight_pack: dtype %s has no device layout", dtype_name(t));
    if (n_in % DTYPE_QK)
        return ai_err_set(err, AI_ERR_INVALID, "cuk_weight_pack: n_in %lld of %s is not a multiple of 32",
                          (long long)n_in, dtype_name(t));
    const size_t bb = dtype_get(t)->block_bytes; /* GGUF block: scales (sb bytes) then quants */
    const size_t nb = (size_t)(n_in / DTYPE_QK), nblocks = (size_t)n_out * nb;
    const unsigned char *src = h_src;
    unsigned char *qs = h_dst, *sc = qs + cuk_weight_qs_bytes(t, n_out, n_in);
    for (size_t i = 0; i < nblocks; i++) {
        memcpy(sc + i * sb, src + i * bb, sb);
        memcpy(qs + i * qb, src + i * bb + sb, qb);
    }
    return AI_OK;
}
