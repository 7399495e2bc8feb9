/*
 * kv_fp8_bw.c - the fp8 (e4m3) KV cache's P.V and K-plane scores with the
 * widen done by nibble tables in zmm registers (AVX512BW): the "avx512bw"
 * fp8 table, for the AVX-512 CPUs without AVX512_VBMI - Skylake-SP,
 * Cascade Lake and Cooper Lake Xeons (kv_fp8.h has the contracts).
 *
 * Why: at Qwen3's 2-8 q rows per kv head, the avx512 table's widen
 * (cpu/e4m3_x86.h's e16: f16 bit moves, vcvtph2ps, a multiply and a NaN
 * fix-up, about 12 instructions per 16 elements) and not the FMAs sets
 * the speed of fp8 attention; kv_fp8_vbmi.c replaces it with byte
 * permutes where the CPU has VBMI, and this file where it has only BW.
 *
 * The widen, per 64 elements (e4m3_bf16_bytes64: the AVX2 table's nibble
 * tables at zmm width, vpshufb working in each 128-bit lane): the bf16
 * high and low bytes of every code in 12 instructions, two in-lane byte
 * interleaves into bf16 words, and a shift and a mask that make the f32
 * of the even and the odd words: 18 instructions where e16 took about 48.
 * The interleaves stay inside 128-bit lanes, so the f32 come out in the
 * widen order (widen64 below says which element is where); P.V keeps its
 * accumulators in that order and converts at load and store (the
 * template's KV_PV_W64_LOAD/STORE), and the scores put the four 16-position
 * groups of a 64-position chunk in the four lanes of one register, one
 * dim at a time, so each register still holds one dim and every score is
 * one FMA chain over the dims in order. The values are qwi_e4m3_to_f32's
 * and the FMA chains the avx512 table's, so the bits are the avx512 and
 * avx2 tables' (tests/test_kv_fp8.c, tests/test_kv_kplanes.c).
 *
 * Where the CPU has AVX512_BF16 too (Cooper Lake), the same nibble tables
 * make the bf16 pairs of the fast mode's dot kernels (dscores8, dpv8:
 * below, with kv_fp8_dot_x86.h; tests/test_kv_fp8_dot.c).
 */
#include <pthread.h>
#include <stdbool.h>

#include "cpu/kv_fp8.h"
#include "fp8.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define UNROLL _Pragma("GCC unroll 8")
#define BW __attribute__((target("avx512f,avx512bw,avx2,fma,f16c")))
#define BW_INLINE static inline __attribute__((always_inline, target("avx512f,avx512bw,avx2,fma,f16c")))

#include "cpu/e4m3_x86.h"
#include "cpu/kv_bf16dot.h"

/* The 64 e4m3 bytes of x as f32 in the widen order: with the 16 bytes of
 * 128-bit lane L as elements 0..15 of that lane, o[0]'s lane L holds
 * elements 0, 2, 4, 6; o[1] 1, 3, 5, 7; o[2] 8, 10, 12, 14; o[3] 9, 11,
 * 13, 15 (exact; NaN as qwi_e4m3_to_f32 gives it). */
BW_INLINE void widen64(__m512i x, __m512 o[4]) {
    __m512i hi, lo;
    e4m3_bf16_bytes64(x, &hi, &lo);
    const __m512i w0 = _mm512_unpacklo_epi8(lo, hi), w1 = _mm512_unpackhi_epi8(lo, hi);
    const __m512i top = _mm512_set1_epi32((int)0xffff0000u);
    o[0] = _mm512_castsi512_ps(_mm512_slli_epi32(w0, 16));
    o[1] = _mm512_castsi512_ps(_mm512_and_si512(w0, top));
    o[2] = _mm512_castsi512_ps(_mm512_slli_epi32(w1, 16));
    o[3] = _mm512_castsi512_ps(_mm512_and_si512(w1, top));
}

/* y[m]'s lane L = x[L]'s lane m: the 4 x 4 transpose of 128-bit lanes. */
BW_INLINE void lanes_transpose(const __m512 x[4], __m512 y[4]) {
    const __m512 a = _mm512_shuffle_f32x4(x[0], x[1], 0x44), b = _mm512_shuffle_f32x4(x[0], x[1], 0xee);
    const __m512 c = _mm512_shuffle_f32x4(x[2], x[3], 0x44), d = _mm512_shuffle_f32x4(x[2], x[3], 0xee);
    y[0] = _mm512_shuffle_f32x4(a, c, 0x88);
    y[1] = _mm512_shuffle_f32x4(a, c, 0xdd);
    y[2] = _mm512_shuffle_f32x4(b, d, 0x88);
    y[3] = _mm512_shuffle_f32x4(b, d, 0xdd);
}

