/*
 * test_vexp.c - the exp of the fast-mode softmax (kv_bf16.h's exp
 * contract) in every bf16-KV kernel table: relative error against float64
 * exp within QWI_VEXP_MAX_REL_ERR over a dense sample of [-87.3, 88], the
 * documented behaviour outside it (0 below, exp(88) above, NaN kept),
 * vector tails that touch nothing past n, and exp_sum (the softmax tile
 * step) against a scalar reference: its max, its exps bit for bit the
 * table's vexp of s - max, its sum within rounding and independent of
 * what lies past n.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kv_bf16.h"

static const qwi_cpu_kv_bf16_kernels *table(const char *name) {
    if (strcmp(name, "generic") == 0) return qwi_cpu_kv_bf16_generic();
    if (strcmp(name, "avx2") == 0) return qwi_cpu_kv_bf16_avx2();
    return qwi_cpu_kv_bf16_avx512();
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Every STEP-th float of [lo_bits .. 0] on one side of zero, in batches. */
static double worst_rel_err(const qwi_cpu_kv_bf16_kernels *kb, uint32_t sign, uint32_t lim,
                            float *worst_x) {
    enum { B = 1000, STEP = 211 };
    static float x[B], y[B];
    double worst = 0;
    for (uint64_t u0 = 0; u0 <= lim;) {
        int n = 0;
        for (; n < B && u0 <= lim; n++, u0 += STEP) x[n] = from_bits((uint32_t)u0 | sign);
        kb->vexp(x, y, n);
        for (int i = 0; i < n; i++) {
            const double r = exp((double)x[i]), e = fabs((double)y[i] - r) / r;
            if (e > worst) {
                worst = e;
                *worst_x = x[i];
            }
        }
    }
    return worst;
}

static void accuracy(const char *name) {
    const qwi_cpu_kv_bf16_kernels *kb = table(name);
    if (!kb) {
        cr_log_warn("kv bf16 table %s not available on this CPU: skipped", name);
        return;
    }
    float wx = 0, wx2 = 0;
    const double neg = worst_rel_err(kb, 0x80000000u, bits(-QWI_VEXP_LO), &wx);
    const double pos = worst_rel_err(kb, 0, bits(QWI_VEXP_HI), &wx2);
    cr_log_info("%s vexp: max rel err %.3g (x=%a) below 0, %.3g (x=%a) above", name, neg, wx,
                pos, wx2);
    cr_assert_leq(neg, QWI_VEXP_MAX_REL_ERR, "%s: rel err %g at %a", name, neg, wx);
    cr_assert_leq(pos, QWI_VEXP_MAX_REL_ERR, "%s: rel err %g at %a", name, pos, wx2);
    cr_assert_gt(neg + pos, 0.0, "%s: a polynomial exp is not exact everywhere", name);
}

Test(vexp, accuracy_generic) { accuracy("generic"); }
Test(vexp, accuracy_avx2) { accuracy("avx2"); }
Test(vexp, accuracy_avx512) { accuracy("avx512"); }

/* Outside the range, specials, and tails (n not a multiple of the vector
 * width, in place) that leave y[n..] untouched. */
static void specials(const char *name) {
    const qwi_cpu_kv_bf16_kernels *kb = table(name);
    if (!kb) return;
    const float in[] = { 0.0f, -0.0f, 1.0f, -1.0f, QWI_VEXP_LO, -87.31f, -100.0f, -INFINITY,
                         QWI_VEXP_HI, 88.5f, INFINITY, NAN, 1e-30f, -1e-30f, 0.5f, -0.5f,
                         10.0f, -10.0f, 3.0f };
    enum { N = sizeof in / sizeof in[0] };
    float y[N + 5];
    for (int n = 0; n <= N; n++) {
        for (int i = 0; i < N + 5; i++) y[i] = -3.0f;
        kb->vexp(in, y, n);
        for (int i = 0; i < N + 5; i++) {
            if (i >= n) {
                cr_assert_eq(bits(y[i]), bits(-3.0f), "%s n=%d: y[%d] written", name, n, i);
                continue;
            }
            const float x = in[i];
            if (isnan(x)) cr_assert(isnan(y[i]), "%s: exp(NaN) = %g", name, y[i]);
            else if (x < QWI_VEXP_LO) cr_assert_eq(bits(y[i]), 0u, "%s: exp(%g) = %a, want +0", name, x, y[i]);
            else {
                const double r = exp((double)fminf(x, QWI_VEXP_HI));
                cr_assert_leq(fabs(y[i] - r) / r, QWI_VEXP_MAX_REL_ERR, "%s: exp(%g) = %a", name, x, y[i]);
            }
        }
        cr_assert_eq(y[0], n ? 1.0f : -3.0f, "%s: exp(0) is exactly 1", name);
    }
    /* in place */
    float z[N];
    memcpy(z, in, sizeof z);
    kb->vexp(z, z, N);
    kb->vexp(in, y, N);
    for (int i = 0; i < N; i++)
        cr_assert(bits(z[i]) == bits(y[i]) || (isnan(z[i]) && isnan(y[i])), "%s: in place %d", name, i);
}

