/*
 * ops.c - see ops.h.
 */
#include "cpu/ops.h"
#include "cpu/pairpanel.h"
#include "cpu/q4i.h"
#include "cpu/silu_fast.h"

/* ---- matmul ------------------------------------------------------------- */

typedef struct mm_ctx {
    const qwi_cpu_ctx *cx;
    const float *x;
    int64_t M, K;
    const qwi_cpu_mm_job *jobs;
    int njobs;
    int64_t cols;                    /* weight rows per task            */
    bool wide;                       /* pair jobs read cx->xwide where the table can */
    qwi_q4act q4;                    /* U4/U8 jobs: x quantized (cpu/q4i.h) */
    int64_t task_end[8];             /* prefix sums of tasks per job    */
} mm_ctx;

static void mm_task(void *p, int64_t t, int thread) {
    const mm_ctx *c = p;
    int j = 0;
    while (t >= c->task_end[j]) j++;
    int64_t first = j ? c->task_end[j - 1] : 0;
    const qwi_cpu_mm_job *job = &c->jobs[j];
    const qwi_cpu_linear *lin = job->lin;
    int64_t n0 = (t - first) * c->cols;
    int64_t nn = QWI_MIN(c->cols, lin->n - n0);
    int64_t K = c->K;
    const float *bias = lin->bias ? lin->bias + n0 : NULL;
    float *out = job->out + n0;
    if (lin->quant) {   /* n0 is a multiple of 16 here too */
        if (lin->qp.layout == QWI_QPANEL_PAIR && lin->qp.fmt != QWI_QFMT_E4M3)
            c->cx->kt->matmul_q4i(&c->q4, c->M, &lin->qp, n0, nn, bias, out, lin->n,
                                  job->accumulate);
        else if (lin->qp.layout == QWI_QPANEL_PAIR && c->wide && c->cx->kt->matmul_qpair_wide)
            c->cx->kt->matmul_qpair_wide(c->cx->xwide, c->M, qwi_pair_kp(K), &lin->qp, n0, nn,
                                         bias, out, lin->n, job->accumulate);
        else if (lin->qp.layout == QWI_QPANEL_PAIR)
            c->cx->kt->matmul_qpair(c->cx->xpair, c->M, qwi_pair_kp(K), &lin->qp, n0, nn, bias,
                                    out, lin->n, job->accumulate);
        else
            c->cx->kt->matmul_qf32(c->x, c->M, K, &lin->qp, n0, nn, bias, out, lin->n,
                                   job->accumulate);
        return;
    }
    if (lin->pair) {    /* n0 is a multiple of 16 here too */
        const int64_t kp = qwi_pair_kp(K);
        if (c->wide && c->cx->kt->matmul_pair_wide)
            c->cx->kt->matmul_pair_wide(c->cx->xwide, c->M, kp, (const uint32_t *)lin->w + n0 * kp,
                                        nn, bias, out, lin->n, job->accumulate);
        else
            c->cx->kt->matmul_pair(c->cx->xpair, c->M, kp, (const uint32_t *)lin->w + n0 * kp,
                                   nn, bias, out, lin->n, job->accumulate);
        return;
    }
    if (lin->panel) {   /* n0 is a multiple of 16 here: see qwi_cpu_matmul */
        if (lin->dtype == QWI_DTYPE_F32)
            c->cx->kt->matmul_f32_panel(c->x, c->M, K, (const float *)lin->w + n0 * K, nn, bias,
                                        out, lin->n, job->accumulate);
        else
            c->cx->kt->matmul_bf16_panel(c->x, c->M, K, (const uint16_t *)lin->w + n0 * K, nn,
                                         bias, out, lin->n, job->accumulate);
        return;
    }
    switch (lin->dtype) {
    case QWI_DTYPE_F32:
        c->cx->kt->matmul_f32(c->x, c->M, K, (const float *)lin->w + n0 * K, nn, bias, out,
                              lin->n, job->accumulate);
        break;
    case QWI_DTYPE_BF16:
        c->cx->kt->matmul_bf16(c->x, c->M, K, (const uint16_t *)lin->w + n0 * K, nn, bias,
                               out, lin->n, job->accumulate);
        break;
    case QWI_DTYPE_F16: {
        /* f16 has no cheap lane-wise conversion without F16C; converting the
         * task's weight block once costs O(nn*K) against O(M*nn*K) math, and
         * the f32 kernel then gives the same bits as for f32 weights. */
        float *buf = c->cx->f16_buf[thread];
        qwr_to_f32(QWI_DTYPE_F16, (const uint16_t *)lin->w + n0 * K, nn * K, buf);
        c->cx->kt->matmul_f32(c->x, c->M, K, buf, nn, bias, out, lin->n, job->accumulate);
        break;
    }
    default:   /* F8_E4M3 / I32 tensors reach here only as quantized linears (above) */
        break;
    }
}

