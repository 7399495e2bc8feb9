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

/* Lanes [j0, j0 + 8 * nc) of up to two heads: nc (<= 4, a constant once
 * inlined) ymm of positions per head, one FMA chain over d per lane; lanes
 * at or past n are masked off. */
AVX2_INLINE void avx2_tscores_chunk(const float *q0, const float *q1, int64_t hd,
                                    const float *kt, int64_t ld, int32_t j0, int32_t n,
                                    float scale, float *o0, float *o1, const int nc) {
    __m256i m[4];
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int c = 0; c < 4; c++)
        m[c] = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - j0 - 8 * c), idx);
    __m256 a0[4], a1[4];
    for (int c = 0; c < 4; c++) a0[c] = a1[c] = _mm256_setzero_ps();
    const float *kp = kt + j0;
    if (q1) {
        for (int64_t d = 0; d < hd; d++, kp += ld) {
            __m256 x0 = _mm256_broadcast_ss(q0 + d), x1 = _mm256_broadcast_ss(q1 + d);
            for (int c = 0; c < nc; c++) {
                __m256 kv = _mm256_maskload_ps(kp + 8 * c, m[c]);
                a0[c] = _mm256_fmadd_ps(x0, kv, a0[c]);
                a1[c] = _mm256_fmadd_ps(x1, kv, a1[c]);
            }
        }
    } else {
        for (int64_t d = 0; d < hd; d++, kp += ld) {
            __m256 x0 = _mm256_broadcast_ss(q0 + d);
            for (int c = 0; c < nc; c++)
                a0[c] = _mm256_fmadd_ps(x0, _mm256_maskload_ps(kp + 8 * c, m[c]), a0[c]);
        }
    }
    const __m256 sv = _mm256_set1_ps(scale);
    for (int c = 0; c < nc; c++) {
        _mm256_maskstore_ps(o0 + j0 + 8 * c, m[c], _mm256_mul_ps(a0[c], sv));
        if (q1) _mm256_maskstore_ps(o1 + j0 + 8 * c, m[c], _mm256_mul_ps(a1[c], sv));
    }
}

