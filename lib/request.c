/*
 * request.c - qw_request: creation, options, reading results, references.
 * What happens to a request inside the engine is in engine.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <time.h>

#include "request.h"
#include "session.h"

double qwi_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static atomic_uint_fast64_t next_request_id = 1;

QW_API qw_status qw_request_create(qw_request **out) {
    if (!out) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_request_create: out is NULL");
    *out = NULL;
    qw_request *r = calloc(1, sizeof *r);
    if (!r) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "qw_request_create: out of memory");
    atomic_init(&r->refcount, 1);
    atomic_init(&r->state, QW_STATE_CREATED);
    atomic_init(&r->finish_reason, QW_FINISH_NONE);
    atomic_init(&r->caller_released, false);
    atomic_init(&r->submit_claimed, false);
    r->id = atomic_fetch_add(&next_request_id, 1);
    r->max_tokens = -1;
    r->temperature = 1.0;
    r->top_p = 1.0;
    r->min_p = 0.0;
    r->repetition_penalty = 1.0;
    qwi_logprobs_init(&r->lp);
    r->t_arrival = r->t_scheduled = r->t_first_token = r->t_finished = -1;
    *out = r;
    return QW_OK;
}

void qwi_request_ref(qw_request *req) { atomic_fetch_add(&req->refcount, 1); }

void qwi_request_unref(qw_request *req) {
    if (atomic_fetch_sub(&req->refcount, 1) != 1) return;
    qwi_samples_free(req);
    free(req->prompt);
    qwi_request_text_free(req);
    free(req->stop_tokens);
    free(req->banned);
    free(req->bias_ids);
    free(req->bias_values);
    qwi_logprobs_free(&req->lp);
    free(req->seq.tokens);
    qwi_block_table_destroy(&req->seq.table);
    if (req->session) qwi_session_unref(req->session);   /* qw_request_set_session's */
    qwi_err_slot_free(&req->err);
    free(req);
}

QW_API qw_status qw_request_release(qw_request *req) {
    if (!req) return QW_OK;
    if (req->parent)   /* its one reference is the submitted request's */
        return qwi_fail(QW_ERR_INVALID_STATE, "qw_request_release: request %llu's sample %u belongs to the "
                        "submitted request (QW_REQ_N): release that one", (unsigned long long)req->id,
                        req->sample_index);
    bool expected = false;
    if (!atomic_compare_exchange_strong(&req->caller_released, &expected, true))
        return qwi_fail(QW_ERR_INVALID_STATE, "qw_request_release: request %llu released twice",
                        (unsigned long long)req->id);
    qwi_request_unref(req);
    return QW_OK;
}

/* Options may change only before submission: after it, the engine reads
 * them from the step thread without locks. */
static qw_status check_mutable(const qw_request *req, const char *fn) {
    if (!req) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "%s: request is NULL", fn);
    if (atomic_load(&((qw_request *)req)->submit_claimed))
        return qwi_fail(QW_ERR_INVALID_STATE, "%s: request %llu is already submitted", fn,
                        (unsigned long long)req->id);
    return QW_OK;
}

/* Copy n ids into a fresh array (NULL when n == 0). */
static qw_status copy_ids(const int32_t *ids, size_t n, int32_t **dst, int32_t *dst_n,
                          const char *fn) {
    if (n > 0 && !ids) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "%s: ids is NULL with n = %zu", fn, n);
    if (n > INT32_MAX / 2) return qwi_fail(QW_ERR_TOO_LONG, "%s: %zu ids is too many", fn, n);
    int32_t *copy = NULL;
    if (n > 0) {
        copy = malloc(n * sizeof *copy);
        if (!copy) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "%s: cannot copy %zu ids", fn, n);
        memcpy(copy, ids, n * sizeof *copy);
    }
    free(*dst);
    *dst = copy;
    *dst_n = (int32_t)n;
    return QW_OK;
}

QW_API qw_status qw_request_set_prompt(qw_request *req, const int32_t *ids, size_t n) {
    QWI_ERR_SCOPE(req);
    qw_status st = check_mutable(req, "qw_request_set_prompt");
    if (st != QW_OK) return st;
    st = copy_ids(ids, n, &req->prompt, &req->num_prompt, "qw_request_set_prompt");
    if (st == QW_OK) req->has_prompt_text = false;   /* ids replace a text prompt */
    return st;
}

QW_API qw_status qw_request_set_stop_tokens(qw_request *req, const int32_t *ids, size_t n) {
    QWI_ERR_SCOPE(req);
    qw_status st = check_mutable(req, "qw_request_set_stop_tokens");
    if (st != QW_OK) return st;
    return copy_ids(ids, n, &req->stop_tokens, &req->num_stop, "qw_request_set_stop_tokens");
}

