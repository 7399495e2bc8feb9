/*
 * test_chat_thinking.c - the thinking-mode default (issue #10, item 8):
 * Qwen3's official chat template thinks unless enable_thinking=false, so
 * with neither thinking flag the rendered prompt ends at the assistant
 * header (no empty think block); QW_CHAT_DISABLE_THINKING appends the empty
 * block; QW_CHAT_ENABLE_THINKING says the default explicitly; both at once
 * is refused.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "qwinfer.h"

#define USER_HI "<|im_start|>user\nHi<|im_end|>\n"
#define ASSISTANT "<|im_start|>assistant\n"
#define EMPTY_THINK "<think>\n\n</think>\n\n"

static qw_chat *hi_chat(void) {
    qw_chat *c = NULL;
    cr_assert_eq(qw_chat_create(&c), QW_OK);
    cr_assert_eq(qw_chat_add_message(c, QW_CHAT_USER, "Hi", 2), QW_OK);
    return c;
}

static char *render(const qw_chat *c, uint32_t flags) {
    size_t len = 0;
    cr_assert_eq(qw_chat_render(c, flags, NULL, 0, &len), QW_OK, "flags %u: %s", flags, qw_last_error());
    char *s = malloc(len + 1);
    cr_assert_not_null(s);
    cr_assert_eq(qw_chat_render(c, flags, s, len + 1, &len), QW_OK);
    cr_assert_eq(strlen(s), len);
    return s;
}

Test(chat_thinking, default_thinks_like_the_official_template) {
    qw_chat *c = hi_chat();
    char *s = render(c, QW_CHAT_ADD_GENERATION_PROMPT);
    cr_expect_str_eq(s, USER_HI ASSISTANT, "no empty think block by default");
    free(s);
    s = render(c, QW_CHAT_ADD_GENERATION_PROMPT | QW_CHAT_ENABLE_THINKING);
    cr_expect_str_eq(s, USER_HI ASSISTANT, "ENABLE_THINKING is the default said explicitly");
    free(s);
    qw_chat_destroy(c);
}

Test(chat_thinking, disable_thinking_appends_the_empty_block) {
    qw_chat *c = hi_chat();
    char *s = render(c, QW_CHAT_ADD_GENERATION_PROMPT | QW_CHAT_DISABLE_THINKING);
    cr_expect_str_eq(s, USER_HI ASSISTANT EMPTY_THINK);
    free(s);
    /* without a generation prompt there is nothing to switch */
    s = render(c, QW_CHAT_DISABLE_THINKING);
    cr_expect_str_eq(s, USER_HI);
    free(s);
    cr_expect_eq((int)QW_CHAT_DISABLE_THINKING, 4);
    qw_chat_destroy(c);
}

Test(chat_thinking, both_flags_are_refused) {
    qw_chat *c = hi_chat();
    char buf[16];
    size_t len = 7;
    uint32_t both = QW_CHAT_ADD_GENERATION_PROMPT | QW_CHAT_ENABLE_THINKING | QW_CHAT_DISABLE_THINKING;
    cr_assert_eq(qw_chat_render(c, both, buf, sizeof buf, &len), QW_ERR_INVALID_ARGUMENT);
    cr_expect_eq(len, 0);
    cr_expect(strstr(qw_last_error(), "QW_CHAT_ENABLE_THINKING") && strstr(qw_last_error(), "QW_CHAT_DISABLE_THINKING"),
              "%s", qw_last_error());
    qw_request *r = NULL;
    cr_assert_eq(qw_request_create(&r), QW_OK);
    cr_assert_eq(qw_request_set_chat(r, c, both), QW_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(qw_last_error(), "qw_request_set_chat"), "%s", qw_last_error());
    /* bits past the known flags are still unknown */
    cr_assert_eq(qw_chat_render(c, 8, buf, sizeof buf, &len), QW_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(qw_last_error(), "unknown"), "%s", qw_last_error());
    qw_request_release(r);
    qw_chat_destroy(c);
}
