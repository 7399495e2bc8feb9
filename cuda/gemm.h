/*
 * gemm.h - the CUDA backend's GEMMs through cuBLASLt: Y[M][N] = X[M][K] W^T
 * with X, W bf16 row-major (W is [N][K], Hugging Face layout), f32
 * accumulation, Y f32 or bf16. The algorithm is picked by cuBLASLt's
 * heuristic once per (bucket of M, N, K, output type) and cached with its layouts;
 * one 32 MiB workspace serves every call on the stream.
 */
#ifndef QWK_GEMM_H
#define QWK_GEMM_H

#include <stdint.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QWK_GEMM_WORKSPACE (32u << 20)

typedef struct qwk_gemm qwk_gemm;

/* 0 on success; else a cuBLAS status, with *out NULL. workspace: device
 * memory of QWK_GEMM_WORKSPACE bytes, owned by the caller. */
int qwk_gemm_create(void *workspace, qwk_gemm **out);
void qwk_gemm_destroy(qwk_gemm *g);

/* Launch on stream; 0 or a cuBLAS status. */
int qwk_gemm_run(qwk_gemm *g, cudaStream_t stream, const void *x, const void *w, void *y, int y_f32,
                 int32_t M, int32_t N, int32_t K);

/* Number of cached shapes (for tests and stats). */
int qwk_gemm_cached(const qwk_gemm *g);

#ifdef __cplusplus
}
#endif
#endif