/* 64 values in memory order (m[k] = elements 16k .. 16k+15) -> the widen
 * order (w, as widen64 leaves elements 16L .. 16L+15 in lane L) and back:
 * the lanes transposed gives t[m] lane L = elements 16L + 4m .. 16L + 4m+3,
 * then the even and odd elements of (t[0], t[1]) and (t[2], t[3]). */
BW_INLINE void to_widen_order(const __m512 m[4], __m512 w[4]) {
    __m512 t[4];
    lanes_transpose(m, t);
    w[0] = _mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(2, 0, 2, 0));
    w[1] = _mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 1, 3, 1));
    w[2] = _mm512_shuffle_ps(t[2], t[3], _MM_SHUFFLE(2, 0, 2, 0));
    w[3] = _mm512_shuffle_ps(t[2], t[3], _MM_SHUFFLE(3, 1, 3, 1));
}

BW_INLINE void from_widen_order(const __m512 w[4], __m512 m[4]) {
    const __m512 t[4] = { _mm512_unpacklo_ps(w[0], w[1]), _mm512_unpackhi_ps(w[0], w[1]),
                          _mm512_unpacklo_ps(w[2], w[3]), _mm512_unpackhi_ps(w[2], w[3]) };
    lanes_transpose(t, m);
}

/* ---- P.V: kv_pv_x86.h's AVX-512 blocking with widen64 ------------------- */

BW_INLINE void pv_widen64_at(const uint8_t *p, __m512 o[4]) { widen64(_mm512_loadu_si512(p), o); }

BW_INLINE void pv_load64(const float *src, __m512 acc[4]) {
    const __m512 m[4] = { _mm512_loadu_ps(src), _mm512_loadu_ps(src + 16), _mm512_loadu_ps(src + 32),
                          _mm512_loadu_ps(src + 48) };
    to_widen_order(m, acc);
}

BW_INLINE void pv_store64(float *dst, const __m512 acc[4]) {
    __m512 m[4];
    from_widen_order(acc, m);
    UNROLL
    for (int k = 0; k < 4; k++) _mm512_storeu_ps(dst + 16 * k, m[k]);
}

#define AVX512 BW
#define AVX512_INLINE BW_INLINE
#define KV_PV_AVX512_ONLY
#define KV_PV_ELEM uint8_t
#define KV_PV_WIDEN16(p) e16(p)
#define KV_PV_WIDEN64(p, o) pv_widen64_at((p), (o))
#define KV_PV_W64_LOAD(src, acc) pv_load64((src), (acc))
#define KV_PV_W64_STORE(dst, acc) pv_store64((dst), (acc))
#define KV_PV_SCALAR(e) qwi_e4m3_to_f32(e)
#include "cpu/kv_pv_x86.h"

/* ---- scores from the K planes ------------------------------------------- */

/* Scores j0 .. j0+63 of QB q vectors (QB <= 4): the 16-position group c
 * (positions j0 + 16c ..) of dim d in lane c of one register - one 64-byte
 * load where the four lie side by side in a plane (contig), else one
 * 16-byte load each - widened, so every register holds one dim and each
 * score is one FMA chain over d in order. Groups at or past n (ng of the
 * four exist) read group 0 again and are never stored. */
