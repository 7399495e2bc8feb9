/*
 * qpanel.h - the "quantized panel" layout of a quantized linear layer
 * (lib/quant.h: AWQ/GPTQ int4/int8 codes with per-group scales and zero
 * points, Qwen3-FP8 block-scaled e4m3): what the CPU backend repacks such a
 * weight into at load, for the matmul_qf32 / matmul_qpair kernels of
 * kernels.h.
 *
 * Why: batch-1 decode streams every weight once per token, so its speed is
 * the bytes it reads. The codes stay 4 or 8 bits here and are widened in
 * registers, next to the FMAs; as in cpu/panel.h and cpu/pairpanel.h, the
 * codes of 16 consecutive outputs ("a panel") for the same k are adjacent,
 * so one vector load feeds 16 output lanes and M = 1 streams the weights in
 * one pass (the same layout serves GEMV and GEMM: batched == alone). The
 * scales and zero points are stored per panel lane at packing (f32, or
 * f16 and integers in the integer layout, below), so the kernels load them
 * as vectors; where a weight's values repeat (symmetric zero points, FP8
 * blocks of whole panels) the fast layout stores one and the kernels
 * broadcast it.
 *
 * Layout of an [N][K] weight: ceil(N/16) panels, panel p = rows 16p..16p+15
 * (slot r = row 16p + r; rows past N have code 0, scale 0, zero 0). Each
 * panel's codes are blocks of KB input columns, qwi_qpanel_panel_bytes()
 * per panel (codes past K are 0 and never read with an activation). Where
 * the blocks lie (qwi_qpanel_block_at, the one definition):
 *   SEQ: panel after panel, block after block.
 *   PAIR: panels in groups of 4 (QWI_QPANEL_GROUP; the last group holds
 *     what is left), a group's codes where its panels' would be, but cut in
 *     64-byte lines (one U4/U8 block, two E4M3 blocks) and line l of each
 *     of its gp panels in turn: line l of the group's i-th panel at
 *     (l * gp + i) * 64 from the group's first byte. Why: batch-1 decode
 *     reads four panels at a time, and on a Zen 4 four separate 8 KiB
 *     panel streams (int4, K = 1024) read 30-32 GB/s where one 32 KiB
 *     stream of the same bytes reads 42-46 (qw-qbench --k 1024 --n 6144
 *     against --k 4096 --n 1536); interleaved, a group is one stream.
 *   U4/U8 (KB = 8 / 4; w = 4 / 8 bits): a block is 16 little-endian 32-bit
 *     lanes of F = 32/w fields, field i = bits [w*i, w*i+w) of the lane.
 *     SEQ:  lane l, field i = code(slot l, k0 + i).
 *     A field shifted down, masked and OR-ed into 2^23's bits is the f32
 *     2^23 + code (one vpternlogd); subtracting 2^23 + zero gives code - zero
 *     exactly.
 *     PAIR (U4 and U8, P = F/2 pairs per block: 4 / 2): lane l, field i =
 *     code(slot l, k0 + 2*(i mod P) + (i >= P)): the low 16 bits of lane l
 *     hold slot l's even columns of the block's P pairs, the high 16 bits
 *     its odd ones, so pair j of the panel is, per 16-bit half, the field
 *     shifted down by w*j and masked to w bits - the int16 pairs that the
 *     fast mode's integer matmul (cpu/q4i.h) feeds to vpmaddwd / vpdpwssd,
 *     in one or two operations. No float kernel reads U4/U8 in PAIR.
 *   E4M3 (KB = 2, one k pair, 32 bytes):
 *     SEQ:  16-bit word r = code(r, k0) | code(r, k0+1) << 8.
 *     PAIR: code(slot s, k0 + t) is byte (w / 8) * 16 + (s < 8 ? 0 : 8) + w % 8
 *           with w = 2 * (s % 8) + t: vpunpck{l,h}bw of the 32 bytes against
 *           zero then give slots 0-7 and slots 8-15, each as 16 words in
 *           (slot, k even|odd) order.
 *     An e4m3 byte b in the high half of a 16-bit word w = b << 8 becomes
 *     the f16 bits of its value times 2^-8 as (w >>arith 1) & 0xbf80 (sign
 *     to bit 15, exponent and mantissa shifted in place, f16 bias 15 = e4m3
 *     bias 7 + 8), exact for e4m3 subnormals too (f16 subnormals); vcvtph2ps
 *     widens that to f32. The kernels therefore use c' = value * 2^-8 and a
 *     scale' = scale * 2^8 (stored that way here).
 * scales: [panel][group][16] f32, slot order (E4M3: times 2^8, exact);
 *   PAIR U4/U8 whose scales are all f16 values (scales_f16 at packing: a
 *   checkpoint's F16 scales tensor, as GPTQ and AWQ write it): scales_h,
 *   the same in f16 bits, and scales NULL.
 *   PAIR E4M3 whose 16 slots share each group's scale (scales_per_panel
 *   at packing: FP8 blocks of a multiple of 16 rows, as Qwen's 128 x 128,
 *   hold whole panels): scale_per_panel, scales [panel][group] f32, one
 *   value a panel and group (qwi_qpanel_group_scales expands them). Why:
 *   the 16 copies were 64 of the 2,112 bytes a 128-column group costs a
 *   panel in decode; one is 4 (2.8% fewer bytes per FP8 decode step).
 * zeros (U4/U8): SEQ: zeros, [panel][group][16] f32 in slot order; PAIR:
 *   zeros_i, the same as integers, a byte each (U4) or a little-endian
 *   uint16 each (U8, whose zero point may be 256). NULL where unused.
 *   PAIR whose zero points are all one value (zero_uniform at packing: a
 *   symmetric GPTQ checkpoint's 8 or 128, qwi_qweight_uniform_zero):
 *   none stored, zeros_i NULL and zero_all that value.
 *   Zero points must be integers in [0, 2^bits] (GPTQ v1 adds 1 to a
 *   stored zero): packing refuses anything else.
 *   Why PAIR keeps them narrow: batch-1 decode reads a group's scales and
 *   zero points with its codes, and as two f32 per slot they were 128 of
 *   the 1152 bytes an int4 group of 128 columns costs a panel; f16 scales
 *   and byte zeros make that 48 (7% fewer bytes per decode step), and a
 *   symmetric checkpoint's 32 (1.5% fewer again; int8: 64 of 2112). The
 *   values are the same, so the contract's bits do not change.
 *
 * Arithmetic contract (every table, every M, N, thread split): per output
 * (m, n), with c(n, k) = code - zero (U4/U8) or c' (E4M3, above), exact in
 * f32 and in bf16 (at most 8 significant bits):
 *   total = 0
 *   for each group g in order (k in [g*group_k, min(K, (g+1)*group_k))):
 *     exact (SEQ, matmul_qf32): acc = 0; for k in order:
 *        acc = fma(x[m][k], c(n,k), acc)
 *     fast (PAIR, matmul_qpair, E4M3, x = bf16 pairs, c exact in
 *        bf16): acc = 0; for each pair j of the group in order:
 *        acc = acc + xo*co, then acc = acc + xe*ce (o = k 2j+1, e = k 2j;
 *        vdpbf16ps's lane, products exact in f32)
 *     total = fma(acc, scale(n, g), total)
 * The fast mode's U4 and U8 (PAIR layout too) have their own integer
 * contract, cpu/q4i.h: activations quantized to int16 per group, exact
 * int32 dots.
 *   v = bias ? total + bias[n] : total; out = accumulate ? out + v : v.
 * The generic table does exactly this with fmaf(); the ISA tables with
 * vfmadd / vdpbf16ps in vector lanes. All give the same bits as long as no
 * product or partial sum is subnormal in f32 (vdpbf16ps flushes those;
 * cpu/pairpanel.h flushes subnormal activations for every table). The E4M3
 * scaling by 2^-8 / 2^8 changes no bit under the same condition.
 */
