/*
 * q4i.c - the activation quantization of cpu/q4i.h and the portable
 * matmul_q4i (the generic table's; the contract written out in C, which the
 * ISA kernels of q4i_x86.c are checked against bit for bit in
 * tests/test_quant_kernels.c).
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "cpu/kernels.h"
#include "cpu/q4i.h"
#include "cpu/qpanel.h"
#include "cpu/tile_out.h"

typedef int16_t __attribute__((may_alias)) i16_alias;

/* Below this a group's largest |x| counts as 0: Q / amax would overflow f32. */
#define Q4I_AMAX_MIN 0x1p-100f

int32_t qwi_q4i_qmax(int64_t group_k, qwi_qfmt fmt) {
    const int bits = fmt == QWI_QFMT_U4 ? 4 : fmt == QWI_QFMT_U8 ? 8 : 0;
    if (group_k <= 0 || group_k % 2 != 0 || !bits) return 0;
    if (group_k > (int64_t)INT32_MAX) return 0;
    const int64_t q = (int64_t)INT32_MAX / (((int64_t)1 << bits) * group_k);
    if (q < 127) return 0;
    return (int32_t)QWI_MIN(q, (int64_t)32767);
}

/* column t of a block goes to byte POS[t] of its two words (q4i.h) */
static const int POS[8] = { 0, 2, 4, 6, 1, 3, 5, 7 };

