/*
 * kernels_avx512_panel.c - the AVX-512F panel kernels of the avx512 table
 * (weights in the layout of cpu/panel.h, f32 activations: the exact path).
 *
 * Contract (kernels.h "Panel kernels"): each output is one chain
 * acc = fma(x[k], w[k], acc) over k = 0 .. K-1 in order from 0, then
 * acc + bias, then out + that when accumulating. The AVX2 panel kernels keep
 * the same contract with fused multiply-adds, so these are bit-identical to
 * them (and to themselves for any M, N, tile and thread count): tiles only
 * change how many chains run side by side, never a chain's operations.
 *
 * One zmm register holds one panel step: the 16 weights of one k for 16
 * consecutive outputs. A tile of MR rows x NP panels keeps MR*NP zmm
 * accumulators; each k costs NP weight loads, MR broadcasts of x and MR*NP
 * FMAs, so every loaded weight vector serves all MR rows of the tile.
 *
 * bf16 panels: slot 2i holds row i and slot 2i+1 row 8+i (panel.h). One
 * 32-byte load zero-extended to 16 dwords and shifted left by 16 gives the
 * 16 weights as f32 in that slot order; the accumulators stay in slot order
 * (a lane is still one output's chain) and are put back in row order by one
 * permute at the store.
 *
 * Shapes (the driver in ops.c hands a call at most 64 columns = 4 panels):
 *   M == 1 (GEMV, memory-bound): 4 panels in flight, k unrolled by 4 with a
 *     software prefetch per 64-byte line of each weight stream (bf16: see
 *     PGEMV_BF16).
 *   M > 1: column groups of 4 panels (then 2, then 1 for the rest of N);
 *     the rows of a group are cut into near-equal tiles of at most 6 rows
 *     (16 -> 6 + 5 + 5, 32 -> 6 + 6 + 5 + 5 + 5 + 5), so a 6 x 4
 *     tile holds 24 accumulators + 4 weights + 1 broadcast of the 32 zmm
 *     registers and even 2 rows have 8 chains to hide the FMA latency. The
 *     group's panels (K * 256 bytes of f32, half that in bf16) are read
 *     from memory by the first row tile and from L2 by the others; at 24
 *     FMAs per 256 + 24 bytes loaded that is well within L2 bandwidth, so
 *     no blocking over K is needed.
 *   Why at most 6 rows, not 12 x 2 panels (the same 24 accumulators, each
 *     weight vector used 12 times instead of 6): the activation rows are
 *     K floats apart, and K * 4 bytes is a multiple of 4 KiB in most Qwen3
 *     shapes (K = 1024, 2048, 3072, 4096, 5120, 6144, ...), so the rows'
 *     current cache lines all fall in one L1 set; 12 of them overflow an
 *     8-way L1 (Zen 4) and every broadcast misses. Measured on Zen 4 (1 thread, K = 1024,
 *     N = 3072): 12 x 2 ran 55-100 GFLOP/s at M = 64, 6 x 4 107-115, the
 *     FMA peak being ~115.
 *
 * Built with __attribute__((target)), like kernels_avx2.c: the library is
 * compiled for baseline x86-64 and the table is installed after CPUID.
 */
#include "cpu/kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,avx2,fma")))
#define AVX512_INLINE static inline __attribute__((always_inline, target("avx512f,avx2,fma")))

/* Bytes ahead that a weight stream is prefetched when it is read from
 * memory (M == 1, and the first row tile of each column group). */
#ifndef PANEL512_PF_AHEAD
#define PANEL512_PF_AHEAD 1024
#endif

/* One panel step as 16 f32 lanes (f32: row order; bf16: slot order). */
AVX512_INLINE __m512 pload_f32(const float *p) { return _mm512_loadu_ps(p); }

AVX512_INLINE __m512 pload_bf16(const uint16_t *p) {
    __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
}

/* Accumulators back to row order: identity for f32; for bf16, row j < 8 is
 * lane 2j and row 8 + j is lane 2j + 1. (Widening in row order instead - a
 * 256-bit broadcast load, a mask and a masked shift - measured 7% slower in
 * the tiles on Zen 4 than this zero-extension and one permute per stored
 * vector.) */
AVX512_INLINE __m512 pfix_f32(__m512 a) { return a; }

AVX512_INLINE __m512 pfix_bf16(__m512 a) {
    const __m512i idx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    return _mm512_permutexvar_ps(idx, a);
}

