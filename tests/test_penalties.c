/*
 * test_penalties.c - repetition, presence and frequency penalties and the
 * logit bias (issue #13 item 3): each against a direct implementation of its
 * published definition, in the reference sampler and through the engine
 * (greedy on the logits callback's raw logits); range errors; batched ==
 * alone; preempted == not.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "penalties.h"
#include "sample.h"
#include "util/engine_util.h"
#include "util/testutil.h"

/* ---- the published definitions, written directly ------------------------
 * One id at a time, scanning the token lists: no entry lists, no counts
 * array, nothing shared with lib/penalties.c. vLLM's order: bias,
 * repetition (Hugging Face: prompt and output), frequency, presence (OpenAI:
 * output), each a float32 operation. */
typedef struct direct_params {
    float rep, pres, freq;
    const int32_t *prompt, *output, *bias_ids;
    const float *bias;
    int32_t np, no, nb;
} direct_params;

static void direct_penalise(const float *raw, int32_t V, const direct_params *d, float *out) {
    for (int32_t i = 0; i < V; i++) {
        float x = raw[i];
        for (int32_t j = 0; j < d->nb; j++)
            if (d->bias_ids[j] == i) x = x + d->bias[j];
        int in_prompt_or_output = 0, count = 0;
        for (int32_t j = 0; j < d->np; j++) in_prompt_or_output |= d->prompt[j] == i;
        for (int32_t j = 0; j < d->no; j++) {
            in_prompt_or_output |= d->output[j] == i;
            count += d->output[j] == i;
        }
        if (in_prompt_or_output && d->rep != 1.0f) x = x > 0 ? x / d->rep : x * d->rep;
        if (count > 0) {
            float fc = d->freq * (float)count;
            x = x - fc;
            x = x - d->pres;
        }
        out[i] = x;
    }
}

