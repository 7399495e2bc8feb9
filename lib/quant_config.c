/*
 * quant_config.c - config.json "quantization_config" (quant.h).
 *
 * The three shapes it accepts, as the published checkpoints write them:
 *   Qwen3-*-FP8:  {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme":
 *                  "dynamic", "weight_block_size": [128, 128]}
 *   AutoAWQ:      {"quant_method": "awq", "bits": 4, "group_size": 128,
 *                  "zero_point": true, "version": "gemm",
 *                  "modules_to_not_convert": null}
 *   AutoGPTQ / GPTQModel: {"quant_method": "gptq", "bits": 4, "group_size":
 *                  128, "sym": true, "desc_act": false, "checkpoint_format":
 *                  "gptq", "lm_head": false, ...}
 * Keys that change what the stored numbers mean are checked strictly (type
 * and value); bookkeeping keys the quantizers add (damp_percent, meta,
 * true_sequential, ...) are ignored. Activations are never quantized by
 * qwinfer, so FP8 "activation_scheme" may be "static" as well as "dynamic":
 * a static checkpoint's input_scale tensors are simply not read.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "quant.h"
#include "quant_dynamic.h"

/* obj[key], NULL when absent or JSON null. */
static json_t *qc_opt(json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    return v && !json_is_null(v) ? v : NULL;
}

static qw_status qc_str(json_t *q, const char *path, const char *key, const char *def,
                        const char **out) {
    json_t *v = qc_opt(q, key);
    if (!v) { *out = def; return QW_OK; }
    if (!json_is_string(v))
        return qwi_fail(QW_ERR_FORMAT, "%s: quantization_config.%s must be a string", path, key);
    *out = json_string_value(v);
    return QW_OK;
}

/* where: the object q in messages ("quantization_config", or a
 * "dynamic" rule of it); QC for the top level. */
#define QC "quantization_config"

static qw_status qc_bool(json_t *q, const char *path, const char *where, const char *key, bool def,
                         bool *out) {
    json_t *v = qc_opt(q, key);
    if (!v) { *out = def; return QW_OK; }
    if (!json_is_boolean(v))
        return qwi_fail(QW_ERR_FORMAT, "%s: %s.%s must be true or false", path, where, key);
    *out = json_is_true(v);
    return QW_OK;
}

/* An integer key (first of key, alt present; alt may be NULL): *out = def
 * when both are absent; a value outside [-2^30, 2^30] is UNSUPPORTED. */
static qw_status qc_int(json_t *q, const char *path, const char *where, const char *key,
                        const char *alt, int32_t def, bool required, int32_t *out) {
    json_t *v = qc_opt(q, key);
    const char *name = key;
    if (!v && alt) { v = qc_opt(q, alt); name = alt; }
    if (!v) {
        if (required) return qwi_fail(QW_ERR_FORMAT, "%s: %s.%s missing", path, where, key);
        *out = def;
        return QW_OK;
    }
    if (!json_is_integer(v))
        return qwi_fail(QW_ERR_FORMAT, "%s: %s.%s must be an integer", path, where, name);
    json_int_t x = json_integer_value(v);
    if (x < -(1 << 30) || x > (1 << 30))
        return qwi_fail(QW_ERR_UNSUPPORTED, "%s: %s.%s %lld is out of range", path, where, name,
                        (long long)x);
    *out = (int32_t)x;
    return QW_OK;
}

/* modules_to_not_convert: null or a list of strings. The loader does not
 * need the list: a module left unquantized ships a plain float weight,
 * which qwi_quant_load_linear loads as such. */
static qw_status qc_module_list(json_t *q, const char *path, const char *key) {
    json_t *v = qc_opt(q, key);
    if (!v) return QW_OK;
    if (!json_is_array(v))
        return qwi_fail(QW_ERR_FORMAT, "%s: quantization_config.%s must be a list of strings "
                        "or null", path, key);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_string(e))
            return qwi_fail(QW_ERR_FORMAT, "%s: quantization_config.%s[%zu] must be a string",
                            path, key, i);
    }
    return QW_OK;
}

/* An AWQ/GPTQ group size: positive and even (kernels step through weight
 * pairs), or -1 (GPTQ only: one group per row). */
static qw_status qc_group(const char *path, const char *where, const char *key, int32_t g,
                          bool allow_row) {
    if (g == -1 && allow_row) return QW_OK;
    if (g <= 0 || g % 2 != 0)
        return qwi_fail(QW_ERR_UNSUPPORTED, "%s: %s.%s %d is not supported "
                        "(a positive even number of input columns%s)", path, where, key, g,
                        allow_row ? ", or -1" : "");
    return QW_OK;
}

