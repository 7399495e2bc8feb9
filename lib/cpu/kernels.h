/*
 * kernels.h - the CPU backend's single-threaded compute kernels (qwr_*) and
 * the table through which the backend calls the hot ones.
 *
 * Determinism contract, which every variant in the table must keep: the
 * value of an output element depends only on its own inputs (one activation
 * row, one weight row, K), never on how many rows or columns are computed in
 * the same call. Dot products accumulate in QWR_LANES partial sums, lane j
 * taking elements k with k % QWR_LANES == j in increasing k, then a fixed
 * tree; the multi-row kernels do exactly the per-element arithmetic of the
 * one-row kernel. No reassociation (no fast-math), so the compiler may
 * vectorise but cannot change the result.
 *
 * All activations are f32; weights are f32, bf16 or f16 ([N][K] row-major,
 * Hugging Face's [out, in]) - except matmul_pair, the fast numerics mode's
 * kernel, which takes bf16 activation pairs and bf16 pair panels
 * (cpu/pairpanel.h) and keeps its own one-chain contract (below).
 *
 * ISA variants (kernels_avx2.c, kernels_avx512.c) keep the same contract
 * with their own fixed lane count and FMA steps, written at the top of each
 * file: each is bit-identical to itself for any M, N and thread count, and
 * within rounding (not bit-identical) of the portable table. Mixing tables
 * would break batched == alone, so the backend asks qwi_cpu_kernels_select()
 * once and every op of the process uses that one table.
 *
 * Panel kernels (matmul_*_panel) take weights in the panel layout of
 * cpu/panel.h and have a different, simpler contract: each output element is
 * one chain over k = 0, 1, ..., K-1 in order, acc = step(acc, x[k], w[k])
 * starting from 0 (the portable step is a multiply then an add, the ISA
 * tables' a fused multiply-add), then bias and accumulate as for the
 * row-major kernels. No lanes, no tree: again independent of M, N, the tile
 * and the thread. A weight is either row-major or packed for the life of a
 * backend, so every output element always takes the same path.
 */
#ifndef QWI_CPU_KERNELS_H
#define QWI_CPU_KERNELS_H

#include "common.h"
#include "dtype.h"

#define QWR_LANES 8

/* QWR_ISA_CLONES: a portable row kernel (norms, RoPE, bf16 rounding)
 * compiled once per x86 ISA level and picked by the loader (GCC's
 * function multiversioning through an ifunc). Why: at the baseline ISA
 * these lane loops vectorise to 16-byte SSE and were ~5% of a 512-token
 * prefill. The clones compile the same C under -ffp-contract=off, and
 * vectorising changes no evaluation order (no reassociation without
 * -ffast-math), so every clone gives the same bits: what the tests check
 * of the one that runs holds for all. Elsewhere it expands to nothing;
 * so with Clang too (whose clones (14, 15) are not reachable by name from
 * other translation units unless every declaration carries the attribute),
 * and under ThreadSanitizer, whose instrumented ifunc resolver crashes at
 * relocation time, before the runtime is up. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__) && \
    !defined(__SANITIZE_THREAD__) && !defined(QWI_NO_ISA_CLONES)
#define QWR_ISA_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define QWR_ISA_CLONES
#endif

/* out[m*ldo + n] (=|+=) dot(x[m*K ..], w[n*K ..]) + bias[n], for m in [0,M),
 * n in [0,N). x, w and out point at the first row/column wanted; bias may be
 * NULL; accumulate != 0 adds to out (a fused residual add) as
 * out + (dot + bias). */
typedef void (*qwr_matmul_f32_fn)(const float *x, int64_t M, int64_t K, const float *w,
                                  int64_t N, const float *bias, float *out, int64_t ldo,
                                  int accumulate);
typedef void (*qwr_matmul_u16_fn)(const float *x, int64_t M, int64_t K, const uint16_t *w,
                                  int64_t N, const float *bias, float *out, int64_t ldo,
                                  int accumulate);

