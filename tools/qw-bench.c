/*
 * qw-bench - the benchmark every performance claim of qwinfer comes from.
 *
 *   qw-bench --model DIR [--device cpu|cuda:N] [--threads N] [--json]
 *            [--mode offline|serve] [--num-requests N]
 *            [--input-len N] [--output-len N] [--len-dist fixed|uniform|lognormal]
 *            [--rate R | --concurrency C] [--scenario mixed-long|shared-prefix|chat]
 *            [--long-len N] [--prefix-len N] [--turns N]
 *            [--temperature T] [--top-p P] [--max-num-seqs N] [--max-batched-tokens N]
 *            [--repetition-penalty R] [--presence-penalty P] [--frequency-penalty F]
 *            [--logprobs N]
 *            [--kv-blocks N] [--seed N] [--numerics fast|exact|fast-int8] [--no-limits]
 *            [--kv-cache-dtype auto|f32|bf16|fp8]
 *   qw-bench --model DIR --prompts FILE (--request-rate R|inf | --fixed-schedule)
 *            [--num-prompts N] [--input-len N] [--output-len N] [--seed N] [--json]
 *            (and the engine options)
 *
 * The second form is the in-process twin of an HTTP serving benchmark
 * (tools/serve-bench.sh): real-text prompts from FILE, Poisson arrivals (or
 * FILE's own schedule) released by a submitter thread, one engine thread blocking in
 * qw_engine_wait and stepping, and the metrics an HTTP benchmark client
 * reports (see "Poisson serving mode" below).
 *
 * The engine is driven only through the public API (qwinfer.h). The machine
 * limits are measured here with internal parts of the library: a
 * multi-threaded memory read/copy benchmark, and the CPU backend's own GEMM
 * kernels (lib/cpu) through its parallel driver, so "fraction of peak" is
 * against the kernel the engine really uses.
 *
 * Every step is timed and classified from what this program can see: a
 * decode step is one where every request in flight already has its first
 * token (so no prefill chunk ran); a prefill step is one that produced no
 * non-first token. Decode is reported as bytes read per step (weights + the
 * KV of every sequence's context) / step time / measured read bandwidth
 * (probed before the runs and again after each; the larger is the limit,
 * since a VM's memory swings between phases within seconds; with
 * --probe-every N also by a short probe before every N decode steps, each
 * stretch judged against the probes on either side of it, which fall in
 * the same phase); prefill as
 * (2 * params * tokens + attention FLOPs) / step time / measured peak GEMM
 * FLOP/s, and against the raw bf16 dot-product (vdpbf16ps) and
 * f32 FMA peaks of the cores, measured with tight register-only loops.
 * Prefill is also given in tokens/s, and memory as the load time, the RSS
 * after load and the peak RSS (VmHWM) of the load and of the whole run.
 *
 * Engine and request statistics (qw_engine_get_stats, qw_request_get_stats)
 * and sessions (qw_session_*) are declared weak: a library that lacks them
 * (or returns an error) gives "n/a" for the fields they feed, and the chat
 * scenario then resends the whole history each turn.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "qwinfer.h"

/* Internal: only for measuring the machine's limits. */
#include "backend.h"
#include "safetensors.h"
#include "cpu/attention.h"
#include "cpu/kernels.h"
#include "cpu/kv_fp8.h"
#include "cpu/ops.h"
#include "cpu/page_map.h"
#include "cpu/pairpanel.h"
#include "cpu/panel.h"
#include "cpu/threadpool.h"

#pragma weak qw_engine_get_stats
#pragma weak qw_request_get_stats
#pragma weak qw_session_create
#pragma weak qw_session_destroy
#pragma weak qw_request_set_session

/* ---- small helpers ------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "qw-bench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static void *xcalloc(size_t n, size_t sz) {
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p) die("out of memory");
    return p;
}

/* splitmix64: the bench's only randomness, seeded, so a run is repeatable. */
static uint64_t rng = 0x853c49e6748fea9bull;
static uint64_t rnd64(void) {
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double rnd01(void) { return (double)(rnd64() >> 11) * (1.0 / 9007199254740992.0); }
static double rnd_normal(void) {
    double u = rnd01(), v = rnd01();
    return sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct dist {
    size_t n;
    double mean, p50, p90, p99;
} dist;

/* Sorts v in place. Percentiles by nearest rank. */
static dist summarize(double *v, size_t n) {
    dist d = { n, NAN, NAN, NAN, NAN };
    if (n == 0) return d;
    qsort(v, n, sizeof *v, cmp_double);
    double s = 0;
    for (size_t i = 0; i < n; i++) s += v[i];
    d.mean = s / (double)n;
    d.p50 = v[(size_t)ceil(0.50 * (double)n) - 1];
    d.p90 = v[(size_t)ceil(0.90 * (double)n) - 1];
    d.p99 = v[(size_t)ceil(0.99 * (double)n) - 1];
    return d;
}

/* ---- options --------------------------------------------------------------- */

typedef struct args {
    const char *model, *device, *mode, *len_dist, *scenario, *numerics;
    const char *kv_dtype;                             /* --kv-cache-dtype        */
    int threads, num_requests, input_len, output_len, long_len, prefix_len, turns;
    int max_num_seqs, max_batched, kv_blocks, json, limits;
    double rate, temperature, top_p;
    double rep_penalty, pres_penalty, freq_penalty;   /* 1, 0, 0: off */
    int logprobs;                                     /* -1: off      */
    int concurrency;
    uint64_t seed;
    int rate_mode;                                    /* the serving mode (below) */
    double request_rate;                              /* req/s; INFINITY: all at once;
                                                         0: --fixed-schedule      */
    int fixed_schedule;                               /* arrivals from FILE      */
    const char *prompts;                              /* --prompts FILE          */
    int probe_every;                                  /* --probe-every N; 0: off */
} args;

/* The qw_kv_cache_dtype of a --kv-cache-dtype word, or -1. */
static int kv_dtype_value(const char *s) {
    if (!strcmp(s, "auto")) return QW_KV_CACHE_AUTO;
    if (!strcmp(s, "f32")) return QW_KV_CACHE_F32;
    if (!strcmp(s, "bf16")) return QW_KV_CACHE_BF16;
    if (!strcmp(s, "fp8")) return QW_KV_CACHE_FP8_E4M3;
    return -1;
}

static void usage(void) {
    fprintf(stderr,
            "usage: qw-bench --model DIR [--device cpu|cuda:N] [--threads N] [--json]\n"
            "  [--mode offline|serve] [--num-requests N] [--input-len N] [--output-len N]\n"
            "  [--len-dist fixed|uniform|lognormal] [--rate REQ_PER_S | --concurrency C]\n"
            "  [--scenario mixed-long|shared-prefix|chat] [--long-len N] [--prefix-len N]\n"
            "  [--turns N] [--temperature T] [--top-p P] [--max-num-seqs N]\n"
            "  [--max-batched-tokens N] [--kv-blocks N] [--seed N] [--numerics fast|exact|fast-int8]\n"
            "  [--kv-cache-dtype auto|f32|bf16|fp8]\n"
            "  [--no-limits] [--repetition-penalty R] [--presence-penalty P]\n"
            "  [--frequency-penalty F] [--logprobs N] [--probe-every N]\n"
            "   or: qw-bench --model DIR --prompts FILE (--request-rate R|inf | --fixed-schedule)\n"
            "  [--num-prompts N] [--input-len N] [--output-len N] [--seed N] [--json] [engine options]\n"
            "offline: all requests at once; serve: Poisson arrivals at --rate (or a fixed\n"
            "--concurrency). lognormal is a ShareGPT-like mix with the given lengths as\n"
            "medians. Throughput runs sample at --temperature 1.0 (top-p 1.0) unless told\n"
            "otherwise, as served traffic does. --numerics sets QW_OPT_NUMERICS (default:\n"
            "the engine's, fast). --no-limits skips measuring bandwidth and the GEMM, bf16\n"
            "dot-product and FMA peaks (bandwidth is probed again after each run; decode\n"
            "is judged against the larger probe). The penalties and --logprobs (QW_REQ_*)\n"
            "are off unless given. --probe-every N: a short read-bandwidth probe before every\n"
            "N decode steps, each stretch judged against the probes on either side of it.\n"
            "--request-rate: the HTTP serving benchmark's workload in-process: FILE has one\n"
            "prompt per line (plain text, or JSONL with \"text\" or \"prompt\"), each cut or\n"
            "padded (with the next lines' tokens) to --input-len tokens; --output-len tokens\n"
            "each (ignore_eos); seeded Poisson arrivals at R req/s (inf: all at once) from a\n"
            "submitter thread, or at the \"timestamp\" (ms) of each JSONL line with\n"
            "--fixed-schedule (aiperf's field: both replay one schedule); reports request and\n"
            "output token throughput, TTFT, ITL, the gaps between text pieces and E2E\n"
            "latency. --num-prompts is --num-requests.\n");
    exit(2);
}

static void parse(int argc, char **argv, args *a) {
    *a = (args){ .device = "cpu", .mode = "offline", .len_dist = "fixed", .scenario = "",
                 .threads = 0, .num_requests = 64, .input_len = 128, .output_len = 128,
                 .long_len = 4096, .prefix_len = 512, .turns = 4, .max_num_seqs = 256,
                 .max_batched = 2048, .kv_blocks = 0, .limits = 1, .rate = 0,
                 .temperature = 1.0, .top_p = 1.0, .seed = 1, .rep_penalty = 1.0, .logprobs = -1 };
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define STR(name, field) if (!strcmp(o, name)) { if (!v) usage(); a->field = v; i++; continue; }
#define INT(name, field) if (!strcmp(o, name)) { if (!v) usage(); a->field = atoi(v); i++; continue; }
#define DBL(name, field) if (!strcmp(o, name)) { if (!v) usage(); a->field = atof(v); i++; continue; }
        STR("--model", model) STR("--device", device) STR("--mode", mode)
        STR("--len-dist", len_dist) STR("--scenario", scenario) STR("--numerics", numerics)
        STR("--kv-cache-dtype", kv_dtype)
        INT("--threads", threads) INT("--num-requests", num_requests) INT("--input-len", input_len)
        INT("--output-len", output_len) INT("--long-len", long_len) INT("--prefix-len", prefix_len)
        INT("--turns", turns) INT("--max-num-seqs", max_num_seqs)
        INT("--max-batched-tokens", max_batched) INT("--kv-blocks", kv_blocks)
        INT("--concurrency", concurrency) INT("--num-prompts", num_requests) STR("--prompts", prompts)
        DBL("--rate", rate) DBL("--temperature", temperature) DBL("--top-p", top_p)
        DBL("--repetition-penalty", rep_penalty) DBL("--presence-penalty", pres_penalty)
        DBL("--frequency-penalty", freq_penalty) INT("--logprobs", logprobs)
        INT("--probe-every", probe_every)
#undef STR
#undef INT
#undef DBL
        if (!strcmp(o, "--seed") && v) { a->seed = strtoull(v, NULL, 0); i++; continue; }
        if (!strcmp(o, "--request-rate") && v) {
            /* strtod takes "inf"; anything but a positive number or inf is refused */
            char *end;
            a->request_rate = strtod(v, &end);
            if (end == v || *end || !(a->request_rate > 0)) {
                fprintf(stderr, "qw-bench: --request-rate wants a positive number or inf, not '%s'\n", v);
                exit(2);
            }
            a->rate_mode = 1;
            i++;
            continue;
        }
        if (!strcmp(o, "--fixed-schedule")) { a->fixed_schedule = a->rate_mode = 1; continue; }
        if (!strcmp(o, "--json")) { a->json = 1; continue; }
        if (!strcmp(o, "--no-limits")) { a->limits = 0; continue; }
        usage();
    }
    if (!a->model) usage();
    if (a->numerics && strcmp(a->numerics, "fast") && strcmp(a->numerics, "exact") &&
        strcmp(a->numerics, "fast-int8"))
        usage();
    if (a->kv_dtype && kv_dtype_value(a->kv_dtype) < 0) usage();
    if (a->num_requests <= 0 || a->input_len <= 0 || a->output_len <= 0 || a->probe_every < 0) usage();
    if (a->probe_every > 0 && (a->rate_mode || strncmp(a->device, "cpu", 3))) {
        fprintf(stderr, "qw-bench: --probe-every is for the offline and serve forms on the CPU (it probes "
                        "host memory between decode steps)\n");
        exit(2);
    }
    if (strcmp(a->len_dist, "fixed") && strcmp(a->len_dist, "uniform") && strcmp(a->len_dist, "lognormal"))
        usage();
    if (a->scenario[0] && strcmp(a->scenario, "mixed-long") && strcmp(a->scenario, "shared-prefix") &&
        strcmp(a->scenario, "chat"))
        usage();
    /* the serving mode has its own workload: the other workload shapes do not mix with it */
    if (a->rate_mode && (!a->prompts || a->scenario[0] || a->concurrency || a->rate > 0 ||
                         strcmp(a->mode, "offline") || strcmp(a->len_dist, "fixed"))) {
        fprintf(stderr, "qw-bench: --request-rate and --fixed-schedule need --prompts FILE and take none of "
                        "--mode, --rate, --concurrency, --scenario, --len-dist\n");
        exit(2);
    }
    if (a->fixed_schedule && a->request_rate > 0) {
        fprintf(stderr, "qw-bench: --request-rate or --fixed-schedule, not both\n");
        exit(2);
    }
    if (a->prompts && !a->rate_mode) {
        fprintf(stderr, "qw-bench: --prompts is for the serving mode: give --request-rate or --fixed-schedule\n");
        exit(2);
    }
}

/* ---- the model, as far as the bench needs it ------------------------------ */

typedef struct model_info {
    int64_t hidden, inter, layers, heads, kv_heads, head_dim, vocab;
    int tied;
    double params_per_token;     /* matmul parameters every row multiplies (no embedding, no head) */
    double weight_bytes;         /* safetensors bytes on disk (what memory holds, for RSS ratios) */
    double stream_bytes;         /* weight bytes one decode step streams: every tensor but the
                                    embedding, whose rows are gathered, when a separate head
                                    (lm_head.*) is shipped; a tied model's embedding is its head */
    double kv_bytes_per_token;   /* K+V of one position, all layers, at the cache dtype (main) */
} model_info;

static int64_t jint(json_t *o, const char *k, int64_t dflt) {
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

static void load_model_info(const char *dir, int cuda, model_info *mi) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root) die("%s: %s", path, err.text);
    json_t *c = root, *tc = json_object_get(root, "text_config");   /* multimodal configs nest it */
    if (json_is_object(tc)) c = tc;
    mi->hidden = jint(c, "hidden_size", 0);
    mi->inter = jint(c, "intermediate_size", 0);
    mi->layers = jint(c, "num_hidden_layers", 0);
    mi->heads = jint(c, "num_attention_heads", 0);
    mi->kv_heads = jint(c, "num_key_value_heads", mi->heads);
    mi->head_dim = jint(c, "head_dim", mi->heads ? mi->hidden / mi->heads : 0);
    mi->vocab = jint(c, "vocab_size", 0);
    mi->tied = json_is_true(json_object_get(c, "tie_word_embeddings"));
    const double H = (double)mi->hidden, qd = (double)(mi->heads * mi->head_dim),
                 kvd = (double)(mi->kv_heads * mi->head_dim);
    mi->params_per_token = (double)mi->layers * (H * (qd + 2 * kvd) + qd * H + 3 * H * (double)mi->inter);
    mi->kv_bytes_per_token = 2.0 * (double)mi->layers * kvd * (cuda ? 2.0 : 4.0);
    mi->weight_bytes = 0;
    DIR *d = opendir(dir);
    if (!d) die("%s: %s", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 12 || strcmp(e->d_name + n - 12, ".safetensors")) continue;
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &st) == 0) mi->weight_bytes += (double)st.st_size;
    }
    closedir(d);
    /* The bytes a decode step reads, from the headers (the library's reader:
     * mapped, not read): every tensor, less the embedding when a separate
     * head is shipped. A set the reader refuses falls back to the files'
     * size; the engine will refuse it with the reason. */
    mi->stream_bytes = mi->weight_bytes;
    qwi_st_set *set = NULL;
    if (qwi_st_open_dir(dir, &set) == QW_OK) {
        double all = 0, embed = 0;
        bool head = false;
        for (size_t i = 0; i < qwi_st_count(set); i++) {
            const qwi_tensor *t = qwi_st_at(set, i);
            all += (double)t->nbytes;
            if (!strcmp(t->name, "model.embed_tokens.weight")) embed = (double)t->nbytes;
            head |= !strncmp(t->name, "lm_head.", 8);
        }
        mi->stream_bytes = all - (head ? embed : 0);
        qwi_st_close(set);
    }
    json_decref(root);
}