static qw_status qc_fp8(json_t *q, const char *path, qwi_quant_config *c) {
    const char *fmt, *act;
    qw_status st;
    if ((st = qc_str(q, path, "fmt", "e4m3", &fmt)) ||
        (st = qc_str(q, path, "activation_scheme", "dynamic", &act)) ||
        (st = qc_module_list(q, path, "modules_to_not_convert")) ||
        (st = qc_module_list(q, path, "ignored_layers")))
        return st;
    if (strcmp(fmt, "e4m3") != 0)
        return qwi_fail(QW_ERR_UNSUPPORTED, "%s: quantization_config.fmt \"%s\" is not "
                        "supported (e4m3 is)", path, fmt);
    if (strcmp(act, "dynamic") != 0 && strcmp(act, "static") != 0)
        return qwi_fail(QW_ERR_UNSUPPORTED, "%s: quantization_config.activation_scheme \"%s\" "
                        "is not supported (dynamic or static)", path, act);
    json_t *b = qc_opt(q, "weight_block_size");
    if (!b)
        return qwi_fail(QW_ERR_UNSUPPORTED, "%s: quantization_config.weight_block_size missing: "
                        "only block-scaled FP8 checkpoints (Qwen3-*-FP8) are supported", path);
    if (!json_is_array(b) || json_array_size(b) != 2 ||
        !json_is_integer(json_array_get(b, 0)) || !json_is_integer(json_array_get(b, 1)))
        return qwi_fail(QW_ERR_FORMAT, "%s: quantization_config.weight_block_size must be a "
                        "list of two integers", path);
    json_int_t bn = json_integer_value(json_array_get(b, 0));
    json_int_t bk = json_integer_value(json_array_get(b, 1));
    if (bn <= 0 || bk <= 0 || bn % 2 || bk % 2 || bn > (1 << 30) || bk > (1 << 30))
        return qwi_fail(QW_ERR_UNSUPPORTED, "%s: quantization_config.weight_block_size [%lld, "
                        "%lld] is not supported (two positive even sizes)", path,
                        (long long)bn, (long long)bk);
    c->bits = 8;
    c->block_n = (int32_t)bn;
    c->group_size = (int32_t)bk;
    return QW_OK;
}

static qw_status qc_awq(json_t *q, const char *path, qwi_quant_config *c) {
    const char *ver;
    bool zp;
    qw_status st;
    if ((st = qc_int(q, path, QC, "bits", "w_bit", 4, true, &c->bits)) ||
        (st = qc_int(q, path, QC, "group_size", "q_group_size", 128, true, &c->group_size)) ||
        (st = qc_bool(q, path, QC, "zero_point", true, &zp)) ||
        (st = qc_str(q, path, "version", "gemm", &ver)) ||
        (st = qc_module_list(q, path, "modules_to_not_convert")))
        return st;
    if (c->bits != 4)
        return qwi_fail(QW_ERR_UNSUPPORTED, "%s: quantization_config.bits %d is not supported "
                        "for awq (4 is)", path, c->bits);
    if (strcasecmp(ver, "gemm") != 0)
        return qwi_fail(QW_ERR_UNSUPPORTED, "%s: quantization_config.version \"%s\" is not "
                        "supported (AutoAWQ gemm is)", path, ver);
    if (!zp)
        return qwi_fail(QW_ERR_UNSUPPORTED, "%s: quantization_config.zero_point false is not "
                        "supported for awq", path);
    if ((st = qc_group(path, QC, "group_size", c->group_size, false))) return st;
    c->sym = false;
    c->zero_offset = 0;
    return QW_OK;
}

qw_status qwi_quant_gptq_fields(struct json_t *o, const char *path, const char *where,
                                bool required, qwi_quant_config *c) {
    qw_status st;
    /* absent and not required: the value c already holds stays */
    if ((st = qc_int(o, path, where, "bits", NULL, c->bits, required, &c->bits)) ||
        (st = qc_int(o, path, where, "group_size", NULL, c->group_size, required, &c->group_size)) ||
        (st = qc_bool(o, path, where, "sym", c->sym, &c->sym)) ||
        (st = qc_bool(o, path, where, "desc_act", c->desc_act, &c->desc_act)))
        return st;
    if (c->bits != 4 && c->bits != 8)
        return qwi_fail(QW_ERR_UNSUPPORTED, "%s: %s.bits %d is not supported for gptq (4 or 8 "
                        "are)", path, where, c->bits);
    return qc_group(path, where, "group_size", c->group_size, true);
}