/* The fast numerics mode's matmul (QW_NUMERICS_FAST; kernels_bf16dot.c has
 * the contract): x is M rows of KP bf16 pairs (cpu/pairpanel.h, row stride
 * KP), w the pair panels holding output column 0 of the call (the caller's
 * first column is a multiple of 16; N may end inside a panel); otherwise as
 * qwr_matmul_f32_fn. Each output is one chain over the pairs in order,
 * acc += x_odd*w_odd then acc += x_even*w_even, exactly vdpbf16ps's lane:
 * bit-identical for any M, N, tile and thread, and bit-identical between
 * the generic, AVX2, AVX-512 and AVX512_BF16 tables whenever no product or
 * partial sum falls below FLT_MIN (inputs are never subnormal: pairpanel.h
 * flushes them at rounding). Found on an AMD Zen 5 (AVX512_BF16): 327,680
 * outputs of [-1,1] data and of data spanning 2^-75..2^-36 were identical
 * in all four tables, and tests/test_fast_numerics.c checks it for every
 * table; with products clustered at 2^-132..2^-128 every output differed
 * (vdpbf16ps flushes subnormal products/sums, FMA and multiply-then-add
 * round them, and those two differ from each other too). */
typedef void (*qwr_matmul_pair_fn)(const uint32_t *x, int64_t M, int64_t KP, const uint32_t *w,
                                   int64_t N, const float *bias, float *out, int64_t ldo,
                                   int accumulate);

/* qwr_matmul_pair_fn with x widened: row m of x's pairs at xw + m*2*KP as
 * qwi_pair_widen_rows writes it (xw[2j] the f32 of pair j's low half,
 * xw[2j+1] of its high half). The same bits as matmul_pair of the pairs.
 * For kernels that would otherwise split every broadcast pair into its
 * halves in the k loop, once per tile; the driver (cpu/ops.h) widens a
 * call's x once, for all its tasks. */
typedef void (*qwr_matmul_pair_wide_fn)(const float *xw, int64_t M, int64_t KP,
                                        const uint32_t *w, int64_t N, const float *bias,
                                        float *out, int64_t ldo, int accumulate);

/* The quantized matmuls (cpu/qpanel.h has the layout and the arithmetic
 * contract, bit-identical between tables): x as for qwr_matmul_f32_fn
 * (matmul_qf32, exact mode, w in the SEQ layout) or as for
 * qwr_matmul_pair_fn (matmul_qpair, fast mode, w in the PAIR layout); w is
 * the whole packed weight and n0 (a multiple of 16) the weight row of the
 * call's output column 0; out and bias point at column 0 of the call, N
 * columns (may end inside a panel). matmul_qpair takes E4M3 weights
 * only: the fast mode's U4 and U8 are matmul_q4i's (below). */
struct qwi_qpanel;
typedef void (*qwr_matmul_qf32_fn)(const float *x, int64_t M, int64_t K,
                                   const struct qwi_qpanel *w, int64_t n0, int64_t N,
                                   const float *bias, float *out, int64_t ldo, int accumulate);
typedef void (*qwr_matmul_qpair_fn)(const uint32_t *x, int64_t M, int64_t KP,
                                    const struct qwi_qpanel *w, int64_t n0, int64_t N,
                                    const float *bias, float *out, int64_t ldo, int accumulate);
/* matmul_qpair with x widened, as qwr_matmul_pair_wide_fn takes it: the
 * same bits as matmul_qpair of the pairs. */
typedef void (*qwr_matmul_qpair_wide_fn)(const float *xw, int64_t M, int64_t KP,
                                         const struct qwi_qpanel *w, int64_t n0, int64_t N,
                                         const float *bias, float *out, int64_t ldo,
                                         int accumulate);

