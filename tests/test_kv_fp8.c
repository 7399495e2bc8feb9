/*
 * test_kv_fp8.c - the fp8 (e4m3) KV cache's kernels: the write rounding
 * with a scale, the K tile widen/transpose (every table bit-identical to
 * the generic one, all 256 byte patterns), P.V (every code widened to
 * qwi_e4m3_to_f32's bits by every table; avx2 == avx512 ==
 * avx512vbmi bit for bit, the generic table within rounding, all against a
 * float64 reference; batched == alone), and attention over a paged fp8
 * cache with per-layer scales against float64 attention, for every table
 * (avx512vbmi's scores from the K planes included: the same bits as
 * avx512's).
 *
 * Tolerances (max abs error, unit-scale data, contexts up to 300):
 * against float64 attention over the *dequantized* K/V (e4m3(b) * scale)
 * only f32 arithmetic remains, as for the bf16 cache: bound 2e-6 (the
 * scales folded into the score scale and 1/sum add one rounding each).
 * Against the *unrounded* K/V, e4m3's relative error of up to 2^-4 per
 * element moves the output by up to 2^-4 * max|V| (a one-position context
 * returns V itself): bound 7e-2.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/attention.h"
#include "cpu/kv_fp8.h"
#include "cpu/threadpool.h"
#include "fp8.h"

static uint64_t rng_state = 0x243f6a8885a308d3ull;
static float frand(void) {   /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static const qwi_cpu_kv_fp8_kernels *table(const char *name) {
    if (strcmp(name, "generic") == 0) return qwi_cpu_kv_fp8_generic();
    if (strcmp(name, "avx2") == 0) return qwi_cpu_kv_fp8_avx2();
    if (strcmp(name, "avx512vbmi") == 0) return qwi_cpu_kv_fp8_avx512vbmi();
    if (strcmp(name, "avx512bw") == 0) return qwi_cpu_kv_fp8_avx512bw();
    return qwi_cpu_kv_fp8_avx512();
}

/* ---- the write --------------------------------------------------------- */

/* Every non-NaN e4m3 value times a power-of-two scale is written back as
 * its own byte; other values land on a neighbour within half a step;
 * beyond the range they saturate; NaN stays NaN. */
Test(kv_fp8, write_round_trip_and_saturation) {
    const float scales[] = { 1.0f, 0.25f, 8.0f };
    for (size_t s = 0; s < 3; s++)
        for (int b = 0; b < 256; b++) {
            if (qwi_e4m3_is_nan((uint8_t)b)) continue;
            float x = qwi_e4m3_to_f32((uint8_t)b) * scales[s];
            uint8_t out;
            qwi_cpu_kv_fp8_round(&x, &out, 1, scales[s]);
            if (b == 0x80) cr_assert(out == 0x80 || out == 0, "-0");
            else cr_assert_eq(out, b, "byte %02x scale %g: wrote %02x", b, scales[s], out);
        }
    /* random values: the value read back (times the scale) is within half
     * an e4m3 step: relative 2^-4 for normals, 2^-10 * scale absolute below */
    for (int i = 0; i < 20000; i++) {
        const float scale = i % 2 ? 0.05f : 3.0f;
        float x = frand() * 400.0f * scale * (i % 3 ? 1.0f : 1e-3f);
        uint8_t b;
        qwi_cpu_kv_fp8_round(&x, &b, 1, scale);
        double back = (double)qwi_e4m3_to_f32(b) * scale;
        double tol = fmax(fabs((double)x) * 0x1p-4, 0x1p-10 * scale) * 1.0000001;
        cr_assert_leq(fabs(back - x), tol, "x %g scale %g: read %g", x, scale, back);
    }
    float big[4] = { 1e6f, -1e6f, INFINITY, NAN }, two = 2.0f;
    uint8_t o[4];
    qwi_cpu_kv_fp8_round(big, o, 4, two);
    cr_assert_eq(o[0], 0x7e, "saturates to +448");
    cr_assert_eq(o[1], 0xfe, "saturates to -448");
    cr_assert_eq(o[2], 0x7e, "infinity saturates");
    cr_assert(qwi_e4m3_is_nan(o[3]), "NaN stays NaN");
}

