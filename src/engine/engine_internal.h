/* engine_internal.h - internal: the serving engine's records, shared by its files.
 *
 *   engine.c          the worker: id map, events, the step, the loop (engine_main)
 *   engine_api.c      the public calls: init/free, request validation and submission, abort, drain, metrics
 *   engine_metrics.c  histograms and the scheduler's counters
 *   text_stream.c     tokens -> streamable text (detokenizer + stop strings)
 */
#ifndef AIINFRA_ENGINE_INTERNAL_H
#define AIINFRA_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "aiinfra/engine.h"
#include "aiinfra/runner.h"
#include "aiinfra/scheduler.h"
#include "text_stream.h"

#define ENGINE_MAX_N 16   /* samples per request at most */

// --- requests ------------------------------------------------------------------------------------

typedef struct eng_req eng_req;

typedef struct eng_sample {
    eng_req *req;
    int32_t index;
    int64_t seq_id;          /* scheduler sequence; -1 none (invariant 3) */
    sampler_seq ss;
    text_stream tx;
    bool ss_ok, tx_ok;
    bool done;
    int32_t n_gen;           /* tokens generated */
    int32_t token;           /* sampled this step */
    bool has_res;            /* res holds logprobs of token */
    sampler_result res;
    double t_last;           /* time of its last TOKEN event */
} eng_sample;

struct eng_req {
    uint64_t id;
    int32_t *prompt;         /* (n_prompt) */
    int32_t n_prompt;
    int32_t n;               /* samples */
    int32_t n_done;
    bool plain_greedy;       /* argmax of the raw logits: runner_step's out_tokens suffice */
    bool device_sample;      /* no bias, penalties or logprobs: the backend samples (runner_sample) */
    bool want_logprobs;
    bool forked;             /* samples 1..n-1 have their first token */
    int32_t n_cached;
    bool first_token;        /* TTFT observed */
    double t_submit;
    engine_event_fn on_event;
    void *user;
    eng_sample *s;           /* (n) */
    eng_req *prev, *next;    /* queue (submit) or active list (worker) */
};

// --- seq id -> sample (engine.c) -------------------------------------------------------------------

typedef struct seq_map {
    int64_t *key;            /* (cap) -1 empty */
    eng_sample **val;        /* (cap) */
    size_t cap, n;           /* cap a power of two, n <= cap / 2 */
} seq_map;
bool seq_map_grow(seq_map *m);  /* doubles the table (64 the first time); false on out-of-memory */

// --- the engine ------------------------------------------------------------------------------------

struct engine {
    const model *m;              /* NULL for random weights */
    model_config cfg;
    const tokenizer *tok;
    runner *run;
    scheduler *sch;
    sampler smp;
    bool smp_ok;
    engine_params p;          /* defaults filled in */
    int32_t n_ctx, n_vocab;
    int64_t pool_tokens;      /* KV pool capacity in tokens */
    uint64_t entropy;
    /* worker-only scratch, (max_num_seqs) each; logits (max_num_seqs, n_vocab) */
    float *logits;
    int32_t *greedy, *sampled, *copy_src, *copy_dst;
    int32_t *dev_tok;                /* runner_sample's tokens */
    backend_sample_params *sparams;  /* its per-row parameters */
    bool can_device_sample;          /* the runner's backend samples (runner_can_sample) */
    runner_seq *rseqs;
    eng_sample **entry_sample; /* sample of each entry of the current step (NULL: none) */
    int32_t n_entries;
    buf text;
    engine_logprob top[SAMPLER_MAX_LOGPROBS];
    seq_map map;
    eng_req *active;          /* admitted requests */
    int32_t n_ended;          /* ended since the last publish */
    engine_metrics wm;        /* worker's metrics: histograms, finish counts, step time */
    /* shared, under mu */
    pthread_mutex_t mu;
    pthread_cond_t work_cv, idle_cv;
    pthread_t thread;
    bool thread_ok;
    eng_req *in_head, *in_tail;
    int32_t n_incoming;       /* queued or taken but not yet in a published snapshot */
    uint64_t *aborts;
    size_t n_aborts, cap_aborts;
    uint64_t next_id;
    int64_t in_flight;
    bool stopping, draining, has_work;
    engine_metrics snap;
};

double engine_now_s(void);          /* monotonic clock, seconds */
void engine_req_free(eng_req *r);   /* a request and its samples' state */
void *engine_main(void *arg);       /* the worker thread (engine.c), arg: the engine */

// --- metrics (engine_metrics.c) ---------------------------------------------------------------------

typedef enum engine_hist_kind { ENGINE_HIST_TTFT = 0, ENGINE_HIST_ITL, ENGINE_HIST_E2E } engine_hist_kind;

/* Empty histogram with the kind's bucket bounds (vLLM's, cut to ENGINE_HIST_BUCKETS; last +inf). */
void engine_hist_init(engine_hist *h, engine_hist_kind kind);
void engine_hist_observe(engine_hist *h, double seconds);

/* The scheduler's part of the metrics (counts, tokens, prefix cache, preemptions, scheduler time). */
void engine_metrics_from_sched(engine_metrics *m, const scheduler_stats *st);

#endif
