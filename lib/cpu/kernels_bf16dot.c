/*
 * kernels_bf16dot.c - the fast numerics mode's matmul kernels (matmul_pair
 * of kernels.h): bf16 activation pairs times bf16 weight pairs in the pair
 * panel layout (cpu/pairpanel.h), accumulated in f32.
 *
 * The arithmetic of every variant is that of one vdpbf16ps lane, as Intel's
 * pseudo-code defines it (VDPBF16PS, SDM vol. 2):
 *     acc += f32(x[2j+1]) * f32(w[2j+1]);  acc += f32(x[2j]) * f32(w[2j])
 * for j = 0, 1, ..., KP-1 in order, acc starting at 0: one chain per output,
 * independent of M, N, the register tile and the thread. A product of two
 * bf16 values (8 significant bits each) is exact in f32 unless it leaves
 * f32's normal range, so a multiply then an add (portable), an FMA (AVX2
 * and AVX-512F emulation) and vdpbf16ps round the same way. The inputs are
 * never subnormal (pairpanel.h flushes them, as vdpbf16ps's DAZ would);
 * vdpbf16ps also flushes subnormal products and results (FTZ) where the
 * emulations round them, so the tables can differ only when a product or
 * a partial sum falls below 2^-126 in magnitude (FLT_MIN) - never for the
 * activations and weights of a real model, and a process uses one table
 * for its life either way (kernels.h records what was measured).
 * tests/test_fast_numerics.c checks every table bit for bit against a
 * scalar model of the chain on random data, subnormal activations included.
 */
#include <string.h>

#include "cpu/kernels.h"
#include "cpu/pairpanel.h"
#include "cpu/tile_out.h"

