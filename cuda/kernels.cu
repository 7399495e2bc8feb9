/*
 * kernels.cu - the elementwise and row-wise kernels of the CUDA backend:
 * embedding gather, fused residual-add + RMSNorm, fused q/k RMSNorm + NeoX
 * RoPE + K/V page write (bf16 or fp8 e4m3 cache), SiLU*mul, block copies.
 * See kernels.h.
 */
#include <cuda_bf16.h>
#include <math.h>

#include "kernels.h"
#include "kv_e4m3.h"

static __device__ __forceinline__ float bf2f(qwk_bf16 h) {
    return __uint_as_float((uint32_t)h << 16);
}
/* round to nearest even, NaN kept (as lib/dtype.h qwi_f32_to_bf16) */
static __device__ __forceinline__ qwk_bf16 f2bf(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (qwk_bf16)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (qwk_bf16)(u >> 16);
}

/* Block-wide float sum of 256 threads (fixed tree: deterministic). */
static __device__ float block_sum256(float v, float *sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0) sh[w] = v;
    __syncthreads();
    float t = l < (int)(blockDim.x >> 5) ? sh[l] : 0.f;
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    return t;
}

__global__ void embed_kernel(const qwk_bf16 *table, const int32_t *tok, int32_t H, float *x) {
    int r = blockIdx.x;
    const qwk_bf16 *src = table + (size_t)tok[r] * H;
    float *dst = x + (size_t)r * H;
    for (int i = threadIdx.x; i < H; i += blockDim.x) dst[i] = bf2f(src[i]);
}

void qwk_embed(const qwk_bf16 *table, const int32_t *tok, int32_t rows, int32_t H, float *x,
               cudaStream_t stream) {
    if (rows <= 0) return;
    embed_kernel<<<rows, 256, 0, stream>>>(table, tok, H, x);
}

__global__ void add_rmsnorm_kernel(float *x, const float *delta, const int32_t *rows_idx,
                                   const float *w, int32_t H, float eps, qwk_bf16 *out) {
    __shared__ float sh[32];
    int r = blockIdx.x;
    int src = rows_idx ? rows_idx[r] : r;
    float *xr = x + (size_t)src * H;
    float ss = 0.f;
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        float v = xr[i];
        if (delta) {
            v += delta[(size_t)src * H + i];
            if (!rows_idx) xr[i] = v;   /* gathered rows may repeat: no write-back */
        }
        ss += v * v;
    }
    float tot = block_sum256(ss, sh);
    float rs = 1.0f / sqrtf(tot / (float)H + eps);
    qwk_bf16 *o = out + (size_t)r * H;
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        float v = xr[i];
        if (delta && rows_idx) v += delta[(size_t)src * H + i];
        o[i] = f2bf((v * rs) * w[i]);
    }
}

void qwk_add_rmsnorm(float *x, const float *delta, const int32_t *rows_idx, const float *w,
                     int32_t rows, int32_t H, float eps, qwk_bf16 *out, cudaStream_t stream) {
    if (rows <= 0) return;
    add_rmsnorm_kernel<<<rows, 256, 0, stream>>>(x, delta, rows_idx, w, H, eps, out);
}

/* A K/V element as the cache stores it: bf16, or e4m3(x / scale) bytes. */
static __device__ __forceinline__ void kv_put(qwk_bf16 *dst, float x, float scale) {
    (void)scale;
    *dst = f2bf(x);
}
static __device__ __forceinline__ void kv_put(uint8_t *dst, float x, float scale) {
    *dst = qwk_f32_to_e4m3(x / scale);   /* one IEEE division, as qwi_cpu_kv_fp8_round */
}

/* One block per row, one warp per head (q heads then k heads then v heads).
 * KV: qwk_bf16 or uint8_t (e4m3, with the layer's k_scale / v_scale). */
template <typename KV>
__global__ void qk_norm_rope_kv_kernel(const float *qkv, const float *bias, const float *qn,
                                       const float *kn, const double *inv_freq,
                                       const int32_t *positions, const int32_t *slot_mapping,
                                       int32_t nh, int32_t nkv, int32_t hd, float eps, float k_scale,
                                       float v_scale, qwk_bf16 *q_out, KV *k_cache, KV *v_cache) {
    extern __shared__ float buf[];          /* [warps][hd] */
    const int r = blockIdx.x;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    const int heads = nh + 2 * nkv;
    const int width = heads * hd;
    const int pos = positions[r];
    const int slot = slot_mapping[r];
    float *hb = buf + warp * hd;
    const int half = hd / 2;
    for (int h = warp; h < heads; h += nw) {
        const float *src = qkv + (size_t)r * width + (size_t)h * hd;
        const bool is_q = h < nh, is_k = !is_q && h < nh + nkv;
        float ss = 0.f;
        for (int i = lane; i < hd; i += 32) {
            float v = src[i];
            if (bias) v += bias[h * hd + i];
            hb[i] = v;
            ss += v * v;
        }
        __syncwarp();
        if (is_q || is_k) {
            const float *nw_ = is_q ? qn : kn;
            if (nw_) {
                for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
                float rs = 1.0f / sqrtf(ss / (float)hd + eps);
                for (int i = lane; i < hd; i += 32) hb[i] = (hb[i] * rs) * nw_[i];
                __syncwarp();
            }
            /* NeoX: pairs (i, i + half); cos/sin in double then float, as the CPU */
            float a[8], b[8];
            int n = 0;
            for (int i = lane; i < half; i += 32, n++) {
                double s, c;
                sincos((double)pos * inv_freq[i], &s, &c);
                float cf = (float)c, sf = (float)s;
                float x1 = hb[i], x2 = hb[i + half];
                a[n] = x1 * cf - x2 * sf;
                b[n] = x2 * cf + x1 * sf;
            }
            __syncwarp();
            n = 0;
            for (int i = lane; i < half; i += 32, n++) {
                hb[i] = a[n];
                hb[i + half] = b[n];
            }
            __syncwarp();
        }
        if (is_q) {
            qwk_bf16 *dst = q_out + (size_t)r * nh * hd + (size_t)h * hd;
            for (int i = lane; i < hd; i += 32) dst[i] = f2bf(hb[i]);
        } else if (slot >= 0) {
            int kvh = is_k ? h - nh : h - nh - nkv;
            KV *dst = (is_k ? k_cache : v_cache) + ((size_t)slot * nkv + kvh) * hd;
            const float sc = is_k ? k_scale : v_scale;
            for (int i = lane; i < hd; i += 32) kv_put(dst + i, hb[i], sc);
        }
        __syncwarp();
    }
}

