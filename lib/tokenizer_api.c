/*
 * tokenizer_api.c - the public tokenizer API (qw_tokenizer_*,
 * qw_engine_get_tokenizer): caller-buffer wrappers over tokenizer.h, and the
 * model directory lookup the engine does at create.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "file.h"
#include "tokenizer_api.h"

static qw_status handle_new(qwi_tokenizer *impl, bool engine_owned, qw_tokenizer **out) {
    qw_tokenizer *h = calloc(1, sizeof *h);
    if (!h) {
        qwi_tokenizer_free(impl);
        return qwi_fail(QW_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    }
    h->impl = impl;
    h->engine_owned = engine_owned;
    *out = h;
    return QW_OK;
}

void qwi_tokenizer_handle_free(qw_tokenizer *tok) {
    if (!tok) return;
    qwi_tokenizer_free(tok->impl);
    free(tok);
}

static bool dir_has(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (!p) return true;   /* let the loader report the failure */
    snprintf(p, n, "%s/%s", dir, name);
    bool ok = qwi_file_exists(p);   /* of any type: the loader refuses a FIFO */
    free(p);
    return ok;
}

qw_status qwi_tokenizer_open_model_dir(const char *dir, int32_t model_vocab, qw_tokenizer **out) {
    *out = NULL;
    /* No tokenizer file at all: an id-only engine, not an error. */
    if (!dir_has(dir, "tokenizer.json") && !dir_has(dir, "vocab.json") && !dir_has(dir, "merges.txt"))
        return QW_OK;
    qwi_tokenizer *impl = NULL;
    /* Bounded by the model's vocabulary before any table is sized. */
    qw_status st = qwi_tokenizer_load_dir_for_model(dir, model_vocab, &impl);
    if (st != QW_OK) return qwi_fail_prefix(st, "the model's tokenizer");
    return handle_new(impl, true, out);
}

QW_API qw_status qw_tokenizer_create_from_dir(const char *dir, qw_tokenizer **out) {
    if (!out) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_tokenizer_create_from_dir: out is NULL");
    *out = NULL;
    if (!dir) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_tokenizer_create_from_dir: dir is NULL");
    qwi_tokenizer *impl = NULL;
    qw_status st = qwi_tokenizer_load_dir(dir, &impl);
    if (st != QW_OK) return st;
    return handle_new(impl, false, out);
}

QW_API void qw_tokenizer_destroy(qw_tokenizer *tok) {
    if (!tok || tok->engine_owned) return;
    qwi_tokenizer_handle_free(tok);
}

QW_API int32_t qw_tokenizer_vocab_size(const qw_tokenizer *tok) {
    return tok ? qwi_tokenizer_vocab_size(tok->impl) : 0;
}

QW_API qw_status qw_tokenizer_encode(const qw_tokenizer *tok, const char *text, size_t len, int parse_special,
                                     int32_t *ids, size_t cap, size_t *n_out) {
    if (n_out) *n_out = 0;
    if (!tok || !n_out || (!text && len > 0))
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_tokenizer_encode: tokenizer, text or n_out is NULL");
    if (cap > 0 && !ids) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_tokenizer_encode: ids is NULL with cap %zu", cap);
    if (len == 0) return QW_OK;
    int32_t *all = NULL;
    size_t n = 0;
    qw_status st = qwi_tokenizer_encode(tok->impl, text, len, parse_special != 0, &all, &n);
    if (st != QW_OK) return st;
    if (cap && n) memcpy(ids, all, QWI_MIN(n, cap) * sizeof *ids);
    free(all);
    *n_out = n;
    return QW_OK;
}

QW_API qw_status qw_tokenizer_decode(const qw_tokenizer *tok, const int32_t *ids, size_t n, int skip_special,
                                     char *buf, size_t cap, size_t *len_out) {
    if (len_out) *len_out = 0;
    if (!tok || !len_out || (!ids && n > 0))
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_tokenizer_decode: tokenizer, ids or len_out is NULL");
    if (cap > 0 && !buf) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_tokenizer_decode: buf is NULL with cap %zu", cap);
    char *all = NULL;
    size_t len = 0;
    if (n > 0) {
        qw_status st = qwi_tokenizer_decode(tok->impl, ids, n, skip_special != 0, &all, &len);
        if (st != QW_OK) return st;
    }
    if (cap > 0) {
        size_t k = QWI_MIN(len, cap - 1);
        if (k) memcpy(buf, all, k);
        buf[k] = '\0';
    }
    free(all);
    *len_out = len;
    return QW_OK;
}

QW_API qw_status qw_tokenizer_token_id(const qw_tokenizer *tok, const char *token, int32_t *id_out) {
    if (id_out) *id_out = -1;
    if (!tok || !token || !id_out)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_tokenizer_token_id: tokenizer, token or id_out is NULL");
    int32_t id = qwi_tokenizer_token_id(tok->impl, token);
    if (id < 0) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_tokenizer_token_id: no token \"%.64s\"", token);
    *id_out = id;
    return QW_OK;
}

QW_API int qw_tokenizer_is_special(const qw_tokenizer *tok, int32_t id) {
    return tok ? qwi_tokenizer_is_special(tok->impl, id) : 0;
}

QW_API const qw_tokenizer *qw_engine_get_tokenizer(const qw_engine *engine) {
    return engine ? engine->tokenizer : NULL;
}
