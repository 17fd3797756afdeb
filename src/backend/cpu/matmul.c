/* matmul.c - ISA dispatch and the threaded Y = X W^T over any weight dtype.
 *
 * Work split:
 *  1. The activations are quantized once per call (one task per token) into the caller's work
 *     buffer, so every weight row is multiplied with ready-made q8 rows.
 *  2. Output rows are cut into tasks of at most ROWS_PER_TASK rows and at most TASK_BYTES of
 *     weights; threads claim tasks from the pool's counter. Each task walks its rows once per
 *     tile of TOK_TILE tokens: the task's weights (<= TASK_BYTES) and the token tile's activation
 *     rows stay in L1/L2, so during prefill each weight byte comes from memory about once instead
 *     of once per token. For decode (n_tok = 1) it is a plain streaming matvec.
 *  3. y is written at [t * n_out + r]: each (t, r) by exactly one task, so no synchronisation.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "backend/cpu/kernels.h"

#define ROWS_PER_TASK 64
#define TASK_BYTES (64 * 1024)
#define TOK_TILE 16

// --- ISA selection

#ifdef CPU_HAVE_AVX2_TABLE
/* CPUID answers, cached: CPUID traps to the hypervisor in a VM (~1-2 us) and cpu_isa_available runs
 * on every cpu_matmul (~200 per decoded token). Each cache is a fact about the CPU (or, for the
 * override, the process environment), written with the same value by whichever thread gets there
 * first; 0 = not yet known, 1 = yes, 2 = no. */
static bool cpuid_cached(atomic_int *cache, bool (*probe)(void))
{
    int f = atomic_load_explicit(cache, memory_order_relaxed);
    if (f == 0) {
        f = probe() ? 1 : 2;
        atomic_store_explicit(cache, f, memory_order_relaxed);
    }
    return f == 1;
}

/* F16C is CPUID.1:ECX bit 29 (clang's __builtin_cpu_supports does not know "f16c", gcc 12's
 * answers 0 on CPUs that have it). */
static bool probe_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}

/* AVX-512 F (CPUID.7.0:EBX bit 16), BW (bit 30) and VL (bit 31), and the OS saving the opmask and
 * zmm state: OSXSAVE (CPUID.1:ECX bit 27) and XCR0 bits 1, 2, 5, 6, 7 (xgetbv(0) & 0xe6). */
static bool probe_avx512(void)
{
    unsigned a, b, c, d, lo, hi;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    if ((lo & 0xe6) != 0xe6) return false;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const unsigned need = (1u << 16) | (1u << 30) | (1u << 31);
    return (b & need) == need;
}
#endif

bool cpu_isa_available(cpu_isa isa)
{
    switch (isa) {
    case CPU_ISA_SCALAR: return true;
#ifdef CPU_HAVE_AVX2_TABLE
    case CPU_ISA_AVX2: {
        static atomic_int f16c;
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpuid_cached(&f16c, probe_f16c);
    }
    case CPU_ISA_AVX512: {
        static atomic_int avx512;
        return cpu_isa_available(CPU_ISA_AVX2) && cpuid_cached(&avx512, probe_avx512);
    }
#endif
    default: return false;
    }
}

cpu_isa cpu_isa_best(void)
{
    /* AIINFRA_CPU_ISA, read once: 0 = not yet read, else 1 + the named isa (1 + CPU_ISA_COUNT: none) */
    static atomic_int pinned;
    int p = atomic_load_explicit(&pinned, memory_order_relaxed);
    if (p == 0) {
        const char *v = getenv("AIINFRA_CPU_ISA");
        p = 1 + CPU_ISA_COUNT;
        for (int i = 0; v && i < CPU_ISA_COUNT; i++)
            if (strcmp(v, cpu_isa_name((cpu_isa)i)) == 0) p = 1 + i;
        atomic_store_explicit(&pinned, p, memory_order_relaxed);
    }
    if (p <= CPU_ISA_COUNT && cpu_isa_available((cpu_isa)(p - 1))) return (cpu_isa)(p - 1);
    for (int i = CPU_ISA_COUNT - 1; i > 0; i--)
        if (cpu_isa_available((cpu_isa)i)) return (cpu_isa)i;
    return CPU_ISA_SCALAR;
}

