/*
 * kv_bf16_x86.c - the AVX2+FMA and AVX-512F bf16-KV attention kernels (see
 * kv_bf16.h for their lane contracts). As in kernels_avx2.c, functions
 * carry __attribute__((target)) and a table is only handed out after
 * CPUID says its instructions exist.
 *
 * Every batched form runs, per output, exactly the FMA sequence of the
 * single form (same lanes, same order, same tail, same reduction): it only
 * interleaves independent chains and loads each K/V vector once for all of
 * them (register blocks of up to 6 x 4 zmm accumulators for the scores,
 * 10 ymm on AVX2 (5 q vectors x 2, ..., 2 x 4), 8 x 2 for P.V), which is
 * what hides the FMA latency and cuts the K/V
 * traffic per FMA. The exp is the contract's polynomial in FMA steps.
 */
#include <math.h>
#include <string.h>

#include "cpu/kv_bf16.h"
#include "cpu/cpu_features.h"
#include "cpu/tile_out.h"
#include "cpu/score_chunks.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* Full unrolling of the register-block loops (constant bounds once
 * inlined) so the accumulator arrays live in registers, not on the stack:
 * GCC's own limits stop short of the 16-24 accumulators used here. */
#define UNROLL _Pragma("GCC unroll 8")

/* f16c: the AVX-512 scores over fp8 K planes widen e4m3 through vcvtph2ps
 * (cpu/e4m3_x86.h); every AVX2 CPU has it, and the tables check. */
#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma,f16c")))
#define AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))
#define AVX512_INLINE static inline __attribute__((always_inline, target("avx512f,avx2,fma,f16c")))

#include "cpu/e4m3_x86.h"

/* ---- AVX2: 8 lanes ------------------------------------------------------ */

/* ((a0+a4)+(a1+a5))+((a2+a6)+(a3+a7)), the portable tree. */
AVX2_INLINE float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 h = _mm_hadd_ps(s, s);
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

/* bf16 -> f32: exact 16-bit shift. */
AVX2_INLINE __m256 ld8(const uint16_t *p) {
    __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}

static AVX2 void avx2_axpy(float *o, float s, const uint16_t *v, int64_t n) {
    __m256 sv = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(o + i, _mm256_fmadd_ps(sv, ld8(v + i), _mm256_loadu_ps(o + i)));
    for (; i < n; i++) {
        uint32_t u = (uint32_t)v[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        o[i] = __builtin_fmaf(s, f, o[i]);
    }
}

/* bf16 -> f32, 16 lanes (the P.V template needs both widths here). */
AVX512_INLINE __m512 ld16(const uint16_t *p) {
    __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
}

static inline float bf16_scalar(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* 16 bf16 at p -> f32, split (the P.V template's KV_PV_SPLIT16). */
AVX2_INLINE void bf16_split16(const uint16_t *p, __m256 *ev, __m256 *od) {
    bf16_split_words(_mm256_loadu_si256((const __m256i *)(const void *)p), ev, od);
}

#define KV_PV_ELEM uint16_t
#define KV_PV_WIDEN8(p) ld8(p)
#define KV_PV_WIDEN16(p) ld16(p)
#define KV_PV_SCALAR(e) bf16_scalar(e)
#define KV_PV_SPLIT16(p, ve, vo) bf16_split16((p), (ve), (vo))
#include "cpu/kv_pv_x86.h"

static AVX2 void avx2_axpy4(float *o, const float s[4], const uint16_t *const v[4], int64_t n) {
    avx2_pv(&o, &s, 1, v, 4, n);
}

static AVX2 void avx2_axpy4x2(float *o0, float *o1, const float s0[4], const float s1[4],
                              const uint16_t *const v[4], int64_t n) {
    float *o[2] = { o0, o1 };
    const float *s[2] = { s0, s1 };
    avx2_pv(o, s, 2, v, 4, n);
}

/* The exp contract on 8 lanes (FMA steps). */
AVX2_INLINE __m256 vexp8(__m256 x) {
    const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(QWI_VEXP_LO), _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_set1_ps(QWI_VEXP_HI), x);   /* NaN x passes through */
    const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(QWI_VEXP_LOG2E)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(QWI_VEXP_LN2_HI), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(QWI_VEXP_LN2_LO), r);
    __m256 y = _mm256_set1_ps(QWI_VEXP_P0);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(QWI_VEXP_P1));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(QWI_VEXP_P2));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(QWI_VEXP_P3));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(QWI_VEXP_P4));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(QWI_VEXP_P5));
    y = _mm256_add_ps(_mm256_fmadd_ps(y, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
}

/* Lanes j < r of 8 as an AVX2 mask. */
AVX2_INLINE __m256i mask8(int32_t r) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static AVX2 void avx2_vexp(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, vexp8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        const __m256i m = mask8((int32_t)(n - i));
        _mm256_maskstore_ps(y + i, m, vexp8(_mm256_maskload_ps(x + i, m)));
    }
}

