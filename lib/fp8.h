/*
 * fp8.h - the OCP FP8 E4M3 ("e4m3fn") element: what Qwen's -FP8 checkpoints
 * store their weights in, and what the fp8 KV cache stores K/V in.
 *
 * Format: 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits; no
 * infinities; S.1111.111 (0x7f, 0xff) is NaN; the largest finite value is
 * 448 (S.1111.110); subnormals are 2^-6 * m/8 (smallest 2^-9). Every e4m3
 * value is exact in f32, bf16 and f16.
 */
#ifndef QWI_FP8_H
#define QWI_FP8_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define QWI_E4M3_MAX 448.0f

/* Whether the e4m3 bit pattern b is NaN. */
static inline int qwi_e4m3_is_nan(uint8_t b) { return (b & 0x7f) == 0x7f; }

/* The exact f32 value of the e4m3 bit pattern b (NaN for 0x7f/0xff). */
static inline float qwi_e4m3_to_f32(uint8_t b) {
    uint32_t sign = (uint32_t)(b & 0x80) << 24;
    uint32_t exp = (b >> 3) & 0xf, mant = b & 0x7;
    float v;
    if (exp == 0xf && mant == 0x7) {
        uint32_t u = sign | 0x7fc00000u;
        memcpy(&v, &u, 4);
        return v;
    }
    if (exp == 0) {
        v = (float)mant * 0x1p-9f; /* subnormal: 2^-6 * m/8 */
    } else {
        uint32_t u = ((exp + 127 - 7) << 23) | (mant << 20);
        memcpy(&v, &u, 4);
    }
    return sign ? -v : v;
}

/* f rounded to the nearest e4m3 value (ties to even mantissa), saturating:
 * |f| beyond the largest finite value (infinity included) gives +-448, as
 * the checkpoint quantizers and vLLM's fp8 KV cache do; NaN gives 0x7f.
 * Results below half the smallest subnormal are signed zeros. */
static inline uint8_t qwi_f32_to_e4m3(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    if (isnan(f)) return 0x7f;
    float a = fabsf(f);
    if (a >= QWI_E4M3_MAX) return sign | 0x7e;
    if (a < 0x1p-6f) {
        /* subnormal range: a multiple of 2^-9, rounded to nearest even by
         * the FPU's default rounding (nearbyintf) */
        float m = nearbyintf(a * 0x1p9f); /* 0 .. 8; 8 is the smallest normal */
        return sign | (uint8_t)m;
    }
    /* normal: keep 3 mantissa bits of the f32, round to nearest even */
    uint32_t au;
    memcpy(&au, &a, 4);
    uint32_t lsb = (au >> 20) & 1;
    au += 0x7ffffu + lsb;
    uint32_t exp = (au >> 23) - 127 + 7;
    uint32_t mant = (au >> 20) & 0x7;
    if (exp > 15 || (exp == 15 && mant == 7)) return sign | 0x7e; /* rounded past 448 */
    return sign | (uint8_t)((exp << 3) | mant);
}

#endif
