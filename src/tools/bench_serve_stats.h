/* bench_serve_stats.h - latency summaries, SLO goodput and the printed report of `aiinfra bench serve`.
 *
 * Percentiles interpolate linearly between the two nearest ranks (numpy's default "linear"
 * method, which is what vLLM's `bench serve` reports), so the numbers line up with its output.
 */
#ifndef AIINFRA_BENCH_SERVE_STATS_H
#define AIINFRA_BENCH_SERVE_STATS_H

#include <stdbool.h>
#include <stddef.h>

/* Mean / median / standard deviation (population) / p99 of n samples; all 0 when n == 0. */
typedef struct bs_summary {
    size_t n;
    double mean, median, std, p99;
} bs_summary;

/* p-th percentile (0..100) of n ascending samples, linear interpolation; 0 when n == 0. */
double bs_percentile(const double *sorted, size_t n, double p);

/* Sorts v (n) in place and summarizes it. */
void bs_summarize(double *v, size_t n, bs_summary *out);

/* Service-level objectives in ms; a value <= 0 is "not given". */
typedef struct bs_slo {
    double ttft_ms, tpot_ms, e2el_ms;
} bs_slo;

/* Parses one "ttft:MS" | "tpot:MS" | "e2el:MS" item into slo; false on anything else. */
bool bs_slo_parse(const char *item, bs_slo *slo);

/* True when at least one objective is given. */
bool bs_slo_any(const bs_slo *slo);

/* True when a request meets every given objective. tpot_ms is 0 for one-token outputs (as vLLM). */
bool bs_slo_met(const bs_slo *slo, double ttft_ms, double tpot_ms, double e2el_ms);

/* What one finished request leaves behind. */
typedef struct bs_result {
    bool ok;                /* completed (see cmd_bench_serve.c invariant 1) */
    double ttft, e2el;      /* seconds */
    long out_tokens;        /* usage.completion_tokens, else non-empty chunks */
    long prompt_tokens;     /* usage.prompt_tokens, else ceil(prompt chars / 4) */
    bool prompt_from_usage;
} bs_result;

/* A failure reason and how many requests failed with it. */
typedef struct bs_errkind {
    char what[96];
    int count;
} bs_errkind;

/* The numbers of one run; latencies in ms. */
typedef struct bs_metrics {
    int num_prompts, completed, failed, good, prompt_from_usage;
    int peak_concurrency; /* most requests in flight at once (filled by the caller) */
    double duration; /* s: start of the run to the last finished request */
    long long total_input, total_output;
    double request_throughput, request_goodput, output_throughput, total_token_throughput;
    bs_summary ttft, tpot, itl, e2el;
} bs_metrics;

/* Computes m from n results and every inter-token gap (seconds; sorted in place). */
void bs_metrics_compute(const bs_result *res, int n, double *itl_s, size_t n_itl, const bs_slo *slo,
                        double duration, bs_metrics *m);

/* What the run was asked to do (printed with the metrics). */
typedef struct bs_config {
    const char *url, *endpoint, *model, *dataset;
    double request_rate; /* INFINITY = all at once */
    int max_concurrency; /* 0 = unlimited */
    bs_slo slo;
    const bs_errkind *errs;
    int n_errs;
} bs_config;

/* vLLM-style table, or (json) one JSON object, on stdout. */
void bs_report_print(const bs_config *c, const bs_metrics *m, bool json);

#endif
