/*
 * logprobs.c - log-probabilities: the row reduction every backend follows,
 * the plan marks, and the request's result arrays; see logprobs.h.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "logprobs.h"
#include "sample_exp.h"

void qwi_logprobs_init(qwi_req_logprobs *lp) {
    memset(lp, 0, sizeof *lp);
    lp->n = lp->prompt_n = -1;
}

void qwi_logprobs_copy_options(qwi_req_logprobs *dst, const qwi_req_logprobs *src) {
    dst->n = src->n;
    dst->prompt_n = src->prompt_n;
}

qw_status qwi_logprobs_set(qwi_req_logprobs *lp, bool prompt, int64_t v) {
    if (v < -1 || v > QW_MAX_LOGPROBS)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "%s must be -1 (off) or 0..%d, got %lld",
                        prompt ? "QW_REQ_PROMPT_LOGPROBS" : "QW_REQ_LOGPROBS", QW_MAX_LOGPROBS,
                        (long long)v);
    if (prompt) lp->prompt_n = (int32_t)v;
    else lp->n = (int32_t)v;
    return QW_OK;
}

void qwi_logprobs_free(qwi_req_logprobs *lp) {
    free(lp->gen);
    free(lp->prompt);
    lp->gen = lp->prompt = NULL;
    lp->gen_cap = lp->num_prompt = lp->prompt_done = 0;
}

qw_status qwi_logprobs_prepare(qwi_req_logprobs *lp, int32_t vocab, int32_t prompt_base,
                               int32_t num_prompt, int32_t gen_cap) {
    qwi_logprobs_free(lp);
    lp->k = QWI_MIN(lp->n, vocab);
    lp->prompt_k = QWI_MIN(lp->prompt_n, vocab);
    lp->prompt_base = prompt_base;
    if (lp->n >= 0) {
        lp->gen = malloc((size_t)gen_cap * (size_t)(1 + lp->k) * sizeof(qw_logprob));
        if (!lp->gen) goto oom;
        lp->gen_cap = gen_cap;
    }
    if (lp->prompt_n >= 0) {
        lp->prompt = calloc((size_t)num_prompt, (size_t)(1 + lp->prompt_k) * sizeof(qw_logprob));
        if (!lp->prompt) goto oom;
        lp->num_prompt = num_prompt;
        lp->prompt_done = 1;   /* token 0 never has one */
    }
    return QW_OK;
oom:
    qwi_logprobs_free(lp);
    return qwi_fail(QW_ERR_OUT_OF_MEMORY, "qw_engine_submit: out of memory for the logprobs of %d + %d tokens",
                    num_prompt, gen_cap);
}

qw_status qwi_logprobs_grow(qwi_req_logprobs *lp, int32_t gen_cap) {
    if (lp->n < 0 || gen_cap <= lp->gen_cap) return QW_OK;
    qw_logprob *g = realloc(lp->gen, (size_t)gen_cap * (size_t)(1 + lp->k) * sizeof(qw_logprob));
    if (!g) return QW_ERR_OUT_OF_MEMORY;
    lp->gen = g;
    lp->gen_cap = gen_cap;
    return QW_OK;
}

/* a ranks before b: higher logit, then lower id. */
static inline bool ranks_before(float va, int32_t ia, float vb, int32_t ib) {
    return va > vb || (va == vb && ia < ib);
}

/* logits per vector-exp call in qwi_logprobs_row: its output stays in L1 */
#define LSE_CHUNK 256

void qwi_logprobs_row(const float *x, int32_t V, int32_t target, int32_t k, qw_logprob *out) {
    k = QWI_MIN(k, V);
    /* Top k by insertion into a sorted list of at most QW_MAX_LOGPROBS:
     * ids come in increasing order, so an equal logit never displaces an
     * earlier (lower) id. Most ids fail the first comparison. */
    float tv[QW_MAX_LOGPROBS];
    int32_t ti[QW_MAX_LOGPROBS];
    int32_t m = 0;
    float mx = -INFINITY;
    bool nan = false;
    for (int32_t i = 0; i < V; i++) {
        float v = x[i];
        if (v > mx) mx = v;
        nan |= v != v;
        if (k == 0 || (m == k && !ranks_before(v, i, tv[k - 1], ti[k - 1]))) continue;
        int32_t j = m < k ? m++ : k - 1;
        while (j > 0 && ranks_before(v, i, tv[j - 1], ti[j - 1])) {
            tv[j] = tv[j - 1];
            ti[j] = ti[j - 1];
            j--;
        }
        tv[j] = v;
        ti[j] = i;
    }
    /* Max-subtracted: every term is in (0, 1], the sum in [1, V]; double
     * keeps the error of 151936 terms far below the 1e-4 promised. The
     * terms are the sampler's vectorised exp in double (sample_exp.h),
     * summed in id order into four partial sums (a fixed order: the same
     * row gives the same bits whatever the batch); a NaN logit makes the
     * row's values NaN, as a plain sum of exp would. */
    double sum = 0;
    if (isfinite(mx) && !nan) {
        double w[LSE_CHUNK], acc[4] = { 0, 0, 0, 0 };
        for (int32_t i0 = 0; i0 < V; i0 += LSE_CHUNK) {
            const int32_t c = QWI_MIN((int32_t)LSE_CHUNK, V - i0);
            qwi_sample_weights(x + i0, c, (double)mx, 1.0, w);
            for (int32_t j = 0; j < c; j++) acc[j & 3] += w[j];
        }
        sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    }
    double lse = nan ? (double)NAN : isfinite(mx) ? (double)mx + log(sum) : (double)mx;
    out[0].token = target;
    out[0].logprob = (float)((double)x[target] - lse);
    for (int32_t j = 0; j < m; j++) {
        out[1 + j].token = ti[j];
        out[1 + j].logprob = (float)((double)tv[j] - lse);
    }
}

