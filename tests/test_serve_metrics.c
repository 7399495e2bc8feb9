/*
 * test_serve_metrics.c - qw-serve's Prometheus registry (tools/qw-serve/
 * metrics.c): the rendered text is read back by prometheus_client's own
 * parser (tests/util/prom_parse.py) and checked series by series: vLLM's
 * names and buckets, cumulative le buckets ending at +Inf, _sum/_count,
 * engine gauges and counters, finish reasons, HTTP codes, a model name
 * with quote/backslash/newline escaped, and exact totals after 8 threads
 * observe at once.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "util/testutil.h"

#define MODEL "we\"ird\\model\nname"

/* Render m, parse it with prometheus_client, return the parser's view. */
static json_t *parsed(qws_metrics *m, char **text_out) {
    size_t len = 0;
    char *text = qws_metrics_render(m, &len);
    cr_assert_not_null(text);
    cr_assert_eq(strlen(text), len);
    char *dir = qwt_tmpdir("serve_metrics");
    cr_assert_not_null(dir);
    char in[4096], out[4096];
    snprintf(in, sizeof in, "%s/metrics.txt", dir);
    snprintf(out, sizeof out, "%s/parsed.json", dir);
    cr_assert_eq(qwt_write_file(in, text, len), 0);
    int rc = qwt_system("python3 tests/util/prom_parse.py < '%s' > '%s'", in, out);
    cr_assert_eq(rc, 0, "prometheus_client could not parse the text (exit %d):\n%s", rc, text);
    json_error_t e;
    json_t *j = json_load_file(out, 0, &e);
    cr_assert_not_null(j, "%s", e.text);
    free(dir);
    if (text_out) *text_out = text;
    else free(text);
    return j;
}

static const json_t *family(const json_t *root, const char *name, const char *type) {
    const json_t *fams = json_object_get(root, "families");
    size_t i;
    const json_t *f;
    json_array_foreach(fams, i, f) {
        if (strcmp(json_string_value(json_object_get(f, "name")), name) == 0) {
            cr_assert_str_eq(json_string_value(json_object_get(f, "type")), type, "%s", name);
            cr_assert_gt(strlen(json_string_value(json_object_get(f, "documentation"))), 0, "%s has no HELP", name);
            return f;
        }
    }
    cr_assert_fail("family %s missing", name);
    return NULL;
}

/* The value of the sample `name` whose labels include label=value (label
 * NULL: the first sample of that name). Checks model_name when asked. */
static double sample(const json_t *fam, const char *name, const char *label, const char *value,
                     int want_model) {
    size_t i;
    const json_t *s;
    json_array_foreach(json_object_get(fam, "samples"), i, s) {
        if (strcmp(json_string_value(json_object_get(s, "name")), name) != 0) continue;
        const json_t *labels = json_object_get(s, "labels");
        if (label && (!json_object_get(labels, label) ||
                      strcmp(json_string_value(json_object_get(labels, label)), value) != 0))
            continue;
        if (want_model)
            cr_assert_str_eq(json_string_value(json_object_get(labels, "model_name")), MODEL, "%s", name);
        return strtod(json_string_value(json_object_get(s, "value")), NULL);
    }
    cr_assert_fail("sample %s{%s=%s} missing", name, label ? label : "", value ? value : "");
    return NAN;
}

/* Bucket le values of a histogram family, in order, and cumulative counts. */
static size_t buckets(const json_t *fam, const char *name, char les[64][24], double *counts) {
    char bname[160];
    snprintf(bname, sizeof bname, "%s_bucket", name);
    size_t n = 0, i;
    const json_t *s;
    json_array_foreach(json_object_get(fam, "samples"), i, s) {
        if (strcmp(json_string_value(json_object_get(s, "name")), bname) != 0) continue;
        cr_assert_lt(n, 64);
        snprintf(les[n], 24, "%s", json_string_value(json_object_get(json_object_get(s, "labels"), "le")));
        counts[n] = strtod(json_string_value(json_object_get(s, "value")), NULL);
        if (n > 0) cr_assert_geq(counts[n], counts[n - 1], "%s buckets are not cumulative", name);
        n++;
    }
    cr_assert_gt(n, 0);
    cr_assert_str_eq(les[n - 1], "+Inf", "%s: last bucket is not +Inf", name);
    return n;
}

