/*
 * test_threadpool.c - the CPU backend's worker pool (lib/cpu/threadpool.h):
 * every task of every run runs exactly once and its writes are visible to
 * the caller when the run returns, whether the workers are still polling
 * from the previous run (back to back), have gone to sleep (a pause longer
 * than the poll time), or never poll (QWINFER_CPU_SPIN_US=0); destroying
 * the pool while workers poll or sleep joins them all; each thread starts
 * on its own contiguous share of a run and takes a share's tasks in order.
 */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/threadpool.h"

enum { MAX_TASKS = 257 };

typedef struct run_ctx {
    int32_t hits[MAX_TASKS];    /* plain ints: the pool must publish them */
    int32_t thread_ok;
    int threads;
    uint32_t salt;
} run_ctx;

static void count_task(void *vctx, int64_t task, int thread) {
    run_ctx *c = vctx;
    c->hits[task] += (int32_t)(c->salt + (uint32_t)task);
    if (thread < 0 || thread >= c->threads) c->thread_ok = 0;
    /* A little uneven work (0-255 steps), so threads finish at different
     * times. The hash is 32-bit: in int64_t arithmetic it was up to 40,000
     * steps a task, 20 s of this test on 2 cores. */
    volatile uint32_t spin = ((uint32_t)task * 2654435761u) >> 24;
    while (spin > 0) spin--;
}

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* runs rounds on a pool of `threads`, pausing pause_us between rounds
 * (0: back to back), and checks every task's count after each. */
static void hammer(int threads, int rounds, long pause_us) {
    qwi_cpu_pool *pool = NULL;
    cr_assert_eq(qwi_cpu_pool_create(threads, &pool), QW_OK, "%s", qw_last_error());
    cr_assert_eq(qwi_cpu_pool_size(pool), threads);
    run_ctx *c = calloc(1, sizeof *c);
    cr_assert_not_null(c);
    c->threads = threads;
    uint64_t rs = 0x9e3779b97f4a7c15ull;
    for (int r = 0; r < rounds; r++) {
        rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
        const int64_t n = 2 + (int64_t)(rs % (MAX_TASKS - 2));
        memset(c->hits, 0, sizeof c->hits);
        c->thread_ok = 1;
        c->salt = (uint32_t)(rs >> 32);
        qwi_cpu_pool_run(pool, n, count_task, c);
        for (int64_t t = 0; t < MAX_TASKS; t++) {
            const int32_t want = t < n ? (int32_t)(c->salt + (uint32_t)t) : 0;
            cr_assert_eq(c->hits[t], want, "round %d, %lld tasks: task %lld counted %d, want %d", r,
                         (long long)n, (long long)t, c->hits[t], want);
        }
        cr_assert(c->thread_ok, "round %d: a task got a thread index outside [0, %d)", r, threads);
        if (pause_us > 0) sleep_us(pause_us);
    }
    qwi_cpu_pool_destroy(pool);
    free(c);
}

Test(threadpool, back_to_back_runs_poll) {
    unsetenv("QWINFER_CPU_SPIN_US");
    hammer(2, 5000, 0);
    hammer(4, 2000, 0);
}

Test(threadpool, runs_after_the_workers_sleep) {
    /* 2 ms pauses: past the default 200 us poll, so each run wakes sleepers. */
    unsetenv("QWINFER_CPU_SPIN_US");
    hammer(2, 200, 2000);
    hammer(3, 100, 2000);
}

Test(threadpool, no_polling_sleeps_at_once) {
    setenv("QWINFER_CPU_SPIN_US", "0", 1);
    hammer(2, 2000, 0);
    hammer(3, 50, 300);
    unsetenv("QWINFER_CPU_SPIN_US");
}

Test(threadpool, long_poll_and_bad_values) {
    /* A poll longer than the pauses: workers never sleep between runs. */
    setenv("QWINFER_CPU_SPIN_US", "5000", 1);
    hammer(2, 200, 500);
    /* Unparsable or out-of-range values fall back to the default. */
    setenv("QWINFER_CPU_SPIN_US", "-3", 1);
    hammer(2, 500, 0);
    setenv("QWINFER_CPU_SPIN_US", "12abc", 1);
    hammer(2, 500, 0);
    unsetenv("QWINFER_CPU_SPIN_US");
}

Test(threadpool, destroy_while_polling_or_sleeping) {
    run_ctx *c = calloc(1, sizeof *c);
    cr_assert_not_null(c);
    c->threads = 2;
    for (int i = 0; i < 50; i++) {
        qwi_cpu_pool *pool = NULL;
        cr_assert_eq(qwi_cpu_pool_create(2, &pool), QW_OK);
        qwi_cpu_pool_run(pool, 8, count_task, c);
        if (i % 2) sleep_us(1000); /* odd: the worker has gone to sleep */
        qwi_cpu_pool_destroy(pool); /* even: it is still polling */
    }
    /* Never run at all. */
    qwi_cpu_pool *pool = NULL;
    cr_assert_eq(qwi_cpu_pool_create(3, &pool), QW_OK);
    qwi_cpu_pool_destroy(pool);
    free(c);
}

/* ---- the hand-out in shares (threadpool.c) ------------------------------ */

