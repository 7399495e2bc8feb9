/*
 * tgi.c - qw-serve: Hugging Face text-generation-inference's POST /generate
 * and POST /generate_stream ({"inputs": str, "parameters": {...}}).
 *
 * One sample per request (TGI's "n" is best_of, which qw-serve does not
 * offer). Errors use TGI's {"error": message, "error_type": kind} shape
 * (http.c). A stream ends with the event of the last token carrying
 * generated_text and details; a request that ends without a final token
 * (cancelled, timed out, engine error) ends its stream with an error event
 * as TGI does for a failed generation.
 */
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "http.h"
#include "logprobs_json.h"
#include "prompt.h"
#include "sse.h"
#include "submit.h"

static const char *tgi_finish(const qws_sample *s) {
    if (s->finish == QW_FINISH_STOP) return s->stop_string >= 0 ? "stop_sequence" : "eos_token";
    return qws_finish_word(s->finish);
}

/* Token i of s as {"id","text","logprob","special"}; its text is its piece
 * (the last token also takes whatever the finish released after it). */
static json_t *token_json(const qws_server *srv, const qws_job *job, const qws_sample *s, size_t i) {
    size_t start = i ? s->text_end[i - 1] : 0;
    size_t end = (s->finished && i + 1 == s->n_tokens) ? s->text_len : s->text_end[i];
    json_t *lp = job->k >= 0 ? qws_json_logprob(s->lp[i].logprob) : json_null();
    return json_pack("{s:i, s:o, s:o, s:b}", "id", (int)s->tokens[i], "text", qws_json_text(s->text + start, end - start),
                     "logprob", lp, "special", srv->tok ? qw_tokenizer_is_special(srv->tok, s->tokens[i]) : 0);
}

static json_t *top_tokens_json(const qws_server *srv, const qws_job *job, const qws_sample *s, size_t i) {
    json_t *a = json_array();
    for (size_t t = 0; job->k > 0 && t < s->n_top[i]; t++) {
        const qw_logprob *e = &s->top[i * (size_t)job->k + t];
        json_array_append_new(a, json_pack("{s:i, s:o, s:o, s:b}", "id", (int)e->token, "text",
                                           qws_token_text(srv, e->token), "logprob", qws_json_logprob(e->logprob),
                                           "special",
                                           srv->tok ? qw_tokenizer_is_special(srv->tok, e->token) : 0));
    }
    return a;
}

static json_t *details_json(const qws_exchange *x, const qws_params *p, int full) {
    const qws_job *job = &x->jobs[0];
    const qws_sample *s = &job->samples[0];
    json_t *d = json_pack("{s:s?, s:I, s:o}", "finish_reason", tgi_finish(s), "generated_tokens",
                          (json_int_t)s->n_tokens, "seed", p->has_seed ? json_integer(p->seed) : json_null());
    if (!full || !d) return d;
    json_t *prefill = json_array();
    if (p->decoder_input_details) {
        /* the first prompt token has no logprob (nothing precedes it) */
        if (job->first_prompt_token >= 0)
            json_array_append_new(prefill, json_pack("{s:i, s:o, s:n}", "id", (int)job->first_prompt_token,
                                                     "text", qws_token_text(x->srv, job->first_prompt_token),
                                                     "logprob"));
        for (size_t j = 1; job->prompt_lp && j < job->n_prompt_lp; j++) {
            int32_t id = job->prompt_lp[j].token;
            json_array_append_new(prefill, json_pack("{s:i, s:o, s:o}", "id", (int)id, "text",
                                                     qws_token_text(x->srv, id), "logprob",
                                                     qws_json_logprob(job->prompt_lp[j].logprob)));
        }
    }
    json_object_set_new(d, "prefill", prefill);
    json_t *tokens = json_array(), *tops = json_array();
    for (size_t i = 0; i < s->n_tokens; i++) {
        json_array_append_new(tokens, token_json(x->srv, job, s, i));
        if (job->k > 0) json_array_append_new(tops, top_tokens_json(x->srv, job, s, i));
    }
    json_object_set_new(d, "tokens", tokens);
    if (job->k > 0) json_object_set_new(d, "top_tokens", tops);
    else json_decref(tops);
    return d;
}

static json_t *generated_text(const qws_job *job, const qws_params *p) {
    const qws_sample *s = &job->samples[0];
    qws_buf b = {0};
    if (p->return_full_text && job->prompt_text) qws_buf_add(&b, job->prompt_text, job->prompt_text_len);
    qws_buf_add(&b, s->text, s->text_len);
    json_t *j = b.oom ? NULL : qws_json_text(b.p, b.len);
    qws_buf_free(&b);
    return j;
}

/* /generate's object: the text, and the details when asked for. */
static json_t *generate_answer(qws_exchange *x, const qws_params *p, void *ctx) {
    (void)ctx;
    json_t *r = json_pack("{s:o}", "generated_text", generated_text(&x->jobs[0], p));
    if (r && p->details) json_object_set_new(r, "details", details_json(x, p, 1));
    return r;
}

