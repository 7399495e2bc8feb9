/*
 * gemv_prefetch.c - the batch-1 quantized GEMVs' prefetch distance
 * (gemv_prefetch.h).
 */
#include "cpu/gemv_prefetch.h"

#include <pthread.h>
#include <stdlib.h>

/* -1: every kernel keeps its own tuned distance */
static int64_t override_bytes = -1;
static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;

static void resolve(void) {
    const char *env = getenv("QWINFER_GEMV_PREFETCH");
    if (!env || !*env) return;
    char *end = NULL;
    const long v = strtol(env, &end, 10);
    if (*end == '\0' && v >= 0 && v <= 65536) override_bytes = v;
}

int64_t qwi_cpu_gemv_prefetch(int64_t tuned) {
    pthread_once(&resolve_once, resolve);
    return override_bytes >= 0 ? override_bytes : tuned;
}