BW_INLINE void scores64(const float *const *q, float *const *o, const int QB, int64_t hd,
                        const uint8_t *const *kpl, int64_t dstride, int32_t j0, int32_t n, float scale,
                        int ng, const bool contig) {
    const uint8_t *k[4];
    __mmask16 m[4];
    UNROLL
    for (int c = 0; c < 4; c++) {
        k[c] = c < ng ? kpl[j0 + 16 * c] : kpl[j0];
        const int32_t rem = n - j0 - 16 * c;
        m[c] = rem >= 16 ? (__mmask16)0xFFFF : rem <= 0 ? (__mmask16)0 : (__mmask16)((1u << rem) - 1u);
    }
    __m512 acc[4][4];
    UNROLL
    for (int i = 0; i < QB; i++)
        UNROLL
        for (int c = 0; c < 4; c++) acc[i][c] = _mm512_setzero_ps();
    for (int64_t d = 0; d < hd; d++) {
        const int64_t off = d * dstride;
        __m512i x;
        if (contig) {
            x = _mm512_loadu_si512(k[0] + off);
        } else {
            x = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(k[0] + off)));
            x = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)(k[1] + off)), 1);
            x = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)(k[2] + off)), 2);
            x = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)(k[3] + off)), 3);
        }
        __m512 kv[4];
        widen64(x, kv);
        UNROLL
        for (int i = 0; i < QB; i++) {
            const __m512 qd = _mm512_set1_ps(q[i][d]);
            UNROLL
            for (int c = 0; c < 4; c++) acc[i][c] = _mm512_fmadd_ps(qd, kv[c], acc[i][c]);
        }
    }
    const __m512 sv = _mm512_set1_ps(scale);
    UNROLL
    for (int i = 0; i < QB; i++) {
        __m512 s[4];
        from_widen_order(acc[i], s);
        UNROLL
        for (int c = 0; c < 4; c++) _mm512_mask_storeu_ps(o[i] + j0 + 16 * c, m[c], _mm512_mul_ps(s[c], sv));
    }
}

#define SC64(QB)                                                                          \
    (contig ? scores64(q + h, out + h, QB, hd, kpl, dstride, j0, n, scale, ng, true)      \
            : scores64(q + h, out + h, QB, hd, kpl, dstride, j0, n, scale, ng, false))

static BW void bw_pscores8_q(const float *const *q, float *const *out, int32_t nq, int64_t hd,
                             const uint8_t *const *kpl, int64_t dstride, int32_t n, float scale) {
    /* 64-position chunks outer, groups of 4 q vectors inner: a chunk's K
     * (hd x 64 bytes) is reused from L1 by every group */
    for (int32_t j0 = 0; j0 < n; j0 += 64) {
        const int ng = n - j0 >= 64 ? 4 : (n - j0 + 15) / 16;
        const bool contig = ng == 4 && kpl[j0 + 16] == kpl[j0] + 16 && kpl[j0 + 32] == kpl[j0] + 32 &&
                            kpl[j0 + 48] == kpl[j0] + 48;
        for (int32_t h = 0; h < nq; h += 4) {
            switch (QWI_MIN(4, nq - h)) {
            case 1: SC64(1); break;
            case 2: SC64(2); break;
            case 3: SC64(3); break;
            default: SC64(4); break;
            }
        }
    }
}

#undef SC64

/* ---- to bf16 (the fp8 cache on bf16 dot products) ---------------------- */

/* 64 codes at a time as avx2_to_bf16 (kv_fp8_x86.c): the words come out of
 * the in-lane interleaves as codes 8L .. 8L+7 of each lane L in w0 and
 * 8L+8 .. in w1 (L = 0..3, in units of 16 codes); vpermt2q puts lanes
 * (w0.0, w1.0, w0.1, w1.1) and (w0.2, w1.2, w0.3, w1.3) together. The
 * last n % 64 codes by masked loads and stores of the same steps. */
BW_INLINE void to_bf16_64(const uint8_t *src, uint16_t *dst, int32_t m) {
    const __mmask64 in = m >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << m) - 1);
    __m512i hi, lo;
    e4m3_bf16_bytes64(_mm512_maskz_loadu_epi8(in, src), &hi, &lo);
    const __m512i w0 = _mm512_unpacklo_epi8(lo, hi), w1 = _mm512_unpackhi_epi8(lo, hi);
    const __m512i first = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
    const __m512i second = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
    const __m512i a = _mm512_permutex2var_epi64(w0, first, w1), b = _mm512_permutex2var_epi64(w0, second, w1);
    if (m >= 64) {
        _mm512_storeu_si512(dst, a);
        _mm512_storeu_si512(dst + 32, b);
        return;
    }
    const __mmask32 ma = m >= 32 ? ~(__mmask32)0 : (((__mmask32)1 << m) - 1);
    const __mmask32 mb = m <= 32 ? 0 : (((__mmask32)1 << (m - 32)) - 1);
    _mm512_mask_storeu_epi16(dst, ma, a);
    _mm512_mask_storeu_epi16(dst + 32, mb, b);
}

