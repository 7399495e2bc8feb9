/*
 * test_stop_match.c - the stop-string matcher and the request's streamed
 * text around it, without an engine: the KMP matcher against a brute-force
 * search on random texts fed in random chunks; and, on the real Qwen
 * vocabulary, a multi-byte text cut into tokens at every byte position
 * (inside characters too), with stop strings that span the cut, fed token
 * by token through the request's own text path (qwi_request_text_token /
 * qwi_request_text_event, what the engine calls) and checked against a
 * direct search of the whole text: which string, on which token, the final
 * text, every streamed piece, and that each event holds back exactly the
 * bytes that could still start a stop string. Also the list's validation.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"
#include "stop_strings.h"
#include "tokenizer.h"
#include "tokenizer_impl.h"
#include "utf8.h"
#include "util/testutil.h"

/* ---- brute force ---------------------------------------------------------------- */

/* The first match in text[0..n) ending after `from` (a byte count): earliest
 * end, then longest, then lowest index. Returns the index (-1 none), *end
 * the match's end. */
static int ref_first_match(const char *text, size_t n, size_t from, char **str, size_t *len, int ns,
                           size_t *end) {
    for (size_t e = from + 1; e <= n; e++) {
        int best = -1;
        for (int i = 0; i < ns; i++)
            if (len[i] <= e && memcmp(text + e - len[i], str[i], len[i]) == 0 && (best < 0 || len[i] > len[best]))
                best = i;
        if (best >= 0) {
            *end = e;
            return best;
        }
    }
    *end = n;
    return -1;
}

/* Longest suffix of text[0..n) that is a proper prefix of some string. */
static size_t ref_hold(const char *text, size_t n, char **str, size_t *len, int ns) {
    size_t h = 0;
    for (int i = 0; i < ns; i++)
        for (size_t k = QWI_MIN(len[i] - 1, n); k > h; k--)
            if (memcmp(text + n - k, str[i], k) == 0) {
                h = k;
                break;
            }
    return h;
}

static uint64_t rng_state;
static uint32_t rnd(uint32_t n) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33) % n;
}

/* ---- the matcher ------------------------------------------------------------------ */

Test(stop_match, kmp_equals_brute_force_on_random_chunks) {
    rng_state = 12345;
    for (int iter = 0; iter < 3000; iter++) {
        /* A 3-letter alphabet makes overlaps and shared prefixes common. */
        int ns = 1 + (int)rnd(4);
        char *str[4];
        size_t len[4];
        for (int i = 0; i < ns; i++) {
            len[i] = 1 + rnd(5);
            str[i] = malloc(len[i] + 1);
            for (size_t k = 0; k < len[i]; k++) str[i][k] = (char)('a' + rnd(3));
            str[i][len[i]] = 0;
        }
        qwi_stop_list *l = NULL;
        cr_assert_eq(qwi_stop_list_create((const char *const *)str, len, (size_t)ns, "t", &l), QW_OK, "%s",
                     qwi_last_error());
        qwi_stop_matcher m;
        cr_assert_eq(qwi_stop_matcher_init(&m, l), QW_OK);
        char text[64];
        size_t n = 20 + rnd(40), fed = 0;
        for (size_t k = 0; k < n; k++) text[k] = (char)('a' + rnd(3));
        /* Chunks of 0..4 bytes; matches ending in a "may not stop" chunk are
         * passed over, as before QW_REQ_MIN_TOKENS. */
        size_t skip_until = rnd(2) ? rnd((uint32_t)n) : 0;
        while (fed < n) {
            size_t c = QWI_MIN((size_t)rnd(5), n - fed);
            bool may = fed + c > skip_until;
            size_t end, ref_end;
            int32_t hit = qwi_stop_matcher_feed(&m, text + fed, c, may, &end);
            /* the reference: first match ending inside this chunk, if allowed */
            int ref = -1;
            if (may) {
                ref = ref_first_match(text, fed + c, fed, str, len, ns, &ref_end);
            }
            cr_assert_eq(hit, ref, "iter %d: chunk [%zu, %zu): matcher %d, reference %d", iter, fed, fed + c, hit, ref);
            if (hit >= 0) {
                cr_assert_eq(fed + end, ref_end, "iter %d: match end", iter);
                break;
            }
            cr_assert_eq(end, c);
            fed += c;
            cr_assert_eq(qwi_stop_matcher_hold(&m), ref_hold(text, fed, str, len, ns), "iter %d: hold after %zu bytes",
                         iter, fed);
        }
        qwi_stop_matcher_free(&m);
        qwi_stop_list_free(l);
        for (int i = 0; i < ns; i++) free(str[i]);
    }
}

