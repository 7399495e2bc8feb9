/*
 * tests/gpu/e2e_invariants.c - e2e's --invariants NAME=DIR: the design's
 * scheduling invariants on the engine under test (the DUT), end to end:
 *
 *   batched   batched == alone: five prompts together, beside 11 short
 *             others (16 sequences a decode step: a batch at which a kernel
 *             sized by the batch - split-K over the context, a GEMM's tile
 *             choice - takes another shape than for one sequence), vs each
 *             on its own;
 *   chunked   chunked == unchunked: each prompt alone under a 32-token step
 *             budget, so it prefills in chunks of 32 that start mid-prompt
 *             (the 161-token prompt's last chunk is one row);
 *   mixed     the five together under that budget: chunks of one prompt in
 *             the same steps as other prompts' decode rows;
 *   cached    cached == cold: two prompts whose first 160 tokens (10 blocks)
 *             are in the prefix cache from an earlier request, one with 20
 *             more tokens to prefill, one with a single one (a chunk of one
 *             row that is a prompt token, not a decode row);
 *   preempted preempted == not: the five in a KV pool too small for all of
 *             them (the engine must preempt and recompute).
 *
 * These are the paths where a backend indexes its paged KV cache in every
 * way the scheduler can ask for: partial chunks (positions, slots and
 * context lengths that start mid-prompt), block tables that start with
 * shared blocks, and blocks that are freed and handed to another sequence.
 * The reference is each prompt alone on a fresh engine; each variant runs
 * on a fresh engine too. Greedy, 16 tokens, EOS ignored; tokens and every
 * sampled position's logits (logits callback) compared.
 *
 * Exact (the variants --exact-invariants names, and all of them for
 * --device cpu, whose design makes them bit for bit): tokens and logits
 * equal. Otherwise (a GPU, where a GEMM may take another kernel for another
 * row count, and the CUDA backend recomputes a preempted sequence's
 * generated tokens through the prefill attention kernel, whose arithmetic
 * is not the decode kernel's): logits rows
 * within the parity tolerance up to the first divergence, which must be a
 * near-tie on the variant's own logits, as e2e.c's parity. Each line also
 * gives the largest difference, so a tolerance pass still says how far from
 * exact it was. The preemption and prefix-cache variants must show that
 * they happened (the engine's preemption count, the request's cached prompt
 * tokens), or they checked nothing.
 *
 * Output: "INVARIANT NAME <variant> PASS|FAIL detail" lines and
 * "INVARIANTS NAME PASS|FAIL n/5".
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2e.h"

#define IV_PROMPTS 5
#define IV_TOKENS 16
#define IV_SHARED 160 /* prefix shared with prompt 0 (IV_CACHED below): 10 blocks of 16 */
#define IV_FILLERS 11 /* the batched variant's other sequences, not compared */

const char *e2e_exact_invariants = "";
double e2e_invariants_tol = 0;

/* IV_CACHED and IV_CACHED + 1 start with prompt 0's first IV_SHARED tokens;
 * the second is prompt 0's first 161 */
#define IV_CACHED 3
static const int iv_lens[IV_PROMPTS] = {200, 37, 1, 180, 161};

typedef e2e_seq iv_seq;


/* One variant: its name, its key in --exact-invariants and its engine. */
typedef struct {
    const char *what, *key;
    int prefix_cache, budget, blocks, one_seq, fillers; /* 0: the default */
} iv_variant;

/* A fresh engine for one variant. A small pool must still hold one
 * sequence of the model length: 256 tokens there. */
static qw_status variant_engine(const char *dir, const iv_variant *va, qw_engine **out) {
    const e2e_engine_extra x = {.max_len = va->blocks ? 256 : 1024, .gpu_frac = 0.5,
                                .prefix_cache = va->prefix_cache, .budget = va->budget, .blocks = va->blocks,
                                .max_seqs = va->one_seq};
    return e2e_make_engine_with(dir, e2e_dut, &x, out);
}

/* Runs prompts[first..first+n) together on e into seq[first..); 1 ok. */
static int run_prompts(qw_engine *e, int32_t *const prompts[IV_PROMPTS], iv_seq seq[IV_PROMPTS], int first,
                       int n) {
    return e2e_run_greedy(e, prompts + first, iv_lens + first, n, IV_TOKENS, seq + first);
}

/* Runs the prompts together with IV_FILLERS short random ones (3 to 33
 * tokens) on e, the prompts into seq[0..IV_PROMPTS); 1 ok. The fillers' outputs are
 * not compared: they are there to make the batch wide. */
