/*
 * kv_bf16dot_avx512.c - attention on bf16 dot products with vdpbf16ps
 * (kv_bf16dot.h has the contract; these give its portable form's bits).
 *
 * vdpbf16ps wants, per 32-bit lane, a pair of bf16 values along the sum:
 * for q.K two dims of one position, for P.V two positions of one dim. The
 * cache holds neither (K planes are [dim][position], V rows [position]
 * [dim]), so each kernel pairs them in registers with one word permute
 * per 16 lanes (vpermw / vpermt2w, AVX512BW), shared by every q head (up
 * to 6) or P row (up to 8) of the register block - the shuffle is paid
 * once per K/V vector, the dot product once per head.
 *
 * Scores: positions are lanes (as pscores_q), each lane one chain over the
 * dim pairs, 16 positions of one K plane at a time: rows d and d+1 of the
 * plane (block_size apart; one 64-byte load when the block size is 16)
 * interleave into 16 (k[d], k[d+1]) pairs. P.V: dims are lanes, the two V
 * rows of a position pair interleave into 2 x 16 (v[j][e], v[j+1][e])
 * pairs per 32 dims; the accumulators stay in registers over the
 * positions. Both give outputs in their natural order, so no lane is
 * moved afterwards.
 */
#include "cpu/kv_bf16dot.h"
#include "cpu/score_chunks.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define UNROLL _Pragma("GCC unroll 8")
#define BF16DOT __attribute__((target("avx512f,avx512bw,avx512bf16")))
#define BF16DOT_INLINE \
    static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512bf16")))

bool qwi_kv_bf16dot_have_avx512bf16(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512bf16");
}

BF16DOT_INLINE __m512 dot(__m512 acc, __m512i a, __m512i b) {
    return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}

/* Word indices that interleave two 16-word halves (a's words 0..15 with
 * words 16..31 of the same register, or of b in vpermt2w's 32..47): lane
 * i of the result is (word i of the first half, word i of the second). */
BF16DOT_INLINE __m512i zip_idx(int first, int second) {
    uint16_t ix[32];
    for (int i = 0; i < 16; i++) {
        ix[2 * i] = (uint16_t)(first + i);
        ix[2 * i + 1] = (uint16_t)(second + i);
    }
    return _mm512_loadu_si512(ix);
}

/* ---- scores ---------------------------------------------------------- */

/* 16 (k[d], k[d+1]) pairs of consecutive positions: plane rows d (at row)
 * and d+1 (dstride further); one load when they are adjacent (dstride 16,
 * the default block size). */
BF16DOT_INLINE __m512i kpairs(const uint16_t *row, int64_t dstride, __m512i zip, const int adjacent) {
    __m512i two;
    if (adjacent)
        two = _mm512_loadu_si512(row);
    else
        two = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)row)),
                                 _mm256_loadu_si256((const __m256i *)(row + dstride)), 1);
    return _mm512_permutexvar_epi16(zip, two);
}

/* Lanes j0 .. j0+16*nc-1 of QB q heads' scores (QB <= 6, nc <= 4: 24
 * accumulators), each K pair vector formed once for the QB of them;
 * stores past n masked off. QB, nc and adjacent are constants once
 * inlined. */
BF16DOT_INLINE void scores_chunk(const uint32_t *const *q, float *const *o, const int QB,
                                 int64_t hd, const uint16_t *const *k, int64_t dstride, int32_t j0,
                                 int32_t n, float scale, const int nc, const int adjacent) {
    const __m512i zip = zip_idx(0, 16);
    __mmask16 m[4];
    UNROLL
    for (int c = 0; c < 4; c++) {
        const int32_t r = n - j0 - 16 * c;
        m[c] = r >= 16 ? (__mmask16)0xFFFF : r <= 0 ? (__mmask16)0 : (__mmask16)((1u << r) - 1u);
    }
    __m512 acc[6][4];
    UNROLL
    for (int i = 0; i < QB; i++)
        UNROLL
        for (int c = 0; c < nc; c++) acc[i][c] = _mm512_setzero_ps();
    const uint16_t *kr[4];
    UNROLL
    for (int c = 0; c < nc; c++) kr[c] = k[j0 + 16 * c];
    for (int64_t dp = 0; dp < hd / 2; dp++) {
        __m512i kv[4];
        UNROLL
        for (int c = 0; c < nc; c++) kv[c] = kpairs(kr[c] + 2 * dp * dstride, dstride, zip, adjacent);
        UNROLL
        for (int i = 0; i < QB; i++) {
            const __m512i x = _mm512_set1_epi32((int)q[i][dp]);
            UNROLL
            for (int c = 0; c < nc; c++) acc[i][c] = dot(acc[i][c], x, kv[c]);
        }
    }
    const __m512 sv = _mm512_set1_ps(scale);
    UNROLL
    for (int i = 0; i < QB; i++)
        UNROLL
        for (int c = 0; c < nc; c++)
            _mm512_mask_storeu_ps(o[i] + j0 + 16 * c, m[c], _mm512_mul_ps(acc[i][c], sv));
}

