/*
 * test_quant_kernels.c - the CPU quantized matmuls (cpu/qpanel.h): the
 * packed layout against the plain codes, every kernel table this CPU runs
 * (generic, avx2, avx512, avx512bf16, and a kernel a table passes over
 * here for a faster one) x {U4, U8, E4M3} x {SEQ (exact),
 * PAIR (fast)} bit for bit against the generic table and within rounding
 * of a float64 dot product of the dequantized weights, M = 1 rows equal to
 * the same rows of a batch and a column split equal to the whole call
 * (n0 > 0), ragged N, several groups, a partial last FP8 block, groups
 * that are not a multiple of a code block, odd K; the parallel driver
 * (qwi_cpu_matmul) at 1 and 2 threads; packing from hand-built FP8 and GPTQ
 * qwi_qweight tensors; a zero point outside the contract refused; uniform
 * (symmetric) zero points found in qzeros and packed as none.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_features.h"
#include "cpu/kernels.h"
#include "cpu/ops.h"
#include "cpu/pairpanel.h"
#include "cpu/q4i.h"
#include "cpu/qpanel.h"
#include "fp8.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}
static float urand(void) { return (float)(rnd() % 2000001) / 1000000.0f - 1.0f; }   /* [-1, 1] */

typedef struct qdata {
    qwi_qfmt fmt;
    int64_t n, k, gk, G;
    uint8_t *codes;
    float *scales, *zeros;
    bool f16;       /* the scales are f16 values (packed as such: qpanel.h's scales_h) */
    bool uniform;   /* int4/int8: every zero point is zero_all (packed as such) */
    int32_t zero_all;
    bool per_panel;   /* E4M3: the rows of each 16-row panel share their scales (packed so) */
} qdata;

/* f16: int4/int8 scales that are f16 values, as GPTQ and AWQ store them
 * (else f32 values that are not). uniform_zero >= 0: every int4/int8 zero
 * point is that, as in a symmetric GPTQ checkpoint (else they vary). */
static qdata make_qdata_z(qwi_qfmt fmt, int64_t n, int64_t k, int64_t gk, bool f16,
                          int uniform_zero) {
    qdata d = { .fmt = fmt, .n = n, .k = k, .gk = gk, .G = QWI_DIV_UP(k, gk),
                .f16 = f16 && fmt != QWI_QFMT_E4M3,
                .uniform = uniform_zero >= 0 && fmt != QWI_QFMT_E4M3,
                .zero_all = uniform_zero >= 0 && fmt != QWI_QFMT_E4M3 ? uniform_zero : 0 };
    d.codes = malloc((size_t)(n * k));
    d.scales = malloc((size_t)(n * d.G) * sizeof(float));
    d.zeros = malloc((size_t)(n * d.G) * sizeof(float));
    cr_assert(d.codes && d.scales && d.zeros);
    for (int64_t i = 0; i < n * k; i++) {
        uint8_t c = (uint8_t)rnd();
        if (fmt == QWI_QFMT_U4) c &= 0xf;
        if (fmt == QWI_QFMT_E4M3 && qwi_e4m3_is_nan(c)) c = 0x7e;
        d.codes[i] = c;
    }
    for (int64_t i = 0; i < n * d.G; i++) {
        d.scales[i] = d.f16 ? (float)(256 + rnd() % 768) * 0x1p-15f   /* 10 significant bits */
                            : (0.25f + 0.75f * fabsf(urand())) * (fmt == QWI_QFMT_E4M3 ? 0.004f : 0.02f);
        /* GPTQ v1 zeros reach 2^bits (stored 2^bits - 1, plus 1) */
        d.zeros[i] = fmt == QWI_QFMT_E4M3 ? 0.0f
                     : d.uniform ? (float)d.zero_all
                                 : (float)(rnd() % (fmt == QWI_QFMT_U4 ? 17 : 257));
    }
    return d;
}

static qdata make_qdata_s(qwi_qfmt fmt, int64_t n, int64_t k, int64_t gk, bool f16) {
    return make_qdata_z(fmt, n, k, gk, f16, -1);
}

/* E4M3: give every row its 16-row panel's first row's scales, as FP8
 * blocks of a multiple of 16 rows do (packed as one a panel). */
static void share_panel_scales(qdata *d) {
    if (d->fmt != QWI_QFMT_E4M3) return;
    for (int64_t r = 0; r < d->n; r++)
        for (int64_t g = 0; g < d->G; g++) d->scales[r * d->G + g] = d->scales[(r / 16 * 16) * d->G + g];
    d->per_panel = true;
}

/* The symmetric zero point of fmt: 8 (int4) or 128 (int8). */
static int sym_zero(qwi_qfmt fmt) { return fmt == QWI_QFMT_U8 ? 128 : 8; }

/* What d's values let the packer narrow. */
static qwi_qpanel_form form_of(const qdata *d) {
    return (qwi_qpanel_form){ .scales_f16 = d->f16, .zero_uniform = d->uniform,
                              .zero_all = d->zero_all, .scales_per_panel = d->per_panel };
}

/* Only f16 scales (qw_qpanel_form with zero points stored). */
static qwi_qpanel_form f16_form(bool f16) { return (qwi_qpanel_form){ .scales_f16 = f16 }; }

static qdata make_qdata(qwi_qfmt fmt, int64_t n, int64_t k, int64_t gk) {
    return make_qdata_s(fmt, n, k, gk, true);
}

static void free_qdata(qdata *d) {
    free(d->codes);
    free(d->scales);
    free(d->zeros);
}

/* The dequantized element in double, from the plain arrays. */
static double deq(const qdata *d, int64_t n, int64_t k) {
    const int64_t g = k / d->gk;
    const double s = d->scales[n * d->G + g];
    if (d->fmt == QWI_QFMT_E4M3) return (double)qwi_e4m3_to_f32(d->codes[n * d->k + k]) * s;
    return ((double)d->codes[n * d->k + k] - (double)d->zeros[n * d->G + g]) * s;
}

static void *pack(const qdata *d, qwi_qpanel_layout layout, qwi_qpanel *qp) {
    size_t bytes = qwi_qpanel_bytes_for(d->fmt, layout, d->n, d->k, d->gk, form_of(d));
    cr_assert(bytes > 0);
    void *buf = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    cr_assert(buf);
    memset(buf, 0xa5, bytes);   /* packing must write every byte the kernels read */
    cr_assert(qwi_qpanel_pack_codes(d->fmt, layout, d->n, d->k, d->gk, d->codes, d->scales,
                                    d->fmt == QWI_QFMT_E4M3 ? NULL : d->zeros, form_of(d), buf, qp),
              "%s", qwi_last_error());
    /* the integer layout keeps f16 scales and integer zero points, none
     * where they are uniform (qpanel.h) */
    const bool nw = d->fmt != QWI_QFMT_E4M3 && layout == QWI_QPANEL_PAIR;
    cr_assert((qp->scales_h != NULL) == (nw && d->f16) && (qp->scales != NULL) == !(nw && d->f16));
    cr_assert((qp->zeros_i != NULL) == (nw && !d->uniform));
    cr_assert_eq(qp->zero_all, nw && d->uniform ? d->zero_all : 0);
    cr_assert_eq(qp->scale_per_panel, layout == QWI_QPANEL_PAIR && d->per_panel);
    cr_assert((qp->zeros != NULL) == (!nw && d->fmt != QWI_QFMT_E4M3));
    return buf;
}

static const qwi_qfmt fmts[] = { QWI_QFMT_U4, QWI_QFMT_U8, QWI_QFMT_E4M3 };
static const char *const fmt_names[] = { "?", "U4", "U8", "E4M3" };
static const char *const tables[] = { "generic", "avx2", "avx512", "avx512bf16" };

/* Every table this CPU runs, plus each kernel a table passes over here
 * for a faster one (so that it is still checked on this machine): the
 * avx512 table's vpmaddwd int4/int8 kernel (Skylake-SP) where the CPU
 * also has AVX512_VNNI and the table takes vpdpwssd. */
typedef struct variant {
    const char *name;
    qwi_cpu_kernels kt;
} variant;

/* matmul_qpair through the avx2 table's matmul_qpair_wide: x widened here
 * first (the driver does that once per call from 3 rows; this runs every
 * M, 1 and 2 included). */
static void avx2_qpair_via_wide(const uint32_t *x, int64_t M, int64_t KP, const qwi_qpanel *w,
                                int64_t n0, int64_t N, const float *bias, float *out, int64_t ldo,
                                int accumulate) {
    float *xw = malloc(sizeof(float) * (size_t)(2 * M * KP) + 4);
    qwi_pair_widen_rows(x, 0, M, KP, xw);
    qwi_cpu_kernels_by_name("avx2")->matmul_qpair_wide(xw, M, KP, w, n0, N, bias, out, ldo,
                                                       accumulate);
    free(xw);
}
#define MAX_VARIANTS 10

static int table_variants(variant *v) {
    int n = 0;
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
        const qwi_cpu_kernels *kt = qwi_cpu_kernels_by_name(tables[t]);
        if (kt) v[n++] = (variant){ tables[t], *kt };
    }
    const qwi_cpu_kernels *a2 = qwi_cpu_kernels_by_name("avx2");
    if (a2 && a2->matmul_qpair_wide) {
        v[n] = (variant){ "avx2 (x widened)", *a2 };
        v[n++].kt.matmul_qpair = avx2_qpair_via_wide;
    }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    const qwi_cpu_kernels *a5 = qwi_cpu_kernels_by_name("avx512");
    if (a5 && __builtin_cpu_supports("avx512bw") && a5->matmul_q4i != qwi_avx512_matmul_q4i) {
        v[n] = (variant){ "avx512 (vpmaddwd)", *a5 };
        v[n++].kt.matmul_q4i = qwi_avx512_matmul_q4i;
    }
    /* the avx2 table's int4/int8 on VNNI dot products: where the core has
     * AVX-VNNI the table runs them itself (avx2_table_takes_avxvnni_...);
     * elsewhere their arithmetic in AVX512_VNNI's EVEX encoding, where
     * that runs */
    if (a2 && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni")) {
        v[n] = (variant){ "avx2 (VNNI, EVEX)", *a2 };
        v[n++].kt.matmul_q4i = qwi_avxvnni_evex_matmul_q4i;
    }
