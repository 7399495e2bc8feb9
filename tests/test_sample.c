/*
 * test_sample.c - the reference sampler: RNG, transforms, exactness of the
 * fast paths against a full-sort implementation of the definition, and the
 * empirical distribution of qwi_sample against qwi_sample_probs.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sample.h"
#include "sample_exp.h"
#include "util/testutil.h"

/* not in sample.h: exported from sample.c for this known-answer test */
void qwi_philox4x32_10(uint32_t ctr[4], const uint32_t key[2]);

#define NEG_INF (-INFINITY)

static qwi_sampling params(float temp, int32_t top_k, float top_p, float min_p) {
    qwi_sampling p = {0};
    p.temperature = temp;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = 1234;
    return p;
}

/* deterministic test data: splitmix64, independent of the code under test */
static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double unif(uint64_t *s) { return (double)(mix(s) >> 11) * 0x1.0p-53; }

static double gauss(uint64_t *s) {
    double u = unif(s) + 1e-300, v = unif(s);
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

/* Candidate set of probs as a bitmask over ids < 64. */
static uint64_t support(const float *probs, int32_t n) {
    uint64_t m = 0;
    for (int32_t i = 0; i < n; i++)
        if (probs[i] > 0) m |= 1ull << i;
    return m;
}

/* ---- RNG ------------------------------------------------------------------ */

Test(sample_rng, philox_known_answers) {
    /* Random123 kat_vectors: ctr[4] key[2] -> out[4] */
    static const uint32_t v[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff,
         0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0,
         0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int t = 0; t < 3; t++) {
        uint32_t ctr[4] = {v[t][0], v[t][1], v[t][2], v[t][3]};
        uint32_t key[2] = {v[t][4], v[t][5]};
        qwi_philox4x32_10(ctr, key);
        for (int i = 0; i < 4; i++)
            cr_assert_eq(ctr[i], v[t][6 + i], "vector %d word %d: %08x", t, i, ctr[i]);
    }
}

Test(sample_rng, deterministic_and_in_range) {
    for (int64_t pos = -5; pos < 20000; pos++) {
        double a = qwi_rng_uniform(99, pos), b = qwi_rng_uniform(99, pos);
        cr_assert_eq(a, b);
        cr_assert(a >= 0.0 && a < 1.0, "pos %lld: %g", (long long)pos, a);
        /* a multiple of 2^-53: the documented 53-bit construction */
        cr_assert_eq(a * 0x1.0p53, floor(a * 0x1.0p53));
    }
    cr_assert_neq(qwi_rng_uniform(1, 7), qwi_rng_uniform(2, 7));
    cr_assert_neq(qwi_rng_uniform(1, 7), qwi_rng_uniform(1, 8));
    /* the high halves of seed and position matter too */
    cr_assert_neq(qwi_rng_uniform(1, 7), qwi_rng_uniform(1 | (1ull << 40), 7));
    cr_assert_neq(qwi_rng_uniform(1, 7), qwi_rng_uniform(1, 7 + (1ll << 40)));
}

/* Mean, variance, 100-bucket chi-square and lag-1 correlation of n draws
 * along positions (seed fixed) or along seeds (position fixed). The bounds
 * are ~5 standard deviations: a good generator fails with p < 1e-5, a
 * counter or a generator with a stuck bit fails by far. */
static void check_uniform(int along_seed) {
    const int n = 100000, nb = 100;
    int hist[100] = {0};
    double sum = 0, sum2 = 0, lag = 0, prev = 0;
    for (int i = 0; i < n; i++) {
        double u = along_seed ? qwi_rng_uniform((uint64_t)i, 42) : qwi_rng_uniform(7, i);
        sum += u;
        sum2 += u * u;
        if (i) lag += (u - 0.5) * (prev - 0.5);
        prev = u;
        hist[(int)(u * nb)]++;
    }
    double mean = sum / n, var = sum2 / n - mean * mean;
    cr_assert(fabs(mean - 0.5) < 0.0046, "mean %f", mean);
    cr_assert(fabs(var - 1.0 / 12) < 0.0012, "variance %f", var);
    double chi = 0, expct = (double)n / nb;
    for (int b = 0; b < nb; b++) chi += (hist[b] - expct) * (hist[b] - expct) / expct;
    /* df 99: mean 99, sd 14 */
    cr_assert(chi < 170, "chi-square %f", chi);
    double corr = lag / (n - 1) / (1.0 / 12);
    cr_assert(fabs(corr) < 0.016, "lag-1 correlation %f", corr);
}

Test(sample_rng, uniform_along_positions) { check_uniform(0); }
Test(sample_rng, uniform_along_seeds) { check_uniform(1); }

/* ---- greedy ---------------------------------------------------------------- */

Test(sample, greedy_argmax_lowest_id_on_ties) {
    qwi_sample_scratch *s = qwi_sample_scratch_create(16);
    cr_assert_not_null(s);
    float l[8] = {0.5f, 3.0f, -1.0f, 3.0f, NAN, 2.9f, 3.0f, 0};
    qwi_sampling p = params(0, 0, 1, 0);
    cr_assert_eq(qwi_sample(l, 8, &p, 0, s), 1);
    /* greedy ignores the other knobs */
    p = params(0, 1, 0.1f, 0.9f);
    for (int64_t pos = 0; pos < 50; pos++) cr_assert_eq(qwi_sample(l, 8, &p, pos, s), 1);
    float probs[8];
    cr_assert_eq(qwi_sample_probs(l, 8, &p, probs, s), 1);
    cr_assert_eq(support(probs, 8), 1ull << 1);
    /* NaN is not a maximum even when everything else is lower */
    float l2[4] = {-5, NAN, -7, -6};
    cr_assert_eq(qwi_sample(l2, 4, &p, 0, s), 0);
    /* banning the argmax moves to the next tie, then the next value */
    int32_t ban[2] = {1, 3};
    p.banned = ban;
    p.num_banned = 2;
    cr_assert_eq(qwi_sample(l, 8, &p, 0, s), 6);
    qwi_sample_scratch_free(s);
}

/* ---- exact candidate sets on fixed logits -------------------------------- */

/* weights (probabilities) 0.05 .3 .1 .3 .2 .05 0 0; O = 1 3 4 2 0 5 */
static void fixed_logits(float l[8]) {
    static const double w[8] = {0.05, 0.3, 0.1, 0.3, 0.2, 0.05, 0, 0};
    for (int i = 0; i < 8; i++) l[i] = w[i] > 0 ? (float)log(w[i]) : NEG_INF;
}

static uint64_t set_of(const float *l, qwi_sampling p, qwi_sample_scratch *s, float *probs) {
    int32_t n = qwi_sample_probs(l, 8, &p, probs, s);
    uint64_t m = support(probs, 8);
    cr_assert_eq(n, __builtin_popcountll(m));
    double sum = 0;
    for (int i = 0; i < 8; i++) sum += probs[i];
    cr_assert(fabs(sum - 1) < 1e-6, "probs sum %f", sum);
    return m;
}

#define B(i) (1ull << (i))

Test(sample, top_k_sets) {
    qwi_sample_scratch *s = qwi_sample_scratch_create(8);
    float l[8], pr[8];
    fixed_logits(l);
    cr_assert_eq(set_of(l, params(1, 1, 1, 0), s, pr), B(1)); /* tie 1/3: lower id */
    cr_assert_eq(set_of(l, params(1, 2, 1, 0), s, pr), B(1) | B(3));
    cr_assert_eq(set_of(l, params(1, 3, 1, 0), s, pr), B(1) | B(3) | B(4));
    cr_assert(fabsf(pr[4] - 0.25f) < 1e-6f && fabsf(pr[1] - 0.375f) < 1e-6f);
    /* tie 0/5 at the boundary: lower id */
    cr_assert_eq(set_of(l, params(1, 5, 1, 0), s, pr), B(1) | B(3) | B(4) | B(2) | B(0));
    /* k beyond the present ids, or beyond the vocabulary: everything present */
    uint64_t all = B(0) | B(1) | B(2) | B(3) | B(4) | B(5);
    cr_assert_eq(set_of(l, params(1, 7, 1, 0), s, pr), all);
    cr_assert_eq(set_of(l, params(1, 1000000, 1, 0), s, pr), all);
    cr_assert_eq(set_of(l, params(1, 0, 1, 0), s, pr), all);
    cr_assert(fabsf(pr[1] - 0.3f) < 1e-6f && fabsf(pr[5] - 0.05f) < 1e-6f);
    qwi_sample_scratch_free(s);
}

Test(sample, top_p_sets) {
    qwi_sample_scratch *s = qwi_sample_scratch_create(8);
    float l[8], pr[8];
    fixed_logits(l);
    /* running sums in O: .3 .6 .8 .9 .95 1 */
    cr_assert_eq(set_of(l, params(1, 0, 0.25f, 0), s, pr), B(1));
    cr_assert_eq(set_of(l, params(1, 0, 0.5f, 0), s, pr), B(1) | B(3));
    /* the token that crosses the threshold is included */
    cr_assert_eq(set_of(l, params(1, 0, 0.65f, 0), s, pr), B(1) | B(3) | B(4));
    cr_assert(fabsf(pr[4] - 0.25f) < 1e-6f);
    cr_assert_eq(set_of(l, params(1, 0, 0.85f, 0), s, pr), B(1) | B(3) | B(4) | B(2));
    /* tie 0/5 at the boundary: lower id goes first */
    cr_assert_eq(set_of(l, params(1, 0, 0.92f, 0), s, pr), B(1) | B(3) | B(4) | B(2) | B(0));
    /* tiny or zero top_p still keeps one */
    cr_assert_eq(set_of(l, params(1, 0, 1e-9f, 0), s, pr), B(1));
    cr_assert_eq(set_of(l, params(1, 0, 0.0f, 0), s, pr), B(1));
    cr_assert_eq(pr[1], 1.0f);
    qwi_sample_scratch_free(s);
}

Test(sample, top_p_exact_boundary_is_inclusive) {
    /* equal logits give e = 1 exactly, so Z = 4 and the sums are exact */
    qwi_sample_scratch *s = qwi_sample_scratch_create(8);
    float l[4] = {2, 2, 2, 2}, pr[4];
    qwi_sampling p = params(0.7f, 0, 0.5f, 0);
    cr_assert_eq(qwi_sample_probs(l, 4, &p, pr, s), 2);
    cr_assert_eq(support(pr, 4), B(0) | B(1));
    cr_assert_eq(pr[0], 0.5f);
    p.top_p = 0.75f;
    cr_assert_eq(qwi_sample_probs(l, 4, &p, pr, s), 3);
    cr_assert_eq(support(pr, 4), B(0) | B(1) | B(2));
    p.top_p = 0.76f;
    cr_assert_eq(qwi_sample_probs(l, 4, &p, pr, s), 4);
    qwi_sample_scratch_free(s);
}

Test(sample, min_p_sets) {
    qwi_sample_scratch *s = qwi_sample_scratch_create(8);
    float l[8], pr[8];
    fixed_logits(l);
    /* p_max .3: thresholds .15, .102, .06 */
    cr_assert_eq(set_of(l, params(1, 0, 1, 0.5f), s, pr), B(1) | B(3) | B(4));
    cr_assert_eq(set_of(l, params(1, 0, 1, 0.34f), s, pr), B(1) | B(3) | B(4));
    cr_assert_eq(set_of(l, params(1, 0, 1, 0.32f), s, pr), B(1) | B(3) | B(4) | B(2));
    /* min_p = 1 (or above) keeps exactly the ties of the max */
    cr_assert_eq(set_of(l, params(1, 0, 1, 1.0f), s, pr), B(1) | B(3));
    cr_assert_eq(set_of(l, params(1, 0, 1, 5.0f), s, pr), B(1) | B(3));
    cr_assert_eq(pr[1], 0.5f);
    qwi_sample_scratch_free(s);
}

Test(sample, combined_sets) {
    qwi_sample_scratch *s = qwi_sample_scratch_create(8);
    float l[8], pr[8];
    fixed_logits(l);
    /* top-3 renormalised: .375 .375 .25; top-p .5 -> two */
    cr_assert_eq(set_of(l, params(1, 3, 0.5f, 0), s, pr), B(1) | B(3));
    /* top-4: 1/3 1/3 2/9 1/9; top-p .9 needs all four; min-p .4 drops 1/9 */
    cr_assert_eq(set_of(l, params(1, 4, 0.9f, 0), s, pr), B(1) | B(3) | B(4) | B(2));
    cr_assert_eq(set_of(l, params(1, 4, 0.9f, 0.4f), s, pr), B(1) | B(3) | B(4));
    cr_assert(fabsf(pr[4] - 0.25f) < 1e-6f);
    /* top-p .85 (four) then min-p .5 (threshold .15) */
    cr_assert_eq(set_of(l, params(1, 0, 0.85f, 0.5f), s, pr), B(1) | B(3) | B(4));
    /* temperature before top-p: T=4 flattens to w^.25 so .5 needs three */
    cr_assert_eq(set_of(l, params(4, 0, 0.5f, 0), s, pr), B(1) | B(3) | B(4));
    cr_assert_eq(set_of(l, params(1, 0, 0.5f, 0), s, pr), B(1) | B(3));
    qwi_sample_scratch_free(s);
}

Test(sample, temperature_scaling) {
    qwi_sample_scratch *s = qwi_sample_scratch_create(8);
    float l[8], pr[8];
    fixed_logits(l);
    static const double w[6] = {0.05, 0.3, 0.1, 0.3, 0.2, 0.05};
    const float temps[3] = {0.5f, 1.0f, 2.0f};
    double ent[3];
    for (int t = 0; t < 3; t++) {
        qwi_sampling p = params(temps[t], 0, 1, 0);
        qwi_sample_probs(l, 8, &p, pr, s);
        double z = 0;
        for (int i = 0; i < 6; i++) z += pow(w[i], 1.0 / temps[t]);
        ent[t] = 0;
        for (int i = 0; i < 6; i++) {
            double want = pow(w[i], 1.0 / temps[t]) / z;
            cr_assert(fabs(pr[i] - want) < 1e-6, "T %g id %d: %g vs %g", temps[t], i, pr[i], want);
            ent[t] -= pr[i] * log(pr[i]);
        }
    }
    cr_assert(ent[0] < ent[1] && ent[1] < ent[2], "entropy %g %g %g", ent[0], ent[1], ent[2]);
    /* a tiny temperature is argmax-like, without overflow or NaN */
    qwi_sampling p = params(1e-30f, 0, 1, 0);
    cr_assert_eq(qwi_sample_probs(l, 8, &p, pr, s), 2);
    cr_assert_eq(pr[1], 0.5f);
    cr_assert_eq(pr[3], 0.5f);
    for (int64_t pos = 0; pos < 200; pos++) {
        int32_t t = qwi_sample(l, 8, &p, pos, s);
        cr_assert(t == 1 || t == 3);
    }
    /* a huge temperature is uniform over the present ids */
    p = params(1e30f, 0, 1, 0);
    cr_assert_eq(qwi_sample_probs(l, 8, &p, pr, s), 6);
    for (int i = 0; i < 6; i++) cr_assert(fabsf(pr[i] - 1.0f / 6) < 1e-6f);
    qwi_sample_scratch_free(s);
}

/* ---- edge cases ------------------------------------------------------------ */

Test(sample, degenerate_logits) {
    qwi_sample_scratch *s = qwi_sample_scratch_create(16);
    float pr[16];
    float one[16];
    for (int i = 0; i < 16; i++) one[i] = i % 3 ? NEG_INF : NAN;
    one[11] = -1e30f;
    const qwi_sampling ps[5] = {params(1, 0, 1, 0), params(1, 5, 1, 0), params(0.3f, 0, 0.9f, 0),
                                params(1, 0, 1, 0.2f), params(2, 3, 0.5f, 0.5f)};
    for (int k = 0; k < 5; k++) {
        for (int64_t pos = 0; pos < 50; pos++) cr_assert_eq(qwi_sample(one, 16, &ps[k], pos, s), 11);
        cr_assert_eq(qwi_sample_probs(one, 16, &ps[k], pr, s), 1);
        cr_assert_eq(pr[11], 1.0f);
    }
    /* +inf logits share the mass; finite ones get none */
    float inf[6] = {1, INFINITY, 3, INFINITY, NAN, 0};
    qwi_sampling p = params(1, 0, 1, 0);
    cr_assert_eq(qwi_sample_probs(inf, 6, &p, pr, s), 2);
    cr_assert_eq(pr[1], 0.5f);
    cr_assert_eq(pr[3], 0.5f);
    /* nothing present: lowest id that is not banned */
    float none[6] = {NAN, NEG_INF, NEG_INF, NAN, NEG_INF, NEG_INF};
    int32_t ban[2] = {0, 1};
    p.banned = ban;
    p.num_banned = 2;
    cr_assert_eq(qwi_sample(none, 6, &p, 3, s), 2);
    p.temperature = 0;
    cr_assert_eq(qwi_sample(none, 6, &p, 3, s), 2);
    qwi_sample_scratch_free(s);
}

Test(sample, banned_never_chosen) {
    enum { V = 32 };
    qwi_sample_scratch *s = qwi_sample_scratch_create(V);
    float l[V], pr[V];
    for (int i = 0; i < V; i++) l[i] = (float)(i % 5) * 0.3f;
    int32_t ban[6] = {4, 9, 14, -3, 1000, 19};   /* the top ids, plus junk */
    const qwi_sampling base[4] = {params(1, 0, 1, 0), params(1, 3, 1, 0), params(1, 0, 0.5f, 0),
                                  params(0, 0, 1, 0)};
    for (int k = 0; k < 4; k++) {
        qwi_sampling p = base[k];
        p.banned = ban;
        p.num_banned = 6;
        for (int64_t pos = 0; pos < 3000; pos++) {
            int32_t t = qwi_sample(l, V, &p, pos, s);
            cr_assert(t >= 0 && t < V);
            cr_assert(t % 5 != 4 || t == 24 || t == 29, "banned %d chosen", t);
        }
        qwi_sample_probs(l, V, &p, pr, s);
        for (int i = 0; i < 6; i++)
            if (ban[i] >= 0 && ban[i] < V) cr_assert_eq(pr[ban[i]], 0.0f);
    }
    /* the bans of one call do not leak into the next */
    qwi_sampling p = params(0, 0, 1, 0);
    cr_assert_eq(qwi_sample(l, V, &p, 0, s), 4);
    /* everything banned but one */
    int32_t all[V - 1];
    for (int i = 0, j = 0; i < V; i++)
        if (i != 7) all[j++] = i;
    p = params(1.5f, 0, 0.9f, 0);
    p.banned = all;
    p.num_banned = V - 1;
    for (int64_t pos = 0; pos < 100; pos++) cr_assert_eq(qwi_sample(l, V, &p, pos, s), 7);
    qwi_sample_scratch_free(s);
}

/* ---- reproducibility --------------------------------------------------------- */

Test(sample, seeded_reproducible_independent_of_order) {
    enum { V = 1000, N = 400 };
    qwi_sample_scratch *s = qwi_sample_scratch_create(V);
    qwi_sample_scratch *s2 = qwi_sample_scratch_create(V);
    float *l = malloc(V * sizeof *l), *other = malloc(V * sizeof *other);
    uint64_t st = 5;
    for (int i = 0; i < V; i++) l[i] = (float)gauss(&st), other[i] = (float)gauss(&st) * 4;
    qwi_sampling p = params(1.0f, 0, 0.95f, 0);
    qwi_sampling q = params(0.8f, 40, 1, 0);
    q.seed = 77;
    int32_t fwd[N];
    for (int i = 0; i < N; i++) fwd[i] = qwi_sample(l, V, &p, i, s);
    /* backwards, interleaved with unrelated calls, on another scratch */
    for (int i = N - 1; i >= 0; i--) {
        qwi_sample(other, V, &q, i * 7, s2);
        cr_assert_eq(qwi_sample(l, V, &p, i, s2), fwd[i], "position %d", i);
        qwi_sample(other, V, &q, i + 3, s);
    }
    /* another seed gives another sequence; at most a few coincidences */
    p.seed = 1235;
    int same = 0, distinct = 0;
    for (int i = 0; i < N; i++) {
        same += qwi_sample(l, V, &p, i, s) == fwd[i];
        distinct += i && fwd[i] != fwd[i - 1];
    }
    cr_assert(same < N / 10, "%d of %d equal across seeds", same, N);
    cr_assert(distinct > N / 2, "only %d changes along positions", distinct);
    free(l);
    free(other);
    qwi_sample_scratch_free(s);
    qwi_sample_scratch_free(s2);
}

/* ---- empirical distribution --------------------------------------------------- */

/* Draw n tokens at positions 0..n-1 and compare with qwi_sample_probs by a
 * chi-square over the candidates (cells with < 5 expected pooled). The
 * bound is df + 7 sd: a correct sampler passes with overwhelming margin,
 * one that mis-weights a candidate by a few percent does not. */
static void check_empirical(const float *l, int32_t v, qwi_sampling p, int n) {
    qwi_sample_scratch *s = qwi_sample_scratch_create(v);
    float *pr = malloc((size_t)v * sizeof *pr);
    int *cnt = calloc((size_t)v, sizeof *cnt);
    qwi_sample_probs(l, v, &p, pr, s);
    for (int i = 0; i < n; i++) {
        int32_t t = qwi_sample(l, v, &p, i, s);
        cr_assert(pr[t] > 0, "sampled %d outside the candidates", t);
        cnt[t]++;
    }
    double chi = 0, pool_e = 0, pool_o = 0;
    int df = -1;
    for (int32_t i = 0; i < v; i++) {
        if (pr[i] <= 0) continue;
        double e = pr[i] * n;
        if (e < 5) {
            pool_e += e;
            pool_o += cnt[i];
            continue;
        }
        chi += (cnt[i] - e) * (cnt[i] - e) / e;
        df++;
    }
    if (pool_e > 0) {
        chi += (pool_o - pool_e) * (pool_o - pool_e) / QWI_MAX(pool_e, 1.0);
        df++;
    }
    double bound = df + 7 * sqrt(2.0 * QWI_MAX(df, 1)) + 10;
    cr_assert(chi < bound, "chi-square %f over df %d (bound %f)", chi, df, bound);
    free(pr);
    free(cnt);
    qwi_sample_scratch_free(s);
}

Test(sample, empirical_matches_probs) {
    enum { V = 64 };
    float l[V];
    uint64_t st = 11;
    for (int i = 0; i < V; i++) l[i] = (float)gauss(&st) * 1.5f;
    check_empirical(l, V, params(1, 0, 1, 0), 200000);
    check_empirical(l, V, params(0.7f, 10, 1, 0), 100000);
    check_empirical(l, V, params(1.3f, 0, 0.8f, 0), 100000);
    check_empirical(l, V, params(1, 0, 1, 0.1f), 100000);
    check_empirical(l, V, params(1, 20, 0.9f, 0.05f), 100000);
}

Test(sample, empirical_detects_a_wrong_distribution) {
    /* the checker itself must be able to fail: feed it logits that differ
     * from the ones sampled by looking at probs of a sharper temperature */
    enum { V = 16, N = 50000 };
    float l[V];
    uint64_t st = 3;
    for (int i = 0; i < V; i++) l[i] = (float)gauss(&st);
    qwi_sample_scratch *s = qwi_sample_scratch_create(V);
    float pr[V];
    int cnt[V] = {0};
    qwi_sampling p = params(1, 0, 1, 0), q = params(1.1f, 0, 1, 0);
    qwi_sample_probs(l, V, &q, pr, s);
    for (int i = 0; i < N; i++) cnt[qwi_sample(l, V, &p, i, s)]++;
    double chi = 0;
    for (int i = 0; i < V; i++) chi += (cnt[i] - pr[i] * N) * (cnt[i] - pr[i] * N) / (pr[i] * N);
    cr_assert(chi > 15 + 7 * sqrt(30.0) + 10, "a 10%% temperature error went unnoticed: %f", chi);
    qwi_sample_scratch_free(s);
}

/* ---- exactness against the full-sort definition ------------------------------ */

typedef struct ref_cand {
    double e;
    int32_t id;
} ref_cand;

static int ref_cmp_o(const void *pa, const void *pb) {
    const ref_cand *a = pa, *b = pb;
    if (a->e != b->e) return a->e > b->e ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

static int ref_cmp_logit(const void *pa, const void *pb) {
    const ref_cand *a = pa, *b = pb;   /* e holds the logit here */
    if (a->e != b->e) return a->e > b->e ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

static int ref_cmp_id(const void *pa, const void *pb) {
    int32_t a = ((const ref_cand *)pa)->id, b = ((const ref_cand *)pb)->id;
    return (a > b) - (a < b);
}

/* The kept candidates in order O and Z', as the definition computes them. */
typedef struct ref_result {
    ref_cand *o;
    int32_t kept;
    double z2;
} ref_result;

/* The token the definition picks for u: inverse CDF over O. */
static int32_t ref_pick(const ref_result *r, double u) {
    double target = u * r->z2, cum = 0;
    for (int32_t j = 0; j < r->kept; j++) {
        cum += r->o[j].e;
        if (cum > target) return r->o[j].id;
    }
    return r->o[r->kept - 1].id;
}

/* The definition at the top of sample.c, written the slow obvious way:
 * full sorts everywhere. Fills probs like qwi_sample_probs. Temperature > 0,
 * no bans. */
static ref_result reference(const float *l, int32_t v, const qwi_sampling *p, float *probs) {
    ref_cand *c = malloc((size_t)v * sizeof *c);
    int32_t n = 0;
    float m = NEG_INF;
    for (int32_t i = 0; i < v; i++)
        if (!isnan(l[i]) && l[i] > m) m = l[i];
    for (int32_t i = 0; i < v; i++)
        if (!isnan(l[i]) && l[i] != NEG_INF) c[n++] = (ref_cand){l[i], i};
    if (p->top_k > 0 && p->top_k < n) {
        qsort(c, (size_t)n, sizeof *c, ref_cmp_logit);
        n = p->top_k;
        m = (float)c[0].e;
        qsort(c, (size_t)n, sizeof *c, ref_cmp_id);
    }
    int32_t w = 0;
    for (int32_t i = 0; i < n; i++) {
        double e = (float)c[i].e == m ? 1.0 : qwi_sample_exp(((double)(float)c[i].e - (double)m) / (double)p->temperature);
        if (e > 0) c[w++] = (ref_cand){e, c[i].id};
    }
    n = w;
    double z = 0;
    for (int32_t i = 0; i < n; i++) z += c[i].e;   /* id order */
    ref_cand *o = malloc((size_t)n * sizeof *o);
    memcpy(o, c, (size_t)n * sizeof *o);
    qsort(o, (size_t)n, sizeof *o, ref_cmp_o);
    int32_t kept = n;
    if (p->top_p < 1.0f) {
        double t = (double)p->top_p * z, cum = 0;
        for (int32_t j = 0; j < n; j++) {
            cum += o[j].e;
            if (cum >= t) {
                kept = j + 1;
                break;
            }
        }
    }
    if (p->min_p > 0) {
        double th = (p->min_p < 1 ? (double)p->min_p : 1.0) * o[0].e;
        int32_t j = 1;
        while (j < kept && o[j].e >= th) j++;
        kept = j;
    }
    /* Z' over the kept ids in id order */
    ref_cand *k = malloc((size_t)kept * sizeof *k);
    memcpy(k, o, (size_t)kept * sizeof *k);
    qsort(k, (size_t)kept, sizeof *k, ref_cmp_id);
    double z2 = 0;
    for (int32_t j = 0; j < kept; j++) z2 += k[j].e;
    memset(probs, 0, (size_t)v * sizeof *probs);
    for (int32_t j = 0; j < kept; j++) probs[o[j].id] = (float)(o[j].e / z2);
    free(c);
    free(k);
    return (ref_result){o, kept, z2};
}

/* Draws per check_exact case under the sanitizers: each draw of the full
 * vocabulary costs 10 ms there, and the normal tree makes all of them (the
 * sanitizer tree is for memory errors, which the first draws of each case
 * already reach). */
#ifdef QWT_UNDER_SANITIZER
enum { DRAW_DIVISOR = 4 };
#else
enum { DRAW_DIVISOR = 1 };
#endif

static void check_exact(const float *l, int32_t v, qwi_sampling p, int draws) {
    draws = (draws + DRAW_DIVISOR - 1) / DRAW_DIVISOR;
    qwi_sample_scratch *s = qwi_sample_scratch_create(v);
    float *a = malloc((size_t)v * sizeof *a), *b = malloc((size_t)v * sizeof *b);
    qwi_sample_probs(l, v, &p, a, s);
    ref_result r = reference(l, v, &p, b);
    cr_assert(memcmp(a, b, (size_t)v * sizeof *a) == 0,
              "probs differ from the full-sort definition (T %g k %d p %g min %g)",
              p.temperature, p.top_k, p.top_p, p.min_p);
    for (int i = 0; i < draws; i++) {
        int32_t want = ref_pick(&r, qwi_rng_uniform(p.seed, i));
        cr_assert_eq(qwi_sample(l, v, &p, i, s), want, "draw %d (T %g k %d p %g min %g)", i,
                     p.temperature, p.top_k, p.top_p, p.min_p);
    }
    free(r.o);
    free(a);
    free(b);
    qwi_sample_scratch_free(s);
}

Test(sample, fast_paths_equal_full_sort, .timeout = 120) {
    enum { V = 151936 };
    float *l = malloc(V * sizeof *l);
    uint64_t st = 21;
    for (int kind = 0; kind < 3; kind++) {
        for (int i = 0; i < V; i++) {
            double g = gauss(&st);
            /* 0: LLM-like peaked; 1: flat; 2: quantised, full of exact ties */
            l[i] = kind == 0 ? (float)(g * 2.5) : kind == 1 ? (float)(g * 0.05)
                                                            : (float)floor(g * 4) * 0.5f;
        }
        if (kind == 0) l[777] = 14.0f, l[778] = 13.5f;
        check_exact(l, V, params(1, 0, 0.9f, 0), 200);
        check_exact(l, V, params(0.7f, 0, 0.5f, 0), 100);
        check_exact(l, V, params(1, 50, 1, 0), 200);
        check_exact(l, V, params(1, 50, 0.9f, 0), 100);
        check_exact(l, V, params(1, 0, 1, 0.05f), 100);
        check_exact(l, V, params(1, 0, 1, 0), 100);
        check_exact(l, V, params(1.2f, 1000, 0.95f, 0.01f), 50);
    }
    /* Plain sampling and top-p find their sorted prefix in the logits again
     * through a bound derived from log(): extreme temperatures (nearly
     * everything underflows; nearly flat), a huge max, and absent ids
     * (-inf, NaN) mixed in must still give the definition's draws. */
    for (int i = 0; i < V; i++) l[i] = (float)(gauss(&st) * 2.5);
    for (int i = 0; i < V; i += 97) l[i] = NEG_INF;
    for (int i = 5; i < V; i += 211) l[i] = NAN;
    const float temps[] = {0.02f, 0.3f, 40.0f};
    for (int t = 0; t < 3; t++) {
        check_exact(l, V, params(temps[t], 0, 1, 0), 100);
        check_exact(l, V, params(temps[t], 0, 0.8f, 0), 50);
    }
    for (int i = 0; i < V; i++) l[i] = 3.0e4f + (float)(gauss(&st) * 3.0);
    check_exact(l, V, params(1, 0, 1, 0), 100);
    check_exact(l, V, params(0.7f, 0, 0.9f, 0), 50);
    free(l);
}

/* A banned id is absent, exactly as if its logit were -inf: the same probs
 * and the same draws, on every path (the list-free ones look bans up while
 * collecting from the logits). */
Test(sample, bans_equal_minus_inf, .timeout = 60) {
    enum { V = 151936, NB = 500 };
    float *l = malloc(V * sizeof *l), *lm = malloc(V * sizeof *lm);
    float *a = malloc(V * sizeof *a), *b = malloc(V * sizeof *b);
    int32_t ban[NB];
    uint64_t st = 77;
    for (int i = 0; i < V; i++) l[i] = lm[i] = (float)(gauss(&st) * 2.0);
    for (int i = 0; i < NB; i++) {
        /* the 20 first bans hit the largest logits, the rest anywhere */
        ban[i] = i < 20 ? i * 31 : (int32_t)(mix(&st) % V);
        if (i < 20) l[ban[i]] = lm[ban[i]] = 9.0f + (float)i * 0.1f;
    }
    for (int i = 0; i < NB; i++) lm[ban[i]] = NEG_INF;
    qwi_sample_scratch *s = qwi_sample_scratch_create(V);
    const qwi_sampling cases[] = {params(1, 0, 1, 0), params(0.7f, 0, 0.9f, 0), params(1, 40, 1, 0),
                                  params(1, 0, 1, 0.1f)};
    for (int c = 0; c < 4; c++) {
        qwi_sampling pb = cases[c], pm = cases[c];
        pb.banned = ban;
        pb.num_banned = NB;
        qwi_sample_probs(l, V, &pb, a, s);
        qwi_sample_probs(lm, V, &pm, b, s);
        cr_assert(memcmp(a, b, V * sizeof *a) == 0, "case %d: probs differ", c);
        for (int64_t pos = 0; pos < 100; pos++)
            cr_assert_eq(qwi_sample(l, V, &pb, pos, s), qwi_sample(lm, V, &pm, pos, s), "case %d pos %d",
                         c, (int)pos);
    }
    qwi_sample_scratch_free(s);
    free(l);
    free(lm);
    free(a);
    free(b);
}
