/*
 * test_logprobs.c - QW_REQ_LOGPROBS / QW_REQ_PROMPT_LOGPROBS: values against
 * a float64 log-softmax of the same logits (the logits callback), top-N
 * order, prompt logprobs against the logits of prefix requests, and the
 * engine invariants (chunked, cached, batched, preempted, session), option
 * and getter errors.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "logprobs.h"
#include "util/engine_util.h"
#include "util/testutil.h"

#define VOCAB 512
#define W QWI_LP_STRIDE
#define MAXGEN 16
#define MAXPROMPT 160

static char *tiny_model(void) {
    char *dir = qwt_model("inv-tiny-f32", "--shape tiny --dtype f32 --seed 11");
    cr_assert_not_null(dir, "model generation failed");
    return dir;
}

typedef struct lp_job {
    const int32_t *prompt;
    int num_prompt;
    int max_tokens;
    double temperature;       /* 0 = greedy */
    int lp, plp;              /* QW_REQ_LOGPROBS / QW_REQ_PROMPT_LOGPROBS; -1 = unset */
    int keep_logits;
    qw_session *session;
} lp_job;

typedef struct lp_out {
    int32_t tokens[MAXGEN];
    int ntok;
    qw_logprob gen[MAXGEN][W];    /* [i][0] sampled, [i][1..] top */
    size_t gen_k;
    qw_logprob prompt[MAXPROMPT][W];
    size_t prompt_k;
    float logits[MAXGEN][VOCAB];
    int nlogits;
    uint64_t cached, preemptions;
} lp_out;

static void keep_logits(void *user, qw_request *req, int32_t position, const float *logits, int32_t vocab) {
    lp_out *o = user;
    cr_assert_eq(vocab, VOCAB);
    cr_assert_lt(o->nlogits, MAXGEN);
    memcpy(o->logits[o->nlogits++], logits, sizeof(float) * VOCAB);
}

static qw_request *make_req(const lp_job *j, lp_out *o) {
    qw_request *r;
    cr_assert_eq(qw_request_create(&r), QW_OK);
    cr_assert_eq(qw_request_set_prompt(r, j->prompt, (size_t)j->num_prompt), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_MAX_TOKENS, j->max_tokens), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_IGNORE_EOS, 1), QW_OK);
    cr_assert_eq(qw_request_set_double(r, QW_REQ_TEMPERATURE, j->temperature), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_SEED, 1234), QW_OK);
    if (j->lp >= 0) cr_assert_eq(qw_request_set_int(r, QW_REQ_LOGPROBS, j->lp), QW_OK);
    if (j->plp >= 0) cr_assert_eq(qw_request_set_int(r, QW_REQ_PROMPT_LOGPROBS, j->plp), QW_OK);
    if (j->keep_logits) cr_assert_eq(qw_request_set_logits_callback(r, keep_logits, o), QW_OK);
    if (j->session) cr_assert_eq(qw_request_set_session(r, j->session), QW_OK);
    return r;
}

/* Read every logprob a finished request has into o. */
static void read_back(qw_request *r, const lp_job *j, lp_out *o) {
    size_t n;
    cr_assert_eq(qw_request_get_tokens(r, o->tokens, MAXGEN, &n), QW_OK);
    o->ntok = (int)n;
    if (j->lp >= 0)
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(qw_request_get_logprobs(r, i, &o->gen[i][0], &o->gen[i][1], W - 1, &o->gen_k), QW_OK,
                         "%s", qw_last_error());
    if (j->plp >= 0)
        for (int i = 1; i < j->num_prompt; i++)
            cr_assert_eq(qw_request_get_prompt_logprobs(r, (size_t)i, &o->prompt[i][0], &o->prompt[i][1], W - 1,
                                                        &o->prompt_k),
                         QW_OK, "prompt token %d: %s", i, qw_last_error());
    qw_request_stats rs;
    cr_assert_eq(qw_request_get_stats(r, &rs, sizeof rs), QW_OK);
    o->cached = rs.cached_prompt_tokens;
    o->preemptions = rs.num_preemptions;
}

