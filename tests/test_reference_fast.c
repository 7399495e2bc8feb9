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
#include "util/reference_util.h"
#include "util/testutil.h"

#define GEN 4
#define FAST_TOL 2e-2

static double compare_fast(const char *model, int prompt_len, uint64_t seed) {
    return qwt_compare_with_reference(model, 0 /* the default: fast */, prompt_len, seed, GEN, FAST_TOL, 0);
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