void qwk_qk_norm_rope_kv(const float *qkv, const float *bias, const float *qn, const float *kn,
                         const double *inv_freq, const int32_t *positions, const int32_t *slot_mapping,
                         int32_t rows, int32_t nh, int32_t nkv, int32_t hd, float eps,
                         qwk_bf16 *q_out, qwk_bf16 *k_cache, qwk_bf16 *v_cache, cudaStream_t stream) {
    if (rows <= 0) return;
    /* hd <= 512: each lane holds at most 8 rotary pairs */
    const int warps = 8;
    qk_norm_rope_kv_kernel<qwk_bf16><<<rows, warps * 32, (size_t)warps * hd * sizeof(float), stream>>>(
        qkv, bias, qn, kn, inv_freq, positions, slot_mapping, nh, nkv, hd, eps, 1.f, 1.f, q_out, k_cache, v_cache);
}

void qwk_qk_norm_rope_kv_fp8(const float *qkv, const float *bias, const float *qn, const float *kn,
                             const double *inv_freq, const int32_t *positions, const int32_t *slot_mapping,
                             int32_t rows, int32_t nh, int32_t nkv, int32_t hd, float eps, float k_scale,
                             float v_scale, qwk_bf16 *q_out, uint8_t *k_cache, uint8_t *v_cache,
                             cudaStream_t stream) {
    if (rows <= 0) return;
    const int warps = 8;
    qk_norm_rope_kv_kernel<uint8_t><<<rows, warps * 32, (size_t)warps * hd * sizeof(float), stream>>>(
        qkv, bias, qn, kn, inv_freq, positions, slot_mapping, nh, nkv, hd, eps, k_scale, v_scale, q_out, k_cache,
        v_cache);
}

__global__ void silu_mul_kernel(const float *gu, int32_t rows, int32_t I, qwk_bf16 *out) {
    /* rows strided over grid.y, which is capped at 65,535 */
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        const float *g = gu + (size_t)r * 2 * I, *u = g + I;
        for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < I; i += gridDim.x * blockDim.x) {
            float x = g[i];
            out[(size_t)r * I + i] = f2bf(x / (1.0f + expf(-x)) * u[i]);
        }
    }
}

void qwk_silu_mul(const float *gu, int32_t rows, int32_t I, qwk_bf16 *out, cudaStream_t stream) {
    if (rows <= 0) return;
    int bx = (I + 255) / 256;
    if (bx > 64) bx = 64;
    int by = rows < 65535 ? rows : 65535;
    silu_mul_kernel<<<dim3(bx, by), 256, 0, stream>>>(gu, rows, I, out);
}

__global__ void copy_blocks_kernel(char *pool, size_t plane_bytes, size_t block_bytes,
                                   const int32_t *src, const int32_t *dst) {
    int i = blockIdx.x, p = blockIdx.y;
    const uint4 *s = (const uint4 *)(pool + p * plane_bytes + (size_t)src[i] * block_bytes);
    uint4 *d = (uint4 *)(pool + p * plane_bytes + (size_t)dst[i] * block_bytes);
    for (size_t j = threadIdx.x; j < block_bytes / 16; j += blockDim.x) d[j] = s[j];
    const char *sb = (const char *)s;
    char *db = (char *)d;
    for (size_t j = (block_bytes / 16) * 16 + threadIdx.x; j < block_bytes; j += blockDim.x) db[j] = sb[j];
}

void qwk_copy_blocks(void *pool, size_t plane_bytes, int32_t planes, size_t block_bytes,
                     const int32_t *src, const int32_t *dst, int32_t n, cudaStream_t stream) {
    if (n <= 0) return;
    /* block_bytes = bs * nkv * hd * (2 bf16, 1 fp8): whole uint4s for hd >= 16;
     * the byte loop covers any tail */
    copy_blocks_kernel<<<dim3(n, planes), 256, 0, stream>>>((char *)pool, plane_bytes, block_bytes, src, dst);
}
