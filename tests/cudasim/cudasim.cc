/*
 * cudasim.cc - the scheduler and runtime behind cudasim.h (read its
 * header comment first): fibers for a block's threads, the barrier rules,
 * and the part of the CUDA runtime API the kernel checks call, on host
 * memory.
 *
 * Fibers are stacks of one mapping reused by every block, switched by
 * qwsim_switch below: glibc's swapcontext makes two sigprocmask system
 * calls per switch, and a 1024-thread sampler block switches millions of
 * times (the sampler check took 66 s on swapcontext).
 *
 * The scheduler takes the warps one at a time (in index order, or
 * reversed with QWSIM_ORDER=reverse, lanes likewise): it resumes the
 * warp's ready lanes, each running until it waits at a barrier or
 * returns, releases the warp's warp-level barriers once every lane of a
 * mask waits at one, and repeats until the warp waits at the block
 * barrier or is done; then the next warp. So warps drift as far apart as
 * the device allows them to. With every warp stopped it releases the
 * block barrier once every live thread waits there, and aborts with the
 * threads' sites when it cannot (a deadlock on the device, or undefined
 * behaviour).
 *
 * "Device" memory is host memory (cudaMalloc is malloc): under
 * AddressSanitizer an out-of-bounds kernel access is reported like a host
 * one. Dynamic shared memory is a malloc'ed buffer filled with 0xff bytes
 * (NaN as f32) before every block, so a read of shared memory no thread
 * wrote shows up as a NaN in the results.
 */
#include "cudasim.h"

#include <chrono>
#include <map>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define QWSIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define QWSIM_ASAN 1
#endif
#endif
#ifdef QWSIM_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

#if !defined(__x86_64__)
#error "cudasim: the fiber switch is written for x86-64 (System V ABI) only"
#endif

/* qwsim_switch(save, to): saves the callee-saved registers on the current
 * stack, stores its pointer in *save, and resumes the stack `to` (saved by
 * an earlier switch, or made by new_fiber_stack). Everything else is
 * caller-saved in the System V ABI - but for MXCSR and the x87 control
 * word, which nothing here changes: saving them (ldmxcsr, fldcw serialise)
 * made a switch slower by a third. */
extern "C" void qwsim_switch(void **save, void *to);
asm(".text\n"
    ".globl qwsim_switch\n"
    ".type qwsim_switch,@function\n"
    "qwsim_switch:\n"
    "    pushq %rbp\n"
    "    pushq %rbx\n"
    "    pushq %r12\n"
    "    pushq %r13\n"
    "    pushq %r14\n"
    "    pushq %r15\n"
    "    movq %rsp, (%rdi)\n"
    "    movq %rsi, %rsp\n"
    "    popq %r15\n"
    "    popq %r14\n"
    "    popq %r13\n"
    "    popq %r12\n"
    "    popq %rbx\n"
    "    popq %rbp\n"
    "    ret\n"
    ".size qwsim_switch, .-qwsim_switch\n");