static AVX2 float avx2_exp_sum(float *s, int32_t n, float *m) {
    __m256 vm = _mm256_set1_ps(*m);
    int32_t j = 0;
    for (; j + 8 <= n; j += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(s + j));
    const __m256i tm = mask8(n - j);
    if (j < n)
        vm = _mm256_max_ps(vm, _mm256_blendv_ps(_mm256_set1_ps(-INFINITY),
                                                _mm256_maskload_ps(s + j, tm),
                                                _mm256_castsi256_ps(tm)));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(vm), _mm256_extractf128_ps(vm, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    const float mx = _mm_cvtss_f32(h);
    const __m256 vmx = _mm256_set1_ps(mx);
    __m256 acc = _mm256_setzero_ps();
    for (j = 0; j + 8 <= n; j += 8) {
        const __m256 e = vexp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vmx));
        _mm256_storeu_ps(s + j, e);
        acc = _mm256_add_ps(acc, e);
    }
    if (j < n) {
        const __m256 e = _mm256_and_ps(
            vexp8(_mm256_sub_ps(_mm256_maskload_ps(s + j, tm), vmx)), _mm256_castsi256_ps(tm));
        _mm256_maskstore_ps(s + j, tm, e);
        acc = _mm256_add_ps(acc, e);
    }
    *m = mx;
    return hsum8(acc);
}

/* Lanes j0 .. j0+8*nc-1 of the scores of QB q vectors (QB <= 5, nc <= 4,
 * QB * nc <= 10, constants once inlined), K from the f32 tile kt (masked
 * loads) - one FMA chain over d per score. K planes never come here: they
 * take avx2_scores_blk_split. Each K vector loaded feeds QB FMAs (blocks
 * of 5 q vectors: when fp8 planes still came here, widened by e8, two
 * heads per K vector left the widening, not the FMAs, setting the pace:
 * 9.2-9.7% of an AVX2 prefill in perf, 3.8-3.9% with blocks of 5). Up to
 * 10 accumulators, nc K vectors and a broadcast fit the 16 registers. */
AVX2_INLINE void avx2_scores_blk(const float *const *q, float *const *o, int64_t hd,
                                 const float *kt, int64_t ld, int32_t j0, int32_t n, float scale,
                                 const int qb, const int nc) {
    __m256i m[4];
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    UNROLL for (int c = 0; c < nc; c++)
        m[c] = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - j0 - 8 * c), idx);
    __m256 a[5][4];
    UNROLL for (int i = 0; i < qb; i++)
        UNROLL for (int c = 0; c < nc; c++) a[i][c] = _mm256_setzero_ps();
    const float *kp = kt + j0;
    for (int64_t d = 0; d < hd; d++, kp += ld) {
        __m256 kv[4];
        UNROLL for (int c = 0; c < nc; c++) kv[c] = _mm256_maskload_ps(kp + 8 * c, m[c]);
        UNROLL for (int i = 0; i < qb; i++) {
            const __m256 x = _mm256_broadcast_ss(q[i] + d);
            UNROLL for (int c = 0; c < nc; c++) a[i][c] = _mm256_fmadd_ps(x, kv[c], a[i][c]);
        }
    }
    const __m256 sv = _mm256_set1_ps(scale);
    UNROLL for (int i = 0; i < qb; i++)
        UNROLL for (int c = 0; c < nc; c++)
            _mm256_maskstore_ps(o[i] + j0 + 8 * c, m[c], _mm256_mul_ps(a[i][c], sv));
}

