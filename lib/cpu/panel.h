/*
 * panel.h - the panel layout of a linear layer's weights: what the CPU
 * backend packs matmul weights into at load, for the broadcast GEMM kernels
 * (the *_panel entries of kernels.h).
 *
 * Why: the row-major kernels take dot products along K, so a register tile
 * pays a widening and a load per 8 weights and a horizontal sum per output;
 * at decode batch sizes (M = 8..64) that ran at about half the FMA peak. In
 * panels, the 16 weights of one k for 16 consecutive outputs are adjacent,
 * so an MR x 16 tile of outputs advances one k with one 32/64-byte weight
 * load, MR broadcasts of x and 2*MR FMAs, and M = 1 streams the weights in
 * one pass with no reductions (the same layout serves GEMV and GEMM, which
 * is what keeps batched == alone).
 *
 * Layout of an [N][K] weight (Hugging Face's [out, in]) as panels:
 *   ceil(N/16) panels, panel p = rows 16p .. 16p+15, stored [K][16]:
 *   element (p, k, slot) at ((p*K + k)*16 + slot). Rows past N in the last
 *   panel are zero, so kernels may always compute 16 outputs.
 *   f32:  slot j holds row 16p + j.
 *   bf16: slot 2i holds row 16p + i and slot 2i+1 holds row 16p + 8 + i
 *         (i < 8): each 32-bit lane is (row i, row 8+i), so a 16-bit left
 *         shift of the lanes gives rows 0..7 as f32 and masking off the low
 *         halves gives rows 8..15 - two cheap ops per 16 weights.
 * f16 weights are not packed (they go through the row-major f32 kernels
 * after a per-task conversion).
 */
#ifndef QWI_CPU_PANEL_H
#define QWI_CPU_PANEL_H

#include "common.h"
#include "dtype.h"

#define QWI_PANEL 16

/* Bytes of the panel form of an [n][k] weight of dtype dt (zero padding
 * included); 0 if dt has no panel form (f16), n or k is not positive, or the
 * size overflows size_t. */
size_t qwi_panel_bytes(qwi_dtype dt, int64_t n, int64_t k);

/* Write the panel form of the row-major [n][k] weight w (dtype dt) to dst,
 * which must hold qwi_panel_bytes(dt, n, k) bytes and not overlap w.
 * Returns false (writing nothing) if dt has no panel form. */
bool qwi_panel_pack(qwi_dtype dt, const void *w, int64_t n, int64_t k, void *dst);

/* Element (row, col) of a packed weight, as f32 (tests and debugging). */
float qwi_panel_get(qwi_dtype dt, const void *panels, int64_t k, int64_t row, int64_t col);

#endif