/* ---- the widen ---------------------------------------------------------- */

/* transpose: every byte pattern, every table the same bits as
 * qwi_e4m3_to_f32 (NaN included), at tile shapes with tails. */
static void transpose_exact(const char *name) {
    const qwi_cpu_kv_fp8_kernels *kf = table(name);
    if (!kf) {
        cr_log_warn("kv fp8 table %s not available on this CPU: skipped", name);
        return;
    }
    enum { N = 40, HDMAX = 136, LD = 48 };
    static uint8_t rows[N][HDMAX];
    for (int j = 0; j < N; j++)
        for (int d = 0; d < HDMAX; d++) rows[j][d] = (uint8_t)(j * 131 + d * 7 + (d >> 3));
    const uint8_t *k[N];
    for (int j = 0; j < N; j++) k[j] = rows[j];
    int seen[256] = { 0 };
    const int64_t hds[] = { 128, 136, 100, 7 };
    const int32_t ns[] = { 40, 33, 8, 3 };
    static float kt[HDMAX * LD];
    for (size_t h = 0; h < 4; h++)
        for (size_t c = 0; c < 4; c++) {
            for (size_t i = 0; i < sizeof kt / 4; i++) kt[i] = -12345.0f;
            kf->transpose(k, ns[c], hds[h], 1, kt, LD);
            for (int64_t d = 0; d < hds[h]; d++)
                for (int32_t j = 0; j < LD; j++) {
                    const float got = kt[d * LD + j];
                    if (j >= ns[c]) {
                        cr_assert_eq(got, -12345.0f, "%s: lane %d past n written", name, j);
                        continue;
                    }
                    seen[rows[j][d]] = 1;
                    cr_assert_eq(bits(got), bits(qwi_e4m3_to_f32(rows[j][d])),
                                 "%s: hd %lld n %d: byte %02x widened to %08x", name,
                                 (long long)hds[h], ns[c], rows[j][d], bits(got));
                }
        }
    for (int b = 0; b < 256; b++) cr_assert(seen[b], "byte %02x not covered", b);
}

Test(kv_fp8, transpose_generic) { transpose_exact("generic"); }
Test(kv_fp8, transpose_avx2) { transpose_exact("avx2"); }
Test(kv_fp8, transpose_avx512) { transpose_exact("avx512"); }
Test(kv_fp8, transpose_avx512vbmi) { transpose_exact("avx512vbmi"); }
Test(kv_fp8, transpose_avx512bw) { transpose_exact("avx512bw"); }

/* ---- P.V ---------------------------------------------------------------- */

enum { PV_NQ = 13, PV_N = 37, PV_HDMAX = 136 };

/* pv of nq accumulators over n positions, on fresh copies of o0. */
static void run_pv(const qwi_cpu_kv_fp8_kernels *kf, float o0[PV_NQ][PV_HDMAX],
                   float out[PV_NQ][PV_HDMAX], const float p[PV_NQ][PV_N],
                   const uint8_t *const *v, int32_t nq, int32_t n, int64_t hd, int split) {
    float *op[PV_NQ];
    const float *pp[PV_NQ];
    memcpy(out, o0, sizeof(float) * PV_NQ * PV_HDMAX);
    for (int i = 0; i < nq; i++) {
        op[i] = out[i];
        pp[i] = p[i];
    }
    if (!split) {
        kf->pv(op, pp, nq, v, n, hd);
        return;
    }
    /* one accumulator per call, positions in two calls: must not change a bit */
    for (int i = 0; i < nq; i++) {
        const int32_t h = n / 3;
        kf->pv(&op[i], &pp[i], 1, v, h, hd);
        const float *ph = pp[i] + h;
        kf->pv(&op[i], &ph, 1, v + h, n - h, hd);
    }
}