enum { SHARE_TASKS = 60, SHARE_MAX_THREADS = 8 };

typedef struct share_ctx {
    atomic_int ran[SHARE_TASKS];                 /* times each task ran     */
    _Atomic int64_t first[SHARE_MAX_THREADS];    /* each thread's first task, or -1 */
    _Atomic int64_t last[SHARE_MAX_THREADS];     /* each thread's latest task */
    atomic_int descending;                       /* a thread went back within a share */
    bool hold_first;                             /* task 0 waits (below)    */
    int threads;
    int64_t n;
} share_ctx;

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void share_task(void *vctx, int64_t task, int thread) {
    share_ctx *c = vctx;
    atomic_fetch_add(&c->ran[task], 1);
    int64_t none = -1;
    atomic_compare_exchange_strong(&c->first[thread], &none, task);
    /* Within one share a thread's tasks only go up: a share's counter only
     * grows, and a thread takes one task at a time from it. */
    const int64_t prev = atomic_load(&c->last[thread]);
    const int64_t share_of_prev = prev < 0 ? -1 : prev * c->threads / c->n;
    const int64_t share_of_task = task * c->threads / c->n;
    if (prev >= 0 && share_of_prev == share_of_task && task < prev) atomic_store(&c->descending, 1);
    atomic_store(&c->last[thread], task);
    if (task == 0 && c->hold_first) {
        /* Hold task 0 until every other thread has taken its first task
         * (or 2 s pass): then none of them can have found its own share
         * taken by the thread that owns task 0. */
        const int64_t give_up = mono_ns() + 2000000000;
        for (int i = 0; i < c->threads && mono_ns() < give_up; i++)
            while (i != thread && atomic_load(&c->first[i]) < 0 && mono_ns() < give_up) {}
    }
    const int64_t until = mono_ns() + 20000;   /* 20 us a task */
    while (mono_ns() < until) {}
}

static void share_reset(share_ctx *c, int threads, int64_t n) {
    for (int t = 0; t < SHARE_TASKS; t++) atomic_store(&c->ran[t], 0);
    for (int i = 0; i < SHARE_MAX_THREADS; i++) {
        atomic_store(&c->first[i], -1);
        atomic_store(&c->last[i], -1);
    }
    atomic_store(&c->descending, 0);
    c->threads = threads;
    c->n = n;
}

Test(threadpool, each_thread_starts_on_its_own_share) {
    /* Thread i of T starts at task n*i/T (its share's first). Task 0
     * waits for the other threads' first tasks, so with one shared counter
     * the worker would start at task 1 in every run; in shares it starts
     * at n/2, unless the caller was held off between publishing the run
     * and taking task 0 for as long as the worker's whole share takes
     * (possible on a loaded machine: so one run in 20 where both start on
     * their own share passes). Two threads, no more than CI's cores. */
    unsetenv("QWINFER_CPU_SPIN_US");
    const int threads = 2;
    qwi_cpu_pool *pool = NULL;
    cr_assert_eq(qwi_cpu_pool_create(threads, &pool), QW_OK, "%s", qw_last_error());
    share_ctx *c = calloc(1, sizeof *c);
    cr_assert_not_null(c);
    int clean_runs = 0;
    for (int r = 0; r < 20; r++) {
        share_reset(c, threads, SHARE_TASKS);
        c->hold_first = true;
        qwi_cpu_pool_run(pool, SHARE_TASKS, share_task, c);
        for (int t = 0; t < SHARE_TASKS; t++)
            cr_assert_eq(atomic_load(&c->ran[t]), 1, "run %d: task %d ran %d times", r, t,
                         atomic_load(&c->ran[t]));
        cr_assert_eq(atomic_load(&c->descending), 0,
                     "run %d: a thread took a lower task of a share after a higher one", r);
        bool clean = true;
        for (int i = 0; i < threads; i++)
            clean &= atomic_load(&c->first[i]) == (int64_t)SHARE_TASKS * i / threads;
        clean_runs += clean;
    }
    cr_assert_gt(clean_runs, 0, "in no run of 20 did every thread start on its own share");
    qwi_cpu_pool_destroy(pool);
    free(c);
}

Test(threadpool, fewer_tasks_than_threads) {
    /* Shares of no task: those threads go straight to the others'. */
    unsetenv("QWINFER_CPU_SPIN_US");
    qwi_cpu_pool *pool = NULL;
    cr_assert_eq(qwi_cpu_pool_create(SHARE_MAX_THREADS, &pool), QW_OK, "%s", qw_last_error());
    share_ctx *c = calloc(1, sizeof *c);
    cr_assert_not_null(c);
    for (int64_t n = 1; n <= SHARE_MAX_THREADS + 1; n++) {
        share_reset(c, SHARE_MAX_THREADS, n);
        qwi_cpu_pool_run(pool, n, share_task, c);
        for (int64_t t = 0; t < SHARE_TASKS; t++)
            cr_assert_eq(atomic_load(&c->ran[t]), t < n ? 1 : 0, "%lld tasks: task %lld ran %d times",
                         (long long)n, (long long)t, atomic_load(&c->ran[t]));
    }
    qwi_cpu_pool_destroy(pool);
    free(c);
}
