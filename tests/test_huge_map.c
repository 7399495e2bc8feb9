/*
 * test_huge_map.c - the CPU backend's 2 MiB-aligned anonymous mappings
 * (cpu/huge_map.h): the usable part starts on a 2 MiB boundary, is zero
 * and writable over every byte asked for (the KV pool relies on both),
 * sizes of 0 and ones that overflow are refused with nothing mapped, and
 * release is idempotent. Whether the kernel backs it with huge pages is
 * the machine's choice (THP), so it is not asserted.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "cpu/huge_map.h"

#define MIB ((size_t)1 << 20)

Test(huge_map, usable_part_is_aligned_zeroed_and_writable) {
    const size_t sizes[] = { 1, 4096, 2 * MIB, 2 * MIB + 1, 5 * MIB + 123 };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        qwi_huge_map m;
        cr_assert(qwi_huge_map_create(sizes[i], &m), "%zu bytes", sizes[i]);
        cr_assert_not_null(m.map);
        cr_assert_eq((uintptr_t)m.base % (2 * MIB), 0, "base not on a 2 MiB boundary");
        cr_assert((char *)m.base >= (char *)m.map);
        cr_assert((char *)m.base + sizes[i] <= (char *)m.map + m.map_len, "usable part past the map");
        for (size_t off = 0; off < sizes[i]; off += 4096) cr_assert_eq(m.base[off], 0);
        cr_assert_eq(m.base[sizes[i] - 1], 0);
        memset(m.base, 0x5a, sizes[i]);
        cr_assert_eq(m.base[sizes[i] - 1], 0x5a);
        qwi_huge_map_release(&m);
        cr_assert_null(m.map);
        cr_assert_null(m.base);
        qwi_huge_map_release(&m);   /* idempotent */
    }
}

Test(huge_map, zero_and_overflowing_sizes_are_refused) {
    qwi_huge_map m;
    memset(&m, 0x77, sizeof m);
    cr_assert_not(qwi_huge_map_create(0, &m));
    cr_assert_null(m.map);
    cr_assert_null(m.base);
    cr_assert_not(qwi_huge_map_create(SIZE_MAX, &m));
    cr_assert_null(m.map);
    cr_assert_not(qwi_huge_map_create(SIZE_MAX - MIB, &m));
    cr_assert_null(m.map);
    qwi_huge_map_release(&m);   /* holds nothing: no-op */
}
