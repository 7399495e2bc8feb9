/*
 * penalties.h - repetition, presence and frequency penalties and the logit
 * bias, the one definition every backend applies (lib/sample.c on the CPU,
 * cuda/penalties.cu on the GPU).
 *
 * For every id i, in float32, one rounding per operation (no fused
 * multiply-add), in vLLM's order:
 *
 *   x = logit_i
 *   x = x + bias_i                        (logit bias, where i has one)
 *   x = x > 0 ? x / r : x * r             (repetition penalty r, Hugging
 *                                          Face / vLLM: where i occurs in
 *                                          the prompt or the output)
 *   x = x - f * (float)c_i                (frequency penalty f, OpenAI)
 *   x = x - p                             (presence penalty p, OpenAI:
 *                                          where c_i > 0)
 *
 * c_i is the number of times i occurs in the output (the generated tokens);
 * the frequency and presence steps are only taken where c_i > 0. The
 * "prompt" is every token of the sequence before its first generated one
 * (a session's history included). NaN, -inf and banned ids stay absent
 * (-inf times or minus anything finite is -inf; banned is a separate flag).
 *
 * Cost: nothing when qwi_penalties_active() is false. Otherwise
 * O(prompt + output + bias) to collect the touched ids (qwi_penalties_collect)
 * plus the copy of the row the sampler works on.
 */
#ifndef QWI_PENALTIES_H
#define QWI_PENALTIES_H

#include "sample.h"

#ifdef __CUDACC__
#define QWI_PEN_HD __host__ __device__
#else
#define QWI_PEN_HD
#endif

/* One id the penalties or the bias touch. 16 bytes; the CUDA backend
 * uploads arrays of these as they are. */
typedef struct qwi_penalty_entry {
    int32_t id;
    int32_t count;    /* occurrences in the output                   */
    float bias;       /* valid where flags & QWI_PEN_BIAS            */
    int32_t flags;
} qwi_penalty_entry;

#define QWI_PEN_SEEN 1   /* in the prompt or the output (repetition)  */
#define QWI_PEN_BIAS 2   /* has a logit bias                          */

/* Whether the repetition penalty r changes anything: r > 0 and r != 1
 * (NaN, 0 and negatives are treated as off, as a zeroed struct is). */
static inline QWI_PEN_HD bool qwi_repetition_on(float r) { return r > 0.0f && r != 1.0f; }

/* Whether p has anything to apply: a bias, a repetition penalty with any
 * token, or a presence/frequency penalty with any output token. */
static inline bool qwi_penalties_active(const qwi_sampling *p) {
    return p->num_bias > 0 ||
           (qwi_repetition_on(p->repetition_penalty) && p->num_prompt_tokens + p->num_output_tokens > 0) ||
           ((p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f) && p->num_output_tokens > 0);
}

/* The penalised logit of entry e's id from its raw logit x (definition
 * above). rep, freq, pres: the row's parameters. On the device the
 * intrinsics keep nvcc from fusing the multiply and the subtraction. */
static inline QWI_PEN_HD float qwi_penalty_apply(float x, const qwi_penalty_entry *e, float rep, float freq,
                                                 float pres) {
#ifdef __CUDA_ARCH__
    if (e->flags & QWI_PEN_BIAS) x = __fadd_rn(x, e->bias);
    if ((e->flags & QWI_PEN_SEEN) && qwi_repetition_on(rep)) x = x > 0.0f ? __fdiv_rn(x, rep) : __fmul_rn(x, rep);
    if (e->count > 0) {
        x = __fsub_rn(x, __fmul_rn(freq, (float)e->count));
        x = __fsub_rn(x, pres);
    }
#else
    if (e->flags & QWI_PEN_BIAS) x = x + e->bias;
    if ((e->flags & QWI_PEN_SEEN) && qwi_repetition_on(rep)) x = x > 0.0f ? x / rep : x * rep;
    if (e->count > 0) {
        float fc = freq * (float)e->count;   /* -ffp-contract=off: two roundings */
        x = x - fc;
        x = x - pres;
    }
#endif
    return x;
}

/* Collect into out[] one entry per distinct id in [0, vocab) that p's
 * bias, repetition penalty (prompt and output tokens) or presence/frequency
 * penalties (output tokens) touch, in order of first appearance; returns how
 * many (<= vocab). slot[0..vocab) must be -1 on entry and is -1 again on
 * return (only the touched places are written). out holds vocab entries.
 * Ids outside [0, vocab) are skipped (the engine refuses them at submit).
 * Should two bias pairs name the same id, the later one wins. */
int32_t qwi_penalties_collect(const qwi_sampling *p, int32_t vocab, int32_t *slot, qwi_penalty_entry *out);

/* The penalised logit of id from its raw logit x by direct scans of p's
 * lists: O(prompt + output + bias) per call, for callers without scratch. */
float qwi_penalties_value(const qwi_sampling *p, int32_t id, float x);

/* ---- one step's penalty work, packed for a device (cuda/penalties.cu) ----
 * Row r of the logits gets entries ents[start .. start + count) applied with
 * its parameters; the ids of one row are distinct, so a device applies them
 * in parallel with no ordering question. 24 + 16 bytes per entry, uploaded
 * as they are. */
typedef struct qwi_penalty_row {
    int32_t row, start, count;
    float rep, freq, pres;
} qwi_penalty_row;

typedef struct qwi_penalty_pack {
    qwi_penalty_row *rows;
    int32_t num_rows, rows_cap;
    qwi_penalty_entry *ents;
    int64_t num_ents, ents_cap;
    int32_t *slot;             /* [vocab], -1 between calls */
    int32_t vocab;
} qwi_penalty_pack;

/* Refill pk for logit rows i in [0, nrows) of sequence row_seq[i]: a row
 * is packed where do_sample[row_seq[i]] and sampling[row_seq[i]] has
 * penalties or a bias (qwi_penalties_active). Grows pk's arrays as needed
 * (a zeroed pk is empty; nothing is allocated while no row is active).
 * QW_ERR_OUT_OF_MEMORY leaves pk empty (num_rows 0) but valid. */
qw_status qwi_penalties_pack(qwi_penalty_pack *pk, const qwi_sampling *sampling, const uint8_t *do_sample,
                             const int32_t *row_seq, int32_t nrows, int32_t vocab);

/* The host reference of the device kernel: apply pk to logits [rows][vocab]. */
void qwi_penalties_pack_apply(const qwi_penalty_pack *pk, float *logits, int32_t vocab);

/* Free pk's arrays (pk is then empty and reusable). */
void qwi_penalties_pack_free(qwi_penalty_pack *pk);

#endif
