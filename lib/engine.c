/*
 * engine.c - engine lifetime, submission and cancellation, and the step loop
 * (DESIGN.md "One step"): drain the inbox, schedule, plan, forward, append
 * and stop, emit events.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "forward_check.h"
#include "progress.h"
#include "kv_budget.h"
#include "options.h"
#include "parallel_samples.h"
#include "tokenizer_api.h"
#include "weights_check.h"

/* ---- small containers ------------------------------------------------------ */

static qw_status list_push(qwi_req_list *l, qw_request *r) {
    if (l->count == l->capacity) {
        size_t cap = l->capacity ? l->capacity * 2 : 16;
        qw_request **items = realloc(l->items, cap * sizeof *items);
        if (!items) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "engine: request list of %zu", cap);
        l->items = items;
        l->capacity = cap;
    }
    l->items[l->count++] = r;
    return QW_OK;
}

static void list_free(qwi_req_list *l) {
    free(l->items);
    memset(l, 0, sizeof *l);
}

/* Queue an event for delivery. The ring is sized at create for the most
 * events one step can make (one per sequence, plus cancellations), and grows
 * only if a host leaves events undelivered across many steps. */
static qw_status event_push(qw_engine *e, const qw_event *ev) {
    if (e->pending_count == e->pending_cap) {
        size_t cap = e->pending_cap * 2;
        qw_event *ring = malloc(cap * sizeof *ring);
        if (!ring) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "engine: event queue of %zu", cap);
        for (size_t i = 0; i < e->pending_count; i++)
            ring[i] = e->pending[(e->pending_head + i) % e->pending_cap];
        free(e->pending);
        e->pending = ring;
        e->pending_cap = cap;
        e->pending_head = 0;
    }
    e->pending[(e->pending_head + e->pending_count) % e->pending_cap] = *ev;
    e->pending_count++;
    return QW_OK;
}

/* The qw_event of callers built before sample_index was appended. */
#define QWI_EVENT_SIZE_V1 offsetof(qw_event, sample_index)

/* Copy up to cap pending events into the caller's array of event_size
 * elements (>= QWI_EVENT_SIZE_V1): an older caller's gets the fields it
 * has; bytes past our qw_event (a newer caller's fields) are zeroed. */
static size_t events_deliver(qw_engine *e, void *events, size_t cap, size_t event_size) {
    size_t n = 0;
    while (n < cap && e->pending_count > 0) {
        unsigned char *dst = (unsigned char *)events + n * event_size;
        memcpy(dst, &e->pending[e->pending_head], event_size < sizeof(qw_event) ? event_size : sizeof(qw_event));
        if (event_size > sizeof(qw_event)) memset(dst + sizeof(qw_event), 0, event_size - sizeof(qw_event));
        e->pending_head = (e->pending_head + 1) % e->pending_cap;
        e->pending_count--;
        n++;
    }
    return n;
}

/* ---- create / destroy -------------------------------------------------------- */

/* Parse "cuda" / "cuda:N" into N; false for anything else. */
static bool parse_cuda_device(const char *dev, int32_t *index) {
    if (strncmp(dev, "cuda", 4) != 0) return false;
    if (dev[4] == '\0') {
        *index = 0;
        return true;
    }
    if (dev[4] != ':' || dev[5] < '0' || dev[5] > '9') return false;
    char *end;
    long v = strtol(dev + 5, &end, 10);
    if (*end != '\0' || v < 0 || v > 1024) return false;
    *index = (int32_t)v;
    return true;
}

/* QW_OPT_KV_CACHE_DTYPE with AUTO resolved (qwinfer.h): the CPU backend's
 * default follows the numerics mode, CUDA's is bf16. */
static int32_t resolved_kv_dtype(const qw_engine_options *o) {
    if (o->kv_cache_dtype != QW_KV_CACHE_AUTO) return (int32_t)o->kv_cache_dtype;
    const char *dev = o->device ? o->device : "cpu";
    if (strcmp(dev, "cpu") == 0 && o->numerics == QW_NUMERICS_EXACT) return QW_KV_CACHE_F32;
    return QW_KV_CACHE_BF16;
}

static qw_status create_backend(qw_engine *e, const qw_engine_options *o, int32_t num_blocks,
                                qwi_progress *progress) {
    qwi_backend_config bc = {
        .progress = progress,
        .num_threads = (int32_t)o->num_threads,
        .num_blocks = num_blocks,
        .kv_cache_bytes = o->kv_cache_bytes,
        .memory_fraction = o->gpu_memory_utilization,
        .max_model_len = e->max_model_len,
        .block_size = e->block_size,
        .max_num_batched_tokens = e->max_num_batched_tokens,
        .max_num_seqs = e->max_num_seqs,
        .numerics = (int32_t)o->numerics,
        .kv_cache_dtype = resolved_kv_dtype(o),
    };
    const char *dev = o->device ? o->device : "cpu";
    if (strcmp(dev, "cpu") == 0) return qwi_cpu_backend_create(e->model, &bc, &e->backend);
    if (parse_cuda_device(dev, &bc.device_index)) {
#ifdef QW_HAVE_CUDA
        bc.num_blocks = (int32_t)o->num_kv_blocks;
        return qwi_cuda_backend_create(e->model, &bc, &e->backend);
#else
        return qwi_fail(QW_ERR_NO_DEVICE, "device \"%s\": this build of qwinfer has no CUDA backend (built with CUDA=0)", dev);
#endif
    }
    return qwi_fail(QW_ERR_INVALID_ARGUMENT, "device \"%s\": expected \"cpu\" or \"cuda:N\"", dev);
}

/* Number of blocks of the CPU KV pool (kv_budget.h): explicit count, else
 * bytes, else QW_OPT_KV_CACHE_MEMORY_FRACTION of the RAM available after
 * the weights; never more than max_num_seqs full-length sequences use. */
static qw_status size_kv_pool(qw_engine *e, const qw_engine_options *o, int32_t *num_blocks) {
    qwi_kv_budget b = {
        .num_blocks = o->num_kv_blocks,
        .kv_cache_bytes = o->kv_cache_bytes,
        .memory_fraction = o->kv_cache_memory_fraction,
        .per_block = qwi_cpu_kv_bytes_per_block(&e->model->cfg, e->block_size,
                                                resolved_kv_dtype(o)),
        .max_useful_blocks = (int64_t)e->max_num_seqs * QWI_DIV_UP((int64_t)e->max_model_len, e->block_size),
    };
    /* Only read when the fraction decides: /proc is not free to parse. */
    if (b.num_blocks <= 0 && b.kv_cache_bytes <= 0) {
        b.mem_available = qwi_kv_budget_mem_available();
        b.weight_bytes = qwi_kv_budget_weight_bytes(e->model);
    }
    return qwi_kv_budget_cpu_blocks(&b, num_blocks);
}

