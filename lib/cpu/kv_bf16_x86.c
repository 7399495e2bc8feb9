/*
 * kv_bf16_x86.c - the AVX2+FMA and AVX-512F bf16-KV attention kernels (see
 * kv_bf16.h for their lane contracts). As in kernels_avx2.c, functions
 * carry __attribute__((target)) and a table is only handed out after
 * CPUID says its instructions exist.
 *
 * Every batched form runs, per output, exactly the FMA sequence of the
 * single form (same lanes, same order, same tail, same reduction): it only
 * interleaves independent chains and loads each K/V row once for all of
 * them, which is what hides the FMA latency and halves the K/V traffic.
 */
#include <string.h>

#include "cpu/kv_bf16.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma")))
#define AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma")))
#define AVX512 __attribute__((target("avx512f,avx2,fma")))
#define AVX512_INLINE static inline __attribute__((always_inline, target("avx512f,avx2,fma")))

/* ---- AVX2: 8 lanes ------------------------------------------------------ */

/* ((a0+a4)+(a1+a5))+((a2+a6)+(a3+a7)), the portable tree. */
AVX2_INLINE float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 h = _mm_hadd_ps(s, s);
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

/* bf16 -> f32: exact 16-bit shift. */
AVX2_INLINE __m256 ld8(const uint16_t *p) {
    __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}

/* First r (< 8) elements, the rest zero. */
AVX2_INLINE __m256 ld8_tail(const uint16_t *p, int64_t r) {
    uint16_t tmp[8] = { 0 };
    memcpy(tmp, p, (size_t)r * sizeof(uint16_t));
    return ld8(tmp);
}

AVX2_INLINE __m256 ldq8_tail(const float *p, int64_t r) {
    float tmp[8] = { 0 };
    memcpy(tmp, p, (size_t)r * sizeof(float));
    return _mm256_loadu_ps(tmp);
}

static AVX2 float avx2_dot(const float *q, const uint16_t *k, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), ld8(k + i), acc);
    if (i < n) acc = _mm256_fmadd_ps(ldq8_tail(q + i, n - i), ld8_tail(k + i, n - i), acc);
    return hsum8(acc);
}

static AVX2 void avx2_axpy(float *o, float s, const uint16_t *v, int64_t n) {
    __m256 sv = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(o + i, _mm256_fmadd_ps(sv, ld8(v + i), _mm256_loadu_ps(o + i)));
    for (; i < n; i++) {
        uint32_t u = (uint32_t)v[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        o[i] = __builtin_fmaf(s, f, o[i]);
    }
}

static AVX2 void avx2_dot4(const float *q, const uint16_t *const k[4], int64_t n, float out[4]) {
    __m256 c[4];
    for (int j = 0; j < 4; j++) c[j] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(q + i);
        for (int j = 0; j < 4; j++) c[j] = _mm256_fmadd_ps(x, ld8(k[j] + i), c[j]);
    }
    if (i < n) {
        __m256 x = ldq8_tail(q + i, n - i);
        for (int j = 0; j < 4; j++) c[j] = _mm256_fmadd_ps(x, ld8_tail(k[j] + i, n - i), c[j]);
    }
    for (int j = 0; j < 4; j++) out[j] = hsum8(c[j]);
}

static AVX2 void avx2_dot4x2(const float *q0, const float *q1, const uint16_t *const k[4],
                             int64_t n, float out0[4], float out1[4]) {
    __m256 c0[4], c1[4];
    for (int j = 0; j < 4; j++) c0[j] = c1[j] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x0 = _mm256_loadu_ps(q0 + i), x1 = _mm256_loadu_ps(q1 + i);
        for (int j = 0; j < 4; j++) {
            __m256 kv = ld8(k[j] + i);
            c0[j] = _mm256_fmadd_ps(x0, kv, c0[j]);
            c1[j] = _mm256_fmadd_ps(x1, kv, c1[j]);
        }
    }
    if (i < n) {
        __m256 x0 = ldq8_tail(q0 + i, n - i), x1 = ldq8_tail(q1 + i, n - i);
        for (int j = 0; j < 4; j++) {
            __m256 kv = ld8_tail(k[j] + i, n - i);
            c0[j] = _mm256_fmadd_ps(x0, kv, c0[j]);
            c1[j] = _mm256_fmadd_ps(x1, kv, c1[j]);
        }
    }
    for (int j = 0; j < 4; j++) {
        out0[j] = hsum8(c0[j]);
        out1[j] = hsum8(c1[j]);
    }
}