static void pv_case(const char *name) {
    const qwi_cpu_kv_fp8_kernels *kf = table(name);
    if (!kf) {
        cr_log_warn("kv fp8 table %s not available on this CPU: skipped", name);
        return;
    }
    static float o0[PV_NQ][PV_HDMAX], a[PV_NQ][PV_HDMAX], b[PV_NQ][PV_HDMAX], g[PV_NQ][PV_HDMAX];
    static float p[PV_NQ][PV_N];
    static uint8_t vrows[PV_N][PV_HDMAX];
    const uint8_t *v[PV_N];
    for (int j = 0; j < PV_N; j++) {
        v[j] = vrows[j];
        for (int e = 0; e < PV_HDMAX; e++) {
            float x = frand() * 3.0f;
            qwi_cpu_kv_fp8_round(&x, &vrows[j][e], 1, 1.0f);
        }
    }
    for (int i = 0; i < PV_NQ; i++) {
        for (int e = 0; e < PV_HDMAX; e++) o0[i][e] = frand();
        for (int j = 0; j < PV_N; j++) p[i][j] = (frand() + 1.0f) * 0.5f;
    }
    const qwi_cpu_kv_fp8_kernels *x86 = qwi_cpu_kv_fp8_avx2() ? qwi_cpu_kv_fp8_avx2() : NULL;
    const int64_t hds[] = { 128, 136, 100, 64, 7 };
    const int32_t nqs[] = { 13, 8, 4, 2, 1 };
    double worst = 0;
    for (size_t h = 0; h < 5; h++)
        for (size_t q = 0; q < 5; q++) {
            const int64_t hd = hds[h];
            const int32_t nq = nqs[q];
            run_pv(kf, o0, a, p, v, nq, PV_N, hd, 0);
            run_pv(kf, o0, b, p, v, nq, PV_N, hd, 1);
            cr_assert(memcmp(a, b, sizeof a) == 0, "%s: hd %lld nq %d: batched != alone/split",
                      name, (long long)hd, nq);
            /* the FMA tables agree bit for bit */
            if (x86 && strcmp(name, "generic") != 0) {
                run_pv(x86, o0, b, p, v, nq, PV_N, hd, 0);
                cr_assert(memcmp(a, b, sizeof a) == 0, "%s vs avx2: hd %lld nq %d differ", name,
                          (long long)hd, nq);
            }
            run_pv(qwi_cpu_kv_fp8_generic(), o0, g, p, v, nq, PV_N, hd, 0);
            for (int i = 0; i < nq; i++)
                for (int64_t e = 0; e < hd; e++) {
                    double ref = o0[i][e], mag = fabs(o0[i][e]);
                    for (int j = 0; j < PV_N; j++) {
                        const double t = (double)p[i][j] * (double)qwi_e4m3_to_f32(v[j][e]);
                        ref += t;
                        mag += fabs(t);
                    }
                    /* one f32 rounding per step: PV_N steps of <= 2^-24 * mag */
                    const double tol = PV_N * 0x1p-24 * mag;
                    cr_assert_leq(fabs(a[i][e] - ref), tol, "%s: (%d, %lld): %g vs float64 %g",
                                  name, i, (long long)e, a[i][e], ref);
                    cr_assert_leq(fabs(a[i][e] - g[i][e]), 2 * tol, "%s vs generic", name);
                    worst = fmax(worst, fabs(a[i][e] - ref) / mag);
                }
            /* untouched accumulators stay as they were */
            for (int i = nq; i < PV_NQ; i++)
                cr_assert(memcmp(a[i], o0[i], sizeof a[i]) == 0, "%s: accumulator %d touched", name, i);
        }
    cr_log_info("%s: fp8 P.V max error vs float64 %.3g of the terms' magnitude", name, worst);
}

/* P.V's widen alone: one position, weight 1, accumulators -0 (so a -0
 * element stays -0), a V row holding all 256 codes at every offset mod 32
 * (the AVX2 table widens 32 at a time by nibble tables, in 16s and by e8
 * at the tails): every output is the code's qwi_e4m3_to_f32, bits and
 * NaN included, for every table and accumulator count. */
