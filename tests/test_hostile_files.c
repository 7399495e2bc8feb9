/*
 * test_hostile_files.c - model and tokenizer directories made to hurt the
 * loader: absurd config sizes, FIFOs and directories in place of files,
 * token ids far beyond the files' size, padding ids the model samples,
 * misleading statuses, and NaN/inf weights. Each case starts from a copy of
 * a tiny generated model (or its tokenizer files) and corrupts one thing;
 * each expects a clear status and a message naming the file/field, within a
 * timeout (a FIFO used to hang the loader forever).
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qwinfer.h"
#include "util/testutil.h"
#include "model.h"
#include "safetensors.h"

/* ---- helpers ------------------------------------------------------------------ */

static char *tiny_f32(void) {
    char *d = qwt_model("hostile-tiny-f32", "--shape tiny --dtype f32 --seed 71");
    cr_assert_not_null(d, "cannot generate the tiny model");
    return d;
}

static char *copy_of(const char *src, const char *tag) {
    char *d = qwt_tmpdir(tag);
    cr_assert_not_null(d);
    cr_assert_eq(qwt_system("cp -a '%s'/. '%s'/", src, d), 0);
    return d;
}

static char *path_in(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    cr_assert(p);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static qw_engine_options *opts_for(const char *dir) {
    qw_engine_options *o = NULL;
    cr_assert_eq(qw_engine_options_create(&o), QW_OK);
    cr_assert_eq(qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, dir), QW_OK);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_NUM_THREADS, 1), QW_OK);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_NUM_KV_BLOCKS, 64), QW_OK);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_MAX_NUM_SEQS, 4), QW_OK);
    return o;
}

/* qw_engine_create's status over dir; on failure *out stays NULL. */
static qw_status create_status(const char *dir, int check_weights) {
    qw_engine_options *o = opts_for(dir);
    if (check_weights >= 0)
        cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_CHECK_WEIGHTS, check_weights), QW_OK);
    qw_engine *e = (qw_engine *)1;
    qw_status st = qw_engine_create(o, &e);
    qw_engine_options_destroy(o);
    if (st == QW_OK) qw_engine_destroy(e);
    else cr_expect_null(e, "*out is NULL on failure");
    return st;
}

static qw_status tokenizer_status(const char *dir) {
    qw_tokenizer *t = (qw_tokenizer *)1;
    qw_status st = qw_tokenizer_create_from_dir(dir, &t);
    if (st == QW_OK) qw_tokenizer_destroy(t);
    else cr_expect_null(t, "*out is NULL on failure");
    return st;
}

/* The message of the last failure holds every one of up to 4 needles. */
#define EXPECT_MSG(...)                                                                 \
    do {                                                                                \
        const char *needles_[] = {__VA_ARGS__};                                         \
        for (size_t k_ = 0; k_ < sizeof needles_ / sizeof needles_[0]; k_++)            \
            cr_expect(strstr(qw_last_error(), needles_[k_]) != NULL,                    \
                      "message lacks \"%s\": %s", needles_[k_], qw_last_error());       \
    } while (0)

static json_t *read_json(const char *dir, const char *name) {
    char *p = path_in(dir, name);
    json_error_t err;
    json_t *j = json_load_file(p, 0, &err);
    cr_assert_not_null(j, "%s: %s", p, err.text);
    free(p);
    return j;
}

static void write_json(const char *dir, const char *name, json_t *j) {
    char *p = path_in(dir, name);
    cr_assert_eq(json_dump_file(j, p, JSON_COMPACT), 0, "write %s", p);
    free(p);
    json_decref(j);
}

static void set_config_int(const char *dir, const char *key, json_int_t v) {
    json_t *c = read_json(dir, "config.json");
    json_object_set_new(c, key, json_integer(v));
    write_json(dir, "config.json", c);
}

/* ---- item 11: absurd sizes in config.json and safetensors headers -------------- */

/* Each size key just past qwinfer's stated limit: UNSUPPORTED naming the key
 * and the limit; at the limit the config still parses. */
