/*
 * test_kv_bf16.c - the fast numerics mode's bf16 KV cache: the rounding on
 * write, the attention kernels over bf16 K/V (batched axpy forms
 * bit-identical to single ones in every table;
 * the transposed-tile scores one FMA chain over d per score, whatever the
 * lane or the number of positions and heads),
 * attention over a paged bf16 cache against a float64 reference, and the
 * pool holding twice the tokens of the f32 one in the same bytes.
 *
 * Tolerances (max abs error, unit-scale data, contexts up to 300): with K/V
 * rounded to bf16 (relative error <= 2^-9 per element) the output moves by
 * ~2e-3 from an f32-cache result, so against a float64 attention over the
 * *unrounded* K/V the bound is 1e-2; against a float64 attention over the
 * *rounded* K/V only f32 arithmetic remains (measured ~1.5e-7), bound 2e-6.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu/attention.h"
#include "cpu/kv_bf16.h"
#include "cpu/threadpool.h"
#include "dtype.h"
#include "util/engine_util.h"
#include "util/testutil.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
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

/* The tables this machine can run, by name. */
static const qwi_cpu_kv_bf16_kernels *table(const char *name) {
    if (strcmp(name, "generic") == 0) return qwi_cpu_kv_bf16_generic();
    if (strcmp(name, "avx2") == 0) return qwi_cpu_kv_bf16_avx2();
    return qwi_cpu_kv_bf16_avx512();
}

Test(kv_bf16, round_nearest_even_and_specials) {
    const float in[] = { 1.0f, 1.00390625f /* 1 + 2^-8: tie, even stays 1 */,
                         1.01171875f /* 1 + 3*2^-8: tie, rounds up to 1 + 2^-6 */,
                         1.0048828125f /* 1 + 2^-8 + 2^-10, above the tie: up */, -2.5f, INFINITY, -INFINITY,
                         NAN, 0x1.fffffep127f /* rounds to inf */, 1e-40f /* subnormal */ };
    const uint16_t want[] = { 0x3f80, 0x3f80, 0x3f82, 0x3f81, 0xc020, 0x7f80, 0xff80, 0, 0x7f80,
                              0x0001 };
    uint16_t out[10];
    qwi_cpu_kv_bf16_round(in, out, 10);
    for (int i = 0; i < 10; i++) {
        if (i == 7) {
            cr_assert((out[i] & 0x7f80) == 0x7f80 && (out[i] & 0x7f) != 0, "NaN stays NaN: %04x", out[i]);
            continue;
        }
        cr_assert_eq(out[i], want[i], "element %d: %04x, expected %04x", i, out[i], want[i]);
    }
}

/* Batched forms == single forms, bit for bit, for every head_dim shape
 * (full vectors, tails, shorter than a vector). */
static void batched_identical(const char *name) {
    const qwi_cpu_kv_bf16_kernels *kb = table(name);
    if (!kb) {
        cr_log_warn("kv bf16 table %s not available on this CPU: skipped", name);
        return;
    }
    const int64_t ns[] = { 128, 64, 100, 17, 7, 1 };
    for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++) {
        int64_t n = ns[c];
        float f[128];
        uint16_t rows[4][128];
        const uint16_t *r4[4] = { rows[0], rows[1], rows[2], rows[3] };
        for (int j = 0; j < 4; j++) {
            for (int64_t i = 0; i < n; i++) f[i] = frand();
            qwi_cpu_kv_bf16_round(f, rows[j], n);
        }
        float s0[4] = { 0.3f, -0.7f, 1.1f, 0.05f }, s1[4] = { -0.2f, 0.9f, 0.4f, -1.3f };
        float a[128], b[128], c0[128], c1[128];   /* c0: axpy4x2's head 1 (tested below) */
        for (int64_t i = 0; i < n; i++) a[i] = b[i] = c0[i] = c1[i] = frand();
        kb->axpy4(a, s0, r4, n);
        kb->axpy4x2(b, c0, s0, s1, r4, n);
        for (int j = 0; j < 4; j++) kb->axpy(c1, s0[j], rows[j], n);
        cr_assert(memcmp(a, c1, (size_t)n * 4) == 0, "%s n=%lld: axpy4 != 4 axpys", name, (long long)n);
        cr_assert(memcmp(b, c1, (size_t)n * 4) == 0, "%s n=%lld: axpy4x2 head 0 != axpys", name,
                  (long long)n);
    }
}

