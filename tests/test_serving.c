/*
 * test_serving.c - what makes the scheduler a serving scheduler: prefix
 * caching (cached == cold, exact hit counts, forced hash collisions, salts),
 * sessions (multi-turn == one request with the whole history, forks),
 * priorities and their preemption victim, head-of-line blocking under a
 * long prefill, queue timeouts, and the engine statistics.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "util/engine_util.h"
#include "util/testutil.h"

static char *tiny(void) {
    char *dir = qwt_model("srv-tiny-f32", "--shape tiny --dtype f32 --seed 41 --max-pos 8192");
    cr_assert_not_null(dir);
    return dir;
}

static qw_engine_stats stats_of(qw_engine *e) {
    qw_engine_stats st;
    cr_assert_eq(qw_engine_get_stats(e, &st, sizeof st), QW_OK);
    cr_assert_eq(st.size, sizeof st);
    return st;
}

static void assert_same_output(const qwt_result *a, const qwt_result *b, const char *what) {
    cr_assert_eq(a->num_tokens, b->num_tokens, "%s: %d vs %d tokens", what, a->num_tokens, b->num_tokens);
    cr_assert_arr_eq(a->tokens, b->tokens, sizeof(int32_t) * (size_t)a->num_tokens, "%s: tokens differ", what);
    if (a->logits && b->logits) {
        cr_assert_eq(a->num_logits, b->num_logits);
        cr_assert(memcmp(a->logits, b->logits, sizeof(float) * (size_t)a->vocab * (size_t)a->num_logits) == 0,
                  "%s: logits not bit-identical", what);
    }
}

static void assert_all_blocks_free(qw_engine *e) {
    qw_engine_stats st = stats_of(e);
    cr_assert_eq(st.kv_blocks_used, 0, "%llu KV blocks still held", (unsigned long long)st.kv_blocks_used);
    cr_assert_eq(qw_engine_num_free_kv_blocks(e), qw_engine_num_kv_blocks(e));
}

/* ---- prefix cache ------------------------------------------------------- */

#define NSHARE 8
#define SYS_LEN 64     /* 4 blocks of 16 */
#define SUFFIX 10

/* Job 0 alone at step 0; jobs 1..7 at step 2, once job 0's prompt blocks are
 * registered. Every prompt = the same 64-token system prompt + its suffix. */
static void shared_prefix_jobs(qwt_job *jobs, int32_t prompts[][SYS_LEN + SUFFIX], int64_t salt_of_odd) {
    int32_t sys[SYS_LEN];
    qwt_make_prompt(sys, SYS_LEN, 512, 4242);
    for (int i = 0; i < NSHARE; i++) {
        memcpy(prompts[i], sys, sizeof sys);
        qwt_make_prompt(prompts[i] + SYS_LEN, SUFFIX, 512, 900 + (uint64_t)i);
        jobs[i] = (qwt_job){.prompt = prompts[i], .num_prompt = SYS_LEN + SUFFIX, .max_tokens = 5,
                            .temperature = 0, .seed = -1, .ignore_eos = 1, .keep_logits = 1,
                            .submit_at_step = i == 0 ? 0 : 2, .salt = (i % 2) ? salt_of_odd : 0};
    }
}

static void run_shared(const char *model, int caching, int collide, int64_t salt_of_odd, qwt_result *res,
                       qw_engine_stats *st) {
    qw_engine_options *o;
    qw_engine_options_create(&o);
    qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, model);
    qw_engine_options_set_int(o, QW_OPT_ENABLE_PREFIX_CACHING, caching);
    qw_engine *e;
    cr_assert_eq(qw_engine_create(o, &e), QW_OK, "%s", qw_last_error());
    qw_engine_options_destroy(o);
    e->kv.force_collisions = collide != 0;
    static int32_t prompts[NSHARE][SYS_LEN + SUFFIX];
    qwt_job jobs[NSHARE];
    shared_prefix_jobs(jobs, prompts, salt_of_odd);
    qwt_run_jobs(e, jobs, NSHARE, res);
    *st = stats_of(e);
    assert_all_blocks_free(e);
    qw_engine_destroy(e);
}

