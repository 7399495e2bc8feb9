/*
 * qw-abench - decode attention over the bf16 or fp8 KV cache (issues 11's
 * and 16's attention benchmark): one decode step's attention for every layer (each sequence one
 * query row at its last position, the kv heads of a sequence in one task, as
 * a decode step runs it) through qwi_cpu_attention and the machine's kernel
 * table, in GB/s of the K and V bytes a step must read, against a read
 * bandwidth probe run by the same thread pool in the same process.
 *
 *   qw-abench [--seqs N] [--ctx N] [--threads N] [--layers N] [--seconds S]
 *             [--heads N] [--kv-heads N] [--head-dim N] [--block-size N]
 *             [--contiguous] [--exact] [--huge-pages] [--kv bf16|fp8]
 *
 * Defaults: the 0.6B shape (16 heads, 8 kv heads, head dim 128), 32
 * sequences of 512 positions, block size 16, 2 threads, fast numerics'
 * bf16 dot products (--exact: the f32 kernels over the same bf16 cache).
 * --kv fp8: the e4m3 cache (QW_KV_CACHE_FP8_E4M3; its own kernels,
 * cpu/kv_fp8.h: the table the backend would pick, printed, or the one
 * QWINFER_CPU_KV_FP8 names; on bf16 dot products as the bf16 cache where
 * the kernel table has them, --exact: the f32 kernels), one byte
 * an element, random finite codes with layer scales of 1/64 (K) and 1/32 (V).
 * Each layer has its own K and V pool (the engine's layout: K planes, V
 * rows); --layers defaults to enough layers for >= 512 MiB of KV, so the
 * reads come from memory. Blocks are handed out in a seeded random order
 * (a pool after some churn; --contiguous: in order). The pool is on 4 KiB
 * pages, as the engine's (cpu/page_map.h); --huge-pages: 2 MiB ones. Every
 * bf16 K/V element is a random value (uniform in [-2, 2)). Before timing,
 * the batched result is checked bit for bit against qwr_attention_row row by
 * row (the design's batched == alone).
 * Best of 3 timings of --seconds each, wall time.
 * Links the library's internals (the lib/cpu headers), as qw-bench does.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/attention.h"
#include "cpu/kernels.h"
#include "cpu/kv_bf16.h"
#include "cpu/page_map.h"
#include "cpu/threadpool.h"
#include "dtype.h"
#include "fp8.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}

static double unif(void) { return (double)(rnd() >> 11) * 0x1.0p-53; }

static void die(const char *what) {
    fprintf(stderr, "qw-abench: %s\n", what);
    exit(1);
}

/* Anonymous memory of the given page size (cpu/page_map.h); exits on
 * failure. */
static qwi_page_map big_alloc(size_t bytes, qwi_page_size pages) {
    qwi_page_map m;
    if (!qwi_page_map_create(bytes, pages, &m)) die("out of memory");
    return m;
}

/* ---- the read-bandwidth probe: each task sums one 1 MiB slice ---------- */

typedef struct probe {
    const uint64_t *buf;
    uint64_t sums[64];
} probe;

static void probe_task(void *p, int64_t t, int thread) {
    probe *pr = p;
    const uint64_t *s = pr->buf + (size_t)t * (1u << 17);
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (size_t i = 0; i < (1u << 17); i += 4) {
        a0 += s[i];
        a1 += s[i + 1];
        a2 += s[i + 2];
        a3 += s[i + 3];
    }
    pr->sums[thread & 63] += a0 + a1 + a2 + a3;
}

/* Best of 5 passes over 512 MiB, bytes per second. */
static double read_bandwidth(qwi_cpu_pool *pool) {
    const size_t bytes = (size_t)512 << 20;
    qwi_page_map buf = big_alloc(bytes, QWI_PAGES_HUGE);   /* as qw-bench's probe */
    probe pr = { (const uint64_t *)(const void *)buf.base, { 0 } };
    memset((void *)pr.buf, 1, bytes);
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = now();
        qwi_cpu_pool_run(pool, (int64_t)(bytes >> 20), probe_task, &pr);
        double dt = now() - t0;
        if (bytes / dt > best) best = bytes / dt;
    }
    qwi_page_map_release(&buf);
    return best;
}

