/*
 * parallel_samples.h - n samples from one prompt (QW_REQ_N; contract in
 * qwinfer.h "Parallel samples").
 *
 * Sample 0 is the submitted request; samples 1..n-1 are child requests made
 * at submit (qwi_samples_create in request.h) that take no part in the
 * schedule until sample 0's prompt is computed. Then, in that step, each
 * child gets a block table sharing sample 0's full KV blocks plus its own
 * copy of the partial last block (qwi_samples_fork_kv), joins the waiting
 * queue holding them, and has its first token sampled from sample 0's
 * last-row logits with its own seed (qwi_samples_first_token). From there
 * a child is an ordinary sequence. The step glue (when to fork, events,
 * cancellation) is in engine.c; the pieces that do not need the engine's
 * private functions are here.
 */
#ifndef QWI_PARALLEL_SAMPLES_H
#define QWI_PARALLEL_SAMPLES_H

#include "backend.h"
#include "kv.h"
#include "request.h"

/* At submit, before anything is built: QW_ERR_INVALID_ARGUMENT when r has
 * QW_REQ_N > 1 and a session; QW_ERR_QUEUE_FULL when its n samples could
 * never fit a waiting limit of max_waiting (0 = none). */
qw_status qwi_samples_check(const struct qw_request *r, int64_t max_waiting);

/* Number of sequences r stands for in the waiting count: n, or 1. */
static inline int32_t qwi_samples_count(const struct qw_request *r) {
    return r->num_samples > 1 ? r->num_samples : 1;
}

/* True while a sample of r other than r itself has not finished (so a
 * cancel of r still has work to do). Any thread. */
bool qwi_samples_any_unfinished(struct qw_request *r);

/* Give dst (an empty table, array sized for its sequence) a share of src's
 * computed KV: a reference to each full block and, when a block is
 * available, a copy (backend copy_blocks) of the partial last block; sets
 * dst->num_computed_tokens to what that covers (src's computed tokens, or
 * its full blocks only when the partial block could not be copied: those
 * few tokens are recomputed at admission). Step thread. Cannot fail. */
void qwi_samples_fork_kv(qwi_kv_pool *kv, qwi_backend *be, const qwi_seq *src, qwi_seq *dst);

/* Sample child c's first token from the logits of its parent's last prompt
 * row (vocab entries), with c's sampling options and seed, exactly as a
 * backend would for c alone (qwi_sample, the reference every backend
 * matches), at position c->seq.num_tokens. Also stores its logprobs when c
 * asks for them, and copies the parent's prompt logprobs to c. ss: scratch
 * for vocab. Step thread. */
int32_t qwi_samples_first_token(struct qw_request *c, const struct qw_request *parent,
                                const float *logits, int32_t vocab, qwi_sample_scratch *ss);

/* At engine destroy, for a request never drained from the inbox: its
 * samples end as cancelled and lose the engine's reference. */
void qwi_samples_abandon(struct qw_request *r);

#endif
