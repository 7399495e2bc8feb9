/*
 * kernels_quant_avx512.c - the quantized matmuls of the "avx512" table
 * (matmul_qf32; matmul_qpair with vdpbf16ps emulated by FMAs) and the
 * vdpbf16ps matmul_qpair of the "avx512bf16" table, on the layout of
 * cpu/qpanel.h, with its arithmetic contract (bit-identical to the portable
 * kernels_quant.c; tests/test_quant_kernels.c).
 *
 * One zmm = one 16-output panel. Decoding 16 codes costs a shift, a
 * vpternlogd ((v >> s) & mask | bits(2^23)) and a subtraction of
 * 2^23 + zero (U4/U8), or for e4m3 a 16-bit shift and mask to f16 bits and
 * a vcvtph2ps (qpanel.h). matmul_qpair takes E4M3 weights (the fast
 * mode's U4 and U8 go through cpu/q4i.h). Two paths, same chains (an f32
 * store and reload of a partial sum changes no bit):
 *   M <= 2 (decode): codes decoded in registers next to the FMAs, 4 panels
 *     at a time so 4 (x M) FMA chains hide the latency; the weights stream
 *     once, which is what decode is bound by.
 *   M > 2 (prefill, batches): per row block of 48 rows and per chunk of
 *     128 input columns of one group, the chunk of up to 4 panels is decoded
 *     once into an L1 buffer (f32, or bf16 pairs for vdpbf16ps) and swept by
 *     6 x 4 register tiles like the plain panel kernels, so decoding costs
 *     1/48 of the FMAs.
 * qwi_avx512vbmi_matmul_qpair (the avx512bf16 table's matmul_qpair where
 * the CPU has AVX512_VBMI) replaces the M <= 2 E4M3 decode with byte-table
 * lookups (vpermi2b) that give the same bf16 bits in half the work; see
 * its section at the end.
 */
#include <string.h>

#include "cpu/gemv_prefetch.h"
#include "cpu/kernels.h"
#include "cpu/qpanel.h"
#include "cpu/tile_out.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define Q_TARGET "avx512f,avx2,fma,f16c"
#define Q_INLINE static inline __attribute__((always_inline, target(Q_TARGET)))
#define QB_TARGET Q_TARGET ",avx512bf16"
#define QB_INLINE static inline __attribute__((always_inline, target(QB_TARGET)))

#define QKC 128      /* input columns per decoded chunk (a multiple of every block) */
#define QMB 48       /* rows per row block of the chunked path                      */
#define QPF 256      /* prefetch distance of the M <= 2 path on Zen 4 (gemv_prefetch.h) */

/* ---- decoding ------------------------------------------------------------ */

/* Field i (a constant after unrolling, or not) of the 16 lanes at blk, as
 * the f32 2^23 + field. */
Q_INLINE __m512 field_magic(const uint8_t *blk, int i, const int bits) {
    const __m512i v = _mm512_loadu_si512(blk);
    const __m512i f = _mm512_srl_epi32(v, _mm_cvtsi32_si128(bits * i));
    const __m512i mask = _mm512_set1_epi32(bits == 4 ? 0xf : 0xff);
    const __m512i magic = _mm512_set1_epi32(0x4b000000);
    return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(f, mask, magic, 0xea));
}

/* e4m3 bytes in the high halves of 16 words -> the f32 values times 2^-8. */
Q_INLINE __m512 e4m3_hi_words(__m256i w) {
    w = _mm256_and_si256(_mm256_srai_epi16(w, 1), _mm256_set1_epi16((short)0xbf80));
    return _mm512_cvtph_ps(w);
}

/* SEQ: c of the 16 slots at column k0 + i of the block at blk (zm = 2^23 +
 * zeros; unused for e4m3). */
Q_INLINE __m512 seq_c(const uint8_t *blk, int i, __m512 zm, const int fmt) {
    if (fmt == QWI_QFMT_E4M3) {
        __m256i w = _mm256_loadu_si256((const __m256i *)(const void *)blk);
        if (i == 0) w = _mm256_slli_epi16(w, 8);
        return e4m3_hi_words(w);
    }
    return _mm512_sub_ps(field_magic(blk, i, fmt == QWI_QFMT_U4 ? 4 : 8), zm);
}

/* PAIR (E4M3, one pair per block): the block at blk as b = slots 0-7 and
 * a = slots 8-15, each in (slot, k even|odd) lane order. */
Q_INLINE void pair_ba(const uint8_t *blk, __m512 *b, __m512 *a) {
    const __m256i w = _mm256_loadu_si256((const __m256i *)(const void *)blk);
    const __m256i z = _mm256_setzero_si256();
    *b = e4m3_hi_words(_mm256_unpacklo_epi8(z, w));
    *a = e4m3_hi_words(_mm256_unpackhi_epi8(z, w));
}

Q_INLINE __m512 pair_hi(uint32_t p) {
    return _mm512_castsi512_ps(_mm512_set1_epi32((int)(p & 0xffff0000u)));
}
Q_INLINE __m512 pair_lo(uint32_t p) { return _mm512_castsi512_ps(_mm512_set1_epi32((int)(p << 16))); }

/* FMA tables: the pair of the block at blk as the even-k and odd-k values
 * in slot order. The block's 16 words are its slots, each with the even-k
 * byte low and the odd-k byte high, in the qwords order (slots 0-3, 8-11,
 * 4-7, 12-15) that suits pair_ba; one qword permutation puts them in slot
 * order, and then the odd values are the words' high bytes as they lie and
 * the even ones the low bytes moved up. That replaces pair_ba's two unpacks
 * (which the vdpbf16ps tables' bf16 pair lanes need) and two 32-lane
 * permutations back to slot order. A batch-1 fp8 GEMV of the avx512 table
 * decodes every pair of every panel; on one Zen 4 thread (table forced,
 * qw-qbench --k 1024 --n 3072) it ran at 16 GB/s, bound by this decode. */
