/*
 * pairpanel.c - bf16 rounding and pair-panel packing (see pairpanel.h).
 */
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "cpu/pairpanel.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "qwi_pair_round_rows writes pairs as 16-bit halves: little-endian only");

/* A uint16_t that may alias the uint32_t pairs it is written into, and a
 * uint32_t that may alias the floats of widened rows. */
typedef uint16_t u16_alias __attribute__((may_alias));
typedef uint32_t u32_alias __attribute__((may_alias));

uint16_t qwi_pair_round_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);   /* quiet NaN */
    if ((u & 0x7f800000u) == 0) return (uint16_t)((u >> 16) & 0x8000u);   /* zero, subnormal (DAZ) */
    /* Round to nearest even: add 0x7fff plus the lowest kept bit; a carry
     * into the exponent is the correct rounding up (to inf at the top). */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* bf16 bits with a subnormal flushed to a signed zero (see pairpanel.h). */
static inline uint16_t flush_bf16(uint16_t h) { return (h & 0x7f80u) == 0 ? h & 0x8000u : h; }

size_t qwi_pairpanel_bytes(int64_t n, int64_t k) {
    if (n <= 0 || k <= 0) return 0;
    size_t rows = (size_t)QWI_DIV_UP(n, QWI_PAIR_PANEL) * QWI_PAIR_PANEL, bytes;
    if (__builtin_mul_overflow(rows, (size_t)qwi_pair_kp(k), &bytes) ||
        __builtin_mul_overflow(bytes, (size_t)4, &bytes))
        return 0;
    return bytes;
}

static inline uint16_t elem_bf16(qwi_dtype dt, const void *w, size_t i) {
    if (dt == QWI_DTYPE_BF16) return flush_bf16(((const uint16_t *)w)[i]);
    if (dt == QWI_DTYPE_F32) return qwi_pair_round_bf16(((const float *)w)[i]);
    return qwi_pair_round_bf16(qwi_f16_to_f32(((const uint16_t *)w)[i]));
}

bool qwi_pairpanel_pack(qwi_dtype dt, const void *w, int64_t n, int64_t k, void *dst) {
    if ((dt != QWI_DTYPE_F32 && dt != QWI_DTYPE_BF16 && dt != QWI_DTYPE_F16) ||
        !qwi_pairpanel_bytes(n, k))
        return false;
    const int64_t kp = qwi_pair_kp(k), np = QWI_DIV_UP(n, QWI_PAIR_PANEL);
    uint32_t *out = dst;
    for (int64_t p = 0; p < np; p++)
        for (int64_t r = 0; r < QWI_PAIR_PANEL; r++) {
            const int64_t row = p * QWI_PAIR_PANEL + r;
            uint32_t *o = out + p * kp * QWI_PAIR_PANEL + r;
            for (int64_t j = 0; j < kp; j++, o += QWI_PAIR_PANEL) {
                uint32_t lo = 0, hi = 0;
                if (row < n) {
                    lo = elem_bf16(dt, w, (size_t)(row * k + 2 * j));
                    if (2 * j + 1 < k) hi = elem_bf16(dt, w, (size_t)(row * k + 2 * j + 1));
                }
                *o = lo | hi << 16;
            }
        }
    return true;
}

float qwi_pairpanel_get(const void *panels, int64_t k, int64_t row, int64_t col) {
    const int64_t kp = qwi_pair_kp(k), p = row / QWI_PAIR_PANEL, r = row % QWI_PAIR_PANEL;
    uint32_t lane = ((const uint32_t *)panels)[(p * kp + col / 2) * QWI_PAIR_PANEL + r];
    uint32_t u = (col & 1 ? lane >> 16 : lane & 0xffffu) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Branch-free form of qwi_pair_round_bf16 (the same bits), so the row
 * loop vectorises: this runs on every matmul input. */
static inline uint16_t round_bf16_bits(uint32_t u) {
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    r = (u & 0x7f800000u) == 0 ? (u >> 16) & 0x8000u : r;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x0040u : r);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* round_bf16_bits on 8 values at a time (GCC -O2 does not vectorise the
 * scalar loop); the tail goes through the scalar form. Same bits. */
__attribute__((target("avx2"))) static void round_row_avx2(const float *x, int64_t k,
                                                           u16_alias *o) {
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
    const __m256i expm = _mm256_set1_epi32(0x7f800000), sign = _mm256_set1_epi32(0x8000);
    const __m256i abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i quiet = _mm256_set1_epi32(0x40), zero = _mm256_setzero_si256();
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
        __m256i u = _mm256_loadu_si256((const __m256i *)(const void *)(x + i));
        __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
        __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, bias), lsb), 16);
        __m256i sub = _mm256_cmpeq_epi32(_mm256_and_si256(u, expm), zero);
        r = _mm256_blendv_epi8(r, _mm256_and_si256(_mm256_srli_epi32(u, 16), sign), sub);
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), inf);
        r = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_srli_epi32(u, 16), quiet), nan);
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
        _mm_storeu_si128((__m128i *)(void *)(o + i), _mm256_castsi256_si128(p));
    }
    for (; i < k; i++) {
        uint32_t u;
        memcpy(&u, x + i, 4);
        o[i] = round_bf16_bits(u);
    }
}

