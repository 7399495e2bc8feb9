/*
 * test_api.c - the public API's contracts: options, bad input and misuse
 * (each with its documented status and a message, leaving the engine
 * usable), stop conditions, event delivery when the caller's array is
 * small, and submit/cancel from other threads while the engine steps.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qwinfer.h"
#include "util/engine_util.h"
#include "util/testutil.h"

static char *tiny(void) {
    char *dir = qwt_model("api-tiny-f32", "--shape tiny --dtype f32 --seed 31");
    cr_assert_not_null(dir);
    return dir;
}

/* The engine still serves a normal request. */
static void assert_usable(qw_engine *e) {
    int32_t prompt[5] = {1, 2, 3, 4, 5};
    qwt_job job = {.prompt = prompt, .num_prompt = 5, .max_tokens = 3, .temperature = 0, .seed = -1, .ignore_eos = 1};
    qwt_result res;
    qwt_run_jobs(e, &job, 1, &res);
    cr_assert_eq(res.num_tokens, 3);
    cr_assert_eq(qw_engine_num_free_kv_blocks(e), qw_engine_num_kv_blocks(e));
}

static void assert_error(qw_status got, qw_status want, const char *needle) {
    cr_assert_eq(got, want, "got %s, want %s (%s)", qw_status_string(got), qw_status_string(want), qw_last_error());
    cr_assert(strstr(qw_last_error(), needle) != NULL, "message \"%s\" lacks \"%s\"", qw_last_error(), needle);
}

Test(api, version_and_status_strings) {
    cr_assert_eq(qw_version_number(), QW_VERSION_NUMBER);
    cr_assert_str_eq(qw_version_string(), "0.1.0");
    for (int s = 0; s <= 14; s++) cr_assert(strncmp(qw_status_string((qw_status)s), "QW_", 3) == 0);
    cr_assert_str_eq(qw_status_string((qw_status)999), "unknown status");
}

Test(api, options_typed_setters) {
    qw_engine_options *o;
    cr_assert_eq(qw_engine_options_create(&o), QW_OK);
    assert_error(qw_engine_options_set_int(o, QW_OPT_BLOCK_SIZE, 0), QW_ERR_INVALID_ARGUMENT, "QW_OPT_BLOCK_SIZE");
    assert_error(qw_engine_options_set_int(o, QW_OPT_MODEL_PATH, 3), QW_ERR_INVALID_ARGUMENT, "string");
    assert_error(qw_engine_options_set_string(o, QW_OPT_SEED, "x"), QW_ERR_INVALID_ARGUMENT, "not a string");
    assert_error(qw_engine_options_set_int(o, (qw_engine_option)77, 1), QW_ERR_INVALID_ARGUMENT, "unknown option");
    assert_error(qw_engine_options_set_int(NULL, QW_OPT_SEED, 1), QW_ERR_INVALID_ARGUMENT, "NULL");
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_MAX_NUM_SEQS, 8), QW_OK);
    qw_engine *e = (qw_engine *)0x1;
    assert_error(qw_engine_create(o, &e), QW_ERR_INVALID_ARGUMENT, "QW_OPT_MODEL_PATH");
    cr_assert_null(e);
    assert_error(qw_engine_create(NULL, &e), QW_ERR_INVALID_ARGUMENT, "NULL");
    qw_engine_options_destroy(o);
    qw_engine_options_destroy(NULL);
}

