/*
 * kv_budget.c - KV pool size and max model length at engine create; see
 * kv_budget.h for the policy.
 */
#include <stdio.h>
#include <unistd.h>

#include "kv_budget.h"

uint64_t qwi_kv_budget_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[128];
        unsigned long long kb = 0;
        bool found = false;
        while (!found && fgets(line, sizeof line, f)) found = sscanf(line, "MemAvailable: %llu kB", &kb) == 1;
        fclose(f);
        if (found) return (uint64_t)kb * 1024u;
    }
#ifdef _SC_AVPHYS_PAGES
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) return (uint64_t)pages * (uint64_t)page;
#endif
    return 0;
}

uint64_t qwi_kv_budget_weight_bytes(const qwi_model *model) {
    uint64_t total = 0;
    if (!model || !model->weights) return 0;
    size_t n = qwi_st_count(model->weights);
    for (size_t i = 0; i < n; i++) total += qwi_st_at(model->weights, i)->nbytes;
    return total;
}

const char *qwi_kv_budget_option(int64_t num_blocks_opt, int64_t kv_bytes_opt, bool gpu) {
    if (num_blocks_opt > 0) return "QW_OPT_NUM_KV_BLOCKS";
    if (kv_bytes_opt > 0) return "QW_OPT_KV_CACHE_BYTES";
    return gpu ? "QW_OPT_GPU_MEMORY_UTILIZATION" : "QW_OPT_KV_CACHE_MEMORY_FRACTION";
}

qw_status qwi_kv_budget_cpu_blocks(const qwi_kv_budget *b, int32_t *num_blocks) {
    *num_blocks = 0;
    if (b->per_block == 0) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "KV cache: a KV block of this model has no size");
    int64_t n;
    if (b->num_blocks > 0) {
        n = b->num_blocks;
    } else if (b->kv_cache_bytes > 0) {
        n = (int64_t)((uint64_t)b->kv_cache_bytes / b->per_block);
        if (n < 1)
            return qwi_fail(QW_ERR_KV_CAPACITY,
                            "KV cache: QW_OPT_KV_CACHE_BYTES %lld holds no KV block of %llu bytes: raise it",
                            (long long)b->kv_cache_bytes, (unsigned long long)b->per_block);
    } else {
        double f = b->memory_fraction;
        if (!(f > 0 && f <= 1))
            return qwi_fail(QW_ERR_INVALID_ARGUMENT, "QW_OPT_KV_CACHE_MEMORY_FRACTION must be in (0, 1], got %g", f);
        double budget;
        if (b->mem_available == 0) {
            budget = (double)QWI_KV_BUDGET_FALLBACK_BYTES;
        } else {
            /* The weights stay resident (copied, or the mapped file's page
             * cache, which MemAvailable counts as free): not ours to give. */
            uint64_t after = b->mem_available > b->weight_bytes ? b->mem_available - b->weight_bytes : 0;
            budget = f * (double)after;
        }
        double nd = budget / (double)b->per_block;
        n = nd >= (double)INT64_MAX ? INT64_MAX : (int64_t)nd;
        if (n < 1)
            return qwi_fail(QW_ERR_KV_CAPACITY,
                            "KV cache: QW_OPT_KV_CACHE_MEMORY_FRACTION %g of the %.1f MiB of RAM available after "
                            "the weights (%.1f MiB) holds no KV block of %llu bytes: raise it or set "
                            "QW_OPT_KV_CACHE_BYTES",
                            f, (double)(b->mem_available > b->weight_bytes ? b->mem_available - b->weight_bytes : 0) / 1048576.0,
                            (double)b->weight_bytes / 1048576.0, (unsigned long long)b->per_block);
    }
    /* More blocks than max_num_seqs full-length sequences can use is waste;
     * an explicit block count is taken as given. */
    if (b->num_blocks <= 0 && b->max_useful_blocks > 0 && n > b->max_useful_blocks) n = b->max_useful_blocks;
    if (n > INT32_MAX) n = INT32_MAX;
    *num_blocks = (int32_t)n;
    return QW_OK;
}

qw_status qwi_kv_budget_fit_len(int32_t num_blocks, int32_t block_size, int32_t max_model_len,
                                bool len_explicit, const char *pool_option, int32_t *out_len) {
    *out_len = 0;
    if (num_blocks <= 0 || block_size <= 0 || max_model_len <= 0)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "KV cache: %d blocks of %d tokens for a max model length of %d",
                        num_blocks, block_size, max_model_len);
    int64_t pool_tokens = (int64_t)num_blocks * block_size;
    if (max_model_len <= pool_tokens) {
        *out_len = max_model_len;
        return QW_OK;
    }
    if (len_explicit)
        return qwi_fail(QW_ERR_KV_CAPACITY,
                        "QW_OPT_MAX_MODEL_LEN %d does not fit the KV cache: one sequence of that length needs "
                        "%lld blocks of %d tokens but the pool has %d (%lld tokens, sized by %s); raise %s or "
                        "lower QW_OPT_MAX_MODEL_LEN",
                        max_model_len, (long long)QWI_DIV_UP((int64_t)max_model_len, block_size), block_size,
                        num_blocks, (long long)pool_tokens, pool_option, pool_option);
    *out_len = (int32_t)pool_tokens;   /* < max_model_len, so it fits */
    return QW_OK;
}
