/* bench_serve_stats.c - percentiles, summaries, goodput and the report of `aiinfra bench serve`.
 *
 * Invariants:
 *   1. bs_percentile reads only sorted input; p is clamped to [0, 100].
 *   2. Empty sample sets summarize to all zeros (a run where every request failed still prints).
 */
#include "tools/bench_serve_stats.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tools/cli.h"

double bs_percentile(const double *sorted, size_t n, double p)
{
    if (n == 0) return 0.0;
    if (p < 0) p = 0;
    if (p > 100) p = 100;
    double rank = p / 100.0 * (double)(n - 1);
    size_t lo = (size_t)floor(rank);
    size_t hi = lo + 1 < n ? lo + 1 : lo;
    double frac = rank - (double)lo;
    return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void bs_summarize(double *v, size_t n, bs_summary *out)
{
    memset(out, 0, sizeof *out);
    out->n = n;
    if (n == 0) return;
    qsort(v, n, sizeof *v, cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += v[i];
    out->mean = sum / (double)n;
    double var = 0;
    for (size_t i = 0; i < n; i++) var += (v[i] - out->mean) * (v[i] - out->mean);
    out->std = sqrt(var / (double)n);
    out->median = bs_percentile(v, n, 50);
    out->p99 = bs_percentile(v, n, 99);
}

bool bs_slo_parse(const char *item, bs_slo *slo)
{
    static const char *const names[] = {"ttft", "tpot", "e2el"};
    double *dst[] = {&slo->ttft_ms, &slo->tpot_ms, &slo->e2el_ms};
    const char *colon = strchr(item, ':');
    if (!colon) return false;
    for (int k = 0; k < 3; k++) {
        size_t len = strlen(names[k]);
        double v;
        if ((size_t)(colon - item) == len && !strncmp(item, names[k], len) &&
            cli_parse_num(colon + 1, 1e-9, 1e12, &v)) {
            *dst[k] = v;
            return true;
        }
    }
    return false;
}

bool bs_slo_any(const bs_slo *slo)
{
    return slo->ttft_ms > 0 || slo->tpot_ms > 0 || slo->e2el_ms > 0;
}

bool bs_slo_met(const bs_slo *slo, double ttft_ms, double tpot_ms, double e2el_ms)
{
    if (slo->ttft_ms > 0 && ttft_ms > slo->ttft_ms) return false;
    if (slo->tpot_ms > 0 && tpot_ms > slo->tpot_ms) return false;
    if (slo->e2el_ms > 0 && e2el_ms > slo->e2el_ms) return false;
    return true;
}

void bs_metrics_compute(const bs_result *res, int n, double *itl_s, size_t n_itl, const bs_slo *slo,
                        double duration, bs_metrics *m)
{
    memset(m, 0, sizeof *m);
    m->num_prompts = n;
    m->duration = duration;
    double *v = malloc(3 * (size_t)(n ? n : 1) * sizeof *v);
    double *ttft = v, *tpot = v ? v + n : NULL, *e2el = v ? v + 2 * n : NULL;
    int n_tpot = 0;
    for (int i = 0; i < n; i++) {
        const bs_result *r = &res[i];
        if (!r->ok) continue;
        double tpot_ms = r->out_tokens > 1 ? (r->e2el - r->ttft) * 1e3 / (double)(r->out_tokens - 1) : 0;
        if (v) {
            ttft[m->completed] = r->ttft * 1e3;
            e2el[m->completed] = r->e2el * 1e3;
            if (r->out_tokens > 1) tpot[n_tpot++] = tpot_ms;
        }
        m->completed++;
        m->total_input += r->prompt_tokens;
        m->total_output += r->out_tokens;
        m->prompt_from_usage += r->prompt_from_usage;
        if (bs_slo_met(slo, r->ttft * 1e3, tpot_ms, r->e2el * 1e3)) m->good++;
    }
    m->failed = n - m->completed;
    if (v) {
        bs_summarize(ttft, (size_t)m->completed, &m->ttft);
        bs_summarize(tpot, (size_t)n_tpot, &m->tpot);
        bs_summarize(e2el, (size_t)m->completed, &m->e2el);
    }
    free(v);
    for (size_t i = 0; i < n_itl; i++) itl_s[i] *= 1e3;
    bs_summarize(itl_s, n_itl, &m->itl);
    if (duration > 0) {
        m->request_throughput = m->completed / duration;
        m->request_goodput = m->good / duration;
        m->output_throughput = (double)m->total_output / duration;
        m->total_token_throughput = (double)(m->total_input + m->total_output) / duration;
    }
}

static const struct {
    const char *key, *title, *label; /* JSON key stem, table section, table label */
    size_t off;
} latency_rows[] = {
    {"ttft", "Time to First Token", "TTFT", offsetof(bs_metrics, ttft)},
    {"tpot", "Time per Output Token (excl. 1st token)", "TPOT", offsetof(bs_metrics, tpot)},
    {"itl", "Inter-token Latency", "ITL", offsetof(bs_metrics, itl)},
    {"e2el", "End-to-end Latency", "E2EL", offsetof(bs_metrics, e2el)},
};

static void print_json(const bs_config *c, const bs_metrics *m)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "backend", "openai");
    cJSON_AddStringToObject(j, "base_url", c->url);
    cJSON_AddStringToObject(j, "endpoint", c->endpoint);
    if (c->model) cJSON_AddStringToObject(j, "model_id", c->model);
    else cJSON_AddNullToObject(j, "model_id");
    cJSON_AddStringToObject(j, "dataset", c->dataset);
    cJSON_AddNumberToObject(j, "num_prompts", m->num_prompts);
    if (isfinite(c->request_rate)) cJSON_AddNumberToObject(j, "request_rate", c->request_rate);
    else cJSON_AddStringToObject(j, "request_rate", "inf");
    if (c->max_concurrency > 0) cJSON_AddNumberToObject(j, "max_concurrency", c->max_concurrency);
    else cJSON_AddNullToObject(j, "max_concurrency");
    cJSON_AddNumberToObject(j, "max_concurrent_requests", m->peak_concurrency);
    cJSON_AddNumberToObject(j, "completed", m->completed);
    cJSON_AddNumberToObject(j, "failed", m->failed);
    cJSON_AddNumberToObject(j, "duration", m->duration);
    cJSON_AddNumberToObject(j, "total_input_tokens", (double)m->total_input);
    cJSON_AddNumberToObject(j, "total_output_tokens", (double)m->total_output);
    cJSON_AddNumberToObject(j, "input_tokens_from_usage", m->prompt_from_usage);
    cJSON_AddNumberToObject(j, "request_throughput", m->request_throughput);
    if (bs_slo_any(&c->slo)) {
        cJSON_AddNumberToObject(j, "request_goodput", m->request_goodput);
        cJSON *g = cJSON_AddObjectToObject(j, "goodput_slo_ms");
        if (c->slo.ttft_ms > 0) cJSON_AddNumberToObject(g, "ttft", c->slo.ttft_ms);
        if (c->slo.tpot_ms > 0) cJSON_AddNumberToObject(g, "tpot", c->slo.tpot_ms);
        if (c->slo.e2el_ms > 0) cJSON_AddNumberToObject(g, "e2el", c->slo.e2el_ms);
    } else {
        cJSON_AddNullToObject(j, "request_goodput");
    }
    cJSON_AddNumberToObject(j, "output_throughput", m->output_throughput);
    cJSON_AddNumberToObject(j, "total_token_throughput", m->total_token_throughput);
    for (size_t r = 0; r < sizeof latency_rows / sizeof latency_rows[0]; r++) {
        const bs_summary *s = (const bs_summary *)((const char *)m + latency_rows[r].off);
        const struct { const char *stat; double v; } st[] = {
            {"mean", s->mean}, {"median", s->median}, {"std", s->std}, {"p99", s->p99}};
        for (size_t k = 0; k < 4; k++) {
            char key[32];
            snprintf(key, sizeof key, "%s_%s_ms", st[k].stat, latency_rows[r].key);
            cJSON_AddNumberToObject(j, key, st[k].v);
        }
    }
    cJSON *e = cJSON_AddObjectToObject(j, "errors");
    for (int k = 0; k < c->n_errs; k++) cJSON_AddNumberToObject(e, c->errs[k].what, c->errs[k].count);
    char *s = cJSON_Print(j);
    if (s) printf("%s\n", s);
    cJSON_free(s);
    cJSON_Delete(j);
}

