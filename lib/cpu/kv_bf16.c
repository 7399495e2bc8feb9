/*
 * kv_bf16.c - the portable bf16-KV attention kernels, the table choice and
 * the rounding (see kv_bf16.h).
 */
#include <string.h>

#include "cpu/kv_bf16.h"
#include "dtype.h"
#include "fp8.h"

static void g_axpy(float *o, float s, const uint16_t *v, int64_t n) {
    for (int64_t i = 0; i < n; i++) o[i] += s * qwi_bf16_to_f32(v[i]);
}

static void g_pv(float *const *o, const float *const *p, int32_t nq, const uint16_t *const *v,
                 int32_t n, int64_t hd) {
    for (int32_t i = 0; i < nq; i++)
        for (int32_t j = 0; j < n; j++) g_axpy(o[i], p[i][j], v[j], hd);
}

static void g_axpy4(float *o, const float s[4], const uint16_t *const v[4], int64_t n) {
    g_pv(&o, &s, 1, v, 4, n);
}

static void g_axpy4x2(float *o0, float *o1, const float s0[4], const float s1[4],
                      const uint16_t *const v[4], int64_t n) {
    float *o[2] = { o0, o1 };
    const float *s[2] = { s0, s1 };
    g_pv(o, s, 2, v, 4, n);
}

/* The exp contract's steps one float at a time, each product rounded
 * before its add (no FMA), so any C compiler gives these bits. */
float qwi_cpu_vexp_scalar(float x) {
    if (x != x) return x;
    if (x < QWI_VEXP_LO) return 0.0f;
    if (x > QWI_VEXP_HI) x = QWI_VEXP_HI;
    const float k = __builtin_rintf(x * QWI_VEXP_LOG2E);
    const float r = (x - k * QWI_VEXP_LN2_HI) - k * QWI_VEXP_LN2_LO;
    float p = QWI_VEXP_P0;
    p = p * r + QWI_VEXP_P1;
    p = p * r + QWI_VEXP_P2;
    p = p * r + QWI_VEXP_P3;
    p = p * r + QWI_VEXP_P4;
    p = p * r + QWI_VEXP_P5;
    const float y = (p * (r * r) + r) + 1.0f;
    const uint32_t u = (uint32_t)((int32_t)k + 127) << 23;
    float two_k;
    memcpy(&two_k, &u, 4);
    return y * two_k;
}

static void g_vexp(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = qwi_cpu_vexp_scalar(x[i]);
}

static float g_exp_sum(float *s, int32_t n, float *m) {
    float mx = *m;
    for (int32_t j = 0; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    float l = 0.0f;
    for (int32_t j = 0; j < n; j++) {
        s[j] = qwi_cpu_vexp_scalar(s[j] - mx);
        l += s[j];
    }
    *m = mx;
    return l;
}

/* d outer, positions inner: out[j] is still one multiply-then-add chain
 * over d in order (the loop over j only interleaves the chains). */
static void g_tscores(const float *q, int32_t nq, int64_t hd, const float *kt, int64_t ld,
                      int32_t n, float scale, float *out, int64_t out_ld) {
    for (int32_t h = 0; h < nq; h++) {
        const float *qh = q + (int64_t)h * hd;
        float *o = out + (int64_t)h * out_ld;
        for (int32_t j = 0; j < n; j++) o[j] = 0.0f;
        for (int64_t d = 0; d < hd; d++) {
            const float x = qh[d], *kr = kt + d * ld;
            for (int32_t j = 0; j < n; j++) o[j] = o[j] + x * kr[j];
        }
        for (int32_t j = 0; j < n; j++) o[j] = o[j] * scale;
    }
}

static void g_tscores_q(const float *const *q, float *const *out, int32_t nq, int64_t hd,
                        const float *kt, int64_t ld, int32_t n, float scale) {
    for (int32_t i = 0; i < nq; i++) g_tscores(q[i], 1, hd, kt, ld, n, scale, out[i], 0);
}

/* g_tscores' chain (o[j] = 0, then o[j] + q[d] * k, then * scale), the
 * K element read from its plane: any layout, plane_lanes 1. One body for
 * the bf16 (g_pscores_q) and e4m3 (g_pscores8_q) planes; WIDEN is exact. */
#define G_PSCORES(NAME, ELEM, WIDEN)                                                          \
    static void NAME(const float *const *q, float *const *out, int32_t nq, int64_t hd,       \
                     const ELEM *const *k, int64_t dstride, int32_t n, float scale) {        \
        for (int32_t i = 0; i < nq; i++) {                                                    \
            float *o = out[i];                                                                \
            for (int32_t j = 0; j < n; j++) o[j] = 0.0f;                                      \
            for (int64_t d = 0; d < hd; d++) {                                                \
                const float x = q[i][d];                                                      \
                for (int32_t j = 0; j < n; j++) o[j] = o[j] + x * WIDEN(k[j][d * dstride]);   \
            }                                                                                 \
            for (int32_t j = 0; j < n; j++) o[j] = o[j] * scale;                              \
        }                                                                                     \
    }
G_PSCORES(g_pscores_q, uint16_t, qwi_bf16_to_f32)
G_PSCORES(g_pscores8_q, uint8_t, qwi_e4m3_to_f32)
#undef G_PSCORES

static void g_scale(float *y, const float *x, float s, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * s;
}

static const qwi_cpu_kv_bf16_kernels generic = {
    .name = "generic",
    .axpy = g_axpy,
    .axpy4 = g_axpy4,
    .axpy4x2 = g_axpy4x2,
    .tscores = g_tscores,
    .transpose = qwi_cpu_kv_bf16_transpose,
    .tscores_q = g_tscores_q,
    .pscores_q = g_pscores_q,
    .pscores8_q = g_pscores8_q,
    .plane_lanes = 1,
    .pv = g_pv,
    .vexp = g_vexp,
    .exp_sum = g_exp_sum,
    .scale = g_scale,
    .dscores = qwr_kv_dscores,
    .dpv = qwr_kv_dpv,
};

const qwi_cpu_kv_bf16_kernels *qwi_cpu_kv_bf16_generic(void) { return &generic; }

const qwi_cpu_kv_bf16_kernels *qwi_cpu_kv_bf16_for(const qwi_cpu_kernels *kt) {
    const char *nm = kt && kt->name ? kt->name : "generic";
    if (strcmp(nm, "generic") == 0) return &generic;
    const qwi_cpu_kv_bf16_kernels *t = NULL;
    if (strcmp(nm, "avx512bf16") == 0) t = qwi_cpu_kv_bf16_avx512bf16();
    if (!t && strcmp(nm, "avx2") != 0) t = qwi_cpu_kv_bf16_avx512();
    if (!t) t = qwi_cpu_kv_bf16_avx2();
    return t ? t : &generic;
}

QWR_ISA_CLONES void qwi_cpu_kv_bf16_round(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = qwi_f32_to_bf16(src[i]);
}

void qwi_cpu_kv_bf16_transpose(const uint16_t *const *k, int32_t n, int64_t hd, int64_t dstride,
                               float *kt, int64_t ld) {
    for (int32_t j = 0; j < n; j++) {
        const uint16_t *kr = k[j];
        for (int64_t d = 0; d < hd; d++) kt[d * ld + j] = qwi_bf16_to_f32(kr[d * dstride]);
    }
}
