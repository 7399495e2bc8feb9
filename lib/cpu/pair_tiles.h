/*
 * pair_tiles.h - the fast numerics mode's bf16 matmul (kernels.h,
 * matmul_pair) on AMX tile registers, written once against a small tile
 * interface and compiled twice: by pair_amx.c with the AMX-TILE and
 * AMX-BF16 instructions (the "amx" kernel table), and by pair_amx_model.c
 * over a C model of the tile registers, so that the tiling below is
 * tested on every CPU, not only on one with AMX.
 *
 * The includer defines, before including this file:
 *   PT_ENTRY           the kernel's name (a qwr_matmul_pair_fn)
 *   PT_ATTR            attributes of its functions (a target, or nothing)
 *   PT_CONFIG(cfg)     load the 64-byte tile configuration at cfg (ldtilecfg)
 *   PT_ZERO(t)         zero tile t (tilezero)
 *   PT_LOAD(t, p, s)   load tile t from p, row stride s bytes (tileloadd)
 *   PT_DP(c, a, b)     tile c += tile a . tile b (tdpbf16ps)
 *   PT_STORE(t, p, s)  store tile t to p, row stride s bytes (tilestored)
 *   PT_RELEASE()       return the tiles to their initial state (tilerelease)
 * Tile numbers are literal constants: the instructions encode them.
 *
 * Why no repacking: a pair panel (pairpanel.h) stores 16 outputs' weight
 * pairs as [KP][16] 32-bit lanes, so 16 consecutive pairs of a panel are
 * exactly a B tile (16 rows of 64 bytes: row j holds pair j of the 16
 * outputs), and rows of activation pairs ([M][KP]) are A tiles as they
 * stand (16 pairs per 64-byte row, row stride 4*KP bytes). One tile op
 * then advances up to 16 rows x 16 outputs by 32 k.
 *
 * Tiles: 0-3 accumulate (C), 4-5 hold activations (A), 6-7 weights (B).
 * Every A and C tile has R = min(M, 16) rows (one configuration per
 * call); a row block shorter than R (the last of an M > 16 that is not a
 * multiple of 16) is staged zero-padded, as is the last chunk of a KP that
 * is not a multiple of 16 (zero pairs add exact zeros).
 * Blocking: with M <= 16, one row block times up to 4 panels (1 A and 4
 * B loads per 4 tile ops); with M > 16, two row blocks times 2 panels
 * (2 A and 2 B loads per 4 ops: each B tile, which the driver's column
 * block keeps in L2, serves 32 rows), a lone last row block taking the
 * first form.
 *
 * Arithmetic - the determinism contract of kernels.h: an output's C
 * element starts at zero and takes one tile op per 16-pair chunk, chunks
 * in order, whatever M, N, the blocking, the staging or the thread. Each
 * row of a tile op depends only on its own A row and the B tile, so every
 * output is the same for any M (batched == alone) and any column split.
 * How one op sums its 32 products into C is the hardware's (tdpbf16ps) or
 * the model's (pair_amx_model.c says which order it takes).
 */
#include <stdint.h>
#include <string.h>

#include "cpu/kernels.h"
#include "cpu/tile_out.h"

/* ldtilecfg's operand, palette 1: per tile, bytes per row and rows. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} pt_config;

#define PT_PAIRS 16   /* pairs per tile row: one tile op's k chunk */

/* The A operand of rows [m, m + mb) and pairs [j, j + kc): x itself when
 * that is a whole R x 16 tile, else the rows copied into stage, each
 * zero-padded to 16 pairs. Rows mb.. of stage keep whatever they held:
 * each tile row's sums depend on its own A row only, and the C rows past
 * mb are never stored to the output, so only the caller's one clearing
 * of stage (no uninitialised reads) is needed, not one per chunk.
 * Returns the tile's address; *stride gets its row stride in bytes. */
PT_ATTR static const uint32_t *pt_a_operand(const uint32_t *x, int64_t KP, int64_t m, int64_t mb,
                                            int R, int64_t j, int64_t kc,
                                            uint32_t stage[PT_PAIRS][PT_PAIRS], int64_t *stride) {
    if (mb == R && kc == PT_PAIRS) {
        *stride = KP * 4;
        return x + m * KP + j;
    }
    for (int64_t r = 0; r < mb; r++) {
        memcpy(stage[r], x + (m + r) * KP + j, (size_t)kc * 4);
        if (kc < PT_PAIRS) memset(stage[r] + kc, 0, (size_t)(PT_PAIRS - kc) * 4);
    }
    *stride = PT_PAIRS * 4;
    return &stage[0][0];
}

/* Panel p's B operand for the chunk at pair j (kc pairs): the panel
 * itself, or for a short last chunk its rows staged zero-padded (once per
 * panel group, in tail). */
PT_ATTR static inline const uint32_t *pt_b_operand(const uint32_t *w, int64_t KP, int64_t p,
                                                   int64_t j, int64_t kc,
                                                   const uint32_t *tail) {
    return kc == PT_PAIRS ? w + (p * KP + j) * 16 : tail;
}

/* C tile t's rows [0, rows) to the output: row r of the block at
 * out + r*ldo, the tile's 16 columns at the call's column j0. */
#define PT_FINISH(t, rows, j0, outrow)                                                  \
    do {                                                                                \
        PT_STORE(t, &c[0][0], 64);                                                      \
        for (int64_t r_ = 0; r_ < (rows); r_++)                                         \
            qwi_put16(c[r_], (j0), N, bias, (outrow) + r_ * ldo, accumulate);           \
    } while (0)