Test(hostile, config_sizes_above_the_limits) {
    char *src = tiny_f32();
    struct { const char *key; json_int_t limit; } cases[] = {
        {"vocab_size", QWI_CFG_MAX_VOCAB},
        {"hidden_size", QWI_CFG_MAX_HIDDEN},
        {"intermediate_size", QWI_CFG_MAX_INTERMEDIATE},
        {"num_hidden_layers", QWI_CFG_MAX_LAYERS},
        {"num_attention_heads", QWI_CFG_MAX_HEADS},
        {"num_key_value_heads", QWI_CFG_MAX_HEADS},
        {"head_dim", QWI_CFG_MAX_HEAD_DIM},
        {"max_position_embeddings", QWI_CFG_MAX_POSITIONS},
    };
    char *dir = copy_of(src, "hostile-cfg");
    json_t *orig = read_json(dir, "config.json");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *c = json_deep_copy(orig);
        json_object_set_new(c, cases[i].key, json_integer(cases[i].limit + 1));
        write_json(dir, "config.json", c);
        qwi_config cfg;
        cr_expect_eq(qwi_config_load(dir, &cfg), QW_ERR_UNSUPPORTED, "%s = limit + 1: %s",
                     cases[i].key, qw_last_error());
        char lim[32];
        snprintf(lim, sizeof lim, "%lld", (long long)cases[i].limit);
        EXPECT_MSG(cases[i].key, lim, "config.json");
    }
    /* The limits themselves parse (heads: a multiple of the kv heads). */
    json_t *c = json_deep_copy(orig);
    json_object_set_new(c, "vocab_size", json_integer(QWI_CFG_MAX_VOCAB));
    json_object_set_new(c, "hidden_size", json_integer(QWI_CFG_MAX_HIDDEN));
    json_object_set_new(c, "intermediate_size", json_integer(QWI_CFG_MAX_INTERMEDIATE));
    json_object_set_new(c, "num_hidden_layers", json_integer(QWI_CFG_MAX_LAYERS));
    json_object_set_new(c, "num_attention_heads", json_integer(QWI_CFG_MAX_HEADS));
    json_object_set_new(c, "num_key_value_heads", json_integer(QWI_CFG_MAX_HEADS));
    json_object_set_new(c, "head_dim", json_integer(QWI_CFG_MAX_HEAD_DIM));
    json_object_set_new(c, "max_position_embeddings", json_integer(QWI_CFG_MAX_POSITIONS));
    json_object_set_new(c, "rope_theta", json_real(QWI_CFG_MAX_ROPE_THETA));
    write_json(dir, "config.json", c);
    qwi_config cfg;
    cr_expect_eq(qwi_config_load(dir, &cfg), QW_OK, "%s", qw_last_error());
    /* Real-valued ones. */
    c = json_deep_copy(orig);
    json_object_set_new(c, "rope_theta", json_real(QWI_CFG_MAX_ROPE_THETA * 10));
    write_json(dir, "config.json", c);
    cr_expect_eq(qwi_config_load(dir, &cfg), QW_ERR_UNSUPPORTED);
    EXPECT_MSG("rope_theta", "limit");
    c = json_deep_copy(orig);
    json_object_set_new(c, "rms_norm_eps", json_real(2.0));
    write_json(dir, "config.json", c);
    cr_expect_eq(qwi_config_load(dir, &cfg), QW_ERR_UNSUPPORTED);
    EXPECT_MSG("rms_norm_eps", "limit");
    json_decref(orig);
    free(dir);
    free(src);
}

/* The reported case: max_position_embeddings near INT32_MAX used to
 * overflow the KV sizing (UBSan) or fail as "out of host memory". */
Test(hostile, max_position_embeddings_near_int32_max) {
    char *src = tiny_f32();
    char *dir = copy_of(src, "hostile-maxpos");
    set_config_int(dir, "max_position_embeddings", 2147483000);
    cr_expect_eq(create_status(dir, -1), QW_ERR_UNSUPPORTED, "%s", qw_last_error());
    EXPECT_MSG("max_position_embeddings", "2147483000", "16777216");
    free(dir);
    free(src);
}

/* A zero-sized tensor used to carry any other dimension through the
 * byte-count check; no dimension may be absurd. */
Test(hostile, safetensors_absurd_dimension) {
    char *dir = qwt_tmpdir("hostile-dim");
    char *p = path_in(dir, "x.safetensors");
    const char *hdr = "{\"t\":{\"dtype\":\"F32\",\"shape\":[2199023255553,0],\"data_offsets\":[0,0]}}";
    size_t hl = strlen(hdr);
    unsigned char buf[256];
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, hdr, hl);
    cr_assert_eq(qwt_write_file(p, buf, 8 + hl), 0);
    qwi_st_set *s = (qwi_st_set *)1;
    cr_expect_eq(qwi_st_open_file(p, &s), QW_ERR_FORMAT);
    cr_expect_null(s);
    EXPECT_MSG(p, "tensor t", "shape[0]");
    free(p);
    free(dir);
}

