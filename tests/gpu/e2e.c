/*
 * tests/gpu/e2e.c - end-to-end check of the CUDA engine through the public
 * API only (qwinfer.h): parity with the CPU engine, then decode and prefill
 * throughput. Run by tests/gpu/run.sh on a lent GPU.
 *
 *   e2e [--copy-gbs X] [--peak-tflops Y] [--seconds S] [--device DEV]
 *       [--parity NAME=DIR]... [--parity-kv-fp8 NAME=DIR]... [--parity-w8a8 NAME=DIR]...
 *       [--parity-chunked NAME=DIR]...
 *       [--features NAME=DIR]...
 *       [--invariants NAME=DIR]... [--invariants-w8a8 NAME=DIR]... [--exact-invariants LIST]
 *       [--bench NAME=DIR]... [--dump DIR]
 *       [--kv-refusal DIR] [--late-refusal NAME=DIR]...
 *
 * DEV is the engine under test (default "cuda:0"); "cpu" runs every path of
 * this program against the CPU engine itself, to check the program without
 * a GPU (parity is then exact, the figures are CPU ones).
 *
 * --parity: the same prompts (lengths 1, 13, 64, 200, batched together) on a
 *   "cpu" and a "cuda:0" engine, greedy, 32 tokens, EOS ignored. Greedy
 *   tokens are compared (first divergence reported), and the logits of every
 *   sampled position up to and including the first divergence through the
 *   logits callback: max|gpu - cpu| / max|cpu| per row <= 2e-2. A divergence
 *   counts as a failure only when the CPU's token's logit on the GPU is more
 *   than 2e-2 * max|cpu| below the GPU's max (a near-tie otherwise). For a
 *   quantized model (config.json has quantization_config) both are 3e-2
 *   (PARITY_TOL_QUANT says why).
 *   On a CUDA device the prompts run a third time on an engine made with
 *   QWINFER_CUDA_GRAPHS=0 (every step eager): its tokens and logits must
 *   equal the graphed engine's bit for bit (graph replay == eager on the
 *   same steps; "GRAPH NAME PASS|FAIL" line).
 * --parity-kv-fp8: the same with both engines on an fp8 (e4m3) KV cache
 *   (QW_OPT_KV_CACHE_DTYPE QW_KV_CACHE_FP8_E4M3, the checkpoint's scales or
 *   1.0): the logits tolerance is 5e-2 instead of 2e-2 (a first estimate:
 *   the two engines round K/V to e4m3 from slightly different f32 values,
 *   and a flipped e4m3 rounding is a 1/16 step, not bf16's 1/256). The
 *   PARITY line also gives the greedy tokens agreeing before each prompt's
 *   first divergence, out of 4 x 32.
 * --parity-w8a8: --parity for an FP8 checkpoint in 128 x 128 blocks, whose
 *   steps of more than 8 rows the CUDA backend runs W8A8 (activations
 *   quantized to e4m3 per 1 x 128 group, cuda/fp8_block.h) where the CPU
 *   engine keeps bf16 activations: tolerance PARITY_TOL_W8A8, and the
 *   greedy-agreement row as for the fp8 KV cache.
 * --parity-chunked NAME=DIR: --parity with the engine under test (and its
 *   eager twin) prefilling in chunks of PARITY_CHUNK rows
 *   (QW_OPT_MAX_NUM_BATCHED_TOKENS), the CPU engine unchunked: every step
 *   has at most 32 rows, which on the CUDA backend sends a quantized
 *   model's prefill through qwk_qgemm (9 to 64 rows; cuda/qgemm.h) rather
 *   than the dequantized GEMM the unchunked prompts take. No GRAPH line:
 *   decode steps, the ones graphs replay, are those of --parity.
 * --invariants-w8a8 NAME=DIR: --invariants for such a checkpoint, the
 *   non-exact variants within INVARIANTS_TOL_W8A8.
 * --features NAME=DIR: sampling (temperature, top-k/p, min-p, seeds), logit
 *   bias and penalties, min-tokens bans, logprobs and prompt logprobs and
 *   parallel samples on the engine under test, each token checked against
 *   the sampler's definition applied to the engine's own logits and the
 *   rest against the CPU engine ("FEATURES NAME ..." lines; e2e_features.c).
 * --invariants NAME=DIR: batched == alone, chunked == unchunked (alone and
 *   mixed with decode rows), cached == cold and preempted == not on the
 *   engine under test, within the parity tolerance; bit for bit for the
 *   variants --exact-invariants LIST names (batched,chunked,mixed,cached,
 *   preempted, all, or none; for the --invariants arguments after it) and for
 *   every one with --device cpu ("INVARIANT NAME ..." lines;
 *   e2e_invariants.c).
 * --dump DIR: also write each engine's parity prompts, tokens and logits to
 *   DIR/NAME_cpu.bin and DIR/NAME_dut.bin for tests/gpu/hf_oracle.py (format
 *   in write_dump below).
 * --bench: decode tokens/s at batch 1, 16, 64, 256 (prompts of 128 tokens,
 *   a few warm-up decode steps, then S seconds of decode-only steps) with %
 *   of the bandwidth bound: bytes per step = weight bytes read by a decode
 *   step (every linear weight + norms + lm_head, bf16; a quantized linear
 *   its codes and the f32 scales/zeros the GEMV reads) + KV bytes read (sum
 *   of context lengths * 2 * layers * kv_heads * head_dim * 2); bound time =
 *   bytes / copy bandwidth (--copy-gbs, GB/s = 1e9 B/s, measured by
 *   run.sh's kernel checks). Then prefill tokens/s of 2048-token prompts
 *   (several, one after another under the default 2048-token step budget)
 *   with % of --peak-tflops: FLOPs = 2 * linear params * tokens + causal
 *   attention (2 * head_dim * L * (L + 1) per head and layer for QK^T + PV)
 *   + the lm_head row of each prompt (--peak-tflops is the bf16 GEMM's:
 *   a W8A8 model's linears run on FP8 tensor cores, twice that rate).
 *
 * --kv-refusal DIR: the CUDA backend keeps its KV cache in bf16 or fp8, so
 *   an engine asked for QW_OPT_KV_CACHE_DTYPE f32 must fail at create with
 *   QW_ERR_UNSUPPORTED and a message naming the option, and one asked for
 *   fp8 must be created ("KVDTYPE f32|fp8 PASS|FAIL" lines). Parity models
 *   may be quantized (qw-makemodel --quant): the CPU and CUDA engines then
 *   read the same codes.
 *
 * --late-refusal NAME=DIR: emulated device only (tests/cudasim; it sets the
 *   emulated cuBLASLt's QWSIM_CUBLASLT_FP8 between steps): an FP8
 *   checkpoint in 128 x 128 blocks whose block-scaled GEMM is refused after
 *   W8A8 steps ran and decode graphs were captured, and inside a capture;
 *   bit for bit with engines refused from the start or running eagerly
 *   ("LATEREFUSAL ..." lines; e2e_late_refusal.c).
 *
 * Each parity, features and invariants check restarts the prompt generator, so a
 * model sees the same prompts wherever it stands on the command line.
 *
 * Output: "PARITY NAME PASS|FAIL ..." lines, machine-readable
 * "e2e NAME VALUE UNIT PCT" lines (PCT "-" when there is no reference).
 * Exit: 0 all parity passed (and nothing failed), 1 a failure, 2 usage,
 * 77 no CUDA device ("e2e: no device" printed; nothing was measured).
 *
 * The model directories are made by qw-makemodel (bf16, so the CPU and the
 * GPU engines read identical weights); their shapes come from config.json.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "e2e.h"

#define PARITY_TOKENS 32
#define PARITY_TOL 2e-2
#define PARITY_TOL_FP8 5e-2
/* A quantized model (config.json has quantization_config): the CUDA
 * backend runs steps of more than 8 rows through weights dequantized to
 * bf16 (one rounding of code x scale per weight) where the CPU keeps code
 * and scale apart, so its KV cache and logits move further from the CPU's.
 * Measured under the CPU emulation of the kernels (tests/cudasim): worst
 * rows 1.1e-2 to 2.04e-2 over eleven tiny AWQ/GPTQ/FP8 models, against
 * 1.0e-2 for the bf16 one - 2e-2 would sit on that distribution's edge. */
