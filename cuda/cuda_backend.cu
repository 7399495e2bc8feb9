/*
 * cuda_backend.cu - the CUDA backend: owns the device, the BF16 weights,
 * the KV pool, the activation buffers, the cuBLASLt GEMMs and the decode
 * graphs, and runs one plan per forward() (see docs/cuda.md):
 *
 *   plan -> one pinned buffer (qwi_cuda_plan_pack) -> one H2D copy
 *   x = embed; per layer: h = norm(x); qkv = h Wqkv^T (f32);
 *     q, K/V pages = qk_norm_rope_kv(qkv);
 *     att = attention(q, pages): prefill tiles for prompt chunks (any
 *       length), the decode kernel for decode rows, whatever the step holds;
 *     x += att Wo^T, h = norm(x) (fused); gu = h Wgu^T (f32);
 *     act = silu(g) * u; x += act Wd^T (fused into the next norm)
 *   logit rows: hf = final_norm(x[row]); logits = hf Wlm^T; sample
 *   -> only the sampled ids (and wanted logits) come back.
 *
 * Decode-only steps run as a CUDA graph per batch bucket (1, 2, 4, ...,
 * max_num_seqs), padded to the bucket; mixed steps run eagerly.
 *
 * Quantized linears (AWQ / GPTQ / FP8, lib/quant.h) keep their codes on the
 * device in quant.h's layout, fused like the bf16 ones; `linear` runs them
 * as a fused-dequantization GEMV for steps of up to QWK_QGEMV_MAX_M rows,
 * else as dequantize-to-bf16 + the same cuBLASLt GEMM. The KV cache is bf16
 * or fp8 (e4m3, one byte an element, with the checkpoint's per-layer
 * k_scale / v_scale from lib/kv_scales.c); QW_KV_CACHE_F32 is refused at
 * create.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backend.h"
#include "cuda_host.h"
#include "kv_scales.h"
#include "progress.h"
#include "quant_host.h"
}
#include "decode_splits.h"
#include "fp8_block.h"
#include "gemm.h"
#include "kernels.h"
#include "qgemm.h"
#include "quant.h"
#include "penalties_cuda.h"
#include "logprobs_cuda.h"

#define GRAPH_BANNED_CAP 1024
#define EAGER_BANNED_CAP 65536
#define KV_RESERVE (256ull << 20)

typedef struct cu_layer {
    qwk_bf16 *wqkv, *wo, *wgu, *wd;     /* NULL where that linear is quantized */
    qwk_qlinear qqkv, qo, qgu, qd;      /* fmt QWK_Q_NONE where it is bf16     */
    float *in_norm, *post_norm, *q_norm, *k_norm, *qkv_bias;
} cu_layer;

typedef struct cu_graph {
    cudaGraphExec_t exec;
    qwi_cuda_graph_state state;  /* qwi_cuda_graph_next/after (cuda_host.h) */
} cu_graph;

typedef struct cu_backend {
    qwi_backend base;
    qwi_config cfg;
    qwi_backend_config bc;
    int device;
    cudaStream_t stream;
    qwk_gemm *gemm;

    void *wmem;                 /* every weight, one allocation           */
    float *qg_ws;               /* qwk_qgemm's split-k partial sums, sized by
                                   setup_fp8 for every quantized linear and
                                   the head (NULL: none splits)            */
    size_t qg_ws_bytes;
    int32_t num_sms;            /* the device's multiprocessors: qwk_qgemm
                                   splits k to fill them                   */
    qwk_bf16 *qscratch;         /* bf16 copy of one quantized linear for the
                                   GEMM of steps over QWK_QGEMM_MAX_M rows
                                   (its own allocation, sized by setup_fp8
                                   for the linears that dequantize; NULL
                                   when none does) */
    size_t qscratch_bytes;      /* its size                                */
    size_t qscratch_all;        /* the size every quantized linear would need:
                                   what a late FP8 GEMM refusal grows it to */
    cu_layer *layers;
    qwk_bf16 *embed, *lm_head;  /* lm_head NULL where the head is quantized  */
    qwk_qlinear qhead;          /* fmt QWK_Q_NONE where the head is bf16   */
    bool fp8_gemm;              /* FP8 linears in 128 x 128 blocks take the
                                   block-scaled GEMM over QWK_QGEMV_MAX_M rows
                                   (fp8_block.h): sm_90, not turned off    */
    int fp8_refused;            /* cuBLAS status of the first refusal of that
                                   GEMM (then every step dequantizes); 0 none */
    uint8_t *xq;                /* the W8A8 linears' activations: e4m3
                                   [tmax4][widest k] (NULL: no W8A8 linear) */
    float *xs;                  /*   and scales [widest k / 128][tmax4]     */
    qwk_bf16 *xe;               /* decode's: their values in bf16 for the
                                   W8A8 GEMV, [min(tmax, 8)][widest k]      */
    bool graphs_stale;          /* a late FP8 GEMM refusal changed the path
                                   captured decode graphs run: recapture   */
    float *final_norm;
    double *inv_freq;

    void *amem;                 /* every activation, one allocation       */
    float *x, *qkv, *delta, *gu, *logits, *part_o, *part_lse;
    qwk_bf16 *h, *q, *att, *act, *hf;
    double *sscratch;
    int32_t *d_sampled, *d_copy;
    void *ws;

    void *kv;                   /* [layer][K|V][num_blocks*bs*nkv*hd]     */
    size_t plane_elems;
    int kv_elem;                /* bytes an element: 2 bf16, 1 fp8 e4m3   */
    float *kv_scale;            /* fp8: [2][num_layers] k_scale, v_scale  */

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
    cudaFree(b->xq);
    cudaFree(b->xs);
    cudaFree(b->xe);
    cudaFree(b->qscratch);
    cudaFree(b->qg_ws);
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
    free(b->kv_scale);
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
    if (!qwi_dtype_is_float(t->dtype))   /* F8_E4M3 / I32 come only through quantized linears */
        return qwi_fail(QW_ERR_FORMAT, "cuda: %s has dtype %s (F32, BF16 or F16 expected)", what,
                        qwi_dtype_name(t->dtype));
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

/* ---- quantized linears (quant.h) ------------------------------------------- */

/* The linears a layer fuses into one device weight (rows concatenated in
 * this order, all with k input columns): q|k|v, o, gate|up, down. */
typedef struct lin_group {
    int nl;
    int lin[3];          /* QWI_LIN_* */
    size_t rows[3];
    size_t k;
} lin_group;

static const char *const LIN_NAMES[QWI_LIN_COUNT] = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                     "gate_proj", "up_proj", "down_proj"};

