/*
 * kernels_quant_avx2.c - the quantized matmuls of the "avx2" table
 * (AVX2 + FMA + F16C) on the layout of cpu/qpanel.h, with its arithmetic
 * contract: bit-identical to the portable kernels_quant.c
 * (tests/test_quant_kernels.c).
 *
 * A 16-output panel is two ymm halves (slots 0-7, 8-15). Decoding as in
 * kernels_quant_avx512.c without vpternlogd: a shift, a mask and an OR of
 * 2^23's bits, then subtracting 2^23 + zero (U4/U8); e4m3 through f16
 * bits and vcvtph2ps. The fast mode's E4M3 pairs (its U4 and U8 go
 * through cpu/q4i.h) are emulated with two FMAs per pair (odd k first;
 * the products are exact), each interleaved PAIR block split into even and
 * odd k by one qword permutation and a byte shift.
 * SEQ: register tiles of up to 4 rows x 1 panel share each decoded
 * weight. Fast E4M3: at M <= 2, up to 4 panels of a group at once; at
 * M > 2 a chunk decoded once per 50 rows, then 5-row tiles. The totals of
 * each group wait in memory (one FMA per output per group).
 */
#include <string.h>

#include "cpu/kernels.h"
#include "cpu/qpanel.h"
#include "cpu/tile_out.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define A_TARGET "avx2,fma,f16c"
#define A_INLINE static inline __attribute__((always_inline, target(A_TARGET)))

/* Field i of the 8 lanes at p as the f32 2^23 + field. */
A_INLINE __m256 field_magic(const uint8_t *p, int i, const int bits) {
    const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)p);
    __m256i f = _mm256_srl_epi32(v, _mm_cvtsi32_si128(bits * i));
    f = _mm256_and_si256(f, _mm256_set1_epi32(bits == 4 ? 0xf : 0xff));
    return _mm256_castsi256_ps(_mm256_or_si256(f, _mm256_set1_epi32(0x4b000000)));
}

/* e4m3 bytes in the high halves of 8 words -> their values times 2^-8. */
A_INLINE __m256 e4m3_hi_words(__m128i w) {
    w = _mm_and_si128(_mm_srai_epi16(w, 1), _mm_set1_epi16((short)0xbf80));
    return _mm256_cvtph_ps(w);
}

/* SEQ: c of slots 8h..8h+7 at column k0 + i of the block at blk. */
A_INLINE __m256 seq_c(const uint8_t *blk, int h, int i, __m256 zm, const int fmt) {
    if (fmt == QWI_QFMT_E4M3) {
        __m128i w = _mm_loadu_si128((const __m128i *)(const void *)(blk + 16 * h));
        if (i == 0) w = _mm_slli_epi16(w, 8);
        return e4m3_hi_words(w);
    }
    return _mm256_sub_ps(field_magic(blk + 32 * h, i, fmt == QWI_QFMT_U4 ? 4 : 8), zm);
}

/* PAIR (E4M3): the pair of the block at blk as the even-k (ce) and odd-k
 * (co) values of slots 0-7 ([0]) and 8-15 ([1]). The block's 16 words are
 * its slots, each with the even-k byte low and the odd-k byte high, in the
 * qword order slots 0-3, 8-11, 4-7, 12-15 (the vdpbf16ps tables' unpack
 * order, qpanel.h); one vpermq puts them in slot order, and then the odd
 * values are the words' high bytes as they lie and the even ones the low
 * bytes moved up. This replaced two unpacks, four half-width widenings and
 * a shuffle-and-permute back to slot order per pair (pair_ce_co does the
 * same in kernels_quant_avx512.c). */
A_INLINE void pair_c(const uint8_t *blk, __m256 ce[2], __m256 co[2]) {
    const __m256i w = _mm256_permute4x64_epi64(
        _mm256_loadu_si256((const __m256i *)(const void *)blk), 0xd8);
    const __m256i m = _mm256_set1_epi16((short)0xbf80);
    const __m256i o = _mm256_and_si256(_mm256_srai_epi16(w, 1), m);
    const __m256i e = _mm256_and_si256(_mm256_srai_epi16(_mm256_slli_epi16(w, 8), 1), m);
    co[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(o));
    co[1] = _mm256_cvtph_ps(_mm256_extracti128_si256(o, 1));
    ce[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(e));
    ce[1] = _mm256_cvtph_ps(_mm256_extracti128_si256(e, 1));
}

