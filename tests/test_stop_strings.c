/*
 * test_stop_strings.c - stop strings and the stop/length rules end to end
 * (qwinfer.h, "Stop conditions"), on a tiny random model with the real Qwen
 * vocabulary and tokenizer (skipped without ../shared/data/qwen-tokenizer).
 *
 * A random model's output is arbitrary, so every case first runs the prompt
 * greedily without stop conditions (the baseline: its tokens, and the text
 * each token's event released), picks stop strings and tokens from it, and
 * runs again: the stop must land where a direct search of the baseline text
 * puts it (finish reason, qw_request_get_stop_match, the token list cut
 * after the token that completed it, the text, every streamed piece), alone
 * and batched. Then min tokens, the include option, a stop token and a stop
 * string on one token, the length limit on the same token, and EOS with and
 * without QW_REQ_IGNORE_EOS (on a copy of the model whose EOS id is a token
 * the baseline generates). Also the API's refusals.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qwinfer.h"
#include "util/engine_util.h"
#include "util/testutil.h"

#define MAXTOK 64
#define NGEN 48
#define PROMPT_LEN 8

/* ---- the model ------------------------------------------------------------------- */

static const char *MODEL_ARGS = "--shape tiny --dtype f32 --seed 71 --vocab 151936 --no-tokenizer";

/* The tiny model with the real Qwen tokenizer files beside it (copied under
 * a temporary name and renamed, so concurrent tests never see half a file). */
static char *qwen_model(const char *name, const char *args) {
    const char *tok = qwt_qwen_tokenizer_dir();
    if (!tok) cr_skip("no Qwen tokenizer data (../shared/data/qwen-tokenizer or $QW_SHARED_DIR)");
    char *dir = qwt_model(name, args);
    cr_assert_not_null(dir, "cannot generate %s", name);
    const char *files[] = {"vocab.json", "merges.txt", "tokenizer_config.json"};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(qwt_system("test -f '%s/%s' || { cp '%s/%s' '%s/%s.tmp.%d' && mv '%s/%s.tmp.%d' '%s/%s'; }", dir,
                                files[i], tok, files[i], dir, files[i], (int)getpid(), dir, files[i], (int)getpid(), dir,
                                files[i]),
                     0);
    return dir;
}

static qw_engine *engine_at(const char *dir) {
    qwt_engine_cfg cfg = {.threads = 1, .max_num_seqs = 16};
    qw_engine *e = qwt_engine_new(dir, &cfg);
    cr_assert_not_null(qw_engine_get_tokenizer(e), "the engine must load the Qwen tokenizer");
    return e;
}

/* ---- running requests -------------------------------------------------------------- */

typedef struct run {
    /* options (0 / NULL: leave the default) */
    const char *stops[4];
    int nstops;
    int include;
    int min_tokens;
    int max_tokens;          /* 0: NGEN */
    int ignore_eos;
    int32_t stop_ids[2];
    int nstop_ids;
    /* results */
    int32_t tokens[MAXTOK];
    int ntok;
    size_t cum[MAXTOK];      /* text bytes released through token i's event */
    char pieces[8192];       /* all pieces concatenated */
    size_t plen;
    char text[8192];         /* qw_request_get_text at the end */
    size_t tlen;
    int finish, finish_events;
    int32_t ss, st;
} run;

static int32_t PROMPT[PROMPT_LEN];

static void make_prompt(void) { qwt_make_prompt(PROMPT, PROMPT_LEN, 151000, 4242); }