static inline float lo_f32(uint32_t pair) {
    uint32_t u = pair << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float hi_f32(uint32_t pair) {
    uint32_t u = pair & 0xffff0000u;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Portable: two rows at a time, 16 independent chains per row, widened
 * weights reused for both rows. */
void qwr_matmul_pair(const uint32_t *x, int64_t M, int64_t KP, const uint32_t *w, int64_t N,
                     const float *bias, float *out, int64_t ldo, int accumulate) {
    for (int64_t n0 = 0; n0 < N; n0 += 16) {
        const uint32_t *p = w + (n0 / 16) * KP * 16;
        for (int64_t m = 0; m < M; m += 2) {
            const int64_t m1 = m + 1 < M ? m + 1 : m;
            const uint32_t *x0 = x + m * KP, *x1 = x + m1 * KP;
            float a0[16] = { 0 }, a1[16] = { 0 };
            for (int64_t j = 0; j < KP; j++) {
                const uint32_t *wl = p + j * 16;
                float wo[16], we[16];
                for (int s = 0; s < 16; s++) { wo[s] = hi_f32(wl[s]); we[s] = lo_f32(wl[s]); }
                const float x0o = hi_f32(x0[j]), x0e = lo_f32(x0[j]);
                const float x1o = hi_f32(x1[j]), x1e = lo_f32(x1[j]);
                for (int s = 0; s < 16; s++) a0[s] = a0[s] + x0o * wo[s];
                for (int s = 0; s < 16; s++) a0[s] = a0[s] + x0e * we[s];
                for (int s = 0; s < 16; s++) a1[s] = a1[s] + x1o * wo[s];
                for (int s = 0; s < 16; s++) a1[s] = a1[s] + x1e * we[s];
            }
            qwi_put16(a0, n0, N, bias, out + m * ldo, accumulate);
            if (m1 != m) qwi_put16(a1, n0, N, bias, out + m1 * ldo, accumulate);
        }
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* ---- AVX2 + FMA emulation ------------------------------------------------ */

#define AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma")))

/* A partial panel's output step, kept out of line: inlined, its branches and
 * 16-wide loops changed GCC's register allocation of the 4 x 1 tile's
 * k loop, which then kept accumulators on the stack (-37% prefill). */
static __attribute__((noinline)) void avx2_put16(const float *acc, int64_t j0, int64_t N,
                                                 const float *bias, float *out, int accumulate) {
    qwi_put16(acc, j0, N, bias, out, accumulate);
}

/* An MR x NP-panel tile over all KP pairs, each pair in two phases: the
 * odd halves (high bf16 of every pair, masked to f32) of the NP panels'
 * 16 weight lanes and of each row's broadcast pair meet in one FMA per
 * accumulator, then the even halves (low bf16 shifted up) in a second.
 * Each accumulator's chain - odd, then even, pair after pair - is the
 * vdpbf16ps lane's; the phases only put the other accumulators' FMAs
 * between an accumulator's two, so that the 4-cycle FMA latency hides
 * behind them. The old 4 x 1 tile issued them back to back: 8 chains of
 * 2 dependent FMAs per pair are exactly what two FMA pipes need, any
 * stall showed (perf: samples piled on the chained FMAs) and it ran at
 * 82-85% of the FMA peak on one Zen 4 core. The even phase loads the
 * weights and x again (through qwi_opaque_ptr: L1 hits) rather than keeping
 * them, so that 5 x 1 fits AVX2's 16 registers without a spill: 10
 * accumulators, 2 weights, 1 broadcast, the mask. 6 x 1 spilled three
 * accumulators with GCC 12 (74 GFLOP/s against 5 x 1's 101-109).
 * wide: x comes widened (qwi_pair_widen_rows: row r at xw + r * 2 * KP),
 * so each row's half is one vbroadcastss from memory instead of a
 * broadcast and a mask or shift. Where a ymm instruction is two 128-bit
 * uops and the FP unit takes four a cycle (Zen 1), the 5 x 1 tile's 14
 * mask and shift instructions next to its 20 FMAs per pair kept it at
 * 70% of the FMA peak; the 10 of them on x go with the widening (a pass
 * over x per matmul call, not per tile).
 * Whole panels go to the output from the registers (qwi_tile_dest_put_ymm);
 * through avx2_put16, whose plain-copy case GCC compiles to a call to
 * memmove, the stores were 5% of an AVX2 prefill (perf). */
AVX2_INLINE void avx2_tile(const uint32_t *x, const float *xw, int64_t KP, const uint32_t *w,
                           int64_t N, int64_t n0, const float *bias, float *out, int64_t ldo,
                           int accumulate, const int mr, const int np, const int wide) {
    __m256 acc[5][2][2];
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) acc[r][q][0] = acc[r][q][1] = _mm256_setzero_ps();
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    for (int64_t j = 0; j < KP; j++) {
        __m256 wv[2][2];
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
            _Pragma("GCC unroll 8") for (int h = 0; h < 2; h++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(w + (q * KP + j) * 16 + h * 8));
                wv[q][h] = _mm256_castsi256_ps(_mm256_and_si256(v, hi));
            }
        _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++) {
            __m256 xo;
            if (wide) {
                xo = _mm256_broadcast_ss(xw + r * 2 * KP + 2 * j + 1);
            } else {
                __m256i b = _mm256_set1_epi32((int)x[r * KP + j]);
                xo = _mm256_castsi256_ps(_mm256_and_si256(b, hi));
            }
            _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
                _Pragma("GCC unroll 8") for (int h = 0; h < 2; h++)
                    acc[r][q][h] = _mm256_fmadd_ps(xo, wv[q][h], acc[r][q][h]);
        }
        const uint32_t *w2 = qwi_opaque_ptr(w), *x2 = wide ? x : qwi_opaque_ptr(x);
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
            _Pragma("GCC unroll 8") for (int h = 0; h < 2; h++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(w2 + (q * KP + j) * 16 + h * 8));
                wv[q][h] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
            }
        _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++) {
            __m256 xe;
            if (wide) {
                xe = _mm256_broadcast_ss(xw + r * 2 * KP + 2 * j);
            } else {
                __m256i b = _mm256_set1_epi32((int)x2[r * KP + j]);
                xe = _mm256_castsi256_ps(_mm256_slli_epi32(b, 16));
            }
            _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
                _Pragma("GCC unroll 8") for (int h = 0; h < 2; h++)
                    acc[r][q][h] = _mm256_fmadd_ps(xe, wv[q][h], acc[r][q][h]);
        }
    }
    /* whole panels: from the registers (not through qwi_tile_dest_group:
     * that equivalent form made GCC 12 place this kernel's code so that
     * M = 512 ran 8% slower, 101.6-102.4 against 111.3-111.9 GFLOP/s in
     * qw-qbench on one Zen 4 thread; no spill explained it) */
    if (n0 + 16 * np <= N) {
        const qwi_tile_dest d = { out + n0, ldo, bias ? bias + n0 : NULL, accumulate };
        _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
            _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
                _Pragma("GCC unroll 8") for (int h = 0; h < 2; h++)
                    qwi_tile_dest_put_ymm(&d, r, 16 * q + 8 * h, acc[r][q][h]);
        return;
    }
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) {
            float t[16];
            _mm256_storeu_ps(t, acc[r][q][0]);
            _mm256_storeu_ps(t + 8, acc[r][q][1]);
            avx2_put16(t, n0 + 16 * q, N, bias, out + r * ldo, accumulate);
        }
}

