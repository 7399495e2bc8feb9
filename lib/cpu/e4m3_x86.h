/*
 * e4m3_x86.h - e4m3 (fp8) bytes widened to f32 in AVX2 / AVX-512 registers,
 * exactly, for the fp8 KV cache's kernels (kv_fp8_x86.c: P.V and the K tile;
 * kv_bf16_x86.c: scores straight from fp8 K planes). Include inside an x86
 * block after <immintrin.h>.
 *
 * The widen: an e4m3 byte S.EEEE.MMM moved to the f16 bit pattern
 * S.0EEEE.MMM0000000 is an f16 of the same sign, mantissa and biased
 * exponent, f16's bias being 8 more than e4m3's (15 vs 7), so that f16
 * times 2^8 is the e4m3 value - subnormals included, which vcvtph2ps
 * converts exactly in hardware. The one pattern with no f16 twin is NaN
 * (S.1111.111, which the trick maps to +-480, not an e4m3 value): it is
 * replaced by the NaN qwi_e4m3_to_f32 gives. So the widen is exact and
 * every kernel reads the same floats.
 */
#ifndef QWI_CPU_E4M3_X86_H
#define QWI_CPU_E4M3_X86_H

#define QWI_E4M3_AVX2_INLINE static inline __attribute__((always_inline, target("avx2,f16c")))
#define QWI_E4M3_AVX512_INLINE static inline __attribute__((always_inline, target("avx512f,avx2,f16c")))

/* 8 e4m3 bytes at p -> 8 f32 (exact; NaN as qwi_e4m3_to_f32 gives it). */
QWI_E4M3_AVX2_INLINE __m256 e8(const uint8_t *p) {
    __m128i w = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)p));
    __m128i h = _mm_or_si128(_mm_and_si128(_mm_slli_epi16(w, 7), _mm_set1_epi16(0x3f80)),
                             _mm_and_si128(_mm_slli_epi16(w, 8), _mm_set1_epi16((short)0x8000)));
    __m256 f = _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(256.0f));
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 nan = _mm256_cmp_ps(_mm256_andnot_ps(sign, f), _mm256_set1_ps(480.0f), _CMP_EQ_OQ);
    __m256 qn = _mm256_or_ps(_mm256_and_ps(f, sign),
                             _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)));
    return _mm256_blendv_ps(f, qn, nan);
}

/* 16 e4m3 bytes at p -> 16 f32 (the e8 widen, 16 lanes). */
QWI_E4M3_AVX512_INLINE __m512 e16(const uint8_t *p) {
    __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)p));
    __m256i h =
        _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi16(w, 7), _mm256_set1_epi16(0x3f80)),
                        _mm256_and_si256(_mm256_slli_epi16(w, 8), _mm256_set1_epi16((short)0x8000)));
    __m512 f = _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(256.0f));
    const __m512i absm = _mm512_set1_epi32(0x7fffffff);
    __m512 a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(f), absm));
    __mmask16 nan = _mm512_cmp_ps_mask(a, _mm512_set1_ps(480.0f), _CMP_EQ_OQ);
    __m512i qn = _mm512_or_si512(_mm512_andnot_si512(absm, _mm512_castps_si512(f)),
                                 _mm512_set1_epi32(0x7fc00000));
    return _mm512_mask_blend_ps(nan, f, _mm512_castsi512_ps(qn));
}

#endif
