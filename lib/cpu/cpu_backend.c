/*
 * cpu_backend.c - the CPU backend: owns the KV pool, the step scratch and
 * the thread pool, and runs the Qwen3/Qwen2 forward pass of a plan:
 *
 *   x = embed(tokens)
 *   per layer:  h = rmsnorm(x); q,k,v = h Wqkv^T (+bias)
 *               q,k = rope(q_norm/k_norm(q,k)); K/V -> their slots
 *               x += attention(q, cache) Wo^T
 *               h = post_norm(x); x += (silu(h Wg^T) * (h Wu^T)) Wd^T
 *   rows that need logits only: logits = final_norm(x) lm_head^T; sample
 *
 * All scratch is sized at create from the step limits; forward() allocates
 * nothing. Every parallel op splits by rows/columns/heads (see ops.h,
 * attention.h), so a sequence's logits are bit-identical however it is
 * batched, chunked or threaded.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "progress.h"
#include "backend.h"
#include "kv_scales.h"
#include "logprobs.h"
#include "cpu/attention.h"
#include "cpu/kernels.h"
#include "cpu/ops.h"
#include "cpu/page_map.h"
#include "cpu/pairpanel.h"
#include "cpu/panel.h"
#include "cpu/q4i.h"
#include "cpu/qpanel.h"
#include "cpu/threadpool.h"

/* Rows of the lm_head matmul per pass: bounds the logits scratch
 * (rows*vocab floats) while keeping the weight stream amortised; at 64 rows
 * the pass is compute-bound, so more rows would not be faster. */
#define CPU_LOGIT_ROWS 64

typedef struct cpu_layer {
    qwi_cpu_linear q, k, v, o, gate, up, down;
    const float *in_norm, *post_norm, *q_norm, *k_norm;   /* f32 copies */
} cpu_layer;

typedef struct cpu_backend {
    qwi_backend base;              /* first: the engine holds a qwi_backend *  */
    const qwi_model *model;        /* borrowed                                 */
    qwi_config cfg;
    qwi_backend_config bc;

    qwi_cpu_pool *pool;
    qwi_cpu_ctx cx;
    int nthreads;

    cpu_layer *layers;
    const float *final_norm;
    qwi_cpu_linear lm_head;
    const qwi_tensor *embed;
    double *inv_freq;              /* [head_dim/2]                              */
    float *small;                  /* one block holding every f32 norm/bias copy */
    qwi_page_map wpack;            /* huge-page copy of the matmul weights (map NULL: none) */

    qwi_page_map kv_map;           /* the KV pool's mapping (4 KiB pages)        */
    void *kv;                      /* [layer][K|V][num_blocks*block_size][kv_dim] */
    size_t layer_elems;            /* elements of one layer's K (or V)           */
    int32_t kv_dtype;              /* resolved qw_kv_cache_dtype: F32, BF16, FP8   */
    size_t kv_elem;                /* bytes of one element: 4, 2 or 1             */
    const qwi_cpu_kv_bf16_kernels *kb;  /* attention kernels of the bf16 cache
                                           (and the fp8 cache's softmax/scores) */
    const qwi_cpu_kv_fp8_kernels *kf;   /* the fp8 cache's K widen and P.V        */
    float *kv_scale;               /* fp8: [2][num_layers] k_scale then v_scale  */

    int32_t logit_rows;            /* rows per lm_head pass                      */
    float *x;                      /* [T][hidden] residual stream                */
    float *bufA;                   /* [T][max(hidden, q_dim)]: norm out, attn out */
    float *bufB;                   /* [T][max(q+2kv, 2*inter)]: q,k,v / gate,up    */
    float *xf;                     /* [logit_rows][hidden]                        */
    float *logits;                 /* [logit_rows][vocab]                         */
    int32_t *row_seq;              /* [T]                                         */
    int32_t *logit_seq;            /* [max_num_seqs]: seqs that need logits       */
    float **f16_buf;               /* [nthreads], NULL entries without f16 weights */
    uint32_t *xpair;               /* fast mode: [max(T, logit_rows)][max_k/2] bf16 pairs */
    float *xwide;                  /* ... widened, where the table reads them so: twice that */
    /* fast mode, U4/U8 weights: quantized matmul inputs (cpu/q4i.h), rows = max(T, logit_rows) */
    uint32_t *q4_q;                /* [rows][ceil(max_k / 2)] int16 pairs                */
    uint32_t *q4_q8;               /* [rows][QWI_Q4I_Q8_WORDS(ceil(max_k / 2))] int8     */
    uint32_t *q4_q8s;              /* [2][2 * QWI_Q4I_Q8_WORDS(...)] split bytes, or NULL */
    float *q4_d;                   /* [rows][groups]                                     */
    int32_t *q4_sum;               /* [rows][groups]                                     */
    float **attn_buf;              /* [nthreads]                                  */
    float **rope_buf;              /* [nthreads] of head_dim floats               */
    qwi_sample_scratch **ss;       /* [nthreads]                                  */
} cpu_backend;

/* ---- sizes -------------------------------------------------------------- */

static bool mul_ok(size_t a, size_t b, size_t *out) { return !__builtin_mul_overflow(a, b, out); }

/* Bytes of one KV element of a resolved qw_kv_cache_dtype; 0 for others. */
static size_t kv_elem_bytes(int32_t kv_cache_dtype) {
    switch (kv_cache_dtype) {
    case QW_KV_CACHE_F32: return sizeof(float);
    case QW_KV_CACHE_BF16: return sizeof(uint16_t);
    case QW_KV_CACHE_FP8_E4M3: return 1;
    }
    return 0;
}

size_t qwi_cpu_kv_bytes_per_block(const qwi_config *cfg, int32_t block_size,
                                  int32_t kv_cache_dtype) {
    size_t n = 2 * kv_elem_bytes(kv_cache_dtype);   /* K and V */
    if (n == 0 || !cfg || block_size <= 0 || cfg->num_layers <= 0 || cfg->num_kv_heads <= 0 ||
        cfg->head_dim <= 0)
        return 0;
    if (!mul_ok(n, (size_t)cfg->num_layers, &n) || !mul_ok(n, (size_t)block_size, &n) ||
        !mul_ok(n, (size_t)cfg->num_kv_heads, &n) || !mul_ok(n, (size_t)cfg->head_dim, &n))
        return 0;
    return n;
}

/* ---- create ------------------------------------------------------------- */

static qw_status check_tensor(const qwi_tensor *t, const char *what, int layer, int ndim,
                              int64_t d0, int64_t d1) {
    const char *nm = t->name ? t->name : what;
    if (!t->data)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cpu: layer %d: %s has no data", layer, nm);
    if (t->dtype != QWI_DTYPE_F32 && t->dtype != QWI_DTYPE_BF16 && t->dtype != QWI_DTYPE_F16)
        return qwi_fail(QW_ERR_UNSUPPORTED, "cpu: layer %d: %s: dtype %d", layer, nm, (int)t->dtype);
    if (t->ndim != ndim || t->shape[0] != d0 || (ndim == 2 && t->shape[1] != d1))
        return qwi_fail(QW_ERR_INVALID_ARGUMENT,
                        "cpu: layer %d: %s has shape [%lld, %lld] (ndim %d), expected [%lld, %lld]",
                        layer, nm, (long long)t->shape[0], (long long)(t->ndim > 1 ? t->shape[1] : 0),
                        t->ndim, (long long)d0, (long long)(ndim == 2 ? d1 : 0));
    return QW_OK;
}

/* A linear layer: the plain tensor t, or where qw is quantized (model.h),
 * qw, which pack_weights packs (cpu/qpanel.h) before anything reads it. */