static void pv_widens_every_code(const char *name) {
    const qwi_cpu_kv_fp8_kernels *kf = table(name);
    if (!kf) {
        cr_log_warn("kv fp8 table %s not available on this CPU: skipped", name);
        return;
    }
    enum { HD = 256 + 40, NQ = 5 };
    static uint8_t row[HD];
    static float o[NQ][HD];
    const float one = 1.0f;
    const float *p[NQ] = { &one, &one, &one, &one, &one };
    float *op[NQ];
    for (int i = 0; i < NQ; i++) op[i] = o[i];
    for (int shift = 0; shift < 32; shift += 5) {
        for (int e = 0; e < HD; e++) row[e] = (uint8_t)(e * 7 + shift);   /* 7 is odd: all 256 */
        const uint8_t *v = row;
        for (int nq = 1; nq <= NQ; nq++) {
            for (int i = 0; i < NQ; i++)
                for (int e = 0; e < HD; e++) o[i][e] = -0.0f;
            kf->pv(op, p, nq, &v, 1, HD);
            for (int i = 0; i < nq; i++)
                for (int e = 0; e < HD; e++)
                    cr_assert_eq(bits(o[i][e]), bits(qwi_e4m3_to_f32(row[e])),
                                 "%s: nq %d element %d: byte %02x widened to %08x", name, nq, e,
                                 row[e], bits(o[i][e]));
        }
    }
}

Test(kv_fp8, pv_widens_every_code_generic) { pv_widens_every_code("generic"); }
Test(kv_fp8, pv_widens_every_code_avx2) { pv_widens_every_code("avx2"); }
Test(kv_fp8, pv_widens_every_code_avx512) { pv_widens_every_code("avx512"); }
Test(kv_fp8, pv_widens_every_code_avx512vbmi) { pv_widens_every_code("avx512vbmi"); }
Test(kv_fp8, pv_widens_every_code_avx512bw) { pv_widens_every_code("avx512bw"); }

Test(kv_fp8, pv_generic) { pv_case("generic"); }
Test(kv_fp8, pv_avx2) { pv_case("avx2"); }
Test(kv_fp8, pv_avx512) { pv_case("avx512"); }
Test(kv_fp8, pv_avx512vbmi) { pv_case("avx512vbmi"); }
Test(kv_fp8, pv_avx512bw) { pv_case("avx512bw"); }

Test(kv_fp8, table_follows_the_f32_table) {
    cr_assert_eq(qwi_cpu_kv_fp8_for(qwi_cpu_kernels_generic()), qwi_cpu_kv_fp8_generic());
    if (qwi_cpu_kernels_avx2())
        cr_assert_eq(qwi_cpu_kv_fp8_for(qwi_cpu_kernels_avx2()), qwi_cpu_kv_fp8_avx2());
    if (qwi_cpu_kernels_avx512())
        cr_assert_eq(qwi_cpu_kv_fp8_for(qwi_cpu_kernels_avx512()),
                     qwi_cpu_kv_fp8_avx512vbmi() ? qwi_cpu_kv_fp8_avx512vbmi()
                     : qwi_cpu_kv_fp8_avx512bw() ? qwi_cpu_kv_fp8_avx512bw()
                                                 : qwi_cpu_kv_fp8_avx512());
    if (qwi_cpu_kv_fp8_avx512vbmi()) {
        __builtin_cpu_init();
        cr_assert(__builtin_cpu_supports("avx512vbmi"), "avx512vbmi table without the CPU flag");
        cr_assert_str_eq(qwi_cpu_kv_fp8_avx512vbmi()->name, "avx512vbmi");
        cr_assert_not_null(qwi_cpu_kv_fp8_avx512vbmi()->pscores8_q);
    }
    if (qwi_cpu_kv_fp8_avx512bw()) {
        __builtin_cpu_init();
        cr_assert(__builtin_cpu_supports("avx512bw"), "avx512bw table without the CPU flag");
        cr_assert_str_eq(qwi_cpu_kv_fp8_avx512bw()->name, "avx512bw");
        cr_assert_not_null(qwi_cpu_kv_fp8_avx512bw()->pscores8_q);
    }
    cr_assert_not_null(qwi_cpu_kv_fp8_for(qwi_cpu_kernels_select()));
}

