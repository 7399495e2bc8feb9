/*
 * test_serve_reply_parser.c - qw-serve's reply splitter (tools/qw-serve/
 * reply_parser.c): reasoning / content / Hermes tool calls as vLLM's qwen3
 * and hermes parsers read them, and the streaming property: every way of
 * cutting a reply into feeds (at every byte offset, and byte by byte) gives
 * the same joined output as one feed, while only possible tag prefixes are
 * held back.
 */
#include <criterion/criterion.h>
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reply_parser.h"

#define MAX_CALLS 8

typedef struct joined {
    char reasoning[4096];
    char content[4096];
    size_t n_calls;
    char names[MAX_CALLS][64];
    char args[MAX_CALLS][512];
    char ids[MAX_CALLS][40];
} joined;

static void append(char *dst, size_t cap, const char *s, size_t n) {
    size_t have = strlen(dst);
    cr_assert_lt(have + n, cap, "test buffer too small");
    memcpy(dst + have, s, n);
    dst[have + n] = '\0';
}

static void take(joined *j, const qws_reply_delta *d) {
    cr_assert_not_null(d->reasoning);
    cr_assert_not_null(d->content);
    append(j->reasoning, sizeof j->reasoning, d->reasoning, d->reasoning_len);
    append(j->content, sizeof j->content, d->content, d->content_len);
    if (d->num_tool_calls == 0) cr_assert_null(d->tool_calls);
    for (size_t i = 0; i < d->num_tool_calls; i++) {
        cr_assert_lt(j->n_calls, MAX_CALLS);
        snprintf(j->names[j->n_calls], sizeof j->names[0], "%s", d->tool_calls[i].name);
        snprintf(j->args[j->n_calls], sizeof j->args[0], "%s", d->tool_calls[i].arguments);
        snprintf(j->ids[j->n_calls], sizeof j->ids[0], "%s", d->tool_calls[i].id);
        j->n_calls++;
    }
}

/* Feed text cut at the given offsets (ascending, within [0, len]). */
static void run_cuts(int split, int tools, const char *text, const size_t *cuts, size_t n_cuts, joined *j) {
    memset(j, 0, sizeof *j);
    qws_reply_parser *p = qws_reply_parser_create(split, tools);
    cr_assert_not_null(p);
    size_t len = strlen(text), at = 0;
    qws_reply_delta d;
    for (size_t c = 0; c <= n_cuts; c++) {
        size_t end = c < n_cuts ? cuts[c] : len;
        cr_assert_eq(qws_reply_parser_feed(p, text + at, end - at, &d), 0);
        take(j, &d);
        at = end;
    }
    cr_assert_eq(qws_reply_parser_finish(p, &d), 0);
    take(j, &d);
    cr_assert_eq(qws_reply_parser_finish(p, &d), -1, "finish twice");
    cr_assert_eq(qws_reply_parser_feed(p, "x", 1, &d), -1, "feed after finish");
    qws_reply_parser_destroy(p);
}

static void run_one(int split, int tools, const char *text, joined *j) { run_cuts(split, tools, text, NULL, 0, j); }

static void same(const joined *a, const joined *b, const char *what, const char *text) {
    cr_assert_str_eq(a->reasoning, b->reasoning, "%s: reasoning differs for %s", what, text);
    cr_assert_str_eq(a->content, b->content, "%s: content differs for %s", what, text);
    cr_assert_eq(a->n_calls, b->n_calls, "%s: tool calls differ for %s", what, text);
    for (size_t i = 0; i < a->n_calls; i++) {
        cr_assert_str_eq(a->names[i], b->names[i]);
        cr_assert_str_eq(a->args[i], b->args[i]);
    }
}

