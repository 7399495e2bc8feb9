/*
 * tests/gpu/e2e_late_refusal.c - e2e's --late-refusal NAME=DIR, for the
 * emulated device only (tests/cudasim): an FP8 checkpoint in 128 x 128
 * blocks whose block-scaled cuBLASLt GEMM is refused after the engine has
 * run W8A8 steps. cuda/cuda_backend.cu's linear() then dequantizes in that
 * step and every later one, decode included, and drops the decode graphs
 * it captured, which replay W8A8 linears. A real cuBLASLt refusing one row
 * count after accepting another is rare, so nothing else reaches this.
 *
 * The emulated cuBLASLt reads QWSIM_CUBLASLT_FP8 at every call: this check
 * sets it to "matmul" between two steps, and from then on every
 * block-scaled matmul call fails as in a cuBLASLt that offered an
 * algorithm and refused the call.
 *
 *   after a prefill   engine A runs a wide batch (12 sequences: decode
 *                     steps of 16 rows through the block-scaled GEMM) and a
 *                     narrow one (4: the W8A8 GEMV) until their decode
 *                     graphs replay; then the refusal; then both batches
 *                     again (prefix caching off: computed afresh, the
 *                     refusal met by the first prefill). Their tokens and
 *                     logits must equal bit for bit those of engine B, made
 *                     after the refusal (dequantizing from its first step):
 *                     A's graphs from before, replayed, would run W8A8. They
 *                     must also differ from A's first run, or no refusal
 *                     happened (not the emulator).
 *   inside a capture  engine C runs the wide batch with the refusal set
 *                     before its third step, the one that captures the
 *                     16-row decode graph: the refusal comes inside the
 *                     capture, together with the scratch weight's
 *                     allocation that dequantizing needs (which a capture
 *                     cannot hold). Its tokens and logits must equal bit for
 *                     bit those of engine D, every step eager
 *                     (QWINFER_CUDA_GRAPHS=0), refused before the same step.
 *
 * Output: "LATEREFUSAL NAME <variant> PASS|FAIL detail" lines and
 * "LATEREFUSALS NAME PASS|FAIL n/2"; with --device cpu one SKIP line (the
 * CPU engine has no cuBLASLt).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2e.h"

#define LR_WIDE 12
#define LR_NARROW 4
#define LR_TOKENS 10
/* the step before which engine C and D meet the refusal: 0 prefills, 1
 * warms the 16-row decode bucket up eagerly, 2 captures it */
#define LR_CAPTURE_STEP 2

static const int wide_lens[LR_WIDE] = {2, 5, 8, 11, 14, 17, 20, 23, 26, 29, 32, 35};
static const int narrow_lens[LR_NARROW] = {5, 12, 30, 60};

static const char *REFUSE_ENV = "QWSIM_CUBLASLT_FP8";

/* Both batches' sequences of one run. */
typedef struct {
    e2e_seq wide[LR_WIDE], narrow[LR_NARROW];
} lr_run;

static void run_free(lr_run *r) {
    e2e_seq_free(r->wide, LR_WIDE);
    e2e_seq_free(r->narrow, LR_NARROW);
}

/* 256 tokens a sequence, prefix caching off: a second run of the same
 * prompts computes them afresh. */
static qw_status lr_engine(const char *dir, qw_engine **out) { return e2e_make_engine(dir, e2e_dut, 256, 0.5, 0, out); }

/* Runs the wide batch, then (narrow) the narrow one, on e; 1 ok. */
static int run_batches(qw_engine *e, int32_t *const wide[LR_WIDE], int32_t *const narrow[LR_NARROW], int with_narrow,
                       lr_run *r) {
    memset(r, 0, sizeof *r);
    int ok = e2e_run_greedy(e, wide, wide_lens, LR_WIDE, LR_TOKENS, r->wide);
    if (ok && with_narrow) ok = e2e_run_greedy(e, narrow, narrow_lens, LR_NARROW, LR_TOKENS, r->narrow);
    return ok;
}

