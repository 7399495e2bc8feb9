/*
 * attention.c - see attention.h.
 *
 * One query row's attention is three steps on a small state (running max,
 * running sum and the P.V accumulator of each q head of one kv head):
 * row_begin, the context tiles in order (online softmax between them),
 * row_end. The parallel driver runs a block of consecutive rows of one
 * sequence tile by tile, so each K/V tile is read from memory once for the
 * whole block instead of once per row (flash-attention's reuse); the
 * single-row entry point is the same driver with a block of one row. Every
 * output's arithmetic depends only on its own row, so a row's result is
 * bit-identical alone or in any block.
 *
 * The f32 cache is read through the f32 kernel table (scores_f32, pv_f32,
 * libm expf: row_tile). The bf16 cache is read through the bf16-KV table
 * (cpu/kv_bf16.h) in fast_block, and the fp8 cache the same way with its
 * K widen and P.V from the fp8-KV table (cpu/kv_fp8.h): per tile the
 * scores of all the block's (row, head) pairs come from one pass over the
 * K planes (pscores_q / pscores8_q), or, for block sizes that are no
 * multiple of the table's vector width, over the planes widened once into
 * a [head_dim][TILE] f32 tile (tscores_q) - the same bits (each K vector
 * loaded feeds several q vectors), the softmax uses the table's polynomial
 * exp (exp_sum), and pv adds P.V with the accumulators in registers and
 * each V vector shared by several pairs. In fast numerics the bf16 cache
 * may instead run on bf16 dot products (cpu/kv_bf16dot.h): q rounded to
 * pairs in row_begin, scores by dscores from the planes, P rounded to
 * pairs after the softmax and P.V by dpv in even-aligned passes (dot_pv).
 * The fp8 cache does the same on the tile widened to bf16 (exact: every
 * e4m3 value is a bf16 one) into ktile's memory (kv_fp8.h: tile_bf16), so
 * its fast-mode scores and P.V are the bf16 cache's over the same values;
 * a single row (decode) skips the widen through the fp8 table's dscores8
 * and dpv8 where it has them, with the same bits.
 */
#include <math.h>
#include <string.h>

#include "cpu/attention.h"
#include "cpu/pairpanel.h"
#include "dtype.h"
#include "fp8.h"

/* Rows per query block: the block's accumulators (QWI_CPU_ATTN_ROWS x group
 * x head_dim floats) and one K/V tile (TILE x head_dim x 2 floats) stay in
 * L2 while the block sweeps the context. */
#define QWI_CPU_ATTN_ROWS 16

/* Floats of one row's state. */
static size_t row_state_floats(int32_t group, int32_t head_dim) {
    /* scores [group][TILE], accumulators [group][head_dim], max and sum
     * [group]; for bf16 dot products (32-bit pairs) q [group][head_dim/2]
     * and P [group][TILE/2] */
    return (size_t)group * QWI_CPU_ATTN_TILE + (size_t)group * (size_t)head_dim + 2 * (size_t)group +
           (size_t)group * (size_t)((head_dim + 1) / 2) + (size_t)group * (QWI_CPU_ATTN_TILE / 2);
}

/* The transposed bf16 K tile ([head_dim][TILE] f32) sits after the row
 * states of a full block. */
static float *ktile_of(float *scratch, int32_t group, int32_t head_dim) {
    return scratch + QWI_CPU_ATTN_ROWS * row_state_floats(group, head_dim);
}

size_t qwi_cpu_attn_scratch_floats(int32_t num_heads, int32_t num_kv_heads, int32_t head_dim) {
    return QWI_CPU_ATTN_ROWS * row_state_floats(num_heads / num_kv_heads, head_dim) +
           (size_t)head_dim * QWI_CPU_ATTN_TILE;
}

/* The cache slot of context position p through the block table. */
static inline int64_t slot_of(const int32_t *bt, int32_t bs, int32_t p) {
    return (int64_t)bt[p / bs] * bs + p % bs;
}

typedef struct row_state {
    const float *q;       /* the row's q heads of kv head g  */
    const int32_t *bt;    /* the row's block table           */
    int32_t ctx;          /* positions 0 .. ctx-1 attended   */
    float *scores, *acc, *mx, *sum;
    uint32_t *q2, *p2;    /* bf16 dot products: q and P as bf16 pairs */
} row_state;

bool qwi_cpu_attn_on_dot_products(const qwi_cpu_attn *a) {
    return a->bf16_dot && (a->k_bf16 || (a->k_fp8 && a->kf && a->kf->to_bf16)) && a->kb &&
           a->kb->dscores && a->kb->dpv && a->head_dim % 2 == 0;
}

static void row_begin(const qwi_cpu_attn *a, int32_t r, int32_t g, float *mem, row_state *s) {
    const int32_t group = a->num_heads / a->num_kv_heads, hd = a->head_dim;
    s->q = a->q + r * (int64_t)a->num_heads * hd + (int64_t)g * group * hd;
    s->bt = a->block_tables + (int64_t)a->row_seq[r] * a->max_blocks_per_seq;
    s->ctx = a->positions[r] + 1;
    s->scores = mem;
    s->acc = s->scores + (size_t)group * QWI_CPU_ATTN_TILE;
    s->mx = s->acc + (size_t)group * hd;
    s->sum = s->mx + group;
    s->q2 = (uint32_t *)(s->sum + group);
    s->p2 = s->q2 + (size_t)group * (size_t)((hd + 1) / 2);
    /* heads of a group are consecutive rows of hd: one rounding per row */
    if (qwi_cpu_attn_on_dot_products(a)) qwi_pair_round_rows(s->q, 0, group, hd, s->q2);
    for (int32_t h = 0; h < group; h++) {
        s->mx[h] = -INFINITY;
        s->sum[h] = 0.0f;
    }
    memset(s->acc, 0, (size_t)group * hd * sizeof(float));
}

