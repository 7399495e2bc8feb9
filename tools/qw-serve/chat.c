/*
 * chat.c - qw-serve: POST /v1/chat/completions.
 *
 * The messages become a qw_chat rendered by the library's Qwen3 template
 * (qw_request_set_chat, which also stops at <|im_end|>); the reply is
 * split by reply_parser into reasoning_content (when thinking is on),
 * content and tool_calls (when the request declared tools).
 */
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "http.h"
#include "logprobs_json.h"
#include "reply_parser.h"
#include "sse.h"
#include "submit.h"

static int bad_msg(qws_error *err, size_t i, const char *field, const char *what) {
    char param[64];
    snprintf(param, sizeof param, "messages[%zu]%s%s", i, field[0] ? "." : "", field);
    return qws_error_set(err, 400, "invalid_request_error", NULL, param, "%s %s", param, what);
}

/* A content value as text: a string, null (""), or an array of
 * {"type":"text","text":...} parts joined with "\n" (as vLLM joins them). */
static int content_text(const json_t *v, size_t i, qws_buf *out, qws_error *err) {
    if (!v || json_is_null(v)) return 0;
    if (json_is_string(v)) return qws_buf_add(out, json_string_value(v), json_string_length(v)) ? -2 : 0;
    if (!json_is_array(v)) return bad_msg(err, i, "content", "must be a string or an array of text parts");
    for (size_t k = 0; k < json_array_size(v); k++) {
        const json_t *part = json_array_get(v, k);
        const json_t *type = json_object_get(part, "type");
        const json_t *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type) || strcmp(json_string_value(type), "text") ||
            !json_is_string(text))
            return bad_msg(err, i, "content",
                           "parts must be {\"type\": \"text\", \"text\": string} (only text is supported)");
        if (k && qws_buf_str(out, "\n")) return -2;
        if (qws_buf_add(out, json_string_value(text), json_string_length(text))) return -2;
    }
    return 0;
}

/* An assistant message's tool_calls, appended to its text as Qwen3's
 * template writes them. */
static int tool_calls_text(const json_t *calls, size_t i, qws_buf *out, qws_error *err) {
    if (!calls || json_is_null(calls)) return 0;
    if (!json_is_array(calls)) return bad_msg(err, i, "tool_calls", "must be an array");
    for (size_t k = 0; k < json_array_size(calls); k++) {
        const json_t *tc = json_array_get(calls, k);
        const json_t *fn = json_object_get(tc, "function");
        if (!fn) fn = tc;
        const json_t *name = json_object_get(fn, "name");
        const json_t *args = json_object_get(fn, "arguments");
        if (!json_is_object(fn) || !json_is_string(name))
            return bad_msg(err, i, "tool_calls", "entries need function.name (a string)");
        if ((k == 0 && out->len) || k > 0) qws_buf_str(out, "\n");
        qws_buf_str(out, "<tool_call>\n{\"name\": \"");
        qws_buf_add(out, json_string_value(name), json_string_length(name));
        qws_buf_str(out, "\", \"arguments\": ");
        if (json_is_string(args)) {
            qws_buf_add(out, json_string_value(args), json_string_length(args));
        } else if (args && !json_is_null(args)) {
            char *s = json_dumps(args, JSON_INDENT(0) | JSON_ENCODE_ANY);
            if (!s) return -2;
            qws_buf_str(out, s);
            free(s);
        } else {
            qws_buf_str(out, "{}");
        }
        qws_buf_str(out, "}\n</tool_call>");
    }
    return out->oom ? -2 : 0;
}