Test(prefix_cache, cached_equals_cold_with_exact_hits) {
    char *model = tiny();
    qwt_result cold[NSHARE], warm[NSHARE];
    qw_engine_stats sc, sw;
    run_shared(model, 0, 0, 0, cold, &sc);
    run_shared(model, 1, 0, 0, warm, &sw);
    for (int i = 0; i < NSHARE; i++) {
        assert_same_output(&cold[i], &warm[i], "cached vs cold");
        cr_assert_eq(cold[i].cached_prompt_tokens, 0);
        cr_assert_eq(warm[i].cached_prompt_tokens, i == 0 ? 0u : (uint64_t)SYS_LEN, "job %d cached %llu", i,
                     (unsigned long long)warm[i].cached_prompt_tokens);
    }
    /* 7 requests x 4 full blocks of the system prompt */
    cr_assert_eq(sw.prefix_cache_hits, 7 * SYS_LEN);
    cr_assert_eq(sw.prefix_cache_queries, NSHARE * (SYS_LEN + SUFFIX));
    cr_assert_eq(sc.prefix_cache_hits, 0);
    cr_assert_eq(sc.prompt_tokens - sw.prompt_tokens, 7 * SYS_LEN, "cache hits are not prefilled");
    cr_assert_eq(sw.generation_tokens, NSHARE * 5);
    qwt_results_free(cold, NSHARE);
    qwt_results_free(warm, NSHARE);
    free(model);
}

Test(prefix_cache, forced_hash_collisions_share_nothing_wrong) {
    char *model = tiny();
    qwt_result cold[NSHARE], coll[NSHARE];
    qw_engine_stats sc, sw;
    run_shared(model, 0, 0, 0, cold, &sc);
    run_shared(model, 1, 1, 0, coll, &sw);
    for (int i = 0; i < NSHARE; i++) assert_same_output(&cold[i], &coll[i], "collisions vs cold");
    /* Content comparison still finds the true hits, and only those. */
    cr_assert_eq(sw.prefix_cache_hits, 7 * SYS_LEN);

    /* Unrelated prompts of the same length under forced collisions: every
     * key is 0, nothing may match. */
    qw_engine *e = qwt_engine_new(model, NULL);
    e->kv.force_collisions = true;
    int32_t p[4][48];
    qwt_job jobs[4];
    for (int i = 0; i < 4; i++) {
        qwt_make_prompt(p[i], 48, 512, 7000 + (uint64_t)i);
        jobs[i] = (qwt_job){.prompt = p[i], .num_prompt = 48, .max_tokens = 3, .seed = -1, .ignore_eos = 1,
                            .submit_at_step = i * 3};
    }
    qwt_result r[4];
    qwt_run_jobs(e, jobs, 4, r);
    cr_assert_eq(stats_of(e).prefix_cache_hits, 0);
    qw_engine_destroy(e);
    qwt_results_free(cold, NSHARE);
    qwt_results_free(coll, NSHARE);
    free(model);
}

Test(prefix_cache, salts_separate_namespaces) {
    char *model = tiny();
    qwt_result res[NSHARE];
    qw_engine_stats st;
    /* Odd jobs use salt 77, so only salted blocks can serve them. Jobs 1-7
     * are all admitted at step 2 (each prompt completes within the step, so
     * the partial-prefill limit does not apply): the even ones hit job 0's
     * unsalted blocks, the odd ones find no salted donor computed yet. */
    run_shared(model, 1, 0, 77, res, &st);
    const uint64_t want[NSHARE] = {0, 0, SYS_LEN, 0, SYS_LEN, 0, SYS_LEN, 0};
    for (int i = 0; i < NSHARE; i++)
        cr_assert_eq(res[i].cached_prompt_tokens, want[i], "job %d: %llu cached", i,
                     (unsigned long long)res[i].cached_prompt_tokens);
    cr_assert_eq(st.prefix_cache_hits, 3 * SYS_LEN);
    /* and the salted outputs equal the cold run */
    qwt_result cold[NSHARE];
    run_shared(model, 0, 0, 77, cold, &st);
    for (int i = 0; i < NSHARE; i++) assert_same_output(&cold[i], &res[i], "salted vs cold");
    qwt_results_free(cold, NSHARE);
    qwt_results_free(res, NSHARE);
    free(model);
}

/* ---- sessions ---------------------------------------------------------- */

