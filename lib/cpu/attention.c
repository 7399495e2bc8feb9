/*
 * attention.c - see attention.h.
 *
 * One query row's attention is three steps on a small state (running max,
 * running sum and the P.V accumulator of each q head of one kv head):
 * row_begin, row_tile for each context tile in order, row_end. The
 * single-row entry point runs them directly; the parallel driver runs a
 * block of consecutive rows of one sequence tile by tile, so each K/V tile
 * is read from memory once for the whole block instead of once per row
 * (flash-attention's reuse; without it a long prefill re-read the whole
 * context from memory for every row). Both call the same functions in the
 * same per-row order, so a row's result is bit-identical either way.
 *
 * Exact numerics reads the f32 cache through the f32 kernel table (K_PASS
 * and V_PASS for f32, unchanged bits). Fast numerics reads the bf16 cache
 * (cpu/kv_bf16.h): its K pass widens and transposes each K tile once per
 * block (ktile_load) and scores it with positions as lanes (tscores), its
 * V pass is V_PASS over the bf16-KV table; the softmax between them is
 * shared and stays f32.
 */
#include <math.h>
#include <string.h>

#include "cpu/attention.h"

/* Rows per query block: the block's accumulators (QWI_CPU_ATTN_ROWS x group
 * x head_dim floats) and one K/V tile (TILE x head_dim x 2 floats) stay in
 * L2 while the block sweeps the context. */
#define QWI_CPU_ATTN_ROWS 16

/* Floats of one row's state. */
static size_t row_state_floats(int32_t group, int32_t head_dim) {
    /* scores [group][TILE], accumulators [group][head_dim], max and sum [group] */
    return (size_t)group * QWI_CPU_ATTN_TILE + (size_t)group * (size_t)head_dim + 2 * (size_t)group;
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
} row_state;

static void row_begin(const qwi_cpu_attn *a, int32_t r, int32_t g, float *mem, row_state *s) {
    const int32_t group = a->num_heads / a->num_kv_heads, hd = a->head_dim;
    s->q = a->q + r * (int64_t)a->num_heads * hd + (int64_t)g * group * hd;
    s->bt = a->block_tables + (int64_t)a->row_seq[r] * a->max_blocks_per_seq;
    s->ctx = a->positions[r] + 1;
    s->scores = mem;
    s->acc = s->scores + (size_t)group * QWI_CPU_ATTN_TILE;
    s->mx = s->acc + (size_t)group * hd;
    s->sum = s->mx + group;
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

/* The K pass (scores of positions [t0, t1), scaled) and the V pass (acc +=
 * p * V, positions in order) of one tile, for a cache of element type ET
 * read through kernel table KT (the f32 table or the bf16 one: the same
 * member names). Four positions (and two heads) at a time: dot4/dot4x2 are
 * bit-identical to single dots, axpy4/axpy4x2 to axpys in order. Fast
 * mode's K pass is ktile_load + tscores instead (below). */
#define K_PASS(SFX, ET, KT)                                                                \
static void scores_##SFX(const qwi_cpu_attn *a, const KT *kt, const ET *kc, int32_t g,     \
                         int32_t t0, int32_t t1, const row_state *st) {                   \
    const int32_t group = a->num_heads / a->num_kv_heads;                                  \
    const int32_t hd = a->head_dim, bs = a->block_size;                                    \
    const int64_t kv_stride = (int64_t)a->num_kv_heads * hd;                               \
    const float *q = st->q;                                                                \
    float *scores = st->scores;                                                            \
    int32_t p = t0;                                                                        \
    for (; p + 4 <= t1; p += 4) {                                                          \
        const ET *k4[4];                                                                   \
        for (int32_t f = p + QWI_CPU_ATTN_PF; f < p + QWI_CPU_ATTN_PF + 4 && f < st->ctx; f++) \
            prefetch_slice(kc + slot_of(st->bt, bs, f) * kv_stride + (int64_t)g * hd,     \
                           (size_t)hd * sizeof(ET));                                       \
        for (int i = 0; i < 4; i++)                                                        \
            k4[i] = kc + slot_of(st->bt, bs, p + i) * kv_stride + (int64_t)g * hd;         \
        int32_t h = 0;                                                                     \
        for (; h + 2 <= group; h += 2) {   /* GQA: two heads per K load */                 \
            float d0[4], d1[4];                                                            \
            kt->dot4x2(q + (int64_t)h * hd, q + (int64_t)(h + 1) * hd, k4, hd, d0, d1);    \
            for (int i = 0; i < 4; i++) {                                                  \
                scores[h * QWI_CPU_ATTN_TILE + (p + i - t0)] = d0[i] * a->scale;           \
                scores[(h + 1) * QWI_CPU_ATTN_TILE + (p + i - t0)] = d1[i] * a->scale;     \
            }                                                                              \
        }                                                                                  \
        for (; h < group; h++) {                                                           \
            float d[4];                                                                    \
            kt->dot4(q + (int64_t)h * hd, k4, hd, d);                                      \
            for (int i = 0; i < 4; i++)                                                    \
                scores[h * QWI_CPU_ATTN_TILE + (p + i - t0)] = d[i] * a->scale;            \
        }                                                                                  \
    }                                                                                      \
    for (; p < t1; p++) {                                                                  \
        const ET *k = kc + slot_of(st->bt, bs, p) * kv_stride + (int64_t)g * hd;           \
        for (int32_t h = 0; h < group; h++)                                                \
            scores[h * QWI_CPU_ATTN_TILE + (p - t0)] =                                     \
                kt->dot(q + (int64_t)h * hd, k, hd) * a->scale;                            \
    }                                                                                      \
}

