/*
 * mma.h (cudasim) - nvcuda::wmma for the CPU emulation, in place of the
 * toolkit's header (tests/cudasim/include comes first on the include
 * path). Each thread's fragment holds the whole tile, loaded by each lane
 * on its own. An mma waits for the warp's lanes, is computed once by the
 * lowest lane, which checks that every lane brought the same fragments
 * (they differ only after a race on their source), and its result is
 * copied to every lane (computing it in all 32 made the 32K-context
 * attention check 30 times slower). A store is done once, by the lowest
 * live lane, after every lane of the warp has arrived (the "_sync"), so a
 * missing __syncwarp before another lane reads the stored tile shows under
 * QWSIM_ORDER=reverse. Products of bf16 or f16 are exact in f32; sums run
 * in k order (the tensor cores' order is unspecified: checks need a
 * tolerance either way).
 */
#ifndef QWSIM_MMA_H
#define QWSIM_MMA_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <string.h>

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K> struct frag_shape;
template <int M, int N, int K> struct frag_shape<matrix_a, M, N, K> { static const int R = M, C = K; };
template <int M, int N, int K> struct frag_shape<matrix_b, M, N, K> { static const int R = K, C = N; };
template <int M, int N, int K> struct frag_shape<accumulator, M, N, K> { static const int R = M, C = N; };

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    static const int R = frag_shape<Use, M, N, K>::R, C = frag_shape<Use, M, N, K>::C;
    float v[R * C];   /* row-major [R][C] */
};

static inline float to_f32(float x) { return x; }
static inline float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
static inline float to_f32(__half x) { return __half2float(x); }

template <class Use, int M, int N, int K, class T, class Layout>
inline void fill_fragment(fragment<Use, M, N, K, T, Layout> &f, float v) {
    for (float &x : f.v) x = v;
}

/* matrix_a / matrix_b: the layout is the fragment's. */
template <class Use, int M, int N, int K, class T>
inline void load_matrix_sync(fragment<Use, M, N, K, T, row_major> &f, const T *p, unsigned ldm) {
    typedef fragment<Use, M, N, K, T, row_major> F;
    for (int r = 0; r < F::R; r++)
        for (int c = 0; c < F::C; c++) f.v[r * F::C + c] = to_f32(p[(size_t)r * ldm + c]);
}
template <class Use, int M, int N, int K, class T>
inline void load_matrix_sync(fragment<Use, M, N, K, T, col_major> &f, const T *p, unsigned ldm) {
    typedef fragment<Use, M, N, K, T, col_major> F;
    for (int r = 0; r < F::R; r++)
        for (int c = 0; c < F::C; c++) f.v[r * F::C + c] = to_f32(p[(size_t)c * ldm + r]);
}
/* accumulator: the layout is an argument. */
template <int M, int N, int K>
inline void load_matrix_sync(fragment<accumulator, M, N, K, float> &f, const float *p, unsigned ldm, layout_t l) {
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++)
            f.v[r * N + c] = l == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
}

template <int M, int N, int K, class T, class LA, class LB>
inline void mma_sync(fragment<accumulator, M, N, K, float> &d, const fragment<matrix_a, M, N, K, T, LA> &a,
                     const fragment<matrix_b, M, N, K, T, LB> &b, const fragment<accumulator, M, N, K, float> &c) {
    /* per warp: the fragments the lowest lane brought and its result */
    static float in_a[32][M * K], in_b[32][K * N], in_c[32][M * N], out[32][M * N];
    const int w = qwsim::warp_of_thread();
    __syncwarp();   /* every lane has its fragments */
    if (qwsim::lowest_lane_of_warp()) {
        memcpy(in_a[w], a.v, sizeof a.v);
        memcpy(in_b[w], b.v, sizeof b.v);
        memcpy(in_c[w], c.v, sizeof c.v);
        for (int r = 0; r < M; r++)
            for (int n = 0; n < N; n++) {
                float s = c.v[r * N + n];
                for (int k = 0; k < K; k++) s += a.v[r * K + k] * b.v[k * N + n];
                out[w][r * N + n] = s;
            }
    }
    __syncwarp();   /* the result is there; the next mma's first barrier keeps it until all copied */
    if (memcmp(in_a[w], a.v, sizeof a.v)) qwsim::fragments_differ("A fragments");
    if (memcmp(in_b[w], b.v, sizeof b.v)) qwsim::fragments_differ("B fragments");
    if (memcmp(in_c[w], c.v, sizeof c.v)) qwsim::fragments_differ("accumulators");
    memcpy(d.v, out[w], sizeof d.v);
}

template <int M, int N, int K>
inline void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float> &f, unsigned ldm, layout_t l) {
    __syncwarp();
    if (!qwsim::lowest_lane_of_warp()) return;
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++)
            (l == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]) = f.v[r * N + c];
}

} // namespace wmma
} // namespace nvcuda

#endif