const char *cpu_isa_name(cpu_isa isa)
{
    switch (isa) {
    case CPU_ISA_SCALAR: return "scalar";
    case CPU_ISA_AVX2: return "avx2";
    case CPU_ISA_AVX512: return "avx512";
    default: return "?";
    }
}

const cpu_kernels *cpu_kernels_for(cpu_isa isa)
{
    if (!cpu_isa_available(isa)) return NULL;
#ifdef CPU_HAVE_AVX2_TABLE
    if (isa == CPU_ISA_AVX2) return &cpu_kernels_avx2;
    if (isa == CPU_ISA_AVX512) return &cpu_kernels_avx512;
#endif
    return &cpu_kernels_scalar;
}

dtype cpu_act_dtype(dtype wtype)
{
    switch (wtype) {
    case DTYPE_F32: case DTYPE_F16: case DTYPE_BF16: return DTYPE_F32;
    case DTYPE_Q8_0: case DTYPE_Q4_0: return DTYPE_Q8_0;
    case DTYPE_Q4_1: return DTYPE_Q8_1;
    default: return DTYPE_COUNT;
    }
}

cpu_dot_fn cpu_dot_get(cpu_isa isa, dtype wtype)
{
    const cpu_kernels *k = cpu_kernels_for(isa);
    if (!k || !dtype_get(wtype)) return NULL;
    return k->dot[wtype];
}

ai_status cpu_quantize_act(cpu_isa isa, dtype act_type, const float *x, void *dst, int64_t n, ai_err *err)
{
    const cpu_kernels *k = cpu_kernels_for(isa);
    if (!k) return ai_err_set(err, AI_ERR_UNSUPPORTED, "cpu: isa %s is not available on this CPU", cpu_isa_name(isa));
    size_t bytes;
    ai_status st = dtype_row_bytes(act_type, n, &bytes, err);
    if (st) return st;
    switch (act_type) {
    case DTYPE_F32: memcpy(dst, x, bytes); return AI_OK;
    case DTYPE_Q8_0: k->quantize_q8_0(x, dst, n / 32); return AI_OK;
    case DTYPE_Q8_1: k->quantize_q8_1(x, dst, n / 32); return AI_OK;
    default:
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "cpu: %s is not an activation dtype", dtype_name(act_type));
    }
}

// --- matmul

ai_status cpu_matmul_work_size(dtype wtype, int64_t n_in, int64_t n_tok, size_t *out, ai_err *err)
{
    dtype at = cpu_act_dtype(wtype);
    if (at == DTYPE_COUNT)
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "cpu matmul: no kernel for %s weights", dtype_name(wtype));
    if (n_tok < 0) return ai_err_set(err, AI_ERR_INVALID, "cpu matmul: n_tok %lld < 0", (long long)n_tok);
    if (at == DTYPE_F32) { *out = 0; return AI_OK; }
    size_t row;
    ai_status st = dtype_row_bytes(at, n_in, &row, err);
    if (st) return ai_err_prefix(err, "cpu matmul: n_in");
    if (n_tok > 0 && row > SIZE_MAX / (uint64_t)n_tok)
        return ai_err_set(err, AI_ERR_RANGE, "cpu matmul: work size overflows (%lld tokens)", (long long)n_tok);
    *out = row * (size_t)n_tok;
    return AI_OK;
}

typedef struct mm_job {
    const cpu_kernels *k;
    cpu_tile_fn tile;
    dtype act;
    const uint8_t *w;      /* (n_out, w_row) bytes */
    size_t w_row;
    const float *x;        /* (n_tok, n_in) */
    uint8_t *xq;           /* (n_tok, x_row) bytes: activations in `act` */
    size_t x_row;
    float *y;              /* (n_tok, n_out) */
    int64_t n_out, n_in, n_tok, rows_per_task;
} mm_job;