/* QWINFER_CPU_KV_FP8 picks among the tables the rule chooses from for
 * the f32 table, and is ignored otherwise (each test is its own process,
 * so the variable does not leak). */
Test(kv_fp8, environment_names_a_table) {
    const qwi_cpu_kernels *k5 = qwi_cpu_kernels_avx512(), *k2 = qwi_cpu_kernels_avx2();
    const qwi_cpu_kv_fp8_kernels *dflt5 = k5 ? qwi_cpu_kv_fp8_for(k5) : NULL;
    const qwi_cpu_kv_fp8_kernels *dflt2 = k2 ? qwi_cpu_kv_fp8_for(k2) : NULL;
    setenv("QWINFER_CPU_KV_FP8", "generic", 1);
    cr_assert_eq(qwi_cpu_kv_fp8_for(qwi_cpu_kernels_select()), qwi_cpu_kv_fp8_generic());
    const char *names[] = { "avx512", "avx512bw", "avx512vbmi" };
    for (size_t i = 0; i < 3 && k5; i++) {
        setenv("QWINFER_CPU_KV_FP8", names[i], 1);
        const qwi_cpu_kv_fp8_kernels *want = table(names[i]);
        cr_assert_eq(qwi_cpu_kv_fp8_for(k5), want ? want : dflt5, "%s", names[i]);
        if (k2) cr_assert_eq(qwi_cpu_kv_fp8_for(k2), dflt2, "%s taken for the avx2 f32 table", names[i]);
    }
    setenv("QWINFER_CPU_KV_FP8", "avx2", 1);
    if (k5) cr_assert_eq(qwi_cpu_kv_fp8_for(k5), dflt5, "avx2 taken for the avx512 f32 table");
    if (k2) cr_assert_eq(qwi_cpu_kv_fp8_for(k2), qwi_cpu_kv_fp8_avx2());
    setenv("QWINFER_CPU_KV_FP8", "no-such-table", 1);
    if (k5) cr_assert_eq(qwi_cpu_kv_fp8_for(k5), dflt5);
    unsetenv("QWINFER_CPU_KV_FP8");
}

/* ---- attention over a paged fp8 cache ----------------------------------- */

enum { NSEQ = 5, NH = 4, NKV = 2, HD = 40, BS = 16, MAXB = 24 };
/* K element i of slot `slot` in the K planes (cpu/attention.h): blocks of
 * [kv_dim][BS], so one element's positions of a block are adjacent. */
#define KPLANE(slot, i) ((int64_t)(slot) / BS * BS * kvd + (int64_t)(i) * BS + (slot) % BS)

static void ref_row(const float *q, const float *kseq, const float *vseq, int32_t pos, double *out) {
    const int kvd = NKV * HD, group = NH / NKV;
    for (int h = 0; h < NH; h++) {
        int g = h / group;
        double *sc = malloc(sizeof(double) * (size_t)(pos + 1)), m = -INFINITY, sum = 0;
        for (int p = 0; p <= pos; p++) {
            double d = 0;
            for (int i = 0; i < HD; i++) d += (double)q[h * HD + i] * kseq[p * kvd + g * HD + i];
            sc[p] = d / sqrt((double)HD);
            m = fmax(m, sc[p]);
        }
        for (int p = 0; p <= pos; p++) sum += (sc[p] = exp(sc[p] - m));
        for (int i = 0; i < HD; i++) {
            double o = 0;
            for (int p = 0; p <= pos; p++) o += sc[p] * vseq[p * kvd + g * HD + i];
            out[h * HD + i] = o / sum;
        }
        free(sc);
    }
}

/* kt_name's f32 and bf16 tables with fp8 table kf_name (NULL: the one
 * qwi_cpu_kv_fp8_for gives). */
