/*
 * quant_load.c - finding, validating and unpacking the tensors of one
 * quantized linear (quant.h).
 *
 * Storage, as the published formats define it (W is the [n out, k in]
 * weight, G = k / group_k groups):
 *   AutoAWQ GEMM: qweight I32 [k, n/8], packed along n: nibble i (bits
 *     4i..4i+3) of word [c][j] holds the code of row 8j + AWQ_ORDER[i],
 *     AWQ_ORDER = 0,2,4,6,1,3,5,7; qzeros I32 [G, n/8] packed the same;
 *     scales F16 [G, n]. W = (code - zero) * scale.
 *   AutoGPTQ / GPTQModel: qweight I32 [k*bits/32, n], packed along k in
 *     order: word [w][r] holds the codes of columns w*32/bits + i at bits
 *     i*bits..; qzeros I32 [G, n*bits/32] packed along n in order; scales
 *     F16 [G, n]; g_idx I32 [k] (the group of each input column). Format
 *     "gptq" (v1) stores zero - 1, "gptq_v2" the zero itself.
 *   Qwen3-*-FP8: weight F8_E4M3 [n, k], weight_scale_inv [ceil(n/bn),
 *     ceil(k/bk)]: W = e4m3(code) * scale of the (bn x bk) block.
 * Every multi-byte read goes through memcpy: safetensors data is only as
 * aligned as the file makes it.
 */
#include <stdio.h>
#include <string.h>

#include "fp8.h"
#include "quant.h"

/* The row held by nibble i of an AWQ word, and the nibble holding row j. */
static const uint8_t AWQ_ORDER[8] = {0, 2, 4, 6, 1, 3, 5, 7};
static const uint8_t AWQ_NIBBLE[8] = {0, 4, 1, 5, 2, 6, 3, 7};

static inline uint32_t ld32(const uint8_t *p) {
    uint32_t u;
    memcpy(&u, p, 4);
    return u;
}

/* Element i of a float tensor (F32/BF16/F16) widened exactly to f32. */
static inline float ld_float(const qwi_tensor *t, int64_t i) {
    const uint8_t *p = t->data;
    switch (t->dtype) {
    case QWI_DTYPE_F32: {
        float f;
        memcpy(&f, p + i * 4, 4);
        return f;
    }
    case QWI_DTYPE_BF16: {
        uint16_t h;
        memcpy(&h, p + i * 2, 2);
        return qwi_bf16_to_f32(h);
    }
    default: {
        uint16_t h;
        memcpy(&h, p + i * 2, 2);
        return qwi_f16_to_f32(h);
    }
    }
}

/* Spread the eight nibbles of u into the eight bytes of the result (byte i
 * = nibble i). */
static inline uint64_t spread_nibbles(uint32_t u) {
    uint64_t t = u;
    t = (t | (t << 16)) & 0x0000ffff0000ffffull;
    t = (t | (t << 8)) & 0x00ff00ff00ff00ffull;
    t = (t | (t << 4)) & 0x0f0f0f0f0f0f0f0full;
    return t;
}

/* Transpose the 8x8 byte matrix a (byte b of a[r] is element (r, b)) in
 * place: three rounds of swapping the off-diagonal halves of 2x2, 4x4 and
 * 8x8 blocks. */
static inline void transpose8x8(uint64_t a[8]) {
    for (int i = 0; i < 8; i += 2) {
        uint64_t t = ((a[i] >> 8) ^ a[i + 1]) & 0x00ff00ff00ff00ffull;
        a[i + 1] ^= t;
        a[i] ^= t << 8;
    }
    for (int i = 0; i < 8; i += 4)
        for (int j = i; j < i + 2; j++) {
            uint64_t t = ((a[j] >> 16) ^ a[j + 2]) & 0x0000ffff0000ffffull;
            a[j + 2] ^= t;
            a[j] ^= t << 16;
        }
    for (int j = 0; j < 4; j++) {
        uint64_t t = ((a[j] >> 32) ^ a[j + 4]) & 0x00000000ffffffffull;
        a[j + 4] ^= t;
        a[j] ^= t << 32;
    }
}

/* ---- the stored code, zero and scale of one element (qwi_qweight_get and
 * the unpackers' edges) ---- */

