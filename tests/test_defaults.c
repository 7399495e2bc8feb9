/*
 * test_defaults.c - defaults that serve a real model (issue #10, items 6
 * and 7): the CPU KV pool sized from available memory, the max model length
 * fitted to the pool (capped when it came from config.json, an error when
 * QW_OPT_MAX_MODEL_LEN asked for it), a request's default max tokens that
 * always fits, and request memory that grows with the tokens instead of
 * being reserved for the longest possible output.
 *
 * The 0.6B failure (every request without QW_REQ_MAX_TOKENS refused: 40960
 * tokens against a 292-block pool) is reproduced at the tiny shape: a pool
 * far smaller than the model's 2048 positions.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "kv_budget.h"
#include "qwinfer.h"
#include "util/engine_util.h"
#include "util/testutil.h"

/* The tiny shape: 2 layers x K,V x 2 kv heads x 16 dims x 16 tokens x bf16
 * (the default fast numerics keeps the CPU KV cache in bf16; exact: f32). */
#define TINY_BLOCK_BYTES (2 * 2 * 2 * 16 * 16 * 2)
#define TINY_MAX_POS 2048

static char *tiny(void) {
    char *dir = qwt_model("defaults-tiny-f32", "--shape tiny --dtype f32 --seed 23");
    cr_assert_not_null(dir);
    return dir;
}

static void assert_error(qw_status got, qw_status want, const char *needle) {
    cr_assert_eq(got, want, "got %s, want %s (%s)", qw_status_string(got), qw_status_string(want), qw_last_error());
    cr_assert(strstr(qw_last_error(), needle) != NULL, "message \"%s\" lacks \"%s\"", qw_last_error(), needle);
}

static qw_engine_options *tiny_options(const char *dir) {
    qw_engine_options *o = NULL;
    cr_assert_eq(qw_engine_options_create(&o), QW_OK);
    cr_assert_eq(qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, dir), QW_OK);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_NUM_THREADS, 1), QW_OK);
    return o;
}

static qw_engine *create_ok(qw_engine_options *o) {
    qw_engine *e = NULL;
    qw_status st = qw_engine_create(o, &e);
    cr_assert_eq(st, QW_OK, "qw_engine_create: %s: %s", qw_status_string(st), qw_last_error());
    return e;
}

/* ---- the pool-size decision, at any memory size ---------------------------- */

Test(defaults, pool_size_from_fraction_bytes_or_count) {
    const uint64_t MiB = 1u << 20;
    qwi_kv_budget b = {.memory_fraction = 0.5, .mem_available = 10240 * MiB, .weight_bytes = 2048 * MiB,
                       .per_block = MiB};
    int32_t n = -1;
    /* half of what the weights leave */
    cr_assert_eq(qwi_kv_budget_cpu_blocks(&b, &n), QW_OK, "%s", qwi_last_error());
    cr_expect_eq(n, 4096);
    b.memory_fraction = 0.25;
    cr_assert_eq(qwi_kv_budget_cpu_blocks(&b, &n), QW_OK);
    cr_expect_eq(n, 2048);
    /* never more than max_num_seqs full-length sequences can use */
    b.max_useful_blocks = 1000;
    cr_assert_eq(qwi_kv_budget_cpu_blocks(&b, &n), QW_OK);
    cr_expect_eq(n, 1000);
    /* bytes override the fraction; a count overrides both, uncapped */
    b.kv_cache_bytes = (int64_t)(300 * MiB + 5);
    cr_assert_eq(qwi_kv_budget_cpu_blocks(&b, &n), QW_OK);
    cr_expect_eq(n, 300);
    b.num_blocks = 5000;
    cr_assert_eq(qwi_kv_budget_cpu_blocks(&b, &n), QW_OK);
    cr_expect_eq(n, 5000);
    /* unknown memory: the old fixed 1 GiB */
    qwi_kv_budget u = {.memory_fraction = 0.5, .per_block = MiB};
    cr_assert_eq(qwi_kv_budget_cpu_blocks(&u, &n), QW_OK);
    cr_expect_eq(n, 1024);
}

