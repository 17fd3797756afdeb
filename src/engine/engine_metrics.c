/* engine_metrics.c - histograms and the scheduler's counters for engine_get_metrics.
 *
 * Bucket bounds follow vLLM's (vllm:time_to_first_token_seconds, vllm:inter_token_latency_seconds,
 * vllm:e2e_request_latency_seconds), cut to 15 finite bounds + +inf so that one fixed-size struct
 * holds them. Counts are cumulative (Prometheus `le` semantics: count[i] = observations <= le[i]).
 */
#include <math.h>
#include <string.h>

#include "engine_internal.h"

static const double ttft_le[ENGINE_HIST_BUCKETS - 1] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                                         0.25,  0.5,   0.75, 1.0,  2.5,  5.0,  10.0};
static const double itl_le[ENGINE_HIST_BUCKETS - 1] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
                                                        0.4,  0.5,   0.75, 1.0,   2.5, 5.0,  10.0};
static const double e2e_le[ENGINE_HIST_BUCKETS - 1] = {0.3, 0.5, 0.8,  1.0,  1.5,  2.0,  2.5,  5.0,
                                                        10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0};

void engine_hist_init(engine_hist *h, engine_hist_kind kind)
{
    const double *le = kind == ENGINE_HIST_TTFT ? ttft_le : kind == ENGINE_HIST_ITL ? itl_le : e2e_le;
    memset(h, 0, sizeof *h);
    memcpy(h->le, le, sizeof ttft_le);
    h->le[ENGINE_HIST_BUCKETS - 1] = INFINITY;
}

void engine_hist_observe(engine_hist *h, double seconds)
{
    if (!(seconds >= 0)) seconds = 0;  /* NaN or a clock step backwards */
    for (int i = 0; i < ENGINE_HIST_BUCKETS; i++)
        if (seconds <= h->le[i]) h->count[i]++;
    h->sum += seconds;
    h->n++;
}

void engine_metrics_from_sched(engine_metrics *m, const scheduler_stats *st)
{
    m->num_requests_running = st->num_running;
    m->num_requests_waiting = st->num_waiting;
    m->kv_used_blocks = st->kv_used_blocks;
    m->kv_num_blocks = st->kv_num_blocks;
    m->kv_cache_usage = st->kv_num_blocks ? (double)st->kv_used_blocks / (double)st->kv_num_blocks : 0.0;
    m->prompt_tokens_total = st->prompt_tokens;
    m->generation_tokens_total = st->generation_tokens;
    m->prefix_cache_queries = st->prefix_queries;
    m->prefix_cache_hits = st->prefix_hits;
    m->preemptions = st->preemptions;
    m->steps = st->steps;
    m->scheduler_seconds = 1e-9 * (double)(st->schedule_ns + st->postprocess_ns);
}