/* One turn on a session; returns the result (caller frees logits). */
static void turn(qw_engine *e, qw_session *s, const int32_t *p, int n, int max, int64_t seed, qwt_result *res) {
    qwt_job j = {.prompt = p, .num_prompt = n, .max_tokens = max, .temperature = seed >= 0 ? 0.8 : 0,
                 .seed = seed, .ignore_eos = 1, .keep_logits = 1, .session = s};
    qwt_run_jobs(e, &j, 1, res);
}

static void session_multiturn(int caching) {
    char *model = tiny();
    qw_engine_options *o;
    qw_engine_options_create(&o);
    qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, model);
    qw_engine_options_set_int(o, QW_OPT_ENABLE_PREFIX_CACHING, caching);
    qw_engine *e;
    cr_assert_eq(qw_engine_create(o, &e), QW_OK);
    qw_engine_options_destroy(o);

    int32_t p1[20], p2[9], p3[5];
    qwt_make_prompt(p1, 20, 512, 1);
    qwt_make_prompt(p2, 9, 512, 2);
    qwt_make_prompt(p3, 5, 512, 3);
    qw_session *s;
    cr_assert_eq(qw_session_create(e, &s), QW_OK);
    qwt_result t1, t2, t3, whole;
    turn(e, s, p1, 20, 6, 5, &t1);
    qw_engine_stats before = stats_of(e);
    turn(e, s, p2, 9, 7, 6, &t2);
    qw_engine_stats after = stats_of(e);
    /* Only the new tokens are prefilled: the 9 new ones and the last token of
     * turn 1, whose KV did not exist yet. */
    cr_assert_eq(after.prompt_tokens - before.prompt_tokens, 9 + 1, "turn 2 prefilled %llu tokens",
                 (unsigned long long)(after.prompt_tokens - before.prompt_tokens));
    cr_assert_eq(t2.prompt_tokens, 20 + 6 + 9);
    cr_assert_eq(t2.cached_prompt_tokens, 20 + 5);
    turn(e, s, p3, 5, 4, -1, &t3);

    /* The same history as one request: turn 2 with the whole history. */
    int32_t hist[64];
    int n = 0;
    memcpy(hist + n, p1, sizeof p1); n += 20;
    memcpy(hist + n, t1.tokens, sizeof(int32_t) * 6); n += 6;
    memcpy(hist + n, p2, sizeof p2); n += 9;
    qwt_job j = {.prompt = hist, .num_prompt = n, .max_tokens = 7, .temperature = 0.8, .seed = 6,
                 .ignore_eos = 1, .keep_logits = 1};
    qwt_run_jobs(e, &j, 1, &whole);
    assert_same_output(&t2, &whole, "session turn 2 vs whole history");
    qwt_results_free(&whole, 1);
    memcpy(hist + n, t2.tokens, sizeof(int32_t) * 7); n += 7;
    memcpy(hist + n, p3, sizeof p3); n += 5;
    j = (qwt_job){.prompt = hist, .num_prompt = n, .max_tokens = 4, .temperature = 0, .seed = -1,
                  .ignore_eos = 1, .keep_logits = 1};
    qwt_run_jobs(e, &j, 1, &whole);
    assert_same_output(&t3, &whole, "session turn 3 vs whole history");

    size_t hn;
    int32_t got[64];
    cr_assert_eq(qw_session_get_tokens(s, got, 64, &hn), QW_OK);
    cr_assert_eq(hn, (size_t)n + 4);
    cr_assert_arr_eq(got, hist, sizeof(int32_t) * (size_t)n);
    cr_assert_eq(qw_session_destroy(s), QW_OK);
    assert_all_blocks_free(e);
    qwt_results_free(&t1, 1);
    qwt_results_free(&t2, 1);
    qwt_results_free(&t3, 1);
    qwt_results_free(&whole, 1);
    qw_engine_destroy(e);
    free(model);
}

Test(sessions, multiturn_equals_whole_history_cache_off) { session_multiturn(0); }
Test(sessions, multiturn_equals_whole_history_cache_on) { session_multiturn(1); }