/* Submit runs[0..n) at once to e, step until done, fill the results. */
static void run_batch(qw_engine *e, run *runs, int n) {
    qw_request *reqs[32];
    cr_assert_leq(n, 32);
    for (int i = 0; i < n; i++) {
        run *r = &runs[i];
        r->ntok = 0;
        r->plen = r->tlen = 0;
        r->finish = r->finish_events = 0;
        cr_assert_eq(qw_request_create(&reqs[i]), QW_OK);
        qw_request *q = reqs[i];
        cr_assert_eq(qw_request_set_prompt(q, PROMPT, PROMPT_LEN), QW_OK);
        cr_assert_eq(qw_request_set_double(q, QW_REQ_TEMPERATURE, 0.0), QW_OK);
        cr_assert_eq(qw_request_set_int(q, QW_REQ_MAX_TOKENS, r->max_tokens ? r->max_tokens : NGEN), QW_OK);
        if (r->ignore_eos) cr_assert_eq(qw_request_set_int(q, QW_REQ_IGNORE_EOS, 1), QW_OK);
        if (r->min_tokens) cr_assert_eq(qw_request_set_int(q, QW_REQ_MIN_TOKENS, r->min_tokens), QW_OK);
        if (r->include) cr_assert_eq(qw_request_set_int(q, QW_REQ_INCLUDE_STOP_STR_IN_OUTPUT, 1), QW_OK);
        if (r->nstops)
            cr_assert_eq(qw_request_set_stop_strings(q, r->stops, NULL, (size_t)r->nstops), QW_OK, "%s",
                         qw_last_error());
        if (r->nstop_ids) cr_assert_eq(qw_request_set_stop_tokens(q, r->stop_ids, (size_t)r->nstop_ids), QW_OK);
        cr_assert_eq(qw_request_set_user_data(q, r), QW_OK);
    }
    for (int i = 0; i < n; i++) cr_assert_eq(qw_engine_submit(e, reqs[i]), QW_OK, "%s", qw_last_error());
    qw_event ev[16];
    while (qw_engine_has_work(e)) {
        size_t got = 0;
        cr_assert_eq(qw_engine_step(e, ev, 16, sizeof ev[0], &got), QW_OK, "%s", qw_last_error());
        for (size_t k = 0; k < got; k++) {
            run *r = ev[k].user_data;
            const char *p;
            size_t pl;
            cr_assert_eq(qw_request_get_text_piece(ev[k].request, &p, &pl), QW_OK);
            cr_assert_lt(r->plen + pl, sizeof r->pieces);
            memcpy(r->pieces + r->plen, p, pl);
            r->plen += pl;
            if (ev[k].token >= 0) {
                cr_assert_lt(r->ntok, MAXTOK);
                cr_assert_eq(ev[k].index, (uint32_t)r->ntok);
                r->cum[r->ntok] = r->plen;
                r->tokens[r->ntok++] = ev[k].token;
            }
            if (ev[k].finish_reason != QW_FINISH_NONE) {
                r->finish = (int)ev[k].finish_reason;
                r->finish_events++;
            }
        }
    }
    for (int i = 0; i < n; i++) {
        run *r = &runs[i];
        cr_assert_eq(r->finish_events, 1);
        cr_assert_eq((int)qw_request_get_finish_reason(reqs[i]), r->finish);
        size_t nt = 0;
        int32_t toks[MAXTOK];
        cr_assert_eq(qw_request_get_tokens(reqs[i], toks, MAXTOK, &nt), QW_OK);
        cr_assert_eq(nt, (size_t)r->ntok, "the token list and the events agree");
        cr_assert_eq(memcmp(toks, r->tokens, nt * sizeof *toks), 0);
        cr_assert_eq(qw_request_get_text(reqs[i], r->text, sizeof r->text, &r->tlen), QW_OK, "%s", qw_last_error());
        cr_assert_lt(r->tlen, sizeof r->text);
        cr_assert_eq(qw_request_get_stop_match(reqs[i], &r->ss, &r->st), QW_OK);
        qw_request_release(reqs[i]);
    }
}

static void run_one(qw_engine *e, run *r) { run_batch(e, r, 1); }

/* ---- the direct search ------------------------------------------------------------- */

static int is_cont(unsigned char b) { return (b & 0xC0) == 0x80; }

/* First match of the strings in text[0..n) that ends after byte `from`:
 * earliest end, then longest, then lowest index; *end its end. -1: none. */
static int first_match(const char *text, size_t n, size_t from, const char *const *s, int ns, size_t *end) {
    for (size_t e = from + 1; e <= n; e++) {
        int best = -1;
        for (int i = 0; i < ns; i++) {
            size_t l = strlen(s[i]);
            if (l <= e && memcmp(text + e - l, s[i], l) == 0 && (best < 0 || l > strlen(s[best]))) best = i;
        }
        if (best >= 0) {
            *end = e;
            return best;
        }
    }
    return -1;
}

