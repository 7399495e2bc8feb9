/*
 * gemm.cu - cuBLASLt GEMMs with a per-shape algorithm cache (see gemm.h).
 *
 * Row-major Y[M][N] = X[M][K] W[N][K]^T is, in cuBLASLt's column-major
 * terms, D(N x M) = op(A) B with A = W viewed as K x N (ld K, op T) and
 * B = X viewed as K x M (ld K), D ld N.
 *
 * The cache is keyed on qwi_cuda_gemm_bucket(M), not M: the algorithm is
 * chosen once for the bucket's M and the B and D layouts are re-pointed at
 * the real M on every call (their column count is the only thing M
 * changes). Should cuBLASLt refuse the bucket's algorithm at some M, that
 * call queries the exact shape uncached.
 */
#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_host.h"
#include "gemm.h"

#define CACHE_SLOTS 4096   /* open addressing; past ~3/4 full, shapes run uncached */

typedef struct entry {
    int32_t m, n, k, f32;      /* m == 0: empty */
    int32_t fp8;               /* 1: the block-scaled FP8 GEMM (fp8_block.h)  */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
    int has_algo;
} entry;

struct qwk_gemm {
    cublasLtHandle_t lt;
    void *ws;
    int used;
    entry *slots;
};

int qwk_gemm_create(void *workspace, qwk_gemm **out) {
    *out = NULL;
    qwk_gemm *g = (qwk_gemm *)calloc(1, sizeof *g);
    if (!g) return (int)CUBLAS_STATUS_ALLOC_FAILED;
    g->slots = (entry *)calloc(CACHE_SLOTS, sizeof(entry));
    if (!g->slots) {
        free(g);
        return (int)CUBLAS_STATUS_ALLOC_FAILED;
    }
    cublasStatus_t st = cublasLtCreate(&g->lt);
    if (st != CUBLAS_STATUS_SUCCESS) {
        free(g->slots);
        free(g);
        return (int)st;
    }
    g->ws = workspace;
    *out = g;
    return 0;
}

static void entry_free(entry *e) {
    if (e->desc) cublasLtMatmulDescDestroy(e->desc);
    if (e->a) cublasLtMatrixLayoutDestroy(e->a);
    if (e->b) cublasLtMatrixLayoutDestroy(e->b);
    if (e->d) cublasLtMatrixLayoutDestroy(e->d);
    memset(e, 0, sizeof *e);
}

void qwk_gemm_destroy(qwk_gemm *g) {
    if (!g) return;
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (g->slots[i].m) entry_free(&g->slots[i]);
    free(g->slots);
    cublasLtDestroy(g->lt);
    free(g);
}

int qwk_gemm_refused(int status) {
    return status == (int)CUBLAS_STATUS_NOT_SUPPORTED || status == (int)CUBLAS_STATUS_INVALID_VALUE;
}

int qwk_gemm_cached(const qwk_gemm *g) { return g ? g->used : 0; }

#define TRY(call) do { if ((st = (call)) != CUBLAS_STATUS_SUCCESS) goto fail; } while (0)

/* The FP8 descriptor's scale modes (fp8_block.h): the weight (A) one f32
 * per 128 x 128 block, the activations (B) one per 1 x 128 group; no fast
 * accumulation (the block scales need cuBLASLt's promoted f32 sums, and
 * it refuses the two together). */
static cublasStatus_t fp8_desc(cublasLtMatmulDesc_t desc) {
    cublasStatus_t st;
    const int32_t amode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, bmode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    const int8_t fast = 0;
    TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &amode, sizeof amode));
    TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bmode, sizeof bmode));
    TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
fail:
    return st;
}

/* Point e's FP8 scale attributes at this call's tensors. */
static cublasStatus_t fp8_scales(cublasLtMatmulDesc_t desc, const float *wgrid, const float *xs) {
    cublasStatus_t st;
    TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &wgrid, sizeof wgrid));
    TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &xs, sizeof xs));
fail:
    return st;
}

/* e's descriptor, layouts and heuristic algorithm for an M x N x K GEMM:
 * bf16 operands and an f32 (f32 != 0) or bf16 output, or (fp8) e4m3
 * operands with fp8_desc's scale modes and an f32 output, the scale
 * tensors wgrid/xs set before the heuristic is asked (NULL for bf16). */
static cublasStatus_t entry_init(qwk_gemm *g, entry *e, int32_t M, int32_t N, int32_t K, int f32, int fp8,
                                 const float *wgrid, const float *xs) {
    cublasStatus_t st;
    memset(e, 0, sizeof *e);
    const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
    const cudaDataType_t dt = f32 || fp8 ? CUDA_R_32F : CUDA_R_16BF;
    const cudaDataType_t in = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    TRY(cublasLtMatmulDescCreate(&e->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    TRY(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof opT));
    TRY(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof opN));
    if (fp8) {
        TRY(fp8_desc(e->desc));
        TRY(fp8_scales(e->desc, wgrid, xs));
    }
    TRY(cublasLtMatrixLayoutCreate(&e->a, in, K, N, K));
    TRY(cublasLtMatrixLayoutCreate(&e->b, in, K, M, K));
    TRY(cublasLtMatrixLayoutCreate(&e->d, dt, N, M, N));
    {
        cublasLtMatmulPreference_t pref;
        if ((st = cublasLtMatmulPreferenceCreate(&pref)) != CUBLAS_STATUS_SUCCESS) goto fail;
        uint64_t ws = QWK_GEMM_WORKSPACE;
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
        cublasLtMatmulHeuristicResult_t res;
        int n = 0;
        st = cublasLtMatmulAlgoGetHeuristic(g->lt, e->desc, e->a, e->b, e->d, e->d, pref, 1, &res, &n);
        cublasLtMatmulPreferenceDestroy(pref);
        if (st != CUBLAS_STATUS_SUCCESS) goto fail;
        if (n < 1) {
            st = CUBLAS_STATUS_NOT_SUPPORTED;
            goto fail;
        }
        e->algo = res.algo;
        e->has_algo = 1;
    }
    e->m = M;
    e->n = N;
    e->k = K;
    e->f32 = f32 || fp8;
    e->fp8 = fp8;
    return CUBLAS_STATUS_SUCCESS;
fail:
    entry_free(e);
    return st;
}