#define PARITY_TOL_QUANT 3e-2
/* W8A8 (--parity-w8a8): each activation entering a linear of a prefill
 * step carries e4m3's rounding (relative <= 2^-4) on the CUDA side only.
 * An independent float64 forward of qw-makemodel FP8 checkpoints with and
 * without that rounding (numpy, 2026-12-07) puts the last prompt position's
 * logits 0.057-0.121 of max|logits| apart on four 2-layer 128-wide models
 * and 0.09-0.12 on the 0.6B shape; the emulated CUDA engine (make cudasim)
 * measured 0.119. 0.2 still fails a scale tensor read in the wrong layout
 * (errors of the order of the scales' spread, tens of percent and up);
 * check_quant's block-GEMM check is the precise one (1e-4). */
#define PARITY_TOL_W8A8 2e-1
/* --invariants-w8a8: the W8A8 engine against itself, so no W8A8 error -
 * but it amplifies any difference of accumulation order: a last-ulp change
 * of an activation can move its e4m3 code by a whole step (1/16) or its
 * group's scale, where bf16 activations move by 1/256. Emulated (the
 * cudasim build of this program, 2026-12-07, decode W8A8 too; tiny_fp8blk
 * of tests/cudasim/run.sh): batched and mixed 3.5e-2,
 * chunked 3.3e-2, preempted 6.8e-2 (the recompute's attention), cached 0;
 * with decode steps weight-only beside W8A8 prefill, as before that,
 * batched, chunked, mixed and cached moved by 8.3e-2 to 1.04e-1 with
 * divergences - the W8A8 error itself, which this tolerance must not
 * admit (preempted 6.5e-2: its two runs took the same paths). */
#define INVARIANTS_TOL_W8A8 8e-2
#define EXIT_NO_DEVICE 77
#define MAX_MODELS 12

/* The engine under test; --device changes it (e.g. "cpu" to check this program here). */
const char *e2e_dut = "cuda:0";
static const char *dump_dir = NULL;   /* --dump */
static int32_t kv_dtype = 0;          /* QW_OPT_KV_CACHE_DTYPE of e2e_make_engine*; 0: not set (auto) */
static int w8a8 = 0;                  /* the model under --parity-w8a8 */
static int parity_budget = 0;         /* the DUT's step budget under --parity-chunked; 0: default */
#define PARITY_CHUNK 32

double e2e_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static double fabs_(double x) { return x < 0 ? -x : x; }

#define RNG_START 0x9e3779b97f4a7c15ull
static uint64_t rng_state = RNG_START;
void e2e_rng_reset(void) { rng_state = RNG_START; }
static uint32_t rng_next(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (uint32_t)((z ^ (z >> 31)) >> 32);
}
void e2e_random_prompt(int32_t *ids, int n, int32_t vocab) {
    for (int i = 0; i < n; i++) ids[i] = (int32_t)(rng_next() % (uint32_t)vocab);
}

/* ---- model shape from config.json ---------------------------------------------- */
typedef struct {
    double hidden, layers, heads, kv_heads, head_dim, inter, vocab, max_pos;
    int tied;
    double linear_bytes;   /* bytes a decode step reads per linear weight  */
} shape;

static int json_num(const char *js, const char *key, double *out) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = strstr(js, pat);
    if (!p) return 0;
    p = strchr(p + strlen(pat), ':');
    if (!p) return 0;
    p++;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    if (!strncmp(p, "true", 4)) { *out = 1; return 1; }
    if (!strncmp(p, "false", 5)) { *out = 0; return 1; }
    char *end;
    *out = strtod(p, &end);
    return end != p;
}

static int read_shape(const char *dir, shape *s) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) { printf("e2e: cannot open %s\n", path); return 0; }
    char *js = calloc(1, 1 << 20);
    size_t n = js ? fread(js, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (!js || !n) { free(js); return 0; }
    double tied = 0;
    int ok = json_num(js, "hidden_size", &s->hidden) && json_num(js, "num_hidden_layers", &s->layers) &&
             json_num(js, "num_attention_heads", &s->heads) &&
             json_num(js, "num_key_value_heads", &s->kv_heads) &&
             json_num(js, "intermediate_size", &s->inter) && json_num(js, "vocab_size", &s->vocab);
    if (ok && !json_num(js, "head_dim", &s->head_dim)) s->head_dim = s->hidden / s->heads;
    if (ok && json_num(js, "tie_word_embeddings", &tied)) s->tied = tied != 0;
    if (ok && !json_num(js, "max_position_embeddings", &s->max_pos)) s->max_pos = 4096;
    s->linear_bytes = 2;
    if (ok && strstr(js, "\"quantization_config\"")) {
        /* what the CUDA backend's GEMV reads a weight (cuda/quant.h): the
         * code, plus an f32 scale (and an f32 zero for int) a row and group;
         * the head and norms stay bf16 (qw-makemodel's --gptq-lm-head
         * models are not benchmarked) */
        double bits = 8, group = 128;
        const int fp8 = strstr(js, "\"fp8\"") != NULL;
        const char *blk = strstr(js, "\"weight_block_size\"");
        if (!fp8) {
            json_num(js, "bits", &bits);
            json_num(js, "group_size", &group);
        } else if (blk && (blk = strchr(blk, '['))) {
            group = strtod(blk + 1, NULL);   /* [rows, columns]: square here */
            if (!(group > 0)) group = 128;
        }
        s->linear_bytes = bits / 8 + (fp8 ? 4.0 : 8.0) / group;
    }
    free(js);
    if (!ok) printf("e2e: %s lacks a shape field\n", path);
    return ok;
}

