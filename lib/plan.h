/*
 * plan.h - turning the scheduler's decisions into one flat varlen batch
 * (DESIGN.md step 3): token ids, positions, slot mapping, per-sequence query
 * offsets, context lengths and block tables.
 *
 * Owns: every array a qwi_plan points to, sized once for the engine's
 * limits, so building a plan never allocates.
 */
#ifndef QWI_PLAN_H
#define QWI_PLAN_H

#include "backend.h"
#include "scheduler.h"

typedef struct qwi_plan_buffers {
    int32_t max_tokens, max_seqs, max_blocks_per_seq, block_size, vocab_size;
    int32_t *token_ids, *positions, *slot_mapping;
    int32_t *query_start, *context_lens, *block_tables, *sampled;
    uint8_t *is_decode, *do_sample, *want_logits;
    qwi_sampling *sampling;
    float *logits;               /* [max_seqs * vocab], allocated on first need */
    /* logprobs.c: allocated on first need (qwi_logprobs_plan_seq) */
    int8_t *lp_n, *plp_n;        /* [max_seqs]                                */
    int32_t *plp_target;         /* [max_tokens]                              */
    qw_logprob *lp_out;          /* [max_seqs][QWI_LP_STRIDE]                 */
    qw_logprob *plp_out;         /* [max_tokens][QWI_LP_STRIDE]               */
    qwi_plan plan;
} qwi_plan_buffers;

/* Allocate buffers for steps of up to max_tokens rows and max_seqs
 * sequences whose tables have at most max_blocks_per_seq blocks. On failure
 * nothing stays allocated. */
qw_status qwi_plan_buffers_init(qwi_plan_buffers *b, int32_t max_tokens, int32_t max_seqs,
                                int32_t max_blocks_per_seq, int32_t block_size, int32_t vocab_size);

/* Free the buffers. */
void qwi_plan_buffers_destroy(qwi_plan_buffers *b);

/* Make sure the logits copy-out buffer exists (first request with a logits
 * callback). QW_ERR_OUT_OF_MEMORY leaves the buffers as they were. */
qw_status qwi_plan_buffers_need_logits(qwi_plan_buffers *b);

/* Fill b->plan from a schedule: rows for each entry's new tokens, its block
 * table, and do_sample where the entry reaches the end of its tokens.
 * Sampling parameters and want_logits are left for the caller to fill.
 * Returns the plan (owned by b). */
qwi_plan *qwi_plan_build(qwi_plan_buffers *b, const qwi_sched_output *out);

#endif