QW_API qw_status qw_request_set_int(qw_request *req, qw_request_option key, int64_t v) {
    QWI_ERR_SCOPE(req);
    qw_status st = check_mutable(req, "qw_request_set_int");
    if (st != QW_OK) return st;
    switch (key) {
    case QW_REQ_MAX_TOKENS:
        if (v < 1 || v > INT32_MAX / 2)
            return qwi_fail(QW_ERR_INVALID_ARGUMENT, "QW_REQ_MAX_TOKENS must be >= 1, got %lld", (long long)v);
        req->max_tokens = v;
        return QW_OK;
    case QW_REQ_MIN_TOKENS:
        if (v < 0 || v > INT32_MAX / 2)
            return qwi_fail(QW_ERR_INVALID_ARGUMENT, "QW_REQ_MIN_TOKENS must be >= 0, got %lld", (long long)v);
        req->min_tokens = v;
        return QW_OK;
    case QW_REQ_TOP_K:
        if (v < -1 || v > INT32_MAX)
            return qwi_fail(QW_ERR_INVALID_ARGUMENT, "QW_REQ_TOP_K must be -1, 0 or positive, got %lld", (long long)v);
        req->top_k = v < 0 ? 0 : (int32_t)v;
        return QW_OK;
    case QW_REQ_SEED:
        req->has_seed = true;
        req->seed = (uint64_t)v;
        return QW_OK;
    case QW_REQ_IGNORE_EOS:
        if (v != 0 && v != 1)
            return qwi_fail(QW_ERR_INVALID_ARGUMENT, "QW_REQ_IGNORE_EOS must be 0 or 1, got %lld", (long long)v);
        req->ignore_eos = v == 1;
        return QW_OK;
    case QW_REQ_PRIORITY:
        if (v < -(1 << 30) || v > (1 << 30))
            return qwi_fail(QW_ERR_INVALID_ARGUMENT, "QW_REQ_PRIORITY must be within +-2^30, got %lld", (long long)v);
        req->priority = (int32_t)v;
        return QW_OK;
    case QW_REQ_MAX_QUEUE_MS:
    case QW_REQ_DEADLINE_MS:
        if (v < 0)
            return qwi_fail(QW_ERR_INVALID_ARGUMENT, "%s must be >= 0, got %lld",
                            key == QW_REQ_MAX_QUEUE_MS ? "QW_REQ_MAX_QUEUE_MS" : "QW_REQ_DEADLINE_MS", (long long)v);
        if (key == QW_REQ_MAX_QUEUE_MS) req->max_queue_ms = v;
        else req->deadline_ms = v;
        return QW_OK;
    case QW_REQ_CACHE_SALT:
        req->cache_salt = (uint64_t)v;
        return QW_OK;
    case QW_REQ_SKIP_SPECIAL_TOKENS:
        if (v != 0 && v != 1)
            return qwi_fail(QW_ERR_INVALID_ARGUMENT, "QW_REQ_SKIP_SPECIAL_TOKENS must be 0 or 1, got %lld", (long long)v);
        req->keep_special = v == 0;
        return QW_OK;
    case QW_REQ_INCLUDE_STOP_STR_IN_OUTPUT:
        if (v != 0 && v != 1)
            return qwi_fail(QW_ERR_INVALID_ARGUMENT, "QW_REQ_INCLUDE_STOP_STR_IN_OUTPUT must be 0 or 1, got %lld",
                            (long long)v);
        req->include_stop_str = v == 1;
        return QW_OK;
    case QW_REQ_LOGPROBS:
    case QW_REQ_PROMPT_LOGPROBS:
        return qwi_logprobs_set(&req->lp, key == QW_REQ_PROMPT_LOGPROBS, v);
    case QW_REQ_N:
        if (v < 1 || v > QW_MAX_SAMPLES)
            return qwi_fail(QW_ERR_INVALID_ARGUMENT, "QW_REQ_N must be in [1, %d] (QW_MAX_SAMPLES), got %lld",
                            QW_MAX_SAMPLES, (long long)v);
        req->num_samples = (int32_t)v;
        return QW_OK;
    case QW_REQ_TEMPERATURE:
    case QW_REQ_TOP_P:
    case QW_REQ_MIN_P:
    case QW_REQ_REPETITION_PENALTY:
    case QW_REQ_PRESENCE_PENALTY:
    case QW_REQ_FREQUENCY_PENALTY:
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "request option %s (%d) is a double: use qw_request_set_double",
                        qw_request_option_name(key), (int)key);
    }
    return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_request_set_int: unknown option %d", (int)key);
}

