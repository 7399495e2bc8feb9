/*
 * model.c - Qwen3/Qwen2 config parsing and the weight layout it implies
 * (see model.h). Names and shapes follow the Hugging Face checkpoints.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "file.h"
#include "model.h"
#include "quant_dynamic.h"

/* Load a JSON object from <dir>/<name>. Missing file -> QW_ERR_IO (or, when
 * optional, QW_OK with *out NULL), as is a FIFO or directory of that name
 * (file.h); bad JSON or not an object -> FORMAT. */
static qw_status qwi_json_load_obj(const char *dir, const char *name, bool optional,
                                   char *path, size_t path_cap, json_t **out) {
    *out = NULL;
    snprintf(path, path_cap, "%s/%s", dir, name);
    char *text = NULL;
    size_t len = 0;
    qw_status st = qwi_file_read(path, optional, &text, &len);
    if (st != QW_OK || !text) return st;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (!root)
        return qwi_fail(QW_ERR_FORMAT, "%s: not valid JSON: %s (line %d)", path, jerr.text,
                        jerr.line);
    if (!json_is_object(root)) {
        json_decref(root);
        return qwi_fail(QW_ERR_FORMAT, "%s: top level is not a JSON object", path);
    }
    *out = root;
    return QW_OK;
}

/* HF writes optional keys as null as often as it omits them. */
static json_t *qwi_json_opt(json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

/* An integer in [lo, hi]: required (missing -> FORMAT) unless def is given.
 * Values in [lo, hi] above limit are well-formed but beyond what qwinfer
 * sizes memory for: QW_ERR_UNSUPPORTED naming the limit, so no absurd value
 * from a file ever reaches the size arithmetic of the engine or a backend. */
static qw_status qwi_cfg_int_lim(json_t *obj, const char *path, const char *key, bool required,
                                 int32_t def, int64_t lo, int64_t hi, int64_t limit,
                                 int32_t *out) {
    json_t *v = required ? json_object_get(obj, key) : qwi_json_opt(obj, key);
    if (!v) {
        if (required) return qwi_fail(QW_ERR_FORMAT, "%s: required key \"%s\" missing", path, key);
        *out = def;
        return QW_OK;
    }
    if (!json_is_integer(v))
        return qwi_fail(QW_ERR_FORMAT, "%s: \"%s\" must be an integer", path, key);
    json_int_t n = json_integer_value(v);
    if (n < lo || n > hi)
        return qwi_fail(QW_ERR_FORMAT, "%s: \"%s\" = %lld out of range [%lld, %lld]", path, key,
                        (long long)n, (long long)lo, (long long)hi);
    if (n > limit)
        return qwi_fail(QW_ERR_UNSUPPORTED, "%s: \"%s\" = %lld is above qwinfer's limit of %lld",
                        path, key, (long long)n, (long long)limit);
    *out = (int32_t)n;
    return QW_OK;
}

/* qwi_cfg_int_lim without a limit of its own beyond hi. */
static qw_status qwi_cfg_int(json_t *obj, const char *path, const char *key, bool required,
                             int32_t def, int64_t lo, int64_t hi, int32_t *out) {
    return qwi_cfg_int_lim(obj, path, key, required, def, lo, hi, hi, out);
}

/* A finite number > 0 (integer or real), at most max (UNSUPPORTED above). */
static qw_status qwi_cfg_pos_real(json_t *obj, const char *path, const char *key, bool required,
                                  double def, double max, double *out) {
    json_t *v = required ? json_object_get(obj, key) : qwi_json_opt(obj, key);
    if (!v) {
        if (required) return qwi_fail(QW_ERR_FORMAT, "%s: required key \"%s\" missing", path, key);
        *out = def;
        return QW_OK;
    }
    if (!json_is_number(v))
        return qwi_fail(QW_ERR_FORMAT, "%s: \"%s\" must be a number", path, key);
    double d = json_number_value(v);
    if (!isfinite(d) || d <= 0)
        return qwi_fail(QW_ERR_FORMAT, "%s: \"%s\" = %g out of range (positive and finite)", path,
                        key, d);
    if (d > max)
        return qwi_fail(QW_ERR_UNSUPPORTED, "%s: \"%s\" = %g is above qwinfer's limit of %g", path,
                        key, d, max);
    *out = d;
    return QW_OK;
}

static qw_status qwi_cfg_bool(json_t *obj, const char *path, const char *key, bool def,
                              bool *out) {
    json_t *v = qwi_json_opt(obj, key);
    if (!v) {
        *out = def;
        return QW_OK;
    }
    if (!json_is_boolean(v))
        return qwi_fail(QW_ERR_FORMAT, "%s: \"%s\" must be true or false", path, key);
    *out = json_is_true(v);
    return QW_OK;
}

/* Merge an eos_token_id value (int, array of ints, or absent) into cfg,
 * dropping duplicates: config.json and generation_config.json usually
 * overlap. */
static qw_status qwi_cfg_add_eos(qwi_config *cfg, json_t *obj, const char *path) {
    json_t *v = qwi_json_opt(obj, "eos_token_id");
    if (!v) return QW_OK;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (!json_is_array(v) && !json_is_integer(v))
        return qwi_fail(QW_ERR_FORMAT, "%s: \"eos_token_id\" must be an integer or an array of "
                        "integers", path);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_integer(e))
            return qwi_fail(QW_ERR_FORMAT, "%s: \"eos_token_id\" must be an integer or an array "
                            "of integers", path);
        json_int_t id = json_integer_value(e);
        if (id < 0 || id >= cfg->vocab_size)
            return qwi_fail(QW_ERR_FORMAT, "%s: eos_token_id %lld outside the vocabulary (%d)",
                            path, (long long)id, cfg->vocab_size);
        bool dup = false;
        for (int32_t k = 0; k < cfg->num_eos; k++) dup = dup || cfg->eos_token_ids[k] == id;
        if (dup) continue;
        if (cfg->num_eos == QWI_MAX_EOS)
            return qwi_fail(QW_ERR_UNSUPPORTED, "%s: more than %d distinct eos_token_id values",
                            path, QWI_MAX_EOS);
        cfg->eos_token_ids[cfg->num_eos++] = (int32_t)id;
    }
    return QW_OK;
}

