/*
 * quant_dynamic.c - GPTQModel "dynamic" per-module overrides
 * (quant_dynamic.h).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "quant_dynamic.h"

typedef struct rule {
    bool skip;                 /* "-:": the module is not quantized   */
    pcre2_code *re;
    pcre2_match_data *md;      /* made at parse, so apply cannot fail */
    qwi_quant_config cfg;      /* base with this rule's overrides     */
} rule;

struct qwi_quant_rules {
    size_t n;
    rule *r;
};

void qwi_quant_rules_free(qwi_quant_rules *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n; i++) {
        pcre2_match_data_free(r->r[i].md);
        pcre2_code_free(r->r[i].re);
    }
    free(r->r);
    free(r);
}

/* Keys a quantizer records per module that do not change how the stored
 * tensors read. */
static bool bookkeeping(const char *k) {
    static const char *const keys[] = {"damp_percent", "damp_auto_increment", "static_groups",
                                       "true_sequential", "mse", "v2", "v2_alpha", "act_group_aware",
                                       "hessian_chunk_size"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strcmp(k, keys[i]) == 0) return true;
    return false;
}

/* The overrides of rule `key` (object o) onto *c: bits, group_size, sym
 * and desc_act, read and checked as the top level's are; other keys that
 * change how the stored tensors read are refused. */
static qw_status overrides(json_t *o, const char *path, const char *key, qwi_quant_config *c) {
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        if (strcmp(k, "bits") && strcmp(k, "group_size") && strcmp(k, "sym") &&
            strcmp(k, "desc_act") && !bookkeeping(k))
            return qwi_fail(QW_ERR_UNSUPPORTED, "%s: quantization_config.dynamic[\"%s\"].%s is not "
                            "supported (bits, group_size, sym and desc_act may be overridden)",
                            path, key, k);
    }
    char where[256];
    snprintf(where, sizeof where, "quantization_config.dynamic[\"%s\"]", key);
    return qwi_quant_gptq_fields(o, path, where, false, c);
}

qw_status qwi_quant_rules_parse(struct json_t *q, const char *path, const qwi_quant_config *base,
                                qwi_quant_rules **out) {
    *out = NULL;
    json_t *d = json_object_get(q, "dynamic");
    if (!d || json_is_null(d)) return QW_OK;
    if (!json_is_object(d))
        return qwi_fail(QW_ERR_FORMAT, "%s: quantization_config.dynamic must be an object", path);
    size_t n = json_object_size(d);
    if (n == 0) return QW_OK;
    qwi_quant_rules *rs = calloc(1, sizeof *rs);
    if (rs) rs->r = calloc(n, sizeof *rs->r);
    if (!rs || !rs->r) {
        free(rs);
        return qwi_fail(QW_ERR_OUT_OF_MEMORY, "%s: out of memory for quantization_config.dynamic", path);
    }
    const char *key;
    json_t *v;
    qw_status st = QW_OK;
    /* jansson keeps an object's keys in file order, and the order decides */
    json_object_foreach(d, key, v) {
        rule *r = &rs->r[rs->n];
        const char *pat = key;
        r->skip = strncmp(key, "-:", 2) == 0;
        if (r->skip || strncmp(key, "+:", 2) == 0) pat += 2;
        if (!json_is_object(v)) {
            st = qwi_fail(QW_ERR_FORMAT, "%s: quantization_config.dynamic[\"%s\"] must be an object",
                          path, key);
            break;
        }
        r->cfg = *base;
        if (!r->skip && (st = overrides(v, path, key, &r->cfg))) break;
        int ec;
        PCRE2_SIZE eo;
        r->re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &eo, NULL);
        if (!r->re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(ec, msg, sizeof msg);
            st = qwi_fail(QW_ERR_FORMAT, "%s: quantization_config.dynamic pattern \"%s\" at offset "
                          "%zu: %s", path, key, (size_t)eo, (const char *)msg);
            break;
        }
        rs->n++;   /* from here the rule's pattern is freed with the set */
        r->md = pcre2_match_data_create_from_pattern(r->re, NULL);
        if (!r->md) {
            st = qwi_fail(QW_ERR_OUT_OF_MEMORY, "%s: out of memory for quantization_config.dynamic",
                          path);
            break;
        }
    }
    if (st != QW_OK) {
        qwi_quant_rules_free(rs);
        return st;
    }
    *out = rs;
    return QW_OK;
}

void qwi_quant_rules_apply(const qwi_quant_rules *r, const char *name, const qwi_quant_config *base,
                           qwi_quant_config *out, bool *skip) {
    *out = *base;
    *skip = false;
    if (!r) return;
    for (size_t i = 0; i < r->n; i++) {
        /* re.match: anchored at the start, the rest of the name free */
        if (pcre2_match(r->r[i].re, (PCRE2_SPTR)name, strlen(name), 0, PCRE2_ANCHORED, r->r[i].md,
                        NULL) < 0)
            continue;
        if (r->r[i].skip) *skip = true;
        else *out = r->r[i].cfg;
        return;
    }
}