/* The 16 positions of one dim whose first 8 are at a and next 8 at b
 * (b == a + 8 when contig) widened split: bf16 planes (fp8 0) or fp8
 * planes (fp8 1). */
AVX2_INLINE void plane_split16(const void *a, const void *b, const int fp8, const int contig,
                               __m256 *ke, __m256 *ko) {
    if (fp8)
        e4m3_split16(contig ? _mm_loadu_si128((const __m128i *)a)
                            : _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)a),
                                                 _mm_loadl_epi64((const __m128i *)b)),
                     ke, ko);
    else
        bf16_split_words(contig ? _mm256_loadu_si256((const __m256i *)a)
                                : _mm256_loadu2_m128i((const __m128i *)b, (const __m128i *)a),
                         ke, ko);
}

/* avx2_scores_blk over bf16 (planes 1) or fp8 (planes 2) K planes for
 * positions j0 .. j0 + 16*ns - 1 (half: the last 16 has only its first 8
 * in the run, so only they are read), each 16 positions' elements of a dim
 * widened split (as avx2_pv_blk_split does for V): bf16 by one shift and
 * one AND, e4m3 by nibble tables (cpu/e4m3_x86.h; all 32 at once where
 * contig is 2: the 32 positions lie side by side in one plane). The
 * accumulators hold the even and the odd positions of each 16 apart, put
 * back in order at the store. Same FMA chains, same bits; on a Zen 1 the
 * zero-extensions and shifts of widening 8 at a time (ld8), not the FMAs,
 * set the bf16 scores' pace, and e8's 14 operations per 8 positions set
 * the fp8 ones' on every AVX2 CPU. qb * ns * 2 <= 10 accumulators. */
AVX2_INLINE void avx2_scores_blk_split(const float *const *q, float *const *o, int64_t hd,
                                       const void *const *kpl, int64_t dstride, int32_t j0,
                                       int32_t n, float scale, const int qb, const int ns,
                                       const int half, const int contig, const int planes) {
    __m256 ev[5][2], od[5][2];
    UNROLL for (int i = 0; i < qb; i++)
        UNROLL for (int c = 0; c < ns; c++) ev[i][c] = od[i][c] = _mm256_setzero_ps();
    const int fp8 = planes == 2;
    const int64_t esize = fp8 ? 1 : 2, step = dstride * esize;
    const char *k0[2], *k1[2];
    UNROLL for (int c = 0; c < ns; c++) {
        k0[c] = (const char *)kpl[j0 + 16 * c];
        k1[c] = (half && c == ns - 1) ? k0[c] : (const char *)kpl[j0 + 16 * c + 8];
    }
    for (int64_t d = 0; d < hd; d++) {
        __m256 ke[2], ko[2];
        if (fp8 && contig == 2)
            e4m3_split32((const uint8_t *)k0[0] + d * step, ke, ko);
        else
            UNROLL for (int c = 0; c < ns; c++)
                plane_split16(k0[c] + d * step, k1[c] + d * step, fp8, contig, &ke[c], &ko[c]);
        UNROLL for (int i = 0; i < qb; i++) {
            const __m256 x = _mm256_broadcast_ss(q[i] + d);
            UNROLL for (int c = 0; c < ns; c++) {
                ev[i][c] = _mm256_fmadd_ps(x, ke[c], ev[i][c]);
                od[i][c] = _mm256_fmadd_ps(x, ko[c], od[i][c]);
            }
        }
    }
    const __m256 sv = _mm256_set1_ps(scale);
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    UNROLL for (int c = 0; c < ns; c++) {
        const __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - j0 - 16 * c), idx);
        const __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - j0 - 16 * c - 8), idx);
        UNROLL for (int i = 0; i < qb; i++) {
            const __m256 lo = _mm256_unpacklo_ps(ev[i][c], od[i][c]);
            const __m256 hv = _mm256_unpackhi_ps(ev[i][c], od[i][c]);
            _mm256_maskstore_ps(o[i] + j0 + 16 * c, m0,
                                _mm256_mul_ps(_mm256_permute2f128_ps(lo, hv, 0x20), sv));
            if (!(half && c == ns - 1))
                _mm256_maskstore_ps(o[i] + j0 + 16 * c + 8, m1,
                                    _mm256_mul_ps(_mm256_permute2f128_ps(lo, hv, 0x31), sv));
        }
    }
}