#define SC_CHUNK(QB, NC) scores_chunk(q + h, out + h, QB, hd, k, dstride, j0, n, scale, NC, adjacent)

BF16DOT_INLINE void scores(const uint32_t *const *q, float *const *out, int32_t nq, int64_t hd,
                           const uint16_t *const *k, int64_t dstride, int32_t n, float scale,
                           const int adjacent) {
    /* lane chunks outer, groups of 6 heads inner: a chunk's K (hd x 64
     * positions of bf16) is reused from L1 by every group */
    QWI_SCORE_CHUNKS(6, nq, n, SC_CHUNK);
}

#undef SC_CHUNK

BF16DOT void qwi_avx512bf16_kv_dscores(const uint32_t *const *q, float *const *out, int32_t nq,
                                       int64_t hd, const uint16_t *const *k, int64_t dstride,
                                       int32_t n, float scale) {
    if (dstride == 16)
        scores(q, out, nq, hd, k, dstride, n, scale, 1);
    else
        scores(q, out, nq, hd, k, dstride, n, scale, 0);
}

/* ---- P.V ------------------------------------------------------------- */

/* One position pair (j, j+1) - or, when !full, row j with a zero row -
 * into accumulators acc[0..QB)[0..2*HC) of dims [e0, e0 + 32*HC): the
 * rows zipped once per 32 dims for all QB. */
BF16DOT_INLINE void dpv_pair(__m512 acc[8][8], const uint32_t *const *p, const int QB,
                             const uint16_t *const *v, int32_t j, int64_t e0, const int HC,
                             const int full) {
    const __m512i zlo = zip_idx(0, 32), zhi = zip_idx(16, 48);
    __m512i vv[8];
    UNROLL
    for (int c = 0; c < HC; c++) {
        const __m512i a = _mm512_loadu_si512(v[j] + e0 + 32 * c);
        const __m512i b = full ? _mm512_loadu_si512(v[j + 1] + e0 + 32 * c) : _mm512_setzero_si512();
        vv[2 * c] = _mm512_permutex2var_epi16(a, zlo, b);
        vv[2 * c + 1] = _mm512_permutex2var_epi16(a, zhi, b);
    }
    UNROLL
    for (int i = 0; i < QB; i++) {
        const __m512i x = _mm512_set1_epi32((int)p[i][j / 2]);
        UNROLL
        for (int c = 0; c < 2 * HC; c++) acc[i][c] = dot(acc[i][c], x, vv[c]);
    }
}

/* Accumulators o[0..QB) dims [e0, e0 + 32*HC) over positions 0..n-1
 * (QB*HC <= 8: 16 zmm), held in registers over the positions. */
BF16DOT_INLINE void dpv_blk(float *const *o, const uint32_t *const *p, const int QB,
                            const uint16_t *const *v, int32_t n, int64_t e0, const int HC) {
    __m512 acc[8][8];
    UNROLL
    for (int i = 0; i < QB; i++)
        UNROLL
        for (int c = 0; c < 2 * HC; c++) acc[i][c] = _mm512_loadu_ps(o[i] + e0 + 16 * c);
    int32_t j = 0;
    for (; j + 2 <= n; j += 2) dpv_pair(acc, p, QB, v, j, e0, HC, 1);
    if (j < n) dpv_pair(acc, p, QB, v, j, e0, HC, 0);
    UNROLL
    for (int i = 0; i < QB; i++)
        UNROLL
        for (int c = 0; c < 2 * HC; c++) _mm512_storeu_ps(o[i] + e0 + 16 * c, acc[i][c]);
}

