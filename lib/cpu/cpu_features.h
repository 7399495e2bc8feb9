/*
 * cpu_features.h - CPUID checks that __builtin_cpu_supports cannot make
 * with every compiler the project builds with.
 *
 * Why: GCC's __builtin_cpu_supports knows "f16c"; clang 14 (Debian 12's,
 * which `make fuzz` uses for libFuzzer) rejects it at compile time
 * ("invalid cpu feature string"), so the kernel tables' run-time checks
 * read the bit from CPUID themselves. Callers still check "avx2" (or
 * "avx512f") through the builtin, which also covers the operating
 * system's saving of the ymm/zmm state that F16C's instructions need.
 */
#ifndef QWI_CPU_FEATURES_H
#define QWI_CPU_FEATURES_H

#include <stdbool.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* True when CPUID leaf 1 reports F16C (ECX bit 29). */
static inline bool qwi_cpu_has_f16c(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    return (c >> 29) & 1;
}
#else
static inline bool qwi_cpu_has_f16c(void) { return false; }
#endif

#endif
