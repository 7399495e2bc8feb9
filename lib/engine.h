/*
 * engine.h - the internal layout of qw_engine.
 *
 * The engine owns the model, the backend, the KV pool bookkeeping, the
 * scheduler, the plan buffers of one step and the event queue. Requests
 * reach it through the inbox (the only state shared with other threads,
 * under inbox_mu); everything else is touched by the step thread only.
 */
#ifndef QWI_ENGINE_H
#define QWI_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>

#include "backend.h"
#include "error_scope.h"
#include "kv.h"
#include "model.h"
#include "plan.h"
#include "request.h"
#include "scheduler.h"
#include "session.h"

/* A growable array of request pointers. */
typedef struct qwi_req_list {
    qw_request **items;
    size_t count, capacity;
} qwi_req_list;

struct qw_engine {
    qwi_err_slot err;            /* messages of failed calls on it (error_scope.h) */
    qwi_model *model;
    struct qw_tokenizer *tokenizer;  /* the model dir's, or NULL; immutable */
    qwi_backend *backend;
    qwi_kv_pool kv;
    qwi_sched sched;

    /* resolved limits (immutable after create; read by submit threads) */
    int32_t vocab_size;
    int32_t max_model_len;
    int32_t block_size;
    int32_t max_num_seqs;
    int32_t max_num_batched_tokens;
    const char *kv_pool_option;  /* the option that sized the KV pool     */
    char len_limit[128];         /* what set max_model_len, for messages  */
    bool chunked_prefill;
    uint64_t seed;

    /* shared with submitting threads */
    pthread_mutex_t inbox_mu;
    qwi_req_list inbox;          /* submitted, not yet seen by a step     */
    qwi_req_list cancels;        /* each holds a reference                */
    uint64_t num_submitted;      /* under inbox_mu: seeds and arrival      */
    /* Requests submitted and not yet scheduled for the first time (inbox +
     * never-admitted waiting; preempted ones left the count when first
     * scheduled). Raised under inbox_mu by submit, which checks it against
     * max_waiting there; lowered by the step thread without the lock. */
    _Atomic int64_t num_waiting_requests;
    int64_t max_waiting;         /* QW_OPT_MAX_WAITING_REQUESTS; 0 = none  */

    /* wake-ups (engine_wait.c), any thread. step_busy is the step thread's
     * own work (undelivered events, queued or running requests) as of the
     * end of the last step: with the inbox it answers qw_engine_has_work
     * from any thread. wake_cv is broadcast, and wake_fd (an eventfd made
     * by the first qw_engine_event_fd, else -1) written, on every submit,
     * cancel and step that leaves work. Lock order: wake_mu, then inbox_mu. */
    pthread_mutex_t wake_mu;
    pthread_cond_t wake_cv;
    int wake_fd;
    _Atomic int step_busy;

    /* step thread only */
    qwi_plan_buffers plan;
    struct qw_session *sessions;  /* every live session (doubly linked)     */
    int32_t max_blocks_per_seq;
    bool test_fail_growth;       /* test hook: growing a request's arrays
                                    fails as if out of memory              */
    struct {
        uint64_t prompt_tokens, generation_tokens, steps, last_batch, batch_sum, finished;
        double forward_seconds, host_seconds;
    } stats;
    qwi_sample_scratch *fork_scratch; /* QW_REQ_N first tokens (made on first use) */
    qwi_req_list finished;       /* engine refs to drop at the next step  */
    qw_event *pending;           /* ring of undelivered events            */
    size_t pending_head, pending_count, pending_cap;
};

/* engine_wait.c. Set up / tear down the wake-up state (create: QW_OK or
 * QW_ERR_INTERNAL with nothing to undo; destroy closes the eventfd). */
qw_status qwi_engine_wake_init(struct qw_engine *e);
void qwi_engine_wake_destroy(struct qw_engine *e);
/* Wake every qw_engine_wait and make the eventfd readable: after a submit
 * or a cancel was queued (any thread). */
void qwi_engine_wake(struct qw_engine *e);
/* At the end of every qw_engine_step (step thread): record whether work is
 * left for the step thread, and wake waiters if so. */
void qwi_engine_after_step(struct qw_engine *e);

/* Release the KV of the least recently used idle session (the scheduler's
 * reclaim callback); false when no idle session holds blocks. */
bool qwi_engine_reclaim_idle_session(void *engine);

#endif
