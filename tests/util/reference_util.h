/*
 * reference_util.h - the engine's logits against the independent float64
 * reference of the Qwen3 forward pass (tests/reference/qwen3_ref.py), the
 * comparison the reference tests share (test_reference.c: exact numerics;
 * test_reference_fast.c: fast; test_quant_reference.c: quantized models in
 * both).
 */
#ifndef QWT_REFERENCE_UTIL_H
#define QWT_REFERENCE_UTIL_H

#include <stdint.h>

/* Greedy-decode `gen` tokens after a prompt of prompt_len random ids
 * (qwt_make_prompt with seed) on an engine over `model` with QW_OPT_NUMERICS
 * `numerics` (0: the default), then run the reference on prompt + the
 * first gen-1 tokens and return max |engine - reference| / max |reference|
 * over the gen sampled rows. Asserts (Criterion): every logit finite, the
 * reference not degenerate (max |ref| > 0.1), and each greedy token within
 * greedy_rel * max |ref| + greedy_abs of the reference's best logit. */
double qwt_compare_with_reference(const char *model, int numerics, int prompt_len, uint64_t seed,
                                  int gen, double greedy_rel, double greedy_abs);

#endif
