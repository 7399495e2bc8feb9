/*
 * test_parallel_samples.c - n samples from one prompt (QW_REQ_N): sample i
 * gives the tokens of a separate request with seed + i, the prompt is
 * prefilled once, events name their sample, cancel reaches every sample,
 * batching, queueing and preemption change nothing, no KV block leaks, and
 * n = 1 and bad arguments behave.
 */
#include <criterion/criterion.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine.h"
#include "stop_strings.h"
#include "util/engine_util.h"
#include "util/testutil.h"

#define VOCAB 512
#define MAXTOK 256
#define MAXREC 64

static char *tiny_model(void) {
    char *dir = qwt_model("inv-tiny-f32", "--shape tiny --dtype f32 --seed 11");
    cr_assert_not_null(dir, "model generation failed");
    return dir;
}

/* What the events said about one sequence (one sample handle). */
typedef struct rec {
    qw_request *handle;
    int32_t tokens[MAXTOK];
    int32_t n;
    int32_t finish, finish_events;
    uint32_t sample_index;
    uint64_t request_id;
    void *user_data;
} rec;

typedef struct recs {
    rec r[MAXREC];
    int n;
} recs;

static rec *rec_for(recs *rs, qw_request *h) {
    for (int i = 0; i < rs->n; i++)
        if (rs->r[i].handle == h) return &rs->r[i];
    cr_assert_lt(rs->n, MAXREC);
    rec *r = &rs->r[rs->n++];
    memset(r, 0, sizeof *r);
    r->handle = h;
    return r;
}

/* Deliver one step's events into rs, checking what every event must hold. */
static void take_events(recs *rs, const qw_event *ev, size_t got) {
    for (size_t k = 0; k < got; k++) {
        rec *r = rec_for(rs, ev[k].request);
        if (r->n == 0 && r->finish_events == 0) {
            r->sample_index = ev[k].sample_index;
            r->request_id = ev[k].request_id;
            r->user_data = ev[k].user_data;
        }
        cr_assert_eq(ev[k].sample_index, r->sample_index, "a handle's events keep their sample_index");
        cr_assert_eq(ev[k].request_id, r->request_id);
        cr_assert_eq(ev[k].user_data, r->user_data);
        cr_assert_eq(r->finish_events, 0, "an event after the finishing one");
        if (ev[k].kind == QW_EVENT_TOKEN) {
            cr_assert_eq(ev[k].index, (uint32_t)r->n, "token index");
            cr_assert_lt(r->n, MAXTOK);
            r->tokens[r->n++] = ev[k].token;
        }
        if (ev[k].finish_reason != QW_FINISH_NONE) {
            r->finish = (int32_t)ev[k].finish_reason;
            r->finish_events++;
        }
    }
}

/* Step until the engine has no work; returns the steps taken. */
static int run(qw_engine *e, recs *rs) {
    qw_event ev[32];
    int steps = 0;
    while (qw_engine_has_work(e)) {
        size_t got = 0;
        cr_assert_eq(qw_engine_step(e, ev, 32, sizeof ev[0], &got), QW_OK, "%s", qw_last_error());
        take_events(rs, ev, got);
        cr_assert_lt(++steps, 100000, "engine does not terminate");
    }
    return steps;
}

/* The options every request of a test gets: sampling with every option a
 * sample must copy (penalties, bias, min tokens, stop tokens, logprobs). */
typedef struct opts {
    const int32_t *prompt;
    int32_t num_prompt;
    int32_t max_tokens;
    int64_t seed;          /* QW_REQ_SEED (as uint64), unless derived */
    int derived;           /* no QW_REQ_SEED: the engine derives it  */
    int32_t n;             /* QW_REQ_N; 0 = leave unset */
    int rich;              /* penalties, bias, min tokens, stop token, logprobs */
    void *user_data;
} opts;

static qw_request *make(const opts *o) {
    qw_request *r = NULL;
    cr_assert_eq(qw_request_create(&r), QW_OK);
    cr_assert_eq(qw_request_set_prompt(r, o->prompt, (size_t)o->num_prompt), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_MAX_TOKENS, o->max_tokens), QW_OK);
    cr_assert_eq(qw_request_set_double(r, QW_REQ_TEMPERATURE, 0.9), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_TOP_K, 40), QW_OK);
    cr_assert_eq(qw_request_set_double(r, QW_REQ_TOP_P, 0.95), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_IGNORE_EOS, 1), QW_OK);
    if (!o->derived) cr_assert_eq(qw_request_set_int(r, QW_REQ_SEED, o->seed), QW_OK);
    if (o->n) cr_assert_eq(qw_request_set_int(r, QW_REQ_N, o->n), QW_OK);
    if (o->rich) {
        static const int32_t bias_ids[] = {3, 17, 200};
        static const float bias[] = {2.5f, -1.0f, 4.0f};
        static const int32_t stop[] = {77};
        cr_assert_eq(qw_request_set_double(r, QW_REQ_REPETITION_PENALTY, 1.3), QW_OK);
        cr_assert_eq(qw_request_set_double(r, QW_REQ_PRESENCE_PENALTY, 0.4), QW_OK);
        cr_assert_eq(qw_request_set_double(r, QW_REQ_FREQUENCY_PENALTY, 0.3), QW_OK);
        cr_assert_eq(qw_request_set_logit_bias(r, bias_ids, bias, 3), QW_OK);
        cr_assert_eq(qw_request_set_int(r, QW_REQ_MIN_TOKENS, 3), QW_OK);
        cr_assert_eq(qw_request_set_stop_tokens(r, stop, 1), QW_OK);
        cr_assert_eq(qw_request_set_int(r, QW_REQ_LOGPROBS, 3), QW_OK);
        cr_assert_eq(qw_request_set_int(r, QW_REQ_PROMPT_LOGPROBS, 2), QW_OK);
        static const char *const stops[] = {"e t", "s."};
        cr_assert_eq(qw_request_set_stop_strings(r, stops, NULL, 2), QW_OK);
    }
    if (o->user_data) cr_assert_eq(qw_request_set_user_data(r, o->user_data), QW_OK);
    return r;
}

static void assert_no_leak(qw_engine *e) {
    qw_engine_stats st;
    cr_assert_eq(qw_engine_get_stats(e, &st, sizeof st), QW_OK);
    cr_assert_eq(st.kv_blocks_used, 0, "%llu KV blocks still held after every request ended",
                 (unsigned long long)st.kv_blocks_used);
    cr_assert_eq(qw_engine_num_free_kv_blocks(e), qw_engine_num_kv_blocks(e));
    cr_assert_eq(st.num_running + st.num_waiting, 0);
}

