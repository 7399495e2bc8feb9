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
#include "util/reference_util.h"
#include "util/testutil.h"

#define GEN 4

/* Exact numerics, held to 1e-4 here; test_reference_fast.c checks the
 * default fast mode against the same reference. */
static double compare_with_reference(const char *model, int prompt_len, uint64_t seed) {
    return qwt_compare_with_reference(model, QW_NUMERICS_EXACT, prompt_len, seed, GEN, 1e-3, 1e-6);
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