#endif
    return n;
}

Test(quant_kernels, layout_holds_every_code_scale_and_zero) {
    for (int f = 0; f < 3; f++)
        for (int lay = 0; lay < 2; lay++)
        for (int form = 0; form < 4; form++) {   /* f16 scales x uniform zeros */
            const int64_t k = fmts[f] == QWI_QFMT_E4M3 ? 45 : 48;
            const bool f16 = form & 1;
            /* uniform: the symmetric zero, or the contract's edges 0 and 2^bits */
            const int uz = form < 2 ? -1 : lay ? (f == 1 ? 256 : 16) : sym_zero(fmts[f]);
            qdata d = make_qdata_z(fmts[f], 37, k, fmts[f] == QWI_QFMT_E4M3 ? 16 : 12, f16, uz);
            if (form >= 2) share_panel_scales(&d);   /* E4M3: one scale a panel */
            qwi_qpanel qp;
            void *buf = pack(&d, (qwi_qpanel_layout)lay, &qp);
            cr_assert_eq(qp.ngroups, d.G);
            for (int64_t n = 0; n < d.n; n++)
                for (int64_t c = 0; c < d.k; c++) {
                    const double want = deq(&d, n, c), got = qwi_qpanel_get(&qp, n, c);
                    cr_assert(want == got, "%s layout %d form %d (%lld, %lld): %g != %g",
                              fmt_names[fmts[f]], lay, form, (long long)n, (long long)c, got, want);
                }
            /* padded rows of the last panel are zero codes and scales */
            for (int64_t n = d.n; n < 48; n++)
                cr_assert(qwi_qpanel_get(&qp, n, 0) == 0.0 || fmts[f] != QWI_QFMT_E4M3);
            free(buf);
            free_qdata(&d);
        }
}

Test(quant_kernels, zero_point_outside_the_contract_is_refused) {
    qdata d = make_qdata(QWI_QFMT_U4, 16, 32, 16);
    d.zeros[5] = 3.5f;
    size_t bytes = qwi_qpanel_bytes_for(d.fmt, QWI_QPANEL_SEQ, d.n, d.k, d.gk, f16_form(true));
    void *buf = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    qwi_qpanel qp;
    for (int lay = 0; lay < 2; lay++) {
        d.zeros[5] = 3.5f;
        cr_assert_not(qwi_qpanel_pack_codes(d.fmt, (qwi_qpanel_layout)lay, d.n, d.k, d.gk, d.codes,
                                            d.scales, d.zeros, f16_form(true), buf, &qp));
        cr_assert(strstr(qwi_last_error(), "zero point 3.5"), "%s", qwi_last_error());
        d.zeros[5] = 17.0f;
        cr_assert_not(qwi_qpanel_pack_codes(d.fmt, (qwi_qpanel_layout)lay, d.n, d.k, d.gk, d.codes,
                                            d.scales, d.zeros, f16_form(true), buf, &qp));
        cr_assert(strstr(qwi_last_error(), "zero point 17"), "%s", qwi_last_error());
    }
    /* a uniform zero point outside the contract, and a zero point that
     * breaks the promised uniformity */
    for (int64_t i = 0; i < d.n * d.G; i++) d.zeros[i] = 17.0f;
    const qwi_qpanel_form u17 = { .scales_f16 = true, .zero_uniform = true, .zero_all = 17 };
    cr_assert_not(qwi_qpanel_pack_codes(d.fmt, QWI_QPANEL_PAIR, d.n, d.k, d.gk, d.codes, d.scales,
                                        d.zeros, u17, buf, &qp));
    cr_assert(strstr(qwi_last_error(), "zero point 17 is not an integer in [0, 16]"), "%s",
              qwi_last_error());
    for (int64_t i = 0; i < d.n * d.G; i++) d.zeros[i] = 8.0f;
    d.zeros[2 * d.G + 1] = 9.0f;
    const qwi_qpanel_form u8z = { .scales_f16 = true, .zero_uniform = true, .zero_all = 8 };
    cr_assert_not(qwi_qpanel_pack_codes(d.fmt, QWI_QPANEL_PAIR, d.n, d.k, d.gk, d.codes, d.scales,
                                        d.zeros, u8z, buf, &qp));
    cr_assert(strstr(qwi_last_error(), "row 2, group 1: zero point 9 is not the weight's uniform "
                                       "zero point 8"), "%s", qwi_last_error());
    cr_assert_eq(qwi_qpanel_bytes_for(QWI_QFMT_U4, QWI_QPANEL_SEQ, 16, 32, 7, f16_form(true)), 0);   /* odd group */
    /* one E4M3 scale a panel promised, a row of the second panel breaks it */
    qdata e = make_qdata(QWI_QFMT_E4M3, 40, 32, 16);
    share_panel_scales(&e);
    e.scales[21 * e.G + 1] *= 2.0f;
    const qwi_qpanel_form panel = { .scales_per_panel = true };
    void *ebuf = aligned_alloc(64, qwi_qpanel_bytes_for(e.fmt, QWI_QPANEL_PAIR, e.n, e.k, e.gk, panel));
    cr_assert_not(qwi_qpanel_pack_codes(e.fmt, QWI_QPANEL_PAIR, e.n, e.k, e.gk, e.codes, e.scales,
                                        NULL, panel, ebuf, &qp));
    cr_assert(strstr(qwi_last_error(), "row 21, group 1: scale") &&
              strstr(qwi_last_error(), "differs from its 16-row panel's first"), "%s",
              qwi_last_error());
    free(ebuf);
    free_qdata(&e);
    free(buf);
    free_qdata(&d);
}

/* The integer layout's f16 scales and integer zero points (qpanel.h): the
 * bytes they save, and a scale that is no f16 value refused by name. */
Test(quant_kernels, pair_layout_keeps_f16_scales_and_integer_zeros) {
    const int64_t n = 40, k = 256, gk = 128, np = 3, G = 2;
    const size_t codes4 = (size_t)(np * (k / 8) * 64);   /* U4: k / 8 blocks of 64 bytes a panel */
    /* U4: codes, then f16 scales and byte zero points; f32 both without the f16 promise */
    const qwi_qpanel_form uniform = { .scales_f16 = true, .zero_uniform = true, .zero_all = 8 };
    cr_assert_eq(qwi_qpanel_bytes_for(QWI_QFMT_U4, QWI_QPANEL_PAIR, n, k, gk, f16_form(true)),
                 codes4 + 192 /* 3 x 2 x 16 x 2 */ + 128 /* 3 x 2 x 16 x 1, 64-aligned */);
    cr_assert_eq(qwi_qpanel_bytes_for(QWI_QFMT_U4, QWI_QPANEL_PAIR, n, k, gk, f16_form(false)),
                 codes4 + (size_t)(np * G * 16 * 4) + 128);
    cr_assert_eq(qwi_qpanel_bytes_for(QWI_QFMT_U4, QWI_QPANEL_SEQ, n, k, gk, f16_form(true)),
                 codes4 + 2 * (size_t)(np * G * 16 * 4));
    /* uniform zero points: none stored in PAIR; SEQ keeps its f32 zeros */
    cr_assert_eq(qwi_qpanel_bytes_for(QWI_QFMT_U4, QWI_QPANEL_PAIR, n, k, gk, uniform), codes4 + 192);
    cr_assert_eq(qwi_qpanel_bytes_for(QWI_QFMT_U4, QWI_QPANEL_SEQ, n, k, gk, uniform),
                 codes4 + 2 * (size_t)(np * G * 16 * 4));
    /* U8: zero points as uint16 (256 fits), E4M3: f32 scales whatever the flag */
    cr_assert_eq(qwi_qpanel_bytes_for(QWI_QFMT_U8, QWI_QPANEL_PAIR, n, k, gk, f16_form(true)),
                 2 * codes4 + 192 + 192);
    cr_assert_eq(qwi_qpanel_bytes_for(QWI_QFMT_U8, QWI_QPANEL_PAIR, n, k, gk, uniform), 2 * codes4 + 192);
    cr_assert_eq(qwi_qpanel_bytes_for(QWI_QFMT_E4M3, QWI_QPANEL_PAIR, n, k, gk, f16_form(true)),
                 qwi_qpanel_bytes_for(QWI_QFMT_E4M3, QWI_QPANEL_PAIR, n, k, gk, f16_form(false)));
    cr_assert_eq(qwi_qpanel_bytes_for(QWI_QFMT_E4M3, QWI_QPANEL_PAIR, n, k, gk, uniform),
                 qwi_qpanel_bytes_for(QWI_QFMT_E4M3, QWI_QPANEL_PAIR, n, k, gk, f16_form(false)));
    /* E4M3 with one scale a panel: 4 bytes a panel and group (SEQ keeps 16) */
    const qwi_qpanel_form panel = { .scales_per_panel = true };
    cr_assert_eq(qwi_qpanel_bytes_for(QWI_QFMT_E4M3, QWI_QPANEL_PAIR, n, k, gk, panel),
                 2 * codes4 + 64 /* 3 x 2 x 4 = 24, 64-aligned */);
    cr_assert_eq(qwi_qpanel_bytes_for(QWI_QFMT_E4M3, QWI_QPANEL_SEQ, n, k, gk, panel),
                 2 * codes4 + (size_t)(np * G * 16 * 4));
    cr_assert_eq(qwi_qpanel_bytes_for(QWI_QFMT_U8, QWI_QPANEL_PAIR, n, k, gk, panel),
                 qwi_qpanel_bytes_for(QWI_QFMT_U8, QWI_QPANEL_PAIR, n, k, gk, f16_form(false)));
    qdata d = make_qdata_s(QWI_QFMT_U4, n, k, gk, false);   /* f32 scales, no f16 values */
    void *buf = aligned_alloc(64, 1 << 16);
    qwi_qpanel qp;
    cr_assert_not(qwi_qpanel_pack_codes(d.fmt, QWI_QPANEL_PAIR, n, k, gk, d.codes, d.scales,
                                        d.zeros, f16_form(true), buf, &qp));
    cr_assert(strstr(qwi_last_error(), "row 0, group 0: scale") &&
              strstr(qwi_last_error(), "is not an f16 value"), "%s", qwi_last_error());
    /* f16 values at the edges of f16's range pack and read back exactly */
    const float edge[] = { 0x1p-24f, 0x1.ff8p-15f, 0x1p-14f, 65504.0f, 0.0f, 0x1.004p0f,
                           -0x1p-3f, INFINITY };
    free_qdata(&d);
    d = make_qdata_s(QWI_QFMT_U4, n, k, gk, true);
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) d.scales[i * G] = edge[i];
    free(buf);
    buf = pack(&d, QWI_QPANEL_PAIR, &qp);
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) {
        const double got = qwi_qpanel_get(&qp, (int64_t)i, 0), want = deq(&d, (int64_t)i, 0);
        cr_assert(got == want || (isnan(got) && isnan(want)), "edge %zu: %g != %g", i, got, want);
    }
    /* and one step past an f16's precision or range is refused */
    const float bad[] = { 0x1p-25f, 0x1.002p0f, 65536.0f, 0x1.ffcp-15f };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const float keep = d.scales[0];
        d.scales[0] = bad[i];
        cr_assert_not(qwi_qpanel_pack_codes(d.fmt, QWI_QPANEL_PAIR, n, k, gk, d.codes, d.scales,
                                            d.zeros, f16_form(true), buf, &qp), "bad %zu", i);
        d.scales[0] = keep;
    }
    free(buf);
    free_qdata(&d);
}