int main(int argc, char **argv) {
    int32_t seqs = 32, ctx = 512, threads = 2, layers = 0, heads = 16, kv_heads = 8, hd = 128, bs = 16;
    int contiguous = 0, exact = 0, huge_pages = 0, fp8 = 0;
    double seconds = 0.5;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--contiguous")) { contiguous = 1; continue; }
        if (!strcmp(a, "--exact")) { exact = 1; continue; }
        if (!strcmp(a, "--huge-pages")) { huge_pages = 1; continue; }
        const char *v = i + 1 < argc ? argv[++i] : NULL;
        if (!v) { fprintf(stderr, "qw-abench: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "--seqs")) seqs = atoi(v);
        else if (!strcmp(a, "--ctx")) ctx = atoi(v);
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--layers")) layers = atoi(v);
        else if (!strcmp(a, "--seconds")) seconds = atof(v);
        else if (!strcmp(a, "--heads")) heads = atoi(v);
        else if (!strcmp(a, "--kv-heads")) kv_heads = atoi(v);
        else if (!strcmp(a, "--head-dim")) hd = atoi(v);
        else if (!strcmp(a, "--block-size")) bs = atoi(v);
        else if (!strcmp(a, "--kv") && (!strcmp(v, "bf16") || !strcmp(v, "fp8"))) fp8 = !strcmp(v, "fp8");
        else { fprintf(stderr, "qw-abench: unknown option %s\n", a); return 2; }
    }
    if (seqs < 1 || ctx < 1 || threads < 1 || heads < 1 || kv_heads < 1 || heads % kv_heads ||
        hd < 2 || hd % 2 || bs < 1 || !(seconds > 0)) {
        fprintf(stderr, "qw-abench: bad option values\n");
        return 2;
    }
    const int64_t kvd = (int64_t)kv_heads * hd, qd = (int64_t)heads * hd;
    const int32_t nbs = (ctx + bs - 1) / bs;        /* blocks per sequence */
    const int64_t nblocks = (int64_t)seqs * nbs;    /* blocks per layer    */
    const size_t layer_elems = (size_t)nblocks * (size_t)bs * (size_t)kvd;   /* K (or V) of a layer */
    const size_t elem = fp8 ? 1 : sizeof(uint16_t);
    const double step_bytes = (double)seqs * ctx * (double)kvd * 2.0 * (double)elem;   /* per layer */
    if (layers <= 0) layers = (int32_t)fmax(2.0, ceil((double)(512 << 20) / step_bytes));

    qwi_cpu_pool *pool = NULL;
    if (qwi_cpu_pool_create(threads, &pool) != QW_OK) die("thread pool");
    threads = qwi_cpu_pool_size(pool);
    const qwi_cpu_kernels *kt = qwi_cpu_kernels_select();
    const qwi_cpu_kv_bf16_kernels *kb = qwi_cpu_kv_bf16_for(kt);
    const qwi_cpu_kv_fp8_kernels *kf = qwi_cpu_kv_fp8_for(kt);

    /* the pool: layer l's K planes, then its V head slices, random values
     * (bf16) or finite codes (e4m3: a NaN code becomes 0); on the engine's
     * KV pages unless --huge-pages */
    qwi_page_map kv_map = big_alloc((size_t)layers * 2 * layer_elems * elem,
                                    huge_pages ? QWI_PAGES_HUGE : QWI_PAGES_SMALL);
    uint16_t *kv = (uint16_t *)(void *)kv_map.base;
    uint8_t *kv8 = (uint8_t *)kv_map.base;
    for (size_t i = 0; i < (size_t)layers * 2 * layer_elems; i++) {
        if (fp8) {
            const uint8_t c = (uint8_t)(rnd() >> 56);
            kv8[i] = qwi_e4m3_is_nan(c) ? 0 : c;
        } else {
            kv[i] = qwi_f32_to_bf16((float)((int32_t)(rnd() >> 32)) * 0x1.0p-30f);   /* uniform in [-2, 2) */
        }
    }
    /* block tables: a permutation of the pool's blocks (or the identity) */
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)nblocks);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)seqs), *row_seq = malloc(sizeof(int32_t) * (size_t)seqs);
    float *q = malloc(sizeof(float) * (size_t)(seqs * qd));
    float *out = malloc(sizeof(float) * (size_t)(seqs * qd)), *ref = malloc(sizeof(float) * (size_t)(seqs * qd));
    float **scr = malloc(sizeof(float *) * (size_t)threads);
    if (!bt || !pos || !row_seq || !q || !out || !ref || !scr) die("out of memory");
    for (int64_t i = 0; i < nblocks; i++) bt[i] = (int32_t)i;
    for (int64_t i = nblocks - 1; i > 0 && !contiguous; i--) {
        int64_t j = (int64_t)(rnd() % (uint64_t)(i + 1));
        int32_t t = bt[i];
        bt[i] = bt[j];
        bt[j] = t;
    }
    for (int32_t s = 0; s < seqs; s++) {
        pos[s] = ctx - 1;
        row_seq[s] = s;
    }
    for (int64_t i = 0; i < seqs * qd; i++) q[i] = (float)(2.0 * unif() - 1.0);
    for (int t = 0; t < threads; t++) {
        scr[t] = malloc(qwi_cpu_attn_scratch_floats(heads, kv_heads, hd) * sizeof(float));
        if (!scr[t]) die("out of memory");
    }

    qwi_cpu_attn a = {
        .q = q, .kb = kb, .bf16_dot = !exact, .out = out, .positions = pos, .row_seq = row_seq,
        .block_tables = bt, .max_blocks_per_seq = nbs, .block_size = bs, .num_tokens = seqs,
        .num_heads = heads, .num_kv_heads = kv_heads, .head_dim = hd,
        .scale = (float)(1.0 / sqrt((double)hd)),
    };
    /* layer l's pools */
