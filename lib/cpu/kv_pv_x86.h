/*
 * kv_pv_x86.h - attention's P.V over a quantized KV cache in AVX2+FMA and
 * AVX-512F, written once for every element type: o[i][e] += sum over
 * positions j of p[i][j] * V[j][e], for nq outputs o[i] of hd floats (the
 * pv entry of cpu/kv_bf16.h and cpu/kv_fp8.h, whose contract this keeps:
 * one FMA chain per output element over j in order, from o's value).
 *
 * A template, not a header: kv_bf16_x86.c and kv_fp8_x86.c include it (in
 * their x86-64 GCC/Clang part, once each) after defining
 *   KV_PV_ELEM          the cache element (uint16_t bf16, uint8_t e4m3)
 *   KV_PV_WIDEN8(p)     8 elements at p as a __m256 (exact)
 *   KV_PV_WIDEN16(p)    16 elements at p as a __m512 (exact)
 *   KV_PV_SCALAR(e)     one element as a float (the same value)
 * and UNROLL, AVX2, AVX2_INLINE, AVX512, AVX512_INLINE; it defines the
 * static pv_tail, avx2_pv_blk, avx2_pv_rows, avx2_pv, avx512_pv_blk,
 * avx512_pv_rows and avx512_pv. The widen is the only difference between
 * the caches, so the register blocking (up to 4 x 2 ymm / 8 x 2 zmm
 * accumulators, each V vector widened once for all of them) lives here.
 * Optional, AVX2:
 *   KV_PV_SPLIT16(p, ve, vo)  16 elements at p as two __m256: *ve the
 *                             even ones (0, 2, .., 14), *vo the odd
 *   KV_PV_SPLIT32(p, ve, vo)  32 elements at p into ve[0..1], vo[0..1]
 *                             (16 each, split as above)
 * adds avx2_pv_blk_split, which the AVX2 rows then use for every whole 16
 * or 32 columns: bf16 widens 16 elements by a shift and a mask, e4m3 32
 * by nibble tables (cpu/e4m3_x86.h), both in that split order.
 * Optional for a second, AVX-512-only instance (kv_fp8_vbmi.c):
 *   KV_PV_AVX512_ONLY   define only pv_tail and the AVX-512 functions
 *   KV_PV_WIDEN64(p, o) 64 elements at p into the __m512 o[0..3] (exact);
 *                       avx512_pv_blk then widens 64 at a time wherever
 *                       its block is a multiple of 64 columns, and the
 *                       8-accumulator groups take 64-column blocks
 *   KV_PV_W64_LOAD(src, acc), KV_PV_W64_STORE(dst, acc)
 *                       where KV_PV_WIDEN64's o[0..3] hold the 64 elements
 *                       in another order than 16 consecutive each: load
 *                       64 accumulators from src into acc[0..3] in that
 *                       order, and store them back in memory order
 *                       (kv_fp8_bw.c; without them, plain loads/stores)
 * The chains are the same either way, so the same bits.
 */
/* ---- AVX2: 8 lanes ------------------------------------------------------ */

/* Scalar FMA chains for elements [e0, hd) of every accumulator: the
 * hd % 8 (or % 16) tail of pv, positions in order per element as the
 * vector part. */
static inline __attribute__((target("fma"))) void pv_tail(float *const *o,
                                                          const float *const *p, int32_t nq,
                                                          const KV_PV_ELEM *const *v, int32_t n,
                                                          int64_t e0, int64_t hd) {
    for (int32_t i = 0; i < nq; i++)
        for (int64_t e = e0; e < hd; e++) {
            float acc = o[i][e];
            for (int32_t j = 0; j < n; j++) acc = __builtin_fmaf(p[i][j], KV_PV_SCALAR(v[j][e]), acc);
            o[i][e] = acc;
        }
}

#ifndef KV_PV_AVX512_ONLY
/* V rows a P.V pass prefetches ahead of the one it multiplies. */
#define KV_PV_PREFETCH_ROWS 8

/* The first pf_bytes of V row j + KV_PV_PREFETCH_ROWS, if there is one
 * (pf_bytes > 0: the first column block of a pass; see avx2_pv_blk). */
