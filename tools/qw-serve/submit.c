/*
 * submit.c - qw-serve: body parsing, request submission and waiting, shared
 * by the OpenAI and TGI endpoints (submit.h).
 */
#include <stdio.h>
#include <string.h>

#include "submit.h"

json_t *qws_body_json(qws_call *c, qws_error *err) {
    json_error_t je;
    if (!c->body || !c->body_len) {
        qws_error_set(err, 400, "invalid_request_error", NULL, NULL, "the request body is empty (JSON expected)");
        return NULL;
    }
    /* JSON_ALLOW_NUL is not given: a NUL inside a string is refused, so
     * every string the handlers read is a plain C string. jansson refuses
     * invalid UTF-8 while parsing. */
    json_t *j = json_loadb(c->body, c->body_len, 0, &je);
    if (!j) {
        qws_error_set(err, 400, "invalid_request_error", NULL, NULL, "malformed JSON body: %s (line %d, column %d)",
                      je.text, je.line, je.column);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        qws_error_set(err, 400, "invalid_request_error", NULL, NULL, "the request body must be a JSON object");
        return NULL;
    }
    return j;
}

int qws_check_model(qws_call *c, const json_t *body, qws_error *err) {
    const json_t *m = json_object_get(body, "model");
    if (!m || json_is_null(m)) return 0;
    if (!json_is_string(m))
        return qws_error_set(err, 400, "invalid_request_error", NULL, "model", "'model' must be a string");
    if (strcmp(json_string_value(m), c->srv->model_name))
        return qws_error_set(err, 404, "invalid_request_error", "model_not_found", "model",
                             "The model '%.200s' does not exist (this server serves '%s')",
                             json_string_value(m), c->srv->model_name);
    return 0;
}

static int map_submit_error(qw_status st, qw_request *req, qws_error *err) {
    char msg[400];
    size_t len = 0;
    if (qw_request_get_error(req, msg, sizeof msg, &len) != QW_OK) snprintf(msg, sizeof msg, "%s", qw_status_string(st));
    switch (st) {
    case QW_ERR_TOO_LONG:
        return qws_error_set(err, 400, "invalid_request_error", "context_length_exceeded", NULL,
                             "the prompt plus max_tokens exceeds the model's maximum context length: %s", msg);
    case QW_ERR_TOKEN_OUT_OF_RANGE:
        return qws_error_set(err, 400, "invalid_request_error", NULL, "prompt", "token id out of range: %s", msg);
    case QW_ERR_EMPTY_PROMPT:
        return qws_error_set(err, 400, "invalid_request_error", NULL, "prompt", "the prompt is empty");
    case QW_ERR_KV_CAPACITY:
        return qws_error_set(err, 400, "invalid_request_error", NULL, NULL,
                             "the request can never fit the KV cache: %s", msg);
    case QW_ERR_QUEUE_FULL:
        return qws_error_set(err, 503, "server_error", "overloaded", NULL,
                             "the server is overloaded (request queue full); retry later");
    case QW_ERR_OUT_OF_MEMORY:
        return qws_error_set(err, 503, "server_error", "overloaded", NULL, "out of memory: %s", msg);
    case QW_ERR_INVALID_ARGUMENT:
    case QW_ERR_INVALID_STATE:
        return qws_error_set(err, 400, "invalid_request_error", NULL, NULL, "%s", msg);
    default:
        return qws_error_set(err, 500, "server_error", NULL, NULL, "%s", msg);
    }
}

int qws_submit_job(qws_call *c, qws_job *job, const qws_params *p, qws_error *err) {
    qws_server *srv = c->srv;
    qw_request *req = job->req;
    if (qws_params_apply(p, req, err)) return -1;
    /* The server's deadline applies unless the body asked for less. */
    long long deadline = p->timeout_ms > 0 ? p->timeout_ms : 0;
    long long server_ms = (long long)(srv->cfg.request_timeout * 1000.0);
    if (server_ms > 0 && (deadline == 0 || deadline > server_ms)) deadline = server_ms;
    qw_status st = QW_OK;
    if (deadline > 0) st = qw_request_set_int(req, QW_REQ_DEADLINE_MS, deadline);
    /* The salt header (set by a gateway per tenant) wins over the body's
     * cache_salt, so a client cannot pick another tenant's salt. */
    const char *salt = qws_header(c, srv->cfg.cache_salt_header);
    if (st == QW_OK && salt && *salt)
        st = qw_request_set_int(req, QW_REQ_CACHE_SALT, (int64_t)qws_cache_salt_hash(salt, strlen(salt)));
    /* Graceful degradation: cap max_tokens while the queue is long. */
    long m = srv->cfg.degrade_max_tokens;
    if (st == QW_OK && m > 0 && atomic_load(&srv->num_waiting) > (uint64_t)srv->cfg.degrade_queue &&
        (p->max_tokens < 0 || p->max_tokens > m)) {
        st = qw_request_set_int(req, QW_REQ_MAX_TOKENS, m);
        if (st == QW_OK) {
            pthread_mutex_lock(&job->x->mu);
            job->x->degraded = 1;
            pthread_mutex_unlock(&job->x->mu);
        }
    }
    if (st == QW_OK) st = qw_request_set_user_data(req, job);
    if (st != QW_OK) return map_submit_error(st, req, err);
    qws_exchange_job_submitting(job);
    st = qw_engine_submit(srv->engine, req);
    if (st != QW_OK) {
        qws_exchange_job_unsubmit(job);
        return map_submit_error(st, req, err);
    }
    return 0;
}