Test(defaults, pool_that_holds_no_block_names_the_option) {
    const uint64_t MiB = 1u << 20;
    int32_t n = -1;
    /* the weights take all the memory there is */
    qwi_kv_budget b = {.memory_fraction = 0.5, .mem_available = 1024 * MiB, .weight_bytes = 2048 * MiB,
                       .per_block = MiB};
    cr_assert_eq(qwi_kv_budget_cpu_blocks(&b, &n), QW_ERR_KV_CAPACITY);
    cr_expect_eq(n, 0);
    cr_expect(strstr(qwi_last_error(), "QW_OPT_KV_CACHE_MEMORY_FRACTION"), "%s", qwi_last_error());
    b.kv_cache_bytes = 100;
    cr_assert_eq(qwi_kv_budget_cpu_blocks(&b, &n), QW_ERR_KV_CAPACITY);
    cr_expect(strstr(qwi_last_error(), "QW_OPT_KV_CACHE_BYTES"), "%s", qwi_last_error());
}

Test(defaults, max_model_len_is_fitted_to_the_pool) {
    int32_t len = -1;
    cr_assert_eq(qwi_kv_budget_fit_len(100, 16, 1600, true, "QW_OPT_NUM_KV_BLOCKS", &len), QW_OK);
    cr_expect_eq(len, 1600, "exactly full fits");
    cr_assert_eq(qwi_kv_budget_fit_len(100, 16, 40960, false, "QW_OPT_KV_CACHE_MEMORY_FRACTION", &len), QW_OK);
    cr_expect_eq(len, 1600, "a length from config.json is capped");
    cr_assert_eq(qwi_kv_budget_fit_len(100, 16, 1601, true, "QW_OPT_KV_CACHE_BYTES", &len), QW_ERR_KV_CAPACITY);
    cr_expect_eq(len, 0);
    cr_expect(strstr(qwi_last_error(), "QW_OPT_MAX_MODEL_LEN 1601"), "%s", qwi_last_error());
    cr_expect(strstr(qwi_last_error(), "raise QW_OPT_KV_CACHE_BYTES"), "%s", qwi_last_error());
    cr_expect_str_eq(qwi_kv_budget_option(0, 0, false), "QW_OPT_KV_CACHE_MEMORY_FRACTION");
    cr_expect_str_eq(qwi_kv_budget_option(0, 0, true), "QW_OPT_GPU_MEMORY_UTILIZATION");
    cr_expect_str_eq(qwi_kv_budget_option(0, 5, true), "QW_OPT_KV_CACHE_BYTES");
    cr_expect_str_eq(qwi_kv_budget_option(3, 5, false), "QW_OPT_NUM_KV_BLOCKS");
}

/* ---- the engine ------------------------------------------------------------ */

/* Item 6 at the tiny shape: a pool of 64 blocks (1024 tokens) under a model
 * of 2048 positions. Before, every request without max tokens was refused
 * (QW_ERR_KV_CAPACITY: needs 128 KV blocks); now the max model length is
 * capped to the pool and such a request runs to that length. */
