/*
 * quant_host.c - quantized rows into the CUDA device layout (quant_host.h).
 */
#include "quant_host.h"

#include <string.h>

size_t qwi_cuda_qrow_bytes(const qwi_qweight *w) {
    return w->fmt == QWI_QFMT_U4 ? (size_t)(w->k / 2) : (size_t)w->k;
}

void qwi_cuda_qpack_rows(const qwi_qweight *w, int64_t r0, int64_t r1, uint8_t *codes, float *scales,
                         float *zeros) {
    qwi_qweight_unpack_rows(w, r0, r1, codes, scales, w->fmt == QWI_QFMT_E4M3 ? NULL : zeros);
    if (w->fmt != QWI_QFMT_U4) return;
    /* in place: byte j is written after codes 2j and 2j+1 (>= j) are read;
     * k is even, so a row's pairs never straddle rows */
    const size_t n = (size_t)(r1 - r0) * (size_t)w->k / 2;
    for (size_t j = 0; j < n; j++) codes[j] = (uint8_t)((codes[2 * j] & 15u) | (unsigned)(codes[2 * j + 1] << 4));
}

bool qwi_cuda_fp8_block_shape(int32_t fmt, int64_t n, int64_t k, int64_t group_k) {
    return fmt == QWI_QFMT_E4M3 && group_k == QWI_CUDA_FP8_BLOCK && n > 0 && k > 0 &&
           n % QWI_CUDA_FP8_BLOCK == 0 && k % QWI_CUDA_FP8_BLOCK == 0;
}

int64_t qwi_cuda_fp8_grid_ld(int64_t k) {
    const int64_t kb = (k + QWI_CUDA_FP8_BLOCK - 1) / QWI_CUDA_FP8_BLOCK;
    return (kb + 3) / 4 * 4;
}

bool qwi_cuda_fp8_grid_rows(float *grid, int64_t ld, int64_t row0, int64_t rows, const float *scales,
                            int64_t G) {
    for (int64_t i = 0; i < rows; i++) {
        const int64_t r = row0 + i;
        float *blk = grid + (r / QWI_CUDA_FP8_BLOCK) * ld;
        const float *sc = scales + i * G;
        if (r % QWI_CUDA_FP8_BLOCK == 0) {
            memcpy(blk, sc, (size_t)G * sizeof(float));
            continue;
        }
        /* bit equality: the grid must give every row exactly its own scale */
        if (memcmp(blk, sc, (size_t)G * sizeof(float)) != 0) return false;
    }
    return true;
}
