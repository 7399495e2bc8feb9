/*
 * kv_fp8_vbmi.c - the fp8 (e4m3) KV cache's P.V and K-plane scores with
 * the widen done by byte permutes (AVX512_VBMI: Ice Lake and later Xeons,
 * Zen 4 and 5): the "avx512vbmi" fp8 table (kv_fp8.h has the contracts).
 *
 * Why: a decode step's attention over the fp8 cache multiplies each K or
 * V element by only group = num_heads / num_kv_heads q rows (2 to 8 for
 * Qwen3), so the widen, not the FMAs, sets its speed. The avx512 table's
 * widen (cpu/e4m3_x86.h: f16 bit moves, vcvtph2ps, a multiply and a NaN
 * fix-up) costs about 12 instructions per 16 elements, and qw-abench
 * measured the fp8 cache's decode attention slower than the bf16 cache's
 * at half the bytes (docs/benchmarks.md).
 *
 * The widen here, per 64 elements: every e4m3 value is exactly a bf16
 * (3 mantissa bits, exponents well inside bf16's), so f32(e) = bf16(e) <<
 * 16. Two vpermi2b look up the high and low bytes of bf16(e) for the 7
 * magnitude bits (vpermi2b ignores index bit 7, the sign) in 128-entry
 * tables built from qwi_e4m3_to_f32 (NaN codes included), one vpternlogd
 * ORs the sign into the high byte, and four zero-masking vpermi2b place
 * (low, high) into the top half of each f32 lane of 16 consecutive
 * elements: 7 instructions per 64. The values are qwi_e4m3_to_f32's bit
 * for bit, and the FMA chains are the avx512 table's, in the same order
 * (P.V is kv_pv_x86.h's AVX-512 code itself, instanced with this widen;
 * the scores take four dims of a chunk per widen, so they have their own
 * loop), so this table gives the avx512 and avx2 tables' bits exactly
 * (tests/test_kv_fp8.c, tests/test_kv_kplanes.c).
 *
 * Where the CPU has AVX512_BF16 too, the same byte tables make the bf16
 * pairs of the fast mode's dot kernels (dscores8, dpv8: below, with
 * kv_fp8_dot_x86.h; tests/test_kv_fp8_dot.c).
 */
#include <pthread.h>

#include "cpu/kv_fp8.h"
#include "fp8.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define UNROLL _Pragma("GCC unroll 8")
#define VBMI __attribute__((target("avx512f,avx512bw,avx512vbmi,avx2,fma,f16c")))
#define VBMI_INLINE static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vbmi,avx2,fma,f16c")))

#include "cpu/e4m3_x86.h"
#include "cpu/kv_bf16dot.h"
#include "cpu/score_chunks.h"

/* Filled once, by the table getter, before any kernel can run: the high
 * and low bytes of the bf16 of magnitude code m (m < 128), and the
 * placing permutes - output k's lane t takes bytes 2, 3 = the low, high
 * byte of element 16k + t (bytes 0, 1 are masked to zero). */
static uint8_t tab_hi[128] __attribute__((aligned(64)));
static uint8_t tab_lo[128] __attribute__((aligned(64)));
static uint8_t tab_place[4][64] __attribute__((aligned(64)));
/* and the bf16 pairs' placing permutes of the dot kernels (vpermt2b
 * indices: 0..63 the low bytes, 64..127 the high bytes; which byte of b
 * each pair takes: qwi_cpu_kv_fp8_pair_src) */
static uint8_t tab_pairs[2][2][64] __attribute__((aligned(64)));   /* [K or V][pair vector h] */
static pthread_once_t tab_once = PTHREAD_ONCE_INIT;

static void tab_build(void) {
    for (int m = 0; m < 128; m++) {
        uint16_t b;   /* exact: e4m3 is a subset of bf16 */
        qwi_cpu_kv_fp8_to_bf16((const uint8_t[]){ (uint8_t)m }, &b, 1);
        tab_hi[m] = (uint8_t)(b >> 8);
        tab_lo[m] = (uint8_t)b;
    }
    for (int k = 0; k < 4; k++)
        for (int t = 0; t < 16; t++) {
            tab_place[k][4 * t] = tab_place[k][4 * t + 1] = 0;
            tab_place[k][4 * t + 2] = (uint8_t)(16 * k + t);        /* from the low bytes  */
            tab_place[k][4 * t + 3] = (uint8_t)(64 + 16 * k + t);   /* from the high bytes */
        }
    for (int which = 0; which < 2; which++)
        for (int h = 0; h < 2; h++)
            for (int t = 0; t < 16; t++) {
                int first, second;
                qwi_cpu_kv_fp8_pair_src(which, h, t, &first, &second);
                uint8_t *ix = tab_pairs[which][h] + 4 * t;
                ix[0] = (uint8_t)first;
                ix[1] = (uint8_t)(64 + first);
                ix[2] = (uint8_t)second;
                ix[3] = (uint8_t)(64 + second);
            }
}