/* Run jobs[0..n) together on e to the end; out[i] gets job i's results. */
static void run(qw_engine *e, const lp_job *jobs, int n, lp_out *out) {
    qw_request *reqs[64];
    cr_assert_leq(n, 64);
    for (int i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof out[i]);
        reqs[i] = make_req(&jobs[i], &out[i]);
        cr_assert_eq(qw_engine_submit(e, reqs[i]), QW_OK, "submit %d: %s", i, qw_last_error());
    }
    qw_event ev[64];
    for (int steps = 0; qw_engine_has_work(e); steps++) {
        size_t got;
        cr_assert_eq(qw_engine_step(e, ev, 64, sizeof ev[0], &got), QW_OK, "%s", qw_last_error());
        cr_assert_lt(steps, 100000);
    }
    for (int i = 0; i < n; i++) {
        cr_assert_eq(qw_request_get_state(reqs[i]), QW_STATE_FINISHED);
        read_back(reqs[i], &jobs[i], &out[i]);
        cr_assert_eq(qw_request_release(reqs[i]), QW_OK);
    }
}


/* float64 reference of one row: lse, and ids ordered by descending logit,
 * lower id first on ties. */
static const float *sort_row;
static int by_logit(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (sort_row[i] != sort_row[j]) return sort_row[i] > sort_row[j] ? -1 : 1;
    return i < j ? -1 : i > j;
}

static double ref_lse(const float *x, int V) {
    double m = -INFINITY, s = 0;
    for (int i = 0; i < V; i++) m = fmax(m, (double)x[i]);
    for (int i = 0; i < V; i++) s += exp((double)x[i] - m);
    return m + log(s);
}

/* pairs: [0] = (target, lp), [1..k] top: check against the float64
 * log-softmax of logits. */
static void check_row(const float *x, int V, int32_t target, const qw_logprob *pairs, size_t k, const char *what,
                      int idx) {
    double lse = ref_lse(x, V);
    cr_assert_eq(pairs[0].token, target, "%s %d: target id", what, idx);
    double want = (double)x[target] - lse;
    cr_assert(fabs((double)pairs[0].logprob - want) <= 1e-4, "%s %d: logprob %.8f vs float64 %.8f", what, idx,
              (double)pairs[0].logprob, want);
    int32_t order[VOCAB];
    for (int i = 0; i < V; i++) order[i] = i;
    sort_row = x;
    qsort(order, (size_t)V, sizeof order[0], by_logit);
    for (size_t t = 0; t < k; t++) {
        cr_assert_eq(pairs[1 + t].token, order[t], "%s %d: top %zu is id %d, float64 order says %d", what, idx, t,
                     pairs[1 + t].token, order[t]);
        double w = (double)x[order[t]] - lse;
        cr_assert(fabs((double)pairs[1 + t].logprob - w) <= 1e-4, "%s %d: top %zu logprob %.8f vs %.8f", what, idx, t,
                  (double)pairs[1 + t].logprob, w);
        if (t) cr_assert_geq(pairs[t].logprob, pairs[1 + t].logprob, "%s %d: top not descending", what, idx);
    }
}

Test(logprobs, row_reduction_ties_and_small_vocab) {
    /* ties: ids 1, 3, 4 share the top logit; lower ids first */
    float x[5] = { 0.5f, 2.0f, -1.0f, 2.0f, 2.0f };
    qw_logprob out[W];
    qwi_logprobs_row(x, 5, 2, 20, out);   /* k beyond the vocabulary: 5 entries */
    int32_t want[5] = { 1, 3, 4, 0, 2 };
    check_row(x, 5, 2, out, 5, "row", 0);
    for (int i = 0; i < 5; i++) cr_assert_eq(out[1 + i].token, want[i]);
    cr_assert_eq(out[1].logprob, out[2].logprob);
    /* a huge spread: max-subtraction keeps it finite and exact */
    float y[4] = { 1000.0f, 0.0f, -1000.0f, 999.0f };
    qwi_logprobs_row(y, 4, 2, 2, out);
    check_row(y, 4, 2, out, 2, "spread", 0);
    cr_assert(isfinite(out[1].logprob));
}

