/*
 * test_makemodel_quant.c - qw-makemodel --quant writes checkpoints in the
 * published layouts (tensor names, dtypes, shapes, config.json's
 * quantization_config), holds its unquantized twin's weights (checked with
 * the independent float64 reader, tests/reference/qwen3_ref.py
 * --weights-vs), writes --kv-scale tensors, and refuses combinations a
 * format cannot store with a message naming the option.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"
#include "util/testutil.h"

#define TWIN "--shape tiny --dtype bf16 --seed 71"

static char *make(const char *name, const char *quant) {
    char args[512];
    snprintf(args, sizeof args, "%s %s", TWIN, quant);
    char *dir = qwt_model(name, args);
    cr_assert_not_null(dir, "qw-makemodel %s failed", args);
    return dir;
}

/* Largest max|W - W_twin| / max|W_twin| over the linears (the reference). */
static double weights_vs_twin(const char *dir) {
    char *twin = make("mq-twin", "");
    char *tmp = qwt_tmpdir("mq");
    char out[8300];
    snprintf(out, sizeof out, "%s/err.txt", tmp);
    int rc = qwt_system("python3 tests/reference/qwen3_ref.py --model '%s' --weights-vs '%s' > '%s'",
                        dir, twin, out);
    cr_assert_eq(rc, 0, "reference failed on %s", dir);
    char *txt = qwt_read_file(out, NULL);
    cr_assert_not_null(txt);
    double err = strtod(txt, NULL);
    free(txt);
    free(tmp);
    free(twin);
    return err;
}

/* The rounding of each format bounds the difference from the twin,
 * relative to max |w|: symmetric, half a step of a range of 2 max|w|
 * (4-bit 1/15, 8-bit 1/255); asymmetric, a whole step, since the rounded
 * zero point can push a group's end one step out of reach (2/15, 2/255);
 * e4m3 1/28 (half an ulp at 448 is 16); plus the f16/bf16 rounding of the
 * stored scale. A field unpacked at the wrong place is off by ~1. */
static void twin_within(const char *name, const char *quant, double bound) {
    char *dir = make(name, quant);
    double err = weights_vs_twin(dir);
    cr_log_info("%s: max |W - twin| / max |twin| = %.4g (bound %.4g)", quant, err, bound);
    cr_assert_lt(err, bound, "%s: dequantized weights %.4g from the twin's", quant, err);
    cr_assert_gt(err, 0, "%s: the weights were not quantized", quant);
    free(dir);
}

Test(makemodel_quant, twin_fp8) {
    twin_within("mq-fp8", "--quant fp8", 1.0 / 28 * 1.01);
    twin_within("mq-fp8-b32", "--quant fp8 --fp8-block 32", 1.0 / 28 * 1.01);
}

Test(makemodel_quant, twin_awq) { twin_within("mq-awq", "--quant awq --group-size 32", 2.0 / 15 * 1.01); }

Test(makemodel_quant, twin_gptq) {
    twin_within("mq-gptq4", "--quant gptq --group-size 32", 1.0 / 15 * 1.01);
    twin_within("mq-gptq4-row", "--quant gptq --group-size -1", 1.0 / 15 * 1.01);
    twin_within("mq-gptq8", "--quant gptq --bits 8 --group-size 32", 1.0 / 255 * 1.01);
    twin_within("mq-gptq8a", "--quant gptq --bits 8 --gptq-asym --group-size 32", 2.0 / 255 * 1.01);
    twin_within("mq-gptq4v2", "--quant gptq --gptq-format gptq_v2 --gptq-asym --group-size 32",
                2.0 / 15 * 1.01);
    twin_within("mq-gptq4da", "--quant gptq --gptq-desc-act --group-size 32", 1.0 / 15 * 1.01);
    /* the head too (tiny is tied: the twin's head is its embedding) */
    twin_within("mq-gptq4-head", "--quant gptq --group-size 32 --gptq-lm-head", 1.0 / 15 * 1.01);
}

static json_t *quant_config(const char *dir) {
    char path[8300];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *root = json_load_file(path, 0, NULL);
    cr_assert_not_null(root);
    json_t *q = json_incref(json_object_get(root, "quantization_config"));
    json_decref(root);
    return q;
}