/* The token of the baseline whose event released byte end - 1. */
static int token_of(const run *base, size_t end) {
    for (int t = 0; t < base->ntok; t++)
        if (base->cum[t] >= end) return t;
    cr_assert_fail("no token releases byte %zu", end);
    return -1;
}

/* Check a stop-string run against the baseline: stopped on the token that
 * completes the first match ending after byte `from` (or not at all). */
static void check_against(const run *base, const run *r, size_t from, const char *what) {
    size_t end = 0;
    int m = first_match(base->pieces, base->plen, from, r->stops, r->nstops, &end);
    cr_assert_eq(r->plen, r->tlen, "%s: pieces and text have one length", what);
    cr_assert_eq(memcmp(r->pieces, r->text, r->tlen), 0, "%s: pieces concatenated == qw_request_get_text", what);
    int limit = r->max_tokens ? r->max_tokens : NGEN;
    if (m < 0 || token_of(base, end) >= limit) {
        cr_assert_eq(r->finish, QW_FINISH_LENGTH, "%s", what);
        cr_assert_eq(r->ss, -1);
        cr_assert_eq(r->ntok, limit);
        return;
    }
    int t = token_of(base, end);
    cr_assert_eq(r->finish, QW_FINISH_STOP, "%s: finish %d", what, r->finish);
    cr_assert_eq(r->ss, m, "%s: stop string %d, want %d", what, r->ss, m);
    cr_assert_eq(r->ntok, t + 1, "%s: %d tokens, the match ends in token %d", what, r->ntok, t);
    cr_assert_eq(memcmp(r->tokens, base->tokens, (size_t)r->ntok * sizeof r->tokens[0]), 0, "%s: tokens", what);
    size_t want = r->include ? end : end - strlen(r->stops[m]);
    cr_assert_eq(r->tlen, want, "%s: text of %zu bytes, want %zu", what, r->tlen, want);
    cr_assert_eq(memcmp(r->text, base->pieces, want), 0, "%s: text", what);
}

/* Stop strings from the baseline text: for token t, the text from the last
 * character released by an earlier token through the end of token t's (so
 * it spans a token boundary), when token t released text. Static storage. */
static char stop_buf[16][256];
static const char *stop_for(const run *base, int t, int slot) {
    size_t e = base->cum[t], s0 = t > 0 ? base->cum[t - 1] : 0;
    if (e == s0 || s0 == 0 || e - s0 > 200) return NULL;
    size_t s = s0 - 1;
    while (s > 0 && is_cont((unsigned char)base->pieces[s])) s--;
    memcpy(stop_buf[slot], base->pieces + s, e - s);
    stop_buf[slot][e - s] = '\0';
    if (strlen(stop_buf[slot]) != e - s) return NULL;   /* a NUL byte in the text */
    return stop_buf[slot];
}

/* The baseline: greedy, NGEN tokens, no stop conditions. */
static void baseline(qw_engine *e, run *base) {
    memset(base, 0, sizeof *base);
    base->ignore_eos = 1;
    run_one(e, base);
    cr_assert_eq(base->finish, QW_FINISH_LENGTH);
    cr_assert_eq(base->ntok, NGEN);
    cr_assert_gt(base->cum[NGEN - 2], 40, "the baseline must produce text");
}

/* Up to max token indices t in [lo, NGEN - 1) whose stop_for exists. */
static int pick_tokens(const run *base, int lo, int *out, int max) {
    int n = 0;
    for (int t = lo; t < NGEN - 1 && n < max; t += 3)
        if (stop_for(base, t, 15)) out[n++] = t;
    return n;
}

/* ---- stop strings -------------------------------------------------------------------- */

