/*
 * scheduler.h - the step-wise scheduler: continuous batching with chunked
 * prefill under a per-step token budget, priorities, prefix-cache lookup at
 * admission, and preemption by recompute.
 *
 * The scheduler works on qwi_seq, the scheduling state of one request. It
 * never reads or writes tensors. Every sequence tracks num_computed_tokens
 * (tokens whose KV is in the cache) against num_tokens (prompt + generated):
 * prefill, chunked prefill, decode and prefix-cache hits are one mechanism -
 * each step a sequence is given num_tokens - num_computed_tokens new tokens,
 * capped by what is left of the budget (the vLLM v1 model).
 *
 * Ownership: the scheduler owns the waiting and running lists (arrays of
 * borrowed qwi_seq pointers) and the KV blocks it reserves for sequences
 * (through each seq's block table). The engine owns the seqs themselves.
 *
 * Rank: a sequence's effective priority is its priority minus one for every
 * aging_steps steps since it arrived (aging: nothing waits forever behind a
 * stream of better-priority arrivals); ties go to the earlier arrival. The
 * best rank is admitted first; the worst is preempted first.
 *
 * Policy of one step (qwi_sched_schedule):
 *   1. Running sequences that decode (one token left), best rank first.
 *   2. Running partial prefills. At most max_num_partial_prefills sequences
 *      per step get a chunk that leaves their prefill unfinished (a prompt
 *      that completes within the step does not count).
 *      When others want to prefill too, a prefill chunk is capped at
 *      long_prefill_threshold tokens so a long prompt cannot starve short
 *      ones of the budget.
 *   When blocks run out for either, idle sessions' blocks are reclaimed
 *   first (the engine's reclaim callback), then the worst-ranked running
 *   sequence is preempted (blocks freed, num_computed reset to 0, back to the
 *   waiting queue; possibly the sequence itself).
 *   3. Waiting sequences, best rank first, while budget, max_num_seqs and
 *      blocks allow (one that would exceed the partial-prefill limit is
 *      passed over for this step, so short prompts behind it still enter), looking up the prefix cache first (the last token is
 *      always recomputed, so logits exist). A waiting sequence may preempt
 *      running ones of strictly worse effective priority to get in. No
 *      admissions after a preemption in steps 1-2: the pool is under
 *      pressure.
 *   Without chunked prefill nothing is cut: a waiting prompt is admitted
 *   whole, or it (and what queues behind it) waits for a step whose budget
 *   holds all of it. The one exception is a sequence preempted after
 *   growing past the whole budget: its recompute is chunked as above, or it
 *   could never run again.
 * No deadlock: submit refuses any sequence that cannot fit the whole pool
 * alone, and preemption and reclaiming can always empty the pool for the
 * best-ranked sequence.
 */
#ifndef QWI_SCHEDULER_H
#define QWI_SCHEDULER_H

#include "common.h"
#include "kv.h"

typedef enum qwi_seq_state {
    QWI_SEQ_NEW = 0,
    QWI_SEQ_WAITING = 1,
    QWI_SEQ_RUNNING = 2,
    QWI_SEQ_FINISHED = 3
} qwi_seq_state;

typedef struct qwi_seq {
    int32_t *tokens;              /* [capacity] history/prompt then generated */
    int32_t num_tokens;           /* all tokens so far                      */
    int32_t num_prompt_tokens;    /* tokens before generation began         */
    int32_t num_computed_tokens;  /* tokens whose KV is in the cache        */
    int32_t capacity;             /* entries of tokens[]: grows as tokens
                                     arrive (qwi_request_grow); the table's
                                     array always covers this many tokens   */
    qwi_block_table table;
    qwi_seq_state state;
    int32_t priority;             /* lower runs first                       */
    uint64_t salt;                /* prefix cache namespace                 */
    bool no_prefix_lookup;        /* admission never takes cached blocks
                                     (prompt logprobs need every row)       */
    uint64_t arrival;             /* engine-wide submission counter         */
    uint64_t arrival_step;        /* scheduler step at submission           */
    int32_t num_preemptions;
    int32_t num_cached_tokens;    /* prefix hits at first admission         */
    bool admitted_once;
    uint64_t scheduled_step;      /* step in which it was last scheduled    */
    uint64_t skipped_step;        /* step in which admission passed it over */
    void *owner;                  /* the qw_request                         */
} qwi_seq;