Q_INLINE void pair_ce_co(const uint8_t *blk, __m512 *ce, __m512 *co) {
    const __m256i w = _mm256_permute4x64_epi64(
        _mm256_loadu_si256((const __m256i *)(const void *)blk), 0xd8);
    *co = e4m3_hi_words(w);
    *ce = e4m3_hi_words(_mm256_slli_epi16(w, 8));
}

/* vdpbf16ps tables: the pair of the block at blk as bf16 pair lanes (the
 * pair panel of cpu/pairpanel.h). */
QB_INLINE __m512i pair_bf16(const uint8_t *blk) {
    __m512 b, a;
    pair_ba(blk, &b, &a);
    return (__m512i)_mm512_cvtne2ps_pbh(a, b);
}

/* ---- M <= 2: decode in registers ----------------------------------------- */

/* MR rows x NP panels from panel p0, all groups, totals to res[r*64 + q*16]. */
Q_INLINE void seq_direct(const float *x, int64_t K, const qwi_qpanel *w, int64_t p0, float *res,
                         const int mr, const int np, const int fmt) {
    const int64_t G = w->ngroups, gk = w->group_k, pb = qwi_qpanel_panel_bytes(w->fmt, w->k);
    const int KB = fmt == QWI_QFMT_U4 ? 8 : fmt == QWI_QFMT_U8 ? 4 : 2;
    const int BB = fmt == QWI_QFMT_E4M3 ? 32 : 64;
    const __m512 magic = _mm512_set1_ps(0x1p23f);
    const int64_t pf = qwi_cpu_gemv_prefetch(QPF);
    __m512 tot[2][4], acc[2][4], zm[4];
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) tot[r][q] = _mm512_setzero_ps();
    for (int64_t g = 0; g < G; g++) {
        const int64_t ks = g * gk, ke = QWI_MIN(K, ks + gk);
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) {
            zm[q] = fmt == QWI_QFMT_E4M3 ? magic
                    : _mm512_add_ps(_mm512_loadu_ps(w->zeros + ((p0 + q) * G + g) * 16), magic);
            _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++) acc[r][q] = _mm512_setzero_ps();
        }
        int64_t k = ks;
        if (ks % KB == 0)
            for (; k + KB <= ke; k += KB) {
                const uint8_t *blk = w->codes + p0 * pb + (k / KB) * BB;
                /* decoding keeps the core busy enough that the hardware
                 * prefetchers alone leave the loads waiting on memory */
                _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
                    _mm_prefetch((const char *)(blk + q * pb + pf), _MM_HINT_T0);
                _Pragma("GCC unroll 8") for (int i = 0; i < KB; i++) {
                    __m512 c[4];
                    _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
                        c[q] = seq_c(blk + q * pb, i, zm[q], fmt);
                    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++) {
                        const __m512 xb = _mm512_set1_ps(x[r * K + k + i]);
                        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
                            acc[r][q] = _mm512_fmadd_ps(xb, c[q], acc[r][q]);
                    }
                }
            }
        for (; k < ke; k++) {
            const uint8_t *blk = w->codes + p0 * pb + (k / KB) * BB;
            const int i = (int)(k % KB);
            __m512 c[4];
            _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) c[q] = seq_c(blk + q * pb, i, zm[q], fmt);
            _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++) {
                const __m512 xb = _mm512_set1_ps(x[r * K + k]);
                _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
                    acc[r][q] = _mm512_fmadd_ps(xb, c[q], acc[r][q]);
            }
        }
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) {
            const __m512 sc = _mm512_loadu_ps(w->scales + ((p0 + q) * G + g) * 16);
            _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
                tot[r][q] = _mm512_fmadd_ps(acc[r][q], sc, tot[r][q]);
        }
    }
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) _mm512_storeu_ps(res + r * 64 + q * 16, tot[r][q]);
}

/* The 16 f32 scales of group g of PAIR E4M3 panel p: one broadcast where
 * the layout keeps one a panel (qpanel.h), else the panel's 16. */
Q_INLINE __m512 pair_scales16(const qwi_qpanel *w, int64_t p, int64_t g) {
    return w->scale_per_panel ? _mm512_set1_ps(w->scales[p * w->ngroups + g])
                              : _mm512_loadu_ps(w->scales + (p * w->ngroups + g) * 16);
}

/* The same for PAIR E4M3 weights (one pair per 32-byte block) and bf16
 * pair rows; bf16: vdpbf16ps, else the FMA emulation (odd product first,
 * both exact). */
#define PAIR_DIRECT(NAME, ATTR, STEP)                                                             \
    ATTR void NAME(const uint32_t *x, int64_t KP, const qwi_qpanel *w, int64_t p0, float *res,   \
                   const int mr, const int np) {                                                 \
        const int64_t G = w->ngroups, gk = w->group_k, ls = qwi_qpanel_line_stride(w, p0);      \
        const uint8_t *pc = w->codes + qwi_qpanel_block_at(w, p0, 0);                            \
        const int64_t pf = qwi_cpu_gemv_prefetch(QPF);                                           \
        __m512 tot[2][4], acc[2][4];                                                             \
        _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)                                     \
            _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) tot[r][q] = _mm512_setzero_ps(); \
        for (int64_t g = 0; g < G; g++) {                                                        \
            const int64_t js = g * gk / 2, je = QWI_MIN(KP, (g + 1) * gk / 2);                   \
            _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)                                 \
                _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) acc[r][q] = _mm512_setzero_ps(); \
            for (int64_t j = js; j < je; j++) {                                                  \
                const uint8_t *blk = pc + (j >> 1) * ls + (j & 1) * 32;                          \
                _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)                             \
                    _mm_prefetch((const char *)(blk + q * 64 + pf), _MM_HINT_T0);               \
                STEP(blk, j);                                                                    \
            }                                                                                    \
            _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) {                               \
                const __m512 sc = pair_scales16(w, p0 + q, g);                                   \
                _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)                             \
                    tot[r][q] = _mm512_fmadd_ps(acc[r][q], sc, tot[r][q]);                       \
            }                                                                                    \
        }                                                                                        \
        _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)                                     \
            _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)                                 \
                _mm512_storeu_ps(res + r * 64 + q * 16, tot[r][q]);                              \
    }

