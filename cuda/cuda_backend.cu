/*
 * cuda_backend.cu - the CUDA backend: owns the device, the BF16 weights,
 * the KV pool, the activation buffers, the cuBLASLt GEMMs and the decode
 * graphs, and runs one plan per forward() (see docs/cuda.md):
 *
 *   plan -> one pinned buffer (qwi_cuda_plan_pack) -> one H2D copy
 *   x = embed; per layer: h = norm(x); qkv = h Wqkv^T (f32);
 *     q, K/V pages = qk_norm_rope_kv(qkv); att = attention(q, pages);
 *     x += att Wo^T, h = norm(x) (fused); gu = h Wgu^T (f32);
 *     act = silu(g) * u; x += act Wd^T (fused into the next norm)
 *   logit rows: hf = final_norm(x[row]); logits = hf Wlm^T; sample
 *   -> only the sampled ids (and wanted logits) come back.
 *
 * Decode-only steps run as a CUDA graph per batch bucket (1, 2, 4, ...,
 * max_num_seqs), padded to the bucket; mixed steps run eagerly.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backend.h"
#include "cuda_host.h"
#include "progress.h"
}
#include "gemm.h"
#include "kernels.h"
#include "penalties_cuda.h"
#include "logprobs_cuda.h"

#define GRAPH_BANNED_CAP 1024
#define EAGER_BANNED_CAP 65536
#define MAX_SPLITS 16
#define KV_RESERVE (256ull << 20)

typedef struct cu_layer {
    qwk_bf16 *wqkv, *wo, *wgu, *wd;
    float *in_norm, *post_norm, *q_norm, *k_norm, *qkv_bias;
} cu_layer;

typedef struct cu_graph {
    cudaGraphExec_t exec;
    int32_t splits;
    qwi_cuda_graph_state state;  /* qwi_cuda_graph_next/after (cuda_host.h) */
} cu_graph;

typedef struct cu_backend {
    qwi_backend base;
    qwi_config cfg;
    qwi_backend_config bc;
    int device;
    int num_sms;
    cudaStream_t stream;
    qwk_gemm *gemm;

    void *wmem;                 /* every weight, one allocation           */
    cu_layer *layers;
    qwk_bf16 *embed, *lm_head;
    float *final_norm;
    double *inv_freq;

    void *amem;                 /* every activation, one allocation       */
    float *x, *qkv, *delta, *gu, *logits, *part_o, *part_lse;
    qwk_bf16 *h, *q, *att, *act, *hf;
    double *sscratch;
    int32_t *d_sampled, *d_copy;
    void *ws;

    qwk_bf16 *kv;               /* [layer][K|V][num_blocks*bs*nkv*hd]     */
    size_t plane_elems;

    void *d_plan, *h_plan;      /* device / pinned host, plan_cap bytes   */
    size_t plan_cap;
    int32_t *h_sampled;

    int32_t tmax, smax, lmax;   /* activation rows, seqs, logit rows      */
    int32_t buckets[QWI_CUDA_MAX_BUCKETS];
    int nbuckets;
    cu_graph graphs[QWI_CUDA_MAX_BUCKETS];
    qwi_cuda_penalties pen;     /* penalties and logit bias (penalties.cu) */
    int32_t graph_failures;     /* captures that fell back to eager       */
    qwk_logprobs *lp;           /* logprobs buffers, made on first use     */
    int32_t *lp_rows;           /* host scratch of step_logprobs: k, rows, */
    qw_logprob **lp_dst;        /*   targets [3][lmax]; dst [lmax]; made on
                                     first use, kept (no per-step malloc)  */
} cu_backend;

static qw_status cu_fail(cudaError_t e, const char *what) {
    qw_status st = e == cudaErrorMemoryAllocation ? QW_ERR_OUT_OF_MEMORY : QW_ERR_INTERNAL;
    return qwi_fail(st, "cuda: %s: %s", what, cudaGetErrorString(e));
}
#define CK(call, what) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) return cu_fail(e_, what); } while (0)

static void cu_destroy(qwi_backend *base) {
    cu_backend *b = (cu_backend *)base;
    if (!b) return;
    if (b->stream) cudaStreamSynchronize(b->stream);
    for (int i = 0; i < QWI_CUDA_MAX_BUCKETS; i++)
        if (b->graphs[i].exec) cudaGraphExecDestroy(b->graphs[i].exec);
    qwk_gemm_destroy(b->gemm);
    cudaFree(b->wmem);
    cudaFree(b->amem);
    cudaFree(b->kv);
    cudaFree(b->d_plan);
    cudaFreeHost(b->h_plan);
    cudaFreeHost(b->h_sampled);
    qwi_cuda_penalties_free(&b->pen);
    qwk_logprobs_free(b->lp);
    free(b->lp_rows);
    free(b->lp_dst);
    if (b->stream) cudaStreamDestroy(b->stream);
    free(b->layers);
    free(b);
}

/* ---- weights --------------------------------------------------------------- */

static size_t al256(size_t x) { return (x + 255) & ~(size_t)255; }

