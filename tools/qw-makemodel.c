/*
 * qw-makemodel - write a seeded random Qwen3 (or Qwen2) checkpoint in Hugging
 * Face format: config.json, generation_config.json and safetensors weights
 * (one file, or N shards plus model.safetensors.index.json).
 *
 *   qw-makemodel --shape NAME --out DIR [--dtype f32|bf16|f16] [--seed N]
 *                [--tied|--untied] [--tied-with-lm-head] [--shards N]
 *                [--arch qwen3|qwen2] [--hidden N --layers N --heads N
 *                --kv-heads N --head-dim N --intermediate N --vocab N
 *                --max-pos N --rope-theta X --rms-eps X --eos N] [--no-tokenizer]
 *                [--quant none|fp8|awq|gptq] [--bits 4|8] [--group-size N]
 *                [--fp8-block N] [--gptq-asym] [--gptq-format gptq|gptq_v2]
 *                [--gptq-desc-act] [--gptq-lm-head] [--gptq-dynamic JSON]
 *                [--kv-scale X]
 *
 * --quant stores the 7 linear layers of every decoder layer the way the
 * published quantized checkpoints do (docs/quantization.md): Qwen3-FP8
 * (F8_E4M3 weight + block weight_scale_inv), AutoAWQ GEMM (4-bit, qweight /
 * qzeros / scales, AWQ's column interleave) or AutoGPTQ/GPTQModel (4 or 8
 * bits, packed along the input dimension, g_idx; checkpoint_format gptq
 * stores zero - 1, gptq_v2 the zero). The codes are round-to-nearest of the
 * very weights a --quant none model of the same seed holds (after its
 * --dtype rounding), so that model is the quantized one's unquantized twin.
 * --gptq-lm-head also quantizes the output head, as GPTQModel's lm_head=True
 * does ("lm_head": true, lm_head.qweight/qzeros/scales/g_idx): a tied shape's
 * head is its embedding quantized, and the config then says
 * tie_word_embeddings false (the float embedding stays for the input).
 * --gptq-dynamic JSON writes GPTQModel's per-module overrides (the
 * "dynamic" object of the config, lib/quant_dynamic.h) and stores each
 * linear by its rule: "-:" ones as the twin's float weight, "+:" ones with
 * their bits / group_size / sym / desc_act.
 * --kv-scale X adds per-layer self_attn.k_scale / v_scale tensors (F32, X).
 *
 * It also writes a tokenizer (vocab.json, merges.txt, tokenizer_config.json
 * in Hugging Face's Qwen2Tokenizer format): a byte-level BPE learned from a
 * built-in sample text, with <|endoftext|>, <|im_start|>, <|im_end|>,
 * <think> and </think>. Tiny vocabularies put them at the top (<|im_end|> =
 * eos = vocab-1, <|endoftext|> = bos = vocab-2); the real 151936 vocabulary
 * gets Qwen's ids (151643..151668) with the same small learned vocabulary
 * below (ids in between name no token). Vocabularies under 262 get none.
 *
 * Weights are streamed: the safetensors header is computed from the shapes
 * first, then each tensor is generated and written in fixed-size chunks, so
 * the 64 GB 32b shape needs only a few MB of memory.
 *
 * Values are deterministic for a given seed whatever the dtype or sharding:
 * each tensor has its own PRNG stream keyed by (seed, tensor name), values are
 * generated in f32 and then converted.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "dtype.h"
#include "fp8.h"
#include "qwinfer.h"
#include "quant_dynamic.h"

#define MAX_SHARDS 99
#define CHUNK_ELEMS (1u << 20) /* elements generated per write */

/* ---- shapes ------------------------------------------------------------------ */

typedef struct shape {
    const char *name;
    int hidden, layers, heads, kv_heads, head_dim, intermediate, vocab, max_pos;
    bool tied;
} shape;

/* The real Qwen3 configs (Hugging Face Qwen/Qwen3-*), plus a tiny test model.
 * All real ones share vocab 151936, rope_theta 1e6, max_pos 40960, rms 1e-6. */
static const shape SHAPES[] = {
    {"tiny", 64, 2, 4, 2, 16, 128, 512, 2048, true},
    {"0.6b", 1024, 28, 16, 8, 128, 3072, 151936, 40960, true},
    {"1.7b", 2048, 28, 16, 8, 128, 6144, 151936, 40960, true},
    {"4b", 2560, 36, 32, 8, 128, 9728, 151936, 40960, true},
    {"8b", 4096, 36, 32, 8, 128, 12288, 151936, 40960, false},
    {"14b", 5120, 40, 40, 8, 128, 17408, 151936, 40960, false},
    {"32b", 5120, 64, 64, 8, 128, 25600, 151936, 40960, false},
};

/* Qwen's special token ids (<|endoftext|>, <|im_end|>). */
#define QWEN_BOS 151643
#define QWEN_EOS 151645

/* ---- options ----------------------------------------------------------------- */

typedef enum out_dtype { OUT_F32, OUT_BF16, OUT_F16 } out_dtype;

typedef enum quant_kind { Q_NONE, Q_FP8, Q_AWQ, Q_GPTQ } quant_kind;

typedef struct options {
    shape s;
    const char *out;
    out_dtype dtype;
    uint64_t seed;
    bool tied;
    bool ship_lm_head; /* lm_head.weight is written (untied, or --tied-with-lm-head) */
    int shards;
    bool qwen2;
    double rope_theta;
    double rms_eps;
    int eos; /* -1: default for the shape */
    bool no_tokenizer;
    quant_kind quant;
    int bits;          /* GPTQ 4|8; AWQ 4; FP8 8                           */
    int group;         /* AWQ/GPTQ input columns per group; GPTQ -1 = k    */
    int fp8_block;     /* FP8: block_n = block_k                           */
    bool gptq_asym, gptq_v2, gptq_desc_act;
    bool gptq_lm_head; /* the head quantized too; its float values from head_stream */
    json_t *gptq_dynamic;     /* --gptq-dynamic: the config's "dynamic" object     */
    qwi_quant_rules *rules;   /* ... compiled (quant_dynamic.h)                    */
    const char *head_stream; /* "lm_head.weight", or a tied shape's embedding */
    double kv_scale;   /* > 0: write k_scale / v_scale tensors             */
} options;

/* ---- tensors ----------------------------------------------------------------- */

typedef enum init_kind {
    INIT_LINEAR, /* uniform, std 1/sqrt(fan_in): keeps activations O(1) */
    INIT_EMBED,  /* uniform, std 1/sqrt(hidden): rows of norm about 1     */
    INIT_NORM,   /* 1 + uniform(-0.1, 0.1)                               */
    INIT_FINAL,  /* 4 * (1 + uniform(-0.1, 0.1)): the logit gain         */
    INIT_BIAS    /* uniform, std 0.05                                    */
} init_kind;

/* What a tensor's bytes are: generated floats, or one part of a quantized
 * linear (all parts of one linear are computed together, from the float
 * weight the stream "<prefix>.weight" gives), or a KV cache scale. */
typedef enum tensor_role {
    ROLE_FLOAT,
    ROLE_QWEIGHT,      /* AWQ/GPTQ packed codes, I32                    */
    ROLE_QZEROS,       /* AWQ/GPTQ packed zero points, I32              */
    ROLE_SCALES,       /* AWQ/GPTQ scales, F16                          */
    ROLE_GIDX,         /* GPTQ g_idx, I32                               */
    ROLE_FP8_WEIGHT,   /* FP8 codes, F8_E4M3                            */
    ROLE_FP8_SCALE,    /* FP8 weight_scale_inv, in --dtype              */
    ROLE_KV_SCALE,     /* self_attn.k_scale / v_scale, F32 scalar       */
    ROLE_COUNT
} tensor_role;

typedef struct tensor {
    char name[96];
    char stream[96];   /* PRNG stream name: lm_head copy of embed uses the embed's;
                          a quantized linear's parts use "<prefix>.weight"       */
    int64_t dims[2];
    int ndim;          /* 0 (a scalar), 1 or 2 */
    tensor_role role;
    const char *st_dtype; /* NULL: --dtype */
    size_t esz;           /* 0: --dtype's */
    int64_t lin_n, lin_k; /* quantized parts: the linear's [out, in] */
    bool qover;           /* GPTQ parts under a --gptq-dynamic rule: its values below */
    int qbits, qgroup;
    bool qasym, qdesc;
    init_kind kind;
    int64_t fan_in;
    int shard;
    uint64_t offset;   /* data offset within its shard's data section */
} tensor;

typedef struct tensor_list {
    tensor *t;
    size_t n, cap;
} tensor_list;

static int64_t tensor_numel(const tensor *t) {
    return t->ndim == 0 ? 1 : t->ndim == 1 ? t->dims[0] : t->dims[0] * t->dims[1];
}

static void add_tensor(tensor_list *l, const char *name, const char *stream, int ndim,
                       int64_t d0, int64_t d1, init_kind kind) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->t = realloc(l->t, l->cap * sizeof(tensor));
        if (!l->t) { fprintf(stderr, "qw-makemodel: out of memory\n"); exit(1); }
    }
    tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    snprintf(t->stream, sizeof(t->stream), "%s", stream ? stream : name);
    t->ndim = ndim;
    t->dims[0] = d0;
    t->dims[1] = d1;
    t->kind = kind;
    t->fan_in = ndim == 2 ? d1 : d0;
}

/* A part of a quantized linear: name "<prefix>.<suffix>", values derived
 * from the float weight stream "<prefix>.weight" of shape [n, k]. */
static void add_qpart(tensor_list *l, const char *prefix, const char *suffix, tensor_role role,
                      const char *st_dtype, size_t esz, int ndim, int64_t d0, int64_t d1,
                      int64_t n, int64_t k) {
    char name[96], stream[96];
    snprintf(name, sizeof name, "%s.%s", prefix, suffix);
    snprintf(stream, sizeof stream, "%s.weight", prefix);
    add_tensor(l, name, stream, ndim, d0, d1, INIT_LINEAR);
    tensor *t = &l->t[l->n - 1];
    t->role = role;
    t->st_dtype = st_dtype;
    t->esz = esz;
    t->lin_n = n;
    t->lin_k = k;
    t->fan_in = k;
}

