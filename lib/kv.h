/*
 * kv.h - the paged KV block allocator (the host side of PagedAttention) and
 * the automatic prefix cache that lives in it.
 *
 * The KV pool is num_blocks fixed-size blocks of block_size tokens. The
 * backend owns the memory; this module owns only the bookkeeping: which
 * blocks are free, how many holders each block has, which full blocks hold
 * which tokens, and each sequence's block table (logical block i of the
 * sequence -> physical block id).
 *
 * Design:
 *   - Reference counts let several tables hold one block (shared prefixes,
 *     session forks). Only full blocks are ever shared, and a full block is
 *     never written again, so sharing needs no copy-on-write.
 *   - A block whose count drops to 0 goes to one of two places: the free
 *     stack if it holds nothing reusable, or the tail of the evictable LRU
 *     list if it is registered in the prefix cache. Allocation takes from the
 *     free stack first and evicts the LRU head only when the stack is empty,
 *     so cached prefixes survive as long as memory allows.
 *   - Prefix cache key of a full block: XXH3 over (parent key, the block's
 *     token ids, salt). Keys only select candidates: a hit also needs the
 *     stored token ids, the salt and the parent's physical block (with its
 *     reuse generation) to match, so a hash collision can never share wrong
 *     KV. A child is only reachable through its exact parent, so evicting a
 *     block (which bumps its generation) orphans its descendants safely.
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
    int32_t *ref_count;       /* [num_blocks]; 0 = free or evictable         */
    int32_t num_free;         /* blocks on the free stack                    */
    int32_t *free_stack;      /* [num_blocks]                                */

    /* prefix cache */
    bool caching;             /* false: nothing is ever registered           */
    bool force_collisions;    /* test hook: every key is 0                   */
    uint8_t *cached;          /* [num_blocks] registered in the hash table   */
    uint64_t *key;            /* [num_blocks]                                */
    uint64_t *salt;           /* [num_blocks]                                */
    int32_t *parent;          /* [num_blocks] parent block, -1 for the first */
    uint32_t *parent_gen;     /* [num_blocks] parent's generation then       */
    uint32_t *gen;            /* [num_blocks] bumped when a block is reused   */
    int32_t *tokens;          /* [num_blocks][block_size] ids of full blocks */
    int32_t *hash_next;       /* [num_blocks] chain in a bucket              */
    int32_t *buckets;         /* [num_buckets] head block or -1              */
    uint32_t num_buckets;     /* power of two                                */
    int32_t *lru_prev, *lru_next; /* evictable list, oldest at head          */
    int32_t lru_head, lru_tail;
    int32_t num_evictable;
    uint64_t num_evictions;
} qwi_kv_pool;

/* A sequence's block table. blocks[i] holds tokens i*block_size ..
 * (i+1)*block_size-1 of the sequence. Owned by the sequence (or session);
 * its blocks are references into the pool. The first num_hashed blocks are
 * registered in (or were found in) the prefix cache, and last_key is the
 * key of block num_hashed-1, the parent key of the next one. */
typedef struct qwi_block_table {
    int32_t *blocks;
    int32_t num_blocks;
    int32_t capacity;         /* allocated entries of blocks[]              */
    int32_t num_hashed;
    uint64_t last_key;
} qwi_block_table;

/* Set up a pool of num_blocks blocks of block_size tokens, all free, with
 * the prefix cache on or off. On failure the pool is zeroed and nothing is
 * allocated. */
qw_status qwi_kv_pool_init(qwi_kv_pool *pool, int32_t num_blocks, int32_t block_size, bool caching);

/* Free the pool's bookkeeping (not the tables that may still refer to it). */
void qwi_kv_pool_destroy(qwi_kv_pool *pool);

/* Blocks needed to hold num_tokens tokens. */
static inline int32_t qwi_kv_blocks_for(const qwi_kv_pool *pool, int64_t num_tokens) {
    return (int32_t)((num_tokens + pool->block_size - 1) / pool->block_size);
}