static qw_status set_linear(qwi_cpu_linear *l, const qwi_tensor *t, const qwi_qweight *qw,
                            const char *what, int layer, int64_t n, int64_t k) {
    if (qw && qw->method != QWI_QUANT_NONE) {
        const char *nm = qw->qweight.name ? qw->qweight.name : what;
        if (qw->n != n || qw->k != k)
            return qwi_fail(QW_ERR_INVALID_ARGUMENT,
                            "cpu: layer %d: %s is a quantized [%lld, %lld], expected [%lld, %lld]",
                            layer, nm, (long long)qw->n, (long long)qw->k, (long long)n, (long long)k);
        if (!qwi_qpanel_bytes(qw, QWI_QPANEL_SEQ))
            return qwi_fail(QW_ERR_UNSUPPORTED, "cpu: layer %d: %s: quantized format %d with groups "
                            "of %lld cannot be packed", layer, nm, (int)qw->fmt,
                            (long long)qw->group_k);
        *l = (qwi_cpu_linear){ .dtype = QWI_DTYPE_F32, .n = n, .k = k, .quant = true, .qsrc = qw };
        return QW_OK;
    }
    qw_status st = check_tensor(t, what, layer, 2, n, k);
    if (st != QW_OK) return st;
    l->dtype = t->dtype;
    l->w = t->data;
    l->n = n;
    l->k = k;
    l->bias = NULL;
    l->panel = false;
    return QW_OK;
}

/* Copy a 1-D tensor of n to f32 at *cursor (advanced), after checking it. */
static qw_status copy_vec(float **cursor, const float **dst, const qwi_tensor *t, const char *what,
                          int layer, int64_t n) {
    qw_status st = check_tensor(t, what, layer, 1, n, 0);
    if (st != QW_OK) return st;
    qwr_to_f32(t->dtype, t->data, n, *cursor);
    *dst = *cursor;
    *cursor += n;
    return QW_OK;
}

static void *alloc_floats(size_t a, size_t b) {
    size_t n;
    if (!mul_ok(a, b, &n) || !mul_ok(n, sizeof(float), &n)) return NULL;
    return malloc(n ? n : 1);
}

static void cpu_destroy(qwi_backend *base) {
    cpu_backend *b = (cpu_backend *)base;
    if (!b) return;
    qwi_cpu_pool_destroy(b->pool);
    for (int t = 0; t < b->nthreads; t++) {
        if (b->f16_buf) free(b->f16_buf[t]);
        if (b->attn_buf) free(b->attn_buf[t]);
        if (b->rope_buf) free(b->rope_buf[t]);
        if (b->ss) qwi_sample_scratch_free(b->ss[t]);
    }
    free(b->f16_buf);
    free(b->xpair);
    free(b->xwide);
    free(b->q4_q);
    free(b->q4_q8);
    free(b->q4_q8s);
    free(b->q4_d);
    free(b->q4_sum);
    free(b->attn_buf);
    free(b->rope_buf);
    free(b->ss);
    free(b->layers);
    free(b->inv_freq);
    free(b->small);
    qwi_page_map_release(&b->wpack);
    qwi_page_map_release(&b->kv_map);
    free(b->kv_scale);
    free(b->x);
    free(b->bufA);
    free(b->bufB);
    free(b->xf);
    free(b->logits);
    free(b->row_seq);
    free(b->logit_seq);
    free(b);
}

static qw_status cpu_forward(qwi_backend *base, const qwi_plan *plan);
static qw_status cpu_copy_blocks(qwi_backend *base, const int32_t *src, const int32_t *dst, int32_t n);

static const qwi_backend_ops cpu_ops = {
    .name = "cpu",
    .forward = cpu_forward,
    .copy_blocks = cpu_copy_blocks,
    .destroy = cpu_destroy,
};

static qw_status check_config(const qwi_config *c, const qwi_backend_config *bc) {
    if (c->vocab_size <= 0 || c->hidden_size <= 0 || c->intermediate_size <= 0 ||
        c->num_layers <= 0 || c->num_heads <= 0 || c->num_kv_heads <= 0 || c->head_dim <= 0)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cpu: model config has a non-positive dimension");
    if (c->num_heads % c->num_kv_heads != 0)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cpu: num_heads %d is not a multiple of num_kv_heads %d",
                        c->num_heads, c->num_kv_heads);
    if (c->head_dim % 2 != 0)
        return qwi_fail(QW_ERR_UNSUPPORTED, "cpu: odd head_dim %d (RoPE needs pairs)", c->head_dim);
    if (!(c->rope_theta > 0) || !(c->rms_norm_eps >= 0))
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cpu: bad rope_theta %g or rms_norm_eps %g",
                        c->rope_theta, c->rms_norm_eps);
    if (bc->num_blocks <= 0 || bc->block_size <= 0 || bc->max_num_batched_tokens <= 0 ||
        bc->max_num_seqs <= 0 || bc->num_threads < 0)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT,
                        "cpu: bad backend config (num_blocks %d, block_size %d, max tokens %d, "
                        "max seqs %d, threads %d)", bc->num_blocks, bc->block_size,
                        bc->max_num_batched_tokens, bc->max_num_seqs, bc->num_threads);
    return QW_OK;
}

static qw_status setup_weights(cpu_backend *b) {
    const qwi_model *m = b->model;
    const qwi_config *c = &b->cfg;
    const int64_t H = c->hidden_size, I = c->intermediate_size, hd = c->head_dim;
    const int64_t qd = (int64_t)c->num_heads * hd, kvd = (int64_t)c->num_kv_heads * hd;
    qw_status st;

    if (!m->layers) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cpu: model has no layers array");
    size_t per_layer = (size_t)(2 * H + (c->qk_norm ? 2 * hd : 0) + (c->qkv_bias ? qd + 2 * kvd : 0));
    size_t nsmall = per_layer * (size_t)c->num_layers + (size_t)H;
    b->small = alloc_floats(nsmall, 1);
    b->layers = calloc((size_t)c->num_layers, sizeof *b->layers);
    if (!b->small || !b->layers) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "cpu: weight table allocation failed");
    float *cur = b->small;

    for (int i = 0; i < c->num_layers; i++) {
        const qwi_layer *L = &m->layers[i];
        cpu_layer *d = &b->layers[i];
        const qwi_qweight *qw = L->quant;
        if ((st = set_linear(&d->q, &L->q_proj, &qw[QWI_LIN_Q], "q_proj", i, qd, H)) ||
            (st = set_linear(&d->k, &L->k_proj, &qw[QWI_LIN_K], "k_proj", i, kvd, H)) ||
            (st = set_linear(&d->v, &L->v_proj, &qw[QWI_LIN_V], "v_proj", i, kvd, H)) ||
            (st = set_linear(&d->o, &L->o_proj, &qw[QWI_LIN_O], "o_proj", i, H, qd)) ||
            (st = set_linear(&d->gate, &L->gate_proj, &qw[QWI_LIN_GATE], "gate_proj", i, I, H)) ||
            (st = set_linear(&d->up, &L->up_proj, &qw[QWI_LIN_UP], "up_proj", i, I, H)) ||
            (st = set_linear(&d->down, &L->down_proj, &qw[QWI_LIN_DOWN], "down_proj", i, H, I)) ||
            (st = copy_vec(&cur, &d->in_norm, &L->input_norm, "input_layernorm", i, H)) ||
            (st = copy_vec(&cur, &d->post_norm, &L->post_norm, "post_attention_layernorm", i, H)))
            return st;
        if (c->qk_norm &&
            ((st = copy_vec(&cur, &d->q_norm, &L->q_norm, "q_norm", i, hd)) ||
             (st = copy_vec(&cur, &d->k_norm, &L->k_norm, "k_norm", i, hd))))
            return st;
        if (c->qkv_bias &&
            ((st = copy_vec(&cur, &d->q.bias, &L->q_bias, "q_proj.bias", i, qd)) ||
             (st = copy_vec(&cur, &d->k.bias, &L->k_bias, "k_proj.bias", i, kvd)) ||
             (st = copy_vec(&cur, &d->v.bias, &L->v_bias, "v_proj.bias", i, kvd))))
            return st;
    }
    if ((st = copy_vec(&cur, &b->final_norm, &m->final_norm, "norm", -1, H))) return st;
    if ((st = check_tensor(&m->embed, "embed_tokens", -1, 2, c->vocab_size, H))) return st;
    b->embed = &m->embed;
    const qwi_tensor *head = m->lm_head.data || m->lm_quant.method != QWI_QUANT_NONE ? &m->lm_head : &m->embed;
    if ((st = set_linear(&b->lm_head, head, &m->lm_quant, "lm_head", -1, c->vocab_size, H))) return st;
    return QW_OK;
}

