/*
 * make_seeds.c - write the seed corpora of the fuzz harnesses, in their
 * container format (fuzz_util.h), from models written by qw-makemodel:
 *
 *   make_seeds SINGLE_DIR SHARDED_DIR QUANT_DIR OUT_DIR
 *
 * SINGLE_DIR: one model.safetensors with config.json, generation_config.json
 * and the tokenizer files (vocab.json, merges.txt, tokenizer_config.json);
 * SHARDED_DIR: the same model in two shards with its index; QUANT_DIR: one
 * directory per quantized checkpoint (gptq, gptq8, gptq-desc, gptq-asym,
 * awq, fp8: Makefile, FUZZ_QUANTS) for fuzz_safetensors. OUT_DIR gets
 * safetensors/, config/ and tokenizer/, one file per seed: the generated
 * files themselves, the other tokenizer.json forms built from the same
 * vocabulary and merges, and edge cases derived from them (lengths, offsets,
 * ids and sizes at and past their limits, truncations, unknown and
 * unsupported values). Exits non-zero, saying why, when an input is missing.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "fuzz/fuzz_util.h"

typedef struct buf {
    char *p;
    size_t n;
} buf;

static const char *out_dir;

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "make_seeds: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static buf read_file(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot read %s", path);
    buf b = {0};
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    b.p = malloc((size_t)n + 1);
    if (!b.p || fread(b.p, 1, (size_t)n, f) != (size_t)n) die("cannot read %s", path);
    b.p[n] = '\0';
    b.n = (size_t)n;
    fclose(f);
    return b;
}

static buf str_buf(const char *s) {
    buf b = {strdup(s), strlen(s)};
    if (!b.p) die("out of memory");
    return b;
}

static buf copy_buf(const void *p, size_t n) {
    buf b = {malloc(n + 1), n};
    if (!b.p) die("out of memory");
    memcpy(b.p, p, n);
    b.p[n] = '\0';
    return b;
}

/* A copy of b with the first occurrence of from replaced by to. */
static buf replace(buf b, const char *from, const char *to) {
    char *at = strstr(b.p, from);
    if (!at) die("seed template lacks \"%s\"", from);
    size_t pre = (size_t)(at - b.p), fl = strlen(from), tl = strlen(to);
    buf r = {malloc(b.n - fl + tl + 1), b.n - fl + tl};
    if (!r.p) die("out of memory");
    memcpy(r.p, b.p, pre);
    memcpy(r.p + pre, to, tl);
    memcpy(r.p + pre + tl, at + fl, b.n - pre - fl + 1);
    return r;
}

static buf json_buf(json_t *j) {
    char *s = json_dumps(j, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    if (!s) die("json_dumps failed");
    buf b = {s, strlen(s)};
    return b;
}

static json_t *parse(buf b, const char *what) {
    json_error_t e;
    json_t *j = json_loadb(b.p, b.n, 0, &e);
    if (!j) die("%s: %s", what, e.text);
    return j;
}

/* Write one seed: parts joined by QWF_SEP (an absent part is empty). */
static void seed(const char *sub, const char *name, int n, const buf *parts) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", out_dir, sub);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", out_dir, sub, name);
    FILE *f = fopen(path, "wb");
    if (!f) die("cannot write %s", path);
    for (int i = 0; i < n; i++) {
        if (i) fwrite(QWF_SEP, 1, QWF_SEP_LEN, f);
        if (parts[i].n) fwrite(parts[i].p, 1, parts[i].n, f);
    }
    if (fclose(f) != 0) die("cannot write %s", path);
}

/* ---- safetensors ---------------------------------------------------------- */

static uint64_t st_hlen(buf st) {
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--) h = (h << 8) | (unsigned char)st.p[i];
    return h;
}

static buf st_with_hlen(buf st, uint64_t h) {
    buf r = copy_buf(st.p, st.n);
    for (int i = 0; i < 8; i++) r.p[i] = (char)(h >> (8 * i));
    return r;
}

/* A safetensors file of header json (8-byte padded with spaces, as the
 * reference writer does) and the data section of st. */