/* The effective group of a GPTQ/AWQ linear with k inputs (-1: one group). */
static int64_t group_of(const options *o, int64_t k) { return o->group < 0 ? k : o->group; }

/* The GPTQ config the options write (what --gptq-dynamic's rules override). */
static qwi_quant_config gptq_base(const options *o) {
    return (qwi_quant_config){.method = QWI_QUANT_GPTQ, .bits = o->bits, .group_size = o->group,
                              .block_n = 1, .sym = !o->gptq_asym, .desc_act = o->gptq_desc_act};
}

/* --gptq-dynamic's rule for the linear `prefix` [n, k]: *skip (stored as
 * a float weight), or the bits / group / asym / desc_act to store it with
 * (exits with status 2 when they cannot store it). */
static void dynamic_rule(const options *o, const char *prefix, int64_t n, int64_t k, bool *skip,
                         qwi_quant_config *c) {
    const qwi_quant_config base = gptq_base(o);
    qwi_quant_rules_apply(o->rules, prefix, &base, c, skip);
    if (*skip) return;
    int64_t g = c->group_size < 0 ? k : c->group_size, per = 32 / c->bits;
    if (k % g || k % per || n % per) {
        fprintf(stderr, "qw-makemodel: --gptq-dynamic: %s [%lld out, %lld in] cannot be stored "
                "with %d bits in groups of %d\n", prefix, (long long)n, (long long)k, c->bits,
                c->group_size);
        exit(2);
    }
}

/* The tensors of the linear `prefix` ([n out, k in]) under --quant. */
static void add_linear(tensor_list *l, const options *o, const char *prefix, int64_t n,
                       int64_t k) {
    char name[96];
    if (o->quant == Q_GPTQ && o->rules) {
        bool skip = false;
        qwi_quant_config c;
        dynamic_rule(o, prefix, n, k, &skip, &c);
        if (skip) {
            snprintf(name, sizeof name, "%s.weight", prefix);
            add_tensor(l, name, NULL, 2, n, k, INIT_LINEAR);
            return;
        }
        options lo = *o;
        lo.bits = c.bits;
        lo.group = c.group_size;
        lo.gptq_asym = !c.sym;
        lo.gptq_desc_act = c.desc_act;
        lo.rules = NULL;
        size_t first = l->n;
        add_linear(l, &lo, prefix, n, k);
        for (size_t i = first; i < l->n; i++) {
            tensor *t = &l->t[i];
            t->qover = true;
            t->qbits = lo.bits;
            t->qgroup = lo.group;
            t->qasym = lo.gptq_asym;
            t->qdesc = lo.gptq_desc_act;
        }
        return;
    }
    if (o->quant == Q_NONE) {
        snprintf(name, sizeof name, "%s.weight", prefix);
        add_tensor(l, name, NULL, 2, n, k, INIT_LINEAR);
    } else if (o->quant == Q_FP8) {
        int64_t b = o->fp8_block;
        add_qpart(l, prefix, "weight", ROLE_FP8_WEIGHT, "F8_E4M3", 1, 2, n, k, n, k);
        add_qpart(l, prefix, "weight_scale_inv", ROLE_FP8_SCALE, NULL, 0, 2, (n + b - 1) / b,
                  (k + b - 1) / b, n, k);
    } else if (o->quant == Q_AWQ) {
        int64_t g = group_of(o, k), pack = 32 / o->bits;
        add_qpart(l, prefix, "qweight", ROLE_QWEIGHT, "I32", 4, 2, k, n / pack, n, k);
        add_qpart(l, prefix, "qzeros", ROLE_QZEROS, "I32", 4, 2, k / g, n / pack, n, k);
        add_qpart(l, prefix, "scales", ROLE_SCALES, "F16", 2, 2, k / g, n, n, k);
    } else {
        int64_t g = group_of(o, k), pack = 32 / o->bits;
        add_qpart(l, prefix, "qweight", ROLE_QWEIGHT, "I32", 4, 2, k / pack, n, n, k);
        add_qpart(l, prefix, "qzeros", ROLE_QZEROS, "I32", 4, 2, k / g, n / pack, n, k);
        add_qpart(l, prefix, "scales", ROLE_SCALES, "F16", 2, 2, k / g, n, n, k);
        add_qpart(l, prefix, "g_idx", ROLE_GIDX, "I32", 4, 1, k, 0, n, k);
    }
}

/* The Hugging Face tensor set implied by the options, in model order. */
static void build_tensors(const options *o, tensor_list *l) {
    const shape *s = &o->s;
    int64_t q_out = (int64_t)s->heads * s->head_dim;
    int64_t kv_out = (int64_t)s->kv_heads * s->head_dim;
    char n[96];
    add_tensor(l, "model.embed_tokens.weight", NULL, 2, s->vocab, s->hidden, INIT_EMBED);
    for (int i = 0; i < s->layers; i++) {
#define LNAME(suffix) (snprintf(n, sizeof(n), "model.layers.%d.%s", i, suffix), n)
        add_tensor(l, LNAME("input_layernorm.weight"), NULL, 1, s->hidden, 0, INIT_NORM);
        add_linear(l, o, LNAME("self_attn.q_proj"), q_out, s->hidden);
        add_linear(l, o, LNAME("self_attn.k_proj"), kv_out, s->hidden);
        add_linear(l, o, LNAME("self_attn.v_proj"), kv_out, s->hidden);
        if (o->qwen2) {
            add_tensor(l, LNAME("self_attn.q_proj.bias"), NULL, 1, q_out, 0, INIT_BIAS);
            add_tensor(l, LNAME("self_attn.k_proj.bias"), NULL, 1, kv_out, 0, INIT_BIAS);
            add_tensor(l, LNAME("self_attn.v_proj.bias"), NULL, 1, kv_out, 0, INIT_BIAS);
        }
        add_linear(l, o, LNAME("self_attn.o_proj"), s->hidden, q_out);
        if (!o->qwen2) {
            add_tensor(l, LNAME("self_attn.q_norm.weight"), NULL, 1, s->head_dim, 0, INIT_NORM);
            add_tensor(l, LNAME("self_attn.k_norm.weight"), NULL, 1, s->head_dim, 0, INIT_NORM);
        }
        if (o->kv_scale > 0) {
            /* vLLM's names for a checkpoint's fp8 KV cache scales: F32 scalars */
            add_tensor(l, LNAME("self_attn.k_scale"), NULL, 0, 0, 0, INIT_BIAS);
            l->t[l->n - 1].role = ROLE_KV_SCALE;
            l->t[l->n - 1].st_dtype = "F32";
            l->t[l->n - 1].esz = 4;
            add_tensor(l, LNAME("self_attn.v_scale"), NULL, 0, 0, 0, INIT_BIAS);
            l->t[l->n - 1].role = ROLE_KV_SCALE;
            l->t[l->n - 1].st_dtype = "F32";
            l->t[l->n - 1].esz = 4;
        }
        add_tensor(l, LNAME("post_attention_layernorm.weight"), NULL, 1, s->hidden, 0, INIT_NORM);
        add_linear(l, o, LNAME("mlp.gate_proj"), s->intermediate, s->hidden);
        add_linear(l, o, LNAME("mlp.up_proj"), s->intermediate, s->hidden);
        add_linear(l, o, LNAME("mlp.down_proj"), s->hidden, s->intermediate);
#undef LNAME
    }
    add_tensor(l, "model.norm.weight", NULL, 1, s->hidden, 0, INIT_FINAL);
    if (o->gptq_lm_head) {
        /* The head's parts quantize the float head a --quant none twin
         * holds: its lm_head.weight, or for a tied shape its embedding
         * (INIT_LINEAR over hidden inputs has INIT_EMBED's scale). */
        size_t first = l->n;
        add_linear(l, o, "lm_head", s->vocab, s->hidden);
        for (size_t i = first; i < l->n; i++)
            snprintf(l->t[i].stream, sizeof l->t[i].stream, "%s", o->head_stream);
    } else if (o->ship_lm_head) {
        /* A tied model that ships lm_head carries an exact copy of the
         * embedding, so it reuses the embedding's stream. An untied head gets
         * the embedding's scale so tied and untied logits have similar spread. */
        add_tensor(l, "lm_head.weight", o->tied ? "model.embed_tokens.weight" : NULL, 2,
                   s->vocab, s->hidden, INIT_EMBED);
    }
}

/* ---- PRNG and value generation ------------------------------------------------ */

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Stream seed from (seed, name): FNV-1a of the name, mixed with the seed, so a
 * tensor's values depend on neither its position nor the shard it lands in. */
static uint64_t stream_seed(uint64_t seed, const char *name) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ull;
    }
    uint64_t st = seed ^ h;
    return splitmix64(&st);
}

/* Fill dst[0..n) with uniform values in [-1, 1). Each 64-bit draw yields two
 * 24-bit mantissas, so the i-th value depends only on the stream and i. n is
 * even except possibly at the very end of a tensor. */
static void fill_uniform(uint64_t *state, float *dst, size_t n) {
    const float scale = 1.0f / 8388608.0f; /* 2^-23: 24 bits -> [0, 2) */
    size_t i = 0;
    for (; i + 1 < n; i += 2) {
        uint64_t r = splitmix64(state);
        dst[i] = (float)(r >> 40) * scale - 1.0f;
        dst[i + 1] = (float)((r >> 16) & 0xffffffu) * scale - 1.0f;
    }
    if (i < n) {
        uint64_t r = splitmix64(state);
        dst[i] = (float)(r >> 40) * scale - 1.0f;
    }
}


/* ---- writing ------------------------------------------------------------------ */

static const char *dtype_st_name(out_dtype d) {
    return d == OUT_F32 ? "F32" : d == OUT_BF16 ? "BF16" : "F16";
}

static const char *dtype_torch_name(out_dtype d) {
    return d == OUT_F32 ? "float32" : d == OUT_BF16 ? "bfloat16" : "float16";
}

static size_t dtype_bytes(out_dtype d) { return d == OUT_F32 ? 4 : 2; }

static uint64_t tensor_bytes(const options *o, const tensor *t) {
    return (uint64_t)tensor_numel(t) * (t->esz ? t->esz : dtype_bytes(o->dtype));
}