/* The quantized activation rows of cpu/q4i.h for rows [0, M) of x with
 * Q = qmax, and their byte form where Q <= 127 (QW_NUMERICS_FAST_INT8's
 * int4), else their split byte form (the AVX-512 batch-1 kernels read it at
 * M <= 2 and ignore it above), owned by the caller: free_q4act. */
static qwi_q4act make_q4act_q(const float *x, int64_t M, int64_t K, int64_t gk, int32_t qmax) {
    const int64_t KP = qwi_pair_kp(K), G = QWI_DIV_UP(K, gk);
    uint32_t *q = malloc(sizeof(uint32_t) * (size_t)(M * KP));
    float *dd = malloc(sizeof(float) * (size_t)(M * G));
    int32_t *sum = malloc(sizeof(int32_t) * (size_t)(M * G));
    cr_assert(q && dd && sum);
    cr_assert(qmax > 0);
    qwi_q4i_quantize_rows(x, 0, M, K, gk, qmax, q, dd, sum);
    uint32_t *q8 = NULL;   /* the byte form where Q allows it (int4) */
    if (qmax <= 127) {
        q8 = malloc(sizeof(uint32_t) * (size_t)(M * QWI_Q4I_Q8_WORDS(KP)));
        cr_assert(q8);
        qwi_q4i_bytes_rows(q, 0, M, KP, q8);
    }
    uint32_t *q8s = NULL;
    if (qmax > 127) {
        q8s = malloc(sizeof(uint32_t) * (size_t)(M * 2 * QWI_Q4I_Q8_WORDS(KP)));
        cr_assert(q8s);
        qwi_q4i_split_bytes_rows(q, 0, M, KP, q8s);
    }
    return (qwi_q4act){ .q = q, .d = dd, .sum = sum, .KP = KP, .G = G, .group_k = gk, .qmax = qmax,
                        .q8 = q8, .q8s = q8s };
}

/* The same with the default Q of weights of fmt (U4/U8: qwi_q4i_qmax;
 * E4M3: unused, U4's); int8: QW_NUMERICS_FAST_INT8's for U4 (127). */
static qwi_q4act make_q4act(const float *x, int64_t M, int64_t K, int64_t gk, qwi_qfmt fmt) {
    return make_q4act_q(x, M, K, gk, qwi_q4i_qmax(gk, fmt == QWI_QFMT_E4M3 ? QWI_QFMT_U4 : fmt));
}

static void free_q4act(qwi_q4act *a) {
    free((void *)a->q);
    free((void *)a->q8);
    free((void *)a->q8s);
    free((void *)a->d);
    free((void *)a->sum);
}

/* Activation k of row m as a kernel sees it: x (SEQ), its bf16 rounding
 * (PAIR E4M3), or q * d (PAIR U4/U8, cpu/q4i.h). */
static double seen_x(const qwi_qpanel *qp, const float *x, const uint32_t *xp,
                     const qwi_q4act *a, int64_t m, int64_t k) {
    const int64_t K = qp->k, KP = qwi_pair_kp(K);
    if (qp->layout == QWI_QPANEL_SEQ) return x[m * K + k];
    const bool integer = qp->fmt != QWI_QFMT_E4M3;
    const uint32_t pair = integer ? a->q[m * KP + k / 2] : xp[m * KP + k / 2];
    if (integer)
        return (double)(int16_t)(k & 1 ? pair >> 16 : pair & 0xffff) *
               (double)a->d[m * a->G + k / qp->group_k];
    uint32_t u = k & 1 ? pair & 0xffff0000u : pair << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Run one table's kernel for rows [0, M) and columns [c0, c0 + N) of the
 * weight (c0 a multiple of 16), x f32 rows (SEQ), their bf16 pairs or
 * (U4/U8) their quantized rows a. */
static void run(const qwi_cpu_kernels *kt, const qwi_qpanel *qp, const float *x, const uint32_t *xp,
                const qwi_q4act *a, int64_t M, int64_t c0, int64_t N, const float *bias,
                float *out, int64_t ldo, int accumulate) {
    const float *b = bias ? bias + c0 : NULL;
    if (qp->layout == QWI_QPANEL_SEQ)
        kt->matmul_qf32(x, M, qp->k, qp, c0, N, b, out + c0, ldo, accumulate);
    else if (qp->fmt != QWI_QFMT_E4M3)
        kt->matmul_q4i(a, M, qp, c0, N, b, out + c0, ldo, accumulate);
    else
        kt->matmul_qpair(xp, M, qwi_pair_kp(qp->k), qp, c0, N, b, out + c0, ldo, accumulate);
}

/* The same rows one by one: row m's view of a. */
static qwi_q4act q4_row(const qwi_q4act *a, int64_t m) {
    return (qwi_q4act){ .q = a->q + m * a->KP, .d = a->d + m * a->G, .sum = a->sum + m * a->G,
                        .KP = a->KP, .G = a->G, .group_k = a->group_k, .qmax = a->qmax,
                        .q8 = a->q8 ? a->q8 + m * QWI_Q4I_Q8_WORDS(a->KP) : NULL,
                        .q8s = a->q8s ? a->q8s + m * 2 * QWI_Q4I_Q8_WORDS(a->KP) : NULL };
}

typedef struct shape {
    int64_t n, k, gk;
    int fmt_mask;   /* bit f: fmts[f] */
} shape;

static const shape shapes[] = {
    { 40, 192, 64, 7 },    /* ragged N, 3 groups                                */
    { 33, 200, 64, 4 },    /* FP8: partial last block (8 columns)                */
    { 24, 201, 64, 4 },    /* FP8: odd K (a zero pad column in the last pair)    */
    { 48, 330, 330, 7 },   /* one group per row, longer than a decoded chunk     */
    { 20, 48, 6, 7 },      /* groups that split code blocks (the per-k path)     */
    { 64, 512, 256, 7 },   /* several 128-column chunks per group                */
    { 100, 192, 64, 7 },   /* a full group of 4 interleaved panels, then one
                              of 3 (and n0 = 16 starts inside a group)          */
    { 72, 202, 64, 4 },    /* FP8: 5 interleaved panels, an odd number of pairs */
};

/* The avx512 table's int4/int8 kernel: vpdpwssd where the CPU has
 * AVX512_VNNI (Cascade Lake, Ice Lake), else vpmaddwd with AVX512BW. */
Test(quant_kernels, avx512_table_takes_vnni_where_the_cpu_has_it) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    const qwi_cpu_kernels *a5 = qwi_cpu_kernels_by_name("avx512");
    if (!a5 || !__builtin_cpu_supports("avx512bw")) cr_skip_test("no AVX-512F with AVX512BW here");
    if (__builtin_cpu_supports("avx512vnni"))
        cr_assert(a5->matmul_q4i == qwi_avx512vnni_matmul_q4i);
    else
        cr_assert(a5->matmul_q4i == qwi_avx512_matmul_q4i);
#else
    cr_skip_test("not x86-64");
#endif
}

/* The avx2 table's int4/int8 kernel: the AVX-VNNI instance where CPUID
 * reports AVX-VNNI (Alder Lake and later Intel client cores), else
 * vpmaddwd / vpmaddubsw. */