Test(kv_bf16, batched_forms_generic) { batched_identical("generic"); }
Test(kv_bf16, batched_forms_avx2) { batched_identical("avx2"); }
Test(kv_bf16, batched_forms_avx512) { batched_identical("avx512"); }

/* axpy4x2's second head against single axpys (separate buffers). */
static void axpy_second_head(const char *name) {
    const qwi_cpu_kv_bf16_kernels *kb = table(name);
    if (!kb) return;
    for (int64_t n = 1; n <= 130; n += 43) {
        float f[130], o0[130], o1[130], r1[130];
        uint16_t rows[4][130];
        const uint16_t *r4[4] = { rows[0], rows[1], rows[2], rows[3] };
        for (int j = 0; j < 4; j++) {
            for (int64_t i = 0; i < n; i++) f[i] = frand();
            qwi_cpu_kv_bf16_round(f, rows[j], n);
        }
        for (int64_t i = 0; i < n; i++) o0[i] = o1[i] = r1[i] = frand();
        const float s0[4] = { 1, 2, 3, 4 }, s1[4] = { 0.125f, -0.5f, 0.75f, 1.5f };
        kb->axpy4x2(o0, o1, s0, s1, r4, n);
        for (int j = 0; j < 4; j++) kb->axpy(r1, s1[j], rows[j], n);
        cr_assert(memcmp(o1, r1, (size_t)n * 4) == 0, "%s n=%lld: axpy4x2 head 1 != axpys", name,
                  (long long)n);
    }
}

Test(kv_bf16, axpy4x2_second_head_all_tables) {
    axpy_second_head("generic");
    axpy_second_head("avx2");
    axpy_second_head("avx512");
}

/* transpose widens exactly and leaves lanes >= n alone; tscores gives each
 * score as one chain over d in order (FMA steps; generic: multiply then
 * add), then times scale: bit for bit that scalar chain, so a score does
 * not depend on n, nq or its lane; and within 1e-5 relative of float64. */
static void tscores_one_chain(const char *name) {
    const qwi_cpu_kv_bf16_kernels *kb = table(name);
    if (!kb) {
        cr_log_warn("kv bf16 table %s not available on this CPU: skipped", name);
        return;
    }
    const bool fma = strcmp(name, "generic") != 0;
    enum { LD = 128 };
    const int64_t hds[] = { 128, 64, 100, 17, 7, 1 };
    const int32_t ns[] = { 128, 100, 65, 17, 8, 1 };
    static float kt[128 * LD], out[3 * LD];
    static uint16_t rows[LD][128];
    float q[3 * 128];
    const uint16_t *rp[LD];
    const float scale = 0.0883883476f;
    for (size_t c = 0; c < sizeof hds / sizeof hds[0]; c++) {
        const int64_t hd = hds[c];
        for (int32_t j = 0; j < LD; j++) {
            rp[j] = rows[j];
            for (int64_t d = 0; d < hd; d++) rows[j][d] = qwi_f32_to_bf16(frand());
        }
        for (int64_t i = 0; i < 3 * hd; i++) q[i] = frand();
        for (size_t m = 0; m < sizeof ns / sizeof ns[0]; m++) {
            const int32_t n = ns[m];
            for (size_t i = 0; i < sizeof kt / sizeof kt[0]; i++) kt[i] = -7.0f;
            kb->transpose(rp, n, hd, 1, kt, LD);
            for (int64_t d = 0; d < hd; d++)
                for (int32_t j = 0; j < LD; j++) {
                    float want = j < n ? qwi_bf16_to_f32(rows[j][d]) : -7.0f;
                    cr_assert_eq(bits(kt[d * LD + j]), bits(want),
                                 "%s transpose hd=%lld n=%d: [%lld][%d]", name, (long long)hd, n,
                                 (long long)d, j);
                }
            for (int32_t nq = 1; nq <= 3; nq++) {
                for (int i = 0; i < 3 * LD; i++) out[i] = -9.0f;
                kb->tscores(q, nq, hd, kt, LD, n, scale, out, LD);
                for (int32_t h = 0; h < 3; h++)
                    for (int32_t j = 0; j < LD; j++) {
                        float got = out[h * LD + j];
                        if (h >= nq || j >= n) {
                            cr_assert_eq(bits(got), bits(-9.0f), "%s: lane %d head %d written", name,
                                         j, h);
                            continue;
                        }
                        float acc = 0.0f;
                        double ref = 0.0;
                        for (int64_t d = 0; d < hd; d++) {
                            float x = q[h * hd + d], k = qwi_bf16_to_f32(rows[j][d]);
                            acc = fma ? fmaf(x, k, acc) : acc + x * k;
                            ref += (double)x * k;
                        }
                        acc = acc * scale;
                        cr_assert_eq(bits(got), bits(acc),
                                     "%s hd=%lld n=%d nq=%d head %d pos %d: %a, chain %a", name,
                                     (long long)hd, n, nq, h, j, got, acc);
                        cr_assert(fabs(got - ref * scale) <= 1e-5 * (double)hd * scale + 1e-30,
                                  "%s: %g vs float64 %g", name, got, ref * scale);
                    }
            }
        }
    }
}