static int run_with_fillers(qw_engine *e, int32_t *const prompts[IV_PROMPTS], iv_seq seq[IV_PROMPTS]) {
    enum { N = IV_PROMPTS + IV_FILLERS };
    int32_t *all[N];
    int lens[N], ok = 1;
    iv_seq got[N];
    memset(got, 0, sizeof got);
    const int32_t V = qw_engine_vocab_size(e);
    for (int i = 0; i < N; i++) {
        lens[i] = i < IV_PROMPTS ? iv_lens[i] : 3 + 3 * (i - IV_PROMPTS);
        all[i] = i < IV_PROMPTS ? prompts[i] : malloc(sizeof(int32_t) * (size_t)lens[i]);
        if (!all[i]) ok = 0;
        else if (i >= IV_PROMPTS) e2e_random_prompt(all[i], lens[i], V);
    }
    if (ok) ok = e2e_run_greedy(e, all, lens, N, IV_TOKENS, got);
    memcpy(seq, got, sizeof(iv_seq) * IV_PROMPTS);
    e2e_seq_free(got + IV_PROMPTS, IV_FILLERS);
    for (int i = IV_PROMPTS; i < N; i++) free(all[i]);
    return ok;
}

/* Compares a variant's sequences with the reference's; writes the verdict's
 * detail into why. 1 pass. */
static int compare(const iv_seq ref[IV_PROMPTS], const iv_seq got[IV_PROMPTS], int first, int n, double ptol,
                   int exact, char *why, size_t cap) {
    double worst = 0;
    int n_equal = 0, pass = 1;
    size_t len = 0;
    why[0] = 0;
    for (int i = first; i < first + n; i++) {
        const iv_seq *a = &ref[i], *b = &got[i];
        if (a->n_tokens != IV_TOKENS || b->n_tokens != IV_TOKENS || a->bad_callback || b->bad_callback) {
            snprintf(why, cap, "prompt %d: %d / %d tokens, bad callbacks %d / %d", i, a->n_tokens, b->n_tokens,
                     a->bad_callback, b->bad_callback);
            return 0;
        }
        int d = 0;
        while (d < IV_TOKENS && a->tokens[d] == b->tokens[d]) d++;
        int32_t V = a->vocab;
        for (int k = 0; k <= d && k < IV_TOKENS; k++) {
            if (!a->rows[k] || !b->rows[k]) {
                snprintf(why, cap, "prompt %d: no logits for output %d", i, k);
                return 0;
            }
            double rel = e2e_row_rel(b->rows[k], a->rows[k], V);
            if (!(rel <= worst)) worst = rel;
            if (pass && (exact ? rel != 0 : !(rel <= ptol))) {
                len += (size_t)snprintf(why + len, cap - len, "prompt %d (len %d) output %d: logits rel %.3e; ", i,
                                        iv_lens[i], k, rel);
                pass = 0;
            }
        }
        if (d == IV_TOKENS) { n_equal++; continue; }
        if (exact) {
            if (pass) len += (size_t)snprintf(why + len, cap - len, "prompt %d diverges at output %d; ", i, d);
            pass = 0;
            continue;
        }
        /* a near-tie on the variant's own row: its token its max, the
         * reference's token within the tolerance below it */
        const float *r = b->rows[d];
        double mb = 0, mx = r[0];
        for (int32_t v = 0; v < V; v++) {
            if (fabs(a->rows[d][v]) > mb) mb = fabs(a->rows[d][v]);
            if (r[v] > mx) mx = r[v];
        }
        int32_t gt = b->tokens[d], rt = a->tokens[d];
        if (!((double)r[gt] == mx && (double)r[gt] - r[rt] <= ptol * mb)) {
            if (pass)
                len += (size_t)snprintf(why + len, cap - len, "prompt %d diverges at output %d, not a near-tie; ", i,
                                        d);
            pass = 0;
        }
        if (len >= cap) len = cap - 1;
    }
    if (len >= cap) len = cap - 1;
    snprintf(why + len, cap - len, "%d/%d prompts equal for %d tokens, largest logits rel %.3e%s", n_equal, n,
             IV_TOKENS, worst, exact ? " (exact asked)" : "");
    return pass;
}

