/*
 * check_kernels.cu - run on a lent GPU by tests/gpu/run.sh: every CUDA
 * kernel against a plain C++ reference (qwr_* below, f64/f32 on the host)
 * over Qwen3 head configurations, ragged lengths, page boundaries and
 * contexts 1..32K; then bandwidth/peak benchmarks. Prints "CHECK name ok|FAIL
 * err" lines and "BENCH name value unit pct" lines.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

extern "C" {
#include "sample.h"
#include "dtype.h"
}
#include "../../cuda/gemm.h"
#include "../../cuda/kernels.h"

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); exit(2); } } while (0)
static int failures = 0;
static uint64_t rs = 88172645463325252ull;
static float frand() { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (float)((rs >> 11) * 0x1.0p-53) * 2.f - 1.f; }
static void report(const char *name, double err, double tol) {
    bool ok = err <= tol && err == err;
    if (!ok) failures++;
    printf("CHECK %-44s %s rel_err %.3e (tol %.1e)\n", name, ok ? "ok  " : "FAIL", err, tol);
}
template <class T> static T *dev(size_t n) { T *p; CK(cudaMalloc(&p, n * sizeof(T) + 16)); return p; }

/* reference: attention of one query row over ctx positions (f64) */
static void qwr_attention(const std::vector<uint16_t> &q, const std::vector<uint16_t> &K, const std::vector<uint16_t> &Vc,
                          const std::vector<int32_t> &bt, int bs, int nkv, int hd, int h, int G, int npos,
                          const uint16_t *qrow, double *out) {
    int kvh = h / G;
    std::vector<double> s(npos);
    double mx = -INFINITY;
    for (int j = 0; j < npos; j++) {
        size_t base = (((size_t)bt[j / bs] * bs + j % bs) * nkv + kvh) * hd;
        double d = 0;
        for (int i = 0; i < hd; i++) d += (double)qwi_bf16_to_f32(qrow[i]) * qwi_bf16_to_f32(K[base + i]);
        s[j] = d / sqrt((double)hd);
        mx = fmax(mx, s[j]);
    }
    double l = 0;
    for (int i = 0; i < hd; i++) out[i] = 0;
    for (int j = 0; j < npos; j++) {
        double p = exp(s[j] - mx);
        l += p;
        size_t base = (((size_t)bt[j / bs] * bs + j % bs) * nkv + kvh) * hd;
        for (int i = 0; i < hd; i++) out[i] += p * qwi_bf16_to_f32(Vc[base + i]);
    }
    for (int i = 0; i < hd; i++) out[i] /= l;
}

/* One attention check: nseq sequences, each with ctx[s] positions of which
 * the last qlen[s] are this step's query rows. decode: all qlen 1. */
