/*
 * test_request_mutability.c - every qw_request setter is refused once the
 * request is submitted (QW_ERR_INVALID_STATE, a message naming the setter,
 * nothing changed), because the step thread reads those fields without
 * locks; a failed submit leaves the request settable again.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "qwinfer.h"
#include "util/engine_util.h"
#include "util/testutil.h"

static void assert_refused(qw_status got, const char *setter) {
    cr_assert_eq(got, QW_ERR_INVALID_STATE, "%s after submit: got %s (%s)", setter, qw_status_string(got),
                 qw_last_error());
    cr_assert(strstr(qw_last_error(), setter) != NULL, "message \"%s\" lacks \"%s\"", qw_last_error(), setter);
    cr_assert(strstr(qw_last_error(), "submitted") != NULL, "message \"%s\"", qw_last_error());
}

static void no_logits(void *u, qw_request *r, int32_t pos, const float *l, int32_t v) {
    (void)u, (void)r, (void)pos, (void)l, (void)v;
}

Test(request_mutability, every_setter_refused_after_submit) {
    char *dir = qwt_model("mut-tiny-f32", "--shape tiny --dtype f32 --seed 91");
    cr_assert_not_null(dir);
    qw_engine *e = qwt_engine_new(dir, &(qwt_engine_cfg){.threads = 1, .max_model_len = 64});
    qw_session *ses = NULL;
    cr_assert_eq(qw_session_create(e, &ses), QW_OK);
    qw_chat *chat = NULL;
    cr_assert_eq(qw_chat_create(&chat), QW_OK);
    cr_assert_eq(qw_chat_add_message(chat, QW_CHAT_USER, "hi", 2), QW_OK, "%s", qw_last_error());

    qw_request *r = NULL;
    cr_assert_eq(qw_request_create(&r), QW_OK);
    int before = 1, after = 2;
    cr_assert_eq(qw_request_set_user_data(r, &before), QW_OK);
    int32_t prompt[3] = {3, 4, 5};
    /* A failed submit gives the request back to the caller: settable. */
    cr_assert_eq(qw_engine_submit(e, r), QW_ERR_EMPTY_PROMPT);
    cr_assert_eq(qw_request_set_prompt(r, prompt, 3), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_MAX_TOKENS, 3), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_IGNORE_EOS, 1), QW_OK);
    cr_assert_eq(qw_request_set_user_data(r, &before), QW_OK);
    cr_assert_eq(qw_engine_submit(e, r), QW_OK, "%s", qw_last_error());

    assert_refused(qw_request_set_user_data(r, &after), "qw_request_set_user_data");
    cr_assert_eq(qw_request_get_user_data(r), &before, "user data changed after submit");
    assert_refused(qw_request_set_prompt(r, prompt, 2), "qw_request_set_prompt");
    assert_refused(qw_request_set_int(r, QW_REQ_MAX_TOKENS, 9), "qw_request_set_int");
    assert_refused(qw_request_set_double(r, QW_REQ_TEMPERATURE, 0.5), "qw_request_set_double");
    assert_refused(qw_request_set_stop_tokens(r, prompt, 1), "qw_request_set_stop_tokens");
    assert_refused(qw_request_set_logits_callback(r, no_logits, NULL), "qw_request_set_logits_callback");
    assert_refused(qw_request_set_session(r, ses), "qw_request_set_session");
    assert_refused(qw_request_set_prompt_text(r, "x", 1), "qw_request_set_prompt_text");
    assert_refused(qw_request_set_chat(r, chat, 0), "qw_request_set_chat");

    /* Nothing changed: the events carry the user data set before submit,
     * and the request ran as submitted. */
    qw_event ev[8];
    size_t n = 0, total = 0;
    while (qw_engine_has_work(e)) {
        cr_assert_eq(qw_engine_step(e, ev, 8, sizeof ev[0], &n), QW_OK, "%s", qw_last_error());
        for (size_t i = 0; i < n; i++) cr_assert_eq(ev[i].user_data, &before, "event %zu user data", total + i);
        total += n;
    }
    cr_assert_eq(total, 3);
    /* Still refused once finished: the engine may hold it until next step. */
    assert_refused(qw_request_set_user_data(r, &after), "qw_request_set_user_data");
    cr_assert_eq(qw_request_release(r), QW_OK);

    qw_chat_destroy(chat);
    cr_assert_eq(qw_session_destroy(ses), QW_OK);
    qw_engine_destroy(e);
    free(dir);
}

Test(request_mutability, null_request) {
    qw_status st = qw_request_set_user_data(NULL, NULL);
    cr_assert_eq(st, QW_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(qw_last_error(), "qw_request_set_user_data") != NULL, "%s", qw_last_error());
}
