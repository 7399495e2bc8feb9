/*
 * quant.cu - kernels over quantized linears (see quant.h): the fused
 * weight-only GEMV of decode steps and the dequantization to bf16 that
 * feeds the cuBLASLt GEMM of prefill steps.
 */
#include <math.h>

#include "fp8_block.h"
#include "quant.h"
#include "quant_codes.h"

size_t qwk_qcode_bytes(int32_t fmt, int64_t n, int64_t k) {
    return fmt == QWK_Q_U4 ? (size_t)n * (size_t)(k / 2) : (size_t)n * (size_t)k;
}

/* Both GEMVs' end: each of the M per-lane sums across the warp by a fixed
 * shuffle tree (the same order for every M: batch-invariant), lane 0
 * writing y[m][j]. */
static __device__ __forceinline__ void store_rows(const float *acc, int32_t M, int32_t lane, float *y, int32_t ldy,
                                                  int32_t j) {
#pragma unroll
    for (int m = 0; m < QWK_QGEMV_MAX_M; m++) {
        float a = acc[m];
        for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
        if (lane == 0 && m < M) y[(size_t)m * ldy + j] = a;
    }
}

/* One warp per output row j, all M activation rows at once, so the row's
 * codes are read once per step whatever M is: lanes take 8 consecutive
 * columns (16-byte activation loads) when k % 8 == 0, single columns
 * otherwise; per-lane f32 sums, then a fixed shuffle tree (deterministic). */
template <int FMT>
__global__ void qgemv_kernel(const uint16_t *__restrict__ x, int32_t M, qwk_qlinear w, float *__restrict__ y,
                             int32_t ldy) {
    const int32_t j = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (j >= w.n) return;
    const int32_t K = w.k, gk = w.group_k, G = w.ngroups;
    const uint8_t *row = w.codes + (FMT == QWK_Q_U4 ? (size_t)j * (K / 2) : (size_t)j * K);
    const float *sc = w.scales + (size_t)j * G;
    const float *zp = FMT == QWK_Q_E4M3 ? nullptr : w.zeros + (size_t)j * G;
    float acc[QWK_QGEMV_MAX_M];
#pragma unroll
    for (int m = 0; m < QWK_QGEMV_MAX_M; m++) acc[m] = 0.f;
    if ((K & 7) == 0) {
        for (int32_t c = lane * 8; c < K; c += 256) {
            float v[8];
            codes8<FMT>(row, c, v);
            const int32_t g0 = c / gk, g1 = (c + 7) / gk;
            if (g0 == g1) {
                const float s = sc[g0], z = zp ? zp[g0] : 0.f;
#pragma unroll
                for (int i = 0; i < 8; i++) v[i] = (v[i] - z) * s;
            } else {
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    const int32_t g = (c + i) / gk;
                    v[i] = wscaled(v[i], sc, zp, g);
                }
            }
#pragma unroll
            for (int m = 0; m < QWK_QGEMV_MAX_M; m++) {
                if (m < M) {
                    const uint4 xv = *(const uint4 *)(x + (size_t)m * K + c);
                    const uint32_t xs[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        acc[m] = fmaf(__uint_as_float(xs[i] << 16), v[2 * i], acc[m]);
                        acc[m] = fmaf(__uint_as_float(xs[i] & 0xffff0000u), v[2 * i + 1], acc[m]);
                    }
                }
            }
        }
    } else {
        for (int32_t c = lane; c < K; c += 32) {
            const int32_t g = c / gk;
            const float v = wscaled(code_at<FMT>(row, c), sc, zp, g);
#pragma unroll
            for (int m = 0; m < QWK_QGEMV_MAX_M; m++)
                if (m < M) acc[m] = fmaf(bf2f(x[(size_t)m * K + c]), v, acc[m]);
        }
    }
    store_rows(acc, M, lane, y, ldy, j);
}

void qwk_qgemv(const uint16_t *x, int32_t M, const qwk_qlinear *w, float *y, int32_t ldy, cudaStream_t stream) {
    if (M <= 0 || w->n <= 0) return;
    const int warps = 8;
    const unsigned grid = (unsigned)((w->n + warps - 1) / warps);
    if (w->fmt == QWK_Q_U4) qgemv_kernel<QWK_Q_U4><<<grid, 32 * warps, 0, stream>>>(x, M, *w, y, ldy);
    else if (w->fmt == QWK_Q_U8) qgemv_kernel<QWK_Q_U8><<<grid, 32 * warps, 0, stream>>>(x, M, *w, y, ldy);
    else qgemv_kernel<QWK_Q_E4M3><<<grid, 32 * warps, 0, stream>>>(x, M, *w, y, ldy);
}

