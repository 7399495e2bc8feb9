/*
 * fp8_block.cu - the activation quantization of the W8A8 FP8 linears
 * (fp8_block.h): codes for the block-scaled GEMM (gemm.cu's
 * qwk_gemm_run_fp8), or the codes' values in bf16 for the W8A8 GEMV
 * (quant.cu's qwk_qgemv_w8a8). One kernel makes both, so a row's codes and
 * scales cannot depend on which linear reads them.
 */
#include "fp8_block.h"
#include "kv_e4m3.h"

/* One warp per (row, 128-column group): each lane holds 4 columns (one
 * 8-byte load), the group's |max| by a shuffle tree (max is exact in any
 * order), then each lane writes its 4 codes as one word (VALUES: their
 * values as 4 bf16, exact, one 8-byte store; rows past M write only a
 * scale). */
template <bool VALUES>
__global__ void fp8_quant_act_kernel(const uint16_t *__restrict__ x, int32_t M, int32_t M4, int32_t K,
                                     void *__restrict__ out, float *__restrict__ xs) {
    const int32_t groups = K / QWK_FP8_GROUP;
    const int64_t w = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int32_t lane = threadIdx.x & 31;
    if (w >= (int64_t)M4 * groups) return;
    const int32_t m = (int32_t)(w / groups), g = (int32_t)(w % groups);
    const int64_t c = (int64_t)g * QWK_FP8_GROUP + lane * 4;
    if (m >= M) {   /* padding row: zero codes, scale 1 (finite, never matters) */
        if (!VALUES) *(uint32_t *)((uint8_t *)out + (int64_t)m * K + c) = 0u;
        if (lane == 0) xs[(int64_t)g * M4 + m] = 1.f;
        return;
    }
    const uint2 raw = *(const uint2 *)(x + (int64_t)m * K + c);
    float v[4] = {__uint_as_float(raw.x << 16), __uint_as_float(raw.x & 0xffff0000u),
                  __uint_as_float(raw.y << 16), __uint_as_float(raw.y & 0xffff0000u)};
    float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float s = amax > 0.f ? amax / 448.f : 1.f;
    uint32_t code[4];
#pragma unroll
    for (int i = 0; i < 4; i++) code[i] = qwk_f32_to_e4m3(v[i] / s);
    if (VALUES) {
        *(uint2 *)((uint16_t *)out + (int64_t)m * K + c) =
            make_uint2(qwk_e4m3_to_bf16(code[0]) | ((uint32_t)qwk_e4m3_to_bf16(code[1]) << 16),
                       qwk_e4m3_to_bf16(code[2]) | ((uint32_t)qwk_e4m3_to_bf16(code[3]) << 16));
    } else {
        *(uint32_t *)((uint8_t *)out + (int64_t)m * K + c) = code[0] | (code[1] << 8) | (code[2] << 16) | (code[3] << 24);
    }
    if (lane == 0) xs[(int64_t)g * M4 + m] = s;
}

template <bool VALUES>
static void launch_quant(const uint16_t *x, int32_t M, int32_t K, void *out, float *xs, cudaStream_t stream) {
    const int32_t M4 = qwk_fp8_rows(M);
    if (M <= 0 || K <= 0) return;
    const int64_t warps = (int64_t)M4 * (K / QWK_FP8_GROUP);
    const int per_block = 8;
    fp8_quant_act_kernel<VALUES><<<(unsigned)((warps + per_block - 1) / per_block), 32 * per_block, 0, stream>>>(
        x, M, M4, K, out, xs);
}

void qwk_fp8_quant_act(const uint16_t *x, int32_t M, int32_t K, uint8_t *xq, float *xs, cudaStream_t stream) {
    launch_quant<false>(x, M, K, xq, xs, stream);
}

void qwk_fp8_quant_act_values(const uint16_t *x, int32_t M, int32_t K, uint16_t *xe, float *xs,
                              cudaStream_t stream) {
    launch_quant<true>(x, M, K, xe, xs, stream);
}
