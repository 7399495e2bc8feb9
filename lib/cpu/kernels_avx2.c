/*
 * kernels_avx2.c - the AVX2+FMA kernel table (x86-64 only; see kernels.h
 * for the determinism contract every table keeps).
 *
 * Contract of this variant: QWR_LANES = 8 partial sums held in one ymm
 * register, lane j taking k % 8 == j in increasing k, each step a fused
 * multiply-add (so one rounding per step instead of the portable path's
 * two); the K tail is the same step with zero-padded operands; the lanes
 * are reduced by the portable path's tree ((0+4)+(1+5))+((2+6)+(3+7)).
 * Every register tile below runs exactly that per-element sequence, so a
 * result does not depend on M, N, the tile an element fell in, or the
 * thread that ran it.
 *
 * The functions carry __attribute__((target)) instead of the file being
 * built with -mavx2: the library is built once for baseline x86-64 and this
 * table is only installed after CPUID says the instructions exist.
 */
#include <string.h>

#include "cpu/kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma")))
#define AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma")))

/* The portable tree ((a0+a4)+(a1+a5))+((a2+a6)+(a3+a7)), exactly. */
AVX2_INLINE float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 h = _mm_hadd_ps(s, s);          /* [s0+s1, s2+s3, ...] */
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

AVX2_INLINE __m256 ld_f32(const float *p) { return _mm256_loadu_ps(p); }

/* bf16 -> f32 is a 16-bit left shift of the bit pattern: exact. */
AVX2_INLINE __m256 ld_bf16(const uint16_t *p) {
    __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}

/* Tail loads: the first r (< 8) elements, the rest zero. */
AVX2_INLINE __m256i tail_mask(int64_t r) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)r), idx);
}

AVX2_INLINE __m256 ld_f32_tail(const float *p, int64_t r) {
    return _mm256_maskload_ps(p, tail_mask(r));
}

AVX2_INLINE __m256 ld_bf16_tail(const uint16_t *p, int64_t r) {
    uint16_t tmp[8] = { 0 };
    memcpy(tmp, p, (size_t)r * sizeof(uint16_t));
    return ld_bf16(tmp);
}

/* Bytes ahead that the one-row (GEMV) tiles prefetch each weight stream,
 * one prefetch per 64-byte line. Batch-1 decode is nothing but this stream
 * and the kernel's own work per byte is close to the memory's time per byte,
 * so the loads must already be in flight well before they are used: with
 * 4 streams, 8 KiB ahead is about the next tile but one. Measured on the
 * 0.6B shape (docs/benchmarks.md): 1 KiB (the old value, issued once per
 * 16 bytes) reached ~45% of a plain read loop, 6-8 KiB once per line ~80%.
 * A prefetch past the end of the weights touches a valid or harmless
 * address (prefetches never fault). */
#ifndef PF_AHEAD
#define PF_AHEAD 8192
#endif

static inline void put(float *o, float dot, const float *bias, int64_t n, int accumulate) {
    float v = bias ? dot + bias[n] : dot;
    *o = accumulate ? *o + v : v;
}

/*
 * One register tile: MR activation rows x NR weight rows, MR*NR ymm
 * accumulators. The loops over the tile have constant bounds and are fully
 * unrolled, so the accumulators live in registers. Activation loads are
 * reused NR times, weight loads (and their bf16 widening) MR times.
 */
#define TILE(NAME, WT, LOADW, LOADW_TAIL, MR, NR)                                          \
AVX2_INLINE void NAME(const float *x, int64_t K, const WT *w, float *out, int64_t ldo,     \
                      const float *bias, int accumulate) {                                 \
    __m256 acc[MR][NR];                                                                    \
    _Pragma("GCC unroll 4") for (int i = 0; i < MR; i++)                                   \
        _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++) acc[i][j] = _mm256_setzero_ps(); \
    int64_t k = 0;                                                                         \
    for (; k + 8 <= K; k += 8) {                                                           \
        __m256 wv[NR];                                                                     \
        _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++) wv[j] = LOADW(w + j * K + k); \
        _Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) {                             \
            __m256 xv = _mm256_loadu_ps(x + i * K + k);                                    \
            _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++)                           \
                acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);                         \
        }                                                                                  \
    }                                                                                      \
    if (k < K) {                                                                           \
        const int64_t r = K - k;                                                           \
        __m256 wv[NR];                                                                     \
        _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++)                               \
            wv[j] = LOADW_TAIL(w + j * K + k, r);                                          \
        _Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) {                             \
            __m256 xv = ld_f32_tail(x + i * K + k, r);                                     \
            _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++)                           \
                acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);                         \
        }                                                                                  \
    }                                                                                      \
    _Pragma("GCC unroll 4") for (int i = 0; i < MR; i++)                                   \
        _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++)                               \
            put(out + i * ldo + j, hsum8(acc[i][j]), bias, j, accumulate);                 \
}

/*
 * The one-row (GEMV) tile: 1 activation row x NR weight rows, the same
 * per-element FMA sequence as TILE (acc[j] += x[k..k+8) * w[j][k..k+8) for
 * k = 0, 8, 16, ... in order, then the masked tail), with the k loop
 * unrolled by 4 steps so that each weight stream gets one prefetch per
 * 64-byte line (PF_AHEAD) instead of one per load. Unrolling only changes
 * the loop structure: every accumulator still sees its FMAs in increasing
 * k, so the bits are those of TILE with MR = 1.
 */