static const char *tensor_st_dtype(const options *o, const tensor *t) {
    return t->st_dtype ? t->st_dtype : dtype_st_name(o->dtype);
}

static void shard_file_name(const options *o, int shard, char *buf, size_t cap) {
    if (o->shards == 1)
        snprintf(buf, cap, "model.safetensors");
    else
        snprintf(buf, cap, "model-%05d-of-%05d.safetensors", shard + 1, o->shards);
}

/* Assign tensors to shards in order, cutting at about total/N bytes, with
 * every shard getting at least one tensor. */
static int assign_shards(const options *o, tensor_list *l) {
    if ((size_t)o->shards > l->n) {
        fprintf(stderr, "qw-makemodel: --shards %d exceeds the %zu tensors\n", o->shards, l->n);
        return -1;
    }
    uint64_t total = 0, cum = 0;
    for (size_t i = 0; i < l->n; i++) total += tensor_bytes(o, &l->t[i]);
    int s = 0;
    size_t in_shard = 0;
    for (size_t i = 0; i < l->n; i++) {
        size_t left = l->n - i;            /* tensors still to place, this one included */
        int shards_after = o->shards - 1 - s;
        bool past_target = (double)cum >= (double)total * (s + 1) / o->shards;
        if (in_shard > 0 && shards_after > 0 && (past_target || left <= (size_t)shards_after)) {
            s++;
            in_shard = 0;
        }
        l->t[i].shard = s;
        in_shard++;
        cum += tensor_bytes(o, &l->t[i]);
    }
    return 0;
}

/* The header JSON for one shard, padded with spaces so that 8 + its length is a
 * multiple of 8 (the data section starts aligned). Sets offsets. malloc'd. */
static char *shard_header(const options *o, tensor_list *l, int shard, size_t *len,
                          uint64_t *data_bytes) {
    json_t *root = json_object();
    json_t *meta = json_object();
    json_object_set_new(meta, "format", json_string("pt"));
    json_object_set_new(root, "__metadata__", meta);
    uint64_t off = 0;
    for (size_t i = 0; i < l->n; i++) {
        tensor *t = &l->t[i];
        if (t->shard != shard) continue;
        uint64_t nb = tensor_bytes(o, t);
        t->offset = off;
        json_t *e = json_object();
        json_object_set_new(e, "dtype", json_string(tensor_st_dtype(o, t)));
        json_t *shp = json_array();
        for (int d = 0; d < t->ndim; d++) json_array_append_new(shp, json_integer(t->dims[d]));
        json_object_set_new(e, "shape", shp);
        json_t *offs = json_array();
        json_array_append_new(offs, json_integer((json_int_t)off));
        json_array_append_new(offs, json_integer((json_int_t)(off + nb)));
        json_object_set_new(e, "data_offsets", offs);
        json_object_set_new(root, t->name, e);
        off += nb;
    }
    char *s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!s) return NULL;
    size_t n = strlen(s);
    size_t padded = n + (8 - (8 + n) % 8) % 8;
    char *out = malloc(padded + 1);
    if (out) {
        memcpy(out, s, n);
        memset(out + n, ' ', padded - n);
        out[padded] = 0;
    }
    free(s);
    *len = padded;
    *data_bytes = off;
    return out;
}

/* Scale applied to uniform [-1,1) values: std of U(-a,a) is a/sqrt(3).
 *
 * Why these scales: with linear weights of std 1/sqrt(fan_in) every normed
 * sublayer adds O(1) to the residual stream, so activations stay finite
 * through 64 layers. Embeddings are small (row norm ~1) so that, in a tied
 * model, the residual does not stay dominated by the input token's own
 * embedding: with std ~1 embeddings a 2-layer model greedily repeats its last
 * input token. The logits (normed hidden . embedding row) then have std ~1,
 * and the final norm's gain of 4 gives them a spread of a few units, so
 * greedy decoding is neither flat nor degenerate. */
static float init_scale(const tensor *t) {
    switch (t->kind) {
    case INIT_LINEAR: return (float)(sqrt(3.0) / sqrt((double)t->fan_in));
    case INIT_EMBED: return (float)(sqrt(3.0) / sqrt((double)t->dims[1]));
    case INIT_NORM: return 0.1f;
    case INIT_FINAL: return 0.4f;
    case INIT_BIAS: return (float)(0.05 * sqrt(3.0));
    }
    return 1.0f;
}

/* ---- quantized linears ---------------------------------------------------------
 *
 * Every format quantizes the float weight a --quant none model of the same
 * seed stores (generated, then rounded to --dtype), by round-to-nearest
 * (ties to even, as torch.round) with the scale as it is stored, so the
 * stored codes dequantize exactly as a loader reads them. What matters for
 * a loader is the storage, which follows the published tools:
 *
 * FP8 (Qwen3-*-FP8, DeepSeek-V3 style): weight F8_E4M3 [n, k]; one scale per
 * block of block x block (the last blocks partial), scale = amax / 448,
 * stored as weight_scale_inv [ceil(n/b), ceil(k/b)] in the model's dtype
 * (Qwen ships BF16); value = e4m3(code) * weight_scale_inv.
 *
 * AWQ (AutoAWQ WQLinear_GEMM, version "gemm"): 4-bit asymmetric min-max per
 * group of g input columns (scale = max(max - min, 1e-5) / 15, zero =
 * clamp(-round(min / scale), 0, 15)); qweight I32 [k, n/8] and qzeros I32
 * [k/g, n/8] pack 8 output columns per word, nibble i holding column
 * 8j + {0,2,4,6,1,3,5,7}[i]; scales F16 [k/g, n]; value = (q - z) * s.
 *
 * GPTQ (AutoGPTQ / GPTQModel QuantLinear.pack): GPTQ's quantizer (range
 * widened to include 0; sym: symmetric range, zero = (maxq + 1) / 2; asym:
 * zero = round(-min / scale)); qweight I32 [k*bits/32, n] packs 32/bits
 * input rows per word (row i*per + t at bit bits*t); qzeros I32 [G,
 * n*bits/32] packs along n the same way, storing zero - 1 for
 * checkpoint_format "gptq" (v1) and zero for "gptq_v2"; scales F16 [G, n];
 * g_idx I32 [k] = the group of each input column. v1 cannot store a zero of
 * 0 (it would wrap to maxq), so v1 asym zeros are raised to at least 1.
 * --gptq-desc-act writes an act-order checkpoint: the columns are grouped in
 * a seeded random order (g_idx[c] = position of c in it / g), as GPTQ's
 * desc_act grouping by the Hessian order would leave them.
 */

typedef struct qcache {
    char stream[96];               /* the linear whose parts are held */
    uint8_t *buf[ROLE_COUNT];
    size_t len[ROLE_COUNT];
} qcache;

static qcache g_qcache;

static void *xcalloc(size_t n, size_t sz) {
    void *p = calloc(n ? n : 1, sz);
    if (!p) { fprintf(stderr, "qw-makemodel: out of memory\n"); exit(1); }
    return p;
}

/* v as --dtype stores it, read back: what the unquantized twin holds. */
static float as_stored(out_dtype d, float v) {
    if (d == OUT_BF16) return qwi_bf16_to_f32(qwi_f32_to_bf16(v));
    if (d == OUT_F16) return qwi_f16_to_f32(qwi_f32_to_f16(v));
    return v;
}

static void store_float(out_dtype d, uint8_t *dst, size_t i, float v) {
    if (d == OUT_F32) { memcpy(dst + 4 * i, &v, 4); return; }
    uint16_t h = d == OUT_BF16 ? qwi_f32_to_bf16(v) : qwi_f32_to_f16(v);
    memcpy(dst + 2 * i, &h, 2);
}

/* The float weight [n][k] of t's linear, exactly as a --quant none model of
 * the same seed stores it (generated like write_tensor does, then rounded to
 * --dtype). malloc'd. */
static float *linear_weights(const options *o, const tensor *t) {
    size_t total = (size_t)(t->lin_n * t->lin_k);
    float *w = xcalloc(total, sizeof(float));
    uint64_t state = stream_seed(o->seed, t->stream);
    /* write_tensor fills in even-sized chunks: one fill gives the same values */
    fill_uniform(&state, w, total);
    float scale = init_scale(t);
    for (size_t i = 0; i < total; i++) w[i] = as_stored(o->dtype, w[i] * scale + 0.0f);
    return w;
}

static float f16_round(float v) { return qwi_f16_to_f32(qwi_f32_to_f16(v)); }

static int clampi(double v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : (int)v; }

static void quant_fp8(const options *o, const tensor *t, const float *w, qcache *c) {
    int64_t n = t->lin_n, k = t->lin_k, b = o->fp8_block, bn = (n + b - 1) / b,
            bk = (k + b - 1) / b;
    uint8_t *codes = xcalloc((size_t)(n * k), 1);
    size_t sesz = dtype_bytes(o->dtype);
    uint8_t *sc = xcalloc((size_t)(bn * bk), sesz);
    for (int64_t bi = 0; bi < bn; bi++)
        for (int64_t bj = 0; bj < bk; bj++) {
            int64_t r1 = (bi + 1) * b < n ? (bi + 1) * b : n;
            int64_t c1 = (bj + 1) * b < k ? (bj + 1) * b : k;
            float amax = 0;
            for (int64_t r = bi * b; r < r1; r++)
                for (int64_t q = bj * b; q < c1; q++) amax = fmaxf(amax, fabsf(w[r * k + q]));
            float s = as_stored(o->dtype, amax > 0 ? amax / QWI_E4M3_MAX : 1.0f);
            store_float(o->dtype, sc, (size_t)(bi * bk + bj), s);
            for (int64_t r = bi * b; r < r1; r++)
                for (int64_t q = bj * b; q < c1; q++)
                    codes[r * k + q] = qwi_f32_to_e4m3(w[r * k + q] / s);
        }
    c->buf[ROLE_FP8_WEIGHT] = codes;
    c->len[ROLE_FP8_WEIGHT] = (size_t)(n * k);
    c->buf[ROLE_FP8_SCALE] = sc;
    c->len[ROLE_FP8_SCALE] = (size_t)(bn * bk) * sesz;
}

/* AutoAWQ's order of the 8 output columns within one packed word. */
static const int AWQ_ORDER[8] = {0, 2, 4, 6, 1, 3, 5, 7};