/* The fast mode's int4/int8 matmul (cpu/q4i.h has the activation form and
 * the arithmetic contract, bit-identical between tables): x the call's
 * quantized activation rows (row 0 = the call's first row; x->group_k ==
 * w->group_k, x->qmax <= qwi_q4i_qmax(group_k, w->fmt); x->q8 their byte
 * form and x->q8s their split byte form, each NULL or filled, which
 * kernels may read instead of x->q), w a U4 or U8
 * weight in the PAIR layout, n0, N, bias, out, ldo and accumulate as for
 * matmul_qpair. */
struct qwi_q4act;
typedef void (*qwr_matmul_q4i_fn)(const struct qwi_q4act *x, int64_t M, const struct qwi_qpanel *w,
                                  int64_t n0, int64_t N, const float *bias, float *out,
                                  int64_t ldo, int accumulate);

/* The hot kernels, chosen once per process; ISA-specific variants slot in
 * here without touching the callers. */
typedef struct qwi_cpu_kernels {
    const char *name;
    qwr_matmul_f32_fn matmul_f32;
    qwr_matmul_u16_fn matmul_bf16;   /* f16 weights go through f32 after conversion */
    /* The same products with w in the panel layout (cpu/panel.h): w points
     * at the panel that holds output column 0 of the call (so the caller's
     * first column is a multiple of 16) and N may end inside a panel. */
    qwr_matmul_f32_fn matmul_f32_panel;
    qwr_matmul_u16_fn matmul_bf16_panel;
    /* The fast mode's bf16 pair product (see qwr_matmul_pair_fn). */
    qwr_matmul_pair_fn matmul_pair;
    /* The same from widened x (qwr_matmul_pair_wide_fn), which the driver
     * uses at M >= QWI_PAIR_WIDE_MIN_M; NULL in the tables where matmul_pair
     * is as fast (generic: no gain; avx512/avx512bf16: not measured). A
     * table with either wide entry gets cx->xwide from the backend. */
    qwr_matmul_pair_wide_fn matmul_pair_wide;
    /* Quantized weights (cpu/qpanel.h): exact and fast mode. */
    qwr_matmul_qf32_fn matmul_qf32;
    qwr_matmul_qpair_fn matmul_qpair;
    qwr_matmul_qpair_wide_fn matmul_qpair_wide;   /* as matmul_pair_wide; NULL but in avx2 */
    qwr_matmul_q4i_fn matmul_q4i;     /* fast mode, U4/U8 weights (cpu/q4i.h) */
    /* Whether matmul_q4i reads x->q8s (the split byte form of cpu/q4i.h)
     * at M <= 2 when it is given and is faster for it (the AVX-512 tables
     * with AVX512_VNNI): a context for this table then fills it (cpu/ops.h,
     * q4_q8s). */
    bool q4i_reads_split;
    float (*dot)(const float *a, const float *b, int64_t n);
    /* o[i] += s * v[i] for i in [0, n): element-wise, so the result of an
     * element never depends on n or its index (attention's P.V). */
    void (*axpy)(float *o, float s, const float *v, int64_t n);
    /* Attention's batched forms, bit-identical to the single calls:
     * out[i] = dot(a, b[i], n) for i < 4, computed side by side (one dot is
     * a single FMA chain per lane, too short to hide the FMA latency);
     * and the four axpys o += s[0]*v[0], ..., o += s[3]*v[3] in that order,
     * o loaded and stored once. */
    void (*dot4)(const float *a, const float *const b[4], int64_t n, float out[4]);
    void (*axpy4)(float *o, const float s[4], const float *const v[4], int64_t n);
    /* The same for two q heads of one GQA group sharing the K/V rows (each
     * row loaded once for both): dot4 of a0 into out0 and of a1 into out1;
     * axpy4 of (o0, s0) and of (o1, s1). Bit-identical to the single forms. */
    void (*dot4x2)(const float *a0, const float *a1, const float *const b[4], int64_t n,
                   float out0[4], float out1[4]);
    void (*axpy4x2)(float *o0, float *o1, const float s0[4], const float s1[4],
                    const float *const v[4], int64_t n);
} qwi_cpu_kernels;

