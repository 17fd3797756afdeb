/* softmax.h - the softmax ladder: y[r][c] = exp(x[r][c] - max_r) / sum_c exp(x[r][c] - max_r) over
 * the rows of a row-major matrix, from naive to bandwidth-bound.
 *
 * Interface shared by every version (the driver src/kernels/ladder.c and the tests run them alike):
 *   fn(stream, x, y, rows, cols) -> 0 (cudaSuccess) or a cudaError_t value
 *     stream   a cudaStream_t (void * so this header needs no CUDA include)
 *     x, y     rows * cols device elements, fp32 or, where .bf16 is set, bf16 (both x and y)
 * Invariants: 1. rows >= 1 and 1 <= cols <= SOFTMAX_MAX_COLS, else cudaErrorInvalidValue. 2. y is
 * written completely and x is only read (x == y is not supported). 3. Asynchronous on the stream,
 * deterministic (no atomics).
 */
#ifndef AIINFRA_KERNELS_SOFTMAX_H
#define AIINFRA_KERNELS_SOFTMAX_H

#ifdef __cplusplus
extern "C" {
#endif

#define SOFTMAX_MAX_COLS (1 << 20)

typedef int (*softmax_fn)(void *stream, const void *x, void *y, int rows, int cols);

typedef struct softmax_version {
    const char *name; /* "v1_naive" ... */
    const char *desc; /* one line: what this step changes */
    int bf16;         /* 1: x and y are bf16; 0: fp32 */
    softmax_fn fn;
} softmax_version;

extern const softmax_version softmax_versions[];
extern const int softmax_n_versions;

#ifdef __cplusplus
}
#endif

#endif