/* A call's preparation of x, by rows (rows are independent): rounding to
 * bf16 pairs (x != NULL), then widening the pairs (wide != NULL) while
 * they are still in this core's cache. */
typedef struct prep_ctx {
    const float *x;
    uint32_t *pairs;
    float *wide;
    int64_t M, K, rows;
} prep_ctx;

static void prep_task(void *p, int64_t t, int thread) {
    const prep_ctx *c = p;
    const int64_t m0 = t * c->rows, m1 = QWI_MIN(c->M, (t + 1) * c->rows);
    if (c->x) qwi_pair_round_rows(c->x, m0, m1, c->K, c->pairs);
    if (c->wide) qwi_pair_widen_rows(c->pairs, m0, m1, qwi_pair_kp(c->K), c->wide);
}

typedef struct q4_ctx {
    const float *x;
    const qwi_q4act *a;
    int64_t M, K, rows;
} q4_ctx;

static void q4_task(void *p, int64_t t, int thread) {
    const q4_ctx *c = p;
    const int64_t m0 = t * c->rows, m1 = QWI_MIN(c->M, (t + 1) * c->rows);
    qwi_q4i_quantize_rows(c->x, m0, m1, c->K, c->a->group_k, c->a->qmax, (uint32_t *)c->a->q,
                          (float *)c->a->d, (int32_t *)c->a->sum);
    if (c->a->q8) qwi_q4i_bytes_rows(c->a->q, m0, m1, c->a->KP, (uint32_t *)c->a->q8);
    if (c->a->q8s) qwi_q4i_split_bytes_rows(c->a->q, m0, m1, c->a->KP, (uint32_t *)c->a->q8s);
}

/* The job's kernel is the integer one (U4/U8 codes, cpu/q4i.h). */
static bool is_int_pair(const qwi_cpu_linear *l) {
    return l->quant && l->qp.layout == QWI_QPANEL_PAIR && l->qp.fmt != QWI_QFMT_E4M3;
}

/* The job's kernel reads x as rounded bf16 pairs (cx->xpair). */
static bool reads_pairs(const qwi_cpu_linear *l) {
    return l->pair || (l->quant && l->qp.layout == QWI_QPANEL_PAIR && !is_int_pair(l));
}

bool qwi_cpu_jobs_read_pairs(const qwi_cpu_mm_job *jobs, int njobs) {
    for (int j = 0; j < njobs; j++)
        if (reads_pairs(jobs[j].lin)) return true;
    return false;
}

/* Bytes of l's weight per output column (input width K), in whatever layout
 * it is stored, for matmul_run's batch-1 task size (its L2 column block
 * keeps the coarser per-weight esize that the prefill tiles were tuned
 * with). */
static int64_t col_bytes_of(const qwi_cpu_linear *l, int64_t K) {
    if (l->quant) return qwi_qpanel_panel_bytes(l->qp.fmt, K) / QWI_QPANEL;
    if (l->pair) return 4 * qwi_pair_kp(K);
    return K * (int64_t)qwi_dtype_size(l->dtype);
}

/* What cx already holds of a call's x (matmul_run's x_ready). */
enum { X_PAIRS = 1, X_WIDE = 2 };

/* Whether the call's bf16 pair (matmul_pair_wide) or fp8 PAIR
 * (matmul_qpair_wide) jobs read x widened (cx->xwide). */