/* Build the conversation. Returns 0, -1 with *err (400). */
static int build_chat(const json_t *body, qw_chat *chat, int *has_tools, qws_error *err) {
    const json_t *msgs = json_object_get(body, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return qws_error_set(err, 400, "invalid_request_error", NULL, "messages",
                             "'messages' must be a non-empty array");
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        const json_t *m = json_array_get(msgs, i);
        if (!json_is_object(m)) return bad_msg(err, i, "", "must be an object");
        const json_t *role = json_object_get(m, "role");
        if (!json_is_string(role)) return bad_msg(err, i, "role", "must be a string");
        const char *r = json_string_value(role);
        qw_chat_role cr;
        if (!strcmp(r, "system") || !strcmp(r, "developer")) cr = QW_CHAT_SYSTEM;
        else if (!strcmp(r, "user")) cr = QW_CHAT_USER;
        else if (!strcmp(r, "assistant")) cr = QW_CHAT_ASSISTANT;
        else if (!strcmp(r, "tool")) cr = QW_CHAT_TOOL;
        else return bad_msg(err, i, "role", "must be system, developer, user, assistant or tool");
        qws_buf text = {0};
        int rc = content_text(json_object_get(m, "content"), i, &text, err);
        if (!rc && cr == QW_CHAT_ASSISTANT) rc = tool_calls_text(json_object_get(m, "tool_calls"), i, &text, err);
        if (!rc && qw_chat_add_message(chat, cr, text.p ? text.p : "", text.len) != QW_OK)
            rc = bad_msg(err, i, "content", qw_last_error());
        qws_buf_free(&text);
        if (rc == -2) return qws_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        if (rc) return rc;
        if (cr == QW_CHAT_ASSISTANT) {
            const json_t *rs = json_object_get(m, "reasoning_content");
            if (!rs || json_is_null(rs)) rs = json_object_get(m, "reasoning");
            if (rs && !json_is_null(rs)) {
                if (!json_is_string(rs)) return bad_msg(err, i, "reasoning_content", "must be a string");
                if (qw_chat_set_reasoning(chat, json_string_value(rs), json_string_length(rs)) != QW_OK)
                    return bad_msg(err, i, "reasoning_content", qw_last_error());
            }
        }
    }
    const json_t *tools = json_object_get(body, "tools");
    *has_tools = 0;
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools))
            return qws_error_set(err, 400, "invalid_request_error", NULL, "tools", "'tools' must be an array");
        for (size_t k = 0; k < json_array_size(tools); k++) {
            const json_t *t = json_array_get(tools, k);
            if (!json_is_object(t))
                return qws_error_set(err, 400, "invalid_request_error", NULL, "tools",
                                     "tools[%zu] must be an object", k);
            /* one line with Python json.dumps' separators, as the template's tojson */
            char *s = json_dumps(t, JSON_INDENT(0));
            if (!s) return qws_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
            qw_status st = qw_chat_add_tool(chat, s, strlen(s));
            free(s);
            if (st != QW_OK)
                return qws_error_set(err, 400, "invalid_request_error", NULL, "tools", "tools[%zu]: %s", k,
                                     qw_last_error());
        }
        *has_tools = json_array_size(tools) > 0;
    }
    return 0;
}

/* ---- reply assembly -------------------------------------------------------- */

/* One choice's split reply. */
typedef struct choice_reply {
    qws_reply_parser *parser;
    qws_buf reasoning, content;
    json_t *tool_calls;      /* array, accumulated (non-streaming)     */
    size_t n_tool_calls;
} choice_reply;

static json_t *tool_call_json(const qws_tool_call *tc, size_t index, int with_index) {
    json_t *j = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", tc->id, "type", "function", "function", "name",
                          tc->name, "arguments", tc->arguments);
    if (j && with_index) json_object_set_new(j, "index", json_integer((json_int_t)index));
    return j;
}

/* A streaming delta object for what the parser released, or NULL when it
 * released nothing. */
static json_t *delta_json(const qws_reply_delta *d, choice_reply *cr) {
    if (!d->reasoning_len && !d->content_len && !d->num_tool_calls) return NULL;
    json_t *delta = json_object();
    if (d->reasoning_len) json_object_set_new(delta, "reasoning_content", qws_json_text(d->reasoning, d->reasoning_len));
    if (d->content_len) json_object_set_new(delta, "content", qws_json_text(d->content, d->content_len));
    if (d->num_tool_calls) {
        json_t *a = json_array();
        for (size_t t = 0; t < d->num_tool_calls; t++)
            json_array_append_new(a, tool_call_json(&d->tool_calls[t], cr->n_tool_calls++, 1));
        json_object_set_new(delta, "tool_calls", a);
    }
    return delta;
}

static void absorb(choice_reply *cr, const qws_reply_delta *d) {
    qws_buf_add(&cr->reasoning, d->reasoning, d->reasoning_len);
    qws_buf_add(&cr->content, d->content, d->content_len);
    for (size_t t = 0; t < d->num_tool_calls; t++)
        json_array_append_new(cr->tool_calls, tool_call_json(&d->tool_calls[t], 0, 0));
    cr->n_tool_calls += d->num_tool_calls;
}

static const char *chat_finish(const qws_sample *s, size_t n_tool_calls) {
    if (s->finish == QW_FINISH_STOP && n_tool_calls) return "tool_calls";
    return qws_finish_word(s->finish);
}

