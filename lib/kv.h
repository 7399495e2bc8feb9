/*
 * kv.h - the paged KV block allocator (the host side of PagedAttention).
 *
 * The KV pool is num_blocks fixed-size blocks of block_size tokens. The
 * backend owns the memory; this module owns only the bookkeeping: which
 * blocks are free, how many holders each block has, and each sequence's
 * block table (logical block i of the sequence -> physical block id).
 *
 * Design:
 *   - A free list (LIFO stack of block ids) makes allocate/free O(1) per
 *     block. LIFO reuses recently touched blocks, which are warm in cache.
 *   - Reference counts let several tables hold one block (shared prefixes,
 *     forks); a block returns to the free list when its count drops to 0.
 *   - can_X / X pairs: qwi_kv_can_reserve() answers without changing
 *     anything, so the scheduler decides (and preempts) before it commits;
 *     qwi_kv_reserve() then cannot fail for lack of blocks.
 *   - A table only ever grows at its end or is released whole, so waste is
 *     below one block per sequence.
 */
#ifndef QWI_KV_H
#define QWI_KV_H

#include "common.h"

typedef struct qwi_kv_pool {
    int32_t num_blocks;
    int32_t block_size;
    int32_t num_free;
    int32_t *free_stack;   /* [num_blocks]; free ids in [0, num_free)   */
    int32_t *ref_count;    /* [num_blocks]; 0 = free                     */
} qwi_kv_pool;

/* A sequence's block table. blocks[i] holds tokens i*block_size ..
 * (i+1)*block_size-1 of the sequence. Owned by the sequence; its blocks are
 * references into the pool. */
typedef struct qwi_block_table {
    int32_t *blocks;
    int32_t num_blocks;
    int32_t capacity;      /* allocated entries of blocks[]              */
} qwi_block_table;

/* Set up a pool of num_blocks blocks of block_size tokens, all free.
 * On failure the pool is zeroed and nothing is allocated. */
qw_status qwi_kv_pool_init(qwi_kv_pool *pool, int32_t num_blocks, int32_t block_size);

/* Free the pool's bookkeeping (not the tables that may still refer to it). */
void qwi_kv_pool_destroy(qwi_kv_pool *pool);

/* Blocks needed to hold num_tokens tokens. */
static inline int32_t qwi_kv_blocks_for(const qwi_kv_pool *pool, int64_t num_tokens) {
    return (int32_t)((num_tokens + pool->block_size - 1) / pool->block_size);
}

/* Prepare an empty table able to hold max_tokens without reallocating.
 * On failure the table is empty and owns nothing. */
qw_status qwi_block_table_init(qwi_block_table *t, const qwi_kv_pool *pool, int64_t max_tokens);

/* Free the table's array. The table must hold no blocks (release first). */
void qwi_block_table_destroy(qwi_block_table *t);

/* True if the table can be grown to cover num_tokens tokens with the free
 * blocks available now. Changes nothing. */
bool qwi_kv_can_reserve(const qwi_kv_pool *pool, const qwi_block_table *t, int64_t num_tokens);

/* Grow the table so it covers num_tokens tokens, taking fresh blocks (ref
 * count 1) from the free list. Returns QW_ERR_KV_CAPACITY (nothing changed)
 * when the pool lacks blocks, QW_ERR_INTERNAL when the table's capacity is
 * exceeded. */
qw_status qwi_kv_reserve(qwi_kv_pool *pool, qwi_block_table *t, int64_t num_tokens);

/* Drop the table's reference to each of its blocks (blocks reaching 0 go
 * back to the free list) and leave the table empty. */
void qwi_kv_release(qwi_kv_pool *pool, qwi_block_table *t);

/* Take one more reference to a block already held by someone (sharing). */
void qwi_kv_block_ref(qwi_kv_pool *pool, int32_t block);

/* Number of free blocks. */
static inline int32_t qwi_kv_num_free(const qwi_kv_pool *pool) { return pool->num_free; }

#endif
