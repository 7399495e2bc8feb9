/*
 * test_cpu_isa.c - every CPU kernel table this machine can run (generic
 * always; avx2 and avx512 where CPUID has them, skipped otherwise) against
 * a float64 reference and the portable table, on ragged shapes whose K and
 * N are not multiples of any vector width; and each table bit-identical to
 * itself across batch sizes (M) and thread counts, for every weight dtype.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/attention.h"
#include "cpu/kernels.h"
#include "cpu/ops.h"
#include "cpu/panel.h"
#include "cpu/threadpool.h"
#include "dtype.h"
#include "util/testutil.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static double urand(void) {            /* [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 4503599627370496.0 - 1.0;
}

static float *frand(int64_t n) {
    float *p = malloc((size_t)(n ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) p[i] = (float)urand();
    return p;
}

/* A weight of dtype dt and its exact f32 value. */
typedef struct tw {
    void *data;
    float *exact;
} tw;

static tw make_weight(qwi_dtype dt, int64_t n) {
    tw w = { malloc((size_t)(n ? n : 1) * qwi_dtype_size(dt)), frand(n) };
    for (int64_t i = 0; i < n; i++) {
        if (dt == QWI_DTYPE_F32) {
            ((float *)w.data)[i] = w.exact[i];
        } else if (dt == QWI_DTYPE_BF16) {
            uint16_t h = qwi_f32_to_bf16(w.exact[i]);
            ((uint16_t *)w.data)[i] = h;
            w.exact[i] = qwi_bf16_to_f32(h);
        } else {
            /* a normal f16 in [0.5, 2) of either sign: sign, exponent 14..15,
             * random mantissa (no f32 -> f16 helper exists in dtype.h) */
            uint16_t h = (uint16_t)(((rng_state & 1) << 15) | ((14u + ((rng_state >> 1) & 1)) << 10) |
                                    ((rng_state >> 2) & 1023u));
            urand();
            ((uint16_t *)w.data)[i] = h;
            w.exact[i] = qwi_f16_to_f32(h);
        }
    }
    return w;
}

static void free_weight(tw *w) {
    free(w->data);
    free(w->exact);
}

/* The table named name, or skip the test when this CPU lacks it. */
static const qwi_cpu_kernels *table_or_skip(const char *name) {
    const qwi_cpu_kernels *t = qwi_cpu_kernels_by_name(name);
    if (!t) cr_skip_test("kernel table %s is not available on this CPU", name);
    cr_assert_str_eq(t->name, name);
    return t;
}

typedef struct env {
    qwi_cpu_pool *pool;
    qwi_cpu_ctx cx;
    float *bufs[8];
} env;

static void env_init(env *e, const qwi_cpu_kernels *kt, int threads, int64_t max_k) {
    cr_assert_eq(qwi_cpu_pool_create(threads, &e->pool), QW_OK);
    e->cx.pool = e->pool;
    e->cx.kt = kt;
    e->cx.nthreads = qwi_cpu_pool_size(e->pool);
    for (int t = 0; t < threads; t++)
        e->bufs[t] = malloc((size_t)QWI_CPU_MM_MAX_COLS * (size_t)max_k * sizeof(float));
    e->cx.f16_buf = e->bufs;
    e->cx.max_k = max_k;
}

static void env_fini(env *e) {
    for (int t = 0; t < e->cx.nthreads; t++) free(e->bufs[t]);
    qwi_cpu_pool_destroy(e->pool);
}

/* One matmul through the parallel driver with table kt vs float64 (relative
 * to the sum of magnitudes) and vs the portable table (relative to the
 * value's magnitude, the brief's 1e-4 tolerance in its strict form). */
