/*
 * test_quant_load.c - quantized checkpoints at load (lib/quant_config.c,
 * lib/quant_load.c, the model.c hooks, the F8_E4M3/I32 dtypes).
 *
 * unpack_*: each format's packing is written here from its published
 * definition (AutoAWQ GEMM interleave, AutoGPTQ order, Qwen3-FP8 blocks)
 * over random codes, and qwi_qweight_unpack_rows / qwi_qweight_get must give
 * back exactly those codes, scales and zero points.
 * loads_*: qw-makemodel checkpoints of every format load, and every linear
 * dequantizes to within half a quantization step of the --quant none twin.
 * refuse_*: one malformed config key, tensor, shape or dtype each, through
 * qw_engine_create, with the status and the key/tensor named.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/reference_util.h"
#include "util/testutil.h"
#include "fp8.h"
#include "model.h"
#include "quant.h"
#include "safetensors.h"
#include "weights_check.h"

/* ---------------------------------------------------------------------------
 * In-memory tensors and the reference packers
 * ------------------------------------------------------------------------- */

static uint64_t rng_state;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static qwi_tensor mk_tensor(qwi_dtype dt, int64_t d0, int64_t d1) {
    qwi_tensor t;
    memset(&t, 0, sizeof t);
    t.name = "mem";
    t.file = "mem";
    t.dtype = dt;
    t.ndim = d1 < 0 ? 1 : 2;
    t.shape[0] = d0;
    t.shape[1] = d1 < 0 ? 0 : d1;
    t.nbytes = (size_t)(d0 * (d1 < 0 ? 1 : d1)) * qwi_dtype_size(dt);
    t.data = calloc(1, t.nbytes + 8);
    cr_assert(t.data);
    return t;
}

static void put32(const qwi_tensor *t, int64_t i, uint32_t v) {
    uint32_t u;
    memcpy(&u, (const uint8_t *)t->data + i * 4, 4);
    u |= v;
    memcpy((uint8_t *)t->data + i * 4, &u, 4);
}

/* A random finite, normal f16 scale (either sign) as its bit pattern. */
static uint16_t rnd_f16(void) {
    return (uint16_t)((rnd() & 0x8000u) | ((1 + rnd() % 30) << 10) | (rnd() & 0x3ffu));
}

/* AutoAWQ's GEMM interleave: nibble i of a word holds column order[i]. */
static const int awq_order[8] = {0, 2, 4, 6, 1, 3, 5, 7};

typedef struct ref {
    uint8_t *code;   /* [n][k]  */
    float *scale;    /* [n][G]  */
    float *zero;     /* [n][G]  stored zero + offset */
} ref;

static void free_q(qwi_qweight *w, ref *r) {
    free((void *)w->qweight.data);
    free((void *)w->qzeros.data);
    free((void *)w->scales.data);
    free((void *)w->g_idx.data);
    free(r->code);
    free(r->scale);
    free(r->zero);
}

/* Random AWQ/GPTQ weight [n][k] with groups of gk: codes, f16 scales and
 * zeros packed as the format says; r gets the unpacked truth. */
static void build_int(qwi_qweight *w, ref *r, qwi_quant_method m, int bits, int64_t n,
                      int64_t k, int64_t gk, int32_t zoff) {
    memset(w, 0, sizeof *w);
    w->method = m;
    w->fmt = bits == 4 ? QWI_QFMT_U4 : QWI_QFMT_U8;
    w->n = n;
    w->k = k;
    w->group_k = gk;
    w->group_n = 1;
    w->zero_offset = zoff;
    int64_t G = k / gk, per = 32 / bits;
    unsigned mask = (1u << bits) - 1;
    r->code = malloc((size_t)(n * k));
    r->scale = malloc((size_t)(n * G) * sizeof(float));
    r->zero = malloc((size_t)(n * G) * sizeof(float));
    for (int64_t i = 0; i < n * k; i++) r->code[i] = (uint8_t)(rnd() & mask);
    w->scales = mk_tensor(QWI_DTYPE_F16, G, n);
    for (int64_t g = 0; g < G; g++)
        for (int64_t row = 0; row < n; row++) {
            uint16_t h = rnd_f16();
            memcpy((uint8_t *)w->scales.data + (g * n + row) * 2, &h, 2);
            r->scale[row * G + g] = qwi_f16_to_f32(h);
        }
    if (m == QWI_QUANT_AWQ) {
        w->qweight = mk_tensor(QWI_DTYPE_I32, k, n / 8);
        w->qzeros = mk_tensor(QWI_DTYPE_I32, G, n / 8);
        for (int64_t c = 0; c < k; c++)
            for (int64_t j = 0; j < n / 8; j++)
                for (int i = 0; i < 8; i++)
                    put32(&w->qweight, c * (n / 8) + j,
                          (uint32_t)r->code[(8 * j + awq_order[i]) * k + c] << (4 * i));
        for (int64_t g = 0; g < G; g++)
            for (int64_t j = 0; j < n / 8; j++)
                for (int i = 0; i < 8; i++) {
                    unsigned z = rnd() & 15u;
                    put32(&w->qzeros, g * (n / 8) + j, (uint32_t)z << (4 * i));
                    r->zero[(8 * j + awq_order[i]) * G + g] = (float)((int)z + zoff);
                }
    } else {
        w->qweight = mk_tensor(QWI_DTYPE_I32, k / per, n);
        w->qzeros = mk_tensor(QWI_DTYPE_I32, G, n / per);
        for (int64_t wd = 0; wd < k / per; wd++)
            for (int64_t row = 0; row < n; row++)
                for (int i = 0; i < per; i++)
                    put32(&w->qweight, wd * n + row,
                          (uint32_t)r->code[row * k + wd * per + i] << (bits * i));
        for (int64_t g = 0; g < G; g++)
            for (int64_t row = 0; row < n; row++) {
                unsigned z = rnd() & mask;
                put32(&w->qzeros, g * (n / per) + row / per, (uint32_t)z << (bits * (row % per)));
                r->zero[row * G + g] = (float)((int)z + zoff);
            }
    }
}

/* Random FP8 weight [n][k] (no NaN codes) with (bn x bk) blocks and scales
 * of dtype sdt; partial last blocks when the sizes do not divide. */
static void build_fp8(qwi_qweight *w, ref *r, int64_t n, int64_t k, int64_t bn, int64_t bk,
                      qwi_dtype sdt) {
    memset(w, 0, sizeof *w);
    w->method = QWI_QUANT_FP8;
    w->fmt = QWI_QFMT_E4M3;
    w->n = n;
    w->k = k;
    w->group_k = bk;
    w->group_n = bn;
    int64_t G = (k + bk - 1) / bk, GN = (n + bn - 1) / bn;
    r->code = malloc((size_t)(n * k));
    r->scale = malloc((size_t)(n * G) * sizeof(float));
    r->zero = NULL;
    w->qweight = mk_tensor(QWI_DTYPE_F8_E4M3, n, k);
    for (int64_t i = 0; i < n * k; i++) {
        uint8_t b;
        do b = (uint8_t)rnd(); while (qwi_e4m3_is_nan(b));
        r->code[i] = b;
        ((uint8_t *)w->qweight.data)[i] = b;
    }
    w->scales = mk_tensor(sdt, GN, G);
    float *bs = malloc((size_t)(GN * G) * sizeof(float));
    for (int64_t i = 0; i < GN * G; i++) {
        if (sdt == QWI_DTYPE_F32) {
            float f = ldexpf((float)(1 + rnd() % 1000) / 1000.0f, -(int)(rnd() % 20));
            memcpy((uint8_t *)w->scales.data + i * 4, &f, 4);
            bs[i] = f;
        } else {
            uint16_t h = (uint16_t)(0x3000u + (rnd() & 0x0fffu)); /* positive normal bf16 */
            memcpy((uint8_t *)w->scales.data + i * 2, &h, 2);
            bs[i] = qwi_bf16_to_f32(h);
        }
    }
    for (int64_t row = 0; row < n; row++)
        for (int64_t g = 0; g < G; g++) r->scale[row * G + g] = bs[(row / bn) * G + g];
    free(bs);
}

