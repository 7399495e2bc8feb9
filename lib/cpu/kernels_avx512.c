/*
 * kernels_avx512.c - the AVX-512F kernel table (x86-64 only; see kernels.h
 * for the determinism contract every table keeps).
 *
 * Contract of this variant: 16 partial sums in one zmm register, lane j
 * taking k % 16 == j in increasing k, each step a fused multiply-add; the K
 * tail is the same step with zero-padded operands; the 16 lanes are folded
 * to 8 as lane j + lane j+8, then reduced by the portable 8-lane tree
 * ((0+4)+(1+5))+((2+6)+(3+7)). Every register tile runs exactly that
 * per-element sequence, so a result does not depend on M, N, the tile or
 * the thread. (Different from the AVX2 table's 8 lanes: the engine installs
 * one table per process, which is what batched == alone needs.)
 *
 * The panel kernels of this table (the packed weights of the exact mode)
 * are zmm register tiles in kernels_avx512_panel.c; the panel contract has
 * no lanes, so they are bit-identical to the AVX2 table's. The attention
 * helpers dot4/axpy4 (and their x2 forms) below run their chains side by
 * side and are bit-identical to the single dot/axpy of this table.
 *
 * Why not vdpbf16ps (AVX512_BF16): it multiplies bf16 by bf16, so the f32
 * activations would be rounded to 8 mantissa bits first - a relative error
 * of ~4e-3 per product, forty times the 1e-4 the reference test allows.
 * Widening the bf16 weights to f32 in registers (a 16-bit shift) and using
 * f32 FMAs keeps f32 accuracy at the same memory traffic, and decode, where
 * bf16 matters, is bound by that traffic, not by the multiply.
 */
#include <string.h>

#include "cpu/kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,avx2,fma")))
#define AVX512_INLINE static inline __attribute__((always_inline, target("avx512f,avx2,fma")))

/* Fold 16 lanes to 8 (j + j+8), then the portable tree, exactly. */
AVX512_INLINE float hsum16(__m512 v) {
    __m256 f = _mm256_add_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(f), _mm256_extractf128_ps(f, 1));
    __m128 h = _mm_hadd_ps(s, s);
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

AVX512_INLINE __m512 ld_f32(const float *p) { return _mm512_loadu_ps(p); }

/* bf16 -> f32 is a 16-bit left shift of the bit pattern: exact. */
AVX512_INLINE __m512 ld_bf16(const uint16_t *p) {
    __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
}

/* Tail loads: the first r (< 16) elements, the rest zero. */
AVX512_INLINE __m512 ld_f32_tail(const float *p, int64_t r) {
    return _mm512_maskz_loadu_ps((__mmask16)((1u << r) - 1u), p);
}

AVX512_INLINE __m512 ld_bf16_tail(const uint16_t *p, int64_t r) {
    uint16_t tmp[16] = { 0 };
    memcpy(tmp, p, (size_t)r * sizeof(uint16_t));
    return ld_bf16(tmp);
}

static inline void put(float *o, float dot, const float *bias, int64_t n, int accumulate) {
    float v = bias ? dot + bias[n] : dot;
    *o = accumulate ? *o + v : v;
}

/*
 * One register tile: MR activation rows x NR weight rows, MR*NR zmm
 * accumulators. The loops over the tile have constant bounds and are fully
 * unrolled, so the accumulators live in registers. Activation loads are
 * reused NR times, weight loads (and their bf16 widening) MR times.
 */
#define TILE(NAME, WT, LOADW, LOADW_TAIL, MR, NR)                                          \
AVX512_INLINE void NAME(const float *x, int64_t K, const WT *w, float *out, int64_t ldo,     \
                      const float *bias, int accumulate) {                                 \
    __m512 acc[MR][NR];                                                                    \
    _Pragma("GCC unroll 4") for (int i = 0; i < MR; i++)                                   \
        _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++) acc[i][j] = _mm512_setzero_ps(); \
    int64_t k = 0;                                                                         \
    for (; k + 16 <= K; k += 16) {                                                           \
        __m512 wv[NR];                                                                     \
        _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++) wv[j] = LOADW(w + j * K + k); \
        _Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) {                             \
            __m512 xv = _mm512_loadu_ps(x + i * K + k);                                    \
            _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++)                           \
                acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);                         \
        }                                                                                  \
    }                                                                                      \
    if (k < K) {                                                                           \
        const int64_t r = K - k;                                                           \
        __m512 wv[NR];                                                                     \
        _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++)                               \
            wv[j] = LOADW_TAIL(w + j * K + k, r);                                          \
        _Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) {                             \
            __m512 xv = ld_f32_tail(x + i * K + k, r);                                     \
            _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++)                           \
                acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);                         \
        }                                                                                  \
    }                                                                                      \
    _Pragma("GCC unroll 4") for (int i = 0; i < MR; i++)                                   \
        _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++)                               \
            put(out + i * ldo + j, hsum16(acc[i][j]), bias, j, accumulate);                 \
}

