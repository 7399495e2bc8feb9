/*
 * quant.h - quantized linear weights as published checkpoints store them
 * (Qwen3-*-FP8 block-scaled e4m3, AutoAWQ GEMM int4, AutoGPTQ/GPTQModel
 * int4/int8): the "quantization_config" of config.json, the tensors of one
 * quantized linear borrowed from the mapping, and their unpacking into plain
 * codes + per-group scales and zero points that the backends repack.
 *
 * Owns: nothing; a qwi_qweight borrows tensors that live as long as the
 * qwi_st_set they were found in.
 */
#ifndef QWI_QUANT_H
#define QWI_QUANT_H

#include "common.h"
#include "safetensors.h"

/* jansson's json_t, declared here so that includers of model.h (the CUDA
 * host code among them) need not see jansson's headers. */
struct json_t;

typedef enum qwi_quant_method { QWI_QUANT_NONE = 0, QWI_QUANT_FP8 = 1, QWI_QUANT_AWQ = 2,
                                QWI_QUANT_GPTQ = 3 } qwi_quant_method;

typedef struct qwi_quant_config {      /* config.json "quantization_config"; method NONE if absent */
    qwi_quant_method method;
    int32_t bits;          /* 4 (AWQ, GPTQ) or 8 (GPTQ, FP8)                                */
    int32_t group_size;    /* AWQ/GPTQ: input columns per group; -1 in the file (GPTQ: one
                              group per row) is kept as -1 and resolved to k per tensor.
                              FP8: weight_block_size[1] (input columns per scale block)   */
    int32_t block_n;       /* FP8: weight_block_size[0] (output rows per block); else 1     */
    bool sym;              /* GPTQ "sym" (AWQ: zero_point true -> false)                    */
    bool desc_act;         /* GPTQ act-order                                                 */
    int32_t zero_offset;   /* added to a stored zero point: 1 for GPTQ checkpoint_format
                              "gptq" (v1 stores zero-1), 0 for "gptq_v2" and AWQ            */
    bool lm_head;          /* GPTQ "lm_head": the output head is quantized like the layers'
                              linears (GPTQModel's lm_head=True); false for AWQ and FP8     */
} qwi_quant_config;

/* The code format kernels see after unpacking. */
typedef enum qwi_qfmt { QWI_QFMT_U4 = 1, QWI_QFMT_U8 = 2, QWI_QFMT_E4M3 = 3 } qwi_qfmt;

typedef struct qwi_qweight {           /* one quantized linear [n out][k in], as in the checkpoint */
    qwi_quant_method method;           /* NONE: the layer's plain qwi_tensor is used instead       */
    qwi_qfmt fmt;
    int64_t n, k;
    int64_t group_k;                   /* input columns per scale group: even, >= 2; AWQ/GPTQ:
                                          k % group_k == 0; FP8: the last block may be partial  */
    int64_t group_n;                   /* output rows sharing one scale: 1, or FP8 block_n      */
    int32_t zero_offset;
    qwi_tensor qweight, qzeros, scales, g_idx;  /* borrowed from the mapping; unused: data NULL.
                                          FP8: qweight = "<prefix>.weight" (F8_E4M3 [n,k]),
                                          scales = "<prefix>.weight_scale_inv" (F32/BF16/F16
                                          [ceil(n/block_n), ceil(k/block_k)])                     */
} qwi_qweight;

/* Number of scale groups along k of w: ceil(k / group_k). */
int64_t qwi_qweight_groups(const qwi_qweight *w);

/* Unpack output rows [r0, r1): codes[(r-r0)*k + c] = unsigned code of (r, c) (U4 0..15, U8
 * 0..255, E4M3 the bit pattern); scales[(r-r0)*G + g] = scale of (r, group g) as f32 (f16/bf16
 * widened exactly); zeros[(r-r0)*G + g] = zero point in code units as f32 (stored zero +
 * zero_offset; 0 for E4M3; zeros may be NULL for E4M3). Dequantized value: (code - zero) * scale
 * for U4/U8, qwi_e4m3_to_f32(code) * scale for E4M3. Pure, thread-safe, cannot fail on a loaded
 * weight. */
void qwi_qweight_unpack_rows(const qwi_qweight *w, int64_t r0, int64_t r1, uint8_t *codes,
                             float *scales, float *zeros);

/* The dequantized element (r, c), in double (tests). */
double qwi_qweight_get(const qwi_qweight *w, int64_t r, int64_t c);

/* Whether every zero point of the AWQ/GPTQ weight w (zero_offset
 * included) is one value, as in a symmetric GPTQ checkpoint (8 for 4 bits,
 * 128 for 8): then true and *zero = that value. false for FP8 and NONE,
 * and *zero untouched. Reads qzeros only (all its words equal and the
 * fields of one word equal). Pure, thread-safe. */
bool qwi_qweight_uniform_zero(const qwi_qweight *w, int32_t *zero);

/* Parse root's "quantization_config" (absent/null -> method NONE) strictly: unknown
 * quant_method, bits, group size, FP8 fmt other than e4m3, block sizes not positive/even, GPTQ
 * checkpoint_format other than gptq/gptq_v2, AWQ version other than gemm, lm_head: true for
 * AWQ or FP8 (neither tool quantizes the head) -> QW_ERR_UNSUPPORTED naming the key and value;
 * GPTQ's lm_head: true sets out->lm_head; wrong JSON types -> QW_ERR_FORMAT. path names
 * the config file in messages. *out is always written (NONE on failure). */
qw_status qwi_quant_config_parse(struct json_t *root, const char *path, qwi_quant_config *out);

/* The GPTQ storage fields of object o (a quantization_config, or one of
 * its "dynamic" rules) into *c: bits (4 or 8), group_size (positive and
 * even, or -1), sym, desc_act. required: bits and group_size must be
 * present; otherwise an absent field keeps the value *c holds. where names
 * o in messages ("quantization_config", "quantization_config.dynamic[...]").
 * A value of the wrong type -> QW_ERR_FORMAT, one outside those ranges ->
 * QW_ERR_UNSUPPORTED, each naming path, where and the field; *c may then
 * hold some of o's values. */
qw_status qwi_quant_gptq_fields(struct json_t *o, const char *path, const char *where,
                                bool required, qwi_quant_config *c);

/* Find and validate the tensors of the linear `prefix` (e.g. "model.layers.3.mlp.up_proj") of
 * shape [n, k] under qc: dtypes and exact shapes; a desc_act g_idx that is not c / group_k is
 * refused with QW_ERR_UNSUPPORTED saying act-order is not supported and to requantize with
 * desc_act=false. A linear shipped as a plain float "<prefix>.weight" loads as method NONE (a
 * module the config left unquantized). *out filled only on QW_OK. */
qw_status qwi_quant_load_linear(const qwi_st_set *set, const qwi_quant_config *qc,
                                const char *prefix, int64_t n, int64_t k, qwi_qweight *out);

#endif