/* Store one row's 16 results of one panel (row order), nn (1..16) of them
 * valid: acc + bias, then out + that when accumulating - the IEEE operations
 * of the scalar put() of the other tables, lane by lane. Masked lanes are
 * neither read nor written. */
AVX512_INLINE void pstore(float *o, __m512 v, const float *bias, int64_t nn, int accumulate) {
    const __mmask16 m = nn >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nn) - 1u);
    if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias));
    if (accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, o), v);
    _mm512_mask_storeu_ps(o, m, v);
}

/*
 * MR rows x NP panels: MR*NP accumulators. p points at the first panel of
 * the tile, stride apart; nn is the number of valid columns from its first
 * column (panels entirely past nn are computed on zero padding or not at all
 * by the caller, never stored). pf != 0: prefetch the panel streams.
 */
#define PTILE(NAME, WT, PLOAD, PFIX, MR, NP)                                               \
AVX512_INLINE void NAME(const float *x, int64_t K, const WT *p, int64_t stride, float *out, \
                        int64_t ldo, const float *bias, int64_t nn, int accumulate, int pf) { \
    __m512 acc[MR][NP];                                                                    \
    _Pragma("GCC unroll 6") for (int i = 0; i < MR; i++)                                  \
        _Pragma("GCC unroll 4") for (int j = 0; j < NP; j++) acc[i][j] = _mm512_setzero_ps(); \
    const int64_t pf_every = 64 / (int64_t)(16 * sizeof(WT)); /* k per 64 bytes */         \
    for (int64_t k = 0; k < K; k++) {                                                      \
        if (pf && k % pf_every == 0)                                                       \
            _Pragma("GCC unroll 4") for (int j = 0; j < NP; j++)                           \
                _mm_prefetch((const char *)(p + j * stride + k * 16) + PANEL512_PF_AHEAD,  \
                             _MM_HINT_T0);                                                 \
        __m512 wv[NP];                                                                     \
        _Pragma("GCC unroll 4") for (int j = 0; j < NP; j++)                               \
            wv[j] = PLOAD(p + j * stride + k * 16);                                        \
        _Pragma("GCC unroll 6") for (int i = 0; i < MR; i++) {                            \
            __m512 b = _mm512_set1_ps(x[i * K + k]);                                       \
            _Pragma("GCC unroll 4") for (int j = 0; j < NP; j++)                           \
                acc[i][j] = _mm512_fmadd_ps(b, wv[j], acc[i][j]);                          \
        }                                                                                  \
    }                                                                                      \
    _Pragma("GCC unroll 4") for (int j = 0; j < NP; j++) {                                 \
        const int64_t left = nn - 16 * j;                                                  \
        if (left <= 0) break;                                                              \
        _Pragma("GCC unroll 6") for (int i = 0; i < MR; i++)                              \
            pstore(out + i * ldo + 16 * j, PFIX(acc[i][j]), bias ? bias + 16 * j : NULL,   \
                   left, accumulate);                                                      \
    }                                                                                      \
}

/*
 * One row x NP panels (GEMV): the chains of PTILE with MR = 1, the k loop
 * unrolled by 4 so each stream gets one prefetch per 64-byte line. Unrolling
 * changes only the loop structure: each accumulator still sees its FMAs in
 * increasing k.
 */
#define PGEMV(NAME, WT, PLOAD, PFIX, NP)                                                   \
AVX512_INLINE void NAME(const float *x, int64_t K, const WT *p, int64_t stride, float *out, \
                        const float *bias, int64_t nn, int accumulate) {                   \
    __m512 acc[NP];                                                                        \
    _Pragma("GCC unroll 4") for (int j = 0; j < NP; j++) acc[j] = _mm512_setzero_ps();     \
    int64_t k = 0;                                                                         \
    for (; k + 4 <= K; k += 4) {                                                           \
        _Pragma("GCC unroll 4") for (int j = 0; j < NP; j++)                               \
            _Pragma("GCC unroll 4") for (int b = 0; b < (int)(64 * sizeof(WT)); b += 64)   \
                _mm_prefetch((const char *)(p + j * stride + k * 16) + PANEL512_PF_AHEAD + b, \
                             _MM_HINT_T0);                                                 \
        _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) {                              \
            __m512 b = _mm512_set1_ps(x[k + u]);                                           \
            _Pragma("GCC unroll 4") for (int j = 0; j < NP; j++)                           \
                acc[j] = _mm512_fmadd_ps(b, PLOAD(p + j * stride + (k + u) * 16), acc[j]); \
        }                                                                                  \
    }                                                                                      \
    for (; k < K; k++) {                                                                   \
        __m512 b = _mm512_set1_ps(x[k]);                                                   \
        _Pragma("GCC unroll 4") for (int j = 0; j < NP; j++)                               \
            acc[j] = _mm512_fmadd_ps(b, PLOAD(p + j * stride + k * 16), acc[j]);           \
    }                                                                                      \
    _Pragma("GCC unroll 4") for (int j = 0; j < NP; j++) {                                 \
        const int64_t left = nn - 16 * j;                                                  \
        if (left <= 0) break;                                                              \
        pstore(out + 16 * j, PFIX(acc[j]), bias ? bias + 16 * j : NULL, left, accumulate); \
    }                                                                                      \
}