Test(api, bad_model_paths) {
    qw_engine_options *o;
    qw_engine *e;
    cr_assert_eq(qw_engine_options_create(&o), QW_OK);
    qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, "/nonexistent/model");
    qw_status st = qw_engine_create(o, &e);
    cr_assert(st == QW_ERR_IO || st == QW_ERR_FORMAT, "missing dir: %s", qw_status_string(st));
    cr_assert(strstr(qw_last_error(), "/nonexistent/model") != NULL, "%s", qw_last_error());
    cr_assert_null(e);

    /* config.json without required keys */
    char *dir = qwt_tmpdir("badcfg");
    char path[8300];
    snprintf(path, sizeof path, "%s/config.json", dir);
    const char *cfg = "{\"architectures\": [\"Qwen3ForCausalLM\"], \"hidden_size\": 64}";
    qwt_write_file(path, cfg, strlen(cfg));
    qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, dir);
    st = qw_engine_create(o, &e);
    assert_error(st, QW_ERR_FORMAT, "config.json");
    cr_assert_null(e);
    free(dir);

    /* a device that is not there */
    char *model = tiny();
    qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, model);
    qw_engine_options_set_string(o, QW_OPT_DEVICE, "cuda:0");
    assert_error(qw_engine_create(o, &e), QW_ERR_NO_DEVICE, "cuda:0");
    cr_assert_null(e);
    qw_engine_options_set_string(o, QW_OPT_DEVICE, "tpu");
    assert_error(qw_engine_create(o, &e), QW_ERR_INVALID_ARGUMENT, "tpu");
    /* a max model length beyond the model's */
    qw_engine_options_set_string(o, QW_OPT_DEVICE, "cpu");
    qw_engine_options_set_int(o, QW_OPT_MAX_MODEL_LEN, 1 << 20);
    assert_error(qw_engine_create(o, &e), QW_ERR_INVALID_ARGUMENT, "max_position_embeddings");
    qw_engine_options_destroy(o);
    free(model);
}