static const char *qfmt_name(qwi_qfmt f) {
    return f == QWI_QFMT_U4 ? "int4" : f == QWI_QFMT_U8 ? "int8" : f == QWI_QFMT_E4M3 ? "fp8 e4m3" : "unknown";
}

static void layer_groups(const qwi_config *c, lin_group g[4]) {
    const size_t H = c->hidden_size, I = c->intermediate_size, hd = c->head_dim;
    const size_t qd = (size_t)c->num_heads * hd, kvd = (size_t)c->num_kv_heads * hd;
    g[0] = lin_group{3, {QWI_LIN_Q, QWI_LIN_K, QWI_LIN_V}, {qd, kvd, kvd}, H};
    g[1] = lin_group{1, {QWI_LIN_O, 0, 0}, {H, 0, 0}, qd};
    g[2] = lin_group{2, {QWI_LIN_GATE, QWI_LIN_UP, 0}, {I, I, 0}, H};
    g[3] = lin_group{1, {QWI_LIN_DOWN, 0, 0}, {H, 0, 0}, I};
}

static size_t group_rows(const lin_group *g) {
    size_t n = 0;
    for (int i = 0; i < g->nl; i++) n += g->rows[i];
    return n;
}

/* The device form of group g of layer l into *ql (pointers NULL): fmt
 * QWK_Q_NONE when every linear of g is plain, else their common format and
 * shape. QW_ERR_UNSUPPORTED naming the layer and linears when g mixes plain
 * and quantized linears, formats or group sizes (they share one weight). */
static qw_status group_format(const qwi_layer *ml, int l, const lin_group *g, qwk_qlinear *ql) {
    memset(ql, 0, sizeof *ql);
    const qwi_qweight *w0 = &ml->quant[g->lin[0]];
    const bool q0 = w0->method != QWI_QUANT_NONE;
    for (int i = 1; i < g->nl; i++) {
        const qwi_qweight *w = &ml->quant[g->lin[i]];
        const bool qi = w->method != QWI_QUANT_NONE;
        if (qi != q0)
            return qwi_fail(QW_ERR_UNSUPPORTED,
                            "cuda: layer %d: %s is %squantized but %s is %squantized; the CUDA backend fuses them "
                            "into one weight, so they must be quantized alike", l, LIN_NAMES[g->lin[0]],
                            q0 ? "" : "not ", LIN_NAMES[g->lin[i]], qi ? "" : "not ");
        if (qi && (w->fmt != w0->fmt || w->group_k != w0->group_k))
            return qwi_fail(QW_ERR_UNSUPPORTED,
                            "cuda: layer %d: %s (%s, group %lld) and %s (%s, group %lld) differ; the CUDA backend "
                            "fuses them into one weight", l, LIN_NAMES[g->lin[0]], qfmt_name(w0->fmt),
                            (long long)w0->group_k, LIN_NAMES[g->lin[i]], qfmt_name(w->fmt), (long long)w->group_k);
    }
    if (!q0) return QW_OK;
    for (int i = 0; i < g->nl; i++) {
        const qwi_qweight *w = &ml->quant[g->lin[i]];
        if (w->n != (int64_t)g->rows[i] || w->k != (int64_t)g->k)
            return qwi_fail(QW_ERR_INTERNAL, "cuda: layer %d: quantized %s is [%lld, %lld], expected [%zu, %zu]", l,
                            LIN_NAMES[g->lin[i]], (long long)w->n, (long long)w->k, g->rows[i], g->k);
    }
    const size_t n = group_rows(g);
    if (w0->fmt != QWI_QFMT_U4 && w0->fmt != QWI_QFMT_U8 && w0->fmt != QWI_QFMT_E4M3)
        return qwi_fail(QW_ERR_UNSUPPORTED, "cuda: layer %d: %s: quantized format %d", l, LIN_NAMES[g->lin[0]],
                        (int)w0->fmt);
    if (n > INT32_MAX || g->k > INT32_MAX || w0->group_k < 2 || w0->group_k > INT32_MAX ||
        (w0->fmt == QWI_QFMT_U4 && g->k % 2))
        return qwi_fail(QW_ERR_UNSUPPORTED, "cuda: layer %d: %s: quantized shape [%zu, %zu] group %lld", l,
                        LIN_NAMES[g->lin[0]], n, g->k, (long long)w0->group_k);
    ql->fmt = (int32_t)w0->fmt;
    ql->n = (int32_t)n;
    ql->k = (int32_t)g->k;
    ql->group_k = (int32_t)w0->group_k;
    ql->ngroups = (int32_t)qwi_qweight_groups(w0);
    return QW_OK;
}

/* Bytes of ql's block-scale grid (0 unless grid_ld is set). */
static size_t grid_bytes(const qwk_qlinear *ql) {
    return (size_t)(ql->n / QWI_CUDA_FP8_BLOCK) * (size_t)ql->grid_ld * 4;
}