static void assert_same_logprobs(qw_request *a, qw_request *b, int32_t ntok, int32_t nprompt) {
    for (int32_t t = 0; t < ntok; t++) {
        qw_logprob sa, sb, ta[8], tb[8];
        size_t na = 0, nb = 0;
        cr_assert_eq(qw_request_get_logprobs(a, (size_t)t, &sa, ta, 8, &na), QW_OK, "%s", qw_last_error());
        cr_assert_eq(qw_request_get_logprobs(b, (size_t)t, &sb, tb, 8, &nb), QW_OK, "%s", qw_last_error());
        cr_assert_eq(na, nb);
        cr_assert(sa.token == sb.token && sa.logprob == sb.logprob, "logprob of token %d differs", t);
        cr_assert_arr_eq(ta, tb, na * sizeof ta[0], "top logprobs of token %d differ", t);
    }
    for (int32_t j = 1; j < nprompt; j++) {
        qw_logprob sa, sb, ta[8], tb[8];
        size_t na = 0, nb = 0;
        cr_assert_eq(qw_request_get_prompt_logprobs(a, (size_t)j, &sa, ta, 8, &na), QW_OK, "%s", qw_last_error());
        cr_assert_eq(qw_request_get_prompt_logprobs(b, (size_t)j, &sb, tb, 8, &nb), QW_OK, "%s", qw_last_error());
        cr_assert_eq(na, nb);
        cr_assert(sa.token == sb.token && sa.logprob == sb.logprob, "prompt logprob %d differs", j);
        cr_assert_arr_eq(ta, tb, na * sizeof ta[0], "top prompt logprobs %d differ", j);
    }
}

/* Run one request with n samples on e (alone, or with `others` already
 * submitted), then each sample as a separate request with seed + i on a
 * fresh engine of cfg: tokens (and logprobs when rich) must be identical. */
static void check_against_separate(const char *dir, const qwt_engine_cfg *cfg, const opts *o) {
    qw_engine *e = qwt_engine_new(dir, cfg);
    qw_request *r = make(o);
    cr_assert_eq(qw_engine_submit(e, r), QW_OK, "%s", qw_last_error());
    /* The seed sample 0 uses: explicit or engine-derived. */
    uint64_t seed = r->sampling.seed;
    recs *got = calloc(1, sizeof *got);
    run(e, got);
    cr_assert_eq(got->n, o->n, "one event stream per sample");
    assert_no_leak(e);

    qw_engine *e2 = qwt_engine_new(dir, cfg);
    for (int32_t i = 0; i < o->n; i++) {
        qw_request *s = NULL;
        cr_assert_eq(qw_request_get_sample(r, (uint32_t)i, &s), QW_OK);
        rec *gr = NULL;
        for (int k = 0; k < got->n; k++)
            if (got->r[k].handle == s) gr = &got->r[k];
        cr_assert_not_null(gr, "no events for sample %d", i);
        cr_assert_eq(gr->sample_index, (uint32_t)i);
        cr_assert_eq(gr->finish_events, 1);

        opts so = *o;
        so.n = 0;
        so.derived = 0;
        so.seed = (int64_t)(seed + (uint64_t)i);   /* wraps like the engine */
        qw_request *alone = make(&so);
        cr_assert_eq(qw_engine_submit(e2, alone), QW_OK, "%s", qw_last_error());
        recs *ref = calloc(1, sizeof *ref);
        run(e2, ref);
        cr_assert_eq(ref->n, 1);
        cr_assert_eq(gr->n, ref->r[0].n, "sample %d: %d tokens, separate request %d", i, gr->n, ref->r[0].n);
        cr_assert_arr_eq(gr->tokens, ref->r[0].tokens, sizeof(int32_t) * (size_t)gr->n,
                         "sample %d differs from a separate request with seed + %d", i, i);
        cr_assert_eq(gr->finish, ref->r[0].finish);
        /* every getter works on the sample's handle */
        int32_t toks[MAXTOK];
        size_t nt = 0;
        cr_assert_eq(qw_request_get_tokens(s, toks, MAXTOK, &nt), QW_OK);
        cr_assert_eq(nt, (size_t)gr->n);
        cr_assert_arr_eq(toks, gr->tokens, sizeof(int32_t) * nt);
        cr_assert_eq(qw_request_get_state(s), QW_STATE_FINISHED);
        cr_assert_eq(qw_request_get_finish_reason(s), (qw_finish_reason)gr->finish);
        qw_request_stats rs;
        cr_assert_eq(qw_request_get_stats(s, &rs, sizeof rs), QW_OK);
        cr_assert_eq(rs.generated_tokens, (uint64_t)gr->n);
        cr_assert_eq(rs.prompt_tokens, (uint64_t)o->num_prompt);
        if (o->rich) assert_same_logprobs(s, alone, gr->n, o->num_prompt);
        /* the text (the tiny model has a tokenizer) and the stop match */
        static char ta[8192], tb[8192];
        size_t la = 0, lb = 0;
        cr_assert_eq(qw_request_get_text(s, ta, sizeof ta, &la), QW_OK, "%s", qw_last_error());
        cr_assert_eq(qw_request_get_text(alone, tb, sizeof tb, &lb), QW_OK, "%s", qw_last_error());
        cr_assert(la == lb && memcmp(ta, tb, la) == 0, "sample %d: text differs from the separate request's", i);
        int32_t ma = -2, mb = -2, ka = -2, kb = -2;
        cr_assert_eq(qw_request_get_stop_match(s, &ma, &ka), QW_OK);
        cr_assert_eq(qw_request_get_stop_match(alone, &mb, &kb), QW_OK);
        cr_assert(ma == mb && ka == kb, "sample %d: stop match differs", i);
        cr_assert_eq(qw_request_release(alone), QW_OK);
        free(ref);
    }
    assert_no_leak(e2);
    qw_engine_destroy(e2);
    free(got);
    cr_assert_eq(qw_request_release(r), QW_OK);
    qw_engine_destroy(e);
}

