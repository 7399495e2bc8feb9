/*
 * progress.c - see progress.h.
 */
#include "progress.h"

static qw_status report(qwi_progress *p) {
    if (p->fn(p->user_data, p->done, p->total) != 0)
        return qwi_fail(QW_ERR_CANCELLED, "qw_engine_create: cancelled by the progress callback at %llu of %llu bytes",
                        (unsigned long long)p->done, (unsigned long long)p->total);
    return QW_OK;
}

qw_status qwi_progress_add(qwi_progress *p, uint64_t bytes) {
    if (!p || !p->fn) return QW_OK;
    p->done = bytes >= p->total - p->done ? p->total : p->done + bytes;
    return report(p);
}

qw_status qwi_progress_finish(qwi_progress *p) {
    if (!p || !p->fn || p->done == p->total) return QW_OK;
    p->done = p->total;
    return report(p);
}