static void check_one(env *e, env *ref_env, qwi_dtype dt, int64_t M, int64_t N, int64_t K,
                      int use_bias, int accumulate) {
    float *x = frand(M * K);
    tw w = make_weight(dt, N * K);
    float *bias = use_bias ? frand(N) : NULL;
    float *init = frand(M * N);
    float *out = malloc((size_t)(M * N) * sizeof(float));
    float *ref = malloc((size_t)(M * N) * sizeof(float));
    memcpy(out, init, (size_t)(M * N) * sizeof(float));
    memcpy(ref, init, (size_t)(M * N) * sizeof(float));
    qwi_cpu_linear lin = { .dtype = dt, .w = w.data, .bias = bias, .n = N, .k = K, .panel = false };
    qwi_cpu_mm_job job = { &lin, out, accumulate }, rjob = { &lin, ref, accumulate };
    qwi_cpu_matmul(&e->cx, x, M, K, &job, 1);
    qwi_cpu_matmul(&ref_env->cx, x, M, K, &rjob, 1);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double mag;
            double exact = qwt_matmul_ref(x + m * K, w.exact + n * K, K, bias ? bias + n : NULL,
                                          accumulate ? init + m * N + n : NULL, &mag);
            double got = out[m * N + n];
            cr_assert(fabs(got - exact) <= 2e-6 * mag + 1e-30,
                      "%s dtype %d M %lld N %lld K %lld at (%lld,%lld): %.9g vs exact %.9g",
                      e->cx.kt->name, dt, (long long)M, (long long)N, (long long)K, (long long)m,
                      (long long)n, got, exact);
            cr_assert(fabs(got - ref[m * N + n]) <= 1e-4 * fabs(ref[m * N + n]) + 4e-6 * mag,
                      "%s vs generic: dtype %d (%lld,%lld) of M %lld N %lld K %lld: %.9g vs %.9g",
                      e->cx.kt->name, dt, (long long)m, (long long)n, (long long)M, (long long)N,
                      (long long)K, got, ref[m * N + n]);
        }
    free(x);
    free_weight(&w);
    free(bias);
    free(init);
    free(out);
    free(ref);
}

static void ragged_shapes(const char *name) {
    const qwi_cpu_kernels *kt = table_or_skip(name);
    /* K: below, at and around 8 and 16 lanes and a few hundred; M and N
     * cross every tile edge (4-row, 3/4-column tiles and their tails). */
    static const int64_t Ms[] = { 1, 2, 3, 4, 5, 7, 9, 13 };
    static const int64_t Ns[] = { 1, 2, 3, 5, 7, 13, 70 };
    static const int64_t Ks[] = { 1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 130, 259 };
    env ref;
    env_init(&ref, qwi_cpu_kernels_generic(), 1, 512);
    for (int threads = 1; threads <= 2; threads++) {
        env e;
        env_init(&e, kt, threads, 512);
        for (int dt = 0; dt < 3; dt++)
            for (size_t a = 0; a < sizeof Ms / sizeof Ms[0]; a++)
                for (size_t b = 0; b < sizeof Ns / sizeof Ns[0]; b++)
                    for (size_t c = 0; c < sizeof Ks / sizeof Ks[0]; c++)
                        check_one(&e, &ref, (qwi_dtype)dt, Ms[a], Ns[b], Ks[c],
                                  (int)((a + b) & 1), (int)((b + c) % 3 == 0));
        env_fini(&e);
    }
    env_fini(&ref);
}

Test(cpu_isa, generic_ragged_shapes) { ragged_shapes("generic"); }
Test(cpu_isa, avx2_ragged_shapes) { ragged_shapes("avx2"); }
Test(cpu_isa, avx512_ragged_shapes) { ragged_shapes("avx512"); }

/* Each row alone, then in batches of every size and at 1..4 threads: the
 * same bits, for each dtype (a tile edge must not change arithmetic). */