/* ---- streaming ------------------------------------------------------------ */

typedef struct tgi_stream {
    qws_params p;
    size_t tok_sent;
    int done;
} tgi_stream;

static void tgi_stream_free(void *ctx) {
    tgi_stream *ts = ctx;
    qws_params_free(&ts->p);
    free(ts);
}

static int tgi_produce(void *ctx, qws_exchange *x, qws_buf *out) {
    tgi_stream *ts = ctx;
    if (ts->done) return 1;
    qws_job *job = &x->jobs[0];
    qws_sample *s = &job->samples[0];
    int final_token = s->finished && (s->finish == QW_FINISH_STOP || s->finish == QW_FINISH_LENGTH);
    for (; ts->tok_sent < s->n_tokens; ts->tok_sent++) {
        size_t i = ts->tok_sent;
        int last = final_token && i + 1 == s->n_tokens;
        json_t *ev = json_pack("{s:I, s:o, s:o, s:o}", "index", (json_int_t)(i + 1), "token",
                               token_json(x->srv, job, s, i), "generated_text",
                               last ? generated_text(job, &ts->p) : json_null(), "details",
                               last ? details_json(x, &ts->p, 0) : json_null());
        if (ev && job->k > 0) json_object_set_new(ev, "top_tokens", top_tokens_json(x->srv, job, s, i));
        int rc = ev ? qws_buf_sse_json(out, ev) : -1;
        json_decref(ev);
        if (rc) return -1;
    }
    if (!s->finished) return 0;
    if (!final_token || s->n_tokens == 0) {
        const char *why = s->finish == QW_FINISH_TIMEOUT ? "the request timed out"
                          : s->finish == QW_FINISH_CANCELLED ? "the request was cancelled"
                                                             : "the generation failed";
        json_t *ev = json_pack("{s:s, s:s}", "error", why, "error_type",
                               s->finish == QW_FINISH_TIMEOUT ? "timeout" : "generation");
        int rc = ev ? qws_buf_sse_json(out, ev) : -1;
        json_decref(ev);
        if (rc) return -1;
    }
    ts->done = 1;
    return 1;
}

enum MHD_Result qws_handle_generate(qws_call *c, int stream) {
    qws_server *srv = c->srv;
    qws_error err;
    qws_params p;
    memset(&p, 0, sizeof p);
    qws_prompts pr;
    memset(&pr, 0, sizeof pr);
    json_t *body = qws_body_json(c, &err);
    if (!body) return qws_reply_error(c, &err);
    const json_t *inputs = json_object_get(body, "inputs");
    int rc = 0;
    if (!json_is_string(inputs))
        rc = qws_error_set(&err, 400, "invalid_request_error", NULL, "inputs", "'inputs' must be a string");
    if (!rc) rc = qws_params_parse(body, QWS_API_TGI, srv->vocab_size, srv->max_model_len, &p, &err);
    if (!rc) rc = qws_prompts_parse(srv, inputs, "inputs", &pr, &err);
    json_decref(body);
    qws_exchange *x = NULL;
    if (!rc) {
        /* TGI tokens always carry their logprob */
        x = qws_exchange_create(srv, 1, 1, p.logprobs < 0 ? 0 : p.logprobs,
                                p.decoder_input_details ? (p.prompt_logprobs < 0 ? 0 : p.prompt_logprobs) : -1,
                                "tgi", &err);
        if (!x) rc = -1;
    }
    if (!rc) {
        qws_job *job = &x->jobs[0];
        job->first_prompt_token = pr.ids[0][0];
        job->prompt_text = pr.texts[0];
        job->prompt_text_len = job->prompt_text ? strlen(job->prompt_text) : 0;
        pr.texts[0] = NULL;
        p.n = 1;
        if (p.logprobs < 0) p.logprobs = 0;
        if (p.decoder_input_details && p.prompt_logprobs < 0) p.prompt_logprobs = 0;
        if (qw_request_set_prompt(job->req, pr.ids[0], pr.lens[0]) != QW_OK)
            rc = qws_error_set(&err, 500, "server_error", NULL, NULL, "%s", qw_last_error());
        else
            rc = qws_submit_job(c, job, &p, &err);
    }
    qws_prompts_free(&pr);
    if (rc) return qws_fail_request(c, x, &p, &err);
    const char *hdr[5];
    char val[32];
    const char *const *headers = qws_answer_headers(x, srv, hdr, val);
    if (stream) {
        tgi_stream *ts = calloc(1, sizeof *ts);
        if (!ts) {
            qws_params_free(&p);
            qws_exchange_cancel(x);
            qws_exchange_http_done(x);
            return MHD_NO;
        }
        ts->p = p;
        return qws_sse_respond(c, x, tgi_produce, ts, tgi_stream_free, headers);
    }
    return qws_answer_when_done(c, x, &p, generate_answer, NULL, headers);
}