Test(stop_strings, stop_where_the_direct_search_finds_it_alone_and_batched) {
    make_prompt();
    char *dir = qwen_model("stop-qwen-tiny", MODEL_ARGS);
    qw_engine *e = engine_at(dir);
    run base;
    baseline(e, &base);
    int ts[8];
    int nt = pick_tokens(&base, 2, ts, 8);
    cr_assert_geq(nt, 4, "need text-bearing tokens in the baseline");
    static run runs[16];
    int nr = 0;
    for (int k = 0; k < nt; k++) {
        run *r = &runs[nr++];
        memset(r, 0, sizeof *r);
        r->ignore_eos = 1;
        r->stops[0] = stop_for(&base, ts[k], k);
        r->nstops = 1;
        r->include = k & 1;
        if (k == 1) {
            /* several strings at once, one of them a decoy */
            r->stops[1] = "\x01never";
            r->stops[2] = stop_for(&base, ts[nt - 1], 8);
            r->nstops = 3;
        }
    }
    /* alone */
    static run alone[16];
    for (int i = 0; i < nr; i++) {
        alone[i] = runs[i];
        run_one(e, &alone[i]);
        char what[48];
        snprintf(what, sizeof what, "alone case %d", i);
        check_against(&base, &alone[i], 0, what);
    }
    /* batched, with the baseline again beside them */
    runs[nr] = base;
    runs[nr].nstops = 0;
    run_batch(e, runs, nr + 1);
    for (int i = 0; i < nr; i++) {
        char what[48];
        snprintf(what, sizeof what, "batched case %d", i);
        check_against(&base, &runs[i], 0, what);
        cr_assert_eq(runs[i].ntok, alone[i].ntok, "%s: batched == alone", what);
        cr_assert_eq(memcmp(runs[i].tokens, alone[i].tokens, sizeof(int32_t) * (size_t)alone[i].ntok), 0);
        cr_assert_eq(runs[i].tlen, alone[i].tlen);
        cr_assert_eq(memcmp(runs[i].text, alone[i].text, alone[i].tlen), 0);
    }
    cr_assert_eq(runs[nr].ntok, NGEN);
    cr_assert_eq(memcmp(runs[nr].tokens, base.tokens, sizeof base.tokens[0] * NGEN), 0);
    qw_engine_destroy(e);
    free(dir);
}

/* Before QW_REQ_MIN_TOKENS a completed stop string is passed over; from
 * that token on it stops. */
Test(stop_strings, min_tokens) {
    make_prompt();
    char *dir = qwen_model("stop-qwen-tiny", MODEL_ARGS);
    qw_engine *e = engine_at(dir);
    run base;
    baseline(e, &base);
    int ts[4];
    int nt = pick_tokens(&base, 4, ts, 4);
    cr_assert_geq(nt, 2);
    for (int k = 0; k < nt; k++) {
        const char *s = stop_for(&base, ts[k], 0);
        size_t end;
        cr_assert_geq(first_match(base.pieces, base.plen, 0, &s, 1, &end), 0);
        int t = token_of(&base, end);   /* the first match ends in token t */
        run r;
        memset(&r, 0, sizeof r);
        r.ignore_eos = 1;
        r.stops[0] = s;
        r.nstops = 1;
        r.min_tokens = t + 1;            /* token t is the (t+1)-th: may stop */
        run_one(e, &r);
        check_against(&base, &r, 0, "min_tokens = the completing token");
        cr_assert_eq(r.ntok, t + 1);
        r.min_tokens = t + 2;            /* passed over: the next match, if any */
        run_one(e, &r);
        check_against(&base, &r, base.cum[t], "min_tokens past the completing token");
        cr_assert_gt(r.ntok, t + 1);
    }
    qw_engine_destroy(e);
    free(dir);
}

/* A stop string and a stop token on the same token: both reported, the
 * text cut at the string. A stop string on the max-tokens token: STOP. */
