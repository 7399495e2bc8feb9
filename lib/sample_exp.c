/*
 * sample_exp.c - see sample_exp.h.
 *
 * s = k ln2 + r: k = round(s / ln2) by the shifter trick (adding 1.5 * 2^52
 * in one fma rounds to an integer held in the low bits), r by two fmas
 * against ln2 split in a high and a low part (Cody-Waite), so |r| <=
 * ln2/2 + tiny. exp(r) = sum r^j / j! for j <= 13: the first term left out
 * is below 2^-60 of the result. Then 2^k: k is in [-1077, 0] after the
 * clamp, which 2^k alone cannot always represent (subnormal results), so
 * the polynomial is scaled by 2^(k+512) (exact) and then by 2^-512 (exact
 * for a normal result, one rounding for a subnormal one).
 *
 * Every form runs exactly this sequence of correctly rounded operations, so
 * their bits agree; the vector forms differ only in how many lanes.
 */
#include <math.h>
#include <string.h>

#include "sample_exp.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define QWI_SAMPLE_EXP_X86 1
#endif

#define LOG2E 0x1.71547652b82fep0
#define SHIFT 0x1.8p52
#define LN2_HI 0x1.62e42fefa39efp-1
#define LN2_LO 0x1.abc9e3b39803fp-56
/* below this every result is 0 (exp(-745.14) is half the least subnormal);
 * it also keeps k + 1535 a valid biased exponent */
#define S_MIN (-746.0)
#define TWO_M512 0x1p-512

/* 1/j!, j = 0..13, each rounded once by the compiler */
#define C0 1.0
#define C1 1.0
#define C2 (1.0 / 2.0)
#define C3 (1.0 / 6.0)
#define C4 (1.0 / 24.0)
#define C5 (1.0 / 120.0)
#define C6 (1.0 / 720.0)
#define C7 (1.0 / 5040.0)
#define C8 (1.0 / 40320.0)
#define C9 (1.0 / 362880.0)
#define C10 (1.0 / 3628800.0)
#define C11 (1.0 / 39916800.0)
#define C12 (1.0 / 479001600.0)
#define C13 (1.0 / 6227020800.0)

static uint64_t bits_of(double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}

double qwi_sample_exp(double s) {
    if (!(s >= S_MIN)) return 0.0;   /* NaN, -inf and the underflow range */
    const double t = fma(s, LOG2E, SHIFT);
    const double k = t - SHIFT;
    double r = fma(-k, LN2_HI, s);
    r = fma(-k, LN2_LO, r);
    double p = C13;
    p = fma(p, r, C12);
    p = fma(p, r, C11);
    p = fma(p, r, C10);
    p = fma(p, r, C9);
    p = fma(p, r, C8);
    p = fma(p, r, C7);
    p = fma(p, r, C6);
    p = fma(p, r, C5);
    p = fma(p, r, C4);
    p = fma(p, r, C3);
    p = fma(p, r, C2);
    p = fma(p, r, C1);
    p = fma(p, r, C0);
    /* t's bits are SHIFT's plus k: 2^(k+512) has biased exponent k + 1535 */
    const uint64_t pb = (bits_of(t) - bits_of(SHIFT) + 1535u) << 52;
    double pw;
    memcpy(&pw, &pb, 8);
    return (p * pw) * TWO_M512;
}

static inline double weight1(float x, double m, double temp) {
    if ((double)x == m) return 1.0;
    return qwi_sample_exp(((double)x - m) / temp);
}

static void weights_scalar(const float *x, int32_t n, double m, double temp, double *out) {
    for (int32_t i = 0; i < n; i++) out[i] = weight1(x[i], m, temp);
}

#ifdef QWI_SAMPLE_EXP_X86
#define HORNER(FMA, SET1, p, r)                                        \
    do {                                                               \
        p = FMA(p, r, SET1(C12));                                      \
        p = FMA(p, r, SET1(C11));                                      \
        p = FMA(p, r, SET1(C10));                                      \
        p = FMA(p, r, SET1(C9));                                       \
        p = FMA(p, r, SET1(C8));                                       \
        p = FMA(p, r, SET1(C7));                                       \
        p = FMA(p, r, SET1(C6));                                       \
        p = FMA(p, r, SET1(C5));                                       \
        p = FMA(p, r, SET1(C4));                                       \
        p = FMA(p, r, SET1(C3));                                       \
        p = FMA(p, r, SET1(C2));                                       \
        p = FMA(p, r, SET1(C1));                                       \
        p = FMA(p, r, SET1(C0));                                       \
    } while (0)

