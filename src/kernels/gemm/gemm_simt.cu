/* gemm_simt.cu - GEMM ladder v1..v6 on the CUDA cores: C (M, N) = A (M, K) x B (K, N), bf16 in,
 * fp32 accumulate (fmaf in a fixed k order), bf16 out (round to nearest even).
 *
 * A GEMM does 2MNK FLOPs on 2(MK + KN + MN) bytes: at 4096^3 that is ~1365 FLOPs per byte, far
 * above any GPU's FLOP/byte balance, so it can be compute-bound - but only if every element loaded
 * from memory is reused many times from faster storage. These steps raise that reuse: global ->
 * shared (v2), shared -> registers (v3..v5), then hide the load latency (v6).
 * Bounds: every kernel zero-fills tile elements outside A or B and stores only inside C, so any
 * M, N, K works (v4..v6 additionally need K % 8 == 0 and N % 8 == 0: their loads move 8 bf16 at
 * once, each chunk then lies wholly inside or outside the matrix).
 */
#include "kernels/gemm/gemm_internal.cuh"

__device__ __forceinline__ float bf(gbf x) { return __bfloat162float(x); }

// ---- v1 ---------------------------------------------------------------------------------------

/* v1: one thread per C element (x = column, so a warp reads one row of A as a broadcast and 32
 * consecutive B elements), K multiply-adds straight from global memory. Every operand is loaded
 * for 1 FMA: 2 loads per 2 FLOPs, so the L1/L2 bandwidth, not the arithmetic, sets the speed. */
__global__ void gemm_v1_naive(const gbf *__restrict__ A, const gbf *__restrict__ B, gbf *__restrict__ C, int M, int N,
                              int K)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x, row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    const gbf *a = A + (size_t)row * K, *b = B + col;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) acc = fmaf(bf(a[k]), bf(b[(size_t)k * N]), acc);
    C[(size_t)row * N + col] = __float2bfloat16(acc);
}

// ---- v2 ---------------------------------------------------------------------------------------

#define T2 32
/* v2: a 32x32 block stages a 32x32 tile of A and of B in shared memory per k-step, then each
 * thread does 32 FMAs from shared memory. Every global load now feeds 32 FMAs (32x less global
 * traffic than v1); the limit moves to shared-memory bandwidth (2 shared loads per FMA). */
__global__ void gemm_v2_smem_tile(const gbf *__restrict__ A, const gbf *__restrict__ B, gbf *__restrict__ C, int M,
                                  int N, int K)
{
    __shared__ float As[T2][T2], Bs[T2][T2 + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * T2 + ty, col = blockIdx.x * T2 + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += T2) {
        As[ty][tx] = row < M && k0 + tx < K ? bf(A[(size_t)row * K + k0 + tx]) : 0.0f;
        Bs[ty][tx] = k0 + ty < K && col < N ? bf(B[(size_t)(k0 + ty) * N + col]) : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < T2; k++) acc = fmaf(As[ty][k], Bs[k][tx], acc);
        __syncthreads();
    }
    if (row < M && col < N) C[(size_t)row * N + col] = __float2bfloat16(acc);
}

// ---- v3 ---------------------------------------------------------------------------------------

#define BM3 64
#define BN3 64
#define BK3 16
/* v3: 2D register tiling. A 64x64 C tile per block of 256 threads, each thread a 4x4 micro-tile.
 * Per k it loads 4 A values and 4 B values from shared memory into registers and does 16 FMAs
 * (v2: 2 loads per FMA, now 0.5), so the FMA units, not shared memory, become the limit. A is
 * stored transposed (As[k][m]) so a thread's 4 rows are adjacent. */
__global__ void __launch_bounds__(256) gemm_v3_reg_tile(const gbf *__restrict__ A, const gbf *__restrict__ B,
                                                        gbf *__restrict__ C, int M, int N, int K)
{
    __shared__ float As[BK3][BM3], Bs[BK3][BN3];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int m0 = blockIdx.y * BM3, n0 = blockIdx.x * BN3;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += BK3) {
#pragma unroll
        for (int i = 0; i < 4; i++) { /* 1024 elements of each tile, 4 per thread */
            const int e = tid + 256 * i;
            const int am = e / BK3, ak = e % BK3; /* A: consecutive threads walk k (row-major A) */
            As[ak][am] = m0 + am < M && k0 + ak < K ? bf(A[(size_t)(m0 + am) * K + k0 + ak]) : 0.0f;
            const int bk = e / BN3, bn = e % BN3;
            Bs[bk][bn] = k0 + bk < K && n0 + bn < N ? bf(B[(size_t)(k0 + bk) * N + n0 + bn]) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK3; k++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) a[i] = As[k][ty * 4 + i], b[i] = Bs[k][tx * 4 + i];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j += 2) gemm_store2(C, M, N, m0 + ty * 4 + i, n0 + tx * 4 + j, acc[i][j], acc[i][j + 1]);
}