Test(quant_kernels, avx2_table_takes_avxvnni_where_the_cpu_has_it) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    const qwi_cpu_kernels *a2 = qwi_cpu_kernels_by_name("avx2");
    if (!a2) cr_skip_test("no AVX2 here");
    if (qwi_cpu_has_avxvnni())
        cr_assert(a2->matmul_q4i == qwi_avxvnni_matmul_q4i);
    else
        cr_assert(a2->matmul_q4i == qwi_avx2_matmul_q4i);
    /* and the benchmarks' reports say which one runs */
    cr_assert_str_eq(qwi_cpu_kernels_q4i_isa(a2), qwi_cpu_has_avxvnni() ? "avx-vnni" : "avx2");
    cr_assert_str_eq(qwi_cpu_kernels_q4i_isa(qwi_cpu_kernels_generic()), "portable");
    const qwi_cpu_kernels *a5 = qwi_cpu_kernels_by_name("avx512");
    if (a5 && __builtin_cpu_supports("avx512bw"))
        cr_assert_str_eq(qwi_cpu_kernels_q4i_isa(a5),
                         __builtin_cpu_supports("avx512vnni") ? "avx512-vnni" : "avx512bw");
#else
    cr_skip_test("not x86-64");
#endif
}

/* Every table, format, layout and shape: bit-identical to the generic
 * table, near the float64 product, batched == alone, split == whole. */
Test(quant_kernels, every_table_matches_generic_and_float64, .timeout = 120) {
    const qwi_cpu_kernels *gen = qwi_cpu_kernels_generic();
    /* 59: a 50-row block of the AVX2 fp8 kernel (10 tiles of 5), then one
     * tile of 5 and one of 4 */
    const int64_t Ms[] = { 1, 2, 3, 7, 50, 59 };
    const int64_t MMAX = 59;
    variant vs[MAX_VARIANTS];
    const int nv = table_variants(vs);
    int tables_run = 0;
    for (int t = 0; t < nv; t++) {
        const qwi_cpu_kernels *kt = &vs[t].kt;
        tables_run++;
        cr_assert(kt->matmul_qf32 && kt->matmul_qpair && kt->matmul_q4i,
                  "%s lacks a quantized kernel", vs[t].name);
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int fi = 0; fi < 4; fi++) {
                /* fi 3: int4 again with int8 activations (QW_NUMERICS_FAST_INT8) */
                const int f = fi == 3 ? 0 : fi, int8 = fi == 3;
                const shape *sh = &shapes[si];
                if (!(sh->fmt_mask & (1 << f))) continue;
                if (fmts[f] != QWI_QFMT_E4M3 && sh->k % sh->gk) continue;
                /* f16 scales (the checkpoints' case) on every other shape,
                 * symmetric (uniform) zero points on every third */
                qdata d = make_qdata_z(fmts[f], sh->n, sh->k, sh->gk, si % 2 == 0,
                                       si % 3 == 0 ? sym_zero(fmts[f]) : -1);
                if (si % 3 == 0) share_panel_scales(&d);   /* E4M3: one scale a panel */
                const int64_t K = sh->k, N = sh->n, KP = qwi_pair_kp(K);
                float *x = malloc(sizeof(float) * (size_t)(MMAX * K));
                uint32_t *xp = malloc(sizeof(uint32_t) * (size_t)(MMAX * KP));
                float *bias = malloc(sizeof(float) * (size_t)N);
                float *init = malloc(sizeof(float) * (size_t)(MMAX * N));
                float *o_gen = malloc(sizeof(float) * (size_t)(MMAX * N));
                float *o_tab = malloc(sizeof(float) * (size_t)(MMAX * N));
                float *o_one = malloc(sizeof(float) * (size_t)(MMAX * N));
                for (int64_t i = 0; i < MMAX * K; i++) x[i] = urand();
                for (int64_t i = 0; i < N; i++) bias[i] = urand();
                for (int64_t i = 0; i < MMAX * N; i++) init[i] = urand();
                qwi_pair_round_rows(x, 0, MMAX, K, xp);
                qwi_q4act a = int8 ? make_q4act_q(x, MMAX, K, sh->gk, QWI_Q4I_QMAX_INT8)
                                   : make_q4act(x, MMAX, K, sh->gk, fmts[f]);
                for (int lay = 0; lay < 2; lay++) {
                    if (int8 && lay != QWI_QPANEL_PAIR) continue;   /* exact mode: no activations to quantize */
                    qwi_qpanel qp;
                    void *buf = pack(&d, (qwi_qpanel_layout)lay, &qp);
                    for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
                        const int64_t M = Ms[mi];
                        const int acc = (int)(mi & 1);
                        const float *bs = mi % 3 == 0 ? bias : NULL;
                        memcpy(o_gen, init, sizeof(float) * (size_t)(M * N));
                        memcpy(o_tab, init, sizeof(float) * (size_t)(M * N));
                        run(gen, &qp, x, xp, &a, M, 0, N, bs, o_gen, N, acc);
                        run(kt, &qp, x, xp, &a, M, 0, N, bs, o_tab, N, acc);
                        cr_assert(memcmp(o_gen, o_tab, sizeof(float) * (size_t)(M * N)) == 0,
                                  "%s %s%s layout %d shape %zu M %lld: differs from generic", vs[t].name,
                                  fmt_names[fmts[f]], int8 ? " int8" : "", lay, si, (long long)M);
                        /* int4: the kernels that read the byte form (form 0)
                         * or the split byte form (form 1; M <= 2) give the
                         * same bits without it (from the int16 pairs) */
                        for (int form = 0; form < 2; form++) {
                            if (!(form ? a.q8s : a.q8) || fmts[f] != QWI_QFMT_U4 || lay != QWI_QPANEL_PAIR)
                                continue;
                            qwi_q4act a16 = a;
                            if (form) a16.q8s = NULL;
                            else a16.q8 = NULL;
                            memcpy(o_one, init, sizeof(float) * (size_t)(M * N));
                            kt->matmul_q4i(&a16, M, &qp, 0, N, bs, o_one, N, acc);
                            cr_assert(memcmp(o_one, o_tab, sizeof(float) * (size_t)(M * N)) == 0,
                                      "%s shape %zu M %lld: without the %s differs", vs[t].name, si,
                                      (long long)M, form ? "split byte form" : "byte form");
                        }
                        /* float64 reference of the dequantized weights (x as
                         * the kernel saw it: bf16, or int4/int8's q * d, in the
                         * fast layout) */
                        for (int64_t m = 0; m < M; m++)
                            for (int64_t n = 0; n < N; n++) {
                                double ref = 0, mag = 0;
                                for (int64_t c = 0; c < K; c++) {
                                    const double xv = seen_x(&qp, x, xp, &a, m, c);
                                    ref += xv * deq(&d, n, c);
                                    mag += fabs(xv * deq(&d, n, c));
                                }
                                if (bs) { ref += bs[n]; mag += fabs(bs[n]); }
                                if (acc) { ref += init[m * N + n]; mag += fabs(init[m * N + n]); }
                                const double got = o_tab[m * N + n];
                                cr_assert(fabs(got - ref) <= 4e-6 * mag + 1e-30,
                                          "%s %s layout %d M %lld (%lld, %lld): %.9g vs %.9g (mag %g)",
                                          vs[t].name, fmt_names[fmts[f]], lay, (long long)M,
                                          (long long)m, (long long)n, got, ref, mag);
                            }
                        /* each row alone == its row in the batch */
                        if (M > 1)
                            for (int64_t m = 0; m < M; m++) {
                                memcpy(o_one, init + m * N, sizeof(float) * (size_t)N);
                                const qwi_q4act am = q4_row(&a, m);
                                run(kt, &qp, x + m * K, xp + m * KP, &am, 1, 0, N, bs, o_one, N, acc);
                                cr_assert(memcmp(o_one, o_tab + m * N, sizeof(float) * (size_t)N) == 0,
                                          "%s %s layout %d: row %lld alone differs from M=%lld",
                                          vs[t].name, fmt_names[fmts[f]], lay, (long long)m, (long long)M);
                            }
                        /* the columns from 16 on, as their own call (n0 = 16) */
                        if (N > 16) {
                            memcpy(o_one, init, sizeof(float) * (size_t)(M * N));
                            run(kt, &qp, x, xp, &a, M, 16, N - 16, bs, o_one, N, acc);
                            for (int64_t m = 0; m < M; m++)
                                cr_assert(memcmp(o_one + m * N + 16, o_tab + m * N + 16,
                                                 sizeof(float) * (size_t)(N - 16)) == 0,
                                          "%s %s layout %d: columns 16.. with n0 = 16 differ",
                                          vs[t].name, fmt_names[fmts[f]], lay);
                        }
                    }
                    free(buf);
                }
                free_q4act(&a);
                free(x);
                free(xp);
                free(bias);
                free(init);
                free(o_gen);
                free(o_tab);
                free(o_one);
                free_qdata(&d);
            }
    }
    cr_assert_geq(tables_run, 1);
}

/* The parallel driver: a quantized linear in a fused call next to a plain
 * one, 1 and 2 threads, 5 rows and 1, exact and fast layouts (fast: int16
 * activations, and int8 with room for their byte form, q4_q8): same bits
 * as the kernel (fast U4: the driver quantizes the rows itself, once per
 * call). */