static inline unsigned code_at(const qwi_qweight *w, int64_t r, int64_t c) {
    const uint8_t *q = w->qweight.data;
    switch (w->method) {
    case QWI_QUANT_AWQ:
        return (ld32(q + (c * (w->n / 8) + r / 8) * 4) >> (4 * AWQ_NIBBLE[r % 8])) & 15u;
    case QWI_QUANT_GPTQ:
        if (w->fmt == QWI_QFMT_U4)
            return (ld32(q + ((c / 8) * w->n + r) * 4) >> (4 * (c % 8))) & 15u;
        return (ld32(q + ((c / 4) * w->n + r) * 4) >> (8 * (c % 4))) & 255u;
    case QWI_QUANT_FP8:
        return q[r * w->k + c];
    default:
        return 0;
    }
}

static inline float zero_at(const qwi_qweight *w, int64_t r, int64_t g) {
    const uint8_t *z = w->qzeros.data;
    unsigned v;
    switch (w->method) {
    case QWI_QUANT_AWQ:
        v = (ld32(z + (g * (w->n / 8) + r / 8) * 4) >> (4 * AWQ_NIBBLE[r % 8])) & 15u;
        break;
    case QWI_QUANT_GPTQ:
        if (w->fmt == QWI_QFMT_U4)
            v = (ld32(z + (g * (w->n / 8) + r / 8) * 4) >> (4 * (r % 8))) & 15u;
        else
            v = (ld32(z + (g * (w->n / 4) + r / 4) * 4) >> (8 * (r % 4))) & 255u;
        break;
    default:
        return 0.0f;
    }
    return (float)((int32_t)v + w->zero_offset);
}

static inline float scale_at(const qwi_qweight *w, int64_t r, int64_t g) {
    if (w->method == QWI_QUANT_FP8)
        return ld_float(&w->scales, (r / w->group_n) * qwi_qweight_groups(w) + g);
    return ld_float(&w->scales, g * w->n + r);
}

/* Number of groups along k (contract in quant.h). */
int64_t qwi_qweight_groups(const qwi_qweight *w) {
    return (w->k + w->group_k - 1) / w->group_k;
}

/* The dequantized element (r, c) (contract in quant.h). */
double qwi_qweight_get(const qwi_qweight *w, int64_t r, int64_t c) {
    int64_t g = c / w->group_k;
    unsigned code = code_at(w, r, c);
    double s = scale_at(w, r, g);
    if (w->fmt == QWI_QFMT_E4M3) return (double)qwi_e4m3_to_f32((uint8_t)code) * s;
    return ((double)code - (double)zero_at(w, r, g)) * s;
}

/* One zero point of every row (contract in quant.h). Both formats pack
 * whole words of zeros along n (n % (32 / bits) == 0, checked at load), so
 * the zeros are uniform exactly when every word is the first and the
 * first's fields (nibbles, or bytes for 8-bit GPTQ) are equal. */
bool qwi_qweight_uniform_zero(const qwi_qweight *w, int32_t *zero) {
    if ((w->method != QWI_QUANT_AWQ && w->method != QWI_QUANT_GPTQ) || !w->qzeros.data) return false;
    const int bits = w->fmt == QWI_QFMT_U8 ? 8 : 4;
    const int64_t words = qwi_qweight_groups(w) * (w->n / (32 / bits));
    const uint8_t *z = w->qzeros.data;
    if (words <= 0) return false;
    const uint32_t first = ld32(z);
    for (int64_t i = 1; i < words; i++)
        if (ld32(z + i * 4) != first) return false;
    const uint32_t field = first & ((1u << bits) - 1);
    for (int sh = bits; sh < 32; sh += bits)
        if (((first >> sh) & ((1u << bits) - 1)) != field) return false;
    *zero = (int32_t)field + w->zero_offset;
    return true;
}

/* ---- unpacking whole rows ---- */

/* AWQ codes of rows [r0, r1): 8x8 blocks (eight input columns of one word
 * column) are spread and transposed whole; the edges go one by one. */