Test(sessions, fork_then_diverge) {
    char *model = tiny();
    qw_engine *e = qwt_engine_new(model, &(qwt_engine_cfg){0});
    int32_t p1[21], a[7], b[11];
    qwt_make_prompt(p1, 21, 512, 11);
    qwt_make_prompt(a, 7, 512, 12);
    qwt_make_prompt(b, 11, 512, 13);
    qw_session *s, *f;
    cr_assert_eq(qw_session_create(e, &s), QW_OK);
    qwt_result t1, ta, tb, wa, wb;
    turn(e, s, p1, 21, 5, -1, &t1);      /* 26 tokens, 25 computed: 1 full block + 9 */
    cr_assert_eq(qw_session_fork(s, &f), QW_OK, "%s", qw_last_error());
    qw_engine_stats before = stats_of(e);
    turn(e, s, a, 7, 6, 21, &ta);
    turn(e, f, b, 11, 6, 22, &tb);
    qw_engine_stats after = stats_of(e);
    /* both branches prefill only their new tokens: the partial block was copied */
    cr_assert_eq(after.prompt_tokens - before.prompt_tokens, (7 + 1) + (11 + 1));

    int32_t h[64];
    memcpy(h, p1, sizeof p1);
    memcpy(h + 21, t1.tokens, sizeof(int32_t) * 5);
    memcpy(h + 26, a, sizeof a);
    qwt_job j = {.prompt = h, .num_prompt = 33, .max_tokens = 6, .temperature = 0.8, .seed = 21,
                 .ignore_eos = 1, .keep_logits = 1};
    qwt_run_jobs(e, &j, 1, &wa);
    assert_same_output(&ta, &wa, "fork: original branch");
    memcpy(h + 26, b, sizeof b);
    j.num_prompt = 37;
    j.seed = 22;
    qwt_run_jobs(e, &j, 1, &wb);
    assert_same_output(&tb, &wb, "fork: forked branch");
    cr_assert_eq(qw_session_destroy(s), QW_OK);
    cr_assert_eq(qw_session_destroy(f), QW_OK);
    assert_all_blocks_free(e);
    qwt_results_free(&t1, 1);
    qwt_results_free(&ta, 1);
    qwt_results_free(&tb, 1);
    qwt_results_free(&wa, 1);
    qwt_results_free(&wb, 1);
    qw_engine_destroy(e);
    free(model);
}

Test(sessions, busy_session_and_misuse) {
    char *model = tiny();
    qw_engine *e = qwt_engine_new(model, NULL);
    qw_session *s;
    cr_assert_eq(qw_session_create(e, &s), QW_OK);
    int32_t p[4] = {1, 2, 3, 4};
    qw_request *r1, *r2;
    qw_request_create(&r1);
    qw_request_create(&r2);
    qw_request_set_prompt(r1, p, 4);
    qw_request_set_prompt(r2, p, 4);
    qw_request_set_int(r1, QW_REQ_MAX_TOKENS, 3);
    qw_request_set_session(r1, s);
    qw_request_set_session(r2, s);
    cr_assert_eq(qw_engine_submit(e, r1), QW_OK);
    cr_assert_eq(qw_engine_submit(e, r2), QW_ERR_SESSION_BUSY);
    cr_assert(strstr(qw_last_error(), "session") != NULL);
    qw_session *f;
    cr_assert_eq(qw_session_fork(s, &f), QW_ERR_SESSION_BUSY);
    cr_assert_eq(qw_session_destroy(s), QW_ERR_SESSION_BUSY);
    qw_event ev[8];
    size_t n;
    while (qw_engine_has_work(e)) qw_engine_step(e, ev, 8, sizeof ev[0], &n);
    /* idle again: the second request goes through now */
    qw_request_set_int(r2, QW_REQ_MAX_TOKENS, 2);
    cr_assert_eq(qw_engine_submit(e, r2), QW_OK, "%s", qw_last_error());
    while (qw_engine_has_work(e)) qw_engine_step(e, ev, 8, sizeof ev[0], &n);
    size_t hn;
    qw_session_get_tokens(s, NULL, 0, &hn);
    cr_assert_eq(hn, 4 + 3 + 4 + 2);
    /* history + prompt beyond the model length is refused */
    static int32_t longp[8192];
    qw_request *r3;
    qw_request_create(&r3);
    qw_request_set_prompt(r3, longp, 8192 - 10);
    qw_request_set_session(r3, s);
    cr_assert_eq(qw_engine_submit(e, r3), QW_ERR_TOO_LONG);
    cr_assert(strstr(qw_last_error(), "session history") != NULL, "%s", qw_last_error());
    qw_request_release(r1);
    qw_request_release(r2);
    qw_request_release(r3);
    cr_assert_eq(qw_session_destroy(s), QW_OK);
    /* a session the host forgets survives the engine's destruction safely,
     * even with a request of it still queued */
    qw_session *leaked;
    qw_session_create(e, &leaked);
    qw_request *r4;
    qw_request_create(&r4);
    qw_request_set_prompt(r4, p, 4);
    qw_request_set_session(r4, leaked);
    cr_assert_eq(qw_engine_submit(e, r4), QW_OK);
    qw_engine_destroy(e);
    cr_assert_eq(qw_request_get_finish_reason(r4), QW_FINISH_CANCELLED);
    cr_assert_eq(qw_session_destroy(leaked), QW_OK);
    qw_request_release(r4);
    free(model);
}

