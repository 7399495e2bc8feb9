/*
 * qpanel.c - packing quantized weights into the layout of qpanel.h.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/q4i.h"
#include "cpu/qpanel.h"
#include "fp8.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "qpanel.h's code fields are little-endian lanes");

static size_t align64(size_t v) { return (v + 63) & ~(size_t)63; }

/* Whether the weight keeps its zero points as integers (zeros_i) and may
 * keep f16 scales (qpanel.h): the integer kernels' layout. */
static bool narrow(qwi_qfmt fmt, qwi_qpanel_layout layout) {
    return fmt != QWI_QFMT_E4M3 && layout == QWI_QPANEL_PAIR;
}

/* Whether the weight keeps one scale a panel and group (qpanel.h). */
static bool per_panel(qwi_qfmt fmt, qwi_qpanel_layout layout, qwi_qpanel_form form) {
    return fmt == QWI_QFMT_E4M3 && layout == QWI_QPANEL_PAIR && form.scales_per_panel;
}

/* Byte offsets of the scales and zeros and the total, or false on overflow. */
static bool sizes(qwi_qfmt fmt, qwi_qpanel_layout layout, int64_t n, int64_t k, int64_t group_k,
                  qwi_qpanel_form form, size_t *scales_at, size_t *zeros_at, size_t *total) {
    if (n <= 0 || k <= 0 || group_k < 2 || group_k % 2 != 0) return false;
    if (fmt != QWI_QFMT_U4 && fmt != QWI_QFMT_U8 && fmt != QWI_QFMT_E4M3) return false;
    if (layout != QWI_QPANEL_SEQ && layout != QWI_QPANEL_PAIR) return false;
    /* fast-mode int4/int8 sums must stay exact in int32 (cpu/q4i.h) */
    if (fmt != QWI_QFMT_E4M3 && layout == QWI_QPANEL_PAIR && !qwi_q4i_qmax(group_k, fmt))
        return false;
    const size_t np = (size_t)QWI_DIV_UP(n, QWI_QPANEL), G = (size_t)QWI_DIV_UP(k, group_k);
    const bool nw = narrow(fmt, layout);
    const size_t sc_bytes = nw && form.scales_f16 ? 2 : 4;
    const size_t sc_slots = per_panel(fmt, layout, form) ? 1 : 16;
    const size_t z_bytes = nw ? (size_t)qwi_qpanel_zero_bytes(fmt) : 4;
    const bool no_zeros = fmt == QWI_QFMT_E4M3 || (nw && form.zero_uniform);
    size_t codes, sc, zs = 0;
    if (__builtin_mul_overflow(np, (size_t)qwi_qpanel_panel_bytes(fmt, k), &codes) ||
        __builtin_mul_overflow(np, G, &sc) || __builtin_mul_overflow(sc, sc_slots * sc_bytes, &sc))
        return false;
    if (!no_zeros &&
        (__builtin_mul_overflow(np, G, &zs) || __builtin_mul_overflow(zs, 16 * z_bytes, &zs)))
        return false;
    *scales_at = align64(codes);
    *zeros_at = *scales_at + align64(sc);
    *total = *zeros_at + align64(zs);
    return *total >= codes;
}

size_t qwi_qpanel_bytes_for(qwi_qfmt fmt, qwi_qpanel_layout layout, int64_t n, int64_t k,
                            int64_t group_k, qwi_qpanel_form form) {
    size_t s, z, t;
    return sizes(fmt, layout, n, k, group_k, form, &s, &z, &t) ? t : 0;
}

qwi_qpanel_form qwi_qpanel_form_of(const qwi_qweight *w) {
    qwi_qpanel_form f = { .scales_f16 = w->scales.dtype == QWI_DTYPE_F16,
                          .scales_per_panel = w->fmt == QWI_QFMT_E4M3 && w->group_n > 0 &&
                                              w->group_n % QWI_QPANEL == 0 };
    f.zero_uniform = qwi_qweight_uniform_zero(w, &f.zero_all);
    return f;
}

/* w's form where the layout narrows anything (PAIR); SEQ ignores the form,
 * so it is not computed (qwi_qpanel_form_of scans qzeros). */
static qwi_qpanel_form form_for(const qwi_qweight *w, qwi_qpanel_layout layout) {
    return layout == QWI_QPANEL_PAIR ? qwi_qpanel_form_of(w) : (qwi_qpanel_form){ 0 };
}

size_t qwi_qpanel_bytes(const qwi_qweight *w, qwi_qpanel_layout layout) {
    if (!w || w->method == QWI_QUANT_NONE) return 0;
    return qwi_qpanel_bytes_for(w->fmt, layout, w->n, w->k, w->group_k, form_for(w, layout));
}