Test(quant_kernels, driver_dispatches_and_splits_deterministically) {
    const qwi_cpu_kernels *kt = qwi_cpu_kernels_select();
    const int64_t M = 5, K = 256, N = 200, G = K / 128;
    qdata d = make_qdata(QWI_QFMT_U4, N, K, 128);
    float *x = malloc(sizeof(float) * (size_t)(M * K)), *wf = malloc(sizeof(float) * (size_t)(48 * K));
    uint32_t *xpair = malloc(sizeof(uint32_t) * (size_t)(M * qwi_pair_kp(K)));
    uint32_t *q4q = malloc(sizeof(uint32_t) * (size_t)(M * qwi_pair_kp(K)));
    uint32_t *q4q8 = malloc(sizeof(uint32_t) * (size_t)(M * QWI_Q4I_Q8_WORDS(qwi_pair_kp(K))));
    float *q4d = malloc(sizeof(float) * (size_t)(M * G));
    int32_t *q4s = malloc(sizeof(int32_t) * (size_t)(M * G));
    float *ref = malloc(sizeof(float) * (size_t)(M * N)), *out = malloc(sizeof(float) * (size_t)(M * N));
    float *out2 = malloc(sizeof(float) * (size_t)(M * 48));
    for (int64_t i = 0; i < M * K; i++) x[i] = urand();
    for (int64_t i = 0; i < 48 * K; i++) wf[i] = urand();
    for (int int8 = 0; int8 < 2; int8++) {
        qwi_q4act a = int8 ? make_q4act_q(x, M, K, 128, QWI_Q4I_QMAX_INT8)
                           : make_q4act(x, M, K, 128, QWI_QFMT_U4);
        for (int lay = int8; lay < 2; lay++)   /* int8: the fast layout only */
            for (int64_t m = M; m >= 1; m -= M - 1) {   /* 5 rows, then 1 */
                qwi_qpanel qp;
                void *buf = pack(&d, (qwi_qpanel_layout)lay, &qp);
                uint32_t *xp = malloc(sizeof(uint32_t) * (size_t)(M * qwi_pair_kp(K)));
                qwi_pair_round_rows(x, 0, M, K, xp);
                run(kt, &qp, x, xp, &a, m, 0, N, NULL, ref, N, 0);
                free(xp);
                for (int threads = 1; threads <= 2; threads++) {
                    qwi_cpu_pool *pool = NULL;
                    cr_assert_eq(qwi_cpu_pool_create(threads, &pool), QW_OK);
                    memset(q4q, 0xa5, sizeof(uint32_t) * (size_t)(M * qwi_pair_kp(K)));
                    qwi_cpu_ctx cx = { .pool = pool, .kt = kt, .nthreads = qwi_cpu_pool_size(pool),
                                       .xpair = xpair, .q4_q = q4q, .q4_d = q4d, .q4_sum = q4s,
                                       .q4_q8 = int8 ? q4q8 : NULL };
                    qwi_cpu_linear q = { .dtype = QWI_DTYPE_F32, .n = N, .k = K, .quant = true, .qp = qp };
                    qwi_cpu_linear plain = { .dtype = QWI_DTYPE_F32, .w = wf, .n = 48, .k = K };
                    qwi_cpu_mm_job jobs[2] = { { &plain, out2, 0 }, { &q, out, 0 } };
                    qwi_cpu_matmul(&cx, x, m, K, jobs, 2);
                    cr_assert(memcmp(out, ref, sizeof(float) * (size_t)(m * N)) == 0,
                              "layout %d, int8 %d, %lld rows, %d threads: the driver's result "
                              "differs from the kernel's",
                              lay, int8, (long long)m, threads);
                    qwi_cpu_pool_destroy(pool);
                }
                free(buf);
            }
        free_q4act(&a);
    }
    free(x);
    free(wf);
    free(xpair);
    free(q4q);
    free(q4q8);
    free(q4d);
    free(q4s);
    free(ref);
    free(out);
    free(out2);
    free_qdata(&d);
}

/* Calls the driver splits: int4 jobs of two group sizes (one quantization
 * per call, so a call per job) next to an int8 job (integer too) and an
 * FP8 PAIR job (which reads bf16 pairs), and more than 8 jobs (task_end
 * holds 8) whose pair-reading job comes after the split -
 * each output must be the job's own call's, so x must be rounded for the
 * pair job whichever part of the split it lands in (and widened, where the
 * table reads it so: each job's own call here reads the pairs); and
 * qwi_cpu_matmul_rounded over rows rounded ahead gives the same bits. */
Test(quant_kernels, driver_splits_keep_every_job_exact) {
    const qwi_cpu_kernels *kt = qwi_cpu_kernels_select();
    const int64_t M = 3, K = 256, N = 48, KP = qwi_pair_kp(K);
    qdata d128 = make_qdata(QWI_QFMT_U4, N, K, 128), d64 = make_qdata(QWI_QFMT_U4, N, K, 64);
    qdata d8 = make_qdata(QWI_QFMT_U8, N, K, 128), dfp8 = make_qdata(QWI_QFMT_E4M3, N, K, 128);
    qwi_qpanel p128, p64, p8, pfp8;
    void *b128 = pack(&d128, QWI_QPANEL_PAIR, &p128), *b64 = pack(&d64, QWI_QPANEL_PAIR, &p64);
    void *b8 = pack(&d8, QWI_QPANEL_PAIR, &p8), *bfp8 = pack(&dfp8, QWI_QPANEL_PAIR, &pfp8);
    qwi_cpu_linear l128 = { .dtype = QWI_DTYPE_F32, .n = N, .k = K, .quant = true, .qp = p128 };
    qwi_cpu_linear l64 = { .dtype = QWI_DTYPE_F32, .n = N, .k = K, .quant = true, .qp = p64 };
    qwi_cpu_linear l8 = { .dtype = QWI_DTYPE_F32, .n = N, .k = K, .quant = true, .qp = p8 };
    qwi_cpu_linear lfp8 = { .dtype = QWI_DTYPE_F32, .n = N, .k = K, .quant = true, .qp = pfp8 };
    float *x = malloc(sizeof(float) * (size_t)(M * K));
    for (int64_t i = 0; i < M * K; i++) x[i] = urand();
    uint32_t *xpair = malloc(sizeof(uint32_t) * (size_t)(M * KP));
    float *xwide = malloc(sizeof(float) * (size_t)(2 * M * KP));   /* used where kt reads it */
    uint32_t *q4q = malloc(sizeof(uint32_t) * (size_t)(M * KP));
    uint32_t *q4q8 = malloc(sizeof(uint32_t) * (size_t)(M * QWI_Q4I_Q8_WORDS(KP)));
    float *q4d = malloc(sizeof(float) * (size_t)(M * (K / 64)));
    int32_t *q4s = malloc(sizeof(int32_t) * (size_t)(M * (K / 64)));
    enum { NJ = 10 };
    float *out[NJ], *want[NJ];
    for (int j = 0; j < NJ; j++) {
        out[j] = malloc(sizeof(float) * (size_t)(M * N));
        want[j] = malloc(sizeof(float) * (size_t)(M * N));
    }
    qwi_cpu_pool *pool = NULL;
    cr_assert_eq(qwi_cpu_pool_create(2, &pool), QW_OK);
    qwi_cpu_ctx cx = { .pool = pool, .kt = kt, .nthreads = qwi_cpu_pool_size(pool), .xpair = xpair,
                       .xwide = xwide, .q4_q = q4q, .q4_d = q4d, .q4_sum = q4s };
    /* mixed groups: 128, 64, then the int8 and FP8 jobs; 8 int4 jobs, then
     * int8 (group 128; one quantization with int4's, or its own where int4
     * takes int8 activations) and FP8; int4 and
     * int8 of one group alone */
    const qwi_cpu_linear *mixed[4] = { &l128, &l64, &l8, &lfp8 };
    const qwi_cpu_linear *many[NJ];
    for (int j = 0; j < NJ - 2; j++) many[j] = &l128;
    many[NJ - 2] = &l8;
    many[NJ - 1] = &lfp8;
    const qwi_cpu_linear *both[2] = { &l8, &l128 };
    const struct { const qwi_cpu_linear *const *lins; int n; } calls[3] = {
        { mixed, 4 }, { many, NJ }, { both, 2 } };
    /* ci 3..5: the same calls with int8 activations for int4 (q4_q8 set) */
    for (int ci6 = 0; ci6 < 6; ci6++) {
        const int ci = ci6 % 3;
        cx.q4_q8 = ci6 >= 3 ? q4q8 : NULL;
        qwi_cpu_mm_job jobs[NJ];
        for (int j = 0; j < calls[ci].n; j++) {
            qwi_cpu_mm_job one = { calls[ci].lins[j], want[j], 0 };
            memset(xpair, 0xa5, sizeof(uint32_t) * (size_t)(M * KP));   /* stale pairs */
            /* the reference call reads the pairs (no xwide): the calls
             * below, with xwide, must match it where the table widens */
            qwi_cpu_ctx narrow = cx;
            narrow.xwide = NULL;
            qwi_cpu_matmul(&narrow, x, M, K, &one, 1);
            jobs[j] = (qwi_cpu_mm_job){ calls[ci].lins[j], out[j], 0 };
        }
        for (int pass = 0; pass < 2; pass++) {
            memset(xpair, 0xa5, sizeof(uint32_t) * (size_t)(M * KP));
            memset(xwide, 0xa5, sizeof(float) * (size_t)(2 * M * KP));
            if (pass == 0) qwi_cpu_matmul(&cx, x, M, K, jobs, calls[ci].n);
            else {
                qwi_pair_round_rows(x, 0, M, K, xpair);
                qwi_cpu_matmul_rounded(&cx, x, M, K, jobs, calls[ci].n);
            }
            for (int j = 0; j < calls[ci].n; j++)
                cr_assert(memcmp(out[j], want[j], sizeof(float) * (size_t)(M * N)) == 0,
                          "call %d (%d jobs), %s: job %d differs from its own call", ci6, calls[ci].n,
                          pass ? "rounded ahead" : "rounded by the driver", j);
        }
    }
    qwi_cpu_pool_destroy(pool);
    for (int j = 0; j < NJ; j++) {
        free(out[j]);
        free(want[j]);
    }
    free(x);
    free(xpair);
    free(xwide);
    free(q4q);
    free(q4q8);
    free(q4d);
    free(q4s);
    free(b128);
    free(b64);
    free(b8);
    free(bfp8);
    free_qdata(&d128);
    free_qdata(&d64);
    free_qdata(&d8);
    free_qdata(&dfp8);
}

