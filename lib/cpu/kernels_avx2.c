/*
 * kernels_avx2.c - the AVX2+FMA kernel table (x86-64 only; see kernels.h
 * for the determinism contract every table keeps).
 *
 * Contract of this variant: QWR_LANES = 8 partial sums held in one ymm
 * register, lane j taking k % 8 == j in increasing k, each step a fused
 * multiply-add (so one rounding per step instead of the portable path's
 * two); the K tail is the same step with zero-padded operands; the lanes
 * are reduced by the portable path's tree ((0+4)+(1+5))+((2+6)+(3+7)).
 * Every register tile below runs exactly that per-element sequence, so a
 * result does not depend on M, N, the tile an element fell in, or the
 * thread that ran it.
 *
 * The functions carry __attribute__((target)) instead of the file being
 * built with -mavx2: the library is built once for baseline x86-64 and this
 * table is only installed after CPUID says the instructions exist.
 */
#include <string.h>

#include "cpu/kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma")))
#define AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma")))

/* The portable tree ((a0+a4)+(a1+a5))+((a2+a6)+(a3+a7)), exactly. */
AVX2_INLINE float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 h = _mm_hadd_ps(s, s);          /* [s0+s1, s2+s3, ...] */
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

AVX2_INLINE __m256 ld_f32(const float *p) { return _mm256_loadu_ps(p); }

/* bf16 -> f32 is a 16-bit left shift of the bit pattern: exact. */
AVX2_INLINE __m256 ld_bf16(const uint16_t *p) {
    __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}

/* Tail loads: the first r (< 8) elements, the rest zero. */
AVX2_INLINE __m256i tail_mask(int64_t r) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)r), idx);
}

AVX2_INLINE __m256 ld_f32_tail(const float *p, int64_t r) {
    return _mm256_maskload_ps(p, tail_mask(r));
}

AVX2_INLINE __m256 ld_bf16_tail(const uint16_t *p, int64_t r) {
    uint16_t tmp[8] = { 0 };
    memcpy(tmp, p, (size_t)r * sizeof(uint16_t));
    return ld_bf16(tmp);
}

/* Bytes ahead that the one-row (GEMV) tiles prefetch each weight stream,
 * one prefetch per 64-byte line. Batch-1 decode is nothing but this stream
 * and the kernel's own work per byte is close to the memory's time per byte,
 * so the loads must already be in flight well before they are used: with
 * 4 streams, 8 KiB ahead is about the next tile but one. Measured on the
 * 0.6B shape (docs/benchmarks.md): 1 KiB (the old value, issued once per
 * 16 bytes) reached ~45% of a plain read loop, 6-8 KiB once per line ~80%.
 * A prefetch past the end of the weights touches a valid or harmless
 * address (prefetches never fault). */
#ifndef PF_AHEAD
#define PF_AHEAD 8192
#endif

static inline void put(float *o, float dot, const float *bias, int64_t n, int accumulate) {
    float v = bias ? dot + bias[n] : dot;
    *o = accumulate ? *o + v : v;
}

/*
 * One register tile: MR activation rows x NR weight rows, MR*NR ymm
 * accumulators. The loops over the tile have constant bounds and are fully
 * unrolled, so the accumulators live in registers. Activation loads are
 * reused NR times, weight loads (and their bf16 widening) MR times.
 */