Test(serve_metrics, vllm_names_buckets_and_values) {
    qws_metrics *m = qws_metrics_create(MODEL, "0.1.0-\"x\"");
    cr_assert_not_null(m);
    cr_assert_eq(qws_metrics_set_max_model_len(m, 100), 0);
    cr_assert_eq(qws_metrics_set_max_model_len(m, 0), -1);

    qws_metrics_observe(m, QWS_H_TTFT, 0.0005);
    qws_metrics_observe(m, QWS_H_TTFT, 0.001);   /* le is inclusive */
    qws_metrics_observe(m, QWS_H_TTFT, 0.003);
    qws_metrics_observe(m, QWS_H_TTFT, -1.0);    /* first bucket */
    qws_metrics_observe(m, QWS_H_TTFT, 3000.0);  /* only +Inf */
    qws_metrics_observe(m, QWS_H_TTFT, NAN);     /* ignored */
    qws_metrics_observe(m, QWS_H_COUNT, 1.0);    /* ignored */
    qws_metrics_observe(m, (qws_histogram)-1, 1.0);
    qws_metrics_observe(m, QWS_H_PROMPT_TOKENS, 7);
    qws_metrics_observe(m, QWS_H_PROMPT_TOKENS, 100);
    qws_metrics_observe(m, QWS_H_ITERATION_TOKENS, 300);
    cr_assert_eq(qws_metrics_set_max_model_len(m, 1000), -1, "buckets never change once observed");

    qws_metrics_count_finish(m, "stop");
    qws_metrics_count_finish(m, "stop");
    qws_metrics_count_finish(m, "abort");
    qws_metrics_count_finish(m, "tool_calls");
    qws_metrics_count_finish(m, NULL);
    qws_metrics_count_http(m, 200);
    qws_metrics_count_http(m, 200);
    qws_metrics_count_http(m, 503);
    qws_metrics_count_http(m, 99);
    qws_metrics_count_http(m, 600);

    qw_engine_stats st;
    memset(&st, 0, sizeof st);
    st.num_running = 3;
    st.num_waiting = 5;
    st.kv_blocks_total = 200;
    st.kv_blocks_used = 50;
    st.prefix_cache_queries = 1000;
    st.prefix_cache_hits = 640;
    st.prompt_tokens = 4096;
    st.generation_tokens = 777;
    st.num_preemptions = 2;
    qws_metrics_set_engine(m, &st);
    qws_metrics_set_engine(m, NULL);

    char *text = NULL;
    json_t *j = parsed(m, &text);

    cr_assert_eq(sample(family(j, "vllm:num_requests_running", "gauge"), "vllm:num_requests_running", NULL, NULL, 1), 3);
    cr_assert_eq(sample(family(j, "vllm:num_requests_waiting", "gauge"), "vllm:num_requests_waiting", NULL, NULL, 1), 5);
    cr_assert_eq(sample(family(j, "vllm:kv_cache_usage_perc", "gauge"), "vllm:kv_cache_usage_perc", NULL, NULL, 1), 0.25);
    cr_assert_eq(sample(family(j, "vllm:gpu_cache_usage_perc", "gauge"), "vllm:gpu_cache_usage_perc", NULL, NULL, 1), 0.25);
    cr_assert_eq(sample(family(j, "vllm:prefix_cache_queries", "counter"), "vllm:prefix_cache_queries_total", NULL, NULL, 1), 1000);
    cr_assert_eq(sample(family(j, "vllm:prefix_cache_hits", "counter"), "vllm:prefix_cache_hits_total", NULL, NULL, 1), 640);
    cr_assert_eq(sample(family(j, "vllm:prompt_tokens", "counter"), "vllm:prompt_tokens_total", NULL, NULL, 1), 4096);
    cr_assert_eq(sample(family(j, "vllm:generation_tokens", "counter"), "vllm:generation_tokens_total", NULL, NULL, 1), 777);
    cr_assert_eq(sample(family(j, "vllm:num_preemptions", "counter"), "vllm:num_preemptions_total", NULL, NULL, 1), 2);
    cr_assert_eq(sample(family(j, "qwinfer_kv_blocks_used", "gauge"), "qwinfer_kv_blocks_used", NULL, NULL, 0), 50);
    cr_assert_eq(sample(family(j, "qwinfer_kv_blocks_total", "gauge"), "qwinfer_kv_blocks_total", NULL, NULL, 0), 200);
    cr_assert_eq(sample(family(j, "qwinfer_build_info", "gauge"), "qwinfer_build_info", "version", "0.1.0-\"x\"", 0), 1);
    /* The endpoint picker (v1.5) reads these labels; a sample time as value. */
    cr_assert_gt(sample(family(j, "vllm:lora_requests_info", "gauge"), "vllm:lora_requests_info", "max_lora", "0", 0),
                 1.7e9);
    cr_assert_eq(sample(family(j, "vllm:lora_requests_info", "gauge"), "vllm:lora_requests_info",
                        "running_lora_adapters", "", 0) > 0, 1);

    const json_t *succ = family(j, "vllm:request_success", "counter");
    cr_assert_eq(sample(succ, "vllm:request_success_total", "finished_reason", "stop", 1), 2);
    cr_assert_eq(sample(succ, "vllm:request_success_total", "finished_reason", "abort", 1), 1);
    cr_assert_eq(sample(succ, "vllm:request_success_total", "finished_reason", "length", 1), 0);
    cr_assert_eq(sample(succ, "vllm:request_success_total", "finished_reason", "error", 1), 0);
    cr_assert_eq(sample(succ, "vllm:request_success_total", "finished_reason", "timeout", 1), 0);
    cr_assert_eq(sample(succ, "vllm:request_success_total", "finished_reason", "tool_calls", 1), 1);
    const json_t *http = family(j, "qwinfer_http_requests", "counter");
    cr_assert_eq(sample(http, "qwinfer_http_requests_total", "code", "200", 0), 2);
    cr_assert_eq(sample(http, "qwinfer_http_requests_total", "code", "503", 0), 1);
    cr_assert_eq(json_array_size(json_object_get(http, "samples")), 2, "99 and 600 are not HTTP codes");

    /* TTFT: vLLM's 22 boundaries, cumulative counts. */
    char les[64][24];
    double cnt[64];
    const json_t *ttft = family(j, "vllm:time_to_first_token_seconds", "histogram");
    size_t n = buckets(ttft, "vllm:time_to_first_token_seconds", les, cnt);
    cr_assert_eq(n, 23);
    cr_assert_str_eq(les[0], "0.001");
    cr_assert_str_eq(les[1], "0.005");
    cr_assert_str_eq(les[21], "2560.0");
    cr_assert_eq(cnt[0], 3, "-1, 0.0005 and 0.001 are <= 0.001");
    cr_assert_eq(cnt[1], 4);
    cr_assert_eq(cnt[21], 4);
    cr_assert_eq(cnt[22], 5);
    cr_assert_eq(sample(ttft, "vllm:time_to_first_token_seconds_count", NULL, NULL, 1), 5);
    cr_assert_float_eq(sample(ttft, "vllm:time_to_first_token_seconds_sum", NULL, NULL, 1),
                       0.0005 + 0.001 + 0.003 - 1.0 + 3000.0, 1e-9);

    /* ITL under both names, 19 boundaries; the request latency family 21. */
    const char *names19[] = {"vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"};
    for (int k = 0; k < 2; k++) {
        n = buckets(family(j, names19[k], "histogram"), names19[k], les, cnt);
        cr_assert_eq(n, 20, "%s", names19[k]);
        cr_assert_str_eq(les[0], "0.01");
        cr_assert_str_eq(les[18], "80.0");
    }
    const char *names21[] = {"vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
                             "vllm:request_inference_time_seconds", "vllm:request_prefill_time_seconds",
                             "vllm:request_decode_time_seconds"};
    for (int k = 0; k < 5; k++) {
        n = buckets(family(j, names21[k], "histogram"), names21[k], les, cnt);
        cr_assert_eq(n, 22, "%s", names21[k]);
        cr_assert_str_eq(les[0], "0.3");
        cr_assert_str_eq(les[20], "7680.0");
        cr_assert_eq(cnt[21], 0);
    }
    /* Token histograms: 1-2-5 up to the max model length (100). */
    const json_t *pt = family(j, "vllm:request_prompt_tokens", "histogram");
    n = buckets(pt, "vllm:request_prompt_tokens", les, cnt);
    cr_assert_eq(n, 8);
    const char *want125[] = {"1.0", "2.0", "5.0", "10.0", "20.0", "50.0", "100.0", "+Inf"};
    for (size_t k = 0; k < n; k++) cr_assert_str_eq(les[k], want125[k]);
    cr_assert_eq(cnt[2], 0);
    cr_assert_eq(cnt[3], 1);
    cr_assert_eq(cnt[6], 2);
    n = buckets(family(j, "vllm:request_generation_tokens", "histogram"), "vllm:request_generation_tokens", les, cnt);
    cr_assert_eq(n, 8);
    const json_t *it = family(j, "vllm:iteration_tokens_total", "histogram");
    n = buckets(it, "vllm:iteration_tokens_total", les, cnt);
    cr_assert_eq(n, 14);
    cr_assert_str_eq(les[12], "16384.0");
    cr_assert_str_eq(les[6], "256.0");
    cr_assert_eq(cnt[6], 0, "300 > 256");
    cr_assert_eq(cnt[7], 1);

    /* The raw text escapes the model name (the parser above unescaped it). */
    cr_assert(strstr(text, "model_name=\"we\\\"ird\\\\model\\nname\"") != NULL);
    cr_assert(strstr(text, "# TYPE vllm:prompt_tokens_total counter\n") != NULL);
    cr_assert(strstr(text, "# TYPE vllm:time_to_first_token_seconds histogram\n") != NULL);
    free(text);
    json_decref(j);
    qws_metrics_destroy(m);
}