/* The kernel table of this process: the widest variant the CPU supports
 * (avx512bf16, then avx512, avx2, generic), unless the environment
 * variable QWINFER_CPU_KERNELS names one (generic|avx2|avx512|avx512bf16|
 * amx; an unavailable or unknown name falls back to the automatic
 * choice). "avx512bf16" is the avx512 table with the vdpbf16ps
 * matmul_pair; the avx512 table emulates it with zmm FMAs, avx2 with ymm
 * FMAs, generic in C (all bit-identical). "amx" is avx512bf16 with the
 * AMX matmul_pair (its last bits its own), chosen only by name until its
 * kernel has run and been timed on a CPU with AMX (kernels.c). Decided on the first
 * call and fixed for the life of the process, so every engine and every op
 * agree. Thread-safe. Static storage; never NULL. */
const qwi_cpu_kernels *qwi_cpu_kernels_select(void);

/* Which instructions kt's int4/int8 matmul (matmul_q4i) runs on:
 * "avx-vnni", "avx512-vnni", "avx512bw", "avx2" or "portable" (or the
 * tests' and qw-qbench's "avx-vnni (evex stand-in)"). The avx2
 * and avx512 tables pick theirs by CPUID, so the table's name alone does
 * not tell (for the benchmarks' reports). Static storage. */
const char *qwi_cpu_kernels_q4i_isa(const qwi_cpu_kernels *kt);

/* Whether kt has a kernel that reads x widened (matmul_pair_wide or
 * matmul_qpair_wide), i.e. whether a context for it needs cx->xwide
 * (cpu/ops.h): the backend and the benchmarks size their scratch by it. */
static inline bool qwi_cpu_kernels_read_wide(const qwi_cpu_kernels *kt) {
    return kt->matmul_pair_wide || kt->matmul_qpair_wide;
}

/* The portable C kernels, always available (tests compare against them). */
const qwi_cpu_kernels *qwi_cpu_kernels_generic(void);

/* The AVX2+FMA and AVX-512F tables, or NULL where this CPU (per CPUID) or
 * this build (non-x86) lacks them. Static storage. Their matmul_pair is
 * NULL: qwi_cpu_kernels_by_name() returns the complete tables (what the
 * backend and tests use). */
const qwi_cpu_kernels *qwi_cpu_kernels_avx2(void);
const qwi_cpu_kernels *qwi_cpu_kernels_avx512(void);

/* The AVX2+FMA panel kernels (x86-64 builds only; call them only where
 * qwi_cpu_kernels_avx2() is not NULL). */
void qwi_avx2_matmul_f32_panel(const float *x, int64_t M, int64_t K, const float *w, int64_t N,
                               const float *bias, float *out, int64_t ldo, int accumulate);
void qwi_avx2_matmul_bf16_panel(const float *x, int64_t M, int64_t K, const uint16_t *w,
                                int64_t N, const float *bias, float *out, int64_t ldo,
                                int accumulate);

/* The AVX-512F panel kernels (kernels_avx512_panel.c; x86-64 builds only,
 * call them only where qwi_cpu_kernels_avx512() is not NULL): zmm register
 * tiles, bit-identical to the AVX2 panel kernels above. */
void qwi_avx512_matmul_f32_panel(const float *x, int64_t M, int64_t K, const float *w,
                                 int64_t N, const float *bias, float *out, int64_t ldo,
                                 int accumulate);
void qwi_avx512_matmul_bf16_panel(const float *x, int64_t M, int64_t K, const uint16_t *w,
                                  int64_t N, const float *bias, float *out, int64_t ldo,
                                  int accumulate);

/* The table named name ("generic", "avx2", "avx512", "avx512bf16",
 * "amx"), with its matmul_pair, or NULL if unknown or not available here.
 * Static storage. The first lookup of "amx" asks Linux for the process's
 * AMX permission (qwi_pair_amx_usable). */
const qwi_cpu_kernels *qwi_cpu_kernels_by_name(const char *name);

