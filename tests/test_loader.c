/*
 * test_loader.c - safetensors loader, config parsing and model weight layout.
 *
 * Every file is written by this test (raw safetensors bytes, config JSON),
 * so the suite depends on no generator and can craft each malformed case.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/testutil.h"
#include "dtype.h"
#include "model.h"
#include "safetensors.h"

/* ---------------------------------------------------------------------------
 * Writers
 * ------------------------------------------------------------------------- */

typedef struct tspec {
    char name[96];
    const char *dtype;     /* "F32", "BF16", "F16" */
    int ndim;
    int64_t shape[QWI_MAX_DIMS];
    void *data;            /* owned by whoever filled it */
    size_t nbytes;
} tspec;

static char *path_in(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    cr_assert(p);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* Write 8-byte LE length + header + data, exactly as given. */
static void write_raw(const char *path, const char *header, size_t hlen, const void *data,
                      size_t dlen) {
    size_t n = 8 + hlen + dlen;
    unsigned char *buf = malloc(n ? n : 1);
    cr_assert(buf);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    memcpy(buf + 8, header, hlen);
    if (dlen) memcpy(buf + 8 + hlen, data, dlen);
    cr_assert_eq(qwt_write_file(path, buf, n), 0, "write %s", path);
    free(buf);
}

static void write_raw_str(const char *path, const char *header, const void *data, size_t dlen) {
    write_raw(path, header, strlen(header), data, dlen);
}

/* Write a well-formed file holding the tensors back to back, header padded
 * to 8 bytes with spaces like the reference writer does. */
static void write_st(const char *path, const tspec *t, size_t n) {
    json_t *root = json_object();
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_object(), *shape = json_array();
        for (int d = 0; d < t[i].ndim; d++) json_array_append_new(shape, json_integer(t[i].shape[d]));
        json_object_set_new(e, "dtype", json_string(t[i].dtype));
        json_object_set_new(e, "shape", shape);
        json_object_set_new(e, "data_offsets",
                            json_pack("[I, I]", (json_int_t)off, (json_int_t)(off + t[i].nbytes)));
        json_object_set_new(root, t[i].name, e);
        off += t[i].nbytes;
    }
    json_object_set_new(root, "__metadata__", json_pack("{s:s}", "format", "pt"));
    char *h = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    size_t hl = strlen(h), padded = (hl + 7) / 8 * 8;
    char *hp = malloc(padded);
    memcpy(hp, h, hl);
    memset(hp + hl, ' ', padded - hl);
    unsigned char *data = malloc(off ? off : 1);
    off = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i].nbytes) memcpy(data + off, t[i].data, t[i].nbytes);
        off += t[i].nbytes;
    }
    write_raw(path, hp, padded, data, off);
    free(data);
    free(hp);
    free(h);
}

static void write_text(const char *dir, const char *name, const char *text) {
    char *p = path_in(dir, name);
    cr_assert_eq(qwt_write_file(p, text, strlen(text)), 0);
    free(p);
}

static void write_json(const char *dir, const char *name, json_t *obj) {
    char *s = json_dumps(obj, JSON_INDENT(2));
    write_text(dir, name, s);
    free(s);
}

/* Fill a tensor with value(k) = base + k/64 in its dtype. */
static void fill(tspec *t, float base) {
    size_t numel = 1;
    for (int d = 0; d < t->ndim; d++) numel *= (size_t)t->shape[d];
    bool f32 = strcmp(t->dtype, "F32") == 0;
    t->nbytes = numel * (f32 ? 4 : 2);
    t->data = malloc(t->nbytes ? t->nbytes : 1);
    for (size_t k = 0; k < numel; k++) {
        float v = base + (float)k / 64.0f;
        if (f32) {
            ((float *)t->data)[k] = v;
        } else if (strcmp(t->dtype, "BF16") == 0) {
            ((uint16_t *)t->data)[k] = qwi_f32_to_bf16(v);
        } else { /* F16: exact for these small multiples of 1/64 */
            /* build the half by hand: v = m * 2^e */
            float a = v < 0 ? -v : v;
            uint16_t h = 0;
            if (a != 0) {
                int e = 0;
                while (a >= 2.0f) { a /= 2; e++; }
                while (a < 1.0f) { a *= 2; e--; }
                h = (uint16_t)(((e + 15) << 10) | (uint16_t)((a - 1.0f) * 1024.0f + 0.5f));
            }
            if (v < 0) h |= 0x8000;
            ((uint16_t *)t->data)[k] = h;
        }
    }
}

static tspec spec(const char *name, const char *dtype, int ndim, int64_t d0, int64_t d1) {
    tspec t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "%s", name);
    t.dtype = dtype;
    t.ndim = ndim;
    t.shape[0] = d0;
    t.shape[1] = d1;
    return t;
}

static void free_specs(tspec *t, size_t n) {
    for (size_t i = 0; i < n; i++) free(t[i].data);
}

static float elem(const qwi_tensor *t, size_t k) {
    if (t->dtype == QWI_DTYPE_F32) {
        float f;
        memcpy(&f, (const char *)t->data + 4 * k, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const char *)t->data + 2 * k, 2);
    return t->dtype == QWI_DTYPE_BF16 ? qwi_bf16_to_f32(h) : qwi_f16_to_f32(h);
}

#define ASSERT_ERR(st, want, needle)                                                       \
    do {                                                                                   \
        cr_assert_eq((st), (want), "status %d, expected %d (%s)", (int)(st), (int)(want),  \
                     qw_last_error());                                                     \
        cr_assert(strstr(qw_last_error(), (needle)) != NULL,                               \
                  "message \"%s\" does not contain \"%s\"", qw_last_error(), (needle));    \
    } while (0)

/* ---------------------------------------------------------------------------
 * Single files: valid
 * ------------------------------------------------------------------------- */