/* Positions ahead that the K and V passes prefetch. A (sequence, kv head)
 * task reads one head_dim slice (256-512 bytes) out of every slot, the
 * slots a block-table hop and a kv_dim stride apart: the hardware
 * prefetchers do not follow that, and without this a decode step waited a
 * memory latency per row (0.6B shape, 32 x 256-token contexts: ~50 ns a
 * row). Prefetches past the context are skipped, so no address outside the
 * pool is formed. */
#ifndef QWI_CPU_ATTN_PF
#define QWI_CPU_ATTN_PF 8
#endif

static inline void prefetch_slice(const void *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch((const char *)p + o, 0, 3);
}

/* Exact mode's K pass (scores of positions [t0, t1), scaled) over the f32
 * cache. Four positions (and two heads) at a time: dot4/dot4x2 are
 * bit-identical to single dots. */
static void scores_f32(const qwi_cpu_attn *a, const qwi_cpu_kernels *kt, int32_t g, int32_t t0,
                       int32_t t1, const row_state *st) {
    const int32_t group = a->num_heads / a->num_kv_heads;
    const int32_t hd = a->head_dim, bs = a->block_size;
    const int64_t kv_stride = (int64_t)a->num_kv_heads * hd;
    const float *kc = a->k_cache, *q = st->q;
    float *scores = st->scores;
    int32_t p = t0;
    for (; p + 4 <= t1; p += 4) {
        const float *k4[4];
        for (int32_t f = p + QWI_CPU_ATTN_PF; f < p + QWI_CPU_ATTN_PF + 4 && f < st->ctx; f++)
            prefetch_slice(kc + slot_of(st->bt, bs, f) * kv_stride + (int64_t)g * hd,
                           (size_t)hd * sizeof(float));
        for (int i = 0; i < 4; i++)
            k4[i] = kc + slot_of(st->bt, bs, p + i) * kv_stride + (int64_t)g * hd;
        int32_t h = 0;
        for (; h + 2 <= group; h += 2) {   /* GQA: two heads per K load */
            float d0[4], d1[4];
            kt->dot4x2(q + (int64_t)h * hd, q + (int64_t)(h + 1) * hd, k4, hd, d0, d1);
            for (int i = 0; i < 4; i++) {
                scores[h * QWI_CPU_ATTN_TILE + (p + i - t0)] = d0[i] * a->scale;
                scores[(h + 1) * QWI_CPU_ATTN_TILE + (p + i - t0)] = d1[i] * a->scale;
            }
        }
        for (; h < group; h++) {
            float d[4];
            kt->dot4(q + (int64_t)h * hd, k4, hd, d);
            for (int i = 0; i < 4; i++)
                scores[h * QWI_CPU_ATTN_TILE + (p + i - t0)] = d[i] * a->scale;
        }
    }
    for (; p < t1; p++) {
        const float *k = kc + slot_of(st->bt, bs, p) * kv_stride + (int64_t)g * hd;
        for (int32_t h = 0; h < group; h++)
            scores[h * QWI_CPU_ATTN_TILE + (p - t0)] =
                kt->dot(q + (int64_t)h * hd, k, hd) * a->scale;
    }
}

/* Exact mode's V pass (acc += p * V, positions in order) of one tile:
 * axpy4/axpy4x2 are bit-identical to axpys in order. */
static void pv_f32(const qwi_cpu_attn *a, const qwi_cpu_kernels *kt, int32_t g, int32_t t0,
                   int32_t t1, const row_state *st) {
    const int32_t group = a->num_heads / a->num_kv_heads;
    const int32_t hd = a->head_dim, bs = a->block_size;
    const int64_t kv_stride = (int64_t)a->num_kv_heads * hd;
    const float *vc = a->v_cache, *scores = st->scores;
    float *acc = st->acc;
    int32_t p = t0;
    for (; p + 4 <= t1; p += 4) {
        const float *v4[4];
        for (int32_t f = p + QWI_CPU_ATTN_PF; f < p + QWI_CPU_ATTN_PF + 4 && f < st->ctx; f++)
            prefetch_slice(vc + slot_of(st->bt, bs, f) * kv_stride + (int64_t)g * hd,
                           (size_t)hd * sizeof(float));
        for (int i = 0; i < 4; i++)
            v4[i] = vc + slot_of(st->bt, bs, p + i) * kv_stride + (int64_t)g * hd;
        int32_t h = 0;
        for (; h + 2 <= group; h += 2)
            kt->axpy4x2(acc + (int64_t)h * hd, acc + (int64_t)(h + 1) * hd,
                        scores + h * QWI_CPU_ATTN_TILE + (p - t0),
                        scores + (h + 1) * QWI_CPU_ATTN_TILE + (p - t0), v4, hd);
        for (; h < group; h++)
            kt->axpy4(acc + (int64_t)h * hd, scores + h * QWI_CPU_ATTN_TILE + (p - t0), v4, hd);
    }
    for (; p < t1; p++) {
        const float *v = vc + slot_of(st->bt, bs, p) * kv_stride + (int64_t)g * hd;
        for (int32_t h = 0; h < group; h++)
            kt->axpy(acc + (int64_t)h * hd, scores[h * QWI_CPU_ATTN_TILE + (p - t0)], v, hd);
    }
}

