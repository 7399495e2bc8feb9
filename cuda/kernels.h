/*
 * kernels.h - launchers (qwk_*) of the CUDA backend's kernels. Every
 * pointer is device memory; every launcher is asynchronous on `stream` and
 * returns nothing (the caller checks cudaGetLastError after the step).
 * Counts passed as arguments are padded (graph bucket) sizes; the real
 * counts and every per-row value are read from device memory, so the same
 * launches can be captured once and replayed for any step of that bucket.
 *
 * Each kernel has a plain-C reference qwr_* in cuda_ref.h that
 * tests/gpu/check_kernels.cu compares it to.
 */
#ifndef QWK_KERNELS_H
#define QWK_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t qwk_bf16;   /* bit pattern; __nv_bfloat16 inside the kernels */

/* x[r][0..H) = f32(table[tok[r]][..]) for r < rows. */
void qwk_embed(const qwk_bf16 *table, const int32_t *tok, int32_t rows, int32_t H, float *x,
               cudaStream_t stream);

/* For r < rows, with src = rows_idx ? rows_idx[r] : r: if delta,
 * x[src] += delta[src] (written back only without rows_idx); then
 * out[r] = bf16((x[src] * rsqrt(mean(x[src]^2) + eps)) * w). rows_idx
 * gathers the rows that need logits for the final norm. */
void qwk_add_rmsnorm(float *x, const float *delta, const int32_t *rows_idx, const float *w,
                     int32_t rows, int32_t H, float eps, qwk_bf16 *out, cudaStream_t stream);

/* Per row r < rows of qkv (f32 [rows][(nh+2*nkv)*hd], q | k | v): add bias
 * (optional, f32 [(nh+2nkv)*hd]), RMSNorm each q and k head with qn/kn
 * (optional), NeoX RoPE at positions[r] with inv_freq (double [hd/2]),
 * write q as bf16 to q_out [rows][nh*hd], and k, v as bf16 to slot
 * slot_mapping[r] of k_cache/v_cache ([slot][nkv][hd]); slot < 0: no write. */
void qwk_qk_norm_rope_kv(const float *qkv, const float *bias, const float *qn, const float *kn,
                         const double *inv_freq, const int32_t *positions, const int32_t *slot_mapping,
                         int32_t rows, int32_t nh, int32_t nkv, int32_t hd, float eps,
                         qwk_bf16 *q_out, qwk_bf16 *k_cache, qwk_bf16 *v_cache, cudaStream_t stream);

/* The same for an fp8 (e4m3) KV cache: q as above; k and v written as
 * qwk_f32_to_e4m3(k / k_scale) and (v / v_scale) (kv_e4m3.h: lib/fp8.h's
 * rounding), one byte per element, to the same [slot][nkv][hd] layout.
 * k_scale, v_scale: the layer's scales, finite and > 0. */
void qwk_qk_norm_rope_kv_fp8(const float *qkv, const float *bias, const float *qn, const float *kn,
                             const double *inv_freq, const int32_t *positions, const int32_t *slot_mapping,
                             int32_t rows, int32_t nh, int32_t nkv, int32_t hd, float eps, float k_scale,
                             float v_scale, qwk_bf16 *q_out, uint8_t *k_cache, uint8_t *v_cache,
                             cudaStream_t stream);

/* out[r][i] = bf16(silu(gu[r][i]) * gu[r][I + i]), gu f32 [rows][2I]. */
void qwk_silu_mul(const float *gu, int32_t rows, int32_t I, qwk_bf16 *out, cudaStream_t stream);