/* ---- items 12 and 16: FIFOs and directories in place of files ------------------ */

/* Replace dir/name by a FIFO (kind 0) or a directory (kind 1). */
static void replace_by(const char *dir, const char *name, int kind) {
    char *p = path_in(dir, name);
    cr_assert_eq(qwt_system("rm -rf '%s'", p), 0);
    if (kind == 0) cr_assert_eq(mkfifo(p, 0600), 0, "mkfifo %s", p);
    else cr_assert_eq(mkdir(p, 0700), 0, "mkdir %s", p);
    free(p);
}

/* Every file the engine or the tokenizer opens, as a FIFO or a directory:
 * QW_ERR_IO naming the file and what it is, at once (the timeout catches a
 * hang). tokenizer.json and the index are added next to the files that
 * would otherwise be used, since they take precedence. */
Test(hostile, fifo_or_directory_instead_of_a_model_file, .timeout = 120) {
    char *src = tiny_f32();
    static const char *names[] = {
        "config.json",           "generation_config.json", "model.safetensors",
        "model.safetensors.index.json", "tokenizer.json",  "vocab.json",
        "merges.txt",            "tokenizer_config.json",
    };
    static const char *kinds[] = {"FIFO", "directory"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int is_tok = strstr(names[i], "token") || strstr(names[i], "vocab") ||
                     strstr(names[i], "merges");
        for (int kind = 0; kind < 2; kind++) {
            char *dir = copy_of(src, "hostile-fifo");
            replace_by(dir, names[i], kind);
            cr_expect_eq(create_status(dir, -1), QW_ERR_IO, "engine, %s as a %s: %s", names[i],
                         kinds[kind], qw_last_error());
            EXPECT_MSG(names[i], kinds[kind], "not a regular file");
            if (is_tok) {
                cr_expect_eq(tokenizer_status(dir), QW_ERR_IO, "tokenizer, %s as a %s: %s",
                             names[i], kinds[kind], qw_last_error());
                EXPECT_MSG(names[i], kinds[kind]);
            }
            cr_assert_eq(qwt_system("rm -rf '%s'", dir), 0);
            free(dir);
        }
    }
    free(src);
}

/* An empty model path used to read "/config.json". */
Test(hostile, empty_model_path) {
    cr_expect_eq(create_status("", -1), QW_ERR_INVALID_ARGUMENT, "%s", qw_last_error());
    EXPECT_MSG("QW_OPT_MODEL_PATH", "empty");
    cr_expect(strstr(qw_last_error(), "/config.json") == NULL, "%s", qw_last_error());
    cr_expect_eq(tokenizer_status(""), QW_ERR_INVALID_ARGUMENT, "%s", qw_last_error());
    EXPECT_MSG("empty");
}

/* ---- item 13: token ids far beyond the files ----------------------------------- */

/* The tokenizer files of the tiny model alone, in a fresh directory. */
static char *tokenizer_copy(const char *tag) {
    char *src = tiny_f32();
    char *d = qwt_tmpdir(tag);
    cr_assert_eq(qwt_system("cp '%s'/vocab.json '%s'/merges.txt '%s'/tokenizer_config.json '%s'/",
                            src, src, src, d), 0);
    free(src);
    return d;
}

Test(hostile, huge_token_ids) {
    /* vocab.json: the reported 3 KB file with one id of 2,147,483,646 */
    char *dir = tokenizer_copy("hostile-ids");
    json_t *v = read_json(dir, "vocab.json");
    json_t *v0 = json_deep_copy(v);
    json_object_set_new(v, "zzhuge", json_integer(2147483646));
    write_json(dir, "vocab.json", v);
    cr_expect_eq(tokenizer_status(dir), QW_ERR_FORMAT, "%s", qw_last_error());
    EXPECT_MSG("vocab.json", "zzhuge", "2147483646");

    /* tokenizer_config.json's added_tokens_decoder */
    write_json(dir, "vocab.json", json_deep_copy(v0));
    json_t *c = read_json(dir, "tokenizer_config.json");
    json_t *dec = json_object_get(c, "added_tokens_decoder");
    cr_assert(json_is_object(dec));
    json_object_set_new(dec, "2000000000",
                        json_pack("{s:s, s:b}", "content", "<|zzadded|>", "special", 1));
    write_json(dir, "tokenizer_config.json", c);
    cr_expect_eq(tokenizer_status(dir), QW_ERR_FORMAT, "%s", qw_last_error());
    EXPECT_MSG("tokenizer_config.json", "<|zzadded|>", "2000000000");

    /* tokenizer.json's added_tokens */
    char *tj = qwt_tmpdir("hostile-ids-tj");
    json_t *t = json_pack("{s:{s:s, s:O, s:[]}, s:[{s:i, s:s, s:b}]}", "model", "type", "BPE",
                          "vocab", v0, "merges", "added_tokens", "id", 1500000000, "content",
                          "<|zztj|>", "special", 1);
    write_json(tj, "tokenizer.json", t);
    cr_expect_eq(tokenizer_status(tj), QW_ERR_FORMAT, "%s", qw_last_error());
    EXPECT_MSG("tokenizer.json", "<|zztj|>", "1500000000");
    json_decref(v0);
    free(tj);
    free(dir);
}