static void check_valid_dtype(const char *dtname, qwi_dtype want) {
    char *dir = qwt_tmpdir("st_valid");
    char *p = path_in(dir, "w.safetensors");
    tspec t[2] = {spec("a.weight", dtname, 2, 3, 5), spec("b.bias", dtname, 1, 7, 0)};
    fill(&t[0], -1.0f);
    fill(&t[1], 2.0f);
    write_st(p, t, 2);
    qwi_st_set *s = NULL;
    cr_assert_eq(qwi_st_open_file(p, &s), QW_OK, "%s", qw_last_error());
    cr_assert_eq(qwi_st_count(s), 2);
    const qwi_tensor *a = qwi_st_find(s, "a.weight"), *b = qwi_st_find(s, "b.bias");
    cr_assert(a && b);
    cr_assert_null(qwi_st_find(s, "__metadata__"));
    cr_assert_null(qwi_st_find(s, "nope"));
    cr_assert_eq(a->dtype, want);
    cr_assert_eq(a->ndim, 2);
    cr_assert_eq(a->shape[0], 3);
    cr_assert_eq(a->shape[1], 5);
    cr_assert_eq(a->nbytes, 15 * qwi_dtype_size(want));
    cr_assert_eq(b->ndim, 1);
    cr_assert_eq(b->shape[0], 7);
    cr_assert_str_eq(a->name, "a.weight");
    cr_assert_str_eq(a->file, p);
    for (size_t k = 0; k < 15; k++)
        cr_assert_float_eq(elem(a, k), -1.0f + (float)k / 64.0f, 1e-6, "a[%zu]", k);
    for (size_t k = 0; k < 7; k++)
        cr_assert_float_eq(elem(b, k), 2.0f + (float)k / 64.0f, 1e-6, "b[%zu]", k);
    bool seen_a = false;
    for (size_t i = 0; i < qwi_st_count(s); i++) seen_a |= qwi_st_at(s, i) == a;
    cr_assert(seen_a);
    cr_assert_null(qwi_st_at(s, 2));
    qwi_st_close(s);
    free_specs(t, 2);
    free(p);
    free(dir);
}

Test(st_valid, f32) { check_valid_dtype("F32", QWI_DTYPE_F32); }
Test(st_valid, bf16) { check_valid_dtype("BF16", QWI_DTYPE_BF16); }
Test(st_valid, f16) { check_valid_dtype("F16", QWI_DTYPE_F16); }

Test(st_valid, scalar_and_empty_tensors) {
    char *dir = qwt_tmpdir("st_scalar");
    char *p = path_in(dir, "w.safetensors");
    float v[2] = {3.5f, -1.25f};
    write_raw_str(p,
                  "{\"e\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[0,0]},"
                  "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
                  "\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
                  "\"__metadata__\":{\"x\":\"y\"}}",
                  v, sizeof v);
    qwi_st_set *s = NULL;
    cr_assert_eq(qwi_st_open_file(p, &s), QW_OK, "%s", qw_last_error());
    const qwi_tensor *sc = qwi_st_find(s, "s"), *e = qwi_st_find(s, "e");
    cr_assert(sc && e);
    cr_assert_eq(sc->ndim, 0);
    cr_assert_eq(sc->nbytes, 4);
    cr_assert_float_eq(elem(sc, 0), 3.5f, 0);
    cr_assert_float_eq(elem(qwi_st_find(s, "t"), 0), -1.25f, 0);
    cr_assert_eq(e->nbytes, 0);
    qwi_st_close(s);
    qwi_st_close(NULL);
    free(p);
    free(dir);
}

/* ---------------------------------------------------------------------------
 * Single files: malformed
 * ------------------------------------------------------------------------- */

/* Write header+data as given and assert open fails with want + needle. */
static void expect_bad(const char *header, size_t dlen, qw_status want, const char *needle) {
    char *dir = qwt_tmpdir("st_bad");
    char *p = path_in(dir, "w.safetensors");
    unsigned char *data = calloc(1, dlen ? dlen : 1);
    write_raw_str(p, header, data, dlen);
    qwi_st_set *s = (qwi_st_set *)1;
    qw_status st = qwi_st_open_file(p, &s);
    cr_assert_null(s, "*out must be NULL on failure");
    ASSERT_ERR(st, want, needle);
    cr_assert(strstr(qw_last_error(), p), "message \"%s\" does not name the file", qw_last_error());
    free(data);
    free(p);
    free(dir);
}

Test(st_bad, missing_file) {
    char *dir = qwt_tmpdir("st_missing");
    char *p = path_in(dir, "nothere.safetensors");
    qwi_st_set *s = (qwi_st_set *)1;
    ASSERT_ERR(qwi_st_open_file(p, &s), QW_ERR_IO, p);
    cr_assert_null(s);
    free(p);
    free(dir);
}

Test(st_bad, shorter_than_8_bytes) {
    char *dir = qwt_tmpdir("st_short");
    char *p = path_in(dir, "w.safetensors");
    cr_assert_eq(qwt_write_file(p, "\x02\0\0\0\0", 5), 0);
    qwi_st_set *s = NULL;
    ASSERT_ERR(qwi_st_open_file(p, &s), QW_ERR_FORMAT, p);
    cr_assert_eq(qwt_write_file(p, "", 0), 0);
    ASSERT_ERR(qwi_st_open_file(p, &s), QW_ERR_FORMAT, "too short");
    free(p);
    free(dir);
}

Test(st_bad, truncated_data_section) {
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 12,
               QW_ERR_FORMAT, "tensor w");
}

Test(st_bad, header_length_past_end) {
    char *dir = qwt_tmpdir("st_hlen");
    char *p = path_in(dir, "w.safetensors");
    const char *h = "{}      ";
    unsigned char buf[16];
    uint64_t len = 9; /* one byte more than there is */
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(len >> (8 * i));
    memcpy(buf + 8, h, 8);
    cr_assert_eq(qwt_write_file(p, buf, 16), 0);
    qwi_st_set *s = NULL;
    ASSERT_ERR(qwi_st_open_file(p, &s), QW_ERR_FORMAT, p);
    cr_assert(strstr(qw_last_error(), "header length"), "%s", qw_last_error());
    /* A length near 2^64 must not wrap the bounds check. */
    len = UINT64_MAX - 3;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(len >> (8 * i));
    cr_assert_eq(qwt_write_file(p, buf, 16), 0);
    ASSERT_ERR(qwi_st_open_file(p, &s), QW_ERR_FORMAT, "header length");
    free(p);
    free(dir);
}

Test(st_bad, header_length_absurd) {
    /* A sparse 120 MB file whose header length fits in it but exceeds the
     * 100 MB limit: rejected before jansson ever sees it. */
    char *dir = qwt_tmpdir("st_absurd");
    char *p = path_in(dir, "w.safetensors");
    unsigned char buf[8];
    uint64_t len = 110ull * 1024 * 1024;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(len >> (8 * i));
    cr_assert_eq(qwt_write_file(p, buf, 8), 0);
    cr_assert_eq(truncate(p, 120ll * 1024 * 1024), 0);
    qwi_st_set *s = NULL;
    ASSERT_ERR(qwi_st_open_file(p, &s), QW_ERR_FORMAT, "is absurd (limit");
    cr_assert(strstr(qw_last_error(), p));
    free(p);
    free(dir);
}

