/*
 * penalties.cu - repetition/presence/frequency penalties and logit bias on
 * the device (see penalties_cuda.h). The host packs one step's touched ids
 * (qwi_penalties_pack: distinct ids per row, with their output counts), so
 * the kernel is one block per penalised row whose threads each update
 * distinct logits with qwi_penalty_apply, the very function the CPU sampler
 * uses (its device branch rounds each operation like the CPU: no fused
 * multiply-add). The result is bit-identical to the CPU's penalised row.
 */
#include <stdlib.h>
#include <string.h>

#include "penalties_cuda.h"

/* restore = false: save each touched logit, then penalise it; true: put
 * the saved value back. */
__global__ void penalties_kernel(const qwi_penalty_row *rows, const qwi_penalty_entry *ents, float *saved,
                                 float *logits, int32_t vocab, bool restore) {
    const qwi_penalty_row r = rows[blockIdx.x];
    float *lg = logits + (size_t)r.row * (size_t)vocab;
    for (int32_t j = threadIdx.x; j < r.count; j += blockDim.x) {
        const qwi_penalty_entry e = ents[r.start + j];
        if (restore) {
            lg[e.id] = saved[r.start + j];
        } else {
            float x = lg[e.id];
            saved[r.start + j] = x;
            lg[e.id] = qwi_penalty_apply(x, &e, r.rep, r.freq, r.pres);
        }
    }
}

static qw_status cu_fail(cudaError_t e, const char *what) {
    qw_status st = e == cudaErrorMemoryAllocation ? QW_ERR_OUT_OF_MEMORY : QW_ERR_INTERNAL;
    return qwi_fail(st, "cuda: penalties: %s: %s", what, cudaGetErrorString(e));
}

qw_status qwi_cuda_penalties_apply(qwi_cuda_penalties *cp, const qwi_plan *p, const int32_t *row_seq, int32_t rows,
                                   float *d_logits, int32_t vocab, cudaStream_t stream) {
    cp->applied_rows = 0;
    if (!p->sampling || rows <= 0) return QW_OK;
    /* the common case, checked before any packing state is touched */
    bool any = false;
    for (int32_t i = 0; i < rows && !any; i++) {
        int32_t s = row_seq[i];
        any = p->do_sample[s] && qwi_penalties_active(&p->sampling[s]);
    }
    if (!any) return QW_OK;
    qw_status st = qwi_penalties_pack(&cp->pk, p->sampling, p->do_sample, row_seq, rows, vocab);
    if (st != QW_OK) return st;
    const qwi_penalty_pack *pk = &cp->pk;
    /* rows, entries (16-byte aligned), then room for the saved logits,
     * which only the device writes */
    size_t rows_bytes = ((size_t)pk->num_rows * sizeof(qwi_penalty_row) + 15) & ~(size_t)15;
    size_t up = rows_bytes + (size_t)pk->num_ents * sizeof(qwi_penalty_entry);
    size_t need = up + (size_t)pk->num_ents * sizeof(float);
    if (need > cp->cap) {
        size_t cap = cp->cap ? cp->cap : 4096;
        while (cap < need) cap *= 2;
        cudaFreeHost(cp->h_buf);
        cudaFree(cp->d_buf);
        cp->h_buf = cp->d_buf = NULL;
        cp->cap = 0;
        cudaError_t e = cudaMallocHost(&cp->h_buf, cap);
        if (e == cudaSuccess) e = cudaMalloc(&cp->d_buf, cap);
        if (e != cudaSuccess) {
            cudaFreeHost(cp->h_buf);
            cp->h_buf = NULL;
            return cu_fail(e, "upload buffer");
        }
        cp->cap = cap;
    }
    memcpy(cp->h_buf, pk->rows, (size_t)pk->num_rows * sizeof(qwi_penalty_row));
    memcpy((char *)cp->h_buf + rows_bytes, pk->ents, (size_t)pk->num_ents * sizeof(qwi_penalty_entry));
    cudaError_t e = cudaMemcpyAsync(cp->d_buf, cp->h_buf, up, cudaMemcpyHostToDevice, stream);
    if (e != cudaSuccess) return cu_fail(e, "upload");
    cp->ents_off = rows_bytes;
    cp->saved_off = up;
    penalties_kernel<<<pk->num_rows, 256, 0, stream>>>(
        (const qwi_penalty_row *)cp->d_buf, (const qwi_penalty_entry *)((char *)cp->d_buf + cp->ents_off),
        (float *)((char *)cp->d_buf + cp->saved_off), d_logits, vocab, false);
    e = cudaGetLastError();
    if (e != cudaSuccess) return cu_fail(e, "kernel launch");
    cp->applied_rows = pk->num_rows;
    return QW_OK;
}

qw_status qwi_cuda_penalties_restore(qwi_cuda_penalties *cp, float *d_logits, int32_t vocab, cudaStream_t stream) {
    if (cp->applied_rows <= 0) return QW_OK;
    penalties_kernel<<<cp->applied_rows, 256, 0, stream>>>(
        (const qwi_penalty_row *)cp->d_buf, (const qwi_penalty_entry *)((char *)cp->d_buf + cp->ents_off),
        (float *)((char *)cp->d_buf + cp->saved_off), d_logits, vocab, true);
    cp->applied_rows = 0;
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? QW_OK : cu_fail(e, "restore launch");
}

void qwi_cuda_penalties_free(qwi_cuda_penalties *cp) {
    qwi_penalties_pack_free(&cp->pk);
    cudaFreeHost(cp->h_buf);
    cudaFree(cp->d_buf);
    memset(cp, 0, sizeof *cp);
}