QW_API qw_status qw_engine_create(const qw_engine_options *o, qw_engine **out) {
    QWI_ERR_SCOPE(o);
    if (!out) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_engine_create: out is NULL");
    *out = NULL;
    if (!o) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_engine_create: options is NULL");
    if (!o->model_path) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_engine_create: QW_OPT_MODEL_PATH is not set");

    qw_engine *e = calloc(1, sizeof *e);
    if (!e) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "qw_engine_create: out of memory");
    if (pthread_mutex_init(&e->inbox_mu, NULL) != 0) {
        free(e);
        return qwi_fail(QW_ERR_INTERNAL, "qw_engine_create: pthread_mutex_init failed");
    }
    if (qwi_engine_wake_init(e) != QW_OK) {
        pthread_mutex_destroy(&e->inbox_mu);
        free(e);
        return QW_ERR_INTERNAL;
    }

    qw_status st = qwi_model_load(o->model_path, &e->model);
    if (st != QW_OK) goto fail;
    /* A NaN/inf weight would otherwise generate garbage with QW_OK. */
    /* progress: the scan reads every weight once, the backend once more */
    qwi_progress progress = {o->progress_fn, o->progress_user, 0, 0};
    for (size_t k = 0; k < qwi_st_count(e->model->weights); k++)
        progress.total += qwi_st_at(e->model->weights, k)->nbytes;
    if (o->check_weights) progress.total *= 2;
    if (o->check_weights && (st = qwi_weights_check(e->model->weights, &progress)) != QW_OK) goto fail;
    const qwi_config *cfg = &e->model->cfg;
    e->vocab_size = cfg->vocab_size;
    /* The tokenizer of the model directory, when it has one (text prompts
     * and streamed text); a malformed one fails the create. */
    if ((st = qwi_tokenizer_open_model_dir(o->model_path, e->vocab_size, &e->tokenizer)) != QW_OK) goto fail;
    e->max_model_len = o->max_model_len > 0 ? (int32_t)o->max_model_len : cfg->max_position_embeddings;
    if (e->max_model_len > cfg->max_position_embeddings) {
        st = qwi_fail(QW_ERR_INVALID_ARGUMENT, "QW_OPT_MAX_MODEL_LEN %d exceeds the model's max_position_embeddings %d",
                      e->max_model_len, cfg->max_position_embeddings);
        goto fail;
    }
    e->block_size = (int32_t)o->block_size;
    e->max_num_seqs = (int32_t)o->max_num_seqs;
    e->max_num_batched_tokens = (int32_t)o->max_num_batched_tokens;
    e->chunked_prefill = o->enable_chunked_prefill != 0;
    e->seed = (uint64_t)o->seed;

    /* The backend allocates the KV memory, so it comes first; the CPU pool
     * is sized here, a GPU backend sizes its own from device memory. */
    int32_t num_blocks = 0;
    if ((!o->device || strcmp(o->device, "cpu") == 0) && (st = size_kv_pool(e, o, &num_blocks)) != QW_OK)
        goto fail;
    if ((st = create_backend(e, o, num_blocks, &progress)) != QW_OK) goto fail;
    /* what the backend did not read (e.g. the embedding), then done == total */
    if ((st = qwi_progress_finish(&progress)) != QW_OK) goto fail;
    num_blocks = e->backend->num_blocks;
    /* One max-length sequence must fit the pool (whoever sized it): an
     * explicit QW_OPT_MAX_MODEL_LEN that does not fails here, as in vLLM; a
     * length from config.json is capped to what the pool holds. */
    bool gpu = o->device && strcmp(o->device, "cpu") != 0;
    e->kv_pool_option = qwi_kv_budget_option(o->num_kv_blocks, o->kv_cache_bytes, gpu);
    if ((st = qwi_kv_budget_fit_len(num_blocks, e->block_size, e->max_model_len, o->max_model_len > 0,
                                    e->kv_pool_option, &e->max_model_len)) != QW_OK)
        goto fail;
    if (o->max_model_len > 0)
        snprintf(e->len_limit, sizeof e->len_limit, "QW_OPT_MAX_MODEL_LEN");
    else if (e->max_model_len < cfg->max_position_embeddings)
        snprintf(e->len_limit, sizeof e->len_limit, "all the KV cache holds for one sequence: raise %s",
                 e->kv_pool_option);
    else
        snprintf(e->len_limit, sizeof e->len_limit, "the model's max_position_embeddings");
    e->max_blocks_per_seq = (int32_t)QWI_DIV_UP((int64_t)e->max_model_len, e->block_size);
    e->max_waiting = o->max_waiting_requests;
    if ((st = qwi_kv_pool_init(&e->kv, num_blocks, e->block_size, o->enable_prefix_caching != 0)) != QW_OK)
        goto fail;
    qwi_sched_config sc = {
        .max_num_seqs = e->max_num_seqs,
        .max_num_batched_tokens = e->max_num_batched_tokens,
        .chunked_prefill = e->chunked_prefill,
        .max_num_partial_prefills = (int32_t)o->max_num_partial_prefills,
        .long_prefill_threshold = (int32_t)o->long_prefill_token_threshold,
        .aging_steps = (int32_t)o->priority_aging_steps,
    };
    if ((st = qwi_sched_init(&e->sched, &e->kv, &sc, e->max_model_len)) != QW_OK) goto fail;
    e->sched.reclaim = qwi_engine_reclaim_idle_session;
    e->sched.reclaim_ctx = e;
    if ((st = qwi_plan_buffers_init(&e->plan, e->max_num_batched_tokens, e->max_num_seqs,
                                    e->max_blocks_per_seq, e->block_size, e->vocab_size)) != QW_OK)
        goto fail;
    e->pending_cap = (size_t)e->max_num_seqs * 2 + 16;
    e->pending = malloc(e->pending_cap * sizeof *e->pending);
    if (!e->pending) {
        st = qwi_fail(QW_ERR_OUT_OF_MEMORY, "qw_engine_create: event queue");
        goto fail;
    }
    *out = e;
    return QW_OK;