/* ---- packing from qwi_qweight (the loader's form) -------------------------- */

static void check_pack_matches_qweight(const qwi_qweight *w) {
    for (int lay = 0; lay < 2; lay++) {
        size_t bytes = qwi_qpanel_bytes(w, (qwi_qpanel_layout)lay);
        cr_assert(bytes > 0);
        void *buf = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        qwi_qpanel qp;
        cr_assert(qwi_qpanel_pack(w, (qwi_qpanel_layout)lay, buf, &qp), "%s", qwi_last_error());
        for (int64_t n = 0; n < w->n; n++)
            for (int64_t c = 0; c < w->k; c++)
                cr_assert(qwi_qpanel_get(&qp, n, c) == qwi_qweight_get(w, n, c),
                          "layout %d (%lld, %lld): %g != %g", lay, (long long)n, (long long)c,
                          qwi_qpanel_get(&qp, n, c), qwi_qweight_get(w, n, c));
        free(buf);
    }
}

/* Blocks of 16 and 32 rows hold whole panels (one scale a panel and group
 * in the fast layout, qpanel.h); blocks of 8 do not. */
Test(quant_kernels, packs_an_fp8_block_scaled_qweight) {
    const int64_t n = 40, k = 72, bk = 32;   /* partial last blocks both ways */
    const int64_t bns[] = { 16, 8, 32 };
    for (size_t b = 0; b < sizeof bns / sizeof bns[0]; b++) {
        const int64_t bn = bns[b], sn = QWI_DIV_UP(n, bn), sk = QWI_DIV_UP(k, bk);
        uint8_t *q = malloc((size_t)(n * k));
        float *s = malloc(sizeof(float) * (size_t)(sn * sk));
        for (int64_t i = 0; i < n * k; i++) {
            q[i] = (uint8_t)rnd();
            if (qwi_e4m3_is_nan(q[i])) q[i] = 0x01;
        }
        for (int64_t i = 0; i < sn * sk; i++) s[i] = 0.001f + 0.01f * fabsf(urand());
        qwi_qweight w = { .method = QWI_QUANT_FP8, .fmt = QWI_QFMT_E4M3, .n = n, .k = k,
                          .group_k = bk, .group_n = bn };
        w.qweight = (qwi_tensor){ .name = "l.weight", .dtype = QWI_DTYPE_F8_E4M3, .ndim = 2,
                                  .shape = { n, k }, .data = q, .nbytes = (size_t)(n * k) };
        w.scales = (qwi_tensor){ .name = "l.weight_scale_inv", .dtype = QWI_DTYPE_F32, .ndim = 2,
                                 .shape = { sn, sk }, .data = s,
                                 .nbytes = sizeof(float) * (size_t)(sn * sk) };
        check_pack_matches_qweight(&w);
        cr_assert_eq(qwi_qpanel_form_of(&w).scales_per_panel, bn % 16 == 0);
        void *buf = aligned_alloc(64, qwi_qpanel_bytes(&w, QWI_QPANEL_PAIR));
        qwi_qpanel qp;
        cr_assert(qwi_qpanel_pack(&w, QWI_QPANEL_PAIR, buf, &qp), "%s", qwi_last_error());
        cr_assert_eq(qp.scale_per_panel, bn % 16 == 0, "block rows %lld", (long long)bn);
        free(buf);
        free(q);
        free(s);
    }
}

/* GPTQ int4 with its scales tensor in F32 and in F16 (the usual case: the
 * integer layout then keeps them in 2 bytes, qpanel.h). */
Test(quant_kernels, packs_a_gptq_int4_qweight) {
    const int64_t n = 40, k = 64, gk = 32, G = k / gk;
    uint32_t *q = malloc(sizeof(uint32_t) * (size_t)(k / 8 * n));
    uint32_t *z = malloc(sizeof(uint32_t) * (size_t)(G * n / 8));
    float *s = malloc(sizeof(float) * (size_t)(G * n));
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)(G * n));
    for (int64_t i = 0; i < k / 8 * n; i++) q[i] = rnd() ^ (rnd() << 16);
    for (int64_t i = 0; i < G * n / 8; i++) z[i] = rnd() ^ (rnd() << 16);
    for (int64_t i = 0; i < G * n; i++) {
        h[i] = (uint16_t)(0x1c00 + rnd() % 0x1400);   /* 2^-8 .. 2^-3 */
        s[i] = qwi_f16_to_f32(h[i]);
    }
    for (int f16 = 0; f16 < 2; f16++) {
        qwi_qweight w = { .method = QWI_QUANT_GPTQ, .fmt = QWI_QFMT_U4, .n = n, .k = k,
                          .group_k = gk, .group_n = 1, .zero_offset = 1 };
        w.qweight = (qwi_tensor){ .name = "l.qweight", .dtype = QWI_DTYPE_I32, .ndim = 2,
                                  .shape = { k / 8, n }, .data = q, .nbytes = 4 * (size_t)(k / 8 * n) };
        w.qzeros = (qwi_tensor){ .name = "l.qzeros", .dtype = QWI_DTYPE_I32, .ndim = 2,
                                 .shape = { G, n / 8 }, .data = z, .nbytes = 4 * (size_t)(G * n / 8) };
        w.scales = (qwi_tensor){ .name = "l.scales", .dtype = f16 ? QWI_DTYPE_F16 : QWI_DTYPE_F32,
                                 .ndim = 2, .shape = { G, n }, .data = f16 ? (void *)h : (void *)s,
                                 .nbytes = (f16 ? 2 : 4) * (size_t)(G * n) };
        check_pack_matches_qweight(&w);
        cr_assert_lt(qwi_qpanel_bytes(&w, QWI_QPANEL_PAIR), qwi_qpanel_bytes(&w, QWI_QPANEL_SEQ));
        if (f16) {
            void *buf = aligned_alloc(64, qwi_qpanel_bytes(&w, QWI_QPANEL_PAIR));
            qwi_qpanel qp;
            cr_assert(qwi_qpanel_pack(&w, QWI_QPANEL_PAIR, buf, &qp));
            cr_assert(qp.scales_h && !qp.scales && qp.zeros_i && !qp.zeros);
            free(buf);
        }
    }
    free(q);
    free(z);
    free(s);
    free(h);
}

/* A symmetric checkpoint's zero points found in its qzeros (every word
 * and every field of a word equal) and packed as none (qpanel.h). */
Test(quant_kernels, uniform_zero_points_are_found_and_not_stored) {
    const int64_t n = 32, k = 64, gk = 32, G = k / gk;
    uint32_t q[64 / 4 * 32], z[2 * 32 / 4];
    uint16_t h[2 * 32];
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) q[i] = rnd() ^ (rnd() << 16);
    for (int64_t i = 0; i < G * n; i++) h[i] = (uint16_t)(0x1c00 + rnd() % 0x1400);
    const struct { qwi_quant_method m; qwi_qfmt fmt; uint32_t word; int32_t offset, want; } cases[] = {
        { QWI_QUANT_GPTQ, QWI_QFMT_U4, 0x77777777u, 1, 8 },      /* v1: stored zero - 1 */
        { QWI_QUANT_GPTQ, QWI_QFMT_U4, 0x88888888u, 0, 8 },      /* v2 */
        { QWI_QUANT_GPTQ, QWI_QFMT_U8, 0x7f7f7f7fu, 1, 128 },
        { QWI_QUANT_AWQ, QWI_QFMT_U4, 0x55555555u, 0, 5 },
        { QWI_QUANT_GPTQ, QWI_QFMT_U4, 0x77777787u, 1, -1 },     /* one field differs */
        { QWI_QUANT_GPTQ, QWI_QFMT_U8, 0x7f7f7f7eu, 1, -1 },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int per = cases[c].fmt == QWI_QFMT_U8 ? 4 : 8;
        const int64_t nz = G * n / per;
        for (int64_t i = 0; i < nz; i++) z[i] = cases[c].word;
        qwi_qweight w = { .method = cases[c].m, .fmt = cases[c].fmt, .n = n, .k = k, .group_k = gk,
                          .group_n = 1, .zero_offset = cases[c].offset };
        const int64_t qr = cases[c].m == QWI_QUANT_AWQ ? k : k / per, qc = cases[c].m == QWI_QUANT_AWQ ? n / 8 : n;
        w.qweight = (qwi_tensor){ .name = "l.qweight", .dtype = QWI_DTYPE_I32, .ndim = 2,
                                  .shape = { qr, qc }, .data = q, .nbytes = 4 * (size_t)(qr * qc) };
        w.qzeros = (qwi_tensor){ .name = "l.qzeros", .dtype = QWI_DTYPE_I32, .ndim = 2,
                                 .shape = { G, n / per }, .data = z, .nbytes = 4 * (size_t)nz };
        w.scales = (qwi_tensor){ .name = "l.scales", .dtype = QWI_DTYPE_F16, .ndim = 2,
                                 .shape = { G, n }, .data = h, .nbytes = 2 * (size_t)(G * n) };
        for (int last = 0; last < 2; last++) {   /* last: the final word differs */
            if (last) z[nz - 1] ^= 0x10u;
            int32_t got = -7;
            const bool uniform = qwi_qweight_uniform_zero(&w, &got);
            const bool want = cases[c].want >= 0 && !last;
            cr_assert_eq(uniform, want, "case %zu, last %d", c, last);
            cr_assert_eq(got, want ? cases[c].want : -7, "case %zu: *zero %d", c, (int)got);
            check_pack_matches_qweight(&w);
            void *buf = aligned_alloc(64, qwi_qpanel_bytes(&w, QWI_QPANEL_PAIR));
            qwi_qpanel qp;
            cr_assert(qwi_qpanel_pack(&w, QWI_QPANEL_PAIR, buf, &qp), "%s", qwi_last_error());
            cr_assert_eq(qp.zeros_i == NULL, want, "case %zu, last %d", c, last);
            cr_assert_eq(qp.zero_all, want ? cases[c].want : 0);
            free(buf);
        }
    }
    qwi_qweight fp8 = { .method = QWI_QUANT_FP8, .fmt = QWI_QFMT_E4M3 };
    int32_t got = -7;
    cr_assert_not(qwi_qweight_uniform_zero(&fp8, &got));
    cr_assert_eq(got, -7);
}

