/*
 * test_reference_fast.c - the default fast numerics mode (QW_NUMERICS_FAST:
 * bf16 activations and weights at every linear layer, f32 accumulation)
 * against the independent float64 reference (tests/reference/qwen3_ref.py)
 * on the models test_reference.c holds the exact mode to 1e-4 on.
 *
 * Tolerance FAST_TOL = 2e-2 of max |reference logit|, the GPU backend's.
 * Why that is the right scale: rounding a value to bf16 has a relative
 * error of at most 2^-9 (2e-3); every matmul input and (for f32
 * checkpoints) every weight is rounded, so each product carries up to
 * ~4e-3, and a logit passes through 2-4 linear layers per transformer
 * layer plus lm_head; the errors are independent and mostly cancel in the
 * dot products: measured 4.6e-3..8.3e-3 on the bf16 models and
 * 7e-3..1.5e-2 on the f32 ones (whose weights are rounded too; cr_log_info
 * prints it), so 2e-2 holds with room while a real bug (a wrong pair
 * order, a dropped pad or a lost bias) shows up as O(1) error.
 * Greedy agreement: the engine's greedy token must be the reference's
 * argmax unless the two are within the same tolerance of each other in the
 * reference (then either is a correct answer of a bf16 engine).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/engine_util.h"
#include "util/testutil.h"

#define GEN 4
#define FAST_TOL 2e-2

static double compare_fast(const char *model, int prompt_len, uint64_t seed) {
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)prompt_len);
    qw_engine *e = qwt_engine_new(model, NULL);   /* the default: fast */
    int32_t vocab = qw_engine_vocab_size(e);
    qwt_make_prompt(prompt, prompt_len, vocab, seed);
    qwt_job job = {.prompt = prompt, .num_prompt = prompt_len, .max_tokens = GEN, .temperature = 0,
                   .seed = -1, .ignore_eos = 1, .keep_logits = 1};
    qwt_result res;
    qwt_run_jobs(e, &job, 1, &res);
    qw_engine_destroy(e);
    cr_assert_eq(res.num_logits, GEN);

    int total = prompt_len + GEN - 1;
    size_t cap = (size_t)total * 12 + 16;
    char *ids = malloc(cap);
    size_t off = 0;
    for (int i = 0; i < total; i++) {
        int32_t t = i < prompt_len ? prompt[i] : res.tokens[i - prompt_len];
        off += (size_t)snprintf(ids + off, cap - off, "%s%d", i ? "," : "", t);
    }
    char *tmp = qwt_tmpdir("reffast");
    char out[8300];
    snprintf(out, sizeof out, "%s/logits.f64", tmp);
    int rc = qwt_system("python3 tests/reference/qwen3_ref.py --model '%s' --tokens %s --out '%s'", model, ids, out);
    cr_assert_eq(rc, 0, "reference failed");
    size_t len = 0;
    double *ref = qwt_read_file(out, &len);
    cr_assert_not_null(ref);
    cr_assert_eq(len, sizeof(double) * (size_t)total * (size_t)vocab, "reference output size");

    double max_diff = 0, max_ref = 0;
    for (int g = 0; g < GEN; g++) {
        const double *r = ref + (size_t)(prompt_len - 1 + g) * (size_t)vocab;
        for (int v = 0; v < vocab; v++) max_ref = fmax(max_ref, fabs(r[v]));
    }
    for (int g = 0; g < GEN; g++) {
        const double *r = ref + (size_t)(prompt_len - 1 + g) * (size_t)vocab;
        const float *l = res.logits + (size_t)g * (size_t)vocab;
        for (int v = 0; v < vocab; v++) {
            cr_assert(isfinite(l[v]), "non-finite logit");
            max_diff = fmax(max_diff, fabs((double)l[v] - r[v]));
        }
        int best = 0;
        for (int v = 1; v < vocab; v++) if (r[v] > r[best]) best = v;
        double gap = r[best] - r[res.tokens[g]];
        cr_assert(gap <= FAST_TOL * max_ref, "greedy token %d is not the reference argmax %d (gap %g, max %g)",
                  res.tokens[g], best, gap, max_ref);
    }
    cr_assert_gt(max_ref, 0.1, "reference logits are degenerate");
    free(ref);
    free(ids);
    free(tmp);
    free(prompt);
    qwt_results_free(&res, 1);
    return max_diff / max_ref;
}

static void check_model(const char *name, const char *args) {
    char *model = qwt_model(name, args);
    cr_assert_not_null(model);
    const int lens[] = {1, 17, 113};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        double err = compare_fast(model, lens[i], 7 + i);
        cr_log_info("fast %s prompt %d: max rel error %.3g", name, lens[i], err);
        cr_assert_lt(err, FAST_TOL, "fast mode, %s, prompt of %d: max relative error %.3g >= %.1g",
                     name, lens[i], err, FAST_TOL);
    }
    free(model);
}

/* The same generated models (names and arguments) as test_reference.c, so
 * both files share them. */
Test(reference_fast, tiny_f32, .timeout = 300) {
    check_model("ref-tiny-f32", "--shape tiny --dtype f32 --seed 21");
}

Test(reference_fast, tiny_bf16_untied, .timeout = 300) {
    check_model("ref-tiny-bf16", "--shape tiny --dtype bf16 --untied --seed 22");
}

Test(reference_fast, wide_head128_gqa4, .timeout = 300) {
    check_model("ref-wide-f32",
                "--shape tiny --dtype f32 --seed 23 --hidden 256 --heads 8 --kv-heads 2 --head-dim 128 "
                "--layers 2 --intermediate 384 --vocab 1000");
}

Test(reference_fast, wide_bf16_sharded, .timeout = 300) {
    check_model("ref-wide-bf16",
                "--shape tiny --dtype bf16 --seed 24 --hidden 256 --heads 8 --kv-heads 2 --head-dim 128 "
                "--layers 2 --intermediate 384 --vocab 1000 --shards 3");
}

Test(reference_fast, qwen2_biases, .timeout = 300) {
    check_model("ref-qwen2-f32", "--shape tiny --arch qwen2 --dtype f32 --seed 25");
}
