/* threadpool.c - persistent pthread pool: sleep on a condition variable, claim tasks atomically.
 *
 * Invariants (all under `mu` unless noted):
 *  1. `generation` counts jobs; a worker runs a job once, when it sees generation != its last one.
 *  2. `remaining` (atomic; set under `mu`, counted down without it, the last one signals `done`
 *     under `mu`) is the number of workers that have not finished the current job's tasks; the
 *     caller of threadpool_run waits until it is 0, so a job's fn/ctx are never used after run
 *     returns. A worker that counted down may still be on its way back to waiting: it compares
 *     generations, so it cannot miss or repeat the next job.
 *  3. Tasks are claimed with an atomic fetch-add on `next` (no lock), each index exactly once.
 *  4. `published` is an atomic copy of `generation` (written under `mu`), so a worker can spin on it
 *     without the lock.
 *
 *     worker:  spin, then wait(wake) --generation changed--> run tasks --> remaining-- (signal done
 *              at 0) --> spin/wait
 *     caller:  publish job, generation++, broadcast(wake) --> run tasks --> spin, then wait(done)
 *              until remaining == 0
 *
 * Spin, then sleep: a decode step is ~200 short jobs back to back (one per matmul, tens of
 * microseconds each); a futex wake-up per job cost more than the job's parallel speed-up on 2
 * threads. So each side first spins for at most SPIN_ITERS pause-loops (~tens of microseconds)
 * and only then sleeps on the condition variable: an idle pool still costs nothing.
 */
#include "aiinfra/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#define SPIN_ITERS 20000 /* pause-loops before sleeping (a pause is ~10-140 cycles) */

typedef struct worker {
    struct threadpool *pool;
    int index; /* 1..n_threads-1 */
} worker;

struct threadpool {
    pthread_mutex_t mu;
    pthread_cond_t wake;   /* workers wait here for a new generation or stop */
    pthread_cond_t done;   /* the caller waits here for remaining == 0 */
    pthread_t *threads;    /* (n_threads - 1) */
    worker *workers;       /* (n_threads - 1) */
    int n_threads;
    int n_started;
    uint64_t generation;
    atomic_uint_fast64_t published; /* == generation, readable without the lock */
    atomic_bool stop;
    atomic_int remaining;            /* workers still running the current job */
    threadpool_fn fn;
    void *ctx;
    int64_t n_tasks;
    atomic_int_fast64_t next;
};

static void run_tasks(threadpool *p, threadpool_fn fn, void *ctx, int64_t n_tasks, int thread)
{
    for (;;) {
        int64_t t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (t >= n_tasks) break;
        fn(ctx, t, thread);
    }
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    threadpool *p = w->pool;
    uint64_t seen = 0;
    for (;;) {
        for (int i = 0; i < SPIN_ITERS && !atomic_load(&p->stop) && atomic_load(&p->published) == seen; i++)
            cpu_relax();
        pthread_mutex_lock(&p->mu);
        while (!atomic_load(&p->stop) && p->generation == seen) pthread_cond_wait(&p->wake, &p->mu);
        if (atomic_load(&p->stop)) break;
        seen = p->generation;
        threadpool_fn fn = p->fn;
        void *ctx = p->ctx;
        int64_t n = p->n_tasks;
        pthread_mutex_unlock(&p->mu);
        run_tasks(p, fn, ctx, n, w->index);
        if (atomic_fetch_sub(&p->remaining, 1) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

ai_status threadpool_init(threadpool **out, int n_threads, ai_err *err)
{
    *out = NULL;
    if (n_threads < 1 || n_threads > 1024)
        return ai_err_set(err, AI_ERR_INVALID, "threadpool: n_threads %d not in 1..1024", n_threads);
    threadpool *p = calloc(1, sizeof *p);
    if (!p) return ai_err_set(err, AI_ERR_NOMEM, "threadpool: out of memory");
    p->n_threads = n_threads;
    atomic_init(&p->next, 0);
    atomic_init(&p->published, 0);
    atomic_init(&p->stop, false);
    atomic_init(&p->remaining, 0);
    int nw = n_threads - 1;
    if (nw > 0) {
        p->threads = calloc((size_t)nw, sizeof *p->threads);
        p->workers = calloc((size_t)nw, sizeof *p->workers);
        if (!p->threads || !p->workers) {
            free(p->threads); free(p->workers); free(p);
            return ai_err_set(err, AI_ERR_NOMEM, "threadpool: out of memory");
        }
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    for (int i = 0; i < nw; i++) {
        p->workers[i] = (worker){p, i + 1};
        int rc = pthread_create(&p->threads[i], NULL, worker_main, &p->workers[i]);
        if (rc != 0) {
            threadpool_free(p);
            return ai_err_set(err, AI_ERR_RUNTIME, "threadpool: pthread_create failed for thread %d: %s",
                              i + 1, strerror(rc));
        }
        p->n_started++;
    }
    *out = p;
    return AI_OK;
}

void threadpool_free(threadpool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p->workers);
    free(p);
}

int threadpool_n_threads(const threadpool *p) { return p ? p->n_threads : 1; }

void threadpool_run(threadpool *p, int64_t n_tasks, threadpool_fn fn, void *ctx)
{
    if (n_tasks <= 0) return;
    if (!p || p->n_started == 0 || n_tasks == 1) {
        for (int64_t t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store(&p->remaining, p->n_started);
    p->generation++;
    atomic_store(&p->published, p->generation);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);

    run_tasks(p, fn, ctx, n_tasks, 0);

    for (int i = 0; i < SPIN_ITERS && atomic_load(&p->remaining) > 0; i++) cpu_relax();
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->remaining) > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
