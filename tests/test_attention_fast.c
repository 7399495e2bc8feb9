/*
 * test_attention_fast.c - the blocked fast-mode attention kernels and the
 * block driver over them, in every bf16-KV kernel table:
 *  - tscores_q (scores of many q vectors per K tile load) gives each score
 *    the bits of the scalar chain over d, whatever nq (1..13: every
 *    register-block size and remainder), n or hd (tails);
 *  - pv (P.V with accumulators held over the positions) gives each output
 *    element the bits of the scalar chain over positions in order, also
 *    when the positions come in two calls;
 *  - qwi_cpu_attention over runs of rows (GQA group 3, head_dim 40, rows
 *    ending inside and across tiles, so the P.V segments of the diagonal
 *    tile are exercised) equals each row alone bit for bit, for 1-3
 *    threads, and float64 attention over the same bf16 K/V within 2e-6;
 *    the same on bf16 dot products (generic and avx512bf16 tables; q and
 *    P rounded to bf16), where float64 with q so rounded is within P's
 *    rounding (2^-9 of max |v|) and avx512bf16 gives the generic bits.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/attention.h"
#include "cpu/kv_bf16.h"
#include "cpu/pairpanel.h"
#include "cpu/threadpool.h"
#include "dtype.h"

static uint64_t rng = 0x3c6ef372fe94f82bull;
static float frand(void) {   /* uniform in [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static const qwi_cpu_kv_bf16_kernels *table(const char *name) {
    if (strcmp(name, "generic") == 0) return qwi_cpu_kv_bf16_generic();
    if (strcmp(name, "avx2") == 0) return qwi_cpu_kv_bf16_avx2();
    return qwi_cpu_kv_bf16_avx512();
}

/* One step of a table's chains: FMA on x86, multiply then add in the
 * generic table. */
static float step(bool fma, float x, float y, float acc) {
    return fma ? fmaf(x, y, acc) : acc + x * y;
}

static void tscores_q_case(const char *name) {
    const qwi_cpu_kv_bf16_kernels *kb = table(name);
    if (!kb) {
        cr_log_warn("kv bf16 table %s not available on this CPU: skipped", name);
        return;
    }
    const bool fma = strcmp(name, "generic") != 0;
    enum { LD = 128, NQ = 13, HDMAX = 128 };
    const int64_t hds[] = { 128, 40, 17, 7 };
    const int32_t ns[] = { 128, 100, 64, 17, 1 };
    static float kt[HDMAX * LD], qbuf[NQ][HDMAX + 3], obuf[NQ][LD + 8];
    static uint16_t rows[LD][HDMAX];
    const uint16_t *rp[LD];
    const float scale = 0.158113883f;
    for (size_t c = 0; c < sizeof hds / sizeof hds[0]; c++) {
        const int64_t hd = hds[c];
        for (int32_t j = 0; j < LD; j++) {
            rp[j] = rows[j];
            for (int64_t d = 0; d < hd; d++) rows[j][d] = qwi_f32_to_bf16(frand());
        }
        kb->transpose(rp, LD, hd, 1, kt, LD);
        for (int i = 0; i < NQ; i++)
            for (int64_t d = 0; d < hd + 3; d++) qbuf[i][d] = frand();
        for (size_t m = 0; m < sizeof ns / sizeof ns[0]; m++) {
            const int32_t n = ns[m];
            for (int32_t nq = 1; nq <= NQ; nq++) {
                /* q vectors at scattered, unaligned addresses, in reverse order */
                const float *q[NQ];
                float *o[NQ];
                for (int i = 0; i < nq; i++) {
                    q[i] = qbuf[NQ - 1 - i] + (i % 3);
                    o[i] = obuf[NQ - 1 - i] + (i % 5);
                }
                for (int i = 0; i < NQ; i++)
                    for (int j = 0; j < LD + 8; j++) obuf[i][j] = -9.0f;
                kb->tscores_q(q, o, nq, hd, kt, LD, n, scale);
                for (int i = 0; i < nq; i++)
                    for (int32_t j = 0; j < n; j++) {
                        float acc = 0.0f;
                        for (int64_t d = 0; d < hd; d++)
                            acc = step(fma, q[i][d], qwi_bf16_to_f32(rows[j][d]), acc);
                        acc *= scale;
                        cr_assert_eq(bits(o[i][j]), bits(acc),
                                     "%s hd=%lld n=%d nq=%d: q %d pos %d %a, chain %a", name,
                                     (long long)hd, n, nq, i, j, o[i][j], acc);
                    }
                /* nothing written outside [0, n) of the nq outputs */
                int written = 0;
                for (int i = 0; i < NQ; i++)
                    for (int j = 0; j < LD + 8; j++) {
                        const int k = NQ - 1 - i;   /* the q index of buffer i */
                        const bool mine = k < nq && j >= k % 5 && j < k % 5 + n;
                        if (!mine && obuf[i][j] != -9.0f) written++;
                    }
                cr_assert_eq(written, 0, "%s hd=%lld n=%d nq=%d: %d floats written outside",
                             name, (long long)hd, n, nq, written);
            }
        }
    }
}