Test(sessions, idle_session_blocks_reclaimed_under_pressure) {
    char *model = tiny();
    /* 12 blocks: a session keeps 8 after its turn; a 150-token request needs
     * 10, so the idle session must give its blocks back. */
    qw_engine *e = qwt_engine_new(model, &(qwt_engine_cfg){.num_kv_blocks = 12});
    int32_t p1[120], big[150], p2[5];
    qwt_make_prompt(p1, 120, 512, 31);
    qwt_make_prompt(big, 150, 512, 32);
    qwt_make_prompt(p2, 5, 512, 33);
    qw_session *s;
    qw_session_create(e, &s);
    qwt_result t1, tb, t2, whole;
    turn(e, s, p1, 120, 4, -1, &t1);
    cr_assert_geq(stats_of(e).kv_blocks_used, 7, "the idle session keeps its KV");
    qwt_job j = {.prompt = big, .num_prompt = 150, .max_tokens = 4, .seed = -1, .ignore_eos = 1};
    qwt_run_jobs(e, &j, 1, &tb);
    cr_assert_eq(tb.num_tokens, 4);
    /* the next turn recomputes what was lost and still equals the whole history */
    turn(e, s, p2, 5, 4, -1, &t2);
    int32_t h[200];
    memcpy(h, p1, sizeof p1);
    memcpy(h + 120, t1.tokens, 4 * sizeof(int32_t));
    memcpy(h + 124, p2, sizeof p2);
    j = (qwt_job){.prompt = h, .num_prompt = 129, .max_tokens = 4, .seed = -1, .ignore_eos = 1, .keep_logits = 1};
    qwt_run_jobs(e, &j, 1, &whole);
    assert_same_output(&t2, &whole, "session after reclaim");
    qw_session_destroy(s);
    assert_all_blocks_free(e);
    qwt_results_free(&t1, 1);
    qwt_results_free(&t2, 1);
    qwt_results_free(&whole, 1);
    qw_engine_destroy(e);
    free(model);
}

/* ---- scheduling ------------------------------------------------------------ */

Test(scheduling, high_priority_overtakes_and_victim_is_documented) {
    char *model = tiny();
    qw_engine *e = qwt_engine_new(model, &(qwt_engine_cfg){.max_num_seqs = 2});
    int32_t p[5][8];
    qwt_job jobs[5];
    for (int i = 0; i < 5; i++) {
        qwt_make_prompt(p[i], 8, 512, 50 + (uint64_t)i);
        jobs[i] = (qwt_job){.prompt = p[i], .num_prompt = 8, .max_tokens = 30, .seed = -1, .ignore_eos = 1,
                            .priority = 10};
    }
    /* the urgent one arrives last, at step 3, when both slots are busy */
    jobs[4].priority = 0;
    jobs[4].max_tokens = 5;
    jobs[4].submit_at_step = 3;
    qwt_result r[5];
    qwt_run_jobs(e, jobs, 5, r);
    for (int i = 0; i < 4; i++)
        cr_assert_lt(r[4].finish_step, r[i].finish_step, "urgent request finished after job %d", i);
    /* the victim was the worst-ranked running request: lowest priority,
     * latest arrival among those running (job 1); job 0 kept running */
    cr_assert_eq(r[1].num_preemptions, 1, "job 1 preempted %llu times", (unsigned long long)r[1].num_preemptions);
    cr_assert_eq(r[0].num_preemptions, 0);
    cr_assert_eq(r[4].num_preemptions, 0);
    assert_all_blocks_free(e);
    qw_engine_destroy(e);
    free(model);
}