#define TILE(NAME, WT, LOADW, LOADW_TAIL, MR, NR)                                          \
AVX2_INLINE void NAME(const float *x, int64_t K, const WT *w, float *out, int64_t ldo,     \
                      const float *bias, int accumulate) {                                 \
    __m256 acc[MR][NR];                                                                    \
    _Pragma("GCC unroll 4") for (int i = 0; i < MR; i++)                                   \
        _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++) acc[i][j] = _mm256_setzero_ps(); \
    int64_t k = 0;                                                                         \
    for (; k + 8 <= K; k += 8) {                                                           \
        __m256 wv[NR];                                                                     \
        _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++) wv[j] = LOADW(w + j * K + k); \
        _Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) {                             \
            __m256 xv = _mm256_loadu_ps(x + i * K + k);                                    \
            _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++)                           \
                acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);                         \
        }                                                                                  \
    }                                                                                      \
    if (k < K) {                                                                           \
        const int64_t r = K - k;                                                           \
        __m256 wv[NR];                                                                     \
        _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++)                               \
            wv[j] = LOADW_TAIL(w + j * K + k, r);                                          \
        _Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) {                             \
            __m256 xv = ld_f32_tail(x + i * K + k, r);                                     \
            _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++)                           \
                acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);                         \
        }                                                                                  \
    }                                                                                      \
    _Pragma("GCC unroll 4") for (int i = 0; i < MR; i++)                                   \
        _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++)                               \
            put(out + i * ldo + j, hsum8(acc[i][j]), bias, j, accumulate);                 \
}

/*
 * The one-row (GEMV) tile: 1 activation row x NR weight rows, the same
 * per-element FMA sequence as TILE (acc[j] += x[k..k+8) * w[j][k..k+8) for
 * k = 0, 8, 16, ... in order, then the masked tail), with the k loop
 * unrolled by 4 steps so that each weight stream gets one prefetch per
 * 64-byte line (PF_AHEAD) instead of one per load. Unrolling only changes
 * the loop structure: every accumulator still sees its FMAs in increasing
 * k, so the bits are those of TILE with MR = 1.
 */
#define GEMV_TILE(NAME, WT, LOADW, LOADW_TAIL, NR)                                         \
AVX2_INLINE void NAME(const float *x, int64_t K, const WT *w, float *out, int64_t ldo,     \
                      const float *bias, int accumulate) {                                 \
    __m256 acc[NR];                                                                        \
    _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++) acc[j] = _mm256_setzero_ps();     \
    int64_t k = 0;                                                                         \
    for (; k + 32 <= K; k += 32) {                                                         \
        _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++)                               \
            _Pragma("GCC unroll 2") for (int b = 0; b < (int)(32 * sizeof(WT)); b += 64)   \
                _mm_prefetch((const char *)(w + j * K + k) + PF_AHEAD + b, _MM_HINT_T0);   \
        _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) {                              \
            __m256 xv = _mm256_loadu_ps(x + k + 8 * u);                                    \
            _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++)                           \
                acc[j] = _mm256_fmadd_ps(xv, LOADW(w + j * K + k + 8 * u), acc[j]);        \
        }                                                                                  \
    }                                                                                      \
    for (; k + 8 <= K; k += 8) {                                                           \
        __m256 xv = _mm256_loadu_ps(x + k);                                                \
        _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++)                               \
            acc[j] = _mm256_fmadd_ps(xv, LOADW(w + j * K + k), acc[j]);                    \
    }                                                                                      \
    if (k < K) {                                                                           \
        const int64_t r = K - k;                                                           \
        __m256 xv = ld_f32_tail(x + k, r);                                                 \
        _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++)                               \
            acc[j] = _mm256_fmadd_ps(xv, LOADW_TAIL(w + j * K + k, r), acc[j]);            \
    }                                                                                      \
    _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++)                                   \
        put(out + j, hsum8(acc[j]), bias, j, accumulate);                                  \
}

/*
 * Tiles: 4x3 (12 accumulators + 3 weight registers + 1 activation register
 * = the 16 ymm registers; 3x4 would need 17 and spill an accumulator) for
 * prefill and batched decode, with 4x2/4x1 for the column tail; 1x4 for
 * the row tail (4 independent weight streams, which is what a memory-bound
 * GEMV needs) and 1x1. Row tile outer, weight row inner: the caller's block
 * of weight rows stays in L2 while the row tiles sweep it.
 */