// ---- v4, v5: 128x128 tiles, 8x8 per thread, 16-byte loads --------------------------------------

#define BM 128
#define BN 128
#define BK 16

/* 8 bf16 (16 bytes) -> 8 floats. */
__device__ __forceinline__ void unpack8(uint4 u, float *f)
{
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 t = __bfloat1622float2(h[i]);
        f[2 * i] = t.x, f[2 * i + 1] = t.y;
    }
}

/* Loads this thread's 16-byte chunk of the A tile (row tid/2, k (tid%2)*8) and of the B tile (k row
 * tid/16, n (tid%16)*8) with one 128-bit load each; chunks outside the matrix are zero. */
__device__ __forceinline__ void load_chunks(const gbf *A, const gbf *B, int M, int N, int K, int m0, int n0, int k0,
                                            int tid, uint4 *ua, uint4 *ub)
{
    const int am = tid / 2, ak = (tid % 2) * 8, bk = tid / 16, bn = (tid % 16) * 8;
    const uint4 z = make_uint4(0, 0, 0, 0);
    *ua = m0 + am < M && k0 + ak < K ? *(const uint4 *)(A + (size_t)(m0 + am) * K + k0 + ak) : z;
    *ub = k0 + bk < K && n0 + bn < N ? *(const uint4 *)(B + (size_t)(k0 + bk) * N + n0 + bn) : z;
}

/* Stores the chunks as floats: A transposed (As[k][m]), B as is (Bs[k][n], two float4). */
__device__ __forceinline__ void store_chunks(float (*As)[BM], float (*Bs)[BN], int tid, uint4 ua, uint4 ub)
{
    float f[8];
    unpack8(ua, f);
    const int am = tid / 2, ak = (tid % 2) * 8;
#pragma unroll
    for (int i = 0; i < 8; i++) As[ak + i][am] = f[i];
    unpack8(ub, f);
    const int bk = tid / 16, bn = (tid % 16) * 8;
    *(float4 *)&Bs[bk][bn] = make_float4(f[0], f[1], f[2], f[3]);
    *(float4 *)&Bs[bk][bn + 4] = make_float4(f[4], f[5], f[6], f[7]);
}

/* v4: 128-bit loads. 128x128 tile per 256 threads, 8x8 outputs per thread (64 FMAs per 16 values
 * read from shared memory, v3: 16 per 8). Global loads move 8 bf16 per instruction (v3: 1), the
 * shared reads are float4: 4x fewer load instructions for the same bytes, so more issue slots go
 * to FMAs. Thread (ty, tx) owns rows ty*8.. and columns tx*8..: its float4 shared reads of B hit
 * 8 different 16-byte slots per quarter-warp (2-way bank conflicts that v5 removes). */
__global__ void __launch_bounds__(256) gemm_v4_vec_load(const gbf *__restrict__ A, const gbf *__restrict__ B,
                                                        gbf *__restrict__ C, int M, int N, int K)
{
    __shared__ __align__(16) float As[BK][BM];
    __shared__ __align__(16) float Bs[BK][BN];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    float acc[8][8] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        uint4 ua, ub;
        load_chunks(A, B, M, N, K, m0, n0, k0, tid, &ua, &ub);
        store_chunks(As, Bs, tid, ua, ub);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; k++) {
            float a[8], b[8];
            *(float4 *)&a[0] = *(const float4 *)&As[k][ty * 8];
            *(float4 *)&a[4] = *(const float4 *)&As[k][ty * 8 + 4];
            *(float4 *)&b[0] = *(const float4 *)&Bs[k][tx * 8];
            *(float4 *)&b[4] = *(const float4 *)&Bs[k][tx * 8 + 4];
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int j = 0; j < 8; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j += 2) gemm_store2(C, M, N, m0 + ty * 8 + i, n0 + tx * 8 + j, acc[i][j], acc[i][j + 1]);
}

