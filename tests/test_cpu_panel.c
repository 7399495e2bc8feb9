/*
 * test_cpu_panel.c - the panel weight layout (lib/cpu/panel.h) and every
 * kernel table's panel matmuls and batched attention helpers (dot4/axpy4):
 *   - packing round-trips element by element, pads with zeros, and refuses
 *     what has no panel form;
 *   - each table's panel matmul, through the parallel driver, matches a
 *     float64 reference on ragged shapes (M, N, K not multiples of any tile
 *     or vector width; bias; residual accumulate), and equals the panel
 *     contract bit for bit: one chain over k in order (fmaf for the ISA
 *     tables, a multiply then an add for the portable one);
 *   - a row's outputs do not depend on M, the thread count or job fusion;
 *   - dot4 / axpy4 equal four dot / axpy calls bit for bit.
 * Tables the CPU lacks (avx512 here) are skipped.
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

static uint64_t rng_state = 0x9b05688c2b3e6c1full;
static float urand(void) {            /* [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 4503599627370496.0 - 1.0);
}

static float *frand(int64_t n) {
    float *p = malloc((size_t)(n ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) p[i] = urand();
    return p;
}

/* A row-major [n][k] weight of dtype dt (f32 or bf16), its exact f32 values
 * and its panel form. */
typedef struct pw {
    void *rows;
    float *exact;
    void *panels;
} pw;

static pw make_pw(qwi_dtype dt, int64_t n, int64_t k) {
    pw w = { malloc((size_t)(n * k) * qwi_dtype_size(dt)), frand(n * k), NULL };
    for (int64_t i = 0; i < n * k; i++) {
        if (dt == QWI_DTYPE_F32) {
            ((float *)w.rows)[i] = w.exact[i];
        } else {
            uint16_t h = qwi_f32_to_bf16(w.exact[i]);
            ((uint16_t *)w.rows)[i] = h;
            w.exact[i] = qwi_bf16_to_f32(h);
        }
    }
    size_t bytes = qwi_panel_bytes(dt, n, k);
    cr_assert(bytes > 0);
    w.panels = malloc(bytes);
    memset(w.panels, 0xA5, bytes);   /* padding must be written, not inherited */
    cr_assert(qwi_panel_pack(dt, w.rows, n, k, w.panels));
    return w;
}

static void free_pw(pw *w) {
    free(w->rows);
    free(w->exact);
    free(w->panels);
}

static const qwi_cpu_kernels *table_or_skip(const char *name) {
    const qwi_cpu_kernels *t = qwi_cpu_kernels_by_name(name);
    if (!t) cr_skip_test("kernel table %s is not available on this CPU", name);
    return t;
}

typedef struct env {
    qwi_cpu_pool *pool;
    qwi_cpu_ctx cx;
} env;

static void env_init(env *e, const qwi_cpu_kernels *kt, int threads) {
    cr_assert_eq(qwi_cpu_pool_create(threads, &e->pool), QW_OK);
    static float *no_f16[8];
    e->cx = (qwi_cpu_ctx){ .pool = e->pool, .kt = kt, .nthreads = qwi_cpu_pool_size(e->pool),
                           .f16_buf = no_f16, .max_k = 0 };
}

static void env_fini(env *e) { qwi_cpu_pool_destroy(e->pool); }

/* ---- layout ---------------------------------------------------------------- */

Test(cpu_panel, pack_round_trip_and_padding) {
    static const int64_t ns[] = { 1, 15, 16, 17, 40, 67 }, ks[] = { 1, 7, 33 };
    static const qwi_dtype dts[] = { QWI_DTYPE_F32, QWI_DTYPE_BF16 };
    for (size_t d = 0; d < 2; d++)
        for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
            for (size_t b = 0; b < sizeof ks / sizeof ks[0]; b++) {
                int64_t n = ns[a], k = ks[b];
                pw w = make_pw(dts[d], n, k);
                int64_t padded = QWI_DIV_UP(n, QWI_PANEL) * QWI_PANEL;
                cr_assert_eq(qwi_panel_bytes(dts[d], n, k), (size_t)(padded * k) * qwi_dtype_size(dts[d]));
                for (int64_t r = 0; r < padded; r++)
                    for (int64_t c = 0; c < k; c++) {
                        float want = r < n ? w.exact[r * k + c] : 0.0f;
                        float got = qwi_panel_get(dts[d], w.panels, k, r, c);
                        cr_assert(memcmp(&got, &want, 4) == 0, "dtype %d n %lld k %lld (%lld,%lld): %g vs %g",
                                  dts[d], (long long)n, (long long)k, (long long)r, (long long)c, got, want);
                    }
                free_pw(&w);
            }
}

