/* bench_scheduler.c - the scheduler's own CPU time per engine step (schedule + postprocess).
 *
 * Workload (the serving issue's GPU benchmark shape): N requests (default 1000) queued at once,
 * input 512 / output 256 tokens, max_num_seqs 256, token budget 8192, block size 16, a pool of
 * 32768 blocks (what an H200 holds for Llama-3-8B at bf16, roughly). No model: every entry with
 * `sample` gets a token from a cheap RNG; a request finishes after `output` tokens. Reported: the
 * mean, p50, p99 and max of schedule+postprocess per step over the steps with all max_num_seqs
 * sequences running (the steady state), and over all steps. Debug invariant checks are off
 * (skip_debug_checks), as a server would run them.
 *
 *   build/bench/bench_scheduler [requests] [max_num_seqs] [input] [output] [prefix_cache 0|1]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aiinfra/scheduler.h"

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, uint64_t *v, size_t n)
{
    if (!n) {
        printf("%-28s no steps\n", what);
        return;
    }
    qsort(v, n, sizeof *v, cmp_u64);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += (double)v[i];
    printf("%-28s %6zu steps  mean %7.1f us  p50 %7.1f us  p99 %7.1f us  max %7.1f us\n", what, n,
           sum / (double)n / 1e3, (double)v[n / 2] / 1e3, (double)v[(size_t)((double)n * 0.99)] / 1e3,
           (double)v[n - 1] / 1e3);
}

int main(int argc, char **argv)
{
    int n_req = argc > 1 ? atoi(argv[1]) : 1000;
    int max_seqs = argc > 2 ? atoi(argv[2]) : 256;
    int in_len = argc > 3 ? atoi(argv[3]) : 512;
    int out_len = argc > 4 ? atoi(argv[4]) : 256;
    int cache = argc > 5 ? atoi(argv[5]) : 1;
    if (n_req < 1 || max_seqs < 1 || in_len < 1 || out_len < 1) {
        fprintf(stderr, "usage: %s [requests] [max_num_seqs] [input] [output] [prefix_cache 0|1]\n", argv[0]);
        return 2;
    }
    scheduler_config cfg = { .num_blocks = 32768, .block_size = 16, .max_num_batched_tokens = 8192,
                             .max_num_seqs = max_seqs, .enable_prefix_cache = cache != 0,
                             .skip_debug_checks = true };
    if (cfg.max_num_batched_tokens < max_seqs) cfg.max_num_batched_tokens = max_seqs;
    scheduler *s;
    ai_err err = { 0 };
    if (scheduler_init(&s, &cfg, &err) != AI_OK) {
        fprintf(stderr, "bench_scheduler: %s\n", err.msg);
        return 1;
    }
    uint64_t x = 0x9e3779b97f4a7c15ull;
    int32_t *prompt = malloc((size_t)in_len * sizeof *prompt);
    int64_t *ids = malloc((size_t)n_req * sizeof *ids);
    int32_t *sampled = malloc((size_t)cfg.max_num_batched_tokens * sizeof *sampled);
    size_t cap = 1 << 16, n_all = 0, n_full = 0;
    uint64_t *all = malloc(cap * sizeof *all), *full = malloc(cap * sizeof *full);
    if (!prompt || !ids || !sampled || !all || !full) return 1;
    for (int r = 0; r < n_req; r++) {
        for (int i = 0; i < in_len; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            prompt[i] = (int32_t)(x % 128000);
        }
        if (scheduler_add(s, prompt, in_len, &ids[r], &err) != AI_OK) {
            fprintf(stderr, "bench_scheduler: %s\n", err.msg);
            return 1;
        }
    }
    int finished = 0;
    uint64_t tokens = 0;
    while (finished < n_req) {
        sched_step st;
        scheduler_stats before = scheduler_get_stats(s);
        if (scheduler_schedule(s, &st, &err) != AI_OK) {
            fprintf(stderr, "bench_scheduler: %s\n", err.msg);
            return 1;
        }
        int running = scheduler_get_stats(s).num_running;
        for (int32_t e = 0; e < st.n_entries; e++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            sampled[e] = (int32_t)(x % 128000);
        }
        if (scheduler_postprocess(s, &st, sampled, &err) != AI_OK) {
            fprintf(stderr, "bench_scheduler: %s\n", err.msg);
            return 1;
        }
        scheduler_stats after = scheduler_get_stats(s);
        uint64_t dt = (after.schedule_ns - before.schedule_ns) + (after.postprocess_ns - before.postprocess_ns);
        tokens += (uint64_t)st.n_tokens;
        if (n_all == cap) {
            cap *= 2;
            all = realloc(all, cap * sizeof *all);
            full = realloc(full, cap * sizeof *full);
            if (!all || !full) return 1;
        }
        all[n_all++] = dt;
        if (running == max_seqs) full[n_full++] = dt;
        /* the caller's length check (not timed: it is the caller's work) */
        for (int32_t e = 0; e < st.n_entries; e++) {
            sched_seq_info info;
            if (!st.entries[e].sample || scheduler_seq_info(s, st.entries[e].seq_id, &info, &err) != AI_OK) continue;
            if (info.state == SCHED_RUNNING && info.n_tokens - info.n_prompt >= out_len) {
                scheduler_finish(s, st.entries[e].seq_id, SCHED_FINISH_LENGTH, &err);
                scheduler_release(s, st.entries[e].seq_id, &err);
                finished++;
            }
        }
        for (int32_t k = 0; k < st.n_finished; k++) {
            scheduler_release(s, st.finished[k], &err);
            finished++;
        }
    }
    scheduler_stats stats = scheduler_get_stats(s);
    printf("bench_scheduler: %d requests, input %d, output %d, max_num_seqs %d, budget %d, block %d, %d blocks, "
           "prefix cache %s\n", n_req, in_len, out_len, max_seqs, cfg.max_num_batched_tokens, cfg.block_size,
           cfg.num_blocks, cache ? "on" : "off");
    printf("  %llu steps, %llu tokens computed, %llu generated, %llu preemptions\n", (unsigned long long)stats.steps,
           (unsigned long long)tokens, (unsigned long long)stats.generation_tokens,
           (unsigned long long)stats.preemptions);
    char label[64];
    snprintf(label, sizeof label, "steps with %d running:", max_seqs);
    report(label, full, n_full);
    report("all steps:", all, n_all);
    free(prompt);
    free(ids);
    free(sampled);
    free(all);
    free(full);
    scheduler_free(s);
    return 0;
}
