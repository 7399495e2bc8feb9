/*
 * test_cpu_kernels.c - the CPU backend's kernels against naive double
 * loops, paged attention against contiguous attention, and the
 * determinism of the parallel drivers (batch size and thread count must not
 * change a bit).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/attention.h"
#include "cpu/kernels.h"
#include "cpu/kv_bf16.h"
#include "cpu/ops.h"
#include "cpu/panel.h"
#include "cpu/threadpool.h"
#include "dtype.h"
#include "util/testutil.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) {            /* [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 4503599627370496.0 - 1.0;
}
static int irand(int n) { return (int)((urand() + 1.0) * 0.5 * n) % n; }

static float *frand(int64_t n, double scale) {
    float *p = malloc((size_t)(n ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) p[i] = (float)(urand() * scale);
    return p;
}

/* A weight in dtype dt plus its exact f32 values (what the kernel must use). */
typedef struct tw {
    void *data;
    float *exact;
} tw;

static tw make_weight(qwi_dtype dt, int64_t n) {
    tw w;
    w.exact = frand(n, 1.0);
    w.data = malloc((size_t)(n ? n : 1) * qwi_dtype_size(dt));
    for (int64_t i = 0; i < n; i++) {
        if (dt == QWI_DTYPE_F32) {
            ((float *)w.data)[i] = w.exact[i];
        } else if (dt == QWI_DTYPE_BF16) {
            uint16_t h = qwi_f32_to_bf16(w.exact[i]);
            ((uint16_t *)w.data)[i] = h;
            w.exact[i] = qwi_bf16_to_f32(h);
        } else {
            /* build an f16 from a random sign/exponent/mantissa (normals and
             * a few subnormals), then take its exact value */
            uint16_t h = (uint16_t)(((uint32_t)irand(2) << 15) | ((uint32_t)(irand(16) + (i % 17 == 0 ? 0 : 8)) << 10) |
                                    (uint32_t)irand(1024));
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

typedef struct env {
    qwi_cpu_pool *pool;
    qwi_cpu_ctx cx;
    float *bufs[8];
} env;

static void env_init(env *e, int threads, int64_t max_k) {
    cr_assert_eq(qwi_cpu_pool_create(threads, &e->pool), QW_OK);
    e->cx.pool = e->pool;
    e->cx.kt = qwi_cpu_kernels_generic();
    e->cx.nthreads = qwi_cpu_pool_size(e->pool);
    cr_assert_eq(e->cx.nthreads, threads);
    for (int t = 0; t < threads; t++) e->bufs[t] = malloc((size_t)QWI_CPU_MM_MAX_COLS * (size_t)max_k * sizeof(float));
    e->cx.f16_buf = e->bufs;
    e->cx.max_k = max_k;
}

static void env_fini(env *e) {
    for (int t = 0; t < e->cx.nthreads; t++) free(e->bufs[t]);
    qwi_cpu_pool_destroy(e->pool);
}

/* ---- matmul -------------------------------------------------------------- */

static void check_matmul(env *e, qwi_dtype dt, int64_t M, int64_t N, int64_t K, int use_bias,
                         int accumulate) {
    float *x = frand(M * K, 1.0);
    tw w = make_weight(dt, N * K);
    float *bias = use_bias ? frand(N, 1.0) : NULL;
    float *out = frand(M * N, 1.0);
    float *init = malloc((size_t)(M * N) * sizeof(float));
    memcpy(init, out, (size_t)(M * N) * sizeof(float));
    qwi_cpu_linear lin = { .dtype = dt, .w = w.data, .bias = bias, .n = N, .k = K, .panel = false };
    qwi_cpu_mm_job job = { &lin, out, accumulate };
    qwi_cpu_matmul(&e->cx, x, M, K, &job, 1);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double mag;
            double ref = qwt_matmul_ref(x + m * K, w.exact + n * K, K, bias ? bias + n : NULL,
                                        accumulate ? init + m * N + n : NULL, &mag);
            double err = fabs(out[m * N + n] - ref);
            cr_assert(err <= 2e-6 * mag + 1e-30,
                      "dtype %d M %lld N %lld K %lld at (%lld,%lld): %g vs %g", dt, (long long)M,
                      (long long)N, (long long)K, (long long)m, (long long)n, out[m * N + n], ref);
        }
    free(x);
    free_weight(&w);
    free(bias);
    free(out);
    free(init);
}

Test(cpu_kernels, matmul_all_dtypes_ragged) {
    static const int64_t Ms[] = { 1, 3, 4, 5, 9, 17 };
    static const int64_t Ns[] = { 1, 3, 5, 13, 70, 131 };
    static const int64_t Ks[] = { 1, 7, 8, 13, 67, 130 };
    for (int threads = 1; threads <= 3; threads += 2) {
        env e;
        env_init(&e, threads, 256);
        for (int dt = 0; dt < 3; dt++)
            for (size_t a = 0; a < 6; a++)
                for (size_t b = 0; b < 6; b++)
                    for (size_t c = 0; c < 6; c++)
                        check_matmul(&e, (qwi_dtype)dt, Ms[a], Ns[b], Ks[c], (int)((a + b) & 1),
                                     (int)((b + c) % 3 == 0));
        env_fini(&e);
    }
}

Test(cpu_kernels, matmul_fused_jobs) {
    env e;
    env_init(&e, 2, 64);
    const int64_t M = 6, K = 37, N1 = 19, N2 = 45;
    float *x = frand(M * K, 1.0);
    tw w1 = make_weight(QWI_DTYPE_BF16, N1 * K), w2 = make_weight(QWI_DTYPE_F32, N2 * K);
    qwi_cpu_linear l1 = { .dtype = QWI_DTYPE_BF16, .w = w1.data, .n = N1, .k = K, .panel = false };
    qwi_cpu_linear l2 = { .dtype = QWI_DTYPE_F32, .w = w2.data, .n = N2, .k = K, .panel = false };
    float *o1 = malloc(M * N1 * 4), *o2 = malloc(M * N2 * 4), *s1 = malloc(M * N1 * 4), *s2 = malloc(M * N2 * 4);
    qwi_cpu_mm_job both[2] = { { &l1, o1, 0 }, { &l2, o2, 0 } };
    qwi_cpu_matmul(&e.cx, x, M, K, both, 2);
    qwi_cpu_mm_job j1 = { &l1, s1, 0 }, j2 = { &l2, s2, 0 };
    qwi_cpu_matmul(&e.cx, x, M, K, &j1, 1);
    qwi_cpu_matmul(&e.cx, x, M, K, &j2, 1);
    cr_assert(memcmp(o1, s1, M * N1 * 4) == 0);
    cr_assert(memcmp(o2, s2, M * N2 * 4) == 0);
    free(x); free(o1); free(o2); free(s1); free(s2);
    free_weight(&w1); free_weight(&w2);
    env_fini(&e);
}

/* The same rows in batches of different M, and different thread counts,
 * must give bit-identical outputs. */
Test(cpu_kernels, matmul_deterministic_across_batch_and_threads) {
    const int64_t R = 37, K = 203, N = 301;
    float *x = frand(R * K, 1.0);
    for (int dt = 0; dt < 3; dt++) {
        tw w = make_weight((qwi_dtype)dt, N * K);
        float *bias = frand(N, 1.0);
        qwi_cpu_linear lin = { .dtype = (qwi_dtype)dt, .w = w.data, .bias = bias, .n = N, .k = K,
                               .panel = false };
        float *ref = malloc(R * N * 4), *got = malloc(R * N * 4);
        env e1;
        env_init(&e1, 1, K);
        for (int64_t r = 0; r < R; r++) {          /* every row alone */
            qwi_cpu_mm_job j = { &lin, ref + r * N, 0 };
            qwi_cpu_matmul(&e1.cx, x + r * K, 1, K, &j, 1);
        }
        env_fini(&e1);
        static const int64_t batches[] = { 2, 3, 4, 7, 16, 37 };
        for (int threads = 1; threads <= 4; threads++) {
            env e;
            env_init(&e, threads, K);
            for (size_t bi = 0; bi < 6; bi++) {
                memset(got, 0xff, R * N * 4);
                for (int64_t r0 = 0; r0 < R; r0 += batches[bi]) {
                    int64_t m = QWI_MIN(batches[bi], R - r0);
                    qwi_cpu_mm_job j = { &lin, got + r0 * N, 0 };
                    qwi_cpu_matmul(&e.cx, x + r0 * K, m, K, &j, 1);
                }
                cr_assert(memcmp(ref, got, R * N * 4) == 0, "dtype %d threads %d batch %lld differ",
                          dt, threads, (long long)batches[bi]);
            }
            env_fini(&e);
        }
        free(ref); free(got); free(bias);
        free_weight(&w);
    }
    free(x);
}

/* ---- panel layout ------------------------------------------------------------ */

/* Packing an [n][k] weight and reading it back element by element gives the
 * source values; the rows that pad the last panel read +0 (the pack must
 * write them: dst starts as garbage); f16 and empty shapes have no form. */
Test(cpu_kernels, panel_pack_round_trip) {
    static const int64_t ns[] = { 1, 15, 16, 17, 40, 67 };
    static const int64_t ks[] = { 1, 7, 33 };
    static const qwi_dtype dts[] = { QWI_DTYPE_F32, QWI_DTYPE_BF16 };
    for (int d = 0; d < 2; d++)
        for (size_t a = 0; a < 6; a++)
            for (size_t b = 0; b < 3; b++) {
                const qwi_dtype dt = dts[d];
                const int64_t n = ns[a], k = ks[b], padded = QWI_DIV_UP(n, QWI_PANEL) * QWI_PANEL;
                tw w = make_weight(dt, n * k);
                size_t bytes = qwi_panel_bytes(dt, n, k);
                cr_assert_eq(bytes, (size_t)(padded * k) * qwi_dtype_size(dt), "dt %d n %lld k %lld",
                             dt, (long long)n, (long long)k);
                void *p = malloc(bytes);
                memset(p, 0xA5, bytes);
                cr_assert(qwi_panel_pack(dt, w.data, n, k, p));
                for (int64_t r = 0; r < padded; r++)
                    for (int64_t c = 0; c < k; c++) {
                        float got = qwi_panel_get(dt, p, k, r, c);
                        float want = r < n ? w.exact[r * k + c] : 0.0f;
                        cr_assert(memcmp(&got, &want, sizeof got) == 0,
                                  "dt %d n %lld k %lld (%lld,%lld): %g vs %g", dt, (long long)n,
                                  (long long)k, (long long)r, (long long)c, got, want);
                    }
                free(p);
                free_weight(&w);
            }
    cr_assert_eq(qwi_panel_bytes(QWI_DTYPE_F16, 16, 16), 0);
    cr_assert_eq(qwi_panel_bytes(QWI_DTYPE_F32, 0, 16), 0);
    cr_assert_eq(qwi_panel_bytes(QWI_DTYPE_BF16, -3, 16), 0);
    cr_assert_eq(qwi_panel_bytes(QWI_DTYPE_F32, 16, 0), 0);
    cr_assert_eq(qwi_panel_bytes(QWI_DTYPE_BF16, 16, -1), 0);
    uint16_t src[32] = { 0 }, dst[16 * 2];
    memset(dst, 0x5A, sizeof dst);
    cr_assert_not(qwi_panel_pack(QWI_DTYPE_F16, src, 1, 2, dst));
    for (size_t i = 0; i < sizeof dst / sizeof dst[0]; i++)
        cr_assert_eq(dst[i], 0x5A5A, "f16 pack wrote dst[%zu]", i);
}

/* ---- row kernels ------------------------------------------------------------ */

Test(cpu_kernels, rmsnorm_and_head_rmsnorm) {
    static const int64_t ns[] = { 1, 5, 8, 19, 128, 1001 };
    for (size_t t = 0; t < 6; t++) {
        int64_t n = ns[t];
        float *x = frand(n, 3.0), *w = frand(n, 1.0), *out = malloc(n * 4);
        qwr_rmsnorm(x, w, n, 1e-6f, out);
        double ss = 0;
        for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
        double r = 1.0 / sqrt(ss / n + 1e-6);
        for (int64_t i = 0; i < n; i++)
            cr_assert(fabs(out[i] - x[i] * r * w[i]) <= 1e-5 * fabs(x[i] * r * w[i]) + 1e-7, "n %lld", (long long)n);
        free(x); free(w); free(out);
    }
    const int64_t nh = 3, hd = 10;
    float *x = frand(nh * hd, 2.0), *w = frand(hd, 1.0), *y = malloc(nh * hd * 4);
    memcpy(y, x, nh * hd * 4);
    qwr_head_rmsnorm(y, nh, hd, w, 1e-5f);
    for (int64_t h = 0; h < nh; h++) {
        double ss = 0;
        for (int64_t i = 0; i < hd; i++) ss += (double)x[h * hd + i] * x[h * hd + i];
        double r = 1.0 / sqrt(ss / hd + 1e-5);
        for (int64_t i = 0; i < hd; i++) {
            double ref = x[h * hd + i] * r * w[i];
            cr_assert(fabs(y[h * hd + i] - ref) <= 1e-5 * fabs(ref) + 1e-7);
        }
    }
    free(x); free(w); free(y);
}

Test(cpu_kernels, rope_neox) {
    const int64_t hd = 22, half = hd / 2, nh = 3;
    const double theta = 1000000.0;
    double inv[11];
    for (int64_t i = 0; i < half; i++) inv[i] = pow(theta, -2.0 * i / hd);
    static const int64_t poss[] = { 0, 1, 17, 4095, 40000 };
    for (size_t t = 0; t < 5; t++) {
        float c[11], s[11];
        qwr_rope_table(inv, half, poss[t], c, s);
        float *x = frand(nh * hd, 1.0), *y = malloc(nh * hd * 4);
        memcpy(y, x, nh * hd * 4);
        qwr_rope_neox(y, nh, hd, c, s);
        for (int64_t h = 0; h < nh; h++)
            for (int64_t i = 0; i < hd; i++) {
                double a = (double)poss[t] * inv[i % half];
                double rot = i < half ? -x[h * hd + i + half] : x[h * hd + i - half];
                double ref = x[h * hd + i] * cos(a) + rot * sin(a);
                cr_assert(fabs(y[h * hd + i] - ref) <= 1e-6, "pos %lld i %lld: %g vs %g",
                          (long long)poss[t], (long long)i, y[h * hd + i], ref);
            }
        free(x); free(y);
    }
}

/* The row kernels run as per-ISA clones (QWR_ISA_CLONES): whichever one the
 * loader picked on this machine must give, bit for bit, the scalar chain
 * kernels.h documents (8 lanes, the fixed lane tree, (x * r) * w; RoPE's
 * two products and one add per output; bf16 round to nearest even). */
static float lane_tree(const float *a) {
    return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

Test(cpu_kernels, row_kernels_bits_of_the_scalar_chain) {
    static const int64_t ns[] = { 1, 7, 8, 9, 31, 128, 1000, 1024 };
    /* many draws: a wrong lane order or a fused multiply-add changes the
     * bits of only some inputs */
    for (size_t t = 0; t < 40 * sizeof ns / sizeof ns[0]; t++) {
        const int64_t n = ns[t % (sizeof ns / sizeof ns[0])];
        float *x = frand(n, 3.0), *w = frand(n, 1.0), *out = malloc(n * 4), *want = malloc(n * 4);
        qwr_rmsnorm(x, w, n, 1e-6f, out);
        float acc[8] = { 0 };
        for (int64_t i = 0; i < n; i++) {
            const float sq = x[i] * x[i];
            acc[i % 8] = acc[i % 8] + sq;
        }
        const float r = 1.0f / sqrtf(lane_tree(acc) / (float)n + 1e-6f);
        for (int64_t i = 0; i < n; i++) {
            const float xr = x[i] * r;
            want[i] = xr * w[i];
        }
        cr_assert(memcmp(out, want, n * 4) == 0, "rmsnorm n %lld: not the scalar chain's bits",
                  (long long)n);

        if (n % 2 == 0) {
            const int64_t half = n / 2;
            float *y = malloc(n * 4);
            memcpy(y, x, n * 4);
            qwr_rope_neox(y, 1, n, w, w + half);   /* any cos/sin tables will do */
            for (int64_t i = 0; i < half; i++) {
                const float a = x[i], b = x[i + half], c = w[i], s = w[half + i];
                const float ac = a * c, bs = b * s, bc = b * c, as = a * s;
                cr_assert(memcmp(&y[i], &(float){ ac - bs }, 4) == 0, "rope n %lld i %lld", (long long)n, (long long)i);
                cr_assert(memcmp(&y[i + half], &(float){ bc + as }, 4) == 0, "rope n %lld i %lld", (long long)n, (long long)i);
            }
            free(y);
        }

        uint16_t *h = malloc(n * 2);
        x[0] = NAN;
        qwi_cpu_kv_bf16_round(x, h, n);
        for (int64_t i = 0; i < n; i++)
            cr_assert_eq(h[i], qwi_f32_to_bf16(x[i]), "bf16 round n %lld i %lld", (long long)n, (long long)i);
        free(h); free(x); free(w); free(out); free(want);
    }
}

Test(cpu_kernels, silu_mul_add_embed) {
    const int64_t n = 77;
    float *g = frand(n, 8.0), *u = frand(n, 2.0), *o = malloc(n * 4);
    qwr_silu_mul(g, u, n, o);
    for (int64_t i = 0; i < n; i++) {
        double ref = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
        cr_assert(fabs(o[i] - ref) <= 1e-6 * fabs(ref) + 1e-7);
    }
    float *a = frand(n, 1.0), *a0 = malloc(n * 4);
    memcpy(a0, a, n * 4);
    qwr_add(a, u, n);
    for (int64_t i = 0; i < n; i++) cr_assert_eq(a[i], a0[i] + u[i]);
    for (int dt = 0; dt < 3; dt++) {
        const int64_t rows = 9, H = 13;
        tw w = make_weight((qwi_dtype)dt, rows * H);
        float row[13];
        qwr_embed_row((qwi_dtype)dt, w.data, 7, H, row);
        cr_assert(memcmp(row, w.exact + 7 * H, H * 4) == 0, "dtype %d", dt);
        free_weight(&w);
    }
    free(g); free(u); free(o); free(a); free(a0);
}

/* ---- paged attention ---------------------------------------------------------- */

static void naive_attention(const float *q, const float *kc, const float *vc, int ctx_pos,
                            int nh, int nkv, int hd, double *out) {
    /* q: [nh*hd]; kc/vc: contiguous [ctx][nkv*hd]; attend 0..ctx_pos */
    int group = nh / nkv;
    double *s = malloc((size_t)(ctx_pos + 1) * sizeof(double));
    for (int h = 0; h < nh; h++) {
        int g = h / group;
        double mx = -INFINITY, sum = 0;
        for (int p = 0; p <= ctx_pos; p++) {
            double d = 0;
            for (int i = 0; i < hd; i++) d += (double)q[h * hd + i] * kc[(p * nkv + g) * hd + i];
            s[p] = d / sqrt((double)hd);
            if (s[p] > mx) mx = s[p];
        }
        for (int p = 0; p <= ctx_pos; p++) sum += (s[p] = exp(s[p] - mx));
        for (int i = 0; i < hd; i++) {
            double o = 0;
            for (int p = 0; p <= ctx_pos; p++) o += s[p] * vc[(p * nkv + g) * hd + i];
            out[h * hd + i] = o / sum;
        }
    }
    free(s);
}

static void run_paged_case(int nh, int nkv, int hd, int bs, int nseq, int chunk, int threads) {
    const int maxctx = 300, mbps = QWI_DIV_UP(maxctx, bs);
    const int nblocks = nseq * mbps + 3;
    const int kvd = nkv * hd, qd = nh * hd;
    int ctx[8];
    for (int s = 0; s < nseq; s++) ctx[s] = 1 + irand(maxctx);
    ctx[0] = maxctx;                                /* crosses tiles and blocks */
    /* a random permutation of blocks handed out to the sequences */
    int *perm = malloc(nblocks * sizeof(int));
    for (int i = 0; i < nblocks; i++) perm[i] = i;
    for (int i = nblocks - 1; i > 0; i--) { int j = irand(i + 1), t = perm[i]; perm[i] = perm[j]; perm[j] = t; }
    int32_t *bt = malloc((size_t)nseq * mbps * sizeof(int32_t));
    for (int i = 0; i < nseq * mbps; i++) bt[i] = perm[i];
    float *kcache = calloc((size_t)nblocks * bs * kvd, 4), *vcache = calloc((size_t)nblocks * bs * kvd, 4);
    float *kseq[8], *vseq[8];
    int total_rows = 0;
    for (int s = 0; s < nseq; s++) {
        kseq[s] = frand((int64_t)ctx[s] * kvd, 1.0);
        vseq[s] = frand((int64_t)ctx[s] * kvd, 1.0);
        total_rows += QWI_MIN(chunk, ctx[s]);
    }
    /* write whole contexts through qwi_cpu_kv_write (its slots from the tables) */
    for (int s = 0; s < nseq; s++) {
        int32_t *slots = malloc(ctx[s] * sizeof(int32_t));
        for (int p = 0; p < ctx[s]; p++) slots[p] = bt[s * mbps + p / bs] * bs + p % bs;
        qwi_cpu_kv_write(kcache, vcache, kseq[s], vseq[s], slots, ctx[s], kvd);
        free(slots);
    }
    /* query rows: the last min(chunk, ctx) positions of each seq (a chunk) */
    int32_t *pos = malloc(total_rows * 4), *row_seq = malloc(total_rows * 4);
    float *q = frand((int64_t)total_rows * qd, 2.0), *out = malloc((size_t)total_rows * qd * 4);
    int r = 0;
    for (int s = 0; s < nseq; s++)
        for (int i = ctx[s] - QWI_MIN(chunk, ctx[s]); i < ctx[s]; i++, r++) { pos[r] = i; row_seq[r] = s; }
    qwi_cpu_pool *pool;
    cr_assert_eq(qwi_cpu_pool_create(threads, &pool), QW_OK);
    float *scr[4];
    for (int t = 0; t < threads; t++) scr[t] = malloc(qwi_cpu_attn_scratch_floats(nh, nkv, hd) * 4);
    qwi_cpu_attn a = { .q = q, .k_cache = kcache, .v_cache = vcache, .out = out, .positions = pos,
                       .row_seq = row_seq, .block_tables = bt, .max_blocks_per_seq = mbps,
                       .block_size = bs, .num_tokens = total_rows, .num_heads = nh,
                       .num_kv_heads = nkv, .head_dim = hd, .scale = (float)(1.0 / sqrt((double)hd)) };
    qwi_cpu_attention(pool, qwi_cpu_kernels_generic(), scr, &a);
    double *ref = malloc(qd * sizeof(double));
    for (r = 0; r < total_rows; r++) {
        int s = row_seq[r];
        naive_attention(q + (int64_t)r * qd, kseq[s], vseq[s], pos[r], nh, nkv, hd, ref);
        for (int i = 0; i < qd; i++)
            cr_assert(fabs(out[(int64_t)r * qd + i] - ref[i]) <= 2e-5,
                      "nh %d nkv %d bs %d row %d pos %d i %d: %g vs %g", nh, nkv, bs, r, pos[r], i,
                      out[(int64_t)r * qd + i], ref[i]);
    }
    /* each row alone (M = 1, one thread) gives the same bits */
    float *one = malloc(qd * 4);
    qwi_cpu_attn a1 = a;
    for (r = 0; r < total_rows; r++) {
        a1.q = q + (int64_t)r * qd; a1.out = one; a1.positions = pos + r; a1.row_seq = row_seq + r;
        a1.num_tokens = 1;
        for (int g = 0; g < nkv; g++) qwr_attention_row(&a1, qwi_cpu_kernels_generic(), 0, g, scr[0]);
        cr_assert(memcmp(one, out + (int64_t)r * qd, qd * 4) == 0, "row %d differs alone", r);
    }
    free(one);
    for (int t = 0; t < threads; t++) free(scr[t]);
    qwi_cpu_pool_destroy(pool);
    for (int s = 0; s < nseq; s++) { free(kseq[s]); free(vseq[s]); }
    free(perm); free(bt); free(kcache); free(vcache); free(pos); free(row_seq); free(q); free(out); free(ref);
}

Test(cpu_attention, paged_vs_contiguous_gqa) {
    static const int groups[] = { 1, 2, 4 };
    static const int bss[] = { 1, 5, 16 };
    for (int gi = 0; gi < 3; gi++)
        for (int bi = 0; bi < 3; bi++)
            run_paged_case(4, 4 / groups[gi], 12, bss[bi], 5, 1 + 6 * bi, 1 + (gi + bi) % 3);
}

Test(cpu_attention, long_chunk_crosses_tiles) {
    run_paged_case(8, 2, 16, 16, 3, 300, 2);
}

static void count_task(void *ctx, int64_t t, int thread) {
    int *hits = ctx;
    __atomic_fetch_add(&hits[t], 1, __ATOMIC_RELAXED);
    cr_assert(thread >= 0 && thread < 5);
}

Test(cpu_threadpool, runs_every_task_once) {
    enum { N = 1000 };
    static int hits[N];
    for (int threads = 1; threads <= 5; threads++) {
        qwi_cpu_pool *p;
        cr_assert_eq(qwi_cpu_pool_create(threads, &p), QW_OK);
        cr_assert_eq(qwi_cpu_pool_size(p), threads);
        memset(hits, 0, sizeof hits);
        for (int rep = 0; rep < 50; rep++) qwi_cpu_pool_run(p, N - rep, count_task, hits);
        for (int t = 0; t < N; t++) cr_assert_eq(hits[t], t < N - 49 ? 50 : N - t, "task %d", t);
        qwi_cpu_pool_destroy(p);
    }
    qwi_cpu_pool *p;
    cr_assert_eq(qwi_cpu_pool_create(0, &p), QW_OK);   /* 0 = affinity CPUs */
    cr_assert_geq(qwi_cpu_pool_size(p), 1);
    qwi_cpu_pool_destroy(p);
}
