/*
 * test_cpu_forward.c - the CPU backend's whole forward pass on small random
 * models built in memory: against a naive double-precision Qwen3/Qwen2
 * forward, bit-identical logits alone vs batched vs chunked vs threaded,
 * greedy sampling, and bad plans rejected with a status.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "dtype.h"

static uint64_t rng = 0x1234567887654321ull;
static double urand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 4503599627370496.0 - 1.0;
}

static qwi_tensor mk(qwi_dtype dt, int64_t d0, int64_t d1, double scale, double offset) {
    qwi_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.ndim = d1 ? 2 : 1;
    t.shape[0] = d0;
    t.shape[1] = d1;
    int64_t n = d0 * (d1 ? d1 : 1);
    t.nbytes = (size_t)n * qwi_dtype_size(dt);
    void *p = malloc(t.nbytes);
    for (int64_t i = 0; i < n; i++) {
        float f = (float)(offset + urand() * scale);
        if (dt == QWI_DTYPE_F32) ((float *)p)[i] = f;
        else if (dt == QWI_DTYPE_BF16) ((uint16_t *)p)[i] = qwi_f32_to_bf16(f);
        else {
            /* f32 -> f16 by truncation is enough for test data: keep it normal */
            uint32_t u; memcpy(&u, &f, 4);
            int e = (int)((u >> 23) & 0xff) - 127 + 15;
            uint16_t h = (uint16_t)((u >> 16) & 0x8000);
            if (e > 0 && e < 31) h |= (uint16_t)((e << 10) | ((u >> 13) & 0x3ff));
            ((uint16_t *)p)[i] = h;
        }
    }
    t.data = p;
    return t;
}

static double at(const qwi_tensor *t, int64_t i) {
    if (t->dtype == QWI_DTYPE_F32) return ((const float *)t->data)[i];
    if (t->dtype == QWI_DTYPE_BF16) return qwi_bf16_to_f32(((const uint16_t *)t->data)[i]);
    return qwi_f16_to_f32(((const uint16_t *)t->data)[i]);
}

static qwi_model *make_model(bool qwen2, qwi_dtype dt) {
    qwi_model *m = calloc(1, sizeof *m);
    qwi_config *c = &m->cfg;
    c->vocab_size = 61; c->hidden_size = 40; c->intermediate_size = 56; c->num_layers = 2;
    c->num_heads = 4; c->num_kv_heads = 2; c->head_dim = 12; c->max_position_embeddings = 512;
    c->rope_theta = 10000.0; c->rms_norm_eps = 1e-6; c->qk_norm = !qwen2; c->qkv_bias = qwen2;
    c->bos_token_id = -1;
    int64_t H = c->hidden_size, I = c->intermediate_size, hd = c->head_dim;
    int64_t qd = c->num_heads * hd, kvd = c->num_kv_heads * hd;
    m->embed = mk(dt, c->vocab_size, H, 1.0, 0);
    m->final_norm = mk(QWI_DTYPE_F32, H, 0, 0.2, 1.0);
    m->lm_head = mk(dt, c->vocab_size, H, 0.3, 0);
    m->layers = calloc((size_t)c->num_layers, sizeof *m->layers);
    for (int l = 0; l < c->num_layers; l++) {
        qwi_layer *L = &m->layers[l];
        /* mix dtypes across tensors so every matmul path runs in a forward */
        qwi_dtype d2 = l == 1 ? QWI_DTYPE_F16 : dt;
        L->input_norm = mk(QWI_DTYPE_BF16, H, 0, 0.2, 1.0);
        L->post_norm = mk(QWI_DTYPE_F32, H, 0, 0.2, 1.0);
        L->q_proj = mk(dt, qd, H, 0.3, 0);
        L->k_proj = mk(d2, kvd, H, 0.3, 0);
        L->v_proj = mk(dt, kvd, H, 0.3, 0);
        L->o_proj = mk(d2, H, qd, 0.3, 0);
        L->gate_proj = mk(dt, I, H, 0.3, 0);
        L->up_proj = mk(d2, I, H, 0.3, 0);
        L->down_proj = mk(dt, H, I, 0.3, 0);
        if (c->qk_norm) {
            L->q_norm = mk(QWI_DTYPE_F32, hd, 0, 0.2, 1.0);
            L->k_norm = mk(QWI_DTYPE_BF16, hd, 0, 0.2, 1.0);
        }
        if (c->qkv_bias) {
            L->q_bias = mk(QWI_DTYPE_F32, qd, 0, 0.5, 0);
            L->k_bias = mk(QWI_DTYPE_F32, kvd, 0, 0.5, 0);
            L->v_bias = mk(QWI_DTYPE_F32, kvd, 0, 0.5, 0);
        }
    }
    return m;
}

