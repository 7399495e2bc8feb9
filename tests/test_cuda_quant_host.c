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
 * fp8_grid_*: the weight scale grid of the block-scaled FP8 GEMM
 * (cuda/fp8_block.h), gathered from packed rows in odd chunks across a
 * fused linear (q|k|v, gate|up): every element equals e4m3(code) times its
 * block's grid entry exactly, where the checkpoint's 128 x 128 blocks line
 * up with the fused rows; where they do not (k_proj and v_proj of 64 rows
 * each in one 128-row block), the gathering says so. fp8_block_shape and
 * fp8_gemm_mode: which linears qualify, and QWINFER_CUDA_FP8_GEMM's values
 * (an unknown one refused at create, before any device is looked for).
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
#include "../cuda/cuda_host.h"
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

/* qw_engine_create of the model at dir on "cuda:0" (kv_dtype: a
 * QW_OPT_KV_CACHE_DTYPE value, 0 to leave it unset); its status. */
static qw_status create_on_cuda0(const char *dir, int32_t kv_dtype, qw_engine **e) {
    qw_engine_options *o;
    cr_assert_eq(qw_engine_options_create(&o), QW_OK);
    cr_assert_eq(qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, dir), QW_OK);
    cr_assert_eq(qw_engine_options_set_string(o, QW_OPT_DEVICE, "cuda:0"), QW_OK);
    if (kv_dtype) cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_KV_CACHE_DTYPE, kv_dtype), QW_OK);
    qw_status st = qw_engine_create(o, e);
    qw_engine_options_destroy(o);
    return st;
}

/* The fused group of linears lins[0..nl) of layer 0 of the model at dir,
 * packed in chunks of 37 rows into a grid: returns what
 * qwi_cuda_fp8_grid_rows said; when true, checks every element against
 * the grid. */
static bool fp8_grid_group(const char *dir, const int *lins, int nl) {
    qwi_model *m = NULL;
    cr_assert_eq(qwi_model_load(dir, &m), QW_OK, "%s: %s", dir, qw_last_error());
    const qwi_qweight *w0 = &m->layers[0].quant[lins[0]];
    int64_t n = 0;
    for (int i = 0; i < nl; i++) n += m->layers[0].quant[lins[i]].n;
    const int64_t k = w0->k, G = qwi_qweight_groups(w0), ld = qwi_cuda_fp8_grid_ld(k);
    cr_assert(qwi_cuda_fp8_block_shape(w0->fmt, n, k, w0->group_k), "n %lld k %lld group %lld", (long long)n,
              (long long)k, (long long)w0->group_k);
    cr_assert_eq(ld % 4, 0);
    cr_assert(ld >= G && ld < G + 4);
    const int64_t chunk = 37;
    float *grid = calloc((size_t)(n / 128 * ld), sizeof(float));
    uint8_t *codes = malloc((size_t)(n * k));
    float *sc = malloc((size_t)(chunk * G) * sizeof(float));
    cr_assert(grid && codes && sc);
    bool ok = true;
    int64_t off = 0;
    for (int i = 0; i < nl && ok; i++) {
        const qwi_qweight *w = &m->layers[0].quant[lins[i]];
        for (int64_t r0 = 0; r0 < w->n && ok; r0 += chunk) {
            const int64_t r1 = r0 + chunk < w->n ? r0 + chunk : w->n;
            qwi_cuda_qpack_rows(w, r0, r1, codes + (off + r0) * k, sc, NULL);
            ok = qwi_cuda_fp8_grid_rows(grid, ld, off + r0, r1 - r0, sc, G);
        }
        off += w->n;
    }
    off = 0;
    for (int i = 0; i < nl && ok; i++) {
        const qwi_qweight *w = &m->layers[0].quant[lins[i]];
        for (int64_t r = 0; r < w->n; r++)
            for (int64_t c = 0; c < k; c++) {
                const float got = qwi_e4m3_to_f32(codes[(off + r) * k + c]) * grid[(off + r) / 128 * ld + c / 128];
                const float want = (float)qwi_qweight_get(w, r, c);
                cr_assert(got == want, "linear %d (%lld, %lld): grid %.9g, qweight %.9g", lins[i], (long long)r,
                          (long long)c, got, want);
            }
        off += w->n;
    }
    free(grid);
    free(codes);
    free(sc);
    qwi_model_free(m);
    return ok;
}

