/*
 * pair_amx.c - the "amx" kernel table's matmul_pair: cpu/pair_tiles.h over
 * the AMX-TILE and AMX-BF16 instructions (Intel Xeons from Sapphire Rapids
 * on), and the check that this CPU and this process may run them.
 *
 * The instructions are written as inline assembly, not through the
 * compilers' intrinsics: GCC 12's tileloadd and ldtilecfg intrinsics tell
 * the compiler they read no memory (ldtilecfg: its first 8 bytes), so
 * stores to a staged operand or to the configuration could be moved past
 * them or dropped. Each asm here that touches memory says so ("memory").
 * Both assembler dialects are given, as the intrinsics do.
 *
 * Linux enables AMX's 8 KiB of tile data per process on request
 * (arch_prctl ARCH_REQ_XCOMP_PERM, Linux 5.16 on), so that processes that
 * never use it keep the smaller signal frames: qwi_pair_amx_usable() asks
 * once, the first time the "amx" table is looked up, and the table exists
 * only when the request succeeded.
 */
#include "cpu/kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && defined(__linux__)
#include <cpuid.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PT_ENTRY qwi_pair_amx_matmul
#define PT_ATTR
#define PT_CONFIG(cfg) __asm__ volatile("ldtilecfg %0" ::"m"(*(const pt_config *)(cfg)) : "memory")
#define PT_ZERO(t) __asm__ volatile("tilezero %%tmm" #t ::)
#define PT_LOAD(t, p, s)                                                                   \
    __asm__ volatile("{tileloadd\t(%0,%1,1), %%tmm" #t "|tileloadd\ttmm" #t ", [%0+%1*1]}" \
                     ::"r"((const void *)(p)), "r"((long)(s)) : "memory")
#define PT_DP(c, a, b)                                                                     \
    __asm__ volatile("{tdpbf16ps\t%%tmm" #b ", %%tmm" #a ", %%tmm" #c                   \
                     "|tdpbf16ps\ttmm" #c ", tmm" #a ", tmm" #b "}" ::)
#define PT_STORE(t, p, s)                                                                    \
    __asm__ volatile("{tilestored\t%%tmm" #t ", (%0,%1,1)|tilestored\t[%0+%1*1], tmm" #t "}" \
                     ::"r"((void *)(p)), "r"((long)(s)) : "memory")
#define PT_RELEASE() __asm__ volatile("tilerelease" ::)
#include "cpu/pair_tiles.h"

/* iters x 4 tdpbf16ps on full 16 x 16 x 32 tiles held in the registers
 * (four independent accumulators, as the kernel's 2 x 2 block has): the
 * tile units' peak, 16 * 16 * 32 * 2 = 16384 FLOP an op. Returns a value
 * of the result, so that the work is not optimised away. */
float qwi_pair_amx_peak_loop(long iters) {
    pt_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) { cfg.rows[t] = 16; cfg.colsb[t] = 64; }
    PT_CONFIG(&cfg);
    _Alignas(64) uint32_t pairs[16][16];
    _Alignas(64) float c[16][16];
    for (int r = 0; r < 16; r++)
        for (int i = 0; i < 16; i++) pairs[r][i] = 0x3c003c00u;   /* (2^-7, 2^-7) */
    PT_LOAD(4, pairs, 64);
    PT_LOAD(5, pairs, 64);
    PT_LOAD(6, pairs, 64);
    PT_LOAD(7, pairs, 64);
    PT_ZERO(0);
    PT_ZERO(1);
    PT_ZERO(2);
    PT_ZERO(3);
    for (long n = 0; n < iters; n++) {
        PT_DP(0, 4, 6);
        PT_DP(1, 4, 7);
        PT_DP(2, 5, 6);
        PT_DP(3, 5, 7);
    }
    PT_STORE(3, c, 64);
    PT_RELEASE();
    return c[15][15];
}

#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILECFG 17
#define XFEATURE_XTILEDATA 18

static bool usable;
static pthread_once_t usable_once = PTHREAD_ONCE_INIT;

static void check_usable(void) {
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7) return;
    __cpuid_count(7, 0, a, b, c, d);
    const bool amx_bf16 = (d >> 22) & 1, amx_tile = (d >> 24) & 1;
    if (!amx_bf16 || !amx_tile) return;
    /* the operating system must have enabled both tile state components
     * in XCR0 (read with xgetbv, which needs OSXSAVE) */
    __cpuid(1, a, b, c, d);
    if (!((c >> 27) & 1)) return;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    const unsigned tiles = (1u << XFEATURE_XTILECFG) | (1u << XFEATURE_XTILEDATA);
    if ((lo & tiles) != tiles) return;
    /* and let this process use them: refused (EBUSY) where a thread's
     * sigaltstack is too small for the larger signal frame */
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) return;
    unsigned long perm = 0;
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &perm) != 0) return;
    usable = (perm >> XFEATURE_XTILEDATA) & 1;
}

bool qwi_pair_amx_usable(void) {
    pthread_once(&usable_once, check_usable);
    return usable;
}

#else

void qwi_pair_amx_matmul(const uint32_t *x, int64_t M, int64_t KP, const uint32_t *w, int64_t N,
                         const float *bias, float *out, int64_t ldo, int accumulate) {
    /* never called: qwi_pair_amx_usable() is false here */
    (void)x, (void)M, (void)KP, (void)w, (void)N, (void)bias, (void)out, (void)ldo,
        (void)accumulate;
}

bool qwi_pair_amx_usable(void) { return false; }

float qwi_pair_amx_peak_loop(long iters) {
    (void)iters;   /* never called: qwi_pair_amx_usable() is false here */
    return 0;
}

#endif
