/*
 * kv_transpose_x86.h - the AVX2 transpose of K for the f32 attention
 * kernels (the transpose entry of cpu/kv_bf16.h and cpu/kv_fp8.h: n K rows
 * of hd elements, k[j] + d * dstride, widened to f32 into kt[d * ld + j]),
 * written once for every element type.
 *
 * A template, not a header: kv_bf16_x86.c and kv_fp8_x86.c include it (in
 * their x86-64 GCC/Clang part, once each) after cpu/kv_pv_x86.h, whose
 * element definitions it reads - KV_PV_ELEM, KV_PV_WIDEN8 (8 elements to a
 * __m256, exact) and KV_PV_SCALAR (one element, the same value) - and
 * after defining
 *   KV_TRANSPOSE_PORTABLE  the portable transpose of the same contract
 *                          (qwi_cpu_kv_bf16_transpose / _fp8_), which takes
 *                          the last n % 8 rows
 * and AVX2, AVX2_INLINE. It defines the static tr8x8, plane_run and
 * avx2_transpose. Every element goes through the exact widen, so every
 * path gives the same floats.
 */

/* Rows j .. j+7 (k[j+i] + d0, 8 elements each) to kt[(d0+i)*ld + j ..], 8x8. */
AVX2_INLINE void tr8x8(const KV_PV_ELEM *const *k, int32_t j, int64_t d0, float *kt, int64_t ld) {
    __m256 r[8], t[8], u[8];
    for (int i = 0; i < 8; i++) r[i] = KV_PV_WIDEN8(k[j + i] + d0);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    float *o = kt + d0 * ld + j;
    for (int i = 0; i < 4; i++) {
        _mm256_storeu_ps(o + i * ld, _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
        _mm256_storeu_ps(o + (i + 4) * ld, _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
    }
}

/* Positions [j, j + len) lie consecutively in one K plane (k[j + i] ==
 * k[j] + i): per dim, one contiguous widening copy. */
AVX2_INLINE void plane_run(const KV_PV_ELEM *k0, int32_t len, int64_t hd, int64_t dstride, float *kt,
                           int64_t ld) {
    for (int64_t d = 0; d < hd; d++) {
        const KV_PV_ELEM *src = k0 + d * dstride;
        float *dst = kt + d * ld;
        int32_t i = 0;
        for (; i + 8 <= len; i += 8) _mm256_storeu_ps(dst + i, KV_PV_WIDEN8(src + i));
        for (; i < len; i++) dst[i] = KV_PV_SCALAR(src[i]);
    }
}

static AVX2 void avx2_transpose(const KV_PV_ELEM *const *k, int32_t n, int64_t hd, int64_t dstride,
                                float *kt, int64_t ld) {
    if (dstride != 1) {
        for (int32_t j = 0; j < n;) {
            int32_t len = 1;
            while (j + len < n && k[j + len] == k[j] + len) len++;
            plane_run(k[j], len, hd, dstride, kt + j, ld);
            j += len;
        }
        return;
    }
    const int64_t hd8 = hd & ~(int64_t)7;
    int32_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int64_t d = 0; d < hd8; d += 8) tr8x8(k, j, d, kt, ld);
    if (j < n) KV_TRANSPOSE_PORTABLE(k + j, n - j, hd, 1, kt + j, ld);
    for (int32_t jj = 0; jj < j && hd8 < hd; jj++)   /* the last hd % 8 columns */
        for (int64_t d = hd8; d < hd; d++) kt[d * ld + jj] = KV_PV_SCALAR(k[jj][d]);
}
