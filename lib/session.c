/*
 * session.c - qw_session: create, destroy, fork, history, and binding a
 * request to a session. How a session's request borrows and returns the KV
 * is in engine.c (drain_inbox, finish_request).
 */
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "session.h"

static void list_link(qw_engine *e, qw_session *s) {
    s->prev = NULL;
    s->next = e->sessions;
    if (e->sessions) e->sessions->prev = s;
    e->sessions = s;
}

static void list_unlink(qw_engine *e, qw_session *s) {
    if (s->prev) s->prev->next = s->next; else e->sessions = s->next;
    if (s->next) s->next->prev = s->prev;
    s->prev = s->next = NULL;
}

/* A new idle session of e with an empty history and a table able to hold a
 * full-length sequence. */
static qw_status session_new(qw_engine *e, qw_session **out) {
    qw_session *s = calloc(1, sizeof *s);
    if (!s) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "qw_session_create: out of memory");
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        free(s);
        return qwi_fail(QW_ERR_INTERNAL, "qw_session_create: pthread_mutex_init failed");
    }
    qw_status st = qwi_block_table_init(&s->table, &e->kv, e->max_model_len);
    if (st != QW_OK) {
        pthread_mutex_destroy(&s->mu);
        free(s);
        return st;
    }
    atomic_init(&s->refs, 1);
    s->engine = e;
    s->last_used = e->sched.step;
    *out = s;
    return QW_OK;
}

void qwi_session_ref(qw_session *s) { atomic_fetch_add(&s->refs, 1); }