/* FLOPs of prefilling tokens [c0, c1) of one sequence, logits for one row. */
static double prefill_flops(const model_info *mi, double c0, double c1, int logits_rows) {
    double t = c1 - c0;
    /* causal attention: token at position p reads p+1 keys, QK and PV */
    double keys = (c1 * (c1 + 1) - c0 * (c0 + 1)) / 2.0;
    double attn = 4.0 * (double)mi->layers * (double)(mi->heads * mi->head_dim) * keys;
    return 2.0 * mi->params_per_token * t + attn + 2.0 * (double)mi->hidden * (double)mi->vocab * logits_rows;
}

/* ---- machine limits ---------------------------------------------------------- */

/* One probe thread's own start and end (CLOCK_MONOTONIC). The probes time
 * themselves: with as many threads as CPUs, a timing main thread competes
 * with them for a CPU after the start barrier and starts its clock late
 * (on 2 vCPUs the 2-thread peak read 4x one thread). */
typedef struct probe_clock {
    double t_start, t_end;
} probe_clock;

/* Seconds from the first thread's start to the last one's end. */
static double probe_span(const probe_clock *c, int n) {
    double t0 = c[0].t_start, t1 = c[0].t_end;
    for (int t = 1; t < n; t++) {
        if (c[t].t_start < t0) t0 = c[t].t_start;
        if (c[t].t_end > t1) t1 = c[t].t_end;
    }
    return t1 - t0;
}

typedef struct bw_job {
    const uint64_t *src;
    uint64_t *dst;
    size_t words;
    int copy;
    uint64_t sink;
    pthread_barrier_t *bar;
    probe_clock *clk;
} bw_job;

/* Sum of words [0, n) by 32-byte loads, four accumulators (AVX2): the
 * loads a decode GEMV issues, not the scalar ones the baseline ISA would
 * give the plain loop at -O2 (which read ~30% low on a Zen 4 VM). */
__attribute__((target("avx2"))) static uint64_t read_sum_avx2(const uint64_t *src, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(src + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(src + i + 4)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(src + i + 8)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(src + i + 12)));
    }
    uint64_t t[4];
    _mm256_storeu_si256((__m256i *)t, _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
    uint64_t s = t[0] + t[1] + t[2] + t[3];
    for (; i < n; i++) s += src[i];
    return s;
}

static void *bw_thread(void *p) {
    bw_job *j = p;
    pthread_barrier_wait(j->bar);
    j->clk->t_start = now_s();
    if (j->copy) {
        memcpy(j->dst, j->src, j->words * sizeof(uint64_t));
    } else if (__builtin_cpu_supports("avx2")) {
        j->sink = read_sum_avx2(j->src, j->words);
    } else {
        /* Four independent sums keep the loads in flight. */
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (size_t i = 0; i + 4 <= j->words; i += 4) {
            s0 += j->src[i];
            s1 += j->src[i + 1];
            s2 += j->src[i + 2];
            s3 += j->src[i + 3];
        }
        j->sink = s0 + s1 + s2 + s3;
    }
    j->clk->t_end = now_s();
    return NULL;
}

/* A buffer of `bytes` mapped as the engine maps its packed weights
 * (cpu/page_map.h, QWI_PAGES_HUGE): with 4 KiB pages a read stream pays a
 * TLB miss every page, which the weights do not. */
static qwi_page_map probe_buffer(size_t bytes) {
    qwi_page_map m;
    if (!qwi_page_map_create(bytes, QWI_PAGES_HUGE, &m)) die("bandwidth buffer: out of memory");
    return m;
}

/* Best of `reps` passes over src (and dst for a copy), `bytes` each, with
 * nthreads threads each on its own slice; bytes moved per second (a copy
 * counts its read and its write), over the span the workers time
 * themselves (probe_clock). The buffers stay the caller's. */
static double bandwidth_passes(const uint64_t *src, uint64_t *dst, size_t bytes, int nthreads, int reps) {
    const int copy = dst != NULL;
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)nthreads);
    bw_job *jobs = xcalloc((size_t)nthreads, sizeof *jobs);
    probe_clock *clk = xcalloc((size_t)nthreads, sizeof *clk);
    pthread_t *th = xcalloc((size_t)nthreads, sizeof *th);
    size_t per = bytes / sizeof(uint64_t) / (size_t)nthreads;
    double best = 0;
    for (int r = 0; r < reps; r++) {
        for (int t = 0; t < nthreads; t++) {
            jobs[t] = (bw_job){ src + (size_t)t * per, dst ? dst + (size_t)t * per : NULL, per, copy, 0, &bar, &clk[t] };
            pthread_create(&th[t], NULL, bw_thread, &jobs[t]);
        }
        for (int t = 0; t < nthreads; t++) pthread_join(th[t], NULL);
        double dt = probe_span(clk, nthreads);
        double moved = (double)per * nthreads * sizeof(uint64_t) * (copy ? 2.0 : 1.0);
        if (moved / dt > best) best = moved / dt;
    }
    pthread_barrier_destroy(&bar);
    free(jobs);
    free(clk);
    free(th);
    return best;
}

/* Best of `reps` passes over a buffer far larger than any cache
 * (bandwidth_passes over 512 MiB per direction). */
static double measure_bandwidth(int nthreads, int copy, int reps) {
    const size_t bytes = (size_t)512 << 20;
    qwi_page_map src_map = probe_buffer(bytes), dst_map = { 0 };
    if (copy) dst_map = probe_buffer(bytes);
    uint64_t *src = (uint64_t *)(void *)src_map.base, *dst = (uint64_t *)(void *)dst_map.base;
    memset(src, 1, bytes);
    if (dst) memset(dst, 0, bytes);
    double best = bandwidth_passes(src, dst, bytes, nthreads, reps);
    qwi_page_map_release(&src_map);
    qwi_page_map_release(&dst_map);
    return best;
}

/* The weight layouts the backend can run a matmul on: row-major, the
 * exact mode's 16-row panels, and fast numerics' bf16 pair panels (whose
 * kernel also rounds each input row to bf16 pairs, as the engine does). */
enum { LAYOUT_ROWS = 0, LAYOUT_PANEL = 1, LAYOUT_PAIR = 2 };
static const char *const layout_names[] = { "rows", "panel", "pair" };

/* GEMM FLOP/s of kernel table kt through the backend's own parallel driver
 * on a prefill-sized problem (M x K times N x K bf16 weights, the 0.6B
 * gate/up shape by default) with weights in `layout`, best of reps. */
static double measure_gemm(const qwi_cpu_kernels *kt, int nthreads, int64_t M, int64_t K, int64_t N,
                           int bf16, int layout, int reps) {
    qwi_cpu_pool *pool;
    if (qwi_cpu_pool_create(nthreads, &pool) != QW_OK) die("thread pool: %s", qw_last_error());
    float *x = malloc((size_t)(M * K) * sizeof(float));
    void *w = malloc((size_t)(N * K) * (bf16 ? 2 : 4));
    float *out = malloc((size_t)(M * N) * sizeof(float));
    if (!x || !w || !out) die("gemm buffers: out of memory");
    for (int64_t i = 0; i < M * K; i++) x[i] = (float)(rnd01() - 0.5);
    for (int64_t i = 0; i < N * K; i++) {
        float f = (float)(rnd01() - 0.5);
        if (bf16) {
            uint32_t u;
            memcpy(&u, &f, 4);
            ((uint16_t *)w)[i] = (uint16_t)(u >> 16);
        } else {
            ((float *)w)[i] = f;
        }
    }
    qwi_dtype wdt = bf16 ? QWI_DTYPE_BF16 : QWI_DTYPE_F32;
    uint32_t *xpair = NULL;
    float *xwide = NULL;   /* as the backend gives it (qwi_cpu_kernels_read_wide) */
    if (layout == LAYOUT_PANEL) {   /* the layouts the backend packs weights into at load */
        void *pw = malloc(qwi_panel_bytes(wdt, N, K));
        if (!pw || !qwi_panel_pack(wdt, w, N, K, pw)) die("gemm buffers: out of memory");
        free(w);
        w = pw;
    } else if (layout == LAYOUT_PAIR) {
        void *pw = malloc(qwi_pairpanel_bytes(N, K));
        xpair = malloc((size_t)M * (size_t)qwi_pair_kp(K) * sizeof *xpair);
        const bool wide = qwi_cpu_kernels_read_wide(kt);
        if (wide) xwide = malloc((size_t)M * (size_t)qwi_pair_kp(K) * 2 * sizeof *xwide);
        if (!pw || !xpair || (wide && !xwide) || !qwi_pairpanel_pack(wdt, w, N, K, pw))
            die("gemm buffers: out of memory");
        free(w);
        w = pw;
    }
    float *no_f16[1024] = { 0 };
    qwi_cpu_ctx cx = { .pool = pool, .kt = kt, .nthreads = qwi_cpu_pool_size(pool),
                       .f16_buf = no_f16, .max_k = K, .xpair = xpair, .xwide = xwide };
    qwi_cpu_linear lin = { .dtype = wdt, .w = w, .bias = NULL, .n = N, .k = K,
                           .panel = layout == LAYOUT_PANEL, .pair = layout == LAYOUT_PAIR };
    qwi_cpu_mm_job job = { &lin, out, 0 };
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        qwi_cpu_matmul(&cx, x, M, K, &job, 1);
        double dt = now_s() - t0;
        double f = 2.0 * (double)M * (double)N * (double)K / dt;
        if (f > best) best = f;
    }
    free(x);
    free(w);
    free(out);
    free(xpair);
    free(xwide);
    qwi_cpu_pool_destroy(pool);
    return best;
}

/* ---- compute peaks: raw instruction loops ------------------------------------ */

/* What this CPU and OS support, from CPUID (and XGETBV for the register
 * state the OS saves): the peak loops below only run where they can. */
typedef struct cpu_feats {
    int avx2_fma, avx512f, avx512_bf16, amx_bf16, amx_tile;
} cpu_feats;

static cpu_feats detect_cpu(void) {
    cpu_feats f = { 0, 0, 0, 0, 0 };
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    const int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1;
    if (!osxsave) return f;
    unsigned xlo, xhi;
    __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    const int ymm_os = (xlo & 0x6) == 0x6, zmm_os = (xlo & 0xe6) == 0xe6;
    const int tile_os = ((xlo >> 17) & 3) == 3;   /* XTILECFG | XTILEDATA */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
    f.avx2_fma = ymm_os && fma && ((b >> 5) & 1);
    f.avx512f = zmm_os && ((b >> 16) & 1);
    f.amx_bf16 = (d >> 22) & 1;
    f.amx_tile = ((d >> 24) & 1) && tile_os;
    unsigned a1, b1, c1, d1;
    if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) f.avx512_bf16 = f.avx512f && ((a1 >> 5) & 1);
#endif
    return f;
}

/* Iterations of a peak loop; each does 16 independent chains of one
 * instruction, enough to cover latency x throughput on current cores
 * (5 cycles x 2 per cycle), so the loop runs at the issue rate. ~15 ms a
 * pass at 2 instructions per cycle: with ~4 ms passes a VM that started
 * the second thread a millisecond late read the 2-thread peak as 0.5-0.6
 * of twice the 1-thread one (seen on a 2-vCPU Zen 5). */
#define PEAK_ITERS 8000000L
/* passes per peak (the best is kept) */
#define PEAK_REPS 5

#if defined(__x86_64__) || defined(__i386__)
/* Sixteen named accumulators, so that they live in registers (an array of
 * them is kept in memory at -O2) and the loop is pure arithmetic. */
#define PEAK_16(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
/* AVX2 has 16 ymm registers: 16 chains and their operands spilled to the
 * stack and read ~0.6 of the peak; 12 chains still cover 4 cycles x 2. */
#define PEAK_12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

/* vdpbf16ps zmm: 16 lanes x 2 bf16 products, each added: 64 FLOP. The
 * target attribute lets the tool build for any x86 and run this only
 * where CPUID says AVX512_BF16. */
__attribute__((target("avx512f,avx512bf16"), noinline)) static float peak_loop_bf16(long iters, float seed) {
#define DECL(i) __m512 a##i = _mm512_set1_ps(seed * (float)i);
#define STEP(i) a##i = _mm512_dpbf16_ps(a##i, x, w);
#define SUM(i) s = _mm512_add_ps(s, a##i);
    PEAK_16(DECL)
    const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80);   /* (1.0, 1.0) */
    const __m512bh w = (__m512bh)_mm512_set1_epi32(0x3c003c00);   /* (2^-7, 2^-7) */
    for (long n = 0; n < iters; n++) { PEAK_16(STEP) }
    __m512 s = _mm512_setzero_ps();
    PEAK_16(SUM)
    return _mm512_reduce_add_ps(s);
#undef STEP
}

/* vfmadd231ps zmm: 16 lanes x (multiply + add): 32 FLOP. */
__attribute__((target("avx512f"), noinline)) static float peak_loop_fma512(long iters, float seed) {
#define STEP(i) a##i = _mm512_fmadd_ps(a##i, x, w);
    PEAK_16(DECL)
    const __m512 x = _mm512_set1_ps(0.999f), w = _mm512_set1_ps(1e-3f * seed);
    for (long n = 0; n < iters; n++) { PEAK_16(STEP) }
    __m512 s = _mm512_setzero_ps();
    PEAK_16(SUM)
    return _mm512_reduce_add_ps(s);
#undef STEP
#undef DECL
#undef SUM
}

/* vfmadd231ps ymm: 8 lanes x 2: 16 FLOP (AVX2 machines), 12 chains. */
__attribute__((target("avx2,fma"), noinline)) static float peak_loop_fma256(long iters, float seed) {
#define DECL(i) __m256 a##i = _mm256_set1_ps(seed * (float)i);
#define STEP(i) a##i = _mm256_fmadd_ps(a##i, x, w);
#define SUM(i) s = _mm256_add_ps(s, a##i);
    PEAK_12(DECL)
    const __m256 x = _mm256_set1_ps(0.999f), w = _mm256_set1_ps(1e-3f * seed);
    for (long n = 0; n < iters; n++) { PEAK_12(STEP) }
    __m256 s = _mm256_setzero_ps();
    PEAK_12(SUM)
    float v[8];
    _mm256_storeu_ps(v, s);
    return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
#undef DECL
#undef STEP
#undef SUM
}
#undef PEAK_16
#undef PEAK_12
#endif

/* PEAK_AMX: tdpbf16ps on register-held tiles (lib/cpu/pair_amx.c), where
 * the amx kernel table can run. */
typedef enum peak_kind { PEAK_BF16_DOT, PEAK_FMA512, PEAK_FMA256, PEAK_AMX } peak_kind;

/* One AMX tile op does the work of 256 vdpbf16ps zmm and takes ~16 cycles
 * where those take ~128: 1/8 of the iterations runs about as long. */
#define PEAK_AMX_ITERS (PEAK_ITERS / 8)

typedef struct peak_job {
    peak_kind kind;
    long iters;
    float sink;
    pthread_barrier_t *bar;
    probe_clock *clk;
} peak_job;

static void *peak_thread(void *p) {
    peak_job *j = p;
    pthread_barrier_wait(j->bar);
    j->clk->t_start = now_s();
#if defined(__x86_64__) || defined(__i386__)
    if (j->kind == PEAK_BF16_DOT) j->sink = peak_loop_bf16(j->iters, 1.0f);
    else if (j->kind == PEAK_FMA512) j->sink = peak_loop_fma512(j->iters, 1.0f);
    else if (j->kind == PEAK_AMX) j->sink = qwi_pair_amx_peak_loop(j->iters);
    else j->sink = peak_loop_fma256(j->iters, 1.0f);
#endif
    j->clk->t_end = now_s();
    return NULL;
}

/* FLOP/s of kind's loop on nthreads threads at once, best of reps, over
 * the span the workers time themselves (probe_clock). */
static double measure_peak(peak_kind kind, int nthreads, int reps) {
    const double flop_per_insn = kind == PEAK_AMX        ? 16384.0
                                 : kind == PEAK_BF16_DOT ? 64.0
                                 : kind == PEAK_FMA512   ? 32.0
                                                         : 16.0;
    /* instructions per iteration */
    const double chains = kind == PEAK_FMA256 ? 12.0 : kind == PEAK_AMX ? 4.0 : 16.0;
    const long iters = kind == PEAK_AMX ? PEAK_AMX_ITERS : PEAK_ITERS;
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)nthreads);
    peak_job *jobs = xcalloc((size_t)nthreads, sizeof *jobs);
    probe_clock *clk = xcalloc((size_t)nthreads, sizeof *clk);
    pthread_t *th = xcalloc((size_t)nthreads, sizeof *th);
    double best = 0;
    for (int r = 0; r < reps; r++) {
        for (int t = 0; t < nthreads; t++) {
            jobs[t] = (peak_job){ kind, iters, 0, &bar, &clk[t] };
            pthread_create(&th[t], NULL, peak_thread, &jobs[t]);
        }
        for (int t = 0; t < nthreads; t++) pthread_join(th[t], NULL);
        double f = flop_per_insn * chains * (double)iters * nthreads / probe_span(clk, nthreads);
        if (f > best) best = f;
    }
    pthread_barrier_destroy(&bar);
    free(jobs);
    free(clk);
    free(th);
    return best;
}

/* ---- process memory ---------------------------------------------------------- */

/* A "Vm...:" field of /proc/self/status in bytes, NAN when unreadable. */
static double proc_status_bytes(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return NAN;
    char line[256];
    size_t n = strlen(key);
    double v = NAN;
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (!strncmp(line, key, n) && line[n] == ':' && sscanf(line + n + 1, "%llu", &kb) == 1) {
            v = (double)kb * 1024.0;
            break;
        }
    }
    fclose(f);
    return v;
}

/* Reset VmHWM to the current RSS (Linux >= 4.0), so the peak measured from
 * here excludes the machine-limit buffers. Returns 0 when not possible. */
static int reset_peak_rss(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return 0;
    int ok = fputs("5", f) >= 0;
    return (fclose(f) == 0) && ok;
}

static int affinity_threads(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
    return CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
}

/* ---- requests and the step loop ------------------------------------------------ */

typedef struct breq {
    qw_request *r;
    int32_t *prompt;
    int32_t plen, olen;
    double arrival;              /* when it may be submitted (INFINITY: not yet)  */
    double submit_t, first_t, last_t, finish_t;
    int32_t ntok;
    int submitted, done, is_long;
    int conv, turn;              /* chat: conversation and turn                   */
    qw_request_stats st;
    int have_st;
    int64_t computed;            /* computed_tokens before the step (read at submit,
                                    then after each step); -1: unknown            */
} breq;

typedef struct step_rec {
    double dt;
    int64_t prompt_tokens;       /* -1 when unknown                               */
    int32_t decoded;             /* non-first tokens produced                     */
    int32_t firsts;              /* first tokens produced                         */
    int decode_only;             /* every in-flight request had its first token   */
    int prefill_only;            /* no in-flight request had its first token      */
    double ctx_tokens;           /* sum of in-flight context lengths (decode KV)  */
    double flops;                /* prefill-only steps: FLOPs of the step         */
} step_rec;

typedef struct bench {
    args a;
    model_info mi;
    qw_engine *e;
    int32_t vocab;
    breq *reqs;
    int nreq;
    step_rec *steps;
    size_t nsteps, capsteps;
    double *itl;
    size_t nitl, capitl;
    qw_session **sessions;       /* chat: one per conversation, NULL without the API */
    int nconv;
    int session_api;
    int progress;
    qw_engine_stats st0, st1;
    int have_stats;
    double t_start, t_end;
    double rss_base;             /* VmRSS before the engine was created           */
    /* --probe-every: the probe's buffer (allocated and touched before the
     * engine, so the RSS figures, taken as growth over rss_base, exclude
     * it), its threads, and the probes of the current run */
    qwi_page_map probe_map;
    int probe_threads;
    struct paired_probe *probes;
    size_t nprobes, capprobes;
    int since_probe;             /* decode steps since the last probe             */
    double probe_seconds;        /* wall time the current run spent in probes     */
} bench;

/* One probe of --probe-every: taken just before step index `step` of
 * bench.steps, reading at read_bw bytes/s. */
typedef struct paired_probe {
    size_t step;
    double read_bw;
} paired_probe;

static int get_engine_stats(qw_engine *e, qw_engine_stats *s) {
    memset(s, 0, sizeof *s);
    if (!qw_engine_get_stats) return 0;
    return qw_engine_get_stats(e, s, sizeof *s) == QW_OK;
}

static void fill_prompt(int32_t *p, int32_t n, int32_t vocab) {
    /* Random ids below the first 1000 of the vocabulary's top (special
     * tokens live there in real Qwen vocabularies). */
    int32_t hi = vocab > 2000 ? vocab - 1000 : vocab;
    for (int32_t i = 0; i < n; i++) p[i] = (int32_t)(rnd64() % (uint64_t)hi);
}

static int32_t draw_len(const char *distname, int32_t base, int32_t cap) {
    double v = base;
    if (!strcmp(distname, "uniform")) v = base * (0.5 + rnd01());
    else if (!strcmp(distname, "lognormal")) v = base * exp(0.8 * rnd_normal());   /* ShareGPT-like spread */
    int32_t n = (int32_t)lround(v);
    if (n < 1) n = 1;
    if (n > cap) n = cap;
    return n;
}

static qw_request *make_request(bench *b, breq *q) {
    qw_request *r;
    if (qw_request_create(&r) != QW_OK) die("request: %s", qw_last_error());
    qw_status s = qw_request_set_prompt(r, q->prompt, (size_t)q->plen);
    if (s == QW_OK) s = qw_request_set_int(r, QW_REQ_MAX_TOKENS, q->olen);
    if (s == QW_OK) s = qw_request_set_int(r, QW_REQ_IGNORE_EOS, 1);
    if (s == QW_OK) s = qw_request_set_double(r, QW_REQ_TEMPERATURE, b->a.temperature);
    if (s == QW_OK && b->a.top_p < 1.0) s = qw_request_set_double(r, QW_REQ_TOP_P, b->a.top_p);
    if (s == QW_OK && b->a.rep_penalty != 1.0)
        s = qw_request_set_double(r, QW_REQ_REPETITION_PENALTY, b->a.rep_penalty);
    if (s == QW_OK && b->a.pres_penalty != 0.0) s = qw_request_set_double(r, QW_REQ_PRESENCE_PENALTY, b->a.pres_penalty);
    if (s == QW_OK && b->a.freq_penalty != 0.0)
        s = qw_request_set_double(r, QW_REQ_FREQUENCY_PENALTY, b->a.freq_penalty);
    if (s == QW_OK && b->a.logprobs >= 0) s = qw_request_set_int(r, QW_REQ_LOGPROBS, b->a.logprobs);
    if (s == QW_OK) s = qw_request_set_int(r, QW_REQ_SEED, (int64_t)(q - b->reqs) + 1);
    if (s == QW_OK) s = qw_request_set_user_data(r, q);
    if (s != QW_OK) die("request options: %s", qw_last_error());
    return r;
}

static void progress_bar(bench *b, int done, double t) {
    static double last;
    if (!b->progress || (t - last < 0.2 && done < b->nreq)) return;
    last = t;
    int w = 30, fill = b->nreq ? done * w / b->nreq : w;
    uint64_t toks = 0;
    for (int i = 0; i < b->nreq; i++) toks += (uint64_t)b->reqs[i].ntok;
    fprintf(stderr, "\r[%.*s%*s] %d/%d requests  %.1f tok/s  ", fill,
            "==============================", w - fill, "", done, b->nreq,
            (double)toks / (t - b->t_start + 1e-9));
    if (done == b->nreq) fprintf(stderr, "\n");
}

/* chat without sessions: the next turn's prompt is the whole history. */
static void chat_next_turn(bench *b, breq *q, double t) {
    if (q->turn + 1 >= b->a.turns) return;
    breq *n = q + 1;                       /* turns of a conversation are consecutive */
    if (!b->session_api) {
        size_t got = 0;
        int32_t *hist = xcalloc((size_t)(q->plen + q->ntok + n->plen), sizeof(int32_t));
        memcpy(hist, q->prompt, (size_t)q->plen * sizeof(int32_t));
        qw_request_get_tokens(q->r, hist + q->plen, (size_t)q->ntok, &got);
        memcpy(hist + q->plen + got, n->prompt, (size_t)n->plen * sizeof(int32_t));
        free(n->prompt);
        n->prompt = hist;
        n->plen = q->plen + (int32_t)got + n->plen;
    }
    n->arrival = t;
}

static void record_step(bench *b, step_rec s) {
    if (b->nsteps == b->capsteps) {
        b->capsteps = b->capsteps ? 2 * b->capsteps : 4096;
        b->steps = realloc(b->steps, b->capsteps * sizeof *b->steps);
        if (!b->steps) die("out of memory");
    }
    b->steps[b->nsteps++] = s;
}

/* --probe-every's probe: bytes per pass (8x a 32 MiB L3, read in ~10 ms on
 * a 2-core VM) and passes (the best counts). */
#define PAIRED_PROBE_BYTES ((size_t)256 << 20)
#define PAIRED_PROBE_PASSES 2

/* A short read-bandwidth probe between two engine steps, recorded against
 * the next step's index. The engine's pool workers poll for up to 200 us
 * after a step before they sleep (threadpool.c), so it waits 1 ms first:
 * the probe's threads then have the CPUs to themselves. */
static void take_paired_probe(bench *b) {
    double t0 = now_s();
    struct timespec pause = { 0, 1000000 };
    nanosleep(&pause, NULL);
    double bw = bandwidth_passes((const uint64_t *)(void *)b->probe_map.base, NULL, PAIRED_PROBE_BYTES,
                                 b->probe_threads, PAIRED_PROBE_PASSES);
    if (b->nprobes == b->capprobes) {
        b->capprobes = b->capprobes ? 2 * b->capprobes : 64;
        b->probes = realloc(b->probes, b->capprobes * sizeof *b->probes);
        if (!b->probes) die("out of memory");
    }
    b->probes[b->nprobes++] = (paired_probe){ b->nsteps, bw };
    b->since_probe = 0;
    b->probe_seconds += now_s() - t0;
}

static void push_itl(bench *b, double v) {
    if (b->nitl == b->capitl) {
        b->capitl = b->capitl ? 2 * b->capitl : 65536;
        b->itl = realloc(b->itl, b->capitl * sizeof *b->itl);
        if (!b->itl) die("out of memory");
    }
    b->itl[b->nitl++] = v;
}

/* The request's computed_tokens (qw_request_stats; *st filled), or -1 where
 * the library lacks qw_request_get_stats or that field. */
static int64_t computed_tokens_stats(const breq *q, qw_request_stats *st) {
    memset(st, 0, sizeof *st);
    if (!qw_request_get_stats || qw_request_get_stats(q->r, st, sizeof *st) != QW_OK) return -1;
    if (st->size < offsetof(qw_request_stats, computed_tokens) + sizeof st->computed_tokens) return -1;
    return (int64_t)st->computed_tokens;
}

static int64_t computed_tokens(const breq *q) {
    qw_request_stats st;
    return computed_tokens_stats(q, &st);
}

/* Submit what is due, step, account; until every request is done. */
static void run_loop(bench *b) {
    qw_event ev[512];
    int done = 0, inflight = 0;
    int conc = b->a.concurrency;
    b->t_start = now_s();
    for (int i = 0; i < b->nreq; i++) b->reqs[i].arrival += b->t_start;
    while (done < b->nreq) {
        double t = now_s();
        for (int i = 0; i < b->nreq; i++) {
            breq *q = &b->reqs[i];
            if (q->submitted || q->arrival > t) continue;
            if (conc > 0 && inflight >= conc) break;
            q->r = make_request(b, q);
            if (b->sessions && b->sessions[q->conv] && qw_request_set_session)
                qw_request_set_session(q->r, b->sessions[q->conv]);
            qw_status s = qw_engine_submit(b->e, q->r);
            if (s != QW_OK) die("submit of request %d (%d prompt tokens): %s", i, q->plen, qw_last_error());
            q->submitted = 1;
            q->submit_t = now_s();
            q->computed = computed_tokens(q);
            inflight++;
        }
        if (!qw_engine_has_work(b->e)) {
            double next = INFINITY;
            for (int i = 0; i < b->nreq; i++)
                if (!b->reqs[i].submitted && b->reqs[i].arrival < next) next = b->reqs[i].arrival;
            if (!isfinite(next)) die("nothing to run but %d requests are not done", b->nreq - done);
            double wait = next - now_s();
            if (wait > 0) {
                struct timespec ts = { (time_t)wait, (long)((wait - floor(wait)) * 1e9) };
                nanosleep(&ts, NULL);
            }
            continue;
        }
        /* what this step may read: every in-flight context; whether any
         * prefill can run: a request still without its first token */
        step_rec rec = { .prompt_tokens = -1, .decode_only = 1, .prefill_only = 1 };
        for (int i = 0; i < b->nreq; i++) {
            breq *q = &b->reqs[i];
            if (!q->submitted || q->done) continue;
            if (q->ntok == 0) rec.decode_only = 0;
            else rec.prefill_only = 0;
            rec.ctx_tokens += q->plen + q->ntok;
        }
        /* --probe-every: a stretch of decode steps starts with a probe */
        if (b->a.probe_every > 0 && rec.decode_only && b->since_probe == 0) take_paired_probe(b);
        qw_engine_stats sa, sb;
        int hs = get_engine_stats(b->e, &sa);
        size_t n = 0;
        double t0 = now_s();
        qw_status s = qw_engine_step(b->e, ev, sizeof ev / sizeof ev[0], sizeof ev[0], &n);
        double t1 = now_s();
        if (s != QW_OK) die("step: %s", qw_last_error());
        if (hs && get_engine_stats(b->e, &sb)) rec.prompt_tokens = (int64_t)(sb.prompt_tokens - sa.prompt_tokens);
        rec.dt = t1 - t0;
        int64_t first_prompt = 0;
        /* A prefill step's FLOPs: the chunk [before, after) of each prompt
         * that advanced in it (the cached prefix's positions are not
         * computed), from the requests' computed_tokens. A step counts as
         * prefill only while no request is past its prompt (one that was
         * preempted and is being recomputed produces no token, but its
         * step is not a prompt's). chunks_known = 0: a library without
         * computed_tokens. */
        double chunk_flops = 0, chunk_tokens = 0;
        int chunks_known = 1;
        for (int i = 0; i < b->nreq && chunks_known; i++) {
            breq *q = &b->reqs[i];
            if (!q->submitted || q->done || q->ntok != 0) continue;
            qw_request_stats st;
            int64_t after = computed_tokens_stats(q, &st);
            const int64_t before = q->computed;
            q->computed = after;   /* the next step's "before": it changes only in a step */
            if (before < 0 || after < 0) {
                chunks_known = 0;
                break;
            }
            int64_t start = after < before ? 0 : before;   /* preempted: from 0 */
            if (start < (int64_t)st.cached_prompt_tokens) start = (int64_t)st.cached_prompt_tokens;
            if (after > q->plen) after = q->plen;
            if (after <= start) continue;
            /* the prompt's last position is computed in the step that
             * samples the first token: the logits of one row */
            chunk_flops += prefill_flops(&b->mi, (double)start, (double)after, after == q->plen);
            chunk_tokens += (double)(after - start);
        }
        for (size_t k = 0; k < n; k++) {
            breq *q = ev[k].user_data;
            if (!q) continue;
            if (ev[k].kind == QW_EVENT_TOKEN) {
                if (q->ntok == 0) {
                    q->first_t = t1;
                    rec.firsts++;
                    first_prompt += q->plen;
                    rec.flops += prefill_flops(&b->mi, 0, q->plen, 1);
                } else {
                    push_itl(b, t1 - q->last_t);
                    rec.decoded++;
                }
                q->ntok++;
                q->last_t = t1;
            }
            if (ev[k].finish_reason != QW_FINISH_NONE || ev[k].kind == QW_EVENT_FINISHED) {
                q->done = 1;
                q->finish_t = t1;
                if (ev[k].finish_reason != QW_FINISH_LENGTH && ev[k].finish_reason != QW_FINISH_STOP)
                    fprintf(stderr, "qw-bench: request %d finished with reason %u\n",
                            (int)(q - b->reqs), ev[k].finish_reason);
                if (qw_request_get_stats && qw_request_get_stats(q->r, &q->st, sizeof q->st) == QW_OK)
                    q->have_st = 1;
                if (!strcmp(b->a.scenario, "chat")) chat_next_turn(b, q, t1);
                done++;
                inflight--;
            }
        }
        /* Without engine stats the prompt tokens of a step are known when
         * its prefills completed in it (each prompt within one step). */
        if (chunks_known) {   /* every prompt's chunk: chunked prompts' steps count too */
            rec.flops = rec.prefill_only && rec.decoded == 0 ? chunk_flops : 0;
            rec.prompt_tokens = (int64_t)chunk_tokens;
        } else {
            /* without computed_tokens: only steps in which whole prompts ran
             * (their first token came), each counted as computed in it */
            if (rec.prompt_tokens < 0 && rec.decoded == 0 && rec.firsts > 0) rec.prompt_tokens = first_prompt;
            if (rec.decoded > 0 || rec.firsts == 0) rec.flops = 0;   /* only clean prefill steps */
        }
        record_step(b, rec);
        if (b->a.probe_every > 0 && rec.decode_only && ++b->since_probe == b->a.probe_every) b->since_probe = 0;
        progress_bar(b, done, t1);
    }
    /* the last stretch's closing probe */
    if (b->a.probe_every > 0 && b->nprobes > 0 && b->probes[b->nprobes - 1].step < b->nsteps) take_paired_probe(b);
    b->t_end = now_s();
}

/* ---- workloads ---------------------------------------------------------------- */

static void build_requests(bench *b, int with_long) {
    const args *a = &b->a;
    int32_t maxlen = qw_engine_max_model_len(b->e);
    int n = a->num_requests;
    int chat = !strcmp(a->scenario, "chat");
    int shared = !strcmp(a->scenario, "shared-prefix");
    b->nreq = chat ? n * a->turns : n + (with_long ? 1 : 0);
    b->reqs = xcalloc((size_t)b->nreq, sizeof *b->reqs);
    int32_t *prefix = NULL;
    if (shared) {
        prefix = xcalloc((size_t)a->prefix_len, sizeof(int32_t));
        fill_prompt(prefix, a->prefix_len, b->vocab);
    }
    double t = 0;
    for (int i = 0; i < b->nreq; i++) {
        breq *q = &b->reqs[i];
        int32_t olen = draw_len(a->len_dist, a->output_len, maxlen / 2);
        int32_t plen = draw_len(a->len_dist, a->input_len, maxlen - olen - (shared ? a->prefix_len : 0));
        if (with_long && i == b->nreq - 1) {
            q->is_long = 1;
            olen = 1;
            plen = a->long_len < maxlen - 1 ? a->long_len : maxlen - 1;
        }
        q->olen = olen;
        q->plen = plen + (shared ? a->prefix_len : 0);
        q->prompt = xcalloc((size_t)q->plen, sizeof(int32_t));
        if (shared) memcpy(q->prompt, prefix, (size_t)a->prefix_len * sizeof(int32_t));
        fill_prompt(q->prompt + (shared ? a->prefix_len : 0), plen, b->vocab);
        if (chat) {
            q->conv = i / a->turns;
            q->turn = i % a->turns;
            q->arrival = q->turn == 0 ? 0 : INFINITY;
        } else if (q->is_long) {
            q->arrival = 0;                          /* the long prompt starts first */
        } else if (a->rate > 0 && strcmp(a->mode, "offline")) {
            t += -log(1.0 - rnd01()) / a->rate;      /* Poisson arrivals */
            q->arrival = t;
        } else {
            q->arrival = 0;
        }
    }
    if (with_long) {   /* submit the long one first: move it to the front */
        breq l = b->reqs[b->nreq - 1];
        memmove(b->reqs + 1, b->reqs, (size_t)(b->nreq - 1) * sizeof *b->reqs);
        b->reqs[0] = l;
    }
    free(prefix);
    if (chat) {
        b->nconv = n;
        b->session_api = qw_session_create != NULL;
        b->sessions = xcalloc((size_t)n, sizeof *b->sessions);
        for (int c = 0; c < n && b->session_api; c++)
            if (qw_session_create(b->e, &b->sessions[c]) != QW_OK) {
                fprintf(stderr, "qw-bench: sessions unavailable (%s): resending history each turn\n",
                        qw_last_error());
                b->session_api = 0;
            }
        if (!b->session_api) {
            for (int c = 0; c < n; c++)
                if (b->sessions[c] && qw_session_destroy) qw_session_destroy(b->sessions[c]);
            free(b->sessions);
            b->sessions = NULL;
        }
    }
}

static void free_requests(bench *b) {
    for (int i = 0; i < b->nreq; i++) {
        if (b->reqs[i].r) qw_request_release(b->reqs[i].r);
        free(b->reqs[i].prompt);
    }
    if (b->sessions) {
        for (int c = 0; c < b->nconv; c++)
            if (b->sessions[c]) qw_session_destroy(b->sessions[c]);
        free(b->sessions);
        b->sessions = NULL;
    }
    free(b->reqs);
    b->reqs = NULL;
    b->nreq = 0;
    b->nsteps = 0;
    b->nitl = 0;
    b->nprobes = 0;
    b->since_probe = 0;
    b->probe_seconds = 0;
}

/* ---- results -------------------------------------------------------------------- */

typedef struct results {
    double duration, req_s, prompt_tok_s, out_tok_s;
    dist ttft, tpot, itl, e2e, ttft_short;
    double dec_steps, dec_time, dec_tokens, dec_batch, dec_bytes_s, dec_step_ms;
    double pre_steps, pre_time, pre_flops, pre_tokens;
    double host_frac, mean_batch, kv_used, hit_rate, preemptions;
    int have_stats;
    /* --probe-every: stretches of decode steps between two probes, each
     * stretch's decode bytes/s over the mean of its two probes */
    int pp_stretches;
    double pp_med, pp_min, pp_max;   /* of those ratios                  */
    double pp_bw_med;                /* median probe, bytes/s            */
    double pp_seconds;               /* wall time in probes              */
} results;

/* The stretch of decode steps between --probe-every probes k and k + 1:
 * its decode bytes/s (counted as compute counts them) over the mean of the
 * two probes; NAN where it holds no decode step. */
static double stretch_fraction(const bench *b, size_t k) {
    double bytes = 0, time = 0;
    for (size_t s = b->probes[k].step; s < b->probes[k + 1].step; s++) {
        const step_rec *st = &b->steps[s];
        if (!st->decode_only || st->decoded <= 0) continue;
        time += st->dt;
        bytes += b->mi.stream_bytes + st->ctx_tokens * b->mi.kv_bytes_per_token;
    }
    if (time <= 0) return NAN;
    return bytes / time / (0.5 * (b->probes[k].read_bw + b->probes[k + 1].read_bw));
}

/* Fills r's pp_* fields from the run's --probe-every probes (pp_stretches
 * 0: no stretch between two probes). */
static void paired_probe_results(const bench *b, results *r) {
    r->pp_stretches = 0;
    r->pp_med = r->pp_min = r->pp_max = r->pp_bw_med = NAN;
    r->pp_seconds = b->probe_seconds;
    if (b->nprobes < 2) return;
    double *ratio = xcalloc(b->nprobes, sizeof *ratio), *bw = xcalloc(b->nprobes, sizeof *bw);
    size_t n = 0;
    for (size_t k = 0; k + 1 < b->nprobes; k++) {
        double f = stretch_fraction(b, k);
        if (!isnan(f)) ratio[n++] = f;
    }
    for (size_t k = 0; k < b->nprobes; k++) bw[k] = b->probes[k].read_bw;
    if (n > 0) {
        dist d = summarize(ratio, n);   /* sorts: the ends are min and max */
        r->pp_stretches = (int)n;
        r->pp_med = d.p50;
        r->pp_min = ratio[0];
        r->pp_max = ratio[n - 1];
        r->pp_bw_med = summarize(bw, b->nprobes).p50;
    }
    free(ratio);
    free(bw);
}

static results compute(bench *b) {
    results r;
    memset(&r, 0, sizeof r);
    int n = b->nreq;
    double *v = xcalloc((size_t)n, sizeof(double));
    double ptoks = 0, otoks = 0;
    for (int i = 0; i < n; i++) ptoks += b->reqs[i].plen, otoks += b->reqs[i].ntok;
    r.duration = b->t_end - b->t_start;
    r.req_s = n / r.duration;
    r.prompt_tok_s = ptoks / r.duration;
    r.out_tok_s = otoks / r.duration;
    int k = 0;
    for (int i = 0; i < n; i++) v[k++] = b->reqs[i].first_t - b->reqs[i].submit_t;
    r.ttft = summarize(v, (size_t)k);
    k = 0;
    for (int i = 0; i < n; i++)
        if (!b->reqs[i].is_long) v[k++] = b->reqs[i].first_t - b->reqs[i].submit_t;
    r.ttft_short = summarize(v, (size_t)k);
    k = 0;
    for (int i = 0; i < n; i++)
        if (b->reqs[i].ntok > 1)
            v[k++] = (b->reqs[i].finish_t - b->reqs[i].first_t) / (b->reqs[i].ntok - 1);
    r.tpot = summarize(v, (size_t)k);
    k = 0;
    for (int i = 0; i < n; i++) v[k++] = b->reqs[i].finish_t - b->reqs[i].submit_t;
    r.e2e = summarize(v, (size_t)k);
    r.itl = summarize(b->itl, b->nitl);
    free(v);
    double bytes = 0;
    for (size_t s = 0; s < b->nsteps; s++) {
        const step_rec *st = &b->steps[s];
        if (st->decode_only && st->decoded > 0) {
            r.dec_steps++;
            r.dec_time += st->dt;
            r.dec_tokens += st->decoded;
            bytes += b->mi.stream_bytes + st->ctx_tokens * b->mi.kv_bytes_per_token;
        } else if (st->flops > 0) {
            r.pre_steps++;
            r.pre_time += st->dt;
            r.pre_flops += st->flops;
            r.pre_tokens += st->prompt_tokens > 0 ? (double)st->prompt_tokens : 0;
        }
    }
    r.dec_batch = r.dec_steps ? r.dec_tokens / r.dec_steps : 0;
    r.dec_bytes_s = r.dec_time > 0 ? bytes / r.dec_time : 0;
    r.dec_step_ms = r.dec_steps ? 1e3 * r.dec_time / r.dec_steps : 0;
    paired_probe_results(b, &r);
    r.host_frac = r.mean_batch = r.kv_used = r.hit_rate = r.preemptions = NAN;
    if (b->have_stats && get_engine_stats(b->e, &b->st1)) {
        const qw_engine_stats *a0 = &b->st0, *a1 = &b->st1;
        double host = a1->host_seconds - a0->host_seconds, fwd = a1->forward_seconds - a0->forward_seconds;
        r.host_frac = host + fwd > 0 ? host / (host + fwd) : NAN;
        r.mean_batch = a1->mean_batch_size;
        r.kv_used = a1->kv_blocks_total ? (double)a1->kv_blocks_used / (double)a1->kv_blocks_total : NAN;
        double qn = (double)(a1->prefix_cache_queries - a0->prefix_cache_queries);
        r.hit_rate = qn > 0 ? (double)(a1->prefix_cache_hits - a0->prefix_cache_hits) / qn : NAN;
        r.preemptions = (double)(a1->num_preemptions - a0->num_preemptions);
        r.have_stats = 1;
    }
    return r;
}

static void fmt_num(char *buf, size_t n, double v, const char *f) {
    if (isnan(v)) snprintf(buf, n, "n/a");
    else snprintf(buf, n, f, v);
}

static void print_dist_text(const char *name, dist d, double scale) {
    if (d.n == 0) {
        printf("  %-22s n/a\n", name);
        return;
    }
    printf("  %-22s mean %9.2f  p50 %9.2f  p90 %9.2f  p99 %9.2f  (n=%zu)\n", name, d.mean * scale,
           d.p50 * scale, d.p90 * scale, d.p99 * scale, d.n);
}

static void print_dist_json(const char *name, dist d, int last) {
    if (d.n == 0) printf("    \"%s\": null%s\n", name, last ? "" : ",");
    else
        printf("    \"%s\": {\"mean\": %.6g, \"p50\": %.6g, \"p90\": %.6g, \"p99\": %.6g, \"n\": %zu}%s\n",
               name, d.mean, d.p50, d.p90, d.p99, d.n, last ? "" : ",");
}

static void jnum(const char *name, double v, int last) {
    if (isnan(v) || isinf(v)) printf("    \"%s\": null%s\n", name, last ? "" : ",");
    else printf("    \"%s\": %.6g%s\n", name, v, last ? "" : ",");
}

typedef struct limits {
    double read_bw, copy_bw, gemm;
    double read_bw_before;       /* the probe before the runs                      */
    double read_bw_after;        /* the latest probe after a run; 0: none yet      */
    const char *kernels;
    int measured;
    int panel;                   /* the backend's weight layout: LAYOUT_ROWS/PANEL/PAIR */
    cpu_feats cpu;
    double bf16_1, bf16_n;       /* vdpbf16ps peak FLOP/s, 1 thread and all; NAN: absent */
    double fma_1, fma_n;         /* f32 FMA peak FLOP/s of the table's vector width: zmm
                                    for the AVX-512 tables, else ymm; NAN: absent       */
    int bf16_dot;                /* the matmuls run on vdpbf16ps: avx512bf16, fast mode */
    double amx_1, amx_n;         /* AMX tile peak FLOP/s, 1 thread and all; NAN: not run */
    int amx_tiles;               /* the bf16 matmuls run on AMX: the amx table, fast mode */
    const char *fma_isa;
} limits;

/* The compute limit prefill and batched decode are judged against: the
 * AMX tile peak where the bf16 matmuls run on tiles (the amx table in
 * fast numerics), the bf16 dot-product peak where they run on vdpbf16ps
 * (the avx512bf16 table), else the f32 FMA peak of the table's vector
 * width, so a forced avx2 table reads as on an AVX2-only machine. */
static double compute_peak(const limits *L, const char **name) {
    if (L->amx_tiles && !isnan(L->amx_n) && L->amx_n > 0) { *name = "AMX tile peak"; return L->amx_n; }
    if (L->bf16_dot && !isnan(L->bf16_n) && L->bf16_n > 0) { *name = "bf16 dot peak"; return L->bf16_n; }
    *name = "FMA peak";
    return L->fma_n;
}

/* Probe the read bandwidth again after a run and keep the larger as the
 * limit: a VM that shares its memory swings between bandwidth phases
 * within seconds, so a probe before the run alone can land in a slower
 * phase than the run (decode then read more than 100% of it). */
static void reprobe_bandwidth(limits *L, int threads) {
    L->read_bw_after = measure_bandwidth(threads, 0, 5);
    if (L->read_bw_after > L->read_bw) L->read_bw = L->read_bw_after;
}

/* peak_hwm: VmHWM as the runs so far left it (before any re-probe). */
static void report(bench *b, const char *label, const results *r, const limits *L,
                   double peak_hwm, int first, int last) {
    double bwf = L->measured && L->read_bw > 0 ? r->dec_bytes_s / L->read_bw : NAN;
    double pfs = r->pre_time > 0 ? r->pre_flops / r->pre_time : NAN;
    double pff = L->measured && L->gemm > 0 ? pfs / L->gemm : NAN;
    const char *peak_name = "compute peak";
    double cpk = L->measured ? compute_peak(L, &peak_name) : NAN;
    double pfc = cpk > 0 ? pfs / cpk : NAN;
    double ptk = r->pre_time > 0 ? r->pre_tokens / r->pre_time : NAN;
    /* decode FLOPs: every token multiplies every matmul weight and the head */
    double dfs = r->dec_time > 0 ? r->dec_tokens * 2.0 * (b->mi.params_per_token +
                 (double)b->mi.hidden * (double)b->mi.vocab) / r->dec_time : NAN;
    double dfc = cpk > 0 ? dfs / cpk : NAN;
    /* the engine's peak so far: load, warm-up and every run up to this one */
    double peak_rss = peak_hwm - b->rss_base;
    if (b->a.json) {
        if (first) printf("  \"runs\": [\n");
        printf("   {\"label\": \"%s\",\n", label);
        jnum("duration_s", r->duration, 0);
        jnum("requests", b->nreq, 0);
        jnum("requests_per_s", r->req_s, 0);
        jnum("prompt_tokens_per_s", r->prompt_tok_s, 0);
        jnum("output_tokens_per_s", r->out_tok_s, 0);
        print_dist_json("ttft_s", r->ttft, 0);
        print_dist_json("ttft_short_s", r->ttft_short, 0);
        print_dist_json("tpot_s", r->tpot, 0);
        print_dist_json("itl_s", r->itl, 0);
        print_dist_json("e2e_s", r->e2e, 0);
        jnum("decode_steps", r->dec_steps, 0);
        jnum("decode_step_ms", r->dec_step_ms, 0);
        jnum("decode_mean_batch", r->dec_batch, 0);
        jnum("decode_tokens_per_s", r->dec_time > 0 ? r->dec_tokens / r->dec_time : NAN, 0);
        jnum("decode_bytes_per_s", r->dec_bytes_s, 0);
        jnum("decode_fraction_of_bandwidth", bwf, 0);
        jnum("read_bandwidth_after_run_bytes_per_s", L->measured ? L->read_bw_after : NAN, 0);
        jnum("read_bandwidth_limit_bytes_per_s", L->measured ? L->read_bw : NAN, 0);
        if (b->a.probe_every > 0) {
            jnum("paired_probe_stretches", r->pp_stretches, 0);
            jnum("decode_fraction_of_paired_probes", r->pp_med, 0);
            jnum("decode_fraction_of_paired_probes_min", r->pp_min, 0);
            jnum("decode_fraction_of_paired_probes_max", r->pp_max, 0);
            jnum("paired_probe_read_bandwidth_median_bytes_per_s", r->pp_bw_med, 0);
            jnum("paired_probe_seconds", r->pp_seconds, 0);
            /* in run order: every probe, and every stretch's fraction */
            printf("    \"paired_probe_read_bytes_per_s\": [");
            for (size_t k = 0; k < b->nprobes; k++) printf("%s%.6g", k ? ", " : "", b->probes[k].read_bw);
            printf("],\n    \"paired_probe_stretch_fractions\": [");
            for (size_t k = 0; k + 1 < b->nprobes; k++) {
                double f = stretch_fraction(b, k);
                if (isnan(f)) printf("%snull", k ? ", " : "");
                else printf("%s%.6g", k ? ", " : "", f);
            }
            printf("],\n");
        }
        jnum("prefill_steps", r->pre_steps, 0);
        jnum("decode_flops_per_s", dfs, 0);
        jnum("decode_fraction_of_compute_peak", dfc, 0);
        jnum("prefill_tokens_per_s", ptk, 0);
        jnum("prefill_flops_per_s", pfs, 0);
        jnum("prefill_fraction_of_peak", pff, 0);
        jnum("prefill_fraction_of_compute_peak", pfc, 0);
        jnum("host_fraction", r->host_frac, 0);
        jnum("mean_batch_size", r->mean_batch, 0);
        jnum("kv_usage", r->kv_used, 0);
        jnum("prefix_cache_hit_rate", r->hit_rate, 0);
        jnum("peak_rss_bytes", peak_rss, 0);
        jnum("preemptions", r->preemptions, 1);
        printf("   }%s\n", last ? "" : ",");
        if (last) printf("  ]\n}\n");
        return;
    }
    char s1[32], s2[32], s3[32], s4[32], s5[32];
    printf("\n== %s: %d requests in %.2f s\n", label, b->nreq, r->duration);
    printf("  throughput             %.3f req/s, prompt %.1f tok/s, output %.1f tok/s\n", r->req_s,
           r->prompt_tok_s, r->out_tok_s);
    print_dist_text("TTFT (ms)", r->ttft, 1e3);
    if (r->ttft_short.n != r->ttft.n) print_dist_text("TTFT short only (ms)", r->ttft_short, 1e3);
    print_dist_text("TPOT (ms)", r->tpot, 1e3);
    print_dist_text("ITL (ms)", r->itl, 1e3);
    print_dist_text("E2E latency (s)", r->e2e, 1.0);
    if (L->measured)
        printf("  read bandwidth         %.2f GB/s before the runs, %.2f after this one: the "
               "limit is the larger so far, %.2f GB/s\n", L->read_bw_before / 1e9,
               L->read_bw_after / 1e9, L->read_bw / 1e9);
    if (r->dec_steps > 0) {
        fmt_num(s1, sizeof s1, bwf * 100, "%.1f%%");
        fmt_num(s2, sizeof s2, dfc * 100, "%.1f%%");
        printf("  decode                 %.0f steps, mean batch %.1f, %.2f ms/step, %.1f tok/s, "
               "%.2f GB/s read = %s of bandwidth, %.1f GFLOP/s = %s of %s\n",
               r->dec_steps, r->dec_batch, r->dec_step_ms, r->dec_tokens / r->dec_time,
               r->dec_bytes_s / 1e9, s1, dfs / 1e9, s2, peak_name);
    }
    if (b->a.probe_every > 0) {
        if (r->pp_stretches > 0)
            printf("  decode vs paired probes %d stretches of up to %d decode steps: median %.1f%% (%.1f-%.1f%%) of "
                   "the mean of the read probes on either side (median probe %.2f GB/s, %d x %zu MiB passes); "
                   "%.2f s of probes, outside the step times, inside the latencies\n",
                   r->pp_stretches, b->a.probe_every, r->pp_med * 100, r->pp_min * 100, r->pp_max * 100,
                   r->pp_bw_med / 1e9, PAIRED_PROBE_PASSES, PAIRED_PROBE_BYTES >> 20, r->pp_seconds);
        else
            printf("  decode vs paired probes no stretch of decode steps between two probes\n");
    }
    if (r->pre_steps > 0) {
        fmt_num(s1, sizeof s1, pff * 100, "%.1f%%");
        fmt_num(s2, sizeof s2, pfc * 100, "%.1f%%");
        fmt_num(s3, sizeof s3, ptk, "%.1f");
        printf("  prefill                %.0f clean steps, %s tok/s, %.1f GFLOP/s = %s of peak GEMM, "
               "%s of %s\n", r->pre_steps, s3, pfs / 1e9, s1, s2, peak_name);
    }
    fmt_num(s1, sizeof s1, r->host_frac * 100, "%.2f%%");
    fmt_num(s2, sizeof s2, r->mean_batch, "%.1f");
    fmt_num(s3, sizeof s3, r->kv_used * 100, "%.1f%%");
    fmt_num(s4, sizeof s4, r->hit_rate * 100, "%.1f%%");
    fmt_num(s5, sizeof s5, r->preemptions, "%.0f");
    printf("  engine stats           host side %s of step time, mean batch %s, KV used %s, "
           "prefix-cache hits %s, preemptions %s\n", s1, s2, s3, s4, s5);
    printf("  memory                 peak RSS so far %.2f GB (%.2fx the weights)\n", peak_rss / 1e9,
           peak_rss / b->mi.weight_bytes);
}

