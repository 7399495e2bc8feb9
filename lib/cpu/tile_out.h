/*
 * tile_out.h - the two steps every CPU panel kernel shares around its
 * register tiles: storing a finished 16-output tile (bias, then the
 * residual add) and walking a block of rows in tiles of a fixed height;
 * and a pointer the optimizer cannot see through (qwi_opaque_ptr).
 * One definition, so the order of the bias and residual adds - and with
 * it the bits every table must agree on - cannot drift between kernels.
 */
#ifndef QWI_CPU_TILE_OUT_H
#define QWI_CPU_TILE_OUT_H

#include <stdint.h>

/* out[j0 + s] for s < 16 and j0 + s < N: v = acc[s] (+ bias[j0 + s] when
 * bias), then out = accumulate ? out + v : v (two f32 additions, in that
 * order). out and bias point at the call's column 0; acc, bias and out do
 * not overlap. A whole tile takes the branch-free loops, which the
 * compiler turns into one vector load/add/store per 16 outputs (or 8):
 * the element-wise loop with its bound test stored one float at a time,
 * and in a prefill GEMM those stores (to an output that misses the cache)
 * were 15% of the kernel's time. */
static inline void qwi_put16(const float *restrict acc, int64_t j0, int64_t N,
                             const float *restrict bias, float *restrict out, int accumulate) {
    if (N - j0 >= 16) {
        float *restrict o = out + j0;
        if (bias && accumulate) {
            const float *restrict b = bias + j0;
            for (int s = 0; s < 16; s++) o[s] = o[s] + (acc[s] + b[s]);
        } else if (bias) {
            const float *restrict b = bias + j0;
            for (int s = 0; s < 16; s++) o[s] = acc[s] + b[s];
        } else if (accumulate) {
            for (int s = 0; s < 16; s++) o[s] = o[s] + acc[s];
        } else {
            for (int s = 0; s < 16; s++) o[s] = acc[s];
        }
        return;
    }
    for (int s = 0; s < 16 && j0 + s < N; s++) {
        float v = bias ? acc[s] + bias[j0 + s] : acc[s];
        out[j0 + s] = accumulate ? out[j0 + s] + v : v;
    }
}

/* Where the register tiles of one row block put their finished sums
 * themselves: row r of the block at o + r * ldo (the group's first
 * column), plus b (the bias at that column; NULL: none), added to what is
 * there when accumulate - qwi_put16's arithmetic, in its order, for a
 * group whose panels are all whole. o == NULL: the tiles leave their sums
 * in the kernel's scratch for qwi_put16 (a group with a partial panel).
 * Stored by each tile as it finishes, the output lines drain while the
 * next tile computes; stored by the driver in one burst after the block,
 * they missed the cache together (~7% of a 0.6B prefill, perf). */
typedef struct {
    float *o;
    int64_t ldo;
    const float *b;
    int accumulate;
} qwi_tile_dest;

/* The destination of a row block's group of panels: columns [c, c + w) of
 * the rows from o (the block's first row at column 0, row stride ldo), the
 * bias from column c; o NULL when the group runs past column N (a partial
 * panel: the driver stores through qwi_put16). */
static inline qwi_tile_dest qwi_tile_dest_group(float *o, int64_t ldo, int64_t c, int64_t w,
                                                int64_t N, const float *bias, int accumulate) {
    const qwi_tile_dest d = { c + w <= N ? o + c : NULL, ldo, bias ? bias + c : NULL, accumulate };
    return d;
}

/* d for the tile whose first row is row r of d's block (NULL stays NULL). */
static inline qwi_tile_dest qwi_tile_dest_rows(qwi_tile_dest d, int64_t r) {
    if (d.o) d.o += r * d.ldo;
    return d;
}