static void quantize_task(void *ctx, int64_t t, int thread)
{
    mm_job *j = ctx;
    if (j->act == DTYPE_Q8_0) j->k->quantize_q8_0(j->x + t * j->n_in, (dtype_block_q8_0 *)(j->xq + t * j->x_row), j->n_in / 32);
    else j->k->quantize_q8_1(j->x + t * j->n_in, (dtype_block_q8_1 *)(j->xq + t * j->x_row), j->n_in / 32);
}

static void rows_task(void *ctx, int64_t task, int thread)
{
    mm_job *j = ctx;
    const int64_t r0 = task * j->rows_per_task;
    const int64_t r1 = r0 + j->rows_per_task < j->n_out ? r0 + j->rows_per_task : j->n_out;
    for (int64_t t0 = 0; t0 < j->n_tok; t0 += TOK_TILE) {
        const int64_t nt = t0 + TOK_TILE < j->n_tok ? TOK_TILE : j->n_tok - t0;
        j->tile(j->n_in, j->w + (size_t)r0 * j->w_row, j->w_row, (int)(r1 - r0), j->xq + (size_t)t0 * j->x_row,
                j->x_row, (int)nt, j->y + t0 * j->n_out + r0, (size_t)j->n_out);
    }
}

ai_status cpu_matmul(threadpool *pool, cpu_isa isa, dtype wtype, const void *w, int64_t n_out, int64_t n_in,
                     const float *x, int64_t n_tok, float *y, void *work, size_t work_size, ai_err *err)
{
    const cpu_kernels *k = cpu_kernels_for(isa);
    if (!k) return ai_err_set(err, AI_ERR_UNSUPPORTED, "cpu matmul: isa %s is not available on this CPU", cpu_isa_name(isa));
    if (n_out < 0 || n_in < 0 || n_tok < 0)
        return ai_err_set(err, AI_ERR_INVALID, "cpu matmul: negative size (n_out %lld, n_in %lld, n_tok %lld)",
                          (long long)n_out, (long long)n_in, (long long)n_tok);
    size_t need, w_row;
    ai_status st = cpu_matmul_work_size(wtype, n_in, n_tok, &need, err);
    if (st) return st;
    if (dtype_row_bytes(wtype, n_in, &w_row, err)) return ai_err_prefix(err, "cpu matmul: weight row");
    if (n_out == 0 || n_tok == 0) return AI_OK;
    if (!w || !x || !y) return ai_err_set(err, AI_ERR_INVALID, "cpu matmul: NULL w, x or y");
    if (work_size < need || (need && !work))
        return ai_err_set(err, AI_ERR_INVALID, "cpu matmul: work buffer of %zu bytes, %zu needed", work_size, need);
    mm_job j = {
        .k = k, .tile = k->tile[wtype], .act = cpu_act_dtype(wtype), .w = w, .w_row = w_row, .x = x,
        .y = y, .n_out = n_out, .n_in = n_in, .n_tok = n_tok,
    };
    if (j.act == DTYPE_F32) {
        j.xq = (uint8_t *)(uintptr_t)x; /* read only */
        j.x_row = (size_t)n_in * sizeof(float);
    } else {
        j.xq = work;
        j.x_row = need / (size_t)n_tok;
        threadpool_run(pool, n_tok, quantize_task, &j);
    }
    /* tasks: bounded by ROWS_PER_TASK and TASK_BYTES, and at least ~4 per thread for balance */
    int64_t per = ROWS_PER_TASK;
    if (w_row > 0 && (int64_t)(TASK_BYTES / w_row) < per) per = (int64_t)(TASK_BYTES / w_row);
    int64_t balance = (n_out + 4 * threadpool_n_threads(pool) - 1) / (4 * threadpool_n_threads(pool));
    if (balance < per) per = balance;
    if (per < 1) per = 1;
    j.rows_per_task = per;
    threadpool_run(pool, (n_out + per - 1) / per, rows_task, &j);
    return AI_OK;
}
