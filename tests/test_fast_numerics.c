/*
 * test_fast_numerics.c - the fast numerics mode's building blocks: bf16
 * rounding of activations, the pair-panel weight layout, and the
 * matmul_pair kernel of every table this CPU can run (generic, avx2,
 * avx512, avx512bf16 = vdpbf16ps) bit for bit against a scalar model of
 * one vdpbf16ps lane chain (kernels.h), through the parallel driver, for
 * ragged M, N and K, bias and residual add, and thread counts.
 */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kernels.h"
#include "cpu/ops.h"
#include "cpu/pairpanel.h"
#include "dtype.h"

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

static float bf(uint16_t h) { return from_bits((uint32_t)h << 16); }

Test(fast_numerics, round_bf16_nearest_even_and_specials) {
    cr_assert_eq(qwi_pair_round_bf16(1.0f), 0x3f80);
    /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (down). */
    cr_assert_eq(qwi_pair_round_bf16(from_bits(0x3f808000u)), 0x3f80);
    /* 1 + 3*2^-8 is halfway between odd 0x3f81 and even 0x3f82: up. */
    cr_assert_eq(qwi_pair_round_bf16(from_bits(0x3f818000u)), 0x3f82);
    cr_assert_eq(qwi_pair_round_bf16(from_bits(0x3f808001u)), 0x3f81);
    cr_assert_eq(qwi_pair_round_bf16(from_bits(0x3f807fffu)), 0x3f80);
    cr_assert_eq(qwi_pair_round_bf16(-2.5f), 0xc020);
    cr_assert_eq(qwi_pair_round_bf16(-0.0f), 0x8000);
    cr_assert_eq(qwi_pair_round_bf16(FLT_MAX), 0x7f80, "FLT_MAX rounds up to inf");
    cr_assert_eq(qwi_pair_round_bf16(INFINITY), 0x7f80);
    cr_assert_eq(qwi_pair_round_bf16(-INFINITY), 0xff80);
    uint16_t n = qwi_pair_round_bf16(from_bits(0x7f800001u));   /* NaN, payload in low bits only */
    cr_assert((n & 0x7f80) == 0x7f80 && (n & 0x7f) != 0, "NaN must stay NaN, got %#x", n);
    /* Subnormal inputs flush to a zero of the same sign (vdpbf16ps DAZ),
     * as vcvtne2ps2bf16 does - also those that would round up to FLT_MIN. */
    cr_assert_eq(qwi_pair_round_bf16(1e-40f), 0x0000);
    cr_assert_eq(qwi_pair_round_bf16(-1e-40f), 0x8000);
    cr_assert_eq(qwi_pair_round_bf16(FLT_MIN), 0x0080, "the smallest normal stays");
    cr_assert_eq(qwi_pair_round_bf16(from_bits(0x007fffffu)), 0x0000, "a subnormal input is zero");
    cr_assert_eq(qwi_pair_round_bf16(from_bits(0x807fffffu)), 0x8000);
    cr_assert_eq(qwi_pair_round_bf16(from_bits(0x0080ffffu)), 0x0081, "normal: rounds as usual");
}

Test(fast_numerics, round_rows_pairs_and_pad) {
    const int64_t K = 5, kp = qwi_pair_kp(K);
    cr_assert_eq(kp, 3);
    float x[2 * 5] = { 1, 2, 3, 4, 5, -1, -2, -3, -4, -5 };
    uint32_t out[2 * 3];
    memset(out, 0xff, sizeof out);
    qwi_pair_round_rows(x, 0, 2, K, out);
    for (int m = 0; m < 2; m++)
        for (int j = 0; j < kp; j++) {
            uint32_t lane = out[m * kp + j];
            cr_assert_eq(bf((uint16_t)(lane & 0xffff)), x[m * K + 2 * j]);
            if (2 * j + 1 < K) cr_assert_eq(bf((uint16_t)(lane >> 16)), x[m * K + 2 * j + 1]);
            else cr_assert_eq(lane >> 16, 0u, "the pad half is zero");
        }
}

/* Widened rows hold each pair's halves as f32, low half first, the pad
 * half 0, exactly; rows outside [m0, m1) are left alone. K = 13: 7 pairs,
 * four a step and three one by one. */
