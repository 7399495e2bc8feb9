/*
 * qgemm.cu - qwk_qgemm (qgemm.h): a weight-only GEMM over quantized
 * linears on the tensor cores, dequantizing in shared memory.
 *
 * A block of 4 warps computes MF x 16 rows of y by 64 of its columns (the
 * linear's output rows j), stepping over k 64 columns at a time:
 *   1. the activation tile [MF * 16][64] bf16 into shared memory (rows past
 *      M and columns past k zero);
 *   2. the weight tile [64][64]: each thread dequantizes 32 weights of one
 *      row (a 16-byte run of int4 codes, 32 bytes of int8/fp8: two threads
 *      read a row's 32-byte sector together), rounded to bf16 as
 *      qwk_qdequant rounds them; the next step's run is loaded into
 *      registers before this step's MMAs;
 *   3. warp w multiplies the activation tile by the tile's 16 rows w*16..,
 *      four k steps of 16, one wmma fragment per 16 activation rows.
 * The accumulators go out through shared memory, guarded by M and n. MF (1,
 * 2 or 4) follows M, so a step of 9..16 rows does not spend four times the
 * tensor work on zero rows; the grid's second dimension covers M past 64
 * (each block row reads the codes again: qgemm.h's QWK_QGEMM_MAX_M).
 * Where those blocks are too few to fill the GPU (a narrow linear at
 * decode's few rows), the grid's third dimension splits k: each split
 * writes its partial sums to the workspace and qgemm_reduce_kernel adds
 * them in split order, so the result is deterministic for a given split
 * count (which follows M, the shape and the GPU's SM count).
 */
#include <mma.h>

#include "qgemm.h"
#include "quant_codes.h"

using namespace nvcuda;

#define QG_BN 64            /* output columns (weight rows) a block          */
#define QG_BK 64            /* k columns a step                              */
#define QG_LDT (QG_BK + 8)  /* bf16 pitch of the tiles: a multiple of 8 as
                               wmma asks, 144 bytes so rows shift banks       */
#define QG_LDY (QG_BN + 4)  /* f32 pitch of the output tile                  */
#define QG_THREADS 128
/* Split-k (qwk_qgemm_splits): enough splits for about QG_BLOCKS_PER_SM
 * blocks an SM - a 0.6B model's o_proj (n 1024) is 16 blocks of 64
 * columns, an 8B one's 64, on a 132-SM H200 - but none shorter than
 * QG_MIN_SPLIT_STEPS k steps (256 columns) and at most QG_MAX_SPLITS. */
#define QG_BLOCKS_PER_SM 2
#define QG_MIN_SPLIT_STEPS 4
#define QG_MAX_SPLITS 16

/* Shared memory of one block, in bytes: weight tile, activation tile,
 * output tile (each offset a multiple of 32, as wmma's pointers must be). */
#define QG_SW_BYTES (QG_BN * QG_LDT * 2)
#define QG_SMEM(MF) (QG_SW_BYTES + (MF) * 16 * QG_LDT * 2 + (MF) * 16 * QG_LDY * 4)

/* Step 1: x rows [m0, m0 + rows) x columns [k0, k0 + 64) into sX. */
static __device__ __forceinline__ void load_x(const uint16_t *__restrict__ x, int32_t M, int32_t K, int32_t m0,
                                              int32_t k0, int rows, uint16_t *sX) {
    if ((K & 7) == 0) {   /* 8 columns a load, all in or all out */
        for (int i = threadIdx.x; i < rows * (QG_BK / 8); i += QG_THREADS) {
            const int r = i / (QG_BK / 8), cc = (i % (QG_BK / 8)) * 8;
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            if (m0 + r < M && k0 + cc < K) v = *(const uint4 *)(x + (size_t)(m0 + r) * K + k0 + cc);
            *(uint4 *)(sX + r * QG_LDT + cc) = v;
        }
        return;
    }
    for (int i = threadIdx.x; i < rows * QG_BK; i += QG_THREADS) {
        const int r = i / QG_BK, cc = i % QG_BK;
        sX[r * QG_LDT + cc] = (m0 + r < M && k0 + cc < K) ? x[(size_t)(m0 + r) * K + k0 + cc] : (uint16_t)0;
    }
}

