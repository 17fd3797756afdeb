/* threadpool.h - a persistent pool of worker threads that runs data-parallel jobs.
 *
 * threadpool_run(pool, n_tasks, fn, ctx) calls fn(ctx, task, thread) once for every task in
 * [0, n_tasks), spread over the workers and the calling thread, and returns when all are done.
 * Tasks are claimed one at a time from a shared counter, so uneven tasks balance themselves.
 * Idle workers sleep on a condition variable (no spinning), so an idle pool costs no CPU.
 *
 * One job at a time: threadpool_run must not be called concurrently on the same pool, nor from
 * inside a task. `thread` is 0 for the calling thread and 1..n_threads-1 for workers, so a job can
 * index per-thread scratch memory with it.
 */
#ifndef AIINFRA_THREADPOOL_H
#define AIINFRA_THREADPOOL_H

#include <stdint.h>

#include "aiinfra/status.h"

typedef struct threadpool threadpool;

typedef void (*threadpool_fn)(void *ctx, int64_t task, int thread);

/* n_threads >= 1 counts the calling thread (n_threads - 1 workers are started). */
ai_status threadpool_init(threadpool **out, int n_threads, ai_err *err);
void threadpool_free(threadpool *pool); /* NULL is fine; joins the workers */
int threadpool_n_threads(const threadpool *pool); /* 1 for a NULL pool */
/* Runs the job; a NULL pool runs every task on the calling thread. */
void threadpool_run(threadpool *pool, int64_t n_tasks, threadpool_fn fn, void *ctx);

#endif