static const qwi_tensor *expect(const qwi_st_set *set, const char *name, qwi_dtype dt, int ndim,
                                int64_t d0, int64_t d1) {
    const qwi_tensor *t = qwi_st_find(set, name);
    cr_assert_not_null(t, "missing %s", name);
    cr_assert_eq(t->dtype, dt, "%s dtype %d", name, (int)t->dtype);
    cr_assert_eq(t->ndim, ndim, "%s ndim %d", name, t->ndim);
    if (ndim > 0) cr_assert_eq(t->shape[0], d0, "%s shape[0] %lld", name, (long long)t->shape[0]);
    if (ndim > 1) cr_assert_eq(t->shape[1], d1, "%s shape[1] %lld", name, (long long)t->shape[1]);
    return t;
}

/* tiny: hidden 64, q_proj 64 x 64, k_proj 32 x 64, intermediate 128. */
Test(makemodel_quant, layouts_and_configs) {
    qwi_st_set *set = NULL;
    char *dir = make("mq-fp8", "--quant fp8");
    json_t *q = quant_config(dir);
    cr_assert_str_eq(json_string_value(json_object_get(q, "quant_method")), "fp8");
    cr_assert_str_eq(json_string_value(json_object_get(q, "fmt")), "e4m3");
    cr_assert_eq(json_integer_value(json_array_get(json_object_get(q, "weight_block_size"), 1)), 128);
    json_decref(q);
    cr_assert_eq(qwi_st_open_dir(dir, &set), QW_OK);
    expect(set, "model.layers.1.self_attn.k_proj.weight", QWI_DTYPE_F8_E4M3, 2, 32, 64);
    /* the model's dtype, as Qwen ships it; blocks: ceil(128/128) x ceil(64/128) */
    expect(set, "model.layers.1.mlp.gate_proj.weight_scale_inv", QWI_DTYPE_BF16, 2, 1, 1);
    expect(set, "model.embed_tokens.weight", QWI_DTYPE_BF16, 2, 512, 64);
    cr_assert_null(qwi_st_find(set, "model.layers.0.self_attn.k_scale"));
    qwi_st_close(set);
    free(dir);

    dir = make("mq-awq", "--quant awq --group-size 32");
    q = quant_config(dir);
    cr_assert_str_eq(json_string_value(json_object_get(q, "quant_method")), "awq");
    cr_assert_str_eq(json_string_value(json_object_get(q, "version")), "gemm");
    cr_assert(json_is_true(json_object_get(q, "zero_point")));
    cr_assert_eq(json_integer_value(json_object_get(q, "bits")), 4);
    cr_assert_eq(json_integer_value(json_object_get(q, "group_size")), 32);
    json_decref(q);
    cr_assert_eq(qwi_st_open_dir(dir, &set), QW_OK);
    expect(set, "model.layers.0.mlp.down_proj.qweight", QWI_DTYPE_I32, 2, 128, 8);
    expect(set, "model.layers.0.mlp.down_proj.qzeros", QWI_DTYPE_I32, 2, 4, 8);
    expect(set, "model.layers.0.mlp.down_proj.scales", QWI_DTYPE_F16, 2, 4, 64);
    cr_assert_null(qwi_st_find(set, "model.layers.0.mlp.down_proj.weight"));
    cr_assert_null(qwi_st_find(set, "model.layers.0.mlp.down_proj.g_idx"));
    qwi_st_close(set);
    free(dir);

    dir = make("mq-gptq8a", "--quant gptq --bits 8 --gptq-asym --group-size 32");
    q = quant_config(dir);
    cr_assert_str_eq(json_string_value(json_object_get(q, "quant_method")), "gptq");
    cr_assert_str_eq(json_string_value(json_object_get(q, "checkpoint_format")), "gptq");
    cr_assert(json_is_false(json_object_get(q, "sym")));
    cr_assert(json_is_false(json_object_get(q, "desc_act")));
    cr_assert(json_is_false(json_object_get(q, "lm_head")));
    cr_assert_eq(json_integer_value(json_object_get(q, "bits")), 8);
    json_decref(q);
    cr_assert_eq(qwi_st_open_dir(dir, &set), QW_OK);
    /* k_proj: [32 out, 64 in], 4 codes per int32 */
    expect(set, "model.layers.0.self_attn.k_proj.qweight", QWI_DTYPE_I32, 2, 16, 32);
    expect(set, "model.layers.0.self_attn.k_proj.qzeros", QWI_DTYPE_I32, 2, 2, 8);
    expect(set, "model.layers.0.self_attn.k_proj.scales", QWI_DTYPE_F16, 2, 2, 32);
    const qwi_tensor *g = expect(set, "model.layers.0.self_attn.k_proj.g_idx", QWI_DTYPE_I32, 1, 64, 0);
    for (int c = 0; c < 64; c++) {
        int32_t v;
        memcpy(&v, (const char *)g->data + 4 * c, 4);
        cr_assert_eq(v, c / 32, "g_idx[%d] = %d", c, v);
    }
    qwi_st_close(set);
    free(dir);

    /* act-order: g_idx a permuted grouping (each group still 32 columns),
     * gptq_v2, per-layer kv scales */
    dir = make("mq-gptq4da-kv", "--quant gptq --gptq-desc-act --gptq-format gptq_v2 --group-size 32 "
                                "--kv-scale 0.25");
    q = quant_config(dir);
    cr_assert(json_is_true(json_object_get(q, "desc_act")));
    cr_assert_str_eq(json_string_value(json_object_get(q, "checkpoint_format")), "gptq_v2");
    json_decref(q);
    cr_assert_eq(qwi_st_open_dir(dir, &set), QW_OK);
    g = expect(set, "model.layers.0.mlp.down_proj.g_idx", QWI_DTYPE_I32, 1, 128, 0);
    int count[4] = {0}, sorted = 1, prev = 0;
    for (int c = 0; c < 128; c++) {
        int32_t v;
        memcpy(&v, (const char *)g->data + 4 * c, 4);
        cr_assert(v >= 0 && v < 4, "g_idx[%d] = %d", c, v);
        count[v]++;
        sorted &= v >= prev;
        prev = v;
    }
    for (int j = 0; j < 4; j++) cr_assert_eq(count[j], 32, "group %d has %d columns", j, count[j]);
    cr_assert(!sorted, "act-order g_idx is not permuted");
    for (int l = 0; l < 2; l++) {
        char name[96];
        for (int kv = 0; kv < 2; kv++) {
            snprintf(name, sizeof name, "model.layers.%d.self_attn.%s_scale", l, kv ? "v" : "k");
            const qwi_tensor *t = expect(set, name, QWI_DTYPE_F32, 0, 0, 0);
            float v;
            memcpy(&v, t->data, 4);
            cr_assert_eq(v, 0.25f, "%s = %g", name, v);
        }
    }
    qwi_st_close(set);
    free(dir);
}

