/*
 * sample.cu - on-device sampling with the semantics of lib/sample.c (read
 * its header comment: this file implements that definition). One block of
 * 1024 threads per logit row. Where lib/sample.c sorts, this file searches:
 *
 *   top-k      a radix descent over the ordered 32-bit key of x finds the
 *              k-th largest logit; ties at it are resolved by a binary
 *              search on the id (lower ids first), as the CPU heap does.
 *   prefixes   the shortest prefix of order O (e desc, id asc) whose mass
 *              reaches a target (top-p: >=, sampling: >) is found by a radix
 *              descent over the 64-bit pattern of e (positive doubles order
 *              as integers): the largest e* whose mass(e >= e*) reaches the
 *              target; the ids tied at e* are then walked in id order.
 *
 * Masses are block reductions in a fixed order (deterministic run to run)
 * but not the CPU's sequential order, and exp() in double may differ from
 * glibc's by an ulp: a draw can only disagree with the CPU where it lies
 * within ~1e-15 relative of a CDF boundary (docs/cuda.md).
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "kernels.h"
#include "philox.h"

#define SB 1024

/* The same Philox code as the CPU sampler (lib/philox.h). */
static __device__ double rng_uniform(uint64_t seed, int64_t position) {
    return qwi_philox_uniform(seed, position);
}

__global__ void rng_kernel(const uint64_t *seed, const int64_t *pos, int32_t n, double *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = rng_uniform(seed[i], pos[i]);
}

void qwk_rng_uniform(const uint64_t *seed, const int64_t *pos, int32_t n, double *out, cudaStream_t stream) {
    if (n > 0) rng_kernel<<<(n + 255) / 256, 256, 0, stream>>>(seed, pos, n, out);
}

/* ---- block reductions (fixed order) -------------------------------------- */

struct red_smem {
    double d[32];
    long long i[32];
    float f[32];
};

static __device__ double bsum_d(double v, red_smem *r) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0) r->d[w] = v;
    __syncthreads();
    double t = r->d[l];
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    return t;
}
static __device__ long long bsum_i(long long v, red_smem *r) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0) r->i[w] = v;
    __syncthreads();
    long long t = r->i[l];
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    return t;
}
static __device__ long long bmax_i(long long v, red_smem *r) {
    for (int o = 16; o > 0; o >>= 1) v = max(v, (long long)__shfl_xor_sync(0xffffffffu, v, o));
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0) r->i[w] = v;
    __syncthreads();
    long long t = r->i[l];
    for (int o = 16; o > 0; o >>= 1) t = max(t, (long long)__shfl_xor_sync(0xffffffffu, t, o));
    return t;
}
static __device__ float bmax_f(float v, red_smem *r) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0) r->f[w] = v;
    __syncthreads();
    float t = r->f[l];
    for (int o = 16; o > 0; o >>= 1) t = fmaxf(t, __shfl_xor_sync(0xffffffffu, t, o));
    return t;
}

