/*
 * test_queue_limit.c - QW_OPT_MAX_WAITING_REQUESTS (issue #10, item 7): a
 * bounded queue of requests submitted and not yet scheduled for the first
 * time; submit beyond it is refused with QW_ERR_QUEUE_FULL, from any number
 * of threads at once, and places come back as requests are scheduled,
 * cancelled or time out. Preempted requests are not "waiting" in this
 * sense: they were admitted already.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "qwinfer.h"
#include "util/engine_util.h"
#include "util/testutil.h"

static qw_engine *engine_with(int64_t max_waiting, int64_t max_num_seqs, int64_t num_kv_blocks) {
    char *dir = qwt_model("queue-tiny-f32", "--shape tiny --dtype f32 --seed 29");
    cr_assert_not_null(dir);
    qw_engine_options *o = NULL;
    cr_assert_eq(qw_engine_options_create(&o), QW_OK);
    cr_assert_eq(qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, dir), QW_OK);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_NUM_THREADS, 1), QW_OK);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_MAX_WAITING_REQUESTS, max_waiting), QW_OK);
    if (max_num_seqs) cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_MAX_NUM_SEQS, max_num_seqs), QW_OK);
    if (num_kv_blocks) cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_NUM_KV_BLOCKS, num_kv_blocks), QW_OK);
    qw_engine *e = NULL;
    cr_assert_eq(qw_engine_create(o, &e), QW_OK, "%s", qw_last_error());
    qw_engine_options_destroy(o);
    free(dir);
    return e;
}

static qw_request *new_request(int32_t max_tokens, int32_t seed) {
    int32_t prompt[8];
    qwt_make_prompt(prompt, 8, 512, (uint64_t)seed);
    qw_request *r = NULL;
    cr_assert_eq(qw_request_create(&r), QW_OK);
    cr_assert_eq(qw_request_set_prompt(r, prompt, 8), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_MAX_TOKENS, max_tokens), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_IGNORE_EOS, 1), QW_OK);
    return r;
}

static void assert_full(qw_engine *e, qw_request *r) {
    qw_status st = qw_engine_submit(e, r);
    cr_assert_eq(st, QW_ERR_QUEUE_FULL, "got %s (%s)", qw_status_string(st), qw_last_error());
    cr_assert(strstr(qw_last_error(), "QW_OPT_MAX_WAITING_REQUESTS"), "%s", qw_last_error());
    cr_assert_eq(qw_request_get_state(r), QW_STATE_CREATED, "a refused request stays unsubmitted");
}

static void step(qw_engine *e) {
    qw_event ev[64];
    size_t n;
    cr_assert_eq(qw_engine_step(e, ev, 64, sizeof ev[0], &n), QW_OK, "%s", qw_last_error());
}

static void drain(qw_engine *e) {
    while (qw_engine_has_work(e)) step(e);
}

Test(queue_limit, status_and_option) {
    cr_assert_str_eq(qw_status_string(QW_ERR_QUEUE_FULL), "QW_ERR_QUEUE_FULL: too many requests waiting");
    cr_assert_eq((int)QW_ERR_QUEUE_FULL, 15);
    qw_engine_options *o;
    cr_assert_eq(qw_engine_options_create(&o), QW_OK);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_MAX_WAITING_REQUESTS, -1), QW_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(qw_last_error(), "QW_OPT_MAX_WAITING_REQUESTS"), "%s", qw_last_error());
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_MAX_WAITING_REQUESTS, 0), QW_OK);
    qw_engine_options_destroy(o);
}

/* One running slot and a queue of 2: the inbox and the never-admitted
 * waiting requests count; a request leaves the count when first scheduled. */
Test(queue_limit, submit_beyond_the_limit_is_refused) {
    qw_engine *e = engine_with(2, 1, 0);
    qw_request *r[5];
    for (int i = 0; i < 5; i++) r[i] = new_request(4, i + 1);
    cr_assert_eq(qw_engine_submit(e, r[0]), QW_OK);
    cr_assert_eq(qw_engine_submit(e, r[1]), QW_OK);
    assert_full(e, r[2]);
    step(e);   /* r[0] runs, r[1] waits: one place free */
    cr_assert_eq(qw_request_get_state(r[0]), QW_STATE_RUNNING);
    cr_assert_eq(qw_engine_submit(e, r[2]), QW_OK, "%s", qw_last_error());
    assert_full(e, r[3]);
    /* a cancelled waiting request gives its place back at the next step */
    cr_assert_eq(qw_engine_cancel(e, r[1]), QW_OK);
    assert_full(e, r[3]);
    step(e);
    cr_assert_eq(qw_request_get_finish_reason(r[1]), QW_FINISH_CANCELLED);
    cr_assert_eq(qw_engine_submit(e, r[3]), QW_OK, "%s", qw_last_error());
    assert_full(e, r[4]);
    drain(e);
    cr_assert_eq(qw_engine_submit(e, r[4]), QW_OK, "%s", qw_last_error());
    drain(e);
    for (int i = 0; i < 5; i++) {
        if (i != 1) cr_expect_eq(qw_request_get_finish_reason(r[i]), QW_FINISH_LENGTH, "request %d", i);
        qw_request_release(r[i]);
    }
    qw_engine_destroy(e);
}