/* Runs qw-makemodel with args; asserts exit status 2 and stderr naming what. */
static void refused(const char *args, const char *what) {
    char *tmp = qwt_tmpdir("mqbad");
    int rc = qwt_system("'%s' --shape tiny --out '%s/m' %s 2> '%s/err' >/dev/null",
                        qwt_tool("qw-makemodel"), tmp, args, tmp, tmp);
    char path[8300];
    snprintf(path, sizeof path, "%s/err", tmp);
    char *err = qwt_read_file(path, NULL);
    cr_assert_not_null(err);
    cr_assert_eq(rc, 2, "qw-makemodel %s: exit %d", args, rc);
    cr_assert(strstr(err, what), "qw-makemodel %s: message '%s' lacks '%s'", args, err, what);
    free(err);
    free(tmp);
}

/* --gptq-lm-head: GPTQModel's lm_head=True layout. tiny is tied: the head
 * is its embedding quantized (the float embedding stays), and the config
 * says untied; the qweight of the head packs 8 hidden inputs per int32. */
Test(makemodel_quant, gptq_lm_head_layout) {
    char *dir = make("mq-gptq4-head", "--quant gptq --group-size 32 --gptq-lm-head");
    json_t *q = quant_config(dir);
    cr_assert(json_is_true(json_object_get(q, "lm_head")));
    json_decref(q);
    char path[8300];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *root = json_load_file(path, 0, NULL);
    cr_assert(root);
    cr_assert(json_is_false(json_object_get(root, "tie_word_embeddings")));
    json_decref(root);
    qwi_st_set *set = NULL;
    cr_assert_eq(qwi_st_open_dir(dir, &set), QW_OK);
    expect(set, "model.embed_tokens.weight", QWI_DTYPE_BF16, 2, 512, 64);
    expect(set, "lm_head.qweight", QWI_DTYPE_I32, 2, 8, 512);
    expect(set, "lm_head.qzeros", QWI_DTYPE_I32, 2, 2, 64);
    expect(set, "lm_head.scales", QWI_DTYPE_F16, 2, 2, 512);
    expect(set, "lm_head.g_idx", QWI_DTYPE_I32, 1, 64, 0);
    cr_assert_null(qwi_st_find(set, "lm_head.weight"));
    qwi_st_close(set);
    free(dir);
}