/* Unpack rows [r0, r1) and compare with the truth, element by element, and
 * qwi_qweight_get with (code - zero) * scale. */
static void check_rows(const qwi_qweight *w, const ref *r, int64_t r0, int64_t r1) {
    int64_t k = w->k, G = qwi_qweight_groups(w), rows = r1 - r0;
    uint8_t *codes = malloc((size_t)(rows * k) + 1);
    float *sc = malloc((size_t)(rows * G) * sizeof(float) + 4);
    float *ze = malloc((size_t)(rows * G) * sizeof(float) + 4);
    memset(codes, 0xee, (size_t)(rows * k));
    qwi_qweight_unpack_rows(w, r0, r1, codes, sc, ze);
    for (int64_t row = r0; row < r1; row++)
        for (int64_t c = 0; c < k; c++) {
            int64_t g = c / w->group_k;
            uint8_t want = r->code[row * k + c];
            cr_assert_eq(codes[(row - r0) * k + c], want, "rows [%lld,%lld) code (%lld,%lld): %u != %u",
                         (long long)r0, (long long)r1, (long long)row, (long long)c,
                         codes[(row - r0) * k + c], want);
            float s = r->scale[row * G + g], z = r->zero ? r->zero[row * G + g] : 0.0f;
            cr_assert_eq(sc[(row - r0) * G + g], s, "scale (%lld,%lld)", (long long)row, (long long)g);
            cr_assert_eq(ze[(row - r0) * G + g], z, "zero (%lld,%lld): %g != %g", (long long)row,
                         (long long)g, ze[(row - r0) * G + g], z);
            double v = w->fmt == QWI_QFMT_E4M3 ? (double)qwi_e4m3_to_f32(want) * s
                                               : ((double)want - z) * s;
            cr_assert_eq(qwi_qweight_get(w, row, c), v, "get (%lld,%lld)", (long long)row,
                         (long long)c);
        }
    free(codes);
    free(sc);
    free(ze);
}

static void check_all_ranges(const qwi_qweight *w, const ref *r) {
    int64_t n = w->n;
    check_rows(w, r, 0, n);
    check_rows(w, r, 3, n - 5);   /* partial words at both ends */
    check_rows(w, r, 8, 16);
    check_rows(w, r, n - 1, n);
}

Test(unpack, awq_gemm_interleave) {
    rng_state = 0x1234567;
    qwi_qweight w;
    ref r;
    build_int(&w, &r, QWI_QUANT_AWQ, 4, 40, 20, 4, 0); /* k % 8 != 0: the column tail */
    cr_assert_eq(qwi_qweight_groups(&w), 5);
    check_all_ranges(&w, &r);
    free_q(&w, &r);
    build_int(&w, &r, QWI_QUANT_AWQ, 4, 64, 128, 32, 0);
    check_all_ranges(&w, &r);
    free_q(&w, &r);
}

Test(unpack, gptq4_v1_and_v2) {
    rng_state = 0x2345678;
    qwi_qweight w;
    ref r;
    build_int(&w, &r, QWI_QUANT_GPTQ, 4, 40, 32, 8, 1);
    check_all_ranges(&w, &r);
    free_q(&w, &r);
    build_int(&w, &r, QWI_QUANT_GPTQ, 4, 48, 64, 64, 0); /* one group per row (-1) */
    cr_assert_eq(qwi_qweight_groups(&w), 1);
    check_all_ranges(&w, &r);
    free_q(&w, &r);
}

Test(unpack, gptq8) {
    rng_state = 0x3456789;
    qwi_qweight w;
    ref r;
    build_int(&w, &r, QWI_QUANT_GPTQ, 8, 40, 20, 4, 1);
    check_all_ranges(&w, &r);
    free_q(&w, &r);
    build_int(&w, &r, QWI_QUANT_GPTQ, 8, 36, 128, 32, 0);
    check_all_ranges(&w, &r);
    free_q(&w, &r);
}

Test(unpack, fp8_blocks_partial) {
    rng_state = 0x456789a;
    qwi_qweight w;
    ref r;
    build_fp8(&w, &r, 37, 45, 8, 16, QWI_DTYPE_F32);
    cr_assert_eq(qwi_qweight_groups(&w), 3);
    check_all_ranges(&w, &r);
    /* zeros may be NULL for E4M3 */
    uint8_t codes[45];
    float sc[3];
    qwi_qweight_unpack_rows(&w, 36, 37, codes, sc, NULL);
    cr_assert_eq(memcmp(codes, r.code + 36 * 45, 45), 0);
    free_q(&w, &r);
    build_fp8(&w, &r, 64, 64, 32, 32, QWI_DTYPE_BF16);
    check_all_ranges(&w, &r);
    free_q(&w, &r);
}

/* The weight scan: an F8_E4M3 NaN byte (0x7f / 0xff) is found wherever it
 * sits; every other byte is finite; I32 tensors are never scanned. */
Test(unpack, weights_scan_f8_and_i32) {
    qwi_tensor t = mk_tensor(QWI_DTYPE_F8_E4M3, 3, 37);
    for (int i = 0; i < 111; i++) {
        uint8_t b = (uint8_t)(i * 7);
        ((uint8_t *)t.data)[i] = qwi_e4m3_is_nan(b) ? 0x7e : b;
    }
    cr_assert_eq(qwi_weights_first_nonfinite(&t), -1);
    for (int at = 0; at < 111; at += 5) {
        uint8_t keep = ((uint8_t *)t.data)[at];
        ((uint8_t *)t.data)[at] = at % 2 ? 0xff : 0x7f;
        cr_assert_eq(qwi_weights_first_nonfinite(&t), at);
        ((uint8_t *)t.data)[at] = keep;
    }
    ((uint8_t *)t.data)[5] = 0xfe; /* -448: finite */
    cr_assert_eq(qwi_weights_first_nonfinite(&t), -1);
    free((void *)t.data);
    qwi_tensor i32 = mk_tensor(QWI_DTYPE_I32, 8, 8);
    memset((void *)i32.data, 0xff, i32.nbytes); /* would be NaN as F32 */
    cr_assert_eq(qwi_weights_first_nonfinite(&i32), -1);
    free((void *)i32.data);
}

/* ---------------------------------------------------------------------------
 * Checkpoints from qw-makemodel against their --quant none twin
 * ------------------------------------------------------------------------- */

#define TWIN_ARGS "--shape tiny --dtype f32 --seed 61"

static const char *const lin_names[QWI_LIN_COUNT] = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};

static const qwi_tensor *lin_tensor(const qwi_layer *L, int i) {
    const qwi_tensor *t[QWI_LIN_COUNT] = {&L->q_proj, &L->k_proj, &L->v_proj, &L->o_proj,
                                          &L->gate_proj, &L->up_proj, &L->down_proj};
    return t[i];
}