/* Device bytes of a quantized linear in quant.h's layout. */
static size_t qlinear_bytes(const qwk_qlinear *ql) {
    const size_t sg = (size_t)ql->n * (size_t)ql->ngroups * 4;
    return al256(qwk_qcode_bytes(ql->fmt, ql->n, ql->k)) + al256(sg) + (ql->fmt != QWK_Q_E4M3 ? al256(sg) : 0) +
           al256(grid_bytes(ql));
}

/* Device bytes of group g in the form ql (bf16, or quant.h's layout). */
static size_t group_bytes(const lin_group *g, const qwk_qlinear *ql) {
    if (ql->fmt == QWK_Q_NONE) return al256(group_rows(g) * g->k * 2);
    return qlinear_bytes(ql);
}

/* The device form of a quantized output head (GPTQ "lm_head": true) into
 * *ql (pointers NULL), or fmt QWK_Q_NONE for a bf16 head.
 * QW_ERR_UNSUPPORTED for a format or shape the kernels do not take. */
static qw_status head_format(const qwi_model *m, qwk_qlinear *ql) {
    memset(ql, 0, sizeof *ql);
    const qwi_qweight *w = &m->lm_quant;
    if (w->method == QWI_QUANT_NONE) return QW_OK;
    if (w->n != m->cfg.vocab_size || w->k != m->cfg.hidden_size)
        return qwi_fail(QW_ERR_INTERNAL, "cuda: quantized lm_head is [%lld, %lld], expected [%d, %d]",
                        (long long)w->n, (long long)w->k, m->cfg.vocab_size, m->cfg.hidden_size);
    if ((w->fmt != QWI_QFMT_U4 && w->fmt != QWI_QFMT_U8) || w->n > INT32_MAX || w->k > INT32_MAX ||
        w->group_k < 2 || w->group_k > INT32_MAX || (w->fmt == QWI_QFMT_U4 && w->k % 2))
        return qwi_fail(QW_ERR_UNSUPPORTED, "cuda: quantized lm_head: %s [%lld, %lld] group %lld",
                        qfmt_name(w->fmt), (long long)w->n, (long long)w->k, (long long)w->group_k);
    ql->fmt = (int32_t)w->fmt;
    ql->n = (int32_t)w->n;
    ql->k = (int32_t)w->k;
    ql->group_k = (int32_t)w->group_k;
    ql->ngroups = (int32_t)qwi_qweight_groups(w);
    return QW_OK;
}

/* Point the quantized group ql at *p (advanced past it). */
static void group_take(char **p, qwk_qlinear *ql) {
    const size_t sg = (size_t)ql->n * (size_t)ql->ngroups * 4;
    ql->codes = (const uint8_t *)*p;
    *p += al256(qwk_qcode_bytes(ql->fmt, ql->n, ql->k));
    ql->scales = (const float *)*p;
    *p += al256(sg);
    if (ql->fmt != QWK_Q_E4M3) {
        ql->zeros = (const float *)*p;
        *p += al256(sg);
    }
    if (ql->grid_ld) {
        ql->grid = (const float *)*p;
        *p += al256(grid_bytes(ql));
    }
}

/* Host staging of at least bytes in u. */
static qw_status stage(uploader *u, size_t bytes, const char *what) {
    if (u->cap >= bytes) return QW_OK;
    free(u->host);
    u->host = malloc(bytes);
    u->cap = u->host ? bytes : 0;
    return u->host ? QW_OK : qwi_fail(QW_ERR_OUT_OF_MEMORY, "cuda: staging %zu bytes for %s", bytes, what);
}

/* upload_qlinears' rows; *grid_ok cleared when a row's scales break the
 * 128 x 128 blocks (grid NULL: no grid). */
static qw_status upload_qrows(uploader *u, const qwi_qweight *const *ws, const size_t *rows_of, int nl,
                              const qwk_qlinear *ql, const char *what, float *grid, bool *grid_ok) {
    const size_t K = (size_t)ql->k, G = (size_t)ql->ngroups;
    const size_t row_host = 8 * G + K;   /* scales, zeros, codes */
    size_t chunk = (16u << 20) / row_host;
    if (chunk < 1) chunk = 1;
    size_t most = 0;
    for (int i = 0; i < nl; i++) most = QWI_MAX(most, rows_of[i]);
    chunk = QWI_MIN(chunk, most);
    qw_status st = stage(u, chunk * row_host, what);
    if (st != QW_OK) return st;
    size_t off = 0;
    for (int i = 0; i < nl; i++) {
        const qwi_qweight *w = ws[i];
        for (size_t r0 = 0; r0 < rows_of[i]; r0 += chunk) {
            const size_t rows = QWI_MIN(chunk, rows_of[i] - r0);
            float *sc = (float *)u->host, *zp = sc + rows * G;
            uint8_t *codes = (uint8_t *)(zp + rows * G);
            qwi_cuda_qpack_rows(w, (int64_t)r0, (int64_t)(r0 + rows), codes, sc, zp);
            const size_t r = off + r0;
            if (grid && *grid_ok)
                *grid_ok = qwi_cuda_fp8_grid_rows(grid, ql->grid_ld, (int64_t)r, (int64_t)rows, sc, (int64_t)G);
            CK(cudaMemcpy((uint8_t *)ql->codes + qwk_qcode_bytes(ql->fmt, (int64_t)r, ql->k), codes,
                          qwk_qcode_bytes(ql->fmt, (int64_t)rows, ql->k), cudaMemcpyHostToDevice), "weight upload");
            CK(cudaMemcpy((float *)ql->scales + r * G, sc, rows * G * 4, cudaMemcpyHostToDevice), "weight upload");
            if (ql->zeros)
                CK(cudaMemcpy((float *)ql->zeros + r * G, zp, rows * G * 4, cudaMemcpyHostToDevice), "weight upload");
        }
        off += rows_of[i];
        const qwi_tensor *src[4] = {&w->qweight, &w->qzeros, &w->scales, &w->g_idx};
        for (int t = 0; t < 4; t++)
            if (src[t]->data && (st = qwi_progress_add(u->progress, src[t]->nbytes)) != QW_OK) return st;
    }
    return QW_OK;
}