Test(serve_metrics, fresh_registry_renders_and_parses) {
    qws_metrics *m = qws_metrics_create(NULL, NULL);
    cr_assert_not_null(m);
    json_t *j = parsed(m, NULL);
    const json_t *ttft = family(j, "vllm:time_to_first_token_seconds", "histogram");
    char les[64][24];
    double cnt[64];
    size_t n = buckets(ttft, "vllm:time_to_first_token_seconds", les, cnt);
    cr_assert_eq(cnt[n - 1], 0);
    /* Default token buckets: 1-2-5 up to Qwen3's 40960. */
    n = buckets(family(j, "vllm:request_prompt_tokens", "histogram"), "vllm:request_prompt_tokens", les, cnt);
    cr_assert_str_eq(les[n - 2], "20000.0");
    json_decref(j);
    qws_metrics_destroy(m);
    qws_metrics_destroy(NULL);

    /* A huge max model length stops at the bucket cap, still well formed. */
    m = qws_metrics_create("m", "v");
    cr_assert_not_null(m);
    cr_assert_eq(qws_metrics_set_max_model_len(m, INT64_MAX), 0);
    qws_metrics_observe(m, QWS_H_GENERATION_TOKENS, 3e12);
    j = parsed(m, NULL);
    n = buckets(family(j, "vllm:request_generation_tokens", "histogram"), "vllm:request_generation_tokens", les, cnt);
    cr_assert_eq(n, 41, "40 bounds (1, 2, 5, ... 5e12, 1e13) + +Inf");
    cr_assert_str_eq(les[38], "5000000000000.0");
    cr_assert_str_eq(les[39], "10000000000000.0");
    cr_assert_eq(cnt[37], 0, "3e12 > 2e12");
    cr_assert_eq(cnt[38], 1);
    json_decref(j);
    qws_metrics_destroy(m);
    cr_assert_null(qws_metrics_render(NULL, NULL));
}

