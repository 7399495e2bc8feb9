/*
 * sample.c - the reference sampler (see sample.h).
 *
 * Exact definition, which every backend reproduces:
 *
 *   x_i   logit i as float after the logit bias and the penalties
 *         (penalties.h; the raw logit when there are none); NaN, -inf and
 *         banned ids are "absent" (never candidates), whatever the bias.
 *         Banned ids outside [0, vocab) are ignored.
 *   greedy (temperature <= 0 or NaN): the largest x_i, lowest id on ties.
 *   m     the largest x_i over present ids (may be +inf).
 *   s_i   0 if x_i == m, else ((double)x_i - (double)m) / (double)T: the
 *         max is subtracted first, so a tiny T gives -huge, never +overflow.
 *   e_i   exp(s_i) in double, in (0, 1]; ids whose e_i underflows to 0 (or
 *         is NaN) are dropped. exp is qwi_sample_exp (sample_exp.h: within
 *         1 ulp, the same bits on every CPU). e_i is "the probability" up
 *         to one common normaliser, so ordering by e_i is ordering by
 *         probability.
 *   order O   descending e_i, lower id first on equal e_i.
 *   top-k     keeps the k largest x_i (lower id first on equal x_i); the
 *             temperature is monotone so this equals top-k after scaling.
 *   top-p     Z = sum of e_i over the candidates in ascending id order; keep
 *             the shortest prefix of O whose running sum (added in O order)
 *             is >= top_p * Z (all candidates if rounding never gets there).
 *   min-p     keep e_i >= min(min_p, 1) * e_max (e_max: largest kept e_i).
 *   sampling  Z' = sum of kept e_i in ascending id order; u = rng(seed, pos);
 *             walk O accumulating e_i and pick the first id whose running
 *             sum is > u * Z'; if rounding never gets there, the last
 *             candidate of O.
 *   nothing present: the lowest id that is not banned (0 if all are).
 *
 * All arithmetic after the float logits is double, so the probabilities
 * carry ~1e-16 relative error: a backend that sums in another order can only
 * disagree on draws that fall within that distance of a CDF boundary.
 *
 * Speed: no full sort of the vocabulary is needed. Greedy is one pass.
 * top-k is one pass with a size-k min-heap (most ids cost one compare).
 * top-p and plain sampling need a prefix of O: a histogram of e_i by its
 * bit pattern (8 buckets per octave) picks a threshold whose bucket mass
 * reaches the target, only the ids at or above it are collected (found in
 * the logits again: no per-id candidate list is written) and sorted, and
 * the running sum is then taken exactly as the definition says. Because the
 * sorted ids are exactly the first ones of O, the result is the full-sort
 * result; if rounding leaves the target unreached, the threshold is
 * lowered and the prefix sorted again.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "penalties.h"
#include "philox.h"
#include "sample.h"
#include "logit_max.h"
#include "sample_exp.h"

#define NBUCKETS 512
/* bit pattern of 1.0 >> 49: the bucket of the largest possible e */
#define TOP_BUCKET_KEY 8184

typedef struct cand {
    double e;
    int32_t id;
} cand;

struct qwi_sample_scratch {
    int32_t cap;
    uint8_t *banned;     /* cap flags, all 0 between calls               */
    cand *list;          /* candidates in ascending id order             */
    cand *sorted;        /* a prefix of order O                          */
    cand *tmp;           /* merge-sort buffer; top-k heap                */
    double hist[NBUCKETS];
    /* penalties and bias (penalties.h): the penalised copy of the row, the
     * touched ids, and their places (-1 between calls) */
    float *pen;
    qwi_penalty_entry *ents;
    int32_t *slot;
};