/* The tile rows of the bf16 or fp8 cache: k[i] and v[i] (k8/v8 for
 * fp8) point at the K (its element of dim 0 in head g's K plane of the
 * block, dims block_size apart) and the V row of kv head g at position
 * t0 + i, i < t1 - t0, each prefetched when prefetch is set. One
 * block-table hop per block instead of a division per position (a decode
 * step forms these pointers for every (sequence, kv head) task).
 *
 * Prefetching the whole tile at its start (up to 1024 lines) makes the
 * core wait for the burst to drain before the tile's arithmetic starts.
 * A block of several rows (a prefill chunk) computes long enough per tile
 * to hide that and keeps the prefetch (without it, a 2048-token prefill
 * measured the same within the noise). A single row (decode) does not
 * hide it and goes without: the tile's K planes and V
 * rows are runs of block_size * head_dim elements (4 KiB at the 0.6B
 * shape's bf16), one page each, which the hardware prefetchers follow.
 * Without the burst, qw-abench's batch-1 4K-context decode read 12.5
 * instead of 9 GB/s of K+V on one thread (docs/benchmarks.md);
 * prefetches spread through the score and P.V loops, a pass ahead,
 * measured no better than none. */
static void tile_rows(const qwi_cpu_attn *a, const int32_t *bt, int32_t g, int32_t t0,
                      int32_t t1, const uint16_t **k, const uint16_t **v, const uint8_t **k8,
                      const uint8_t **v8, bool prefetch) {
    const int32_t bs = a->block_size;
    const int64_t kv_stride = (int64_t)a->num_kv_heads * a->head_dim;
    const int64_t ke = (int64_t)g * a->head_dim;   /* head g's first element in a K row */
    const size_t elem = a->k_fp8 ? 1 : sizeof(uint16_t), bytes = (size_t)a->head_dim * elem;
    int32_t b = t0 / bs, o = t0 % bs;
    for (int32_t i = 0; i < t1 - t0; i++) {
        /* qwi_cpu_vhead_index(slot, bs, num_kv_heads, head_dim, g, 0) */
        const int64_t voff = (((int64_t)bt[b] * a->num_kv_heads + g) * bs + o) * a->head_dim;
        /* qwi_cpu_kplane_index(slot, bs, kv_stride, ke), from the block
         * and offset already in hand (no division per position) */
        const int64_t koff = (int64_t)bt[b] * bs * kv_stride + ke * bs + o;
        /* head g's K plane of the block: head_dim rows of block_size
         * elements, contiguous; prefetched once, at the tile's first
         * position in the block */
        const bool new_plane = i == 0 || o == 0;
        const void *kr, *vr;
        if (a->k_fp8) {
            kr = k8[i] = a->k_fp8 + koff;
            vr = v8[i] = a->v_fp8 + voff;
        } else {
            kr = k[i] = a->k_bf16 + koff;
            vr = v[i] = a->v_bf16 + voff;
        }
        if (prefetch) {
            if (new_plane) prefetch_slice((const char *)kr - (size_t)o * elem, bytes * (size_t)bs);
            prefetch_slice(vr, bytes);
        }
        if (++o == bs) {
            o = 0;
            b++;
        }
    }
}

/* Exact mode: context tile [t0, min(ctx, t0 + TILE)) of one row; t0 <
 * ctx. Scores, the online softmax (libm expf) and the V pass. */
static void row_tile(const qwi_cpu_attn *a, const qwi_cpu_kernels *kt, int32_t g, int32_t t0,
                     row_state *st) {
    const int32_t group = a->num_heads / a->num_kv_heads;
    const int32_t hd = a->head_dim;
    const int32_t t1 = QWI_MIN(st->ctx, t0 + QWI_CPU_ATTN_TILE);
    float *scores = st->scores, *acc = st->acc, *mx = st->mx, *sum = st->sum;

    scores_f32(a, kt, g, t0, t1, st);
    for (int32_t h = 0; h < group; h++) {
        float *s = scores + h * QWI_CPU_ATTN_TILE;
        float m = mx[h];
        for (int32_t i = 0; i < t1 - t0; i++) m = s[i] > m ? s[i] : m;
        /* online softmax: rescale what earlier tiles accumulated */
        float alpha = expf(mx[h] - m);
        if (alpha != 1.0f) {
            sum[h] *= alpha;
            for (int32_t d = 0; d < hd; d++) acc[h * hd + d] *= alpha;
        }
        mx[h] = m;
        float l = sum[h];
        for (int32_t i = 0; i < t1 - t0; i++) {
            s[i] = expf(s[i] - m);
            l += s[i];
        }
        sum[h] = l;
    }
    pv_f32(a, kt, g, t0, t1, st);
}

