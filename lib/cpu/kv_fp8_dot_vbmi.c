/*
 * kv_fp8_dot_vbmi.c - fast numerics' attention over the fp8 (e4m3) cache
 * on bf16 dot products, straight from the cache: the fp8 table's dscores8
 * and dpv8 (kv_fp8.h) for CPUs with AVX512_VBMI and AVX512_BF16 (Zen 4
 * and 5, Sapphire Rapids and later).
 *
 * Why: widening a whole tile to bf16 first (kv_fp8_tile.c) pays for
 * itself when a run of prefill rows shares the tile, but a decode row
 * uses each element for only its group of q heads (2-8), and the round
 * trip through a 64 KiB buffer cost more than the f32 FMAs it saved
 * (qw-abench: 1 x 4K fp8 decode attention 552 -> 726-764 us a layer).
 * Here the bf16 pairs vdpbf16ps wants are made in registers from the fp8
 * bytes and used at once.
 *
 * The pairs, per 64 bytes: two vpermi2b look up the bf16 high and low
 * bytes of the 7 magnitude bits (every e4m3 value is a bf16 value:
 * exact, NaN included), one vpternlogd ORs the sign into the high byte,
 * and two vpermt2b place (low, high) bytes of two elements into each
 * 32-bit lane: 5 instructions for two vectors of 16 pairs. For the scores
 * the 64 bytes are four K plane rows (dims d .. d+3) of 16 positions, the
 * pairs (k[d], k[d+1]) and (k[d+2], k[d+3]) of each position; for P.V 32
 * dims of two V rows, the pairs (v[j][e], v[j+1][e]) of each dim.
 *
 * The kernels around the pairs are kv_fp8_dot_x86.h's, shared with
 * kv_fp8_dot_bw.c (the same pairs by nibble tables, for CPUs with
 * AVX512_BF16 but no VBMI): every lane runs the chain of
 * kv_bf16dot_avx512.c over the same bf16 values in the same order, so
 * dscores8 / dpv8 give exactly the bits of to_bf16 followed by
 * qwi_avx512bf16_kv_dscores / _dpv (tests/test_kv_fp8_dot.c): which of
 * the two routes a row takes never changes its result.
 */
#include <pthread.h>
#include <string.h>

#include "cpu/kv_fp8.h"
#include "fp8.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "cpu/kv_bf16dot.h"

#define DOT __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512bf16")))
#define DOT_INLINE \
    static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512bf16")))

/* Filled once before any kernel runs: the bf16 high and low bytes of
 * magnitude code m < 128, and the placing permutes (vpermt2b indices:
 * 0..63 the low bytes, 64..127 the high bytes; qwi_cpu_kv_fp8_pair_src
 * says which byte of b each pair takes). */
static uint8_t tab_hi[128] __attribute__((aligned(64)));
static uint8_t tab_lo[128] __attribute__((aligned(64)));
static uint8_t place_ix[2][2][64] __attribute__((aligned(64)));   /* [K or V][pair vector h] */
static pthread_once_t tab_once = PTHREAD_ONCE_INIT;

static void tab_build(void) {
    for (int m = 0; m < 128; m++) {
        uint16_t b;
        qwi_cpu_kv_fp8_to_bf16((const uint8_t[]){ (uint8_t)m }, &b, 1);
        tab_hi[m] = (uint8_t)(b >> 8);
        tab_lo[m] = (uint8_t)b;
    }
    for (int which = 0; which < 2; which++)
        for (int h = 0; h < 2; h++)
            for (int t = 0; t < 16; t++) {
                int first, second;
                qwi_cpu_kv_fp8_pair_src(which, h, t, &first, &second);
                uint8_t *ix = place_ix[which][h] + 4 * t;
                ix[0] = (uint8_t)first;
                ix[1] = (uint8_t)(64 + first);
                ix[2] = (uint8_t)second;
                ix[3] = (uint8_t)(64 + second);
            }
}

typedef struct pair_regs {
    __m512i hi0, hi1, lo0, lo1, sign, place[2];
} pair_regs;

DOT_INLINE pair_regs pair_setup(int which) {
    pair_regs r;
    r.hi0 = _mm512_load_si512(tab_hi);
    r.hi1 = _mm512_load_si512(tab_hi + 64);
    r.lo0 = _mm512_load_si512(tab_lo);
    r.lo1 = _mm512_load_si512(tab_lo + 64);
    r.sign = _mm512_set1_epi8((char)0x80);
    r.place[0] = _mm512_load_si512(place_ix[which][0]);
    r.place[1] = _mm512_load_si512(place_ix[which][1]);
    return r;
}

/* kv_fp8_dot_x86.h's pairs64: 5 instructions. */
DOT_INLINE void pairs64(const pair_regs *r, __m512i b, __m512i out[2]) {
    __m512i hi = _mm512_permutex2var_epi8(r->hi0, b, r->hi1);
    const __m512i lo = _mm512_permutex2var_epi8(r->lo0, b, r->lo1);
    hi = _mm512_ternarylogic_epi32(hi, b, r->sign, 0xf8);   /* hi | (b & 0x80) */
    out[0] = _mm512_permutex2var_epi8(lo, r->place[0], hi);
    out[1] = _mm512_permutex2var_epi8(lo, r->place[1], hi);
}

#include "cpu/kv_fp8_dot_x86.h"

bool qwi_cpu_kv_fp8_dot_vbmi(qwi_cpu_kv_fp8_kernels *t) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512vbmi") ||
        !qwi_kv_bf16dot_have_avx512bf16())
        return false;
    pthread_once(&tab_once, tab_build);
    t->dscores8 = dot_scores8;
    t->dpv8 = dot_pv8;
    return true;
}

#else

bool qwi_cpu_kv_fp8_dot_vbmi(qwi_cpu_kv_fp8_kernels *t) {
    (void)t;
    return false;
}

#endif
