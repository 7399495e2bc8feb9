/*
 * threadpool.c - see threadpool.h.
 *
 * Hand-off: a run publishes its task (fn, ctx, n_tasks) and then bumps the
 * atomic `generation`; a worker that sees the bump works, then decrements
 * the atomic `busy`, and the caller's run returns once busy is 0.
 *
 * Why spin first: a decode step is a few hundred runs of tens to hundreds
 * of microseconds each, separated by short serial stretches on the caller.
 * Waking a sleeping worker through a condition variable costs a futex call
 * on each side and a scheduler wake-up (tens of microseconds on a VM), per
 * run, on the critical path. So a worker that has finished a run polls
 * `generation` for up to spin_ns before it sleeps, and the caller polls
 * `busy` as long before it sleeps; between steps (longer than spin_ns) the
 * threads sleep as before, so an idle engine burns no CPU.
 *
 * Sleeping without lost wake-ups (Dekker's pattern, all seq_cst): a worker
 * about to sleep increments `sleepers` and then reads `generation` under
 * the mutex; a run stores `generation` and then reads `sleepers`, and only
 * if it is non-zero takes the mutex to broadcast. At least one side sees
 * the other's store, and the worker holds the mutex from its check until
 * pthread_cond_wait releases it, so the broadcast cannot fall in between.
 * The caller's sleep on `busy` pairs with `caller_waiting` the same way.
 * Visibility of the tasks' writes: every worker's writes precede its
 * (seq_cst) decrement of busy, which the caller reads before returning.
 *
 * Hand-out: thread i of T owns the tasks [n*i/T, n*(i+1)/T) and takes them
 * in order through its own counter; a thread whose share is done takes the
 * next untaken tasks of the other shares (i+1, i+2, ... mod T) through
 * theirs. Why not one shared counter: neighbouring tasks usually read
 * neighbouring memory (a matmul's tasks are consecutive column blocks of a
 * weight), and with one counter the threads alternate, so each task starts
 * a new stream that the hardware prefetchers must ramp up on, and the
 * kernel's own prefetches past a task's end fetch the other thread's next
 * lines. In shares each thread reads one long stream. Measured on a Zen 4
 * (docs/benchmarks.md, "tasks in shares"): the int4 batch-1 GEMV at
 * K 2048, N 1024 (qw-qbench, 2 threads) 30.1 -> 32.4 GB/s (medians, a
 * slow memory phase; 29-35 -> 42-44 in a faster one), the 0.6B int4
 * decode step 5-9% shorter. The counters can overshoot their share's end
 * (a thief and the owner both fetch past it); that is harmless, as every
 * claim is checked against the end.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/threadpool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define POOL_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define POOL_RELAX() __asm__ __volatile__("yield")
#else
#define POOL_RELAX() ((void)0)
#endif

/* Default poll time before sleeping; QWINFER_CPU_SPIN_US overrides it
 * (0: sleep at once, the pre-spin behaviour; for machines running more
 * busy threads than CPUs, where a spinning thread takes a CPU from one
 * that has work). */
#define POOL_SPIN_US_DEFAULT 200
#define POOL_SPIN_US_MAX 100000

/* One thread's share of a run's tasks: the next index to take (a cache
 * line of its own, as every thread writes it). */
typedef struct qwi_cpu_share {
    _Alignas(64) atomic_int_fast64_t next;
} qwi_cpu_share;

typedef struct qwi_cpu_worker {
    qwi_cpu_pool *pool;
    int index;
} qwi_cpu_worker;

struct qwi_cpu_pool {
    int size;                   /* threads in all, caller included       */
    pthread_t *threads;         /* size-1 workers                        */
    qwi_cpu_worker *workers;
    int started;                /* workers actually created              */
    int64_t spin_ns;            /* poll this long before sleeping        */

    pthread_mutex_t mu;
    pthread_cond_t wake;        /* workers sleep here for a new generation */
    pthread_cond_t done;        /* the caller sleeps here for stragglers   */
    atomic_uint_fast64_t generation; /* bumped once per run, after the task is set */
    atomic_int busy;            /* workers still inside this generation    */
    atomic_int sleepers;        /* workers asleep (or about to be) on wake */
    atomic_int caller_waiting;  /* the caller asleep (or about to be) on done */
    atomic_int stop;

    /* The task of the current generation: written by the caller before it
     * bumps generation, read by workers after they see the bump. */
    qwi_cpu_task_fn fn;
    void *ctx;
    int64_t n_tasks;
    qwi_cpu_share *share;       /* [size]: thread i's next task (above)    */
};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Thread `thread`'s part of a run: its own share, then what is left of
 * the others' (the hand-out above). */
