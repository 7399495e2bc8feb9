/*
 * test_cuda_kv_fp8_host.c - the host side of the CUDA backend's fp8 (e4m3)
 * KV cache, on machines without a GPU (the kernels themselves are checked
 * on a lent GPU by tests/gpu/check_kernels.cu, group rope_kv and
 * attention):
 *
 * codec_*: cuda/kv_e4m3.h, the element conversions the kernels run, built
 * here as plain C: the write rounding gives lib/fp8.h's qwi_f32_to_e4m3
 * byte for every f32 tried (a stride over all 2^32 patterns plus every
 * pattern of the exponents around e4m3's subnormal, normal and saturation
 * edges), the read gives qwi_e4m3_to_f32's bits for all 256 codes, and
 * the bf16 widening is its exact top half.
 * kv_sizing_*: one byte an element - a block is half the bf16 one, the
 * same byte budget buys twice the blocks; f32 and unknown dtypes have no
 * element size.
 * accept_* / refuse_*: through qw_engine_create on cuda:0, fp8 gets past
 * the dtype check (QW_ERR_NO_DEVICE here), a bad k_scale tensor fails with
 * QW_ERR_FORMAT naming it before any device is looked for, and f32 stays
 * refused naming the option (also in test_cuda_quant_host.c).
 *
 * Only in builds with the CUDA backend (QW_HAVE_CUDA).
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qwinfer.h"
#include "util/testutil.h"

#ifdef QW_HAVE_CUDA
#include "../cuda/cuda_host.h"
#include "../cuda/kv_e4m3.h"
#include "fp8.h"

static int has_device(void) {
    const char *v = getenv("QW_TEST_HAVE_GPU");
    return v && v[0] == '1';
}

static float f_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Compare one f32 pattern; counts mismatches, logs the first few. */
static int64_t cmp_one(uint32_t u, int64_t bad) {
    const float f = f_of(u);
    const uint8_t got = qwk_f32_to_e4m3(f), want = qwi_f32_to_e4m3(f);
    if (got != want && bad < 4)
        cr_log_error("f32 0x%08x (%g): kv_e4m3.h 0x%02x, lib/fp8.h 0x%02x", u, (double)f, got, want);
    return bad + (got != want);
}

Test(cuda_kv_fp8_host, codec_write_matches_lib_fp8) {
    int64_t bad = 0, n = 0;
    /* every f32 pattern with stride 251 (prime: every low-bit residue) */
    for (uint64_t u = 0; u <= 0xffffffffull; u += 251, n++) bad = cmp_one((uint32_t)u, bad);
    /* exponents 2^-11 .. 2^-5 (flush, subnormal, first normals) and 2^7 ..
     * 2^9 (the top binade, 448, saturation), both signs, every top 11
     * mantissa bits with the low 12 bits 0, 1, 0x7ff, 0x800, 0x801, 0xfff:
     * every tie of both roundings (a tie has >= 19 trailing zero bits) and
     * its neighbours on either side */
    const uint32_t ranges[2][2] = {{127 - 11, 127 - 5}, {127 + 7, 127 + 9}};
    const uint32_t low[6] = {0, 1, 0x7ff, 0x800, 0x801, 0xfff};
    for (int r = 0; r < 2; r++)
        for (uint32_t e = ranges[r][0]; e <= ranges[r][1]; e++)
            for (uint32_t hi = 0; hi < 2048; hi++)
                for (int k = 0; k < 6; k++)
                    for (uint32_t s = 0; s < 2; s++, n++)
                        bad = cmp_one((s << 31) | (e << 23) | (hi << 12) | low[k], bad);
    /* specials */
    const uint32_t sp[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x00000001u,
                           0x80000001u, 0x007fffffu, bits_of(448.f), bits_of(464.f), bits_of(-464.f)};
    for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++, n++) bad = cmp_one(sp[i], bad);
    cr_assert_eq(bad, 0, "%lld of %lld f32 patterns round differently", (long long)bad, (long long)n);
    cr_assert_eq(qwk_f32_to_e4m3(448.f), 0x7e);
    cr_assert_eq(qwk_f32_to_e4m3(-1e30f), 0xfe);
    cr_assert_eq(qwk_f32_to_e4m3(0x1p-10f), 0x00, "half the smallest subnormal ties to even (0)");
    cr_assert_eq(qwk_f32_to_e4m3(3 * 0x1p-10f), 0x02, "1.5 subnormal steps tie to even (2)");
}