BW void qwi_cpu_kv_fp8_to_bf16_avx512bw(const uint8_t *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) to_bf16_64(src + i, dst + i, 64);
    if (i < n) to_bf16_64(src + i, dst + i, (int32_t)(n - i));
}

/* ---- bf16 pairs for the dot kernels (kv_fp8.h: dscores8, dpv8) -------- */

/* For CPUs with AVX512_BF16 but no VBMI (Cooper Lake), as kv_fp8_vbmi.c's
 * but without byte permutes: the nibble tables give the bf16 high and low
 * bytes (12 instructions), the in-lane interleaves make them words, and
 * two vpermt2w pick each pair's two words - 16 instructions for 32 pairs.
 * Index tables, filled once: word 2t / 2t+1 of pair vector h take the
 * words that byte first / second of b (qwi_cpu_kv_fp8_pair_src) becomes
 * after the interleaves (byte o of 128-bit lane L: word 8L + o of the low
 * interleave for o < 8, else word 8L + o - 8 of the high one, which
 * vpermt2w numbers from 32). */
#define DOT __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))
#define DOT_INLINE \
    static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))

static uint16_t pair_words[2][2][32] __attribute__((aligned(64)));   /* [K or V][pair vector h] */

static int word_of(int byte) {
    const int lane = byte / 16, o = byte % 16;
    return o < 8 ? 8 * lane + o : 32 + 8 * lane + o - 8;
}

static void pair_words_build(void) {
    for (int which = 0; which < 2; which++)
        for (int h = 0; h < 2; h++)
            for (int t = 0; t < 16; t++) {
                int first, second;
                qwi_cpu_kv_fp8_pair_src(which, h, t, &first, &second);
                pair_words[which][h][2 * t] = (uint16_t)word_of(first);
                pair_words[which][h][2 * t + 1] = (uint16_t)word_of(second);
            }
}

typedef struct pair_regs {
    __m512i place[2];
} pair_regs;

DOT_INLINE pair_regs pair_setup(int which) {
    pair_regs r;
    r.place[0] = _mm512_load_si512(pair_words[which][0]);
    r.place[1] = _mm512_load_si512(pair_words[which][1]);
    return r;
}

DOT_INLINE void pairs64(const pair_regs *r, __m512i b, __m512i out[2]) {
    __m512i hi, lo;
    e4m3_bf16_bytes64(b, &hi, &lo);
    const __m512i w0 = _mm512_unpacklo_epi8(lo, hi), w1 = _mm512_unpackhi_epi8(lo, hi);
    out[0] = _mm512_permutex2var_epi16(w0, r->place[0], w1);
    out[1] = _mm512_permutex2var_epi16(w0, r->place[1], w1);
}

#include "cpu/kv_fp8_dot_x86.h"

/* The table, filled once where the CPU has AVX512BW (and the avx512
 * table, whose K-tile transpose it shares). */
static qwi_cpu_kv_fp8_kernels bw_table;
static const qwi_cpu_kv_fp8_kernels *bw_ptr;
static pthread_once_t bw_once = PTHREAD_ONCE_INIT;

static void bw_init(void) {
    const qwi_cpu_kv_fp8_kernels *base = qwi_cpu_kv_fp8_avx512();
    __builtin_cpu_init();
    if (!base || !__builtin_cpu_supports("avx512bw")) return;
    bw_table = (qwi_cpu_kv_fp8_kernels){ .name = "avx512bw", .transpose = base->transpose,
                                         .pv = avx512_pv, .pscores8_q = bw_pscores8_q,
                                         .to_bf16 = qwi_cpu_kv_fp8_to_bf16_avx512bw };
    if (__builtin_cpu_supports("avx512vl") && qwi_kv_bf16dot_have_avx512bf16()) {
        pair_words_build();
        bw_table.dscores8 = dot_scores8;
        bw_table.dpv8 = dot_pv8;
    }
    bw_ptr = &bw_table;
}

const qwi_cpu_kv_fp8_kernels *qwi_cpu_kv_fp8_avx512bw(void) {
    pthread_once(&bw_once, bw_init);
    return bw_ptr;
}

#else

const qwi_cpu_kv_fp8_kernels *qwi_cpu_kv_fp8_avx512bw(void) { return NULL; }
void qwi_cpu_kv_fp8_to_bf16_avx512bw(const uint8_t *src, uint16_t *dst, int64_t n) {
    qwi_cpu_kv_fp8_to_bf16(src, dst, n);
}

#endif
