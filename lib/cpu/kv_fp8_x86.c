/*
 * kv_fp8_x86.c - the AVX2+FMA+F16C and AVX-512F fp8-KV attention kernels
 * (see kv_fp8.h for their contracts). Functions carry
 * __attribute__((target)) and a table is only handed out after CPUID says
 * its instructions exist.
 *
 * The widen (e8, e16) is exact (cpu/e4m3_x86.h says how), so every table
 * reads the same floats.
 *
 * pv keeps the accumulators of up to 8 (AVX-512; AVX2 4) outputs in
 * registers over the positions, each V vector widened once for all of
 * them, one FMA chain per output over the positions in order.
 */
#include <math.h>
#include <string.h>

#include "cpu/kv_fp8.h"
#include "fp8.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define UNROLL _Pragma("GCC unroll 8")

#include "cpu/e4m3_x86.h"

#include "cpu/e4m3_x86.h"

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma,f16c")))
#define AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))
#define AVX512_INLINE static inline __attribute__((always_inline, target("avx512f,avx2,fma,f16c")))

/* ---- AVX2: 8 lanes ------------------------------------------------------ */

/* Scalar FMA chains for elements [e0, hd) of every accumulator: pv's hd %
 * 8 (or % 16) tail, positions in order per element as the vector part. */
static inline __attribute__((target("fma"))) void pv_tail(float *const *o,
                                                          const float *const *p, int32_t nq,
                                                          const uint8_t *const *v, int32_t n,
                                                          int64_t e0, int64_t hd) {
    for (int32_t i = 0; i < nq; i++)
        for (int64_t e = e0; e < hd; e++) {
            float acc = o[i][e];
            for (int32_t j = 0; j < n; j++)
                acc = __builtin_fmaf(p[i][j], qwi_e4m3_to_f32(v[j][e]), acc);
            o[i][e] = acc;
        }
}

/* Accumulators o[0..QB) elements [e0, e0 + 8*HC), in registers over
 * positions 0..n-1 (QB, HC constants once inlined; QB*HC <= 8). */
AVX2_INLINE void avx2_pv_blk(float *const *o, const float *const *p, const int QB,
                             const uint8_t *const *v, int32_t n, int64_t e0, const int HC) {
    __m256 acc[4][4];
    UNROLL
    for (int i = 0; i < QB; i++)
        UNROLL
        for (int c = 0; c < HC; c++) acc[i][c] = _mm256_loadu_ps(o[i] + e0 + 8 * c);
    for (int32_t j = 0; j < n; j++) {
        __m256 vv[4];
        UNROLL
        for (int c = 0; c < HC; c++) vv[c] = e8(v[j] + e0 + 8 * c);
        UNROLL
        for (int i = 0; i < QB; i++) {
            const __m256 x = _mm256_broadcast_ss(p[i] + j);
            UNROLL
            for (int c = 0; c < HC; c++) acc[i][c] = _mm256_fmadd_ps(x, vv[c], acc[i][c]);
        }
    }
    UNROLL
    for (int i = 0; i < QB; i++)
        UNROLL
        for (int c = 0; c < HC; c++) _mm256_storeu_ps(o[i] + e0 + 8 * c, acc[i][c]);
}

AVX2_INLINE void avx2_pv_rows(float *const *o, const float *const *p, const int QB,
                              const uint8_t *const *v, int32_t n, int64_t hd, const int HC) {
    int64_t e = 0;
    for (; e + 8 * HC <= hd; e += 8 * HC) avx2_pv_blk(o, p, QB, v, n, e, HC);
    for (; e + 8 <= hd; e += 8) avx2_pv_blk(o, p, QB, v, n, e, 1);
    if (e < hd) pv_tail(o, p, QB, v, n, e, hd);
}

static AVX2 void avx2_pv(float *const *o, const float *const *p, int32_t nq,
                         const uint8_t *const *v, int32_t n, int64_t hd) {
    int32_t i = 0;
    for (; i + 4 <= nq; i += 4) avx2_pv_rows(o + i, p + i, 4, v, n, hd, 2);
    for (; i + 2 <= nq; i += 2) avx2_pv_rows(o + i, p + i, 2, v, n, hd, 4);
    for (; i < nq; i++) avx2_pv_rows(o + i, p + i, 1, v, n, hd, 4);
}

