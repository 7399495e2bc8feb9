/*
 * test_page_map.c - the CPU backend's anonymous mappings (cpu/page_map.h):
 * for both page sizes the usable part is zero and writable over every byte
 * asked for (the KV pool relies on both); a huge mapping starts on a 2 MiB
 * boundary; a small one is not backed by huge pages even after it is
 * written (the KV pool's choice, which must hold where THP is `always`);
 * sizes of 0 and ones that overflow are refused with nothing mapped; and
 * release is idempotent. Whether the kernel backs a huge mapping with huge
 * pages is the machine's choice (THP), so that is not asserted.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cpu/page_map.h"

#define MIB ((size_t)1 << 20)

static void check_zeroed_and_writable(const qwi_page_map *m, size_t bytes) {
    cr_assert_not_null(m->map);
    cr_assert(m->base >= (char *)m->map);
    cr_assert(m->base + bytes <= (char *)m->map + m->map_len, "usable part past the map");
    for (size_t off = 0; off < bytes; off += 4096) cr_assert_eq(m->base[off], 0);
    cr_assert_eq(m->base[bytes - 1], 0);
    memset(m->base, 0x5a, bytes);
    cr_assert_eq(m->base[bytes - 1], 0x5a);
}

Test(page_map, both_sizes_are_zeroed_and_writable) {
    const size_t sizes[] = { 1, 4096, 2 * MIB, 2 * MIB + 1, 5 * MIB + 123 };
    for (int huge = 0; huge < 2; huge++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            qwi_page_map m;
            cr_assert(qwi_page_map_create(sizes[i], huge ? QWI_PAGES_HUGE : QWI_PAGES_SMALL, &m),
                      "%zu bytes, huge %d", sizes[i], huge);
            if (huge)
                cr_assert_eq((uintptr_t)m.base % (2 * MIB), 0, "base not on a 2 MiB boundary");
            else
                cr_assert_eq(m.base, (char *)m.map, "a small mapping is used from its start");
            check_zeroed_and_writable(&m, sizes[i]);
            qwi_page_map_release(&m);
            cr_assert_null(m.map);
            cr_assert_null(m.base);
            qwi_page_map_release(&m);   /* idempotent */
        }
}

/* AnonHugePages (kB) of the mapping that holds addr, from /proc/self/smaps;
 * -1 where that cannot be read. */
static long anon_huge_kb(const void *addr) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    bool in = false;
    long kb = -1;
    while (fgets(line, sizeof line, f)) {
        uintptr_t lo, hi;
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
            continue;
        }
        if (in && sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) break;
    }
    fclose(f);
    return kb;
}

Test(page_map, a_small_mapping_gets_no_huge_pages) {
    const size_t bytes = 16 * MIB;
    qwi_page_map m;
    cr_assert(qwi_page_map_create(bytes, QWI_PAGES_SMALL, &m));
    memset(m.base, 1, bytes);   /* every 2 MiB range fully touched: THP `always` would collapse it */
    long kb = anon_huge_kb(m.base);
    qwi_page_map_release(&m);
    if (kb < 0) cr_skip_test("/proc/self/smaps unreadable");
    cr_assert_eq(kb, 0, "a QWI_PAGES_SMALL mapping has %ld kB of huge pages", kb);
}

Test(page_map, zero_and_overflowing_sizes_are_refused) {
    for (int huge = 0; huge < 2; huge++) {
        const qwi_page_size ps = huge ? QWI_PAGES_HUGE : QWI_PAGES_SMALL;
        qwi_page_map m;
        memset(&m, 0x77, sizeof m);
        cr_assert_not(qwi_page_map_create(0, ps, &m));
        cr_assert_null(m.map);
        cr_assert_null(m.base);
        cr_assert_not(qwi_page_map_create(SIZE_MAX, ps, &m));
        cr_assert_null(m.map);
        cr_assert_not(qwi_page_map_create(SIZE_MAX - MIB, ps, &m));
        cr_assert_null(m.map);
        qwi_page_map_release(&m);   /* holds nothing: no-op */
    }
}
