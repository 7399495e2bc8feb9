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
 *
 * The AVX2 kernels that read many elements per step (P.V, the K-plane
 * scores) widen by nibble tables instead (e4m3_split16/32 below): about 5
 * operations per 8 elements where e8 takes about 14, the same floats.
 */
#ifndef QWI_CPU_E4M3_X86_H
#define QWI_CPU_E4M3_X86_H

#define QWI_E4M3_AVX2_INLINE static inline __attribute__((always_inline, target("avx2,f16c")))
#define QWI_E4M3_AVX512_INLINE static inline __attribute__((always_inline, target("avx512f,avx2,f16c")))
#define QWI_E4M3_AVX512BW_INLINE \
    static inline __attribute__((always_inline, target("avx512f,avx512bw,avx2,f16c")))

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

/* ---- The nibble-table widen (AVX2: 16 or 32 elements) ------------------
 *
 * Every e4m3 value is exactly a bf16, and for a normal byte S.EEEE.MMM the
 * bf16 is S.(E+120).MMM0000: its high byte, S | (E + 120) >> 1 =
 * S | 60 + (E >> 1), depends only on the byte's high nibble (S E3 E2 E1),
 * and its low byte, (E & 1) << 7 | MMM << 4, is the low nibble shifted up
 * 4. So one vpshufb over the high nibbles and a shift give both bytes of
 * 32 elements at once. The 18 bytes where that is wrong - the subnormals
 * (E = 0: M * 2^-9, zeros included) and NaN (S.1111.111), either sign -
 * get a correction XORed into both bytes (the sign bit untouched), from
 * two more vpshufbs indexed by ((x + 1) & 0x7f) + 0x77: that is 0x77 for
 * NaN, 0x78 + M for a subnormal, and has bit 7 set, so vpshufb gives 0,
 * for every other byte. The bytes are then interleaved into bf16 words in
 * order, and each 16 words widened as the bf16 cache's split widen does
 * (one shift gives the even elements' f32, one mask the odd ones'):
 *   ev = elements 0, 2, .., 14 and od = 1, 3, .., 15 of each 16.
 * Callers keep their accumulators in that order and put them back at the
 * store (kv_pv_x86.h, kv_bf16_x86.c). The tables are checked against
 * qwi_e4m3_to_f32 for all 256 bytes by the tests (test_kv_fp8). */

/* bf16 high byte of a normal e4m3, by high nibble: (h & 8) << 4 | (60 + (h & 7)) */
#define QWI_E4M3_HI_BYTES                                                                          \
    0x3c, 0x3d, 0x3e, 0x3f, 0x40, 0x41, 0x42, 0x43, (char)0xbc, (char)0xbd, (char)0xbe,           \
        (char)0xbf, (char)0xc0, (char)0xc1, (char)0xc2, (char)0xc3
/* Corrections by index (see above): [7] NaN (0x43 -> 0x7f, 0xf0 -> 0xc0),
 * [8 + M] subnormal M (bf16 of M * 2^-9: 0x0000, 0x3b00, 0x3b80, 0x3bc0,
 * 0x3c00, 0x3c20, 0x3c40, 0x3c60; the formula gave 0x3c00 | M << 4). */
#define QWI_E4M3_FIX_HI 0, 0, 0, 0, 0, 0, 0, 0x3c, 0x3c, 0x07, 0x07, 0x07, 0, 0, 0, 0
#define QWI_E4M3_FIX_LO                                                                            \
    0, 0, 0, 0, 0, 0, 0, 0x30, 0, 0x10, (char)0xa0, (char)0xf0, 0x40, 0x70, 0x20, 0x10

/* The high and low bf16 bytes of the 16 e4m3 bytes in x. */
QWI_E4M3_AVX2_INLINE void e4m3_bf16_bytes16(__m128i x, __m128i *hi, __m128i *lo) {
    const __m128i thi = _mm_setr_epi8(QWI_E4M3_HI_BYTES);
    const __m128i fhi = _mm_setr_epi8(QWI_E4M3_FIX_HI), flo = _mm_setr_epi8(QWI_E4M3_FIX_LO);
    const __m128i h = _mm_shuffle_epi8(thi, _mm_and_si128(_mm_srli_epi16(x, 4), _mm_set1_epi8(0x0f)));
    const __m128i l = _mm_and_si128(_mm_slli_epi16(x, 4), _mm_set1_epi8((char)0xf0));
    const __m128i ix = _mm_add_epi8(
        _mm_and_si128(_mm_add_epi8(x, _mm_set1_epi8(1)), _mm_set1_epi8(0x7f)), _mm_set1_epi8(0x77));
    *hi = _mm_xor_si128(h, _mm_shuffle_epi8(fhi, ix));
    *lo = _mm_xor_si128(l, _mm_shuffle_epi8(flo, ix));
}