/* Tiles of 5 rows x 1 panel (the rest in one smaller tile), or for one or
 * two rows, 2 panels so that there are enough independent chains. */
__attribute__((target("avx2,fma")))
void qwi_bf16dot_matmul_avx2(const uint32_t *x, int64_t M, int64_t KP, const uint32_t *w,
                             int64_t N, const float *bias, float *out, int64_t ldo,
                             int accumulate) {
    const int64_t np_all = QWI_DIV_UP(N, 16);
    int64_t p = 0;
    if (M <= 2)
        for (; p + 2 <= np_all; p += 2) {
            const uint32_t *wp = w + p * KP * 16;
            if (M == 1) avx2_tile(x, NULL, KP, wp, N, 16 * p, bias, out, ldo, accumulate, 1, 2, 0);
            else avx2_tile(x, NULL, KP, wp, N, 16 * p, bias, out, ldo, accumulate, 2, 2, 0);
        }
    for (; p < np_all; p++) {
        const uint32_t *wp = w + p * KP * 16;
#define AVX2_TILE(m, MR) \
    avx2_tile(x + (m) * KP, NULL, KP, wp, N, 16 * p, bias, out + (m) * ldo, ldo, accumulate, MR, 1, 0)
        QWI_ROW_TILES(5, M, AVX2_TILE);
#undef AVX2_TILE
    }
}

/* The same tiles reading x widened (the driver widens once per call, for
 * M >= 3; kernels.h). Rows in tiles of 5 and 4 (never a 1-3-row tile
 * where 5s and 4s add up to M): a short tile's few chains cannot cover the
 * FMA latency. */
__attribute__((target("avx2,fma")))
void qwi_bf16dot_matmul_avx2_wide(const float *xw, int64_t M, int64_t KP, const uint32_t *w,
                                  int64_t N, const float *bias, float *out, int64_t ldo,
                                  int accumulate) {
    const int64_t np_all = QWI_DIV_UP(N, 16);
    for (int64_t p = 0; p < np_all; p++) {
        const uint32_t *wp = w + p * KP * 16;
#define AVX2_TILE(m, MR) \
    avx2_tile(NULL, xw + (m) * 2 * KP, KP, wp, N, 16 * p, bias, out + (m) * ldo, ldo, accumulate, \
              MR, 1, 1)
        QWI_ROW_TILES_5_4(M, AVX2_TILE);
#undef AVX2_TILE
    }
}

/* ---- AVX512_BF16: vdpbf16ps ---------------------------------------------- */

#define BF16_INLINE static inline __attribute__((always_inline, target("avx512f,avx512bf16")))

/* Pairs per k block: NP = 4 panels x 128 pairs x 64 B = 32 KiB of weights,
 * which stay in L1 while every row tile of a row block sweeps them. */
#define BF16_KC 128
/* ... and for a row block shorter than BF16_MB (concurrent decode, the
 * last block of a prefill): its few tiles leave less arithmetic to hide
 * each block's memory loads behind, and smaller blocks keep more of them
 * in flight. M = 32 from memory: 436 -> 450 GFLOP/s on one Zen 5 thread
 * (qw-qbench --k 1024 --n 3072 --layers 42); full blocks were faster
 * at 128 (M = 512: 968-1017 against 928-986 on two threads). */
#define BF16_KC_SHORT 64
/* Rows per row block: 8 tiles of 6; their partial sums ([48][64] f32,
 * 12 KiB) wait in `part` between k blocks. */
