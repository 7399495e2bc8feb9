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
} options;

/* ---- tensors ----------------------------------------------------------------- */

typedef enum init_kind {
    INIT_LINEAR, /* uniform, std 1/sqrt(fan_in): keeps activations O(1) */
    INIT_EMBED,  /* uniform, std 1/sqrt(hidden): rows of norm about 1     */
    INIT_NORM,   /* 1 + uniform(-0.1, 0.1)                               */
    INIT_FINAL,  /* 4 * (1 + uniform(-0.1, 0.1)): the logit gain         */
    INIT_BIAS    /* uniform, std 0.05                                    */
} init_kind;

typedef struct tensor {
    char name[96];
    char stream[96];   /* PRNG stream name: lm_head copy of embed uses the embed's */
    int64_t dims[2];
    int ndim;
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
    return t->ndim == 1 ? t->dims[0] : t->dims[0] * t->dims[1];
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
        add_tensor(l, LNAME("self_attn.q_proj.weight"), NULL, 2, q_out, s->hidden, INIT_LINEAR);
        add_tensor(l, LNAME("self_attn.k_proj.weight"), NULL, 2, kv_out, s->hidden, INIT_LINEAR);
        add_tensor(l, LNAME("self_attn.v_proj.weight"), NULL, 2, kv_out, s->hidden, INIT_LINEAR);
        if (o->qwen2) {
            add_tensor(l, LNAME("self_attn.q_proj.bias"), NULL, 1, q_out, 0, INIT_BIAS);
            add_tensor(l, LNAME("self_attn.k_proj.bias"), NULL, 1, kv_out, 0, INIT_BIAS);
            add_tensor(l, LNAME("self_attn.v_proj.bias"), NULL, 1, kv_out, 0, INIT_BIAS);
        }
        add_tensor(l, LNAME("self_attn.o_proj.weight"), NULL, 2, s->hidden, q_out, INIT_LINEAR);
        if (!o->qwen2) {
            add_tensor(l, LNAME("self_attn.q_norm.weight"), NULL, 1, s->head_dim, 0, INIT_NORM);
            add_tensor(l, LNAME("self_attn.k_norm.weight"), NULL, 1, s->head_dim, 0, INIT_NORM);
        }
        add_tensor(l, LNAME("post_attention_layernorm.weight"), NULL, 1, s->hidden, 0, INIT_NORM);
        add_tensor(l, LNAME("mlp.gate_proj.weight"), NULL, 2, s->intermediate, s->hidden,
                   INIT_LINEAR);
        add_tensor(l, LNAME("mlp.up_proj.weight"), NULL, 2, s->intermediate, s->hidden,
                   INIT_LINEAR);
        add_tensor(l, LNAME("mlp.down_proj.weight"), NULL, 2, s->hidden, s->intermediate,
                   INIT_LINEAR);
#undef LNAME
    }
    add_tensor(l, "model.norm.weight", NULL, 1, s->hidden, 0, INIT_FINAL);
    if (o->ship_lm_head) {
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

/* Round-to-nearest-even f32 -> IEEE half (overflow -> inf, NaN kept). */
static uint16_t f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (absu >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    if (absu < 0x38800000u) {
        /* subnormal half (or zero): value = mant * 2^-24 */
        float a;
        memcpy(&a, &absu, 4);
        float m = a * 16777216.0f; /* exact scaling by 2^24 */
        uint32_t r = (uint32_t)lrintf(m); /* default rounding mode is nearest-even */
        return (uint16_t)(sign | r);
    }
    uint32_t exp = ((absu >> 23) - 127 + 15) << 10;
    uint32_t mant = absu & 0x7fffffu;
    uint32_t h = exp | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++; /* carry into exp is correct */
    return (uint16_t)(sign | h);
}

/* ---- writing ------------------------------------------------------------------ */

static const char *dtype_st_name(out_dtype d) {
    return d == OUT_F32 ? "F32" : d == OUT_BF16 ? "BF16" : "F16";
}

static const char *dtype_torch_name(out_dtype d) {
    return d == OUT_F32 ? "float32" : d == OUT_BF16 ? "bfloat16" : "float16";
}

static size_t dtype_bytes(out_dtype d) { return d == OUT_F32 ? 4 : 2; }

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
    uint64_t esz = dtype_bytes(o->dtype), total = 0, cum = 0;
    for (size_t i = 0; i < l->n; i++) total += (uint64_t)tensor_numel(&l->t[i]) * esz;
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
        cum += (uint64_t)tensor_numel(&l->t[i]) * esz;
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
    uint64_t off = 0, esz = dtype_bytes(o->dtype);
    for (size_t i = 0; i < l->n; i++) {
        tensor *t = &l->t[i];
        if (t->shard != shard) continue;
        uint64_t nb = (uint64_t)tensor_numel(t) * esz;
        t->offset = off;
        json_t *e = json_object();
        json_object_set_new(e, "dtype", json_string(dtype_st_name(o->dtype)));
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

/* Generate tensor t and append its bytes to f. 0 on success. */
static int write_tensor(const options *o, const tensor *t, FILE *f, float *fbuf, void *obuf) {
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
            for (size_t i = 0; i < n; i++) h[i] = f32_to_f16(fbuf[i]);
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
        total += (uint64_t)tensor_numel(&l->t[i]) * dtype_bytes(o->dtype);
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

static void usage(FILE *f) {
    fprintf(f,
            "usage: qw-makemodel --shape NAME --out DIR [--dtype f32|bf16|f16] [--seed N]\n"
            "         [--tied|--untied] [--tied-with-lm-head] [--shards N] [--arch qwen3|qwen2]\n"
            "         [--hidden N --layers N --heads N --kv-heads N --head-dim N\n"
            "          --intermediate N --vocab N --max-pos N --rope-theta X --rms-eps X --eos N]\n"
            "         [--no-tokenizer]\n"
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

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "--tied")) { tie_mode = 1; continue; }
        if (!strcmp(a, "--untied")) { tie_mode = 0; continue; }
        if (!strcmp(a, "--tied-with-lm-head")) { tie_mode = 2; continue; }
        if (!strcmp(a, "--no-tokenizer")) { o.no_tokenizer = true; continue; }
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
    for (size_t i = 0; i < l.n; i++) params += tensor_numel(&l.t[i]);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    printf("qw-makemodel: %s %s %s%s seed %" PRIu64 ": %" PRId64 " params, %" PRIu64
           " bytes in %d file%s, %.2f s -> %s\n",
           shape_name, o.qwen2 ? "qwen2" : "qwen3", dtype_torch_name(o.dtype),
           o.tied ? (o.ship_lm_head ? " tied+lm_head" : " tied") : " untied", o.seed, params,
           bytes, o.shards, o.shards == 1 ? "" : "s", secs, o.out);
    printf("qw-makemodel: %s\n", tok_summary);
    free(l.t);
    return 0;
}
