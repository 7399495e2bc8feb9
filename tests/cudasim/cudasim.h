/*
 * cudasim.h - the CUDA kernel language on the CPU, for tests only.
 *
 * qwinfer's CUDA backend (the .cu files of cuda/) has run on no GPU yet;
 * this lets its checks (tests/gpu/check_kernels.cu, check_quant.cu, e2e.c)
 * run here, compiled by the host C++ compiler, so that indexing,
 * shared-memory layout, barrier, shuffle and host-side logic are exercised
 * before a device is lent. It is
 * force-included (-include) into sources that tests/cudasim/translate.py
 * has rewritten (kernel launches become qwsim::launcher calls, dynamic
 * shared memory a pointer, __CUDACC__/__CUDA_ARCH__ the QWSIM_ names).
 *
 * The execution model (cudasim.cc): a launch runs its blocks one after
 * another; a block's threads are fibers on one OS thread. A fiber runs
 * until it reaches a barrier (__syncthreads, __syncwarp, a shuffle, a
 * wmma store); a barrier is released only when every thread it names has
 * arrived: a __syncthreads waits for every live thread of the block at the
 * same call site, a warp barrier for every lane of its mask. Anything else
 * - threads of one block at different __syncthreads, a shuffle whose mask
 * names a lane that exited or waits elsewhere - is reported as the
 * device's undefined behaviour it is, and the process aborts. Warps run
 * one at a time, each as far as it can go before the block barrier, in
 * index order or reversed (QWSIM_ORDER=reverse), lanes likewise: a result
 * that changes with the order is a missing barrier.
 *
 * What it cannot show: timing, memory coalescing, bank conflicts, the
 * tensor cores' summation order (wmma here sums in f32, in k order), the
 * device's exp/log ulps, concurrency between streams (work runs in issue
 * order). A thread spinning on memory another thread of the block writes
 * would spin forever (fibers are not preempted); atomics are not defined
 * (no kernel uses them: one that did would not compile here). cuBLASLt's
 * matmul is emulated by cublaslt_sim.cc; stream capture records work and
 * replays it (cudasim.cc).
 */
#ifndef QWSIM_CUDASIM_H
#define QWSIM_CUDASIM_H

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

/* The qualifiers: plain host functions. __shared__ variables are
 * rewritten by translate.py (qwsim::shared below); one left over is an
 * error. */
#undef __global__
#define __global__
#undef __device__
#define __device__
#undef __host__
#define __host__
#undef __shared__
#define __shared__ __shared___not_rewritten_by_translate_py
#undef __forceinline__
#define __forceinline__ inline __attribute__((always_inline))
#undef __launch_bounds__
#define __launch_bounds__(...)

/* What translate.py renames __CUDACC__ and __CUDA_ARCH__ to in our own
 * sources: they then take their device paths (sm_90's where they differ),
 * with the toolkit's host implementations of the conversion intrinsics. */
#define QWSIM_CUDACC 1
#define QWSIM_CUDA_ARCH 900