/* Parameters of the per-token linear layers (all layers), without embedding/lm_head. */
static double linear_params(const shape *s) {
    double q = s->heads * s->head_dim, kv = s->kv_heads * s->head_dim;
    double per = s->hidden * (q + 2 * kv) + q * s->hidden + 3 * s->hidden * s->inter;
    return s->layers * per;
}
/* Bytes of weights one decode step reads: linears (bf16, or codes and
 * their scales), norms and lm_head (bf16). */
static double decode_weight_bytes(const shape *s) {
    double norms = s->layers * (2 * s->hidden + 2 * s->head_dim) + s->hidden;
    return s->linear_bytes * linear_params(s) + 2.0 * (norms + s->vocab * s->hidden);
}
static double kv_bytes_per_token(const shape *s) { return 2.0 * s->layers * s->kv_heads * s->head_dim * 2.0; }

/* ---- engine helpers ---------------------------------------------------------------- */
qw_status e2e_make_engine_with(const char *dir, const char *dev, const e2e_engine_extra *x, qw_engine **out) {
    qw_engine_options *o = NULL;
    qw_status st = qw_engine_options_create(&o);
    if (st == QW_OK) st = qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, dir);
    if (st == QW_OK) st = qw_engine_options_set_string(o, QW_OPT_DEVICE, dev);
    if (st == QW_OK) st = qw_engine_options_set_int(o, QW_OPT_MAX_MODEL_LEN, x->max_len);
    if (st == QW_OK) st = qw_engine_options_set_int(o, QW_OPT_ENABLE_PREFIX_CACHING, x->prefix_cache);
    if (st == QW_OK && x->budget) st = qw_engine_options_set_int(o, QW_OPT_MAX_NUM_BATCHED_TOKENS, x->budget);
    if (st == QW_OK && x->blocks) st = qw_engine_options_set_int(o, QW_OPT_NUM_KV_BLOCKS, x->blocks);
    if (st == QW_OK && x->max_seqs) st = qw_engine_options_set_int(o, QW_OPT_MAX_NUM_SEQS, x->max_seqs);
    if (st == QW_OK && kv_dtype) st = qw_engine_options_set_int(o, QW_OPT_KV_CACHE_DTYPE, kv_dtype);
    if (st == QW_OK && strncmp(dev, "cuda", 4) == 0)
        st = qw_engine_options_set_double(o, QW_OPT_GPU_MEMORY_UTILIZATION, x->gpu_frac);
    if (st == QW_OK) st = qw_engine_create(o, out);
    qw_engine_options_destroy(o);
    return st;
}

qw_status e2e_make_engine(const char *dir, const char *dev, int max_len, double gpu_frac, int prefix_cache,
                          qw_engine **out) {
    const e2e_engine_extra x = {.max_len = max_len, .gpu_frac = gpu_frac, .prefix_cache = prefix_cache};
    return e2e_make_engine_with(dir, dev, &x, out);
}

qw_request *e2e_make_request(const int32_t *ids, int n, int max_tokens, void *ud) {
    qw_request *r = NULL;
    qw_status st = qw_request_create(&r);
    if (st == QW_OK) st = qw_request_set_prompt(r, ids, (size_t)n);
    if (st == QW_OK) st = qw_request_set_int(r, QW_REQ_MAX_TOKENS, max_tokens);
    if (st == QW_OK) st = qw_request_set_double(r, QW_REQ_TEMPERATURE, 0.0);
    if (st == QW_OK) st = qw_request_set_int(r, QW_REQ_IGNORE_EOS, 1);
    if (st == QW_OK) st = qw_request_set_user_data(r, ud);
    if (st != QW_OK) {
        printf("e2e: request setup failed: %s (%s)\n", qw_status_string(st), qw_last_error());
        qw_request_release(r);
        return NULL;
    }
    return r;
}

void (*e2e_before_step)(int steps_taken) = NULL;

int e2e_run_requests(qw_engine *e, qw_request *const *req, int n, void (*on_event)(const qw_event *ev)) {
    qw_event ev[64];
    int ok = 1, steps = 0;
    while (ok && qw_engine_has_work(e)) {
        size_t got = 0;
        if (e2e_before_step) e2e_before_step(steps);
        steps++;
        qw_status st = qw_engine_step(e, ev, 64, sizeof ev[0], &got);
        if (st != QW_OK) {
            printf("e2e: step failed: %s (%s)\n", qw_status_string(st), qw_last_error());
            ok = 0;
            break;
        }
        for (size_t j = 0; j < got; j++) {
            if (on_event) on_event(&ev[j]);
            if (ev[j].finish_reason == QW_FINISH_ERROR) {
                printf("e2e: request finished with an error (%s)\n", qw_last_error());
                ok = 0;
            }
        }
    }
    for (int i = 0; i < n; i++)
        if (req[i] && qw_request_get_state(req[i]) != QW_STATE_FINISHED) qw_engine_cancel(e, req[i]);
    while (qw_engine_has_work(e)) {
        size_t got = 0;
        if (qw_engine_step(e, ev, 64, sizeof ev[0], &got) != QW_OK) break;
    }
    return ok;
}

/* ---- parity ------------------------------------------------------------------------- */
#define NP 4
static const int parity_lens[NP] = {1, 13, 64, 200};

typedef e2e_seq par_seq;

static void on_logits(void *ud, qw_request *req, int32_t position, const float *logits, int32_t vocab) {
    (void)req;
    e2e_seq *s = ud;
    int k = position - s->prompt_len;
    /* a second row for one position (a preempted sequence sampling again
     * what it sampled before) is as wrong as one out of range */
    if (k < 0 || k >= E2E_MAX_TOKENS || vocab != s->vocab || s->rows[k]) { s->bad_callback++; return; }
    s->rows[k] = malloc(sizeof(float) * (size_t)vocab);
    if (s->rows[k]) memcpy(s->rows[k], logits, sizeof(float) * (size_t)vocab);
    else s->bad_callback++;
}