float qwi_qpanel_e4m3_c(uint8_t b) { return qwi_e4m3_to_f32(b) * 0x1p-8f; }

float qwi_qpanel_c(const qwi_qpanel *w, int64_t n, int64_t k) {
    const int64_t p = n / QWI_QPANEL;
    const int r = (int)(n % QWI_QPANEL);
    int64_t byte;
    int shift;
    qwi_qpanel_code_pos(w, p, k, r, &byte, &shift);
    const uint8_t code = w->codes[byte];
    if (w->fmt == QWI_QFMT_E4M3) return qwi_qpanel_e4m3_c(code);
    const int c = w->fmt == QWI_QFMT_U4 ? (code >> shift) & 0xf : code;
    return (float)(c - qwi_qpanel_zero(w, (p * w->ngroups + k / w->group_k) * 16 + r));
}

double qwi_qpanel_get(const qwi_qpanel *w, int64_t n, int64_t k) {
    const int64_t p = n / QWI_QPANEL, r = n % QWI_QPANEL, g = k / w->group_k;
    return (double)qwi_qpanel_c(w, n, k) * (double)qwi_qpanel_scale(w, (p * w->ngroups + g) * 16 + r);
}

/* Describe a packed weight at dst and zero all of it (pack_panel ORs the
 * code fields in, interleaved panels sharing their bytes' range, and
 * leaves a last panel's padded slots at scale 0 and zero point 0; a
 * uniform zero point or one scale a panel they share, against scale 0 or
 * codes 0, so their products stay 0). */
static void describe(qwi_qfmt fmt, qwi_qpanel_layout layout, int64_t n, int64_t k, int64_t group_k,
                     qwi_qpanel_form form, void *dst, qwi_qpanel *out) {
    size_t s_at = 0, z_at = 0, total = 0;   /* sizes() was checked by the caller */
    sizes(fmt, layout, n, k, group_k, form, &s_at, &z_at, &total);
    const bool nw = narrow(fmt, layout), f16 = nw && form.scales_f16;
    const bool uniform = nw && form.zero_uniform;
    char *sp = (char *)dst + s_at, *zp = (char *)dst + z_at;
    *out = (qwi_qpanel){ .fmt = fmt, .layout = layout, .n = n, .k = k, .group_k = group_k,
                         .ngroups = QWI_DIV_UP(k, group_k), .codes = dst,
                         .scales = f16 ? NULL : (const float *)(void *)sp,
                         .scales_h = f16 ? (const uint16_t *)(void *)sp : NULL,
                         .scale_per_panel = per_panel(fmt, layout, form),
                         .zeros = fmt == QWI_QFMT_E4M3 || nw ? NULL : (const float *)(void *)zp,
                         .zeros_i = nw && !uniform ? (const uint8_t *)zp : NULL,
                         .zero_all = uniform ? form.zero_all : 0 };
    memset(dst, 0, total);   /* codes ORed in below; padded slots' scales and zeros 0 */
}

/* *out = the f16 bits of v and true if v is an f16 value (it survives the
 * round trip; infinities and NaN do: an F16 tensor can hold them, and with
 * QW_OPT_CHECK_WEIGHTS off they reach the kernels as they would in f32),
 * else false. */
static bool f16_of(float v, uint16_t *out) {
    *out = qwi_f32_to_f16(v);
    return qwi_f16_to_f32(*out) == v || isnan(v);
}

/* What makes an entry unpackable. */
typedef enum bad_entry {
    BAD_SCALE_NOT_F16,      /* a scale that scales_h cannot hold           */
    BAD_ZERO_RANGE,         /* a zero point outside the contract           */
    BAD_ZERO_NOT_UNIFORM,   /* a zero point other than zero_all            */
    BAD_SCALE_NOT_PANEL     /* a scale other than its panel's first row's  */
} bad_entry;

/* Pack panel p from rows [16p, 16p + rows) given as codes [rows][k] and
 * scales/zeros [rows][G]; the rest of the panel is zero (describe()).
 * Returns the first bad row (>= 0) or -1: *bad_g its group, *why what is
 * wrong with it. */