#define MATMUL(NAME, WT, LOADW, LOADW_TAIL)                                                \
TILE(NAME##_4x3, WT, LOADW, LOADW_TAIL, 4, 3)                                              \
TILE(NAME##_4x2, WT, LOADW, LOADW_TAIL, 4, 2)                                              \
TILE(NAME##_4x1, WT, LOADW, LOADW_TAIL, 4, 1)                                              \
GEMV_TILE(NAME##_1x4, WT, LOADW, LOADW_TAIL, 4)                                            \
GEMV_TILE(NAME##_1x1, WT, LOADW, LOADW_TAIL, 1)                                            \
static AVX2 void NAME(const float *x, int64_t M, int64_t K, const WT *w, int64_t N,       \
                      const float *bias, float *out, int64_t ldo, int accumulate) {        \
    int64_t m = 0;                                                                         \
    for (; m + 4 <= M; m += 4) {                                                           \
        const float *xm = x + m * K;                                                       \
        float *om = out + m * ldo;                                                         \
        int64_t n = 0;                                                                     \
        for (; n + 3 <= N; n += 3)                                                         \
            NAME##_4x3(xm, K, w + n * K, om + n, ldo, bias ? bias + n : NULL, accumulate); \
        if (n + 2 <= N) {                                                                  \
            NAME##_4x2(xm, K, w + n * K, om + n, ldo, bias ? bias + n : NULL, accumulate); \
            n += 2;                                                                        \
        }                                                                                  \
        if (n < N)                                                                         \
            NAME##_4x1(xm, K, w + n * K, om + n, ldo, bias ? bias + n : NULL, accumulate); \
    }                                                                                      \
    for (; m < M; m++) {                                                                   \
        const float *xm = x + m * K;                                                       \
        float *om = out + m * ldo;                                                         \
        int64_t n = 0;                                                                     \
        for (; n + 4 <= N; n += 4)                                                         \
            NAME##_1x4(xm, K, w + n * K, om + n, ldo, bias ? bias + n : NULL, accumulate); \
        for (; n < N; n++)                                                                 \
            NAME##_1x1(xm, K, w + n * K, om + n, ldo, bias ? bias + n : NULL, accumulate); \
    }                                                                                      \
}

MATMUL(avx2_matmul_f32, float, ld_f32, ld_f32_tail)
MATMUL(avx2_matmul_bf16, uint16_t, ld_bf16, ld_bf16_tail)

/* ---- panel kernels (weights in the layout of cpu/panel.h) ---------------- */

/*
 * Contract of the panel kernels of this table: each output is one chain
 * acc = fma(x[k], w[k], acc) over k = 0 .. K-1 in order from 0, then the
 * bias and accumulate of put(). Tiles differ only in how many chains run
 * side by side, so the bits never depend on M, N, the tile or the thread.
 *
 * A panel step loads the 16 weights of one k (f32: two 8-float loads; bf16:
 * one 32-byte load split by a shift and a mask, see panel.h) into `lo`
 * (columns 0..7) and `hi` (columns 8..15).
 */
AVX2_INLINE void pstep_f32(const float *p, __m256 *lo, __m256 *hi) {
    *lo = _mm256_loadu_ps(p);
    *hi = _mm256_loadu_ps(p + 8);
}

AVX2_INLINE void pstep_bf16(const uint16_t *p, __m256 *lo, __m256 *hi) {
    __m256i v = _mm256_loadu_si256((const __m256i *)p);
    *lo = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    *hi = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xffff0000u)));
}

/* Store one panel's 16 results of one row: nn (<= 16) valid columns. Full
 * panels use vector adds, which are the same IEEE operations as put(). */
AVX2_INLINE void pstore(float *o, __m256 lo, __m256 hi, const float *bias, int64_t nn,
                        int accumulate) {
    if (nn == 16) {
        if (bias) {
            lo = _mm256_add_ps(lo, _mm256_loadu_ps(bias));
            hi = _mm256_add_ps(hi, _mm256_loadu_ps(bias + 8));
        }
        if (accumulate) {
            lo = _mm256_add_ps(_mm256_loadu_ps(o), lo);
            hi = _mm256_add_ps(_mm256_loadu_ps(o + 8), hi);
        }
        _mm256_storeu_ps(o, lo);
        _mm256_storeu_ps(o + 8, hi);
        return;
    }
    float t[16];
    _mm256_storeu_ps(t, lo);
    _mm256_storeu_ps(t + 8, hi);
    for (int64_t j = 0; j < nn; j++) put(o + j, t[j], bias, j, accumulate);
}

/* Bytes ahead that a weight stream is prefetched in the memory-bound
 * shapes (M = 1 and the first row tile of each panel). */
#ifndef PANEL_PF_AHEAD
#define PANEL_PF_AHEAD 1024
#endif

/*
 * MR rows x one panel: 2*MR accumulators (MR <= 6 keeps 12 + lo/hi + the
 * broadcast within the 16 ymm registers). pf != 0: prefetch the panel
 * stream (the first row tile to touch it reads it from memory).
 */
#define PANEL_TILE(NAME, WT, PSTEP, MR)                                                    \
AVX2_INLINE void NAME(const float *x, int64_t K, const WT *p, float *out, int64_t ldo,     \
                      const float *bias, int64_t nn, int accumulate, int pf) {             \
    __m256 a0[MR], a1[MR];                                                                 \
    _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++) {                                 \
        a0[i] = _mm256_setzero_ps();                                                       \
        a1[i] = _mm256_setzero_ps();                                                       \
    }                                                                                      \
    for (int64_t k = 0; k < K; k++) {                                                      \
        if (pf && (k & 3) == 0)                                                            \
            _mm_prefetch((const char *)(p + k * 16) + PANEL_PF_AHEAD, _MM_HINT_T0);        \
        __m256 lo, hi;                                                                     \
        PSTEP(p + k * 16, &lo, &hi);                                                       \
        _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++) {                             \
            __m256 b = _mm256_broadcast_ss(x + i * K + k);                                 \
            a0[i] = _mm256_fmadd_ps(b, lo, a0[i]);                                         \
            a1[i] = _mm256_fmadd_ps(b, hi, a1[i]);                                         \
        }                                                                                  \
    }                                                                                      \
    _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++)                                   \
        pstore(out + i * ldo, a0[i], a1[i], bias, nn, accumulate);                         \
}

