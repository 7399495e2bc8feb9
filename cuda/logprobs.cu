/*
 * logprobs.cu - log-probabilities of logits rows on device; see logprobs_cuda.h.
 * One block per row: block max, then the sum of exp(x - max) in double,
 * then the top k: each thread keeps its own sorted top k of the ids it
 * visits (ascending, so an equal logit never displaces a lower id), and k
 * rounds of a block-wide max over the threads' list heads merge them.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "logprobs_cuda.h"

#define LPB 256
#define LP_STRIDE (QW_MAX_LOGPROBS + 1)

struct qwk_logprobs {
    int32_t max_rows;
    int32_t *d_in;          /* [2][max_rows]: k, targets; then [max_rows] rows */
    qw_logprob *d_out;      /* [max_rows][LP_STRIDE] */
    int32_t *h_in;          /* pinned mirror of d_in */
    qw_logprob *h_out;      /* pinned mirror of d_out */
};

/* Order-preserving map of a float to uint32 (larger float, larger key). */
static __device__ __forceinline__ uint32_t fkey(float x) {
    uint32_t u = __float_as_uint(x);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Higher logit first, then lower id: a larger key ranks first. */
static __device__ __forceinline__ unsigned long long rank_key(float v, int32_t id) {
    return ((unsigned long long)fkey(v) << 32) | (unsigned long long)(0xFFFFFFFFu - (uint32_t)id);
}

static __device__ float block_max_f(float v, float *sm) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sm[threadIdx.x >> 5] = v;
    __syncthreads();
    v = sm[0];
    for (int w = 1; w < LPB / 32; w++) v = fmaxf(v, sm[w]);
    return v;
}

static __device__ double block_sum_d(double v, double *sm) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sm[threadIdx.x >> 5] = v;
    __syncthreads();
    v = 0;
    for (int w = 0; w < LPB / 32; w++) v += sm[w];   /* fixed order: deterministic */
    return v;
}