/* One pair (the block at blk, column pair J) of every panel into every
 * row's accumulators: vdpbf16ps, or its FMA emulation. */
#define PAIR_STEP_BF16(blk, J)                                                                    \
    do {                                                                                          \
        __m512bh wv[4];                                                                           \
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)                                      \
            wv[q] = (__m512bh)pair_bf16((blk) + q * 64);                                          \
        _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++) {                                    \
            const __m512bh xb = (__m512bh)_mm512_set1_epi32((int)x[r * KP + (J)]);                \
            _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)                                  \
                acc[r][q] = _mm512_dpbf16_ps(acc[r][q], xb, wv[q]);                               \
        }                                                                                         \
    } while (0)

#define PAIR_STEP_EMUL(blk, J)                                                                    \
    do {                                                                                          \
        __m512 ce[4], co[4];                                                                      \
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)                                      \
            pair_ce_co((blk) + q * 64, &ce[q], &co[q]);                                           \
        _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++) {                                    \
            const uint32_t xp = x[r * KP + (J)];                                                  \
            const __m512 xo = pair_hi(xp), xe = pair_lo(xp);                                      \
            _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) {                                \
                acc[r][q] = _mm512_fmadd_ps(xo, co[q], acc[r][q]);                                \
                acc[r][q] = _mm512_fmadd_ps(xe, ce[q], acc[r][q]);                                \
            }                                                                                     \
        }                                                                                         \
    } while (0)

PAIR_DIRECT(pair_direct_emul, Q_INLINE, PAIR_STEP_EMUL)
PAIR_DIRECT(pair_direct_bf16, QB_INLINE, PAIR_STEP_BF16)

/* ---- M > 2: decode a chunk once, sweep it with register tiles ------------ */

/* Decode columns [k0, k1) (within one group; k0 a multiple of QKC from the
 * group start) of NP panels into buf[q][k - k0][16] (SEQ). */
Q_INLINE void seq_decode_chunk(const qwi_qpanel *w, int64_t p0, int64_t g, int64_t k0, int64_t k1,
                               float *buf, const int np, const int fmt) {
    const int64_t G = w->ngroups, pb = qwi_qpanel_panel_bytes(w->fmt, w->k);
    const int KB = fmt == QWI_QFMT_U4 ? 8 : fmt == QWI_QFMT_U8 ? 4 : 2;
    const int BB = fmt == QWI_QFMT_E4M3 ? 32 : 64;
    const __m512 magic = _mm512_set1_ps(0x1p23f);
    for (int q = 0; q < np; q++) {
        const __m512 zm = fmt == QWI_QFMT_E4M3 ? magic
                          : _mm512_add_ps(_mm512_loadu_ps(w->zeros + ((p0 + q) * G + g) * 16), magic);
        const uint8_t *pc = w->codes + (p0 + q) * pb;
        float *o = buf + (int64_t)q * QKC * 16;
        int64_t k = k0;
        if (k0 % KB == 0)
            for (; k + KB <= k1; k += KB) {
                const uint8_t *blk = pc + (k / KB) * BB;
                _Pragma("GCC unroll 8") for (int i = 0; i < KB; i++)
                    _mm512_storeu_ps(o + (k - k0 + i) * 16, seq_c(blk, i, zm, fmt));
            }
        for (; k < k1; k++)
            _mm512_storeu_ps(o + (k - k0) * 16, seq_c(pc + (k / KB) * BB, (int)(k % KB), zm, fmt));
    }
}

/* MR x NP tile over the decoded columns [0, kn): acc from part (or 0 when
 * first), chain acc = fma(x, c, acc), back to part (row stride 64). */
Q_INLINE void seq_tile(const float *x, int64_t K, const float *buf, int64_t kn, float *part,
                       int first, const int mr, const int np) {
    __m512 acc[6][4];
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
            acc[r][q] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(part + r * 64 + q * 16);
    for (int64_t k = 0; k < kn; k++) {
        __m512 c[4];
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) c[q] = _mm512_loadu_ps(buf + (q * QKC + k) * 16);
        _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++) {
            const __m512 xb = _mm512_set1_ps(x[r * K + k]);
            _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
                acc[r][q] = _mm512_fmadd_ps(xb, c[q], acc[r][q]);
        }
    }
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
            _mm512_storeu_ps(part + r * 64 + q * 16, acc[r][q]);
}

/* PAIR (E4M3), emulation: pairs [j0, j1) of NP panels (in p0's group)
 * into buf[q][j - j0][2][16] as f32 (odd-k values, then even-k). Pairs
 * outside, panels inside: the interleaved lines are read in the order they
 * lie, one stream for the hardware prefetchers. */
Q_INLINE void pair_decode_chunk_f32(const qwi_qpanel *w, int64_t p0, int64_t j0, int64_t j1,
                                    float *buf, const int np) {
    const int64_t ls = qwi_qpanel_line_stride(w, p0);
    const uint8_t *pc = w->codes + qwi_qpanel_block_at(w, p0, 0);   /* panel q: + q * 64 */
    for (int64_t j = j0; j < j1; j++)
        for (int q = 0; q < np; q++) {
            float *o = buf + ((int64_t)q * (QKC / 2) + j - j0) * 32;
            __m512 ce, co;
            pair_ce_co(pc + (j >> 1) * ls + (j & 1) * 32 + q * 64, &ce, &co);
            _mm512_storeu_ps(o, co);
            _mm512_storeu_ps(o + 16, ce);
        }
}

/* The end of a PAIR tile's chunk: not the group's last (!last), the
 * partial sums back to part; its last, apply_scales' tot += acc * scale
 * from the registers (sc: the group's scales of the tile's first panel,
 * panel stride sc_stride), and at the last group (dst) the finished total
 * to the output (qwi_tile_dest) instead of tot. */