static void deterministic(const char *name) {
    const qwi_cpu_kernels *kt = table_or_skip(name);
    const int64_t R = 29, K = 211, N = 107;
    float *x = frand(R * K);
    for (int dt = 0; dt < 3; dt++) {
        tw w = make_weight((qwi_dtype)dt, N * K);
        float *bias = frand(N);
        qwi_cpu_linear lin = { .dtype = (qwi_dtype)dt, .w = w.data, .bias = bias, .n = N, .k = K,
                               .panel = false };
        float *ref = malloc(R * N * 4), *got = malloc(R * N * 4);
        env e1;
        env_init(&e1, kt, 1, K);
        for (int64_t r = 0; r < R; r++) {
            qwi_cpu_mm_job j = { &lin, ref + r * N, 0 };
            qwi_cpu_matmul(&e1.cx, x + r * K, 1, K, &j, 1);
        }
        env_fini(&e1);
        static const int64_t batches[] = { 2, 3, 4, 5, 8, 12, 29 };
        for (int threads = 1; threads <= 4; threads++) {
            env e;
            env_init(&e, kt, threads, K);
            for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
                memset(got, 0xff, R * N * 4);
                for (int64_t r0 = 0; r0 < R; r0 += batches[bi]) {
                    int64_t m = QWI_MIN(batches[bi], R - r0);
                    qwi_cpu_mm_job j = { &lin, got + r0 * N, 0 };
                    qwi_cpu_matmul(&e.cx, x + r0 * K, m, K, &j, 1);
                }
                cr_assert(memcmp(ref, got, R * N * 4) == 0, "%s dtype %d threads %d batch %lld differ",
                          name, dt, threads, (long long)batches[bi]);
            }
            env_fini(&e);
        }
        /* A column sub-range computed on its own is the same bits too (the
         * driver's column blocks must not matter). */
        float *part = malloc(R * N * 4);
        if (dt == QWI_DTYPE_F32)
            kt->matmul_f32(x, R, K, (const float *)w.data + 5 * K, 9, bias + 5, part + 5, N, 0);
        else if (dt == QWI_DTYPE_BF16)
            kt->matmul_bf16(x, R, K, (const uint16_t *)w.data + 5 * K, 9, bias + 5, part + 5, N, 0);
        if (dt != QWI_DTYPE_F16)
            for (int64_t r = 0; r < R; r++)
                cr_assert(memcmp(part + r * N + 5, ref + r * N + 5, 9 * 4) == 0,
                          "%s dtype %d: columns 5..13 alone differ in row %lld", name, dt, (long long)r);
        free(part);
        free(ref); free(got); free(bias);
        free_weight(&w);
    }
    free(x);
}

Test(cpu_isa, generic_deterministic) { deterministic("generic"); }
Test(cpu_isa, avx2_deterministic) { deterministic("avx2"); }
Test(cpu_isa, avx512_deterministic) { deterministic("avx512"); }

/* dot and axpy (attention's kernels) vs float64 and vs the portable ones. */
static void vector_ops(const char *name) {
    const qwi_cpu_kernels *kt = table_or_skip(name);
    const qwi_cpu_kernels *g = qwi_cpu_kernels_generic();
    for (int64_t n = 0; n <= 67; n++) {
        float *a = frand(n), *b = frand(n);
        double exact = 0, mag = 0;
        for (int64_t i = 0; i < n; i++) exact += (double)a[i] * b[i], mag += fabs((double)a[i] * b[i]);
        float d = kt->dot(a, b, n);
        cr_assert(fabs(d - exact) <= 2e-6 * mag + 1e-30, "%s dot n %lld: %.9g vs %.9g", name,
                  (long long)n, d, exact);
        cr_assert(fabs(d - g->dot(a, b, n)) <= 4e-6 * mag + 1e-30, "%s dot n %lld vs generic", name,
                  (long long)n);
        float *o1 = frand(n), *o2 = malloc((size_t)(n ? n : 1) * sizeof(float));
        memcpy(o2, o1, (size_t)n * sizeof(float));
        kt->axpy(o1, 0.37f, a, n);
        g->axpy(o2, 0.37f, a, n);
        for (int64_t i = 0; i < n; i++)
            cr_assert(fabs(o1[i] - o2[i]) <= 1e-6 * (fabs(o2[i]) + fabs(0.37f * a[i])) + 1e-30,
                      "%s axpy n %lld at %lld", name, (long long)n, (long long)i);
        free(a); free(b); free(o1); free(o2);
    }
    /* axpy position independence: the same element at offset 0 and deep in
     * a long vector gives the same bits. */
    float *v = frand(40), *o = frand(40), one = o[37];
    kt->axpy(&one, 1.7f, v + 37, 1);
    kt->axpy(o, 1.7f, v, 40);
    cr_assert(memcmp(&one, &o[37], sizeof one) == 0, "%s axpy depends on position", name);
    free(v); free(o);
}

