/*
 * scheduler.c - continuous batching scheduler; see scheduler.h for the policy.
 */
#include <stdlib.h>
#include <string.h>

#include "scheduler.h"

qw_status qwi_sched_init(qwi_sched *s, qwi_kv_pool *kv, const qwi_sched_config *cfg,
                         int32_t max_tokens) {
    memset(s, 0, sizeof *s);
    if (cfg->max_num_seqs <= 0 || cfg->max_num_batched_tokens <= 0 || max_tokens <= 0)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "scheduler: max_num_seqs, token budget and max tokens must be > 0");
    s->kv = kv;
    s->cfg = *cfg;
    if (s->cfg.max_num_partial_prefills < 1) s->cfg.max_num_partial_prefills = 1;
    if (s->cfg.long_prefill_threshold <= 0)
        s->cfg.long_prefill_threshold =
            QWI_MAX(1, s->cfg.max_num_batched_tokens / s->cfg.max_num_partial_prefills);
    s->max_blocks_per_seq = qwi_kv_blocks_for(kv, max_tokens);
    size_t n = (size_t)cfg->max_num_seqs;
    s->running = calloc(n, sizeof *s->running);
    s->order = calloc(n, sizeof *s->order);
    s->entries = calloc(n, sizeof *s->entries);
    s->hits = calloc((size_t)s->max_blocks_per_seq, sizeof *s->hits);
    s->waiting_cap = 64;
    s->waiting = calloc((size_t)s->waiting_cap, sizeof *s->waiting);
    if (!s->running || !s->order || !s->entries || !s->hits || !s->waiting) {
        qwi_sched_destroy(s);
        return qwi_fail(QW_ERR_OUT_OF_MEMORY, "scheduler: cannot allocate lists");
    }
    return QW_OK;
}

void qwi_sched_destroy(qwi_sched *s) {
    free(s->running);
    free(s->order);
    free(s->entries);
    free(s->hits);
    free(s->waiting);
    memset(s, 0, sizeof *s);
}

int64_t qwi_sched_effective_priority(const qwi_sched *s, const qwi_seq *seq) {
    int64_t p = seq->priority;
    if (s->cfg.aging_steps > 0) p -= (int64_t)((s->step - seq->arrival_step) / (uint64_t)s->cfg.aging_steps);
    return p;
}

/* a ranks before b: better effective priority, then earlier arrival. */
static bool ranks_before(const qwi_sched *s, const qwi_seq *a, const qwi_seq *b) {
    int64_t pa = qwi_sched_effective_priority(s, a), pb = qwi_sched_effective_priority(s, b);
    if (pa != pb) return pa < pb;
    return a->arrival < b->arrival;
}

static qw_status waiting_push(qwi_sched *s, qwi_seq *seq) {
    if (s->num_waiting == s->waiting_cap) {
        int32_t cap = s->waiting_cap * 2;
        qwi_seq **w = realloc(s->waiting, sizeof *w * (size_t)cap);
        if (!w) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "scheduler: waiting queue of %d", cap);
        s->waiting = w;
        s->waiting_cap = cap;
    }
    s->waiting[s->num_waiting++] = seq;
    seq->state = QWI_SEQ_WAITING;
    return QW_OK;
}

static void waiting_remove_at(qwi_sched *s, int32_t i) {
    s->waiting[i] = s->waiting[--s->num_waiting];
}

/* The best-ranked waiting sequence not passed over in this step, or -1. */
static int32_t waiting_best(const qwi_sched *s) {
    int32_t best = -1;
    for (int32_t i = 0; i < s->num_waiting; i++) {
        if (s->waiting[i]->skipped_step == s->step) continue;
        if (best < 0 || ranks_before(s, s->waiting[i], s->waiting[best])) best = i;
    }
    return best;
}

qw_status qwi_sched_add(qwi_sched *s, qwi_seq *seq) {
    seq->arrival_step = s->step;
    return waiting_push(s, seq);
}