__attribute__((target("avx512f"))) static void weights_avx512(const float *x, int32_t n, double m,
                                                              double temp, double *out) {
    const __m512d vm = _mm512_set1_pd(m), vt = _mm512_set1_pd(temp);
    const __m512d lim = _mm512_set1_pd(S_MIN), one = _mm512_set1_pd(1.0);
    const __m512d shift = _mm512_set1_pd(SHIFT), log2e = _mm512_set1_pd(LOG2E);
    const __m512d ln2hi = _mm512_set1_pd(LN2_HI), ln2lo = _mm512_set1_pd(LN2_LO);
    const __m512d two_m512 = _mm512_set1_pd(TWO_M512);
    const __m512i shift_bits = _mm512_set1_epi64((long long)bits_of(SHIFT));
    const __m512i bias = _mm512_set1_epi64(1535);
    /* dividing by 1 returns its operand exactly, so at temperature 1 (the
     * OpenAI default) the division - the slowest operation of the loop -
     * can go without changing a bit */
    const int unit = temp == 1.0;
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m512d xd = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
        const __mmask8 eq = _mm512_cmp_pd_mask(xd, vm, _CMP_EQ_OQ);
        __m512d s = _mm512_sub_pd(xd, vm);
        if (!unit) s = _mm512_div_pd(s, vt);
        const __mmask8 ok = _mm512_cmp_pd_mask(s, lim, _CMP_GE_OQ);
        s = _mm512_maskz_mov_pd(ok, s);
        const __m512d t = _mm512_fmadd_pd(s, log2e, shift);
        const __m512d k = _mm512_sub_pd(t, shift);
        __m512d r = _mm512_fnmadd_pd(k, ln2hi, s);
        r = _mm512_fnmadd_pd(k, ln2lo, r);
        __m512d p = _mm512_set1_pd(C13);
        HORNER(_mm512_fmadd_pd, _mm512_set1_pd, p, r);
        const __m512i pb = _mm512_slli_epi64(
            _mm512_add_epi64(_mm512_sub_epi64(_mm512_castpd_si512(t), shift_bits), bias), 52);
        __m512d y = _mm512_mul_pd(_mm512_mul_pd(p, _mm512_castsi512_pd(pb)), two_m512);
        y = _mm512_maskz_mov_pd(ok, y);
        y = _mm512_mask_mov_pd(y, eq, one);
        _mm512_storeu_pd(out + i, y);
    }
    weights_scalar(x + i, n - i, m, temp, out + i);
}

__attribute__((target("avx2,fma"))) static void weights_avx2(const float *x, int32_t n, double m,
                                                             double temp, double *out) {
    const __m256d vm = _mm256_set1_pd(m), vt = _mm256_set1_pd(temp);
    const __m256d lim = _mm256_set1_pd(S_MIN), one = _mm256_set1_pd(1.0);
    const __m256d shift = _mm256_set1_pd(SHIFT), log2e = _mm256_set1_pd(LOG2E);
    const __m256d ln2hi = _mm256_set1_pd(LN2_HI), ln2lo = _mm256_set1_pd(LN2_LO);
    const __m256d two_m512 = _mm256_set1_pd(TWO_M512);
    const __m256i shift_bits = _mm256_set1_epi64x((long long)bits_of(SHIFT));
    const __m256i bias = _mm256_set1_epi64x(1535);
    const int unit = temp == 1.0;   /* as in weights_avx512 */
    int32_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const __m256d xd = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
        const __m256d eq = _mm256_cmp_pd(xd, vm, _CMP_EQ_OQ);
        __m256d s = _mm256_sub_pd(xd, vm);
        if (!unit) s = _mm256_div_pd(s, vt);
        const __m256d ok = _mm256_cmp_pd(s, lim, _CMP_GE_OQ);
        s = _mm256_and_pd(ok, s);
        const __m256d t = _mm256_fmadd_pd(s, log2e, shift);
        const __m256d k = _mm256_sub_pd(t, shift);
        __m256d r = _mm256_fnmadd_pd(k, ln2hi, s);
        r = _mm256_fnmadd_pd(k, ln2lo, r);
        __m256d p = _mm256_set1_pd(C13);
        HORNER(_mm256_fmadd_pd, _mm256_set1_pd, p, r);
        const __m256i pb = _mm256_slli_epi64(
            _mm256_add_epi64(_mm256_sub_epi64(_mm256_castpd_si256(t), shift_bits), bias), 52);
        __m256d y = _mm256_mul_pd(_mm256_mul_pd(p, _mm256_castsi256_pd(pb)), two_m512);
        y = _mm256_and_pd(ok, y);
        y = _mm256_blendv_pd(y, one, eq);
        _mm256_storeu_pd(out + i, y);
    }
    weights_scalar(x + i, n - i, m, temp, out + i);
}
#endif

static bool have_form(int form) {
#ifdef QWI_SAMPLE_EXP_X86
    if (form == 2) return __builtin_cpu_supports("avx512f");
    if (form == 1) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    return form == 0;
}

bool qwi_sample_weights_by(int form, const float *x, int32_t n, double m, double temp,
                           double *out) {
    if (!have_form(form)) return false;
#ifdef QWI_SAMPLE_EXP_X86
    if (form == 2) {
        weights_avx512(x, n, m, temp, out);
        return true;
    }
    if (form == 1) {
        weights_avx2(x, n, m, temp, out);
        return true;
    }
#endif
    weights_scalar(x, n, m, temp, out);
    return true;
}

void qwi_sample_weights(const float *x, int32_t n, double m, double temp, double *out) {
    const int form = have_form(2) ? 2 : have_form(1) ? 1 : 0;
    qwi_sample_weights_by(form, x, n, m, temp, out);
}
