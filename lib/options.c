/*
 * options.c - qw_engine_options: defaults, typed setters, range checks.
 * Ranges are checked here so qw_engine_create only has to check what
 * depends on the model (e.g. max model length against the config).
 */
#include <stdlib.h>
#include <string.h>

#include "options.h"

QW_API qw_status qw_engine_options_create(qw_engine_options **out) {
    if (!out) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_engine_options_create: out is NULL");
    *out = NULL;
    qw_engine_options *o = calloc(1, sizeof *o);
    if (!o) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "qw_engine_options_create: out of memory");
    o->device = strdup("cpu");
    if (!o->device) {
        free(o);
        return qwi_fail(QW_ERR_OUT_OF_MEMORY, "qw_engine_options_create: out of memory");
    }
    o->max_num_seqs = QWI_DEFAULT_MAX_NUM_SEQS;
    o->max_num_batched_tokens = QWI_DEFAULT_MAX_BATCHED_TOKENS;
    o->block_size = QWI_DEFAULT_BLOCK_SIZE;
    o->enable_chunked_prefill = 1;
    o->enable_prefix_caching = 1;
    o->max_num_partial_prefills = QWI_DEFAULT_PARTIAL_PREFILLS;
    o->priority_aging_steps = QWI_DEFAULT_AGING_STEPS;
    o->gpu_memory_utilization = QWI_DEFAULT_GPU_MEMORY_UTILIZATION;
    o->kv_cache_memory_fraction = QWI_DEFAULT_KV_CACHE_MEMORY_FRACTION;
    o->check_weights = 1;
    o->numerics = QW_NUMERICS_FAST;
    *out = o;
    return QW_OK;
}

QW_API qw_status qw_engine_options_set_progress(qw_engine_options *o, qw_progress_fn fn, void *user_data) {
    QWI_ERR_SCOPE(o);
    if (!o) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_engine_options_set_progress: options is NULL");
    o->progress_fn = fn;
    o->progress_user = fn ? user_data : NULL;
    return QW_OK;
}

QW_API void qw_engine_options_destroy(qw_engine_options *opts) {
    if (!opts) return;
    free(opts->model_path);
    free(opts->device);
    qwi_err_slot_free(&opts->err);
    free(opts);
}

/* Check v against [lo, hi] for the option called name. */
static qw_status in_range(const char *name, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "%s must be in [%lld, %lld], got %lld", name,
                        (long long)lo, (long long)hi, (long long)v);
    return QW_OK;
}

