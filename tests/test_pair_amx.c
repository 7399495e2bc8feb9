/*
 * test_pair_amx.c - the "amx" kernel table's matmul_pair (cpu/pair_tiles.h).
 *
 * Everywhere: the tiling run over the C model of the tile registers
 * (pair_amx_model.c), whose tile op takes the chain of kernels.h, must give
 * qwr_matmul_pair's bits exactly - for M around the 16-row tiles and the
 * 32-row blocks, N with partial and odd panel groups, K with and without
 * a short last chunk, bias, residual add and a row stride, and for any
 * split of the columns.
 * Where the CPU has AMX (and Linux lets the process use it): the hardware
 * kernel keeps the determinism contract bit for bit (a row alone == the
 * same row in any batch; any column split; the parallel driver at 1 and 2
 * threads) and stays within rounding of the chain; and the table exists
 * exactly there, the avx512bf16 table with this matmul_pair.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kernels.h"
#include "cpu/ops.h"
#include "cpu/pairpanel.h"
#include "cpu/threadpool.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static float frnd(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(uint32_t)(rng_state >> 32) / 2147483648.0 - 1.0);
}

/* One matmul problem: rounded activation pairs, packed weights, bias and
 * the output's initial contents (for the residual add). */
typedef struct {
    int64_t M, N, K, kp, ldo;
    uint32_t *x;
    void *w;
    float *bias, *init;
    double *mag;   /* per output: sum over k of |x w| (the rounding scale) */
} problem;

static problem make_problem(int64_t M, int64_t N, int64_t K, int64_t ldo) {
    problem p = { .M = M, .N = N, .K = K, .kp = qwi_pair_kp(K), .ldo = ldo };
    float *xf = malloc((size_t)(M * K) * 4), *wf = malloc((size_t)(N * K) * 4);
    for (int64_t i = 0; i < M * K; i++) xf[i] = frnd();
    for (int64_t i = 0; i < N * K; i++) wf[i] = frnd();
    p.x = malloc((size_t)(M * p.kp) * 4);
    qwi_pair_round_rows(xf, 0, M, K, p.x);
    p.w = malloc(qwi_pairpanel_bytes(N, K));
    cr_assert(qwi_pairpanel_pack(QWI_DTYPE_F32, wf, N, K, p.w));
    p.bias = malloc((size_t)N * 4);
    for (int64_t n = 0; n < N; n++) p.bias[n] = frnd();
    p.init = malloc((size_t)(M * ldo) * 4);
    for (int64_t i = 0; i < M * ldo; i++) p.init[i] = frnd();
    p.mag = malloc((size_t)(M * N) * sizeof(double));
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++) {
                const uint32_t pair = p.x[m * p.kp + k / 2];
                const uint32_t u = k & 1 ? pair & 0xffff0000u : pair << 16;
                float xr;
                memcpy(&xr, &u, 4);
                s += fabs((double)xr * qwi_pairpanel_get(p.w, K, n, k));
            }
            p.mag[m * N + n] = s;
        }
    free(xf);
    free(wf);
    return p;
}

static void free_problem(problem *p) {
    free(p->x);
    free(p->w);
    free(p->bias);
    free(p->init);
    free(p->mag);
}

/* out = init, then fn over rows [m0, m0 + M) and all columns. */
static float *run(qwr_matmul_pair_fn fn, const problem *p, int64_t m0, int64_t M, int use_bias,
                  int accumulate) {
    float *out = malloc((size_t)(p->M * p->ldo) * 4);
    memcpy(out, p->init, (size_t)(p->M * p->ldo) * 4);
    fn(p->x + m0 * p->kp, M, p->kp, p->w, p->N, use_bias ? p->bias : NULL, out + m0 * p->ldo,
       p->ldo, accumulate);
    return out;
}

/* fn over all rows, the columns split at panel boundaries into calls of
 * `step` panels (the driver's column blocks). */
static float *run_split(qwr_matmul_pair_fn fn, const problem *p, int64_t step, int use_bias,
                        int accumulate) {
    float *out = malloc((size_t)(p->M * p->ldo) * 4);
    memcpy(out, p->init, (size_t)(p->M * p->ldo) * 4);
    for (int64_t n0 = 0; n0 < p->N; n0 += 16 * step) {
        const int64_t nn = p->N - n0 < 16 * step ? p->N - n0 : 16 * step;
        fn(p->x, p->M, p->kp, (const uint32_t *)p->w + n0 * p->kp, nn,
           use_bias ? p->bias + n0 : NULL, out + n0, p->ldo, accumulate);
    }
    return out;
}