/* The P.V kernel of the cache's dtype over n positions. */
static inline void pv_pass(const qwi_cpu_attn *a, float *const *o, const float *const *p,
                           int32_t nq, const uint16_t *const *v, const uint8_t *const *v8,
                           int32_t n) {
    if (a->k_fp8)
        a->kf->pv(o, p, nq, v8, n, a->head_dim);
    else
        a->kb->pv(o, p, nq, v, n, a->head_dim);
}

/* (row, head) pairs one fast-mode kernel call takes at most: enough for
 * the kernels' register blocks (6 for scores, 8 for P.V), small enough
 * for the stack. Splitting a call never changes a bit (each pair is
 * independent in tscores_q and pv). */
#define QWI_CPU_ATTN_BATCH 32

/* One tscores_q batch: from ktile, or (direct) from the K planes (kp8
 * non-NULL: the fp8 cache's, through kf's own pscores8_q where it has
 * one). */
static inline void scores_pass(const qwi_cpu_kv_bf16_kernels *kb, const qwi_cpu_kv_fp8_kernels *kf,
                               bool direct, const float *const *qp,
                               float *const *op, int32_t nb, int32_t hd, const float *ktile,
                               const uint16_t *const *kp, const uint8_t *const *kp8, int32_t bs,
                               int32_t n, float scale) {
    if (direct && kp8)
        (kf && kf->pscores8_q ? kf->pscores8_q : kb->pscores8_q)(qp, op, nb, hd, kp8, bs, n, scale);
    else if (direct)
        kb->pscores_q(qp, op, nb, hd, kp, bs, n, scale);
    else
        kb->tscores_q(qp, op, nb, hd, ktile, QWI_CPU_ATTN_TILE, n, scale);
}

/* P.V on bf16 dot products for the tile starting at t0 (positions
 * [t0, t1) of rows s[0..n), P as pairs in p2): each pass takes the
 * (row, head) pairs that still need it over positions [lo, hi), lo and hi
 * even, so a row's pairs are always the even-aligned ones it has alone;
 * a row whose positions end at lo + 1 takes its last half pair in a pass
 * of one position. vp: the tile's V rows (bf16), or vp8 (fp8, read by
 * the fp8 table's dpv8) where not NULL. */
static inline void dpv_call(const qwi_cpu_attn *a, float *const *o, const uint32_t *const *p, int32_t nq,
                            const uint16_t *const *vp, const uint8_t *const *vp8, int32_t lo, int32_t n) {
    if (vp8)
        a->kf->dpv8(o, p, nq, vp8 + lo, n, a->head_dim);
    else
        a->kb->dpv(o, p, nq, vp + lo, n, a->head_dim);
}

static void dot_pv(const qwi_cpu_attn *a, row_state *s, int32_t n, int32_t t0, int32_t t1,
                   const uint16_t *const *vp, const uint8_t *const *vp8) {
    const int32_t group = a->num_heads / a->num_kv_heads, hd = a->head_dim;
    float *op[QWI_CPU_ATTN_BATCH];
    const uint32_t *pp[QWI_CPU_ATTN_BATCH];
    for (int32_t lo = 0;;) {
        int32_t hi = INT32_MAX, nb = 0;
        for (int32_t i = 0; i < n; i++) {   /* half pairs at lo */
            const int32_t ni = QWI_MIN(s[i].ctx, t1) - t0;
            if (ni >= lo + 2) hi = QWI_MIN(hi, ni & ~1);
            if (ni != lo + 1) continue;
            for (int32_t h = 0; h < group; h++) {
                op[nb] = s[i].acc + (int64_t)h * hd;
                pp[nb] = s[i].p2 + (int64_t)h * (QWI_CPU_ATTN_TILE / 2) + lo / 2;
                if (++nb == QWI_CPU_ATTN_BATCH) {
                    dpv_call(a, op, pp, nb, vp, vp8, lo, 1);
                    nb = 0;
                }
            }
        }
        if (nb) dpv_call(a, op, pp, nb, vp, vp8, lo, 1);
        if (hi == INT32_MAX) break;
        nb = 0;
        for (int32_t i = 0; i < n; i++) {   /* whole pairs [lo, hi) */
            if (QWI_MIN(s[i].ctx, t1) - t0 < lo + 2) continue;
            for (int32_t h = 0; h < group; h++) {
                op[nb] = s[i].acc + (int64_t)h * hd;
                pp[nb] = s[i].p2 + (int64_t)h * (QWI_CPU_ATTN_TILE / 2) + lo / 2;
                if (++nb == QWI_CPU_ATTN_BATCH) {
                    dpv_call(a, op, pp, nb, vp, vp8, lo, hi - lo);
                    nb = 0;
                }
            }
        }
        if (nb) dpv_call(a, op, pp, nb, vp, vp8, lo, hi - lo);
        lo = hi;
    }
}

/* The bf16 or fp8 cache, rows s[0..n) of one run of one sequence, kv
 * head g: for each context tile, the scores of every (row, head) pair
 * still attending come from one pass over the K
 * planes (direct) or over ktile, the planes widened once into
 * [head_dim][TILE]; the online softmax runs per pair (the table's exp_sum), and the
 * P.V pass adds every pair's positions with the V vectors shared across
 * the pairs (pv). A pair's bits depend only on its q, the cached K/V, its
 * context length and the table: tscores_q and pv fix every output's chain
 * whatever the other pairs, and exp_sum's order depends only on the
 * positions in the tile. The fp8 cache's k_scale multiplies the score
 * scale (one rounding per layer) and its v_scale the final 1/sum
 * (row_end): see kv_fp8.h. */
