/*
 * kv_fp8_dot_x86.h - the body of the fp8 cache's bf16 dot-product
 * kernels (kv_fp8.h: dscores8, dpv8), included by kv_fp8_vbmi.c (pairs by
 * byte permutes) and kv_fp8_bw.c (by nibble tables), which differ only in
 * how they make the bf16 pairs.
 *
 * The includer defines:
 *   DOT, DOT_INLINE     function attributes (target with avx512bf16);
 *   pair_regs           whatever its pair maker keeps in registers;
 *   pair_setup(which)   those registers for K (0) or V (1) pairs;
 *   pairs64(r, b, out)  the two vectors of 16 bf16 pairs in the 64 e4m3
 *                       bytes b: for K, b holds four K plane rows (dims d
 *                       .. d+3) of 16 positions and out[h] lane t is the
 *                       pair (k[d+2h], k[d+2h+1]) of position t; for V,
 *                       b holds 32 dims of row j then of row j+1 and
 *                       out[h] lane t is (v[j][16h+t], v[j+1][16h+t]).
 * Every lane then runs kv_bf16dot_avx512.c's chain over the same bf16
 * values in the same order: the bits of to_bf16 followed by
 * qwi_avx512bf16_kv_dscores / _dpv.
 */
#ifndef QWI_CPU_KV_FP8_DOT_X86_H
#define QWI_CPU_KV_FP8_DOT_X86_H

#include "cpu/score_chunks.h"

#ifndef UNROLL
#define UNROLL _Pragma("GCC unroll 8")
#endif

DOT_INLINE __m512 dot(__m512 acc, __m512i a, __m512i b) {
    return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}

/* ---- scores ---------------------------------------------------------- */

/* Rows d .. d+rows-1 (rows 4 or 2) of a K plane, 16 positions each and
 * dstride apart, in 16-byte lanes 0.. of one register (the rest zero). */
DOT_INLINE __m512i plane_rows(const uint8_t *row, int64_t dstride, const int rows) {
    if (rows == 4 && dstride == 16) return _mm512_loadu_si512(row);
    __m512i z = _mm512_inserti32x4(_mm512_zextsi128_si512(_mm_loadu_si128((const __m128i *)row)),
                           _mm_loadu_si128((const __m128i *)(row + dstride)), 1);
    if (rows == 2) return z;
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(row + 2 * dstride)), 2);
    return _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(row + 3 * dstride)), 3);
}

/* Lanes j0 .. j0+16*nc-1 of QB q heads' scores (QB <= 4, nc <= 4: 16
 * accumulators), the pairs of four dims made once for all QB; stores
 * past n masked off. */
DOT_INLINE void dot_scores_chunk(const pair_regs *r, const uint32_t *const *q, float *const *o, const int QB,
                             int64_t hd, const uint8_t *const *k, int64_t dstride, int32_t j0, int32_t n,
                             float scale, const int nc) {
    __mmask16 m[4];
    UNROLL
    for (int c = 0; c < 4; c++) {
        const int32_t rem = n - j0 - 16 * c;
        m[c] = rem >= 16 ? (__mmask16)0xFFFF : rem <= 0 ? (__mmask16)0 : (__mmask16)((1u << rem) - 1u);
    }
    __m512 acc[4][4];
    UNROLL
    for (int i = 0; i < QB; i++)
        UNROLL
        for (int c = 0; c < nc; c++) acc[i][c] = _mm512_setzero_ps();
    int64_t d = 0;
    for (; d + 4 <= hd; d += 4)
        UNROLL
        for (int c = 0; c < nc; c++) {
            __m512i kv[2];
            pairs64(r, plane_rows(k[j0 + 16 * c] + d * dstride, dstride, 4), kv);
            UNROLL
            for (int i = 0; i < QB; i++) {
                acc[i][c] = dot(acc[i][c], _mm512_set1_epi32((int)q[i][d / 2]), kv[0]);
                acc[i][c] = dot(acc[i][c], _mm512_set1_epi32((int)q[i][d / 2 + 1]), kv[1]);
            }
        }
    if (d < hd)   /* hd % 4 == 2: the last pair of dims */
        UNROLL
        for (int c = 0; c < nc; c++) {
            __m512i kv[2];
            pairs64(r, plane_rows(k[j0 + 16 * c] + d * dstride, dstride, 2), kv);
            UNROLL
            for (int i = 0; i < QB; i++) acc[i][c] = dot(acc[i][c], _mm512_set1_epi32((int)q[i][d / 2]), kv[0]);
        }
    const __m512 sv = _mm512_set1_ps(scale);
    UNROLL
    for (int i = 0; i < QB; i++)
        UNROLL
        for (int c = 0; c < nc; c++) _mm512_mask_storeu_ps(o[i] + j0 + 16 * c, m[c], _mm512_mul_ps(acc[i][c], sv));
}