static bool reads_wide(const qwi_cpu_ctx *cx, int64_t M, const qwi_cpu_mm_job *jobs, int njobs) {
    if (!cx->xwide || M < QWI_PAIR_WIDE_MIN_M) return false;
    for (int j = 0; j < njobs; j++) {
        const qwi_cpu_linear *l = jobs[j].lin;
        const bool wide = l->quant ? reads_pairs(l) && cx->kt->matmul_qpair_wide
                                   : l->pair && cx->kt->matmul_pair_wide;
        if (wide) return true;
    }
    return false;
}

/* qwi_cpu_matmul; x_ready: X_PAIRS when cx->xpair already holds x's rounded
 * rows, X_WIDE when cx->xwide holds them widened too. */
static void matmul_run(const qwi_cpu_ctx *cx, const float *x, int64_t M, int64_t K,
                       const qwi_cpu_mm_job *jobs, int njobs, int x_ready) {
    if (M <= 0 || njobs <= 0) return;
    const bool round = !(x_ready & X_PAIRS) && qwi_cpu_jobs_read_pairs(jobs, njobs);
    const bool widen = !(x_ready & X_WIDE) && reads_wide(cx, M, jobs, njobs);
    if (round || widen) {
        /* once per call (before any split below), not per task: one
         * read and one write of x (the scalar widening loop was 0.9% of
         * a Zen 1 prefill's samples; the SSE2 one is less) */
        prep_ctx r = { .x = round ? x : NULL, .pairs = cx->xpair, .wide = widen ? cx->xwide : NULL,
                       .M = M, .K = K,
                       .rows = QWI_MAX((int64_t)1, QWI_DIV_UP(M, 2 * (int64_t)cx->nthreads)) };
        qwi_cpu_pool_run(cx->pool, QWI_DIV_UP(M, r.rows), prep_task, &r);
    }
    x_ready |= X_PAIRS | (widen ? X_WIDE : 0);
    if (njobs > 8) {               /* task_end holds 8; more is rare enough to split */
        matmul_run(cx, x, M, K, jobs, 8, x_ready);
        matmul_run(cx, x, M, K, jobs + 8, njobs - 8, x_ready);
        return;
    }
    /* X_WIDE: xwide holds this x (M >= QWI_PAIR_WIDE_MIN_M); each job's
     * task reads it where its kernel has a wide entry (mm_task) */
    mm_ctx c = { .cx = cx, .x = x, .M = M, .K = K, .jobs = jobs, .njobs = njobs,
                 .wide = (x_ready & X_WIDE) != 0 };
    int64_t total_n = 0, q4_gk = 0, col_bytes = INT64_MAX;
    int32_t q4_qmax = 0;
    bool q4_u4 = false;
    size_t esize = 4;
    bool panel = false, bf16_pair = true, packed = true;
    for (int j = 0; j < njobs; j++) {
        const qwi_cpu_linear *l = jobs[j].lin;
        if (is_int_pair(l)) {
            /* one quantization per call: jobs whose groups or Q differ
             * (QW_NUMERICS_FAST_INT8: int4's 127 next to int8's) each get their own, so
             * that a job's bits never depend on what it is fused with
             * (packing made sure each Q is nonzero) */
            int32_t qm = qwi_q4i_qmax(l->qp.group_k, l->qp.fmt);
            if (cx->q4_q8 && l->qp.fmt == QWI_QFMT_U4) qm = QWI_MIN(qm, QWI_Q4I_QMAX_INT8);
            if (q4_gk && (l->qp.group_k != q4_gk || qm != q4_qmax)) {
                for (int i = 0; i < njobs; i++) matmul_run(cx, x, M, K, &jobs[i], 1, x_ready);
                return;
            }
            q4_gk = l->qp.group_k;
            q4_qmax = qm;
            q4_u4 |= l->qp.fmt == QWI_QFMT_U4;
        }
        total_n += l->n;
        if (l->quant) esize = 1;   /* 0.5-1 byte per weight: the block math below */
        else if (qwi_dtype_size(l->dtype) < esize || l->pair) esize = QWI_MIN(esize, (size_t)2);
        panel |= l->panel || l->pair || l->quant;
        packed &= l->panel || l->pair || l->quant;
        bf16_pair &= l->pair;
        col_bytes = QWI_MIN(col_bytes, col_bytes_of(l, K));
    }
    if (q4_gk) {   /* the same for the integer jobs' quantized rows */
        c.q4 = (qwi_q4act){ .q = cx->q4_q, .d = cx->q4_d, .sum = cx->q4_sum,
                            .KP = qwi_pair_kp(K), .G = QWI_DIV_UP(K, q4_gk), .group_k = q4_gk,
                            .qmax = q4_qmax,
                            .q8 = q4_qmax <= QWI_Q4I_QMAX_INT8 ? cx->q4_q8 : NULL };
        /* batch-1 U4 jobs at Q > 127 on a table that reads the split form */
        if (!c.q4.q8 && M <= 2 && q4_u4) c.q4.q8s = cx->q4_q8s;
        q4_ctx r = { .x = x, .a = &c.q4, .M = M, .K = K,
                     .rows = QWI_MAX((int64_t)1, QWI_DIV_UP(M, 2 * (int64_t)cx->nthreads)) };
        qwi_cpu_pool_run(cx->pool, QWI_DIV_UP(M, r.rows), q4_task, &r);
    }
    /* Column block: about 64 KiB of weights (stays in L2 while the row tiles
     * sweep it), but small enough to give every thread several tasks. The
     * block size only moves work between tasks; it never changes a result. */
    int64_t cols = (int64_t)(65536 / ((size_t)K * esize + 1));
    cols = QWI_MAX(cols, 4);
    cols = QWI_MIN(cols, QWI_CPU_MM_MAX_COLS);
    int64_t per_thread = QWI_DIV_UP(total_n, 4 * (int64_t)cx->nthreads);
    if (cx->nthreads > 1) cols = QWI_MIN(cols, QWI_MAX(per_thread, 4));
    cols = (cols + 3) & ~(int64_t)3;           /* keep the 1x4 column tile whole */
    /* Packed weights: tasks start on a panel, and M = 1 streams four panels
     * at a time, so whole 64-row blocks unless that starves a thread. */
    if (panel) cols = total_n >= 8 * 64 * (int64_t)cx->nthreads ? 64 : (cols + 15) & ~(int64_t)15;
    cols = QWI_MIN(cols, QWI_CPU_MM_MAX_COLS);
    /* bf16 pair panels at 7-48 rows (concurrent decode; one row block of
     * the vdpbf16ps kernel): each task sweeps up to 4 panel groups in a
     * row, so that the kernel's prefetch of the next k block runs on into
     * the next group instead of every group's first block coming cold from
     * memory - while each thread keeps at least 8 tasks. M = 32 from
     * memory, one thread: 450 -> 485 GFLOP/s (qw-qbench --k 1024 --n 3072
     * --layers 42). */
    if (bf16_pair && M > 6 && M <= 48)
        while (cols < 256 && total_n >= 8 * 2 * cols * (int64_t)cx->nthreads) cols *= 2;
    /* Packed weights at M <= 2 (batch-1 decode): the call streams each
     * weight once. When tasks were handed out in turn from one counter,
     * each was a new stream for the hardware prefetchers to ramp up on: 64
     * columns of an int4 weight with K = 1024 are 32 KiB, about a
     * microsecond, and on a Zen 4 such tasks read 27-35 GB/s where
     * 256-column ones read 37-47 (qw-qbench --k 1024 --n 6144 --threads
     * 2, U4, interleaved panels). So tasks grow to about 128 KiB of weights
     * (bf16 at K >= 1024 already is), while every thread keeps at least 8
     * of them for the balance at the end. The pool now hands each thread a
     * contiguous share (threadpool.c), which keeps a thread's tasks one
     * stream; the larger tasks were kept (no difference measured). */
    if (packed && M <= 2)
        while (2 * cols * col_bytes <= 131072 && total_n >= 8 * 2 * cols * (int64_t)cx->nthreads)
            cols *= 2;
    c.cols = cols;
    int64_t acc = 0;
    for (int j = 0; j < njobs; j++) {
        acc += QWI_DIV_UP(jobs[j].lin->n, cols);
        c.task_end[j] = acc;
    }
    qwi_cpu_pool_run(cx->pool, acc, mm_task, &c);
}

