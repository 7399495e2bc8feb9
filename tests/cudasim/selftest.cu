/*
 * selftest.cu - the CPU emulation's own checks (tests/cudasim/run.sh runs
 * this before trusting it with the kernels of cuda/): each rule of cudasim.h's
 * execution model on a kernel small enough to reason about.
 *
 *   selftest             the passing cases; exit 0 when all hold
 *   selftest divergent   threads at two different __syncthreads  -> abort
 *   selftest exited      a shuffle naming a lane that returned    -> abort
 *   selftest deadlock    half a warp at a __syncwarp, half at __syncthreads -> abort
 *
 * The "order" case is the point of QWSIM_ORDER: a kernel that reads a
 * neighbour's shared-memory write without a barrier gives one answer in
 * thread order and another reversed, and the same kernel with the barrier
 * gives the right one in both.
 */
#include <cuda_runtime.h>
#include <mma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

using namespace nvcuda;

static int failures = 0;
static void expect(const char *name, bool ok) {
    if (!ok) failures++;
    printf("SELFTEST %-52s %s\n", name, ok ? "ok" : "FAIL");
}

/* Warp and block reductions through shuffles and shared memory. */
__global__ void reduce_kernel(const int *in, int *out) {
    __shared__ int partial[32];
    int v = in[blockIdx.x * blockDim.x + threadIdx.x];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        int s = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) s += partial[w];
        out[blockIdx.x] = s;
    }
}

/* Shuffles within 8-lane segments (width 8). */
__global__ void segment_kernel(int *out) {
    const int lane = threadIdx.x & 31;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, lane, 4, 8) * 100 + __shfl_xor_sync(0xffffffffu, lane, 16, 8);
}

/* Thread t reads what thread t+1 wrote: right only with the barrier. */
__global__ void neighbour_kernel(int *out, int with_barrier) {
    __shared__ int s[64];
    s[threadIdx.x] = (int)threadIdx.x + 1;
    if (with_barrier) __syncthreads();
    out[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}

/* Dynamic shared memory: per block, filled before the block runs. */
__global__ void dynamic_kernel(float *out) {
    extern __shared__ float dyn[];
    if (threadIdx.x == 0) out[blockIdx.x] = dyn[blockDim.x + 5];   /* no thread writes it: NaN */
    dyn[threadIdx.x] = (float)blockIdx.x;
    __syncthreads();
    if (threadIdx.x == 0) out[gridDim.x + blockIdx.x] = dyn[blockDim.x - 1];
}

/* Coordinates of 3-D blocks and grids. */
__global__ void coords_kernel(int *out) {
    const int b = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    const int t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    out[b * blockDim.x * blockDim.y * blockDim.z + t] = b * 1000 + t;
}

/* One 16x16x16 bf16 tile product through wmma, stored for the warp. */
__global__ void wmma_kernel(const __nv_bfloat16 *a, const __nv_bfloat16 *b, float *c) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 1.0f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::store_matrix_sync(c, acc, 16, wmma::mem_row_major);
}

/* Adds 1 to every element: counts how often a captured launch ran. */
__global__ void increment_kernel(int *v, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] += 1;
}

/* Broken kernels: the emulator must refuse them. */
__global__ void divergent_kernel() {
    if (threadIdx.x < 32) __syncthreads();
    else __syncthreads();
}
__global__ void exited_kernel(int *out) {
    if (threadIdx.x == 3) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
}
__global__ void deadlock_kernel() {
    if (threadIdx.x < 16) __syncwarp();
    else __syncthreads();
}

static void *allocations[64];
static int nalloc = 0;
template <class T> static T *dev(size_t n) {
    T *p;
    if (nalloc == 64 || cudaMalloc(&p, n * sizeof(T)) != cudaSuccess) abort();
    allocations[nalloc++] = p;
    return p;
}