/* The paged context of a step, as packed by qwi_cuda_plan_pack. */
typedef struct qwk_paged {
    const void *k_cache, *v_cache;       /* this layer: [block][slot][nkv][hd],
                                            bf16, or e4m3 bytes when kv_fp8   */
    const int32_t *hdr;                  /* qwi_cuda_step_hdr: bt_stride at [2]   */
    const int32_t *query_start;          /* [spad+1]                             */
    const int32_t *context_lens;         /* [spad]                               */
    const int32_t *positions;            /* [tpad]                               */
    const int32_t *block_tables;         /* [spad][bt_stride]                    */
    int32_t block_size, nh, nkv, hd;
    float scale;                         /* 1/sqrt(hd)                           */
    /* fp8 cache (0 when left out of an initializer: bf16). An element reads
     * as e4m3(b) * k_scale (K) or * v_scale (V); as on the CPU
     * (lib/cpu/kv_fp8.h) the scales are applied once per score (scale *
     * k_scale, one f32 product) and once per output (v_scale / sum), not
     * per element. */
    int32_t kv_fp8;
    float k_scale, v_scale;
    /* [spad]: nonzero for the decode kernel's sequences (decode rows); NULL
     * when left out of an initializer: every one-row sequence is. */
    const int32_t *decode_seq;
} qwk_paged;

/* Allow the prefill attention kernel for head_dim its dynamic shared memory
 * on the current device. Once per backend create, before any launch; a
 * head_dim without a kernel gives cudaErrorInvalidValue. */
cudaError_t qwk_attention_init(int head_dim);

/* Prefill chunks: each of ntiles tiles ((seq, first row) pairs, int32 [2])
 * covers up to 64 query rows of one sequence; row r attends causally to
 * context positions 0..positions[r]. out bf16 [rows][nh*hd]. Flash-attention
 * style: 64x32 tiles, tensor-core (wmma) products, online softmax. */
void qwk_prefill_attention(const qwk_paged *pg, const qwk_bf16 *q, const int32_t *tiles,
                           int32_t ntiles, qwk_bf16 *out, cudaStream_t stream);

/* The decode rows among seqs: each sequence with one query row this step
 * (row query_start[s]) and pg->decode_seq[s] set (or no decode_seq),
 * attending to context positions 0..context_lens[s]-1; rows of other
 * sequences are not touched. One block per (seq, kv head, split)
 * holding all nh/nkv query heads of the group; a sequence's splits depend on
 * its context length alone (decode_splits.h), so its result does not depend
 * on the batch. A sequence of more than one split writes partials to part_o
 * [seqs][nh][QWI_CUDA_DECODE_MAX_SPLITS][hd] and part_lse [seqs][nh][same],
 * merged by log-sum-exp in split order. max_splits: at least the splits of
 * the longest context among them (qwi_cuda_decode_splits), clamped to
 * [1, QWI_CUDA_DECODE_MAX_SPLITS]; the grid's split dimension, so a step of
 * short contexts launches no empty split blocks and, at 1, no merge. A
 * graph replayed for growing contexts passes the maximum. The result does
 * not depend on it. */
void qwk_decode_attention(const qwk_paged *pg, const qwk_bf16 *q, int32_t seqs, int32_t max_splits, float *part_o,
                          float *part_lse, qwk_bf16 *out, cudaStream_t stream);

/* Copy K/V blocks src[i] -> dst[i] (device int32 arrays of n) in every
 * plane of the pool: planes (2 * layers) of plane_bytes, blocks of
 * block_bytes. */
void qwk_copy_blocks(void *pool, size_t plane_bytes, int32_t planes, size_t block_bytes,
                     const int32_t *src, const int32_t *dst, int32_t n, cudaStream_t stream);

/* The sampler's inputs, as packed by qwi_cuda_plan_pack. */
typedef struct qwk_sample_args {
    float *logits;                 /* [rows][vocab]; banned ids set to -inf here */
    int32_t vocab;
    const int32_t *do_sample, *top_k, *banned_start, *banned;
    const float *temperature, *top_p, *min_p;
    const int64_t *position;
    const uint64_t *seed;
    double *scratch;               /* [rows][vocab]                                */
    int32_t *out;                  /* [rows]: token, or -1 where !do_sample        */
} qwk_sample_args;

/* One block per logit row: the exact semantics of lib/sample.c (see
 * docs/cuda.md for where summation order can differ). */
void qwk_sample(const qwk_sample_args *a, int32_t rows, cudaStream_t stream);

/* The Philox uniform of lib/sample.c, on the device, for rows seeds and
 * positions (a test hook: out[i] = qwi_rng_uniform(seed[i], pos[i])). */
void qwk_rng_uniform(const uint64_t *seed, const int64_t *pos, int32_t n, double *out,
                     cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