static void fast_block(const qwi_cpu_attn *a, row_state *s, int32_t n, int32_t g,
                       float *ktile) {
    const qwi_cpu_kv_bf16_kernels *kb = a->kb;
    const qwi_cpu_kv_fp8_kernels *kf = a->kf;
    const bool fp8 = a->k_fp8 != NULL;
    const float scale = fp8 ? a->scale * a->k_scale : a->scale;
    const int32_t group = a->num_heads / a->num_kv_heads, hd = a->head_dim;
    const int32_t *bt = s[0].bt;   /* the rows of a run share one block table */
    int32_t ctx = 0;
    for (int32_t i = 0; i < n; i++) ctx = QWI_MAX(ctx, s[i].ctx);
    const float *qp[QWI_CPU_ATTN_BATCH], *pp[QWI_CPU_ATTN_BATCH];
    float *op[QWI_CPU_ATTN_BATCH];
    const uint16_t *kp[QWI_CPU_ATTN_TILE], *vp[QWI_CPU_ATTN_TILE];
    const uint8_t *kp8[QWI_CPU_ATTN_TILE], *vp8[QWI_CPU_ATTN_TILE];
    /* whole plane runs of the table's width: scores read the K planes
     * directly (pscores_q, pscores8_q for fp8), no f32 tile - the same
     * bits, a choice by block size alone (never by the rows of the step) */
    const bool direct = (fp8 ? kb->pscores8_q != NULL || kf->pscores8_q != NULL : kb->pscores_q != NULL) &&
                        a->block_size % kb->plane_lanes == 0;
    /* bf16 dot products: the table's dscores from the planes, or the
     * portable one (the same bits) where blocks break its plane runs; the
     * fp8 cache's tile is widened to bf16 16-position planes first, which
     * the table's dscores always reads (kv_fp8.h: tile_bf16) */
    const bool dot = qwi_cpu_attn_on_dot_products(a);
    /* the fp8 cache's single rows (decode) read it through the fp8
     * table's own dot kernels where it has them and the planes allow:
     * the same bits as the widened tile, without its round trip */
    const bool dot8 = dot && fp8 && n == 1 && kf->dscores8 && kf->dpv8 && a->block_size % 16 == 0;
    const qwr_kv_dscores_fn dscores = direct || fp8 ? kb->dscores : qwr_kv_dscores;
    const int64_t kstride = dot && fp8 && !dot8 ? 16 : a->block_size;
    uint16_t *kbuf = (uint16_t *)(void *)ktile, *vbuf = kbuf + (int64_t)QWI_CPU_ATTN_TILE * hd;
    const uint32_t *qp2[QWI_CPU_ATTN_BATCH];
    for (int32_t t0 = 0; t0 < ctx; t0 += QWI_CPU_ATTN_TILE) {
        const int32_t t1 = QWI_MIN(ctx, t0 + QWI_CPU_ATTN_TILE);
        /* without direct scores, K is widened once for the block from its
         * planes (ktile: [hd][TILE] f32, a contiguous copy per (cache
         * block, dim)); either way every row's scores come with positions
         * as SIMD lanes. The V rows stay bf16 / fp8, widened in pv */
        tile_rows(a, bt, g, t0, t1, kp, vp, kp8, vp8, n > 1);
        if (dot8) {
            /* nothing to widen */
        } else if (dot && fp8) {
            /* ktile's [hd][TILE] floats hold the bf16 K planes and V rows */
            qwi_cpu_kv_fp8_tile_bf16(kf, kp8, vp8, t1 - t0, hd, a->block_size, kbuf, vbuf, kp, vp);
        } else if (dot) {
            /* nothing to widen */
        } else if (!direct && fp8)
            kf->transpose(kp8, t1 - t0, hd, a->block_size, ktile, QWI_CPU_ATTN_TILE);
        else if (!direct)
            kb->transpose(kp, t1 - t0, hd, a->block_size, ktile, QWI_CPU_ATTN_TILE);
        /* scores: lanes past a row's own context are computed (ktile holds
         * them, up to t1) but never read */
        int32_t nb = 0;
        for (int32_t i = 0; i < n; i++) {
            if (s[i].ctx <= t0) continue;
            for (int32_t h = 0; h < group; h++) {
                qp[nb] = s[i].q + (int64_t)h * hd;
                qp2[nb] = s[i].q2 + (int64_t)h * (hd / 2);
                op[nb] = s[i].scores + (int64_t)h * QWI_CPU_ATTN_TILE;
                if (++nb == QWI_CPU_ATTN_BATCH) {
                    if (dot8)
                        kf->dscores8(qp2, op, nb, hd, kp8, kstride, t1 - t0, scale);
                    else if (dot)
                        dscores(qp2, op, nb, hd, kp, kstride, t1 - t0, scale);
                    else
                        scores_pass(kb, kf, direct, qp, op, nb, hd, ktile, kp, fp8 ? kp8 : NULL,
                                    a->block_size, t1 - t0, scale);
                    nb = 0;
                }
            }
        }
        if (nb && dot8)
            kf->dscores8(qp2, op, nb, hd, kp8, kstride, t1 - t0, scale);
        else if (nb && dot)
            dscores(qp2, op, nb, hd, kp, kstride, t1 - t0, scale);
        else if (nb)
            scores_pass(kb, kf, direct, qp, op, nb, hd, ktile, kp, fp8 ? kp8 : NULL, a->block_size, t1 - t0,
                        scale);
        /* online softmax per pair: rescale what earlier tiles accumulated */
        for (int32_t i = 0; i < n; i++) {
            if (s[i].ctx <= t0) continue;
            const int32_t ni = QWI_MIN(s[i].ctx, t1) - t0;
            for (int32_t h = 0; h < group; h++) {
                float m = s[i].mx[h];
                const float l = kb->exp_sum(s[i].scores + (int64_t)h * QWI_CPU_ATTN_TILE, ni, &m);
                float alpha = 1.0f;
                if (m != s[i].mx[h]) {
                    const float x = s[i].mx[h] - m;
                    kb->vexp(&x, &alpha, 1);
                }
                float *acc = s[i].acc + (int64_t)h * hd;
                if (alpha != 1.0f) kb->scale(acc, acc, alpha, hd);
                s[i].sum[h] = s[i].sum[h] * alpha + l;
                s[i].mx[h] = m;
                /* P as bf16 pairs from the tile start, zero past ni */
                if (dot)
                    qwi_pair_round_rows(s[i].scores + (int64_t)h * QWI_CPU_ATTN_TILE, 0, 1, ni,
                                        s[i].p2 + (int64_t)h * (QWI_CPU_ATTN_TILE / 2));
            }
        }
        if (dot) {
            dot_pv(a, s, n, t0, t1, vp, dot8 ? vp8 : NULL);
            continue;
        }
        /* P.V by segments [lo, hi) of the tile: each pass takes the pairs
         * whose rows attend past lo, over the positions up to the next row
         * end, so every pair adds exactly its own positions, in order */
        for (int32_t lo = 0;;) {
            int32_t hi = INT32_MAX;
            for (int32_t i = 0; i < n; i++) {
                const int32_t ni = QWI_MIN(s[i].ctx, t1) - t0;
                if (ni > lo) hi = QWI_MIN(hi, ni);
            }
            if (hi == INT32_MAX) break;
            nb = 0;
            for (int32_t i = 0; i < n; i++) {
                if (QWI_MIN(s[i].ctx, t1) - t0 <= lo) continue;
                for (int32_t h = 0; h < group; h++) {
                    op[nb] = s[i].acc + (int64_t)h * hd;
                    pp[nb] = s[i].scores + (int64_t)h * QWI_CPU_ATTN_TILE + lo;
                    if (++nb == QWI_CPU_ATTN_BATCH) {
                        pv_pass(a, op, pp, nb, vp + lo, vp8 + lo, hi - lo);
                        nb = 0;
                    }
                }
            }
            if (nb) pv_pass(a, op, pp, nb, vp + lo, vp8 + lo, hi - lo);
            lo = hi;
        }
    }
}

