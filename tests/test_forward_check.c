/*
 * test_forward_check.c - lib/forward_check.c: a backend output that was
 * never written or is out of range is QW_ERR_INTERNAL with a message, on a
 * hand-made plan and through a real engine whose backend is made to go
 * wrong after the fact (the request fails, the engine keeps serving, no KV
 * block leaks).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "forward_check.h"
#include "logprobs.h"
#include "util/engine_util.h"
#include "util/testutil.h"

#define V 8
#define W QWI_LP_STRIDE

/* A step of three sequences: 0 samples with 2 top logprobs; 1 is a prefill
 * chunk of 3 rows, rows 1 and 2 (positions 1, 2) marked for prompt
 * logprobs with 1 top; 2 samples without logprobs. Rows: 0 | 1 2 3 | 4. */
typedef struct fixture {
    int32_t qs[4], sampled[3], target[5];
    uint8_t do_sample[3];
    int8_t lp_n[3], plp_n[3];
    qw_logprob lp_out[3 * W], plp_out[5 * W];
    qwi_plan p;
} fixture;

static void fixture_init(fixture *f) {
    memset(f, 0, sizeof *f);
    const int32_t qs[4] = {0, 1, 4, 5};
    memcpy(f->qs, qs, sizeof qs);
    f->do_sample[0] = f->do_sample[2] = 1;
    f->lp_n[0] = 2, f->lp_n[1] = -1, f->lp_n[2] = -1;
    f->plp_n[0] = -1, f->plp_n[1] = 1, f->plp_n[2] = -1;
    for (int r = 0; r < 5; r++) f->target[r] = -1;
    f->target[2] = 5, f->target[3] = 6;
    f->p.num_seqs = 3;
    f->p.num_tokens = 5;
    f->p.query_start = f->qs;
    f->p.do_sample = f->do_sample;
    f->p.sampled = f->sampled;
    f->p.logprobs_n = f->lp_n;
    f->p.logprobs_out = f->lp_out;
    f->p.prompt_logprobs_n = f->plp_n;
    f->p.prompt_target = f->target;
    f->p.prompt_logprobs_out = f->plp_out;
}

/* What a correct backend writes: samples 3 and 7, each row reduced from
 * made-up logits by the reference every backend follows. */
static void backend_writes(fixture *f) {
    float logits[V];
    for (int i = 0; i < V; i++) logits[i] = (float)((i * 5) % V) * 0.25f;
    f->sampled[0] = 3, f->sampled[2] = 7;
    qwi_logprobs_row(logits, V, 3, 2, f->lp_out);
    qwi_logprobs_row(logits, V, 5, 1, f->plp_out + 2 * W);
    qwi_logprobs_row(logits, V, 6, 1, f->plp_out + 3 * W);
}

/* A step as a correct backend leaves it. */
static void fixture_written(fixture *f) {
    fixture_init(f);
    for (int i = 0; i < 3; i++) f->sampled[i] = -1;   /* as qwi_plan_build leaves it */
    qwi_forward_check_arm(&f->p);
    backend_writes(f);
}

static void expect_internal(const fixture *f, const char *needle) {
    cr_assert_eq(qwi_forward_check(&f->p, V, "test"), QW_ERR_INTERNAL);
    cr_assert(strstr(qw_last_error(), needle) != NULL, "message '%s' lacks '%s'", qw_last_error(), needle);
    cr_assert(strstr(qw_last_error(), "backend test") != NULL, "%s", qw_last_error());
}