static void pool_work(qwi_cpu_pool *p, qwi_cpu_task_fn fn, void *ctx, int64_t n, int thread) {
    const int T = p->size;
    for (int k = 0; k < T; k++) {
        const int i = (thread + k) % T;
        const int64_t end = n * (i + 1) / T;
        for (;;) {
            const int64_t t = atomic_fetch_add_explicit(&p->share[i].next, 1, memory_order_relaxed);
            if (t >= end) break;
            fn(ctx, t, thread);
        }
    }
}

/* Poll until *v != avoid (generation) or up to spin_ns; true if it changed. */
static bool spin_while_u64(const atomic_uint_fast64_t *v, uint64_t avoid, int64_t spin_ns) {
    if (spin_ns <= 0) return false;
    const int64_t end = now_ns() + spin_ns;
    for (;;) {
        for (int i = 0; i < 64; i++) {
            if (atomic_load_explicit(v, memory_order_acquire) != avoid) return true;
            POOL_RELAX();
        }
        if (now_ns() >= end) return false;
        sched_yield();
    }
}

/* Poll until *v == 0 (busy) or up to spin_ns; true if it reached 0. */
static bool spin_until_zero(const atomic_int *v, int64_t spin_ns) {
    if (spin_ns <= 0) return atomic_load(v) == 0;
    const int64_t end = now_ns() + spin_ns;
    for (;;) {
        for (int i = 0; i < 64; i++) {
            if (atomic_load_explicit(v, memory_order_acquire) == 0) return true;
            POOL_RELAX();
        }
        if (now_ns() >= end) return atomic_load(v) == 0;
        sched_yield();
    }
}

static void *pool_main(void *arg) {
    qwi_cpu_worker *w = arg;
    qwi_cpu_pool *p = w->pool;
    uint64_t seen = 0;
    for (;;) {
        if (!spin_while_u64(&p->generation, seen, p->spin_ns)) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (atomic_load(&p->generation) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->wake, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) break;
        seen = atomic_load(&p->generation);
        pool_work(p, p->fn, p->ctx, p->n_tasks, w->index);
        if (atomic_fetch_sub(&p->busy, 1) == 1 && atomic_load(&p->caller_waiting)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

static int affinity_cpus(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
    int n = CPU_COUNT(&set);
    return n > 0 ? n : 1;
}

/* QWINFER_CPU_SPIN_US as nanoseconds: a decimal in [0, POOL_SPIN_US_MAX],
 * else the default (an unparsable value is ignored, like the other
 * QWINFER_CPU_* variables that only tune speed). */
static int64_t spin_ns_from_env(void) {
    const char *s = getenv("QWINFER_CPU_SPIN_US");
    if (s && *s) {
        char *end = NULL;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno == 0 && end && *end == '\0' && v >= 0 && v <= POOL_SPIN_US_MAX) return (int64_t)v * 1000;
    }
    return (int64_t)POOL_SPIN_US_DEFAULT * 1000;
}

qw_status qwi_cpu_pool_create(int32_t num_threads, qwi_cpu_pool **out) {
    *out = NULL;
    int n = num_threads > 0 ? num_threads : affinity_cpus();
    if (n > 1024) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cpu: %d threads is too many (most 1024)", n);
    qwi_cpu_pool *p = calloc(1, sizeof *p);
    if (!p) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "cpu: thread pool allocation failed");
    p->size = n;
    /* More threads than CPUs: a spinning thread would hold a CPU that a
     * thread with work needs, so sleep at once. */
    p->spin_ns = n <= affinity_cpus() ? spin_ns_from_env() : 0;
    p->share = aligned_alloc(_Alignof(qwi_cpu_share), (size_t)n * sizeof *p->share);
    if (!p->share) {
        free(p);
        return qwi_fail(QW_ERR_OUT_OF_MEMORY, "cpu: thread pool allocation failed");
    }
    for (int i = 0; i < n; i++) atomic_init(&p->share[i].next, 0);
    atomic_init(&p->generation, 0);
    atomic_init(&p->busy, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->caller_waiting, 0);
    atomic_init(&p->stop, 0);
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
    /* Every worker is past the previous run (busy reached 0), so none
     * reads the task fields while they change. */
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    for (int i = 0; i < p->size; i++)
        atomic_store_explicit(&p->share[i].next, n_tasks * i / p->size, memory_order_relaxed);
    atomic_store(&p->busy, p->started);
    atomic_fetch_add(&p->generation, 1);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }

    pool_work(p, fn, ctx, n_tasks, 0);

    if (spin_until_zero(&p->busy, p->spin_ns)) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->caller_waiting, 1);
    while (atomic_load(&p->busy) > 0) pthread_cond_wait(&p->done, &p->mu);
    atomic_store(&p->caller_waiting, 0);
    pthread_mutex_unlock(&p->mu);
}

void qwi_cpu_pool_destroy(qwi_cpu_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    /* A spinning worker sees stop through the generation bump. */
    atomic_fetch_add(&p->generation, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->started; i++) pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p->workers);
    free(p->share);
    free(p);
}