/* Host conversion of n elements to bf16 or f32. */
static void to_bf16(const qwi_tensor *t, uint16_t *dst, size_t n) {
    if (t->dtype == QWI_DTYPE_BF16) {
        memcpy(dst, t->data, n * 2);
    } else if (t->dtype == QWI_DTYPE_F32) {
        const float *s = (const float *)t->data;
        for (size_t i = 0; i < n; i++) {
            float f;
            memcpy(&f, s + i, 4);
            dst[i] = qwi_f32_to_bf16(f);
        }
    } else {
        const uint16_t *s = (const uint16_t *)t->data;
        for (size_t i = 0; i < n; i++) dst[i] = qwi_f32_to_bf16(qwi_f16_to_f32(s[i]));
    }
}
static void to_f32(const qwi_tensor *t, float *dst, size_t n) {
    const uint16_t *s = (const uint16_t *)t->data;
    for (size_t i = 0; i < n; i++) {
        if (t->dtype == QWI_DTYPE_F32) memcpy(dst + i, (const float *)t->data + i, 4);
        else if (t->dtype == QWI_DTYPE_BF16) dst[i] = qwi_bf16_to_f32(s[i]);
        else dst[i] = qwi_f16_to_f32(s[i]);
    }
}

typedef struct uploader {
    void *host;
    size_t cap;
    qwi_progress *progress;     /* qw_engine_create's, or NULL */
} uploader;

static qw_status upload(uploader *u, void *dst, const qwi_tensor *t, size_t n, bool as_f32, const char *what) {
    if (!t->data) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cuda: %s has no data", what);
    if ((size_t)t->nbytes / (t->dtype == QWI_DTYPE_F32 ? 4 : 2) < n)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cuda: %s has %zu bytes, expected %zu elements", what,
                        t->nbytes, n);
    size_t bytes = n * (as_f32 ? 4 : 2);
    if (!as_f32 && t->dtype == QWI_DTYPE_BF16) {
        CK(cudaMemcpy(dst, t->data, bytes, cudaMemcpyHostToDevice), "weight upload");
        return qwi_progress_add(u->progress, t->nbytes);
    }
    if (u->cap < bytes) {
        free(u->host);
        u->host = malloc(bytes);
        u->cap = u->host ? bytes : 0;
        if (!u->host) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "cuda: staging %zu bytes for %s", bytes, what);
    }
    if (as_f32) to_f32(t, (float *)u->host, n);
    else to_bf16(t, (uint16_t *)u->host, n);
    CK(cudaMemcpy(dst, u->host, bytes, cudaMemcpyHostToDevice), "weight upload");
    return qwi_progress_add(u->progress, t->nbytes);
}

static qw_status setup_weights(cu_backend *b, const qwi_model *m) {
    const qwi_config *c = &b->cfg;
    const size_t H = c->hidden_size, I = c->intermediate_size, hd = c->head_dim, V = c->vocab_size;
    const size_t qd = (size_t)c->num_heads * hd, kvd = (size_t)c->num_kv_heads * hd, qkvd = qd + 2 * kvd;
    const bool tied = m->lm_head.data == m->embed.data;
    size_t per_layer = al256(qkvd * H * 2) + al256(H * qd * 2) + al256(2 * I * H * 2) + al256(H * I * 2) +
                       2 * al256(H * 4) + 2 * al256(hd * 4) + al256(qkvd * 4);
    size_t total = al256(V * H * 2) * (tied ? 1 : 2) + al256(H * 4) + al256(hd / 2 * 8) + per_layer * c->num_layers;
    CK(cudaMalloc(&b->wmem, total), "weights allocation");
    b->layers = (cu_layer *)calloc((size_t)c->num_layers, sizeof(cu_layer));
    if (!b->layers) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "cuda: layer table");
    char *p = (char *)b->wmem;
#define TAKE(ptr, type, bytes) do { ptr = (type *)p; p += al256(bytes); } while (0)
    TAKE(b->embed, qwk_bf16, V * H * 2);
    if (tied) b->lm_head = b->embed;
    else TAKE(b->lm_head, qwk_bf16, V * H * 2);
    TAKE(b->final_norm, float, H * 4);
    TAKE(b->inv_freq, double, hd / 2 * 8);
    uploader u = {NULL, 0, b->bc.progress};
    qw_status st = QW_OK;