Test(stop_match, list_validation) {
    qwi_stop_list *l = (qwi_stop_list *)1;
    const char *ok[] = {"a", "\xe4\xb8\xad"};
    cr_assert_eq(qwi_stop_list_create(ok, NULL, 0, "t", &l), QW_OK);
    cr_assert_null(l, "n = 0 is no list");
    cr_assert_eq(qwi_stop_list_create(ok, NULL, 2, "t", &l), QW_OK);
    cr_assert_eq(l->n, 2);
    cr_assert_eq(l->max_len, 3);
    qwi_stop_list *c = NULL;
    cr_assert_eq(qwi_stop_list_copy(l, &c), QW_OK);
    cr_assert_neq(c->str[1], l->str[1]);
    cr_assert_eq(memcmp(c->str[1], l->str[1], 3), 0);
    cr_assert_eq(c->fail[1][3], l->fail[1][3]);
    qwi_stop_list_free(c);
    qwi_stop_list_free(l);

    const char *empty[] = {"a", ""};
    cr_assert_eq(qwi_stop_list_create(empty, NULL, 2, "t", &l), QW_ERR_INVALID_ARGUMENT);
    cr_assert_null(l);
    cr_assert(strstr(qwi_last_error(), "stop string 1 is empty"), "%s", qwi_last_error());
    const char *half[] = {"\xe4\xb8"};
    cr_assert_eq(qwi_stop_list_create(half, NULL, 1, "t", &l), QW_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(qwi_last_error(), "stop string 0 is not valid UTF-8"), "%s", qwi_last_error());
    const char *nul[] = {"a", NULL};
    cr_assert_eq(qwi_stop_list_create(nul, NULL, 2, "t", &l), QW_ERR_INVALID_ARGUMENT);
    cr_assert_eq(qwi_stop_list_create(NULL, NULL, 2, "t", &l), QW_ERR_INVALID_ARGUMENT);
    char *big = malloc(QW_MAX_STOP_STRING_BYTES + 2);
    memset(big, 'x', QW_MAX_STOP_STRING_BYTES + 1);
    big[QW_MAX_STOP_STRING_BYTES + 1] = 0;
    const char *bigs[] = {big};
    cr_assert_eq(qwi_stop_list_create(bigs, NULL, 1, "t", &l), QW_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(qwi_last_error(), "QW_MAX_STOP_STRING_BYTES"), "%s", qwi_last_error());
    size_t maxlen = QW_MAX_STOP_STRING_BYTES;
    cr_assert_eq(qwi_stop_list_create(bigs, &maxlen, 1, "t", &l), QW_OK, "exactly the limit is fine");
    qwi_stop_list_free(l);
    free(big);
    const char *many[QW_MAX_STOP_STRINGS + 1];
    for (int i = 0; i <= QW_MAX_STOP_STRINGS; i++) many[i] = "s";
    cr_assert_eq(qwi_stop_list_create(many, NULL, QW_MAX_STOP_STRINGS + 1, "t", &l), QW_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(qwi_last_error(), "QW_MAX_STOP_STRINGS"), "%s", qwi_last_error());
    cr_assert_eq(qwi_stop_list_create(many, NULL, QW_MAX_STOP_STRINGS, "t", &l), QW_OK);
    qwi_stop_list_free(l);
    /* explicit lengths: a NUL byte inside is just a byte */
    const char *withnul[] = {"a\0b"};
    size_t three = 3;
    cr_assert_eq(qwi_stop_list_create(withnul, &three, 1, "t", &l), QW_OK);
    cr_assert_eq(l->len[0], 3);
    qwi_stop_list_free(l);
}

