/*
 * attention.cu - paged attention of the CUDA backend (see kernels.h):
 *
 *   prefill_attention  mixed steps: varlen causal query tiles (64 rows of
 *                      one sequence, one q head) over the paged context,
 *                      flash-attention style: K/V tiles of 32 positions
 *                      staged in shared memory, S = QK^T and O += PV on the
 *                      tensor cores (wmma bf16, f32 accumulate), online
 *                      softmax in f32, no score matrix in device memory.
 *   decode_attention   the decode rows of any step: one block per
 *                      (seq, kv head, split) computing all nh/nkv query
 *                      heads of the group, so each K/V element is read
 *                      once per group; a sequence's splits follow its
 *                      context length alone (decode_splits.h), their
 *                      partials merged by log-sum-exp in split order.
 *
 * head_dim in {16, 32, 64, 128} (the backend refuses others at create);
 * decode needs nh/nkv <= 8.
 *
 * Both kernels are templates on the cache element KV: qwk_bf16, or uint8_t
 * for the fp8 (e4m3) cache (pg.kv_fp8). An e4m3 element is widened exactly
 * (kv_e4m3.h) - to bf16 for the prefill tiles, which stay bf16 wmma
 * operands, and to f32 in decode - and the layer's scales are applied as on
 * the CPU: k_scale folded into the score scale (one f32 product per
 * kernel), v_scale into the final 1/sum (v_scale / sum). The bf16
 * instantiations are the kernels as they were, operation for operation.
 */
#include <cuda_bf16.h>
#include <mma.h>
#include <math.h>

#include "decode_splits.h"
#include "kernels.h"
#include "kv_e4m3.h"

using namespace nvcuda;

static __device__ __forceinline__ float bf2f(qwk_bf16 h) {
    return __uint_as_float((uint32_t)h << 16);
}
static __device__ __forceinline__ qwk_bf16 f2bf(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (qwk_bf16)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (qwk_bf16)(u >> 16);
}

static __device__ __forceinline__ size_t kv_index(const qwk_paged &pg, const int32_t *bt, int j, int kvh) {
    int blk = bt[j / pg.block_size];
    int slot = j % pg.block_size;
    return (((size_t)blk * pg.block_size + slot) * pg.nkv + kvh) * (size_t)pg.hd;
}

/* ---- cache element access: KV = qwk_bf16 or uint8_t (e4m3) ----------------- */

template <typename KV> struct kv_is_fp8 { static constexpr bool value = false; };
template <> struct kv_is_fp8<uint8_t> { static constexpr bool value = true; };

/* Two e4m3 bytes (low byte first) as a pair of bf16 in one word: the
 * exact f32 values' top halves (3 mantissa bits fit). */
static __device__ __forceinline__ uint32_t e4m3x2_bf16(uint32_t w) {
    const float2 f = qwk_e4m3x2_to_f32x2(w);
    return (__float_as_uint(f.x) >> 16) | (__float_as_uint(f.y) & 0xffff0000u);
}

/* Elements idx .. idx+7 as 8 bf16 (16 bytes, element 0 lowest). */
static __device__ __forceinline__ uint4 load8_bf16(const qwk_bf16 *c, size_t idx) {
    return *(const uint4 *)(c + idx);
}
static __device__ __forceinline__ uint4 load8_bf16(const uint8_t *c, size_t idx) {
    const uint2 w = *(const uint2 *)(c + idx);
    return make_uint4(e4m3x2_bf16(w.x), e4m3x2_bf16(w.x >> 16), e4m3x2_bf16(w.y), e4m3x2_bf16(w.y >> 16));
}