/* ---- weight copy into huge pages ----------------------------------------- */

/* Bytes the kernel says are available (MemAvailable), or 0 if unknown. */
static size_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[128];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (size_t)kb * 1024;
}

/*
 * Batch-1 decode streams every matmul weight once per step, so it runs at
 * the speed memory can be read, and memory is read much faster from
 * anonymous transparent-huge-page memory than from the 4 KiB pages of the
 * model file's mmap (file-backed THP is not generally available): measured
 * 18-19 GB/s vs 9.7-10.3 GB/s for a plain read loop on the same machine
 * (docs/benchmarks.md). So the weights of every linear layer are copied,
 * once, into one anonymous mapping advised MADV_HUGEPAGE, laid out in the
 * order the forward pass reads them (per layer q,k,v,o,gate,up,down, then
 * lm_head), each tensor 64-byte aligned; the fused q/k/v and gate/up
 * passes then stream one contiguous range.
 *
 * The copy is also where f32 and bf16 weights are packed into 16-row
 * panels (cpu/panel.h) for the panel kernels: measured 1.3x the GEMM
 * FLOP/s of the row-major tiles (94% of the FMA peak) and 1.3-1.7x faster
 * batch-1 decode (docs/benchmarks.md); f16 weights are copied row-major.
 *
 * The copy is anonymous memory of the weights' size; the file's pages are
 * given back to the kernel tensor by tensor as they are copied (they stay
 * in the page cache, clean and reclaimable, so a warm reload stays warm),
 * so the process holds one copy of the weights at rest and the copy plus
 * one tensor at its peak.
 * It is only made when the weights take at most half of MemAvailable;
 * QWINFER_CPU_WEIGHTS=mmap disables it, =copy forces it (if the mapping
 * succeeds). Any failure keeps the file mapping and the row-major kernels.
 * The two paths round differently (panel.h's chain against the row-major
 * lanes), but a backend uses one of them for its whole life, so every
 * invariant (batched == alone, ...) holds in both.
 */
/* Whether the backend runs QW_NUMERICS_FAST (or _FAST_INT8): every linear layer's weight
 * in bf16 pair panels (cpu/pairpanel.h), always copied, and each matmul's
 * input rounded to bf16 pairs (cx.xpair). */
static bool fast_mode(const cpu_backend *b) {
    return b->bc.numerics == QW_NUMERICS_FAST || b->bc.numerics == QW_NUMERICS_FAST_INT8;
}

/* Bytes of l's weight in the copy: its pair-panel form in fast mode, else
 * its panel form where it has one; a quantized weight's qpanel form (PAIR
 * in fast mode, SEQ in exact). */
static size_t copy_bytes(const qwi_cpu_linear *l, bool fast) {
    if (l->quant) return qwi_qpanel_bytes(l->qsrc, fast ? QWI_QPANEL_PAIR : QWI_QPANEL_SEQ);
    if (fast) return qwi_pairpanel_bytes(l->n, l->k);
    size_t p = qwi_panel_bytes(l->dtype, l->n, l->k);
    return p ? p : (size_t)l->n * (size_t)l->k * qwi_dtype_size(l->dtype);
}

bool qwi_cpu_weights_copied(size_t weight_bytes) {
    const char *env = getenv("QWINFER_CPU_WEIGHTS");
    if (env && strcmp(env, "mmap") == 0) return false;
    if (env && strcmp(env, "copy") == 0) return true;
    size_t avail = mem_available();
    return avail != 0 && weight_bytes <= avail / 2;
}

typedef struct pack_ctx {
    cpu_backend *b;
    qwi_cpu_linear **ls;
    const size_t *ats;             /* byte offset of each tensor in the copy */
    size_t n;
    char *base;
    bool fast;
    int64_t t0;                    /* first task of the current batch        */
    size_t failed;                 /* 1 + index of a quantized linear that did not pack, or 0 */
} pack_ctx;

/* The tensors a quantized linear is read from (those with data). */
static int quant_sources(const qwi_qweight *q, const qwi_tensor *out[4]) {
    const qwi_tensor *all[4] = { &q->qweight, &q->qzeros, &q->scales, &q->g_idx };
    int n = 0;
    for (int i = 0; i < 4; i++)
        if (all[i]->data) out[n++] = all[i];
    return n;
}

/* Bytes of l's weight in the model file (what progress counts). */
static uint64_t source_bytes(const qwi_cpu_linear *l) {
    if (l->quant) {
        const qwi_tensor *src[4];
        uint64_t bytes = 0;
        for (int i = 0, n = quant_sources(l->qsrc, src); i < n; i++) bytes += src[i]->nbytes;
        return bytes;
    }
    return (uint64_t)l->n * (uint64_t)l->k * qwi_dtype_size(l->dtype);
}

/* The linears of layer d, for the walks below that only read them. */
#define LAYER_LINEARS 7
static void layer_linears(const cpu_layer *d, const qwi_cpu_linear *out[LAYER_LINEARS]) {
    const qwi_cpu_linear *ls[LAYER_LINEARS] = { &d->q, &d->k, &d->v, &d->o,
                                                &d->gate, &d->up, &d->down };
    memcpy(out, ls, sizeof ls);
}

static bool has_quant(const cpu_backend *b) {
    if (b->lm_head.quant) return true;
    for (int i = 0; i < b->cfg.num_layers; i++) {
        const qwi_cpu_linear *ls[LAYER_LINEARS];
        layer_linears(&b->layers[i], ls);
        for (int j = 0; j < LAYER_LINEARS; j++)
            if (ls[j]->quant) return true;
    }
    return false;
}

/* Pack one linear into the copy, then give back its source pages. */
static void pack_task(void *arg, int64_t t, int thread) {
    (void)thread;
    const pack_ctx *c = arg;
    t += c->t0;
    const size_t i = ((size_t)t + c->n - 1) % c->n;   /* n-1 (lm_head), then 0 .. n-2 */
    qwi_cpu_linear *l = c->ls[i];
    const bool fast = c->fast;
    char *dst = c->base + c->ats[i];
    size_t bytes = copy_bytes(l, fast);
    if (l->quant) {
        /* a failure's message is this thread's: pack_weights packs the
         * weight again on its own thread to report it */
        if (!qwi_qpanel_pack(l->qsrc, fast ? QWI_QPANEL_PAIR : QWI_QPANEL_SEQ, dst, &l->qp)) {
            __atomic_store_n((size_t *)&c->failed, i + 1, __ATOMIC_RELAXED);
            return;
        }
        const qwi_tensor *src[4];
        for (int s = 0, ns = quant_sources(l->qsrc, src); s < ns; s++)
            qwi_model_evict(c->b->model, src[s]->data, src[s]->nbytes);
        return;
    }
    if (fast) {
        l->pair = qwi_pairpanel_pack(l->dtype, l->w, l->n, l->k, dst);
    } else if (qwi_panel_pack(l->dtype, l->w, l->n, l->k, dst)) {
        l->panel = true;
    } else {
        memcpy(dst, l->w, bytes);
    }
    qwi_model_evict(c->b->model, l->w, (size_t)l->n * (size_t)l->k * qwi_dtype_size(l->dtype));
    l->w = dst;
}

