/*
 * tests/gpu/e2e.h - what e2e.c shares with its other checks
 * (e2e_features.c, e2e_invariants.c): the engine under test, engine and
 * request helpers, the prompt generator and the parity tolerance. Public
 * API only, like the program (e2e_features.c also reads lib/philox.h, the
 * definition of a seed's random stream).
 */
#ifndef QW_TESTS_GPU_E2E_H
#define QW_TESTS_GPU_E2E_H

#include <stdint.h>

#include "qwinfer.h"

/* The engine under test ("cuda:0" unless --device says otherwise). */
extern const char *e2e_dut;

/* Seconds on CLOCK_MONOTONIC. */
double e2e_now_s(void);

/* Restart the prompt generator: every check that calls this first sees the
 * same prompts whatever ran before it (results do not depend on the order
 * of the command line). */
void e2e_rng_reset(void);
/* n token ids uniform in [0, vocab) from the prompt generator. */
void e2e_random_prompt(int32_t *ids, int n, int32_t vocab);

/* An engine on model dir and device dev with max_len tokens a sequence and
 * prefix caching on or off; gpu_frac is QW_OPT_GPU_MEMORY_UTILIZATION for a
 * "cuda" device. The KV cache dtype is e2e.c's current one (--parity-kv-fp8).
 * Returns qw_engine_create's status; *out is set on QW_OK only. */
qw_status e2e_make_engine(const char *dir, const char *dev, int max_len, double gpu_frac, int prefix_cache,
                          qw_engine **out);

/* e2e_make_engine's settings, and the options some checks add (0: the
 * engine's default). */
typedef struct {
    int max_len;       /* QW_OPT_MAX_MODEL_LEN                          */
    double gpu_frac;   /* QW_OPT_GPU_MEMORY_UTILIZATION ("cuda" only)   */
    int prefix_cache;  /* QW_OPT_ENABLE_PREFIX_CACHING 0/1               */
    int budget;        /* QW_OPT_MAX_NUM_BATCHED_TOKENS                 */
    int blocks;        /* QW_OPT_NUM_KV_BLOCKS                          */
    int max_seqs;      /* QW_OPT_MAX_NUM_SEQS                           */
} e2e_engine_extra;
/* e2e_make_engine with every setting of x. */
qw_status e2e_make_engine_with(const char *dir, const char *dev, const e2e_engine_extra *x, qw_engine **out);

/* A greedy request of n prompt ids generating max_tokens tokens with EOS
 * ignored, user data ud; NULL (with the reason printed) on failure. The
 * caller owns the reference. */
qw_request *e2e_make_request(const int32_t *ids, int n, int max_tokens, void *ud);

/* The parity tolerance (max |dut - cpu| / max |cpu| per logits row) of the
 * model in dir on a bf16 KV cache: 2e-2, or 3e-2 when its config.json has a
 * quantization_config (e2e.c's PARITY_TOL_QUANT says why). */
double e2e_parity_tol(const char *dir);

/* Steps e until it has no work, handing every event to on_event (may be
 * NULL). After a failed step or a request finished with QW_FINISH_ERROR
 * (each printed), cancels whatever of req[0..n) (NULL entries allowed) is
 * unfinished and drains the engine. The caller keeps its references.
 * Returns 1 when nothing failed. */
int e2e_run_requests(qw_engine *e, qw_request *const *req, int n, void (*on_event)(const qw_event *ev));
/* Called by e2e_run_requests before each of its steps with the number of
 * steps that run has taken (NULL: none): how a check changes the emulated
 * device between two steps (e2e_late_refusal.c). */
extern void (*e2e_before_step)(int steps_taken);

/* One greedy sequence as e2e_run_greedy records it: its tokens, the logits
 * row before each output k (rows[k], malloc'd; e2e_seq_free), callbacks
 * that came for a position out of range or a second time, and the prompt
 * tokens the engine served from its prefix cache. */
#define E2E_MAX_TOKENS 32
#define E2E_MAX_PROMPTS 16
typedef struct {
    int prompt_len;
    int32_t vocab;
    int32_t tokens[E2E_MAX_TOKENS];
    int n_tokens;
    float *rows[E2E_MAX_TOKENS];
    int bad_callback;
    uint64_t cached_prompt_tokens;
} e2e_seq;

/* Runs n (<= E2E_MAX_PROMPTS) greedy requests of prompts[i] (lens[i] ids),
 * max_tokens (<= E2E_MAX_TOKENS) each, EOS ignored, together on e until
 * they finish, recording each into seq[i] (overwritten). Returns 1 when
 * every request was submitted and ran without an error; seq holds what was
 * recorded either way (free it with e2e_seq_free). */
int e2e_run_greedy(qw_engine *e, int32_t *const *prompts, const int *lens, int n, int max_tokens, e2e_seq *seq);
void e2e_seq_free(e2e_seq *seq, int n);

/* max |got - ref| / max |ref| over a logits row of vocab entries (1e30
 * when either holds a NaN). */
double e2e_row_rel(const float *got, const float *ref, int32_t vocab);

/* --features NAME=DIR (e2e_features.c): 1 pass, 0 fail, -1 no device. */
int e2e_features(const char *name, const char *dir);

/* --invariants NAME=DIR (e2e_invariants.c): 1 pass, 0 fail, -1 no device.
 * e2e_exact_invariants (set from the --exact-invariants LIST in force for
 * that argument): a comma list of the variants (batched, chunked, mixed,
 * cached, preempted, or all) that must be bit-equal on the device, as they
 * always are on the CPU engine. */
int e2e_invariants(const char *name, const char *dir);
extern const char *e2e_exact_invariants;
/* --invariants-w8a8 NAME=DIR sets it for that argument: the tolerance of
 * the non-exact variants (0: e2e_parity_tol of the model; e2e.c's
 * INVARIANTS_TOL_W8A8 says why a W8A8 model needs its own). */
extern double e2e_invariants_tol;

/* --late-refusal NAME=DIR (e2e_late_refusal.c; the emulated device only):
 * an FP8 checkpoint in 128 x 128 blocks whose block-scaled GEMM cuBLASLt
 * refuses after W8A8 steps ran. 1 pass (or skipped on the CPU engine), 0
 * fail, -1 no device. */
int e2e_late_refusal(const char *name, const char *dir);

#endif
