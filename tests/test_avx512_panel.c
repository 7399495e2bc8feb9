/*
 * test_avx512_panel.c - the AVX-512F panel kernels (lib/cpu/kernels_avx512_panel.c)
 * against the AVX2 panel kernels bit for bit, against the panel contract's
 * single FMA chain per output bit for bit, and against a float64 reference
 * within a rigorous rounding bound: every M from 1 to 70 (each tile height
 * and each way of cutting rows into tiles), N not a multiple of 16, odd K,
 * with and without bias and accumulate, f32 and bf16 weights, called
 * directly and through the threaded driver on 1 and 2 threads. Skipped where
 * the CPU lacks AVX-512F.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kernels.h"
#include "cpu/ops.h"
#include "cpu/panel.h"
#include "cpu/threadpool.h"
#include "dtype.h"
#include "util/testutil.h"

#define MAX_M 70

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) {            /* [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 4503599627370496.0 - 1.0;
}

static float *frand(int64_t n) {
    float *p = malloc((size_t)(n ? n : 1) * sizeof(float));
    cr_assert(p);
    for (int64_t i = 0; i < n; i++) p[i] = (float)urand();
    return p;
}

/* Both tables, or skip the test where this CPU has no AVX-512F (a CPU with
 * it always has the AVX2 table too). */
static void tables_or_skip(const qwi_cpu_kernels **k512, const qwi_cpu_kernels **k2) {
    *k512 = qwi_cpu_kernels_avx512();
    if (!*k512) cr_skip_test("no AVX-512F on this CPU: the avx512 table is not available");
    *k2 = qwi_cpu_kernels_avx2();
    cr_assert(*k2, "a CPU with AVX-512F must have the AVX2 table too");
}

/* A packed weight: the row-major exact f32 values (bf16-representable for
 * bf16) and the panel form, packed from a buffer that started dirty. */
typedef struct pw {
    float *exact;   /* [n][k] */
    void *panels;
} pw;

static pw make_packed(qwi_dtype dt, int64_t n, int64_t k) {
    pw w = { frand(n * k), NULL };
    void *rm = malloc((size_t)(n * k) * qwi_dtype_size(dt));
    cr_assert(rm);
    for (int64_t i = 0; i < n * k; i++) {
        if (dt == QWI_DTYPE_BF16) {
            uint16_t h = qwi_f32_to_bf16(w.exact[i]);
            ((uint16_t *)rm)[i] = h;
            w.exact[i] = qwi_bf16_to_f32(h);
        } else {
            ((float *)rm)[i] = w.exact[i];
        }
    }
    size_t bytes = qwi_panel_bytes(dt, n, k);
    cr_assert(bytes > 0);
    w.panels = malloc(bytes);
    cr_assert(w.panels);
    memset(w.panels, 0xA5, bytes);
    cr_assert(qwi_panel_pack(dt, rm, n, k, w.panels));
    free(rm);
    return w;
}

static void call(const qwi_cpu_kernels *kt, qwi_dtype dt, const float *x, int64_t M, int64_t K,
                 const void *p, int64_t N, const float *bias, float *out, int64_t ldo, int acc) {
    if (dt == QWI_DTYPE_F32)
        kt->matmul_f32_panel(x, M, K, p, N, bias, out, ldo, acc);
    else
        kt->matmul_bf16_panel(x, M, K, p, N, bias, out, ldo, acc);
}

/* The panel contract's bits of one output: fmaf chain over k in order from
 * 0, then + bias, then init + that. */
static float chain(const float *xr, const float *wr, int64_t K, const float *bias, const float *init) {
    float acc = 0.0f;
    for (int64_t k = 0; k < K; k++) acc = __builtin_fmaf(xr[k], wr[k], acc);
    if (bias) acc = acc + *bias;
    return init ? *init + acc : acc;
}

/*
 * One (dtype, N, K, bias, accumulate) case for every M in 1..MAX_M, called
 * directly with ldo = N + 3: the avx512 kernel's output (rows < M, columns
 * < N) must equal the AVX2 kernel's and the contract's chain bit for bit;
 * the guard columns past N and the rows past M must stay untouched; and the
 * values must be within the float64 bound.
 */