/* Fast numerics and quantized models always pack (their kernels only read
 * pair panels / qpanels): there, QWINFER_CPU_WEIGHTS and the memory rule do
 * not apply, and a failed mapping leaves b->wpack.map NULL for the caller to
 * report. Progress is reported between batches of tensors (from this
 * thread); a cancel stops the packing and returns QW_ERR_CANCELLED with the
 * copy unmapped, as does a quantized weight that cannot be packed (its
 * error). */
static qw_status pack_weights(cpu_backend *b) {
    const bool fast = fast_mode(b), must = fast || has_quant(b);
    if (!must && !qwi_cpu_weights_copied(0)) return QW_OK;   /* mmap asked for: skip the sizing too */
    const int nl = b->cfg.num_layers;
    const size_t nlin = (size_t)nl * LAYER_LINEARS + 1;
    qwi_cpu_linear **ls = malloc(nlin * sizeof *ls);
    if (!ls) return QW_OK;
    size_t n = 0;
    for (int i = 0; i < nl; i++) {
        cpu_layer *d = &b->layers[i];
        ls[n++] = &d->q; ls[n++] = &d->k; ls[n++] = &d->v; ls[n++] = &d->o;
        ls[n++] = &d->gate; ls[n++] = &d->up; ls[n++] = &d->down;
    }
    ls[n++] = &b->lm_head;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += (copy_bytes(ls[i], fast) + 63) & ~(size_t)63;
    if (!must && !qwi_cpu_weights_copied(total)) {
        free(ls);
        return QW_OK;
    }
    qwi_page_map m;
    if (!qwi_page_map_create(total, QWI_PAGES_HUGE, &m)) {
        free(ls);
        return QW_OK;
    }
    char *const base = m.base;
    /* A reader before us (the engine's weight check) may have left the whole
     * mapping resident: give it back first, so the tensors below fault in
     * (from the page cache) one at a time. */
    qwi_model_evict_all(b->model);
    /* Tensors are packed in parallel on the backend's pool (load time: the
     * packing and the kernel's zeroing of the copy's pages are most of it),
     * one task each; the calling thread takes task 0 first (each thread
     * starts on its own share of a run, threadpool.h). The source pages of
     * each tensor are released right after it is packed, so that the peak is
     * the copy plus the tensors being packed, not two copies of the weights;
     * and the lm_head, the largest tensor (a quarter of the 0.6B shape) and
     * last in the layout, is packed first, while the copy is still empty: task
     * t packs tensor (t + n - 1) % n at its offset in the layout. */
    size_t *ats = malloc(n * sizeof *ats);
    if (!ats) {
        qwi_page_map_release(&m);
        free(ls);
        return QW_OK;
    }
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        ats[i] = off;
        off += (copy_bytes(ls[i], fast) + 63) & ~(size_t)63;
    }
    pack_ctx pc = { b, ls, ats, n, base, fast, 0, 0 };
    /* Batches with a progress report between them (one pool barrier
     * each). A batch holds at least 1/16 of the bytes and at least twice its
     * first (largest-first) tensor's: the first batch starts with the
     * lm_head, a quarter of the 0.6B shape, and the other threads need that
     * much other work meanwhile, or they idle at the barrier. */
    uint64_t all = 0;
    for (size_t i = 0; i < n; i++) all += source_bytes(ls[i]);
    qw_status st = QW_OK;
    for (int64_t t0 = 0; t0 < (int64_t)n && st == QW_OK;) {
        const uint64_t first = source_bytes(ls[((size_t)t0 + n - 1) % n]);
        const uint64_t want = QWI_MAX(all / 16, 2 * first);
        uint64_t bytes = 0;
        int64_t cnt = 0;
        while (t0 + cnt < (int64_t)n && bytes < want) bytes += source_bytes(ls[((size_t)(t0 + cnt) + n - 1) % n]), cnt++;
        pc.t0 = t0;
        qwi_cpu_pool_run(b->pool, cnt, pack_task, &pc);
        if (pc.failed) {
            const qwi_cpu_linear *l = ls[pc.failed - 1];
            qwi_qpanel scratch;
            st = QW_ERR_UNSUPPORTED;
            if (!qwi_qpanel_pack(l->qsrc, fast ? QWI_QPANEL_PAIR : QWI_QPANEL_SEQ,
                                 base + ats[pc.failed - 1], &scratch))
                st = qwi_fail_prefix(st, "cpu");
            else
                st = qwi_fail(QW_ERR_INTERNAL, "cpu: packing %s failed once, then not",
                              l->qsrc->qweight.name ? l->qsrc->qweight.name : "a quantized weight");
            break;
        }
        st = qwi_progress_add(b->bc.progress, bytes);
        t0 += cnt;
    }
    free(ats);
    if (st != QW_OK) {
        /* the packed linears point into m: the backend is destroyed next
         * and never reads them */
        qwi_page_map_release(&m);
        free(ls);
        return st;
    }
    mprotect(m.map, m.map_len, PROT_READ);   /* weights are read-only from here on */
    /* Nothing reads the mapping in bulk any more: the norms and biases are
     * f32 copies and the linears packed; the embedding is read a few rows a
     * step, which fault back in on their own (the mapping stays valid, see
     * qwi_model_evict). So resident memory holds one copy of the weights. */
    qwi_model_evict_all(b->model);
    b->wpack = m;
    free(ls);
    return QW_OK;
}

static bool model_has_f16(const cpu_backend *b) {
    if (b->lm_head.dtype == QWI_DTYPE_F16) return true;
    for (int i = 0; i < b->cfg.num_layers; i++) {
        const qwi_cpu_linear *ls[LAYER_LINEARS];
        layer_linears(&b->layers[i], ls);
        for (int j = 0; j < LAYER_LINEARS; j++)
            if (ls[j]->dtype == QWI_DTYPE_F16) return true;
    }
    return false;
}

/* The most scale groups of any int4 or int8 (U4/U8) linear: the fast
 * mode's integer matmul keeps a scale and a sum per (row, group) of its
 * activations (cpu/q4i.h), which qwi_cpu_matmul computes once per call.
 * 0: no such linear. */
static int64_t max_int_groups(const cpu_backend *b) {
    const qwi_cpu_linear *h = &b->lm_head;
    int64_t g = h->quant && h->qsrc->fmt != QWI_QFMT_E4M3 ? qwi_qweight_groups(h->qsrc) : 0;
    for (int i = 0; i < b->cfg.num_layers; i++) {
        const qwi_cpu_linear *ls[LAYER_LINEARS];
        layer_linears(&b->layers[i], ls);
        for (int j = 0; j < LAYER_LINEARS; j++)
            if (ls[j]->quant && ls[j]->qsrc && ls[j]->qsrc->fmt != QWI_QFMT_E4M3)
                g = QWI_MAX(g, qwi_qweight_groups(ls[j]->qsrc));
    }
    return g;
}