/*
 * The bf16 GEMV: PGEMV's chains with each panel step split into two ymm
 * halves (rows 0..7 = the lanes shifted left by 16, rows 8..15 = the lanes
 * with the low halves masked off, both in row order), joined into one zmm
 * only at the store. On Zen 4 a 512-bit vpmovzxwd is a half-rate cross-lane
 * shuffle, and at M == 1 it is the bottleneck (55 vs 62 GFLOP/s on an
 * L3-resident weight); two 256-bit FMAs cost what one 512-bit FMA does.
 */
#define PGEMV_BF16(NAME, WT, PLOAD, PFIX, NP)                                              \
AVX512_INLINE void NAME(const float *x, int64_t K, const WT *p, int64_t stride, float *out, \
                        const float *bias, int64_t nn, int accumulate) {                   \
    const __m256i keep = _mm256_set1_epi32((int)0xffff0000u);                              \
    __m256 lo[NP], hi[NP];                                                                 \
    _Pragma("GCC unroll 4") for (int j = 0; j < NP; j++) lo[j] = hi[j] = _mm256_setzero_ps(); \
    int64_t k = 0;                                                                         \
    for (; k + 4 <= K; k += 4) {                                                           \
        _Pragma("GCC unroll 4") for (int j = 0; j < NP; j++)                               \
            _Pragma("GCC unroll 2") for (int b = 0; b < 128; b += 64)                      \
                _mm_prefetch((const char *)(p + j * stride + k * 16) + PANEL512_PF_AHEAD + b, \
                             _MM_HINT_T0);                                                 \
        _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) {                              \
            __m256 b = _mm256_set1_ps(x[k + u]);                                           \
            _Pragma("GCC unroll 4") for (int j = 0; j < NP; j++) {                         \
                __m256i v = _mm256_loadu_si256((const __m256i *)(p + j * stride + (k + u) * 16)); \
                lo[j] = _mm256_fmadd_ps(b, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), lo[j]); \
                hi[j] = _mm256_fmadd_ps(b, _mm256_castsi256_ps(_mm256_and_si256(v, keep)), hi[j]); \
            }                                                                              \
        }                                                                                  \
    }                                                                                      \
    for (; k < K; k++) {                                                                   \
        __m256 b = _mm256_set1_ps(x[k]);                                                   \
        _Pragma("GCC unroll 4") for (int j = 0; j < NP; j++) {                             \
            __m256i v = _mm256_loadu_si256((const __m256i *)(p + j * stride + k * 16));    \
            lo[j] = _mm256_fmadd_ps(b, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), lo[j]); \
            hi[j] = _mm256_fmadd_ps(b, _mm256_castsi256_ps(_mm256_and_si256(v, keep)), hi[j]); \
        }                                                                                  \
    }                                                                                      \
    _Pragma("GCC unroll 4") for (int j = 0; j < NP; j++) {                                 \
        const int64_t left = nn - 16 * j;                                                  \
        if (left <= 0) break;                                                              \
        __m512 v = _mm512_castpd_ps(_mm512_insertf64x4(                                    \
            _mm512_castps_pd(_mm512_castps256_ps512(lo[j])), _mm256_castps_pd(hi[j]), 1)); \
        pstore(out + 16 * j, v, bias ? bias + 16 * j : NULL, left, accumulate);            \
    }                                                                                      \
}

/* Call tile NAME##_<mr>x<NP> for a runtime mr in 1..6. */
#define PT_CASE(NAME, R, NP, xx, oo, pf)                                                   \
    case R: NAME##_##R##x##NP(xx, K, p, stride, oo, ldo, b, nn, accumulate, pf); break;
