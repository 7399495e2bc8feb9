/*
 * fp8_block.cu - the activation quantization of the block-scaled FP8 GEMM
 * (fp8_block.h); the GEMM itself is gemm.cu's qwk_gemm_run_fp8.
 */
#include "fp8_block.h"
#include "kv_e4m3.h"

/* One warp per (row, 128-column group): each lane holds 4 columns (one
 * 8-byte load), the group's |max| by a shuffle tree (max is exact in any
 * order), then each lane writes its 4 codes as one word. */
__global__ void fp8_quant_act_kernel(const uint16_t *__restrict__ x, int32_t M, int32_t M4, int32_t K,
                                     uint8_t *__restrict__ xq, float *__restrict__ xs) {
    const int32_t groups = K / QWK_FP8_GROUP;
    const int64_t w = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int32_t lane = threadIdx.x & 31;
    if (w >= (int64_t)M4 * groups) return;
    const int32_t m = (int32_t)(w / groups), g = (int32_t)(w % groups);
    const int64_t c = (int64_t)g * QWK_FP8_GROUP + lane * 4;
    uint32_t *dst = (uint32_t *)(xq + (int64_t)m * K + c);
    if (m >= M) {   /* padding row: zero codes, scale 1 (finite, never matters) */
        *dst = 0u;
        if (lane == 0) xs[(int64_t)g * M4 + m] = 1.f;
        return;
    }
    const uint2 raw = *(const uint2 *)(x + (int64_t)m * K + c);
    float v[4] = {__uint_as_float(raw.x << 16), __uint_as_float(raw.x & 0xffff0000u),
                  __uint_as_float(raw.y << 16), __uint_as_float(raw.y & 0xffff0000u)};
    float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float s = amax > 0.f ? amax / 448.f : 1.f;
    uint32_t word = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) word |= (uint32_t)qwk_f32_to_e4m3(v[i] / s) << (8 * i);
    *dst = word;
    if (lane == 0) xs[(int64_t)g * M4 + m] = s;
}

void qwk_fp8_quant_act(const uint16_t *x, int32_t M, int32_t K, uint8_t *xq, float *xs, cudaStream_t stream) {
    const int32_t M4 = qwk_fp8_rows(M);
    if (M <= 0 || K <= 0) return;
    const int64_t warps = (int64_t)M4 * (K / QWK_FP8_GROUP);
    const int per_block = 8;
    fp8_quant_act_kernel<<<(unsigned)((warps + per_block - 1) / per_block), 32 * per_block, 0, stream>>>(
        x, M, M4, K, xq, xs);
}