Test(cpu_isa, generic_vector_ops) { vector_ops("generic"); }
Test(cpu_isa, avx2_vector_ops) { vector_ops("avx2"); }
Test(cpu_isa, avx512_vector_ops) { vector_ops("avx512"); }

/* The process-wide choice is one of the tables, and the same every call. */
Test(cpu_isa, select_is_stable) {
    const qwi_cpu_kernels *a = qwi_cpu_kernels_select(), *b = qwi_cpu_kernels_select();
    cr_assert(a == b);
    cr_assert(a == qwi_cpu_kernels_by_name(a->name));
    cr_assert_null(qwi_cpu_kernels_by_name("no-such-isa"));
}

/* ---- panel kernels (weights in the layout of cpu/panel.h) ------------------- */

/* The panel form of w (an [n][k] weight of dtype dt), from a dirty buffer. */
static void *pack_weight(qwi_dtype dt, const tw *w, int64_t n, int64_t k) {
    size_t bytes = qwi_panel_bytes(dt, n, k);
    cr_assert(bytes > 0);
    void *p = malloc(bytes);
    memset(p, 0xA5, bytes);
    cr_assert(qwi_panel_pack(dt, w->data, n, k, p));
    return p;
}

static void panel_call(const qwi_cpu_kernels *kt, qwi_dtype dt, const float *x, int64_t M,
                       int64_t K, const void *p, int64_t N, const float *bias, float *out,
                       int64_t ldo, int accumulate) {
    if (dt == QWI_DTYPE_F32)
        kt->matmul_f32_panel(x, M, K, p, N, bias, out, ldo, accumulate);
    else
        kt->matmul_bf16_panel(x, M, K, p, N, bias, out, ldo, accumulate);
}

/* The panel contract's value of one output: one chain over k in order from
 * 0 (fused: fmaf, as the ISA tables; else a multiply then an add, as the
 * portable one), then + bias, then init + v if init. */
static float panel_chain(int fused, const float *xr, const float *wr, int64_t K, const float *bias,
                         const float *init) {
    float acc = 0.0f;
    for (int64_t k = 0; k < K; k++) {
        if (fused) {
            acc = __builtin_fmaf(xr[k], wr[k], acc);
        } else {
            float prod = xr[k] * wr[k];
            acc = acc + prod;
        }
    }
    if (bias) acc = acc + *bias;
    return init ? *init + acc : acc;
}

/* One case of the panel tests: what every output of [M][N] must be. */
typedef struct panel_case {
    const char *table;
    qwi_dtype dt;
    int64_t M, N, K;
    int bias, accumulate;
    double *exact, *mag;          /* float64 value, sum of magnitudes */
    float *chain;                 /* the contract's bits              */
} panel_case;

/* out[m*ldo + n] for n < N against the float64 value (a rigorous relative
 * bound for a K-step chain) and, bit for bit, against the contract. */
