/*
 * forward_check.c - the engine's check of a backend's outputs (see
 * forward_check.h).
 */
#include "forward_check.h"

#include "common.h"

#define UNWRITTEN (-1)   /* armed token: no target, sample or top id is negative */

/* The rows of sequence i of p that ask for prompt logprobs, as the engine
 * marked them: prompt_target[r] >= 0. */
static bool wants_prompt(const qwi_plan *p, int32_t i) {
    return p->prompt_logprobs_n && p->prompt_logprobs_n[i] >= 0 && p->prompt_logprobs_out;
}

static bool wants_sampled(const qwi_plan *p, int32_t i) {
    return p->logprobs_n && p->logprobs_n[i] >= 0 && p->logprobs_out && p->do_sample[i];
}

void qwi_forward_check_arm(const qwi_plan *p) {
    for (int32_t i = 0; i < p->num_seqs; i++) {
        if (wants_sampled(p, i)) p->logprobs_out[(size_t)i * QWI_LP_STRIDE].token = UNWRITTEN;
        if (!wants_prompt(p, i)) continue;
        for (int32_t r = p->query_start[i]; r < p->query_start[i + 1]; r++)
            if (p->prompt_target[r] >= 0) p->prompt_logprobs_out[(size_t)r * QWI_LP_STRIDE].token = UNWRITTEN;
    }
}

/* One logprobs row: out[0] for target, then min(n, vocab) top pairs. what
 * and index name it in the message. A NaN logprob is allowed: a row of NaN
 * logits gives NaN logprobs by qwi_logprobs_row's definition. */
static qw_status check_row(const qw_logprob *out, int32_t target, int32_t n, int32_t vocab, const char *backend,
                           const char *what, int32_t index) {
    if (out[0].token != target)
        return qwi_fail(QW_ERR_INTERNAL, "backend %s: the logprobs of %s %d were not computed (first pair names "
                        "token %d, want %d)", backend, what, index, out[0].token, target);
    const int32_t top = QWI_MIN(n, vocab);
    for (int32_t j = 0; j <= top; j++) {
        if (j > 0 && (out[j].token < 0 || out[j].token >= vocab))
            return qwi_fail(QW_ERR_INTERNAL, "backend %s: top logprob %d of %s %d names token %d, outside [0, %d)",
                            backend, j, what, index, out[j].token, vocab);
        if (out[j].logprob > 0)
            return qwi_fail(QW_ERR_INTERNAL, "backend %s: logprob %g of %s %d (pair %d) is above 0", backend,
                            (double)out[j].logprob, what, index, j);
    }
    return QW_OK;
}

qw_status qwi_forward_check(const qwi_plan *p, int32_t vocab, const char *backend) {
    if (!backend) backend = "?";
    for (int32_t i = 0; i < p->num_seqs; i++) {
        if (p->do_sample[i] && (p->sampled[i] < 0 || p->sampled[i] >= vocab))
            return qwi_fail(QW_ERR_INTERNAL, "backend %s: sequence %d of the step sampled token %d, outside [0, %d)",
                            backend, i, p->sampled[i], vocab);
        qw_status st;
        if (wants_sampled(p, i) &&
            (st = check_row(p->logprobs_out + (size_t)i * QWI_LP_STRIDE, p->sampled[i], p->logprobs_n[i], vocab,
                            backend, "the sampled row of sequence", i)) != QW_OK)
            return st;
        if (!wants_prompt(p, i)) continue;
        for (int32_t r = p->query_start[i]; r < p->query_start[i + 1]; r++)
            if (p->prompt_target[r] >= 0 &&
                (st = check_row(p->prompt_logprobs_out + (size_t)r * QWI_LP_STRIDE, p->prompt_target[r],
                                p->prompt_logprobs_n[i], vocab, backend, "prompt row", r)) != QW_OK)
                return st;
    }
    return QW_OK;
}