#define BF16_MB 48

/* An MR x NP tile (MR <= 6, NP <= 4: 24 zmm accumulators, NP weight
 * registers, one broadcast) over pairs [j0, j1): per pair, NP 64-byte
 * weight loads serve MR rows, and panels [qa, qb) of the block at pf
 * (same panel stride) get one line each prefetched (none if qa == qb). The accumulators start at zero (first) or
 * at the partial sums in part (row stride 64 floats) and end there: an
 * f32 store and load change no bit, so the chain of every output is the
 * same as one unbroken loop over all pairs. In the last k block of a
 * group whose panels are all whole (d.o set, last), they go to the output
 * instead, through qwi_put16's two additions from the registers. */
BF16_INLINE void bf16_tile(const uint32_t *x, int64_t KP, const uint32_t *w, int64_t j0,
                           int64_t j1, float *part, int first, const int mr, const int np,
                           const uint32_t *pf, int qa, int qb, qwi_tile_dest d, int last) {
    __m512 acc[6][4];
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
            acc[r][q] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(part + r * 64 + q * 16);
    for (int64_t j = j0; j < j1; j++) {
        __m512i wv[4];
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) wv[q] = _mm512_loadu_si512(w + (q * KP + j) * 16);
        for (int q = qa; q < qb; q++)
            _mm_prefetch((const char *)(pf + (q * KP + j - j0) * 16), _MM_HINT_T1);
        _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++) {
            __m512i b = _mm512_set1_epi32((int)x[r * KP + j]);
            _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
                acc[r][q] = _mm512_dpbf16_ps(acc[r][q], (__m512bh)b, (__m512bh)wv[q]);
        }
    }
    if (last && d.o) {
        _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
            _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
                qwi_tile_dest_put_zmm(&d, r, q, acc[r][q]);
        return;
    }
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
            _mm512_storeu_ps(part + r * 64 + q * 16, acc[r][q]);
}

/* A row block of 1-6 rows: one tile, which streams the weights itself (a
 * software prefetch here only slowed batch-1 decode). Out of line per NP,
 * like bf16_block_many: one function holding every tile shape made GCC
 * spill the M = 1 loop's panel offsets to the stack (-10% GEMV). */
BF16_INLINE void bf16_one_tile(const uint32_t *xb, int64_t mb, int64_t KP, const uint32_t *wp,
                               float *part, qwi_tile_dest d, const int np) {
    for (int64_t j0 = 0; j0 < KP; j0 += BF16_KC) {
        const int64_t j1 = QWI_MIN(KP, j0 + BF16_KC);
        const int first = j0 == 0, last = j1 >= KP;
        switch (mb) {
        case 6: bf16_tile(xb, KP, wp, j0, j1, part, first, 6, np, NULL, 0, 0, d, last); break;
        case 5: bf16_tile(xb, KP, wp, j0, j1, part, first, 5, np, NULL, 0, 0, d, last); break;
        case 4: bf16_tile(xb, KP, wp, j0, j1, part, first, 4, np, NULL, 0, 0, d, last); break;
        case 3: bf16_tile(xb, KP, wp, j0, j1, part, first, 3, np, NULL, 0, 0, d, last); break;
        case 2: bf16_tile(xb, KP, wp, j0, j1, part, first, 2, np, NULL, 0, 0, d, last); break;
        default: bf16_tile(xb, KP, wp, j0, j1, part, first, 1, np, NULL, 0, 0, d, last); break;
        }
    }
}

/* A row block of 7-48 rows as nt tiles of rows[i] rows: k blocks outside,
 * tiles inside. The first tile pulls each k block of weights from memory;
 * the rest find it in L1. So that those loads overlap the other tiles'
 * arithmetic instead of stalling the first, every tile prefetches a share
 * of the next k block's lines (or the next panel group's first block,
 * next, after the last k block): one panel per tile with 4 or more tiles,
 * np/nt panels each with fewer. M = 32 from memory went from 360 to 463
 * GFLOP/s on one Zen 5 thread (in cache: ~490; qw-qbench --k 1024 --n 3072
 * --layers 42); prefetch from the first tile alone, all at once, did not
 * help. Prefetches never fault, so a smaller next group only wastes a
 * few past its end. In the last k block each tile also pulls its rows'
 * output lines (ob, row stride ldo; NULL: none) into L1, where its stores
 * (or the driver's, from part) find them: with only the T1 prefetch before the block,
 * which the block's weight stream through L2 evicts again, those stores
 * and the residual loads were ~5% of a 32-sequence decode step; ~2% after
 * (perf, qw-bench 32 x 16+48). Full 48-row blocks keep their output out
 * of L1, where their 32 KiB k block lives. */