static void row_end(const qwi_cpu_attn *a, int32_t r, int32_t g, const row_state *s) {
    const int32_t group = a->num_heads / a->num_kv_heads, hd = a->head_dim;
    float *out = a->out + r * (int64_t)a->num_heads * hd + (int64_t)g * group * hd;
    for (int32_t h = 0; h < group; h++) {
        /* the fp8 cache's v_scale, applied once per output (kv_fp8.h) */
        float inv = (a->k_fp8 ? a->v_scale : 1.0f) / s->sum[h];
        if (a->k_bf16 || a->k_fp8) {
            a->kb->scale(out + h * hd, s->acc + h * hd, inv, hd);
        } else {
            for (int32_t d = 0; d < hd; d++) out[h * hd + d] = s->acc[h * hd + d] * inv;
        }
    }
    /* the group's heads are one even-length span of the row: its pairs are
     * the row's pairs from (g * group * hd) / 2 on */
    if (a->out_pairs)
        qwi_pair_round_rows(out, 0, 1, (int64_t)group * hd,
                            a->out_pairs + (r * (int64_t)a->num_heads * hd + (int64_t)g * group * hd) / 2);
}

/* Rows r0 .. r0+n-1 (n <= QWI_CPU_ATTN_ROWS) of one sequence, tile by tile:
 * every row runs exactly the steps it runs alone (n = 1), interleaved by
 * tile. */
static void attention_block(const qwi_cpu_attn *a, const qwi_cpu_kernels *kt, int32_t r0,
                            int32_t n, int32_t g, float *scratch) {
    const size_t per_row = row_state_floats(a->num_heads / a->num_kv_heads, a->head_dim);
    row_state s[QWI_CPU_ATTN_ROWS];
    int32_t ctx = 0;
    for (int32_t i = 0; i < n; i++) {
        row_begin(a, r0 + i, g, scratch + (size_t)i * per_row, &s[i]);
        ctx = QWI_MAX(ctx, s[i].ctx);
    }
    if (a->k_bf16 || a->k_fp8) {
        fast_block(a, s, n, g, ktile_of(scratch, a->num_heads / a->num_kv_heads, a->head_dim));
    } else {
        for (int32_t t0 = 0; t0 < ctx; t0 += QWI_CPU_ATTN_TILE)
            for (int32_t i = 0; i < n; i++)
                if (t0 < s[i].ctx) row_tile(a, kt, g, t0, &s[i]);
    }
    for (int32_t i = 0; i < n; i++) row_end(a, r0 + i, g, &s[i]);
}

