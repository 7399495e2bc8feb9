/*
 * fp8_block.h - W8A8 FP8 linears on Hopper (issue 16): the "dynamic
 * activation scaling" of Qwen's -FP8 checkpoints, run on FP8 tensor cores
 * through cuBLASLt's block-scaled GEMM.
 *
 * A Qwen3-*-FP8 checkpoint stores each linear as e4m3 codes with one f32
 * scale per 128 x 128 block ("weight_block_size": [128, 128]) and says
 * "activation_scheme": "dynamic": each activation row is quantized at run
 * time, one scale per 128 consecutive columns (DeepSeek-V3's 1 x 128
 * groups). Then
 *
 *   y[m][j] = sum over column blocks b of  xs[b][m] * ws[j/128][b] *
 *             sum_{c in b} e4m3(xq[m][c]) * e4m3(wq[j][c])
 *
 * which cuBLASLt 12.9+ runs on sm_90 with A = the weight (scale mode
 * CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F) and B = the activations
 * (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F), twice the bf16 GEMM's
 * tensor-core rate and half its operand bytes (vLLM runs these checkpoints
 * the same way). The scale tensors, in the layout NVIDIA's Transformer
 * Engine hands to cuBLASLt for the same two modes:
 *   weight grid  f32 [n/128][ld], ld = ceil(k/128) rounded up to 4
 *                (quant_host.h qwi_cuda_fp8_grid_ld): block (jb, b) at
 *                jb * ld + b; padding columns unused
 *   activations  f32 [k/128][M4], M4 = M rounded up to 4: (b, m) at
 *                b * M4 + m
 * The GEMM always runs M4 rows (rows M..M4-1 are zero codes), so both
 * readings of the activation scales' leading dimension - M or M rounded up
 * to 4 - are the same; the output needs M4 rows.
 *
 * Quantization of a group (this file's kernel): amax = max |x| over its
 * 128 bf16 values (exact), s = amax / 448 (f32 division; s = 1 for an
 * all-zero group), codes e4m3(x / s) rounded to nearest even, saturating
 * (cuda/kv_e4m3.h qwk_f32_to_e4m3, lib/fp8.h's rounding).
 *
 * The numerics move from the weight-only path (bf16 activations): each
 * activation carries e4m3's relative error (<= 2^-4) into the GEMM, the
 * trade every FP8 serving engine makes for the faster prefill. Steps of up
 * to QWK_QGEMV_MAX_M rows (decode) quantize their activations the same way
 * and run the W8A8 GEMV (quant.h qwk_qgemv_w8a8: the same sum over the
 * same codes and scales, in f32 on CUDA cores, reading the weight bytes
 * once as the weight-only GEMV does). Every step of such a model is
 * then W8A8, as in vLLM: a row's logits do not depend on how many rows
 * share its step beyond the GEMM's accumulation order (the design's
 * batched == alone), where a weight-only decode beside a W8A8 prefill
 * would move them by the W8A8 error. QWINFER_CUDA_FP8_GEMM=dequant turns
 * W8A8 off for every step (docs/quantization.md, "CUDA").
 */
#ifndef QWK_FP8_BLOCK_H
#define QWK_FP8_BLOCK_H

#include <stdint.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QWK_FP8_GROUP 128

/* M rounded up to a multiple of 4: the rows the block-scaled GEMM runs
 * (and the activation scales' leading dimension, which kernels index). */
#ifdef __CUDACC__
__host__ __device__
#endif
static inline int32_t qwk_fp8_rows(int32_t M) { return (M + 3) & ~3; }

/* Quantize x bf16 [M][K] (K a multiple of 128) per 1 x 128 group, as
 * above: xq e4m3 [M4][K] (rows M..M4-1 zero codes) and xs f32 [K/128][M4]
 * (those rows' scales 1), M4 = qwk_fp8_rows(M). Asynchronous on stream;
 * capturable. */
void qwk_fp8_quant_act(const uint16_t *x, int32_t M, int32_t K, uint8_t *xq, float *xs, cudaStream_t stream);

/* The same quantization for the W8A8 GEMV: xe bf16 [M][K] holds each
 * code's e4m3 value (exact in bf16; the codes qwk_fp8_quant_act writes,
 * bit for bit), xs f32 [K/128][M4] the same scales (rows M..M4-1 scale 1;
 * xe has no padding rows). Asynchronous on stream; capturable. */
void qwk_fp8_quant_act_values(const uint16_t *x, int32_t M, int32_t K, uint16_t *xe, float *xs,
                              cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
