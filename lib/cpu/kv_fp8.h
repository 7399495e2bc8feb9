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
 *
 * Fast numerics on bf16 dot products: where the bf16 table has dscores
 * and dpv (cpu/kv_bf16dot.h: the avx512bf16 and generic tables), the fp8
 * cache is read as the bf16 cache - every e4m3 value is a bf16 value, so
 * q.K and P.V run the bf16 cache's dot-product arithmetic on exactly the
 * cached values, at twice the f32 FMA rate. A run of several rows
 * (prefill) widens each tile once with to_bf16 (qwi_cpu_kv_fp8_tile_bf16)
 * and calls the bf16 table's kernels; a single row (decode) reads the
 * cache through dscores8/dpv8 where the table has them (avx512vbmi and
 * avx512bw on CPUs with AVX512_BF16: cpu/kv_fp8_dot_x86.h)
 * - the same bits either way, so batched == alone still holds. The other
 * entries (transpose, pv, pscores8_q) then serve exact numerics and the
 * tables without dot products.
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
    /* dst[i] = the bf16 bits of e4m3(src[i]), i < n: exact (e4m3's 3
     * mantissa bits fit bf16's 7, its exponents bf16's range, subnormals
     * included), NaN as qwi_e4m3_to_f32's upper half. The step that puts
     * the fp8 cache on bf16 dot products (qwi_cpu_kv_fp8_tile_bf16). */
    void (*to_bf16)(const uint8_t *src, uint16_t *dst, int64_t n);
    /* Optional (NULL: a tile is widened by to_bf16, then the bf16 table's
     * dscores and dpv run): the bf16 dot-product kernels of
     * cpu/kv_bf16dot.h straight from the fp8 cache, with the bits of
     * to_bf16 followed by qwi_avx512bf16_kv_dscores / _dpv, so attention
     * may take either route for any row. dscores8's k and dstride as
     * those of qwi_avx512bf16_kv_dscores (plane runs of 16 positions). */
    void (*dscores8)(const uint32_t *const *q, float *const *out, int32_t nq, int64_t hd,
                     const uint8_t *const *k, int64_t dstride, int32_t n, float scale);
    void (*dpv8)(float *const *o, const uint32_t *const *p, int32_t nq, const uint8_t *const *v,
                 int32_t n, int64_t hd);
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

/* The portable to_bf16 (see the table's). */
void qwi_cpu_kv_fp8_to_bf16(const uint8_t *src, uint16_t *dst, int64_t n);

/* The avx512bw table's to_bf16, also the avx512vbmi table's; call only
 * where qwi_cpu_kv_fp8_avx512bw() is not NULL. */
void qwi_cpu_kv_fp8_to_bf16_avx512bw(const uint8_t *src, uint16_t *dst, int64_t n);

/* The pairs of the x86 dscores8 / dpv8 (cpu/kv_fp8_dot_x86.h): of 64
 * e4m3 bytes b - for K (which 0) four K plane rows of 16 positions, for V
 * (which 1) 32 dims of row j then 32 of row j+1 - lane t of pair vector h
 * (h < 2, t < 16) is the pair (b[*first] low, b[*second] high): K dims
 * (d+2h, d+2h+1) of position t, V rows (j, j+1) at dim 16h + t. */
static inline void qwi_cpu_kv_fp8_pair_src(int which, int h, int t, int *first, int *second) {
    *first = which == 0 ? 32 * h + t : 16 * h + t;
    *second = which == 0 ? 32 * h + 16 + t : 32 + 16 * h + t;
}

/* The fp8 cache on bf16 dot products (fast numerics over a bf16 table
 * with dscores and dpv, cpu/attention.c): one context tile of n <=
 * QWI_CPU_ATTN_TILE positions of one kv head, k8[j] / v8[j] as
 * attention.c's tile rows (K: position j's dim-0 element in its K plane,
 * dims dstride apart; V: its row of hd bytes), widened by kf->to_bf16 -
 * exactly, so the scores and P.V that follow are the bf16 cache's over
 * the same values. K goes to kbuf as planes of 16 positions ([n/16
 * rounded up][hd][16] bf16; lanes past n zero), V to vbuf as rows
 * ([n][hd]); k[j] and v[j] are set to position j's place there, so
 * kv_bf16dot.h's dscores (dstride 16, runs of 16 as it requires, at any
 * cache block size) and dpv read them as they read the bf16 cache. kbuf
 * holds (n rounded up to 16) * hd elements, vbuf n * hd. */
void qwi_cpu_kv_fp8_tile_bf16(const qwi_cpu_kv_fp8_kernels *kf, const uint8_t *const *k8,
                              const uint8_t *const *v8, int32_t n, int64_t hd, int64_t dstride,
                              uint16_t *kbuf, uint16_t *vbuf, const uint16_t **k, const uint16_t **v);

/* dst[i] = qwi_f32_to_e4m3(src[i] / scale) for i < n: the write of one
 * K or V row. scale is finite and > 0. One rounded division and one
 * rounding to e4m3 per element, so every build gives the same bytes. */
void qwi_cpu_kv_fp8_round(const float *src, uint8_t *dst, int64_t n, float scale);

#endif