/* One scheduled unit: num_new_tokens tokens of seq starting at
 * seq->num_computed_tokens. */
typedef struct qwi_sched_entry {
    qwi_seq *seq;
    int32_t num_new_tokens;
} qwi_sched_entry;

typedef struct qwi_sched_output {
    qwi_sched_entry *entries;     /* owned by the scheduler                 */
    int32_t num_entries;
    int32_t num_batched_tokens;
    int32_t num_preempted;        /* preemptions made in this step          */
} qwi_sched_output;

/* Releases the KV blocks of one idle holder (an idle session) so the pool
 * can serve running work; returns false when there is none left. */
typedef bool (*qwi_reclaim_fn)(void *ctx);

typedef struct qwi_sched_config {
    int32_t max_num_seqs;
    int32_t max_num_batched_tokens;
    bool chunked_prefill;
    int32_t max_num_partial_prefills;   /* >= 1: unfinished prefills a step */
    int32_t long_prefill_threshold;     /* 0 = budget / max partial prefills */
    int32_t aging_steps;                /* 0 = no aging                      */
} qwi_sched_config;

typedef struct qwi_sched {
    qwi_kv_pool *kv;              /* borrowed                               */
    qwi_sched_config cfg;
    qwi_seq **running;            /* [max_num_seqs]                         */
    int32_t num_running;
    qwi_seq **waiting;            /* unordered; picked by rank              */
    int32_t num_waiting, waiting_cap;
    qwi_seq **order;              /* [max_num_seqs] scratch                 */
    qwi_sched_entry *entries;     /* [max_num_seqs]                         */
    int32_t *hits;                /* [max blocks per seq] scratch           */
    int32_t max_blocks_per_seq;
    uint64_t step;
    qwi_reclaim_fn reclaim;
    void *reclaim_ctx;
    /* counters */
    uint64_t total_preemptions;
    uint64_t prefix_queries;      /* tokens looked up at admission          */
    uint64_t prefix_hits;         /* tokens found                           */
} qwi_sched;

/* Set up a scheduler over a KV pool (borrowed) for sequences of at most
 * max_tokens tokens. On failure nothing is allocated. */
qw_status qwi_sched_init(qwi_sched *s, qwi_kv_pool *kv, const qwi_sched_config *cfg,
                         int32_t max_tokens);

/* Free the scheduler's lists. Sequences still in it keep their blocks:
 * remove them first (qwi_sched_remove) to return those. */
void qwi_sched_destroy(qwi_sched *s);

/* Append a NEW sequence to the waiting queue, stamping its arrival step.
 * QW_ERR_OUT_OF_MEMORY leaves everything unchanged. */
qw_status qwi_sched_add(qwi_sched *s, qwi_seq *seq);

/* Take a sequence out of the scheduler wherever it is (finished,
 * cancelled); its state becomes FINISHED. Its blocks are NOT released: the
 * caller releases them (qwi_kv_release) or hands them to a session. A no-op
 * for a sequence already FINISHED or NEW. */
void qwi_sched_remove(qwi_sched *s, qwi_seq *seq);

/* Decide this step. Reserves the KV blocks of every scheduled entry, so the
 * engine can plan the batch at once. The output's entries stay valid until
 * the next call. */
void qwi_sched_schedule(qwi_sched *s, qwi_sched_output *out);

/* Record that the step ran: each entry's num_computed_tokens advances by
 * its num_new_tokens and its newly full blocks join the prefix cache. The
 * engine appends sampled tokens itself. */
void qwi_sched_commit(qwi_sched *s, const qwi_sched_output *out);

/* Effective priority of seq at the current step (lower is better). */
int64_t qwi_sched_effective_priority(const qwi_sched *s, const qwi_seq *seq);

/* True if any sequence is waiting or running. */
static inline bool qwi_sched_has_work(const qwi_sched *s) {
    return s->num_running > 0 || s->num_waiting > 0;
}

#endif