qwi_sample_scratch *qwi_sample_scratch_create(int32_t vocab_size) {
    if (vocab_size <= 0) {
        qwi_fail(QW_ERR_INVALID_ARGUMENT, "sample scratch: vocab size %d", (int)vocab_size);
        return NULL;
    }
    qwi_sample_scratch *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->cap = vocab_size;
    s->banned = calloc((size_t)vocab_size, 1);
    s->list = malloc((size_t)vocab_size * sizeof(cand));
    s->sorted = malloc((size_t)vocab_size * sizeof(cand));
    s->tmp = malloc((size_t)vocab_size * sizeof(cand));
    s->pen = malloc((size_t)vocab_size * sizeof(float));
    s->ents = malloc((size_t)vocab_size * sizeof(qwi_penalty_entry));
    s->slot = malloc((size_t)vocab_size * sizeof(int32_t));
    if (!s->banned || !s->list || !s->sorted || !s->tmp || !s->pen || !s->ents || !s->slot) goto oom;
    memset(s->slot, 0xff, (size_t)vocab_size * sizeof(int32_t));   /* all -1 */
    return s;
oom:
    qwi_sample_scratch_free(s);
    qwi_fail(QW_ERR_OUT_OF_MEMORY, "sample scratch for vocab %d", (int)vocab_size);
    return NULL;
}

void qwi_sample_scratch_free(qwi_sample_scratch *s) {
    if (!s) return;
    free(s->banned);
    free(s->list);
    free(s->sorted);
    free(s->tmp);
    free(s->pen);
    free(s->ents);
    free(s->slot);
    free(s);
}

/* ---- random numbers: Philox-4x32-10 (lib/philox.h) -----------------------
 * Chosen because it is the counter-based generator cuRAND also ships, needs
 * only 32x32->64 multiplies, and has published known-answer vectors. */

/* Philox-4x32-10 block function, in place on ctr. Exposed (not in the
 * header) so the tests can check it against the Random123 vectors. */
void qwi_philox4x32_10(uint32_t ctr[4], const uint32_t key[2]);
void qwi_philox4x32_10(uint32_t ctr[4], const uint32_t key[2]) { qwi_philox_block(ctr, key); }

double qwi_rng_uniform(uint64_t seed, int64_t position) { return qwi_philox_uniform(seed, position); }

/* ---- helpers ------------------------------------------------------------- */

static inline float logit_at(const float *logits, const uint8_t *banned, int32_t i) {
    float x = logits[i];
    if (isnan(x) || (banned && banned[i])) return -INFINITY;
    return x;
}

/* "a comes before b" in order O */
static inline int before(const cand *a, const cand *b) {
    return a->e > b->e || (a->e == b->e && a->id < b->id);
}

/* Bottom-up merge sort of a[0..n) into order O; tmp holds n. The order is
 * total, so stability is irrelevant and the result is unique. */
static void sort_o(cand *a, cand *tmp, int32_t n) {
    /* insertion-sort runs of 16 first: cheaper than merging tiny runs */
    const int32_t run = 16;
    for (int32_t lo = 0; lo < n; lo += run) {
        int32_t hi = QWI_MIN(lo + run, n);
        for (int32_t i = lo + 1; i < hi; i++) {
            cand v = a[i];
            int32_t j = i;
            while (j > lo && before(&v, &a[j - 1])) {
                a[j] = a[j - 1];
                j--;
            }
            a[j] = v;
        }
    }
    cand *src = a, *dst = tmp;
    for (int32_t w = run; w < n; w *= 2) {
        for (int32_t lo = 0; lo < n; lo += 2 * w) {
            int32_t mid = QWI_MIN(lo + w, n), hi = QWI_MIN(lo + 2 * w, n);
            int32_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) dst[k++] = before(&src[j], &src[i]) ? src[j++] : src[i++];
            while (i < mid) dst[k++] = src[i++];
            while (j < hi) dst[k++] = src[j++];
        }
        cand *t = src;
        src = dst;
        dst = t;
    }
    if (src != a) memcpy(a, src, (size_t)n * sizeof(cand));
}

static int cmp_id(const void *pa, const void *pb) {
    int32_t a = ((const cand *)pa)->id, b = ((const cand *)pb)->id;
    return (a > b) - (a < b);
}

