/*
 * sample_exp.h - the sampler's exponential: e = exp(s) in double for
 * s <= 0, computed the same way, bit for bit, on every CPU, and a vector
 * form that turns a run of logits into the sampler's weights.
 *
 * Why our own: top-p and plain sampling need e_i for every id of the
 * vocabulary (151,936 for Qwen3), and libm's scalar exp() was ~8% of a
 * 32-sequence decode step (another 7% the loop around it). The function
 * here is the textbook one - s = k ln2 + r with |r| <= ln2/2, a degree-13
 * Taylor polynomial for exp(r) in Horner form, scaling by 2^k - written
 * only with operations IEEE 754 rounds exactly once (fma, *, +, -, /,
 * float-to-double), so the portable scalar form and the AVX2+FMA and
 * AVX-512 forms give identical bits: a seed draws the same token on every
 * machine. It is within 1 ulp of exp() (tests/test_sample_exp.c measures
 * the largest error against long double on millions of points), so
 * sample.c's definition - "exp(s_i) in double" - holds to the same ~1e-16
 * that any two libms, or the CUDA sampler, agree to.
 */
#ifndef QWI_SAMPLE_EXP_H
#define QWI_SAMPLE_EXP_H
#include "common.h"

/* exp(s) for s <= 0 (or -0): in (0, 1], subnormal below ~ -708.4, 0 below
 * ~ -745.1 and for -inf; NaN gives 0 (the sampler drops NaN weights). For
 * s > 0 the result is unspecified (the sampler never asks). */
double qwi_sample_exp(double s);

/* The sampler's weights of x[0..n) against the maximum m (sample.c):
 * out[i] = 1 if x[i] == m (also when both are +inf), else
 * qwi_sample_exp(((double)x[i] - m) / temp), with NaN and -inf giving 0.
 * temp > 0; m >= every non-NaN x[i]. Picks the AVX-512 or AVX2+FMA form
 * where CPUID has it, else the scalar one: the same bits whichever runs.
 * Reads x, writes out; no state, no failure. */
void qwi_sample_weights(const float *x, int32_t n, double m, double temp, double *out);

/* The same by a given form (0 scalar, 1 AVX2+FMA, 2 AVX-512), for tests:
 * returns false, writing nothing, where this CPU lacks that form. */
bool qwi_sample_weights_by(int form, const float *x, int32_t n, double m, double temp,
                           double *out);

#endif