QW_API qw_status qw_request_set_double(qw_request *req, qw_request_option key, double v) {
    QWI_ERR_SCOPE(req);
    qw_status st = check_mutable(req, "qw_request_set_double");
    if (st != QW_OK) return st;
    if (isnan(v)) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "request option %s (%d): NaN",
                                      qw_request_option_name(key), (int)key);
    switch (key) {
    case QW_REQ_TEMPERATURE:
        if (v < 0 || isinf(v))
            return qwi_fail(QW_ERR_INVALID_ARGUMENT, "QW_REQ_TEMPERATURE must be finite and >= 0, got %g", v);
        req->temperature = v;
        return QW_OK;
    case QW_REQ_TOP_P:
        if (!(v > 0 && v <= 1))
            return qwi_fail(QW_ERR_INVALID_ARGUMENT, "QW_REQ_TOP_P must be in (0, 1], got %g", v);
        req->top_p = v;
        return QW_OK;
    case QW_REQ_MIN_P:
        if (!(v >= 0 && v <= 1))
            return qwi_fail(QW_ERR_INVALID_ARGUMENT, "QW_REQ_MIN_P must be in [0, 1], got %g", v);
        req->min_p = v;
        return QW_OK;
    case QW_REQ_REPETITION_PENALTY:
        if (!(v > 0 && v <= 100))
            return qwi_fail(QW_ERR_INVALID_ARGUMENT, "QW_REQ_REPETITION_PENALTY must be in (0, 100] (1 = off), got %g", v);
        req->repetition_penalty = v;
        return QW_OK;
    case QW_REQ_PRESENCE_PENALTY:
    case QW_REQ_FREQUENCY_PENALTY:
        if (!(v >= -2 && v <= 2))
            return qwi_fail(QW_ERR_INVALID_ARGUMENT, "%s must be in [-2, 2] (0 = off), got %g",
                            key == QW_REQ_PRESENCE_PENALTY ? "QW_REQ_PRESENCE_PENALTY" : "QW_REQ_FREQUENCY_PENALTY", v);
        if (key == QW_REQ_PRESENCE_PENALTY) req->presence_penalty = v;
        else req->frequency_penalty = v;
        return QW_OK;
    default:
        break;
    }
    return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_request_set_double: option %s (%d) is not a double option",
                    qw_request_option_name(key), (int)key);
}

QW_API qw_status qw_request_set_user_data(qw_request *req, void *user_data) {
    QWI_ERR_SCOPE(req);
    /* The step thread copies it into every event without a lock. */
    qw_status st = check_mutable(req, "qw_request_set_user_data");
    if (st != QW_OK) return st;
    req->user_data = user_data;
    return QW_OK;
}

QW_API void *qw_request_get_user_data(const qw_request *req) { return req ? req->user_data : NULL; }

QW_API qw_status qw_request_set_logits_callback(qw_request *req, qw_logits_fn fn, void *user_data) {
    QWI_ERR_SCOPE(req);
    qw_status st = check_mutable(req, "qw_request_set_logits_callback");
    if (st != QW_OK) return st;
    req->logits_fn = fn;
    req->logits_user = user_data;
    return QW_OK;
}

QW_API uint64_t qw_request_get_id(const qw_request *req) { return req ? req->id : 0; }

QW_API qw_request_state qw_request_get_state(const qw_request *req) {
    return req ? (qw_request_state)atomic_load(&((qw_request *)req)->state) : QW_STATE_CREATED;
}

QW_API qw_finish_reason qw_request_get_finish_reason(const qw_request *req) {
    return req ? (qw_finish_reason)atomic_load(&((qw_request *)req)->finish_reason) : QW_FINISH_NONE;
}

QW_API qw_status qw_request_get_tokens(const qw_request *req, int32_t *buf, size_t cap, size_t *n_out) {
    QWI_ERR_SCOPE(req);
    if (!req || !n_out)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_request_get_tokens: request or n_out is NULL");
    if (cap > 0 && !buf)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_request_get_tokens: buf is NULL with cap %zu", cap);
    size_t n = 0;
    if (req->seq.tokens) n = (size_t)(req->seq.num_tokens - req->seq.num_prompt_tokens);
    size_t copy = n < cap ? n : cap;
    if (copy) memcpy(buf, req->seq.tokens + req->seq.num_prompt_tokens, copy * sizeof *buf);
    *n_out = n;
    return QW_OK;
}