Test(scheduling, short_prompt_not_stuck_behind_long_prefill) {
    char *model = tiny();
    qw_engine *e = qwt_engine_new(model, &(qwt_engine_cfg){.max_batched_tokens = 256});
    static int32_t longp[4096];
    int32_t shortp[16];
    qwt_make_prompt(longp, 4096, 512, 60);
    qwt_make_prompt(shortp, 16, 512, 61);
    qwt_job jobs[2] = {
        {.prompt = longp, .num_prompt = 4096, .max_tokens = 2, .seed = -1, .ignore_eos = 1},
        {.prompt = shortp, .num_prompt = 16, .max_tokens = 2, .seed = -1, .ignore_eos = 1, .submit_at_step = 1},
    };
    qwt_result r[2];
    qwt_run_jobs(e, jobs, 2, r);
    int waited = r[1].first_token_step - jobs[1].submit_at_step + 1;
    cr_assert_leq(waited, 3, "short prompt's first token came %d steps after submission", waited);
    cr_assert_geq(r[0].first_token_step, 15, "the long prompt really was chunked (256 a step)");
    qw_engine_destroy(e);
    free(model);
}

Test(scheduling, queue_timeout_and_deadline) {
    char *model = tiny();
    qw_engine *e = qwt_engine_new(model, &(qwt_engine_cfg){.max_num_seqs = 1});
    int32_t p[4] = {5, 6, 7, 8};
    qw_request *hog, *late, *dl;
    qw_request_create(&hog);
    qw_request_set_prompt(hog, p, 4);
    qw_request_set_int(hog, QW_REQ_MAX_TOKENS, 50);
    qw_request_set_int(hog, QW_REQ_IGNORE_EOS, 1);
    qw_request_create(&late);
    qw_request_set_prompt(late, p, 4);
    qw_request_set_int(late, QW_REQ_MAX_QUEUE_MS, 1);
    qw_request_create(&dl);
    qw_request_set_prompt(dl, p, 4);
    qw_request_set_int(dl, QW_REQ_DEADLINE_MS, 1);
    qw_request_set_int(dl, QW_REQ_IGNORE_EOS, 1);
    cr_assert_eq(qw_engine_submit(e, hog), QW_OK);
    qw_event ev[8];
    size_t n;
    qw_engine_step(e, ev, 8, sizeof ev[0], &n);
    cr_assert_eq(qw_engine_submit(e, late), QW_OK);
    usleep(5000);
    qw_engine_step(e, ev, 8, sizeof ev[0], &n);
    cr_assert_eq(qw_request_get_finish_reason(late), QW_FINISH_TIMEOUT, "a request that waits too long ends");
    while (qw_engine_has_work(e)) qw_engine_step(e, ev, 8, sizeof ev[0], &n);
    cr_assert_eq(qw_request_get_finish_reason(hog), QW_FINISH_LENGTH);
    cr_assert_eq(qw_engine_submit(e, dl), QW_OK);
    qw_engine_step(e, ev, 8, sizeof ev[0], &n);      /* it starts */
    usleep(5000);
    qw_engine_step(e, ev, 8, sizeof ev[0], &n);
    cr_assert_eq(qw_request_get_finish_reason(dl), QW_FINISH_TIMEOUT, "a running request past its deadline ends");
    assert_all_blocks_free(e);
    qw_request_release(hog);
    qw_request_release(late);
    qw_request_release(dl);
    qw_engine_destroy(e);
    free(model);
}

