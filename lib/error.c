/*
 * error.c - status names and the thread-local last-error message.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <stdlib.h>

#include "common.h"
#include "engine.h"
#include "error_scope.h"
#include "options.h"
#include "request.h"

#define QWI_ERRBUF 1024

static _Thread_local char qwi_errbuf[QWI_ERRBUF];
/* failures recorded by this thread: how an error scope tells that its call failed */
static _Thread_local uint64_t qwi_fail_count;

qw_status qwi_fail(qw_status status, const char *fmt, ...) {
    qwi_fail_count++;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(qwi_errbuf, sizeof qwi_errbuf, fmt, ap);
    va_end(ap);
    return status;
}

qw_status qwi_fail_prefix(qw_status status, const char *fmt, ...) {
    qwi_fail_count++;
    char prefix[QWI_ERRBUF];
    char old[QWI_ERRBUF];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, qwi_errbuf, sizeof old);
    size_t n = strlen(prefix);
    if (n > QWI_ERRBUF - 3) n = QWI_ERRBUF - 3;
    memcpy(qwi_errbuf, prefix, n);
    qwi_errbuf[n] = ':';
    qwi_errbuf[n + 1] = ' ';
    size_t room = QWI_ERRBUF - n - 2;
    size_t m = strnlen(old, room - 1);
    memcpy(qwi_errbuf + n + 2, old, m);
    qwi_errbuf[n + 2 + m] = '\0';
    return status;
}

const char *qwi_last_error(void) { return qwi_errbuf; }

QW_API const char *qw_last_error(void) { return qwi_errbuf; }

/* ---- per-object messages (error_scope.h) ---------------------------------- */

static void slot_lock(qwi_err_slot *s) {
    int expected = 0;
    while (!atomic_compare_exchange_weak(&s->lock, &expected, 1)) expected = 0;
}
static void slot_unlock(qwi_err_slot *s) { atomic_store(&s->lock, 0); }

qwi_err_scope qwi_err_scope_begin(qwi_err_slot *slot) {
    qwi_err_scope sc = {slot, qwi_fail_count};
    return sc;
}

void qwi_err_scope_end(qwi_err_scope *sc) {
    if (!sc->slot || qwi_fail_count == sc->fails_at_entry) return;
    slot_lock(sc->slot);
    if (!sc->slot->msg) sc->slot->msg = malloc(QWI_ERRBUF);
    if (sc->slot->msg) memcpy(sc->slot->msg, qwi_errbuf, QWI_ERRBUF);
    slot_unlock(sc->slot);
}

qw_status qwi_err_slot_get(const qwi_err_slot *cslot, char *buf, size_t cap, size_t *len_out) {
    qwi_err_slot *slot = (qwi_err_slot *)cslot;   /* the lock is logically mutable */
    slot_lock(slot);
    const char *m = slot->msg ? slot->msg : "";
    size_t len = strlen(m);
    if (cap > 0) {
        size_t n = len < cap - 1 ? len : cap - 1;
        memcpy(buf, m, n);
        buf[n] = '\0';
    }
    slot_unlock(slot);
    if (len_out) *len_out = len;
    return QW_OK;
}

void qwi_err_slot_free(qwi_err_slot *slot) {
    free(slot->msg);
    slot->msg = NULL;
}

/* The same message would be lost if read through qw_last_error on another
 * OS thread; these read the object's own copy. */
static qw_status get_error(const qwi_err_slot *slot, const char *fn, char *buf, size_t cap, size_t *len_out) {
    if (len_out) *len_out = 0;
    if (!slot || !len_out || (!buf && cap > 0))
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "%s: NULL object or len_out, or NULL buf with cap > 0", fn);
    return qwi_err_slot_get(slot, buf, cap, len_out);
}

QW_API qw_status qw_request_get_error(const qw_request *req, char *buf, size_t cap, size_t *len_out) {
    return get_error(req ? &req->err : NULL, "qw_request_get_error", buf, cap, len_out);
}
QW_API qw_status qw_engine_get_error(const qw_engine *engine, char *buf, size_t cap, size_t *len_out) {
    return get_error(engine ? &engine->err : NULL, "qw_engine_get_error", buf, cap, len_out);
}
QW_API qw_status qw_engine_options_get_error(const qw_engine_options *opts, char *buf, size_t cap,
                                             size_t *len_out) {
    return get_error(opts ? &opts->err : NULL, "qw_engine_options_get_error", buf, cap, len_out);
}

QW_API const char *qw_status_string(qw_status status) {
    switch (status) {
    case QW_OK: return "QW_OK: success";
    case QW_ERR_INVALID_ARGUMENT: return "QW_ERR_INVALID_ARGUMENT: invalid argument";
    case QW_ERR_OUT_OF_MEMORY: return "QW_ERR_OUT_OF_MEMORY: out of host memory";
    case QW_ERR_IO: return "QW_ERR_IO: input/output error";
    case QW_ERR_FORMAT: return "QW_ERR_FORMAT: malformed file";
    case QW_ERR_UNSUPPORTED: return "QW_ERR_UNSUPPORTED: not supported";
    case QW_ERR_INVALID_STATE: return "QW_ERR_INVALID_STATE: not allowed in this state";
    case QW_ERR_NO_DEVICE: return "QW_ERR_NO_DEVICE: device not available";
    case QW_ERR_TOKEN_OUT_OF_RANGE: return "QW_ERR_TOKEN_OUT_OF_RANGE: token id outside the vocabulary";
    case QW_ERR_TOO_LONG: return "QW_ERR_TOO_LONG: sequence longer than the max model length";
    case QW_ERR_KV_CAPACITY: return "QW_ERR_KV_CAPACITY: request can never fit the KV cache";
    case QW_ERR_BUFFER_TOO_SMALL: return "QW_ERR_BUFFER_TOO_SMALL: buffer too small";
    case QW_ERR_INTERNAL: return "QW_ERR_INTERNAL: internal error";
    case QW_ERR_EMPTY_PROMPT: return "QW_ERR_EMPTY_PROMPT: request has no prompt";
    case QW_ERR_SESSION_BUSY: return "QW_ERR_SESSION_BUSY: the session already runs a request";
    case QW_ERR_QUEUE_FULL: return "QW_ERR_QUEUE_FULL: too many requests waiting";
    case QW_ERR_CANCELLED: return "QW_ERR_CANCELLED: cancelled by the caller";
    }
    return "unknown status";
}

QW_API uint32_t qw_version_number(void) { return QW_VERSION_NUMBER; }

QW_API const char *qw_version_string(void) { return "0.1.0"; }