static void assert_same_bits(const float *a, const float *b, const problem *p, const char *what) {
    for (int64_t m = 0; m < p->M; m++)
        for (int64_t n = 0; n < p->ldo; n++)
            cr_assert(memcmp(&a[m * p->ldo + n], &b[m * p->ldo + n], 4) == 0,
                      "%s: M=%lld N=%lld K=%lld: out[%lld][%lld] %a != %a", what,
                      (long long)p->M, (long long)p->N, (long long)p->K, (long long)m,
                      (long long)n, a[m * p->ldo + n], b[m * p->ldo + n]);
}

static const int64_t shapes[][3] = {
    /* M around one tile, one block pair and a lone last block; N with a
     * partial panel and panel counts that leave groups of 1-3; K below
     * one chunk, with a short last chunk, odd, and whole chunks */
    { 1, 16, 2 },    { 1, 80, 64 },    { 1, 130, 301 },  { 2, 64, 31 },   { 7, 50, 96 },
    { 15, 33, 1024 }, { 16, 64, 64 },  { 17, 80, 33 },   { 31, 16, 96 },  { 32, 48, 64 },
    { 33, 100, 95 }, { 48, 64, 128 },  { 50, 37, 301 },  { 64, 32, 32 },  { 5, 200, 545 },
};

Test(pair_amx, model_gives_the_chains_bits) {
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        problem p = make_problem(M, N, K, N + (int64_t)(s % 3) * 7);
        for (int v = 0; v < 4; v++) {
            float *want = run(qwr_matmul_pair, &p, 0, M, v & 1, v >> 1);
            float *got = run(qwi_pair_amx_model_matmul, &p, 0, M, v & 1, v >> 1);
            assert_same_bits(got, want, &p, "model vs qwr_matmul_pair");
            free(got);
            free(want);
        }
        free_problem(&p);
    }
}

Test(pair_amx, model_is_the_same_for_any_column_split_and_row_subset) {
    problem p = make_problem(37, 150, 200, 150);
    float *whole = run(qwi_pair_amx_model_matmul, &p, 0, 37, 1, 1);
    for (int64_t step = 1; step <= 5; step++) {
        float *split = run_split(qwi_pair_amx_model_matmul, &p, step, 1, 1);
        assert_same_bits(split, whole, &p, "column split");
        free(split);
    }
    /* rows 20..36 alone (M = 17: one full and one staged block) and each
     * row alone: the bits of the same rows in the 37-row call */
    float *sub = run(qwi_pair_amx_model_matmul, &p, 20, 17, 1, 1);
    for (int64_t i = 20 * p.ldo; i < 37 * p.ldo; i++)
        cr_assert(memcmp(&sub[i], &whole[i], 4) == 0, "rows 20..36 at %lld", (long long)i);
    free(sub);
    for (int64_t m = 0; m < 37; m += 9) {
        float *one = run(qwi_pair_amx_model_matmul, &p, m, 1, 1, 1);
        cr_assert(memcmp(one + m * p.ldo, whole + m * p.ldo, (size_t)p.N * 4) == 0, "row %lld",
                  (long long)m);
        free(one);
    }
    free(whole);
    free_problem(&p);
}

/* ---- the hardware kernel, where this CPU and process can run it ------------ */

static void need_amx(void) {
    if (!qwi_pair_amx_usable())
        cr_skip_test("no AMX-BF16 here (or Linux refused this process the tile state)");
}

Test(pair_amx, hardware_rows_alone_equal_rows_in_any_batch) {
    need_amx();
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        problem p = make_problem(M, N, K, N);
        float *whole = run(qwi_pair_amx_matmul, &p, 0, M, 1, 1);
        for (int64_t m = 0; m < M; m += 1 + M / 5) {
            float *one = run(qwi_pair_amx_matmul, &p, m, 1, 1, 1);
            cr_assert(memcmp(one + m * p.ldo, whole + m * p.ldo, (size_t)N * 4) == 0,
                      "M=%lld N=%lld K=%lld: row %lld alone differs", (long long)M, (long long)N,
                      (long long)K, (long long)m);
            free(one);
        }
        float *split = run_split(qwi_pair_amx_matmul, &p, 1 + (int64_t)s % 3, 1, 1);
        assert_same_bits(split, whole, &p, "hardware column split");
        free(split);
        free(whole);
        free_problem(&p);
    }
}

