/*
 * options.h - the internal layout of qw_engine_options.
 */
#ifndef QWI_OPTIONS_H
#define QWI_OPTIONS_H

#include "common.h"
#include "error_scope.h"

struct qw_engine_options {
    qwi_err_slot err;            /* messages of failed calls on it (error_scope.h) */
    char *model_path;
    char *device;
    qw_progress_fn progress_fn;  /* qw_engine_options_set_progress */
    void *progress_user;
    int64_t num_threads;
    int64_t max_num_seqs;
    int64_t max_num_batched_tokens;
    int64_t block_size;
    int64_t kv_cache_bytes;
    int64_t num_kv_blocks;
    int64_t max_model_len;
    int64_t seed;
    int64_t enable_chunked_prefill;
    int64_t enable_prefix_caching;
    int64_t max_num_partial_prefills;
    int64_t long_prefill_token_threshold;
    int64_t priority_aging_steps;
    double gpu_memory_utilization;
    double kv_cache_memory_fraction;  /* CPU KV pool: share of available RAM   */
    int64_t max_waiting_requests;     /* 0 = unbounded                         */
    int64_t check_weights;            /* 1 = NaN/inf scan at create (default)  */
    int64_t numerics;                 /* qw_numerics (default QW_NUMERICS_FAST) */
    int64_t kv_cache_dtype;           /* qw_kv_cache_dtype (default AUTO)      */
};

#define QWI_DEFAULT_MAX_NUM_SEQS 256
#define QWI_DEFAULT_MAX_BATCHED_TOKENS 2048
#define QWI_DEFAULT_BLOCK_SIZE 16
/* Half of the RAM available after the weights: the host application, the
 * page cache of the weights file and other processes keep the other half,
 * and pool pages cost memory only once a sequence touches them. */
#define QWI_DEFAULT_KV_CACHE_MEMORY_FRACTION 0.5
#define QWI_DEFAULT_PARTIAL_PREFILLS 4
#define QWI_DEFAULT_AGING_STEPS 256
#define QWI_DEFAULT_GPU_MEMORY_UTILIZATION 0.9

#endif
