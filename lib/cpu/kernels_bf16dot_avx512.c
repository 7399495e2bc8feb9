/*
 * kernels_bf16dot_avx512.c - the fast numerics mode's matmul_pair for
 * AVX-512F CPUs without AVX512_BF16 (Skylake-SP, Cascade Lake, Ice Lake
 * Xeons): vdpbf16ps emulated in zmm registers, one register = one 16-output
 * pair panel (cpu/pairpanel.h).
 *
 * Arithmetic: per output lane, per pair j in order,
 *     acc = fma(f32(x[2j+1]), f32(w[2j+1]), acc); acc = fma(f32(x[2j]), f32(w[2j]), acc)
 * from acc = 0, exactly the chain of kernels_bf16dot.c's AVX2 emulation and
 * portable kernel (a bf16 x bf16 product is exact in f32, so FMA and
 * multiply-then-add round alike): bit-identical to them for every M, N, tile
 * and thread. Widening is a mask (odd = high halves) and a 16-bit shift
 * (even = low halves), as in the AVX2 emulation.
 * tests/test_fast_numerics.c checks the "avx512" table against the scalar
 * chain; tests/test_bf16dot_avx512.c that the table runs this kernel.
 */
#include <string.h>

#include "cpu/kernels.h"
#include "cpu/tile_out.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define Z_INLINE static inline __attribute__((always_inline, target("avx512f")))

/* Pairs per k block: 4 panels x 128 pairs x 64 B = 32 KiB of weights stay
 * in L1 while the row tiles of a row block sweep them. */
#define Z_KC 128
/* Rows per row block (12 tiles of 4); their partial sums ([48][64] f32,
 * 12 KiB) wait in `part` between k blocks. */
#define Z_MB 48

/* An MR x NP tile (MR <= 4, NP <= 8, MR * NP <= 16: at most 16 accumulators,
 * 2 * NP widened weights and 2 widened broadcasts, within the 32 zmm) over
 * pairs [j0, j1). The accumulators start at zero (first) or at the partial
 * sums in part (row stride ldp floats) and end there: an f32 store and load
 * change no bit, so each output's chain is one unbroken loop over all pairs. */
Z_INLINE void z_tile(const uint32_t *x, int64_t KP, const uint32_t *w, int64_t j0, int64_t j1,
                     float *part, int64_t ldp, int first, const int mr, const int np) {
    __m512 acc[4][8];
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
            acc[r][q] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(part + r * ldp + q * 16);
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    for (int64_t j = j0; j < j1; j++) {
        __m512 wo[8], we[8];
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) {
            __m512i v = _mm512_loadu_si512(w + (q * KP + j) * 16);
            wo[q] = _mm512_castsi512_ps(_mm512_and_si512(v, hi));
            we[q] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
        }
        _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++) {
            __m512i b = _mm512_set1_epi32((int)x[r * KP + j]);
            __m512 xo = _mm512_castsi512_ps(_mm512_and_si512(b, hi));
            __m512 xe = _mm512_castsi512_ps(_mm512_slli_epi32(b, 16));
            _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) {
                acc[r][q] = _mm512_fmadd_ps(xo, wo[q], acc[r][q]);
                acc[r][q] = _mm512_fmadd_ps(xe, we[q], acc[r][q]);
            }
        }
    }
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
            _mm512_storeu_ps(part + r * ldp + q * 16, acc[r][q]);
}

/* One row block [0, mb) of xb x one group of NP (<= 4) panels: k blocks
 * outside, row tiles of 4 inside, the 1-3 rows left in one tile. */
#define Z_BLOCK(NP)                                                                       \
    do {                                                                                  \
        for (int64_t j0 = 0; j0 < KP; j0 += Z_KC) {                                       \
            const int64_t j1 = QWI_MIN(KP, j0 + Z_KC);                                    \
            int64_t r = 0;                                                                \
            for (; r + 4 <= mb; r += 4)                                                   \
                z_tile(xb + r * KP, KP, wp, j0, j1, part + r * 64, 64, j0 == 0, 4, NP);   \
            const uint32_t *xr = xb + r * KP;                                             \
            float *pr = part + r * 64;                                                    \
            switch (mb - r) {                                                             \
            case 3: z_tile(xr, KP, wp, j0, j1, pr, 64, j0 == 0, 3, NP); break;            \
            case 2: z_tile(xr, KP, wp, j0, j1, pr, 64, j0 == 0, 2, NP); break;            \
            case 1: z_tile(xr, KP, wp, j0, j1, pr, 64, j0 == 0, 1, NP); break;            \
            default: break;                                                               \
            }                                                                             \
        }                                                                                 \
    } while (0)