static void attention_case(const char *kt_name, const char *kf_name) {
    const qwi_cpu_kernels *kt = qwi_cpu_kernels_by_name(kt_name);
    if (!kt) {
        cr_log_warn("kernel table %s not available: skipped", kt_name);
        return;
    }
    const qwi_cpu_kv_fp8_kernels *kf = kf_name ? table(kf_name) : qwi_cpu_kv_fp8_for(kt);
    if (!kf) {
        cr_log_warn("kv fp8 table %s not available on this CPU: skipped", kf_name);
        return;
    }
    const int kvd = NKV * HD, qd = NH * HD;
    const float k_scale = 0.0125f, v_scale = 0.003f;   /* K up to ~2, V ~1: e4m3's range */
    const int32_t ctx[NSEQ] = { 1, 37, 140, 300, 16 };
    const int32_t nrows[NSEQ] = { 1, 1, 20, 1, 16 };
    int32_t bt[NSEQ][MAXB], nblocks = 0;
    for (int s = 0; s < NSEQ; s++)
        for (int b = 0; b < MAXB; b++) bt[s][b] = 0;
    for (int s = 0; s < NSEQ; s++)
        for (int b = 0; b < (ctx[s] + BS - 1) / BS; b++) bt[s][b] = nblocks++;
    uint8_t *kc = calloc((size_t)nblocks * BS * kvd, 1), *vc = calloc((size_t)nblocks * BS * kvd, 1);
    float *kseq[NSEQ], *vseq[NSEQ], *krd[NSEQ], *vrd[NSEQ];
    int T = 0;
    for (int s = 0; s < NSEQ; s++) T += nrows[s];
    float *q = malloc(sizeof(float) * (size_t)T * qd), *out = malloc(sizeof(float) * (size_t)T * qd);
    float *out1 = malloc(sizeof(float) * (size_t)T * qd);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)T), *rs = malloc(sizeof(int32_t) * (size_t)T);
    int r = 0;
    for (int s = 0; s < NSEQ; s++) {
        kseq[s] = malloc(sizeof(float) * (size_t)ctx[s] * kvd);
        vseq[s] = malloc(sizeof(float) * (size_t)ctx[s] * kvd);
        krd[s] = malloc(sizeof(float) * (size_t)ctx[s] * kvd);
        vrd[s] = malloc(sizeof(float) * (size_t)ctx[s] * kvd);
        int32_t *slots = malloc(sizeof(int32_t) * (size_t)ctx[s]);
        for (int p = 0; p < ctx[s]; p++) slots[p] = bt[s][p / BS] * BS + p % BS;
        for (int i = 0; i < ctx[s] * kvd; i++) {
            kseq[s][i] = 2 * frand();
            vseq[s][i] = frand();
        }
        qwi_cpu_kv_write_fp8(kc, vc, kseq[s], vseq[s], slots, ctx[s], kvd, BS, HD, k_scale, v_scale);
        for (int p = 0; p < ctx[s]; p++)
            for (int i = 0; i < kvd; i++) {
                const uint8_t kb = kc[KPLANE(slots[p], i)], vb = vc[qwi_cpu_vhead_index(slots[p], BS, NKV, HD, i / HD, i % HD)];
                cr_assert_eq(kb, qwi_f32_to_e4m3(kseq[s][p * kvd + i] / k_scale));
                cr_assert_eq(vb, qwi_f32_to_e4m3(vseq[s][p * kvd + i] / v_scale));
                krd[s][p * kvd + i] = (float)((double)qwi_e4m3_to_f32(kb) * k_scale);
                vrd[s][p * kvd + i] = (float)((double)qwi_e4m3_to_f32(vb) * v_scale);
            }
        free(slots);
        for (int i = 0; i < nrows[s]; i++, r++) {
            pos[r] = ctx[s] - nrows[s] + i;
            rs[r] = s;
            for (int d = 0; d < qd; d++) q[(int64_t)r * qd + d] = frand();
        }
    }
    qwi_cpu_attn a = { .q = q, .k_fp8 = kc, .v_fp8 = vc, .kb = qwi_cpu_kv_bf16_for(kt),
                       .kf = kf, .k_scale = k_scale, .v_scale = v_scale,
                       .out = out, .positions = pos, .row_seq = rs, .block_tables = &bt[0][0],
                       .max_blocks_per_seq = MAXB, .block_size = BS, .num_tokens = T,
                       .num_heads = NH, .num_kv_heads = NKV, .head_dim = HD,
                       .scale = (float)(1.0 / sqrt((double)HD)) };
    for (int threads = 1; threads <= 3; threads++) {
        qwi_cpu_pool *pool;
        cr_assert_eq(qwi_cpu_pool_create(threads, &pool), QW_OK);
        float *scr[3];
        for (int t = 0; t < threads; t++) scr[t] = malloc(qwi_cpu_attn_scratch_floats(NH, NKV, HD) * 4);
        a.out = threads == 1 ? out : out1;
        qwi_cpu_attention(pool, kt, scr, &a);
        if (threads > 1)
            cr_assert(memcmp(out, out1, sizeof(float) * (size_t)T * qd) == 0,
                      "%s: %d threads differ from 1", kt_name, threads);
        if (threads == 1) {
            qwi_cpu_attn a1 = a;
            a1.out = out1;
            for (int rr = 0; rr < T; rr++)
                for (int g = 0; g < NKV; g++) qwr_attention_row(&a1, kt, rr, g, scr[0]);
            cr_assert(memcmp(out, out1, sizeof(float) * (size_t)T * qd) == 0,
                      "%s: parallel blocks differ from rows alone", kt_name);
        }
        for (int t = 0; t < threads; t++) free(scr[t]);
        qwi_cpu_pool_destroy(pool);
    }
    double ref[NH * HD], err_rd = 0, err_orig = 0;
    for (int rr = 0; rr < T; rr++) {
        int s = rs[rr];
        ref_row(q + (int64_t)rr * qd, krd[s], vrd[s], pos[rr], ref);
        for (int i = 0; i < qd; i++) err_rd = fmax(err_rd, fabs(out[(int64_t)rr * qd + i] - ref[i]));
        ref_row(q + (int64_t)rr * qd, kseq[s], vseq[s], pos[rr], ref);
        for (int i = 0; i < qd; i++) err_orig = fmax(err_orig, fabs(out[(int64_t)rr * qd + i] - ref[i]));
    }
    cr_log_info("%s: fp8 KV attention max abs error %.3g (vs dequantized K/V), %.3g (vs f32 K/V)",
                kt_name, err_rd, err_orig);
    cr_assert_lt(err_rd, 2e-6, "%s: %g vs float64 over the dequantized K/V", kt_name, err_rd);
    /* a one-position context returns V itself: up to 2^-4 * max|V| = 0.0625 off */
    cr_assert_lt(err_orig, 7e-2, "%s: %g vs float64 over the f32 K/V", kt_name, err_orig);
    cr_assert_gt(err_orig, 1e-4, "the fp8 cache was meant to round");
    for (int s = 0; s < NSEQ; s++) {
        free(kseq[s]);
        free(vseq[s]);
        free(krd[s]);
        free(vrd[s]);
    }
    free(kc);
    free(vc);
    free(q);
    free(out);
    free(out1);
    free(pos);
    free(rs);
}

