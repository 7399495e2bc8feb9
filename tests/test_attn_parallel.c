/*
 * test_attn_parallel.c - how the CPU attention splits its work (issue 11
 * item 5): a decode step of many short sequences is one task per
 * (sequence, kv head) pair, prefill rows go in runs of one sequence, every
 * row is covered exactly once, and the result does not depend on the split
 * or the thread count, bit for bit.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/attention.h"
#include "cpu/threadpool.h"

enum { NKV = 8, NH = 16, HD = 32, BS = 16 };

/* Count the runs of a and check they cover rows [0, num_tokens) once,
 * never mix sequences and hold at most run_rows rows. */
static int count_runs(const qwi_cpu_attn *a, int32_t run_rows, int32_t *longest) {
    int runs = 0;
    int32_t covered = 0;
    *longest = 0;
    for (int32_t r = 0; r < a->num_tokens; r++) {
        int32_t e = qwi_cpu_attn_run_end(a, run_rows, r);
        if (e == r) {
            cr_assert_lt(r, covered, "row %d is in no run", r);
            continue;
        }
        cr_assert_eq(r, covered, "run at row %d leaves a gap or overlaps (covered to %d)", r, covered);
        cr_assert_leq(e - r, run_rows, "run [%d, %d) longer than %d rows", r, e, run_rows);
        for (int32_t i = r + 1; i < e; i++)
            cr_assert_eq(a->row_seq[i], a->row_seq[r], "run [%d, %d) mixes sequences", r, e);
        covered = e;
        runs++;
        if (e - r > *longest) *longest = e - r;
    }
    cr_assert_eq(covered, a->num_tokens);
    return runs;
}

Test(attn_parallel, decode_of_32_sequences_is_one_task_per_sequence_and_head) {
    int32_t pos[32], seq[32];
    for (int i = 0; i < 32; i++) {
        seq[i] = i;
        pos[i] = 200 + 7 * i;   /* a few hundred tokens each */
    }
    qwi_cpu_attn a = { .positions = pos, .row_seq = seq, .num_tokens = 32, .num_heads = NH,
                       .num_kv_heads = NKV, .head_dim = HD };
    for (int threads = 1; threads <= 64; threads *= 2) {
        int32_t rr = qwi_cpu_attn_run_rows(&a, threads), longest;
        int runs = count_runs(&a, rr, &longest);
        /* 32 x 8 = 256 equal-sized tasks: 2 threads get 128 each however
         * they are handed out (the old split made 64 tasks of 4 sequences) */
        cr_assert_eq(runs, 32, "%d threads: %d runs, expected one per sequence", threads, runs);
        cr_assert_eq(longest, 1);
    }
}

Test(attn_parallel, prefill_runs_stay_in_one_sequence) {
    /* a 100-row chunk of seq 0 from position 5, 3 decode rows, 40 rows of seq 4 */
    int32_t pos[143], seq[143], n = 0;
    for (int i = 0; i < 100; i++, n++) { seq[n] = 0; pos[n] = 5 + i; }
    for (int s = 1; s <= 3; s++, n++) { seq[n] = s; pos[n] = 50 * s; }
    for (int i = 0; i < 40; i++, n++) { seq[n] = 4; pos[n] = i; }
    qwi_cpu_attn a = { .positions = pos, .row_seq = seq, .num_tokens = n, .num_heads = NH,
                       .num_kv_heads = NKV, .head_dim = HD };
    const int32_t rrs[] = { 1, 3, 16 };
    for (size_t i = 0; i < 3; i++) {
        int32_t longest;
        int runs = count_runs(&a, rrs[i], &longest);
        cr_assert_geq(runs, QWI_DIV_UP(100, rrs[i]) + 3 + QWI_DIV_UP(40, rrs[i]));
        cr_assert_eq(longest, rrs[i]);
    }
    cr_assert_eq(qwi_cpu_attn_run_rows(&a, 1), 16, "one thread: full runs for K/V reuse");
    cr_assert_eq(qwi_cpu_attn_run_rows(&a, 16), 2, "16 threads: shorter runs, enough tasks");
}

/* The attention output of a mixed decode + prefill batch is the same bits
 * for 1..4 threads and row by row. */
Test(attn_parallel, result_independent_of_split) {
    enum { S = 24, MAXB = 24 };
    int32_t ctx[S], nr[S], T = 0;
    for (int s = 0; s < S; s++) {
        ctx[s] = 20 + 13 * s;
        nr[s] = s % 6 == 0 ? 19 : 1;
        T += nr[s];
    }
    int32_t bt[S][MAXB], nb = 0;
    for (int s = 0; s < S; s++)
        for (int b = 0; b < MAXB; b++) bt[s][b] = b < QWI_DIV_UP(ctx[s], BS) ? nb++ : 0;
    const int64_t kvd = NKV * HD, qd = NH * HD;
    float *kc = malloc(sizeof(float) * (size_t)nb * BS * kvd), *vc = malloc(sizeof(float) * (size_t)nb * BS * kvd);
    for (int64_t i = 0; i < (int64_t)nb * BS * kvd; i++) {
        kc[i] = (float)sin(0.37 * (double)i);
        vc[i] = (float)cos(0.11 * (double)i);
    }
    float *q = malloc(sizeof(float) * (size_t)T * qd);
    for (int64_t i = 0; i < (int64_t)T * qd; i++) q[i] = (float)sin(1.3 * (double)i);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)T), *rs = malloc(sizeof(int32_t) * (size_t)T);
    for (int s = 0, r = 0; s < S; s++)
        for (int i = 0; i < nr[s]; i++, r++) {
            pos[r] = ctx[s] - nr[s] + i;
            rs[r] = s;
        }
    float *ref = malloc(sizeof(float) * (size_t)T * qd), *got = malloc(sizeof(float) * (size_t)T * qd);
    qwi_cpu_attn a = { .q = q, .k_cache = kc, .v_cache = vc, .out = ref, .positions = pos,
                       .row_seq = rs, .block_tables = &bt[0][0], .max_blocks_per_seq = MAXB,
                       .block_size = BS, .num_tokens = T, .num_heads = NH, .num_kv_heads = NKV,
                       .head_dim = HD, .scale = 0.17f };
    const qwi_cpu_kernels *kt = qwi_cpu_kernels_select();
    float *scr[4];
    for (int t = 0; t < 4; t++) scr[t] = malloc(qwi_cpu_attn_scratch_floats(NH, NKV, HD) * 4);
    for (int r = 0; r < T; r++)
        for (int g = 0; g < NKV; g++) qwr_attention_row(&a, kt, r, g, scr[0]);
    a.out = got;
    for (int threads = 1; threads <= 4; threads++) {
        qwi_cpu_pool *pool;
        cr_assert_eq(qwi_cpu_pool_create(threads, &pool), QW_OK);
        memset(got, 0, sizeof(float) * (size_t)T * qd);
        qwi_cpu_attention(pool, kt, scr, &a);
        cr_assert(memcmp(ref, got, sizeof(float) * (size_t)T * qd) == 0,
                  "%d threads: output differs from rows alone", threads);
        qwi_cpu_pool_destroy(pool);
    }
    for (int t = 0; t < 4; t++) free(scr[t]);
    free(kc); free(vc); free(q); free(pos); free(rs); free(ref); free(got);
}