Test(defaults, request_without_max_tokens_runs_on_a_small_pool) {
    char *dir = tiny();
    qw_engine_options *o = tiny_options(dir);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_KV_CACHE_BYTES, 64 * TINY_BLOCK_BYTES), QW_OK);
    qw_engine *e = create_ok(o);
    qw_engine_options_destroy(o);
    cr_assert_eq(qw_engine_num_kv_blocks(e), 64);
    cr_assert_eq(qw_engine_max_model_len(e), 64 * 16, "capped to what the pool holds");

    int32_t prompt[20];
    qwt_make_prompt(prompt, 20, 512, 3);
    qwt_job job = {.prompt = prompt, .num_prompt = 20, .temperature = 0, .seed = -1, .ignore_eos = 1};
    qwt_result res;
    qwt_run_jobs(e, &job, 1, &res);
    cr_expect_eq(res.num_tokens, 64 * 16 - 20, "the default max tokens is all the sequence can hold");
    cr_expect_eq(res.finish_reason, QW_FINISH_LENGTH);
    cr_expect_eq(qw_engine_num_free_kv_blocks(e), qw_engine_num_kv_blocks(e));

    /* What can never fit is refused at submit, naming what to change. */
    qw_request *r;
    cr_assert_eq(qw_request_create(&r), QW_OK);
    cr_assert_eq(qw_request_set_prompt(r, prompt, 20), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_MAX_TOKENS, 64 * 16), QW_OK);
    assert_error(qw_engine_submit(e, r), QW_ERR_TOO_LONG, "QW_REQ_MAX_TOKENS");
    cr_expect(strstr(qw_last_error(), "raise QW_OPT_KV_CACHE_BYTES"), "%s", qw_last_error());
    static int32_t longp[64 * 16];
    for (int i = 0; i < 64 * 16; i++) longp[i] = i % 500;
    cr_assert_eq(qw_request_set_prompt(r, longp, 64 * 16), QW_OK);
    assert_error(qw_engine_submit(e, r), QW_ERR_TOO_LONG, "raise QW_OPT_KV_CACHE_BYTES");
    qw_request_release(r);
    qw_engine_destroy(e);
    free(dir);
}

/* The default pool: QW_OPT_KV_CACHE_MEMORY_FRACTION of the RAM available
 * after the weights. The fraction is chosen from this machine's
 * MemAvailable to give ~64 blocks; other processes move MemAvailable a
 * little between our reading and the engine's, hence the range. */
Test(defaults, memory_fraction_sizes_the_pool) {
    char *dir = tiny();
    uint64_t avail = qwi_kv_budget_mem_available();
    cr_assert_gt(avail, (uint64_t)64 << 20, "no MemAvailable on this machine");
    qw_engine_options *o = tiny_options(dir);
    qw_engine *e = create_ok(o);
    /* the weights, as the engine counts them */
    uint64_t weights = qwi_kv_budget_weight_bytes(e->model);
    cr_assert_gt(weights, 0);
    qw_engine_destroy(e);

    double f = 64.0 * TINY_BLOCK_BYTES / (double)(avail - weights);
    cr_assert_eq(qw_engine_options_set_double(o, QW_OPT_KV_CACHE_MEMORY_FRACTION, f), QW_OK);
    e = create_ok(o);
    int32_t n = qw_engine_num_kv_blocks(e);
    cr_expect(n >= 48 && n <= 80, "fraction %g of %llu bytes: %d blocks, expected ~64", f,
              (unsigned long long)(avail - weights), n);
    cr_expect_eq(qw_engine_max_model_len(e), n * 16, "the config's length is capped to the pool");
    qw_engine_destroy(e);

    /* far too small a fraction: a clear failure naming the option */
    cr_assert_eq(qw_engine_options_set_double(o, QW_OPT_KV_CACHE_MEMORY_FRACTION, 1e-12), QW_OK);
    e = (qw_engine *)0x1;
    assert_error(qw_engine_create(o, &e), QW_ERR_KV_CAPACITY, "QW_OPT_KV_CACHE_MEMORY_FRACTION");
    cr_expect_null(e);
    /* an explicit size overrides the fraction */
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_KV_CACHE_BYTES, 40 * TINY_BLOCK_BYTES), QW_OK);
    e = create_ok(o);
    cr_expect_eq(qw_engine_num_kv_blocks(e), 40);
    qw_engine_destroy(e);
    qw_engine_options_destroy(o);
    free(dir);
}

/* A length the user asked for explicitly is never silently cut: a pool that
 * cannot hold one such sequence fails the create, as vLLM does. */
