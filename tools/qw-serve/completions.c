/*
 * completions.c - qw-serve: POST /v1/completions (OpenAI's legacy
 * completions API with vLLM's extensions), streaming and not.
 *
 * A batch of prompts is one job each; choice index = prompt_i * n + sample_i
 * as OpenAI numbers them.
 */
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "http.h"
#include "logprobs_json.h"
#include "prompt.h"
#include "sse.h"
#include "submit.h"

/* vLLM's stop_reason: the stop string or stop token id that ended the
 * choice, null for EOS or any other finish. */
static json_t *stop_reason(const qws_params *p, const qws_sample *s) {
    if (s->finish != QW_FINISH_STOP) return json_null();
    if (s->stop_string >= 0 && (size_t)s->stop_string < p->n_stop)
        return qws_json_text(p->stop[s->stop_string], p->stop_lens[s->stop_string]);
    for (size_t i = 0; s->stop_token >= 0 && i < p->n_stop_token_ids; i++)
        if (p->stop_token_ids[i] == s->stop_token) return json_integer(s->stop_token);
    return json_null();
}

/* The text an echo puts in front of a choice (x->mu held or not: the
 * prompt text is set before submission). Token-id prompts get it decoded
 * once, the first time. */
static void echo_text(const qws_server *srv, qws_job *job, const qws_prompts *pr, size_t j, int skip_special) {
    if (job->prompt_text || j >= pr->n) return;
    if (pr->texts[j]) {
        job->prompt_text = strdup(pr->texts[j]);
    } else if (srv->tok) {
        size_t len = 0;
        if (qw_tokenizer_decode(srv->tok, pr->ids[j], pr->lens[j], skip_special, NULL, 0, &len) == QW_OK &&
            (job->prompt_text = malloc(len + 1)))
            qw_tokenizer_decode(srv->tok, pr->ids[j], pr->lens[j], skip_special, job->prompt_text, len + 1, &len);
    }
    job->prompt_text_len = job->prompt_text ? strlen(job->prompt_text) : 0;
}

/* Characters the echo puts in front of a choice's text. */
static size_t echo_chars(const qws_job *job, const qws_params *p) {
    return p->echo && job->prompt_text ? qws_utf8_chars(job->prompt_text, job->prompt_text_len) : 0;
}

static json_t *chunk_base(const qws_exchange *x, const char *object) {
    return json_pack("{s:s, s:s, s:I, s:s}", "id", x->id, "object", object, "created", (json_int_t)x->created,
                     "model", x->srv->model_name);
}

/* ---- streaming ------------------------------------------------------------ */

typedef struct choice_state {
    size_t tok_sent, text_sent;
    int echo_sent, fin_sent;
} choice_state;

typedef struct cmpl_stream {
    qws_params p;
    choice_state *st;   /* [n_jobs * n] */
    int done_sent;
} cmpl_stream;

static void cmpl_stream_free(void *ctx) {
    cmpl_stream *cs = ctx;
    qws_params_free(&cs->p);
    free(cs->st);
    free(cs);
}

static int cmpl_produce(void *ctx, qws_exchange *x, qws_buf *out) {
    cmpl_stream *cs = ctx;
    const qws_params *p = &cs->p;
    int all_fin = 1;
    for (size_t j = 0; j < x->n_jobs; j++) {
        qws_job *job = &x->jobs[j];
        for (uint32_t si = 0; si < job->n; si++) {
            qws_sample *s = &job->samples[si];
            choice_state *st = &cs->st[j * job->n + si];
            int fin = s->finished && !st->fin_sent;
            int echo = p->echo && !st->echo_sent;
            size_t new_text = s->text_len - st->text_sent;
            size_t new_tok = s->n_tokens - st->tok_sent;
            if (!(new_text || (job->k >= 0 && new_tok) || fin || echo)) {
                if (!st->fin_sent) all_fin = 0;
                continue;
            }
            qws_buf text = {0};
            if (echo && job->prompt_text) qws_buf_add(&text, job->prompt_text, job->prompt_text_len);
            qws_buf_add(&text, s->text + st->text_sent, new_text);
            json_t *choice = json_pack("{s:I, s:o, s:o, s:o}", "index", (json_int_t)(j * job->n + si), "text",
                                       qws_json_text(text.p, text.len), "logprobs",
                                       job->k >= 0 ? qws_logprobs_completions(x->srv, job, s, st->tok_sent,
                                                                              s->n_tokens, echo_chars(job, p))
                                                   : json_null(),
                                       "finish_reason",
                                       fin ? json_string(qws_finish_word(s->finish)) : json_null());
            qws_buf_free(&text);
            if (choice && fin) json_object_set_new(choice, "stop_reason", stop_reason(p, s));
            json_t *chunk = chunk_base(x, "text_completion");
            json_object_set_new(chunk, "choices", json_pack("[o]", choice));
            if (p->continuous_usage_stats) json_object_set_new(chunk, "usage", qws_usage_json(x));
            int rc = chunk ? qws_buf_sse_json(out, chunk) : -1;
            json_decref(chunk);
            if (rc) return -1;
            st->echo_sent = 1;
            st->text_sent = s->text_len;
            st->tok_sent = s->n_tokens;
            if (fin) st->fin_sent = 1;
            if (!st->fin_sent) all_fin = 0;
        }
    }
    if (!all_fin || cs->done_sent) return cs->done_sent ? 1 : 0;
    if (qws_sse_openai_end(out, x, "text_completion", p->include_usage)) return -1;
    cs->done_sent = 1;
    return 1;
}