Test(stop_strings, same_token_rules) {
    make_prompt();
    char *dir = qwen_model("stop-qwen-tiny", MODEL_ARGS);
    qw_engine *e = engine_at(dir);
    run base;
    baseline(e, &base);
    int ts[8];
    int nt = pick_tokens(&base, 2, ts, 8);
    int done = 0;
    for (int k = 0; k < nt && done < 2; k++) {
        const char *s = stop_for(&base, ts[k], 0);
        size_t end;
        cr_assert_geq(first_match(base.pieces, base.plen, 0, &s, 1, &end), 0);
        int t = token_of(&base, end);
        int32_t tok = base.tokens[t];
        bool first = true;
        for (int i = 0; i < t; i++) first = first && base.tokens[i] != tok;
        if (!first) continue;
        run r;
        memset(&r, 0, sizeof r);
        r.ignore_eos = 1;
        r.stops[0] = s;
        r.nstops = 1;
        r.stop_ids[0] = tok;
        r.nstop_ids = 1;
        run_one(e, &r);
        check_against(&base, &r, 0, "stop token and stop string on one token");
        cr_assert_eq(r.st, tok, "the stop token is reported too");
        cr_assert_eq(r.tokens[r.ntok - 1], tok);
        /* the length limit on the same token: the stop string wins */
        memset(&r, 0, sizeof r);
        r.ignore_eos = 1;
        r.stops[0] = s;
        r.nstops = 1;
        r.max_tokens = t + 1;
        run_one(e, &r);
        cr_assert_eq(r.finish, QW_FINISH_STOP);
        cr_assert_eq(r.ss, 0);
        cr_assert_eq(r.st, -1);
        cr_assert_eq(r.ntok, t + 1);
        /* and one token earlier the length limit ends it */
        if (t > 0) {
            r.max_tokens = t;
            run_one(e, &r);
            cr_assert_eq(r.finish, QW_FINISH_LENGTH);
            cr_assert_eq(r.ss, -1);
            cr_assert_eq(r.ntok, t);
        }
        done++;
    }
    cr_assert_geq(done, 1, "no stop string ends on a token's first occurrence");
    qw_engine_destroy(e);
    free(dir);
}

/* ---- EOS, ignore_eos, min_tokens and max_tokens ------------------------------------------ */

Test(stop_strings, eos_rules) {
    make_prompt();
    char *dir = qwen_model("stop-qwen-tiny", MODEL_ARGS);
    qw_engine *e = engine_at(dir);
    run base;
    baseline(e, &base);
    qw_engine_destroy(e);
    /* EOS := the first token that first occurs at index >= 3 */
    int k = -1;
    for (int t = 3; t < NGEN - 8 && k < 0; t++) {
        bool first = true;
        for (int i = 0; i < t; i++) first = first && base.tokens[i] != base.tokens[t];
        if (first && base.tokens[t] < 151643) k = t;
    }
    cr_assert_geq(k, 0);
    int32_t eos = base.tokens[k];
    char args[256];
    snprintf(args, sizeof args, "%s --eos %d", MODEL_ARGS, (int)eos);
    char *dir2 = qwen_model("stop-qwen-tiny-eos", args);
    e = engine_at(dir2);

    /* ignore_eos: the same weights generate the baseline, past the EOS */
    run r;
    memset(&r, 0, sizeof r);
    r.ignore_eos = 1;
    run_one(e, &r);
    cr_assert_eq(r.finish, QW_FINISH_LENGTH);
    cr_assert_eq(r.ntok, NGEN);
    cr_assert_eq(memcmp(r.tokens, base.tokens, sizeof r.tokens[0] * NGEN), 0);
    cr_assert_eq(r.ss, -1);
    cr_assert_eq(r.st, -1);

    /* default: STOP on the EOS, which is the last token and in the text */
    memset(&r, 0, sizeof r);
    run_one(e, &r);
    cr_assert_eq(r.finish, QW_FINISH_STOP);
    cr_assert_eq(r.ntok, k + 1);
    cr_assert_eq(r.tokens[k], eos);
    cr_assert_eq(r.st, eos);
    cr_assert_eq(r.ss, -1);
    const qw_tokenizer *tok = qw_engine_get_tokenizer(e);
    char dec[8192];
    size_t dl = 0;
    cr_assert_eq(qw_tokenizer_decode(tok, r.tokens, (size_t)r.ntok, 1, dec, sizeof dec, &dl), QW_OK);
    cr_assert_eq(r.tlen, dl, "the EOS token's text is in the output");
    cr_assert_eq(memcmp(r.text, dec, dl), 0);

    /* ignore_eos with the EOS as a stop token: stop tokens still stop */
    memset(&r, 0, sizeof r);
    r.ignore_eos = 1;
    r.stop_ids[0] = eos;
    r.nstop_ids = 1;
    run_one(e, &r);
    cr_assert_eq(r.finish, QW_FINISH_STOP);
    cr_assert_eq(r.ntok, k + 1);
    cr_assert_eq(r.st, eos);

    /* ignore_eos with a stop string: stop strings still stop */
    const char *s = NULL;
    for (int t = 2; t < NGEN - 1 && !s; t++) s = stop_for(&base, t, 0);
    cr_assert_not_null(s);
    memset(&r, 0, sizeof r);
    r.ignore_eos = 1;
    r.stops[0] = s;
    r.nstops = 1;
    run_one(e, &r);
    check_against(&base, &r, 0, "ignore_eos with a stop string");

    /* min_tokens = k + 1: the EOS is banned at index k, never earlier */
    memset(&r, 0, sizeof r);
    r.min_tokens = k + 1;
    run_one(e, &r);
    cr_assert_geq(r.ntok, k + 2, "%d tokens", r.ntok);
    cr_assert_eq(memcmp(r.tokens, base.tokens, sizeof r.tokens[0] * (size_t)k), 0);
    for (int i = 0; i <= k; i++) cr_assert_neq(r.tokens[i], eos, "EOS at %d before min tokens", i);
    if (r.finish == QW_FINISH_STOP) {
        cr_assert_eq(r.tokens[r.ntok - 1], eos);
        cr_assert_eq(r.st, eos);
    } else {
        cr_assert_eq(r.finish, QW_FINISH_LENGTH);
    }

    /* max_tokens below min_tokens: the length limit still ends it */
    memset(&r, 0, sizeof r);
    r.min_tokens = 40;
    r.max_tokens = k + 3;
    run_one(e, &r);
    cr_assert_eq(r.finish, QW_FINISH_LENGTH);
    cr_assert_eq(r.ntok, k + 3);
    for (int i = 0; i < r.ntok; i++) cr_assert_neq(r.tokens[i], eos);
    qw_engine_destroy(e);
    free(dir);
    free(dir2);
}