AVX2_INLINE void pv_prefetch_ahead(const KV_PV_ELEM *const *v, int32_t j, int32_t n,
                                   int64_t pf_bytes) {
    if (pf_bytes > 0 && j + KV_PV_PREFETCH_ROWS < n)
        for (int64_t b = 0; b < pf_bytes; b += 64)
            _mm_prefetch((const char *)v[j + KV_PV_PREFETCH_ROWS] + b, _MM_HINT_T0);
}

/* Accumulators o[0..QB) elements [e0, e0 + 8*HC), held in registers over
 * positions 0..n-1 (QB, HC constants once inlined; QB*HC <= 8). With
 * pf_bytes > 0 (the first column block of the rows) each position's pass
 * also prefetches the first pf_bytes of the V row KV_PV_PREFETCH_ROWS
 * ahead. The attention tile's setup prefetches all its V rows (and K
 * planes) before the scores, but a 128-position tile's K and V are 64 KiB
 * of bf16, twice a Zen 1's L1D, so P.V likely finds its rows in L2 by
 * then; without this its first column block waited on them (decode at 4K
 * context, Zen 1: the step 7-11% slower). The later column blocks find
 * the rows in L1. */
AVX2_INLINE void avx2_pv_blk(float *const *o, const float *const *p, const int QB,
                             const KV_PV_ELEM *const *v, int32_t n, int64_t e0, const int HC,
                             int64_t pf_bytes) {
    __m256 acc[4][4];
    UNROLL
    for (int i = 0; i < QB; i++)
        UNROLL
        for (int c = 0; c < HC; c++) acc[i][c] = _mm256_loadu_ps(o[i] + e0 + 8 * c);
    for (int32_t j = 0; j < n; j++) {
        pv_prefetch_ahead(v, j, n, pf_bytes);
        __m256 vv[4];
        UNROLL
        for (int c = 0; c < HC; c++) vv[c] = KV_PV_WIDEN8(v[j] + e0 + 8 * c);
        UNROLL
        for (int i = 0; i < QB; i++) {
            const __m256 x = _mm256_broadcast_ss(p[i] + j);
            UNROLL
            for (int c = 0; c < HC; c++) acc[i][c] = _mm256_fmadd_ps(x, vv[c], acc[i][c]);
        }
    }
    UNROLL
    for (int i = 0; i < QB; i++)
        UNROLL
        for (int c = 0; c < HC; c++) _mm256_storeu_ps(o[i] + e0 + 8 * c, acc[i][c]);
}

#ifdef KV_PV_SPLIT16
/* avx2_pv_blk over elements [e0, e0 + 16*HS) with each 16 V elements
 * widened split (KV_PV_SPLIT16; 32 at once by KV_PV_SPLIT32 where defined
 * and HS is even): bf16 by one shift and one AND instead of two
 * zero-extensions and two shifts - the dword j of 128-bit lane L holds
 * elements 8L + 2j (low half: << 16 makes its f32) and 8L + 2j + 1 (high
 * half: masking the low one off does) - and e4m3 through the same words.
 * So the accumulators hold the even and the odd elements of each 16 apart
 * and are put back in order at the store (pv_split_load / pv_split_store:
 * inverse permutations). Every element is still one FMA chain over j in
 * order, the same bits. On a Zen 1, whose shifts and zero-extensions take
 * two 128-bit uops on one or two pipes, the widening, not the FMAs, set
 * P.V's pace; for e4m3, widening 8 at a time through vcvtph2ps took about
 * 14 operations per 8 elements, against 2-4 FMAs, on every AVX2 CPU. */
AVX2_INLINE void pv_split_load(const float *o, __m256 *ev, __m256 *od) {
    const __m256 a = _mm256_loadu_ps(o), b = _mm256_loadu_ps(o + 8);
    const __m256 t0 = _mm256_permute2f128_ps(a, b, 0x20), t1 = _mm256_permute2f128_ps(a, b, 0x31);
    *ev = _mm256_shuffle_ps(t0, t1, 0x88);
    *od = _mm256_shuffle_ps(t0, t1, 0xdd);
}

