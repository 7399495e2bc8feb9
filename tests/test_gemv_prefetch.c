/*
 * test_gemv_prefetch.c - the batch-1 quantized GEMVs' prefetch distance
 * (cpu/gemv_prefetch.h): QWINFER_GEMV_PREFETCH, when valid, is the
 * distance for every kernel; an invalid value is ignored, and without one
 * each kernel keeps its own (or its core's: Zen 5's 2 KiB). The value is
 * read once per process, and each Criterion test runs in its own, so each
 * sets its environment first.
 */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "cpu/cpu_features.h"
#include "cpu/gemv_prefetch.h"

/* Without an override: the kernel's own distance, or this core's (the
 * vendor and family CPUID reports here). */
static void expect_tuned(void) {
    bool amd;
    int family;
    qwi_cpu_vendor_family(&amd, &family);
    cr_assert_eq(qwi_cpu_gemv_prefetch(256), qwi_cpu_gemv_prefetch_for_core(256, amd, family));
    cr_assert_eq(qwi_cpu_gemv_prefetch(512), qwi_cpu_gemv_prefetch_for_core(512, amd, family));
    cr_assert_eq(qwi_cpu_gemv_prefetch_default(256), qwi_cpu_gemv_prefetch(256));
}

Test(gemv_prefetch, each_kernel_keeps_its_distance_without_an_override) {
    unsetenv("QWINFER_GEMV_PREFETCH");
    expect_tuned();
}

Test(gemv_prefetch, zen5_takes_2_kib_other_cores_the_kernels_distance) {
    cr_assert_eq(qwi_cpu_gemv_prefetch_for_core(256, true, 0x1a), 2048);
    cr_assert_eq(qwi_cpu_gemv_prefetch_for_core(512, true, 0x1a), 2048);
    cr_assert_eq(qwi_cpu_gemv_prefetch_for_core(256, true, 0x19), 256);   /* Zen 3 and Zen 4 */
    cr_assert_eq(qwi_cpu_gemv_prefetch_for_core(512, true, 0x17), 512);   /* Zen 1 and 2 */
    cr_assert_eq(qwi_cpu_gemv_prefetch_for_core(256, false, 0x1a), 256);  /* not AMD */
    cr_assert_eq(qwi_cpu_gemv_prefetch_for_core(256, false, 6), 256);     /* Intel */
}

Test(gemv_prefetch, override_sets_every_kernels_distance) {
    setenv("QWINFER_GEMV_PREFETCH", "4096", 1);
    cr_assert_eq(qwi_cpu_gemv_prefetch(256), 4096);
    cr_assert_eq(qwi_cpu_gemv_prefetch(512), 4096);
}

Test(gemv_prefetch, override_of_zero_is_honoured) {
    setenv("QWINFER_GEMV_PREFETCH", "0", 1);
    cr_assert_eq(qwi_cpu_gemv_prefetch(256), 0);
}

/* An invalid value leaves every kernel its own distance. */
static void expect_ignored(const char *value) {
    setenv("QWINFER_GEMV_PREFETCH", value, 1);
    expect_tuned();
}

Test(gemv_prefetch, negative_override_is_ignored) { expect_ignored("-64"); }

Test(gemv_prefetch, override_past_64_kib_is_ignored) { expect_ignored("65537"); }

Test(gemv_prefetch, non_numeric_override_is_ignored) { expect_ignored("2k"); }

Test(gemv_prefetch, empty_override_is_ignored) { expect_ignored(""); }