/* o[i] += s * v[i] (the portable axpy: a multiply, then an add). */
void qwr_axpy(float *o, float s, const float *v, int64_t n);

/* The portable dot4/axpy4: four qwr_dot / qwr_axpy calls. */
void qwr_dot4(const float *a, const float *const b[4], int64_t n, float out[4]);
void qwr_axpy4(float *o, const float s[4], const float *const v[4], int64_t n);
void qwr_dot4x2(const float *a0, const float *a1, const float *const b[4], int64_t n,
                float out0[4], float out1[4]);
void qwr_axpy4x2(float *o0, float *o1, const float s0[4], const float s1[4],
                 const float *const v[4], int64_t n);

/* sum a[i]*b[i] in the lane order of the contract above. */
float qwr_dot(const float *a, const float *b, int64_t n);

/* Reference matmuls of the generic table (see qwr_matmul_f32_fn). */
void qwr_matmul_f32(const float *x, int64_t M, int64_t K, const float *w, int64_t N,
                    const float *bias, float *out, int64_t ldo, int accumulate);
void qwr_matmul_bf16(const float *x, int64_t M, int64_t K, const uint16_t *w, int64_t N,
                     const float *bias, float *out, int64_t ldo, int accumulate);

/* Reference panel matmuls of the generic table (same arguments, w packed). */
void qwr_matmul_f32_panel(const float *x, int64_t M, int64_t K, const float *w, int64_t N,
                          const float *bias, float *out, int64_t ldo, int accumulate);
void qwr_matmul_bf16_panel(const float *x, int64_t M, int64_t K, const uint16_t *w, int64_t N,
                           const float *bias, float *out, int64_t ldo, int accumulate);

/* The matmul_pair kernels (kernels_bf16dot.c): portable C, AVX2+FMA
 * emulation (x86-64 builds; call only where qwi_cpu_kernels_avx2() is not
 * NULL) and vdpbf16ps (call only where qwi_bf16dot_have_avx512bf16()). */
void qwr_matmul_pair(const uint32_t *x, int64_t M, int64_t KP, const uint32_t *w, int64_t N,
                     const float *bias, float *out, int64_t ldo, int accumulate);
void qwi_bf16dot_matmul_avx2(const uint32_t *x, int64_t M, int64_t KP, const uint32_t *w,
                             int64_t N, const float *bias, float *out, int64_t ldo,
                             int accumulate);
/* Its matmul_pair_wide (same conditions): the same tiles with each row's
 * halves broadcast from widened x. */
void qwi_bf16dot_matmul_avx2_wide(const float *xw, int64_t M, int64_t KP, const uint32_t *w,
                                  int64_t N, const float *bias, float *out, int64_t ldo,
                                  int accumulate);
void qwi_bf16dot_matmul_avx512bf16(const uint32_t *x, int64_t M, int64_t KP, const uint32_t *w,
                                   int64_t N, const float *bias, float *out, int64_t ldo,
                                   int accumulate);
/* The AVX-512F emulation (kernels_bf16dot_avx512.c; x86-64 builds; call
 * only where qwi_cpu_kernels_avx512() is not NULL): the AVX2 emulation's
 * arithmetic in zmm tiles, bit-identical to it. */
void qwi_bf16dot_matmul_avx512(const uint32_t *x, int64_t M, int64_t KP, const uint32_t *w,
                               int64_t N, const float *bias, float *out, int64_t ldo,
                               int accumulate);
/* Whether this CPU (CPUID) and build can run vdpbf16ps (AVX512F + AVX512_BF16). */
bool qwi_bf16dot_have_avx512bf16(void);

/* The "amx" table's matmul_pair (pair_amx.c; cpu/pair_tiles.h has the
 * tiling): AMX tile ops of 16 pairs, one per chunk in order. Each output
 * is bit-identical for any M, N, tile and thread, like every table's; but
 * not to the other tables: how one tdpbf16ps sums its 32 products is the
 * hardware's (within f32 rounding of the chain above). Call only where
 * qwi_pair_amx_usable(). */
