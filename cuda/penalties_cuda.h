/*
 * penalties_cuda.h - the CUDA backend's penalties and logit bias
 * (lib/penalties.h defines them): packed on the host per step, uploaded
 * with one copy, applied to the logit rows in place on the device by one
 * kernel before the sampler reads them, and undone by another after it
 * (the touched logits are saved), so whatever reads the logits after
 * sampling (logprobs: the raw distribution) sees them raw.
 */
#ifndef QWI_PENALTIES_CUDA_H
#define QWI_PENALTIES_CUDA_H

#include <cuda_runtime.h>

extern "C" {
#include "backend.h"
#include "penalties.h"
}

typedef struct qwi_cuda_penalties {
    qwi_penalty_pack pk;        /* host packing state (lib/penalties.c)    */
    void *h_buf, *d_buf;        /* pinned host / device upload, cap bytes;
                                   d_buf also holds the saved raw logits  */
    size_t cap;
    int32_t applied_rows;       /* rows the last apply changed (restore)  */
    size_t ents_off, saved_off; /* offsets of the entries and saved values */
} qwi_cuda_penalties;

/* Apply the penalties and logit bias of every sampled logit row to d_logits
 * ([rows][vocab], device) in place, on stream: logit row i belongs to plan
 * sequence row_seq[i] (host). Does nothing (no allocation, no launch) when
 * no row has any. The raw values of the touched logits are saved on the
 * device for qwi_cuda_penalties_restore; between the two calls the rows are
 * penalised (the logits copy-out must be enqueued before). The host
 * buffers are reused by the next call: the caller synchronises the stream
 * before then (cu_forward does at the end of every step). On failure a
 * status with a message; the logits are then unchanged or partly done. */
qw_status qwi_cuda_penalties_apply(qwi_cuda_penalties *cp, const qwi_plan *p, const int32_t *row_seq, int32_t rows,
                                   float *d_logits, int32_t vocab, cudaStream_t stream);

/* Put back the raw logits the last qwi_cuda_penalties_apply changed (a
 * no-op when it changed none), on stream, after the sampler. */
qw_status qwi_cuda_penalties_restore(qwi_cuda_penalties *cp, float *d_logits, int32_t vocab, cudaStream_t stream);

/* Free everything cp holds (cp is then empty). */
void qwi_cuda_penalties_free(qwi_cuda_penalties *cp);

#endif