fail:
    qw_engine_destroy(e);
    return st;
}

/* The request leaves the count of waiting requests (QW_OPT_MAX_WAITING_
 * REQUESTS): it was scheduled for the first time, or finished before. */
static void leave_waiting_count(qw_engine *e, qw_request *r) {
    if (!r->counted_waiting) return;
    r->counted_waiting = false;
    atomic_fetch_sub(&e->num_waiting_requests, 1);
}

static void emit(qw_engine *e, qw_request *r, qw_event_kind kind, int32_t token, qw_finish_reason why);
static void finish_request(qw_engine *e, qw_request *r, qw_finish_reason why);

/* End every sample of r (QW_REQ_N) that has not finished, with why and a
 * finishing event: all of them (cancel), or only the ones not forked yet
 * (r ends before its prompt was computed: they could never start). */
static void finish_samples(qw_engine *e, qw_request *r, qw_finish_reason why, bool forked_too) {
    if (!r->samples || (!forked_too && !r->fork_pending)) return;
    r->fork_pending = false;
    for (int32_t i = 0; i < r->num_samples - 1; i++) {
        qw_request *c = r->samples[i];
        if (atomic_load(&c->state) == QW_STATE_FINISHED) continue;
        finish_request(e, c, why);
        emit(e, c, QW_EVENT_FINISHED, -1, why);
    }
}

/* Finish a request that the engine holds: take it out of the scheduler
 * (freeing its blocks), publish the state, and queue the engine's reference
 * to be dropped at the next step, after its events were delivered. Samples
 * of r (QW_REQ_N) still waiting for its prompt end with it. */
static void finish_request(qw_engine *e, qw_request *r, qw_finish_reason why) {
    finish_samples(e, r, why, false);
    qwi_sched_remove(&e->sched, &r->seq);
    leave_waiting_count(e, r);
    qw_session *ses = r->session;
    if (ses && ses->engine == e) {
        /* The history grows by what this request added; its KV goes back to
         * the session (unless the step failed and the KV is suspect). The
         * history array was sized at submit and grew with the request's
         * tokens (qwi_request_grow), so this cannot fail. */
        pthread_mutex_lock(&ses->mu);
        memcpy(ses->tokens, r->seq.tokens, sizeof(int32_t) * (size_t)r->seq.num_tokens);
        ses->num_tokens = r->seq.num_tokens;
        if (why == QW_FINISH_ERROR) qwi_kv_release(&e->kv, &r->seq.table);
        ses->table = r->seq.table;
        ses->num_computed = ses->table.num_blocks ? r->seq.num_computed_tokens : 0;
        memset(&r->seq.table, 0, sizeof r->seq.table);
        ses->last_used = e->sched.step;
        ses->busy = false;
        pthread_mutex_unlock(&ses->mu);
    } else {
        qwi_kv_release(&e->kv, &r->seq.table);
    }
    r->t_finished = qwi_now();
    e->stats.finished++;
    atomic_store(&r->finish_reason, why);
    atomic_store(&r->state, QW_STATE_FINISHED);
    if (list_push(&e->finished, r) != QW_OK) {
        /* Cannot defer: drop the reference now. Safe unless the host
         * released its own reference and still reads this step's events. */
        qwi_request_unref(r);
    }
}

QW_API void qw_engine_destroy(qw_engine *e) {
    if (!e) return;
    /* Every request the engine still holds ends as cancelled. */
    for (size_t i = 0; i < e->inbox.count; i++) {
        qw_request *r = e->inbox.items[i];
        if (r->session) {
            /* never drained: the session's KV was not borrowed yet */
            pthread_mutex_lock(&r->session->mu);
            r->session->busy = false;
            pthread_mutex_unlock(&r->session->mu);
        }
        atomic_store(&r->finish_reason, QW_FINISH_CANCELLED);
        atomic_store(&r->state, QW_STATE_FINISHED);
        qwi_samples_abandon(r);
        qwi_request_unref(r);
    }
    for (size_t i = 0; i < e->cancels.count; i++) qwi_request_unref(e->cancels.items[i]);
    while (e->sched.num_running > 0) {
        qw_request *r = e->sched.running[0]->owner;
        finish_request(e, r, QW_FINISH_CANCELLED);
    }
    while (e->sched.num_waiting > 0) {
        qw_request *r = e->sched.waiting[0]->owner;
        finish_request(e, r, QW_FINISH_CANCELLED);
    }
    /* Sessions the host did not destroy lose their KV and their engine;
     * qw_session_destroy still frees them. */
    for (qw_session *ses = e->sessions; ses; ses = ses->next) {
        qwi_kv_release(&e->kv, &ses->table);
        ses->num_computed = 0;
        pthread_mutex_lock(&ses->mu);   /* a submit reads engine under it */
        ses->engine = NULL;
        pthread_mutex_unlock(&ses->mu);
    }
    for (size_t i = 0; i < e->finished.count; i++) qwi_request_unref(e->finished.items[i]);
    list_free(&e->inbox);
    list_free(&e->cancels);
    list_free(&e->finished);
    if (e->backend) e->backend->ops->destroy(e->backend);
    qwi_plan_buffers_destroy(&e->plan);
    qwi_sample_scratch_free(e->fork_scratch);
    qwi_sched_destroy(&e->sched);
    qwi_kv_pool_destroy(&e->kv);
    qwi_model_free(e->model);
    qwi_tokenizer_handle_free(e->tokenizer);
    free(e->pending);
    pthread_mutex_destroy(&e->inbox_mu);
    qwi_engine_wake_destroy(e);
    qwi_err_slot_free(&e->err);
    free(e);
}

QW_API int32_t qw_engine_vocab_size(const qw_engine *e) { return e ? e->vocab_size : 0; }
QW_API int32_t qw_engine_max_model_len(const qw_engine *e) { return e ? e->max_model_len : 0; }
QW_API int32_t qw_engine_num_kv_blocks(const qw_engine *e) { return e ? e->kv.num_blocks : 0; }
QW_API int32_t qw_engine_num_free_kv_blocks(const qw_engine *e) { return e ? qwi_kv_num_available(&e->kv) : 0; }

/* ---- submit / cancel ------------------------------------------------------ */