static inline int bucket_of(double e) {
    uint64_t bits;
    memcpy(&bits, &e, sizeof bits);
    int b = (int)(bits >> 49) - (TOP_BUCKET_KEY - (NBUCKETS - 1));
    if (b < 0) return 0;
    return b > NBUCKETS - 1 ? NBUCKETS - 1 : b;
}

static inline int reached(double cum, double t, int strict) {
    return strict ? cum > t : cum >= t;
}

/* Where prefix_o finds the candidates: s->list[0..n) (list != NULL), or,
 * for plain sampling and top-p, which never build that list, the logits
 * themselves: every present id whose weight (m, temp) is > 0. */
typedef struct cand_source {
    const cand *list;
    const float *logits;
    const uint8_t *banned;
    int32_t vocab;
    double m, temp;
} cand_source;

/* The smallest e that bucket b holds (bucket 0 also holds every smaller e). */
static double bucket_floor(int b) {
    if (b <= 0) return 0;
    uint64_t bits = (uint64_t)(b + TOP_BUCKET_KEY - (NBUCKETS - 1)) << 49;
    double e;
    memcpy(&e, &bits, sizeof e);
    return e;
}

static inline double weight(float x, double m, double temp);

/* The candidates of bucket >= lowest into s->sorted, in id order; returns
 * how many. From the logits: a weight >= bucket_floor(lowest) needs
 * (x - m) / temp >= log(floor) less rounding, so ids whose logit lies
 * under a bound with a generous slack (1e-6 relative) below that cannot
 * qualify and are skipped, 256 at a time where their maximum is under it;
 * the rest get their exact weight (the same bits as transform's) and the
 * exact bucket test. */
static int32_t collect(qwi_sample_scratch *s, const cand_source *src, int32_t n, int lowest) {
    int32_t k = 0;
    if (src->list) {
        for (int32_t i = 0; i < n; i++)
            if (bucket_of(src->list[i].e) >= lowest) s->sorted[k++] = src->list[i];
        return k;
    }
    double x_lo = -INFINITY;
    if (lowest > 0) {
        double b = src->m + src->temp * (log(bucket_floor(lowest)) - 1e-6);
        x_lo = b - 1e-6 * (fabs(src->m) + fabs(b));
    }
    for (int32_t i0 = 0; i0 < src->vocab; i0 += 256) {
        const int32_t c = QWI_MIN(src->vocab - i0, 256);
        if (lowest > 0 && !((double)qwi_logit_max(src->logits + i0, c) >= x_lo)) continue;
        for (int32_t i = i0; i < i0 + c; i++) {
            const float x = src->logits[i];
            if (!((double)x >= x_lo) || (src->banned && src->banned[i])) continue;
            const double e = weight(x, src->m, src->temp);
            if (e > 0 && bucket_of(e) >= lowest) s->sorted[k++] = (cand){e, i};
        }
    }
    return k;
}

/* Sort into s->sorted the shortest prefix of order O over the n candidates
 * of src whose running sum (in O order) reaches t (cum > t if strict, else
 * cum >= t). Returns its length; *found is 0 when every candidate was
 * sorted and the sum never reached t. n > 0. have_hist: s->hist already
 * holds the candidates' bucket sums, added in id order (transform's
 * candidate loop builds them as it goes: the same sums as this pass would);
 * a list-free source always has them. */
static int32_t prefix_o(qwi_sample_scratch *s, const cand_source *src, int32_t n, double t,
                        int strict, int have_hist, int *found) {
    if (!have_hist) {
        memset(s->hist, 0, sizeof s->hist);
        for (int32_t i = 0; i < n; i++) s->hist[bucket_of(src->list[i].e)] += src->list[i].e;
    }
    /* The bucket sums are rounded differently from the exact walk, so aim
     * a little past t; a miss only costs one more collection below. */
    double aim = t > 0 ? t * (1.0 + 1e-9) : t;
    int lowest = NBUCKETS - 1;
    double run = 0;
    for (; lowest > 0; lowest--) {
        run += s->hist[lowest];
        if (run > aim) break;
    }
    for (;;) {
        int32_t m = collect(s, src, n, lowest);
        sort_o(s->sorted, s->tmp, m);
        double cum = 0;
        for (int32_t j = 0; j < m; j++) {
            cum += s->sorted[j].e;
            if (reached(cum, t, strict)) {
                *found = 1;
                return j + 1;
            }
        }
        if (lowest == 0) {
            *found = 0;
            return m;
        }
        do lowest--; while (lowest > 0 && s->hist[lowest] == 0);
    }
}