Test(defaults, explicit_max_model_len_beyond_the_pool_fails_create) {
    char *dir = tiny();
    qw_engine_options *o = tiny_options(dir);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_MAX_MODEL_LEN, TINY_MAX_POS), QW_OK);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_NUM_KV_BLOCKS, 64), QW_OK);
    qw_engine *e = (qw_engine *)0x1;
    assert_error(qw_engine_create(o, &e), QW_ERR_KV_CAPACITY, "QW_OPT_MAX_MODEL_LEN 2048");
    cr_expect(strstr(qw_last_error(), "QW_OPT_NUM_KV_BLOCKS"), "%s", qw_last_error());
    cr_expect_null(e);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_NUM_KV_BLOCKS, 0), QW_OK);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_KV_CACHE_BYTES, 64 * TINY_BLOCK_BYTES), QW_OK);
    assert_error(qw_engine_create(o, &e), QW_ERR_KV_CAPACITY, "raise QW_OPT_KV_CACHE_BYTES");
    /* exactly one full-length sequence fits */
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_MAX_MODEL_LEN, 64 * 16), QW_OK);
    e = create_ok(o);
    cr_expect_eq(qw_engine_max_model_len(e), 64 * 16);
    qw_engine_destroy(e);
    qw_engine_options_destroy(o);
    free(dir);
}

Test(defaults, option_ranges) {
    qw_engine_options *o;
    cr_assert_eq(qw_engine_options_create(&o), QW_OK);
    assert_error(qw_engine_options_set_double(o, QW_OPT_KV_CACHE_MEMORY_FRACTION, 0), QW_ERR_INVALID_ARGUMENT,
                 "QW_OPT_KV_CACHE_MEMORY_FRACTION");
    assert_error(qw_engine_options_set_double(o, QW_OPT_KV_CACHE_MEMORY_FRACTION, 1.5), QW_ERR_INVALID_ARGUMENT,
                 "(0, 1]");
    assert_error(qw_engine_options_set_int(o, QW_OPT_KV_CACHE_MEMORY_FRACTION, 1), QW_ERR_INVALID_ARGUMENT, "double");
    cr_assert_eq(qw_engine_options_set_double(o, QW_OPT_KV_CACHE_MEMORY_FRACTION, 1.0), QW_OK);
    assert_error(qw_engine_options_set_double(o, QW_OPT_MAX_WAITING_REQUESTS, 1.0), QW_ERR_INVALID_ARGUMENT,
                 "not a double");
    qw_engine_options_destroy(o);
}

/* ---- item 7: request memory grows with its tokens -------------------------- */

/* A queued 8-token request used to hold room for its whole possible output
 * (2048 tokens here, 40960 at the real shapes) in its token array and
 * block table; now both cover the prompt and the first few tokens. */