static void check_attention(int nh, int nkv, int hd, const std::vector<int> &ctx, const std::vector<int> &qlen,
                            bool decode, int splits, const char *tag) {
    const int bs = 16, S = (int)ctx.size(), G = nh / nkv;
    int T = 0, maxb = 1;
    for (int s = 0; s < S; s++) { T += qlen[s]; maxb = std::max(maxb, (ctx[s] + bs - 1) / bs); }
    int nblocks = 0;
    for (int s = 0; s < S; s++) nblocks += (ctx[s] + bs - 1) / bs;
    nblocks += 3;
    size_t kvn = (size_t)nblocks * bs * nkv * hd;
    std::vector<uint16_t> K(kvn), Vc(kvn), q((size_t)T * nh * hd);
    for (auto &x : K) x = qwi_f32_to_bf16(frand());
    for (auto &x : Vc) x = qwi_f32_to_bf16(frand());
    for (auto &x : q) x = qwi_f32_to_bf16(frand());
    /* block tables: a permutation, so pages are scattered */
    std::vector<int32_t> perm(nblocks);
    for (int i = 0; i < nblocks; i++) perm[i] = (i * 7919 + 3) % nblocks;
    std::vector<int32_t> hdr(8, 0), qs(S + 1), cl(S), pos(T), bt((size_t)S * maxb, 0), tiles;
    int used = 0, r = 0;
    for (int s = 0; s < S; s++) {
        qs[s] = r;
        cl[s] = ctx[s];
        for (int i = 0; i < (ctx[s] + bs - 1) / bs; i++) bt[(size_t)s * maxb + i] = perm[used++];
        for (int i = 0; i < qlen[s]; i++) pos[r + i] = ctx[s] - qlen[s] + i;
        for (int i = 0; i < qlen[s]; i += 64) { tiles.push_back(s); tiles.push_back(r + i); }
        r += qlen[s];
    }
    qs[S] = T;
    hdr[2] = maxb;
    uint16_t *dK = dev<uint16_t>(kvn), *dV = dev<uint16_t>(kvn), *dq = dev<uint16_t>(q.size()), *dout = dev<uint16_t>(q.size());
    int32_t *dh = dev<int32_t>(8), *dqs = dev<int32_t>(S + 1), *dcl = dev<int32_t>(S), *dpos = dev<int32_t>(T),
            *dbt = dev<int32_t>(bt.size()), *dt = dev<int32_t>(tiles.size());
    float *po = dev<float>((size_t)S * nh * splits * hd), *pl = dev<float>((size_t)S * nh * splits);
    CK(cudaMemcpy(dK, K.data(), kvn * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dV, Vc.data(), kvn * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dq, q.data(), q.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dh, hdr.data(), 32, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dqs, qs.data(), 4 * (S + 1), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dcl, cl.data(), 4 * S, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dpos, pos.data(), 4 * T, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dbt, bt.data(), 4 * bt.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dt, tiles.data(), 4 * tiles.size(), cudaMemcpyHostToDevice));
    CK(cudaMemset(dout, 0xff, q.size() * 2));   /* poison: NaN bf16 */
    qwk_paged pg = {dK, dV, dh, dqs, dcl, dpos, dbt, bs, nh, nkv, hd, (float)(1.0 / sqrt((double)hd))};
    if (decode) qwk_decode_attention(&pg, dq, S, splits, po, pl, dout, 0);
    else qwk_prefill_attention(&pg, dq, dt, (int)tiles.size() / 2, dout, 0);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<uint16_t> out(q.size());
    CK(cudaMemcpy(out.data(), dout, q.size() * 2, cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    std::vector<double> ref(hd);
    /* check at most ~64 rows per sequence (first, last, and spread) */
    for (int s = 0; s < S; s++) {
        std::vector<int32_t> bts(bt.begin() + (size_t)s * maxb, bt.begin() + (size_t)(s + 1) * maxb);
        int step = std::max(1, qlen[s] / 32);
        for (int i = 0; i < qlen[s]; i += (i + step < qlen[s] ? step : std::max(1, qlen[s] - 1 - i))) {
            int row = qs[s] + i;
            for (int h = 0; h < nh; h++) {
                qwr_attention(q, K, Vc, bts, bs, nkv, hd, h, G, pos[row] + 1, &q[((size_t)row * nh + h) * hd], ref.data());
                for (int d = 0; d < hd; d++) {
                    double g = qwi_bf16_to_f32(out[((size_t)row * nh + h) * hd + d]);
                    num += (g - ref[d]) * (g - ref[d]);
                    den += ref[d] * ref[d];
                }
            }
            if (i == qlen[s] - 1) break;
        }
    }
    char name[128];
    snprintf(name, sizeof name, "%s %s h%d/%d hd%d S%d", decode ? "decode" : "prefill", tag, nh, nkv, hd, S);
    report(name, sqrt(num / (den > 0 ? den : 1)), 2e-2);
    cudaFree(dK); cudaFree(dV); cudaFree(dq); cudaFree(dout); cudaFree(dh); cudaFree(dqs); cudaFree(dcl);
    cudaFree(dpos); cudaFree(dbt); cudaFree(dt); cudaFree(po); cudaFree(pl);
}

/* more rows than a grid's y dimension holds (65,535): every row written */
static void check_silu_many_rows() {
    const int R = 70001, I = 48;
    std::vector<float> gu((size_t)R * 2 * I);
    for (auto &v : gu) v = 4 * frand();
    float *dg = dev<float>(gu.size());
    uint16_t *dout = dev<uint16_t>((size_t)R * I);
    CK(cudaMemcpy(dg, gu.data(), gu.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(dout, 0xff, (size_t)R * I * 2));   /* NaN: unwritten rows fail */
    qwk_silu_mul(dg, R, I, dout, 0);
    CK(cudaGetLastError());
    std::vector<uint16_t> so((size_t)R * I);
    CK(cudaMemcpy(so.data(), dout, so.size() * 2, cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    for (size_t r = 0; r < (size_t)R; r++)
        for (int i = 0; i < I; i++) {
            double g = gu[r * 2 * I + i], u = gu[r * 2 * I + I + i];
            double ref = g / (1 + exp(-g)) * u, got = qwi_bf16_to_f32(so[r * I + i]);
            num += (got - ref) * (got - ref); den += ref * ref;
        }
    report("silu_mul 70001x48 (grid.y cap)", sqrt(num / den), 5e-3);
    cudaFree(dg); cudaFree(dout);
}

static void check_rmsnorm_silu() {
    const int R = 37, H = 4096, I = 12288;
    std::vector<float> x((size_t)R * H), dl((size_t)R * H), w(H), gu((size_t)R * 2 * I);
    for (auto &v : x) v = frand();
    for (auto &v : dl) v = frand();
    for (auto &v : w) v = 1 + 0.1f * frand();
    for (auto &v : gu) v = 4 * frand();
    float *dx = dev<float>(x.size()), *dd = dev<float>(dl.size()), *dw = dev<float>(H), *dg = dev<float>(gu.size());
    uint16_t *dout = dev<uint16_t>((size_t)R * I);
    CK(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dd, dl.data(), dl.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dw, w.data(), H * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dg, gu.data(), gu.size() * 4, cudaMemcpyHostToDevice));
    qwk_add_rmsnorm(dx, dd, NULL, dw, R, H, 1e-6f, dout, 0);
    std::vector<uint16_t> o((size_t)R * H);
    CK(cudaMemcpy(o.data(), dout, o.size() * 2, cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    for (int r = 0; r < R; r++) {
        double ss = 0;
        for (int i = 0; i < H; i++) { double v = (double)x[(size_t)r * H + i] + dl[(size_t)r * H + i]; ss += v * v; }
        double rs_ = 1 / sqrt(ss / H + 1e-6);
        for (int i = 0; i < H; i++) {
            double ref = ((double)x[(size_t)r * H + i] + dl[(size_t)r * H + i]) * rs_ * w[i];
            double g = qwi_bf16_to_f32(o[(size_t)r * H + i]);
            num += (g - ref) * (g - ref); den += ref * ref;
        }
    }
    report("add_rmsnorm 37x4096", sqrt(num / den), 5e-3);
    qwk_silu_mul(dg, R, I, dout, 0);
    std::vector<uint16_t> so((size_t)R * I);
    CK(cudaMemcpy(so.data(), dout, so.size() * 2, cudaMemcpyDeviceToHost));
    num = den = 0;
    for (int r = 0; r < R; r++)
        for (int i = 0; i < I; i++) {
            double g = gu[(size_t)r * 2 * I + i], u = gu[(size_t)r * 2 * I + I + i];
            double ref = g / (1 + exp(-g)) * u, got = qwi_bf16_to_f32(so[(size_t)r * I + i]);
            num += (got - ref) * (got - ref); den += ref * ref;
        }
    report("silu_mul 37x12288", sqrt(num / den), 5e-3);
    /* bandwidth of add_rmsnorm at 4096 rows */
    cudaFree(dx); cudaFree(dd); cudaFree(dw); cudaFree(dg); cudaFree(dout);
}

static void check_sampler() {
    const int V = 151936, R = 48;
    std::vector<float> lg((size_t)R * V);
    for (auto &v : lg) v = 6 * frand();
    for (int r = 0; r < R; r++) lg[(size_t)r * V + (r * 131) % V] = 9.0f;   /* ties with greedy max */
    for (int r = 0; r < R; r++) lg[(size_t)r * V + (r * 131 + 7) % V] = 9.0f;
    std::vector<int32_t> ds(R, 1), tk(R), bst(R + 1), ban;
    std::vector<float> tp(R), topp(R), minp(R);
    std::vector<int64_t> pos(R);
    std::vector<uint64_t> seed(R);
    for (int r = 0; r < R; r++) {
        int kind = r % 8;
        tp[r] = kind == 0 ? 0.f : (kind == 7 ? 1e-3f : 0.3f + 0.1f * (r % 9));
        tk[r] = kind == 2 || kind == 5 ? 1 + (r * 37) % 200 : 0;
        topp[r] = kind == 3 || kind == 5 ? 0.5f + 0.05f * (r % 9) : 1.f;
        minp[r] = kind == 4 || kind == 5 ? 0.01f * (1 + r % 20) : 0.f;
        seed[r] = 1000003ull * r + 17;
        pos[r] = 5 + r * 11;
        bst[r] = (int)ban.size();
        if (kind == 6) { ban.push_back((r * 131) % V); ban.push_back(3); }
    }
    bst[R] = (int)ban.size();
    if (ban.empty()) ban.push_back(0);
    float *dl = dev<float>(lg.size());
    int32_t *dds = dev<int32_t>(R), *dtk = dev<int32_t>(R), *dbs = dev<int32_t>(R + 1), *dbn = dev<int32_t>(ban.size()), *dout = dev<int32_t>(R);
    float *dtp = dev<float>(R), *dtopp = dev<float>(R), *dminp = dev<float>(R);
    int64_t *dpos = dev<int64_t>(R);
    uint64_t *dseed = dev<uint64_t>(R);
    double *scr = dev<double>((size_t)R * V), *du = dev<double>(R);
    CK(cudaMemcpy(dl, lg.data(), lg.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dds, ds.data(), 4 * R, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dtk, tk.data(), 4 * R, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dbs, bst.data(), 4 * (R + 1), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dbn, ban.data(), 4 * ban.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dtp, tp.data(), 4 * R, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dtopp, topp.data(), 4 * R, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dminp, minp.data(), 4 * R, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dpos, pos.data(), 8 * R, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dseed, seed.data(), 8 * R, cudaMemcpyHostToDevice));
    qwk_rng_uniform(dseed, dpos, R, du, 0);
    std::vector<double> u(R);
    CK(cudaMemcpy(u.data(), du, 8 * R, cudaMemcpyDeviceToHost));
    int rng_bad = 0;
    for (int r = 0; r < R; r++) rng_bad += u[r] != qwi_rng_uniform(seed[r], pos[r]);
    report("philox uniform == lib/sample.c", rng_bad, 0);
    qwk_sample_args a = {dl, V, dds, dtk, dbs, dbn, dtp, dtopp, dminp, dpos, dseed, scr, dout};
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0); cudaEventCreate(&e1);
    cudaEventRecord(e0);
    qwk_sample(&a, R, 0);
    cudaEventRecord(e1);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    std::vector<int32_t> out(R);
    CK(cudaMemcpy(out.data(), dout, 4 * R, cudaMemcpyDeviceToHost));
    qwi_sample_scratch *sc = qwi_sample_scratch_create(V);
    int bad = 0;
    for (int r = 0; r < R; r++) {
        qwi_sampling p = {tp[r], tk[r], topp[r], minp[r], seed[r], bst[r + 1] > bst[r] ? &ban[bst[r]] : NULL, bst[r + 1] - bst[r]};
        int32_t want = qwi_sample(&lg[(size_t)r * V], V, &p, pos[r], sc);
        if (want != out[r]) { bad++; printf("  sampler row %d (T %g k %d p %g minp %g): cuda %d cpu %d\n", r, tp[r], tk[r], topp[r], minp[r], out[r], want); }
    }
    qwi_sample_scratch_free(sc);
    report("sampler == qwi_sample (48 rows, vocab 151936)", bad, 0);
    printf("BENCH sampler_48rows_ms %.3f ms -\n", ms);
}

static double bench_copy_gbs() {
    size_t n = 2ull << 30;
    void *a = dev<char>(n), *b = dev<char>(n);
    CK(cudaMemset(a, 1, n));
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    for (int i = 0; i < 3; i++) cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e0);
    for (int i = 0; i < 10; i++) cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1); CK(cudaEventSynchronize(e1));
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    cudaFree(a); cudaFree(b);
    return 2.0 * n * 10 / (ms * 1e-3) / 1e9;
}

static double bench_gemm_tflops(int M, int N, int K) {
    void *ws = dev<char>(QWK_GEMM_WORKSPACE);
    qwk_gemm *g;
    if (qwk_gemm_create(ws, &g)) { printf("gemm create failed\n"); failures++; return 0; }
    std::vector<uint16_t> hx((size_t)M * K), hw((size_t)N * K);
    for (auto &v : hx) v = qwi_f32_to_bf16(frand());
    for (auto &v : hw) v = qwi_f32_to_bf16(frand());
    uint16_t *x = dev<uint16_t>(hx.size()), *w = dev<uint16_t>(hw.size());
    uint16_t *y = dev<uint16_t>((size_t)M * N);
    CK(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w, hw.data(), hw.size() * 2, cudaMemcpyHostToDevice));
    for (int i = 0; i < 3; i++) qwk_gemm_run(g, 0, x, w, y, 0, M, N, K);
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    cudaEventRecord(e0);
    for (int i = 0; i < 10; i++) qwk_gemm_run(g, 0, x, w, y, 0, M, N, K);
    cudaEventRecord(e1); CK(cudaEventSynchronize(e1));
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    qwk_gemm_destroy(g);
    cudaFree(ws); cudaFree(x); cudaFree(w); cudaFree(y);
    return 2.0 * M * N * K * 10 / (ms * 1e-3) / 1e12;
}

int main(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) { printf("no device\n"); return 2; }
    /* what the backend does at create: the prefill kernel's shared memory */
    for (int hd : {16, 32, 64, 128}) {
        cudaError_t e = qwk_attention_init(hd);
        if (e != cudaSuccess) { printf("CHECK attention_init hd %d FAIL %s\n", hd, cudaGetErrorString(e)); failures++; }
    }
    const int cfgs[4][2] = {{16, 8}, {32, 8}, {40, 8}, {64, 8}};
    for (auto &c : cfgs) {
        check_attention(c[0], c[1], 128, {1, 15, 16, 17, 300, 2048}, {1, 1, 1, 1, 1, 1}, true, 1, "ragged");
        check_attention(c[0], c[1], 128, {33, 4097}, {1, 1}, true, 7, "split7");
        check_attention(c[0], c[1], 128, {70, 16, 200, 5}, {70, 3, 64, 1}, false, 1, "mixed/chunked");
    }
    check_attention(4, 2, 16, {1, 17, 40}, {1, 1, 1}, true, 2, "tiny");
    check_attention(4, 2, 16, {40, 9}, {40, 9}, false, 1, "tiny");
    check_attention(32, 8, 128, {32768}, {1}, true, 16, "ctx32K");
    check_attention(32, 8, 128, {32768}, {64}, false, 1, "ctx32K-chunk");
    check_rmsnorm_silu();
    check_silu_many_rows();
    check_sampler();
    double copy = bench_copy_gbs();
    printf("BENCH copy_d2d %.0f GB/s 100%%\n", copy);
    double peak = bench_gemm_tflops(8192, 8192, 8192);
    printf("BENCH gemm_bf16_8192 %.0f TFLOP/s -\n", peak);
    double pf = bench_gemm_tflops(2048, 12288 * 2, 4096);
    printf("BENCH gemm_prefill_8b_gateup %.0f TFLOP/s %.0f%%\n", pf, 100 * pf / peak);
    printf("RESULT kernel checks: %d failed\n", failures);
    return failures ? 1 : 0;
}
