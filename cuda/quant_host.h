/*
 * quant_host.h - the host half of the CUDA backend's quantized-linear
 * upload: rows of a qwi_qweight (lib/quant.h) put into the device layout of
 * cuda/quant.h on the host, ready for one cudaMemcpy per array. Plain C (no
 * CUDA headers), so tests/test_cuda_qpack.c checks it without a GPU.
 */
#ifndef QWI_CUDA_QUANT_HOST_H
#define QWI_CUDA_QUANT_HOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"   /* lib/quant.h via lib/model.h (cuda/quant.h is the device side) */

/* Bytes of device codes per row of w: k / 2 for U4 (two codes per byte,
 * column 2j in the low nibble), k for U8 and E4M3. */
size_t qwi_cuda_qrow_bytes(const qwi_qweight *w);

/* Rows [r0, r1) of w in quant.h's device layout: codes (first
 * (r1-r0) * qwi_cuda_qrow_bytes(w) bytes of the buffer, which must hold
 * (r1-r0) * k bytes: the codes are unpacked there first), scales and zeros
 * [r1-r0][qwi_qweight_groups(w)] f32 (zeros NULL, and not written, for
 * E4M3). Pure; cannot fail on a loaded weight. */
void qwi_cuda_qpack_rows(const qwi_qweight *w, int64_t r0, int64_t r1, uint8_t *codes, float *scales,
                         float *zeros);

/* The block-scaled FP8 GEMM (cuda/fp8_block.h) takes an E4M3 linear of n
 * rows and k columns whose scale groups are QWI_CUDA_FP8_BLOCK columns
 * wide when n and k are multiples of QWI_CUDA_FP8_BLOCK; true then. Whether
 * its scales are also constant over 128-row blocks is only known from the
 * scales themselves (qwi_cuda_fp8_grid_rows). */
#define QWI_CUDA_FP8_BLOCK 128
bool qwi_cuda_fp8_block_shape(int32_t fmt, int64_t n, int64_t k, int64_t group_k);

/* Columns of the weight's scale grid: ceil(k / 128) rounded up to 4 (the
 * 16-byte leading dimension of cuBLASLt's 128x128 block-scale tensors). */
int64_t qwi_cuda_fp8_grid_ld(int64_t k);

/* Record rows [row0, row0 + rows) of a fused linear's per-row scales
 * (scales[r][g], G = k / 128 groups a row, as qwi_cuda_qpack_rows writes
 * them) into grid [n / 128][ld] (ld = qwi_cuda_fp8_grid_ld(k), the padding
 * columns left as they are): a row that starts a 128-row block sets the
 * block's scales, every other row must repeat them exactly. Rows must come
 * in increasing order across calls, each block's first row first. Returns
 * false when a row's scales differ from its block's (the checkpoint's
 * blocks are not 128 x 128 aligned with the fused rows: such a linear
 * keeps the dequantizing path); the grid is then unusable. */
bool qwi_cuda_fp8_grid_rows(float *grid, int64_t ld, int64_t row0, int64_t rows, const float *scales,
                            int64_t G);

#endif