static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Validate a request against the engine's limits and build its engine-side
 * state (token array: session history then prompt; block table; banned
 * list). hist/num_hist is the session's history (NULL/0 without one). On
 * failure the request is as it was. Runs on the submitting thread; reads
 * only immutable engine fields. */
static qw_status prepare_request(qw_engine *e, qw_request *r, const int32_t *hist, int32_t num_hist) {
    if (r->num_prompt <= 0)
        return qwi_fail(QW_ERR_EMPTY_PROMPT, "qw_engine_submit: request %llu has no prompt tokens",
                        (unsigned long long)r->id);
    for (int32_t i = 0; i < r->num_prompt; i++) {
        if (r->prompt[i] < 0 || r->prompt[i] >= e->vocab_size)
            return qwi_fail(QW_ERR_TOKEN_OUT_OF_RANGE,
                            "qw_engine_submit: prompt token %d (at index %d) is outside the vocabulary [0, %d)",
                            r->prompt[i], i, e->vocab_size);
    }
    for (int32_t i = 0; i < r->num_stop; i++) {
        if (r->stop_tokens[i] < 0 || r->stop_tokens[i] >= e->vocab_size)
            return qwi_fail(QW_ERR_TOKEN_OUT_OF_RANGE, "qw_engine_submit: stop token %d is outside the vocabulary [0, %d)",
                            r->stop_tokens[i], e->vocab_size);
    }
    qw_status bst = qwi_request_check_logit_bias(r, e->vocab_size);
    if (bst != QW_OK) return bst;
    int64_t total = (int64_t)num_hist + r->num_prompt;
    if (total >= e->max_model_len)
        return qwi_fail(QW_ERR_TOO_LONG, "qw_engine_submit: prompt of %lld tokens%s leaves no room to generate within the max model length %d (%s)",
                        (long long)total, num_hist ? " (with the session history)" : "", e->max_model_len, e->len_limit);
    /* Without QW_REQ_MAX_TOKENS: as much as the engine can ever hold for
     * this sequence. The max model length already fits the pool for one
     * sequence (qw_engine_create), and so does everything below it. */
    int64_t max_gen = r->max_tokens > 0 ? r->max_tokens : (int64_t)e->max_model_len - total;
    if (total + max_gen > e->max_model_len)
        return qwi_fail(QW_ERR_TOO_LONG, "qw_engine_submit: prompt (%lld) + max tokens (%lld, QW_REQ_MAX_TOKENS) exceeds the max model length %d (%s)",
                        (long long)total, (long long)max_gen, e->max_model_len, e->len_limit);
    if (!e->chunked_prefill && total > e->max_num_batched_tokens)
        return qwi_fail(QW_ERR_TOO_LONG, "qw_engine_submit: prompt of %lld tokens exceeds the step budget %d and chunked prefill is off",
                        (long long)total, e->max_num_batched_tokens);
    /* The last generated token is never written to the cache. Unreachable
     * while the max model length fits the pool; kept so that no request that
     * can never fit is ever left waiting. */
    int64_t kv_tokens = total + max_gen - 1;
    int32_t need = qwi_kv_blocks_for(&e->kv, kv_tokens);
    if (need > e->kv.num_blocks)
        return qwi_fail(QW_ERR_KV_CAPACITY, "qw_engine_submit: request needs %d KV blocks (%lld tokens) but the pool has %d: lower QW_REQ_MAX_TOKENS or raise %s",
                        need, (long long)kv_tokens, e->kv.num_blocks, e->kv_pool_option);

    /* Room for the prompt and the first few tokens only: a queued request
     * costs about its prompt, and the arrays grow as tokens arrive
     * (qwi_request_grow). Blocks themselves are taken by the scheduler. */
    int32_t cap = (int32_t)(total + QWI_MIN(max_gen, (int64_t)QWI_REQUEST_FIRST_OUTPUT));
    int32_t *tokens = malloc((size_t)cap * sizeof *tokens);
    int32_t nb = r->num_stop + (r->ignore_eos ? 0 : e->model->cfg.num_eos);
    int32_t *banned = nb ? malloc((size_t)nb * sizeof *banned) : NULL;
    qwi_block_table table;
    memset(&table, 0, sizeof table);
    /* A session request borrows the session's table at admission instead. */
    qw_status st = r->session ? QW_OK : qwi_block_table_init(&table, &e->kv, cap);
    if (!tokens || (nb && !banned) || st != QW_OK) {
        free(tokens);
        free(banned);
        qwi_block_table_destroy(&table);
        return qwi_fail(QW_ERR_OUT_OF_MEMORY, "qw_engine_submit: out of memory for a request of %d tokens", cap);
    }
    /* Logprob arrays, sized like the token array and grown with it. */
    if ((st = qwi_logprobs_prepare(&r->lp, e->vocab_size, num_hist, r->num_prompt, cap - (int32_t)total)) != QW_OK) {
        free(tokens);
        free(banned);
        qwi_block_table_destroy(&table);
        return st;
    }
    if (num_hist) memcpy(tokens, hist, (size_t)num_hist * sizeof *tokens);
    memcpy(tokens + num_hist, r->prompt, (size_t)r->num_prompt * sizeof *tokens);
    nb = 0;
    for (int32_t i = 0; i < r->num_stop; i++) banned[nb++] = r->stop_tokens[i];
    if (!r->ignore_eos)
        for (int32_t i = 0; i < e->model->cfg.num_eos; i++) banned[nb++] = e->model->cfg.eos_token_ids[i];

    free(r->seq.tokens);
    qwi_block_table_destroy(&r->seq.table);
    free(r->banned);
    memset(&r->seq, 0, sizeof r->seq);
    r->seq.tokens = tokens;
    r->seq.num_tokens = (int32_t)total;
    r->seq.num_prompt_tokens = (int32_t)total;
    r->seq.capacity = cap;
    r->seq.table = table;
    r->seq.owner = r;
    r->seq.priority = r->priority;
    r->seq.salt = r->cache_salt;
    /* Prompt logprobs need every prompt row computed (logprobs.h). */
    r->seq.no_prefix_lookup = r->lp.prompt_n >= 0;
    r->banned = banned;
    r->num_banned = nb;
    r->max_generated = (int32_t)max_gen;
    r->sampling.temperature = (float)r->temperature;
    r->sampling.top_k = r->top_k;
    r->sampling.top_p = (float)r->top_p;
    r->sampling.min_p = (float)r->min_p;
    return QW_OK;
}

