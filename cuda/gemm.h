/*
 * gemm.h - the CUDA backend's GEMMs through cuBLASLt: Y[M][N] = X[M][K] W^T
 * with X, W bf16 row-major (W is [N][K], Hugging Face layout), f32
 * accumulation, Y f32 or bf16; and the block-scaled FP8 GEMM of
 * fp8_block.h (e4m3 operands, f32 out). The algorithm is picked by cuBLASLt's
 * heuristic once per (bucket of M, N, K, operand and output types) and cached with its layouts;
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

/* The block-scaled FP8 GEMM of fp8_block.h: y f32 [M4][N] = the M4
 * activation rows xq (e4m3 [M4][K], scales xs [K/128][M4]) times the
 * weight wq (e4m3 [N][K], block scales wgrid [N/128][ld]) transposed; M4
 * a multiple of 4, N and K of 128. Cached like qwk_gemm_run (the scale
 * pointers are set on every call). 0 or a cuBLAS status:
 * CUBLAS_STATUS_NOT_SUPPORTED / INVALID_VALUE when this cuBLASLt or device
 * has no such GEMM (nothing was launched then). */
int qwk_gemm_run_fp8(qwk_gemm *g, cudaStream_t stream, const uint8_t *xq, const float *xs, const uint8_t *wq,
                     const float *wgrid, float *y, int32_t M4, int32_t N, int32_t K);

/* Ask cuBLASLt for qwk_gemm_run_fp8's GEMM of this shape (N, K, and M4's
 * bucket) and cache it, launching nothing: 0, or the status a run would
 * have met (qwk_gemm_refused: no such GEMM here). xs and wgrid as for the
 * run (device pointers; not read). */
int qwk_gemm_prepare_fp8(qwk_gemm *g, const float *xs, const float *wgrid, int32_t M4, int32_t N, int32_t K);

/* Whether a status from qwk_gemm_run_fp8 says "no such GEMM here"
 * (nothing launched; the caller may take another path). */
int qwk_gemm_refused(int status);

/* Number of cached shapes (for tests and stats). */
int qwk_gemm_cached(const qwk_gemm *g);

#ifdef __cplusplus
}
#endif
#endif