#define SET_LAYER(l)                                                                           \
    do {                                                                                       \
        if (fp8) {                                                                             \
            a.k_fp8 = kv8 + (size_t)(l) * 2 * layer_elems;                                     \
            a.v_fp8 = a.k_fp8 + layer_elems;                                                   \
        } else {                                                                               \
            a.k_bf16 = kv + (size_t)(l) * 2 * layer_elems;                                     \
            a.v_bf16 = a.k_bf16 + layer_elems;                                                 \
        }                                                                                      \
    } while (0)
    if (fp8) {
        a.kf = kf;
        a.k_scale = 1.0f / 64;   /* |k| <= 7, |v| <= 14: the magnitudes of a real cache */
        a.v_scale = 1.0f / 32;
    }
    /* batched == alone, on layer 0 */
    SET_LAYER(0);
    qwi_cpu_attention(pool, kt, scr, &a);
    a.out = ref;
    for (int32_t r = 0; r < seqs; r++)
        for (int32_t g = 0; g < kv_heads; g++) qwr_attention_row(&a, kt, r, g, scr[0]);
    a.out = out;
    if (memcmp(out, ref, sizeof(float) * (size_t)(seqs * qd)) != 0) die("batched attention differs from row by row");
    for (int64_t i = 0; i < seqs * qd; i++)
        if (!isfinite(out[i])) die("non-finite attention output");

    /* time whole steps (every layer once), best of 3 */
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        int64_t calls = 0;
        double t0 = now(), t = t0;
        while (t - t0 < seconds) {
            for (int32_t l = 0; l < layers; l++) {
                SET_LAYER(l);
                qwi_cpu_attention(pool, kt, scr, &a);
            }
            calls += layers;
            t = now();
        }
        best = fmin(best, (t - t0) / (double)calls);
    }
    const double bw = read_bandwidth(pool);
    const double gbs = step_bytes / best;
    const char *how = qwi_cpu_attn_on_dot_products(&a) ? "bf16 dot products" : "f32 kernels";
    char mode[96];
    if (fp8)
        snprintf(mode, sizeof mode, "fp8 e4m3 KV, kernels %s, on %s", kf->name, how);
    else
        snprintf(mode, sizeof mode, "%s (%s)", exact ? "exact" : "fast", how);
    printf("qw-abench: kernel table %s, %s, %d threads; %d seqs x %d positions, heads %d/%d x %d, "
           "block %d (%s), %d layers (%.1f MiB of KV, %s pages)\n",
           kt->name, mode, threads, seqs, ctx, heads,
           kv_heads, hd, bs, contiguous ? "contiguous" : "shuffled", layers,
           step_bytes * layers / (1 << 20), huge_pages ? "2 MiB" : "4 KiB");
    printf("decode attention: %.1f us per layer, %.2f GB/s of K+V = %.1f%% of read bandwidth (%.2f GB/s)\n",
           best * 1e6, gbs / 1e9, 100.0 * gbs / bw, bw / 1e9);
    qwi_page_map_release(&kv_map);
    for (int t = 0; t < threads; t++) free(scr[t]);
    free(scr);
    free(bt);
    free(pos);
    free(row_seq);
    free(q);
    free(out);
    free(ref);
    qwi_cpu_pool_destroy(pool);
    return 0;
}