Test(cuda_kv_fp8_host, codec_read_exact) {
    for (uint32_t b = 0; b < 256; b++) {
        const float got = qwk_e4m3_to_f32(b), want = qwi_e4m3_to_f32((uint8_t)b);
        cr_assert_eq(bits_of(got), bits_of(want), "code 0x%02x: kv_e4m3.h %a, lib/fp8.h %a", b, (double)got,
                     (double)want);
        const uint16_t h = qwk_e4m3_to_bf16(b);
        cr_assert_eq((uint32_t)h << 16, bits_of(want), "code 0x%02x: bf16 0x%04x is not the exact value", b, h);
        /* round trip of every finite code */
        if (!qwi_e4m3_is_nan((uint8_t)b)) cr_assert_eq(qwk_f32_to_e4m3(got), b, "code 0x%02x", b);
    }
}

static qwi_config cfg_06b(void) {
    qwi_config c;
    memset(&c, 0, sizeof c);
    c.num_layers = 28;
    c.num_kv_heads = 8;
    c.head_dim = 128;
    return c;
}

Test(cuda_kv_fp8_host, kv_sizing_one_byte) {
    cr_assert_eq(qwi_cuda_kv_elem_bytes(QW_KV_CACHE_AUTO), 2);
    cr_assert_eq(qwi_cuda_kv_elem_bytes(QW_KV_CACHE_BF16), 2);
    cr_assert_eq(qwi_cuda_kv_elem_bytes(QW_KV_CACHE_FP8_E4M3), 1);
    cr_assert_eq(qwi_cuda_kv_elem_bytes(QW_KV_CACHE_F32), 0);
    cr_assert_eq(qwi_cuda_kv_elem_bytes(77), 0);
    const qwi_config c = cfg_06b();
    /* 28 layers x K,V x 16 slots x 8 heads x 128: 57,344 bytes a token at fp8 */
    cr_assert_eq(qwi_cuda_kv_block_bytes(&c, 16, 1), (size_t)16 * 57344);
    cr_assert_eq(qwi_cuda_kv_block_bytes(&c, 16, 2), (size_t)16 * 114688);
    cr_assert_eq(qwi_cuda_kv_bytes_per_block(&c, 16), qwi_cuda_kv_block_bytes(&c, 16, 2));
    cr_assert_eq(qwi_cuda_kv_block_bytes(&c, 16, 4), 0, "f32 is not a CUDA element size");
    cr_assert_eq(qwi_cuda_kv_block_bytes(&c, 16, 0), 0);
    cr_assert_eq(qwi_cuda_kv_block_bytes(NULL, 16, 1), 0);
    qwi_config big = c;
    big.num_layers = 1 << 30;
    big.num_kv_heads = 1 << 30;
    cr_assert_eq(qwi_cuda_kv_block_bytes(&big, 1 << 20, 1), 0, "overflow gives 0");
    /* the same byte budget buys twice the blocks */
    for (int by = 0; by < 2; by++) {
        qwi_cuda_mem m = {.total = 80ull << 30, .free_now = 60ull << 30, .reserve = 256ull << 20};
        int32_t nb1 = 0, nb2 = 0;
        m.per_block = qwi_cuda_kv_block_bytes(&c, 16, 1);
        cr_assert_eq(qwi_cuda_kv_blocks(&m, 0, by ? 0 : (int64_t)(3ull << 30), by ? 0.5 : 0, &nb1), QW_OK, "%s",
                     qw_last_error());
        m.per_block = qwi_cuda_kv_block_bytes(&c, 16, 2);
        cr_assert_eq(qwi_cuda_kv_blocks(&m, 0, by ? 0 : (int64_t)(3ull << 30), by ? 0.5 : 0, &nb2), QW_OK, "%s",
                     qw_last_error());
        cr_assert_gt(nb2, 0);
        cr_assert(nb1 == 2 * nb2 || nb1 == 2 * nb2 + 1, "%s: fp8 %d blocks, bf16 %d", by ? "fraction" : "bytes",
                  nb1, nb2);
    }
}

