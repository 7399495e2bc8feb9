/*
 * test_quant_reference.c - quantized checkpoints (qw-makemodel --quant:
 * Qwen3-FP8 block fp8, AutoAWQ GEMM, AutoGPTQ 4-bit sym / 8-bit asym /
 * gptq_v2, GPTQModel's quantized lm_head) through the engine, against the independent float64 reference
 * (tests/reference/qwen3_ref.py), which dequantizes the same files from the
 * published format definitions, not from qwinfer's loader.
 *
 * Exact numerics are held to test_reference.c's 1e-4 of max |reference
 * logit|: a dequantized weight (code - zero) * scale is exact in f32 and
 * the kernels add no rounding beyond f32 accumulation, so a quantized model
 * is no less exact than a float one. The default fast mode is held to
 * test_reference_fast.c's 2e-2 and greedy rule (bf16 activations; the
 * codes are exact in bf16, the scale is applied in f32).
 *
 * Small groups (32) give several groups per row; fp8's default 128x128
 * blocks are partial on the tiny shape (k = 64, n = 32), --fp8-block 32
 * gives whole ones. Measured (cr_log_info prints them; docs/quantization.md
 * "Accuracy" has the table): exact 2.6e-7 .. 8.1e-7, fast 3.8e-3 .. 1.4e-2.
 * The int4 checkpoints also run QW_NUMERICS_FAST_INT8 (int8 activations),
 * held to INT8_TOL and its greedy rule.
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
#define EXACT_TOL 1e-4
#define FAST_TOL 2e-2
/* QW_NUMERICS_FAST_INT8 on int4 checkpoints: int8 activations (a step of
 * amax / 127 per group) measured 1.1e-2 .. 3.1e-2 (docs/quantization.md) */
#define INT8_TOL 5e-2

/* Max |engine - reference| / max |reference| over GEN decode rows after a
 * prompt of prompt_len; greedy tokens checked against the reference argmax
 * (exact: within 1e-3 of max |ref|; fast: within FAST_TOL of it). */
static double compare(const char *model, bool exact, int prompt_len, uint64_t seed) {
    return exact ? qwt_compare_with_reference(model, QW_NUMERICS_EXACT, prompt_len, seed, GEN, 1e-3, 1e-6)
                 : qwt_compare_with_reference(model, 0, prompt_len, seed, GEN, FAST_TOL, 0);
}

static void check_as(const char *name, const char *args, bool int4) {
    char *model = qwt_model(name, args);
    cr_assert_not_null(model, "qw-makemodel %s failed", args);
    const int lens[] = {1, 17, 113};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        double err = compare(model, true, lens[i], 7 + i);
        cr_log_info("exact %s prompt %d: max rel error %.3g", name, lens[i], err);
        cr_assert_lt(err, EXACT_TOL, "exact, %s, prompt of %d: max relative error %.3g >= %.1g",
                     name, lens[i], err, EXACT_TOL);
        err = compare(model, false, lens[i], 7 + i);
        cr_log_info("fast %s prompt %d: max rel error %.3g", name, lens[i], err);
        cr_assert_lt(err, FAST_TOL, "fast, %s, prompt of %d: max relative error %.3g >= %.1g",
                     name, lens[i], err, FAST_TOL);
        if (!int4) continue;
        err = qwt_compare_with_reference(model, QW_NUMERICS_FAST_INT8, lens[i], 7 + i, GEN, INT8_TOL, 0);
        cr_log_info("fast-int8 %s prompt %d: max rel error %.3g", name, lens[i], err);
        cr_assert_lt(err, INT8_TOL, "fast-int8, %s, prompt of %d: max relative error %.3g >= %.1g",
                     name, lens[i], err, INT8_TOL);
    }
    free(model);
}

static void check(const char *name, const char *args) { check_as(name, args, false); }

Test(quant_reference, fp8_partial_blocks, .timeout = 300) {
    check("qref-fp8", "--shape tiny --dtype bf16 --seed 41 --quant fp8");
}

Test(quant_reference, fp8_block32_f32_scales, .timeout = 300) {
    check("qref-fp8-b32", "--shape tiny --dtype f32 --untied --seed 42 --quant fp8 --fp8-block 32");
}

Test(quant_reference, awq_group32, .timeout = 300) {
    check_as("qref-awq", "--shape tiny --dtype f16 --seed 43 --quant awq --group-size 32", true);
}

Test(quant_reference, gptq_4bit_sym, .timeout = 300) {
    check_as("qref-gptq4", "--shape tiny --dtype bf16 --seed 44 --quant gptq --group-size 32", true);
}

Test(quant_reference, gptq_8bit_asym, .timeout = 300) {
    check("qref-gptq8a",
          "--shape tiny --dtype bf16 --seed 45 --quant gptq --bits 8 --gptq-asym --group-size 32");
}

/* GPTQModel's lm_head=True: the head quantized too (tiny is tied: its
 * embedding quantized; and an 8-bit untied head). */
Test(quant_reference, gptq_4bit_lm_head, .timeout = 300) {
    check_as("qref-gptq4-head", "--shape tiny --dtype bf16 --seed 47 --quant gptq --group-size 32 "
                                "--gptq-lm-head", true);
}

Test(quant_reference, gptq_8bit_lm_head_untied, .timeout = 300) {
    check("qref-gptq8-head", "--shape tiny --untied --dtype f16 --seed 48 --quant gptq --bits 8 "
                             "--group-size 16 --gptq-asym --gptq-lm-head");
}

/* GPTQModel "dynamic" rules (qw-makemodel --gptq-dynamic): layer 1 at 8
 * bits in groups of 16, layer 0's down_proj unquantized, the rest 4-bit;
 * the reference applies the rules on its own. */
Test(quant_reference, gptq_dynamic_mixed, .timeout = 300) {
    check_as("qref-gptq-dyn", "--shape tiny --dtype bf16 --seed 49 --quant gptq --group-size 32 "
                              "--gptq-dynamic '{\"-:model\\\\.layers\\\\.0\\\\.mlp\\\\.down_proj\": {}, "
                              "\"+:model\\\\.layers\\\\.1\\\\.\": {\"bits\": 8, \"group_size\": 16}}'", true);
}

Test(quant_reference, gptq_v2_asym_qwen2, .timeout = 300) {
    check_as("qref-gptq4v2", "--shape tiny --arch qwen2 --dtype bf16 --seed 46 --quant gptq "
                             "--gptq-format gptq_v2 --gptq-asym --group-size 32", true);
}