static void quant_awq(const options *o, const tensor *t, const float *w, qcache *c) {
    int64_t n = t->lin_n, k = t->lin_k, g = group_of(o, k), G = k / g;
    const int maxq = 15;
    uint8_t *q = xcalloc((size_t)(n * k), 1);
    int32_t *z = xcalloc((size_t)(G * n), sizeof(int32_t));
    uint16_t *sc = xcalloc((size_t)(G * n), sizeof(uint16_t));
    for (int64_t r = 0; r < n; r++)
        for (int64_t j = 0; j < G; j++) {
            const float *x = w + r * k + j * g;
            float mn = x[0], mx = x[0];
            for (int64_t i = 1; i < g; i++) { mn = fminf(mn, x[i]); mx = fmaxf(mx, x[i]); }
            float s = f16_round(fmaxf(mx - mn, 1e-5f) / (float)maxq);
            int zero = clampi(-rint((double)(mn / s)), 0, maxq);
            for (int64_t i = 0; i < g; i++)
                q[r * k + j * g + i] = (uint8_t)clampi(rint((double)(x[i] / s)) + zero, 0, maxq);
            z[j * n + r] = zero;
            sc[j * n + r] = qwi_f32_to_f16(s);
        }
    int64_t words = n / 8;
    uint32_t *qw = xcalloc((size_t)(k * words), 4), *qz = xcalloc((size_t)(G * words), 4);
    for (int64_t col = 0; col < words; col++)
        for (int i = 0; i < 8; i++) {
            int64_t r = col * 8 + AWQ_ORDER[i];
            for (int64_t x = 0; x < k; x++) qw[x * words + col] |= (uint32_t)q[r * k + x] << (4 * i);
            for (int64_t j = 0; j < G; j++) qz[j * words + col] |= (uint32_t)z[j * n + r] << (4 * i);
        }
    free(q);
    free(z);
    c->buf[ROLE_QWEIGHT] = (uint8_t *)qw;
    c->len[ROLE_QWEIGHT] = (size_t)(k * words) * 4;
    c->buf[ROLE_QZEROS] = (uint8_t *)qz;
    c->len[ROLE_QZEROS] = (size_t)(G * words) * 4;
    c->buf[ROLE_SCALES] = (uint8_t *)sc;
    c->len[ROLE_SCALES] = (size_t)(G * n) * 2;
}

/* g_idx of a GPTQ linear: c / g, or with --gptq-desc-act the position of c
 * in a seeded random column order, / g. */
static int32_t *gptq_gidx(const options *o, const tensor *t, int64_t g) {
    int64_t k = t->lin_k;
    int32_t *gi = xcalloc((size_t)k, sizeof(int32_t));
    int64_t *perm = xcalloc((size_t)k, sizeof(int64_t));
    for (int64_t i = 0; i < k; i++) perm[i] = i;
    if (o->gptq_desc_act) {
        char key[128];
        snprintf(key, sizeof key, "%s act-order", t->stream);
        uint64_t st = stream_seed(o->seed, key);
        for (int64_t i = k - 1; i > 0; i--) {
            int64_t j = (int64_t)(splitmix64(&st) % (uint64_t)(i + 1));
            int64_t tmp = perm[i]; perm[i] = perm[j]; perm[j] = tmp;
        }
    }
    for (int64_t pos = 0; pos < k; pos++) gi[perm[pos]] = (int32_t)(pos / g);
    free(perm);
    return gi;
}

static void quant_gptq(const options *o, const tensor *t, const float *w, qcache *c) {
    int64_t n = t->lin_n, k = t->lin_k, g = group_of(o, k), G = k / g;
    const int bits = o->bits, maxq = (1 << bits) - 1, per = 32 / bits;
    int32_t *gi = gptq_gidx(o, t, g);
    uint8_t *q = xcalloc((size_t)(n * k), 1);
    int32_t *z = xcalloc((size_t)(G * n), sizeof(int32_t));
    uint16_t *sc = xcalloc((size_t)(G * n), sizeof(uint16_t));
    float *mn = xcalloc((size_t)G, sizeof(float)), *mx = xcalloc((size_t)G, sizeof(float));
    float *sf = xcalloc((size_t)G, sizeof(float));
    for (int64_t r = 0; r < n; r++) {
        const float *x = w + r * k;
        /* GPTQ's Quantizer.find_params: the range always includes 0 */
        for (int64_t j = 0; j < G; j++) mn[j] = mx[j] = 0;
        for (int64_t i = 0; i < k; i++) {
            mn[gi[i]] = fminf(mn[gi[i]], x[i]);
            mx[gi[i]] = fmaxf(mx[gi[i]], x[i]);
        }
        for (int64_t j = 0; j < G; j++) {
            float lo = mn[j], hi = mx[j];
            if (!o->gptq_asym) {
                hi = fmaxf(-lo, hi);
                if (lo < 0) lo = -hi;
            }
            if (lo == 0 && hi == 0) { lo = -1; hi = 1; }
            float s = f16_round((hi - lo) / (float)maxq);
            int zero = o->gptq_asym ? clampi(rint((double)(-lo / s)), 0, maxq) : (maxq + 1) / 2;
            if (!o->gptq_v2 && zero < 1) zero = 1;
            sf[j] = s;
            z[j * n + r] = zero;
            sc[j * n + r] = qwi_f32_to_f16(s);
        }
        for (int64_t i = 0; i < k; i++)
            q[r * k + i] = (uint8_t)clampi(rint((double)(x[i] / sf[gi[i]])) + z[gi[i] * n + r], 0, maxq);
    }
    free(mn);
    free(mx);
    free(sf);
    int64_t qrows = k / per, zcols = n / per;
    uint32_t *qw = xcalloc((size_t)(qrows * n), 4), *qz = xcalloc((size_t)(G * zcols), 4);
    for (int64_t i = 0; i < qrows; i++)
        for (int64_t r = 0; r < n; r++)
            for (int tt = 0; tt < per; tt++)
                qw[i * n + r] |= (uint32_t)q[r * k + i * per + tt] << (bits * tt);
    uint32_t zoff = o->gptq_v2 ? 0 : 1;
    for (int64_t j = 0; j < G; j++)
        for (int64_t col = 0; col < zcols; col++)
            for (int tt = 0; tt < per; tt++)
                qz[j * zcols + col] |= (((uint32_t)z[j * n + col * per + tt] - zoff) & (uint32_t)maxq)
                                       << (bits * tt);
    free(q);
    free(z);
    c->buf[ROLE_QWEIGHT] = (uint8_t *)qw;
    c->len[ROLE_QWEIGHT] = (size_t)(qrows * n) * 4;
    c->buf[ROLE_QZEROS] = (uint8_t *)qz;
    c->len[ROLE_QZEROS] = (size_t)(G * zcols) * 4;
    c->buf[ROLE_SCALES] = (uint8_t *)sc;
    c->len[ROLE_SCALES] = (size_t)(G * n) * 2;
    c->buf[ROLE_GIDX] = (uint8_t *)gi;
    c->len[ROLE_GIDX] = (size_t)k * 4;
}

static void qcache_clear(qcache *c) {
    for (int i = 0; i < ROLE_COUNT; i++) {
        free(c->buf[i]);
        c->buf[i] = NULL;
        c->len[i] = 0;
    }
    c->stream[0] = 0;
}

/* Write the part t of a quantized linear, quantizing the linear on its first
 * part. 0 on success. */
static int write_qpart(const options *o, const tensor *t, FILE *f) {
    qcache *c = &g_qcache;
    if (strcmp(c->stream, t->stream) != 0) {
        options lo = *o;   /* a --gptq-dynamic rule's values for this linear */
        if (t->qover) {
            lo.bits = t->qbits;
            lo.group = t->qgroup;
            lo.gptq_asym = t->qasym;
            lo.gptq_desc_act = t->qdesc;
            o = &lo;
        }
        qcache_clear(c);
        float *w = linear_weights(o, t);
        if (o->quant == Q_FP8) quant_fp8(o, t, w, c);
        else if (o->quant == Q_AWQ) quant_awq(o, t, w, c);
        else quant_gptq(o, t, w, c);
        free(w);
        snprintf(c->stream, sizeof c->stream, "%s", t->stream);
    }
    size_t len = c->len[t->role];
    if (len != tensor_bytes(o, t)) {
        fprintf(stderr, "qw-makemodel: internal error: %s has %zu bytes, header says %" PRIu64 "\n",
                t->name, len, tensor_bytes(o, t));
        return -1;
    }
    return fwrite(c->buf[t->role], 1, len, f) == len ? 0 : -1;
}

/* Generate tensor t and append its bytes to f. 0 on success. */
static int write_tensor(const options *o, const tensor *t, FILE *f, float *fbuf, void *obuf) {
    if (t->role == ROLE_KV_SCALE) {
        float v = (float)o->kv_scale;
        return fwrite(&v, 4, 1, f) == 1 ? 0 : -1;
    }
    if (t->role != ROLE_FLOAT) return write_qpart(o, t, f);
    uint64_t state = stream_seed(o->seed, t->stream);
    float scale = init_scale(t);
    float offset = t->kind == INIT_NORM ? 1.0f : t->kind == INIT_FINAL ? 4.0f : 0.0f;
    size_t esz = dtype_bytes(o->dtype);
    int64_t total = tensor_numel(t);
    for (int64_t done = 0; done < total;) {
        /* CHUNK_ELEMS is even, so pairs from one draw never straddle chunks */
        size_t n = (size_t)((total - done) < CHUNK_ELEMS ? (total - done) : CHUNK_ELEMS);
        fill_uniform(&state, fbuf, n);
        for (size_t i = 0; i < n; i++) fbuf[i] = fbuf[i] * scale + offset;
        const void *src = fbuf;
        if (o->dtype == OUT_BF16) {
            uint16_t *h = obuf;
            for (size_t i = 0; i < n; i++) h[i] = qwi_f32_to_bf16(fbuf[i]);
            src = obuf;
        } else if (o->dtype == OUT_F16) {
            uint16_t *h = obuf;
            for (size_t i = 0; i < n; i++) h[i] = qwi_f32_to_f16(fbuf[i]);
            src = obuf;
        }
        if (fwrite(src, esz, n, f) != n) return -1;
        done += (int64_t)n;
    }
    return 0;
}

