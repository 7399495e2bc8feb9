/*
 * kv_fp8_tile.c - one context tile of the fp8 cache widened to bf16, for
 * attention on bf16 dot products (kv_fp8.h has the contract).
 *
 * Why: fast numerics over the bf16 cache runs q.K and P.V on vdpbf16ps
 * (cpu/kv_bf16dot.h), two products an instruction where the fp8 kernels'
 * f32 FMAs make one, and a prefill chunk's attention is bound by those
 * products. Every e4m3 value is a bf16 value, so widening a tile once to
 * bf16 and running the bf16 cache's dot kernels on it is the bf16 cache's
 * arithmetic on the same numbers: no new rounding, and one set of dot
 * kernels for both caches. The tile is widened once per (run of rows, kv
 * head, tile) and read from L1/L2 by every q head of the run.
 *
 * The layout the dot kernels want: K as planes of 16 positions (dims 16
 * apart, so rows d and d+1 of 16 positions are one 64-byte load), V as
 * rows. The cache's default block size (16) already has exactly those
 * planes, so each is one contiguous widen; other block sizes take a
 * widen per (16 positions, dim) or, where 16 positions straddle cache
 * blocks, per element.
 */
#include <string.h>

#include "cpu/kv_fp8.h"
#include "fp8.h"

/* Whether positions j0 .. j0+m-1 are consecutive in one K plane. */
static bool one_plane_run(const uint8_t *const *k8, int32_t j0, int32_t m) {
    for (int32_t i = 1; i < m; i++)
        if (k8[j0 + i] != k8[j0] + i) return false;
    return true;
}

void qwi_cpu_kv_fp8_tile_bf16(const qwi_cpu_kv_fp8_kernels *kf, const uint8_t *const *k8,
                              const uint8_t *const *v8, int32_t n, int64_t hd, int64_t dstride,
                              uint16_t *kbuf, uint16_t *vbuf, const uint16_t **k, const uint16_t **v) {
    for (int32_t j0 = 0; j0 < n; j0 += 16) {
        const int32_t m = QWI_MIN(16, n - j0);
        uint16_t *plane = kbuf + (int64_t)j0 * hd;   /* (j0 / 16) planes of 16 x hd before it */
        if (m == 16 && dstride == 16 && one_plane_run(k8, j0, 16)) {
            kf->to_bf16(k8[j0], plane, 16 * hd);   /* the cache's own plane */
        } else if (one_plane_run(k8, j0, m)) {
            for (int64_t d = 0; d < hd; d++) kf->to_bf16(k8[j0] + d * dstride, plane + d * 16, m);
        } else {
            for (int32_t i = 0; i < m; i++)   /* 16 positions across cache blocks */
                for (int64_t d = 0; d < hd; d++)
                    qwi_cpu_kv_fp8_to_bf16(k8[j0 + i] + d * dstride, plane + d * 16 + i, 1);
        }
        if (m < 16)
            for (int64_t d = 0; d < hd; d++)
                memset(plane + d * 16 + m, 0, sizeof(uint16_t) * (size_t)(16 - m));
        for (int32_t i = 0; i < m; i++) k[j0 + i] = plane + i;
    }
    /* V rows: one widen per run of rows that lie back to back (a cache
     * block's rows of one kv head) */
    for (int32_t j0 = 0; j0 < n;) {
        int32_t e = j0 + 1;
        while (e < n && v8[e] == v8[e - 1] + hd) e++;
        kf->to_bf16(v8[j0], vbuf + (int64_t)j0 * hd, (int64_t)(e - j0) * hd);
        for (int32_t j = j0; j < e; j++) v[j] = vbuf + (int64_t)j * hd;
        j0 = e;
    }
}
