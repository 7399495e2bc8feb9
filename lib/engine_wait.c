/*
 * engine_wait.c - how a host's step loop sleeps while there is nothing to
 * do and wakes at once when there is: qw_engine_wait (a condition variable)
 * and qw_engine_event_fd (an eventfd for epoll/select, asyncio, Go's
 * netpoller), and qw_engine_has_work from any thread.
 *
 * Work comes from two places. Other threads put submissions and cancels in
 * the inbox (under inbox_mu) and then call qwi_engine_wake. The step thread
 * owns everything else; at the end of each step it publishes whether any of
 * that is left (step_busy) and wakes waiters if so, so a loop that blocks
 * on the eventfd between steps keeps running until the work is done. A
 * waiter checks "inbox non-empty or step_busy" under wake_mu before it
 * sleeps, and every wake broadcasts under wake_mu after the inbox changed:
 * no wake-up is lost between the check and the sleep.
 */
#include <errno.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"

qw_status qwi_engine_wake_init(qw_engine *e) {
    e->wake_fd = -1;
    atomic_store(&e->step_busy, 0);
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        return qwi_fail(QW_ERR_INTERNAL, "qw_engine_create: pthread_condattr_init failed");
    /* timeouts on CLOCK_MONOTONIC: a wall-clock jump neither shortens nor
     * stretches a qw_engine_wait */
    int rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (rc == 0) rc = pthread_cond_init(&e->wake_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) return qwi_fail(QW_ERR_INTERNAL, "qw_engine_create: pthread_cond_init failed");
    if (pthread_mutex_init(&e->wake_mu, NULL) != 0) {
        pthread_cond_destroy(&e->wake_cv);
        return qwi_fail(QW_ERR_INTERNAL, "qw_engine_create: pthread_mutex_init failed");
    }
    return QW_OK;
}

void qwi_engine_wake_destroy(qw_engine *e) {
    if (e->wake_fd >= 0) close(e->wake_fd);
    pthread_cond_destroy(&e->wake_cv);
    pthread_mutex_destroy(&e->wake_mu);
}

/* Make the eventfd readable (its counter > 0). Under wake_mu. */
static void signal_fd(qw_engine *e) {
    if (e->wake_fd < 0) return;
    uint64_t one = 1;
    /* EAGAIN: the counter is at its maximum, i.e. already readable */
    while (write(e->wake_fd, &one, sizeof one) < 0 && errno == EINTR) {
    }
}

void qwi_engine_wake(qw_engine *e) {
    pthread_mutex_lock(&e->wake_mu);
    pthread_cond_broadcast(&e->wake_cv);
    signal_fd(e);
    pthread_mutex_unlock(&e->wake_mu);
}

void qwi_engine_after_step(qw_engine *e) {
    int busy = e->pending_count > 0 || qwi_sched_has_work(&e->sched);
    atomic_store(&e->step_busy, busy);
    if (busy) qwi_engine_wake(e);
}

QW_API int qw_engine_has_work(qw_engine *e) {
    if (!e) return 0;
    if (atomic_load(&e->step_busy)) return 1;
    pthread_mutex_lock(&e->inbox_mu);
    int queued = e->inbox.count > 0 || e->cancels.count > 0;
    pthread_mutex_unlock(&e->inbox_mu);
    return queued;
}

QW_API int qw_engine_wait(qw_engine *e, int32_t timeout_ms) {
    if (!e) return 0;
    struct timespec deadline;
    if (timeout_ms > 0) {
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        deadline.tv_sec += timeout_ms / 1000;
        deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&e->wake_mu);
    int work;
    while (!(work = qw_engine_has_work(e)) && timeout_ms != 0) {
        int rc = timeout_ms < 0 ? pthread_cond_wait(&e->wake_cv, &e->wake_mu)
                                : pthread_cond_timedwait(&e->wake_cv, &e->wake_mu, &deadline);
        if (rc == ETIMEDOUT) {
            work = qw_engine_has_work(e);
            break;
        }
    }
    pthread_mutex_unlock(&e->wake_mu);
    return work;
}

QW_API int qw_engine_event_fd(qw_engine *e) {
    QWI_ERR_SCOPE(e);
    if (!e) {
        qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_engine_event_fd: engine is NULL");
        return -1;
    }
    pthread_mutex_lock(&e->wake_mu);
    if (e->wake_fd < 0) {
        e->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (e->wake_fd < 0) {
            int err = errno;
            pthread_mutex_unlock(&e->wake_mu);
            qwi_fail(QW_ERR_IO, "qw_engine_event_fd: eventfd failed (errno %d)", err);
            return -1;
        }
        /* work that arrived before the descriptor existed must not be missed */
        if (qw_engine_has_work(e)) signal_fd(e);
    }
    int fd = e->wake_fd;
    pthread_mutex_unlock(&e->wake_mu);
    return fd;
}