Test(parallel_samples, equal_separate_requests_with_derived_seeds) {
    char *dir = tiny_model();
    int32_t prompt[40];
    qwt_make_prompt(prompt, 37, VOCAB, 5);   /* 2 full blocks + a partial one */
    check_against_separate(dir, &(qwt_engine_cfg){.threads = 2},
                           &(opts){.prompt = prompt, .num_prompt = 37, .max_tokens = 12, .seed = 1234, .n = 4});
    /* every copied option (penalties, bias, min tokens, stop, logprobs) */
    check_against_separate(dir, &(qwt_engine_cfg){.threads = 2},
                           &(opts){.prompt = prompt, .num_prompt = 37, .max_tokens = 12, .seed = 99, .n = 3, .rich = 1});
    /* engine-derived seed; a prompt of exactly one block (no partial block) */
    check_against_separate(dir, &(qwt_engine_cfg){.threads = 2},
                           &(opts){.prompt = prompt, .num_prompt = 16, .max_tokens = 8, .derived = 1, .n = 3});
    free(dir);
}

Test(parallel_samples, seed_wraps) {
    char *dir = tiny_model();
    int32_t prompt[20];
    qwt_make_prompt(prompt, 9, VOCAB, 6);
    /* QW_REQ_SEED = 2^64 - 2: samples 2 and 3 use seeds 0 and 1 */
    check_against_separate(dir, &(qwt_engine_cfg){.threads = 2},
                           &(opts){.prompt = prompt, .num_prompt = 9, .max_tokens = 6, .seed = -2, .n = 4});
    qw_engine *e = qwt_engine_new(dir, NULL);
    qw_request *r = make(&(opts){.prompt = prompt, .num_prompt = 9, .max_tokens = 2, .seed = -2, .n = 3});
    cr_assert_eq(qw_engine_submit(e, r), QW_OK);
    recs *rs = calloc(1, sizeof *rs);
    run(e, rs);
    qw_request *s2 = NULL;
    cr_assert_eq(qw_request_get_sample(r, 2, &s2), QW_OK);
    cr_assert_eq(s2->sampling.seed, 0, "seed + 2 wraps to 0");
    cr_assert_eq(r->sampling.seed, UINT64_MAX - 1);
    free(rs);
    qw_request_release(r);
    assert_no_leak(e);
    qw_engine_destroy(e);
    free(dir);
}

Test(parallel_samples, prompt_prefilled_once) {
    char *dir = tiny_model();
    int32_t prompt[80];
    qwt_make_prompt(prompt, 70, VOCAB, 7);
    qw_engine *e = qwt_engine_new(dir, &(qwt_engine_cfg){.threads = 2});
    qw_request *r = make(&(opts){.prompt = prompt, .num_prompt = 70, .max_tokens = 5, .seed = 3, .n = 8});
    cr_assert_eq(qw_engine_submit(e, r), QW_OK);
    recs *rs = calloc(1, sizeof *rs);
    run(e, rs);
    qw_engine_stats st;
    cr_assert_eq(qw_engine_get_stats(e, &st, sizeof st), QW_OK);
    cr_assert_eq(st.prompt_tokens, 70, "prompt tokens computed: %llu, expected the prompt once (70)",
                 (unsigned long long)st.prompt_tokens);
    cr_assert_eq(st.generation_tokens, 8 * 5);
    cr_assert_eq(st.num_finished, 8);
    for (uint32_t i = 1; i < 8; i++) {
        qw_request *s = NULL;
        cr_assert_eq(qw_request_get_sample(r, i, &s), QW_OK);
        qw_request_stats q;
        cr_assert_eq(qw_request_get_stats(s, &q, sizeof q), QW_OK);
        cr_assert_eq(q.cached_prompt_tokens, 70, "sample %u's prompt came from the fork", i);
        cr_assert_eq(q.generated_tokens, 5);
    }
    free(rs);
    qw_request_release(r);
    assert_no_leak(e);
    qw_engine_destroy(e);
    free(dir);
}

Test(parallel_samples, events_name_their_sample) {
    char *dir = tiny_model();
    int32_t prompt[30];
    qwt_make_prompt(prompt, 21, VOCAB, 8);
    qw_engine *e = qwt_engine_new(dir, NULL);
    int tag;
    qw_request *r = make(&(opts){.prompt = prompt, .num_prompt = 21, .max_tokens = 4, .seed = 5, .n = 5,
                                 .user_data = &tag});
    cr_assert_eq(qw_engine_submit(e, r), QW_OK);
    /* An old caller's event size (before sample_index) still works. */
    size_t old_size = offsetof(qw_event, sample_index);
    unsigned char buf[64 * sizeof(qw_event)];
    size_t got = 0;
    int events = 0;
    while (qw_engine_has_work(e)) {
        cr_assert_eq(qw_engine_step(e, buf, 64, old_size, &got), QW_OK, "%s", qw_last_error());
        for (size_t k = 0; k < got; k++) {
            qw_event ev;
            memset(&ev, 0xff, sizeof ev);
            memcpy(&ev, buf + k * old_size, old_size);
            cr_assert_eq(ev.request_id, qw_request_get_id(r));
            cr_assert_eq(ev.user_data, &tag);
            cr_assert_eq(qw_request_get_user_data(ev.request), &tag);
            events++;
        }
    }
    cr_assert_eq(events, 5 * 4);
    cr_assert_eq(qw_engine_step(e, buf, 64, old_size - 1, &got), QW_ERR_BUFFER_TOO_SMALL);
    qw_request_release(r);

    /* With the full event: every sample's stream, by index and handle. */
    r = make(&(opts){.prompt = prompt, .num_prompt = 21, .max_tokens = 4, .seed = 5, .n = 5, .user_data = &tag});
    cr_assert_eq(qw_engine_submit(e, r), QW_OK);
    recs *rs = calloc(1, sizeof *rs);
    run(e, rs);
    cr_assert_eq(rs->n, 5);
    for (uint32_t i = 0; i < 5; i++) {
        qw_request *s = NULL;
        cr_assert_eq(qw_request_get_sample(r, i, &s), QW_OK);
        if (i == 0) cr_assert_eq(s, r, "sample 0 is the submitted request");
        rec *x = rec_for(rs, s);
        cr_assert_eq(x->sample_index, i);
        cr_assert_eq(x->n, 4);
        cr_assert_eq(x->finish, QW_FINISH_LENGTH);
        cr_assert_eq(x->finish_events, 1);
        cr_assert_eq(x->request_id, qw_request_get_id(r));
        cr_assert_eq(x->user_data, &tag);
    }
    free(rs);
    qw_request_release(r);
    assert_no_leak(e);
    qw_engine_destroy(e);
    free(dir);
}

