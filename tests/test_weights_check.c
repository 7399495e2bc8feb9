/*
 * test_weights_check.c - the load-time NaN/infinity scan (weights_check.h)
 * on synthetic tensors: every dtype, every position class (first element,
 * block boundaries, the tail past the last whole word, the last element),
 * data at every misalignment, and random bit patterns against a plain
 * per-element reference. Engine-level behaviour (QW_OPT_CHECK_WEIGHTS) is
 * in test_hostile_files.c.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/testutil.h"
#include "dtype.h"
#include "safetensors.h"
#include "weights_check.h"

/* Value of element i as a float, through the library's own conversions. */
static float elem_value(qwi_dtype dt, const unsigned char *p, size_t i) {
    if (dt == QWI_DTYPE_F32) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return dt == QWI_DTYPE_BF16 ? qwi_bf16_to_f32(h) : qwi_f16_to_f32(h);
}

static int64_t ref_first_nonfinite(qwi_dtype dt, const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(elem_value(dt, p, i))) return (int64_t)i;
    return -1;
}

static void put_bits(qwi_dtype dt, unsigned char *p, size_t i, uint32_t bits) {
    if (dt == QWI_DTYPE_F32) memcpy(p + 4 * i, &bits, 4);
    else {
        uint16_t h = (uint16_t)bits;
        memcpy(p + 2 * i, &h, 2);
    }
}

static qwi_tensor tensor_at(qwi_dtype dt, const unsigned char *p, size_t n) {
    qwi_tensor t = {0};
    t.name = "w";
    t.file = "synthetic";
    t.dtype = dt;
    t.ndim = 1;
    t.shape[0] = (int64_t)n;
    t.data = p;
    t.nbytes = n * qwi_dtype_size(dt);
    return t;
}

static const qwi_dtype dtypes[3] = {QWI_DTYPE_F32, QWI_DTYPE_BF16, QWI_DTYPE_F16};

/* Largest finite, smallest subnormal, -0 and +-1 of each dtype: all finite. */
static uint32_t finite_edge(qwi_dtype dt, int k) {
    static const uint32_t f32[] = {0x7f7fffffu, 0xff7fffffu, 0x00000001u, 0x80000000u, 0x3f800000u};
    static const uint32_t b16[] = {0x7f7fu, 0xff7fu, 0x0001u, 0x8000u, 0x3f80u};
    static const uint32_t h16[] = {0x7bffu, 0xfbffu, 0x0001u, 0x8000u, 0x3c00u};
    return dt == QWI_DTYPE_F32 ? f32[k] : dt == QWI_DTYPE_BF16 ? b16[k] : h16[k];
}

/* NaN (quiet, signalling with one mantissa bit), +inf, -inf. */
static uint32_t nonfinite(qwi_dtype dt, int k) {
    static const uint32_t f32[] = {0x7fc00000u, 0x7f800001u, 0x7f800000u, 0xff800000u};
    static const uint32_t b16[] = {0x7fc0u, 0x7f81u, 0x7f80u, 0xff80u};
    static const uint32_t h16[] = {0x7e00u, 0x7c01u, 0x7c00u, 0xfc00u};
    return dt == QWI_DTYPE_F32 ? f32[k] : dt == QWI_DTYPE_BF16 ? b16[k] : h16[k];
}

Test(weights_check, finds_each_class_at_each_position_and_alignment) {
    enum { N = 5000 };   /* several 4 KB blocks plus a tail */
    unsigned char *buf = malloc(N * 4 + 16);
    cr_assert(buf);
    for (int d = 0; d < 3; d++) {
        qwi_dtype dt = dtypes[d];
        size_t es = qwi_dtype_size(dt), per_block = 4096 / es;
        const size_t pos[] = {0, 1, 3, 4, per_block - 1, per_block, 2 * per_block + 1,
                              N - 3, N - 2, N - 1};
        for (size_t mis = 0; mis < 8; mis++) {
            unsigned char *p = buf + mis;
            for (size_t i = 0; i < N; i++) put_bits(dt, p, i, finite_edge(dt, (int)(i % 5)));
            qwi_tensor t = tensor_at(dt, p, N);
            cr_assert_eq(qwi_weights_first_nonfinite(&t), -1, "dtype %d mis %zu: all finite", d, mis);
            for (size_t k = 0; k < sizeof pos / sizeof pos[0]; k++) {
                for (int c = 0; c < 4; c++) {
                    put_bits(dt, p, pos[k], nonfinite(dt, c));
                    cr_assert_eq(qwi_weights_first_nonfinite(&t), (int64_t)pos[k],
                                 "dtype %d mis %zu class %d at %zu", d, mis, c, pos[k]);
                    /* a second bad value later does not hide the first */
                    if (pos[k] + 7 < N) {
                        put_bits(dt, p, pos[k] + 7, nonfinite(dt, 0));
                        cr_assert_eq(qwi_weights_first_nonfinite(&t), (int64_t)pos[k]);
                        put_bits(dt, p, pos[k] + 7, finite_edge(dt, 0));
                    }
                    put_bits(dt, p, pos[k], finite_edge(dt, 0));
                }
            }
        }
    }
    free(buf);
}