static int path_join(char *buf, size_t cap, const char *dir, const char *name) {
    int n = snprintf(buf, cap, "%s/%s", dir, name);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* Write one shard file. 0 on success; prints why on failure. */
static int write_shard(const options *o, tensor_list *l, int shard, uint64_t *bytes_out) {
    char fname[64], path[4096];
    shard_file_name(o, shard, fname, sizeof(fname));
    if (path_join(path, sizeof(path), o->out, fname) != 0) {
        fprintf(stderr, "qw-makemodel: path too long\n");
        return -1;
    }
    size_t hlen;
    uint64_t dbytes;
    char *hdr = shard_header(o, l, shard, &hlen, &dbytes);
    if (!hdr) { fprintf(stderr, "qw-makemodel: cannot build header\n"); return -1; }
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "qw-makemodel: open %s: %s\n", path, strerror(errno));
        free(hdr);
        return -1;
    }
    /* A large stdio buffer: writes are the bottleneck for the big shapes. */
    setvbuf(f, NULL, _IOFBF, 8u << 20);
    float *fbuf = malloc(CHUNK_ELEMS * sizeof(float));
    uint16_t *obuf = malloc(CHUNK_ELEMS * sizeof(uint16_t));
    int rc = fbuf && obuf ? 0 : -1;
    uint8_t lenle[8];
    for (int i = 0; i < 8; i++) lenle[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    if (rc == 0 && (fwrite(lenle, 1, 8, f) != 8 || fwrite(hdr, 1, hlen, f) != hlen)) rc = -1;
    for (size_t i = 0; rc == 0 && i < l->n; i++)
        if (l->t[i].shard == shard) rc = write_tensor(o, &l->t[i], f, fbuf, obuf);
    int err = errno;
    if (fclose(f) != 0 && rc == 0) { rc = -1; err = errno; }
    if (rc != 0) fprintf(stderr, "qw-makemodel: write %s: %s\n", path, strerror(err));
    free(fbuf);
    free(obuf);
    free(hdr);
    *bytes_out += 8 + hlen + dbytes;
    return rc;
}