static void free_model(qwi_model *m) {
    free((void *)m->embed.data); free((void *)m->final_norm.data); free((void *)m->lm_head.data);
    for (int l = 0; l < m->cfg.num_layers; l++) {
        qwi_layer *L = &m->layers[l];
        const qwi_tensor *ts[] = { &L->input_norm, &L->post_norm, &L->q_proj, &L->k_proj, &L->v_proj,
                                   &L->o_proj, &L->gate_proj, &L->up_proj, &L->down_proj, &L->q_norm,
                                   &L->k_norm, &L->q_bias, &L->k_bias, &L->v_bias };
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) free((void *)ts[i]->data);
    }
    free(m->layers);
    free(m);
}

/* ---- naive double forward of one whole sequence ------------------------- */

static void d_rmsnorm(const double *x, const qwi_tensor *w, int64_t n, double eps, double *out) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + eps);
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * r * at(w, i);
}

static void d_linear(const double *x, const qwi_tensor *w, const qwi_tensor *b, int64_t n, int64_t k, double *out) {
    for (int64_t i = 0; i < n; i++) {
        double s = b && b->data ? at(b, i) : 0;
        for (int64_t j = 0; j < k; j++) s += x[j] * at(w, i * k + j);
        out[i] = s;
    }
}

static void d_rope(double *v, int64_t nheads, int64_t hd, int64_t pos, double theta) {
    for (int64_t h = 0; h < nheads; h++)
        for (int64_t i = 0; i < hd / 2; i++) {
            double a = pos * pow(theta, -2.0 * i / hd);
            double x1 = v[h * hd + i], x2 = v[h * hd + i + hd / 2];
            v[h * hd + i] = x1 * cos(a) - x2 * sin(a);
            v[h * hd + i + hd / 2] = x2 * cos(a) + x1 * sin(a);
        }
}

/* logits of the last of n tokens into out[vocab] */
static void naive_forward(const qwi_model *m, const int32_t *tok, int n, double *out) {
    const qwi_config *c = &m->cfg;
    int64_t H = c->hidden_size, I = c->intermediate_size, hd = c->head_dim;
    int64_t nh = c->num_heads, nkv = c->num_kv_heads, qd = nh * hd, kvd = nkv * hd;
    double *x = calloc(n * H, 8), *h = calloc(H, 8), *q = calloc(n * qd, 8), *k = calloc(n * kvd, 8);
    double *v = calloc(n * kvd, 8), *att = calloc(qd, 8), *o = calloc(H, 8), *g = calloc(I, 8), *u = calloc(I, 8);
    double *sc = calloc(n, 8);
    for (int r = 0; r < n; r++)
        for (int64_t i = 0; i < H; i++) x[r * H + i] = at(&m->embed, tok[r] * H + i);
    for (int l = 0; l < c->num_layers; l++) {
        const qwi_layer *L = &m->layers[l];
        for (int r = 0; r < n; r++) {
            d_rmsnorm(x + r * H, &L->input_norm, H, c->rms_norm_eps, h);
            d_linear(h, &L->q_proj, &L->q_bias, qd, H, q + r * qd);
            d_linear(h, &L->k_proj, &L->k_bias, kvd, H, k + r * kvd);
            d_linear(h, &L->v_proj, &L->v_bias, kvd, H, v + r * kvd);
            if (c->qk_norm) {
                for (int64_t i = 0; i < nh; i++) d_rmsnorm(q + r * qd + i * hd, &L->q_norm, hd, c->rms_norm_eps, q + r * qd + i * hd);
                for (int64_t i = 0; i < nkv; i++) d_rmsnorm(k + r * kvd + i * hd, &L->k_norm, hd, c->rms_norm_eps, k + r * kvd + i * hd);
            }
            d_rope(q + r * qd, nh, hd, r, c->rope_theta);
            d_rope(k + r * kvd, nkv, hd, r, c->rope_theta);
        }
        for (int r = 0; r < n; r++) {
            for (int64_t hh = 0; hh < nh; hh++) {
                int64_t kh = hh / (nh / nkv);
                double mx = -INFINITY, sum = 0;
                for (int p = 0; p <= r; p++) {
                    double d = 0;
                    for (int64_t i = 0; i < hd; i++) d += q[r * qd + hh * hd + i] * k[p * kvd + kh * hd + i];
                    sc[p] = d / sqrt((double)hd);
                    if (sc[p] > mx) mx = sc[p];
                }
                for (int p = 0; p <= r; p++) sum += (sc[p] = exp(sc[p] - mx));
                for (int64_t i = 0; i < hd; i++) {
                    double s = 0;
                    for (int p = 0; p <= r; p++) s += sc[p] * v[p * kvd + kh * hd + i];
                    att[hh * hd + i] = s / sum;
                }
            }
            d_linear(att, &L->o_proj, NULL, H, qd, o);
            for (int64_t i = 0; i < H; i++) x[r * H + i] += o[i];
            d_rmsnorm(x + r * H, &L->post_norm, H, c->rms_norm_eps, h);
            d_linear(h, &L->gate_proj, NULL, I, H, g);
            d_linear(h, &L->up_proj, NULL, I, H, u);
            for (int64_t i = 0; i < I; i++) g[i] = g[i] / (1 + exp(-g[i])) * u[i];
            d_linear(g, &L->down_proj, NULL, H, I, o);
            for (int64_t i = 0; i < H; i++) x[r * H + i] += o[i];
        }
    }
    d_rmsnorm(x + (int64_t)(n - 1) * H, &m->final_norm, H, c->rms_norm_eps, h);
    d_linear(h, &m->lm_head, NULL, c->vocab_size, H, out);
    free(x); free(h); free(q); free(k); free(v); free(att); free(o); free(g); free(u); free(sc);
}