/* qgemv_kernel's shape over W8A8 operands: one warp per output row j,
 * lanes on 8 consecutive columns (inside one 128-column block: 128 % 8 ==
 * 0). A lane's 8 products of e4m3 values (each exact in f32) summed in
 * f32, then scaled by the block's activation scale times its weight scale
 * into the row's sum; a fixed shuffle tree across lanes. Row m's sum reads
 * only row m's codes and scales, so it is the same whatever M is. */
__global__ void qgemv_w8a8_kernel(const uint16_t *__restrict__ xe, const float *__restrict__ xs, int32_t M,
                                  qwk_qlinear w, float *__restrict__ y, int32_t ldy) {
    const int32_t j = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (j >= w.n) return;
    const int32_t K = w.k, M4 = qwk_fp8_rows(M);
    const uint8_t *row = w.codes + (size_t)j * K;
    const float *sc = w.scales + (size_t)j * w.ngroups;
    float acc[QWK_QGEMV_MAX_M];
#pragma unroll
    for (int m = 0; m < QWK_QGEMV_MAX_M; m++) acc[m] = 0.f;
    for (int32_t c = lane * 8; c < K; c += 256) {
        float v[8];
        codes8<QWK_Q_E4M3>(row, c, v);
        const int32_t g = c / QWK_FP8_GROUP;
        const float ws = sc[g];
#pragma unroll
        for (int m = 0; m < QWK_QGEMV_MAX_M; m++) {
            if (m < M) {
                const uint4 xv = *(const uint4 *)(xe + (size_t)m * K + c);
                const uint32_t xw[4] = {xv.x, xv.y, xv.z, xv.w};
                float p = 0.f;
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    p = fmaf(__uint_as_float(xw[i] << 16), v[2 * i], p);
                    p = fmaf(__uint_as_float(xw[i] & 0xffff0000u), v[2 * i + 1], p);
                }
                acc[m] = fmaf(p, xs[(size_t)g * M4 + m] * ws, acc[m]);
            }
        }
    }
    store_rows(acc, M, lane, y, ldy, j);
}

void qwk_qgemv_w8a8(const uint16_t *xe, const float *xs, int32_t M, const qwk_qlinear *w, float *y, int32_t ldy,
                    cudaStream_t stream) {
    if (M <= 0 || w->n <= 0) return;
    const int warps = 8;
    qgemv_w8a8_kernel<<<(unsigned)((w->n + warps - 1) / warps), 32 * warps, 0, stream>>>(xe, xs, M, *w, y, ldy);
}

/* One block per output row; threads stride over its columns, 8 at a time
 * (one 16-byte store) when k % 8 == 0, else one. */
template <int FMT>
__global__ void qdequant_kernel(qwk_qlinear w, uint16_t *__restrict__ out) {
    const int32_t j = blockIdx.x, K = w.k, gk = w.group_k, G = w.ngroups;
    const uint8_t *row = w.codes + (FMT == QWK_Q_U4 ? (size_t)j * (K / 2) : (size_t)j * K);
    const float *sc = w.scales + (size_t)j * G;
    const float *zp = FMT == QWK_Q_E4M3 ? nullptr : w.zeros + (size_t)j * G;
    uint16_t *o = out + (size_t)j * K;
    if ((K & 7) == 0) {
        for (int32_t c = threadIdx.x * 8; c < K; c += blockDim.x * 8) {
            float v[8];
            codes8<FMT>(row, c, v);
            uint32_t h[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int32_t g0 = (c + 2 * i) / gk, g1 = (c + 2 * i + 1) / gk;
                const uint32_t lo = f2bf(wscaled(v[2 * i], sc, zp, g0));
                const uint32_t hi = f2bf(wscaled(v[2 * i + 1], sc, zp, g1));
                h[i] = lo | (hi << 16);
            }
            *(uint4 *)(o + c) = make_uint4(h[0], h[1], h[2], h[3]);
        }
        return;
    }
    for (int32_t c = threadIdx.x; c < K; c += blockDim.x) {
        const int32_t g = c / gk;
        o[c] = f2bf(wscaled(code_at<FMT>(row, c), sc, zp, g));
    }
}

void qwk_qdequant(const qwk_qlinear *w, uint16_t *out, cudaStream_t stream) {
    if (w->n <= 0) return;
    if (w->fmt == QWK_Q_U4) qdequant_kernel<QWK_Q_U4><<<w->n, 256, 0, stream>>>(*w, out);
    else if (w->fmt == QWK_Q_U8) qdequant_kernel<QWK_Q_U8><<<w->n, 256, 0, stream>>>(*w, out);
    else qdequant_kernel<QWK_Q_E4M3><<<w->n, 256, 0, stream>>>(*w, out);
}