static void running_remove(qwi_sched *s, qwi_seq *seq) {
    for (int32_t i = 0; i < s->num_running; i++) {
        if (s->running[i] == seq) {
            memmove(&s->running[i], &s->running[i + 1], sizeof *s->running * (size_t)(s->num_running - i - 1));
            s->num_running--;
            return;
        }
    }
}

void qwi_sched_remove(qwi_sched *s, qwi_seq *seq) {
    if (seq->state == QWI_SEQ_RUNNING) {
        running_remove(s, seq);
    } else if (seq->state == QWI_SEQ_WAITING) {
        for (int32_t i = 0; i < s->num_waiting; i++)
            if (s->waiting[i] == seq) {
                waiting_remove_at(s, i);
                break;
            }
    }
    if (seq->state != QWI_SEQ_NEW) seq->state = QWI_SEQ_FINISHED;
}

/* ---- one step ------------------------------------------------------------- */

/* The state of the step being built. */
typedef struct step_ctx {
    int32_t budget;
    int32_t num_entries;
    int32_t num_prefills;     /* entries whose chunk leaves the prefill unfinished */
    int32_t preempted;
} step_ctx;

/* The worst-ranked running sequence, or NULL. */
static qwi_seq *running_worst(const qwi_sched *s) {
    qwi_seq *worst = NULL;
    for (int32_t i = 0; i < s->num_running; i++)
        if (!worst || ranks_before(s, worst, s->running[i])) worst = s->running[i];
    return worst;
}

/* Undo a running sequence's entry in this step, if it has one. */
static void unschedule(qwi_sched *s, step_ctx *c, qwi_seq *seq) {
    if (seq->scheduled_step != s->step) return;
    for (int32_t i = 0; i < c->num_entries; i++) {
        if (s->entries[i].seq != seq) continue;
        c->budget += s->entries[i].num_new_tokens;
        if (s->entries[i].num_new_tokens < seq->num_tokens - seq->num_computed_tokens) c->num_prefills--;
        s->entries[i] = s->entries[--c->num_entries];
        break;
    }
    seq->scheduled_step = 0;
}

/* Preempt by recompute: the simplest correct policy for a pool without swap
 * space. Outputs are unchanged because recomputed KV is bit-identical and
 * sampling is keyed by (seed, position). Returns false (nothing changed)
 * only if the waiting queue could not grow to take the victim. */
static bool preempt(qwi_sched *s, step_ctx *c, qwi_seq *victim) {
    unschedule(s, c, victim);
    running_remove(s, victim);
    if (waiting_push(s, victim) != QW_OK) {
        s->running[s->num_running++] = victim;
        return false;
    }
    qwi_kv_release(s->kv, &victim->table);
    victim->num_computed_tokens = 0;
    victim->num_preemptions++;
    s->total_preemptions++;
    c->preempted++;
    return true;
}

/* Free blocks held by waiting sequences other than keep (a session's kept
 * KV waiting for admission): cheaper than preempting running work. */
static bool release_waiting_holders(qwi_sched *s, const qwi_seq *keep) {
    bool any = false;
    for (int32_t i = 0; i < s->num_waiting; i++) {
        qwi_seq *w = s->waiting[i];
        if (w == keep || w->table.num_blocks == 0) continue;
        qwi_kv_release(s->kv, &w->table);
        w->num_computed_tokens = 0;
        any = true;
    }
    return any;
}

static bool reclaim_idle(qwi_sched *s) { return s->reclaim && s->reclaim(s->reclaim_ctx); }

static void add_entry(qwi_sched *s, step_ctx *c, qwi_seq *seq, int32_t take) {
    /* Only a prefill split across steps is "partial": a prompt that
     * completes in this step does not hold back the others. */
    if (take < seq->num_tokens - seq->num_computed_tokens) c->num_prefills++;
    s->entries[c->num_entries].seq = seq;
    s->entries[c->num_entries].num_new_tokens = take;
    c->num_entries++;
    c->budget -= take;
    seq->scheduled_step = s->step;
}

