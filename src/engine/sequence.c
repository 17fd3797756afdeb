/* sequence.c - the scheduler's sequence records (slots with generations) and FIFO queues.
 *
 * Split from scheduler.c so the policy file holds only policy. Design notes in sched_seq.h.
 */
#include "sched_seq.h"

#include <stdlib.h>
#include <string.h>

void sched_seqs_free(sched_seqs *t)
{
    for (int32_t i = 0; i < t->n_slots; i++) free(t->seq[i].tokens);
    free(t->seq);
    *t = (sched_seqs){ 0 };
}

ai_status sched_seqs_new(sched_seqs *t, const int32_t *tokens, int32_t n, int32_t *slot, int64_t *id, ai_err *err)
{
    int32_t cap = n + 16;
    int32_t *copy = malloc((size_t)cap * sizeof *copy);
    if (!copy) return ai_err_set(err, AI_ERR_NOMEM, "scheduler: out of memory for a prompt of %d tokens", (int)n);
    memcpy(copy, tokens, (size_t)n * sizeof *copy);
    int32_t i = t->free_slot;  /* -1 = none (set by the scheduler at init) */
    if (i >= 0) {
        t->free_slot = t->seq[i].next_free;
    } else {
        if (t->n_slots == t->cap) {
            int32_t ncap = t->cap ? t->cap * 2 : 64;
            sched_seq *p = realloc(t->seq, (size_t)ncap * sizeof *p);
            if (!p) {
                free(copy);
                return ai_err_set(err, AI_ERR_NOMEM, "scheduler: out of memory for %d sequences", (int)ncap);
            }
            t->seq = p;
            t->cap = ncap;
        }
        i = t->n_slots++;
        t->seq[i] = (sched_seq){ .gen = 0 };
    }
    sched_seq *q = &t->seq[i];
    uint32_t gen = q->gen + 1;
    *q = (sched_seq){ .tokens = copy, .n_tokens = n, .cap = cap, .n_prompt = n, .kv = -1,
                      .state = SCHED_WAITING, .gen = gen, .used = true, .entry = -1, .next_free = -1 };
    *slot = i;
    *id = sched_seqs_id(t, i);
    return AI_OK;
}

void sched_seqs_delete(sched_seqs *t, int32_t slot)
{
    sched_seq *q = &t->seq[slot];
    free(q->tokens);
    q->tokens = NULL;
    q->used = false;
    q->next_free = t->free_slot;
    t->free_slot = slot;
}

int64_t sched_seqs_id(const sched_seqs *t, int32_t slot)
{
    return (int64_t)(((uint64_t)t->seq[slot].gen << 32) | (uint32_t)slot);
}

int32_t sched_seqs_find(const sched_seqs *t, int64_t id)
{
    if (id < 0) return -1;
    int64_t slot = id & 0xffffffff;
    uint32_t gen = (uint32_t)((uint64_t)id >> 32);
    if (slot >= t->n_slots || !t->seq[slot].used || t->seq[slot].gen != gen) return -1;
    return (int32_t)slot;
}

ai_status sched_seq_push_token(sched_seq *q, int32_t token, ai_err *err)
{
    if (q->n_tokens == q->cap) {
        if (q->cap > INT32_MAX / 2)
            return ai_err_set(err, AI_ERR_RANGE, "scheduler: sequence of %d tokens cannot grow", (int)q->n_tokens);
        int32_t *p = realloc(q->tokens, (size_t)q->cap * 2 * sizeof *p);
        if (!p) return ai_err_set(err, AI_ERR_NOMEM, "scheduler: out of memory for %d tokens", (int)q->cap * 2);
        q->tokens = p;
        q->cap *= 2;
    }
    q->tokens[q->n_tokens++] = token;
    return AI_OK;
}

// --- queues --------------------------------------------------------------------------------------

void sched_queue_free(sched_queue *q)
{
    free(q->slot);
    *q = (sched_queue){ 0 };
}

ai_status sched_queue_reserve(sched_queue *q, int32_t n, ai_err *err)
{
    if (n <= q->cap) return AI_OK;
    int32_t cap = q->cap ? q->cap : 64;
    while (cap < n) cap *= 2;
    int32_t *p = realloc(q->slot, (size_t)cap * sizeof *p);
    if (!p) return ai_err_set(err, AI_ERR_NOMEM, "scheduler: out of memory for a queue of %d", (int)cap);
    q->slot = p;
    q->cap = cap;
    return AI_OK;
}

void sched_queue_push_back(sched_queue *q, int32_t slot) { q->slot[q->n++] = slot; }

void sched_queue_push_front(sched_queue *q, int32_t slot)
{
    memmove(q->slot + 1, q->slot, (size_t)q->n * sizeof *q->slot);
    q->slot[0] = slot;
    q->n++;
}

void sched_queue_remove_at(sched_queue *q, int32_t i)
{
    memmove(q->slot + i, q->slot + i + 1, (size_t)(q->n - i - 1) * sizeof *q->slot);
    q->n--;
}

bool sched_queue_remove(sched_queue *q, int32_t slot)
{
    for (int32_t i = 0; i < q->n; i++) {
        if (q->slot[i] == slot) {
            sched_queue_remove_at(q, i);
            return true;
        }
    }
    return false;
}