#define PAIR_TILE_END(acc, mr, np, part, last, tot, sc, sc_stride, dst)                      \
    do {                                                                                  \
        _Pragma("GCC unroll 8") for (int r_ = 0; r_ < (mr); r_++)                           \
            _Pragma("GCC unroll 8") for (int q_ = 0; q_ < (np); q_++) {                     \
                if (!(last)) {                                                            \
                    _mm512_storeu_ps((part) + r_ * 64 + q_ * 16, acc[r_][q_]);            \
                    continue;                                                             \
                }                                                                         \
                float *t_ = (tot) + r_ * 64 + q_ * 16;                                    \
                const __m512 v_ = _mm512_fmadd_ps(acc[r_][q_],                            \
                                                  _mm512_loadu_ps((sc) + q_ * (sc_stride)), \
                                                  _mm512_loadu_ps(t_));                   \
                if (dst) qwi_tile_dest_put_zmm((dst), r_, q_, v_);                        \
                else _mm512_storeu_ps(t_, v_);                                            \
            }                                                                             \
    } while (0)

Q_INLINE void pair_tile_emul(const uint32_t *x, int64_t KP, const float *buf, int64_t jn,
                             float *part, int first, int last, float *tot, const float *sc,
                             int64_t sc_stride, const qwi_tile_dest *dst, const int mr,
                             const int np) {
    __m512 acc[4][4];   /* QWI_ROW_TILES(4, ...): 16 accumulators + 8 weights */
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
            acc[r][q] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(part + r * 64 + q * 16);
    for (int64_t j = 0; j < jn; j++) {
        __m512 co[4], ce[4];
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) {
            co[q] = _mm512_loadu_ps(buf + (q * (QKC / 2) + j) * 32);
            ce[q] = _mm512_loadu_ps(buf + (q * (QKC / 2) + j) * 32 + 16);
        }
        _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++) {
            const uint32_t xp = x[r * KP + j];
            const __m512 xo = pair_hi(xp), xe = pair_lo(xp);
            _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) {
                acc[r][q] = _mm512_fmadd_ps(xo, co[q], acc[r][q]);
                acc[r][q] = _mm512_fmadd_ps(xe, ce[q], acc[r][q]);
            }
        }
    }
    PAIR_TILE_END(acc, mr, np, part, last, tot, sc, sc_stride, dst);
}

/* PAIR (E4M3), vdpbf16ps: pairs [j0, j1) of NP panels (in p0's group)
 * into buf[q][j - j0][16] as bf16 pair lanes (cpu/pairpanel.h's panel),
 * read in line order as above. */
QB_INLINE void pair_decode_chunk_bf16(const qwi_qpanel *w, int64_t p0, int64_t j0, int64_t j1,
                                      uint32_t *buf, const int np) {
    const int64_t ls = qwi_qpanel_line_stride(w, p0);
    const uint8_t *pc = w->codes + qwi_qpanel_block_at(w, p0, 0);   /* panel q: + q * 64 */
    for (int64_t j = j0; j < j1; j++)
        for (int q = 0; q < np; q++)
            _mm512_storeu_si512(buf + ((int64_t)q * (QKC / 2) + j - j0) * 16,
                                pair_bf16(pc + (j >> 1) * ls + (j & 1) * 32 + q * 64));
}

QB_INLINE void pair_tile_bf16(const uint32_t *x, int64_t KP, const uint32_t *buf, int64_t jn,
                              float *part, int first, int last, float *tot, const float *sc,
                              int64_t sc_stride, const qwi_tile_dest *dst, const int mr,
                              const int np) {
    __m512 acc[6][4];
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
            acc[r][q] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(part + r * 64 + q * 16);
    for (int64_t j = 0; j < jn; j++) {
        __m512bh wv[4];
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
            wv[q] = (__m512bh)_mm512_loadu_si512(buf + (q * (QKC / 2) + j) * 16);
        _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++) {
            const __m512bh xb = (__m512bh)_mm512_set1_epi32((int)x[r * KP + j]);
            _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
                acc[r][q] = _mm512_dpbf16_ps(acc[r][q], xb, wv[q]);
        }
    }
    PAIR_TILE_END(acc, mr, np, part, last, tot, sc, sc_stride, dst);
}

/* totals += partial sums of group g times its scales, rows [0, mb). */
Q_INLINE void apply_scales(const qwi_qpanel *w, int64_t p0, int64_t g, int np, int64_t mb,
                           const float *part, float *tot) {
    for (int q = 0; q < np; q++) {
        const __m512 sc = _mm512_loadu_ps(w->scales + ((p0 + q) * w->ngroups + g) * 16);
        for (int64_t r = 0; r < mb; r++) {
            const __m512 a = _mm512_loadu_ps(part + r * 64 + q * 16);
            const __m512 t = _mm512_loadu_ps(tot + r * 64 + q * 16);
            _mm512_storeu_ps(tot + r * 64 + q * 16, _mm512_fmadd_ps(a, sc, t));
        }
    }
}

/* ---- entry points ---------------------------------------------------------- */

/* Direct path over panel groups of up to 4: DIRECT(p, np, mr). */
#define DIRECT_ALL(M, N, DIRECT)                                                          \
    do {                                                                                  \
        const int64_t np_all_ = QWI_DIV_UP(N, 16);                                        \
        for (int64_t pq = 0, np_; pq < np_all_; pq += np_) {                              \
            np_ = qwi_qpanel_run(w, P0 + pq, QWI_MIN((int64_t)4, np_all_ - pq));          \
            if ((M) == 1) {                                                               \
                switch (np_) {                                                            \
                case 4: DIRECT(pq, 4, 1); break;                                          \
                case 3: DIRECT(pq, 3, 1); break;                                          \
                case 2: DIRECT(pq, 2, 1); break;                                          \
                default: DIRECT(pq, 1, 1); break;                                         \
                }                                                                         \
            } else {                                                                      \
                switch (np_) {                                                            \
                case 4: DIRECT(pq, 4, 2); break;                                          \
                case 3: DIRECT(pq, 3, 2); break;                                          \
                case 2: DIRECT(pq, 2, 2); break;                                          \
                default: DIRECT(pq, 1, 2); break;                                         \
                }                                                                         \
            }                                                                             \
            for (int64_t r = 0; r < (M); r++)                                             \
                for (int64_t q = 0; q < np_; q++)                                         \
                    qwi_put16(res + r * 64 + q * 16, 16 * (pq + q), N, bias, out + r * ldo, \
                              accumulate);                                                \
        }                                                                                 \
    } while (0)