/* The byte tables in registers: loaded once per kernel call (in P.V's
 * loops, loop-invariant loads the compiler keeps there). */
typedef struct byte_regs {
    __m512i hi0, hi1, lo0, lo1, sign;
} byte_regs;

VBMI_INLINE byte_regs byte_setup(void) {
    byte_regs r;
    r.hi0 = _mm512_load_si512(tab_hi);
    r.hi1 = _mm512_load_si512(tab_hi + 64);
    r.lo0 = _mm512_load_si512(tab_lo);
    r.lo1 = _mm512_load_si512(tab_lo + 64);
    r.sign = _mm512_set1_epi8((char)0x80);
    return r;
}

/* The bf16 high and low bytes of the 64 e4m3 codes in b (exact). */
VBMI_INLINE void bf16_bytes64(const byte_regs *r, __m512i b, __m512i *hi, __m512i *lo) {
    const __m512i h = _mm512_permutex2var_epi8(r->hi0, b, r->hi1);
    *lo = _mm512_permutex2var_epi8(r->lo0, b, r->lo1);
    *hi = _mm512_ternarylogic_epi32(h, b, r->sign, 0xf8);   /* h | (b & 0x80) */
}

typedef struct widen_regs {
    byte_regs bytes;
    __m512i place[4];
} widen_regs;

VBMI_INLINE widen_regs widen_setup(void) {
    widen_regs r;
    r.bytes = byte_setup();
    for (int k = 0; k < 4; k++) r.place[k] = _mm512_load_si512(tab_place[k]);
    return r;
}

/* The 64 e4m3 bytes of b as f32: out[k] = elements 16k .. 16k+15. */
VBMI_INLINE void widen64(const widen_regs *r, __m512i b, __m512 out[4]) {
    __m512i hi, lo;
    bf16_bytes64(&r->bytes, b, &hi, &lo);
    const __mmask64 top = 0xCCCCCCCCCCCCCCCCull;            /* bytes 2, 3 of each lane */
    UNROLL
    for (int k = 0; k < 4; k++)
        out[k] = _mm512_castsi512_ps(_mm512_maskz_permutex2var_epi8(top, lo, r->place[k], hi));
}

/* ---- P.V: kv_pv_x86.h's AVX-512 blocking with widen64 ------------------- */

/* 64 elements at p into o[0..3] (the template's KV_PV_WIDEN64). */
VBMI_INLINE void widen64_at(const uint8_t *p, __m512 o[4]) {
    const widen_regs r = widen_setup();
    widen64(&r, _mm512_loadu_si512(p), o);
}

#define AVX512 VBMI
#define AVX512_INLINE VBMI_INLINE
#define KV_PV_AVX512_ONLY
#define KV_PV_ELEM uint8_t
#define KV_PV_WIDEN16(p) e16(p)
#define KV_PV_WIDEN64(p, o) widen64_at((p), (o))
#define KV_PV_SCALAR(e) qwi_e4m3_to_f32(e)
#include "cpu/kv_pv_x86.h"

/* ---- scores from the K planes ------------------------------------------- */

/* Rows d .. d+3 of a K plane (16 positions each, dstride apart) as one
 * register: one load when they are adjacent (dstride 16, the default
 * block size). */
VBMI_INLINE __m512i plane_rows4(const uint8_t *row, int64_t dstride) {
    if (dstride == 16) return _mm512_loadu_si512(row);
    __m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)row));
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(row + dstride)), 1);
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(row + 2 * dstride)), 2);
    return _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(row + 3 * dstride)), 3);
}

/* Lanes j0 .. j0+16*nc-1 of QB q vectors' scores from the fp8 K planes:
 * per lane the chain over d in order (the avx512 table's), four dims of
 * a chunk widened at once; stores past n masked off. */
VBMI_INLINE void scores_chunk(const widen_regs *r, const float *const *q, float *const *o, const int QB,
                              int64_t hd, const uint8_t *const *kpl, int64_t dstride, int32_t j0,
                              int32_t n, float scale, const int nc) {
    __mmask16 m[4];
    UNROLL
    for (int c = 0; c < 4; c++) {
        const int32_t rem = n - j0 - 16 * c;
        m[c] = rem >= 16 ? (__mmask16)0xFFFF : rem <= 0 ? (__mmask16)0 : (__mmask16)((1u << rem) - 1u);
    }
    __m512 acc[6][4];
    UNROLL
    for (int i = 0; i < QB; i++)
        UNROLL
        for (int c = 0; c < nc; c++) acc[i][c] = _mm512_setzero_ps();
    int64_t d = 0;
    for (; d + 4 <= hd; d += 4)
        UNROLL
        for (int c = 0; c < nc; c++) {
            __m512 kv[4];
            widen64(r, plane_rows4(kpl[j0 + 16 * c] + d * dstride, dstride), kv);
            UNROLL
            for (int dd = 0; dd < 4; dd++)
                UNROLL
                for (int i = 0; i < QB; i++)
                    acc[i][c] = _mm512_fmadd_ps(_mm512_set1_ps(q[i][d + dd]), kv[dd], acc[i][c]);
        }
    for (; d < hd; d++)
        UNROLL
        for (int c = 0; c < nc; c++) {
            const __m512 kv = e16(kpl[j0 + 16 * c] + d * dstride);
            UNROLL
            for (int i = 0; i < QB; i++) acc[i][c] = _mm512_fmadd_ps(_mm512_set1_ps(q[i][d]), kv, acc[i][c]);
        }
    const __m512 sv = _mm512_set1_ps(scale);
    UNROLL
    for (int i = 0; i < QB; i++)
        UNROLL
        for (int c = 0; c < nc; c++) _mm512_mask_storeu_ps(o[i] + j0 + 16 * c, m[c], _mm512_mul_ps(acc[i][c], sv));
}