Test(stats, counters_add_up) {
    char *model = tiny();
    qw_engine *e = qwt_engine_new(model, &(qwt_engine_cfg){.num_kv_blocks = 10, .max_batched_tokens = 32});
    int32_t p[6][40];
    qwt_job jobs[6];
    int prompt_total = 0;
    for (int i = 0; i < 6; i++) {
        qwt_make_prompt(p[i], 20 + i * 4, 512, 70 + (uint64_t)i);
        jobs[i] = (qwt_job){.prompt = p[i], .num_prompt = 20 + i * 4, .max_tokens = 8, .seed = -1, .ignore_eos = 1};
        prompt_total += 20 + i * 4;
    }
    qw_engine_stats st0 = stats_of(e);
    cr_assert_eq(st0.num_steps, 0);
    cr_assert_eq(st0.kv_blocks_total, 10);
    qwt_result r[6];
    int steps = qwt_run_jobs(e, jobs, 6, r);
    qw_engine_stats st = stats_of(e);
    cr_assert_eq(st.generation_tokens, 6 * 8);
    cr_assert_eq(st.num_finished, 6);
    cr_assert_eq(st.num_running + st.num_waiting, 0);
    cr_assert_geq(st.prompt_tokens, (uint64_t)prompt_total, "recompute after preemption counts as prefill");
    cr_assert_gt(st.num_preemptions, 0);
    uint64_t pre = 0;
    for (int i = 0; i < 6; i++) pre += r[i].num_preemptions;
    cr_assert_eq(pre, st.num_preemptions, "per-request preemptions sum to the engine's");
    cr_assert_leq(st.num_steps, (uint64_t)steps);
    cr_assert_gt(st.mean_batch_size, 1.0);
    cr_assert_gt(st.forward_seconds, 0);
    cr_assert_gt(st.host_seconds, 0);
    /* a small caller struct gets a prefix; a big one gets zeros past ours */
    uint64_t small[3];
    cr_assert_eq(qw_engine_get_stats(e, (qw_engine_stats *)(void *)small, sizeof small), QW_OK);
    cr_assert_eq(small[0], sizeof small);
    cr_assert_eq(small[2], 0, "num_waiting");
    cr_assert_eq(qw_engine_get_stats(e, NULL, 64), QW_ERR_INVALID_ARGUMENT);
    qw_engine_destroy(e);
    free(model);
}

Test(sessions, text_prompts_on_a_session) {
    char *model = tiny();
    qw_engine *e = qwt_engine_new(model, NULL);
    const qw_tokenizer *tok = qw_engine_get_tokenizer(e);
    cr_assert_not_null(tok, "generated models ship a tokenizer");
    qw_session *s;
    cr_assert_eq(qw_session_create(e, &s), QW_OK);
    const char *turns[2] = {"The quick brown fox", " jumps over the lazy dog"};
    int32_t gen[2][8];
    size_t ngen[2];
    qw_event ev[8];
    size_t n;
    for (int t = 0; t < 2; t++) {
        qw_request *r;
        qw_request_create(&r);
        cr_assert_eq(qw_request_set_prompt_text(r, turns[t], strlen(turns[t])), QW_OK);
        qw_request_set_int(r, QW_REQ_MAX_TOKENS, 5);
        qw_request_set_int(r, QW_REQ_IGNORE_EOS, 1);
        qw_request_set_double(r, QW_REQ_TEMPERATURE, 0);
        qw_request_set_session(r, s);
        cr_assert_eq(qw_engine_submit(e, r), QW_OK, "%s", qw_last_error());
        while (qw_engine_has_work(e)) cr_assert_eq(qw_engine_step(e, ev, 8, sizeof ev[0], &n), QW_OK);
        cr_assert_eq(qw_request_get_tokens(r, gen[t], 8, &ngen[t]), QW_OK);
        cr_assert_eq(ngen[t], 5);
        qw_request_release(r);
    }
    /* the same conversation as ids in one request */
    int32_t hist[128];
    size_t h = 0, k;
    cr_assert_eq(qw_tokenizer_encode(tok, turns[0], strlen(turns[0]), 1, hist, 64, &k), QW_OK);
    h += k;
    memcpy(hist + h, gen[0], 5 * sizeof(int32_t));
    h += 5;
    cr_assert_eq(qw_tokenizer_encode(tok, turns[1], strlen(turns[1]), 1, hist + h, 64, &k), QW_OK);
    h += k;
    qwt_job j = {.prompt = hist, .num_prompt = (int32_t)h, .max_tokens = 5, .temperature = 0, .seed = -1,
                 .ignore_eos = 1};
    qwt_result whole;
    qwt_run_jobs(e, &j, 1, &whole);
    cr_assert_arr_eq(whole.tokens, gen[1], 5 * sizeof(int32_t), "text turns on a session == ids in one request");
    size_t hn;
    qw_session_get_tokens(s, NULL, 0, &hn);
    cr_assert_eq(hn, h + 5);
    qw_session_destroy(s);
    qw_engine_destroy(e);
    free(model);
}
