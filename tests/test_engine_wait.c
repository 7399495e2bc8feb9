/*
 * test_engine_wait.c - the wait primitive (issue 14): qw_engine_wait sleeps
 * without spinning and wakes when another thread submits or cancels;
 * qw_engine_event_fd becomes readable on submit, cancel and steps that leave
 * work, and stays quiet once the work is done; qw_engine_has_work from a
 * thread that does not step.
 */
#include <criterion/criterion.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "qwinfer.h"
#include "util/testutil.h"

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static qw_engine *make_engine(void) {
    char *dir = qwt_model("engine-wait-tiny", "--shape tiny --dtype bf16 --seed 11");
    cr_assert_not_null(dir);
    qw_engine_options *o;
    qw_engine *e;
    cr_assert_eq(qw_engine_options_create(&o), QW_OK);
    cr_assert_eq(qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, dir), QW_OK);
    cr_assert_eq(qw_engine_create(o, &e), QW_OK, "%s", qw_last_error());
    qw_engine_options_destroy(o);
    free(dir);
    return e;
}

static qw_request *make_request(int max_tokens) {
    qw_request *r;
    int32_t ids[4] = {3, 9, 27, 81};
    cr_assert_eq(qw_request_create(&r), QW_OK);
    cr_assert_eq(qw_request_set_prompt(r, ids, 4), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_MAX_TOKENS, max_tokens), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_IGNORE_EOS, 1), QW_OK);
    return r;
}

static void drain(qw_engine *e) {
    qw_event ev[16];
    size_t n;
    while (qw_engine_has_work(e)) cr_assert_eq(qw_engine_step(e, ev, 16, sizeof ev[0], &n), QW_OK);
}

Test(engine_wait, idle_wait_times_out_without_spinning) {
    qw_engine *e = make_engine();
    cr_assert_eq(qw_engine_wait(e, 0), 0);
    double t0 = mono(), c0 = thread_cpu();
    cr_assert_eq(qw_engine_wait(e, 200), 0);
    double wall = mono() - t0, cpu = thread_cpu() - c0;
    cr_assert(wall >= 0.19, "woke after %.3f s without work", wall);
    /* a spinning wait would burn ~the whole 200 ms */
    cr_assert(cpu < 0.02, "idle wait used %.3f s of CPU", cpu);
    cr_assert_eq(qw_engine_wait(NULL, 10), 0);
    qw_engine_destroy(e);
}

typedef struct {
    qw_engine *e;
    qw_request *r;
    int delay_ms;
    double t_action;
    int cancel;
} actor;

static void *act_later(void *arg) {
    actor *a = arg;
    usleep((useconds_t)a->delay_ms * 1000);
    a->t_action = mono();
    if (a->cancel) cr_assert_eq(qw_engine_cancel(a->e, a->r), QW_OK);
    else cr_assert_eq(qw_engine_submit(a->e, a->r), QW_OK);
    return NULL;
}

Test(engine_wait, submit_from_another_thread_wakes_the_waiter) {
    qw_engine *e = make_engine();
    for (int round = 0; round < 3; round++) {
        qw_request *r = make_request(2);
        actor a = {e, r, 50, 0, 0};
        pthread_t t;
        cr_assert_eq(qw_engine_has_work(e), 0);
        pthread_create(&t, NULL, act_later, &a);
        double c0 = thread_cpu();
        cr_assert_eq(qw_engine_wait(e, 5000), 1);   /* bounded: a lost wake-up fails, not hangs */
        double woke = mono(), cpu = thread_cpu() - c0;
        pthread_join(t, NULL);
        cr_log_info("woke %.2f ms after the submit, %.2f ms of CPU while waiting", 1e3 * (woke - a.t_action),
                    1e3 * cpu);
        /* woken by the submit, not by a timeout; generous for loaded CI
         * machines (typically well under a millisecond) */
        cr_assert(woke - a.t_action < 0.25, "woke %.3f s after the submit", woke - a.t_action);
        cr_assert(cpu < 0.02, "waiting used %.3f s of CPU", cpu);
        cr_assert_eq(qw_engine_has_work(e), 1);
        drain(e);
        cr_assert_eq(qw_request_get_state(r), QW_STATE_FINISHED);
        qw_request_release(r);
    }
    qw_engine_destroy(e);
}

typedef struct {
    qw_engine *e;
    int result;
} waiter;
static void *wait_forever(void *arg) {
    waiter *w = arg;
    w->result = qw_engine_wait(w->e, 5000);
    return NULL;
}

Test(engine_wait, every_waiter_wakes_and_has_work_is_safe_elsewhere) {
    qw_engine *e = make_engine();
    waiter w[3] = {{e, -1}, {e, -1}, {e, -1}};
    pthread_t t[3];
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, wait_forever, &w[i]);
    usleep(30000);
    qw_request *r = make_request(3);
    cr_assert_eq(qw_engine_submit(e, r), QW_OK);
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(w[i].result, 1, "waiter %d", i);
    }
    drain(e);
    cr_assert_eq(qw_engine_has_work(e), 0);
    qw_request_release(r);
    qw_engine_destroy(e);
}

static int readable(int fd, int timeout_ms) {
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}
static void clear_fd(int fd) {
    uint64_t v;
    while (read(fd, &v, sizeof v) == (ssize_t)sizeof v) {
    }
}

Test(engine_wait, event_fd_follows_the_work) {
    qw_engine *e = make_engine();
    int fd = qw_engine_event_fd(e);
    cr_assert(fd >= 0, "%s", qw_last_error());
    cr_assert_eq(qw_engine_event_fd(e), fd, "the same descriptor every time");
    cr_assert_not(readable(fd, 0), "readable with nothing to do");

    /* a submit from another thread makes it readable */
    qw_request *r = make_request(1000);
    actor a = {e, r, 30, 0, 0};
    pthread_t t;
    pthread_create(&t, NULL, act_later, &a);
    cr_assert(readable(fd, 5000), "not readable after a submit");
    pthread_join(t, NULL);
    clear_fd(fd);
    /* a loop that blocks on the fd between steps keeps running: each step
     * that leaves work signals it again */
    qw_event ev[16];
    size_t n;
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(qw_engine_step(e, ev, 16, sizeof ev[0], &n), QW_OK);
        cr_assert(readable(fd, 0), "step %d left work but the fd is quiet", i);
        clear_fd(fd);
    }
    /* a cancel from another thread is work too */
    clear_fd(fd);
    actor c = {e, r, 10, 0, 1};
    pthread_create(&t, NULL, act_later, &c);
    pthread_join(t, NULL);
    cr_assert(readable(fd, 0), "not readable after a cancel");
    drain(e);
    cr_assert_eq(qw_request_get_finish_reason(r), QW_FINISH_CANCELLED);
    clear_fd(fd);
    cr_assert_eq(qw_engine_has_work(e), 0);
    cr_assert_not(readable(fd, 50), "readable after the work was done");
    qw_request_release(r);
    qw_engine_destroy(e);
    cr_assert_eq(qw_engine_event_fd(NULL), -1);
    cr_assert(strstr(qw_last_error(), "NULL") != NULL);
}

Test(engine_wait, event_fd_made_late_sees_earlier_work) {
    qw_engine *e = make_engine();
    qw_request *r = make_request(2);
    cr_assert_eq(qw_engine_submit(e, r), QW_OK);
    int fd = qw_engine_event_fd(e);
    cr_assert(fd >= 0);
    cr_assert(readable(fd, 0), "work submitted before the fd existed was missed");
    drain(e);
    qw_request_release(r);
    qw_engine_destroy(e);
}
