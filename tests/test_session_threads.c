/*
 * test_session_threads.c - sessions under concurrent submit. Submitter
 * threads hammer qw_engine_submit on a few shared sessions while the step
 * thread steps and forks, reads, destroys and replaces those same sessions.
 * Every call must give a documented status, a fork must copy the history
 * it saw, and nothing may touch freed memory: `make test` runs this under
 * ASan, where a history read racing the submit's realloc, or a submit on a
 * destroyed session, is a heap-use-after-free.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qwinfer.h"
#include "util/engine_util.h"
#include "util/testutil.h"

#define NSLOTS 8
#define NSUBMITTERS 3
#define MAX_LEN 96

typedef struct shared {
    qw_engine *engine;
    int32_t vocab;
    pthread_mutex_t mu;            /* guards slot[]: the step thread swaps them */
    qw_session *slot[NSLOTS];
    atomic_bool stop;
    atomic_long submitted, busy, destroyed, too_long;
    atomic_int bad;                /* an unexpected status seen by a submitter */
    char bad_msg[256];
} shared;

static void *submitter(void *arg) {
    shared *sh = arg;
    unsigned seed = (unsigned)(uintptr_t)&seed;
    while (!atomic_load(&sh->stop)) {
        qw_request *r = NULL;
        if (qw_request_create(&r) != QW_OK) {
            atomic_store(&sh->bad, 1);
            break;
        }
        int32_t prompt[3];
        int np = 1 + (int)(rand_r(&seed) % 3);
        for (int i = 0; i < np; i++) prompt[i] = (int32_t)(rand_r(&seed) % (unsigned)sh->vocab);
        qw_request_set_prompt(r, prompt, (size_t)np);
        qw_request_set_int(r, QW_REQ_MAX_TOKENS, 1 + (int)(rand_r(&seed) % 2));
        qw_request_set_int(r, QW_REQ_IGNORE_EOS, 1);
        /* The handle is valid while we hold the test lock; the submit below
         * races the step thread destroying or forking the session. */
        pthread_mutex_lock(&sh->mu);
        qw_status st = qw_request_set_session(r, sh->slot[rand_r(&seed) % NSLOTS]);
        pthread_mutex_unlock(&sh->mu);
        /* Retry while busy: the session goes idle when its request finishes
         * on the step thread, which then forks or destroys idle sessions;
         * this submit lands in the middle of that. */
        if (st == QW_OK) {
            for (int tries = 0; tries < 5000 && !atomic_load(&sh->stop); tries++) {
                st = qw_engine_submit(sh->engine, r);
                if (st != QW_ERR_SESSION_BUSY) break;
                atomic_fetch_add(&sh->busy, 1);
                sched_yield();
            }
        }
        switch (st) {
        case QW_OK: atomic_fetch_add(&sh->submitted, 1); break;
        case QW_ERR_SESSION_BUSY: break;
        case QW_ERR_INVALID_STATE:
            /* only for a session destroyed after we picked it */
            if (!strstr(qw_last_error(), "destroyed")) goto bad;
            atomic_fetch_add(&sh->destroyed, 1);
            break;
        case QW_ERR_TOO_LONG: atomic_fetch_add(&sh->too_long, 1); break;
        default:
        bad:
            if (!atomic_exchange(&sh->bad, 1))
                snprintf(sh->bad_msg, sizeof sh->bad_msg, "%s: %s", qw_status_string(st), qw_last_error());
        }
        qw_request_release(r);
    }
    return NULL;
}

static qw_session *new_session(qw_engine *e) {
    qw_session *s = NULL;
    cr_assert_eq(qw_session_create(e, &s), QW_OK, "%s", qw_last_error());
    return s;
}