Test(kv_bf16, tscores_generic) { tscores_one_chain("generic"); }
Test(kv_bf16, tscores_avx2) { tscores_one_chain("avx2"); }
Test(kv_bf16, tscores_avx512) { tscores_one_chain("avx512"); }

Test(kv_bf16, table_follows_the_f32_table) {
    cr_assert_eq(qwi_cpu_kv_bf16_for(qwi_cpu_kernels_generic()), qwi_cpu_kv_bf16_generic());
    if (qwi_cpu_kernels_avx2())
        cr_assert_eq(qwi_cpu_kv_bf16_for(qwi_cpu_kernels_avx2()), qwi_cpu_kv_bf16_avx2());
    if (qwi_cpu_kernels_avx512())
        cr_assert_eq(qwi_cpu_kv_bf16_for(qwi_cpu_kernels_avx512()), qwi_cpu_kv_bf16_avx512());
    cr_assert_not_null(qwi_cpu_kv_bf16_for(qwi_cpu_kernels_select()));
}

/* ---- attention over a paged bf16 cache ---------------------------------- */

enum { NSEQ = 5, NH = 4, NKV = 2, HD = 40, BS = 16, MAXB = 24 };
/* K element i of slot `slot` in the K planes (cpu/attention.h): blocks of
 * [kv_dim][BS], so one element's positions of a block are adjacent. */
#define KPLANE(slot, i) ((int64_t)(slot) / BS * BS * kvd + (int64_t)(i) * BS + (slot) % BS)

/* Float64 attention of one q row over positions 0..pos of one sequence,
 * K/V read through get (f32 values). */
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