Test(st_bad, header_not_json) { expect_bad("{\"w\": nonsense", 0, QW_ERR_FORMAT, "JSON"); }
Test(st_bad, header_not_object) { expect_bad("[1, 2, 3]", 0, QW_ERR_FORMAT, "not a JSON object"); }

Test(st_bad, entry_not_object) { expect_bad("{\"w\": 3}", 0, QW_ERR_FORMAT, "tensor w"); }

Test(st_bad, duplicate_key_in_header) {
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
               8, QW_ERR_FORMAT, "JSON");
}

Test(st_bad, overlapping_offsets) {
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
               12, QW_ERR_FORMAT, "overlaps");
    cr_assert(strstr(qw_last_error(), "tensor b"), "%s", qw_last_error());
}

Test(st_bad, identical_offsets_alias) {
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
               8, QW_ERR_FORMAT, "overlaps");
}

Test(st_bad, gap_between_tensors) {
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
               12, QW_ERR_FORMAT, "gap");
    cr_assert(strstr(qw_last_error(), "tensor b"), "%s", qw_last_error());
}

Test(st_bad, gap_at_start) {
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
               QW_ERR_FORMAT, "tensor a");
}

Test(st_bad, trailing_bytes) {
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8,
               QW_ERR_FORMAT, "not covered");
}

Test(st_bad, size_mismatch) {
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
               QW_ERR_FORMAT, "tensor a");
    cr_assert(strstr(qw_last_error(), "12"), "%s", qw_last_error());
}

Test(st_bad, unknown_dtype) {
    expect_bad("{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
               QW_ERR_FORMAT, "tensor a");
    cr_assert(strstr(qw_last_error(), "F33"), "%s", qw_last_error());
}

Test(st_bad, unsupported_dtypes) {
    expect_bad("{\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8,
               QW_ERR_UNSUPPORTED, "tensor a");
    expect_bad("{\"q\":{\"dtype\":\"F8_E5M2\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4,
               QW_ERR_UNSUPPORTED, "tensor q");
    expect_bad("{\"i\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8,
               QW_ERR_UNSUPPORTED, "I64");
    expect_bad("{\"u\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
               QW_ERR_UNSUPPORTED, "tensor u");
}

Test(st_bad, dtype_not_string) {
    expect_bad("{\"a\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, QW_ERR_FORMAT,
               "dtype");
}

Test(st_bad, too_many_dims) {
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
               QW_ERR_FORMAT, "tensor a");
    cr_assert(strstr(qw_last_error(), "dimensions"), "%s", qw_last_error());
}

Test(st_bad, four_dims_ok) {
    char *dir = qwt_tmpdir("st_4d");
    char *p = path_in(dir, "w.safetensors");
    float v[6] = {0};
    write_raw_str(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,2,3,1],\"data_offsets\":[0,24]}}", v,
                  sizeof v);
    qwi_st_set *s = NULL;
    cr_assert_eq(qwi_st_open_file(p, &s), QW_OK, "%s", qw_last_error());
    cr_assert_eq(qwi_st_find(s, "a")->ndim, 4);
    cr_assert_eq(qwi_st_find(s, "a")->shape[2], 3);
    qwi_st_close(s);
    free(p);
    free(dir);
}

Test(st_bad, negative_or_fractional_dim) {
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
               QW_ERR_FORMAT, "tensor a: shape[0] is not a non-negative integer");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4,
               QW_ERR_FORMAT, "shape");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, QW_ERR_FORMAT, "shape");
}

Test(st_bad, shape_overflow) {
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],"
               "\"data_offsets\":[0,4]}}",
               4, QW_ERR_FORMAT, "overflow");
    /* 2^62 elements * 4 bytes wraps to 0 in 64 bits: must not pass as empty. */
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],"
               "\"data_offsets\":[0,0]}}",
               0, QW_ERR_FORMAT, "overflow");
}

Test(st_bad, bad_offsets) {
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8,
               QW_ERR_FORMAT, "begin");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4,
               QW_ERR_FORMAT, "data_offsets");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, QW_ERR_FORMAT, "data_offsets");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4,
               QW_ERR_FORMAT, "tensor a");
}

/* ---------------------------------------------------------------------------
 * Directories and shards
 * ------------------------------------------------------------------------- */

Test(st_dir, single_file) {
    char *dir = qwt_tmpdir("st_dir1");
    char *p = path_in(dir, "model.safetensors");
    tspec t[1] = {spec("x", "F32", 1, 3, 0)};
    fill(&t[0], 1.0f);
    write_st(p, t, 1);
    qwi_st_set *s = NULL;
    cr_assert_eq(qwi_st_open_dir(dir, &s), QW_OK, "%s", qw_last_error());
    cr_assert_eq(qwi_st_count(s), 1);
    cr_assert_float_eq(elem(qwi_st_find(s, "x"), 2), 1.0f + 2.0f / 64, 0);
    qwi_st_close(s);
    free_specs(t, 1);
    free(p);
    free(dir);
}

Test(st_dir, not_a_regular_file) {
    char *dir = qwt_tmpdir("st_dirfile");
    char *p = path_in(dir, "model.safetensors");
    cr_assert_eq(qwt_system("mkdir '%s'", p), 0);
    qwi_st_set *s = (qwi_st_set *)1;
    ASSERT_ERR(qwi_st_open_dir(dir, &s), QW_ERR_IO, p);
    cr_assert(strstr(qw_last_error(), "not a regular file"), "%s", qw_last_error());
    cr_assert_null(s);
    free(p);
    free(dir);
}

Test(st_dir, nothing_there) {
    char *dir = qwt_tmpdir("st_dir0");
    qwi_st_set *s = (qwi_st_set *)1;
    ASSERT_ERR(qwi_st_open_dir(dir, &s), QW_ERR_IO, dir);
    cr_assert_null(s);
    free(dir);
}

/* Two shards: a.weight + c in shard 1, b.weight in shard 2. */
static void write_two_shards(const char *dir) {
    tspec t1[2] = {spec("a.weight", "F32", 2, 2, 2), spec("c", "BF16", 1, 3, 0)};
    tspec t2[1] = {spec("b.weight", "F16", 1, 4, 0)};
    fill(&t1[0], 0.5f);
    fill(&t1[1], 1.5f);
    fill(&t2[0], -2.0f);
    char *p1 = path_in(dir, "model-00001-of-00002.safetensors");
    char *p2 = path_in(dir, "model-00002-of-00002.safetensors");
    write_st(p1, t1, 2);
    write_st(p2, t2, 1);
    free_specs(t1, 2);
    free_specs(t2, 1);
    free(p1);
    free(p2);
}