#define THREADS 8
#define PER_THREAD 20000

static void *hammer(void *arg) {
    qws_metrics *m = arg;
    for (int i = 0; i < PER_THREAD; i++) {
        qws_metrics_observe(m, QWS_H_ITL, 0.02);
        qws_metrics_observe(m, QWS_H_E2E, 1.0);
        qws_metrics_count_http(m, 200);
        qws_metrics_count_finish(m, i % 2 ? "stop" : "length");
        if (i % 1000 == 0) free(qws_metrics_render(m, NULL));  /* scrapes meanwhile */
    }
    return NULL;
}

Test(serve_metrics, eight_threads_lose_nothing) {
    qws_metrics *m = qws_metrics_create("m", "v");
    cr_assert_not_null(m);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) cr_assert_eq(pthread_create(&t[i], NULL, hammer, m), 0);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    json_t *j = parsed(m, NULL);
    const double total = (double)THREADS * PER_THREAD;
    const json_t *itl = family(j, "vllm:inter_token_latency_seconds", "histogram");
    cr_assert_eq(sample(itl, "vllm:inter_token_latency_seconds_count", NULL, NULL, 0), total);
    cr_assert_eq(sample(itl, "vllm:inter_token_latency_seconds_bucket", "le", "0.025", 0), total);
    cr_assert_eq(sample(itl, "vllm:inter_token_latency_seconds_bucket", "le", "0.01", 0), 0);
    cr_assert_float_eq(sample(itl, "vllm:inter_token_latency_seconds_sum", NULL, NULL, 0), total * 0.02, 1e-6);
    const json_t *e2e = family(j, "vllm:e2e_request_latency_seconds", "histogram");
    cr_assert_eq(sample(e2e, "vllm:e2e_request_latency_seconds_bucket", "le", "0.8", 0), 0);
    cr_assert_eq(sample(e2e, "vllm:e2e_request_latency_seconds_bucket", "le", "1.0", 0), total);
    cr_assert_eq(sample(e2e, "vllm:e2e_request_latency_seconds_sum", NULL, NULL, 0), total);
    cr_assert_eq(sample(family(j, "qwinfer_http_requests", "counter"), "qwinfer_http_requests_total", "code", "200", 0),
                 total);
    const json_t *succ = family(j, "vllm:request_success", "counter");
    cr_assert_eq(sample(succ, "vllm:request_success_total", "finished_reason", "stop", 0), total / 2);
    cr_assert_eq(sample(succ, "vllm:request_success_total", "finished_reason", "length", 0), total / 2);
    json_decref(j);
    qws_metrics_destroy(m);
}

Test(serve_metrics, reason_labels_are_bounded) {
    qws_metrics *m = qws_metrics_create("m", "v");
    cr_assert_not_null(m);
    char r[32];
    for (int i = 0; i < 40; i++) {
        snprintf(r, sizeof r, "reason-%d", i);
        qws_metrics_count_finish(m, r);
    }
    json_t *j = parsed(m, NULL);
    const json_t *succ = family(j, "vllm:request_success", "counter");
    cr_assert_eq(json_array_size(json_object_get(succ, "samples")), 16, "5 base reasons + 11 new, then no more");
    cr_assert_eq(sample(succ, "vllm:request_success_total", "finished_reason", "reason-10", 0), 1);
    json_decref(j);
    qws_metrics_destroy(m);
}