static void record_token(const qw_event *ev) {
    e2e_seq *s = ev->user_data;
    if (ev->kind == QW_EVENT_TOKEN && s && s->n_tokens < E2E_MAX_TOKENS) s->tokens[s->n_tokens++] = ev->token;
}

int e2e_run_greedy(qw_engine *e, int32_t *const *prompts, const int *lens, int n, int max_tokens, e2e_seq *seq) {
    int32_t vocab = qw_engine_vocab_size(e);
    qw_request *req[E2E_MAX_PROMPTS] = {0};
    int ok = n <= E2E_MAX_PROMPTS && max_tokens <= E2E_MAX_TOKENS;
    for (int i = 0; i < n && ok; i++) {
        memset(&seq[i], 0, sizeof seq[i]);
        seq[i].prompt_len = lens[i];
        seq[i].vocab = vocab;
        req[i] = e2e_make_request(prompts[i], lens[i], max_tokens, &seq[i]);
        if (!req[i]) { ok = 0; break; }
        qw_status st = qw_request_set_logits_callback(req[i], on_logits, &seq[i]);
        if (st == QW_OK) st = qw_engine_submit(e, req[i]);
        if (st != QW_OK) {
            printf("e2e: submit failed: %s (%s)\n", qw_status_string(st), qw_last_error());
            ok = 0;
        }
    }
    /* after a failed submit the others still run to their end: simpler
     * than a second path, and the result is a failure anyway */
    ok = e2e_run_requests(e, req, n < E2E_MAX_PROMPTS ? n : E2E_MAX_PROMPTS, record_token) && ok;
    for (int i = 0; i < n && i < E2E_MAX_PROMPTS; i++) {
        qw_request_stats rs = {0};
        if (req[i] && qw_request_get_stats(req[i], &rs, sizeof rs) == QW_OK)
            seq[i].cached_prompt_tokens = rs.cached_prompt_tokens;
        qw_request_release(req[i]);
    }
    return ok;
}

void e2e_seq_free(e2e_seq *seq, int n) {
    for (int i = 0; i < n; i++)
        for (int k = 0; k < E2E_MAX_TOKENS; k++) { free(seq[i].rows[k]); seq[i].rows[k] = NULL; }
}

double e2e_row_rel(const float *got, const float *ref, int32_t vocab) {
    double md = 0, mb = 0;
    for (int32_t v = 0; v < vocab; v++) {
        double x = got[v], y = ref[v];
        if (!(x == x) || !(y == y)) return 1e30;
        if (fabs_(x - y) > md) md = fabs_(x - y);
        if (fabs_(y) > mb) mb = fabs_(y);
    }
    return mb > 0 ? md / mb : md;
}

/* Runs the parity prompts on an engine; 1 on success. */
static int run_parity_engine(qw_engine *e, int32_t *const prompts[NP], par_seq seq[NP]) {
    return e2e_run_greedy(e, prompts, parity_lens, NP, PARITY_TOKENS, seq);
}

static void free_seqs(par_seq seq[NP]) { e2e_seq_free(seq, NP); }

/* Parity data for tests/gpu/hf_oracle.py: little-endian int32s "QWPD", 1
 * (version), NP, vocab, PARITY_TOKENS; then per prompt: its length L, L ids,
 * the number of tokens generated n, PARITY_TOKENS token ids (-1 past n),
 * PARITY_TOKENS rows of vocab float32 logits (the row before output k; NaN
 * where the engine gave none). 1 on success. */
static int write_dump(const char *name, const char *engine, int32_t vocab, int32_t *const prompts[NP],
                      const par_seq seq[NP]) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s_%s.bin", dump_dir, name, engine);
    FILE *f = fopen(path, "wb");
    if (!f) { printf("e2e: cannot write %s\n", path); return 0; }
    int32_t hdr[5] = {0x44505751 /* "QWPD" */, 1, NP, vocab, PARITY_TOKENS};
    int ok = fwrite(hdr, sizeof hdr, 1, f) == 1;
    float *nan_row = malloc(sizeof(float) * (size_t)vocab);
    ok = ok && nan_row;
    for (int32_t v = 0; ok && v < vocab; v++) nan_row[v] = 0.0f / 0.0f;
    for (int i = 0; i < NP && ok; i++) {
        int32_t len = parity_lens[i], n = seq[i].n_tokens, toks[PARITY_TOKENS];
        for (int k = 0; k < PARITY_TOKENS; k++) toks[k] = k < n ? seq[i].tokens[k] : -1;
        ok = fwrite(&len, 4, 1, f) == 1 && fwrite(prompts[i], 4, (size_t)len, f) == (size_t)len &&
             fwrite(&n, 4, 1, f) == 1 && fwrite(toks, 4, PARITY_TOKENS, f) == PARITY_TOKENS;
        for (int k = 0; k < PARITY_TOKENS && ok; k++)
            ok = fwrite(seq[i].rows[k] ? seq[i].rows[k] : nan_row, 4, (size_t)vocab, f) == (size_t)vocab;
    }
    free(nan_row);
    if (fclose(f) != 0) ok = 0;
    if (!ok) printf("e2e: writing %s failed\n", path);
    return ok;
}

/* The parity checks' engine under test: prefix caching on, 1024 tokens,
 * parity_budget's step budget. Returns qw_engine_create's status. */
static qw_status dut_engine(const char *dir, qw_engine **out) {
    const e2e_engine_extra x = {.max_len = 1024, .gpu_frac = 0.5, .prefix_cache = 1, .budget = parity_budget};
    return e2e_make_engine_with(dir, e2e_dut, &x, out);
}

/* Graph replay vs eager: the same prompts on an engine whose every step
 * runs eagerly must give the same tokens and logits bit for bit. 1 pass. */
