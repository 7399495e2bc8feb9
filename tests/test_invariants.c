/*
 * test_invariants.c - the engine invariants of DESIGN.md, on the CPU
 * backend: batched == alone (bit-identical logits), chunked == unchunked,
 * preempted == not, seeded sampling independent of batch composition, and
 * no KV block leaked once every request has ended.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "util/engine_util.h"
#include "util/testutil.h"

#define NJOBS 16

static char *tiny_model(void) {
    char *dir = qwt_model("inv-tiny-f32", "--shape tiny --dtype f32 --seed 11");
    cr_assert_not_null(dir, "model generation failed");
    return dir;
}

/* 16 greedy jobs with prompt lengths 1..~120, all keeping logits. */
static void make_jobs(qwt_job *jobs, int32_t prompts[NJOBS][160], int n, int32_t vocab) {
    for (int i = 0; i < n; i++) {
        int len = 1 + (i * 37) % 120;
        qwt_make_prompt(prompts[i], len, vocab, 100 + (uint64_t)i);
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].prompt = prompts[i];
        jobs[i].num_prompt = len;
        jobs[i].max_tokens = 6 + i % 5;
        jobs[i].temperature = 0;
        jobs[i].seed = -1;
        jobs[i].ignore_eos = 1;
        jobs[i].keep_logits = 1;
    }
}

static void assert_same(const qwt_result *a, const qwt_result *b, int n, const char *what) {
    for (int i = 0; i < n; i++) {
        cr_assert_eq(a[i].num_tokens, b[i].num_tokens, "%s: job %d token count %d vs %d", what, i,
                     a[i].num_tokens, b[i].num_tokens);
        cr_assert_arr_eq(a[i].tokens, b[i].tokens, sizeof(int32_t) * (size_t)a[i].num_tokens,
                         "%s: job %d tokens differ", what, i);
        cr_assert_eq(a[i].finish_reason, b[i].finish_reason, "%s: job %d finish reason", what, i);
        cr_assert_eq(!a[i].logits, !b[i].logits, "%s: job %d logits kept on one side only", what, i);
        if (a[i].logits) {
            cr_assert_eq(a[i].num_logits, a[i].num_tokens, "%s: one logits row per sampled token", what);
            cr_assert_eq(a[i].num_logits, b[i].num_logits);
            cr_assert(memcmp(a[i].logits, b[i].logits,
                             sizeof(float) * (size_t)a[i].vocab * (size_t)a[i].num_logits) == 0,
                      "%s: job %d logits are not bit-identical", what, i);
        }
    }
}

static void assert_no_leak(qw_engine *e) {
    cr_assert_eq(qw_engine_num_free_kv_blocks(e), qw_engine_num_kv_blocks(e),
                 "%d of %d KV blocks still held after every request ended",
                 qw_engine_num_kv_blocks(e) - qw_engine_num_free_kv_blocks(e), qw_engine_num_kv_blocks(e));
}

/* Reference: each job alone in a fresh engine. */
static void run_alone(const char *dir, const qwt_job *jobs, int n, qwt_result *out) {
    qw_engine *e = qwt_engine_new(dir, NULL);
    for (int i = 0; i < n; i++) qwt_run_jobs(e, &jobs[i], 1, &out[i]);
    assert_no_leak(e);
    qw_engine_destroy(e);
}

Test(invariants, batched_equals_alone) {
    char *dir = tiny_model();
    static int32_t prompts[NJOBS][160];
    qwt_job jobs[NJOBS];
    qwt_result *alone = calloc(NJOBS, sizeof *alone), *batched = calloc(NJOBS, sizeof *batched);
    make_jobs(jobs, prompts, NJOBS, 512);
    run_alone(dir, jobs, NJOBS, alone);

    qw_engine *e = qwt_engine_new(dir, &(qwt_engine_cfg){.threads = 2});
    qwt_run_jobs(e, jobs, NJOBS, batched);
    assert_no_leak(e);
    qw_engine_destroy(e);
    assert_same(alone, batched, NJOBS, "batched vs alone");
    /* The outputs must not be degenerate, or equality proves little. */
    int distinct = 0;
    for (int i = 1; i < NJOBS; i++) distinct += memcmp(alone[i].tokens, alone[0].tokens, 6 * sizeof(int32_t)) != 0;
    cr_assert_gt(distinct, NJOBS / 2, "outputs look degenerate");
    qwt_results_free(alone, NJOBS);
    qwt_results_free(batched, NJOBS);
    free(alone);
    free(batched);
    free(dir);
}

