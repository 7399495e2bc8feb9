/*
 * q4i_x86.c - the x86 matmul_q4i kernels (cpu/q4i.h), for U4 and U8
 * codes: AVX2 (vpmaddwd on ymm; vpmaddubsw for U4 with int8 activations;
 * cpu/q4i_ymm.h, whose AVX-VNNI instances are in q4i_avxvnni.c), AVX-512
 * with AVX512BW (vpmaddwd on zmm) and with AVX512_VNNI (vpdpwssd).
 * All give the portable kernel's bits (q4i.c): the dots are exact int32
 * sums, and the per-group float epilogue is the contract's
 * (tests/test_quant_kernels.c).
 */
#include <string.h>

#include "cpu/gemv_prefetch.h"
#include "cpu/kernels.h"
#include "cpu/q4i.h"
#include "cpu/qpanel.h"
#include "cpu/tile_out.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define Q4I_KP 64    /* pairs per decoded chunk (M > 2)                              */
#define Q4I_MB 48    /* rows per row block (M > 2)                                   */
#define Q4I_PF 256   /* prefetch distance of the M <= 2 paths on Zen 4 (gemv_prefetch.h) */

/* ---- AVX-512 ------------------------------------------------------------- */

#define Q4I_TARGET "avx512f,avx512bw,avx2,fma"
#define Q4I_FN(name) q4i_bw_##name
#define Q4I_DOT(acc, c, x) _mm512_add_epi32((acc), _mm512_madd_epi16((c), (x)))
#define Q4I_DOTB(acc, c, x)                                                                     \
    _mm512_add_epi32((acc), _mm512_madd_epi16(_mm512_maddubs_epi16((c), (x)), _mm512_set1_epi16(1)))
#include "cpu/q4i_zmm.h"
#undef Q4I_TARGET
#undef Q4I_FN
#undef Q4I_DOT
#undef Q4I_DOTB

#define Q4I_TARGET "avx512f,avx512bw,avx512vnni,avx2,fma"
#define Q4I_FN(name) q4i_vnni_##name
#define Q4I_DOT(acc, c, x) _mm512_dpwssd_epi32((acc), (c), (x))
#define Q4I_DOTB(acc, c, x) _mm512_dpbusd_epi32((acc), (c), (x))
#include "cpu/q4i_zmm.h"
#undef Q4I_TARGET
#undef Q4I_FN
#undef Q4I_DOT
#undef Q4I_DOTB

void qwi_avx512_matmul_q4i(const qwi_q4act *x, int64_t M, const qwi_qpanel *w, int64_t n0,
                           int64_t N, const float *bias, float *out, int64_t ldo, int accumulate) {
    q4i_bw_matmul(x, M, w, n0, N, bias, out, ldo, accumulate);
}

void qwi_avx512vnni_matmul_q4i(const qwi_q4act *x, int64_t M, const qwi_qpanel *w, int64_t n0,
                               int64_t N, const float *bias, float *out, int64_t ldo,
                               int accumulate) {
    q4i_vnni_matmul(x, M, w, n0, N, bias, out, ldo, accumulate);
}

/* ---- AVX2 ------------------------------------------------------------------ */

/* f16c: f16 scales (every AVX2 CPU has it) */
#define A2_TARGET_ATTR __attribute__((target("avx2,fma,f16c")))
#define A2_ENTRY qwi_avx2_matmul_q4i
#define A2_VNNI 0
#include "cpu/q4i_ymm.h"

#endif
