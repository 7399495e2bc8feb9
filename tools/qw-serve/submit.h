/*
 * submit.h - qw-serve: the steps every inference endpoint shares: parse the
 * body, check the model name, configure and submit a job's request (the
 * server's deadline, the cache-salt header, graceful degradation), map the
 * library's refusals to HTTP errors, and wait for a non-streaming answer.
 */
#ifndef QWS_SUBMIT_H
#define QWS_SUBMIT_H

#include <jansson.h>

#include "buf.h"
#include "exchange.h"
#include "http.h"
#include "params.h"

/* Parse c's body as a JSON object. NULL with *err (400) when it is not
 * one (malformed JSON, invalid UTF-8, another JSON type). */
json_t *qws_body_json(qws_call *c, qws_error *err);

/* The "model" field, when present, must name the served model: -1 with
 * *err (404 model_not_found, or 400 for a non-string), else 0. */
int qws_check_model(qws_call *c, const json_t *body, qws_error *err);

/* Configure job->req (its prompt already set) from p and the server's
 * policies, then submit it. Returns 0 (job now counted as running), or -1
 * with *err: 400 for what the engine refuses in the request (too long:
 * code context_length_exceeded; ids out of range; empty prompt; KV that can
 * never fit), 503 overloaded for a full queue or no memory, 500 for an
 * internal error. On failure the caller cancels the exchange (other jobs
 * may be running) and answers the error. */
int qws_submit_job(qws_call *c, qws_job *job, const qws_params *p, qws_error *err);

/* A request that failed before its answer began: cancel and drop x (NULL:
 * none was made), free p, and answer *err. Returns what the handler
 * returns. */
enum MHD_Result qws_fail_request(qws_call *c, qws_exchange *x, qws_params *p, const qws_error *err);

/* Builds a non-streaming answer from a finished exchange (x->mu held, so
 * the engine thread cannot append meanwhile); NULL on out of memory. */
typedef json_t *(*qws_answer_fn)(qws_exchange *x, const qws_params *p, void *ctx);

/* Non-streaming: wait for every job of x, then answer 200 with build's
 * object (500 when it returns NULL) and headers, or the 503 "timeout"
 * error when a sample timed out before its first token. Drops x and frees
 * p in every case; MHD_NO when the client left first (x cancelled). */
enum MHD_Result qws_answer_when_done(qws_call *c, qws_exchange *x, qws_params *p, qws_answer_fn build,
                                     void *ctx, const char *const *headers);

/* Non-streaming: wait until every job of x finished. Returns 0, or -1
 * when the client went away first (the exchange is then cancelled; the
 * caller drops it and returns MHD_NO). */
int qws_wait_done(qws_call *c, qws_exchange *x);

/* After qws_wait_done: -1 with *err (503, code "timeout", Retry-After)
 * when a sample timed out before its first token, else 0. x->mu not held. */
int qws_check_timeout(qws_exchange *x, qws_error *err);

/* Headers for the answer (X-Qwinfer-Degraded when max_tokens was capped),
 * NULL-terminated pairs in storage owned by the caller: hdr[5], val[32]. */
const char *const *qws_answer_headers(const qws_exchange *x, const qws_server *srv, const char **hdr,
                                      char *val);

/* The usage object of an exchange (x->mu held): prompt tokens and cached
 * prompt tokens of each job (counted once per prompt), completion tokens
 * of every sample. */
json_t *qws_usage_json(const qws_exchange *x);

/* The end of an OpenAI stream (x->mu held): with include_usage a chunk of
 * this object type ("text_completion", "chat.completion.chunk") with empty
 * choices and the usage, then "data: [DONE]". 0, or -1 out of memory. */
int qws_sse_openai_end(qws_buf *out, const qws_exchange *x, const char *object, int include_usage);

#endif /* QWS_SUBMIT_H */