static const char *good_index =
    "{\"metadata\":{\"total_size\":36},\"weight_map\":{"
    "\"a.weight\":\"model-00001-of-00002.safetensors\","
    "\"b.weight\":\"model-00002-of-00002.safetensors\","
    "\"c\":\"model-00001-of-00002.safetensors\"}}";

Test(st_dir, sharded_valid) {
    char *dir = qwt_tmpdir("st_shard");
    write_two_shards(dir);
    write_text(dir, "model.safetensors.index.json", good_index);
    qwi_st_set *s = NULL;
    cr_assert_eq(qwi_st_open_dir(dir, &s), QW_OK, "%s", qw_last_error());
    cr_assert_eq(qwi_st_count(s), 3);
    const qwi_tensor *a = qwi_st_find(s, "a.weight"), *b = qwi_st_find(s, "b.weight"),
                     *c = qwi_st_find(s, "c");
    cr_assert(a && b && c);
    cr_assert(strstr(a->file, "model-00001-of-00002"));
    cr_assert(strstr(b->file, "model-00002-of-00002"));
    cr_assert_eq(b->dtype, QWI_DTYPE_F16);
    cr_assert_float_eq(elem(a, 3), 0.5f + 3.0f / 64, 1e-6);
    cr_assert_float_eq(elem(b, 1), -2.0f + 1.0f / 64, 1e-6);
    cr_assert_float_eq(elem(c, 2), 1.5f + 2.0f / 64, 1e-2);
    qwi_st_close(s);
    free(dir);
}

Test(st_dir, index_names_missing_shard) {
    char *dir = qwt_tmpdir("st_shard_missing");
    write_two_shards(dir);
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"a.weight\":\"model-00001-of-00002.safetensors\","
               "\"b.weight\":\"model-00003-of-00002.safetensors\"}}");
    qwi_st_set *s = (qwi_st_set *)1;
    ASSERT_ERR(qwi_st_open_dir(dir, &s), QW_ERR_IO, "model-00003-of-00002.safetensors");
    cr_assert_null(s);
    free(dir);
}

Test(st_dir, tensor_absent_from_shard) {
    char *dir = qwt_tmpdir("st_shard_absent");
    write_two_shards(dir);
    /* b.weight exists, but in the other shard; z exists nowhere. */
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"a.weight\":\"model-00001-of-00002.safetensors\","
               "\"b.weight\":\"model-00001-of-00002.safetensors\","
               "\"c\":\"model-00002-of-00002.safetensors\"}}");
    qwi_st_set *s = NULL;
    ASSERT_ERR(qwi_st_open_dir(dir, &s), QW_ERR_FORMAT, "model-00001-of-00002");
    cr_assert(strstr(qw_last_error(), "tensor b.weight") || strstr(qw_last_error(), "tensor c"),
              "%s", qw_last_error());
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"z\":\"model-00002-of-00002.safetensors\"}}");
    ASSERT_ERR(qwi_st_open_dir(dir, &s), QW_ERR_FORMAT, "tensor z");
    free(dir);
}

Test(st_dir, shard_path_escapes) {
    char *dir = qwt_tmpdir("st_shard_escape");
    write_two_shards(dir);
    qwi_st_set *s = NULL;
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"a.weight\":\"../model-00001-of-00002.safetensors\"}}");
    ASSERT_ERR(qwi_st_open_dir(dir, &s), QW_ERR_FORMAT, "a.weight");
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"a.weight\":\"/etc/passwd\"}}");
    ASSERT_ERR(qwi_st_open_dir(dir, &s), QW_ERR_FORMAT, "/etc/passwd");
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\":{\"a.weight\":\"..\"}}");
    ASSERT_ERR(qwi_st_open_dir(dir, &s), QW_ERR_FORMAT, "a.weight");
    free(dir);
}

Test(st_dir, bad_index) {
    char *dir = qwt_tmpdir("st_bad_index");
    write_two_shards(dir);
    qwi_st_set *s = NULL;
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\": [");
    ASSERT_ERR(qwi_st_open_dir(dir, &s), QW_ERR_FORMAT, "model.safetensors.index.json");
    write_text(dir, "model.safetensors.index.json", "{\"metadata\":{}}");
    ASSERT_ERR(qwi_st_open_dir(dir, &s), QW_ERR_FORMAT, "weight_map");
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\":{}}");
    ASSERT_ERR(qwi_st_open_dir(dir, &s), QW_ERR_FORMAT, "names no tensors");
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\":{\"a.weight\":7}}");
    ASSERT_ERR(qwi_st_open_dir(dir, &s), QW_ERR_FORMAT, "a.weight");
    free(dir);
}

Test(st_dir, duplicate_across_shards) {
    char *dir = qwt_tmpdir("st_shard_dup");
    tspec t[1] = {spec("same", "F32", 1, 2, 0)};
    fill(&t[0], 0);
    char *p1 = path_in(dir, "s1.safetensors"), *p2 = path_in(dir, "s2.safetensors");
    write_st(p1, t, 1);
    write_st(p2, t, 1);
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"same\":\"s1.safetensors\",\"other\":\"s2.safetensors\"}}");
    qwi_st_set *s = NULL;
    ASSERT_ERR(qwi_st_open_dir(dir, &s), QW_ERR_FORMAT, "tensor same");
    cr_assert(strstr(qw_last_error(), "defined in both"), "%s", qw_last_error());
    cr_assert_null(s);
    free_specs(t, 1);
    free(p1);
    free(p2);
    free(dir);
}

Test(st_dir, bad_shard_reports_shard_file) {
    char *dir = qwt_tmpdir("st_shard_bad");
    write_two_shards(dir);
    char *p2 = path_in(dir, "model-00002-of-00002.safetensors");
    write_raw_str(p2, "{\"b.weight\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,6]}}",
                  "123456", 6);
    write_text(dir, "model.safetensors.index.json", good_index);
    qwi_st_set *s = NULL;
    ASSERT_ERR(qwi_st_open_dir(dir, &s), QW_ERR_FORMAT, p2);
    cr_assert(strstr(qw_last_error(), "tensor b.weight"), "%s", qw_last_error());
    free(p2);
    free(dir);
}

/* ---------------------------------------------------------------------------
 * config.json
 * ------------------------------------------------------------------------- */

/* The tiny Qwen3 used throughout: hidden 8, 1 layer, 2 heads, 1 kv head,
 * head_dim 4, intermediate 16, vocab 32. Caller owns the object. */
