/*
 * test_silu_fast.c - fast numerics' SiLU(gate) * up (cpu/silu_fast.h) in
 * every bf16-KV kernel table: against float64 within a few float
 * roundings plus the exp's bound, over ordinary and extreme gates (the
 * exp clamps at both ends), lengths that are not a multiple of the
 * internal chunk or of a vector, and out aliasing gate or up.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kv_bf16.h"
#include "cpu/silu_fast.h"

static const qwi_cpu_kv_bf16_kernels *table(const char *name) {
    if (strcmp(name, "generic") == 0) return qwi_cpu_kv_bf16_generic();
    if (strcmp(name, "avx2") == 0) return qwi_cpu_kv_bf16_avx2();
    if (strcmp(name, "avx512bf16") == 0) return qwi_cpu_kv_bf16_avx512bf16();
    return qwi_cpu_kv_bf16_avx512();
}

static uint64_t rng = 0xb7e151628aed2a6bull;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void silu_case(const char *name) {
    const qwi_cpu_kv_bf16_kernels *kb = table(name);
    if (!kb) {
        cr_log_warn("kv bf16 table %s not available on this CPU: skipped", name);
        return;
    }
    enum { N = 1000 };   /* three full 256-element chunks and a 232 tail */
    const float extremes[] = { 0.0f, -0.0f, 100.0f, -100.0f, 88.5f, -88.5f, 87.0f, -87.0f,
                               1e-20f, -1e-20f, 30.0f, -30.0f };
    static float g[N], u[N], out[N], g2[N], u2[N];
    for (int i = 0; i < N; i++) {
        g[i] = i < (int)(sizeof extremes / sizeof extremes[0]) ? extremes[i] : 12.0f * frand();
        u[i] = frand();
    }
    for (int64_t n = 1; n <= N; n = n < 40 ? n + 13 : n * 3) {
        const int64_t len = n > N ? N : n;
        for (int i = 0; i < N; i++) out[i] = -5.0f;
        qwi_cpu_silu_mul_fast(kb, g, u, len, out);
        for (int64_t i = 0; i < N; i++) {
            if (i >= len) {
                cr_assert_eq(out[i], -5.0f, "%s n=%lld: out[%lld] written", name, (long long)len,
                             (long long)i);
                continue;
            }
            const double want = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
            /* exp's bound plus the add, divide and multiply roundings; an
             * absolute floor for the underflowing tail (gate << 0) */
            const double tol = fabs(want) * (QWI_VEXP_MAX_REL_ERR + 4 * 1.2e-7) + 1e-30;
            cr_assert_leq(fabs(out[i] - want), tol, "%s: silu(%g) * %g = %g, float64 %g", name,
                          g[i], u[i], out[i], want);
        }
        if (len == N) break;
    }
    /* out aliasing gate, then up: the same bits as separate buffers */
    qwi_cpu_silu_mul_fast(kb, g, u, N, out);
    memcpy(g2, g, sizeof g);
    memcpy(u2, u, sizeof u);
    qwi_cpu_silu_mul_fast(kb, g2, u, N, g2);
    qwi_cpu_silu_mul_fast(kb, g, u2, N, u2);
    cr_assert(memcmp(g2, out, sizeof out) == 0, "%s: out aliasing gate differs", name);
    cr_assert(memcmp(u2, out, sizeof out) == 0, "%s: out aliasing up differs", name);
}

Test(silu_fast, generic) { silu_case("generic"); }
Test(silu_fast, avx2) { silu_case("avx2"); }
Test(silu_fast, avx512) { silu_case("avx512"); }
Test(silu_fast, avx512bf16) { silu_case("avx512bf16"); }