#define PT_SWITCH(NAME, NP, mr, xx, oo, pf)                                                \
    switch (mr) {                                                                          \
    PT_CASE(NAME, 1, NP, xx, oo, pf) PT_CASE(NAME, 2, NP, xx, oo, pf)                      \
    PT_CASE(NAME, 3, NP, xx, oo, pf) PT_CASE(NAME, 4, NP, xx, oo, pf)                      \
    PT_CASE(NAME, 5, NP, xx, oo, pf) PT_CASE(NAME, 6, NP, xx, oo, pf)                      \
    default: break;                                                                        \
    }

#define PTILES(NAME, WT, PLOAD, PFIX, NP)                                                        \
PTILE(NAME##_1x##NP, WT, PLOAD, PFIX, 1, NP)                                                     \
PTILE(NAME##_2x##NP, WT, PLOAD, PFIX, 2, NP)                                                     \
PTILE(NAME##_3x##NP, WT, PLOAD, PFIX, 3, NP)                                                     \
PTILE(NAME##_4x##NP, WT, PLOAD, PFIX, 4, NP)                                                     \
PTILE(NAME##_5x##NP, WT, PLOAD, PFIX, 5, NP)                                                     \
PTILE(NAME##_6x##NP, WT, PLOAD, PFIX, 6, NP)

/* All rows of one column group of NP panels starting at column n, in
 * near-equal tiles of at most 6 rows (16 -> 6 + 5 + 5), the first tile
 * prefetching the panel streams. */
#define PT_GROUP(NAME, WT, NP)                                                               \
    {                                                                                      \
        const WT *p = w + (n / 16) * stride;                                               \
        const float *b = bias ? bias + n : NULL;                                           \
        const int64_t nn = N - n, tiles = (M + 5) / 6;                                     \
        int64_t m = 0;                                                                     \
        for (int64_t t = 0; t < tiles; t++) {                                              \
            const int64_t mr = (M - m) / (tiles - t) + ((M - m) % (tiles - t) != 0);       \
            PT_SWITCH(NAME, NP, mr, x + m * K, out + m * ldo + n, t == 0)                  \
            m += mr;                                                                       \
        }                                                                                  \
    }

/* The driver (see the top of the file for the shapes): column groups of 4
 * panels, then 2 and 1 for the rest of N. */
#define MATMUL_PANEL512(NAME, WT, PLOAD, PFIX, GEMV)                                                 \
PTILES(NAME, WT, PLOAD, PFIX, 4)                                                                 \
PTILES(NAME, WT, PLOAD, PFIX, 2)                                                                 \
PTILES(NAME, WT, PLOAD, PFIX, 1)                                                                 \
GEMV(NAME##_g4, WT, PLOAD, PFIX, 4)                                                             \
GEMV(NAME##_g2, WT, PLOAD, PFIX, 2)                                                             \
GEMV(NAME##_g1, WT, PLOAD, PFIX, 1)                                                             \
AVX512 void NAME(const float *x, int64_t M, int64_t K, const WT *w, int64_t N,            \
                 const float *bias, float *out, int64_t ldo, int accumulate) {             \
    const int64_t stride = K * 16;                                                         \
    if (M <= 0 || N <= 0) return;                                                          \
    int64_t n = 0;                                                                         \
    if (M == 1) {                                                                          \
        for (; N - n > 48; n += 64)                                                        \
            NAME##_g4(x, K, w + (n / 16) * stride, stride, out + n,                        \
                      bias ? bias + n : NULL, N - n, accumulate);                          \
        for (; N - n > 16; n += 32)                                                        \
            NAME##_g2(x, K, w + (n / 16) * stride, stride, out + n,                        \
                      bias ? bias + n : NULL, N - n, accumulate);                          \
        for (; n < N; n += 16)                                                             \
            NAME##_g1(x, K, w + (n / 16) * stride, stride, out + n,                        \
                      bias ? bias + n : NULL, N - n, accumulate);                          \
        return;                                                                            \
    }                                                                                      \
    for (; N - n > 48; n += 64) PT_GROUP(NAME, WT, 4)                                          \
    for (; N - n > 16; n += 32) PT_GROUP(NAME, WT, 2)                                          \
    for (; n < N; n += 16) PT_GROUP(NAME, WT, 1)                                               \
}

MATMUL_PANEL512(qwi_avx512_matmul_f32_panel, float, pload_f32, pfix_f32, PGEMV)
MATMUL_PANEL512(qwi_avx512_matmul_bf16_panel, uint16_t, pload_bf16, pfix_bf16, PGEMV_BF16)

#else

/* Nothing to build off x86-64 (ISO C wants a declaration in every file). */
typedef int qwi_avx512_panel_unavailable;

#endif