/*
 * One row x NP panels (GEMV): 2*NP independent chains, NP weight streams,
 * each prefetched once per 64 bytes. Columns past nn are computed (the
 * panel is zero-padded) but not stored.
 */
#define PANEL_GEMV(NAME, WT, PSTEP, NP)                                                    \
AVX2_INLINE void NAME(const float *x, int64_t K, const WT *p, float *out,                  \
                      const float *bias, int64_t nn, int accumulate) {                     \
    __m256 a0[NP], a1[NP];                                                                 \
    _Pragma("GCC unroll 4") for (int j = 0; j < NP; j++) {                                 \
        a0[j] = _mm256_setzero_ps();                                                       \
        a1[j] = _mm256_setzero_ps();                                                       \
    }                                                                                      \
    const int64_t stride = K * 16;                                                         \
    const int64_t pf_every = 64 / (int64_t)(16 * sizeof(WT)); /* k per 64 bytes */         \
    for (int64_t k = 0; k < K; k++) {                                                      \
        if (k % pf_every == 0)                                                             \
            _Pragma("GCC unroll 4") for (int j = 0; j < NP; j++)                           \
                _mm_prefetch((const char *)(p + j * stride + k * 16) + PANEL_PF_AHEAD,     \
                             _MM_HINT_T0);                                                 \
        __m256 b = _mm256_broadcast_ss(x + k);                                             \
        _Pragma("GCC unroll 4") for (int j = 0; j < NP; j++) {                             \
            __m256 lo, hi;                                                                 \
            PSTEP(p + j * stride + k * 16, &lo, &hi);                                      \
            a0[j] = _mm256_fmadd_ps(b, lo, a0[j]);                                         \
            a1[j] = _mm256_fmadd_ps(b, hi, a1[j]);                                         \
        }                                                                                  \
    }                                                                                      \
    _Pragma("GCC unroll 4") for (int j = 0; j < NP; j++) {                                 \
        int64_t left = nn - 16 * j;                                                        \
        if (left <= 0) break;                                                              \
        pstore(out + 16 * j, a0[j], a1[j], bias ? bias + 16 * j : NULL, QWI_MIN(left, 16), \
               accumulate);                                                                \
    }                                                                                      \
}

