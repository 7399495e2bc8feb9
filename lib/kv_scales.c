/*
 * kv_scales.c - the fp8 KV cache's per-layer scales (see kv_scales.h).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dtype.h"
#include "kv_scales.h"
#include "safetensors.h"

/* The value of the scalar tensor `name`, or 1.0f if the set lacks it. */
static qw_status read_scale(const qwi_st_set *set, const char *name, float *out) {
    const qwi_tensor *t = set ? qwi_st_find(set, name) : NULL;   /* NULL: a model built in memory */
    *out = 1.0f;
    if (!t) return QW_OK;
    if (t->dtype != QWI_DTYPE_F32 && t->dtype != QWI_DTYPE_BF16 && t->dtype != QWI_DTYPE_F16)
        return qwi_fail(QW_ERR_FORMAT, "%s: tensor %s: fp8 KV scale has dtype %s (expected F32, BF16 or F16)",
                        t->file, name, qwi_dtype_name(t->dtype));
    if (!(t->ndim == 0 || (t->ndim == 1 && t->shape[0] == 1)) || !t->data ||
        t->nbytes != qwi_dtype_size(t->dtype))
        return qwi_fail(QW_ERR_FORMAT, "%s: tensor %s: fp8 KV scale must be one number (shape [] or [1])",
                        t->file, name);
    float v;
    if (t->dtype == QWI_DTYPE_F32) {
        memcpy(&v, t->data, 4);
    } else {
        uint16_t h;
        memcpy(&h, t->data, 2);
        v = t->dtype == QWI_DTYPE_BF16 ? qwi_bf16_to_f32(h) : qwi_f16_to_f32(h);
    }
    if (!(isfinite(v) && v > 0.0f))
        return qwi_fail(QW_ERR_FORMAT, "%s: tensor %s: fp8 KV scale %g is not a finite number > 0",
                        t->file, name, (double)v);
    *out = v;
    return QW_OK;
}

qw_status qwi_kv_scales_load(const qwi_model *model, float *k_scale, float *v_scale) {
    char name[96];
    for (int32_t l = 0; l < model->cfg.num_layers; l++) {
        qw_status st;
        snprintf(name, sizeof name, "model.layers.%d.self_attn.k_scale", (int)l);
        if ((st = read_scale(model->weights, name, &k_scale[l])) != QW_OK) return st;
        snprintf(name, sizeof name, "model.layers.%d.self_attn.v_scale", (int)l);
        if ((st = read_scale(model->weights, name, &v_scale[l])) != QW_OK) return st;
    }
    return QW_OK;
}