/* ---- plans ----------------------------------------------------------------- */

#define BS 4
#define MBPS 16
#define NBLOCKS 128

typedef struct seqspec {
    const int32_t *tok;
    int start, len;      /* rows tok[start .. start+len) this step */
    int id;              /* picks its fixed block table            */
} seqspec;

static int32_t block_of(int id, int i) { return (id * 37 + i * 11) % NBLOCKS; }  /* scattered, distinct per id<8 */

/* Run one step for the given sequences; logits of each seq's last row into
 * logits[i*vocab]; sampled tokens (greedy) into sampled. */
static qw_status step(qwi_backend *b, const qwi_model *m, const seqspec *ss, int nseq,
                      float *logits, int32_t *sampled) {
    int32_t tok[256], pos[256], slot[256], qs[9], ctx[8], bt[8 * MBPS];
    /* Zeroed: a bad plan (a context past MBPS blocks) must fail on its
     * shape, not read uninitialised table entries on the way. */
    memset(bt, 0, sizeof bt);
    uint8_t ds[8], wl[8];
    qwi_sampling sp[8];
    int r = 0;
    qs[0] = 0;
    for (int i = 0; i < nseq; i++) {
        for (int j = 0; j < MBPS; j++) bt[i * MBPS + j] = block_of(ss[i].id, j);
        for (int p = ss[i].start; p < ss[i].start + ss[i].len; p++, r++) {
            tok[r] = ss[i].tok[p];
            pos[r] = p;
            slot[r] = bt[i * MBPS + p / BS] * BS + p % BS;
        }
        qs[i + 1] = r;
        ctx[i] = ss[i].start + ss[i].len;
        ds[i] = 1;
        wl[i] = 1;
        memset(&sp[i], 0, sizeof sp[i]);
        sp[i].top_p = 1.0f;
    }
    qwi_plan p = { .num_tokens = r, .token_ids = tok, .positions = pos, .slot_mapping = slot,
                   .num_seqs = nseq, .query_start = qs, .context_lens = ctx, .block_tables = bt,
                   .max_blocks_per_seq = MBPS, .do_sample = ds, .sampling = sp, .want_logits = wl,
                   .logits_out = logits, .sampled = sampled };
    (void)m;
    return b->ops->forward(b, &p);
}

static qwi_backend *make_backend(const qwi_model *m, int threads) {
    /* Exact numerics: these tests hold f32 activations to 1e-4 of a double
     * forward pass (test_fast_numerics.c and test_reference_fast.c cover
     * the fast mode). */
    qwi_backend_config bc = { .num_threads = threads, .num_blocks = NBLOCKS, .block_size = BS,
                              .max_num_batched_tokens = 64, .max_num_seqs = 8,
                              .numerics = QW_NUMERICS_EXACT };
    qwi_backend *b = NULL;
    qw_status st = qwi_cpu_backend_create(m, &bc, &b);
    cr_assert_eq(st, QW_OK, "create: %s", qwi_last_error());
    return b;
}

/* The backend packs f32/bf16 weights into panels at create unless
 * QWINFER_CPU_WEIGHTS=mmap (then the row-major kernels read the tensors in
 * place): the two paths round differently, so each is checked on its own.
 * Criterion runs every test in its own process, so the variable does not
 * leak into other tests. */
static void use_weights(const char *mode) {
    if (mode) setenv("QWINFER_CPU_WEIGHTS", mode, 1);
    else unsetenv("QWINFER_CPU_WEIGHTS");
}

static void check_vs_reference(bool qwen2, qwi_dtype dt, const char *weights) {
    use_weights(weights);
    qwi_model *m = make_model(qwen2, dt);
    qwi_backend *b = make_backend(m, 2);
    const int V = m->cfg.vocab_size;
    int32_t tok[23];
    for (int i = 0; i < 23; i++) tok[i] = (i * 17 + 5) % V;
    float *lg = malloc(V * 4);
    double *ref = malloc(V * 8);
    int32_t sampled;
    /* prefill 10, then chunks 6 and 1x7 decode-style steps */
    int done = 0;
    static const int chunks[] = { 10, 6, 1, 1, 1, 1, 1, 1, 1 };
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        seqspec s = { tok, done, chunks[c], 3 };
        cr_assert_eq(step(b, m, &s, 1, lg, &sampled), QW_OK, "%s", qwi_last_error());
        done += chunks[c];
        naive_forward(m, tok, done, ref);
        double mx = 0;
        for (int i = 0; i < V; i++) mx = fmax(mx, fabs(ref[i]));
        int best = 0;
        for (int i = 0; i < V; i++) {
            cr_assert(fabs(lg[i] - ref[i]) <= 1e-4 * mx + 1e-5, "qwen2 %d dt %d len %d logit %d: %g vs %g",
                      qwen2, dt, done, i, lg[i], ref[i]);
            if (lg[i] > lg[best]) best = i;
        }
        cr_assert_eq(sampled, best, "greedy sample %d, argmax %d", sampled, best);
    }
    free(lg); free(ref);
    b->ops->destroy(b);
    free_model(m);
}

Test(cpu_forward, qwen3_bf16_matches_double_reference) { check_vs_reference(false, QWI_DTYPE_BF16, NULL); }
Test(cpu_forward, qwen3_f32_matches_double_reference) { check_vs_reference(false, QWI_DTYPE_F32, NULL); }
Test(cpu_forward, qwen2_bias_matches_double_reference) { check_vs_reference(true, QWI_DTYPE_BF16, NULL); }
Test(cpu_forward, f16_matches_double_reference) { check_vs_reference(false, QWI_DTYPE_F16, NULL); }
Test(cpu_forward, rowmajor_bf16_matches_double_reference) { check_vs_reference(false, QWI_DTYPE_BF16, "mmap"); }
Test(cpu_forward, rowmajor_f32_matches_double_reference) { check_vs_reference(false, QWI_DTYPE_F32, "mmap"); }
Test(cpu_forward, rowmajor_qwen2_bias_matches_double_reference) { check_vs_reference(true, QWI_DTYPE_BF16, "mmap"); }

/* A sequence alone in one chunk vs in chunks of 7 batched with others, with
 * 1 and 3 threads: logits bit-identical. */
