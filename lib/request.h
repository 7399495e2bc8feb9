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
#include "sample.h"
#include "scheduler.h"

struct qw_engine;

struct qw_request {
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

    /* text prompts and streamed text (request_text.c): prompt_text is set by
     * qw_request_set_prompt_text / qw_request_set_chat and encoded into
     * prompt at submit; keep_special is QW_REQ_SKIP_SPECIAL_TOKENS == 0 */
    char *prompt_text;
    size_t prompt_text_len;
    bool has_prompt_text, prompt_is_chat, keep_special;
    struct qwi_detok *detok;     /* made at submit when the engine has a tokenizer */
    char *text_piece;            /* the text of the latest event          */
    size_t text_len, text_cap;

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
};

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
 * the stop tokens of a chat), and make the request's detokenizer.
 * Submitting thread; reads only immutable engine fields. */
qw_status qwi_request_prepare_text(struct qw_engine *engine, struct qw_request *req);
/* At every event of the request (step thread): set its text piece to what
 * token (or -1 for none) completes, plus the held-back rest when final. */
void qwi_request_text_event(struct qw_request *req, int32_t token, bool final);
/* Free the text state (from qwi_request_unref). */
void qwi_request_text_free(struct qw_request *req);

#endif
