/*
 * huge_map.h - anonymous memory on 2 MiB boundaries, advised for
 * transparent huge pages: what the CPU backend keeps its big arrays in
 * (the packed weights, the KV pool).
 *
 * Why: decode streams the weights and, at long contexts, reads the KV
 * cache in 4 KiB runs scattered over a pool of a GiB or more (one run per
 * (block, kv head) plane). With 4 KiB pages nearly every run costs a TLB
 * miss and a page walk; with 2 MiB pages a few hundred entries cover the
 * pool. The advice is only advice: with THP off the mapping still works,
 * with 4 KiB pages. Pages are zero-filled by the kernel on first touch,
 * so an untouched part costs address space, not memory.
 */
#ifndef QWI_CPU_HUGE_MAP_H
#define QWI_CPU_HUGE_MAP_H

#include "common.h"

typedef struct qwi_huge_map {
    void *map;        /* what mmap returned; NULL: nothing mapped */
    size_t map_len;   /* bytes mapped at map                      */
    char *base;       /* the 2 MiB-aligned start of the usable bytes */
} qwi_huge_map;

/* Map `bytes` (> 0) of zero-filled, read-write anonymous memory starting
 * at m->base on a 2 MiB boundary, rounded up to whole 2 MiB pages and
 * advised MADV_HUGEPAGE. Returns false with *m zeroed when bytes is 0, the
 * size overflows or mmap fails; sets no qwi_last_error (the caller says
 * what the memory was for). Release with qwi_huge_map_release. */
bool qwi_huge_map_create(size_t bytes, qwi_huge_map *m);

/* Unmap what m holds and zero it; nothing when m holds nothing. */
void qwi_huge_map_release(qwi_huge_map *m);

#endif
