/*
 * kernels_quant.c - the portable quantized matmuls (matmul_qf32 and
 * matmul_qpair of the generic table): the arithmetic contract of
 * cpu/qpanel.h written out in C, with fmaf() for every fused step, so the
 * ISA tables (kernels_quant_avx2.c, kernels_quant_avx512.c) can be checked
 * against it bit for bit (tests/test_quant_kernels.c). Row tiles of 4 share
 * each decoded weight; codes are found through qwi_qpanel_code_pos, the
 * layout's one definition.
 */
#include <math.h>
#include <string.h>

#include "cpu/kernels.h"
#include "cpu/qpanel.h"
#include "cpu/tile_out.h"

#define QMR 4

/* c(slot s, k) of panel p for s in [0, 16); zg = the panel's zeros of k's
 * group (U4/U8). */
static inline void decode16(const qwi_qpanel *w, int64_t p, const float *zg, int64_t k,
                            float c[16]) {
    for (int s = 0; s < 16; s++) {
        int64_t byte;
        int shift;
        qwi_qpanel_code_pos(w, p, k, s, &byte, &shift);
        const uint8_t code = w->codes[byte];
        if (w->fmt == QWI_QFMT_E4M3) {
            c[s] = qwi_qpanel_e4m3_c(code);
        } else {
            const int v = w->fmt == QWI_QFMT_U4 ? (code >> shift) & 0xf : code;
            c[s] = (float)v - zg[s];
        }
    }
}

static inline float lo_f32(uint32_t pair) {
    uint32_t u = pair << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float hi_f32(uint32_t pair) {
    uint32_t u = pair & 0xffff0000u;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

void qwr_matmul_qf32(const float *x, int64_t M, int64_t K, const qwi_qpanel *w, int64_t n0,
                     int64_t N, const float *bias, float *out, int64_t ldo, int accumulate) {
    const int64_t G = w->ngroups, gk = w->group_k;
    for (int64_t j0 = 0; j0 < N; j0 += 16) {
        const int64_t p = (n0 + j0) / 16;
        for (int64_t m = 0; m < M; m += QMR) {
            const int mr = (int)QWI_MIN((int64_t)QMR, M - m);
            float tot[QMR][16] = { { 0 } };
            for (int64_t g = 0; g < G; g++) {
                const int64_t ks = g * gk, ke = QWI_MIN(K, ks + gk);
                const float *zg = w->zeros ? w->zeros + (p * G + g) * 16 : NULL;
                float acc[QMR][16] = { { 0 } };
                for (int64_t k = ks; k < ke; k++) {
                    float c[16];
                    decode16(w, p, zg, k, c);
                    for (int r = 0; r < mr; r++) {
                        const float xv = x[(m + r) * K + k];
                        for (int s = 0; s < 16; s++) acc[r][s] = fmaf(xv, c[s], acc[r][s]);
                    }
                }
                const float *sc = w->scales + (p * G + g) * 16;
                for (int r = 0; r < mr; r++)
                    for (int s = 0; s < 16; s++) tot[r][s] = fmaf(acc[r][s], sc[s], tot[r][s]);
            }
            for (int r = 0; r < mr; r++) qwi_put16(tot[r], j0, N, bias, out + (m + r) * ldo, accumulate);
        }
    }
}

void qwr_matmul_qpair(const uint32_t *x, int64_t M, int64_t KP, const qwi_qpanel *w, int64_t n0,
                      int64_t N, const float *bias, float *out, int64_t ldo, int accumulate) {
    const int64_t G = w->ngroups, gk = w->group_k;
    for (int64_t j0 = 0; j0 < N; j0 += 16) {
        const int64_t p = (n0 + j0) / 16;
        for (int64_t m = 0; m < M; m += QMR) {
            const int mr = (int)QWI_MIN((int64_t)QMR, M - m);
            float tot[QMR][16] = { { 0 } };
            for (int64_t g = 0; g < G; g++) {
                /* group_k is even: the group is whole pairs (the last one
                 * may hold the zero pad column of an odd K) */
                const int64_t js = g * gk / 2, je = QWI_MIN(KP, (g + 1) * gk / 2);
                const float *zg = w->zeros ? w->zeros + (p * G + g) * 16 : NULL;
                float acc[QMR][16] = { { 0 } };
                for (int64_t j = js; j < je; j++) {
                    float ce[16], co[16];
                    decode16(w, p, zg, 2 * j, ce);
                    decode16(w, p, zg, 2 * j + 1, co);
                    for (int r = 0; r < mr; r++) {
                        const uint32_t xp = x[(m + r) * KP + j];
                        const float xo = hi_f32(xp), xe = lo_f32(xp);
                        for (int s = 0; s < 16; s++) acc[r][s] = acc[r][s] + xo * co[s];
                        for (int s = 0; s < 16; s++) acc[r][s] = acc[r][s] + xe * ce[s];
                    }
                }
                float scb[16];
                int64_t scs;
                const float *sc = qwi_qpanel_group_scales(w, p, g, 1, scb, &scs);
                for (int r = 0; r < mr; r++)
                    for (int s = 0; s < 16; s++) tot[r][s] = fmaf(acc[r][s], sc[s], tot[r][s]);
            }
            for (int r = 0; r < mr; r++) qwi_put16(tot[r], j0, N, bias, out + (m + r) * ldo, accumulate);
        }
    }
}