static void unpack_awq(const qwi_qweight *w, int64_t r0, int64_t r1, uint8_t *codes) {
    const uint8_t *q = w->qweight.data;
    const int64_t k = w->k, nw = w->n / 8, k8 = k / 8 * 8;
    for (int64_t j = r0 / 8; j * 8 < r1; j++) {
        int64_t rb = j * 8;
        if (rb < r0 || rb + 8 > r1) { /* partial word column */
            for (int64_t r = QWI_MAX(rb, r0); r < QWI_MIN(rb + 8, r1); r++)
                for (int64_t c = 0; c < k; c++) codes[(r - r0) * k + c] = (uint8_t)code_at(w, r, c);
            continue;
        }
        uint8_t *out = codes + (rb - r0) * k;
        for (int64_t c0 = 0; c0 < k8; c0 += 8) {
            uint64_t a[8];
            for (int i = 0; i < 8; i++) a[i] = spread_nibbles(ld32(q + ((c0 + i) * nw + j) * 4));
            transpose8x8(a); /* a[i]: nibble i of the eight words = row AWQ_ORDER[i] */
            for (int i = 0; i < 8; i++) memcpy(out + AWQ_ORDER[i] * k + c0, &a[i], 8);
        }
        for (int64_t c = k8; c < k; c++)
            for (int i = 0; i < 8; i++) out[i * k + c] = (uint8_t)code_at(w, rb + i, c);
    }
}

/* GPTQ codes of rows [r0, r1): word [wd][r] holds 32/bits consecutive
 * columns of row r, already in order: spread (4-bit) or copy (8-bit). */
static void unpack_gptq(const qwi_qweight *w, int64_t r0, int64_t r1, uint8_t *codes) {
    const uint8_t *q = w->qweight.data;
    const int64_t k = w->k, n = w->n;
    const int per = w->fmt == QWI_QFMT_U4 ? 8 : 4;
    const int64_t kw = k / per;
    /* Rows in tiles of 16 so the reads of one qweight row are 64 bytes. */
    for (int64_t t0 = r0; t0 < r1; t0 += 16) {
        int64_t t1 = QWI_MIN(t0 + 16, r1);
        for (int64_t wd = 0; wd < kw; wd++) {
            const uint8_t *src = q + (wd * n) * 4;
            for (int64_t r = t0; r < t1; r++) {
                uint8_t *dst = codes + (r - r0) * k + wd * per;
                uint32_t u = ld32(src + r * 4);
                if (per == 8) {
                    uint64_t s = spread_nibbles(u);
                    memcpy(dst, &s, 8);
                } else {
                    memcpy(dst, &u, 4); /* little-endian: byte i = code i */
                }
            }
        }
    }
}

/* Unpack rows [r0, r1) (contract in quant.h). */
void qwi_qweight_unpack_rows(const qwi_qweight *w, int64_t r0, int64_t r1, uint8_t *codes,
                             float *scales, float *zeros) {
    const int64_t k = w->k, G = qwi_qweight_groups(w);
    switch (w->method) {
    case QWI_QUANT_AWQ: unpack_awq(w, r0, r1, codes); break;
    case QWI_QUANT_GPTQ: unpack_gptq(w, r0, r1, codes); break;
    case QWI_QUANT_FP8:
        memcpy(codes, (const uint8_t *)w->qweight.data + r0 * k, (size_t)((r1 - r0) * k));
        break;
    default: return;
    }
    for (int64_t r = r0; r < r1; r++)
        for (int64_t g = 0; g < G; g++) {
            scales[(r - r0) * G + g] = scale_at(w, r, g);
            if (zeros) zeros[(r - r0) * G + g] = zero_at(w, r, g);
        }
}

/* ---- finding and validating the tensors ---- */

static void shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

enum { DT_I32 = 1, DT_F8 = 2, DT_FLOAT = 4 };

/* Tensor "<prefix>.<suffix>" into *out with dtype in `dts` (DT_* mask) and
 * shape exactly [d0] (d1 < 0) or [d0, d1]. A missing tensor is FORMAT when
 * required, else QW_OK with out->data NULL. */