/*
 * The driver. M == 1: panels four (then two, one) at a time, never reading
 * a panel past the last one of N. M > 1: panel
 * outer, row tiles inner, so a panel (K*32 or K*64 bytes) is read from
 * memory once per call and from cache by the other row tiles. Rows are cut
 * into 6-row tiles, the last 7..8 rows as 4+3 / 4+4 so that no tile is
 * narrower than needed (a 1- or 2-row tile has too few chains to hide the
 * FMA latency).
 */
#define MATMUL_PANEL(NAME, WT, PSTEP)                                                      \
PANEL_TILE(NAME##_t6, WT, PSTEP, 6)                                                        \
PANEL_TILE(NAME##_t5, WT, PSTEP, 5)                                                        \
PANEL_TILE(NAME##_t4, WT, PSTEP, 4)                                                        \
PANEL_TILE(NAME##_t3, WT, PSTEP, 3)                                                        \
PANEL_TILE(NAME##_t2, WT, PSTEP, 2)                                                        \
PANEL_TILE(NAME##_t1, WT, PSTEP, 1)                                                        \
PANEL_GEMV(NAME##_g4, WT, PSTEP, 4)                                                        \
PANEL_GEMV(NAME##_g2, WT, PSTEP, 2)                                                        \
PANEL_GEMV(NAME##_g1, WT, PSTEP, 1)                                                        \
AVX2 void NAME(const float *x, int64_t M, int64_t K, const WT *w, int64_t N,              \
               const float *bias, float *out, int64_t ldo, int accumulate) {               \
    const int64_t stride = K * 16;                                                         \
    if (M == 1) {                                                                          \
        int64_t n = 0;                                                                     \
        for (; N - n > 48; n += 64)                                                        \
            NAME##_g4(x, K, w + (n / 16) * stride, out + n, bias ? bias + n : NULL,        \
                      N - n, accumulate);                                                  \
        for (; N - n > 16; n += 32)                                                        \
            NAME##_g2(x, K, w + (n / 16) * stride, out + n, bias ? bias + n : NULL,        \
                      N - n, accumulate);                                                  \
        for (; n < N; n += 16)                                                             \
            NAME##_g1(x, K, w + (n / 16) * stride, out + n, bias ? bias + n : NULL,        \
                      N - n, accumulate);                                                  \
        return;                                                                            \
    }                                                                                      \
    for (int64_t n = 0; n < N; n += 16) {                                                  \
        const WT *p = w + (n / 16) * stride;                                               \
        const float *b = bias ? bias + n : NULL;                                           \
        const int64_t nn = QWI_MIN(N - n, 16);                                             \
        int64_t m = 0;                                                                     \
        int pf = 1;                                                                        \
        for (; M - m > 8 || M - m == 6; m += 6, pf = 0)                                    \
            NAME##_t6(x + m * K, K, p, out + m * ldo + n, ldo, b, nn, accumulate, pf);     \
        switch (M - m) {                                                                   \
        case 8:                                                                            \
            NAME##_t4(x + m * K, K, p, out + m * ldo + n, ldo, b, nn, accumulate, pf);     \
            NAME##_t4(x + (m + 4) * K, K, p, out + (m + 4) * ldo + n, ldo, b, nn,          \
                      accumulate, 0);                                                      \
            break;                                                                         \
        case 7:                                                                            \
            NAME##_t4(x + m * K, K, p, out + m * ldo + n, ldo, b, nn, accumulate, pf);     \
            NAME##_t3(x + (m + 4) * K, K, p, out + (m + 4) * ldo + n, ldo, b, nn,          \
                      accumulate, 0);                                                      \
            break;                                                                         \
        case 5: NAME##_t5(x + m * K, K, p, out + m * ldo + n, ldo, b, nn, accumulate, pf); break; \
        case 4: NAME##_t4(x + m * K, K, p, out + m * ldo + n, ldo, b, nn, accumulate, pf); break; \
        case 3: NAME##_t3(x + m * K, K, p, out + m * ldo + n, ldo, b, nn, accumulate, pf); break; \
        case 2: NAME##_t2(x + m * K, K, p, out + m * ldo + n, ldo, b, nn, accumulate, pf); break; \
        case 1: NAME##_t1(x + m * K, K, p, out + m * ldo + n, ldo, b, nn, accumulate, pf); break; \
        default: break;                                                                    \
        }                                                                                  \
    }                                                                                      \
}

MATMUL_PANEL(qwi_avx2_matmul_f32_panel, float, pstep_f32)
MATMUL_PANEL(qwi_avx2_matmul_bf16_panel, uint16_t, pstep_bf16)

/* The 1x1 tile's arithmetic: attention scores use it, so they follow the
 * same contract as the matmuls of this table. */
static AVX2 float avx2_dot(const float *a, const float *b, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), acc);
    if (k < n) acc = _mm256_fmadd_ps(ld_f32_tail(a + k, n - k), ld_f32_tail(b + k, n - k), acc);
    return hsum8(acc);
}

/* o[i] += s * v[i] as one FMA per element (element-wise: no lane order). */
static AVX2 void avx2_axpy(float *o, float s, const float *v, int64_t n) {
    __m256 sv = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(o + i, _mm256_fmadd_ps(sv, _mm256_loadu_ps(v + i), _mm256_loadu_ps(o + i)));
    for (; i < n; i++) o[i] = __builtin_fmaf(s, v[i], o[i]);
}

/* Four avx2_dot chains side by side: the same per-lane FMA sequence for
 * each b[i], so out[i] == avx2_dot(a, b[i], n) bit for bit. */
static AVX2 void avx2_dot4(const float *a, const float *const b[4], int64_t n, float out[4]) {
    __m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                      _mm256_setzero_ps() };
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        __m256 av = _mm256_loadu_ps(a + k);
        for (int i = 0; i < 4; i++) acc[i] = _mm256_fmadd_ps(av, _mm256_loadu_ps(b[i] + k), acc[i]);
    }
    if (k < n) {
        __m256 av = ld_f32_tail(a + k, n - k);
        for (int i = 0; i < 4; i++) acc[i] = _mm256_fmadd_ps(av, ld_f32_tail(b[i] + k, n - k), acc[i]);
    }
    for (int i = 0; i < 4; i++) out[i] = hsum8(acc[i]);
}

