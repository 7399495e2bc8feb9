/*
 * test_object_errors.c - error messages that belong to the object, not the
 * OS thread (issue 14): the case that broke Go bindings (eight threads
 * failing at once, then reading the message) gives zero wrong messages,
 * and a message is readable from another thread than the failing call's.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qwinfer.h"
#include "util/testutil.h"

static void get_req_error(const qw_request *r, char *buf, size_t cap) {
    size_t len = 0;
    cr_assert_eq(qw_request_get_error(r, buf, cap, &len), QW_OK);
    cr_assert(len < cap);
}

#define NTHREADS 8
#define ROUNDS 3000

typedef struct {
    int id;
    qw_request *req;
    qw_engine_options *opts;
    int wrong;
} worker;

/* Each thread fails with a value only it uses and checks that its object
 * names that value, every time. */
static void *fail_many_times(void *arg) {
    worker *w = arg;
    char want[64], got[1024];
    for (int i = 0; i < ROUNDS; i++) {
        int64_t bad = -1000 - (int64_t)w->id * 100000 - i;   /* top-k must be >= -1 */
        if (qw_request_set_int(w->req, QW_REQ_TOP_K, bad) != QW_ERR_INVALID_ARGUMENT) w->wrong++;
        snprintf(want, sizeof want, "%lld", (long long)bad);
        get_req_error(w->req, got, sizeof got);
        if (!strstr(got, want)) w->wrong++;
        int64_t badb = 100000 + w->id * 1000 + i % 1000;   /* block size must be <= 1024 */
        if (qw_engine_options_set_int(w->opts, QW_OPT_BLOCK_SIZE, badb) != QW_ERR_INVALID_ARGUMENT) w->wrong++;
        snprintf(want, sizeof want, "%lld", (long long)badb);
        size_t len;
        cr_assert_eq(qw_engine_options_get_error(w->opts, got, sizeof got, &len), QW_OK);
        if (!strstr(got, want)) w->wrong++;
    }
    return NULL;
}

Test(object_errors, eight_threads_zero_wrong_messages) {
    worker w[NTHREADS];
    pthread_t t[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        w[i].id = i;
        w[i].wrong = 0;
        cr_assert_eq(qw_request_create(&w[i].req), QW_OK);
        cr_assert_eq(qw_engine_options_create(&w[i].opts), QW_OK);
        pthread_create(&t[i], NULL, fail_many_times, &w[i]);
    }
    int wrong = 0;
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(t[i], NULL);
        wrong += w[i].wrong;
        qw_request_release(w[i].req);
        qw_engine_options_destroy(w[i].opts);
    }
    cr_assert_eq(wrong, 0, "%d wrong or missing messages in %d calls", wrong, NTHREADS * ROUNDS * 2);
}

typedef struct {
    qw_request *req;
    qw_status st;
} failer;
static void *fail_once(void *arg) {
    failer *f = arg;
    f->st = qw_request_set_double(f->req, QW_REQ_TOP_P, 7.5);
    return NULL;
}

Test(object_errors, read_from_another_thread_and_scoped_per_object) {
    qw_request *a, *b;
    cr_assert_eq(qw_request_create(&a), QW_OK);
    cr_assert_eq(qw_request_create(&b), QW_OK);
    char buf[1024];
    get_req_error(a, buf, sizeof buf);
    cr_assert_str_eq(buf, "", "no call failed yet");
    failer f = {a, QW_OK};
    pthread_t t;
    pthread_create(&t, NULL, fail_once, &f);
    pthread_join(t, NULL);
    cr_assert_eq(f.st, QW_ERR_INVALID_ARGUMENT);
    get_req_error(a, buf, sizeof buf);   /* this thread never failed */
    cr_assert(strstr(buf, "7.5") && strstr(buf, "QW_REQ_TOP_P"), "%s", buf);
    get_req_error(b, buf, sizeof buf);
    cr_assert_str_eq(buf, "", "another request's failure leaked into b: %s", buf);
    /* success keeps the last failure's message (as qw_last_error) */
    cr_assert_eq(qw_request_set_double(a, QW_REQ_TOP_P, 0.5), QW_OK);
    get_req_error(a, buf, sizeof buf);
    cr_assert(strstr(buf, "7.5"));
    /* the buffer convention: cut, NUL-terminated, full length reported */
    size_t len = 0;
    char small[8];
    cr_assert_eq(qw_request_get_error(a, small, sizeof small, &len), QW_OK);
    cr_assert_eq(strlen(small), 7);
    cr_assert(len > 7);
    cr_assert_eq(qw_request_get_error(a, NULL, 0, &len), QW_OK);
    cr_assert(len > 7);
    cr_assert_eq(qw_request_get_error(NULL, buf, sizeof buf, &len), QW_ERR_INVALID_ARGUMENT);
    cr_assert_eq(qw_request_get_error(a, NULL, 4, &len), QW_ERR_INVALID_ARGUMENT);
    qw_request_release(a);
    qw_request_release(b);
}

Test(object_errors, engine_and_submit_scopes) {
    char *dir = qwt_model("object-errors-tiny", "--shape tiny --dtype bf16 --seed 5");
    cr_assert_not_null(dir);
    qw_engine_options *o;
    qw_engine *e;
    cr_assert_eq(qw_engine_options_create(&o), QW_OK);
    cr_assert_eq(qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, "/nonexistent/qwinfer-model"), QW_OK);
    cr_assert_neq(qw_engine_create(o, &e), QW_OK);
    char buf[1024];
    size_t len;
    cr_assert_eq(qw_engine_options_get_error(o, buf, sizeof buf, &len), QW_OK);
    cr_assert(strstr(buf, "/nonexistent/qwinfer-model"), "create's failure lands in the options: %s", buf);
    cr_assert_eq(qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, dir), QW_OK);
    cr_assert_eq(qw_engine_create(o, &e), QW_OK, "%s", qw_last_error());
    qw_engine_options_destroy(o);

    /* a submit failure is the request's */
    qw_request *r;
    int32_t bad = 1 << 30;
    cr_assert_eq(qw_request_create(&r), QW_OK);
    cr_assert_eq(qw_request_set_prompt(r, &bad, 1), QW_OK);
    cr_assert_eq(qw_engine_submit(e, r), QW_ERR_TOKEN_OUT_OF_RANGE);
    cr_assert_eq(qw_request_get_error(r, buf, sizeof buf, &len), QW_OK);
    cr_assert(strstr(buf, "1073741824"), "%s", buf);
    /* a step failure is the engine's */
    size_t n;
    cr_assert_eq(qw_engine_step(e, NULL, 4, sizeof(qw_event), &n), QW_ERR_INVALID_ARGUMENT);
    cr_assert_eq(qw_engine_get_error(e, buf, sizeof buf, &len), QW_OK);
    cr_assert(strstr(buf, "qw_engine_step"), "%s", buf);
    qw_request_release(r);
    qw_engine_destroy(e);
    free(dir);
}
