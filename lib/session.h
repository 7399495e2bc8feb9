/*
 * session.h - the internal layout of qw_session: a conversation's token
 * history and the KV blocks that hold it between requests.
 *
 * Ownership: the session owns its history and, while idle, its block table
 * (references into the pool). While one of its requests runs, the table is
 * lent to that request's sequence and comes back when it finishes. The
 * engine keeps every session in a list, to reclaim idle sessions' blocks
 * under pressure and to detach sessions the host forgot to destroy.
 *
 * Threads: a submit on any thread reads and grows the history and sets busy
 * (engine.c, prepare_session_request), so every access to engine, busy,
 * dead and the history (tokens, num_tokens, capacity) holds mu. The block
 * table, num_computed, last_used and the list links are step-thread state.
 * The memory itself is reference counted: the host's handle plus one per
 * request set to the session, so a request never points at freed memory;
 * qw_session_destroy marks the session dead (a later submit is refused),
 * frees its history and KV, and drops the host's reference.
 */
#ifndef QWI_SESSION_H
#define QWI_SESSION_H

#include <pthread.h>
#include <stdatomic.h>

#include "kv.h"

struct qw_engine;

struct qw_session {
    struct qw_engine *engine;      /* NULL once the engine is gone           */
    pthread_mutex_t mu;            /* guards engine, busy, dead, the history  */
    atomic_int refs;               /* the host's + one per request set to it */
    bool busy;                     /* a request is queued or running         */
    bool dead;                     /* destroyed; kept only for requests      */
    int32_t *tokens;               /* history                                 */
    int32_t num_tokens, capacity;
    qwi_block_table table;         /* KV of the history's first num_computed  */
    int32_t num_computed;
    uint64_t last_used;            /* engine step when it last finished work  */
    struct qw_session *prev, *next;
};

/* Take a reference for a request that points at s. Any thread. */
void qwi_session_ref(struct qw_session *s);
/* Drop a reference; the last one frees what is left of s (its lock and the
 * struct; qw_session_destroy already freed the history and KV). Any thread. */
void qwi_session_unref(struct qw_session *s);

#endif