/* Under the session's lock: refuse a busy session, size the history array
 * for what this request can add, prepare, and mark the session busy. */
static qw_status prepare_session_request(qw_engine *e, qw_request *r) {
    qw_session *ses = r->session;
    /* The request's reference keeps ses allocated; dead, engine, busy and
     * the history are read and changed under its lock (session.h). */
    pthread_mutex_lock(&ses->mu);
    qw_status st = QW_OK;
    if (ses->dead) {
        st = qwi_fail(QW_ERR_INVALID_STATE, "qw_engine_submit: the request's session was destroyed");
    } else if (ses->engine != e) {
        st = qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_engine_submit: the request's session belongs to another engine");
    } else if (ses->busy) {
        st = qwi_fail(QW_ERR_SESSION_BUSY, "qw_engine_submit: the session already has a request queued or running");
    } else if ((st = prepare_request(e, r, ses->tokens, ses->num_tokens)) == QW_OK) {
        if (ses->capacity < r->seq.capacity) {
            int32_t *grown = realloc(ses->tokens, sizeof(int32_t) * (size_t)r->seq.capacity);
            if (!grown) {
                st = qwi_fail(QW_ERR_OUT_OF_MEMORY, "qw_engine_submit: session history of %d tokens", r->seq.capacity);
            } else {
                ses->tokens = grown;
                ses->capacity = r->seq.capacity;
            }
        }
        if (st == QW_OK) ses->busy = true;
    }
    pthread_mutex_unlock(&ses->mu);
    return st;
}

/* Make the samples 1..n-1 of r (QW_REQ_N > 1; parallel_samples.h) and
 * prepare each like r itself, from r's prompt ids (after r's own
 * preparation). On failure none is left. Submitting thread. */
static qw_status prepare_samples(qw_engine *e, qw_request *r) {
    qw_status st = qwi_samples_create(r);
    for (int32_t i = 0; st == QW_OK && i < r->num_samples - 1; i++) {
        qw_request *c = r->samples[i];
        st = qwi_request_prepare_text(e, c);   /* its own detokenizer */
        if (st == QW_OK) st = prepare_request(e, c, NULL, 0);
    }
    if (st != QW_OK) qwi_samples_free(r);
    return st;
}

/* Under inbox_mu, once r is queued: its samples are submitted with it (the
 * engine's reference, the waiting count, arrival). Their seeds are set at
 * the fork, from r's. */
static void submit_samples(qw_engine *e, qw_request *r) {
    r->fork_pending = r->samples != NULL;
    if (!r->samples) return;
    for (int32_t i = 0; i < r->num_samples - 1; i++) {
        qw_request *c = r->samples[i];
        atomic_store(&c->state, QW_STATE_QUEUED);
        c->counted_waiting = true;
        c->seq.arrival = r->seq.arrival;
        c->engine = e;
        c->t_arrival = r->t_arrival;
        qwi_request_ref(c);
    }
}

/* The refusal of a submit beyond QW_OPT_MAX_WAITING_REQUESTS. */
static qw_status queue_full(const qw_engine *e) {
    return qwi_fail(QW_ERR_QUEUE_FULL,
                    "qw_engine_submit: %lld requests are waiting to be scheduled, the limit set by "
                    "QW_OPT_MAX_WAITING_REQUESTS; submit again later",
                    (long long)e->max_waiting);
}

QW_API qw_status qw_engine_submit(qw_engine *e, qw_request *r) {
    QWI_ERR_SCOPE(r);
    if (!e || !r) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_engine_submit: engine or request is NULL");
    /* Claim the request first, so two threads submitting it at once cannot
     * both build its state; a failed submit gives the claim back. */
    bool expected = false;
    if (!atomic_compare_exchange_strong(&r->submit_claimed, &expected, true))
        return qwi_fail(QW_ERR_INVALID_STATE, "qw_engine_submit: request %llu was already submitted",
                        (unsigned long long)r->id);
    /* Refuse cheaply while the queue is full (checked again under the lock
     * before the request goes in). QW_REQ_N samples count n. */
    const int32_t nseq = qwi_samples_count(r);
    qw_status st = qwi_samples_check(r, e->max_waiting);
    if (st == QW_OK && e->max_waiting > 0 && atomic_load(&e->num_waiting_requests) > e->max_waiting - nseq)
        st = queue_full(e);
    if (st != QW_OK) {
        atomic_store(&r->submit_claimed, false);
        return st;
    }
    /* A text or chat prompt becomes ids first (request_text.c). */
    st = qwi_request_prepare_text(e, r);
    if (st == QW_OK) st = r->session ? prepare_session_request(e, r) : prepare_request(e, r, NULL, 0);
    if (st == QW_OK && nseq > 1) st = prepare_samples(e, r);
    if (st != QW_OK) {
        atomic_store(&r->submit_claimed, false);
        return st;
    }

    pthread_mutex_lock(&e->inbox_mu);
    /* Raised only here, under the lock: two submitters cannot both take the
     * last place. The step thread may lower it meanwhile, never raise it. */
    if (e->max_waiting > 0 && atomic_load(&e->num_waiting_requests) > e->max_waiting - nseq) st = queue_full(e);
    else st = list_push(&e->inbox, r);
    if (st != QW_OK) {
        pthread_mutex_unlock(&e->inbox_mu);
        qwi_samples_free(r);
        if (r->session) {
            pthread_mutex_lock(&r->session->mu);
            r->session->busy = false;
            pthread_mutex_unlock(&r->session->mu);
        }
        atomic_store(&r->submit_claimed, false);
        return st;
    }
    atomic_store(&r->state, QW_STATE_QUEUED);
    atomic_fetch_add(&e->num_waiting_requests, nseq);
    r->counted_waiting = true;
    uint64_t n = e->num_submitted++;
    r->seq.arrival = n;
    r->sampling.seed = r->has_seed ? r->seed : mix64(e->seed ^ mix64(n));
    r->engine = e;
    r->t_arrival = qwi_now();
    submit_samples(e, r);
    qwi_request_ref(r);
    pthread_mutex_unlock(&e->inbox_mu);
    qwi_engine_wake(e);
    return QW_OK;
}