/* qw_engine_create on cuda:0 with KV dtype `dtype`; *e is destroyed. */
static qw_status create_cuda(const char *dir, int32_t dtype) {
    qw_engine_options *o;
    cr_assert_eq(qw_engine_options_create(&o), QW_OK);
    cr_assert_eq(qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, dir), QW_OK);
    cr_assert_eq(qw_engine_options_set_string(o, QW_OPT_DEVICE, "cuda:0"), QW_OK);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_KV_CACHE_DTYPE, dtype), QW_OK);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_MAX_MODEL_LEN, 256), QW_OK);
    qw_engine *e = (qw_engine *)0x1;
    qw_status st = qw_engine_create(o, &e);
    qw_engine_options_destroy(o);
    if (st == QW_OK) qw_engine_destroy(e);
    else cr_assert_null(e);
    return st;
}

Test(cuda_kv_fp8_host, accept_fp8_without_device) {
    if (has_device()) cr_skip_test("QW_TEST_HAVE_GPU=1");
    char *dir = qwt_model("cudakv-scaled", "--shape tiny --dtype bf16 --seed 5 --kv-scale 0.5");
    cr_assert_not_null(dir);
    qw_status st = create_cuda(dir, QW_KV_CACHE_FP8_E4M3);
    cr_assert_eq(st, QW_ERR_NO_DEVICE, "fp8 KV on cuda:0 got %s (%s)", qw_status_string(st), qw_last_error());
    free(dir);
}

Test(cuda_kv_fp8_host, refuse_f32_naming_option) {
    char *dir = qwt_model("cuda-host-tiny", "--shape tiny --dtype bf16 --seed 5");
    cr_assert_not_null(dir);
    qw_status st = create_cuda(dir, QW_KV_CACHE_F32);
    cr_assert_eq(st, QW_ERR_UNSUPPORTED, "got %s (%s)", qw_status_string(st), qw_last_error());
    cr_assert(strstr(qw_last_error(), "QW_OPT_KV_CACHE_DTYPE") && strstr(qw_last_error(), "f32") &&
                  strstr(qw_last_error(), "fp8"),
              "message \"%s\" names the option, the value and what is kept", qw_last_error());
    free(dir);
}

/* Overwrite the 4 data bytes of F32 tensor `name` in dir/model.safetensors. */
static void poke_f32(const char *dir, const char *name, float v) {
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f, "open %s", path);
    uint64_t hlen;
    cr_assert_eq(fread(&hlen, 8, 1, f), 1);
    char *hdr = malloc(hlen);
    cr_assert_not_null(hdr);
    cr_assert_eq(fread(hdr, 1, hlen, f), hlen);
    json_error_t err;
    json_t *h = json_loadb(hdr, hlen, 0, &err);
    cr_assert_not_null(h, "header: %s", err.text);
    json_t *t = json_object_get(h, name);
    cr_assert_not_null(t, "no tensor %s", name);
    cr_assert_str_eq(json_string_value(json_object_get(t, "dtype")), "F32");
    json_int_t off = json_integer_value(json_array_get(json_object_get(t, "data_offsets"), 0));
    cr_assert_eq(fseek(f, (long)(8 + hlen + (uint64_t)off), SEEK_SET), 0);
    cr_assert_eq(fwrite(&v, 4, 1, f), 1);
    cr_assert_eq(fclose(f), 0);
    json_decref(h);
    free(hdr);
}

Test(cuda_kv_fp8_host, refuse_bad_scale_before_device) {
    char *src = qwt_model("cudakv-scaled", "--shape tiny --dtype bf16 --seed 5 --kv-scale 0.5");
    cr_assert_not_null(src);
    char *dir = qwt_tmpdir("cudakv-badscale");
    cr_assert_not_null(dir);
    cr_assert_eq(qwt_system("cp -r '%s'/. '%s'/", src, dir), 0);
    const char *name = "model.layers.1.self_attn.v_scale";
    poke_f32(dir, name, -2.0f);
    qw_status st = create_cuda(dir, QW_KV_CACHE_FP8_E4M3);
    cr_assert_eq(st, QW_ERR_FORMAT, "got %s (%s)", qw_status_string(st), qw_last_error());
    cr_assert(strstr(qw_last_error(), name) && strstr(qw_last_error(), "not a finite number > 0"),
              "message \"%s\"", qw_last_error());
    /* the bf16 cache does not read the scales: past the check, to the device */
    st = create_cuda(dir, QW_KV_CACHE_BF16);
    if (!has_device())
        cr_assert_eq(st, QW_ERR_NO_DEVICE, "bf16 got %s (%s)", qw_status_string(st), qw_last_error());
    free(dir);
    free(src);
}

#endif