Q_INLINE void qf32_fmt(const float *x, int64_t M, int64_t K, const qwi_qpanel *w, int64_t n0,
                       int64_t N, const float *bias, float *out, int64_t ldo, int accumulate,
                       const int fmt) {
    const int64_t P0 = n0 / 16;
    if (M <= 2) {
        float res[2 * 64] __attribute__((aligned(64)));
#define SEQ_D(pq, NP, MR) seq_direct(x, K, w, P0 + (pq), res, MR, NP, fmt)
        DIRECT_ALL(M, N, SEQ_D);
#undef SEQ_D
        return;
    }
    float buf[4 * QKC * 16] __attribute__((aligned(64)));
    float part[QMB * 64] __attribute__((aligned(64))), tot[QMB * 64] __attribute__((aligned(64)));
    const int64_t np_all = QWI_DIV_UP(N, 16), G = w->ngroups, gk = w->group_k;
    for (int64_t pq = 0; pq < np_all; pq += 4) {
        const int np = (int)QWI_MIN((int64_t)4, np_all - pq);
        for (int64_t m0 = 0; m0 < M; m0 += QMB) {
            const int64_t mb = QWI_MIN((int64_t)QMB, M - m0);
            const float *xb = x + m0 * K;
            memset(tot, 0, sizeof(float) * (size_t)mb * 64);
            for (int64_t g = 0; g < G; g++) {
                const int64_t ks = g * gk, ke = QWI_MIN(K, ks + gk);
                for (int64_t k0 = ks; k0 < ke; k0 += QKC) {
                    const int64_t k1 = QWI_MIN(ke, k0 + QKC);
                    seq_decode_chunk(w, P0 + pq, g, k0, k1, buf, np, fmt);
#define SEQ_T(r, MR)                                                                          \
    do {                                                                                      \
        switch (np) {                                                                         \
        case 4: seq_tile(xb + (r) * K + k0, K, buf, k1 - k0, part + (r) * 64, k0 == ks, MR, 4); break; \
        case 3: seq_tile(xb + (r) * K + k0, K, buf, k1 - k0, part + (r) * 64, k0 == ks, MR, 3); break; \
        case 2: seq_tile(xb + (r) * K + k0, K, buf, k1 - k0, part + (r) * 64, k0 == ks, MR, 2); break; \
        default: seq_tile(xb + (r) * K + k0, K, buf, k1 - k0, part + (r) * 64, k0 == ks, MR, 1); break; \
        }                                                                                     \
    } while (0)
                    QWI_ROW_TILES(6, mb, SEQ_T);
#undef SEQ_T
                }
                apply_scales(w, P0 + pq, g, np, mb, part, tot);
            }
            for (int64_t r = 0; r < mb; r++)
                for (int q = 0; q < np; q++)
                    qwi_put16(tot + r * 64 + q * 16, 16 * (pq + q), N, bias, out + (m0 + r) * ldo,
                              accumulate);
        }
    }
}

__attribute__((target(Q_TARGET)))
void qwi_avx512_matmul_qf32(const float *x, int64_t M, int64_t K, const qwi_qpanel *w,
                            int64_t n0, int64_t N, const float *bias, float *out, int64_t ldo,
                            int accumulate) {
    if (M <= 0 || N <= 0) return;
    switch (w->fmt) {
    case QWI_QFMT_U4: qf32_fmt(x, M, K, w, n0, N, bias, out, ldo, accumulate, QWI_QFMT_U4); break;
    case QWI_QFMT_U8: qf32_fmt(x, M, K, w, n0, N, bias, out, ldo, accumulate, QWI_QFMT_U8); break;
    default: qf32_fmt(x, M, K, w, n0, N, bias, out, ldo, accumulate, QWI_QFMT_E4M3); break;
    }
}

/* The chunked PAIR path: DECODE(g, j0, j1) fills buf, TILE(r, MR) sweeps it
 * and, in a group's last chunk, applies the group's scales (sc) to tot
 * and, in the last group, stores the outputs (dest; PAIR_TILE_END). */
#define PAIR_CHUNKED(TMR, DECODE, TILE)                                                   \
    do {                                                                                  \
        const int64_t np_all = QWI_DIV_UP(N, 16), G = w->ngroups, gk = w->group_k;        \
        float scb[64] __attribute__((aligned(64)));   /* scales, where expanded */         \
        for (int64_t pq = 0, np; pq < np_all; pq += np) {                                 \
            np = qwi_qpanel_run(w, P0 + pq, QWI_MIN((int64_t)4, np_all - pq));            \
            for (int64_t m0 = 0; m0 < M; m0 += QMB) {                                     \
                const int64_t mb = QWI_MIN((int64_t)QMB, M - m0);                         \
                const uint32_t *xb = x + m0 * KP;                                         \
                const qwi_tile_dest dest = qwi_tile_dest_group(out + m0 * ldo, ldo, 16 * pq,  \
                                                               16 * np, N, bias, accumulate); \
                memset(tot, 0, sizeof(float) * (size_t)mb * 64);                          \
                for (int64_t g = 0; g < G; g++) {                                         \
                    const int64_t js = g * gk / 2, je = QWI_MIN(KP, (g + 1) * gk / 2);    \
                    int64_t scs;                                                          \
                    const float *sc = qwi_qpanel_group_scales(w, P0 + pq, g, (int)np, scb, &scs); \
                    for (int64_t j0 = js; j0 < je; j0 += QKC / 2) {                       \
                        const int64_t j1 = QWI_MIN(je, j0 + QKC / 2);                     \
                        DECODE(g, j0, j1);                                                \
                        QWI_ROW_TILES(TMR, mb, TILE);                                     \
                    }                                                                     \
                }                                                                         \
                if (!dest.o)                                                              \
                    for (int64_t r = 0; r < mb; r++)                                      \
                        for (int q = 0; q < np; q++)                                      \
                            qwi_put16(tot + r * 64 + q * 16, 16 * (pq + q), N, bias,      \
                                      out + (m0 + r) * ldo, accumulate);                  \
            }                                                                             \
        }                                                                                 \
    } while (0)