enum MHD_Result qws_fail_request(qws_call *c, qws_exchange *x, qws_params *p, const qws_error *err) {
    if (x) {
        qws_exchange_cancel(x);
        qws_exchange_http_done(x);
    }
    qws_params_free(p);
    return qws_reply_error(c, err);
}

enum MHD_Result qws_answer_when_done(qws_call *c, qws_exchange *x, qws_params *p, qws_answer_fn build,
                                     void *ctx, const char *const *headers) {
    if (qws_wait_done(c, x)) {
        qws_exchange_http_done(x);
        qws_params_free(p);
        return MHD_NO;
    }
    enum MHD_Result ret;
    qws_error err;
    if (qws_check_timeout(x, &err)) {
        ret = qws_reply_error(c, &err);
    } else {
        pthread_mutex_lock(&x->mu);
        json_t *r = build(x, p, ctx);
        pthread_mutex_unlock(&x->mu);
        ret = qws_reply_json(c, 200, r, headers);   /* NULL: a 500 "out of memory" */
    }
    qws_exchange_http_done(x);
    qws_params_free(p);
    return ret;
}

int qws_wait_done(qws_call *c, qws_exchange *x) {
    int gone = 0;
    pthread_mutex_lock(&x->mu);
    while (!qws_exchange_done(x)) {
        qws_exchange_wait(x, 100);
        if (!gone && !qws_exchange_done(x) && qws_client_gone(c->fd)) {
            gone = 1;
            break;
        }
    }
    pthread_mutex_unlock(&x->mu);
    if (gone) qws_exchange_cancel(x);
    return gone ? -1 : 0;
}

int qws_check_timeout(qws_exchange *x, qws_error *err) {
    int timed_out = 0;
    pthread_mutex_lock(&x->mu);
    for (size_t j = 0; j < x->n_jobs; j++)
        for (uint32_t s = 0; s < x->jobs[j].n; s++) {
            const qws_sample *sm = &x->jobs[j].samples[s];
            if (sm->finished && sm->finish == QW_FINISH_TIMEOUT && sm->n_tokens == 0) timed_out = 1;
        }
    pthread_mutex_unlock(&x->mu);
    if (timed_out)
        return qws_error_set(err, 503, "server_error", "timeout", NULL,
                             "the request timed out before its first token (server busy); retry later");
    return 0;
}

const char *const *qws_answer_headers(const qws_exchange *x, const qws_server *srv, const char **hdr,
                                      char *val) {
    if (!x->degraded) return NULL;
    snprintf(val, 32, "max_tokens=%ld", srv->cfg.degrade_max_tokens);
    hdr[0] = "X-Qwinfer-Degraded";
    hdr[1] = val;
    hdr[2] = NULL;
    return hdr;
}

json_t *qws_usage_json(const qws_exchange *x) {
    uint64_t prompt = 0, cached = 0, completion = 0;
    for (size_t j = 0; j < x->n_jobs; j++) {
        const qws_job *job = &x->jobs[j];
        if (job->n) {
            prompt += job->samples[0].prompt_tokens;
            cached += job->samples[0].cached_tokens;
        }
        for (uint32_t s = 0; s < job->n; s++) completion += job->samples[s].n_tokens;
    }
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)prompt, "completion_tokens",
                     (json_int_t)completion, "total_tokens", (json_int_t)(prompt + completion),
                     "prompt_tokens_details", "cached_tokens", (json_int_t)cached);
}

int qws_sse_openai_end(qws_buf *out, const qws_exchange *x, const char *object, int include_usage) {
    if (include_usage) {
        json_t *chunk = json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", x->id, "object", object, "created",
                                  (json_int_t)x->created, "model", x->srv->model_name, "choices", "usage",
                                  qws_usage_json(x));
        int rc = chunk ? qws_buf_sse_json(out, chunk) : -1;
        json_decref(chunk);
        if (rc) return -1;
    }
    return qws_buf_str(out, "data: [DONE]\n\n") ? -1 : 0;
}