/* With an engine the bound is the model's vocabulary: an id past it is named
 * (file, token, id) before any table is sized. */
Test(hostile, token_id_beyond_the_model_vocabulary) {
    char *src = tiny_f32();
    char *dir = copy_of(src, "hostile-modelvocab");
    json_t *v = read_json(dir, "vocab.json");
    json_object_set_new(v, "zzpast", json_integer(700));   /* model vocab: 512 */
    write_json(dir, "vocab.json", v);
    cr_expect_eq(tokenizer_status(dir), QW_OK, "a standalone tokenizer may have holes: %s",
                 qw_last_error());
    cr_expect_eq(create_status(dir, -1), QW_ERR_FORMAT, "%s", qw_last_error());
    EXPECT_MSG("vocab.json", "zzpast", "700", "vocab_size");
    free(dir);
    free(src);
}

/* ---- item 15: ids between the tokenizer's size and the model's vocabulary ------ */

/* The GPT-2 byte-level spelling of byte b. */
static void byte_str(int b, char out[4]) {
#define PRINTABLE(x) (((x) >= '!' && (x) <= '~') || ((x) >= 0xA1 && (x) <= 0xAC) || ((x) >= 0xAE))
    uint32_t cp = (uint32_t)b;
    if (!PRINTABLE(b)) {
        cp = 256;
        for (int x = 0; x < b; x++) cp += !PRINTABLE(x);
    }
#undef PRINTABLE
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

/* A copy of the tiny model (vocab 512) whose tokenizer holds only the 256
 * byte tokens (ids = byte values): ids 256..511 are the model's padding. */
static char *model_with_small_tokenizer(const char *tag) {
    char *src = tiny_f32();
    char *dir = copy_of(src, tag);
    free(src);
    json_t *v = json_object();
    for (int b = 0; b < 256; b++) {
        char s[4];
        byte_str(b, s);
        json_object_set_new(v, s, json_integer(b));
    }
    write_json(dir, "vocab.json", v);
    char *m = path_in(dir, "merges.txt");
    cr_assert_eq(qwt_write_file(m, "#version: 0.2\n", 14), 0);
    free(m);
    cr_assert_eq(qwt_system("rm -f '%s'/tokenizer_config.json", dir), 0);
    return dir;
}

static qw_engine *engine_at(const char *dir) {
    qw_engine_options *o = opts_for(dir);
    qw_engine *e = NULL;
    qw_status st = qw_engine_create(o, &e);
    qw_engine_options_destroy(o);
    cr_assert_eq(st, QW_OK, "%s", qw_last_error());
    return e;
}

Test(hostile, padding_ids_decode_to_nothing_with_the_engine_tokenizer) {
    char *dir = model_with_small_tokenizer("hostile-pad");
    qw_engine *e = engine_at(dir);
    const qw_tokenizer *t = qw_engine_get_tokenizer(e);
    cr_assert_not_null(t);
    cr_assert_eq(qw_tokenizer_vocab_size(t), 256);
    cr_assert_eq(qw_engine_vocab_size(e), 512);
    char buf[64];
    size_t n = 0;
    const int32_t ids[] = {'A', 300, 'B', 511, 256};
    cr_expect_eq(qw_tokenizer_decode(t, ids, 5, 0, buf, sizeof buf, &n), QW_OK, "%s",
                 qw_last_error());
    cr_expect(n == 2 && strcmp(buf, "AB") == 0, "\"%s\" (%zu)", buf, n);
    const int32_t past[] = {'A', 512};
    cr_expect_eq(qw_tokenizer_decode(t, past, 2, 0, buf, sizeof buf, &n), QW_ERR_TOKEN_OUT_OF_RANGE);
    EXPECT_MSG("512", "index 1");
    const int32_t neg[] = {-1};
    cr_expect_eq(qw_tokenizer_decode(t, neg, 1, 0, buf, sizeof buf, &n), QW_ERR_TOKEN_OUT_OF_RANGE);
    /* A standalone tokenizer of the same files knows no model: 300 is out. */
    qw_tokenizer *alone = NULL;
    cr_assert_eq(qw_tokenizer_create_from_dir(dir, &alone), QW_OK, "%s", qw_last_error());
    cr_expect_eq(qw_tokenizer_decode(alone, ids, 5, 0, buf, sizeof buf, &n),
                 QW_ERR_TOKEN_OUT_OF_RANGE);
    qw_tokenizer_destroy(alone);
    qw_engine_destroy(e);
    free(dir);
}

/* The header's promise: the streamed pieces concatenated equal decode of the
 * generated ids, also when the model samples padding ids (half the
 * vocabulary here, so 48 sampled tokens hit some with certainty). */
Test(hostile, streamed_pieces_equal_decode_with_padding_ids) {
    char *dir = model_with_small_tokenizer("hostile-stream");
    qw_engine *e = engine_at(dir);
    const qw_tokenizer *t = qw_engine_get_tokenizer(e);
    qw_request *r = NULL;
    cr_assert_eq(qw_request_create(&r), QW_OK);
    const int32_t prompt[] = {'H', 'i', 300, ' '};
    cr_assert_eq(qw_request_set_prompt(r, prompt, 4), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_MAX_TOKENS, 48), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_IGNORE_EOS, 1), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_SEED, 1234), QW_OK);
    cr_assert_eq(qw_request_set_double(r, QW_REQ_TEMPERATURE, 1.0), QW_OK);
    cr_assert_eq(qw_engine_submit(e, r), QW_OK, "%s", qw_last_error());
    int32_t toks[64];
    int nt = 0, padding = 0;
    char stream[64 * 8 + 1];
    size_t sl = 0;
    qw_event ev[8];
    while (qw_engine_has_work(e)) {
        size_t n = 0;
        cr_assert_eq(qw_engine_step(e, ev, 8, sizeof ev[0], &n), QW_OK, "%s", qw_last_error());
        for (size_t i = 0; i < n; i++) {
            if (ev[i].kind == QW_EVENT_TOKEN) {
                cr_assert(nt < 64);
                toks[nt++] = ev[i].token;
                padding += ev[i].token >= 256;
            }
            const char *p;
            size_t pl;
            cr_assert_eq(qw_request_get_text_piece(ev[i].request, &p, &pl), QW_OK);
            cr_assert(sl + pl < sizeof stream);
            memcpy(stream + sl, p, pl);
            sl += pl;
        }
    }
    cr_assert_eq(nt, 48);
    cr_assert(padding > 0, "no padding id sampled: the case is not exercised");
    char dec[64 * 8 + 1];
    size_t dl = 0;
    cr_assert_eq(qw_tokenizer_decode(t, toks, (size_t)nt, 0, dec, sizeof dec, &dl), QW_OK, "%s",
                 qw_last_error());
    cr_expect(dl == sl && memcmp(dec, stream, sl) == 0, "pieces (%zu bytes) != decode (%zu bytes)",
              sl, dl);
    qw_request_release(r);
    qw_engine_destroy(e);
    free(dir);
}