/* -inf logits add nothing; a NaN logit makes the row's values NaN (as a
 * plain sum of exp would) rather than being skipped silently. */
Test(logprobs, row_reduction_inf_and_nan) {
    enum { V = 509 };   /* not a multiple of the vector width or the chunk */
    static float x[V];
    for (int i = 0; i < V; i++) x[i] = (float)(i % 37) * 0.25f - 4.0f;
    x[10] = -INFINITY;
    x[501] = -INFINITY;
    qw_logprob out[W];
    qwi_logprobs_row(x, V, 7, 5, out);
    check_row(x, V, 7, out, 5, "-inf", 0);
    qwi_logprobs_row(x, V, 10, 0, out);
    cr_assert(isinf(out[0].logprob) && out[0].logprob < 0, "-inf logit: logprob %g", out[0].logprob);
    x[500] = NAN;
    qwi_logprobs_row(x, V, 7, 5, out);
    cr_assert(isnan(out[0].logprob), "NaN in the row: logprob %g", out[0].logprob);
}

/* The real Qwen vocabulary size with a wide spread of logits: the double
 * accumulation keeps every value within 1e-4 of float64. */
Test(logprobs, row_reduction_qwen_vocab) {
    enum { V = 151936 };
    float *x = malloc(sizeof(float) * V);
    uint64_t st = 88172645463325252ull;
    for (int i = 0; i < V; i++) {
        st ^= st << 13;
        st ^= st >> 7;
        st ^= st << 17;
        x[i] = (float)((double)(st >> 11) / 9007199254740992.0 * 40.0 - 25.0);
    }
    x[4242] = x[77];   /* a tie somewhere, likely below the top */
    qw_logprob out[W];
    qwi_logprobs_row(x, V, 123, 20, out);
    double m = -INFINITY, s = 0;
    for (int i = 0; i < V; i++) m = fmax(m, (double)x[i]);
    for (int i = 0; i < V; i++) s += exp((double)x[i] - m);
    double lse = m + log(s);
    cr_assert(fabs((double)out[0].logprob - ((double)x[123] - lse)) <= 1e-4);
    for (int t = 0; t < 20; t++) {
        cr_assert(fabs((double)out[1 + t].logprob - ((double)x[out[1 + t].token] - lse)) <= 1e-4);
        if (t) cr_assert(x[out[t].token] > x[out[1 + t].token] ||
                         (x[out[t].token] == x[out[1 + t].token] && out[t].token < out[1 + t].token));
    }
    int above = 0;   /* nothing outside the list beats its last entry */
    for (int i = 0; i < V; i++) above += x[i] > x[out[20].token];
    cr_assert_eq(above, 19);
    free(x);
}

Test(logprobs, option_range) {
    qw_request *r;
    cr_assert_eq(qw_request_create(&r), QW_OK);
    const qw_request_option keys[2] = { QW_REQ_LOGPROBS, QW_REQ_PROMPT_LOGPROBS };
    const char *names[2] = { "QW_REQ_LOGPROBS", "QW_REQ_PROMPT_LOGPROBS" };
    for (int k = 0; k < 2; k++) {
        for (int64_t v = -1; v <= QW_MAX_LOGPROBS; v++) cr_assert_eq(qw_request_set_int(r, keys[k], v), QW_OK);
        const int64_t bad[4] = { -2, QW_MAX_LOGPROBS + 1, 1000, INT64_MIN };
        for (int b = 0; b < 4; b++) {
            cr_assert_eq(qw_request_set_int(r, keys[k], bad[b]), QW_ERR_INVALID_ARGUMENT);
            cr_assert_not_null(strstr(qw_last_error(), names[k]), "message names the option: %s", qw_last_error());
        }
        cr_assert_eq(qw_request_set_double(r, keys[k], 1.0), QW_ERR_INVALID_ARGUMENT);
    }
    qw_request_release(r);
}

