/*
 * kv_bf16.c - the portable bf16-KV attention kernels, the table choice and
 * the rounding (see kv_bf16.h).
 */
#include <string.h>

#include "cpu/kv_bf16.h"
#include "dtype.h"

#define L 8

static void g_axpy(float *o, float s, const uint16_t *v, int64_t n) {
    for (int64_t i = 0; i < n; i++) o[i] += s * qwi_bf16_to_f32(v[i]);
}

static void g_axpy4(float *o, const float s[4], const uint16_t *const v[4], int64_t n) {
    for (int i = 0; i < 4; i++) g_axpy(o, s[i], v[i], n);
}

static void g_axpy4x2(float *o0, float *o1, const float s0[4], const float s1[4],
                      const uint16_t *const v[4], int64_t n) {
    g_axpy4(o0, s0, v, n);
    g_axpy4(o1, s1, v, n);
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

static const qwi_cpu_kv_bf16_kernels generic = {
    .name = "generic",
    .axpy = g_axpy,
    .axpy4 = g_axpy4,
    .axpy4x2 = g_axpy4x2,
    .tscores = g_tscores,
    .transpose = qwi_cpu_kv_bf16_transpose,
};

const qwi_cpu_kv_bf16_kernels *qwi_cpu_kv_bf16_generic(void) { return &generic; }

const qwi_cpu_kv_bf16_kernels *qwi_cpu_kv_bf16_for(const qwi_cpu_kernels *kt) {
    const char *nm = kt && kt->name ? kt->name : "generic";
    if (strcmp(nm, "generic") == 0) return &generic;
    const qwi_cpu_kv_bf16_kernels *t = NULL;
    if (strcmp(nm, "avx2") != 0) t = qwi_cpu_kv_bf16_avx512();
    if (!t) t = qwi_cpu_kv_bf16_avx2();
    return t ? t : &generic;
}

void qwi_cpu_kv_bf16_round(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = qwi_f32_to_bf16(src[i]);
}

void qwi_cpu_kv_bf16_transpose(const uint16_t *const *k, int32_t n, int64_t hd, float *kt,
                               int64_t ld) {
    for (int32_t j = 0; j < n; j++) {
        const uint16_t *kr = k[j];
        for (int64_t d = 0; d < hd; d++) kt[d * ld + j] = qwi_bf16_to_f32(kr[d]);
    }
}