/* 1 when seq a[0..n) and b[0..n) hold the same tokens and bit-equal logits
 * rows; else 0, with the first difference in why. Rows missing count as a
 * difference. */
static int seqs_equal(const e2e_seq *a, const e2e_seq *b, int n, const char *batch, char *why, size_t cap) {
    for (int i = 0; i < n; i++) {
        if (a[i].n_tokens != LR_TOKENS || b[i].n_tokens != LR_TOKENS || a[i].bad_callback || b[i].bad_callback) {
            snprintf(why, cap, "%s sequence %d: %d / %d tokens, bad callbacks %d / %d", batch, i, a[i].n_tokens,
                     b[i].n_tokens, a[i].bad_callback, b[i].bad_callback);
            return 0;
        }
        for (int k = 0; k < LR_TOKENS; k++) {
            if (!a[i].rows[k] || !b[i].rows[k]) {
                snprintf(why, cap, "%s sequence %d: no logits for output %d", batch, i, k);
                return 0;
            }
            const double rel = e2e_row_rel(b[i].rows[k], a[i].rows[k], a[i].vocab);
            if (rel != 0 || a[i].tokens[k] != b[i].tokens[k]) {
                snprintf(why, cap, "%s sequence %d output %d: logits rel %.3e, tokens %d / %d", batch, i, k, rel,
                         a[i].tokens[k], b[i].tokens[k]);
                return 0;
            }
        }
    }
    return 1;
}

/* e2e_before_step hook: sets the refusal when the run has taken
 * refuse_at steps. */
static int refuse_at = -1;
static void refuse_before(int steps_taken) {
    if (steps_taken == refuse_at) setenv(REFUSE_ENV, "matmul", 1);
}

/* The variant "after a prefill"; 1 pass. */
static int after_prefill(const char *name, const char *dir, int32_t *const wide[LR_WIDE],
                         int32_t *const narrow[LR_NARROW]) {
    lr_run before, after, ref;
    memset(&before, 0, sizeof before);
    memset(&after, 0, sizeof after);
    memset(&ref, 0, sizeof ref);
    char why[300] = "", w8a8_diff[300] = "";
    const char *failed = NULL;   /* the step that failed, if one did */
    qw_engine *a = NULL, *b = NULL;
    if (lr_engine(dir, &a) != QW_OK) failed = "engine A";
    else if (!run_batches(a, wide, narrow, 1, &before)) failed = "engine A's W8A8 run";
    setenv(REFUSE_ENV, "matmul", 1);
    if (!failed && !run_batches(a, wide, narrow, 1, &after)) failed = "engine A's run after the refusal";
    if (!failed && lr_engine(dir, &b) != QW_OK) failed = "engine B";
    else if (!failed && !run_batches(b, wide, narrow, 1, &ref)) failed = "engine B's run";
    unsetenv(REFUSE_ENV);
    int ok = !failed;
    if (failed) {
        snprintf(why, sizeof why, "%s failed (%s)", failed, qw_last_error());
    } else if (seqs_equal(before.wide, after.wide, LR_WIDE, "wide", w8a8_diff, sizeof w8a8_diff)) {
        snprintf(why, sizeof why, "the run after the refusal equals the W8A8 one: nothing was refused (is this "
                                  "the emulator?)");
        ok = 0;
    } else {
        ok = seqs_equal(ref.wide, after.wide, LR_WIDE, "wide", why, sizeof why) &&
             seqs_equal(ref.narrow, after.narrow, LR_NARROW, "narrow", why, sizeof why);
    }
    if (ok)
        snprintf(why, sizeof why, "%d + %d sequences x %d tokens bit for bit with an engine refused from its start "
                                  "(and not with the W8A8 run: %s)", LR_WIDE, LR_NARROW, LR_TOKENS, w8a8_diff);
    printf("LATEREFUSAL %s %-18s %s %s\n", name, "after-a-prefill", ok ? "PASS" : "FAIL", why);
    run_free(&before);
    run_free(&after);
    run_free(&ref);
    qw_engine_destroy(a);
    qw_engine_destroy(b);
    return ok;
}

