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
 * for bit, and the FMA chains are the avx512 table's, in the same order,
 * so this table gives the avx512 and avx2 tables' bits exactly
 * (tests/test_kv_fp8.c, tests/test_kv_kplanes.c).
 */
#include <pthread.h>
#include <string.h>

#include "cpu/kv_fp8.h"
#include "fp8.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define UNROLL _Pragma("GCC unroll 8")
#define VBMI __attribute__((target("avx512f,avx512bw,avx512vbmi,avx2,fma,f16c")))
#define VBMI_INLINE static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vbmi,avx2,fma,f16c")))

#include "cpu/e4m3_x86.h"

/* High and low bytes of the bf16 of magnitude code m (m < 128): filled
 * once, by the table getter, before any kernel can run. */
static uint8_t tab_hi[128] __attribute__((aligned(64)));
static uint8_t tab_lo[128] __attribute__((aligned(64)));
static pthread_once_t tab_once = PTHREAD_ONCE_INIT;

static void tab_build(void) {
    for (int m = 0; m < 128; m++) {
        const float f = qwi_e4m3_to_f32((uint8_t)m);
        uint32_t u;
        memcpy(&u, &f, 4);   /* low 16 bits are zero: e4m3 is a subset of bf16 */
        tab_hi[m] = (uint8_t)(u >> 24);
        tab_lo[m] = (uint8_t)(u >> 16);
    }
}

/* The tables and lane permutes a kernel call keeps in registers. */
typedef struct widen_regs {
    __m512i hi0, hi1, lo0, lo1, sign;
    __m512i place[4];   /* output k: lane t's bytes 2, 3 = low, high byte of element 16k + t */
} widen_regs;

VBMI_INLINE widen_regs widen_setup(void) {
    widen_regs r;
    r.hi0 = _mm512_load_si512(tab_hi);
    r.hi1 = _mm512_load_si512(tab_hi + 64);
    r.lo0 = _mm512_load_si512(tab_lo);
    r.lo1 = _mm512_load_si512(tab_lo + 64);
    r.sign = _mm512_set1_epi8((char)0x80);
    for (int k = 0; k < 4; k++) {
        uint8_t ix[64] __attribute__((aligned(64)));
        for (int t = 0; t < 16; t++) {
            ix[4 * t] = ix[4 * t + 1] = 0;                  /* masked to zero */
            ix[4 * t + 2] = (uint8_t)(16 * k + t);          /* from the low bytes  */
            ix[4 * t + 3] = (uint8_t)(64 + 16 * k + t);     /* from the high bytes */
        }
        r.place[k] = _mm512_load_si512(ix);
    }
    return r;
}

/* The 64 e4m3 bytes of b as f32: out[k] = elements 16k .. 16k+15. */
VBMI_INLINE void widen64(const widen_regs *r, __m512i b, __m512 out[4]) {
    __m512i hi = _mm512_permutex2var_epi8(r->hi0, b, r->hi1);
    const __m512i lo = _mm512_permutex2var_epi8(r->lo0, b, r->lo1);
    hi = _mm512_ternarylogic_epi32(hi, b, r->sign, 0xf8);   /* hi | (b & 0x80) */
    const __mmask64 top = 0xCCCCCCCCCCCCCCCCull;            /* bytes 2, 3 of each lane */
    UNROLL
    for (int k = 0; k < 4; k++)
        out[k] = _mm512_castsi512_ps(_mm512_maskz_permutex2var_epi8(top, lo, r->place[k], hi));
}

/* ---- P.V ------------------------------------------------------------------ */

/* Accumulators o[0..QB) elements [e0, e0 + 16*HC), held in registers over
 * positions 0..n-1, HC a multiple of 4 (each 64 elements one widen64);
 * the avx512 table's chain per element, so its bits. */
VBMI_INLINE void pv_blk(const widen_regs *r, float *const *o, const float *const *p, const int QB,
                        const uint8_t *const *v, int32_t n, int64_t e0, const int HC) {
    __m512 acc[8][8];
    UNROLL
    for (int i = 0; i < QB; i++)
        UNROLL
        for (int c = 0; c < HC; c++) acc[i][c] = _mm512_loadu_ps(o[i] + e0 + 16 * c);
    for (int32_t j = 0; j < n; j++) {
        __m512 vv[8];
        UNROLL
        for (int c = 0; c < HC; c += 4) widen64(r, _mm512_loadu_si512(v[j] + e0 + 16 * c), vv + c);
        UNROLL
        for (int i = 0; i < QB; i++) {
            const __m512 x = _mm512_set1_ps(p[i][j]);
            UNROLL
            for (int c = 0; c < HC; c++) acc[i][c] = _mm512_fmadd_ps(x, vv[c], acc[i][c]);
        }
    }
    UNROLL
    for (int i = 0; i < QB; i++)
        UNROLL
        for (int c = 0; c < HC; c++) _mm512_storeu_ps(o[i] + e0 + 16 * c, acc[i][c]);
}

/* The same for 16 elements [e0, e0 + 16) with the avx512 widen (a row's
 * part that is not a whole 64). */
VBMI_INLINE void pv_blk16(float *const *o, const float *const *p, const int QB,
                          const uint8_t *const *v, int32_t n, int64_t e0) {
    __m512 acc[8];
    UNROLL
    for (int i = 0; i < QB; i++) acc[i] = _mm512_loadu_ps(o[i] + e0);
    for (int32_t j = 0; j < n; j++) {
        const __m512 vv = e16(v[j] + e0);
        UNROLL
        for (int i = 0; i < QB; i++) acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(p[i][j]), vv, acc[i]);
    }
    UNROLL
    for (int i = 0; i < QB; i++) _mm512_storeu_ps(o[i] + e0, acc[i]);
}