Test(invariants, chunked_equals_unchunked) {
    char *dir = tiny_model();
    static int32_t prompts[NJOBS][160];
    qwt_job jobs[NJOBS];
    make_jobs(jobs, prompts, NJOBS, 512);
    qwt_result *ref = calloc(NJOBS, sizeof *ref), *got = calloc(NJOBS, sizeof *got);
    qw_engine *e = qwt_engine_new(dir, &(qwt_engine_cfg){.max_batched_tokens = 4096, .chunked = -1});
    qwt_run_jobs(e, jobs, NJOBS, ref);
    qw_engine_destroy(e);
    const int64_t budgets[] = {7, 16, 64};
    for (size_t b = 0; b < sizeof budgets / sizeof budgets[0]; b++) {
        e = qwt_engine_new(dir, &(qwt_engine_cfg){.max_batched_tokens = budgets[b]});
        int steps = qwt_run_jobs(e, jobs, NJOBS, got);
        assert_no_leak(e);
        qw_engine_destroy(e);
        char what[64];
        snprintf(what, sizeof what, "budget %lld vs unlimited", (long long)budgets[b]);
        assert_same(ref, got, NJOBS, what);
        /* A 7-token budget really chunks: ~1000 prompt tokens need > 140 steps. */
        if (budgets[b] == 7) cr_assert_gt(steps, 140);
        qwt_results_free(got, NJOBS);
    }
    qwt_results_free(ref, NJOBS);
    free(ref);
    free(got);
    free(dir);
}

Test(invariants, preempted_equals_unconstrained) {
    char *dir = tiny_model();
    static int32_t prompts[NJOBS][160];
    qwt_job jobs[NJOBS];
    make_jobs(jobs, prompts, NJOBS, 512);
    qwt_result *ref = calloc(NJOBS, sizeof *ref), *got = calloc(NJOBS, sizeof *got);
    qw_engine *e = qwt_engine_new(dir, NULL);
    qwt_run_jobs(e, jobs, NJOBS, ref);
    qw_engine_destroy(e);

    /* 12 blocks of 16 tokens = 192 tokens: far below the ~1100 the 16 jobs
     * hold at once, but enough for the longest job alone (~130 tokens). */
    e = qwt_engine_new(dir, &(qwt_engine_cfg){.num_kv_blocks = 12, .max_batched_tokens = 64});
    qwt_run_jobs(e, jobs, NJOBS, got);
    cr_assert_gt(e->sched.total_preemptions, 0, "the pool was meant to force preemption");
    assert_no_leak(e);
    qw_engine_destroy(e);
    assert_same(ref, got, NJOBS, "preempted vs unconstrained");
    qwt_results_free(ref, NJOBS);
    qwt_results_free(got, NJOBS);
    free(ref);
    free(got);
    free(dir);
}

Test(invariants, seeded_sampling_independent_of_batch) {
    char *dir = tiny_model();
    static int32_t prompts[NJOBS][160];
    qwt_job jobs[NJOBS];
    make_jobs(jobs, prompts, NJOBS, 512);
    for (int i = 0; i < NJOBS; i++) {
        jobs[i].temperature = 1.0;
        jobs[i].top_k = i % 2 ? 40 : 0;
        jobs[i].top_p = i % 3 ? 0.9 : 0;
        jobs[i].seed = 1000 + i;
        jobs[i].max_tokens = 12;
        jobs[i].keep_logits = 0;
    }
    qwt_result *alone = calloc(NJOBS, sizeof *alone), *batched = calloc(NJOBS, sizeof *batched),
               *again = calloc(NJOBS, sizeof *again);
    run_alone(dir, jobs, NJOBS, alone);
    qw_engine *e = qwt_engine_new(dir, &(qwt_engine_cfg){.max_batched_tokens = 32});
    qwt_run_jobs(e, jobs, NJOBS, batched);
    qwt_run_jobs(e, jobs, NJOBS, again);
    qw_engine_destroy(e);
    assert_same(alone, batched, NJOBS, "seeded: batched vs alone");
    assert_same(batched, again, NJOBS, "seeded: rerun");
    /* Different seeds give different samples (else the seed is ignored). */
    jobs[0].seed = 999999;
    qwt_result other;
    e = qwt_engine_new(dir, NULL);
    qwt_run_jobs(e, jobs, 1, &other);
    qw_engine_destroy(e);
    cr_assert(memcmp(other.tokens, alone[0].tokens, 12 * sizeof(int32_t)) != 0, "seed has no effect");
    free(alone);
    free(batched);
    free(again);
    free(dir);
}

Test(invariants, thread_count_does_not_change_logits) {
    char *dir = tiny_model();
    static int32_t prompts[NJOBS][160];
    qwt_job jobs[4];
    make_jobs(jobs, prompts, 4, 512);
    qwt_result a[4], b[4];
    qw_engine *e = qwt_engine_new(dir, &(qwt_engine_cfg){.threads = 1});
    qwt_run_jobs(e, jobs, 4, a);
    qw_engine_destroy(e);
    e = qwt_engine_new(dir, &(qwt_engine_cfg){.threads = 3});
    qwt_run_jobs(e, jobs, 4, b);
    qw_engine_destroy(e);
    assert_same(a, b, 4, "1 thread vs 3 threads");
    qwt_results_free(a, 4);
    qwt_results_free(b, 4);
    free(dir);
}
