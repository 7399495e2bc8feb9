/*
 * qgemm.h - the weight-only GEMM over quantized linears (quant.h's layout)
 * for steps of a few dozen rows: continuous batching's decode steps past
 * the GEMV's 8 rows, short prompt chunks, the quantized head.
 *
 * Why: above QWK_QGEMV_MAX_M the backend used to dequantize the whole
 * weight into a bf16 scratch copy and run the cuBLASLt GEMM on it - per
 * linear and step, 0.5 (int4) or 1 (int8, fp8) byte of codes read, 2 bytes
 * written and 2 read again for every weight: 4.5 bytes a weight for int4
 * against the bf16 model's 2, so an int4 model decoding 9 to 64 sequences
 * ran slower than the bf16 one. This kernel dequantizes tiles of the
 * weight in shared memory and multiplies them on the tensor cores (wmma
 * bf16, f32 accumulation), so a step of up to QWK_QGEMM_MAX_M rows reads
 * the codes once. Above that the dequantizing path stays: its GEMM is
 * cuBLASLt's, and prefill's FLOPs, not the weight bytes, bound it.
 *
 * Numerics: each weight is the value qwk_qdequant writes (bf16 of (code -
 * zero) * scale, or of e4m3(code) * scale), each activation bf16, products
 * exact and sums in f32 - the dequantizing path's operands, in another
 * summation order.
 */
#ifndef QWK_QGEMM_H
#define QWK_QGEMM_H

#include <stdint.h>
#include <cuda_runtime.h>

#include "quant.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most rows the backend sends through qwk_qgemm (more: dequantize +
 * cuBLASLt). An estimate, not a measurement (docs/cuda.md). */
#define QWK_QGEMM_MAX_M 64

/* y[m][j] = sum_c x[m][c] * bf16(w(j, c)) for m < M, j < w->n: x bf16
 * [M][w->k] (16-byte aligned when w->k % 8 == 0), y f32 with row stride
 * ldy (>= w->n); rows past M untouched. Any M >= 1 and any shape (the
 * block tiles are guarded), the codes read once per 64 rows of M.
 * Asynchronous on stream; nothing to free. */
void qwk_qgemm(const uint16_t *x, int32_t M, const qwk_qlinear *w, float *y, int32_t ldy, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
