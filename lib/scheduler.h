/*
 * scheduler.h - the step-wise scheduler: continuous batching with chunked
 * prefill under a per-step token budget, and preemption by recompute.
 *
 * The scheduler works on qwi_seq, the scheduling state of one request. It
 * never reads or writes tensors. Every sequence tracks num_computed_tokens
 * (tokens whose KV is in the cache) against num_tokens (prompt + generated):
 * prefill, chunked prefill and decode are one mechanism - each step a
 * sequence is given num_tokens - num_computed_tokens new tokens, capped by
 * what is left of the budget (the vLLM v1 model).
 *
 * Ownership: the scheduler owns the waiting and running lists (arrays of
 * borrowed qwi_seq pointers) and the KV blocks it reserves for sequences
 * (through each seq's block table). The engine owns the seqs themselves.
 *
 * Policy (one step, qwi_sched_schedule):
 *   1. Running sequences, in admission order: decode tokens and the rest of
 *      partial prefills, each as far as the budget allows. If the KV pool
 *      cannot hold a sequence's new tokens, the most recently admitted
 *      running sequence is preempted (blocks freed, num_computed reset to 0,
 *      put back at the head of the waiting queue) until it fits - possibly
 *      the sequence itself.
 *   2. Waiting sequences in FCFS order while budget, max_num_seqs and free
 *      blocks allow (no new admissions in a step that preempted: the pool is
 *      under pressure). A prompt longer than the budget is admitted with a
 *      first chunk, unless chunked prefill is off.
 * No deadlock: submit refuses any sequence that cannot fit the whole pool
 * alone, and preemption always leaves the oldest running sequence able to
 * proceed, so the oldest request always progresses.
 */
#ifndef QWI_SCHED_H
#define QWI_SCHED_H

#include "common.h"
#include "kv.h"

typedef enum qwi_seq_state {
    QWI_SEQ_NEW = 0,
    QWI_SEQ_WAITING = 1,
    QWI_SEQ_RUNNING = 2,
    QWI_SEQ_FINISHED = 3
} qwi_seq_state;

typedef struct qwi_seq {
    int32_t *tokens;              /* [capacity] prompt then generated ids  */
    int32_t num_tokens;           /* prompt + generated so far             */
    int32_t num_prompt_tokens;
    int32_t num_computed_tokens;  /* tokens whose KV is in the cache       */
    int32_t capacity;             /* max prompt + generated tokens         */
    qwi_block_table table;
    qwi_seq_state state;
    int32_t num_preemptions;
    uint64_t arrival;             /* engine-wide submission counter        */
    void *owner;                  /* the qw_request                        */
} qwi_seq;

/* One scheduled unit: new_tokens tokens of seq starting at
 * seq->num_computed_tokens. */
typedef struct qwi_sched_entry {
    qwi_seq *seq;
    int32_t num_new_tokens;
} qwi_sched_entry;

typedef struct qwi_sched_output {
    qwi_sched_entry *entries;     /* [max_num_seqs], owned by the scheduler */
    int32_t num_entries;
    int32_t num_batched_tokens;
    int32_t num_preempted;        /* preemptions made in this step          */
} qwi_sched_output;

typedef struct qwi_sched {
    qwi_kv_pool *kv;              /* borrowed                               */
    int32_t max_num_seqs;
    int32_t max_num_batched_tokens;
    bool chunked_prefill;
    qwi_seq **running;            /* [max_num_seqs], admission order        */
    int32_t num_running;
    qwi_seq **waiting;            /* ring buffer, head = next to admit      */
    int32_t waiting_cap, waiting_head, num_waiting;
    qwi_sched_entry *entries;     /* [max_num_seqs]                         */
    uint64_t total_preemptions;
} qwi_sched;

/* Set up a scheduler over a KV pool (borrowed). On failure nothing is
 * allocated. */
qw_status qwi_sched_init(qwi_sched *s, qwi_kv_pool *kv, int32_t max_num_seqs,
                         int32_t max_num_batched_tokens, bool chunked_prefill);

/* Free the scheduler's lists. Sequences still in it keep their blocks:
 * remove them first (qwi_sched_remove) to return those. */
void qwi_sched_destroy(qwi_sched *s);

/* Append a NEW sequence to the waiting queue (FCFS). Grows the queue as
 * needed: QW_ERR_OUT_OF_MEMORY leaves everything unchanged. */
qw_status qwi_sched_add(qwi_sched *s, qwi_seq *seq);

/* Take a sequence out of the scheduler wherever it is (finished, cancelled),
 * releasing its KV blocks; its state becomes FINISHED. A no-op for a
 * sequence already FINISHED. */
void qwi_sched_remove(qwi_sched *s, qwi_seq *seq);

/* Decide this step. Reserves the KV blocks of every scheduled entry, so the
 * engine can plan the batch at once. The output's entries stay valid until
 * the next call. */
void qwi_sched_schedule(qwi_sched *s, qwi_sched_output *out);

/* Record that the step ran: each entry's num_computed_tokens advances by
 * its num_new_tokens. The engine appends sampled tokens itself. */
void qwi_sched_commit(qwi_sched *s, const qwi_sched_output *out);

/* True if any sequence is waiting or running. */
static inline bool qwi_sched_has_work(const qwi_sched *s) {
    return s->num_running > 0 || s->num_waiting > 0;
}

#endif
