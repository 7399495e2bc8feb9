/*
 * test_sample_exp.c - the sampler's exponential (sample_exp.h): within
 * 1 ulp of exp() computed in long double over the whole range the sampler
 * uses, exact at 0, the documented values at the edges (-inf, NaN,
 * underflow, subnormal results), and every vector form this CPU has
 * giving the scalar form's bits, weights included (x == m, +inf max,
 * temperatures, tails that are not a multiple of a vector).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sample_exp.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static double unit(void) { return (double)(next() >> 11) / 9007199254740992.0; }

/* |got - want| in units of the last place of want (a double) */
static double ulps(double got, long double want) {
    if (want == 0) return got == 0 ? 0 : INFINITY;
    int e;
    frexpl(want, &e);
    long double ulp = ldexpl(1.0L, (e - 53) < -1074 ? -1074 : e - 53);
    return (double)(fabsl((long double)got - want) / ulp);
}

Test(sample_exp, within_one_ulp_of_long_double_exp) {
    double worst = 0, at = 0;
    for (int i = 0; i < 2000000; i++) {
        /* dense near 0, where samplers live, and over the whole range */
        const double s = i % 2 ? -40.0 * unit() : -745.0 * unit();
        const double got = qwi_sample_exp(s);
        const double u = ulps(got, expl((long double)s));
        if (u > worst) {
            worst = u;
            at = s;
        }
    }
    cr_log_info("qwi_sample_exp: largest error %.3f ulp (at s = %.17g)", worst, at);
    cr_assert_leq(worst, 1.0, "largest error %.3f ulp at s = %.17g", worst, at);
}

Test(sample_exp, edges) {
    cr_assert_eq(qwi_sample_exp(0.0), 1.0);
    cr_assert_eq(qwi_sample_exp(-0.0), 1.0);
    cr_assert_eq(qwi_sample_exp(-INFINITY), 0.0);
    cr_assert_eq(qwi_sample_exp(NAN), 0.0);
    cr_assert_eq(qwi_sample_exp(-746.0), 0.0);
    cr_assert_eq(qwi_sample_exp(-1e300), 0.0);
    /* subnormal results, correctly placed: exp(-740) ~ 4.2e-322 */
    const double sub = qwi_sample_exp(-740.0);
    cr_assert(sub > 0 && sub < 2.2250738585072014e-308, "exp(-740) = %g", sub);
    cr_assert_leq(ulps(sub, expl(-740.0L)), 1.0);
    /* the normal-subnormal border */
    cr_assert_leq(ulps(qwi_sample_exp(-708.0), expl(-708.0L)), 1.0);
    cr_assert_leq(ulps(qwi_sample_exp(-709.0), expl(-709.0L)), 1.0);
    /* exactly ln2 multiples give powers of two to within the polynomial */
    cr_assert_leq(ulps(qwi_sample_exp(-0.6931471805599453), 0.5L), 1.0);
}

static void weights_agree(int32_t n, double temp, int with_inf) {
    float *x = malloc((size_t)n * sizeof *x);
    double *want = malloc((size_t)n * sizeof *want), *got = malloc((size_t)n * sizeof *got);
    float m = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        x[i] = (float)(30.0 * unit() - 20.0);
        if (i % 97 == 5) x[i] = -INFINITY;
        if (i % 89 == 7) x[i] = NAN;
        if (!isnan(x[i]) && x[i] > m) m = x[i];
    }
    if (with_inf) {
        x[n / 2] = INFINITY;
        m = INFINITY;
    }
    if (n > 3) x[3] = m;   /* a tie with the max: weight 1 */
    cr_assert(qwi_sample_weights_by(0, x, n, m, temp, want));
    for (int32_t i = 0; i < n; i++) {
        const double s = ((double)x[i] - m) / temp;
        const double e = (double)x[i] == (double)m ? 1.0 : qwi_sample_exp(s);
        cr_assert(memcmp(&want[i], &e, 8) == 0, "scalar weight %d: %.17g vs %.17g", i, want[i], e);
        if (isnan(x[i]) || x[i] == -INFINITY) cr_assert_eq(want[i], 0.0);
    }
    if (n > 3) cr_assert_eq(want[3], 1.0);
    for (int form = 1; form <= 2; form++) {
        memset(got, 0xa5, (size_t)n * sizeof *got);
        if (!qwi_sample_weights_by(form, x, n, m, temp, got)) {
            cr_log_warn("sample_exp form %d not on this CPU: skipped", form);
            continue;
        }
        for (int32_t i = 0; i < n; i++)
            cr_assert(memcmp(&got[i], &want[i], 8) == 0, "form %d, n %d, T %g, weight %d: %.17g vs %.17g",
                      form, n, temp, i, got[i], want[i]);
    }
    double *d = malloc((size_t)n * sizeof *d);
    qwi_sample_weights(x, n, m, temp, d);
    cr_assert(memcmp(d, want, (size_t)n * sizeof *d) == 0, "dispatched form differs from scalar");
    free(d);
    free(x);
    free(want);
    free(got);
}

Test(sample_exp, every_form_gives_the_scalar_bits) {
    static const int32_t ns[] = { 1, 3, 4, 7, 8, 9, 255, 256, 1001, 151936 };
    static const double temps[] = { 1.0, 0.7, 0.01, 1e-6, 3.0, 1e30 };
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t b = 0; b < sizeof temps / sizeof temps[0]; b++) weights_agree(ns[a], temps[b], 0);
    weights_agree(1001, 1.0, 1);
    weights_agree(9, 0.5, 1);
}