/* ---- non-streaming -------------------------------------------------------- */

static json_t *cmpl_response(qws_exchange *x, const qws_params *p) {
    json_t *choices = json_array();
    for (size_t j = 0; j < x->n_jobs; j++) {
        qws_job *job = &x->jobs[j];
        for (uint32_t si = 0; si < job->n; si++) {
            qws_sample *s = &job->samples[si];
            qws_buf text = {0};
            if (p->echo && job->prompt_text) qws_buf_add(&text, job->prompt_text, job->prompt_text_len);
            qws_buf_add(&text, s->text, s->text_len);
            json_t *c = json_pack(
                "{s:I, s:o, s:o, s:s?, s:o}", "index", (json_int_t)(j * job->n + si), "text",
                qws_json_text(text.p, text.len), "logprobs",
                job->k >= 0 ? qws_logprobs_completions(x->srv, job, s, 0, s->n_tokens, echo_chars(job, p))
                            : json_null(),
                "finish_reason", qws_finish_word(s->finish), "stop_reason", stop_reason(p, s));
            qws_buf_free(&text);
            if (c && job->prompt_k >= 0) json_object_set_new(c, "prompt_logprobs", qws_prompt_logprobs_json(x->srv, job));
            json_array_append_new(choices, c);
        }
    }
    json_t *r = chunk_base(x, "text_completion");
    json_object_set_new(r, "choices", choices);
    json_object_set_new(r, "usage", qws_usage_json(x));
    return r;
}

static json_t *cmpl_answer(qws_exchange *x, const qws_params *p, void *ctx) {
    (void)ctx;
    return cmpl_response(x, p);
}

enum MHD_Result qws_handle_completions(qws_call *c) {
    qws_server *srv = c->srv;
    qws_error err;
    qws_params p;
    memset(&p, 0, sizeof p);
    qws_prompts pr;
    memset(&pr, 0, sizeof pr);
    json_t *body = qws_body_json(c, &err);
    if (!body) return qws_reply_error(c, &err);
    if (qws_check_model(c, body, &err) ||
        qws_params_parse(body, QWS_API_COMPLETIONS, srv->vocab_size, srv->max_model_len, &p, &err) ||
        qws_prompts_parse(srv, json_object_get(body, "prompt"), "prompt", &pr, &err)) {
        json_decref(body);
        qws_params_free(&p);
        qws_prompts_free(&pr);
        return qws_reply_error(c, &err);
    }
    json_decref(body);
    /* A batch whose sequences outnumber the whole queue could never be
     * admitted: a 503 would have the client retry forever. */
    if ((uint64_t)pr.n * (uint64_t)p.n > (uint64_t)srv->cfg.max_queue) {
        qws_error_set(&err, 400, "invalid_request_error", NULL, "n",
                      "%zu prompts x n = %d is %llu sequences; this server queues at most %ld", pr.n, (int)p.n,
                      (unsigned long long)pr.n * (unsigned long long)p.n, srv->cfg.max_queue);
        qws_params_free(&p);
        qws_prompts_free(&pr);
        return qws_reply_error(c, &err);
    }
    qws_exchange *x = qws_exchange_create(srv, pr.n, (uint32_t)p.n, p.logprobs, p.prompt_logprobs, "cmpl", &err);
    int failed = !x;
    for (size_t j = 0; !failed && j < pr.n; j++) {
        qws_job *job = &x->jobs[j];
        if (p.echo) echo_text(srv, job, &pr, j, p.skip_special_tokens);
        qw_status st = qw_request_set_prompt(job->req, pr.ids[j], pr.lens[j]);
        if (st != QW_OK) {
            failed = 1;
            qws_error_set(&err, 500, "server_error", NULL, NULL, "%s", qw_last_error());
        } else if (qws_submit_job(c, job, &p, &err)) {
            failed = 1;
        }
    }
    qws_prompts_free(&pr);
    if (failed) return qws_fail_request(c, x, &p, &err);
    const char *hdr[5];
    char val[32];
    const char *const *headers = qws_answer_headers(x, srv, hdr, val);
    if (p.stream) {
        cmpl_stream *cs = calloc(1, sizeof *cs);
        choice_state *st = calloc(x->n_jobs * (size_t)p.n, sizeof *st);
        if (!cs || !st) {
            free(cs);
            free(st);
            qws_params_free(&p);
            qws_exchange_cancel(x);
            qws_exchange_http_done(x);
            return MHD_NO;
        }
        cs->p = p;   /* the stream owns the params now */
        cs->st = st;
        return qws_sse_respond(c, x, cmpl_produce, cs, cmpl_stream_free, headers);
    }
    return qws_answer_when_done(c, x, &p, cmpl_answer, NULL, headers);
}