int main(int argc, char **argv) {
    if (argc > 1) {
        int *o = dev<int>(64);
        if (!strcmp(argv[1], "divergent")) divergent_kernel<<<1, 64>>>();
        else if (!strcmp(argv[1], "exited")) exited_kernel<<<1, 32>>>(o);
        else if (!strcmp(argv[1], "deadlock")) deadlock_kernel<<<1, 32>>>();
        printf("SELFTEST %s: not refused\n", argv[1]);
        return 1;
    }
    {
        const int blocks = 3, threads = 256;
        int in[blocks * threads], out[blocks], *din = dev<int>(blocks * threads), *dout = dev<int>(blocks);
        for (int i = 0; i < blocks * threads; i++) in[i] = i * 7 % 101 - 50;
        cudaMemcpy(din, in, sizeof in, cudaMemcpyHostToDevice);
        reduce_kernel<<<blocks, threads>>>(din, dout);
        cudaMemcpy(out, dout, sizeof out, cudaMemcpyDeviceToHost);
        bool ok = true;
        for (int b = 0; b < blocks; b++) {
            int s = 0;
            for (int t = 0; t < threads; t++) s += in[b * threads + t];
            ok &= out[b] == s;
        }
        expect("shuffle + shared-memory block sums", ok);
    }
    {
        int out[64], *d = dev<int>(64);
        segment_kernel<<<1, 64>>>(d);
        cudaMemcpy(out, d, sizeof out, cudaMemcpyDeviceToHost);
        bool ok = true;
        for (int t = 0; t < 64; t++) ok &= out[t] == ((t & 31) ^ 4) * 100 + (t & 31);   /* 16 >= width: own */
        expect("width-8 shuffles stay in their segment", ok);
    }
    {
        int out[64], *d = dev<int>(64);
        neighbour_kernel<<<1, 64>>>(d, 1);
        cudaMemcpy(out, d, sizeof out, cudaMemcpyDeviceToHost);
        bool ok = true;
        for (int t = 0; t < 64; t++) ok &= out[t] == (t + 1) % 64 + 1;
        expect("a barrier orders a neighbour's write", ok);
        neighbour_kernel<<<1, 64>>>(d, 0);
        cudaMemcpy(out, d, sizeof out, cudaMemcpyDeviceToHost);
        /* forward order: thread t runs before t+1 has written, except the
         * last, which reads thread 0's; reversed: every read sees its write */
        const char *o = getenv("QWSIM_ORDER");
        const bool reverse = o && !strcmp(o, "reverse");
        int right = 0;
        for (int t = 0; t < 64; t++) right += out[t] == (t + 1) % 64 + 1;
        expect("without it, the result depends on the thread order", reverse ? right == 63 : right == 1);
    }
    {
        const int blocks = 2, threads = 64;
        float out[2 * blocks], *d = dev<float>(2 * blocks);
        dynamic_kernel<<<blocks, threads, 60 * 1024>>>(d);
        expect("60 KiB of dynamic shared memory needs the attribute",
               cudaGetLastError() == cudaErrorInvalidValue);
        expect("the attribute past 227 KiB is refused",
               cudaFuncSetAttribute(dynamic_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 * 1024) ==
                   cudaErrorInvalidValue);
        cudaFuncSetAttribute(dynamic_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 60 * 1024);
        dynamic_kernel<<<blocks, threads, 60 * 1024>>>(d);
        expect("and runs with it", cudaGetLastError() == cudaSuccess);
        cudaMemcpy(out, d, sizeof out, cudaMemcpyDeviceToHost);
        expect("unwritten shared memory reads NaN, in every block", out[0] != out[0] && out[1] != out[1]);
        expect("each block sees its own writes", out[2] == 0.f && out[3] == 1.f);
    }
    {
        const dim3 grid(3, 2, 2), block(4, 2, 3);
        const int n = 12 * 24;
        int out[n], *d = dev<int>(n);
        coords_kernel<<<grid, block>>>(d);
        cudaMemcpy(out, d, sizeof out, cudaMemcpyDeviceToHost);
        bool ok = true;
        for (int i = 0; i < n; i++) ok &= out[i] == i / 24 * 1000 + i % 24;
        expect("3-D grid and block coordinates", ok);
        coords_kernel<<<1, 2048>>>(d);
        expect("2048 threads a block is an invalid configuration",
               cudaGetLastError() == cudaErrorInvalidConfiguration);
    }
    {
        __nv_bfloat16 a[256], b[256];
        float c[256], *dc = dev<float>(256);
        __nv_bfloat16 *da = dev<__nv_bfloat16>(256), *db = dev<__nv_bfloat16>(256);
        for (int i = 0; i < 256; i++) {
            a[i] = __float2bfloat16((float)(i % 7) - 3.f);
            b[i] = __float2bfloat16((float)(i % 5) * 0.5f);
        }
        cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
        cudaMemcpy(db, b, sizeof b, cudaMemcpyHostToDevice);
        wmma_kernel<<<1, 32>>>(da, db, dc);
        cudaMemcpy(c, dc, sizeof c, cudaMemcpyDeviceToHost);
        bool ok = true;
        for (int r = 0; r < 16; r++)
            for (int n = 0; n < 16; n++) {
                float s = 1.f;   /* b col_major: element (k, n) at n * 16 + k */
                for (int k = 0; k < 16; k++)
                    s += __bfloat162float(a[r * 16 + k]) * __bfloat162float(b[n * 16 + k]);
                ok &= c[r * 16 + n] == s;
            }
        expect("wmma 16x16x16 bf16 (row x col major) + C", ok);
    }
    {
        /* stream capture records; a graph replays what it recorded, reading
         * a host source when it runs; a synchronous copy during a capture
         * is refused and loses the capture */
        cudaStream_t st;
        cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
        int *d = dev<int>(40), host[40], src[40];
        for (int i = 0; i < 40; i++) src[i] = 100 + i;
        cudaMemset(d, 0, sizeof host);
        cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal);
        cudaMemcpyAsync(d, src, 4 * sizeof(int), cudaMemcpyHostToDevice, st);
        increment_kernel<<<2, 32, 0, st>>>(d, 40);
        cudaGraph_t g = nullptr;
        cudaGraphExec_t ge = nullptr;
        const bool captured = cudaStreamEndCapture(st, &g) == cudaSuccess && g;
        cudaMemcpy(host, d, sizeof host, cudaMemcpyDeviceToHost);
        expect("captured work does not run at capture", captured && host[0] == 0 && host[39] == 0);
        cudaGraphInstantiate(&ge, g, 0);
        cudaGraphDestroy(g);
        src[0] = 7;   /* changed after the capture: the replay reads it */
        cudaGraphLaunch(ge, st);
        cudaGraphLaunch(ge, st);
        cudaMemcpy(host, d, sizeof host, cudaMemcpyDeviceToHost);
        expect("each replay runs it, reading host sources then", host[0] == 8 && host[3] == 104 && host[39] == 2);
        cudaGraphExecDestroy(ge);
        cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal);
        const cudaError_t sync = cudaMemcpy(host, d, sizeof host, cudaMemcpyDeviceToHost);
        increment_kernel<<<2, 32, 0, 0>>>(d, 40);   /* the legacy stream, not the captured one */
        const cudaError_t other = cudaGetLastError();
        g = nullptr;
        const cudaError_t end = cudaStreamEndCapture(st, &g);
        expect("a synchronous copy or another stream's launch in a capture is refused",
               sync == cudaErrorStreamCaptureUnsupported && other == cudaErrorStreamCaptureImplicit &&
                   end == cudaErrorStreamCaptureInvalidated && !g);
        cudaStreamDestroy(st);
        float *f = dev<float>(3), fh[3];
        cudaMemcpy(fh, f, sizeof fh, cudaMemcpyDeviceToHost);
        expect("fresh device memory reads NaN", fh[0] != fh[0] && fh[2] != fh[2]);
    }
    for (int i = 0; i < nalloc; i++) cudaFree(allocations[i]);
    printf("RESULT cudasim selftest: %d failed\n", failures);
    return failures ? 1 : 0;
}
