/*
 * qw-qbench - the CPU quantized matmuls against the bf16 ones on one linear
 * shape (issue #16's kernel benchmark): batch-1 GEMV in GB/s of the bytes
 * a layer streams (packed codes + scales + zeros, or the bf16 panels) and
 * batched GEMM in GFLOP/s, through the backend's parallel driver
 * (qwi_cpu_matmul) and kernel table, in both numerics modes:
 *   exact: matmul_qf32 (SEQ)   vs the bf16 panel kernel (matmul_bf16_panel)
 *   fast:  matmul_qpair (PAIR; int4/int8: matmul_q4i, cpu/q4i.h, which at
 *          M <= 2 reads int4's activations in the split byte form on the
 *          AVX-512 tables, as the engine does) vs the bf16 pair kernel
 *          (matmul_pair)
 *   int8:  int4 in QW_NUMERICS_FAST_INT8 (matmul_q4i with int8 activations)
 *
 *   qw-qbench [--k N] [--n N] [--threads N] [--group N] [--layers N]
 *             [--ms 1,64,256] [--seconds S] [--zeros uniform|varied]
 *             [--q4i-vnni-ymm]
 *
 * GEMV cycles through --layers copies of the weight (default: enough for
 * 256 MiB of bf16), as decode does through a model's layers, so the
 * weights come from memory, not cache. Best of 3 timings of --seconds each,
 * in the calling thread's CPU time with --threads 1 (the pool then runs
 * every task on the caller), else in wall time. int4/int8 zero points are
 * all 8, as a symmetric GPTQ checkpoint has them (the fast layout then
 * stores none), or with --zeros varied differ per group and row, as AWQ's
 * do (stored: qpanel.h). E4M3 scales are one a 16-row panel, as FP8
 * blocks of 128 rows give them (the fast layout stores one).
 * --q4i-vnni-ymm (x86-64 with AVX512VL and AVX512_VNNI): the int4/int8
 * rows run the avx2 table's kernel on VNNI dot products in their EVEX
 * encoding (q4i_avxvnni_evex.c), the arithmetic of its AVX-VNNI instance,
 * for measuring that instance where no AVX-VNNI core is at hand; use it
 * with QWINFER_CPU_KERNELS=avx2.
 * Links the library's internals (the lib/cpu headers), as qw-bench does.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/kernels.h"
#include "cpu/ops.h"
#include "cpu/page_map.h"
#include "cpu/pairpanel.h"
#include "cpu/panel.h"
#include "cpu/q4i.h"
#include "cpu/qpanel.h"
#include "cpu/threadpool.h"

/* One thread: the caller's CPU time (on a shared machine, time another
 * process ran does not count); more: wall time. */
static clockid_t clock_id = CLOCK_MONOTONIC;

static double now(void) {
    struct timespec ts;
    clock_gettime(clock_id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rs = 88172645463325252ull;
static uint32_t rnd(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)(rs >> 11);
}

typedef struct bench {
    qwi_cpu_ctx cx;
    const float *x;
    int64_t K;
    qwi_cpu_linear *lins;
    int nl;
    float *out;
} bench;

/* Seconds per call of M rows, cycling through the layers; best of 3. */
static double time_calls(bench *b, int64_t M, double seconds) {
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        int64_t calls = 0;
        double t0 = now(), t;
        do {
            qwi_cpu_mm_job job = { &b->lins[calls % b->nl], b->out, 0 };
            qwi_cpu_matmul(&b->cx, b->x, M, b->K, &job, 1);
            calls++;
            t = now() - t0;
        } while (t < seconds || calls < 2 * b->nl);
        if (t / (double)calls < best) best = t / (double)calls;
    }
    return best;
}

/* n bytes aligned to `align` (a power of two, at least 64); exits on
 * failure. */