/*
 * Tiles: 3x4 (12 accumulators + 4 weight registers = the 16 zmm registers)
 * for prefill and batched decode, 1x4 for the row tail (4 independent
 * weight streams, which is what a memory-bound GEMV needs), and x1 tiles for
 * column tails. Row tile outer, weight row inner: the caller's block of
 * weight rows stays in L2 while the row tiles sweep it.
 */
#define MATMUL(NAME, WT, LOADW, LOADW_TAIL)                                                \
TILE(NAME##_4x4, WT, LOADW, LOADW_TAIL, 4, 4)                                              \
TILE(NAME##_4x1, WT, LOADW, LOADW_TAIL, 4, 1)                                              \
TILE(NAME##_1x4, WT, LOADW, LOADW_TAIL, 1, 4)                                              \
TILE(NAME##_1x1, WT, LOADW, LOADW_TAIL, 1, 1)                                              \
static AVX512 void NAME(const float *x, int64_t M, int64_t K, const WT *w, int64_t N,       \
                      const float *bias, float *out, int64_t ldo, int accumulate) {        \
    int64_t m = 0;                                                                         \
    for (; m + 4 <= M; m += 4) {                                                           \
        int64_t n = 0;                                                                     \
        for (; n + 4 <= N; n += 4)                                                         \
            NAME##_4x4(x + m * K, K, w + n * K, out + m * ldo + n, ldo,                    \
                       bias ? bias + n : NULL, accumulate);                                \
        for (; n < N; n++)                                                                 \
            NAME##_4x1(x + m * K, K, w + n * K, out + m * ldo + n, ldo,                    \
                       bias ? bias + n : NULL, accumulate);                                \
    }                                                                                      \
    for (; m < M; m++) {                                                                   \
        int64_t n = 0;                                                                     \
        for (; n + 4 <= N; n += 4)                                                         \
            NAME##_1x4(x + m * K, K, w + n * K, out + m * ldo + n, ldo,                    \
                       bias ? bias + n : NULL, accumulate);                                \
        for (; n < N; n++)                                                                 \
            NAME##_1x1(x + m * K, K, w + n * K, out + m * ldo + n, ldo,                    \
                       bias ? bias + n : NULL, accumulate);                                \
    }                                                                                      \
}

MATMUL(avx512_matmul_f32, float, ld_f32, ld_f32_tail)
MATMUL(avx512_matmul_bf16, uint16_t, ld_bf16, ld_bf16_tail)

/* The 1x1 tile's arithmetic: attention scores use it, so they follow the
 * same contract as the matmuls of this table. */
static AVX512 float avx512_dot(const float *a, const float *b, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k), acc);
    if (k < n) acc = _mm512_fmadd_ps(ld_f32_tail(a + k, n - k), ld_f32_tail(b + k, n - k), acc);
    return hsum16(acc);
}

/* o[i] += s * v[i] as one FMA per element (element-wise: no lane order). */
static AVX512 void avx512_axpy(float *o, float s, const float *v, int64_t n) {
    __m512 sv = _mm512_set1_ps(s);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(o + i, _mm512_fmadd_ps(sv, _mm512_loadu_ps(v + i), _mm512_loadu_ps(o + i)));
    for (; i < n; i++) o[i] = __builtin_fmaf(s, v[i], o[i]);
}

/* Four avx512_dot chains side by side: the same per-lane FMA sequence (and
 * zero-padded tail step) for each b[i], then the same fold, so out[i] ==
 * avx512_dot(a, b[i], n) bit for bit. */
static AVX512 void avx512_dot4(const float *a, const float *const b[4], int64_t n, float out[4]) {
    __m512 acc[4] = { _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                      _mm512_setzero_ps() };
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        __m512 av = _mm512_loadu_ps(a + k);
        for (int i = 0; i < 4; i++) acc[i] = _mm512_fmadd_ps(av, _mm512_loadu_ps(b[i] + k), acc[i]);
    }
    if (k < n) {
        __m512 av = ld_f32_tail(a + k, n - k);
        for (int i = 0; i < 4; i++) acc[i] = _mm512_fmadd_ps(av, ld_f32_tail(b[i] + k, n - k), acc[i]);
    }
    for (int i = 0; i < 4; i++) out[i] = hsum16(acc[i]);
}

/* o += s[0]*v[0] ... s[3]*v[3], each element's four FMAs in that order (as
 * four avx512_axpy calls do it: axpy is element-wise, and its scalar tail is
 * the same single-rounding fmaf). */