static int32_t direct_argmax(const float *x, int32_t V) {
    int32_t best = 0;
    for (int32_t i = 1; i < V; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* deterministic test data (splitmix64) */
static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float unit_float(uint64_t *s) { return (float)((double)(mix(s) >> 11) * 0x1.0p-53); }

/* Logits with both signs and a few exact ties, and token histories whose ids
 * repeat (counts up to ~6) and overlap the logits' top. */
typedef struct case_data {
    int32_t V;
    float *logits;
    int32_t prompt[64], output[48];
    int32_t np, no;
} case_data;

static void make_case(case_data *c, int32_t V, uint64_t seed) {
    uint64_t s = seed;
    c->V = V;
    c->logits = malloc(sizeof(float) * (size_t)V);
    cr_assert_not_null(c->logits);
    for (int32_t i = 0; i < V; i++) c->logits[i] = (unit_float(&s) - 0.4f) * 8.0f;
    c->logits[7] = c->logits[8];   /* a tie */
    c->np = 64;
    c->no = 48;
    /* small id range so ids repeat, biased towards the high logits */
    for (int32_t i = 0; i < c->np; i++) c->prompt[i] = (int32_t)(mix(&s) % 40u);
    for (int32_t i = 0; i < c->no; i++) c->output[i] = (int32_t)(20 + mix(&s) % 40u);
}

static qwi_sampling sampling_for(const case_data *c, float temp, const direct_params *d) {
    qwi_sampling p;
    memset(&p, 0, sizeof p);
    p.temperature = temp;
    p.top_p = 1.0f;
    p.seed = 77;
    p.repetition_penalty = d->rep;
    p.presence_penalty = d->pres;
    p.frequency_penalty = d->freq;
    p.prompt_tokens = c->prompt;
    p.num_prompt_tokens = c->np;
    p.output_tokens = c->output;
    p.num_output_tokens = c->no;
    p.bias_ids = d->bias_ids;
    p.bias = d->bias;
    p.num_bias = d->nb;
    return p;
}

static const int32_t bias_ids[] = {3, 25, 41, 500, 999};
static const float bias_vals[] = {-100.0f, 2.5f, 7.25f, 30.0f, -0.125f};

/* Configurations: each penalty alone, the bias alone, all together, and
 * negative presence/frequency (which reward repeats). */
static direct_params config(int k, const case_data *c) {
    direct_params d = {1.0f, 0.0f, 0.0f, c->prompt, c->output, bias_ids, bias_vals, c->np, c->no, 0};
    switch (k) {
    case 0: d.rep = 1.7f; break;
    case 1: d.rep = 0.6f; break;   /* < 1 favours repeats */
    case 2: d.freq = 0.9f; break;
    case 3: d.pres = 1.3f; break;
    case 4: d.nb = 5; break;
    case 5: d.rep = 1.3f; d.freq = 0.4f; d.pres = 0.7f; d.nb = 5; break;
    default: d.freq = -1.1f; d.pres = -2.0f; d.rep = 1.2f; d.nb = 3; break;
    }
    return d;
}
#define NCONFIGS 7

Test(penalties_unit, each_definition_matches_sampler) {
    const int32_t V = 1000;
    float *direct = malloc(sizeof(float) * V), *p1 = malloc(sizeof(float) * V), *p2 = malloc(sizeof(float) * V);
    float *before = malloc(sizeof(float) * V);
    qwi_sample_scratch *s = qwi_sample_scratch_create(V);
    cr_assert(direct && p1 && p2 && before && s);
    for (int seed = 1; seed <= 3; seed++) {
        case_data c;
        make_case(&c, V, (uint64_t)seed);
        memcpy(before, c.logits, sizeof(float) * V);
        for (int k = 0; k < NCONFIGS; k++) {
            direct_params d = config(k, &c);
            direct_penalise(c.logits, V, &d, direct);
            int changed = 0;
            for (int32_t i = 0; i < V; i++) changed += direct[i] != c.logits[i];
            cr_assert_gt(changed, 0, "config %d changes nothing: the test would be vacuous", k);
            /* greedy: the argmax of the penalised logits */
            qwi_sampling pg = sampling_for(&c, 0.0f, &d);
            cr_assert_eq(qwi_sample(c.logits, V, &pg, 100, s), direct_argmax(direct, V), "seed %d config %d greedy",
                         seed, k);
            /* full distribution, with and without top-p: identical to the
             * plain sampler run on the directly penalised logits */
            for (int tp = 0; tp < 2; tp++) {
                qwi_sampling pp = sampling_for(&c, 0.8f, &d);
                pp.top_p = tp ? 0.9f : 1.0f;
                qwi_sampling plain = pp;
                plain.num_bias = 0;
                plain.repetition_penalty = 1.0f;
                plain.presence_penalty = plain.frequency_penalty = 0.0f;
                qwi_sample_probs(c.logits, V, &pp, p1, s);
                qwi_sample_probs(direct, V, &plain, p2, s);
                cr_assert(memcmp(p1, p2, sizeof(float) * V) == 0, "seed %d config %d top_p %d: probs differ", seed, k,
                          tp);
                for (int64_t pos = 0; pos < 20; pos++)
                    cr_assert_eq(qwi_sample(c.logits, V, &pp, pos, s), qwi_sample(direct, V, &plain, pos, s));
            }
            cr_assert(memcmp(before, c.logits, sizeof(float) * V) == 0, "the sampler modified its logits");
        }
        free(c.logits);
    }
    qwi_sample_scratch_free(s);
    free(direct);
    free(p1);
    free(p2);
    free(before);
}

Test(penalties_unit, neutral_values_are_inactive) {
    int32_t toks[3] = {1, 2, 3};
    qwi_sampling p;
    memset(&p, 0, sizeof p);   /* zero-initialised: repetition 0 = off */
    p.prompt_tokens = p.output_tokens = toks;
    p.num_prompt_tokens = p.num_output_tokens = 3;
    cr_assert(!qwi_penalties_active(&p));
    p.repetition_penalty = 1.0f;
    cr_assert(!qwi_penalties_active(&p));
    p.repetition_penalty = 1.01f;
    cr_assert(qwi_penalties_active(&p));
    p.repetition_penalty = 1.0f;
    p.presence_penalty = 0.5f;
    cr_assert(qwi_penalties_active(&p));
    p.num_output_tokens = 0;   /* presence/frequency only count output */
    cr_assert(!qwi_penalties_active(&p));
}

Test(penalties_unit, banned_stays_banned_whatever_the_bias) {
    const int32_t V = 64;
    float lg[64];
    for (int i = 0; i < V; i++) lg[i] = (float)(i % 7);
    int32_t banned[1] = {5};
    int32_t ids[1] = {5};
    float b[1] = {100.0f};
    qwi_sample_scratch *s = qwi_sample_scratch_create(V);
    qwi_sampling p;
    memset(&p, 0, sizeof p);
    p.bias_ids = ids;
    p.bias = b;
    p.num_bias = 1;
    p.top_p = 1.0f;
    cr_assert_eq(qwi_sample(lg, V, &p, 0, s), 5, "the bias alone makes 5 the argmax");
    p.banned = banned;
    p.num_banned = 1;
    cr_assert_neq(qwi_sample(lg, V, &p, 0, s), 5, "banned (EOS before min_tokens) beats the bias");
    p.temperature = 1.0f;
    float probs[64];
    qwi_sample_probs(lg, V, &p, probs, s);
    cr_assert_eq(probs[5], 0.0f);
    qwi_sample_scratch_free(s);
}

/* The counts array is cleared where it was set: a second call with other
 * histories on the same scratch equals a fresh scratch; and the fallback
 * without scratch gives the same greedy pick. */
Test(penalties_unit, scratch_reuse_and_no_scratch_fallback) {
    const int32_t V = 300;
    case_data a, b;
    make_case(&a, V, 11);
    make_case(&b, V, 12);
    qwi_sample_scratch *used = qwi_sample_scratch_create(V);
    float *p1 = malloc(sizeof(float) * V), *p2 = malloc(sizeof(float) * V);
    for (int k = 0; k < NCONFIGS; k++) {
        direct_params da = config(k, &a), db = config(k, &b);
        qwi_sampling pa = sampling_for(&a, 1.0f, &da), pb = sampling_for(&b, 1.0f, &db);
        qwi_sample_probs(a.logits, V, &pa, p1, used);   /* leaves nothing behind */
        qwi_sample_probs(b.logits, V, &pb, p1, used);
        qwi_sample_scratch *fresh = qwi_sample_scratch_create(V);
        qwi_sample_probs(b.logits, V, &pb, p2, fresh);
        qwi_sample_scratch_free(fresh);
        cr_assert(memcmp(p1, p2, sizeof(float) * V) == 0, "config %d: reused scratch differs from a fresh one", k);
        pb.temperature = 0;
        cr_assert_eq(qwi_sample(b.logits, V, &pb, 0, NULL), qwi_sample(b.logits, V, &pb, 0, used), "config %d", k);
    }
    qwi_sample_scratch_free(used);
    free(p1);
    free(p2);
    free(a.logits);
    free(b.logits);
}

/* The packed form the CUDA backend uploads, applied by its host reference
 * (the device kernel runs the same qwi_penalty_apply per entry): rows that
 * sample with penalties get the definition, all others stay untouched, and
 * a second pack on the same state is not disturbed by the first. */
Test(penalties_unit, device_pack_matches_definition) {
    const int32_t V = 700;
    case_data c[3];
    for (int i = 0; i < 3; i++) make_case(&c[i], V, 40 + (uint64_t)i);
    qwi_sampling sp[3];
    direct_params d[3];
    for (int i = 0; i < 3; i++) {
        d[i] = config(i == 0 ? 5 : 6, &c[i]);
        sp[i] = sampling_for(&c[i], 1.0f, &d[i]);
    }
    uint8_t do_sample[3] = {1, 1, 0};   /* seq 2: a prefill chunk, no sample */
    const int32_t row_seq[3] = {2, 0, 1};
    float *rows = malloc(sizeof(float) * 3 * V), *want = malloc(sizeof(float) * V);
    qwi_penalty_pack pk;
    memset(&pk, 0, sizeof pk);
    for (int round = 0; round < 2; round++) {
        if (round == 1) {
            sp[1].repetition_penalty = 1.0f;   /* seq 1 neutral now: skipped */
            sp[1].presence_penalty = sp[1].frequency_penalty = 0.0f;
            sp[1].num_bias = 0;
        }
        for (int r = 0; r < 3; r++) memcpy(rows + (size_t)r * V, c[row_seq[r]].logits, sizeof(float) * V);
        cr_assert_eq(qwi_penalties_pack(&pk, sp, do_sample, row_seq, 3, V), QW_OK);
        cr_assert_eq(pk.num_rows, round == 0 ? 2 : 1);
        qwi_penalties_pack_apply(&pk, rows, V);
        for (int r = 0; r < 3; r++) {
            int32_t s = row_seq[r];
            if (do_sample[s] && !(round == 1 && s == 1)) direct_penalise(c[s].logits, V, &d[s], want);
            else memcpy(want, c[s].logits, sizeof(float) * V);
            cr_assert(memcmp(rows + (size_t)r * V, want, sizeof(float) * V) == 0, "round %d row %d (seq %d)", round,
                      r, s);
        }
    }
    qwi_penalties_pack_free(&pk);
    free(rows);
    free(want);
    for (int i = 0; i < 3; i++) free(c[i].logits);
}

/* ---- public API: ranges and submit checks ---------------------------------- */

Test(penalties_api, option_ranges) {
    qw_request *r = NULL;
    cr_assert_eq(qw_request_create(&r), QW_OK);
    const double bad_rep[] = {0.0, -1.0, 100.5, INFINITY, NAN};
    for (size_t i = 0; i < sizeof bad_rep / sizeof bad_rep[0]; i++) {
        cr_assert_eq(qw_request_set_double(r, QW_REQ_REPETITION_PENALTY, bad_rep[i]), QW_ERR_INVALID_ARGUMENT);
        if (!isnan(bad_rep[i])) cr_assert(strstr(qw_last_error(), "QW_REQ_REPETITION_PENALTY"), "%s", qw_last_error());
    }
    cr_assert_eq(qw_request_set_double(r, QW_REQ_REPETITION_PENALTY, 100.0), QW_OK);
    cr_assert_eq(qw_request_set_double(r, QW_REQ_REPETITION_PENALTY, 1e-6), QW_OK);
    const qw_request_option pf[2] = {QW_REQ_PRESENCE_PENALTY, QW_REQ_FREQUENCY_PENALTY};
    const char *names[2] = {"QW_REQ_PRESENCE_PENALTY", "QW_REQ_FREQUENCY_PENALTY"};
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(qw_request_set_double(r, pf[k], 2.01), QW_ERR_INVALID_ARGUMENT);
        cr_assert(strstr(qw_last_error(), names[k]), "%s", qw_last_error());
        cr_assert_eq(qw_request_set_double(r, pf[k], -2.5), QW_ERR_INVALID_ARGUMENT);
        cr_assert_eq(qw_request_set_double(r, pf[k], -INFINITY), QW_ERR_INVALID_ARGUMENT);
        cr_assert_eq(qw_request_set_double(r, pf[k], -2.0), QW_OK);
        cr_assert_eq(qw_request_set_double(r, pf[k], 2.0), QW_OK);
        cr_assert_eq(qw_request_set_int(r, pf[k], 1), QW_ERR_INVALID_ARGUMENT, "a double option");
    }
    cr_assert_eq(qw_request_set_int(r, QW_REQ_REPETITION_PENALTY, 1), QW_ERR_INVALID_ARGUMENT);
    cr_assert_eq(qw_request_release(r), QW_OK);
}

Test(penalties_api, logit_bias_checks) {
    qw_request *r = NULL;
    cr_assert_eq(qw_request_create(&r), QW_OK);
    int32_t ids[QW_MAX_LOGIT_BIAS + 1];
    float b[QW_MAX_LOGIT_BIAS + 1];
    for (int i = 0; i <= QW_MAX_LOGIT_BIAS; i++) {
        ids[i] = i;
        b[i] = 1.0f;
    }
    cr_assert_eq(qw_request_set_logit_bias(r, ids, b, QW_MAX_LOGIT_BIAS), QW_OK);
    cr_assert_eq(qw_request_set_logit_bias(r, ids, b, QW_MAX_LOGIT_BIAS + 1), QW_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(qw_last_error(), "QW_MAX_LOGIT_BIAS"), "%s", qw_last_error());
    cr_assert_eq(qw_request_set_logit_bias(r, NULL, b, 2), QW_ERR_INVALID_ARGUMENT);
    cr_assert_eq(qw_request_set_logit_bias(r, ids, NULL, 2), QW_ERR_INVALID_ARGUMENT);
    cr_assert_eq(qw_request_set_logit_bias(r, NULL, NULL, 0), QW_OK, "n = 0 clears");
    const float bad[] = {100.5f, -101.0f, INFINITY, NAN};
    for (size_t k = 0; k < 4; k++) {
        b[1] = bad[k];
        cr_assert_eq(qw_request_set_logit_bias(r, ids, b, 3), QW_ERR_INVALID_ARGUMENT);
        cr_assert(strstr(qw_last_error(), "bias[1]"), "%s", qw_last_error());
    }
    b[1] = 1.0f;
    ids[2] = 0;   /* duplicate of entry 0 */
    cr_assert_eq(qw_request_set_logit_bias(r, ids, b, 3), QW_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(qw_last_error(), "twice"), "%s", qw_last_error());
    cr_assert_eq(qw_request_release(r), QW_OK);
}

static char *tiny_model(void) {
    /* the same model (name and args) as test_invariants.c: generated once */
    char *dir = qwt_model("inv-tiny-f32", "--shape tiny --dtype f32 --seed 11");
    cr_assert_not_null(dir, "model generation failed");
    return dir;
}

Test(penalties_api, bias_ids_checked_at_submit) {
    char *dir = tiny_model();
    qw_engine *e = qwt_engine_new(dir, NULL);
    int32_t V = e->vocab_size;
    qw_request *r = NULL;
    cr_assert_eq(qw_request_create(&r), QW_OK);
    int32_t prompt[4] = {1, 2, 3, 4};
    cr_assert_eq(qw_request_set_prompt(r, prompt, 4), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_MAX_TOKENS, 2), QW_OK);
    const int32_t bad_ids[2] = {V, -1};
    for (int k = 0; k < 2; k++) {
        int32_t ids[2] = {5, bad_ids[k]};
        float b[2] = {1.0f, -1.0f};
        cr_assert_eq(qw_request_set_logit_bias(r, ids, b, 2), QW_OK, "ids are checked at submit");
        cr_assert_eq(qw_engine_submit(e, r), QW_ERR_TOKEN_OUT_OF_RANGE);
        cr_assert(strstr(qw_last_error(), "logit bias"), "%s", qw_last_error());
    }
    /* the refused request can be fixed and submitted; after that it is frozen */
    int32_t ids[1] = {V - 3};
    float b[1] = {-2.0f};
    cr_assert_eq(qw_request_set_logit_bias(r, ids, b, 1), QW_OK);
    cr_assert_eq(qw_engine_submit(e, r), QW_OK, "%s", qw_last_error());
    cr_assert_eq(qw_request_set_logit_bias(r, ids, b, 1), QW_ERR_INVALID_STATE);
    cr_assert_eq(qw_request_set_double(r, QW_REQ_PRESENCE_PENALTY, 1.0), QW_ERR_INVALID_STATE);
    qw_event ev[16];
    size_t got;
    while (qw_engine_has_work(e)) cr_assert_eq(qw_engine_step(e, ev, 16, sizeof ev[0], &got), QW_OK);
    cr_assert_eq(qw_request_release(r), QW_OK);
    qw_engine_destroy(e);
    free(dir);
}