/* Rows [0, mb) in tiles of 5 and then 4 rows where mb is not a multiple of
 * 5 but a sum of 5s and 4s (every such mb from 12 on), else as
 * QWI_ROW_TILES(5, ...): for tiles of two
 * FMA phases in AVX2's 16 registers, 4 rows still have the 8 independent
 * chains two FMA pipes need and 1-3 rows do not, so 32 rows as 5 x 4 +
 * 4 x 3 beat 5 x 6 + 2. TILE(first row, rows) as in QWI_ROW_TILES. */
#define QWI_ROW_TILES_5_4(mb, TILE)                                                             \
    do {                                                                                        \
        const int64_t m5_ = (mb) % 5, fours_ = m5_ ? 5 - m5_ : 0;                               \
        if (m5_ && (mb) >= 4 * fours_) {                                                        \
            int64_t r_ = 0;                                                                     \
            for (; r_ + 4 * fours_ < (mb); r_ += 5) TILE(r_, 5);                                \
            for (; r_ < (mb); r_ += 4) TILE(r_, 4);                                             \
        } else {                                                                                \
            QWI_ROW_TILES(5, (mb), TILE);                                                       \
        }                                                                                       \
    } while (0)

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* One zmm accumulator (outputs 16q..16q+15 of row r) to d: the AVX-512
 * tiles' end of the last k block, qwi_put16's two additions in its order. */
static inline __attribute__((always_inline, target("avx512f"))) void
qwi_tile_dest_put_zmm(const qwi_tile_dest *d, int64_t r, int q, __m512 acc) {
    float *o = d->o + r * d->ldo + q * 16;
    if (d->b) acc = _mm512_add_ps(acc, _mm512_loadu_ps(d->b + q * 16));
    if (d->accumulate) acc = _mm512_add_ps(_mm512_loadu_ps(o), acc);
    _mm512_storeu_ps(o, acc);
}

/* The same for 8 outputs from a ymm accumulator: outputs c..c+7 of row r
 * (the AVX2 tiles; c a multiple of 8 within the group's whole panels). */
static inline __attribute__((always_inline, target("avx"))) void
qwi_tile_dest_put_ymm(const qwi_tile_dest *d, int64_t r, int c, __m256 acc) {
    float *o = d->o + r * d->ldo + c;
    if (d->b) acc = _mm256_add_ps(acc, _mm256_loadu_ps(d->b + c));
    if (d->accumulate) acc = _mm256_add_ps(_mm256_loadu_ps(o), acc);
    _mm256_storeu_ps(o, acc);
}
#endif

/* p, with the optimizer unable to tell that it is p: the AVX2 tiles read
 * their weights and x twice per pair (once per FMA phase) through it, so
 * that GCC loads them again from L1 instead of keeping the first load's
 * values live across the phase - in AVX2's 16 registers that spilled
 * accumulators. */
static inline const void *qwi_opaque_ptr(const void *p) {
#if defined(__GNUC__) || defined(__clang__)
    __asm__("" : "+r"(p));
#endif
    return p;
}

/* Rows [0, mb) in tiles of TMR rows (a constant, TMR <= 6), the rest in
 * one smaller tile: TILE(first row, rows) with a constant row count, so
 * each tile height compiles to its own unrolled body (and none of TMR
 * rows or more is instantiated for the rest, so a tile's arrays can be
 * sized for TMR). */
#define QWI_ROW_TILES(TMR, mb, TILE)                                                              \
    do {                                                                                          \
        int64_t r_ = 0;                                                                           \
        for (; r_ + (TMR) <= (mb); r_ += (TMR)) TILE(r_, TMR);                                    \
        switch ((mb) - r_) {                                                                      \
        case 5: if ((TMR) > 5) TILE(r_, 5); break;                                                \
        case 4: if ((TMR) > 4) TILE(r_, 4); break;                                                \
        case 3: if ((TMR) > 3) TILE(r_, 3); break;                                                \
        case 2: if ((TMR) > 2) TILE(r_, 2); break;                                                \
        case 1: if ((TMR) > 1) TILE(r_, 1); break;                                                \
        default: break;                                                                           \
        }                                                                                         \
    } while (0)

#endif