/* ---- every token boundary on the real vocabulary ------------------------------------ */

/* Latin, accents, CJK, Hangul, an emoji (4 bytes), and ASCII around. */
static const char TEXT[] = "Hi \xc3\x9cnic\xc3\xb6" "de \xe4\xb8\xad\xe6\x96\x87\xe6\xb5\x8b\xe8\xaf\x95 "
                           "\xec\x95\x88\xeb\x85\x95 \xf0\x9f\x98\x80 caf\xc3\xa9, ok \xe4\xb8\xad!";

typedef struct {
    qwi_tokenizer *tok;
    int32_t byte_id[256];   /* the token of each single byte */
} vocab_ctx;

static int is_cont(unsigned char b) { return (b & 0xC0) == 0x80; }

/* Append the tokens of s[0..n) to ids: the BPE encoding of its whole
 * characters, with the bytes of a character cut at either end as
 * single-byte tokens, so that a token boundary falls exactly at both ends. */
static void append_tokens(const vocab_ctx *v, const char *s, size_t n, int32_t *ids, size_t *nids) {
    size_t a = 0, b = n;
    while (a < n && is_cont((unsigned char)s[a])) ids[(*nids)++] = v->byte_id[(unsigned char)s[a++]];
    /* a character cut at the end: back up to its lead byte */
    size_t lead = b;
    while (lead > a && is_cont((unsigned char)s[lead - 1])) lead--;
    if (lead > a) {
        size_t l;
        lead--;
        int k = qwi_utf8_step((const unsigned char *)s + lead, b - lead, &l);
        if (k == U8_VALID) lead = b;
    }
    if (lead > a) {
        int32_t *enc = NULL;
        size_t ne = 0;
        cr_assert_eq(qwi_tokenizer_encode(v->tok, s + a, lead - a, 0, &enc, &ne), QW_OK, "%s", qwi_last_error());
        memcpy(ids + *nids, enc, ne * sizeof *enc);
        *nids += ne;
        free(enc);
    }
    for (size_t k = QWI_MAX(lead, a); k < b; k++) ids[(*nids)++] = v->byte_id[(unsigned char)s[k]];
}

/* Start and end of the character holding byte p. */
static size_t char_start(const char *s, size_t p) {
    while (p > 0 && is_cont((unsigned char)s[p])) p--;
    return p;
}
static size_t char_end(const char *s, size_t n, size_t p) {
    p++;
    while (p < n && is_cont((unsigned char)s[p])) p++;
    return p;
}

/* Feed ids through a fresh request's text path with the given stop strings
 * and check everything against the direct search of TEXT. */