/* One feed vs a cut at every byte offset vs byte by byte vs 3-byte feeds. */
static void check_splits(int split, int tools, const char *text, const joined *want) {
    joined one, got;
    run_one(split, tools, text, &one);
    same(&one, want, "one feed", text);
    size_t len = strlen(text);
    for (size_t k = 0; k <= len; k++) {
        run_cuts(split, tools, text, &k, 1, &got);
        same(&got, &one, "two feeds", text);
    }
    size_t *cuts = calloc(len + 1, sizeof *cuts);
    cr_assert_not_null(cuts);
    for (size_t k = 0; k < len; k++) cuts[k] = k;
    run_cuts(split, tools, text, cuts, len, &got);
    same(&got, &one, "byte by byte", text);
    size_t n3 = 0;
    for (size_t k = 3; k < len; k += 3) cuts[n3++] = k;
    run_cuts(split, tools, text, cuts, n3, &got);
    same(&got, &one, "3-byte feeds", text);
    free(cuts);
}

static joined want(const char *reasoning, const char *content) {
    joined j;
    memset(&j, 0, sizeof j);
    snprintf(j.reasoning, sizeof j.reasoning, "%s", reasoning);
    snprintf(j.content, sizeof j.content, "%s", content);
    return j;
}

static void add_call(joined *j, const char *name, const char *args) {
    snprintf(j->names[j->n_calls], sizeof j->names[0], "%s", name);
    snprintf(j->args[j->n_calls], sizeof j->args[0], "%s", args);
    j->n_calls++;
}

Test(serve_reply_parser, reasoning_split) {
    joined w = want("Let me think.\nStill thinking.", "The answer is 42.");
    check_splits(1, 0, "<think>\nLet me think.\nStill thinking.\n</think>\n\nThe answer is 42.", &w);
    /* <think> in the prompt (Qwen3-2507 templates): only </think> comes. */
    w = want("reasoning here", "answer");
    check_splits(1, 0, "reasoning here\n</think>\n\nanswer", &w);
    /* An empty think block (what the model writes when told not to think). */
    w = want("", "Hi there.\n");
    check_splits(1, 0, "<think>\n\n</think>\n\nHi there.\n", &w);
    /* Only the newlines right at the tags go; inner ones and spaces stay. */
    w = want("a\n\nb ", " c\n\nd");
    check_splits(1, 0, "<think>a\n\nb \n</think> c\n\nd", &w);
    /* A second </think> or <think> later is ordinary content. */
    w = want("r", "x</think>y<think>z");
    check_splits(1, 0, "<think>r</think>x</think>y<think>z", &w);
    /* Tag lookalikes stay text. */
    w = want("<thin <think </thinking>", "ok");
    check_splits(1, 0, "<thin <think </thinking></think>ok", &w);
}

Test(serve_reply_parser, no_end_tag_is_reasoning) {
    /* Thinking on and no </think>: the reply was cut while thinking. */
    joined w = want("half a thought\n", "");
    check_splits(1, 0, "<think>\nhalf a thought\n", &w);
    w = want("no tags at all", "");
    check_splits(1, 0, "no tags at all", &w);
    w = want("<thi", "");
    check_splits(1, 0, "<thi", &w);
    w = want("", "");
    check_splits(1, 0, "", &w);
    check_splits(1, 1, "", &w);
}

Test(serve_reply_parser, passthrough) {
    const char *t = "<think>\nx\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
    joined w = want("", t);
    check_splits(0, 0, t, &w);
}