Test(attention_fast, tscores_q_generic) { tscores_q_case("generic"); }
Test(attention_fast, tscores_q_avx2) { tscores_q_case("avx2"); }
Test(attention_fast, tscores_q_avx512) { tscores_q_case("avx512"); }

static void pv_case(const char *name) {
    const qwi_cpu_kv_bf16_kernels *kb = table(name);
    if (!kb) {
        cr_log_warn("kv bf16 table %s not available on this CPU: skipped", name);
        return;
    }
    const bool fma = strcmp(name, "generic") != 0;
    enum { NQ = 19, NP = 128, HDMAX = 130 };
    const int64_t hds[] = { 128, 130, 40, 17, 7, 1 };
    const int32_t ns[] = { 128, 37, 16, 3, 1 };
    static uint16_t vrows[NP][HDMAX];
    static float p[NQ][NP], acc0[NQ][HDMAX + 4], got[NQ][HDMAX + 4], got2[NQ][HDMAX + 4];
    const uint16_t *vp[NP];
    for (int j = 0; j < NP; j++) {
        vp[j] = vrows[j];
        for (int e = 0; e < HDMAX; e++) vrows[j][e] = qwi_f32_to_bf16(frand());
    }
    for (int i = 0; i < NQ; i++) {
        for (int j = 0; j < NP; j++) p[i][j] = 0.5f * (frand() + 1.0f);
        for (int e = 0; e < HDMAX + 4; e++) acc0[i][e] = frand();
    }
    for (size_t c = 0; c < sizeof hds / sizeof hds[0]; c++) {
        const int64_t hd = hds[c];
        for (size_t m = 0; m < sizeof ns / sizeof ns[0]; m++) {
            const int32_t n = ns[m];
            for (int32_t nq = 1; nq <= NQ; nq++) {
                float *o[NQ], *o2[NQ];
                const float *pp[NQ], *pp2[NQ];
                memcpy(got, acc0, sizeof got);
                memcpy(got2, acc0, sizeof got2);
                for (int i = 0; i < nq; i++) {
                    o[i] = got[i] + (i % 3);   /* unaligned accumulators */
                    o2[i] = got2[i] + (i % 3);
                    pp[i] = p[i];
                }
                kb->pv(o, pp, nq, vp, n, hd);
                /* the same positions in two calls: [0, k) then [k, n) */
                const int32_t k = n / 3;
                kb->pv(o2, pp, nq, vp, k, hd);
                for (int i = 0; i < nq; i++) pp2[i] = p[i] + k;
                kb->pv(o2, pp2, nq, vp + k, n - k, hd);
                for (int i = 0; i < NQ; i++)
                    for (int64_t e = 0; e < HDMAX + 4; e++) {
                        const int64_t off = e - i % 3;
                        float want = acc0[i][e];
                        if (i < nq && off >= 0 && off < hd)
                            for (int32_t j = 0; j < n; j++)
                                want = step(fma, p[i][j], qwi_bf16_to_f32(vrows[j][off]), want);
                        cr_assert_eq(bits(got[i][e]), bits(want),
                                     "%s hd=%lld n=%d nq=%d: acc %d elem %lld %a, chain %a", name,
                                     (long long)hd, n, nq, i, (long long)e, got[i][e], want);
                        cr_assert_eq(bits(got2[i][e]), bits(want),
                                     "%s hd=%lld n=%d nq=%d: split at %d, acc %d elem %lld", name,
                                     (long long)hd, n, nq, k, i, (long long)e);
                    }
            }
        }
    }
}

