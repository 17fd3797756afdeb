/* k_fill.cu - cuk_weight_fill_random: reproducible random weights made on the device (synthetic
 * models at 8B scale in seconds, no download, no host copy).
 *
 * Every value is a pure function of (seed, index): h = splitmix64(seed + golden * (index + 1)),
 * where index counts elements (floats), quant bytes (q8_0, q4_*: one hash per byte of the qs
 * plane) or blocks (scales). So the bytes do not depend on the grid, and a reader can recompute
 * any element alone. Distributions:
 *   f32/f16/bf16  uniform in [-scale, scale] (rounded to the type);
 *   q8_0          quants uniform int8 in [-127, 127], d = scale / 127;
 *   q4_0          random nibbles (0..15), d = scale / 8 -> values in [-scale, 7/8 scale];
 *   q4_1          random nibbles, d = 2 scale / 15, m = -scale -> values in [-scale, scale].
 * The scales are constant per matrix (rounded to f16): enough for speed runs; accuracy tests use
 * packed GGUF blocks (cuk_weight_pack) with real per-block scales.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_kernels.h"

namespace {

__device__ __forceinline__ uint64_t mix(uint64_t seed, uint64_t i)
{
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1] from the top 24 bits. */
__device__ __forceinline__ float unit(uint64_t h)
{
    return (float)(h >> 40) * (2.0f / 16777215.0f) - 1.0f;
}

__global__ void k_fill_float(void *dst, dtype t, size_t n, uint64_t seed, float scale)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float v = scale * unit(mix(seed, i));
        if (t == DTYPE_F32) static_cast<float *>(dst)[i] = v;
        else if (t == DTYPE_F16) static_cast<__half *>(dst)[i] = __float2half_rn(v);
        else static_cast<__nv_bfloat16 *>(dst)[i] = __float2bfloat16_rn(v);
    }
}

/* The qs plane: n bytes; q8_0 bytes are int8 in [-127, 127], q4 bytes two random nibbles. */
__global__ void k_fill_qs(unsigned char *qs, dtype t, size_t n, uint64_t seed)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const uint64_t h = mix(seed, i);
        qs[i] = t == DTYPE_Q8_0 ? (unsigned char)(signed char)((int)((h >> 32) % 255u) - 127) : (unsigned char)(h >> 32);
    }
}

__global__ void k_fill_scales(unsigned char *sc, dtype t, size_t nblocks, float d, float m)
{
    const __half hd = __float2half_rn(d), hm = __float2half_rn(m);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < nblocks; i += (size_t)gridDim.x * blockDim.x) {
        if (t == DTYPE_Q4_1) {
            reinterpret_cast<__half *>(sc)[2 * i] = hd;
            reinterpret_cast<__half *>(sc)[2 * i + 1] = hm;
        } else {
            reinterpret_cast<__half *>(sc)[i] = hd;
        }
    }
}

unsigned grid_for(size_t n)
{
    size_t b = (n + 255) / 256;
    return (unsigned)(b < 8192 ? (b ? b : 1) : 8192);
}

} // namespace

extern "C" ai_status cuk_weight_fill_random(cuk_stream s, const cuk_weight *w, uint64_t seed, float scale, ai_err *err)
{
    if (!w || !w->data || w->n_out < 1 || w->n_in < 1 || !(scale >= 0.0f))
        return ai_err_set(err, AI_ERR_INVALID, "cuk_weight_fill_random: bad arguments");
    cudaStream_t cs = (cudaStream_t)s;
    const dtype t = w->type;
    const size_t n = (size_t)w->n_out * (size_t)w->n_in;
    if (t == DTYPE_F32 || t == DTYPE_F16 || t == DTYPE_BF16) {
        k_fill_float<<<grid_for(n), 256, 0, cs>>>(w->data, t, n, seed, scale);
        CUK_LAUNCHED(err, "cuk_weight_fill_random");
        return AI_OK;
    }
    if (t != DTYPE_Q8_0 && t != DTYPE_Q4_0 && t != DTYPE_Q4_1)
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "cuk_weight_fill_random: dtype %s", dtype_name(t));
    if (w->n_in % 32)
        return ai_err_set(err, AI_ERR_INVALID, "cuk_weight_fill_random: n_in %lld of %s is not a multiple of 32",
                          (long long)w->n_in, dtype_name(t));
    const size_t nq = cuk_weight_qs_bytes(t, w->n_out, w->n_in), nb = n / 32;
    unsigned char *qs = static_cast<unsigned char *>(w->data);
    k_fill_qs<<<grid_for(nq), 256, 0, cs>>>(qs, t, nq, seed);
    CUK_LAUNCHED(err, "cuk_weight_fill_random");
    const float d = t == DTYPE_Q8_0 ? scale / 127.0f : t == DTYPE_Q4_0 ? scale / 8.0f : 2.0f * scale / 15.0f;
    k_fill_scales<<<grid_for(nb), 256, 0, cs>>>(qs + nq, t, nb, d, -scale);
    CUK_LAUNCHED(err, "cuk_weight_fill_random");
    return AI_OK;
}
