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
#include "cpu/threadpool.h"
#include "dtype.h"

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
    qwi_cpu_linear lin = { .dtype = dt, .w = w.data, .bias = bias, .n = N, .k = K };
    qwi_cpu_mm_job job = { &lin, out, accumulate }, rjob = { &lin, ref, accumulate };
    qwi_cpu_matmul(&e->cx, x, M, K, &job, 1);
    qwi_cpu_matmul(&ref_env->cx, x, M, K, &rjob, 1);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double exact = 0, mag = 0;
            for (int64_t k = 0; k < K; k++) {
                exact += (double)x[m * K + k] * w.exact[n * K + k];
                mag += fabs((double)x[m * K + k] * w.exact[n * K + k]);
            }
            if (bias) exact += bias[n], mag += fabs(bias[n]);
            if (accumulate) exact += init[m * N + n], mag += fabs(init[m * N + n]);
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
        qwi_cpu_linear lin = { (qwi_dtype)dt, w.data, bias, N, K };
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
