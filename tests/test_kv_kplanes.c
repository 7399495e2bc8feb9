/*
 * test_kv_kplanes.c - the K planes of the bf16 and fp8 KV caches
 * (cpu/attention.h: per block [kv_dim][block_size], so a tile's K is a
 * widening copy per (block, dim), not a transpose):
 *   - every kernel table's transpose over K planes, for block sizes that
 *     divide the 128-position tile, do not (7, 24) and exceed it (160), and
 *     1 (planes are rows), equals the scalar widen of the written values
 *     and the row-layout transpose (dstride 1) of the same K, bit for bit;
 *   - every table's pscores_q / pscores8_q (scores straight from bf16 /
 *     fp8 planes; the fp8 table's own pscores8_q where it has one) gives
 *     the bits of transpose + tscores_q, for block sizes that are
 *     multiples of the table's plane_lanes, any tile length and number of
 *     q vectors;
 *   - the engine's logits do not depend on the block size (the layout
 *     moves, the score chains do not), for bf16 and fp8 KV, over a prompt
 *     spanning three tiles and a few decode steps.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/attention.h"
#include "dtype.h"
#include "fp8.h"
#include "util/engine_util.h"
#include "util/testutil.h"

enum { NKV = 2, HD = 40, KVD = NKV * HD, CTX = 300, LD = QWI_CPU_ATTN_TILE };

static uint64_t rs = 0x2545f4914f6cdd1dull;
static float frand(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((double)(rs >> 11) / 9007199254740992.0 * 6.0 - 3.0);
}

/* One sequence of CTX positions in a pool of blocks handed out in a
 * shuffled order, written through qwi_cpu_kv_write_{bf16,fp8}; for each
 * tile and kv head, every table's transpose of the K planes must equal
 * the widened written values and the transpose of the same K as rows. */
