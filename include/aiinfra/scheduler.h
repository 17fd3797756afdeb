/* scheduler.h - continuous batching: which tokens of which sequences each engine step computes.
 *
 * The engine step is three calls: scheduler_schedule -> (executor runs the forward) ->
 * scheduler_postprocess. schedule describes the batch in plain data (sched_step); the executor
 * copies the listed KV blocks, computes the listed token ranges through the block tables, samples
 * one token for each entry with `sample` set, and hands those tokens to postprocess. Calls
 * alternate strictly (schedule, postprocess, schedule, ...). Finishing (EOS, stop string, length)
 * is the caller's decision: scheduler_finish; scheduler_abort works in any state, even between
 * schedule and postprocess (the entry is then ignored).
 *
 * Policy, state machine and the no-starvation rule: top of src/engine/scheduler.c.
 * Sequences are named by 64-bit ids that are never reused.
 */
#ifndef AIINFRA_SCHEDULER_H
#define AIINFRA_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

#include "aiinfra/kv_blocks.h"
#include "aiinfra/status.h"

typedef struct scheduler scheduler;

typedef struct scheduler_config {
    int32_t num_blocks;              /* KV pool size in blocks */
    int32_t block_size;              /* tokens per block */
    int32_t max_num_batched_tokens;  /* token budget of one step, >= max_num_seqs */
    int32_t max_num_seqs;            /* running sequences at most */
    bool enable_prefix_cache;
    bool skip_debug_checks;          /* see kv_blocks_config */
} scheduler_config;

typedef enum sched_state {
    SCHED_WAITING = 0,   /* queued, never admitted, holds no blocks */
    SCHED_RUNNING,       /* admitted: holds blocks, gets tokens every step */
    SCHED_PREEMPTED,     /* blocks taken back; queued at the front, recomputes its tokens */
    SCHED_FINISHED,      /* done; holds no blocks; forget it with scheduler_release */
} sched_state;

typedef enum sched_finish {
    SCHED_FINISH_NONE = 0,
    SCHED_FINISH_STOP,      /* EOS or a stop string/token (caller) */
    SCHED_FINISH_LENGTH,    /* max_tokens or context length (caller) */
    SCHED_FINISH_ABORT,     /* scheduler_abort (client gone, server draining) */
    SCHED_FINISH_NO_SPACE,  /* the sequence alone no longer fits in the KV pool (scheduler) */
} sched_finish;

/* One sequence's work in a step: compute the KV of positions [start, end) and, when sample is
 * set, sample the token at position end (end == its token count: the chunk reaches the end of
 * the prompt, or it is a decode). */
typedef struct sched_entry {
    int64_t seq_id;
    int32_t start, end;
    bool sample;
    const int32_t *tokens;       /* (end - start) input tokens of [start, end) */
    const int32_t *block_table;  /* (n_blocks) covers positions [0, end) */
    int32_t n_blocks;
} sched_entry;

/* The batch of one step; all pointers stay valid until the next scheduler_schedule. */
typedef struct sched_step {
    uint64_t step;               /* 1, 2, ... */
    const sched_entry *entries;  /* decodes first, then prefill chunks */
    int32_t n_entries;
    const kv_copy *copies;       /* copy-on-write copies, to run in order BEFORE the forward */
    int32_t n_copies;
    int32_t n_tokens;            /* sum of (end - start) <= max_num_batched_tokens */
    int32_t n_decode;            /* entries of one token that continue generation */
    const int64_t *finished;     /* sequences the scheduler finished this step (NO_SPACE) */
    int32_t n_finished;
    int32_t n_preempted;         /* sequences preempted this step */
} sched_step;

typedef struct sched_seq_info {
    sched_state state;
    sched_finish finish;
    int32_t n_prompt, n_tokens, n_computed;  /* tokens = prompt + sampled; KV computed for n_computed */
    const int32_t *tokens;                   /* valid until the sequence changes or is released */
    uint64_t arrival;                        /* 1, 2, ... in scheduler_add order */
    uint64_t first_admission;                /* 1, 2, ... in order of first admission; 0 = never */
    int32_t n_preemptions;
    int32_t n_cached_tokens;                 /* prefix-cache hit of its last admission */
} sched_seq_info;

typedef struct scheduler_stats {
    uint64_t steps;
    uint64_t schedule_ns, postprocess_ns;  /* scheduler CPU time (monotonic clock), summed */
    uint64_t last_step_ns, max_step_ns;    /* schedule + postprocess of one step */
    uint64_t preemptions;
    uint64_t prompt_tokens;                /* added */
    uint64_t generation_tokens;            /* sampled tokens appended */
    uint64_t computed_tokens;              /* tokens scheduled for compute (incl. recompute) */
    uint64_t prefix_queries, prefix_hits;  /* tokens (vLLM's prefix_cache_queries / hits) */
    int32_t num_running, num_waiting;
    int32_t kv_used_blocks, kv_num_blocks;
} scheduler_stats;

ai_status scheduler_init(scheduler **out, const scheduler_config *cfg, ai_err *err);
void scheduler_free(scheduler *s);

/* Queues a new sequence (WAITING) with a copy of prompt. A prompt that cannot fit in the pool
 * even alone is AI_ERR_RANGE. */
ai_status scheduler_add(scheduler *s, const int32_t *prompt, int32_t n_prompt, int64_t *seq_id, ai_err *err);
ai_status scheduler_schedule(scheduler *s, sched_step *step, ai_err *err);
/* sampled[i] is the token sampled for step->entries[i] (read only where entries[i].sample). */
ai_status scheduler_postprocess(scheduler *s, const sched_step *step, const int32_t *sampled, ai_err *err);

/* RUNNING/WAITING/PREEMPTED -> FINISHED with reason; frees its blocks (full computed blocks stay
 * in the prefix cache). */
ai_status scheduler_finish(scheduler *s, int64_t seq_id, sched_finish reason, ai_err *err);
ai_status scheduler_abort(scheduler *s, int64_t seq_id, ai_err *err);
/* n > 1 samples: right after a postprocess that sampled `parent`'s first token, a child sharing
 * all of its blocks whose last token is `token` instead (its own sample from the same logits). */
ai_status scheduler_fork(scheduler *s, int64_t parent, int32_t token, int64_t *child, ai_err *err);
/* Forgets a FINISHED sequence. */
ai_status scheduler_release(scheduler *s, int64_t seq_id, ai_err *err);

ai_status scheduler_seq_info(const scheduler *s, int64_t seq_id, sched_seq_info *info, ai_err *err);
scheduler_stats scheduler_get_stats(const scheduler *s);
const kv_blocks *scheduler_kv(const scheduler *s);
kv_blocks *scheduler_kv_mut(scheduler *s);  /* tests: e.g. the prefix cache's hash hook */
/* Scheduler invariants (top of scheduler.c) plus kv_blocks_check. */
ai_status scheduler_check(const scheduler *s, ai_err *err);

#endif
