/*
 * kv.c - paged KV block allocator and prefix cache; see kv.h for the design.
 */
#include <stdlib.h>
#include <string.h>
/* the streaming state is declared only for static linking users */
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "kv.h"

/* ---- LRU list of evictable (cached, unreferenced) blocks ---------------- */

static void lru_unlink(qwi_kv_pool *p, int32_t b) {
    int32_t prev = p->lru_prev[b], next = p->lru_next[b];
    if (prev >= 0) p->lru_next[prev] = next; else p->lru_head = next;
    if (next >= 0) p->lru_prev[next] = prev; else p->lru_tail = prev;
    p->lru_prev[b] = p->lru_next[b] = -1;
    p->num_evictable--;
}

static void lru_push_tail(qwi_kv_pool *p, int32_t b) {
    p->lru_prev[b] = p->lru_tail;
    p->lru_next[b] = -1;
    if (p->lru_tail >= 0) p->lru_next[p->lru_tail] = b; else p->lru_head = b;
    p->lru_tail = b;
    p->num_evictable++;
}

/* ---- hash table of registered blocks (chained through hash_next) -------- */

static uint32_t bucket_of(const qwi_kv_pool *p, uint64_t key) {
    return (uint32_t)(key ^ (key >> 32)) & (p->num_buckets - 1);
}

static void hash_insert(qwi_kv_pool *p, int32_t b) {
    uint32_t h = bucket_of(p, p->key[b]);
    p->hash_next[b] = p->buckets[h];
    p->buckets[h] = b;
    p->cached[b] = 1;
}

static void hash_remove(qwi_kv_pool *p, int32_t b) {
    int32_t *link = &p->buckets[bucket_of(p, p->key[b])];
    while (*link != b) link = &p->hash_next[*link];
    *link = p->hash_next[b];
    p->hash_next[b] = -1;
    p->cached[b] = 0;
}

/* The registered block holding exactly these tokens after this parent. */
static int32_t hash_find(const qwi_kv_pool *p, uint64_t key, int32_t parent, const int32_t *tokens,
                         uint64_t salt) {
    const size_t bytes = sizeof(int32_t) * (size_t)p->block_size;
    for (int32_t b = p->buckets[bucket_of(p, key)]; b >= 0; b = p->hash_next[b]) {
        if (p->key[b] != key || p->salt[b] != salt || p->parent[b] != parent) continue;
        if (parent >= 0 && p->parent_gen[b] != p->gen[parent]) continue;
        if (memcmp(p->tokens + (size_t)b * (size_t)p->block_size, tokens, bytes) != 0) continue;
        return b;
    }
    return -1;
}

/* ---- pool ------------------------------------------------------------------ */

qw_status qwi_kv_pool_init(qwi_kv_pool *p, int32_t num_blocks, int32_t block_size, bool caching) {
    memset(p, 0, sizeof *p);
    if (num_blocks <= 0 || block_size <= 0)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "KV pool: %d blocks of %d tokens is not a pool",
                        num_blocks, block_size);
    size_t n = (size_t)num_blocks;
    uint32_t nb = 1;
    while (nb < (uint32_t)num_blocks && nb < (1u << 30)) nb <<= 1;
    p->free_stack = malloc(sizeof(int32_t) * n);
    p->ref_count = calloc(n, sizeof(int32_t));
    p->cached = calloc(n, 1);
    p->key = calloc(n, sizeof(uint64_t));
    p->salt = calloc(n, sizeof(uint64_t));
    p->parent = malloc(sizeof(int32_t) * n);
    p->parent_gen = calloc(n, sizeof(uint32_t));
    p->gen = calloc(n, sizeof(uint32_t));
    p->hash_next = malloc(sizeof(int32_t) * n);
    p->lru_prev = malloc(sizeof(int32_t) * n);
    p->lru_next = malloc(sizeof(int32_t) * n);
    p->buckets = malloc(sizeof(int32_t) * nb);
    /* Token ids of cached blocks: 4 bytes per token, against the KV's
     * kilobytes per token. Only needed when caching. */
    p->tokens = caching ? malloc(sizeof(int32_t) * n * (size_t)block_size) : NULL;
    if (!p->free_stack || !p->ref_count || !p->cached || !p->key || !p->salt || !p->parent ||
        !p->parent_gen || !p->gen || !p->hash_next || !p->lru_prev || !p->lru_next || !p->buckets ||
        (caching && !p->tokens)) {
        qwi_kv_pool_destroy(p);
        return qwi_fail(QW_ERR_OUT_OF_MEMORY, "KV pool: cannot allocate bookkeeping for %d blocks", num_blocks);
    }
    p->num_blocks = num_blocks;
    p->block_size = block_size;
    p->caching = caching;
    p->num_buckets = nb;
    for (uint32_t i = 0; i < nb; i++) p->buckets[i] = -1;
    /* Stack order: block 0 on top, so a fresh engine fills low ids first. */
    for (int32_t i = 0; i < num_blocks; i++) {
        p->free_stack[i] = num_blocks - 1 - i;
        p->parent[i] = -1;
        p->hash_next[i] = p->lru_prev[i] = p->lru_next[i] = -1;
    }
    p->num_free = num_blocks;
    p->lru_head = p->lru_tail = -1;
    return QW_OK;
}

