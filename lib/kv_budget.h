/*
 * kv_budget.h - how big the KV pool is and how long a sequence may be,
 * decided once at engine create (DESIGN.md: the engine owns KV sizing).
 *
 * The behaviour a vLLM user expects:
 *   - The CPU pool takes a fraction (QW_OPT_KV_CACHE_MEMORY_FRACTION,
 *     default 0.5) of the RAM available after the weights, unless
 *     QW_OPT_KV_CACHE_BYTES or QW_OPT_NUM_KV_BLOCKS size it explicitly. (A
 *     GPU backend sizes its own pool from device memory.)
 *   - The max model length must fit the pool for one sequence. If the user
 *     set QW_OPT_MAX_MODEL_LEN, a pool too small for it fails the create,
 *     as vLLM does; if the length came from config.json it is capped to
 *     what the pool holds, since a default that refuses every request
 *     without QW_REQ_MAX_TOKENS helps nobody.
 * Pure arithmetic apart from qwi_kv_budget_mem_available, so the decisions
 * are tested with any memory size.
 */
#ifndef QWI_KV_BUDGET_H
#define QWI_KV_BUDGET_H

#include "common.h"
#include "model.h"

/* What the CPU pool size is decided from (all bytes unless said). */
typedef struct qwi_kv_budget {
    int64_t num_blocks;        /* QW_OPT_NUM_KV_BLOCKS; 0 = not set            */
    int64_t kv_cache_bytes;    /* QW_OPT_KV_CACHE_BYTES; 0 = not set           */
    double memory_fraction;    /* QW_OPT_KV_CACHE_MEMORY_FRACTION, in (0, 1]   */
    uint64_t mem_available;    /* RAM available now; 0 = unknown               */
    uint64_t weight_bytes;     /* weights that stay resident beside the pool   */
    uint64_t per_block;        /* bytes of one KV block, at the cache's dtype
                                  (qwi_cpu_kv_bytes_per_block at the resolved
                                  QW_OPT_KV_CACHE_DTYPE: bf16 holds 2x, fp8 4x the tokens of f32) */
    int64_t max_useful_blocks; /* max_num_seqs full-length sequences; 0 = none */
} qwi_kv_budget;

/* Pool size used when available memory cannot be read (no /proc/meminfo
 * and no sysconf answer): the fixed default of earlier versions. */
#define QWI_KV_BUDGET_FALLBACK_BYTES ((uint64_t)1 << 30)

/* Bytes of RAM available to a new allocation now: MemAvailable from
 * /proc/meminfo, else sysconf(_SC_AVPHYS_PAGES) pages; 0 when neither
 * answers. Thread-safe. */
uint64_t qwi_kv_budget_mem_available(void);

/* Total bytes of the model's weight tensors (every tensor of its files). */
uint64_t qwi_kv_budget_weight_bytes(const qwi_model *model);

/* Number of blocks of the CPU pool: the explicit count, else kv_cache_bytes
 * / per_block, else memory_fraction * (mem_available - weight_bytes) /
 * per_block; the two byte-based ones capped at max_useful_blocks and at
 * INT32_MAX. QW_ERR_KV_CAPACITY, with a message naming the option that
 * sized it, when not one block fits; *num_blocks is then 0. */
qw_status qwi_kv_budget_cpu_blocks(const qwi_kv_budget *b, int32_t *num_blocks);

/* The option that decided the pool size, for messages: QW_OPT_NUM_KV_BLOCKS
 * when num_blocks_opt > 0, else QW_OPT_KV_CACHE_BYTES when kv_bytes_opt > 0,
 * else the fraction option of the device (gpu: QW_OPT_GPU_MEMORY_UTILIZATION,
 * cpu: QW_OPT_KV_CACHE_MEMORY_FRACTION). Static string. */
const char *qwi_kv_budget_option(int64_t num_blocks_opt, int64_t kv_bytes_opt, bool gpu);

/* Fit the max model length to a pool of num_blocks blocks of block_size
 * tokens: a sequence of L tokens fits when L <= num_blocks * block_size (as
 * vLLM counts it). *out_len gets max_model_len when it fits; otherwise, if
 * len_explicit (QW_OPT_MAX_MODEL_LEN was set), QW_ERR_KV_CAPACITY with a
 * message naming QW_OPT_MAX_MODEL_LEN and pool_option (the option to
 * raise), else the capped length num_blocks * block_size. */
qw_status qwi_kv_budget_fit_len(int32_t num_blocks, int32_t block_size, int32_t max_model_len,
                                bool len_explicit, const char *pool_option, int32_t *out_len);

#endif