namespace qwsim {

uint3 thread_idx, block_idx;
dim3 block_dim, grid_dim;
unsigned long block_serial;

namespace {

enum wait_kind { READY, AT_BLOCK, AT_WARP, AT_SHUFFLE, DONE };

struct fiber {
    void *sp;               /* while switched out */
    uint3 tid;
    int linear;
    wait_kind wait;
    unsigned mask;          /* AT_WARP / AT_SHUFFLE: the lanes named */
    const char *file;       /* the barrier's call site               */
    int line;
    void *asan_fake_stack;  /* AddressSanitizer's, while switched out */
    unsigned shuffles;      /* shuffles this thread has made */
};

const size_t STACK = 256 << 10;
const int MAX_THREADS = 1024;
#define QWSIM_MIN(a, b) ((a) < (b) ? (a) : (b))

struct state {
    std::vector<fiber> fibers;
    char *stacks = nullptr;
    void *sched_sp = nullptr;
    int cur = -1;
    const std::function<void()> *body = nullptr;
    uint64_t shuffle_slot[2][MAX_THREADS];   /* by the lane's shuffle parity */
    void *smem = nullptr;
    size_t smem_size = 0;
    bool reverse = false;
    cudaError_t last_error = cudaSuccess;
    std::map<const void *, int> max_dynamic_smem;   /* cudaFuncSetAttribute */
#ifdef QWSIM_ASAN
    const void *main_bottom = nullptr;   /* the scheduler's stack */
    size_t main_size = 0;
#endif
} S;

/* Reports a kernel's undefined behaviour (printf-style) and aborts. */
[[noreturn]] __attribute__((format(printf, 1, 2))) void fail(const char *fmt, ...) {
    fflush(stdout);
    fprintf(stderr, "qwsim: block (%u,%u,%u): ", block_idx.x, block_idx.y, block_idx.z);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    abort();
}

void switch_to_scheduler() {
    fiber &f = S.fibers[(size_t)S.cur];
#ifdef QWSIM_ASAN
    /* a finished fiber passes no save slot: ASan drops its fake stack */
    __sanitizer_start_switch_fiber(f.wait == DONE ? nullptr : &f.asan_fake_stack, S.main_bottom, S.main_size);
#endif
    qwsim_switch(&f.sp, S.sched_sp);
#ifdef QWSIM_ASAN
    __sanitizer_finish_switch_fiber(f.asan_fake_stack, &S.main_bottom, &S.main_size);
#endif
}

[[noreturn]] void fiber_entry() {
#ifdef QWSIM_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &S.main_bottom, &S.main_size);
#endif
    (*S.body)();
    S.fibers[(size_t)S.cur].wait = DONE;
    switch_to_scheduler();
    abort();   /* a finished fiber is never resumed */
}

/* A fresh stack whose first switch "returns" into fiber_entry: the six
 * registers qwsim_switch pops, then the return address; fiber_entry then
 * starts with rsp = 8 mod 16, as after a call. */
void *new_fiber_stack(char *base, size_t size) {
    uint64_t *top = (uint64_t *)(((uintptr_t)(base + size)) & ~(uintptr_t)15);
    uint64_t *sp = top - 8;   /* 64 bytes; after the pops and ret, rsp = top - 8 */
    for (int i = 0; i < 6; i++) sp[i] = 0;
    sp[6] = (uint64_t)(uintptr_t)&fiber_entry;
    sp[7] = 0;
    return sp;
}

void resume(int i) {
    fiber &f = S.fibers[(size_t)i];
    S.cur = i;
    thread_idx = f.tid;
#ifdef QWSIM_ASAN
    void *save = nullptr;
    __sanitizer_start_switch_fiber(&save, S.stacks + (size_t)i * STACK, STACK);
#endif
    qwsim_switch(&S.sched_sp, f.sp);
#ifdef QWSIM_ASAN
    __sanitizer_finish_switch_fiber(save, nullptr, nullptr);
#endif
    S.cur = -1;
}

void wait_here(wait_kind k, unsigned mask, const char *file, int line) {
    if (S.cur < 0) fail("barrier outside a kernel at %s:%d", file, line);
    fiber &f = S.fibers[(size_t)S.cur];
    f.wait = k;
    f.mask = mask;
    f.file = file;
    f.line = line;
    switch_to_scheduler();
}

bool same_site(const fiber &a, const fiber &b) {
    return a.line == b.line && (a.file == b.file || strcmp(a.file, b.file) == 0);
}

/* Lanes of warp w that exist (a last, partial warp has fewer). */
unsigned existing_lanes(int w, int nthreads) {
    const int n = nthreads - 32 * w;
    return n >= 32 ? 0xffffffffu : (1u << n) - 1u;
}

/* Releases the block barrier once every live thread waits at it (all at
 * one call site, else an abort); false: not yet. */
bool release_block() {
    int live = 0, at_block = 0;
    const fiber *first_block = nullptr;
    for (const fiber &f : S.fibers) {
        if (f.wait == DONE) continue;
        live++;
        if (f.wait == AT_BLOCK) {
            if (first_block && !same_site(*first_block, f))
                fail("threads at different __syncthreads: %s:%d and %s:%d", first_block->file,
                     first_block->line, f.file, f.line);
            if (!first_block) first_block = &f;
            at_block++;
        }
    }
    if (live == 0 || at_block != live) return false;
    for (fiber &f : S.fibers)
        if (f.wait == AT_BLOCK) f.wait = READY;
    return true;
}

/* Releases the lanes of warp w whose warp barrier has every lane of its
 * mask waiting (a shuffle: all at that shuffle with that mask, else an
 * abort; a mask naming a lane that exited: an abort); false: none. */
bool release_warp(int w, int nthreads) {
    fiber *lanes = &S.fibers[(size_t)(32 * w)];
    const unsigned exist = existing_lanes(w, nthreads);
    unsigned waiting = 0, done = 0;
    for (int l = 0; l < 32 && (exist >> l & 1u); l++) {
        if (lanes[l].wait == AT_WARP || lanes[l].wait == AT_SHUFFLE) waiting |= 1u << l;
        if (lanes[l].wait == DONE) done |= 1u << l;
    }
    unsigned go = 0;
    for (int l = 0; l < 32; l++) {
        if (!(waiting >> l & 1u)) continue;
        const fiber &f = lanes[l];
        const unsigned need = f.mask & exist;
        if (need & done)
            fail("warp barrier at %s:%d names lanes that exited (mask %08x, exited %08x)", f.file, f.line, need,
                 need & done);
        if ((need & waiting) != need) continue;   /* some still running, or at the block barrier */
        if (f.wait == AT_SHUFFLE) {
            /* every lane against the mask's lowest: all at one shuffle */
            const fiber &o = lanes[__builtin_ctz(need)];
            if (o.wait != AT_SHUFFLE || !same_site(f, o) || o.mask != f.mask)
                fail("a shuffle at %s:%d waits on a lane at %s:%d (other barrier or mask)", f.file, f.line, o.file,
                     o.line);
            if (o.shuffles != f.shuffles)   /* lanes that shuffled apart before (partial masks): not emulated */
                fail("a shuffle at %s:%d: its lanes have made %u and %u shuffles before", f.file, f.line,
                     f.shuffles - 1, o.shuffles - 1);
        }
        go |= 1u << l;
    }
    for (int l = 0; l < 32; l++)
        if (go >> l & 1u) lanes[l].wait = READY;
    return go != 0;
}

void deadlock(int nthreads) {
    fprintf(stderr, "qwsim: deadlock in a block of %d threads (block (%u,%u,%u)):\n", nthreads, block_idx.x,
            block_idx.y, block_idx.z);
    for (const fiber &f : S.fibers)
        if (f.wait != DONE)
            fprintf(stderr, "  thread %d waits (%s) at %s:%d mask %08x\n", f.linear,
                    f.wait == AT_BLOCK ? "__syncthreads" : f.wait == AT_WARP ? "warp" : "shuffle", f.file, f.line,
                    f.mask);
    fflush(stdout);
    abort();
}

void run_block(int nthreads) {
    S.fibers.resize((size_t)nthreads);
    for (int i = 0; i < nthreads; i++) {
        fiber &f = S.fibers[(size_t)i];
        f.linear = i;
        f.tid = make_uint3((unsigned)i % block_dim.x, (unsigned)i / block_dim.x % block_dim.y,
                           (unsigned)i / (block_dim.x * block_dim.y));
        f.wait = READY;
        f.file = "";
        f.line = 0;
        f.asan_fake_stack = nullptr;
        f.shuffles = 0;
        /* each stack's top shifted by a different multiple of 64 bytes (up
         * to 128 KiB): tops STACK apart all fell into one cache set, and
         * every switch missed L1 and L2 (a third of the run time) */
        const size_t color = (size_t)i * 64 * 37 % (128 << 10);
        f.sp = new_fiber_stack(S.stacks + (size_t)i * STACK, STACK - color);
    }
    block_serial++;
    if (S.smem) memset(S.smem, 0xff, S.smem_size);
    /* Warp by warp: one warp runs through every warp-level barrier it can
     * pass before the next one starts, so warps drift as far apart as a
     * block barrier allows - a shared-memory slot one warp rewrites before
     * another has read it (a missing __syncthreads) shows in the results. */
    const int nwarps = (nthreads + 31) / 32;
    for (;;) {
        for (int k = 0; k < nwarps; k++) {
            const int w = S.reverse ? nwarps - 1 - k : k;
            const int lanes = QWSIM_MIN(32, nthreads - 32 * w);
            for (;;) {
                bool ran = false;
                for (int j = 0; j < lanes; j++) {
                    const int i = 32 * w + (S.reverse ? lanes - 1 - j : j);
                    if (S.fibers[(size_t)i].wait == READY) {
                        resume(i);
                        ran = true;
                    }
                }
                if (!ran && !release_warp(w, nthreads)) break;
            }
        }
        bool all_done = true;
        for (const fiber &f : S.fibers) all_done &= f.wait == DONE;
        if (all_done) return;
        if (!release_block()) deadlock(nthreads);
    }
}

} // namespace

void sync_block(const char *file, int line) { wait_here(AT_BLOCK, 0, file, line); }

void sync_warp(unsigned mask, const char *file, int line) {
    const int lane = S.fibers[(size_t)S.cur].linear & 31;
    if (!(mask >> lane & 1u)) fail("__syncwarp at %s:%d by a lane outside its mask", file, line);
    wait_here(AT_WARP, mask, file, line);
}

/* One barrier per shuffle: lanes publish into the slots of their shuffle
 * count's parity and read after the barrier; a slot is written again only
 * two shuffles later, after the next barrier, which every lane reaches only
 * once it has read. (release_warp checks that the lanes of one shuffle
 * agree on that count.) */
uint64_t shuffle_bits(unsigned mask, uint64_t bits, int src_lane, const char *file, int line) {
    fiber &f = S.fibers[(size_t)S.cur];
    const int me = f.linear;
    if (!(mask >> (me & 31) & 1u)) fail("shuffle at %s:%d by a lane outside its mask", file, line);
    if (!(mask >> src_lane & 1u)) fail("shuffle at %s:%d reads lane %d outside the mask", file, line, src_lane);
    const int src = (me & ~31) + src_lane;
    if (src >= (int)S.fibers.size()) fail("shuffle at %s:%d reads lane %d past the block", file, line, src_lane);
    const unsigned parity = f.shuffles++ & 1u;
    S.shuffle_slot[parity][me] = bits;
    wait_here(AT_SHUFFLE, mask, file, line);    /* every lane has published */
    return S.shuffle_slot[parity][src];
}

void *dynamic_smem() { return S.smem; }

void fragments_differ(const char *what) {
    fail("lanes of warp %d brought different %s to a wmma operation (a race on their source)",
         warp_of_thread(), what);
}

bool lowest_lane_of_warp() {
    const int me = S.fibers[(size_t)S.cur].linear;
    for (int l = me & ~31; l < me; l++)
        if (S.fibers[(size_t)l].wait != DONE) return false;
    return true;
}

namespace {

/* Stream capture (cudaStreamBeginCapture .. EndCapture): at most one open,
 * on one stream; its work is recorded, not run. */
struct capture_state {
    cudaStream_t stream = nullptr;
    bool open = false;
    bool invalidated = false;
    std::vector<std::function<void()>> work;
} C;

void run_grid_now(dim3 grid, dim3 block, size_t smem, const std::function<void()> &body) {
    if (!S.stacks) {
        S.stacks = (char *)mmap(nullptr, STACK * MAX_THREADS, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (S.stacks == MAP_FAILED) { perror("qwsim: mmap"); abort(); }
        const char *o = getenv("QWSIM_ORDER");
        S.reverse = o && !strcmp(o, "reverse");
    }
    S.smem = smem ? malloc(smem) : nullptr;
    S.smem_size = smem;
    S.body = &body;
    grid_dim = grid;
    block_dim = block;
    const size_t nthreads = (size_t)block.x * block.y * block.z;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                block_idx = make_uint3(x, y, z);
                run_block((int)nthreads);
            }
    free(S.smem);
    S.smem = nullptr;
    S.body = nullptr;
}

} // namespace

bool enqueue(cudaStream_t stream, std::function<void()> work) {
    if (C.open) {
        if (stream == C.stream) {
            C.work.push_back(std::move(work));
            return true;
        }
        C.invalidated = true;
        S.last_error = cudaErrorStreamCaptureImplicit;
        return false;
    }
    work();
    return true;
}

void launch(const void *kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
            std::function<void()> body) {
    const size_t nthreads = (size_t)block.x * block.y * block.z;
    if (nthreads == 0 || nthreads > (size_t)MAX_THREADS || block.z > 64 || grid.x == 0 || grid.y == 0 ||
        grid.z == 0 || grid.y > 65535 || grid.z > 65535) {
        S.last_error = cudaErrorInvalidConfiguration;
        return;
    }
    if (smem > 48 * 1024) {
        auto it = S.max_dynamic_smem.find(kernel);
        if (it == S.max_dynamic_smem.end() || (size_t)it->second < smem) {
            S.last_error = cudaErrorInvalidValue;
            return;
        }
    }
    enqueue(stream, [grid, block, smem, body = std::move(body)] { run_grid_now(grid, block, smem, body); });
}

/* A synchronous call during a capture: the device refuses it and the
 * capture is lost. */
static bool refused_in_capture() {
    if (!C.open) return false;
    C.invalidated = true;
    S.last_error = cudaErrorStreamCaptureUnsupported;
    return true;
}

} // namespace qwsim

