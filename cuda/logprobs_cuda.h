/*
 * logprobs_cuda.h - the CUDA side of log-probabilities (lib/logprobs.h): rows of
 * device logits reduced on device to QWI_LP_STRIDE (token, logprob) pairs,
 * so only those pairs cross to the host. Same definition as
 * qwi_logprobs_row: log-sum-exp over the whole row, max-subtracted and
 * accumulated in double; top k by descending logit, lower id first on ties.
 */
#ifndef QWK_LOGPROBS_CUDA_H
#define QWK_LOGPROBS_CUDA_H

#include <stdint.h>
#include <cuda_runtime.h>

#include "qwinfer.h"

/* Buffers of the reduction (device and pinned host), made on first use so
 * a backend whose requests never ask pays nothing. */
typedef struct qwk_logprobs qwk_logprobs;

/* Reduce rows [0, n) of d_logits (device f32 [n][vocab]): row i with
 * k[i] >= 0 (host array, k[i] <= QW_MAX_LOGPROBS) gets target token
 * d_targets[i] when d_targets (device) is given, else h_targets[i] (host),
 * and its 1 + min(k[i], vocab) pairs go to the host pointer dst[i]; rows
 * with k[i] < 0 are skipped. *ctx is created on first call for up to
 * max_rows rows (n <= max_rows). Enqueued on stream and waited for.
 * Returns 0, or the CUDA error (the step then fails). */
cudaError_t qwk_logprobs_reduce(qwk_logprobs **ctx, int32_t max_rows, const float *d_logits, int32_t vocab,
                                int32_t n, const int32_t *k, const int32_t *d_targets, const int32_t *h_targets,
                                qw_logprob *const *dst, cudaStream_t stream);

/* Device row indices for a gather (e.g. the final norm of prompt rows):
 * copies rows[0..n) (host) into the context's device array and returns it
 * (NULL on failure, with *err set). Stream-ordered before later launches. */
const int32_t *qwk_logprobs_upload_rows(qwk_logprobs **ctx, int32_t max_rows, const int32_t *rows, int32_t n,
                                        cudaStream_t stream, cudaError_t *err);

/* Free the context (NULL: no-op). */
void qwk_logprobs_free(qwk_logprobs *ctx);

#endif
