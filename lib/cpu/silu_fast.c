/*
 * silu_fast.c - see silu_fast.h.
 *
 * Per chunk: e = exp(-gate) by the table's vexp, then gate / (1 + e) * up.
 * The second step is IEEE add, divide and multiply, exactly rounded, so its
 * vector forms (picked with the table: the AVX-512 or AVX2 one goes with
 * the table of the same ISA) give the scalar loop's bits.
 */
#include "cpu/silu_fast.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define QWI_SILU_X86 1
#endif

/* Elements per vexp call: a stack buffer that stays in L1. */
#define CHUNK 256

static void div_mul(const float *g, const float *e, const float *up, int64_t m, float *out) {
    for (int64_t i = 0; i < m; i++) out[i] = g[i] / (1.0f + e[i]) * up[i];
}

#ifdef QWI_SILU_X86
__attribute__((target("avx512f"))) static void div_mul_avx512(const float *g, const float *e,
                                                              const float *up, int64_t m,
                                                              float *out) {
    const __m512 one = _mm512_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 16 <= m; i += 16) {
        const __m512 d = _mm512_add_ps(one, _mm512_loadu_ps(e + i));
        _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_div_ps(_mm512_loadu_ps(g + i), d),
                                                _mm512_loadu_ps(up + i)));
    }
    div_mul(g + i, e + i, up + i, m - i, out + i);
}

__attribute__((target("avx2"))) static void div_mul_avx2(const float *g, const float *e,
                                                         const float *up, int64_t m,
                                                         float *out) {
    const __m256 one = _mm256_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 8 <= m; i += 8) {
        const __m256 d = _mm256_add_ps(one, _mm256_loadu_ps(e + i));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(_mm256_loadu_ps(g + i), d),
                                                _mm256_loadu_ps(up + i)));
    }
    div_mul(g + i, e + i, up + i, m - i, out + i);
}
#endif

void qwi_cpu_silu_mul_fast(const qwi_cpu_kv_bf16_kernels *kb, const float *gate, const float *up,
                           int64_t n, float *out) {
    void (*dm)(const float *, const float *, const float *, int64_t, float *) = div_mul;
#ifdef QWI_SILU_X86
    /* a table is only handed out where CPUID has its ISA */
    if (kb == qwi_cpu_kv_bf16_avx512() || kb == qwi_cpu_kv_bf16_avx512bf16()) dm = div_mul_avx512;
    else if (kb == qwi_cpu_kv_bf16_avx2()) dm = div_mul_avx2;
#endif
    float e[CHUNK];
    for (int64_t i0 = 0; i0 < n; i0 += CHUNK) {
        const int64_t m = QWI_MIN((int64_t)CHUNK, n - i0);
        for (int64_t i = 0; i < m; i++) e[i] = -gate[i0 + i];
        kb->vexp(e, e, m);
        /* element i reads gate[i] and up[i] before writing out[i]: out may
         * alias gate or up */
        dm(gate + i0, e, up + i0, m, out + i0);
    }
}