static int64_t pack_panel(const qwi_qpanel *d, int64_t p, int64_t rows, const uint8_t *codes,
                          const float *scales, const float *zeros, int64_t *bad_g,
                          bad_entry *why) {
    const int64_t k = d->k, G = d->ngroups;
    uint8_t *packed = (uint8_t *)d->codes;   /* zeroed by describe() */
    const float smul = d->fmt == QWI_QFMT_E4M3 ? 0x1p8f : 1.0f;
    const float zmax = d->fmt == QWI_QFMT_U4 ? 16.0f : 256.0f;
    /* where each column of a block goes, per slot (the layout's in-block
     * part is the same in every block) */
    const int64_t kb = qwi_qpanel_kb(d->fmt);
    int64_t in_byte[16][8];
    int in_shift[16][8];
    for (int r = 0; r < QWI_QPANEL; r++)
        for (int64_t kk = 0; kk < kb; kk++)
            qwi_qpanel_code_in_block(d->fmt, d->layout, kk, r, &in_byte[r][kk], &in_shift[r][kk]);
    for (int64_t blk = 0; blk * kb < k; blk++) {
        uint8_t *b = packed + qwi_qpanel_block_at(d, p, blk);
        const int64_t c0 = blk * kb, kn = QWI_MIN(kb, k - c0);
        for (int r = 0; r < rows; r++) {
            const uint8_t *cr = codes + r * k + c0;
            for (int64_t kk = 0; kk < kn; kk++) {
                const uint8_t v = d->fmt == QWI_QFMT_U4 ? (uint8_t)(cr[kk] & 0xf) : cr[kk];
                b[in_byte[r][kk]] |= (uint8_t)(v << in_shift[r][kk]);
            }
        }
    }
    for (int r = 0; r < rows; r++) {
        for (int64_t g = 0; g < G; g++) {
            const int64_t i = (p * G + g) * 16 + r;
            const float sc = scales[r * G + g] * smul;
            if (d->scale_per_panel) {   /* row 0 stores it, the others must match */
                float *one = (float *)d->scales + p * G + g;
                if (r == 0) *one = sc;
                else if (memcmp(one, &sc, sizeof sc) != 0) {
                    *bad_g = g;
                    *why = BAD_SCALE_NOT_PANEL;
                    return r;
                }
            } else if (d->scales_h) {
                uint16_t h = 0;
                if (!f16_of(sc, &h)) {
                    *bad_g = g;
                    *why = BAD_SCALE_NOT_F16;
                    return r;
                }
                ((uint16_t *)d->scales_h)[i] = h;
            } else {
                ((float *)d->scales)[i] = sc;
            }
            if (d->fmt == QWI_QFMT_E4M3) continue;
            const float z = zeros[r * G + g];
            if (!(z >= 0.0f && z <= zmax && z == floorf(z))) {
                *bad_g = g;
                *why = BAD_ZERO_RANGE;
                return r;
            }
            if (d->zeros) {
                ((float *)d->zeros)[i] = z;
            } else if (!d->zeros_i) {   /* uniform: none stored */
                if (z != (float)d->zero_all) {
                    *bad_g = g;
                    *why = BAD_ZERO_NOT_UNIFORM;
                    return r;
                }
            } else if (d->fmt == QWI_QFMT_U8) {
                uint8_t *zi = (uint8_t *)d->zeros_i + 2 * i;
                zi[0] = (uint8_t)((int)z & 0xff);
                zi[1] = (uint8_t)((int)z >> 8);
            } else {
                ((uint8_t *)d->zeros_i)[i] = (uint8_t)z;
            }
        }
    }
    return -1;
}

/* Fail (returns false, with a qwi_fail message) for the bad row found by
 * pack_panel: value v of the scale (BAD_SCALE_*) or zero point
 * (BAD_ZERO_*) at (row, g) of tensor name, packed as d. */
static bool fail_bad_entry(const char *name, const qwi_qpanel *d, int64_t row, int64_t g,
                           bad_entry why, float v) {
    if (why == BAD_SCALE_NOT_F16)
        qwi_fail(QW_ERR_INVALID_ARGUMENT, "qpanel: %s: row %lld, group %lld: scale %g is not an "
                 "f16 value", name, (long long)row, (long long)g, (double)v);
    else if (why == BAD_SCALE_NOT_PANEL)
        qwi_fail(QW_ERR_INVALID_ARGUMENT, "qpanel: %s: row %lld, group %lld: scale %g differs "
                 "from its 16-row panel's first (one scale a panel was promised)", name,
                 (long long)row, (long long)g, (double)v);
    else if (why == BAD_ZERO_NOT_UNIFORM)
        qwi_fail(QW_ERR_INVALID_ARGUMENT, "qpanel: %s: row %lld, group %lld: zero point %g is not "
                 "the weight's uniform zero point %d", name, (long long)row, (long long)g,
                 (double)v, (int)d->zero_all);
    else
        qwi_fail(QW_ERR_UNSUPPORTED, "qpanel: %s: row %lld, group %lld: zero point %g is not an "
                 "integer in [0, %d]", name, (long long)row, (long long)g, (double)v,
                 d->fmt == QWI_QFMT_U4 ? 16 : 256);
    return false;
}