#ifndef QWI_CPU_QPANEL_H
#define QWI_CPU_QPANEL_H

#include "common.h"
#include "dtype.h"
#include "quant.h"

typedef enum qwi_qpanel_layout { QWI_QPANEL_SEQ = 0,   /* exact mode: f32 activations      */
                                 QWI_QPANEL_PAIR = 1   /* fast mode: activation pairs       */
} qwi_qpanel_layout;

typedef struct qwi_qpanel {            /* a qwi_qweight repacked into 16-output panels */
    qwi_qfmt fmt;
    qwi_qpanel_layout layout;
    int64_t n, k, group_k, ngroups;
    const uint8_t *codes;              /* [panel][qwi_qpanel_panel_bytes]          */
    const float *scales;               /* [panel][group][16] f32 ([panel][group] where
                                          scale_per_panel), or NULL: scales_h        */
    bool scale_per_panel;              /* PAIR E4M3: one scale a panel and group     */
    const uint16_t *scales_h;          /* [panel][group][16] f16 bits, or NULL      */
    const float *zeros;                /* SEQ U4/U8: [panel][group][16]; else NULL  */
    const uint8_t *zeros_i;            /* PAIR U4/U8: [panel][group][16] integers of
                                          qwi_qpanel_zero_bytes each; else NULL      */
    int32_t zero_all;                  /* PAIR U4/U8 with zeros_i NULL: every zero point;
                                          else 0                                     */
} qwi_qpanel;

