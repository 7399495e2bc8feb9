/*
 * logprobs_api.c - reading a request's logprobs (qw_request_get_logprobs,
 * qw_request_get_prompt_logprobs); the values are made by logprobs.c.
 */
#include <string.h>

#include "request.h"

/* Copy one stored row of 1 + k pairs out by the getters' convention. */
static void copy_row(const qw_logprob *row, int32_t k, qw_logprob *first, qw_logprob *top, size_t cap,
                     size_t *n_top) {
    if (first) *first = row[0];
    size_t n = (size_t)k < cap ? (size_t)k : cap;
    if (n) memcpy(top, row + 1, n * sizeof *top);
    if (n_top) *n_top = (size_t)k;
}

QW_API qw_status qw_request_get_logprobs(const qw_request *req, size_t index, qw_logprob *sampled,
                                         qw_logprob *top, size_t cap, size_t *n_top) {
    QWI_ERR_SCOPE(req);
    if (!req) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_request_get_logprobs: request is NULL");
    if (cap > 0 && !top)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_request_get_logprobs: top is NULL with cap %zu", cap);
    const qwi_req_logprobs *lp = &req->lp;
    if (!lp->gen)
        return qwi_fail(QW_ERR_INVALID_STATE,
                        "qw_request_get_logprobs: request %llu was not submitted with QW_REQ_LOGPROBS >= 0",
                        (unsigned long long)req->id);
    size_t generated = req->seq.tokens ? (size_t)(req->seq.num_tokens - req->seq.num_prompt_tokens) : 0;
    if (index >= generated)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT,
                        "qw_request_get_logprobs: index %zu is out of range: request %llu has generated %zu tokens",
                        index, (unsigned long long)req->id, generated);
    copy_row(lp->gen + index * (size_t)(1 + lp->k), lp->k, sampled, top, cap, n_top);
    return QW_OK;
}

QW_API qw_status qw_request_get_prompt_logprobs(const qw_request *req, size_t index,
                                                qw_logprob *actual, qw_logprob *top, size_t cap,
                                                size_t *n_top) {
    QWI_ERR_SCOPE(req);
    if (!req) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_request_get_prompt_logprobs: request is NULL");
    if (cap > 0 && !top)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_request_get_prompt_logprobs: top is NULL with cap %zu", cap);
    const qwi_req_logprobs *lp = &req->lp;
    if (!lp->prompt)
        return qwi_fail(QW_ERR_INVALID_STATE,
                        "qw_request_get_prompt_logprobs: request %llu was not submitted with QW_REQ_PROMPT_LOGPROBS >= 0",
                        (unsigned long long)req->id);
    if (index == 0)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT,
                        "qw_request_get_prompt_logprobs: index 0: the first prompt token has no logprob "
                        "(nothing precedes it); valid indices are 1..%d",
                        lp->num_prompt - 1);
    if (index >= (size_t)lp->num_prompt)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT,
                        "qw_request_get_prompt_logprobs: index %zu is out of range: the prompt has %d tokens",
                        index, lp->num_prompt);
    if (index >= (size_t)lp->prompt_done)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT,
                        "qw_request_get_prompt_logprobs: prompt token %zu of request %llu is not computed yet",
                        index, (unsigned long long)req->id);
    copy_row(lp->prompt + index * (size_t)(1 + lp->prompt_k), lp->prompt_k, actual, top, cap, n_top);
    return QW_OK;
}
