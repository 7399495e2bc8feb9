/*
 * kv_bf16dot.h - fast numerics' attention over the bf16 KV cache on bf16
 * dot products: q.K and P.V the way vdpbf16ps computes them.
 *
 * Why: over a bf16 cache with f32 q and P (cpu/kv_bf16.h), every score and
 * every P.V element is an f32 FMA chain, so a prefill chunk's attention
 * runs at the f32 FMA rate - half the bf16 dot-product rate of a CPU with
 * AVX512_BF16, and a seventh of a 512-token prefill step on one. GPU
 * engines (flash-attention) multiply bf16 Q by bf16 K and bf16 P by bf16 V
 * with f32 accumulation and an f32 softmax; this is the same arithmetic,
 * used in QW_NUMERICS_FAST over a bf16 cache by the tables that have the
 * entries (kv_bf16.h: dscores, dpv; the generic table as the portable
 * reference, avx512bf16 with vdpbf16ps). The avx2 and avx512 tables keep
 * f32 q and P: emulating the pairs there costs what the f32 chains cost.
 *
 * The arithmetic (head_dim even; the pairs as cpu/pairpanel.h's):
 *  - q: each q head is rounded once per row to bf16 pairs by
 *    qwi_pair_round_rows (nearest even, subnormals flushed to zero): pair
 *    i = (q[2i] low half, q[2i+1] high half).
 *  - score of position j: acc = 0; for i = 0 .. hd/2-1 in order:
 *    acc += qhi_i * k[2i+1]; acc += qlo_i * k[2i] (k: position j's K
 *    elements), then one multiply by scale. The softmax stays f32
 *    (kv_bf16.h's exp_sum, the running max and sum over the f32 exps).
 *  - P: the exps of a tile are rounded to bf16 pairs of positions
 *    (qwi_pair_round_rows again), pair j = (p[2j] low, p[2j+1] high),
 *    positions counted from the tile start (a multiple of the tile, so
 *    even) and a zero past the row's last position.
 *  - P.V, per output element e, from o[e]: for pairs j = 0 .. n/2-1 in
 *    order: acc += phi_j * v[2j+1][e]; acc += plo_j * v[2j][e]; when n is
 *    odd the last pair adds phi * 0 and then plo * v[n-1][e] (row n is
 *    never read). A row's pairs are always aligned to even positions
 *    (cpu/attention.c splits its P.V passes there), so its bits do not
 *    depend on the other rows of a step.
 * Every step is one lane of vdpbf16ps (Intel SDM: the odd product is added
 * first): a product of two bf16 values (8 significant bits each) is exact
 * in f32 unless it leaves f32's normal range, so vdpbf16ps, an FMA and a
 * multiply then an add round alike. Cached K/V elements with a zero
 * exponent count as zero in every table (vdpbf16ps's DAZ; q and P are
 * flushed when rounded). vdpbf16ps also flushes products and partial sums
 * below 2^-126 (FTZ) where the portable form rounds them: the only way
 * the tables can differ, never for the scores and outputs of a real
 * model's attention, and a process uses one table for its life.
 *
 * Accuracy: against f32 q and P (kv_bf16.h) this adds q's and P's bf16
 * rounding (relative 2^-9 each): tests/test_attention_fast.c bounds the
 * output against float64 attention over the same bf16 K/V.
 */
#ifndef QWI_CPU_KV_BF16DOT_H
#define QWI_CPU_KV_BF16DOT_H

#include "common.h"

/* Scores of nq q heads (each hd/2 pairs at q[i]) against n positions of
 * cached K: out[i][j] for i < nq, j < n as above. k[j] points at position
 * j's dim-0 element, dim d at k[j][d * dstride] (a K plane of the bf16
 * cache: dstride = block size; or a row: 1). hd even. */
typedef void (*qwr_kv_dscores_fn)(const uint32_t *const *q, float *const *out, int32_t nq,
                                  int64_t hd, const uint16_t *const *k, int64_t dstride,
                                  int32_t n, float scale);

/* P.V of nq accumulators o[i] (hd floats, updated in place) over n
 * positions, P as n (rounded up to even)/2 pairs at p[i], V rows v[j]
 * (j < n, hd bf16 each; v[n] is not read when n is odd). */
typedef void (*qwr_kv_dpv_fn)(float *const *o, const uint32_t *const *p, int32_t nq,
                              const uint16_t *const *v, int32_t n, int64_t hd);

/* The portable forms: any k[j] pointers and strides, any hd (even for
 * dscores). Thread-safe, no state. */
void qwr_kv_dscores(const uint32_t *const *q, float *const *out, int32_t nq, int64_t hd,
                    const uint16_t *const *k, int64_t dstride, int32_t n, float scale);
void qwr_kv_dpv(float *const *o, const uint32_t *const *p, int32_t nq, const uint16_t *const *v,
                int32_t n, int64_t hd);

/* The vdpbf16ps forms (kv_bf16dot_avx512.c; call only where
 * qwi_kv_bf16dot_have_avx512bf16()). dscores' precondition is
 * pscores_q's (kv_bf16.h, plane_lanes 16): for every j that is a multiple
 * of 16, positions j .. j+15 are consecutive in one plane (k[j+i] ==
 * k[j] + i) whose rows hold 16 elements from k[j] - past n they are read
 * but never stored. */
void qwi_avx512bf16_kv_dscores(const uint32_t *const *q, float *const *out, int32_t nq,
                               int64_t hd, const uint16_t *const *k, int64_t dstride, int32_t n,
                               float scale);
void qwi_avx512bf16_kv_dpv(float *const *o, const uint32_t *const *p, int32_t nq,
                           const uint16_t *const *v, int32_t n, int64_t hd);

/* Whether this CPU (CPUID) and build run the vdpbf16ps forms: AVX512F,
 * AVX512BW (the word permutes that pair K planes and V rows) and
 * AVX512_BF16. */
bool qwi_kv_bf16dot_have_avx512bf16(void);

#endif