Test(serve_reply_parser, tool_calls) {
    joined w = want("I should call.", "");
    add_call(&w, "get_weather", "{\"city\": \"Paris\", \"unit\": \"celsius\"}");
    add_call(&w, "noop", "{}");
    check_splits(1, 1,
                 "<think>\nI should call.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\":"
                 " {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"noop\","
                 " \"arguments\": {}}\n</tool_call>\n",
                 &w);

    /* Content before a call stays; after a call, whitespace goes and text stays. */
    w = want("", "Let me check.\n\n\n\nDone: \xc3\xa9t\xc3\xa9.");
    add_call(&w, "f", "{\"a\": [1, 2.5, \"\xe2\x82\xac\"], \"b\": {\"c\": null}, \"d\": 0.1}");
    check_splits(0, 1,
                 "Let me check.\n\n<tool_call>\n{\"name\":\"f\",\"arguments\":{\"a\":[1,2.5,\"\xe2\x82\xac\"],"
                 "\"b\":{\"c\":null},\"d\":0.1}}\n</tool_call>\n\nDone: \xc3\xa9t\xc3\xa9.",
                 &w);

    /* arguments given as a JSON string of an object. */
    w = want("", "");
    add_call(&w, "g", "{\"x\": 1}");
    check_splits(0, 1, "<tool_call>{\"name\": \"g\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>", &w);

    /* An unclosed last block that parses is a call (vLLM's hermes regex). */
    w = want("", "");
    add_call(&w, "h", "{\"k\": true}");
    check_splits(0, 1, "<tool_call>\n{\"name\": \"h\", \"arguments\": {\"k\": true}}\n", &w);
}

Test(serve_reply_parser, malformed_blocks_stay_content) {
    const char *cases[] = {
        "Sure.<tool_call>\n{bad json}\n</tool_call> done",
        "<tool_call>{\"name\": 5, \"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"\", \"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"f\"}</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": \"not json\"}</tool_call>",
        "<tool_call>[\"f\"]</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": {}} trailing</tool_call>",
        "<tool_call>\n{\"name\": \"f\", \"argu",
        "a < b and <tool_callx> c <tool_cal",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        joined w = want("", cases[i]);
        check_splits(0, 1, cases[i], &w);
    }
    /* A malformed block after a good one keeps the whitespace before it. */
    joined w = want("", "\n<tool_call>oops</tool_call>");
    add_call(&w, "f", "{}");
    check_splits(0, 1, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n<tool_call>oops</tool_call>", &w);
}

Test(serve_reply_parser, tools_only_in_content) {
    /* A tool call written while thinking is reasoning text, not a call. */
    const char *t = "<think>maybe <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call></think>answer";
    joined w = want("maybe <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", "answer");
    check_splits(1, 1, t, &w);
}

static int feed_str(qws_reply_parser *p, const char *s, qws_reply_delta *d) {
    return qws_reply_parser_feed(p, s, strlen(s), d);
}

Test(serve_reply_parser, holds_back_only_possible_tags) {
    qws_reply_parser *p = qws_reply_parser_create(1, 1);
    cr_assert_not_null(p);
    qws_reply_delta d;
    cr_assert_eq(feed_str(p, "<thi", &d), 0);
    cr_assert_eq(d.reasoning_len + d.content_len, 0, "a possible <think> is held");
    cr_assert_eq(feed_str(p, "nk>\nabc", &d), 0);
    cr_assert_eq(d.reasoning_len, 3);
    cr_assert_eq(memcmp(d.reasoning, "abc", 3), 0);
    cr_assert_eq(feed_str(p, " def\n</th", &d), 0);
    cr_assert_eq(d.reasoning_len, 4, "' def' released, the newline and '</th' held");
    cr_assert_eq(feed_str(p, "ink>\n\nHello <", &d), 0);
    cr_assert_eq(d.reasoning_len, 0);
    cr_assert_eq(d.content_len, 6);
    cr_assert_eq(memcmp(d.content, "Hello ", 6), 0);
    cr_assert_eq(feed_str(p, "b>", &d), 0);
    cr_assert_eq(d.content_len, 3, "'<b>' is no tool call: released");
    cr_assert_eq(feed_str(p, "<tool_call>{\"name\": \"f\", ", &d), 0);
    cr_assert_eq(d.content_len + d.num_tool_calls, 0, "an open block is held");
    cr_assert_eq(feed_str(p, "\"arguments\": {}}</tool_call>", &d), 0);
    cr_assert_eq(d.num_tool_calls, 1);
    cr_assert_str_eq(d.tool_calls[0].name, "f");
    cr_assert_str_eq(d.tool_calls[0].arguments, "{}");
    cr_assert_eq(qws_reply_parser_finish(p, &d), 0);
    cr_assert_eq(d.reasoning_len + d.content_len + d.num_tool_calls, 0);
    qws_reply_parser_destroy(p);

    /* Without tools and past the reasoning, nothing is held at all. */
    p = qws_reply_parser_create(0, 0);
    cr_assert_eq(feed_str(p, "<tool_", &d), 0);
    cr_assert_eq(d.content_len, 6);
    qws_reply_parser_destroy(p);
}