/* Upload the quantized linears ws[0..nl) (rows[i] output rows each, the
 * same k) into ql's device layout: qwi_qweight_unpack_rows in chunks of
 * rows, U4 codes packed two per byte on the host, each linear at its row
 * offset of the fused weight. Where ql has a block-scale grid, it is
 * gathered from the rows' scales and uploaded too, or - the scales not
 * constant over the fused rows' 128 x 128 blocks - dropped (ql->grid NULL:
 * this linear dequantizes). Adds the source tensors' bytes to the
 * progress. what names the first linear in messages. */
static qw_status upload_qlinears(uploader *u, const qwi_qweight *const *ws, const size_t *rows_of, int nl,
                                 qwk_qlinear *ql, const char *what) {
    float *grid = NULL;
    bool grid_ok = ql->grid_ld > 0;
    if (grid_ok && !(grid = (float *)calloc(grid_bytes(ql), 1)))
        return qwi_fail(QW_ERR_OUT_OF_MEMORY, "cuda: FP8 block-scale grid of %s", what);
    qw_status st = upload_qrows(u, ws, rows_of, nl, ql, what, grid, &grid_ok);
    if (st == QW_OK && grid) {
        if (grid_ok) {
            cudaError_t e = cudaMemcpy((void *)ql->grid, grid, grid_bytes(ql), cudaMemcpyHostToDevice);
            if (e != cudaSuccess) st = cu_fail(e, "weight upload");
        } else {
            ql->grid = NULL;
        }
    }
    free(grid);
    return st;
}

/* upload_qlinears of group g of layer ml. */
static qw_status upload_qgroup(uploader *u, const qwi_layer *ml, const lin_group *g, qwk_qlinear *ql) {
    const qwi_qweight *ws[3];
    for (int i = 0; i < g->nl; i++) ws[i] = &ml->quant[g->lin[i]];
    return upload_qlinears(u, ws, g->rows, g->nl, ql, LIN_NAMES[g->lin[0]]);
}

static qw_status setup_weights(cu_backend *b, const qwi_model *m) {
    const qwi_config *c = &b->cfg;
    const size_t H = c->hidden_size, hd = c->head_dim, V = c->vocab_size;
    const size_t qd = (size_t)c->num_heads * hd, kvd = (size_t)c->num_kv_heads * hd, qkvd = qd + 2 * kvd;
    const bool qhead = m->lm_quant.method != QWI_QUANT_NONE;
    const bool tied = !qhead && m->lm_head.data == m->embed.data;
    qw_status hst = head_format(m, &b->qhead);
    if (hst != QW_OK) return hst;
    lin_group grp[4];
    layer_groups(c, grp);
    b->layers = (cu_layer *)calloc((size_t)c->num_layers, sizeof(cu_layer));
    if (!b->layers) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "cuda: layer table");
    /* first pass: each layer's form of its four fused linears, and sizes */
    size_t per_layer_rest = 2 * al256(H * 4) + 2 * al256(hd * 4) + al256(qkvd * 4);
    size_t total = al256(V * H * 2) * (tied || qhead ? 1 : 2) + al256(H * 4) + al256(hd / 2 * 8);
    if (qhead) total += qlinear_bytes(&b->qhead);
    for (int l = 0; l < c->num_layers; l++) {
        cu_layer *L = &b->layers[l];
        qwk_qlinear *ql[4] = {&L->qqkv, &L->qo, &L->qgu, &L->qd};
        for (int gi = 0; gi < 4; gi++) {
            qw_status st = group_format(&m->layers[l], l, &grp[gi], ql[gi]);
            if (st != QW_OK) return st;
            if (b->fp8_gemm && qwi_cuda_fp8_block_shape(ql[gi]->fmt, ql[gi]->n, ql[gi]->k, ql[gi]->group_k))
                ql[gi]->grid_ld = (int32_t)qwi_cuda_fp8_grid_ld(ql[gi]->k);
            total += group_bytes(&grp[gi], ql[gi]);
        }
        total += per_layer_rest;
    }
    CK(cudaMalloc(&b->wmem, total), "weights allocation");
    char *p = (char *)b->wmem;
#define TAKE(ptr, type, bytes) do { ptr = (type *)p; p += al256(bytes); } while (0)
    TAKE(b->embed, qwk_bf16, V * H * 2);
    if (qhead) {
        b->lm_head = NULL;
        group_take(&p, &b->qhead);
    } else if (tied) {
        b->lm_head = b->embed;
    } else {
        TAKE(b->lm_head, qwk_bf16, V * H * 2);
    }
    TAKE(b->final_norm, float, H * 4);
    TAKE(b->inv_freq, double, hd / 2 * 8);
    uploader u = {NULL, 0, b->bc.progress};
    qw_status st = QW_OK;
