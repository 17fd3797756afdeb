/* engine_internal.h - internal pieces of the serving engine shared by engine.c and engine_metrics.c. */
#ifndef AIINFRA_ENGINE_INTERNAL_H
#define AIINFRA_ENGINE_INTERNAL_H

#include "aiinfra/engine.h"
#include "aiinfra/scheduler.h"

typedef enum engine_hist_kind { ENGINE_HIST_TTFT = 0, ENGINE_HIST_ITL, ENGINE_HIST_E2E } engine_hist_kind;

/* Empty histogram with the kind's bucket bounds (vLLM's, cut to ENGINE_HIST_BUCKETS; last +inf). */
void engine_hist_init(engine_hist *h, engine_hist_kind kind);
void engine_hist_observe(engine_hist *h, double seconds);

/* The scheduler's part of the metrics (counts, tokens, prefix cache, preemptions, scheduler time). */
void engine_metrics_from_sched(engine_metrics *m, const scheduler_stats *st);

#endif