/* Row / column of element (i, j) of a thread's 8x8 micro-tile in the v5/v6 warp tiling: 8 warps as
 * 2 (M) x 4 (N), each warp 64x32; a lane (tr = lane/4, tc = lane%4) owns 2x2 sub-tiles of 4x4 at
 * rows wm*64 + {0,32} + tr*4 and columns wn*32 + {0,16} + tc*4. */
#define WROW(w, lane, i) (((w) / 4) * 64 + ((i) / 4) * 32 + ((lane) / 4) * 4 + ((i) % 4))
#define WCOL(w, lane, j) (((w) % 4) * 32 + ((j) / 4) * 16 + ((lane) % 4) * 4 + ((j) % 4))

/* v5: warp tiling. Same tile and loads as v4, but the 256 threads' micro-tiles are grouped so each
 * warp owns a compact 64x32 region, and each lane's 8x8 is 2x2 sub-tiles of 4x4. A warp's shared
 * reads of one k then touch 8 float4 of A and 4 float4 of B (the rest broadcast): no bank
 * conflicts, and the A/B values a warp needs stay small enough to sit in L1-like broadcast. This
 * is the level at which tensor-core kernels (v7) partition work too. */
__global__ void __launch_bounds__(256) gemm_v5_warp_tile(const gbf *__restrict__ A, const gbf *__restrict__ B,
                                                         gbf *__restrict__ C, int M, int N, int K)
{
    __shared__ __align__(16) float As[BK][BM];
    __shared__ __align__(16) float Bs[BK][BN];
    const int tid = threadIdx.x, w = tid / 32, lane = tid % 32;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    float acc[8][8] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        uint4 ua, ub;
        load_chunks(A, B, M, N, K, m0, n0, k0, tid, &ua, &ub);
        store_chunks(As, Bs, tid, ua, ub);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; k++) {
            float a[8], b[8];
            *(float4 *)&a[0] = *(const float4 *)&As[k][WROW(w, lane, 0)];
            *(float4 *)&a[4] = *(const float4 *)&As[k][WROW(w, lane, 4)];
            *(float4 *)&b[0] = *(const float4 *)&Bs[k][WCOL(w, lane, 0)];
            *(float4 *)&b[4] = *(const float4 *)&Bs[k][WCOL(w, lane, 4)];
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int j = 0; j < 8; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j += 2)
            gemm_store2(C, M, N, m0 + WROW(w, lane, i), n0 + WCOL(w, lane, j), acc[i][j], acc[i][j + 1]);
}

// ---- v6 ---------------------------------------------------------------------------------------

#define APITCH 24  /* bf16 per A row in shared memory: 16 + 8 padding (48 bytes, 16-byte aligned) */
#define BPITCH 136 /* bf16 per B row: 128 + 8 padding */

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* v6: double buffering with cp.async. v4/v5 load a tile into registers, wait for it, convert and
 * store it, and only then compute: the load latency (~1 us from HBM) is exposed every k-step.
 * Here the tiles stay bf16 in two shared buffers filled by cp.async (global -> shared without
 * registers); while the FMAs run on buffer k, the copy of k+1 is in flight. Each thread converts
 * bf16 -> fp32 as it reads shared memory (a shift per value, pairs of k per read). */