static qw_status find_checked(const qwi_st_set *set, const char *prefix, const char *suffix,
                              const char *what, bool required, int dts, int64_t d0, int64_t d1,
                              qwi_tensor *out) {
    char name[256];
    snprintf(name, sizeof name, "%s.%s", prefix, suffix);
    memset(out, 0, sizeof *out);
    const qwi_tensor *t = qwi_st_find(set, name);
    if (!t) {
        if (!required) return QW_OK;
        return qwi_fail(QW_ERR_FORMAT, "tensor %s missing (%s)", name, what);
    }
    bool dt_ok = (t->dtype == QWI_DTYPE_I32 && (dts & DT_I32)) ||
                 (t->dtype == QWI_DTYPE_F8_E4M3 && (dts & DT_F8)) ||
                 (qwi_dtype_is_float(t->dtype) && (dts & DT_FLOAT));
    if (!dt_ok)
        return qwi_fail(QW_ERR_FORMAT, "%s: tensor %s has dtype %s, expected %s (%s)", t->file,
                        name, qwi_dtype_name(t->dtype),
                        dts == DT_I32 ? "I32" : dts == DT_F8 ? "F8_E4M3" : "F32, BF16 or F16",
                        what);
    int64_t want[2] = {d0, d1};
    int wnd = d1 < 0 ? 1 : 2;
    if (t->ndim != wnd || t->shape[0] != d0 || (wnd == 2 && t->shape[1] != d1)) {
        char a[96], e[64];
        shape_str(a, sizeof a, t->ndim, t->shape);
        shape_str(e, sizeof e, wnd, want);
        return qwi_fail(QW_ERR_FORMAT, "%s: tensor %s has shape %s, expected %s (%s)", t->file,
                        name, a, e, what);
    }
    *out = *t;
    return QW_OK;
}

/* Group size of an AWQ/GPTQ linear with k input columns: k for -1; must
 * divide k (and is even: the config checked, k itself for -1). */
static qw_status resolve_group(const qwi_quant_config *qc, const char *prefix, int64_t k,
                               int64_t *gk) {
    *gk = qc->group_size == -1 ? k : qc->group_size;
    if (*gk % 2 != 0 || k % *gk != 0)
        return qwi_fail(QW_ERR_UNSUPPORTED, "linear %s: quantization_config.group_size %d does "
                        "not divide its %lld input columns into even groups", prefix,
                        qc->group_size, (long long)k);
    return QW_OK;
}

static qw_status load_awq(const qwi_st_set *set, const qwi_quant_config *qc, const char *prefix,
                          int64_t n, int64_t k, qwi_qweight *w) {
    qw_status st;
    if (n % 8 != 0)
        return qwi_fail(QW_ERR_UNSUPPORTED, "linear %s: %lld output rows is not a multiple of 8 "
                        "(AWQ packs 8 rows per word)", prefix, (long long)n);
    if ((st = resolve_group(qc, prefix, k, &w->group_k))) return st;
    int64_t G = k / w->group_k;
    if ((st = find_checked(set, prefix, "qweight", "awq packed weight", true, DT_I32, k, n / 8,
                           &w->qweight)) ||
        (st = find_checked(set, prefix, "qzeros", "awq zero points", true, DT_I32, G, n / 8,
                           &w->qzeros)) ||
        (st = find_checked(set, prefix, "scales", "awq scales", true, DT_FLOAT, G, n,
                           &w->scales)))
        return st;
    w->fmt = QWI_QFMT_U4;
    return QW_OK;
}

