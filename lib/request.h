/*
 * request.h - the internal layout of qw_request: options set by the host,
 * scheduling state, output, and the reference counting that decides when
 * it is freed.
 *
 * Ownership: a request has up to two references, the caller's (from
 * qw_request_create, dropped by qw_request_release) and the engine's (taken
 * at submit, dropped at the first step after it finished and its events
 * were delivered). Cancellations in flight hold a temporary third.
 */
#ifndef QWI_REQUEST_H
#define QWI_REQUEST_H

#include <stdatomic.h>

#include "common.h"
#include "error_scope.h"
#include "logprobs.h"
#include "sample.h"
#include "scheduler.h"

struct qw_engine;

struct qw_request {
    qwi_err_slot err;            /* messages of failed calls on it (error_scope.h) */
    atomic_int refcount;
    atomic_int state;            /* qw_request_state                     */
    atomic_int finish_reason;    /* qw_finish_reason                     */
    atomic_bool caller_released;
    atomic_bool submit_claimed;  /* first qw_engine_submit wins the request */
    uint64_t id;

    /* host-set options (frozen at submit) */
    int32_t *prompt;
    int32_t num_prompt;
    int64_t max_tokens;          /* -1: up to max model length           */
    int64_t min_tokens;
    double temperature, top_p, min_p;
    int32_t top_k;
    bool has_seed;
    uint64_t seed;
    bool ignore_eos;
    int32_t *stop_tokens;
    int32_t num_stop;
    int32_t priority;
    int64_t max_queue_ms, deadline_ms;
    uint64_t cache_salt;
    struct qw_session *session;
    void *user_data;
    qw_logits_fn logits_fn;
    void *logits_user;
    /* penalties and logit bias (penalties.h; setter in logit_bias.c) */
    double repetition_penalty, presence_penalty, frequency_penalty;
    int32_t *bias_ids;
    float *bias_values;
    int32_t num_bias;
    qwi_req_logprobs lp;         /* QW_REQ_LOGPROBS / QW_REQ_PROMPT_LOGPROBS
                                    options, results made at submit (logprobs.h) */

    /* text prompts and streamed text (request_text.c): prompt_text is set by
     * qw_request_set_prompt_text / qw_request_set_chat and encoded into
     * prompt at submit; keep_special is QW_REQ_SKIP_SPECIAL_TOKENS == 0 */
    char *prompt_text;
    size_t prompt_text_len;
    bool has_prompt_text, prompt_is_chat, keep_special;
    struct qwi_detok *detok;     /* made at submit when the engine has a tokenizer */
    /* The output text: text[0..text_len) is everything detokenised so far
     * (cut at a stop string's match), of which [0..text_emitted) went out
     * in events; the latest event's piece is [piece_off, +piece_len). */
    char *text;
    size_t text_len, text_cap, text_emitted, piece_off, piece_len;

    /* stop strings (stop_strings.c): the host's list and
     * QW_REQ_INCLUDE_STOP_STR_IN_OUTPUT; the matcher over the text (made at
     * submit); what ended a QW_FINISH_STOP request (-1: not that), written
     * by the step thread before finish_reason is published */
    struct qwi_stop_list *stop_list;
    bool include_stop_str;
    struct qwi_stop_matcher *stop_matcher;
    int32_t stop_string_hit, stop_token_hit;
    size_t stop_cut;             /* with stop_string_hit >= 0: text end     */

    /* engine-side state, valid after submit */
    struct qw_engine *engine;
    qwi_seq seq;
    qwi_sampling sampling;
    int32_t max_generated;       /* resolved max tokens                  */
    bool counted_waiting;        /* in the engine's waiting count: set at
                                    submit (under inbox_mu), cleared by the
                                    step thread at first schedule or finish */
    int32_t *banned;             /* EOS + stop ids, banned before min    */
    int32_t num_banned;
    /* timing, CLOCK_MONOTONIC seconds; < 0 until it happens */
    double t_arrival, t_scheduled, t_first_token, t_finished;

    /* parallel samples (parallel_samples.c). num_samples is QW_REQ_N (0 or
     * 1: one sequence). samples[0..num_samples-1) are samples 1..n-1, made
     * at submit, each holding one reference owned by this request (dropped
     * when it is freed). fork_pending: they wait for this request's prompt
     * to be computed (step thread). A sample has parent (set, never read
     * after the fork: the parent may be freed first) and its sample_index. */
    int32_t num_samples;
    uint32_t sample_index;
    struct qw_request **samples;
    struct qw_request *parent;
    bool fork_pending;
};

/* parallel_samples.c. Make samples 1..n-1 of r (num_samples > 1), each a
 * request with a copy of every option of r (the prompt as ids: call after
 * qwi_request_prepare_text), its sample_index, parent, r's id and
 * user_data, and claimed as submitted. QW_ERR_INVALID_ARGUMENT for a session
 * request; QW_ERR_OUT_OF_MEMORY with nothing left behind. Submitting thread. */