static void run_case(const vocab_ctx *v, const int32_t *ids, size_t nids, char **str, size_t *len, int ns,
                     int include, const char *what) {
    const size_t n = sizeof TEXT - 1;
    qw_request *r = NULL;
    cr_assert_eq(qw_request_create(&r), QW_OK);
    cr_assert_eq(qw_request_set_stop_strings(r, (const char *const *)str, len, (size_t)ns), QW_OK, "%s",
                 qw_last_error());
    cr_assert_eq(qw_request_set_int(r, QW_REQ_INCLUDE_STOP_STR_IN_OUTPUT, include), QW_OK);
    cr_assert_eq(qwi_request_text_start(r, v->tok), QW_OK);

    size_t ref_end;
    int ref = ref_first_match(TEXT, n, 0, str, len, ns, &ref_end);
    char *streamed = malloc(n + 1);
    size_t slen = 0, raw = 0;
    int32_t hit = -1;
    size_t i;
    for (i = 0; i < nids; i++) {
        raw += v->tok->raw_len[ids[i]];
        hit = qwi_request_text_token(r, ids[i], true);
        bool final = hit >= 0 || i + 1 == nids;
        qwi_request_text_event(r, final);
        const char *p;
        size_t pl;
        cr_assert_eq(qw_request_get_text_piece(r, &p, &pl), QW_OK);
        cr_assert(slen + pl <= n && memcmp(TEXT + slen, p, pl) == 0, "%s: piece of token %zu is not the text", what, i);
        memcpy(streamed + slen, p, pl);
        slen += pl;
        if (ref >= 0) {
            size_t stop_at = include ? ref_end : ref_end - len[ref];
            cr_assert(slen <= stop_at, "%s: token %zu streamed %zu bytes, past the stop at %zu", what, i, slen, stop_at);
        }
        if (final) break;
        /* Held back: exactly what could still start a stop string. */
        size_t held = r->text_len - slen;
        cr_assert_eq(held, ref_hold(r->text, r->text_len, str, len, ns), "%s: token %zu holds back %zu bytes", what, i,
                     held);
    }
    cr_assert_eq(hit, ref, "%s: matched string %d, direct search %d", what, hit, ref);
    size_t want_len = n;
    if (ref >= 0) {
        /* the token that completes the match: the first whose bytes reach its end */
        size_t need = 0, k = 0;
        for (k = 0; k < nids; k++) {
            need += v->tok->raw_len[ids[k]];
            if (need >= ref_end) break;
        }
        cr_assert_eq(i, k, "%s: stopped on token %zu, the match ends in token %zu", what, i, k);
        (void)raw;
        want_len = include ? ref_end : ref_end - len[ref];
    }
    size_t tl = 0;
    char buf[256];
    cr_assert_eq(qw_request_get_text(r, buf, sizeof buf, &tl), QW_OK);
    cr_assert_eq(tl, want_len, "%s: text of %zu bytes, want %zu", what, tl, want_len);
    cr_assert_eq(memcmp(buf, TEXT, tl), 0, "%s: text", what);
    cr_assert_eq(slen, tl, "%s: pieces concatenated != text", what);
    cr_assert_eq(memcmp(streamed, buf, tl), 0);
    free(streamed);
    qw_request_release(r);
}