/* QB q vectors over all n positions, in chunks of NC vectors of 8 (the
 * most that QB * NC <= 10 allows, at least 8 accumulators for the FMA
 * latency); the last chunk runs only the vectors it needs. K planes
 * (planes 1 bf16, 2 fp8) go through avx2_scores_blk_split in chunks of 32
 * or 16 positions, each 16 read as one vector where its two 8s lie side by
 * side in a plane (contig), fp8's 32 as one where all four 8s do (contig
 * 2), and as 8-position halves where they do not (a block size of 8) or
 * where only the first 8 exist (half). */
AVX2_INLINE void avx2_scores_rows(const float *const *q, float *const *o, int64_t hd,
                                  const float *kt, int64_t ld, const void *const *kpl,
                                  int64_t dstride, int32_t n, float scale, const int qb,
                                  const int planes) {
    if (planes) {
        /* 32 positions a chunk for up to 2 q vectors, else 16 */
        const int nsmax = qb <= 2 ? 2 : 1;
        const int64_t es = planes == 2 ? 1 : 2;   /* element bytes */
        const char *const *kp = (const char *const *)kpl;
#define NEXT8(a, b) (kp[(a)] == kp[(b)] + 8 * es)
        for (int32_t j0 = 0; j0 < n; j0 += 16 * nsmax) {
            const int32_t left = n - j0;
            /* each 16 positions' halves side by side in one plane */
            const bool contig =
                left >= 16 * nsmax && NEXT8(j0 + 8, j0) && (nsmax == 1 || NEXT8(j0 + 24, j0 + 16));
            if (contig && nsmax == 2 && planes == 2 && NEXT8(j0 + 16, j0 + 8))
                avx2_scores_blk_split(q, o, hd, kpl, dstride, j0, n, scale, qb, 2, 0, 2, planes);
            else if (contig && nsmax == 2)
                avx2_scores_blk_split(q, o, hd, kpl, dstride, j0, n, scale, qb, 2, 0, 1, planes);
            else if (contig)
                avx2_scores_blk_split(q, o, hd, kpl, dstride, j0, n, scale, qb, 1, 0, 1, planes);
            else if (nsmax == 2 && left > 24)
                avx2_scores_blk_split(q, o, hd, kpl, dstride, j0, n, scale, qb, 2, 0, 0, planes);
            else if (nsmax == 2 && left > 16)
                avx2_scores_blk_split(q, o, hd, kpl, dstride, j0, n, scale, qb, 2, 1, 0, planes);
            else if (left > 8)
                avx2_scores_blk_split(q, o, hd, kpl, dstride, j0, n, scale, qb, 1, 0, 0, planes);
            else
                avx2_scores_blk_split(q, o, hd, kpl, dstride, j0, n, scale, qb, 1, 1, 0, planes);
        }
#undef NEXT8
        return;
    }
    const int ncmax = qb <= 2 ? 4 : qb == 3 ? 3 : 2;
    for (int32_t j0 = 0; j0 < n; j0 += 8 * ncmax) {
        switch (QWI_MIN(ncmax, (n - j0 + 7) / 8)) {
        case 1: avx2_scores_blk(q, o, hd, kt, ld, j0, n, scale, qb, 1); break;
        case 2: avx2_scores_blk(q, o, hd, kt, ld, j0, n, scale, qb, 2); break;
        case 3: if (ncmax >= 3) avx2_scores_blk(q, o, hd, kt, ld, j0, n, scale, qb, 3); break;
        default: if (ncmax >= 4) avx2_scores_blk(q, o, hd, kt, ld, j0, n, scale, qb, 4); break;
        }
    }
}