/* Elements idx .. idx+15 as f32 (exact widening). */
static __device__ __forceinline__ void load16_f32(const qwk_bf16 *c, size_t idx, float *kf) {
    const qwk_bf16 *kp = c + idx;
    uint4 u0 = *(const uint4 *)kp, u1 = *(const uint4 *)(kp + 8);
    const uint32_t w[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
#pragma unroll
    for (int i = 0; i < 8; i++) {
        kf[2 * i] = __uint_as_float(w[i] << 16);
        kf[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}
static __device__ __forceinline__ void load16_f32(const uint8_t *c, size_t idx, float *kf) {
    const uint4 u = *(const uint4 *)(c + idx);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const float2 f = qwk_e4m3x2_to_f32x2(w[i / 2] >> (16 * (i % 2)));
        kf[2 * i] = f.x;
        kf[2 * i + 1] = f.y;
    }
}

/* Elements idx, idx+1 as f32. */
static __device__ __forceinline__ void load2_f32(const qwk_bf16 *c, size_t idx, float &v0, float &v1) {
    uint32_t w = *(const uint32_t *)(c + idx);
    v0 = __uint_as_float(w << 16);
    v1 = __uint_as_float(w & 0xffff0000u);
}
static __device__ __forceinline__ void load2_f32(const uint8_t *c, size_t idx, float &v0, float &v1) {
    const float2 f = qwk_e4m3x2_to_f32x2(*(const uint16_t *)(c + idx));
    v0 = f.x;
    v1 = f.y;
}

/* The score scale: attention scale, times k_scale for fp8 (as the CPU's
 * a->scale * a->k_scale). */
template <typename KV>
static __device__ __forceinline__ float score_scale(const qwk_paged &pg) {
    return kv_is_fp8<KV>::value ? pg.scale * pg.k_scale : pg.scale;
}

/* o / l (bf16: as before), o * (v_scale / l) for fp8 (the CPU's
 * inv = v_scale / sum); 0 where l is 0. */
template <typename KV>
static __device__ __forceinline__ float out_norm(const qwk_paged &pg, float o, float l) {
    if (!(l > 0.f)) return 0.f;
    return kv_is_fp8<KV>::value ? o * (pg.v_scale / l) : o / l;
}

/* ---- prefill ------------------------------------------------------------- */

#define PF_BQ 64
#define PF_BK 32

template <int HD>
struct pf_smem {
    static constexpr int LDQ = HD + 8;        /* bf16 */
    static constexpr int LDS = PF_BK + 4;     /* f32  */
    static constexpr int LDP = PF_BK + 8;     /* bf16 */
    static constexpr int LDO = HD + 4;        /* f32  */
    static constexpr size_t Q = 0;
    static constexpr size_t K = Q + (size_t)PF_BQ * LDQ * 2;
    static constexpr size_t V = K + (size_t)PF_BK * LDQ * 2;
    static constexpr size_t S = V + (size_t)PF_BK * LDQ * 2;
    static constexpr size_t P = S + (size_t)PF_BQ * LDS * 4;
    static constexpr size_t O = P + (size_t)PF_BQ * LDP * 2;
    static constexpr size_t ML = O + (size_t)PF_BQ * LDO * 4;
    static constexpr size_t TOTAL = ML + (size_t)PF_BQ * 3 * 4;
};

/* Load rows [0, n) of a [rows][HD] bf16 tile into shared (ld LDQ); rows at
 * or past `valid` are zero. */
template <int HD, typename KV>
__global__ void __launch_bounds__(128)
prefill_attention_kernel(qwk_paged pg, const qwk_bf16 *__restrict__ q, const int32_t *tiles,
                         qwk_bf16 *out) {
    typedef pf_smem<HD> L;
    const KV *k_cache = (const KV *)pg.k_cache, *v_cache = (const KV *)pg.v_cache;
    const float sscale = score_scale<KV>(pg);
    extern __shared__ __align__(128) unsigned char smem[];
    __nv_bfloat16 *sQ = (__nv_bfloat16 *)(smem + L::Q);
    __nv_bfloat16 *sK = (__nv_bfloat16 *)(smem + L::K);
    __nv_bfloat16 *sV = (__nv_bfloat16 *)(smem + L::V);
    float *sS = (float *)(smem + L::S);
    __nv_bfloat16 *sP = (__nv_bfloat16 *)(smem + L::P);
    float *sO = (float *)(smem + L::O);
    float *sM = (float *)(smem + L::ML), *sL = sM + PF_BQ, *sA = sL + PF_BQ;

    const int seq = tiles[2 * blockIdx.x], row0 = tiles[2 * blockIdx.x + 1];
    const int h = blockIdx.y, G = pg.nh / pg.nkv, kvh = h / G;
    const int q_end = pg.query_start[seq + 1];
    const int nrows = min(PF_BQ, q_end - row0);
    const int stride = pg.hdr[2];
    const int32_t *bt = pg.block_tables + (size_t)seq * stride;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int qd = pg.nh * HD;
    constexpr int CH = HD / 8;                 /* 16-byte chunks per row */

    for (int c = tid; c < PF_BQ * CH; c += 128) {
        int r = c / CH, k = c % CH;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (r < nrows) v = *(const uint4 *)(q + (size_t)(row0 + r) * qd + (size_t)h * HD + k * 8);
        *(uint4 *)(sQ + r * L::LDQ + k * 8) = v;
    }
    for (int c = tid; c < PF_BQ * L::LDO; c += 128) sO[c] = 0.f;
    if (tid < PF_BQ) {
        sM[tid] = -INFINITY;
        sL[tid] = 0.f;
    }
    const int nkeys = min(pg.positions[row0 + nrows - 1] + 1, pg.context_lens[seq]);
    __syncthreads();

    for (int k0 = 0; k0 < nkeys; k0 += PF_BK) {
        for (int c = tid; c < PF_BK * CH; c += 128) {
            int j = c / CH, k = c % CH;
            uint4 kv = make_uint4(0, 0, 0, 0), vv = kv;
            if (k0 + j < nkeys) {
                size_t idx = kv_index(pg, bt, k0 + j, kvh) + k * 8;
                kv = load8_bf16(k_cache, idx);
                vv = load8_bf16(v_cache, idx);
            }
            *(uint4 *)(sK + j * L::LDQ + k * 8) = kv;
            *(uint4 *)(sV + j * L::LDQ + k * 8) = vv;
        }
        __syncthreads();

        /* S rows [16w, 16w+16) = Q K^T */
        for (int n = 0; n < PF_BK / 16; n++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.f);
            for (int kk = 0; kk < HD / 16; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
                wmma::load_matrix_sync(a, sQ + (warp * 16) * L::LDQ + kk * 16, L::LDQ);
                wmma::load_matrix_sync(b, sK + (n * 16) * L::LDQ + kk * 16, L::LDQ);
                wmma::mma_sync(acc, a, b, acc);
            }
            wmma::store_matrix_sync(sS + (warp * 16) * L::LDS + n * 16, acc, L::LDS, wmma::mem_row_major);
        }
        __syncwarp();

        /* online softmax of the warp's 16 rows; lane = key column */
        for (int i = 0; i < 16; i++) {
            int r = warp * 16 + i;
            int j = k0 + lane;
            float s = -INFINITY;
            if (r < nrows && j < nkeys && j <= pg.positions[row0 + r]) s = sS[r * L::LDS + lane] * sscale;
            float mx = s;
            for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            float m_old = sM[r];
            float m_new = fmaxf(m_old, mx);
            float p = m_new == -INFINITY ? 0.f : expf(s - m_new);
            float sum = p;
            for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            sP[r * L::LDP + lane] = __float2bfloat16(p);
            __syncwarp();
            if (lane == 0) {
                float alpha = m_old == -INFINITY ? (m_new == -INFINITY ? 1.f : 0.f) : expf(m_old - m_new);
                sA[r] = alpha;
                sL[r] = sL[r] * alpha + sum;
                sM[r] = m_new;
            }
            __syncwarp();
        }
        for (int i = 0; i < 16; i++) {
            int r = warp * 16 + i;
            float alpha = sA[r];
            for (int d = lane; d < HD; d += 32) sO[r * L::LDO + d] *= alpha;
        }
        __syncwarp();

        /* O rows += P V */
        for (int n = 0; n < HD / 16; n++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::load_matrix_sync(acc, sO + (warp * 16) * L::LDO + n * 16, L::LDO, wmma::mem_row_major);
            for (int kk = 0; kk < PF_BK / 16; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
                wmma::load_matrix_sync(a, sP + (warp * 16) * L::LDP + kk * 16, L::LDP);
                wmma::load_matrix_sync(b, sV + (kk * 16) * L::LDQ + n * 16, L::LDQ);
                wmma::mma_sync(acc, a, b, acc);
            }
            wmma::store_matrix_sync(sO + (warp * 16) * L::LDO + n * 16, acc, L::LDO, wmma::mem_row_major);
        }
        __syncthreads();
    }

    for (int c = tid; c < nrows * HD; c += 128) {
        int r = c / HD, d = c % HD;
        float v = out_norm<KV>(pg, sO[r * L::LDO + d], sL[r]);
        out[(size_t)(row0 + r) * qd + (size_t)h * HD + d] = f2bf(v);
    }
}

template <int HD>
static void launch_prefill(const qwk_paged *pg, const qwk_bf16 *q, const int32_t *tiles, int32_t ntiles,
                           qwk_bf16 *out, cudaStream_t stream) {
    const size_t sm = pf_smem<HD>::TOTAL;   /* allowed by qwk_attention_init */
    if (pg->kv_fp8)
        prefill_attention_kernel<HD, uint8_t><<<dim3(ntiles, pg->nh), 128, sm, stream>>>(*pg, q, tiles, out);
    else
        prefill_attention_kernel<HD, qwk_bf16><<<dim3(ntiles, pg->nh), 128, sm, stream>>>(*pg, q, tiles, out);
}

/* Both cache element types of head_dim HD: the same shared memory. */
template <int HD>
static cudaError_t allow_prefill_smem() {
    cudaError_t e = cudaFuncSetAttribute(prefill_attention_kernel<HD, qwk_bf16>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)pf_smem<HD>::TOTAL);
    if (e != cudaSuccess) return e;
    return cudaFuncSetAttribute(prefill_attention_kernel<HD, uint8_t>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)pf_smem<HD>::TOTAL);
}

