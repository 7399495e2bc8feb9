/*
 * test_kv_fp8_dot.c - the fp8 (e4m3) KV cache on bf16 dot products (fast
 * numerics over a bf16 table with dscores/dpv):
 *  - to_bf16 of every fp8 table gives each of the 256 codes the upper
 *    half of qwi_e4m3_to_f32's bits (so exactly its value), at every
 *    length's tail;
 *  - qwi_cpu_kv_fp8_tile_bf16 lays a tile out as 16-position planes and
 *    V rows, for block sizes that hold whole planes (16, 32) and ones
 *    that do not (24, 8), zeros past n;
 *  - the avx512vbmi and avx512bw tables' dscores8 / dpv8 give the bits of
 *    to_bf16 followed by the avx512bf16 dscores / dpv, for nq 1..9 (every register
 *    block), n with and without tails, odd n, hd with a last pair of dims
 *    (hd % 4 == 2) and a last partial 32 (hd % 32 != 0), dstride 16 and 32;
 *  - attention over a paged fp8 cache on dot products equals attention
 *    over the bf16 cache holding the same values, bit for bit, rows alone
 *    (decode: the dscores8/dpv8 route where the table has it) and in runs
 *    (the widened tile), at 1-3 threads, for the generic kernel table and
 *    the avx512bf16 one with each AVX-512 fp8 table (avx512: no fused
 *    kernels, the tile for every row), block sizes 16 and 24.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/attention.h"
#include "cpu/kv_bf16dot.h"
#include "cpu/kv_fp8.h"
#include "cpu/pairpanel.h"
#include "cpu/threadpool.h"
#include "dtype.h"
#include "fp8.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static float frand(void) {   /* uniform in [-1, 1) */
    return (float)((double)(next() >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
/* A random finite e4m3 code (a cache never holds NaN: its writes saturate). */
static uint8_t code(void) {
    const uint8_t c = (uint8_t)(next() >> 56);
    return qwi_e4m3_is_nan(c) ? (uint8_t)(c & 0xf0) : c;
}

static uint16_t want_bf16(uint8_t c) {
    const float f = qwi_e4m3_to_f32(c);
    uint32_t u;
    memcpy(&u, &f, 4);
    cr_assert_eq(u & 0xffff, 0, "code %02x: not a bf16 value", c);
    return (uint16_t)(u >> 16);
}

static const char *const fp8_tables[] = { "generic", "avx2", "avx512", "avx512bw", "avx512vbmi" };

static const qwi_cpu_kv_fp8_kernels *fp8_table(const char *name) {
    if (strcmp(name, "generic") == 0) return qwi_cpu_kv_fp8_generic();
    if (strcmp(name, "avx2") == 0) return qwi_cpu_kv_fp8_avx2();
    if (strcmp(name, "avx512") == 0) return qwi_cpu_kv_fp8_avx512();
    if (strcmp(name, "avx512bw") == 0) return qwi_cpu_kv_fp8_avx512bw();
    return qwi_cpu_kv_fp8_avx512vbmi();
}

/* ---- to_bf16 ------------------------------------------------------------ */

Test(kv_fp8_dot, to_bf16_every_code_every_table) {
    uint8_t src[256 + 67];
    uint16_t dst[256 + 67 + 1];
    for (size_t t = 0; t < sizeof fp8_tables / sizeof *fp8_tables; t++) {
        const qwi_cpu_kv_fp8_kernels *kf = fp8_table(fp8_tables[t]);
        if (!kf) {
            cr_log_warn("fp8 table %s not available on this CPU: skipped", fp8_tables[t]);
            continue;
        }
        cr_assert_not_null(kf->to_bf16, "%s: no to_bf16", kf->name);
        for (int i = 0; i < 256; i++) src[i] = (uint8_t)i;   /* NaN codes included */
        kf->to_bf16(src, dst, 256);
        for (int i = 0; i < 256; i++)
            cr_assert_eq(dst[i], want_bf16((uint8_t)i), "%s: code %02x -> %04x", kf->name, i, dst[i]);
        /* every tail length, from an odd address, nothing written past n */
        for (int n = 0; n <= 256 + 66; n += (n < 140 ? 1 : 13)) {
            for (int i = 0; i < n; i++) src[1 + i % 256] = code();
            memset(dst, 0x5a, sizeof dst);
            kf->to_bf16(src + 1, dst, n);
            for (int i = 0; i < n; i++)
                cr_assert_eq(dst[i], want_bf16(src[1 + i]), "%s: n %d, element %d", kf->name, n, i);
            cr_assert_eq(dst[n], 0x5a5a, "%s: n %d: wrote past the end", kf->name, n);
        }
    }
}

/* ---- the widened tile ---------------------------------------------------- */

/* A tile of n positions starting at position t0 of one sequence, kv head
 * g of NKV, through a shuffled block table: the pointers attention forms
 * (cpu/attention.c tile_rows). */
enum { T_NKV = 2, T_MAXPOS = 320 };

static void tile_case(int32_t bs, int64_t hd, int32_t t0, int32_t n) {
    const int64_t kvd = T_NKV * hd;
    const int32_t nblocks = T_MAXPOS / bs + 2;
    uint8_t *kc = malloc((size_t)(nblocks * bs * kvd)), *vc = malloc((size_t)(nblocks * bs * kvd));
    for (int64_t i = 0; i < nblocks * bs * kvd; i++) {
        kc[i] = code();
        vc[i] = code();
    }
    int32_t bt[T_MAXPOS / 8 + 2];
    for (int32_t b = 0; b < nblocks; b++) bt[b] = nblocks - 1 - b;   /* no two neighbours adjacent */
    const int32_t g = 1;
    const uint8_t *k8[128], *v8[128];
    for (int32_t i = 0; i < n; i++) {
        const int32_t p = t0 + i, b = bt[p / bs], o = p % bs;
        k8[i] = kc + (int64_t)b * bs * kvd + (int64_t)g * hd * bs + o;
        v8[i] = vc + (((int64_t)b * T_NKV + g) * bs + o) * hd;
    }
    uint16_t *kbuf = malloc(sizeof(uint16_t) * 128 * (size_t)hd), *vbuf = malloc(sizeof(uint16_t) * 128 * (size_t)hd);
    memset(kbuf, 0xa5, sizeof(uint16_t) * 128 * (size_t)hd);
    const uint16_t *k[128], *v[128];
    const qwi_cpu_kv_fp8_kernels *kf = qwi_cpu_kv_fp8_for(qwi_cpu_kernels_select());
    qwi_cpu_kv_fp8_tile_bf16(kf, k8, v8, n, hd, bs, kbuf, vbuf, k, v);
    for (int32_t j = 0; j < n; j++) {
        cr_assert_eq(k[j], kbuf + (j / 16) * 16 * hd + j % 16, "bs %d: k[%d] not in its plane", bs, j);
        for (int64_t d = 0; d < hd; d++) {
            cr_assert_eq(k[j][d * 16], want_bf16(k8[j][d * bs]), "bs %d n %d: K pos %d dim %lld", bs, n, j,
                         (long long)d);
            cr_assert_eq(v[j][d], want_bf16(v8[j][d]), "bs %d n %d: V pos %d dim %lld", bs, n, j, (long long)d);
        }
    }
    for (int32_t j = n; j < (n + 15) / 16 * 16; j++)   /* the last plane's lanes past n */
        for (int64_t d = 0; d < hd; d++)
            cr_assert_eq(kbuf[(j / 16) * 16 * hd + d * 16 + j % 16], 0, "bs %d n %d: lane %d not zero", bs, n, j);
    free(kc);
    free(vc);
    free(kbuf);
    free(vbuf);
}

Test(kv_fp8_dot, tile_layout_every_block_size) {
    const int32_t bss[] = { 16, 32, 24, 8 };
    for (int b = 0; b < 4; b++) {
        tile_case(bss[b], 128, 0, 128);
        tile_case(bss[b], 40, 128, 77);
        tile_case(bss[b], 6, 256, 1);
        tile_case(bss[b], 128, 0, 17);
    }
}

/* ---- dscores8 / dpv8 ---------------------------------------------------- */

enum { K_MAXN = 128, K_MAXHD = 128, K_MAXQ = 9 };

/* dscores8 and dpv8 of kf against to_bf16 + the avx512bf16 kernels. */
static void fused_case(const qwi_cpu_kv_fp8_kernels *kf, int32_t nq, int32_t n, int64_t hd, int64_t dstride) {
    /* K planes of dstride positions (n rounded up to dstride), V rows */
    const int32_t nplanes = (n + (int32_t)dstride - 1) / (int32_t)dstride;
    uint8_t *kc = malloc((size_t)(nplanes * dstride * hd)), *vc = malloc((size_t)(n * hd));
    for (int64_t i = 0; i < nplanes * dstride * hd; i++) kc[i] = code();
    for (int64_t i = 0; i < n * hd; i++) vc[i] = code();
    uint16_t *kw = malloc(sizeof(uint16_t) * (size_t)(nplanes * dstride * hd));
    uint16_t *vw = malloc(sizeof(uint16_t) * (size_t)(n * hd));
    qwi_cpu_kv_fp8_to_bf16(kc, kw, nplanes * dstride * hd);
    qwi_cpu_kv_fp8_to_bf16(vc, vw, n * hd);
    const uint8_t *k8[K_MAXN], *v8[K_MAXN];
    const uint16_t *k16[K_MAXN], *v16[K_MAXN];
    for (int32_t j = 0; j < n; j++) {
        const int64_t at = (j / dstride) * dstride * hd + j % dstride;
        k8[j] = kc + at;
        k16[j] = kw + at;
        v8[j] = vc + j * hd;
        v16[j] = vw + j * hd;
    }
    static float qf[K_MAXQ][K_MAXHD], sa[K_MAXQ][K_MAXN + 16], sb[K_MAXQ][K_MAXN + 16];
    static float pf[K_MAXQ][K_MAXN + 1], oa[K_MAXQ][K_MAXHD], ob[K_MAXQ][K_MAXHD];
    static uint32_t q2[K_MAXQ][K_MAXHD / 2], p2[K_MAXQ][K_MAXN / 2 + 1];
    const uint32_t *qp[K_MAXQ], *pp[K_MAXQ];
    float *ap[K_MAXQ], *bp[K_MAXQ];
    for (int32_t i = 0; i < nq; i++) {
        for (int64_t d = 0; d < hd; d++) qf[i][d] = 2 * frand();
        qwi_pair_round_rows(qf[i], 0, 1, hd, q2[i]);
        for (int32_t j = 0; j < n; j++) pf[i][j] = 0.5f + 0.5f * frand();
        qwi_pair_round_rows(pf[i], 0, 1, n, p2[i]);
        for (int64_t d = 0; d < hd; d++) oa[i][d] = ob[i][d] = frand();
        memset(sa[i], 0x7f, sizeof sa[i]);
        memset(sb[i], 0x7f, sizeof sb[i]);
        qp[i] = q2[i];
        pp[i] = p2[i];
    }
    for (int32_t i = 0; i < nq; i++) ap[i] = sa[i], bp[i] = sb[i];
    kf->dscores8(qp, ap, nq, hd, k8, dstride, n, 0.125f);
    qwi_avx512bf16_kv_dscores(qp, bp, nq, hd, k16, dstride, n, 0.125f);
    for (int32_t i = 0; i < nq; i++)   /* lanes past n untouched in both */
        cr_assert_eq(memcmp(sa[i], sb[i], sizeof sa[i]), 0, "dscores8 nq %d n %d hd %lld dstride %lld: head %d",
                     nq, n, (long long)hd, (long long)dstride, i);
    for (int32_t i = 0; i < nq; i++) ap[i] = oa[i], bp[i] = ob[i];
    kf->dpv8(ap, pp, nq, v8, n, hd);
    qwi_avx512bf16_kv_dpv(bp, pp, nq, v16, n, hd);
    for (int32_t i = 0; i < nq; i++)
        cr_assert_eq(memcmp(oa[i], ob[i], sizeof(float) * (size_t)hd), 0, "dpv8 nq %d n %d hd %lld: row %d", nq, n,
                     (long long)hd, i);
    free(kc);
    free(vc);
    free(kw);
    free(vw);
}

static void fused_tables(const char *name) {
    const qwi_cpu_kv_fp8_kernels *kf = fp8_table(name);
    if (!kf || !kf->dscores8) {
        cr_log_warn("no %s fp8 dot-product kernels on this CPU (they need AVX512_BF16): skipped", name);
        return;
    }
    cr_assert_not_null(kf->dpv8);
    const int32_t ns[] = { 1, 2, 15, 16, 17, 37, 64, 100, 128 };
    const int64_t hds[] = { 128, 40, 6, 34, 64 };
    for (int32_t nq = 1; nq <= K_MAXQ; nq++)
        for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
            for (size_t b = 0; b < sizeof hds / sizeof *hds; b++) {
                fused_case(kf, nq, ns[a], hds[b], 16);
                if (nq % 4 == 1) fused_case(kf, nq, ns[a], hds[b], 32);
            }
}

Test(kv_fp8_dot, fused_kernels_give_the_widened_bits_avx512vbmi) { fused_tables("avx512vbmi"); }
Test(kv_fp8_dot, fused_kernels_give_the_widened_bits_avx512bw) { fused_tables("avx512bw"); }

/* ---- attention ---------------------------------------------------------- */

enum { A_NH = 6, A_NKV = 2, A_MAXSEQ = 5, A_MAXB = 40 };

/* Sequences with context ctx[s], the last nrows[s] positions this step's
 * rows: the fp8 cache (scales 1) and the bf16 cache holding its values,
 * attention on dot products through kernel table kt_name; every output
 * bit equal, rows alone and batched at 1-3 threads. */
static void attention_case(const char *kt_name, const char *kf_name, int32_t bs, int64_t hd, int nseq,
                           const int32_t *ctx, const int32_t *nrows) {
    const qwi_cpu_kernels *kt = qwi_cpu_kernels_by_name(kt_name);
    if (!kt) {
        cr_log_warn("kernel table %s not available: skipped", kt_name);
        return;
    }
    const qwi_cpu_kv_bf16_kernels *kb = qwi_cpu_kv_bf16_for(kt);
    cr_assert(kb->dscores && kb->dpv, "%s: no dot products", kt_name);
    const int64_t kvd = A_NKV * hd, qd = A_NH * hd;
    int32_t bt[A_MAXSEQ][A_MAXB], nblocks = 0;
    for (int b = 0; b < A_MAXB; b++)
        for (int s = 0; s < nseq; s++) bt[s][b] = b < (ctx[s] + bs - 1) / bs ? nblocks++ : 0;
    uint8_t *k8 = calloc((size_t)(nblocks * bs * kvd), 1), *v8 = calloc((size_t)(nblocks * bs * kvd), 1);
    uint16_t *k16 = calloc((size_t)(nblocks * bs * kvd), 2), *v16 = calloc((size_t)(nblocks * bs * kvd), 2);
    int T = 0;
    for (int s = 0; s < nseq; s++) T += nrows[s];
    float *q = malloc(sizeof(float) * (size_t)(T * qd));
    float *o8 = malloc(sizeof(float) * (size_t)(T * qd)), *o16 = malloc(sizeof(float) * (size_t)(T * qd));
    float *ob = malloc(sizeof(float) * (size_t)(T * qd));
    int32_t pos[128], rs[128];
    int r = 0;
    for (int s = 0; s < nseq; s++) {
        float *kf = malloc(sizeof(float) * (size_t)(ctx[s] * kvd)), *vf = malloc(sizeof(float) * (size_t)(ctx[s] * kvd));
        int32_t *slots = malloc(sizeof(int32_t) * (size_t)ctx[s]);
        for (int p = 0; p < ctx[s]; p++) slots[p] = bt[s][p / bs] * bs + p % bs;
        for (int64_t i = 0; i < ctx[s] * kvd; i++) {
            kf[i] = 3 * frand();   /* peaked softmax: rescales between tiles */
            vf[i] = frand();
        }
        qwi_cpu_kv_write_fp8(k8, v8, kf, vf, slots, ctx[s], kvd, bs, (int32_t)hd, 1.0f, 1.0f);
        for (int64_t i = 0; i < ctx[s] * kvd; i++) {   /* the values the fp8 cache holds */
            uint8_t c;
            qwi_cpu_kv_fp8_round(&kf[i], &c, 1, 1.0f);
            kf[i] = qwi_e4m3_to_f32(c);
            qwi_cpu_kv_fp8_round(&vf[i], &c, 1, 1.0f);
            vf[i] = qwi_e4m3_to_f32(c);
        }
        qwi_cpu_kv_write_bf16(k16, v16, kf, vf, slots, ctx[s], kvd, bs, (int32_t)hd);
        free(kf);
        free(vf);
        free(slots);
        for (int i = 0; i < nrows[s]; i++, r++) {
            pos[r] = ctx[s] - nrows[s] + i;
            rs[r] = s;
            for (int64_t d = 0; d < qd; d++) q[r * qd + d] = 2 * frand();
        }
    }
    qwi_cpu_attn a16 = { .q = q, .k_bf16 = k16, .v_bf16 = v16, .kb = kb, .bf16_dot = true, .out = o16,
                         .positions = pos, .row_seq = rs, .block_tables = &bt[0][0],
                         .max_blocks_per_seq = A_MAXB, .block_size = bs, .num_tokens = T,
                         .num_heads = A_NH, .num_kv_heads = A_NKV, .head_dim = (int32_t)hd,
                         .scale = (float)(1.0 / sqrt((double)hd)) };
    qwi_cpu_attn a8 = a16;
    a8.k_bf16 = a8.v_bf16 = NULL;
    a8.k_fp8 = k8;
    a8.v_fp8 = v8;
    a8.kf = kf_name ? fp8_table(kf_name) : qwi_cpu_kv_fp8_for(kt);
    if (!a8.kf) {
        cr_log_warn("fp8 table %s not available: skipped", kf_name);
        return;
    }
    a8.k_scale = a8.v_scale = 1.0f;
    a8.out = o8;
    cr_assert(qwi_cpu_attn_on_dot_products(&a8), "%s: fp8 not on dot products", kt_name);
    float *scr[3];
    for (int t = 0; t < 3; t++) scr[t] = malloc(qwi_cpu_attn_scratch_floats(A_NH, A_NKV, (int32_t)hd) * 4);
    for (int rr = 0; rr < T; rr++)   /* every row alone */
        for (int g = 0; g < A_NKV; g++) {
            qwr_attention_row(&a16, kt, rr, g, scr[0]);
            qwr_attention_row(&a8, kt, rr, g, scr[0]);
        }
    for (int64_t i = 0; i < T * qd; i++)
        cr_assert(memcmp(&o8[i], &o16[i], sizeof(float)) == 0, "%s bs %d hd %lld: row %lld elem %lld: fp8 %a, bf16 cache %a",
                  kt_name, bs, (long long)hd, (long long)(i / qd), (long long)(i % qd), o8[i], o16[i]);
    for (int threads = 1; threads <= 3; threads++) {
        qwi_cpu_pool *pool;
        cr_assert_eq(qwi_cpu_pool_create(threads, &pool), QW_OK);
        qwi_cpu_attn ab = a8;
        ab.out = ob;
        memset(ob, 0xff, sizeof(float) * (size_t)(T * qd));
        qwi_cpu_attention(pool, kt, scr, &ab);
        cr_assert_eq(memcmp(ob, o8, sizeof(float) * (size_t)(T * qd)), 0,
                     "%s bs %d, %d threads: batched fp8 differs from rows alone", kt_name, bs, threads);
        qwi_cpu_pool_destroy(pool);
    }
    for (int t = 0; t < 3; t++) free(scr[t]);
    free(k8);
    free(v8);
    free(k16);
    free(v16);
    free(q);
    free(o8);
    free(o16);
    free(ob);
}

static void attention_tables(const char *kt_name, const char *kf_name) {
    /* prefill chunks across tile boundaries, a chunk inside tile 0, decode rows */
    const int32_t ctx[] = { 300, 131, 40, 200, 1 }, nrows[] = { 45, 7, 23, 1, 1 };
    const int32_t bss[] = { 16, 24 };
    for (int b = 0; b < 2; b++) {
        attention_case(kt_name, kf_name, bss[b], 128, 5, ctx, nrows);
        attention_case(kt_name, kf_name, bss[b], 40, 5, ctx, nrows);
    }
}

Test(kv_fp8_dot, attention_equals_the_bf16_cache_generic) { attention_tables("generic", NULL); }
Test(kv_fp8_dot, attention_equals_the_bf16_cache_avx512vbmi) { attention_tables("avx512bf16", "avx512vbmi"); }
Test(kv_fp8_dot, attention_equals_the_bf16_cache_avx512bw) { attention_tables("avx512bf16", "avx512bw"); }
Test(kv_fp8_dot, attention_equals_the_bf16_cache_avx512) { attention_tables("avx512bf16", "avx512"); }
