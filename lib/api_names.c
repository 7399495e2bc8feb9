/*
 * api_names.c - static names of the public enums, for logs, error messages
 * and bindings (which would otherwise copy the values by hand).
 *
 * Names are the enum constants' own spellings, except finish reasons and
 * event kinds, which also have the short lower-case words that serving APIs
 * use ("stop", "length", ...). Every function returns a static string and
 * never NULL, so a caller can print the result without a check; an unknown
 * value gives "unknown".
 */
#include "common.h"

QW_API const char *qw_finish_reason_string(qw_finish_reason reason) {
    switch (reason) {
    case QW_FINISH_NONE: return "none";
    case QW_FINISH_STOP: return "stop";
    case QW_FINISH_LENGTH: return "length";
    case QW_FINISH_CANCELLED: return "cancelled";
    case QW_FINISH_ERROR: return "error";
    case QW_FINISH_TIMEOUT: return "timeout";
    }
    return "unknown";
}

QW_API const char *qw_event_kind_string(qw_event_kind kind) {
    switch (kind) {
    case QW_EVENT_TOKEN: return "token";
    case QW_EVENT_FINISHED: return "finished";
    }
    return "unknown";
}

QW_API const char *qw_request_state_string(qw_request_state state) {
    switch (state) {
    case QW_STATE_CREATED: return "created";
    case QW_STATE_QUEUED: return "queued";
    case QW_STATE_RUNNING: return "running";
    case QW_STATE_FINISHED: return "finished";
    }
    return "unknown";
}

QW_API const char *qw_engine_option_name(qw_engine_option key) {
    switch (key) {
    case QW_OPT_MODEL_PATH: return "QW_OPT_MODEL_PATH";
    case QW_OPT_DEVICE: return "QW_OPT_DEVICE";
    case QW_OPT_NUM_THREADS: return "QW_OPT_NUM_THREADS";
    case QW_OPT_MAX_NUM_SEQS: return "QW_OPT_MAX_NUM_SEQS";
    case QW_OPT_MAX_NUM_BATCHED_TOKENS: return "QW_OPT_MAX_NUM_BATCHED_TOKENS";
    case QW_OPT_BLOCK_SIZE: return "QW_OPT_BLOCK_SIZE";
    case QW_OPT_KV_CACHE_BYTES: return "QW_OPT_KV_CACHE_BYTES";
    case QW_OPT_NUM_KV_BLOCKS: return "QW_OPT_NUM_KV_BLOCKS";
    case QW_OPT_MAX_MODEL_LEN: return "QW_OPT_MAX_MODEL_LEN";
    case QW_OPT_SEED: return "QW_OPT_SEED";
    case QW_OPT_ENABLE_CHUNKED_PREFILL: return "QW_OPT_ENABLE_CHUNKED_PREFILL";
    case QW_OPT_ENABLE_PREFIX_CACHING: return "QW_OPT_ENABLE_PREFIX_CACHING";
    case QW_OPT_MAX_NUM_PARTIAL_PREFILLS: return "QW_OPT_MAX_NUM_PARTIAL_PREFILLS";
    case QW_OPT_LONG_PREFILL_TOKEN_THRESHOLD: return "QW_OPT_LONG_PREFILL_TOKEN_THRESHOLD";
    case QW_OPT_PRIORITY_AGING_STEPS: return "QW_OPT_PRIORITY_AGING_STEPS";
    case QW_OPT_GPU_MEMORY_UTILIZATION: return "QW_OPT_GPU_MEMORY_UTILIZATION";
    case QW_OPT_KV_CACHE_MEMORY_FRACTION: return "QW_OPT_KV_CACHE_MEMORY_FRACTION";
    case QW_OPT_MAX_WAITING_REQUESTS: return "QW_OPT_MAX_WAITING_REQUESTS";
    case QW_OPT_CHECK_WEIGHTS: return "QW_OPT_CHECK_WEIGHTS";
    case QW_OPT_NUMERICS: return "QW_OPT_NUMERICS";
    case QW_OPT_KV_CACHE_DTYPE: return "QW_OPT_KV_CACHE_DTYPE";
    }
    return "unknown";
}

QW_API const char *qw_request_option_name(qw_request_option key) {
    switch (key) {
    case QW_REQ_MAX_TOKENS: return "QW_REQ_MAX_TOKENS";
    case QW_REQ_TEMPERATURE: return "QW_REQ_TEMPERATURE";
    case QW_REQ_TOP_K: return "QW_REQ_TOP_K";
    case QW_REQ_TOP_P: return "QW_REQ_TOP_P";
    case QW_REQ_MIN_P: return "QW_REQ_MIN_P";
    case QW_REQ_SEED: return "QW_REQ_SEED";
    case QW_REQ_IGNORE_EOS: return "QW_REQ_IGNORE_EOS";
    case QW_REQ_MIN_TOKENS: return "QW_REQ_MIN_TOKENS";
    case QW_REQ_PRIORITY: return "QW_REQ_PRIORITY";
    case QW_REQ_MAX_QUEUE_MS: return "QW_REQ_MAX_QUEUE_MS";
    case QW_REQ_DEADLINE_MS: return "QW_REQ_DEADLINE_MS";
    case QW_REQ_CACHE_SALT: return "QW_REQ_CACHE_SALT";
    case QW_REQ_SKIP_SPECIAL_TOKENS: return "QW_REQ_SKIP_SPECIAL_TOKENS";
    case QW_REQ_LOGPROBS: return "QW_REQ_LOGPROBS";
    case QW_REQ_PROMPT_LOGPROBS: return "QW_REQ_PROMPT_LOGPROBS";
    case QW_REQ_REPETITION_PENALTY: return "QW_REQ_REPETITION_PENALTY";
    case QW_REQ_PRESENCE_PENALTY: return "QW_REQ_PRESENCE_PENALTY";
    case QW_REQ_FREQUENCY_PENALTY: return "QW_REQ_FREQUENCY_PENALTY";
    case QW_REQ_N: return "QW_REQ_N";
    case QW_REQ_INCLUDE_STOP_STR_IN_OUTPUT: return "QW_REQ_INCLUDE_STOP_STR_IN_OUTPUT";
    }
    return "unknown";
}
