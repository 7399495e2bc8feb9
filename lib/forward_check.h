/*
 * forward_check.h - the engine's check of what a backend's forward()
 * handed back before any of it reaches a request.
 *
 * A backend that returns QW_OK but leaves an output unwritten or writes one
 * out of range (a kernel bug, a skipped pass, a device fault the runtime did
 * not report) would otherwise feed the engine a token id it then embeds
 * (out-of-range ids read past the embedding table), or hand the user
 * logprobs of uninitialised memory under QW_OK. So the engine arms the
 * outputs with values no backend writes, runs forward(), and checks:
 *
 *   - every sequence that samples got a token in [0, vocab);
 *   - every logprobs row that was asked for (sampled rows and marked prompt
 *     rows) was written: its first pair names the row's target (the sampled
 *     token, the prompt token), its top pairs name tokens in [0, vocab), and
 *     no logprob is above 0 (NaN passes: NaN logits give NaN logprobs by
 *     qwi_logprobs_row's definition).
 *
 * A failed check is QW_ERR_INTERNAL with the sequence or row and the value
 * in qw_last_error(): the engine then fails the step's requests as for a
 * failed forward(), and keeps running. The cost is a pass over the step's
 * sequences and logprob rows (at most 21 pairs each), nothing per vocab
 * entry.
 */
#ifndef QWI_FORWARD_CHECK_H
#define QWI_FORWARD_CHECK_H

#include <stdint.h>

#include "backend.h"

/* Before forward(): the first pair of every logprobs row the plan asks for
 * gets token -1 (no target is negative). sampled[] needs no arming:
 * qwi_plan_build starts it at -1. Touches nothing else. */
void qwi_forward_check_arm(const qwi_plan *p);

/* After forward() returned QW_OK: QW_OK when every output the plan asked
 * for was written and in range (header above), else QW_ERR_INTERNAL with a
 * message naming backend, the sequence or row and the value. Reads only. */
qw_status qwi_forward_check(const qwi_plan *p, int32_t vocab, const char *backend);

#endif
