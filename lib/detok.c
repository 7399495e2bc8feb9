/*
 * detok.c - token ids -> UTF-8 text: whole-sequence decode and the
 * incremental detokenizer used for streaming.
 *
 * Both share one rule for bytes that are not UTF-8, the one of Hugging Face
 * decode() (Rust's String::from_utf8_lossy, same as Python's
 * errors="replace"): each maximal subpart of an ill-formed sequence (the
 * longest prefix of a valid sequence, or one byte) becomes one U+FFFD. The
 * streaming detokenizer applies it as soon as bytes are known bad, and holds
 * back only a trailing prefix that a later token could still complete, so
 * its pieces concatenate to exactly decode()'s output.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"
#include "utf8.h"

static const char qwi_fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

/* Append the lossy conversion of s[0..n) to out (room for 3 * n bytes is
 * the caller's). With final = 0 a trailing incomplete prefix is not
 * converted: returns the number of bytes consumed. */
static size_t u8_lossy(const unsigned char *s, size_t n, int final, char *out, size_t *olen) {
    size_t i = 0, o = *olen;
    while (i < n) {
        size_t l;
        int k = qwi_utf8_step(s + i, n - i, &l);
        if (k == U8_INCOMPLETE && !final) break;
        if (k == U8_VALID) {
            memcpy(out + o, s + i, l);
            o += l;
        } else {
            memcpy(out + o, qwi_fffd, 3);
            o += 3;
        }
        i += l;
    }
    *olen = o;
    return i;
}

/* Ids up to the model's vocabulary are valid (id_limit, see
 * tokenizer_impl.h); those past the tokenizer's own name no token. */
static qw_status check_id(const qwi_tokenizer *t, int32_t id, size_t index) {
    if (id < 0 || id >= t->id_limit)
        return qwi_fail(QW_ERR_TOKEN_OUT_OF_RANGE,
                        "tokenizer: token id %d at index %zu is outside the vocabulary [0, %d)",
                        (int)id, index, (int)t->id_limit);
    return QW_OK;
}

/* 1 if a valid id adds no bytes: a special token under skip_special, or an
 * id past the tokenizer's table (a padding row of the model's embedding). */
static int skipped(const qwi_tokenizer *t, int32_t id, int skip_special) {
    return id >= t->vocab_size || (skip_special && (t->flags[id] & QWI_TOKF_SPECIAL));
}

qw_status qwi_tokenizer_decode(const qwi_tokenizer *t, const int32_t *ids, size_t n,
                               int skip_special, char **out, size_t *len) {
    if (out) *out = NULL;
    if (len) *len = 0;
    if (!t || !out || !len || (!ids && n))
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "tokenizer_decode: NULL argument");
    size_t raw = 0;
    for (size_t i = 0; i < n; i++) {
        qw_status st = check_id(t, ids[i], i);
        if (st) return st;
        if (!skipped(t, ids[i], skip_special)) raw += t->raw_len[ids[i]];
    }
    unsigned char *bytes = malloc(raw + 1);
    char *text = malloc(3 * raw + 1);
    if (!bytes || !text) {
        free(bytes);
        free(text);
        return qwi_fail(QW_ERR_OUT_OF_MEMORY, "tokenizer_decode: out of memory");
    }
    size_t b = 0;
    for (size_t i = 0; i < n; i++) {
        if (skipped(t, ids[i], skip_special)) continue;
        memcpy(bytes + b, t->raw_arena + t->raw_off[ids[i]], t->raw_len[ids[i]]);
        b += t->raw_len[ids[i]];
    }
    size_t o = 0;
    u8_lossy(bytes, b, 1, text, &o);
    free(bytes);
    text[o] = '\0';
    /* shrink: the 3x worst case is rarely needed */
    char *shrunk = realloc(text, o + 1);
    *out = shrunk ? shrunk : text;
    *len = o;
    return QW_OK;
}

/* ---- streaming ----------------------------------------------------------------- */

struct qwi_detok {
    const qwi_tokenizer *t;
    int skip_special;
    unsigned char pending[4];   /* held-back prefix of a character (<= 3 bytes) */
    size_t n_pending;
    unsigned char *in;          /* pending + the new token's bytes */
    char *out;                  /* the piece handed out */
    size_t cap;                 /* capacity of in; out has 3 * cap */
};

qw_status qwi_detok_init(const qwi_tokenizer *t, int skip_special, qwi_detok **out) {
    if (!out) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "detok_init: NULL out");
    *out = NULL;
    if (!t) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "detok_init: NULL tokenizer");
    qwi_detok *d = calloc(1, sizeof *d);
    if (!d) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "detok_init: out of memory");
    d->t = t;
    d->skip_special = skip_special;
    *out = d;
    return QW_OK;
}

static int detok_reserve(qwi_detok *d, size_t n) {
    if (n <= d->cap) return 0;
    size_t cap = d->cap ? d->cap : 64;
    while (cap < n) cap *= 2;
    unsigned char *in = realloc(d->in, cap);
    if (in) d->in = in;
    char *o = realloc(d->out, 3 * cap + 1);
    if (o) d->out = o;
    if (!in || !o) return -1;
    d->cap = cap;
    return 0;
}

qw_status qwi_detok_feed(qwi_detok *d, int32_t id, const char **piece, size_t *len) {
    static const char empty[1] = "";
    if (piece) *piece = empty;
    if (len) *len = 0;
    if (!d || !piece || !len) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "detok_feed: NULL argument");
    qw_status st = check_id(d->t, id, 0);
    if (st) return st;
    if (skipped(d->t, id, d->skip_special)) return QW_OK;
    size_t rl = d->t->raw_len[id];
    if (detok_reserve(d, d->n_pending + rl + 1))
        return qwi_fail(QW_ERR_OUT_OF_MEMORY, "detok_feed: out of memory");
    memcpy(d->in, d->pending, d->n_pending);
    memcpy(d->in + d->n_pending, d->t->raw_arena + d->t->raw_off[id], rl);
    size_t n = d->n_pending + rl, o = 0;
    size_t used = u8_lossy(d->in, n, 0, d->out, &o);
    /* what is left is a prefix of one character: at most 3 bytes */
    d->n_pending = n - used;
    memcpy(d->pending, d->in + used, d->n_pending);
    d->out[o] = '\0';
    *piece = d->out;
    *len = o;
    return QW_OK;
}

qw_status qwi_detok_flush(qwi_detok *d, const char **piece, size_t *len) {
    static const char empty[1] = "";
    if (piece) *piece = empty;
    if (len) *len = 0;
    if (!d || !piece || !len)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "detok_flush: NULL argument");
    if (d->n_pending == 0) return QW_OK;
    if (detok_reserve(d, d->n_pending + 1))
        return qwi_fail(QW_ERR_OUT_OF_MEMORY, "detok_flush: out of memory");
    size_t o = 0;
    u8_lossy(d->pending, d->n_pending, 1, d->out, &o);
    d->n_pending = 0;
    d->out[o] = '\0';
    *piece = d->out;
    *len = o;
    return QW_OK;
}

void qwi_detok_free(qwi_detok *d) {
    if (!d) return;
    free(d->in);
    free(d->out);
    free(d);
}