/* The same for the 32 bytes in x (each 128-bit lane on its own). */
QWI_E4M3_AVX2_INLINE void e4m3_bf16_bytes32(__m256i x, __m256i *hi, __m256i *lo) {
    const __m256i thi = _mm256_setr_epi8(QWI_E4M3_HI_BYTES, QWI_E4M3_HI_BYTES);
    const __m256i fhi = _mm256_setr_epi8(QWI_E4M3_FIX_HI, QWI_E4M3_FIX_HI);
    const __m256i flo = _mm256_setr_epi8(QWI_E4M3_FIX_LO, QWI_E4M3_FIX_LO);
    const __m256i h =
        _mm256_shuffle_epi8(thi, _mm256_and_si256(_mm256_srli_epi16(x, 4), _mm256_set1_epi8(0x0f)));
    const __m256i l = _mm256_and_si256(_mm256_slli_epi16(x, 4), _mm256_set1_epi8((char)0xf0));
    const __m256i ix =
        _mm256_add_epi8(_mm256_and_si256(_mm256_add_epi8(x, _mm256_set1_epi8(1)), _mm256_set1_epi8(0x7f)),
                        _mm256_set1_epi8(0x77));
    *hi = _mm256_xor_si256(h, _mm256_shuffle_epi8(fhi, ix));
    *lo = _mm256_xor_si256(l, _mm256_shuffle_epi8(flo, ix));
}

/* The same for the 64 bytes in x (AVX512BW; each 128-bit lane on its own:
 * the "avx512bw" fp8 table, cpu/kv_fp8_bw.c). */
QWI_E4M3_AVX512BW_INLINE void e4m3_bf16_bytes64(__m512i x, __m512i *hi, __m512i *lo) {
    const __m512i thi = _mm512_broadcast_i32x4(_mm_setr_epi8(QWI_E4M3_HI_BYTES));
    const __m512i fhi = _mm512_broadcast_i32x4(_mm_setr_epi8(QWI_E4M3_FIX_HI));
    const __m512i flo = _mm512_broadcast_i32x4(_mm_setr_epi8(QWI_E4M3_FIX_LO));
    const __m512i h =
        _mm512_shuffle_epi8(thi, _mm512_and_si512(_mm512_srli_epi16(x, 4), _mm512_set1_epi8(0x0f)));
    const __m512i l = _mm512_and_si512(_mm512_slli_epi16(x, 4), _mm512_set1_epi8((char)0xf0));
    const __m512i ix =
        _mm512_add_epi8(_mm512_and_si512(_mm512_add_epi8(x, _mm512_set1_epi8(1)), _mm512_set1_epi8(0x7f)),
                        _mm512_set1_epi8(0x77));
    *hi = _mm512_xor_si512(h, _mm512_shuffle_epi8(fhi, ix));
    *lo = _mm512_xor_si512(l, _mm512_shuffle_epi8(flo, ix));
}

/* 16 bf16 words in order (w) -> their f32, even elements and odd ones
 * (the bf16 cache's split widen too). */
QWI_E4M3_AVX2_INLINE void bf16_split_words(__m256i w, __m256 *ev, __m256 *od) {
    *ev = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    *od = _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32((int)0xffff0000u)));
}

/* The 16 e4m3 bytes in x -> f32, split: ev = elements 0, 2, .., 14, od =
 * 1, 3, .., 15 (exact; NaN as qwi_e4m3_to_f32 gives it). */
QWI_E4M3_AVX2_INLINE void e4m3_split16(__m128i x, __m256 *ev, __m256 *od) {
    __m128i hi, lo;
    e4m3_bf16_bytes16(x, &hi, &lo);
    bf16_split_words(_mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi)), ev, od);
}

/* The 32 e4m3 bytes at p -> f32, split per 16: ev[c], od[c] are elements
 * 16c + 0, 2, .., 14 and 16c + 1, 3, .., 15 (exact). The qword permute
 * puts bytes 0-7 and 8-15 in the low halves of the two lanes, so the
 * in-lane byte interleave gives elements 0-15 in order, then 16-31. */
QWI_E4M3_AVX2_INLINE void e4m3_split32(const uint8_t *p, __m256 ev[2], __m256 od[2]) {
    const __m256i x =
        _mm256_permute4x64_epi64(_mm256_loadu_si256((const __m256i *)(const void *)p), 0xd8);
    __m256i hi, lo;
    e4m3_bf16_bytes32(x, &hi, &lo);
    bf16_split_words(_mm256_unpacklo_epi8(lo, hi), &ev[0], &od[0]);
    bf16_split_words(_mm256_unpackhi_epi8(lo, hi), &ev[1], &od[1]);
}

#endif