void qwi_pair_amx_matmul(const uint32_t *x, int64_t M, int64_t KP, const uint32_t *w, int64_t N,
                         const float *bias, float *out, int64_t ldo, int accumulate);
/* The same tiling over a C model of the tiles whose tile op takes the
 * chain above (pair_amx_model.c): bit-identical to qwr_matmul_pair, on any
 * CPU. For the tests; aborts on a tile configuration the hardware would
 * refuse. */
void qwi_pair_amx_model_matmul(const uint32_t *x, int64_t M, int64_t KP, const uint32_t *w,
                               int64_t N, const float *bias, float *out, int64_t ldo,
                               int accumulate);
/* Whether this CPU has AMX-TILE and AMX-BF16, the operating system has
 * enabled their state, and this process has Linux's permission to use it
 * (asked for on the first call: arch_prctl ARCH_REQ_XCOMP_PERM). False on
 * other systems and builds. Thread-safe; the answer is fixed after the
 * first call. */
bool qwi_pair_amx_usable(void);
/* iters x 4 tile ops of 16 x 16 x 32 bf16 products (16384 FLOP each) on
 * tiles held in the registers: qw-bench's AMX peak. Returns one result
 * value (a sink). Call only where qwi_pair_amx_usable(). */
float qwi_pair_amx_peak_loop(long iters);

/* The quantized matmuls (kernels_quant*.c; see qwr_matmul_qf32_fn):
 * portable C (fmaf), AVX2+FMA+F16C and AVX-512F (x86-64 builds; call only
 * where qwi_cpu_kernels_avx2() / _avx512() is not NULL; the AVX-512 ones
 * also use AVX2 and F16C, which every AVX-512 CPU has), and the vdpbf16ps
 * matmul_qpair (call only where qwi_bf16dot_have_avx512bf16()). */
void qwr_matmul_qf32(const float *x, int64_t M, int64_t K, const struct qwi_qpanel *w,
                     int64_t n0, int64_t N, const float *bias, float *out, int64_t ldo,
                     int accumulate);
void qwr_matmul_qpair(const uint32_t *x, int64_t M, int64_t KP, const struct qwi_qpanel *w,
                      int64_t n0, int64_t N, const float *bias, float *out, int64_t ldo,
                      int accumulate);
void qwi_avx2_matmul_qf32(const float *x, int64_t M, int64_t K, const struct qwi_qpanel *w,
                          int64_t n0, int64_t N, const float *bias, float *out, int64_t ldo,
                          int accumulate);
void qwi_avx2_matmul_qpair_wide(const float *xw, int64_t M, int64_t KP,
                                const struct qwi_qpanel *w, int64_t n0, int64_t N,
                                const float *bias, float *out, int64_t ldo, int accumulate);
void qwi_avx2_matmul_qpair(const uint32_t *x, int64_t M, int64_t KP, const struct qwi_qpanel *w,
                           int64_t n0, int64_t N, const float *bias, float *out, int64_t ldo,
                           int accumulate);
void qwi_avx512_matmul_qf32(const float *x, int64_t M, int64_t K, const struct qwi_qpanel *w,
                            int64_t n0, int64_t N, const float *bias, float *out, int64_t ldo,
                            int accumulate);
void qwi_avx512_matmul_qpair(const uint32_t *x, int64_t M, int64_t KP,
                             const struct qwi_qpanel *w, int64_t n0, int64_t N,
                             const float *bias, float *out, int64_t ldo, int accumulate);
void qwi_avx512bf16_matmul_qpair(const uint32_t *x, int64_t M, int64_t KP,
                                 const struct qwi_qpanel *w, int64_t n0, int64_t N,
                                 const float *bias, float *out, int64_t ldo, int accumulate);
/* qwi_avx512bf16_matmul_qpair with E4M3 decode (M <= 2) through AVX512_VBMI
 * byte tables (same bits; call only where that one may be called and the
 * CPU has avx512bw and avx512vbmi). */
