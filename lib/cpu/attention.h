/*
 * attention.h - causal grouped-query attention over the paged KV cache, and
 * the write of a step's new K/V rows into their slots.
 *
 * Cache layout, per layer, K and V separately, elements f32, bf16
 * (cpu/kv_bf16.h) or fp8 e4m3 (cpu/kv_fp8.h), as QW_OPT_KV_CACHE_DTYPE
 * says. A position p of sequence s lives in block b =
 * block_tables[s*max_blocks_per_seq + p/block_size], offset o =
 * p%block_size (slot b*block_size + o). Every block is one contiguous run
 * of block_size * num_kv_heads * head_dim elements (what block copies
 * move), laid out as:
 *   K and V of the f32 cache: [block_size][num_kv_heads][head_dim] (rows);
 *   V of the bf16 and fp8 caches: [num_kv_heads][block_size][head_dim]
 *   ("V head slices", qwi_cpu_vhead_index): a (block, kv head) pair's V is
 *   one contiguous run, as its K plane is, so a decode task reading one
 *   head streams whole 4 KiB runs instead of a head_dim slice out of every
 *   position's row (qw-abench: ~+5% of K+V bandwidth on Zen 5);
 *   K of the bf16 and fp8 caches: [num_kv_heads][head_dim][block_size]
 *   ("K planes", qwi_cpu_kplane_index): the scores take positions as SIMD
 *   lanes (kv_bf16.h, tscores), so a K tile must become [head_dim][positions];
 *   from planes that is a contiguous widening copy per (block, dim) rather
 *   than 8x8 register transposes, which cost several times the scores
 *   themselves when few rows share a tile (decode). The bits are the same.
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
 * K/V prefetched while one computes: the heads of a block share its pages)
 * - 32 sequences are 32 tasks, handed out dynamically; fewer
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
    /* Fast numerics over the bf16 or fp8 cache: q.K and P.V on bf16 dot
     * products (cpu/kv_bf16dot.h) where kb has them (dscores, dpv) and
     * head_dim is even, the fp8 cache's tiles widened to bf16 first
     * (kv_fp8.h: tile_bf16); otherwise, and for the f32 cache, ignored. */
    bool bf16_dot;
    float *out;                  /* [num_tokens][num_heads*head_dim]               */
    /* When not NULL, each (row, kv head) slice of out is also rounded, as it
     * is written, into these bf16 pairs ([num_tokens][num_heads*head_dim/2],
     * qwi_pair_round_rows' layout of out; head_dim even): the o projection's
     * input for qwi_cpu_matmul_rounded (cpu/ops.h). */
    uint32_t *out_pairs;
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

/* Whether a's attention runs on bf16 dot products (the bf16_dot field's
 * rule): for tools that report what ran. */
bool qwi_cpu_attn_on_dot_products(const qwi_cpu_attn *a);

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

/* Index, in a layer's K plane pool of a bf16 or fp8 cache, of element e
 * (kv head g, dim d: e = g*head_dim + d) of slot `slot`, with row_elems =
 * num_kv_heads*head_dim; element e+1 of the same slot is block_size further
 * on, the same element of the next offset in the block 1 further on. */
static inline int64_t qwi_cpu_kplane_index(int64_t slot, int32_t block_size, int64_t row_elems,
                                           int64_t e) {
    return (slot / block_size) * block_size * row_elems + e * block_size + slot % block_size;
}

/* Index, in a layer's V pool of a bf16 or fp8 cache, of element d of kv
 * head g of slot `slot` ("V head slices"): a block holds, per kv head,
 * block_size rows of head_dim elements, so a (block, head) slice is one
 * contiguous run, as its K plane is. */
static inline int64_t qwi_cpu_vhead_index(int64_t slot, int32_t block_size, int32_t num_kv_heads,
                                          int32_t head_dim, int32_t g, int64_t d) {
    const int64_t b = slot / block_size, o = slot % block_size;
    return ((b * num_kv_heads + g) * block_size + o) * head_dim + d;
}

/* Elements [e0, e1) of one K row (row_elems = num_kv_heads*head_dim f32)
 * into slot `slot` of the bf16 (fp8) K plane pool k_cache, each rounded as
 * qwi_cpu_kv_bf16_round (qwi_cpu_kv_fp8_round with k_scale) does. The slot
 * is checked by the caller. Consecutive slots of a block share cache lines
 * here, so parallel writers should split by element (kv head), not by
 * row. */
void qwi_cpu_kv_put_k_bf16(uint16_t *k_cache, const float *k_row, int64_t slot, int32_t block_size,
                           int64_t row_elems, int64_t e0, int64_t e1);
void qwi_cpu_kv_put_k_fp8(uint8_t *k_cache, const float *k_row, int64_t slot, int32_t block_size,
                          int64_t row_elems, float k_scale, int64_t e0, int64_t e1);

/* The same as qwi_cpu_kv_write into an fp8 cache of block_size-slot
 * blocks with heads of head_dim elements (row_floats = num_kv_heads *
 * head_dim): K elements stored as qwi_f32_to_e4m3(x / k_scale) in K
 * planes, V ones as qwi_f32_to_e4m3(x / v_scale) in V head slices. */
void qwi_cpu_kv_write_fp8(uint8_t *k_cache, uint8_t *v_cache, const float *k, const float *v,
                          const int32_t *slot_mapping, int32_t num_tokens, int64_t row_floats,
                          int32_t block_size, int32_t head_dim, float k_scale, float v_scale);

/* One V row (row_floats = num_kv_heads * head_dim f32) into slot `slot` of
 * a bf16 (fp8, with v_scale) V pool, head by head into its V head slices,
 * each element rounded as qwi_cpu_kv_bf16_round (qwi_cpu_kv_fp8_round)
 * does. The slot is checked by the caller. */
void qwi_cpu_kv_put_v_bf16(uint16_t *v_cache, const float *v_row, int64_t slot, int32_t block_size,
                           int64_t row_floats, int32_t head_dim);
void qwi_cpu_kv_put_v_fp8(uint8_t *v_cache, const float *v_row, int64_t slot, int32_t block_size,
                          int64_t row_floats, int32_t head_dim, float v_scale);

/* The same as qwi_cpu_kv_write into a bf16 cache of block_size-slot
 * blocks with heads of head_dim elements, each element rounded to nearest
 * even, K in K planes, V in V head slices. */
void qwi_cpu_kv_write_bf16(uint16_t *k_cache, uint16_t *v_cache, const float *k, const float *v,
                           const int32_t *slot_mapping, int32_t num_tokens, int64_t row_floats,
                           int32_t block_size, int32_t head_dim);

/* Copy row r of k and v ([num_tokens][row_floats]) to slot slot_mapping[r]
 * of k_cache/v_cache, for every row (slots checked by the caller). */
void qwi_cpu_kv_write(float *k_cache, float *v_cache, const float *k, const float *v,
                      const int32_t *slot_mapping, int32_t num_tokens, int64_t row_floats);

#endif