static int32_t lowest_unbanned(int32_t vocab, const uint8_t *banned) {
    for (int32_t i = 0; i < vocab; i++)
        if (!banned || !banned[i]) return i;
    return 0;
}

static int32_t argmax(const float *logits, int32_t vocab, const uint8_t *banned) {
    int32_t best = -1;
    float bx = -INFINITY;
    /* NaN and -inf never compare greater, so they need no test of their own;
     * strict > keeps the lowest id of a tie */
    if (!banned) {
        /* the first id holding the maximum (vector max, then a scan that
         * stops there): the id the strict > walk of the banned case finds */
        bx = qwi_logit_max(logits, vocab);
        if (bx != -INFINITY)
            for (int32_t i = 0; i < vocab; i++)
                if (logits[i] == bx) return i;
    } else {
        for (int32_t i = 0; i < vocab; i++)
            if (logits[i] > bx && !banned[i]) bx = logits[best = i];
    }
    return best >= 0 ? best : lowest_unbanned(vocab, banned);
}

/* Min-heap of the k best (x, id) seen, worst at the root; "worse" means
 * smaller x, or equal x and larger id. x is kept in the e field. */
static inline int worse(const cand *a, const cand *b) {
    return a->e < b->e || (a->e == b->e && a->id > b->id);
}

static void heap_down(cand *h, int32_t n, int32_t i) {
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && worse(&h[l], &h[w])) w = l;
        if (r < n && worse(&h[r], &h[w])) w = r;
        if (w == i) return;
        cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* The k largest present logits (lower id first on ties) into s->list in
 * ascending id order, with their logit in .e. Returns how many (<= k). */
static int32_t top_k_select(const float *logits, int32_t vocab, const uint8_t *banned,
                            int32_t k, qwi_sample_scratch *s) {
    cand *h = s->tmp;
    int32_t n = 0;
    for (int32_t i = 0; i < vocab; i++) {
        float x = logit_at(logits, banned, i);
        if (x == -INFINITY) continue;
        if (n < k) {
            /* sift up */
            int32_t j = n++;
            h[j] = (cand){x, i};
            while (j > 0 && worse(&h[j], &h[(j - 1) / 2])) {
                cand t = h[j];
                h[j] = h[(j - 1) / 2];
                h[(j - 1) / 2] = t;
                j = (j - 1) / 2;
            }
        } else if (x > h[0].e) {
            /* ids arrive ascending, so an equal x is never better */
            h[0] = (cand){x, i};
            heap_down(h, n, 0);
        }
    }
    memcpy(s->list, h, (size_t)n * sizeof(cand));
    qsort(s->list, (size_t)n, sizeof(cand), cmp_id);
    return n;
}

/* The result of the transforms: either the final candidates sorted in O
 * (sorted = 1, in s->sorted[0..n)) or, for plain sampling, all n
 * candidates unsorted in src (sorted = 0). z is Z'. n == 0: nothing present. */
typedef struct outcome {
    int32_t n;
    int sorted;
    double z;
    int32_t fallback;   /* the id to return when n == 0 */
    int have_hist;      /* s->hist and z hold the candidates' bucket sums and
                           sum (every path but top-k's) */
    cand_source src;    /* where the candidates are (s->list or the logits) */
} outcome;

/* e of one logit (sample_exp.h: 0 for -inf, NaN and underflow) */
static inline double weight(float x, double m, double temp) {
    if (x == m) return 1.0;
    return qwi_sample_exp(((double)x - m) / temp);
}