/* Cancel the submitted request after `steps` steps: every sample ends
 * cancelled with one finishing event. */
static void cancel_after(const char *dir, int steps) {
    int32_t prompt[40];
    qwt_make_prompt(prompt, 33, VOCAB, 9);
    qw_engine *e = qwt_engine_new(dir, &(qwt_engine_cfg){.max_batched_tokens = 16});
    qw_request *r = make(&(opts){.prompt = prompt, .num_prompt = 33, .max_tokens = 100, .seed = 5, .n = 4});
    cr_assert_eq(qw_engine_submit(e, r), QW_OK);
    recs *rs = calloc(1, sizeof *rs);
    qw_event ev[32];
    for (int s = 0; s < steps; s++) {
        size_t got = 0;
        cr_assert_eq(qw_engine_step(e, ev, 32, sizeof ev[0], &got), QW_OK);
        take_events(rs, ev, got);
    }
    cr_assert_eq(qw_engine_cancel(e, r), QW_OK, "%s", qw_last_error());
    run(e, rs);
    cr_assert_eq(rs->n, 4, "after %d steps: %d samples reported", steps, rs->n);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(rs->r[i].finish, QW_FINISH_CANCELLED, "after %d steps: sample %u ended %d", steps,
                     rs->r[i].sample_index, rs->r[i].finish);
        cr_assert_eq(rs->r[i].finish_events, 1);
        cr_assert_eq(qw_request_get_finish_reason(rs->r[i].handle), QW_FINISH_CANCELLED);
    }
    free(rs);
    qw_request_release(r);
    assert_no_leak(e);
    qw_engine_destroy(e);
}

Test(parallel_samples, cancel_cancels_all) {
    char *dir = tiny_model();
    cancel_after(dir, 0);   /* still in the inbox */
    cancel_after(dir, 1);   /* prompt half computed (16-token budget): not forked */
    cancel_after(dir, 4);   /* forked, decoding */
    free(dir);
}

Test(parallel_samples, cancel_one_sample) {
    char *dir = tiny_model();
    int32_t prompt[40];
    qwt_make_prompt(prompt, 20, VOCAB, 10);
    qw_engine *e = qwt_engine_new(dir, NULL);
    qw_request *r = make(&(opts){.prompt = prompt, .num_prompt = 20, .max_tokens = 10, .seed = 5, .n = 3});
    cr_assert_eq(qw_engine_submit(e, r), QW_OK);
    qw_request *s1 = NULL, *s2 = NULL;
    cr_assert_eq(qw_request_get_sample(r, 1, &s1), QW_OK);
    cr_assert_eq(qw_request_get_sample(r, 2, &s2), QW_OK);
    cr_assert_eq(qw_engine_cancel(e, s2), QW_OK, "%s", qw_last_error());   /* before the fork */
    recs *rs = calloc(1, sizeof *rs);
    run(e, rs);
    cr_assert_eq(qw_request_get_finish_reason(r), QW_FINISH_LENGTH);
    cr_assert_eq(qw_request_get_finish_reason(s1), QW_FINISH_LENGTH);
    cr_assert_eq(qw_request_get_finish_reason(s2), QW_FINISH_CANCELLED);
    cr_assert_eq(rec_for(rs, s2)->n, 0);
    cr_assert_eq(rec_for(rs, s2)->finish_events, 1);
    cr_assert_eq(qw_engine_cancel(e, r), QW_ERR_INVALID_STATE, "every sample has finished");
    free(rs);
    qw_request_release(r);
    assert_no_leak(e);
    qw_engine_destroy(e);
    free(dir);
}

/* One sequence slot: the samples wait in the queue holding their forked
 * KV while sample 0 runs; cancelling the submitted request after it
 * finished still cancels them. */
Test(parallel_samples, cancel_after_sample0_finished) {
    char *dir = tiny_model();
    int32_t prompt[40];
    qwt_make_prompt(prompt, 30, VOCAB, 14);
    qw_engine *e = qwt_engine_new(dir, &(qwt_engine_cfg){.max_num_seqs = 1});
    qw_request *r = make(&(opts){.prompt = prompt, .num_prompt = 30, .max_tokens = 5, .seed = 5, .n = 3});
    cr_assert_eq(qw_engine_submit(e, r), QW_OK);
    recs *rs = calloc(1, sizeof *rs);
    qw_event ev[32];
    int steps = 0;
    while (qw_request_get_state(r) != QW_STATE_FINISHED) {
        size_t got = 0;
        cr_assert_eq(qw_engine_step(e, ev, 32, sizeof ev[0], &got), QW_OK);
        take_events(rs, ev, got);
        cr_assert_lt(++steps, 100);
        qw_engine_stats st;
        cr_assert_eq(qw_engine_get_stats(e, &st, sizeof st), QW_OK);
        cr_assert_leq(st.num_running, 1);
    }
    qw_engine_stats st;
    cr_assert_eq(qw_engine_get_stats(e, &st, sizeof st), QW_OK);
    cr_assert_eq(st.num_waiting, 2, "both samples wait for the one slot");
    cr_assert_gt(st.kv_blocks_used, 0, "holding their share of the prompt's KV");
    cr_assert_eq(qw_engine_cancel(e, r), QW_OK, "samples still run: %s", qw_last_error());
    run(e, rs);
    for (uint32_t i = 1; i < 3; i++) {
        qw_request *s = NULL;
        cr_assert_eq(qw_request_get_sample(r, i, &s), QW_OK);
        rec *x = rec_for(rs, s);
        cr_assert_eq(x->finish, QW_FINISH_CANCELLED, "sample %u", i);
        cr_assert_eq(x->finish_events, 1);
        cr_assert_eq(x->n, 1, "sample %u has its forked first token only", i);
    }
    cr_assert_eq(qw_request_get_finish_reason(r), QW_FINISH_LENGTH);
    free(rs);
    qw_request_release(r);
    assert_no_leak(e);
    qw_engine_destroy(e);
    free(dir);
}

/* n samples batched with other requests, chunked, with fewer sequence
 * slots than samples: the same tokens as everything alone. */