#define KV_TRANSPOSE_PORTABLE qwi_cpu_kv_bf16_transpose
#include "cpu/kv_transpose_x86.h"

/* avx2_tscores_q (planes 0: kt) or its K-plane twin (planes 1: kpl; 2:
 * fp8 planes): the q vectors in blocks of 5, the rest in one smaller. */
AVX2_INLINE void avx2_scores_q(const float *const *q, float *const *out, int32_t nq, int64_t hd,
                               const float *kt, int64_t ld, const void *const *kpl,
                               int64_t dstride, int32_t n, float scale, const int planes) {
#define SCORES_ROWS(h, QB) \
    avx2_scores_rows(q + (h), out + (h), hd, kt, ld, kpl, dstride, n, scale, QB, planes)
    QWI_ROW_TILES(5, nq, SCORES_ROWS);
#undef SCORES_ROWS
}

static AVX2 void avx2_tscores_q(const float *const *q, float *const *out, int32_t nq,
                                int64_t hd, const float *kt, int64_t ld, int32_t n,
                                float scale) {
    avx2_scores_q(q, out, nq, hd, kt, ld, NULL, 0, n, scale, 0);
}

static AVX2 void avx2_pscores_q(const float *const *q, float *const *out, int32_t nq,
                                int64_t hd, const uint16_t *const *kpl, int64_t dstride,
                                int32_t n, float scale) {
    avx2_scores_q(q, out, nq, hd, NULL, 0, (const void *const *)kpl, dstride, n, scale, 1);
}

static AVX2 void avx2_pscores8_q(const float *const *q, float *const *out, int32_t nq,
                                 int64_t hd, const uint8_t *const *kpl, int64_t dstride,
                                 int32_t n, float scale) {
    avx2_scores_q(q, out, nq, hd, NULL, 0, (const void *const *)kpl, dstride, n, scale, 2);
}

static AVX2 void avx2_tscores(const float *q, int32_t nq, int64_t hd, const float *kt,
                              int64_t ld, int32_t n, float scale, float *out, int64_t out_ld) {
    for (int32_t h = 0; h < nq; h += 2) {
        const int32_t k = QWI_MIN(2, nq - h);
        const float *qq[2] = { q + (int64_t)h * hd, q + (int64_t)(h + k - 1) * hd };
        float *oo[2] = { out + (int64_t)h * out_ld, out + (int64_t)(h + k - 1) * out_ld };
        avx2_tscores_q(qq, oo, k, hd, kt, ld, n, scale);
    }
}

static AVX2 void avx2_scale(float *y, const float *x, float s, int64_t n) {
    const __m256 sv = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), sv));
    for (; i < n; i++) y[i] = x[i] * s;
}

static const qwi_cpu_kv_bf16_kernels avx2_table = {
    .name = "avx2",
    .axpy = avx2_axpy,
    .axpy4 = avx2_axpy4,
    .axpy4x2 = avx2_axpy4x2,
    .tscores = avx2_tscores,
    .transpose = avx2_transpose,
    .tscores_q = avx2_tscores_q,
    .pscores_q = avx2_pscores_q,
    .pscores8_q = avx2_pscores8_q,
    .plane_lanes = 8,
    .pv = avx2_pv,
    .vexp = avx2_vexp,
    .exp_sum = avx2_exp_sum,
    .scale = avx2_scale,
};

