/*
 * error_scope.h - error messages that belong to an object, not to an OS
 * thread.
 *
 * qw_last_error() is per thread, which a runtime that moves work between
 * threads (Go's goroutines, a thread pool) cannot rely on: the thread that
 * reads it may not be the one whose call failed. So every public function
 * that takes a request, an engine or an options object opens an error scope
 * on that object with QWI_ERR_SCOPE at its first line; when the function
 * returns (the cleanup attribute runs qwi_err_scope_end on every return
 * path), a failure recorded during the call (qwi_fail counts them per
 * thread) is copied into the object's slot, where qw_request_get_error and
 * friends read it from any thread. Nested public calls each copy into their
 * own object. The slot's buffer is allocated at the first failure, so an
 * object that never fails costs two words.
 */
#ifndef QWI_ERROR_SCOPE_H
#define QWI_ERROR_SCOPE_H

#include <stdatomic.h>

#include "common.h"

typedef struct qwi_err_slot {
    atomic_int lock;   /* 0 free, 1 held (a short memcpy: a spin lock)      */
    char *msg;         /* NULL until the first failure; freed with the object */
} qwi_err_slot;

typedef struct qwi_err_scope {
    qwi_err_slot *slot;
    uint64_t fails_at_entry;
} qwi_err_scope;

/* Open a scope on slot (NULL: a no-op scope, e.g. for a NULL object). */
qwi_err_scope qwi_err_scope_begin(qwi_err_slot *slot);
/* Close it: copy this thread's message into the slot if a failure was
 * recorded since the scope began (allocation failure: the slot keeps its
 * old message). Called by the cleanup attribute. */
void qwi_err_scope_end(qwi_err_scope *scope);

/* unused: only the cleanup reads the variable, which clang would warn about. */
#define QWI_ERR_SCOPE(obj)                                                                  \
    qwi_err_scope qwi_err_scope_ __attribute__((cleanup(qwi_err_scope_end), unused)) =       \
        qwi_err_scope_begin((obj) ? (qwi_err_slot *)&(obj)->err : NULL)

/* The slot's message into buf (qw_chat_render's buffer convention: the
 * first min(len, cap - 1) bytes and a NUL when cap > 0, the full length in
 * *len_out; "" when no call on the object failed). Any thread. */
qw_status qwi_err_slot_get(const qwi_err_slot *slot, char *buf, size_t cap, size_t *len_out);
/* Free the slot's buffer (the object is being freed). */
void qwi_err_slot_free(qwi_err_slot *slot);

#endif
