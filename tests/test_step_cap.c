/*
 * test_step_cap.c - a loop written from the docs cannot spin:
 * qw_engine_step with cap 0 is refused (QW_ERR_BUFFER_TOO_SMALL, a message
 * naming cap) and does nothing, and with cap 1 every call delivers an event
 * or advances the work, so `while (qw_engine_has_work(e)) step` ends.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "qwinfer.h"
#include "util/engine_util.h"
#include "util/testutil.h"

static qw_request *submit(qw_engine *e, int32_t first, int max_tokens) {
    qw_request *r = NULL;
    cr_assert_eq(qw_request_create(&r), QW_OK);
    int32_t prompt[4] = {first, first + 1, first + 2, first + 3};
    cr_assert_eq(qw_request_set_prompt(r, prompt, 4), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_MAX_TOKENS, max_tokens), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_IGNORE_EOS, 1), QW_OK);
    cr_assert_eq(qw_engine_submit(e, r), QW_OK, "%s", qw_last_error());
    return r;
}

static uint64_t steps_run(qw_engine *e) {
    qw_engine_stats st;
    cr_assert_eq(qw_engine_get_stats(e, &st, sizeof st), QW_OK);
    return st.num_steps;
}

Test(step_cap, cap_zero_is_refused_and_cap_one_loop_ends) {
    char *dir = qwt_model("stepcap-tiny-f32", "--shape tiny --dtype f32 --seed 93");
    cr_assert_not_null(dir);
    qw_engine *e = qwt_engine_new(dir, &(qwt_engine_cfg){.threads = 1, .max_model_len = 64});
    qw_event ev[4];
    size_t n = 99;

    /* With nothing to do, and with work queued: refused, nothing done. */
    cr_assert_eq(qw_engine_step(e, NULL, 0, sizeof ev[0], &n), QW_ERR_BUFFER_TOO_SMALL);
    cr_assert(strstr(qw_last_error(), "cap") != NULL, "%s", qw_last_error());
    cr_assert_eq(n, 0);
    enum { N = 3, GEN = 4 };
    qw_request *r[N];
    for (int i = 0; i < N; i++) r[i] = submit(e, 10 * (i + 1), GEN);
    n = 99;
    cr_assert_eq(qw_engine_step(e, ev, 0, sizeof ev[0], &n), QW_ERR_BUFFER_TOO_SMALL, "%s", qw_last_error());
    cr_assert_eq(n, 0);
    cr_assert_eq(steps_run(e), 0, "a refused step ran the model");
    for (int i = 0; i < N; i++) cr_assert_eq(qw_request_get_state(r[i]), QW_STATE_QUEUED);

    /* A step makes N events; with pending events cap 0 is still refused
     * (before, it returned QW_OK delivering nothing, forever). */
    cr_assert_eq(qw_engine_step(e, ev, 1, sizeof ev[0], &n), QW_OK, "%s", qw_last_error());
    cr_assert_eq(n, 1);
    cr_assert_eq(qw_engine_step(e, ev, 0, sizeof ev[0], &n), QW_ERR_BUFFER_TOO_SMALL);
    cr_assert_eq(n, 0);
    cr_assert(qw_engine_has_work(e));

    /* The documented loop with cap 1 ends, and loses no event. */
    int events = 1, calls = 0;
    while (qw_engine_has_work(e)) {
        cr_assert_eq(qw_engine_step(e, ev, 1, sizeof ev[0], &n), QW_OK, "%s", qw_last_error());
        cr_assert_leq(n, 1);
        events += (int)n;
        cr_assert_lt(++calls, 1000, "the loop spins");
    }
    cr_assert_eq(events, N * GEN, "every token delivered once");
    for (int i = 0; i < N; i++) {
        cr_assert_eq(qw_request_get_state(r[i]), QW_STATE_FINISHED);
        cr_assert_eq(qw_request_release(r[i]), QW_OK);
    }
    qw_engine_destroy(e);
    free(dir);
}