/* Tokens to schedule now of the want a sequence has left: within the
 * budget, capped at the long-prefill threshold when other sequences want to
 * prefill too. Admission without chunked prefill does not come here. */
static int32_t chunk_for(const qwi_sched *s, const step_ctx *c, int32_t want, bool contended) {
    int32_t take = QWI_MIN(want, c->budget);
    if (want > 1 && contended) take = QWI_MIN(take, s->cfg.long_prefill_threshold);
    return take;
}

/* Schedule one running sequence, preempting worse ones if blocks run out.
 * Returns false if seq itself was preempted. */
static bool schedule_running(qwi_sched *s, step_ctx *c, qwi_seq *seq, int32_t take) {
    int64_t need = (int64_t)seq->num_computed_tokens + take;
    while (!qwi_kv_can_reserve(s->kv, &seq->table, need)) {
        if (reclaim_idle(s) || release_waiting_holders(s, NULL)) continue;
        qwi_seq *victim = running_worst(s);
        if (!preempt(s, c, victim)) return false;
        if (victim == seq) return false;
    }
    if (qwi_kv_reserve(s->kv, &seq->table, need) != QW_OK) return false;
    add_entry(s, c, seq, take);
    return true;
}

typedef enum admit_result { ADMITTED, PASSED_OVER, STOP } admit_result;

/* Try to admit the best waiting sequence. STOP when admission should end
 * for this step; PASSED_OVER when only this sequence cannot enter now. */
static admit_result admit_one(qwi_sched *s, step_ctx *c, bool contended) {
    int32_t wi = waiting_best(s);
    if (wi < 0) return STOP;
    qwi_seq *seq = s->waiting[wi];
    int64_t prio = qwi_sched_effective_priority(s, seq);

    /* A slot: preempt a running sequence of strictly worse priority if full. */
    while (s->num_running >= s->cfg.max_num_seqs) {
        qwi_seq *worst = running_worst(s);
        if (!worst || qwi_sched_effective_priority(s, worst) <= prio) return STOP;
        if (!preempt(s, c, worst)) return STOP;
    }

    const int32_t bs = s->kv->block_size;
    int32_t hits = 0;
    uint64_t last_key = 0;
    int32_t computed = seq->num_computed_tokens;
    if (seq->table.num_blocks == 0 && !seq->no_prefix_lookup) {
        /* The last token is always recomputed, so its logits exist. */
        int32_t max_blocks = QWI_MIN((seq->num_tokens - 1) / bs, s->max_blocks_per_seq);
        hits = qwi_kv_find_prefix(s->kv, seq->tokens, max_blocks, seq->salt, s->hits, &last_key);
        computed = hits * bs;
    }
    int32_t want = seq->num_tokens - computed;
    int32_t take;
    if (!s->cfg.chunked_prefill && want <= s->cfg.max_num_batched_tokens) {
        /* No chunking: the prompt runs whole or waits, with what queues
         * behind it, for a step whose budget holds all of it. (Only a
         * sequence preempted after growing past the whole budget is cut
         * below, or it could never run again.) */
        if (want > c->budget) return STOP;
        take = want;
    } else {
        take = chunk_for(s, c, want, contended);
    }
    if (take <= 0) return STOP;
    if (take < want && c->num_prefills >= s->cfg.max_num_partial_prefills) {
        /* A long prompt must wait for a partial-prefill slot; shorter ones
         * behind it may still complete within this step. */
        seq->skipped_step = s->step;
        return PASSED_OVER;
    }

    for (;;) {
        int32_t have = seq->table.num_blocks + hits;
        int32_t need = qwi_kv_blocks_for(s->kv, (int64_t)computed + take) - have;
        int32_t avail = qwi_kv_num_available(s->kv) - qwi_kv_count_evictable(s->kv, s->hits, hits);
        if (need <= avail) break;
        if (reclaim_idle(s) || release_waiting_holders(s, seq)) continue;
        qwi_seq *worst = running_worst(s);
        if (!worst || qwi_sched_effective_priority(s, worst) <= prio) return STOP;
        if (!preempt(s, c, worst)) return STOP;
    }
    if (hits > 0) qwi_kv_take_prefix(s->kv, &seq->table, s->hits, hits, last_key);
    if (seq->table.num_blocks == hits) seq->num_computed_tokens = computed;
    if (qwi_kv_reserve(s->kv, &seq->table, (int64_t)seq->num_computed_tokens + take) != QW_OK) return STOP;
    if (!seq->admitted_once) {
        seq->admitted_once = true;
        seq->num_cached_tokens = seq->num_computed_tokens;
    }
    s->prefix_queries += (uint64_t)seq->num_tokens;
    s->prefix_hits += (uint64_t)hits * (uint64_t)bs;

    /* the index may have moved if preemption pushed onto waiting */
    for (wi = 0; s->waiting[wi] != seq; wi++) {}
    waiting_remove_at(s, wi);
    seq->state = QWI_SEQ_RUNNING;
    s->running[s->num_running++] = seq;
    add_entry(s, c, seq, take);
    return ADMITTED;
}