const qwi_cpu_kv_bf16_kernels *qwi_cpu_kv_bf16_avx2(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
        !qwi_cpu_has_f16c())
        return NULL;
    return &avx2_table;
}

/* ---- AVX-512F: 16 lanes ------------------------------------------------- */

/* Lanes j and j+8 added, then the 8-lane tree. */
AVX512_INLINE float hsum16(__m512 v) {
    __m256 lo = _mm512_castps512_ps256(v);
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    return hsum8(_mm256_add_ps(lo, hi));
}

static AVX512 void avx512_axpy(float *o, float s, const uint16_t *v, int64_t n) {
    __m512 sv = _mm512_set1_ps(s);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(o + i, _mm512_fmadd_ps(sv, ld16(v + i), _mm512_loadu_ps(o + i)));
    for (; i < n; i++) {
        uint32_t u = (uint32_t)v[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        o[i] = __builtin_fmaf(s, f, o[i]);
    }
}

static AVX512 void avx512_axpy4(float *o, const float s[4], const uint16_t *const v[4],
                                int64_t n) {
    avx512_pv(&o, &s, 1, v, 4, n);
}

static AVX512 void avx512_axpy4x2(float *o0, float *o1, const float s0[4], const float s1[4],
                                  const uint16_t *const v[4], int64_t n) {
    float *o[2] = { o0, o1 };
    const float *s[2] = { s0, s1 };
    avx512_pv(o, s, 2, v, 4, n);
}

/* Lanes [j0, j0 + 16 * nc) of QB q vectors: nc (<= 4) zmm of positions
 * each, one FMA chain over d per lane, every K vector loaded once for the
 * QB of them (QB <= 6: 24 accumulators); lanes at or past n are masked
 * off. QB and nc are constants once inlined. */
/* Lanes j0 .. j0+16*nc-1 of QB q vectors' scores: K from the f32 tile kt
 * (masked loads), or (planes) from the K planes, kpl[j] + d * dstride: 16
 * consecutive bf16 per chunk, read whole and widened, only the stores
 * masked - the same FMA chain either way. */
AVX512_INLINE void avx512_scores_chunk(const float *const *q, float *const *o, const int QB,
                                       int64_t hd, const float *kt, int64_t ld,
                                       const void *const *kpl, int64_t dstride, int32_t j0,
                                       int32_t n, float scale, const int nc, const int planes) {
    __mmask16 m[4];
    UNROLL
    for (int c = 0; c < 4; c++) {
        int32_t r = n - j0 - 16 * c;
        m[c] = r >= 16 ? (__mmask16)0xFFFF : r <= 0 ? (__mmask16)0 : (__mmask16)((1u << r) - 1u);
    }
    __m512 acc[6][4];
    UNROLL
    for (int i = 0; i < QB; i++)
        UNROLL
        for (int c = 0; c < nc; c++) acc[i][c] = _mm512_setzero_ps();
    const float *kp = planes ? NULL : kt + j0;   /* planes: unused */
    const int64_t kstep = planes ? 0 : ld;
    for (int64_t d = 0; d < hd; d++, kp += kstep) {
        __m512 kv[4];
        UNROLL
        for (int c = 0; c < nc; c++) {
            if (planes == 2) {
                kv[c] = e16((const uint8_t *)kpl[j0 + 16 * c] + d * dstride);
            } else if (planes) {
                const __m256i h =
                    _mm256_loadu_si256((const __m256i *)((const uint16_t *)kpl[j0 + 16 * c] + d * dstride));
                kv[c] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
            } else {
                kv[c] = _mm512_maskz_loadu_ps(m[c], kp + 16 * c);
            }
        }
        UNROLL
        for (int i = 0; i < QB; i++) {
            const __m512 x = _mm512_set1_ps(q[i][d]);
            UNROLL
            for (int c = 0; c < nc; c++) acc[i][c] = _mm512_fmadd_ps(x, kv[c], acc[i][c]);
        }
    }
    const __m512 sv = _mm512_set1_ps(scale);
    UNROLL
    for (int i = 0; i < QB; i++)
        UNROLL
        for (int c = 0; c < nc; c++)
            _mm512_mask_storeu_ps(o[i] + j0 + 16 * c, m[c], _mm512_mul_ps(acc[i][c], sv));
}

#define TSQ_CHUNK(QB, NC) \
    avx512_scores_chunk(q + h, out + h, QB, hd, kt, ld, kpl, dstride, j0, n, scale, NC, planes)

/* avx512_tscores_q (planes 0: kt) or its K-plane twin (planes 1: kpl). */
AVX512_INLINE void avx512_scores_q(const float *const *q, float *const *out, int32_t nq,
                                   int64_t hd, const float *kt, int64_t ld,
                                   const void *const *kpl, int64_t dstride, int32_t n,
                                   float scale, const int planes) {
    /* lane chunks outer, groups of 6 q vectors inner: a chunk's columns
     * of the K tile (hd x 256 bytes) are reused from L1 by every group */
    QWI_SCORE_CHUNKS(6, nq, n, TSQ_CHUNK);
}

#undef TSQ_CHUNK

static AVX512 void avx512_tscores_q(const float *const *q, float *const *out, int32_t nq,
                                    int64_t hd, const float *kt, int64_t ld, int32_t n,
                                    float scale) {
    avx512_scores_q(q, out, nq, hd, kt, ld, NULL, 0, n, scale, 0);
}

static AVX512 void avx512_pscores_q(const float *const *q, float *const *out, int32_t nq,
                                    int64_t hd, const uint16_t *const *kpl, int64_t dstride,
                                    int32_t n, float scale) {
    avx512_scores_q(q, out, nq, hd, NULL, 0, (const void *const *)kpl, dstride, n, scale, 1);
}

static AVX512 void avx512_pscores8_q(const float *const *q, float *const *out, int32_t nq,
                                     int64_t hd, const uint8_t *const *kpl, int64_t dstride,
                                     int32_t n, float scale) {
    avx512_scores_q(q, out, nq, hd, NULL, 0, (const void *const *)kpl, dstride, n, scale, 2);
}

static AVX512 void avx512_tscores(const float *q, int32_t nq, int64_t hd, const float *kt,
                                  int64_t ld, int32_t n, float scale, float *out,
                                  int64_t out_ld) {
    for (int32_t h = 0; h < nq; h += 6) {
        const float *qq[6];
        float *oo[6];
        for (int i = 0; i < QWI_MIN(6, nq - h); i++) {
            qq[i] = q + (int64_t)(h + i) * hd;
            oo[i] = out + (int64_t)(h + i) * out_ld;
        }
        avx512_tscores_q(qq, oo, QWI_MIN(6, nq - h), hd, kt, ld, n, scale);
    }
}

/* The exp contract on 16 lanes (FMA steps). */
AVX512_INLINE __m512 vexp16(__m512 x) {
    const __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(QWI_VEXP_LO), _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_set1_ps(QWI_VEXP_HI), x);   /* NaN x passes through */
    const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(QWI_VEXP_LOG2E)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(QWI_VEXP_LN2_HI), x);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(QWI_VEXP_LN2_LO), r);
    __m512 y = _mm512_set1_ps(QWI_VEXP_P0);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(QWI_VEXP_P1));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(QWI_VEXP_P2));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(QWI_VEXP_P3));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(QWI_VEXP_P4));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(QWI_VEXP_P5));
    y = _mm512_add_ps(_mm512_fmadd_ps(y, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    const __m512i e = _mm512_slli_epi32(
        _mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps((__mmask16)~under, y, _mm512_castsi512_ps(e));
}

AVX512_INLINE __mmask16 mask16(int32_t r) {
    return r >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << r) - 1u);
}

