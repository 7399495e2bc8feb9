/*
 * ops.h - the CPU backend's parallel drivers: split a kernel's work over the
 * thread pool by output columns or rows, never by the reduction dimension,
 * so that every output element is computed by exactly one task with the
 * arithmetic of the single-threaded kernel (thread count and batch size
 * cannot change a bit of the result).
 */
#ifndef QWI_CPU_OPS_H
#define QWI_CPU_OPS_H

#include "common.h"
#include "dtype.h"
#include "cpu/kernels.h"
#include "cpu/kv_bf16.h"
#include "cpu/qpanel.h"
#include "cpu/threadpool.h"

/* Largest number of weight rows one matmul task covers (a multiple of the
 * 16-row panel); also the height of the per-thread f16 conversion buffer. */
#define QWI_CPU_MM_MAX_COLS 64

/* Rows from which a call's bf16 and fp8 pair jobs read x widened
 * (cx->xwide, matmul_pair_wide / matmul_qpair_wide): below it, the
 * weights' stream bounds the call and the widening pass would be pure
 * cost. */
#define QWI_PAIR_WIDE_MIN_M 3

/* What the drivers share: the pool, the kernel table and per-thread scratch
 * for f16 weights. Borrowed pointers; owned by whoever fills it in. */
typedef struct qwi_cpu_ctx {
    qwi_cpu_pool *pool;
    const qwi_cpu_kernels *kt;
    int nthreads;                /* == qwi_cpu_pool_size(pool)                  */
    float *const *f16_buf;       /* [nthreads] of QWI_CPU_MM_MAX_COLS*max_k floats */
    int64_t max_k;               /* largest K any f16 matmul will use            */
    /* Fast numerics: the bf16 pairs of a pair-panel matmul's input rows
     * (cpu/pairpanel.h), at least M*ceil(K/2) for every such call; NULL when
     * no weight is in pair panels. */
    uint32_t *xpair;
    /* Fast numerics on a table with matmul_pair_wide or matmul_qpair_wide:
     * room for xpair's rows widened (qwi_pair_widen_rows), 2*M*ceil(K/2)
     * floats for every call with M >= QWI_PAIR_WIDE_MIN_M; NULL otherwise
     * (every pair job then reads xpair). */
    float *xwide;
    /* Fast numerics with int4/int8 (U4/U8) weights: such a matmul call's
     * input rows quantized once per call (cpu/q4i.h, matmul_q4i): q4_q
     * holds as many pairs as xpair, q4_d and q4_sum M times the weight's
     * groups per row entries each, for every call; NULL when no weight is
     * U4 or U8 (then no matmul may have one). q4_q8: NULL, or
     * QW_NUMERICS_FAST_INT8: U4 weights meet int8 activations
     * (QWI_Q4I_QMAX_INT8, cpu/q4i.h), and this is room for the byte form
     * of q4_q's rows (QWI_Q4I_Q8_WORDS words per row) that such calls
     * fill. q4_q8s: NULL, or room for 2 rows of the split byte form
     * (2 * QWI_Q4I_Q8_WORDS words per row), which batch-1 calls with U4
     * weights fill when q4_q8 is not used (a table whose matmul_q4i reads
     * it: kernels.h, q4i_reads_split). */
    uint32_t *q4_q;
    uint32_t *q4_q8;
    uint32_t *q4_q8s;
    float *q4_d;
    int32_t *q4_sum;
    /* Fast numerics: the bf16-KV table whose vexp the SiLU uses
     * (cpu/silu_fast.h); NULL in exact mode (libm expf). */
    const qwi_cpu_kv_bf16_kernels *act_exp;
} qwi_cpu_ctx;

/* A linear layer's weight: [n][k] of dtype, row-major or (panel) in the
 * panel layout of cpu/panel.h (f32/bf16 only), or (pair, fast numerics) in
 * the bf16 pair panels of cpu/pairpanel.h whatever dtype says, or (quant) a
 * quantized weight packed as qp (cpu/qpanel.h: SEQ layout in exact mode,
 * PAIR in fast mode; w, dtype, panel and pair unused); optional f32 bias
 * [n]. */
typedef struct qwi_cpu_linear {
    qwi_dtype dtype;
    const void *w;
    const float *bias;
    int64_t n, k;
    bool panel;
    bool pair;
    bool quant;
    qwi_qpanel qp;
    const qwi_qweight *qsrc;     /* quant: the loader's weight, until packed */
} qwi_cpu_linear;

/* One output of a (possibly fused) matmul call. */
typedef struct qwi_cpu_mm_job {
    const qwi_cpu_linear *lin;
    float *out;                  /* [M][lin->n]                                 */
    int accumulate;              /* 1: out += x W^T (+bias), a residual add      */
} qwi_cpu_mm_job;

/* For each job, out = x[M][k] W^T (+bias): all jobs share x and run in one
 * parallel pass (q/k/v, gate/up), their column blocks interleaved as tasks.
 * Every job's k must equal K. f16 weights need cx->f16_buf with
 * max_k >= K; pair-panel weights need cx->xpair (x is rounded to bf16 pairs
 * there once per call, then every job reads the pairs), fast-mode U4/U8
 * weights cx->q4_* (x is quantized there once per call; jobs with
 * different group sizes run as separate calls). No allocation; cannot fail
 * on valid input. */
void qwi_cpu_matmul(const qwi_cpu_ctx *cx, const float *x, int64_t M, int64_t K,
                    const qwi_cpu_mm_job *jobs, int njobs);

/* qwi_cpu_matmul for an x whose rows [0, M) cx->xpair already holds as
 * qwi_pair_round_rows(x, 0, M, K, cx->xpair) writes them (the row ops
 * below round as they go): the same results without the call's rounding
 * pass. x itself must still be valid (U4/U8 and exact-layout jobs read it). */
void qwi_cpu_matmul_rounded(const qwi_cpu_ctx *cx, const float *x, int64_t M, int64_t K,
                            const qwi_cpu_mm_job *jobs, int njobs);

/* Whether any of the jobs reads x as cx->xpair's bf16 pairs (bf16 pair
 * panels, fp8 PAIR panels): the calls whose x is worth rounding
 * ahead. Pure. */
bool qwi_cpu_jobs_read_pairs(const qwi_cpu_mm_job *jobs, int njobs);

/* out[r] = rmsnorm(x[r]) for r in [0, M) rows of n, parallel over rows.
 * pairs: when not NULL, every out row is also rounded into it as
 * qwi_pair_round_rows does (for qwi_cpu_matmul_rounded), by the task that
 * computed it. */
void qwi_cpu_rmsnorm_rows(const qwi_cpu_ctx *cx, const float *x, const float *w, int64_t M,
                          int64_t n, float eps, float *out, uint32_t *pairs);

/* out[r] = silu(gate[r]) * up[r] over M rows of n (out may alias gate);
 * with cx->act_exp set, by qwi_cpu_silu_mul_fast. pairs: as for
 * qwi_cpu_rmsnorm_rows. */
void qwi_cpu_silu_mul_rows(const qwi_cpu_ctx *cx, const float *gate, const float *up,
                           int64_t M, int64_t n, float *out, uint32_t *pairs);

#endif