Test(vexp, specials_all_tables) {
    specials("generic");
    specials("avx2");
    specials("avx512");
}

Test(vexp, generic_is_the_scalar_form) {
    const qwi_cpu_kv_bf16_kernels *kb = qwi_cpu_kv_bf16_generic();
    for (float x = -90.0f; x < 90.0f; x += 0.37f) {
        float y;
        kb->vexp(&x, &y, 1);
        cr_assert_eq(bits(y), bits(qwi_cpu_vexp_scalar(x)), "x=%g", x);
    }
}

static uint64_t rng = 0x243f6a8885a308d3ull;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* exp_sum: m' = max(m, s), s = vexp(s - m') bit for bit, the sum within
 * n * 2^-23 relative of float64, the same bits whatever lies past n, and
 * nothing past n written. */
static void exp_sum_case(const char *name) {
    const qwi_cpu_kv_bf16_kernels *kb = table(name);
    if (!kb) {
        cr_log_warn("kv bf16 table %s not available on this CPU: skipped", name);
        return;
    }
    enum { LD = 136 };
    const int32_t ns[] = { 1, 2, 7, 8, 9, 15, 16, 17, 31, 64, 100, 128, 130 };
    for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++) {
        const int32_t n = ns[c];
        for (int run = 0; run < 3; run++) {
            float s[LD], s2[LD], want[LD], d[LD];
            for (int i = 0; i < LD; i++) s[i] = 12.0f * frand();
            memcpy(s2, s, sizeof s);
            for (int i = n; i < LD; i++) s2[i] = 1000.0f * frand();   /* other junk past n */
            /* run 0: the running max is above every score; 1: below; 2: -inf */
            const float m0 = run == 0 ? 20.0f : run == 1 ? -20.0f : -INFINITY;
            float mref = m0;
            for (int i = 0; i < n; i++) mref = fmaxf(mref, s[i]);
            for (int i = 0; i < n; i++) d[i] = s[i] - mref;
            kb->vexp(d, want, n);
            double ref = 0;
            for (int i = 0; i < n; i++) ref += exp((double)d[i]);   /* the rounded s - m */
            float m = m0, m2 = m0;
            const float l = kb->exp_sum(s, n, &m), l2 = kb->exp_sum(s2, n, &m2);
            cr_assert_eq(bits(m), bits(mref), "%s n=%d: max %g, want %g", name, n, m, mref);
            for (int i = 0; i < n; i++)
                cr_assert_eq(bits(s[i]), bits(want[i]), "%s n=%d: s[%d] %a, vexp %a", name, n, i,
                             s[i], want[i]);
            cr_assert_eq(bits(l), bits(l2), "%s n=%d: the sum depends on lanes past n", name, n);
            cr_assert_leq(fabs(l - ref), ref * (n * 1.2e-7 + QWI_VEXP_MAX_REL_ERR),
                          "%s n=%d: sum %g, float64 %g", name, n, l, ref);
        }
        /* lanes past n stay as they were */
        float t[LD];
        for (int i = 0; i < LD; i++) t[i] = (float)i;
        float m = -INFINITY;
        kb->exp_sum(t, n, &m);
        for (int i = n; i < LD; i++) cr_assert_eq(t[i], (float)i, "%s n=%d: t[%d] written", name, n, i);
    }
}

Test(vexp, exp_sum_generic) { exp_sum_case("generic"); }
Test(vexp, exp_sum_avx2) { exp_sum_case("avx2"); }
Test(vexp, exp_sum_avx512) { exp_sum_case("avx512"); }