Test(parallel_samples, batched_equals_alone) {
    char *dir = tiny_model();
    enum { NOTHER = 4 };
    static int32_t prompts[NOTHER + 1][128];
    opts o[NOTHER + 1];
    for (int i = 0; i <= NOTHER; i++) {
        int len = 10 + i * 23;
        qwt_make_prompt(prompts[i], len, VOCAB, 40 + (uint64_t)i);
        o[i] = (opts){.prompt = prompts[i], .num_prompt = len, .max_tokens = 7 + i, .seed = 100 + i,
                      .n = i == 2 ? 5 : 0, .rich = i == 2};
    }
    /* alone: each request (n samples as separate seeds) on a fresh engine */
    recs *alone = calloc(1, sizeof *alone);
    int32_t alone_idx[NOTHER + 1][5];
    qw_engine *ea = qwt_engine_new(dir, NULL);
    for (int i = 0; i <= NOTHER; i++) {
        int n = o[i].n ? o[i].n : 1;
        for (int s = 0; s < n; s++) {
            opts so = o[i];
            so.n = 0;
            so.seed = o[i].seed + s;
            qw_request *q = make(&so);
            cr_assert_eq(qw_engine_submit(ea, q), QW_OK);
            recs *one = calloc(1, sizeof *one);
            run(ea, one);
            cr_assert_eq(one->n, 1);
            alone_idx[i][s] = alone->n;
            alone->r[alone->n++] = one->r[0];   /* the record keeps the tokens */
            free(one);
            qw_request_release(q);
        }
    }
    assert_no_leak(ea);
    qw_engine_destroy(ea);

    /* together: 3 sequence slots, 24-token steps, all at once */
    qw_engine *e = qwt_engine_new(dir, &(qwt_engine_cfg){.max_num_seqs = 3, .max_batched_tokens = 24, .threads = 2});
    qw_request *reqs[NOTHER + 1];
    for (int i = 0; i <= NOTHER; i++) {
        reqs[i] = make(&o[i]);
        cr_assert_eq(qw_engine_submit(e, reqs[i]), QW_OK);
    }
    recs *tog = calloc(1, sizeof *tog);
    run(e, tog);
    for (int i = 0; i <= NOTHER; i++) {
        int n = o[i].n ? o[i].n : 1;
        for (int s = 0; s < n; s++) {
            qw_request *h = NULL;
            cr_assert_eq(qw_request_get_sample(reqs[i], (uint32_t)s, &h), QW_OK);
            rec *t = rec_for(tog, h), *a = &alone->r[alone_idx[i][s]];
            cr_assert_eq(t->n, a->n, "request %d sample %d: %d tokens batched, %d alone", i, s, t->n, a->n);
            cr_assert_arr_eq(t->tokens, a->tokens, sizeof(int32_t) * (size_t)t->n,
                             "request %d sample %d: batched != alone", i, s);
            cr_assert_eq(t->finish, a->finish);
        }
    }
    assert_no_leak(e);
    for (int i = 0; i <= NOTHER; i++) qw_request_release(reqs[i]);
    qw_engine_destroy(e);
    free(alone);
    free(tog);
    free(dir);
}

/* A KV pool too small for every sample at once: samples are preempted
 * (and recompute) and still give a separate request's tokens. */
Test(parallel_samples, preempted_samples) {
    char *dir = tiny_model();
    int32_t prompt[64];
    qwt_make_prompt(prompt, 40, VOCAB, 11);
    const qwt_engine_cfg cfg = {.num_kv_blocks = 12, .max_model_len = 128, .threads = 2};
    qw_engine *e = qwt_engine_new(dir, &cfg);
    qw_request *r = make(&(opts){.prompt = prompt, .num_prompt = 40, .max_tokens = 60, .seed = 21, .n = 4});
    cr_assert_eq(qw_engine_submit(e, r), QW_OK);
    recs *rs = calloc(1, sizeof *rs);
    run(e, rs);
    qw_engine_stats st;
    cr_assert_eq(qw_engine_get_stats(e, &st, sizeof st), QW_OK);
    cr_assert_gt(st.num_preemptions, 0, "the pool of 12 blocks must force preemption");
    uint64_t child_preemptions = 0;
    for (uint32_t i = 1; i < 4; i++) {
        qw_request *s = NULL;
        qw_request_stats q;
        cr_assert_eq(qw_request_get_sample(r, i, &s), QW_OK);
        cr_assert_eq(qw_request_get_stats(s, &q, sizeof q), QW_OK);
        child_preemptions += q.num_preemptions;
    }
    cr_assert_gt(child_preemptions, 0, "a forked sample was preempted");
    assert_no_leak(e);
    qw_engine_destroy(e);
    qw_request_release(r);
    free(rs);
    /* and each sample is still the separate request with seed + i */
    check_against_separate(dir, &cfg,
                           &(opts){.prompt = prompt, .num_prompt = 40, .max_tokens = 60, .seed = 21, .n = 4});
    free(dir);
}

Test(parallel_samples, n1_unchanged) {
    char *dir = tiny_model();
    int32_t prompt[40];
    qwt_make_prompt(prompt, 25, VOCAB, 12);
    qw_engine *e = qwt_engine_new(dir, NULL);
    qw_request *a = make(&(opts){.prompt = prompt, .num_prompt = 25, .max_tokens = 9, .seed = 8});
    qw_request *b = make(&(opts){.prompt = prompt, .num_prompt = 25, .max_tokens = 9, .seed = 8, .n = 1});
    cr_assert_eq(qw_engine_submit(e, a), QW_OK);
    recs *ra = calloc(1, sizeof *ra), *rb = calloc(1, sizeof *rb);
    run(e, ra);
    qw_engine_stats s1;
    qw_engine_get_stats(e, &s1, sizeof s1);
    cr_assert_eq(qw_engine_submit(e, b), QW_OK);
    run(e, rb);
    cr_assert_eq(ra->n, 1);
    cr_assert_eq(rb->n, 1);
    cr_assert_eq(rb->r[0].sample_index, 0);
    cr_assert_eq(ra->r[0].n, rb->r[0].n);
    cr_assert_arr_eq(ra->r[0].tokens, rb->r[0].tokens, sizeof(int32_t) * (size_t)ra->r[0].n);
    qw_request *s = NULL;
    cr_assert_eq(qw_request_get_sample(b, 0, &s), QW_OK);
    cr_assert_eq(s, b);
    cr_assert_eq(qw_request_get_sample(b, 1, &s), QW_ERR_INVALID_ARGUMENT);
    cr_assert_null(s);
    cr_assert_eq(qw_request_get_sample(a, 1, &s), QW_ERR_INVALID_ARGUMENT);
    free(ra);
    free(rb);
    qw_request_release(a);
    qw_request_release(b);
    assert_no_leak(e);
    qw_engine_destroy(e);
    free(dir);
}