/* Point the B and D layouts of e at M columns (rows of X and Y). */
static cublasStatus_t entry_set_m(entry *e, int32_t M) {
    const uint64_t cols = (uint64_t)M;
    cublasStatus_t st = cublasLtMatrixLayoutSetAttribute(e->b, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof cols);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutSetAttribute(e->d, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof cols);
    return st;
}

/* The cached entry of (bucket of M, N, K, output, fp8), made on first use;
 * NULL when the cache is full (the caller then runs the exact shape
 * uncached). *st: the heuristic's refusal, if that is why it is NULL. */
static entry *lookup(qwk_gemm *g, int32_t M, int32_t N, int32_t K, int f32, int fp8, const float *wgrid,
                     const float *xs, cublasStatus_t *st) {
    const int32_t MB = qwi_cuda_gemm_bucket(M);
    f32 = f32 || fp8;
    uint32_t hsh = ((uint32_t)MB * 2654435761u) ^ ((uint32_t)N * 40503u) ^ ((uint32_t)K * 97u) ^ (uint32_t)f32 ^
                   ((uint32_t)fp8 << 1);
    *st = CUBLAS_STATUS_SUCCESS;
    for (int probe = 0; probe < CACHE_SLOTS; probe++) {
        entry *s = &g->slots[(hsh + probe) % CACHE_SLOTS];
        if (s->m == MB && s->n == N && s->k == K && s->f32 == f32 && s->fp8 == fp8) return s;
        if (s->m == 0) {
            if (g->used >= CACHE_SLOTS * 3 / 4) return NULL;
            if ((*st = entry_init(g, s, MB, N, K, f32, fp8, wgrid, xs)) != CUBLAS_STATUS_SUCCESS) return NULL;
            g->used++;
            return s;
        }
    }
    return NULL;
}

/* Run e (or, where e is NULL or its bucket's algorithm does not take this
 * M, the exact shape uncached) on the operands. */
static int run(qwk_gemm *g, entry *e, cudaStream_t stream, const void *x, const void *w, void *y, int32_t M,
               int32_t N, int32_t K, int f32, int fp8, const float *wgrid, const float *xs) {
    const float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t st = CUBLAS_STATUS_NOT_SUPPORTED;
    if (e && (st = entry_set_m(e, M)) == CUBLAS_STATUS_SUCCESS && (!fp8 || (st = fp8_scales(e->desc, wgrid, xs)) ==
                                                                   CUBLAS_STATUS_SUCCESS))
        st = cublasLtMatmul(g->lt, e->desc, &alpha, w, e->a, x, e->b, &beta, y, e->d, y, e->d, &e->algo, g->ws,
                            QWK_GEMM_WORKSPACE, stream);
    if (e && st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_INVALID_VALUE) return (int)st;
    entry tmp;
    st = entry_init(g, &tmp, M, N, K, f32, fp8, wgrid, xs);
    if (st != CUBLAS_STATUS_SUCCESS) return (int)st;
    st = cublasLtMatmul(g->lt, tmp.desc, &alpha, w, tmp.a, x, tmp.b, &beta, y, tmp.d, y, tmp.d, &tmp.algo, g->ws,
                        QWK_GEMM_WORKSPACE, stream);
    entry_free(&tmp);
    return (int)st;
}

int qwk_gemm_run(qwk_gemm *g, cudaStream_t stream, const void *x, const void *w, void *y, int y_f32,
                 int32_t M, int32_t N, int32_t K) {
    if (M <= 0 || N <= 0 || K <= 0) return 0;
    cublasStatus_t st;
    entry *e = lookup(g, M, N, K, y_f32, 0, NULL, NULL, &st);
    if (!e && st != CUBLAS_STATUS_SUCCESS) return (int)st;
    return run(g, e, stream, x, w, y, M, N, K, y_f32, 0, NULL, NULL);
}

int qwk_gemm_prepare_fp8(qwk_gemm *g, const float *xs, const float *wgrid, int32_t M4, int32_t N, int32_t K) {
    if (M4 <= 0 || N <= 0 || K <= 0) return 0;
    cublasStatus_t st;
    entry *e = lookup(g, M4, N, K, 1, 1, wgrid, xs, &st);
    if (e || st != CUBLAS_STATUS_SUCCESS) return (int)st;
    /* the cache is full: ask for the shape uncached */
    entry tmp;
    st = entry_init(g, &tmp, M4, N, K, 1, 1, wgrid, xs);
    if (st == CUBLAS_STATUS_SUCCESS) entry_free(&tmp);
    return (int)st;
}

int qwk_gemm_run_fp8(qwk_gemm *g, cudaStream_t stream, const uint8_t *xq, const float *xs, const uint8_t *wq,
                     const float *wgrid, float *y, int32_t M4, int32_t N, int32_t K) {
    if (M4 <= 0 || N <= 0 || K <= 0) return 0;
    cublasStatus_t st;
    entry *e = lookup(g, M4, N, K, 1, 1, wgrid, xs, &st);
    if (!e && st != CUBLAS_STATUS_SUCCESS) return (int)st;
    return run(g, e, stream, xq, wq, y, M4, N, K, 1, 1, wgrid, xs);
}