Test(stop_match, qwen_every_token_boundary) {
    const char *dir = qwt_qwen_tokenizer_dir();
    if (!dir) cr_skip("no Qwen tokenizer data (../shared/data/qwen-tokenizer or $QW_SHARED_DIR)");
    vocab_ctx v;
    cr_assert_eq(qwi_tokenizer_load_dir(dir, &v.tok), QW_OK, "%s", qwi_last_error());
    for (int b = 0; b < 256; b++) v.byte_id[b] = -1;
    for (int32_t id = 0; id < v.tok->vocab_size; id++)
        if (v.tok->raw_len[id] == 1 && !(v.tok->flags[id] & QWI_TOKF_SPECIAL))
            v.byte_id[(unsigned char)v.tok->raw_arena[v.tok->raw_off[id]]] = id;
    for (int b = 0; b < 256; b++) cr_assert_geq(v.byte_id[b], 0, "no token for byte %d", b);

    const size_t n = sizeof TEXT - 1;
    int32_t ids[4 * sizeof TEXT];
    int cases = 0, cut_inside = 0;
    for (size_t p = 1; p < n; p++) {
        /* a token boundary exactly at byte p */
        size_t nids = 0;
        append_tokens(&v, TEXT, p, ids, &nids);
        append_tokens(&v, TEXT + p, n - p, ids, &nids);
        /* stop strings spanning p: from the character holding byte p - 1
         * (or the one before) to the end of the one holding byte p (or the
         * one after); each alone, then all together with decoys that share
         * their prefixes but never occur */
        size_t a0 = char_start(TEXT, p - 1), a1 = a0 ? char_start(TEXT, a0 - 1) : a0;
        size_t c0 = char_end(TEXT, n, p), c1 = c0 < n ? char_end(TEXT, n, c0) : c0;
        size_t as[2] = {a0, a1}, cs[2] = {c0, c1};
        char *all[8];
        size_t all_len[8];
        int na = 0;
        for (int ai = 0; ai < 2; ai++)
            for (int ci = 0; ci < 2; ci++) {
                size_t a = as[ai], c = cs[ci];
                char *s = strndup(TEXT + a, c - a);
                size_t l = c - a;
                char what[96];
                snprintf(what, sizeof what, "split at %zu, stop [%zu, %zu)", p, a, c);
                run_case(&v, ids, nids, &s, &l, 1, (ai + ci + (int)p) & 1, what);
                cases++;
                if (is_cont((unsigned char)TEXT[p])) cut_inside++;
                all[na] = s;
                all_len[na++] = l;
            }
        for (int k = 0; k < 4 && all_len[k] > 1; k++) {
            /* the decoy: the string's prefix with its last character changed */
            char *d = malloc(all_len[k] + 2);
            memcpy(d, all[k], all_len[k]);
            size_t last = char_start(d, all_len[k] - 1);
            d[last] = '#';
            all[na] = d;
            all_len[na++] = last + 1;
        }
        char what[64];
        snprintf(what, sizeof what, "split at %zu, %d strings", p, na);
        run_case(&v, ids, nids, all, all_len, na, (int)p & 1, what);
        for (int k = 0; k < na; k++) free(all[k]);
    }
    cr_assert_gt(cut_inside, 20, "the text must cut characters between tokens (%d of %d cases)", cut_inside, cases);
    qwi_tokenizer_free(v.tok);
}

/* A stop string whose last character is cut between two tokens matches on
 * the second; one that would end inside a character cannot be set. */
Test(stop_match, ends_inside_a_character) {
    const char *dir = qwt_qwen_tokenizer_dir();
    if (!dir) cr_skip("no Qwen tokenizer data");
    vocab_ctx v;
    cr_assert_eq(qwi_tokenizer_load_dir(dir, &v.tok), QW_OK, "%s", qwi_last_error());
    for (int32_t id = 0; id < v.tok->vocab_size; id++)
        if (v.tok->raw_len[id] == 1 && !(v.tok->flags[id] & QWI_TOKF_SPECIAL))
            v.byte_id[(unsigned char)v.tok->raw_arena[v.tok->raw_off[id]]] = id;
    qw_request *r = NULL;
    cr_assert_eq(qw_request_create(&r), QW_OK);
    const char *stop[] = {"a\xe4\xb8\xad"};   /* "a中" */
    cr_assert_eq(qw_request_set_stop_strings(r, stop, NULL, 1), QW_OK);
    cr_assert_eq(qwi_request_text_start(r, v.tok), QW_OK);
    const unsigned char bytes[] = {'x', 'a', 0xe4, 0xb8, 0xad, 'y'};
    int32_t hit = -1;
    size_t k;
    for (k = 0; k < sizeof bytes && hit < 0; k++) {
        hit = qwi_request_text_token(r, v.byte_id[bytes[k]], true);
        qwi_request_text_event(r, hit >= 0);
    }
    cr_assert_eq(hit, 0);
    cr_assert_eq(k, 5, "matched on the token that completes the character");
    char buf[8];
    size_t tl;
    cr_assert_eq(qw_request_get_text(r, buf, sizeof buf, &tl), QW_OK);
    cr_assert_eq(tl, 1);
    cr_assert_str_eq(buf, "x");
    qw_request_release(r);

    const char *half[] = {"a\xe4\xb8"};
    cr_assert_eq(qw_request_create(&r), QW_OK);
    cr_assert_eq(qw_request_set_stop_strings(r, half, NULL, 1), QW_ERR_INVALID_ARGUMENT);
    qw_request_release(r);
    qwi_tokenizer_free(v.tok);
}