BF16_INLINE void bf16_block_many(const uint32_t *xb, const int *rows, int nt, int64_t kc,
                                 int64_t KP, const uint32_t *wp, const uint32_t *next,
                                 float *part, const float *ob, int64_t ldo, qwi_tile_dest d,
                                 const int np) {
    for (int64_t j0 = 0; j0 < KP; j0 += kc) {
        const int64_t j1 = QWI_MIN(KP, j0 + kc);
        const int first = j0 == 0, last = j1 >= KP;
        const uint32_t *pf = j1 < KP ? wp + j1 * 16 : next;
        int64_t r = 0;
        for (int i = 0; i < nt; i++) {
            if (ob && last)
                for (int rr = 0; rr < rows[i]; rr++)
                    for (int q = 0; q < np; q++)
                        _mm_prefetch((const char *)(ob + (r + rr) * ldo + 16 * q), _MM_HINT_T0);
            int qa = 0, qb = 0;
            if (pf && nt >= np) { qa = QWI_MIN(i, np); qb = QWI_MIN(i + 1, np); }
            else if (pf) { qa = i * np / nt; qb = (i + 1) * np / nt; }
            const uint32_t *xr = xb + r * KP;
            float *pr = part + r * 64;
            const qwi_tile_dest dr = qwi_tile_dest_rows(d, r);
            switch (rows[i]) {
            case 6: bf16_tile(xr, KP, wp, j0, j1, pr, first, 6, np, pf, qa, qb, dr, last); break;
            case 5: bf16_tile(xr, KP, wp, j0, j1, pr, first, 5, np, pf, qa, qb, dr, last); break;
            case 4: bf16_tile(xr, KP, wp, j0, j1, pr, first, 4, np, pf, qa, qb, dr, last); break;
            case 3: bf16_tile(xr, KP, wp, j0, j1, pr, first, 3, np, pf, qa, qb, dr, last); break;
            case 2: bf16_tile(xr, KP, wp, j0, j1, pr, first, 2, np, pf, qa, qb, dr, last); break;
            default: bf16_tile(xr, KP, wp, j0, j1, pr, first, 1, np, pf, qa, qb, dr, last); break;
            }
            r += rows[i];
        }
    }
}

/* The two block shapes out of line, per panel count (see bf16_one_tile). */
#define BF16_BLOCK_FNS(NP)                                                                   \
    static __attribute__((noinline, target("avx512f,avx512bf16"))) void bf16_one_##NP(       \
        const uint32_t *xb, int64_t mb, int64_t KP, const uint32_t *wp, float *part,         \
        const qwi_tile_dest *d) {                                                                \
        bf16_one_tile(xb, mb, KP, wp, part, *d, NP);                                         \
    }                                                                                        \
    static __attribute__((noinline, target("avx512f,avx512bf16"))) void bf16_many_##NP(      \
        const uint32_t *xb, const int *rows, int nt, int64_t kc, int64_t KP,                 \
        const uint32_t *wp, const uint32_t *next, float *part, const float *ob, int64_t ldo, \
        const qwi_tile_dest *d) {                                                                \
        bf16_block_many(xb, rows, nt, kc, KP, wp, next, part, ob, ldo, *d, NP);              \
    }
BF16_BLOCK_FNS(1)
BF16_BLOCK_FNS(2)
BF16_BLOCK_FNS(3)
BF16_BLOCK_FNS(4)

/* One row block [m0, m0+mb) x one group of np panels. Row tiles of 6, the
 * rows left in one tile of 3-5, or where only 1-2 would be left, the last
 * 7-8 rows as 4 + 3-4 (a 1-2 row tile reuses each weight load for too few
 * rows: M = 8 ran at ~0.9x of M = 6 or 16). */
