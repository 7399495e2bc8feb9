/*
 * test_attention_bf16dot.c - the bf16 dot-product attention kernels
 * (cpu/kv_bf16dot.h) in every table that has them (generic, and
 * avx512bf16 where the CPU runs it), each output against a scalar model of
 * the contract's chain written here, bit for bit:
 *  - dscores over K planes of several block sizes (adjacent plane rows at
 *    16, strided at 32 and 48), nq 1..13 (every register block and
 *    remainder), n with partial lane chunks, hd with and without 32-wide
 *    blocks; nothing written outside the n scores; cached subnormals count
 *    as zero;
 *  - dpv for nq 1..19, odd and even n, hd with every block size and the
 *    scalar tail; split at an even position it gives the same bits as one
 *    call; with n odd, row n is never read (it holds NaN here).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kv_bf16.h"
#include "cpu/kv_bf16dot.h"
#include "cpu/pairpanel.h"
#include "dtype.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
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
    return strcmp(name, "generic") == 0 ? qwi_cpu_kv_bf16_generic() : qwi_cpu_kv_bf16_avx512bf16();
}

/* A bf16 value as the contract reads it: a zero exponent is a signed zero. */
static float daz(uint16_t h) {
    if ((h & 0x7f80u) == 0) h &= 0x8000u;
    return qwi_bf16_to_f32(h);
}

/* Random cache content, one element in 61 a subnormal (which must count as zero). */
static uint16_t cache_elem(void) {
    static unsigned c;
    if (++c % 61 == 0) return (uint16_t)((c & 1 ? 0x8000u : 0u) | (1u + c % 0x7fu));
    return qwi_f32_to_bf16(frand());
}

static void dscores_case(const char *name) {
    const qwi_cpu_kv_bf16_kernels *kb = table(name);
    if (!kb) {
        cr_log_warn("kv bf16 table %s not available on this CPU: skipped", name);
        return;
    }
    cr_assert(kb->dscores && kb->dpv, "%s: no bf16 dot entries", name);
    enum { NQ = 13, NP = 128, HDMAX = 128, NB = 16 };
    const int64_t hds[] = { 128, 40, 16, 2 };
    const int32_t bss[] = { 16, 32, 48 };
    const int32_t ns[] = { 128, 100, 64, 17, 1 };
    static uint16_t planes[NB * 48 * HDMAX];
    static uint32_t q2[NQ][HDMAX / 2 + 3];
    static float obuf[NQ][NP + 8];
    const float scale = 0.0883883476f;
    for (size_t bi = 0; bi < sizeof bss / sizeof bss[0]; bi++) {
        const int32_t bs = bss[bi];
        for (size_t c = 0; c < sizeof hds / sizeof hds[0]; c++) {
            const int64_t hd = hds[c];
            /* blocks of [hd][bs] planes, the context's blocks in reverse order */
            for (int64_t i = 0; i < (int64_t)NB * bs * hd; i++) planes[i] = cache_elem();
            const uint16_t *kp[NP];
            for (int32_t j = 0; j < NP; j++) {
                const int32_t blk = NB - 1 - j / bs;
                kp[j] = planes + (int64_t)blk * bs * hd + j % bs;
            }
            for (int i = 0; i < NQ; i++) {
                float qf[HDMAX];
                for (int64_t d = 0; d < hd; d++) qf[d] = 2.0f * frand();
                qwi_pair_round_rows(qf, 0, 1, hd, q2[i]);
            }
            for (size_t m = 0; m < sizeof ns / sizeof ns[0]; m++) {
                const int32_t n = ns[m];
                for (int32_t nq = 1; nq <= NQ; nq++) {
                    const uint32_t *q[NQ];
                    float *o[NQ];
                    for (int i = 0; i < nq; i++) {
                        q[i] = q2[NQ - 1 - i];
                        o[i] = obuf[NQ - 1 - i] + (i % 5);   /* unaligned outputs */
                    }
                    for (int i = 0; i < NQ; i++)
                        for (int j = 0; j < NP + 8; j++) obuf[i][j] = -9.0f;
                    kb->dscores(q, o, nq, hd, kp, bs, n, scale);
                    for (int i = 0; i < nq; i++)
                        for (int32_t j = 0; j < n; j++) {
                            float acc = 0.0f;
                            for (int64_t dp = 0; dp < hd / 2; dp++) {
                                const float qh = qwi_bf16_to_f32((uint16_t)(q[i][dp] >> 16));
                                const float ql = qwi_bf16_to_f32((uint16_t)q[i][dp]);
                                acc = acc + qh * daz(kp[j][(2 * dp + 1) * bs]);
                                acc = acc + ql * daz(kp[j][2 * dp * bs]);
                            }
                            acc = acc * scale;
                            cr_assert_eq(bits(o[i][j]), bits(acc),
                                         "%s bs=%d hd=%lld n=%d nq=%d: q %d pos %d %a, chain %a",
                                         name, bs, (long long)hd, n, nq, i, j, o[i][j], acc);
                        }
                    int written = 0;
                    for (int i = 0; i < NQ; i++)
                        for (int j = 0; j < NP + 8; j++) {
                            const int k = NQ - 1 - i;   /* the q index of buffer i */
                            const bool mine = k < nq && j >= k % 5 && j < k % 5 + n;
                            if (!mine && obuf[i][j] != -9.0f) written++;
                        }
                    cr_assert_eq(written, 0, "%s bs=%d hd=%lld n=%d nq=%d: %d floats written outside",
                                 name, bs, (long long)hd, n, nq, written);
                }
            }
        }
    }
}