/* What a weight's values let the PAIR layout store narrower than an f32
 * per slot (above); {0} stores every scale and zero point. SEQ ignores it. */
typedef struct qwi_qpanel_form {
    bool scales_f16;      /* U4/U8: every scale is an f16 value: scales_h    */
    bool zero_uniform;    /* U4/U8: every zero point is zero_all: none stored */
    int32_t zero_all;
    bool scales_per_panel;   /* E4M3: the 16 rows of each panel share each
                                group's scale: one stored (scale_per_panel) */
} qwi_qpanel_form;

#define QWI_QPANEL 16
#define QWI_QPANEL_GROUP 4   /* panels interleaved line by line (PAIR layout) */

/* Input columns per code block: 8 (U4), 4 (U8), 2 (E4M3). */
static inline int64_t qwi_qpanel_kb(qwi_qfmt fmt) {
    return fmt == QWI_QFMT_U4 ? 8 : fmt == QWI_QFMT_U8 ? 4 : 2;
}

/* Bytes of one code block: 64 (U4, U8), 32 (E4M3). */
static inline int64_t qwi_qpanel_block_bytes(qwi_qfmt fmt) { return fmt == QWI_QFMT_E4M3 ? 32 : 64; }

/* Bytes of one panel's codes for K input columns: whole 64-byte lines
 * (an E4M3 panel of an odd number of pairs ends in a zero block). */
static inline int64_t qwi_qpanel_panel_bytes(qwi_qfmt fmt, int64_t k) {
    return QWI_DIV_UP(QWI_DIV_UP(k, qwi_qpanel_kb(fmt)) * qwi_qpanel_block_bytes(fmt), 64) * 64;
}

/* Whether the layout interleaves groups of QWI_QPANEL_GROUP panels. */
static inline bool qwi_qpanel_interleaved(qwi_qpanel_layout layout) {
    return layout == QWI_QPANEL_PAIR;
}

/* Panels of the group that holds panel p: QWI_QPANEL_GROUP, or what is left
 * in the last group; 1 where the layout does not interleave. */
static inline int64_t qwi_qpanel_group_panels(const qwi_qpanel *w, int64_t p) {
    if (!qwi_qpanel_interleaved(w->layout)) return 1;
    const int64_t first = p - p % QWI_QPANEL_GROUP;
    return QWI_MIN((int64_t)QWI_QPANEL_GROUP, QWI_DIV_UP(w->n, QWI_QPANEL) - first);
}

/* Bytes from a 64-byte line of panel p's codes to its next line; panels
 * p and p + 1 of one group are 64 bytes apart in every line. */
static inline int64_t qwi_qpanel_line_stride(const qwi_qpanel *w, int64_t p) {
    return 64 * qwi_qpanel_group_panels(w, p);
}