static void panel_verify(const panel_case *c, const char *how, const float *out, int64_t ldo) {
    const double tol = fmax(2e-6, (double)(c->K + 4) * 0x1p-24);
    for (int64_t m = 0; m < c->M; m++)
        for (int64_t n = 0; n < c->N; n++) {
            const int64_t i = m * c->N + n;
            const float got = out[m * ldo + n];
            cr_assert(fabs(got - c->exact[i]) <= tol * c->mag[i] + 1e-30,
                      "%s %s dtype %d M %lld N %lld K %lld bias %d acc %d at (%lld,%lld): %.9g vs "
                      "exact %.9g", c->table, how, c->dt, (long long)c->M, (long long)c->N,
                      (long long)c->K, c->bias, c->accumulate, (long long)m, (long long)n, got,
                      c->exact[i]);
            cr_assert(memcmp(&got, &c->chain[i], sizeof got) == 0,
                      "%s %s dtype %d M %lld N %lld K %lld bias %d acc %d at (%lld,%lld): %a is "
                      "not the contract's chain %a", c->table, how, c->dt, (long long)c->M,
                      (long long)c->N, (long long)c->K, c->bias, c->accumulate, (long long)m,
                      (long long)n, got, c->chain[i]);
        }
}

/* The table's panel kernel called directly (whole N, with ldo > N and guard
 * columns; and from the second panel on), then through qwi_cpu_matmul with
 * a panel linear on 1 and 2 threads. */
static void panel_check_one(const qwi_cpu_kernels *kt, env envs[2], qwi_dtype dt, int64_t M,
                            int64_t N, int64_t K, int use_bias, int accumulate) {
    const int fused = strcmp(kt->name, "generic") != 0;
    float *x = frand(M * K);
    tw w = make_weight(dt, N * K);
    void *p = pack_weight(dt, &w, N, K);
    float *bias = use_bias ? frand(N) : NULL;
    float *init = frand(M * N);
    panel_case c = { kt->name, dt, M, N, K, use_bias, accumulate,
                     malloc((size_t)(M * N) * sizeof(double)),
                     malloc((size_t)(M * N) * sizeof(double)),
                     malloc((size_t)(M * N) * sizeof(float)) };
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            c.exact[m * N + n] = qwt_matmul_ref(x + m * K, w.exact + n * K, K,
                                                bias ? bias + n : NULL,
                                                accumulate ? init + m * N + n : NULL,
                                                &c.mag[m * N + n]);
            c.chain[m * N + n] = panel_chain(fused, x + m * K, w.exact + n * K, K,
                                             bias ? bias + n : NULL,
                                             accumulate ? init + m * N + n : NULL);
        }

    /* Direct: ldo = N + 3, the 3 columns past N must stay untouched. */
    const int64_t ldo = N + 3;
    const float guard = 12345.5f;
    float *out = malloc((size_t)(M * ldo) * sizeof(float));
    for (int64_t m = 0; m < M; m++) {
        memcpy(out + m * ldo, init + m * N, (size_t)N * sizeof(float));
        for (int64_t j = N; j < ldo; j++) out[m * ldo + j] = guard;
    }
    panel_call(kt, dt, x, M, K, p, N, bias, out, ldo, accumulate);
    panel_verify(&c, "direct", out, ldo);
    for (int64_t m = 0; m < M; m++)
        for (int64_t j = N; j < ldo; j++)
            cr_assert(out[m * ldo + j] == guard, "%s dtype %d M %lld N %lld K %lld: wrote column %lld",
                      kt->name, dt, (long long)M, (long long)N, (long long)K, (long long)j);

    /* Direct from panel 1 on (what a driver task starting at column 16 does). */
    if (N > 16) {
        float *sub = malloc((size_t)(M * N) * sizeof(float));
        memcpy(sub, init, (size_t)(M * N) * sizeof(float));
        const size_t off = (size_t)(16 * K) * qwi_dtype_size(dt);
        panel_call(kt, dt, x, M, K, (const char *)p + off, N - 16, bias ? bias + 16 : NULL,
                   sub + 16, N, accumulate);
        for (int64_t m = 0; m < M; m++)
            cr_assert(memcmp(sub + m * N + 16, out + m * ldo + 16, (size_t)(N - 16) * sizeof(float)) == 0,
                      "%s dtype %d M %lld N %lld K %lld: columns 16.. from panel 1 differ in row %lld",
                      kt->name, dt, (long long)M, (long long)N, (long long)K, (long long)m);
        free(sub);
    }

    /* Through the driver. */
    qwi_cpu_linear lin = { .dtype = dt, .w = p, .bias = bias, .n = N, .k = K, .panel = true };
    for (int t = 0; t < 2; t++) {
        memcpy(out, init, (size_t)(M * N) * sizeof(float));
        qwi_cpu_mm_job job = { &lin, out, accumulate };
        qwi_cpu_matmul(&envs[t].cx, x, M, K, &job, 1);
        panel_verify(&c, t ? "matmul/2 threads" : "matmul/1 thread", out, N);
    }
    free(out);
    free(c.exact); free(c.mag); free(c.chain);
    free(x); free(p); free(bias); free(init);
    free_weight(&w);
}

