/*
 * q4i.h - the fast numerics mode's integer-weight matmul: int4 (U4) and
 * int8 (U8) weight codes times int16 activations, summed exactly in int32
 * (matmul_q4i of kernels.h; named for int4, its first format).
 *
 * Why: batch-1 decode streams every weight once, so an int4 model should
 * decode about 3.5x faster than bf16; with bf16 activations each 64 bytes
 * of codes cost 11 vector operations (a shift and a vpermw table lookup to
 * make bf16 of every code, then vdpbf16ps), which kept one core well under
 * the memory's rate. Codes need only a mask (and a shift) to become int16
 * pairs for vpmaddwd / vpdpwssd (AVX512_VNNI), and integer sums are exact,
 * so every table, tile shape, k order and thread split gives the same bits
 * without the fixed-order care the float kernels need. int8 codes took the
 * same road: decoded to f32, converted to bf16 and fed to vdpbf16ps they
 * cost 8 vector operations per pair of a panel, which left GPTQ int8 decode
 * compute-bound (on a Zen 4, 23 GB/s per core with the weights in cache, a
 * step barely faster than bf16's); as int16 pairs they cost 1 or 2.
 *
 * Activations (qwi_q4i_quantize_rows, once per matmul call for all its
 * tasks): each row of x (f32) is quantized per weight group g (the group_k
 * input columns of the weight's scale groups) with its own step
 *   amax = max |x[m][k]| over the group,  Q = the call's qmax (below),
 *   d(m, g) = amax / Q (f32 division),   inv = Q / amax,
 *   q(m, k) = clamp(rint(x[m][k] * inv), -Q, Q)   (round to nearest even),
 *   sum(m, g) = sum of q(m, k) over the group (exact).
 * amax = 0 gives d = 0 and q = 0; a NaN or infinity in the group gives
 * d = NaN and q = 0 (the outputs of that row become NaN, as with bf16).
 * q is stored as int16 pairs in the bf16 pair order of cpu/pairpanel.h:
 * pair j of a row = q[2j] in the low half, q[2j+1] in the high half (an
 * odd K's pad column is 0). Resolution: |x - q d| <= d/2 = amax / (2Q),
 * about 1.5e-5 of the group's largest value at Q = 32767, 2^-8 of it at
 * Q = 127 (bf16 rounding: 2^-9 of each value).
 *
 * Weights: the PAIR layout of cpu/qpanel.h for U4 and U8 (each 16-bit half
 * of a lane holds a panel slot's even or odd columns of a block's P pairs
 * as w-bit fields, so (half >> w*j) & (2^w - 1) is the code of pair j:
 * int16 pairs, ready for vpmaddwd), scales and zero points as packed there.
 *
 * Arithmetic contract (every table, every M, N, tile and thread split), per
 * output (m, n):
 *   total = 0
 *   for each group g in order:
 *     i = sum over the group's k of code(n, k) * q(m, k)
 *         - zero(n, g) * sum(m, g)                  exact in int32 (below;
 *       the same integer as the sum of (code - zero) * q, which is how the
 *       AVX-512 kernels compute it for M > 2 with int16 activations: their
 *       decoded chunks hold code - zero, so the epilogue has no zero term;
 *       with the byte form they hold the codes and keep the zero term)
 *     total = fmaf((float)i, scale(n, g) * d(m, g), total)
 *             ((float)i rounds to nearest even; the product is one f32
 *             multiply, rounded, then the fused multiply-add)
 *   v = bias ? total + bias[n] : total; out = accumulate ? out + v : v.
 * Exactness: |code - zero| <= 2^bits (16 for U4, 256 for U8) and |q| <= Q,
 * so every partial sum is at most 2^bits * Q * group_k in magnitude;
 * Q <= qwi_q4i_qmax(group_k, fmt) keeps that below 2^31. Jobs of one call
 * whose Q differ are quantized each on their own (ops.c).
 *
 * Q = qwi_q4i_qmax: 32767 for groups up to 4096 (U4) or 256 (U8) columns.
 *
 * QW_NUMERICS_FAST_INT8 lowers U4's Q to QWI_Q4I_QMAX_INT8 = 127: int8
 * activations, as llama.cpp's Q4_K x Q8_K dot products have them (there
 * per 256 columns, here per scale group). Why: at Q <= 127 a 4-bit code
 * and an activation are both bytes, and vpmaddubsw multiplies 32 such
 * pairs per ymm instruction where vpmaddwd multiplies 16 int16 pairs; on a
 * Zen 1 (which splits every ymm operation in two) int4 batch-1 decode is
 * bound by those multiplies, under the memory's rate. Half a step is then
 * amax / 254 of the group's largest value (bf16 rounds each value to 2^-9
 * of itself), which takes the logits further from the float64 reference
 * than the fast mode's 2e-2 (docs/quantization.md). U8 codes (0-255) would
 * overflow vpmaddubsw's int16 pair sums, so U8 keeps Q.
 *
 * The byte form (q8, for kernels that use vpmaddubsw or vpdpbusd; filled only when
 * Q <= 127): per row, per block of 4 pairs (8 columns k0 = 8b .. 8b+7, the
 * U4 PAIR block of cpu/qpanel.h), two 32-bit words of int8 values,
 *   word 2b:   q(k0), q(k0+4), q(k0+1), q(k0+5)   (byte 0 first)
 *   word 2b+1: q(k0+2), q(k0+6), q(k0+3), q(k0+7)
 * the order in which a U4 block lane's bytes hold its codes after a mask
 * (low nibbles) and after a shift by 4 and a mask (high nibbles); columns
 * past K are 0. Row stride: QWI_Q4I_Q8_WORDS(KP) words.
 *
 * The split byte form (q8s, for the AVX-512 batch-1 kernels with VNNI at
 * Q > 127, the default fast mode): q = 256 * hi + lo with lo = q & 255 (0..255) and
 * hi = q >> 8 (floor, -128..127 for |q| <= 32767); per row, the low bytes
 * in the byte form's word order (QWI_Q4I_Q8_WORDS(KP) words), then the high
 * bytes the same way. Why: vpdpbusd multiplies unsigned by signed bytes,
 * 4 to a lane, and a U4 block lane's codes are bytes after a mask (and a
 * shift), so sum(code * lo) (lo unsigned, the codes signed) and
 * sum(code * hi) (the codes unsigned, hi signed) are two dots per pair of
 * nibble halves where the int16 pairs need a shift and a mask per pair and
 * twice the dots' count of lanes: 7 vector operations per 64 code bytes
 * and row against 11. 256 * sum(code * hi) + sum(code * lo) is
 * sum(code * q) exactly (the contract's integer, well inside int32 as
 * 2^4 * Q * group_k is), so the bits do not change.
 */
