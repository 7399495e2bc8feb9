/*
 * error.c - status names and the thread-local last-error message.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

#define QWI_ERRBUF 1024

static _Thread_local char qwi_errbuf[QWI_ERRBUF];

qw_status qwi_fail(qw_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(qwi_errbuf, sizeof qwi_errbuf, fmt, ap);
    va_end(ap);
    return status;
}

qw_status qwi_fail_prefix(qw_status status, const char *fmt, ...) {
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
    }
    return "unknown status";
}

QW_API uint32_t qw_version_number(void) { return QW_VERSION_NUMBER; }

QW_API const char *qw_version_string(void) { return "0.1.0"; }