/* Sort the snapshot of running sequences best rank first (insertion sort:
 * max_num_seqs is small and the order is nearly stable between steps). */
static void sort_by_rank(const qwi_sched *s, qwi_seq **v, int32_t n) {
    for (int32_t i = 1; i < n; i++) {
        qwi_seq *x = v[i];
        int32_t j = i - 1;
        while (j >= 0 && ranks_before(s, x, v[j])) {
            v[j + 1] = v[j];
            j--;
        }
        v[j + 1] = x;
    }
}

void qwi_sched_schedule(qwi_sched *s, qwi_sched_output *out) {
    s->step++;
    step_ctx c = {.budget = s->cfg.max_num_batched_tokens};

    int32_t n = s->num_running, prefilling = 0;
    memcpy(s->order, s->running, sizeof *s->order * (size_t)n);
    sort_by_rank(s, s->order, n);
    for (int32_t i = 0; i < n; i++) prefilling += s->order[i]->num_tokens - s->order[i]->num_computed_tokens > 1;
    /* More than one sequence wants prefill: cap long chunks so all progress. */
    bool contended = s->num_waiting + prefilling > 1;

    /* 1. decodes, 2. partial prefills; each list best rank first */
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t i = 0; i < n && c.budget > 0; i++) {
            qwi_seq *seq = s->order[i];
            if (seq->state != QWI_SEQ_RUNNING || seq->scheduled_step == s->step) continue;
            bool decode = seq->num_tokens - seq->num_computed_tokens == 1;
            if (decode != (pass == 0)) continue;
            /* Without chunking a running sequence has more than one token
             * left only when it is the recompute of a preempted sequence
             * longer than the budget (see admit_one): chunked as usual. */
            int32_t take = chunk_for(s, &c, seq->num_tokens - seq->num_computed_tokens, contended);
            if (take <= 0) continue;
            if (take < seq->num_tokens - seq->num_computed_tokens &&
                c.num_prefills >= s->cfg.max_num_partial_prefills)
                continue;
            schedule_running(s, &c, seq, take);
        }
    }

    /* 3. admissions */
    while (c.preempted == 0 && c.budget > 0 && s->num_waiting > 0) {
        if (admit_one(s, &c, contended) == STOP) break;
    }

    out->entries = s->entries;
    out->num_entries = c.num_entries;
    out->num_batched_tokens = s->cfg.max_num_batched_tokens - c.budget;
    out->num_preempted = c.preempted;
}

void qwi_sched_commit(qwi_sched *s, const qwi_sched_output *out) {
    for (int32_t i = 0; i < out->num_entries; i++) {
        qwi_seq *seq = out->entries[i].seq;
        seq->num_computed_tokens += out->entries[i].num_new_tokens;
        qwi_kv_register(s->kv, &seq->table, seq->tokens, seq->num_computed_tokens, seq->salt);
    }
}