Test(attention_fast, pv_generic) { pv_case("generic"); }
Test(attention_fast, pv_avx2) { pv_case("avx2"); }
Test(attention_fast, pv_avx512) { pv_case("avx512"); }

/* ---- the block driver over a paged bf16 cache --------------------------- */

enum { MAXSEQ = 24, NH = 6, NKV = 2, HD = 40, BS = 16, MAXB = 20 };

/* float64 attention of one row over positions 0..pos, K/V as cached */
static void ref_row(const float *q, const float *kseq, const float *vseq, int32_t pos,
                    double *out) {
    const int kvd = NKV * HD, group = NH / NKV;
    double *sc = malloc(sizeof(double) * (size_t)(pos + 1));
    for (int h = 0; h < NH; h++) {
        const int g = h / group;
        double m = -INFINITY, sum = 0;
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
    }
    free(sc);
}

/* Sequences s < nseq with context ctx[s], the last nrows[s] positions
 * being this step's rows; dot: on bf16 dot products (cpu/kv_bf16dot.h)
 * where the table has them. */
static void block_case(const char *kt_name, bool dot, int nseq, const int32_t *ctx,
                       const int32_t *nrows) {
    const qwi_cpu_kernels *kt = qwi_cpu_kernels_by_name(kt_name);
    if (!kt) {
        cr_log_warn("kernel table %s not available: skipped", kt_name);
        return;
    }
    const int kvd = NKV * HD, qd = NH * HD;
    int32_t bt[MAXSEQ][MAXB], nblocks = 0;
    for (int b = 0; b < MAXB; b++)   /* interleaved: tables are not contiguous */
        for (int s = 0; s < nseq; s++) bt[s][b] = b < (ctx[s] + BS - 1) / BS ? nblocks++ : 0;
    uint16_t *kc = calloc((size_t)nblocks * BS * kvd, 2), *vc = calloc((size_t)nblocks * BS * kvd, 2);
    float *kseq[MAXSEQ], *vseq[MAXSEQ];
    int T = 0;
    for (int s = 0; s < nseq; s++) T += nrows[s];
    float *q = malloc(sizeof(float) * (size_t)T * qd), *out = malloc(sizeof(float) * (size_t)T * qd);
    float *out1 = malloc(sizeof(float) * (size_t)T * qd);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)T), *rs = malloc(sizeof(int32_t) * (size_t)T);
    int r = 0;
    for (int s = 0; s < nseq; s++) {
        float *kf = malloc(sizeof(float) * (size_t)ctx[s] * kvd);
        float *vf = malloc(sizeof(float) * (size_t)ctx[s] * kvd);
        kseq[s] = malloc(sizeof(float) * (size_t)ctx[s] * kvd);
        vseq[s] = malloc(sizeof(float) * (size_t)ctx[s] * kvd);
        int32_t *slots = malloc(sizeof(int32_t) * (size_t)ctx[s]);
        for (int p = 0; p < ctx[s]; p++) slots[p] = bt[s][p / BS] * BS + p % BS;
        for (int i = 0; i < ctx[s] * kvd; i++) {
            kf[i] = 3 * frand();   /* peaked softmax: rescales between tiles */
            vf[i] = frand();
        }
        qwi_cpu_kv_write_bf16(kc, vc, kf, vf, slots, ctx[s], kvd, BS, HD);
        for (int i = 0; i < ctx[s] * kvd; i++) {
            kseq[s][i] = qwi_bf16_to_f32(qwi_f32_to_bf16(kf[i]));
            vseq[s][i] = qwi_bf16_to_f32(qwi_f32_to_bf16(vf[i]));
        }
        free(kf);
        free(vf);
        free(slots);
        for (int i = 0; i < nrows[s]; i++, r++) {
            pos[r] = ctx[s] - nrows[s] + i;
            rs[r] = s;
            for (int d = 0; d < qd; d++) q[(int64_t)r * qd + d] = 2 * frand();
        }
    }
    qwi_cpu_attn a = { .q = q, .k_bf16 = kc, .v_bf16 = vc, .kb = qwi_cpu_kv_bf16_for(kt),
                       .out = out, .positions = pos, .row_seq = rs, .block_tables = &bt[0][0],
                       .max_blocks_per_seq = MAXB, .block_size = BS, .num_tokens = T,
                       .num_heads = NH, .num_kv_heads = NKV, .head_dim = HD,
                       .scale = (float)(1.0 / sqrt((double)HD)), .bf16_dot = dot };
    dot = dot && a.kb->dscores != NULL;   /* what runs */
    float *scr[3];
    for (int t = 0; t < 3; t++) scr[t] = malloc(qwi_cpu_attn_scratch_floats(NH, NKV, HD) * 4);
    /* every row alone */
    for (int rr = 0; rr < T; rr++)
        for (int g = 0; g < NKV; g++) qwr_attention_row(&a, kt, rr, g, scr[0]);
    for (int threads = 1; threads <= 3; threads++) {
        qwi_cpu_pool *pool;
        cr_assert_eq(qwi_cpu_pool_create(threads, &pool), QW_OK);
        qwi_cpu_attn a1 = a;
        a1.out = out1;
        memset(out1, 0xff, sizeof(float) * (size_t)T * qd);
        /* the o projection's pairs, rounded as each slice is written: the
         * same as rounding the finished rows */
        uint32_t *pairs = malloc(sizeof(uint32_t) * (size_t)T * (qd / 2));
        uint32_t *want = malloc(sizeof(uint32_t) * (size_t)T * (qd / 2));
        memset(pairs, 0xa5, sizeof(uint32_t) * (size_t)T * (qd / 2));
        if (threads == 2) a1.out_pairs = pairs;
        qwi_cpu_attention(pool, kt, scr, &a1);
        for (int64_t i = 0; i < (int64_t)T * qd; i++)
            cr_assert_eq(bits(out1[i]), bits(out[i]), "%s, %d threads: row %lld elem %lld differs from the row alone",
                         kt_name, threads, (long long)(i / qd), (long long)(i % qd));
        if (a1.out_pairs) {
            qwi_pair_round_rows(out, 0, T, qd, want);
            cr_assert(memcmp(pairs, want, sizeof(uint32_t) * (size_t)T * (qd / 2)) == 0,
                      "%s: out_pairs differ from the rounded rows", kt_name);
        }
        free(pairs);
        free(want);
        qwi_cpu_pool_destroy(pool);
    }
    if (dot && strcmp(a.kb->name, "generic") != 0) {
        /* the portable dot kernels in the same table (whose exp differs
         * from the generic table's) under the same driver: the same bits */
        qwi_cpu_kv_bf16_kernels portable = *a.kb;
        portable.dscores = qwr_kv_dscores;
        portable.dpv = qwr_kv_dpv;
        qwi_cpu_attn ag = a;
        ag.kb = &portable;
        ag.out = out1;
        for (int rr = 0; rr < T; rr++)
            for (int g = 0; g < NKV; g++) qwr_attention_row(&ag, kt, rr, g, scr[0]);
        cr_assert_eq(memcmp(out1, out, sizeof(float) * (size_t)T * qd), 0,
                     "%s: bf16 dot attention differs from the portable form's bits", kt_name);
    }
    /* float64 over the bf16 K/V (and, for dot products, q rounded to bf16
     * pairs as they are): then the only rounding left beyond f32's is P's
     * bf16 rounding, relative 2^-9 per weight, so at most 2^-9 * max|v| */
    double ref[NH * HD], err = 0;
    float qr[NH * HD];
    for (int rr = 0; rr < T; rr++) {
        for (int i = 0; i < qd; i++)
            qr[i] = dot ? qwi_bf16_to_f32(qwi_pair_round_bf16(q[(int64_t)rr * qd + i]))
                        : q[(int64_t)rr * qd + i];
        ref_row(qr, kseq[rs[rr]], vseq[rs[rr]], pos[rr], ref);
        for (int i = 0; i < qd; i++) err = fmax(err, fabs(out[(int64_t)rr * qd + i] - ref[i]));
    }
    const double bound = dot ? 1.0 / 512 + 2e-6 : 2e-6;
    cr_log_info("%s%s: fast attention max abs error %.3g against float64 over the bf16 K/V",
                kt_name, dot ? " (bf16 dot products)" : "", err);
    cr_assert_lt(err, bound, "%s: %g against float64", kt_name, err);
    for (int t = 0; t < 3; t++) free(scr[t]);
    for (int s = 0; s < nseq; s++) {
        free(kseq[s]);
        free(vseq[s]);
    }
    free(kc);
    free(vc);
    free(q);
    free(out);
    free(out1);
    free(pos);
    free(rs);
}