static void check_block_size(int32_t bs, bool fp8) {
    const int32_t nb = (CTX + bs - 1) / bs, pool = nb + 3;
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)nb), *slots = malloc(sizeof(int32_t) * CTX);
    /* b -> (b * step + 2) % pool with step coprime to pool: distinct blocks,
     * out of order */
    int32_t step = 7;
    for (;; step++) {
        int32_t x = step, y = pool;
        while (y) { const int32_t t = x % y; x = y; y = t; }
        if (x == 1) break;
    }
    for (int32_t b = 0; b < nb; b++) bt[b] = (int32_t)(((int64_t)b * step + 2) % pool);
    for (int32_t p = 0; p < CTX; p++) slots[p] = bt[p / bs] * bs + p % bs;
    float *k = malloc(sizeof(float) * CTX * KVD), *v = malloc(sizeof(float) * CTX * KVD);
    for (int i = 0; i < CTX * KVD; i++) k[i] = frand(), v[i] = frand();
    const size_t pool_elems = (size_t)pool * (size_t)bs * KVD;
    uint16_t *kc = calloc(pool_elems, 2), *vc = calloc(pool_elems, 2);
    uint8_t *kc8 = calloc(pool_elems, 1), *vc8 = calloc(pool_elems, 1);
    const float k_scale = 0.75f;
    if (fp8)
        qwi_cpu_kv_write_fp8(kc8, vc8, k, v, slots, CTX, KVD, bs, HD, k_scale, 1.0f);
    else
        qwi_cpu_kv_write_bf16(kc, vc, k, v, slots, CTX, KVD, bs, HD);
    /* the same K as rows, for the dstride-1 transpose */
    uint16_t *rows = malloc(sizeof(uint16_t) * CTX * KVD);
    uint8_t *rows8 = malloc(CTX * KVD);
    for (int i = 0; i < CTX * KVD; i++) {
        rows[i] = qwi_f32_to_bf16(k[i]);
        rows8[i] = qwi_f32_to_e4m3(k[i] / k_scale);
    }
    static float kt[HD * LD], kt_rows[HD * LD];
    const char *tables[] = { "generic", "avx2", "avx512" };
    for (size_t ti = 0; ti < 3; ti++) {
        const qwi_cpu_kernels *kt_f32 = qwi_cpu_kernels_by_name(tables[ti]);
        if (!kt_f32) continue;   /* this CPU lacks it */
        const qwi_cpu_kv_bf16_kernels *kb = qwi_cpu_kv_bf16_for(kt_f32);
        const qwi_cpu_kv_fp8_kernels *kf = qwi_cpu_kv_fp8_for(kt_f32);
        for (int32_t g = 0; g < NKV; g++)
            for (int32_t t0 = 0; t0 < CTX; t0 += LD) {
                const int32_t n = CTX - t0 < LD ? CTX - t0 : LD;
                const uint16_t *kp[LD], *rp[LD];
                const uint8_t *kp8[LD], *rp8[LD];
                for (int32_t i = 0; i < n; i++) {
                    const int64_t at = qwi_cpu_kplane_index(slots[t0 + i], bs, KVD, (int64_t)g * HD);
                    kp[i] = kc + at, kp8[i] = kc8 + at;
                    rp[i] = rows + (int64_t)(t0 + i) * KVD + g * HD;
                    rp8[i] = rows8 + (int64_t)(t0 + i) * KVD + g * HD;
                }
                memset(kt, 0xff, sizeof kt);
                memset(kt_rows, 0xff, sizeof kt_rows);
                if (fp8) {
                    kf->transpose(kp8, n, HD, bs, kt, LD);
                    kf->transpose(rp8, n, HD, 1, kt_rows, LD);
                } else {
                    kb->transpose(kp, n, HD, bs, kt, LD);
                    kb->transpose(rp, n, HD, 1, kt_rows, LD);
                }
                for (int32_t d = 0; d < HD; d++)
                    for (int32_t i = 0; i < n; i++) {
                        const int64_t e = (int64_t)(t0 + i) * KVD + g * HD + d;
                        const float want = fp8 ? qwi_e4m3_to_f32(rows8[e]) : qwi_bf16_to_f32(rows[e]);
                        cr_assert(memcmp(&kt[d * LD + i], &want, 4) == 0,
                                  "%s %s bs %d head %d tile %d: kt[%d][%d] = %g, want %g", tables[ti],
                                  fp8 ? "fp8" : "bf16", bs, g, t0, d, i, kt[d * LD + i], want);
                        cr_assert(memcmp(&kt_rows[d * LD + i], &want, 4) == 0,
                                  "%s rows transpose differs at [%d][%d]", tables[ti], d, i);
                    }
                /* lanes past n untouched */
                for (int32_t d = 0; d < HD; d++)
                    for (int32_t i = n; i < LD; i++) {
                        uint32_t u;
                        memcpy(&u, &kt[d * LD + i], 4);
                        cr_assert_eq(u, 0xffffffffu, "lane %d of dim %d written (n %d)", i, d, n);
                    }
            }
    }
    free(bt), free(slots), free(k), free(v), free(kc), free(vc), free(kc8), free(vc8), free(rows),
        free(rows8);
}

Test(kv_kplanes, transpose_every_table_and_block_size) {
    const int32_t sizes[] = { 1, 7, 16, 24, 128, 160 };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        check_block_size(sizes[i], false);
        check_block_size(sizes[i], true);
    }
}

/* pscores_q against transpose + tscores_q on K planes of block size bs:
 * bit for bit, every tile length n (a tail chunk reads slots past n) and
 * 1..9 q vectors at scattered addresses. */