namespace qwsim {

/* The running thread's coordinates (set by the scheduler before it resumes
 * a fiber). */
extern uint3 thread_idx, block_idx;
extern dim3 block_dim, grid_dim;

/* Barriers; file and line identify the call site. */
void sync_block(const char *file, int line);
void sync_warp(unsigned mask, const char *file, int line);

/* A shuffle: publishes bits (size <= 8), waits for the mask's lanes,
 * returns src_lane's bits (src_lane outside the mask: an abort). */
uint64_t shuffle_bits(unsigned mask, uint64_t bits, int src_lane, const char *file, int line);

/* Counts blocks run: a __shared__ variable is refilled when it changes. */
extern unsigned long block_serial;

/* A __shared__ variable of type T (a function static: one block runs at a
 * time), filled with 0xff bytes - NaN as f32, -1 as an integer - when
 * first used in each block, as a block's shared memory starts undefined. */
template <class T> struct shared {
    alignas(16) unsigned char bytes[sizeof(T)];
    unsigned long serial = ~0ul;
    T &get() {
        if (serial != block_serial) {
            memset(bytes, 0xff, sizeof bytes);
            serial = block_serial;
        }
        return *reinterpret_cast<T *>(bytes);
    }
};

/* The dynamic shared memory of the running launch (extern __shared__). */
void *dynamic_smem();

/* True for the lowest live lane of the calling thread's warp. */
bool lowest_lane_of_warp();

/* The calling thread's warp in its block, and its lane. */
inline int linear_thread() {
    return (int)(thread_idx.x + thread_idx.y * block_dim.x + thread_idx.z * block_dim.x * block_dim.y);
}
inline int warp_of_thread() { return linear_thread() >> 5; }

/* Aborts the run: lanes of one warp brought different fragments to a
 * wmma operation (a race on what they loaded them from). */
[[noreturn]] void fragments_differ(const char *what);

/* Launches body once per thread of grid x block on stream (the config
 * checked first: an invalid one sets the error cudaGetLastError returns,
 * runs nothing). Runs now, or is recorded when stream is capturing. */
void launch(const void *kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
            std::function<void()> body);

/* Work in stream order: run now, or recorded into the graph when stream
 * is capturing (a memcpy node reads its source when the graph runs, as on
 * the device). Work on another stream while a capture is open invalidates
 * it (cudaStreamCaptureModeThreadLocal's rule for this thread); false
 * then, with the error set. */
bool enqueue(cudaStream_t stream, std::function<void()> work);

template <class... P> struct Launch {
    void (*kernel)(P...);
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    template <class... A> void operator()(A &&...args) const {
        /* arguments converted once, as a call would, and kept by value (a
         * captured launch runs later); each thread gets its own copy (a
         * kernel may modify its by-value parameters) */
        const std::tuple<std::decay_t<P>...> packed(std::forward<A>(args)...);
        auto k = kernel;
        launch((const void *)k, grid, block, smem, stream, [packed, k] {
            std::tuple<std::decay_t<P>...> mine(packed);
            std::apply(k, mine);
        });
    }
};

/* kernel<<<grid, block, smem, stream>>>(args) is rewritten to
 * qwsim::launcher(kernel, grid, block, smem, stream)(args). */
template <class... P>
Launch<P...> launcher(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem = 0, cudaStream_t stream = 0) {
    return Launch<P...>{kernel, grid, block, smem, stream};
}

template <class T> T shuffle_as(unsigned mask, T v, int src, const char *file, int line) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a wider type");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    bits = shuffle_bits(mask, bits, src, file, line);
    T out;
    memcpy(&out, &bits, sizeof out);
    return out;
}

} // namespace qwsim

#define threadIdx (static_cast<const uint3 &>(qwsim::thread_idx))
#define blockIdx (static_cast<const uint3 &>(qwsim::block_idx))
#define blockDim (static_cast<const dim3 &>(qwsim::block_dim))
#define gridDim (static_cast<const dim3 &>(qwsim::grid_dim))
static const int warpSize = 32;

/* cuda_runtime.h's template form (declared there only for nvcc). */
template <class T> cudaError_t cudaFuncSetAttribute(T *entry, cudaFuncAttribute attr, int value) {
    return ::cudaFuncSetAttribute((const void *)entry, attr, value);
}

#define __syncthreads() qwsim::sync_block(__FILE__, __LINE__)
#define __syncwarp(...) qwsim::sync_warp(qwsim_mask_or_all(__VA_ARGS__), __FILE__, __LINE__)
static inline unsigned qwsim_mask_or_all(unsigned m = 0xffffffffu) { return m; }

/* __shfl_xor_sync(mask, v, lane_mask[, width]): src = lane ^ lane_mask
 * within the lane's width-wide segment (its own value past it). */
#define __shfl_xor_sync(mask, v, lm, ...) \
    qwsim_shfl_xor((mask), (v), (lm), __FILE__, __LINE__, ##__VA_ARGS__)
template <class T>
static inline T qwsim_shfl_xor(unsigned mask, T v, int lane_mask, const char *file, int line, int width = 32) {
    const int lane = qwsim::linear_thread() & 31;
    int src = lane ^ lane_mask;
    if (src / width != lane / width) src = lane;
    return qwsim::shuffle_as(mask, v, src, file, line);
}

/* Bit casts and IEEE-rounded arithmetic (the host's default rounding is
 * round-to-nearest-even, and no -ffp-contract fuses these calls). */
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline int __float_as_int(float f) { int u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
static inline long long __double_as_longlong(double d) { long long u; memcpy(&u, &d, 8); return u; }
static inline double __longlong_as_double(long long u) { double d; memcpy(&d, &u, 8); return d; }
static inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
static inline float __fsub_rn(float a, float b) { volatile float r = a - b; return r; }
static inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
static inline float __fdiv_rn(float a, float b) { volatile float r = a / b; return r; }

/* The device's integer min/max overloads (std::min would not convert). */
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
static inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }

#endif /* __cplusplus */
#endif
