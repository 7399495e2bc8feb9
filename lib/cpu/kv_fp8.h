/*
 * kv_fp8.h - attention kernels over an fp8 (e4m3) KV cache
 * (QW_KV_CACHE_FP8_E4M3), and the rounding that writes K/V rows into it.
 *
 * The cache holds one byte per element, a quarter of the f32 cache: an
 * element x of layer l is stored as e4m3(x / scale) (lib/fp8.h: nearest
 * even, saturating at +-448) with scale the layer's k_scale or v_scale,
 * and its value when read is e4m3(b) * scale. Attention reads the cache
 * the way the bf16 cache is read (cpu/kv_bf16.h: K tile widened and
 * transposed once (from the K planes: a widening copy), scores with positions as lanes, P.V with the
 * accumulators in registers); only the two kernels that load cache
 * elements differ, and the rest (tscores_q, exp_sum, vexp, scale) comes
 * from the bf16 table of the same width.
 *
 * Where the scales go: e4m3(b) widens to f32 exactly, and the scales are
 * applied once per score and once per output instead of once per element
 * - score = (attention scale * k_scale) * sum_d q[d] * e4m3(k[d]), output
 * = (v_scale / sum) * sum_j p[j] * e4m3(v[j]) - the same value in exact
 * arithmetic as widening then multiplying every element by its scale,
 * with fewer roundings, and no multiply in the loops that read the cache.
 *
 * Determinism contract (as kv_bf16.h): transpose is exact, so every table
 * writes the same bits; pv is, for each output, one chain over the
 * positions in order - an FMA per step in the avx2 and avx512 tables,
 * which therefore give the same bits as each other, and a multiply then an
 * add in the generic one (within rounding of them). Within one table a
 * row's result does not depend on nq, n's split into calls or the other
 * rows, so fp8-KV attention is bit-identical alone or in any batch. The
 * backend picks the table matching its f32 kernel table once
 * (qwi_cpu_kv_fp8_for).
 */
#ifndef QWI_CPU_KV_FP8_H
#define QWI_CPU_KV_FP8_H

#include "common.h"
#include "cpu/kernels.h"

typedef struct qwi_cpu_kv_fp8_kernels {
    const char *name;
    /* kt[d * ld + j] = e4m3(k[j][d * dstride]) widened to f32 (exact), j <
     * n <= ld, d < hd: one K tile as the [hd][ld] matrix tscores reads
     * (lanes n .. ld-1 left as they were); k[j] and dstride as
     * qwi_cpu_kv_bf16_transpose's (K planes, or rows with dstride 1). */
    void (*transpose)(const uint8_t *const *k, int32_t n, int64_t hd, int64_t dstride, float *kt,
                      int64_t ld);
    /* For each i < nq and e < hd: o[i][e] = o[i][e] + p[i][j] *
     * e4m3(v[j][e]) for j = 0 .. n-1 in that order (FMA; generic: multiply
     * then add). */
    void (*pv)(float *const *o, const float *const *p, int32_t nq, const uint8_t *const *v,
               int32_t n, int64_t hd);
    /* Optional (NULL: the bf16 table's pscores8_q, cpu/kv_bf16.h, runs):
     * the scores straight from fp8 K planes, that entry's contract and
     * bits, with this table's own widen. Only an AVX-512 table has one,
     * and it runs in 16-position chunks: qwi_cpu_kv_fp8_for pairs it with
     * the AVX-512 bf16 tables, whose plane_lanes (16) the caller checks
     * the block size against. */
    void (*pscores8_q)(const float *const *q, float *const *out, int32_t nq, int64_t hd,
                       const uint8_t *const *kpl, int64_t dstride, int32_t n, float scale);
} qwi_cpu_kv_fp8_kernels;

/* The portable table; always available. Static storage. */
const qwi_cpu_kv_fp8_kernels *qwi_cpu_kv_fp8_generic(void);

/* The AVX2+FMA+F16C and AVX-512F tables, or NULL where the CPU or build
 * lacks them. Static storage. */
const qwi_cpu_kv_fp8_kernels *qwi_cpu_kv_fp8_avx2(void);
const qwi_cpu_kv_fp8_kernels *qwi_cpu_kv_fp8_avx512(void);

/* The avx512 table with P.V and the K-plane scores widening by byte
 * permutes (AVX512_VBMI, cpu/kv_fp8_vbmi.c): the same bits, fewer
 * instructions. NULL where the CPU or build lacks it. Static storage;
 * thread-safe. */
const qwi_cpu_kv_fp8_kernels *qwi_cpu_kv_fp8_avx512vbmi(void);

/* The avx512 table with P.V and the K-plane scores widening by nibble
 * tables in zmm registers (AVX512BW, cpu/kv_fp8_bw.c): the same bits,
 * fewer instructions, for AVX-512 CPUs without VBMI. NULL where the CPU
 * or build lacks it. Static storage; thread-safe. */
const qwi_cpu_kv_fp8_kernels *qwi_cpu_kv_fp8_avx512bw(void);

/* The table that goes with f32 kernel table kt, by the rule of
 * qwi_cpu_kv_bf16_for (generic for "generic", avx2 for "avx2", else the
 * widest this CPU runs: avx512vbmi where it has AVX512_VBMI, else
 * avx512bw where it has AVX512BW, else avx512). The environment variable
 * QWINFER_CPU_KV_FP8 (read on every call) may name another of the tables
 * the rule chooses among for kt - generic always, avx2 for "avx2",
 * avx512vbmi / avx512bw / avx512 for the AVX-512 f32 tables - where the
 * CPU runs it; any other value is ignored. All give the same bits but
 * generic, so this only moves speed: for benchmarks and bisecting. Never
 * NULL. Thread-safe. */
const qwi_cpu_kv_fp8_kernels *qwi_cpu_kv_fp8_for(const qwi_cpu_kernels *kt);

/* The generic transpose (see the table's). */
void qwi_cpu_kv_fp8_transpose(const uint8_t *const *k, int32_t n, int64_t hd, int64_t dstride,
                              float *kt, int64_t ld);

/* dst[i] = qwi_f32_to_e4m3(src[i] / scale) for i < n: the write of one
 * K or V row. scale is finite and > 0. One rounded division and one
 * rounding to e4m3 per element, so every build gives the same bytes. */
void qwi_cpu_kv_fp8_round(const float *src, uint8_t *dst, int64_t n, float scale);

#endif