PT_ATTR void PT_ENTRY(const uint32_t *x, int64_t M, int64_t KP, const uint32_t *w, int64_t N,
                      const float *bias, float *out, int64_t ldo, int accumulate) {
    if (M <= 0 || N <= 0 || KP <= 0) return;
    const int R = M < 16 ? (int)M : 16;
    pt_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 6; t++) { cfg.rows[t] = (uint8_t)R; cfg.colsb[t] = 64; }
    for (int t = 6; t < 8; t++) { cfg.rows[t] = PT_PAIRS; cfg.colsb[t] = 64; }
    PT_CONFIG(&cfg);

    _Alignas(64) float c[16][16];
    _Alignas(64) uint32_t a_stage[2][PT_PAIRS][PT_PAIRS];
    memset(a_stage, 0, sizeof a_stage);   /* once: see pt_a_operand */
    _Alignas(64) uint32_t b_tail[4][PT_PAIRS][16];
    const int64_t panels = (N + 15) / 16, ktail = KP % PT_PAIRS;
    const int64_t group = M > 16 ? 2 : 4;

    for (int64_t p0 = 0; p0 < panels; p0 += group) {
        const int64_t np = QWI_MIN(group, panels - p0);
        if (ktail) {   /* the group's short last chunk, zero-padded, once */
            memset(b_tail, 0, sizeof b_tail);
            for (int64_t q = 0; q < np; q++)
                memcpy(b_tail[q], w + ((p0 + q) * KP + KP - ktail) * 16, (size_t)ktail * 64);
        }
        for (int64_t m = 0; m < M;) {
            if (M - m > 16) {   /* two row blocks x np (1-2) panels */
                const int64_t mb1 = QWI_MIN((int64_t)16, M - m - 16);
                PT_ZERO(0);
                PT_ZERO(1);
                PT_ZERO(2);
                PT_ZERO(3);
                for (int64_t j = 0; j < KP; j += PT_PAIRS) {
                    const int64_t kc = QWI_MIN((int64_t)PT_PAIRS, KP - j);
                    int64_t s0, s1;
                    const uint32_t *a0 = pt_a_operand(x, KP, m, 16, R, j, kc, a_stage[0], &s0);
                    const uint32_t *a1 =
                        pt_a_operand(x, KP, m + 16, mb1, R, j, kc, a_stage[1], &s1);
                    PT_LOAD(4, a0, s0);
                    PT_LOAD(5, a1, s1);
                    PT_LOAD(6, pt_b_operand(w, KP, p0, j, kc, &b_tail[0][0][0]), 64);
                    PT_DP(0, 4, 6);
                    PT_DP(2, 5, 6);
                    if (np > 1) {
                        PT_LOAD(7, pt_b_operand(w, KP, p0 + 1, j, kc, &b_tail[1][0][0]), 64);
                        PT_DP(1, 4, 7);
                        PT_DP(3, 5, 7);
                    }
                }
                PT_FINISH(0, 16, p0 * 16, out + m * ldo);
                PT_FINISH(2, mb1, p0 * 16, out + (m + 16) * ldo);
                if (np > 1) {
                    PT_FINISH(1, 16, (p0 + 1) * 16, out + m * ldo);
                    PT_FINISH(3, mb1, (p0 + 1) * 16, out + (m + 16) * ldo);
                }
                m += 16 + mb1;
                continue;
            }
            /* one row block (all of M <= 16, or the last of M > 16) x np
             * (1-4) panels; tiles 6 and 7 take the weights in turn */
            const int64_t mb = M - m;
            PT_ZERO(0);
            if (np > 1) PT_ZERO(1);
            if (np > 2) PT_ZERO(2);
            if (np > 3) PT_ZERO(3);
            for (int64_t j = 0; j < KP; j += PT_PAIRS) {
                const int64_t kc = QWI_MIN((int64_t)PT_PAIRS, KP - j);
                int64_t s0;
                const uint32_t *a0 = pt_a_operand(x, KP, m, mb, R, j, kc, a_stage[0], &s0);
                PT_LOAD(4, a0, s0);
                PT_LOAD(6, pt_b_operand(w, KP, p0, j, kc, &b_tail[0][0][0]), 64);
                PT_DP(0, 4, 6);
                if (np > 1) {
                    PT_LOAD(7, pt_b_operand(w, KP, p0 + 1, j, kc, &b_tail[1][0][0]), 64);
                    PT_DP(1, 4, 7);
                }
                if (np > 2) {
                    PT_LOAD(6, pt_b_operand(w, KP, p0 + 2, j, kc, &b_tail[2][0][0]), 64);
                    PT_DP(2, 4, 6);
                }
                if (np > 3) {
                    PT_LOAD(7, pt_b_operand(w, KP, p0 + 3, j, kc, &b_tail[3][0][0]), 64);
                    PT_DP(3, 4, 7);
                }
            }
            PT_FINISH(0, mb, p0 * 16, out + m * ldo);
            if (np > 1) PT_FINISH(1, mb, (p0 + 1) * 16, out + m * ldo);
            if (np > 2) PT_FINISH(2, mb, (p0 + 2) * 16, out + m * ldo);
            if (np > 3) PT_FINISH(3, mb, (p0 + 3) * 16, out + m * ldo);
            m = M;
        }
    }
    PT_RELEASE();
}

#undef PT_FINISH
