/* metrics.c - GET /metrics: the engine's counters in the Prometheus text format (version 0.0.4) under
 * vLLM's metric names, so dashboards and load generators written for vLLM read them unchanged.
 *
 * Gauges: vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc (a fraction
 * 0..1, as vLLM's despite the name). Counters (exposed with the _total suffix, as prometheus_client
 * does): prompt/generation tokens, prefix cache queries/hits (in tokens), preemptions, finished
 * requests by finished_reason. Histograms: time to first token, inter-token latency, end-to-end
 * latency, from the engine's cumulative buckets (seconds; the last bucket is +Inf).
 * Every sample carries the label model_name.
 */
#include <math.h>

#include "server/server_internal.h"

static void put_head(buf *b, const char *name, const char *type, const char *help)
{
    buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void put_gauge(buf *b, const char *name, const char *mlabel, const char *help, double v)
{
    put_head(b, name, "gauge", help);
    buf_printf(b, "%s{model_name=\"%s\"} %.17g\n", name, mlabel, v);
}

static void put_counter(buf *b, const char *name, const char *mlabel, const char *help, uint64_t v)
{
    put_head(b, name, "counter", help);
    buf_printf(b, "%s_total{model_name=\"%s\"} %llu\n", name, mlabel, (unsigned long long)v);
}

static void put_hist(buf *b, const char *name, const char *mlabel, const char *help, const engine_hist *h)
{
    put_head(b, name, "histogram", help);
    for (int i = 0; i < ENGINE_HIST_BUCKETS; i++) {
        /* the engine's last bound is +inf; any trailing unused (0) bounds after it are skipped */
        if (isinf(h->le[i])) {
            buf_printf(b, "%s_bucket{le=\"+Inf\",model_name=\"%s\"} %llu\n", name, mlabel,
                       (unsigned long long)h->count[i]);
            break;
        }
        buf_printf(b, "%s_bucket{le=\"%g\",model_name=\"%s\"} %llu\n", name, h->le[i], mlabel,
                   (unsigned long long)h->count[i]);
        if (i == ENGINE_HIST_BUCKETS - 1)
            buf_printf(b, "%s_bucket{le=\"+Inf\",model_name=\"%s\"} %llu\n", name, mlabel, (unsigned long long)h->n);
    }
    buf_printf(b, "%s_sum{model_name=\"%s\"} %.17g\n", name, mlabel, h->sum);
    buf_printf(b, "%s_count{model_name=\"%s\"} %llu\n", name, mlabel, (unsigned long long)h->n);
}

void metrics_render(engine *e, const char *model_name, buf *b)
{
    /* label value escaping: backslash, double quote and newline */
    buf esc;
    buf_init(&esc);
    for (const char *p = model_name; *p; p++) {
        if (*p == '\\' || *p == '"') buf_putc(&esc, '\\');
        if (*p == '\n') buf_puts(&esc, "\\n");
        else buf_putc(&esc, *p);
    }
    const char *mlabel = esc.data ? esc.data : "";
    engine_metrics m;
    engine_get_metrics(e, &m);
    put_gauge(b, "vllm:num_requests_running", mlabel, "Requests in the running batch.", m.num_requests_running);
    put_gauge(b, "vllm:num_requests_waiting", mlabel, "Requests waiting to be scheduled.", m.num_requests_waiting);
    put_gauge(b, "vllm:kv_cache_usage_perc", mlabel, "KV cache usage (1 = 100 percent).", m.kv_cache_usage);
    put_counter(b, "vllm:prefix_cache_queries", mlabel, "Prompt tokens looked up in the prefix cache.",
                m.prefix_cache_queries);
    put_counter(b, "vllm:prefix_cache_hits", mlabel, "Prompt tokens found in the prefix cache.", m.prefix_cache_hits);
    put_counter(b, "vllm:prompt_tokens", mlabel, "Prefill tokens processed.", m.prompt_tokens_total);
    put_counter(b, "vllm:generation_tokens", mlabel, "Generated tokens.", m.generation_tokens_total);
    put_counter(b, "vllm:num_preemptions", mlabel, "Preemptions of running requests.", m.preemptions);
    put_head(b, "vllm:request_success", "counter", "Finished requests by finish reason.");
    static const char *const reasons[4] = {NULL, "stop", "length", "abort"};
    for (int i = 1; i < 4; i++)
        buf_printf(b, "vllm:request_success_total{finished_reason=\"%s\",model_name=\"%s\"} %llu\n", reasons[i],
                   mlabel, (unsigned long long)m.requests_finished[i]);
    put_hist(b, "vllm:time_to_first_token_seconds", mlabel, "Time to first token.", &m.ttft);
    put_hist(b, "vllm:inter_token_latency_seconds", mlabel, "Time between tokens of a sample.", &m.itl);
    put_hist(b, "vllm:e2e_request_latency_seconds", mlabel, "Request latency, submit to finish.", &m.e2e);
    put_counter(b, "aiinfra:engine_steps", mlabel, "Engine steps.", m.steps);
    put_gauge(b, "aiinfra:scheduler_seconds", mlabel, "CPU time in the scheduler, summed over steps.", m.scheduler_seconds);
    put_gauge(b, "aiinfra:step_seconds", mlabel, "Wall time of engine steps, summed.", m.step_seconds);
    put_gauge(b, "aiinfra:kv_blocks_used", mlabel, "KV blocks referenced by running sequences.", (double)m.kv_used_blocks);
    put_gauge(b, "aiinfra:kv_blocks_total", mlabel, "KV blocks in the pool.", (double)m.kv_num_blocks);
    buf_free(&esc);
}
