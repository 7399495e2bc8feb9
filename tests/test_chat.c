/*
 * test_chat.c - Qwen3 chat rendering against the strings the official
 * Jinja chat_template produces for the same conversations (multi-turn,
 * system, tools, thinking on/off, reasoning stripping).
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"

#define M(r, c) {(r), (c), NULL}

static void expect_render(const qwi_chat_message *m, size_t n, const char *const *tools,
                          size_t n_tools, int gen, int think, const char *want) {
    char *out = NULL;
    size_t len = 0;
    qw_status st = qwi_chat_render(m, n, tools, n_tools, gen, think, &out, &len);
    cr_assert_eq(st, QW_OK, "%s", qwi_last_error());
    cr_expect_eq(len, strlen(out));
    cr_expect_str_eq(out, want);
    free(out);
}

Test(chat, single_user_turn_with_generation_prompt) {
    qwi_chat_message m[] = {M("user", "Hi")};
    expect_render(m, 1, NULL, 0, 1, 1, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    expect_render(m, 1, NULL, 0, 0, 1, "<|im_start|>user\nHi<|im_end|>\n");
}

Test(chat, thinking_off_appends_empty_think_block) {
    qwi_chat_message m[] = {M("user", "Hi")};
    expect_render(m, 1, NULL, 0, 1, 0,
                  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

Test(chat, multi_turn_strips_old_reasoning) {
    qwi_chat_message m[] = {M("system", "You are helpful."), M("user", "Q1"),
                            M("assistant", "<think>\nr1\n</think>\n\nA1"), M("user", "Q2")};
    expect_render(m, 4, NULL, 0, 1, 1,
                  "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nQ1<|im_end|>\n"
                  "<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n"
                  "<|im_start|>assistant\n");
}

Test(chat, last_assistant_keeps_reasoning) {
    qwi_chat_message m[] = {M("user", "Q1"),
                            M("assistant", "<think>\nmy reasoning\n\n</think>\n\n\nA1")};
    expect_render(m, 2, NULL, 0, 0, 1,
                  "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\n<think>\nmy reasoning\n"
                  "</think>\n\nA1<|im_end|>\n");
    /* the final assistant turn gets an (empty) think block even without one */
    qwi_chat_message m2[] = {M("user", "Q1"), M("assistant", "A1")};
    expect_render(m2, 2, NULL, 0, 0, 1,
                  "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
                  "A1<|im_end|>\n");
}

Test(chat, reasoning_content_field) {
    qwi_chat_message m[] = {M("user", "Q1"), {"assistant", "A1", "\nR\n"}, M("user", "Q2"),
                            {"assistant", "A2", "R2"}};
    expect_render(m, 4, NULL, 0, 0, 1,
                  "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
                  "<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n<think>\nR2\n</think>\n\n"
                  "A2<|im_end|>\n");
}

Test(chat, tools_and_grouped_tool_responses) {
    qwi_chat_message m[] = {
        M("system", "Sys"),
        M("user", "Weather?"),
        M("assistant", "<think>\nneed tool\n</think>\n\n<tool_call>\n{\"name\": \"w\", "
                       "\"arguments\": {}}\n</tool_call>"),
        M("tool", "sunny"),
        M("tool", "22C"),
        M("assistant", "<think>\ngot it\n</think>\n\nIt is sunny."),
        /* a user turn that only wraps a tool result is not a new query */
        M("user", "<tool_response>\nx\n</tool_response>"),
    };
    const char *tools[] = {
        "{\"type\": \"function\", \"function\": {\"name\": \"w\", \"parameters\": {}}}"};
    expect_render(
        m, 7, tools, 1, 1, 0,
        "<|im_start|>system\nSys\n\n# Tools\n\nYou may call one or more functions to assist with "
        "the user query.\n\nYou are provided with function signatures within <tools></tools> XML "
        "tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"w\", \"parameters\": "
        "{}}}\n</tools>\n\nFor each function call, return a json object with function name and "
        "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
        "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n<think>\nneed tool\n"
        "</think>\n\n<tool_call>\n{\"name\": \"w\", \"arguments\": {}}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\n22C\n"
        "</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\ngot it\n</think>\n\n"
        "It is sunny.<|im_end|>\n<|im_start|>user\n<tool_response>\nx\n</tool_response>"
        "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

Test(chat, later_system_message_and_empty_conversation) {
    qwi_chat_message m[] = {M("user", "a"), M("system", "b")};
    expect_render(m, 2, NULL, 0, 0, 1,
                  "<|im_start|>user\na<|im_end|>\n<|im_start|>system\nb<|im_end|>\n");
    expect_render(NULL, 0, NULL, 0, 1, 1, "<|im_start|>assistant\n");
    expect_render(NULL, 0, NULL, 0, 0, 1, "");
    qwi_chat_message n[] = {M("user", NULL)};
    expect_render(n, 1, NULL, 0, 0, 1, "<|im_start|>user\n<|im_end|>\n");
}

Test(chat, bad_roles_are_refused) {
    char *out = (char *)1;
    qwi_chat_message m[] = {M("user", "a"), M("narrator", "b")};
    cr_expect_eq(qwi_chat_render(m, 2, NULL, 0, 1, 1, &out, NULL), QW_ERR_INVALID_ARGUMENT);
    cr_expect_null(out);
    cr_expect(strstr(qwi_last_error(), "message 1") && strstr(qwi_last_error(), "narrator"),
              "%s", qwi_last_error());
    qwi_chat_message n[] = {M(NULL, "a")};
    cr_expect_eq(qwi_chat_render(n, 1, NULL, 0, 1, 1, &out, NULL), QW_ERR_INVALID_ARGUMENT);
    cr_expect_eq(qwi_chat_render(m, 1, NULL, 0, 1, 1, NULL, NULL), QW_ERR_INVALID_ARGUMENT);
}