void qwi_cpu_matmul(const qwi_cpu_ctx *cx, const float *x, int64_t M, int64_t K,
                    const qwi_cpu_mm_job *jobs, int njobs) {
    matmul_run(cx, x, M, K, jobs, njobs, 0);
}

void qwi_cpu_matmul_rounded(const qwi_cpu_ctx *cx, const float *x, int64_t M, int64_t K,
                            const qwi_cpu_mm_job *jobs, int njobs) {
    matmul_run(cx, x, M, K, jobs, njobs, X_PAIRS);
}

/* ---- row-wise ops ------------------------------------------------------- */

typedef struct rows_ctx {
    const float *a, *b;
    float *out;
    uint32_t *pairs;                          /* also round the rows here, or NULL */
    int64_t rows_per_task, M, n;
    float eps;
    const qwi_cpu_kv_bf16_kernels *act_exp;   /* silu: fast mode's exp, or NULL */
} rows_ctx;

/* Rows are grouped so that a task is worth waking a thread for. */
static int64_t rows_per_task(int64_t M, int64_t n, int nthreads) {
    int64_t r = QWI_MAX((int64_t)1, 16384 / QWI_MAX(n, (int64_t)1));
    return QWI_MAX((int64_t)1, QWI_MIN(r, QWI_DIV_UP(M, nthreads)));
}

