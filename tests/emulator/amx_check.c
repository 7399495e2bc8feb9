/*
 * amx_check.c - the "amx" table's matmul_pair (lib/cpu/pair_amx.c over
 * cpu/pair_tiles.h) run on an emulated CPU with AMX, bare metal: no
 * operating system, so no AMX permission to ask for and none of the
 * system an emulator must otherwise boot (tests/emulator/README.md says
 * why and how). Linked freestanding with lib/cpu/pair_amx.c,
 * kernels_bf16dot.c (qwr_matmul_pair, the chain of kernels.h) and
 * pairpanel.c; bare.c stands in for the C library and Linux.
 *
 * Output goes to COM1 and to the emulator's port 0xE9. It passes when, for
 * every shape: a row alone gives the bits of the same row in the batch; any
 * column split gives the bits of the whole call; the result is within
 * rounding of the chain (two summation orders of K exact products differ
 * by at most 2 K 2^-24 of the sum of |x w|, here <= K); bias, residual add
 * and a row stride leave the padding columns alone and match the chain
 * within rounding; and the peak loop computes what it should. It also
 * counts the shapes whose bits equal a model of Bochs' tdpbf16ps (even and
 * odd products summed apart over the op's 16 pairs, then added) - all of
 * them when the emulator is Bochs.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "bare.h"
#include "cpu/kernels.h"
#include "cpu/pairpanel.h"

/* ---- the checks ------------------------------------------------------------ */

static uint64_t rng = 12345;
static float frnd(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(uint32_t)(rng >> 32) / 2147483648.0 - 1.0);
}

#define MAXM 50
#define MAXN 208
#define MAXK 1024
static float xf[MAXM * MAXK], wf[MAXN * MAXK], bias[MAXN];
static uint32_t xp[MAXM * (MAXK / 2 + 1)], wp[MAXN * (MAXK / 2 + 1)];
static float out_hw[MAXM * 80], out_alt[MAXM * MAXN], out_ref[MAXM * 80], out_emu[MAXM * MAXN];

static float lo(uint32_t p) {
    uint32_t u = p << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static float hi(uint32_t p) {
    uint32_t u = p & 0xffff0000u;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Bochs' tdpbf16ps (bochs/cpu/avx/amx.cc): per op, the even and the odd
 * products summed apart over its 16 pairs (each product exact, so its
 * fused adds are these adds), then even + odd added to C; one op per
 * 16-pair chunk in order, as pair_tiles.h issues them. */
static void emulator_model(int64_t M, int64_t KP, int64_t N) {
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            const uint32_t *panel = wp + (n / 16) * KP * 16;
            float c = 0;
            for (int64_t j0 = 0; j0 < KP; j0 += 16) {
                float even = 0, odd = 0;
                for (int64_t j = j0; j < j0 + 16 && j < KP; j++) {
                    const uint32_t a = xp[m * KP + j], b = panel[j * 16 + n % 16];
                    even = even + lo(a) * lo(b);
                    odd = odd + hi(a) * hi(b);
                }
                c = c + (even + odd);
            }
            out_emu[m * N + n] = c;
        }
}

static double max_abs_diff(const float *a, const float *b, int64_t n) {
    double md = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = a[i] > b[i] ? (double)a[i] - b[i] : (double)b[i] - a[i];
        if (d > md) md = d;
    }
    return md;
}

static void problem(int64_t M, int64_t N, int64_t K) {
    for (int64_t i = 0; i < M * K; i++) xf[i] = frnd();
    for (int64_t i = 0; i < N * K; i++) wf[i] = frnd();
    for (int64_t i = 0; i < N; i++) bias[i] = frnd();
    qwi_pair_round_rows(xf, 0, M, K, xp);
    qwi_pairpanel_pack(QWI_DTYPE_F32, wf, N, K, wp);
}

static const int shapes[][3] = {
    { 1, 16, 2 },    { 1, 80, 64 },    { 1, 130, 301 }, { 2, 64, 31 },  { 7, 50, 96 },
    { 15, 33, 1024 }, { 16, 64, 64 },  { 17, 80, 33 },  { 31, 16, 96 }, { 32, 48, 64 },
    { 33, 100, 95 }, { 48, 64, 128 },  { 50, 37, 301 }, { 5, 200, 545 },
};