static float ld_f32(const qwi_tensor *t, int64_t i) {
    float f;
    memcpy(&f, (const uint8_t *)t->data + i * 4, 4);
    return f;
}

/* Spacing of e4m3 values at magnitude a (the step of the interval holding a). */
static double e4m3_step(double a) {
    if (a < 0x1p-6) return 0x1p-9;
    int e;
    frexp(a, &e); /* a in [2^(e-1), 2^e) */
    return ldexp(1.0, e - 1 - 3);
}

/* The quantized linear w against its twin's float tensor tw (f32): every
 * element within half a code step (plus the scale's own storage rounding).
 * Adds each element's error in steps to *worst, *err_sum, *count. */
static void check_linear_vs_twin(const char *full, const char *what, int l, const qwi_qweight *w,
                                 const qwi_tensor *tw, double *worst, double *err_sum,
                                 int64_t *count) {
    cr_assert(w->n == tw->shape[0] && w->k == tw->shape[1], "%s: layer %d %s: shape", full, l, what);
    int64_t n = w->n, k = w->k, G = qwi_qweight_groups(w);
    uint8_t *codes = malloc((size_t)(n * k));
    float *sc = malloc((size_t)(n * G) * sizeof(float));
    float *ze = malloc((size_t)(n * G) * sizeof(float));
    qwi_qweight_unpack_rows(w, 0, n, codes, sc, ze);
    for (int64_t r = 0; r < n; r++)
        for (int64_t c = 0; c < k; c++) {
            double want = ld_f32(tw, r * k + c);
            double got = qwi_qweight_get(w, r, c);
            float s = sc[r * G + c / w->group_k];
            double step = w->fmt == QWI_QFMT_E4M3
                              ? e4m3_step(fmax(fabs(want / s), fabs(got / s))) * fabs(s)
                              : fabs(s);
            double err = fabs(got - want);
            /* The quantizers round to the nearest code with the
             * exact scale, then store the scale in f16 (AWQ,
             * GPTQ) or bf16/f32 (FP8): that rounding moves a
             * value by up to |value| * half an ulp of the scale. */
            double srel = w->scales.dtype == QWI_DTYPE_F16    ? 0x1p-11
                          : w->scales.dtype == QWI_DTYPE_BF16 ? 0x1p-8
                                                              : 0x1p-24;
            cr_assert(err <= 0.5 * step + srel * fmax(fabs(got), fabs(want)) + 1e-6 * fabs(want) + 1e-30,
                      "%s layer %d %s (%lld,%lld): %.9g vs twin %.9g, step %.9g", full,
                      l, what, (long long)r, (long long)c, got, want, step);
            *worst = fmax(*worst, err / step);
            *err_sum += err / step;
            (*count)++;
        }
    free(codes);
    free(sc);
    free(ze);
}

/* The checkpoint qw-makemodel writes for args against its --quant none
 * twin: every linear (and with --gptq-lm-head the head, whose twin is the
 * twin's lm_head or, tied, its embedding) is quantized by `method` and
 * dequantizes to within half a step of the twin's value. */
static void check_against_twin(const char *name, const char *args, qwi_quant_method method) {
    char full[512];
    snprintf(full, sizeof full, "%s %s", TWIN_ARGS, args);
    /* an untied checkpoint's twin is untied too (its own lm_head.weight) */
    const bool untied = strstr(args, "--untied") != NULL;
    char *qdir = qwt_model(name, full),
         *tdir = untied ? qwt_model("qload-twin-untied", TWIN_ARGS " --untied")
                        : qwt_model("qload-twin", TWIN_ARGS);
    cr_assert(qdir && tdir, "qw-makemodel failed for %s", full);
    qwi_model *q = NULL, *t = NULL;
    cr_assert_eq(qwi_model_load(qdir, &q), QW_OK, "%s: %s", full, qw_last_error());
    cr_assert_eq(qwi_model_load(tdir, &t), QW_OK, "%s", qw_last_error());
    cr_assert_eq(q->cfg.quant.method, method);
    double worst = 0, err_sum = 0;
    int64_t count = 0;
    for (int l = 0; l < q->cfg.num_layers; l++)
        for (int i = 0; i < QWI_LIN_COUNT; i++) {
            const qwi_qweight *w = &q->layers[l].quant[i];
            const qwi_tensor *plain = lin_tensor(&q->layers[l], i);
            const qwi_tensor *tw = lin_tensor(&t->layers[l], i);
            cr_assert_eq(w->method, method, "layer %d %s", l, lin_names[i]);
            cr_assert_null(plain->data, "layer %d %s: plain tensor of a quantized linear", l,
                           lin_names[i]);
            cr_assert(plain->ndim == 2 && plain->shape[0] == tw->shape[0] &&
                      plain->shape[1] == tw->shape[1] && plain->dtype == QWI_DTYPE_F32);
            check_linear_vs_twin(full, lin_names[i], l, w, tw, &worst, &err_sum, &count);
        }
    if (strstr(args, "--gptq-lm-head")) {
        cr_assert(q->cfg.quant.lm_head && !q->cfg.tie_word_embeddings, "%s: config", full);
        cr_assert_eq(q->lm_quant.method, method);
        cr_assert_null(q->lm_head.data, "%s: plain tensor of a quantized head", full);
        cr_assert(q->lm_head.ndim == 2 && q->lm_head.shape[0] == q->cfg.vocab_size &&
                  q->lm_head.shape[1] == q->cfg.hidden_size && q->lm_head.dtype == QWI_DTYPE_F32);
        cr_assert_not_null(q->embed.data, "%s: the embedding stays float", full);
        check_linear_vs_twin(full, "lm_head", -1, &q->lm_quant, &t->lm_head, &worst, &err_sum, &count);
    } else {
        cr_assert_eq(q->lm_quant.method, QWI_QUANT_NONE);
        cr_assert_not_null(q->lm_head.data);
    }
    /* Round to nearest spreads the error over [0, step/2]: a loader that
     * read every code right but a quantizer that never rounded would not. */
    cr_log_info("%s: worst error %.3f steps, mean %.3f steps", full, worst, err_sum / count);
    cr_assert(count > 0 && err_sum / count < 0.35, "%s: mean error %.3f steps", full,
              err_sum / count);
    qwi_model_free(q);
    qwi_model_free(t);
    free(qdir);
    free(tdir);
}

Test(loads, fp8_blocks) {
    check_against_twin("qload-fp8", "--quant fp8 --fp8-block 32", QWI_QUANT_FP8);
}
Test(loads, fp8_partial_blocks) {
    /* tiny's k = 64/128 and n = 32..128 are not multiples of 48 */
    check_against_twin("qload-fp8-48", "--quant fp8 --fp8-block 48", QWI_QUANT_FP8);
}
Test(loads, awq) { check_against_twin("qload-awq", "--quant awq --group-size 32", QWI_QUANT_AWQ); }
Test(loads, gptq4_sym_v1) {
    check_against_twin("qload-gptq4", "--quant gptq --bits 4 --group-size 32", QWI_QUANT_GPTQ);
}
Test(loads, gptq4_asym_v2) {
    check_against_twin("qload-gptq4-v2", "--quant gptq --bits 4 --group-size 16 --gptq-asym "
                       "--gptq-format gptq_v2", QWI_QUANT_GPTQ);
}
Test(loads, gptq4_asym_v1) {
    check_against_twin("qload-gptq4-v1a", "--quant gptq --bits 4 --group-size 32 --gptq-asym",
                       QWI_QUANT_GPTQ);
}
Test(loads, gptq8_per_row) {
    check_against_twin("qload-gptq8", "--quant gptq --bits 8 --group-size -1", QWI_QUANT_GPTQ);
}
Test(loads, gptq4_lm_head_of_a_tied_shape) {
    /* tiny is tied: the head is its embedding quantized, the config untied */
    check_against_twin("qload-gptq4-head", "--quant gptq --bits 4 --group-size 32 --gptq-lm-head",
                       QWI_QUANT_GPTQ);
}
Test(loads, gptq8_lm_head_untied) {
    check_against_twin("qload-gptq8-head", "--untied --quant gptq --bits 8 --group-size 16 "
                       "--gptq-lm-head", QWI_QUANT_GPTQ);
}