static qw_status setup_scratch(cpu_backend *b) {
    const qwi_config *c = &b->cfg;
    const size_t T = (size_t)b->bc.max_num_batched_tokens, S = (size_t)b->bc.max_num_seqs;
    const size_t H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    const size_t hd = (size_t)c->head_dim;
    const size_t qd = (size_t)c->num_heads * hd, kvd = (size_t)c->num_kv_heads * hd;
    const int nt = b->nthreads;

    b->logit_rows = (int32_t)QWI_MIN(S, (size_t)CPU_LOGIT_ROWS);
    b->x = alloc_floats(T, H);
    b->bufA = alloc_floats(T, QWI_MAX(H, qd));
    b->bufB = alloc_floats(T, QWI_MAX(qd + 2 * kvd, 2 * I));
    b->xf = alloc_floats((size_t)b->logit_rows, H);
    b->logits = alloc_floats((size_t)b->logit_rows, (size_t)c->vocab_size);
    b->row_seq = malloc(T * sizeof(int32_t));
    b->logit_seq = malloc(S * sizeof(int32_t));
    b->inv_freq = malloc(hd / 2 * sizeof(double) + 1);
    b->f16_buf = calloc((size_t)nt, sizeof(float *));
    b->attn_buf = calloc((size_t)nt, sizeof(float *));
    b->rope_buf = calloc((size_t)nt, sizeof(float *));
    b->ss = calloc((size_t)nt, sizeof(qwi_sample_scratch *));
    if (!b->x || !b->bufA || !b->bufB || !b->xf || !b->logits || !b->row_seq || !b->logit_seq ||
        !b->inv_freq || !b->f16_buf || !b->attn_buf || !b->rope_buf || !b->ss)
        return qwi_fail(QW_ERR_OUT_OF_MEMORY,
                        "cpu: step scratch allocation failed (max_num_batched_tokens %zu, "
                        "max_num_seqs %zu)", T, S);
    bool f16 = model_has_f16(b);
    size_t max_k = QWI_MAX(QWI_MAX(H, I), qd);
    if (fast_mode(b)) {
        /* Half a float per input value: the lm_head pass has logit_rows rows. */
        b->xpair = alloc_floats(QWI_MAX(T, (size_t)b->logit_rows), (size_t)qwi_pair_kp((int64_t)max_k));
        /* A float per input value, for the tables whose pair kernels read
         * x widened (kernels.h, matmul_[q]pair_wide): 25 MB on the 0.6B shape
         * at the default 2048-token step, touched only as far as steps go. */
        const bool wide = qwi_cpu_kernels_read_wide(qwi_cpu_kernels_select());
        if (wide)
            b->xwide = alloc_floats(QWI_MAX(T, (size_t)b->logit_rows),
                                    2 * (size_t)qwi_pair_kp((int64_t)max_k));
        if (!b->xpair || (wide && !b->xwide))
            return qwi_fail(QW_ERR_OUT_OF_MEMORY, "cpu: bf16 activation scratch allocation failed "
                            "(max_num_batched_tokens %zu)", T);
        const int64_t int_groups = max_int_groups(b);
        if (int_groups > 0) {
            const size_t rows = QWI_MAX(T, (size_t)b->logit_rows);
            b->q4_q = (uint32_t *)alloc_floats(rows, (size_t)qwi_pair_kp((int64_t)max_k));
            if (b->bc.numerics == QW_NUMERICS_FAST_INT8)   /* int4's int8 activations */
                b->q4_q8 = (uint32_t *)alloc_floats(
                    rows, (size_t)QWI_Q4I_Q8_WORDS(qwi_pair_kp((int64_t)max_k)));
            const bool split = qwi_cpu_kernels_select()->q4i_reads_split;
            if (split)   /* batch-1 calls only: 2 rows */
                b->q4_q8s = (uint32_t *)alloc_floats(
                    2, 2 * (size_t)QWI_Q4I_Q8_WORDS(qwi_pair_kp((int64_t)max_k)));
            b->q4_d = alloc_floats(rows, (size_t)int_groups);
            b->q4_sum = (int32_t *)alloc_floats(rows, (size_t)int_groups);
            if (!b->q4_q || (b->bc.numerics == QW_NUMERICS_FAST_INT8 && !b->q4_q8) || !b->q4_d ||
                !b->q4_sum || (split && !b->q4_q8s))
                return qwi_fail(QW_ERR_OUT_OF_MEMORY, "cpu: int4/int8 activation scratch allocation "
                                "failed (max_num_batched_tokens %zu)", T);
        }
    }
    for (int t = 0; t < nt; t++) {
        b->attn_buf[t] = alloc_floats(qwi_cpu_attn_scratch_floats(c->num_heads, c->num_kv_heads,
                                                                  c->head_dim), 1);
        b->rope_buf[t] = alloc_floats(hd, 1);
        if (f16) b->f16_buf[t] = alloc_floats(QWI_CPU_MM_MAX_COLS, max_k);
        if (!b->attn_buf[t] || !b->rope_buf[t] || (f16 && !b->f16_buf[t]))
            return qwi_fail(QW_ERR_OUT_OF_MEMORY, "cpu: per-thread scratch allocation failed");
        b->ss[t] = qwi_sample_scratch_create(c->vocab_size);
        if (!b->ss[t]) return qwi_fail_prefix(QW_ERR_OUT_OF_MEMORY, "cpu: sampler scratch");
    }
    for (size_t i = 0; i < hd / 2; i++)
        b->inv_freq[i] = pow(c->rope_theta, -2.0 * (double)i / (double)hd);

    b->cx.pool = b->pool;
    b->cx.kt = qwi_cpu_kernels_select();
    b->cx.nthreads = nt;
    b->cx.f16_buf = b->f16_buf;
    b->cx.max_k = (int64_t)max_k;
    b->cx.xpair = b->xpair;
    b->cx.xwide = b->xwide;
    b->cx.q4_q = b->q4_q;
    b->cx.q4_q8 = b->q4_q8;
    b->cx.q4_q8s = b->q4_q8s;
    b->cx.q4_d = b->q4_d;
    b->cx.q4_sum = b->q4_sum;
    b->cx.act_exp = fast_mode(b) ? qwi_cpu_kv_bf16_for(b->cx.kt) : NULL;
    return QW_OK;
}

static qw_status setup_kv(cpu_backend *b) {
    const qwi_config *c = &b->cfg;
    /* AUTO only reaches here from a config built by hand (the engine
     * resolves it): the numerics mode's default, as before the option */
    b->kv_dtype = b->bc.kv_cache_dtype != QW_KV_CACHE_AUTO ? b->bc.kv_cache_dtype
                  : fast_mode(b)                           ? QW_KV_CACHE_BF16
                                                           : QW_KV_CACHE_F32;
    if (kv_elem_bytes(b->kv_dtype) == 0)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cpu: QW_OPT_KV_CACHE_DTYPE %d is not a KV cache dtype",
                        (int)b->kv_dtype);
    size_t per_block = qwi_cpu_kv_bytes_per_block(c, b->bc.block_size, b->kv_dtype), total;
    if (per_block == 0 || !mul_ok(per_block, (size_t)b->bc.num_blocks, &total))
        return qwi_fail(QW_ERR_OUT_OF_MEMORY, "cpu: KV pool of %d blocks overflows size_t",
                        b->bc.num_blocks);
    /* A pool beyond physical memory would "succeed" under overcommit and get
     * the process killed later, when the pages are touched: refuse it now. */
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && total / (size_t)page > (size_t)pages)
        return qwi_fail(QW_ERR_OUT_OF_MEMORY,
                        "cpu: KV pool of %zu bytes (%d blocks x %zu) exceeds physical memory (%zu bytes)",
                        total, b->bc.num_blocks, per_block, (size_t)pages * (size_t)page);
    b->kv_elem = kv_elem_bytes(b->kv_dtype);
    b->kb = qwi_cpu_kv_bf16_for(b->cx.kt);   /* set by setup_scratch */
    b->kf = qwi_cpu_kv_fp8_for(b->cx.kt);
    if (b->kv_dtype == QW_KV_CACHE_FP8_E4M3) {
        b->kv_scale = malloc(2 * (size_t)c->num_layers * sizeof(float));
        if (!b->kv_scale) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "cpu: fp8 KV scales allocation failed");
        qw_status st = qwi_kv_scales_load(b->model, b->kv_scale, b->kv_scale + c->num_layers);
        if (st != QW_OK) return st;
    }
    b->layer_elems = (size_t)b->bc.num_blocks * (size_t)b->bc.block_size *
                     (size_t)c->num_kv_heads * (size_t)c->head_dim;
    /* zero pages handed out lazily, so an unused pool costs address space,
     * not memory; 4 KiB pages, so a fresh block commits about its own bytes
     * (huge pages were slower end to end: page_map.h) */
    if (!qwi_page_map_create(total, QWI_PAGES_SMALL, &b->kv_map))
        return qwi_fail(QW_ERR_OUT_OF_MEMORY, "cpu: KV pool allocation of %zu bytes (%d blocks x %zu) failed",
                        total, b->bc.num_blocks, per_block);
    b->kv = b->kv_map.base;
    return QW_OK;
}

