/*
 * dtype.h - element types of weight tensors and their conversion to f32.
 * bf16 and f16 are stored as uint16_t bit patterns.
 */
#ifndef QWI_DTYPE_H
#define QWI_DTYPE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

typedef enum qwi_dtype {
    QWI_DTYPE_F32 = 0,
    QWI_DTYPE_BF16 = 1,
    QWI_DTYPE_F16 = 2,
    QWI_DTYPE_F8_E4M3 = 3,  /* "F8_E4M3": FP8 weights of -FP8 checkpoints (fp8.h)      */
    QWI_DTYPE_I32 = 4       /* "I32": AWQ/GPTQ packed codes, zero points and g_idx      */
} qwi_dtype;

/* Bytes of one element of dt (4, 2 or 1). */
static inline size_t qwi_dtype_size(qwi_dtype dt) {
    switch (dt) {
    case QWI_DTYPE_F32: return 4;
    case QWI_DTYPE_BF16: return 2;
    case QWI_DTYPE_F16: return 2;
    case QWI_DTYPE_F8_E4M3: return 1;
    case QWI_DTYPE_I32: return 4;
    }
    return 4;
}

/* Whether dt is a float type every float reader accepts (F32, BF16, F16):
 * F8_E4M3 and I32 tensors are only read through the quantized-linear loader. */
static inline int qwi_dtype_is_float(qwi_dtype dt) {
    return dt == QWI_DTYPE_F32 || dt == QWI_DTYPE_BF16 || dt == QWI_DTYPE_F16;
}

/* The safetensors name of dt ("F32", "BF16", "F16", "F8_E4M3", "I32"). */
static inline const char *qwi_dtype_name(qwi_dtype dt) {
    switch (dt) {
    case QWI_DTYPE_F32: return "F32";
    case QWI_DTYPE_BF16: return "BF16";
    case QWI_DTYPE_F16: return "F16";
    case QWI_DTYPE_F8_E4M3: return "F8_E4M3";
    case QWI_DTYPE_I32: return "I32";
    }
    return "?";
}

static inline float qwi_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round-to-nearest-even f32 -> bf16 (NaN stays NaN). */
static inline uint16_t qwi_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Round-to-nearest-even f32 -> IEEE half (overflow -> inf, NaN kept). */
static inline uint16_t qwi_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (absu >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    if (absu < 0x38800000u) {
        /* subnormal half (or zero): value = mant * 2^-24 */
        float a;
        memcpy(&a, &absu, 4);
        float m = a * 16777216.0f; /* exact scaling by 2^24 */
        uint32_t r = (uint32_t)lrintf(m); /* default rounding mode is nearest-even */
        return (uint16_t)(sign | r);
    }
    uint32_t exp = ((absu >> 23) - 127 + 15) << 10;
    uint32_t mant = absu & 0x7fffffu;
    uint32_t h = exp | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++; /* carry into exp is correct */
    return (uint16_t)(sign | h);
}

static inline float qwi_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (mant == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while ((mant & 0x400u) == 0) { mant <<= 1; exp--; }
            mant &= 0x3ffu;
            u = sign | (exp << 23) | (mant << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (mant << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif
