/*
 * check_kernels.cu - run on a lent GPU by tests/gpu/run.sh: every CUDA
 * kernel against a plain C++ reference (qwr_* below, f64/f32 on the host)
 * over Qwen3 head configurations, ragged lengths, page boundaries and
 * contexts 1..32K; then bandwidth/peak benchmarks. Prints "CHECK name ok|FAIL
 * err" lines and "BENCH name value unit pct" lines. Checks come in groups
 * (check_kernels list), each run by run.sh in its own process so a CUDA fault
 * in one does not hide the others; --small shrinks the shapes for the
 * compute-sanitizer pass. A CUDA API error prints "CUDA error <string>" and
 * exits 2.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>

extern "C" {
#include "sample.h"
#include "dtype.h"
#include "fp8.h"
}
#include "../../cuda/cuda_host.h"
#include "../../cuda/decode_splits.h"
#include "../../cuda/gemm.h"
#include "../../cuda/kernels.h"
#include "../../cuda/kv_e4m3.h"
#include "../../cuda/logprobs_cuda.h"
#include "../../cuda/penalties_cuda.h"
extern "C" void qwi_logprobs_row(const float *logits, int32_t vocab, int32_t target, int32_t k, qw_logprob *out);

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); exit(2); } } while (0)
static int failures = 0;
static bool small = false;   /* --small: shapes cheap enough for compute-sanitizer */
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

/* Which kernels a check runs: the prefill kernel over every sequence's rows
 * (one-row sequences too: it must handle them); the decode kernel alone
 * (every qlen 1); or both as the backend runs a step - prefill tiles for
 * the prompt chunks, the decode kernel for the decode rows (decode_seq) -
 * where each decode row is also run alone and must give the same bits
 * (batched == alone: its splits follow its context, not the batch), and
 * each one-row prompt chunk (a sequence named in prompt1) must give the
 * bits of its row in the whole prompt prefilled as one chunk (chunked ==
 * unchunked, cached == cold). */
enum att_mode { ATT_PREFILL, ATT_DECODE, ATT_STEP };

/* A one-row prompt chunk (its q row at qrow of q, context ctx, block-table
 * row bt) against the same row in the whole prompt prefilled as one chunk
 * of ctx rows on the same cache (the other rows' q random): the number of
 * output elements of that row whose bits differ from out's. */
static long prompt_row_vs_whole(const qwk_paged &pg, const std::vector<uint16_t> &q, int qrow, int ctx,
                                const int32_t *bt, int maxb, const std::vector<uint16_t> &out) {
    const size_t w = (size_t)pg.nh * pg.hd;
    std::vector<uint16_t> qf((size_t)ctx * w), got(w);
    for (auto &x : qf) x = qwi_f32_to_bf16(frand());
    memcpy(&qf[(size_t)(ctx - 1) * w], &q[(size_t)qrow * w], w * 2);
    std::vector<int32_t> qs = {0, ctx}, cl = {ctx}, pos(ctx), tiles;
    for (int i = 0; i < ctx; i++) pos[i] = i;
    for (int i = 0; i < ctx; i += 64) { tiles.push_back(0); tiles.push_back(i); }
    int32_t *dqs = dev<int32_t>(2), *dcl = dev<int32_t>(1), *dpos = dev<int32_t>(ctx), *dbt = dev<int32_t>(maxb),
            *dt = dev<int32_t>(tiles.size());
    uint16_t *dq = dev<uint16_t>(qf.size()), *dout = dev<uint16_t>(qf.size());
    CK(cudaMemcpy(dqs, qs.data(), 8, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dcl, cl.data(), 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dpos, pos.data(), 4 * (size_t)ctx, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dbt, bt, 4 * (size_t)maxb, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dt, tiles.data(), 4 * tiles.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dq, qf.data(), qf.size() * 2, cudaMemcpyHostToDevice));
    qwk_paged p = pg;
    p.query_start = dqs;
    p.context_lens = dcl;
    p.positions = dpos;
    p.block_tables = dbt;
    p.decode_seq = NULL;
    qwk_prefill_attention(&p, dq, dt, (int)tiles.size() / 2, dout, 0);
    CK(cudaGetLastError());
    CK(cudaMemcpy(got.data(), dout + (size_t)(ctx - 1) * w, w * 2, cudaMemcpyDeviceToHost));
    long diff = 0;
    for (size_t i = 0; i < w; i++) diff += got[i] != out[(size_t)qrow * w + i];
    cudaFree(dqs); cudaFree(dcl); cudaFree(dpos); cudaFree(dbt); cudaFree(dt); cudaFree(dq); cudaFree(dout);
    return diff;
}

/* One attention check: nseq sequences, each with ctx[s] positions of which
 * the last qlen[s] are this step's query rows. A decode sequence splits by
 * its context (decode_splits.h): 1 up to 256 positions, 2 up to 512, ...,
 * 16 from 3841. fp8: the cache holds e4m3 codes (k_scale 2^-6, v_scale
 * 2^-5: every K/V value then dequantizes exactly to bf16), and the
 * reference runs on the dequantized cache - a kernel that dropped or doubled
 * a scale, or read the bytes as another format, is off by far more than
 * the tolerance. The output starts as NaN, so a row no kernel wrote fails. */
