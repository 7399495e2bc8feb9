/*
 * test_cuda_host.c - the CUDA backend's host side, on machines without a
 * GPU: asking for cuda:0 gives QW_ERR_NO_DEVICE with a message and leaks
 * nothing (checked under ASan by the CUDA=0 sanitizer build, and here by
 * repeating it), and the pure host arithmetic of cuda/cuda_host.c (graph
 * buckets, KV pool sizing, decode splits, plan packing layout).
 *
 * The pure-function tests exist only in builds with the CUDA backend
 * (QW_HAVE_CUDA): cuda/cuda_host.c is linked only then.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "qwinfer.h"
#include "util/testutil.h"

static int has_device(void) {
    /* A lent GPU runs tests/gpu/run.sh; on one, cuda:0 may succeed. */
    const char *v = getenv("QW_TEST_HAVE_GPU");
    return v && v[0] == '1';
}

Test(cuda_host, no_device_gives_status_and_message) {
    if (has_device()) cr_skip_test("QW_TEST_HAVE_GPU=1");
    char *dir = qwt_model("cuda-host-tiny", "--shape tiny --dtype bf16 --seed 5");
    cr_assert_not_null(dir);
    for (int round = 0; round < 3; round++) {
        qw_engine_options *o;
        cr_assert_eq(qw_engine_options_create(&o), QW_OK);
        cr_assert_eq(qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, dir), QW_OK);
        cr_assert_eq(qw_engine_options_set_string(o, QW_OPT_DEVICE, "cuda:0"), QW_OK);
        qw_engine *e = (qw_engine *)0x1;
        qw_status st = qw_engine_create(o, &e);
        qw_engine_options_destroy(o);
        cr_assert_eq(st, QW_ERR_NO_DEVICE, "got %s (%s)", qw_status_string(st), qw_last_error());
        cr_assert_null(e);
        cr_assert(strstr(qw_last_error(), "cuda:0") != NULL, "message \"%s\"", qw_last_error());
    }
    free(dir);
}

#ifdef QW_HAVE_CUDA
#include "../cuda/cuda_host.h"
#include "../cuda/decode_splits.h"

qw_status qwi_cuda_backend_create(const qwi_model *model, const qwi_backend_config *bc, qwi_backend **out);

Test(cuda_host, backend_create_without_device) {
    if (has_device()) cr_skip_test("QW_TEST_HAVE_GPU=1");
    qwi_model m;
    memset(&m, 0, sizeof m);
    qwi_backend_config bc = {.device_index = 0, .block_size = 16, .max_num_batched_tokens = 64, .max_num_seqs = 4};
    qwi_backend *b = (qwi_backend *)0x1;
    cr_assert_eq(qwi_cuda_backend_create(&m, &bc, &b), QW_ERR_NO_DEVICE, "%s", qw_last_error());
    cr_assert_null(b);
    cr_assert(strstr(qw_last_error(), "cuda:0") != NULL, "message \"%s\"", qw_last_error());
}

Test(cuda_host, buckets) {
    int32_t b[QWI_CUDA_MAX_BUCKETS];
    int n = qwi_cuda_buckets(256, b);
    cr_assert_eq(n, 9);
    for (int i = 0; i < 9; i++) cr_assert_eq(b[i], 1 << i);
    n = qwi_cuda_buckets(100, b);
    cr_assert_eq(n, 8);
    cr_assert_eq(b[6], 64);
    cr_assert_eq(b[7], 100);
    cr_assert_eq(qwi_cuda_bucket_for(b, n, 1), 1);
    cr_assert_eq(qwi_cuda_bucket_for(b, n, 3), 4);
    cr_assert_eq(qwi_cuda_bucket_for(b, n, 64), 64);
    cr_assert_eq(qwi_cuda_bucket_for(b, n, 65), 100);
    cr_assert_eq(qwi_cuda_bucket_for(b, n, 100), 100);
    cr_assert_eq(qwi_cuda_bucket_for(b, n, 101), -1);
    cr_assert_eq(qwi_cuda_bucket_for(b, n, 0), -1);
    cr_assert_eq(qwi_cuda_buckets(1, b), 1);
    cr_assert_eq(b[0], 1);
    cr_assert_eq(qwi_cuda_buckets(0, b), 0);
}

