/*
 * kv_fp8.c - the portable fp8-KV attention kernels, the table choice and
 * the write rounding (see kv_fp8.h).
 */
#include <stdlib.h>
#include <string.h>

#include "cpu/kv_fp8.h"
#include "fp8.h"

void qwi_cpu_kv_fp8_round(const float *src, uint8_t *dst, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) dst[i] = qwi_f32_to_e4m3(src[i] / scale);
}

void qwi_cpu_kv_fp8_transpose(const uint8_t *const *k, int32_t n, int64_t hd, int64_t dstride,
                              float *kt, int64_t ld) {
    for (int32_t j = 0; j < n; j++) {
        const uint8_t *kr = k[j];
        for (int64_t d = 0; d < hd; d++) kt[d * ld + j] = qwi_e4m3_to_f32(kr[d * dstride]);
    }
}

void qwi_cpu_kv_fp8_to_bf16(const uint8_t *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float f = qwi_e4m3_to_f32(src[i]);
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        dst[i] = (uint16_t)(u >> 16);   /* the low half is zero: exact */
    }
}

/* Positions outer per accumulator: each o[i][e] is one multiply-then-add
 * chain over j in order. */
static void g_pv(float *const *o, const float *const *p, int32_t nq, const uint8_t *const *v,
                 int32_t n, int64_t hd) {
    for (int32_t i = 0; i < nq; i++)
        for (int32_t j = 0; j < n; j++) {
            const float s = p[i][j];
            const uint8_t *vr = v[j];
            float *oi = o[i];
            for (int64_t e = 0; e < hd; e++) oi[e] = oi[e] + s * qwi_e4m3_to_f32(vr[e]);
        }
}

static const qwi_cpu_kv_fp8_kernels generic = {
    .name = "generic",
    .transpose = qwi_cpu_kv_fp8_transpose,
    .pv = g_pv,
    .to_bf16 = qwi_cpu_kv_fp8_to_bf16,
};

const qwi_cpu_kv_fp8_kernels *qwi_cpu_kv_fp8_generic(void) { return &generic; }

const qwi_cpu_kv_fp8_kernels *qwi_cpu_kv_fp8_for(const qwi_cpu_kernels *kt) {
    const char *nm = kt && kt->name ? kt->name : "generic";
    if (strcmp(nm, "generic") == 0) return &generic;
    /* the candidates for kt, preferred first */
    const qwi_cpu_kv_fp8_kernels *cand[3] = { NULL, NULL, NULL };
    if (strcmp(nm, "avx2") == 0) {
        cand[0] = qwi_cpu_kv_fp8_avx2();
    } else {
        cand[0] = qwi_cpu_kv_fp8_avx512vbmi();
        cand[1] = qwi_cpu_kv_fp8_avx512bw();
        cand[2] = qwi_cpu_kv_fp8_avx512();
    }
    const char *want = getenv("QWINFER_CPU_KV_FP8");
    if (want && strcmp(want, "generic") == 0) return &generic;
    for (int i = 0; want && i < 3; i++)
        if (cand[i] && strcmp(cand[i]->name, want) == 0) return cand[i];
    for (int i = 0; i < 3; i++)
        if (cand[i]) return cand[i];
    const qwi_cpu_kv_fp8_kernels *t = qwi_cpu_kv_fp8_avx2();
    return t ? t : &generic;
}