/* Offset of code block blk of panel p from w->codes. */
static inline int64_t qwi_qpanel_block_at(const qwi_qpanel *w, int64_t p, int64_t blk) {
    const int64_t first = qwi_qpanel_interleaved(w->layout) ? p - p % QWI_QPANEL_GROUP : p;
    const int64_t off = blk * qwi_qpanel_block_bytes(w->fmt);
    return first * qwi_qpanel_panel_bytes(w->fmt, w->k) + (off / 64) * qwi_qpanel_line_stride(w, p) +
           (p - first) * 64 + off % 64;
}

/* Panels from p on, at most max, that a kernel reads together: in an
 * interleaved layout the rest of p's group (read through panel p's base
 * qwi_qpanel_block_at(w, p, 0), its line stride and 64 bytes per panel),
 * else max (panels are qwi_qpanel_panel_bytes apart). */
static inline int64_t qwi_qpanel_run(const qwi_qpanel *w, int64_t p, int64_t max) {
    if (!qwi_qpanel_interleaved(w->layout)) return max;
    return QWI_MIN(max, qwi_qpanel_group_panels(w, p) - p % QWI_QPANEL_GROUP);
}

/* Bytes of one PAIR zero point (zeros_i): 1 for U4, 2 for U8. */
static inline int64_t qwi_qpanel_zero_bytes(qwi_qfmt fmt) { return fmt == QWI_QFMT_U8 ? 2 : 1; }

/* The scale of entry i = (panel * ngroups + group) * 16 + slot, as f32
 * (an f16 scales_h entry widens exactly). */
static inline float qwi_qpanel_scale(const qwi_qpanel *w, int64_t i) {
    if (w->scales_h) return qwi_f16_to_f32(w->scales_h[i]);
    return w->scale_per_panel ? w->scales[i / QWI_QPANEL] : w->scales[i];
}

/* The f32 scales of group g of panels p .. p + np - 1 (np <= 4; not
 * scales_h), as the kernels read them: the first panel's 16 at the
 * returned pointer, each next panel's *stride floats further. Where w
 * keeps one scale a panel (scale_per_panel) they are expanded into buf
 * (64 floats, 64-byte aligned helps), else they are read in place. */
static inline const float *qwi_qpanel_group_scales(const qwi_qpanel *w, int64_t p, int64_t g,
                                                   int np, float *buf, int64_t *stride) {
    if (!w->scale_per_panel) {
        *stride = w->ngroups * QWI_QPANEL;
        return w->scales + (p * w->ngroups + g) * QWI_QPANEL;
    }
    for (int q = 0; q < np; q++) {
        const float s = w->scales[(p + q) * w->ngroups + g];
        for (int i = 0; i < QWI_QPANEL; i++) buf[q * QWI_QPANEL + i] = s;
    }
    *stride = QWI_QPANEL;
    return buf;
}

/* The zero point of entry i (as in qwi_qpanel_scale); 0 for E4M3. */
static inline int32_t qwi_qpanel_zero(const qwi_qpanel *w, int64_t i) {
    if (w->zeros_i)
        return w->fmt == QWI_QFMT_U8 ? (int32_t)(w->zeros_i[2 * i] | w->zeros_i[2 * i + 1] << 8)
                                     : (int32_t)w->zeros_i[i];
    return w->zeros ? (int32_t)w->zeros[i] : w->zero_all;
}

/* Bytes of the packed form of an fmt weight [n][k] with groups of group_k
 * input columns (codes, then scales, then zeros, each 64-byte aligned); 0 if
 * a size is not positive, group_k is odd, fmt unknown, or it overflows.
 * form: what PAIR U4/U8 may store narrower (above). */
size_t qwi_qpanel_bytes_for(qwi_qfmt fmt, qwi_qpanel_layout layout, int64_t n, int64_t k,
                            int64_t group_k, qwi_qpanel_form form);

/* The form a loaded quantized weight packs in: scales_f16 when its scales
 * tensor is F16 (by construction, no scan), zero_uniform when
 * qwi_qweight_uniform_zero says so (a scan of its qzeros, G x n/8 words:
 * qwi_qpanel_bytes and qwi_qpanel_pack each make it for PAIR, next to the
 * pack's unpacking of n x k codes), scales_per_panel for FP8 blocks of a
 * multiple of 16 rows (by construction). Pure. */
qwi_qpanel_form qwi_qpanel_form_of(const qwi_qweight *w);

