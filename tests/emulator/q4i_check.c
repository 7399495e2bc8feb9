/*
 * q4i_check.c - the avx2 table's int4/int8 matmul on AVX-VNNI
 * (lib/cpu/q4i_avxvnni.c: VEX vpdpwssd/vpdpbusd on ymm, Intel client cores
 * from Alder Lake on) run on an emulated CPU with AVX-VNNI, bare metal
 * (tests/emulator/README.md). The suite checks that kernel only through its
 * EVEX stand-in (q4i_avxvnni_evex.c), since no machine here has AVX-VNNI.
 *
 * Linked freestanding with lib/cpu/q4i.c (the portable kernel and the
 * activation quantizer), q4i_x86.c (the AVX2 kernel), q4i_avxvnni.c,
 * qpanel.c (packing) and gemv_prefetch.c; bare.c stands in for the C
 * library and Linux. It passes when, for every case, the AVX-VNNI kernel and
 * the AVX2 kernel give the portable kernel's bits (cpu/q4i.h's contract:
 * the same integer sums, so the same bits). The cases cover M 1-33, int4 and
 * int8 weights, varied and uniform zero points, f16 and f32 scales, groups
 * of 32-128, and Q of both fast modes (int4's default and
 * QW_NUMERICS_FAST_INT8's 127, which gives the byte form the kernels read).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bare.h"
#include "cpu/cpu_features.h"
#include "cpu/kernels.h"
#include "cpu/q4i.h"
#include "cpu/qpanel.h"
#include "quant.h"

/* qpanel.c's loaders of checkpoint weights, which this check never calls */
static void not_here(const char *what) {
    put_s("q4i_check: unexpected call of ");
    put_s(what);
    put_s("\nQ4I_CHECK FAIL\nQ4I_CHECK DONE\n");
    for (;;) __asm__ volatile("hlt");
}
int64_t qwi_qweight_groups(const qwi_qweight *w) {
    (void)w;
    not_here("qwi_qweight_groups");
    return 0;
}
void qwi_qweight_unpack_rows(const qwi_qweight *w, int64_t r0, int64_t r1, uint8_t *codes,
                             float *scales, float *zeros) {
    (void)w, (void)r0, (void)r1, (void)codes, (void)scales, (void)zeros;
    not_here("qwi_qweight_unpack_rows");
}
bool qwi_qweight_uniform_zero(const qwi_qweight *w, int32_t *zero) {
    (void)w, (void)zero;
    not_here("qwi_qweight_uniform_zero");
    return false;
}

static uint64_t rng = 777;
static uint32_t rnd(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 33);
}
static float frnd(void) { return (float)((double)rnd() / 1073741824.0 - 1.0); }

static const int shapes[][4] = {   /* M, N, K, group_k */
    { 1, 48, 256, 128 }, { 1, 80, 384, 128 }, { 2, 32, 256, 128 }, { 3, 48, 512, 128 },
    { 5, 16, 256, 64 },  { 8, 64, 384, 128 }, { 17, 48, 256, 128 }, { 33, 32, 128, 32 },
};