/* A long prefill chunk crossing two tile boundaries (runs of several
 * rows), a chunk ending just past a boundary, a chunk inside tile 0, a
 * decode row. */
static void prefill_case(const char *kt_name, bool dot) {
    const int32_t ctx[] = { 300, 131, 40, 200 }, nrows[] = { 45, 7, 23, 1 };
    block_case(kt_name, dot, 4, ctx, nrows);
}

/* A decode step: one row from each of 24 sequences (every row its own run,
 * enough for all kv heads of a sequence per task), contexts 1 .. 300. */
static void decode_case(const char *kt_name, bool dot) {
    int32_t ctx[MAXSEQ], nrows[MAXSEQ];
    for (int s = 0; s < MAXSEQ; s++) {
        ctx[s] = 1 + (s * 97) % 300;
        nrows[s] = 1;
    }
    block_case(kt_name, dot, MAXSEQ, ctx, nrows);
}

Test(attention_fast, block_generic) { prefill_case("generic", false); }
Test(attention_fast, block_avx2) { prefill_case("avx2", false); }
Test(attention_fast, block_avx512) { prefill_case("avx512", false); }
Test(attention_fast, decode_generic) { decode_case("generic", false); }
Test(attention_fast, decode_avx2) { decode_case("avx2", false); }
Test(attention_fast, decode_avx512) { decode_case("avx512", false); }
Test(attention_fast, block_bf16dot_generic) { prefill_case("generic", true); }
Test(attention_fast, block_bf16dot_avx512bf16) { prefill_case("avx512bf16", true); }
Test(attention_fast, decode_bf16dot_generic) { decode_case("generic", true); }
Test(attention_fast, decode_bf16dot_avx512bf16) { decode_case("avx512bf16", true); }

/* scale: one rounded multiply per element (the same bits in every
 * table), in place or not, nothing past n written. */
static void scale_case(const char *name) {
    const qwi_cpu_kv_bf16_kernels *kb = table(name);
    if (!kb) return;
    enum { N = 150 };
    float x[N], y[N + 4];
    for (int i = 0; i < N; i++) x[i] = 100.0f * frand();
    for (int64_t n = 0; n <= N; n += 7) {
        for (int i = 0; i < N + 4; i++) y[i] = -1.5f;
        kb->scale(y, x, 0.3183099f, n);
        for (int64_t i = 0; i < N + 4; i++) {
            const float want = i < n ? x[i] * 0.3183099f : -1.5f;
            cr_assert_eq(bits(y[i]), bits(want), "%s n=%lld: y[%lld]", name, (long long)n,
                         (long long)i);
        }
        memcpy(y, x, sizeof x);
        kb->scale(y, y, -7.25f, n);
        for (int64_t i = 0; i < n; i++)
            cr_assert_eq(bits(y[i]), bits(x[i] * -7.25f), "%s n=%lld in place", name, (long long)n);
    }
}

Test(attention_fast, scale_all_tables) {
    scale_case("generic");
    scale_case("avx2");
    scale_case("avx512");
}
