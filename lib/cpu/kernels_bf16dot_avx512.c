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
 * pairs [j0, j1); with prefetch (a constant: without it the GEMV loop of
 * z_small_m compiled ~7% slower), panels [qa, qb) of the block at pf (same
 * panel stride) get one line per pair prefetched. The accumulators
 * start at zero (first) or at the partial sums in part (row stride ldp
 * floats) and end there: an f32 store and load
 * change no bit, so each output's chain is one unbroken loop over all pairs.
 * In the last k block with d.o set they go to the output instead
 * (qwi_tile_dest, tile_out.h). */
Z_INLINE void z_tile(const uint32_t *x, int64_t KP, const uint32_t *w, int64_t j0, int64_t j1,
                     float *part, int64_t ldp, int first, const int mr, const int np,
                     const int prefetch, const uint32_t *pf, int qa, int qb, qwi_tile_dest d,
                     int last) {
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
        if (prefetch)
            for (int q = qa; q < qb; q++)
                _mm_prefetch((const char *)(pf + (q * KP + j - j0) * 16), _MM_HINT_T1);
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
    if (last && d.o) {
        _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
            _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
                qwi_tile_dest_put_zmm(&d, r, q, acc[r][q]);
        return;
    }
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
            _mm512_storeu_ps(part + r * ldp + q * 16, acc[r][q]);
}

/* One row block [0, mb) of xb x one group of NP (<= 4) panels: k blocks
 * outside, row tiles of 4 inside, the 1-3 rows left in one tile. With two
 * tiles or more, each prefetches its share of the next k block (or of the
 * next group's first block, next, after the last one) while it computes,
 * and, in a block shorter than Z_MB, pulls its rows' output lines (ob,
 * stride ldo) into L1 in the last k block (a full block's k block fills
 * L1). Without this the first tile of a k block waited for the block from
 * memory while the others, running from L1, had nothing in flight - as in
 * kernels_bf16dot.c's bf16_block_many. One Zen 5 thread, table forced
 * (QWINFER_CPU_KERNELS=avx512), weights from memory (qw-qbench --k 1024
 * --n 3072 --layers 42): M = 8 148-152 -> 201-202 GFLOP/s, M = 32 216-220
 * -> 246-250 (in cache ~245-255). */
#define Z_BLOCK(NP)                                                                       \
    do {                                                                                  \
        const int nt_ = (int)((mb + 3) / 4);                                              \
        for (int64_t j0 = 0; j0 < KP; j0 += Z_KC) {                                       \
            const int64_t j1 = QWI_MIN(KP, j0 + Z_KC);                                    \
            const uint32_t *pf_ = nt_ < 2 ? NULL : j1 < KP ? wp + j1 * 16 : next;         \
            int64_t r = 0;                                                                \
            for (int i_ = 0; r < mb; i_++, r += 4) {                                      \
                int qa_ = 0, qb_ = 0;                                                     \
                if (pf_ && nt_ >= (NP)) { qa_ = QWI_MIN(i_, (NP)); qb_ = QWI_MIN(i_ + 1, (NP)); } \
                else if (pf_) { qa_ = i_ * (NP) / nt_; qb_ = (i_ + 1) * (NP) / nt_; }      \
                const int mr_ = (int)QWI_MIN((int64_t)4, mb - r);                         \
                if (nt_ >= 2 && mb < Z_MB && j1 >= KP)                                    \
                    for (int rr_ = 0; rr_ < mr_; rr_++)                                   \
                        for (int q_ = 0; q_ < (NP); q_++)                                 \
                            _mm_prefetch((const char *)(ob + (r + rr_) * ldo + 16 * q_), _MM_HINT_T0); \
                const uint32_t *xr = xb + r * KP;                                         \
                float *pr = part + r * 64;                                                \
                const qwi_tile_dest dr_ = qwi_tile_dest_rows(*d, r);                      \
                switch (mr_) {                                                            \
                case 4: z_tile(xr, KP, wp, j0, j1, pr, 64, j0 == 0, 4, NP, 1, pf_, qa_, qb_, dr_, j1 >= KP); break; \
                case 3: z_tile(xr, KP, wp, j0, j1, pr, 64, j0 == 0, 3, NP, 1, pf_, qa_, qb_, dr_, j1 >= KP); break; \
                case 2: z_tile(xr, KP, wp, j0, j1, pr, 64, j0 == 0, 2, NP, 1, pf_, qa_, qb_, dr_, j1 >= KP); break; \
                default: z_tile(xr, KP, wp, j0, j1, pr, 64, j0 == 0, 1, NP, 1, pf_, qa_, qb_, dr_, j1 >= KP); break; \
                }                                                                         \
            }                                                                             \
        }                                                                                 \
    } while (0)