qw_status qwi_cpu_backend_create(const qwi_model *model, const qwi_backend_config *cfg,
                                 qwi_backend **out) {
    if (!out) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cpu: out is NULL");
    *out = NULL;
    if (!model || !cfg) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cpu: model or config is NULL");
    qw_status st = check_config(&model->cfg, cfg);
    if (st != QW_OK) return st;
    cpu_backend *b = calloc(1, sizeof *b);
    if (!b) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "cpu: backend allocation failed");
    b->base.ops = &cpu_ops;
    b->base.num_blocks = cfg->num_blocks;
    b->model = model;
    b->cfg = model->cfg;
    b->bc = *cfg;
    if ((st = qwi_cpu_pool_create(cfg->num_threads, &b->pool)) == QW_OK) {
        b->nthreads = qwi_cpu_pool_size(b->pool);
        if ((st = setup_weights(b)) == QW_OK && (st = setup_scratch(b)) == QW_OK)
            st = setup_kv(b);
        if (st == QW_OK) st = pack_weights(b);
        if (st == QW_OK && fast_mode(b) && !b->wpack.map)
            st = qwi_fail(QW_ERR_OUT_OF_MEMORY,
                          "cpu: QW_OPT_NUMERICS fast: mapping the bf16 copy of the weights failed "
                          "(QW_NUMERICS_EXACT can run from the file mapping)");
        if (st == QW_OK && !b->wpack.map && has_quant(b))
            st = qwi_fail(QW_ERR_OUT_OF_MEMORY,
                          "cpu: mapping the repacked copy of the quantized weights failed "
                          "(quantized layers always run from the copy)");
    }
    if (st != QW_OK) {
        cpu_destroy(&b->base);
        return st;
    }
    *out = &b->base;
    return QW_OK;
}

/* ---- block copy ---------------------------------------------------------- */

/* Copy whole blocks, K and V of every layer; ids are checked first so a bad
 * call changes nothing. */
static qw_status cpu_copy_blocks(qwi_backend *base, const int32_t *src, const int32_t *dst, int32_t n) {
    cpu_backend *b = (cpu_backend *)base;
    for (int32_t i = 0; i < n; i++)
        if (src[i] < 0 || src[i] >= b->bc.num_blocks || dst[i] < 0 || dst[i] >= b->bc.num_blocks)
            return qwi_fail(QW_ERR_INTERNAL, "cpu: copy of block %d to %d outside the pool of %d",
                            src[i], dst[i], b->bc.num_blocks);
    /* Bytes, so the same copy serves the f32 and the bf16 cache. */
    const size_t block_bytes = (size_t)b->bc.block_size * (size_t)b->cfg.num_kv_heads *
                               (size_t)b->cfg.head_dim * b->kv_elem;
    /* The pool is [layer][K|V] planes of layer_elems elements each. */
    const size_t planes = 2 * (size_t)b->cfg.num_layers;
    for (size_t p = 0; p < planes; p++) {
        char *plane = (char *)b->kv + p * b->layer_elems * b->kv_elem;
        for (int32_t i = 0; i < n; i++)
            memcpy(plane + (size_t)dst[i] * block_bytes, plane + (size_t)src[i] * block_bytes,
                   block_bytes);
    }
    return QW_OK;
}

/* ---- forward ------------------------------------------------------------ */

static qw_status check_plan(const cpu_backend *b, const qwi_plan *p) {
    const int32_t T = p->num_tokens, S = p->num_seqs, bs = b->bc.block_size;
    const int64_t nslots = (int64_t)b->bc.num_blocks * bs;
    if (T < 0 || T > b->bc.max_num_batched_tokens)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cpu: plan has %d tokens (most %d)", T,
                        b->bc.max_num_batched_tokens);
    if (S < 0 || S > b->bc.max_num_seqs)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cpu: plan has %d sequences (most %d)", S,
                        b->bc.max_num_seqs);
    if (T > 0 && (!p->token_ids || !p->positions || !p->slot_mapping))
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cpu: plan token arrays are NULL");
    if (S > 0 && (!p->query_start || !p->context_lens || !p->block_tables || !p->do_sample ||
                  !p->sampled))
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cpu: plan sequence arrays are NULL");
    if (T > 0 && S == 0) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cpu: plan has tokens but no sequence");
    if (S == 0) return QW_OK;
    if (p->query_start[0] != 0 || p->query_start[S] != T)
        return qwi_fail(QW_ERR_INTERNAL, "cpu: query_start spans [%d, %d), expected [0, %d)",
                        p->query_start[0], p->query_start[S], T);
    if (p->max_blocks_per_seq <= 0)
        return qwi_fail(QW_ERR_INTERNAL, "cpu: max_blocks_per_seq is %d", p->max_blocks_per_seq);
    const int64_t max_ctx = (int64_t)p->max_blocks_per_seq * bs;
    for (int32_t s = 0; s < S; s++) {
        int32_t q0 = p->query_start[s], q1 = p->query_start[s + 1], ctx = p->context_lens[s];
        if (q1 < q0) return qwi_fail(QW_ERR_INTERNAL, "cpu: query_start decreases at seq %d", s);
        if (ctx < q1 - q0 || ctx > max_ctx)
            return qwi_fail(QW_ERR_INTERNAL, "cpu: seq %d: context length %d outside [%d, %lld]", s,
                            ctx, q1 - q0, (long long)max_ctx);
        bool needs_row = p->do_sample[s] || (p->want_logits && p->want_logits[s]);
        if (needs_row && q1 == q0)
            return qwi_fail(QW_ERR_INTERNAL, "cpu: seq %d wants a token but has no rows", s);
        if (p->do_sample[s] && !p->sampling)
            return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cpu: plan samples but has no sampling params");
        if (p->want_logits && p->want_logits[s] && !p->logits_out)
            return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cpu: plan wants logits but logits_out is NULL");
        if (p->logprobs_n && ((p->logprobs_n[s] >= 0 && (!p->logprobs_out || !p->do_sample[s])) ||
                              p->logprobs_n[s] > QW_MAX_LOGPROBS || p->prompt_logprobs_n[s] > QW_MAX_LOGPROBS ||
                              (p->prompt_logprobs_n[s] >= 0 && (!p->prompt_target || !p->prompt_logprobs_out))))
            return qwi_fail(QW_ERR_INTERNAL, "cpu: seq %d: inconsistent logprobs request in the plan", s);
        const int32_t *bt = p->block_tables + (int64_t)s * p->max_blocks_per_seq;
        for (int32_t i = 0; i < QWI_DIV_UP(ctx, bs); i++)
            if (bt[i] < 0 || bt[i] >= b->bc.num_blocks)
                return qwi_fail(QW_ERR_INTERNAL, "cpu: seq %d: block table entry %d is %d (pool %d)",
                                s, i, bt[i], b->bc.num_blocks);
        for (int32_t r = q0; r < q1; r++) {
            if (p->token_ids[r] < 0 || p->token_ids[r] >= b->cfg.vocab_size)
                return qwi_fail(QW_ERR_TOKEN_OUT_OF_RANGE, "cpu: row %d: token id %d outside [0, %d)",
                                r, p->token_ids[r], b->cfg.vocab_size);
            if (p->positions[r] < 0 || p->positions[r] >= ctx)
                return qwi_fail(QW_ERR_INTERNAL, "cpu: row %d: position %d outside its context %d",
                                r, p->positions[r], ctx);
            if (p->slot_mapping[r] < 0 || p->slot_mapping[r] >= nslots)
                return qwi_fail(QW_ERR_INTERNAL, "cpu: row %d: slot %d outside the pool (%lld)", r,
                                p->slot_mapping[r], (long long)nslots);
            if (p->logprobs_n && p->prompt_logprobs_n[s] >= 0 && p->prompt_target[r] >= b->cfg.vocab_size)
                return qwi_fail(QW_ERR_INTERNAL, "cpu: row %d: prompt logprob target %d outside [0, %d)", r,
                                p->prompt_target[r], b->cfg.vocab_size);
        }
    }
    return QW_OK;
}