Test(logprobs, getter_errors) {
    char *dir = tiny_model();
    qw_engine *e = qwt_engine_new(dir, NULL);
    int32_t prompt[8];
    qwt_make_prompt(prompt, 8, VOCAB, 3);
    qw_logprob a, top[4];
    size_t k = 99;
    cr_assert_eq(qw_request_get_logprobs(NULL, 0, &a, top, 4, &k), QW_ERR_INVALID_ARGUMENT);
    cr_assert_eq(qw_request_get_prompt_logprobs(NULL, 1, &a, top, 4, &k), QW_ERR_INVALID_ARGUMENT);

    /* not enabled: neither option set */
    lp_job off = { prompt, 8, 3, 0, -1, -1, 0, NULL };
    lp_out *o = calloc(1, sizeof *o);
    qw_request *r = make_req(&off, o);
    cr_assert_eq(qw_request_get_logprobs(r, 0, &a, top, 4, &k), QW_ERR_INVALID_STATE, "before submit");
    cr_assert_eq(qw_engine_submit(e, r), QW_OK);
    qw_event ev[16];
    size_t got;
    while (qw_engine_has_work(e)) cr_assert_eq(qw_engine_step(e, ev, 16, sizeof ev[0], &got), QW_OK);
    cr_assert_eq(qw_request_get_logprobs(r, 0, &a, top, 4, &k), QW_ERR_INVALID_STATE);
    cr_assert_not_null(strstr(qw_last_error(), "QW_REQ_LOGPROBS"), "%s", qw_last_error());
    cr_assert_eq(qw_request_get_prompt_logprobs(r, 1, &a, top, 4, &k), QW_ERR_INVALID_STATE);
    cr_assert_not_null(strstr(qw_last_error(), "QW_REQ_PROMPT_LOGPROBS"), "%s", qw_last_error());
    qw_request_release(r);

    /* enabled: indices */
    lp_job on = { prompt, 8, 3, 0, 2, 3, 0, NULL };
    r = make_req(&on, o);
    cr_assert_eq(qw_engine_submit(e, r), QW_OK);
    cr_assert_eq(qw_request_get_logprobs(r, 0, &a, top, 4, &k), QW_ERR_INVALID_ARGUMENT, "nothing generated yet");
    cr_assert_eq(qw_request_get_prompt_logprobs(r, 1, &a, top, 4, &k), QW_ERR_INVALID_ARGUMENT, "not computed yet");
    while (qw_engine_has_work(e)) cr_assert_eq(qw_engine_step(e, ev, 16, sizeof ev[0], &got), QW_OK);
    cr_assert_eq(qw_request_get_logprobs(r, 2, &a, top, 4, &k), QW_OK);
    cr_assert_eq(k, 2);
    cr_assert_eq(qw_request_get_logprobs(r, 3, &a, top, 4, &k), QW_ERR_INVALID_ARGUMENT);
    cr_assert_not_null(strstr(qw_last_error(), "out of range"), "%s", qw_last_error());
    cr_assert_eq(qw_request_get_logprobs(r, 0, &a, NULL, 4, &k), QW_ERR_INVALID_ARGUMENT, "top NULL, cap 4");
    cr_assert_eq(qw_request_get_logprobs(r, 0, NULL, NULL, 0, NULL), QW_OK, "all outputs optional");
    k = 0;
    cr_assert_eq(qw_request_get_logprobs(r, 0, &a, top, 1, &k), QW_OK);
    cr_assert_eq(k, 2, "n_top is k even when cap is smaller");
    cr_assert_eq(qw_request_get_prompt_logprobs(r, 0, &a, top, 4, &k), QW_ERR_INVALID_ARGUMENT);
    cr_assert_not_null(strstr(qw_last_error(), "first prompt token has no logprob"), "%s", qw_last_error());
    cr_assert_eq(qw_request_get_prompt_logprobs(r, 8, &a, top, 4, &k), QW_ERR_INVALID_ARGUMENT);
    cr_assert_eq(qw_request_get_prompt_logprobs(r, 7, &a, top, 4, &k), QW_OK);
    cr_assert_eq(k, 3);
    cr_assert_eq(a.token, prompt[7]);
    qw_request_release(r);
    free(o);
    qw_engine_destroy(e);
    free(dir);
}