static qw_status qc_gptq(json_t *q, const char *path, qwi_quant_config *c) {
    const char *fmt, *pack;
    bool marlin;
    qw_status st;
    c->sym = true;
    c->desc_act = false;
    if ((st = qwi_quant_gptq_fields(q, path, QC, true, c)) ||
        (st = qc_bool(q, path, QC, "lm_head", false, &c->lm_head)) ||
        (st = qc_bool(q, path, QC, "is_marlin_format", false, &marlin)) ||
        (st = qc_str(q, path, "checkpoint_format", "gptq", &fmt)) ||
        (st = qc_str(q, path, "pack_dtype", "int32", &pack)) ||
        (st = qc_module_list(q, path, "modules_to_not_convert")))
        return st;
    if (strcmp(fmt, "gptq") == 0) {
        c->zero_offset = 1; /* v1 stores zero - 1 */
    } else if (strcmp(fmt, "gptq_v2") == 0) {
        c->zero_offset = 0;
    } else {
        return qwi_fail(QW_ERR_UNSUPPORTED, "%s: quantization_config.checkpoint_format \"%s\" "
                        "is not supported (gptq or gptq_v2 are)", path, fmt);
    }
    if (marlin)
        return qwi_fail(QW_ERR_UNSUPPORTED, "%s: quantization_config.is_marlin_format true is "
                        "not supported", path);
    if (strcmp(pack, "int32") != 0)
        return qwi_fail(QW_ERR_UNSUPPORTED, "%s: quantization_config.pack_dtype \"%s\" is not "
                        "supported (int32 is)", path, pack);
    /* GPTQModel's per-module overrides: checked here (so a bad one fails
     * at config load), applied per linear by the model loader. */
    qwi_quant_rules *rules = NULL;
    if ((st = qwi_quant_rules_parse(q, path, c, &rules))) return st;
    qwi_quant_rules_free(rules);
    /* lm_head true (GPTQModel's option): the head ships as lm_head.qweight
     * etc., packed as the layers' linears (model.c loads it). */
    return QW_OK;
}

/* Parse root's "quantization_config" (contract in quant.h). */
qw_status qwi_quant_config_parse(struct json_t *root, const char *path, qwi_quant_config *out) {
    qwi_quant_config c = {.method = QWI_QUANT_NONE, .block_n = 1, .sym = false};
    *out = c;
    json_t *q = qc_opt(root, "quantization_config");
    if (!q) return QW_OK;
    if (!json_is_object(q))
        return qwi_fail(QW_ERR_FORMAT, "%s: \"quantization_config\" must be an object or null",
                        path);
    json_t *m = json_object_get(q, "quant_method");
    if (!m) return qwi_fail(QW_ERR_FORMAT, "%s: quantization_config.quant_method missing", path);
    if (!json_is_string(m))
        return qwi_fail(QW_ERR_FORMAT, "%s: quantization_config.quant_method must be a string",
                        path);
    const char *ms = json_string_value(m);
    qw_status st;
    if (strcmp(ms, "fp8") == 0) {
        c.method = QWI_QUANT_FP8;
        st = qc_fp8(q, path, &c);
    } else if (strcmp(ms, "awq") == 0) {
        c.method = QWI_QUANT_AWQ;
        st = qc_awq(q, path, &c);
    } else if (strcmp(ms, "gptq") == 0) {
        c.method = QWI_QUANT_GPTQ;
        st = qc_gptq(q, path, &c);
    } else {
        return qwi_fail(QW_ERR_UNSUPPORTED, "%s: quantization_config.quant_method \"%s\" is not "
                        "supported (fp8, awq, gptq are)", path, ms);
    }
    if (st != QW_OK) return st;
    /* Only GPTQModel quantizes the head; AutoAWQ and Qwen's FP8 leave it a
     * plain float tensor, so a config of theirs claiming otherwise is refused
     * rather than misread. */
    bool lm_head = false;
    if (c.method != QWI_QUANT_GPTQ && (st = qc_bool(q, path, QC, "lm_head", false, &lm_head)))
        return st;
    if (lm_head)
        return qwi_fail(QW_ERR_UNSUPPORTED, "%s: quantization_config.lm_head true is not "
                        "supported for %s (only gptq quantizes the head)", path, ms);
    *out = c;
    return QW_OK;
}