/* Inside PAIR_CHUNKED: FN (pair_tile_emul or pair_tile_bf16) over rows
 * r..r+MR-1 of the row block and the chunk's np panels, told where the
 * group ends and, in the last group of whole panels, where the outputs go. */
#define PAIR_TILE_AT(FN, r, MR)                                                           \
    do {                                                                                  \
        const int64_t r_t = (r);                                                          \
        const qwi_tile_dest dt_ = qwi_tile_dest_rows(dest, r_t);                          \
        const qwi_tile_dest *dst_t = dt_.o && g == G - 1 ? &dt_ : NULL;                   \
        float *pr_ = part + r_t * 64, *tr_ = tot + r_t * 64;                              \
        const uint32_t *xr_ = xb + r_t * KP + j0;                                         \
        switch (np) {                                                                     \
        case 4: FN(xr_, KP, buf, j1 - j0, pr_, j0 == js, j1 == je, tr_, sc, scs, dst_t, MR, 4); break; \
        case 3: FN(xr_, KP, buf, j1 - j0, pr_, j0 == js, j1 == je, tr_, sc, scs, dst_t, MR, 3); break; \
        case 2: FN(xr_, KP, buf, j1 - j0, pr_, j0 == js, j1 == je, tr_, sc, scs, dst_t, MR, 2); break; \
        default: FN(xr_, KP, buf, j1 - j0, pr_, j0 == js, j1 == je, tr_, sc, scs, dst_t, MR, 1); break; \
        }                                                                                 \
    } while (0)

Q_INLINE void qpair_emul_e4m3(const uint32_t *x, int64_t M, int64_t KP, const qwi_qpanel *w,
                              int64_t n0, int64_t N, const float *bias, float *out, int64_t ldo,
                              int accumulate) {
    const int64_t P0 = n0 / 16;
    if (M <= 2) {
        float res[2 * 64] __attribute__((aligned(64)));
#define PAIR_D(pq, NP, MR) pair_direct_emul(x, KP, w, P0 + (pq), res, MR, NP)
        DIRECT_ALL(M, N, PAIR_D);
#undef PAIR_D
        return;
    }
    float buf[4 * (QKC / 2) * 32] __attribute__((aligned(64)));
    float part[QMB * 64] __attribute__((aligned(64))), tot[QMB * 64] __attribute__((aligned(64)));
#define DEC(g, j0, j1) pair_decode_chunk_f32(w, P0 + pq, j0, j1, buf, np)
#define TL(r, MR) PAIR_TILE_AT(pair_tile_emul, r, MR)
    PAIR_CHUNKED(4, DEC, TL);
#undef DEC
#undef TL
}

__attribute__((target(Q_TARGET)))
void qwi_avx512_matmul_qpair(const uint32_t *x, int64_t M, int64_t KP, const qwi_qpanel *w,
                             int64_t n0, int64_t N, const float *bias, float *out, int64_t ldo,
                             int accumulate) {
    if (M <= 0 || N <= 0) return;
    qpair_emul_e4m3(x, M, KP, w, n0, N, bias, out, ldo, accumulate);   /* E4M3 only */
}

/* A decoder of E4M3 pair chunks into bf16 pair lanes, as
 * pair_decode_chunk_bf16 (one call per chunk of a row block). */
typedef void (*e4m3_chunk_fn)(const qwi_qpanel *w, int64_t p0, int64_t j0, int64_t j1,
                              uint32_t *buf, int np);

static __attribute__((target(QB_TARGET))) void e4m3_chunk_convert(const qwi_qpanel *w, int64_t p0,
                                                                  int64_t j0, int64_t j1,
                                                                  uint32_t *buf, int np) {
    pair_decode_chunk_bf16(w, p0, j0, j1, buf, np);
}

/* M > 2 decodes chunks with `decode` (M <= 2 ignores it). */
QB_INLINE void qpair_bf16_e4m3(const uint32_t *x, int64_t M, int64_t KP, const qwi_qpanel *w,
                               int64_t n0, int64_t N, const float *bias, float *out, int64_t ldo,
                               int accumulate, e4m3_chunk_fn decode) {
    const int64_t P0 = n0 / 16;
    if (M <= 2) {
        float res[2 * 64] __attribute__((aligned(64)));
#define PAIR_D(pq, NP, MR) pair_direct_bf16(x, KP, w, P0 + (pq), res, MR, NP)
        DIRECT_ALL(M, N, PAIR_D);
#undef PAIR_D
        return;
    }
    uint32_t buf[4 * (QKC / 2) * 16] __attribute__((aligned(64)));
    float part[QMB * 64] __attribute__((aligned(64))), tot[QMB * 64] __attribute__((aligned(64)));
#define DEC(g, j0, j1) decode(w, P0 + pq, j0, j1, buf, (int)np)
#define TL(r, MR) PAIR_TILE_AT(pair_tile_bf16, r, MR)
    PAIR_CHUNKED(6, DEC, TL);
#undef DEC
#undef TL
}

__attribute__((target(QB_TARGET)))
void qwi_avx512bf16_matmul_qpair(const uint32_t *x, int64_t M, int64_t KP, const qwi_qpanel *w,
                                 int64_t n0, int64_t N, const float *bias, float *out, int64_t ldo,
                                 int accumulate) {
    if (M <= 0 || N <= 0) return;
    qpair_bf16_e4m3(x, M, KP, w, n0, N, bias, out, ldo, accumulate,
                    e4m3_chunk_convert);   /* E4M3 only */
}

/* ---- AVX512_VBMI: e4m3 pairs through byte tables (M <= 2) ---------------- */

