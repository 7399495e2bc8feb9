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
    s->engine = e;
    s->last_used = e->sched.step;
    *out = s;
    return QW_OK;
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
    pthread_mutex_lock(&s->mu);
    bool busy = s->busy;
    pthread_mutex_unlock(&s->mu);
    if (busy)
        return qwi_fail(QW_ERR_SESSION_BUSY, "qw_session_destroy: a request of the session is still queued or running");
    if (s->engine) {
        qwi_kv_release(&s->engine->kv, &s->table);
        list_unlink(s->engine, s);
    }
    qwi_block_table_destroy(&s->table);
    free(s->tokens);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return QW_OK;
}

QW_API qw_status qw_session_fork(qw_session *src, qw_session **out) {
    if (!out) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_session_fork: out is NULL");
    *out = NULL;
    if (!src) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_session_fork: session is NULL");
    qw_engine *e = src->engine;
    if (!e) return qwi_fail(QW_ERR_INVALID_STATE, "qw_session_fork: the session's engine was destroyed");
    pthread_mutex_lock(&src->mu);
    bool busy = src->busy;
    pthread_mutex_unlock(&src->mu);
    if (busy) return qwi_fail(QW_ERR_SESSION_BUSY, "qw_session_fork: the session has a request queued or running");

    qw_session *s;
    qw_status st = session_new(e, &s);
    if (st != QW_OK) return st;
    if (src->num_tokens > 0) {
        s->tokens = malloc(sizeof(int32_t) * (size_t)src->capacity);
        if (!s->tokens) {
            qwi_block_table_destroy(&s->table);
            pthread_mutex_destroy(&s->mu);
            free(s);
            return qwi_fail(QW_ERR_OUT_OF_MEMORY, "qw_session_fork: history of %d tokens", src->num_tokens);
        }
        memcpy(s->tokens, src->tokens, sizeof(int32_t) * (size_t)src->num_tokens);
        s->num_tokens = src->num_tokens;
        s->capacity = src->capacity;
    }

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
    size_t n = (size_t)s->num_tokens;
    size_t copy = n < cap ? n : cap;
    if (copy) memcpy(buf, s->tokens, copy * sizeof *buf);
    *n_out = n;
    return QW_OK;
}

QW_API qw_status qw_request_set_session(qw_request *req, qw_session *session) {
    if (!req) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_request_set_session: request is NULL");
    if (atomic_load(&req->submit_claimed))
        return qwi_fail(QW_ERR_INVALID_STATE, "qw_request_set_session: request %llu is already submitted",
                        (unsigned long long)req->id);
    req->session = session;
    return QW_OK;
}