static void panel_ragged(const char *name, qwi_dtype dt) {
    const qwi_cpu_kernels *kt = table_or_skip(name);
    static const int64_t Ms[] = { 1, 2, 3, 5, 6, 7, 8, 9, 13, 32 };
    static const int64_t Ns[] = { 1, 16, 17, 47, 64, 65, 130 };
    static const int64_t Ks[] = { 1, 5, 8, 31, 100 };
    env envs[2];
    env_init(&envs[0], kt, 1, 128);
    env_init(&envs[1], kt, 2, 128);
    for (size_t a = 0; a < sizeof Ms / sizeof Ms[0]; a++)
        for (size_t b = 0; b < sizeof Ns / sizeof Ns[0]; b++)
            for (size_t c = 0; c < sizeof Ks / sizeof Ks[0]; c++)
                for (int v = 0; v < 4; v++)
                    panel_check_one(kt, envs, dt, Ms[a], Ns[b], Ks[c], v & 1, v >> 1);
    env_fini(&envs[0]);
    env_fini(&envs[1]);
}

Test(cpu_isa, generic_panel_f32) { panel_ragged("generic", QWI_DTYPE_F32); }
Test(cpu_isa, generic_panel_bf16) { panel_ragged("generic", QWI_DTYPE_BF16); }
Test(cpu_isa, avx2_panel_f32) { panel_ragged("avx2", QWI_DTYPE_F32); }
Test(cpu_isa, avx2_panel_bf16) { panel_ragged("avx2", QWI_DTYPE_BF16); }
Test(cpu_isa, avx512_panel_f32) { panel_ragged("avx512", QWI_DTYPE_F32); }
Test(cpu_isa, avx512_panel_bf16) { panel_ragged("avx512", QWI_DTYPE_BF16); }

/* Through the driver with panel linears: a row's bits are the same alone
 * (M = 1), in batches of 7 and 32, on 1..3 threads; and fusing jobs (two
 * panel linears, plus a row-major one) changes nothing. N = 1041 takes the
 * driver's whole-64-column-block path. */