/* ids per qwi_sample_weights call: its output stays in L1 */
#define WEIGHT_CHUNK 256

/* Z' of the definition: the e of s->sorted[0..kept) added in ascending id
 * order. The ids are distinct and < vocab, so no sort is needed: each e
 * goes to its id's place in a dense array and its id into a bitmap, both in
 * s->list's memory (no longer needed once the kept set is in s->sorted;
 * the list-free paths never filled it), and the bitmap is walked in id
 * order. O(kept + vocab / 64), where sorting the kept ids was up to
 * ~140,000 of them (top-p 0.9 over a flat distribution). */
static double sum_in_id_order(qwi_sample_scratch *s, int32_t kept, int32_t vocab) {
    double *dense = (double *)s->list;
    uint64_t *mark = (uint64_t *)(dense + vocab);
    const int32_t words = (vocab + 63) / 64;
    memset(mark, 0, (size_t)words * sizeof *mark);
    for (int32_t j = 0; j < kept; j++) {
        const int32_t id = s->sorted[j].id;
        dense[id] = s->sorted[j].e;
        mark[id >> 6] |= 1ull << (id & 63);
    }
    double z = 0;
    for (int32_t w = 0; w < words; w++)
        for (uint64_t b = mark[w]; b; b &= b - 1) z += dense[w * 64 + __builtin_ctzll(b)];
    return z;
}

/* The weights of the present ids with e > floor_e, a chunk at a time in
 * one vector pass (the same bits as weight()), then in id order: their
 * count is returned, their sum is added to *z and their bucket sums go
 * to s->hist (cleared first) in the same loop - the same additions in the
 * same (id) order as separate passes would make. keep_list: also write
 * them to s->list. */
static inline __attribute__((always_inline)) int32_t
candidates(const float *logits, int32_t vocab, const uint8_t *banned, double m, double temp,
           double floor_e, qwi_sample_scratch *s, double *z, const int keep_list) {
    double w[WEIGHT_CHUNK];
    int32_t n = 0;
    memset(s->hist, 0, sizeof s->hist);
    for (int32_t i0 = 0; i0 < vocab; i0 += WEIGHT_CHUNK) {
        const int32_t c = vocab - i0 < WEIGHT_CHUNK ? vocab - i0 : WEIGHT_CHUNK;
        qwi_sample_weights(logits + i0, c, m, temp, w);
        for (int32_t j = 0; j < c; j++) {
            const double e = w[j];
            if (!(e > floor_e) || (banned && banned[i0 + j])) continue;
            if (keep_list) s->list[n] = (cand){e, i0 + j};
            n++;
            s->hist[bucket_of(e)] += e;
            *z += e;
        }
    }
    return n;
}

/* The transforms of the definition over one row. need_list: the caller
 * reads every candidate of plain sampling from s->list (qwi_sample_probs);
 * otherwise top-p and plain sampling leave the list unbuilt - a 16-byte
 * write per vocabulary id, 2.4 MB a row for Qwen3 - and prefix_o finds
 * the few ids it sorts in the logits again. */
