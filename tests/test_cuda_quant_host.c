/*
 * test_cuda_quant_host.c - the host side of the CUDA backend's quantized
 * linears and KV dtype, on machines without a GPU (the kernels themselves
 * are checked on a lent GPU by tests/gpu/check_quant.cu).
 *
 * pack_*: qwi_cuda_qpack_rows (cuda/quant_host.c) puts qw-makemodel
 * checkpoints of every format into cuda/quant.h's device layout; decoding
 * that layout as the kernels do (nibble 2j low, per-row scales and zeros,
 * e4m3 codes) must give qwi_qweight_get's value of every element exactly,
 * whatever the row chunking.
 * refuse_*: what the CUDA backend never supports (an f32 KV cache, fused
 * linears quantized differently; the fp8 cache is supported, see
 * test_cuda_kv_fp8_host.c) gives QW_ERR_UNSUPPORTED naming the
 * option or the linears, before any device is looked for.
 *
 * Only in builds with the CUDA backend (QW_HAVE_CUDA): cuda/ is linked only
 * then.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "qwinfer.h"
#include "util/testutil.h"

#ifdef QW_HAVE_CUDA
#include "../cuda/quant_host.h"
#include "backend.h"
#include "fp8.h"

/* Element (r, c) of rows packed from row r0, decoded as cuda/quant.cu does. */
static float decode(const qwi_qweight *w, const uint8_t *codes, const float *sc, const float *zp, int64_t r0,
                    int64_t r, int64_t c) {
    const int64_t G = qwi_qweight_groups(w), g = c / w->group_k;
    const size_t rb = qwi_cuda_qrow_bytes(w);
    const uint8_t *row = codes + (size_t)(r - r0) * rb;
    const float s = sc[(r - r0) * G + g];
    if (w->fmt == QWI_QFMT_E4M3) return qwi_e4m3_to_f32(row[c]) * s;
    const float code = w->fmt == QWI_QFMT_U4 ? (float)((row[c / 2] >> (4 * (c & 1))) & 15) : (float)row[c];
    return (code - zp[(r - r0) * G + g]) * s;
}

/* Every quantized linear of the model at dir, packed in chunks of `chunk`
 * rows, decodes to qwi_qweight_get exactly. Returns the linears checked. */
static int check_pack(const char *dir, qwi_qfmt want_fmt, int64_t chunk) {
    qwi_model *m = NULL;
    qw_status st = qwi_model_load(dir, &m);
    cr_assert_eq(st, QW_OK, "%s: %s", dir, qw_last_error());
    int checked = 0;
    for (int l = 0; l < m->cfg.num_layers; l++)
        for (int i = 0; i < QWI_LIN_COUNT; i++) {
            const qwi_qweight *w = &m->layers[l].quant[i];
            cr_assert_neq(w->method, QWI_QUANT_NONE, "layer %d linear %d not quantized", l, i);
            cr_assert_eq(w->fmt, want_fmt);
            const int64_t G = qwi_qweight_groups(w);
            uint8_t *codes = malloc((size_t)(chunk * w->k));
            float *sc = malloc((size_t)(chunk * G) * sizeof(float));
            float *zp = malloc((size_t)(chunk * G) * sizeof(float));
            cr_assert(codes && sc && zp);
            for (int64_t r0 = 0; r0 < w->n; r0 += chunk) {
                const int64_t r1 = r0 + chunk < w->n ? r0 + chunk : w->n;
                memset(codes, 0xa5, (size_t)(chunk * w->k));
                qwi_cuda_qpack_rows(w, r0, r1, codes, sc, zp);
                for (int64_t r = r0; r < r1; r++)
                    for (int64_t c = 0; c < w->k; c++) {
                        const float got = decode(w, codes, sc, zp, r0, r, c);
                        const float want = (float)qwi_qweight_get(w, r, c);
                        cr_assert(got == want, "layer %d linear %d (%lld, %lld): packed %.9g, qweight %.9g", l, i,
                                  (long long)r, (long long)c, got, want);
                    }
            }
            free(codes);
            free(sc);
            free(zp);
            checked++;
        }
    qwi_model_free(m);
    return checked;
}

Test(cuda_quant_host, pack_awq) {
    char *dir = qwt_model("cudaq-awq", "--shape tiny --dtype bf16 --seed 11 --quant awq --group-size 32");
    cr_assert_not_null(dir);
    cr_assert_eq(check_pack(dir, QWI_QFMT_U4, 5), 2 * QWI_LIN_COUNT);   /* 5: chunks end mid-tensor */
    free(dir);
}