/* Random bit patterns, dense in exponent-all-ones values, against the
 * per-element reference: same first index (or none) every time. */
Test(weights_check, random_patterns_match_the_reference) {
    enum { N = 3000 };
    unsigned char *buf = malloc(N * 4 + 8);
    cr_assert(buf);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int round = 0; round < 300; round++) {
        qwi_dtype dt = dtypes[round % 3];
        size_t n = 1 + (size_t)(round * 37) % N, mis = (size_t)round % 5;
        unsigned char *p = buf + mis;
        for (size_t i = 0; i < n; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            uint32_t bits = (uint32_t)x;
            /* mostly finite; now and then force the exponent to all ones */
            if ((x >> 40) % 4096 == 0)
                bits |= dt == QWI_DTYPE_F32 ? 0x7f800000u : dt == QWI_DTYPE_BF16 ? 0x7f80u : 0x7c00u;
            else if (dt == QWI_DTYPE_F32) bits &= 0xbfffffffu;  /* exponent below all ones */
            else if (dt == QWI_DTYPE_BF16) bits &= 0xbfffu;
            else bits &= 0xbbffu;
            put_bits(dt, p, i, bits);
        }
        qwi_tensor t = tensor_at(dt, p, n);
        cr_assert_eq(qwi_weights_first_nonfinite(&t), ref_first_nonfinite(dt, p, n),
                     "round %d dtype %d n %zu", round, (int)dt, n);
    }
    free(buf);
}

/* The set-level check names the file, the tensor, the element (with its
 * coordinates) and what it is, and the option that skips it. */
Test(weights_check, message_names_file_tensor_element_and_option) {
    char *dir = qwt_tmpdir("wcheck-set");
    cr_assert(dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    /* a: bf16 [2, 3] finite; b: f16 [2, 4] with -inf at [1, 2] */
    const char *hdr = "{\"a\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
                      "\"b\":{\"dtype\":\"F16\",\"shape\":[2,4],\"data_offsets\":[12,28]}}";
    size_t hl = strlen(hdr);
    unsigned char file[8 + 256 + 28] = {0};
    cr_assert(hl <= 256);
    for (int i = 0; i < 8; i++) file[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(file + 8, hdr, hl);
    unsigned char *data = file + 8 + hl;
    uint16_t one_bf = 0x3f80, one_h = 0x3c00, ninf = 0xfc00;
    for (int i = 0; i < 6; i++) memcpy(data + 2 * i, &one_bf, 2);
    for (int i = 0; i < 8; i++) memcpy(data + 12 + 2 * i, i == 6 ? &ninf : &one_h, 2);
    cr_assert_eq(qwt_write_file(path, file, 8 + hl + 28), 0);
    qwi_st_set *set = NULL;
    cr_assert_eq(qwi_st_open_file(path, &set), QW_OK, "%s", qw_last_error());
    cr_assert_eq(qwi_weights_check(set, NULL), QW_ERR_FORMAT);
    const char *m = qw_last_error();
    cr_expect(strstr(m, path) && strstr(m, "tensor b") && strstr(m, "element 6") &&
              strstr(m, "[1, 2]") && strstr(m, "-inf") && strstr(m, "QW_OPT_CHECK_WEIGHTS"),
              "%s", m);
    qwi_st_close(set);
    /* all finite: OK */
    memcpy(data + 12 + 12, &one_h, 2);
    cr_assert_eq(qwt_write_file(path, file, 8 + hl + 28), 0);
    cr_assert_eq(qwi_st_open_file(path, &set), QW_OK, "%s", qw_last_error());
    cr_expect_eq(qwi_weights_check(set, NULL), QW_OK, "%s", qw_last_error());
    qwi_st_close(set);
    free(dir);
}
