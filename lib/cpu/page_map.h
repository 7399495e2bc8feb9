/*
 * page_map.h - anonymous memory for the CPU backend's big arrays, with the
 * page size chosen per array: the packed weights on 2 MiB transparent huge
 * pages, the KV pool on 4 KiB pages.
 *
 * Why the weights are huge: decode streams every weight byte each step, in
 * order, and 2 MiB pages spare that stream a TLB miss and a page walk per
 * 4 KiB (the copy has been mapped so since it was introduced; it is
 * written once, at load, so the pages' zeroing is paid once).
 *
 * Why the KV pool is not: the pool is [layer][K|V][block], so a fresh
 * block touches one page of every layer's K and V. With 2 MiB pages that
 * commits, and has the kernel zero, 2 MiB per layer plane at a time (1,024
 * tokens' worth on the 0.6B shape with bf16 KV); with 4 KiB pages about a
 * block's bytes. Measured end to end on a Zen 5 KVM guest
 * (docs/benchmarks.md, "The KV pool back on 4 KiB pages"): huge pages made
 * 512-token prefill ~7% and 32-way decode ~9% slower (page zeroing was 6.7%
 * of the decode profile, against none visible with 4 KiB pages) and peak RSS
 * ~110 MiB higher, against a 3-10% gain in the attention-only benchmark.
 *
 * QWI_PAGES_SMALL is advised MADV_NOHUGEPAGE, so the choice holds where THP
 * is `always` too. Advice is only advice: with THP off a huge mapping still
 * works, with 4 KiB pages. Pages are zero-filled by the kernel on first
 * touch, so an untouched part costs address space, not memory.
 */
#ifndef QWI_CPU_PAGE_MAP_H
#define QWI_CPU_PAGE_MAP_H

#include "common.h"

typedef enum qwi_page_size {
    QWI_PAGES_SMALL,   /* the system's base pages, never huge pages  */
    QWI_PAGES_HUGE     /* 2 MiB aligned, advised MADV_HUGEPAGE       */
} qwi_page_size;

typedef struct qwi_page_map {
    void *map;        /* what mmap returned; NULL: nothing mapped              */
    size_t map_len;   /* bytes mapped at map                                   */
    char *base;       /* the usable bytes: map itself, or (huge) the first
                         2 MiB boundary in it                                  */
} qwi_page_map;

/* Map `bytes` (> 0) of zero-filled, read-write anonymous memory at m->base,
 * with the page size `pages` asks for (huge: base on a 2 MiB boundary, the
 * usable part rounded up to whole 2 MiB pages). Returns false with *m
 * zeroed when bytes is 0, the size overflows or mmap fails; sets no
 * qwi_last_error (the caller says what the memory was for). Release with
 * qwi_page_map_release. */
bool qwi_page_map_create(size_t bytes, qwi_page_size pages, qwi_page_map *m);

/* Unmap what m holds and zero it; nothing when m holds nothing. */
void qwi_page_map_release(qwi_page_map *m);

#endif