static int dump_json(json_t *j, const char *dir, const char *name) {
    char path[4096];
    if (path_join(path, sizeof(path), dir, name) != 0) {
        fprintf(stderr, "qw-makemodel: path too long\n");
        json_decref(j);
        return -1;
    }
    int rc = json_dump_file(j, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
    json_decref(j);
    if (rc != 0) fprintf(stderr, "qw-makemodel: write %s failed\n", path);
    return rc;
}

static int write_index(const options *o, tensor_list *l) {
    uint64_t total = 0;
    json_t *root = json_object(), *meta = json_object(), *map = json_object();
    char fname[64];
    for (size_t i = 0; i < l->n; i++) {
        total += tensor_bytes(o, &l->t[i]);
        shard_file_name(o, l->t[i].shard, fname, sizeof(fname));
        json_object_set_new(map, l->t[i].name, json_string(fname));
    }
    json_object_set_new(meta, "total_size", json_integer((json_int_t)total));
    json_object_set_new(root, "metadata", meta);
    json_object_set_new(root, "weight_map", map);
    return dump_json(root, o->out, "model.safetensors.index.json");
}

/* Token ids: Qwen's when the vocab holds them, else the top of the vocab. */
static void token_ids(const options *o, int *bos, int *eos) {
    if (o->s.vocab > QWEN_EOS) {
        *bos = QWEN_BOS;
        *eos = QWEN_EOS;
    } else {
        *bos = o->s.vocab - 2;
        *eos = o->s.vocab - 1;
    }
    if (o->eos >= 0) *eos = o->eos;
}

/* config.json's "quantization_config", keys as the published checkpoints
 * write them: Qwen3-*-FP8, AutoAWQ (Qwen3-*-AWQ), GPTQModel. */
static json_t *quant_config(const options *o) {
    json_t *q = json_object();
    if (o->quant == Q_FP8) {
        json_object_set_new(q, "activation_scheme", json_string("dynamic"));
        json_object_set_new(q, "fmt", json_string("e4m3"));
        json_object_set_new(q, "quant_method", json_string("fp8"));
        json_object_set_new(q, "weight_block_size", json_pack("[ii]", o->fp8_block, o->fp8_block));
    } else if (o->quant == Q_AWQ) {
        json_object_set_new(q, "bits", json_integer(o->bits));
        json_object_set_new(q, "group_size", json_integer(o->group));
        json_object_set_new(q, "modules_to_not_convert", json_null());
        json_object_set_new(q, "quant_method", json_string("awq"));
        json_object_set_new(q, "version", json_string("gemm"));
        json_object_set_new(q, "zero_point", json_true());
    } else {
        json_object_set_new(q, "bits", json_integer(o->bits));
        json_object_set_new(q, "checkpoint_format", json_string(o->gptq_v2 ? "gptq_v2" : "gptq"));
        json_object_set_new(q, "desc_act", json_boolean(o->gptq_desc_act));
        if (o->gptq_dynamic) json_object_set(q, "dynamic", o->gptq_dynamic);
        json_object_set_new(q, "group_size", json_integer(o->group));
        json_object_set_new(q, "lm_head", json_boolean(o->gptq_lm_head));
        json_object_set_new(q, "meta", json_pack("{s:[s],s:f,s:b,s:b}", "quantizer", "qw-makemodel",
                                                 "damp_percent", 0.01, "static_groups", 0,
                                                 "true_sequential", 1));
        json_object_set_new(q, "pack_dtype", json_string("int32"));
        json_object_set_new(q, "quant_method", json_string("gptq"));
        json_object_set_new(q, "sym", json_boolean(!o->gptq_asym));
    }
    return q;
}

static int write_configs(const options *o) {
    const shape *s = &o->s;
    int bos, eos;
    token_ids(o, &bos, &eos);
    json_t *c = json_object();
    json_object_set_new(c, "architectures",
                        json_pack("[s]", o->qwen2 ? "Qwen2ForCausalLM" : "Qwen3ForCausalLM"));
    json_object_set_new(c, "model_type", json_string(o->qwen2 ? "qwen2" : "qwen3"));
    json_object_set_new(c, "attention_bias", json_boolean(o->qwen2));
    json_object_set_new(c, "attention_dropout", json_real(0.0));
    json_object_set_new(c, "bos_token_id", json_integer(bos));
    json_object_set_new(c, "eos_token_id", json_integer(eos));
    json_object_set_new(c, "head_dim", json_integer(s->head_dim));
    json_object_set_new(c, "hidden_act", json_string("silu"));
    json_object_set_new(c, "hidden_size", json_integer(s->hidden));
    json_object_set_new(c, "initializer_range", json_real(0.02));
    json_object_set_new(c, "intermediate_size", json_integer(s->intermediate));
    json_object_set_new(c, "max_position_embeddings", json_integer(s->max_pos));
    json_object_set_new(c, "max_window_layers", json_integer(s->layers));
    json_object_set_new(c, "num_attention_heads", json_integer(s->heads));
    json_object_set_new(c, "num_hidden_layers", json_integer(s->layers));
    json_object_set_new(c, "num_key_value_heads", json_integer(s->kv_heads));
    json_object_set_new(c, "rms_norm_eps", json_real(o->rms_eps));
    json_object_set_new(c, "rope_scaling", json_null());
    json_object_set_new(c, "rope_theta", json_real(o->rope_theta));
    json_object_set_new(c, "sliding_window", json_null());
    json_object_set_new(c, "tie_word_embeddings", json_boolean(o->tied));
    json_object_set_new(c, "torch_dtype", json_string(dtype_torch_name(o->dtype)));
    json_object_set_new(c, "transformers_version", json_string("4.51.0"));
    json_object_set_new(c, "use_cache", json_true());
    json_object_set_new(c, "use_sliding_window", json_false());
    json_object_set_new(c, "vocab_size", json_integer(s->vocab));
    if (o->quant != Q_NONE) json_object_set_new(c, "quantization_config", quant_config(o));
    if (dump_json(c, o->out, "config.json") != 0) return -1;

    json_t *g = json_object();
    json_object_set_new(g, "bos_token_id", json_integer(bos));
    json_t *eos_list = json_array();
    json_array_append_new(eos_list, json_integer(eos));
    /* Qwen ships both <|im_end|> and <|endoftext|> as stop tokens. */
    if (o->eos < 0 && s->vocab > QWEN_EOS) json_array_append_new(eos_list, json_integer(bos));
    json_object_set_new(g, "eos_token_id", eos_list);
    json_object_set_new(g, "pad_token_id", json_integer(bos));
    json_object_set_new(g, "transformers_version", json_string("4.51.0"));
    return dump_json(g, o->out, "generation_config.json");
}

/* ---- tokenizer ------------------------------------------------------------------ */

/* A small byte-level BPE learned from this text, so that a generated model is
 * text in, text out. The weights are random, so what matters is only that the
 * tokenizer is a real one: 256 byte tokens, merges learned by pair frequency,
 * Qwen's special tokens at the ids the configs use as bos/eos. */
static const char SAMPLE_TEXT[] =
    "The quick brown fox jumps over the lazy dog. A language model reads a sequence of tokens and "
    "predicts the next one. Each token is a piece of text: a whole word, part of a word, a space "
    "followed by a word, a number or a mark of punctuation. The tokenizer turns text into tokens, "
    "and the detokenizer turns tokens back into text.\n\n"
    "Serving a model means running many requests at the same time. The engine keeps the keys and "
    "values of every request in a cache made of small blocks, so that memory is not wasted, and it "
    "forms a new batch at every step: a request joins the batch as soon as it arrives and leaves it "
    "as soon as it is finished. Long prompts are cut into chunks, so they never stall the others.\n\n"
    "When two requests start with the same words, the blocks that hold those words are shared. The "
    "second request does not compute them again; it starts where the first one left off. A "
    "conversation keeps its history between turns, and each new turn only adds what is new.\n\n"
    "There is a time for questions and a time for answers. What would you like to know? Tell me "
    "about the weather, the history of the city, the best way to learn a new language, or how to "
    "write a program that counts the words in a file. I will think about it and then answer.\n\n"
    "int main(void) {\n    for (int i = 0; i < 10; i++) {\n        printf(\"%d\\n\", i);\n    }\n"
    "    return 0;\n}\n\n"
    "def count_words(path):\n    with open(path) as f:\n        return len(f.read().split())\n\n"
    "In 2024 the team measured 86 tokens per second on one core, then 1024 on sixteen. The numbers "
    "are small, the ideas are simple, and the results are repeatable: the same seed gives the same "
    "answer, whether the request runs alone or in a batch of two hundred.\n";

enum { TOK_MAX_MERGES = 4096, TOK_NUM_SPECIAL = 5 };

typedef struct bpe_word {
    int32_t *sym;
    int n, count;
} bpe_word;

typedef struct bpe {
    unsigned char **bytes; /* raw bytes of each regular token */
    int *len;
    int n, cap;
    int32_t (*merges)[2];
    int n_merges;
} bpe;

static void bpe_add_token(bpe *b, const unsigned char *s, int n) {
    if (b->n == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 512;
        b->bytes = realloc(b->bytes, (size_t)b->cap * sizeof *b->bytes);
        b->len = realloc(b->len, (size_t)b->cap * sizeof *b->len);
        if (!b->bytes || !b->len) { fprintf(stderr, "qw-makemodel: out of memory\n"); exit(1); }
    }
    b->bytes[b->n] = malloc((size_t)n);
    if (!b->bytes[b->n]) { fprintf(stderr, "qw-makemodel: out of memory\n"); exit(1); }
    memcpy(b->bytes[b->n], s, (size_t)n);
    b->len[b->n++] = n;
}

static int bpe_find(const bpe *b, const unsigned char *s, int n) {
    for (int i = 0; i < b->n; i++)
        if (b->len[i] == n && memcmp(b->bytes[i], s, (size_t)n) == 0) return i;
    return -1;
}

/* GPT-2's byte-to-unicode table: printable bytes map to themselves, the rest
 * to U+0100 upwards. order[] lists the bytes in the order of their code
 * points, which is the order of the first 256 ids in GPT-2 and Qwen. */
static void byte_unicode(uint32_t map[256], int order[256]) {
    int k = 0, extra = 0;
    bool printable[256] = {false};
    for (int c = 33; c <= 126; c++) printable[c] = true;
    for (int c = 161; c <= 172; c++) printable[c] = true;
    for (int c = 174; c <= 255; c++) printable[c] = true;
    for (int c = 0; c < 256; c++)
        if (printable[c]) { map[c] = (uint32_t)c; order[k++] = c; }
    for (int c = 0; c < 256; c++)
        if (!printable[c]) map[c] = 256u + (uint32_t)extra++;
    for (int c = 0; c < 256; c++)
        if (!printable[c]) order[k++] = c;
}

/* The byte-level (HF vocab.json) spelling of raw bytes; malloc'd. */
static char *byte_level(const uint32_t map[256], const unsigned char *s, int n) {
    char *out = malloc((size_t)n * 2 + 1), *o = out;
    if (!out) { fprintf(stderr, "qw-makemodel: out of memory\n"); exit(1); }
    for (int i = 0; i < n; i++) {
        uint32_t u = map[s[i]];
        if (u < 0x80) *o++ = (char)u;
        else { *o++ = (char)(0xC0 | (u >> 6)); *o++ = (char)(0x80 | (u & 0x3F)); }
    }
    *o = 0;
    return out;
}

/* Cut text into GPT-2-like words (an optional space, then a run of letters,
 * of digits, or of other marks; whitespace runs alone) and count them. */
static bpe_word *sample_words(const uint8_t byte_id[256], int *n_words) {
    const unsigned char *t = (const unsigned char *)SAMPLE_TEXT;
    size_t len = sizeof SAMPLE_TEXT - 1, i = 0;
    bpe_word *w = NULL;
    int n = 0, cap = 0;
    while (i < len) {
        size_t j = i;
        if (t[j] == ' ' && j + 1 < len && t[j + 1] != ' ' && t[j + 1] != '\n') j++;
        int cls = isalpha(t[j]) ? 0 : isdigit(t[j]) ? 1 : isspace(t[j]) ? 2 : 3;
        size_t k = j + 1;
        while (k < len && (cls == 0 ? isalpha(t[k]) : cls == 1 ? isdigit(t[k])
                           : cls == 2 ? (isspace(t[k]) != 0) : (!isalnum(t[k]) && !isspace(t[k]))))
            k++;
        int found = -1;
        for (int q = 0; q < n && found < 0; q++) {
            if (w[q].n != (int)(k - i)) continue;
            int same = 1;
            for (int r = 0; r < w[q].n && same; r++) same = w[q].sym[r] == byte_id[t[i + (size_t)r]];
            if (same) found = q;
        }
        if (found >= 0) {
            w[found].count++;
        } else {
            if (n == cap) {
                cap = cap ? cap * 2 : 256;
                w = realloc(w, (size_t)cap * sizeof *w);
                if (!w) { fprintf(stderr, "qw-makemodel: out of memory\n"); exit(1); }
            }
            w[n].n = (int)(k - i);
            w[n].count = 1;
            w[n].sym = malloc((size_t)w[n].n * sizeof(int32_t));
            if (!w[n].sym) { fprintf(stderr, "qw-makemodel: out of memory\n"); exit(1); }
            for (int r = 0; r < w[n].n; r++) w[n].sym[r] = byte_id[t[i + (size_t)r]];
            n++;
        }
        i = k;
    }
    *n_words = n;
    return w;
}

/* Learn merges until the vocabulary has max_tokens regular tokens, the merge
 * budget is spent, or every word is one token. Ties go to the pair of
 * lowest ids, so the result is deterministic. */
static void bpe_learn(bpe *b, bpe_word *w, int n_words, int max_tokens) {
    enum { HBITS = 15 };
    uint64_t *keys = malloc(sizeof(uint64_t) << HBITS);
    int *cnt = malloc(sizeof(int) << HBITS);
    b->merges = malloc(sizeof *b->merges * TOK_MAX_MERGES);
    if (!keys || !cnt || !b->merges) { fprintf(stderr, "qw-makemodel: out of memory\n"); exit(1); }
    while (b->n < max_tokens && b->n_merges < TOK_MAX_MERGES) {
        memset(keys, 0xff, sizeof(uint64_t) << HBITS);
        uint64_t best = UINT64_MAX;
        int best_cnt = 0;
        for (int q = 0; q < n_words; q++) {
            for (int r = 0; r + 1 < w[q].n; r++) {
                uint64_t key = (uint64_t)(uint32_t)w[q].sym[r] << 32 | (uint32_t)w[q].sym[r + 1];
                size_t h = (size_t)((key * 0x9E3779B97F4A7C15ull) >> (64 - HBITS));
                while (keys[h] != UINT64_MAX && keys[h] != key) h = (h + 1) & ((1u << HBITS) - 1);
                if (keys[h] == UINT64_MAX) { keys[h] = key; cnt[h] = 0; }
                cnt[h] += w[q].count;
                if (cnt[h] > best_cnt || (cnt[h] == best_cnt && key < best)) {
                    best_cnt = cnt[h];
                    best = key;
                }
            }
        }
        if (best_cnt == 0) break;
        int32_t a = (int32_t)(best >> 32), c = (int32_t)(best & 0xffffffffu);
        unsigned char buf[512];
        int la = b->len[a], lc = b->len[c];
        if (la + lc > (int)sizeof buf) break;
        memcpy(buf, b->bytes[a], (size_t)la);
        memcpy(buf + la, b->bytes[c], (size_t)lc);
        int id = bpe_find(b, buf, la + lc);
        if (id < 0) {
            id = b->n;
            bpe_add_token(b, buf, la + lc);
        }
        b->merges[b->n_merges][0] = a;
        b->merges[b->n_merges][1] = c;
        b->n_merges++;
        for (int q = 0; q < n_words; q++) {
            int o = 0;
            for (int r = 0; r < w[q].n; r++) {
                if (r + 1 < w[q].n && w[q].sym[r] == a && w[q].sym[r + 1] == c) {
                    w[q].sym[o++] = id;
                    r++;
                } else {
                    w[q].sym[o++] = w[q].sym[r];
                }
            }
            w[q].n = o;
        }
    }
    free(keys);
    free(cnt);
}

/* Write vocab.json, merges.txt and tokenizer_config.json (Hugging Face's
 * Qwen2Tokenizer files). Special ids: Qwen's own for the real vocabulary,
 * else the top of the vocabulary with <|im_end|> = eos (vocab - 1) and
 * <|endoftext|> = bos/pad (vocab - 2), as write_configs sets them. Returns 0,
 * 1 when skipped (vocabulary too small), -1 on a write failure. *summary
 * gets a line for the report. */
static int write_tokenizer(const options *o, char *summary, size_t cap) {
    const int vocab = o->s.vocab;
    const char *names[TOK_NUM_SPECIAL] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"};
    const bool special[TOK_NUM_SPECIAL] = {true, true, true, false, false};
    int ids[TOK_NUM_SPECIAL], max_regular;
    if (vocab > QWEN_EOS + 23) {
        int q[TOK_NUM_SPECIAL] = {QWEN_BOS, QWEN_BOS + 1, QWEN_EOS, QWEN_BOS + 24, QWEN_BOS + 25};
        memcpy(ids, q, sizeof ids);
        max_regular = QWEN_BOS;
    } else {
        if (vocab < 256 + TOK_NUM_SPECIAL + 1) {
            snprintf(summary, cap, "no tokenizer: vocab %d is below the %d a byte-level BPE needs", vocab,
                     256 + TOK_NUM_SPECIAL + 1);
            return 1;
        }
        int q[TOK_NUM_SPECIAL] = {vocab - 2, vocab - 3, vocab - 1, vocab - 5, vocab - 4};
        memcpy(ids, q, sizeof ids);
        max_regular = vocab - TOK_NUM_SPECIAL;
    }
    uint32_t map[256];
    int order[256];
    uint8_t byte_id_small[256];
    byte_unicode(map, order);
    bpe b = {0};
    for (int k = 0; k < 256; k++) {
        unsigned char c = (unsigned char)order[k];
        bpe_add_token(&b, &c, 1);
        byte_id_small[c] = (uint8_t)k;
    }
    int n_words;
    bpe_word *w = sample_words(byte_id_small, &n_words);
    bpe_learn(&b, w, n_words, max_regular);

    json_t *v = json_object();
    for (int i = 0; i < b.n; i++) {
        char *s = byte_level(map, b.bytes[i], b.len[i]);
        json_object_set_new(v, s, json_integer(i));
        free(s);
    }
    int rc = dump_json(v, o->out, "vocab.json");

    char path[4096];
    FILE *f = NULL;
    if (rc == 0 && (path_join(path, sizeof path, o->out, "merges.txt") != 0 || !(f = fopen(path, "w")))) rc = -1;
    if (f) {
        fprintf(f, "#version: 0.2\n");
        for (int m = 0; m < b.n_merges; m++) {
            char *l = byte_level(map, b.bytes[b.merges[m][0]], b.len[b.merges[m][0]]);
            char *r = byte_level(map, b.bytes[b.merges[m][1]], b.len[b.merges[m][1]]);
            fprintf(f, "%s %s\n", l, r);
            free(l);
            free(r);
        }
        if (fclose(f) != 0) rc = -1;
    }
    if (rc != 0) fprintf(stderr, "qw-makemodel: write %s/merges.txt failed\n", o->out);

    json_t *c = json_object(), *dec = json_object();
    json_object_set_new(c, "add_bos_token", json_false());
    json_object_set_new(c, "add_prefix_space", json_false());
    for (int k = 0; k < TOK_NUM_SPECIAL; k++) {
        json_t *t = json_object();
        json_object_set_new(t, "content", json_string(names[k]));
        json_object_set_new(t, "lstrip", json_false());
        json_object_set_new(t, "normalized", json_false());
        json_object_set_new(t, "rstrip", json_false());
        json_object_set_new(t, "single_word", json_false());
        json_object_set_new(t, "special", json_boolean(special[k]));
        char key[16];
        snprintf(key, sizeof key, "%d", ids[k]);
        json_object_set_new(dec, key, t);
    }
    json_object_set_new(c, "added_tokens_decoder", dec);
    json_object_set_new(c, "bos_token", json_null());
    json_object_set_new(c, "clean_up_tokenization_spaces", json_false());
    json_object_set_new(c, "eos_token", json_string("<|im_end|>"));
    json_object_set_new(c, "errors", json_string("replace"));
    json_object_set_new(c, "model_max_length", json_integer(o->s.max_pos));
    json_object_set_new(c, "pad_token", json_string("<|endoftext|>"));
    json_object_set_new(c, "split_special_tokens", json_false());
    json_object_set_new(c, "tokenizer_class", json_string("Qwen2Tokenizer"));
    json_object_set_new(c, "unk_token", json_null());
    if (rc == 0) rc = dump_json(c, o->out, "tokenizer_config.json");
    else json_decref(c);

    snprintf(summary, cap, "tokenizer: %d learned tokens (%d merges), <|im_end|> %d, <|endoftext|> %d",
             b.n, b.n_merges, ids[2], ids[0]);
    for (int q = 0; q < n_words; q++) free(w[q].sym);
    free(w);
    for (int i = 0; i < b.n; i++) free(b.bytes[i]);
    free(b.bytes);
    free(b.len);
    free(b.merges);
    return rc;
}

/* mkdir -p */
static int make_dirs(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf)) return -1;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
    struct stat st;
    return stat(buf, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -1;
}