Test(cuda_host, kv_sizing) {
    qwi_config c;
    memset(&c, 0, sizeof c);
    c.num_layers = 28;
    c.num_kv_heads = 8;
    c.head_dim = 128;
    size_t pb = qwi_cuda_kv_bytes_per_block(&c, 16);
    cr_assert_eq(pb, (size_t)2 * 2 * 28 * 16 * 8 * 128);   /* 1.75 MiB */
    const uint64_t GiB = 1ull << 30;
    qwi_cuda_mem m = {.total = 140 * GiB, .free_now = 130 * GiB, .reserve = GiB / 4, .per_block = pb,
                      .max_useful_blocks = 0};
    int32_t n;
    /* fraction: 0.9 * 140 GiB - 10 GiB in use = 116 GiB */
    cr_assert_eq(qwi_cuda_kv_blocks(&m, 0, 0, 0.9, &n), QW_OK);
    cr_assert_eq(n, (int32_t)((0.9 * 140.0 * (double)GiB - 10.0 * (double)GiB) / (double)pb));
    /* the cap of max_num_seqs full-length sequences */
    m.max_useful_blocks = 1000;
    cr_assert_eq(qwi_cuda_kv_blocks(&m, 0, 0, 0.9, &n), QW_OK);
    cr_assert_eq(n, 1000);
    /* explicit bytes, explicit count */
    cr_assert_eq(qwi_cuda_kv_blocks(&m, 0, (int64_t)pb * 10 + 5, 0.9, &n), QW_OK);
    cr_assert_eq(n, 10);
    cr_assert_eq(qwi_cuda_kv_blocks(&m, 77, 0, 0.9, &n), QW_OK);
    cr_assert_eq(n, 77);
    /* too much for free memory, or nothing left */
    cr_assert_eq(qwi_cuda_kv_blocks(&m, 200000, 0, 0.9, &n), QW_ERR_KV_CAPACITY);
    cr_assert(strstr(qw_last_error(), "does not fit") != NULL);
    m.free_now = 10 * GiB;   /* 130 GiB in use: 0.5 * 140 - 130 < 0 */
    cr_assert_eq(qwi_cuda_kv_blocks(&m, 0, 0, 0.5, &n), QW_ERR_KV_CAPACITY);
    cr_assert_eq(n, 0);
    cr_assert_eq(qwi_cuda_kv_blocks(&m, 0, 0, 1.5, &n), QW_ERR_INVALID_ARGUMENT);
}

Test(cuda_host, decode_splits) {
    cr_assert_eq(qwi_cuda_decode_splits(0), 1);
    cr_assert_eq(qwi_cuda_decode_splits(1), 1);
    cr_assert_eq(qwi_cuda_decode_splits(256), 1);
    cr_assert_eq(qwi_cuda_decode_splits(257), 2);
    cr_assert_eq(qwi_cuda_decode_split_len(257), 144);   /* 129 -> a multiple of 16 */
    cr_assert_eq(qwi_cuda_decode_splits(2048), 8);
    cr_assert_eq(qwi_cuda_decode_split_len(2048), 256);
    cr_assert_eq(qwi_cuda_decode_splits(4097), 16);
    cr_assert_eq(qwi_cuda_decode_split_len(4097), 272);
    cr_assert_eq(qwi_cuda_decode_splits(1 << 20), QWI_CUDA_DECODE_MAX_SPLITS);
    /* every context: the splits cover it, none is empty, none is shorter
     * than 16 positions' worth of rounding below the minimum */
    for (int32_t ctx = 1; ctx <= 200000; ctx++) {
        int32_t n = qwi_cuda_decode_splits(ctx), len = qwi_cuda_decode_split_len(ctx);
        cr_assert(n >= 1 && n <= QWI_CUDA_DECODE_MAX_SPLITS, "ctx %d: %d splits", ctx, n);
        cr_assert_eq(len % 16, 0, "ctx %d", ctx);
        cr_assert((int64_t)n * len >= ctx, "ctx %d: %d x %d does not cover it", ctx, n, len);
        cr_assert((int64_t)(n - 1) * len < ctx, "ctx %d: split %d of %d x %d is empty", ctx, n - 1, n, len);
        cr_assert(n == 1 || len >= QWI_CUDA_DECODE_SPLIT_MIN / 2, "ctx %d: splits of %d", ctx, len);
    }
}

