/*
 * huge_map.c - 2 MiB-aligned anonymous mappings advised for transparent
 * huge pages (huge_map.h).
 */
#include "cpu/huge_map.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)

bool qwi_huge_map_create(size_t bytes, qwi_huge_map *m) {
    memset(m, 0, sizeof *m);
    if (bytes == 0 || bytes > SIZE_MAX - 2 * HUGE_PAGE) return false;
    const size_t len = (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    /* over-map by one huge page so the usable part can start on a 2 MiB
     * boundary, where the kernel can back it with huge pages */
    const size_t map_len = len + HUGE_PAGE;
    void *p = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    m->map = p;
    m->map_len = map_len;
    m->base = (char *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
#ifdef MADV_HUGEPAGE
    madvise(m->base, len, MADV_HUGEPAGE);   /* advisory: 4 KiB pages if THP is off */
#endif
    return true;
}

void qwi_huge_map_release(qwi_huge_map *m) {
    if (m->map) munmap(m->map, m->map_len);
    memset(m, 0, sizeof *m);
}
