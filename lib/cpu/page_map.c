/*
 * page_map.c - anonymous mappings with a chosen page size (page_map.h).
 */
#include "cpu/page_map.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)

bool qwi_page_map_create(size_t bytes, qwi_page_size pages, qwi_page_map *m) {
    memset(m, 0, sizeof *m);
    if (bytes == 0 || bytes > SIZE_MAX - 2 * HUGE_PAGE) return false;
    const bool huge = pages == QWI_PAGES_HUGE;
    const size_t len = huge ? (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1) : bytes;
    /* huge: over-map by one huge page so the usable part can start on a
     * 2 MiB boundary, where the kernel can back it with huge pages */
    const size_t map_len = huge ? len + HUGE_PAGE : len;
    void *p = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    m->map = p;
    m->map_len = map_len;
    m->base = huge ? (char *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1)) : (char *)p;
    /* advisory both ways: without THP support the mapping is small pages */
#if defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
    madvise(m->base, len, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#endif
    return true;
}

void qwi_page_map_release(qwi_page_map *m) {
    if (m->map) munmap(m->map, m->map_len);
    memset(m, 0, sizeof *m);
}
