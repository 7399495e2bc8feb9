/*
 * parallel_samples.c - n samples from one prompt (QW_REQ_N): the child
 * requests, the copy of a request's options, the KV fork and the first
 * token of a child; see parallel_samples.h.
 */
#include <stdlib.h>
#include <string.h>

#include "parallel_samples.h"
#include "session.h"

/* Copy n elements of size sz into a fresh array (NULL when n == 0). */
static qw_status dup_array(void **dst, const void *src, int32_t n, size_t sz) {
    *dst = NULL;
    if (n <= 0 || !src) return QW_OK;
    *dst = malloc((size_t)n * sz);
    if (!*dst) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "qw_engine_submit: copying a request's options for QW_REQ_N");
    memcpy(*dst, src, (size_t)n * sz);
    return QW_OK;
}

qw_status qwi_request_clone_options(qw_request *dst, const qw_request *src) {
    /* Every option a setter of request.c, request_text.c, logit_bias.c,
     * logprobs.c or stop_strings.c writes, except the ones a sample never has: QW_REQ_N
     * itself, the session (refused with n > 1) and the text prompt (the
     * ids it was encoded to are the prompt, encoded once). */
    dst->max_tokens = src->max_tokens;
    dst->min_tokens = src->min_tokens;
    dst->temperature = src->temperature;
    dst->top_p = src->top_p;
    dst->min_p = src->min_p;
    dst->top_k = src->top_k;
    dst->has_seed = src->has_seed;
    dst->seed = src->seed;
    dst->ignore_eos = src->ignore_eos;
    dst->priority = src->priority;
    dst->max_queue_ms = src->max_queue_ms;
    dst->deadline_ms = src->deadline_ms;
    dst->cache_salt = src->cache_salt;
    dst->user_data = src->user_data;
    dst->logits_fn = src->logits_fn;
    dst->logits_user = src->logits_user;
    dst->keep_special = src->keep_special;
    dst->repetition_penalty = src->repetition_penalty;
    dst->presence_penalty = src->presence_penalty;
    dst->frequency_penalty = src->frequency_penalty;
    qwi_logprobs_copy_options(&dst->lp, &src->lp);

    void *p;
    qw_status st;
    if ((st = dup_array(&p, src->prompt, src->num_prompt, sizeof(int32_t))) != QW_OK) return st;
    dst->prompt = p;
    dst->num_prompt = src->num_prompt;
    if ((st = dup_array(&p, src->stop_tokens, src->num_stop, sizeof(int32_t))) != QW_OK) return st;
    dst->stop_tokens = p;
    dst->num_stop = src->num_stop;
    if ((st = dup_array(&p, src->bias_ids, src->num_bias, sizeof(int32_t))) != QW_OK) return st;
    dst->bias_ids = p;
    if ((st = dup_array(&p, src->bias_values, src->num_bias, sizeof(float))) != QW_OK) return st;
    dst->bias_values = p;
    dst->num_bias = src->num_bias;
    /* stop strings and QW_REQ_INCLUDE_STOP_STR_IN_OUTPUT */
    return qwi_stop_strings_copy(dst, src);
}

qw_status qwi_samples_check(const qw_request *r, int64_t max_waiting) {
    if (r->num_samples <= 1) return QW_OK;
    if (r->session)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT,
                        "qw_engine_submit: QW_REQ_N = %d with a session (qw_request_set_session): a session "
                        "continues one sequence, so it takes QW_REQ_N = 1",
                        r->num_samples);
    if (max_waiting > 0 && r->num_samples > max_waiting)
        return qwi_fail(QW_ERR_QUEUE_FULL,
                        "qw_engine_submit: QW_REQ_N = %d samples count as %d waiting requests, more than "
                        "QW_OPT_MAX_WAITING_REQUESTS (%lld) allows at all",
                        r->num_samples, r->num_samples, (long long)max_waiting);
    return QW_OK;
}

void qwi_samples_free(qw_request *r) {
    if (!r->samples) return;
    for (int32_t i = 0; i < r->num_samples - 1; i++)
        if (r->samples[i]) qwi_request_unref(r->samples[i]);
    free(r->samples);
    r->samples = NULL;
}

qw_status qwi_samples_create(qw_request *r) {
    qwi_samples_free(r);
    if (r->num_samples <= 1) return QW_OK;
    r->samples = calloc((size_t)r->num_samples - 1, sizeof *r->samples);
    if (!r->samples) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "qw_engine_submit: %d samples", r->num_samples);
    for (int32_t i = 1; i < r->num_samples; i++) {
        qw_request *c;
        qw_status st = qw_request_create(&c);
        if (st == QW_OK) {
            r->samples[i - 1] = c;
            st = qwi_request_clone_options(c, r);
        }
        if (st != QW_OK) {
            qwi_samples_free(r);
            return st;
        }
        /* Events of every sample carry the submitted request's id. */
        c->id = r->id;
        c->parent = r;
        c->sample_index = (uint32_t)i;
        /* Made submitted: no setter and no second submit applies to it. */
        atomic_store(&c->submit_claimed, true);
    }
    return QW_OK;
}