Test(pair_amx, hardware_within_rounding_of_the_chain) {
    need_amx();
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        problem p = make_problem(M, N, K, N);
        float *want = run(qwr_matmul_pair, &p, 0, M, 0, 0);
        float *got = run(qwi_pair_amx_matmul, &p, 0, M, 0, 0);
        /* two summation orders of K exact products each err by at most
         * (K-1) * 2^-24 of the sum of their magnitudes */
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                const double d = fabs((double)got[m * N + n] - want[m * N + n]);
                const double tol = 2.0 * (double)K * ldexp(p.mag[m * N + n], -24) + 1e-30;
                cr_assert(d <= tol, "M=%lld N=%lld K=%lld out[%lld][%lld]: %g vs %g (tol %g)",
                          (long long)M, (long long)N, (long long)K, (long long)m, (long long)n,
                          got[m * N + n], want[m * N + n], tol);
            }
        free(got);
        free(want);
        free_problem(&p);
    }
}

/* Through the parallel driver with the amx table: 1 and 2 threads, and a
 * row alone, all the same bits. */
Test(pair_amx, hardware_through_the_driver) {
    need_amx();
    const qwi_cpu_kernels *kt = qwi_cpu_kernels_by_name("amx");
    cr_assert_not_null(kt);
    const int64_t M = 21, N = 272, K = 384, kp = qwi_pair_kp(K);
    problem p = make_problem(M, N, K, N);
    float *xf = malloc((size_t)(M * K) * 4);
    for (int64_t m = 0; m < M; m++)   /* x back from its pairs: rounds to the same pairs */
        for (int64_t j = 0; j < kp; j++) {
            uint32_t lo = p.x[m * kp + j] << 16, hi = p.x[m * kp + j] & 0xffff0000u;
            memcpy(&xf[m * K + 2 * j], &lo, 4);
            if (2 * j + 1 < K) memcpy(&xf[m * K + 2 * j + 1], &hi, 4);
        }
    qwi_cpu_linear lin = { .dtype = QWI_DTYPE_F32, .w = p.w, .bias = p.bias, .n = N, .k = K,
                           .pair = true };
    float *outs[3];
    for (int v = 0; v < 3; v++) {
        const int threads = v == 1 ? 2 : 1;
        qwi_cpu_pool *pool;
        cr_assert_eq(qwi_cpu_pool_create(threads, &pool), QW_OK);
        uint32_t *xpair = malloc((size_t)(M * kp) * 4);
        qwi_cpu_ctx cx = { .pool = pool, .kt = kt, .nthreads = qwi_cpu_pool_size(pool),
                           .xpair = xpair };
        outs[v] = calloc((size_t)(M * N), 4);
        if (v < 2) {
            qwi_cpu_mm_job job = { &lin, outs[v], 0 };
            qwi_cpu_matmul(&cx, xf, M, K, &job, 1);
        } else {
            for (int64_t m = 0; m < M; m++) {
                qwi_cpu_mm_job job = { &lin, outs[v] + m * N, 0 };
                qwi_cpu_matmul(&cx, xf + m * K, 1, K, &job, 1);
            }
        }
        qwi_cpu_pool_destroy(pool);
        free(xpair);
    }
    cr_assert(memcmp(outs[0], outs[1], (size_t)(M * N) * 4) == 0, "1 vs 2 threads");
    cr_assert(memcmp(outs[0], outs[2], (size_t)(M * N) * 4) == 0, "batched vs one row at a time");
    for (int v = 0; v < 3; v++) free(outs[v]);
    free(xf);
    free_problem(&p);
}

/* The table exists exactly where the kernel may run, and is avx512bf16
 * with the tile matmul_pair. */
Test(pair_amx, table_exists_exactly_where_amx_is_usable) {
    const qwi_cpu_kernels *amx = qwi_cpu_kernels_by_name("amx");
    const qwi_cpu_kernels *b16 = qwi_cpu_kernels_by_name("avx512bf16");
    cr_assert_eq(amx != NULL, b16 != NULL && qwi_pair_amx_usable());
    if (!amx) return;
    cr_assert_str_eq(amx->name, "amx");
    cr_assert(amx->matmul_pair == qwi_pair_amx_matmul);
    cr_assert_null(amx->matmul_pair_wide);
    cr_assert(amx->matmul_q4i == b16->matmul_q4i && amx->matmul_qpair == b16->matmul_qpair);
    cr_assert(amx->dot == b16->dot && amx->matmul_f32_panel == b16->matmul_f32_panel);
}