static AVX512 void avx512_vexp(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, vexp16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        const __mmask16 m = mask16((int32_t)(n - i));
        _mm512_mask_storeu_ps(y + i, m, vexp16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

static AVX512 float avx512_exp_sum(float *s, int32_t n, float *m) {
    __m512 vm = _mm512_set1_ps(*m);
    int32_t j = 0;
    for (; j + 16 <= n; j += 16) vm = _mm512_max_ps(vm, _mm512_loadu_ps(s + j));
    const __mmask16 tm = mask16(n - j);
    if (j < n) vm = _mm512_mask_max_ps(vm, tm, vm, _mm512_maskz_loadu_ps(tm, s + j));
    const float mx = _mm512_reduce_max_ps(vm);
    const __m512 vmx = _mm512_set1_ps(mx);
    __m512 acc = _mm512_setzero_ps();
    for (j = 0; j + 16 <= n; j += 16) {
        const __m512 e = vexp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), vmx));
        _mm512_storeu_ps(s + j, e);
        acc = _mm512_add_ps(acc, e);
    }
    if (j < n) {
        const __m512 e = vexp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tm, s + j), vmx));
        _mm512_mask_storeu_ps(s + j, tm, e);
        acc = _mm512_mask_add_ps(acc, tm, acc, e);
    }
    *m = mx;
    return hsum16(acc);
}