Test(api, bad_requests_leave_engine_usable) {
    char *model = tiny();
    qw_engine *e = qwt_engine_new(model, &(qwt_engine_cfg){.max_model_len = 256, .num_kv_blocks = 16});
    qw_request *r;
    cr_assert_eq(qw_request_create(&r), QW_OK);

    assert_error(qw_engine_submit(e, r), QW_ERR_EMPTY_PROMPT, "no prompt");
    int32_t bad[3] = {1, 512, 2};
    cr_assert_eq(qw_request_set_prompt(r, bad, 3), QW_OK);
    assert_error(qw_engine_submit(e, r), QW_ERR_TOKEN_OUT_OF_RANGE, "512");
    bad[1] = -4;
    cr_assert_eq(qw_request_set_prompt(r, bad, 3), QW_OK);
    assert_error(qw_engine_submit(e, r), QW_ERR_TOKEN_OUT_OF_RANGE, "-4");

    static int32_t longp[300];
    for (int i = 0; i < 300; i++) longp[i] = i % 500;
    cr_assert_eq(qw_request_set_prompt(r, longp, 300), QW_OK);
    assert_error(qw_engine_submit(e, r), QW_ERR_TOO_LONG, "max model length");
    cr_assert_eq(qw_request_set_prompt(r, longp, 200), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_MAX_TOKENS, 100), QW_OK);
    assert_error(qw_engine_submit(e, r), QW_ERR_TOO_LONG, "max tokens");
    /* A pool smaller than one max-length sequence now fails the create
     * (tests/test_defaults.c), so no submit can outgrow the pool. */
    int32_t stop_bad = 9999;
    cr_assert_eq(qw_request_set_prompt(r, longp, 10), QW_OK);
    cr_assert_eq(qw_request_set_stop_tokens(r, &stop_bad, 1), QW_OK);
    assert_error(qw_engine_submit(e, r), QW_ERR_TOKEN_OUT_OF_RANGE, "stop token");

    /* option errors */
    assert_error(qw_request_set_double(r, QW_REQ_TEMPERATURE, -1), QW_ERR_INVALID_ARGUMENT, "TEMPERATURE");
    assert_error(qw_request_set_double(r, QW_REQ_TOP_P, 0), QW_ERR_INVALID_ARGUMENT, "TOP_P");
    assert_error(qw_request_set_double(r, QW_REQ_MIN_P, 1.5), QW_ERR_INVALID_ARGUMENT, "MIN_P");
    assert_error(qw_request_set_int(r, QW_REQ_TEMPERATURE, 1), QW_ERR_INVALID_ARGUMENT, "double");
    assert_error(qw_request_set_double(r, QW_REQ_MAX_TOKENS, 1), QW_ERR_INVALID_ARGUMENT, "not a double");
    assert_error(qw_request_set_int(r, QW_REQ_MAX_TOKENS, 0), QW_ERR_INVALID_ARGUMENT, "MAX_TOKENS");

    /* NULL handles */
    assert_error(qw_engine_submit(NULL, r), QW_ERR_INVALID_ARGUMENT, "NULL");
    assert_error(qw_engine_submit(e, NULL), QW_ERR_INVALID_ARGUMENT, "NULL");
    assert_error(qw_engine_cancel(e, NULL), QW_ERR_INVALID_ARGUMENT, "NULL");
    assert_error(qw_request_set_prompt(NULL, bad, 1), QW_ERR_INVALID_ARGUMENT, "NULL");
    size_t n;
    assert_error(qw_engine_step(NULL, NULL, 0, sizeof(qw_event), &n), QW_ERR_INVALID_ARGUMENT, "NULL");
    assert_error(qw_engine_step(e, NULL, 4, sizeof(qw_event), &n), QW_ERR_INVALID_ARGUMENT, "events is NULL");
    qw_event ev[4];
    assert_error(qw_engine_step(e, ev, 4, 8, &n), QW_ERR_BUFFER_TOO_SMALL, "event_size");
    cr_assert_eq(qw_engine_has_work(NULL), 0);
    cr_assert_eq(qw_engine_vocab_size(NULL), 0);

    /* cancel of a request never submitted */
    assert_error(qw_engine_cancel(e, r), QW_ERR_INVALID_STATE, "not submitted");
    /* the failed submissions left the request reusable */
    cr_assert_eq(qw_request_set_stop_tokens(r, NULL, 0), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_MAX_TOKENS, 2), QW_OK);
    cr_assert_eq(qw_engine_submit(e, r), QW_OK, "%s", qw_last_error());
    assert_error(qw_engine_submit(e, r), QW_ERR_INVALID_STATE, "already submitted");
    assert_error(qw_request_set_int(r, QW_REQ_MAX_TOKENS, 5), QW_ERR_INVALID_STATE, "already submitted");
    while (qw_engine_has_work(e)) cr_assert_eq(qw_engine_step(e, ev, 4, sizeof ev[0], &n), QW_OK);
    cr_assert_eq(qw_request_get_state(r), QW_STATE_FINISHED);
    /* cancel of a finished request; release twice while the engine holds it */
    assert_error(qw_engine_cancel(e, r), QW_ERR_INVALID_STATE, "already finished");
    cr_assert_eq(qw_request_release(r), QW_OK);
    assert_error(qw_request_release(r), QW_ERR_INVALID_STATE, "released twice");
    cr_assert_eq(qw_request_release(NULL), QW_OK);

    assert_usable(e);
    qw_engine_destroy(e);
    free(model);
}