#define UP(dst, t, n, f32, what) do { if ((st = upload(&u, dst, t, n, f32, what)) != QW_OK) goto out; } while (0)
    UP(b->embed, &m->embed, V * H, false, "embed_tokens");
    if (qhead) {
        const qwi_qweight *hw = &m->lm_quant;
        if ((st = upload_qlinears(&u, &hw, &V, 1, &b->qhead, "lm_head")) != QW_OK) goto out;
    } else if (!tied) {
        UP(b->lm_head, &m->lm_head, V * H, false, "lm_head");
    }
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
        qwk_qlinear *ql[4] = {&L->qqkv, &L->qo, &L->qgu, &L->qd};
        qwk_bf16 **wp[4] = {&L->wqkv, &L->wo, &L->wgu, &L->wd};
        const qwi_tensor *plain[QWI_LIN_COUNT] = {&ml->q_proj, &ml->k_proj, &ml->v_proj, &ml->o_proj,
                                                  &ml->gate_proj, &ml->up_proj, &ml->down_proj};
        for (int gi = 0; gi < 4; gi++) {
            const lin_group *g = &grp[gi];
            if (ql[gi]->fmt != QWK_Q_NONE) {
                group_take(&p, ql[gi]);
                if ((st = upload_qgroup(&u, ml, g, ql[gi])) != QW_OK) goto out;
                continue;
            }
            TAKE(*wp[gi], qwk_bf16, group_rows(g) * g->k * 2);
            size_t off = 0;
            for (int i = 0; i < g->nl; i++) {
                UP(*wp[gi] + off * g->k, plain[g->lin[i]], g->rows[i] * g->k, false, LIN_NAMES[g->lin[i]]);
                off += g->rows[i];
            }
        }
        TAKE(L->in_norm, float, H * 4);
        TAKE(L->post_norm, float, H * 4);
        TAKE(L->q_norm, float, hd * 4);
        TAKE(L->k_norm, float, hd * 4);
        TAKE(L->qkv_bias, float, qkvd * 4);
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
#undef TAKE
out:
    free(u.host);
    return st;
}

/* ---- activations, plan buffers, KV ------------------------------------------ */