#define UP(dst, t, n, f32, what) do { if ((st = upload(&u, dst, t, n, f32, what)) != QW_OK) goto out; } while (0)
    UP(b->embed, &m->embed, V * H, false, "embed_tokens");
    if (!tied) UP(b->lm_head, &m->lm_head, V * H, false, "lm_head");
    UP(b->final_norm, &m->final_norm, H, true, "norm");
    {
        double *f = (double *)malloc(hd / 2 * sizeof(double));
        if (!f) { st = qwi_fail(QW_ERR_OUT_OF_MEMORY, "cuda: rope table"); goto out; }
        for (size_t i = 0; i < hd / 2; i++) f[i] = pow(c->rope_theta, -2.0 * (double)i / (double)hd);
        cudaError_t e = cudaMemcpy(b->inv_freq, f, hd / 2 * sizeof(double), cudaMemcpyHostToDevice);
        free(f);
        if (e != cudaSuccess) { st = cu_fail(e, "rope table"); goto out; }
    }
    for (int l = 0; l < c->num_layers; l++) {
        const qwi_layer *ml = &m->layers[l];
        cu_layer *L = &b->layers[l];
        TAKE(L->wqkv, qwk_bf16, qkvd * H * 2);
        TAKE(L->wo, qwk_bf16, H * qd * 2);
        TAKE(L->wgu, qwk_bf16, 2 * I * H * 2);
        TAKE(L->wd, qwk_bf16, H * I * 2);
        TAKE(L->in_norm, float, H * 4);
        TAKE(L->post_norm, float, H * 4);
        TAKE(L->q_norm, float, hd * 4);
        TAKE(L->k_norm, float, hd * 4);
        TAKE(L->qkv_bias, float, qkvd * 4);
        UP(L->wqkv, &ml->q_proj, qd * H, false, "q_proj");
        UP(L->wqkv + qd * H, &ml->k_proj, kvd * H, false, "k_proj");
        UP(L->wqkv + (qd + kvd) * H, &ml->v_proj, kvd * H, false, "v_proj");
        UP(L->wo, &ml->o_proj, H * qd, false, "o_proj");
        UP(L->wgu, &ml->gate_proj, I * H, false, "gate_proj");
        UP(L->wgu + I * H, &ml->up_proj, I * H, false, "up_proj");
        UP(L->wd, &ml->down_proj, H * I, false, "down_proj");
        UP(L->in_norm, &ml->input_norm, H, true, "input_layernorm");
        UP(L->post_norm, &ml->post_norm, H, true, "post_attention_layernorm");
        if (c->qk_norm) {
            UP(L->q_norm, &ml->q_norm, hd, true, "q_norm");
            UP(L->k_norm, &ml->k_norm, hd, true, "k_norm");
        } else {
            L->q_norm = L->k_norm = NULL;
        }
        if (c->qkv_bias) {
            UP(L->qkv_bias, &ml->q_bias, qd, true, "q_proj.bias");
            UP(L->qkv_bias + qd, &ml->k_bias, kvd, true, "k_proj.bias");
            UP(L->qkv_bias + qd + kvd, &ml->v_bias, kvd, true, "v_proj.bias");
        } else {
            L->qkv_bias = NULL;
        }
    }
#undef UP
out:
    free(u.host);
    return st;
}

/* ---- activations, plan buffers, KV ------------------------------------------ */

static qw_status setup_activations(cu_backend *b) {
    const qwi_config *c = &b->cfg;
    const size_t H = c->hidden_size, I = c->intermediate_size, hd = c->head_dim, V = c->vocab_size;
    const size_t qd = (size_t)c->num_heads * hd, kvd = (size_t)c->num_kv_heads * hd;
    const size_t T = b->tmax, Lr = b->lmax;
    size_t splits_rows = 0;   /* max over buckets of bucket * splits */
    for (int i = 0; i < b->nbuckets; i++) {
        size_t r = (size_t)b->buckets[i] *
                   qwi_cuda_decode_splits(b->buckets[i], c->num_kv_heads, b->num_sms, MAX_SPLITS);
        if (r > splits_rows) splits_rows = r;
    }
    size_t sz[16] = {
        T * H * 4, T * (qd + 2 * kvd) * 4, T * H * 4, T * 2 * I * 4, Lr * V * 4,
        splits_rows * c->num_heads * hd * 4, splits_rows * c->num_heads * 4,
        T * H * 2, T * qd * 2, T * qd * 2, T * I * 2, Lr * H * 2, Lr * V * 8, Lr * 4, 4096 * 4,
        QWK_GEMM_WORKSPACE};
    size_t total = 0;
    for (int i = 0; i < 16; i++) total += al256(sz[i]);
    CK(cudaMalloc(&b->amem, total), "activation allocation");
    char *p = (char *)b->amem;
    void **dst[16] = {(void **)&b->x, (void **)&b->qkv, (void **)&b->delta, (void **)&b->gu,
                      (void **)&b->logits, (void **)&b->part_o, (void **)&b->part_lse, (void **)&b->h,
                      (void **)&b->q, (void **)&b->att, (void **)&b->act, (void **)&b->hf,
                      (void **)&b->sscratch, (void **)&b->d_sampled, (void **)&b->d_copy, &b->ws};
    for (int i = 0; i < 16; i++) {
        *dst[i] = p;
        p += al256(sz[i]);
    }
    /* plan capacity: the largest eager step and the largest graph bucket */
    qwi_cuda_plan_layout L1, L2;
    int32_t mbps = b->bc.max_model_len > 0 ? QWI_DIV_UP(b->bc.max_model_len, b->bc.block_size)
                                           : QWI_DIV_UP(c->max_position_embeddings, b->bc.block_size);
    qwi_cuda_plan_layout_make(&L1, b->tmax, b->smax, b->lmax, mbps, EAGER_BANNED_CAP,
                              b->tmax / QWI_CUDA_PREFILL_TILE + b->smax);
    qwi_cuda_plan_layout_make(&L2, b->smax, b->smax, b->smax, mbps, GRAPH_BANNED_CAP, b->smax);
    b->plan_cap = L1.total > L2.total ? L1.total : L2.total;
    CK(cudaMalloc(&b->d_plan, b->plan_cap), "plan buffer");
    CK(cudaMallocHost(&b->h_plan, b->plan_cap), "pinned plan buffer");
    CK(cudaMallocHost((void **)&b->h_sampled, (size_t)b->lmax * 4), "pinned sample buffer");
    if (qwk_gemm_create(b->ws, &b->gemm) != 0) return qwi_fail(QW_ERR_INTERNAL, "cuda: cublasLtCreate failed");
    return QW_OK;
}