static qw_status qwi_cfg_bos(qwi_config *cfg, json_t *obj, const char *path) {
    int32_t bos;
    qw_status st = qwi_cfg_int(obj, path, "bos_token_id", false, -1, 0, cfg->vocab_size - 1, &bos);
    if (st == QW_OK && bos >= 0) cfg->bos_token_id = bos;
    return st;
}

/* Which model class: architectures[0], else model_type for hand-made
 * configs that only carry that. */
static qw_status qwi_cfg_arch(json_t *root, const char *path, bool *is_qwen3) {
    json_t *arch = qwi_json_opt(root, "architectures");
    const char *name = NULL;
    if (arch) {
        if (!json_is_array(arch) || json_array_size(arch) == 0 ||
            !json_is_string(json_array_get(arch, 0)))
            return qwi_fail(QW_ERR_FORMAT, "%s: \"architectures\" must be a non-empty array of "
                            "strings", path);
        name = json_string_value(json_array_get(arch, 0));
        if (strcmp(name, "Qwen3ForCausalLM") == 0) { *is_qwen3 = true; return QW_OK; }
        if (strcmp(name, "Qwen2ForCausalLM") == 0) { *is_qwen3 = false; return QW_OK; }
        return qwi_fail(QW_ERR_UNSUPPORTED, "%s: architecture %s is not supported (Qwen3ForCausalLM "
                        "and Qwen2ForCausalLM are)", path, name);
    }
    json_t *mt = qwi_json_opt(root, "model_type");
    if (!mt)
        return qwi_fail(QW_ERR_FORMAT, "%s: required key \"architectures\" missing", path);
    if (!json_is_string(mt))
        return qwi_fail(QW_ERR_FORMAT, "%s: \"model_type\" must be a string", path);
    name = json_string_value(mt);
    if (strcmp(name, "qwen3") == 0) { *is_qwen3 = true; return QW_OK; }
    if (strcmp(name, "qwen2") == 0) { *is_qwen3 = false; return QW_OK; }
    return qwi_fail(QW_ERR_UNSUPPORTED, "%s: model_type %s is not supported", path, name);
}

