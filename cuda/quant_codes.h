/*
 * quant_codes.h - device helpers shared by the kernels over quantized
 * linears (quant.cu's GEMVs and dequantization, qgemm.cu's GEMM): reading
 * codes in quant.h's layout and the bf16 conversions, each as lib/ defines
 * it for the CPU, so every kernel computes the same weight values.
 * Included by .cu files only.
 */
#ifndef QWK_QUANT_CODES_H
#define QWK_QUANT_CODES_H

#include <stdint.h>

#include "quant.h"

static __device__ __forceinline__ float bf2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

/* round to nearest even, NaN kept (as lib/dtype.h qwi_f32_to_bf16) */
static __device__ __forceinline__ uint16_t f2bf(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* The e4m3 value of a bit pattern, exactly as lib/fp8.h qwi_e4m3_to_f32:
 * normal 2^(e-7) * (1 + m/8) built as f32 bits, subnormal m * 2^-9, NaN
 * for S.1111.111. */
static __device__ __forceinline__ float e4m3_to_f32(uint32_t b) {
    const uint32_t e = (b >> 3) & 15u, m = b & 7u;
    float v = e ? __uint_as_float(((e + 120u) << 23) | (m << 20)) : (float)m * 0x1p-9f;
    if (e == 15u && m == 7u) v = __int_as_float(0x7fc00000);
    return (b & 0x80u) ? -v : v;
}

/* The code of (row, c) as the float the formula subtracts the zero from
 * (U4/U8) or the e4m3 value (E4M3). */
template <int FMT>
static __device__ __forceinline__ float code_at(const uint8_t *row, int32_t c) {
    if (FMT == QWK_Q_U4) return (float)((row[c >> 1] >> ((c & 1) * 4)) & 15u);
    if (FMT == QWK_Q_U8) return (float)row[c];
    return e4m3_to_f32(row[c]);
}

/* Eight codes held in registers (8 nibbles of lo; or 8 bytes, lo then
 * hi) as the floats the formula takes. */
template <int FMT>
static __device__ __forceinline__ void unpack8(uint32_t lo, uint32_t hi, float *v) {
#pragma unroll
    for (int i = 0; i < 8; i++) {
        if (FMT == QWK_Q_U4) {
            v[i] = (float)((lo >> (4 * i)) & 15u);
        } else {
            const uint32_t b = ((i < 4 ? lo : hi) >> (8 * (i & 3))) & 255u;
            v[i] = FMT == QWK_Q_U8 ? (float)b : e4m3_to_f32(b);
        }
    }
}

/* Eight codes from c (a multiple of 8, k % 8 == 0: aligned loads). */
template <int FMT>
static __device__ __forceinline__ void codes8(const uint8_t *row, int32_t c, float *v) {
    if (FMT == QWK_Q_U4) {
        unpack8<FMT>(*(const uint32_t *)(row + (c >> 1)), 0u, v);
    } else {
        const uint2 q = *(const uint2 *)(row + c);
        unpack8<FMT>(q.x, q.y, v);
    }
}

/* w = (code - zero) * scale of group g, in f32 (the zero 0 for E4M3,
 * whose zp is NULL): quant.h's formula, the value every kernel rounds or
 * multiplies. */
static __device__ __forceinline__ float wscaled(float code, const float *sc, const float *zp, int32_t g) {
    return (code - (zp ? zp[g] : 0.f)) * sc[g];
}

#endif