static void direct_case(qwi_dtype dt, int64_t N, int64_t K, int use_bias, int accumulate) {
    const qwi_cpu_kernels *k512, *k2;
    tables_or_skip(&k512, &k2);
    const int64_t ldo = N + 3;
    const float guard = 12345.5f;
    float *x = frand(MAX_M * K);
    pw w = make_packed(dt, N, K);
    float *bias = use_bias ? frand(N) : NULL;
    float *init = frand(MAX_M * ldo);
    for (int64_t m = 0; m < MAX_M; m++)
        for (int64_t j = N; j < ldo; j++) init[m * ldo + j] = guard;
    float *want = malloc((size_t)(MAX_M * N) * sizeof(float));
    cr_assert(want);
    const double tol = fmax(2e-6, (double)(K + 4) * 0x1p-24);
    for (int64_t m = 0; m < MAX_M; m++)
        for (int64_t n = 0; n < N; n++) {
            const float *b = bias ? bias + n : NULL, *in = accumulate ? init + m * ldo + n : NULL;
            double mag;
            double exact = qwt_matmul_ref(x + m * K, w.exact + n * K, K, b, in, &mag);
            float c = chain(x + m * K, w.exact + n * K, K, b, in);
            cr_assert(fabs(c - exact) <= tol * mag + 1e-30, "chain vs float64 at (%lld,%lld)",
                      (long long)m, (long long)n);
            want[m * N + n] = c;
        }

    float *o512 = malloc((size_t)(MAX_M * ldo) * sizeof(float));
    float *o2 = malloc((size_t)(MAX_M * ldo) * sizeof(float));
    cr_assert(o512 && o2);
    for (int64_t M = 1; M <= MAX_M; M++) {
        memcpy(o512, init, (size_t)(MAX_M * ldo) * sizeof(float));
        memcpy(o2, init, (size_t)(MAX_M * ldo) * sizeof(float));
        call(k512, dt, x, M, K, w.panels, N, bias, o512, ldo, accumulate);
        call(k2, dt, x, M, K, w.panels, N, bias, o2, ldo, accumulate);
        for (int64_t m = 0; m < MAX_M; m++)
            for (int64_t n = 0; n < ldo; n++) {
                const int64_t i = m * ldo + n;
                const float got = o512[i];
                if (m >= M || n >= N) {
                    cr_assert(memcmp(&got, &init[i], sizeof got) == 0,
                              "dtype %d M %lld N %lld K %lld bias %d acc %d: wrote (%lld,%lld) "
                              "outside the call", dt, (long long)M, (long long)N, (long long)K,
                              use_bias, accumulate, (long long)m, (long long)n);
                    continue;
                }
                cr_assert(memcmp(&got, &o2[i], sizeof got) == 0,
                          "dtype %d M %lld N %lld K %lld bias %d acc %d at (%lld,%lld): avx512 %a "
                          "vs avx2 %a", dt, (long long)M, (long long)N, (long long)K, use_bias,
                          accumulate, (long long)m, (long long)n, got, o2[i]);
                cr_assert(memcmp(&got, &want[m * N + n], sizeof got) == 0,
                          "dtype %d M %lld N %lld K %lld bias %d acc %d at (%lld,%lld): avx512 %a "
                          "vs the contract's chain %a", dt, (long long)M, (long long)N,
                          (long long)K, use_bias, accumulate, (long long)m, (long long)n, got,
                          want[m * N + n]);
            }
    }
    free(o512); free(o2); free(want); free(init); free(bias); free(x);
    free(w.exact); free(w.panels);
}

/* Every N shape the driver can hand a task (1..64, one to four panels, full
 * or ragged) and wider direct calls (M <= 6 uses 4-panel tiles, then 2 and
 * 1); K = 1 (no unrolled GEMV step), 4 (exactly one), odd K with tails. */
static void direct_all(qwi_dtype dt) {
    static const int64_t Ns[] = { 1, 9, 16, 17, 32, 47, 48, 63, 64, 65, 100 };
    static const int64_t Ks[] = { 1, 4, 19, 129 };
    for (size_t a = 0; a < sizeof Ns / sizeof Ns[0]; a++)
        for (size_t b = 0; b < sizeof Ks / sizeof Ks[0]; b++)
            for (int v = 0; v < 4; v++) direct_case(dt, Ns[a], Ks[b], v & 1, v >> 1);
}

Test(avx512_panel, f32_every_m_matches_avx2_and_chain) { direct_all(QWI_DTYPE_F32); }
Test(avx512_panel, bf16_every_m_matches_avx2_and_chain) { direct_all(QWI_DTYPE_BF16); }

/* A call that starts at the second panel (what a driver task starting at
 * column 16 does) gives the same bits as the same columns of a whole call. */