Test(cpu_panel, no_panel_form_is_refused) {
    uint16_t w[16] = { 0 }, dst[256];
    cr_assert_eq(qwi_panel_bytes(QWI_DTYPE_F16, 16, 16), 0);
    cr_assert_eq(qwi_panel_bytes(QWI_DTYPE_BF16, 0, 16), 0);
    cr_assert_eq(qwi_panel_bytes(QWI_DTYPE_BF16, 16, 0), 0);
    cr_assert_eq(qwi_panel_bytes(QWI_DTYPE_F32, -1, 4), 0);
    cr_assert_eq(qwi_panel_bytes(QWI_DTYPE_BF16, INT64_MAX / 2, INT64_MAX / 2), 0, "overflow");
    memset(dst, 0x5A, sizeof dst);
    cr_assert_not(qwi_panel_pack(QWI_DTYPE_F16, w, 1, 16, dst));
    for (size_t i = 0; i < sizeof dst / sizeof dst[0]; i++) cr_assert_eq(dst[i], 0x5A5A, "wrote on refusal");
}

/* ---- panel matmuls ----------------------------------------------------------- */

/* The contract, scalar: one chain over k in order, then bias, then the
 * residual add. fused: fmaf steps (ISA tables) or a multiply then an add. */
static float contract(const float *x, const float *wrow, int64_t K, bool fused, const float *bias,
                      int64_t n, int accumulate, float init) {
    float acc = 0.0f;
    for (int64_t k = 0; k < K; k++) {
        if (fused) {
            acc = fmaf(x[k], wrow[k], acc);
        } else {
            volatile float p = x[k] * wrow[k];   /* no contraction into an fma */
            acc = acc + p;
        }
    }
    float v = bias ? acc + bias[n] : acc;
    return accumulate ? init + v : v;
}

static void check_panel(const char *name, qwi_dtype dt, int threads) {
    const qwi_cpu_kernels *kt = table_or_skip(name);
    const bool fused = strcmp(name, "generic") != 0;
    env e;
    env_init(&e, kt, threads);
    static const int64_t Ms[] = { 1, 2, 3, 5, 6, 7, 8, 9, 13, 32 };
    static const int64_t Ns[] = { 1, 16, 17, 47, 64, 65, 130 };
    static const int64_t Ks[] = { 1, 5, 8, 31, 100 };
    int cases = 0;
    for (size_t a = 0; a < sizeof Ms / sizeof Ms[0]; a++)
        for (size_t b = 0; b < sizeof Ns / sizeof Ns[0]; b++)
            for (size_t c = 0; c < sizeof Ks / sizeof Ks[0]; c++, cases++) {
                int64_t M = Ms[a], N = Ns[b], K = Ks[c];
                int use_bias = cases % 2, accumulate = (cases / 2) % 2;
                float *x = frand(M * K), *init = frand(M * N), *bias = use_bias ? frand(N) : NULL;
                pw w = make_pw(dt, N, K);
                float *out = malloc((size_t)(M * N) * sizeof(float));
                memcpy(out, init, (size_t)(M * N) * sizeof(float));
                qwi_cpu_linear lin = { .dtype = dt, .w = w.panels, .bias = bias, .n = N, .k = K,
                                       .panel = true };
                qwi_cpu_mm_job job = { &lin, out, accumulate };
                qwi_cpu_matmul(&e.cx, x, M, K, &job, 1);
                for (int64_t m = 0; m < M; m++)
                    for (int64_t n = 0; n < N; n++) {
                        double exact = 0, mag = 0;
                        for (int64_t k = 0; k < K; k++) {
                            exact += (double)x[m * K + k] * w.exact[n * K + k];
                            mag += fabs((double)x[m * K + k] * w.exact[n * K + k]);
                        }
                        if (bias) exact += bias[n], mag += fabs(bias[n]);
                        if (accumulate) exact += init[m * N + n], mag += fabs(init[m * N + n]);
                        float got = out[m * N + n];
                        cr_assert(fabs(got - exact) <= 2e-6 * mag + 1e-30,
                                  "%s dtype %d M %lld N %lld K %lld (%lld,%lld): %.9g vs %.9g", name, dt,
                                  (long long)M, (long long)N, (long long)K, (long long)m, (long long)n,
                                  got, exact);
                        float want = contract(x + m * K, w.exact + n * K, K, fused, bias, n, accumulate,
                                              init[m * N + n]);
                        cr_assert(memcmp(&got, &want, 4) == 0,
                                  "%s dtype %d M %lld N %lld K %lld (%lld,%lld): %.9g, contract says %.9g",
                                  name, dt, (long long)M, (long long)N, (long long)K, (long long)m,
                                  (long long)n, got, want);
                    }
                free(x); free(init); free(bias); free(out);
                free_pw(&w);
            }
    env_fini(&e);
}

Test(cpu_panel, generic_f32) { check_panel("generic", QWI_DTYPE_F32, 1); }
Test(cpu_panel, generic_bf16) { check_panel("generic", QWI_DTYPE_BF16, 2); }
Test(cpu_panel, avx2_f32) { check_panel("avx2", QWI_DTYPE_F32, 2); }
Test(cpu_panel, avx2_bf16) { check_panel("avx2", QWI_DTYPE_BF16, 1); }
Test(cpu_panel, avx2_bf16_threads) { check_panel("avx2", QWI_DTYPE_BF16, 2); }
Test(cpu_panel, avx512_f32) { check_panel("avx512", QWI_DTYPE_F32, 2); }
Test(cpu_panel, avx512_bf16) { check_panel("avx512", QWI_DTYPE_BF16, 2); }

