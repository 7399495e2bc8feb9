/*
 * score_chunks.h - the loop nest of the AVX-512 attention score kernels
 * whose register block is a group of q heads x up to 4 chunks of 16
 * positions (kv_bf16_x86.c, kv_bf16dot_avx512.c, kv_fp8_vbmi.c,
 * kv_fp8_dot_x86.h).
 *
 *   QWI_SCORE_CHUNKS(G, nq, n, CHUNK)
 *
 * runs, for j0 = 0, 64, .. < n (outer: the 64 positions' K stays in L1 for
 * every group of heads) and h = 0, G, .. < nq (inner), CHUNK(QB, NC) with
 * QB = min(G, nq - h) heads and NC = min(4, ceil((n - j0) / 16)) chunks as
 * compile-time constants, so each block size is its own unrolled copy and
 * the last group or chunk runs only the vectors it needs. G is the literal
 * 4 or 6 (the group sizes the kernels' registers allow). CHUNK reads the
 * loop's j0 and h.
 */
#ifndef QWI_CPU_SCORE_CHUNKS_H
#define QWI_CPU_SCORE_CHUNKS_H

#include "common.h"

#define QWI_SCORE_CHUNKS(G, nq, n, CHUNK)                       \
    for (int32_t j0 = 0; j0 < (n); j0 += 64)                   \
        for (int32_t h = 0; h < (nq); h += (G))                \
            QWI_SCORE_HEADS_##G((nq) - h, CHUNK, (n) - j0)

#define QWI_SCORE_LANES_(CHUNK, QB, left)                       \
    switch (QWI_MIN(4, ((left) + 15) / 16)) {                   \
    case 1: CHUNK(QB, 1); break;                                \
    case 2: CHUNK(QB, 2); break;                                \
    case 3: CHUNK(QB, 3); break;                                \
    default: CHUNK(QB, 4); break;                               \
    }

#define QWI_SCORE_HEADS_4(heads, CHUNK, left)                   \
    switch (QWI_MIN(4, heads)) {                                \
    case 1: QWI_SCORE_LANES_(CHUNK, 1, left) break;             \
    case 2: QWI_SCORE_LANES_(CHUNK, 2, left) break;             \
    case 3: QWI_SCORE_LANES_(CHUNK, 3, left) break;             \
    default: QWI_SCORE_LANES_(CHUNK, 4, left) break;            \
    }

#define QWI_SCORE_HEADS_6(heads, CHUNK, left)                   \
    switch (QWI_MIN(6, heads)) {                                \
    case 1: QWI_SCORE_LANES_(CHUNK, 1, left) break;             \
    case 2: QWI_SCORE_LANES_(CHUNK, 2, left) break;             \
    case 3: QWI_SCORE_LANES_(CHUNK, 3, left) break;             \
    case 4: QWI_SCORE_LANES_(CHUNK, 4, left) break;             \
    case 5: QWI_SCORE_LANES_(CHUNK, 5, left) break;             \
    default: QWI_SCORE_LANES_(CHUNK, 6, left) break;            \
    }

#endif