cudaError_t qwk_attention_init(int head_dim) {
    /* Dynamic shared memory beyond 48 KiB must be allowed per kernel and per
     * device before the first launch; done at backend create, where a
     * failure can still be reported, not lazily inside a step. */
    switch (head_dim) {
    case 16: return allow_prefill_smem<16>();
    case 32: return allow_prefill_smem<32>();
    case 64: return allow_prefill_smem<64>();
    case 128: return allow_prefill_smem<128>();
    default: return cudaErrorInvalidValue;
    }
}

void qwk_prefill_attention(const qwk_paged *pg, const qwk_bf16 *q, const int32_t *tiles,
                           int32_t ntiles, qwk_bf16 *out, cudaStream_t stream) {
    if (ntiles <= 0) return;
    switch (pg->hd) {
    case 16: launch_prefill<16>(pg, q, tiles, ntiles, out, stream); break;
    case 32: launch_prefill<32>(pg, q, tiles, ntiles, out, stream); break;
    case 64: launch_prefill<64>(pg, q, tiles, ntiles, out, stream); break;
    case 128: launch_prefill<128>(pg, q, tiles, ntiles, out, stream); break;
    default: break;
    }
}

/* ---- decode -------------------------------------------------------------- */

#define DC_CK 128      /* context positions per chunk */
#define DC_MAXG 8

