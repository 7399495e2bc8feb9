/*
 * threadpool.h - the CPU backend's persistent worker pool: one parallel_for
 * at a time; between calls the workers poll for QWINFER_CPU_SPIN_US
 * (default 200 us), then sleep on a condition variable (threadpool.c says
 * why and how no wake-up is lost).
 *
 * Each thread starts on its own contiguous share of the tasks, in order,
 * and then takes what the others have not yet taken (threadpool.c says
 * why), so which thread runs a task is unspecified: a task must compute its
 * outputs from its index alone, which is what keeps results independent of
 * the thread count.
 */
#ifndef QWI_CPU_THREADPOOL_H
#define QWI_CPU_THREADPOOL_H

#include "common.h"

typedef struct qwi_cpu_pool qwi_cpu_pool;

/* One task: task in [0, n_tasks), thread in [0, pool size) names the
 * per-thread scratch the task may use (0 is the calling thread). */
typedef void (*qwi_cpu_task_fn)(void *ctx, int64_t task, int thread);

/* Start a pool of num_threads threads in all, the caller included (so
 * num_threads-1 workers). num_threads <= 0 means the CPUs in this process's
 * affinity mask. On success *out is owned by the caller; on failure *out is
 * NULL, no thread is left running and the message says why. */
qw_status qwi_cpu_pool_create(int32_t num_threads, qwi_cpu_pool **out);

/* Threads in the pool, the caller included (>= 1). */
int qwi_cpu_pool_size(const qwi_cpu_pool *pool);

/* Run fn(ctx, t, thread) for every t in [0, n_tasks) and return when all are
 * done. The calling thread works too. Not reentrant: one call at a time per
 * pool, and fn must not call back into the pool. n_tasks <= 0 is a no-op. */
void qwi_cpu_pool_run(qwi_cpu_pool *pool, int64_t n_tasks, qwi_cpu_task_fn fn, void *ctx);

/* Stop and join the workers, free the pool. NULL is a no-op. */
void qwi_cpu_pool_destroy(qwi_cpu_pool *pool);

#endif