/* Step 2, when k % 32 == 0 (every Qwen3 shape): a thread's 32 codes of
 * one k step - weight row n0 + t/2, columns k0 + (t % 2) * 32.. - are one
 * aligned run of 16 bytes (int4) or 32 (int8, fp8). The kernel loads the
 * next step's run into registers before it multiplies the current tile, so
 * the codes' loads are in flight during the tensor work and the barriers. */
template <int FMT> struct code_run {
    uint4 v[FMT == QWK_Q_U4 ? 1 : 2];
};

template <int FMT>
static __device__ __forceinline__ void load_run(const qwk_qlinear &w, int32_t n0, int32_t k0, code_run<FMT> &r) {
    const int32_t t = threadIdx.x, j = n0 + (t >> 1), c0 = k0 + (t & 1) * 32;
#pragma unroll
    for (int i = 0; i < (FMT == QWK_Q_U4 ? 1 : 2); i++) r.v[i] = make_uint4(0u, 0u, 0u, 0u);
    if (j >= w.n || c0 >= w.k) return;
    const uint4 *p = (const uint4 *)(w.codes + (FMT == QWK_Q_U4 ? (size_t)j * (w.k / 2) + c0 / 2
                                                                 : (size_t)j * w.k + c0));
#pragma unroll
    for (int i = 0; i < (FMT == QWK_Q_U4 ? 1 : 2); i++) r.v[i] = p[i];
}

/* The run r of step k0 as bf16 weights into sW (zero past n or k): its 32
 * columns lie in one group when group_k % 32 == 0, else each finds its own. */
template <int FMT>
static __device__ __forceinline__ void store_run(const qwk_qlinear &w, int32_t n0, int32_t k0, const code_run<FMT> &r,
                                                 uint16_t *sW) {
    const int32_t t = threadIdx.x, j = n0 + (t >> 1), c0 = k0 + (t & 1) * 32, gk = w.group_k;
    uint4 *dst = (uint4 *)(sW + (t >> 1) * QG_LDT + (t & 1) * 32);
    if (j >= w.n || c0 >= w.k) {
#pragma unroll
        for (int q = 0; q < 4; q++) dst[q] = make_uint4(0u, 0u, 0u, 0u);
        return;
    }
    const float *sc = w.scales + (size_t)j * w.ngroups;
    const float *zp = FMT == QWK_Q_E4M3 ? nullptr : w.zeros + (size_t)j * w.ngroups;
    const bool one_group = (gk & 31) == 0;
    const float s = sc[c0 / gk], z = zp ? zp[c0 / gk] : 0.f;
    const uint32_t *words = (const uint32_t *)r.v;
#pragma unroll
    for (int q = 0; q < 4; q++) {
        float v[8];
        if (FMT == QWK_Q_U4) unpack8<FMT>(words[q], 0u, v);
        else unpack8<FMT>(words[2 * q], words[2 * q + 1], v);
        uint32_t h[4];
#pragma unroll
        for (int i = 0; i < 8; i += 2) {
            float a, b;
            if (one_group) {
                a = (v[i] - z) * s;
                b = (v[i + 1] - z) * s;
            } else {
                a = wscaled(v[i], sc, zp, (c0 + 8 * q + i) / gk);
                b = wscaled(v[i + 1], sc, zp, (c0 + 8 * q + i + 1) / gk);
            }
            h[i / 2] = (uint32_t)f2bf(a) | ((uint32_t)f2bf(b) << 16);
        }
        dst[q] = make_uint4(h[0], h[1], h[2], h[3]);
    }
}

/* Step 2 for any other k: column by column, bounds checked. */
template <int FMT>
static __device__ __forceinline__ void dequant_cols(const qwk_qlinear &w, int32_t n0, int32_t k0, uint16_t *sW) {
    const int32_t t = threadIdx.x, j = n0 + (t >> 1), c0 = k0 + (t & 1) * 32, K = w.k, gk = w.group_k;
    uint16_t *dst = sW + (t >> 1) * QG_LDT + (t & 1) * 32;
    const uint8_t *row = w.codes + (FMT == QWK_Q_U4 ? (size_t)j * (K / 2) : (size_t)j * K);
    const float *sc = w.scales + (size_t)j * w.ngroups;
    const float *zp = FMT == QWK_Q_E4M3 ? nullptr : w.zeros + (size_t)j * w.ngroups;
    for (int i = 0; i < 32; i++) {
        const int32_t c = c0 + i, g = c / gk;
        dst[i] = j < w.n && c < K ? f2bf(wscaled(code_at<FMT>(row, c), sc, zp, g)) : (uint16_t)0;
    }
}

