/*
 * q4i_avxvnni_evex.c - cpu/q4i_ymm.h with AVX512_VNNI's EVEX encodings of
 * vpdpwssd and vpdpbusd on ymm (AVX512VL): the arithmetic of
 * q4i_avxvnni.c's AVX-VNNI instance on CPUs with AVX-512, for the tests
 * and qw-qbench only (see q4i_avxvnni.c). No kernel table takes it.
 */
#include <string.h>

#include "cpu/gemv_prefetch.h"
#include "cpu/kernels.h"
#include "cpu/q4i.h"
#include "cpu/qpanel.h"
#include "cpu/tile_out.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define A2_TARGET_ATTR __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni")))
#define A2_ENTRY qwi_avxvnni_evex_matmul_q4i
#define A2_VNNI 1
#define A2_DPWSSD(acc, a, b) _mm256_dpwssd_epi32((acc), (a), (b))
#define A2_DPBUSD(acc, u, s) _mm256_dpbusd_epi32((acc), (u), (s))
#include "cpu/q4i_ymm.h"

#endif
