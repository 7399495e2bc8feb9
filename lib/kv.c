/*
 * kv.c - paged KV block allocator; see kv.h for the design.
 */
#include <stdlib.h>
#include <string.h>

#include "kv.h"

qw_status qwi_kv_pool_init(qwi_kv_pool *pool, int32_t num_blocks, int32_t block_size) {
    memset(pool, 0, sizeof *pool);
    if (num_blocks <= 0 || block_size <= 0)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "KV pool: %d blocks of %d tokens is not a pool",
                        num_blocks, block_size);
    pool->free_stack = malloc(sizeof(int32_t) * (size_t)num_blocks);
    pool->ref_count = calloc((size_t)num_blocks, sizeof(int32_t));
    if (!pool->free_stack || !pool->ref_count) {
        free(pool->free_stack);
        free(pool->ref_count);
        memset(pool, 0, sizeof *pool);
        return qwi_fail(QW_ERR_OUT_OF_MEMORY, "KV pool: cannot allocate bookkeeping for %d blocks",
                        num_blocks);
    }
    pool->num_blocks = num_blocks;
    pool->block_size = block_size;
    /* Stack order: block 0 on top, so a fresh engine fills low ids first. */
    for (int32_t i = 0; i < num_blocks; i++) pool->free_stack[i] = num_blocks - 1 - i;
    pool->num_free = num_blocks;
    return QW_OK;
}

void qwi_kv_pool_destroy(qwi_kv_pool *pool) {
    free(pool->free_stack);
    free(pool->ref_count);
    memset(pool, 0, sizeof *pool);
}

qw_status qwi_block_table_init(qwi_block_table *t, const qwi_kv_pool *pool, int64_t max_tokens) {
    memset(t, 0, sizeof *t);
    int32_t cap = qwi_kv_blocks_for(pool, max_tokens);
    if (cap < 1) cap = 1;
    t->blocks = malloc(sizeof(int32_t) * (size_t)cap);
    if (!t->blocks) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "block table of %d entries", cap);
    t->capacity = cap;
    return QW_OK;
}

void qwi_block_table_destroy(qwi_block_table *t) {
    free(t->blocks);
    memset(t, 0, sizeof *t);
}

bool qwi_kv_can_reserve(const qwi_kv_pool *pool, const qwi_block_table *t, int64_t num_tokens) {
    int32_t need = qwi_kv_blocks_for(pool, num_tokens) - t->num_blocks;
    return need <= pool->num_free;
}

qw_status qwi_kv_reserve(qwi_kv_pool *pool, qwi_block_table *t, int64_t num_tokens) {
    int32_t target = qwi_kv_blocks_for(pool, num_tokens);
    if (target <= t->num_blocks) return QW_OK;
    if (target > t->capacity)
        return qwi_fail(QW_ERR_INTERNAL, "block table: %d blocks exceed its capacity of %d",
                        target, t->capacity);
    if (target - t->num_blocks > pool->num_free)
        return qwi_fail(QW_ERR_KV_CAPACITY, "KV pool: need %d blocks, %d free",
                        target - t->num_blocks, pool->num_free);
    while (t->num_blocks < target) {
        int32_t b = pool->free_stack[--pool->num_free];
        pool->ref_count[b] = 1;
        t->blocks[t->num_blocks++] = b;
    }
    return QW_OK;
}

void qwi_kv_release(qwi_kv_pool *pool, qwi_block_table *t) {
    /* Release in reverse so the sequence's first block ends on top of the
     * free stack: the next allocation reuses the same ids in the same order. */
    for (int32_t i = t->num_blocks - 1; i >= 0; i--) {
        int32_t b = t->blocks[i];
        if (--pool->ref_count[b] == 0) pool->free_stack[pool->num_free++] = b;
    }
    t->num_blocks = 0;
}

void qwi_kv_block_ref(qwi_kv_pool *pool, int32_t block) { pool->ref_count[block]++; }