static void panel_deterministic(const char *name) {
    const qwi_cpu_kernels *kt = table_or_skip(name);
    static const int64_t shapes[][2] = { { 203, 77 }, { 1041, 33 } };   /* N, K */
    static const int64_t batches[] = { 7, 32 };
    const int64_t R = 32;
    for (size_t s = 0; s < 2; s++)
        for (int d = 0; d < 2; d++) {
            const int64_t N = shapes[s][0], K = shapes[s][1];
            const qwi_dtype dt = d ? QWI_DTYPE_BF16 : QWI_DTYPE_F32;
            float *x = frand(R * K), *bias = frand(N);
            tw w = make_weight(dt, N * K);
            void *p = pack_weight(dt, &w, N, K);
            qwi_cpu_linear lin = { .dtype = dt, .w = p, .bias = bias, .n = N, .k = K, .panel = true };
            float *ref = malloc((size_t)(R * N) * 4), *got = malloc((size_t)(R * N) * 4);
            env e1;
            env_init(&e1, kt, 1, K);
            for (int64_t r = 0; r < R; r++) {
                qwi_cpu_mm_job j = { &lin, ref + r * N, 0 };
                qwi_cpu_matmul(&e1.cx, x + r * K, 1, K, &j, 1);
            }
            env_fini(&e1);
            for (int threads = 1; threads <= 3; threads++) {
                env e;
                env_init(&e, kt, threads, K);
                for (size_t bi = 0; bi < 2; bi++) {
                    memset(got, 0xff, (size_t)(R * N) * 4);
                    for (int64_t r0 = 0; r0 < R; r0 += batches[bi]) {
                        qwi_cpu_mm_job j = { &lin, got + r0 * N, 0 };
                        qwi_cpu_matmul(&e.cx, x + r0 * K, QWI_MIN(batches[bi], R - r0), K, &j, 1);
                    }
                    for (int64_t r = 0; r < R; r++)
                        cr_assert(memcmp(ref + r * N, got + r * N, (size_t)N * 4) == 0,
                                  "%s dtype %d N %lld K %lld threads %d batch %lld: row %lld differs "
                                  "from the row alone", name, dt, (long long)N, (long long)K, threads,
                                  (long long)batches[bi], (long long)r);
                }
                env_fini(&e);
            }

            /* Fused: this linear, a panel linear of the other dtype with a
             * residual accumulate, and a row-major one, in one call. */
            const int64_t N2 = 45, N3 = 13;
            const qwi_dtype dt2 = d ? QWI_DTYPE_F32 : QWI_DTYPE_BF16;
            tw w2 = make_weight(dt2, N2 * K), w3 = make_weight(QWI_DTYPE_BF16, N3 * K);
            void *p2 = pack_weight(dt2, &w2, N2, K);
            qwi_cpu_linear lin2 = { .dtype = dt2, .w = p2, .n = N2, .k = K, .panel = true };
            qwi_cpu_linear lin3 = { .dtype = QWI_DTYPE_BF16, .w = w3.data, .n = N3, .k = K,
                                    .panel = false };
            float *init2 = frand(R * N2);
            float *f2 = malloc((size_t)(R * N2) * 4), *s2 = malloc((size_t)(R * N2) * 4);
            float *f3 = malloc((size_t)(R * N3) * 4), *s3 = malloc((size_t)(R * N3) * 4);
            for (int threads = 1; threads <= 2; threads++) {
                env e;
                env_init(&e, kt, threads, K);
                static const int64_t Mf[] = { 1, 7, 32 };
                for (size_t mi = 0; mi < 3; mi++) {
                    const int64_t M = Mf[mi];
                    memset(got, 0xff, (size_t)(R * N) * 4);
                    memcpy(f2, init2, (size_t)(M * N2) * 4);
                    memcpy(s2, init2, (size_t)(M * N2) * 4);
                    qwi_cpu_mm_job all[3] = { { &lin, got, 0 }, { &lin2, f2, 1 }, { &lin3, f3, 0 } };
                    qwi_cpu_matmul(&e.cx, x, M, K, all, 3);
                    qwi_cpu_mm_job j2 = { &lin2, s2, 1 }, j3 = { &lin3, s3, 0 };
                    qwi_cpu_matmul(&e.cx, x, M, K, &j2, 1);
                    qwi_cpu_matmul(&e.cx, x, M, K, &j3, 1);
                    cr_assert(memcmp(got, ref, (size_t)(M * N) * 4) == 0,
                              "%s dtype %d N %lld threads %d M %lld: fused job 0 differs", name, dt,
                              (long long)N, threads, (long long)M);
                    cr_assert(memcmp(f2, s2, (size_t)(M * N2) * 4) == 0,
                              "%s dtype %d N %lld threads %d M %lld: fused panel job 1 differs", name,
                              dt, (long long)N, threads, (long long)M);
                    cr_assert(memcmp(f3, s3, (size_t)(M * N3) * 4) == 0,
                              "%s dtype %d N %lld threads %d M %lld: fused row-major job differs",
                              name, dt, (long long)N, threads, (long long)M);
                }
                env_fini(&e);
            }
            free(p2); free(init2); free(f2); free(s2); free(f3); free(s3);
            free_weight(&w2); free_weight(&w3);
            free(x); free(bias); free(p); free(ref); free(got);
            free_weight(&w);
        }
}

