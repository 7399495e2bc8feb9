/* qwgo.h - C helpers shared by the cgo preambles of this package. The event
 * array lives in C memory, so qw_engine_step never holds Go pointers. */
#ifndef QWGO_H
#define QWGO_H
#include <stdlib.h>
#include "qwinfer.h"

static inline qw_event *qwgo_events(size_t n) { return (qw_event *)calloc(n, sizeof(qw_event)); }
static inline qw_event *qwgo_event_at(qw_event *ev, size_t i) { return &ev[i]; }
#endif