/* The variant "inside a capture"; 1 pass. */
static int inside_capture(const char *name, const char *dir, int32_t *const wide[LR_WIDE]) {
    lr_run got, ref;
    memset(&got, 0, sizeof got);
    memset(&ref, 0, sizeof ref);
    char why[300] = "";
    int ok = 1;
    for (int eager = 0; eager < 2 && ok; eager++) {
        qw_engine *e = NULL;
        if (eager) setenv("QWINFER_CUDA_GRAPHS", "0", 1);
        qw_status st = lr_engine(dir, &e);
        if (eager) unsetenv("QWINFER_CUDA_GRAPHS");
        if (st != QW_OK) {
            snprintf(why, sizeof why, "engine: %s (%s)", qw_status_string(st), qw_last_error());
            ok = 0;
            break;
        }
        refuse_at = LR_CAPTURE_STEP;
        e2e_before_step = refuse_before;
        if (!run_batches(e, wide, NULL, 0, eager ? &ref : &got)) {
            snprintf(why, sizeof why, "the %s run failed (%s)", eager ? "eager" : "graphed", qw_last_error());
            ok = 0;
        }
        e2e_before_step = NULL;
        refuse_at = -1;
        unsetenv(REFUSE_ENV);
        qw_engine_destroy(e);
    }
    if (ok) ok = seqs_equal(ref.wide, got.wide, LR_WIDE, "wide", why, sizeof why);
    if (ok)
        snprintf(why, sizeof why, "%d sequences x %d tokens bit for bit with an eager engine refused before the same "
                                  "step", LR_WIDE, LR_TOKENS);
    printf("LATEREFUSAL %s %-18s %s %s\n", name, "inside-a-capture", ok ? "PASS" : "FAIL", why);
    run_free(&got);
    run_free(&ref);
    return ok;
}

int e2e_late_refusal(const char *name, const char *dir) {
    if (!strcmp(e2e_dut, "cpu")) {
        printf("LATEREFUSALS %s SKIP the CPU engine has no cuBLASLt\n", name);
        return 1;
    }
    if (getenv(REFUSE_ENV)) {
        printf("LATEREFUSALS %s FAIL %s is set already: nothing would be late\n", name, REFUSE_ENV);
        return 0;
    }
    qw_engine *probe = NULL;
    qw_status st = lr_engine(dir, &probe);
    if (st == QW_ERR_NO_DEVICE) return -1;
    if (st != QW_OK) {
        printf("LATEREFUSALS %s FAIL engine: %s (%s)\n", name, qw_status_string(st), qw_last_error());
        return 0;
    }
    const int32_t V = qw_engine_vocab_size(probe);
    qw_engine_destroy(probe);
    int32_t *wide[LR_WIDE], *narrow[LR_NARROW];
    int ok = 1;
    e2e_rng_reset();
    for (int i = 0; i < LR_WIDE; i++) {
        wide[i] = malloc(sizeof(int32_t) * (size_t)wide_lens[i]);
        if (wide[i]) e2e_random_prompt(wide[i], wide_lens[i], V);
        else ok = 0;
    }
    for (int i = 0; i < LR_NARROW; i++) {
        narrow[i] = malloc(sizeof(int32_t) * (size_t)narrow_lens[i]);
        if (narrow[i]) e2e_random_prompt(narrow[i], narrow_lens[i], V);
        else ok = 0;
    }
    const double t0 = e2e_now_s();
    int npass = 0;
    if (ok) npass = after_prefill(name, dir, wide, narrow) + inside_capture(name, dir, wide);
    printf("e2e: late refusal %s: %.2f s on %s\n", name, e2e_now_s() - t0, e2e_dut);
    printf("LATEREFUSALS %s %s %d/2\n", name, npass == 2 ? "PASS" : "FAIL", npass);
    for (int i = 0; i < LR_WIDE; i++) free(wide[i]);
    for (int i = 0; i < LR_NARROW; i++) free(narrow[i]);
    return npass == 2;
}
