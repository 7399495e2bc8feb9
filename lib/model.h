/*
 * model.h - Qwen3 (and Qwen2/2.5) model description: the config read from
 * config.json/generation_config.json and the weight layout it implies.
 *
 * Owns: the safetensors set the weights point into. The mapping lives as long
 * as the model; backends that copy the weights release only its resident
 * pages (qwi_model_evict), never the mapping.
 */
#ifndef QWI_MODEL_H
#define QWI_MODEL_H

#include "common.h"
#include "safetensors.h"
#include "quant.h"

#define QWI_MAX_EOS 8

/* The largest config.json values qwinfer loads (QW_ERR_UNSUPPORTED above,
 * naming the key and the limit). Each is several times the largest released
 * Qwen/Llama-class model's, and together they keep every size the engine and
 * the backends derive from a config (KV bytes per block, plan buffers, RoPE
 * tables, per-layer tensors) far from 32- and 64-bit overflow.
 * QWI_CFG_MAX_POSITIONS equals the upper bound of QW_OPT_MAX_MODEL_LEN. */
#define QWI_CFG_MAX_VOCAB        (1 << 20)   /* Qwen3: 151936, Gemma 3: 262144 */
#define QWI_CFG_MAX_HIDDEN       (1 << 16)   /* Llama 3 405B: 16384            */
#define QWI_CFG_MAX_INTERMEDIATE (1 << 18)   /* Llama 3 405B: 53248            */
#define QWI_CFG_MAX_LAYERS       1024        /* Llama 3 405B: 126              */
#define QWI_CFG_MAX_HEADS        1024        /* Llama 3 405B: 128              */
#define QWI_CFG_MAX_HEAD_DIM     1024        /* Qwen3: 128, Gemma 2: 256       */
#define QWI_CFG_MAX_POSITIONS    (1 << 24)   /* Qwen2.5-1M: 1010000            */
#define QWI_CFG_MAX_ROPE_THETA   1e12        /* Qwen2.5-1M: 1e7                */
#define QWI_CFG_MAX_RMS_EPS      1.0         /* real models: 1e-6 .. 1e-5      */

typedef struct qwi_config {
    int32_t vocab_size;
    int32_t hidden_size;
    int32_t intermediate_size;
    int32_t num_layers;
    int32_t num_heads;
    int32_t num_kv_heads;
    int32_t head_dim;
    int32_t max_position_embeddings;
    double rope_theta;
    double rms_norm_eps;
    bool tie_word_embeddings;
    bool qk_norm;          /* Qwen3: per-head RMSNorm of q and k before RoPE */
    bool qkv_bias;         /* Qwen2/2.5: bias on q, k, v projections          */
    int32_t num_eos;       /* from config.json and generation_config.json      */
    int32_t eos_token_ids[QWI_MAX_EOS];
    int32_t bos_token_id;  /* -1 when absent                                   */
    qwi_quant_config quant;/* "quantization_config"; method NONE when absent   */
} qwi_config;

/* The seven linears of a decoder layer, indexing qwi_layer.quant. */
enum { QWI_LIN_Q, QWI_LIN_K, QWI_LIN_V, QWI_LIN_O, QWI_LIN_GATE, QWI_LIN_UP, QWI_LIN_DOWN,
       QWI_LIN_COUNT };

/* Weights of one decoder layer. Linear weights are [out, in] row-major as in
 * Hugging Face. Bias tensors have data == NULL when the model has none. */
typedef struct qwi_layer {
    qwi_tensor input_norm;   /* [hidden]                         */
    qwi_tensor q_proj;       /* [heads*head_dim, hidden]         */
    qwi_tensor k_proj;       /* [kv_heads*head_dim, hidden]      */
    qwi_tensor v_proj;       /* [kv_heads*head_dim, hidden]      */
    qwi_tensor q_bias, k_bias, v_bias; /* [out] or empty         */
    qwi_tensor q_norm;       /* [head_dim] or empty              */
    qwi_tensor k_norm;       /* [head_dim] or empty              */
    qwi_tensor o_proj;       /* [hidden, heads*head_dim]         */
    qwi_tensor post_norm;    /* [hidden]                         */
    qwi_tensor gate_proj;    /* [intermediate, hidden]           */
    qwi_tensor up_proj;      /* [intermediate, hidden]           */
    qwi_tensor down_proj;    /* [hidden, intermediate]           */
    /* quant[i].method != QWI_QUANT_NONE: linear i (QWI_LIN_*) is quantized
     * and its plain tensor above has data == NULL, ndim 2, shape [n, k],
     * dtype F32 - every reader of a plain linear checks quant[i] first. */
    qwi_qweight quant[QWI_LIN_COUNT];
} qwi_layer;

typedef struct qwi_model {
    qwi_config cfg;
    qwi_tensor embed;        /* [vocab, hidden]                  */
    qwi_tensor final_norm;   /* [hidden]                         */
    qwi_tensor lm_head;      /* [vocab, hidden]; == embed if tied */
    /* lm_quant.method != QWI_QUANT_NONE (GPTQ "lm_head": true): the head is
     * quantized and lm_head, like a quantized layer linear, has data NULL,
     * shape [vocab, hidden], dtype F32 - readers of lm_head check it first. */
    qwi_qweight lm_quant;
    qwi_layer *layers;       /* cfg.num_layers entries           */
    qwi_st_set *weights;
} qwi_model;

/* Parse <dir>/config.json (and generation_config.json if present) into cfg.
 * Required keys missing, of the wrong type or out of their type's range ->
 * QW_ERR_FORMAT naming the key; values above the QWI_CFG_MAX_* limits and
 * architectures other than Qwen3ForCausalLM/Qwen2ForCausalLM ->
 * QW_ERR_UNSUPPORTED naming the key (and limit). A NULL or empty dir ->
 * QW_ERR_INVALID_ARGUMENT; a missing config.json or one that is not a
 * regular file -> QW_ERR_IO naming it. */
qw_status qwi_config_load(const char *dir, qwi_config *cfg);

/* Load config and map weights, checking that every expected tensor is present
 * with the shape the config implies (messages name file and tensor). A tied
 * model that also ships lm_head.weight loads (the shipped tensor is used).
 * Under GPTQ "lm_head": true the head is read as a quantized linear
 * (lm_head.qweight, ...; a plain lm_head.weight is accepted as a head the
 * quantizer left alone), tied or not: what is shipped is used; a
 * lm_head.qweight under a config that does not say lm_head: true is
 * QW_ERR_FORMAT rather than silently ignored. GPTQ "dynamic" rules
 * (quant_dynamic.h) decide per linear (and for a quantized head) the bits,
 * group size, sym and desc_act it is read with, or that it is a float
 * weight.
 * On success *out is owned by the caller; on failure *out is NULL and
 * nothing leaks. */
qw_status qwi_model_load(const char *dir, qwi_model **out);

/* Give back this process's resident pages of a weight range that lies in
 * the model's file mapping, after a backend has copied what it needs from
 * it (qwi_st_evict): the mapping stays, so every tensor pointer of the
 * model stays valid, and a later reader (embedding rows, another backend,
 * the weight check) faults the unchanged bytes back in. Memory outside the
 * mapping (a model built in memory) is not touched. Returns the bytes
 * released (0 when none). Safe while other threads read the weights. */
size_t qwi_model_evict(const qwi_model *model, const void *data, size_t nbytes);

/* qwi_model_evict of the whole mapping; returns the bytes released. */
size_t qwi_model_evict_all(const qwi_model *model);

/* Free a model and unmap its weights. NULL is a no-op. */
void qwi_model_free(qwi_model *model);

#endif