#define SC_CHUNK(QB, NC) scores_chunk(&r, q + h, out + h, QB, hd, kpl, dstride, j0, n, scale, NC)

static VBMI void vbmi_pscores8_q(const float *const *q, float *const *out, int32_t nq, int64_t hd,
                                 const uint8_t *const *kpl, int64_t dstride, int32_t n, float scale) {
    const widen_regs r = widen_setup();
    /* lane chunks outer, groups of 6 q vectors inner: a chunk's K (hd x
     * 64 positions of fp8) is reused from L1 by every group */
    QWI_SCORE_CHUNKS(6, nq, n, SC_CHUNK);
}

#undef SC_CHUNK

/* ---- bf16 pairs for the dot kernels (kv_fp8.h: dscores8, dpv8) -------- */

/* Fast numerics reads the fp8 cache on bf16 dot products (kv_fp8.h); a
 * decode row uses each element for only its group of q heads, so instead
 * of widening a tile first these make the pairs vdpbf16ps wants in
 * registers: the widen's two vpermi2b and vpternlogd give the bf16 high
 * and low bytes of 64 codes, and two vpermt2b place (low, high) bytes of
 * two elements in each 32-bit lane - 5 instructions for 32 pairs. The
 * kernels around them are kv_fp8_dot_x86.h's. */
#define DOT __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512bf16,avx2,fma,f16c")))
#define DOT_INLINE \
    static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512bf16,avx2,fma,f16c")))

typedef struct pair_regs {
    byte_regs bytes;
    __m512i place[2];
} pair_regs;

DOT_INLINE pair_regs pair_setup(int which) {
    pair_regs r;
    r.bytes = byte_setup();
    r.place[0] = _mm512_load_si512(tab_pairs[which][0]);
    r.place[1] = _mm512_load_si512(tab_pairs[which][1]);
    return r;
}

DOT_INLINE void pairs64(const pair_regs *r, __m512i b, __m512i out[2]) {
    __m512i hi, lo;
    bf16_bytes64(&r->bytes, b, &hi, &lo);
    out[0] = _mm512_permutex2var_epi8(lo, r->place[0], hi);
    out[1] = _mm512_permutex2var_epi8(lo, r->place[1], hi);
}

#include "cpu/kv_fp8_dot_x86.h"

/* The table, filled once where the CPU has AVX512_VBMI (and the avx512
 * table, whose transpose it shares: the f32 K tile is widened once per
 * tile, not per q row, so its widen matters less). */
static qwi_cpu_kv_fp8_kernels vbmi_table;
static const qwi_cpu_kv_fp8_kernels *vbmi_ptr;

static void vbmi_init(void) {
    tab_build();
    const qwi_cpu_kv_fp8_kernels *base = qwi_cpu_kv_fp8_avx512();
    __builtin_cpu_init();
    if (!base || !qwi_cpu_kv_fp8_avx512bw() || !__builtin_cpu_supports("avx512vbmi")) return;
    /* to_bf16 is the avx512bw table's: a widen once per tile, not per q
     * row, where vpermb would save little */
    vbmi_table = (qwi_cpu_kv_fp8_kernels){ .name = "avx512vbmi", .transpose = base->transpose,
                                           .pv = avx512_pv, .pscores8_q = vbmi_pscores8_q,
                                           .to_bf16 = qwi_cpu_kv_fp8_to_bf16_avx512bw };
    if (__builtin_cpu_supports("avx512vl") && qwi_kv_bf16dot_have_avx512bf16()) {
        vbmi_table.dscores8 = dot_scores8;
        vbmi_table.dpv8 = dot_pv8;
    }
    vbmi_ptr = &vbmi_table;
}

const qwi_cpu_kv_fp8_kernels *qwi_cpu_kv_fp8_avx512vbmi(void) {
    pthread_once(&tab_once, vbmi_init);
    return vbmi_ptr;
}

#else

const qwi_cpu_kv_fp8_kernels *qwi_cpu_kv_fp8_avx512vbmi(void) { return NULL; }

#endif