/* Decoding E4M3 pairs above costs 2 vpunpck, 2 x (shift, mask,
 * vcvtph2ps) and a vcvtne2ps2bf16 per panel and pair, which in decode
 * (M <= 2) leaves fp8 barely faster than bf16 weights. With vpermi2b the
 * bf16 bits of c' = value * 2^-8 (exact: at most 4 significant bits,
 * exponents 2^-17..2^0) come from two 128-entry byte tables indexed by the
 * 7 magnitude bits (vpermi2b ignores index bit 7, the sign), the sign ORed
 * into the high byte, and one more vpermi2b interleaves low and high bytes
 * into the word order pair_bf16's unpack + convert gives: 4 operations for
 * 2 pairs of a panel. Same c' bits (the tables are the f16 decode of
 * e4m3_hi_words, 0x7f/0xff included), same vdpbf16ps chain, same bits. */

#define QV_TARGET QB_TARGET ",avx512bw,avx512vbmi"
#define QV_INLINE static inline __attribute__((always_inline, target(QV_TARGET)))
/* Prefetch distance per panel on Zen 4 (gemv_prefetch.h): with the
 * cheaper decode, 512 bytes ahead streamed best there (1024: about 15%
 * slower, none: 25%). */
#define QVPF 512

/* High and low bytes of bf16(c') for magnitude bits m = 0..127. */
static const uint8_t e4m3_bf16_hi[128] __attribute__((aligned(64))) = {
    0x00, 0x37, 0x37, 0x37, 0x38, 0x38, 0x38, 0x38, 0x38, 0x38, 0x38, 0x38, 0x38, 0x38, 0x38, 0x38,
    0x39, 0x39, 0x39, 0x39, 0x39, 0x39, 0x39, 0x39, 0x39, 0x39, 0x39, 0x39, 0x39, 0x39, 0x39, 0x39,
    0x3a, 0x3a, 0x3a, 0x3a, 0x3a, 0x3a, 0x3a, 0x3a, 0x3a, 0x3a, 0x3a, 0x3a, 0x3a, 0x3a, 0x3a, 0x3a,
    0x3b, 0x3b, 0x3b, 0x3b, 0x3b, 0x3b, 0x3b, 0x3b, 0x3b, 0x3b, 0x3b, 0x3b, 0x3b, 0x3b, 0x3b, 0x3b,
    0x3c, 0x3c, 0x3c, 0x3c, 0x3c, 0x3c, 0x3c, 0x3c, 0x3c, 0x3c, 0x3c, 0x3c, 0x3c, 0x3c, 0x3c, 0x3c,
    0x3d, 0x3d, 0x3d, 0x3d, 0x3d, 0x3d, 0x3d, 0x3d, 0x3d, 0x3d, 0x3d, 0x3d, 0x3d, 0x3d, 0x3d, 0x3d,
    0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e,
    0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f,
};
static const uint8_t e4m3_bf16_lo[128] __attribute__((aligned(64))) = {
    0x00, 0x00, 0x80, 0xc0, 0x00, 0x20, 0x40, 0x60, 0x80, 0x90, 0xa0, 0xb0, 0xc0, 0xd0, 0xe0, 0xf0,
    0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xa0, 0xb0, 0xc0, 0xd0, 0xe0, 0xf0,
    0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xa0, 0xb0, 0xc0, 0xd0, 0xe0, 0xf0,
    0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xa0, 0xb0, 0xc0, 0xd0, 0xe0, 0xf0,
    0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xa0, 0xb0, 0xc0, 0xd0, 0xe0, 0xf0,
    0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xa0, 0xb0, 0xc0, 0xd0, 0xe0, 0xf0,
    0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xa0, 0xb0, 0xc0, 0xd0, 0xe0, 0xf0,
    0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xa0, 0xb0, 0xc0, 0xd0, 0xe0, 0xf0,
};

/* The interleaving permutation: output word W takes code byte b(W) of
 * the block (qpanel.h's PAIR E4M3 order: W < 16: (W/8)*16 + W%8, else
 * 8 more), low byte from the low table (index b), high byte from the high
 * one (index 64 + b). half = 1: the block in bytes 32-63. */
QV_INLINE __m512i e4m3_vbmi_perm(int half) {
    uint8_t p[64] __attribute__((aligned(64)));
    for (int W = 0; W < 32; W++) {
        const int V = W % 16, b = (V / 8) * 16 + (W >= 16 ? 8 : 0) + V % 8 + 32 * half;
        p[2 * W] = (uint8_t)b;
        p[2 * W + 1] = (uint8_t)(64 + b);
    }
    return _mm512_load_si512(p);
}

/* The blocks of v (bytes 0-31, and 32-63 when two) as bf16 pair lanes. */
QV_INLINE void e4m3_vbmi_decode(__m512i v, const __m512i th[2], const __m512i tl[2], __m512i perm0,
                                __m512i perm1, __m512i *w0, __m512i *w1, const int two) {
    __m512i hi = _mm512_permutex2var_epi8(th[0], v, th[1]);
    const __m512i lo = _mm512_permutex2var_epi8(tl[0], v, tl[1]);
    /* hi | (v & 0x80): the sign */
    hi = _mm512_ternarylogic_epi32(hi, v, _mm512_set1_epi8((char)0x80), 0xf8);
    *w0 = _mm512_permutex2var_epi8(lo, perm0, hi);
    if (two) *w1 = _mm512_permutex2var_epi8(lo, perm1, hi);
}

/* pair_direct_bf16 for E4M3: MR rows x NP panels from panel p0, all
 * groups, totals to res[r*64 + q*16]; two pairs (one 64-byte line per
 * panel) per step where the group allows. */
QV_INLINE void e4m3_direct_vbmi(const uint32_t *x, int64_t KP, const qwi_qpanel *w, int64_t p0,
                                float *res, const int mr, const int np) {
    const int64_t G = w->ngroups, gk = w->group_k, ls = qwi_qpanel_line_stride(w, p0);
    const __m512i th[2] = { _mm512_load_si512(e4m3_bf16_hi), _mm512_load_si512(e4m3_bf16_hi + 64) };
    const __m512i tl[2] = { _mm512_load_si512(e4m3_bf16_lo), _mm512_load_si512(e4m3_bf16_lo + 64) };
    const __m512i perm0 = e4m3_vbmi_perm(0), perm1 = e4m3_vbmi_perm(1);
    const uint8_t *pc = w->codes + qwi_qpanel_block_at(w, p0, 0);   /* panel q: + q * 64 */
    const int64_t pf = qwi_cpu_gemv_prefetch(QVPF);
    __m512 tot[2][4], acc[2][4];
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) tot[r][q] = _mm512_setzero_ps();
    for (int64_t g = 0; g < G; g++) {
        const int64_t js = g * gk / 2, je = QWI_MIN(KP, (g + 1) * gk / 2);
        _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
            _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) acc[r][q] = _mm512_setzero_ps();
        int64_t j = js;
        /* one pair: its 32 bytes only (the panel may end right after) */