/* Generated logprobs vs the float64 log-softmax of the callback's logits:
 * raw distribution (temperature 0.7 sampling and greedy alike), top-20. */
Test(logprobs, generated_match_float64_softmax) {
    char *dir = tiny_model();
    qw_engine *e = qwt_engine_new(dir, NULL);
    int32_t prompt[2][40];
    qwt_make_prompt(prompt[0], 40, VOCAB, 5);
    qwt_make_prompt(prompt[1], 17, VOCAB, 6);
    lp_job jobs[3] = {
        { prompt[0], 40, MAXGEN, 0.7, 20, -1, 1, NULL },
        { prompt[1], 17, MAXGEN, 0, 5, -1, 1, NULL },
        { prompt[1], 17, MAXGEN, 1.5, 0, -1, 1, NULL },
    };
    lp_out *out = calloc(3, sizeof *out);
    run(e, jobs, 3, out);
    int not_top1 = 0;
    for (int j = 0; j < 3; j++) {
        cr_assert_eq(out[j].ntok, MAXGEN);
        cr_assert_eq(out[j].nlogits, MAXGEN);
        cr_assert_eq(out[j].gen_k, (size_t)jobs[j].lp);
        for (int i = 0; i < out[j].ntok; i++) {
            check_row(out[j].logits[i], VOCAB, out[j].tokens[i], out[j].gen[i], out[j].gen_k, "generated", i);
            if (jobs[j].temperature == 0)
                cr_assert_eq(out[j].gen[i][1].token, out[j].tokens[i], "greedy token is the top-1");
            else if (jobs[j].lp > 0)
                not_top1 += out[j].gen[i][1].token != out[j].tokens[i];
        }
    }
    cr_assert_gt(not_top1, 0, "temperature sampling picked only top-1 tokens: the raw check proved nothing");
    free(out);
    qw_engine_destroy(e);
    free(dir);
}

/* Prompt logprobs vs the float64 log-softmax of the logits after each
 * prefix, taken from independent requests (prefix j, max 1 token). */
Test(logprobs, prompt_match_prefix_logits) {
    char *dir = tiny_model();
    qw_engine *e = qwt_engine_new(dir, NULL);
    enum { L = 30 };
    int32_t prompt[L];
    qwt_make_prompt(prompt, L, VOCAB, 9);
    lp_job job = { prompt, L, 2, 0, -1, 7, 0, NULL };
    lp_out *out = calloc(L, sizeof *out);
    run(e, &job, 1, out);
    cr_assert_eq(out[0].prompt_k, 7);
    lp_job pre[L];
    for (int j = 1; j < L; j++) pre[j] = (lp_job){ prompt, j, 1, 0, -1, -1, 1, NULL };
    lp_out *ref = calloc(L, sizeof *ref);
    run(e, pre + 1, L - 1, ref + 1);
    for (int j = 1; j < L; j++) {
        cr_assert_eq(ref[j].nlogits, 1);
        check_row(ref[j].logits[0], VOCAB, prompt[j], out[0].prompt[j], 7, "prompt", j);
    }
    free(out);
    free(ref);
    qw_engine_destroy(e);
    free(dir);
}