/* ---- the runtime API subset -------------------------------------------- */

using qwsim::S;

/* The emulated device's memory in bytes: QWSIM_MEMORY_MB, default 1024. */
static size_t device_total() {
    const char *e = getenv("QWSIM_MEMORY_MB");
    const long mb = e ? atol(e) : 1024;
    return (size_t)(mb > 0 ? mb : 1024) << 20;
}

extern "C" {

cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "qwsim (CUDA kernels on the CPU)");
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 132;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->sharedMemPerBlock = 48 * 1024;
    p->sharedMemPerBlockOptin = 232448;
    p->totalGlobalMem = device_total();
    return cudaSuccess;
}

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorIllegalState: return "operation not permitted when stream is capturing (or not)";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    default: return "qwsim: unknown error";
    }
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = S.last_error;
    S.last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return S.last_error; }

/* Device memory: 256-byte aligned as on the device, and exactly n bytes
 * long, so that AddressSanitizer sees an access one byte past the end.
 * The device's size is QWSIM_MEMORY_MB (default 1024): cudaMemGetInfo
 * reports it less what is allocated, as the backend sizes its KV pool
 * from that. */
static std::map<void *, size_t> device_blocks;
static size_t device_used = 0;

cudaError_t cudaMalloc(void **p, size_t n) {
    *p = nullptr;
    if (qwsim::refused_in_capture()) return cudaErrorStreamCaptureUnsupported;
    if (n > device_total() - device_used) return cudaErrorMemoryAllocation;
    if (posix_memalign(p, 256, n ? n : 1) != 0) {
        *p = nullptr;
        return cudaErrorMemoryAllocation;
    }
    /* the device's fresh memory holds whatever was there: here 0xff
     * bytes, a NaN as f32 and bf16, so a read of memory nothing wrote
     * shows in the results instead of reading as whatever the heap held */
    memset(*p, 0xff, n);
    device_blocks[*p] = n;
    device_used += n;
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    auto it = device_blocks.find(p);
    if (it == device_blocks.end()) return cudaErrorInvalidValue;
    device_used -= it->second;
    device_blocks.erase(it);
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b) {
    *total_b = device_total();
    *free_b = *total_b - device_used;
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void **p, size_t n) {
    *p = malloc(n ? n : 1);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFreeHost(void *p) { free(p); return cudaSuccess; }
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind) {
    if (qwsim::refused_in_capture()) return cudaErrorStreamCaptureUnsupported;
    memmove(d, s, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind, cudaStream_t st) {
    return qwsim::enqueue(st, [d, s, n] { memmove(d, s, n); }) ? cudaSuccess : cudaErrorStreamCaptureImplicit;
}
cudaError_t cudaMemset(void *d, int v, size_t n) {
    if (qwsim::refused_in_capture()) return cudaErrorStreamCaptureUnsupported;
    memset(d, v, n);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st) {
    return qwsim::enqueue(st, [d, v, n] { memset(d, v, n); }) ? cudaSuccess : cudaErrorStreamCaptureImplicit;
}
cudaError_t cudaDeviceSynchronize(void) {
    return qwsim::refused_in_capture() ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) {
    return qwsim::refused_in_capture() ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t cudaGetDevice(int *device) { *device = 0; return cudaSuccess; }

/* Streams: distinct handles; work runs in issue order whatever the stream. */
struct CUstream_st { int unused; };
cudaError_t cudaStreamCreate(cudaStream_t *s) { *s = new CUstream_st(); return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) { return cudaStreamCreate(s); }
cudaError_t cudaStreamDestroy(cudaStream_t s) { delete s; return cudaSuccess; }

/* Graphs: the captured work, replayed in order by every launch. */
struct CUgraph_st { std::vector<std::function<void()>> work; };
struct CUgraphExec_st { std::vector<std::function<void()>> work; };
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
    if (qwsim::C.open || s == nullptr) return cudaErrorIllegalState;   /* one capture; not the legacy stream */
    qwsim::C.open = true;
    qwsim::C.invalidated = false;
    qwsim::C.stream = s;
    qwsim::C.work.clear();
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
    *g = nullptr;
    if (!qwsim::C.open || s != qwsim::C.stream) return cudaErrorIllegalState;
    qwsim::C.open = false;
    if (qwsim::C.invalidated) {
        qwsim::C.work.clear();
        return cudaErrorStreamCaptureInvalidated;
    }
    *g = new CUgraph_st{std::move(qwsim::C.work)};
    qwsim::C.work.clear();
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long) {
    *e = new CUgraphExec_st{g->work};
    return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) {
    for (const auto &w : e->work)
        if (!qwsim::enqueue(s, w)) return cudaErrorStreamCaptureImplicit;
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) { delete g; return cudaSuccess; }
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) { delete e; return cudaSuccess; }

cudaError_t cudaFuncSetAttribute(const void *fn, cudaFuncAttribute attr, int value) {
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || value > 232448) return cudaErrorInvalidValue;
        S.max_dynamic_smem[fn] = value;
    }
    return cudaSuccess;
}

/* Events: host time at record (launches are synchronous). */
struct CUevent_st { double t; };
cudaError_t cudaEventCreate(cudaEvent_t *e) { *e = new CUevent_st{0}; return cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
    e->t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) { *ms = (float)(b->t - a->t); return cudaSuccess; }

} // extern "C"
