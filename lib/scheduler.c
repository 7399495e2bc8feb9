/*
 * scheduler.c - continuous batching scheduler; see scheduler.h for the policy.
 */
#include <stdlib.h>
#include <string.h>

#include "scheduler.h"

qw_status qwi_sched_init(qwi_sched *s, qwi_kv_pool *kv, int32_t max_num_seqs,
                         int32_t max_num_batched_tokens, bool chunked_prefill) {
    memset(s, 0, sizeof *s);
    if (max_num_seqs <= 0 || max_num_batched_tokens <= 0)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "scheduler: max_num_seqs and token budget must be > 0");
    s->kv = kv;
    s->max_num_seqs = max_num_seqs;
    s->max_num_batched_tokens = max_num_batched_tokens;
    s->chunked_prefill = chunked_prefill;
    s->running = calloc((size_t)max_num_seqs, sizeof *s->running);
    s->entries = calloc((size_t)max_num_seqs, sizeof *s->entries);
    s->waiting_cap = 64;
    s->waiting = calloc((size_t)s->waiting_cap, sizeof *s->waiting);
    if (!s->running || !s->entries || !s->waiting) {
        qwi_sched_destroy(s);
        return qwi_fail(QW_ERR_OUT_OF_MEMORY, "scheduler: cannot allocate lists");
    }
    return QW_OK;
}

void qwi_sched_destroy(qwi_sched *s) {
    free(s->running);
    free(s->entries);
    free(s->waiting);
    memset(s, 0, sizeof *s);
}

/* i-th waiting sequence from the head. */
static qwi_seq **waiting_at(qwi_sched *s, int32_t i) {
    return &s->waiting[(s->waiting_head + i) % s->waiting_cap];
}

static qw_status waiting_grow(qwi_sched *s) {
    int32_t cap = s->waiting_cap * 2;
    qwi_seq **w = malloc(sizeof *w * (size_t)cap);
    if (!w) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "scheduler: waiting queue of %d", cap);
    for (int32_t i = 0; i < s->num_waiting; i++) w[i] = *waiting_at(s, i);
    free(s->waiting);
    s->waiting = w;
    s->waiting_cap = cap;
    s->waiting_head = 0;
    return QW_OK;
}

qw_status qwi_sched_add(qwi_sched *s, qwi_seq *seq) {
    if (s->num_waiting == s->waiting_cap) {
        qw_status st = waiting_grow(s);
        if (st != QW_OK) return st;
    }
    *waiting_at(s, s->num_waiting++) = seq;
    seq->state = QWI_SEQ_WAITING;
    return QW_OK;
}

/* Put a preempted sequence at the head of the queue: it was admitted before
 * everything still waiting, so FCFS order is kept. */
static qw_status waiting_push_front(qwi_sched *s, qwi_seq *seq) {
    if (s->num_waiting == s->waiting_cap) {
        qw_status st = waiting_grow(s);
        if (st != QW_OK) return st;
    }
    s->waiting_head = (s->waiting_head + s->waiting_cap - 1) % s->waiting_cap;
    s->waiting[s->waiting_head] = seq;
    s->num_waiting++;
    seq->state = QWI_SEQ_WAITING;
    return QW_OK;
}

static void waiting_pop_front(qwi_sched *s) {
    s->waiting_head = (s->waiting_head + 1) % s->waiting_cap;
    s->num_waiting--;
}

void qwi_sched_remove(qwi_sched *s, qwi_seq *seq) {
    if (seq->state == QWI_SEQ_RUNNING) {
        for (int32_t i = 0; i < s->num_running; i++) {
            if (s->running[i] == seq) {
                memmove(&s->running[i], &s->running[i + 1],
                        sizeof *s->running * (size_t)(s->num_running - i - 1));
                s->num_running--;
                break;
            }
        }
    } else if (seq->state == QWI_SEQ_WAITING) {
        for (int32_t i = 0; i < s->num_waiting; i++) {
            if (*waiting_at(s, i) == seq) {
                for (int32_t j = i; j < s->num_waiting - 1; j++)
                    *waiting_at(s, j) = *waiting_at(s, j + 1);
                s->num_waiting--;
                break;
            }
        }
    }
    qwi_kv_release(s->kv, &seq->table);
    seq->state = QWI_SEQ_FINISHED;
}

/* Preempt by recompute: the simplest correct policy for a pool without swap
 * space. Outputs are unchanged because recomputed KV is bit-identical and
 * sampling is keyed by (seed, position). Returns false (nothing changed)
 * only if the waiting ring could not grow to take the victim. */
static bool preempt_last(qwi_sched *s) {
    qwi_seq *victim = s->running[s->num_running - 1];
    if (waiting_push_front(s, victim) != QW_OK) return false;
    s->num_running--;
    qwi_kv_release(s->kv, &victim->table);
    victim->num_computed_tokens = 0;
    victim->num_preemptions++;
    s->total_preemptions++;
    return true;
}

void qwi_sched_schedule(qwi_sched *s, qwi_sched_output *out) {
    int32_t budget = s->max_num_batched_tokens;
    int32_t n = 0, preempted = 0;

    /* 1. running sequences, oldest first */
    for (int32_t i = 0; i < s->num_running && budget > 0;) {
        qwi_seq *seq = s->running[i];
        int32_t want = seq->num_tokens - seq->num_computed_tokens;
        int32_t take = QWI_MIN(want, budget);
        if (take <= 0) { i++; continue; }
        int64_t need = (int64_t)seq->num_computed_tokens + take;
        bool self_preempted = false;
        while (!qwi_kv_can_reserve(s->kv, &seq->table, need)) {
            bool victim_is_self = s->running[s->num_running - 1] == seq;
            if (!preempt_last(s)) break;
            preempted++;
            if (victim_is_self) { self_preempted = true; break; }
        }
        if (self_preempted) break;   /* seq was the last running one */
        if (qwi_kv_reserve(s->kv, &seq->table, need) != QW_OK) break;
        s->entries[n].seq = seq;
        s->entries[n].num_new_tokens = take;
        n++;
        budget -= take;
        i++;
    }

    /* 2. waiting sequences, FCFS */
    while (preempted == 0 && budget > 0 && s->num_waiting > 0 && s->num_running < s->max_num_seqs) {
        qwi_seq *seq = *waiting_at(s, 0);
        int32_t want = seq->num_tokens - seq->num_computed_tokens;
        if (!s->chunked_prefill && want > budget) break;
        int32_t take = QWI_MIN(want, budget);
        int64_t need = (int64_t)seq->num_computed_tokens + take;
        if (!qwi_kv_can_reserve(s->kv, &seq->table, need)) break;
        if (qwi_kv_reserve(s->kv, &seq->table, need) != QW_OK) break;
        waiting_pop_front(s);
        seq->state = QWI_SEQ_RUNNING;
        s->running[s->num_running++] = seq;
        s->entries[n].seq = seq;
        s->entries[n].num_new_tokens = take;
        n++;
        budget -= take;
    }

    out->entries = s->entries;
    out->num_entries = n;
    out->num_batched_tokens = s->max_num_batched_tokens - budget;
    out->num_preempted = preempted;
}

void qwi_sched_commit(qwi_sched *s, const qwi_sched_output *out) {
    (void)s;
    for (int32_t i = 0; i < out->num_entries; i++)
        out->entries[i].seq->num_computed_tokens += out->entries[i].num_new_tokens;
}