QW_API qw_status qw_request_get_stats(const qw_request *req, qw_request_stats *out, size_t out_size) {
    QWI_ERR_SCOPE(req);
    if (!req || !out) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_request_get_stats: request or out is NULL");
    if (out_size < sizeof(uint64_t))
        return qwi_fail(QW_ERR_BUFFER_TOO_SMALL, "qw_request_get_stats: out_size %zu is too small", out_size);
    qw_request_stats st;
    memset(&st, 0, sizeof st);
    double now = qwi_now();
    double end = req->t_finished >= 0 ? req->t_finished : now;
    st.arrival_time = req->t_arrival;
    st.queue_time = req->t_scheduled >= 0 ? req->t_scheduled - req->t_arrival : -1;
    st.time_to_first_token = req->t_first_token >= 0 ? req->t_first_token - req->t_arrival : -1;
    st.decode_time = req->t_first_token >= 0 ? end - req->t_first_token : -1;
    st.prompt_tokens = req->seq.tokens ? (uint64_t)req->seq.num_prompt_tokens : 0;
    st.cached_prompt_tokens = (uint64_t)req->seq.num_cached_tokens;
    st.num_preemptions = (uint64_t)req->seq.num_preemptions;
    st.generated_tokens = req->seq.tokens ? (uint64_t)(req->seq.num_tokens - req->seq.num_prompt_tokens) : 0;
    st.computed_tokens = (uint64_t)req->seq.num_computed_tokens;
    size_t n = out_size < sizeof st ? out_size : sizeof st;
    st.size = n;
    memcpy(out, &st, n);
    if (out_size > sizeof st) memset((char *)out + sizeof st, 0, out_size - sizeof st);
    return QW_OK;
}

/* For request_text.c, whose setters follow the same rule. */
qw_status qwi_request_check_mutable(const qw_request *req, const char *fn) { return check_mutable(req, fn); }

qw_status qwi_request_grow(qw_request *r, int32_t block_size) {
    qwi_seq *seq = &r->seq;
    int64_t limit = (int64_t)seq->num_prompt_tokens + r->max_generated;
    int64_t want = QWI_MAX((int64_t)seq->capacity * 2, (int64_t)seq->capacity + QWI_REQUEST_FIRST_OUTPUT);
    int32_t cap = (int32_t)QWI_MIN(want, limit);
    if (cap <= seq->capacity) return QW_OK;
    /* Table and session history first: seq->capacity moves last, so a
     * failure anywhere leaves every invariant that depends on it intact. */
    qw_status st = qwi_block_table_grow(&seq->table, (int32_t)QWI_DIV_UP((int64_t)cap, block_size));
    qw_session *ses = r->session;
    if (st == QW_OK && ses) {
        pthread_mutex_lock(&ses->mu);
        if (ses->capacity < cap) {
            int32_t *grown = realloc(ses->tokens, sizeof(int32_t) * (size_t)cap);
            if (grown) {
                ses->tokens = grown;
                ses->capacity = cap;
            } else {
                st = QW_ERR_OUT_OF_MEMORY;
            }
        }
        pthread_mutex_unlock(&ses->mu);
    }
    /* Logprobs of generated tokens are stored at accept, like the tokens. */
    if (st == QW_OK) st = qwi_logprobs_grow(&r->lp, cap - seq->num_prompt_tokens);
    if (st == QW_OK) {
        int32_t *tokens = realloc(seq->tokens, sizeof(int32_t) * (size_t)cap);
        if (tokens) {
            seq->tokens = tokens;
            seq->capacity = cap;
        } else {
            st = QW_ERR_OUT_OF_MEMORY;
        }
    }
    if (st != QW_OK)
        return qwi_fail(QW_ERR_OUT_OF_MEMORY, "request %llu: out of memory growing its token arrays to %d tokens",
                        (unsigned long long)r->id, cap);
    return QW_OK;
}

void qwi_request_row_sampling(const qw_request *req, qwi_sampling *sp) {
    const qwi_seq *seq = &req->seq;
    const int32_t generated = seq->num_tokens - seq->num_prompt_tokens;
    *sp = req->sampling;
    sp->banned = generated < req->min_tokens ? req->banned : NULL;
    sp->num_banned = generated < req->min_tokens ? req->num_banned : 0;
    sp->repetition_penalty = (float)req->repetition_penalty;
    sp->presence_penalty = (float)req->presence_penalty;
    sp->frequency_penalty = (float)req->frequency_penalty;
    sp->prompt_tokens = seq->tokens;
    sp->num_prompt_tokens = seq->num_prompt_tokens;
    sp->output_tokens = seq->tokens ? seq->tokens + seq->num_prompt_tokens : NULL;
    sp->num_output_tokens = generated;
    sp->bias_ids = req->bias_ids;
    sp->bias = req->bias_values;
    sp->num_bias = req->num_bias;
}