static void check_pscores(const qwi_cpu_kv_bf16_kernels *kb, const qwi_cpu_kv_fp8_kernels *kf,
                          int32_t bs, int64_t hd) {
    enum { NQ = 9, TILE = QWI_CPU_ATTN_TILE };
    const int64_t kvd = 2 * hd;   /* two kv heads; head 1 is read */
    const int32_t nblk = (TILE + bs - 1) / bs + 2;
    uint16_t *kc = malloc(sizeof(uint16_t) * (size_t)nblk * bs * kvd);
    uint8_t *kc8 = malloc((size_t)nblk * bs * kvd);
    for (int64_t i = 0; i < (int64_t)nblk * bs * kvd; i++) {
        kc[i] = qwi_f32_to_bf16(frand());
        kc8[i] = qwi_f32_to_e4m3(frand() * 40.0f);   /* normal and subnormal codes, no NaN */
    }
    float *kt8 = malloc(sizeof(float) * hd * TILE);
    float *q = malloc(sizeof(float) * NQ * (hd + 5)), *kt = malloc(sizeof(float) * hd * TILE);
    for (int i = 0; i < NQ * (hd + 5); i++) q[i] = frand();
    static float want[NQ][TILE], got[NQ][TILE];
    const int32_t ns[] = { 1, 5, 16, 17, 63, 64, 100, 128 };
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
        const int32_t n = ns[ni];
        const uint16_t *kp[TILE];
        const uint8_t *kp8[TILE];
        for (int32_t j = 0; j < n; j++) {
            /* blocks in reverse order; the tile starts at block 0, offset 0 */
            const int64_t slot = (int64_t)(nblk - 1 - j / bs) * bs + j % bs;
            kp[j] = kc + qwi_cpu_kplane_index(slot, bs, kvd, hd);
            kp8[j] = kc8 + qwi_cpu_kplane_index(slot, bs, kvd, hd);
        }
        kb->transpose(kp, n, hd, bs, kt, TILE);
        kf->transpose(kp8, n, hd, bs, kt8, TILE);
        for (int32_t nq = 1; nq <= NQ; nq++) {
            const float *qp[NQ];
            float *wo[NQ], *go[NQ];
            for (int i = 0; i < nq; i++) {
                qp[i] = q + (NQ - 1 - i) * (hd + 5) + i % 3;
                wo[i] = want[i];
                go[i] = got[i];
            }
            memset(got, 0xff, sizeof got);
            kb->tscores_q(qp, wo, nq, hd, kt, TILE, n, 0.125f);
            kb->pscores_q(qp, go, nq, hd, kp, bs, n, 0.125f);
            for (int i = 0; i < nq; i++) {
                cr_assert(memcmp(want[i], got[i], sizeof(float) * (size_t)n) == 0,
                          "%s bs %d hd %lld n %d nq %d: q %d scores differ", kb->name, bs, (long long)hd, n,
                          nq, i);
                uint32_t u;
                memcpy(&u, &got[i][n < TILE ? n : TILE - 1], 4);
                if (n < TILE) cr_assert_eq(u, 0xffffffffu, "%s: score lane %d past n written", kb->name, n);
            }
            /* the fp8 planes: the fp8 table's K tile, the same tscores_q */
            memset(got, 0xff, sizeof got);
            kb->tscores_q(qp, wo, nq, hd, kt8, TILE, n, 0.375f);
            kb->pscores8_q(qp, go, nq, hd, kp8, bs, n, 0.375f);
            for (int i = 0; i < nq; i++)
                cr_assert(memcmp(want[i], got[i], sizeof(float) * (size_t)n) == 0,
                          "%s fp8 bs %d hd %lld n %d nq %d: q %d scores differ", kb->name, bs, (long long)hd, n,
                          nq, i);
            /* the fp8 table's own planes kernel, where it has one, and
             * with the AVX-512 bf16 tables every AVX-512 fp8 table's */
            const qwi_cpu_kv_fp8_kernels *own[3] = { kf, NULL, NULL };
            if (kb->plane_lanes == 16) {
                own[1] = qwi_cpu_kv_fp8_avx512bw();
                own[2] = qwi_cpu_kv_fp8_avx512vbmi();
            }
            for (int t = 0; t < 3; t++) {
                if (!own[t] || !own[t]->pscores8_q) continue;
                memset(got, 0xff, sizeof got);
                own[t]->pscores8_q(qp, go, nq, hd, kp8, bs, n, 0.375f);
                for (int i = 0; i < nq; i++) {
                    cr_assert(memcmp(want[i], got[i], sizeof(float) * (size_t)n) == 0,
                              "%s fp8 bs %d hd %lld n %d nq %d: q %d scores differ", own[t]->name, bs,
                              (long long)hd, n, nq, i);
                    uint32_t u;
                    memcpy(&u, &got[i][n < TILE ? n : TILE - 1], 4);
                    if (n < TILE)
                        cr_assert_eq(u, 0xffffffffu, "%s: fp8 score lane %d past n written", own[t]->name, n);
                }
            }
        }
    }
    free(kc), free(kc8), free(q), free(kt), free(kt8);
}