A_INLINE __m256 bc_hi(uint32_t p) { return _mm256_castsi256_ps(_mm256_set1_epi32((int)(p & 0xffff0000u))); }
A_INLINE __m256 bc_lo(uint32_t p) { return _mm256_castsi256_ps(_mm256_set1_epi32((int)(p << 16))); }

/* SEQ: MR rows of x (f32 rows of K) x panel p, every group, into
 * res[r*16 ..] (the totals). */
A_INLINE void tile(const float *x, int64_t K, const qwi_qpanel *w, int64_t p, float *res,
                   const int mr, const int fmt) {
    const int64_t G = w->ngroups, gk = w->group_k;
    const int KB = fmt == QWI_QFMT_U4 ? 8 : fmt == QWI_QFMT_U8 ? 4 : 2;
    const int BB = fmt == QWI_QFMT_E4M3 ? 32 : 64;
    const uint8_t *pc = w->codes + qwi_qpanel_block_at(w, p, 0);
    const __m256 magic = _mm256_set1_ps(0x1p23f);
    memset(res, 0, sizeof(float) * 16 * (size_t)mr);
    for (int64_t g = 0; g < G; g++) {
        __m256 z[2] = { magic, magic }, acc[4][2];
        if (fmt != QWI_QFMT_E4M3) {
            const float *zp = w->zeros + (p * G + g) * 16;
            for (int i = 0; i < 2; i++) z[i] = _mm256_add_ps(_mm256_loadu_ps(zp + 8 * i), magic);
        }
        _Pragma("GCC unroll 4") for (int r = 0; r < mr; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
        const int64_t ks = g * gk, ke = QWI_MIN(K, ks + gk);
        int64_t k = ks;
#define SEQ_STEP(KK, I)                                                                        \
    do {                                                                                       \
        const uint8_t *blk_ = pc + ((KK) / KB) * BB;                                           \
        const __m256 c0 = seq_c(blk_, 0, (I), z[0], fmt), c1 = seq_c(blk_, 1, (I), z[1], fmt); \
        _Pragma("GCC unroll 4") for (int r = 0; r < mr; r++) {                                 \
            const __m256 xb = _mm256_set1_ps(x[r * K + (KK)]);                                 \
            acc[r][0] = _mm256_fmadd_ps(xb, c0, acc[r][0]);                                    \
            acc[r][1] = _mm256_fmadd_ps(xb, c1, acc[r][1]);                                    \
        }                                                                                      \
    } while (0)
        if (ks % KB == 0)
            for (; k + KB <= ke; k += KB)
                _Pragma("GCC unroll 8") for (int i = 0; i < KB; i++) SEQ_STEP(k + i, i);
        for (; k < ke; k++) SEQ_STEP(k, (int)(k % KB));
#undef SEQ_STEP
        const float *sc = w->scales + (p * G + g) * 16;
        _Pragma("GCC unroll 4") for (int r = 0; r < mr; r++)
            for (int h = 0; h < 2; h++) {
                const __m256 t = _mm256_loadu_ps(res + r * 16 + 8 * h);
                _mm256_storeu_ps(res + r * 16 + 8 * h,
                                 _mm256_fmadd_ps(acc[r][h], _mm256_loadu_ps(sc + 8 * h), t));
            }
    }
}

/* ---- PAIR (E4M3), M > 2: decoded chunks ----------------------------------- */

/* Lines of a panel prefetched ahead of its chunk decode. A panel's lines
 * lie 4 lines apart (interleaved groups), and in concurrent decode (M = 32)
 * they come from memory: without it perf put 13% of the kernel's samples
 * on the first use of each load. 0.6B FP8 32-way step on the avx2 table
 * forced on a Zen 4: 268-269 -> 240-243 ms (8 and 16 lines: 249-258; 64
 * as 32). */
#define A_PF_LINES 32
#define A_KP 64   /* pairs per decoded chunk: 64 x 128 B = 8 KiB of f32, in L1 */
#define A_MB 50   /* rows per row block: the chunk's decoding is shared by all */
#define A_TR 5    /* rows per tile, QWI_ROW_TILES_5_4's tallest: A_MB is a
                     multiple, so a full block has no short tile (48 with a
                     3-row tail: 2-3% slower); a shorter block ends in 4s */
_Static_assert(A_TR == 5, "QWI_ROW_TILES_5_4 walks the rows in tiles of 5 and 4");

/* Pairs [j0, j1) of panel p as f32 into buf[(j - j0) * 32 ..]: ce[0], co[0],
 * ce[1], co[1] (8 lanes each; pair_c's values). */
A_INLINE void pair_decode_chunk(const qwi_qpanel *w, int64_t p, int64_t j0, int64_t j1,
                                float *buf) {
    const uint8_t *pc = w->codes + qwi_qpanel_block_at(w, p, 0);
    const int64_t ls = qwi_qpanel_line_stride(w, p);
    for (int64_t j = j0; j < j1; j++) {
        __m256 ce[2], co[2];
        if (!(j & 1)) _mm_prefetch((const char *)(pc + ((j >> 1) + A_PF_LINES) * ls), _MM_HINT_T0);
        pair_c(pc + (j >> 1) * ls + (j & 1) * 32, ce, co);
        float *o = buf + (j - j0) * 32;
        _mm256_storeu_ps(o, ce[0]);
        _mm256_storeu_ps(o + 8, co[0]);
        _mm256_storeu_ps(o + 16, ce[1]);
        _mm256_storeu_ps(o + 24, co[1]);
    }
}

/* MR <= A_TR rows (xp: the first at the chunk's first pair, row stride
 * KP) x the decoded pairs [0, jn) in buf: pair_gemv's FMAs in its order
 * per accumulator, but each pair in two phases - every row's odd FMAs,
 * then every even one - so that an accumulator's two FMAs have the
 * others' between them to hide the FMA latency (as avx2_tile in
 * kernels_bf16dot.c; back to back, 4 rows were latency-bound), from acc
 * = 0 (first) or the partial sums in part (row stride 16) and back there;
 * at the group's end (last) tot[r] = fma(acc, scale, tot[r]) instead
 * (row stride 16), as pair_gemv does in res. Same bits as pair_gemv.
 * wide: the rows come widened (xw, row stride 2 * KP; kernels.h's
 * matmul_qpair_wide), each half one vbroadcastss from memory instead of a
 * broadcast and a mask or shift per row and pair: on a Zen 1, where those
 * are two 128-bit uops each, half the tile's vector instructions.
 * Every loop over the tile's accumulators is unrolled by pragma: with the
 * h loops of the load and store steps left to GCC 12, it kept acc in a
 * stack array and stored all ten accumulators there on every pair (perf
 * annotate on a Zen 1), next to the 20 FMAs. */
A_INLINE void pair_chunk_tile(const uint32_t *xp, const float *xw, int64_t KP, const float *buf,
                              int64_t jn, float *part, int first, int last, const float *sc,
                              float *tot, const int mr, const int wide) {
    __m256 acc[A_TR][2];
    _Pragma("GCC unroll 6") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++)
            acc[r][h] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(part + r * 16 + 8 * h);
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    for (int64_t j = 0; j < jn; j++) {
        const float *c = buf + j * 32;
        const __m256 co0 = _mm256_loadu_ps(c + 8), co1 = _mm256_loadu_ps(c + 24);
        _Pragma("GCC unroll 6") for (int r = 0; r < mr; r++) {
            const __m256 xo = wide ? _mm256_broadcast_ss(xw + r * 2 * KP + 2 * j + 1)
                                   : _mm256_castsi256_ps(_mm256_and_si256(
                                         _mm256_set1_epi32((int)xp[r * KP + j]), hi));
            acc[r][0] = _mm256_fmadd_ps(xo, co0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(xo, co1, acc[r][1]);
        }
        const __m256 ce0 = _mm256_loadu_ps(c), ce1 = _mm256_loadu_ps(c + 16);
        const uint32_t *xp2 = wide ? xp : qwi_opaque_ptr(xp);
        _Pragma("GCC unroll 6") for (int r = 0; r < mr; r++) {
            const __m256 xe = wide ? _mm256_broadcast_ss(xw + r * 2 * KP + 2 * j)
                                   : _mm256_castsi256_ps(_mm256_slli_epi32(
                                         _mm256_set1_epi32((int)xp2[r * KP + j]), 16));
            acc[r][0] = _mm256_fmadd_ps(xe, ce0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(xe, ce1, acc[r][1]);
        }
    }
    _Pragma("GCC unroll 6") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            if (last) {
                float *t = tot + r * 16 + 8 * h;
                _mm256_storeu_ps(t, _mm256_fmadd_ps(acc[r][h], _mm256_loadu_ps(sc + 8 * h),
                                                    _mm256_loadu_ps(t)));
            } else {
                _mm256_storeu_ps(part + r * 16 + 8 * h, acc[r][h]);
            }
        }
}

/* E4M3 pairs, M > 2: per panel and row block, each chunk of a group is
 * decoded once into buf and swept by 5- and 4-row tiles. Decoding every pair
 * for every 4 rows (as the M <= 2 path must) cost about 20 decode
 * operations next to 16 FMAs, so the prefill of an FP8 model ran at about
 * half bf16's speed (the avx2 table forced on a Zen 4: 86 against 167
 * tok/s). x: the rows' pairs, or (wide) xw: the rows widened. */
A_INLINE void pair_chunked(const uint32_t *x, const float *xw, int64_t M, int64_t KP,
                           const qwi_qpanel *w, int64_t n0, int64_t N, const float *bias,
                           float *out, int64_t ldo, int accumulate, const int wide) {
    float buf[A_KP * 32] __attribute__((aligned(32)));
    float part[A_MB * 16] __attribute__((aligned(32))), tot[A_MB * 16] __attribute__((aligned(32)));
    float scb[64] __attribute__((aligned(32)));   /* one panel's scales, where expanded */
    const int64_t G = w->ngroups, gk = w->group_k;
    for (int64_t j0 = 0; j0 < N; j0 += 16) {
        const int64_t p = (n0 + j0) / 16;
        for (int64_t m0 = 0; m0 < M; m0 += A_MB) {
            const int64_t mb = QWI_MIN((int64_t)A_MB, M - m0);
            memset(tot, 0, sizeof(float) * 16 * (size_t)mb);
            for (int64_t g = 0; g < G; g++) {
                const int64_t js = g * gk / 2, je = QWI_MIN(KP, (g + 1) * gk / 2);
                int64_t scs;
                const float *sc = qwi_qpanel_group_scales(w, p, g, 1, scb, &scs);
                for (int64_t c0 = js; c0 < je; c0 += A_KP) {
                    const int64_t c1 = QWI_MIN(je, c0 + A_KP);
                    pair_decode_chunk(w, p, c0, c1, buf);
#define A_TILE(r, MR)                                                                  \
    pair_chunk_tile(wide ? NULL : x + (m0 + (r)) * KP + c0,                                \
                    wide ? xw + (m0 + (r)) * 2 * KP + 2 * c0 : NULL, KP, buf, c1 - c0,     \
                    part + (r) * 16, c0 == js, c1 == je, sc, tot + (r) * 16, MR, wide)
                    QWI_ROW_TILES_5_4(mb, A_TILE);
#undef A_TILE
                }
            }
            for (int64_t r = 0; r < mb; r++)
                qwi_put16(tot + r * 16, j0, N, bias, out + (m0 + r) * ldo, accumulate);
        }
    }
}

/* ---- PAIR (E4M3), M <= 2: NP panels at a time --------------------------- */

/* MR rows (xp, row stride KP) x NP panels of p0's interleaved group, all
 * groups, totals into res[r * 64 + q * 16] (zeroed here): the contract's
 * chains - per accumulator the odd FMA, then the even one, pair after
 * pair, from zero in each group, then res = fma(acc, scale, res) - for
 * MR * NP <= 4 panels at once. One panel at a time (as SEQ's tile() runs),
 * each row's two accumulators waited on their own previous FMA, 8 cycles a
 * pair: the batch-1 decode of an FP8 model ran at 19 tok/s against bf16's
 * 35 on this table (Zen 4, forced). With 4 panels, 8 chains cover the
 * latency, and the group's interleaved lines are read in the order they
 * lie. */
A_INLINE void pair_gemv(const uint32_t *xp, int64_t KP, const qwi_qpanel *w, int64_t p0,
                        float *res, const int mr, const int np) {
    const int64_t G = w->ngroups, gk = w->group_k, ls = qwi_qpanel_line_stride(w, p0);
    const uint8_t *pc = w->codes + qwi_qpanel_block_at(w, p0, 0);
    float scb[64] __attribute__((aligned(32)));   /* the panels' scales, where expanded */
    memset(res, 0, sizeof(float) * 64 * (size_t)mr);
    for (int64_t g = 0; g < G; g++) {
        const int64_t js = g * gk / 2, je = QWI_MIN(KP, (g + 1) * gk / 2);
        __m256 acc[2][4][2];
        _Pragma("GCC unroll 2") for (int r = 0; r < mr; r++)
            _Pragma("GCC unroll 4") for (int q = 0; q < np; q++)
                acc[r][q][0] = acc[r][q][1] = _mm256_setzero_ps();
        for (int64_t j = js; j < je; j++) {
            const uint8_t *blk = pc + (j >> 1) * ls + (j & 1) * 32;
            _Pragma("GCC unroll 4") for (int q = 0; q < np; q++) {
                __m256 ce[2], co[2];
                pair_c(blk + q * 64, ce, co);
                _Pragma("GCC unroll 2") for (int r = 0; r < mr; r++) {
                    const uint32_t xv = xp[r * KP + j];
                    const __m256 xo = bc_hi(xv), xe = bc_lo(xv);
                    _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
                        acc[r][q][h] = _mm256_fmadd_ps(xo, co[h], acc[r][q][h]);
                        acc[r][q][h] = _mm256_fmadd_ps(xe, ce[h], acc[r][q][h]);
                    }
                }
            }
        }
        int64_t scs;
        const float *sc0 = qwi_qpanel_group_scales(w, p0, g, np, scb, &scs);
        _Pragma("GCC unroll 4") for (int q = 0; q < np; q++) {
            const float *sc = sc0 + q * scs;
            _Pragma("GCC unroll 2") for (int r = 0; r < mr; r++)
                _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
                    float *t = res + r * 64 + q * 16 + 8 * h;
                    _mm256_storeu_ps(t, _mm256_fmadd_ps(acc[r][q][h], _mm256_loadu_ps(sc + 8 * h),
                                                        _mm256_loadu_ps(t)));
                }
        }
    }
}