Test(forward_check, arms_only_what_is_asked) {
    fixture f;
    fixture_init(&f);
    for (int i = 0; i < 3; i++) f.sampled[i] = 99;
    for (int i = 0; i < 3 * W; i++) f.lp_out[i].token = 42;
    for (int i = 0; i < 5 * W; i++) f.plp_out[i].token = 42;
    qwi_forward_check_arm(&f.p);
    for (int i = 0; i < 3; i++) cr_assert_eq(f.sampled[i], 99);   /* qwi_plan_build's, not the arm's */
    cr_assert_eq(f.lp_out[0].token, -1);
    cr_assert_eq(f.lp_out[1].token, 42);      /* top pairs untouched */
    cr_assert_eq(f.lp_out[2 * W].token, 42);  /* seq 2 asked for no logprobs */
    cr_assert_eq(f.plp_out[2 * W].token, -1);
    cr_assert_eq(f.plp_out[3 * W].token, -1);
    cr_assert_eq(f.plp_out[1 * W].token, 42); /* row 1: not marked */
    cr_assert_eq(f.plp_out[4 * W].token, 42);
}

Test(forward_check, written_outputs_pass) {
    fixture f;
    fixture_written(&f);
    cr_assert_eq(qwi_forward_check(&f.p, V, "test"), QW_OK, "%s", qw_last_error());
    /* a NaN row is NaN by qwi_logprobs_row's definition: allowed */
    f.plp_out[2 * W].logprob = NAN;
    f.plp_out[2 * W + 1].logprob = NAN;
    cr_assert_eq(qwi_forward_check(&f.p, V, "test"), QW_OK, "%s", qw_last_error());
    /* a sequence that does not sample may leave its token at -1 */
    cr_assert_eq(f.sampled[1], -1);
}

Test(forward_check, sampled_token_out_of_range) {
    fixture f;
    fixture_written(&f);
    f.sampled[2] = V;
    expect_internal(&f, "sequence 2 of the step sampled token 8, outside [0, 8)");
    f.sampled[2] = -1;   /* never written */
    expect_internal(&f, "sampled token -1");
}

Test(forward_check, skipped_logprob_passes) {
    fixture f;
    fixture_written(&f);
    f.plp_out[3 * W].token = -1;   /* the second prompt row's pass never ran */
    expect_internal(&f, "logprobs of prompt row 3 were not computed");
    fixture_written(&f);
    f.lp_out[0].token = 4;         /* a row reduced for another token */
    expect_internal(&f, "sampled row of sequence 0 were not computed (first pair names token 4, want 3)");
}

Test(forward_check, top_pairs_and_values) {
    fixture f;
    fixture_written(&f);
    f.lp_out[2].token = V;         /* second top pair */
    expect_internal(&f, "top logprob 2 of the sampled row of sequence 0 names token 8");
    backend_writes(&f);
    f.plp_out[2 * W + 1].logprob = 0.5f;
    expect_internal(&f, "logprob 0.5 of prompt row 2 (pair 1) is above 0");
    backend_writes(&f);
    f.lp_out[3].token = -7;        /* past the 2 asked for: not read */
    cr_assert_eq(qwi_forward_check(&f.p, V, "test"), QW_OK, "%s", qw_last_error());
}

/* ---- through an engine --------------------------------------------------- */

typedef enum { GOOD, BAD_TOKEN, SKIP_PROMPT_LOGPROBS } mode;
static mode corrupt = GOOD;
static const qwi_backend_ops *real_ops;
static qwi_backend_ops wrapped_ops;

/* The real forward, then the fault the test asks for. */
static qw_status faulty_forward(qwi_backend *b, const qwi_plan *p) {
    qw_status st = real_ops->forward(b, p);
    if (st != QW_OK) return st;
    if (corrupt == BAD_TOKEN)
        for (int32_t i = 0; i < p->num_seqs; i++)
            if (p->do_sample[i]) p->sampled[i] = 1 << 30;
    if (corrupt == SKIP_PROMPT_LOGPROBS && p->prompt_target)
        for (int32_t r = 0; r < p->num_tokens; r++)
            if (p->prompt_target[r] >= 0) p->prompt_logprobs_out[(size_t)r * W].token = -1;
    return QW_OK;
}

/* Submits one greedy 6-token request on e and steps until it ends; returns
 * the first failing step status (QW_OK if none) and its finish reason and
 * tokens. */
