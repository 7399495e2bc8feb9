/*
 * reference_util.c - see reference_util.h.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/engine_util.h"
#include "util/reference_util.h"
#include "util/testutil.h"

double qwt_compare_with_reference(const char *model, int numerics, int prompt_len, uint64_t seed,
                                  int gen, double greedy_rel, double greedy_abs) {
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)prompt_len);
    cr_assert_not_null(prompt);
    qwt_engine_cfg cfg = { .numerics = numerics };
    qw_engine *e = qwt_engine_new(model, &cfg);
    int32_t vocab = qw_engine_vocab_size(e);
    qwt_make_prompt(prompt, prompt_len, vocab, seed);
    qwt_job job = { .prompt = prompt, .num_prompt = prompt_len, .max_tokens = gen, .temperature = 0,
                    .seed = -1, .ignore_eos = 1, .keep_logits = 1 };
    qwt_result res;
    qwt_run_jobs(e, &job, 1, &res);
    qw_engine_destroy(e);
    cr_assert_eq(res.num_logits, gen);

    /* The reference sees prompt + the first gen-1 generated tokens. */
    int total = prompt_len + gen - 1;
    size_t cap = (size_t)total * 12 + 16;
    char *ids = malloc(cap);
    cr_assert_not_null(ids);
    size_t off = 0;
    for (int i = 0; i < total; i++) {
        int32_t t = i < prompt_len ? prompt[i] : res.tokens[i - prompt_len];
        off += (size_t)snprintf(ids + off, cap - off, "%s%d", i ? "," : "", t);
    }
    char *tmp = qwt_tmpdir("ref");
    char out[8300];
    snprintf(out, sizeof out, "%s/logits.f64", tmp);
    int rc = qwt_system("python3 tests/reference/qwen3_ref.py --model '%s' --tokens %s --out '%s'", model,
                        ids, out);
    cr_assert_eq(rc, 0, "reference failed on %s", model);
    size_t len = 0;
    double *ref = qwt_read_file(out, &len);
    cr_assert_not_null(ref);
    cr_assert_eq(len, sizeof(double) * (size_t)total * (size_t)vocab, "reference output size");

    double max_diff = 0, max_ref = 0;
    for (int g = 0; g < gen; g++) {
        const double *r = ref + (size_t)(prompt_len - 1 + g) * (size_t)vocab;
        for (int v = 0; v < vocab; v++) max_ref = fmax(max_ref, fabs(r[v]));
    }
    cr_assert_gt(max_ref, 0.1, "%s: reference logits are degenerate", model);
    for (int g = 0; g < gen; g++) {
        const double *r = ref + (size_t)(prompt_len - 1 + g) * (size_t)vocab;
        const float *l = res.logits + (size_t)g * (size_t)vocab;
        for (int v = 0; v < vocab; v++) {
            cr_assert(isfinite(l[v]), "%s: non-finite logit", model);
            max_diff = fmax(max_diff, fabs((double)l[v] - r[v]));
        }
        /* Greedy token is the reference's argmax unless within noise. */
        int best = 0;
        for (int v = 1; v < vocab; v++)
            if (r[v] > r[best]) best = v;
        double gap = r[best] - r[res.tokens[g]];
        cr_assert(gap <= greedy_rel * max_ref + greedy_abs,
                  "%s: greedy token %d is not the reference argmax %d (gap %g, max %g)", model,
                  res.tokens[g], best, gap, max_ref);
    }
    free(ref);
    free(ids);
    free(tmp);
    free(prompt);
    qwt_results_free(&res, 1);
    return max_diff / max_ref;
}