/* ---- argument parsing ---------------------------------------------------------- */

/* Refuse --quant combinations the format cannot store; fills o->bits'
 * default. 0 when fine, else prints why and returns -1. */
static int check_quant(options *o, bool group_given, bool block_given, const char *gptq_flag) {
    static const char *names[] = {"none", "fp8", "awq", "gptq"};
    const char *m = names[o->quant];
    if (o->quant != Q_GPTQ && gptq_flag) {
        fprintf(stderr, "qw-makemodel: %s needs --quant gptq (not %s)\n", gptq_flag, m);
        return -1;
    }
    if (o->quant == Q_NONE && (o->bits || group_given || block_given)) {
        fprintf(stderr, "qw-makemodel: --bits, --group-size and --fp8-block need --quant\n");
        return -1;
    }
    if (o->quant == Q_FP8) {
        if (o->bits && o->bits != 8) {
            fprintf(stderr, "qw-makemodel: --quant fp8 stores 8 bits, not --bits %d\n", o->bits);
            return -1;
        }
        if (group_given) {
            fprintf(stderr, "qw-makemodel: --quant fp8 takes --fp8-block, not --group-size\n");
            return -1;
        }
        o->bits = 8;
        return 0;
    }
    if (o->quant == Q_NONE) return 0;
    if (block_given) {
        fprintf(stderr, "qw-makemodel: --fp8-block needs --quant fp8 (not %s)\n", m);
        return -1;
    }
    if (o->quant == Q_AWQ && o->bits && o->bits != 4) {
        fprintf(stderr, "qw-makemodel: --quant awq (GEMM) stores 4 bits only, not --bits %d\n",
                o->bits);
        return -1;
    }
    if (!o->bits) o->bits = 4;
    if (o->quant == Q_AWQ && o->group < 0) {
        fprintf(stderr, "qw-makemodel: --quant awq needs a positive --group-size\n");
        return -1;
    }
    const shape *s = &o->s;
    int per = 32 / o->bits;
    const int ns[] = {s->heads * s->head_dim, s->kv_heads * s->head_dim, s->hidden, s->intermediate};
    const int ks[] = {s->hidden, s->heads * s->head_dim, s->intermediate};
    const char *nk[] = {"hidden", "heads*head_dim", "intermediate"};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        if (o->group > 0 && ks[i] % o->group) {
            fprintf(stderr, "qw-makemodel: --group-size %d does not divide the %s inputs (%d) of a "
                    "linear layer\n", o->group, nk[i], ks[i]);
            return -1;
        }
        if (o->quant == Q_GPTQ && ks[i] % per) {
            fprintf(stderr, "qw-makemodel: GPTQ packs %d inputs per int32: %s (%d) is not a "
                    "multiple\n", per, nk[i], ks[i]);
            return -1;
        }
    }
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        if (ns[i] % per) {
            fprintf(stderr, "qw-makemodel: %s packs %d outputs per int32: a linear layer has %d "
                    "outputs\n", m, per, ns[i]);
            return -1;
        }
    if (o->gptq_lm_head && s->vocab % per) {
        fprintf(stderr, "qw-makemodel: --gptq-lm-head: GPTQ packs %d outputs per int32: the "
                "vocabulary (%d) is not a multiple\n", per, s->vocab);
        return -1;
    }
    return 0;
}

/* --gptq-dynamic's JSON and rules, freed at exit whatever path main
 * returns by (a leak checker would otherwise fail the refusals). */
static json_t *g_dynamic_json;
static qwi_quant_rules *g_dynamic_rules;
static void free_dynamic(void) {
    qwi_quant_rules_free(g_dynamic_rules);
    json_decref(g_dynamic_json);
    g_dynamic_rules = NULL;
    g_dynamic_json = NULL;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: qw-makemodel --shape NAME --out DIR [--dtype f32|bf16|f16] [--seed N]\n"
            "         [--tied|--untied] [--tied-with-lm-head] [--shards N] [--arch qwen3|qwen2]\n"
            "         [--hidden N --layers N --heads N --kv-heads N --head-dim N\n"
            "          --intermediate N --vocab N --max-pos N --rope-theta X --rms-eps X --eos N]\n"
            "         [--no-tokenizer]\n"
            "         [--quant none|fp8|awq|gptq] [--bits 4|8] [--group-size N] [--fp8-block N]\n"
            "         [--gptq-asym] [--gptq-format gptq|gptq_v2] [--gptq-desc-act] [--gptq-lm-head]\n"
            "         [--gptq-dynamic JSON] [--kv-scale X]\n"
            "shapes: tiny 0.6b 1.7b 4b 8b 14b 32b\n");
}

static int bad_arg(const char *fmt, const char *a) {
    fprintf(stderr, "qw-makemodel: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\n");
    usage(stderr);
    return 2;
}

static bool parse_int(const char *s, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0 || v > 1000000000L) return false;
    *out = (int)v;
    return true;
}

static bool parse_u64(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    if (*s == '-') return false;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end) return false;
    *out = v;
    return true;
}

static bool parse_double(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v > 0) || isinf(v)) return false;
    *out = v;
    return true;
}

