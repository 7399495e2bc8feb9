/*
 * cpu_features.h - CPUID checks that __builtin_cpu_supports cannot make
 * with every compiler the project builds with, and the core's vendor and
 * family for per-core tuning (gemv_prefetch.c).
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

/* True when CPUID leaf 1 reports F16C (ECX bit 29). Read once (per
 * translation unit) and kept: in a virtual machine every CPUID traps to the
 * hypervisor (microseconds), and the kernel-table lookups that ask run on
 * hot paths - qwi_cpu_silu_mul_fast asks on every call, which made the
 * uncached check 1.4-2.7% of a decode or prefill step in a KVM guest.
 * Thread-safe: racing first callers store the same value. */
static inline bool qwi_cpu_has_f16c(void) {
    static int known = -1;   /* -1: not read yet */
    int v = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (v < 0) {
        unsigned a, b, c, d;
        v = __get_cpuid(1, &a, &b, &c, &d) ? (int)((c >> 29) & 1) : 0;
        __atomic_store_n(&known, v, __ATOMIC_RELAXED);
    }
    return v != 0;
}

/* True when CPUID leaf 7 subleaf 1 reports AVX-VNNI (EAX bit 4: vpdpwssd
 * and vpdpbusd on ymm, VEX encoded; Intel cores from Alder Lake, AMD's
 * from Zen 5). clang 14 rejects "avxvnni" in __builtin_cpu_supports, as
 * it does "f16c". CPUID each call: for once-per-process use (the kernel
 * tables are built once). Callers check "avx2" through the builtin too. */
static inline bool qwi_cpu_has_avxvnni(void) {
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7) return false;
    __cpuid_count(7, 0, a, b, c, d);
    if (a < 1) return false;   /* leaf 7's largest subleaf: 1 must exist */
    __cpuid_count(7, 1, a, b, c, d);
    return (a >> 4) & 1;
}

/* Whether CPUID's vendor is "AuthenticAMD", and the family of leaf 1 (the
 * extended family added where the base one is 0xF: Zen 3/4 are 0x19, Zen 5
 * 0x1A). CPUID each call (a VM exit in a guest): for once-per-process use. */
static inline void qwi_cpu_vendor_family(bool *amd, int *family) {
    unsigned a, b, c, d;
    *amd = false;
    *family = 0;
    if (__get_cpuid(0, &a, &b, &c, &d))   /* vendor string in ebx, edx, ecx */
        *amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        *family = (int)((a >> 8) & 0xf);
        if (*family == 0xf) *family += (int)((a >> 20) & 0xff);
    }
}
#else
static inline bool qwi_cpu_has_f16c(void) { return false; }
static inline bool qwi_cpu_has_avxvnni(void) { return false; }
static inline void qwi_cpu_vendor_family(bool *amd, int *family) {
    *amd = false;
    *family = 0;
}
#endif

#endif
