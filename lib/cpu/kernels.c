/*
 * kernels.c - portable C kernels of the CPU backend (see kernels.h for the
 * determinism contract). Written as fixed-width lane loops that GCC/Clang
 * vectorise at -O2 without -march. The ISA-specific tables live in
 * kernels_<isa>.c; the choice between them is made once, here.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_features.h"
#include "cpu/kernels.h"

#define L QWR_LANES

static inline float lanes_sum(const float *a) {
    /* A fixed tree: every kernel reduces its lanes through this one function. */
    return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

static inline float ld_f32(const float *w, int64_t i) { return w[i]; }

static inline float ld_bf16(const uint16_t *w, int64_t i) {
    uint32_t u = (uint32_t)w[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline void put(float *o, float dot, const float *bias, int64_t n, int accumulate) {
    float v = bias ? dot + bias[n] : dot;
    *o = accumulate ? *o + v : v;
}

float qwr_dot(const float *a, const float *b, int64_t n) {
    float acc[L] = {0};
    int64_t k = 0;
    for (; k + L <= n; k += L)
        for (int j = 0; j < L; j++) acc[j] += a[k + j] * b[k + j];
    for (int j = 0; k + j < n; j++) acc[j] += a[k + j] * b[k + j];
    return lanes_sum(acc);
}

/*
 * Three register tiles, all doing the per-element arithmetic of qwr_dot:
 *   4 rows x 1 weight row  (prefill: the weight row is loaded once per 4 rows)
 *   1 row  x 4 weight rows (decode / row tail: 4 independent chains for ILP)
 *   1 x 1                  (column tail)
 * Loop order is row tile outer, weight row inner, so the caller's block of
 * weight rows stays in cache across the row tiles: weights come from memory
 * once per call, whatever M is.
 */
#define QWR_MATMUL(NAME, WT, LOAD)                                                         \
void NAME(const float *x, int64_t M, int64_t K, const WT *w, int64_t N,                    \
          const float *bias, float *out, int64_t ldo, int accumulate) {                    \
    int64_t m = 0;                                                                         \
    for (; m + 4 <= M; m += 4) {                                                           \
        const float *x0 = x + (m + 0) * K, *x1 = x + (m + 1) * K;                          \
        const float *x2 = x + (m + 2) * K, *x3 = x + (m + 3) * K;                          \
        for (int64_t n = 0; n < N; n++) {                                                  \
            const WT *wr = w + n * K;                                                      \
            float a0[L] = {0}, a1[L] = {0}, a2[L] = {0}, a3[L] = {0};                      \
            int64_t k = 0;                                                                 \
            for (; k + L <= K; k += L) {                                                   \
                float wv[L];                                                               \
                for (int j = 0; j < L; j++) wv[j] = LOAD(wr, k + j);                       \
                for (int j = 0; j < L; j++) a0[j] += x0[k + j] * wv[j];                    \
                for (int j = 0; j < L; j++) a1[j] += x1[k + j] * wv[j];                    \
                for (int j = 0; j < L; j++) a2[j] += x2[k + j] * wv[j];                    \
                for (int j = 0; j < L; j++) a3[j] += x3[k + j] * wv[j];                    \
            }                                                                              \
            for (int j = 0; k + j < K; j++) {                                              \
                float wv = LOAD(wr, k + j);                                                \
                a0[j] += x0[k + j] * wv;                                                   \
                a1[j] += x1[k + j] * wv;                                                   \
                a2[j] += x2[k + j] * wv;                                                   \
                a3[j] += x3[k + j] * wv;                                                   \
            }                                                                              \
            put(out + (m + 0) * ldo + n, lanes_sum(a0), bias, n, accumulate);              \
            put(out + (m + 1) * ldo + n, lanes_sum(a1), bias, n, accumulate);              \
            put(out + (m + 2) * ldo + n, lanes_sum(a2), bias, n, accumulate);              \
            put(out + (m + 3) * ldo + n, lanes_sum(a3), bias, n, accumulate);              \
        }                                                                                  \
    }                                                                                      \
    for (; m < M; m++) {                                                                   \
        const float *xr = x + m * K;                                                       \
        int64_t n = 0;                                                                     \
        for (; n + 4 <= N; n += 4) {                                                       \
            const WT *w0 = w + (n + 0) * K, *w1 = w + (n + 1) * K;                         \
            const WT *w2 = w + (n + 2) * K, *w3 = w + (n + 3) * K;                         \
            float a0[L] = {0}, a1[L] = {0}, a2[L] = {0}, a3[L] = {0};                      \
            int64_t k = 0;                                                                 \
            for (; k + L <= K; k += L) {                                                   \
                for (int j = 0; j < L; j++) a0[j] += xr[k + j] * LOAD(w0, k + j);          \
                for (int j = 0; j < L; j++) a1[j] += xr[k + j] * LOAD(w1, k + j);          \
                for (int j = 0; j < L; j++) a2[j] += xr[k + j] * LOAD(w2, k + j);          \
                for (int j = 0; j < L; j++) a3[j] += xr[k + j] * LOAD(w3, k + j);          \
            }                                                                              \
            for (int j = 0; k + j < K; j++) {                                              \
                a0[j] += xr[k + j] * LOAD(w0, k + j);                                      \
                a1[j] += xr[k + j] * LOAD(w1, k + j);                                      \
                a2[j] += xr[k + j] * LOAD(w2, k + j);                                      \
                a3[j] += xr[k + j] * LOAD(w3, k + j);                                      \
            }                                                                              \
            put(out + m * ldo + n + 0, lanes_sum(a0), bias, n + 0, accumulate);            \
            put(out + m * ldo + n + 1, lanes_sum(a1), bias, n + 1, accumulate);            \
            put(out + m * ldo + n + 2, lanes_sum(a2), bias, n + 2, accumulate);            \
            put(out + m * ldo + n + 3, lanes_sum(a3), bias, n + 3, accumulate);            \
        }                                                                                  \
        for (; n < N; n++) {                                                               \
            const WT *wr = w + n * K;                                                      \
            float a0[L] = {0};                                                             \
            int64_t k = 0;                                                                 \
            for (; k + L <= K; k += L)                                                     \
                for (int j = 0; j < L; j++) a0[j] += xr[k + j] * LOAD(wr, k + j);          \
            for (int j = 0; k + j < K; j++) a0[j] += xr[k + j] * LOAD(wr, k + j);          \
            put(out + m * ldo + n, lanes_sum(a0), bias, n, accumulate);                    \
        }                                                                                  \
    }                                                                                      \
}

QWR_MATMUL(qwr_matmul_f32, float, ld_f32)
QWR_MATMUL(qwr_matmul_bf16, uint16_t, ld_bf16)

/*
 * Portable panel kernels: one chain per output over k in order (a multiply,
 * then an add). The 16 chains of a panel are independent, so the inner
 * loop over slots vectorises; for bf16, slot 2i is row i and slot 2i+1 row
 * 8+i (panel.h), which the store undoes.
 */
static inline int64_t panel_row(int bf16, int slot) {
    return bf16 ? (slot & 1 ? 8 + slot / 2 : slot / 2) : slot;
}

/* The portable panel loop: up to QWR_PANEL_ROWS rows of x at a time, and
 * the panel widened to f32 QWR_PANEL_KC values of k at a time into a small
 * buffer, so each weight is converted once per 64 rows rather than once per
 * row. Each output's chain still runs over k in order, so the blocking
 * changes no bit. */
/* Four f32 lanes as a GCC/Clang vector: SSE2 or NEON registers, IEEE
 * element-wise operations (no contraction in ISO C mode), so a[q] + x * w
 * is the scalar multiply-then-add of the contract, four at a time. */
typedef float qwr_v4 __attribute__((vector_size(16)));

#define QWR_PANEL_ROWS 64
#define QWR_PANEL_KC 64

#define QWR_MATMUL_PANEL(NAME, WT, LOAD, IS_BF16)                                          \
void NAME(const float *x, int64_t M, int64_t K, const WT *w, int64_t N,                    \
          const float *bias, float *out, int64_t ldo, int accumulate) {                    \
    float acc[QWR_PANEL_ROWS][16];                                                         \
    float wv[QWR_PANEL_KC][16];                                                            \
    for (int64_t n0 = 0; n0 < N; n0 += 16) {                                               \
        const WT *p = w + (n0 / 16) * K * 16;                                              \
        for (int64_t m0 = 0; m0 < M; m0 += QWR_PANEL_ROWS) {                               \
            const int64_t rb = QWI_MIN((int64_t)QWR_PANEL_ROWS, M - m0);                   \
            memset(acc, 0, sizeof acc);                                                    \
            for (int64_t k0 = 0; k0 < K; k0 += QWR_PANEL_KC) {                             \
                const int64_t kc = QWI_MIN((int64_t)QWR_PANEL_KC, K - k0);                 \
                for (int64_t k = 0; k < kc; k++)                                           \
                    for (int s = 0; s < 16; s++) wv[k][s] = LOAD(p, (k0 + k) * 16 + s);    \
                for (int64_t r = 0; r < rb; r += 2) {                                      \
                    /* two rows: eight independent 4-lane chains hide the add latency */  \
                    const int64_t r1 = r + 1 < rb ? r + 1 : r;                             \
                    const float *x0 = x + (m0 + r) * K + k0, *x1 = x + (m0 + r1) * K + k0; \
                    qwr_v4 a0[4], a1[4];                                                   \
                    memcpy(a0, acc[r], sizeof a0);                                         \
                    memcpy(a1, acc[r1], sizeof a1);                                        \
                    for (int64_t k = 0; k < kc; k++) {                                     \
                        qwr_v4 w4[4];                                                      \
                        memcpy(w4, wv[k], sizeof w4);                                      \
                        const qwr_v4 b0 = { x0[k], x0[k], x0[k], x0[k] };                  \
                        const qwr_v4 b1 = { x1[k], x1[k], x1[k], x1[k] };                  \
                        a0[0] = a0[0] + b0 * w4[0]; a1[0] = a1[0] + b1 * w4[0];            \
                        a0[1] = a0[1] + b0 * w4[1]; a1[1] = a1[1] + b1 * w4[1];            \
                        a0[2] = a0[2] + b0 * w4[2]; a1[2] = a1[2] + b1 * w4[2];            \
                        a0[3] = a0[3] + b0 * w4[3]; a1[3] = a1[3] + b1 * w4[3];            \
                    }                                                                      \
                    memcpy(acc[r], a0, sizeof a0);                                         \
                    memcpy(acc[r1], a1, sizeof a1); /* r1 == r: the same chain, twice */  \
                }                                                                          \
            }                                                                              \
            for (int64_t r = 0; r < rb; r++)                                               \
                for (int s = 0; s < 16; s++) {                                             \
                    int64_t n = n0 + panel_row(IS_BF16, s);                                \
                    if (n < N) put(out + (m0 + r) * ldo + n, acc[r][s], bias, n, accumulate); \
                }                                                                          \
        }                                                                                  \
    }                                                                                      \
}

QWR_MATMUL_PANEL(qwr_matmul_f32_panel, float, ld_f32, 0)
QWR_MATMUL_PANEL(qwr_matmul_bf16_panel, uint16_t, ld_bf16, 1)

void qwr_to_f32(qwi_dtype dt, const void *src, int64_t n, float *dst) {
    if (dt == QWI_DTYPE_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
    } else if (dt == QWI_DTYPE_BF16) {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = ld_bf16(s, i);
    } else {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = qwi_f16_to_f32(s[i]);
    }
}

QWR_ISA_CLONES void qwr_rmsnorm(const float *x, const float *w, int64_t n, float eps, float *out) {
    float acc[L] = {0};
    int64_t k = 0;
    for (; k + L <= n; k += L)
        for (int j = 0; j < L; j++) acc[j] += x[k + j] * x[k + j];
    for (int j = 0; k + j < n; j++) acc[j] += x[k + j] * x[k + j];
    float ms = lanes_sum(acc) / (float)n;
    float r = 1.0f / sqrtf(ms + eps);
    /* (x * r) * w: Hugging Face normalises first, then scales by the weight.
     * By blocks of L through a local array: out may alias x, which kept
     * the compiler from vectorising the plain loop (a decode step runs
     * this for every q/k head of every row). Element-wise: the same bits. */
    int64_t i = 0;
    for (; i + L <= n; i += L) {
        float t[L];
        for (int j = 0; j < L; j++) t[j] = (x[i + j] * r) * w[i + j];
        for (int j = 0; j < L; j++) out[i + j] = t[j];
    }
    for (; i < n; i++) out[i] = (x[i] * r) * w[i];
}

void qwr_head_rmsnorm(float *x, int64_t nheads, int64_t head_dim, const float *w, float eps) {
    for (int64_t h = 0; h < nheads; h++) qwr_rmsnorm(x + h * head_dim, w, head_dim, eps, x + h * head_dim);
}

void qwr_rope_table(const double *inv_freq, int64_t half, int64_t pos, float *cos_out,
                    float *sin_out) {
    for (int64_t i = 0; i < half; i++) {
        double a = (double)pos * inv_freq[i];
        cos_out[i] = (float)cos(a);
        sin_out[i] = (float)sin(a);
    }
}

QWR_ISA_CLONES void qwr_rope_neox(float *x, int64_t nheads, int64_t head_dim, const float *cos_t,
                   const float *sin_t) {
    int64_t half = head_dim / 2;
    for (int64_t h = 0; h < nheads; h++) {
        float *a = x + h * head_dim, *b = a + half;
        for (int64_t i = 0; i < half; i++) {
            float x1 = a[i], x2 = b[i];
            a[i] = x1 * cos_t[i] - x2 * sin_t[i];
            b[i] = x2 * cos_t[i] + x1 * sin_t[i];
        }
    }
}

void qwr_silu_mul(const float *gate, const float *up, int64_t n, float *out) {
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void qwr_add(float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

void qwr_axpy(float *o, float s, const float *v, int64_t n) {
    for (int64_t i = 0; i < n; i++) o[i] += s * v[i];
}

void qwr_dot4(const float *a, const float *const b[4], int64_t n, float out[4]) {
    for (int i = 0; i < 4; i++) out[i] = qwr_dot(a, b[i], n);
}

void qwr_axpy4(float *o, const float s[4], const float *const v[4], int64_t n) {
    for (int i = 0; i < 4; i++) qwr_axpy(o, s[i], v[i], n);
}

void qwr_dot4x2(const float *a0, const float *a1, const float *const b[4], int64_t n,
                float out0[4], float out1[4]) {
    qwr_dot4(a0, b, n, out0);
    qwr_dot4(a1, b, n, out1);
}

void qwr_axpy4x2(float *o0, float *o1, const float s0[4], const float s1[4],
                 const float *const v[4], int64_t n) {
    qwr_axpy4(o0, s0, v, n);
    qwr_axpy4(o1, s1, v, n);
}

void qwr_embed_row(qwi_dtype dt, const void *table, int64_t row, int64_t n, float *out) {
    const char *base = (const char *)table + (size_t)row * (size_t)n * qwi_dtype_size(dt);
    qwr_to_f32(dt, base, n, out);
}

static const qwi_cpu_kernels generic = {
    .name = "generic",
    .matmul_f32 = qwr_matmul_f32,
    .matmul_bf16 = qwr_matmul_bf16,
    .matmul_f32_panel = qwr_matmul_f32_panel,
    .matmul_bf16_panel = qwr_matmul_bf16_panel,
    .matmul_pair = qwr_matmul_pair,
    .matmul_qf32 = qwr_matmul_qf32,
    .matmul_qpair = qwr_matmul_qpair,
    .matmul_q4i = qwr_matmul_q4i,
    .dot = qwr_dot,
    .axpy = qwr_axpy,
    .dot4 = qwr_dot4,
    .axpy4 = qwr_axpy4,
    .dot4x2 = qwr_dot4x2,
    .axpy4x2 = qwr_axpy4x2,
};

const qwi_cpu_kernels *qwi_cpu_kernels_generic(void) { return &generic; }

/* The ISA tables completed with their matmul_pair (the ISA files define
 * everything else), built once: the avx2 table takes the AVX2 emulation,
 * avx512 its zmm form (same arithmetic, same bits), avx512bf16 is the
 * avx512 table with vdpbf16ps. */
static qwi_cpu_kernels full_avx2, full_avx512, full_avx512bf16;
static bool have_avx2, have_avx512, have_avx512bf16;
static pthread_once_t full_once = PTHREAD_ONCE_INIT;

static void build_full(void) {
    const qwi_cpu_kernels *a2 = qwi_cpu_kernels_avx2(), *a5 = qwi_cpu_kernels_avx512();
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (a2) {
        full_avx2 = *a2;
        full_avx2.matmul_pair = qwi_bf16dot_matmul_avx2;
        full_avx2.matmul_pair_wide = qwi_bf16dot_matmul_avx2_wide;
        /* int4/int8 on AVX-VNNI where the core has it (Intel client cores
         * from Alder Lake on run this table: they have no AVX-512):
         * vpdpwssd for vpmaddwd + vpaddd, vpdpbusd for vpmaddubsw +
         * vpmaddwd + vpaddd; the same integer sums, so the same bits */
        if (qwi_cpu_has_avxvnni()) full_avx2.matmul_q4i = qwi_avxvnni_matmul_q4i;
        have_avx2 = true;
    }
    if (a5 && a2) {
        full_avx512 = *a5;
        full_avx512.matmul_pair = qwi_bf16dot_matmul_avx512;
        /* int4/int8: vpmaddwd on zmm needs AVX512BW (else the AVX2 kernel,
         * same bits); vpdpwssd where the CPU also has AVX512_VNNI (Cascade
         * Lake and Ice Lake Xeons have it without AVX512_BF16): one
         * instruction for vpmaddwd + vpaddd, exact integer sums either way.
         * On one Zen 4 thread (table forced, qw-qbench --k 1024 --n 3072)
         * int4 prefill ran 158 -> 203 GFLOP/s and its GEMV 33 -> 44 GB/s. */
        if (__builtin_cpu_supports("avx512bw")) {
            full_avx512.matmul_q4i = __builtin_cpu_supports("avx512vnni")
                                         ? qwi_avx512vnni_matmul_q4i
                                         : qwi_avx512_matmul_q4i;
            /* batch-1 int4 on split activation bytes (cpu/q4i.h): 4 vpdpbusd
             * where the int16 pairs take 4 vpdpwssd and 3 more shifts and
             * masks; without VNNI each byte dot is 3 instructions
             * (vpmaddubsw, vpmaddwd, vpaddd), no fewer than the pairs' */
            full_avx512.q4i_reads_split = __builtin_cpu_supports("avx512vnni");
        }
        have_avx512 = true;
        if (qwi_bf16dot_have_avx512bf16()) {
            full_avx512bf16 = full_avx512;
            full_avx512bf16.name = "avx512bf16";
            full_avx512bf16.matmul_pair = qwi_bf16dot_matmul_avx512bf16;
            full_avx512bf16.matmul_qpair = qwi_avx512bf16_matmul_qpair;
            /* its fp8 decode (M <= 2) through vpermi2b byte tables: same bits */
            if (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vbmi"))
                full_avx512bf16.matmul_qpair = qwi_avx512vbmi_matmul_qpair;
            have_avx512bf16 = true;
        }
    }
#else
    (void)a2;
    (void)a5;
#endif
}

/* The amx table: avx512bf16 (every CPU with AMX-BF16 has AVX512_BF16)
 * with the tile matmul_pair for bf16 weights, built apart from the others
 * because looking it up asks Linux for the process's AMX permission,
 * which a process that forces another table should not be asked for. The
 * int4/int8/fp8 matmuls stay avx512bf16's: their weights are decoded in
 * registers, which tiles cannot take without a trip through memory. */
static qwi_cpu_kernels full_amx;
static bool have_amx;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void build_amx(void) {
    pthread_once(&full_once, build_full);
    if (!have_avx512bf16 || !qwi_pair_amx_usable()) return;
    full_amx = full_avx512bf16;
    full_amx.name = "amx";
    full_amx.matmul_pair = qwi_pair_amx_matmul;
    full_amx.matmul_pair_wide = NULL;
    have_amx = true;
}

const qwi_cpu_kernels *qwi_cpu_kernels_by_name(const char *name) {
    if (!name) return NULL;
    pthread_once(&full_once, build_full);
    if (strcmp(name, "generic") == 0) return &generic;
    if (strcmp(name, "avx2") == 0) return have_avx2 ? &full_avx2 : NULL;
    if (strcmp(name, "avx512") == 0) return have_avx512 ? &full_avx512 : NULL;
    if (strcmp(name, "avx512bf16") == 0) return have_avx512bf16 ? &full_avx512bf16 : NULL;
    if (strcmp(name, "amx") == 0) {
        pthread_once(&amx_once, build_amx);
        return have_amx ? &full_amx : NULL;
    }
    return NULL;
}

const char *qwi_cpu_kernels_q4i_isa(const qwi_cpu_kernels *kt) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (kt->matmul_q4i == qwi_avxvnni_matmul_q4i) return "avx-vnni";
    if (kt->matmul_q4i == qwi_avxvnni_evex_matmul_q4i) return "avx-vnni (evex stand-in)";
    if (kt->matmul_q4i == qwi_avx512vnni_matmul_q4i) return "avx512-vnni";
    if (kt->matmul_q4i == qwi_avx512_matmul_q4i) return "avx512bw";
    if (kt->matmul_q4i == qwi_avx2_matmul_q4i) return "avx2";
#endif
    return "portable";
}

static const qwi_cpu_kernels *selected;
static pthread_once_t select_once = PTHREAD_ONCE_INIT;

static void select_table(void) {
    /* The override exists for benchmarks and for bisecting a numerical
     * difference between tables; it is read once, like the CPUID answer. */
    const qwi_cpu_kernels *t = qwi_cpu_kernels_by_name(getenv("QWINFER_CPU_KERNELS"));
    /* not "amx" until its kernel has run on a CPU with AMX, and been
     * timed there against this table: so far it has run over the C model
     * of the tiles (pair_amx_model.c) and on Bochs' emulated Sapphire
     * Rapids (tests/emulator), whose speed means nothing; where the CPU
     * has AMX the tests run it, and QWINFER_CPU_KERNELS=amx selects it */
    if (!t) t = qwi_cpu_kernels_by_name("avx512bf16");
    if (!t) t = qwi_cpu_kernels_by_name("avx512");
    if (!t) t = qwi_cpu_kernels_by_name("avx2");
    selected = t ? t : &generic;
}

const qwi_cpu_kernels *qwi_cpu_kernels_select(void) {
    pthread_once(&select_once, select_table);
    return selected;
}