Test(cuda_host, plan_pack_layout) {
    /* seq 0: prefill chunk of 70 rows at positions 10..79 (ctx 80, 5 blocks);
     * seq 1: one decode row at position 3 (ctx 4); seq 2: 2 rows, no sample. */
    enum { T = 73, S = 3, MB = 8 };
    int32_t tok[T], pos[T], slot[T];
    for (int r = 0; r < 70; r++) { tok[r] = r; pos[r] = 10 + r; slot[r] = 1000 + r; }
    tok[70] = 5; pos[70] = 3; slot[70] = 2003;
    tok[71] = 6; pos[71] = 0; slot[71] = 3000;
    tok[72] = 7; pos[72] = 1; slot[72] = 3001;
    int32_t qs[S + 1] = {0, 70, 71, 73}, ctx[S] = {80, 4, 2};
    int32_t bt[S * MB];
    for (int i = 0; i < S * MB; i++) bt[i] = 100 + i;
    uint8_t ds[S] = {1, 1, 0}, wl[S] = {0, 0, 1};
    int32_t banned1[2] = {9, 11};
    qwi_sampling sp[S];
    memset(sp, 0, sizeof sp);
    sp[0].temperature = 0.7f; sp[0].top_k = 40; sp[0].top_p = 0.9f; sp[0].seed = 0x123456789ull;
    sp[1].temperature = 0.0f; sp[1].top_p = 1.0f; sp[1].banned = banned1; sp[1].num_banned = 2;
    int32_t sampled[S];
    float logits[1];
    qwi_plan p = {.num_tokens = T, .token_ids = tok, .positions = pos, .slot_mapping = slot,
                  .num_seqs = S, .query_start = qs, .context_lens = ctx, .block_tables = bt,
                  .max_blocks_per_seq = MB, .do_sample = ds, .sampling = sp, .want_logits = wl,
                  .logits_out = logits, .sampled = sampled};
    qwi_cuda_plan_counts c;
    qwi_cuda_plan_count(&p, 16, &c);
    cr_assert_eq(c.bt_stride, 5);
    cr_assert_eq(c.num_logit_rows, 3);
    cr_assert_eq(c.num_banned, 2);
    cr_assert_eq(c.num_tiles, 2 + 1);   /* seq 1's one row goes to the decode kernel */
    cr_assert_eq(c.num_decode_rows, 1);
    cr_assert_eq(c.max_query_len, 70);
    cr_assert(!c.decode_only);

    qwi_cuda_plan_layout L;
    qwi_cuda_plan_layout_make(&L, 80, 4, 4, c.bt_stride, c.num_banned, c.num_tiles);
    size_t offs[] = {L.hdr, L.token_ids, L.positions, L.slot_mapping, L.row_seq, L.query_start,
                     L.context_lens, L.logit_rows, L.logit_seq, L.temperature, L.top_p, L.min_p,
                     L.top_k, L.do_sample, L.sample_pos, L.seed, L.banned_start, L.tiles, L.banned,
                     L.block_tables, L.total};
    for (size_t i = 0; i + 1 < sizeof offs / sizeof offs[0]; i++) {
        cr_assert_eq(offs[i] % 16, 0, "offset %zu", i);
        cr_assert(offs[i + 1] > offs[i], "sections in order (%zu)", i);
    }
    cr_assert_eq(L.token_ids - L.hdr, 32);
    cr_assert_eq(L.total - L.block_tables, 4 * 4 * 5);
    /* every offset before block_tables is independent of the stride */
    qwi_cuda_plan_layout L2;
    qwi_cuda_plan_layout_make(&L2, 80, 4, 4, 999, c.num_banned, c.num_tiles);
    cr_assert_eq(L2.block_tables, L.block_tables);
    cr_assert_eq(L2.banned, L.banned);

    unsigned char *buf = malloc(L.total);
    cr_assert_not_null(buf);
    qwi_cuda_plan_pack(&p, &c, &L, buf);
    const qwi_cuda_step_hdr *h = (const qwi_cuda_step_hdr *)(buf + L.hdr);
    cr_assert_eq(h->num_tokens, T);
    cr_assert_eq(h->num_seqs, S);
    cr_assert_eq(h->bt_stride, 5);
    cr_assert_eq(h->num_logit_rows, 3);
    const int32_t *i32;
    i32 = (const int32_t *)(buf + L.slot_mapping);
    cr_assert_eq(i32[0], 1000);
    cr_assert_eq(i32[72], 3001);
    for (int r = T; r < 80; r++) cr_assert_eq(i32[r], -1, "padded slot %d", r);
    i32 = (const int32_t *)(buf + L.row_seq);
    cr_assert_eq(i32[69], 0);
    cr_assert_eq(i32[70], 1);
    cr_assert_eq(i32[72], 2);
    cr_assert_eq(i32[75], -1);
    i32 = (const int32_t *)(buf + L.query_start);
    cr_assert_eq(i32[1], 70);
    cr_assert_eq(i32[3], 73);
    cr_assert_eq(i32[4], 73);   /* padded seq: empty */
    i32 = (const int32_t *)(buf + L.block_tables);
    cr_assert_eq(i32[0], 100);
    cr_assert_eq(i32[4], 104);
    cr_assert_eq(i32[5], 108);  /* row 1 starts at stride 5 with bt[1*MB] */
    cr_assert_eq(i32[10], 116);
    i32 = (const int32_t *)(buf + L.tiles);
    cr_assert_eq(i32[0], 0); cr_assert_eq(i32[1], 0);
    cr_assert_eq(i32[2], 0); cr_assert_eq(i32[3], 64);
    cr_assert_eq(i32[4], 2); cr_assert_eq(i32[5], 71);
    cr_assert_eq(h->num_prefill_tiles, 3);
    i32 = (const int32_t *)(buf + L.decode_seq);
    cr_assert_eq(i32[0], 0); cr_assert_eq(i32[1], 1); cr_assert_eq(i32[2], 0);
    cr_assert_eq(i32[3], 0);   /* padded seq */
    const int32_t *lr = (const int32_t *)(buf + L.logit_rows), *ls = (const int32_t *)(buf + L.logit_seq);
    cr_assert_eq(lr[0], 69); cr_assert_eq(ls[0], 0);
    cr_assert_eq(lr[1], 70); cr_assert_eq(ls[1], 1);
    cr_assert_eq(lr[2], 72); cr_assert_eq(ls[2], 2);
    cr_assert_eq(ls[3], -1);
    const int32_t *dsp = (const int32_t *)(buf + L.do_sample), *tk = (const int32_t *)(buf + L.top_k);
    cr_assert_eq(dsp[0], 1); cr_assert_eq(dsp[1], 1); cr_assert_eq(dsp[2], 0); cr_assert_eq(dsp[3], 0);
    cr_assert_eq(tk[0], 40);
    cr_assert_float_eq(((const float *)(buf + L.temperature))[0], 0.7f, 0);
    cr_assert_float_eq(((const float *)(buf + L.top_p))[0], 0.9f, 0);
    cr_assert_eq(((const uint64_t *)(buf + L.seed))[0], 0x123456789ull);
    cr_assert_eq(((const int64_t *)(buf + L.sample_pos))[0], 80);
    cr_assert_eq(((const int64_t *)(buf + L.sample_pos))[1], 4);
    const int32_t *bs = (const int32_t *)(buf + L.banned_start), *bn = (const int32_t *)(buf + L.banned);
    cr_assert_eq(bs[0], 0); cr_assert_eq(bs[1], 0); cr_assert_eq(bs[2], 2); cr_assert_eq(bs[4], 2);
    cr_assert_eq(bn[0], 9); cr_assert_eq(bn[1], 11);
    free(buf);

    /* a decode-only step */
    int32_t qs2[3] = {0, 1, 2}, ctx2[2] = {17, 1};
    uint8_t ds2[2] = {1, 1};
    qwi_plan d = p;
    d.num_tokens = 2; d.num_seqs = 2; d.query_start = qs2; d.context_lens = ctx2; d.do_sample = ds2;
    d.want_logits = NULL;
    qwi_cuda_plan_count(&d, 16, &c);
    cr_assert(c.decode_only);
    cr_assert_eq(c.bt_stride, 2);
    cr_assert_eq(c.num_tiles, 0);
    cr_assert_eq(c.num_decode_rows, 2);

    /* the engine's marks: seq 1's one row a prompt token (a 1-row chunk,
     * e.g. the last of a cached prompt): the prefill kernel's, no graph */
    uint8_t isd[2] = {1, 0};
    d.is_decode = isd;
    qwi_cuda_plan_count(&d, 16, &c);
    cr_assert(!c.decode_only);
    cr_assert_eq(c.num_tiles, 1);
    cr_assert_eq(c.num_decode_rows, 1);
    qwi_cuda_plan_layout_make(&L, 2, 2, 2, c.bt_stride, c.num_banned, c.num_tiles);
    buf = malloc(L.total);
    cr_assert_not_null(buf);
    qwi_cuda_plan_pack(&d, &c, &L, buf);
    i32 = (const int32_t *)(buf + L.decode_seq);
    cr_assert_eq(i32[0], 1); cr_assert_eq(i32[1], 0);
    i32 = (const int32_t *)(buf + L.tiles);
    cr_assert_eq(i32[0], 1); cr_assert_eq(i32[1], 1);   /* (seq 1, row 1) */
    free(buf);
    isd[1] = 1;
    qwi_cuda_plan_count(&d, 16, &c);
    cr_assert(c.decode_only);
}
#endif