static json_t *tiny_config(bool qwen2) {
    return json_pack("{s:[s], s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:b, s:i, s:i, s:i}",
                     "architectures", qwen2 ? "Qwen2ForCausalLM" : "Qwen3ForCausalLM",
                     "vocab_size", 32, "hidden_size", 8, "intermediate_size", 16,
                     "num_hidden_layers", 1, "num_attention_heads", 2, "num_key_value_heads", 1,
                     "head_dim", 4, "rms_norm_eps", 1e-6, "rope_theta", 1000000.0,
                     "tie_word_embeddings", 0, "max_position_embeddings", 128,
                     "eos_token_id", 2, "bos_token_id", 1);
}

static qw_status load_cfg_obj(json_t *cfg, qwi_config *out, char **dir_out) {
    char *dir = qwt_tmpdir("cfg");
    write_json(dir, "config.json", cfg);
    qw_status st = qwi_config_load(dir, out);
    if (dir_out) *dir_out = dir;
    else free(dir);
    return st;
}

Test(config, valid_qwen3) {
    json_t *c = tiny_config(false);
    char *dir = qwt_tmpdir("cfg_valid");
    write_json(dir, "config.json", c);
    write_text(dir, "generation_config.json", "{\"eos_token_id\": [3, 2, 3], \"top_p\": 0.9}");
    qwi_config cfg;
    cr_assert_eq(qwi_config_load(dir, &cfg), QW_OK, "%s", qw_last_error());
    cr_assert_eq(cfg.vocab_size, 32);
    cr_assert_eq(cfg.hidden_size, 8);
    cr_assert_eq(cfg.intermediate_size, 16);
    cr_assert_eq(cfg.num_layers, 1);
    cr_assert_eq(cfg.num_heads, 2);
    cr_assert_eq(cfg.num_kv_heads, 1);
    cr_assert_eq(cfg.head_dim, 4);
    cr_assert_eq(cfg.max_position_embeddings, 128);
    cr_assert_float_eq(cfg.rms_norm_eps, 1e-6, 1e-12);
    cr_assert_float_eq(cfg.rope_theta, 1e6, 0);
    cr_assert(!cfg.tie_word_embeddings);
    cr_assert(cfg.qk_norm);
    cr_assert(!cfg.qkv_bias);
    cr_assert_eq(cfg.bos_token_id, 1);
    cr_assert_eq(cfg.num_eos, 2, "eos merged and deduplicated: %d", cfg.num_eos);
    cr_assert_eq(cfg.eos_token_ids[0], 2);
    cr_assert_eq(cfg.eos_token_ids[1], 3);
    json_decref(c);
    free(dir);
}

Test(config, defaults) {
    for (int q2 = 0; q2 < 2; q2++) {
        json_t *c = tiny_config(q2);
        const char *drop[] = {"num_key_value_heads", "head_dim", "rope_theta",
                              "tie_word_embeddings", "max_position_embeddings", "eos_token_id",
                              "bos_token_id"};
        for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++) json_object_del(c, drop[i]);
        json_object_set_new(c, "rope_scaling", json_null());
        qwi_config cfg;
        cr_assert_eq(load_cfg_obj(c, &cfg, NULL), QW_OK, "%s", qw_last_error());
        cr_assert_eq(cfg.num_kv_heads, 2);
        cr_assert_eq(cfg.head_dim, 4);
        cr_assert_float_eq(cfg.rope_theta, q2 ? 10000.0 : 1000000.0, 0);
        cr_assert(!cfg.tie_word_embeddings);
        cr_assert_eq(cfg.max_position_embeddings, 32768);
        cr_assert_eq(cfg.num_eos, 0);
        cr_assert_eq(cfg.bos_token_id, -1);
        cr_assert_eq(cfg.qk_norm, !q2);
        cr_assert_eq(cfg.qkv_bias, (bool)q2);
        json_decref(c);
    }
}

Test(config, missing_each_required_key) {
    const char *keys[] = {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads", "rms_norm_eps"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        json_t *c = tiny_config(false);
        json_object_del(c, keys[i]);
        qwi_config cfg;
        char *dir;
        qw_status st = load_cfg_obj(c, &cfg, &dir);
        ASSERT_ERR(st, QW_ERR_FORMAT, keys[i]);
        cr_assert(strstr(qw_last_error(), "config.json") && strstr(qw_last_error(), dir),
                  "%s", qw_last_error());
        json_decref(c);
        free(dir);
    }
}

Test(config, wrong_types) {
    struct { const char *key; json_t *val; } cases[] = {
        {"vocab_size", json_string("32")},      {"hidden_size", json_real(8.5)},
        {"num_hidden_layers", json_true()},     {"rms_norm_eps", json_string("1e-6")},
        {"num_key_value_heads", json_array()},  {"tie_word_embeddings", json_integer(1)},
        {"rope_theta", json_string("big")},     {"eos_token_id", json_string("2")},
        {"architectures", json_string("Qwen3ForCausalLM")}, {"head_dim", json_real(4.0)},
        {"vocab_size", json_null()},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *c = tiny_config(false);
        json_object_set_new(c, cases[i].key, cases[i].val);
        qwi_config cfg;
        ASSERT_ERR(load_cfg_obj(c, &cfg, NULL), QW_ERR_FORMAT, cases[i].key);
        cr_assert(strstr(qw_last_error(), "must be"), "a type error, not a range error: %s",
                  qw_last_error());
        json_decref(c);
    }
}