static qw_status setup_kv(cu_backend *b) {
    const qwi_config *c = &b->cfg;
    size_t per_block = qwi_cuda_kv_bytes_per_block(c, b->bc.block_size);
    size_t free_b = 0, total_b = 0;
    CK(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    qwi_cuda_mem mm;
    mm.total = total_b;
    mm.free_now = free_b;
    mm.reserve = KV_RESERVE;
    mm.per_block = per_block;
    mm.max_useful_blocks = b->bc.max_model_len > 0
        ? (int64_t)b->bc.max_num_seqs * QWI_DIV_UP(b->bc.max_model_len, b->bc.block_size) : 0;
    int32_t nb = 0;
    qw_status st = qwi_cuda_kv_blocks(&mm, b->bc.num_blocks, b->bc.kv_cache_bytes, b->bc.memory_fraction, &nb);
    if (st != QW_OK) return st;
    b->base.num_blocks = nb;
    b->bc.num_blocks = nb;
    b->plane_elems = (size_t)nb * b->bc.block_size * c->num_kv_heads * c->head_dim;
    CK(cudaMalloc((void **)&b->kv, per_block * (size_t)nb), "KV pool allocation");
    return QW_OK;
}

/* ---- forward ------------------------------------------------------------------ */

typedef struct step {
    qwi_cuda_plan_layout L;
    int32_t tpad, spad, lpad, ntiles, splits;
    bool decode;
} step;

#define DP(T, off) ((T *)((char *)b->d_plan + (off)))

static qw_status gemm(cu_backend *b, const void *x, const void *w, void *y, int f32, int32_t M, int32_t N, int32_t K) {
    int st = qwk_gemm_run(b->gemm, b->stream, x, w, y, f32, M, N, K);
    if (st) return qwi_fail(QW_ERR_INTERNAL, "cuda: cublasLtMatmul %dx%dx%d failed (status %d)", M, N, K, st);
    return QW_OK;
}

/* Everything from the embedding to the logits; reads only device memory, so
 * it can be captured. */
static qw_status run_model(cu_backend *b, const step *s) {
    const qwi_config *c = &b->cfg;
    const int32_t H = c->hidden_size, I = c->intermediate_size, hd = c->head_dim, V = c->vocab_size;
    const int32_t nh = c->num_heads, nkv = c->num_kv_heads, qd = nh * hd, qkvd = qd + 2 * nkv * hd;
    const float eps = (float)c->rms_norm_eps;
    const qwi_cuda_plan_layout *L = &s->L;
    const int32_t T = s->tpad;
    qw_status st;
    qwk_embed(b->embed, DP(int32_t, L->token_ids), T, H, b->x, b->stream);
    qwk_paged pg;
    pg.hdr = DP(int32_t, L->hdr);
    pg.query_start = DP(int32_t, L->query_start);
    pg.context_lens = DP(int32_t, L->context_lens);
    pg.positions = DP(int32_t, L->positions);
    pg.block_tables = DP(int32_t, L->block_tables);
    pg.block_size = b->bc.block_size;
    pg.nh = nh;
    pg.nkv = nkv;
    pg.hd = hd;
    pg.scale = (float)(1.0 / sqrt((double)hd));
    for (int l = 0; l < c->num_layers; l++) {
        const cu_layer *Ly = &b->layers[l];
        qwk_bf16 *kc = b->kv + (size_t)l * 2 * b->plane_elems, *vc = kc + b->plane_elems;
        qwk_add_rmsnorm(b->x, l ? b->delta : NULL, NULL, Ly->in_norm, T, H, eps, b->h, b->stream);
        if ((st = gemm(b, b->h, Ly->wqkv, b->qkv, 1, T, qkvd, H)) != QW_OK) return st;
        qwk_qk_norm_rope_kv(b->qkv, Ly->qkv_bias, Ly->q_norm, Ly->k_norm, b->inv_freq, pg.positions,
                            DP(int32_t, L->slot_mapping), T, nh, nkv, hd, eps, b->q, kc, vc, b->stream);
        pg.k_cache = kc;
        pg.v_cache = vc;
        if (s->decode)
            qwk_decode_attention(&pg, b->q, s->spad, s->splits, b->part_o, b->part_lse, b->att, b->stream);
        else
            qwk_prefill_attention(&pg, b->q, DP(int32_t, L->tiles), s->ntiles, b->att, b->stream);
        if ((st = gemm(b, b->att, Ly->wo, b->delta, 1, T, H, qd)) != QW_OK) return st;
        qwk_add_rmsnorm(b->x, b->delta, NULL, Ly->post_norm, T, H, eps, b->h, b->stream);
        if ((st = gemm(b, b->h, Ly->wgu, b->gu, 1, T, 2 * I, H)) != QW_OK) return st;
        qwk_silu_mul(b->gu, T, I, b->act, b->stream);
        if ((st = gemm(b, b->act, Ly->wd, b->delta, 1, T, H, I)) != QW_OK) return st;
    }
    qwk_add_rmsnorm(b->x, b->delta, DP(int32_t, L->logit_rows), b->final_norm, s->lpad, H, eps, b->hf, b->stream);
    return gemm(b, b->hf, b->lm_head, b->logits, 1, s->lpad, V, H);
}

/* A capture or instantiation failed: run this bucket eagerly from now on.
 * Silent (the library never prints): it costs speed, not results, and
 * graph_failures counts it for a debugger or a test. */
static void graph_fallback(cu_backend *b, cu_graph *g) {
    cudaGetLastError();   /* a failed capture leaves a non-sticky error behind */
    if (g->exec) cudaGraphExecDestroy(g->exec);
    g->exec = NULL;
    g->state = qwi_cuda_graph_after(g->state, QWI_GRAPH_CAPTURE, false);
    b->graph_failures++;
}

/* A decode-only step of bucket bi: eager warm-up, then capture, then replay
 * (cuda_host.h's graph states). Never fails because of graphs. */
static qw_status run_decode_step(cu_backend *b, const step *s, int bi) {
    cu_graph *g = &b->graphs[bi];
    qwi_cuda_graph_action a = qwi_cuda_graph_next(g->state);
    if (a == QWI_GRAPH_REPLAY) {
        CK(cudaGraphLaunch(g->exec, b->stream), "graph launch");
        return QW_OK;
    }
    if (a == QWI_GRAPH_RUN_EAGER) {
        qw_status st = run_model(b, s);
        g->state = qwi_cuda_graph_after(g->state, a, st == QW_OK);
        return st;
    }
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        graph_fallback(b, g);
        return run_model(b, s);
    }
    qw_status st = run_model(b, s);
    e = cudaStreamEndCapture(b->stream, &graph);
    if (st != QW_OK || e != cudaSuccess) {
        if (e == cudaSuccess && graph) cudaGraphDestroy(graph);
        graph_fallback(b, g);
        return run_model(b, s);
    }
    e = cudaGraphInstantiate(&g->exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        g->exec = NULL;
        graph_fallback(b, g);
        return run_model(b, s);
    }
    g->splits = s->splits;
    g->state = qwi_cuda_graph_after(g->state, a, true);
    CK(cudaGraphLaunch(g->exec, b->stream), "graph launch");
    return QW_OK;
}