/* Refuse features we would otherwise silently compute wrong. */
static qw_status qwi_cfg_unsupported(json_t *root, const char *path) {
    json_t *rs = qwi_json_opt(root, "rope_scaling");
    if (rs) {
        if (!json_is_object(rs))
            return qwi_fail(QW_ERR_FORMAT, "%s: \"rope_scaling\" must be an object or null", path);
        json_t *t = json_object_get(rs, "rope_type");
        if (!t) t = json_object_get(rs, "type");
        const char *ts = json_is_string(t) ? json_string_value(t) : NULL;
        if (!ts || strcmp(ts, "default") != 0)
            return qwi_fail(QW_ERR_UNSUPPORTED, "%s: rope_scaling type %s is not supported (no "
                            "YaRN/linear/dynamic RoPE scaling yet)", path, ts ? ts : "(none)");
    }
    bool sw = false;
    qw_status st = qwi_cfg_bool(root, path, "use_sliding_window", false, &sw);
    if (st != QW_OK) return st;
    if (sw)
        return qwi_fail(QW_ERR_UNSUPPORTED, "%s: use_sliding_window=true is not supported", path);
    return QW_OK;
}

static qw_status qwi_cfg_parse(json_t *root, const char *path, qwi_config *c) {
    bool q3 = false;
    qw_status st = qwi_cfg_arch(root, path, &q3);
    if (st != QW_OK) return st;
    c->qk_norm = q3;
    c->bos_token_id = -1;
    if ((st = qwi_cfg_unsupported(root, path)) != QW_OK) return st;

    const int64_t big = INT32_MAX;
    if ((st = qwi_cfg_int_lim(root, path, "vocab_size", true, 0, 1, big, QWI_CFG_MAX_VOCAB,
                              &c->vocab_size)) ||
        (st = qwi_cfg_int_lim(root, path, "hidden_size", true, 0, 1, big, QWI_CFG_MAX_HIDDEN,
                              &c->hidden_size)) ||
        (st = qwi_cfg_int_lim(root, path, "intermediate_size", true, 0, 1, big,
                              QWI_CFG_MAX_INTERMEDIATE, &c->intermediate_size)) ||
        (st = qwi_cfg_int_lim(root, path, "num_hidden_layers", true, 0, 1, big,
                              QWI_CFG_MAX_LAYERS, &c->num_layers)) ||
        (st = qwi_cfg_int_lim(root, path, "num_attention_heads", true, 0, 1, big,
                              QWI_CFG_MAX_HEADS, &c->num_heads)) ||
        (st = qwi_cfg_pos_real(root, path, "rms_norm_eps", true, 0, QWI_CFG_MAX_RMS_EPS,
                               &c->rms_norm_eps)))
        return st;
    if ((st = qwi_cfg_int_lim(root, path, "num_key_value_heads", false, c->num_heads, 1, big,
                              QWI_CFG_MAX_HEADS, &c->num_kv_heads)))
        return st;
    if (!qwi_json_opt(root, "head_dim") && c->hidden_size % c->num_heads != 0)
        return qwi_fail(QW_ERR_FORMAT, "%s: hidden_size %d is not a multiple of "
                        "num_attention_heads %d and head_dim is not given", path,
                        c->hidden_size, c->num_heads);
    if ((st = qwi_cfg_int_lim(root, path, "head_dim", false, c->hidden_size / c->num_heads, 1,
                              big, QWI_CFG_MAX_HEAD_DIM, &c->head_dim)) ||
        (st = qwi_cfg_int_lim(root, path, "max_position_embeddings", false, 32768, 1, big,
                              QWI_CFG_MAX_POSITIONS, &c->max_position_embeddings)) ||
        (st = qwi_cfg_pos_real(root, path, "rope_theta", false, q3 ? 1000000.0 : 10000.0,
                               QWI_CFG_MAX_ROPE_THETA, &c->rope_theta)) ||
        (st = qwi_cfg_bool(root, path, "tie_word_embeddings", false, &c->tie_word_embeddings)))
        return st;
    if (q3) {
        if ((st = qwi_cfg_bool(root, path, "attention_bias", false, &c->qkv_bias))) return st;
    } else {
        c->qkv_bias = true; /* Qwen2/2.5 always have q/k/v biases */
    }
    if (c->num_heads % c->num_kv_heads != 0)
        return qwi_fail(QW_ERR_FORMAT, "%s: num_attention_heads %d is not a multiple of "
                        "num_key_value_heads %d", path, c->num_heads, c->num_kv_heads);
    if (c->head_dim % 2 != 0)
        return qwi_fail(QW_ERR_FORMAT, "%s: head_dim %d must be even for RoPE", path, c->head_dim);
    if ((int64_t)c->num_heads * c->head_dim > INT32_MAX)
        return qwi_fail(QW_ERR_FORMAT, "%s: num_attention_heads * head_dim overflows", path);
    if ((st = qwi_cfg_bos(c, root, path)) || (st = qwi_cfg_add_eos(c, root, path))) return st;
    return qwi_quant_config_parse(root, path, &c->quant);
}