Test(serve_reply_parser, ids_are_call_and_24_alnum_distinct) {
    joined j;
    run_one(0, 1,
            "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"b\", \"arguments\":"
            " {}}</tool_call><tool_call>{\"name\": \"c\", \"arguments\": {}}</tool_call>",
            &j);
    cr_assert_eq(j.n_calls, 3);
    for (size_t i = 0; i < j.n_calls; i++) {
        cr_assert_eq(strlen(j.ids[i]), 29, "%s", j.ids[i]);
        cr_assert_eq(strncmp(j.ids[i], "call_", 5), 0);
        for (size_t k = 5; k < 29; k++) cr_assert(isalnum((unsigned char)j.ids[i][k]), "%s", j.ids[i]);
        for (size_t k = 0; k < i; k++) cr_assert_str_neq(j.ids[i], j.ids[k]);
    }
}

Test(serve_reply_parser, bad_arguments) {
    qws_reply_delta d;
    cr_assert_eq(qws_reply_parser_feed(NULL, "x", 1, &d), -1);
    cr_assert_eq(d.content_len, 0);
    cr_assert_eq(qws_reply_parser_finish(NULL, &d), -1);
    qws_reply_parser *p = qws_reply_parser_create(0, 0);
    cr_assert_not_null(p);
    cr_assert_eq(qws_reply_parser_feed(p, NULL, 3, &d), -1);
    cr_assert_eq(qws_reply_parser_feed(p, NULL, 0, &d), 0);
    cr_assert_eq(qws_reply_parser_feed(p, "x", 1, NULL), -1);
    qws_reply_parser_destroy(p);
    qws_reply_parser_destroy(NULL);
}

/* Replies assembled at random from tag pieces, lookalikes, whitespace and
 * multi-byte text: any cut gives the one-feed result (fixed seed, so a
 * failure reproduces). */
Test(serve_reply_parser, random_replies_split_invariant) {
    static const char *const parts[] = {
        "<think>", "</think>", "<tool_call>", "</tool_call>", "\n", "\n\n", " ", "a", "<", "</", "think",
        "tool_call>", "{\"name\": \"f\", \"arguments\": {\"x\": 1}}", "{\"name\": 1}", "\xc3\xa9", ">",
    };
    const size_t n_parts = sizeof parts / sizeof parts[0];
    uint64_t s = 0x2545F4914F6CDD1DULL;
    char text[512];
    for (int iter = 0; iter < 400; iter++) {
        text[0] = '\0';
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        int pieces = 1 + (int)(s % 12);
        for (int k = 0; k < pieces; k++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            const char *piece = parts[s % n_parts];
            if (strlen(text) + strlen(piece) < sizeof text) strcat(text, piece);
        }
        int split = iter % 2, tools = (iter / 2) % 2;
        joined one, got;
        run_one(split, tools, text, &one);
        size_t len = strlen(text);
        size_t cuts[8], n_cuts = 0;
        for (int c = 0; c < 8; c++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            size_t at = len ? (size_t)(s % (len + 1)) : 0;
            if (n_cuts == 0 || at > cuts[n_cuts - 1]) cuts[n_cuts++] = at;
        }
        run_cuts(split, tools, text, cuts, n_cuts, &got);
        same(&got, &one, "random cuts", text);
        size_t *every = calloc(len + 1, sizeof *every);
        cr_assert_not_null(every);
        for (size_t k = 0; k < len; k++) every[k] = k;
        run_cuts(split, tools, text, every, len, &got);
        same(&got, &one, "byte by byte", text);
        free(every);
    }
}
