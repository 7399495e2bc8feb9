/*
 * q4i_avxvnni.c - the AVX2 matmul_q4i of cpu/q4i_ymm.h with VNNI dot
 * products: vpdpwssd for the int16 pairs and vpdpbusd for bytes, on ymm.
 *
 * Two instances of the one source: AVX-VNNI's VEX encodings, which the
 * avx2 kernel table takes where CPUID reports AVX-VNNI (Intel client cores
 * from Alder Lake on, which have no AVX-512 and so run the avx2 table), and
 * the EVEX encodings of AVX512_VNNI + AVX512VL, the same operations on
 * ymm, which only the tests and qw-qbench call: they run on the AVX-512
 * machines this project is built and tested on, where no AVX-VNNI core is
 * at hand, and check the arithmetic the VEX instance shares with them. The
 * instances differ only in A2_DPWSSD / A2_DPBUSD and the target string;
 * the EVEX one lives in its own translation unit (q4i_avxvnni_evex.c)
 * because cpu/q4i_ymm.h's helpers are static. The VEX instance itself is
 * checked on an emulated Arrow Lake by tests/emulator/run.sh q4i.
 */
#include <string.h>

#include "cpu/gemv_prefetch.h"
#include "cpu/kernels.h"
#include "cpu/q4i.h"
#include "cpu/qpanel.h"
#include "cpu/tile_out.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define A2_TARGET_ATTR __attribute__((target("avx2,fma,f16c,avxvnni")))
#define A2_ENTRY qwi_avxvnni_matmul_q4i
#define A2_VNNI 1
#define A2_DPWSSD(acc, a, b) _mm256_dpwssd_avx_epi32((acc), (a), (b))
#define A2_DPBUSD(acc, u, s) _mm256_dpbusd_avx_epi32((acc), (u), (s))
#include "cpu/q4i_ymm.h"

#endif