/* ---- item 16: a pathological pre-tokenizer regex -------------------------------- */

/* A pattern from tokenizer.json that backtracks exponentially hits PCRE2's
 * match limit: the file's problem (UNSUPPORTED naming it), not INTERNAL. */
Test(hostile, catastrophic_pretokenizer_regex) {
    char *dir = qwt_tmpdir("hostile-regex");
    json_t *v = json_object();
    for (int b = 0; b < 256; b++) {
        char s[4];
        byte_str(b, s);
        json_object_set_new(v, s, json_integer(b));
    }
    json_t *t = json_pack("{s:{s:s, s:o, s:[]}, s:{s:s, s:{s:s}, s:s}}", "model", "type", "BPE",
                          "vocab", v, "merges", "pre_tokenizer", "type", "Split", "pattern",
                          "Regex", "(a|aa)+\\W", "behavior", "Isolated");
    write_json(dir, "tokenizer.json", t);
    qw_tokenizer *tok = NULL;
    cr_assert_eq(qw_tokenizer_create_from_dir(dir, &tok), QW_OK, "%s", qw_last_error());
    char text[80];
    memset(text, 'a', sizeof text);
    size_t n = 0;
    cr_expect_eq(qw_tokenizer_encode(tok, "ab!", 3, 1, NULL, 0, &n), QW_OK, "harmless text");
    cr_expect_eq(qw_tokenizer_encode(tok, text, sizeof text, 1, NULL, 0, &n), QW_ERR_UNSUPPORTED,
                 "%s", qw_last_error());
    EXPECT_MSG("tokenizer.json", "regex");
    qw_tokenizer_destroy(tok);
    free(dir);
}