/* Runs one variant on a fresh engine and compares it; 1 pass, 0 fail. */
static int variant(const char *name, const iv_variant *va, const char *dir, int32_t *const prompts[IV_PROMPTS],
                   const iv_seq ref[IV_PROMPTS], double ptol, int exact) {
    const char *what = va->what;
    const int prefix_cache = va->prefix_cache, blocks = va->blocks;
    qw_engine *e = NULL;
    qw_status st = variant_engine(dir, va, &e);
    if (st != QW_OK) {
        printf("INVARIANT %s %-20s FAIL engine: %s (%s)\n", name, what, qw_status_string(st), qw_last_error());
        return 0;
    }
    iv_seq got[IV_PROMPTS];
    memset(got, 0, sizeof got);
    char why[600], extra[120] = "";
    int ok, first = 0, n = IV_PROMPTS;
    if (prefix_cache) {
        /* prompt 0 first, alone: its full blocks go to the cache; then
         * the two that start with the same IV_SHARED tokens, each alone (the
         * second has one token more: a one-row prompt chunk) */
        ok = run_prompts(e, prompts, got, 0, 1) && run_prompts(e, prompts, got, IV_CACHED, 1) &&
             run_prompts(e, prompts, got, IV_CACHED + 1, 1);
        first = IV_CACHED, n = 2;
        const unsigned long long c1 = got[IV_CACHED].cached_prompt_tokens,
                                 c2 = got[IV_CACHED + 1].cached_prompt_tokens;
        if (ok && (c1 < IV_SHARED || c2 < IV_SHARED)) {
            snprintf(extra, sizeof extra, "; only %llu and %llu prompt tokens came from the cache (want >= %d)",
                     c1, c2, IV_SHARED);
            ok = 0;
        } else snprintf(extra, sizeof extra, "; %llu and %llu prompt tokens from the cache", c1, c2);
    } else if (va->fillers) {
        ok = run_with_fillers(e, prompts, got);
        snprintf(extra, sizeof extra, "; beside %d other sequences", va->fillers);
    } else {
        ok = run_prompts(e, prompts, got, 0, IV_PROMPTS);
        qw_engine_stats es = {0};
        if (blocks && ok && qw_engine_get_stats(e, &es, sizeof es) == QW_OK) {
            if (es.num_preemptions == 0) {
                snprintf(extra, sizeof extra, "; no preemption happened in %d blocks", blocks);
                ok = 0;
            } else snprintf(extra, sizeof extra, "; %llu preemptions", (unsigned long long)es.num_preemptions);
        }
    }
    int pass = compare(ref, got, first, n, ptol, exact, why, sizeof why) && ok;
    printf("INVARIANT %s %-20s %s %s%s\n", name, what, pass ? "PASS" : "FAIL", why, extra);
    e2e_seq_free(got, IV_PROMPTS);
    qw_engine_destroy(e);
    return pass;
}

/* 1 when variant key must be exact: --device cpu, or key (or "all") in
 * the comma list of --exact-invariants. */
static int exact_for(const char *key) {
    if (strcmp(e2e_dut, "cpu") == 0) return 1;
    const char *p = e2e_exact_invariants;
    size_t n = strlen(key);
    while (p && *p) {
        size_t len = strcspn(p, ",");
        if ((len == n && !strncmp(p, key, n)) || (len == 3 && !strncmp(p, "all", 3))) return 1;
        p += len + (p[len] == ',');
    }
    return 0;
}

int e2e_invariants(const char *name, const char *dir) {
    static const iv_variant variants[] = {
        {"batched==alone", "batched", 0, 0, 0, 0, IV_FILLERS},
        {"chunked==unchunked", "chunked", 0, 32, 0, 1, 0},
        {"mixed==alone", "mixed", 0, 32, 0, 0, 0},
        {"cached==cold", "cached", 1, 0, 0, 0, 0},
        /* 16 blocks of 16: prompt 0 alone takes 13 and grows to 14, the
         * others wait or take the rest: the engine must preempt */
        {"preempted==not", "preempted", 0, 0, 16, 0, 0},
    };
    enum { NV = sizeof variants / sizeof variants[0] };
    const iv_variant plain = {"reference", "", 0, 0, 0, 0, 0};
    qw_engine *e = NULL;
    qw_status st = variant_engine(dir, &plain, &e);
    if (st == QW_ERR_NO_DEVICE) return -1;
    if (st != QW_OK) {
        printf("INVARIANTS %s FAIL engine: %s (%s)\n", name, qw_status_string(st), qw_last_error());
        return 0;
    }
    const double ptol = e2e_invariants_tol > 0 ? e2e_invariants_tol : e2e_parity_tol(dir);

    int32_t V = qw_engine_vocab_size(e);
    int32_t *prompts[IV_PROMPTS];
    e2e_rng_reset();
    for (int i = 0; i < IV_PROMPTS; i++) {
        prompts[i] = malloc(sizeof(int32_t) * (size_t)iv_lens[i]);
        if (prompts[i]) e2e_random_prompt(prompts[i], iv_lens[i], V);
    }
    memcpy(prompts[IV_CACHED], prompts[0], sizeof(int32_t) * IV_SHARED);
    memcpy(prompts[IV_CACHED + 1], prompts[0], sizeof(int32_t) * (size_t)iv_lens[IV_CACHED + 1]);

    /* the reference: each prompt alone, prefix caching off */
    iv_seq ref[IV_PROMPTS];
    memset(ref, 0, sizeof ref);
    double t0 = e2e_now_s();
    int ok = 1;
    for (int i = 0; i < IV_PROMPTS && ok; i++) ok = run_prompts(e, prompts, ref, i, 1);
    qw_engine_destroy(e);
    int npass = 0;
    if (ok) {
        for (int v = 0; v < NV; v++)
            npass += variant(name, &variants[v], dir, prompts, ref, ptol, exact_for(variants[v].key));
    } else {
        printf("INVARIANTS %s FAIL the reference run failed\n", name);
    }
    printf("e2e: invariants %s: %.2f s on %s\n", name, e2e_now_s() - t0, e2e_dut);
    printf("INVARIANTS %s %s %d/%d\n", name, npass == NV ? "PASS" : "FAIL", npass, (int)NV);
    e2e_seq_free(ref, IV_PROMPTS);
    for (int i = 0; i < IV_PROMPTS; i++) free(prompts[i]);
    return npass == NV;
}