/* The history of s (at most cap ids), checked to be vocabulary ids. */
static size_t history(const shared *sh, qw_session *s, int32_t *buf, size_t cap) {
    size_t n = 0;
    cr_assert_eq(qw_session_get_tokens(s, buf, cap, &n), QW_OK, "%s", qw_last_error());
    cr_assert_leq(n, cap);
    for (size_t i = 0; i < n; i++) cr_assert(buf[i] >= 0 && buf[i] < sh->vocab, "history id %d", buf[i]);
    return n;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Fork s, check the fork's history is the source's, and return the fork. */
static qw_session *fork_checked(const shared *sh, qw_session *s, int32_t *a, int32_t *b, size_t cap) {
    qw_session *f = NULL;
    qw_status st = qw_session_fork(s, &f);
    if (st == QW_ERR_SESSION_BUSY) return NULL;
    cr_assert_eq(st, QW_OK, "fork: %s", qw_last_error());
    /* Only the step thread changes a history's content, so the fork holds
     * exactly what the source holds now, whatever submits came between. */
    size_t la = history(sh, s, a, cap), lb = history(sh, f, b, cap);
    cr_assert_eq(la, lb, "fork length %zu, source %zu", lb, la);
    cr_assert_arr_eq(a, b, la * sizeof a[0]);
    return f;
}

/* Step for about `seconds` while the submitters run; every step, each slot
 * is read and maybe forked. replace: the fork (or a fresh session) may take
 * the slot of a destroyed source, racing submits that hold the old handle;
 * else slots live on and forks are destroyed at once (histories then grow
 * long, so max_len must allow it). */
static void race(const char *model, int32_t max_len, int32_t kv_blocks, bool replace, double seconds) {
    char *dir = qwt_model(model, replace ? "--shape tiny --dtype f32 --seed 71"
                                         : "--shape tiny --dtype f32 --seed 71 --max-pos 8192");
    cr_assert_not_null(dir);
    qwt_engine_cfg cfg = {.threads = 1, .max_model_len = max_len, .num_kv_blocks = kv_blocks};
    shared *sh = calloc(1, sizeof *sh);
    cr_assert_not_null(sh);
    sh->engine = qwt_engine_new(dir, &cfg);
    sh->vocab = qw_engine_vocab_size(sh->engine);
    pthread_mutex_init(&sh->mu, NULL);
    for (int k = 0; k < NSLOTS; k++) sh->slot[k] = new_session(sh->engine);

    pthread_t th[NSUBMITTERS];
    for (int t = 0; t < NSUBMITTERS; t++) cr_assert_eq(pthread_create(&th[t], NULL, submitter, sh), 0);

    unsigned seed = 12345;
    long forks = 0, destroys = 0, reads = 0;
    size_t cap = (size_t)max_len;
    int32_t *a = malloc(cap * sizeof *a), *b = malloc(cap * sizeof *b);
    cr_assert(a && b);
    qw_event ev[64];
    double t_end = now_s() + seconds;
    for (int iter = 0; iter < 50000 && now_s() < t_end; iter++) {
        size_t n = 0;
        cr_assert_eq(qw_engine_step(sh->engine, ev, 64, sizeof ev[0], &n), QW_OK, "%s", qw_last_error());
        for (int k = 0; k < NSLOTS; k++) {
            qw_session *s = sh->slot[k];
            size_t len = history(sh, s, a, cap);
            reads++;
            unsigned action = rand_r(&seed) % 3;
            if (!replace) action = action != 0;             /* fork twice as often */
            if (replace && len + 16 > cap) action = 2;     /* no room left: replace it */
            if (action == 0) continue;
            qw_session *next = action == 1 ? fork_checked(sh, s, a, b, cap) : NULL;
            if (action == 1 && !next) continue;            /* busy */
            if (action == 1) forks++;
            if (!replace) {
                /* Fork again while the session stays idle: a submitter is
                 * likely retrying on it right now. */
                for (int again = 0; next && again < 8; again++) {
                    cr_assert_eq(qw_session_destroy(next), QW_OK, "%s", qw_last_error());
                    next = fork_checked(sh, s, a, b, cap);
                    forks += next != NULL;
                }
                if (next) cr_assert_eq(qw_session_destroy(next), QW_OK, "%s", qw_last_error());
                continue;
            }
            if (!next) next = new_session(sh->engine);
            /* Swap under the test lock, which submitters hold only while
             * they pick a slot: their submits race the destroy. */
            pthread_mutex_lock(&sh->mu);
            qw_status st = qw_session_destroy(s);
            if (st == QW_OK) sh->slot[k] = next;
            pthread_mutex_unlock(&sh->mu);
            cr_assert(st == QW_OK || st == QW_ERR_SESSION_BUSY, "destroy: %s", qw_last_error());
            if (st == QW_OK) destroys++;
            else cr_assert_eq(qw_session_destroy(next), QW_OK, "%s", qw_last_error());
        }
    }
    atomic_store(&sh->stop, true);
    for (int t = 0; t < NSUBMITTERS; t++) pthread_join(th[t], NULL);
    cr_assert_eq(atomic_load(&sh->bad), 0, "a submitter got %s", sh->bad_msg);

    size_t n = 0;
    while (qw_engine_has_work(sh->engine))
        cr_assert_eq(qw_engine_step(sh->engine, ev, 64, sizeof ev[0], &n), QW_OK, "%s", qw_last_error());
    for (int k = 0; k < NSLOTS; k++) cr_assert_eq(qw_session_destroy(sh->slot[k]), QW_OK, "%s", qw_last_error());
    cr_assert_eq(qw_engine_num_free_kv_blocks(sh->engine), qw_engine_num_kv_blocks(sh->engine),
                 "every block is back once every session is gone");
    cr_log_info("%ld submitted, %ld busy, %ld on destroyed sessions, %ld too long; %ld forks, %ld destroys, %ld reads",
                atomic_load(&sh->submitted), atomic_load(&sh->busy), atomic_load(&sh->destroyed),
                atomic_load(&sh->too_long), forks, destroys, reads);
    /* The races were exercised, not skipped. */
    cr_assert_gt(atomic_load(&sh->submitted), 10);
    cr_assert_gt(forks, 10);
    if (replace) cr_assert_gt(destroys, 10);
    qw_engine_destroy(sh->engine);
    pthread_mutex_destroy(&sh->mu);
    free(a);
    free(b);
    free(sh);
    free(dir);
}

/* Submits race destroys (a request holding a destroyed session's handle),
 * forks and reads. A small pool, so idle sessions' KV is reclaimed under
 * pressure too. */
Test(session_threads, submit_races_fork_destroy_and_reads, .timeout = 120) {
    race("sesthr-tiny-f32", 96, 40, true, 1.5);
}

/* Sessions that live on: every submit grows (reallocates) the history that
 * forks and reads copy on the step thread. */
Test(session_threads, submit_races_fork_and_reads, .timeout = 120) {
    race("sesthr-long-tiny-f32", 8192, 0, false, 1.5);
}

/* Single-threaded, so it fails deterministically without the fix: a
 * request that still points at a destroyed session is refused at submit
 * with a message, and destroying twice while a request holds it is
 * detected. */
Test(session_threads, submit_on_destroyed_session_is_refused) {
    char *dir = qwt_model("sesthr-tiny-f32", "--shape tiny --dtype f32 --seed 71");
    cr_assert_not_null(dir);
    qwt_engine_cfg cfg = {.threads = 1, .max_model_len = MAX_LEN};
    qw_engine *e = qwt_engine_new(dir, &cfg);
    qw_session *s = new_session(e);
    qw_request *r = NULL;
    cr_assert_eq(qw_request_create(&r), QW_OK);
    int32_t prompt[2] = {1, 2};
    cr_assert_eq(qw_request_set_prompt(r, prompt, 2), QW_OK);
    cr_assert_eq(qw_request_set_session(r, s), QW_OK);
    cr_assert_eq(qw_session_destroy(s), QW_OK);
    qw_status st = qw_engine_submit(e, r);
    cr_assert_eq(st, QW_ERR_INVALID_STATE, "got %s (%s)", qw_status_string(st), qw_last_error());
    cr_assert(strstr(qw_last_error(), "destroyed"), "message: %s", qw_last_error());
    st = qw_session_destroy(s);
    cr_assert_eq(st, QW_ERR_INVALID_STATE, "second destroy: %s (%s)", qw_status_string(st), qw_last_error());
    qw_session *f = NULL;
    st = qw_session_fork(s, &f);
    cr_assert_eq(st, QW_ERR_INVALID_STATE, "fork of a destroyed session: %s", qw_status_string(st));
    cr_assert_null(f);
    /* The request can move to a live session and run. */
    qw_session *s2 = new_session(e);
    cr_assert_eq(qw_request_set_session(r, s2), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_MAX_TOKENS, 2), QW_OK);
    cr_assert_eq(qw_engine_submit(e, r), QW_OK, "%s", qw_last_error());
    qw_event ev[8];
    size_t n;
    while (qw_engine_has_work(e)) cr_assert_eq(qw_engine_step(e, ev, 8, sizeof ev[0], &n), QW_OK);
    size_t len = 0;
    cr_assert_eq(qw_session_get_tokens(s2, NULL, 0, &len), QW_OK);
    cr_assert_eq(len, 4);
    cr_assert_eq(qw_request_release(r), QW_OK);
    cr_assert_eq(qw_session_destroy(s2), QW_OK);
    qw_engine_destroy(e);
    free(dir);
}
