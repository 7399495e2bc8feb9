/*
 * decode_splits.h - how decode attention divides one sequence's context
 * among thread blocks (split-K over KV positions, flash-decoding style),
 * shared by the kernel (cuda/attention.cu), the backend's buffer sizing
 * and the host tests.
 *
 * The split depends on the sequence's own context length and nothing else:
 * not the batch, not the device's multiprocessor count. The order in which
 * a sequence's scores and values are summed is fixed by its splits, so a
 * sequence gets the same bits whether it decodes alone, beside 255 others,
 * or beside prefill chunks in a mixed step (batched == alone for the
 * attention; docs/cuda.md, Limits). The cost is parallelism for short
 * contexts at batch 1 (a 200-position context is one split: 200 positions
 * per block, a few microseconds) and partials written and merged at large
 * batches with long contexts (a 256-position split of a bf16 cache reads
 * 32 times the bytes of its f32 partial at 8 query heads a KV head, 16
 * times over an fp8 cache).
 *
 * Plain C with inline functions: includable from C (tests, cuda_host.c)
 * and from device code.
 */
#ifndef QWI_CUDA_DECODE_SPLITS_H
#define QWI_CUDA_DECODE_SPLITS_H

#include <stdint.h>

#ifdef __CUDACC__
#define QWI_DS_FN __host__ __device__ static inline
#else
#define QWI_DS_FN static inline
#endif

/* Most splits of one sequence; the partial buffers hold this many per
 * (sequence, query head). */
#define QWI_CUDA_DECODE_MAX_SPLITS 16
/* Fewest context positions a split is given before the context is split
 * again: below 2 x this a sequence is one split (no partials, no merge). */
#define QWI_CUDA_DECODE_SPLIT_MIN 256

/* Splits of a sequence whose context holds ctx positions: 1 for ctx <=
 * QWI_CUDA_DECODE_SPLIT_MIN, one more per QWI_CUDA_DECODE_SPLIT_MIN
 * positions, at most QWI_CUDA_DECODE_MAX_SPLITS. */
QWI_DS_FN int32_t qwi_cuda_decode_splits(int32_t ctx) {
    int32_t n = (ctx + QWI_CUDA_DECODE_SPLIT_MIN - 1) / QWI_CUDA_DECODE_SPLIT_MIN;
    return n < 1 ? 1 : n > QWI_CUDA_DECODE_MAX_SPLITS ? QWI_CUDA_DECODE_MAX_SPLITS : n;
}

/* Positions per split for a context of ctx: ctx / splits rounded up to a
 * multiple of 16. Split i covers [i * len, min(ctx, (i + 1) * len)); every
 * one of the qwi_cuda_decode_splits(ctx) splits is non-empty. */
QWI_DS_FN int32_t qwi_cuda_decode_split_len(int32_t ctx) {
    int32_t n = qwi_cuda_decode_splits(ctx);
    int32_t per = (ctx + n - 1) / n;
    return (per + 15) & ~15;
}

#undef QWI_DS_FN
#endif
