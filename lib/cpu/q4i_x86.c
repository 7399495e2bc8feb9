/*
 * q4i_x86.c - the x86 matmul_q4i kernels (cpu/q4i.h), for U4 and U8
 * codes: AVX2 (vpmaddwd on ymm), AVX-512 with AVX512BW (vpmaddwd on zmm)
 * and with AVX512_VNNI (vpdpwssd). All give the portable kernel's bits
 * (q4i.c): the dots are
 * exact int32 sums, and the per-group float epilogue is the contract's
 * (tests/test_quant_kernels.c).
 */
#include <string.h>

#include "cpu/gemv_prefetch.h"
#include "cpu/kernels.h"
#include "cpu/q4i.h"
#include "cpu/qpanel.h"
#include "cpu/tile_out.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define Q4I_KP 64    /* pairs per decoded chunk (M > 2)                              */
#define Q4I_MB 48    /* rows per row block (M > 2)                                   */
#define Q4I_PF 256   /* prefetch distance of the M <= 2 paths on Zen 4 (gemv_prefetch.h) */

/* ---- AVX-512 ------------------------------------------------------------- */

#define Q4I_TARGET "avx512f,avx512bw,avx2,fma"
#define Q4I_FN(name) q4i_bw_##name
#define Q4I_DOT(acc, c, x) _mm512_add_epi32((acc), _mm512_madd_epi16((c), (x)))
#include "cpu/q4i_zmm.h"
#undef Q4I_TARGET
#undef Q4I_FN
#undef Q4I_DOT

#define Q4I_TARGET "avx512f,avx512bw,avx512vnni,avx2,fma"
#define Q4I_FN(name) q4i_vnni_##name
#define Q4I_DOT(acc, c, x) _mm512_dpwssd_epi32((acc), (c), (x))
#include "cpu/q4i_zmm.h"
#undef Q4I_TARGET
#undef Q4I_FN
#undef Q4I_DOT

void qwi_avx512_matmul_q4i(const qwi_q4act *x, int64_t M, const qwi_qpanel *w, int64_t n0,
                           int64_t N, const float *bias, float *out, int64_t ldo, int accumulate) {
    q4i_bw_matmul(x, M, w, n0, N, bias, out, ldo, accumulate);
}

void qwi_avx512vnni_matmul_q4i(const qwi_q4act *x, int64_t M, const qwi_qpanel *w, int64_t n0,
                               int64_t N, const float *bias, float *out, int64_t ldo,
                               int accumulate) {
    q4i_vnni_matmul(x, M, w, n0, N, bias, out, ldo, accumulate);
}

/* ---- AVX2 ------------------------------------------------------------------ */

/* One ymm = half a panel (slots 0-7: block bytes 0-31, slots 8-15: 32-63).
 * No decoded chunks: MR rows x NP panels decoded in registers for every M
 * (M <= 2: 2 panels; else 4-row tiles of one panel), which costs 6 decode
 * operations per 8 dots at 4 rows - the portable ISA's path, not the one
 * serving is tuned on. */
#define A2_TARGET "avx2,fma"
#define A2_INLINE static inline __attribute__((always_inline, target(A2_TARGET)))

/* Pair jj of the block half in v: (word >> w*jj) & cm per 16-bit word
 * (w = 4 for U4, 8 for U8; cm = 15 or 255). */
A2_INLINE __m256i a2_code(__m256i v, int jj, __m256i cm, const int u8) {
    return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128((u8 ? 8 : 4) * jj)), cm);
}

