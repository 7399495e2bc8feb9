/*
 * test_reference.c - the engine's logits against the independent float64
 * numpy forward pass of Qwen3 (tests/reference/qwen3_ref.py), which reads
 * the same safetensors. Covers prefill (the last prompt row) and decode
 * through the paged cache (each generated row), on random tiny models, a
 * wider shape (head_dim 128, GQA group 4), BF16 weights and Qwen2 biases.
 *
 * Error measure: max |engine - reference| / max |reference| over every
 * compared row (elementwise relative error is meaningless near zero).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/engine_util.h"
#include "util/testutil.h"

#define GEN 4

static double compare_with_reference(const char *model, int prompt_len, uint64_t seed) {
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)prompt_len);
    /* Exact numerics, held to 1e-4 here; test_reference_fast.c checks the
     * default fast mode against the same reference. */
    qwt_engine_cfg cfg = { .numerics = QW_NUMERICS_EXACT };
    qw_engine *e = qwt_engine_new(model, &cfg);
    int32_t vocab = qw_engine_vocab_size(e);
    qwt_make_prompt(prompt, prompt_len, vocab, seed);
    qwt_job job = {.prompt = prompt, .num_prompt = prompt_len, .max_tokens = GEN, .temperature = 0,
                   .seed = -1, .ignore_eos = 1, .keep_logits = 1};
    qwt_result res;
    qwt_run_jobs(e, &job, 1, &res);
    qw_engine_destroy(e);
    cr_assert_eq(res.num_logits, GEN);

    /* The reference sees prompt + the first GEN-1 generated tokens. */
    int total = prompt_len + GEN - 1;
    size_t cap = (size_t)total * 12 + 16;
    char *ids = malloc(cap);
    size_t off = 0;
    for (int i = 0; i < total; i++) {
        int32_t t = i < prompt_len ? prompt[i] : res.tokens[i - prompt_len];
        off += (size_t)snprintf(ids + off, cap - off, "%s%d", i ? "," : "", t);
    }
    char *tmp = qwt_tmpdir("ref");
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
        const float *l = res.logits + (size_t)g * (size_t)vocab;
        for (int v = 0; v < vocab; v++) {
            cr_assert(isfinite(l[v]), "non-finite logit");
            max_diff = fmax(max_diff, fabs((double)l[v] - r[v]));
            max_ref = fmax(max_ref, fabs(r[v]));
        }
        /* Greedy token is the reference's argmax unless within noise. */
        int best = 0;
        for (int v = 1; v < vocab; v++) if (r[v] > r[best]) best = v;
        double gap = r[best] - r[res.tokens[g]];
        cr_assert(gap <= 1e-3 * max_ref + 1e-6, "greedy token %d is not the reference argmax %d (gap %g)",
                  res.tokens[g], best, gap);
    }
    cr_assert_gt(max_ref, 0.1, "reference logits are degenerate");
    free(ref);
    free(ids);
    free(tmp);
    free(prompt);
    qwt_results_free(&res, 1);
    return max_diff / max_ref;
}

static void check_model(const char *name, const char *args, double tol) {
    char *model = qwt_model(name, args);
    cr_assert_not_null(model);
    const int lens[] = {1, 17, 113};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        double err = compare_with_reference(model, lens[i], 7 + i);
        cr_log_info("%s prompt %d: max rel error %.3g", name, lens[i], err);
        cr_assert_lt(err, tol, "%s, prompt of %d: max relative error %.3g >= %.1g", name, lens[i], err, tol);
    }
    free(model);
}

Test(reference, tiny_f32, .timeout = 300) {
    check_model("ref-tiny-f32", "--shape tiny --dtype f32 --seed 21", 1e-4);
}

Test(reference, tiny_bf16_untied, .timeout = 300) {
    check_model("ref-tiny-bf16", "--shape tiny --dtype bf16 --untied --seed 22", 1e-4);
}

Test(reference, wide_head128_gqa4, .timeout = 300) {
    check_model("ref-wide-f32",
                "--shape tiny --dtype f32 --seed 23 --hidden 256 --heads 8 --kv-heads 2 --head-dim 128 "
                "--layers 2 --intermediate 384 --vocab 1000",
                1e-4);
}

Test(reference, wide_bf16_sharded, .timeout = 300) {
    check_model("ref-wide-bf16",
                "--shape tiny --dtype bf16 --seed 24 --hidden 256 --heads 8 --kv-heads 2 --head-dim 128 "
                "--layers 2 --intermediate 384 --vocab 1000 --shards 3",
                1e-4);
}

Test(reference, qwen2_biases, .timeout = 300) {
    check_model("ref-qwen2-f32", "--shape tiny --arch qwen2 --dtype f32 --seed 25", 1e-4);
}