/* ---- the integer matmul's activation quantization (cpu/q4i.h) ----------- */

Test(quant_kernels, q4i_levels_keep_the_int32_sums_exact) {
    cr_assert_eq(qwi_q4i_qmax(128, QWI_QFMT_U4), 32767);
    cr_assert_eq(qwi_q4i_qmax(4096, QWI_QFMT_U4), 32767);
    cr_assert_eq(qwi_q4i_qmax(12288, QWI_QFMT_U4), 10922);  /* (2^31 - 1) / (16 * 12288) */
    cr_assert_eq(qwi_q4i_qmax(128, QWI_QFMT_U8), 32767);
    cr_assert_eq(qwi_q4i_qmax(256, QWI_QFMT_U8), 32767);    /* (2^31 - 1) / (256 * 256) */
    cr_assert_eq(qwi_q4i_qmax(512, QWI_QFMT_U8), 16383);
    cr_assert_eq(qwi_q4i_qmax(12288, QWI_QFMT_U8), 682);
    cr_assert_eq(qwi_q4i_qmax(0, QWI_QFMT_U4), 0);
    cr_assert_eq(qwi_q4i_qmax(7, QWI_QFMT_U4), 0);             /* odd */
    cr_assert_eq(qwi_q4i_qmax(128, QWI_QFMT_E4M3), 0);         /* not an integer format */
    cr_assert_eq(qwi_q4i_qmax(2000000, QWI_QFMT_U4), 0);       /* fewer than 127 levels */
    cr_assert_eq(qwi_q4i_qmax(70000, QWI_QFMT_U8), 0);
    cr_assert_gt(qwi_q4i_qmax(70000, QWI_QFMT_U4), 0);
    /* and such a weight cannot be packed for the fast kernels */
    cr_assert_eq(qwi_qpanel_bytes_for(QWI_QFMT_U4, QWI_QPANEL_PAIR, 16, 2000000, 2000000, f16_form(true)), 0);
    cr_assert_gt(qwi_qpanel_bytes_for(QWI_QFMT_U4, QWI_QPANEL_SEQ, 16, 2000000, 2000000, f16_form(true)), 0);
    cr_assert_eq(qwi_qpanel_bytes_for(QWI_QFMT_U8, QWI_QPANEL_PAIR, 16, 70000, 70000, f16_form(true)), 0);
    cr_assert_gt(qwi_qpanel_bytes_for(QWI_QFMT_U8, QWI_QPANEL_SEQ, 16, 70000, 70000, f16_form(true)), 0);
}

/* The byte form of int4's activations (cpu/q4i.h): each block's two words
 * hold columns k0, k0+4, k0+1, k0+5 | k0+2, k0+6, k0+3, k0+7, columns past
 * K are 0 (odd K: a pad column and a partial last block). */
Test(quant_kernels, q4i_byte_form_follows_the_block_order) {
    static const int COL[8] = { 0, 4, 1, 5, 2, 6, 3, 7 };   /* byte i of a block: column */
    const int64_t M = 2, K = 21, gk = 22, KP = qwi_pair_kp(K), W = QWI_Q4I_Q8_WORDS(KP);
    float x[2 * 21];
    for (int64_t i = 0; i < M * K; i++) x[i] = urand();
    uint32_t q[2 * 11], q8[2 * 6];
    float d[2];
    int32_t sum[2];
    cr_assert_eq(W, 6);
    qwi_q4i_quantize_rows(x, 0, M, K, gk, 127, q, d, sum);
    memset(q8, 0xa5, sizeof q8);
    qwi_q4i_bytes_rows(q, 0, M, KP, q8);
    for (int64_t m = 0; m < M; m++)
        for (int64_t b = 0; b < W / 2; b++)
            for (int i = 0; i < 8; i++) {
                const int64_t k = 8 * b + COL[i];
                const uint32_t word = q8[m * W + 2 * b + i / 4];
                const int8_t got = (int8_t)(word >> (8 * (i % 4)));
                const int16_t want =
                    k < K ? (int16_t)(k & 1 ? q[m * KP + k / 2] >> 16 : q[m * KP + k / 2] & 0xffff) : 0;
                cr_assert_eq(got, want, "row %lld block %lld byte %d", (long long)m, (long long)b, i);
            }
    /* The split form at the default Q, with the edges of its bytes in row
     * 0 (-Q, -257, -256, -255, -1, 0, 1, 255, 256, Q): the low bytes (as
     * unsigned) and 256 times the high bytes (as signed) add up to q, in
     * the same places. */
    static const int16_t EDGE[10] = { -32767, -257, -256, -255, -1, 0, 1, 255, 256, 32767 };
    uint32_t q8s[2 * 2 * 6];
    qwi_q4i_quantize_rows(x, 0, M, K, gk, 32767, q, d, sum);
    for (int e = 0; e < 10; e++) {
        const uint32_t v = (uint16_t)EDGE[e];
        q[e] = e % 2 ? (q[e] & 0xffff0000u) | v : (q[e] & 0xffffu) | (v << 16);
    }
    memset(q8s, 0xa5, sizeof q8s);
    qwi_q4i_split_bytes_rows(q, 0, M, KP, q8s);
    int edges_seen = 0;
    for (int64_t m = 0; m < M; m++)
        for (int64_t b = 0; b < W / 2; b++)
            for (int i = 0; i < 8; i++) {
                const int64_t k = 8 * b + COL[i];
                const uint32_t lo = q8s[m * 2 * W + 2 * b + i / 4], hi = q8s[m * 2 * W + W + 2 * b + i / 4];
                const int32_t got = (int32_t)(uint8_t)(lo >> (8 * (i % 4))) +
                                    256 * (int32_t)(int8_t)(hi >> (8 * (i % 4)));
                const int16_t want =
                    k < K ? (int16_t)(k & 1 ? q[m * KP + k / 2] >> 16 : q[m * KP + k / 2] & 0xffff) : 0;
                cr_assert_eq(got, want, "split: row %lld block %lld byte %d", (long long)m, (long long)b, i);
                for (int e = 0; e < 10; e++) edges_seen += m == 0 && k < K && want == EDGE[e];
            }
    cr_assert_geq(edges_seen, 10);
}

/* The int4 kernels' largest sums: every code 15 (zero 0) against every
 * activation at +Q or -Q, Q = 127 (the byte form) and 32767 (the split
 * byte form: low bytes 1 or 255, high bytes 127 or -128), in groups long
 * enough for whole runs of blocks (vpmaddubsw's int16 sums and their
 * 4-block runs at their bounds), at 1-2
 * rows (the direct kernels) and 5 (the decoded chunks: a 4-row tile and
 * a 1-row one): each table gives the generic table's bits, and the exact
 * value. */
Test(quant_kernels, q4i_int4_extreme_sums_stay_exact) {
    const int64_t N = 64, K = 512;
    const int64_t gks[] = { 32, 128, 512 };
    variant vs[MAX_VARIANTS];
    const int nv = table_variants(vs);
    enum { MX = 5 };
    float *x = malloc(sizeof(float) * MX * (size_t)K), o_gen[MX * 64], o_tab[MX * 64];
    cr_assert(x);
    for (size_t gi = 0; gi < sizeof gks / sizeof gks[0]; gi++) {
        qdata d = make_qdata(QWI_QFMT_U4, N, K, gks[gi]);
        memset(d.codes, 15, (size_t)(N * K));
        for (int64_t i = 0; i < N * d.G; i++) {
            d.zeros[i] = 0.0f;
            d.scales[i] = 1.0f;
        }
        qwi_qpanel qp;
        void *buf = pack(&d, QWI_QPANEL_PAIR, &qp);
        for (int sign = -1; sign <= 1; sign += 2) {
            for (int64_t i = 0; i < MX * K; i++) x[i] = (float)sign * ((i / K) % 2 ? 0.5f : 3.0f);
            for (int qi = 0; qi < 2; qi++) {   /* int8 activations (the byte form); the split form */
                const int32_t Q = qi ? qwi_q4i_qmax(gks[gi], QWI_QFMT_U4) : QWI_Q4I_QMAX_INT8;
                qwi_q4act a = make_q4act_q(x, MX, K, gks[gi], Q);
                cr_assert(qi ? a.q8s != NULL && Q == 32767 : a.q8 != NULL);
                for (int64_t M = 1; M <= MX; M += M == 2 ? 3 : 1) {
                    vs[0].kt.matmul_q4i(&a, M, &qp, 0, N, NULL, o_gen, N, 0);
                    for (int64_t m = 0; m < M; m++)
                        for (int64_t n = 0; n < N; n++) {
                            /* 15 * Q * K, times d = amax / Q */
                            const double want = (double)sign * 15.0 * K * (m % 2 ? 0.5 : 3.0);
                            cr_assert(fabs(o_gen[m * N + n] - want) <= 1e-6 * fabs(want),
                                      "gk %lld: %g vs %g", (long long)gks[gi], (double)o_gen[m * N + n], want);
                        }
                    for (int t = 1; t < nv; t++) {
                        vs[t].kt.matmul_q4i(&a, M, &qp, 0, N, NULL, o_tab, N, 0);
                        cr_assert(memcmp(o_gen, o_tab, sizeof(float) * (size_t)(M * N)) == 0,
                                  "%s gk %lld sign %d Q %d M %lld: differs from generic", vs[t].name,
                                  (long long)gks[gi], sign, Q, (long long)M);
                    }
                }
                free_q4act(&a);
            }
        }
        free(buf);
        free_qdata(&d);
    }
    free(x);
}