#define SC_CHUNK(QB, NC) dot_scores_chunk(&r, q + h, out + h, QB, hd, k, dstride, j0, n, scale, NC)

static DOT void dot_scores8(const uint32_t *const *q, float *const *out, int32_t nq, int64_t hd,
                            const uint8_t *const *k, int64_t dstride, int32_t n, float scale) {
    const pair_regs r = pair_setup(0);
    QWI_SCORE_CHUNKS(4, nq, n, SC_CHUNK);
}

#undef SC_CHUNK

/* ---- P.V ------------------------------------------------------------- */

/* Bytes [e, e + m) of rows a and b (b NULL: a zero row) as one register:
 * a's in bytes 0..m-1, b's from byte 32 (m <= 32). */
DOT_INLINE __m512i two_rows(const uint8_t *a, const uint8_t *b, int64_t e, int m) {
    const __mmask32 mk = m >= 32 ? ~(__mmask32)0 : (((__mmask32)1 << m) - 1);
    const __m256i lo = _mm256_maskz_loadu_epi8(mk, a + e);
    const __m256i hi = b ? _mm256_maskz_loadu_epi8(mk, b + e) : _mm256_setzero_si256();
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* Accumulators o[0..QB) dims [e0, e0 + 32*HC) over positions 0..n-1
 * (QB*HC <= 8: 16 zmm) in registers; m < 32 only for a last, partial
 * chunk (HC 1): its dims past hd are neither loaded nor stored. */
DOT_INLINE void dpv_blk(const pair_regs *r, float *const *o, const uint32_t *const *p, const int QB,
                        const uint8_t *const *v, int32_t n, int64_t e0, const int HC, int m) {
    const __mmask16 m0 = m >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << m) - 1u);
    const __mmask16 m1 = m >= 32 ? (__mmask16)0xFFFF : m <= 16 ? 0 : (__mmask16)((1u << (m - 16)) - 1u);
    __m512 acc[4][8];
    UNROLL
    for (int i = 0; i < QB; i++)
        UNROLL
        for (int c = 0; c < HC; c++) {
            acc[i][2 * c] = _mm512_maskz_loadu_ps(m0, o[i] + e0 + 32 * c);
            acc[i][2 * c + 1] = _mm512_maskz_loadu_ps(m1, o[i] + e0 + 32 * c + 16);
        }
    for (int32_t j = 0; j < n; j += 2) {
        const uint8_t *second = j + 1 < n ? v[j + 1] : NULL;
        __m512i vv[8];
        UNROLL
        for (int c = 0; c < HC; c++) pairs64(r, two_rows(v[j], second, e0 + 32 * c, m), vv + 2 * c);
        UNROLL
        for (int i = 0; i < QB; i++) {
            const __m512i x = _mm512_set1_epi32((int)p[i][j / 2]);
            UNROLL
            for (int c = 0; c < 2 * HC; c++) acc[i][c] = dot(acc[i][c], x, vv[c]);
        }
    }
    UNROLL
    for (int i = 0; i < QB; i++)
        UNROLL
        for (int c = 0; c < HC; c++) {
            _mm512_mask_storeu_ps(o[i] + e0 + 32 * c, m0, acc[i][2 * c]);
            _mm512_mask_storeu_ps(o[i] + e0 + 32 * c + 16, m1, acc[i][2 * c + 1]);
        }
}

/* QB accumulators over all hd dims: blocks of 32*HC, then 32, then the
 * rest. */
DOT_INLINE void dpv_rows(const pair_regs *r, float *const *o, const uint32_t *const *p, const int QB,
                         const uint8_t *const *v, int32_t n, int64_t hd, const int HC) {
    int64_t e = 0;
    for (; e + 32 * HC <= hd; e += 32 * HC) dpv_blk(r, o, p, QB, v, n, e, HC, 32);
    for (; e + 32 <= hd; e += 32) dpv_blk(r, o, p, QB, v, n, e, 1, 32);
    if (e < hd) dpv_blk(r, o, p, QB, v, n, e, 1, (int)(hd - e));
}

static DOT void dot_pv8(float *const *o, const uint32_t *const *p, int32_t nq, const uint8_t *const *v,
                        int32_t n, int64_t hd) {
    const pair_regs r = pair_setup(1);
    int32_t i = 0;
    for (; i + 4 <= nq; i += 4) dpv_rows(&r, o + i, p + i, 4, v, n, hd, 2);
    for (; i + 2 <= nq; i += 2) dpv_rows(&r, o + i, p + i, 2, v, n, hd, 4);
    for (; i < nq; i++) dpv_rows(&r, o + i, p + i, 1, v, n, hd, 4);
}

#endif