#define GEMV_TILE(NAME, WT, LOADW, LOADW_TAIL, NR)                                         \
AVX2_INLINE void NAME(const float *x, int64_t K, const WT *w, float *out, int64_t ldo,     \
                      const float *bias, int accumulate) {                                 \
    __m256 acc[NR];                                                                        \
    _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++) acc[j] = _mm256_setzero_ps();     \
    int64_t k = 0;                                                                         \
    for (; k + 32 <= K; k += 32) {                                                         \
        _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++)                               \
            _Pragma("GCC unroll 2") for (int b = 0; b < (int)(32 * sizeof(WT)); b += 64)   \
                _mm_prefetch((const char *)(w + j * K + k) + PF_AHEAD + b, _MM_HINT_T0);   \
        _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) {                              \
            __m256 xv = _mm256_loadu_ps(x + k + 8 * u);                                    \
            _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++)                           \
                acc[j] = _mm256_fmadd_ps(xv, LOADW(w + j * K + k + 8 * u), acc[j]);        \
        }                                                                                  \
    }                                                                                      \
    for (; k + 8 <= K; k += 8) {                                                           \
        __m256 xv = _mm256_loadu_ps(x + k);                                                \
        _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++)                               \
            acc[j] = _mm256_fmadd_ps(xv, LOADW(w + j * K + k), acc[j]);                    \
    }                                                                                      \
    if (k < K) {                                                                           \
        const int64_t r = K - k;                                                           \
        __m256 xv = ld_f32_tail(x + k, r);                                                 \
        _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++)                               \
            acc[j] = _mm256_fmadd_ps(xv, LOADW_TAIL(w + j * K + k, r), acc[j]);            \
    }                                                                                      \
    _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++)                                   \
        put(out + j, hsum8(acc[j]), bias, j, accumulate);                                  \
}

/*
 * Tiles: 4x3 (12 accumulators + 3 weight registers + 1 activation register
 * = the 16 ymm registers; 3x4 would need 17 and spill an accumulator) for
 * prefill and batched decode, with 4x2/4x1 for the column tail; 1x4 for
 * the row tail (4 independent weight streams, which is what a memory-bound
 * GEMV needs) and 1x1. Row tile outer, weight row inner: the caller's block
 * of weight rows stays in L2 while the row tiles sweep it.
 */
#define MATMUL(NAME, WT, LOADW, LOADW_TAIL)                                                \
TILE(NAME##_4x3, WT, LOADW, LOADW_TAIL, 4, 3)                                              \
TILE(NAME##_4x2, WT, LOADW, LOADW_TAIL, 4, 2)                                              \
TILE(NAME##_4x1, WT, LOADW, LOADW_TAIL, 4, 1)                                              \
GEMV_TILE(NAME##_1x4, WT, LOADW, LOADW_TAIL, 4)                                            \
GEMV_TILE(NAME##_1x1, WT, LOADW, LOADW_TAIL, 1)                                            \
static AVX2 void NAME(const float *x, int64_t M, int64_t K, const WT *w, int64_t N,       \
                      const float *bias, float *out, int64_t ldo, int accumulate) {        \
    int64_t m = 0;                                                                         \
    for (; m + 4 <= M; m += 4) {                                                           \
        const float *xm = x + m * K;                                                       \
        float *om = out + m * ldo;                                                         \
        int64_t n = 0;                                                                     \
        for (; n + 3 <= N; n += 3)                                                         \
            NAME##_4x3(xm, K, w + n * K, om + n, ldo, bias ? bias + n : NULL, accumulate); \
        if (n + 2 <= N) {                                                                  \
            NAME##_4x2(xm, K, w + n * K, om + n, ldo, bias ? bias + n : NULL, accumulate); \
            n += 2;                                                                        \
        }                                                                                  \
        if (n < N)                                                                         \
            NAME##_4x1(xm, K, w + n * K, om + n, ldo, bias ? bias + n : NULL, accumulate); \
    }                                                                                      \
    for (; m < M; m++) {                                                                   \
        const float *xm = x + m * K;                                                       \
        float *om = out + m * ldo;                                                         \
        int64_t n = 0;                                                                     \
        for (; n + 4 <= N; n += 4)                                                         \
            NAME##_1x4(xm, K, w + n * K, om + n, ldo, bias ? bias + n : NULL, accumulate); \
        for (; n < N; n++)                                                                 \
            NAME##_1x1(xm, K, w + n * K, om + n, ldo, bias ? bias + n : NULL, accumulate); \
    }                                                                                      \
}

MATMUL(avx2_matmul_f32, float, ld_f32, ld_f32_tail)
MATMUL(avx2_matmul_bf16, uint16_t, ld_bf16, ld_bf16_tail)

/* The 1x1 tile's arithmetic: attention scores use it, so they follow the
 * same contract as the matmuls of this table. */
static AVX2 float avx2_dot(const float *a, const float *b, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), acc);
    if (k < n) acc = _mm256_fmadd_ps(ld_f32_tail(a + k, n - k), ld_f32_tail(b + k, n - k), acc);
    return hsum8(acc);
}

/* o[i] += s * v[i] as one FMA per element (element-wise: no lane order). */
static AVX2 void avx2_axpy(float *o, float s, const float *v, int64_t n) {
    __m256 sv = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(o + i, _mm256_fmadd_ps(sv, _mm256_loadu_ps(v + i), _mm256_loadu_ps(o + i)));
    for (; i < n; i++) o[i] = __builtin_fmaf(s, v[i], o[i]);
}

static const qwi_cpu_kernels avx2_table = {
    .name = "avx2",
    .matmul_f32 = avx2_matmul_f32,
    .matmul_bf16 = avx2_matmul_bf16,
    .dot = avx2_dot,
    .axpy = avx2_axpy,
};

const qwi_cpu_kernels *qwi_cpu_kernels_avx2(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return NULL;
    return &avx2_table;
}

#else

const qwi_cpu_kernels *qwi_cpu_kernels_avx2(void) { return NULL; }

#endif
