/*
 * weights_check.c - NaN/infinity scan of weight tensors at load (see
 * weights_check.h).
 *
 * An IEEE value is NaN or infinite exactly when all its exponent bits are
 * set. The scan tests that on 64-bit words holding four bf16/f16 or two f32
 * lanes at once: per lane, x = (bits & E) ^ E is 0 exactly for a non-finite
 * value and at most E otherwise, so x + (2^(w-1) - 1) carries into the lane's
 * top bit exactly when x != 0, and never into the next lane. ANDing those
 * top bits over a block of words leaves one clear iff the block holds a
 * non-finite value; only such a block is then searched element by element.
 * No float is ever loaded, so a signalling NaN raises nothing.
 */
#include <stdio.h>
#include <string.h>

#include "weights_check.h"

typedef struct lanes {
    uint64_t exp;     /* exponent bits of every lane         */
    uint64_t carry;   /* 2^(w-1) - 1 in every lane           */
    uint64_t top;     /* 2^(w-1) in every lane: the verdicts */
    uint32_t elem_exp, elem_mant;   /* the same for one element */
    unsigned size;    /* bytes per element                   */
} lanes;

static lanes lanes_of(qwi_dtype dt) {
    switch (dt) {
    case QWI_DTYPE_F32:
        return (lanes){0x7f8000007f800000ull, 0x7fffffff7fffffffull, 0x8000000080000000ull,
                       0x7f800000u, 0x007fffffu, 4};
    case QWI_DTYPE_F16:
        return (lanes){0x7c007c007c007c00ull, 0x7fff7fff7fff7fffull, 0x8000800080008000ull,
                       0x7c00u, 0x03ffu, 2};
    case QWI_DTYPE_F8_E4M3:
        /* No infinities: S.1111.111 is NaN, so all seven low bits set is
         * the "exponent" test, and every hit is a NaN (value_class). */
        return (lanes){0x7f7f7f7f7f7f7f7full, 0x7f7f7f7f7f7f7f7full, 0x8080808080808080ull,
                       0x7fu, 0x7fu, 1};
    case QWI_DTYPE_BF16:
    default:
        return (lanes){0x7f807f807f807f80ull, 0x7fff7fff7fff7fffull, 0x8000800080008000ull,
                       0x7f80u, 0x007fu, 2};
    }
}

static uint32_t elem_bits(const unsigned char *p, unsigned size) {
    if (size == 4) {
        uint32_t u;
        memcpy(&u, p, 4);
        return u;
    }
    if (size == 1) return *p;
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

/* First non-finite element in p[0..n) elements, or -1. */
static int64_t scan_elems(const unsigned char *p, size_t n, const lanes *L) {
    for (size_t i = 0; i < n; i++)
        if ((elem_bits(p + i * L->size, L->size) & L->elem_exp) == L->elem_exp) return (int64_t)i;
    return -1;
}

/* Words per block: 4 KB, small enough that re-reading a hit block costs
 * nothing, large enough that the per-block test is amortised. */
#define QWI_WCHECK_BLOCK_WORDS 512

/* First non-finite element of t, or -1 (contract in weights_check.h). */
int64_t qwi_weights_first_nonfinite(const qwi_tensor *t) {
    /* I32 tensors (packed AWQ/GPTQ codes, g_idx) hold no floats. */
    if (!t || !t->data || t->nbytes == 0 || t->dtype == QWI_DTYPE_I32) return -1;
    const lanes L = lanes_of(t->dtype);
    const unsigned char *p = t->data;
    size_t nelem = t->nbytes / L.size, per_word = 8 / L.size;
    size_t nwords = t->nbytes / 8;
    for (size_t w0 = 0; w0 < nwords; w0 += QWI_WCHECK_BLOCK_WORDS) {
        size_t w1 = w0 + QWI_WCHECK_BLOCK_WORDS < nwords ? w0 + QWI_WCHECK_BLOCK_WORDS : nwords;
        uint64_t acc = L.top;
        for (size_t w = w0; w < w1; w++) {
            uint64_t u;
            memcpy(&u, p + w * 8, 8);
            acc &= ((u & L.exp) ^ L.exp) + L.carry;
        }
        if ((acc & L.top) != L.top) {
            int64_t i = scan_elems(p + w0 * 8, (w1 - w0) * per_word, &L);
            if (i >= 0) return (int64_t)(w0 * per_word) + i;
        }
    }
    size_t done = nwords * per_word;
    int64_t i = scan_elems(p + done * L.size, nelem - done, &L);
    return i >= 0 ? (int64_t)done + i : -1;
}

static const char *value_class(const qwi_tensor *t, int64_t i) {
    const lanes L = lanes_of(t->dtype);
    uint32_t b = elem_bits((const unsigned char *)t->data + (size_t)i * L.size, L.size);
    if (b & L.elem_mant) return "NaN";
    return b >> (8 * L.size - 1) ? "-inf" : "+inf";
}

/* "[r, c]" coordinates of flat index i in t's shape, for the message. */
static void coords(const qwi_tensor *t, int64_t i, char *buf, size_t cap) {
    int64_t idx[QWI_MAX_DIMS] = {0};
    for (int d = t->ndim - 1; d >= 0; d--) {
        int64_t n = t->shape[d] > 0 ? t->shape[d] : 1;
        idx[d] = i % n;
        i /= n;
    }
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < t->ndim && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", d ? ", " : "", (long long)idx[d]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

/* Scan every tensor of set (contract in weights_check.h). */
qw_status qwi_weights_check(const qwi_st_set *set, qwi_progress *progress) {
    size_t n = qwi_st_count(set);
    for (size_t k = 0; k < n; k++) {
        const qwi_tensor *t = qwi_st_at(set, k);
        int64_t i = qwi_weights_first_nonfinite(t);
        if (i < 0) {
            qw_status st = qwi_progress_add(progress, t->nbytes);
            if (st != QW_OK) return st;
            continue;
        }
        char at[128];
        coords(t, i, at, sizeof at);
        return qwi_fail(QW_ERR_FORMAT,
                        "%s: tensor %s: element %lld %s is %s (corrupt weights; "
                        "QW_OPT_CHECK_WEIGHTS=0 skips this check)",
                        t->file, t->name, (long long)i, at, value_class(t, i));
    }
    return QW_OK;
}