/* Elements [e0, hd) (fewer than 16) by scalar FMA chains, positions in
 * order. */
static inline __attribute__((target("fma"))) void pv_tail(float *const *o, const float *const *p,
                                                          int32_t nq, const uint8_t *const *v,
                                                          int32_t n, int64_t e0, int64_t hd) {
    for (int32_t i = 0; i < nq; i++)
        for (int64_t e = e0; e < hd; e++) {
            float acc = o[i][e];
            for (int32_t j = 0; j < n; j++) acc = __builtin_fmaf(p[i][j], qwi_e4m3_to_f32(v[j][e]), acc);
            o[i][e] = acc;
        }
}

/* QB accumulators over all hd elements: blocks of 16*HC, then of 64,
 * then of 16, then the tail. */
VBMI_INLINE void pv_rows(const widen_regs *r, float *const *o, const float *const *p, const int QB,
                         const uint8_t *const *v, int32_t n, int64_t hd, const int HC) {
    int64_t e = 0;
    for (; e + 16 * HC <= hd; e += 16 * HC) pv_blk(r, o, p, QB, v, n, e, HC);
    for (; e + 64 <= hd; e += 64) pv_blk(r, o, p, QB, v, n, e, 4);
    for (; e + 16 <= hd; e += 16) pv_blk16(o, p, QB, v, n, e);
    if (e < hd) pv_tail(o, p, QB, v, n, e, hd);
}

static VBMI void vbmi_pv(float *const *o, const float *const *p, int32_t nq, const uint8_t *const *v,
                         int32_t n, int64_t hd) {
    const widen_regs r = widen_setup();
    int32_t i = 0;
    if (nq >= 8) {
        /* column blocks outer, groups of 8 accumulators inner: the V
         * columns of a block (n x 64 bytes) stay in L1 for every group */
        const int32_t n8 = nq & ~7;
        int64_t e = 0;
        for (; e + 64 <= hd; e += 64)
            for (int32_t b = 0; b < n8; b += 8) pv_blk(&r, o + b, p + b, 8, v, n, e, 4);
        for (; e + 16 <= hd; e += 16)
            for (int32_t b = 0; b < n8; b += 8) pv_blk16(o + b, p + b, 8, v, n, e);
        if (e < hd) pv_tail(o, p, n8, v, n, e, hd);
        i = n8;
    }
    for (; i + 4 <= nq; i += 4) pv_rows(&r, o + i, p + i, 4, v, n, hd, 4);
    for (; i + 2 <= nq; i += 2) pv_rows(&r, o + i, p + i, 2, v, n, hd, 8);
    for (; i < nq; i++) pv_rows(&r, o + i, p + i, 1, v, n, hd, 8);
}

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
#define SC_NC(QB)                                          \
    switch (QWI_MIN(4, (n - j0 + 15) / 16)) {              \
    case 1: SC_CHUNK(QB, 1); break;                        \
    case 2: SC_CHUNK(QB, 2); break;                        \
    case 3: SC_CHUNK(QB, 3); break;                        \
    default: SC_CHUNK(QB, 4); break;                       \
    }

static VBMI void vbmi_pscores8_q(const float *const *q, float *const *out, int32_t nq, int64_t hd,
                                 const uint8_t *const *kpl, int64_t dstride, int32_t n, float scale) {
    const widen_regs r = widen_setup();
    /* lane chunks outer, groups of 6 q vectors inner: a chunk's K (hd x
     * 64 positions of fp8) is reused from L1 by every group */
    for (int32_t j0 = 0; j0 < n; j0 += 64)
        for (int32_t h = 0; h < nq; h += 6) {
            switch (QWI_MIN(6, nq - h)) {
            case 1: SC_NC(1) break;
            case 2: SC_NC(2) break;
            case 3: SC_NC(3) break;
            case 4: SC_NC(4) break;
            case 5: SC_NC(5) break;
            default: SC_NC(6) break;
            }
        }
}

#undef SC_NC
#undef SC_CHUNK

/* The table, filled once where the CPU has AVX512_VBMI (and the avx512
 * table, whose transpose it shares: the f32 K tile is widened once per
 * tile, not per q row, so its widen matters less). */
static qwi_cpu_kv_fp8_kernels vbmi_table;
static const qwi_cpu_kv_fp8_kernels *vbmi_ptr;

static void vbmi_init(void) {
    tab_build();
    const qwi_cpu_kv_fp8_kernels *base = qwi_cpu_kv_fp8_avx512();
    __builtin_cpu_init();
    if (!base || !__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vbmi")) return;
    vbmi_table = (qwi_cpu_kv_fp8_kernels){ .name = "avx512vbmi", .transpose = base->transpose,
                                           .pv = vbmi_pv, .pscores8_q = vbmi_pscores8_q };
    vbmi_ptr = &vbmi_table;
}

const qwi_cpu_kv_fp8_kernels *qwi_cpu_kv_fp8_avx512vbmi(void) {
    pthread_once(&tab_once, vbmi_init);
    return vbmi_ptr;
}

#else

const qwi_cpu_kv_fp8_kernels *qwi_cpu_kv_fp8_avx512vbmi(void) { return NULL; }

#endif