bool qwi_samples_any_unfinished(qw_request *r) {
    if (!r->samples) return false;
    for (int32_t i = 0; i < r->num_samples - 1; i++)
        if (atomic_load(&r->samples[i]->state) != QW_STATE_FINISHED) return true;
    return false;
}

void qwi_samples_fork_kv(qwi_kv_pool *kv, qwi_backend *be, const qwi_seq *src, qwi_seq *dst) {
    const int32_t bs = kv->block_size;
    const int32_t computed = src->num_computed_tokens;
    const qwi_block_table *s = &src->table;
    qwi_block_table *t = &dst->table;
    /* Full blocks are never written again (kv.h): share them. */
    int32_t full = QWI_MIN(computed / bs, s->num_blocks);
    for (int32_t i = 0; i < full; i++) {
        qwi_kv_block_ref(kv, s->blocks[i]);
        t->blocks[t->num_blocks++] = s->blocks[i];
    }
    t->num_hashed = QWI_MIN(s->num_hashed, full);
    t->last_key = t->num_hashed == s->num_hashed ? s->last_key : 0;
    if (t->num_hashed != s->num_hashed) t->num_hashed = 0;
    dst->num_computed_tokens = full * bs;

    /* Both sequences append to the partial last block: the child gets its
     * own copy when a block is available; otherwise it recomputes those
     * tokens at admission (always correct, as after a preemption). */
    if (computed - full * bs > 0 && s->num_blocks > full &&
        qwi_kv_can_reserve(kv, t, (int64_t)(full + 1) * bs) &&
        qwi_kv_reserve(kv, t, (int64_t)(full + 1) * bs) == QW_OK) {
        int32_t from = s->blocks[full], to = t->blocks[full];
        if (be->ops->copy_blocks(be, &from, &to, 1) == QW_OK) {
            dst->num_computed_tokens = computed;
        } else {
            t->num_blocks--;
            qwi_block_table one = {.blocks = &to, .num_blocks = 1, .capacity = 1};
            qwi_kv_release(kv, &one);
        }
    }
}

int32_t qwi_samples_first_token(qw_request *c, const qw_request *parent, const float *logits, int32_t vocab,
                                qwi_sample_scratch *ss) {
    qwi_sampling sp;
    qwi_request_row_sampling(c, &sp);
    int32_t tok = qwi_sample(logits, vocab, &sp, c->seq.num_tokens, ss);

    /* Logprobs as the backend would reduce this row for c (logprobs.h):
     * generated token 0, and the prompt's, which are the parent's. */
    qwi_req_logprobs *lp = &c->lp;
    if (lp->n >= 0 && lp->gen_cap > 0) qwi_logprobs_row(logits, vocab, tok, lp->k, lp->gen);
    const qwi_req_logprobs *plp = &parent->lp;
    if (lp->prompt && plp->prompt && lp->num_prompt == plp->num_prompt && lp->prompt_k == plp->prompt_k) {
        memcpy(lp->prompt, plp->prompt, (size_t)lp->num_prompt * (size_t)(1 + lp->prompt_k) * sizeof(qw_logprob));
        lp->prompt_done = plp->prompt_done;
    }
    return tok;
}

void qwi_samples_abandon(qw_request *r) {
    if (!r->samples) return;
    for (int32_t i = 0; i < r->num_samples - 1; i++) {
        qw_request *c = r->samples[i];
        atomic_store(&c->finish_reason, QW_FINISH_CANCELLED);
        atomic_store(&c->state, QW_STATE_FINISHED);
        qwi_request_unref(c);   /* the engine's, taken at submit */
    }
}

QW_API qw_status qw_request_get_sample(qw_request *req, uint32_t index, qw_request **out) {
    QWI_ERR_SCOPE(req);
    if (out) *out = NULL;
    if (!req || !out) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_request_get_sample: request or out is NULL");
    int32_t n = qwi_samples_count(req);
    if (index >= (uint32_t)n)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT,
                        "qw_request_get_sample: index %u is out of range: request %llu has %d sample%s (QW_REQ_N)",
                        index, (unsigned long long)req->id, n, n == 1 ? "" : "s");
    if (index == 0) {
        *out = req;
        return QW_OK;
    }
    if (!req->samples)
        return qwi_fail(QW_ERR_INVALID_STATE,
                        "qw_request_get_sample: request %llu is not submitted; its samples are made at submit",
                        (unsigned long long)req->id);
    *out = req->samples[index - 1];
    return QW_OK;
}