/* Rows j .. j+7 (k[j+i] + d0, 8 bf16 each) to kt[(d0+i)*ld + j ..], 8x8. */
AVX2_INLINE void tr8x8(const uint16_t *const *k, int32_t j, int64_t d0, float *kt, int64_t ld) {
    __m256 r[8], t[8], u[8];
    for (int i = 0; i < 8; i++) r[i] = ld8(k[j + i] + d0);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    float *o = kt + d0 * ld + j;
    for (int i = 0; i < 4; i++) {
        _mm256_storeu_ps(o + i * ld, _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
        _mm256_storeu_ps(o + (i + 4) * ld, _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
    }
}

static AVX2 void avx2_transpose(const uint16_t *const *k, int32_t n, int64_t hd, float *kt,
                                int64_t ld) {
    const int64_t hd8 = hd & ~(int64_t)7;
    int32_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int64_t d = 0; d < hd8; d += 8) tr8x8(k, j, d, kt, ld);
    if (j < n) qwi_cpu_kv_bf16_transpose(k + j, n - j, hd, kt + j, ld);
    for (int32_t jj = 0; jj < j && hd8 < hd; jj++)   /* the last hd % 8 columns */
        for (int64_t d = hd8; d < hd; d++) {
            uint32_t u = (uint32_t)k[jj][d] << 16;
            memcpy(&kt[d * ld + jj], &u, 4);
        }
}

static AVX2 void avx2_tscores(const float *q, int32_t nq, int64_t hd, const float *kt,
                              int64_t ld, int32_t n, float scale, float *out, int64_t out_ld) {
    for (int32_t h = 0; h < nq; h += 2) {
        const float *q1 = h + 1 < nq ? q + (int64_t)(h + 1) * hd : NULL;
        for (int32_t j0 = 0; j0 < n; j0 += 32) {
            const float *qh = q + (int64_t)h * hd;
            float *o0 = out + (int64_t)h * out_ld, *o1 = q1 ? o0 + out_ld : NULL;
            /* the last chunk runs only the vectors it needs */
            switch (QWI_MIN(4, (n - j0 + 7) / 8)) {
            case 1: avx2_tscores_chunk(qh, q1, hd, kt, ld, j0, n, scale, o0, o1, 1); break;
            case 2: avx2_tscores_chunk(qh, q1, hd, kt, ld, j0, n, scale, o0, o1, 2); break;
            case 3: avx2_tscores_chunk(qh, q1, hd, kt, ld, j0, n, scale, o0, o1, 3); break;
            default: avx2_tscores_chunk(qh, q1, hd, kt, ld, j0, n, scale, o0, o1, 4); break;
            }
        }
    }
}

static const qwi_cpu_kv_bf16_kernels avx2_table = {
    .name = "avx2",
    .axpy = avx2_axpy,
    .axpy4 = avx2_axpy4,
    .axpy4x2 = avx2_axpy4x2,
    .tscores = avx2_tscores,
    .transpose = avx2_transpose,
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

/* Lanes [j0, j0 + 16 * nc) of up to two heads: nc (<= 4, a constant once
 * inlined) zmm of positions per head, one FMA chain over d per lane; lanes
 * at or past n are masked off. */
AVX512_INLINE void avx512_tscores_chunk(const float *q0, const float *q1, int64_t hd,
                                        const float *kt, int64_t ld, int32_t j0, int32_t n,
                                        float scale, float *o0, float *o1, const int nc) {
    __mmask16 m[4];
    for (int c = 0; c < 4; c++) {
        int32_t r = n - j0 - 16 * c;
        m[c] = r >= 16 ? (__mmask16)0xFFFF : r <= 0 ? (__mmask16)0 : (__mmask16)((1u << r) - 1u);
    }
    __m512 a0[4], a1[4];
    for (int c = 0; c < 4; c++) a0[c] = a1[c] = _mm512_setzero_ps();
    const float *kp = kt + j0;
    if (q1) {
        for (int64_t d = 0; d < hd; d++, kp += ld) {
            __m512 x0 = _mm512_set1_ps(q0[d]), x1 = _mm512_set1_ps(q1[d]);
            for (int c = 0; c < nc; c++) {
                __m512 kv = _mm512_maskz_loadu_ps(m[c], kp + 16 * c);
                a0[c] = _mm512_fmadd_ps(x0, kv, a0[c]);
                a1[c] = _mm512_fmadd_ps(x1, kv, a1[c]);
            }
        }
    } else {
        for (int64_t d = 0; d < hd; d++, kp += ld) {
            __m512 x0 = _mm512_set1_ps(q0[d]);
            for (int c = 0; c < nc; c++)
                a0[c] = _mm512_fmadd_ps(x0, _mm512_maskz_loadu_ps(m[c], kp + 16 * c), a0[c]);
        }
    }
    const __m512 sv = _mm512_set1_ps(scale);
    for (int c = 0; c < nc; c++) {
        _mm512_mask_storeu_ps(o0 + j0 + 16 * c, m[c], _mm512_mul_ps(a0[c], sv));
        if (q1) _mm512_mask_storeu_ps(o1 + j0 + 16 * c, m[c], _mm512_mul_ps(a1[c], sv));
    }
}

static AVX512 void avx512_tscores(const float *q, int32_t nq, int64_t hd, const float *kt,
                                  int64_t ld, int32_t n, float scale, float *out,
                                  int64_t out_ld) {
    for (int32_t h = 0; h < nq; h += 2) {
        const float *q1 = h + 1 < nq ? q + (int64_t)(h + 1) * hd : NULL;
        for (int32_t j0 = 0; j0 < n; j0 += 64) {
            const float *qh = q + (int64_t)h * hd;
            float *o0 = out + (int64_t)h * out_ld, *o1 = q1 ? o0 + out_ld : NULL;
            /* the last chunk runs only the vectors it needs */
            switch (QWI_MIN(4, (n - j0 + 15) / 16)) {
            case 1: avx512_tscores_chunk(qh, q1, hd, kt, ld, j0, n, scale, o0, o1, 1); break;
            case 2: avx512_tscores_chunk(qh, q1, hd, kt, ld, j0, n, scale, o0, o1, 2); break;
            case 3: avx512_tscores_chunk(qh, q1, hd, kt, ld, j0, n, scale, o0, o1, 3); break;
            default: avx512_tscores_chunk(qh, q1, hd, kt, ld, j0, n, scale, o0, o1, 4); break;
            }
        }
    }
}

static const qwi_cpu_kv_bf16_kernels avx512_table = {
    .name = "avx512",
    .axpy = avx512_axpy,
    .axpy4 = avx512_axpy4,
    .axpy4x2 = avx512_axpy4x2,
    .tscores = avx512_tscores,
    .transpose = avx2_transpose,
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