/* Z_BLOCK out of line, one function per panel count: expanded inside the
 * driver, the prefetching row-block code changed GCC's registers for the
 * inlined z_small_m loops (M = 1 from memory ~7% slower). */
#define Z_BLOCK_FN(NP)                                                                    \
    static __attribute__((noinline, target("avx512f"))) void z_block_##NP(                \
        const uint32_t *xb, int64_t mb, int64_t KP, const uint32_t *wp, const uint32_t *next, \
        float *part, const float *ob, int64_t ldo, const qwi_tile_dest *d) {              \
        Z_BLOCK(NP);                                                                      \
    }
Z_BLOCK_FN(1)
Z_BLOCK_FN(2)
Z_BLOCK_FN(3)
Z_BLOCK_FN(4)

/* One or two rows (decode): the weights stream once, so no k blocking;
 * groups of 8 (one row) or 4 (two rows) panels give 8 independent FMA
 * chains to hide the FMA latency (each chain's odd and even FMAs depend on
 * each other). The panels left over go in groups of 1-3. */
Z_INLINE void z_small_m(const uint32_t *x, int64_t M, int64_t KP, const uint32_t *w, int64_t N,
                        const float *bias, float *out, int64_t ldo, int accumulate) {
    float part[2 * 128] __attribute__((aligned(64)));
    const qwi_tile_dest nodest = { NULL, 0, NULL, 0 };
    const int64_t np_all = QWI_DIV_UP(N, 16);
    const int64_t g = M == 1 ? 8 : 4;
    for (int64_t p = 0; p < np_all;) {
        const uint32_t *wp = w + p * KP * 16;
        const int64_t np = QWI_MIN(np_all - p, g);
        if (M == 1) {
            switch (np) {
            case 8: z_tile(x, KP, wp, 0, KP, part, 128, 1, 1, 8, 0, NULL, 0, 0, nodest, 0); break;
            case 7: z_tile(x, KP, wp, 0, KP, part, 128, 1, 1, 7, 0, NULL, 0, 0, nodest, 0); break;
            case 6: z_tile(x, KP, wp, 0, KP, part, 128, 1, 1, 6, 0, NULL, 0, 0, nodest, 0); break;
            case 5: z_tile(x, KP, wp, 0, KP, part, 128, 1, 1, 5, 0, NULL, 0, 0, nodest, 0); break;
            case 4: z_tile(x, KP, wp, 0, KP, part, 128, 1, 1, 4, 0, NULL, 0, 0, nodest, 0); break;
            case 3: z_tile(x, KP, wp, 0, KP, part, 128, 1, 1, 3, 0, NULL, 0, 0, nodest, 0); break;
            case 2: z_tile(x, KP, wp, 0, KP, part, 128, 1, 1, 2, 0, NULL, 0, 0, nodest, 0); break;
            default: z_tile(x, KP, wp, 0, KP, part, 128, 1, 1, 1, 0, NULL, 0, 0, nodest, 0); break;
            }
        } else {
            switch (np) {
            case 4: z_tile(x, KP, wp, 0, KP, part, 128, 1, 2, 4, 0, NULL, 0, 0, nodest, 0); break;
            case 3: z_tile(x, KP, wp, 0, KP, part, 128, 1, 2, 3, 0, NULL, 0, 0, nodest, 0); break;
            case 2: z_tile(x, KP, wp, 0, KP, part, 128, 1, 2, 2, 0, NULL, 0, 0, nodest, 0); break;
            default: z_tile(x, KP, wp, 0, KP, part, 128, 1, 2, 1, 0, NULL, 0, 0, nodest, 0); break;
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
            const uint32_t *next = m0 + mb >= M && p + np < np_all ? wp + np * KP * 16 : NULL;
            const float *ob = out + m0 * ldo + n0;
            const qwi_tile_dest d =
                qwi_tile_dest_group(out + m0 * ldo, ldo, n0, 16 * np, N, bias, accumulate);
            switch (np) {
            case 4: z_block_4(xb, mb, KP, wp, next, part, ob, ldo, &d); break;
            case 3: z_block_3(xb, mb, KP, wp, next, part, ob, ldo, &d); break;
            case 2: z_block_2(xb, mb, KP, wp, next, part, ob, ldo, &d); break;
            default: z_block_1(xb, mb, KP, wp, next, part, ob, ldo, &d); break;
            }
            if (!d.o)
                for (int64_t r = 0; r < mb; r++)
                    for (int64_t q = 0; q < np; q++)
                        qwi_put16(part + r * 64 + q * 16, n0 + 16 * q, N, bias,
                                  out + (m0 + r) * ldo, accumulate);
        }
        p += np;
    }
}

#endif
