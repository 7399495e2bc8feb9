/*
 * test_cuda_host_policy.c - the CUDA backend's host-side policies that
 * issue 12's review asked to change, tested without a GPU: the memory
 * fraction capped at free - reserve (1.0 used to fail), the cuBLASLt cache
 * key buckets of M, and the graph warm-up / capture / eager-fallback state
 * machine. Only in builds with the CUDA backend (cuda/cuda_host.c is linked
 * only then); elsewhere the binary has no test.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "qwinfer.h"

#ifdef QW_HAVE_CUDA
#include "../cuda/cuda_host.h"

Test(cuda_policy, memory_fraction_near_one_takes_free_minus_reserve) {
    const uint64_t GiB = 1ull << 30, pb = 1ull << 20;
    qwi_cuda_mem m = {.total = 140 * GiB, .free_now = 130 * GiB, .reserve = GiB / 4, .per_block = pb,
                      .max_useful_blocks = 0};
    const int32_t all_free = (int32_t)((130 * GiB - GiB / 4) / pb);
    int32_t n = 0;
    /* 1.0 * 140 - 10 in use = 130 GiB > free - reserve: capped, not refused */
    cr_assert_eq(qwi_cuda_kv_blocks(&m, 0, 0, 1.0, &n), QW_OK, "%s", qw_last_error());
    cr_assert_eq(n, all_free);
    cr_assert_eq(qwi_cuda_kv_blocks(&m, 0, 0, 0.999, &n), QW_OK, "%s", qw_last_error());
    cr_assert_eq(n, all_free);   /* 129.86 GiB > 129.75: still capped */
    /* below the cap the fraction decides */
    cr_assert_eq(qwi_cuda_kv_blocks(&m, 0, 0, 0.5, &n), QW_OK);
    cr_assert_eq(n, (int32_t)((70 * GiB - 10 * GiB) / pb));
    /* an explicit count beyond free - reserve is still an error: it was asked for */
    cr_assert_eq(qwi_cuda_kv_blocks(&m, all_free + 1, 0, 1.0, &n), QW_ERR_KV_CAPACITY);
}

Test(cuda_policy, gemm_bucket_of_m) {
    cr_assert_eq(qwi_cuda_gemm_bucket(0), 0);
    cr_assert_eq(qwi_cuda_gemm_bucket(-3), 0);
    int32_t want[][2] = {{1, 1}, {2, 2}, {3, 4}, {5, 8}, {17, 32}, {129, 256}, {256, 256},
                         {257, 512}, {511, 512}, {513, 768}, {2047, 2048}, {8192, 8192}, {8193, 8448}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert_eq(qwi_cuda_gemm_bucket(want[i][0]), want[i][1], "M %d", want[i][0]);
    /* every M maps to a bucket >= M, and the number of buckets stays small */
    int32_t last = 0, distinct = 0;
    for (int32_t m = 1; m <= 8192; m++) {
        int32_t b = qwi_cuda_gemm_bucket(m);
        cr_assert(b >= m && b < 2 * m + 256, "M %d -> %d", m, b);
        if (b != last) distinct++;
        last = b;
    }
    cr_assert_eq(distinct, 9 + 31);   /* 1..256 in 9 powers, then 512..8192 by 256 */
    cr_assert_eq(qwi_cuda_gemm_bucket(INT32_MAX), INT32_MAX);
}

Test(cuda_policy, graph_warm_up_capture_replay) {
    qwi_cuda_graph_state s = QWI_GRAPH_NEW;
    /* first use: eager warm-up (a failed eager step changes nothing) */
    cr_assert_eq(qwi_cuda_graph_next(s), QWI_GRAPH_RUN_EAGER);
    cr_assert_eq(qwi_cuda_graph_after(s, QWI_GRAPH_RUN_EAGER, false), QWI_GRAPH_NEW);
    s = qwi_cuda_graph_after(s, QWI_GRAPH_RUN_EAGER, true);
    cr_assert_eq(s, QWI_GRAPH_WARM);
    /* second: capture; then replay for good */
    cr_assert_eq(qwi_cuda_graph_next(s), QWI_GRAPH_CAPTURE);
    s = qwi_cuda_graph_after(s, QWI_GRAPH_CAPTURE, true);
    cr_assert_eq(s, QWI_GRAPH_READY);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(qwi_cuda_graph_next(s), QWI_GRAPH_REPLAY);
        s = qwi_cuda_graph_after(s, QWI_GRAPH_REPLAY, true);
    }
    cr_assert_eq(s, QWI_GRAPH_READY);
}

Test(cuda_policy, graph_failure_falls_back_to_eager_for_good) {
    qwi_cuda_graph_state s = qwi_cuda_graph_after(QWI_GRAPH_WARM, QWI_GRAPH_CAPTURE, false);
    cr_assert_eq(s, QWI_GRAPH_EAGER_ONLY);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(qwi_cuda_graph_next(s), QWI_GRAPH_RUN_EAGER);
        s = qwi_cuda_graph_after(s, QWI_GRAPH_RUN_EAGER, true);
        cr_assert_eq(s, QWI_GRAPH_EAGER_ONLY);   /* never captured again */
    }
}
#endif