static qw_status check_plan(const cu_backend *b, const qwi_plan *p) {
    const int32_t T = p->num_tokens, S = p->num_seqs, bs = b->bc.block_size;
    const int64_t nslots = (int64_t)b->bc.num_blocks * bs;
    if (T < 0 || T > b->bc.max_num_batched_tokens || S < 0 || S > b->bc.max_num_seqs)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cuda: plan has %d tokens, %d sequences (most %d, %d)", T, S,
                        b->bc.max_num_batched_tokens, b->bc.max_num_seqs);
    if (S == 0) return T == 0 ? QW_OK : qwi_fail(QW_ERR_INVALID_ARGUMENT, "cuda: plan has tokens but no sequence");
    if (!p->token_ids || !p->positions || !p->slot_mapping || !p->query_start || !p->context_lens ||
        !p->block_tables || !p->do_sample || !p->sampled)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cuda: plan arrays are NULL");
    if (p->query_start[0] != 0 || p->query_start[S] != T)
        return qwi_fail(QW_ERR_INTERNAL, "cuda: query_start spans [%d, %d), expected [0, %d)", p->query_start[0],
                        p->query_start[S], T);
    for (int32_t s = 0; s < S; s++) {
        int32_t q0 = p->query_start[s], q1 = p->query_start[s + 1], ctx = p->context_lens[s];
        if (q1 < q0 || ctx < q1 - q0 || ctx > (int64_t)p->max_blocks_per_seq * bs)
            return qwi_fail(QW_ERR_INTERNAL, "cuda: seq %d: rows [%d, %d), context %d", s, q0, q1, ctx);
        if ((p->do_sample[s] || (p->want_logits && p->want_logits[s])) && q1 == q0)
            return qwi_fail(QW_ERR_INTERNAL, "cuda: seq %d wants a token but has no rows", s);
        if (p->do_sample[s] && !p->sampling)
            return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cuda: plan samples but has no sampling params");
        if (p->want_logits && p->want_logits[s] && !p->logits_out)
            return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cuda: plan wants logits but logits_out is NULL");
        const int32_t *bt = p->block_tables + (int64_t)s * p->max_blocks_per_seq;
        for (int32_t i = 0; i < QWI_DIV_UP(ctx, bs); i++)
            if (bt[i] < 0 || bt[i] >= b->bc.num_blocks)
                return qwi_fail(QW_ERR_INTERNAL, "cuda: seq %d: block table entry %d is %d (pool %d)", s, i, bt[i],
                                b->bc.num_blocks);
        for (int32_t r = q0; r < q1; r++) {
            if (p->token_ids[r] < 0 || p->token_ids[r] >= b->cfg.vocab_size)
                return qwi_fail(QW_ERR_TOKEN_OUT_OF_RANGE, "cuda: row %d: token id %d outside [0, %d)", r,
                                p->token_ids[r], b->cfg.vocab_size);
            if (p->positions[r] < 0 || p->positions[r] >= ctx || p->slot_mapping[r] < 0 ||
                p->slot_mapping[r] >= nslots)
                return qwi_fail(QW_ERR_INTERNAL, "cuda: row %d: position %d or slot %d out of range", r,
                                p->positions[r], p->slot_mapping[r]);
        }
    }
    return QW_OK;
}