static int graph_vs_eager(const char *name, const char *dir, int32_t *const prompts[NP], const par_seq gs[NP]) {
    const char *old = getenv("QWINFER_CUDA_GRAPHS");
    setenv("QWINFER_CUDA_GRAPHS", "0", 1);
    qw_engine *eager = NULL;
    qw_status st = dut_engine(dir, &eager);
    if (old) setenv("QWINFER_CUDA_GRAPHS", old, 1); else unsetenv("QWINFER_CUDA_GRAPHS");
    if (st != QW_OK) {
        printf("GRAPH %s FAIL eager engine: %s (%s)\n", name, qw_status_string(st), qw_last_error());
        return 0;
    }
    par_seq es[NP];
    int pass = run_parity_engine(eager, prompts, es), first_bad = -1;
    int32_t vocab = qw_engine_vocab_size(eager);
    for (int i = 0; i < NP && pass; i++) {
        if (es[i].n_tokens != gs[i].n_tokens || memcmp(es[i].tokens, gs[i].tokens, sizeof es[i].tokens)) {
            pass = 0, first_bad = i;
            break;
        }
        for (int k = 0; k < es[i].n_tokens && pass; k++)
            if (!es[i].rows[k] || !gs[i].rows[k] ||
                memcmp(es[i].rows[k], gs[i].rows[k], sizeof(float) * (size_t)vocab))
                pass = 0, first_bad = i;
    }
    if (pass) printf("GRAPH %s PASS graphed == eager (tokens and logits, %d prompts)\n", name, NP);
    else printf("GRAPH %s FAIL graphed != eager (prompt %d)\n", name, first_bad);
    free_seqs(es);
    qw_engine_destroy(eager);
    return pass;
}

/* 1 when DIR/config.json names a quantization_config (a plain text search:
 * this program reads no JSON; qw-makemodel writes the key only there). */
static int model_is_quantized(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    return strstr(text, "\"quantization_config\"") != NULL;
}

double e2e_parity_tol(const char *dir) { return model_is_quantized(dir) ? PARITY_TOL_QUANT : PARITY_TOL; }

/* Returns 1 pass, 0 fail, -1 no device. */
static int parity(const char *name, const char *dir) {
    qw_engine *gpu = NULL, *cpu = NULL;
    const double ptol = w8a8 ? PARITY_TOL_W8A8 : kv_dtype == QW_KV_CACHE_FP8_E4M3 ? PARITY_TOL_FP8 : e2e_parity_tol(dir);
    qw_status st = dut_engine(dir, &gpu);
    if (st == QW_ERR_NO_DEVICE) return -1;
    if (st != QW_OK) {
        printf("PARITY %s FAIL cuda engine: %s (%s)\n", name, qw_status_string(st), qw_last_error());
        return 0;
    }
    st = e2e_make_engine(dir, "cpu", 1024, 0, 1, &cpu);
    if (st != QW_OK) {
        printf("PARITY %s FAIL cpu engine: %s (%s)\n", name, qw_status_string(st), qw_last_error());
        qw_engine_destroy(gpu);
        return 0;
    }
    int32_t vocab = qw_engine_vocab_size(cpu);
    int32_t *prompts[NP];
    e2e_rng_reset(); /* each model the same prompts, wherever it stands in the arguments */
    for (int i = 0; i < NP; i++) {
        prompts[i] = malloc(sizeof(int32_t) * (size_t)parity_lens[i]);
        e2e_random_prompt(prompts[i], parity_lens[i], vocab);
    }
    par_seq cs[NP], gs[NP];
    double t0 = e2e_now_s();
    int ok = run_parity_engine(cpu, prompts, cs);
    double t1 = e2e_now_s();
    ok = run_parity_engine(gpu, prompts, gs) && ok;
    double t2 = e2e_now_s();
    printf("e2e: parity %s: cpu %.2f s, %s %.2f s\n", name, t1 - t0, e2e_dut, t2 - t1);

    int pass = ok;
    double worst_rel = 0;
    int n_equal = 0, n_agree = 0;
    for (int i = 0; i < NP && ok; i++) {
        par_seq *c = &cs[i], *g = &gs[i];
        if (c->n_tokens != PARITY_TOKENS || g->n_tokens != PARITY_TOKENS || c->bad_callback ||
            g->bad_callback) {
            printf("PARITY %s FAIL prompt %d: %d cpu / %d cuda tokens, bad callbacks %d/%d\n", name, i,
                   c->n_tokens, g->n_tokens, c->bad_callback, g->bad_callback);
            pass = 0;
            continue;
        }
        int d = 0;
        while (d < PARITY_TOKENS && c->tokens[d] == g->tokens[d]) d++;
        if (d == PARITY_TOKENS) n_equal++;
        n_agree += d;
        int last = d < PARITY_TOKENS ? d : PARITY_TOKENS - 1;
        double seq_rel = 0;
        int seq_bad = 0;
        for (int k = 0; k <= last; k++) {
            const float *a = g->rows[k], *b = c->rows[k];
            if (!a || !b) {
                printf("PARITY %s FAIL prompt %d: no logits for output %d (cpu %s, cuda %s)\n", name, i, k,
                       b ? "yes" : "no", a ? "yes" : "no");
                pass = 0, seq_bad = 1;
                break;
            }
            double rel = e2e_row_rel(a, b, vocab);
            if (rel > seq_rel) seq_rel = rel;
            if (!(rel <= ptol) && !seq_bad) {
                printf("PARITY %s FAIL prompt %d (len %d) output %d: logits rel %.3e > %.1e\n", name, i,
                       parity_lens[i], k, rel, ptol);
                pass = 0, seq_bad = 1;
            }
        }
        if (seq_rel > worst_rel) worst_rel = seq_rel;
        if (d < PARITY_TOKENS && g->rows[d] && c->rows[d]) {
            const float *a = g->rows[d], *b = c->rows[d];
            int32_t ct = c->tokens[d], gt = g->tokens[d];
            double mb = 0, gmax = a[0];
            for (int32_t v = 0; v < vocab; v++) {
                if (fabs_(b[v]) > mb) mb = fabs_(b[v]);
                if (a[v] > gmax) gmax = a[v];
            }
            /* Greedy: the GPU's token must be the max of its own logits (a
             * sampler that picked another - the first CPU emulation found
             * one answering token 1 - once passed here as a "near-tie", its
             * gap being negative); then the divergence is a near-tie when
             * the CPU's token is within tol of that max on the GPU. */
            const int gpu_argmax = (double)a[gt] == gmax;
            double gap_gpu = (double)a[gt] - (double)a[ct];
            double gap_cpu = (double)b[ct] - (double)b[gt];
            double tol = ptol * mb;
            int tie = gpu_argmax && gap_gpu <= tol;
            printf("PARITY %s %s prompt %d (len %d) diverges at output %d: cpu %d cuda %d; on cuda "
                   "logit[cuda]-logit[cpu] %.4g, on cpu logit[cpu]-logit[cuda] %.4g (tol %.4g)%s\n",
                   name, tie ? "PASS" : "FAIL", i, parity_lens[i], d, (int)ct, (int)gt, gap_gpu, gap_cpu, tol,
                   tie ? " near-tie" : gpu_argmax ? "" : " - the cuda token is not its own logits' max");
            if (!tie) pass = 0;
        }
    }
    printf("PARITY %s %s %d/%d prompts equal for %d tokens, worst logits rel %.3e (tol %.1e), greedy tokens "
           "agreeing before the first divergence %d/%d\n", name, pass ? "PASS" : "FAIL", n_equal, NP, PARITY_TOKENS,
           worst_rel, ptol, n_agree, NP * PARITY_TOKENS);
    printf("e2e parity_%s_logits_rel %.3e rel %s\n", name, worst_rel, pass ? "PASS" : "FAIL");
    if (kv_dtype == QW_KV_CACHE_FP8_E4M3 || w8a8)   /* the table row of fp8-KV / W8A8 greedy agreement */
        printf("e2e parity_%s_greedy_agree %d tokens_of_%d -\n", name, n_agree, NP * PARITY_TOKENS);
    /* decode steps, the graphs' part, are the same chunked or not */
    if (ok && strncmp(e2e_dut, "cuda", 4) == 0 && !parity_budget && !graph_vs_eager(name, dir, prompts, gs))
        pass = 0;
    if (ok && dump_dir && !(write_dump(name, "cpu", vocab, prompts, cs) && write_dump(name, "dut", vocab, prompts, gs)))
        pass = 0;
    free_seqs(cs);
    free_seqs(gs);
    for (int i = 0; i < NP; i++) free(prompts[i]);
    qw_engine_destroy(cpu);
    qw_engine_destroy(gpu);
    return pass;
}