/* vcvtne2ps2bf16 on 32 values at a time: Intel defines it as exactly
 * this rounding (nearest even, zero/subnormal inputs to a signed zero,
 * NaN kept and quieted with bit 6), one instruction instead of eleven. */
__attribute__((target("avx512f,avx512bf16"))) static void round_row_avx512bf16(const float *x,
                                                                              int64_t k,
                                                                              u16_alias *o) {
    int64_t i = 0;
    for (; i + 32 <= k; i += 32) {
        const __m512bh r = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
        _mm512_storeu_si512((void *)(o + i), (__m512i)r);
    }
    if (i + 16 <= k) {
        const __m256bh r = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + i));
        _mm256_storeu_si256((__m256i *)(void *)(o + i), (__m256i)r);
        i += 16;
    }
    for (; i < k; i++) {
        uint32_t u;
        memcpy(&u, x + i, 4);
        o[i] = round_bf16_bits(u);
    }
}

static bool have_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}

static bool have_avx512bf16(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
}
#endif

/* One row of k values to pairs at o by implementation impl (0 portable,
 * 1 avx2, 2 avx512bf16), which the caller has checked this CPU runs: the
 * check costs a call per row, and attention rounds one short row per
 * (sequence, head) tile. */
static void round_row_impl(int impl, const float *x, int64_t k, u16_alias *o) {
    switch (impl) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    case 2: round_row_avx512bf16(x, k, o); break;
    case 1: round_row_avx2(x, k, o); break;
#endif
    default:
        for (int64_t i = 0; i < k; i++) {
            uint32_t u;
            memcpy(&u, x + i, 4);
            o[i] = round_bf16_bits(u);
        }
        break;
    }
    if (k & 1) o[k] = 0;
}

/* round_row_impl after checking impl; false where this CPU cannot run it. */
static bool round_row_by(int impl, const float *x, int64_t k, u16_alias *o) {
    switch (impl) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    case 2:
        if (!have_avx512bf16()) return false;
        break;
    case 1:
        if (!have_avx2()) return false;
        break;
#endif
    case 0: break;
    default: return false;
    }
    round_row_impl(impl, x, k, o);
    return true;
}

/* The widest implementation this CPU runs, decided once. */
static int best_impl(void) {
    static int best = -1;   /* racing first callers all store the same value */
    if (__atomic_load_n(&best, __ATOMIC_RELAXED) < 0) {
        int b = 0;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        b = have_avx512bf16() ? 2 : have_avx2() ? 1 : 0;
#endif
        __atomic_store_n(&best, b, __ATOMIC_RELAXED);
    }
    return __atomic_load_n(&best, __ATOMIC_RELAXED);
}

bool qwi_pair_round_row_by(const char *impl, const float *x, int64_t k, uint32_t *out) {
    const int i = strcmp(impl, "portable") == 0 ? 0 : strcmp(impl, "avx2") == 0 ? 1
                  : strcmp(impl, "avx512bf16") == 0 ? 2 : -1;
    return round_row_by(i, x, k, (u16_alias *)out);
}

void qwi_pair_round_rows(const float *x, int64_t m0, int64_t m1, int64_t k, uint32_t *out) {
    /* The pairs as 16-bit halves: on a little-endian machine lane j is
     * (element 2j low, 2j+1 high), as pairpanel.h wants. */
    const int64_t kp = qwi_pair_kp(k);
    const int impl = best_impl();
    for (int64_t m = m0; m < m1; m++) round_row_impl(impl, x + m * k, k, (u16_alias *)(out + m * kp));
}

void qwi_pair_widen_rows(const uint32_t *pairs, int64_t m0, int64_t m1, int64_t kp, float *out) {
    for (int64_t m = m0; m < m1; m++) {
        const uint32_t *p = pairs + m * kp;
        u32_alias *o = (u32_alias *)(out + m * 2 * kp);   /* the f32s' bits */
        int64_t j = 0;
#if defined(__SSE2__)
        /* four pairs a step (x86-64's baseline; GCC 12 at -O2 left the
         * scalar loop below scalar: 1% of an AVX2 prefill) */
        const __m128i hi = _mm_set1_epi32((int)0xffff0000u);
        for (; j + 4 <= kp; j += 4) {
            const __m128i v = _mm_loadu_si128((const __m128i *)(p + j));
            const __m128i l = _mm_slli_epi32(v, 16), h = _mm_and_si128(v, hi);
            _mm_storeu_si128((__m128i *)(o + 2 * j), _mm_unpacklo_epi32(l, h));
            _mm_storeu_si128((__m128i *)(o + 2 * j + 4), _mm_unpackhi_epi32(l, h));
        }
#endif
        for (; j < kp; j++) {
            o[2 * j] = p[j] << 16;
            o[2 * j + 1] = p[j] & 0xffff0000u;
        }
    }
}