/* ---- engine options ------------------------------------------------------------ */

/* The engine options both benchmark forms use, from the command line;
 * dies with the library's message on a refused value. Owned by the caller
 * (qw_engine_options_destroy). */
static qw_engine_options *engine_options(const args *a) {
    qw_engine_options *o;
    if (qw_engine_options_create(&o) != QW_OK) die("options: %s", qw_last_error());
    qw_status s = qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, a->model);
    if (s == QW_OK) s = qw_engine_options_set_string(o, QW_OPT_DEVICE, a->device);
    if (s == QW_OK) s = qw_engine_options_set_int(o, QW_OPT_NUM_THREADS, a->threads);
    if (s == QW_OK) s = qw_engine_options_set_int(o, QW_OPT_MAX_NUM_SEQS, a->max_num_seqs);
    if (s == QW_OK) s = qw_engine_options_set_int(o, QW_OPT_MAX_NUM_BATCHED_TOKENS, a->max_batched);
    if (s == QW_OK && a->kv_blocks > 0) s = qw_engine_options_set_int(o, QW_OPT_NUM_KV_BLOCKS, a->kv_blocks);
    if (s == QW_OK) s = qw_engine_options_set_int(o, QW_OPT_SEED, (int64_t)a->seed);
    if (s == QW_OK && a->numerics)
        s = qw_engine_options_set_int(o, QW_OPT_NUMERICS,
                                      !strcmp(a->numerics, "exact")       ? QW_NUMERICS_EXACT
                                      : !strcmp(a->numerics, "fast-int8") ? QW_NUMERICS_FAST_INT8
                                                                          : QW_NUMERICS_FAST);
    if (s == QW_OK && a->kv_dtype)
        s = qw_engine_options_set_int(o, QW_OPT_KV_CACHE_DTYPE, kv_dtype_value(a->kv_dtype));
    if (s != QW_OK) die("options: %s", qw_last_error());
    return o;
}

/* ---- Poisson serving mode (--request-rate, --fixed-schedule) ------------------ *
 *
 * The workload an HTTP serving benchmark sends to qw-serve (tools/serve-bench.sh),
 * run in-process, so that the difference between the two is what the HTTP
 * layer costs. Two threads, as in the server:
 *   - a submitter thread sleeps until each request's arrival time (seeded
 *     Poisson arrivals: exponential gaps of mean 1/R; all at 0 for inf; or
 *     the "timestamp" of each JSONL line, the field aiperf's fixed schedule
 *     replays, so that both benchmarks send at the very same times),
 *     notes the release time and calls qw_engine_submit;
 *   - the engine thread blocks in qw_engine_wait while idle and otherwise
 *     steps, stamping each token event with the time the step returned.
 * A request's clock starts at its release, as an HTTP client's starts when it
 * sends. A streaming client sees text, not tokens: a token whose text piece
 * is empty (a special token, or bytes held back until a character or a stop
 * string is complete) sends it nothing it counts (aiperf's "content
 * responses" are the chunks with non-empty text). So, as the client measures:
 * TTFT = first token event with a non-empty text piece - release (the first
 * token event itself is reported too); ITL = (last token - that first text)
 * / (tokens - 1) per request, aiperf's definition (tokens as the server counts
 * them); the gaps between consecutive non-empty pieces (aiperf's inter-chunk
 * latency, vLLM's ITL); E2E = last token - release. Throughput is over the
 * span from the first release to the last token, as aiperf's benchmark
 * duration. Percentiles interpolate linearly between ranks (numpy's default,
 * which the clients use).
 *
 * Prompts are real text: line i of the file (cyclically) encoded with the
 * model's tokenizer, cut to --input-len tokens or padded with the tokens of
 * the lines after it. Outputs are --output-len tokens with ignore_eos, so both
 * runs generate the same number of tokens. */

typedef struct sreq {
    qw_request *r;
    int32_t *ids;
    double offset;               /* arrival, seconds after the start               */
    double release_t;            /* written by the submitter before its submit     */
    double first_t, last_t;      /* written by the engine thread: token events      */
    double text_t, last_text_t;  /* the first and latest event with non-empty text  */
    int32_t ntok;
    int done, submit_failed;
} sreq;

typedef struct srun {
    qw_engine *e;
    sreq *reqs;
    int n;
    double t0;
    atomic_int failed;           /* submits refused: those requests never finish   */
    char err[512];               /* the first refusal's message                     */
} srun;

/* v (capacity *cap elements of size sz) grown to hold need: the array to
 * use from now on (dies when memory runs out). */
static void *grow(void *v, size_t *cap, size_t need, size_t sz) {
    if (need <= *cap) return v;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *p = realloc(v, c * sz);
    if (!p) die("out of memory");
    *cap = c;
    return p;
}

/* The prompt texts of path: one per non-empty line; a line that starts with
 * '{' is JSON and gives its "text" (aiperf's single_turn format) or "prompt"
 * member, and its "timestamp" (milliseconds, a number; NAN when absent or a
 * plain line) into *ts_out. Dies naming the line on malformed input. Returns
 * the count; the strings, their line numbers (*lines_out), the timestamps and
 * the arrays are the caller's. */
