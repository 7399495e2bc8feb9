/*
 * check_quant.cu - run on a lent GPU by tests/gpu/run.sh: the quantized
 * linear kernels of cuda/quant.cu against a host reference, then their
 * bandwidth at Qwen3-8B shapes.
 *
 *   check_quant [--small] [--copy-gbs X] [check] [bench]
 *
 * check: qwk_qgemv (U4, U8, E4M3; M = 1..8; k % 8 == 0 (vector path) and
 * not (scalar path); groups that split an 8-column chunk; a partial last
 * FP8 block) against a double-precision sum of x * w with w computed in f32
 * as the kernel's contract says ((code - zero) * scale, e4m3(code) * scale);
 * rows past M must stay untouched. qwk_qdequant must equal
 * bf16(w) bit for bit, including all 254 finite e4m3 codes. The
 * block-scaled FP8 path (cuda/fp8_block.h): qwk_fp8_quant_act's codes and
 * scales bit for bit against the rule computed here with lib/fp8.h (groups
 * of zeros, outliers, saturation, M not a multiple of 4, padding rows
 * zero, nothing past them touched); qwk_gemm_run_fp8 against a double sum
 * over the same codes and scales (1e-3: the tensor cores' sums within a
 * 128-column block), and against x unquantized times the dequantized
 * weight (the W8A8 error itself, loose). Decode's side of it:
 * qwk_fp8_quant_act_values bit for bit (the same codes' values, the same
 * scales), qwk_qgemv_w8a8 against a double sum over them (f32 sums: 1e-5),
 * each row bit for bit its value when alone (M = 1), and within the GEMM's
 * 1e-3 of the block-scaled GEMM over the same rows (decode == prefill
 * numerics). qwk_qgemm (steps of 9..64 rows; U4, U8, E4M3; one, two and
 * four 16-row tiles, two block rows; k % 32 and k % 8 not 0; groups that
 * split its 32-column runs) against a double sum over the weights as
 * qwk_qdequant rounds them (1e-5), rows past M and columns past n of a
 * wider y untouched, k split in 5 to 8 parts (a short last one). bench:
 * GB/s of the GEMVs (codes + scales + zeros + activations read once; the
 * W8A8 one with its activation quantization)
 * and of the dequantization, as a share of --copy-gbs (check_kernels'
 * copy_d2d); the block-scaled FP8 GEMM's TFLOP/s at 8B prefill shapes and
 * its speed-up over the dequantize + bf16 GEMM path it replaces; qwk_qgemm's
 * GB/s at M = 16 and 64 and its speed-up over that path.
 * Prints "CHECK name ok|FAIL ..." and "BENCH name value unit pct" lines;
 * exit 0 all passed, 1 a check failed, 2 no device or a CUDA error.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

extern "C" {
#include "dtype.h"
#include "fp8.h"
}
#include "../../cuda/fp8_block.h"
#include "../../cuda/gemm.h"
#include "../../cuda/qgemm.h"
#include "../../cuda/quant.h"

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); exit(2); } } while (0)
static int failures = 0;
static bool small = false;
static uint64_t rs = 0x9e3779b97f4a7c15ull;
static uint32_t urand() { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (uint32_t)(rs >> 32); }
static float frand() { return (float)(urand() * 0x1.0p-32) * 2.f - 1.f; }
static void report(const char *name, double err, double tol) {
    bool ok = err <= tol && err == err;
    if (!ok) failures++;
    printf("CHECK %-52s %s err %.3e (tol %.1e)\n", name, ok ? "ok  " : "FAIL", err, tol);
}

/* How many of the n floats at y lost the 0xff poison a check wrote there
 * (the output rows a kernel must leave alone). */
static size_t poison_changed(const float *y, int n) {
    size_t changed = 0;
    for (int i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &y[i], 4);
        changed += u != 0xffffffffu;
    }
    return changed;
}

/* A quantized linear on the host (codes unpacked, one byte each) and its
 * device copy in quant.h's layout. */
struct qlin {
    int fmt, n, k, gk, G;
    std::vector<uint8_t> codes;
    std::vector<float> sc, zp;
    qwk_qlinear d;
};

static const char *fmt_name(int f) { return f == QWK_Q_U4 ? "u4" : f == QWK_Q_U8 ? "u8" : "e4m3"; }

/* Random codes, scales and zeros; E4M3 codes are finite (the loader's NaN
 * scan refuses the others). exhaustive: E4M3 codes cycle through 0..255. */