/* order-preserving key of a float (larger x -> larger key); -inf/NaN absent */
static __device__ __forceinline__ uint32_t fkey(float x) {
    /* -0.0 == +0.0 for the CPU sampler (a tie, lower id first): one key */
    uint32_t u = x == 0.0f ? 0u : __float_as_uint(x);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
static __device__ __forceinline__ unsigned long long dkey(double e) {
    return (unsigned long long)__double_as_longlong(e);   /* e >= 0 */
}

static __device__ __forceinline__ double weight(float x, double m, double temp) {
    if ((double)x == m) return 1.0;
    double d = (double)x - m;
    if (d == -INFINITY) return 0;
    double e = exp(d / temp);
    return e == e ? e : 0;
}

/* Smallest prefix of O over e[] (0 = absent) whose running mass reaches t
 * (strict: > t, else >= t). Returns the boundary (key v, last id) in
 * *kv/*kid; *found = 0 when the whole mass never reaches t. */
static __device__ void prefix_search(const double *e, int32_t V, double t, bool strict,
                                     unsigned long long *kv, int32_t *kid, bool *found, red_smem *r,
                                     int32_t *sh_id) {
    const int tid = threadIdx.x;
    unsigned long long v = 0;
    /* radix descent: largest v with mass(key >= v) reaching t */
    double tot = 0;
    for (int i = tid; i < V; i += SB) tot += e[i];
    tot = bsum_d(tot, r);
    bool reach_all = strict ? tot > t : tot >= t;
    if (!reach_all) {
        *found = false;
        /* last of O: smallest e, largest id among ties */
        long long best = -1;
        /* two passes: min key, then max id at that key */
        long long mk = -1;
        for (int i = tid; i < V; i += SB)
            if (e[i] > 0) mk = max(mk, (long long)(0x7ff0000000000000ull - dkey(e[i])));
        mk = bmax_i(mk, r);
        unsigned long long minkey = 0x7ff0000000000000ull - (unsigned long long)mk;
        for (int i = tid; i < V; i += SB)
            if (e[i] > 0 && dkey(e[i]) == minkey) best = max(best, (long long)i);
        best = bmax_i(best, r);
        *kv = minkey;
        *kid = (int32_t)best;
        return;
    }
    for (int bit = 62; bit >= 0; bit--) {
        unsigned long long c = v | (1ull << bit);
        double m = 0;
        for (int i = tid; i < V; i += SB)
            if (e[i] > 0 && dkey(e[i]) >= c) m += e[i];
        m = bsum_d(m, r);
        if (strict ? m > t : m >= t) v = c;
    }
    /* mass strictly above v, and the ties at v in id order */
    double above = 0;
    long long nt = 0;
    for (int i = tid; i < V; i += SB) {
        if (e[i] > 0) {
            unsigned long long k = dkey(e[i]);
            if (k > v) above += e[i];
            else if (k == v) nt++;
        }
    }
    above = bsum_d(above, r);
    nt = bsum_i(nt, r);
    const double ev = __longlong_as_double((long long)v);
    if (tid == 0) {
        int32_t last = -1;
        double cum = above;
        for (int32_t i = 0; i < V; i++) {
            if (!(e[i] > 0) || dkey(e[i]) != v) continue;
            last = i;
            cum += ev;
            if (nt == 1 || (strict ? cum > t : cum >= t)) break;
        }
        *sh_id = last;
    }
    __syncthreads();
    *kv = v;
    *kid = *sh_id;
    *found = true;
    __syncthreads();
}

__global__ void __launch_bounds__(SB) sample_kernel(qwk_sample_args a) {
    __shared__ red_smem r;
    __shared__ int32_t sh_id;
    const int row = blockIdx.x, tid = threadIdx.x;
    const int32_t V = a.vocab;
    if (!a.do_sample[row]) {
        if (tid == 0) a.out[row] = -1;
        return;
    }
    float *lg = a.logits + (size_t)row * V;
    const int32_t b0 = a.banned_start[row], b1 = a.banned_start[row + 1];
    for (int j = b0 + tid; j < b1; j += SB) {
        int32_t id = a.banned[j];
        if (id >= 0 && id < V) lg[id] = -INFINITY;
    }
    __syncthreads();
    const float temp_f = a.temperature[row];

    /* greedy: largest x, lowest id (NaN, -inf never win) */
    float mx = -INFINITY;
    for (int i = tid; i < V; i += SB) {
        float x = lg[i];
        if (x == x) mx = fmaxf(mx, x);
    }
    mx = bmax_f(mx, &r);
    if (mx == -INFINITY) {
        /* nothing present: lowest id that is not banned */
        if (tid == 0) {
            int32_t pick = 0;
            for (int32_t i = 0; i < V; i++) {
                bool ban = false;
                for (int j = b0; j < b1 && !ban; j++) ban = a.banned[j] == i;
                if (!ban) {
                    pick = i;
                    break;
                }
            }
            a.out[row] = pick;
        }
        return;
    }
    if (!(temp_f > 0.0f)) {
        /* maximise -id among x == mx; -id <= 0, so start below every one
         * (from -1, every id but 0 lost to it: the answer was 1) */
        long long best = LLONG_MIN;
        for (int i = tid; i < V; i += SB)
            if (lg[i] == mx) best = max(best, -(long long)i);
        best = bmax_i(best, &r);
        if (tid == 0) a.out[row] = (int32_t)(-best);
        return;
    }
    const double temp = (double)temp_f;
    const double m = (double)mx;
    const int32_t K = a.top_k[row];
    const bool use_k = K > 0 && K < V;
    uint32_t kkey = 0;
    int32_t kid = V;   /* ids with key == kkey and id <= kid are in */
    if (use_k) {
        long long present = 0;
        for (int i = tid; i < V; i += SB) present += lg[i] == lg[i] && lg[i] != -INFINITY;
        present = bsum_i(present, &r);
        if (present > K) {
            uint32_t v = 0;
            for (int bit = 31; bit >= 0; bit--) {
                uint32_t c = v | (1u << bit);
                long long n = 0;
                for (int i = tid; i < V; i += SB) {
                    float x = lg[i];
                    n += (x == x && x != -INFINITY && fkey(x) >= c);
                }
                n = bsum_i(n, &r);
                if (n >= K) v = c;
            }
            long long gt = 0;
            for (int i = tid; i < V; i += SB) {
                float x = lg[i];
                gt += (x == x && x != -INFINITY && fkey(x) > v);
            }
            gt = bsum_i(gt, &r);
            long long need = K - gt;   /* >= 1 */
            /* smallest id t with count(key == v, id <= t) >= need */
            int32_t lo = 0, hi = V - 1;
            while (lo < hi) {
                int32_t mid = lo + (hi - lo) / 2;
                long long n = 0;
                for (int i = tid; i <= mid; i += SB) {
                    float x = lg[i];
                    n += (x == x && x != -INFINITY && fkey(x) == v);
                }
                n = bsum_i(n, &r);
                if (n >= need) hi = mid;
                else lo = mid + 1;
            }
            kkey = v;
            kid = lo;
        } else {
            kkey = 0;
            kid = V;
        }
    }
    /* e_i of the candidates */
    double *e = a.scratch + (size_t)row * V;
    const float topp = a.top_p[row], minp = a.min_p[row];
    for (int i = tid; i < V; i += SB) {
        float x = lg[i];
        double w = 0;
        if (x == x && x != -INFINITY) {
            bool in = true;
            if (use_k) {
                uint32_t k = fkey(x);
                in = k > kkey || (k == kkey && i <= kid);
            }
            if (in) w = weight(x, m, temp);
        }
        e[i] = w;
    }
    __syncthreads();
    /* top-p: keep the O-prefix reaching top_p * Z */
    if (topp < 1.0f) {
        double z = 0;
        for (int i = tid; i < V; i += SB) z += e[i];
        z = bsum_d(z, &r);
        unsigned long long pv;
        int32_t pid;
        bool found;
        prefix_search(e, V, (double)topp * z, false, &pv, &pid, &found, &r, &sh_id);
        if (found) {
            for (int i = tid; i < V; i += SB) {
                if (e[i] > 0) {
                    unsigned long long k = dkey(e[i]);
                    if (!(k > pv || (k == pv && i <= pid))) e[i] = 0;
                }
            }
        }
        __syncthreads();
    }
    /* min-p: keep e >= min(min_p, 1) * e_max */
    if (minp > 0.0f) {
        long long emk = 0;
        for (int i = tid; i < V; i += SB) emk = max(emk, (long long)dkey(e[i]));
        emk = bmax_i(emk, &r);
        double th = (minp < 1.0f ? (double)minp : 1.0) * __longlong_as_double(emk);
        for (int i = tid; i < V; i += SB)
            if (e[i] > 0 && e[i] < th) e[i] = 0;
        __syncthreads();
    }
    double z = 0;
    for (int i = tid; i < V; i += SB) z += e[i];
    z = bsum_d(z, &r);
    double target = rng_uniform(a.seed[row], a.position[row]) * z;
    unsigned long long sv;
    int32_t sid;
    bool found;
    prefix_search(e, V, target, true, &sv, &sid, &found, &r, &sh_id);
    if (tid == 0) a.out[row] = sid;
}

void qwk_sample(const qwk_sample_args *a, int32_t rows, cudaStream_t stream) {
    if (rows > 0) sample_kernel<<<rows, SB, 0, stream>>>(*a);
}
