/*
 * progress.h - qw_engine_create's progress callback: bytes of weights
 * processed out of a total fixed up front, reported from the creating
 * thread only, and the host's answer (nonzero: cancel) turned into
 * QW_ERR_CANCELLED, which unwinds the create like any other failure.
 */
#ifndef QWI_PROGRESS_H
#define QWI_PROGRESS_H

#include "common.h"

typedef struct qwi_progress {
    qw_progress_fn fn;      /* NULL: no reporting, never cancelled        */
    void *user_data;
    uint64_t done, total;
} qwi_progress;

/* Count bytes more as done (capped at total) and call fn. QW_OK, or
 * QW_ERR_CANCELLED with a message when fn returns nonzero. p NULL or
 * without fn: QW_OK. Creating thread only. */
qw_status qwi_progress_add(qwi_progress *p, uint64_t bytes);
/* The last report, done == total (skipped if an earlier one was already
 * that). Same results as qwi_progress_add. */
qw_status qwi_progress_finish(qwi_progress *p);

#endif