/* One pass of prompt logprobs over rows[0..n) (n <= lmax): final norm of
 * x + delta (the last layer's residual, which run_model leaves intact),
 * lm_head into the logits buffer, reduction to the pairs at dst. */
static qw_status prompt_pass(cu_backend *b, const int32_t *rows, const int32_t *k, const int32_t *tg,
                             qw_logprob *const *dst, int32_t n) {
    const int32_t V = b->cfg.vocab_size, H = b->cfg.hidden_size;
    cudaError_t e;
    const int32_t *d_rows = qwk_logprobs_upload_rows(&b->lp, b->lmax, rows, n, b->stream, &e);
    if (!d_rows) return cu_fail(e, "prompt logprobs rows");
    qwk_add_rmsnorm(b->x, b->delta, d_rows, b->final_norm, n, H, (float)b->cfg.rms_norm_eps, b->hf, b->stream);
    qw_status st = gemm(b, b->hf, b->lm_head, b->logits, 1, n, V, H);
    if (st != QW_OK) return st;
    CK(qwk_logprobs_reduce(&b->lp, b->lmax, b->logits, V, n, k, NULL, tg, dst, b->stream), "prompt logprobs");
    return QW_OK;
}

/* Logprobs of the step (lib/logprobs.h), after sampling: the sampled rows'
 * pairs from the logits still on device, then the marked prompt rows in
 * passes of lmax rows. Only the pairs come back; the host scratch is
 * allocated only in steps that ask. */
static qw_status step_logprobs(cu_backend *b, const qwi_plan *p, int32_t nrows, const int32_t *lseq) {
    const int32_t L = b->lmax;
    if (!b->lp_rows) b->lp_rows = (int32_t *)malloc((size_t)L * 3 * sizeof(int32_t));
    if (!b->lp_dst) b->lp_dst = (qw_logprob **)malloc((size_t)L * sizeof *b->lp_dst);
    if (!b->lp_rows || !b->lp_dst) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "cuda: logprobs scratch of %d rows", L);
    int32_t *k = b->lp_rows, *rows = k + L, *tg = k + 2 * L;
    qw_logprob **dst = b->lp_dst;
    for (int32_t i = 0; i < nrows; i++) {
        int32_t sq = lseq[i];
        k[i] = p->do_sample[sq] ? p->logprobs_n[sq] : -1;
        dst[i] = p->logprobs_out + (size_t)sq * QWI_LP_STRIDE;
    }
    cudaError_t e = qwk_logprobs_reduce(&b->lp, L, b->logits, b->cfg.vocab_size, nrows, k, b->d_sampled, NULL, dst,
                                        b->stream);
    qw_status st = e == cudaSuccess ? QW_OK : cu_fail(e, "logprobs");
    int32_t n = 0;
    for (int32_t sq = 0; st == QW_OK && sq < p->num_seqs; sq++) {
        if (p->prompt_logprobs_n[sq] < 0) continue;
        for (int32_t r = p->query_start[sq]; st == QW_OK && r < p->query_start[sq + 1]; r++) {
            if (p->prompt_target[r] < 0) continue;
            rows[n] = r;
            tg[n] = p->prompt_target[r];
            k[n] = p->prompt_logprobs_n[sq];
            dst[n] = p->prompt_logprobs_out + (size_t)r * QWI_LP_STRIDE;
            if (++n == L) {
                st = prompt_pass(b, rows, k, tg, dst, n);
                n = 0;
            }
        }
    }
    if (st == QW_OK && n > 0) st = prompt_pass(b, rows, k, tg, dst, n);
    return st;
}