static qw_status setup_activations(cu_backend *b) {
    const qwi_config *c = &b->cfg;
    const size_t H = c->hidden_size, I = c->intermediate_size, hd = c->head_dim, V = c->vocab_size;
    const size_t qd = (size_t)c->num_heads * hd, kvd = (size_t)c->num_kv_heads * hd;
    /* rows: the block-scaled FP8 GEMM writes its outputs (qkv, delta, gu)
     * for the step's rows rounded up to 4 (fp8_block.h) */
    const size_t T = (size_t)qwk_fp8_rows(b->tmax), Lr = b->lmax;
    /* decode partials: every sequence of the widest step (a graph bucket
     * or max_num_seqs) may split as far as its context allows */
    const size_t splits_rows = (size_t)QWI_MAX(b->smax, b->buckets[b->nbuckets - 1]) * QWI_CUDA_DECODE_MAX_SPLITS;
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

/* The quantized linears' step-time buffers, once the weights are up and the
 * GEMM handle exists: where FP8 linears kept a block-scale grid, ask
 * cuBLASLt for the block-scaled GEMM of each such shape (at the smallest
 * row count that takes it); a refusal drops every grid (b->fp8_refused:
 * all dequantize). Then the activation buffers for the widest W8A8 linear
 * (e4m3 codes for the GEMM, their bf16 values for the decode GEMV), the
 * bf16 scratch weight for the widest linear that dequantizes - none when
 * every quantized linear runs W8A8 - and qwk_qgemm's split-k workspace. */
static qw_status setup_fp8(cu_backend *b) {
    const qwi_config *c = &b->cfg;
    const size_t T = (size_t)qwk_fp8_rows(b->tmax);
    int32_t kmax = 0;
    for (int l = 0; l < c->num_layers; l++) {
        const cu_layer *Ly = &b->layers[l];
        const qwk_qlinear *ql[4] = {&Ly->qqkv, &Ly->qo, &Ly->qgu, &Ly->qd};
        for (int i = 0; i < 4; i++)
            if (ql[i]->grid) kmax = QWI_MAX(kmax, ql[i]->k);
    }
    if (kmax) {
        CK(cudaMalloc((void **)&b->xq, T * (size_t)kmax), "FP8 activation allocation");
        CK(cudaMalloc((void **)&b->xs, T * (size_t)(kmax / QWK_FP8_GROUP) * 4), "FP8 activation allocation");
        CK(cudaMalloc((void **)&b->xe, (size_t)QWI_MIN(b->tmax, QWK_QGEMV_MAX_M) * (size_t)kmax * 2),
           "FP8 activation allocation");
        const int32_t m4 = qwk_fp8_rows(QWK_QGEMV_MAX_M + 1);
        for (int l = 0; l < c->num_layers && !b->fp8_refused; l++) {
            const cu_layer *Ly = &b->layers[l];
            const qwk_qlinear *ql[4] = {&Ly->qqkv, &Ly->qo, &Ly->qgu, &Ly->qd};
            for (int i = 0; i < 4 && !b->fp8_refused; i++) {
                if (!ql[i]->grid) continue;
                int st = qwk_gemm_prepare_fp8(b->gemm, b->xs, ql[i]->grid, m4, ql[i]->n, ql[i]->k);
                if (st && !qwk_gemm_refused(st))
                    return qwi_fail(QW_ERR_INTERNAL, "cuda: cuBLASLt block-scaled FP8 heuristic %dx%dx%d failed "
                                    "(status %d)", m4, ql[i]->n, ql[i]->k, st);
                b->fp8_refused = st;
            }
        }
    }
    size_t need = 0;
    for (int l = 0; l < c->num_layers; l++) {
        cu_layer *Ly = &b->layers[l];
        qwk_qlinear *ql[4] = {&Ly->qqkv, &Ly->qo, &Ly->qgu, &Ly->qd};
        for (int i = 0; i < 4; i++) {
            if (ql[i]->fmt == QWK_Q_NONE) continue;
            const size_t bytes = (size_t)ql[i]->n * (size_t)ql[i]->k * 2;
            b->qscratch_all = QWI_MAX(b->qscratch_all, bytes);
            if (b->fp8_refused) ql[i]->grid = NULL;
            if (!ql[i]->grid) need = QWI_MAX(need, bytes);
        }
    }
    if (b->fp8_refused) {   /* nothing will quantize activations */
        cudaFree(b->xq);
        cudaFree(b->xs);
        cudaFree(b->xe);
        b->xq = NULL;
        b->xs = NULL;
        b->xe = NULL;
    }
    if (need) {
        CK(cudaMalloc((void **)&b->qscratch, need), "dequantization scratch allocation");
        b->qscratch_bytes = need;
    }
    /* qwk_qgemm's split partials: up to 64 rows a linear is one tile of
     * rows, so its split does not change with M and its partials grow with
     * it - the widest step it takes asks the most; the head also takes
     * wider steps, whose split may differ */
    size_t ws = 0;
    const int32_t mq = QWI_MIN(b->tmax, QWK_QGEMM_MAX_M);
    for (int l = 0; l < c->num_layers; l++) {
        const cu_layer *Ly = &b->layers[l];
        const qwk_qlinear *ql[4] = {&Ly->qqkv, &Ly->qo, &Ly->qgu, &Ly->qd};
        for (int i = 0; i < 4; i++)
            if (ql[i]->fmt != QWK_Q_NONE) ws = QWI_MAX(ws, qwk_qgemm_workspace(mq, ql[i], b->num_sms));
    }
    if (b->qhead.fmt != QWK_Q_NONE) {
        ws = QWI_MAX(ws, qwk_qgemm_workspace(QWI_MIN(b->lmax, QWK_QGEMM_MAX_M), &b->qhead, b->num_sms));
        ws = QWI_MAX(ws, qwk_qgemm_workspace(b->lmax, &b->qhead, b->num_sms));
    }
    if (ws) {
        CK(cudaMalloc((void **)&b->qg_ws, ws), "quantized GEMM workspace allocation");
        b->qg_ws_bytes = ws;
    }
    return QW_OK;
}

/* A block-scaled FP8 GEMM was refused after setup_fp8 accepted its shape
 * (cuBLASLt refusing one row count): every later step dequantizes, so the
 * scratch weight must hold any quantized linear. Not capturable (a
 * cudaMalloc): inside a capture it fails the capture, and the step's eager
 * rerun grows it. */
static qw_status grow_qscratch(cu_backend *b) {
    if (b->qscratch_bytes >= b->qscratch_all) return QW_OK;
    cudaError_t e = cudaStreamSynchronize(b->stream);
    if (e == cudaSuccess) {
        cudaFree(b->qscratch);
        b->qscratch = NULL;
        b->qscratch_bytes = 0;
        e = cudaMalloc((void **)&b->qscratch, b->qscratch_all);
    }
    if (e != cudaSuccess) return cu_fail(e, "dequantization scratch allocation");
    b->qscratch_bytes = b->qscratch_all;
    return QW_OK;
}

static qw_status setup_kv(cu_backend *b) {
    const qwi_config *c = &b->cfg;
    size_t per_block = qwi_cuda_kv_block_bytes(c, b->bc.block_size, b->kv_elem);
    if (per_block == 0) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cuda: KV block size overflows size_t");
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
    int32_t tpad, spad, lpad, ntiles;
    int32_t decode_splits;   /* qwk_decode_attention's max_splits             */
    bool decode;        /* every sequence a decode row: the decode kernel   */
    bool decode_rows;   /* a mixed step with decode rows among its chunks   */
} step;

#define DP(T, off) ((T *)((char *)b->d_plan + (off)))

static qw_status gemm(cu_backend *b, const void *x, const void *w, void *y, int f32, int32_t M, int32_t N, int32_t K) {
    int st = qwk_gemm_run(b->gemm, b->stream, x, w, y, f32, M, N, K);
    if (st) return qwi_fail(QW_ERR_INTERNAL, "cuda: cublasLtMatmul %dx%dx%d failed (status %d)", M, N, K, st);
    return QW_OK;
}

/* y f32 [M][N] = x bf16 [M][K] times linear (w, q)^T: w's bf16 GEMM when q
 * is plain; for an FP8 linear in 128 x 128 blocks (q->grid), x quantized
 * per 1 x 128 group and, by M, the W8A8 GEMV or the block-scaled FP8 GEMM
 * (fp8_block.h; y needs qwk_fp8_rows(M) rows); else by M the fused GEMV
 * (up to 8 rows), the quantized GEMM (qgemm.h, up to 64), or q dequantized
 * into the scratch weight and the bf16 GEMM. Capturable every way. Should
 * cuBLASLt refuse the FP8 GEMM, this and every later step run weight-only
 * instead, decode included, so no later step mixes the two numerics
 * (b->fp8_refused keeps its status; captured decode graphs are
 * recaptured). */
static qw_status linear(cu_backend *b, const qwk_bf16 *x, const qwk_bf16 *w, const qwk_qlinear *q, float *y,
                        int32_t M, int32_t N, int32_t K) {
    if (q->fmt == QWK_Q_NONE) return gemm(b, x, w, y, 1, M, N, K);
    const bool w8a8 = q->grid && !b->fp8_refused;
    if (M <= QWK_QGEMV_MAX_M) {
        if (w8a8) {
            qwk_fp8_quant_act_values(x, M, K, b->xe, b->xs, b->stream);
            qwk_qgemv_w8a8(b->xe, b->xs, M, q, y, N, b->stream);
        } else {
            qwk_qgemv(x, M, q, y, N, b->stream);
        }
        return QW_OK;
    }
    if (w8a8) {
        const int32_t M4 = qwk_fp8_rows(M);
        qwk_fp8_quant_act(x, M, K, b->xq, b->xs, b->stream);
        int st = qwk_gemm_run_fp8(b->gemm, b->stream, b->xq, b->xs, q->codes, q->grid, y, M4, N, K);
        if (st == 0) return QW_OK;
        if (!qwk_gemm_refused(st))
            return qwi_fail(QW_ERR_INTERNAL, "cuda: block-scaled FP8 cublasLtMatmul %dx%dx%d failed (status %d)", M4,
                            N, K, st);
        b->fp8_refused = st;
        b->graphs_stale = true;
    }
    if (M <= QWK_QGEMM_MAX_M) {   /* the codes read once, no bf16 copy */
        qwk_qgemm(x, M, q, y, N, b->qg_ws, b->qg_ws_bytes, b->num_sms, b->stream);
        return QW_OK;
    }
    if ((size_t)N * (size_t)K * 2 > b->qscratch_bytes) {
        qw_status gst = grow_qscratch(b);
        if (gst != QW_OK) return gst;
    }
    qwk_qdequant(q, b->qscratch, b->stream);
    return gemm(b, x, b->qscratch, y, 1, M, N, K);
}

/* logits f32 [M][V] = hf bf16 [M][H] times the head^T: the bf16 GEMM, or
 * for a quantized head the fused GEMV (up to 8 rows) or the quantized GEMM
 * on the tensor cores (qgemm.h: the codes read once per 64 rows); no bf16
 * copy of the head, which would take V * H * 2 bytes of scratch.
 * Capturable. */
static qw_status head_logits(cu_backend *b, int32_t M) {
    const int32_t V = b->cfg.vocab_size, H = b->cfg.hidden_size;
    if (b->qhead.fmt == QWK_Q_NONE) return gemm(b, b->hf, b->lm_head, b->logits, 1, M, V, H);
    if (M <= QWK_QGEMV_MAX_M) qwk_qgemv(b->hf, M, &b->qhead, b->logits, V, b->stream);
    else qwk_qgemm(b->hf, M, &b->qhead, b->logits, V, b->qg_ws, b->qg_ws_bytes, b->num_sms, b->stream);
    return QW_OK;
}

/* Everything from the embedding to the logits; reads only device memory, so
 * it can be captured. */
static qw_status run_model(cu_backend *b, const step *s) {
    const qwi_config *c = &b->cfg;
    const int32_t H = c->hidden_size, I = c->intermediate_size, hd = c->head_dim;
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
    pg.kv_fp8 = b->kv_elem == 1;
    pg.k_scale = pg.v_scale = 1.f;
    pg.decode_seq = DP(int32_t, L->decode_seq);
    for (int l = 0; l < c->num_layers; l++) {
        const cu_layer *Ly = &b->layers[l];
        const size_t plane = b->plane_elems * (size_t)b->kv_elem;
        char *kc = (char *)b->kv + (size_t)l * 2 * plane, *vc = kc + plane;
        qwk_add_rmsnorm(b->x, l ? b->delta : NULL, NULL, Ly->in_norm, T, H, eps, b->h, b->stream);
        if ((st = linear(b, b->h, Ly->wqkv, &Ly->qqkv, b->qkv, T, qkvd, H)) != QW_OK) return st;
        if (pg.kv_fp8) {
            pg.k_scale = b->kv_scale[l];
            pg.v_scale = b->kv_scale[c->num_layers + l];
            qwk_qk_norm_rope_kv_fp8(b->qkv, Ly->qkv_bias, Ly->q_norm, Ly->k_norm, b->inv_freq, pg.positions,
                                    DP(int32_t, L->slot_mapping), T, nh, nkv, hd, eps, pg.k_scale, pg.v_scale,
                                    b->q, (uint8_t *)kc, (uint8_t *)vc, b->stream);
        } else {
            qwk_qk_norm_rope_kv(b->qkv, Ly->qkv_bias, Ly->q_norm, Ly->k_norm, b->inv_freq, pg.positions,
                                DP(int32_t, L->slot_mapping), T, nh, nkv, hd, eps, b->q, (qwk_bf16 *)kc,
                                (qwk_bf16 *)vc, b->stream);
        }
        pg.k_cache = kc;
        pg.v_cache = vc;
        /* decode rows take the decode kernel in every step and prompt rows
         * the prefill kernel, so a row gets the bits it gets alone */
        if (!s->decode) qwk_prefill_attention(&pg, b->q, DP(int32_t, L->tiles), s->ntiles, b->att, b->stream);
        if (s->decode || s->decode_rows)
            qwk_decode_attention(&pg, b->q, s->spad, s->decode_splits, b->part_o, b->part_lse, b->att, b->stream);
        if ((st = linear(b, b->att, Ly->wo, &Ly->qo, b->delta, T, H, qd)) != QW_OK) return st;
        qwk_add_rmsnorm(b->x, b->delta, NULL, Ly->post_norm, T, H, eps, b->h, b->stream);
        if ((st = linear(b, b->h, Ly->wgu, &Ly->qgu, b->gu, T, 2 * I, H)) != QW_OK) return st;
        qwk_silu_mul(b->gu, T, I, b->act, b->stream);
        if ((st = linear(b, b->act, Ly->wd, &Ly->qd, b->delta, T, H, I)) != QW_OK) return st;
    }
    qwk_add_rmsnorm(b->x, b->delta, DP(int32_t, L->logit_rows), b->final_norm, s->lpad, H, eps, b->hf, b->stream);
    return head_logits(b, s->lpad);
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

/* Graphs captured before a late FP8 GEMM refusal replay W8A8 linears that
 * every later step must run dequantized: drop them, so each bucket warms up
 * again on the dequantizing path (its scratch weight, its bf16 GEMMs) and
 * captures again (buckets that fell back to eager stay eager). */
static void drop_stale_graphs(cu_backend *b) {
    for (int i = 0; i < QWI_CUDA_MAX_BUCKETS; i++) {
        cu_graph *g = &b->graphs[i];
        if (g->exec) cudaGraphExecDestroy(g->exec);
        g->exec = NULL;
        if (g->state == QWI_GRAPH_READY || g->state == QWI_GRAPH_WARM) g->state = QWI_GRAPH_NEW;
    }
    b->graphs_stale = false;
}

/* A decode-only step of bucket bi: eager warm-up, then capture, then replay
 * (cuda_host.h's graph states). Never fails because of graphs. */
static qw_status run_decode_step(cu_backend *b, const step *s, int bi) {
    if (b->graphs_stale) drop_stale_graphs(b);
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
        if (b->graphs_stale) {
            /* (cleared above) a late FP8 GEMM refusal inside this capture,
             * whose dequantizing needed the scratch weight that a capture
             * cannot allocate: not the bucket's fault; it warms up and
             * captures again */
            cudaGetLastError();
            g->state = QWI_GRAPH_NEW;
        } else {
            graph_fallback(b, g);
        }
        return run_model(b, s);
    }
    e = cudaGraphInstantiate(&g->exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        g->exec = NULL;
        graph_fallback(b, g);
        return run_model(b, s);
    }
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
    qw_status st = head_logits(b, n);
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
        s.ntiles = 0;
        s.decode_splits = QWI_CUDA_DECODE_MAX_SPLITS;   /* the graph outlives this step's contexts */
        qwi_cuda_plan_layout_make(&s.L, B, B, B, cnt.bt_stride, GRAPH_BANNED_CAP, 1);
    } else {
        if (cnt.num_banned > EAGER_BANNED_CAP)
            return qwi_fail(QW_ERR_UNSUPPORTED, "cuda: %d banned ids in one step (most %d)", cnt.num_banned,
                            EAGER_BANNED_CAP);
        s.tpad = p->num_tokens;
        s.spad = p->num_seqs;
        s.lpad = cnt.num_logit_rows;
        s.ntiles = cnt.num_tiles;
        s.decode_rows = cnt.num_decode_rows > 0;
        s.decode_splits = qwi_cuda_decode_splits(cnt.max_decode_ctx);
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
    /* bytes, not elements: an fp8 block is half a bf16 one */
    const size_t block_bytes = (size_t)b->bc.block_size * b->cfg.num_kv_heads * b->cfg.head_dim * b->kv_elem;
    CK(cudaSetDevice(b->device), "cudaSetDevice");
    for (int32_t i0 = 0; i0 < n; i0 += 2048) {
        int32_t m = QWI_MIN(2048, n - i0);
        CK(cudaMemcpyAsync(b->d_copy, src + i0, (size_t)m * 4, cudaMemcpyHostToDevice, b->stream), "copy_blocks");
        CK(cudaMemcpyAsync(b->d_copy + 2048, dst + i0, (size_t)m * 4, cudaMemcpyHostToDevice, b->stream), "copy_blocks");
        qwk_copy_blocks(b->kv, b->plane_elems * b->kv_elem, 2 * b->cfg.num_layers, block_bytes, b->d_copy,
                        b->d_copy + 2048, m, b->stream);
        CK(cudaStreamSynchronize(b->stream), "copy_blocks");
    }
    return QW_OK;
}

/* The fp8 cache's per-layer scales (lib/kv_scales.c, as the CPU backend):
 * [2][num_layers], k_scale then v_scale, into *out (caller frees), or only
 * validated when out is NULL. QW_ERR_FORMAT naming a bad tensor. */
static qw_status load_kv_scales(const qwi_model *model, float **out) {
    const size_t n = (size_t)(model->cfg.num_layers > 0 ? model->cfg.num_layers : 1);
    float *ks = (float *)malloc(2 * n * sizeof(float));
    if (!ks) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "cuda: fp8 KV scales allocation failed");
    qw_status st = qwi_kv_scales_load(model, ks, ks + n);
    if (st != QW_OK || !out) free(ks);
    else *out = ks;
    return st;
}