qw_status qwi_samples_create(struct qw_request *r);
/* Drop the samples r owns (from a failed submit or r's free). */
void qwi_samples_free(struct qw_request *r);
/* Copy every host-set option of src into dst (a fresh request): prompt ids
 * and text, sampling, limits, stop lists, callbacks, user data. On failure
 * QW_ERR_OUT_OF_MEMORY; what was copied stays in dst (freed with it). */
qw_status qwi_request_clone_options(struct qw_request *dst, const struct qw_request *src);

/* Seconds on CLOCK_MONOTONIC. */
double qwi_now(void);

/* Take one more reference. */
void qwi_request_ref(struct qw_request *req);
/* Drop a reference; frees the request when none is left. */
void qwi_request_unref(struct qw_request *req);

/* Output tokens a request's arrays have room for at submit; they grow by
 * doubling from there as tokens arrive (qwi_request_grow). */
#define QWI_REQUEST_FIRST_OUTPUT 16

/* Make room for more tokens of a submitted request whose token array is
 * full: grow seq.tokens (doubling, at most num_prompt_tokens +
 * max_generated), the block table's array to cover that many tokens at
 * block_size each, and the session's history array (under its lock) to the
 * same length, so finishing can copy the tokens back without allocating.
 * Step thread. QW_OK without change when already at the limit. On failure
 * QW_ERR_OUT_OF_MEMORY with a message naming the request; seq.capacity is
 * unchanged and nothing is lost (the arrays that did grow stay grown). */
qw_status qwi_request_grow(struct qw_request *req, int32_t block_size);

/* QW_ERR_INVALID_ARGUMENT for NULL, QW_ERR_INVALID_STATE once submitted
 * (fn names the caller in the message). */
qw_status qwi_request_check_mutable(const struct qw_request *req, const char *fn);

/* request_text.c. At submit, before validation: encode a text or chat
 * prompt into req->prompt with the engine's tokenizer (adding <|im_end|> to
 * the stop tokens of a chat), and make the request's detokenizer and
 * stop-string matcher (qwi_request_text_start). QW_ERR_INVALID_STATE for
 * stop strings on an engine without a tokenizer. Submitting thread; reads
 * only immutable engine fields. */
qw_status qwi_request_prepare_text(struct qw_engine *engine, struct qw_request *req);
/* Reset the request's output text and stop-string state for a fresh run
 * and make its detokenizer over tok (nothing more when tok is NULL: no
 * text). Called by qwi_request_prepare_text; tests call it directly.
 * QW_ERR_OUT_OF_MEMORY. */
struct qwi_tokenizer;
qw_status qwi_request_text_start(struct qw_request *req, const struct qwi_tokenizer *tok);
/* At each accepted token, before the stop conditions are decided (step
 * thread): detokenise it into the request's text and run the stop-string
 * matcher over the new bytes, stopping only when may_stop (QW_REQ_MIN_TOKENS
 * reached). Returns the index of the stop string that this token completed
 * (and records it as the request's stop_string_hit, with the text cut
 * there), or -1. No-op (-1) without a tokenizer. */
int32_t qwi_request_text_token(struct qw_request *req, int32_t token, bool may_stop);
/* At every event of the request (step thread): set its text piece to the
 * text released since the last event: all but the bytes that may still
 * start a stop string, or, when final, everything up to the stop string's
 * cut (or all, flushing the detokenizer, when no stop string matched). */
void qwi_request_text_event(struct qw_request *req, bool final);
/* stop_strings.c: copy src's stop strings and QW_REQ_INCLUDE_STOP_STR_IN_
 * OUTPUT into dst (replacing dst's list), for requests made from another
 * (n samples). Run-time state is not copied: submit makes it. On failure
 * (QW_ERR_OUT_OF_MEMORY) dst is unchanged. */
qw_status qwi_stop_strings_copy(struct qw_request *dst, const struct qw_request *src);
/* Free the text state (from qwi_request_unref). */
void qwi_request_text_free(struct qw_request *req);

/* logit_bias.c. At submit: QW_ERR_TOKEN_OUT_OF_RANGE (message naming the
 * entry) when a logit bias id is outside [0, vocab); nothing changes. */
qw_status qwi_request_check_logit_bias(const struct qw_request *req, int32_t vocab);
/* The sampling parameters of the request's next sampled row: its options,
 * EOS and stop ids banned while fewer than min_tokens were generated, and
 * the penalty fields pointing at its options and at its sequence's prompt
 * and output tokens (valid until the sequence's tokens grow). The one
 * definition both the step's plan and the first tokens of QW_REQ_N samples
 * use, so a sample draws exactly what a separate request would. */
void qwi_request_row_sampling(const struct qw_request *req, qwi_sampling *sp);

#endif