static AVX2 void avx2_axpy4(float *o, const float s[4], const uint16_t *const v[4], int64_t n) {
    __m256 w[4];
    for (int j = 0; j < 4; j++) w[j] = _mm256_set1_ps(s[j]);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 acc = _mm256_loadu_ps(o + i);
        for (int j = 0; j < 4; j++) acc = _mm256_fmadd_ps(w[j], ld8(v[j] + i), acc);
        _mm256_storeu_ps(o + i, acc);
    }
    if (i < n)
        for (int j = 0; j < 4; j++) avx2_axpy(o + i, s[j], v[j] + i, n - i);
}

static AVX2 void avx2_axpy4x2(float *o0, float *o1, const float s0[4], const float s1[4],
                              const uint16_t *const v[4], int64_t n) {
    __m256 w0[4], w1[4];
    for (int j = 0; j < 4; j++) {
        w0[j] = _mm256_set1_ps(s0[j]);
        w1[j] = _mm256_set1_ps(s1[j]);
    }
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 a0 = _mm256_loadu_ps(o0 + i), a1 = _mm256_loadu_ps(o1 + i);
        for (int j = 0; j < 4; j++) {
            __m256 vv = ld8(v[j] + i);
            a0 = _mm256_fmadd_ps(w0[j], vv, a0);
            a1 = _mm256_fmadd_ps(w1[j], vv, a1);
        }
        _mm256_storeu_ps(o0 + i, a0);
        _mm256_storeu_ps(o1 + i, a1);
    }
    if (i < n) {
        for (int j = 0; j < 4; j++) avx2_axpy(o0 + i, s0[j], v[j] + i, n - i);
        for (int j = 0; j < 4; j++) avx2_axpy(o1 + i, s1[j], v[j] + i, n - i);
    }
}

static const qwi_cpu_kv_bf16_kernels avx2_table = {
    .name = "avx2",
    .dot = avx2_dot,
    .axpy = avx2_axpy,
    .dot4 = avx2_dot4,
    .axpy4 = avx2_axpy4,
    .dot4x2 = avx2_dot4x2,
    .axpy4x2 = avx2_axpy4x2,
};

const qwi_cpu_kv_bf16_kernels *qwi_cpu_kv_bf16_avx2(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return NULL;
    return &avx2_table;
}

/* ---- AVX-512F: 16 lanes ------------------------------------------------- */

/* Lanes j and j+8 added, then the 8-lane tree. */
AVX512_INLINE float hsum16(__m512 v) {
    __m256 lo = _mm512_castps512_ps256(v);
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    return hsum8(_mm256_add_ps(lo, hi));
}

AVX512_INLINE __m512 ld16(const uint16_t *p) {
    __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
}

AVX512_INLINE __m512 ld16_tail(const uint16_t *p, int64_t r) {
    uint16_t tmp[16] = { 0 };
    memcpy(tmp, p, (size_t)r * sizeof(uint16_t));
    return ld16(tmp);
}

AVX512_INLINE __m512 ldq16_tail(const float *p, int64_t r) {
    return _mm512_maskz_loadu_ps((__mmask16)((1u << r) - 1u), p);
}

static AVX512 float avx512_dot(const float *q, const uint16_t *k, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), ld16(k + i), acc);
    if (i < n) acc = _mm512_fmadd_ps(ldq16_tail(q + i, n - i), ld16_tail(k + i, n - i), acc);
    return hsum16(acc);
}

static AVX512 void avx512_axpy(float *o, float s, const uint16_t *v, int64_t n) {
    __m512 sv = _mm512_set1_ps(s);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(o + i, _mm512_fmadd_ps(sv, ld16(v + i), _mm512_loadu_ps(o + i)));
    for (; i < n; i++) {
        uint32_t u = (uint32_t)v[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        o[i] = __builtin_fmaf(s, f, o[i]);
    }
}

static AVX512 void avx512_dot4(const float *q, const uint16_t *const k[4], int64_t n,
                               float out[4]) {
    __m512 c[4];
    for (int j = 0; j < 4; j++) c[j] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_loadu_ps(q + i);
        for (int j = 0; j < 4; j++) c[j] = _mm512_fmadd_ps(x, ld16(k[j] + i), c[j]);
    }
    if (i < n) {
        __m512 x = ldq16_tail(q + i, n - i);
        for (int j = 0; j < 4; j++) c[j] = _mm512_fmadd_ps(x, ld16_tail(k[j] + i, n - i), c[j]);
    }
    for (int j = 0; j < 4; j++) out[j] = hsum16(c[j]);
}

