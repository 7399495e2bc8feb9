/*
 * pairpanel.h - the bf16 "pair panel" layout of a linear layer's weights and
 * the bf16 rounding of activations: what the fast numerics mode
 * (QW_NUMERICS_FAST) multiplies, with vdpbf16ps or its emulation
 * (kernels.h, matmul_pair).
 *
 * Why this layout: vdpbf16ps multiplies, per 32-bit lane, a pair of bf16
 * activations by a pair of bf16 weights and adds both products to an f32
 * accumulator. Broadcasting one activation pair (x[m][k], x[m][k+1]) to all
 * 16 lanes and loading 16 weight pairs of 16 consecutive outputs advances a
 * 1 x 16 tile by two k with one 64-byte load and one instruction, so an
 * MR x 16*NP register tile needs no widening, no shuffles and no horizontal
 * sums, and M = 1 streams the weights once (same layout for GEMV and GEMM).
 *
 * Layout of an [N][K] weight (Hugging Face's [out, in]), KP = ceil(K/2):
 *   ceil(N/16) panels, panel p = rows 16p .. 16p+15, stored [KP][16] 32-bit
 *   lanes: lane (p, j, r) at index (p*KP + j)*16 + r holds the bf16 pair
 *   (w[16p+r][2j] in the low half, w[16p+r][2j+1] in the high half).
 *   Rows past N and the pad column k = K (odd K) are zero.
 * Activations: a row of K values becomes KP 32-bit pairs the same way
 * (low half k = 2j, high half 2j+1, zero pad).
 *
 * Rounding, for weights at packing and activations at each matmul input:
 * f32 -> bf16 by round to nearest even; NaN stays NaN (bit 6 set, quiet);
 * a zero or subnormal f32 becomes a zero of the same sign, because
 * vdpbf16ps treats subnormal inputs as zero - flushing them here makes
 * every kernel table see the same inputs. This is exactly AVX512_BF16's
 * vcvtne2ps2bf16 (Intel's convert_fp32_to_bfloat16), which does it where
 * the CPU has it. bf16 weights keep their bits (subnormals flushed); f16
 * weights are widened to f32 (exact) first.
 */
#ifndef QWI_CPU_PAIRPANEL_H
#define QWI_CPU_PAIRPANEL_H

#include "common.h"
#include "dtype.h"

#define QWI_PAIR_PANEL 16

/* The bf16 bits of f rounded as described above. */
uint16_t qwi_pair_round_bf16(float f);

/* Pairs of a row of k values: ceil(k/2). */
static inline int64_t qwi_pair_kp(int64_t k) { return (k + 1) / 2; }

/* Bytes of the pair-panel form of an [n][k] weight (any dtype; zero
 * padding included); 0 if n or k is not positive or the size overflows. */
size_t qwi_pairpanel_bytes(int64_t n, int64_t k);

/* Write the pair-panel form of the row-major [n][k] weight w of dtype dt
 * (f32, bf16 or f16) to dst, which must hold qwi_pairpanel_bytes(n, k)
 * bytes and not overlap w. Returns false (writing nothing) for another
 * dtype or a size of 0. */
bool qwi_pairpanel_pack(qwi_dtype dt, const void *w, int64_t n, int64_t k, void *dst);

/* Element (row, col) of a packed weight, as f32 (tests and debugging). */
float qwi_pairpanel_get(const void *panels, int64_t k, int64_t row, int64_t col);

/* Round rows [m0, m1) of x ([*][k] f32, row-major) to bf16 pairs: row m
 * goes to out + m*qwi_pair_kp(k) (32-bit pairs, zero pad). Rows are
 * independent, so callers may split the rows between threads. */
void qwi_pair_round_rows(const float *x, int64_t m0, int64_t m1, int64_t k, uint32_t *out);

/* Widen rows [m0, m1) of rounded pairs (kp pairs per row, as
 * qwi_pair_round_rows writes them) to f32: pair j of row m gives
 * out[m*2*kp + 2j] (its low half) and out[m*2*kp + 2j + 1] (its high
 * half), exactly (a bf16 is the top half of an f32). For the kernels that
 * take x widened (kernels.h, matmul_pair_wide). Rows are independent. */
void qwi_pair_widen_rows(const uint32_t *pairs, int64_t m0, int64_t m1, int64_t kp, float *out);

/* One row of qwi_pair_round_rows (k values at x to out) by the named
 * implementation, whatever this CPU would pick: "portable", "avx2" or
 * "avx512bf16" (vcvtne2ps2bf16). All give the same bits. Returns false,
 * writing nothing, for an unknown name or one this CPU cannot run. For
 * tests. */
bool qwi_pair_round_row_by(const char *impl, const float *x, int64_t k, uint32_t *out);

#endif