/* Split s = blockIdx.z covers k columns [s * kchunk, min(k, (s + 1) *
 * kchunk)) (kchunk a multiple of 64) and writes its partial sums to part
 * [splits][M][n] when part is not NULL, else the whole sum to y. */
template <int FMT, int MF>
__global__ void qgemm_kernel(const uint16_t *__restrict__ x, int32_t M, qwk_qlinear w, float *__restrict__ y,
                             int32_t ldy, int32_t kchunk, float *__restrict__ part) {
    extern __shared__ __align__(128) unsigned char smem[];
    uint16_t *sW = (uint16_t *)smem;
    uint16_t *sX = (uint16_t *)(smem + QG_SW_BYTES);
    float *sY = (float *)(smem + QG_SW_BYTES + MF * 16 * QG_LDT * 2);
    const int32_t n0 = blockIdx.x * QG_BN, m0 = blockIdx.y * (MF * 16);
    const int32_t kb = blockIdx.z * kchunk, ke = kb + kchunk < w.k ? kb + kchunk : w.k;
    const int warp = threadIdx.x >> 5;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[MF];
#pragma unroll
    for (int f = 0; f < MF; f++) wmma::fill_fragment(acc[f], 0.f);
    const bool runs = (w.k & 31) == 0;
    code_run<FMT> run;
    if (runs) load_run<FMT>(w, n0, kb, run);
    for (int32_t k0 = kb; k0 < ke; k0 += QG_BK) {
        load_x(x, M, w.k, m0, k0, MF * 16, sX);
        if (runs) {
            store_run<FMT>(w, n0, k0, run, sW);
            if (k0 + QG_BK < ke) load_run<FMT>(w, n0, k0 + QG_BK, run);   /* in flight during the MMAs */
        } else {
            dequant_cols<FMT>(w, n0, k0, sW);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < QG_BK / 16; kk++) {
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
            wmma::load_matrix_sync(b, (const __nv_bfloat16 *)sW + (warp * 16) * QG_LDT + kk * 16, QG_LDT);
#pragma unroll
            for (int f = 0; f < MF; f++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
                wmma::load_matrix_sync(a, (const __nv_bfloat16 *)sX + (f * 16) * QG_LDT + kk * 16, QG_LDT);
                wmma::mma_sync(acc[f], a, b, acc[f]);
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int f = 0; f < MF; f++)
        wmma::store_matrix_sync(sY + (f * 16) * QG_LDY + warp * 16, acc[f], QG_LDY, wmma::mem_row_major);
    __syncthreads();
    float *out = part ? part + (size_t)blockIdx.z * M * w.n : y;
    const int32_t ld = part ? w.n : ldy;
    for (int i = threadIdx.x; i < MF * 16 * QG_BN; i += QG_THREADS) {
        const int r = i / QG_BN, c = i % QG_BN;
        if (m0 + r < M && n0 + c < w.n) out[(size_t)(m0 + r) * ld + n0 + c] = sY[r * QG_LDY + c];
    }
}

/* y[m][j] = the splits' partial sums of (m, j) added in split order. */
__global__ void qgemm_reduce_kernel(const float *__restrict__ part, int32_t splits, int32_t M, int32_t n,
                                    float *__restrict__ y, int32_t ldy) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, mn = (size_t)M * n;
    if (i >= mn) return;
    float sum = part[i];
    for (int32_t s = 1; s < splits; s++) sum += part[(size_t)s * mn + i];
    y[(i / n) * ldy + i % n] = sum;
}

/* 16-row tiles of one block: 1, 2 or 4 by M (qgemm_kernel's MF). */
static int tiles_of(int32_t M) { return M <= 16 ? 1 : M <= 32 ? 2 : 4; }

/* k steps a split takes when ksteps are cut in (at most) s parts. */
static int32_t split_chunk(int32_t ksteps, int32_t s) { return (ksteps + s - 1) / s; }

/* The parts ksteps make in chunks for s splits: s, or fewer where s does
 * not divide them evenly (no empty split). */
static int32_t whole_splits(int32_t ksteps, int32_t s) {
    return s > 1 ? (ksteps + split_chunk(ksteps, s) - 1) / split_chunk(ksteps, s) : 1;
}

int32_t qwk_qgemm_splits(int32_t M, const qwk_qlinear *w, int32_t sms) {
    if (M <= 0 || w->n <= 0 || sms <= 0) return 1;
    const int64_t blocks = (int64_t)((w->n + QG_BN - 1) / QG_BN) * ((M + 16 * tiles_of(M) - 1) / (16 * tiles_of(M)));
    const int32_t ksteps = (w->k + QG_BK - 1) / QG_BK;
    int64_t s = (QG_BLOCKS_PER_SM * (int64_t)sms + blocks - 1) / blocks;
    if (s > ksteps / QG_MIN_SPLIT_STEPS) s = ksteps / QG_MIN_SPLIT_STEPS;
    if (s > QG_MAX_SPLITS) s = QG_MAX_SPLITS;
    return whole_splits(ksteps, (int32_t)s);
}

size_t qwk_qgemm_workspace(int32_t M, const qwk_qlinear *w, int32_t sms) {
    const int32_t s = qwk_qgemm_splits(M, w, sms);
    return s > 1 ? (size_t)s * (size_t)M * (size_t)w->n * sizeof(float) : 0;
}

template <int FMT, int MF>
static void launch(const uint16_t *x, int32_t M, const qwk_qlinear *w, float *y, int32_t ldy, int32_t splits,
                   float *ws, cudaStream_t stream) {
    const int32_t kchunk = split_chunk((w->k + QG_BK - 1) / QG_BK, splits) * QG_BK;
    const dim3 grid((unsigned)((w->n + QG_BN - 1) / QG_BN), (unsigned)((M + MF * 16 - 1) / (MF * 16)),
                    (unsigned)splits);
    qgemm_kernel<FMT, MF><<<grid, QG_THREADS, QG_SMEM(MF), stream>>>(x, M, *w, y, ldy, kchunk,
                                                                      splits > 1 ? ws : nullptr);
    if (splits > 1) {
        const size_t mn = (size_t)M * (size_t)w->n;
        qgemm_reduce_kernel<<<(unsigned)((mn + 255) / 256), 256, 0, stream>>>(ws, splits, M, w->n, y, ldy);
    }
}

template <int FMT>
static void launch_fmt(const uint16_t *x, int32_t M, const qwk_qlinear *w, float *y, int32_t ldy, int32_t splits,
                       float *ws, cudaStream_t stream) {
    const int mf = tiles_of(M);
    if (mf == 1) launch<FMT, 1>(x, M, w, y, ldy, splits, ws, stream);
    else if (mf == 2) launch<FMT, 2>(x, M, w, y, ldy, splits, ws, stream);
    else launch<FMT, 4>(x, M, w, y, ldy, splits, ws, stream);
}

void qwk_qgemm(const uint16_t *x, int32_t M, const qwk_qlinear *w, float *y, int32_t ldy, float *ws,
               size_t ws_bytes, int32_t sms, cudaStream_t stream) {
    if (M <= 0 || w->n <= 0) return;
    int32_t splits = ws ? qwk_qgemm_splits(M, w, sms) : 1;
    /* a workspace sized for fewer splits: take as many as it holds */
    const size_t per_split = (size_t)M * (size_t)w->n * sizeof(float);
    if (splits > 1 && (size_t)splits * per_split > ws_bytes)
        splits = whole_splits((w->k + QG_BK - 1) / QG_BK, (int32_t)(ws_bytes / per_split));
    if (w->fmt == QWK_Q_U4) launch_fmt<QWK_Q_U4>(x, M, w, y, ldy, splits, ws, stream);
    else if (w->fmt == QWK_Q_U8) launch_fmt<QWK_Q_U8>(x, M, w, y, ldy, splits, ws, stream);
    else launch_fmt<QWK_Q_E4M3>(x, M, w, y, ldy, splits, ws, stream);
}
