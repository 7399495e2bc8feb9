/*
 * test_threadpool.c - the CPU backend's worker pool (lib/cpu/threadpool.h):
 * every task of every run runs exactly once and its writes are visible to
 * the caller when the run returns, whether the workers are still polling
 * from the previous run (back to back), have gone to sleep (a pause longer
 * than the poll time), or never poll (QWINFER_CPU_SPIN_US=0); destroying
 * the pool while workers poll or sleep joins them all.
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
