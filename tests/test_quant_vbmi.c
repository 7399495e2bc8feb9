/*
 * test_quant_vbmi.c - the AVX512_VBMI decode of FP8 (E4M3) weights in the
 * fast-mode quantized matmul (qwi_avx512vbmi_matmul_qpair, kernels.h):
 * bit for bit the same as the vcvtph2ps decode it replaces
 * (qwi_avx512bf16_matmul_qpair) and as the generic table, for every one
 * of the 256 code bytes (NaN patterns included), M = 1 and 2 (the
 * register path) and 7 (decoded chunks: a 6-row tile and a 1-row one), groups of
 * odd pair counts (a pair before and after the two-pair steps), odd K, a
 * partial last block, column splits (n0 > 0), bias and accumulate; and the
 * avx512bf16 table picks it where the CPU has avx512vbmi. Skipped on a CPU
 * without AVX512_BF16 + AVX512_VBMI.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kernels.h"
#include "cpu/pairpanel.h"
#include "cpu/qpanel.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))   /* the kernels exist */

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}
static float urand(void) { return (float)(rnd() % 2000001) / 1000000.0f - 1.0f; }   /* [-1, 1] */

static bool have_vbmi(void) {
    return qwi_cpu_kernels_by_name("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vbmi");
}

typedef struct shape {
    int64_t n, k, gk;
} shape;

static const shape shapes[] = {
    { 48, 256, 128 },   /* aligned: two-pair steps only                         */
    { 40, 202, 6 },     /* 3 pairs per group: single pairs at both ends         */
    { 33, 201, 64 },    /* odd K (pad column), partial last block, ragged N     */
    { 80, 96, 96 },     /* 5 panels: a 4-panel and a 1-panel call               */
    { 72, 202, 6 },     /* 5 interleaved panels, an odd number of pairs (the
                           last line half a line), single pairs at group ends */
    { 16, 2, 2 },       /* one pair in all                                      */
};

/* Out of one kernel: rows [0, M), columns [c0, c0 + N). */
static void run(qwr_matmul_qpair_fn fn, const qwi_qpanel *qp, const uint32_t *xp, int64_t M,
                int64_t c0, int64_t N, const float *bias, float *out, int64_t ldo, int acc) {
    fn(xp, M, qwi_pair_kp(qp->k), qp, c0, N, bias ? bias + c0 : NULL, out + c0, ldo, acc);
}

Test(quant_vbmi, e4m3_decode_matches_the_f16_decode_bit_for_bit) {
    if (!have_vbmi()) cr_skip_test("no AVX512_BF16 + AVX512_VBMI on this CPU");
    enum { MM = 7 };   /* rows of the largest call */
    const int64_t Ms[] = { 1, 2, MM };
    const qwr_matmul_qpair_fn gen = qwi_cpu_kernels_generic()->matmul_qpair;
    int compared = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const shape sh = shapes[s];
        const int64_t G = QWI_DIV_UP(sh.k, sh.gk), KP = qwi_pair_kp(sh.k), ldo = sh.n + 3;
        uint8_t *codes = malloc((size_t)(sh.n * sh.k));
        float *scales = malloc(sizeof(float) * (size_t)(sh.n * G));
        float *x = malloc(sizeof(float) * (size_t)(MM * sh.k)), *bias = malloc(sizeof(float) * (size_t)sh.n);
        uint32_t *xp = malloc(sizeof(uint32_t) * (size_t)(MM * KP));
        float *o_new = malloc(sizeof(float) * (size_t)(MM * ldo)), *o_old = malloc(sizeof(float) * (size_t)(MM * ldo));
        float *o_gen = malloc(sizeof(float) * (size_t)(MM * ldo));
        cr_assert(codes && scales && x && bias && xp && o_new && o_old && o_gen);
        /* every byte, in every lane position over the shapes */
        for (int64_t i = 0; i < sh.n * sh.k; i++) codes[i] = (uint8_t)(i * 7 + s);
        for (int64_t i = 0; i < sh.n * G; i++) scales[i] = (0.25f + 0.75f * fabsf(urand())) * 0.004f;
        for (int64_t i = 0; i < MM * sh.k; i++) x[i] = urand();
        for (int64_t i = 0; i < sh.n; i++) bias[i] = urand();
        qwi_pair_round_rows(x, 0, MM, sh.k, xp);
        const size_t bytes = qwi_qpanel_bytes_for(QWI_QFMT_E4M3, QWI_QPANEL_PAIR, sh.n, sh.k, sh.gk, (qwi_qpanel_form){ 0 });
        void *buf = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        cr_assert(buf);
        qwi_qpanel qp;
        cr_assert(qwi_qpanel_pack_codes(QWI_QFMT_E4M3, QWI_QPANEL_PAIR, sh.n, sh.k, sh.gk, codes,
                                        scales, NULL, (qwi_qpanel_form){ 0 }, buf, &qp), "%s", qwi_last_error());
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
            for (int variant = 0; variant < 3; variant++) {
                const int64_t M = Ms[mi];
                /* 0: whole; 1: bias + accumulate; 2: split at column 16 */
                const float *b = variant == 1 ? bias : NULL;
                const int acc = variant == 1;
                for (int64_t i = 0; i < MM * ldo; i++) o_new[i] = o_old[i] = o_gen[i] = (float)i;
                if (variant == 2 && sh.n > 16) {
                    run(qwi_avx512vbmi_matmul_qpair, &qp, xp, M, 0, 16, b, o_new, ldo, acc);
                    run(qwi_avx512vbmi_matmul_qpair, &qp, xp, M, 16, sh.n - 16, b, o_new, ldo, acc);
                } else {
                    run(qwi_avx512vbmi_matmul_qpair, &qp, xp, M, 0, sh.n, b, o_new, ldo, acc);
                }
                run(qwi_avx512bf16_matmul_qpair, &qp, xp, M, 0, sh.n, b, o_old, ldo, acc);
                cr_assert(memcmp(o_new, o_old, sizeof(float) * (size_t)(MM * ldo)) == 0,
                          "shape %zu M %lld variant %d: differs from the f16 decode", s, (long long)M,
                          variant);
                /* the generic table reads 0x7f/0xff as NaN: compare where no row has one */
                bool nan_free = true;
                for (int64_t i = 0; i < sh.n * sh.k; i++) nan_free &= (codes[i] & 0x7f) != 0x7f;
                if (nan_free) {
                    run(gen, &qp, xp, M, 0, sh.n, b, o_gen, ldo, acc);
                    cr_assert(memcmp(o_new, o_gen, sizeof(float) * (size_t)(MM * ldo)) == 0,
                              "shape %zu M %lld variant %d: differs from generic", s, (long long)M,
                              variant);
                }
                compared++;
            }
        free(buf);
        free(codes);
        free(scales);
        free(x);
        free(bias);
        free(xp);
        free(o_new);
        free(o_old);
        free(o_gen);
    }
    cr_assert_eq(compared, (int)(sizeof shapes / sizeof shapes[0]) * 9);
}