/* The same for 16 dims [e0, e0 + 16): the two rows' 16 words each go to
 * one register's halves, one vpermw zips them. */
BF16DOT_INLINE void dpv_blk16(float *const *o, const uint32_t *const *p, const int QB,
                              const uint16_t *const *v, int32_t n, int64_t e0) {
    const __m512i zip = zip_idx(0, 16);
    __m512 acc[8];
    UNROLL
    for (int i = 0; i < QB; i++) acc[i] = _mm512_loadu_ps(o[i] + e0);
    for (int32_t j = 0; j < n; j += 2) {
        const __m256i a = _mm256_loadu_si256((const __m256i *)(v[j] + e0));
        const __m256i b = j + 1 < n ? _mm256_loadu_si256((const __m256i *)(v[j + 1] + e0))
                                    : _mm256_setzero_si256();
        const __m512i vv =
            _mm512_permutexvar_epi16(zip, _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1));
        UNROLL
        for (int i = 0; i < QB; i++) acc[i] = dot(acc[i], _mm512_set1_epi32((int)p[i][j / 2]), vv);
    }
    UNROLL
    for (int i = 0; i < QB; i++) _mm512_storeu_ps(o[i] + e0, acc[i]);
}

/* Dims [e0, hd) of nq accumulators (hd - e0 < 16) by the portable
 * chains: the same steps, so the same bits. */
static void dpv_tail(float *const *o, const uint32_t *const *p, int32_t nq,
                     const uint16_t *const *v, int32_t n, int64_t e0, int64_t hd) {
    const uint16_t *vt[256];
    for (int32_t done = 0; done < n; done += 256) {   /* 256 rows (even) at a time */
        const int32_t len = QWI_MIN(256, n - done);
        for (int32_t j = 0; j < len; j++) vt[j] = v[done + j] + e0;
        for (int32_t i = 0; i < nq; i++) {
            float *ot = o[i] + e0;
            const uint32_t *pt = p[i] + done / 2;
            qwr_kv_dpv(&ot, &pt, 1, vt, len, hd - e0);
        }
    }
}

/* QB accumulators over all hd dims: blocks of 32*HC, then 32, then 16,
 * then the hd % 16 tail. */
BF16DOT_INLINE void dpv_rows(float *const *o, const uint32_t *const *p, const int QB,
                             const uint16_t *const *v, int32_t n, int64_t hd, const int HC) {
    int64_t e = 0;
    for (; e + 32 * HC <= hd; e += 32 * HC) dpv_blk(o, p, QB, v, n, e, HC);
    for (; e + 32 <= hd; e += 32) dpv_blk(o, p, QB, v, n, e, 1);
    for (; e + 16 <= hd; e += 16) dpv_blk16(o, p, QB, v, n, e);
    if (e < hd) dpv_tail(o, p, QB, v, n, e, hd);
}

BF16DOT void qwi_avx512bf16_kv_dpv(float *const *o, const uint32_t *const *p, int32_t nq,
                                   const uint16_t *const *v, int32_t n, int64_t hd) {
    int32_t i = 0;
    if (nq >= 8) {
        /* dim blocks outer, groups of 8 accumulators inner: a block's V
         * columns (n x 64 bytes) stay in L1 for every group */
        const int32_t n8 = nq & ~7;
        int64_t e = 0;
        for (; e + 32 <= hd; e += 32)
            for (int32_t b = 0; b < n8; b += 8) dpv_blk(o + b, p + b, 8, v, n, e, 1);
        for (; e + 16 <= hd; e += 16)
            for (int32_t b = 0; b < n8; b += 8) dpv_blk16(o + b, p + b, 8, v, n, e);
        if (e < hd) dpv_tail(o, p, n8, v, n, e, hd);
        i = n8;
    }
    for (; i + 4 <= nq; i += 4) dpv_rows(o + i, p + i, 4, v, n, hd, 2);
    for (; i + 2 <= nq; i += 2) dpv_rows(o + i, p + i, 2, v, n, hd, 4);
    for (; i < nq; i++) dpv_rows(o + i, p + i, 1, v, n, hd, 4);
}

#endif
