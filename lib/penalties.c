/*
 * penalties.c - which ids the penalties and the logit bias touch, for the
 * CPU sampler (one row) and packed for a device (one step's rows); see
 * penalties.h for the definition they implement.
 */
#include <stdlib.h>
#include <string.h>

#include "penalties.h"

/* The entry of id, made on first sight. */
static inline qwi_penalty_entry *entry_for(int32_t id, int32_t *slot, qwi_penalty_entry *out, int32_t *n) {
    if (slot[id] < 0) {
        slot[id] = *n;
        out[*n] = (qwi_penalty_entry){id, 0, 0.0f, 0};
        (*n)++;
    }
    return &out[slot[id]];
}

int32_t qwi_penalties_collect(const qwi_sampling *p, int32_t vocab, int32_t *slot, qwi_penalty_entry *out) {
    int32_t n = 0;
    if (p->bias_ids && p->bias) {
        for (int32_t i = 0; i < p->num_bias; i++) {
            int32_t id = p->bias_ids[i];
            if (id < 0 || id >= vocab) continue;
            qwi_penalty_entry *e = entry_for(id, slot, out, &n);
            e->bias = p->bias[i];
            e->flags |= QWI_PEN_BIAS;
        }
    }
    if (qwi_repetition_on(p->repetition_penalty)) {
        for (int pass = 0; pass < 2; pass++) {
            const int32_t *t = pass ? p->output_tokens : p->prompt_tokens;
            int32_t len = pass ? p->num_output_tokens : p->num_prompt_tokens;
            for (int32_t i = 0; t && i < len; i++)
                if (t[i] >= 0 && t[i] < vocab) entry_for(t[i], slot, out, &n)->flags |= QWI_PEN_SEEN;
        }
    }
    if ((p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f) && p->output_tokens) {
        for (int32_t i = 0; i < p->num_output_tokens; i++) {
            int32_t id = p->output_tokens[i];
            if (id >= 0 && id < vocab) entry_for(id, slot, out, &n)->count++;
        }
    }
    for (int32_t j = 0; j < n; j++) slot[out[j].id] = -1;
    return n;
}

static bool contains(const int32_t *t, int32_t len, int32_t id) {
    for (int32_t i = 0; t && i < len; i++)
        if (t[i] == id) return true;
    return false;
}

float qwi_penalties_value(const qwi_sampling *p, int32_t id, float x) {
    qwi_penalty_entry e = {id, 0, 0.0f, 0};
    for (int32_t i = 0; p->bias_ids && p->bias && i < p->num_bias; i++)
        if (p->bias_ids[i] == id) {
            e.bias = p->bias[i];
            e.flags |= QWI_PEN_BIAS;
        }
    if (qwi_repetition_on(p->repetition_penalty) &&
        (contains(p->prompt_tokens, p->num_prompt_tokens, id) || contains(p->output_tokens, p->num_output_tokens, id)))
        e.flags |= QWI_PEN_SEEN;
    if (p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f)
        for (int32_t i = 0; p->output_tokens && i < p->num_output_tokens; i++) e.count += p->output_tokens[i] == id;
    return qwi_penalty_apply(x, &e, p->repetition_penalty, p->frequency_penalty, p->presence_penalty);
}

/* Grow *arr (elem bytes each) to hold at least need; false on OOM. */
static bool grow(void **arr, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return true;
    int64_t c = *cap > 0 ? *cap : 16;
    while (c < need) c *= 2;
    void *g = realloc(*arr, (size_t)c * elem);
    if (!g) return false;
    *arr = g;
    *cap = c;
    return true;
}

qw_status qwi_penalties_pack(qwi_penalty_pack *pk, const qwi_sampling *sampling, const uint8_t *do_sample,
                             const int32_t *row_seq, int32_t nrows, int32_t vocab) {
    pk->num_rows = 0;
    pk->num_ents = 0;
    for (int32_t i = 0; i < nrows; i++) {
        int32_t s = row_seq[i];
        if (!do_sample[s] || !qwi_penalties_active(&sampling[s])) continue;
        const qwi_sampling *p = &sampling[s];
        if (pk->vocab != vocab) {
            free(pk->slot);
            pk->slot = malloc((size_t)vocab * sizeof(int32_t));
            pk->vocab = pk->slot ? vocab : 0;
            if (!pk->slot) goto oom;
            memset(pk->slot, 0xff, (size_t)vocab * sizeof(int32_t));
        }
        /* at most one entry per token and per bias pair, and per id */
        int64_t bound = (int64_t)p->num_prompt_tokens + p->num_output_tokens + p->num_bias;
        bound = bound < vocab ? bound : vocab;
        int64_t rcap = pk->rows_cap;
        if (!grow((void **)&pk->rows, &rcap, (int64_t)pk->num_rows + 1, sizeof *pk->rows)) goto oom;
        pk->rows_cap = (int32_t)rcap;
        if (!grow((void **)&pk->ents, &pk->ents_cap, pk->num_ents + bound, sizeof *pk->ents)) goto oom;
        int32_t n = qwi_penalties_collect(p, vocab, pk->slot, pk->ents + pk->num_ents);
        pk->rows[pk->num_rows++] = (qwi_penalty_row){i, (int32_t)pk->num_ents, n, p->repetition_penalty,
                                                     p->frequency_penalty, p->presence_penalty};
        pk->num_ents += n;
    }
    return QW_OK;
oom:
    pk->num_rows = 0;
    pk->num_ents = 0;
    return qwi_fail(QW_ERR_OUT_OF_MEMORY, "penalties: out of memory packing a step's penalties");
}

void qwi_penalties_pack_apply(const qwi_penalty_pack *pk, float *logits, int32_t vocab) {
    for (int32_t r = 0; r < pk->num_rows; r++) {
        const qwi_penalty_row *row = &pk->rows[r];
        float *lg = logits + (size_t)row->row * (size_t)vocab;
        for (int32_t j = 0; j < row->count; j++) {
            const qwi_penalty_entry *e = &pk->ents[row->start + j];
            lg[e->id] = qwi_penalty_apply(lg[e->id], e, row->rep, row->freq, row->pres);
        }
    }
}

void qwi_penalties_pack_free(qwi_penalty_pack *pk) {
    free(pk->rows);
    free(pk->ents);
    free(pk->slot);
    memset(pk, 0, sizeof *pk);
}