A2_INLINE void a2_direct(const qwi_q4act *x, const qwi_qpanel *w, int64_t p0, float *res,
                         const int mr, const int np, const int u8) {
    const int64_t G = w->ngroups, gk = w->group_k, KP = x->KP;
    const int64_t bs = qwi_qpanel_line_stride(w, p0);   /* panel q of block j: j * bs + q * 64 */
    const int PB = u8 ? 2 : 4;   /* pairs per 64-byte block */
    const __m256i cm = _mm256_set1_epi16(u8 ? 255 : 15);
    const uint8_t *pc = w->codes + qwi_qpanel_block_at(w, p0, 0);
    const int64_t pf = qwi_cpu_gemv_prefetch(Q4I_PF);
    __m256 tot[4][2][2];
    __m256i acc[4][2][2];
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
            _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) tot[r][q][h] = _mm256_setzero_ps();
    for (int64_t g = 0; g < G; g++) {
        const int64_t js = g * gk / 2, je = QWI_MIN(KP, (g + 1) * gk / 2);
        _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
            _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
                _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) acc[r][q][h] = _mm256_setzero_si256();
        for (int64_t j = js; j < je; j++) {
            const uint8_t *blk = pc + (j / PB) * bs;
            if (j % PB == 0)
                _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
                    _mm_prefetch((const char *)(blk + q * 64 + pf), _MM_HINT_T0);
            __m256i c[2][2];
            _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
                _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++)
                    c[q][h] = a2_code(_mm256_loadu_si256((const __m256i *)(const void *)(blk + q * 64 + 32 * h)),
                                      (int)(j % PB), cm, u8);
            _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++) {
                const __m256i xb = _mm256_set1_epi32((int)x->q[r * KP + j]);
                _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
                    _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++)
                        acc[r][q][h] = _mm256_add_epi32(acc[r][q][h], _mm256_madd_epi16(c[q][h], xb));
            }
        }
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
            _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
                const int64_t zi = ((p0 + q) * G + g) * 16 + 8 * h;
                const __m256i z = _mm256_cvttps_epi32(_mm256_loadu_ps(w->zeros + zi));
                const __m256 sc = _mm256_loadu_ps(w->scales + zi);
                _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++) {
                    const int64_t xi = r * x->G + g;
                    const __m256i i = _mm256_sub_epi32(
                        acc[r][q][h], _mm256_mullo_epi32(z, _mm256_set1_epi32(x->sum[xi])));
                    tot[r][q][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i),
                                                   _mm256_mul_ps(sc, _mm256_set1_ps(x->d[xi])),
                                                   tot[r][q][h]);
                }
            }
    }
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
            _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++)
                _mm256_storeu_ps(res + r * 64 + q * 16 + 8 * h, tot[r][q][h]);
}

__attribute__((target(A2_TARGET))) void qwi_avx2_matmul_q4i(const qwi_q4act *x, int64_t M,
                                                            const qwi_qpanel *w, int64_t n0,
                                                            int64_t N, const float *bias,
                                                            float *out, int64_t ldo,
                                                            int accumulate) {
    if (M <= 0 || N <= 0) return;
    const int64_t P0 = n0 / 16, np_all = QWI_DIV_UP(N, 16);
    const int u8 = w->fmt == QWI_QFMT_U8;
    float res[4 * 64] __attribute__((aligned(32)));
    const int64_t pstep = M <= 2 ? 2 : 1;
    for (int64_t pq = 0, np; pq < np_all; pq += np) {
        np = qwi_qpanel_run(w, P0 + pq, QWI_MIN(pstep, np_all - pq));
        for (int64_t m0 = 0; m0 < M; m0 += 4) {
            const int mr = (int)QWI_MIN((int64_t)4, M - m0);
            const qwi_q4act xr = { .q = x->q + m0 * x->KP, .d = x->d + m0 * x->G,
                                   .sum = x->sum + m0 * x->G, .KP = x->KP, .G = x->G,
                                   .group_k = x->group_k, .qmax = x->qmax };
#define A2_D(MR)                                                                                \
    do {                                                                                        \
        if (u8) {                                                                               \
            if (np == 2) a2_direct(&xr, w, P0 + pq, res, MR, 2, 1);                             \
            else a2_direct(&xr, w, P0 + pq, res, MR, 1, 1);                                     \
        } else {                                                                                \
            if (np == 2) a2_direct(&xr, w, P0 + pq, res, MR, 2, 0);                             \
            else a2_direct(&xr, w, P0 + pq, res, MR, 1, 0);                                     \
        }                                                                                       \
    } while (0)
            switch (mr) {
            case 4: A2_D(4); break;
            case 3: A2_D(3); break;
            case 2: A2_D(2); break;
            default: A2_D(1); break;
            }
#undef A2_D
            for (int r = 0; r < mr; r++)
                for (int q = 0; q < np; q++)
                    qwi_put16(res + r * 64 + q * 16, 16 * (pq + q), N, bias,
                              out + (m0 + r) * ldo, accumulate);
        }
    }
}

#endif
