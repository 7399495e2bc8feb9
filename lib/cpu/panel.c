/*
 * panel.c - packing weights into the panel layout (see panel.h).
 */
#include <string.h>

#include "cpu/panel.h"

size_t qwi_panel_bytes(qwi_dtype dt, int64_t n, int64_t k) {
    if ((dt != QWI_DTYPE_F32 && dt != QWI_DTYPE_BF16) || n <= 0 || k <= 0) return 0;
    size_t rows = (size_t)QWI_DIV_UP(n, QWI_PANEL) * QWI_PANEL, bytes;
    if (__builtin_mul_overflow(rows, (size_t)k, &bytes) ||
        __builtin_mul_overflow(bytes, qwi_dtype_size(dt), &bytes))
        return 0;
    return bytes;
}

/* Slot of row r (0..15 within its panel): see panel.h. */
static inline int64_t slot_of(qwi_dtype dt, int64_t r) {
    if (dt == QWI_DTYPE_F32) return r;
    return r < 8 ? 2 * r : 2 * (r - 8) + 1;
}

/* The packing loop for elements of es bytes, moved as opaque units (packing
 * never converts: the panels hold exactly the file's bits). Inlined with a
 * constant es so each copy is one load and one store. */
static inline __attribute__((always_inline)) void pack_units(qwi_dtype dt, size_t es, const char *src,
                                                             int64_t n, int64_t k, char *out) {
    const int64_t np = QWI_DIV_UP(n, QWI_PANEL);
    for (int64_t p = 0; p < np; p++)
        for (int64_t r = 0; r < QWI_PANEL; r++) {
            const int64_t row = p * QWI_PANEL + r;
            char *o = out + (size_t)(p * k * QWI_PANEL + slot_of(dt, r)) * es;
            for (int64_t c = 0; c < k; c++, o += QWI_PANEL * es) {
                if (row < n) memcpy(o, src + (size_t)(row * k + c) * es, es);
                else memset(o, 0, es);
            }
        }
}

bool qwi_panel_pack(qwi_dtype dt, const void *w, int64_t n, int64_t k, void *dst) {
    if (!qwi_panel_bytes(dt, n, k)) return false;
    if (dt == QWI_DTYPE_F32) pack_units(dt, 4, w, n, k, dst);
    else pack_units(dt, 2, w, n, k, dst);
    return true;
}

float qwi_panel_get(qwi_dtype dt, const void *panels, int64_t k, int64_t row, int64_t col) {
    int64_t p = row / QWI_PANEL, r = row % QWI_PANEL;
    size_t idx = (size_t)((p * k + col) * QWI_PANEL + slot_of(dt, r));
    if (dt == QWI_DTYPE_F32) return ((const float *)panels)[idx];
    uint32_t u = (uint32_t)((const uint16_t *)panels)[idx] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
