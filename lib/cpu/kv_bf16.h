/*
 * kv_bf16.h - attention kernels over a bf16 KV cache (fast numerics mode),
 * and the rounding that writes K/V rows into it.
 *
 * Fast mode keeps K and V in bf16 (round-to-nearest-even when written),
 * half the bytes of the f32 cache; attention then reads them through these
 * kernels with q, the scores, the softmax and the P.V accumulation in f32.
 * A bf16 element widens to f32 exactly (a 16-bit shift), so each kernel is
 * the f32 kernel of the same table with the K/V loads widened.
 *
 * q stays f32 here and every step is an f32 FMA (the generic table: a
 * multiply then an add): at decode, attention is bound by reading K/V,
 * which the bf16 cache already halves. Prefill chunks are bound by the
 * FMAs instead; for them the fast numerics mode rounds q and P to bf16 and
 * uses vdpbf16ps where the table has it (dscores and dpv below,
 * cpu/kv_bf16dot.h).
 *
 * Determinism contract (as kernels.h): within one table pv (and its
 * fixed-size forms axpy4/axpy4x2) is bit-identical to the axpy calls in
 * order (element-wise, so every table gives the same bits up to its
 * multiply-add: FMA on x86, multiply then add in the generic one). Scores
 * use tscores/tscores_q (positions as lanes, one chain over d per score),
 * so a row has the same bits whatever block or lane it is computed in,
 * with no horizontal sums; the softmax's exp_sum fixes its order by the
 * tile's length alone. Tables differ from each other within rounding
 * only. The backend picks the table matching
 * its f32 kernel table once (qwi_cpu_kv_bf16_for), so every op of a
 * process uses one table.
 */
#ifndef QWI_CPU_KV_BF16_H
#define QWI_CPU_KV_BF16_H

#include "common.h"
#include "cpu/kernels.h"
#include "cpu/kv_bf16dot.h"

typedef struct qwi_cpu_kv_bf16_kernels {
    const char *name;
    /* o[i] += s * v[i] (element-wise) */
    void (*axpy)(float *o, float s, const uint16_t *v, int64_t n);
    /* o += s[0]*v[0], ..., o += s[3]*v[3] in that order */
    void (*axpy4)(float *o, const float s[4], const uint16_t *const v[4], int64_t n);
    /* axpy4 of (o0, s0) and of (o1, s1) over the same rows */
    void (*axpy4x2)(float *o0, float *o1, const float s0[4], const float s1[4],
                    const uint16_t *const v[4], int64_t n);
    /* Attention scores with positions as lanes, over a K tile transposed
     * by qwi_cpu_kv_bf16_transpose: for each head h < nq and position
     * j < n, out[h * out_ld + j] = scale * (q[h*hd] * kt[j] + ... +
     * q[h*hd + hd-1] * kt[(hd-1)*ld + j]), one chain over d = 0 .. hd-1 in
     * order per score (FMA steps; generic: multiply then add), then one
     * multiply by scale. No lane reduction, so a score's bits depend only
     * on q, its K row and the table, never on n, nq or the lane it lands
     * in. */
    void (*tscores)(const float *q, int32_t nq, int64_t hd, const float *kt, int64_t ld,
                    int32_t n, float scale, float *out, int64_t out_ld);
    /* qwi_cpu_kv_bf16_transpose (the widen is exact, so every table
     * writes the same bits; the x86 ones copy runs of consecutive K-plane
     * positions with vector widens, or with dstride 1 use 8x8 register
     * transposes). */
    void (*transpose)(const uint16_t *const *k, int32_t n, int64_t hd, int64_t dstride, float *kt,
                      int64_t ld);
    /* tscores for nq q vectors at their own addresses: out[i][j] for
     * i < nq, j < n gets exactly the bits tscores gives q[i] (the same
     * chain over d, then the multiply by scale). Attention passes the q
     * heads of several rows of a block at once, so each K tile vector
     * loaded feeds up to 6 (AVX-512; AVX2 5) of them. */
    void (*tscores_q)(const float *const *q, float *const *out, int32_t nq, int64_t hd,
                      const float *kt, int64_t ld, int32_t n, float scale);
    /* tscores_q straight from the K planes, with no f32 tile: out[i][j]
     * gets exactly the bits that transpose(k, n, hd, dstride) followed by
     * tscores_q give (the same chain over d per score). k[j] and dstride
     * as transpose's. Precondition (the caller's: block_size a multiple of
     * plane_lanes and the tile starting at a multiple of it): for every j
     * that is a multiple of plane_lanes, positions j .. j+plane_lanes-1
     * are consecutive in one plane (k[j+i] == k[j] + i) and that plane
     * row holds plane_lanes elements from k[j] - past n they are read
     * (whatever the slots hold) but never stored. */
    void (*pscores_q)(const float *const *q, float *const *out, int32_t nq, int64_t hd,
                      const uint16_t *const *k, int64_t dstride, int32_t n, float scale);
    /* pscores_q over fp8 (e4m3) K planes: the bits of the fp8 table's
     * transpose followed by tscores_q (cpu/kv_fp8.h; the scales are the
     * caller's, in `scale`). Same precondition. */
    void (*pscores8_q)(const float *const *q, float *const *out, int32_t nq, int64_t hd,
                       const uint8_t *const *k, int64_t dstride, int32_t n, float scale);
    int32_t plane_lanes;
    /* The P.V pass of nq accumulators over n positions: for each i < nq
     * and e < hd, o[i][e] = o[i][e] + p[i][j] * v[j][e] for j = 0 .. n-1
     * in that order (FMA; generic: multiply then add), i.e. bit for bit n
     * axpy calls in order, whatever nq, n or the grouping of the calls.
     * Accumulators stay in registers over the positions, each V vector is
     * widened once for up to 8 (AVX2 4) of them. */
    void (*pv)(float *const *o, const float *const *p, int32_t nq, const uint16_t *const *v,
               int32_t n, int64_t hd);
    /* y[i] = exp(x[i]) for i < n (y may alias x), by the polynomial of
     * the exp contract below. */
    void (*vexp)(const float *x, float *y, int64_t n);
    /* One tile of the online softmax: m' = max(*m, s[0..n)), s[j] =
     * exp(s[j] - m') by this table's vexp, *m = m', returns the sum of the
     * new s[j] in a fixed order that depends only on n (the table's lane
     * tree). n >= 1. */
    float (*exp_sum)(float *s, int32_t n, float *m);
    /* y[i] = x[i] * s, i < n (y may alias x): one rounded multiply each,
     * so every table gives the same bits. The softmax rescale and the
     * final 1/sum of each (row, head). */
    void (*scale)(float *y, const float *x, float s, int64_t n);
    /* Fast numerics' q.K and P.V on bf16 dot products (cpu/kv_bf16dot.h:
     * bf16 q and P, vdpbf16ps's arithmetic; dscores with pscores_q's
     * precondition on plane_lanes), or NULL where the table keeps f32 q
     * and P (avx2, avx512: their emulation would cost what the f32 chains
     * cost). The generic and avx512bf16 tables have them. */
    qwr_kv_dscores_fn dscores;
    qwr_kv_dpv_fn dpv;
} qwi_cpu_kv_bf16_kernels;