/* qwi_qpanel_bytes_for() of a loaded quantized weight in
 * qwi_qpanel_form_of(w); 0: cannot pack it (method NONE, or a size as
 * above). */
size_t qwi_qpanel_bytes(const qwi_qweight *w, qwi_qpanel_layout layout);

/* Pack w (unpacked 16 rows at a time through qwi_qweight_unpack_rows) into
 * dst, 64-byte aligned, of qwi_qpanel_bytes(w, layout) bytes, and describe
 * it in *out (pointers into dst). Returns false, with a qwi_fail message
 * naming the tensor, on a zero point outside the contract, a size of 0, or
 * out of memory for the 16-row scratch; dst is then partly written. */
bool qwi_qpanel_pack(const qwi_qweight *w, qwi_qpanel_layout layout, void *dst, qwi_qpanel *out);

/* The same from plain arrays: codes [n][k] (as qwi_qweight_unpack_rows
 * writes them), scales and zeros [n][ceil(k/group_k)] (zeros may be NULL
 * for E4M3). dst: 64-byte aligned, qwi_qpanel_bytes_for(..., form) bytes.
 * Where the layout narrows them, a scale that is not an f16 value
 * (form.scales_f16), a zero point other than form.zero_all
 * (form.zero_uniform) or a scale other than its panel's first row's
 * (form.scales_per_panel; compared as bits) fails
 * (QW_ERR_INVALID_ARGUMENT, naming it). */
bool qwi_qpanel_pack_codes(qwi_qfmt fmt, qwi_qpanel_layout layout, int64_t n, int64_t k,
                           int64_t group_k, const uint8_t *codes, const float *scales,
                           const float *zeros, qwi_qpanel_form form, void *dst, qwi_qpanel *out);

/* Where code (slot r, column kk of its block) lies inside a code block of
 * fmt in layout: *byte from the block's first byte, *shift its bit
 * position in that byte (0 or 4 for U4, else 0). */
static inline void qwi_qpanel_code_in_block(qwi_qfmt fmt, qwi_qpanel_layout layout, int64_t kk,
                                            int r, int64_t *byte, int *shift) {
    if (fmt == QWI_QFMT_E4M3) {
        *shift = 0;
        if (layout == QWI_QPANEL_SEQ) {
            *byte = 2 * r + kk;
        } else {
            const int wd = 2 * (r % 8) + (int)kk;
            *byte = (wd / 8) * 16 + (r < 8 ? 0 : 8) + wd % 8;
        }
        return;
    }
    const int64_t kb = qwi_qpanel_kb(fmt);
    const int bits = fmt == QWI_QFMT_U4 ? 4 : 8;
    const int field = layout == QWI_QPANEL_SEQ ? (int)kk : (int)(kk / 2) + (kk & 1 ? (int)kb / 2 : 0);
    const int bit = field * bits;
    *byte = 4 * r + bit / 8;
    *shift = bit % 8;
}

/* Where code (slot r, column k) of panel p of w lives: *byte is its offset
 * from w->codes, *shift its bit position in that byte. With
 * qwi_qpanel_block_at and qwi_qpanel_code_in_block, the one definition of
 * the layout above: packing and the generic kernels both go through them. */
static inline void qwi_qpanel_code_pos(const qwi_qpanel *w, int64_t p, int64_t k, int r,
                                       int64_t *byte, int *shift) {
    const int64_t kb = qwi_qpanel_kb(w->fmt);
    qwi_qpanel_code_in_block(w->fmt, w->layout, k % kb, r, byte, shift);
    *byte += qwi_qpanel_block_at(w, p, k / kb);
}

/* c(n, k) of the contract above, as the kernels use it (E4M3: value * 2^-8). */
float qwi_qpanel_c(const qwi_qpanel *w, int64_t n, int64_t k);

/* The dequantized element (n, k) = c * scale, in double (tests). */
double qwi_qpanel_get(const qwi_qpanel *w, int64_t n, int64_t k);

/* e4m3 bit pattern -> its value times 2^-8 (exact; NaN patterns give NaN). */
float qwi_qpanel_e4m3_c(uint8_t b);

#endif
