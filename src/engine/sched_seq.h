/* sched_seq.h - internal: the scheduler's sequence records, id map and queues (sequence.c).
 *
 * A sequence id is (generation << 32) | slot: slots are reused, generations make every id unique,
 * so a stale id (a finished-and-released sequence) is recognised instead of aliasing a new one.
 * Queues are plain arrays of slots in order; removal is a memmove (n <= a few thousand, and it is
 * cheaper than the cache misses of a linked list at that size).
 */
#ifndef AIINFRA_SCHED_SEQ_H
#define AIINFRA_SCHED_SEQ_H

#include <stdbool.h>
#include <stdint.h>

#include "aiinfra/scheduler.h"

typedef struct sched_seq {
    int32_t *tokens;          /* (cap) prompt then sampled tokens, n_tokens used */
    int32_t n_tokens, cap, n_prompt;
    int32_t n_computed;       /* positions whose KV is computed (0 while not RUNNING) */
    int32_t kv;               /* kv_blocks handle, -1 = holds no blocks */
    sched_state state;
    sched_finish finish;
    uint32_t gen;             /* id generation of this slot */
    bool used;
    uint64_t arrival, first_admission;
    int32_t n_preemptions, n_cached;
    int32_t entry;            /* index in the step being built, -1 = not scheduled */
    int32_t next_free;
} sched_seq;

typedef struct sched_queue {
    int32_t *slot;
    int32_t n, cap;
} sched_queue;

typedef struct sched_seqs {
    sched_seq *seq;
    int32_t n_slots, cap, free_slot;
} sched_seqs;

void sched_seqs_free(sched_seqs *t);
/* A fresh record (tokens copied) and its id; AI_ERR_NOMEM leaves nothing behind. */
ai_status sched_seqs_new(sched_seqs *t, const int32_t *tokens, int32_t n, int32_t *slot, int64_t *id, ai_err *err);
void sched_seqs_delete(sched_seqs *t, int32_t slot);
/* The slot of a live id, or -1. */
int32_t sched_seqs_find(const sched_seqs *t, int64_t id);
int64_t sched_seqs_id(const sched_seqs *t, int32_t slot);
ai_status sched_seq_push_token(sched_seq *q, int32_t token, ai_err *err);

void sched_queue_free(sched_queue *q);
ai_status sched_queue_reserve(sched_queue *q, int32_t n, ai_err *err);
void sched_queue_push_back(sched_queue *q, int32_t slot);   /* room reserved by the caller */
void sched_queue_push_front(sched_queue *q, int32_t slot);  /* room reserved by the caller */
void sched_queue_remove_at(sched_queue *q, int32_t i);
/* Removes slot if present; returns whether it was. */
bool sched_queue_remove(sched_queue *q, int32_t slot);

#endif