/* One or two rows (decode): the weights stream once, so no k blocking;
 * groups of 8 (one row) or 4 (two rows) panels give 8 independent FMA
 * chains to hide the FMA latency (each chain's odd and even FMAs depend on
 * each other). The panels left over go in groups of 1-3. */
Z_INLINE void z_small_m(const uint32_t *x, int64_t M, int64_t KP, const uint32_t *w, int64_t N,
                        const float *bias, float *out, int64_t ldo, int accumulate) {
    float part[2 * 128] __attribute__((aligned(64)));
    const int64_t np_all = QWI_DIV_UP(N, 16);
    const int64_t g = M == 1 ? 8 : 4;
    for (int64_t p = 0; p < np_all;) {
        const uint32_t *wp = w + p * KP * 16;
        const int64_t np = QWI_MIN(np_all - p, g);
        if (M == 1) {
            switch (np) {
            case 8: z_tile(x, KP, wp, 0, KP, part, 128, 1, 1, 8); break;
            case 7: z_tile(x, KP, wp, 0, KP, part, 128, 1, 1, 7); break;
            case 6: z_tile(x, KP, wp, 0, KP, part, 128, 1, 1, 6); break;
            case 5: z_tile(x, KP, wp, 0, KP, part, 128, 1, 1, 5); break;
            case 4: z_tile(x, KP, wp, 0, KP, part, 128, 1, 1, 4); break;
            case 3: z_tile(x, KP, wp, 0, KP, part, 128, 1, 1, 3); break;
            case 2: z_tile(x, KP, wp, 0, KP, part, 128, 1, 1, 2); break;
            default: z_tile(x, KP, wp, 0, KP, part, 128, 1, 1, 1); break;
            }
        } else {
            switch (np) {
            case 4: z_tile(x, KP, wp, 0, KP, part, 128, 1, 2, 4); break;
            case 3: z_tile(x, KP, wp, 0, KP, part, 128, 1, 2, 3); break;
            case 2: z_tile(x, KP, wp, 0, KP, part, 128, 1, 2, 2); break;
            default: z_tile(x, KP, wp, 0, KP, part, 128, 1, 2, 1); break;
            }
        }
        for (int64_t r = 0; r < M; r++)
            for (int64_t q = 0; q < np; q++)
                qwi_put16(part + r * 128 + q * 16, 16 * (p + q), N, bias, out + r * ldo, accumulate);
        p += np;
    }
}

/* M <= 2: z_small_m. Otherwise groups of up to 4 panels (64 outputs, one
 * task of qwi_cpu_matmul), row blocks of 48, k blocks of 128 pairs, 4 x 4
 * tiles (16 accumulators, 8 widened weights, 2 widened broadcasts). */
__attribute__((target("avx512f")))
void qwi_bf16dot_matmul_avx512(const uint32_t *x, int64_t M, int64_t KP, const uint32_t *w,
                               int64_t N, const float *bias, float *out, int64_t ldo,
                               int accumulate) {
    if (M <= 0 || N <= 0) return;
    if (M <= 2) {
        z_small_m(x, M, KP, w, N, bias, out, ldo, accumulate);
        return;
    }
    float part[Z_MB * 64] __attribute__((aligned(64)));
    const int64_t np_all = QWI_DIV_UP(N, 16);
    for (int64_t p = 0; p < np_all;) {
        const uint32_t *wp = w + p * KP * 16;
        const int64_t n0 = 16 * p, np = QWI_MIN(np_all - p, (int64_t)4);
        for (int64_t m0 = 0; m0 < M; m0 += Z_MB) {
            const int64_t mb = QWI_MIN((int64_t)Z_MB, M - m0);
            const uint32_t *xb = x + m0 * KP;
            switch (np) {
            case 4: Z_BLOCK(4); break;
            case 3: Z_BLOCK(3); break;
            case 2: Z_BLOCK(2); break;
            default: Z_BLOCK(1); break;
            }
            for (int64_t r = 0; r < mb; r++)
                for (int64_t q = 0; q < np; q++)
                    qwi_put16(part + r * 64 + q * 16, n0 + 16 * q, N, bias, out + (m0 + r) * ldo,
                              accumulate);
        }
        p += np;
    }
}

#endif
