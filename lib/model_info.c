/*
 * model_info.c - qw_engine_get_model_info: what a client needs to know about
 * the loaded model (shape, EOS ids, dtype, context length, tokenizer), read
 * from the engine's immutable fields, so it is safe from any thread.
 */
#include <string.h>

#include "engine.h"
#include "model.h"

static const char *dtype_name(qwi_dtype dt) {
    switch (dt) {
    case QWI_DTYPE_F32: return "float32";
    case QWI_DTYPE_BF16: return "bfloat16";
    case QWI_DTYPE_F16: return "float16";
    case QWI_DTYPE_F8_E4M3: return "float8_e4m3fn"; /* never the embedding's (model.c) */
    case QWI_DTYPE_I32: return "int32";
    }
    return "unknown";
}

static void copy_name(char *dst, size_t cap, const char *src) {
    size_t n = strlen(src);
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

QW_API qw_status qw_engine_get_model_info(const qw_engine *e, qw_model_info *out, size_t out_size) {
    QWI_ERR_SCOPE(e);
    if (!e || !out) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_engine_get_model_info: NULL argument");
    if (out_size < sizeof(uint64_t))
        return qwi_fail(QW_ERR_BUFFER_TOO_SMALL, "qw_engine_get_model_info: out_size %zu is too small", out_size);
    const qwi_model *m = e->model;
    const qwi_config *c = &m->cfg;
    qw_model_info mi;
    memset(&mi, 0, sizeof mi);
    /* qk_norm is what the loader sets for Qwen3ForCausalLM (Qwen2 has biases instead) */
    copy_name(mi.architecture, sizeof mi.architecture, c->qk_norm ? "Qwen3ForCausalLM" : "Qwen2ForCausalLM");
    copy_name(mi.dtype, sizeof mi.dtype, dtype_name(m->embed.dtype));
    mi.vocab_size = c->vocab_size;
    mi.hidden_size = c->hidden_size;
    mi.intermediate_size = c->intermediate_size;
    mi.num_layers = c->num_layers;
    mi.num_heads = c->num_heads;
    mi.num_kv_heads = c->num_kv_heads;
    mi.head_dim = c->head_dim;
    mi.max_position_embeddings = c->max_position_embeddings;
    mi.max_model_len = e->max_model_len;
    mi.rope_theta = c->rope_theta;
    mi.rms_norm_eps = c->rms_norm_eps;
    mi.tie_word_embeddings = c->tie_word_embeddings ? 1 : 0;
    mi.has_tokenizer = e->tokenizer ? 1 : 0;
    mi.bos_token_id = c->bos_token_id;
    mi.num_eos = c->num_eos < QW_MAX_EOS_IDS ? c->num_eos : QW_MAX_EOS_IDS;
    for (int32_t i = 0; i < mi.num_eos; i++) mi.eos_token_ids[i] = c->eos_token_ids[i];
    size_t n = out_size < sizeof mi ? out_size : sizeof mi;
    mi.size = n;
    memcpy(out, &mi, n);
    if (out_size > sizeof mi) memset((char *)out + sizeof mi, 0, out_size - sizeof mi);
    return QW_OK;
}