static void rmsnorm_task(void *p, int64_t t, int thread) {
    const rows_ctx *c = p;
    int64_t r0 = t * c->rows_per_task, r1 = QWI_MIN(c->M, r0 + c->rows_per_task);
    for (int64_t r = r0; r < r1; r++)
        qwr_rmsnorm(c->a + r * c->n, c->b, c->n, c->eps, c->out + r * c->n);
    /* while the rows are still in this core's cache */
    if (c->pairs) qwi_pair_round_rows(c->out, r0, r1, c->n, c->pairs);
}

void qwi_cpu_rmsnorm_rows(const qwi_cpu_ctx *cx, const float *x, const float *w, int64_t M,
                          int64_t n, float eps, float *out, uint32_t *pairs) {
    rows_ctx c = { .a = x, .b = w, .out = out, .pairs = pairs, .M = M, .n = n, .eps = eps,
                   .rows_per_task = rows_per_task(M, n, cx->nthreads) };
    qwi_cpu_pool_run(cx->pool, QWI_DIV_UP(M, c.rows_per_task), rmsnorm_task, &c);
}

static void silu_task(void *p, int64_t t, int thread) {
    const rows_ctx *c = p;
    int64_t r0 = t * c->rows_per_task, r1 = QWI_MIN(c->M, r0 + c->rows_per_task);
    if (c->act_exp)
        qwi_cpu_silu_mul_fast(c->act_exp, c->a + r0 * c->n, c->b + r0 * c->n, (r1 - r0) * c->n,
                              c->out + r0 * c->n);
    else qwr_silu_mul(c->a + r0 * c->n, c->b + r0 * c->n, (r1 - r0) * c->n, c->out + r0 * c->n);
    if (c->pairs) qwi_pair_round_rows(c->out, r0, r1, c->n, c->pairs);
}

void qwi_cpu_silu_mul_rows(const qwi_cpu_ctx *cx, const float *gate, const float *up,
                           int64_t M, int64_t n, float *out, uint32_t *pairs) {
    rows_ctx c = { .a = gate, .b = up, .out = out, .pairs = pairs, .M = M, .n = n, .act_exp = cx->act_exp,
                   .rows_per_task = rows_per_task(M, n, cx->nthreads) };
    qwi_cpu_pool_run(cx->pool, QWI_DIV_UP(M, c.rows_per_task), silu_task, &c);
}