/* o += s[0]*v[0] ... s[3]*v[3], each element's four FMAs in that order. */
static AVX2 void avx2_axpy4(float *o, const float s[4], const float *const v[4], int64_t n) {
    __m256 sv[4];
    for (int i = 0; i < 4; i++) sv[i] = _mm256_set1_ps(s[i]);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 acc = _mm256_loadu_ps(o + i);
        for (int j = 0; j < 4; j++) acc = _mm256_fmadd_ps(sv[j], _mm256_loadu_ps(v[j] + i), acc);
        _mm256_storeu_ps(o + i, acc);
    }
    for (; i < n; i++)
        for (int j = 0; j < 4; j++) o[i] = __builtin_fmaf(s[j], v[j][i], o[i]);
}

/* dot4 for two heads: 8 chains, each K row loaded once for both. */
static AVX2 void avx2_dot4x2(const float *a0, const float *a1, const float *const b[4], int64_t n,
                             float out0[4], float out1[4]) {
    __m256 c0[4], c1[4];
    for (int i = 0; i < 4; i++) c0[i] = c1[i] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        __m256 x0 = _mm256_loadu_ps(a0 + k), x1 = _mm256_loadu_ps(a1 + k);
        for (int i = 0; i < 4; i++) {
            __m256 bv = _mm256_loadu_ps(b[i] + k);
            c0[i] = _mm256_fmadd_ps(x0, bv, c0[i]);
            c1[i] = _mm256_fmadd_ps(x1, bv, c1[i]);
        }
    }
    if (k < n) {
        __m256 x0 = ld_f32_tail(a0 + k, n - k), x1 = ld_f32_tail(a1 + k, n - k);
        for (int i = 0; i < 4; i++) {
            __m256 bv = ld_f32_tail(b[i] + k, n - k);
            c0[i] = _mm256_fmadd_ps(x0, bv, c0[i]);
            c1[i] = _mm256_fmadd_ps(x1, bv, c1[i]);
        }
    }
    for (int i = 0; i < 4; i++) {
        out0[i] = hsum8(c0[i]);
        out1[i] = hsum8(c1[i]);
    }
}