/* The V pass (acc += p * V) of one tile, as K_PASS for its cache type. */
#define V_PASS(SFX, ET, KT)                                                                \
static void pv_##SFX(const qwi_cpu_attn *a, const KT *kt, const ET *vc, int32_t g,         \
                     int32_t t0, int32_t t1, const row_state *st) {                       \
    const int32_t group = a->num_heads / a->num_kv_heads;                                  \
    const int32_t hd = a->head_dim, bs = a->block_size;                                    \
    const int64_t kv_stride = (int64_t)a->num_kv_heads * hd;                               \
    const float *scores = st->scores;                                                      \
    float *acc = st->acc;                                                                  \
    int32_t p = t0;                                                                        \
    for (; p + 4 <= t1; p += 4) {                                                          \
        const ET *v4[4];                                                                   \
        for (int32_t f = p + QWI_CPU_ATTN_PF; f < p + QWI_CPU_ATTN_PF + 4 && f < st->ctx; f++) \
            prefetch_slice(vc + slot_of(st->bt, bs, f) * kv_stride + (int64_t)g * hd,     \
                           (size_t)hd * sizeof(ET));                                       \
        for (int i = 0; i < 4; i++)                                                        \
            v4[i] = vc + slot_of(st->bt, bs, p + i) * kv_stride + (int64_t)g * hd;         \
        int32_t h = 0;                                                                     \
        for (; h + 2 <= group; h += 2)                                                     \
            kt->axpy4x2(acc + (int64_t)h * hd, acc + (int64_t)(h + 1) * hd,                \
                        scores + h * QWI_CPU_ATTN_TILE + (p - t0),                         \
                        scores + (h + 1) * QWI_CPU_ATTN_TILE + (p - t0), v4, hd);          \
        for (; h < group; h++)                                                             \
            kt->axpy4(acc + (int64_t)h * hd, scores + h * QWI_CPU_ATTN_TILE + (p - t0),    \
                      v4, hd);                                                             \
    }                                                                                      \
    for (; p < t1; p++) {                                                                  \
        const ET *v = vc + slot_of(st->bt, bs, p) * kv_stride + (int64_t)g * hd;           \
        for (int32_t h = 0; h < group; h++)                                                \
            kt->axpy(acc + (int64_t)h * hd, scores[h * QWI_CPU_ATTN_TILE + (p - t0)], v,   \
                     hd);                                                                  \
    }                                                                                      \
}