Test(cuda_quant_host, pack_gptq4_asym_v1) {
    char *dir = qwt_model("cudaq-gptq4", "--shape tiny --dtype bf16 --seed 12 --quant gptq --bits 4 "
                                         "--group-size 32 --gptq-asym --gptq-format gptq");
    cr_assert_not_null(dir);
    cr_assert_eq(check_pack(dir, QWI_QFMT_U4, 7), 2 * QWI_LIN_COUNT);
    free(dir);
}

Test(cuda_quant_host, pack_gptq8) {
    char *dir = qwt_model("cudaq-gptq8", "--shape tiny --dtype bf16 --seed 13 --quant gptq --bits 8 "
                                         "--group-size -1 --gptq-format gptq_v2");
    cr_assert_not_null(dir);
    cr_assert_eq(check_pack(dir, QWI_QFMT_U8, 64), 2 * QWI_LIN_COUNT);
    free(dir);
}

Test(cuda_quant_host, pack_fp8_partial_blocks) {
    char *dir = qwt_model("cudaq-fp8", "--shape tiny --dtype bf16 --seed 14 --quant fp8 --fp8-block 48");
    cr_assert_not_null(dir);
    cr_assert_eq(check_pack(dir, QWI_QFMT_E4M3, 3), 2 * QWI_LIN_COUNT);
    free(dir);
}

static void refuse_kv(int32_t dtype, const char *name) {
    char *dir = qwt_model("cuda-host-tiny", "--shape tiny --dtype bf16 --seed 5");
    cr_assert_not_null(dir);
    qw_engine_options *o;
    cr_assert_eq(qw_engine_options_create(&o), QW_OK);
    cr_assert_eq(qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, dir), QW_OK);
    cr_assert_eq(qw_engine_options_set_string(o, QW_OPT_DEVICE, "cuda:0"), QW_OK);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_KV_CACHE_DTYPE, dtype), QW_OK);
    qw_engine *e = (qw_engine *)0x1;
    qw_status st = qw_engine_create(o, &e);
    qw_engine_options_destroy(o);
    cr_assert_eq(st, QW_ERR_UNSUPPORTED, "got %s (%s)", qw_status_string(st), qw_last_error());
    cr_assert_null(e);
    cr_assert(strstr(qw_last_error(), "QW_OPT_KV_CACHE_DTYPE") && strstr(qw_last_error(), name),
              "message \"%s\"", qw_last_error());
    free(dir);
}

Test(cuda_quant_host, refuse_kv_f32) { refuse_kv(QW_KV_CACHE_F32, "f32"); }

/* A one-layer model by hand (no tensors: the refusal comes before any
 * upload) with the tiny shape. */
static void hand_model(qwi_model *m, qwi_layer *layer) {
    memset(m, 0, sizeof *m);
    memset(layer, 0, sizeof *layer);
    m->cfg.hidden_size = 64;
    m->cfg.num_layers = 1;
    m->cfg.num_heads = 4;
    m->cfg.num_kv_heads = 2;
    m->cfg.head_dim = 16;
    m->cfg.intermediate_size = 128;
    m->cfg.vocab_size = 512;
    m->layers = layer;
}

static void set_quant(qwi_layer *L, int lin, int64_t n, int64_t k, int64_t group_k) {
    qwi_qweight *w = &L->quant[lin];
    w->method = QWI_QUANT_AWQ;
    w->fmt = QWI_QFMT_U4;
    w->n = n;
    w->k = k;
    w->group_k = group_k;
    w->group_n = 1;
}

static void refuse_model(const qwi_model *m, const char *a, const char *b) {
    qwi_backend_config bc = {.device_index = 0, .block_size = 16, .max_num_batched_tokens = 64, .max_num_seqs = 4,
                             .kv_cache_dtype = QW_KV_CACHE_BF16};
    qwi_backend *be = (qwi_backend *)0x1;
    cr_assert_eq(qwi_cuda_backend_create(m, &bc, &be), QW_ERR_UNSUPPORTED, "%s", qw_last_error());
    cr_assert_null(be);
    cr_assert(strstr(qw_last_error(), a) && strstr(qw_last_error(), b) && strstr(qw_last_error(), "layer 0"),
              "message \"%s\"", qw_last_error());
}

Test(cuda_quant_host, refuse_mixed_qkv) {
    qwi_model m;
    qwi_layer L;
    hand_model(&m, &L);
    set_quant(&L, QWI_LIN_Q, 64, 64, 32);   /* k_proj, v_proj left plain */
    refuse_model(&m, "q_proj", "k_proj");
}

Test(cuda_quant_host, refuse_gate_up_groups_differ) {
    qwi_model m;
    qwi_layer L;
    hand_model(&m, &L);
    set_quant(&L, QWI_LIN_GATE, 128, 64, 32);
    set_quant(&L, QWI_LIN_UP, 128, 64, 64);
    refuse_model(&m, "gate_proj", "up_proj");
}

#endif
