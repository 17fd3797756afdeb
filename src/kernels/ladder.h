/* ladder.h - the kernel-ladder driver: runs every version of an operator's ladder (LADDER_OPS) on
 * fresh seeded random inputs, checks each against a CPU reference computed in double, times it with
 * CUDA events (median, L2 flushed between runs) and measures the copy-bandwidth ceiling in the same
 * run (and, for the ladders that compare with a library, that library on the same shape: ref_ms).
 * Fills a report; printing (table, JSON) is the CLI's job (src/tools/cmd_kernels.c). One file per
 * ladder: src/kernels/ladder_<op>.c, the shared parts in ladder_internal.h.
 *
 * Error measures and bounds (stated here, checked in ladder.c, tested in test_cuda_ladders.c):
 *   reduce   |sum_gpu - sum_ref| / sum |x_i|   (conditioning-aware relative error)   fp32: 1e-5
 *   softmax  max over rows of ||y_r - ref_r||_2 / ||ref_r||_2                        fp32: 1e-5, bf16: 1e-2
 * Rates: bytes = the minimum traffic (reduce 4n; softmax rows * cols * (input + output element size));
 * FLOPs = reduce n, softmax 5 per element (max, subtract, exp, add, scale; exp counted as one).
 * Without CUDA (built without nvcc, or no device) ladder_device_available says why and ladder_run
 * returns AI_ERR_UNSUPPORTED.
 */
#ifndef AIINFRA_KERNELS_LADDER_H
#define AIINFRA_KERNELS_LADDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "aiinfra/status.h"

#define LADDER_TOL_F32 1e-5
#define LADDER_TOL_BF16 1e-2

/* The ladders ladder_run knows, in the order "all" runs them. */
#define LADDER_OPS "reduce", "softmax", "attention"

typedef struct ladder_result {
    char op[16];       /* one of LADDER_OPS */
    char version[32];  /* "v1_atomic" ... */
    char desc[128];
    char shape[48];    /* "n=67108864", "32768x1024" */
    char dtype[8];     /* "f32" | "bf16" */
    double ms;         /* median time of one call */
    double bytes;      /* minimum bytes moved */
    double flops;
    double gbps;       /* bytes / time, GB/s (1e9) */
    double gflops;     /* flops / time */
    double intensity;  /* flops / bytes */
    double frac_copy;  /* gbps / copy ceiling */
    char ref_name[24]; /* library measured on the same shape in the same run ("cublasLt"), or "" */
    double ref_ms;     /* its median time (0: none) */
    double frac_ref;   /* ref_ms / ms: > 1 means faster than the library */
    double err;        /* the error measure above */
    double tol;        /* its bound */
    bool ok;           /* err <= tol (NaN fails) */
} ladder_result;

typedef struct ladder_report {
    char device[256];
    double copy_gbps;      /* device-to-device copy of 2 GiB, bytes read + written / time */
    double gemm_gflops;    /* cuBLASLt bf16 GEMM ceiling measured by a ladder that needs it, else 0 */
    ladder_result *rows;
    int n_rows, cap;
} ladder_report;

typedef struct ladder_opts {
    int reps;      /* timed runs per version (0: 20; at least 3) */
    uint64_t seed; /* 0: 1 */
    bool small;    /* small sizes and a 64 MiB copy ceiling (tests): numbers are not meaningful */
} ladder_opts;

/* true when op is one of LADDER_OPS or "all". */
bool ladder_op_known(const char *op);

/* true when a CUDA device is usable; otherwise why (one line) in why[len]. */
bool ladder_device_available(char *why, size_t len);

/* Runs the ladder(s) of op (one of LADDER_OPS or "all") and appends one row per version and shape
 * to rep (zero it first; free with ladder_report_free). A version that fails its error bound still
 * gets its row (ok = false); a CUDA error or a bad op is an error. */
ai_status ladder_run(const char *op, const ladder_opts *o, ladder_report *rep, ai_err *err);
void ladder_report_free(ladder_report *rep);

#endif
