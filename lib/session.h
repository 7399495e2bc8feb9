/*
 * session.h - the internal layout of qw_session: a conversation's token
 * history and the KV blocks that hold it between requests.
 *
 * Ownership: the session owns its history and, while idle, its block table
 * (references into the pool). While one of its requests runs, the table is
 * lent to that request's sequence and comes back when it finishes. The
 * engine keeps every session in a list, to reclaim idle sessions' blocks
 * under pressure and to detach sessions the host forgot to destroy.
 */
#ifndef QWI_SESSION_H
#define QWI_SESSION_H

#include <pthread.h>

#include "kv.h"

struct qw_engine;

struct qw_session {
    struct qw_engine *engine;      /* NULL once the engine is gone           */
    pthread_mutex_t mu;            /* guards busy and the history's size, the
                                      parts a submitting thread reads         */
    bool busy;                     /* a request is queued or running         */
    int32_t *tokens;               /* history                                 */
    int32_t num_tokens, capacity;
    qwi_block_table table;         /* KV of the history's first num_computed  */
    int32_t num_computed;
    uint64_t last_used;            /* engine step when it last finished work  */
    struct qw_session *prev, *next;
};

#endif