static qw_status cu_forward(qwi_backend *base, const qwi_plan *p) {
    cu_backend *b = (cu_backend *)base;
    if (!b || !p) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cuda: forward: NULL backend or plan");
    qw_status st = check_plan(b, p);
    if (st != QW_OK) return st;
    for (int32_t s = 0; s < p->num_seqs; s++) p->sampled[s] = -1;
    if (p->num_tokens == 0) return QW_OK;
    CK(cudaSetDevice(b->device), "cudaSetDevice");

    qwi_cuda_plan_counts cnt;
    qwi_cuda_plan_count(p, b->bc.block_size, &cnt);
    step s;
    memset(&s, 0, sizeof s);
    int bi = -1;
    if (cnt.decode_only && cnt.num_banned <= GRAPH_BANNED_CAP) {
        int32_t B = qwi_cuda_bucket_for(b->buckets, b->nbuckets, p->num_seqs);
        for (int i = 0; i < b->nbuckets; i++)
            if (b->buckets[i] == B) bi = i;
        s.decode = true;
        s.tpad = s.spad = s.lpad = B;
        s.ntiles = B;
        s.splits = b->graphs[bi].exec ? b->graphs[bi].splits
                                      : qwi_cuda_decode_splits(B, b->cfg.num_kv_heads, b->num_sms, MAX_SPLITS);
        qwi_cuda_plan_layout_make(&s.L, B, B, B, cnt.bt_stride, GRAPH_BANNED_CAP, B);
    } else {
        if (cnt.num_banned > EAGER_BANNED_CAP)
            return qwi_fail(QW_ERR_UNSUPPORTED, "cuda: %d banned ids in one step (most %d)", cnt.num_banned,
                            EAGER_BANNED_CAP);
        s.tpad = p->num_tokens;
        s.spad = p->num_seqs;
        s.lpad = cnt.num_logit_rows;
        s.ntiles = cnt.num_tiles;
        qwi_cuda_plan_layout_make(&s.L, s.tpad, s.spad, s.lpad, cnt.bt_stride, cnt.num_banned, cnt.num_tiles);
    }
    if (s.L.total > b->plan_cap)
        return qwi_fail(QW_ERR_INTERNAL, "cuda: packed plan of %zu bytes exceeds %zu", s.L.total, b->plan_cap);
    qwi_cuda_plan_pack(p, &cnt, &s.L, b->h_plan);
    CK(cudaMemcpyAsync(b->d_plan, b->h_plan, s.L.total, cudaMemcpyHostToDevice, b->stream), "plan upload");
    st = bi >= 0 ? run_decode_step(b, &s, bi) : run_model(b, &s);
    if (st != QW_OK) return st;

    const int32_t V = b->cfg.vocab_size;
    const int32_t *lseq = (const int32_t *)((char *)b->h_plan + s.L.logit_seq);
    if (p->want_logits)
        for (int32_t i = 0; i < cnt.num_logit_rows; i++)
            if (p->want_logits[lseq[i]])
                CK(cudaMemcpyAsync(p->logits_out + (size_t)lseq[i] * V, b->logits + (size_t)i * V,
                                   (size_t)V * 4, cudaMemcpyDeviceToHost, b->stream), "logits copy-out");
    /* Penalties and bias on the logit rows, after the raw copy-out above,
     * undone after the sampler so logprobs read the raw logits. */
    if ((st = qwi_cuda_penalties_apply(&b->pen, p, lseq, cnt.num_logit_rows, b->logits, V, b->stream)) != QW_OK)
        return st;
    qwk_sample_args a;
    a.logits = b->logits;
    a.vocab = V;
    a.do_sample = DP(int32_t, s.L.do_sample);
    a.top_k = DP(int32_t, s.L.top_k);
    a.banned_start = DP(int32_t, s.L.banned_start);
    a.banned = DP(int32_t, s.L.banned);
    a.temperature = DP(float, s.L.temperature);
    a.top_p = DP(float, s.L.top_p);
    a.min_p = DP(float, s.L.min_p);
    a.position = DP(int64_t, s.L.sample_pos);
    a.seed = DP(uint64_t, s.L.seed);
    a.scratch = b->sscratch;
    a.out = b->d_sampled;
    qwk_sample(&a, s.lpad, b->stream);
    CK(cudaGetLastError(), "kernel launch");
    if ((st = qwi_cuda_penalties_restore(&b->pen, b->logits, V, b->stream)) != QW_OK) return st;
    CK(cudaMemcpyAsync(b->h_sampled, b->d_sampled, (size_t)s.lpad * 4, cudaMemcpyDeviceToHost, b->stream),
       "sampled ids copy-back");
    CK(cudaStreamSynchronize(b->stream), "step");
    for (int32_t i = 0; i < cnt.num_logit_rows; i++)
        if (p->do_sample[lseq[i]]) p->sampled[lseq[i]] = b->h_sampled[i];
    if (p->logprobs_n) return step_logprobs(b, p, cnt.num_logit_rows, lseq);
    return QW_OK;
}

