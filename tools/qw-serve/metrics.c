/*
 * metrics.c - qw-serve: the Prometheus registry (see metrics.h).
 *
 * Metric names, help texts' meaning and bucket boundaries follow vLLM's v1
 * Prometheus logger (vllm/v1/metrics/loggers.py, vLLM 0.10, commit
 * 005a810bc40f of vllm-project/vllm): time_to_first_token 22 boundaries,
 * time_per_output_token 19 (inter_token_latency, its newer name, uses the
 * same), the request latency family 21, iteration_tokens_total powers of
 * two to 16384, the token-count histograms build_1_2_5_buckets(max model
 * length). The text is written to the exposition format 0.0.4 as
 * prometheus_client writes it: counters' HELP/TYPE lines name the _total
 * series, values and le labels as Python floats ("1.0", "+Inf").
 */
#include "metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_BUCKETS 40
#define MAX_REASONS 16
#define HTTP_MIN 100
#define HTTP_MAX 599

typedef struct histogram {
    double bounds[MAX_BUCKETS];          /* upper bounds, ascending           */
    size_t nb;                           /* used entries of bounds            */
    uint64_t counts[MAX_BUCKETS + 1];    /* per bucket (not cumulative); the
                                            last one is (bounds[nb-1], +Inf) */
    double sum;
    uint64_t count;
} histogram;

typedef struct reason_counter {
    char *name;
    uint64_t count;
} reason_counter;

struct qws_metrics {
    pthread_mutex_t lock;
    char *model_name;
    char *version;
    histogram h[QWS_H_COUNT];
    reason_counter reasons[MAX_REASONS];
    size_t n_reasons;
    uint64_t http[HTTP_MAX - HTTP_MIN + 1];
    qw_engine_stats engine;              /* the last qws_metrics_set_engine   */
};

/* One row per histogram: its series names, help text and fixed bounds
 * (NULL for the 1-2-5 token histograms, built from the max model len). */
typedef struct hist_desc {
    const char *name;
    const char *alias;                   /* a second series with the same data */
    const char *help;
    const double *bounds;
    size_t nb;
} hist_desc;