static AVX512 void avx512_axpy4(float *o, const float s[4], const float *const v[4], int64_t n) {
    __m512 sv[4];
    for (int i = 0; i < 4; i++) sv[i] = _mm512_set1_ps(s[i]);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 acc = _mm512_loadu_ps(o + i);
        for (int j = 0; j < 4; j++) acc = _mm512_fmadd_ps(sv[j], _mm512_loadu_ps(v[j] + i), acc);
        _mm512_storeu_ps(o + i, acc);
    }
    for (; i < n; i++)
        for (int j = 0; j < 4; j++) o[i] = __builtin_fmaf(s[j], v[j][i], o[i]);
}

/* dot4 for two heads: 8 chains, each K row loaded once for both. */
static AVX512 void avx512_dot4x2(const float *a0, const float *a1, const float *const b[4],
                                 int64_t n, float out0[4], float out1[4]) {
    __m512 c0[4], c1[4];
    for (int i = 0; i < 4; i++) c0[i] = c1[i] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        __m512 x0 = _mm512_loadu_ps(a0 + k), x1 = _mm512_loadu_ps(a1 + k);
        for (int i = 0; i < 4; i++) {
            __m512 bv = _mm512_loadu_ps(b[i] + k);
            c0[i] = _mm512_fmadd_ps(x0, bv, c0[i]);
            c1[i] = _mm512_fmadd_ps(x1, bv, c1[i]);
        }
    }
    if (k < n) {
        __m512 x0 = ld_f32_tail(a0 + k, n - k), x1 = ld_f32_tail(a1 + k, n - k);
        for (int i = 0; i < 4; i++) {
            __m512 bv = ld_f32_tail(b[i] + k, n - k);
            c0[i] = _mm512_fmadd_ps(x0, bv, c0[i]);
            c1[i] = _mm512_fmadd_ps(x1, bv, c1[i]);
        }
    }
    for (int i = 0; i < 4; i++) {
        out0[i] = hsum16(c0[i]);
        out1[i] = hsum16(c1[i]);
    }
}

/* axpy4 for two heads: two independent FMA chains per V load. */
static AVX512 void avx512_axpy4x2(float *o0, float *o1, const float s0[4], const float s1[4],
                                  const float *const v[4], int64_t n) {
    __m512 w0[4], w1[4];
    for (int j = 0; j < 4; j++) {
        w0[j] = _mm512_set1_ps(s0[j]);
        w1[j] = _mm512_set1_ps(s1[j]);
    }
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 a0 = _mm512_loadu_ps(o0 + i), a1 = _mm512_loadu_ps(o1 + i);
        for (int j = 0; j < 4; j++) {
            __m512 vv = _mm512_loadu_ps(v[j] + i);
            a0 = _mm512_fmadd_ps(w0[j], vv, a0);
            a1 = _mm512_fmadd_ps(w1[j], vv, a1);
        }
        _mm512_storeu_ps(o0 + i, a0);
        _mm512_storeu_ps(o1 + i, a1);
    }
    for (; i < n; i++)
        for (int j = 0; j < 4; j++) {
            o0[i] = __builtin_fmaf(s0[j], v[j][i], o0[i]);
            o1[i] = __builtin_fmaf(s1[j], v[j][i], o1[i]);
        }
}

static const qwi_cpu_kernels avx512_table = {
    .name = "avx512",
    .matmul_f32 = avx512_matmul_f32,
    .matmul_bf16 = avx512_matmul_bf16,
    /* zmm register tiles (kernels_avx512_panel.c), bit-identical to the
     * AVX2 panel kernels: the panel contract has no lanes. */
    .matmul_f32_panel = qwi_avx512_matmul_f32_panel,
    .matmul_bf16_panel = qwi_avx512_matmul_bf16_panel,
    /* kernels_quant_avx512.c */
    .matmul_qf32 = qwi_avx512_matmul_qf32,
    .matmul_qpair = qwi_avx512_matmul_qpair,
    .matmul_q4i = qwi_avx2_matmul_q4i,
    .dot = avx512_dot,
    .axpy = avx512_axpy,
    .dot4 = avx512_dot4,
    .axpy4 = avx512_axpy4,
    .dot4x2 = avx512_dot4x2,
    .axpy4x2 = avx512_axpy4x2,
};

const qwi_cpu_kernels *qwi_cpu_kernels_avx512(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx2") ||
        !__builtin_cpu_supports("fma"))
        return NULL;
    return &avx512_table;
}

#else

const qwi_cpu_kernels *qwi_cpu_kernels_avx512(void) { return NULL; }

#endif