/* M <= 2: the panels of [n0, n0 + N) in runs of one group (up to 4 / M). */
A_INLINE void pair_small_m(const uint32_t *xp, int64_t M, int64_t KP, const qwi_qpanel *w,
                           int64_t n0, int64_t N, const float *bias, float *out, int64_t ldo,
                           int accumulate) {
    float res[2 * 64] __attribute__((aligned(32)));
    const int64_t np_all = QWI_DIV_UP(N, 16), p0 = n0 / 16;
    for (int64_t pq = 0, np; pq < np_all; pq += np) {
        np = qwi_qpanel_run(w, p0 + pq, QWI_MIN(M == 1 ? (int64_t)4 : 2, np_all - pq));
        if (M == 1) {
            switch (np) {
            case 4: pair_gemv(xp, KP, w, p0 + pq, res, 1, 4); break;
            case 3: pair_gemv(xp, KP, w, p0 + pq, res, 1, 3); break;
            case 2: pair_gemv(xp, KP, w, p0 + pq, res, 1, 2); break;
            default: pair_gemv(xp, KP, w, p0 + pq, res, 1, 1); break;
            }
        } else {
            if (np == 2) pair_gemv(xp, KP, w, p0 + pq, res, 2, 2);
            else pair_gemv(xp, KP, w, p0 + pq, res, 2, 1);
        }
        for (int64_t r = 0; r < M; r++)
            for (int64_t q = 0; q < np; q++)
                qwi_put16(res + r * 64 + q * 16, 16 * (pq + q), N, bias, out + r * ldo,
                          accumulate);
    }
}