/* ---- benchmarks ------------------------------------------------------------------- */
#define BENCH_PROMPT 128
static int bench_max_tokens = 2048; /* min(2048, max len - prompt) */
#define BENCH_WARMUP 8

typedef struct { int gen; int done; } bseq;

static void pct_str(char *buf, size_t cap, double ref, double got) {
    if (ref > 0) snprintf(buf, cap, "%.1f%%", 100.0 * got / ref);
    else snprintf(buf, cap, "-");
}

static void drain(qw_engine *e, qw_request **req, int n) {
    for (int i = 0; i < n; i++)
        if (req[i] && qw_request_get_state(req[i]) != QW_STATE_FINISHED) qw_engine_cancel(e, req[i]);
    qw_event ev[256];
    while (qw_engine_has_work(e)) {
        size_t k = 0;
        if (qw_engine_step(e, ev, 256, sizeof ev[0], &k) != QW_OK) break;
    }
    for (int i = 0; i < n; i++) qw_request_release(req[i]);
}

/* Decode at batch b: returns 1 ok. */
static int bench_decode(qw_engine *e, const char *name, const shape *s, int b, double seconds,
                        double copy_gbs) {
    int32_t vocab = qw_engine_vocab_size(e);
    qw_request **req = calloc((size_t)b, sizeof *req);
    bseq *sq = calloc((size_t)b, sizeof *sq);
    qw_event *ev = calloc((size_t)b + 16, sizeof *ev);
    int32_t ids[BENCH_PROMPT];
    int ok = req && sq && ev;
    for (int i = 0; i < b && ok; i++) {
        e2e_random_prompt(ids, BENCH_PROMPT, vocab);
        req[i] = e2e_make_request(ids, BENCH_PROMPT, bench_max_tokens, &sq[i]);
        qw_status st = req[i] ? qw_engine_submit(e, req[i]) : QW_ERR_INVALID_ARGUMENT;
        if (st != QW_OK) {
            printf("e2e: decode %s b%d submit: %s (%s)\n", name, b, qw_status_string(st), qw_last_error());
            ok = 0;
        }
    }
    /* phase: prefill until every sequence has its first token, then warm-up */
    int started = 0, warm = 0, timed_steps = 0;
    long timed_tokens = 0;
    double kv_tokens = 0, t0 = 0, t1 = 0, fwd0 = 0;
    qw_engine_stats st0, st1;
    double kvpt = kv_bytes_per_token(s);
    while (ok) {
        int timing = warm >= BENCH_WARMUP;
        double ctx = 0;
        int near_end = 0;
        if (timing) {
            for (int i = 0; i < b; i++) {
                ctx += BENCH_PROMPT + sq[i].gen;
                if (sq[i].gen >= bench_max_tokens - 1) near_end = 1;
            }
            if (timed_steps == 0) {
                memset(&st0, 0, sizeof st0);
                qw_engine_get_stats(e, &st0, sizeof st0);
                fwd0 = st0.forward_seconds;
                t0 = e2e_now_s();
            } else if (e2e_now_s() - t0 >= seconds || near_end) {
                break;
            }
        }
        size_t n = 0;
        qw_status st = qw_engine_step(e, ev, (size_t)b + 16, sizeof ev[0], &n);
        if (st != QW_OK) {
            printf("e2e: decode %s b%d step: %s (%s)\n", name, b, qw_status_string(st), qw_last_error());
            ok = 0;
            break;
        }
        long toks = 0;
        for (size_t j = 0; j < n; j++) {
            bseq *q = ev[j].user_data;
            if (ev[j].kind == QW_EVENT_TOKEN && q) {
                if (q->gen == 0) started++;
                q->gen++, toks++;
            }
            if (ev[j].finish_reason != QW_FINISH_NONE && q) {
                q->done = 1;
                if (ev[j].finish_reason != QW_FINISH_LENGTH) {
                    printf("e2e: decode %s b%d: a request finished early (reason %u: %s)\n", name, b,
                           ev[j].finish_reason, qw_last_error());
                    ok = 0;
                }
            }
        }
        if (timing) {
            timed_steps++, timed_tokens += toks, kv_tokens += ctx;
            t1 = e2e_now_s();
        } else if (started == b) {
            warm++;
        }
        if (!qw_engine_has_work(e)) break;
    }
    if (ok && timed_steps > 0) {
        memset(&st1, 0, sizeof st1);
        qw_engine_get_stats(e, &st1, sizeof st1);
        double dt = t1 - t0;
        double tps = (double)timed_tokens / dt;
        double bytes = decode_weight_bytes(s) * timed_steps + kv_tokens * kvpt;
        double bound_s = copy_gbs > 0 ? bytes / (copy_gbs * 1e9) : 0;
        char pct[32];
        pct_str(pct, sizeof pct, dt, bound_s); /* % of bound = bound time / measured time */
        printf("e2e: decode %s b%d: %d steps, %ld tokens in %.3f s (forward %.3f s), %.3f ms/step, "
               "%.2f GB/step, mean ctx %.0f\n",
               name, b, timed_steps, timed_tokens, dt, st1.forward_seconds - fwd0, 1e3 * dt / timed_steps,
               bytes / timed_steps / 1e9, kv_tokens / timed_steps / b);
        printf("e2e decode_%s_b%d %.1f tok/s %s\n", name, b, tps, pct);
        if (timed_tokens != (long)timed_steps * b) {
            printf("e2e: decode %s b%d: %ld tokens in %d steps, expected %d per step\n", name, b,
                   timed_tokens, timed_steps, b);
        }
    } else if (ok) {
        printf("e2e: decode %s b%d: no timed steps\n", name, b);
        ok = 0;
    }
    if (req) drain(e, req, b);
    free(req), free(sq), free(ev);
    return ok;
}