Test(defaults, queued_requests_hold_room_for_few_tokens) {
    char *dir = tiny();
    qw_engine_options *o = tiny_options(dir);
    qw_engine *e = create_ok(o);
    qw_engine_options_destroy(o);
    cr_assert_eq(qw_engine_max_model_len(e), TINY_MAX_POS);
    enum { N = 50 };
    qw_request *r[N];
    int32_t prompt[8];
    qwt_make_prompt(prompt, 8, 512, 5);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(qw_request_create(&r[i]), QW_OK);
        cr_assert_eq(qw_request_set_prompt(r[i], prompt, 8), QW_OK);
        cr_assert_eq(qw_request_set_int(r[i], QW_REQ_IGNORE_EOS, 1), QW_OK);
        if (i == 0) cr_assert_eq(qw_request_set_int(r[i], QW_REQ_MAX_TOKENS, 300), QW_OK);
        else if (i > 1) cr_assert_eq(qw_request_set_int(r[i], QW_REQ_MAX_TOKENS, 2), QW_OK);
        qw_request_set_double(r[i], QW_REQ_TEMPERATURE, 0);
        cr_assert_eq(qw_engine_submit(e, r[i]), QW_OK, "%s", qw_last_error());
    }
    /* r[1] has no max tokens: it may run to 2048, and still holds little */
    for (int i = 0; i < N; i++) {
        cr_expect_leq(r[i]->seq.capacity, 8 + 16, "request %d: room for %d tokens", i, r[i]->seq.capacity);
        cr_expect_leq(r[i]->seq.table.capacity, 2, "request %d: block table of %d", i, r[i]->seq.table.capacity);
    }
    cr_expect_eq(r[1]->max_generated, TINY_MAX_POS - 8);
    cr_assert_eq(qw_engine_cancel(e, r[1]), QW_OK);
    /* Run them; the long one grows its arrays 16 -> 300 tokens on the way. */
    qw_event ev[64];
    size_t n;
    while (qw_engine_has_work(e)) cr_assert_eq(qw_engine_step(e, ev, 64, sizeof ev[0], &n), QW_OK, "%s", qw_last_error());
    size_t got = 0;
    cr_assert_eq(qw_request_get_tokens(r[0], NULL, 0, &got), QW_OK);
    cr_expect_eq(got, 300);
    cr_expect_geq(r[0]->seq.capacity, 8 + 300);
    cr_expect_leq(r[0]->seq.capacity, 8 + 300, "never beyond the request's own limit");
    /* Greedy and alone or not, the long request equals a fresh run of it. */
    int32_t a[300], b[300];
    cr_assert_eq(qw_request_get_tokens(r[0], a, 300, &got), QW_OK);
    qwt_job job = {.prompt = prompt, .num_prompt = 8, .max_tokens = 300, .temperature = 0, .seed = -1, .ignore_eos = 1};
    qwt_result res;
    qwt_run_jobs(e, &job, 1, &res);
    cr_assert_eq(res.num_tokens, 300);
    memcpy(b, res.tokens, sizeof b);
    cr_expect_eq(memcmp(a, b, sizeof a), 0);
    for (int i = 0; i < N; i++) qw_request_release(r[i]);
    cr_expect_eq(qw_engine_num_free_kv_blocks(e), qw_engine_num_kv_blocks(e));
    qw_engine_destroy(e);
    free(dir);
}

/* A session's history grows with its request's tokens, so finishing copies
 * them back without allocating, across several turns. */
Test(defaults, session_history_grows_with_the_turns) {
    char *dir = tiny();
    qw_engine_options *o = tiny_options(dir);
    qw_engine *e = create_ok(o);
    qw_engine_options_destroy(o);
    qw_session *s;
    cr_assert_eq(qw_session_create(e, &s), QW_OK);
    int32_t want[1024];
    int32_t nwant = 0;
    for (int turn = 0; turn < 3; turn++) {
        int32_t prompt[5];
        qwt_make_prompt(prompt, 5, 512, 40 + (uint64_t)turn);
        memcpy(want + nwant, prompt, sizeof prompt);
        nwant += 5;
        qwt_job job = {.prompt = prompt, .num_prompt = 5, .max_tokens = 100 + 37 * turn, .temperature = 0,
                       .seed = -1, .ignore_eos = 1, .session = s};
        qwt_result res;
        qwt_run_jobs(e, &job, 1, &res);
        cr_assert_eq(res.num_tokens, 100 + 37 * turn);
        memcpy(want + nwant, res.tokens, sizeof(int32_t) * (size_t)res.num_tokens);
        nwant += res.num_tokens;
        int32_t hist[1024];
        size_t nh = 0;
        cr_assert_eq(qw_session_get_tokens(s, hist, 1024, &nh), QW_OK);
        cr_assert_eq(nh, (size_t)nwant, "turn %d", turn);
        cr_expect_eq(memcmp(hist, want, sizeof(int32_t) * (size_t)nwant), 0, "turn %d", turn);
    }
    cr_assert_eq(qw_session_destroy(s), QW_OK);
    cr_expect_eq(qw_engine_num_free_kv_blocks(e), qw_engine_num_kv_blocks(e));
    qw_engine_destroy(e);
    free(dir);
}

/* Running out of memory while growing a request's arrays mid-step ends that
 * request with QW_FINISH_ERROR (its tokens so far kept), the step reports
 * it, and the engine and its session go on. */