static qw_status run_one(qw_engine *e, const int32_t *prompt, int n, int prompt_lp, int *finish, int32_t *toks,
                         int *ntok) {
    qw_request *r = NULL;
    cr_assert_eq(qw_request_create(&r), QW_OK);
    cr_assert_eq(qw_request_set_prompt(r, prompt, (size_t)n), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_MAX_TOKENS, 6), QW_OK);
    cr_assert_eq(qw_request_set_double(r, QW_REQ_TEMPERATURE, 0.0), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_IGNORE_EOS, 1), QW_OK);
    if (prompt_lp) cr_assert_eq(qw_request_set_int(r, QW_REQ_PROMPT_LOGPROBS, 2), QW_OK);
    cr_assert_eq(qw_engine_submit(e, r), QW_OK);
    qw_status first = QW_OK;
    *finish = -1;
    *ntok = 0;
    qw_event ev[8];
    for (int guard = 0; qw_engine_has_work(e) && guard < 100; guard++) {
        size_t nev = 0;
        qw_status st = qw_engine_step(e, ev, 8, sizeof ev[0], &nev);
        if (st != QW_OK && first == QW_OK) {
            first = st;
            cr_assert(strstr(qw_last_error(), "backend cpu") != NULL, "message: %s", qw_last_error());
        }
        for (size_t k = 0; k < nev; k++) {
            if (ev[k].kind == QW_EVENT_TOKEN && *ntok < 16) toks[(*ntok)++] = ev[k].token;
            if (ev[k].finish_reason != QW_FINISH_NONE) *finish = (int)ev[k].finish_reason;
        }
    }
    qw_request_release(r);
    return first;
}

Test(forward_check, engine_fails_the_request_and_keeps_serving) {
    char *dir = qwt_model("fc-tiny-f32", "--shape tiny --dtype f32 --seed 5");
    cr_assert_not_null(dir);
    qwt_engine_cfg cfg = {.max_num_seqs = 4, .threads = 1};
    qw_engine *e = qwt_engine_new(dir, &cfg);
    real_ops = e->backend->ops;
    wrapped_ops = *real_ops;
    wrapped_ops.forward = faulty_forward;
    e->backend->ops = &wrapped_ops;

    int32_t prompt[24];
    qwt_make_prompt(prompt, 24, qw_engine_vocab_size(e), 3);
    int fin, n_good, n;
    int32_t good[16], got[16];
    corrupt = GOOD;
    cr_assert_eq(run_one(e, prompt, 24, 1, &fin, good, &n_good), QW_OK, "%s", qw_last_error());
    cr_assert_eq(fin, QW_FINISH_LENGTH);
    cr_assert_eq(n_good, 6);

    const mode faults[2] = {BAD_TOKEN, SKIP_PROMPT_LOGPROBS};
    for (int f = 0; f < 2; f++) {
        corrupt = faults[f];
        cr_assert_eq(run_one(e, prompt, 24, 1, &fin, got, &n), QW_ERR_INTERNAL, "fault %d", f);
        cr_assert_eq(fin, QW_FINISH_ERROR, "fault %d", f);
        cr_assert_eq(n, 0, "fault %d: a token reached the request", f);
        /* the engine serves the next request as before, and holds no block */
        corrupt = GOOD;
        cr_assert_eq(run_one(e, prompt, 24, 1, &fin, got, &n), QW_OK, "%s", qw_last_error());
        cr_assert_eq(fin, QW_FINISH_LENGTH);
        cr_assert_eq(n, n_good);
        cr_assert_arr_eq(got, good, sizeof(int32_t) * (size_t)n);
        qw_engine_stats es = {0};
        cr_assert_eq(qw_engine_get_stats(e, &es, sizeof es), QW_OK);
        cr_assert_eq(es.kv_blocks_used, 0, "fault %d: %llu blocks still used", f,
                     (unsigned long long)es.kv_blocks_used);
    }
    e->backend->ops = real_ops;
    qw_engine_destroy(e);
    free(dir);
}