Test(cuda_quant_host, fp8_grid_aligned_blocks) {
    /* q 256, k 128, v 128 rows; gate|up 2 x 256; o 128 x 256; down 128 x 256 */
    char *dir = qwt_model("cudaq-fp8-128", "--shape tiny --dtype bf16 --seed 15 --quant fp8 --fp8-block 128 "
                                           "--hidden 128 --heads 4 --kv-heads 2 --head-dim 64 --intermediate 256");
    cr_assert_not_null(dir);
    const int qkv[3] = {QWI_LIN_Q, QWI_LIN_K, QWI_LIN_V}, gu[2] = {QWI_LIN_GATE, QWI_LIN_UP};
    const int o[1] = {QWI_LIN_O}, d[1] = {QWI_LIN_DOWN};
    cr_assert(fp8_grid_group(dir, qkv, 3));
    cr_assert(fp8_grid_group(dir, gu, 2));
    cr_assert(fp8_grid_group(dir, o, 1));
    cr_assert(fp8_grid_group(dir, d, 1));
    free(dir);
}

Test(cuda_quant_host, fp8_grid_unaligned_blocks) {
    /* head_dim 32: k_proj and v_proj have 64 rows each, so the fused
     * rows 128..255 hold two checkpoint blocks with their own scales (f32
     * scales: bf16 ones of two random blocks are often equal, and then
     * the grid is right after all) */
    char *dir = qwt_model("cudaq-fp8-128u", "--shape tiny --dtype f32 --seed 16 --quant fp8 --fp8-block 128 "
                                            "--hidden 128 --heads 4 --kv-heads 2 --head-dim 32 --intermediate 256");
    cr_assert_not_null(dir);
    const int qkv[3] = {QWI_LIN_Q, QWI_LIN_K, QWI_LIN_V}, o[1] = {QWI_LIN_O};
    cr_assert(!fp8_grid_group(dir, qkv, 3));
    cr_assert(fp8_grid_group(dir, o, 1));
    free(dir);
}

Test(cuda_quant_host, fp8_block_shape) {
    cr_assert(qwi_cuda_fp8_block_shape(QWI_QFMT_E4M3, 4096, 1024, 128));
    cr_assert(!qwi_cuda_fp8_block_shape(QWI_QFMT_E4M3, 4096, 1024, 64));    /* 64-wide blocks */
    cr_assert(!qwi_cuda_fp8_block_shape(QWI_QFMT_E4M3, 4160, 1024, 128));   /* n not whole blocks */
    cr_assert(!qwi_cuda_fp8_block_shape(QWI_QFMT_E4M3, 4096, 1000, 128));   /* k not whole blocks */
    cr_assert(!qwi_cuda_fp8_block_shape(QWI_QFMT_U4, 4096, 1024, 128));
    cr_assert_eq(qwi_cuda_fp8_grid_ld(128), 4);
    cr_assert_eq(qwi_cuda_fp8_grid_ld(1024), 8);
    cr_assert_eq(qwi_cuda_fp8_grid_ld(1152), 12);
}

Test(cuda_quant_host, fp8_gemm_mode) {
    bool on = false;
    cr_assert_eq(qwi_cuda_fp8_gemm_mode(NULL, &on), QW_OK);
    cr_assert(on);
    cr_assert_eq(qwi_cuda_fp8_gemm_mode("", &on), QW_OK);
    cr_assert(on);
    cr_assert_eq(qwi_cuda_fp8_gemm_mode("auto", &on), QW_OK);
    cr_assert(on);
    cr_assert_eq(qwi_cuda_fp8_gemm_mode("dequant", &on), QW_OK);
    cr_assert(!on);
    cr_assert_eq(qwi_cuda_fp8_gemm_mode("block", &on), QW_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(qw_last_error(), "QWINFER_CUDA_FP8_GEMM") && strstr(qw_last_error(), "dequant"), "%s",
              qw_last_error());
    /* through qw_engine_create: refused before any device is looked for */
    char *dir = qwt_model("cuda-host-tiny", "--shape tiny --dtype bf16 --seed 5");
    cr_assert_not_null(dir);
    setenv("QWINFER_CUDA_FP8_GEMM", "Dequant", 1);
    qw_engine *e = (qw_engine *)0x1;
    qw_status st = create_on_cuda0(dir, 0, &e);
    unsetenv("QWINFER_CUDA_FP8_GEMM");
    cr_assert_eq(st, QW_ERR_INVALID_ARGUMENT, "got %s (%s)", qw_status_string(st), qw_last_error());
    cr_assert_null(e);
    cr_assert(strstr(qw_last_error(), "QWINFER_CUDA_FP8_GEMM"), "%s", qw_last_error());
    free(dir);
}

static void refuse_kv(int32_t dtype, const char *name) {
    char *dir = qwt_model("cuda-host-tiny", "--shape tiny --dtype bf16 --seed 5");
    cr_assert_not_null(dir);
    qw_engine *e = (qw_engine *)0x1;
    qw_status st = create_on_cuda0(dir, dtype, &e);
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
