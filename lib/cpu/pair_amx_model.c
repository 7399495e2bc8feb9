/*
 * pair_amx_model.c - cpu/pair_tiles.h over a C model of the AMX tile
 * registers: the "amx" table's tiling (row blocks, panel groups, staging
 * of short row blocks and of the last k chunk, the configuration) run on
 * any CPU, so that the tests check it where no AMX is at hand - which is
 * every machine this project has been built on so far.
 *
 * The model's tdpbf16ps takes, for each output, the 16 pairs of its chunk
 * in order, each pair as vdpbf16ps's lane does (odd product, then even,
 * added to the accumulator one at a time) - the arithmetic of
 * qwr_matmul_pair (kernels_bf16dot.c). So this kernel must give
 * qwr_matmul_pair's bits exactly, and any slip in the tiling (a pair, row
 * or panel dropped, doubled or misplaced) shows as a difference. The
 * hardware sums a chunk its own way (the SDM's pseudo-code takes each
 * pair's even product first; other orders round differently), so the
 * "amx" table is compared with the others within rounding only.
 *
 * The model checks the configuration as the hardware does for what this
 * kernel uses (palette 1, shapes of the operands of each op) and aborts on
 * a violation, where the hardware would raise #UD.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kernels.h"

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} model_config;

/* One thread's tile state, as the hardware keeps it per thread. */
static _Thread_local struct {
    model_config cfg;
    _Alignas(64) uint8_t t[8][16][64];
} tiles;

static void model_fail(const char *what, int t) {
    fprintf(stderr, "pair_amx_model: %s (tile %d)\n", what, t);
    abort();
}

static void model_config_load(const void *cfg) {
    memcpy(&tiles.cfg, cfg, sizeof tiles.cfg);
    memset(tiles.t, 0, sizeof tiles.t);   /* ldtilecfg zeroes the tiles */
    if (tiles.cfg.palette != 1) model_fail("palette is not 1", -1);
    for (int t = 0; t < 8; t++)
        if (tiles.cfg.rows[t] > 16 || tiles.cfg.colsb[t] > 64 || !tiles.cfg.rows[t])
            model_fail("shape out of range", t);
}

static void model_zero(int t) { memset(tiles.t[t], 0, sizeof tiles.t[t]); }

static void model_load(int t, const void *p, long stride) {
    for (int r = 0; r < tiles.cfg.rows[t]; r++)
        memcpy(tiles.t[t][r], (const char *)p + r * stride, tiles.cfg.colsb[t]);
}

static void model_store(int t, void *p, long stride) {
    for (int r = 0; r < tiles.cfg.rows[t]; r++)
        memcpy((char *)p + r * stride, tiles.t[t][r], tiles.cfg.colsb[t]);
}

static float half_f32(uint32_t pair, int high) {
    uint32_t u = high ? pair & 0xffff0000u : pair << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void model_dp(int c, int a, int b) {
    const model_config *g = &tiles.cfg;
    /* tdpbf16ps's shape rules: C is M x N dwords, A M x K, B K x N */
    if (g->rows[a] != g->rows[c] || g->colsb[b] != g->colsb[c] || g->colsb[a] / 4 != g->rows[b])
        model_fail("operand shapes disagree", c);
    for (int m = 0; m < g->rows[c]; m++)
        for (int n = 0; n < g->colsb[c] / 4; n++) {
            float acc;
            memcpy(&acc, &tiles.t[c][m][4 * n], 4);
            for (int k = 0; k < g->rows[b]; k++) {
                uint32_t xa, wb;
                memcpy(&xa, &tiles.t[a][m][4 * k], 4);
                memcpy(&wb, &tiles.t[b][k][4 * n], 4);
                acc = acc + half_f32(xa, 1) * half_f32(wb, 1);
                acc = acc + half_f32(xa, 0) * half_f32(wb, 0);
            }
            memcpy(&tiles.t[c][m][4 * n], &acc, 4);
        }
}

#define PT_ENTRY qwi_pair_amx_model_matmul
#define PT_ATTR
#define PT_CONFIG(cfg) model_config_load(cfg)
#define PT_ZERO(t) model_zero(t)
#define PT_LOAD(t, p, s) model_load(t, p, (long)(s))
#define PT_DP(c, a, b) model_dp(c, a, b)
#define PT_STORE(t, p, s) model_store(t, p, (long)(s))
#define PT_RELEASE() memset(&tiles.cfg, 0, sizeof tiles.cfg)
#include "cpu/pair_tiles.h"
