/*
 * cublaslt_sim.cc - the part of cuBLASLt that cuda/gemm.cu calls, for the
 * CPU emulation (tests/cudasim/cudasim.h): handles, matmul and layout
 * descriptors, a heuristic that offers one algorithm, and cublasLtMatmul
 * computing D = alpha op(A) op(B) + beta C in column-major terms, as the
 * library defines it, on host memory, in stream order (recorded when the
 * stream is capturing).
 *
 * What it checks, as cuBLASLt would refuse it: every attribute size, the
 * shapes (op(A) m x k, op(B) k x n, D m x n, each ld at least its rows),
 * C's layout equal to D's, an algorithm that came from the heuristic, the
 * types (A, B bf16, f16 or f32; C, D bf16 or f32; compute and scale f32).
 * The block-scaled FP8 GEMM of cuda/fp8_block.h, in the one form that file
 * uses (A, B e4m3, op(A) = T with CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
 * op(B) = N with VEC128_32F, fast accumulation off, D f32, m and k
 * multiples of 128), reading the scale tensors in Transformer Engine's
 * layout: A's [m/128][ceil(k/128) rounded up to 4], B's [k/128][n] with n a
 * multiple of 4 (refused otherwise: which leading dimension the library
 * takes for other n is what the backend's padding to 4 rows avoids
 * knowing). Every other scale mode, and scales on non-e4m3 operands, are
 * refused as not emulated. QWSIM_CUBLASLT_FP8=none refuses that GEMM in the
 * heuristic (a cuBLASLt without it), =matmul in cublasLtMatmul only (one
 * that offers an algorithm and then refuses the call): the backend's two
 * fallbacks to dequantizing.
 * What it does not model: the library's summation order and its blocking
 * (sums here run in k order in f32), the workspace, epilogues.
 */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "cudasim.h"

struct cublasLtContext {
    uint64_t magic;
};

