/*
 * threadpool.c - see threadpool.h.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/threadpool.h"

typedef struct qwi_cpu_worker {
    qwi_cpu_pool *pool;
    int index;
} qwi_cpu_worker;

struct qwi_cpu_pool {
    int size;                   /* threads in all, caller included       */
    pthread_t *threads;         /* size-1 workers                        */
    qwi_cpu_worker *workers;
    int started;                /* workers actually created              */

    pthread_mutex_t mu;
    pthread_cond_t wake;        /* workers wait here for a new generation */
    pthread_cond_t done;        /* the caller waits here for stragglers   */
    uint64_t generation;        /* bumped once per run, under mu          */
    int busy;                   /* workers still inside this generation   */
    int stop;

    qwi_cpu_task_fn fn;
    void *ctx;
    int64_t n_tasks;
    atomic_int_fast64_t next;   /* next task index to hand out            */
};

static void pool_work(qwi_cpu_pool *p, qwi_cpu_task_fn fn, void *ctx, int64_t n, int thread) {
    for (;;) {
        int64_t t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (t >= n) break;
        fn(ctx, t, thread);
    }
}

static void *pool_main(void *arg) {
    qwi_cpu_worker *w = arg;
    qwi_cpu_pool *p = w->pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->generation == seen && !p->stop) pthread_cond_wait(&p->wake, &p->mu);
        if (p->stop) break;
        seen = p->generation;
        qwi_cpu_task_fn fn = p->fn;
        void *ctx = p->ctx;
        int64_t n = p->n_tasks;
        pthread_mutex_unlock(&p->mu);
        pool_work(p, fn, ctx, n, w->index);
        pthread_mutex_lock(&p->mu);
        if (--p->busy == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static int affinity_cpus(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
    int n = CPU_COUNT(&set);
    return n > 0 ? n : 1;
}

qw_status qwi_cpu_pool_create(int32_t num_threads, qwi_cpu_pool **out) {
    *out = NULL;
    int n = num_threads > 0 ? num_threads : affinity_cpus();
    if (n > 1024) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cpu: %d threads is too many (most 1024)", n);
    qwi_cpu_pool *p = calloc(1, sizeof *p);
    if (!p) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "cpu: thread pool allocation failed");
    p->size = n;
    atomic_init(&p->next, 0);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    if (n > 1) {
        p->threads = calloc((size_t)n - 1, sizeof *p->threads);
        p->workers = calloc((size_t)n - 1, sizeof *p->workers);
        if (!p->threads || !p->workers) {
            qwi_cpu_pool_destroy(p);
            return qwi_fail(QW_ERR_OUT_OF_MEMORY, "cpu: thread pool allocation failed");
        }
        for (int i = 0; i < n - 1; i++) {
            p->workers[i].pool = p;
            p->workers[i].index = i + 1;
            int e = pthread_create(&p->threads[i], NULL, pool_main, &p->workers[i]);
            if (e != 0) {
                qwi_cpu_pool_destroy(p);
                return qwi_fail(QW_ERR_OUT_OF_MEMORY, "cpu: starting worker thread %d of %d: %s",
                                i + 1, n - 1, strerror(e));
            }
            p->started++;
        }
    }
    *out = p;
    return QW_OK;
}

int qwi_cpu_pool_size(const qwi_cpu_pool *pool) { return pool->size; }

void qwi_cpu_pool_run(qwi_cpu_pool *p, int64_t n_tasks, qwi_cpu_task_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    /* One task, or no workers: waking threads would only add latency
     * (decode-sized steps hit this for every per-row op). */
    if (n_tasks == 1 || p->started == 0) {
        for (int64_t t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    p->busy = p->started;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);

    pool_work(p, fn, ctx, n_tasks, 0);

    /* The mutex hand-off also publishes every worker's writes to the caller. */
    pthread_mutex_lock(&p->mu);
    while (p->busy > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void qwi_cpu_pool_destroy(qwi_cpu_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->started; i++) pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p->workers);
    free(p);
}