/* Whether seq (its first row at row) is the decode kernel's: one row, and
 * marked a decode row where the plan marks them (kernels.h). */
static __device__ __forceinline__ bool is_decode_seq(const qwk_paged &pg, int seq, int row) {
    return pg.query_start[seq + 1] - row == 1 && (!pg.decode_seq || pg.decode_seq[seq]);
}

template <int HD, typename KV>
__global__ void __launch_bounds__(128)
decode_attention_kernel(qwk_paged pg, const qwk_bf16 *__restrict__ q, float *part_o, float *part_lse,
                        qwk_bf16 *out) {
    constexpr int LPK = HD / 16 > 0 ? HD / 16 : 1;   /* lanes per key, 16 dims each */
    constexpr int KPP = 128 / LPK;                   /* keys per block pass         */
    constexpr int NKS = 256 / HD;                    /* key groups in the PV phase  */
    __shared__ float sq[DC_MAXG][HD];
    __shared__ float sS[DC_MAXG][DC_CK];
    __shared__ float sM[DC_MAXG], sL[DC_MAXG], sA[DC_MAXG];
    __shared__ float sRed[NKS][DC_MAXG][HD];

    const int seq = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
    /* decode rows only: the others (prompt chunks of a mixed step, one row
     * long or more, and padding) belong to the prefill kernel or to no one */
    const int row = pg.query_start[seq];
    if (!is_decode_seq(pg, seq, row)) return;
    const int ctx = pg.context_lens[seq];
    const int splits = qwi_cuda_decode_splits(ctx);
    if (split >= splits) return;
    const int G = pg.nh / pg.nkv;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int stride = pg.hdr[2];
    const int32_t *bt = pg.block_tables + (size_t)seq * stride;
    const int qd = pg.nh * HD;
    const KV *k_cache = (const KV *)pg.k_cache, *v_cache = (const KV *)pg.v_cache;
    const float sscale = score_scale<KV>(pg);

    const int per = qwi_cuda_decode_split_len(ctx);
    const int start = split * per;
    const int end = min(ctx, start + per);

    for (int c = tid; c < G * HD; c += 128) {
        int g = c / HD, d = c % HD;
        sq[g][d] = bf2f(q[(size_t)row * qd + (size_t)(kvh * G + g) * HD + d]);
    }
    if (tid < DC_MAXG) {
        sM[tid] = -INFINITY;
        sL[tid] = 0.f;
    }
    __syncthreads();

    const int dp = tid % (HD / 2), ks = tid / (HD / 2);
    float acc[DC_MAXG][2];
#pragma unroll
    for (int g = 0; g < DC_MAXG; g++) acc[g][0] = acc[g][1] = 0.f;

    for (int c0 = start; c0 < end; c0 += DC_CK) {
        /* A: scores of DC_CK positions for the G heads */
        for (int pass = 0; pass < DC_CK / KPP; pass++) {
            int jl = pass * KPP + tid / LPK;
            int j = c0 + jl;
            int d0 = (tid % LPK) * 16;
            float kf[16];
            bool ok = j < end;
            if (ok) {
                load16_f32(k_cache, kv_index(pg, bt, j, kvh) + d0, kf);
            } else {
#pragma unroll
                for (int i = 0; i < 16; i++) kf[i] = 0.f;
            }
#pragma unroll
            for (int g = 0; g < DC_MAXG; g++) {
                if (g >= G) break;
                float s = 0.f;
#pragma unroll
                for (int i = 0; i < 16; i++) s += kf[i] * sq[g][d0 + i];
#pragma unroll
                for (int o = LPK / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
                if (tid % LPK == 0) sS[g][jl] = ok ? s * sscale : -INFINITY;
            }
        }
        __syncthreads();
        /* B: online softmax per head */
        for (int g = warp; g < G; g += 4) {
            float mx = -INFINITY;
            for (int j = lane; j < DC_CK; j += 32) mx = fmaxf(mx, sS[g][j]);
            for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            float m_old = sM[g], m_new = fmaxf(m_old, mx);
            float sum = 0.f;
            for (int j = lane; j < DC_CK; j += 32) {
                float p = m_new == -INFINITY ? 0.f : expf(sS[g][j] - m_new);
                sS[g][j] = p;
                sum += p;
            }
            for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            if (lane == 0) {
                float alpha = m_old == -INFINITY ? (m_new == -INFINITY ? 1.f : 0.f) : expf(m_old - m_new);
                sA[g] = alpha;
                sL[g] = sL[g] * alpha + sum;
                sM[g] = m_new;
            }
        }
        __syncthreads();
        /* C: acc = acc * alpha + P V */
#pragma unroll
        for (int g = 0; g < DC_MAXG; g++) {
            if (g < G) {
                acc[g][0] *= sA[g];
                acc[g][1] *= sA[g];
            }
        }
        for (int jl = ks; jl < DC_CK && c0 + jl < end; jl += NKS) {
            float v0, v1;
            load2_f32(v_cache, kv_index(pg, bt, c0 + jl, kvh) + 2 * dp, v0, v1);
#pragma unroll
            for (int g = 0; g < DC_MAXG; g++) {
                if (g < G) {
                    float p = sS[g][jl];
                    acc[g][0] += p * v0;
                    acc[g][1] += p * v1;
                }
            }
        }
        __syncthreads();
    }

#pragma unroll
    for (int g = 0; g < DC_MAXG; g++) {
        if (g < G) {
            sRed[ks][g][2 * dp] = acc[g][0];
            sRed[ks][g][2 * dp + 1] = acc[g][1];
        }
    }
    __syncthreads();
    for (int c = tid; c < G * HD; c += 128) {
        int g = c / HD, d = c % HD;
        float o = 0.f;
        for (int k = 0; k < NKS; k++) o += sRed[k][g][d];
        float l = sL[g];
        o = out_norm<KV>(pg, o, l);
        int h = kvh * G + g;
        if (splits == 1) {
            out[(size_t)row * qd + (size_t)h * HD + d] = f2bf(o);
        } else {
            size_t pi = ((size_t)seq * pg.nh + h) * QWI_CUDA_DECODE_MAX_SPLITS + split;
            part_o[pi * HD + d] = o;
            if (d == 0) part_lse[pi] = l > 0.f ? sM[g] + logf(l) : -INFINITY;
        }
    }
}

/* One block per (seq, q head) of the sequences that split: the partials in
 * split order, weighted by exp(lse - max). Sequences of one split were
 * written by the decode kernel itself. */
__global__ void merge_splits_kernel(qwk_paged pg, const float *part_o, const float *part_lse, qwk_bf16 *out) {
    const int seq = blockIdx.x, h = blockIdx.y, nh = pg.nh, hd = pg.hd;
    const int row = pg.query_start[seq];
    if (!is_decode_seq(pg, seq, row)) return;
    const int splits = qwi_cuda_decode_splits(pg.context_lens[seq]);
    if (splits == 1) return;
    const size_t base = ((size_t)seq * nh + h) * QWI_CUDA_DECODE_MAX_SPLITS;
    float mx = -INFINITY;
    for (int s = 0; s < splits; s++) mx = fmaxf(mx, part_lse[base + s]);
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float num = 0.f, den = 0.f;
        if (mx != -INFINITY) {
            for (int s = 0; s < splits; s++) {
                float l = part_lse[base + s];
                if (l == -INFINITY) continue;
                float w = expf(l - mx);
                num += w * part_o[(base + s) * hd + d];
                den += w;
            }
        }
        out[((size_t)row * nh + h) * hd + d] = f2bf(den > 0.f ? num / den : 0.f);
    }
}

