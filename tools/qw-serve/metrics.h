/*
 * metrics.h - qw-serve: the Prometheus registry behind GET /metrics.
 *
 * vLLM's metric names (so dashboards and the Gateway API Inference
 * Extension read qw-serve unchanged), each vllm:* series labelled
 * model_name="NAME", plus qwinfer_* series of our own:
 *   gauges    vllm:num_requests_running, vllm:num_requests_waiting,
 *             vllm:kv_cache_usage_perc and vllm:gpu_cache_usage_perc (both
 *             used/total KV blocks, 0..1), qwinfer_kv_blocks_used,
 *             qwinfer_kv_blocks_total, qwinfer_build_info{version} 1
 *   counters  vllm:prefix_cache_queries_total, vllm:prefix_cache_hits_total,
 *             vllm:prompt_tokens_total, vllm:generation_tokens_total,
 *             vllm:num_preemptions_total,
 *             vllm:request_success_total{finished_reason},
 *             qwinfer_http_requests_total{code}
 *   histograms (qws_histogram below) with vLLM's bucket boundaries.
 * Rendered in the Prometheus text exposition format 0.0.4.
 * Every function is thread-safe (one mutex per registry).
 */
#ifndef QWS_METRICS_H
#define QWS_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "qwinfer.h"

typedef struct qws_metrics qws_metrics;

/* The histograms, each one vLLM series (QWS_H_ITL feeds two:
 * vllm:inter_token_latency_seconds and its older name
 * vllm:time_per_output_token_seconds). Values in seconds or tokens. */
typedef enum qws_histogram {
    QWS_H_TTFT,              /* vllm:time_to_first_token_seconds            */
    QWS_H_ITL,               /* vllm:inter_token_latency_seconds (+ tpot)   */
    QWS_H_E2E,               /* vllm:e2e_request_latency_seconds            */
    QWS_H_QUEUE,             /* vllm:request_queue_time_seconds             */
    QWS_H_INFERENCE,         /* vllm:request_inference_time_seconds         */
    QWS_H_PREFILL,           /* vllm:request_prefill_time_seconds           */
    QWS_H_DECODE,            /* vllm:request_decode_time_seconds            */
    QWS_H_PROMPT_TOKENS,     /* vllm:request_prompt_tokens                  */
    QWS_H_GENERATION_TOKENS, /* vllm:request_generation_tokens              */
    QWS_H_ITERATION_TOKENS,  /* vllm:iteration_tokens_total (per step)      */
    QWS_H_COUNT
} qws_histogram;

/* Create a registry for the model model_name (the model_name label value)
 * and the qwinfer version string (the qwinfer_build_info label); both are
 * copied, any bytes (escaped when rendered); NULL is taken as "". Every
 * series starts at 0. Returns NULL on OOM. Free with qws_metrics_destroy. */
qws_metrics *qws_metrics_create(const char *model_name, const char *version);

/* Free a registry. NULL: no-op. No other thread may use it any more. */
void qws_metrics_destroy(qws_metrics *m);

/* The token-count histograms (vllm:request_prompt_tokens,
 * vllm:request_generation_tokens) use vLLM's 1-2-5 buckets up to the max
 * model length (1, 2, 5, 10, 20, 50, ... <= max_model_len). Until this is
 * called they go up to QWS_METRICS_DEFAULT_MAX_LEN (Qwen3's context). Call
 * it once the engine exists (before requests): it rebuilds those two
 * histograms' buckets only while they are still empty (returns 0), else
 * changes nothing and returns -1 (a histogram's buckets never change under
 * a scraper). max_model_len < 1: -1. Any thread. */
#define QWS_METRICS_DEFAULT_MAX_LEN 40960
int qws_metrics_set_max_model_len(qws_metrics *m, int64_t max_model_len);

/* Add one observation v to histogram h (any thread). A NaN v, an unknown h
 * or a NULL m is ignored; negative values land in the first bucket as
 * Prometheus histograms do. */
void qws_metrics_observe(qws_metrics *m, qws_histogram h, double v);

/* Count one finished request in vllm:request_success_total with label
 * finished_reason (the server passes "stop", "length", "abort", "error" or
 * "timeout"; those five are always rendered, 0 until counted). Another
 * reason gets its own label value, up to 16 distinct reasons in all (later
 * new ones are dropped). NULL reason: ignored. Any thread. */
void qws_metrics_count_finish(qws_metrics *m, const char *finished_reason);

/* Count one HTTP response with status 100..599 in
 * qwinfer_http_requests_total{code="<status>"} (codes never counted are not
 * rendered). Other values: ignored. Any thread. */
void qws_metrics_count_http(qws_metrics *m, int status);

/* Take the engine's current statistics (absolute values, from the engine
 * thread after qw_engine_get_stats): gauges num_running, num_waiting,
 * kv_blocks_used / kv_blocks_total (usage 0 when total is 0), and the
 * engine's own monotonic counters prefix_cache_queries, prefix_cache_hits,
 * prompt_tokens, generation_tokens, num_preemptions. s NULL: ignored. */
void qws_metrics_set_engine(qws_metrics *m, const qw_engine_stats *s);

/* Render every series in the Prometheus text format 0.0.4 (# HELP and
 * # TYPE lines; histograms as cumulative _bucket{le="..."} lines ending with
 * le="+Inf", then _sum and _count). Returns a malloc'd NUL-terminated string
 * the caller frees, its length (without the NUL) in *len when len is not
 * NULL; NULL on OOM or a NULL m. Any thread. */
char *qws_metrics_render(qws_metrics *m, size_t *len);

#endif /* QWS_METRICS_H */