Test(avx512_panel, offset_panel_matches_whole_call) {
    const qwi_cpu_kernels *k512, *k2;
    tables_or_skip(&k512, &k2);
    for (int d = 0; d < 2; d++) {
        const qwi_dtype dt = d ? QWI_DTYPE_BF16 : QWI_DTYPE_F32;
        const int64_t N = 77, K = 33;
        pw w = make_packed(dt, N, K);
        float *x = frand(MAX_M * K);
        const int64_t Ms[] = { 1, 3, 6, 7, 13, 32, 70 };
        for (size_t a = 0; a < sizeof Ms / sizeof Ms[0]; a++) {
            const int64_t M = Ms[a];
            float *whole = calloc((size_t)(M * N), sizeof(float));
            float *part = calloc((size_t)(M * N), sizeof(float));
            cr_assert(whole && part);
            call(k512, dt, x, M, K, w.panels, N, NULL, whole, N, 0);
            call(k512, dt, x, M, K, (const char *)w.panels + (size_t)(16 * K) * qwi_dtype_size(dt),
                 N - 16, NULL, part + 16, N, 0);
            for (int64_t m = 0; m < M; m++)
                cr_assert(memcmp(whole + m * N + 16, part + m * N + 16,
                                 (size_t)(N - 16) * sizeof(float)) == 0,
                          "dtype %d M %lld: row %lld from panel 1 differs", dt, (long long)M,
                          (long long)m);
            free(whole); free(part);
        }
        free(x); free(w.exact); free(w.panels);
    }
}

/* Through the parallel driver (qwi_cpu_matmul, column tasks of up to 64)
 * on 1 and 2 threads with the avx512 table: the bits of one direct AVX2
 * call over all of N, for decode-batch and prefill-like M. */
Test(avx512_panel, threaded_driver_matches_avx2) {
    const qwi_cpu_kernels *k512, *k2;
    tables_or_skip(&k512, &k2);
    const int64_t N = 333, K = 257;
    const int64_t Ms[] = { 1, 2, 16, 33, 64, 70 };
    for (int d = 0; d < 2; d++) {
        const qwi_dtype dt = d ? QWI_DTYPE_BF16 : QWI_DTYPE_F32;
        pw w = make_packed(dt, N, K);
        float *bias = frand(N);
        float *x = frand(MAX_M * K);
        float *init = frand(MAX_M * N);
        for (size_t a = 0; a < sizeof Ms / sizeof Ms[0]; a++) {
            const int64_t M = Ms[a];
            float *ref = malloc((size_t)(M * N) * sizeof(float));
            float *out = malloc((size_t)(M * N) * sizeof(float));
            cr_assert(ref && out);
            memcpy(ref, init, (size_t)(M * N) * sizeof(float));
            call(k2, dt, x, M, K, w.panels, N, bias, ref, N, 1);
            for (int threads = 1; threads <= 2; threads++) {
                qwi_cpu_pool *pool;
                cr_assert_eq(qwi_cpu_pool_create(threads, &pool), QW_OK);
                float *buf[2] = { NULL, NULL };
                qwi_cpu_ctx cx = { .pool = pool, .kt = k512, .nthreads = qwi_cpu_pool_size(pool),
                                   .f16_buf = buf, .max_k = 0 };
                qwi_cpu_linear lin = { .dtype = dt, .w = w.panels, .bias = bias, .n = N, .k = K,
                                       .panel = true };
                memcpy(out, init, (size_t)(M * N) * sizeof(float));
                qwi_cpu_mm_job job = { &lin, out, 1 };
                qwi_cpu_matmul(&cx, x, M, K, &job, 1);
                qwi_cpu_pool_destroy(pool);
                for (int64_t i = 0; i < M * N; i++)
                    cr_assert(memcmp(&out[i], &ref[i], sizeof out[i]) == 0,
                              "dtype %d M %lld threads %d at (%lld,%lld): %a vs avx2 %a", dt,
                              (long long)M, threads, (long long)(i / N), (long long)(i % N),
                              out[i], ref[i]);
            }
            free(ref); free(out);
        }
        free(bias); free(x); free(init); free(w.exact); free(w.panels);
    }
}

/* The avx512 table runs these kernels, not the AVX2 ones it used to share. */
Test(avx512_panel, table_installs_zmm_kernels) {
    const qwi_cpu_kernels *k512, *k2;
    tables_or_skip(&k512, &k2);
    cr_assert(k512->matmul_f32_panel == qwi_avx512_matmul_f32_panel);
    cr_assert(k512->matmul_bf16_panel == qwi_avx512_matmul_bf16_panel);
    cr_assert(k512->matmul_f32_panel != k2->matmul_f32_panel);
}