template <int HD>
static void launch_decode(const qwk_paged *pg, const qwk_bf16 *q, dim3 grid, float *part_o, float *part_lse,
                          qwk_bf16 *out, cudaStream_t stream) {
    if (pg->kv_fp8)
        decode_attention_kernel<HD, uint8_t><<<grid, 128, 0, stream>>>(*pg, q, part_o, part_lse, out);
    else
        decode_attention_kernel<HD, qwk_bf16><<<grid, 128, 0, stream>>>(*pg, q, part_o, part_lse, out);
}

void qwk_decode_attention(const qwk_paged *pg, const qwk_bf16 *q, int32_t seqs, int32_t max_splits, float *part_o,
                          float *part_lse, qwk_bf16 *out, cudaStream_t stream) {
    if (seqs <= 0) return;
    if (max_splits < 1) max_splits = 1;
    if (max_splits > QWI_CUDA_DECODE_MAX_SPLITS) max_splits = QWI_CUDA_DECODE_MAX_SPLITS;
    /* every sequence gets max_splits blocks; a block past its sequence's
     * own splits returns at once */
    dim3 grid(seqs, pg->nkv, max_splits);
    switch (pg->hd) {
    case 16: launch_decode<16>(pg, q, grid, part_o, part_lse, out, stream); break;
    case 32: launch_decode<32>(pg, q, grid, part_o, part_lse, out, stream); break;
    case 64: launch_decode<64>(pg, q, grid, part_o, part_lse, out, stream); break;
    case 128: launch_decode<128>(pg, q, grid, part_o, part_lse, out, stream); break;
    default: return;
    }
    if (max_splits > 1)
        merge_splits_kernel<<<dim3(seqs, pg->nh), pg->hd < 128 ? pg->hd : 128, 0, stream>>>(*pg, part_o, part_lse,
                                                                                           out);
}