Test(fast_numerics, widen_rows_exact_and_pad) {
    enum { K = 13, KP = 7, W = 2 * KP };
    cr_assert_eq(qwi_pair_kp(K), KP);
    float x[3 * K];
    for (int i = 0; i < 3 * K; i++) x[i] = (float)(i % 2 ? -i : i) * 0.37f + (i == 20 ? 4e5f : 0);
    uint32_t pairs[3 * KP];
    qwi_pair_round_rows(x, 0, 3, K, pairs);
    float wide[3 * W];
    memset(wide, 0x7f, sizeof wide);
    qwi_pair_widen_rows(pairs, 1, 3, KP, wide);
    for (int j = 0; j < W; j++) cr_assert_eq(bits(wide[j]), 0x7f7f7f7fu, "row 0 untouched");
    for (int m = 1; m < 3; m++) {
        for (int j = 0; j < KP; j++) {
            cr_assert_eq(bits(wide[m * W + 2 * j]), pairs[m * KP + j] << 16);
            cr_assert_eq(bits(wide[m * W + 2 * j + 1]), pairs[m * KP + j] & 0xffff0000u);
        }
        for (int k = 0; k < K; k++)
            cr_assert_eq(wide[m * W + k], bf(qwi_pair_round_bf16(x[m * K + k])), "row %d col %d", m, k);
        cr_assert_eq(bits(wide[m * W + K]), 0u, "the pad half widens to +0");
    }
}

/* Every implementation of the row rounding this CPU runs (portable, AVX2,
 * AVX512_BF16 vcvtne2ps2bf16) and the dispatched qwi_pair_round_rows give
 * exactly the bits of the scalar rounding, specials included, in the
 * 32-wide body, the 16-wide step and the scalar tail of a row. */
Test(fast_numerics, round_rows_matches_scalar_rounding) {
    enum { KMAX = 77 };
    const uint32_t specials[] = { 0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f807fffu, 0x7f800001u,
                                  0xff800001u, 0x7fc00000u, 0x7f800000u, 0xff800000u, 0x7f7fffffu,
                                  0x00000001u, 0x80000001u, 0x007fffffu, 0x00800000u, 0x807fffffu,
                                  0x80000000u, 0x00000000u, 0x7f7f8000u, 0x3f7fffffu, 0x00400000u,
                                  0x80123456u, 0x007f8000u, 0x00807fffu, 0x00808000u, 0xffffffffu };
    const size_t ns = sizeof specials / sizeof specials[0];
    const int64_t ks[] = { 77, 51, 48, 16, 3, 1 };
    const char *impls[] = { "portable", "avx2", "avx512bf16", "rows" };
    float x[2 * KMAX];
    for (int i = 0; i < 2 * KMAX; i++)
        x[i] = from_bits(specials[(size_t)(i * 7) % ns] ^ (uint32_t)(i % 3 == 0) << 31);
    int ran = 0;
    for (size_t c = 0; c < sizeof ks / sizeof ks[0]; c++)
        for (size_t m = 0; m < sizeof impls / sizeof impls[0]; m++) {
            const int64_t K = ks[c], kp = (K + 1) / 2;
            uint32_t out[2 * ((KMAX + 1) / 2) + 1];
            memset(out, 0xab, sizeof out);
            if (strcmp(impls[m], "rows") == 0) {
                qwi_pair_round_rows(x, 0, 2, K, out);
            } else {
                if (!qwi_pair_round_row_by(impls[m], x, K, out)) {
                    if (c == 0) cr_log_warn("round: %s not available on this CPU", impls[m]);
                    continue;
                }
                cr_assert(qwi_pair_round_row_by(impls[m], x + K, K, out + kp));
            }
            ran++;
            const uint16_t *h = (const uint16_t *)out;   /* little-endian: element k of row r */
            for (int r = 0; r < 2; r++) {
                for (int i = 0; i < K; i++)
                    cr_assert_eq(h[r * 2 * kp + i], qwi_pair_round_bf16(x[r * K + i]),
                                 "%s K=%lld row %d col %d: %#x of %#x", impls[m], (long long)K, r, i,
                                 h[r * 2 * kp + i], bits(x[r * K + i]));
                if (K & 1) cr_assert_eq(h[r * 2 * kp + K], 0, "%s row %d: pad", impls[m], r);
            }
            cr_assert_eq(out[2 * kp], 0xabababab, "%s K=%lld: written past the rows", impls[m],
                         (long long)K);
        }
    cr_assert(!qwi_pair_round_row_by("avx9000", x, 4, (uint32_t[2]){ 0 }), "unknown name");
    cr_assert_geq(ran, 12, "portable and the dispatched rows always run");
}

/* A deterministic generator: values over a wide exponent range. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}
static float frnd(void) { return (float)((double)rnd() / 2147483648.0 - 1.0); }

/* Random value; extreme != 0 spreads exponents over 2^-60..2^20 and mixes
 * in zeros, subnormals and exact ties of the rounding. */
