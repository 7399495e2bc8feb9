/*
 * logprobs.h - log-probabilities of generated and prompt tokens
 * (QW_REQ_LOGPROBS, QW_REQ_PROMPT_LOGPROBS; definition in qwinfer.h).
 *
 * Split of the work: a backend reduces each wanted logits row, where the
 * logits are, to QWI_LP_STRIDE pairs (qwi_logprobs_row on the CPU,
 * cuda/logprobs.cu on a GPU); the engine describes the wanted rows in the
 * plan (qwi_logprobs_plan_seq) and copies the pairs into the request
 * (qwi_logprobs_store_*), whose arrays are sized at submit and grow with its
 * token array, so storing never allocates. Nothing is allocated or computed
 * for requests that do not ask.
 */
#ifndef QWI_LOGPROBS_H
#define QWI_LOGPROBS_H

#include "common.h"
#include "plan.h"

/* A request's logprob options and results. Options: n and prompt_n (-1 =
 * off), the only fields a copy of the request's options needs
 * (qwi_logprobs_copy_options); the rest is made at submit. */
typedef struct qwi_req_logprobs {
    int32_t n, prompt_n;         /* QW_REQ_LOGPROBS / QW_REQ_PROMPT_LOGPROBS  */
    int32_t k, prompt_k;         /* top entries kept: min(n, vocab) etc.      */
    qw_logprob *gen;             /* [gen_cap][1 + k]: generated token i       */
    int32_t gen_cap;
    qw_logprob *prompt;          /* [num_prompt][1 + prompt_k]: prompt token j
                                    (entry 0 unused)                          */
    int32_t num_prompt;          /* the request's own prompt tokens           */
    int32_t prompt_base;         /* sequence position of prompt token 0 (the
                                    session history before it)               */
    int32_t prompt_done;         /* prompt tokens 1..prompt_done-1 are filled  */
} qwi_req_logprobs;

/* Defaults of a new request: both off. */
void qwi_logprobs_init(qwi_req_logprobs *lp);

/* Copy the options (n, prompt_n) of src into dst, e.g. for a child request
 * of parallel sampling; dst's results are untouched. */
void qwi_logprobs_copy_options(qwi_req_logprobs *dst, const qwi_req_logprobs *src);

/* Set QW_REQ_LOGPROBS (prompt false) or QW_REQ_PROMPT_LOGPROBS (prompt
 * true) to v in -1..QW_MAX_LOGPROBS; QW_ERR_INVALID_ARGUMENT naming the
 * option otherwise, nothing changed. */
qw_status qwi_logprobs_set(qwi_req_logprobs *lp, bool prompt, int64_t v);

/* At submit: make the result arrays of an enabled option: room for gen_cap
 * generated tokens and for the num_prompt prompt tokens that start at
 * sequence position prompt_base. Frees earlier results. On failure
 * QW_ERR_OUT_OF_MEMORY with a message, and lp holds no arrays. */
qw_status qwi_logprobs_prepare(qwi_req_logprobs *lp, int32_t vocab, int32_t prompt_base,
                               int32_t num_prompt, int32_t gen_cap);

/* Grow the generated-token array to gen_cap tokens (no-op when off or
 * already as large). QW_ERR_OUT_OF_MEMORY (no message) leaves it as it was. */
qw_status qwi_logprobs_grow(qwi_req_logprobs *lp, int32_t gen_cap);

/* Free the result arrays (options stay). */
void qwi_logprobs_free(qwi_req_logprobs *lp);

/* Reduce one logits row: out[0] = (target, logprob of target), out[1..k) =
 * the top min(k, vocab) tokens by descending logprob, lower id first on
 * ties. Log-sum-exp max-subtracted, accumulated in double. target must be
 * in [0, vocab). The reference every backend follows. */
void qwi_logprobs_row(const float *logits, int32_t vocab, int32_t target, int32_t k,
                      qw_logprob *out);

/* Plan hook, after qwi_plan_build, for entry i (seq with num_new rows this
 * step): mark its sampled row and its prompt rows for reduction as lp asks.
 * Allocates the plan's pair buffers on first need. QW_ERR_OUT_OF_MEMORY
 * (message set) leaves the entry unmarked. */
qw_status qwi_logprobs_plan_seq(qwi_plan_buffers *b, int32_t i, const qwi_req_logprobs *lp,
                                const qwi_seq *seq, int32_t num_new);

/* After a successful forward: copy entry i's prompt pairs into lp. */
void qwi_logprobs_store_prompt(qwi_req_logprobs *lp, const qwi_plan *p, int32_t i);

/* After a successful forward, before the sampled token is appended: copy
 * entry i's sampled pairs into lp as generated token `index` (< gen_cap,
 * which the token array's growth guarantees). */
void qwi_logprobs_store_sampled(qwi_req_logprobs *lp, const qwi_plan *p, int32_t i, int32_t index);

#endif
