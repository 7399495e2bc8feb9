/*
 * test_numerics_mode.c - the QW_OPT_NUMERICS engine option: its range
 * check, that the default really is the fast (bf16) path and stays close
 * to the exact one, and the invariants of DESIGN.md in the exact mode
 * (test_invariants.c, test_serving.c and test_load.c run in the default,
 * fast, mode).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/engine_util.h"
#include "util/testutil.h"

#define NJOBS 8

static char *tiny_model(void) {
    char *dir = qwt_model("inv-tiny-f32", "--shape tiny --dtype f32 --seed 11");
    cr_assert_not_null(dir, "model generation failed");
    return dir;
}

Test(numerics_mode, option_range_is_checked) {
    qw_engine_options *o = NULL;
    cr_assert_eq(qw_engine_options_create(&o), QW_OK);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_NUMERICS, QW_NUMERICS_FAST), QW_OK);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_NUMERICS, QW_NUMERICS_EXACT), QW_OK);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_NUMERICS, QW_NUMERICS_FAST_INT8), QW_OK);
    const int64_t bad[] = { -1, 3, 1000 };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_NUMERICS, bad[i]), QW_ERR_INVALID_ARGUMENT);
        cr_assert_not_null(strstr(qw_last_error(), "QW_OPT_NUMERICS"), "message: %s", qw_last_error());
    }
    cr_assert_eq(qw_engine_options_set_double(o, QW_OPT_NUMERICS, 1.0), QW_ERR_INVALID_ARGUMENT,
                 "an int option refuses a double");
    qw_engine_options_destroy(o);
}

/* 8 greedy jobs keeping their logits. */
static void make_jobs(qwt_job *jobs, int32_t prompts[NJOBS][128], int32_t vocab) {
    for (int i = 0; i < NJOBS; i++) {
        int len = 1 + (i * 37) % 120;
        qwt_make_prompt(prompts[i], len, vocab, 300 + (uint64_t)i);
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i] = (qwt_job){ .prompt = prompts[i], .num_prompt = len, .max_tokens = 5,
                             .temperature = 0, .seed = -1, .ignore_eos = 1, .keep_logits = 1 };
    }
}

static bool same_logits(const qwt_result *a, const qwt_result *b) {
    return a->num_logits == b->num_logits && a->num_tokens == b->num_tokens &&
           memcmp(a->tokens, b->tokens, sizeof(int32_t) * (size_t)a->num_tokens) == 0 &&
           memcmp(a->logits, b->logits, sizeof(float) * (size_t)a->vocab * (size_t)a->num_logits) == 0;
}

/* The default is the fast path (its logits differ from exact mode's in the
 * last bits), yet within the bf16 tolerance of them while both follow the
 * same tokens (teacher forcing is not needed: the first logits row of each
 * job sees the same prompt in both modes). */
Test(numerics_mode, default_is_fast_and_close_to_exact, .timeout = 120) {
    char *dir = tiny_model();
    static int32_t prompts[NJOBS][128];
    qwt_job jobs[NJOBS];
    make_jobs(jobs, prompts, 512);
    qwt_result *fast = calloc(NJOBS, sizeof *fast), *exact = calloc(NJOBS, sizeof *exact);
    qwt_result *deflt = calloc(NJOBS, sizeof *deflt);
    qw_engine *e = qwt_engine_new(dir, &(qwt_engine_cfg){ .numerics = QW_NUMERICS_EXACT });
    qwt_run_jobs(e, jobs, NJOBS, exact);
    qw_engine_destroy(e);
    e = qwt_engine_new(dir, NULL);
    qwt_run_jobs(e, jobs, NJOBS, deflt);
    qw_engine_destroy(e);
    /* QW_NUMERICS_FAST is 0, the "unset" value of the helper: set it on a
     * real options object to prove the explicit value is the default. */
    qw_engine_options *o = NULL;
    cr_assert_eq(qw_engine_options_create(&o), QW_OK);
    cr_assert_eq(qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, dir), QW_OK);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_NUMERICS, QW_NUMERICS_FAST), QW_OK);
    cr_assert_eq(qw_engine_create(o, &e), QW_OK, "%s", qw_last_error());
    qw_engine_options_destroy(o);
    qwt_run_jobs(e, jobs, NJOBS, fast);
    qw_engine_destroy(e);
    for (int i = 0; i < NJOBS; i++) {
        cr_assert(same_logits(&fast[i], &deflt[i]), "job %d: default differs from explicit fast", i);
        cr_assert_not(same_logits(&fast[i], &exact[i]), "job %d: fast mode gave exact mode's bits", i);
        const int V = fast[i].vocab;
        double mx = 0, diff = 0;
        for (int v = 0; v < V; v++) {
            mx = fmax(mx, fabs(exact[i].logits[v]));
            diff = fmax(diff, fabs((double)fast[i].logits[v] - exact[i].logits[v]));
        }
        cr_assert_lt(diff, 2e-2 * mx, "job %d: first logits row: fast vs exact %g of %g", i, diff, mx);
    }
    qwt_results_free(fast, NJOBS);
    qwt_results_free(exact, NJOBS);
    qwt_results_free(deflt, NJOBS);
    free(fast);
    free(exact);
    free(deflt);
    free(dir);
}

static void assert_same(const qwt_result *a, const qwt_result *b, const char *what) {
    for (int i = 0; i < NJOBS; i++)
        cr_assert(same_logits(&a[i], &b[i]), "%s: job %d logits are not bit-identical", what, i);
}

/* Exact mode keeps batched == alone and chunked == unchunked bit for bit. */
Test(numerics_mode, exact_batched_equals_alone_and_chunked, .timeout = 300) {
    char *dir = tiny_model();
    static int32_t prompts[NJOBS][128];
    qwt_job jobs[NJOBS];
    make_jobs(jobs, prompts, 512);
    qwt_result *alone = calloc(NJOBS, sizeof *alone), *got = calloc(NJOBS, sizeof *got);
    qw_engine *e = qwt_engine_new(dir, &(qwt_engine_cfg){ .numerics = QW_NUMERICS_EXACT });
    for (int i = 0; i < NJOBS; i++) qwt_run_jobs(e, &jobs[i], 1, &alone[i]);
    qw_engine_destroy(e);
    e = qwt_engine_new(dir, &(qwt_engine_cfg){ .numerics = QW_NUMERICS_EXACT, .threads = 2 });
    qwt_run_jobs(e, jobs, NJOBS, got);
    qw_engine_destroy(e);
    assert_same(alone, got, "exact: batched vs alone");
    qwt_results_free(got, NJOBS);
    e = qwt_engine_new(dir, &(qwt_engine_cfg){ .numerics = QW_NUMERICS_EXACT, .max_batched_tokens = 7 });
    qwt_run_jobs(e, jobs, NJOBS, got);
    qw_engine_destroy(e);
    assert_same(alone, got, "exact: chunked by 7 vs alone");
    qwt_results_free(got, NJOBS);
    qwt_results_free(alone, NJOBS);
    free(alone);
    free(got);
    free(dir);
}
