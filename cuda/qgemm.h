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

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>

#include "quant.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most rows the backend sends through qwk_qgemm (more: dequantize +
 * cuBLASLt). An estimate, not a measurement (docs/cuda.md). */
#define QWK_QGEMM_MAX_M 64

/* How many parts qwk_qgemm splits k into for M rows of w on a GPU of sms
 * multiprocessors (1: none): enough for its blocks to fill the GPU. */
int32_t qwk_qgemm_splits(int32_t M, const qwk_qlinear *w, int32_t sms);

/* Bytes of workspace qwk_qgemm uses for that split (its f32 partial sums,
 * splits x M x w->n; 0 when it does not split). */
size_t qwk_qgemm_workspace(int32_t M, const qwk_qlinear *w, int32_t sms);

/* y[m][j] = sum_c x[m][c] * bf16(w(j, c)) for m < M, j < w->n: x bf16
 * [M][w->k] (16-byte aligned when w->k % 8 == 0), y f32 with row stride
 * ldy (>= w->n); rows past M untouched. Any M >= 1 and any shape (the
 * block tiles are guarded), the codes read once per 64 rows of M. ws
 * (device, ws_bytes; may be NULL) takes the partial sums of a split k:
 * qwk_qgemm_workspace(M, w, sms) bytes for the split qwk_qgemm_splits
 * names, fewer splits when it holds less, none without it. The sums'
 * order depends on the split count, nothing else. Asynchronous on stream;
 * nothing to free. */
void qwk_qgemm(const uint16_t *x, int32_t M, const qwk_qlinear *w, float *y, int32_t ldy, float *ws,
               size_t ws_bytes, int32_t sms, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