/* axpy4 for two heads: two independent FMA chains per V load. */
static AVX2 void avx2_axpy4x2(float *o0, float *o1, const float s0[4], const float s1[4],
                              const float *const v[4], int64_t n) {
    __m256 w0[4], w1[4];
    for (int j = 0; j < 4; j++) {
        w0[j] = _mm256_set1_ps(s0[j]);
        w1[j] = _mm256_set1_ps(s1[j]);
    }
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 a0 = _mm256_loadu_ps(o0 + i), a1 = _mm256_loadu_ps(o1 + i);
        for (int j = 0; j < 4; j++) {
            __m256 vv = _mm256_loadu_ps(v[j] + i);
            a0 = _mm256_fmadd_ps(w0[j], vv, a0);
            a1 = _mm256_fmadd_ps(w1[j], vv, a1);
        }
        _mm256_storeu_ps(o0 + i, a0);
        _mm256_storeu_ps(o1 + i, a1);
    }
    for (; i < n; i++)
        for (int j = 0; j < 4; j++) {
            o0[i] = __builtin_fmaf(s0[j], v[j][i], o0[i]);
            o1[i] = __builtin_fmaf(s1[j], v[j][i], o1[i]);
        }
}

static const qwi_cpu_kernels avx2_table = {
    .name = "avx2",
    .matmul_f32 = avx2_matmul_f32,
    .matmul_bf16 = avx2_matmul_bf16,
    .matmul_f32_panel = qwi_avx2_matmul_f32_panel,
    .matmul_bf16_panel = qwi_avx2_matmul_bf16_panel,
    /* kernels_quant_avx2.c */
    .matmul_qf32 = qwi_avx2_matmul_qf32,
    .matmul_qpair = qwi_avx2_matmul_qpair,
    .matmul_qpair_wide = qwi_avx2_matmul_qpair_wide,
    .matmul_q4i = qwi_avx2_matmul_q4i,
    .dot = avx2_dot,
    .axpy = avx2_axpy,
    .dot4 = avx2_dot4,
    .axpy4 = avx2_axpy4,
    .dot4x2 = avx2_dot4x2,
    .axpy4x2 = avx2_axpy4x2,
};

const qwi_cpu_kernels *qwi_cpu_kernels_avx2(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return NULL;
    return &avx2_table;
}

#else

const qwi_cpu_kernels *qwi_cpu_kernels_avx2(void) { return NULL; }

#endif