void qwi_kv_pool_destroy(qwi_kv_pool *p) {
    free(p->free_stack);
    free(p->ref_count);
    free(p->cached);
    free(p->key);
    free(p->salt);
    free(p->parent);
    free(p->parent_gen);
    free(p->gen);
    free(p->tokens);
    free(p->hash_next);
    free(p->buckets);
    free(p->lru_prev);
    free(p->lru_next);
    memset(p, 0, sizeof *p);
}

/* ---- tables ------------------------------------------------------------------ */

qw_status qwi_block_table_init(qwi_block_table *t, const qwi_kv_pool *pool, int64_t max_tokens) {
    memset(t, 0, sizeof *t);
    int32_t cap = qwi_kv_blocks_for(pool, max_tokens);
    if (cap < 1) cap = 1;
    t->blocks = malloc(sizeof(int32_t) * (size_t)cap);
    if (!t->blocks) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "block table of %d entries", cap);
    t->capacity = cap;
    return QW_OK;
}

qw_status qwi_block_table_grow(qwi_block_table *t, int32_t entries) {
    if (entries <= t->capacity && t->blocks) return QW_OK;
    int64_t cap = t->capacity > 0 ? t->capacity : 1;
    while (cap < entries) cap *= 2;
    if (cap > INT32_MAX) cap = INT32_MAX;
    int32_t *blocks = realloc(t->blocks, sizeof(int32_t) * (size_t)cap);
    if (!blocks) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "block table of %lld entries", (long long)cap);
    t->blocks = blocks;
    t->capacity = (int32_t)cap;
    return QW_OK;
}

void qwi_block_table_destroy(qwi_block_table *t) {
    free(t->blocks);
    memset(t, 0, sizeof *t);
}

bool qwi_kv_can_reserve(const qwi_kv_pool *pool, const qwi_block_table *t, int64_t num_tokens) {
    int32_t need = qwi_kv_blocks_for(pool, num_tokens) - t->num_blocks;
    return need <= qwi_kv_num_available(pool);
}

/* A block with no holder and no cached content: from the free stack, else
 * by evicting the least recently used cached block. */
static int32_t take_fresh_block(qwi_kv_pool *p) {
    int32_t b;
    if (p->num_free > 0) {
        b = p->free_stack[--p->num_free];
    } else {
        b = p->lru_head;
        lru_unlink(p, b);
        hash_remove(p, b);
        p->num_evictions++;
    }
    /* A new generation orphans any cached child that named b as parent. */
    p->gen[b]++;
    p->ref_count[b] = 1;
    return b;
}

qw_status qwi_kv_reserve(qwi_kv_pool *p, qwi_block_table *t, int64_t num_tokens) {
    int32_t target = qwi_kv_blocks_for(p, num_tokens);
    if (target <= t->num_blocks) return QW_OK;
    if (target > t->capacity)
        return qwi_fail(QW_ERR_INTERNAL, "block table: %d blocks exceed its capacity of %d", target,
                        t->capacity);
    if (target - t->num_blocks > qwi_kv_num_available(p))
        return qwi_fail(QW_ERR_KV_CAPACITY, "KV pool: need %d blocks, %d available",
                        target - t->num_blocks, qwi_kv_num_available(p));
    while (t->num_blocks < target) t->blocks[t->num_blocks++] = take_fresh_block(p);
    return QW_OK;
}

