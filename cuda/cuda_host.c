/*
 * cuda_host.c - pure host arithmetic of the CUDA backend (see cuda_host.h).
 */
#include <string.h>

#include "cuda_host.h"

int qwi_cuda_buckets(int32_t max_seqs, int32_t *buckets) {
    int n = 0;
    if (max_seqs < 1) return 0;
    for (int64_t b = 1; b < max_seqs && n < QWI_CUDA_MAX_BUCKETS - 1; b *= 2) buckets[n++] = (int32_t)b;
    buckets[n++] = max_seqs;
    return n;
}

int32_t qwi_cuda_bucket_for(const int32_t *buckets, int nbuckets, int32_t n) {
    if (n < 1) return -1;
    for (int i = 0; i < nbuckets; i++)
        if (buckets[i] >= n) return buckets[i];
    return -1;
}

size_t qwi_cuda_kv_bytes_per_block(const qwi_config *cfg, int32_t block_size) {
    return qwi_cuda_kv_block_bytes(cfg, block_size, 2);
}

int qwi_cuda_kv_elem_bytes(int32_t kv_cache_dtype) {
    switch (kv_cache_dtype) {
    case QW_KV_CACHE_AUTO:
    case QW_KV_CACHE_BF16: return 2;
    case QW_KV_CACHE_FP8_E4M3: return 1;
    default: return 0;
    }
}

size_t qwi_cuda_kv_block_bytes(const qwi_config *cfg, int32_t block_size, int elem_bytes) {
    if (!cfg || block_size <= 0 || cfg->num_layers <= 0 || cfg->num_kv_heads <= 0 || cfg->head_dim <= 0 ||
        (elem_bytes != 1 && elem_bytes != 2))
        return 0;
    size_t n = 2 * (size_t)elem_bytes; /* K and V */
    if (__builtin_mul_overflow(n, (size_t)cfg->num_layers, &n) ||
        __builtin_mul_overflow(n, (size_t)block_size, &n) ||
        __builtin_mul_overflow(n, (size_t)cfg->num_kv_heads, &n) ||
        __builtin_mul_overflow(n, (size_t)cfg->head_dim, &n))
        return 0;
    return n;
}

qw_status qwi_cuda_kv_blocks(const qwi_cuda_mem *m, int32_t num_blocks, int64_t kv_cache_bytes,
                             double memory_fraction, int32_t *out) {
    *out = 0;
    if (m->per_block == 0) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cuda: KV block size is 0");
    uint64_t avail = m->free_now > m->reserve ? m->free_now - m->reserve : 0;
    uint64_t fit = avail / m->per_block;
    int64_t n;
    if (num_blocks > 0) {
        n = num_blocks;
    } else if (kv_cache_bytes > 0) {
        n = (int64_t)((uint64_t)kv_cache_bytes / m->per_block);
        if (m->max_useful_blocks > 0 && n > m->max_useful_blocks) n = m->max_useful_blocks;
    } else {
        double f = memory_fraction > 0 ? memory_fraction : 0.9;
        if (!(f > 0 && f <= 1))
            return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cuda: memory fraction %g outside (0, 1]", f);
        /* in use now: weights, activations, workspace, other processes */
        uint64_t used = m->total > m->free_now ? m->total - m->free_now : 0;
        double budget = f * (double)m->total - (double)used;
        if (budget < 0) budget = 0;
        /* the reserve is not the caller's to give away: cap, do not fail */
        if (budget > (double)avail) budget = (double)avail;
        n = (int64_t)(budget / (double)m->per_block);
        if (m->max_useful_blocks > 0 && n > m->max_useful_blocks) n = m->max_useful_blocks;
    }
    if (n < 1)
        return qwi_fail(QW_ERR_KV_CAPACITY,
                        "cuda: KV cache holds no block of %llu bytes (%.1f MiB free after weights "
                        "and activations, fraction %g)",
                        (unsigned long long)m->per_block, (double)m->free_now / 1048576.0, memory_fraction);
    if ((uint64_t)n > fit)
        return qwi_fail(QW_ERR_KV_CAPACITY,
                        "cuda: KV cache of %lld blocks (%.1f MiB) does not fit the %.1f MiB free "
                        "after weights and activations",
                        (long long)n, (double)n * (double)m->per_block / 1048576.0, (double)avail / 1048576.0);
    if (n > INT32_MAX) n = INT32_MAX;
    *out = (int32_t)n;
    return QW_OK;
}

int32_t qwi_cuda_gemm_bucket(int32_t m) {
    if (m < 1) return 0;
    if (m > 256) return m > INT32_MAX - 255 ? INT32_MAX : (m + 255) / 256 * 256;
    int32_t b = 1;
    while (b < m) b *= 2;
    return b;
}