typedef struct fwd_ctx {
    cpu_backend *b;
    const qwi_plan *p;
    const cpu_layer *layer;
    float *q, *k, *v;              /* this layer's projections              */
    void *k_cache, *v_cache;       /* this layer's K/V pools (kv_dtype)     */
    float k_scale, v_scale;        /* fp8: this layer's scales              */
    int32_t nlog;                  /* rows in the current logits pass        */
    int32_t log0;                  /* index of its first row in logit_seq    */
    int32_t row0;                  /* prompt logprobs: first row of the pass */
    int64_t rows_per_task;
    int32_t M;                     /* rows of the step                       */
} fwd_ctx;

static void embed_task(void *arg, int64_t t, int thread) {
    const fwd_ctx *c = arg;
    const int64_t H = c->b->cfg.hidden_size;
    int64_t r1 = QWI_MIN((int64_t)c->p->num_tokens, (t + 1) * c->rows_per_task);
    for (int64_t r = t * c->rows_per_task; r < r1; r++)
        qwr_embed_row(c->b->embed->dtype, c->b->embed->data, c->p->token_ids[r], H, c->b->x + r * H);
}

/* q/k norm and RoPE of one row, then its K/V into the cache: fused per row
 * so the row is touched once while in cache. */
static void qk_rope_task(void *arg, int64_t r, int thread) {
    const fwd_ctx *c = arg;
    const cpu_backend *b = c->b;
    const qwi_config *cfg = &b->cfg;
    const int64_t hd = cfg->head_dim, qd = cfg->num_heads * hd, kvd = cfg->num_kv_heads * hd;
    float *q = c->q + r * qd, *k = c->k + r * kvd;
    float eps = (float)cfg->rms_norm_eps;
    if (cfg->qk_norm) {
        qwr_head_rmsnorm(q, cfg->num_heads, hd, c->layer->q_norm, eps);
        qwr_head_rmsnorm(k, cfg->num_kv_heads, hd, c->layer->k_norm, eps);
    }
    float *cs = b->rope_buf[thread], *sn = cs + hd / 2;
    qwr_rope_table(b->inv_freq, hd / 2, c->p->positions[r], cs, sn);
    qwr_rope_neox(q, cfg->num_heads, hd, cs, sn);
    qwr_rope_neox(k, cfg->num_kv_heads, hd, cs, sn);
    int64_t slot = c->p->slot_mapping[r];
    if (b->kv_dtype == QW_KV_CACHE_FP8_E4M3) {
        /* K: kplane_task, after every row's RoPE */
        qwi_cpu_kv_put_v_fp8((uint8_t *)c->v_cache, c->v + r * kvd, slot, b->bc.block_size, kvd, hd, c->v_scale);
    } else if (b->kv_dtype == QW_KV_CACHE_BF16) {
        qwi_cpu_kv_put_v_bf16((uint16_t *)c->v_cache, c->v + r * kvd, slot, b->bc.block_size, kvd, hd);
    } else {
        memcpy((float *)c->k_cache + slot * kvd, k, (size_t)kvd * sizeof(float));
        memcpy((float *)c->v_cache + slot * kvd, c->v + r * kvd, (size_t)kvd * sizeof(float));
    }
}

/* Kv head g's K of every row of the step into the K planes (bf16 / fp8
 * caches): one task per head, because the rows of a block share the
 * planes' cache lines (cpu/attention.h) and a split by row would have the
 * threads writing the same lines. */
static void kplane_task(void *arg, int64_t g, int thread) {
    const fwd_ctx *c = arg;
    const cpu_backend *b = c->b;
    const int64_t hd = b->cfg.head_dim, kvd = b->cfg.num_kv_heads * hd;
    const int32_t bs = b->bc.block_size;
    for (int32_t r = 0; r < c->M; r++) {
        const int64_t slot = c->p->slot_mapping[r];
        const float *k = c->k + r * kvd;
        if (b->kv_dtype == QW_KV_CACHE_FP8_E4M3)
            qwi_cpu_kv_put_k_fp8((uint8_t *)c->k_cache, k, slot, bs, kvd, c->k_scale, g * hd, (g + 1) * hd);
        else
            qwi_cpu_kv_put_k_bf16((uint16_t *)c->k_cache, k, slot, bs, kvd, g * hd, (g + 1) * hd);
    }
}

static void gather_task(void *arg, int64_t i, int thread) {
    const fwd_ctx *c = arg;
    const cpu_backend *b = c->b;
    const int64_t H = b->cfg.hidden_size;
    int32_t s = b->logit_seq[c->log0 + i];
    int32_t row = c->p->query_start[s + 1] - 1;
    qwr_rmsnorm(b->x + (int64_t)row * H, b->final_norm, H, (float)b->cfg.rms_norm_eps, b->xf + i * H);
}

static void sample_task(void *arg, int64_t i, int thread) {
    const fwd_ctx *c = arg;
    const cpu_backend *b = c->b;
    const qwi_plan *p = c->p;
    const int32_t V = b->cfg.vocab_size;
    int32_t s = b->logit_seq[c->log0 + i];
    const float *lg = b->logits + i * V;
    if (p->want_logits && p->want_logits[s])
        memcpy(p->logits_out + (int64_t)s * V, lg, (size_t)V * sizeof(float));
    if (p->do_sample[s])
        p->sampled[s] = qwi_sample(lg, V, &p->sampling[s], p->context_lens[s], b->ss[thread]);
    if (p->do_sample[s] && p->logprobs_n && p->logprobs_n[s] >= 0)
        qwi_logprobs_row(lg, V, p->sampled[s], p->logprobs_n[s], p->logprobs_out + (int64_t)s * QWI_LP_STRIDE);
}

/* Prompt logprobs: rows row0.. of one pass, normed into xf, then each
 * logits row reduced to its pairs at once (never kept past the pass). */
static void prompt_gather_task(void *arg, int64_t i, int thread) {
    const fwd_ctx *c = arg;
    const cpu_backend *b = c->b;
    const int64_t H = b->cfg.hidden_size;
    qwr_rmsnorm(b->x + (c->row0 + i) * H, b->final_norm, H, (float)b->cfg.rms_norm_eps, b->xf + i * H);
}

static void prompt_reduce_task(void *arg, int64_t i, int thread) {
    const fwd_ctx *c = arg;
    const cpu_backend *b = c->b;
    const qwi_plan *p = c->p;
    const int32_t V = b->cfg.vocab_size;
    const int64_t r = c->row0 + i;
    qwi_logprobs_row(b->logits + i * V, V, p->prompt_target[r], p->prompt_logprobs_n[b->row_seq[r]],
                     p->prompt_logprobs_out + r * QWI_LP_STRIDE);
}

/* The lm_head over every marked prompt row, in passes of at most
 * logit_rows contiguous rows of one sequence (the logits scratch). */