QW_API qw_status qw_engine_cancel(qw_engine *e, qw_request *r) {
    QWI_ERR_SCOPE(r);
    if (!e || !r) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_engine_cancel: engine or request is NULL");
    pthread_mutex_lock(&e->inbox_mu);
    qw_status st = QW_OK;
    int state = atomic_load(&r->state);
    if (state == QW_STATE_CREATED || r->engine != e) {
        st = qwi_fail(QW_ERR_INVALID_STATE, "qw_engine_cancel: request %llu was not submitted to this engine",
                      (unsigned long long)r->id);
    } else if (state == QW_STATE_FINISHED && !qwi_samples_any_unfinished(r)) {
        st = qwi_fail(QW_ERR_INVALID_STATE, "qw_engine_cancel: request %llu has already finished",
                      (unsigned long long)r->id);
    } else if ((st = list_push(&e->cancels, r)) == QW_OK) {
        qwi_request_ref(r);  /* keeps r alive until the step applies it */
    }
    pthread_mutex_unlock(&e->inbox_mu);
    if (st == QW_OK) qwi_engine_wake(e);
    return st;
}

/* ---- step --------------------------------------------------------------- */

static void emit(qw_engine *e, qw_request *r, qw_event_kind kind, int32_t token, qw_finish_reason why) {
    qw_event ev = {
        .kind = (uint32_t)kind,
        .finish_reason = (uint32_t)why,
        .token = token,
        .index = (uint32_t)(r->seq.num_tokens - r->seq.num_prompt_tokens - (token >= 0 ? 1 : 0)),
        .request_id = r->id,
        .request = r,
        .user_data = r->user_data,
        .sample_index = r->sample_index,
    };
    if (token < 0) ev.index = (uint32_t)(r->seq.num_tokens - r->seq.num_prompt_tokens);
    /* The event's text piece, read by qw_request_get_text_piece. */
    qwi_request_text_event(r, why != QW_FINISH_NONE);
    /* An event that cannot be queued (out of memory) is lost; the request's
     * state and tokens remain readable through the request handle. */
    (void)event_push(e, &ev);
}

/* Move submissions into the scheduler and apply cancellations. */
static void drain_inbox(qw_engine *e) {
    pthread_mutex_lock(&e->inbox_mu);
    qwi_req_list inbox = e->inbox, cancels = e->cancels;
    memset(&e->inbox, 0, sizeof e->inbox);
    memset(&e->cancels, 0, sizeof e->cancels);
    pthread_mutex_unlock(&e->inbox_mu);

    for (size_t i = 0; i < inbox.count; i++) {
        qw_request *r = inbox.items[i];
        qw_session *ses = r->session;
        if (ses) {
            /* Borrow the session's KV: the history it covers is not prefilled
             * again. The table is step-thread state (session.h), and the
             * session stays busy until finish_request gives it back, so no
             * fork or destroy sees it lent. */
            r->seq.table = ses->table;
            r->seq.num_computed_tokens = ses->num_computed;
            memset(&ses->table, 0, sizeof ses->table);
            ses->num_computed = 0;
            /* The table's array covers the request's token array, and grows
             * with it (qwi_request_grow). */
            if (qwi_block_table_grow(&r->seq.table, qwi_kv_blocks_for(&e->kv, r->seq.capacity)) != QW_OK) {
                r->seq.state = QWI_SEQ_NEW;
                finish_request(e, r, QW_FINISH_ERROR);
                emit(e, r, QW_EVENT_FINISHED, -1, QW_FINISH_ERROR);
                continue;
            }
        }
        if (qwi_sched_add(&e->sched, &r->seq) != QW_OK) {
            r->seq.state = QWI_SEQ_NEW;
            finish_request(e, r, QW_FINISH_ERROR);
            emit(e, r, QW_EVENT_FINISHED, -1, QW_FINISH_ERROR);
        }
    }
    for (size_t i = 0; i < cancels.count; i++) {
        qw_request *r = cancels.items[i];
        if (atomic_load(&r->state) != QW_STATE_FINISHED) {
            finish_request(e, r, QW_FINISH_CANCELLED);
            emit(e, r, QW_EVENT_FINISHED, -1, QW_FINISH_CANCELLED);
        }
        /* Cancelling the submitted request cancels all its samples. */
        finish_samples(e, r, QW_FINISH_CANCELLED, true);
        qwi_request_unref(r);
    }
    list_free(&inbox);
    list_free(&cancels);
}

static bool is_in(int32_t tok, const int32_t *ids, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (ids[i] == tok) return true;
    return false;
}

/* Append a sampled token, apply the stop conditions, make room for the
 * next token if the arrays are full, and emit the token's event. The token
 * array always has room for one more token while a request runs. When that
 * room cannot be made, the request finishes with QW_FINISH_ERROR on this
 * token's event (the token is kept) and QW_ERR_OUT_OF_MEMORY is returned
 * with a message naming it; the engine and the other requests go on. */
static qw_status accept_token(qw_engine *e, qw_request *r, int32_t tok) {
    qwi_seq *seq = &r->seq;
    seq->tokens[seq->num_tokens++] = tok;
    int32_t generated = seq->num_tokens - seq->num_prompt_tokens;
    const qwi_config *cfg = &e->model->cfg;
    qw_finish_reason why = QW_FINISH_NONE;
    /* The text first: a stop string it completes ends the request here
     * (from QW_REQ_MIN_TOKENS on, as vLLM), before the length limit. */
    bool string_hit = qwi_request_text_token(r, tok, generated >= r->min_tokens) >= 0;
    if ((!r->ignore_eos && is_in(tok, cfg->eos_token_ids, cfg->num_eos)) ||
        is_in(tok, r->stop_tokens, r->num_stop)) {
        why = QW_FINISH_STOP;
        r->stop_token_hit = tok;
    } else if (string_hit)
        why = QW_FINISH_STOP;
    else if (generated >= r->max_generated || seq->num_tokens >= e->max_model_len)
        why = QW_FINISH_LENGTH;
    qw_status st = QW_OK;
    if (why == QW_FINISH_NONE && seq->num_tokens == seq->capacity) {
        st = e->test_fail_growth
                 ? qwi_fail(QW_ERR_OUT_OF_MEMORY, "request %llu: out of memory growing its token arrays (test hook)",
                            (unsigned long long)r->id)
                 : qwi_request_grow(r, e->block_size);
        if (st != QW_OK) why = QW_FINISH_ERROR;
    }
    if (why != QW_FINISH_NONE) finish_request(e, r, why);
    emit(e, r, QW_EVENT_TOKEN, tok, why);
    return st;
}