/* ---- item 17: NaN and infinity in the weights ---------------------------------- */

/* Overwrite element `index` of tensor `name` in dir/model.safetensors with
 * the bytes of `bits` (elem_size bytes, little-endian). */
static void poke_element(const char *dir, const char *name, size_t index, uint32_t bits,
                         size_t elem_size) {
    char *p = path_in(dir, "model.safetensors");
    size_t len = 0;
    unsigned char *f = qwt_read_file(p, &len);
    cr_assert(f && len > 8);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | f[i];
    json_error_t err;
    json_t *h = json_loadb((const char *)f + 8, (size_t)hl, 0, &err);
    cr_assert_not_null(h, "%s", err.text);
    json_t *off = json_object_get(json_object_get(h, name), "data_offsets");
    cr_assert(json_is_array(off), "no tensor %s", name);
    size_t at = 8 + (size_t)hl + (size_t)json_integer_value(json_array_get(off, 0)) +
                index * elem_size;
    cr_assert(at + elem_size <= len);
    memcpy(f + at, &bits, elem_size);
    json_decref(h);
    cr_assert_eq(qwt_write_file(p, f, len), 0);
    free(f);
    free(p);
}

Test(hostile, nan_or_inf_weights_fail_the_create) {
    char *src = tiny_f32();
    char *dir = copy_of(src, "hostile-nan");
    /* model.layers.1.mlp.up_proj.weight is [intermediate, hidden]; element 37 */
    poke_element(dir, "model.layers.1.mlp.up_proj.weight", 37, 0x7fc00000u, 4);
    cr_expect_eq(create_status(dir, -1), QW_ERR_FORMAT, "%s", qw_last_error());
    EXPECT_MSG("model.layers.1.mlp.up_proj.weight", "element 37", "NaN", "QW_OPT_CHECK_WEIGHTS");
    cr_expect_eq(create_status(dir, 0), QW_OK, "QW_OPT_CHECK_WEIGHTS=0 skips the scan: %s",
                 qw_last_error());
    cr_expect_eq(create_status(dir, 1), QW_ERR_FORMAT);
    free(dir);
    free(src);

    char *bsrc = qwt_model("hostile-tiny-bf16", "--shape tiny --dtype bf16 --seed 72");
    cr_assert_not_null(bsrc);
    dir = copy_of(bsrc, "hostile-inf");
    poke_element(dir, "model.norm.weight", 5, 0xff80u, 2);   /* -inf */
    cr_expect_eq(create_status(dir, -1), QW_ERR_FORMAT, "%s", qw_last_error());
    EXPECT_MSG("model.norm.weight", "element 5", "-inf");
    free(dir);
    free(bsrc);
}

Test(hostile, check_weights_option_range) {
    qw_engine_options *o = NULL;
    cr_assert_eq(qw_engine_options_create(&o), QW_OK);
    cr_expect_eq(qw_engine_options_set_int(o, QW_OPT_CHECK_WEIGHTS, 2), QW_ERR_INVALID_ARGUMENT);
    EXPECT_MSG("QW_OPT_CHECK_WEIGHTS");
    cr_expect_eq(qw_engine_options_set_int(o, QW_OPT_CHECK_WEIGHTS, -1), QW_ERR_INVALID_ARGUMENT);
    cr_expect_eq(qw_engine_options_set_int(o, QW_OPT_CHECK_WEIGHTS, 0), QW_OK);
    cr_expect_eq(qw_engine_options_set_double(o, QW_OPT_CHECK_WEIGHTS, 1.0), QW_ERR_INVALID_ARGUMENT);
    qw_engine_options_destroy(o);
}