void qwi_q4i_bytes_rows(const uint32_t *q, int64_t m0, int64_t m1, int64_t KP, uint32_t *q8) {
    const int64_t W = QWI_Q4I_Q8_WORDS(KP);
    for (int64_t m = m0; m < m1; m++) {
        const i16_alias *qr = (const i16_alias *)(q + m * KP);
        uint8_t *out = (uint8_t *)(q8 + m * W);
        memset(out, 0, (size_t)W * 4);
        for (int64_t k = 0; k < 2 * KP; k++)
            out[(k / 8) * 8 + POS[k % 8]] = (uint8_t)(int8_t)qr[k];
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* The whole 8-column blocks [0, nb) of one row of the split byte form,
 * 8 columns a step: the low bytes (v & 255) and the high ones (arithmetic
 * shift: floor(v / 256)) packed side by side, then put in the block's
 * byte order. Same bytes as the scalar loop. Runs once per batch-1 matmul
 * call on one thread, so the scalar loop's cost showed beside a short
 * step. */
__attribute__((target("ssse3"))) static void split_blocks_ssse3(const i16_alias *qr, int64_t nb,
                                                                 uint8_t *lo, uint8_t *hi) {
    const __m128i order = _mm_setr_epi8(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
    const __m128i low = _mm_set1_epi16(255);
    for (int64_t b = 0; b < nb; b++) {
        const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(qr + 8 * b));
        const __m128i bytes = _mm_shuffle_epi8(
            _mm_packus_epi16(_mm_and_si128(v, low), _mm_setzero_si128()), order);
        const __m128i high = _mm_shuffle_epi8(_mm_packs_epi16(_mm_srai_epi16(v, 8), _mm_setzero_si128()),
                                              order);
        _mm_storel_epi64((__m128i *)(void *)(lo + 8 * b), bytes);
        _mm_storel_epi64((__m128i *)(void *)(hi + 8 * b), high);
    }
}
#endif

void qwi_q4i_split_bytes_rows(const uint32_t *q, int64_t m0, int64_t m1, int64_t KP,
                              uint32_t *q8s) {
    const int64_t W = QWI_Q4I_Q8_WORDS(KP);
    for (int64_t m = m0; m < m1; m++) {
        const i16_alias *qr = (const i16_alias *)(q + m * KP);
        uint8_t *lo = (uint8_t *)(q8s + m * 2 * W), *hi = lo + W * 4;
        memset(lo, 0, (size_t)W * 8);
        int64_t k = 0;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        if (__builtin_cpu_supports("ssse3")) {
            split_blocks_ssse3(qr, 2 * KP / 8, lo, hi);
            k = 2 * KP / 8 * 8;
        }
#endif
        for (; k < 2 * KP; k++) {
            const int32_t v = qr[k], l = (int32_t)((uint32_t)v & 255u);
            lo[(k / 8) * 8 + POS[k % 8]] = (uint8_t)l;
            hi[(k / 8) * 8 + POS[k % 8]] = (uint8_t)(int8_t)((v - l) / 256);   /* floor(v / 256) */
        }
    }
}

/* Fold |x[k]| for k in [k0, k1) into *amax, and a NaN or infinity into
 * *bad (the portable scan, and the vector scan's tail). */
static inline void scan_amax(const float *x, int64_t k0, int64_t k1, float *amax, bool *bad) {
    for (int64_t k = k0; k < k1; k++) {
        const float a = fabsf(x[k]);
        if (!(a <= FLT_MAX)) *bad = true;
        else if (a > *amax) *amax = a;
    }
}

/* The step of a group with largest magnitude amax (bad: a NaN or infinity
 * was seen): d, and the multiplier inv (0: every q is 0). */
static inline void group_step(float amax, bool bad, int32_t Q, float *d, float *inv) {
    if (bad) {
        *d = NAN;
        *inv = 0.0f;
    } else if (amax < Q4I_AMAX_MIN) {
        *d = 0.0f;
        *inv = 0.0f;
    } else {
        *d = amax / (float)Q;
        *inv = (float)Q / amax;
    }
}

static inline int16_t quantize_one(float x, float inv, float Q) {
    float t = rintf(x * inv);
    t = t < -Q ? -Q : t > Q ? Q : t;
    return (int16_t)t;
}

void qwi_q4i_quantize_rows_portable(const float *x, int64_t m0, int64_t m1, int64_t K,
                                    int64_t group_k, int32_t qmax, uint32_t *q, float *d,
                                    int32_t *sum) {
    const int64_t KP = (K + 1) / 2, G = QWI_DIV_UP(K, group_k);
    const int32_t Q = qmax;
    for (int64_t m = m0; m < m1; m++) {
        const float *xr = x + m * K;
        i16_alias *qr = (i16_alias *)(q + m * KP);
        for (int64_t g = 0; g < G; g++) {
            const int64_t k0 = g * group_k, k1 = QWI_MIN(K, k0 + group_k);
            float amax = 0.0f;
            bool bad = false;
            scan_amax(xr, k0, k1, &amax, &bad);
            float inv;
            group_step(amax, bad, Q, &d[m * G + g], &inv);
            int32_t s = 0;
            for (int64_t k = k0; k < k1; k++) {
                qr[k] = inv == 0.0f ? 0 : quantize_one(xr[k], inv, (float)Q);
                s += qr[k];
            }
            sum[m * G + g] = s;
        }
        if (K % 2) qr[K] = 0;
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* The same with 8 columns a step: max, rint (round to nearest even, the
 * MXCSR default as rintf's), clamp and truncation give the same bits. */
__attribute__((target("avx2"))) static void quantize_rows_avx2(const float *x, int64_t m0,
                                                              int64_t m1, int64_t K,
                                                              int64_t group_k, int32_t qmax,
                                                              uint32_t *q, float *d,
                                                              int32_t *sum) {
    const int64_t KP = (K + 1) / 2, G = QWI_DIV_UP(K, group_k);
    const int32_t Q = qmax;
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 fmax = _mm256_set1_ps(FLT_MAX), qhi = _mm256_set1_ps((float)Q);
    const __m256 qlo = _mm256_set1_ps(-(float)Q);
    for (int64_t m = m0; m < m1; m++) {
        const float *xr = x + m * K;
        i16_alias *qr = (i16_alias *)(q + m * KP);
        for (int64_t g = 0; g < G; g++) {
            const int64_t k0 = g * group_k, k1 = QWI_MIN(K, k0 + group_k);
            __m256 vmax = _mm256_setzero_ps(), vbad = _mm256_setzero_ps();
            int64_t k = k0;
            for (; k + 8 <= k1; k += 8) {
                const __m256 a = _mm256_and_ps(_mm256_loadu_ps(xr + k), absmask);
                vbad = _mm256_or_ps(vbad, _mm256_cmp_ps(a, fmax, _CMP_NLE_UQ));
                vmax = _mm256_max_ps(vmax, a);
            }
            float lanes[8], amax = 0.0f;
            bool bad = _mm256_movemask_ps(vbad) != 0;
            _mm256_storeu_ps(lanes, vmax);
            for (int l = 0; l < 8; l++) amax = lanes[l] > amax ? lanes[l] : amax;
            scan_amax(xr, k, k1, &amax, &bad);
            float inv;
            group_step(amax, bad, Q, &d[m * G + g], &inv);
            int32_t s = 0;
            k = k0;
            if (inv != 0.0f) {
                const __m256 vinv = _mm256_set1_ps(inv);
                __m256i vs = _mm256_setzero_si256();
                for (; k + 8 <= k1; k += 8) {
                    __m256 t = _mm256_mul_ps(_mm256_loadu_ps(xr + k), vinv);
                    t = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                    t = _mm256_min_ps(_mm256_max_ps(t, qlo), qhi);
                    const __m256i i = _mm256_cvttps_epi32(t);
                    vs = _mm256_add_epi32(vs, i);
                    const __m128i p = _mm_packs_epi32(_mm256_castsi256_si128(i),
                                                      _mm256_extracti128_si256(i, 1));
                    _mm_storeu_si128((__m128i *)(void *)(qr + k), p);
                }
                int32_t sl[8];
                _mm256_storeu_si256((__m256i *)(void *)sl, vs);
                for (int l = 0; l < 8; l++) s += sl[l];
            }
            for (; k < k1; k++) {
                qr[k] = inv == 0.0f ? 0 : quantize_one(xr[k], inv, (float)Q);
                s += qr[k];
            }
            sum[m * G + g] = s;
        }
        if (K % 2) qr[K] = 0;
    }
}
#endif

void qwi_q4i_quantize_rows(const float *x, int64_t m0, int64_t m1, int64_t K, int64_t group_k,
                           int32_t qmax, uint32_t *q, float *d, int32_t *sum) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (__builtin_cpu_supports("avx2")) {
        quantize_rows_avx2(x, m0, m1, K, group_k, qmax, q, d, sum);
        return;
    }
#endif
    qwi_q4i_quantize_rows_portable(x, m0, m1, K, group_k, qmax, q, d, sum);
}

/* ---- the portable kernel ------------------------------------------------ */

void qwr_matmul_q4i(const qwi_q4act *x, int64_t M, const qwi_qpanel *w, int64_t n0, int64_t N,
                    const float *bias, float *out, int64_t ldo, int accumulate) {
    const int64_t G = w->ngroups, gk = w->group_k, KP = x->KP;
    const int cmask = w->fmt == QWI_QFMT_U4 ? 0xf : 0xff;
    for (int64_t j0 = 0; j0 < N; j0 += 16) {
        const int64_t p = (n0 + j0) / 16;
        for (int64_t m = 0; m < M; m++) {
            const i16_alias *qr = (const i16_alias *)(x->q + m * KP);
            float tot[16] = { 0 };
            for (int64_t g = 0; g < G; g++) {
                const int64_t ks = g * gk, ke = QWI_MIN(2 * KP, ks + gk);
                /* int64: the contract's sums fit int32, so this is the same value */
                int64_t acc[16] = { 0 };
                for (int64_t k = ks; k < ke; k++)
                    for (int s = 0; s < 16; s++) {
                        int64_t byte;
                        int shift;
                        qwi_qpanel_code_pos(w, p, k, s, &byte, &shift);
                        acc[s] += (int64_t)((w->codes[byte] >> shift) & cmask) * qr[k];
                    }
                const int64_t e0 = (p * G + g) * 16;
                const float dg = x->d[m * x->G + g];
                const int64_t sg = x->sum[m * x->G + g];
                for (int s = 0; s < 16; s++) {
                    const int32_t i = (int32_t)(acc[s] - (int64_t)qwi_qpanel_zero(w, e0 + s) * sg);
                    tot[s] = fmaf((float)i, qwi_qpanel_scale(w, e0 + s) * dg, tot[s]);
                }
            }
            qwi_put16(tot, j0, N, bias, out + m * ldo, accumulate);
        }
    }
}