static float value(int extreme) {
    float v = frnd();
    if (!extreme) return v;
    switch (rnd() % 8) {
    case 0: return 0.0f;
    case 1: return v * 1e-39f;                                   /* subnormal */
    case 2: return from_bits((bits(v) & 0xffff0000u) | 0x8000u); /* a tie */
    default: return ldexpf(v, (int)(rnd() % 81) - 60);
    }
}

Test(fast_numerics, pairpanel_pack_get_all_dtypes) {
    const int64_t N = 37, K = 9;
    float wf[37 * 9];
    uint16_t wb[37 * 9], wh[37 * 9];
    for (int i = 0; i < N * K; i++) {
        wf[i] = value(1);
        wb[i] = (uint16_t)(bits(wf[i]) >> 16);
        wh[i] = (uint16_t)((rnd() & 0x83ffu) | ((rnd() % 29 + 1) << 10));
    }
    size_t bytes = qwi_pairpanel_bytes(N, K);
    cr_assert_eq(bytes, (size_t)48 * 5 * 4, "3 panels of 16 rows x 5 pairs x 4 bytes");
    cr_assert_eq(qwi_pairpanel_bytes(0, K), 0);
    cr_assert_eq(qwi_pairpanel_bytes(N, -1), 0);
    cr_assert_eq(qwi_pairpanel_bytes(INT64_MAX / 2, INT64_MAX / 2), 0, "overflow");
    void *p = malloc(bytes);
    const qwi_dtype dts[3] = { QWI_DTYPE_F32, QWI_DTYPE_BF16, QWI_DTYPE_F16 };
    const void *src[3] = { wf, wb, wh };
    for (int d = 0; d < 3; d++) {
        memset(p, 0xee, bytes);
        cr_assert(qwi_pairpanel_pack(dts[d], src[d], N, K, p));
        for (int64_t r = 0; r < 48; r++)
            for (int64_t c = 0; c < K + 1; c++) {
                float got = qwi_pairpanel_get(p, K, r, c);
                float want = 0.0f;
                if (r < N && c < K) {
                    float f = d == 0 ? wf[r * K + c] : d == 1 ? bf(wb[r * K + c])
                                                              : qwi_f16_to_f32(wh[r * K + c]);
                    want = bf(qwi_pair_round_bf16(f));
                }
                cr_assert_eq(bits(got), bits(want), "dtype %d (%lld,%lld): %a vs %a", d,
                             (long long)r, (long long)c, got, want);
            }
    }
    cr_assert_not(qwi_pairpanel_pack(QWI_DTYPE_F32, wf, 0, K, p));
    free(p);
}

/* The scalar model of one output: a chain over pairs, odd product first,
 * in f32 (a product of two bf16 values is exact unless it underflows or
 * overflows). *tiny is set if a product or partial sum was nonzero and
 * below FLT_MIN in magnitude, where vdpbf16ps (FTZ) and the emulations may
 * differ. */
static float chain(const uint32_t *x, const uint32_t *w, int64_t kp, int *tiny) {
    volatile float acc = 0.0f;
    for (int64_t j = 0; j < kp; j++) {
        float xo = from_bits(x[j] & 0xffff0000u), xe = from_bits(x[j] << 16);
        float wo = from_bits(w[j] & 0xffff0000u), we = from_bits(w[j] << 16);
        double po = (double)xo * wo, pe = (double)xe * we;
        if ((po != 0 && fabs(po) < FLT_MIN) || (pe != 0 && fabs(pe) < FLT_MIN)) *tiny = 1;
        acc = acc + xo * wo;
        if (acc != 0 && fabsf(acc) < FLT_MIN) *tiny = 1;
        acc = acc + xe * we;
        if (acc != 0 && fabsf(acc) < FLT_MIN) *tiny = 1;
    }
    return acc;
}

typedef struct fixture {
    qwi_cpu_pool *pool;
    qwi_cpu_ctx cx;
    uint32_t *xpair;
    float *xwide;
} fixture;

/* wide: give the driver room for widened x (where kt has matmul_pair_wide,
 * the bf16 pair jobs of M >= QWI_PAIR_WIDE_MIN_M then read it). */