static outcome transform(const float *logits, int32_t vocab, const qwi_sampling *p,
                         qwi_sample_scratch *s, int need_list) {
    outcome o = {0, 1, 0, 0, 0, {0}};
    const uint8_t *banned = p->num_banned > 0 && p->banned ? s->banned : NULL;
    double temp = (double)p->temperature;
    o.src.list = s->list;
    int32_t n = 0;
    int use_k = p->top_k > 0 && p->top_k < vocab;   /* k >= vocab keeps all */
    if (use_k) {
        n = top_k_select(logits, vocab, banned, p->top_k, s);
        double m = -INFINITY;
        for (int32_t i = 0; i < n; i++) m = s->list[i].e > m ? s->list[i].e : m;
        int32_t w = 0;
        for (int32_t i = 0; i < n; i++) {
            double e = weight((float)s->list[i].e, m, temp);
            if (e > 0) s->list[w++] = (cand){e, s->list[i].id};
        }
        n = w;
    } else {
        float m = -INFINITY;
        if (!banned) m = qwi_logit_max(logits, vocab);
        else
            for (int32_t i = 0; i < vocab; i++) {
                float x = logit_at(logits, banned, i);
                m = x > m ? x : m;
            }
        /* min-p alone keeps only e >= min(min_p, 1) (e_max is the top
         * id's exp(0) = 1), so the list takes only e above half that and
         * stays short; the min-p step below trims it exactly. Top-p and
         * plain sampling keep every e > 0 (NaN, -inf and underflow weigh 0). */
        double floor_e = 0;
        if (!(p->top_p < 1.0f) && p->min_p > 0.0f)
            floor_e = 0.5 * (p->min_p < 1.0f ? (double)p->min_p : 1.0);
        const int list_free = !need_list && floor_e == 0;
        if (list_free)
            o.src = (cand_source){NULL, logits, banned, vocab, (double)m, temp};
        if (m != -INFINITY) {
            o.have_hist = 1;
            /* two copies of one loop: with the store test inside, GCC kept
             * the branch (~4% of plain sampling) */
            if (list_free) n = candidates(logits, vocab, banned, (double)m, temp, floor_e, s, &o.z, 0);
            else n = candidates(logits, vocab, banned, (double)m, temp, floor_e, s, &o.z, 1);
        }
    }
    if (n == 0) {
        o.fallback = lowest_unbanned(vocab, banned);
        return o;
    }
    int top_p = p->top_p < 1.0f;   /* NaN: off */
    int min_p = p->min_p > 0.0f;
    int32_t kept;
    if (top_p) {
        double z = o.z;   /* summed with the list where have_hist */
        if (!o.have_hist)
            for (int32_t i = 0; i < n; i++) z += s->list[i].e;
        int found;
        kept = prefix_o(s, &o.src, n, (double)p->top_p * z, 0, o.have_hist, &found);
    } else if (min_p || use_k) {
        /* small sets (top-k, or min-p's few survivors): sort them whole */
        memcpy(s->sorted, s->list, (size_t)n * sizeof(cand));
        kept = n;
        if (min_p) {
            double emax = 0;
            for (int32_t i = 0; i < n; i++) emax = s->list[i].e > emax ? s->list[i].e : emax;
            double th = (p->min_p < 1.0f ? (double)p->min_p : 1.0) * emax;
            kept = 0;
            for (int32_t i = 0; i < n; i++)
                if (s->list[i].e >= th) s->sorted[kept++] = s->list[i];
            min_p = 0;
        }
        sort_o(s->sorted, s->tmp, kept);
    } else {
        double z = o.z;
        if (!o.have_hist)
            for (int32_t i = 0; i < n; i++) z += s->list[i].e;
        o.n = n;
        o.sorted = 0;
        o.z = z;
        return o;
    }
    if (min_p) {
        double th = (p->min_p < 1.0f ? (double)p->min_p : 1.0) * s->sorted[0].e;
        int32_t j = 1;
        while (j < kept && s->sorted[j].e >= th) j++;
        kept = j;
    }
    o.n = kept;
    o.z = sum_in_id_order(s, kept, vocab);
    return o;
}

static void mark_banned(qwi_sample_scratch *s, const qwi_sampling *p, int32_t vocab, uint8_t v) {
    if (!p->banned) return;
    for (int32_t i = 0; i < p->num_banned; i++) {
        int32_t id = p->banned[i];
        if (id >= 0 && id < vocab) s->banned[id] = v;
    }
}

/* The row the transforms read: logits itself, or, when p has penalties or
 * a bias to apply, their result in s->pen (penalties.h). O(len + vocab). */