static __device__ unsigned long long block_max_u64(unsigned long long v, unsigned long long *sm) {
    for (int o = 16; o > 0; o >>= 1) {
        unsigned long long w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sm[threadIdx.x >> 5] = v;
    __syncthreads();
    v = sm[0];
    for (int w = 1; w < LPB / 32; w++) v = sm[w] > v ? sm[w] : v;
    return v;
}

__global__ void __launch_bounds__(LPB) logprobs_kernel(const float *logits, int32_t V, const int32_t *ks,
                                                       const int32_t *targets, qw_logprob *out) {
    __shared__ float smf[LPB / 32];
    __shared__ double smd[LPB / 32];
    __shared__ unsigned long long smu[LPB / 32];
    const int32_t row = blockIdx.x;
    int32_t k = ks[row];
    if (k < 0) return;
    if (k > V) k = V;
    const float *x = logits + (size_t)row * V;

    float m = -INFINITY;
    for (int32_t i = threadIdx.x; i < V; i += LPB) m = fmaxf(m, x[i]);
    m = block_max_f(m, smf);
    double s = 0;
    if (isfinite(m))
        for (int32_t i = threadIdx.x; i < V; i += LPB) s += (double)expf(x[i] - m);
    s = block_sum_d(s, smd);
    const double lse = isfinite(m) ? (double)m + log(s) : (double)m;

    /* this thread's top k */
    float tv[QW_MAX_LOGPROBS];
    int32_t ti[QW_MAX_LOGPROBS];
    int32_t n = 0;
    for (int32_t i = threadIdx.x; i < V && k > 0; i += LPB) {
        float v = x[i];
        if (n == k && !(v > tv[k - 1])) continue;
        int32_t j = n < k ? n++ : k - 1;
        while (j > 0 && v > tv[j - 1]) {
            tv[j] = tv[j - 1];
            ti[j] = ti[j - 1];
            j--;
        }
        tv[j] = v;
        ti[j] = i;
    }
    qw_logprob *o = out + (size_t)row * LP_STRIDE;
    int32_t head = 0;
    for (int32_t r = 0; r < k; r++) {
        unsigned long long mine = head < n ? rank_key(tv[head], ti[head]) : 0ull;
        unsigned long long best = block_max_u64(mine, smu);
        if (best == mine && head < n) {   /* keys are unique: one winner */
            o[1 + r].token = ti[head];
            o[1 + r].logprob = (float)((double)tv[head] - lse);
            head++;
        }
    }
    if (threadIdx.x == 0) {
        int32_t t = targets[row];
        o[0].token = t;
        o[0].logprob = (float)((double)x[t] - lse);
    }
}

static cudaError_t ensure(qwk_logprobs **ctx, int32_t max_rows) {
    if (*ctx) return cudaSuccess;
    qwk_logprobs *c = (qwk_logprobs *)calloc(1, sizeof *c);
    if (!c) return cudaErrorMemoryAllocation;
    c->max_rows = max_rows;
    const size_t in_bytes = (size_t)max_rows * 3 * sizeof(int32_t);
    const size_t out_bytes = (size_t)max_rows * LP_STRIDE * sizeof(qw_logprob);
    cudaError_t e = cudaMalloc((void **)&c->d_in, in_bytes);
    if (e == cudaSuccess) e = cudaMalloc((void **)&c->d_out, out_bytes);
    if (e == cudaSuccess) e = cudaMallocHost((void **)&c->h_in, in_bytes);
    if (e == cudaSuccess) e = cudaMallocHost((void **)&c->h_out, out_bytes);
    if (e != cudaSuccess) {
        qwk_logprobs_free(c);
        return e;
    }
    *ctx = c;
    return cudaSuccess;
}

cudaError_t qwk_logprobs_reduce(qwk_logprobs **ctx, int32_t max_rows, const float *d_logits, int32_t vocab,
                                int32_t n, const int32_t *k, const int32_t *d_targets, const int32_t *h_targets,
                                qw_logprob *const *dst, cudaStream_t stream) {
    cudaError_t e = ensure(ctx, max_rows);
    if (e != cudaSuccess) return e;
    qwk_logprobs *c = *ctx;
    if (n <= 0) return cudaSuccess;
    if (n > c->max_rows) return cudaErrorInvalidValue;
    memcpy(c->h_in, k, (size_t)n * sizeof(int32_t));
    if (!d_targets) memcpy(c->h_in + c->max_rows, h_targets, (size_t)n * sizeof(int32_t));
    e = cudaMemcpyAsync(c->d_in, c->h_in, (size_t)c->max_rows * 2 * sizeof(int32_t), cudaMemcpyHostToDevice, stream);
    if (e != cudaSuccess) return e;
    logprobs_kernel<<<n, LPB, 0, stream>>>(d_logits, vocab, c->d_in, d_targets ? d_targets : c->d_in + c->max_rows,
                                           c->d_out);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    e = cudaMemcpyAsync(c->h_out, c->d_out, (size_t)n * LP_STRIDE * sizeof(qw_logprob), cudaMemcpyDeviceToHost,
                        stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) return e;
    for (int32_t i = 0; i < n; i++) {
        if (k[i] < 0) continue;
        int32_t kk = k[i] < vocab ? k[i] : vocab;
        memcpy(dst[i], c->h_out + (size_t)i * LP_STRIDE, (size_t)(1 + kk) * sizeof(qw_logprob));
    }
    return cudaSuccess;
}

const int32_t *qwk_logprobs_upload_rows(qwk_logprobs **ctx, int32_t max_rows, const int32_t *rows, int32_t n,
                                        cudaStream_t stream, cudaError_t *err) {
    *err = ensure(ctx, max_rows);
    if (*err != cudaSuccess) return NULL;
    qwk_logprobs *c = *ctx;
    if (n > c->max_rows) {
        *err = cudaErrorInvalidValue;
        return NULL;
    }
    /* The pinned source may still be read by an earlier async copy of this
     * stream: wait for the stream before reusing it. */
    if ((*err = cudaStreamSynchronize(stream)) != cudaSuccess) return NULL;
    int32_t *h = c->h_in + 2 * (size_t)c->max_rows, *d = c->d_in + 2 * (size_t)c->max_rows;
    memcpy(h, rows, (size_t)n * sizeof(int32_t));
    *err = cudaMemcpyAsync(d, h, (size_t)n * sizeof(int32_t), cudaMemcpyHostToDevice, stream);
    return *err == cudaSuccess ? d : NULL;
}

void qwk_logprobs_free(qwk_logprobs *c) {
    if (!c) return;
    cudaFree(c->d_in);
    cudaFree(c->d_out);
    cudaFreeHost(c->h_in);
    cudaFreeHost(c->h_out);
    free(c);
}