void qwr_attention_row(const qwi_cpu_attn *a, const qwi_cpu_kernels *kt, int32_t r,
                       int32_t g, float *scratch) {
    attention_block(a, kt, r, 1, g, scratch);
}

typedef struct attn_ctx {
    const qwi_cpu_attn *a;
    const qwi_cpu_kernels *kt;
    float *const *scratch;
    int32_t rows;        /* most rows per run (<= QWI_CPU_ATTN_ROWS) */
    int32_t heads;       /* kv heads per task (1 or num_kv_heads)    */
} attn_ctx;

int32_t qwi_cpu_attn_run_rows(const qwi_cpu_attn *a, int nthreads) {
    /* Enough tasks to balance the threads (each row's work differs with
     * its context length), as many rows per run as that allows. */
    const int64_t want_tasks = 32 * (int64_t)QWI_MAX(1, nthreads);
    int64_t rows = (int64_t)a->num_tokens * a->num_kv_heads / want_tasks;
    return (int32_t)QWI_MAX((int64_t)1, QWI_MIN((int64_t)QWI_CPU_ATTN_ROWS, rows));
}

/* A run starts at the first row, where the sequence changes, where
 * positions stop being consecutive, or at a position that is a multiple of
 * run_rows; so runs never mix sequences and hold at most run_rows rows. */
static bool starts_run(const qwi_cpu_attn *a, int32_t run_rows, int32_t r) {
    return r == 0 || a->row_seq[r] != a->row_seq[r - 1] ||
           a->positions[r] != a->positions[r - 1] + 1 || a->positions[r] % run_rows == 0;
}

int32_t qwi_cpu_attn_run_end(const qwi_cpu_attn *a, int32_t run_rows, int32_t r) {
    if (!starts_run(a, run_rows, r)) return r;
    int32_t e = r + 1;
    while (e < a->num_tokens && e - r < run_rows && !starts_run(a, run_rows, e)) e++;
    return e;
}

/* Prefetch the first tile's K planes and V head slices of kv head g for
 * the rows of a run starting at r0 (bf16 or fp8 cache), one contiguous run
 * of each per block: called for the next head while this one computes, so
 * they arrive in the meantime (the heads of a block share its pages). */
static void prefetch_head(const qwi_cpu_attn *a, int32_t r0, int32_t r1, int32_t g) {
    int32_t ctx = 0;
    for (int32_t r = r0; r < r1; r++) ctx = QWI_MAX(ctx, a->positions[r] + 1);
    const int32_t *bt = a->block_tables + (int64_t)a->row_seq[r0] * a->max_blocks_per_seq;
    const int32_t bs = a->block_size, n = QWI_MIN(ctx, QWI_CPU_ATTN_TILE);
    const int64_t kv_stride = (int64_t)a->num_kv_heads * a->head_dim, ke = (int64_t)g * a->head_dim;
    const size_t elem = a->k_fp8 ? 1 : sizeof(uint16_t), bytes = (size_t)a->head_dim * elem;
    const char *kc = a->k_fp8 ? (const char *)a->k_fp8 : (const char *)a->k_bf16;
    const char *vc = a->k_fp8 ? (const char *)a->v_fp8 : (const char *)a->v_bf16;
    for (int32_t b = 0; b * bs < n; b++) {
        const int64_t slot0 = (int64_t)bt[b] * bs;
        prefetch_slice(kc + qwi_cpu_kplane_index(slot0, bs, kv_stride, ke) * (int64_t)elem,
                       bytes * (size_t)bs);
        prefetch_slice(vc + qwi_cpu_vhead_index(slot0, bs, a->num_kv_heads, a->head_dim, g, 0) * (int64_t)elem,
                       bytes * (size_t)QWI_MIN(bs, n - b * bs));
    }
}

/* Task t: kv heads [g0, g0 + heads) of the run that starts at row t /
 * ceil(num_kv_heads / heads), if one does (else nothing): the rows of a
 * run share their sequence's block table, so they read each K/V tile once.
 * A decode step (every row its own run) with enough rows for the threads
 * runs all kv heads of a sequence in one task, head by head, the next
 * head's K/V prefetched during this one: a (sequence, kv head) slice is
 * 256-512 bytes out of every 2-4 KB cache row, so alone each task paid
 * the TLB and memory misses of its scattered rows again. Otherwise a task
 * is one (run, kv head) pair. Either way each (row, head) is computed
 * alone by attention_block, so the split never changes a bit. */