AVX2_INLINE void pv_split_store(float *o, __m256 ev, __m256 od) {
    const __m256 lo = _mm256_unpacklo_ps(ev, od), hi = _mm256_unpackhi_ps(ev, od);
    _mm256_storeu_ps(o, _mm256_permute2f128_ps(lo, hi, 0x20));
    _mm256_storeu_ps(o + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
}

AVX2_INLINE void avx2_pv_blk_split(float *const *o, const float *const *p, const int QB,
                                   const KV_PV_ELEM *const *v, int32_t n, int64_t e0,
                                   const int HS, int64_t pf_bytes) {
    __m256 ev[4][4], od[4][4];
    UNROLL
    for (int i = 0; i < QB; i++)
        UNROLL
        for (int c = 0; c < HS; c++) pv_split_load(o[i] + e0 + 16 * c, &ev[i][c], &od[i][c]);
    for (int32_t j = 0; j < n; j++) {
        pv_prefetch_ahead(v, j, n, pf_bytes);
        __m256 ve[4], vo[4];
#ifdef KV_PV_SPLIT32
        if (HS % 2 == 0) {
            UNROLL
            for (int c = 0; c < HS; c += 2) KV_PV_SPLIT32(v[j] + e0 + 16 * c, ve + c, vo + c);
        } else
#endif
        {
            UNROLL
            for (int c = 0; c < HS; c++) KV_PV_SPLIT16(v[j] + e0 + 16 * c, &ve[c], &vo[c]);
        }
        UNROLL
        for (int i = 0; i < QB; i++) {
            const __m256 x = _mm256_broadcast_ss(p[i] + j);
            UNROLL
            for (int c = 0; c < HS; c++) {
                ev[i][c] = _mm256_fmadd_ps(x, ve[c], ev[i][c]);
                od[i][c] = _mm256_fmadd_ps(x, vo[c], od[i][c]);
            }
        }
    }
    UNROLL
    for (int i = 0; i < QB; i++)
        UNROLL
        for (int c = 0; c < HS; c++) pv_split_store(o[i] + e0 + 16 * c, ev[i][c], od[i][c]);
}
#endif

/* QB accumulators: 8*HC-wide column blocks, then 8-wide ones, then the
 * scalar tail (every element is still one chain over j in order). */
AVX2_INLINE void avx2_pv_rows(float *const *o, const float *const *p, const int QB,
                              const KV_PV_ELEM *const *v, int32_t n, int64_t hd, const int HC) {
    const int64_t row_bytes = hd * (int64_t)sizeof(KV_PV_ELEM);
    int64_t e = 0;
#ifdef KV_PV_SPLIT16
    {
        const int HS = HC / 2 > 0 ? HC / 2 : 1;
        for (; e + 16 * HS <= hd; e += 16 * HS)
            avx2_pv_blk_split(o, p, QB, v, n, e, HS, e ? 0 : row_bytes);
    }
#endif
    for (; e + 8 * HC <= hd; e += 8 * HC) avx2_pv_blk(o, p, QB, v, n, e, HC, e ? 0 : row_bytes);
    for (; e + 8 <= hd; e += 8) avx2_pv_blk(o, p, QB, v, n, e, 1, e ? 0 : row_bytes);
    if (e < hd) pv_tail(o, p, QB, v, n, e, hd);
}

static AVX2 void avx2_pv(float *const *o, const float *const *p, int32_t nq,
                         const KV_PV_ELEM *const *v, int32_t n, int64_t hd) {
    int32_t i = 0;
    for (; i + 4 <= nq; i += 4) avx2_pv_rows(o + i, p + i, 4, v, n, hd, 2);
    for (; i + 2 <= nq; i += 2) avx2_pv_rows(o + i, p + i, 2, v, n, hd, 4);
    for (; i < nq; i++) avx2_pv_rows(o + i, p + i, 1, v, n, hd, 4);
}

#endif /* KV_PV_AVX512_ONLY */

/* ---- AVX-512F: 16 lanes ------------------------------------------------- */

/* Accumulators o[0..QB) elements [e0, e0 + 16*HC), held in registers
 * over positions 0..n-1 (QB, HC constants once inlined; QB*HC <= 16). */
AVX512_INLINE void avx512_pv_blk(float *const *o, const float *const *p, const int QB,
                                 const KV_PV_ELEM *const *v, int32_t n, int64_t e0, const int HC) {
    __m512 acc[8][8];
#ifdef KV_PV_W64_LOAD
    if (HC % 4 == 0) {
        UNROLL
        for (int i = 0; i < QB; i++)
            UNROLL
            for (int c = 0; c < HC; c += 4) KV_PV_W64_LOAD(o[i] + e0 + 16 * c, acc[i] + c);
    } else
#endif
    {
        UNROLL
        for (int i = 0; i < QB; i++)
            UNROLL
            for (int c = 0; c < HC; c++) acc[i][c] = _mm512_loadu_ps(o[i] + e0 + 16 * c);
    }
    for (int32_t j = 0; j < n; j++) {
        __m512 vv[8];
#ifdef KV_PV_WIDEN64
        if (HC % 4 == 0) {
            UNROLL
            for (int c = 0; c < HC; c += 4) KV_PV_WIDEN64(v[j] + e0 + 16 * c, vv + c);
        } else
#endif
        {
            UNROLL
            for (int c = 0; c < HC; c++) vv[c] = KV_PV_WIDEN16(v[j] + e0 + 16 * c);
        }
        UNROLL
        for (int i = 0; i < QB; i++) {
            const __m512 x = _mm512_set1_ps(p[i][j]);
            UNROLL
            for (int c = 0; c < HC; c++) acc[i][c] = _mm512_fmadd_ps(x, vv[c], acc[i][c]);
        }
    }
#ifdef KV_PV_W64_STORE
    if (HC % 4 == 0) {
        UNROLL
        for (int i = 0; i < QB; i++)
            UNROLL
            for (int c = 0; c < HC; c += 4) KV_PV_W64_STORE(o[i] + e0 + 16 * c, acc[i] + c);
        return;
    }
#endif
    UNROLL
    for (int i = 0; i < QB; i++)
        UNROLL
        for (int c = 0; c < HC; c++) _mm512_storeu_ps(o[i] + e0 + 16 * c, acc[i][c]);
}

/* QB accumulators: 16*HC-wide column blocks, then 16-wide ones, then the
 * scalar tail (every element is still one chain over j in order). */
AVX512_INLINE void avx512_pv_rows(float *const *o, const float *const *p, const int QB,
                                  const KV_PV_ELEM *const *v, int32_t n, int64_t hd,
                                  const int HC) {
    int64_t e = 0;
    for (; e + 16 * HC <= hd; e += 16 * HC) avx512_pv_blk(o, p, QB, v, n, e, HC);
#ifdef KV_PV_WIDEN64
    for (; e + 64 <= hd; e += 64) avx512_pv_blk(o, p, QB, v, n, e, 4);
#endif
    for (; e + 16 <= hd; e += 16) avx512_pv_blk(o, p, QB, v, n, e, 1);
    if (e < hd) pv_tail(o, p, QB, v, n, e, hd);
}

static AVX512 void avx512_pv(float *const *o, const float *const *p, int32_t nq,
                             const KV_PV_ELEM *const *v, int32_t n, int64_t hd) {
    int32_t i = 0;
    if (nq >= 8) {
        /* column blocks outer, groups of 8 accumulators inner: the V
         * columns of a block (n x 32 elements, 64 with KV_PV_WIDEN64) stay
         * in L1 for every group */
        const int32_t n8 = nq & ~7;
        int64_t e = 0;
#ifdef KV_PV_WIDEN64
        for (; e + 64 <= hd; e += 64)
            for (int32_t b = 0; b < n8; b += 8) avx512_pv_blk(o + b, p + b, 8, v, n, e, 4);
#endif
        for (; e + 32 <= hd; e += 32)
            for (int32_t b = 0; b < n8; b += 8) avx512_pv_blk(o + b, p + b, 8, v, n, e, 2);
        for (; e + 16 <= hd; e += 16)
            for (int32_t b = 0; b < n8; b += 8) avx512_pv_blk(o + b, p + b, 8, v, n, e, 1);
        if (e < hd) pv_tail(o, p, n8, v, n, e, hd);
        i = n8;
    }
    for (; i + 4 <= nq; i += 4) avx512_pv_rows(o + i, p + i, 4, v, n, hd, 4);
    for (; i + 2 <= nq; i += 2) avx512_pv_rows(o + i, p + i, 2, v, n, hd, 8);
    for (; i < nq; i++) avx512_pv_rows(o + i, p + i, 1, v, n, hd, 8);
}