Test(parallel_samples, bad_arguments) {
    char *dir = tiny_model();
    int32_t prompt[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    qw_request *r = NULL;
    cr_assert_eq(qw_request_create(&r), QW_OK);
    const int64_t bad[] = {0, -1, QW_MAX_SAMPLES + 1, INT64_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(qw_request_set_int(r, QW_REQ_N, bad[i]), QW_ERR_INVALID_ARGUMENT);
        cr_assert(strstr(qw_last_error(), "QW_REQ_N"), "message names the option: %s", qw_last_error());
    }
    cr_assert_eq(qw_request_set_double(r, QW_REQ_N, 2.0), QW_ERR_INVALID_ARGUMENT);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_N, QW_MAX_SAMPLES), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_N, 3), QW_OK);
    qw_request *s = NULL;
    cr_assert_eq(qw_request_get_sample(r, 1, &s), QW_ERR_INVALID_STATE, "samples exist only after submit");
    cr_assert(strstr(qw_last_error(), "submit"), "%s", qw_last_error());
    cr_assert_eq(qw_request_get_sample(r, 3, &s), QW_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(qw_last_error(), "out of range"), "%s", qw_last_error());
    cr_assert_eq(qw_request_get_sample(r, 0, NULL), QW_ERR_INVALID_ARGUMENT);
    cr_assert_eq(qw_request_get_sample(NULL, 0, &s), QW_ERR_INVALID_ARGUMENT);
    cr_assert_eq(qw_request_set_prompt(r, prompt, 8), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_MAX_TOKENS, 3), QW_OK);

    /* n > 1 with a session is refused, and the session stays usable */
    qw_engine *e = qwt_engine_new(dir, NULL);
    qw_session *ses = NULL;
    cr_assert_eq(qw_session_create(e, &ses), QW_OK);
    cr_assert_eq(qw_request_set_session(r, ses), QW_OK);
    cr_assert_eq(qw_engine_submit(e, r), QW_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(qw_last_error(), "session") && strstr(qw_last_error(), "QW_REQ_N"), "%s", qw_last_error());
    cr_assert_eq(qw_request_set_session(r, NULL), QW_OK);

    /* the handles of samples: not releasable, not submittable, frozen */
    cr_assert_eq(qw_engine_submit(e, r), QW_OK);
    cr_assert_eq(qw_request_get_sample(r, 2, &s), QW_OK);
    cr_assert_eq(qw_request_release(s), QW_ERR_INVALID_STATE);
    cr_assert(strstr(qw_last_error(), "sample"), "%s", qw_last_error());
    cr_assert_eq(qw_engine_submit(e, s), QW_ERR_INVALID_STATE);
    cr_assert_eq(qw_request_set_int(s, QW_REQ_MAX_TOKENS, 5), QW_ERR_INVALID_STATE);
    recs *rs = calloc(1, sizeof *rs);
    run(e, rs);
    cr_assert_eq(rs->n, 3);
    /* the session works with n = 1 */
    qw_request *q = NULL;
    cr_assert_eq(qw_request_create(&q), QW_OK);
    cr_assert_eq(qw_request_set_prompt(q, prompt, 8), QW_OK);
    cr_assert_eq(qw_request_set_int(q, QW_REQ_MAX_TOKENS, 2), QW_OK);
    cr_assert_eq(qw_request_set_session(q, ses), QW_OK);
    cr_assert_eq(qw_engine_submit(e, q), QW_OK, "%s", qw_last_error());
    run(e, rs);
    qw_request_release(q);
    qw_session_destroy(ses);
    qw_request_release(r);
    assert_no_leak(e);
    qw_engine_destroy(e);
    free(rs);
    free(dir);
}

/* QW_OPT_MAX_WAITING_REQUESTS counts every sample. */
Test(parallel_samples, queue_limit_counts_samples) {
    char *dir = tiny_model();
    qw_engine_options *o = NULL;
    cr_assert_eq(qw_engine_options_create(&o), QW_OK);
    cr_assert_eq(qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, dir), QW_OK);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_MAX_WAITING_REQUESTS, 4), QW_OK);
    qw_engine *e = NULL;
    cr_assert_eq(qw_engine_create(o, &e), QW_OK, "%s", qw_last_error());
    qw_engine_options_destroy(o);
    int32_t prompt[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    opts base = {.prompt = prompt, .num_prompt = 8, .max_tokens = 3, .seed = 1};

    opts o5 = base;
    o5.n = 5;
    qw_request *big = make(&o5);
    cr_assert_eq(qw_engine_submit(e, big), QW_ERR_QUEUE_FULL, "5 samples never fit a limit of 4");
    cr_assert(strstr(qw_last_error(), "QW_REQ_N"), "%s", qw_last_error());
    qw_request *s = NULL;
    cr_assert_eq(qw_request_get_sample(big, 1, &s), QW_ERR_INVALID_STATE, "a refused submit leaves no samples");

    opts o3 = base;
    o3.n = 3;
    qw_request *r3 = make(&o3), *r1 = make(&base), *r2 = make(&base);
    cr_assert_eq(qw_engine_submit(e, r3), QW_OK, "%s", qw_last_error());
    cr_assert_eq(qw_engine_submit(e, r1), QW_OK, "3 + 1 = 4 fit");
    cr_assert_eq(qw_engine_submit(e, r2), QW_ERR_QUEUE_FULL);
    recs *rs = calloc(1, sizeof *rs);
    run(e, rs);
    cr_assert_eq(rs->n, 4);
    cr_assert_eq(qw_engine_submit(e, r2), QW_OK, "%s", qw_last_error());
    run(e, rs);
    qw_request_release(big);
    qw_request_release(r3);
    qw_request_release(r1);
    qw_request_release(r2);
    assert_no_leak(e);
    qw_engine_destroy(e);
    free(rs);
    free(dir);
}

/* A chat prompt: encoded once at submit; every sample stops at <|im_end|>
 * (the stop token the chat adds) and streams the text of a separate chat
 * request with seed + i. */