static qw_status cu_copy_blocks(qwi_backend *base, const int32_t *src, const int32_t *dst, int32_t n) {
    cu_backend *b = (cu_backend *)base;
    for (int32_t i = 0; i < n; i++)
        if (src[i] < 0 || src[i] >= b->bc.num_blocks || dst[i] < 0 || dst[i] >= b->bc.num_blocks)
            return qwi_fail(QW_ERR_INTERNAL, "cuda: copy of block %d to %d outside the pool of %d", src[i], dst[i],
                            b->bc.num_blocks);
    const size_t block_bytes = (size_t)b->bc.block_size * b->cfg.num_kv_heads * b->cfg.head_dim * 2;
    CK(cudaSetDevice(b->device), "cudaSetDevice");
    for (int32_t i0 = 0; i0 < n; i0 += 2048) {
        int32_t m = QWI_MIN(2048, n - i0);
        CK(cudaMemcpyAsync(b->d_copy, src + i0, (size_t)m * 4, cudaMemcpyHostToDevice, b->stream), "copy_blocks");
        CK(cudaMemcpyAsync(b->d_copy + 2048, dst + i0, (size_t)m * 4, cudaMemcpyHostToDevice, b->stream), "copy_blocks");
        qwk_copy_blocks(b->kv, b->plane_elems * 2, 2 * b->cfg.num_layers, block_bytes, b->d_copy, b->d_copy + 2048, m,
                        b->stream);
        CK(cudaStreamSynchronize(b->stream), "copy_blocks");
    }
    return QW_OK;
}

static const qwi_backend_ops cu_ops = {"cuda", cu_forward, cu_copy_blocks, cu_destroy};

extern "C" qw_status qwi_cuda_backend_create(const qwi_model *model, const qwi_backend_config *bc,
                                             qwi_backend **out) {
    if (!out) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cuda: out is NULL");
    *out = NULL;
    if (!model || !bc) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cuda: NULL model or config");
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count <= 0) {
        const char *why = e != cudaSuccess ? cudaGetErrorString(e) : "no device found";
        cudaGetLastError();
        return qwi_fail(QW_ERR_NO_DEVICE, "cuda:%d: no CUDA device (%s)", bc->device_index, why);
    }
    if (bc->device_index < 0 || bc->device_index >= count)
        return qwi_fail(QW_ERR_NO_DEVICE, "cuda:%d: no such device (%d present)", bc->device_index, count);
    const qwi_config *c = &model->cfg;
    if (c->head_dim != 16 && c->head_dim != 32 && c->head_dim != 64 && c->head_dim != 128)
        return qwi_fail(QW_ERR_UNSUPPORTED, "cuda: head_dim %d (supported: 16, 32, 64, 128)", c->head_dim);
    if (c->num_kv_heads <= 0 || c->num_heads % c->num_kv_heads || c->num_heads / c->num_kv_heads > 8)
        return qwi_fail(QW_ERR_UNSUPPORTED, "cuda: %d query heads per kv head (at most 8)",
                        c->num_kv_heads > 0 ? c->num_heads / c->num_kv_heads : 0);
    if (bc->block_size <= 0 || bc->max_num_batched_tokens <= 0 || bc->max_num_seqs <= 0)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cuda: bad backend config");
    cu_backend *b = (cu_backend *)calloc(1, sizeof *b);
    if (!b) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "cuda: backend allocation");
    b->base.ops = &cu_ops;
    b->cfg = *c;
    b->bc = *bc;
    b->device = bc->device_index;
    qw_status st = QW_OK;
    cudaDeviceProp prop;
    if ((e = cudaSetDevice(b->device)) != cudaSuccess || (e = cudaGetDeviceProperties(&prop, b->device)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        st = qwi_fail(QW_ERR_NO_DEVICE, "cuda:%d: %s", b->device, cudaGetErrorString(e));
        goto fail;
    }
    if (prop.major < 8) {
        st = qwi_fail(QW_ERR_UNSUPPORTED, "cuda:%d: %s has compute capability %d.%d (need 8.0+)", b->device,
                      prop.name, prop.major, prop.minor);
        goto fail;
    }
    b->num_sms = prop.multiProcessorCount;
    {
        /* QWINFER_CUDA_GRAPHS=0 runs every step eagerly (vLLM's enforce_eager):
         * for debugging, and for tests/gpu/e2e.c's graph-vs-eager check */
        const char *gv = getenv("QWINFER_CUDA_GRAPHS");
        if (gv && !strcmp(gv, "0"))
            for (int i = 0; i < QWI_CUDA_MAX_BUCKETS; i++) b->graphs[i].state = QWI_GRAPH_EAGER_ONLY;
    }
    b->nbuckets = qwi_cuda_buckets(bc->max_num_seqs, b->buckets);
    b->smax = bc->max_num_seqs;
    b->tmax = QWI_MAX(bc->max_num_batched_tokens, b->buckets[b->nbuckets - 1]);
    b->lmax = b->smax;
    if ((e = qwk_attention_init(c->head_dim)) != cudaSuccess) {
        st = cu_fail(e, "attention kernel attributes");
        goto fail;
    }
    if ((st = setup_weights(b, model)) != QW_OK || (st = setup_activations(b)) != QW_OK ||
        (st = setup_kv(b)) != QW_OK)
        goto fail;
    /* The weights went up with cudaMemcpy on the legacy stream while steps
     * run on a non-blocking one, which does not wait for it: finish (and
     * surface any error of) every copy before the first step. */
    if ((e = cudaDeviceSynchronize()) != cudaSuccess) {
        st = cu_fail(e, "weight upload");
        goto fail;
    }
    *out = &b->base;
    return QW_OK;
fail:
    cu_destroy(&b->base);
    return st;
}