static size_t read_prompts(const char *path, char ***out, long **lines_out, double **ts_out) {
    FILE *f = fopen(path, "r");
    if (!f) die("%s: %s", path, strerror(errno));
    char **v = NULL, *line = NULL;
    long *lines = NULL;
    double *ts = NULL;
    size_t n = 0, cap = 0, lcap = 0, lncap = 0, tscap = 0;
    ssize_t len;
    long lineno = 0;
    while ((len = getline(&line, &lcap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (len == 0) continue;
        char *text;
        double stamp = NAN;
        if (line[0] == '{') {
            json_error_t jerr;
            json_t *o = json_loadb(line, (size_t)len, 0, &jerr);
            if (!o) die("%s:%ld: not JSON: %s", path, lineno, jerr.text);
            json_t *t = json_object_get(o, "text");
            if (!json_is_string(t)) t = json_object_get(o, "prompt");
            if (!json_is_string(t)) die("%s:%ld: a JSON line needs a string \"text\" or \"prompt\"", path, lineno);
            json_t *jt = json_object_get(o, "timestamp");
            if (jt && !(json_is_number(jt) && json_number_value(jt) >= 0))
                die("%s:%ld: \"timestamp\" must be a number of milliseconds >= 0", path, lineno);
            if (jt) stamp = json_number_value(jt);
            text = strdup(json_string_value(t));
            json_decref(o);
        } else {
            text = strdup(line);
        }
        if (!text) die("out of memory");
        v = grow(v, &cap, n + 1, sizeof *v);
        lines = grow(lines, &lncap, n + 1, sizeof *lines);
        ts = grow(ts, &tscap, n + 1, sizeof *ts);
        lines[n] = lineno;
        ts[n] = stamp;
        v[n++] = text;
    }
    if (ferror(f)) die("%s: read error", path);
    free(line);
    fclose(f);
    if (n == 0) die("%s: no prompts (every line is empty)", path);
    *out = v;
    *lines_out = lines;
    *ts_out = ts;
    return n;
}

/* The token ids of each text with the engine's tokenizer (special tokens
 * parsed, as a text prompt of the server is). Dies naming the line of a text
 * the tokenizer refuses (invalid UTF-8). */
static int32_t **encode_prompts(qw_engine *e, const char *path, char **texts, const long *lines, size_t n,
                                size_t **lens) {
    const qw_tokenizer *tok = qw_engine_get_tokenizer(e);
    if (!tok) die("%s: the model has no tokenizer, so text prompts cannot be encoded", path);
    int32_t **ids = xcalloc(n, sizeof *ids);
    *lens = xcalloc(n, sizeof **lens);
    for (size_t i = 0; i < n; i++) {
        size_t need = 0, len = strlen(texts[i]);
        if (qw_tokenizer_encode(tok, texts[i], len, 1, NULL, 0, &need) != QW_OK)
            die("%s:%ld: %s", path, lines[i], qw_last_error());
        ids[i] = xcalloc(need, sizeof(int32_t));
        if (qw_tokenizer_encode(tok, texts[i], len, 1, ids[i], need, &(*lens)[i]) != QW_OK)
            die("%s:%ld: %s", path, lines[i], qw_last_error());
    }
    return ids;
}

/* Percentile p (0..100) of sorted v[0..n), interpolated between ranks as
 * numpy.percentile does by default; NAN for n = 0. */
static double pct(const double *v, size_t n, double p) {
    if (n == 0) return NAN;
    double x = p / 100.0 * (double)(n - 1);
    size_t lo = (size_t)floor(x), hi = lo + 1 < n ? lo + 1 : lo;
    return v[lo] + (v[hi] - v[lo]) * (x - (double)lo);
}

typedef struct sdist {
    size_t n;
    double mean, p50, p90, p99;
} sdist;

/* Sorts v in place and summarises it, scaled by scale. */
static sdist sdist_of(double *v, size_t n, double scale) {
    sdist d = { n, NAN, NAN, NAN, NAN };
    if (n == 0) return d;
    qsort(v, n, sizeof *v, cmp_double);
    double s = 0;
    for (size_t i = 0; i < n; i++) s += v[i];
    d.mean = s / (double)n * scale;
    d.p50 = pct(v, n, 50) * scale;
    d.p90 = pct(v, n, 90) * scale;
    d.p99 = pct(v, n, 99) * scale;
    return d;
}

/* Submitter thread: release each request at t0 + offset. */
static void *submitter(void *p) {
    srun *s = p;
    for (int i = 0; i < s->n; i++) {
        sreq *q = &s->reqs[i];
        double at = s->t0 + q->offset;
        struct timespec ts = { (time_t)floor(at), (long)((at - floor(at)) * 1e9) };
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {}
        q->release_t = now_s();
        if (qw_engine_submit(s->e, q->r) != QW_OK) {
            q->submit_failed = 1;
            if (atomic_load(&s->failed) == 0)
                snprintf(s->err, sizeof s->err, "request %d: %s", i, qw_last_error());
            atomic_fetch_add(&s->failed, 1);
        }
    }
    return NULL;
}

/* Engine thread's loop: step while there is work, wait (bounded, to see
 * refused submits) while there is none, until every request finished or
 * was refused. Event times are when the step returned them. */
static void serve_loop(srun *s, double *gaps, size_t *ngaps) {
    qw_event ev[512];
    int done = 0;
    while (done + atomic_load(&s->failed) < s->n) {
        if (!qw_engine_wait(s->e, 50)) continue;
        while (qw_engine_has_work(s->e)) {
            size_t n = 0;
            if (qw_engine_step(s->e, ev, sizeof ev / sizeof ev[0], sizeof ev[0], &n) != QW_OK)
                die("step: %s", qw_last_error());
            double t = now_s();
            for (size_t k = 0; k < n; k++) {
                sreq *q = ev[k].user_data;
                if (!q) continue;
                if (ev[k].kind == QW_EVENT_TOKEN) {
                    if (q->ntok == 0) q->first_t = t;
                    q->ntok++;
                    q->last_t = t;
                    /* the piece the server would stream for this token */
                    const char *piece;
                    size_t plen = 0;
                    if (qw_request_get_text_piece(q->r, &piece, &plen) != QW_OK)
                        die("text piece: %s", qw_last_error());
                    if (plen > 0) {
                        if (q->text_t == 0) q->text_t = t;
                        else gaps[(*ngaps)++] = t - q->last_text_t;
                        q->last_text_t = t;
                    }
                }
                if (ev[k].finish_reason != QW_FINISH_NONE || ev[k].kind == QW_EVENT_FINISHED) {
                    if (ev[k].finish_reason != QW_FINISH_LENGTH)
                        die("request %d finished with reason %s, not after its %d tokens", (int)(q - s->reqs),
                            qw_finish_reason_string((qw_finish_reason)ev[k].finish_reason), q->ntok);
                    q->done = 1;
                    done++;
                }
            }
        }
    }
}

/* One request of the workload (ids are borrowed until it is released). */
static qw_request *serving_request(const args *a, const int32_t *ids, int32_t plen, int32_t olen,
                                   int64_t seed, void *user) {
    qw_request *r;
    if (qw_request_create(&r) != QW_OK) die("request: %s", qw_last_error());
    qw_status s = qw_request_set_prompt(r, ids, (size_t)plen);
    if (s == QW_OK) s = qw_request_set_int(r, QW_REQ_MAX_TOKENS, olen);
    if (s == QW_OK) s = qw_request_set_int(r, QW_REQ_IGNORE_EOS, 1);
    if (s == QW_OK) s = qw_request_set_double(r, QW_REQ_TEMPERATURE, a->temperature);
    if (s == QW_OK && a->top_p < 1.0) s = qw_request_set_double(r, QW_REQ_TOP_P, a->top_p);
    if (s == QW_OK) s = qw_request_set_int(r, QW_REQ_SEED, seed);
    if (s == QW_OK) s = qw_request_set_user_data(r, user);
    if (s != QW_OK) die("request options: %s", qw_last_error());
    return r;
}

static void sdist_text(const char *name, sdist d, const char *note) {
    if (d.n == 0) {
        printf("  %-24s n/a\n", name);
        return;
    }
    printf("  %-24s mean %9.2f  p50 %9.2f  p90 %9.2f  p99 %9.2f  (n=%zu)%s\n", name, d.mean, d.p50, d.p90,
           d.p99, d.n, note);
}

static json_t *jreal(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *sdist_json(sdist d) {
    json_t *o = json_object();
    json_object_set_new(o, "n", json_integer((json_int_t)d.n));
    json_object_set_new(o, "mean", jreal(d.mean));
    json_object_set_new(o, "p50", jreal(d.p50));
    json_object_set_new(o, "p90", jreal(d.p90));
    json_object_set_new(o, "p99", jreal(d.p99));
    return o;
}

/* The --request-rate form of the program: returns the exit status. */
static int serving_main(const args *a) {
    qw_engine_options *o = engine_options(a);
    qw_engine *e;
    double tl = now_s();
    if (qw_engine_create(o, &e) != QW_OK) die("engine: %s", qw_last_error());
    qw_engine_options_destroy(o);
    tl = now_s() - tl;
    const int32_t plen = a->input_len, olen = a->output_len, n = a->num_requests;
    int32_t maxlen = qw_engine_max_model_len(e);
    if ((int64_t)plen + olen > maxlen)
        die("--input-len %d + --output-len %d is more than the model's %d tokens", plen, olen, maxlen);

    char **texts;
    long *lines;
    double *stamps;
    size_t ntext = read_prompts(a->prompts, &texts, &lines, &stamps), *tlen;
    if (a->fixed_schedule) {
        /* the schedule is the file's: each request once, in order */
        if ((size_t)n > ntext)
            die("%s: --fixed-schedule replays each line once: %zu lines for %d prompts", a->prompts, ntext, n);
        for (int i = 0; i < n; i++) {
            if (isnan(stamps[i])) die("%s:%ld: no \"timestamp\" for --fixed-schedule", a->prompts, lines[i]);
            if (i > 0 && stamps[i] < stamps[i - 1])
                die("%s:%ld: timestamps must not decrease", a->prompts, lines[i]);
        }
    }
    int32_t **tids = encode_prompts(e, a->prompts, texts, lines, ntext, &tlen);
    size_t total = 0;
    for (size_t i = 0; i < ntext; i++) total += tlen[i];
    if (total == 0) die("%s: the prompts encode to no tokens", a->prompts);

    /* prompt i: line i mod ntext, cut to plen or padded with the next lines */
    sreq *reqs = xcalloc((size_t)n, sizeof *reqs);
    int truncated = 0, padded = 0;
    double t = 0;
    for (int i = 0; i < n; i++) {
        sreq *q = &reqs[i];
        q->ids = xcalloc((size_t)plen, sizeof(int32_t));
        size_t line = (size_t)i % ntext, got = 0;
        if (tlen[line] > (size_t)plen) truncated++;
        else if (tlen[line] < (size_t)plen) padded++;
        for (size_t l = line; got < (size_t)plen; l = (l + 1) % ntext) {
            size_t take = tlen[l] < (size_t)plen - got ? tlen[l] : (size_t)plen - got;
            memcpy(q->ids + got, tids[l], take * sizeof(int32_t));
            got += take;
        }
        if (a->fixed_schedule) t = stamps[i] / 1e3;
        else if (isfinite(a->request_rate)) t += -log(1.0 - rnd01()) / a->request_rate;
        q->offset = t;
        q->r = serving_request(a, q->ids, plen, olen, (int64_t)i + 1, q);
    }

    /* warm-up: fault the weights in, as the HTTP run's warm-up request does */
    {
        /* the tail of a prompt: a prefix of none, so no request finds it
         * in the prefix cache */
        int32_t wl = plen < 16 ? plen : 16;
        qw_request *w = serving_request(a, reqs[0].ids + (plen - wl), wl, olen < 4 ? olen : 4, 0, NULL);
        if (qw_engine_submit(e, w) != QW_OK) die("warm-up: %s", qw_last_error());
        qw_event ev[8];
        size_t ne;
        while (qw_engine_has_work(e))
            if (qw_engine_step(e, ev, 8, sizeof ev[0], &ne) != QW_OK) die("warm-up step: %s", qw_last_error());
        qw_request_release(w);
    }

    double *gaps = xcalloc((size_t)n * (size_t)olen, sizeof(double));
    size_t ngaps = 0;
    srun run = { .e = e, .reqs = reqs, .n = n, .t0 = now_s() + 0.001 };
    atomic_init(&run.failed, 0);
    pthread_t th;
    if (pthread_create(&th, NULL, submitter, &run) != 0) die("submitter thread: %s", strerror(errno));
    serve_loop(&run, gaps, &ngaps);
    pthread_join(th, NULL);
    int failed = atomic_load(&run.failed);
    if (failed) die("%d of %d submits refused; the first: %s", failed, n, run.err);

    double t_first = INFINITY, t_last = -INFINITY, otoks = 0;
    double *ttft = xcalloc((size_t)n, sizeof(double)), *ttft_tok = xcalloc((size_t)n, sizeof(double)),
           *itl = xcalloc((size_t)n, sizeof(double)), *e2e = xcalloc((size_t)n, sizeof(double));
    size_t nitl = 0, nttft = 0;
    for (int i = 0; i < n; i++) {
        const sreq *q = &reqs[i];
        if (q->release_t < t_first) t_first = q->release_t;
        if (q->last_t > t_last) t_last = q->last_t;
        otoks += q->ntok;
        ttft_tok[i] = q->first_t - q->release_t;
        e2e[i] = q->last_t - q->release_t;
        if (q->text_t == 0) continue;   /* no text at all: no TTFT, as for the client */
        ttft[nttft++] = q->text_t - q->release_t;
        if (q->ntok > 1) itl[nitl++] = (q->last_t - q->text_t) / (q->ntok - 1);
    }
    double dur = t_last - t_first;
    double req_s = n / dur, tok_s = otoks / dur;
    sdist d_ttft = sdist_of(ttft, nttft, 1e3), d_ttok = sdist_of(ttft_tok, (size_t)n, 1e3),
          d_itl = sdist_of(itl, nitl, 1e3), d_gap = sdist_of(gaps, ngaps, 1e3),
          d_e2e = sdist_of(e2e, (size_t)n, 1e3);

    if (a->json) {
        json_t *r = json_object();
        json_object_set_new(r, "mode", json_string("serving"));
        json_object_set_new(r, "model", json_string(a->model));
        json_object_set_new(r, "device", json_string(a->device));
        json_object_set_new(r, "prompts", json_string(a->prompts));
        json_object_set_new(r, "arrivals", json_string(a->fixed_schedule ? "fixed schedule"
                                                       : isfinite(a->request_rate) ? "poisson" : "all at once"));
        json_object_set_new(r, "request_rate", a->fixed_schedule ? json_null()
                                               : isfinite(a->request_rate) ? json_real(a->request_rate)
                                                                           : json_string("inf"));
        json_object_set_new(r, "seed", json_integer((json_int_t)a->seed));
        json_object_set_new(r, "num_prompts", json_integer(n));
        json_object_set_new(r, "input_len", json_integer(plen));
        json_object_set_new(r, "output_len", json_integer(olen));
        json_object_set_new(r, "prompts_truncated", json_integer(truncated));
        json_object_set_new(r, "prompts_padded", json_integer(padded));
        json_object_set_new(r, "load_s", json_real(tl));
        json_object_set_new(r, "duration_s", jreal(dur));
        json_object_set_new(r, "output_tokens", json_integer((json_int_t)otoks));
        json_object_set_new(r, "request_throughput", jreal(req_s));
        json_object_set_new(r, "output_token_throughput", jreal(tok_s));
        json_object_set_new(r, "ttft_ms", sdist_json(d_ttft));
        json_object_set_new(r, "ttft_first_token_ms", sdist_json(d_ttok));
        json_object_set_new(r, "itl_ms", sdist_json(d_itl));
        json_object_set_new(r, "chunk_gap_ms", sdist_json(d_gap));
        json_object_set_new(r, "e2e_ms", sdist_json(d_e2e));
        json_dumpf(r, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(8));
        printf("\n");
        json_decref(r);
    } else {
        char rate[64];
        if (a->fixed_schedule) snprintf(rate, sizeof rate, "at the file's timestamps");
        else if (isfinite(a->request_rate)) snprintf(rate, sizeof rate, "Poisson at %g req/s", a->request_rate);
        else snprintf(rate, sizeof rate, "all at once (rate inf)");
        printf("qw-bench serving: model %s, device %s, loaded in %.2f s\n", a->model, a->device, tl);
        printf("workload: %d prompts from %s (%zu lines; %d cut and %d padded to %d tokens), output %d tokens "
               "(ignore_eos), arrivals %s, seed %llu\n", n, a->prompts, ntext, truncated, padded, plen, olen, rate,
               (unsigned long long)a->seed);
        printf("  %-24s %.2f s\n", "duration", dur);
        printf("  %-24s %.3f req/s\n", "request throughput", req_s);
        printf("  %-24s %.1f tok/s\n", "output token throughput", tok_s);
        sdist_text("TTFT (ms)", d_ttft, "  to the first text");
        sdist_text("TTFT first token (ms)", d_ttok, "  to the first token");
        sdist_text("ITL (ms)", d_itl, "  per request");
        sdist_text("chunk gap (ms)", d_gap, "  between text pieces");
        sdist_text("E2E (ms)", d_e2e, "");
    }

    for (int i = 0; i < n; i++) {
        qw_request_release(reqs[i].r);
        free(reqs[i].ids);
    }
    for (size_t i = 0; i < ntext; i++) {
        free(texts[i]);
        free(tids[i]);
    }
    free(texts);
    free(lines);
    free(stamps);
    free(tids);
    free(tlen);
    free(reqs);
    free(gaps);
    free(ttft);
    free(ttft_tok);
    free(itl);
    free(e2e);
    qw_engine_destroy(e);
    return 0;
}

/* ---- main ----------------------------------------------------------------------- */

int main(int argc, char **argv) {
    bench b;
    memset(&b, 0, sizeof b);
    parse(argc, argv, &b.a);
    rng ^= b.a.seed * 0x9e3779b97f4a7c15ull;
    if (b.a.rate_mode) return serving_main(&b.a);
    int cuda = !strncmp(b.a.device, "cuda", 4);
    load_model_info(b.a.model, cuda, &b.mi);
    /* K/V bytes at the cache's dtype: --kv-cache-dtype, else the backend's
     * default (CPU: bf16 in fast numerics, f32 in exact; CUDA: bf16) */
    int kd = b.a.kv_dtype ? kv_dtype_value(b.a.kv_dtype) : QW_KV_CACHE_AUTO;
    {
        if (kd == QW_KV_CACHE_AUTO)
            kd = !cuda && b.a.numerics && !strcmp(b.a.numerics, "exact") ? QW_KV_CACHE_F32 : QW_KV_CACHE_BF16;
        if (!cuda && kd == QW_KV_CACHE_BF16) b.mi.kv_bytes_per_token /= 2.0;
        if (kd == QW_KV_CACHE_FP8_E4M3) b.mi.kv_bytes_per_token /= cuda ? 2.0 : 4.0;
    }
    int threads = b.a.threads > 0 ? b.a.threads : affinity_threads();

    /* the layout the backend will give these weights: fast numerics always
     * packs bf16 pair panels; exact mode packs 16-row panels when the copy
     * fits (file size: close enough to the matmul bytes for the backend's
     * half-of-RAM rule), else runs on the row-major mapping */
    const bool fast = !(b.a.numerics && !strcmp(b.a.numerics, "exact"));
    limits L = { .kernels = cuda ? "cuda" : qwi_cpu_kernels_select()->name,
                 .panel = fast ? LAYOUT_PAIR
                               : qwi_cpu_weights_copied((size_t)b.mi.weight_bytes) ? LAYOUT_PANEL : LAYOUT_ROWS,
                 .cpu = detect_cpu(), .bf16_1 = NAN, .bf16_n = NAN, .fma_1 = NAN, .fma_n = NAN,
                 .amx_1 = NAN, .amx_n = NAN,
                 .fma_isa = "none" };
    const char *numerics = b.a.numerics ? b.a.numerics : "fast (engine default)";
    L.bf16_dot = strcmp(L.kernels, "avx512bf16") == 0 && fast;
    L.amx_tiles = strcmp(L.kernels, "amx") == 0 && fast;
    if (b.a.limits && !cuda) {
        /* raw compute peaks: the limit the prefill and batched-decode GEMMs
         * can approach */
        if (qwi_pair_amx_usable()) {
            L.amx_1 = measure_peak(PEAK_AMX, 1, PEAK_REPS);
            L.amx_n = threads > 1 ? measure_peak(PEAK_AMX, threads, PEAK_REPS) : L.amx_1;
        }
        if (L.cpu.avx512_bf16) {
            L.bf16_1 = measure_peak(PEAK_BF16_DOT, 1, PEAK_REPS);
            L.bf16_n = threads > 1 ? measure_peak(PEAK_BF16_DOT, threads, PEAK_REPS) : L.bf16_1;
        }
        if (L.cpu.avx512f || L.cpu.avx2_fma) {
            const bool zmm = L.cpu.avx512f && strncmp(L.kernels, "avx512", 6) == 0;
            peak_kind k = zmm ? PEAK_FMA512 : PEAK_FMA256;
            L.fma_isa = zmm ? "avx512f zmm" : "avx2 ymm";
            L.fma_1 = measure_peak(k, 1, PEAK_REPS);
            L.fma_n = threads > 1 ? measure_peak(k, threads, PEAK_REPS) : L.fma_1;
        }
    }
    if (b.a.limits) {
        if (!b.a.json) fprintf(stderr, "qw-bench: measuring machine limits...\n");
        L.read_bw = L.read_bw_before = measure_bandwidth(threads, 0, 5);
        L.copy_bw = measure_bandwidth(threads, 1, 3);
        if (!cuda) {
            /* the 0.6B gate/up projection of a 512-token prefill */
            L.gemm = measure_gemm(qwi_cpu_kernels_select(), threads, 512, 1024, 3072, 1,
                                  L.panel, 3);
        } else {
            L.gemm = NAN;   /* tests/gpu/run.sh measures the cuBLASLt peak */
        }
        L.measured = 1;
        if (!cuda && !b.a.json) {
            /* every table this CPU has, 1 thread and all: per-variant speed
             * and thread scaling of the kernel the engine would use */
            static const char *names[] = { "generic", "avx2", "avx512", "avx512bf16" };
            for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
                const qwi_cpu_kernels *kt = qwi_cpu_kernels_by_name(names[i]);
                if (!kt) continue;
                for (int layout = LAYOUT_PAIR; layout >= LAYOUT_ROWS; layout--) {
                    double g1 = measure_gemm(kt, 1, 512, 1024, 3072, 1, layout, 3);
                    double gn = threads > 1 ? measure_gemm(kt, threads, 512, 1024, 3072, 1, layout, 3) : g1;
                    double f1 = measure_gemm(kt, threads, 512, 1024, 3072, 0, layout, 3);
                    printf("kernels %-10s %-5s bf16 %6.1f GFLOP/s on 1 thread, %6.1f on %d (%.2fx); "
                           "f32 %6.1f on %d\n", names[i], layout_names[layout], g1 / 1e9, gn / 1e9,
                           threads, gn / g1, f1 / 1e9, threads);
                }
            }
        }
    }

    if (b.a.probe_every > 0) {
        b.probe_threads = threads;
        b.probe_map = probe_buffer(PAIRED_PROBE_BYTES);
        memset(b.probe_map.base, 1, PAIRED_PROBE_BYTES);
    }
    qw_engine_options *o = engine_options(&b.a);
    /* Memory from here on is the engine's: the limit buffers are freed, and
     * the peak is reset so it does not count them (else it is flagged). */
    int hwm_clean = reset_peak_rss();
    double rss_before = proc_status_bytes("VmRSS");
    b.rss_base = rss_before;
    double tl = now_s();
    if (qw_engine_create(o, &b.e) != QW_OK) die("engine: %s", qw_last_error());
    qw_engine_options_destroy(o);
    tl = now_s() - tl;
    double rss_load = proc_status_bytes("VmRSS") - rss_before;
    double hwm_load = proc_status_bytes("VmHWM") - rss_before;
    b.vocab = qw_engine_vocab_size(b.e);
    b.progress = isatty(2) && !b.a.json;

    /* Warm-up: fault the weights in and let the allocator settle, so the
     * first measured step is not a page-fault benchmark. */
    {
        int saved = b.a.num_requests;
        args sa = b.a;
        b.a.num_requests = 1;
        b.a.scenario = "";
        b.a.mode = "offline";
        b.a.input_len = 16;
        b.a.output_len = 4;
        b.a.len_dist = "fixed";
        b.a.concurrency = 0;
        b.a.probe_every = 0;
        int p = b.progress;
        b.progress = 0;
        build_requests(&b, 0);
        run_loop(&b);
        free_requests(&b);
        b.a = sa;
        b.a.num_requests = saved;
        b.progress = p;
    }

    /* the fp8 KV cache's kernel table, as the CPU backend picks it (cpu/kv_fp8.h) */
    const char *fp8_kernels = !cuda && b.a.kv_dtype && !strcmp(b.a.kv_dtype, "fp8")
                                  ? qwi_cpu_kv_fp8_for(qwi_cpu_kernels_select())->name
                                  : NULL;
    /* whether the CPU backend's attention over a bf16 or fp8 cache runs on
     * bf16 dot products (cpu/attention.h's rule, asked with this run's
     * tables, numerics and head_dim) or on f32 kernels */
    const char *kv_attention = NULL;
    if (!cuda && (kd == QW_KV_CACHE_BF16 || kd == QW_KV_CACHE_FP8_E4M3)) {
        static const uint16_t any16;
        static const uint8_t any8;
        const qwi_cpu_kernels *kt = qwi_cpu_kernels_select();
        qwi_cpu_attn probe = { .kb = qwi_cpu_kv_bf16_for(kt), .kf = qwi_cpu_kv_fp8_for(kt),
                               .bf16_dot = fast, .head_dim = (int32_t)b.mi.head_dim };
        if (kd == QW_KV_CACHE_FP8_E4M3)
            probe.k_fp8 = &any8;
        else
            probe.k_bf16 = &any16;
        kv_attention = qwi_cpu_attn_on_dot_products(&probe) ? "bf16 dot products" : "f32 kernels";
    }
    char kv_desc[128];
    snprintf(kv_desc, sizeof kv_desc, "%s%s%s%s%s%s", b.a.kv_dtype ? b.a.kv_dtype : "auto",
             fp8_kernels || kv_attention ? " (" : "", fp8_kernels ? "kernels " : "", fp8_kernels ? fp8_kernels : "",
             kv_attention ? (fp8_kernels ? ", attention on " : "attention on ") : "",
             kv_attention ? kv_attention : "");
    if (fp8_kernels || kv_attention) strncat(kv_desc, ")", sizeof kv_desc - strlen(kv_desc) - 1);
    if (b.a.json) {
        printf("{\n  \"model\": \"%s\",\n  \"device\": \"%s\",\n  \"threads\": %d,\n  \"kernels\": \"%s\",\n",
               b.a.model, b.a.device, threads, L.kernels);
        if (!cuda)
            printf("  \"q4i_kernel\": \"%s\",\n", qwi_cpu_kernels_q4i_isa(qwi_cpu_kernels_select()));
        printf("  \"numerics\": \"%s\",\n  \"kv_cache_dtype\": \"%s\",\n  \"temperature\": %g,\n",
               b.a.numerics ? b.a.numerics : "fast", b.a.kv_dtype ? b.a.kv_dtype : "auto", b.a.temperature);
        if (fp8_kernels) printf("  \"kv_fp8_kernels\": \"%s\",\n", fp8_kernels);
        if (kv_attention)
            printf("  \"kv_attention\": \"%s\",\n", strcmp(kv_attention, "f32 kernels") ? "bf16_dot" : "f32");
        printf("  \"top_p\": %g,\n  \"repetition_penalty\": %g,\n  \"presence_penalty\": %g,\n"
               "  \"frequency_penalty\": %g,\n  \"logprobs\": %d,\n",
               b.a.top_p, b.a.rep_penalty, b.a.pres_penalty, b.a.freq_penalty, b.a.logprobs);
        printf("  \"weight_bytes\": %.0f,\n  \"stream_bytes\": %.0f,\n  \"params_per_token\": %.0f,\n"
               "  \"load_s\": %.3f,\n", b.mi.weight_bytes, b.mi.stream_bytes, b.mi.params_per_token, tl);
        printf("  \"rss_after_load_bytes\": %.0f,\n  \"peak_rss_load_bytes\": %.0f,\n"
               "  \"peak_rss_includes_limit_buffers\": %s,\n",
               rss_load, hwm_load, hwm_clean ? "false" : "true");
        printf("  \"avx512_bf16\": %s,\n  \"amx_bf16\": %s,\n", L.cpu.avx512_bf16 ? "true" : "false",
               L.cpu.amx_bf16 && L.cpu.amx_tile ? "true" : "false");
        if (L.measured && !cuda)
            printf("  \"bf16_dot_peak_flops_per_s_1thread\": %.6g,\n  \"bf16_dot_peak_flops_per_s\": %.6g,\n"
                   "  \"fma_peak_flops_per_s_1thread\": %.6g,\n  \"fma_peak_flops_per_s\": %.6g,\n",
                   isnan(L.bf16_1) ? 0 : L.bf16_1, isnan(L.bf16_n) ? 0 : L.bf16_n,
                   isnan(L.fma_1) ? 0 : L.fma_1, isnan(L.fma_n) ? 0 : L.fma_n);
        if (L.measured && !cuda && !isnan(L.amx_n))
            printf("  \"amx_peak_flops_per_s_1thread\": %.6g,\n  \"amx_peak_flops_per_s\": %.6g,\n",
                   L.amx_1, L.amx_n);
        printf("  \"mode\": \"%s\",\n  \"scenario\": \"%s\",\n", b.a.mode, b.a.scenario);
        if (L.measured)
            printf("  \"read_bandwidth_bytes_per_s\": %.6g,\n  \"copy_bandwidth_bytes_per_s\": %.6g,\n"
                   "  \"peak_gemm_flops_per_s\": %.6g,\n", L.read_bw, L.copy_bw, isnan(L.gemm) ? 0 : L.gemm);
    } else {
        printf("qw-bench: model %s (%.2f GB of weights, %.2f GB read per decode step, %.0fM matmul "
               "params/token), device %s, %d threads, kernel table %s%s%s%s, numerics %s, KV cache %s, "
               "loaded in %.2f s\n",
               b.a.model, b.mi.weight_bytes / 1e9, b.mi.stream_bytes / 1e9, b.mi.params_per_token / 1e6,
               b.a.device, threads, L.kernels, cuda ? "" : " (int4/int8 on ",
               cuda ? "" : qwi_cpu_kernels_q4i_isa(qwi_cpu_kernels_select()), cuda ? "" : ")",
               numerics, kv_desc, tl);
        printf("memory: RSS after load %.2f GB (%.2fx the weights), peak during load %.2f GB (%.2fx)%s\n",
               rss_load / 1e9, rss_load / b.mi.weight_bytes, hwm_load / 1e9, hwm_load / b.mi.weight_bytes,
               hwm_clean ? "" : " (peak includes the limit buffers: /proc/self/clear_refs unavailable)");
        if (L.measured && !cuda) {
            char c1[32], c2[32];
            fmt_num(c1, sizeof c1, L.bf16_1 / 1e9, "%.1f");
            fmt_num(c2, sizeof c2, L.bf16_n / 1e9, "%.1f");
            printf("machine: bf16 dot peak (vdpbf16ps zmm) %s GFLOP/s on 1 thread, %s on %d%s; ", c1, c2,
                   threads, L.cpu.avx512_bf16 ? "" : " (no AVX512_BF16)");
            fmt_num(c1, sizeof c1, L.fma_1 / 1e9, "%.1f");
            fmt_num(c2, sizeof c2, L.fma_n / 1e9, "%.1f");
            printf("f32 FMA peak (%s) %s GFLOP/s on 1 thread, %s on %d; ", L.fma_isa, c1, c2, threads);
            if (!isnan(L.amx_n)) {
                fmt_num(c1, sizeof c1, L.amx_1 / 1e9, "%.1f");
                fmt_num(c2, sizeof c2, L.amx_n / 1e9, "%.1f");
                printf("AMX tile peak (tdpbf16ps) %s GFLOP/s on 1 thread, %s on %d\n", c1, c2, threads);
            } else {
                printf("AMX: %s\n", L.cpu.amx_bf16 && L.cpu.amx_tile
                                        ? "AMX-BF16 present, but this process may not use it"
                                        : "not present");
            }
        }
        if (L.measured)
            printf("machine: read bandwidth %.2f GB/s, copy %.2f GB/s (read+write), "
                   "peak GEMM %.1f GFLOP/s (bf16 512x1024x3072, %s %s, %d threads)\n",
                   L.read_bw / 1e9, L.copy_bw / 1e9, L.gemm / 1e9, L.kernels,
                   layout_names[L.panel], threads);
        printf("workload: mode %s%s%s, %d requests, input %d, output %d (%s), rate %g, concurrency %d, "
               "temperature %g, top-p %g, repetition penalty %g, presence %g, frequency %g, logprobs %d\n",
               b.a.mode, b.a.scenario[0] ? ", scenario " : "",
               b.a.scenario, b.a.num_requests, b.a.input_len, b.a.output_len, b.a.len_dist, b.a.rate,
               b.a.concurrency, b.a.temperature, b.a.top_p, b.a.rep_penalty, b.a.pres_penalty, b.a.freq_penalty,
               b.a.logprobs);
    }

    int mixed = !strcmp(b.a.scenario, "mixed-long");
    double peak_hwm = 0;
    for (int pass = 0; pass < (mixed ? 2 : 1); pass++) {
        b.have_stats = get_engine_stats(b.e, &b.st0);
        build_requests(&b, mixed && pass == 1);
        run_loop(&b);
        results r = compute(&b);
        const char *label = mixed ? (pass ? "with the long prompt" : "short requests alone")
                                  : (b.a.scenario[0] ? b.a.scenario : b.a.mode);
        /* the runs' peak, before the probe's buffer can raise it */
        peak_hwm = fmax(peak_hwm, proc_status_bytes("VmHWM"));
        if (L.measured) {
            reprobe_bandwidth(&L, threads);
            if (hwm_clean) reset_peak_rss();
        }
        report(&b, label, &r, &L, peak_hwm, pass == 0, pass == (mixed ? 1 : 0));
        free_requests(&b);
    }
    free(b.steps);
    free(b.itl);
    free(b.probes);
    qwi_page_map_release(&b.probe_map);
    qw_engine_destroy(b.e);
    return 0;
}