/* A request that times out in the queue gives its place back too. */
Test(queue_limit, timeout_frees_a_place) {
    qw_engine *e = engine_with(1, 1, 0);
    qw_request *run = new_request(200, 1), *late = new_request(4, 2), *next = new_request(4, 3);
    cr_assert_eq(qw_engine_submit(e, run), QW_OK);
    step(e);
    cr_assert_eq(qw_request_set_int(late, QW_REQ_MAX_QUEUE_MS, 1), QW_OK);
    cr_assert_eq(qw_engine_submit(e, late), QW_OK);
    assert_full(e, next);
    while (qw_request_get_state(late) != QW_STATE_FINISHED) step(e);
    cr_assert_eq(qw_request_get_finish_reason(late), QW_FINISH_TIMEOUT);
    cr_assert_eq(qw_engine_submit(e, next), QW_OK, "%s", qw_last_error());
    cr_assert_eq(qw_engine_cancel(e, run), QW_OK);
    drain(e);
    qw_request_release(run);
    qw_request_release(late);
    qw_request_release(next);
    qw_engine_destroy(e);
}

/* Preempted requests are admitted work, not queue: they do not count. */
Test(queue_limit, preempted_requests_do_not_count) {
    /* 8 blocks of 16 = 128 tokens; two requests growing to 8 + 100 each
     * cannot both stay, so one is preempted back to waiting. */
    qw_engine *e = engine_with(1, 2, 8);
    qw_request *a = new_request(100, 1), *b = new_request(100, 2), *c = new_request(4, 3);
    cr_assert_eq(qw_engine_submit(e, a), QW_OK);
    step(e);
    cr_assert_eq(qw_engine_submit(e, b), QW_OK);
    qw_engine_stats st;
    int guard = 0;
    do {
        step(e);
        cr_assert_eq(qw_engine_get_stats(e, &st, sizeof st), QW_OK);
        cr_assert_lt(++guard, 1000, "no preemption happened");
    } while (st.num_preempted_waiting == 0);
    cr_assert_eq(st.num_waiting, 1);
    cr_assert_eq(qw_engine_submit(e, c), QW_OK, "a preempted request took the queue's place: %s", qw_last_error());
    drain(e);
    cr_expect_eq(qw_request_get_finish_reason(a), QW_FINISH_LENGTH);
    cr_expect_eq(qw_request_get_finish_reason(b), QW_FINISH_LENGTH);
    cr_expect_eq(qw_request_get_finish_reason(c), QW_FINISH_LENGTH);
    qw_request_release(a);
    qw_request_release(b);
    qw_request_release(c);
    qw_engine_destroy(e);
}

/* Many threads submitting at once (no step runs): exactly the limit gets in. */
enum { THREADS = 8, PER_THREAD = 40, LIMIT = 37 };

typedef struct submitter {
    qw_engine *e;
    qw_request *r[PER_THREAD];
    atomic_int *ok, *full, *other;
    atomic_int *go;
} submitter;

static void *submit_all(void *arg) {
    submitter *s = arg;
    while (!atomic_load(s->go)) {}
    for (int i = 0; i < PER_THREAD; i++) {
        qw_status st = qw_engine_submit(s->e, s->r[i]);
        atomic_fetch_add(st == QW_OK ? s->ok : st == QW_ERR_QUEUE_FULL ? s->full : s->other, 1);
    }
    return NULL;
}

Test(queue_limit, concurrent_submitters_never_exceed_it) {
    qw_engine *e = engine_with(LIMIT, 0, 0);
    static submitter subs[THREADS];
    atomic_int ok = 0, full = 0, other = 0, go = 0;
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) {
        subs[t] = (submitter){.e = e, .ok = &ok, .full = &full, .other = &other, .go = &go};
        for (int i = 0; i < PER_THREAD; i++) subs[t].r[i] = new_request(2, t * PER_THREAD + i + 1);
        cr_assert_eq(pthread_create(&th[t], NULL, submit_all, &subs[t]), 0);
    }
    atomic_store(&go, 1);
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    cr_assert_eq(atomic_load(&other), 0);
    cr_assert_eq(atomic_load(&ok), LIMIT);
    cr_assert_eq(atomic_load(&full), THREADS * PER_THREAD - LIMIT);
    drain(e);
    qw_engine_stats st;
    cr_assert_eq(qw_engine_get_stats(e, &st, sizeof st), QW_OK);
    cr_assert_eq(st.num_finished, (uint64_t)LIMIT);
    for (int t = 0; t < THREADS; t++)
        for (int i = 0; i < PER_THREAD; i++) qw_request_release(subs[t].r[i]);
    qw_engine_destroy(e);
}