static const float *penalised(const float *logits, int32_t vocab, const qwi_sampling *p, qwi_sample_scratch *s) {
    if (!qwi_penalties_active(p)) return logits;
    memcpy(s->pen, logits, (size_t)vocab * sizeof(float));
    int32_t n = qwi_penalties_collect(p, vocab, s->slot, s->ents);
    for (int32_t j = 0; j < n; j++) {
        const qwi_penalty_entry *e = &s->ents[j];
        s->pen[e->id] = qwi_penalty_apply(s->pen[e->id], e, p->repetition_penalty, p->frequency_penalty,
                                          p->presence_penalty);
    }
    return s->pen;
}

/* Greedy without scratch (misuse fallback): bans by linear search, and
 * penalties by direct scans (slow, but the same definition). */
static int32_t argmax_noscratch(const float *logits, int32_t vocab, const qwi_sampling *p) {
    int32_t best = -1;
    float bx = -INFINITY;
    bool pen = qwi_penalties_active(p);
    for (int32_t i = 0; i < vocab; i++) {
        float x = pen ? qwi_penalties_value(p, i, logits[i]) : logits[i];
        if (isnan(x) || !(x > bx)) continue;
        int ban = 0;
        for (int32_t j = 0; p->banned && j < p->num_banned && !ban; j++) ban = p->banned[j] == i;
        if (!ban) {
            bx = x;
            best = i;
        }
    }
    return best >= 0 ? best : 0;
}

int32_t qwi_sample(const float *logits, int32_t vocab, const qwi_sampling *p,
                   int64_t position, qwi_sample_scratch *scratch) {
    if (vocab <= 0 || !logits || !p) return 0;
    if (!scratch || scratch->cap < vocab) return argmax_noscratch(logits, vocab, p);
    logits = penalised(logits, vocab, p, scratch);
    mark_banned(scratch, p, vocab, 1);
    const uint8_t *banned = p->num_banned > 0 && p->banned ? scratch->banned : NULL;
    int32_t tok;
    if (!(p->temperature > 0.0f)) {
        tok = argmax(logits, vocab, banned);
    } else {
        outcome o = transform(logits, vocab, p, scratch, 0);
        if (o.n == 0) {
            tok = o.fallback;
        } else {
            double target = qwi_rng_uniform(p->seed, position) * o.z;
            const cand *c = scratch->sorted;
            int32_t len = o.n;
            if (!o.sorted) {
                int found;
                len = prefix_o(scratch, &o.src, o.n, target, 1, o.have_hist, &found);
            }
            double cum = 0;
            tok = c[len - 1].id;
            for (int32_t j = 0; j < len; j++) {
                cum += c[j].e;
                if (cum > target) {
                    tok = c[j].id;
                    break;
                }
            }
        }
    }
    mark_banned(scratch, p, vocab, 0);
    return tok;
}

int32_t qwi_sample_probs(const float *logits, int32_t vocab, const qwi_sampling *p,
                         float *probs, qwi_sample_scratch *scratch) {
    if (vocab <= 0 || !logits || !p || !probs) return 0;
    memset(probs, 0, (size_t)vocab * sizeof *probs);
    if (!scratch || scratch->cap < vocab) {
        probs[argmax_noscratch(logits, vocab, p)] = 1.0f;
        return 1;
    }
    logits = penalised(logits, vocab, p, scratch);
    mark_banned(scratch, p, vocab, 1);
    const uint8_t *banned = p->num_banned > 0 && p->banned ? scratch->banned : NULL;
    int32_t count = 1;
    if (!(p->temperature > 0.0f)) {
        probs[argmax(logits, vocab, banned)] = 1.0f;
    } else {
        outcome o = transform(logits, vocab, p, scratch, 1);
        if (o.n == 0) {
            probs[o.fallback] = 1.0f;
        } else {
            const cand *c = o.sorted ? scratch->sorted : scratch->list;
            count = 0;
            for (int32_t j = 0; j < o.n; j++) {
                probs[c[j].id] = (float)(c[j].e / o.z);
                count += probs[c[j].id] > 0;
            }
        }
    }
    mark_banned(scratch, p, vocab, 0);
    return count;
}