static json_t *chat_response(qws_exchange *x, const qws_params *p, int has_tools, int *oom) {
    json_t *choices = json_array();
    qws_job *job = &x->jobs[0];
    for (uint32_t si = 0; si < job->n; si++) {
        qws_sample *s = &job->samples[si];
        choice_reply cr = {0};
        cr.tool_calls = json_array();
        cr.parser = qws_reply_parser_create(p->enable_thinking, has_tools);
        qws_reply_delta d;
        if (!cr.parser || qws_reply_parser_feed(cr.parser, s->text, s->text_len, &d)) {
            *oom = 1;
        } else {
            absorb(&cr, &d);
            if (qws_reply_parser_finish(cr.parser, &d)) *oom = 1;
            else absorb(&cr, &d);
        }
        json_t *msg = json_pack("{s:s}", "role", "assistant");
        json_object_set_new(msg, "content", cr.n_tool_calls && !cr.content.len
                                                ? json_null()
                                                : qws_json_text(cr.content.p, cr.content.len));
        json_object_set_new(msg, "reasoning_content",
                            cr.reasoning.len ? qws_json_text(cr.reasoning.p, cr.reasoning.len) : json_null());
        json_object_set_new(msg, "tool_calls", cr.tool_calls);
        json_t *c = json_pack("{s:I, s:o, s:o, s:s?}", "index", (json_int_t)si, "message", msg, "logprobs",
                              job->k >= 0 ? qws_logprobs_chat(x->srv, job, s, 0, s->n_tokens) : json_null(),
                              "finish_reason", chat_finish(s, cr.n_tool_calls));
        if (cr.reasoning.oom || cr.content.oom) *oom = 1;
        json_array_append_new(choices, c);
        qws_reply_parser_destroy(cr.parser);
        qws_buf_free(&cr.reasoning);
        qws_buf_free(&cr.content);
    }
    json_t *r = json_pack("{s:s, s:s, s:I, s:s}", "id", x->id, "object", "chat.completion", "created",
                          (json_int_t)x->created, "model", x->srv->model_name);
    json_object_set_new(r, "choices", choices);
    json_object_set_new(r, "usage", qws_usage_json(x));
    if (job->prompt_k >= 0) json_object_set_new(r, "prompt_logprobs", qws_prompt_logprobs_json(x->srv, job));
    return r;
}

/* ctx: the request's has_tools flag. A reply cut short by out of memory
 * is no answer at all (qws_answer_when_done turns NULL into a 500). */
static json_t *chat_answer(qws_exchange *x, const qws_params *p, void *ctx) {
    int oom = 0;
    json_t *r = chat_response(x, p, *(const int *)ctx, &oom);
    if (oom) {
        json_decref(r);
        return NULL;
    }
    return r;
}

/* ---- streaming ------------------------------------------------------------ */

typedef struct chat_choice_state {
    choice_reply cr;
    size_t tok_sent, text_sent;
    int role_sent, fin_sent;
} chat_choice_state;

typedef struct chat_stream {
    qws_params p;
    int has_tools;
    uint32_t n;
    chat_choice_state *st;
    int done_sent;
} chat_stream;

static void chat_stream_free(void *ctx) {
    chat_stream *cs = ctx;
    for (uint32_t i = 0; cs->st && i < cs->n; i++) qws_reply_parser_destroy(cs->st[i].cr.parser);
    free(cs->st);
    qws_params_free(&cs->p);
    free(cs);
}

static int emit(const qws_exchange *x, const chat_stream *cs, qws_buf *out, uint32_t index, json_t *delta,
                json_t *logprobs, const char *finish) {
    json_t *chunk = json_pack("{s:s, s:s, s:I, s:s, s:[{s:I, s:o, s:o, s:s?}]}", "id", x->id, "object",
                              "chat.completion.chunk", "created", (json_int_t)x->created, "model",
                              x->srv->model_name, "choices", "index", (json_int_t)index, "delta",
                              delta ? delta : json_object(), "logprobs", logprobs ? logprobs : json_null(),
                              "finish_reason", finish);
    if (chunk && cs->p.continuous_usage_stats) json_object_set_new(chunk, "usage", qws_usage_json(x));
    int rc = chunk ? qws_buf_sse_json(out, chunk) : -1;
    json_decref(chunk);
    return rc;
}