K_PASS(f32, float, qwi_cpu_kernels)
V_PASS(f32, float, qwi_cpu_kernels)
V_PASS(bf16, uint16_t, qwi_cpu_kv_bf16_kernels)

/* Fast mode's K pass is split in two: ktile_load widens and transposes the
 * tile's K rows of kv head g, positions [t0, t1), once to ktile
 * ([head_dim][TILE] f32), and every row of the block then computes its
 * scores from it with positions as SIMD lanes (kb->tscores: one FMA chain
 * over d per score, no horizontal sums). A score's bits do not depend on
 * t1 or on the lane, so a row gets the same scores alone or in a block. */
static void ktile_load(const qwi_cpu_attn *a, const int32_t *bt, int32_t g, int32_t t0,
                       int32_t t1, float *ktile) {
    const int32_t hd = a->head_dim, bs = a->block_size;
    const int64_t kv_stride = (int64_t)a->num_kv_heads * hd;
    const uint16_t *k[QWI_CPU_ATTN_TILE];
    for (int32_t p = t0; p < t1; p++) {
        k[p - t0] = a->k_bf16 + slot_of(bt, bs, p) * kv_stride + (int64_t)g * hd;
        prefetch_slice(k[p - t0], (size_t)hd * sizeof(uint16_t));
    }
    a->kb->transpose(k, t1 - t0, hd, ktile, QWI_CPU_ATTN_TILE);
}

/* Context tile [t0, min(ctx, t0 + TILE)) of one row; t0 < ctx. In fast
 * mode ktile holds the tile's K (ktile_load) for at least those
 * positions. */
static void row_tile(const qwi_cpu_attn *a, const qwi_cpu_kernels *kt, int32_t g, int32_t t0,
                     const float *ktile, row_state *st) {
    const int32_t group = a->num_heads / a->num_kv_heads;
    const int32_t hd = a->head_dim;
    const int32_t t1 = QWI_MIN(st->ctx, t0 + QWI_CPU_ATTN_TILE);
    float *scores = st->scores, *acc = st->acc, *mx = st->mx, *sum = st->sum;

    if (a->k_bf16)
        a->kb->tscores(st->q, group, hd, ktile, QWI_CPU_ATTN_TILE, t1 - t0, a->scale, scores,
                       QWI_CPU_ATTN_TILE);
    else scores_f32(a, kt, a->k_cache, g, t0, t1, st);
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
    if (a->k_bf16) pv_bf16(a, a->kb, a->v_bf16, g, t0, t1, st);
    else pv_f32(a, kt, a->v_cache, g, t0, t1, st);
}

static void row_end(const qwi_cpu_attn *a, int32_t r, int32_t g, const row_state *s) {
    const int32_t group = a->num_heads / a->num_kv_heads, hd = a->head_dim;
    float *out = a->out + r * (int64_t)a->num_heads * hd + (int64_t)g * group * hd;
    for (int32_t h = 0; h < group; h++) {
        float inv = 1.0f / s->sum[h];
        for (int32_t d = 0; d < hd; d++) out[h * hd + d] = s->acc[h * hd + d] * inv;
    }
}

void qwr_attention_row(const qwi_cpu_attn *a, const qwi_cpu_kernels *kt, int32_t r,
                       int32_t g, float *scratch) {
    row_state s;
    float *ktile = ktile_of(scratch, a->num_heads / a->num_kv_heads, a->head_dim);
    row_begin(a, r, g, scratch, &s);
    for (int32_t t0 = 0; t0 < s.ctx; t0 += QWI_CPU_ATTN_TILE) {
        if (a->k_bf16) ktile_load(a, s.bt, g, t0, QWI_MIN(s.ctx, t0 + QWI_CPU_ATTN_TILE), ktile);
        row_tile(a, kt, g, t0, ktile, &s);
    }
    row_end(a, r, g, &s);
}

/* Rows r0 .. r0+n-1 (n <= QWI_CPU_ATTN_ROWS) of one sequence, tile by tile:
 * every row runs exactly qwr_attention_row's steps, interleaved by tile. */
