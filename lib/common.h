/*
 * common.h - what every internal module of libqwinfer shares: the error
 * channel, the export macro, small helpers. Internal: not installed.
 */
#ifndef QWI_COMMON_H
#define QWI_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "qwinfer.h"

#if defined(__GNUC__)
#  define QWI_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#  define QWI_PRINTF(a, b)
#endif

/* Record a failure for qw_last_error() in this thread and return status, so
 * callers write `return qwi_fail(QW_ERR_IO, "open %s: %s", p, strerror(e));`.
 * The message is formatted into a thread-local buffer (truncated at 1 KiB). */
qw_status qwi_fail(qw_status status, const char *fmt, ...) QWI_PRINTF(2, 3);

/* The thread-local message buffer, for modules that compose a message in
 * several parts (e.g. prefixing a file name to an inner error). */
const char *qwi_last_error(void);

/* Prefix the current thread-local message with "prefix: " (formatted) and
 * return status unchanged. Used to add context as an error propagates up. */
qw_status qwi_fail_prefix(qw_status status, const char *fmt, ...) QWI_PRINTF(2, 3);

#define QWI_MIN(a, b) ((a) < (b) ? (a) : (b))
#define QWI_MAX(a, b) ((a) > (b) ? (a) : (b))
#define QWI_DIV_UP(a, b) (((a) + (b) - 1) / (b))

#endif