Test(cpu_isa, generic_panel_deterministic) { panel_deterministic("generic"); }
Test(cpu_isa, avx2_panel_deterministic) { panel_deterministic("avx2"); }
Test(cpu_isa, avx512_panel_deterministic) { panel_deterministic("avx512"); }

/* dot4 == four dot calls and axpy4 == four sequential axpy calls, bit for
 * bit (attention relies on it for batched == alone). The b / v vectors sit
 * back to back at an odd offset, so loads are unaligned and a tail overrun
 * of one reads the next. */
static void batched_vector_ops(const char *name) {
    const qwi_cpu_kernels *kt = table_or_skip(name);
    static const int64_t ns[] = { 1, 7, 8, 15, 16, 17, 64, 128, 131 };
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        const int64_t n = ns[t];
        float *a = frand(n), *base = frand(4 * n + 1);
        const float *b[4];
        for (int i = 0; i < 4; i++) b[i] = base + 1 + i * n;
        float out[4];
        kt->dot4(a, b, n, out);
        for (int i = 0; i < 4; i++) {
            float d = kt->dot(a, b[i], n);
            cr_assert(memcmp(&out[i], &d, sizeof d) == 0, "%s dot4 n %lld [%d]: %a vs dot %a", name,
                      (long long)n, i, out[i], d);
        }
        const float s[4] = { (float)urand(), (float)urand(), -1.75f, (float)urand() };
        float *o1 = frand(n), *o2 = malloc((size_t)n * sizeof(float));
        memcpy(o2, o1, (size_t)n * sizeof(float));
        kt->axpy4(o1, s, b, n);
        for (int i = 0; i < 4; i++) kt->axpy(o2, s[i], b[i], n);
        for (int64_t i = 0; i < n; i++)
            cr_assert(memcmp(&o1[i], &o2[i], sizeof o1[i]) == 0,
                      "%s axpy4 n %lld at %lld: %a vs 4 axpys %a", name, (long long)n, (long long)i,
                      o1[i], o2[i]);
        /* the two-head forms: each head as the single forms give it */
        float *a1 = frand(n), out0[4], out1[4], ref1[4];
        kt->dot4x2(a, a1, b, n, out0, out1);
        kt->dot4(a1, b, n, ref1);
        cr_assert(memcmp(out0, out, sizeof out) == 0, "%s dot4x2 head 0 n %lld", name, (long long)n);
        cr_assert(memcmp(out1, ref1, sizeof ref1) == 0, "%s dot4x2 head 1 n %lld", name, (long long)n);
        const float s1[4] = { (float)urand(), 0.5f, (float)urand(), (float)urand() };
        float *p0 = frand(n), *p1 = frand(n), *q0 = malloc((size_t)n * 4), *q1 = malloc((size_t)n * 4);
        memcpy(q0, p0, (size_t)n * 4);
        memcpy(q1, p1, (size_t)n * 4);
        kt->axpy4x2(p0, p1, s, s1, b, n);
        kt->axpy4(q0, s, b, n);
        kt->axpy4(q1, s1, b, n);
        cr_assert(memcmp(p0, q0, (size_t)n * 4) == 0, "%s axpy4x2 head 0 n %lld", name, (long long)n);
        cr_assert(memcmp(p1, q1, (size_t)n * 4) == 0, "%s axpy4x2 head 1 n %lld", name, (long long)n);
        free(a1); free(p0); free(p1); free(q0); free(q1);
        free(a); free(base); free(o1); free(o2);
    }
}

Test(cpu_isa, generic_dot4_axpy4) { batched_vector_ops("generic"); }
Test(cpu_isa, avx2_dot4_axpy4) { batched_vector_ops("avx2"); }
Test(cpu_isa, avx512_dot4_axpy4) { batched_vector_ops("avx512"); }