/* ---------------------------------------------------------------------------
 * Editing a checkpoint copy: config keys and safetensors header entries
 * ------------------------------------------------------------------------- */

/* A private copy of generated model `name` (args) to edit. */
static char *copy_model(const char *name, const char *args) {
    char full[512];
    snprintf(full, sizeof full, "--shape tiny --dtype bf16 --seed 62 %s", args);
    char *src = qwt_model(name, full);
    cr_assert(src, "qw-makemodel %s failed", full);
    char *dst = qwt_tmpdir(name);
    cr_assert(dst);
    cr_assert_eq(qwt_system("cp '%s'/* '%s'/", src, dst), 0);
    free(src);
    return dst;
}

/* Set quantization_config.<key> to v (NULL: remove the key; key NULL: set
 * the whole quantization_config to v). Steals v. */
static void cfg_set(const char *dir, const char *key, json_t *v) {
    char path[8300];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *root = json_load_file(path, 0, NULL);
    cr_assert(root);
    if (!key) {
        if (v) json_object_set_new(root, "quantization_config", v);
        else json_object_del(root, "quantization_config");
    } else {
        json_t *q = json_object_get(root, "quantization_config");
        cr_assert(json_is_object(q));
        if (v) json_object_set_new(q, key, v);
        else json_object_del(q, key);
    }
    cr_assert_eq(json_dump_file(root, path, JSON_INDENT(2)), 0);
    json_decref(root);
}

/* The safetensors file of dir as its header (JSON) and data section. */
typedef struct stfile {
    json_t *hdr;
    uint8_t *data;
    size_t data_len;
} stfile;

static stfile st_read(const char *dir) {
    char path[8300];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    size_t len = 0;
    uint8_t *buf = qwt_read_file(path, &len);
    cr_assert(buf && len >= 8);
    uint64_t hl;
    memcpy(&hl, buf, 8);
    stfile f;
    f.hdr = json_loadb((const char *)buf + 8, (size_t)hl, 0, NULL);
    cr_assert(f.hdr);
    f.data_len = len - 8 - (size_t)hl;
    f.data = malloc(f.data_len + 1);
    memcpy(f.data, buf + 8 + hl, f.data_len);
    free(buf);
    return f;
}

static void st_write(const char *dir, stfile *f) {
    char *h = json_dumps(f->hdr, JSON_COMPACT);
    size_t hl = strlen(h), padded = (hl + 7) / 8 * 8;
    size_t total = 8 + padded + f->data_len;
    uint8_t *buf = malloc(total);
    uint64_t l64 = padded;
    memcpy(buf, &l64, 8);
    memcpy(buf + 8, h, hl);
    memset(buf + 8 + hl, ' ', padded - hl);
    memcpy(buf + 8 + padded, f->data, f->data_len);
    char path[8300];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    cr_assert_eq(qwt_write_file(path, buf, total), 0);
    free(buf);
    free(h);
    json_decref(f->hdr);
    free(f->data);
}

/* Rename tensor `from` to `to` (to NULL: "<from>.gone", i.e. missing). */
static void st_rename(const char *dir, const char *from) {
    stfile f = st_read(dir);
    json_t *e = json_object_get(f.hdr, from);
    cr_assert(e, "no tensor %s", from);
    char to[256];
    snprintf(to, sizeof to, "%s_gone", from);
    json_object_set(f.hdr, to, e);
    json_object_del(f.hdr, from);
    st_write(dir, &f);
}

/* Give tensor `name` dtype dt and shape [d0] or [d0, d1] (the byte count
 * must stay the same: the header stays valid, only its meaning changes). */
static void st_retype(const char *dir, const char *name, const char *dt, int64_t d0, int64_t d1) {
    stfile f = st_read(dir);
    json_t *e = json_object_get(f.hdr, name);
    cr_assert(e, "no tensor %s", name);
    json_object_set_new(e, "dtype", json_string(dt));
    json_object_set_new(e, "shape", d1 < 0 ? json_pack("[I]", (json_int_t)d0)
                                          : json_pack("[I,I]", (json_int_t)d0, (json_int_t)d1));
    st_write(dir, &f);
}

/* Rewrite f's data section compactly in file order (the loader refuses
 * gaps, which dropping tensors leaves). */
static void st_compact(stfile *f) {
    const char *key;
    json_t *v;
    uint8_t *nd = malloc(f->data_len + 1);
    size_t at = 0, cnt = json_object_size(f->hdr), ne = 0;
    json_t **ents = calloc(cnt + 1, sizeof *ents);
    json_object_foreach(f->hdr, key, v) if (json_is_object(v) && json_object_get(v, "data_offsets"))
        ents[ne++] = v;
    for (size_t a = 0; a < ne; a++)
        for (size_t b = a + 1; b < ne; b++) {
            json_int_t oa = json_integer_value(json_array_get(json_object_get(ents[a], "data_offsets"), 0));
            json_int_t ob = json_integer_value(json_array_get(json_object_get(ents[b], "data_offsets"), 0));
            if (ob < oa) { json_t *t = ents[a]; ents[a] = ents[b]; ents[b] = t; }
        }
    for (size_t a = 0; a < ne; a++) {
        json_t *off = json_object_get(ents[a], "data_offsets");
        size_t s0 = (size_t)json_integer_value(json_array_get(off, 0));
        size_t s1 = (size_t)json_integer_value(json_array_get(off, 1));
        memcpy(nd + at, f->data + s0, s1 - s0);
        json_object_set_new(ents[a], "data_offsets", json_pack("[I,I]", (json_int_t)at, (json_int_t)(at + s1 - s0)));
        at += s1 - s0;
    }
    free(ents);
    free(f->data);
    f->data = nd;
    f->data_len = at;
}

/* dst's safetensors with the tensors take[0..nt) copied from src's
 * (replacing any of the same name) and drop[0..nd) removed. */
static void st_transplant(const char *dst, const char *src, const char *const *take, size_t nt,
                          const char *const *drop, size_t nd) {
    stfile from = st_read(src), f = st_read(dst);
    for (size_t i = 0; i < nd; i++) json_object_del(f.hdr, drop[i]);
    for (size_t i = 0; i < nt; i++) {
        json_t *e = json_object_get(from.hdr, take[i]);
        cr_assert(e, "no tensor %s in %s", take[i], src);
        json_t *off = json_object_get(e, "data_offsets");
        size_t b0 = (size_t)json_integer_value(json_array_get(off, 0));
        size_t b1 = (size_t)json_integer_value(json_array_get(off, 1));
        f.data = realloc(f.data, f.data_len + (b1 - b0) + 1);
        memcpy(f.data + f.data_len, from.data + b0, b1 - b0);
        json_object_set_new(f.hdr, take[i],
                            json_pack("{s:O,s:O,s:[I,I]}", "dtype", json_object_get(e, "dtype"), "shape",
                                      json_object_get(e, "shape"), "data_offsets", (json_int_t)f.data_len,
                                      (json_int_t)(f.data_len + (b1 - b0))));
        f.data_len += b1 - b0;
    }
    json_decref(from.hdr);
    free(from.data);
    st_compact(&f);
    st_write(dst, &f);
}