__global__ void __launch_bounds__(256) gemm_v6_cp_async(const gbf *__restrict__ A, const gbf *__restrict__ B,
                                                        gbf *__restrict__ C, int M, int N, int K)
{
    __shared__ __align__(16) gbf As[2][BM * APITCH];
    __shared__ __align__(16) gbf Bs[2][BK * BPITCH];
    const int tid = threadIdx.x, w = tid / 32, lane = tid % 32;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int am = tid / 2, ak = (tid % 2) * 8, bk = tid / 16, bn = (tid % 16) * 8;
    const int nk = gemm_cdiv(K, BK);
    auto load = [&](int buf, int k0) {
        const bool va = m0 + am < M && k0 + ak < K, vb = k0 + bk < K && n0 + bn < N;
        cp_async16(&As[buf][am * APITCH + ak], va ? A + (size_t)(m0 + am) * K + k0 + ak : A, va);
        cp_async16(&Bs[buf][bk * BPITCH + bn], vb ? B + (size_t)(k0 + bk) * N + n0 + bn : B, vb);
        cp_async_commit();
    };
    float acc[8][8] = {};
    load(0, 0);
    for (int t = 0; t < nk; t++) {
        const int buf = t & 1;
        if (t + 1 < nk) {
            load(buf ^ 1, (t + 1) * BK); /* buffer buf^1 was last read in step t-1, before its closing barrier */
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const gbf *as = As[buf], *bs = Bs[buf];
#pragma unroll
        for (int k = 0; k < BK; k += 2) {
            float2 a[8];
            float b0[8], b1[8];
#pragma unroll
            for (int i = 0; i < 8; i++)
                a[i] = __bfloat1622float2(*(const __nv_bfloat162 *)&as[WROW(w, lane, i) * APITCH + k]);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int c = WCOL(w, lane, 4 * h);
                const uint2 u0 = *(const uint2 *)&bs[k * BPITCH + c], u1 = *(const uint2 *)&bs[(k + 1) * BPITCH + c];
                const __nv_bfloat162 *p0 = (const __nv_bfloat162 *)&u0, *p1 = (const __nv_bfloat162 *)&u1;
#pragma unroll
                for (int q = 0; q < 2; q++) {
                    float2 x = __bfloat1622float2(p0[q]), y = __bfloat1622float2(p1[q]);
                    b0[4 * h + 2 * q] = x.x, b0[4 * h + 2 * q + 1] = x.y;
                    b1[4 * h + 2 * q] = y.x, b1[4 * h + 2 * q + 1] = y.y;
                }
            }
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int j = 0; j < 8; j++) acc[i][j] = fmaf(a[i].y, b1[j], fmaf(a[i].x, b0[j], acc[i][j]));
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j += 2)
            gemm_store2(C, M, N, m0 + WROW(w, lane, i), n0 + WCOL(w, lane, j), acc[i][j], acc[i][j + 1]);
}

// ---- host entry points --------------------------------------------------------------------------

#define LAUNCHED() return (int)cudaGetLastError()

int gemm_run_v1(GEMM_RUN_ARGS)
{
    if (int e = gemm_check(A, B, C, M, N, K, false)) return e;
    dim3 blk(32, 8), grid(gemm_cdiv(N, 32), gemm_cdiv(M, 8));
    gemm_v1_naive<<<grid, blk, 0, (cudaStream_t)stream>>>((const gbf *)A, (const gbf *)B, (gbf *)C, M, N, K);
    LAUNCHED();
}
int gemm_run_v2(GEMM_RUN_ARGS)
{
    if (int e = gemm_check(A, B, C, M, N, K, false)) return e;
    dim3 blk(T2, T2), grid(gemm_cdiv(N, T2), gemm_cdiv(M, T2));
    gemm_v2_smem_tile<<<grid, blk, 0, (cudaStream_t)stream>>>((const gbf *)A, (const gbf *)B, (gbf *)C, M, N, K);
    LAUNCHED();
}
int gemm_run_v3(GEMM_RUN_ARGS)
{
    if (int e = gemm_check(A, B, C, M, N, K, false)) return e;
    dim3 grid(gemm_cdiv(N, BN3), gemm_cdiv(M, BM3));
    gemm_v3_reg_tile<<<grid, 256, 0, (cudaStream_t)stream>>>((const gbf *)A, (const gbf *)B, (gbf *)C, M, N, K);
    LAUNCHED();
}
int gemm_run_v4(GEMM_RUN_ARGS)
{
    if (int e = gemm_check(A, B, C, M, N, K, true)) return e;
    dim3 grid(gemm_cdiv(N, BN), gemm_cdiv(M, BM));
    gemm_v4_vec_load<<<grid, 256, 0, (cudaStream_t)stream>>>((const gbf *)A, (const gbf *)B, (gbf *)C, M, N, K);
    LAUNCHED();
}
int gemm_run_v5(GEMM_RUN_ARGS)
{
    if (int e = gemm_check(A, B, C, M, N, K, true)) return e;
    dim3 grid(gemm_cdiv(N, BN), gemm_cdiv(M, BM));
    gemm_v5_warp_tile<<<grid, 256, 0, (cudaStream_t)stream>>>((const gbf *)A, (const gbf *)B, (gbf *)C, M, N, K);
    LAUNCHED();
}
int gemm_run_v6(GEMM_RUN_ARGS)
{
    if (int e = gemm_check(A, B, C, M, N, K, true)) return e;
    dim3 grid(gemm_cdiv(N, BN), gemm_cdiv(M, BM));
    gemm_v6_cp_async<<<grid, 256, 0, (cudaStream_t)stream>>>((const gbf *)A, (const gbf *)B, (gbf *)C, M, N, K);
    LAUNCHED();
}