/* Values spanning 2^-20 .. 2^12 within a group. */
static void wide_rows(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = urand() * ldexpf(1.0f, (int)(rnd() % 33) - 20);
}

/* The dispatched (AVX2) quantizer gives the portable loop's bits; every
 * value is within half a step of x, the sums are the sums, the extremes
 * reach Q; an all-zero group gives 0, a NaN or infinity d = NaN and 0s, a
 * group below 2^-100 0s; a NaN row's outputs are NaN in every table and the
 * other rows' are untouched. */
Test(quant_kernels, q4i_activations_follow_the_contract) {
    const int64_t M = 4, K = 1185, gk = 296;   /* odd K, a short last group */
    const int64_t KP = qwi_pair_kp(K), G = QWI_DIV_UP(K, gk);
    const int32_t Q = qwi_q4i_qmax(gk, QWI_QFMT_U4);
    float *x = malloc(sizeof(float) * (size_t)(M * K));
    wide_rows(x, M * K);
    for (int64_t k = 0; k < gk; k++) x[1 * K + k] = 0.0f;                  /* row 1 group 0: zero */
    for (int64_t k = gk; k < 2 * gk; k++) x[1 * K + k] = 0x1p-110f;       /* row 1 group 1: tiny */
    x[2 * K + 2 * gk + 5] = NAN;                                           /* row 2 group 2 */
    x[3 * K + 7] = -INFINITY;                                              /* row 3 group 0 */
    uint32_t *q1 = malloc(sizeof(uint32_t) * (size_t)(M * KP)), *q2 = malloc(sizeof(uint32_t) * (size_t)(M * KP));
    float *d1 = malloc(sizeof(float) * (size_t)(M * G)), *d2 = malloc(sizeof(float) * (size_t)(M * G));
    int32_t *s1 = malloc(sizeof(int32_t) * (size_t)(M * G)), *s2 = malloc(sizeof(int32_t) * (size_t)(M * G));
    memset(q1, 0xa5, sizeof(uint32_t) * (size_t)(M * KP));
    memset(q2, 0x5a, sizeof(uint32_t) * (size_t)(M * KP));
    qwi_q4i_quantize_rows_portable(x, 0, M, K, gk, Q, q1, d1, s1);
    qwi_q4i_quantize_rows(x, 0, M, K, gk, Q, q2, d2, s2);
    cr_assert(memcmp(q1, q2, sizeof(uint32_t) * (size_t)(M * KP)) == 0, "q differs");
    cr_assert(memcmp(d1, d2, sizeof(float) * (size_t)(M * G)) == 0, "d differs");
    cr_assert(memcmp(s1, s2, sizeof(int32_t) * (size_t)(M * G)) == 0, "sums differ");
    for (int64_t m = 0; m < M; m++) {
        cr_assert_eq(q1[m * KP + KP - 1] >> 16, 0, "the pad column of an odd K is 0");
        for (int64_t g = 0; g < G; g++) {
            const float dg = d1[m * G + g];
            const bool nan_group = (m == 2 && g == 2) || (m == 3 && g == 0);
            const bool zero_group = m == 1 && g < 2;
            int64_t sum = 0, top = 0;
            for (int64_t k = g * gk; k < QWI_MIN(K, (g + 1) * gk); k++) {
                const uint32_t pair = q1[m * KP + k / 2];
                const int16_t q = (int16_t)(k & 1 ? pair >> 16 : pair & 0xffff);
                sum += q;
                top = QWI_MAX(top, (int64_t)abs(q));
                cr_assert(q >= -Q && q <= Q);
                if (nan_group || zero_group) {
                    cr_assert_eq(q, 0);
                    continue;
                }
                cr_assert(fabs((double)x[m * K + k] - (double)q * dg) <= 0.5000001 * dg,
                          "row %lld col %lld: %g vs %d * %g", (long long)m, (long long)k,
                          (double)x[m * K + k], q, (double)dg);
            }
            cr_assert_eq(sum, s1[m * G + g]);
            if (nan_group) cr_assert(isnan(dg), "row %lld group %lld: d = %g", (long long)m, (long long)g, (double)dg);
            else if (zero_group) cr_assert_eq(dg, 0.0f);
            else cr_assert_eq(top, Q, "the group's largest value reaches Q");
        }
    }
    /* a NaN row: NaN outputs in every table, the other rows as computed alone */
    const int64_t N = 32;
    qdata d = make_qdata(QWI_QFMT_U4, N, K, gk);
    qwi_qpanel qp;
    void *buf = pack(&d, QWI_QPANEL_PAIR, &qp);
    const qwi_q4act a = { .q = q1, .d = d1, .sum = s1, .KP = KP, .G = G, .group_k = gk, .qmax = Q };
    float *o = malloc(sizeof(float) * (size_t)(M * N)), *o1 = malloc(sizeof(float) * (size_t)N);
    variant vs[MAX_VARIANTS];
    const int nv = table_variants(vs);
    for (int t = 0; t < nv; t++) {
        const qwi_cpu_kernels *kt = &vs[t].kt;
        kt->matmul_q4i(&a, M, &qp, 0, N, NULL, o, N, 0);
        for (int64_t n = 0; n < N; n++) cr_assert(isnan(o[2 * N + n]) && isnan(o[3 * N + n]), "%s", vs[t].name);
        const qwi_q4act a0 = q4_row(&a, 0);
        kt->matmul_q4i(&a0, 1, &qp, 0, N, NULL, o1, N, 0);
        cr_assert(memcmp(o1, o, sizeof(float) * (size_t)N) == 0, "%s: row 0", vs[t].name);
    }
    free(buf);
    free_qdata(&d);
    free(o);
    free(o1);
    free(x);
    free(q1);
    free(q2);
    free(d1);
    free(d2);
    free(s1);
    free(s2);
}

/* Every table's batch-1 and batch-2 kernels (the paths that prefetch,
 * cpu/gemv_prefetch.h) give the generic table's bits at the prefetch
 * distance QWINFER_GEMV_PREFETCH sets - prefetches past the end of the
 * codes never fault and change no result. Each Criterion test is its own
 * process, so the distance (read once) is the one set here. */
static void gemv_matches_generic_at(const char *distance) {
    setenv("QWINFER_GEMV_PREFETCH", distance, 1);
    const qwi_cpu_kernels *gen = qwi_cpu_kernels_generic();
    const int64_t N = 80, K = 512, GK = 128, KP = qwi_pair_kp(K);
    float *x = malloc(sizeof(float) * 2 * K), *o_gen = malloc(sizeof(float) * 2 * N),
          *o_tab = malloc(sizeof(float) * 2 * N);
    uint32_t *xp = malloc(sizeof(uint32_t) * 2 * KP);
    cr_assert(x && o_gen && o_tab && xp);
    for (int64_t i = 0; i < 2 * K; i++) x[i] = urand();
    qwi_pair_round_rows(x, 0, 2, K, xp);
    qwi_q4act a8 = make_q4act(x, 2, K, GK, QWI_QFMT_U8);   /* Q 32767 */
    qwi_q4act a4 = make_q4act(x, 2, K, GK, QWI_QFMT_U4);   /* Q 32767 */
    qwi_q4act a4i8 = make_q4act_q(x, 2, K, GK, QWI_Q4I_QMAX_INT8);   /* 127, the byte form */
    int compared = 0;
    variant vs[MAX_VARIANTS];
    const int nv = table_variants(vs);
    for (int t = 1; t < nv; t++) {   /* vs[0]: generic */
        const qwi_cpu_kernels *kt = &vs[t].kt;
        for (int f = 0; f < 3; f++) {
            qdata d = make_qdata(fmts[f], N, K, GK);
            for (int lay = 0; lay < 2; lay++) {
                qwi_qpanel qp;
                void *buf = pack(&d, (qwi_qpanel_layout)lay, &qp);
                for (int64_t M = 1; M <= 4; M++) {   /* 3, 4: M 1, 2 with int8 activations */
                    const qwi_q4act *a = fmts[f] == QWI_QFMT_U8 ? &a8 : M > 2 ? &a4i8 : &a4;
                    if (M > 2 && fmts[f] != QWI_QFMT_U4) break;
                    const int64_t m = M > 2 ? M - 2 : M;
                    run(gen, &qp, x, xp, a, m, 0, N, NULL, o_gen, N, 0);
                    run(kt, &qp, x, xp, a, m, 0, N, NULL, o_tab, N, 0);
                    cr_assert(memcmp(o_gen, o_tab, sizeof(float) * (size_t)(m * N)) == 0,
                              "%s %s%s layout %d M %lld, prefetch %s: differs from generic",
                              vs[t].name, fmt_names[fmts[f]], M > 2 ? " int8" : "", lay, (long long)m,
                              distance);
                    compared++;
                }
                free(buf);
            }
            free_qdata(&d);
        }
    }
    if (!compared) cr_skip_test("no ISA table on this CPU");
    free_q4act(&a8);
    free_q4act(&a4);
    free_q4act(&a4i8);
    free(x);
    free(xp);
    free(o_gen);
    free(o_tab);
}

Test(quant_kernels, gemv_without_prefetch_distance_matches_generic) { gemv_matches_generic_at("0"); }

Test(quant_kernels, gemv_prefetching_64_kib_past_the_codes_matches_generic) {
    gemv_matches_generic_at("65536");
}