/* ---- engine level --------------------------------------------------------- */

typedef struct pjob {
    int32_t prompt[96];
    int32_t np, max_tokens;
    double temp, rep, pres, freq;
    int64_t seed;
    int32_t bias_ids[4];
    float bias[4];
    int32_t nb;
} pjob;

typedef struct presult {
    int32_t tokens[64];
    int32_t n;
    float *logits;   /* [n][vocab]: the raw logits of each sampled position */
    int32_t nl, vocab, finished;
} presult;

static void keep_raw(void *user, qw_request *req, int32_t position, const float *logits, int32_t vocab) {
    presult *res = user;
    res->logits = realloc(res->logits, sizeof(float) * (size_t)vocab * (size_t)(res->nl + 1));
    cr_assert_not_null(res->logits);
    memcpy(res->logits + (size_t)res->nl * (size_t)vocab, logits, sizeof(float) * (size_t)vocab);
    res->nl++;
    res->vocab = vocab;
}

static void run_pjobs(qw_engine *e, const pjob *jobs, int n, presult *res) {
    qw_request **reqs = calloc((size_t)n, sizeof *reqs);
    memset(res, 0, sizeof *res * (size_t)n);
    for (int i = 0; i < n; i++) {
        const pjob *j = &jobs[i];
        qw_request *r = NULL;
        cr_assert_eq(qw_request_create(&r), QW_OK);
        cr_assert_eq(qw_request_set_prompt(r, j->prompt, (size_t)j->np), QW_OK);
        cr_assert_eq(qw_request_set_int(r, QW_REQ_MAX_TOKENS, j->max_tokens), QW_OK);
        cr_assert_eq(qw_request_set_int(r, QW_REQ_IGNORE_EOS, 1), QW_OK);
        cr_assert_eq(qw_request_set_double(r, QW_REQ_TEMPERATURE, j->temp), QW_OK);
        if (j->seed >= 0) cr_assert_eq(qw_request_set_int(r, QW_REQ_SEED, j->seed), QW_OK);
        cr_assert_eq(qw_request_set_double(r, QW_REQ_REPETITION_PENALTY, j->rep), QW_OK);
        cr_assert_eq(qw_request_set_double(r, QW_REQ_PRESENCE_PENALTY, j->pres), QW_OK);
        cr_assert_eq(qw_request_set_double(r, QW_REQ_FREQUENCY_PENALTY, j->freq), QW_OK);
        cr_assert_eq(qw_request_set_logit_bias(r, j->bias_ids, j->bias, (size_t)j->nb), QW_OK);
        cr_assert_eq(qw_request_set_logits_callback(r, keep_raw, &res[i]), QW_OK);
        cr_assert_eq(qw_request_set_user_data(r, &res[i]), QW_OK);
        cr_assert_eq(qw_engine_submit(e, r), QW_OK, "%s", qw_last_error());
        reqs[i] = r;
    }
    qw_event ev[64];
    for (int step = 0; qw_engine_has_work(e); step++) {
        size_t got = 0;
        cr_assert_eq(qw_engine_step(e, ev, 64, sizeof ev[0], &got), QW_OK, "%s", qw_last_error());
        for (size_t k = 0; k < got; k++) {
            presult *r = ev[k].user_data;
            if (ev[k].kind == QW_EVENT_TOKEN) {
                cr_assert_lt(r->n, 64);
                r->tokens[r->n++] = ev[k].token;
            }
            if (ev[k].finish_reason != QW_FINISH_NONE) r->finished++;
        }
        cr_assert_lt(step, 100000);
    }
    for (int i = 0; i < n; i++) {
        cr_assert_eq(res[i].finished, 1);
        cr_assert_eq(res[i].nl, res[i].n, "one raw logits row per token");
        cr_assert_eq(qw_request_release(reqs[i]), QW_OK);
    }
    free(reqs);
}