/* Parse <dir>/config.json (+ optional generation_config.json). On success
 * fills *cfg; on failure *cfg is unchanged and the message names file and key. */
qw_status qwi_config_load(const char *dir, qwi_config *cfg) {
    qw_status st = qwi_file_check_dir(dir, "the model path (QW_OPT_MODEL_PATH)");
    if (st != QW_OK) return st;
    size_t cap = strlen(dir) + 32;
    char *path = malloc(cap);
    if (!path) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "config: out of memory");
    qwi_config c;
    memset(&c, 0, sizeof c);
    json_t *root = NULL;
    st = qwi_json_load_obj(dir, "config.json", false, path, cap, &root);
    if (st == QW_OK) st = qwi_cfg_parse(root, path, &c);
    json_decref(root);
    root = NULL;
    if (st == QW_OK) st = qwi_json_load_obj(dir, "generation_config.json", true, path, cap, &root);
    if (st == QW_OK && root) {
        st = qwi_cfg_add_eos(&c, root, path);
        if (st == QW_OK && c.bos_token_id < 0) st = qwi_cfg_bos(&c, root, path);
    }
    json_decref(root);
    free(path);
    if (st == QW_OK) *cfg = c;
    return st;
}

static void qwi_shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* Copy tensor `name` into *dst after checking its shape is exactly
 * [d0] (d1 < 0) or [d0, d1] and that it is a float tensor (F8_E4M3 and I32
 * are read only through the quantized-linear loader, quant.h). */
static qw_status qwi_get(const qwi_model *m, const char *dir, const char *name, int64_t d0,
                         int64_t d1, qwi_tensor *dst) {
    const qwi_tensor *t = qwi_st_find(m->weights, name);
    if (!t) return qwi_fail(QW_ERR_FORMAT, "model %s: tensor %s missing", dir, name);
    if (!qwi_dtype_is_float(t->dtype))
        return qwi_fail(QW_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s where a float tensor "
                        "(F32, BF16, F16) is expected%s", t->file, name,
                        qwi_dtype_name(t->dtype),
                        m->cfg.quant.method == QWI_QUANT_NONE && t->dtype == QWI_DTYPE_F8_E4M3
                            ? " (a quantized checkpoint needs its \"quantization_config\" in "
                              "config.json)"
                            : "");
    int64_t want[2] = {d0, d1};
    int wnd = d1 < 0 ? 1 : 2;
    bool ok = t->ndim == wnd && t->shape[0] == d0 && (wnd == 1 || t->shape[1] == d1);
    if (!ok) {
        char a[96], e[64];
        qwi_shape_str(a, sizeof a, t->ndim, t->shape);
        qwi_shape_str(e, sizeof e, wnd, want);
        return qwi_fail(QW_ERR_FORMAT, "%s: tensor %s has shape %s, expected %s", t->file, name,
                        a, e);
    }
    *dst = *t;
    return QW_OK;
}