/* Drop one reference to block b. */
static void block_unref(qwi_kv_pool *p, int32_t b) {
    if (--p->ref_count[b] > 0) return;
    if (p->cached[b]) lru_push_tail(p, b);
    else p->free_stack[p->num_free++] = b;
}

void qwi_kv_release(qwi_kv_pool *p, qwi_block_table *t) {
    /* Release in reverse: a sequence's later blocks are the least likely to
     * be shared by others, so they should be evicted first (LRU head), and
     * free-stack order gives the next allocation the same ids in order. */
    for (int32_t i = t->num_blocks - 1; i >= 0; i--) block_unref(p, t->blocks[i]);
    t->num_blocks = 0;
    t->num_hashed = 0;
    t->last_key = 0;
}

void qwi_kv_block_ref(qwi_kv_pool *p, int32_t block) {
    if (p->ref_count[block]++ == 0 && p->cached[block]) lru_unlink(p, block);
}

/* ---- prefix cache --------------------------------------------------------- */

uint64_t qwi_kv_block_key(const qwi_kv_pool *p, uint64_t parent_key, const int32_t *tokens,
                          uint64_t salt) {
    if (p->force_collisions) return 0;
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, &parent_key, sizeof parent_key);
    XXH3_64bits_update(&st, tokens, sizeof(int32_t) * (size_t)p->block_size);
    XXH3_64bits_update(&st, &salt, sizeof salt);
    return XXH3_64bits_digest(&st);
}

int32_t qwi_kv_find_prefix(const qwi_kv_pool *p, const int32_t *tokens, int32_t max_blocks,
                           uint64_t salt, int32_t *out, uint64_t *last_key) {
    if (!p->caching) return 0;
    uint64_t key = 0;
    int32_t parent = -1, n = 0;
    for (; n < max_blocks; n++) {
        const int32_t *blk = tokens + (size_t)n * (size_t)p->block_size;
        uint64_t k = qwi_kv_block_key(p, key, blk, salt);
        int32_t b = hash_find(p, k, parent, blk, salt);
        if (b < 0) break;
        out[n] = b;
        key = k;
        parent = b;
    }
    *last_key = key;
    return n;
}

int32_t qwi_kv_count_evictable(const qwi_kv_pool *p, const int32_t *blocks, int32_t n) {
    int32_t c = 0;
    for (int32_t i = 0; i < n; i++) c += p->ref_count[blocks[i]] == 0;
    return c;
}

void qwi_kv_take_prefix(qwi_kv_pool *p, qwi_block_table *t, const int32_t *blocks, int32_t n,
                        uint64_t last_key) {
    for (int32_t i = 0; i < n; i++) {
        qwi_kv_block_ref(p, blocks[i]);
        t->blocks[t->num_blocks++] = blocks[i];
    }
    t->num_hashed = n;
    t->last_key = last_key;
}

void qwi_kv_register(qwi_kv_pool *p, qwi_block_table *t, const int32_t *tokens,
                     int32_t num_computed_tokens, uint64_t salt) {
    if (!p->caching) return;
    const int32_t bs = p->block_size;
    int32_t full = QWI_MIN(num_computed_tokens / bs, t->num_blocks);
    for (int32_t i = t->num_hashed; i < full; i++) {
        const int32_t *blk = tokens + (size_t)i * (size_t)bs;
        int32_t parent = i > 0 ? t->blocks[i - 1] : -1;
        uint64_t k = qwi_kv_block_key(p, t->last_key, blk, salt);
        int32_t b = t->blocks[i];
        int32_t dup = hash_find(p, k, parent, blk, salt);
        if (dup == b) {
            /* already registered (e.g. a shared block) */
        } else if (dup >= 0) {
            /* Same tokens after the same physical parent: the KV is the same,
             * so use the cached block and let ours go. Later blocks of this
             * table then chain from the cached one and stay reachable. */
            qwi_kv_block_ref(p, dup);
            t->blocks[i] = dup;
            block_unref(p, b);
        } else if (!p->cached[b]) {
            p->key[b] = k;
            p->salt[b] = salt;
            p->parent[b] = parent;
            p->parent_gen[b] = parent >= 0 ? p->gen[parent] : 0;
            memcpy(p->tokens + (size_t)b * (size_t)bs, blk, sizeof(int32_t) * (size_t)bs);
            hash_insert(p, b);
        }
        t->last_key = k;
        t->num_hashed = i + 1;
    }
}
