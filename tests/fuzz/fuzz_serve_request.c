/*
 * fuzz_serve_request.c - libFuzzer harness for what qw-serve parses from
 * the network and from the model: a request body through the field parser
 * of every API (tools/qw-serve/params.c) and onto a qw_request, and a reply
 * through the reasoning / tool-call splitter (tools/qw-serve/reply_parser.c).
 *
 * Input: a container (fuzz_util.h) of up to three parts:
 *   0 a request body (any bytes: jansson decides whether it is JSON)
 *   1 a reply text     2 its first byte picks the feed size (1..64) and
 *                        the parser's flags (bit 6: split reasoning,
 *                        bit 7: parse tools)
 *
 * Checked beyond "no crash, no leak, no undefined behaviour":
 *  - a refused body is a 400 invalid_request_error with a message (the
 *    parser never answers 5xx for bad input); an accepted one is applied
 *    to a fresh qw_request without error (what the parser accepts, the
 *    library accepts) and freeing it twice is harmless;
 *  - the reply parser gives the same reasoning, content and tool calls
 *    whether the text arrives whole or cut into pieces of any size.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fuzz/fuzz_util.h"
#include "params.h"
#include "reply_parser.h"

/* The parser's vocabulary and model length: those of the tiny test model. */
#define FUZZ_VOCAB 512
#define FUZZ_MAX_LEN 2048

static void check_body(const uint8_t *data, size_t len) {
    json_error_t jerr;
    /* the flags qw-serve's body reader uses (submit.c) */
    json_t *body = json_loadb((const char *)data, len, 0, &jerr);
    if (!body) return;   /* qw-serve answers malformed JSON before the parser */
    static const qws_api apis[] = {QWS_API_COMPLETIONS, QWS_API_CHAT, QWS_API_TGI};
    for (size_t a = 0; a < sizeof apis / sizeof apis[0]; a++) {
        qws_params p;
        qws_error err;
        memset(&err, 0, sizeof err);
        if (qws_params_parse(body, apis[a], FUZZ_VOCAB, FUZZ_MAX_LEN, &p, &err) != 0) {
            QWF_CHECK(err.http_status == 400, "api %d: refused with HTTP %d: %s", (int)apis[a], err.http_status,
                      err.message);
            QWF_CHECK(strcmp(err.type, "invalid_request_error") == 0, "api %d: error type '%s'", (int)apis[a],
                      err.type);
            QWF_CHECK(err.message[0] != '\0', "api %d: a refusal without a message", (int)apis[a]);
            continue;
        }
        qw_request *req = NULL;
        QWF_CHECK(qw_request_create(&req) == QW_OK, "qw_request_create failed");
        memset(&err, 0, sizeof err);
        QWF_CHECK(qws_params_apply(&p, req, &err) == 0, "api %d: accepted fields refused by the library: %s",
                  (int)apis[a], err.message);
        qw_request_release(req);
        qws_params_free(&p);
        qws_params_free(&p);   /* leaves the defaults: a second free is harmless */
    }
    json_decref(body);
}

/* Everything a parser produced, joined: reasoning, content, and each tool
 * call as name + '\0' + arguments + '\0'. */
typedef struct collected {
    char *reasoning, *content, *calls;
    size_t reasoning_len, content_len, calls_len;
} collected;

static void append(char **dst, size_t *len, const char *src, size_t n) {
    if (!n) return;
    char *p = realloc(*dst, *len + n + 1);
    QWF_CHECK(p != NULL, "out of memory");
    memcpy(p + *len, src, n);
    *len += n;
    p[*len] = '\0';
    *dst = p;
}

static void collect(collected *c, const qws_reply_delta *d) {
    append(&c->reasoning, &c->reasoning_len, d->reasoning, d->reasoning_len);
    append(&c->content, &c->content_len, d->content, d->content_len);
    for (size_t i = 0; i < d->num_tool_calls; i++) {
        const qws_tool_call *t = &d->tool_calls[i];
        QWF_CHECK(t->name && t->arguments, "a tool call without name or arguments");
        QWF_CHECK(strncmp(t->id, "call_", 5) == 0, "tool call id '%s'", t->id);
        append(&c->calls, &c->calls_len, t->name, strlen(t->name) + 1);
        append(&c->calls, &c->calls_len, t->arguments, strlen(t->arguments) + 1);
    }
}

static void run_parser(const uint8_t *text, size_t len, size_t piece, int reasoning, int tools, collected *out) {
    qws_reply_parser *p = qws_reply_parser_create(reasoning, tools);
    QWF_CHECK(p != NULL, "qws_reply_parser_create failed");
    qws_reply_delta d;
    for (size_t off = 0; off < len; off += piece) {
        size_t n = len - off < piece ? len - off : piece;
        QWF_CHECK(qws_reply_parser_feed(p, (const char *)text + off, n, &d) == 0, "feed failed");
        collect(out, &d);
    }
    QWF_CHECK(qws_reply_parser_finish(p, &d) == 0, "finish failed");
    collect(out, &d);
    qws_reply_parser_destroy(p);
}

static int same(const char *a, size_t alen, const char *b, size_t blen) {
    return alen == blen && (alen == 0 || memcmp(a, b, alen) == 0);
}

static void check_reply(const uint8_t *text, size_t len, uint8_t control) {
    size_t piece = (size_t)(control & 63) + 1;
    int reasoning = (control >> 6) & 1, tools = (control >> 7) & 1;
    collected whole = {0}, cut = {0};
    run_parser(text, len, len ? len : 1, reasoning, tools, &whole);
    run_parser(text, len, piece, reasoning, tools, &cut);
    QWF_CHECK(same(whole.reasoning, whole.reasoning_len, cut.reasoning, cut.reasoning_len),
              "reasoning differs when fed in pieces of %zu", piece);
    QWF_CHECK(same(whole.content, whole.content_len, cut.content, cut.content_len),
              "content differs when fed in pieces of %zu", piece);
    QWF_CHECK(same(whole.calls, whole.calls_len, cut.calls, cut.calls_len),
              "tool calls differ when fed in pieces of %zu", piece);
    free(whole.reasoning), free(whole.content), free(whole.calls);
    free(cut.reasoning), free(cut.content), free(cut.calls);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    qwf_part parts[QWF_MAX_PARTS];
    int n = qwf_split(data, size, parts);
    check_body(parts[0].data, parts[0].len);
    if (n >= 2) check_reply(parts[1].data, parts[1].len, n >= 3 && parts[2].len ? parts[2].data[0] : 0xc0);
    return 0;
}