Test(parallel_samples, chat_prompt_samples) {
    char *dir = tiny_model();
    qw_chat *c = NULL;
    cr_assert_eq(qw_chat_create(&c), QW_OK);
    cr_assert_eq(qw_chat_add_message(c, QW_CHAT_USER, "What is a cache?", 16), QW_OK);
    qw_engine *e = qwt_engine_new(dir, NULL), *e2 = qwt_engine_new(dir, NULL);
    enum { N = 4 };
    for (int64_t seed = 0; seed < 3; seed++) {
        qw_request *r = NULL;
        cr_assert_eq(qw_request_create(&r), QW_OK);
        cr_assert_eq(qw_request_set_chat(r, c, QW_CHAT_ADD_GENERATION_PROMPT), QW_OK);
        cr_assert_eq(qw_request_set_int(r, QW_REQ_MAX_TOKENS, 24), QW_OK);
        cr_assert_eq(qw_request_set_int(r, QW_REQ_IGNORE_EOS, 1), QW_OK);
        cr_assert_eq(qw_request_set_int(r, QW_REQ_SEED, seed), QW_OK);
        cr_assert_eq(qw_request_set_int(r, QW_REQ_N, N), QW_OK);
        cr_assert_eq(qw_engine_submit(e, r), QW_OK, "%s", qw_last_error());
        recs *rs = calloc(1, sizeof *rs);
        run(e, rs);
        cr_assert_eq(rs->n, N);
        for (uint32_t i = 0; i < N; i++) {
            qw_request *s = NULL, *a = NULL;
            cr_assert_eq(qw_request_get_sample(r, i, &s), QW_OK);
            cr_assert_eq(qw_request_create(&a), QW_OK);
            cr_assert_eq(qw_request_set_chat(a, c, QW_CHAT_ADD_GENERATION_PROMPT), QW_OK);
            cr_assert_eq(qw_request_set_int(a, QW_REQ_MAX_TOKENS, 24), QW_OK);
            cr_assert_eq(qw_request_set_int(a, QW_REQ_IGNORE_EOS, 1), QW_OK);
            cr_assert_eq(qw_request_set_int(a, QW_REQ_SEED, seed + i), QW_OK);
            cr_assert_eq(qw_engine_submit(e2, a), QW_OK);
            recs *ra = calloc(1, sizeof *ra);
            run(e2, ra);
            rec *x = rec_for(rs, s);
            cr_assert_eq(x->n, ra->r[0].n, "seed %lld sample %u", (long long)seed, i);
            cr_assert_arr_eq(x->tokens, ra->r[0].tokens, sizeof(int32_t) * (size_t)x->n);
            cr_assert_eq(x->finish, ra->r[0].finish, "sample %u stops as the separate chat request", i);
            static char ta[8192], tb[8192];
            size_t la = 0, lb = 0;
            cr_assert_eq(qw_request_get_text(s, ta, sizeof ta, &la), QW_OK, "%s", qw_last_error());
            cr_assert_eq(qw_request_get_text(a, tb, sizeof tb, &lb), QW_OK, "%s", qw_last_error());
            cr_assert(la == lb && memcmp(ta, tb, la) == 0);
            free(ra);
            qw_request_release(a);
        }
        free(rs);
        qw_request_release(r);
    }
    assert_no_leak(e);
    qw_chat_destroy(c);
    qw_engine_destroy(e);
    qw_engine_destroy(e2);
    free(dir);
}

/* A sample stops at a stop token like a separate request: sample 1 gets a
 * stop token picked from what seed + 1 generates. */
Test(parallel_samples, sample_stops_at_stop_token) {
    char *dir = tiny_model();
    int32_t prompt[40];
    qwt_make_prompt(prompt, 23, VOCAB, 16);
    qw_engine *e = qwt_engine_new(dir, NULL);
    opts o = {.prompt = prompt, .num_prompt = 23, .max_tokens = 16, .seed = 70};
    opts o1 = o;
    o1.seed = 71;
    qw_request *a = make(&o1);
    cr_assert_eq(qw_engine_submit(e, a), QW_OK);
    recs *ra = calloc(1, sizeof *ra);
    run(e, ra);
    const int32_t *t = ra->r[0].tokens;
    int32_t at = -1;
    for (int32_t j = 2; j < ra->r[0].n && at < 0; j++) {
        bool seen = false;
        for (int32_t k = 0; k < j; k++) seen |= t[k] == t[j];
        if (!seen) at = j;
    }
    cr_assert_geq(at, 0, "no token to stop at");
    o.n = 3;
    qw_request *r = make(&o);
    cr_assert_eq(qw_request_set_stop_tokens(r, &t[at], 1), QW_OK);
    cr_assert_eq(qw_engine_submit(e, r), QW_OK);
    recs *rs = calloc(1, sizeof *rs);
    run(e, rs);
    qw_request *s1 = NULL;
    cr_assert_eq(qw_request_get_sample(r, 1, &s1), QW_OK);
    rec *x = rec_for(rs, s1);
    cr_assert_eq(x->finish, QW_FINISH_STOP, "sample 1 stops at token %d (index %d)", t[at], at);
    cr_assert_eq(x->n, at + 1);
    cr_assert_arr_eq(x->tokens, t, sizeof(int32_t) * (size_t)(at + 1));
    int32_t ss = -2, st = -2;
    cr_assert_eq(qw_request_get_stop_match(s1, &ss, &st), QW_OK);
    cr_assert_eq(st, t[at]);
    free(ra);
    free(rs);
    qw_request_release(a);
    qw_request_release(r);
    assert_no_leak(e);
    qw_engine_destroy(e);
    free(dir);
}

static int logits_calls[8];

static void count_logits(void *user, qw_request *req, int32_t position, const float *logits, int32_t vocab) {
    (void)position;
    (void)logits;
    (void)vocab;
    cr_assert_eq(user, &logits_calls, "the callback's user data is copied");
    logits_calls[req->sample_index]++;
}

/* Every option a host can set reaches every sample (white box: the copy
 * is compared field by field), and the logits callback is called for each
 * sample's tokens with that sample's handle. */