/* qw_engine_create over dir must fail with st and a message holding each
 * of the (up to three) strings. */
static void expect_refused(const char *dir, qw_status want, const char *s1, const char *s2,
                           const char *s3) {
    qw_engine_options *o;
    cr_assert_eq(qw_engine_options_create(&o), QW_OK);
    qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, dir);
    qw_engine_options_set_int(o, QW_OPT_NUM_THREADS, 1);
    qw_engine *e = (qw_engine *)0x1;
    qw_status st = qw_engine_create(o, &e);
    qw_engine_options_destroy(o);
    const char *msg = qw_last_error();
    cr_assert_eq(st, want, "status %s, want %s: %s", qw_status_string(st), qw_status_string(want),
                 msg);
    cr_assert_null(e);
    const char *subs[3] = {s1, s2, s3};
    for (int i = 0; i < 3; i++)
        if (subs[i]) cr_assert(strstr(msg, subs[i]), "\"%s\" not in: %s", subs[i], msg);
}

#define AWQ_ARGS "--quant awq --group-size 32"
#define GPTQ_ARGS "--quant gptq --bits 4 --group-size 32"
#define FP8_ARGS "--quant fp8 --fp8-block 32"
#define L0 "model.layers.0."
#define Q0 L0 "self_attn.q_proj."
#define G1 "model.layers.1.mlp.gate_proj."

/* ---- config keys ---- */

Test(refuse, unknown_quant_method) {
    char *d = copy_model("qref-awq", AWQ_ARGS);
    cfg_set(d, "quant_method", json_string("bitsandbytes"));
    expect_refused(d, QW_ERR_UNSUPPORTED, "quant_method", "bitsandbytes", "config.json");
    free(d);
}

Test(refuse, quant_method_missing_or_not_string) {
    char *d = copy_model("qref-awq", AWQ_ARGS);
    cfg_set(d, "quant_method", json_integer(4));
    expect_refused(d, QW_ERR_FORMAT, "quant_method", "string", NULL);
    cfg_set(d, "quant_method", NULL);
    expect_refused(d, QW_ERR_FORMAT, "quant_method", "missing", NULL);
    cfg_set(d, NULL, json_string("awq"));
    expect_refused(d, QW_ERR_FORMAT, "quantization_config", "object", NULL);
    free(d);
}

Test(refuse, awq_bits_8) {
    char *d = copy_model("qref-awq", AWQ_ARGS);
    cfg_set(d, "bits", json_integer(8));
    expect_refused(d, QW_ERR_UNSUPPORTED, "bits", "8", "awq");
    free(d);
}

Test(refuse, gptq_bits_3) {
    char *d = copy_model("qref-gptq", GPTQ_ARGS);
    cfg_set(d, "bits", json_integer(3));
    expect_refused(d, QW_ERR_UNSUPPORTED, "bits", "3", "gptq");
    free(d);
}

Test(refuse, bits_wrong_type) {
    char *d = copy_model("qref-gptq", GPTQ_ARGS);
    cfg_set(d, "bits", json_string("4"));
    expect_refused(d, QW_ERR_FORMAT, "quantization_config.bits", "integer", NULL);
    free(d);
}

Test(refuse, group_size_not_dividing_k) {
    char *d = copy_model("qref-awq", AWQ_ARGS);
    cfg_set(d, "group_size", json_integer(48)); /* tiny: k = 64 and 128 */
    expect_refused(d, QW_ERR_UNSUPPORTED, "group_size 48", "model.layers.0.self_attn.q_proj",
                   NULL);
    free(d);
}

Test(refuse, group_size_odd) {
    char *d = copy_model("qref-gptq", GPTQ_ARGS);
    cfg_set(d, "group_size", json_integer(33));
    expect_refused(d, QW_ERR_UNSUPPORTED, "group_size 33", NULL, NULL);
    cfg_set(d, "group_size", json_integer(0));
    expect_refused(d, QW_ERR_UNSUPPORTED, "group_size 0", NULL, NULL);
    free(d);
}

Test(refuse, awq_version_gemv) {
    char *d = copy_model("qref-awq", AWQ_ARGS);
    cfg_set(d, "version", json_string("gemv"));
    expect_refused(d, QW_ERR_UNSUPPORTED, "version", "gemv", NULL);
    free(d);
}

Test(refuse, awq_version_upper_case_gemm_loads) {
    /* AutoAWQ's own quant_config.json spells it "GEMM" */
    char *d = copy_model("qref-awq", AWQ_ARGS);
    cfg_set(d, "version", json_string("GEMM"));
    qwi_model *m = NULL;
    cr_assert_eq(qwi_model_load(d, &m), QW_OK, "%s", qw_last_error());
    cr_assert_eq(m->layers[1].quant[QWI_LIN_DOWN].method, QWI_QUANT_AWQ);
    qwi_model_free(m);
    free(d);
}

Test(refuse, fp8_fmt_e5m2) {
    char *d = copy_model("qref-fp8", FP8_ARGS);
    cfg_set(d, "fmt", json_string("e5m2"));
    expect_refused(d, QW_ERR_UNSUPPORTED, "fmt", "e5m2", NULL);
    free(d);
}

Test(refuse, fp8_bad_weight_block_size) {
    char *d = copy_model("qref-fp8", FP8_ARGS);
    cfg_set(d, "weight_block_size", json_pack("[i,i]", 32, 0));
    expect_refused(d, QW_ERR_UNSUPPORTED, "weight_block_size", "[32, 0]", NULL);
    cfg_set(d, "weight_block_size", json_pack("[i,i]", 31, 32));
    expect_refused(d, QW_ERR_UNSUPPORTED, "weight_block_size", "[31, 32]", NULL);
    cfg_set(d, "weight_block_size", json_pack("[i]", 32));
    expect_refused(d, QW_ERR_FORMAT, "weight_block_size", "two integers", NULL);
    cfg_set(d, "weight_block_size", json_pack("[i,s]", 32, "32"));
    expect_refused(d, QW_ERR_FORMAT, "weight_block_size", NULL, NULL);
    cfg_set(d, "weight_block_size", NULL);
    expect_refused(d, QW_ERR_UNSUPPORTED, "weight_block_size", "missing", NULL);
    free(d);
}

Test(refuse, fp8_activation_scheme) {
    char *d = copy_model("qref-fp8", FP8_ARGS);
    cfg_set(d, "activation_scheme", json_string("per_token"));
    expect_refused(d, QW_ERR_UNSUPPORTED, "activation_scheme", "per_token", NULL);
    /* static: the activation scales are not read (activations stay float) */
    cfg_set(d, "activation_scheme", json_string("static"));
    qwi_model *m = NULL;
    cr_assert_eq(qwi_model_load(d, &m), QW_OK, "%s", qw_last_error());
    qwi_model_free(m);
    free(d);
}

Test(refuse, gptq_checkpoint_format_other) {
    char *d = copy_model("qref-gptq", GPTQ_ARGS);
    cfg_set(d, "checkpoint_format", json_string("marlin"));
    expect_refused(d, QW_ERR_UNSUPPORTED, "checkpoint_format", "marlin", NULL);
    free(d);
}