static buf st_rebuild(buf st, json_t *header) {
    uint64_t h = st_hlen(st);
    const char *data = st.p + 8 + h;
    size_t dlen = st.n - 8 - (size_t)h;
    char *js = json_dumps(header, JSON_COMPACT | JSON_PRESERVE_ORDER);
    size_t jl = strlen(js), pad = (8 - jl % 8) % 8;
    buf r = {malloc(8 + jl + pad + dlen + 1), 8 + jl + pad + dlen};
    if (!r.p) die("out of memory");
    for (int i = 0; i < 8; i++) r.p[i] = (char)((jl + pad) >> (8 * i));
    memcpy(r.p + 8, js, jl);
    memset(r.p + 8 + jl, ' ', pad);
    memcpy(r.p + 8 + jl + pad, data, dlen);
    free(js);
    return r;
}

/* A safetensors file of a header given as text and a data section. */
static buf st_make(const char *header, const void *data, size_t dlen) {
    size_t jl = strlen(header);
    buf r = {malloc(8 + jl + dlen + 1), 8 + jl + dlen};
    if (!r.p) die("out of memory");
    for (int i = 0; i < 8; i++) r.p[i] = (char)((uint64_t)jl >> (8 * i));
    memcpy(r.p + 8, header, jl);
    if (dlen) memcpy(r.p + 8 + jl, data, dlen);
    return r;
}

static json_t *st_header(buf st) {
    return parse(copy_buf(st.p + 8, (size_t)st_hlen(st)), "safetensors header");
}

/* The header of st with tensor `name`'s key `key` set to value (stolen). */
static buf st_edit(buf st, const char *name, const char *key, json_t *value) {
    json_t *h = st_header(st);
    json_t *t = json_object_get(h, name);
    if (!t) die("no tensor %s in the seed model", name);
    json_object_set_new(t, key, value);
    buf r = st_rebuild(st, h);
    json_decref(h);
    return r;
}