static AVX512 void avx512_dot4x2(const float *q0, const float *q1, const uint16_t *const k[4],
                                 int64_t n, float out0[4], float out1[4]) {
    __m512 c0[4], c1[4];
    for (int j = 0; j < 4; j++) c0[j] = c1[j] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 x0 = _mm512_loadu_ps(q0 + i), x1 = _mm512_loadu_ps(q1 + i);
        for (int j = 0; j < 4; j++) {
            __m512 kv = ld16(k[j] + i);
            c0[j] = _mm512_fmadd_ps(x0, kv, c0[j]);
            c1[j] = _mm512_fmadd_ps(x1, kv, c1[j]);
        }
    }
    if (i < n) {
        __m512 x0 = ldq16_tail(q0 + i, n - i), x1 = ldq16_tail(q1 + i, n - i);
        for (int j = 0; j < 4; j++) {
            __m512 kv = ld16_tail(k[j] + i, n - i);
            c0[j] = _mm512_fmadd_ps(x0, kv, c0[j]);
            c1[j] = _mm512_fmadd_ps(x1, kv, c1[j]);
        }
    }
    for (int j = 0; j < 4; j++) {
        out0[j] = hsum16(c0[j]);
        out1[j] = hsum16(c1[j]);
    }
}

static AVX512 void avx512_axpy4(float *o, const float s[4], const uint16_t *const v[4],
                                int64_t n) {
    __m512 w[4];
    for (int j = 0; j < 4; j++) w[j] = _mm512_set1_ps(s[j]);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 acc = _mm512_loadu_ps(o + i);
        for (int j = 0; j < 4; j++) acc = _mm512_fmadd_ps(w[j], ld16(v[j] + i), acc);
        _mm512_storeu_ps(o + i, acc);
    }
    if (i < n)
        for (int j = 0; j < 4; j++) avx512_axpy(o + i, s[j], v[j] + i, n - i);
}

static AVX512 void avx512_axpy4x2(float *o0, float *o1, const float s0[4], const float s1[4],
                                  const uint16_t *const v[4], int64_t n) {
    __m512 w0[4], w1[4];
    for (int j = 0; j < 4; j++) {
        w0[j] = _mm512_set1_ps(s0[j]);
        w1[j] = _mm512_set1_ps(s1[j]);
    }
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 a0 = _mm512_loadu_ps(o0 + i), a1 = _mm512_loadu_ps(o1 + i);
        for (int j = 0; j < 4; j++) {
            __m512 vv = ld16(v[j] + i);
            a0 = _mm512_fmadd_ps(w0[j], vv, a0);
            a1 = _mm512_fmadd_ps(w1[j], vv, a1);
        }
        _mm512_storeu_ps(o0 + i, a0);
        _mm512_storeu_ps(o1 + i, a1);
    }
    if (i < n) {
        for (int j = 0; j < 4; j++) avx512_axpy(o0 + i, s0[j], v[j] + i, n - i);
        for (int j = 0; j < 4; j++) avx512_axpy(o1 + i, s1[j], v[j] + i, n - i);
    }
}

static const qwi_cpu_kv_bf16_kernels avx512_table = {
    .name = "avx512",
    .dot = avx512_dot,
    .axpy = avx512_axpy,
    .dot4 = avx512_dot4,
    .axpy4 = avx512_axpy4,
    .dot4x2 = avx512_dot4x2,
    .axpy4x2 = avx512_axpy4x2,
};

const qwi_cpu_kv_bf16_kernels *qwi_cpu_kv_bf16_avx512(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx2") ||
        !__builtin_cpu_supports("fma"))
        return NULL;
    return &avx512_table;
}

#else

const qwi_cpu_kv_bf16_kernels *qwi_cpu_kv_bf16_avx2(void) { return NULL; }
const qwi_cpu_kv_bf16_kernels *qwi_cpu_kv_bf16_avx512(void) { return NULL; }

#endif