/* Blocks that an allocation can use now: free plus evictable. */
static inline int32_t qwi_kv_num_available(const qwi_kv_pool *pool) {
    return pool->num_free + pool->num_evictable;
}

/* Blocks held by someone (ref count > 0). */
static inline int32_t qwi_kv_num_used(const qwi_kv_pool *pool) {
    return pool->num_blocks - pool->num_free - pool->num_evictable;
}

/* Prepare an empty table able to hold max_tokens without reallocating.
 * On failure the table is empty and owns nothing. */
qw_status qwi_block_table_init(qwi_block_table *t, const qwi_kv_pool *pool, int64_t max_tokens);

/* Make the table's array hold at least entries block ids (amortised
 * doubling), so a table grows with its sequence instead of being sized for
 * the longest one up front. A table with no array gets one. On failure
 * (QW_ERR_OUT_OF_MEMORY) the table is unchanged. */
qw_status qwi_block_table_grow(qwi_block_table *t, int32_t entries);

/* Free the table's array. The table must hold no blocks (release first). */
void qwi_block_table_destroy(qwi_block_table *t);

/* True if the table can be grown to cover num_tokens tokens with the blocks
 * available now. Changes nothing. */
bool qwi_kv_can_reserve(const qwi_kv_pool *pool, const qwi_block_table *t, int64_t num_tokens);

/* Grow the table so it covers num_tokens tokens, taking fresh blocks (ref
 * count 1): free ones first, then evicting the least recently used cached
 * block. Returns QW_ERR_KV_CAPACITY (nothing changed) when the pool lacks
 * blocks, QW_ERR_INTERNAL when the table's capacity is exceeded. */
qw_status qwi_kv_reserve(qwi_kv_pool *pool, qwi_block_table *t, int64_t num_tokens);

/* Drop the table's reference to each of its blocks and leave it empty.
 * Blocks reaching 0 become evictable (cached ones, newest last) or free. */
void qwi_kv_release(qwi_kv_pool *pool, qwi_block_table *t);

/* Take one more reference to a block (sharing); an evictable block leaves
 * the LRU list. */
void qwi_kv_block_ref(qwi_kv_pool *pool, int32_t block);

/* Key of a full block with parent key parent_key. */
uint64_t qwi_kv_block_key(const qwi_kv_pool *pool, uint64_t parent_key, const int32_t *tokens,
                          uint64_t salt);

/* Find the longest cached prefix of tokens[0..max_blocks*block_size) for an
 * EMPTY table: writes the matching block ids to out[] (max_blocks entries)
 * and the key of the last one to *last_key; returns how many matched.
 * Changes nothing (pair with qwi_kv_take_prefix). 0 when caching is off. */
int32_t qwi_kv_find_prefix(const qwi_kv_pool *pool, const int32_t *tokens, int32_t max_blocks,
                           uint64_t salt, int32_t *out, uint64_t *last_key);

/* How many of blocks[0..n) are evictable now (ref count 0): taking them
 * reduces what an allocation can use. */
int32_t qwi_kv_count_evictable(const qwi_kv_pool *pool, const int32_t *blocks, int32_t n);

/* Append the found blocks to an empty table, taking a reference to each,
 * and mark them hashed. */
void qwi_kv_take_prefix(qwi_kv_pool *pool, qwi_block_table *t, const int32_t *blocks, int32_t n,
                        uint64_t last_key);

/* Register the table's full blocks whose KV is computed (the first
 * num_computed_tokens of tokens) in the prefix cache. A block whose content
 * is already cached in another block stays unregistered (it is freed, not
 * kept, when released). No-op when caching is off. */
void qwi_kv_register(qwi_kv_pool *pool, qwi_block_table *t, const int32_t *tokens,
                     int32_t num_computed_tokens, uint64_t salt);

#endif
