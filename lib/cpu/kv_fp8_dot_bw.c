/*
 * kv_fp8_dot_bw.c - the fp8 cache's bf16 dot-product kernels (kv_fp8.h:
 * dscores8, dpv8) for CPUs with AVX512_BF16 but no AVX512_VBMI (Cooper
 * Lake Xeons): kv_fp8_dot_vbmi.c's kernels with the pairs made without
 * byte permutes.
 *
 * Why: in the fast mode such a CPU reads the fp8 cache on bf16 dot
 * products like any other with AVX512_BF16, and without these its decode
 * rows would go through the widened tile, whose round trip through memory
 * cost more than it saved on a decode row (docs/benchmarks.md).
 *
 * The pairs, per 64 bytes: the nibble tables of cpu/e4m3_x86.h give each
 * code's bf16 high and low bytes (12 instructions), two in-lane byte
 * interleaves make them bf16 words, and two vpermt2w pick each pair's two
 * words (index tables from qwi_cpu_kv_fp8_pair_src): 16 instructions for
 * 32 pairs where the VBMI form takes 5. The values and chains are the VBMI
 * form's, so are the bits (tests/test_kv_fp8_dot.c).
 */
#include <pthread.h>

#include "cpu/kv_fp8.h"
#include "fp8.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "cpu/cpu_features.h"
#include "cpu/e4m3_x86.h"
#include "cpu/kv_bf16dot.h"

#define DOT __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,f16c")))
#define DOT_INLINE \
    static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,f16c")))

/* vpermt2w indices, filled once: word 2t / 2t+1 of pair vector h take the
 * words that byte first / second of b becomes after the interleaves (byte
 * o of 128-bit lane L: word 8L + o of the low interleave for o < 8, else
 * word 8L + o - 8 of the high one, which vpermt2w numbers from 32). */
static uint16_t place_ix[2][2][32] __attribute__((aligned(64)));   /* [K or V][pair vector h] */
static pthread_once_t tab_once = PTHREAD_ONCE_INIT;

static int word_of(int byte) {
    const int lane = byte / 16, o = byte % 16;
    return o < 8 ? 8 * lane + o : 32 + 8 * lane + o - 8;
}

static void tab_build(void) {
    for (int which = 0; which < 2; which++)
        for (int h = 0; h < 2; h++)
            for (int t = 0; t < 16; t++) {
                int first, second;
                qwi_cpu_kv_fp8_pair_src(which, h, t, &first, &second);
                place_ix[which][h][2 * t] = (uint16_t)word_of(first);
                place_ix[which][h][2 * t + 1] = (uint16_t)word_of(second);
            }
}

typedef struct pair_regs {
    __m512i place[2];
} pair_regs;

DOT_INLINE pair_regs pair_setup(int which) {
    pair_regs r;
    r.place[0] = _mm512_load_si512(place_ix[which][0]);
    r.place[1] = _mm512_load_si512(place_ix[which][1]);
    return r;
}

/* kv_fp8_dot_x86.h's pairs64. */
DOT_INLINE void pairs64(const pair_regs *r, __m512i b, __m512i out[2]) {
    __m512i hi, lo;
    e4m3_bf16_bytes64(b, &hi, &lo);
    const __m512i w0 = _mm512_unpacklo_epi8(lo, hi), w1 = _mm512_unpackhi_epi8(lo, hi);
    out[0] = _mm512_permutex2var_epi16(w0, r->place[0], w1);
    out[1] = _mm512_permutex2var_epi16(w0, r->place[1], w1);
}

#include "cpu/kv_fp8_dot_x86.h"

bool qwi_cpu_kv_fp8_dot_bw(qwi_cpu_kv_fp8_kernels *t) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx2") ||
        !qwi_cpu_has_f16c() || !qwi_kv_bf16dot_have_avx512bf16())
        return false;
    pthread_once(&tab_once, tab_build);
    t->dscores8 = dot_scores8;
    t->dpv8 = dot_pv8;
    return true;
}

#else

bool qwi_cpu_kv_fp8_dot_bw(qwi_cpu_kv_fp8_kernels *t) {
    (void)t;
    return false;
}

#endif