static void assert_same(const lp_out *a, const lp_out *b, const lp_job *j, const char *what, int i) {
    cr_assert_eq(a->ntok, b->ntok, "%s job %d", what, i);
    cr_assert_arr_eq(a->tokens, b->tokens, sizeof(int32_t) * (size_t)a->ntok, "%s job %d tokens", what, i);
    if (j->lp >= 0)
        cr_assert(memcmp(a->gen, b->gen, sizeof a->gen[0] * (size_t)a->ntok) == 0,
                  "%s job %d: generated logprobs not bit-identical", what, i);
    if (j->plp >= 0)
        cr_assert(memcmp(a->prompt[1], b->prompt[1], sizeof a->prompt[0] * (size_t)(j->num_prompt - 1)) == 0,
                  "%s job %d: prompt logprobs not bit-identical", what, i);
}

#define NJ 8
static int32_t jp[NJ][MAXPROMPT];
static void make_jobs(lp_job *jobs) {
    for (int i = 0; i < NJ; i++) {
        int len = 2 + (i * 41) % 130;
        qwt_make_prompt(jp[i], len, VOCAB, 50 + (uint64_t)i);
        jobs[i] = (lp_job){ jp[i], len, 6 + i % 4, i % 2 ? 0.9 : 0, i % 3 == 2 ? -1 : i % 5,
                            i % 3 == 1 ? -1 : 20 - i, 0, NULL };
    }
}

static void alone(const char *dir, const lp_job *jobs, lp_out *out) {
    qw_engine *e = qwt_engine_new(dir, NULL);
    for (int i = 0; i < NJ; i++) run(e, &jobs[i], 1, &out[i]);
    qw_engine_destroy(e);
}

Test(logprobs, batched_chunked_preempted_equal_alone) {
    char *dir = tiny_model();
    lp_job jobs[NJ];
    make_jobs(jobs);
    lp_out *ref = calloc(NJ, sizeof *ref), *got = calloc(NJ, sizeof *got);
    alone(dir, jobs, ref);
    struct {
        qwt_engine_cfg cfg;
        const char *what;
    } modes[3] = {
        { { .threads = 2 }, "batched" },
        { { .max_batched_tokens = 16, .threads = 2 }, "chunked by 16" },
        { { .num_kv_blocks = 10, .max_batched_tokens = 64 }, "preempted" },
    };
    for (int m = 0; m < 3; m++) {
        qw_engine *e = qwt_engine_new(dir, &modes[m].cfg);
        run(e, jobs, NJ, got);
        uint64_t pre = 0;
        for (int i = 0; i < NJ; i++) {
            assert_same(&ref[i], &got[i], &jobs[i], modes[m].what, i);
            pre += got[i].preemptions;
        }
        if (m == 2) cr_assert_gt(pre, 0, "the small pool was meant to force preemption");
        cr_assert_eq(qw_engine_num_free_kv_blocks(e), qw_engine_num_kv_blocks(e));
        qw_engine_destroy(e);
    }
    free(ref);
    free(got);
    free(dir);
}

/* A second identical request after the first finished would be served from
 * the prefix cache; with prompt logprobs it is computed again, and gets the
 * same values. */