#ifndef QWI_CPU_Q4I_H
#define QWI_CPU_Q4I_H

#include "common.h"
#include "quant.h"

/* The quantized activation rows of one matmul call (borrowed pointers). */
typedef struct qwi_q4act {
    const uint32_t *q;        /* [M][KP] int16 pairs                          */
    const float *d;           /* [M][G] quantization step of (row, group)     */
    const int32_t *sum;       /* [M][G] sum of the row's q over the group     */
    int64_t KP;               /* pairs per row: ceil(K / 2)                   */
    int64_t G;                /* groups per row: ceil(K / group_k)            */
    int64_t group_k;          /* input columns per group (even)               */
    int32_t qmax;             /* Q: the largest |q| (qwi_q4i_qmax)            */
    const uint32_t *q8;       /* [M][QWI_Q4I_Q8_WORDS(KP)] the byte form, or
                                 NULL (then kernels read q only); only with
                                 qmax <= 127                                   */
    const uint32_t *q8s;      /* [M][2 * QWI_Q4I_Q8_WORDS(KP)] the split byte
                                 form, or NULL; only with qmax > 127, M <= 2
                                 and q8 NULL (kernels may read it instead of
                                 q for U4 weights)                              */
} qwi_q4act;

/* U4's Q in QW_NUMERICS_FAST_INT8 (above). */
#define QWI_Q4I_QMAX_INT8 127

/* 32-bit words per row of the byte form: two per block of 4 pairs. */
#define QWI_Q4I_Q8_WORDS(KP) (2 * (((KP) + 3) / 4))

/* Largest |q| for groups of group_k columns times codes of format fmt
 * (U4: bits = 4, U8: bits = 8): min(32767, (2^31 - 1) / (2^bits *
 * group_k)); 0 when group_k is not positive and even, fmt is not an
 * integer format, or the group is so long that fewer than 127 levels
 * would remain. Any smaller Q keeps the sums exact too. */
int32_t qwi_q4i_qmax(int64_t group_k, qwi_qfmt fmt);

/* Quantize rows [m0, m1) of x ([*][K] f32, row-major) as above, with
 * Q = qmax (a nonzero qwi_q4i_qmax(group_k, fmt) of the weights it will
 * meet), into row m of q (q + m * ceil(K/2) pairs), d and sum (+ m * G,
 * G = ceil(K / group_k)). Rows are independent, so callers may split rows
 * between threads. Uses AVX2 where the CPU has it (the same bits as the
 * portable loop). */
void qwi_q4i_quantize_rows(const float *x, int64_t m0, int64_t m1, int64_t K, int64_t group_k,
                           int32_t qmax, uint32_t *q, float *d, int32_t *sum);

/* The byte form (above) of rows [m0, m1) of q (int16 pairs, KP per row, as
 * qwi_q4i_quantize_rows wrote them with qmax <= 127) into q8 (row m at
 * q8 + m * QWI_Q4I_Q8_WORDS(KP)). Rows are independent. */
void qwi_q4i_bytes_rows(const uint32_t *q, int64_t m0, int64_t m1, int64_t KP, uint32_t *q8);

/* The split byte form (above) of rows [m0, m1) of q (any qmax up to 32767)
 * into q8s (row m at q8s + m * 2 * QWI_Q4I_Q8_WORDS(KP): the low bytes'
 * words, then the high bytes'). Rows are independent. */
void qwi_q4i_split_bytes_rows(const uint32_t *q, int64_t m0, int64_t m1, int64_t KP,
                              uint32_t *q8s);

/* The portable loop of qwi_q4i_quantize_rows, whatever the CPU (tests). */
void qwi_q4i_quantize_rows_portable(const float *x, int64_t m0, int64_t m1, int64_t K,
                                    int64_t group_k, int32_t qmax, uint32_t *q, float *d,
                                    int32_t *sum);

#endif
