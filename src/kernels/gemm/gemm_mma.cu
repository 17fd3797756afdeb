/* gemm_mma.cu - GEMM ladder v7: tensor cores through mma.sync (the Ampere instruction, still
 * present on Hopper). C (M, N) = A (M, K) x B (K, N), bf16 in, fp32 accumulate in the tensor core,
 * bf16 out. Needs K % 8 == 0, N % 8 == 0 (16-byte cp.async chunks); any M, N, K otherwise.
 */
#include "backend/cuda/cuk_mma.cuh"
#include "kernels/gemm/gemm_internal.cuh"

#define BM 128
#define BN 128
#define BK 32
#define STAGES 3
#define AP 40  /* bf16 per A row in shared memory: 32 + 8 (80 bytes: ldmatrix rows hit distinct banks) */
#define BP 136 /* bf16 per B row: 128 + 8 (272 bytes) */
#define A_ELEMS (BM * AP)
#define B_ELEMS (BK * BP)
#define SMEM_BYTES (STAGES * (A_ELEMS + B_ELEMS) * 2)

__device__ __forceinline__ unsigned saddr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void cp_async16(unsigned s, const void *g, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(g), "r"(valid ? 16 : 0));
}

/* v7: tensor cores. One mma.sync.m16n8k16 does 4096 FLOPs per warp instruction (v6: 32 FMAs = 64
 * FLOPs), so the arithmetic stops being the limit and feeding operands becomes it. 128x128x32
 * tiles, 8 warps as 2 (M) x 4 (N), each warp 64x32 = 4x4 mma tiles (64 fp32 accumulators per
 * thread). Fragments come from shared memory with ldmatrix (A: x4; B: x4.trans, since B is
 * row-major K x N and the mma wants it k-contiguous per column); padded rows keep the 8 row
 * addresses of each ldmatrix in distinct banks. A 3-stage cp.async pipeline keeps two tiles in
 * flight while the tensor cores work on the third. */
__global__ void __launch_bounds__(256) gemm_v7_mma_sync(const gbf *__restrict__ A, const gbf *__restrict__ B,
                                                        gbf *__restrict__ C, int M, int N, int K)
{
    extern __shared__ __align__(16) unsigned char smem7[];
    gbf *As = (gbf *)smem7, *Bs = As + STAGES * A_ELEMS; /* [stage][BM][AP], [stage][BK][BP] */
    const int tid = threadIdx.x, w = tid / 32, lane = tid % 32, wm = w / 4, wn = w % 4;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int nk = gemm_cdiv(K, BK);

    auto load = [&](int stage, int k0) { /* 512 16-byte chunks of A and of B: 2 each per thread */
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int c = tid + 256 * i;
            const int am = c / 4, ak = (c % 4) * 8;
            const bool va = m0 + am < M && k0 + ak < K;
            cp_async16(saddr(As + stage * A_ELEMS + am * AP + ak), va ? A + (size_t)(m0 + am) * K + k0 + ak : A, va);
            const int bk = c / 16, bn = (c % 16) * 8;
            const bool vb = k0 + bk < K && n0 + bn < N;
            cp_async16(saddr(Bs + stage * B_ELEMS + bk * BP + bn), vb ? B + (size_t)(k0 + bk) * N + n0 + bn : B, vb);
        }
    };

    float acc[4][4][4] = {}; /* [m16 tile][n8 tile][fragment] */
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < nk) load(s, s * BK);
        asm volatile("cp.async.commit_group;\n" ::);
    }
    for (int t = 0; t < nk; t++) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 2));
        __syncthreads(); /* tile t visible to all; everyone is done with tile t-1's stage */
        if (t + STAGES - 1 < nk) load((t + STAGES - 1) % STAGES, (t + STAGES - 1) * BK);
        asm volatile("cp.async.commit_group;\n" ::);
        const gbf *as = As + (t % STAGES) * A_ELEMS, *bs = Bs + (t % STAGES) * B_ELEMS;
#pragma unroll
        for (int ks = 0; ks < BK; ks += 16) {
            unsigned a[4][4], b[4][2];
#pragma unroll
            for (int mi = 0; mi < 4; mi++) {
                const gbf *p = as + (wm * 64 + mi * 16 + lane % 16) * AP + ks + (lane / 16) * 8;
                cuk_ldsm4(a[mi], p);
            }
#pragma unroll
            for (int p2 = 0; p2 < 2; p2++) { /* one x4.trans = two n8 tiles x (k 0-7, k 8-15) */
                const gbf *p = bs + (ks + lane % 8 + ((lane / 8) & 1) * 8) * BP + wn * 32 + p2 * 16 + (lane / 16) * 8;
                cuk_ldsm4_t(&b[2 * p2][0], p); /* b[2 p2], b[2 p2 + 1]: 4 consecutive words */
            }
#pragma unroll
            for (int mi = 0; mi < 4; mi++)
#pragma unroll
                for (int ni = 0; ni < 4; ni++) {
                    cuk_mma_bf16(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
                }
        }
    }
    asm volatile("cp.async.wait_group 0;\n" ::);
#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++) {
            const int r = m0 + wm * 64 + mi * 16 + lane / 4, c = n0 + wn * 32 + ni * 8 + (lane % 4) * 2;
            gemm_store2(C, M, N, r, c, acc[mi][ni][0], acc[mi][ni][1]);
            gemm_store2(C, M, N, r + 8, c, acc[mi][ni][2], acc[mi][ni][3]);
        }
}

int gemm_run_v7(GEMM_RUN_ARGS)
{
    if (int e = gemm_check(A, B, C, M, N, K, true)) return e;
    cudaError_t e = cudaFuncSetAttribute(gemm_v7_mma_sync, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
    if (e != cudaSuccess) return (int)e;
    dim3 grid(gemm_cdiv(N, BN), gemm_cdiv(M, BM));
    gemm_v7_mma_sync<<<grid, 256, SMEM_BYTES, (cudaStream_t)stream>>>((const gbf *)A, (const gbf *)B, (gbf *)C, M, N, K);
    return (int)cudaGetLastError();
}