void qwi_session_unref(qw_session *s) {
    if (atomic_fetch_sub(&s->refs, 1) != 1) return;
    /* The host's reference is dropped only by qw_session_destroy, so the
     * history and KV are already gone. */
    free(s->tokens);
    qwi_block_table_destroy(&s->table);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

QW_API qw_status qw_session_create(qw_engine *e, qw_session **out) {
    if (!out) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_session_create: out is NULL");
    *out = NULL;
    if (!e) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_session_create: engine is NULL");
    qw_session *s;
    qw_status st = session_new(e, &s);
    if (st != QW_OK) return st;
    list_link(e, s);
    *out = s;
    return QW_OK;
}

QW_API qw_status qw_session_destroy(qw_session *s) {
    if (!s) return QW_OK;
    /* Check and mark dead under one lock hold: a submit on another thread
     * either made the session busy first (refused here) or finds it dead
     * (refused there); never both, never neither. */
    pthread_mutex_lock(&s->mu);
    if (s->dead) {
        pthread_mutex_unlock(&s->mu);
        return qwi_fail(QW_ERR_INVALID_STATE, "qw_session_destroy: the session was already destroyed");
    }
    if (s->busy) {
        pthread_mutex_unlock(&s->mu);
        return qwi_fail(QW_ERR_SESSION_BUSY, "qw_session_destroy: a request of the session is still queued or running");
    }
    s->dead = true;
    qw_engine *e = s->engine;
    free(s->tokens);
    s->tokens = NULL;
    s->num_tokens = s->capacity = 0;
    pthread_mutex_unlock(&s->mu);
    /* The table and the list are step-thread state. */
    if (e) {
        qwi_kv_release(&e->kv, &s->table);
        list_unlink(e, s);
    }
    qwi_block_table_destroy(&s->table);
    qwi_session_unref(s);
    return QW_OK;
}

QW_API qw_status qw_session_fork(qw_session *src, qw_session **out) {
    if (!out) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_session_fork: out is NULL");
    *out = NULL;
    if (!src) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_session_fork: session is NULL");

    /* Check idle and copy the history under one lock hold: a submit on
     * another thread may make the session busy and reallocate its history
     * the moment the lock is free. The KV below is step-thread state: a
     * request submitted since borrows it only at the next step. */
    pthread_mutex_lock(&src->mu);
    qw_engine *e = src->engine;
    qw_status st = QW_OK;
    int32_t *hist = NULL, num_hist = src->num_tokens;
    if (src->dead)
        st = qwi_fail(QW_ERR_INVALID_STATE, "qw_session_fork: the session was destroyed");
    else if (!e)
        st = qwi_fail(QW_ERR_INVALID_STATE, "qw_session_fork: the session's engine was destroyed");
    else if (src->busy)
        st = qwi_fail(QW_ERR_SESSION_BUSY, "qw_session_fork: the session has a request queued or running");
    else if (num_hist > 0 && !(hist = malloc(sizeof(int32_t) * (size_t)num_hist)))
        st = qwi_fail(QW_ERR_OUT_OF_MEMORY, "qw_session_fork: history of %d tokens", num_hist);
    else if (num_hist > 0)
        memcpy(hist, src->tokens, sizeof(int32_t) * (size_t)num_hist);
    pthread_mutex_unlock(&src->mu);
    if (st != QW_OK) return st;

    qw_session *s;
    if ((st = session_new(e, &s)) != QW_OK) {
        free(hist);
        return st;
    }
    s->tokens = hist;
    s->num_tokens = s->capacity = num_hist;

    /* Full blocks are immutable: share them. */
    const int32_t bs = e->block_size;
    int32_t full = QWI_MIN(src->num_computed / bs, src->table.num_blocks);
    for (int32_t i = 0; i < full; i++) {
        qwi_kv_block_ref(&e->kv, src->table.blocks[i]);
        s->table.blocks[s->table.num_blocks++] = src->table.blocks[i];
    }
    s->table.num_hashed = QWI_MIN(src->table.num_hashed, full);
    s->table.last_key = s->table.num_hashed == src->table.num_hashed ? src->table.last_key : 0;
    if (s->table.num_hashed != src->table.num_hashed) s->table.num_hashed = 0;
    s->num_computed = full * bs;

    /* The partial last block will be appended to by both branches: copy it,
     * if a block is free; otherwise the fork recomputes those few tokens. */
    int32_t partial = src->num_computed - full * bs;
    if (partial > 0 && src->table.num_blocks > full && qwi_kv_can_reserve(&e->kv, &s->table, (int64_t)(full + 1) * bs) &&
        qwi_kv_reserve(&e->kv, &s->table, (int64_t)(full + 1) * bs) == QW_OK) {
        int32_t from = src->table.blocks[full], to = s->table.blocks[full];
        if (e->backend->ops->copy_blocks(e->backend, &from, &to, 1) == QW_OK) {
            s->num_computed = src->num_computed;
        } else {
            /* give the block back: the recompute path is always correct */
            s->table.num_blocks--;
            qwi_block_table t1 = {.blocks = &to, .num_blocks = 1, .capacity = 1};
            qwi_kv_release(&e->kv, &t1);
        }
    }
    s->last_used = e->sched.step;
    list_link(e, s);
    *out = s;
    return QW_OK;
}

QW_API qw_status qw_session_get_tokens(const qw_session *s, int32_t *buf, size_t cap, size_t *n_out) {
    if (!s || !n_out) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_session_get_tokens: session or n_out is NULL");
    if (cap > 0 && !buf) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_session_get_tokens: buf is NULL with cap %zu", cap);
    /* Under the lock: a submit on another thread may reallocate the history. */
    qw_session *ms = (qw_session *)s;
    pthread_mutex_lock(&ms->mu);
    if (ms->dead) {
        pthread_mutex_unlock(&ms->mu);
        return qwi_fail(QW_ERR_INVALID_STATE, "qw_session_get_tokens: the session was destroyed");
    }
    size_t n = (size_t)ms->num_tokens;
    size_t copy = n < cap ? n : cap;
    if (copy) memcpy(buf, ms->tokens, copy * sizeof *buf);
    pthread_mutex_unlock(&ms->mu);
    *n_out = n;
    return QW_OK;
}

QW_API qw_status qw_request_set_session(qw_request *req, qw_session *session) {
    QWI_ERR_SCOPE(req);
    if (!req) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_request_set_session: request is NULL");
    if (atomic_load(&req->submit_claimed))
        return qwi_fail(QW_ERR_INVALID_STATE, "qw_request_set_session: request %llu is already submitted",
                        (unsigned long long)req->id);
    if (session == req->session) return QW_OK;
    if (session) {
        pthread_mutex_lock(&session->mu);
        bool dead = session->dead;
        pthread_mutex_unlock(&session->mu);
        if (dead) return qwi_fail(QW_ERR_INVALID_STATE, "qw_request_set_session: the session was destroyed");
        /* The request's reference keeps the memory alive, so a submit racing
         * qw_session_destroy finds the session dead instead of freed. */
        qwi_session_ref(session);
    }
    if (req->session) qwi_session_unref(req->session);
    req->session = session;
    return QW_OK;
}