Test(defaults, growth_failure_finishes_the_request_only) {
    char *dir = tiny();
    qw_engine_options *o = tiny_options(dir);
    qw_engine *e = create_ok(o);
    qw_engine_options_destroy(o);
    qw_session *s;
    cr_assert_eq(qw_session_create(e, &s), QW_OK);
    int32_t prompt[6];
    qwt_make_prompt(prompt, 6, 512, 9);
    qw_request *fail, *other;
    cr_assert_eq(qw_request_create(&fail), QW_OK);
    cr_assert_eq(qw_request_create(&other), QW_OK);
    qw_request *both[2] = {fail, other};
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(qw_request_set_prompt(both[i], prompt, 6), QW_OK);
        cr_assert_eq(qw_request_set_int(both[i], QW_REQ_IGNORE_EOS, 1), QW_OK);
        cr_assert_eq(qw_request_set_double(both[i], QW_REQ_TEMPERATURE, 0), QW_OK);
    }
    cr_assert_eq(qw_request_set_int(fail, QW_REQ_MAX_TOKENS, 100), QW_OK);
    cr_assert_eq(qw_request_set_session(fail, s), QW_OK);
    cr_assert_eq(qw_request_set_int(other, QW_REQ_MAX_TOKENS, 10), QW_OK);
    cr_assert_eq(qw_engine_submit(e, fail), QW_OK);
    cr_assert_eq(qw_engine_submit(e, other), QW_OK);
    e->test_fail_growth = true;
    qw_event ev[64];
    size_t n;
    int errors = 0, fail_tokens = 0, other_tokens = 0;
    qw_finish_reason fail_why = QW_FINISH_NONE;
    while (qw_engine_has_work(e)) {
        qw_status st = qw_engine_step(e, ev, 64, sizeof ev[0], &n);
        if (st != QW_OK) {
            errors++;
            cr_expect_eq(st, QW_ERR_OUT_OF_MEMORY);
            char want[64];
            snprintf(want, sizeof want, "request %llu", (unsigned long long)qw_request_get_id(fail));
            cr_expect(strstr(qw_last_error(), want), "%s", qw_last_error());
        }
        for (size_t i = 0; i < n; i++) {
            if (ev[i].request == fail) {
                fail_tokens += ev[i].kind == QW_EVENT_TOKEN;
                if (ev[i].finish_reason) fail_why = (qw_finish_reason)ev[i].finish_reason;
            } else {
                other_tokens += ev[i].kind == QW_EVENT_TOKEN;
            }
        }
    }
    e->test_fail_growth = false;
    cr_expect_eq(errors, 1);
    cr_expect_eq(fail_why, QW_FINISH_ERROR);
    cr_expect_eq(qw_request_get_finish_reason(fail), QW_FINISH_ERROR);
    cr_expect_eq(fail_tokens, 16, "it ran until its first 16 tokens filled the arrays");
    cr_expect_eq(other_tokens, 10, "the other request (no growth needed) is untouched");
    cr_expect_eq(qw_request_get_finish_reason(other), QW_FINISH_LENGTH);
    size_t nh = 0;
    cr_assert_eq(qw_session_get_tokens(s, NULL, 0, &nh), QW_OK);
    cr_expect_eq(nh, 6 + 16, "the session keeps what was generated");
    cr_expect_eq(qw_engine_num_free_kv_blocks(e), qw_engine_num_kv_blocks(e));
    qw_request_release(fail);
    qw_request_release(other);
    /* the session and the engine serve the next turn */
    qwt_job job = {.prompt = prompt, .num_prompt = 6, .max_tokens = 40, .temperature = 0, .seed = -1,
                   .ignore_eos = 1, .session = s};
    qwt_result res;
    qwt_run_jobs(e, &job, 1, &res);
    cr_expect_eq(res.num_tokens, 40);
    cr_expect_eq(res.finish_reason, QW_FINISH_LENGTH);
    cr_assert_eq(qw_session_get_tokens(s, NULL, 0, &nh), QW_OK);
    cr_expect_eq(nh, 6 + 16 + 6 + 40);
    cr_assert_eq(qw_session_destroy(s), QW_OK);
    cr_expect_eq(qw_engine_num_free_kv_blocks(e), qw_engine_num_kv_blocks(e));
    qw_engine_destroy(e);
    free(dir);
}