static void safetensors_seeds(const char *single, const char *sharded) {
    buf st = read_file(single, "model.safetensors");
    buf cfg = read_file(single, "config.json");
    buf idx = read_file(sharded, "model.safetensors.index.json");
    buf sh1 = read_file(sharded, "model-00001-of-00002.safetensors");
    buf sh2 = read_file(sharded, "model-00002-of-00002.safetensors");
    buf none = {0};
    const char *S = "safetensors";
    const char *emb = "model.embed_tokens.weight", *norm = "model.norm.weight";

    seed(S, "single-with-config", 5, (buf[]){st, none, none, none, cfg});
    seed(S, "single", 1, (buf[]){st});
    seed(S, "sharded-with-config", 5, (buf[]){none, idx, sh1, sh2, cfg});
    seed(S, "sharded-and-single", 5, (buf[]){st, idx, sh1, sh2, cfg});
    seed(S, "sharded-missing-shard", 5, (buf[]){none, idx, sh1, none, cfg});
    seed(S, "sharded-swapped-shards", 5, (buf[]){none, idx, sh2, sh1, cfg});
    seed(S, "sharded-shard-outside-dir", 5,
         (buf[]){none, replace(idx, "\"model-00002-of-00002", "\"../model-00002-of-00002"), sh1, sh2,
                 cfg});
    seed(S, "sharded-index-not-object", 3, (buf[]){none, str_buf("[1, 2]"), sh1});
    seed(S, "sharded-tensor-in-both", 5, (buf[]){none, idx, st, sh2, cfg});

    uint64_t h = st_hlen(st);
    seed(S, "hlen-huge", 1, (buf[]){st_with_hlen(st, UINT64_MAX)});
    seed(S, "hlen-past-end", 1, (buf[]){st_with_hlen(st, st.n - 8 + 1)});
    seed(S, "hlen-zero", 1, (buf[]){st_with_hlen(st, 0)});
    seed(S, "hlen-short", 1, (buf[]){st_with_hlen(st, h - 1)});
    seed(S, "truncated-data", 5, (buf[]){copy_buf(st.p, st.n - 1), none, none, none, cfg});
    seed(S, "truncated-header", 1, (buf[]){copy_buf(st.p, 8 + (size_t)h / 2)});
    seed(S, "only-length", 1, (buf[]){copy_buf(st.p, 8)});
    buf tail = copy_buf(st.p, st.n + 1);
    tail.p[st.n] = 0;
    seed(S, "extra-tail-byte", 1, (buf[]){tail});

    seed(S, "dtype-unsupported", 1, (buf[]){st_edit(st, emb, "dtype", json_string("F8_E5M2"))});
    seed(S, "dtype-unknown", 1, (buf[]){st_edit(st, emb, "dtype", json_string("Q4_K"))});
    seed(S, "dtype-not-string", 1, (buf[]){st_edit(st, emb, "dtype", json_integer(7))});
    seed(S, "shape-negative", 1, (buf[]){st_edit(st, norm, "shape", json_pack("[i]", -8))});
    seed(S, "shape-five-dims", 1,
         (buf[]){st_edit(st, norm, "shape", json_pack("[i,i,i,i,i]", 1, 1, 1, 1, 8))});
    seed(S, "shape-overflow", 1,
         (buf[]){st_edit(st, norm, "shape", json_pack("[I,I]", (json_int_t)1 << 40,
                                                     (json_int_t)1 << 40))});
    seed(S, "shape-mismatch-config", 5,
         (buf[]){st_edit(st, norm, "shape", json_pack("[i,i]", 2, 4)), none, none, none, cfg});
    seed(S, "offsets-begin-after-end", 1,
         (buf[]){st_edit(st, norm, "data_offsets", json_pack("[i,i]", 16, 0))});
    seed(S, "offsets-past-data", 1,
         (buf[]){st_edit(st, norm, "data_offsets", json_pack("[I,I]", (json_int_t)1 << 60,
                                                            ((json_int_t)1 << 60) + 16))});
    seed(S, "offsets-overlap", 1,
         (buf[]){st_edit(st, norm, "data_offsets", json_pack("[i,i]", 0, 16))});
    seed(S, "offsets-not-pair", 1, (buf[]){st_edit(st, norm, "data_offsets", json_pack("[i]", 0))});
    json_t *hd = st_header(st);
    json_object_set_new(hd, "__metadata__", json_pack("{s:i}", "format", 3));
    seed(S, "metadata-not-strings", 1, (buf[]){st_rebuild(st, hd)});
    json_decref(hd);
    hd = st_header(st);
    json_object_del(hd, "model.layers.0.mlp.up_proj.weight");
    seed(S, "missing-tensor-gap", 5, (buf[]){st_rebuild(st, hd), none, none, none, cfg});
    json_decref(hd);

    static const float one_f32 = 1.0f;
    seed(S, "hand-one-tensor", 1,
         (buf[]){st_make("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                         &one_f32, 4)});
    seed(S, "hand-no-tensors", 1, (buf[]){st_make("{}", NULL, 0)});
    seed(S, "hand-empty-tensor", 1,
         (buf[]){st_make("{\"z\":{\"dtype\":\"BF16\",\"shape\":[0,4],\"data_offsets\":[0,0]},"
                         "\"__metadata__\":{}}",
                         NULL, 0)});
    seed(S, "hand-header-not-object", 1, (buf[]){st_make("[1,2,3]", NULL, 0)});
    seed(S, "hand-duplicate-key", 1,
         (buf[]){st_make("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                         &one_f32, 4)});
}

/* ---- quantized checkpoints (fuzz_safetensors) ----------------------------- */

/* config.json cfg with quantization_config.key set to value (stolen), or
 * the whole quantization_config replaced when key is NULL. */
static buf qcfg_edit(buf cfg, const char *key, json_t *value) {
    json_t *c = parse(cfg, "config.json");
    if (!key) {
        json_object_set_new(c, "quantization_config", value);
    } else {
        json_t *q = json_object_get(c, "quantization_config");
        if (!q) die("seed model has no quantization_config");
        json_object_set_new(q, key, value);
    }
    buf r = json_buf(c);
    json_decref(c);
    return r;
}

/* The header of st with tensor `from` renamed `to` (its bytes stay where
 * they are, so the file still parses and the loader misses `from`). */
static buf st_rename(buf st, const char *from, const char *to) {
    json_t *h = st_header(st);
    json_t *t = json_object_get(h, from);
    if (!t) die("no tensor %s in the seed model", from);
    json_object_set(h, to, t);
    json_object_del(h, from);
    buf r = st_rebuild(st, h);
    json_decref(h);
    return r;
}

/* Seeds of fuzz_safetensors (model file and config.json) from the tiny
 * quantized models in qdir/<name> (Makefile: FUZZ_QUANTS): each as written,
 * then with one tensor or one quantization_config key made wrong in the
 * ways the loader refuses (quant_config.c, quant_load.c), so the fuzzer
 * starts next to every refusal. */
static void quant_seeds(const char *qdir) {
    static const char *const models[] = {"gptq", "gptq8", "gptq-desc", "gptq-asym", "gptq-head",
                                         "awq", "fp8"};
    const char *S = "safetensors";
    buf none = {0};
    char dir[4096], name[256];
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        snprintf(dir, sizeof dir, "%s/%s", qdir, models[i]);
        buf st = read_file(dir, "model.safetensors"), cfg = read_file(dir, "config.json");
        snprintf(name, sizeof name, "quant-%s", models[i]);
        seed(S, name, 5, (buf[]){st, none, none, none, cfg});
    }
#define QSEED(NAME, ST, CFG) seed(S, "quant-" NAME, 5, (buf[]){(ST), none, none, none, (CFG)})
    snprintf(dir, sizeof dir, "%s/gptq", qdir);
    buf st = read_file(dir, "model.safetensors"), cfg = read_file(dir, "config.json");
    const char *q = "model.layers.0.self_attn.q_proj.", *d = "model.layers.0.mlp.down_proj.";
    char t[256];
    /* shapes with the same element count as the tensor's bytes, so the
     * file parses and the quantized loader's shape checks are what refuse */
    snprintf(t, sizeof t, "%sqweight", q);
    QSEED("gptq-qweight-rows", st_edit(st, t, "shape", json_pack("[i,i]", 4, 4)), cfg);
    QSEED("gptq-qweight-dtype", st_edit(st, t, "dtype", json_string("F32")), cfg);
    QSEED("gptq-qweight-1d", st_edit(st, t, "shape", json_pack("[i]", 16)), cfg);
    snprintf(t, sizeof t, "%sqzeros", "model.layers.0.self_attn.o_proj.");
    QSEED("gptq-qzeros-missing", st_rename(st, t, "model.layers.0.self_attn.o_proj.qzeros_"), cfg);
    snprintf(t, sizeof t, "%sscales", d);
    QSEED("gptq-scales-groups", st_edit(st, t, "shape", json_pack("[i,i]", 4, 8)), cfg);
    QSEED("gptq-scales-bf16", st_edit(st, t, "dtype", json_string("BF16")), cfg);
    snprintf(t, sizeof t, "%sg_idx", d);
    QSEED("gptq-gidx-2d", st_edit(st, t, "shape", json_pack("[i,i]", 2, 8)), cfg);
    QSEED("gptq-gidx-missing", st_rename(st, t, "model.layers.0.mlp.down_proj.g_idx_"), cfg);
    QSEED("gptq-bits-3", st, qcfg_edit(cfg, "bits", json_integer(3)));
    QSEED("gptq-bits-string", st, qcfg_edit(cfg, "bits", json_string("4")));
    QSEED("gptq-group-7", st, qcfg_edit(cfg, "group_size", json_integer(7)));
    QSEED("gptq-group-per-channel", st, qcfg_edit(cfg, "group_size", json_integer(-1)));
    QSEED("gptq-group-huge", st, qcfg_edit(cfg, "group_size", json_integer(1 << 30)));
    QSEED("gptq-desc-act", st, qcfg_edit(cfg, "desc_act", json_true()));
    QSEED("gptq-asym-v1", st, qcfg_edit(cfg, "sym", json_false()));
    QSEED("gptq-format-marlin", st, qcfg_edit(cfg, "checkpoint_format", json_string("marlin")));
    QSEED("gptq-lm-head", st, qcfg_edit(cfg, "lm_head", json_true()));
    /* GPTQModel "dynamic" rules: a skip (down_proj then lacks its float
     * weight), an 8-bit override the 4-bit tensors contradict, a bad pattern */
    QSEED("gptq-dynamic-skip", st, qcfg_edit(cfg, "dynamic", json_pack("{s:{}}", "-:.*down_proj")));
    QSEED("gptq-dynamic-bits8", st, qcfg_edit(cfg, "dynamic", json_pack("{s:{s:i}}", "+:model\\.layers\\.0\\.", "bits", 8)));
    QSEED("gptq-dynamic-regex", st, qcfg_edit(cfg, "dynamic", json_pack("{s:{}}", "+:(")));
    QSEED("gptq-dynamic-no-match", st, qcfg_edit(cfg, "dynamic", json_pack("{s:{s:i}}", "+:nothing", "group_size", 16)));
    QSEED("method-unknown", st, qcfg_edit(cfg, "quant_method", json_string("bitsandbytes")));
    QSEED("config-not-object", st, qcfg_edit(cfg, NULL, json_pack("[i]", 4)));
    QSEED("config-removed", st, qcfg_edit(cfg, NULL, json_null()));

    /* GPTQModel's quantized head (lm_head: true): its parts made wrong, and
     * the config no longer announcing it */
    snprintf(dir, sizeof dir, "%s/gptq-head", qdir);
    buf hst = read_file(dir, "model.safetensors"), hcfg = read_file(dir, "config.json");
    QSEED("gptq-head-unannounced", hst, qcfg_edit(hcfg, "lm_head", json_false()));
    QSEED("gptq-head-qweight-rows", st_edit(hst, "lm_head.qweight", "shape", json_pack("[i,i]", 304, 2)), hcfg);
    QSEED("gptq-head-scales-missing", st_rename(hst, "lm_head.scales", "lm_head.scales_"), hcfg);

    snprintf(dir, sizeof dir, "%s/gptq-desc", qdir);
    buf dst = read_file(dir, "model.safetensors"), dcfg = read_file(dir, "config.json");
    QSEED("gptq-desc-act-false", dst, qcfg_edit(dcfg, "desc_act", json_false()));

    snprintf(dir, sizeof dir, "%s/awq", qdir);
    buf ast = read_file(dir, "model.safetensors"), acfg = read_file(dir, "config.json");
    snprintf(t, sizeof t, "%sqweight", q);
    QSEED("awq-qweight-transposed", st_edit(ast, t, "shape", json_pack("[i,i]", 1, 16)), acfg);
    snprintf(t, sizeof t, "%sqzeros", d);
    QSEED("awq-qzeros-wide", st_edit(ast, t, "shape", json_pack("[i,i]", 1, 4)), acfg);
    QSEED("awq-version-gemv", ast, qcfg_edit(acfg, "version", json_string("gemv")));
    QSEED("awq-no-zero-point", ast, qcfg_edit(acfg, "zero_point", json_false()));
    QSEED("awq-modules-not-converted", ast,
          qcfg_edit(acfg, "modules_to_not_convert", json_pack("[s]", "q_proj")));

    snprintf(dir, sizeof dir, "%s/fp8", qdir);
    buf fst = read_file(dir, "model.safetensors"), fcfg = read_file(dir, "config.json");
    snprintf(t, sizeof t, "%sweight", q);
    QSEED("fp8-weight-e5m2", st_edit(fst, t, "dtype", json_string("F8_E5M2")), fcfg);
    json_t *h = st_header(fst);
    json_object_set_new(json_object_get(h, t), "dtype", json_string("BF16"));
    json_object_set_new(json_object_get(h, t), "shape", json_pack("[i,i]", 4, 16));
    QSEED("fp8-weight-bf16", st_rebuild(fst, h), fcfg);
    json_decref(h);
    snprintf(t, sizeof t, "%sweight_scale_inv", d);
    QSEED("fp8-scale-shape", st_edit(fst, t, "shape", json_pack("[i,i]", 1, 4)), fcfg);
    QSEED("fp8-scale-missing", st_rename(fst, t, "model.layers.0.mlp.down_proj.weight_scale_inv_"), fcfg);
    QSEED("fp8-block-uneven", fst, qcfg_edit(fcfg, "weight_block_size", json_pack("[i,i]", 8, 16)));
    QSEED("fp8-block-one-dim", fst, qcfg_edit(fcfg, "weight_block_size", json_pack("[i]", 8)));
    QSEED("fp8-fmt-e5m2", fst, qcfg_edit(fcfg, "fmt", json_string("e5m2")));
    QSEED("fp8-static-activations", fst, qcfg_edit(fcfg, "activation_scheme", json_string("static")));
#undef QSEED
}

/* ---- config --------------------------------------------------------------- */

static void config_variant(buf cfg, buf gen, const char *name, const char *key, json_t *value) {
    json_t *c = parse(cfg, "config.json");
    if (value) json_object_set_new(c, key, value);
    else json_object_del(c, key);
    seed("config", name, 2, (buf[]){json_buf(c), gen});
    json_decref(c);
}

static void config_seeds(const char *single) {
    buf cfg = read_file(single, "config.json");
    buf gen = read_file(single, "generation_config.json");
    buf none = {0};
    seed("config", "model", 2, (buf[]){cfg, gen});
    seed("config", "model-no-generation-config", 1, (buf[]){cfg});
    struct { const char *name, *key; json_t *value; } v[] = {
        {"max-pos-int32-max", "max_position_embeddings", json_integer(2147483647)},
        {"max-pos-near-int32-max", "max_position_embeddings", json_integer(2147483000)},
        {"max-pos-2-30", "max_position_embeddings", json_integer(1 << 30)},
        {"max-pos-2-24", "max_position_embeddings", json_integer(1 << 24)},
        {"max-pos-2-24-plus-1", "max_position_embeddings", json_integer((1 << 24) + 1)},
        {"max-pos-one", "max_position_embeddings", json_integer(1)},
        {"max-pos-zero", "max_position_embeddings", json_integer(0)},
        {"max-pos-negative", "max_position_embeddings", json_integer(-5)},
        {"max-pos-real", "max_position_embeddings", json_real(256.5)},
        {"rope-theta-huge", "rope_theta", json_real(1e308)},
        {"rope-theta-tiny", "rope_theta", json_real(1e-300)},
        {"rope-theta-zero", "rope_theta", json_integer(0)},
        {"rms-eps-huge", "rms_norm_eps", json_real(1e30)},
        {"rms-eps-tiny", "rms_norm_eps", json_real(1e-300)},
        {"eos-many", "eos_token_id", json_pack("[i,i,i,i,i,i,i,i,i]", 299, 298, 0, 1, 2, 3, 4, 5, 6)},
        {"eos-past-vocab", "eos_token_id", json_integer(300)},
        {"eos-negative", "eos_token_id", json_integer(-1)},
        {"eos-string", "eos_token_id", json_string("<|im_end|>")},
        {"bos-past-vocab", "bos_token_id", json_integer(300)},
        {"vocab-int32-max", "vocab_size", json_integer(2147483647)},
        {"vocab-missing", "vocab_size", NULL},
        {"kv-heads-not-divisor", "num_key_value_heads", json_integer(3)},
        {"kv-heads-zero", "num_key_value_heads", json_integer(0)},
        {"head-dim-odd", "head_dim", json_integer(3)},
        {"head-dim-huge", "head_dim", json_integer(1 << 30)},
        {"layers-huge", "num_hidden_layers", json_integer(2147483647)},
        {"hidden-huge", "hidden_size", json_integer(2147483647)},
        {"arch-qwen2", "architectures", json_pack("[s]", "Qwen2ForCausalLM")},
        {"arch-llama", "architectures", json_pack("[s]", "LlamaForCausalLM")},
        {"arch-empty", "architectures", json_array()},
        {"untied", "tie_word_embeddings", json_false()},
        {"rope-scaling-yarn", "rope_scaling", json_pack("{s:s,s:f}", "rope_type", "yarn", "factor", 4.0)},
        {"sliding-window", "use_sliding_window", json_true()},
        {"attention-bias", "attention_bias", json_true()},
        /* the model's weights are bf16: these reach the quantization_config
         * parser and then the quantized loader's missing-tensor refusals */
        {"quant-gptq", "quantization_config",
         json_pack("{s:s,s:i,s:i,s:b,s:b,s:s}", "quant_method", "gptq", "bits", 4, "group_size", 8,
                   "sym", 1, "desc_act", 0, "checkpoint_format", "gptq")},
        {"quant-awq", "quantization_config",
         json_pack("{s:s,s:i,s:i,s:b,s:s,s:n}", "quant_method", "awq", "bits", 4, "group_size", 8,
                   "zero_point", 1, "version", "gemm", "modules_to_not_convert")},
        {"quant-fp8", "quantization_config",
         json_pack("{s:s,s:s,s:s,s:[i,i]}", "quant_method", "fp8", "fmt", "e4m3",
                   "activation_scheme", "dynamic", "weight_block_size", 128, 128)},
        {"quant-empty", "quantization_config", json_object()},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        config_variant(cfg, gen, v[i].name, v[i].key, v[i].value);
    seed("config", "generation-eos-list", 2,
         (buf[]){cfg, str_buf("{\"eos_token_id\": [299, 298], \"bos_token_id\": 298}")});
    seed("config", "generation-eos-past-vocab", 2,
         (buf[]){cfg, str_buf("{\"eos_token_id\": [299, 1000000]}")});
    seed("config", "generation-not-object", 2, (buf[]){cfg, str_buf("[299]")});
    seed("config", "no-config", 2, (buf[]){none, gen});
}

/* ---- tokenizer ------------------------------------------------------------ */

/* tokenizer.json of the vocabulary and merges of a vocab.json + merges.txt
 * pair, with tokenizer_config.json's added tokens; merges as "a b" strings
 * (pairs == 0) or ["a", "b"] pairs, and a Split pre-tokenizer regex when
 * regex is not NULL. */
static buf tokenizer_json(buf vocab, buf merges, buf tcfg, int pairs, const char *regex) {
    json_t *root = json_object(), *model = json_object(), *ml = json_array();
    json_object_set_new(model, "type", json_string("BPE"));
    json_object_set_new(model, "vocab", parse(vocab, "vocab.json"));
    char *m = strdup(merges.p), *save = NULL;
    for (char *line = strtok_r(m, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#') continue;
        char *sp = strchr(line, ' ');
        if (!sp) continue;
        if (pairs) {
            *sp = '\0';
            json_array_append_new(ml, json_pack("[s,s]", line, sp + 1));
        } else {
            json_array_append_new(ml, json_string(line));
        }
    }
    free(m);
    json_object_set_new(model, "merges", ml);
    json_t *added = json_array();
    json_t *dec = json_object_get(parse(tcfg, "tokenizer_config.json"), "added_tokens_decoder");
    const char *key;
    json_t *val;
    json_object_foreach(dec, key, val) {
        json_t *a = json_deep_copy(val);
        json_object_set_new(a, "id", json_integer(atoi(key)));
        json_array_append_new(added, a);
    }
    json_object_set_new(root, "version", json_string("1.0"));
    json_object_set_new(root, "added_tokens", added);
    if (regex)
        json_object_set_new(
            root, "pre_tokenizer",
            json_pack("{s:s,s:[{s:s,s:{s:s},s:s,s:b},{s:s,s:b,s:b,s:b}]}", "type", "Sequence",
                      "pretokenizers", "type", "Split", "pattern", "Regex", regex, "behavior",
                      "Isolated", "invert", 0, "type", "ByteLevel", "add_prefix_space", 0,
                      "trim_offsets", 0, "use_regex", 0));
    json_object_set_new(root, "model", model);
    buf b = json_buf(root);
    json_decref(root);
    return b;
}

static void tokenizer_seeds(const char *single) {
    buf v = read_file(single, "vocab.json");
    buf m = read_file(single, "merges.txt");
    buf tc = read_file(single, "tokenizer_config.json");
    buf none = {0};
    buf text = str_buf("The quick brown fox can't jump over 12 lazy dogs.\n\n"
                       "<|im_start|>user\nhello there<|im_end|>\n<think>\n</think>  \t x");
    buf cjk = str_buf("\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c "
                      "caf\x65\xcc\x81 \xf0\x9f\x98\x80 \xc3\xa9");
    const char *T = "tokenizer";
    static const char qwen_regex[] =
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
        " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

    seed(T, "vocab-merges-config", 5, (buf[]){none, v, m, tc, text});
    seed(T, "vocab-merges", 3, (buf[]){none, v, m});
    seed(T, "vocab-merges-cjk", 5, (buf[]){none, v, m, tc, cjk});
    buf tj = tokenizer_json(v, m, tc, 0, NULL);
    seed(T, "json-merge-strings", 5, (buf[]){tj, none, none, none, text});
    seed(T, "json-merge-pairs", 5, (buf[]){tokenizer_json(v, m, tc, 1, NULL), none, none, none, text});
    seed(T, "json-qwen-regex", 5,
         (buf[]){tokenizer_json(v, m, tc, 1, qwen_regex), none, none, none, cjk});
    seed(T, "json-bad-regex", 1, (buf[]){tokenizer_json(v, m, tc, 0, "(\\p{L}+")});
    /* Catastrophic backtracking: PCRE2's match limit, a refusal of the text
     * (issue #10 item 16: it was QW_ERR_INTERNAL). */
    seed(T, "json-regex-backtracks", 5,
         (buf[]){tokenizer_json(v, m, tc, 0, "(a|aa)+$"), none, none, none,
                 str_buf("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!")});
    seed(T, "json-and-vocab-merges", 5, (buf[]){tj, v, m, tc, text});
    seed(T, "json-model-wordpiece", 1, (buf[]){replace(tj, "\"BPE\"", "\"WordPiece\"")});

    seed(T, "vocab-huge-id", 5, (buf[]){none, replace(v, ": 0,", ": 2147483646,"), m, tc, text});
    seed(T, "vocab-id-int32-max", 3, (buf[]){none, replace(v, ": 0,", ": 2147483647,"), m});
    seed(T, "vocab-negative-id", 3, (buf[]){none, replace(v, ": 0,", ": -1,"), m});
    seed(T, "vocab-duplicate-id", 3, (buf[]){none, replace(v, ": 0,", ": 1,"), m});
    seed(T, "vocab-id-string", 3, (buf[]){none, replace(v, ": 0,", ": \"0\","), m});
    seed(T, "vocab-missing-byte", 3, (buf[]){none, replace(v, "\"!\": 0,", ""), m});
    seed(T, "vocab-not-object", 3, (buf[]){none, str_buf("[\"a\"]"), m});
    seed(T, "merges-unknown-token", 3, (buf[]){none, v, str_buf("#version: 0.2\nzz qq\n")});
    seed(T, "merges-one-field", 3, (buf[]){none, v, str_buf("#version: 0.2\nabc\n")});
    seed(T, "merges-three-fields", 3, (buf[]){none, v, str_buf("a b c\n")});
    seed(T, "merges-no-newline", 3, (buf[]){none, v, str_buf("h e")});
    seed(T, "added-huge-id", 4,
         (buf[]){none, v, m, replace(tc, "\"298\"", "\"2147483646\"")});
    seed(T, "added-id-not-number", 4, (buf[]){none, v, m, replace(tc, "\"298\"", "\"x298\"")});
    seed(T, "added-overlaps-vocab", 4, (buf[]){none, v, m, replace(tc, "\"298\"", "\"5\"")});
    seed(T, "added-empty-content", 5,
         (buf[]){none, v, m, replace(tc, "\"<think>\"", "\"\""), text});
    seed(T, "text-invalid-utf8", 5, (buf[]){none, v, m, tc, str_buf("ab\xff\xfe\xc0\x80 cd")});
    seed(T, "text-specials-only", 5,
         (buf[]){none, v, m, tc, str_buf("<|im_start|><|im_end|><|endoftext|><think></think>")});
    seed(T, "text-whitespace", 5, (buf[]){none, v, m, tc, str_buf(" \n\n\t\t   \r\n  x  \n")});
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: make_seeds SINGLE_MODEL_DIR SHARDED_MODEL_DIR QUANT_MODELS_DIR OUT_DIR\n");
        return 2;
    }
    out_dir = argv[4];
    mkdir(out_dir, 0755);
    safetensors_seeds(argv[1], argv[2]);
    quant_seeds(argv[3]);
    config_seeds(argv[1]);
    tokenizer_seeds(argv[1]);
    return 0;
}
