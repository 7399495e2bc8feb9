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

int qwk_gemm_cached(const qwk_gemm *g) { return g ? g->used : 0; }

static cublasStatus_t entry_init(qwk_gemm *g, entry *e, int32_t M, int32_t N, int32_t K, int f32) {
    cublasStatus_t st;
    memset(e, 0, sizeof *e);
    const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
    const cudaDataType_t dt = f32 ? CUDA_R_32F : CUDA_R_16BF;
    if ((st = cublasLtMatmulDescCreate(&e->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F)) != CUBLAS_STATUS_SUCCESS) goto fail;
    if ((st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof opT)) != CUBLAS_STATUS_SUCCESS) goto fail;
    if ((st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof opN)) != CUBLAS_STATUS_SUCCESS) goto fail;
    if ((st = cublasLtMatrixLayoutCreate(&e->a, CUDA_R_16BF, K, N, K)) != CUBLAS_STATUS_SUCCESS) goto fail;
    if ((st = cublasLtMatrixLayoutCreate(&e->b, CUDA_R_16BF, K, M, K)) != CUBLAS_STATUS_SUCCESS) goto fail;
    if ((st = cublasLtMatrixLayoutCreate(&e->d, dt, N, M, N)) != CUBLAS_STATUS_SUCCESS) goto fail;
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
    e->f32 = f32;
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

int qwk_gemm_run(qwk_gemm *g, cudaStream_t stream, const void *x, const void *w, void *y, int y_f32,
                 int32_t M, int32_t N, int32_t K) {
    if (M <= 0 || N <= 0 || K <= 0) return 0;
    const int32_t MB = qwi_cuda_gemm_bucket(M);
    uint32_t hsh = ((uint32_t)MB * 2654435761u) ^ ((uint32_t)N * 40503u) ^ ((uint32_t)K * 97u) ^ (uint32_t)y_f32;
    entry *e = NULL, tmp;
    for (int probe = 0; probe < CACHE_SLOTS; probe++) {
        entry *s = &g->slots[(hsh + probe) % CACHE_SLOTS];
        if (s->m == MB && s->n == N && s->k == K && s->f32 == y_f32) {
            e = s;
            break;
        }
        if (s->m == 0) {
            if (g->used < CACHE_SLOTS * 3 / 4) {
                cublasStatus_t st = entry_init(g, s, MB, N, K, y_f32);
                if (st != CUBLAS_STATUS_SUCCESS) return (int)st;
                g->used++;
                e = s;
            }
            break;
        }
    }
    const float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t st = CUBLAS_STATUS_NOT_SUPPORTED;
    if (e && (st = entry_set_m(e, M)) == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmul(g->lt, e->desc, &alpha, w, e->a, x, e->b, &beta, y, e->d, y, e->d, &e->algo, g->ws,
                            QWK_GEMM_WORKSPACE, stream);
    if (e && st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_INVALID_VALUE) return (int)st;
    /* no free slot, or the bucket's algorithm does not take this M: exact */
    st = entry_init(g, &tmp, M, N, K, y_f32);
    if (st != CUBLAS_STATUS_SUCCESS) return (int)st;
    st = cublasLtMatmul(g->lt, tmp.desc, &alpha, w, tmp.a, x, tmp.b, &beta, y, tmp.d, y, tmp.d, &tmp.algo, g->ws,
                        QWK_GEMM_WORKSPACE, stream);
    entry_free(&tmp);
    return (int)st;
}