/* Sample 0 (r, QW_REQ_N > 1) has computed its prompt in this step: queue
 * its other samples. With r's last-row logits at hand (have_logits) and
 * the scratch to sample from them, each gets a share of r's KV
 * (qwi_samples_fork_kv) and its first token comes from sample_forked;
 * returns true. Otherwise (out of memory) they are queued with no KV and
 * compute the prompt themselves, through the prefix cache: the same tokens,
 * at the cost of a prefill; returns false. Runs before r's own token is
 * accepted, which may finish r and free its blocks. */
static bool fork_samples(qw_engine *e, qw_request *r, bool have_logits) {
    r->fork_pending = false;
    if (have_logits && !e->fork_scratch) e->fork_scratch = qwi_sample_scratch_create(e->vocab_size);
    bool share = have_logits && e->fork_scratch;
    for (int32_t i = 0; i < r->num_samples - 1; i++) {
        qw_request *c = r->samples[i];
        if (atomic_load(&c->state) == QW_STATE_FINISHED) continue;   /* cancelled on its own */
        /* Seed of sample i: seed + i, wrapping (qwinfer.h). */
        c->sampling.seed = r->sampling.seed + c->sample_index;
        if (share) qwi_samples_fork_kv(&e->kv, e->backend, &r->seq, &c->seq);
        if (qwi_sched_add(&e->sched, &c->seq) != QW_OK) {
            c->seq.state = QWI_SEQ_NEW;
            finish_request(e, c, QW_FINISH_ERROR);
            emit(e, c, QW_EVENT_FINISHED, -1, QW_FINISH_ERROR);
        }
    }
    return share;
}

/* After r's first token (fork_samples returned true): each sample it
 * forked gets its first token from the same logits with its own seed, and
 * accepts it like any token (stop conditions, event). Returns the first
 * failure of accept_token, QW_OK otherwise. */
static qw_status sample_forked(qw_engine *e, qw_request *r, const float *logits, double now) {
    qw_status st = QW_OK;
    for (int32_t i = 0; i < r->num_samples - 1; i++) {
        qw_request *c = r->samples[i];
        if (atomic_load(&c->state) == QW_STATE_FINISHED) continue;
        int32_t tok = qwi_samples_first_token(c, r, logits, e->vocab_size, e->fork_scratch);
        if (c->logits_fn) c->logits_fn(c->logits_user, c, c->seq.num_tokens, logits, e->vocab_size);
        leave_waiting_count(e, c);
        c->t_scheduled = c->t_first_token = now;
        e->stats.generation_tokens++;
        qw_status ast = accept_token(e, c, tok);
        if (ast != QW_OK && st == QW_OK) st = ast;
    }
    return st;
}

/* Finish requests whose max queue time or deadline has passed. */
static void expire_requests(qw_engine *e) {
    double now = qwi_now();
    for (int pass = 0; pass < 2; pass++) {
        qwi_seq **list = pass ? e->sched.running : e->sched.waiting;
        for (int32_t i = 0; i < (pass ? e->sched.num_running : e->sched.num_waiting);) {
            qw_request *r = list[i]->owner;
            double age_ms = (now - r->t_arrival) * 1e3;
            bool no_token = r->t_first_token < 0;
            if ((r->deadline_ms > 0 && age_ms >= (double)r->deadline_ms) ||
                (r->max_queue_ms > 0 && no_token && age_ms >= (double)r->max_queue_ms)) {
                finish_request(e, r, QW_FINISH_TIMEOUT);
                emit(e, r, QW_EVENT_FINISHED, -1, QW_FINISH_TIMEOUT);
                continue;   /* the list shrank: same index again */
            }
            i++;
        }
    }
}