static const qwi_backend_ops cu_ops = {"cuda", cu_forward, cu_copy_blocks, cu_destroy};

extern "C" qw_status qwi_cuda_backend_create(const qwi_model *model, const qwi_backend_config *bc,
                                             qwi_backend **out) {
    if (!out) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cuda: out is NULL");
    *out = NULL;
    if (!model || !bc) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cuda: NULL model or config");
    /* What this backend never supports is refused before the device is
     * touched, so the answer does not depend on the machine. AUTO (0) comes
     * only from a config built by hand: bf16, as the engine resolves it. */
    const int kv_elem = qwi_cuda_kv_elem_bytes(bc->kv_cache_dtype);
    if (kv_elem == 0)
        return qwi_fail(QW_ERR_UNSUPPORTED,
                        "cuda: QW_OPT_KV_CACHE_DTYPE %s is not supported by the CUDA backend, which keeps its KV "
                        "cache in bf16 or fp8 (use auto, bf16 or fp8)",
                        bc->kv_cache_dtype == QW_KV_CACHE_F32 ? "f32" : "(unknown value)");
    bool fp8_block = true;
    qw_status mst = qwi_cuda_fp8_gemm_mode(getenv("QWINFER_CUDA_FP8_GEMM"), &fp8_block);
    if (mst != QW_OK) return mst;
    {
        lin_group grp[4];
        layer_groups(&model->cfg, grp);
        for (int l = 0; l < model->cfg.num_layers; l++)
            for (int gi = 0; gi < 4; gi++) {
                qwk_qlinear ql;
                qw_status qst = group_format(&model->layers[l], l, &grp[gi], &ql);
                if (qst != QW_OK) return qst;
            }
    }
    if (kv_elem == 1) {
        /* a bad k_scale / v_scale tensor fails here, on any machine (the
         * scales are read again into the backend below: 2 numbers a layer) */
        qw_status sst = load_kv_scales(model, NULL);
        if (sst != QW_OK) return sst;
    }
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
    b->kv_elem = kv_elem;
    qw_status st = QW_OK;
    cudaDeviceProp prop;
    if (kv_elem == 1 && (st = load_kv_scales(model, &b->kv_scale)) != QW_OK) goto fail;
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
    /* cuBLASLt documents its 1 x 128 / 128 x 128 FP8 block scaling for
     * Hopper; other architectures are not tried (they dequantize) */
    b->fp8_gemm = fp8_block && prop.major == 9;
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
    if ((st = setup_weights(b, model)) != QW_OK || (st = setup_activations(b)) != QW_OK || (st = setup_fp8(b)) != QW_OK ||
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
