/*
 * kv_fp8_x86.c - the AVX2+FMA+F16C and AVX-512F fp8-KV attention kernels
 * (see kv_fp8.h for their contracts). Functions carry
 * __attribute__((target)) and a table is only handed out after CPUID says
 * its instructions exist.
 *
 * The widen (e8, e16) is exact (cpu/e4m3_x86.h says how), so every table
 * reads the same floats.
 *
 * pv keeps the accumulators of up to 8 (AVX-512; AVX2 4) outputs in
 * registers over the positions, each V vector widened once for all of
 * them, one FMA chain per output over the positions in order. The AVX2 pv
 * widens whole 16s and 32s by nibble tables (e4m3_split16/32), the rest
 * and the transpose by e8.
 */
#include <math.h>
#include <string.h>

#include "cpu/kv_fp8.h"
#include "cpu/cpu_features.h"
#include "fp8.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define UNROLL _Pragma("GCC unroll 8")

#include "cpu/e4m3_x86.h"

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma,f16c")))
#define AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))
#define AVX512_INLINE static inline __attribute__((always_inline, target("avx512f,avx2,fma,f16c")))

/* ---- AVX2: 8 lanes ------------------------------------------------------ */

/* 16 e4m3 at p -> f32, split (the P.V template's KV_PV_SPLIT16). */
AVX2_INLINE void fp8_split16(const uint8_t *p, __m256 *ev, __m256 *od) {
    e4m3_split16(_mm_loadu_si128((const __m128i *)(const void *)p), ev, od);
}

#define KV_PV_ELEM uint8_t
#define KV_PV_SPLIT16(p, ve, vo) fp8_split16((p), (ve), (vo))
#define KV_PV_SPLIT32(p, ve, vo) e4m3_split32((p), (ve), (vo))
#define KV_PV_WIDEN8(p) e8(p)
#define KV_PV_WIDEN16(p) e16(p)
#define KV_PV_SCALAR(e) qwi_e4m3_to_f32(e)
#include "cpu/kv_pv_x86.h"

#define KV_TRANSPOSE_PORTABLE qwi_cpu_kv_fp8_transpose
#include "cpu/kv_transpose_x86.h"

/* to_bf16 (kv_fp8.h), 32 codes at a time: the nibble tables give each
 * code's bf16 high and low bytes, which interleave into words within each
 * 128-bit lane (codes 0-7 and 16-23 in w0, 8-15 and 24-31 in w1); two
 * lane permutes put them back in memory order. The last n % 32 codes go
 * through the portable form (the same values). */
static AVX2 void avx2_to_bf16(const uint8_t *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i hi, lo;
        e4m3_bf16_bytes32(_mm256_loadu_si256((const __m256i *)(const void *)(src + i)), &hi, &lo);
        const __m256i w0 = _mm256_unpacklo_epi8(lo, hi), w1 = _mm256_unpackhi_epi8(lo, hi);
        _mm256_storeu_si256((__m256i *)(void *)(dst + i), _mm256_permute2x128_si256(w0, w1, 0x20));
        _mm256_storeu_si256((__m256i *)(void *)(dst + i + 16), _mm256_permute2x128_si256(w0, w1, 0x31));
    }
    if (i < n) qwi_cpu_kv_fp8_to_bf16(src + i, dst + i, n - i);
}

static const qwi_cpu_kv_fp8_kernels avx2_table = {
    .name = "avx2",
    .transpose = avx2_transpose,
    .pv = avx2_pv,
    .to_bf16 = avx2_to_bf16,
};

const qwi_cpu_kv_fp8_kernels *qwi_cpu_kv_fp8_avx2(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
        !qwi_cpu_has_f16c())
        return NULL;
    return &avx2_table;
}

/* ---- AVX-512F: 16 lanes ------------------------------------------------- */

static const qwi_cpu_kv_fp8_kernels avx512_table = {
    .name = "avx512",
    .transpose = avx2_transpose,
    .pv = avx512_pv,
    .to_bf16 = avx2_to_bf16,   /* AVX-512F alone has no byte shuffles at zmm width */
};

const qwi_cpu_kv_fp8_kernels *qwi_cpu_kv_fp8_avx512(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx2") ||
        !__builtin_cpu_supports("fma") || !qwi_cpu_has_f16c())
        return NULL;
    return &avx512_table;
}

#else

const qwi_cpu_kv_fp8_kernels *qwi_cpu_kv_fp8_avx2(void) { return NULL; }
const qwi_cpu_kv_fp8_kernels *qwi_cpu_kv_fp8_avx512(void) { return NULL; }

#endif