static inline __attribute__((target("avx512f,avx512bf16"))) void
bf16_block(const uint32_t *xb, int64_t mb, int64_t KP, const uint32_t *wp, const uint32_t *next,
           float *part, const float *ob, int64_t ldo, const qwi_tile_dest *d, int64_t np) {
    if (mb <= 6) {
        switch (np) {
        case 4: bf16_one_4(xb, mb, KP, wp, part, d); break;
        case 3: bf16_one_3(xb, mb, KP, wp, part, d); break;
        case 2: bf16_one_2(xb, mb, KP, wp, part, d); break;
        default: bf16_one_1(xb, mb, KP, wp, part, d); break;
        }
        return;
    }
    int rows[BF16_MB / 4 + 2], nt = 0;
    int64_t full = mb / 6, r = 0;
    if (mb % 6 > 0 && mb % 6 < 3) full--;
    for (; r < 6 * full; r += 6) rows[nt++] = 6;
    if (mb - r > 6) { rows[nt++] = 4; r += 4; }
    if (mb > r) rows[nt++] = (int)(mb - r);
    const int64_t kc = mb == BF16_MB ? BF16_KC : BF16_KC_SHORT;
    if (mb == BF16_MB) ob = NULL;
    switch (np) {
    case 4: bf16_many_4(xb, rows, nt, kc, KP, wp, next, part, ob, ldo, d); break;
    case 3: bf16_many_3(xb, rows, nt, kc, KP, wp, next, part, ob, ldo, d); break;
    case 2: bf16_many_2(xb, rows, nt, kc, KP, wp, next, part, ob, ldo, d); break;
    default: bf16_many_1(xb, rows, nt, kc, KP, wp, next, part, ob, ldo, d); break;
    }
}

/* Groups of up to 4 panels (64 outputs; a task of qwi_cpu_matmul holds
 * 1-4 groups), row blocks of 48, k blocks of 128 pairs (64 for a shorter
 * row block); the last row block of a group prefetches into the next. */
__attribute__((target("avx512f,avx512bf16")))
void qwi_bf16dot_matmul_avx512bf16(const uint32_t *x, int64_t M, int64_t KP, const uint32_t *w,
                                   int64_t N, const float *bias, float *out, int64_t ldo,
                                   int accumulate) {
    float part[BF16_MB * 64] __attribute__((aligned(64)));
    const int64_t np_all = QWI_DIV_UP(N, 16);
    for (int64_t p = 0; p < np_all;) {
        const uint32_t *wp = w + p * KP * 16;
        const int64_t n0 = 16 * p, np = QWI_MIN(np_all - p, (int64_t)4);
        for (int64_t m0 = 0; m0 < M; m0 += BF16_MB) {
            const int64_t mb = QWI_MIN((int64_t)BF16_MB, M - m0);
            const uint32_t *xb = x + m0 * KP;
            /* The block's output lines (mb rows x np x 64 B, each row in
             * its own page of a large output) toward L2 now, so that the
             * tiles' stores in the last k block find them there: without
             * this those stores, missing the cache in a burst, were ~9% of
             * a prefill GEMM. Not to L1, where the block's weights live (T0
             * measured slower, again with the stores in the tiles). */
            for (int64_t r = 0; r < mb; r++)
                for (int64_t q = 0; q < np; q++)
                    _mm_prefetch((const char *)(out + (m0 + r) * ldo + n0 + 16 * q), _MM_HINT_T1);
            const uint32_t *next = m0 + mb >= M && p + np < np_all ? wp + np * KP * 16 : NULL;
            const qwi_tile_dest d =
                qwi_tile_dest_group(out + m0 * ldo, ldo, n0, 16 * np, N, bias, accumulate);
            bf16_block(xb, mb, KP, wp, next, part, out + m0 * ldo + n0, ldo, &d, np);
            if (!d.o)
                for (int64_t r = 0; r < mb; r++)
                    for (int64_t q = 0; q < np; q++)
                        qwi_put16(part + r * 64 + q * 16, n0 + 16 * q, N, bias,
                                  out + (m0 + r) * ldo, accumulate);
        }
        p += np;
    }
}

bool qwi_bf16dot_have_avx512bf16(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
}

#else

bool qwi_bf16dot_have_avx512bf16(void) { return false; }

#endif
