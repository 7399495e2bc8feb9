/*
 * sample.h - the reference sampling semantics of qwinfer.
 *
 * Every backend must pick exactly the token qwi_sample() picks for the same
 * logits and parameters. Randomness is counter-based: the uniform number
 * used for a token depends only on (seed, position), never on the batch,
 * the thread, or what was sampled before, so a request's output is
 * independent of what else runs with it.
 */
#ifndef QWI_SAMPLE_H
#define QWI_SAMPLE_H

#include "common.h"

typedef struct qwi_sampling {
    float temperature;        /* <= 0: greedy (argmax, lowest id on ties)   */
    int32_t top_k;            /* <= 0: off                                   */
    float top_p;              /* >= 1: off                                   */
    float min_p;              /* <= 0: off                                   */
    uint64_t seed;
    const int32_t *banned;    /* ids whose logit is treated as -inf (e.g.   */
    int32_t num_banned;       /*   EOS before min_tokens); may be NULL/0     */
    /* Penalties and logit bias (lib/penalties.h): applied to a copy of the
     * logits before everything else here, greedy included. The neutral
     * values below, or a zero-initialised struct, cost nothing. */
    float repetition_penalty; /* <= 0, NaN or 1: off; over prompt + output  */
    float presence_penalty;   /* 0: off; over output                        */
    float frequency_penalty;  /* 0: off; over output                        */
    const int32_t *prompt_tokens;  /* the sequence's tokens before its first */
    int32_t num_prompt_tokens;     /*   generated one (session history too)  */
    const int32_t *output_tokens;  /* the tokens generated so far            */
    int32_t num_output_tokens;
    const int32_t *bias_ids;  /* logit bias: bias[i] is added to the logit  */
    const float *bias;        /*   of bias_ids[i] (distinct ids; ids out of */
    int32_t num_bias;         /*   [0, vocab) are ignored)                  */
} qwi_sampling;

/* Scratch memory for qwi_sample, sized for one vocabulary; reusable across
 * calls (one per thread). Owned by whoever created it. */
typedef struct qwi_sample_scratch qwi_sample_scratch;

/* Allocate scratch for vocabularies up to vocab_size. NULL on OOM (message set). */
qwi_sample_scratch *qwi_sample_scratch_create(int32_t vocab_size);
void qwi_sample_scratch_free(qwi_sample_scratch *s);

/* A uniform double in [0, 1) that is a pure function of (seed, position):
 * integer arithmetic only, so a GPU kernel can reproduce it exactly. */
double qwi_rng_uniform(uint64_t seed, int64_t position);

/* Pick the next token from logits[0..vocab) (not modified). Order of
 * transforms: banned -> logit bias -> repetition -> frequency -> presence
 * penalty (vLLM's order; lib/penalties.h defines them, on a copy in the
 * scratch) -> greedy shortcut -> temperature -> top-k -> softmax ->
 * top-p (smallest set with mass >= top_p, ties broken by lower id) -> min-p
 * (drop p < min_p * p_max) -> renormalise -> inverse CDF at
 * qwi_rng_uniform(seed, position) over candidates ordered by descending
 * probability, lower id first on ties. position is the index of the token
 * being sampled in the whole sequence. Always returns an id in [0, vocab). */
int32_t qwi_sample(const float *logits, int32_t vocab, const qwi_sampling *p,
                   int64_t position, qwi_sample_scratch *scratch);

/* For tests: write the final candidate probabilities (after every transform,
 * renormalised; 0 for excluded ids) into probs[0..vocab). Same semantics as
 * qwi_sample. Returns the number of candidates with nonzero probability. */
int32_t qwi_sample_probs(const float *logits, int32_t vocab, const qwi_sampling *p,
                         float *probs, qwi_sample_scratch *scratch);

#endif