Test(attention_bf16dot, dscores_generic) { dscores_case("generic"); }
Test(attention_bf16dot, dscores_avx512bf16) { dscores_case("avx512bf16"); }

static void dpv_case(const char *name) {
    const qwi_cpu_kv_bf16_kernels *kb = table(name);
    if (!kb) {
        cr_log_warn("kv bf16 table %s not available on this CPU: skipped", name);
        return;
    }
    enum { NQ = 19, NP = 128, HDMAX = 130 };
    const int64_t hds[] = { 128, 130, 96, 48, 40, 17, 16, 7, 1 };
    const int32_t ns[] = { 128, 37, 16, 3, 1 };
    static uint16_t vrows[NP + 1][HDMAX], nanrow[HDMAX];
    static uint32_t p2[NQ][NP / 2];
    static float acc0[NQ][HDMAX + 4], got[NQ][HDMAX + 4], got2[NQ][HDMAX + 4];
    const uint16_t *vp[NP + 1];
    for (int j = 0; j < NP; j++) {
        vp[j] = vrows[j];
        for (int e = 0; e < HDMAX; e++) vrows[j][e] = cache_elem();
    }
    for (int e = 0; e < HDMAX; e++) nanrow[e] = 0x7fc0;
    for (int i = 0; i < NQ; i++) {
        float p[NP];
        for (int j = 0; j < NP; j++) p[j] = 0.5f * (frand() + 1.0f);
        qwi_pair_round_rows(p, 0, 1, NP, p2[i]);
        for (int e = 0; e < HDMAX + 4; e++) acc0[i][e] = frand();
    }
    for (size_t c = 0; c < sizeof hds / sizeof hds[0]; c++) {
        const int64_t hd = hds[c];
        for (size_t m = 0; m < sizeof ns / sizeof ns[0]; m++) {
            const int32_t n = ns[m];
            vp[n] = nanrow;   /* row n: must not be read */
            for (int32_t nq = 1; nq <= NQ; nq++) {
                float *o[NQ], *o2[NQ];
                const uint32_t *pp[NQ], *pp2[NQ];
                memcpy(got, acc0, sizeof got);
                memcpy(got2, acc0, sizeof got2);
                for (int i = 0; i < nq; i++) {
                    o[i] = got[i] + (i % 3);   /* unaligned accumulators */
                    o2[i] = got2[i] + (i % 3);
                    pp[i] = p2[i];
                }
                kb->dpv(o, pp, nq, vp, n, hd);
                /* the same positions in two calls, split at an even k */
                const int32_t k = (n / 3) & ~1;
                kb->dpv(o2, pp, nq, vp, k, hd);
                for (int i = 0; i < nq; i++) pp2[i] = p2[i] + k / 2;
                kb->dpv(o2, pp2, nq, vp + k, n - k, hd);
                for (int i = 0; i < NQ; i++)
                    for (int64_t e = 0; e < HDMAX + 4; e++) {
                        const int64_t off = e - i % 3;
                        float want = acc0[i][e];
                        if (i < nq && off >= 0 && off < hd)
                            for (int32_t j = 0; j < n; j += 2) {
                                const float ph = qwi_bf16_to_f32((uint16_t)(p2[i][j / 2] >> 16));
                                const float pl = qwi_bf16_to_f32((uint16_t)p2[i][j / 2]);
                                want = want + ph * (j + 1 < n ? daz(vrows[j + 1][off]) : 0.0f);
                                want = want + pl * daz(vrows[j][off]);
                            }
                        cr_assert_eq(bits(got[i][e]), bits(want),
                                     "%s hd=%lld n=%d nq=%d: acc %d elem %lld %a, chain %a", name,
                                     (long long)hd, n, nq, i, (long long)e, got[i][e], want);
                        cr_assert_eq(bits(got2[i][e]), bits(want),
                                     "%s hd=%lld n=%d nq=%d: split at %d, acc %d elem %lld", name,
                                     (long long)hd, n, nq, k, i, (long long)e);
                    }
            }
            vp[n] = vrows[n];
        }
    }
}

Test(attention_bf16dot, dpv_generic) { dpv_case("generic"); }
Test(attention_bf16dot, dpv_avx512bf16) { dpv_case("avx512bf16"); }

/* The tables that keep f32 q and P have no dot entries; the choice of
 * table by the f32 kernel table name gives the dot one for avx512bf16. */
Test(attention_bf16dot, which_tables_have_them) {
    cr_assert(qwi_cpu_kv_bf16_generic()->dscores != NULL);
    const qwi_cpu_kv_bf16_kernels *t = qwi_cpu_kv_bf16_avx2();
    if (t) cr_assert(t->dscores == NULL && t->dpv == NULL);
    t = qwi_cpu_kv_bf16_avx512();
    if (t) cr_assert(t->dscores == NULL && t->dpv == NULL);
    const qwi_cpu_kernels *kt = qwi_cpu_kernels_by_name("avx512bf16");
    if (kt && qwi_kv_bf16dot_have_avx512bf16())
        cr_assert_str_eq(qwi_cpu_kv_bf16_for(kt)->name, "avx512bf16");
}