/* One case: returns whether both kernels gave the portable kernel's bits. */
static bool one_case(int64_t M, int64_t N, int64_t K, int64_t gk, qwi_qfmt fmt, bool uniform,
                     bool int8, bool f16) {
    bare_heap_reset();
    const int64_t G = K / gk, KP = K / 2;
    uint8_t *codes = malloc((size_t)(N * K));
    float *scales = malloc((size_t)(N * G) * 4), *zeros = malloc((size_t)(N * G) * 4);
    for (int64_t i = 0; i < N * K; i++) codes[i] = (uint8_t)(rnd() & (fmt == QWI_QFMT_U4 ? 15 : 255));
    const int zall = fmt == QWI_QFMT_U8 ? 128 : 8;
    for (int64_t i = 0; i < N * G; i++) {
        scales[i] = f16 ? (float)(256 + rnd() % 768) * 0x1p-15f   /* f16 values */
                        : (0.25f + 0.75f * (float)(rnd() % 1000) / 1000.0f) * 0.02f;
        zeros[i] = uniform ? (float)zall : (float)(rnd() % (fmt == QWI_QFMT_U4 ? 17 : 257));
    }
    const qwi_qpanel_form form = { .scales_f16 = f16, .zero_uniform = uniform,
                                   .zero_all = uniform ? zall : 0 };
    const size_t bytes = qwi_qpanel_bytes_for(fmt, QWI_QPANEL_PAIR, N, K, gk, form);
    void *packed = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    qwi_qpanel qp;
    if (!packed || !qwi_qpanel_pack_codes(fmt, QWI_QPANEL_PAIR, N, K, gk, codes, scales, zeros,
                                          form, packed, &qp))
        return false;
    float *x = malloc((size_t)(M * K) * 4), *bias = malloc((size_t)N * 4);
    for (int64_t i = 0; i < M * K; i++) x[i] = frnd();
    for (int64_t i = 0; i < N; i++) bias[i] = frnd();
    const int32_t qmax = int8 ? QWI_Q4I_QMAX_INT8 : qwi_q4i_qmax(gk, fmt);
    uint32_t *q = malloc((size_t)(M * KP) * 4);
    float *d = malloc((size_t)(M * G) * 4);
    int32_t *sum = malloc((size_t)(M * G) * 4);
    qwi_q4i_quantize_rows(x, 0, M, K, gk, qmax, q, d, sum);
    uint32_t *q8 = NULL, *q8s = NULL;   /* the forms the engine's driver would fill */
    if (qmax <= 127) {
        q8 = malloc((size_t)(M * QWI_Q4I_Q8_WORDS(KP)) * 4);
        qwi_q4i_bytes_rows(q, 0, M, KP, q8);
    } else if (M <= 2) {
        q8s = malloc((size_t)(M * 2 * QWI_Q4I_Q8_WORDS(KP)) * 4);
        qwi_q4i_split_bytes_rows(q, 0, M, KP, q8s);
    }
    const qwi_q4act act = { .q = q, .d = d, .sum = sum, .KP = KP, .G = G, .group_k = gk,
                            .qmax = qmax, .q8 = q8, .q8s = q8s };
    float *want = malloc((size_t)(M * N) * 4), *vnni = malloc((size_t)(M * N) * 4);
    float *avx2 = malloc((size_t)(M * N) * 4);
    for (int64_t i = 0; i < M * N; i++) want[i] = vnni[i] = avx2[i] = (float)i * 0.01f;
    qwr_matmul_q4i(&act, M, &qp, 0, N, bias, want, N, 1);
    qwi_avxvnni_matmul_q4i(&act, M, &qp, 0, N, bias, vnni, N, 1);
    qwi_avx2_matmul_q4i(&act, M, &qp, 0, N, bias, avx2, N, 1);
    const bool ok_vnni = memcmp(want, vnni, (size_t)(M * N) * 4) == 0;
    const bool ok_avx2 = memcmp(want, avx2, (size_t)(M * N) * 4) == 0;
    if (!ok_vnni || !ok_avx2) {
        put_s("MISMATCH M=");
        put_u((uint64_t)M);
        put_s(" N=");
        put_u((uint64_t)N);
        put_s(" K=");
        put_u((uint64_t)K);
        put_s(" group=");
        put_u((uint64_t)gk);
        put_s(fmt == QWI_QFMT_U4 ? " int4" : " int8");
        put_s(uniform ? " uniform-zero" : " zeros");
        put_s(int8 ? " Q=127" : "");
        put_s(f16 ? " f16-scales" : " f32-scales");
        put_s(ok_vnni ? "" : " avx-vnni!=portable");
        put_s(ok_avx2 ? "\n" : " avx2!=portable\n");
    }
    return ok_vnni && ok_avx2;
}

void cmain(void) {
    __builtin_cpu_init();   /* no C runtime ran libgcc's constructor */
    put_s("q4i_check: start\n");
    if (!qwi_cpu_has_avxvnni() || !__builtin_cpu_supports("avx2")) {
        put_s("q4i_check: this CPU has no AVX-VNNI (or no AVX2)\nQ4I_CHECK FAIL\nQ4I_CHECK DONE\n");
        return;
    }
    int cases = 0, fails = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int v = 0; v < 16; v++) {
            const qwi_qfmt fmt = v & 1 ? QWI_QFMT_U8 : QWI_QFMT_U4;
            const bool uniform = v & 2, int8 = v & 4, f16 = v & 8;
            if (int8 && fmt != QWI_QFMT_U4) continue;   /* Q = 127 is int4's fast-int8 mode */
            cases++;
            fails += !one_case(shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], fmt,
                               uniform, int8, f16);
        }
    put_s("cases ");
    put_u((uint64_t)cases);
    put_s(", both kernels == portable in ");
    put_u((uint64_t)(cases - fails));
    put_s(fails ? "\nQ4I_CHECK FAIL\n" : "\nQ4I_CHECK PASS\n");
    put_s("Q4I_CHECK DONE\n");
}