qwi_cuda_graph_action qwi_cuda_graph_next(qwi_cuda_graph_state s) {
    switch (s) {
    case QWI_GRAPH_WARM: return QWI_GRAPH_CAPTURE;
    case QWI_GRAPH_READY: return QWI_GRAPH_REPLAY;
    case QWI_GRAPH_NEW:
    case QWI_GRAPH_EAGER_ONLY:
    default: return QWI_GRAPH_RUN_EAGER;
    }
}

qwi_cuda_graph_state qwi_cuda_graph_after(qwi_cuda_graph_state s, qwi_cuda_graph_action a, bool ok) {
    switch (a) {
    case QWI_GRAPH_RUN_EAGER: return ok && s == QWI_GRAPH_NEW ? QWI_GRAPH_WARM : s;
    case QWI_GRAPH_CAPTURE: return ok ? QWI_GRAPH_READY : QWI_GRAPH_EAGER_ONLY;
    case QWI_GRAPH_REPLAY:
    default: return s;
    }
}

/* Whether seq s (q rows this step) is the decode kernel's: a decode row
 * (backend.h's is_decode), or without that array any one-row sequence. */
static bool decode_seq(const qwi_plan *p, int32_t s, int32_t q) {
    return q == 1 && (!p->is_decode || p->is_decode[s]);
}

void qwi_cuda_plan_count(const qwi_plan *p, int32_t block_size, qwi_cuda_plan_counts *c) {
    memset(c, 0, sizeof *c);
    c->decode_only = p->num_seqs > 0;
    c->bt_stride = 1;
    for (int32_t s = 0; s < p->num_seqs; s++) {
        int32_t q = p->query_start[s + 1] - p->query_start[s];
        const bool dec = decode_seq(p, s, q);
        if (!dec) c->decode_only = false;
        if (q > c->max_query_len) c->max_query_len = q;
        int32_t nb = QWI_DIV_UP(p->context_lens[s], block_size);
        if (nb > c->bt_stride) c->bt_stride = nb;
        /* decode rows go to the decode kernel in every step, as they do
         * alone; prompt rows to prefill tiles, a chunk of one row too, as
         * they do in a chunk of many (batch invariance, docs/cuda.md) */
        if (dec) {
            c->num_decode_rows++;
            if (p->context_lens[s] > c->max_decode_ctx) c->max_decode_ctx = p->context_lens[s];
        }
        else c->num_tiles += QWI_DIV_UP(q, QWI_CUDA_PREFILL_TILE);
        bool want = p->want_logits && p->want_logits[s];
        if ((p->do_sample[s] || want) && q > 0) {
            c->num_logit_rows++;
            if (p->do_sample[s] && p->sampling[s].banned) c->num_banned += p->sampling[s].num_banned;
        }
    }
    if (c->bt_stride > p->max_blocks_per_seq && p->max_blocks_per_seq > 0) c->bt_stride = p->max_blocks_per_seq;
}

static size_t up16(size_t x) { return (x + 15) & ~(size_t)15; }

void qwi_cuda_plan_layout_make(qwi_cuda_plan_layout *L, int32_t tpad, int32_t spad, int32_t lpad,
                               int32_t bt_stride, int32_t nbanned, int32_t ntiles) {
    memset(L, 0, sizeof *L);
    L->tpad = tpad;
    L->spad = spad;
    L->lpad = lpad;
    L->bt_stride = bt_stride < 1 ? 1 : bt_stride;
    L->nbanned_cap = nbanned < 1 ? 1 : nbanned;
    L->ntiles_cap = ntiles < 1 ? 1 : ntiles;
    size_t o = 0;
#define PUT(field, bytes) do { L->field = o; o = up16(o + (size_t)(bytes)); } while (0)
    PUT(hdr, sizeof(qwi_cuda_step_hdr));
    PUT(token_ids, 4 * (size_t)tpad);
    PUT(positions, 4 * (size_t)tpad);
    PUT(slot_mapping, 4 * (size_t)tpad);
    PUT(row_seq, 4 * (size_t)tpad);
    PUT(query_start, 4 * ((size_t)spad + 1));
    PUT(context_lens, 4 * (size_t)spad);
    PUT(decode_seq, 4 * (size_t)spad);
    PUT(logit_rows, 4 * (size_t)lpad);
    PUT(logit_seq, 4 * (size_t)lpad);
    PUT(temperature, 4 * (size_t)lpad);
    PUT(top_p, 4 * (size_t)lpad);
    PUT(min_p, 4 * (size_t)lpad);
    PUT(top_k, 4 * (size_t)lpad);
    PUT(do_sample, 4 * (size_t)lpad);
    PUT(sample_pos, 8 * (size_t)lpad);
    PUT(seed, 8 * (size_t)lpad);
    PUT(banned_start, 4 * ((size_t)lpad + 1));
    PUT(tiles, 8 * (size_t)L->ntiles_cap);
    PUT(banned, 4 * (size_t)L->nbanned_cap);
    PUT(block_tables, 4 * (size_t)spad * (size_t)L->bt_stride);
#undef PUT
    L->total = o;
}

