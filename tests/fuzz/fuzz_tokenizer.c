/*
 * fuzz_tokenizer.c - libFuzzer harness for the tokenizer files: loading
 * tokenizer.json, or vocab.json + merges.txt (+ tokenizer_config.json's
 * added tokens) (qwi_tokenizer_load_dir), then encoding a text with the
 * loaded tokenizer and decoding it back, whole and streamed.
 *
 * Input: a container (fuzz_util.h) of four files and a text:
 *   0 tokenizer.json   1 vocab.json   2 merges.txt   3 tokenizer_config.json
 *   4 the text to encode (absent or empty: a fixed sample with special
 *     tokens, CJK, digits and whitespace runs)
 *
 * Checked beyond "no crash, no leak, no undefined behaviour": the status
 * contract of every call (qwf_check_status: in particular never
 * QW_ERR_INTERNAL, which would mean a bug, e.g. a regex failure reported
 * as one); encoded ids lie in [0, vocab size); decode output is valid UTF-8;
 * the streamed pieces of the detokenizer concatenate to exactly what decode
 * returns (the header's promise); printable ASCII text decodes back to
 * itself; decoding arbitrary ids gives OK or QW_ERR_TOKEN_OUT_OF_RANGE.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"
#include "fuzz/fuzz_util.h"

static const char *const names[] = {"tokenizer.json", "vocab.json", "merges.txt",
                                    "tokenizer_config.json"};
#define NUM_NAMES ((int)(sizeof names / sizeof names[0]))

static const char sample_text[] =
    "Hello, world! It's 2024: 12345 apples.\n\n  <|im_start|>user\n\xe4\xbd\xa0\xe5\xa5\xbd "
    "<think>x</think>   \t end<|im_end|><|endoftext|>";

/* 1 when s[0..n) is well-formed UTF-8 (no overlongs, surrogates or code
 * points past U+10FFFF). */
static int utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len;
        unsigned cp;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; }
        else return 0;
        if (n - i < len) return 0;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += len;
    }
    return 1;
}

static int printable_ascii(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!((c >= 0x20 && c < 0x7F) || c == '\n' || c == '\t')) return 0;
    }
    return 1;
}

/* Decode ids whole and streamed; the two must agree byte for byte. Returns
 * the decoded text (caller frees), or NULL when decode refused the ids. */
static char *decode_both(const qwi_tokenizer *tok, const int32_t *ids, size_t n, int skip,
                         size_t *len) {
    char *text = NULL;
    *len = 0;
    qwf_clear_error();
    qw_status st = qwf_check_status(qwi_tokenizer_decode(tok, ids, n, skip, &text, len),
                                    "qwi_tokenizer_decode");
    if (st != QW_OK) {
        QWF_CHECK(st == QW_ERR_TOKEN_OUT_OF_RANGE, "decode failed with %s", qw_status_string(st));
        QWF_CHECK(text == NULL, "decode failed but returned text");
        return NULL;
    }
    QWF_CHECK(text != NULL && text[*len] == '\0', "decode returned no NUL-terminated text");
    QWF_CHECK(utf8_valid((const unsigned char *)text, *len), "decode returned invalid UTF-8");

    qwi_detok *d = NULL;
    qwf_clear_error();
    st = qwf_check_status(qwi_detok_init(tok, skip, &d), "qwi_detok_init");
    if (st != QW_OK) {   /* out of memory: nothing to compare */
        QWF_CHECK(st == QW_ERR_OUT_OF_MEMORY, "detok init failed with %s", qw_status_string(st));
        return text;
    }
    char *cat = malloc(*len + 1);
    QWF_CHECK(cat != NULL, "out of memory");
    size_t at = 0;
    for (size_t i = 0; i <= n; i++) {
        const char *piece = NULL;
        size_t pl = 0;
        qwf_clear_error();
        st = i < n ? qwf_check_status(qwi_detok_feed(d, ids[i], &piece, &pl), "qwi_detok_feed")
                   : qwf_check_status(qwi_detok_flush(d, &piece, &pl), "qwi_detok_flush");
        QWF_CHECK(st == QW_OK, "detok %s failed with %s on an id decode accepted",
                  i < n ? "feed" : "flush", qw_status_string(st));
        QWF_CHECK(piece != NULL, "detok returned a NULL piece");
        QWF_CHECK(utf8_valid((const unsigned char *)piece, pl), "detok piece is invalid UTF-8");
        QWF_CHECK(at + pl <= *len, "streamed pieces are longer than decode's %zu bytes", *len);
        memcpy(cat + at, piece, pl);
        at += pl;
    }
    QWF_CHECK(at == *len && memcmp(cat, text, at) == 0,
              "streamed pieces (%zu bytes) differ from decode (%zu bytes), skip_special %d", at,
              *len, skip);
    free(cat);
    qwi_detok_free(d);
    return text;
}