/* ---- the API ---------------------------------------------------------------------------- */

Test(stop_strings, api_refusals_and_buffers) {
    qw_request *r = NULL;
    cr_assert_eq(qw_request_create(&r), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_INCLUDE_STOP_STR_IN_OUTPUT, 2), QW_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(qw_last_error(), "QW_REQ_INCLUDE_STOP_STR_IN_OUTPUT"), "%s", qw_last_error());
    const char *empty[] = {""};
    cr_assert_eq(qw_request_set_stop_strings(r, empty, NULL, 1), QW_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(qw_last_error(), "qw_request_set_stop_strings: stop string 0 is empty"), "%s", qw_last_error());
    cr_assert_eq(qw_request_set_stop_strings(NULL, empty, NULL, 0), QW_ERR_INVALID_ARGUMENT);
    cr_assert_eq(qw_request_set_stop_strings(r, NULL, NULL, 1), QW_ERR_INVALID_ARGUMENT);
    int32_t a = 7, b = 7;
    cr_assert_eq(qw_request_get_stop_match(NULL, &a, &b), QW_ERR_INVALID_ARGUMENT);
    cr_assert_eq(qw_request_get_stop_match(r, &a, &b), QW_OK);
    cr_assert_eq(a, -1);
    cr_assert_eq(b, -1);
    cr_assert_eq(qw_request_get_stop_match(r, NULL, NULL), QW_OK);
    size_t len = 5;
    char buf[4];
    cr_assert_eq(qw_request_get_text(r, buf, sizeof buf, &len), QW_ERR_INVALID_STATE, "not submitted");
    cr_assert_eq(len, 0);
    cr_assert_eq(qw_request_get_text(NULL, buf, sizeof buf, &len), QW_ERR_INVALID_ARGUMENT);
    cr_assert_eq(qw_request_get_text(r, NULL, 4, &len), QW_ERR_INVALID_ARGUMENT);
    cr_assert_eq(qw_request_get_text(r, buf, 4, NULL), QW_ERR_INVALID_ARGUMENT);
    qw_request_release(r);

    /* stop strings on an engine without a tokenizer: refused at submit,
     * accepted once cleared */
    char *dir = qwt_model("stop-notok", "--shape tiny --dtype f32 --seed 5 --no-tokenizer");
    cr_assert_not_null(dir);
    qwt_engine_cfg cfg = {.threads = 1};
    qw_engine *e = qwt_engine_new(dir, &cfg);
    cr_assert_eq(qw_request_create(&r), QW_OK);
    int32_t prompt[3] = {1, 2, 3};
    cr_assert_eq(qw_request_set_prompt(r, prompt, 3), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_MAX_TOKENS, 2), QW_OK);
    const char *stops[] = {"x"};
    cr_assert_eq(qw_request_set_stop_strings(r, stops, NULL, 1), QW_OK);
    cr_assert_eq(qw_engine_submit(e, r), QW_ERR_INVALID_STATE);
    cr_assert(strstr(qw_last_error(), "stop strings") && strstr(qw_last_error(), "no tokenizer"), "%s", qw_last_error());
    cr_assert_eq(qw_request_set_stop_strings(r, NULL, NULL, 0), QW_OK);
    cr_assert_eq(qw_engine_submit(e, r), QW_OK, "%s", qw_last_error());
    cr_assert_eq(qw_request_set_stop_strings(r, stops, NULL, 1), QW_ERR_INVALID_STATE, "only before submission");
    qw_event ev[4];
    size_t got;
    while (qw_engine_has_work(e)) cr_assert_eq(qw_engine_step(e, ev, 4, sizeof ev[0], &got), QW_OK);
    cr_assert_eq(qw_request_get_text(r, buf, sizeof buf, &len), QW_ERR_INVALID_STATE, "no tokenizer: no text");
    cr_assert_eq(qw_request_get_stop_match(r, &a, &b), QW_OK);
    cr_assert_eq(a, -1, "finished by length: no stop match");
    qw_request_release(r);
    qw_engine_destroy(e);
    free(dir);
}