static void batched_chunked_threaded(const char *weights) {
    use_weights(weights);
    qwi_model *m = make_model(false, QWI_DTYPE_BF16);
    const int V = m->cfg.vocab_size;
    int32_t a[40], o1[40], o2[40];
    for (int i = 0; i < 40; i++) { a[i] = (i * 7 + 3) % V; o1[i] = (i * 5 + 1) % V; o2[i] = (i * 13) % V; }
    float *alone = malloc(V * 4), *got = malloc(8 * V * 4);
    int32_t smp[8];
    qwi_backend *b1 = make_backend(m, 1);
    seqspec s = { a, 0, 33, 0 };
    cr_assert_eq(step(b1, m, &s, 1, alone, smp), QW_OK);
    /* one decode step after it, alone */
    float *alone_dec = malloc(V * 4);
    seqspec sd = { a, 33, 1, 0 };
    cr_assert_eq(step(b1, m, &sd, 1, alone_dec, smp), QW_OK);
    b1->ops->destroy(b1);

    for (int threads = 1; threads <= 3; threads += 2) {
        qwi_backend *b = make_backend(m, threads);
        /* a in chunks of 7 (the last one 5), with two others at other offsets */
        int done = 0, d1 = 0, d2 = 0;
        while (done < 33) {
            int len = QWI_MIN(7, 33 - done);
            seqspec batch[3] = { { o1, d1, 3, 1 }, { a, done, len, 2 }, { o2, d2, 5, 5 } };
            cr_assert_eq(step(b, m, batch, 3, got, smp), QW_OK, "%s", qwi_last_error());
            done += len; d1 += 3; d2 += 5;
        }
        cr_assert(memcmp(got + V, alone, V * 4) == 0, "threads %d: chunked+batched logits differ", threads);
        seqspec dec[3] = { { o2, d2, 1, 5 }, { o1, d1, 2, 1 }, { a, 33, 1, 2 } };
        cr_assert_eq(step(b, m, dec, 3, got, smp), QW_OK);
        cr_assert(memcmp(got + 2 * V, alone_dec, V * 4) == 0, "threads %d: decode logits differ", threads);
        b->ops->destroy(b);
    }
    free(alone); free(alone_dec); free(got);
    free_model(m);
}

Test(cpu_forward, batched_chunked_threaded_bit_identical) { batched_chunked_threaded(NULL); }
Test(cpu_forward, rowmajor_batched_chunked_threaded_bit_identical) { batched_chunked_threaded("mmap"); }

Test(cpu_forward, bad_plans_fail_cleanly) {
    qwi_model *m = make_model(false, QWI_DTYPE_BF16);
    const int V = m->cfg.vocab_size;
    qwi_backend *b = make_backend(m, 2);
    float *lg = malloc(8 * V * 4);
    int32_t smp[8];
    int32_t tok[70];
    for (int i = 0; i < 70; i++) tok[i] = i % V;
    seqspec big = { tok, 0, 65, 0 };            /* over max_num_batched_tokens */
    cr_assert_eq(step(b, m, &big, 1, lg, smp), QW_ERR_INVALID_ARGUMENT);
    int32_t badtok[3] = { 1, V, 2 };
    seqspec bt = { badtok, 0, 3, 0 };
    cr_assert_eq(step(b, m, &bt, 1, lg, smp), QW_ERR_TOKEN_OUT_OF_RANGE);
    cr_assert(strstr(qwi_last_error(), "token id") != NULL, "%s", qwi_last_error());
    seqspec toolong = { tok, 60, 5, 0 };        /* context 65 > MBPS*BS = 64 */
    cr_assert_neq(step(b, m, &toolong, 1, lg, smp), QW_OK);
    /* a slot outside the pool */
    int32_t t1 = 1, p0 = 0, slot = NBLOCKS * BS, qs[2] = { 0, 1 }, ctx = 1, btab[MBPS] = { 0 };
    uint8_t one = 1;
    qwi_sampling sp = { .top_p = 1.0f };
    qwi_plan p = { .num_tokens = 1, .token_ids = &t1, .positions = &p0, .slot_mapping = &slot,
                   .num_seqs = 1, .query_start = qs, .context_lens = &ctx, .block_tables = btab,
                   .max_blocks_per_seq = MBPS, .do_sample = &one, .sampling = &sp, .sampled = smp };
    cr_assert_neq(b->ops->forward(b, &p), QW_OK);
    btab[0] = -1;
    slot = 0;
    cr_assert_neq(b->ops->forward(b, &p), QW_OK);   /* block id out of range */
    btab[0] = 0;
    cr_assert_eq(b->ops->forward(b, &p), QW_OK, "%s", qwi_last_error());   /* still usable */
    cr_assert(smp[0] >= 0 && smp[0] < V);
    /* creating with an impossible pool fails with a message, not a crash */
    qwi_backend_config huge = { .num_threads = 1, .num_blocks = INT32_MAX, .block_size = 1024,
                                .max_num_batched_tokens = 8, .max_num_seqs = 1 };
    qwi_backend *hb = (qwi_backend *)1;
    cr_assert_eq(qwi_cpu_backend_create(m, &huge, &hb), QW_ERR_OUT_OF_MEMORY);
    cr_assert_null(hb);
    b->ops->destroy(b);
    free(lg);
    free_model(m);
}
