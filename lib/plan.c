/*
 * plan.c - build one step's flat varlen batch; see plan.h.
 */
#include <stdlib.h>
#include <string.h>

#include "plan.h"

qw_status qwi_plan_buffers_init(qwi_plan_buffers *b, int32_t max_tokens, int32_t max_seqs,
                                int32_t max_blocks_per_seq, int32_t block_size, int32_t vocab_size) {
    memset(b, 0, sizeof *b);
    b->max_tokens = max_tokens;
    b->max_seqs = max_seqs;
    b->max_blocks_per_seq = max_blocks_per_seq;
    b->block_size = block_size;
    b->vocab_size = vocab_size;
    size_t nt = (size_t)max_tokens, ns = (size_t)max_seqs;
    b->token_ids = malloc(nt * sizeof(int32_t));
    b->positions = malloc(nt * sizeof(int32_t));
    b->slot_mapping = malloc(nt * sizeof(int32_t));
    b->query_start = malloc((ns + 1) * sizeof(int32_t));
    b->context_lens = malloc(ns * sizeof(int32_t));
    b->block_tables = malloc(ns * (size_t)max_blocks_per_seq * sizeof(int32_t));
    b->sampled = malloc(ns * sizeof(int32_t));
    b->is_decode = malloc(ns);
    b->do_sample = malloc(ns);
    b->want_logits = malloc(ns);
    b->sampling = malloc(ns * sizeof(qwi_sampling));
    if (!b->token_ids || !b->positions || !b->slot_mapping || !b->query_start || !b->context_lens ||
        !b->block_tables || !b->sampled || !b->is_decode || !b->do_sample || !b->want_logits || !b->sampling) {
        qwi_plan_buffers_destroy(b);
        return qwi_fail(QW_ERR_OUT_OF_MEMORY, "plan buffers for %d tokens / %d sequences", max_tokens,
                        max_seqs);
    }
    return QW_OK;
}

void qwi_plan_buffers_destroy(qwi_plan_buffers *b) {
    free(b->token_ids);
    free(b->positions);
    free(b->slot_mapping);
    free(b->query_start);
    free(b->context_lens);
    free(b->block_tables);
    free(b->sampled);
    free(b->is_decode);
    free(b->do_sample);
    free(b->want_logits);
    free(b->sampling);
    free(b->logits);
    free(b->lp_n);
    free(b->plp_n);
    free(b->plp_target);
    free(b->lp_out);
    free(b->plp_out);
    memset(b, 0, sizeof *b);
}

qw_status qwi_plan_buffers_need_logits(qwi_plan_buffers *b) {
    if (b->logits) return QW_OK;
    b->logits = malloc((size_t)b->max_seqs * (size_t)b->vocab_size * sizeof(float));
    if (!b->logits)
        return qwi_fail(QW_ERR_OUT_OF_MEMORY, "logits buffer of %d x %d floats", b->max_seqs, b->vocab_size);
    return QW_OK;
}

qwi_plan *qwi_plan_build(qwi_plan_buffers *b, const qwi_sched_output *out) {
    const int32_t bs = b->block_size;
    int32_t row = 0;
    for (int32_t i = 0; i < out->num_entries; i++) {
        const qwi_seq *seq = out->entries[i].seq;
        const int32_t start = seq->num_computed_tokens;
        const int32_t n = out->entries[i].num_new_tokens;
        b->query_start[i] = row;
        for (int32_t t = 0; t < n; t++, row++) {
            const int32_t pos = start + t;
            b->token_ids[row] = seq->tokens[pos];
            b->positions[row] = pos;
            b->slot_mapping[row] = seq->table.blocks[pos / bs] * bs + pos % bs;
        }
        b->context_lens[i] = start + n;
        memcpy(b->block_tables + (size_t)i * (size_t)b->max_blocks_per_seq, seq->table.blocks,
               (size_t)seq->table.num_blocks * sizeof(int32_t));
        b->is_decode[i] = (uint8_t)(n == 1 && start >= seq->num_prompt_tokens);
        b->do_sample[i] = (uint8_t)(start + n == seq->num_tokens);
        b->want_logits[i] = 0;
        b->sampled[i] = -1;
    }
    b->query_start[out->num_entries] = row;

    qwi_plan *p = &b->plan;
    p->num_tokens = row;
    p->token_ids = b->token_ids;
    p->positions = b->positions;
    p->slot_mapping = b->slot_mapping;
    p->num_seqs = out->num_entries;
    p->query_start = b->query_start;
    p->context_lens = b->context_lens;
    p->block_tables = b->block_tables;
    p->max_blocks_per_seq = b->max_blocks_per_seq;
    p->is_decode = b->is_decode;
    p->do_sample = b->do_sample;
    p->sampling = b->sampling;
    p->want_logits = b->want_logits;
    p->logits_out = b->logits;
    p->sampled = b->sampled;
    /* Logprobs are off until qwi_logprobs_plan_seq marks an entry. */
    p->logprobs_n = NULL;
    p->logprobs_out = NULL;
    p->prompt_logprobs_n = NULL;
    p->prompt_target = NULL;
    p->prompt_logprobs_out = NULL;
    return p;
}