static int chat_produce(void *ctx, qws_exchange *x, qws_buf *out) {
    chat_stream *cs = ctx;
    qws_job *job = &x->jobs[0];
    int all_fin = 1;
    for (uint32_t si = 0; si < job->n; si++) {
        qws_sample *s = &job->samples[si];
        chat_choice_state *st = &cs->st[si];
        if (st->fin_sent) continue;
        if (!st->role_sent) {
            if (emit(x, cs, out, si, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL, NULL))
                return -1;
            st->role_sent = 1;
        }
        qws_reply_delta d;
        json_t *delta = NULL;
        if (s->text_len > st->text_sent) {
            if (qws_reply_parser_feed(st->cr.parser, s->text + st->text_sent, s->text_len - st->text_sent, &d))
                return -1;
            delta = delta_json(&d, &st->cr);
            st->text_sent = s->text_len;
        }
        json_t *lp = NULL;
        if (job->k >= 0 && s->n_tokens > st->tok_sent) {
            lp = qws_logprobs_chat(x->srv, job, s, st->tok_sent, s->n_tokens);
            st->tok_sent = s->n_tokens;
        }
        if (s->finished) {
            /* flush what the parser held, then the finish chunk */
            if (qws_reply_parser_finish(st->cr.parser, &d)) {
                json_decref(delta);
                json_decref(lp);
                return -1;
            }
            json_t *rest = delta_json(&d, &st->cr);
            if (rest) {
                if (delta) {
                    /* both: send the first now, the flushed part with the finish */
                    if (emit(x, cs, out, si, delta, lp, NULL)) return -1;
                    lp = NULL;
                }
                delta = rest;
            }
            if (emit(x, cs, out, si, delta, lp, chat_finish(s, st->cr.n_tool_calls))) return -1;
            st->fin_sent = 1;
            continue;
        }
        all_fin = 0;
        if ((delta || lp) && emit(x, cs, out, si, delta, lp, NULL)) return -1;
    }
    if (!all_fin) return 0;
    if (cs->done_sent) return 1;
    if (qws_sse_openai_end(out, x, "chat.completion.chunk", cs->p.include_usage)) return -1;
    cs->done_sent = 1;
    return 1;
}

enum MHD_Result qws_handle_chat(qws_call *c) {
    qws_server *srv = c->srv;
    qws_error err;
    qws_params p;
    memset(&p, 0, sizeof p);
    qw_chat *chat = NULL;
    int has_tools = 0;
    json_t *body = qws_body_json(c, &err);
    if (!body) return qws_reply_error(c, &err);
    int rc = qws_check_model(c, body, &err);
    if (!rc) rc = qws_params_parse(body, QWS_API_CHAT, srv->vocab_size, srv->max_model_len, &p, &err);
    if (!rc && !srv->tok)
        rc = qws_error_set(&err, 400, "invalid_request_error", NULL, "messages",
                           "the model has no tokenizer: chat needs one (use /v1/completions with token ids)");
    if (!rc && qw_chat_create(&chat) != QW_OK) rc = qws_error_set(&err, 500, "server_error", NULL, NULL, "out of memory");
    if (!rc) rc = build_chat(body, chat, &has_tools, &err);
    json_decref(body);
    qws_exchange *x = NULL;
    if (!rc) {
        x = qws_exchange_create(srv, 1, (uint32_t)p.n, p.logprobs, p.prompt_logprobs, "chatcmpl", &err);
        if (!x) rc = -1;
    }
    if (!rc) {
        uint32_t flags = QW_CHAT_ADD_GENERATION_PROMPT |
                         (p.enable_thinking ? QW_CHAT_ENABLE_THINKING : QW_CHAT_DISABLE_THINKING);
        qw_status st = qw_request_set_chat(x->jobs[0].req, chat, flags);
        if (st != QW_OK)
            rc = qws_error_set(&err, st == QW_ERR_OUT_OF_MEMORY ? 500 : 400,
                               st == QW_ERR_OUT_OF_MEMORY ? "server_error" : "invalid_request_error", NULL,
                               "messages", "%s", qw_last_error());
        else
            rc = qws_submit_job(c, &x->jobs[0], &p, &err);
    }
    qw_chat_destroy(chat);
    if (rc) return qws_fail_request(c, x, &p, &err);
    const char *hdr[5];
    char val[32];
    const char *const *headers = qws_answer_headers(x, srv, hdr, val);
    if (p.stream) {
        chat_stream *cs = calloc(1, sizeof *cs);
        chat_choice_state *st = calloc((size_t)p.n, sizeof *st);
        int ok = cs && st;
        for (int i = 0; ok && i < p.n; i++)
            if (!(st[i].cr.parser = qws_reply_parser_create(p.enable_thinking, has_tools))) ok = 0;
        if (!ok) {
            for (int i = 0; st && i < p.n; i++) qws_reply_parser_destroy(st[i].cr.parser);
            free(cs);
            free(st);
            qws_params_free(&p);
            qws_exchange_cancel(x);
            qws_exchange_http_done(x);
            return MHD_NO;
        }
        cs->p = p;
        cs->has_tools = has_tools;
        cs->n = (uint32_t)p.n;
        cs->st = st;
        return qws_sse_respond(c, x, chat_produce, cs, chat_stream_free, headers);
    }
    return qws_answer_when_done(c, x, &p, chat_answer, &has_tools, headers);
}
