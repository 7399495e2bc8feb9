/*
 * test_logit_max.c - the vector maximum of a logit row (logit_max.h):
 * every form this CPU has against the scalar loop, over lengths around
 * the vector and unroll widths, with NaN, -inf, +inf, all-NaN and empty
 * rows, and ties of the maximum at the end of a row.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "logit_max.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 40.0 - 20.0);
}

static void agree(const float *x, int32_t n, const char *what) {
    float want;
    cr_assert(qwi_logit_max_by(0, x, n, &want));
    for (int form = 1; form <= 2; form++) {
        float got = 12345.0f;
        if (!qwi_logit_max_by(form, x, n, &got)) continue;
        cr_assert(got == want || (isnan(got) && isnan(want)), "%s n=%d form %d: %g vs scalar %g", what,
                  n, form, got, want);
        cr_assert(!isnan(got), "%s n=%d form %d: NaN", what, n, form);
    }
    cr_assert_eq(qwi_logit_max(x, n), want, "%s n=%d: dispatched form", what, n);
}

Test(logit_max, every_form_gives_the_scalar_max) {
    enum { N = 1000 };
    static float x[N];
    static const int32_t ns[] = { 0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 999, 1000 };
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        const int32_t n = ns[t];
        for (int i = 0; i < N; i++) x[i] = frand();
        agree(x, n, "random");
        if (n > 0) {
            x[n - 1] = 25.0f;   /* the maximum in the scalar tail */
            agree(x, n, "max last");
            x[n / 2] = NAN;
            agree(x, n, "with NaN");
            x[0] = INFINITY;
            agree(x, n, "with +inf");
            for (int i = 0; i < n; i++) x[i] = NAN;
            agree(x, n, "all NaN");
            cr_assert(qwi_logit_max(x, n) == -INFINITY);
            for (int i = 0; i < n; i++) x[i] = -INFINITY;
            agree(x, n, "all -inf");
            for (int i = 0; i < n; i++) x[i] = i % 2 ? NAN : -3.0f;
            agree(x, n, "NaN and one value");
        }
    }
    cr_assert(qwi_logit_max(x, 0) == -INFINITY);
}
