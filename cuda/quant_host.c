/*
 * quant_host.c - quantized rows into the CUDA device layout (quant_host.h).
 */
#include "quant_host.h"

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
