/*
 * quant.h - the CUDA backend's quantized linears (issue 16): the device
 * layout a qwi_qweight (lib/quant.h) is uploaded into, and the kernels
 * that read it.
 *
 * Layout (qwk_qlinear), row-major over the n output rows, so the rows of
 * several linears with the same k, format and group size concatenate into
 * one fused linear (q|k|v, gate|up) exactly as the bf16 weights do:
 *   codes   U4: [n][k/2] bytes, column 2j in the low nibble, 2j+1 in the
 *               high one (k is even: group_k is even and divides k);
 *           U8: [n][k] bytes (unsigned codes); E4M3: [n][k] fp8 bit patterns
 *   scales  f32 [n][ngroups]: FP8 block scales are repeated on every row
 *           of their block, so every format has one scale per (row, group)
 *   zeros   f32 [n][ngroups] zero points in code units (stored zero +
 *           zero_offset); NULL for E4M3
 * Group g covers columns [g*group_k, min(k, (g+1)*group_k)); the FP8 last
 * block may be partial. w(r, c) = (code - zero) * scale for U4/U8 and
 * e4m3(code) * scale for E4M3, the value qwi_qweight_unpack_rows defines.
 *
 * Decode (M <= QWK_QGEMV_MAX_M rows) reads the codes once through the fused
 * GEMV; up to QWK_QGEMM_MAX_M rows the quantized GEMM (qgemm.h) does, on
 * the tensor cores; larger M dequantizes into a bf16 scratch weight that
 * the cuBLASLt bf16 GEMM (gemm.h) then reads, so prefill keeps cuBLASLt's
 * speed. FP8
 * linears in 128 x 128 blocks run W8A8 at every M instead where the
 * block-scaled GEMM exists (fp8_block.h): qwk_qgemv_w8a8 for decode.
 */
#ifndef QWK_QUANT_H
#define QWK_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QWK_QGEMV_MAX_M 8

enum { QWK_Q_NONE = 0, QWK_Q_U4 = 1, QWK_Q_U8 = 2, QWK_Q_E4M3 = 3 };   /* == qwi_qfmt */

typedef struct qwk_qlinear {
    int32_t fmt;                  /* QWK_Q_*; NONE: the linear is plain bf16    */
    int32_t n, k, group_k, ngroups;
    const uint8_t *codes;         /* device, as above                            */
    const float *scales, *zeros;  /* device; zeros NULL for E4M3                 */
    const float *grid;            /* E4M3 in 128 x 128 blocks: the weight's block
                                     scales for the block-scaled FP8 GEMM
                                     (fp8_block.h, [n/128][grid_ld]); else NULL */
    int32_t grid_ld;
} qwk_qlinear;

/* Bytes of the codes of an n x k linear in fmt (U4: n * k/2). */
size_t qwk_qcode_bytes(int32_t fmt, int64_t n, int64_t k);

/* y[m][j] = sum_c x[m][c] * w(j, c) for m < M (1..QWK_QGEMV_MAX_M), j < w->n:
 * x bf16 [M][w->k], y f32 with row stride ldy. Products and sums in f32,
 * dequantization fused (one read of the codes). Asynchronous on stream. */
void qwk_qgemv(const uint16_t *x, int32_t M, const qwk_qlinear *w, float *y, int32_t ldy, cudaStream_t stream);

/* The W8A8 form of qwk_qgemv for an E4M3 linear in 128 x 128 blocks (K a
 * multiple of 128, group_k 128: the linears that carry a grid), over
 * activations quantized by fp8_block.h's qwk_fp8_quant_act_values (xe
 * bf16 [M][w->k] e4m3 values, xs f32 [k/128][qwk_fp8_rows(M)]):
 *   y[m][j] = sum_b xs[b][m] * scale(j, b) * sum_{c in b} xe[m][c] * e4m3(code(j, c))
 * for m < M (1..QWK_QGEMV_MAX_M), the block-scaled GEMM's sum, in f32.
 * Row m's result does not depend on M. Asynchronous on stream. */
void qwk_qgemv_w8a8(const uint16_t *xe, const float *xs, int32_t M, const qwk_qlinear *w, float *y, int32_t ldy,
                    cudaStream_t stream);

/* out[j][c] = bf16(w(j, c)) for the whole linear: out bf16 [w->n][w->k]
 * (round to nearest even), the input of the bf16 GEMM for M > 64.
 * Asynchronous on stream. */
void qwk_qdequant(const qwk_qlinear *w, uint16_t *out, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