void qwi_avx512vbmi_matmul_qpair(const uint32_t *x, int64_t M, int64_t KP,
                                 const struct qwi_qpanel *w, int64_t n0, int64_t N,
                                 const float *bias, float *out, int64_t ldo, int accumulate);

/* The int4/int8 matmuls (see qwr_matmul_q4i_fn): portable (q4i.c), AVX2,
 * AVX-512 with AVX512BW, and with AVX512BW + AVX512_VNNI (q4i_x86.c), the
 * AVX2 one with AVX-VNNI (q4i_avxvnni.c) and with AVX512_VNNI + AVX512VL
 * on ymm (q4i_avxvnni_evex.c: for tests and benchmarks); call each only
 * where the CPU has those. All give the same bits. */
void qwr_matmul_q4i(const struct qwi_q4act *x, int64_t M, const struct qwi_qpanel *w, int64_t n0,
                    int64_t N, const float *bias, float *out, int64_t ldo, int accumulate);
void qwi_avx2_matmul_q4i(const struct qwi_q4act *x, int64_t M, const struct qwi_qpanel *w,
                         int64_t n0, int64_t N, const float *bias, float *out, int64_t ldo,
                         int accumulate);
void qwi_avx512_matmul_q4i(const struct qwi_q4act *x, int64_t M, const struct qwi_qpanel *w,
                           int64_t n0, int64_t N, const float *bias, float *out, int64_t ldo,
                           int accumulate);
void qwi_avx512vnni_matmul_q4i(const struct qwi_q4act *x, int64_t M, const struct qwi_qpanel *w,
                               int64_t n0, int64_t N, const float *bias, float *out, int64_t ldo,
                               int accumulate);
void qwi_avxvnni_matmul_q4i(const struct qwi_q4act *x, int64_t M, const struct qwi_qpanel *w,
                            int64_t n0, int64_t N, const float *bias, float *out, int64_t ldo,
                            int accumulate);
void qwi_avxvnni_evex_matmul_q4i(const struct qwi_q4act *x, int64_t M, const struct qwi_qpanel *w,
                                 int64_t n0, int64_t N, const float *bias, float *out, int64_t ldo,
                                 int accumulate);

/* Convert n elements of dtype dt at src to f32 in dst (exact for all three). */
void qwr_to_f32(qwi_dtype dt, const void *src, int64_t n, float *dst);

/* out[i] = x[i] * (1/sqrt(mean(x^2) + eps)) * w[i], f32 accumulation in lane
 * order. out may alias x. */
void qwr_rmsnorm(const float *x, const float *w, int64_t n, float eps, float *out);

/* The same RMSNorm applied to each of nheads consecutive head_dim vectors
 * of x, in place (Qwen3's q_norm/k_norm). */
void qwr_head_rmsnorm(float *x, int64_t nheads, int64_t head_dim, const float *w, float eps);

/* Fill cos_out/sin_out[0 .. head_dim/2) for position pos: angle
 * pos * inv_freq[i], computed in double and rounded to f32 once. */
void qwr_rope_table(const double *inv_freq, int64_t half, int64_t pos, float *cos_out,
                    float *sin_out);

/* NeoX RoPE (rotate_half over the full head_dim) of nheads consecutive heads
 * of x in place, with the tables of qwr_rope_table. */
void qwr_rope_neox(float *x, int64_t nheads, int64_t head_dim, const float *cos_t,
                   const float *sin_t);

/* out[i] = silu(gate[i]) * up[i]; out may alias gate or up. */
void qwr_silu_mul(const float *gate, const float *up, int64_t n, float *out);

/* x[i] += y[i]. */
void qwr_add(float *x, const float *y, int64_t n);

/* Row `row` of an embedding table [rows][n] of dtype dt, as f32, into out. */
void qwr_embed_row(qwi_dtype dt, const void *table, int64_t row, int64_t n, float *out);

#endif