static void fx_init(fixture *f, const qwi_cpu_kernels *kt, int threads, int64_t M, int64_t K,
                    int wide) {
    cr_assert_eq(qwi_cpu_pool_create(threads, &f->pool), QW_OK);
    f->xpair = malloc((size_t)(M * qwi_pair_kp(K)) * 4 + 4);
    f->xwide = wide ? malloc((size_t)(M * qwi_pair_kp(K)) * 8 + 8) : NULL;
    f->cx = (qwi_cpu_ctx){ .pool = f->pool, .kt = kt, .nthreads = qwi_cpu_pool_size(f->pool),
                           .xpair = f->xpair, .xwide = f->xwide };
}

static void fx_fini(fixture *f) {
    qwi_cpu_pool_destroy(f->pool);
    free(f->xpair);
    free(f->xwide);
}

/* Every output of table `name` through qwi_cpu_matmul equals the scalar
 * chain bit for bit, unless the chain went through a subnormal (counted
 * into *tiny_out; none with extreme = 0). Where the table has
 * matmul_pair_wide, each case runs three ways: the driver without room
 * for widened x (matmul_pair), with it (matmul_pair_wide from M = 3), and
 * matmul_pair_wide called directly on all rows (M = 1 and 2 too). */
static void check_table(const char *name, int extreme, int threads, int64_t M, int64_t N,
                        int64_t K, int use_bias, int accumulate, int64_t *tiny_out) {
    const qwi_cpu_kernels *kt = qwi_cpu_kernels_by_name(name);
    if (!kt) cr_skip_test("kernel table %s is not available on this CPU", name);
    cr_assert_str_eq(kt->name, name);
    cr_assert_not_null(kt->matmul_pair);
    const int64_t kp = qwi_pair_kp(K);
    float *x = malloc((size_t)(M * K) * 4), *wf = malloc((size_t)(N * K) * 4);
    float *bias = malloc((size_t)N * 4), *out = malloc((size_t)(M * N) * 4);
    float *init = malloc((size_t)(M * N) * 4);
    for (int64_t i = 0; i < M * K; i++) x[i] = value(extreme);
    for (int64_t i = 0; i < N * K; i++) wf[i] = value(extreme);
    for (int64_t i = 0; i < N; i++) bias[i] = frnd();
    for (int64_t i = 0; i < M * N; i++) init[i] = frnd();
    void *panels = malloc(qwi_pairpanel_bytes(N, K));
    cr_assert(qwi_pairpanel_pack(QWI_DTYPE_F32, wf, N, K, panels));
    /* Independent inputs of the model: rows rounded here, weight rows
     * gathered back out of the panels. */
    uint32_t *xr = malloc((size_t)(M * kp) * 4), *wr = malloc((size_t)kp * 4);
    float *want = malloc((size_t)(M * N) * 4);
    char *tiny = malloc((size_t)(M * N));
    int64_t tiny_n = 0;
    qwi_pair_round_rows(x, 0, M, K, xr);
    for (int64_t n = 0; n < N; n++) {
        for (int64_t j = 0; j < kp; j++) {
            uint32_t lo = bits(qwi_pairpanel_get(panels, K, n, 2 * j)) >> 16;
            uint32_t hi = 2 * j + 1 < K ? bits(qwi_pairpanel_get(panels, K, n, 2 * j + 1)) >> 16 : 0;
            wr[j] = lo | hi << 16;
        }
        for (int64_t m = 0; m < M; m++) {
            int t = 0;
            float d = chain(xr + m * kp, wr, kp, &t);
            float v = use_bias ? d + bias[n] : d;
            want[m * N + n] = accumulate ? init[m * N + n] + v : v;
            tiny[m * N + n] = (char)t;
            tiny_n += t;
        }
    }
    static const char *const how[3] = { "matmul_pair", "driver with xwide", "matmul_pair_wide" };
    for (int variant = 0; variant < (kt->matmul_pair_wide ? 3 : 1); variant++) {
        memcpy(out, init, (size_t)(M * N) * 4);
        fixture f;
        fx_init(&f, kt, threads, M, K, variant == 1);
        qwi_cpu_linear lin = { .dtype = QWI_DTYPE_F32, .w = panels, .bias = use_bias ? bias : NULL,
                               .n = N, .k = K, .pair = true };
        qwi_cpu_mm_job job = { &lin, out, accumulate };
        if (variant < 2) {
            qwi_cpu_matmul(&f.cx, x, M, K, &job, 1);
        } else {
            float *xw = malloc((size_t)(M * kp) * 8);
            qwi_pair_widen_rows(xr, 0, M, kp, xw);
            kt->matmul_pair_wide(xw, M, kp, panels, N, lin.bias, out, N, accumulate);
            free(xw);
        }
        fx_fini(&f);
        for (int64_t i = 0; i < M * N; i++) {
            if (tiny[i]) continue;
            cr_assert_eq(bits(out[i]), bits(want[i]),
                         "%s (%s) M %lld N %lld K %lld threads %d at (%lld,%lld): %a vs chain %a",
                         name, how[variant], (long long)M, (long long)N, (long long)K, threads,
                         (long long)(i / N), (long long)(i % N), out[i], want[i]);
        }
    }
    if (!extreme) cr_assert_eq(tiny_n, 0, "ordinary data never reaches subnormals");
    if (tiny_out) *tiny_out += tiny_n;
    free(xr);
    free(wr);
    free(want);
    free(tiny);
    free(panels);
    free(x);
    free(wf);
    free(bias);
    free(out);
    free(init);
}

