/*
 * logit_max.h - the largest value of a row of logits, NaN skipped, on the
 * CPU's widest vectors.
 *
 * Why: greedy decoding and every sampler pass start with the row's
 * maximum over the whole vocabulary (151,936 for Qwen3), and the scalar
 * loop is one dependent compare per id (~3 cycles each: ~0.1 ms a row,
 * a quarter of plain sampling's time). A maximum is exact in any order,
 * so the vector forms return the scalar loop's value; only the sign of
 * a zero maximum may differ, which no caller can observe (they compare
 * with == and subtract it).
 */
#ifndef QWI_LOGIT_MAX_H
#define QWI_LOGIT_MAX_H
#include "common.h"

/* max of x[0..n) over the values that are not NaN; -inf when there are
 * none (or n <= 0). Reads x only. */
float qwi_logit_max(const float *x, int32_t n);

/* The same by a given form (0 scalar, 1 AVX2, 2 AVX-512), for tests:
 * false, *out untouched, where this CPU lacks that form. */
bool qwi_logit_max_by(int form, const float *x, int32_t n, float *out);

#endif