Test(logprobs, cached_prompt_equals_cold) {
    char *dir = tiny_model();
    qw_engine *e = qwt_engine_new(dir, NULL);
    int32_t prompt[100];
    qwt_make_prompt(prompt, 100, VOCAB, 77);
    lp_job plain = { prompt, 100, 3, 0, -1, -1, 0, NULL }, with = { prompt, 100, 3, 0, 3, 4, 0, NULL };
    lp_out *o = calloc(3, sizeof *o);
    run(e, &plain, 1, &o[0]);
    run(e, &plain, 1, &o[0]);
    cr_assert_gt(o[0].cached, 0, "the prefix cache was meant to hold the prompt");
    run(e, &with, 1, &o[1]);
    cr_assert_eq(o[1].cached, 0, "a prompt-logprobs request bypasses the prefix cache");
    run(e, &with, 1, &o[2]);
    cr_assert_eq(o[2].cached, 0);
    assert_same(&o[1], &o[2], &with, "cached vs cold", 0);
    free(o);
    qw_engine_destroy(e);
    free(dir);
}

/* A session request gets prompt logprobs for its new prompt tokens only,
 * equal to those of the same tokens in one non-session request. */
Test(logprobs, session_prompt_logprobs_cover_new_tokens) {
    char *dir = tiny_model();
    qw_engine *e = qwt_engine_new(dir, NULL);
    qw_session *ses;
    cr_assert_eq(qw_session_create(e, &ses), QW_OK);
    int32_t p1[20], p2[12], full[40];
    qwt_make_prompt(p1, 20, VOCAB, 31);
    qwt_make_prompt(p2, 12, VOCAB, 32);
    lp_job first = { p1, 20, 4, 0, -1, -1, 0, ses };
    lp_out *o = calloc(3, sizeof *o);
    run(e, &first, 1, &o[0]);
    lp_job second = { p2, 12, 2, 0, -1, 5, 0, ses };
    run(e, &second, 1, &o[1]);
    /* the same tokens as one prompt: history (p1 + 4 generated) then p2 */
    memcpy(full, p1, sizeof p1);
    memcpy(full + 20, o[0].tokens, 4 * sizeof(int32_t));
    memcpy(full + 24, p2, sizeof p2);
    lp_job whole = { full, 36, 2, 0, -1, 5, 0, NULL };
    run(e, &whole, 1, &o[2]);
    for (int j = 1; j < 12; j++) {
        cr_assert_eq(o[1].prompt[j][0].token, p2[j]);
        for (int t = 0; t <= 5; t++) {
            cr_assert_eq(o[1].prompt[j][t].token, o[2].prompt[24 + j][t].token, "token %d pair %d", j, t);
            cr_assert(fabsf(o[1].prompt[j][t].logprob - o[2].prompt[24 + j][t].logprob) <= 1e-5f,
                      "token %d pair %d: %g vs %g", j, t, (double)o[1].prompt[j][t].logprob,
                      (double)o[2].prompt[24 + j][t].logprob);
        }
    }
    free(o);
    qw_session_destroy(ses);
    qw_engine_destroy(e);
    free(dir);
}

/* Zero cost when unused: requests without the options leave the plan's
 * logprobs buffers unallocated; generated-only logprobs never allocate the
 * prompt rows' buffer. */
Test(logprobs, buffers_only_when_asked) {
    char *dir = tiny_model();
    qw_engine *e = qwt_engine_new(dir, NULL);
    int32_t prompt[24];
    qwt_make_prompt(prompt, 24, VOCAB, 12);
    lp_job plain = { prompt, 24, 3, 0, -1, -1, 0, NULL }, gen = { prompt, 24, 3, 0, 2, -1, 0, NULL },
           both = { prompt, 24, 3, 0, 2, 2, 0, NULL };
    lp_out *o = calloc(1, sizeof *o);
    run(e, &plain, 1, o);
    cr_assert_null(e->plan.lp_n, "no logprobs buffers without a request asking");
    cr_assert_null(e->plan.plp_out);
    run(e, &gen, 1, o);
    cr_assert_not_null(e->plan.lp_out);
    cr_assert_null(e->plan.plp_out, "no prompt-row buffer without QW_REQ_PROMPT_LOGPROBS");
    run(e, &both, 1, o);
    cr_assert_not_null(e->plan.plp_out);
    free(o);
    qw_engine_destroy(e);
    free(dir);
}
