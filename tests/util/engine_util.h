/*
 * engine_util.h - helpers for engine-level tests: build an engine over a
 * generated model, run a list of requests to completion, and keep what each
 * produced (tokens, finish reason, the logits at every sampled position).
 */
#ifndef QWT_ENGINE_UTIL_H
#define QWT_ENGINE_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "qwinfer.h"

/* What one request should do. */
typedef struct qwt_job {
    const int32_t *prompt;
    int32_t num_prompt;
    int32_t max_tokens;
    double temperature;       /* 0 = greedy                    */
    int32_t top_k;
    double top_p;             /* 0 = leave default             */
    int64_t seed;             /* < 0: engine-derived           */
    int ignore_eos;
    int keep_logits;          /* record logits at each sample  */
    int32_t submit_at_step;   /* submit before this step (0 = at once) */
    int32_t priority;
    int64_t salt;
    qw_session *session;      /* run on this session (NULL = none)     */
} qwt_job;

/* What it did. */
typedef struct qwt_result {
    int32_t tokens[4096];
    int32_t num_tokens;
    int32_t finish_reason;
    int32_t num_finish_events;
    float *logits;            /* [num_logits][vocab], malloc'd  */
    int32_t num_logits;
    int32_t vocab;
    int32_t first_token_step; /* step index of the first token  */
    int32_t finish_step;      /* step index of the finishing event */
    uint64_t cached_prompt_tokens;
    uint64_t prompt_tokens;
    uint64_t num_preemptions;
} qwt_result;

/* Engine options used by qwt_engine_new; 0 fields keep library defaults. */
typedef struct qwt_engine_cfg {
    int64_t max_num_seqs;
    int64_t max_batched_tokens;
    int64_t num_kv_blocks;
    int64_t block_size;
    int64_t threads;
    int64_t max_model_len;
    int64_t chunked;          /* 0 = default on, -1 = off     */
    int64_t partial_prefills;
    int64_t numerics;         /* 0 = default (fast); QW_NUMERICS_EXACT pins exact */
    int64_t kv_cache_dtype;   /* 0 = QW_KV_CACHE_AUTO; else QW_OPT_KV_CACHE_DTYPE */
} qwt_engine_cfg;

/* Create an engine over model_dir (asserts on failure). */
qw_engine *qwt_engine_new(const char *model_dir, const qwt_engine_cfg *cfg);

/* Run jobs[0..n) on the engine, stepping until it has no work; results[i]
 * gets job i's output. Returns the number of steps taken. Asserts that every
 * request ends with exactly one finishing event. */
int qwt_run_jobs(qw_engine *e, const qwt_job *jobs, int n, qwt_result *results);

/* Free the logits of n results. */
void qwt_results_free(qwt_result *results, int n);

/* Deterministic pseudo-random prompt of n ids in [0, vocab) for seed. */
void qwt_make_prompt(int32_t *out, int n, int32_t vocab, uint64_t seed);

#endif