static int prefill_len = 2048; /* min(2048, max len - 1) */

/* Runs n prompts of prefill_len tokens, 1 output token each; returns seconds or -1. */
static double prefill_run(qw_engine *e, int n, int *steps) {
    int32_t vocab = qw_engine_vocab_size(e);
    qw_request **req = calloc((size_t)n, sizeof *req);
    int32_t *ids = malloc(sizeof(int32_t) * prefill_len);
    int ok = req && ids;
    for (int i = 0; i < n && ok; i++) {
        e2e_random_prompt(ids, prefill_len, vocab);
        req[i] = e2e_make_request(ids, prefill_len, 1, NULL);
        qw_status st = req[i] ? qw_engine_submit(e, req[i]) : QW_ERR_INVALID_ARGUMENT;
        if (st != QW_OK) {
            printf("e2e: prefill submit: %s (%s)\n", qw_status_string(st), qw_last_error());
            ok = 0;
        }
    }
    qw_event ev[64];
    double t0 = e2e_now_s();
    *steps = 0;
    while (ok && qw_engine_has_work(e)) {
        size_t k = 0;
        qw_status st = qw_engine_step(e, ev, 64, sizeof ev[0], &k);
        if (st != QW_OK) {
            printf("e2e: prefill step: %s (%s)\n", qw_status_string(st), qw_last_error());
            ok = 0;
        }
        for (size_t j = 0; j < k; j++)
            if (ev[j].finish_reason == QW_FINISH_ERROR) ok = 0;
        (*steps)++;
    }
    double dt = e2e_now_s() - t0;
    if (req) drain(e, req, n);
    free(ids);
    return ok ? dt : -1;
}

static int bench_prefill(qw_engine *e, const char *name, const shape *s, double peak_tflops) {
    int steps = 0;
    if (prefill_run(e, 2, &steps) < 0) return 0; /* warm-up: GEMM heuristics, first-use costs */
    /* size the timed run from the warm-up-free estimate: ~1 s at peak */
    double flops_one = 2.0 * linear_params(s) * prefill_len +
                       s->layers * s->heads * 2.0 * s->head_dim * (double)prefill_len * (prefill_len + 1) +
                       2.0 * s->vocab * s->hidden;
    int n = 8;
    if (peak_tflops > 0) {
        n = (int)(0.5 * peak_tflops * 1e12 / flops_one);
        if (n < 4) n = 4;
        if (n > 64) n = 64;
    }
    double dt = prefill_run(e, n, &steps);
    if (dt <= 0) return 0;
    double tps = (double)n * prefill_len / dt;
    double tflops = flops_one * n / dt / 1e12;
    char pct[32];
    pct_str(pct, sizeof pct, peak_tflops, tflops);
    printf("e2e: prefill %s: %d x %d tokens in %.3f s, %d steps, %.1f TFLOP/s\n", name, n, prefill_len, dt,
           steps, tflops);
    printf("e2e prefill_%s_%d %.0f tok/s %s\n", name, prefill_len, tps, pct);
    return 1;
}

/* Returns 1 ok, 0 failure, -1 no device. */
static int bench(const char *name, const char *dir, double seconds, double copy_gbs, double peak_tflops) {
    shape s = {0};
    if (!read_shape(dir, &s)) return 0;
    qw_engine *e = NULL;
    double t0 = e2e_now_s();
    int max_len = s.max_pos < 4096 ? (int)s.max_pos : 4096;
    bench_max_tokens = max_len - BENCH_PROMPT < 2048 ? max_len - BENCH_PROMPT : 2048;
    prefill_len = max_len - 1 < 2048 ? max_len - 1 : 2048;
    qw_status st = e2e_make_engine(dir, e2e_dut, max_len, 0.9, 0, &e);
    if (st == QW_ERR_NO_DEVICE) return -1;
    if (st != QW_OK) {
        printf("e2e: bench %s engine: %s (%s)\n", name, qw_status_string(st), qw_last_error());
        return 0;
    }
    printf("e2e: bench %s: engine up in %.1f s, %d KV blocks; %.2f GB weights read per decode step, "
           "%.1f KB KV per token, copy %.0f GB/s, peak %.0f TFLOP/s\n",
           name, e2e_now_s() - t0, qw_engine_num_kv_blocks(e), decode_weight_bytes(&s) / 1e9,
           kv_bytes_per_token(&s) / 1e3, copy_gbs, peak_tflops);
    static const int batches[] = {1, 16, 64, 256};
    int ok = 1;
    for (size_t i = 0; i < sizeof batches / sizeof batches[0]; i++)
        ok = bench_decode(e, name, &s, batches[i], seconds, copy_gbs) && ok;
    ok = bench_prefill(e, name, &s, peak_tflops) && ok;
    qw_engine_destroy(e);
    return ok;
}

/* ---- main ------------------------------------------------------------------------------ */
/* kv: the --parity-kv-fp8 cache; exact: the --exact-invariants list in
 * force when an --invariants argument was read */
typedef struct { char *name; char *dir; int32_t kv; int w8a8; int budget; const char *exact; } model_arg;

static int split_arg(char *a, model_arg *m) {
    char *eq = strchr(a, '=');
    if (!eq || eq == a || !eq[1]) return 0;
    *eq = 0;
    m->name = a, m->dir = eq + 1, m->kv = 0, m->w8a8 = 0, m->budget = 0, m->exact = "";
    return 1;
}

/* --kv-refusal: 1 f32 refused and fp8 created, as documented; 0 not; -1 no
 * device. */