Test(refuse, gptq_lm_head_true_without_a_head) {
    /* tiny is tied and ships no head: lm_head: true has nothing to read */
    char *d = copy_model("qref-gptq", GPTQ_ARGS);
    cfg_set(d, "lm_head", json_true());
    expect_refused(d, QW_ERR_FORMAT, "lm_head is true", "lm_head.qweight", NULL);
    free(d);
}

Test(refuse, awq_and_fp8_lm_head_true) {
    /* neither AutoAWQ nor Qwen's FP8 quantizes the head */
    char *d = copy_model("qref-awq", AWQ_ARGS);
    cfg_set(d, "lm_head", json_true());
    expect_refused(d, QW_ERR_UNSUPPORTED, "lm_head", "awq", NULL);
    free(d);
    d = copy_model("qref-fp8", FP8_ARGS);
    cfg_set(d, "lm_head", json_true());
    expect_refused(d, QW_ERR_UNSUPPORTED, "lm_head", "fp8", NULL);
    free(d);
}

Test(refuse, gptq_lm_head_qweight_under_lm_head_false) {
    /* a quantized head the config does not announce is not silently dropped */
    char *d = copy_model("qref-gptq-head", GPTQ_ARGS " --gptq-lm-head");
    cfg_set(d, "lm_head", json_false());
    expect_refused(d, QW_ERR_FORMAT, "lm_head.qweight", "\"lm_head\": true", NULL);
    free(d);
}

Test(refuse, gptq_lm_head_parts) {
    char *d = copy_model("qref-gptq-head", GPTQ_ARGS " --gptq-lm-head");
    st_rename(d, "lm_head.scales");
    expect_refused(d, QW_ERR_FORMAT, "lm_head.scales missing", NULL, NULL);
    free(d);
    /* tiny: vocab 512, hidden 64: qweight [64/8, 512] I32 */
    d = copy_model("qref-gptq-head", GPTQ_ARGS " --gptq-lm-head");
    st_retype(d, "lm_head.qweight", "I32", 512, 8);
    expect_refused(d, QW_ERR_FORMAT, "lm_head.qweight", "[512, 8]", "[8, 512]");
    free(d);
    d = copy_model("qref-gptq-head", GPTQ_ARGS " --gptq-lm-head");
    st_retype(d, "lm_head.g_idx", "F32", 64, -1);
    expect_refused(d, QW_ERR_FORMAT, "lm_head.g_idx", NULL, NULL);
    free(d);
}

Test(loads, gptq_lm_head_under_a_tied_config) {
    /* a quantizer that kept tie_word_embeddings: true next to a quantized
     * head: what is shipped is used, not the embedding */
    char *d = copy_model("qref-gptq-head", GPTQ_ARGS " --gptq-lm-head");
    char path[8300];
    snprintf(path, sizeof path, "%s/config.json", d);
    json_t *root = json_load_file(path, 0, NULL);
    cr_assert(root);
    json_object_set_new(root, "tie_word_embeddings", json_true());
    cr_assert_eq(json_dump_file(root, path, JSON_INDENT(2)), 0);
    json_decref(root);
    qwi_model *m = NULL;
    cr_assert_eq(qwi_model_load(d, &m), QW_OK, "%s", qw_last_error());
    cr_assert(m->cfg.tie_word_embeddings);
    cr_assert_eq(m->lm_quant.method, QWI_QUANT_GPTQ);
    cr_assert_null(m->lm_head.data);
    cr_assert_str_eq(m->lm_head.name, "lm_head.qweight");
    qwi_model_free(m);
    free(d);
}

Test(loads, gptq_lm_head_shipped_plain) {
    /* lm_head: true with a float lm_head.weight: a head the quantizer left alone */
    char *d = copy_model("qref-gptq-tiedhead", GPTQ_ARGS " --tied-with-lm-head");
    cfg_set(d, "lm_head", json_true());
    qwi_model *m = NULL;
    cr_assert_eq(qwi_model_load(d, &m), QW_OK, "%s", qw_last_error());
    cr_assert_eq(m->lm_quant.method, QWI_QUANT_NONE);
    cr_assert_not_null(m->lm_head.data);
    cr_assert_str_eq(m->lm_head.name, "lm_head.weight");
    qwi_model_free(m);
    free(d);
}

Test(refuse, gptq_dynamic_skip_needs_a_float_weight) {
    /* "-:" leaves the module unquantized: its quantized tensors are not read */
    char *d = copy_model("qref-gptq", GPTQ_ARGS);
    cfg_set(d, "dynamic", json_pack("{s:{s:i}}", "-:.*down_proj.*", "bits", 8));
    expect_refused(d, QW_ERR_FORMAT, "dynamic leaves model.layers.0.mlp.down_proj unquantized",
                   "model.layers.0.mlp.down_proj.weight", NULL);
    free(d);
}

Test(refuse, gptq_dynamic_bad_rules) {
    char *d = copy_model("qref-gptq", GPTQ_ARGS);
    cfg_set(d, "dynamic", json_pack("{s:{}}", "+:model\\.layers\\.("));
    expect_refused(d, QW_ERR_FORMAT, "dynamic pattern", "model\\.layers\\.(", NULL);
    cfg_set(d, "dynamic", json_pack("{s:{s:i}}", "+:.*down_proj", "bits", 3));
    expect_refused(d, QW_ERR_UNSUPPORTED, "dynamic", "bits 3", NULL);
    /* the overridden fields are read and checked as the top level's are */
    cfg_set(d, "dynamic", json_pack("{s:{s:i}}", "+:.*down_proj", "group_size", 7));
    expect_refused(d, QW_ERR_UNSUPPORTED, "dynamic[\"+:.*down_proj\"].group_size 7", NULL, NULL);
    cfg_set(d, "dynamic", json_pack("{s:{s:s}}", "+:.*down_proj", "bits", "8"));
    expect_refused(d, QW_ERR_FORMAT, "dynamic[\"+:.*down_proj\"].bits must be an integer", NULL, NULL);
    cfg_set(d, "dynamic", json_pack("{s:{s:i}}", "+:.*down_proj", "sym", 1));
    expect_refused(d, QW_ERR_FORMAT, "dynamic[\"+:.*down_proj\"].sym must be true or false", NULL, NULL);
    cfg_set(d, "dynamic", json_pack("{s:{s:s}}", ".*down_proj", "pack_dtype", "int16"));
    expect_refused(d, QW_ERR_UNSUPPORTED, "dynamic", "pack_dtype", NULL);
    cfg_set(d, "dynamic", json_pack("{s:i}", ".*down_proj", 8));
    expect_refused(d, QW_ERR_FORMAT, "dynamic", "must be an object", NULL);
    cfg_set(d, "dynamic", json_pack("[s]", ".*"));
    expect_refused(d, QW_ERR_FORMAT, "dynamic must be an object", NULL, NULL);
    /* an override that the shipped tensors contradict: their shape says 4 bits */
    cfg_set(d, "dynamic", json_pack("{s:{s:i}}", "+:model\\.layers\\.1\\.mlp\\.gate", "bits", 8));
    expect_refused(d, QW_ERR_FORMAT, G1 "qweight", NULL, NULL);
    free(d);
}

/* GPTQModel mixed precision: layer 1's linears stored 8-bit (taken from
 * the 8-bit model of the same seed) under a dynamic rule, the rest 4-bit;
 * and a "-:" rule for layer 0's q_proj, shipped as the twin's float weight.
 * The loader reads each module by its rule, and the engine's logits match
 * the float64 reference, which applies the rules independently. */
