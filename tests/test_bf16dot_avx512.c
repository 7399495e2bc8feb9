/*
 * test_bf16dot_avx512.c - the "avx512" kernel table (AVX-512F without
 * AVX512_BF16) runs the zmm emulation of vdpbf16ps, not the AVX2 one, and
 * it equals the AVX2 emulation and the portable kernel bit for bit when
 * called directly (no parallel driver: whole N in one call, so the 8- and
 * 4-panel groups of one and two rows and the 48-row blocks are all hit).
 * test_fast_numerics.c checks the table against the scalar chain model.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kernels.h"
#include "cpu/pairpanel.h"

Test(bf16dot_avx512, table_uses_zmm_kernel) {
    const qwi_cpu_kernels *kt = qwi_cpu_kernels_by_name("avx512");
    if (!kt) cr_skip_test("no AVX-512F on this CPU");
    cr_assert(kt->matmul_pair == qwi_bf16dot_matmul_avx512);
    cr_assert(kt->matmul_pair != qwi_bf16dot_matmul_avx2);
}

static float frnd(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

Test(bf16dot_avx512, equals_avx2_and_portable_direct) {
    if (!qwi_cpu_kernels_by_name("avx512") || !qwi_cpu_kernels_by_name("avx2"))
        cr_skip_test("no AVX-512F on this CPU");
    const int64_t Ms[] = { 1, 2, 3, 5, 50, 97 };
    const int64_t Ns[] = { 1, 16, 100, 200 };
    const int64_t Ks[] = { 3, 258, 300 };
    unsigned seed = 7;
    for (size_t a = 0; a < sizeof Ms / sizeof Ms[0]; a++)
        for (size_t b = 0; b < sizeof Ns / sizeof Ns[0]; b++)
            for (size_t c = 0; c < sizeof Ks / sizeof Ks[0]; c++) {
                const int64_t M = Ms[a], N = Ns[b], K = Ks[c], kp = qwi_pair_kp(K);
                float *x = malloc((size_t)(M * K) * 4), *wf = malloc((size_t)(N * K) * 4);
                float *bias = malloc((size_t)N * 4);
                float *o[3];
                for (int i = 0; i < 3; i++) o[i] = malloc((size_t)(M * N) * 4);
                for (int64_t i = 0; i < M * K; i++) x[i] = frnd(&seed);
                for (int64_t i = 0; i < N * K; i++) wf[i] = frnd(&seed);
                for (int64_t i = 0; i < N; i++) bias[i] = frnd(&seed);
                for (int64_t i = 0; i < M * N; i++) o[0][i] = o[1][i] = o[2][i] = frnd(&seed);
                void *panels = malloc(qwi_pairpanel_bytes(N, K));
                cr_assert(qwi_pairpanel_pack(QWI_DTYPE_F32, wf, N, K, panels));
                uint32_t *xp = malloc((size_t)(M * kp) * 4);
                qwi_pair_round_rows(x, 0, M, K, xp);
                const int acc = (int)((a + b + c) & 1);
                const float *bs = c == 1 ? NULL : bias;
                qwi_bf16dot_matmul_avx512(xp, M, kp, panels, N, bs, o[0], N, acc);
                qwi_bf16dot_matmul_avx2(xp, M, kp, panels, N, bs, o[1], N, acc);
                qwr_matmul_pair(xp, M, kp, panels, N, bs, o[2], N, acc);
                cr_assert(memcmp(o[0], o[1], (size_t)(M * N) * 4) == 0,
                          "avx512 vs avx2 M %lld N %lld K %lld", (long long)M, (long long)N,
                          (long long)K);
                cr_assert(memcmp(o[0], o[2], (size_t)(M * N) * 4) == 0,
                          "avx512 vs portable M %lld N %lld K %lld", (long long)M, (long long)N,
                          (long long)K);
                free(xp);
                free(panels);
                for (int i = 0; i < 3; i++) free(o[i]);
                free(x);
                free(wf);
                free(bias);
            }
}