/* The exp of every table (vexp, exp_sum): exp(x) = 2^k * P(r) with k =
 * round(x * log2(e)), r = x - k*ln2 (ln2 split in two, Cody-Waite) and P
 * Cephes' degree-6 expf polynomial; no libm, so a table gives the same
 * bits on every system. Max relative error against exp in float64 over
 * x in [-87.3, 88]: QWI_VEXP_MAX_REL_ERR (measured over every float of
 * that range: 8.46e-8 for the FMA tables, 8.16e-8 for the generic one,
 * multiply then add; tests/test_vexp.c checks a sample). x < -87.3 gives
 * +0 (exp < 1.3e-38, the bottom of the normal range), x > 88 gives
 * exp(88), NaN gives NaN. */
#define QWI_VEXP_MAX_REL_ERR 1e-7

/* The exp contract's constants (Cephes expf), shared by every table. */
#define QWI_VEXP_LO (-87.3f)
#define QWI_VEXP_HI 88.0f
#define QWI_VEXP_LOG2E 1.44269504088896341f
#define QWI_VEXP_LN2_HI 0.693359375f        /* 9 bits: k * LN2_HI is exact */
#define QWI_VEXP_LN2_LO (-2.12194440e-4f)
#define QWI_VEXP_P0 1.9875691500e-4f
#define QWI_VEXP_P1 1.3981999507e-3f
#define QWI_VEXP_P2 8.3334519073e-3f
#define QWI_VEXP_P3 4.1665795894e-2f
#define QWI_VEXP_P4 1.6666665459e-1f
#define QWI_VEXP_P5 5.0000001201e-1f

/* The generic table's exp of one float (the contract's steps, multiply
 * then add). Pure; thread-safe. */
float qwi_cpu_vexp_scalar(float x);

/* The portable table; always available. Static storage. */
const qwi_cpu_kv_bf16_kernels *qwi_cpu_kv_bf16_generic(void);

/* The AVX2+FMA and AVX-512F tables, and the AVX-512F table with the
 * vdpbf16ps dscores/dpv (needs AVX512BW and AVX512_BF16 too), or NULL
 * where the CPU or build lacks them. Static storage. */
const qwi_cpu_kv_bf16_kernels *qwi_cpu_kv_bf16_avx2(void);
const qwi_cpu_kv_bf16_kernels *qwi_cpu_kv_bf16_avx512(void);
const qwi_cpu_kv_bf16_kernels *qwi_cpu_kv_bf16_avx512bf16(void);

/* The table that goes with f32 kernel table kt: generic for "generic",
 * avx2 for "avx2", avx512bf16 for "avx512bf16" where the CPU runs it,
 * otherwise (avx512, or avx512bf16 without AVX512BW) the widest of avx512
 * and avx2 this CPU runs. Never NULL. Thread-safe. */
const qwi_cpu_kv_bf16_kernels *qwi_cpu_kv_bf16_for(const qwi_cpu_kernels *kt);

/* kt[d * ld + j] = k[j][d * dstride] widened to f32 (exact), for j < n <=
 * ld and d < hd: one tile's K as the [hd][ld] matrix tscores reads. k[j]
 * points at position j's first element: in a K plane (cpu/attention.h;
 * dstride = block size, positions of a block 1 apart) or a row (dstride
 * 1). Lanes n .. ld-1 are left as they were. */
void qwi_cpu_kv_bf16_transpose(const uint16_t *const *k, int32_t n, int64_t hd, int64_t dstride,
                               float *kt, int64_t ld);

/* dst[i] = src[i] rounded to bf16 (nearest, ties to even; NaN stays NaN). */
void qwi_cpu_kv_bf16_round(const float *src, uint16_t *dst, int64_t n);

#endif