static void *xalloc_aligned(size_t align, size_t n) {
    void *p = aligned_alloc(align, (n + align - 1) & ~(align - 1));
    if (!p) {
        fprintf(stderr, "qw-qbench: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static void *xalloc(size_t n) { return xalloc_aligned(64, n); }

/* A weight buffer mapped as the engine maps its packed weights
 * (cpu/page_map.h, QWI_PAGES_HUGE), so that both read their weights
 * through the same kind of pages. (On the Zen 5 of docs/benchmarks.md
 * huge pages here changed no figure.) Exits when it cannot be mapped. */
static qwi_page_map walloc(size_t n) {
    qwi_page_map m;
    if (!qwi_page_map_create(n, QWI_PAGES_HUGE, &m)) {
        fprintf(stderr, "qw-qbench: out of memory\n");
        exit(1);
    }
    return m;
}

int main(int argc, char **argv) {
    int64_t K = 1024, N = 3072, group = 128, layers = 0, ms[16] = { 1, 64, 256, 512 };
    int nms = 4, threads = 1;
    double seconds = 0.3;
    bool varied_zeros = false, vnni_ymm = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--q4i-vnni-ymm")) {   /* the one flag without a value */
            vnni_ymm = true;
            continue;
        }
        if (!v) { fprintf(stderr, "qw-qbench: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "--k")) K = atoll(v);
        else if (!strcmp(a, "--n")) N = atoll(v);
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--group")) group = atoll(v);
        else if (!strcmp(a, "--layers")) layers = atoll(v);
        else if (!strcmp(a, "--seconds")) seconds = atof(v);
        else if (!strcmp(a, "--zeros")) {
            if (strcmp(v, "uniform") && strcmp(v, "varied")) {
                fprintf(stderr, "qw-qbench: --zeros takes uniform or varied\n");
                return 2;
            }
            varied_zeros = !strcmp(v, "varied");
        }
        else if (!strcmp(a, "--ms")) {
            nms = 0;
            for (char *s = (char *)v; *s && nms < 16; s++) {
                ms[nms++] = strtoll(s, &s, 10);
                if (!*s) break;
            }
        } else { fprintf(stderr, "qw-qbench: unknown option %s\n", a); return 2; }
        i++;
    }
    if (K <= 0 || N <= 0 || group < 2 || group % 2 || threads < 1) {
        fprintf(stderr, "qw-qbench: bad --k/--n/--group/--threads\n");
        return 2;
    }
    if (layers <= 0) layers = QWI_MAX((int64_t)2, (int64_t)(256 << 20) / (K * N * 2));
    int64_t mmax = 1;
    for (int i = 0; i < nms; i++) mmax = QWI_MAX(mmax, ms[i]);

    qwi_cpu_pool *pool = NULL;
    if (qwi_cpu_pool_create(threads, &pool) != QW_OK) { fprintf(stderr, "qw-qbench: pool\n"); return 1; }
    qwi_cpu_kernels table = *qwi_cpu_kernels_select();
    if (vnni_ymm) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        if (!__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512vnni")) {
            fprintf(stderr, "qw-qbench: --q4i-vnni-ymm needs AVX512VL and AVX512_VNNI\n");
            return 2;
        }
        table.matmul_q4i = qwi_avxvnni_evex_matmul_q4i;
#else
        fprintf(stderr, "qw-qbench: --q4i-vnni-ymm needs x86-64\n");
        return 2;
#endif
    }
    const qwi_cpu_kernels *kt = &table;
    if (qwi_cpu_pool_size(pool) == 1) clock_id = CLOCK_THREAD_CPUTIME_ID;
    float *x = xalloc(sizeof(float) * (size_t)(mmax * K));
    for (int64_t i = 0; i < mmax * K; i++) x[i] = (float)(rnd() % 2001) / 1000.0f - 1.0f;
    uint32_t *xpair = xalloc(sizeof(uint32_t) * (size_t)(mmax * qwi_pair_kp(K)));
    /* room for widened x where the table reads it so, as the backend gives it */
    float *xwide = qwi_cpu_kernels_read_wide(kt)
                       ? xalloc(sizeof(float) * (size_t)(mmax * 2 * qwi_pair_kp(K)))
                       : NULL;
    float *out = xalloc(sizeof(float) * (size_t)(mmax * N));
    float *wf = xalloc(sizeof(float) * (size_t)(N * K));
    for (int64_t i = 0; i < N * K; i++) wf[i] = (float)(rnd() % 2001) / 20000.0f - 0.05f;
    const int64_t G = QWI_DIV_UP(K, group);
    uint8_t *codes = xalloc((size_t)(N * K));
    float *scales = xalloc(sizeof(float) * (size_t)(N * G)), *zeros = xalloc(sizeof(float) * (size_t)(N * G));
    /* an f16 scale, as GPTQ and AWQ checkpoints store them (qpanel.h keeps those in 2 bytes) */
    for (int64_t i = 0; i < N * G; i++) {
        scales[i] = 0x1p-7f;
        zeros[i] = varied_zeros ? (float)(rnd() % 16) : 8.0f;
    }
    /* E4M3: one scale a panel, as Qwen's 128 x 128 blocks give */
    const qwi_qpanel_form form = { .scales_f16 = true, .zero_uniform = !varied_zeros, .zero_all = 8,
                                   .scales_per_panel = true };
    /* the int4/int8 kernels' quantized rows (cpu/q4i.h), as the engine's driver keeps them */
    uint32_t *q4q = xalloc(sizeof(uint32_t) * (size_t)(mmax * qwi_pair_kp(K)));
    uint32_t *q4q8 = xalloc(sizeof(uint32_t) * (size_t)(mmax * QWI_Q4I_Q8_WORDS(qwi_pair_kp(K))));
    uint32_t *q4q8s = xalloc(sizeof(uint32_t) * (size_t)(2 * 2 * QWI_Q4I_Q8_WORDS(qwi_pair_kp(K))));
    float *q4d = xalloc(sizeof(float) * (size_t)(mmax * G));
    int32_t *q4s = xalloc(sizeof(int32_t) * (size_t)(mmax * G));

    printf("qw-qbench: K %lld, N %lld, group %lld, %d thread(s), table %s (int4/int8 on %s), "
           "%lld layers, %s time\n",
           (long long)K, (long long)N, (long long)group, qwi_cpu_pool_size(pool), kt->name,
           qwi_cpu_kernels_q4i_isa(kt),
           (long long)layers, clock_id == CLOCK_MONOTONIC ? "wall" : "CPU");
    /* one column per --ms entry, in its order: GB/s for M = 1, GFLOP/s else */
    printf("%-6s %-5s %12s", "mode", "fmt", "bytes/layer");
    for (int i = 0; i < nms; i++) {
        if (ms[i] == 1) printf(" %10s", "M=1 GB/s");
        else printf("  M=%-4lld GF/s", (long long)ms[i]);
    }
    printf("\n");
    const char *fnames[] = { "bf16", "U4", "U8", "E4M3" };
    for (int mode = 0; mode < 3; mode++)
        for (int f = 0; f < 4; f++) {
            if (mode == 2 && f != QWI_QFMT_U4) continue;   /* int8 activations: int4 only */
            qwi_cpu_linear *lins = calloc((size_t)layers, sizeof *lins);
            qwi_page_map *bufs = calloc((size_t)layers, sizeof *bufs);
            size_t bytes = 0;
            for (int64_t l = 0; l < layers; l++) {
                qwi_cpu_linear *lin = &lins[l];
                lin->n = N;
                lin->k = K;
                lin->dtype = QWI_DTYPE_BF16;
                if (f == 0) {
                    if (mode == 0) {
                        uint16_t *wb = xalloc(sizeof(uint16_t) * (size_t)(N * K));
                        for (int64_t i = 0; i < N * K; i++) wb[i] = qwi_pair_round_bf16(wf[i]);
                        bytes = qwi_panel_bytes(QWI_DTYPE_BF16, N, K);
                        bufs[l] = walloc(bytes);
                        qwi_panel_pack(QWI_DTYPE_BF16, wb, N, K, bufs[l].base);
                        free(wb);
                        lin->panel = true;
                    } else {
                        bytes = qwi_pairpanel_bytes(N, K);
                        bufs[l] = walloc(bytes);
                        qwi_pairpanel_pack(QWI_DTYPE_F32, wf, N, K, bufs[l].base);
                        lin->pair = true;
                    }
                    lin->w = bufs[l].base;
                } else {
                    const qwi_qfmt fmt = (qwi_qfmt)f;
                    for (int64_t i = 0; i < N * K; i++) {
                        uint8_t c = (uint8_t)rnd();
                        codes[i] = fmt == QWI_QFMT_U4 ? c & 15 : fmt == QWI_QFMT_E4M3 && (c & 0x7f) == 0x7f ? 0 : c;
                    }
                    const qwi_qpanel_layout lay = mode ? QWI_QPANEL_PAIR : QWI_QPANEL_SEQ;
                    bytes = qwi_qpanel_bytes_for(fmt, lay, N, K, group, form);
                    bufs[l] = walloc(bytes);
                    if (!qwi_qpanel_pack_codes(fmt, lay, N, K, group, codes, scales,
                                               fmt == QWI_QFMT_E4M3 ? NULL : zeros, form, bufs[l].base,
                                               &lin->qp)) {
                        fprintf(stderr, "qw-qbench: pack: %s\n", qwi_last_error());
                        return 1;
                    }
                    lin->quant = true;
                }
            }
            bench b = { .cx = { .pool = pool, .kt = kt, .nthreads = qwi_cpu_pool_size(pool),
                                .xpair = xpair, .xwide = xwide, .q4_q = q4q, .q4_d = q4d,
                                .q4_sum = q4s, .q4_q8 = mode == 2 ? q4q8 : NULL,
                                .q4_q8s = kt->q4i_reads_split ? q4q8s : NULL },
                        .x = x, .K = K, .lins = lins, .nl = (int)layers, .out = out };
            printf("%-6s %-5s %12zu", mode == 2 ? "int8" : mode ? "fast" : "exact", fnames[f], bytes);
            fflush(stdout);
            for (int i = 0; i < nms; i++) {
                const double t = time_calls(&b, ms[i], seconds);
                if (ms[i] == 1) printf(" %10.2f", (double)bytes / t * 1e-9);
                else printf("  %12.1f", 2.0 * (double)ms[i] * (double)K * (double)N / t * 1e-9);
                fflush(stdout);
            }
            printf("\n");
            for (int64_t l = 0; l < layers; l++) qwi_page_map_release(&bufs[l]);
            free(bufs);
            free(lins);
        }
    qwi_cpu_pool_destroy(pool);
    free(x); free(xpair); free(xwide); free(q4q); free(q4q8); free(q4q8s); free(q4d); free(q4s); free(out); free(wf); free(codes); free(scales); free(zeros);
    return 0;
}