Test(parallel_samples, every_option_copied) {
    char *dir = tiny_model();
    int32_t prompt[12];
    qwt_make_prompt(prompt, 12, VOCAB, 17);
    qw_engine *e = qwt_engine_new(dir, NULL);
    qw_request *r = make(&(opts){.prompt = prompt, .num_prompt = 12, .max_tokens = 6, .seed = 3, .n = 3, .rich = 1});
    cr_assert_eq(qw_request_set_double(r, QW_REQ_MIN_P, 0.01), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_PRIORITY, -3), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_MAX_QUEUE_MS, 100000), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_DEADLINE_MS, 200000), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_CACHE_SALT, 77), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_SKIP_SPECIAL_TOKENS, 0), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_INCLUDE_STOP_STR_IN_OUTPUT, 1), QW_OK);
    cr_assert_eq(qw_request_set_logits_callback(r, count_logits, &logits_calls), QW_OK);
    memset(logits_calls, 0, sizeof logits_calls);
    cr_assert_eq(qw_engine_submit(e, r), QW_OK, "%s", qw_last_error());
    for (uint32_t i = 1; i < 3; i++) {
        qw_request *c = NULL;
        cr_assert_eq(qw_request_get_sample(r, i, &c), QW_OK);
        cr_assert_eq(c->num_prompt, r->num_prompt);
        cr_assert_arr_eq(c->prompt, r->prompt, sizeof(int32_t) * (size_t)r->num_prompt);
        cr_assert_eq(c->max_tokens, r->max_tokens);
        cr_assert_eq(c->min_tokens, r->min_tokens);
        cr_assert(c->temperature == r->temperature && c->top_p == r->top_p && c->min_p == r->min_p);
        cr_assert_eq(c->top_k, r->top_k);
        cr_assert(c->has_seed == r->has_seed && c->seed == r->seed);
        cr_assert_eq(c->ignore_eos, r->ignore_eos);
        cr_assert_eq(c->num_stop, r->num_stop);
        cr_assert_arr_eq(c->stop_tokens, r->stop_tokens, sizeof(int32_t) * (size_t)r->num_stop);
        cr_assert_eq(c->priority, -3);
        cr_assert(c->max_queue_ms == r->max_queue_ms && c->deadline_ms == r->deadline_ms);
        cr_assert_eq(c->cache_salt, 77);
        cr_assert_eq(c->seq.salt, 77);
        cr_assert_eq(c->user_data, r->user_data);
        cr_assert(c->logits_fn == r->logits_fn && c->logits_user == r->logits_user);
        cr_assert(c->repetition_penalty == r->repetition_penalty && c->presence_penalty == r->presence_penalty &&
                  c->frequency_penalty == r->frequency_penalty);
        cr_assert_eq(c->num_bias, r->num_bias);
        cr_assert_arr_eq(c->bias_ids, r->bias_ids, sizeof(int32_t) * (size_t)r->num_bias);
        cr_assert_arr_eq(c->bias_values, r->bias_values, sizeof(float) * (size_t)r->num_bias);
        cr_assert(c->lp.n == r->lp.n && c->lp.prompt_n == r->lp.prompt_n);
        cr_assert_eq(c->keep_special, true);
        cr_assert_eq(c->include_stop_str, true);
        cr_assert_not_null(c->stop_list);
        cr_assert_eq(c->stop_list->n, r->stop_list->n);
        for (int32_t k = 0; k < r->stop_list->n; k++)
            cr_assert(c->stop_list->len[k] == r->stop_list->len[k] &&
                      memcmp(c->stop_list->str[k], r->stop_list->str[k], r->stop_list->len[k]) == 0);
        cr_assert_eq(c->num_samples, 0, "a sample is one sequence");
        cr_assert_null(c->session);
    }
    recs *rs = calloc(1, sizeof *rs);
    run(e, rs);
    for (int k = 0; k < rs->n; k++)
        cr_assert_eq(logits_calls[rs->r[k].sample_index], rs->r[k].n, "sample %u: one callback per token",
                     rs->r[k].sample_index);
    free(rs);
    qw_request_release(r);
    assert_no_leak(e);
    qw_engine_destroy(e);
    free(dir);
}

/* Sample 0 timing out before its prompt is computed ends every sample,
 * with the same reason. */
Test(parallel_samples, timeout_before_fork_ends_all) {
    char *dir = tiny_model();
    int32_t prompt[64];
    qwt_make_prompt(prompt, 60, VOCAB, 15);
    qw_engine *e = qwt_engine_new(dir, &(qwt_engine_cfg){.max_batched_tokens = 16});
    qw_request *r = make(&(opts){.prompt = prompt, .num_prompt = 60, .max_tokens = 5, .seed = 2, .n = 3});
    cr_assert_eq(qw_request_set_int(r, QW_REQ_MAX_QUEUE_MS, 1), QW_OK);
    cr_assert_eq(qw_engine_submit(e, r), QW_OK);
    qw_request *s1 = NULL;
    cr_assert_eq(qw_request_get_sample(r, 1, &s1), QW_OK);
    cr_assert_eq(qw_request_get_stats(s1, &(qw_request_stats){0}, sizeof(qw_request_stats)), QW_OK);
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
    recs *rs = calloc(1, sizeof *rs);
    run(e, rs);
    cr_assert_eq(rs->n, 3);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(rs->r[i].finish, QW_FINISH_TIMEOUT, "sample %u ended %d", rs->r[i].sample_index, rs->r[i].finish);
        cr_assert_eq(rs->r[i].finish_events, 1);
        cr_assert_eq(rs->r[i].n, 0);
    }
    free(rs);
    qw_request_release(r);
    assert_no_leak(e);
    qw_engine_destroy(e);
    free(dir);
}

/* Destroying the engine with samples in every state ends them all. */
Test(parallel_samples, destroy_with_samples_in_flight) {
    char *dir = tiny_model();
    int32_t prompt[40];
    qwt_make_prompt(prompt, 33, VOCAB, 13);
    for (int steps = 0; steps < 4; steps++) {
        qw_engine *e = qwt_engine_new(dir, &(qwt_engine_cfg){.max_batched_tokens = 16});
        qw_request *r = make(&(opts){.prompt = prompt, .num_prompt = 33, .max_tokens = 50, .seed = 2, .n = 3});
        cr_assert_eq(qw_engine_submit(e, r), QW_OK);
        qw_event ev[16];
        size_t got;
        for (int s = 0; s < steps; s++) cr_assert_eq(qw_engine_step(e, ev, 16, sizeof ev[0], &got), QW_OK);
        qw_engine_destroy(e);
        for (uint32_t i = 0; i < 3; i++) {
            qw_request *h = NULL;
            cr_assert_eq(qw_request_get_sample(r, i, &h), QW_OK);
            cr_assert_eq(qw_request_get_state(h), QW_STATE_FINISHED, "after %d steps: sample %u", steps, i);
            cr_assert_eq(qw_request_get_finish_reason(h), QW_FINISH_CANCELLED);
        }
        qw_request_release(r);
    }
    free(dir);
}