/* The plain tensor a quantized linear w leaves in the model (model.h):
 * data NULL, shape [n, k], dtype F32, named after its qweight. */
static void qwi_quant_placeholder(const qwi_qweight *w, qwi_tensor *dst) {
    memset(dst, 0, sizeof *dst);
    dst->name = w->qweight.name;
    dst->file = w->qweight.file;
    dst->dtype = QWI_DTYPE_F32;
    dst->ndim = 2;
    dst->shape[0] = w->n;
    dst->shape[1] = w->k;
}

/* The config module `name` is stored under (GPTQ "dynamic" rules applied)
 * into *qc; QW_ERR_FORMAT when a rule marks it unquantized ("-:") but its
 * float "<name>.weight" is not shipped. *plain: that rule matched. */
static qw_status qwi_module_quant(const qwi_model *m, const qwi_quant_rules *rules, const char *name,
                                  qwi_quant_config *qc, bool *plain) {
    qwi_quant_rules_apply(rules, name, &m->cfg.quant, qc, plain);
    if (!*plain) return QW_OK;
    char w[160];
    snprintf(w, sizeof w, "%s.weight", name);
    const qwi_tensor *t = qwi_st_find(m->weights, w);
    if (!t || !qwi_dtype_is_float(t->dtype))
        return qwi_fail(QW_ERR_FORMAT, "model: quantization_config.dynamic leaves %s unquantized "
                        "(a \"-:\" pattern matches it) but no float %s is shipped", name, w);
    qc->method = QWI_QUANT_NONE;
    return QW_OK;
}

/* Linear `prefix` of layer i, of shape [n, k]: under a quantization
 * config (with rules' per-module overrides applied) through
 * qwi_quant_load_linear (L->quant[idx]); a quantized one leaves *dst with
 * data NULL, shape [n, k], dtype F32 (model.h), a plain one (method NONE)
 * is read as a float tensor like any other. */
static qw_status qwi_load_linear(qwi_model *m, const qwi_quant_rules *rules, const char *dir, int i,
                                 const char *prefix, int idx, int64_t n, int64_t k, qwi_tensor *dst) {
    qwi_layer *L = &m->layers[i];
    char name[128];
    snprintf(name, sizeof name, "model.layers.%d.%s", i, prefix);
    memset(&L->quant[idx], 0, sizeof L->quant[idx]);
    qwi_quant_config qc;
    bool plain = false;
    qw_status mst = qwi_module_quant(m, rules, name, &qc, &plain);
    if (mst != QW_OK) return mst;
    if (qc.method != QWI_QUANT_NONE) {
        qw_status st = qwi_quant_load_linear(m->weights, &qc, name, n, k, &L->quant[idx]);
        if (st != QW_OK) return st;
        if (L->quant[idx].method != QWI_QUANT_NONE) {
            qwi_quant_placeholder(&L->quant[idx], dst);
            return QW_OK;
        }
    }
    snprintf(name, sizeof name, "model.layers.%d.%s.weight", i, prefix);
    return qwi_get(m, dir, name, n, k, dst);
}

/* GPTQ "dynamic" rules of dir's config.json into *out (NULL when there
 * are none, or the format is not GPTQ): parsed a second time here, since
 * qwi_config keeps no JSON (qwi_config_load already validated them). */
static qw_status qwi_load_rules(const qwi_model *m, const char *dir, qwi_quant_rules **out) {
    *out = NULL;
    if (m->cfg.quant.method != QWI_QUANT_GPTQ) return QW_OK;
    size_t cap = strlen(dir) + 32;
    char *path = malloc(cap);
    if (!path) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "config: out of memory");
    json_t *root = NULL;
    qw_status st = qwi_json_load_obj(dir, "config.json", false, path, cap, &root);
    json_t *q = st == QW_OK ? json_object_get(root, "quantization_config") : NULL;
    if (st == QW_OK && json_is_object(q)) st = qwi_quant_rules_parse(q, path, &m->cfg.quant, out);
    json_decref(root);
    free(path);
    return st;
}