/* SEQ: panels outside, row tiles of 4 inside (the panel's codes stay in
 * L1/L2 while the rows sweep them). */
A_INLINE void run_fmt(const float *x, int64_t M, int64_t K, const qwi_qpanel *w, int64_t n0,
                      int64_t N, const float *bias, float *out, int64_t ldo, int accumulate,
                      const int fmt) {
    float res[4 * 16] __attribute__((aligned(32)));
    for (int64_t j0 = 0; j0 < N; j0 += 16) {
        const int64_t p = (n0 + j0) / 16;
        for (int64_t m = 0; m < M; m += 4) {
            const float *xr = x + m * K;
            const int64_t mr = QWI_MIN((int64_t)4, M - m);
            switch (mr) {
            case 4: tile(xr, K, w, p, res, 4, fmt); break;
            case 3: tile(xr, K, w, p, res, 3, fmt); break;
            case 2: tile(xr, K, w, p, res, 2, fmt); break;
            default: tile(xr, K, w, p, res, 1, fmt); break;
            }
            for (int64_t r = 0; r < mr; r++)
                qwi_put16(res + r * 16, j0, N, bias, out + (m + r) * ldo, accumulate);
        }
    }
}

__attribute__((target(A_TARGET)))
void qwi_avx2_matmul_qf32(const float *x, int64_t M, int64_t K, const qwi_qpanel *w, int64_t n0,
                          int64_t N, const float *bias, float *out, int64_t ldo, int accumulate) {
    if (M <= 0 || N <= 0) return;
    switch (w->fmt) {
    case QWI_QFMT_U4: run_fmt(x, M, K, w, n0, N, bias, out, ldo, accumulate, QWI_QFMT_U4); break;
    case QWI_QFMT_U8: run_fmt(x, M, K, w, n0, N, bias, out, ldo, accumulate, QWI_QFMT_U8); break;
    default: run_fmt(x, M, K, w, n0, N, bias, out, ldo, accumulate, QWI_QFMT_E4M3); break;
    }
}