static AVX512 void avx512_scale(float *y, const float *x, float s, int64_t n) {
    const __m512 sv = _mm512_set1_ps(s);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), sv));
    if (i < n) {
        const __mmask16 m = mask16((int32_t)(n - i));
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), sv));
    }
}

/* The entries avx512 and avx512bf16 share. */
#define AVX512_ENTRIES                     \
    .axpy = avx512_axpy,                   \
    .axpy4 = avx512_axpy4,                 \
    .axpy4x2 = avx512_axpy4x2,             \
    .tscores = avx512_tscores,             \
    .transpose = avx2_transpose,           \
    .tscores_q = avx512_tscores_q,         \
    .pscores_q = avx512_pscores_q,         \
    .pscores8_q = avx512_pscores8_q,       \
    .plane_lanes = 16,                     \
    .pv = avx512_pv,                       \
    .vexp = avx512_vexp,                   \
    .exp_sum = avx512_exp_sum,             \
    .scale = avx512_scale

static const qwi_cpu_kv_bf16_kernels avx512_table = { .name = "avx512", AVX512_ENTRIES };

/* The avx512 table plus the vdpbf16ps q.K and P.V. */
static const qwi_cpu_kv_bf16_kernels avx512bf16_table = {
    .name = "avx512bf16",
    AVX512_ENTRIES,
    .dscores = qwi_avx512bf16_kv_dscores,
    .dpv = qwi_avx512bf16_kv_dpv,
};

const qwi_cpu_kv_bf16_kernels *qwi_cpu_kv_bf16_avx512(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx2") ||
        !__builtin_cpu_supports("fma") || !qwi_cpu_has_f16c())
        return NULL;
    return &avx512_table;
}

const qwi_cpu_kv_bf16_kernels *qwi_cpu_kv_bf16_avx512bf16(void) {
    if (!qwi_cpu_kv_bf16_avx512() || !qwi_kv_bf16dot_have_avx512bf16()) return NULL;
    return &avx512bf16_table;
}

#else

const qwi_cpu_kv_bf16_kernels *qwi_cpu_kv_bf16_avx2(void) { return NULL; }
const qwi_cpu_kv_bf16_kernels *qwi_cpu_kv_bf16_avx512(void) { return NULL; }
const qwi_cpu_kv_bf16_kernels *qwi_cpu_kv_bf16_avx512bf16(void) { return NULL; }

#endif