/* The output head into m->lm_head (and m->lm_quant): a quantized linear
 * under GPTQ "lm_head": true, else lm_head.weight, or the embedding of a
 * tied model that ships no head (model.h). */
static qw_status qwi_load_head(qwi_model *m, const qwi_quant_rules *rules, const char *dir) {
    const int64_t v = m->cfg.vocab_size, h = m->cfg.hidden_size;
    qwi_quant_config hq;
    bool plain = false;
    memset(&m->lm_quant, 0, sizeof m->lm_quant);
    qw_status st;
    qwi_quant_rules_apply(m->cfg.quant.lm_head ? rules : NULL, "lm_head", &m->cfg.quant, &hq, &plain);
    if (plain) hq.lm_head = false;   /* "-:" on lm_head: the head ships as a float tensor */
    if (hq.method == QWI_QUANT_GPTQ && hq.lm_head) {
        if (!qwi_st_find(m->weights, "lm_head.qweight") && !qwi_st_find(m->weights, "lm_head.weight"))
            return qwi_fail(QW_ERR_FORMAT, "model %s: quantization_config.lm_head is true but "
                            "neither lm_head.qweight nor lm_head.weight is shipped", dir);
        if ((st = qwi_quant_load_linear(m->weights, &hq, "lm_head", v, h, &m->lm_quant)))
            return st;
        if (m->lm_quant.method != QWI_QUANT_NONE) {
            qwi_quant_placeholder(&m->lm_quant, &m->lm_head);
            return QW_OK;
        }
        return qwi_get(m, dir, "lm_head.weight", v, h, &m->lm_head);
    }
    if (qwi_st_find(m->weights, "lm_head.qweight"))
        return qwi_fail(QW_ERR_FORMAT, "model %s: lm_head.qweight is shipped but the config's "
                        "quantization_config does not say \"lm_head\": true (GPTQ)%s", dir,
                        plain ? " (or a dynamic \"-:\" pattern leaves the head unquantized)" : "");
    /* Some tied checkpoints still ship lm_head.weight; prefer what is shipped. */
    if (qwi_st_find(m->weights, "lm_head.weight") || !m->cfg.tie_word_embeddings) {
        st = qwi_get(m, dir, "lm_head.weight", v, h, &m->lm_head);
        if (st != QW_OK && !qwi_st_find(m->weights, "lm_head.weight"))
            qwi_fail(st, "model %s: tensor lm_head.weight missing (tie_word_embeddings is "
                     "false)", dir);
        return st;
    }
    m->lm_head = m->embed;
    return QW_OK;
}