int main(int argc, char **argv) {
    options o;
    memset(&o, 0, sizeof(o));
    o.dtype = OUT_BF16;
    o.shards = 1;
    o.rope_theta = 1e6;
    o.rms_eps = 1e-6;
    o.eos = -1;
    const char *shape_name = NULL;
    int tie_mode = -1; /* -1 shape default, 0 untied, 1 tied, 2 tied + lm_head */
    /* overrides, -1 when absent */
    int ov_hidden = -1, ov_layers = -1, ov_heads = -1, ov_kv = -1, ov_hd = -1, ov_inter = -1,
        ov_vocab = -1, ov_maxpos = -1;
    bool group_given = false, block_given = false;
    const char *gptq_flag = NULL; /* a GPTQ-only flag seen */
    o.group = 128;
    o.fp8_block = 128;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "--tied")) { tie_mode = 1; continue; }
        if (!strcmp(a, "--untied")) { tie_mode = 0; continue; }
        if (!strcmp(a, "--tied-with-lm-head")) { tie_mode = 2; continue; }
        if (!strcmp(a, "--no-tokenizer")) { o.no_tokenizer = true; continue; }
        if (!strcmp(a, "--gptq-asym")) { o.gptq_asym = true; gptq_flag = a; continue; }
        if (!strcmp(a, "--gptq-desc-act")) { o.gptq_desc_act = true; gptq_flag = a; continue; }
        if (!strcmp(a, "--gptq-lm-head")) { o.gptq_lm_head = true; gptq_flag = a; continue; }
        if (strncmp(a, "--", 2) != 0) return bad_arg("unexpected argument '%s'", a);
        if (i + 1 >= argc) return bad_arg("%s needs a value", a);
        const char *v = argv[++i];
        bool ok = true;
        if (!strcmp(a, "--shape")) shape_name = v;
        else if (!strcmp(a, "--out")) o.out = v;
        else if (!strcmp(a, "--dtype")) {
            if (!strcmp(v, "f32")) o.dtype = OUT_F32;
            else if (!strcmp(v, "bf16")) o.dtype = OUT_BF16;
            else if (!strcmp(v, "f16")) o.dtype = OUT_F16;
            else ok = false;
        } else if (!strcmp(a, "--arch")) {
            if (!strcmp(v, "qwen3")) o.qwen2 = false;
            else if (!strcmp(v, "qwen2")) o.qwen2 = true;
            else ok = false;
        } else if (!strcmp(a, "--seed")) ok = parse_u64(v, &o.seed);
        else if (!strcmp(a, "--shards")) ok = parse_int(v, &o.shards) && o.shards >= 1 &&
                                              o.shards <= MAX_SHARDS;
        else if (!strcmp(a, "--hidden")) ok = parse_int(v, &ov_hidden);
        else if (!strcmp(a, "--layers")) ok = parse_int(v, &ov_layers);
        else if (!strcmp(a, "--heads")) ok = parse_int(v, &ov_heads);
        else if (!strcmp(a, "--kv-heads")) ok = parse_int(v, &ov_kv);
        else if (!strcmp(a, "--head-dim")) ok = parse_int(v, &ov_hd);
        else if (!strcmp(a, "--intermediate")) ok = parse_int(v, &ov_inter);
        else if (!strcmp(a, "--vocab")) ok = parse_int(v, &ov_vocab);
        else if (!strcmp(a, "--max-pos")) ok = parse_int(v, &ov_maxpos);
        else if (!strcmp(a, "--eos")) ok = parse_int(v, &o.eos);
        else if (!strcmp(a, "--rope-theta")) ok = parse_double(v, &o.rope_theta);
        else if (!strcmp(a, "--rms-eps")) ok = parse_double(v, &o.rms_eps);
        else if (!strcmp(a, "--quant")) {
            if (!strcmp(v, "none")) o.quant = Q_NONE;
            else if (!strcmp(v, "fp8")) o.quant = Q_FP8;
            else if (!strcmp(v, "awq")) o.quant = Q_AWQ;
            else if (!strcmp(v, "gptq")) o.quant = Q_GPTQ;
            else ok = false;
        } else if (!strcmp(a, "--bits")) ok = parse_int(v, &o.bits) && (o.bits == 4 || o.bits == 8);
        else if (!strcmp(a, "--group-size")) {
            group_given = true;
            if (!strcmp(v, "-1")) o.group = -1;
            else ok = parse_int(v, &o.group) && o.group >= 2 && o.group % 2 == 0;
        } else if (!strcmp(a, "--fp8-block")) {
            block_given = true;
            ok = parse_int(v, &o.fp8_block) && o.fp8_block >= 2 && o.fp8_block % 2 == 0;
        } else if (!strcmp(a, "--gptq-format")) {
            gptq_flag = a;
            if (!strcmp(v, "gptq")) o.gptq_v2 = false;
            else if (!strcmp(v, "gptq_v2")) o.gptq_v2 = true;
            else ok = false;
        } else if (!strcmp(a, "--kv-scale")) ok = parse_double(v, &o.kv_scale) && o.kv_scale < 3e38;
        else if (!strcmp(a, "--gptq-dynamic")) {
            gptq_flag = a;
            static bool registered;
            if (!registered) registered = atexit(free_dynamic) == 0;
            json_decref(g_dynamic_json);
            g_dynamic_json = o.gptq_dynamic = json_loads(v, 0, NULL);
            ok = json_is_object(o.gptq_dynamic);
        }
        else return bad_arg("unknown option '%s'", a);
        if (!ok) {
            fprintf(stderr, "qw-makemodel: bad value '%s' for %s\n", v, a);
            return 2;
        }
    }
    if (!shape_name) return bad_arg("%s", "--shape is required");
    if (!o.out) return bad_arg("%s", "--out is required");
    const shape *base = NULL;
    for (size_t i = 0; i < sizeof(SHAPES) / sizeof(SHAPES[0]); i++)
        if (!strcmp(SHAPES[i].name, shape_name)) base = &SHAPES[i];
    if (!base) return bad_arg("unknown shape '%s'", shape_name);
    o.s = *base;
    if (ov_hidden >= 0) o.s.hidden = ov_hidden;
    if (ov_layers >= 0) o.s.layers = ov_layers;
    if (ov_heads >= 0) o.s.heads = ov_heads;
    if (ov_kv >= 0) o.s.kv_heads = ov_kv;
    if (ov_hd >= 0) o.s.head_dim = ov_hd;
    if (ov_inter >= 0) o.s.intermediate = ov_inter;
    if (ov_vocab >= 0) o.s.vocab = ov_vocab;
    if (ov_maxpos >= 0) o.s.max_pos = ov_maxpos;
    o.tied = tie_mode < 0 ? base->tied : tie_mode >= 1;
    o.ship_lm_head = !o.tied || tie_mode == 2;
    if (o.gptq_lm_head) {
        if (tie_mode == 2)
            return bad_arg("%s", "--gptq-lm-head ships a quantized head: not with --tied-with-lm-head");
        /* the quantized head replaces the float one; a tied shape's head is
         * its embedding, and the checkpoint is no longer tied */
        o.head_stream = o.tied ? "model.embed_tokens.weight" : "lm_head.weight";
        o.tied = false;
        o.ship_lm_head = false;
    }

    const shape *s = &o.s;
    if (s->hidden < 1 || s->layers < 1 || s->heads < 1 || s->kv_heads < 1 || s->head_dim < 2 ||
        s->intermediate < 1 || s->vocab < 2 || s->max_pos < 1) {
        fprintf(stderr, "qw-makemodel: every size must be positive (vocab >= 2, head_dim >= 2)\n");
        return 2;
    }
    if (s->head_dim % 2) {
        fprintf(stderr, "qw-makemodel: head_dim %d must be even (rotary)\n", s->head_dim);
        return 2;
    }
    if (s->heads % s->kv_heads) {
        fprintf(stderr, "qw-makemodel: heads %d not a multiple of kv-heads %d\n", s->heads,
                s->kv_heads);
        return 2;
    }
    if (o.eos >= s->vocab) {
        fprintf(stderr, "qw-makemodel: --eos %d outside vocab %d\n", o.eos, s->vocab);
        return 2;
    }
    if (check_quant(&o, group_given, block_given, gptq_flag) != 0) return 2;
    if (o.gptq_dynamic) {
        /* the library's parser: what it refuses, a loader refuses */
        const qwi_quant_config qbase = gptq_base(&o);
        json_t *q = json_pack("{s:O}", "dynamic", o.gptq_dynamic);
        qw_status st = qwi_quant_rules_parse(q, "--gptq-dynamic", &qbase, &o.rules);
        g_dynamic_rules = o.rules;
        json_decref(q);
        if (st != QW_OK) {
            fprintf(stderr, "qw-makemodel: %s\n", qw_last_error());
            return 2;
        }
    }

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (make_dirs(o.out) != 0) {
        fprintf(stderr, "qw-makemodel: cannot create directory %s: %s\n", o.out, strerror(errno));
        return 1;
    }
    tensor_list l = {0};
    build_tensors(&o, &l);
    if (assign_shards(&o, &l) != 0) return 2;

    /* A previous layout left in DIR would make loaders see two weight sets. */
    char path[4096];
    if (path_join(path, sizeof(path), o.out, "model.safetensors") == 0) unlink(path);
    if (path_join(path, sizeof(path), o.out, "model.safetensors.index.json") == 0) unlink(path);

    if (write_configs(&o) != 0) return 1;
    /* A tokenizer of an earlier run must not survive into this model. */
    const char *tok_files[] = {"tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json"};
    for (size_t i = 0; i < sizeof tok_files / sizeof tok_files[0]; i++)
        if (path_join(path, sizeof(path), o.out, tok_files[i]) == 0) unlink(path);
    char tok_summary[160] = "no tokenizer (--no-tokenizer)";
    if (!o.no_tokenizer && write_tokenizer(&o, tok_summary, sizeof tok_summary) < 0) return 1;
    uint64_t bytes = 0;
    for (int sh = 0; sh < o.shards; sh++)
        if (write_shard(&o, &l, sh, &bytes) != 0) return 1;
    if (o.shards > 1 && write_index(&o, &l) != 0) return 1;

    int64_t params = 0;
    for (size_t i = 0; i < l.n; i++) {
        /* a quantized linear counts its n x k weights once, not its packed words or scales */
        const tensor *t = &l.t[i];
        if (t->role == ROLE_FLOAT) params += tensor_numel(t);
        else if (t->role == ROLE_QWEIGHT || t->role == ROLE_FP8_WEIGHT) params += t->lin_n * t->lin_k;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    printf("qw-makemodel: %s %s %s%s seed %" PRIu64 ": %" PRId64 " params, %" PRIu64
           " bytes in %d file%s, %.2f s -> %s\n",
           shape_name, o.qwen2 ? "qwen2" : "qwen3", dtype_torch_name(o.dtype),
           o.tied ? (o.ship_lm_head ? " tied+lm_head" : " tied") : " untied", o.seed, params,
           bytes, o.shards, o.shards == 1 ? "" : "s", secs, o.out);
    printf("qw-makemodel: %s\n", tok_summary);
    if (o.quant == Q_FP8)
        printf("qw-makemodel: quant fp8 e4m3, %dx%d blocks\n", o.fp8_block, o.fp8_block);
    else if (o.quant != Q_NONE)
        printf("qw-makemodel: quant %s %d-bit, group %d%s%s%s%s\n", o.quant == Q_AWQ ? "awq" : "gptq",
               o.bits, o.group, o.quant == Q_GPTQ ? (o.gptq_asym ? " asym" : " sym") : "",
               o.quant == Q_GPTQ ? (o.gptq_v2 ? " gptq_v2" : " gptq") : "",
               o.gptq_desc_act ? " desc_act" : "", o.gptq_lm_head ? " lm_head" : "");
    if (o.gptq_dynamic) printf("qw-makemodel: %zu dynamic rules\n", json_object_size(o.gptq_dynamic));
    qcache_clear(&g_qcache);
    free(l.t);
    return 0;
}