Test(loads, gptq_dynamic_mixed_bits_and_a_skipped_module) {
    char *d = copy_model("qref-gptq", GPTQ_ARGS);
    char *g8 = qwt_model("qref-gptq8-s62", "--shape tiny --dtype bf16 --seed 62 --quant gptq --bits 8 "
                                           "--group-size 32");
    char *twin = qwt_model("qref-plain-twin", "--shape tiny --dtype bf16 --seed 62");
    cr_assert(g8 && twin);
    const char *lins[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
    const char *parts[] = {"qweight", "qzeros", "scales", "g_idx"};
    char names[28][96];
    const char *take[28];
    for (int i = 0; i < 7; i++)
        for (int p = 0; p < 4; p++) {
            snprintf(names[i * 4 + p], sizeof names[0], "model.layers.1.%s.%s", lins[i], parts[p]);
            take[i * 4 + p] = names[i * 4 + p];
        }
    st_transplant(d, g8, take, 28, NULL, 0);
    const char *qw = Q0 "weight";
    const char *qparts[] = {Q0 "qweight", Q0 "qzeros", Q0 "scales", Q0 "g_idx"};
    st_transplant(d, twin, &qw, 1, qparts, 4);
    json_t *dyn = json_object();
    json_object_set_new(dyn, "-:model\\.layers\\.0\\.self_attn\\.q_proj", json_object());
    json_object_set_new(dyn, "+:model\\.layers\\.1\\.", json_pack("{s:i,s:f}", "bits", 8, "damp_percent", 0.05));
    cfg_set(d, "dynamic", dyn);
    qwi_model *m = NULL;
    cr_assert_eq(qwi_model_load(d, &m), QW_OK, "%s", qw_last_error());
    cr_assert_eq(m->layers[0].quant[QWI_LIN_Q].method, QWI_QUANT_NONE);
    cr_assert_not_null(m->layers[0].q_proj.data);
    for (int i = 1; i < QWI_LIN_COUNT; i++) cr_assert_eq(m->layers[0].quant[i].fmt, QWI_QFMT_U4);
    for (int i = 0; i < QWI_LIN_COUNT; i++) cr_assert_eq(m->layers[1].quant[i].fmt, QWI_QFMT_U8, "linear %d", i);
    qwi_model_free(m);
    double err = qwt_compare_with_reference(d, QW_NUMERICS_EXACT, 17, 7, 4, 1e-3, 1e-6);
    cr_log_info("dynamic mixed bits: exact max rel error %.3g", err);
    cr_assert_lt(err, 1e-4, "exact: max relative error %.3g against the reference", err);
    free(g8);
    free(twin);
    free(d);
}

Test(refuse, gptq_desc_act_permuted_g_idx) {
    char *d = copy_model("qref-gptq-desc", GPTQ_ARGS " --gptq-desc-act");
    expect_refused(d, QW_ERR_UNSUPPORTED, "act-order", "desc_act=false", ".g_idx");
    free(d);
}

Test(refuse, gptq_desc_act_in_order_g_idx_loads) {
    /* desc_act with a g_idx that is c / group_size needs no permutation:
     * loads; without any g_idx it cannot be checked: refused */
    char *d = copy_model("qref-gptq", GPTQ_ARGS);
    cfg_set(d, "desc_act", json_true());
    qwi_model *m = NULL;
    cr_assert_eq(qwi_model_load(d, &m), QW_OK, "%s", qw_last_error());
    cr_assert_eq(m->cfg.quant.desc_act, true);
    cr_assert_eq(m->layers[1].quant[QWI_LIN_GATE].method, QWI_QUANT_GPTQ);
    qwi_model_free(m);
    st_rename(d, G1 "g_idx");
    expect_refused(d, QW_ERR_FORMAT, G1 "g_idx missing", NULL, NULL);
    free(d);
}

Test(refuse, gptq_g_idx_out_of_order_without_desc_act) {
    char *d = copy_model("qref-gptq", GPTQ_ARGS);
    stfile f = st_read(d);
    json_t *e = json_object_get(f.hdr, G1 "g_idx");
    size_t off = (size_t)json_integer_value(json_array_get(json_object_get(e, "data_offsets"), 0));
    int32_t v = 1; /* column 3 claims group 1 */
    memcpy(f.data + off + 3 * 4, &v, 4);
    st_write(d, &f);
    expect_refused(d, QW_ERR_FORMAT, G1 "g_idx", "g_idx[3] = 1", NULL);
    free(d);
}

/* ---- tensors missing ---- */

Test(refuse, awq_missing_qzeros) {
    char *d = copy_model("qref-awq", AWQ_ARGS);
    st_rename(d, Q0 "qzeros");
    expect_refused(d, QW_ERR_FORMAT, Q0 "qzeros missing", NULL, NULL);
    free(d);
}

Test(refuse, gptq_missing_scales) {
    char *d = copy_model("qref-gptq", GPTQ_ARGS);
    st_rename(d, G1 "scales");
    expect_refused(d, QW_ERR_FORMAT, G1 "scales missing", NULL, NULL);
    free(d);
}

Test(refuse, gptq_missing_qweight) {
    char *d = copy_model("qref-gptq", GPTQ_ARGS);
    st_rename(d, G1 "qweight");
    expect_refused(d, QW_ERR_FORMAT, G1 "qweight missing", NULL, NULL);
    free(d);
}

Test(refuse, fp8_weight_missing_scale_inv) {
    /* a quantized config, an F8_E4M3 weight, and no scale for it */
    char *d = copy_model("qref-fp8", FP8_ARGS);
    st_rename(d, Q0 "weight_scale_inv");
    expect_refused(d, QW_ERR_FORMAT, Q0 "weight_scale_inv missing", NULL, NULL);
    free(d);
}

Test(refuse, f8_weight_without_quant_config) {
    char *d = copy_model("qref-fp8", FP8_ARGS);
    cfg_set(d, NULL, NULL);
    expect_refused(d, QW_ERR_UNSUPPORTED, Q0 "weight", "F8_E4M3", "quantization_config");
    free(d);
}

/* ---- wrong shapes (the same bytes, another shape) ---- */

Test(refuse, awq_qweight_shape) {
    char *d = copy_model("qref-awq", AWQ_ARGS);
    st_retype(d, Q0 "qweight", "I32", 8, 64);
    expect_refused(d, QW_ERR_FORMAT, Q0 "qweight", "[8, 64]", "[64, 8]");
    free(d);
}

Test(refuse, awq_qzeros_shape) {
    char *d = copy_model("qref-awq", AWQ_ARGS);
    st_retype(d, Q0 "qzeros", "I32", 8, 2);
    expect_refused(d, QW_ERR_FORMAT, Q0 "qzeros", "[8, 2]", "[2, 8]");
    free(d);
}

Test(refuse, awq_scales_shape) {
    char *d = copy_model("qref-awq", AWQ_ARGS);
    st_retype(d, Q0 "scales", "F16", 64, 2);
    expect_refused(d, QW_ERR_FORMAT, Q0 "scales", "[64, 2]", "[2, 64]");
    free(d);
}

Test(refuse, gptq_qweight_shape) {
    char *d = copy_model("qref-gptq", GPTQ_ARGS);
    st_retype(d, G1 "qweight", "I32", 128, 8); /* [k/8, n] = [8, 128] */
    expect_refused(d, QW_ERR_FORMAT, G1 "qweight", "[128, 8]", "[8, 128]");
    free(d);
}

Test(refuse, gptq_qzeros_shape) {
    char *d = copy_model("qref-gptq", GPTQ_ARGS);
    st_retype(d, G1 "qzeros", "I32", 16, 2); /* [G, n/8] = [2, 16] */
    expect_refused(d, QW_ERR_FORMAT, G1 "qzeros", "[16, 2]", "[2, 16]");
    free(d);
}

Test(refuse, gptq_scales_shape) {
    char *d = copy_model("qref-gptq", GPTQ_ARGS);
    st_retype(d, G1 "scales", "F16", 256, -1);
    expect_refused(d, QW_ERR_FORMAT, G1 "scales", "[256]", "[2, 128]");
    free(d);
}

Test(refuse, gptq_g_idx_shape) {
    char *d = copy_model("qref-gptq", GPTQ_ARGS);
    st_retype(d, G1 "g_idx", "I32", 32, 2);
    expect_refused(d, QW_ERR_FORMAT, G1 "g_idx", "[32, 2]", "[64]");
    free(d);
}

Test(refuse, fp8_weight_shape) {
    char *d = copy_model("qref-fp8", FP8_ARGS);
    st_retype(d, G1 "weight", "F8_E4M3", 64, 128); /* gate_proj is [128, 64] */
    expect_refused(d, QW_ERR_FORMAT, G1 "weight", "[64, 128]", "[128, 64]");
    free(d);
}

Test(refuse, fp8_scale_inv_shape) {
    char *d = copy_model("qref-fp8", FP8_ARGS);
    st_retype(d, G1 "weight_scale_inv", "BF16", 2, 4); /* [ceil(128/32), ceil(64/32)] = [4, 2] */
    expect_refused(d, QW_ERR_FORMAT, G1 "weight_scale_inv", "[2, 4]", "[4, 2]");
    free(d);
}

/* ---- wrong dtypes (the same bytes, another dtype) ---- */

Test(refuse, awq_qweight_f32) {
    char *d = copy_model("qref-awq", AWQ_ARGS);
    st_retype(d, Q0 "qweight", "F32", 64, 8);
    expect_refused(d, QW_ERR_FORMAT, Q0 "qweight", "dtype F32", "expected I32");
    free(d);
}

Test(refuse, gptq_qzeros_f32) {
    char *d = copy_model("qref-gptq", GPTQ_ARGS);
    st_retype(d, G1 "qzeros", "F32", 2, 16);
    expect_refused(d, QW_ERR_FORMAT, G1 "qzeros", "dtype F32", "expected I32");
    free(d);
}

Test(refuse, gptq_g_idx_f32) {
    char *d = copy_model("qref-gptq", GPTQ_ARGS);
    st_retype(d, G1 "g_idx", "F32", 64, -1);
    expect_refused(d, QW_ERR_FORMAT, G1 "g_idx", "dtype F32", "expected I32");
    free(d);
}

Test(refuse, awq_scales_i32) {
    char *d = copy_model("qref-awq", AWQ_ARGS);
    st_retype(d, Q0 "scales", "I32", 2, 32);
    expect_refused(d, QW_ERR_FORMAT, Q0 "scales", "dtype I32", "F16");
    free(d);
}

Test(refuse, fp8_weight_i32) {
    char *d = copy_model("qref-fp8", FP8_ARGS);
    st_retype(d, G1 "weight", "I32", 128, 16);
    expect_refused(d, QW_ERR_FORMAT, G1 "weight", "dtype I32", "expected F8_E4M3");
    free(d);
}

Test(refuse, fp8_scale_inv_i32) {
    char *d = copy_model("qref-fp8", FP8_ARGS);
    st_retype(d, G1 "weight_scale_inv", "I32", 4, 1);
    expect_refused(d, QW_ERR_FORMAT, G1 "weight_scale_inv", "dtype I32", NULL);
    free(d);
}

Test(refuse, float_tensors_not_f8_or_i32) {
    /* embeddings and norms are never quantized: an F8/I32 one is refused by name */
    char *d = copy_model("qref-awq", AWQ_ARGS);
    st_retype(d, L0 "input_layernorm.weight", "I32", 32, -1); /* bf16 [64] */
    expect_refused(d, QW_ERR_UNSUPPORTED, L0 "input_layernorm.weight", "dtype I32", "float");
    free(d);
    d = copy_model("qref-awq", AWQ_ARGS);
    st_retype(d, "model.embed_tokens.weight", "F8_E4M3", 512, 128);
    expect_refused(d, QW_ERR_UNSUPPORTED, "model.embed_tokens.weight", "dtype F8_E4M3", NULL);
    free(d);
}

Test(refuse, fp8_nan_weight_found_by_scan) {
    char *d = copy_model("qref-fp8", FP8_ARGS);
    stfile f = st_read(d);
    json_t *e = json_object_get(f.hdr, G1 "weight");
    size_t off = (size_t)json_integer_value(json_array_get(json_object_get(e, "data_offsets"), 0));
    f.data[off + 70] = 0x7f;
    st_write(d, &f);
    expect_refused(d, QW_ERR_FORMAT, G1 "weight", "NaN", "[1, 6]");
    free(d);
}

Test(refuse, truncated_file) {
    char *d = copy_model("qref-gptq", GPTQ_ARGS);
    char path[8300];
    snprintf(path, sizeof path, "%s/model.safetensors", d);
    size_t len = 0;
    void *buf = qwt_read_file(path, &len);
    cr_assert(buf);
    cr_assert_eq(qwt_write_file(path, buf, len - 1000), 0);
    free(buf);
    qw_engine_options *o;
    cr_assert_eq(qw_engine_options_create(&o), QW_OK);
    qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, d);
    qw_engine *e = NULL;
    qw_status st = qw_engine_create(o, &e);
    qw_engine_options_destroy(o);
    cr_assert(st == QW_ERR_FORMAT || st == QW_ERR_IO, "%s", qw_status_string(st));
    cr_assert_null(e);
    cr_assert(strstr(qw_last_error(), "model.safetensors"), "%s", qw_last_error());
    free(d);
}

