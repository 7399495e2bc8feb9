/*
 * attention.c - see attention.h.
 */
#include <math.h>
#include <string.h>

#include "cpu/attention.h"

size_t qwi_cpu_attn_scratch_floats(int32_t num_heads, int32_t num_kv_heads, int32_t head_dim) {
    size_t group = (size_t)(num_heads / num_kv_heads);
    /* scores [group][TILE], accumulators [group][head_dim], max and sum [group] */
    return group * QWI_CPU_ATTN_TILE + group * (size_t)head_dim + 2 * group;
}

/* The cache slot of context position p through the block table. */
static inline int64_t slot_of(const int32_t *bt, int32_t bs, int32_t p) {
    return (int64_t)bt[p / bs] * bs + p % bs;
}

void qwr_attention_row(const qwi_cpu_attn *a, const qwi_cpu_kernels *kt, int32_t r,
                       int32_t g, float *scratch) {
    const int32_t group = a->num_heads / a->num_kv_heads;
    const int32_t hd = a->head_dim, bs = a->block_size;
    const int64_t kv_stride = (int64_t)a->num_kv_heads * hd;   /* one slot */
    const int64_t q_stride = (int64_t)a->num_heads * hd;
    float *scores = scratch;                                    /* [group][TILE] */
    float *acc = scores + (size_t)group * QWI_CPU_ATTN_TILE;    /* [group][hd]   */
    float *mx = acc + (size_t)group * hd;
    float *sum = mx + group;
    const float *q = a->q + r * q_stride + (int64_t)g * group * hd;
    const int32_t *bt = a->block_tables + (int64_t)a->row_seq[r] * a->max_blocks_per_seq;
    const int32_t ctx = a->positions[r] + 1;

    for (int32_t h = 0; h < group; h++) {
        mx[h] = -INFINITY;
        sum[h] = 0.0f;
    }
    memset(acc, 0, (size_t)group * hd * sizeof(float));

    for (int32_t t0 = 0; t0 < ctx; t0 += QWI_CPU_ATTN_TILE) {
        int32_t t1 = QWI_MIN(ctx, t0 + QWI_CPU_ATTN_TILE);
        /* scores of this tile, kept for the V pass; four positions at a time
         * (dot4 is bit-identical to four dots) */
        int32_t p = t0;
        for (; p + 4 <= t1; p += 4) {
            const float *k4[4];
            for (int i = 0; i < 4; i++) k4[i] = a->k_cache + slot_of(bt, bs, p + i) * kv_stride + (int64_t)g * hd;
            for (int32_t h = 0; h < group; h++) {
                float d[4];
                kt->dot4(q + (int64_t)h * hd, k4, hd, d);
                for (int i = 0; i < 4; i++) scores[h * QWI_CPU_ATTN_TILE + (p + i - t0)] = d[i] * a->scale;
            }
        }
        for (; p < t1; p++) {
            const float *k = a->k_cache + slot_of(bt, bs, p) * kv_stride + (int64_t)g * hd;
            for (int32_t h = 0; h < group; h++)
                scores[h * QWI_CPU_ATTN_TILE + (p - t0)] = kt->dot(q + (int64_t)h * hd, k, hd) * a->scale;
        }
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
        /* acc += p * V, positions in order (axpy4 == four axpys) */
        for (p = t0; p + 4 <= t1; p += 4) {
            const float *v4[4];
            for (int i = 0; i < 4; i++) v4[i] = a->v_cache + slot_of(bt, bs, p + i) * kv_stride + (int64_t)g * hd;
            for (int32_t h = 0; h < group; h++)
                kt->axpy4(acc + (int64_t)h * hd, scores + h * QWI_CPU_ATTN_TILE + (p - t0), v4, hd);
        }
        for (; p < t1; p++) {
            const float *v = a->v_cache + slot_of(bt, bs, p) * kv_stride + (int64_t)g * hd;
            for (int32_t h = 0; h < group; h++) {
                float w = scores[h * QWI_CPU_ATTN_TILE + (p - t0)];
                kt->axpy(acc + (int64_t)h * hd, w, v, hd);
            }
        }
    }
    float *out = a->out + r * q_stride + (int64_t)g * group * hd;
    for (int32_t h = 0; h < group; h++) {
        float inv = 1.0f / sum[h];
        for (int32_t d = 0; d < hd; d++) out[h * hd + d] = acc[h * hd + d] * inv;
    }
}

typedef struct attn_ctx {
    const qwi_cpu_attn *a;
    const qwi_cpu_kernels *kt;
    float *const *scratch;
} attn_ctx;

static void attn_task(void *p, int64_t t, int thread) {
    const attn_ctx *c = p;
    int32_t r = (int32_t)(t / c->a->num_kv_heads), g = (int32_t)(t % c->a->num_kv_heads);
    qwr_attention_row(c->a, c->kt, r, g, c->scratch[thread]);
}

void qwi_cpu_attention(qwi_cpu_pool *pool, const qwi_cpu_kernels *kt, float *const *scratch,
                       const qwi_cpu_attn *a) {
    attn_ctx c = { .a = a, .kt = kt, .scratch = scratch };
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