/* Without NaN patterns: the generic table agrees too (every other code). */
Test(quant_vbmi, e4m3_decode_matches_generic_on_finite_codes) {
    if (!have_vbmi()) cr_skip_test("no AVX512_BF16 + AVX512_VBMI on this CPU");
    const int64_t n = 32, k = 254, gk = 128, G = 2, KP = qwi_pair_kp(k);
    uint8_t codes[32 * 254];
    float scales[32 * 2], x[2 * 254], o_new[2 * 32], o_gen[2 * 32];
    uint32_t xp[2 * 127];
    for (int64_t i = 0; i < n * k; i++) {
        uint8_t c = (uint8_t)(i % 254);
        codes[i] = c >= 0x7f ? (uint8_t)(c + 1) : c;   /* skips 0x7f; 0xff never reached */
    }
    for (int64_t i = 0; i < n * G; i++) scales[i] = (0.5f + 0.5f * fabsf(urand())) * 0.004f;
    for (int64_t i = 0; i < 2 * k; i++) x[i] = urand();
    qwi_pair_round_rows(x, 0, 2, k, xp);
    const size_t bytes = qwi_qpanel_bytes_for(QWI_QFMT_E4M3, QWI_QPANEL_PAIR, n, k, gk, (qwi_qpanel_form){ 0 });
    void *buf = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    cr_assert(buf);
    qwi_qpanel qp;
    cr_assert(qwi_qpanel_pack_codes(QWI_QFMT_E4M3, QWI_QPANEL_PAIR, n, k, gk, codes, scales, NULL,
                                    (qwi_qpanel_form){ 0 }, buf, &qp));
    for (int64_t M = 1; M <= 2; M++) {
        qwi_avx512vbmi_matmul_qpair(xp, M, KP, &qp, 0, n, NULL, o_new, n, 0);
        qwi_cpu_kernels_generic()->matmul_qpair(xp, M, KP, &qp, 0, n, NULL, o_gen, n, 0);
        for (int64_t i = 0; i < M * n; i++)
            cr_assert(memcmp(&o_new[i], &o_gen[i], sizeof(float)) == 0, "M %lld out %lld: %a != %a",
                      (long long)M, (long long)i, o_new[i], o_gen[i]);
    }
    free(buf);
}

Test(quant_vbmi, avx512bf16_table_uses_it_where_the_cpu_has_vbmi) {
    if (!have_vbmi()) cr_skip_test("no AVX512_BF16 + AVX512_VBMI on this CPU");
    cr_assert(qwi_cpu_kernels_by_name("avx512bf16")->matmul_qpair == qwi_avx512vbmi_matmul_qpair);
}

#else

Test(quant_vbmi, needs_x86_64) { cr_skip_test("the AVX-512 kernels are x86-64 only"); }

#endif