static void banner(const char *title, char fill)
{
    int width = 50, len = (int)strlen(title), left = (width - len) / 2, right = width - len - left;
    for (int i = 0; i < left; i++) putchar(fill);
    fputs(title, stdout);
    for (int i = 0; i < right; i++) putchar(fill);
    putchar('\n');
}

void bs_report_print(const bs_config *c, const bs_metrics *m, bool json)
{
    if (json) {
        print_json(c, m);
        return;
    }
    banner(" Serving Benchmark Result ", '=');
    printf("%-40s%d\n", "Successful requests:", m->completed);
    printf("%-40s%d\n", "Failed requests:", m->failed);
    if (c->max_concurrency > 0) printf("%-40s%d\n", "Maximum request concurrency:", c->max_concurrency);
    if (isfinite(c->request_rate)) printf("%-40s%.2f\n", "Request rate configured (RPS):", c->request_rate);
    else printf("%-40s%s\n", "Request rate configured (RPS):", "inf");
    printf("%-40s%.2f\n", "Benchmark duration (s):", m->duration);
    printf("%-40s%d\n", "Peak concurrent requests:", m->peak_concurrency);
    printf("%-40s%lld%s\n", "Total input tokens:", m->total_input,
           m->prompt_from_usage < m->completed ? " (some estimated: no usage)" : "");
    printf("%-40s%lld\n", "Total generated tokens:", m->total_output);
    printf("%-40s%.2f\n", "Request throughput (req/s):", m->request_throughput);
    if (bs_slo_any(&c->slo)) printf("%-40s%.2f\n", "Request goodput (req/s):", m->request_goodput);
    printf("%-40s%.2f\n", "Output token throughput (tok/s):", m->output_throughput);
    printf("%-40s%.2f\n", "Total Token throughput (tok/s):", m->total_token_throughput);
    for (size_t r = 0; r < sizeof latency_rows / sizeof latency_rows[0]; r++) {
        const bs_summary *s = (const bs_summary *)((const char *)m + latency_rows[r].off);
        char title[64], label[48];
        snprintf(title, sizeof title, "%s", latency_rows[r].title);
        banner(title, '-');
        snprintf(label, sizeof label, "Mean %s (ms):", latency_rows[r].label);
        printf("%-40s%.2f\n", label, s->mean);
        snprintf(label, sizeof label, "Median %s (ms):", latency_rows[r].label);
        printf("%-40s%.2f\n", label, s->median);
        snprintf(label, sizeof label, "P99 %s (ms):", latency_rows[r].label);
        printf("%-40s%.2f\n", label, s->p99);
    }
    if (c->n_errs) {
        banner("Failed requests by reason", '-');
        for (int k = 0; k < c->n_errs; k++) printf("%6d  %s\n", c->errs[k].count, c->errs[k].what);
    }
    banner("", '=');
}
