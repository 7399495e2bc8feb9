/*
 * attention.h - causal grouped-query attention over the paged KV cache, and
 * the write of a step's new K/V rows into their slots.
 *
 * Cache layout, per layer, K and V separately: [num_blocks][block_size]
 * [num_kv_heads][head_dim], f32, bf16 (cpu/kv_bf16.h) or fp8 e4m3
 * (cpu/kv_fp8.h), as QW_OPT_KV_CACHE_DTYPE says. A position p of sequence s lives in block
 * block_tables[s*max_blocks_per_seq + p/block_size], slot p%block_size.
 *
 * Determinism: a query row visits its context positions 0..pos in order, in
 * tiles of QWI_CPU_ATTN_TILE positions aligned at position 0 (online
 * softmax between tiles), so the result depends on the row's position and
 * the cached values only - not on the chunk the row came in, the other rows,
 * or the thread that ran it.
 *
 * Parallelism: one task per (run of rows, kv head), a run being up to
 * qwi_cpu_attn_run_rows consecutive rows of one sequence, so a prefill
 * chunk's rows share each K/V tile within a run. A decode step with at
 * least 8 rows per thread, every row a different sequence, is split by
 * sequence instead (all kv heads of one sequence per task, the next head's
 * K/V prefetched while one computes: the heads' slices share cache rows
 * and pages) - 32 sequences are 32 tasks, handed out dynamically; fewer
 * decode rows keep the (sequence, kv head) split, so one sequence still
 * uses every thread.
 */
#ifndef QWI_CPU_ATTENTION_H
#define QWI_CPU_ATTENTION_H

#include "common.h"
#include "cpu/kernels.h"
#include "cpu/kv_bf16.h"
#include "cpu/kv_fp8.h"
#include "cpu/threadpool.h"

#define QWI_CPU_ATTN_TILE 128

typedef struct qwi_cpu_attn {
    const float *q;              /* [num_tokens][num_heads*head_dim], RoPE applied */
    const float *k_cache;        /* this layer's K pool (f32 cache)                */
    const float *v_cache;        /* this layer's V pool (f32 cache)                */
    /* The bf16 cache instead: when k_bf16 is set, k_bf16, v_bf16 and kb
     * are used and k_cache/v_cache are not. */
    const uint16_t *k_bf16, *v_bf16;
    const qwi_cpu_kv_bf16_kernels *kb;
    /* The fp8 cache instead: when k_fp8 is set, k_fp8, v_fp8, kf, kb (its
     * scores, softmax and scale kernels) and this layer's k_scale and
     * v_scale (finite, > 0) are used; k_bf16 and k_cache are not. */
    const uint8_t *k_fp8, *v_fp8;
    const qwi_cpu_kv_fp8_kernels *kf;
    float k_scale, v_scale;
    float *out;                  /* [num_tokens][num_heads*head_dim]               */
    const int32_t *positions;    /* [num_tokens]: row r attends to 0..positions[r] */
    const int32_t *row_seq;      /* [num_tokens]: the sequence of row r            */
    const int32_t *block_tables; /* [num_seqs][max_blocks_per_seq]                 */
    int32_t max_blocks_per_seq;
    int32_t block_size;
    int32_t num_tokens;
    int32_t num_heads;
    int32_t num_kv_heads;        /* divides num_heads                              */
    int32_t head_dim;
    float scale;                 /* usually 1/sqrt(head_dim)                        */
} qwi_cpu_attn;

/* Floats of per-thread scratch qwr_attention_row needs for this shape. */
size_t qwi_cpu_attn_scratch_floats(int32_t num_heads, int32_t num_kv_heads, int32_t head_dim);

/* Attention of one query row r for the q heads of kv head g, written to
 * a->out. scratch holds qwi_cpu_attn_scratch_floats floats. The caller has
 * checked every block id reached is inside the pool. */
void qwr_attention_row(const qwi_cpu_attn *a, const qwi_cpu_kernels *kt, int32_t r,
                       int32_t g, float *scratch);

/* All rows and kv heads of a, in parallel; scratch[t] is thread t's. */
void qwi_cpu_attention(qwi_cpu_pool *pool, const qwi_cpu_kernels *kt, float *const *scratch,
                       const qwi_cpu_attn *a);

/* Most rows per run qwi_cpu_attention uses for a on nthreads threads
 * (1 .. 16): fewer when that is what keeps every thread busy. */
int32_t qwi_cpu_attn_run_rows(const qwi_cpu_attn *a, int nthreads);

/* The split of qwi_cpu_attention, exposed for tests: if row r starts a run
 * (runs of at most run_rows rows, one sequence, consecutive positions),
 * the row after the run's last; otherwise r (no task starts at r). */
int32_t qwi_cpu_attn_run_end(const qwi_cpu_attn *a, int32_t run_rows, int32_t r);

/* The same as qwi_cpu_kv_write into an fp8 cache: K elements stored as
 * qwi_f32_to_e4m3(x / k_scale), V ones as qwi_f32_to_e4m3(x / v_scale). */
void qwi_cpu_kv_write_fp8(uint8_t *k_cache, uint8_t *v_cache, const float *k, const float *v,
                          const int32_t *slot_mapping, int32_t num_tokens, int64_t row_floats,
                          float k_scale, float v_scale);

/* The same as qwi_cpu_kv_write into a bf16 cache, each element rounded to
 * nearest even. */
void qwi_cpu_kv_write_bf16(uint16_t *k_cache, uint16_t *v_cache, const float *k, const float *v,
                           const int32_t *slot_mapping, int32_t num_tokens, int64_t row_floats);

/* Copy row r of k and v ([num_tokens][row_floats]) to slot slot_mapping[r]
 * of k_cache/v_cache, for every row (slots checked by the caller). */
void qwi_cpu_kv_write(float *k_cache, float *v_cache, const float *k, const float *v,
                      const int32_t *slot_mapping, int32_t num_tokens, int64_t row_floats);

#endif