static void free_results(presult *res, int n) {
    for (int i = 0; i < n; i++) free(res[i].logits);
}

/* Greedy jobs with each penalty, the bias, and all together: prompts drawn
 * from a small id range so they repeat, strong penalties so they bite. */
#define NPJOBS 8
static void make_pjobs(pjob *jobs, int32_t vocab, int sampled) {
    for (int i = 0; i < NPJOBS; i++) {
        pjob *j = &jobs[i];
        memset(j, 0, sizeof *j);
        j->np = 8 + (i * 29) % 80;
        qwt_make_prompt(j->prompt, j->np, 48, 300 + (uint64_t)i);
        j->max_tokens = 12 + i % 5;
        j->temp = sampled && i % 2 ? 0.9 : 0.0;
        j->seed = 1000 + i;
        j->rep = 1.0;
        switch (i % 4) {
        case 0: j->rep = 1.8; break;
        case 1: j->freq = 1.5; j->pres = 0.5; break;
        case 2:
            j->nb = 3;
            j->bias_ids[0] = 7, j->bias[0] = 3.0f;
            j->bias_ids[1] = vocab - 5, j->bias[1] = 1.5f;
            j->bias_ids[2] = 11, j->bias[2] = -100.0f;
            break;
        default:
            j->rep = 1.4, j->freq = 0.8, j->pres = -0.6;
            j->nb = 2;
            j->bias_ids[0] = 19, j->bias[0] = 2.0f;
            j->bias_ids[1] = 3, j->bias[1] = -1.0f;
            break;
        }
    }
}