Test(config, out_of_range) {
    struct { const char *key; json_int_t val; const char *needle; } cases[] = {
        {"vocab_size", 0, "vocab_size"},       {"hidden_size", -8, "hidden_size"},
        {"num_attention_heads", 0, "num_attention_heads"},
        {"num_hidden_layers", 1ll << 40, "num_hidden_layers"},
        {"head_dim", 3, "head_dim"},           {"eos_token_id", 32, "eos_token_id"},
        {"bos_token_id", -2, "bos_token_id"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *c = tiny_config(false);
        json_object_set_new(c, cases[i].key, json_integer(cases[i].val));
        qwi_config cfg;
        ASSERT_ERR(load_cfg_obj(c, &cfg, NULL), QW_ERR_FORMAT, cases[i].needle);
        json_decref(c);
    }
    json_t *c = tiny_config(false);
    json_object_set_new(c, "rms_norm_eps", json_real(0));
    qwi_config cfg;
    ASSERT_ERR(load_cfg_obj(c, &cfg, NULL), QW_ERR_FORMAT, "rms_norm_eps");
    json_decref(c);
}

Test(config, heads_not_multiple_of_kv_heads) {
    json_t *c = tiny_config(false);
    json_object_set_new(c, "num_attention_heads", json_integer(3));
    json_object_set_new(c, "num_key_value_heads", json_integer(2));
    qwi_config cfg;
    ASSERT_ERR(load_cfg_obj(c, &cfg, NULL), QW_ERR_FORMAT, "num_key_value_heads");
    json_decref(c);
    /* Without head_dim, hidden must split evenly over the heads. */
    c = tiny_config(false);
    json_object_del(c, "head_dim");
    json_object_set_new(c, "num_attention_heads", json_integer(3));
    json_object_set_new(c, "num_key_value_heads", json_integer(3));
    ASSERT_ERR(load_cfg_obj(c, &cfg, NULL), QW_ERR_FORMAT, "hidden_size");
    json_decref(c);
}

Test(config, unsupported_architecture) {
    json_t *c = tiny_config(false);
    json_object_set_new(c, "architectures", json_pack("[s]", "LlamaForCausalLM"));
    qwi_config cfg;
    ASSERT_ERR(load_cfg_obj(c, &cfg, NULL), QW_ERR_UNSUPPORTED, "LlamaForCausalLM");
    json_decref(c);
    c = tiny_config(false);
    json_object_del(c, "architectures");
    ASSERT_ERR(load_cfg_obj(c, &cfg, NULL), QW_ERR_FORMAT, "architectures");
    json_object_set_new(c, "model_type", json_string("qwen3"));
    cr_assert_eq(load_cfg_obj(c, &cfg, NULL), QW_OK, "%s", qw_last_error());
    cr_assert(cfg.qk_norm);
    json_decref(c);
}

Test(config, rope_scaling) {
    json_t *c = tiny_config(false);
    json_object_set_new(c, "rope_scaling",
                        json_pack("{s:s, s:f, s:i}", "rope_type", "yarn", "factor", 4.0,
                                  "original_max_position_embeddings", 32768));
    qwi_config cfg;
    ASSERT_ERR(load_cfg_obj(c, &cfg, NULL), QW_ERR_UNSUPPORTED, "yarn");
    cr_assert(strstr(qw_last_error(), "rope_scaling"), "%s", qw_last_error());
    json_object_set_new(c, "rope_scaling", json_pack("{s:s}", "type", "default"));
    cr_assert_eq(load_cfg_obj(c, &cfg, NULL), QW_OK, "%s", qw_last_error());
    json_object_set_new(c, "rope_scaling", json_string("yarn"));
    ASSERT_ERR(load_cfg_obj(c, &cfg, NULL), QW_ERR_FORMAT, "rope_scaling");
    json_decref(c);
}

Test(config, qwen3_attention_bias) {
    json_t *c = tiny_config(false);
    json_object_set_new(c, "attention_bias", json_true());
    qwi_config cfg;
    cr_assert_eq(load_cfg_obj(c, &cfg, NULL), QW_OK, "%s", qw_last_error());
    cr_assert(cfg.qkv_bias);
    cr_assert(cfg.qk_norm);
    json_decref(c);
}

Test(config, missing_and_malformed_files) {
    char *dir = qwt_tmpdir("cfg_missing");
    qwi_config cfg;
    ASSERT_ERR(qwi_config_load(dir, &cfg), QW_ERR_IO, "config.json");
    write_text(dir, "config.json", "{\"vocab_size\": 32,");
    ASSERT_ERR(qwi_config_load(dir, &cfg), QW_ERR_FORMAT, "config.json");
    write_text(dir, "config.json", "[1]");
    ASSERT_ERR(qwi_config_load(dir, &cfg), QW_ERR_FORMAT, "config.json");
    json_t *c = tiny_config(false);
    write_json(dir, "config.json", c);
    write_text(dir, "generation_config.json", "{\"eos_token_id\": \"x\"}");
    ASSERT_ERR(qwi_config_load(dir, &cfg), QW_ERR_FORMAT, "generation_config.json");
    json_decref(c);
    free(dir);
}

Test(config, too_many_eos) {
    json_t *c = tiny_config(false);
    json_object_set_new(c, "eos_token_id", json_pack("[i,i,i,i,i,i,i,i,i]", 1, 2, 3, 4, 5, 6, 7,
                                                     8, 9));
    qwi_config cfg;
    ASSERT_ERR(load_cfg_obj(c, &cfg, NULL), QW_ERR_UNSUPPORTED, "eos_token_id");
    /* Eight distinct ids with repeats fit. */
    json_object_set_new(c, "eos_token_id", json_pack("[i,i,i,i,i,i,i,i,i,i]", 1, 2, 3, 4, 5, 6,
                                                     7, 8, 1, 8));
    cr_assert_eq(load_cfg_obj(c, &cfg, NULL), QW_OK, "%s", qw_last_error());
    cr_assert_eq(cfg.num_eos, 8);
    json_decref(c);
}

/* ---------------------------------------------------------------------------
 * Whole models
 * ------------------------------------------------------------------------- */

typedef struct mopts {
    bool qwen2;
    bool tie;
    bool ship_lm_head;
    bool attention_bias;   /* qwen3 with q/k/v biases */
    const char *skip;      /* tensor to leave out      */
    const char *bad;       /* tensor to give shape+1   */
    int bad_dim;           /* which dim of it          */
    bool sharded;
    bool extra;            /* add an unrelated tensor  */
    const char *embed_dtype;
} mopts;

#define MAX_T 32

/* Build the tensor list of the tiny model (config of tiny_config). */
static size_t model_specs(const mopts *o, tspec *t) {
    const int64_t V = 32, H = 8, Q = 2 * 4, KV = 1 * 4, I = 16, D = 4;
    size_t n = 0;
    t[n++] = spec("model.embed_tokens.weight", o->embed_dtype ? o->embed_dtype : "F32", 2, V, H);
    t[n++] = spec("model.norm.weight", "F32", 1, H, 0);
    if (o->ship_lm_head) t[n++] = spec("lm_head.weight", "F32", 2, V, H);
    const char *p = "model.layers.0.";
    char b[96];
#define ADD(suffix, nd, d0, d1) \
    (snprintf(b, sizeof b, "%s%s", p, suffix), t[n++] = spec(b, "F32", nd, d0, d1))
    ADD("input_layernorm.weight", 1, H, 0);
    ADD("self_attn.q_proj.weight", 2, Q, H);
    ADD("self_attn.k_proj.weight", 2, KV, H);
    ADD("self_attn.v_proj.weight", 2, KV, H);
    ADD("self_attn.o_proj.weight", 2, H, Q);
    if (o->qwen2 || o->attention_bias) {
        ADD("self_attn.q_proj.bias", 1, Q, 0);
        ADD("self_attn.k_proj.bias", 1, KV, 0);
        ADD("self_attn.v_proj.bias", 1, KV, 0);
    }
    if (!o->qwen2) {
        ADD("self_attn.q_norm.weight", 1, D, 0);
        ADD("self_attn.k_norm.weight", 1, D, 0);
    }
    ADD("post_attention_layernorm.weight", 1, H, 0);
    ADD("mlp.gate_proj.weight", 2, I, H);
    ADD("mlp.up_proj.weight", 2, I, H);
    ADD("mlp.down_proj.weight", 2, H, I);
    if (o->extra) ADD("self_attn.rotary_emb.inv_freq", 1, D / 2, 0);
#undef ADD
    return n;
}

/* Write config.json and the weights of the tiny model into a fresh dir.
 * Tensor k holds base k (see fill), so tests can tell tensors apart. */
static char *write_model(const mopts *o) {
    char *dir = qwt_tmpdir("model");
    json_t *c = tiny_config(o->qwen2);
    json_object_set_new(c, "tie_word_embeddings", json_boolean(o->tie));
    if (o->attention_bias) json_object_set_new(c, "attention_bias", json_true());
    write_json(dir, "config.json", c);
    json_decref(c);

    tspec t[MAX_T];
    size_t n = model_specs(o, t), m = 0;
    tspec keep[MAX_T];
    for (size_t i = 0; i < n; i++) {
        if (o->skip && strcmp(t[i].name, o->skip) == 0) continue;
        if (o->bad && strcmp(t[i].name, o->bad) == 0) t[i].shape[o->bad_dim] += 1;
        keep[m] = t[i];
        fill(&keep[m], (float)m);
        m++;
    }
    if (!o->sharded) {
        char *p = path_in(dir, "model.safetensors");
        write_st(p, keep, m);
        free(p);
    } else {
        /* First half in shard 1, the rest in shard 2. */
        size_t h = m / 2;
        char *p1 = path_in(dir, "model-00001-of-00002.safetensors");
        char *p2 = path_in(dir, "model-00002-of-00002.safetensors");
        write_st(p1, keep, h);
        write_st(p2, keep + h, m - h);
        json_t *wm = json_object();
        for (size_t i = 0; i < m; i++)
            json_object_set_new(wm, keep[i].name,
                                json_string(i < h ? "model-00001-of-00002.safetensors"
                                                  : "model-00002-of-00002.safetensors"));
        json_t *idx = json_pack("{s:{s:i}, s:o}", "metadata", "total_size", 0, "weight_map", wm);
        write_json(dir, "model.safetensors.index.json", idx);
        json_decref(idx);
        free(p1);
        free(p2);
    }
    free_specs(keep, m);
    return dir;
}

static void check_shape2(const qwi_tensor *t, int64_t d0, int64_t d1, const char *what) {
    cr_assert_not_null(t->data, "%s has no data", what);
    cr_assert_eq(t->ndim, d1 < 0 ? 1 : 2, "%s ndim", what);
    cr_assert_eq(t->shape[0], d0, "%s shape[0]", what);
    if (d1 >= 0) cr_assert_eq(t->shape[1], d1, "%s shape[1]", what);
}

Test(model, valid_qwen3_untied) {
    mopts o = {.ship_lm_head = true};
    char *dir = write_model(&o);
    qwi_model *m = NULL;
    cr_assert_eq(qwi_model_load(dir, &m), QW_OK, "%s", qw_last_error());
    cr_assert_eq(m->cfg.num_layers, 1);
    check_shape2(&m->embed, 32, 8, "embed");
    check_shape2(&m->final_norm, 8, -1, "norm");
    check_shape2(&m->lm_head, 32, 8, "lm_head");
    cr_assert_neq(m->lm_head.data, m->embed.data);
    cr_assert_str_eq(m->lm_head.name, "lm_head.weight");
    const qwi_layer *L = &m->layers[0];
    check_shape2(&L->input_norm, 8, -1, "input_norm");
    check_shape2(&L->q_proj, 8, 8, "q_proj");
    check_shape2(&L->k_proj, 4, 8, "k_proj");
    check_shape2(&L->v_proj, 4, 8, "v_proj");
    check_shape2(&L->o_proj, 8, 8, "o_proj");
    check_shape2(&L->q_norm, 4, -1, "q_norm");
    check_shape2(&L->k_norm, 4, -1, "k_norm");
    check_shape2(&L->post_norm, 8, -1, "post_norm");
    check_shape2(&L->gate_proj, 16, 8, "gate");
    check_shape2(&L->up_proj, 16, 8, "up");
    check_shape2(&L->down_proj, 8, 16, "down");
    cr_assert_null(L->q_bias.data);
    cr_assert_null(L->k_bias.data);
    cr_assert_null(L->v_bias.data);
    cr_assert_str_eq(L->down_proj.name, "model.layers.0.mlp.down_proj.weight");
    /* embed is tensor 0 (base 0), norm 1, lm_head 2: the right bytes. */
    cr_assert_float_eq(elem(&m->embed, 5), 5.0f / 64, 0);
    cr_assert_float_eq(elem(&m->final_norm, 0), 1.0f, 0);
    cr_assert_float_eq(elem(&m->lm_head, 1), 2.0f + 1.0f / 64, 0);
    qwi_model_free(m);
    qwi_model_free(NULL);
    free(dir);
}

Test(model, sharded_and_mixed_dtypes_and_extra_tensor) {
    mopts o = {.ship_lm_head = true, .sharded = true, .extra = true, .embed_dtype = "BF16"};
    char *dir = write_model(&o);
    qwi_model *m = NULL;
    cr_assert_eq(qwi_model_load(dir, &m), QW_OK, "%s", qw_last_error());
    cr_assert_eq(m->embed.dtype, QWI_DTYPE_BF16);
    cr_assert_eq(m->layers[0].q_proj.dtype, QWI_DTYPE_F32);
    cr_assert_neq(strcmp(m->embed.file, m->layers[0].down_proj.file), 0,
                  "expected two different shards");
    cr_assert_float_eq(elem(&m->embed, 3), 3.0f / 64, 1e-3);
    qwi_model_free(m);
    free(dir);
}

Test(model, wrong_shape_names_tensor) {
    const char *names[] = {"model.layers.0.self_attn.k_proj.weight", "model.norm.weight",
                           "model.embed_tokens.weight", "model.layers.0.self_attn.q_norm.weight",
                           "model.layers.0.mlp.down_proj.weight", "lm_head.weight"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        mopts o = {.ship_lm_head = true, .bad = names[i]};
        char *dir = write_model(&o);
        qwi_model *m = (qwi_model *)1;
        qw_status st = qwi_model_load(dir, &m);
        cr_assert_null(m);
        ASSERT_ERR(st, QW_ERR_FORMAT, names[i]);
        cr_assert(strstr(qw_last_error(), "model.safetensors"), "names the file: %s",
                  qw_last_error());
        cr_assert(strstr(qw_last_error(), "expected"), "%s", qw_last_error());
        free(dir);
    }
    /* The message shows both shapes. */
    mopts o = {.ship_lm_head = true, .bad = "model.layers.0.self_attn.k_proj.weight"};
    char *dir = write_model(&o);
    qwi_model *m = NULL;
    ASSERT_ERR(qwi_model_load(dir, &m), QW_ERR_FORMAT, "[5, 8]");
    cr_assert(strstr(qw_last_error(), "[4, 8]"), "%s", qw_last_error());
    free(dir);
    /* The second dimension is checked too. */
    mopts o2 = {.ship_lm_head = true, .bad = "model.layers.0.mlp.up_proj.weight", .bad_dim = 1};
    dir = write_model(&o2);
    ASSERT_ERR(qwi_model_load(dir, &m), QW_ERR_FORMAT, "[16, 9]");
    cr_assert(strstr(qw_last_error(), "model.layers.0.mlp.up_proj.weight"), "%s", qw_last_error());
    free(dir);
}

Test(model, missing_each_tensor) {
    mopts all = {.ship_lm_head = true};
    tspec t[MAX_T];
    size_t n = model_specs(&all, t);
    for (size_t i = 0; i < n; i++) {
        mopts o = {.ship_lm_head = true, .skip = t[i].name};
        char *dir = write_model(&o);
        qwi_model *m = (qwi_model *)1;
        qw_status st = qwi_model_load(dir, &m);
        cr_assert_null(m);
        ASSERT_ERR(st, QW_ERR_FORMAT, t[i].name);
        cr_assert(strstr(qw_last_error(), "missing"), "%s", qw_last_error());
        cr_assert(strstr(qw_last_error(), dir), "%s", qw_last_error());
        free(dir);
    }
}

Test(model, tied_without_lm_head) {
    mopts o = {.tie = true};
    char *dir = write_model(&o);
    qwi_model *m = NULL;
    cr_assert_eq(qwi_model_load(dir, &m), QW_OK, "%s", qw_last_error());
    cr_assert(m->cfg.tie_word_embeddings);
    cr_assert_eq(m->lm_head.data, m->embed.data);
    check_shape2(&m->lm_head, 32, 8, "lm_head");
    qwi_model_free(m);
    free(dir);
}

Test(model, tied_with_shipped_lm_head) {
    mopts o = {.tie = true, .ship_lm_head = true};
    char *dir = write_model(&o);
    qwi_model *m = NULL;
    cr_assert_eq(qwi_model_load(dir, &m), QW_OK, "%s", qw_last_error());
    cr_assert_neq(m->lm_head.data, m->embed.data);
    cr_assert_str_eq(m->lm_head.name, "lm_head.weight");
    cr_assert_float_eq(elem(&m->lm_head, 0), 2.0f, 0);
    qwi_model_free(m);
    free(dir);
    /* A shipped lm_head of the wrong shape is still an error. */
    mopts b = {.tie = true, .ship_lm_head = true, .bad = "lm_head.weight"};
    dir = write_model(&b);
    ASSERT_ERR(qwi_model_load(dir, &m), QW_ERR_FORMAT, "lm_head.weight");
    free(dir);
}

Test(model, untied_missing_lm_head) {
    mopts o = {.tie = false, .ship_lm_head = false};
    char *dir = write_model(&o);
    qwi_model *m = (qwi_model *)1;
    ASSERT_ERR(qwi_model_load(dir, &m), QW_ERR_FORMAT, "lm_head.weight");
    cr_assert(strstr(qw_last_error(), "missing"), "%s", qw_last_error());
    cr_assert_null(m);
    free(dir);
}

Test(model, qwen2_with_biases) {
    mopts o = {.qwen2 = true, .tie = true};
    char *dir = write_model(&o);
    qwi_model *m = NULL;
    cr_assert_eq(qwi_model_load(dir, &m), QW_OK, "%s", qw_last_error());
    cr_assert(m->cfg.qkv_bias);
    cr_assert(!m->cfg.qk_norm);
    const qwi_layer *L = &m->layers[0];
    check_shape2(&L->q_bias, 8, -1, "q_bias");
    check_shape2(&L->k_bias, 4, -1, "k_bias");
    check_shape2(&L->v_bias, 4, -1, "v_bias");
    cr_assert_str_eq(L->k_bias.name, "model.layers.0.self_attn.k_proj.bias");
    cr_assert_null(L->q_norm.data);
    cr_assert_null(L->k_norm.data);
    qwi_model_free(m);
    free(dir);
    mopts b = {.qwen2 = true, .tie = true, .skip = "model.layers.0.self_attn.v_proj.bias"};
    dir = write_model(&b);
    ASSERT_ERR(qwi_model_load(dir, &m), QW_ERR_FORMAT, "model.layers.0.self_attn.v_proj.bias");
    free(dir);
}

Test(model, qwen3_attention_bias) {
    mopts o = {.attention_bias = true, .tie = true};
    char *dir = write_model(&o);
    qwi_model *m = NULL;
    cr_assert_eq(qwi_model_load(dir, &m), QW_OK, "%s", qw_last_error());
    check_shape2(&m->layers[0].q_bias, 8, -1, "q_bias");
    check_shape2(&m->layers[0].q_norm, 4, -1, "q_norm");
    qwi_model_free(m);
    free(dir);
}

Test(model, config_error_propagates) {
    mopts o = {.tie = true};
    char *dir = write_model(&o);
    write_text(dir, "config.json", "{\"architectures\": [\"GPT2LMHeadModel\"]}");
    qwi_model *m = (qwi_model *)1;
    ASSERT_ERR(qwi_model_load(dir, &m), QW_ERR_UNSUPPORTED, "GPT2LMHeadModel");
    cr_assert_null(m);
    free(dir);
}

Test(model, no_weights) {
    char *dir = qwt_tmpdir("model_noweights");
    json_t *c = tiny_config(false);
    write_json(dir, "config.json", c);
    json_decref(c);
    qwi_model *m = (qwi_model *)1;
    ASSERT_ERR(qwi_model_load(dir, &m), QW_ERR_IO, dir);
    cr_assert_null(m);
    free(dir);
}