/* First mark of a step: every entry and row starts unmarked. */
static qw_status plan_enable(qwi_plan_buffers *b) {
    qwi_plan *p = &b->plan;
    if (p->logprobs_n) return QW_OK;
    if (!b->lp_n) {
        size_t ns = (size_t)b->max_seqs, nt = (size_t)b->max_tokens;
        b->lp_n = malloc(ns);
        b->plp_n = malloc(ns);
        b->plp_target = malloc(nt * sizeof(int32_t));
        b->lp_out = malloc(ns * QWI_LP_STRIDE * sizeof(qw_logprob));
        if (!b->lp_n || !b->plp_n || !b->plp_target || !b->lp_out) {
            free(b->lp_n);
            free(b->plp_n);
            free(b->plp_target);
            free(b->lp_out);
            b->lp_n = b->plp_n = NULL;
            b->plp_target = NULL;
            b->lp_out = NULL;
            return qwi_fail(QW_ERR_OUT_OF_MEMORY, "logprobs buffers for %d sequences", b->max_seqs);
        }
    }
    memset(b->lp_n, -1, (size_t)p->num_seqs);
    memset(b->plp_n, -1, (size_t)p->num_seqs);
    for (int32_t r = 0; r < p->num_tokens; r++) b->plp_target[r] = -1;
    p->logprobs_n = b->lp_n;
    p->logprobs_out = b->lp_out;
    p->prompt_logprobs_n = b->plp_n;
    p->prompt_target = b->plp_target;
    p->prompt_logprobs_out = b->plp_out;   /* NULL until a prompt row is marked */
    return QW_OK;
}

qw_status qwi_logprobs_plan_seq(qwi_plan_buffers *b, int32_t i, const qwi_req_logprobs *lp,
                                const qwi_seq *seq, int32_t num_new) {
    qwi_plan *p = &b->plan;
    const int32_t start = seq->num_computed_tokens;
    /* Rows at positions prompt_base .. num_prompt_tokens-2 predict a prompt
     * token of this request (j = pos + 1 - prompt_base >= 1). */
    const int32_t lo = QWI_MAX(start, lp->prompt_base);
    const int32_t hi = QWI_MIN(start + num_new, seq->num_prompt_tokens - 1);
    bool want_sampled = lp->n >= 0 && p->do_sample[i];
    bool want_prompt = lp->prompt_n >= 0 && lo < hi;
    if (!want_sampled && !want_prompt) return QW_OK;
    qw_status st = plan_enable(b);
    if (st != QW_OK) return st;
    if (want_prompt && !b->plp_out) {
        b->plp_out = malloc((size_t)b->max_tokens * QWI_LP_STRIDE * sizeof(qw_logprob));
        if (!b->plp_out)
            return qwi_fail(QW_ERR_OUT_OF_MEMORY, "prompt logprobs buffer for %d tokens", b->max_tokens);
        p->prompt_logprobs_out = b->plp_out;
    }
    if (want_sampled) b->lp_n[i] = (int8_t)lp->n;
    if (want_prompt) {
        b->plp_n[i] = (int8_t)lp->prompt_n;
        int32_t row0 = b->query_start[i] - start;   /* row of position 0 */
        for (int32_t pos = lo; pos < hi; pos++) b->plp_target[row0 + pos] = seq->tokens[pos + 1];
    }
    return QW_OK;
}

void qwi_logprobs_store_prompt(qwi_req_logprobs *lp, const qwi_plan *p, int32_t i) {
    if (!p->prompt_logprobs_n || p->prompt_logprobs_n[i] < 0) return;
    const size_t w = (size_t)(1 + lp->prompt_k);
    for (int32_t r = p->query_start[i]; r < p->query_start[i + 1]; r++) {
        if (p->prompt_target[r] < 0) continue;
        int32_t j = p->positions[r] + 1 - lp->prompt_base;
        memcpy(lp->prompt + (size_t)j * w, p->prompt_logprobs_out + (size_t)r * QWI_LP_STRIDE,
               w * sizeof(qw_logprob));
        if (j + 1 > lp->prompt_done) lp->prompt_done = j + 1;
    }
}

void qwi_logprobs_store_sampled(qwi_req_logprobs *lp, const qwi_plan *p, int32_t i, int32_t index) {
    if (!p->logprobs_n || p->logprobs_n[i] < 0 || index >= lp->gen_cap) return;
    const size_t w = (size_t)(1 + lp->k);
    memcpy(lp->gen + (size_t)index * w, p->logprobs_out + (size_t)i * QWI_LP_STRIDE, w * sizeof(qw_logprob));
}