static void check_attention(int nh, int nkv, int hd, const std::vector<int> &ctx, const std::vector<int> &qlen,
                            att_mode mode, const char *tag, bool fp8 = false, const std::vector<int> &prompt1 = {}) {
    const float ks = 0x1p-6f, vs = 0x1p-5f;
    const int bs = 16, S = (int)ctx.size(), G = nh / nkv;
    int T = 0, maxb = 1;
    for (int s = 0; s < S; s++) { T += qlen[s]; maxb = std::max(maxb, (ctx[s] + bs - 1) / bs); }
    int nblocks = 0;
    for (int s = 0; s < S; s++) nblocks += (ctx[s] + bs - 1) / bs;
    nblocks += 3;
    size_t kvn = (size_t)nblocks * bs * nkv * hd;
    std::vector<uint16_t> K(kvn), Vc(kvn), q((size_t)T * nh * hd);
    std::vector<uint8_t> K8(fp8 ? kvn : 0), V8(fp8 ? kvn : 0);
    if (fp8) {
        for (size_t i = 0; i < kvn; i++) {
            K8[i] = qwi_f32_to_e4m3(frand() / ks);
            V8[i] = qwi_f32_to_e4m3(frand() / vs);
            K[i] = qwi_f32_to_bf16(qwi_e4m3_to_f32(K8[i]) * ks);   /* exact */
            Vc[i] = qwi_f32_to_bf16(qwi_e4m3_to_f32(V8[i]) * vs);
        }
    } else {
        for (auto &x : K) x = qwi_f32_to_bf16(frand());
        for (auto &x : Vc) x = qwi_f32_to_bf16(frand());
    }
    for (auto &x : q) x = qwi_f32_to_bf16(frand());
    /* block tables: a permutation, so pages are scattered */
    std::vector<int32_t> perm(nblocks);
    for (int i = 0; i < nblocks; i++) perm[i] = (i * 7919 + 3) % nblocks;
    std::vector<int32_t> hdr(8, 0), qs(S + 1), cl(S), pos(T), bt((size_t)S * maxb, 0), tiles, dec(S);
    int used = 0, r = 0;
    for (int s = 0; s < S; s++) {
        qs[s] = r;
        cl[s] = ctx[s];
        for (int i = 0; i < (ctx[s] + bs - 1) / bs; i++) bt[(size_t)s * maxb + i] = perm[used++];
        for (int i = 0; i < qlen[s]; i++) pos[r + i] = ctx[s] - qlen[s] + i;
        dec[s] = qlen[s] == 1 && std::find(prompt1.begin(), prompt1.end(), s) == prompt1.end();
        if (mode == ATT_PREFILL || !dec[s])
            for (int i = 0; i < qlen[s]; i += 64) { tiles.push_back(s); tiles.push_back(r + i); }
        r += qlen[s];
    }
    qs[S] = T;
    hdr[2] = maxb;
    const int32_t MS = QWI_CUDA_DECODE_MAX_SPLITS;
    uint16_t *dK = dev<uint16_t>(kvn), *dV = dev<uint16_t>(kvn), *dq = dev<uint16_t>(q.size()), *dout = dev<uint16_t>(q.size());
    int32_t *dh = dev<int32_t>(8), *dqs = dev<int32_t>(S + 1), *dcl = dev<int32_t>(S), *dpos = dev<int32_t>(T),
            *dbt = dev<int32_t>(bt.size()), *dt = dev<int32_t>(tiles.size()), *ddec = dev<int32_t>(S);
    float *po = dev<float>((size_t)S * nh * MS * hd), *pl = dev<float>((size_t)S * nh * MS);
    if (fp8) {   /* the codes, packed at one byte an element, in the same buffers */
        CK(cudaMemcpy(dK, K8.data(), kvn, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dV, V8.data(), kvn, cudaMemcpyHostToDevice));
    } else {
        CK(cudaMemcpy(dK, K.data(), kvn * 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dV, Vc.data(), kvn * 2, cudaMemcpyHostToDevice));
    }
    CK(cudaMemcpy(dq, q.data(), q.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dh, hdr.data(), 32, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dqs, qs.data(), 4 * (S + 1), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dcl, cl.data(), 4 * S, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dpos, pos.data(), 4 * T, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dbt, bt.data(), 4 * bt.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(ddec, dec.data(), 4 * S, cudaMemcpyHostToDevice));
    if (!tiles.empty()) CK(cudaMemcpy(dt, tiles.data(), 4 * tiles.size(), cudaMemcpyHostToDevice));
    CK(cudaMemset(dout, 0xff, q.size() * 2));   /* poison: NaN bf16 */
    qwk_paged pg = {dK, dV, dh, dqs, dcl, dpos, dbt, bs, nh, nkv, hd, (float)(1.0 / sqrt((double)hd))};
    if (fp8) {
        pg.kv_fp8 = 1;
        pg.k_scale = ks;
        pg.v_scale = vs;
    }
    if (mode == ATT_STEP) pg.decode_seq = ddec;
    if (mode != ATT_DECODE) qwk_prefill_attention(&pg, dq, dt, (int)tiles.size() / 2, dout, 0);
    if (mode != ATT_PREFILL) qwk_decode_attention(&pg, dq, S, QWI_CUDA_DECODE_MAX_SPLITS, po, pl, dout, 0);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<uint16_t> out(q.size());
    CK(cudaMemcpy(out.data(), dout, q.size() * 2, cudaMemcpyDeviceToHost));
    /* batched == alone: each one-row sequence again as a step of its own
     * (its block-table row, its q row), output compared bit for bit - and,
     * for a sequence that splits, its f32 partials and log-sum-exps too
     * (kernels.h's layout): a split that moved with the batch changes
     * those in every element, where the bf16 output only shows the few
     * elements whose rounding it happens to flip */
    long alone_diff = -1;
    if (mode == ATT_STEP) {
        alone_diff = 0;
        const size_t per_seq = (size_t)nh * MS;
        std::vector<float> bpo((size_t)S * per_seq * hd), bpl((size_t)S * per_seq), apo(per_seq * hd), apl(per_seq);
        CK(cudaMemcpy(bpo.data(), po, bpo.size() * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(bpl.data(), pl, bpl.size() * 4, cudaMemcpyDeviceToHost));
        int32_t *qs1 = dev<int32_t>(2), *cl1 = dev<int32_t>(1), *bt1 = dev<int32_t>(maxb);
        uint16_t *q1 = dev<uint16_t>((size_t)nh * hd), *o1 = dev<uint16_t>((size_t)nh * hd);
        const int32_t qs1h[2] = {0, 1};
        std::vector<uint16_t> got((size_t)nh * hd);
        CK(cudaMemcpy(qs1, qs1h, 8, cudaMemcpyHostToDevice));
        for (int s = 0; s < S; s++) {
            if (qlen[s] == 1 && !dec[s]) alone_diff += prompt_row_vs_whole(pg, q, qs[s], ctx[s], &bt[(size_t)s * maxb], maxb, out);
            if (!dec[s]) continue;
            CK(cudaMemcpy(cl1, &cl[s], 4, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(bt1, &bt[(size_t)s * maxb], 4 * (size_t)maxb, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(q1, &q[(size_t)qs[s] * nh * hd], (size_t)nh * hd * 2, cudaMemcpyHostToDevice));
            qwk_paged p1 = pg;
            p1.query_start = qs1;
            p1.context_lens = cl1;
            p1.block_tables = bt1;
            p1.decode_seq = NULL;   /* alone: its one row is the decode row */
            /* alone with the grid its own context needs (the batch used the
             * most): the grid's split dimension must not change the bits */
            qwk_decode_attention(&p1, q1, 1, qwi_cuda_decode_splits(ctx[s]), po, pl, o1, 0);
            CK(cudaGetLastError());
            CK(cudaMemcpy(got.data(), o1, got.size() * 2, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < got.size(); i++) alone_diff += got[i] != out[(size_t)qs[s] * nh * hd + i];
            const int ns = qwi_cuda_decode_splits(ctx[s]);
            if (ns == 1) continue;
            CK(cudaMemcpy(apo.data(), po, apo.size() * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(apl.data(), pl, apl.size() * 4, cudaMemcpyDeviceToHost));
            for (int h = 0; h < nh; h++)
                for (int k = 0; k < ns; k++) {
                    const size_t a = (size_t)h * MS + k, b = (size_t)s * per_seq + a;
                    alone_diff += memcmp(&apl[a], &bpl[b], 4) != 0;
                    alone_diff += memcmp(&apo[a * hd], &bpo[b * hd], 4 * (size_t)hd) != 0;
                }
        }
        cudaFree(qs1); cudaFree(cl1); cudaFree(bt1); cudaFree(q1); cudaFree(o1);
    }
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
    static const char *const mode_name[] = {"prefill", "decode", "step"};
    snprintf(name, sizeof name, "%s%s %s h%d/%d hd%d S%d", mode_name[mode], fp8 ? " fp8kv" : "", tag, nh, nkv, hd, S);
    report(name, sqrt(num / (den > 0 ? den : 1)), 2e-2);
    if (alone_diff >= 0) {   /* the count of differing elements, which must be 0 */
        snprintf(name, sizeof name, "step%s %s h%d/%d S%d: alone==batched", fp8 ? " fp8kv" : "", tag, nh, nkv, S);
        report(name, (double)alone_diff, 0);
    }
    cudaFree(dK); cudaFree(dV); cudaFree(dq); cudaFree(dout); cudaFree(dh); cudaFree(dqs); cudaFree(dcl);
    cudaFree(dpos); cudaFree(dbt); cudaFree(dt); cudaFree(po); cudaFree(pl); cudaFree(ddec);
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
    for (void *p : {(void *)dl, (void *)dds, (void *)dtk, (void *)dbs, (void *)dbn, (void *)dout, (void *)dtp,
                    (void *)dtopp, (void *)dminp, (void *)dpos, (void *)dseed, (void *)scr, (void *)du})
        cudaFree(p);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}

/* cuda/logprobs.cu == qwi_logprobs_row (lib/logprobs.c): same ids in the
 * same order (ties included), logprobs within 1e-5 (both sum in double). */
static void check_logprobs() {
    const int V = 151936, R = 48, S = QW_MAX_LOGPROBS + 1;
    std::vector<float> lg((size_t)R * V);
    for (auto &v : lg) v = 12 * frand();
    for (int r = 0; r < R; r++)   /* ties at the top: lower id first */
        for (int t = 0; t < 3; t++) lg[(size_t)r * V + (r * 977 + t * 50000) % V] = 14.0f;
    std::vector<int32_t> k(R), tg(R);
    for (int r = 0; r < R; r++) { k[r] = r % 3 == 2 ? -1 : r % (QW_MAX_LOGPROBS + 1); tg[r] = (r * 7919) % V; }
    float *dl = dev<float>(lg.size());
    CK(cudaMemcpy(dl, lg.data(), lg.size() * 4, cudaMemcpyHostToDevice));
    std::vector<qw_logprob> got((size_t)R * S), want(S);
    std::vector<qw_logprob *> dst(R);
    for (int r = 0; r < R; r++) dst[r] = &got[(size_t)r * S];
    qwk_logprobs *ctx = NULL;
    CK(qwk_logprobs_reduce(&ctx, R, dl, V, R, k.data(), NULL, tg.data(), dst.data(), 0));
    int bad = 0;
    double err = 0;
    for (int r = 0; r < R; r++) {
        if (k[r] < 0) continue;
        qwi_logprobs_row(&lg[(size_t)r * V], V, tg[r], k[r], want.data());
        for (int j = 0; j <= k[r]; j++) {
            bad += got[(size_t)r * S + j].token != want[j].token;
            err = fmax(err, fabs((double)got[(size_t)r * S + j].logprob - want[j].logprob));
        }
    }
    qwk_logprobs_free(ctx);
    cudaFree(dl);
    report("logprobs ids == qwi_logprobs_row (48 rows, vocab 151936)", bad, 0);
    report("logprobs values vs qwi_logprobs_row", err, 1e-5);
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

/* ---- penalties and logit bias on device == qwi_penalties_pack_apply (exact:
 * the kernel rounds each step as the host does), and the restore gives the
 * raw logits back bit for bit ------------------------------------------------ */
static void check_penalties() {
    const int V = small ? 4096 : 151936, S = 6;
    std::vector<float> lg((size_t)S * V);
    for (auto &v : lg) v = 8 * frand();
    std::vector<qwi_sampling> sp(S);
    std::vector<uint8_t> ds(S, 1);
    std::vector<int32_t> row_seq(S), prompt(300), output(120), bias_ids = {3, 77, 1000 % V, V - 1};
    std::vector<float> bias = {5.f, -100.f, 0.25f, 1.5f};
    for (auto &t : prompt) t = (int32_t)((frand() * 0.5f + 0.5f) * (V - 1));
    for (auto &t : output) t = (int32_t)((frand() * 0.5f + 0.5f) * 400);   /* repeats */
    memset(sp.data(), 0, sizeof(qwi_sampling) * S);
    for (int r = 0; r < S; r++) {
        row_seq[r] = r;
        sp[r].temperature = 1.f;
        sp[r].top_p = 1.f;
        sp[r].prompt_tokens = prompt.data();
        sp[r].num_prompt_tokens = (int32_t)prompt.size();
        sp[r].output_tokens = output.data();
        sp[r].num_output_tokens = (int32_t)output.size();
        if (r % 3 == 0) sp[r].repetition_penalty = 1.3f;
        if (r % 2 == 0) sp[r].frequency_penalty = 0.7f;
        if (r >= 3) sp[r].presence_penalty = -0.4f;
        if (r == 1 || r == 4) { sp[r].bias_ids = bias_ids.data(); sp[r].bias = bias.data(); sp[r].num_bias = 4; }
    }
    ds[5] = 0;   /* a row that does not sample is left alone */
    qwi_plan p;
    memset(&p, 0, sizeof p);
    p.num_seqs = S;
    p.do_sample = ds.data();
    p.sampling = sp.data();
    float *dl = dev<float>(lg.size());
    CK(cudaMemcpy(dl, lg.data(), lg.size() * 4, cudaMemcpyHostToDevice));
    qwi_cuda_penalties cp;
    memset(&cp, 0, sizeof cp);
    qw_status st = qwi_cuda_penalties_apply(&cp, &p, row_seq.data(), S, dl, V, 0);
    CK(cudaDeviceSynchronize());
    std::vector<float> got(lg.size()), want = lg;
    CK(cudaMemcpy(got.data(), dl, got.size() * 4, cudaMemcpyDeviceToHost));
    qwi_penalty_pack pk;
    memset(&pk, 0, sizeof pk);
    if (st == QW_OK) st = qwi_penalties_pack(&pk, sp.data(), ds.data(), row_seq.data(), S, V);
    if (st == QW_OK) qwi_penalties_pack_apply(&pk, want.data(), V);
    int bad = st != QW_OK, changed = 0;
    for (size_t i = 0; i < lg.size(); i++) {
        bad += memcmp(&got[i], &want[i], 4) != 0;
        changed += got[i] != lg[i];
    }
    if (!changed) bad++;   /* the check must see the penalties act */
    report("penalties+bias on device == host reference (exact)", bad, 0);
    qw_status rs = qwi_cuda_penalties_restore(&cp, dl, V, 0);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(got.data(), dl, got.size() * 4, cudaMemcpyDeviceToHost));
    report("penalties restore gives the raw logits (exact)",
           rs != QW_OK || memcmp(got.data(), lg.data(), lg.size() * 4) != 0, 0);
    qwi_penalties_pack_free(&pk);
    qwi_cuda_penalties_free(&cp);
    cudaFree(dl);
}

/* ---- q/k norm + RoPE + K/V page write ------------------------------------ */
static void check_rope_kv(int nh, int nkv, int hd, int rows, bool bias, bool norm, const char *tag) {
    const int heads = nh + 2 * nkv, width = heads * hd, half = hd / 2, nslots = rows * 2 + 5;
    std::vector<float> qkv((size_t)rows * width), b(width), qn(hd), kn(hd);
    for (auto &v : qkv) v = 3 * frand();
    for (auto &v : b) v = 0.5f * frand();
    for (auto &v : qn) v = 1 + 0.2f * frand();
    for (auto &v : kn) v = 1 + 0.2f * frand();
    std::vector<double> inv(half);
    for (int i = 0; i < half; i++) inv[i] = pow(1e6, -2.0 * i / hd);
    std::vector<int32_t> pos(rows), slot(rows);
    for (int r = 0; r < rows; r++) {
        pos[r] = (int32_t)((r * 7919u + 13) % 40000);
        slot[r] = r % 5 == 4 ? -1 : (int32_t)((r * 37 + 11) % nslots);   /* -1: no KV write */
    }
    /* distinct slots: drop duplicates to -1 (the engine never maps two rows to one slot) */
    std::vector<int> seen(nslots, 0);
    for (int r = 0; r < rows; r++) if (slot[r] >= 0 && seen[slot[r]]++) slot[r] = -1;
    float *dqkv = dev<float>(qkv.size()), *db = dev<float>(width), *dqn = dev<float>(hd), *dkn = dev<float>(hd);
    double *dinv = dev<double>(half);
    int32_t *dpos = dev<int32_t>(rows), *dslot = dev<int32_t>(rows);
    uint16_t *dq = dev<uint16_t>((size_t)rows * nh * hd), *dk = dev<uint16_t>((size_t)nslots * nkv * hd),
             *dv = dev<uint16_t>((size_t)nslots * nkv * hd);
    CK(cudaMemcpy(dqkv, qkv.data(), qkv.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, b.data(), width * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dqn, qn.data(), hd * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dkn, kn.data(), hd * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dinv, inv.data(), half * 8, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dpos, pos.data(), rows * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dslot, slot.data(), rows * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(dk, 0xff, (size_t)nslots * nkv * hd * 2));   /* NaN: what stays unwritten */
    CK(cudaMemset(dv, 0xff, (size_t)nslots * nkv * hd * 2));
    qwk_qk_norm_rope_kv(dqkv, bias ? db : NULL, norm ? dqn : NULL, norm ? dkn : NULL, dinv, dpos, dslot, rows, nh,
                        nkv, hd, 1e-6f, dq, dk, dv, 0);
    CK(cudaGetLastError());
    std::vector<uint16_t> q((size_t)rows * nh * hd), k((size_t)nslots * nkv * hd), v(k.size());
    CK(cudaMemcpy(q.data(), dq, q.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(k.data(), dk, k.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(v.data(), dv, v.size() * 2, cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    int misplaced = 0;
    std::vector<double> x(hd), y(hd);
    for (int r = 0; r < rows; r++)
        for (int h = 0; h < heads; h++) {
            bool is_q = h < nh, is_k = !is_q && h < nh + nkv;
            for (int i = 0; i < hd; i++) x[i] = qkv[(size_t)r * width + h * hd + i] + (bias ? b[h * hd + i] : 0.f);
            if ((is_q || is_k) && norm) {
                double ss = 0;
                for (int i = 0; i < hd; i++) ss += x[i] * x[i];
                double rs_ = 1 / sqrt(ss / hd + 1e-6);
                for (int i = 0; i < hd; i++) x[i] = x[i] * rs_ * (is_q ? qn[i] : kn[i]);
            }
            y = x;
            if (is_q || is_k)
                for (int i = 0; i < half; i++) {
                    double c = cos(pos[r] * inv[i]), sn = sin(pos[r] * inv[i]);
                    y[i] = x[i] * c - x[i + half] * sn;
                    y[i + half] = x[i + half] * c + x[i] * sn;
                }
            const uint16_t *got;
            if (is_q) got = &q[((size_t)r * nh + h) * hd];
            else if (slot[r] < 0) continue;
            else got = &(is_k ? k : v)[((size_t)slot[r] * nkv + (is_k ? h - nh : h - nh - nkv)) * hd];
            for (int i = 0; i < hd; i++) {
                double g = qwi_bf16_to_f32(got[i]);
                num += (g - y[i]) * (g - y[i]);
                den += y[i] * y[i];
            }
        }
    /* slots no row maps to must be untouched */
    for (int sl = 0; sl < nslots; sl++)
        if (!seen[sl])
            for (int i = 0; i < nkv * hd; i++)
                misplaced += k[(size_t)sl * nkv * hd + i] != 0xffff || v[(size_t)sl * nkv * hd + i] != 0xffff;
    char name[128];
    snprintf(name, sizeof name, "qk_norm_rope_kv %s h%d/%d hd%d rows%d", tag, nh, nkv, hd, rows);
    report(name, misplaced ? 1.0 : sqrt(num / den), 8e-3);
    cudaFree(dqkv); cudaFree(db); cudaFree(dqn); cudaFree(dkn); cudaFree(dinv); cudaFree(dpos); cudaFree(dslot);
    cudaFree(dq); cudaFree(dk); cudaFree(dv);
}

/* The fp8 (e4m3) KV write, qwk_qk_norm_rope_kv_fp8, with bias and no norm:
 * V (no RoPE) is qkv + bias, an f32 sum the host repeats exactly, and K at
 * position 0 (cos 1, sin 0) is the same, so those codes must equal
 * qwi_f32_to_e4m3(x / scale) bit for bit (v_scale small enough that some
 * saturate at +-448); K at other positions within one code step of the
 * rounded f64 reference; q bit-identical to the bf16 launcher's; slots no
 * row maps to untouched. */
static void check_rope_kv_fp8(int nh, int nkv, int hd, int rows, const char *tag) {
    const int heads = nh + 2 * nkv, width = heads * hd, half = hd / 2, nslots = rows * 2 + 5;
    const float ks = 0.0123f, vs = 0.0051f;   /* |x| <= 3.5: V saturates beyond 2.28 */
    std::vector<float> qkv((size_t)rows * width), b(width);
    for (auto &v : qkv) v = 3 * frand();
    for (auto &v : b) v = 0.5f * frand();
    std::vector<double> inv(half);
    for (int i = 0; i < half; i++) inv[i] = pow(1e6, -2.0 * i / hd);
    std::vector<int32_t> pos(rows), slot(rows, -1);
    std::vector<int> seen(nslots, 0);
    for (int r = 0; r < rows; r++) {
        pos[r] = r % 3 == 0 ? 0 : (int32_t)((r * 7919u + 13) % 40000);
        int sl = (r * 37 + 11) % nslots;
        if (r % 5 != 4 && !seen[sl]++) slot[r] = sl;
    }
    float *dqkv = dev<float>(qkv.size()), *db = dev<float>(width);
    double *dinv = dev<double>(half);
    int32_t *dpos = dev<int32_t>(rows), *dslot = dev<int32_t>(rows);
    const size_t kvn = (size_t)nslots * nkv * hd;
    uint16_t *dq = dev<uint16_t>((size_t)rows * nh * hd), *dq2 = dev<uint16_t>((size_t)rows * nh * hd),
             *dk2 = dev<uint16_t>(kvn), *dv2 = dev<uint16_t>(kvn);
    uint8_t *dk = dev<uint8_t>(kvn), *dv = dev<uint8_t>(kvn);
    CK(cudaMemcpy(dqkv, qkv.data(), qkv.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, b.data(), width * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dinv, inv.data(), half * 8, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dpos, pos.data(), rows * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dslot, slot.data(), rows * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(dk, 0x7f, kvn));   /* e4m3 NaN: what stays unwritten */
    CK(cudaMemset(dv, 0x7f, kvn));
    qwk_qk_norm_rope_kv_fp8(dqkv, db, NULL, NULL, dinv, dpos, dslot, rows, nh, nkv, hd, 1e-6f, ks, vs, dq, dk, dv, 0);
    qwk_qk_norm_rope_kv(dqkv, db, NULL, NULL, dinv, dpos, dslot, rows, nh, nkv, hd, 1e-6f, dq2, dk2, dv2, 0);
    CK(cudaGetLastError());
    std::vector<uint16_t> q((size_t)rows * nh * hd), q2(q.size());
    std::vector<uint8_t> k(kvn), v(kvn);
    CK(cudaMemcpy(q.data(), dq, q.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(q2.data(), dq2, q2.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(k.data(), dk, kvn, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(v.data(), dv, kvn, cudaMemcpyDeviceToHost));
    long exact_bad = 0, near_bad = 0, misplaced = 0, saturated = 0, n_exact = 0;
    for (int r = 0; r < rows; r++) {
        if (slot[r] < 0) continue;
        for (int h = nh; h < heads; h++) {
            const bool is_k = h < nh + nkv;
            const float sc = is_k ? ks : vs;
            const uint8_t *got = &(is_k ? k : v)[((size_t)slot[r] * nkv + (is_k ? h - nh : h - nh - nkv)) * hd];
            for (int i = 0; i < hd; i++) {
                const float x = qkv[(size_t)r * width + h * hd + i] + b[h * hd + i];
                if (!is_k || pos[r] == 0) {
                    const uint8_t want = qwi_f32_to_e4m3(x / sc);
                    exact_bad += got[i] != want;
                    saturated += (want & 0x7f) == 0x7e;
                    n_exact++;
                    continue;
                }
                /* K after RoPE: f64 reference, then the codes either side */
                const int j = i < half ? i : i - half;
                const double c = cos(pos[r] * inv[j]), sn = sin(pos[r] * inv[j]);
                const double x1 = qkv[(size_t)r * width + h * hd + j] + b[h * hd + j],
                             x2 = qkv[(size_t)r * width + h * hd + j + half] + b[h * hd + j + half];
                const double y = i < half ? x1 * c - x2 * sn : x2 * c + x1 * sn;
                /* window: the device's f32 RoPE (|x| <= 3.5: abs error ~1e-6,
                 * 1e-4 in code units) far inside 1e-3 + 1e-5 relative */
                const double t = y / sc, d = 1e-5 * fabs(t) + 1e-3, g = qwi_e4m3_to_f32(got[i]);
                const double lo = qwi_e4m3_to_f32(qwi_f32_to_e4m3((float)(t - d))),
                             hi = qwi_e4m3_to_f32(qwi_f32_to_e4m3((float)(t + d)));
                near_bad += !(g >= lo && g <= hi);
            }
        }
    }
    for (int sl = 0; sl < nslots; sl++)
        if (!seen[sl])
            for (int i = 0; i < nkv * hd; i++)
                misplaced += k[(size_t)sl * nkv * hd + i] != 0x7f || v[(size_t)sl * nkv * hd + i] != 0x7f;
    char name[128];
    snprintf(name, sizeof name, "rope_kv fp8 %s h%d/%d hd%d rows%d codes exact", tag, nh, nkv, hd, rows);
    report(name, (double)(exact_bad + misplaced + (saturated == 0) + (n_exact == 0)), 0);
    snprintf(name, sizeof name, "rope_kv fp8 %s h%d/%d hd%d K after RoPE (codes)", tag, nh, nkv, hd);
    report(name, (double)near_bad, 0);
    snprintf(name, sizeof name, "rope_kv fp8 %s q == bf16 launcher's (exact)", tag);
    report(name, memcmp(q.data(), q2.data(), q.size() * 2) != 0, 0);
    cudaFree(dqkv); cudaFree(db); cudaFree(dinv); cudaFree(dpos); cudaFree(dslot);
    cudaFree(dq); cudaFree(dq2); cudaFree(dk2); cudaFree(dv2); cudaFree(dk); cudaFree(dv);
}

/* The fp8 element conversions as the device runs them (cuda/kv_e4m3.h):
 * the pair read of the attention kernels (the hardware cvt on sm_89+) for
 * all 256 codes against qwi_e4m3_to_f32 bit for bit (NaN: any NaN), and
 * the write rounding for every 256th f32 pattern plus every pattern of the
 * top 11 mantissa bits around e4m3's edges (as tests/test_cuda_kv_fp8_host.c
 * does on the host) against qwi_f32_to_e4m3. */
__global__ void e4m3_read_kernel(float *out) {
    const uint32_t t = threadIdx.x;   /* codes 2t, 2t+1 */
    const float2 f = qwk_e4m3x2_to_f32x2((2 * t) | ((2 * t + 1) << 8));
    out[2 * t] = f.x;
    out[2 * t + 1] = f.y;
}
__global__ void e4m3_write_kernel(const uint32_t *in, uint8_t *out, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = qwk_f32_to_e4m3(__uint_as_float(in[i]));
}
static void check_e4m3_codec() {
    float *dr = dev<float>(256);
    e4m3_read_kernel<<<1, 128>>>(dr);
    CK(cudaGetLastError());
    std::vector<float> r(256);
    CK(cudaMemcpy(r.data(), dr, 256 * 4, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int b = 0; b < 256; b++) {
        const float want = qwi_e4m3_to_f32((uint8_t)b);
        uint32_t gu, wu;
        memcpy(&gu, &r[b], 4);
        memcpy(&wu, &want, 4);
        bad += want != want ? r[b] == r[b] : gu != wu;
    }
    report("e4m3 read (pair cvt) all 256 codes (exact)", bad, 0);
    std::vector<uint32_t> in;
    for (uint64_t u = 0; u <= 0xffffffffull; u += small ? 65521 : 256) in.push_back((uint32_t)u);
    const uint32_t low[6] = {0, 1, 0x7ff, 0x800, 0x801, 0xfff};
    for (uint32_t e : {116u, 117u, 118u, 119u, 120u, 121u, 122u, 134u, 135u, 136u})
        for (uint32_t hi = 0; hi < 2048; hi += small ? 97 : 1)
            for (uint32_t lo : low)
                for (uint32_t sg = 0; sg < 2; sg++) in.push_back((sg << 31) | (e << 23) | (hi << 12) | lo);
    uint32_t *din = dev<uint32_t>(in.size());
    uint8_t *dout = dev<uint8_t>(in.size());
    CK(cudaMemcpy(din, in.data(), in.size() * 4, cudaMemcpyHostToDevice));
    e4m3_write_kernel<<<256, 256>>>(din, dout, in.size());
    CK(cudaGetLastError());
    std::vector<uint8_t> out(in.size());
    CK(cudaMemcpy(out.data(), dout, out.size(), cudaMemcpyDeviceToHost));
    long wbad = 0;
    for (size_t i = 0; i < in.size(); i++) {
        float f;
        memcpy(&f, &in[i], 4);
        wbad += out[i] != qwi_f32_to_e4m3(f);
    }
    char name[96];
    snprintf(name, sizeof name, "e4m3 write %zu f32 patterns (exact)", in.size());
    report(name, (double)wbad, 0);
    cudaFree(dr); cudaFree(din); cudaFree(dout);
}

/* ---- the GEMM wrapper: Y[M][N] = X[M][K] W[N][K]^T, not another orientation */
static void check_gemm(qwk_gemm *g, int M, int N, int K, int f32) {
    std::vector<uint16_t> hx((size_t)M * K), hw((size_t)N * K);
    for (auto &v : hx) v = qwi_f32_to_bf16(frand());
    for (auto &v : hw) v = qwi_f32_to_bf16(frand());
    uint16_t *x = dev<uint16_t>(hx.size()), *w = dev<uint16_t>(hw.size());
    void *y = dev<char>((size_t)M * N * 4);
    CK(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w, hw.data(), hw.size() * 2, cudaMemcpyHostToDevice));
    int st = qwk_gemm_run(g, 0, x, w, y, f32, M, N, K);
    CK(cudaDeviceSynchronize());
    double num = 0, den = 0;
    if (st) num = 1, den = 1;
    else {
        std::vector<float> yf((size_t)M * N);
        std::vector<uint16_t> yb((size_t)M * N);
        if (f32) CK(cudaMemcpy(yf.data(), y, yf.size() * 4, cudaMemcpyDeviceToHost));
        else CK(cudaMemcpy(yb.data(), y, yb.size() * 2, cudaMemcpyDeviceToHost));
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                double ref = 0;
                for (int k = 0; k < K; k++)
                    ref += (double)qwi_bf16_to_f32(hx[(size_t)m * K + k]) * qwi_bf16_to_f32(hw[(size_t)n * K + k]);
                double got = f32 ? yf[(size_t)m * N + n] : qwi_bf16_to_f32(yb[(size_t)m * N + n]);
                num += (got - ref) * (got - ref);
                den += ref * ref;
            }
    }
    char name[96];
    snprintf(name, sizeof name, "gemm %dx%dx%d %s out%s", M, N, K, f32 ? "f32" : "bf16", st ? " (cublasLt error)" : "");
    report(name, sqrt(num / den), f32 ? 1e-4 : 5e-3);
    cudaFree(x); cudaFree(w); cudaFree(y);
}

/* ---- embedding gather and KV block copy: exact ------------------------------ */
static void check_embed_copy() {
    const int V = 1000, H = 264, R = 77;
    std::vector<uint16_t> table((size_t)V * H);
    for (auto &v : table) v = qwi_f32_to_bf16(frand());
    std::vector<int32_t> tok(R);
    for (int r = 0; r < R; r++) tok[r] = (r * 613 + 5) % V;
    uint16_t *dt = dev<uint16_t>(table.size());
    int32_t *dtok = dev<int32_t>(R);
    float *dx = dev<float>((size_t)R * H);
    CK(cudaMemcpy(dt, table.data(), table.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dtok, tok.data(), R * 4, cudaMemcpyHostToDevice));
    qwk_embed(dt, dtok, R, H, dx, 0);
    std::vector<float> x((size_t)R * H);
    CK(cudaMemcpy(x.data(), dx, x.size() * 4, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int r = 0; r < R; r++)
        for (int i = 0; i < H; i++) bad += x[(size_t)r * H + i] != qwi_bf16_to_f32(table[(size_t)tok[r] * H + i]);
    report("embed gather 77x264 (exact)", bad, 0);
    /* copy_blocks: 4 planes of 9 blocks; copy 2->7, 0->3, 5->1 in every
     * plane; bf16 blocks, then fp8 (e4m3) blocks: half the bytes */
    for (int elem = 2; elem >= 1; elem--) {
        const int planes = 4, nb = 9;
        const size_t block_bytes = 16 * 2 * 40 * (size_t)elem;   /* bs 16, nkv 2, hd 40: not a multiple of 256 */
        const size_t plane = nb * block_bytes;
        std::vector<uint8_t> pool(planes * plane);
        for (auto &v : pool) v = (uint8_t)(frand() * 127 + 128);
        std::vector<int32_t> src = {2, 0, 5}, dst = {7, 3, 1};
        uint8_t *dp = dev<uint8_t>(pool.size());
        int32_t *ds = dev<int32_t>(3), *dd = dev<int32_t>(3);
        CK(cudaMemcpy(dp, pool.data(), pool.size(), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(ds, src.data(), 12, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dd, dst.data(), 12, cudaMemcpyHostToDevice));
        qwk_copy_blocks(dp, plane, planes, block_bytes, ds, dd, 3, 0);
        std::vector<uint8_t> after(pool.size());
        CK(cudaMemcpy(after.data(), dp, after.size(), cudaMemcpyDeviceToHost));
        std::vector<uint8_t> want = pool;
        for (int p = 0; p < planes; p++)
            for (int i = 0; i < 3; i++)
                memcpy(&want[p * plane + dst[i] * block_bytes], &pool[p * plane + src[i] * block_bytes], block_bytes);
        report(elem == 2 ? "copy_blocks 4 planes x 3 blocks (exact)" : "copy_blocks fp8 4 planes x 3 blocks (exact)",
               memcmp(want.data(), after.data(), want.size()) != 0, 0);
        cudaFree(dp); cudaFree(ds); cudaFree(dd);
    }
    cudaFree(dt); cudaFree(dtok); cudaFree(dx);
}

/* ---- attention benchmarks: Qwen3-8B heads (32 q, 8 kv, hd 128), bs 16 ------ */
struct paged_bench {
    uint16_t *k, *v, *q, *out;
    int32_t *hdr, *qs, *cl, *pos, *bt, *tiles;
    float *po, *pl;
    int ntiles;
};

static paged_bench paged_setup(int S, int ctx, int qlen) {
    const int bs = 16, nh = 32, nkv = 8, hd = 128, maxb = (ctx + bs - 1) / bs, T = S * qlen;
    paged_bench p;
    size_t kvn = (size_t)S * maxb * bs * nkv * hd;
    p.k = dev<uint16_t>(kvn); p.v = dev<uint16_t>(kvn);
    p.q = dev<uint16_t>((size_t)T * nh * hd); p.out = dev<uint16_t>((size_t)T * nh * hd);
    CK(cudaMemset(p.k, 0x3c, kvn * 2)); CK(cudaMemset(p.v, 0x3c, kvn * 2));
    CK(cudaMemset(p.q, 0x3c, (size_t)T * nh * hd * 2));
    std::vector<int32_t> hdr(8, 0), qs(S + 1), cl(S, ctx), pos(T), bt((size_t)S * maxb), tiles;
    hdr[2] = maxb;
    for (int s = 0; s < S; s++) {
        qs[s] = s * qlen;
        for (int i = 0; i < maxb; i++) bt[(size_t)s * maxb + i] = (int32_t)(((size_t)s * maxb + i) * 7919 % ((size_t)S * maxb));
        for (int i = 0; i < qlen; i++) pos[s * qlen + i] = ctx - qlen + i;
        for (int i = 0; i < qlen; i += 64) { tiles.push_back(s); tiles.push_back(s * qlen + i); }
    }
    qs[S] = T;
    p.ntiles = (int)tiles.size() / 2;
    p.hdr = dev<int32_t>(8); p.qs = dev<int32_t>(S + 1); p.cl = dev<int32_t>(S); p.pos = dev<int32_t>(T);
    p.bt = dev<int32_t>(bt.size()); p.tiles = dev<int32_t>(tiles.size() + 2);
    p.po = dev<float>((size_t)S * nh * QWI_CUDA_DECODE_MAX_SPLITS * hd);
    p.pl = dev<float>((size_t)S * nh * QWI_CUDA_DECODE_MAX_SPLITS);
    CK(cudaMemcpy(p.hdr, hdr.data(), 32, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(p.qs, qs.data(), 4 * (S + 1), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(p.cl, cl.data(), 4 * S, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(p.pos, pos.data(), 4 * T, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(p.bt, bt.data(), 4 * bt.size(), cudaMemcpyHostToDevice));
    if (!tiles.empty()) CK(cudaMemcpy(p.tiles, tiles.data(), 4 * tiles.size(), cudaMemcpyHostToDevice));
    return p;
}

static void paged_free(paged_bench &p) {
    cudaFree(p.k); cudaFree(p.v); cudaFree(p.q); cudaFree(p.out); cudaFree(p.hdr); cudaFree(p.qs); cudaFree(p.cl);
    cudaFree(p.pos); cudaFree(p.bt); cudaFree(p.tiles); cudaFree(p.po); cudaFree(p.pl);
}

/* Decode attention at S sequences x ctx positions: GB/s of K/V read, with
 * the bf16 cache, then the fp8 (e4m3) one (the same buffers read as bytes:
 * 0x3c is 1.5; half the bytes; also its time per call vs bf16). Each
 * sequence splits by its context alone (decode_splits.h): 2K is 8 splits,
 * 32K 16, whatever S. */
static void bench_decode_attention(double copy_gbs, int S, int ctx, const char *tag) {
    paged_bench p = paged_setup(S, ctx, 1);
    double ms_bf16 = 0;
    for (int fp8 = 0; fp8 < 2; fp8++) {
        qwk_paged pg = {p.k, p.v, p.hdr, p.qs, p.cl, p.pos, p.bt, 16, 32, 8, 128, (float)(1.0 / sqrt(128.0)),
                        fp8, 1.f, 1.f};
        const int splits = qwi_cuda_decode_splits(ctx);
        for (int i = 0; i < 3; i++) qwk_decode_attention(&pg, p.q, S, splits, p.po, p.pl, p.out, 0);
        CK(cudaGetLastError());
        cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
        cudaEventRecord(e0);
        for (int i = 0; i < 20; i++) qwk_decode_attention(&pg, p.q, S, splits, p.po, p.pl, p.out, 0);
        cudaEventRecord(e1); CK(cudaEventSynchronize(e1));
        float ms; cudaEventElapsedTime(&ms, e0, e1);
        double bytes = (double)S * ctx * 8 * 128 * 2 * (fp8 ? 1 : 2);   /* K and V, bf16 or e4m3 */
        double gbs = bytes * 20 / (ms * 1e-3) / 1e9;
        if (!fp8) {
            ms_bf16 = ms;
            printf("BENCH decode_attn_%s %.0f GB/s %.1f%%\n", tag, gbs, copy_gbs > 0 ? 100 * gbs / copy_gbs : 0.0);
        } else {
            printf("BENCH decode_attn_fp8kv_%s %.0f GB/s %.1f%%\n", tag, gbs, copy_gbs > 0 ? 100 * gbs / copy_gbs : 0.0);
            printf("BENCH decode_attn_fp8kv_%s_speedup %.2f x_vs_bf16 -\n", tag, ms > 0 ? ms_bf16 / ms : 0.0);
        }
        cudaEventDestroy(e0); cudaEventDestroy(e1);
    }
    paged_free(p);
}

/* Prefill attention, 4 sequences of 2K causal: TFLOP/s (QK^T + PV). */
static void bench_prefill_attention(double peak_tflops) {
    const int S = 4, L = 2048;
    paged_bench p = paged_setup(S, L, L);
    qwk_paged pg = {p.k, p.v, p.hdr, p.qs, p.cl, p.pos, p.bt, 16, 32, 8, 128, (float)(1.0 / sqrt(128.0))};
    qwk_prefill_attention(&pg, p.q, p.tiles, p.ntiles, p.out, 0);
    CK(cudaGetLastError());
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    cudaEventRecord(e0);
    for (int i = 0; i < 5; i++) qwk_prefill_attention(&pg, p.q, p.tiles, p.ntiles, p.out, 0);
    cudaEventRecord(e1); CK(cudaEventSynchronize(e1));
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    double flops = (double)S * 32 * 4.0 * 128 * ((double)L * (L + 1) / 2);
    double tf = flops * 5 / (ms * 1e-3) / 1e12;
    printf("BENCH prefill_attn_4x2K_causal %.1f TFLOP/s %.1f%%\n", tf, peak_tflops > 0 ? 100 * tf / peak_tflops : 0.0);
    paged_free(p);
}

/* ---- check groups: each one its own process under run.sh ------------------- */

static void group_attention() {
    /* decode contexts of 1 split (<= 256 positions), 2 (257..512), 3 (..768) */
    check_attention(4, 2, 16, {1, 17, 300}, {1, 1, 1}, ATT_DECODE, "tiny");
    check_attention(4, 2, 16, {40, 9}, {40, 9}, ATT_PREFILL, "tiny");
    /* a mixed step: prefill chunks beside decode rows of 1 and 2 splits and
     * a one-row prompt chunk (seq 4: the prefill kernel's) */
    check_attention(4, 2, 16, {40, 300, 9, 17, 161}, {40, 1, 9, 1, 1}, ATT_STEP, "tiny", false, {4});
    /* fp8 (e4m3) cache: both kernels, split and unsplit decode */
    check_attention(4, 2, 16, {1, 17, 300}, {1, 1, 1}, ATT_DECODE, "tiny", true);
    check_attention(4, 2, 16, {40, 9}, {40, 9}, ATT_PREFILL, "tiny", true);
    check_attention(16, 8, 128, {1, 17, 600}, {1, 1, 1}, ATT_DECODE, "small", true);
    check_attention(16, 8, 128, {70, 16}, {70, 3}, ATT_PREFILL, "small", true);
    check_attention(16, 8, 128, {70, 600, 16, 1, 90}, {70, 1, 3, 1, 1}, ATT_STEP, "small", true, {4});
    if (small) {
        check_attention(16, 8, 128, {1, 17, 600}, {1, 1, 1}, ATT_DECODE, "small");
        check_attention(16, 8, 128, {70, 16}, {70, 3}, ATT_PREFILL, "small");
        check_attention(16, 8, 128, {70, 600, 16, 1, 90}, {70, 1, 3, 1, 1}, ATT_STEP, "small", false, {4});
        return;
    }
    check_attention(32, 8, 128, {33, 4097}, {1, 1}, ATT_DECODE, "splits", true);
    check_attention(40, 8, 128, {70, 16, 200, 5}, {70, 3, 64, 1}, ATT_PREFILL, "mixed/chunked", true);
    check_attention(40, 8, 128, {70, 4097, 16, 200, 5, 1000, 333}, {70, 1, 3, 64, 1, 1, 1}, ATT_STEP, "mixed", true, {6});
    const int cfgs[4][2] = {{16, 8}, {32, 8}, {40, 8}, {64, 8}};
    for (auto &c : cfgs) {
        check_attention(c[0], c[1], 128, {1, 15, 16, 17, 300, 2048}, {1, 1, 1, 1, 1, 1}, ATT_DECODE, "ragged");
        check_attention(c[0], c[1], 128, {33, 4097}, {1, 1}, ATT_DECODE, "splits");
        check_attention(c[0], c[1], 128, {70, 16, 200, 5}, {70, 3, 64, 1}, ATT_PREFILL, "mixed/chunked");
        check_attention(c[0], c[1], 128, {70, 4097, 16, 200, 5, 1000, 333}, {70, 1, 3, 64, 1, 1, 1}, ATT_STEP, "mixed", false, {6});
    }
    check_attention(32, 8, 128, {32768}, {1}, ATT_DECODE, "ctx32K");
    check_attention(32, 8, 128, {32768}, {64}, ATT_PREFILL, "ctx32K-chunk");
}

static void group_norms() {
    check_rmsnorm_silu();
    if (!small) check_silu_many_rows();
}

static void group_rope_kv() {
    check_rope_kv(16, 8, 128, small ? 9 : 300, false, true, "qwen3");
    check_rope_kv(4, 2, 64, small ? 7 : 100, true, false, "qwen2-bias");
    if (!small) check_rope_kv(64, 8, 128, 33, false, true, "32b");
    check_e4m3_codec();
    check_rope_kv_fp8(16, 8, 128, small ? 9 : 300, "qwen3");
    check_rope_kv_fp8(4, 2, 16, small ? 7 : 50, "tiny");
}

static void group_gemm() {
    void *ws = dev<char>(QWK_GEMM_WORKSPACE);
    qwk_gemm *g;
    if (qwk_gemm_create(ws, &g)) { report("gemm create", 1, 0); return; }
    check_gemm(g, 37, 96, 64, 1);    /* M != N != K: a transposed operand shows */
    check_gemm(g, 37, 96, 64, 0);
    check_gemm(g, 1, 160, 128, 1);   /* decode: one row */
    if (!small) {
        check_gemm(g, 300, 192, 256, 1);   /* 300 and 257 share bucket 512: the cached */
        check_gemm(g, 257, 192, 256, 1);   /* algorithm runs at two real M */
        check_gemm(g, 512, 192, 256, 0);
    }
    qwk_gemm_destroy(g);
    cudaFree(ws);
}

static void group_bench() {
    double copy = bench_copy_gbs();
    printf("BENCH copy_d2d %.0f GB/s 100%%\n", copy);
    double peak = bench_gemm_tflops(8192, 8192, 8192);
    printf("BENCH gemm_bf16_8192 %.0f TFLOP/s -\n", peak);
    double pf = bench_gemm_tflops(2048, 12288 * 2, 4096);
    printf("BENCH gemm_prefill_8b_gateup %.0f TFLOP/s %.0f%%\n", pf, 100 * pf / peak);
    bench_decode_attention(copy, 64, 2048, "64x2K");
    bench_decode_attention(copy, 1, 32768, "1x32K");   /* batch 1: the splits fill the device */
    bench_prefill_attention(peak);
}

static const char *const GROUPS[] = {"attention", "norms", "rope_kv", "gemm", "embed_copy", "sampler", "logprobs", "penalties", "bench"};

/* check_kernels [--small] [GROUP...]   (no GROUP: all; "list": the names) */
int main(int argc, char **argv) {
    std::vector<const char *> want;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--small")) small = true;
        else if (!strcmp(argv[i], "list")) { for (auto g : GROUPS) printf("%s\n", g); return 0; }
        else want.push_back(argv[i]);
    }
    if (want.empty()) for (auto g : GROUPS) want.push_back(g);
    int n = 0;
    cudaError_t de = cudaGetDeviceCount(&n);
    if (de != cudaSuccess || n == 0) {
        printf("no device (%s)\n", de != cudaSuccess ? cudaGetErrorString(de) : "0 devices");
        return 2;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    /* what the backend does at create: the prefill kernel's shared memory */
    for (int hd : {16, 32, 64, 128}) {
        cudaError_t e = qwk_attention_init(hd);
        if (e != cudaSuccess) { printf("CHECK attention_init hd %d FAIL %s\n", hd, cudaGetErrorString(e)); failures++; }
    }
    for (const char *g : want) {
        if (!strcmp(g, "attention")) group_attention();
        else if (!strcmp(g, "norms")) group_norms();
        else if (!strcmp(g, "rope_kv")) group_rope_kv();
        else if (!strcmp(g, "gemm")) group_gemm();
        else if (!strcmp(g, "embed_copy")) check_embed_copy();
        else if (!strcmp(g, "sampler")) check_sampler();
        else if (!strcmp(g, "logprobs")) check_logprobs();
        else if (!strcmp(g, "penalties")) check_penalties();
        else if (!strcmp(g, "bench")) group_bench();
        else { printf("unknown group %s\n", g); return 2; }
    }
    CK(cudaDeviceSynchronize());
    printf("RESULT kernel checks: %d failed\n", failures);
    return failures ? 1 : 0;
}
