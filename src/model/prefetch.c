/* prefetch.c - bring the mmapped weights into memory before the first forward.
 *
 * Weights are mmapped, so "loading" a model costs nothing up front and the first forward pays a page
 * fault for every 4 KiB of weights instead - seconds of silent stall for a multi-GiB model. Reading
 * one byte per page here (after posix_madvise(WILLNEED), which lets the kernel read ahead) moves
 * that cost to load time, where the CLI can show progress. Nothing is copied.
 */
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "model/model_internal.h"

uint64_t model_weight_bytes(const model *m)
{
    uint64_t total = 0;
    model_src_tensor t;
    for (uint64_t i = 0; model_src_at(m, i, &t); i++) total += t.data ? t.nbytes : 0;
    return total;
}

void model_prefetch(const model *m, model_progress_fn progress, void *user)
{
    const uint64_t total = model_weight_bytes(m), step = total / 100 + 1;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE) > 0 ? (uintptr_t)sysconf(_SC_PAGESIZE) : 4096;
    uint64_t done = 0, next_report = 0;
    volatile unsigned char sink = 0;
    model_src_tensor t;
    for (uint64_t i = 0; model_src_at(m, i, &t); i++) {
        if (!t.data || !t.nbytes) continue;
        const unsigned char *p = t.data;
        uintptr_t a = (uintptr_t)p & ~(page - 1);
        posix_madvise((void *)a, (uintptr_t)p + t.nbytes - a, POSIX_MADV_WILLNEED);
        for (uint64_t off = 0; off < t.nbytes; off += page) {
            sink ^= p[off];
            if (progress && done + off >= next_report) {
                progress(user, done + off, total);
                next_report = done + off + step;
            }
        }
        done += t.nbytes;
    }
    (void)sink;
    if (progress) progress(user, total, total);
}