__attribute__((target(A_TARGET)))
void qwi_avx2_matmul_qpair(const uint32_t *x, int64_t M, int64_t KP, const qwi_qpanel *w,
                           int64_t n0, int64_t N, const float *bias, float *out, int64_t ldo,
                           int accumulate) {
    if (M <= 0 || N <= 0) return;
    /* E4M3 only: U4 and U8 go through matmul_q4i (kernels.h) */
    if (M > 2) pair_chunked(x, NULL, M, KP, w, n0, N, bias, out, ldo, accumulate, 0);
    else pair_small_m(x, M, KP, w, n0, N, bias, out, ldo, accumulate);
}

/* The chunked path at every M, reading x widened (the driver uses it from
 * QWI_PAIR_WIDE_MIN_M = 3 rows, as qwi_avx2_matmul_qpair does above 2). */
__attribute__((target(A_TARGET)))
void qwi_avx2_matmul_qpair_wide(const float *xw, int64_t M, int64_t KP, const qwi_qpanel *w,
                                int64_t n0, int64_t N, const float *bias, float *out,
                                int64_t ldo, int accumulate) {
    if (M <= 0 || N <= 0) return;
    pair_chunked(NULL, xw, M, KP, w, n0, N, bias, out, ldo, accumulate, 1);
}

#endif
