/*
 * gemv_prefetch.h - how far ahead of its loads a batch-1 (M <= 2)
 * quantized GEMV prefetches each panel's codes.
 *
 * Those kernels decode between loads, so the hardware prefetchers alone
 * leave them waiting on memory, and the software prefetch distance that
 * hides it differs by core and by how many cores share the memory. Each
 * kernel keeps the distance measured best on Zen 4 (256 bytes; 512 for
 * fp8 through byte tables; 1 KiB was 15-30% slower there) as `tuned`; on
 * a core measured since (Zen 5, AMD family 0x1A: 2 KiB, docs/benchmarks.md)
 * that core's distance replaces it. QWINFER_GEMV_PREFETCH lets a benchmark
 * on a new core try any distance without a rebuild. No bit of any result
 * depends on it.
 */
#ifndef QWI_CPU_GEMV_PREFETCH_H
#define QWI_CPU_GEMV_PREFETCH_H

#include "common.h"

/* Bytes ahead per panel for a GEMV whose own distance is `tuned`:
 * QWINFER_GEMV_PREFETCH (decimal bytes, 0..65536; read once per process)
 * when set and valid, else qwi_cpu_gemv_prefetch_default(tuned).
 * Thread-safe; cannot fail. */
int64_t qwi_cpu_gemv_prefetch(int64_t tuned);

/* The distance without an override on this process's CPU (CPUID read
 * once): qwi_cpu_gemv_prefetch_for_core(tuned, AMD?, family). */
int64_t qwi_cpu_gemv_prefetch_default(int64_t tuned);

/* The distance on a core of that vendor (amd: CPUID's "AuthenticAMD") and
 * family (CPUID leaf 1, extended family added): 2048 on AMD family 0x1A
 * (Zen 5), else tuned. Pure. */
int64_t qwi_cpu_gemv_prefetch_for_core(int64_t tuned, bool amd, int family);

#endif