bool qwi_qpanel_pack_codes(qwi_qfmt fmt, qwi_qpanel_layout layout, int64_t n, int64_t k,
                           int64_t group_k, const uint8_t *codes, const float *scales,
                           const float *zeros, qwi_qpanel_form form, void *dst, qwi_qpanel *out) {
    if (!qwi_qpanel_bytes_for(fmt, layout, n, k, group_k, form) ||
        (fmt != QWI_QFMT_E4M3 && !zeros)) {
        qwi_fail(QW_ERR_INVALID_ARGUMENT, "qpanel: cannot pack a [%lld, %lld] weight of format "
                 "%d with groups of %lld", (long long)n, (long long)k, (int)fmt, (long long)group_k);
        return false;
    }
    qwi_qpanel d;
    describe(fmt, layout, n, k, group_k, form, dst, &d);
    const int64_t G = d.ngroups;
    for (int64_t p = 0; p * QWI_QPANEL < n; p++) {
        const int64_t r0 = p * QWI_QPANEL, rows = QWI_MIN((int64_t)QWI_QPANEL, n - r0);
        int64_t bad_g = 0;
        bad_entry why = BAD_ZERO_RANGE;
        int64_t bad = pack_panel(&d, p, rows, codes + r0 * k, scales + r0 * G,
                                 zeros ? zeros + r0 * G : NULL, &bad_g, &why);
        if (bad >= 0) {
            const int64_t i = (r0 + bad) * G + bad_g;
            const bool scale = why == BAD_SCALE_NOT_F16 || why == BAD_SCALE_NOT_PANEL;
            return fail_bad_entry("weight", &d, r0 + bad, bad_g, why, scale ? scales[i] : zeros[i]);
        }
    }
    *out = d;
    return true;
}

bool qwi_qpanel_pack(const qwi_qweight *w, qwi_qpanel_layout layout, void *dst, qwi_qpanel *out) {
    const char *name = w && w->qweight.name ? w->qweight.name : "quantized weight";
    if (!qwi_qpanel_bytes(w, layout)) {
        qwi_fail(QW_ERR_INVALID_ARGUMENT, "qpanel: %s: cannot be packed (method %d, [%lld, %lld], "
                 "group %lld)", name, w ? (int)w->method : -1, w ? (long long)w->n : 0,
                 w ? (long long)w->k : 0, w ? (long long)w->group_k : 0);
        return false;
    }
    const int64_t n = w->n, k = w->k, G = qwi_qweight_groups(w);
    uint8_t *codes = malloc((size_t)(QWI_QPANEL * k));
    float *sz = malloc((size_t)(2 * QWI_QPANEL * G) * sizeof(float));
    if (!codes || !sz) {
        free(codes);
        free(sz);
        qwi_fail(QW_ERR_OUT_OF_MEMORY, "qpanel: %s: packing scratch allocation failed", name);
        return false;
    }
    float *scales = sz, *zeros = sz + QWI_QPANEL * G;
    qwi_qpanel d;
    describe(w->fmt, layout, n, k, w->group_k, form_for(w, layout), dst, &d);
    bool ok = true;
    for (int64_t p = 0; p * QWI_QPANEL < n && ok; p++) {
        const int64_t r0 = p * QWI_QPANEL, rows = QWI_MIN((int64_t)QWI_QPANEL, n - r0);
        for (int64_t i = 0; i < rows * G; i++) zeros[i] = 0.0f;
        qwi_qweight_unpack_rows(w, r0, r0 + rows, codes, scales, zeros);
        int64_t bad_g = 0;
        bad_entry why = BAD_ZERO_RANGE;
        int64_t bad = pack_panel(&d, p, rows, codes, scales,
                                 w->fmt == QWI_QFMT_E4M3 ? NULL : zeros, &bad_g, &why);
        if (bad >= 0) {
            const int64_t i = bad * G + bad_g;
            const bool scale = why == BAD_SCALE_NOT_F16 || why == BAD_SCALE_NOT_PANEL;
            ok = fail_bad_entry(name, &d, r0 + bad, bad_g, why, scale ? scales[i] : zeros[i]);
        }
    }
    free(codes);
    free(sz);
    if (ok) *out = d;
    return ok;
}
