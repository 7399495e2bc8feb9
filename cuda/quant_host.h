/*
 * quant_host.h - the host half of the CUDA backend's quantized-linear
 * upload: rows of a qwi_qweight (lib/quant.h) put into the device layout of
 * cuda/quant.h on the host, ready for one cudaMemcpy per array. Plain C (no
 * CUDA headers), so tests/test_cuda_qpack.c checks it without a GPU.
 */
#ifndef QWI_CUDA_QUANT_HOST_H
#define QWI_CUDA_QUANT_HOST_H

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

#endif
