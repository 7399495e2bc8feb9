/*
 * logit_max.c - see logit_max.h.
 *
 * maxps returns its second operand when either is NaN, so max(x, acc)
 * with the accumulator second skips a NaN x.
 */
#include <math.h>

#include "logit_max.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define QWI_LOGIT_MAX_X86 1
#endif

static float max_scalar(const float *x, int32_t n) {
    float m = -INFINITY;
    for (int32_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;   /* NaN compares false */
    return m;
}

#ifdef QWI_LOGIT_MAX_X86
__attribute__((target("avx512f"))) static float max_avx512(const float *x, int32_t n) {
    /* four accumulators: maxps latency, not its throughput, bounds one */
    __m512 a0 = _mm512_set1_ps(-INFINITY), a1 = a0, a2 = a0, a3 = a0;
    int32_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_max_ps(_mm512_loadu_ps(x + i), a0);
        a1 = _mm512_max_ps(_mm512_loadu_ps(x + i + 16), a1);
        a2 = _mm512_max_ps(_mm512_loadu_ps(x + i + 32), a2);
        a3 = _mm512_max_ps(_mm512_loadu_ps(x + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_max_ps(_mm512_loadu_ps(x + i), a0);
    a0 = _mm512_max_ps(_mm512_max_ps(a0, a1), _mm512_max_ps(a2, a3));
    const float m = _mm512_reduce_max_ps(a0);
    const float t = max_scalar(x + i, n - i);
    return t > m ? t : m;
}

__attribute__((target("avx2"))) static float max_avx2(const float *x, int32_t n) {
    __m256 a0 = _mm256_set1_ps(-INFINITY), a1 = a0, a2 = a0, a3 = a0;
    int32_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_max_ps(_mm256_loadu_ps(x + i), a0);
        a1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_max_ps(_mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_max_ps(_mm256_loadu_ps(x + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_max_ps(_mm256_loadu_ps(x + i), a0);
    a0 = _mm256_max_ps(_mm256_max_ps(a0, a1), _mm256_max_ps(a2, a3));
    float v[8];
    _mm256_storeu_ps(v, a0);
    float m = max_scalar(v, 8);
    const float t = max_scalar(x + i, n - i);
    return t > m ? t : m;
}
#endif

static bool have_form(int form) {
#ifdef QWI_LOGIT_MAX_X86
    if (form == 2) return __builtin_cpu_supports("avx512f");
    if (form == 1) return __builtin_cpu_supports("avx2");
#endif
    return form == 0;
}

bool qwi_logit_max_by(int form, const float *x, int32_t n, float *out) {
    if (!have_form(form)) return false;
#ifdef QWI_LOGIT_MAX_X86
    if (form == 2) {
        *out = max_avx512(x, n);
        return true;
    }
    if (form == 1) {
        *out = max_avx2(x, n);
        return true;
    }
#endif
    *out = max_scalar(x, n);
    return true;
}

float qwi_logit_max(const float *x, int32_t n) {
    float m = -INFINITY;
    qwi_logit_max_by(have_form(2) ? 2 : have_form(1) ? 1 : 0, x, n, &m);
    return m;
}