Test(api, stop_conditions) {
    char *model = tiny();
    qw_engine *e = qwt_engine_new(model, NULL);
    int32_t prompt[6] = {3, 1, 4, 1, 5, 9};
    qwt_job job = {.prompt = prompt, .num_prompt = 6, .max_tokens = 12, .temperature = 0, .seed = -1, .ignore_eos = 1};
    qwt_result ref;
    qwt_run_jobs(e, &job, 1, &ref);
    cr_assert_eq(ref.num_tokens, 12);
    cr_assert_eq(ref.finish_reason, QW_FINISH_LENGTH);

    /* stop at the 5th generated token's id: output ends there, inclusive */
    int32_t stop = ref.tokens[4];
    int first = 0;
    while (ref.tokens[first] != stop) first++;
    qw_request *r;
    qw_request_create(&r);
    qw_request_set_prompt(r, prompt, 6);
    qw_request_set_double(r, QW_REQ_TEMPERATURE, 0);
    qw_request_set_int(r, QW_REQ_MAX_TOKENS, 12);
    qw_request_set_int(r, QW_REQ_IGNORE_EOS, 1);
    qw_request_set_stop_tokens(r, &stop, 1);
    cr_assert_eq(qw_engine_submit(e, r), QW_OK);
    qw_event ev[8];
    size_t n;
    while (qw_engine_has_work(e)) qw_engine_step(e, ev, 8, sizeof ev[0], &n);
    int32_t out[16];
    size_t nt;
    qw_request_get_tokens(r, out, 16, &nt);
    cr_assert_eq(nt, (size_t)first + 1);
    cr_assert_eq(out[first], stop);
    cr_assert_eq(qw_request_get_finish_reason(r), QW_FINISH_STOP);
    qw_request_release(r);

    /* min_tokens suppresses the stop token until then */
    qw_request_create(&r);
    qw_request_set_prompt(r, prompt, 6);
    qw_request_set_double(r, QW_REQ_TEMPERATURE, 0);
    qw_request_set_int(r, QW_REQ_MAX_TOKENS, 12);
    qw_request_set_int(r, QW_REQ_IGNORE_EOS, 1);
    qw_request_set_int(r, QW_REQ_MIN_TOKENS, 12);
    qw_request_set_stop_tokens(r, &stop, 1);
    cr_assert_eq(qw_engine_submit(e, r), QW_OK);
    while (qw_engine_has_work(e)) qw_engine_step(e, ev, 8, sizeof ev[0], &n);
    qw_request_get_tokens(r, out, 16, &nt);
    cr_assert_eq(nt, 12);
    for (size_t i = 0; i + 1 < nt; i++) cr_assert_neq(out[i], stop);
    qw_request_release(r);
    qw_engine_destroy(e);
    free(model);
}

Test(api, events_survive_a_small_array) {
    char *model = tiny();
    qw_engine *e = qwt_engine_new(model, NULL);
    qw_request *r[5];
    int32_t prompt[4] = {7, 8, 9, 10};
    for (int i = 0; i < 5; i++) {
        qw_request_create(&r[i]);
        prompt[0] = 7 + i;
        qw_request_set_prompt(r[i], prompt, 4);
        qw_request_set_int(r[i], QW_REQ_MAX_TOKENS, 3);
        qw_request_set_int(r[i], QW_REQ_IGNORE_EOS, 1);
        cr_assert_eq(qw_engine_submit(e, r[i]), QW_OK);
        qw_request_release(r[i]);  /* events must still carry valid handles */
    }
    /* A bigger caller struct (a newer header) also works. */
    struct { qw_event ev; char future[24]; } big[1];
    int tokens = 0, finished = 0, calls = 0;
    while (qw_engine_has_work(e)) {
        size_t n = 0;
        memset(big, 0x5a, sizeof big);
        cr_assert_eq(qw_engine_step(e, big, 1, sizeof big[0], &n), QW_OK);
        cr_assert_leq(n, 1);
        if (n) {
            for (size_t k = 0; k < sizeof big[0].future; k++) cr_assert_eq(big[0].future[k], 0);
            cr_assert_eq(qw_request_get_id(big[0].ev.request), big[0].ev.request_id);
            tokens += big[0].ev.kind == QW_EVENT_TOKEN;
            finished += big[0].ev.finish_reason != QW_FINISH_NONE;
        }
        cr_assert_lt(++calls, 1000);
    }
    cr_assert_eq(tokens, 15);
    cr_assert_eq(finished, 5);
    qw_engine_destroy(e);
    free(model);
}