static qw_status qwi_load_layer(qwi_model *m, const qwi_quant_rules *rules, const char *dir, int i) {
    const qwi_config *c = &m->cfg;
    qwi_layer *L = &m->layers[i];
    int64_t h = c->hidden_size, q = (int64_t)c->num_heads * c->head_dim;
    int64_t kv = (int64_t)c->num_kv_heads * c->head_dim, im = c->intermediate_size;
    char n[128];
    qw_status st;
#define QWI_GET(field, suffix, d0, d1)                                             \
    do {                                                                           \
        snprintf(n, sizeof n, "model.layers.%d.%s", i, suffix);                    \
        if ((st = qwi_get(m, dir, n, d0, d1, &L->field)) != QW_OK) return st;      \
    } while (0)
    /* A linear: plain float weight, or quantized (quant.h), when the
     * config says so and the checkpoint ships it quantized. */
#define QWI_LIN(field, idx, prefix, d0, d1)                                        \
    do {                                                                           \
        if ((st = qwi_load_linear(m, rules, dir, i, prefix, idx, d0, d1, &L->field))) \
            return st;                                                             \
    } while (0)
    QWI_GET(input_norm, "input_layernorm.weight", h, -1);
    QWI_LIN(q_proj, QWI_LIN_Q, "self_attn.q_proj", q, h);
    QWI_LIN(k_proj, QWI_LIN_K, "self_attn.k_proj", kv, h);
    QWI_LIN(v_proj, QWI_LIN_V, "self_attn.v_proj", kv, h);
    QWI_LIN(o_proj, QWI_LIN_O, "self_attn.o_proj", h, q);
    if (c->qkv_bias) {
        QWI_GET(q_bias, "self_attn.q_proj.bias", q, -1);
        QWI_GET(k_bias, "self_attn.k_proj.bias", kv, -1);
        QWI_GET(v_bias, "self_attn.v_proj.bias", kv, -1);
    }
    if (c->qk_norm) {
        QWI_GET(q_norm, "self_attn.q_norm.weight", c->head_dim, -1);
        QWI_GET(k_norm, "self_attn.k_norm.weight", c->head_dim, -1);
    }
    QWI_GET(post_norm, "post_attention_layernorm.weight", h, -1);
    QWI_LIN(gate_proj, QWI_LIN_GATE, "mlp.gate_proj", im, h);
    QWI_LIN(up_proj, QWI_LIN_UP, "mlp.up_proj", im, h);
    QWI_LIN(down_proj, QWI_LIN_DOWN, "mlp.down_proj", h, im);
#undef QWI_LIN
#undef QWI_GET
    return QW_OK;
}

/* Load config and weights of <dir>. On success *out is the caller's (free
 * with qwi_model_free); on failure *out is NULL and nothing stays mapped. */
qw_status qwi_model_load(const char *dir, qwi_model **out) {
    *out = NULL;
    qwi_quant_rules *rules = NULL;
    qwi_model *m = calloc(1, sizeof *m);
    if (!m) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "model: out of memory");
    qw_status st = qwi_config_load(dir, &m->cfg);
    if (st != QW_OK) goto fail;
    st = qwi_st_open_dir(dir, &m->weights);
    if (st != QW_OK) goto fail;
    m->layers = calloc((size_t)m->cfg.num_layers, sizeof *m->layers);
    if (!m->layers) {
        st = qwi_fail(QW_ERR_OUT_OF_MEMORY, "model %s: out of memory for %d layers", dir,
                      m->cfg.num_layers);
        goto fail;
    }
    int64_t v = m->cfg.vocab_size, h = m->cfg.hidden_size;
    if ((st = qwi_get(m, dir, "model.embed_tokens.weight", v, h, &m->embed)) ||
        (st = qwi_get(m, dir, "model.norm.weight", h, -1, &m->final_norm)))
        goto fail;
    if ((st = qwi_load_rules(m, dir, &rules)) || (st = qwi_load_head(m, rules, dir))) goto fail;
    for (int i = 0; i < m->cfg.num_layers; i++)
        if ((st = qwi_load_layer(m, rules, dir, i)) != QW_OK) goto fail;
    qwi_quant_rules_free(rules);
    *out = m;
    return QW_OK;
fail:
    qwi_quant_rules_free(rules);
    qwi_model_free(m);
    return st;
}

/* Free the layer table and unmap the weights; NULL is a no-op. */
void qwi_model_free(qwi_model *model) {
    if (!model) return;
    qwi_st_close(model->weights);
    free(model->layers);
    free(model);
}

/* The model's weights stay mapped for its whole life (every qwi_tensor
 * points into the mapping, and the embedding rows, a second backend or a
 * weight check may read them later); a backend that has copied tensors only
 * gives their resident pages back (safetensors.h, qwi_st_evict). */
size_t qwi_model_evict(const qwi_model *model, const void *data, size_t nbytes) {
    return model ? qwi_st_evict(model->weights, data, nbytes) : 0;
}

size_t qwi_model_evict_all(const qwi_model *model) {
    return model ? qwi_st_evict_all(model->weights) : 0;
}