static void exercise(const qwi_tokenizer *tok, const char *text, size_t tlen) {
    int32_t vocab = qwi_tokenizer_vocab_size(tok);
    QWF_CHECK(vocab > 0, "loaded tokenizer with vocab size %d", vocab);

    for (int ps = 1; ps >= 0; ps--) {
        int32_t *ids = NULL;
        size_t n = 0;
        qwf_clear_error();
        qw_status st = qwf_check_status(qwi_tokenizer_encode(tok, text, tlen, ps, &ids, &n),
                                        "qwi_tokenizer_encode");
        if (st != QW_OK) {
            /* Invalid UTF-8, a regex that gives up on this text, no memory:
             * refusals with a message (never INTERNAL: qwf_check_status). */
            QWF_CHECK(ids == NULL && n == 0, "encode failed but returned ids");
            continue;
        }
        QWF_CHECK(tlen == 0 || n > 0, "%zu bytes of text encoded to no ids", tlen);
        for (size_t i = 0; i < n; i++)
            QWF_CHECK(ids[i] >= 0 && ids[i] < vocab, "encode gave id %d outside [0, %d)", ids[i],
                      vocab);
        for (int skip = 0; skip <= 1; skip++) {
            size_t dl = 0;
            char *dec = decode_both(tok, ids, n, skip, &dl);
            QWF_CHECK(dec != NULL, "decode refused ids that encode produced");
            if (skip == 0 && printable_ascii(text, tlen))
                QWF_CHECK(dl == tlen && memcmp(dec, text, tlen) == 0,
                          "ASCII text does not decode back to itself (parse_special %d)", ps);
            free(dec);
        }
        free(ids);
    }

    /* Arbitrary ids: the text's bytes as little-endian int32 words, plus
     * the edges of the vocabulary. */
    int32_t raw[70];
    size_t nr = 0;
    raw[nr++] = 0;
    raw[nr++] = vocab - 1;
    raw[nr++] = vocab;
    raw[nr++] = -1;
    raw[nr++] = INT32_MAX;
    raw[nr++] = INT32_MIN;
    for (size_t i = 0; i + 4 <= tlen && nr < sizeof raw / sizeof raw[0]; i += 4) {
        uint32_t w = (uint32_t)(unsigned char)text[i] | (uint32_t)(unsigned char)text[i + 1] << 8 |
                     (uint32_t)(unsigned char)text[i + 2] << 16 |
                     (uint32_t)(unsigned char)text[i + 3] << 24;
        raw[nr++] = (int32_t)w;
    }
    for (size_t i = 0; i < nr; i++) {
        size_t dl;
        free(decode_both(tok, &raw[i], 1, (int)(i & 1), &dl));
        size_t bl = 0;
        const char *b = qwi_tokenizer_token_bytes(tok, raw[i], &bl);
        if (raw[i] >= 0 && raw[i] < vocab)
            QWF_CHECK(b != NULL, "token_bytes(%d) is NULL inside the vocabulary", raw[i]);
        else
            QWF_CHECK(b == NULL, "token_bytes(%d) outside [0, %d) is not NULL", raw[i], vocab);
        (void)qwi_tokenizer_is_special(tok, raw[i]);
        (void)qwi_tokenizer_is_added(tok, raw[i]);
    }
    size_t dl;
    free(decode_both(tok, raw + 6, nr - 6, 0, &dl));

    /* Lookup by string form, from the token's own bytes when short. */
    (void)qwi_tokenizer_token_id(tok, "<|im_end|>");
    (void)qwi_tokenizer_token_id(tok, "\xc4\xa0the");
    char s[65];
    size_t sl = tlen < 64 ? tlen : 64;
    memcpy(s, text, sl);
    s[sl] = '\0';
    int32_t id = qwi_tokenizer_token_id(tok, s);
    QWF_CHECK(id >= -1 && id < vocab, "token_id gave %d", id);
}

/* libFuzzer's entry point: one input, a container of four tokenizer files and a text
 * (see the top of this file). Returns 0; aborts when a check fails. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = qwf_dir("tokenizer");
    qwf_part parts[QWF_MAX_PARTS];
    int np = qwf_split(data, size, parts);
    qwf_write_files(dir, names, NUM_NAMES, parts, np);

    qwi_tokenizer *tok = (qwi_tokenizer *)1;
    qwf_clear_error();
    qw_status st = qwf_check_status(qwi_tokenizer_load_dir(dir, &tok), "qwi_tokenizer_load_dir");
    QWF_CHECK((st == QW_OK) == (tok != NULL), "load: status %d with tokenizer %p", (int)st,
              (void *)tok);
    if (!tok) return 0;
    const char *text = sample_text;
    size_t tlen = sizeof sample_text - 1;
    if (np > NUM_NAMES && parts[NUM_NAMES].len > 0) {
        text = (const char *)parts[NUM_NAMES].data;
        tlen = parts[NUM_NAMES].len;
    }
    exercise(tok, text, tlen);
    qwi_tokenizer_free(tok);
    return 0;
}