Test(api, destroy_with_requests_in_flight) {
    char *model = tiny();
    qw_engine *e = qwt_engine_new(model, NULL);
    qw_request *a, *b;
    int32_t prompt[3] = {1, 2, 3};
    qw_request_create(&a);
    qw_request_create(&b);
    qw_request_set_prompt(a, prompt, 3);
    qw_request_set_prompt(b, prompt, 3);
    qw_engine_submit(e, a);
    qw_event ev[4];
    size_t n;
    qw_engine_step(e, ev, 4, sizeof ev[0], &n);
    qw_engine_submit(e, b);
    qw_engine_destroy(e);
    cr_assert_eq(qw_request_get_state(a), QW_STATE_FINISHED);
    cr_assert_eq(qw_request_get_finish_reason(a), QW_FINISH_CANCELLED);
    cr_assert_eq(qw_request_get_finish_reason(b), QW_FINISH_CANCELLED);
    qw_request_release(a);
    qw_request_release(b);
    free(model);
}

/* ---- threads: submit and cancel from other threads while stepping ---- */

#define THREADS 4
#define PER_THREAD 12

typedef struct submitter {
    qw_engine *engine;
    int index;
    qw_request *reqs[PER_THREAD];
    atomic_int *done;
    int errors;               /* Criterion asserts only on the main thread */
} submitter;

static void *submit_thread(void *arg) {
    submitter *s = arg;
    for (int i = 0; i < PER_THREAD; i++) {
        qw_request *r;
        qw_request_create(&r);
        int32_t prompt[8];
        qwt_make_prompt(prompt, 8, 512, (uint64_t)(s->index * 100 + i));
        qw_request_set_prompt(r, prompt, 8);
        qw_request_set_int(r, QW_REQ_MAX_TOKENS, 4 + i % 4);
        qw_request_set_int(r, QW_REQ_IGNORE_EOS, 1);
        qw_request_set_user_data(r, s);
        if (qw_engine_submit(s->engine, r) != QW_OK) s->errors++;
        s->reqs[i] = r;
        if (i % 3 == 1) {
            qw_status st = qw_engine_cancel(s->engine, r);
            if (st != QW_OK && st != QW_ERR_INVALID_STATE) s->errors++;
        }
        if (i % 4 == 0) usleep(200);
    }
    atomic_fetch_add(s->done, 1);
    return NULL;
}

Test(api, submit_and_cancel_from_threads) {
    char *model = tiny();
    qw_engine *e = qwt_engine_new(model, &(qwt_engine_cfg){.max_num_seqs = 8});
    atomic_int done = 0;
    submitter subs[THREADS];
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) {
        subs[t] = (submitter){.engine = e, .index = t, .done = &done};
        pthread_create(&th[t], NULL, submit_thread, &subs[t]);
    }
    int finishes = 0;
    qw_event ev[16];
    while (atomic_load(&done) < THREADS || qw_engine_has_work(e)) {
        size_t n = 0;
        cr_assert_eq(qw_engine_step(e, ev, 16, sizeof ev[0], &n), QW_OK);
        for (size_t k = 0; k < n; k++) finishes += ev[k].finish_reason != QW_FINISH_NONE;
    }
    for (int t = 0; t < THREADS; t++) {
        pthread_join(th[t], NULL);
        cr_assert_eq(subs[t].errors, 0, "thread %d saw a failing submit/cancel", t);
    }
    cr_assert_eq(finishes, THREADS * PER_THREAD, "every request ends exactly once");
    int cancelled = 0;
    for (int t = 0; t < THREADS; t++)
        for (int i = 0; i < PER_THREAD; i++) {
            qw_request *r = subs[t].reqs[i];
            cr_assert_eq(qw_request_get_state(r), QW_STATE_FINISHED);
            cancelled += qw_request_get_finish_reason(r) == QW_FINISH_CANCELLED;
            if (i % 3 != 1) cr_assert_eq(qw_request_get_finish_reason(r), QW_FINISH_LENGTH);
            qw_request_release(r);
        }
    cr_assert_gt(cancelled, 0);
    cr_assert_eq(qw_engine_num_free_kv_blocks(e), qw_engine_num_kv_blocks(e));
    qw_engine_destroy(e);
    free(model);
}
