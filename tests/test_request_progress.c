/*
 * test_request_progress.c - qw_request_stats.computed_tokens, a request's
 * prefill progress: it advances by each chunk of a chunked prompt, counts a
 * prefix-cache hit, stays 0 while the request waits, drops when the request
 * is preempted and rises again as it is recomputed, and follows the
 * generated tokens (each is computed in the step after the one that sampled
 * it). qw-bench attributes prefill FLOPs to steps from it.
 */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "util/engine_util.h"
#include "util/testutil.h"

static char *tiny(void) {
    char *dir = qwt_model("progress-tiny-f32", "--shape tiny --dtype f32 --seed 43 --max-pos 4096");
    cr_assert_not_null(dir);
    return dir;
}

static qw_request *request(const int32_t *prompt, int n, int max_tokens) {
    qw_request *r = NULL;
    cr_assert_eq(qw_request_create(&r), QW_OK);
    cr_assert_eq(qw_request_set_prompt(r, prompt, (size_t)n), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_MAX_TOKENS, max_tokens), QW_OK);
    cr_assert_eq(qw_request_set_double(r, QW_REQ_TEMPERATURE, 0.0), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_IGNORE_EOS, 1), QW_OK);
    return r;
}

static qw_request_stats stats(const qw_request *r) {
    qw_request_stats st;
    cr_assert_eq(qw_request_get_stats(r, &st, sizeof st), QW_OK);
    cr_assert_eq(st.size, sizeof st);
    return st;
}

/* One step; returns the number of events. */
static size_t step(qw_engine *e) {
    qw_event ev[64];
    size_t n = 0;
    cr_assert_eq(qw_engine_step(e, ev, 64, sizeof ev[0], &n), QW_OK, "%s", qw_last_error());
    return n;
}

Test(request_progress, follows_the_chunks_then_the_generated_tokens) {
    char *model = tiny();
    qwt_engine_cfg cfg = { .max_batched_tokens = 32 };
    qw_engine *e = qwt_engine_new(model, &cfg);
    int32_t p[100];
    qwt_make_prompt(p, 100, 512, 11);
    qw_request *r = request(p, 100, 4);
    cr_assert_eq(stats(r).computed_tokens, 0, "before submit");
    cr_assert_eq(qw_engine_submit(e, r), QW_OK);
    cr_assert_eq(stats(r).computed_tokens, 0, "submitted, not yet scheduled");
    /* chunks of 32: 32, 64, 96, then the last 4 with the first token */
    for (uint64_t want = 32; want < 100; want += 32) {
        step(e);
        qw_request_stats st = stats(r);
        cr_assert_eq(st.computed_tokens, want);
        cr_assert_eq(st.generated_tokens, 0);
    }
    step(e);
    cr_assert_eq(stats(r).computed_tokens, 100);
    cr_assert_eq(stats(r).generated_tokens, 1);
    /* the sampled token is computed in the next step */
    for (uint64_t g = 2; g <= 4; g++) {
        step(e);
        qw_request_stats st = stats(r);
        cr_assert_eq(st.generated_tokens, g);
        cr_assert_eq(st.computed_tokens, 100 + g - 1);
    }
    cr_assert_eq(qw_request_get_state(r), QW_STATE_FINISHED);
    cr_assert_not(qw_engine_has_work(e));
    cr_assert_eq(stats(r).computed_tokens, 103, "stays at its last value after the finish");
    qw_request_release(r);
    qw_engine_destroy(e);
    free(model);
}

Test(request_progress, counts_the_cached_prefix_and_zero_while_waiting) {
    char *model = tiny();
    qwt_engine_cfg cfg = { .max_num_seqs = 1, .block_size = 16 };
    qw_engine *e = qwt_engine_new(model, &cfg);
    int32_t p[70];
    qwt_make_prompt(p, 70, 512, 12);
    qw_request *a = request(p, 70, 2), *b = request(p, 70, 2);
    cr_assert_eq(qw_engine_submit(e, a), QW_OK);
    cr_assert_eq(qw_engine_submit(e, b), QW_OK);
    step(e);   /* a's prompt in one step; b waits (one sequence at a time) */
    cr_assert_eq(stats(a).computed_tokens, 70);
    cr_assert_eq(stats(b).computed_tokens, 0, "waiting");
    while (qw_request_get_state(a) != QW_STATE_FINISHED) step(e);
    cr_assert_eq(stats(b).computed_tokens, 0, "still waiting");
    while (stats(b).generated_tokens == 0) step(e);
    qw_request_stats st = stats(b);
    /* b's first 64 positions (4 full blocks) came from a's cache */
    cr_assert_eq(st.cached_prompt_tokens, 64);
    cr_assert_eq(st.computed_tokens, 70);
    while (qw_engine_has_work(e)) step(e);
    qw_request_release(a);
    qw_request_release(b);
    qw_engine_destroy(e);
    free(model);
}

Test(request_progress, drops_on_preemption_and_rises_on_recompute) {
    char *model = tiny();
    /* 6 blocks of 16: two requests of 40 + 40 tokens cannot both finish */
    qwt_engine_cfg cfg = { .block_size = 16, .num_kv_blocks = 6 };
    qw_engine *e = qwt_engine_new(model, &cfg);
    int32_t p[2][40];
    qw_request *r[2];
    for (int i = 0; i < 2; i++) {
        qwt_make_prompt(p[i], 40, 512, 20 + (uint64_t)i);
        r[i] = request(p[i], 40, 40);
        cr_assert_eq(qw_engine_submit(e, r[i]), QW_OK);
    }
    uint64_t last[2] = { 0, 0 }, preempt[2] = { 0, 0 };
    int drops = 0, rises_after_drop = 0;
    while (qw_engine_has_work(e)) {
        step(e);
        for (int i = 0; i < 2; i++) {
            qw_request_stats st = stats(r[i]);
            if (st.num_preemptions > preempt[i]) {
                cr_assert_lt(st.computed_tokens, last[i], "request %d preempted, computed %llu -> %llu", i,
                             (unsigned long long)last[i], (unsigned long long)st.computed_tokens);
                drops++;
            } else if (preempt[i] > 0 && st.computed_tokens > last[i]) {
                rises_after_drop++;
            }
            if (qw_request_get_state(r[i]) != QW_STATE_FINISHED)
                cr_assert_leq(st.computed_tokens, 40 + st.generated_tokens);
            preempt[i] = st.num_preemptions;
            last[i] = st.computed_tokens;
        }
    }
    cr_assert_gt(drops, 0, "the pool was sized to force a preemption");
    cr_assert_gt(rises_after_drop, 0);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(stats(r[i]).generated_tokens, 40);
        cr_assert_eq(stats(r[i]).computed_tokens, 79);
        qw_request_release(r[i]);
    }
    qw_engine_destroy(e);
    free(model);
}