#define E4M3_ONE(J)                                                                               \
    do {                                                                                          \
        __m512i wv[4], unused_;                                                                   \
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) {                                    \
            const __m256i c_ = _mm256_loadu_si256((const __m256i *)(const void *)(pc + q * 64 + ((J) >> 1) * ls + ((J) & 1) * 32)); \
            e4m3_vbmi_decode(_mm512_zextsi256_si512(c_), th, tl, perm0, perm1, &wv[q], &unused_, 0); \
        }                                                                                         \
        (void)unused_;                                                                            \
        _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++) {                                    \
            const __m512bh xb = (__m512bh)_mm512_set1_epi32((int)x[r * KP + (J)]);                \
            _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)                                  \
                acc[r][q] = _mm512_dpbf16_ps(acc[r][q], xb, (__m512bh)wv[q]);                     \
        }                                                                                         \
    } while (0)
        if ((j & 1) && j < je) {
            E4M3_ONE(j);
            j++;
        }
        for (; j + 2 <= je; j += 2) {
            __m512i w0[4], w1[4];
            _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) {
                const uint8_t *blk = pc + q * 64 + (j >> 1) * ls;   /* j is even: a whole line */
                _mm_prefetch((const char *)(blk + pf), _MM_HINT_T0);
                e4m3_vbmi_decode(_mm512_loadu_si512(blk), th, tl, perm0, perm1, &w0[q], &w1[q], 1);
            }
            _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++) {
                const __m512bh x0 = (__m512bh)_mm512_set1_epi32((int)x[r * KP + j]);
                const __m512bh x1 = (__m512bh)_mm512_set1_epi32((int)x[r * KP + j + 1]);
                _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) {
                    acc[r][q] = _mm512_dpbf16_ps(acc[r][q], x0, (__m512bh)w0[q]);
                    acc[r][q] = _mm512_dpbf16_ps(acc[r][q], x1, (__m512bh)w1[q]);
                }
            }
        }
        if (j < je) E4M3_ONE(j);
#undef E4M3_ONE
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) {
            const __m512 sc = pair_scales16(w, p0 + q, g);
            _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
                tot[r][q] = _mm512_fmadd_ps(acc[r][q], sc, tot[r][q]);
        }
    }
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
            _mm512_storeu_ps(res + r * 64 + q * 16, tot[r][q]);
}

/* pair_decode_chunk_bf16 through the byte tables: a whole line (two
 * pairs of a panel) per step where the chunk allows, in line order. Same
 * lanes, so the M > 2 tiles give the same bits; about a fifth of the
 * conversion's operations (an FP8 prefill spent ~10% of its kernel time
 * decoding). */
static __attribute__((target(QV_TARGET))) void e4m3_chunk_vbmi(const qwi_qpanel *w, int64_t p0,
                                                               int64_t j0, int64_t j1,
                                                               uint32_t *buf, int np) {
    const int64_t ls = qwi_qpanel_line_stride(w, p0);
    const __m512i th[2] = { _mm512_load_si512(e4m3_bf16_hi), _mm512_load_si512(e4m3_bf16_hi + 64) };
    const __m512i tl[2] = { _mm512_load_si512(e4m3_bf16_lo), _mm512_load_si512(e4m3_bf16_lo + 64) };
    const __m512i perm0 = e4m3_vbmi_perm(0), perm1 = e4m3_vbmi_perm(1);
    const uint8_t *pc = w->codes + qwi_qpanel_block_at(w, p0, 0);   /* panel q: + q * 64 */
    for (int64_t j = j0; j < j1;) {
        const int two = !(j & 1) && j + 1 < j1;
        for (int q = 0; q < np; q++) {
            uint32_t *o = buf + ((int64_t)q * (QKC / 2) + j - j0) * 16;
            const uint8_t *blk = pc + q * 64 + (j >> 1) * ls;
            __m512i w0, w1;
            if (two) {
                e4m3_vbmi_decode(_mm512_loadu_si512(blk), th, tl, perm0, perm1, &w0, &w1, 1);
                _mm512_storeu_si512(o, w0);
                _mm512_storeu_si512(o + 16, w1);
            } else {   /* its 32 bytes only (the panel may end right after) */
                const __m256i c = _mm256_loadu_si256((const __m256i *)(const void *)(blk + (j & 1) * 32));
                e4m3_vbmi_decode(_mm512_zextsi256_si512(c), th, tl, perm0, perm1, &w0, &w1, 0);
                _mm512_storeu_si512(o, w0);
            }
        }
        j += two ? 2 : 1;
    }
}

__attribute__((target(QV_TARGET)))
void qwi_avx512vbmi_matmul_qpair(const uint32_t *x, int64_t M, int64_t KP, const qwi_qpanel *w,
                                 int64_t n0, int64_t N, const float *bias, float *out, int64_t ldo,
                                 int accumulate) {
    if (M <= 0 || N <= 0) return;
    if (w->fmt != QWI_QFMT_E4M3) {
        qwi_avx512bf16_matmul_qpair(x, M, KP, w, n0, N, bias, out, ldo, accumulate);
        return;
    }
    if (M > 2) {
        qpair_bf16_e4m3(x, M, KP, w, n0, N, bias, out, ldo, accumulate, e4m3_chunk_vbmi);
        return;
    }
    const int64_t P0 = n0 / 16;
    float res[2 * 64] __attribute__((aligned(64)));
#define PAIR_D(pq, NP, MR) e4m3_direct_vbmi(x, KP, w, P0 + (pq), res, MR, NP)
    DIRECT_ALL(M, N, PAIR_D);
#undef PAIR_D
}

#endif
