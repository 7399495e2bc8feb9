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
 * bf16(w) bit for bit, including all 254 finite e4m3 codes. bench: GB/s of
 * the GEMV (codes + scales + zeros + activations read once) and of the
 * dequantization, as a share of --copy-gbs (check_kernels' copy_d2d).
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
    double num = 0, den = 0;
    for (int m = 0; m < M; m++)
        for (int r = 0; r < n; r++) {
            double ref = 0;
            for (int c = 0; c < k; c++) ref += (double)qwi_bf16_to_f32(hx[(size_t)m * k + c]) * w[(size_t)r * k + c];
            double d = hy[(size_t)m * n + r] - ref;
            num += d * d;
            den += ref * ref;
        }
    int touched = 0;
    for (int r = 0; r < n; r++) {
        uint32_t u;
        memcpy(&u, &hy[(size_t)M * n + r], 4);
        touched += u != 0xffffffffu;
    }
    char name[96];
    snprintf(name, sizeof name, "qgemv %s M%d %dx%d g%d", fmt_name(fmt), M, n, k, gk);
    report(name, touched ? 1.0 : sqrt(num / (den > 0 ? den : 1)), 1e-5);
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
    check_dequant(QWK_Q_U4, 96, 256, 128);
    check_dequant(QWK_Q_U4, 21, 90, 10);
    check_dequant(QWK_Q_U8, 17, 50, 2);
    check_dequant(QWK_Q_E4M3, 70, 300, 128);
    check_dequant(QWK_Q_E4M3, 4, 256, 128, true);
    if (small) return;
    check_gemv(QWK_Q_U4, 3072, 4096, 128, 1);   /* real sizes: many blocks, long rows */
    check_gemv(QWK_Q_E4M3, 1536, 4096, 128, 8);
    check_dequant(QWK_Q_U4, 3072, 4096, 128);
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

static void group_bench(double copy_gbs) {
    bench_one("u4_8b_gateup", QWK_Q_U4, 2 * 12288, 4096, 1, copy_gbs);
    bench_one("u4_8b_gateup", QWK_Q_U4, 2 * 12288, 4096, 8, copy_gbs);
    bench_one("u4_8b_down", QWK_Q_U4, 4096, 12288, 1, copy_gbs);
    bench_one("u4_8b_qkv", QWK_Q_U4, 6144, 4096, 1, copy_gbs);
    bench_one("u8_8b_gateup", QWK_Q_U8, 2 * 12288, 4096, 1, copy_gbs);
    bench_one("e4m3_8b_gateup", QWK_Q_E4M3, 2 * 12288, 4096, 1, copy_gbs);
    bench_one("e4m3_8b_gateup", QWK_Q_E4M3, 2 * 12288, 4096, 8, copy_gbs);
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