void cmain(void) {
    put_s("amx_check: start\n");
    if (!qwi_pair_amx_usable()) {
        put_s("amx_check: this CPU has no AMX-BF16 (or XCR0 lacks the tile state)\nAMX_CHECK FAIL\nAMX_CHECK DONE\n");
        return;
    }
    int fails = 0, emu_exact = 0;
    const int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
    for (int s = 0; s < nshapes; s++) {
        const int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], KP = (K + 1) / 2;
        problem(M, N, K);
        qwi_pair_amx_matmul(xp, M, KP, wp, N, NULL, out_alt, N, 0);
        /* each row alone */
        int alone = 1;
        for (int64_t m = 0; m < M; m++) {
            float row[MAXN];
            qwi_pair_amx_matmul(xp + m * KP, 1, KP, wp, N, NULL, row, N, 0);
            alone &= memcmp(row, out_alt + m * N, (size_t)N * 4) == 0;
        }
        /* columns in calls of 1, 2 and 3 panels */
        int split = 1;
        for (int64_t step = 1; step <= 3; step++) {
            static float part[MAXM * MAXN];
            for (int64_t n0 = 0; n0 < N; n0 += 16 * step) {
                const int64_t nn = N - n0 < 16 * step ? N - n0 : 16 * step;
                qwi_pair_amx_matmul(xp, M, KP, wp + n0 * KP, nn, NULL, part + n0, N, 0);
            }
            split &= memcmp(part, out_alt, (size_t)(M * N) * 4) == 0;
        }
        static float chain[MAXM * MAXN];
        qwr_matmul_pair(xp, M, KP, wp, N, NULL, chain, N, 0);
        const double md = max_abs_diff(out_alt, chain, M * N);
        const int close = md <= 2.0 * (double)K * (double)K / 16777216.0;
        emulator_model(M, KP, N);
        const int exact = memcmp(out_alt, out_emu, (size_t)(M * N) * 4) == 0;
        emu_exact += exact;
        fails += !alone || !split || !close;
        put_s("M=");
        put_u((uint64_t)M);
        put_s(" N=");
        put_u((uint64_t)N);
        put_s(" K=");
        put_u((uint64_t)K);
        put_s(alone ? " alone==batched" : " ALONE-DIFFERS");
        put_s(split ? " split==whole" : " SPLIT-DIFFERS");
        put_s(" |amx-chain|max=");
        put_u((uint64_t)(md * 1e9));
        put_s("e-9");
        put_s(close ? "" : " TOO-FAR");
        put_s(exact ? " (=emulator model)\n" : " (!=emulator model)\n");
    }
    {   /* bias, residual add, row stride 80 over N = 72: columns 72..79 untouched */
        const int64_t M = 19, N = 72, K = 200, KP = 100, ldo = 80;
        problem(M, N, K);
        for (int64_t i = 0; i < M * ldo; i++) out_hw[i] = out_ref[i] = (float)i;
        qwi_pair_amx_matmul(xp, M, KP, wp, N, bias, out_hw, ldo, 1);
        qwr_matmul_pair(xp, M, KP, wp, N, bias, out_ref, ldo, 1);
        int pad = 1;
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = N; n < ldo; n++) pad &= out_hw[m * ldo + n] == (float)(m * ldo + n);
        /* outputs up to ~1520 + K: their own rounding (2^-13) on top of the dot's */
        const double md = max_abs_diff(out_hw, out_ref, M * ldo);
        const int close = md <= 2.0 * K * K / 16777216.0 + 2.0 / 8192.0;
        put_s("bias+accumulate+ldo: |amx-chain|max=");
        put_u((uint64_t)(md * 1e9));
        put_s(close ? "e-9" : "e-9 TOO-FAR");
        put_s(pad ? ", padding untouched\n" : ", PADDING WRITTEN\n");
        fails += !pad || !close;
    }
    {   /* 1000 rounds of 4 ops, 32 products of 2^-7 x 2^-7 each: 1000 / 512 */
        const float v = qwi_pair_amx_peak_loop(1000);
        put_s(v == 1000.0f / 512.0f ? "peak loop: 1000/512 as it should\n" : "peak loop: WRONG VALUE\n");
        fails += v != 1000.0f / 512.0f;
    }
    put_s("shapes ");
    put_u((uint64_t)nshapes);
    put_s(", equal to the emulator model ");
    put_u((uint64_t)emu_exact);
    put_s(fails ? "\nAMX_CHECK FAIL\n" : "\nAMX_CHECK PASS\n");
    put_s("AMX_CHECK DONE\n");
}