/* Rows j .. j+7 (k[j+i] + d0, 8 bytes each) to kt[(d0+i)*ld + j ..], 8x8. */
AVX2_INLINE void tr8x8(const uint8_t *const *k, int32_t j, int64_t d0, float *kt, int64_t ld) {
    __m256 r[8], t[8], u[8];
    for (int i = 0; i < 8; i++) r[i] = e8(k[j + i] + d0);
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

/* Positions [j, j + len) lie consecutively in one K plane (k[j + i] ==
 * k[j] + i): per dim, one contiguous widening copy. */
AVX2_INLINE void plane_run(const uint8_t *k0, int32_t len, int64_t hd, int64_t dstride, float *kt,
                           int64_t ld) {
    for (int64_t d = 0; d < hd; d++) {
        const uint8_t *src = k0 + d * dstride;
        float *dst = kt + d * ld;
        int32_t i = 0;
        for (; i + 8 <= len; i += 8) _mm256_storeu_ps(dst + i, e8(src + i));
        for (; i < len; i++) dst[i] = qwi_e4m3_to_f32(src[i]);
    }
}

static AVX2 void avx2_transpose(const uint8_t *const *k, int32_t n, int64_t hd, int64_t dstride,
                                float *kt, int64_t ld) {
    if (dstride != 1) {
        for (int32_t j = 0; j < n;) {
            int32_t len = 1;
            while (j + len < n && k[j + len] == k[j] + len) len++;
            plane_run(k[j], len, hd, dstride, kt + j, ld);
            j += len;
        }
        return;
    }
    const int64_t hd8 = hd & ~(int64_t)7;
    int32_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int64_t d = 0; d < hd8; d += 8) tr8x8(k, j, d, kt, ld);
    if (j < n) qwi_cpu_kv_fp8_transpose(k + j, n - j, hd, 1, kt + j, ld);
    for (int32_t jj = 0; jj < j && hd8 < hd; jj++)   /* the last hd % 8 columns */
        for (int64_t d = hd8; d < hd; d++) kt[d * ld + jj] = qwi_e4m3_to_f32(k[jj][d]);
}

static const qwi_cpu_kv_fp8_kernels avx2_table = {
    .name = "avx2",
    .transpose = avx2_transpose,
    .pv = avx2_pv,
};

const qwi_cpu_kv_fp8_kernels *qwi_cpu_kv_fp8_avx2(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
        !__builtin_cpu_supports("f16c"))
        return NULL;
    return &avx2_table;
}

/* ---- AVX-512F: 16 lanes ------------------------------------------------- */

AVX512_INLINE void avx512_pv_blk(float *const *o, const float *const *p, const int QB,
                                 const uint8_t *const *v, int32_t n, int64_t e0, const int HC) {
    __m512 acc[8][8];
    UNROLL
    for (int i = 0; i < QB; i++)
        UNROLL
        for (int c = 0; c < HC; c++) acc[i][c] = _mm512_loadu_ps(o[i] + e0 + 16 * c);
    for (int32_t j = 0; j < n; j++) {
        __m512 vv[8];
        UNROLL
        for (int c = 0; c < HC; c++) vv[c] = e16(v[j] + e0 + 16 * c);
        UNROLL
        for (int i = 0; i < QB; i++) {
            const __m512 x = _mm512_set1_ps(p[i][j]);
            UNROLL
            for (int c = 0; c < HC; c++) acc[i][c] = _mm512_fmadd_ps(x, vv[c], acc[i][c]);
        }
    }
    UNROLL
    for (int i = 0; i < QB; i++)
        UNROLL
        for (int c = 0; c < HC; c++) _mm512_storeu_ps(o[i] + e0 + 16 * c, acc[i][c]);
}

AVX512_INLINE void avx512_pv_rows(float *const *o, const float *const *p, const int QB,
                                  const uint8_t *const *v, int32_t n, int64_t hd,
                                  const int HC) {
    int64_t e = 0;
    for (; e + 16 * HC <= hd; e += 16 * HC) avx512_pv_blk(o, p, QB, v, n, e, HC);
    for (; e + 16 <= hd; e += 16) avx512_pv_blk(o, p, QB, v, n, e, 1);
    if (e < hd) pv_tail(o, p, QB, v, n, e, hd);
}

static AVX512 void avx512_pv(float *const *o, const float *const *p, int32_t nq,
                             const uint8_t *const *v, int32_t n, int64_t hd) {
    int32_t i = 0;
    if (nq >= 8) {
        /* column blocks outer, groups of 8 accumulators inner: a block's V
         * columns (n x 32 bytes) stay in L1 for every group */
        const int32_t n8 = nq & ~7;
        int64_t e = 0;
        for (; e + 32 <= hd; e += 32)
            for (int32_t b = 0; b < n8; b += 8) avx512_pv_blk(o + b, p + b, 8, v, n, e, 2);
        for (; e + 16 <= hd; e += 16)
            for (int32_t b = 0; b < n8; b += 8) avx512_pv_blk(o + b, p + b, 8, v, n, e, 1);
        if (e < hd) pv_tail(o, p, n8, v, n, e, hd);
        i = n8;
    }
    for (; i + 4 <= nq; i += 4) avx512_pv_rows(o + i, p + i, 4, v, n, hd, 4);
    for (; i + 2 <= nq; i += 2) avx512_pv_rows(o + i, p + i, 2, v, n, hd, 8);
    for (; i < nq; i++) avx512_pv_rows(o + i, p + i, 1, v, n, hd, 8);
}

static const qwi_cpu_kv_fp8_kernels avx512_table = {
    .name = "avx512",
    .transpose = avx2_transpose,
    .pv = avx512_pv,
};

const qwi_cpu_kv_fp8_kernels *qwi_cpu_kv_fp8_avx512(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx2") ||
        !__builtin_cpu_supports("fma") || !__builtin_cpu_supports("f16c"))
        return NULL;
    return &avx512_table;
}

#else

const qwi_cpu_kv_fp8_kernels *qwi_cpu_kv_fp8_avx2(void) { return NULL; }
const qwi_cpu_kv_fp8_kernels *qwi_cpu_kv_fp8_avx512(void) { return NULL; }

#endif