static qw_status load_gptq(const qwi_st_set *set, const qwi_quant_config *qc, const char *prefix,
                           int64_t n, int64_t k, qwi_qweight *w) {
    qw_status st;
    int per = 32 / qc->bits;
    if (k % per != 0 || n % per != 0)
        return qwi_fail(QW_ERR_UNSUPPORTED, "linear %s: shape [%lld, %lld] is not a multiple of "
                        "%d in both dimensions (GPTQ %d-bit packs %d per word)", prefix,
                        (long long)n, (long long)k, per, qc->bits, per);
    if ((st = resolve_group(qc, prefix, k, &w->group_k))) return st;
    int64_t G = k / w->group_k;
    if ((st = find_checked(set, prefix, "qweight", "gptq packed weight", true, DT_I32, k / per,
                           n, &w->qweight)) ||
        (st = find_checked(set, prefix, "qzeros", "gptq zero points", true, DT_I32, G, n / per,
                           &w->qzeros)) ||
        (st = find_checked(set, prefix, "scales", "gptq scales", true, DT_FLOAT, G, n,
                           &w->scales)) ||
        (st = find_checked(set, prefix, "g_idx", "gptq input column groups", qc->desc_act,
                           DT_I32, k, -1, &w->g_idx)))
        return st;
    /* The kernels take group = c / group_k. An act-order g_idx (any other
     * mapping) would need the input columns permuted: refused. */
    if (w->g_idx.data) {
        const uint8_t *gi = w->g_idx.data;
        for (int64_t c = 0; c < k; c++) {
            int32_t v;
            memcpy(&v, gi + c * 4, 4);
            if (v != c / w->group_k) {
                if (qc->desc_act)
                    return qwi_fail(QW_ERR_UNSUPPORTED, "%s: tensor %s: act-order (desc_act) "
                                    "GPTQ checkpoints are not supported (g_idx[%lld] = %d, not "
                                    "%lld); requantize with desc_act=false", w->g_idx.file,
                                    w->g_idx.name, (long long)c, (int)v,
                                    (long long)(c / w->group_k));
                return qwi_fail(QW_ERR_FORMAT, "%s: tensor %s: g_idx[%lld] = %d, expected %lld "
                                "(input column / group_size, desc_act is false)", w->g_idx.file,
                                w->g_idx.name, (long long)c, (int)v, (long long)(c / w->group_k));
            }
        }
    }
    w->fmt = qc->bits == 4 ? QWI_QFMT_U4 : QWI_QFMT_U8;
    w->zero_offset = qc->zero_offset;
    return QW_OK;
}

static qw_status load_fp8(const qwi_st_set *set, const qwi_quant_config *qc, const char *prefix,
                          int64_t n, int64_t k, qwi_qweight *w) {
    qw_status st;
    w->group_k = qc->group_size;
    w->group_n = qc->block_n;
    if ((st = find_checked(set, prefix, "weight", "fp8 weight", true, DT_F8, n, k,
                           &w->qweight)) ||
        (st = find_checked(set, prefix, "weight_scale_inv", "fp8 block scales of an F8_E4M3 "
                           "weight", true, DT_FLOAT, (n + w->group_n - 1) / w->group_n,
                           (k + w->group_k - 1) / w->group_k, &w->scales)))
        return st;
    w->fmt = QWI_QFMT_E4M3;
    return QW_OK;
}

/* Find and validate linear `prefix` (contract in quant.h). */
qw_status qwi_quant_load_linear(const qwi_st_set *set, const qwi_quant_config *qc,
                                const char *prefix, int64_t n, int64_t k, qwi_qweight *out) {
    qwi_qweight w;
    memset(&w, 0, sizeof w);
    w.n = n;
    w.k = k;
    w.group_n = 1;
    char name[256];
    snprintf(name, sizeof name, "%s.weight", prefix);
    const qwi_tensor *plain = qwi_st_find(set, name);
    /* A module the quantizer left alone (modules_to_not_convert, ignored
     * layers) ships a float "<prefix>.weight" and nothing else. */
    bool is_plain = plain && qwi_dtype_is_float(plain->dtype);
    qw_status st = QW_OK;
    switch (qc->method) {
    case QWI_QUANT_NONE:
        is_plain = true;
        break;
    case QWI_QUANT_FP8:
        if (!is_plain) st = load_fp8(set, qc, prefix, n, k, &w);
        break;
    case QWI_QUANT_AWQ:
    case QWI_QUANT_GPTQ:
        snprintf(name, sizeof name, "%s.qweight", prefix);
        if (is_plain && qwi_st_find(set, name)) is_plain = false;
        if (!is_plain)
            st = qc->method == QWI_QUANT_AWQ ? load_awq(set, qc, prefix, n, k, &w)
                                             : load_gptq(set, qc, prefix, n, k, &w);
        break;
    }
    if (st != QW_OK) return st;
    if (is_plain) {
        memset(&w, 0, sizeof w);
        w.method = QWI_QUANT_NONE;
        w.n = n;
        w.k = k;
    } else {
        w.method = qc->method;
    }
    *out = w;
    return QW_OK;
}