Test(kv_kplanes, pscores_equal_transpose_then_tscores) {
    const char *tables[] = { "generic", "avx2", "avx512" };
    int ran = 0;
    for (size_t ti = 0; ti < 3; ti++) {
        const qwi_cpu_kernels *kt_f32 = qwi_cpu_kernels_by_name(tables[ti]);
        if (!kt_f32) continue;
        const qwi_cpu_kv_bf16_kernels *kb = qwi_cpu_kv_bf16_for(kt_f32);
        const qwi_cpu_kv_fp8_kernels *kf = qwi_cpu_kv_fp8_for(kt_f32);
        cr_assert_not_null(kb->pscores_q, "%s has no pscores_q", kb->name);
        cr_assert_not_null(kb->pscores8_q, "%s has no pscores8_q", kb->name);
        cr_assert_str_eq(kb->name, tables[ti]);
        const int32_t L = kb->plane_lanes;
        const int32_t sizes[] = { L, 2 * L, 16, 48, 128, 160 };
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            if (sizes[si] % L) continue;
            check_pscores(kb, kf, sizes[si], 128);
            check_pscores(kb, kf, sizes[si], 40);
        }
        ran++;
    }
    cr_assert_geq(ran, 1);
}

/* Logits of a 300-token prompt (three tiles) and 4 greedy tokens, with
 * the given block size and KV dtype, on 2 threads. */
static void run_bs(const char *dir, int64_t bs, int64_t dtype, qwt_result *res) {
    qwt_engine_cfg cfg = { .block_size = bs, .threads = 2, .kv_cache_dtype = dtype,
                           .num_kv_blocks = 2048 / bs + 8 };
    qw_engine *e = qwt_engine_new(dir, &cfg);
    static int32_t prompt[CTX];
    qwt_make_prompt(prompt, CTX, 300, 77);
    qwt_job job = { .prompt = prompt, .num_prompt = CTX, .max_tokens = 4, .ignore_eos = 1,
                    .keep_logits = 1, .seed = 1 };
    qwt_run_jobs(e, &job, 1, res);
    qw_engine_destroy(e);
}

Test(kv_kplanes, logits_do_not_depend_on_the_block_size, .timeout = 120) {
    char *dir = qwt_model("kvkp-tiny", "--shape tiny --dtype bf16 --seed 31 --max-pos 1024");
    cr_assert_not_null(dir);
    const int64_t dtypes[] = { QW_KV_CACHE_BF16, QW_KV_CACHE_FP8_E4M3 };
    const int64_t sizes[] = { 1, 7, 24, 160 };
    for (int di = 0; di < 2; di++) {
        qwt_result *ref = calloc(1, sizeof *ref);
        run_bs(dir, 16, dtypes[di], ref);
        cr_assert_eq(ref->num_logits, 4);
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            qwt_result *r = calloc(1, sizeof *r);
            run_bs(dir, sizes[si], dtypes[di], r);
            cr_assert_eq(r->num_tokens, ref->num_tokens);
            cr_assert_eq(r->num_logits, ref->num_logits);
            cr_assert(memcmp(r->logits, ref->logits, sizeof(float) * (size_t)r->num_logits * r->vocab) == 0,
                      "dtype %lld: block size %lld logits differ from block size 16",
                      (long long)dtypes[di], (long long)sizes[si]);
            qwt_results_free(r, 1);
            free(r);
        }
        qwt_results_free(ref, 1);
        free(ref);
    }
    free(dir);
}