/* ---- a module the quantizer left alone ---- */

Test(loads, plain_module_in_quantized_checkpoint) {
    /* gptq checkpoint whose layer-0 q_proj ships as the float weight of the
     * twin (modules_to_not_convert): it loads as a plain linear, the rest
     * stay quantized. */
    char *d = copy_model("qref-gptq", GPTQ_ARGS);
    char *twin = qwt_model("qref-plain-twin", "--shape tiny --dtype bf16 --seed 62");
    cr_assert(twin);
    const char *qw = Q0 "weight";
    const char *qparts[] = {Q0 "qweight", Q0 "qzeros", Q0 "scales", Q0 "g_idx"};
    st_transplant(d, twin, &qw, 1, qparts, 4);
    qwi_model *m = NULL;
    cr_assert_eq(qwi_model_load(d, &m), QW_OK, "%s", qw_last_error());
    cr_assert_eq(m->layers[0].quant[QWI_LIN_Q].method, QWI_QUANT_NONE);
    cr_assert_not_null(m->layers[0].q_proj.data);
    cr_assert_eq(m->layers[0].q_proj.dtype, QWI_DTYPE_BF16);
    cr_assert_eq(m->layers[0].quant[QWI_LIN_K].method, QWI_QUANT_GPTQ);
    cr_assert_null(m->layers[0].k_proj.data);
    cr_assert_eq(m->layers[1].quant[QWI_LIN_Q].method, QWI_QUANT_GPTQ);
    qwi_model_free(m);
    free(twin);
    free(d);
}