/* Row r of a batch equals row r alone (M = 1, the GEMV path), for 1 and 2
 * threads, and q/k/v-style fused jobs equal separate calls. */
static void panel_deterministic(const char *name) {
    const qwi_cpu_kernels *kt = table_or_skip(name);
    const int64_t K = 72, N1 = 100, N2 = 36;
    pw w1 = make_pw(QWI_DTYPE_BF16, N1, K), w2 = make_pw(QWI_DTYPE_BF16, N2, K);
    float *b1 = frand(N1);
    qwi_cpu_linear l1 = { .dtype = QWI_DTYPE_BF16, .w = w1.panels, .bias = b1, .n = N1, .k = K, .panel = true };
    qwi_cpu_linear l2 = { .dtype = QWI_DTYPE_BF16, .w = w2.panels, .bias = NULL, .n = N2, .k = K, .panel = true };
    static const int64_t Ms[] = { 7, 32 };
    for (size_t a = 0; a < 2; a++) {
        int64_t M = Ms[a];
        float *x = frand(M * K);
        float *alone1 = malloc((size_t)(M * N1) * 4), *alone2 = malloc((size_t)(M * N2) * 4);
        env e1;
        env_init(&e1, kt, 1);
        for (int64_t m = 0; m < M; m++) {
            qwi_cpu_mm_job j1 = { &l1, alone1 + m * N1, 0 }, j2 = { &l2, alone2 + m * N2, 0 };
            qwi_cpu_matmul(&e1.cx, x + m * K, 1, K, &j1, 1);
            qwi_cpu_matmul(&e1.cx, x + m * K, 1, K, &j2, 1);
        }
        env_fini(&e1);
        for (int threads = 1; threads <= 2; threads++) {
            env e;
            env_init(&e, kt, threads);
            float *o1 = malloc((size_t)(M * N1) * 4), *o2 = malloc((size_t)(M * N2) * 4);
            qwi_cpu_mm_job jobs[2] = { { &l1, o1, 0 }, { &l2, o2, 0 } };
            qwi_cpu_matmul(&e.cx, x, M, K, jobs, 2);
            cr_assert(memcmp(o1, alone1, (size_t)(M * N1) * 4) == 0, "%s M %lld threads %d: fused job 1",
                      name, (long long)M, threads);
            cr_assert(memcmp(o2, alone2, (size_t)(M * N2) * 4) == 0, "%s M %lld threads %d: fused job 2",
                      name, (long long)M, threads);
            free(o1); free(o2);
            env_fini(&e);
        }
        free(x); free(alone1); free(alone2);
    }
    free(b1);
    free_pw(&w1);
    free_pw(&w2);
}

Test(cpu_panel, generic_deterministic) { panel_deterministic("generic"); }
Test(cpu_panel, avx2_deterministic) { panel_deterministic("avx2"); }
Test(cpu_panel, avx512_deterministic) { panel_deterministic("avx512"); }

/* ---- attention's batched helpers ---------------------------------------------- */

static void dot4_axpy4(const char *name) {
    const qwi_cpu_kernels *kt = table_or_skip(name);
    static const int64_t lens[] = { 1, 7, 8, 64, 128, 131 };
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        int64_t n = lens[i];
        float *a = frand(n), *bs[4], s[4], got[4];
        for (int j = 0; j < 4; j++) bs[j] = frand(n), s[j] = urand();
        const float *const b[4] = { bs[0], bs[1], bs[2], bs[3] };
        kt->dot4(a, b, n, got);
        for (int j = 0; j < 4; j++) {
            float want = kt->dot(a, b[j], n);
            cr_assert(memcmp(&got[j], &want, 4) == 0, "%s dot4 n %lld [%d]: %.9g vs %.9g", name,
                      (long long)n, j, got[j], want);
        }
        float *o1 = frand(n), *o2 = malloc((size_t)n * 4);
        memcpy(o2, o1, (size_t)n * 4);
        kt->axpy4(o1, s, b, n);
        for (int j = 0; j < 4; j++) kt->axpy(o2, s[j], b[j], n);
        cr_assert(memcmp(o1, o2, (size_t)n * 4) == 0, "%s axpy4 n %lld differs from 4 axpys", name,
                  (long long)n);
        free(a); free(o1); free(o2);
        for (int j = 0; j < 4; j++) free(bs[j]);
    }
}

Test(cpu_panel, generic_dot4_axpy4) { dot4_axpy4("generic"); }
Test(cpu_panel, avx2_dot4_axpy4) { dot4_axpy4("avx2"); }
Test(cpu_panel, avx512_dot4_axpy4) { dot4_axpy4("avx512"); }
