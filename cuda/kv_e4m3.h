/*
 * kv_e4m3.h - the e4m3 element of the CUDA backend's fp8 KV cache: the
 * write rounding and the exact read, with lib/fp8.h's semantics bit for bit
 * (qwi_f32_to_e4m3: nearest even, saturating to +-448, NaN -> 0x7f;
 * qwi_e4m3_to_f32: exact, S.1111.111 NaN).
 *
 * Host and device: the kernels (kernels.cu writes, attention.cu reads)
 * include it under nvcc, and tests/test_cuda_kv_fp8_host.c compiles the
 * same functions as plain C to compare them with lib/fp8.h on machines
 * without a GPU; the device-only pair read (qwk_e4m3x2_to_f32x2, the
 * hardware conversion on sm_89+) is compared on a GPU by
 * tests/gpu/check_kernels.cu. Only integer and f32 operations that round the same way on
 * both sides (no fast-math: nvcc's default -ftz=false -prec-div=true).
 */
#ifndef QWK_KV_E4M3_H
#define QWK_KV_E4M3_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define QWK_E4M3_FN static __host__ __device__ __forceinline__
#else
#define QWK_E4M3_FN static inline
#endif

QWK_E4M3_FN uint32_t qwk_f32_bits(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
#endif
}

QWK_E4M3_FN float qwk_bits_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

/* The exact f32 value of e4m3 bit pattern b (its low 8 bits): normal
 * 2^(e-7) * (1 + m/8) built as f32 bits, subnormal m * 2^-9 (exact, no
 * subnormal f32 involved), NaN (sign kept) for S.1111.111. */
QWK_E4M3_FN float qwk_e4m3_to_f32(uint32_t b) {
    const uint32_t e = (b >> 3) & 15u, m = b & 7u;
    float v = e ? qwk_bits_f32(((e + 120u) << 23) | (m << 20)) : (float)m * 0x1p-9f;
    if (e == 15u && m == 7u) v = qwk_bits_f32(0x7fc00000u);
    return (b & 0x80u) ? -v : v;
}

/* The bf16 bit pattern of the same value: exact (3 mantissa bits), so the
 * top half of the f32. */
QWK_E4M3_FN uint16_t qwk_e4m3_to_bf16(uint32_t b) {
    return (uint16_t)(qwk_f32_bits(qwk_e4m3_to_f32(b)) >> 16);
}

/* f rounded to e4m3 as qwi_f32_to_e4m3: NaN -> 0x7f; |f| >= 448 (infinity
 * included) -> sign | 0x7e; below 2^-6 a multiple of 2^-9 rounded to
 * nearest even (rintf: the default rounding mode on the host, always
 * nearest even on the device); else 3 mantissa bits, nearest even. */
QWK_E4M3_FN uint8_t qwk_f32_to_e4m3(float f) {
    const uint32_t u = qwk_f32_bits(f);
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t au = u & 0x7fffffffu;
    if (au > 0x7f800000u) return 0x7f;                 /* NaN                */
    if (au >= 0x43e00000u) return sign | 0x7e;         /* >= 448: saturate   */
    if (au < 0x3c800000u)                              /* < 2^-6: subnormal  */
        return sign | (uint8_t)rintf(qwk_bits_f32(au) * 0x1p9f);
    au += 0x7ffffu + ((au >> 20) & 1u);
    const uint32_t exp = (au >> 23) - 127u + 7u, mant = (au >> 20) & 7u;
    if (exp > 15u || (exp == 15u && mant == 7u)) return sign | 0x7e;   /* rounded past 448 */
    return sign | (uint8_t)((exp << 3) | mant);
}

#ifdef __CUDACC__
#include <cuda_fp16.h>
#include <cuda_fp8.h>

/* Two e4m3 codes - the low two bytes of w, low byte first - as exact f32
 * (x from the low byte): the read of the attention kernels. On sm_89 and
 * later one cvt.rn.f16x2.e4m3x2 (exact: every e4m3 value is an f16) and
 * two f16 -> f32 widenings; elsewhere qwk_e4m3_to_f32 twice. Either gives
 * qwk_e4m3_to_f32's value (a NaN code gives a NaN, its payload aside). */
static __device__ __forceinline__ float2 qwk_e4m3x2_to_f32x2(uint32_t w) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w & 0xffffu), __NV_E4M3);
    return __half22float2(__half2(h));
#else
    return make_float2(qwk_e4m3_to_f32(w & 0xffu), qwk_e4m3_to_f32((w >> 8) & 0xffu));
#endif
}
#endif

#endif