static const double TTFT_BOUNDS[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                     1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
static const double TPOT_BOUNDS[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                                     0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
static const double LATENCY_BOUNDS[] = {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
                                        30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0,
                                        7680.0};
static const double ITER_BOUNDS[] = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static const hist_desc HISTS[QWS_H_COUNT] = {
    [QWS_H_TTFT] = {"vllm:time_to_first_token_seconds", NULL,
                    "Histogram of time to first token in seconds.", TTFT_BOUNDS, N_OF(TTFT_BOUNDS)},
    [QWS_H_ITL] = {"vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds",
                   "Histogram of inter-token latency in seconds.", TPOT_BOUNDS, N_OF(TPOT_BOUNDS)},
    [QWS_H_E2E] = {"vllm:e2e_request_latency_seconds", NULL,
                   "Histogram of e2e request latency in seconds.", LATENCY_BOUNDS, N_OF(LATENCY_BOUNDS)},
    [QWS_H_QUEUE] = {"vllm:request_queue_time_seconds", NULL,
                     "Histogram of time spent in WAITING phase for request.", LATENCY_BOUNDS,
                     N_OF(LATENCY_BOUNDS)},
    [QWS_H_INFERENCE] = {"vllm:request_inference_time_seconds", NULL,
                         "Histogram of time spent in RUNNING phase for request.", LATENCY_BOUNDS,
                         N_OF(LATENCY_BOUNDS)},
    [QWS_H_PREFILL] = {"vllm:request_prefill_time_seconds", NULL,
                       "Histogram of time spent in PREFILL phase for request.", LATENCY_BOUNDS,
                       N_OF(LATENCY_BOUNDS)},
    [QWS_H_DECODE] = {"vllm:request_decode_time_seconds", NULL,
                      "Histogram of time spent in DECODE phase for request.", LATENCY_BOUNDS,
                      N_OF(LATENCY_BOUNDS)},
    [QWS_H_PROMPT_TOKENS] = {"vllm:request_prompt_tokens", NULL,
                             "Number of prefill tokens processed.", NULL, 0},
    [QWS_H_GENERATION_TOKENS] = {"vllm:request_generation_tokens", NULL,
                                 "Number of generation tokens processed.", NULL, 0},
    [QWS_H_ITERATION_TOKENS] = {"vllm:iteration_tokens_total", NULL,
                                "Histogram of number of tokens per engine_step.", ITER_BOUNDS,
                                N_OF(ITER_BOUNDS)},
};

/* The finish reasons the server reports, rendered even at 0 so a dashboard
 * sees every series from the first scrape (vLLM pre-creates them too). */
static const char *const BASE_REASONS[] = {"stop", "length", "abort", "error", "timeout"};

/* vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... while <= max. */
static size_t build_125(double *out, int64_t max_value) {
    static const int mant[3] = {1, 2, 5};
    size_t n = 0;
    for (double scale = 1; n < MAX_BUCKETS; scale *= 10) {
        for (int i = 0; i < 3; i++) {
            double v = mant[i] * scale;
            if (v > (double)max_value || n == MAX_BUCKETS) return n;
            out[n++] = v;
        }
    }
    return n;
}

static char *dup_or_empty(const char *s) {
    return strdup(s ? s : "");
}

qws_metrics *qws_metrics_create(const char *model_name, const char *version) {
    qws_metrics *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->model_name = dup_or_empty(model_name);
    m->version = dup_or_empty(version);
    if (!m->model_name || !m->version || pthread_mutex_init(&m->lock, NULL) != 0) {
        free(m->model_name);
        free(m->version);
        free(m);
        return NULL;
    }
    for (int i = 0; i < QWS_H_COUNT; i++) {
        if (HISTS[i].bounds) {
            memcpy(m->h[i].bounds, HISTS[i].bounds, HISTS[i].nb * sizeof(double));
            m->h[i].nb = HISTS[i].nb;
        } else {
            m->h[i].nb = build_125(m->h[i].bounds, QWS_METRICS_DEFAULT_MAX_LEN);
        }
    }
    for (size_t i = 0; i < N_OF(BASE_REASONS); i++) {
        m->reasons[i].name = strdup(BASE_REASONS[i]);
        if (!m->reasons[i].name) {
            qws_metrics_destroy(m);
            return NULL;
        }
        m->n_reasons++;
    }
    return m;
}

void qws_metrics_destroy(qws_metrics *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n_reasons; i++) free(m->reasons[i].name);
    pthread_mutex_destroy(&m->lock);
    free(m->model_name);
    free(m->version);
    free(m);
}

int qws_metrics_set_max_model_len(qws_metrics *m, int64_t max_model_len) {
    if (!m || max_model_len < 1) return -1;
    int rc = 0;
    pthread_mutex_lock(&m->lock);
    histogram *a = &m->h[QWS_H_PROMPT_TOKENS], *b = &m->h[QWS_H_GENERATION_TOKENS];
    if (a->count || b->count) {
        rc = -1;
    } else {
        a->nb = build_125(a->bounds, max_model_len);
        b->nb = build_125(b->bounds, max_model_len);
    }
    pthread_mutex_unlock(&m->lock);
    return rc;
}

void qws_metrics_observe(qws_metrics *m, qws_histogram h, double v) {
    if (!m || (int)h < 0 || h >= QWS_H_COUNT || isnan(v)) return;
    pthread_mutex_lock(&m->lock);
    histogram *x = &m->h[h];
    size_t i = 0;
    while (i < x->nb && v > x->bounds[i]) i++;   /* le: v <= bound counts */
    x->counts[i]++;
    x->sum += v;
    x->count++;
    pthread_mutex_unlock(&m->lock);
}

void qws_metrics_count_finish(qws_metrics *m, const char *finished_reason) {
    if (!m || !finished_reason) return;
    pthread_mutex_lock(&m->lock);
    size_t i = 0;
    while (i < m->n_reasons && strcmp(m->reasons[i].name, finished_reason) != 0) i++;
    if (i == m->n_reasons && i < MAX_REASONS) {
        m->reasons[i].name = strdup(finished_reason);
        if (m->reasons[i].name) m->n_reasons++;
    }
    if (i < m->n_reasons) m->reasons[i].count++;
    pthread_mutex_unlock(&m->lock);
}

void qws_metrics_count_http(qws_metrics *m, int status) {
    if (!m || status < HTTP_MIN || status > HTTP_MAX) return;
    pthread_mutex_lock(&m->lock);
    m->http[status - HTTP_MIN]++;
    pthread_mutex_unlock(&m->lock);
}

void qws_metrics_set_engine(qws_metrics *m, const qw_engine_stats *s) {
    if (!m || !s) return;
    pthread_mutex_lock(&m->lock);
    m->engine = *s;
    pthread_mutex_unlock(&m->lock);
}

/* ---- rendering ------------------------------------------------------------ */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_reserve(sbuf *b, size_t extra) {
    if (b->oom || b->len + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = 1;
        return;
    }
    b->p = p;
    b->cap = cap;
}

static void sb_put(sbuf *b, const char *s, size_t n) {
    sb_reserve(b, n);
    if (b->oom) return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

__attribute__((format(printf, 2, 3)))
static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = 1;
        return;
    }
    if ((size_t)n < sizeof tmp) {
        sb_put(b, tmp, (size_t)n);
        return;
    }
    sb_reserve(b, (size_t)n);
    if (b->oom) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* A label value as the exposition format wants it: \ " and newline
 * escaped, every other byte as is (label values are UTF-8). */
static void sb_label_value(sbuf *b, const char *s) {
    for (; *s; s++) {
        if (*s == '\\') sb_put(b, "\\\\", 2);
        else if (*s == '"') sb_put(b, "\\\"", 2);
        else if (*s == '\n') sb_put(b, "\\n", 2);
        else sb_put(b, s, 1);
    }
}

/* A float as Python's repr writes it (prometheus_client's floatToGoString):
 * the shortest text that reads back to the same double, with ".0" when it
 * would look like an integer; "+Inf", "-Inf", "NaN". */
static void fmt_float(char out[40], double v) {
    if (isnan(v)) {
        strcpy(out, "NaN");
        return;
    }
    if (isinf(v)) {
        strcpy(out, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    /* The fewest significant digits that read back exactly ... */
    int prec = 1;
    for (; prec < 17; prec++) {
        snprintf(out, 40, "%.*e", prec - 1, v);
        if (strtod(out, NULL) == v) break;
    }
    snprintf(out, 40, "%.*e", prec - 1, v);
    /* ... positional while the exponent is in [-4, 16), as repr does. */
    int exp10 = atoi(strchr(out, 'e') + 1);
    if (exp10 >= -4 && exp10 < 16) {
        int decimals = prec - 1 - exp10;
        snprintf(out, 40, "%.*f", decimals > 0 ? decimals : 0, v);
        if (!strchr(out, '.')) strcat(out, ".0");
    }
}

static void sb_float(sbuf *b, double v) {
    char t[40];
    fmt_float(t, v);
    sb_str(b, t);
}

static void sb_head(sbuf *b, const char *name, const char *help, const char *type) {
    sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{model_name="..."} value */
static void sb_model_sample(sbuf *b, const qws_metrics *m, const char *name, double v) {
    sb_str(b, name);
    sb_str(b, "{model_name=\"");
    sb_label_value(b, m->model_name);
    sb_str(b, "\"} ");
    sb_float(b, v);
    sb_put(b, "\n", 1);
}

static void render_gauge(sbuf *b, const qws_metrics *m, const char *name, const char *help, double v) {
    sb_head(b, name, help, "gauge");
    sb_model_sample(b, m, name, v);
}

static void render_counter(sbuf *b, const qws_metrics *m, const char *name, const char *help, double v) {
    sb_head(b, name, help, "counter");
    sb_model_sample(b, m, name, v);
}

static void render_histogram(sbuf *b, const qws_metrics *m, const char *name, const char *help,
                             const histogram *h) {
    sb_head(b, name, help, "histogram");
    uint64_t cum = 0;
    for (size_t i = 0; i <= h->nb; i++) {
        cum += h->counts[i];
        sb_printf(b, "%s_bucket{model_name=\"", name);
        sb_label_value(b, m->model_name);
        sb_str(b, "\",le=\"");
        if (i < h->nb) sb_float(b, h->bounds[i]);
        else sb_str(b, "+Inf");
        sb_str(b, "\"} ");
        sb_float(b, (double)cum);
        sb_put(b, "\n", 1);
    }
    char series[128];
    snprintf(series, sizeof series, "%s_sum", name);
    sb_model_sample(b, m, series, h->sum);
    snprintf(series, sizeof series, "%s_count", name);
    sb_model_sample(b, m, series, (double)h->count);
}

char *qws_metrics_render(qws_metrics *m, size_t *len) {
    if (!m) return NULL;
    sbuf b = {0};
    pthread_mutex_lock(&m->lock);
    const qw_engine_stats *e = &m->engine;
    double usage = e->kv_blocks_total ? (double)e->kv_blocks_used / (double)e->kv_blocks_total : 0.0;

    render_gauge(&b, m, "vllm:num_requests_running", "Number of requests in model execution batches.",
                 (double)e->num_running);
    render_gauge(&b, m, "vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                 (double)e->num_waiting);
    render_gauge(&b, m, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", usage);
    render_gauge(&b, m, "vllm:gpu_cache_usage_perc",
                 "KV-cache usage (the older name, read by the inference gateway). 1 means 100 percent usage.",
                 usage);
    render_counter(&b, m, "vllm:prefix_cache_queries_total",
                   "Prefix cache queries, in terms of number of queried tokens.",
                   (double)e->prefix_cache_queries);
    render_counter(&b, m, "vllm:prefix_cache_hits_total",
                   "Prefix cache hits, in terms of number of cached tokens.", (double)e->prefix_cache_hits);
    render_counter(&b, m, "vllm:num_preemptions_total", "Cumulative number of preemption from the engine.",
                   (double)e->num_preemptions);
    render_counter(&b, m, "vllm:prompt_tokens_total", "Number of prefill tokens processed.",
                   (double)e->prompt_tokens);
    render_counter(&b, m, "vllm:generation_tokens_total", "Number of generation tokens processed.",
                   (double)e->generation_tokens);

    sb_head(&b, "vllm:request_success_total", "Count of successfully processed requests.", "counter");
    for (size_t i = 0; i < m->n_reasons; i++) {
        sb_str(&b, "vllm:request_success_total{model_name=\"");
        sb_label_value(&b, m->model_name);
        sb_str(&b, "\",finished_reason=\"");
        sb_label_value(&b, m->reasons[i].name);
        sb_str(&b, "\"} ");
        sb_float(&b, (double)m->reasons[i].count);
        sb_put(&b, "\n", 1);
    }

    for (int i = 0; i < QWS_H_COUNT; i++) {
        render_histogram(&b, m, HISTS[i].name, HISTS[i].help, &m->h[i]);
        if (HISTS[i].alias)
            render_histogram(&b, m, HISTS[i].alias, "Histogram of time per output token in seconds.",
                             &m->h[i]);
    }

    /* No LoRA adapters here; the series exists because the inference
     * gateway's endpoint picker (v1.5) treats a replica without it as
     * unhealthy. vLLM's value is the wall-clock time of the sample; the
     * picker reads only the labels. */
    sb_head(&b, "vllm:lora_requests_info", "Running stats on LoRA requests (qw-serve has no adapters).",
            "gauge");
    sb_str(&b, "vllm:lora_requests_info{model_name=\"");
    sb_label_value(&b, m->model_name);
    sb_str(&b, "\",max_lora=\"0\",running_lora_adapters=\"\",waiting_lora_adapters=\"\"} ");
    sb_float(&b, (double)time(NULL));
    sb_put(&b, "\n", 1);

    sb_head(&b, "qwinfer_kv_blocks_used", "KV-cache blocks held by requests or sessions.", "gauge");
    sb_str(&b, "qwinfer_kv_blocks_used ");
    sb_float(&b, (double)e->kv_blocks_used);
    sb_put(&b, "\n", 1);
    sb_head(&b, "qwinfer_kv_blocks_total", "KV-cache blocks in the pool.", "gauge");
    sb_str(&b, "qwinfer_kv_blocks_total ");
    sb_float(&b, (double)e->kv_blocks_total);
    sb_put(&b, "\n", 1);

    sb_head(&b, "qwinfer_http_requests_total", "HTTP responses sent, by status code.", "counter");
    for (int s = HTTP_MIN; s <= HTTP_MAX; s++)
        if (m->http[s - HTTP_MIN]) {
            sb_printf(&b, "qwinfer_http_requests_total{code=\"%d\"} ", s);
            sb_float(&b, (double)m->http[s - HTTP_MIN]);
            sb_put(&b, "\n", 1);
        }

    sb_head(&b, "qwinfer_build_info", "qwinfer version (always 1).", "gauge");
    sb_str(&b, "qwinfer_build_info{version=\"");
    sb_label_value(&b, m->version);
    sb_str(&b, "\"} 1.0\n");
    pthread_mutex_unlock(&m->lock);

    if (b.oom) {
        free(b.p);
        return NULL;
    }
    if (len) *len = b.len;
    return b.p;
}