static qw_status step_once(qw_engine *e, void *events, size_t cap, size_t event_size, size_t *n_out) {
    if (n_out) *n_out = 0;
    if (!e || !n_out) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_engine_step: engine or n_out is NULL");
    /* A step that may not deliver an event can never empty the event queue,
     * so qw_engine_has_work would stay 1 and a loop on it would spin. */
    if (cap == 0)
        return qwi_fail(QW_ERR_BUFFER_TOO_SMALL, "qw_engine_step: cap is 0; the events array must hold at least one event");
    if (!events) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_engine_step: events is NULL with cap %zu", cap);
    if (event_size < QWI_EVENT_SIZE_V1)
        return qwi_fail(QW_ERR_BUFFER_TOO_SMALL, "qw_engine_step: event_size %zu is smaller than the first qw_event (%zu)",
                        event_size, (size_t)QWI_EVENT_SIZE_V1);

    /* Undelivered events first, and no new work until they are out: the
     * requests they point to must stay alive, and the host sees events in
     * order. */
    if (e->pending_count > 0) {
        *n_out = events_deliver(e, events, cap, event_size);
        return QW_OK;
    }
    /* Every event of the finished requests was delivered by an earlier call:
     * the engine's references can go. */
    for (size_t i = 0; i < e->finished.count; i++) qwi_request_unref(e->finished.items[i]);
    e->finished.count = 0;

    double t0 = qwi_now(), forward_s = 0;
    drain_inbox(e);
    expire_requests(e);

    qwi_sched_output so;
    qwi_sched_schedule(&e->sched, &so);
    qw_status st = QW_OK;
    if (so.num_entries > 0) {
        qwi_plan *plan = qwi_plan_build(&e->plan, &so);
        for (int32_t i = 0; i < so.num_entries; i++) {
            qw_request *r = so.entries[i].seq->owner;
            qwi_request_row_sampling(r, &e->plan.sampling[i]);
            /* Rows to reduce to logprobs; without the buffers the step
             * fails for every entry rather than lose them silently. */
            if (st == QW_OK)
                st = qwi_logprobs_plan_seq(&e->plan, i, &r->lp, so.entries[i].seq, so.entries[i].num_new_tokens);
            /* The samples of a QW_REQ_N request fork from its first row. */
            if (plan->do_sample[i] && (r->logits_fn || r->fork_pending) &&
                qwi_plan_buffers_need_logits(&e->plan) == QW_OK) {
                e->plan.want_logits[i] = 1;
                plan->logits_out = e->plan.logits;
            }
            if (r->t_scheduled < 0) r->t_scheduled = t0;
            leave_waiting_count(e, r);
            /* A decode row is the one token sampled last step; all else is prefill. */
            const int32_t generated = r->seq.num_tokens - r->seq.num_prompt_tokens;
            bool decode = so.entries[i].num_new_tokens == 1 && generated > 0 &&
                          r->seq.num_computed_tokens == r->seq.num_tokens - 1;
            e->stats.prompt_tokens += (uint64_t)(so.entries[i].num_new_tokens - (decode ? 1 : 0));
        }
        double tf = qwi_now();
        if (st == QW_OK) {
            qwi_forward_check_arm(plan);
            st = e->backend->ops->forward(e->backend, plan);
        }
        forward_s = qwi_now() - tf;
        /* nothing a backend got wrong reaches a request (forward_check.h) */
        if (st == QW_OK) st = qwi_forward_check(plan, e->vocab_size, e->backend->ops->name);
        e->stats.steps++;
        e->stats.last_batch = (uint64_t)so.num_entries;
        e->stats.batch_sum += (uint64_t)so.num_entries;
        if (st != QW_OK) {
            for (int32_t i = 0; i < so.num_entries; i++) {
                qw_request *r = so.entries[i].seq->owner;
                finish_request(e, r, QW_FINISH_ERROR);
                emit(e, r, QW_EVENT_FINISHED, -1, QW_FINISH_ERROR);
            }
        } else {
            qwi_sched_commit(&e->sched, &so);
            double now = qwi_now();
            for (int32_t i = 0; i < so.num_entries; i++) {
                qw_request *r = so.entries[i].seq->owner;
                qwi_logprobs_store_prompt(&r->lp, plan, i);
                if (!plan->do_sample[i]) continue;
                qwi_logprobs_store_sampled(&r->lp, plan, i, r->seq.num_tokens - r->seq.num_prompt_tokens);
                const float *row = e->plan.want_logits[i] ? e->plan.logits + (size_t)i * (size_t)e->vocab_size : NULL;
                /* Before r's token, which may finish r and free its KV. */
                bool forked = r->fork_pending && fork_samples(e, r, row != NULL);
                if (row && r->logits_fn) r->logits_fn(r->logits_user, r, r->seq.num_tokens, row, e->vocab_size);
                if (r->t_first_token < 0) r->t_first_token = now;
                e->stats.generation_tokens++;
                qw_status ast = accept_token(e, r, plan->sampled[i]);
                if (ast != QW_OK) st = ast;
                if (forked && (ast = sample_forked(e, r, row, now)) != QW_OK) st = ast;
            }
        }
        for (int32_t i = 0; i < so.num_entries; i++) {
            qw_request *r = so.entries[i].seq->owner;
            if (atomic_load(&r->state) == QW_STATE_QUEUED) atomic_store(&r->state, QW_STATE_RUNNING);
        }
    }
    /* Preempted requests are queued again. */
    for (int32_t i = 0; i < e->sched.num_waiting; i++) {
        qw_request *r = e->sched.waiting[i]->owner;
        if (atomic_load(&r->state) == QW_STATE_RUNNING) atomic_store(&r->state, QW_STATE_QUEUED);
    }
    e->stats.forward_seconds += forward_s;
    e->stats.host_seconds += qwi_now() - t0 - forward_s;
    *n_out = events_deliver(e, events, cap, event_size);
    return st;
}

QW_API qw_status qw_engine_step(qw_engine *e, void *events, size_t cap, size_t event_size, size_t *n_out) {
    QWI_ERR_SCOPE(e);
    qw_status st = step_once(e, events, cap, event_size, n_out);
    if (e) qwi_engine_after_step(e);
    return st;
}

/* Release the KV of the idle session used least recently. Its full blocks
 * stay in the prefix cache, so its next request finds what survives. */
bool qwi_engine_reclaim_idle_session(void *ctx) {
    qw_engine *e = ctx;
    qw_session *victim = NULL;
    /* No busy check (which a submit could make stale the moment it is read):
     * a running request holds its session's table, so a session that still
     * has blocks is idle, or has a request in the inbox that borrows the
     * table at the next drain, on this thread, and recomputes what goes
     * here. The table is step-thread state either way. */
    for (qw_session *ses = e->sessions; ses; ses = ses->next) {
        if (ses->table.num_blocks == 0) continue;
        if (!victim || ses->last_used < victim->last_used) victim = ses;
    }
    if (!victim) return false;
    qwi_kv_release(&e->kv, &victim->table);
    victim->num_computed = 0;
    return true;
}

QW_API qw_status qw_engine_get_stats(const qw_engine *e, qw_engine_stats *out, size_t out_size) {
    QWI_ERR_SCOPE(e);
    if (!e || !out) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_engine_get_stats: engine or out is NULL");
    if (out_size < sizeof(uint64_t))
        return qwi_fail(QW_ERR_BUFFER_TOO_SMALL, "qw_engine_get_stats: out_size %zu is too small", out_size);
    qw_engine_stats st;
    memset(&st, 0, sizeof st);
    st.num_running = (uint64_t)e->sched.num_running;
    st.num_waiting = (uint64_t)e->sched.num_waiting;
    for (int32_t i = 0; i < e->sched.num_waiting; i++)
        st.num_preempted_waiting += e->sched.waiting[i]->num_preemptions > 0;
    st.kv_blocks_total = (uint64_t)e->kv.num_blocks;
    st.kv_blocks_used = (uint64_t)qwi_kv_num_used(&e->kv);
    st.kv_blocks_cached_free = (uint64_t)e->kv.num_evictable;
    st.prefix_cache_queries = e->sched.prefix_queries;
    st.prefix_cache_hits = e->sched.prefix_hits;
    st.prompt_tokens = e->stats.prompt_tokens;
    st.generation_tokens = e->stats.generation_tokens;
    st.num_steps = e->stats.steps;
    st.last_batch_size = e->stats.last_batch;
    st.mean_batch_size = e->stats.steps ? (double)e->stats.batch_sum / (double)e->stats.steps : 0;
    st.num_preemptions = e->sched.total_preemptions;
    st.forward_seconds = e->stats.forward_seconds;
    st.host_seconds = e->stats.host_seconds;
    st.num_finished = e->stats.finished;
    size_t n = out_size < sizeof st ? out_size : sizeof st;
    st.size = n;
    memcpy(out, &st, n);
    if (out_size > sizeof st) memset((char *)out + sizeof st, 0, out_size - sizeof st);
    return QW_OK;
}