/* qw_request_get_text's buffer convention (that of qw_chat_render). */
Test(stop_strings, get_text_buffer_convention) {
    make_prompt();
    char *dir = qwen_model("stop-qwen-tiny", MODEL_ARGS);
    qw_engine *e = engine_at(dir);
    qw_request *r = NULL;
    cr_assert_eq(qw_request_create(&r), QW_OK);
    cr_assert_eq(qw_request_set_prompt(r, PROMPT, PROMPT_LEN), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_MAX_TOKENS, 12), QW_OK);
    cr_assert_eq(qw_request_set_double(r, QW_REQ_TEMPERATURE, 0.0), QW_OK);
    cr_assert_eq(qw_engine_submit(e, r), QW_OK);
    size_t len = 9;
    cr_assert_eq(qw_request_get_text(r, NULL, 0, &len), QW_OK);
    cr_assert_eq(len, 0, "nothing generated yet");
    qw_event ev[4];
    size_t got;
    while (qw_engine_has_work(e)) cr_assert_eq(qw_engine_step(e, ev, 4, sizeof ev[0], &got), QW_OK);
    cr_assert_eq(qw_request_get_text(r, NULL, 0, &len), QW_OK);
    cr_assert_gt(len, 3);
    char *full = malloc(len + 1);
    size_t l2;
    cr_assert_eq(qw_request_get_text(r, full, len + 1, &l2), QW_OK);
    cr_assert_eq(l2, len);
    cr_assert_eq(full[len], '\0');
    char small[4] = {'z', 'z', 'z', 'z'};
    cr_assert_eq(qw_request_get_text(r, small, 3, &l2), QW_OK, "cut, still QW_OK");
    cr_assert_eq(l2, len);
    cr_assert_eq(memcmp(small, full, 2), 0);
    cr_assert_eq(small[2], '\0');
    cr_assert_eq(small[3], 'z');
    free(full);
    qw_request_release(r);
    qw_engine_destroy(e);
    free(dir);
}
