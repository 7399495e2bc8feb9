/*
 * kv_scales.h - the per-layer scales of an fp8 KV cache
 * (QW_KV_CACHE_FP8_E4M3), read from the checkpoint.
 *
 * A checkpoint calibrated for an fp8 KV cache carries, per decoder layer,
 * "model.layers.{l}.self_attn.k_scale" and ".v_scale" (vLLM's names): one
 * positive finite number each (F32, BF16 or F16; shape [] or [1]). K is
 * stored as e4m3(k / k_scale) and read back times k_scale, so the scale
 * maps the layer's K range onto e4m3's +-448. A layer without them uses
 * 1.0 (no calibration: values beyond +-448 saturate, below 2^-9 flush).
 */
#ifndef QWI_KV_SCALES_H
#define QWI_KV_SCALES_H

#include "common.h"
#include "model.h"

/* Fill k_scale[l] and v_scale[l] for l < model->cfg.num_layers (arrays
 * the caller owns) from the model's k_scale/v_scale tensors, 1.0f where a
 * tensor is absent. A present tensor of another dtype, another shape, or
 * a value that is not finite and > 0 (as f32) -> QW_ERR_FORMAT naming the
 * tensor and its file; the arrays are then partly written. Thread-safe. */
qw_status qwi_kv_scales_load(const qwi_model *model, float *k_scale, float *v_scale);

#endif