static void attn_task(void *p, int64_t t, int thread) {
    const attn_ctx *c = p;
    const qwi_cpu_attn *a = c->a;
    const int32_t ng = (a->num_kv_heads + c->heads - 1) / c->heads;
    const int32_t g0 = (int32_t)(t % ng) * c->heads;
    const int32_t g1 = QWI_MIN(a->num_kv_heads, g0 + c->heads);
    const int32_t r0 = (int32_t)(t / ng);
    const int32_t r1 = qwi_cpu_attn_run_end(a, c->rows, r0);
    for (int32_t g = g0; r1 > r0 && g < g1; g++) {
        if ((a->k_bf16 || a->k_fp8) && g + 1 < g1) prefetch_head(a, r0, r1, g + 1);
        attention_block(a, c->kt, r0, r1 - r0, g, c->scratch[thread]);
    }
}

void qwi_cpu_attention(qwi_cpu_pool *pool, const qwi_cpu_kernels *kt, float *const *scratch,
                       const qwi_cpu_attn *a) {
    const int nthreads = qwi_cpu_pool_size(pool);
    attn_ctx c = { .a = a, .kt = kt, .scratch = scratch,
                   .rows = qwi_cpu_attn_run_rows(a, nthreads), .heads = 1 };
    bool decode = a->num_tokens >= 8 * nthreads;
    for (int32_t r = 1; decode && r < a->num_tokens; r++)
        decode = a->row_seq[r] != a->row_seq[r - 1];
    if (decode) c.heads = a->num_kv_heads;
    const int64_t ng = (a->num_kv_heads + c.heads - 1) / c.heads;
    qwi_cpu_pool_run(pool, (int64_t)a->num_tokens * ng, attn_task, &c);
}

void qwi_cpu_kv_write(float *k_cache, float *v_cache, const float *k, const float *v,
                      const int32_t *slot_mapping, int32_t num_tokens, int64_t row_floats) {
    for (int32_t r = 0; r < num_tokens; r++) {
        int64_t s = slot_mapping[r];
        memcpy(k_cache + s * row_floats, k + r * row_floats, (size_t)row_floats * sizeof(float));
        memcpy(v_cache + s * row_floats, v + r * row_floats, (size_t)row_floats * sizeof(float));
    }
}

void qwi_cpu_kv_put_k_bf16(uint16_t *k_cache, const float *k_row, int64_t slot, int32_t block_size,
                           int64_t row_elems, int64_t e0, int64_t e1) {
    uint16_t *dst = k_cache + qwi_cpu_kplane_index(slot, block_size, row_elems, 0);
    for (int64_t e = e0; e < e1; e++) dst[e * block_size] = qwi_f32_to_bf16(k_row[e]);
}

void qwi_cpu_kv_put_k_fp8(uint8_t *k_cache, const float *k_row, int64_t slot, int32_t block_size,
                          int64_t row_elems, float k_scale, int64_t e0, int64_t e1) {
    uint8_t *dst = k_cache + qwi_cpu_kplane_index(slot, block_size, row_elems, 0);
    for (int64_t e = e0; e < e1; e++) dst[e * block_size] = qwi_f32_to_e4m3(k_row[e] / k_scale);
}

void qwi_cpu_kv_put_v_bf16(uint16_t *v_cache, const float *v_row, int64_t slot, int32_t block_size,
                           int64_t row_floats, int32_t head_dim) {
    const int32_t nkv = (int32_t)(row_floats / head_dim);
    for (int32_t g = 0; g < nkv; g++)
        qwi_cpu_kv_bf16_round(v_row + (int64_t)g * head_dim,
                              v_cache + qwi_cpu_vhead_index(slot, block_size, nkv, head_dim, g, 0), head_dim);
}

void qwi_cpu_kv_put_v_fp8(uint8_t *v_cache, const float *v_row, int64_t slot, int32_t block_size,
                          int64_t row_floats, int32_t head_dim, float v_scale) {
    const int32_t nkv = (int32_t)(row_floats / head_dim);
    for (int32_t g = 0; g < nkv; g++)
        qwi_cpu_kv_fp8_round(v_row + (int64_t)g * head_dim,
                             v_cache + qwi_cpu_vhead_index(slot, block_size, nkv, head_dim, g, 0), head_dim,
                             v_scale);
}

void qwi_cpu_kv_write_fp8(uint8_t *k_cache, uint8_t *v_cache, const float *k, const float *v,
                          const int32_t *slot_mapping, int32_t num_tokens, int64_t row_floats,
                          int32_t block_size, int32_t head_dim, float k_scale, float v_scale) {
    for (int32_t r = 0; r < num_tokens; r++) {
        int64_t s = slot_mapping[r];
        qwi_cpu_kv_put_k_fp8(k_cache, k + r * row_floats, s, block_size, row_floats, k_scale, 0,
                             row_floats);
        qwi_cpu_kv_put_v_fp8(v_cache, v + r * row_floats, s, block_size, row_floats, head_dim, v_scale);
    }
}

void qwi_cpu_kv_write_bf16(uint16_t *k_cache, uint16_t *v_cache, const float *k, const float *v,
                           const int32_t *slot_mapping, int32_t num_tokens, int64_t row_floats,
                           int32_t block_size, int32_t head_dim) {
    for (int32_t r = 0; r < num_tokens; r++) {
        int64_t s = slot_mapping[r];
        qwi_cpu_kv_put_k_bf16(k_cache, k + r * row_floats, s, block_size, row_floats, 0, row_floats);
        qwi_cpu_kv_put_v_bf16(v_cache, v + r * row_floats, s, block_size, row_floats, head_dim);
    }
}