/* Shapes around every tile edge: M = 1..8, 13, 64, 70 rows (tiles of 1-6
 * and 4, row blocks of 48), N inside one panel, 1-4 panels and ragged, odd
 * and even K, K = 301 (151 pairs: two k blocks of the vdpbf16ps kernel). */
static void ragged(const char *name) {
    const int64_t Ms[] = { 1, 2, 3, 4, 5, 6, 7, 8, 13, 64, 70 };
    const int64_t Ns[] = { 1, 16, 17, 40, 64, 100 };
    const int64_t Ks[] = { 1, 2, 7, 64, 129, 301 };
    int c = 0;
    for (size_t a = 0; a < sizeof Ms / sizeof Ms[0]; a++)
        for (size_t b = 0; b < sizeof Ns / sizeof Ns[0]; b++)
            for (size_t k = 0; k < sizeof Ks / sizeof Ks[0]; k++, c++)
                check_table(name, 0, 1 + c % 2, Ms[a], Ns[b], Ks[k], c % 3 != 0, c % 2, NULL);
}

Test(fast_numerics, generic_ragged) { ragged("generic"); }
Test(fast_numerics, avx2_ragged) { ragged("avx2"); }
Test(fast_numerics, avx512_ragged) { ragged("avx512"); }
Test(fast_numerics, avx512bf16_ragged) { ragged("avx512bf16"); }

/* Concurrent-decode shapes: 7-48 rows over a wide layer, where
 * qwi_cpu_matmul hands each task up to four 64-output groups and the
 * vdpbf16ps kernel prefetches across k blocks and into the next group
 * (N = 2100: a ragged last group; K = 301: three short k blocks). */
static void wide(const char *name) {
    const int64_t Ms[] = { 7, 13, 32, 48 };
    for (size_t a = 0; a < sizeof Ms / sizeof Ms[0]; a++)
        check_table(name, 0, 1 + (int)(a % 2), Ms[a], 2100, 301, (int)(a % 2), (int)(a / 2 % 2),
                    NULL);
}

Test(fast_numerics, generic_wide) { wide("generic"); }
Test(fast_numerics, avx2_wide) { wide("avx2"); }
Test(fast_numerics, avx512_wide) { wide("avx512"); }
Test(fast_numerics, avx512bf16_wide) { wide("avx512bf16"); }

/* Wide exponent range, subnormal activations and weights (flushed by the
 * rounding), rounding ties: every table still equals the chain wherever no
 * partial sum is subnormal. This is the on-hardware check of kernels.h's
 * claim that vdpbf16ps == FMA emulation == multiply-then-add. */
static void extreme(const char *name) {
    int64_t tiny = 0;
    for (int i = 0; i < 4; i++) check_table(name, 1, 2, 9 + i, 50, 301, i & 1, i >> 1, &tiny);
    cr_log_info("%s: %lld outputs went through a subnormal partial sum (not compared)",
                name, (long long)tiny);
}

Test(fast_numerics, generic_extreme) { extreme("generic"); }
Test(fast_numerics, avx2_extreme) { extreme("avx2"); }
Test(fast_numerics, avx512_extreme) { extreme("avx512"); }
Test(fast_numerics, avx512bf16_extreme) { extreme("avx512bf16"); }

/* The table named "avx512bf16" exists exactly when CPUID has AVX512_BF16,
 * and the process's choice prefers it (the amx table is taken by name
 * only: kernels.c). */
Test(fast_numerics, selection_prefers_vdpbf16ps) {
    const qwi_cpu_kernels *t = qwi_cpu_kernels_by_name("avx512bf16");
    cr_assert_eq(t != NULL, qwi_bf16dot_have_avx512bf16());
    if (t && !getenv("QWINFER_CPU_KERNELS")) cr_assert_eq(qwi_cpu_kernels_select(), t);
    cr_assert_not_null(qwi_cpu_kernels_select()->matmul_pair);
}