/* --gptq-dynamic: GPTQModel's per-module rules, written to the config and
 * applied while storing: a "-:" module as the twin's float weight, a
 * "+:" layer with its own bits and group size. */
#define DYN "'{\"-:model\\\\.layers\\\\.0\\\\.mlp\\\\.down_proj\": {}, " \
            "\"+:model\\\\.layers\\\\.1\\\\.\": {\"bits\": 8, \"group_size\": 16}}'"
Test(makemodel_quant, gptq_dynamic_layout) {
    char *dir = make("mq-gptq-dyn", "--quant gptq --group-size 32 --gptq-dynamic " DYN);
    json_t *q = quant_config(dir);
    json_t *dyn = json_object_get(q, "dynamic");
    cr_assert(json_is_object(dyn) && json_object_size(dyn) == 2);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(dyn, "+:model\\.layers\\.1\\."), "bits")), 8);
    json_decref(q);
    qwi_st_set *set = NULL;
    cr_assert_eq(qwi_st_open_dir(dir, &set), QW_OK);
    expect(set, "model.layers.0.mlp.down_proj.weight", QWI_DTYPE_BF16, 2, 64, 128);
    cr_assert_null(qwi_st_find(set, "model.layers.0.mlp.down_proj.qweight"));
    expect(set, "model.layers.0.mlp.up_proj.qweight", QWI_DTYPE_I32, 2, 8, 128);     /* 4-bit */
    expect(set, "model.layers.1.self_attn.k_proj.qweight", QWI_DTYPE_I32, 2, 16, 32); /* 8-bit */
    expect(set, "model.layers.1.self_attn.k_proj.scales", QWI_DTYPE_F16, 2, 4, 32);   /* group 16 */
    qwi_st_close(set);
    free(dir);
}

Test(makemodel_quant, refuses_impossible_combinations) {
    refused("--quant awq --bits 8", "awq (GEMM) stores 4 bits only");
    refused("--quant awq --group-size -1", "--quant awq needs a positive --group-size");
    refused("--quant gptq --group-size 48", "--group-size 48 does not divide");
    refused("--quant gptq --group-size 7", "--group-size");
    refused("--quant awq --intermediate 100 --group-size 4", "awq packs 8 outputs per int32");
    refused("--quant gptq --heads 1 --kv-heads 1 --head-dim 12 --group-size -1",
            "GPTQ packs 8 inputs per int32");
    refused("--quant fp8 --bits 4", "--quant fp8 stores 8 bits");
    refused("--quant fp8 --group-size 32", "takes --fp8-block, not --group-size");
    refused("--quant fp8 --fp8-block 3", "--fp8-block");
    refused("--quant gptq --fp8-block 64", "--fp8-block needs --quant fp8");
    refused("--gptq-asym", "--gptq-asym needs --quant gptq");
    refused("--quant awq --gptq-format gptq_v2", "--gptq-format needs --quant gptq");
    refused("--quant awq --gptq-desc-act", "--gptq-desc-act needs --quant gptq");
    refused("--quant awq --gptq-lm-head", "--gptq-lm-head needs --quant gptq");
    refused("--quant gptq --gptq-lm-head --tied-with-lm-head", "not with --tied-with-lm-head");
    refused("--quant gptq --group-size 32 --gptq-lm-head --vocab 300",
            "--gptq-lm-head: GPTQ packs 8 outputs per int32");
    refused("--quant awq --gptq-dynamic '{}'", "--gptq-dynamic needs --quant gptq");
    refused("--quant gptq --group-size 32 --gptq-dynamic '[1]'", "bad value");
    refused("--quant gptq --group-size 32 --gptq-dynamic '{\"+:.*\": {\"pack_dtype\": \"int16\"}}'", "pack_dtype");
    refused("--quant gptq --group-size 32 --gptq-dynamic '{\"+:.*down\": {\"group_size\": 48}}'", "cannot be stored");
    refused("--bits 8", "need --quant");
    refused("--quant int4", "--quant");
    refused("--kv-scale 0", "--kv-scale");
}