Test(kv_fp8, attention_generic) { attention_case("generic", NULL); }
Test(kv_fp8, attention_avx2) { attention_case("avx2", NULL); }
Test(kv_fp8, attention_avx512) { attention_case("avx512", "avx512"); }
Test(kv_fp8, attention_avx512vbmi) { attention_case("avx512", "avx512vbmi"); }
Test(kv_fp8, attention_avx512bw) { attention_case("avx512", "avx512bw"); }

/* An AVX-512 fp8 table with its own widen (avx512vbmi, avx512bw) against
 * avx512 through qwi_cpu_attention, bit for bit, at the head sizes whose
 * rows a 64-element widen covers (128, 192 with a 64-element block, 136
 * with a 16-element one and a tail), q groups of 1, 2, 5 and 8 rows per
 * kv head, decode rows and a prefill run, every e4m3 code but NaN in the
 * cache, over a block table whose blocks are scattered (sequence 0) and
 * in order (sequence 1: the 64-position loads of avx512bw's scores). */
static void attention_equals_avx512(const char *name) {
    const qwi_cpu_kv_fp8_kernels *kv = table(name), *k5 = qwi_cpu_kv_fp8_avx512();
    const qwi_cpu_kernels *kt = qwi_cpu_kernels_by_name("avx512");
    if (!kv || !k5 || !kt) {
        cr_log_warn("%s fp8 table not available on this CPU: skipped", name);
        return;
    }
    enum { NB = 40, B16 = 16, CTXV = 300, NT = 6 };
    const int hds[] = { 128, 192, 136 };
    const int groups[] = { 1, 2, 5, 8 };
    qwi_cpu_pool *pool;
    cr_assert_eq(qwi_cpu_pool_create(1, &pool), QW_OK);
    for (int bsz = B16; bsz <= 4 * B16; bsz *= 4)   /* 64: four 16s side by side in a plane */
    for (size_t hi = 0; hi < 3; hi++)
        for (size_t gi = 0; gi < 4; gi++) {
            const int hd = hds[hi], nkv = 2, nh = nkv * groups[gi], kvd = nkv * hd, qd = nh * hd;
            const int nb = NB * B16 / bsz;   /* the same bytes in blocks of bsz */
            uint8_t *kc = malloc((size_t)NB * B16 * kvd), *vc = malloc((size_t)NB * B16 * kvd);
            for (size_t i = 0; i < (size_t)NB * B16 * kvd; i++) {
                uint8_t b = (uint8_t)(i * 37 + (i >> 7) * 11 + hd);
                kc[i] = qwi_e4m3_is_nan(b) ? 0x01 : b;
                b = (uint8_t)(i * 53 + (i >> 6) * 5);
                vc[i] = qwi_e4m3_is_nan(b) ? 0x81 : b;
            }
            int32_t bt[2][NB / 2], pos[NT], rs[NT];
            memset(bt, 0, sizeof bt);
            for (int b = 0; b < nb / 2; b++) {
                bt[0][b] = nb - 1 - 2 * b;   /* scattered, as after churn */
                bt[1][b] = 2 * b;
            }
            /* rows: sequence 0 decodes at 300 and 17; sequence 1 a 4-row prefill run at 120.. */
            const int32_t pv[NT] = { CTXV - 1, 16, 120, 121, 122, 123 }, sv[NT] = { 0, 0, 1, 1, 1, 1 };
            memcpy(pos, pv, sizeof pos);
            memcpy(rs, sv, sizeof rs);
            float *q = malloc(sizeof(float) * NT * qd), *o1 = malloc(sizeof(float) * NT * qd),
                  *o2 = malloc(sizeof(float) * NT * qd);
            for (int i = 0; i < NT * qd; i++) q[i] = frand();
            float *scr = malloc(qwi_cpu_attn_scratch_floats(nh, nkv, hd) * 4);
            qwi_cpu_attn a = { .q = q, .k_fp8 = kc, .v_fp8 = vc, .kb = qwi_cpu_kv_bf16_for(kt), .kf = k5,
                               .k_scale = 0.0625f, .v_scale = 0.125f, .out = o1, .positions = pos,
                               .row_seq = rs, .block_tables = &bt[0][0], .max_blocks_per_seq = NB / 2,
                               .block_size = bsz, .num_tokens = NT, .num_heads = nh, .num_kv_heads = nkv,
                               .head_dim = hd, .scale = 0.1f };
            qwi_cpu_attention(pool, kt, &scr, &a);
            a.kf = kv;
            a.out = o2;
            qwi_cpu_attention(pool, kt, &scr, &a);
            for (int i = 0; i < NT * qd; i++) cr_assert(isfinite(o1[i]), "hd %d: non-finite output", hd);
            cr_assert(memcmp(o1, o2, sizeof(float) * NT * qd) == 0,
                      "block %d hd %d group %d: %s != avx512", bsz, hd, groups[gi], name);
            free(kc), free(vc), free(q), free(o1), free(o2), free(scr);
        }
    qwi_cpu_pool_destroy(pool);
}

Test(kv_fp8, avx512vbmi_attention_equals_avx512) { attention_equals_avx512("avx512vbmi"); }
Test(kv_fp8, avx512bw_attention_equals_avx512) { attention_equals_avx512("avx512bw"); }
