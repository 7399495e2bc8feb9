/*
 * gemv_prefetch.c - the batch-1 quantized GEMVs' prefetch distance
 * (gemv_prefetch.h).
 */
#include "cpu/gemv_prefetch.h"

#include <pthread.h>
#include <stdlib.h>

#include "cpu/cpu_features.h"

/* Zen 5 (AMD family 0x1A): the distance measured best there, for every
 * kernel (docs/benchmarks.md, "CPUID on a hot path; ..."): 0.6B batch-1
 * decode on two threads, 4-6 interleaved pairs each, took 5% (GPTQ int4),
 * 7% (AWQ), 11% (FP8) and 16% (GPTQ int8) less time than at the Zen 4
 * distances (256-512 bytes). */
#define ZEN5_BYTES 2048

/* -1: no override */
static int64_t override_bytes = -1;
static bool core_amd;
static int core_family;
static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;

static void resolve(void) {
    qwi_cpu_vendor_family(&core_amd, &core_family);
    const char *env = getenv("QWINFER_GEMV_PREFETCH");
    if (!env || !*env) return;
    char *end = NULL;
    const long v = strtol(env, &end, 10);
    if (*end == '\0' && v >= 0 && v <= 65536) override_bytes = v;
}

int64_t qwi_cpu_gemv_prefetch_for_core(int64_t tuned, bool amd, int family) {
    return amd && family == 0x1a ? ZEN5_BYTES : tuned;
}

int64_t qwi_cpu_gemv_prefetch_default(int64_t tuned) {
    pthread_once(&resolve_once, resolve);
    return qwi_cpu_gemv_prefetch_for_core(tuned, core_amd, core_family);
}

int64_t qwi_cpu_gemv_prefetch(int64_t tuned) {
    pthread_once(&resolve_once, resolve);
    return override_bytes >= 0 ? override_bytes
                               : qwi_cpu_gemv_prefetch_for_core(tuned, core_amd, core_family);
}