static void prompt_logprobs(cpu_backend *b, fwd_ctx *c) {
    const qwi_plan *p = c->p;
    qwi_cpu_mm_job head = { &b->lm_head, b->logits, 0 };
    for (int32_t s = 0; s < p->num_seqs; s++) {
        if (p->prompt_logprobs_n[s] < 0) continue;
        for (int32_t r = p->query_start[s]; r < p->query_start[s + 1];) {
            if (p->prompt_target[r] < 0) {
                r++;
                continue;
            }
            int32_t end = r;
            while (end < p->query_start[s + 1] && p->prompt_target[end] >= 0 && end - r < b->logit_rows) end++;
            c->row0 = r;
            qwi_cpu_pool_run(b->pool, end - r, prompt_gather_task, c);
            qwi_cpu_matmul(&b->cx, b->xf, end - r, b->cfg.hidden_size, &head, 1);
            qwi_cpu_pool_run(b->pool, end - r, prompt_reduce_task, c);
            r = end;
        }
    }
}

/* The matmul of an x that a row op has just written; pairs: the rounded
 * rows it also wrote (fast numerics), or NULL. */
static void matmul_after_row_op(const qwi_cpu_ctx *cx, const float *x, int64_t M, int64_t K,
                                const qwi_cpu_mm_job *jobs, int njobs, const uint32_t *pairs) {
    if (pairs) qwi_cpu_matmul_rounded(cx, x, M, K, jobs, njobs);
    else qwi_cpu_matmul(cx, x, M, K, jobs, njobs);
}

/* Where the row op before these jobs rounds its rows: xp (fast numerics'
 * pairs, or NULL) when some job reads pairs, else NULL. */
static uint32_t *pairs_for(uint32_t *xp, const qwi_cpu_mm_job *jobs, int njobs) {
    return xp && qwi_cpu_jobs_read_pairs(jobs, njobs) ? xp : NULL;
}

static qw_status cpu_forward(qwi_backend *base, const qwi_plan *p) {
    cpu_backend *b = (cpu_backend *)base;
    if (!b || !p) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "cpu: forward: NULL backend or plan");
    qw_status st = check_plan(b, p);
    if (st != QW_OK) return st;
    const qwi_config *cfg = &b->cfg;
    const int32_t M = p->num_tokens, S = p->num_seqs;
    const int64_t H = cfg->hidden_size, I = cfg->intermediate_size, hd = cfg->head_dim;
    const int64_t qd = cfg->num_heads * hd, kvd = cfg->num_kv_heads * hd;
    const int64_t T = b->bc.max_num_batched_tokens;
    const float eps = (float)cfg->rms_norm_eps;
    const qwi_cpu_ctx *cx = &b->cx;

    for (int32_t s = 0; s < S; s++) {
        p->sampled[s] = -1;
        for (int32_t r = p->query_start[s]; r < p->query_start[s + 1]; r++) b->row_seq[r] = s;
    }
    if (M == 0) return QW_OK;

    fwd_ctx c = { .b = b, .p = p, .M = M };
    c.rows_per_task = QWI_MAX((int64_t)1, QWI_DIV_UP((int64_t)M, 4 * (int64_t)b->nthreads));
    qwi_cpu_pool_run(b->pool, QWI_DIV_UP((int64_t)M, c.rows_per_task), embed_task, &c);

    float *h = b->bufA, *att = b->bufA;
    /* fast numerics: the norms, attention and the SiLU round their output
     * rows to the matmuls' bf16 pairs as they write them
     * (qwi_cpu_matmul_rounded), where the next matmul reads pairs at all
     * (int4 and int8 read their own) */
    uint32_t *xp = fast_mode(b) ? cx->xpair : NULL;
    c.q = b->bufB;
    c.k = b->bufB + T * qd;
    c.v = c.k + T * kvd;
    float *gate = b->bufB, *up = b->bufB + T * I;

    qwi_cpu_attn at = {
        .q = c.q, .out = att, .positions = p->positions, .row_seq = b->row_seq,
        .block_tables = p->block_tables, .max_blocks_per_seq = p->max_blocks_per_seq,
        .block_size = b->bc.block_size, .num_tokens = M, .num_heads = cfg->num_heads,
        .num_kv_heads = cfg->num_kv_heads, .head_dim = cfg->head_dim,
        .scale = (float)(1.0 / sqrt((double)hd)),
        .bf16_dot = fast_mode(b),
    };

    for (int32_t l = 0; l < cfg->num_layers; l++) {
        const cpu_layer *L = &b->layers[l];
        c.layer = L;
        c.k_cache = (char *)b->kv + (size_t)l * 2 * b->layer_elems * b->kv_elem;
        c.v_cache = (char *)c.k_cache + b->layer_elems * b->kv_elem;

        qwi_cpu_mm_job qkv[3] = { { &L->q, c.q, 0 }, { &L->k, c.k, 0 }, { &L->v, c.v, 0 } };
        uint32_t *hp = pairs_for(xp, qkv, 3);
        qwi_cpu_rmsnorm_rows(cx, b->x, L->in_norm, M, H, eps, h, hp);
        matmul_after_row_op(cx, h, M, H, qkv, 3, hp);
        if (b->kv_dtype == QW_KV_CACHE_FP8_E4M3) {
            c.k_scale = at.k_scale = b->kv_scale[l];
            c.v_scale = at.v_scale = b->kv_scale[cfg->num_layers + l];
        }
        qwi_cpu_pool_run(b->pool, M, qk_rope_task, &c);
        if (b->kv_dtype == QW_KV_CACHE_FP8_E4M3 || b->kv_dtype == QW_KV_CACHE_BF16) {
            /* a few rows (decode): on this thread, no hand-off */
            if (M >= 8)
                qwi_cpu_pool_run(b->pool, cfg->num_kv_heads, kplane_task, &c);
            else
                for (int32_t g = 0; g < cfg->num_kv_heads; g++) kplane_task(&c, g, 0);
        }

        if (b->kv_dtype == QW_KV_CACHE_FP8_E4M3) {
            at.k_fp8 = c.k_cache;
            at.v_fp8 = c.v_cache;
            at.kb = b->kb;
            at.kf = b->kf;
        } else if (b->kv_dtype == QW_KV_CACHE_BF16) {
            at.k_bf16 = c.k_cache;
            at.v_bf16 = c.v_cache;
            at.kb = b->kb;
        } else {
            at.k_cache = c.k_cache;
            at.v_cache = c.v_cache;
        }
        qwi_cpu_mm_job o = { &L->o, b->x, 1 };
        at.out_pairs = hd % 2 == 0 ? pairs_for(xp, &o, 1) : NULL;
        qwi_cpu_attention(b->pool, cx->kt, b->attn_buf, &at);
        matmul_after_row_op(cx, att, M, qd, &o, 1, at.out_pairs);

        qwi_cpu_mm_job gu[2] = { { &L->gate, gate, 0 }, { &L->up, up, 0 } };
        hp = pairs_for(xp, gu, 2);
        qwi_cpu_rmsnorm_rows(cx, b->x, L->post_norm, M, H, eps, h, hp);
        matmul_after_row_op(cx, h, M, H, gu, 2, hp);
        qwi_cpu_mm_job down = { &L->down, b->x, 1 };
        hp = pairs_for(xp, &down, 1);
        qwi_cpu_silu_mul_rows(cx, gate, up, M, I, gate, hp);
        matmul_after_row_op(cx, gate, M, I, &down, 1, hp);
    }

    /* lm_head only for the last row of each sequence that needs logits. */
    int32_t nl = 0;
    for (int32_t s = 0; s < S; s++)
        if (p->do_sample[s] || (p->want_logits && p->want_logits[s])) b->logit_seq[nl++] = s;
    for (c.log0 = 0; c.log0 < nl; c.log0 += c.nlog) {
        c.nlog = QWI_MIN(b->logit_rows, nl - c.log0);
        qwi_cpu_pool_run(b->pool, c.nlog, gather_task, &c);
        qwi_cpu_mm_job head = { &b->lm_head, b->logits, 0 };
        qwi_cpu_matmul(cx, b->xf, c.nlog, H, &head, 1);
        qwi_cpu_pool_run(b->pool, c.nlog, sample_task, &c);
    }
    if (p->prompt_logprobs_n) prompt_logprobs(b, &c);
    return QW_OK;
}