static qlin make(int fmt, int n, int k, int gk, bool exhaustive = false) {
    qlin q;
    q.fmt = fmt; q.n = n; q.k = k; q.gk = gk; q.G = (k + gk - 1) / gk;
    q.codes.resize((size_t)n * k);
    q.sc.resize((size_t)n * q.G);
    q.zp.assign((size_t)n * q.G, 0.f);
    for (size_t i = 0; i < q.codes.size(); i++) {
        uint32_t c = exhaustive ? (uint32_t)(i & 255) : urand();
        if (fmt == QWK_Q_U4) c &= 15;
        else c &= 255;
        if (fmt == QWK_Q_E4M3 && qwi_e4m3_is_nan((uint8_t)c)) c = exhaustive ? 0 : 0x3c;
        q.codes[i] = (uint8_t)c;
    }
    for (auto &s : q.sc) s = (fmt == QWK_Q_E4M3 ? 1e-2f : 2e-3f) * (1.25f + frand());
    if (fmt != QWK_Q_E4M3)
        for (auto &z : q.zp) z = (float)(urand() % (fmt == QWK_Q_U4 ? 16 : 256)) + (urand() & 1);   /* v1 offset */
    std::vector<uint8_t> dev_codes(qwk_qcode_bytes(fmt, n, k));
    if (fmt == QWK_Q_U4)
        for (size_t j = 0; j < dev_codes.size(); j++) dev_codes[j] = (uint8_t)(q.codes[2 * j] | (q.codes[2 * j + 1] << 4));
    else
        dev_codes = q.codes;
    uint8_t *c; float *s, *z = NULL;
    CK(cudaMalloc(&c, dev_codes.size()));
    CK(cudaMalloc(&s, q.sc.size() * 4));
    CK(cudaMemcpy(c, dev_codes.data(), dev_codes.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(s, q.sc.data(), q.sc.size() * 4, cudaMemcpyHostToDevice));
    if (fmt != QWK_Q_E4M3) {
        CK(cudaMalloc(&z, q.zp.size() * 4));
        CK(cudaMemcpy(z, q.zp.data(), q.zp.size() * 4, cudaMemcpyHostToDevice));
    }
    q.d = qwk_qlinear{fmt, n, k, gk, q.G, c, s, z};
    return q;
}

static void release(qlin &q) {
    cudaFree((void *)q.d.codes); cudaFree((void *)q.d.scales); cudaFree((void *)q.d.zeros);
}

/* w(r, c) in f32, as the contract computes it */
static float wval(const qlin &q, int r, int c) {
    const size_t i = (size_t)r * q.k + c, g = (size_t)r * q.G + c / q.gk;
    if (q.fmt == QWK_Q_E4M3) return qwi_e4m3_to_f32(q.codes[i]) * q.sc[g];
    return ((float)q.codes[i] - q.zp[g]) * q.sc[g];
}

/* Normwise relative error of y (M rows of n, row stride ldy) against the
 * double sums of x bf16 [M][k] times w f32 [n][k]: the GEMV's and the
 * GEMM's reference. */
static double rel_to_double(const std::vector<uint16_t> &x, const std::vector<float> &w, const std::vector<float> &y,
                            int M, int n, int k, int ldy) {
    double num = 0, den = 0;
    for (int m = 0; m < M; m++)
        for (int r = 0; r < n; r++) {
            double ref = 0;
            for (int c = 0; c < k; c++) ref += (double)qwi_bf16_to_f32(x[(size_t)m * k + c]) * w[(size_t)r * k + c];
            const double d = y[(size_t)m * ldy + r] - ref;
            num += d * d;
            den += ref * ref;
        }
    return sqrt(num / (den > 0 ? den : 1));
}

static void check_gemv(int fmt, int n, int k, int gk, int M) {
    qlin q = make(fmt, n, k, gk);
    std::vector<uint16_t> hx((size_t)M * k);
    for (auto &v : hx) v = qwi_f32_to_bf16(frand());
    const int MP = M + 1;   /* one poisoned row past M that must stay untouched */
    uint16_t *x; float *y;
    CK(cudaMalloc(&x, hx.size() * 2));
    CK(cudaMalloc(&y, (size_t)MP * n * 4));
    CK(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemset(y, 0xff, (size_t)MP * n * 4));
    qwk_qgemv(x, M, &q.d, y, n, 0);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<float> hy((size_t)MP * n);
    CK(cudaMemcpy(hy.data(), y, hy.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<float> w((size_t)n * k);
    for (int r = 0; r < n; r++)
        for (int c = 0; c < k; c++) w[(size_t)r * k + c] = wval(q, r, c);
    const size_t touched = poison_changed(&hy[(size_t)M * n], n);
    char name[96];
    snprintf(name, sizeof name, "qgemv %s M%d %dx%d g%d", fmt_name(fmt), M, n, k, gk);
    report(name, touched ? 1.0 : rel_to_double(hx, w, hy, M, n, k, n), 1e-5);
    cudaFree(x); cudaFree(y);
    release(q);
}

static void check_dequant(int fmt, int n, int k, int gk, bool exhaustive = false) {
    qlin q = make(fmt, n, k, gk, exhaustive);
    uint16_t *o;
    CK(cudaMalloc(&o, (size_t)n * k * 2));
    CK(cudaMemset(o, 0xff, (size_t)n * k * 2));
    qwk_qdequant(&q.d, o, 0);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<uint16_t> ho((size_t)n * k);
    CK(cudaMemcpy(ho.data(), o, ho.size() * 2, cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (int r = 0; r < n; r++)
        for (int c = 0; c < k; c++) bad += ho[(size_t)r * k + c] != qwi_f32_to_bf16(wval(q, r, c));
    char name[96];
    snprintf(name, sizeof name, "qdequant %s %dx%d g%d%s (bits exact)", fmt_name(fmt), n, k, gk,
             exhaustive ? " all codes" : "");
    report(name, (double)bad, 0);
    cudaFree(o);
    release(q);
}

/* qwk_qgemm over M rows against a double sum of x times the weights as
 * qwk_qdequant rounds them (bf16(w)): the same operands as the dequantizing
 * path, products exact, f32 sums (1e-5). A poisoned row past M must stay
 * untouched, and y's row stride is wider than n (ldy = n + 3). sms: the
 * multiprocessor count the split of k is chosen for (132: an H200's), with
 * the workspace qwk_qgemm_workspace names; want_split: that split must
 * have more than one part (or the check would not see one). */
static void check_qgemm(int fmt, int n, int k, int gk, int M, int sms = 132, bool want_split = false) {
    qlin q = make(fmt, n, k, gk);
    const int32_t splits = qwk_qgemm_splits(M, &q.d, sms);
    const size_t ws_bytes = qwk_qgemm_workspace(M, &q.d, sms);
    float *ws = NULL;
    if (ws_bytes) CK(cudaMalloc(&ws, ws_bytes));
    std::vector<uint16_t> hx((size_t)M * k);
    for (auto &v : hx) v = qwi_f32_to_bf16(frand());
    const int MP = M + 1, ldy = n + 3;
    uint16_t *x; float *y;
    CK(cudaMalloc(&x, hx.size() * 2));
    CK(cudaMalloc(&y, (size_t)MP * ldy * 4));
    CK(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemset(y, 0xff, (size_t)MP * ldy * 4));
    qwk_qgemm(x, M, &q.d, y, ldy, ws, ws_bytes, sms, 0);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<float> hy((size_t)MP * ldy);
    CK(cudaMemcpy(hy.data(), y, hy.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<float> w((size_t)n * k);
    for (int r = 0; r < n; r++)
        for (int c = 0; c < k; c++) w[(size_t)r * k + c] = qwi_bf16_to_f32(qwi_f32_to_bf16(wval(q, r, c)));
    size_t touched = poison_changed(&hy[(size_t)M * ldy], ldy);
    for (int m = 0; m < M; m++) touched += poison_changed(&hy[(size_t)m * ldy + n], ldy - n);
    char name[96];
    snprintf(name, sizeof name, "qgemm %s M%d %dx%d g%d split %d", fmt_name(fmt), M, n, k, gk, (int)splits);
    report(name, touched || (want_split && splits < 2) ? 1.0 : rel_to_double(hx, w, hy, M, n, k, ldy), 1e-5);
    cudaFree(x); cudaFree(y); cudaFree(ws);
    release(q);
}

/* Activations for the FP8 checks: bf16 [M][K] with every kind of group -
 * all zero, one outlier 300x the rest (the others then fall into e4m3's
 * subnormals), small values, plain random. */
static std::vector<uint16_t> fp8_acts(int M, int K) {
    std::vector<uint16_t> x((size_t)M * K);
    for (int m = 0; m < M; m++)
        for (int g = 0; g < K / 128; g++) {
            const int kind = (m * 7 + g) % 4;
            for (int c = 0; c < 128; c++) {
                float v = frand() * (kind == 2 ? 1e-3f : 3.f);
                if (kind == 0) v = 0.f;
                if (kind == 1 && c == 77) v = 300.f * (urand() & 1 ? 1.f : -1.f);
                x[(size_t)m * K + g * 128 + c] = qwi_f32_to_bf16(v);
            }
        }
    return x;
}

/* The quantization rule of fp8_block.h, computed here: per 1 x 128 group
 * s = amax / 448 (1 for zeros), codes e4m3(x / s). */
static void fp8_quant_ref(const std::vector<uint16_t> &x, int M, int K, std::vector<uint8_t> &q,
                          std::vector<float> &s, int M4) {
    q.assign((size_t)M4 * K, 0);
    s.assign((size_t)(K / 128) * M4, 1.f);
    for (int m = 0; m < M; m++)
        for (int g = 0; g < K / 128; g++) {
            float amax = 0.f;
            for (int c = 0; c < 128; c++) amax = fmaxf(amax, fabsf(qwi_bf16_to_f32(x[(size_t)m * K + g * 128 + c])));
            const float sc = amax > 0.f ? amax / 448.f : 1.f;
            s[(size_t)g * M4 + m] = sc;
            for (int c = 0; c < 128; c++)
                q[(size_t)m * K + g * 128 + c] = qwi_f32_to_e4m3(qwi_bf16_to_f32(x[(size_t)m * K + g * 128 + c]) / sc);
        }
}

static void check_fp8_quant_act(int M, int K) {
    const int M4 = qwk_fp8_rows(M), G = K / 128;
    std::vector<uint16_t> hx = fp8_acts(M, K);
    std::vector<uint8_t> rq;
    std::vector<float> rs;
    fp8_quant_ref(hx, M, K, rq, rs, M4);
    uint16_t *x; uint8_t *q; float *sc;
    /* one poisoned row of codes and one column of scales past the M4 rows */
    CK(cudaMalloc(&x, hx.size() * 2));
    CK(cudaMalloc(&q, (size_t)(M4 + 1) * K));
    CK(cudaMalloc(&sc, (size_t)G * (M4 + 1) * 4));
    CK(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemset(q, 0xee, (size_t)(M4 + 1) * K));
    CK(cudaMemset(sc, 0xff, (size_t)G * (M4 + 1) * 4));
    qwk_fp8_quant_act(x, M, K, q, sc, 0);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<uint8_t> hq((size_t)(M4 + 1) * K);
    std::vector<float> hs((size_t)G * (M4 + 1));
    CK(cudaMemcpy(hq.data(), q, hq.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hs.data(), sc, hs.size() * 4, cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (size_t i = 0; i < rq.size(); i++) bad += hq[i] != rq[i];
    for (size_t i = (size_t)M4 * K; i < hq.size(); i++) bad += hq[i] != 0xee;
    for (int g = 0; g < G; g++)
        for (int m = 0; m < M4; m++) bad += memcmp(&hs[(size_t)g * M4 + m], &rs[(size_t)g * M4 + m], 4) != 0;
    bad += poison_changed(&hs[(size_t)G * M4], (int)(hs.size() - (size_t)G * M4));
    char name[96];
    snprintf(name, sizeof name, "fp8 quant_act M%d K%d (bits exact)", M, K);
    report(name, (double)bad, 0);
    cudaFree(x); cudaFree(q); cudaFree(sc);
}

/* A weight of e4m3 codes [N][K] with one scale per 128 x 128 block, in
 * fp8_block.h's grid ([N/128][ld]), and the GEMM on the device's own
 * quantized activations against (a) a double sum over the same codes and
 * scales and (b) x unquantized times the dequantized weight. A cuBLASLt
 * without such a GEMM is a failure (the backend would then dequantize). */
static void check_fp8_gemm(int M, int N, int K, qwk_gemm *gm) {
    const int M4 = qwk_fp8_rows(M), G = K / 128, ld = (G + 3) / 4 * 4;
    std::vector<uint8_t> wc((size_t)N * K);
    for (auto &c : wc) {
        c = (uint8_t)(urand() & 255);
        if (qwi_e4m3_is_nan(c)) c = 0x3c;
    }
    std::vector<float> grid((size_t)(N / 128) * ld, 0.f);
    for (int jb = 0; jb < N / 128; jb++)
        for (int b = 0; b < G; b++) grid[(size_t)jb * ld + b] = 1e-3f * (1.5f + frand());
    std::vector<uint16_t> hx = fp8_acts(M, K);
    uint16_t *x; uint8_t *xq, *w; float *xs, *wg, *y;
    CK(cudaMalloc(&x, hx.size() * 2));
    CK(cudaMalloc(&xq, (size_t)M4 * K));
    CK(cudaMalloc(&xs, (size_t)G * M4 * 4));
    CK(cudaMalloc(&w, wc.size()));
    CK(cudaMalloc(&wg, grid.size() * 4));
    CK(cudaMalloc(&y, (size_t)M4 * N * 4));
    CK(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w, wc.data(), wc.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(wg, grid.data(), grid.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(y, 0xff, (size_t)M4 * N * 4));
    qwk_fp8_quant_act(x, M, K, xq, xs, 0);
    const int st = qwk_gemm_run_fp8(gm, 0, xq, xs, w, wg, y, M4, N, K);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    char name[96];
    snprintf(name, sizeof name, "fp8 block gemm M%d %dx%d", M, N, K);
    if (st) {
        printf("CHECK %-52s FAIL cuBLASLt status %d%s\n", name, st,
               qwk_gemm_refused(st) ? " (no block-scaled FP8 GEMM here)" : "");
        failures++;
    } else {
        std::vector<uint8_t> hq((size_t)M4 * K);
        std::vector<float> hs((size_t)G * M4), hy((size_t)M4 * N);
        CK(cudaMemcpy(hq.data(), xq, hq.size(), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hs.data(), xs, hs.size() * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hy.data(), y, hy.size() * 4, cudaMemcpyDeviceToHost));
        double num = 0, den = 0, num_w = 0, den_w = 0;
        for (int m = 0; m < M4; m++)
            for (int j = 0; j < N; j++) {
                double ref = 0, full = 0;
                for (int b = 0; b < G; b++) {
                    double part = 0;
                    const double ws = grid[(size_t)(j / 128) * ld + b];
                    for (int c = b * 128; c < b * 128 + 128; c++) {
                        const double wv = qwi_e4m3_to_f32(wc[(size_t)j * K + c]);
                        part += (double)qwi_e4m3_to_f32(hq[(size_t)m * K + c]) * wv;
                        if (m < M) full += (double)qwi_bf16_to_f32(hx[(size_t)m * K + c]) * wv * ws;
                    }
                    ref += (double)hs[(size_t)b * M4 + m] * ws * part;
                }
                const double d = hy[(size_t)m * N + j] - ref;
                num += d * d;
                den += ref * ref;
                if (m < M) {
                    num_w += (hy[(size_t)m * N + j] - full) * (hy[(size_t)m * N + j] - full);
                    den_w += full * full;
                }
            }
        /* within a 128-column block the tensor cores sum in their own
         * precision (about 14 mantissa bits on Hopper, as DeepSeek-V3
         * measured) before the block's sum is promoted to f32 and scaled:
         * 1e-3 normwise, where a misread scale tensor costs tens of
         * percent (emulated: f32 sums, 1.2e-7) */
        report(name, sqrt(num / (den > 0 ? den : 1)), 1e-3);
        snprintf(name, sizeof name, "fp8 block gemm M%d %dx%d vs bf16 x (W8A8 error)", M, N, K);
        report(name, sqrt(num_w / (den_w > 0 ? den_w : 1)), 5e-2);
    }
    cudaFree(x); cudaFree(xq); cudaFree(xs); cudaFree(w); cudaFree(wg); cudaFree(y);
}

/* qwk_fp8_quant_act_values: the codes fp8_quant_ref computes, as exact
 * bf16 values (their f32 reading equals e4m3(code)), the same scales; one
 * poisoned row past M (xe has no padding rows) and the scales past M4
 * untouched. */
static void check_fp8_quant_values(int M, int K) {
    const int M4 = qwk_fp8_rows(M), G = K / 128;
    std::vector<uint16_t> hx = fp8_acts(M, K);
    std::vector<uint8_t> rq;
    std::vector<float> rs;
    fp8_quant_ref(hx, M, K, rq, rs, M4);
    uint16_t *x, *xe; float *sc;
    CK(cudaMalloc(&x, hx.size() * 2));
    CK(cudaMalloc(&xe, (size_t)(M + 1) * K * 2));
    CK(cudaMalloc(&sc, (size_t)G * (M4 + 1) * 4));
    CK(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemset(xe, 0xee, (size_t)(M + 1) * K * 2));
    CK(cudaMemset(sc, 0xff, (size_t)G * (M4 + 1) * 4));
    qwk_fp8_quant_act_values(x, M, K, xe, sc, 0);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<uint16_t> he((size_t)(M + 1) * K);
    std::vector<float> hs((size_t)G * (M4 + 1));
    CK(cudaMemcpy(he.data(), xe, he.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hs.data(), sc, hs.size() * 4, cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (size_t i = 0; i < (size_t)M * K; i++) {
        const float want = qwi_e4m3_to_f32(rq[i]), got = qwi_bf16_to_f32(he[i]);
        bad += memcmp(&want, &got, 4) != 0;
    }
    for (size_t i = (size_t)M * K; i < he.size(); i++) bad += he[i] != 0xeeee;
    for (size_t i = 0; i < (size_t)G * M4; i++) bad += memcmp(&hs[i], &rs[i], 4) != 0;
    bad += poison_changed(&hs[(size_t)G * M4], (int)(hs.size() - (size_t)G * M4));
    char name[96];
    snprintf(name, sizeof name, "fp8 quant_act values M%d K%d (bits exact)", M, K);
    report(name, (double)bad, 0);
    cudaFree(x); cudaFree(xe); cudaFree(sc);
}

/* An e4m3 weight [N][K] in 128 x 128 blocks, on the device as the backend
 * uploads it: codes, the block scales repeated on every row (quant.h) and
 * the grid (fp8_block.h). */
struct fp8w {
    std::vector<uint8_t> codes;
    std::vector<float> grid;
    int ld;
    qwk_qlinear d;
};

static fp8w make_fp8_blocks(int N, int K) {
    fp8w w;
    const int G = K / 128;
    w.ld = (G + 3) / 4 * 4;
    w.codes.resize((size_t)N * K);
    for (auto &c : w.codes) {
        c = (uint8_t)(urand() & 255);
        if (qwi_e4m3_is_nan(c)) c = 0x3c;
    }
    w.grid.assign((size_t)(N / 128) * w.ld, 0.f);
    for (int jb = 0; jb < N / 128; jb++)
        for (int b = 0; b < G; b++) w.grid[(size_t)jb * w.ld + b] = 1e-3f * (1.5f + frand());
    std::vector<float> rows((size_t)N * G);
    for (int j = 0; j < N; j++)
        for (int b = 0; b < G; b++) rows[(size_t)j * G + b] = w.grid[(size_t)(j / 128) * w.ld + b];
    uint8_t *c; float *sc, *gr;
    CK(cudaMalloc(&c, w.codes.size()));
    CK(cudaMalloc(&sc, rows.size() * 4));
    CK(cudaMalloc(&gr, w.grid.size() * 4));
    CK(cudaMemcpy(c, w.codes.data(), w.codes.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(sc, rows.data(), rows.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(gr, w.grid.data(), w.grid.size() * 4, cudaMemcpyHostToDevice));
    w.d = qwk_qlinear{QWK_Q_E4M3, N, K, 128, G, c, sc, NULL, gr, w.ld};
    return w;
}

static void release_fp8(fp8w &w) {
    cudaFree((void *)w.d.codes); cudaFree((void *)w.d.scales); cudaFree((void *)w.d.grid);
}

/* Decode's W8A8 linear: values quantization + qwk_qgemv_w8a8 over M rows
 * (a poisoned row past M must stay untouched) against (a) a double sum
 * over the same codes and scales, (b) each row run alone, bit for bit, and
 * (c) the block-scaled GEMM over the same M rows (its accumulation, 1e-3;
 * a refused GEMM is a failure, as in check_fp8_gemm). */
static void check_fp8_gemv(int M, int N, int K, qwk_gemm *gm) {
    const int M4 = qwk_fp8_rows(M), G = K / 128;
    fp8w w = make_fp8_blocks(N, K);
    std::vector<uint16_t> hx = fp8_acts(M, K);
    uint16_t *x, *xe; uint8_t *xq; float *xs, *y, *y1, *yg;
    CK(cudaMalloc(&x, hx.size() * 2));
    CK(cudaMalloc(&xe, (size_t)M * K * 2));
    CK(cudaMalloc(&xq, (size_t)M4 * K));
    CK(cudaMalloc(&xs, (size_t)G * M4 * 4));
    CK(cudaMalloc(&y, (size_t)(M + 1) * N * 4));
    CK(cudaMalloc(&y1, (size_t)N * 4));
    CK(cudaMalloc(&yg, (size_t)M4 * N * 4));
    CK(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemset(y, 0xff, (size_t)(M + 1) * N * 4));
    qwk_fp8_quant_act_values(x, M, K, xe, xs, 0);
    qwk_qgemv_w8a8(xe, xs, M, &w.d, y, N, 0);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<uint16_t> he((size_t)M * K);
    std::vector<float> hs((size_t)G * M4), hy((size_t)(M + 1) * N), h1(N);
    CK(cudaMemcpy(he.data(), xe, he.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hs.data(), xs, hs.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hy.data(), y, hy.size() * 4, cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    for (int m = 0; m < M; m++)
        for (int j = 0; j < N; j++) {
            double ref = 0;
            for (int b = 0; b < G; b++) {
                double part = 0;
                for (int c = b * 128; c < b * 128 + 128; c++)
                    part += (double)qwi_bf16_to_f32(he[(size_t)m * K + c]) * qwi_e4m3_to_f32(w.codes[(size_t)j * K + c]);
                ref += (double)hs[(size_t)b * M4 + m] * w.grid[(size_t)(j / 128) * w.ld + b] * part;
            }
            const double d = hy[(size_t)m * N + j] - ref;
            num += d * d;
            den += ref * ref;
        }
    const size_t touched = poison_changed(&hy[(size_t)M * N], N);
    char name[96];
    snprintf(name, sizeof name, "fp8 w8a8 gemv M%d %dx%d", M, N, K);
    report(name, touched ? 1.0 : sqrt(num / (den > 0 ? den : 1)), 1e-5);
    /* (b) each row alone: the same codes, scales and sums */
    size_t differ = 0;
    for (int m = 0; m < M; m++) {
        qwk_fp8_quant_act_values(x + (size_t)m * K, 1, K, xe, xs, 0);
        qwk_qgemv_w8a8(xe, xs, 1, &w.d, y1, N, 0);
        CK(cudaGetLastError());
        CK(cudaMemcpy(h1.data(), y1, (size_t)N * 4, cudaMemcpyDeviceToHost));
        differ += memcmp(h1.data(), &hy[(size_t)m * N], (size_t)N * 4) != 0;
    }
    snprintf(name, sizeof name, "fp8 w8a8 gemv M%d %dx%d row alone (bits exact)", M, N, K);
    report(name, (double)differ, 0);
    /* (c) the GEMM prefill runs over the same rows */
    qwk_fp8_quant_act(x, M, K, xq, xs, 0);
    const int st = qwk_gemm_run_fp8(gm, 0, xq, xs, w.d.codes, w.d.grid, yg, M4, N, K);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    snprintf(name, sizeof name, "fp8 w8a8 gemv M%d %dx%d vs block gemm", M, N, K);
    if (st) {
        printf("CHECK %-52s FAIL cuBLASLt status %d\n", name, st);
        failures++;
    } else {
        std::vector<float> hg((size_t)M4 * N);
        CK(cudaMemcpy(hg.data(), yg, hg.size() * 4, cudaMemcpyDeviceToHost));
        double n2 = 0, d2 = 0;
        for (size_t i = 0; i < (size_t)M * N; i++) {
            n2 += (double)(hy[i] - hg[i]) * (hy[i] - hg[i]);
            d2 += (double)hg[i] * hg[i];
        }
        report(name, sqrt(n2 / (d2 > 0 ? d2 : 1)), 1e-3);
    }
    cudaFree(x); cudaFree(xe); cudaFree(xq); cudaFree(xs); cudaFree(y); cudaFree(y1); cudaFree(yg);
    release_fp8(w);
}

static void group_check() {
    for (int M : {1, 3, 8}) {
        check_gemv(QWK_Q_U4, 96, 256, 128, M);   /* vector path, group = 16 chunks  */
        check_gemv(QWK_Q_U4, 33, 120, 12, M);    /* groups split 8-column chunks    */
        check_gemv(QWK_Q_U4, 21, 90, 10, M);     /* k % 8 != 0: scalar path         */
        check_gemv(QWK_Q_U8, 64, 512, 64, M);
        check_gemv(QWK_Q_U8, 17, 50, 2, M);
        check_gemv(QWK_Q_E4M3, 40, 200, 128, M); /* partial last block, vector path */
        check_gemv(QWK_Q_E4M3, 70, 300, 128, M); /* partial last block, scalar path */
    }
    check_gemv(QWK_Q_U8, 9, 64, 64, 5);
    /* one 16-row tile (MF 1), two, four, and two block rows of four */
    for (int M : {9, 16, 33, 70})
        check_qgemm(QWK_Q_U4, 96, 256, 128, M);    /* 32-column runs, one group each */
    check_qgemm(QWK_Q_U4, 33, 120, 12, 20);        /* k % 32 != 0: column by column  */
    check_qgemm(QWK_Q_U4, 21, 90, 10, 12);         /* k % 8 != 0: x column by column */
    check_qgemm(QWK_Q_U8, 64, 512, 64, 40);
    check_qgemm(QWK_Q_U8, 17, 50, 2, 9);
    check_qgemm(QWK_Q_E4M3, 70, 384, 48, 17);      /* groups split the 32-column runs */
    check_qgemm(QWK_Q_E4M3, 40, 200, 128, 24);     /* partial last block             */
    /* k split to fill the GPU: 8 parts of 256 columns (132 SMs); 6 with
     * four 16-row tiles (12 SMs); 5 parts of a k that is no multiple of 64
     * (the last part half a step) with groups across the 32-column runs */
    check_qgemm(QWK_Q_U4, 64, 2048, 128, 16, 132, true);
    check_qgemm(QWK_Q_U4, 100, 1536, 64, 40, 12, true);
    check_qgemm(QWK_Q_E4M3, 70, 1312, 48, 9, 132, true);
    check_dequant(QWK_Q_U4, 96, 256, 128);
    check_dequant(QWK_Q_U4, 21, 90, 10);
    check_dequant(QWK_Q_U8, 17, 50, 2);
    check_dequant(QWK_Q_E4M3, 70, 300, 128);
    check_dequant(QWK_Q_E4M3, 4, 256, 128, true);
    for (int M : {1, 9, 12, 13})   /* padding rows: M4 - M = 3, 3, 0, 3 */
        check_fp8_quant_act(M, 256);
    check_fp8_quant_act(20, 1024);
    for (int M : {1, 3, 8})
        check_fp8_quant_values(M, 384);
    {
        void *ws;
        qwk_gemm *gm;
        CK(cudaMalloc(&ws, QWK_GEMM_WORKSPACE));
        if (qwk_gemm_create(ws, &gm)) { printf("cublasLtCreate failed\n"); exit(2); }
        check_fp8_gemm(9, 256, 384, gm);
        check_fp8_gemm(16, 128, 128, gm);
        if (!small) check_fp8_gemm(300, 1024, 2048, gm);
        for (int M : {1, 3, 8})
            check_fp8_gemv(M, 256, 384, gm);
        if (!small) check_fp8_gemv(8, 1024, 2048, gm);
        qwk_gemm_destroy(gm);
        cudaFree(ws);
    }
    if (small) return;
    check_gemv(QWK_Q_U4, 3072, 4096, 128, 1);   /* real sizes: many blocks, long rows */
    check_gemv(QWK_Q_E4M3, 1536, 4096, 128, 8);
    check_dequant(QWK_Q_U4, 3072, 4096, 128);
    check_qgemm(QWK_Q_U4, 1024, 4096, 128, 64);
}

/* GEMV and dequantization bandwidth at the Qwen3-8B linears. */
static void bench_one(const char *tag, int fmt, int n, int k, int M, double copy_gbs) {
    qlin q = make(fmt, n, k, 128);
    uint16_t *x, *o; float *y;
    CK(cudaMalloc(&x, (size_t)M * k * 2));
    CK(cudaMalloc(&y, (size_t)M * n * 4));
    CK(cudaMalloc(&o, (size_t)n * k * 2));
    CK(cudaMemset(x, 0x3c, (size_t)M * k * 2));
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    for (int i = 0; i < 3; i++) qwk_qgemv(x, M, &q.d, y, n, 0);
    CK(cudaGetLastError());
    cudaEventRecord(e0);
    for (int i = 0; i < 20; i++) qwk_qgemv(x, M, &q.d, y, n, 0);
    cudaEventRecord(e1); CK(cudaEventSynchronize(e1));
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    const double sg = (double)n * q.G * 4 * (fmt == QWK_Q_E4M3 ? 1 : 2);
    const double bytes = (double)qwk_qcode_bytes(fmt, n, k) + sg + (double)M * k * 2 + (double)M * n * 4;
    double gbs = bytes * 20 / (ms * 1e-3) / 1e9;
    printf("BENCH qgemv_%s_M%d %.0f GB/s %.1f%%\n", tag, M, gbs, copy_gbs > 0 ? 100 * gbs / copy_gbs : 0.0);
    if (M == 1) {
        for (int i = 0; i < 2; i++) qwk_qdequant(&q.d, o, 0);
        cudaEventRecord(e0);
        for (int i = 0; i < 10; i++) qwk_qdequant(&q.d, o, 0);
        cudaEventRecord(e1); CK(cudaEventSynchronize(e1));
        cudaEventElapsedTime(&ms, e0, e1);
        const double db = (double)qwk_qcode_bytes(fmt, n, k) + sg + (double)n * k * 2;
        gbs = db * 10 / (ms * 1e-3) / 1e9;
        printf("BENCH qdequant_%s %.0f GB/s %.1f%%\n", tag, gbs, copy_gbs > 0 ? 100 * gbs / copy_gbs : 0.0);
    }
    cudaFree(x); cudaFree(y); cudaFree(o);
    release(q);
}

/* Milliseconds of iters runs of the dequantizing path (qwk_qdequant into
 * wb, then the bf16 GEMM into y) after 3 warm-up runs: what qwk_qgemm and
 * the block-scaled FP8 GEMM are timed against. */
static float time_dequant_gemm(qwk_gemm *gm, const qlin &q, const uint16_t *x, uint16_t *wb, float *y, int M,
                               int iters) {
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    for (int i = 0; i < 3 + iters; i++) {
        if (i == 3) cudaEventRecord(e0);
        qwk_qdequant(&q.d, wb, 0);
        qwk_gemm_run(gm, 0, x, wb, y, 1, M, q.n, q.k);
    }
    cudaEventRecord(e1); CK(cudaEventSynchronize(e1));
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    CK(cudaGetLastError());
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    return ms;
}

/* qwk_qgemm at M rows: GB/s (codes + scales + zeros + activations and
 * outputs, each once) as a share of --copy-gbs, and its speed-up over the
 * path it replaces (qwk_qdequant into a bf16 weight + the bf16 GEMM). */
static void bench_qgemm(const char *tag, int fmt, int n, int k, int M, double copy_gbs) {
    qlin q = make(fmt, n, k, 128);
    void *ws;
    qwk_gemm *gm;
    uint16_t *x, *wb; float *y, *qws = NULL;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    const int sms = prop.multiProcessorCount;
    const size_t qws_bytes = qwk_qgemm_workspace(M, &q.d, sms);
    if (qws_bytes) CK(cudaMalloc(&qws, qws_bytes));
    CK(cudaMalloc(&ws, QWK_GEMM_WORKSPACE));
    if (qwk_gemm_create(ws, &gm)) { printf("cublasLtCreate failed\n"); exit(2); }
    CK(cudaMalloc(&x, (size_t)M * k * 2));
    CK(cudaMalloc(&wb, (size_t)n * k * 2));
    CK(cudaMalloc(&y, (size_t)M * n * 4));
    CK(cudaMemset(x, 0x3c, (size_t)M * k * 2));
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    float ms;
    for (int i = 0; i < 3; i++) qwk_qgemm(x, M, &q.d, y, n, qws, qws_bytes, sms, 0);
    CK(cudaGetLastError());
    cudaEventRecord(e0);
    for (int i = 0; i < 20; i++) qwk_qgemm(x, M, &q.d, y, n, qws, qws_bytes, sms, 0);
    cudaEventRecord(e1); CK(cudaEventSynchronize(e1));
    cudaEventElapsedTime(&ms, e0, e1);
    const float ms_deq = time_dequant_gemm(gm, q, x, wb, y, M, 20);
    const double sg = (double)n * q.G * 4 * (fmt == QWK_Q_E4M3 ? 1 : 2);
    const double bytes = (double)qwk_qcode_bytes(fmt, n, k) + sg + (double)M * k * 2 + (double)M * n * 4;
    const double gbs = bytes * 20 / (ms * 1e-3) / 1e9;
    printf("BENCH qgemm_%s_M%d %.0f GB/s %.1f%%_split_%d\n", tag, M, gbs, copy_gbs > 0 ? 100 * gbs / copy_gbs : 0.0,
           (int)qwk_qgemm_splits(M, &q.d, sms));
    printf("BENCH qgemm_vs_dequant_gemm_%s_M%d %.2f x -\n", tag, M, ms_deq / ms);
    qwk_gemm_destroy(gm);
    cudaFree(ws); cudaFree(x); cudaFree(wb); cudaFree(y); cudaFree(qws);
    release(q);
}

/* Decode's W8A8 linear (activation quantization + qwk_qgemv_w8a8), GB/s
 * of the same bytes as the weight-only GEMV's row (codes + scales + bf16
 * activations + outputs), so the two rows compare directly. */
static void bench_fp8_gemv(const char *tag, int n, int k, int M, double copy_gbs) {
    fp8w w = make_fp8_blocks(n, k);
    const int G = k / 128;
    uint16_t *x, *xe; float *xs, *y;
    CK(cudaMalloc(&x, (size_t)M * k * 2));
    CK(cudaMalloc(&xe, (size_t)M * k * 2));
    CK(cudaMalloc(&xs, (size_t)G * qwk_fp8_rows(M) * 4));
    CK(cudaMalloc(&y, (size_t)M * n * 4));
    CK(cudaMemset(x, 0x3c, (size_t)M * k * 2));
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    for (int i = 0; i < 3; i++) {
        qwk_fp8_quant_act_values(x, M, k, xe, xs, 0);
        qwk_qgemv_w8a8(xe, xs, M, &w.d, y, n, 0);
    }
    CK(cudaGetLastError());
    cudaEventRecord(e0);
    for (int i = 0; i < 20; i++) {
        qwk_fp8_quant_act_values(x, M, k, xe, xs, 0);
        qwk_qgemv_w8a8(xe, xs, M, &w.d, y, n, 0);
    }
    cudaEventRecord(e1); CK(cudaEventSynchronize(e1));
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    const double bytes = (double)n * k + (double)n * G * 4 + (double)M * k * 2 + (double)M * n * 4;
    const double gbs = bytes * 20 / (ms * 1e-3) / 1e9;
    printf("BENCH qgemv_w8a8_%s_M%d %.0f GB/s %.1f%%\n", tag, M, gbs, copy_gbs > 0 ? 100 * gbs / copy_gbs : 0.0);
    cudaFree(x); cudaFree(xe); cudaFree(xs); cudaFree(y);
    release_fp8(w);
}

/* The prefill linear an FP8 model runs over M rows: activation
 * quantization + block-scaled FP8 GEMM, against the path it replaces
 * (the weight dequantized to bf16 + the bf16 GEMM), TFLOP/s of each. */
static void bench_fp8_gemm(const char *tag, int M, int N, int K) {
    const int G = K / 128, ld = (G + 3) / 4 * 4;
    qlin q = make(QWK_Q_E4M3, N, K, 128);
    void *ws;
    qwk_gemm *gm;
    uint16_t *x, *wb; uint8_t *xq; float *xs, *wg, *y;
    CK(cudaMalloc(&ws, QWK_GEMM_WORKSPACE));
    if (qwk_gemm_create(ws, &gm)) { printf("cublasLtCreate failed\n"); exit(2); }
    CK(cudaMalloc(&x, (size_t)M * K * 2));
    CK(cudaMalloc(&wb, (size_t)N * K * 2));
    CK(cudaMalloc(&xq, (size_t)M * K));
    CK(cudaMalloc(&xs, (size_t)G * M * 4));
    CK(cudaMalloc(&wg, (size_t)(N / 128) * ld * 4));
    CK(cudaMalloc(&y, (size_t)M * N * 4));
    CK(cudaMemset(x, 0x3c, (size_t)M * K * 2));
    std::vector<float> grid((size_t)(N / 128) * ld, 1e-3f);
    CK(cudaMemcpy(wg, grid.data(), grid.size() * 4, cudaMemcpyHostToDevice));
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    const double flop = 2.0 * M * N * K;
    float ms_fp8 = -1;
    int st = 0;
    for (int i = 0; i < 3 && !st; i++) {
        qwk_fp8_quant_act(x, M, K, xq, xs, 0);
        st = qwk_gemm_run_fp8(gm, 0, xq, xs, q.d.codes, wg, y, M, N, K);
    }
    if (!st) {
        cudaEventRecord(e0);
        for (int i = 0; i < 10; i++) {
            qwk_fp8_quant_act(x, M, K, xq, xs, 0);
            qwk_gemm_run_fp8(gm, 0, xq, xs, q.d.codes, wg, y, M, N, K);
        }
        cudaEventRecord(e1); CK(cudaEventSynchronize(e1));
        cudaEventElapsedTime(&ms_fp8, e0, e1);
    }
    const float ms_deq = time_dequant_gemm(gm, q, x, wb, y, M, 10);
    const double t_deq = flop * 10 / (ms_deq * 1e-3) / 1e12;
    printf("BENCH fp8_dequant_gemm_%s_M%d %.0f TFLOP/s -\n", tag, M, t_deq);
    if (ms_fp8 > 0) {
        const double t = flop * 10 / (ms_fp8 * 1e-3) / 1e12;
        printf("BENCH fp8_block_gemm_%s_M%d %.0f TFLOP/s %.2fx\n", tag, M, t, t / t_deq);
    } else {
        printf("BENCH fp8_block_gemm_%s_M%d 0 TFLOP/s refused(status_%d)\n", tag, M, st);
    }
    qwk_gemm_destroy(gm);
    cudaFree(ws); cudaFree(x); cudaFree(wb); cudaFree(xq); cudaFree(xs); cudaFree(wg); cudaFree(y);
    release(q);
}

static void group_bench(double copy_gbs) {
    bench_one("u4_8b_gateup", QWK_Q_U4, 2 * 12288, 4096, 1, copy_gbs);
    bench_one("u4_8b_gateup", QWK_Q_U4, 2 * 12288, 4096, 8, copy_gbs);
    bench_one("u4_8b_down", QWK_Q_U4, 4096, 12288, 1, copy_gbs);
    bench_one("u4_8b_qkv", QWK_Q_U4, 6144, 4096, 1, copy_gbs);
    bench_one("u8_8b_gateup", QWK_Q_U8, 2 * 12288, 4096, 1, copy_gbs);
    bench_one("e4m3_8b_gateup", QWK_Q_E4M3, 2 * 12288, 4096, 1, copy_gbs);
    bench_one("e4m3_8b_gateup", QWK_Q_E4M3, 2 * 12288, 4096, 8, copy_gbs);
    for (int M : {16, 64}) {
        bench_qgemm("u4_8b_gateup", QWK_Q_U4, 2 * 12288, 4096, M, copy_gbs);
        bench_qgemm("u4_8b_down", QWK_Q_U4, 4096, 12288, M, copy_gbs);
        bench_qgemm("e4m3_8b_gateup", QWK_Q_E4M3, 2 * 12288, 4096, M, copy_gbs);
        bench_qgemm("u4_0.6b_down", QWK_Q_U4, 1024, 3072, M, copy_gbs);   /* narrow: split k */
    }
    bench_fp8_gemv("e4m3_8b_gateup", 2 * 12288, 4096, 1, copy_gbs);
    bench_fp8_gemv("e4m3_8b_gateup", 2 * 12288, 4096, 8, copy_gbs);
    bench_fp8_gemv("e4m3_8b_down", 4096, 12288, 1, copy_gbs);
    bench_fp8_gemm("8b_gateup", 2048, 2 * 12288, 4096);
    bench_fp8_gemm("8b_down", 2048, 4096, 12288);
    bench_fp8_gemm("8b_qkv", 2048, 6144, 4096);
}

int main(int argc, char **argv) {
    bool check = false, bench = false;
    double copy_gbs = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--small")) small = true;
        else if (!strcmp(argv[i], "--copy-gbs") && i + 1 < argc) copy_gbs = atof(argv[++i]);
        else if (!strcmp(argv[i], "check")) check = true;
        else if (!strcmp(argv[i], "bench")) bench = true;
        else { printf("usage: check_quant [--small] [--copy-gbs X] [check] [bench]\n"); return 2; }
    }
    if (!check && !bench) check = bench = true;
    int n = 0;
    cudaError_t de = cudaGetDeviceCount(&n);
    if (de != cudaSuccess || n == 0) {
        printf("no device (%s)\n", de != cudaSuccess ? cudaGetErrorString(de) : "0 devices");
        return 2;
    }
    if (check) group_check();
    if (bench) group_bench(copy_gbs);
    CK(cudaDeviceSynchronize());
    printf("RESULT quant checks: %d failed\n", failures);
    return failures ? 1 : 0;
}