void qwi_cuda_plan_pack(const qwi_plan *p, const qwi_cuda_plan_counts *c,
                        const qwi_cuda_plan_layout *L, void *dst) {
    char *d = dst;
    memset(d, 0, L->total);
    const int32_t T = p->num_tokens, S = p->num_seqs;
    qwi_cuda_step_hdr *h = (qwi_cuda_step_hdr *)(d + L->hdr);
    h->num_tokens = T;
    h->num_seqs = S;
    h->bt_stride = L->bt_stride;
    h->num_logit_rows = c->num_logit_rows;
    h->num_banned = c->num_banned;
    h->max_query_len = c->max_query_len;
    h->num_prefill_tiles = c->num_tiles;

    int32_t *tok = (int32_t *)(d + L->token_ids), *pos = (int32_t *)(d + L->positions);
    int32_t *slot = (int32_t *)(d + L->slot_mapping), *rs = (int32_t *)(d + L->row_seq);
    if (T > 0) {
        memcpy(tok, p->token_ids, 4 * (size_t)T);
        memcpy(pos, p->positions, 4 * (size_t)T);
        memcpy(slot, p->slot_mapping, 4 * (size_t)T);
    }
    for (int32_t r = T; r < L->tpad; r++) {
        slot[r] = -1;
        rs[r] = -1;
    }
    int32_t *qs = (int32_t *)(d + L->query_start), *cl = (int32_t *)(d + L->context_lens);
    int32_t *bt = (int32_t *)(d + L->block_tables), *tiles = (int32_t *)(d + L->tiles);
    int32_t *dseq = (int32_t *)(d + L->decode_seq);   /* padded seqs: 0 (memset) */
    int32_t nt = 0;
    for (int32_t s = 0; s < S; s++) {
        qs[s] = p->query_start[s];
        cl[s] = p->context_lens[s];
        const int32_t q0 = p->query_start[s], q1 = p->query_start[s + 1];
        const bool dec = decode_seq(p, s, q1 - q0);
        dseq[s] = dec;
        for (int32_t r = q0; r < q1; r++) rs[r] = s;
        for (int32_t r = q0; !dec && r < q1; r += QWI_CUDA_PREFILL_TILE) {   /* as in plan_count */
            tiles[2 * nt] = s;
            tiles[2 * nt + 1] = r;
            nt++;
        }
        const int32_t *src = p->block_tables + (int64_t)s * p->max_blocks_per_seq;
        int32_t used = QWI_MIN(L->bt_stride, p->max_blocks_per_seq);
        memcpy(bt + (int64_t)s * L->bt_stride, src, 4 * (size_t)used);
    }
    for (int32_t s = S; s <= L->spad; s++) qs[s] = T;

    int32_t *lr = (int32_t *)(d + L->logit_rows), *ls = (int32_t *)(d + L->logit_seq);
    float *tp = (float *)(d + L->temperature), *topp = (float *)(d + L->top_p), *minp = (float *)(d + L->min_p);
    int32_t *topk = (int32_t *)(d + L->top_k), *ds = (int32_t *)(d + L->do_sample);
    int64_t *sp = (int64_t *)(d + L->sample_pos);
    uint64_t *seed = (uint64_t *)(d + L->seed);
    int32_t *bs = (int32_t *)(d + L->banned_start), *ban = (int32_t *)(d + L->banned);
    int32_t n = 0, nb = 0;
    for (int32_t s = 0; s < S; s++) {
        bool want = p->want_logits && p->want_logits[s];
        int32_t q0 = p->query_start[s], q1 = p->query_start[s + 1];
        if (!(p->do_sample[s] || want) || q1 == q0) continue;
        lr[n] = q1 - 1;
        ls[n] = s;
        bs[n] = nb;
        if (p->do_sample[s]) {
            const qwi_sampling *sm = &p->sampling[s];
            ds[n] = 1;
            tp[n] = sm->temperature;
            topp[n] = sm->top_p;
            minp[n] = sm->min_p;
            topk[n] = sm->top_k;
            seed[n] = sm->seed;
            sp[n] = p->context_lens[s];
            for (int32_t j = 0; sm->banned && j < sm->num_banned; j++) ban[nb++] = sm->banned[j];
        } else {
            tp[n] = 0;
            topp[n] = 1;
        }
        n++;
    }
    for (int32_t i = n; i < L->lpad; i++) {
        ls[i] = -1;
        bs[i] = nb;
        topp[i] = 1;
    }
    bs[L->lpad] = nb;
}

qw_status qwi_cuda_fp8_gemm_mode(const char *env, bool *block) {
    *block = true;
    if (!env || !*env || !strcmp(env, "auto")) return QW_OK;
    if (!strcmp(env, "dequant")) {
        *block = false;
        return QW_OK;
    }
    return qwi_fail(QW_ERR_INVALID_ARGUMENT, "QWINFER_CUDA_FP8_GEMM=\"%s\": expected auto or dequant", env);
}