QW_API qw_status qw_engine_options_set_int(qw_engine_options *o, qw_engine_option key, int64_t v) {
    QWI_ERR_SCOPE(o);
    if (!o) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_engine_options_set_int: options is NULL");
    qw_status st;
    switch (key) {
    case QW_OPT_NUM_THREADS:
        if ((st = in_range("QW_OPT_NUM_THREADS", v, 0, 1024)) == QW_OK) o->num_threads = v;
        return st;
    case QW_OPT_MAX_NUM_SEQS:
        if ((st = in_range("QW_OPT_MAX_NUM_SEQS", v, 1, 65536)) == QW_OK) o->max_num_seqs = v;
        return st;
    case QW_OPT_MAX_NUM_BATCHED_TOKENS:
        if ((st = in_range("QW_OPT_MAX_NUM_BATCHED_TOKENS", v, 1, 1 << 24)) == QW_OK)
            o->max_num_batched_tokens = v;
        return st;
    case QW_OPT_BLOCK_SIZE:
        if ((st = in_range("QW_OPT_BLOCK_SIZE", v, 1, 1024)) == QW_OK) o->block_size = v;
        return st;
    case QW_OPT_KV_CACHE_BYTES:
        if ((st = in_range("QW_OPT_KV_CACHE_BYTES", v, 0, INT64_MAX)) == QW_OK) o->kv_cache_bytes = v;
        return st;
    case QW_OPT_NUM_KV_BLOCKS:
        if ((st = in_range("QW_OPT_NUM_KV_BLOCKS", v, 0, INT32_MAX)) == QW_OK) o->num_kv_blocks = v;
        return st;
    case QW_OPT_MAX_MODEL_LEN:
        if ((st = in_range("QW_OPT_MAX_MODEL_LEN", v, 0, 1 << 24)) == QW_OK) o->max_model_len = v;
        return st;
    case QW_OPT_SEED:
        o->seed = v;
        return QW_OK;
    case QW_OPT_ENABLE_CHUNKED_PREFILL:
        if ((st = in_range("QW_OPT_ENABLE_CHUNKED_PREFILL", v, 0, 1)) == QW_OK)
            o->enable_chunked_prefill = v;
        return st;
    case QW_OPT_ENABLE_PREFIX_CACHING:
        if ((st = in_range("QW_OPT_ENABLE_PREFIX_CACHING", v, 0, 1)) == QW_OK) o->enable_prefix_caching = v;
        return st;
    case QW_OPT_MAX_NUM_PARTIAL_PREFILLS:
        if ((st = in_range("QW_OPT_MAX_NUM_PARTIAL_PREFILLS", v, 1, 65536)) == QW_OK)
            o->max_num_partial_prefills = v;
        return st;
    case QW_OPT_LONG_PREFILL_TOKEN_THRESHOLD:
        if ((st = in_range("QW_OPT_LONG_PREFILL_TOKEN_THRESHOLD", v, 0, 1 << 24)) == QW_OK)
            o->long_prefill_token_threshold = v;
        return st;
    case QW_OPT_PRIORITY_AGING_STEPS:
        if ((st = in_range("QW_OPT_PRIORITY_AGING_STEPS", v, 0, INT32_MAX)) == QW_OK) o->priority_aging_steps = v;
        return st;
    case QW_OPT_MAX_WAITING_REQUESTS:
        if ((st = in_range("QW_OPT_MAX_WAITING_REQUESTS", v, 0, INT32_MAX)) == QW_OK) o->max_waiting_requests = v;
        return st;
    case QW_OPT_CHECK_WEIGHTS:
        if ((st = in_range("QW_OPT_CHECK_WEIGHTS", v, 0, 1)) == QW_OK) o->check_weights = v;
        return st;
    case QW_OPT_NUMERICS:
        if ((st = in_range("QW_OPT_NUMERICS (QW_NUMERICS_FAST 0, QW_NUMERICS_EXACT 1, "
                           "QW_NUMERICS_FAST_INT8 2)",
                           v, QW_NUMERICS_FAST, QW_NUMERICS_FAST_INT8)) == QW_OK)
            o->numerics = v;
        return st;
    case QW_OPT_KV_CACHE_DTYPE:
        if ((st = in_range("QW_OPT_KV_CACHE_DTYPE (QW_KV_CACHE_AUTO 0, QW_KV_CACHE_F32 1, "
                           "QW_KV_CACHE_BF16 2, QW_KV_CACHE_FP8_E4M3 3)",
                           v, QW_KV_CACHE_AUTO, QW_KV_CACHE_FP8_E4M3)) == QW_OK)
            o->kv_cache_dtype = v;
        return st;
    case QW_OPT_MODEL_PATH:
    case QW_OPT_DEVICE:
        return qwi_fail(QW_ERR_INVALID_ARGUMENT,
                        "engine option %s (%d) is a string: use qw_engine_options_set_string",
                        qw_engine_option_name(key), (int)key);
    case QW_OPT_GPU_MEMORY_UTILIZATION:
    case QW_OPT_KV_CACHE_MEMORY_FRACTION:
        return qwi_fail(QW_ERR_INVALID_ARGUMENT,
                        "engine option %s (%d) is a double: use qw_engine_options_set_double",
                        qw_engine_option_name(key), (int)key);
    }
    return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_engine_options_set_int: unknown option %d", (int)key);
}

QW_API qw_status qw_engine_options_set_double(qw_engine_options *o, qw_engine_option key, double v) {
    QWI_ERR_SCOPE(o);
    if (!o) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_engine_options_set_double: options is NULL");
    const char *name;
    double *slot;
    switch (key) {
    case QW_OPT_GPU_MEMORY_UTILIZATION:
        name = "QW_OPT_GPU_MEMORY_UTILIZATION";
        slot = &o->gpu_memory_utilization;
        break;
    case QW_OPT_KV_CACHE_MEMORY_FRACTION:
        name = "QW_OPT_KV_CACHE_MEMORY_FRACTION";
        slot = &o->kv_cache_memory_fraction;
        break;
    default:
        if (!strcmp(qw_engine_option_name(key), "unknown"))
            return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_engine_options_set_double: unknown option %d", (int)key);
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "engine option %s (%d) is not a double option",
                        qw_engine_option_name(key), (int)key);
    }
    if (!(v > 0 && v <= 1)) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "%s must be in (0, 1], got %g", name, v);
    *slot = v;
    return QW_OK;
}

QW_API qw_status qw_engine_options_set_string(qw_engine_options *o, qw_engine_option key,
                                              const char *v) {
    QWI_ERR_SCOPE(o);
    if (!o || !v)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_engine_options_set_string: options or value is NULL");
    char **slot;
    switch (key) {
    case QW_OPT_MODEL_PATH: slot = &o->model_path; break;
    case QW_OPT_DEVICE: slot = &o->device; break;
    default:
        if (!strcmp(qw_engine_option_name(key), "unknown"))
            return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_engine_options_set_string: unknown option %d", (int)key);
        return qwi_fail(QW_ERR_INVALID_ARGUMENT,
                        "engine option %s (%d) is not a string option (use qw_engine_options_set_int)",
                        qw_engine_option_name(key), (int)key);
    }
    char *copy = strdup(v);
    if (!copy) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "qw_engine_options_set_string: out of memory");
    free(*slot);
    *slot = copy;
    return QW_OK;
}