namespace {

const uint64_t HANDLE_MAGIC = 0x71776c74u, ALGO_MAGIC = 0x616c676fu;

/* Our fields inside the opaque descriptors' data[] words. */
struct layout {
    uint64_t type, rows, cols;
    int64_t ld;
};
struct desc {
    uint64_t compute, scale;
    int32_t transa, transb;
    int32_t amode, bmode;              /* CUBLASLT_MATMUL_MATRIX_SCALE_*     */
    int32_t fast_accum;
    const void *ascale, *bscale;       /* device pointers (host memory here) */
};
static_assert(sizeof(layout) <= sizeof(cublasLtMatrixLayoutOpaque_t), "layout fits");
static_assert(sizeof(desc) <= sizeof(cublasLtMatmulDescOpaque_t), "desc fits");

layout *L(cublasLtMatrixLayout_t l) { return reinterpret_cast<layout *>(l->data); }
desc *D(cublasLtMatmulDesc_t d) { return reinterpret_cast<desc *>(d->data); }

bool input_type(uint64_t t) { return t == CUDA_R_16BF || t == CUDA_R_16F || t == CUDA_R_32F; }

/* e4m3 bit pattern -> value (OCP e4m3fn: no infinities, S.1111.111 NaN) */
float e4m3(uint8_t b) {
    const int e = (b >> 3) & 15, m = b & 7;
    float v = e ? ldexpf(1.f + m / 8.f, e - 7) : ldexpf((float)m, -9);
    if (e == 15 && m == 7) v = NAN;
    return (b & 0x80) ? -v : v;
}
bool output_type(uint64_t t) { return t == CUDA_R_16BF || t == CUDA_R_32F; }

float load(uint64_t type, const void *p, size_t i) {
    switch (type) {
    case CUDA_R_16BF: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case CUDA_R_16F: return __half2float(((const __half *)p)[i]);
    case CUDA_R_8F_E4M3: return e4m3(((const uint8_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}
void store(uint64_t type, void *p, size_t i, float v) {
    if (type == CUDA_R_16BF) ((__nv_bfloat16 *)p)[i] = __float2bfloat16(v);   /* round to nearest even */
    else ((float *)p)[i] = v;
}

/* The problem's m, n, k from the layouts, or false where they disagree. */
bool shapes(const desc *d, const layout *a, const layout *b, const layout *c, const layout *dd, uint64_t *m,
            uint64_t *n, uint64_t *k) {
    const uint64_t am = d->transa == CUBLAS_OP_N ? a->rows : a->cols, ak = d->transa == CUBLAS_OP_N ? a->cols : a->rows;
    const uint64_t bk = d->transb == CUBLAS_OP_N ? b->rows : b->cols, bn = d->transb == CUBLAS_OP_N ? b->cols : b->rows;
    if (am != dd->rows || bn != dd->cols || ak != bk) return false;
    if (c->rows != dd->rows || c->cols != dd->cols || c->type != dd->type || c->ld != dd->ld) return false;
    for (const layout *l : {a, b, c, dd})
        if (l->ld < (int64_t)l->rows || l->rows == 0 || l->cols == 0) return false;
    *m = am;
    *n = bn;
    *k = ak;
    return true;
}

bool scaled(const desc *d) {
    return d->amode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F || d->bmode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
}

bool types_ok(const desc *d, const layout *a, const layout *b, const layout *dd) {
    if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F || a->type != b->type || !output_type(dd->type))
        return false;
    if (a->type != CUDA_R_8F_E4M3) return input_type(a->type) && !scaled(d);
    /* e4m3: only the block-scaled form described above */
    return d->amode == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F &&
           d->bmode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F && d->fast_accum == 0 && d->transa == CUBLAS_OP_T &&
           d->transb == CUBLAS_OP_N && dd->type == CUDA_R_32F;
}

/* The block-scaled form's shape rules (types_ok already passed). */
bool fp8_shape_ok(uint64_t m, uint64_t n, uint64_t k) { return m % 128 == 0 && k % 128 == 0 && n % 4 == 0; }

/* QWSIM_CUBLASLT_FP8 == what */
bool fp8_refused(const char *what) {
    const char *v = getenv("QWSIM_CUBLASLT_FP8");
    return v && !strcmp(v, what);
}

} // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    *h = new cublasLtContext{HANDLE_MAGIC};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    if (!h || h->magic != HANDLE_MAGIC) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *out, cublasComputeType_t compute, cudaDataType_t scale) {
    *out = (cublasLtMatmulDesc_t)calloc(1, sizeof(cublasLtMatmulDescOpaque_t));
    if (!*out) return CUBLAS_STATUS_ALLOC_FAILED;
    *D(*out) = desc{(uint64_t)compute, (uint64_t)scale, CUBLAS_OP_N, CUBLAS_OP_N,
                    CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F, CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F, 1, NULL, NULL};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { free(d); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size) {
    if (!buf) return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER:
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER:
        if (size != sizeof(void *)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(attr == CUBLASLT_MATMUL_DESC_A_SCALE_POINTER ? &D(d)->ascale : &D(d)->bscale, buf, sizeof(void *));
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM: {   /* int8_t */
        if (size != sizeof(int8_t)) return CUBLAS_STATUS_INVALID_VALUE;
        int8_t f;
        memcpy(&f, buf, 1);
        D(d)->fast_accum = f;
        return CUBLAS_STATUS_SUCCESS;
    }
    default: break;
    }
    if (size != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
    int32_t v;
    memcpy(&v, buf, sizeof v);
    if (attr == CUBLASLT_MATMUL_DESC_A_SCALE_MODE || attr == CUBLASLT_MATMUL_DESC_B_SCALE_MODE) {
        if (v < CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F || v >= CUBLASLT_MATMUL_MATRIX_SCALE_END)
            return CUBLAS_STATUS_INVALID_VALUE;
        (attr == CUBLASLT_MATMUL_DESC_A_SCALE_MODE ? D(d)->amode : D(d)->bmode) = v;
        return CUBLAS_STATUS_SUCCESS;
    }
    if (v != CUBLAS_OP_N && v != CUBLAS_OP_T) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (attr == CUBLASLT_MATMUL_DESC_TRANSA) D(d)->transa = v;
    else if (attr == CUBLASLT_MATMUL_DESC_TRANSB) D(d)->transb = v;
    else return CUBLAS_STATUS_NOT_SUPPORTED;   /* not emulated */
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *out, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
    *out = (cublasLtMatrixLayout_t)calloc(1, sizeof(cublasLtMatrixLayoutOpaque_t));
    if (!*out) return CUBLAS_STATUS_ALLOC_FAILED;
    *L(*out) = layout{(uint64_t)type, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { free(l); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t size) {
    if (!buf) return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_ROWS:
    case CUBLASLT_MATRIX_LAYOUT_COLS: {
        if (size != sizeof(uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
        uint64_t v;
        memcpy(&v, buf, sizeof v);
        (attr == CUBLASLT_MATRIX_LAYOUT_ROWS ? L(l)->rows : L(l)->cols) = v;
        return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATRIX_LAYOUT_LD:
        if (size != sizeof(int64_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&L(l)->ld, buf, sizeof(int64_t));
        return CUBLAS_STATUS_SUCCESS;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;   /* not emulated */
    }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *out) {
    *out = (cublasLtMatmulPreference_t)calloc(1, sizeof(cublasLtMatmulPreferenceOpaque_t));
    return *out ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { free(p); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t size) {
    if (attr != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (!buf || size != sizeof(uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(&p->data[0], buf, sizeof(uint64_t));
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t dd, cublasLtMatmulPreference_t,
                                              int requested, cublasLtMatmulHeuristicResult_t *res, int *count) {
    if (!h || h->magic != HANDLE_MAGIC) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (requested < 1 || !res || !count) return CUBLAS_STATUS_INVALID_VALUE;
    uint64_t m, n, k;
    *count = 0;
    if (!types_ok(D(d), L(a), L(b), L(dd))) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (!shapes(D(d), L(a), L(b), L(c), L(dd), &m, &n, &k)) return CUBLAS_STATUS_INVALID_VALUE;
    if (L(a)->type == CUDA_R_8F_E4M3 && (!fp8_shape_ok(m, n, k) || fp8_refused("none")))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    memset(&res[0], 0, sizeof res[0]);
    res[0].algo.data[0] = ALGO_MAGIC;
    res[0].state = CUBLAS_STATUS_SUCCESS;
    res[0].wavesCount = 1.f;
    *count = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t a, const void *B, cublasLtMatrixLayout_t b, const void *beta,
                              const void *Cp, cublasLtMatrixLayout_t c, void *Dp, cublasLtMatrixLayout_t dd,
                              const cublasLtMatmulAlgo_t *algo, void *, size_t, cudaStream_t stream) {
    if (!h || h->magic != HANDLE_MAGIC) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!algo || algo->data[0] != ALGO_MAGIC || !alpha || !beta || !A || !B || !Dp) return CUBLAS_STATUS_INVALID_VALUE;
    uint64_t m, n, k;
    if (!types_ok(D(d), L(a), L(b), L(dd))) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (!shapes(D(d), L(a), L(b), L(c), L(dd), &m, &n, &k)) return CUBLAS_STATUS_INVALID_VALUE;
    const bool fp8 = L(a)->type == CUDA_R_8F_E4M3;
    if (fp8 && (!fp8_shape_ok(m, n, k) || !D(d)->ascale || !D(d)->bscale)) return CUBLAS_STATUS_INVALID_VALUE;
    if (fp8 && fp8_refused("matmul")) return CUBLAS_STATUS_NOT_SUPPORTED;
    /* the descriptors may change before the work runs (a captured call
     * replays later): keep their values, and the scalars (host pointers) */
    const desc dv = *D(d);
    const layout av = *L(a), bv = *L(b), cv = *L(c), dl = *L(dd);
    const float al = *(const float *)alpha, be = *(const float *)beta;
    const bool ok = qwsim::enqueue(stream, [=] {
        /* op(A) as m rows and op(B) as n columns of k contiguous f32 (read
         * once: the e2e models' GEMMs dominate an emulated step), then one
         * f32 chain per output in k order */
        std::vector<float> at(m * k), bt(n * k);
        for (uint64_t row = 0; row < m; row++)
            for (uint64_t i = 0; i < k; i++)
                at[row * k + i] = load(av.type, A, dv.transa == CUBLAS_OP_N ? row + i * (size_t)av.ld
                                                                            : i + row * (size_t)av.ld);
        for (uint64_t col = 0; col < n; col++)
            for (uint64_t i = 0; i < k; i++)
                bt[col * k + i] = load(bv.type, B, dv.transb == CUBLAS_OP_N ? i + col * (size_t)bv.ld
                                                                            : col + i * (size_t)bv.ld);
        /* block-scaled: one f32 chain a 128-column block, scaled by the
         * two blocks' scales and summed in block order */
        const uint64_t kb = (k + 127) / 128, lda_s = (kb + 3) / 4 * 4;
        const float *as = (const float *)dv.ascale, *bs = (const float *)dv.bscale;
        for (uint64_t col = 0; col < n; col++)
            for (uint64_t row = 0; row < m; row++) {
                const float *x = &at[row * k], *y = &bt[col * k];
                float s = 0.f;
                if (fp8) {
                    for (uint64_t b0 = 0; b0 < kb; b0++) {
                        float part = 0.f;
                        for (uint64_t i = b0 * 128; i < b0 * 128 + 128; i++) part += x[i] * y[i];
                        s += as[(row / 128) * lda_s + b0] * bs[b0 * n + col] * part;
                    }
                } else {
                    for (uint64_t i = 0; i < k; i++) s += x[i] * y[i];
                }
                float out = al * s;
                if (be != 0.f) out += be * load(cv.type, Cp, row + col * (size_t)cv.ld);
                store(dl.type, Dp, row + col * (size_t)dl.ld, out);
            }
    });
    return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

} // extern "C"