Test(penalties_engine, greedy_is_argmax_of_directly_penalised_raw_logits) {
    char *dir = tiny_model();
    qw_engine *e = qwt_engine_new(dir, &(qwt_engine_cfg){.threads = 2});
    int32_t V = e->vocab_size;
    pjob jobs[NPJOBS];
    presult res[NPJOBS];
    make_pjobs(jobs, V, 0);
    run_pjobs(e, jobs, NPJOBS, res);
    float *pen = malloc(sizeof(float) * (size_t)V);
    int differs = 0;
    for (int i = 0; i < NPJOBS; i++) {
        const pjob *j = &jobs[i];
        for (int32_t k = 0; k < res[i].n; k++) {
            direct_params d = {(float)j->rep, (float)j->pres, (float)j->freq, j->prompt, res[i].tokens,
                               j->bias_ids, j->bias, j->np, k, j->nb};
            const float *raw = res[i].logits + (size_t)k * (size_t)V;
            direct_penalise(raw, V, &d, pen);
            int32_t want = direct_argmax(pen, V);
            cr_assert_eq(res[i].tokens[k], want, "job %d token %d: %d, the penalised argmax is %d", i, k,
                         res[i].tokens[k], want);
            differs += want != direct_argmax(raw, V);
        }
    }
    /* the penalties must have changed picks, or this test proves nothing */
    cr_assert_gt(differs, 5, "only %d picks changed by the penalties", differs);
    free(pen);
    free_results(res, NPJOBS);
    qw_engine_destroy(e);
    free(dir);
}

