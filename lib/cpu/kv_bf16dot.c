/*
 * kv_bf16dot.c - the portable form of attention on bf16 dot products (the
 * contract is in kv_bf16dot.h): each step a rounded multiply then an add,
 * which for two bf16 factors is what vdpbf16ps and an FMA give.
 */
#include <string.h>

#include "cpu/kv_bf16dot.h"

/* A cached bf16 element as vdpbf16ps reads it: a zero exponent (zero or
 * subnormal) is a zero of the same sign (DAZ). */
static inline float bf16_daz(uint16_t h) {
    if ((h & 0x7f80u) == 0) h &= 0x8000u;
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The low (even element) and high (odd element) halves of a pair. */
static inline float pair_lo(uint32_t pair) { return bf16_daz((uint16_t)(pair & 0xffffu)); }
static inline float pair_hi(uint32_t pair) { return bf16_daz((uint16_t)(pair >> 16)); }

void qwr_kv_dscores(const uint32_t *const *q, float *const *out, int32_t nq, int64_t hd,
                    const uint16_t *const *k, int64_t dstride, int32_t n, float scale) {
    for (int32_t i = 0; i < nq; i++) {
        float *o = out[i];
        for (int32_t j = 0; j < n; j++) o[j] = 0.0f;
        /* dims outer, positions inner: each o[j] is still one chain over
         * the pairs in order (the loop over j only interleaves chains) */
        for (int64_t dp = 0; dp < hd / 2; dp++) {
            const float qh = pair_hi(q[i][dp]), ql = pair_lo(q[i][dp]);
            const int64_t at = 2 * dp * dstride;
            for (int32_t j = 0; j < n; j++) {
                const float a = o[j] + qh * bf16_daz(k[j][at + dstride]);
                o[j] = a + ql * bf16_daz(k[j][at]);
            }
        }
        for (int32_t j = 0; j < n; j++) o[j] = o[j] * scale;
    }
}

void qwr_kv_dpv(float *const *o, const uint32_t *const *p, int32_t nq, const uint16_t *const *v,
                int32_t n, int64_t hd) {
    for (int32_t i = 0; i < nq; i++) {
        float *oi = o[i];
        int32_t j = 0;
        for (; j + 2 <= n; j += 2) {
            const float ph = pair_hi(p[i][j / 2]), pl = pair_lo(p[i][j / 2]);
            const uint16_t *v0 = v[j], *v1 = v[j + 1];
            for (int64_t e = 0; e < hd; e++) {
                const float a = oi[e] + ph * bf16_daz(v1[e]);
                oi[e] = a + pl * bf16_daz(v0[e]);
            }
        }
        if (j < n) {   /* the half pair: its missing row is a zero */
            const float ph = pair_hi(p[i][j / 2]), pl = pair_lo(p[i][j / 2]);
            const uint16_t *v0 = v[j];
            for (int64_t e = 0; e < hd; e++) {
                const float a = oi[e] + ph * 0.0f;
                oi[e] = a + pl * bf16_daz(v0[e]);
            }
        }
    }
}

#if !(defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)))
bool qwi_kv_bf16dot_have_avx512bf16(void) { return false; }
#endif