static void attention_case(const char *kt_name) {
    const qwi_cpu_kernels *kt = qwi_cpu_kernels_by_name(kt_name);
    if (!kt) {
        cr_log_warn("kernel table %s not available: skipped", kt_name);
        return;
    }
    const qwi_cpu_kv_bf16_kernels *kb = qwi_cpu_kv_bf16_for(kt);
    const int kvd = NKV * HD, qd = NH * HD;
    /* contexts: decode rows and prefill chunks, one past a 128-position tile */
    const int32_t ctx[NSEQ] = { 1, 37, 140, 300, 16 };
    const int32_t nrows[NSEQ] = { 1, 1, 20, 1, 16 };
    int32_t bt[NSEQ][MAXB], nblocks = 0;
    for (int s = 0; s < NSEQ; s++)
        for (int b = 0; b < MAXB; b++) bt[s][b] = -1;
    for (int s = 0; s < NSEQ; s++)   /* interleaved, so tables are not contiguous */
        for (int b = 0; b < (ctx[s] + BS - 1) / BS; b++) bt[s][b] = nblocks++;
    for (int s = 0; s < NSEQ; s++)
        for (int b = 0; b < MAXB; b++)
            if (bt[s][b] < 0) bt[s][b] = 0;
    uint16_t *kc = calloc((size_t)nblocks * BS * kvd, 2), *vc = calloc((size_t)nblocks * BS * kvd, 2);
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
        qwi_cpu_kv_write_bf16(kc, vc, kseq[s], vseq[s], slots, ctx[s], kvd, BS, HD);
        for (int p = 0; p < ctx[s]; p++)
            for (int i = 0; i < kvd; i++) {
                krd[s][p * kvd + i] = qwi_bf16_to_f32(kc[KPLANE(slots[p], i)]);
                vrd[s][p * kvd + i] = qwi_bf16_to_f32(vc[qwi_cpu_vhead_index(slots[p], BS, NKV, HD, i / HD, i % HD)]);
                cr_assert_eq(kc[KPLANE(slots[p], i)], qwi_f32_to_bf16(kseq[s][p * kvd + i]));
            }
        free(slots);
        for (int i = 0; i < nrows[s]; i++, r++) {
            pos[r] = ctx[s] - nrows[s] + i;
            rs[r] = s;
            for (int d = 0; d < qd; d++) q[(int64_t)r * qd + d] = frand();
        }
    }
    qwi_cpu_attn a = { .q = q, .k_bf16 = kc, .v_bf16 = vc, .kb = kb, .out = out, .positions = pos,
                       .row_seq = rs, .block_tables = &bt[0][0], .max_blocks_per_seq = MAXB,
                       .block_size = BS, .num_tokens = T, .num_heads = NH, .num_kv_heads = NKV,
                       .head_dim = HD, .scale = (float)(1.0 / sqrt((double)HD)) };
    /* every thread count gives the same bits; each row alone too */
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
    /* against float64 attention: over the rounded K/V and over the original */
    double ref[NH * HD], err_rd = 0, err_orig = 0;
    for (int rr = 0; rr < T; rr++) {
        int s = rs[rr];
        ref_row(q + (int64_t)rr * qd, krd[s], vrd[s], pos[rr], ref);
        for (int i = 0; i < qd; i++) err_rd = fmax(err_rd, fabs(out[(int64_t)rr * qd + i] - ref[i]));
        ref_row(q + (int64_t)rr * qd, kseq[s], vseq[s], pos[rr], ref);
        for (int i = 0; i < qd; i++) err_orig = fmax(err_orig, fabs(out[(int64_t)rr * qd + i] - ref[i]));
    }
    cr_log_info("%s: bf16 KV attention max abs error %.3g (vs rounded K/V), %.3g (vs f32 K/V)",
                kt_name, err_rd, err_orig);
    cr_assert_lt(err_rd, 2e-6, "%s: %g vs float64 over the rounded K/V", kt_name, err_rd);
    cr_assert_lt(err_orig, 1e-2, "%s: %g vs float64 over the f32 K/V", kt_name, err_orig);
    cr_assert_gt(err_orig, 0.0, "the bf16 cache was meant to round");
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

Test(kv_bf16, attention_generic) { attention_case("generic"); }
Test(kv_bf16, attention_avx2) { attention_case("avx2"); }
Test(kv_bf16, attention_avx512) { attention_case("avx512"); }

/* ---- sizing and the engine ---------------------------------------------- */

Test(kv_bf16, block_bytes_halve_in_fast_mode) {
    qwi_config c = { .num_layers = 28, .num_kv_heads = 8, .head_dim = 128 };
    size_t exact = qwi_cpu_kv_bytes_per_block(&c, 16, QW_KV_CACHE_F32);
    size_t fast = qwi_cpu_kv_bytes_per_block(&c, 16, QW_KV_CACHE_BF16);
    cr_assert_eq(exact, (size_t)28 * 2 * 16 * 8 * 128 * 4, "0.6B shape: 229,376 B/token x 16");
    cr_assert_eq(fast * 2, exact, "fast mode: bf16 K/V, half the bytes (%zu vs %zu)", fast, exact);
}

static char *tiny(void) {
    char *dir = qwt_model("kvbf16-tiny", "--shape tiny --dtype bf16 --seed 5");
    cr_assert_not_null(dir);
    return dir;
}

/* The same bytes hold twice the blocks in fast mode. */
Test(kv_bf16, same_bytes_twice_the_blocks) {
    char *dir = tiny();
    int32_t nb[2];
    for (int m = 0; m < 2; m++) {
        qw_engine_options *o = NULL;
        cr_assert_eq(qw_engine_options_create(&o), QW_OK);
        cr_assert_eq(qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, dir), QW_OK);
        cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_KV_CACHE_BYTES, 8 << 20), QW_OK);
        cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_NUMERICS,
                                               m ? QW_NUMERICS_FAST : QW_NUMERICS_EXACT), QW_OK);
        qw_engine *e = NULL;
        cr_assert_eq(qw_engine_create(o, &e), QW_OK, "%s", qw_last_error());
        nb[m] = qw_engine_num_kv_blocks(e);
        qw_engine_destroy(e);
        qw_engine_options_destroy(o);
    }
    cr_assert_eq(nb[1], 2 * nb[0], "8 MiB: %d blocks exact, %d fast", nb[0], nb[1]);
    free(dir);
}