static void assert_same(const presult *a, const presult *b, int n, const char *what) {
    for (int i = 0; i < n; i++) {
        cr_assert_eq(a[i].n, b[i].n, "%s: job %d", what, i);
        cr_assert_arr_eq(a[i].tokens, b[i].tokens, sizeof(int32_t) * (size_t)a[i].n, "%s: job %d tokens", what, i);
    }
}

Test(penalties_engine, batched_equals_alone) {
    char *dir = tiny_model();
    pjob jobs[NPJOBS];
    presult alone[NPJOBS], batched[NPJOBS];
    qw_engine *e = qwt_engine_new(dir, NULL);
    make_pjobs(jobs, e->vocab_size, 1);
    for (int i = 0; i < NPJOBS; i++) run_pjobs(e, &jobs[i], 1, &alone[i]);
    qw_engine_destroy(e);
    e = qwt_engine_new(dir, &(qwt_engine_cfg){.threads = 2, .max_batched_tokens = 48});
    run_pjobs(e, jobs, NPJOBS, batched);
    qw_engine_destroy(e);
    assert_same(alone, batched, NPJOBS, "batched (and chunked) vs alone");
    free_results(alone, NPJOBS);
    free_results(batched, NPJOBS);
    free(dir);
}

Test(penalties_engine, preempted_equals_unconstrained) {
    char *dir = tiny_model();
    pjob jobs[NPJOBS];
    presult ref[NPJOBS], got[NPJOBS];
    qw_engine *e = qwt_engine_new(dir, NULL);
    make_pjobs(jobs, e->vocab_size, 1);
    run_pjobs(e, jobs, NPJOBS, ref);
    qw_engine_destroy(e);
    /* 8 blocks of 16 tokens: the longest job (~100 tokens) fits alone, the
     * eight together (~500) do not */
    e = qwt_engine_new(dir, &(qwt_engine_cfg){.num_kv_blocks = 8, .max_batched_tokens = 64});
    run_pjobs(e, jobs, NPJOBS, got);
    cr_assert_gt(e->sched.total_preemptions, 0, "the pool was meant to force preemption");
    qw_engine_destroy(e);
    assert_same(ref, got, NPJOBS, "preempted vs unconstrained");
    free_results(ref, NPJOBS);
    free_results(got, NPJOBS);
    free(dir);
}