static int kv_refusal(const char *dir) {
    const int32_t dts[2] = {QW_KV_CACHE_F32, QW_KV_CACHE_FP8_E4M3};
    const char *names[2] = {"f32", "fp8"};
    int ok = 1;
    for (int i = 0; i < 2; i++) {
        qw_engine_options *o = NULL;
        qw_engine *e = NULL;
        qw_status st = qw_engine_options_create(&o);
        if (st == QW_OK) st = qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, dir);
        if (st == QW_OK) st = qw_engine_options_set_string(o, QW_OPT_DEVICE, e2e_dut);
        if (st == QW_OK) st = qw_engine_options_set_int(o, QW_OPT_MAX_MODEL_LEN, 256);
        if (st == QW_OK) st = qw_engine_options_set_int(o, QW_OPT_KV_CACHE_DTYPE, dts[i]);
        if (st == QW_OK) st = qw_engine_create(o, &e);
        qw_engine_options_destroy(o);
        if (st == QW_ERR_NO_DEVICE) return -1;
        const char *msg = st == QW_OK ? "created" : qw_last_error();
        int pass = dts[i] == QW_KV_CACHE_FP8_E4M3
                       ? st == QW_OK
                       : st == QW_ERR_UNSUPPORTED && strstr(msg, "QW_OPT_KV_CACHE_DTYPE") != NULL;
        printf("KVDTYPE %s %s (%s: %s)\n", names[i], pass ? "PASS" : "FAIL", qw_status_string(st), msg);
        qw_engine_destroy(e);
        ok = ok && pass;
    }
    return ok;
}

static int usage(void) {
    fprintf(stderr, "usage: e2e [--copy-gbs X] [--peak-tflops Y] [--seconds S] [--device DEV] [--parity NAME=DIR]... "
                    "[--parity-kv-fp8 NAME=DIR]... [--parity-w8a8 NAME=DIR]... [--parity-chunked NAME=DIR]... "
                    "[--features NAME=DIR]... [--invariants NAME=DIR]... "
                    "[--invariants-w8a8 NAME=DIR]... [--exact-invariants LIST] [--bench NAME=DIR]... [--dump DIR] "
                    "[--kv-refusal DIR] [--late-refusal NAME=DIR]...\n");
    return 2;
}

/* A check answered -1: no device under test. Says so; main's exit status. */
static int no_device(void) {
    printf("e2e: no device (%s: %s)\n", e2e_dut, qw_last_error());
    return EXIT_NO_DEVICE;
}

int main(int argc, char **argv) {
    model_arg par[MAX_MODELS], ben[MAX_MODELS], fea[MAX_MODELS], inv[MAX_MODELS], late[MAX_MODELS];
    int npar = 0, nben = 0, nfea = 0, ninv = 0, nlate = 0;
    const char *kv_dir = NULL, *exact_list = "";
    double copy_gbs = 0, peak = 0, seconds = 2.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) return usage();
        if (!strcmp(a, "--copy-gbs")) copy_gbs = atof(argv[++i]);
        else if (!strcmp(a, "--peak-tflops")) peak = atof(argv[++i]);
        else if (!strcmp(a, "--seconds")) seconds = atof(argv[++i]);
        else if (!strcmp(a, "--device")) e2e_dut = argv[++i];
        else if (!strcmp(a, "--dump")) dump_dir = argv[++i];
        else if (!strcmp(a, "--kv-refusal")) kv_dir = argv[++i];
        else if (!strcmp(a, "--parity") && npar < MAX_MODELS) {
            if (!split_arg(argv[++i], &par[npar++])) return usage();
        } else if (!strcmp(a, "--parity-kv-fp8") && npar < MAX_MODELS) {
            if (!split_arg(argv[++i], &par[npar])) return usage();
            par[npar++].kv = QW_KV_CACHE_FP8_E4M3;
        } else if (!strcmp(a, "--parity-w8a8") && npar < MAX_MODELS) {
            if (!split_arg(argv[++i], &par[npar])) return usage();
            par[npar++].w8a8 = 1;
        } else if (!strcmp(a, "--parity-chunked") && npar < MAX_MODELS) {
            if (!split_arg(argv[++i], &par[npar])) return usage();
            par[npar++].budget = PARITY_CHUNK;
        } else if ((!strcmp(a, "--invariants") || !strcmp(a, "--invariants-w8a8")) && ninv < MAX_MODELS) {
            if (!split_arg(argv[++i], &inv[ninv])) return usage();
            inv[ninv].w8a8 = !strcmp(a, "--invariants-w8a8");
            inv[ninv++].exact = exact_list;
        } else if (!strcmp(a, "--exact-invariants")) {
            exact_list = argv[++i];
        } else if (!strcmp(a, "--features") && nfea < MAX_MODELS) {
            if (!split_arg(argv[++i], &fea[nfea++])) return usage();
        } else if (!strcmp(a, "--late-refusal") && nlate < MAX_MODELS) {
            if (!split_arg(argv[++i], &late[nlate++])) return usage();
        } else if (!strcmp(a, "--bench") && nben < MAX_MODELS) {
            if (!split_arg(argv[++i], &ben[nben++])) return usage();
        } else return usage();
    }
    if (npar + nfea + ninv + nben + nlate == 0 && !kv_dir) return usage();
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("e2e: qwinfer %s, device %s, copy %.0f GB/s, peak %.1f TFLOP/s, %.1f s per decode point\n",
           qw_version_string(), e2e_dut, copy_gbs, peak, seconds);
    int fails = 0;
    double t0 = e2e_now_s();
    for (int i = 0; i < npar; i++) {
        kv_dtype = par[i].kv;
        w8a8 = par[i].w8a8;
        parity_budget = par[i].budget;
        int r = parity(par[i].name, par[i].dir);
        kv_dtype = 0;
        w8a8 = 0;
        parity_budget = 0;
        if (r < 0) return no_device();
        fails += r == 0;
    }
    for (int i = 0; i < ninv; i++) {
        e2e_exact_invariants = inv[i].exact;
        e2e_invariants_tol = inv[i].w8a8 ? INVARIANTS_TOL_W8A8 : 0;
        int r = e2e_invariants(inv[i].name, inv[i].dir);
        if (r < 0) return no_device();
        fails += r == 0;
    }
    for (int i = 0; i < nfea; i++) {
        int r = e2e_features(fea[i].name, fea[i].dir);
        if (r < 0) return no_device();
        fails += r == 0;
    }
    if (kv_dir) {
        int r = kv_refusal(kv_dir);
        if (r < 0) return no_device();
        fails += r == 0;
    }
    for (int i = 0; i < nlate; i++) {
        int r = e2e_late_refusal(late[i].name, late[i].dir);
        if (r < 0) return no_device();
        fails += r == 0;
    }
    for (int i = 0; i < nben; i++) {
        int r = bench(ben[i].name, ben[i].dir, seconds, copy_gbs, peak);
        if (r < 0) return no_device();
        if (r == 0) printf("e2e: bench %s FAIL\n", ben[i].name);
        fails += r == 0;
    }
    printf("e2e: done in %.1f s, %d failed\n", e2e_now_s() - t0, fails);
    return fails ? 1 : 0;
}