static void attention_block(const qwi_cpu_attn *a, const qwi_cpu_kernels *kt, int32_t r0,
                            int32_t n, int32_t g, float *scratch) {
    const size_t per_row = row_state_floats(a->num_heads / a->num_kv_heads, a->head_dim);
    row_state s[QWI_CPU_ATTN_ROWS];
    float *ktile = ktile_of(scratch, a->num_heads / a->num_kv_heads, a->head_dim);
    int32_t ctx = 0;
    for (int32_t i = 0; i < n; i++) {
        row_begin(a, r0 + i, g, scratch + (size_t)i * per_row, &s[i]);
        ctx = QWI_MAX(ctx, s[i].ctx);
    }
    /* the rows of a run share one sequence, hence one block table */
    for (int32_t t0 = 0; t0 < ctx; t0 += QWI_CPU_ATTN_TILE) {
        if (a->k_bf16) ktile_load(a, s[0].bt, g, t0, QWI_MIN(ctx, t0 + QWI_CPU_ATTN_TILE), ktile);
        for (int32_t i = 0; i < n; i++)
            if (t0 < s[i].ctx) row_tile(a, kt, g, t0, ktile, &s[i]);
    }
    for (int32_t i = 0; i < n; i++) row_end(a, r0 + i, g, &s[i]);
}

typedef struct attn_ctx {
    const qwi_cpu_attn *a;
    const qwi_cpu_kernels *kt;
    float *const *scratch;
    int32_t rows;        /* most rows per run (<= QWI_CPU_ATTN_ROWS) */
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

/* Task t: kv head t % num_kv_heads of the run that starts at row t /
 * num_kv_heads, if one does (else nothing): the rows of a run share their
 * sequence's block table, so they read each K/V tile once. Decode rows are
 * each their own run, so a decode step is (sequence, kv head) tasks. */
static void attn_task(void *p, int64_t t, int thread) {
    const attn_ctx *c = p;
    const qwi_cpu_attn *a = c->a;
    const int32_t g = (int32_t)(t % a->num_kv_heads);
    const int32_t r0 = (int32_t)(t / a->num_kv_heads);
    const int32_t r1 = qwi_cpu_attn_run_end(a, c->rows, r0);
    if (r1 > r0) attention_block(a, c->kt, r0, r1 - r0, g, c->scratch[thread]);
}

void qwi_cpu_attention(qwi_cpu_pool *pool, const qwi_cpu_kernels *kt, float *const *scratch,
                       const qwi_cpu_attn *a) {
    attn_ctx c = { .a = a, .kt = kt, .scratch = scratch,
                   .rows = qwi_cpu_attn_run_rows(a, qwi_cpu_pool_size(pool)) };
    qwi_cpu_pool_run(pool, (int64_t)a->num_tokens * a->num_kv_heads, attn_task, &c);
}

void qwi_cpu_kv_write(float *k_cache, float *v_cache, const float *k, const float *v,
                      const int32_t *slot_mapping, int32_t num_tokens, int64_t row_floats) {
    for (int32_t r = 0; r < num_tokens; r++) {
        int64_t s = slot_mapping[r];
        memcpy(k_cache + s * row_floats, k + r * row_floats, (size_t)row_floats * sizeof(float));
        memcpy(v_cache + s * row_floats, v + r * row_floats, (size_t)row_floats * sizeof(float));
    }
}

void qwi_cpu_kv_write_bf16(uint16_t *k_cache, uint16_t *v_cache, const float *k, const float *v,
                           const int32_t *slot_mapping, int32_t num_tokens, int64_t row_floats) {
    for (int32_t r = 0; r < num_tokens; r++) {
        int64_t s = slot_mapping[r];
        qwi_cpu_kv_bf16_round(k + r * row_floats, k_cache + s * row_floats, row_floats);
        qwi_cpu_kv_bf16_round(v + r * row_floats, v_cache + s * row_floats, row_floats);
    }
}
