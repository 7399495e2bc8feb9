/*
 * tests/gpu/e2e_features.c - e2e's --features NAME=DIR: the request
 * features a backend carries besides greedy decoding, end to end through
 * the public API: sampling (temperature, top-k, top-p, min-p, seeds), logit
 * bias and the three penalties, banned ids (QW_REQ_MIN_TOKENS with a stop
 * token), logprobs and prompt logprobs, parallel samples (QW_REQ_N).
 *
 * Eight requests run batched on the engine under test (the DUT) and on a
 * "cpu" engine, both taking at most 12 sequences a step (so that the
 * prompt logprobs need two passes of the CUDA backend's logits rows). Every token the DUT generates is checked against the DUT's
 * own raw logits (the logits callback): the host applies the bias and the
 * penalties by their definition (qwinfer.h, "Penalties") and picks the token
 * by the sampler's definition (lib/sample.c's header), written again here
 * with a plain sort. So a backend that packs a parameter into the wrong
 * row, penalises the wrong id, drops a banned id or reads the seed wrong
 * fails, whatever its arithmetic; and logprobs, checked against the
 * log-softmax (double) of the same raw row, fail if the penalties were not
 * undone before they were taken. A pick that sits within MARGIN (relative)
 * of one of the definition's boundaries - a CDF step, a top-k/top-p/min-p
 * cut, a greedy tie - passes either way: the device's exp may differ from
 * the host's by an ulp. The random stream is lib/philox.h itself: it *is*
 * the definition of a seed's draws (both backends compile that header).
 *
 * Against the CPU engine (its logits differ by rounding): the raw rows up to
 * each request's first divergence within the parity tolerance, the greedy
 * requests' divergences near-ties of their penalised rows, the prompt
 * logprobs (whose rows the callback does not show) as sorted values within
 * twice that tolerance times the row's scale, and the sampled requests'
 * agreement reported (a draw near a CDF step may go either way).
 * Structure: the parallel samples equal two separate requests with seeds s
 * and s + 1 in the same batch, the min-tokens request stops on its stop
 * token exactly at the first allowed place.
 *
 * With --device cpu the program checks itself: everything holds exactly.
 * Output: "FEATURES NAME <request> PASS|FAIL detail" lines and a summary
 * "FEATURES NAME PASS|FAIL n/m requests".
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2e.h"
#include "../../lib/philox.h"

#define FT_TOKENS 16           /* most tokens a request generates          */
#define FT_PROMPT 40           /* longest prompt                           */
#define FT_TOP 5               /* most logprobs asked                      */
#define MARGIN 1e-6            /* boundary distance that passes either way */
#define LP_TOL_ABS 2e-4        /* DUT logprob vs log-softmax of its row    */

/* One request of the check. Sampling parameters as the engine keeps them
 * (floats), so the host's arithmetic starts from the same values. */
typedef struct {
    const char *what;
    int prompt_len, max_tokens;
    float temperature, top_p, min_p;
    int top_k;
    uint64_t seed;
    float rep, pres, freq;
    int nbias;
    int32_t bias_ids[3];
    float bias[3];
    int logprobs, prompt_logprobs; /* -1: off */
    int n;                         /* QW_REQ_N */
    int min_tokens;                /* with stop_token >= 0 */
    int32_t stop_token;
    int prompt_from;               /* -1 own prompt; else share request i's */
    int repeats;                   /* prompt drawn from this many ids (0: any) */
} ft_spec;

typedef struct {
    const ft_spec *sp;
    int32_t prompt[FT_PROMPT];
    int32_t vocab;
    float *rows[FT_TOKENS]; /* raw logits before output k (callback) */
    int bad_callback;
    qw_request *req;
    int32_t tokens[2][FT_TOKENS]; /* [sample][k] */
    size_t n_tokens[2];
    int finish;
    qw_logprob lp[FT_TOKENS], lp_top[FT_TOKENS][FT_TOP];
    size_t lp_ntop[FT_TOKENS];
    int lp_status;
    qw_logprob plp[FT_PROMPT], plp_top[FT_PROMPT][FT_TOP];
    size_t plp_ntop[FT_PROMPT];
    int plp_status;
} ft_run;

enum { R_LOGPROBS, R_PENALTIES, R_SAMPLING, R_SAMPLING_PEN, R_N2, R_TWIN0, R_TWIN1, R_MIN_TOKENS, NREQ };

/* The requests. Token ids named here (bias, stop) are taken modulo the
 * vocabulary at run time; a bias id -1 - j means the request's prompt[j]
 * (an id the repetition penalty also acts on). */
static ft_spec specs[NREQ] = {
    [R_LOGPROBS] = {"logprobs", 24, 16, 0.0f, 1.0f, 0.0f, 0, 0, 1.0f, 0, 0, 0, {0}, {0}, 5, 3, 1, 0, -1, -1, 0},
    [R_PENALTIES] = {"penalties", 40, 16, 0.0f, 1.0f, 0.0f, 0, 0, 1.3f, 0.4f, 0.6f, 3, {-1, 1001, 20011},
                     {0.0f /* calibrate_prompt_bias */, -8.0f, 2.5f}, 3, -1, 1, 0, -1, -1, 6},
    [R_SAMPLING] = {"sampling", 13, 16, 0.9f, 0.92f, 0.01f, 8, 1234, 1.0f, 0, 0, 0, {0}, {0}, 2, -1, 1, 0, -1, -1, 0},
    [R_SAMPLING_PEN] = {"sampling+penalties", 30, 16, 1.2f, 0.8f, 0.3f, 0, 99, 1.1f, 0.3f, 0.5f, 1, {11}, {2.0f},
                        3, -1, 1, 0, -1, -1, 5},
    [R_N2] = {"n=2", 13, 12, 1.0f, 1.0f, 0.0f, 3, 77, 1.0f, 0, 0, 0, {0}, {0}, -1, -1, 2, 0, -1, -1, 0},
    [R_TWIN0] = {"n=2 twin seed", 13, 12, 1.0f, 1.0f, 0.0f, 3, 77, 1.0f, 0, 0, 0, {0}, {0}, -1, -1, 1, 0, -1, R_N2, 0},
    [R_TWIN1] = {"n=2 twin seed+1", 13, 12, 1.0f, 1.0f, 0.0f, 3, 78, 1.0f, 0, 0, 0, {0}, {0}, -1, -1, 1, 0, -1, R_N2, 0},
    [R_MIN_TOKENS] = {"min_tokens", 9, 16, 0.0f, 1.0f, 0.0f, 0, 0, 1.0f, 0, 0, 1, {313}, {100.0f}, -1, -1, 1, 5, 313,
                      -1, 0},
};

/* The vocabulary id of bias entry i of r's request. A fixed id that
 * falls on a prompt-named entry's id moves to the next one (the bias map's
 * ids must be distinct; at most one entry names a prompt id). */
static int32_t bias_id(const ft_run *r, int i) {
    int32_t id = r->sp->bias_ids[i];
    if (id < 0) return r->prompt[-id - 1];
    id %= r->vocab;
    for (int j = 0; j < r->sp->nbias; j++)
        if (r->sp->bias_ids[j] < 0 && r->prompt[-r->sp->bias_ids[j] - 1] == id) id = (id + 1) % r->vocab;
    return id;
}

static void on_row(void *ud, qw_request *req, int32_t position, const float *logits, int32_t vocab) {
    (void)req;
    ft_run *r = ud;
    int k = position - r->sp->prompt_len;
    if (k < 0 || k >= FT_TOKENS || vocab != r->vocab || r->rows[k]) { r->bad_callback++; return; }
    r->rows[k] = malloc(sizeof(float) * (size_t)vocab);
    if (r->rows[k]) memcpy(r->rows[k], logits, sizeof(float) * (size_t)vocab);
    else r->bad_callback++;
}

static qw_request *make_ft_request(ft_run *r) {
    const ft_spec *sp = r->sp;
    qw_request *q = e2e_make_request(r->prompt, sp->prompt_len, sp->max_tokens, r);
    if (!q) return NULL;
    int32_t ids[3];
    for (int i = 0; i < sp->nbias; i++) ids[i] = bias_id(r, i);
    int32_t stop = sp->stop_token >= 0 ? sp->stop_token % r->vocab : -1;
    qw_status st = qw_request_set_double(q, QW_REQ_TEMPERATURE, sp->temperature);
    if (st == QW_OK && sp->top_k) st = qw_request_set_int(q, QW_REQ_TOP_K, sp->top_k);
    if (st == QW_OK) st = qw_request_set_double(q, QW_REQ_TOP_P, sp->top_p);
    if (st == QW_OK) st = qw_request_set_double(q, QW_REQ_MIN_P, sp->min_p);
    if (st == QW_OK) st = qw_request_set_int(q, QW_REQ_SEED, (int64_t)sp->seed);
    if (st == QW_OK) st = qw_request_set_double(q, QW_REQ_REPETITION_PENALTY, sp->rep);
    if (st == QW_OK) st = qw_request_set_double(q, QW_REQ_PRESENCE_PENALTY, sp->pres);
    if (st == QW_OK) st = qw_request_set_double(q, QW_REQ_FREQUENCY_PENALTY, sp->freq);
    if (st == QW_OK && sp->nbias) st = qw_request_set_logit_bias(q, ids, sp->bias, (size_t)sp->nbias);
    if (st == QW_OK) st = qw_request_set_int(q, QW_REQ_LOGPROBS, sp->logprobs);
    if (st == QW_OK) st = qw_request_set_int(q, QW_REQ_PROMPT_LOGPROBS, sp->prompt_logprobs);
    if (st == QW_OK) st = qw_request_set_int(q, QW_REQ_N, sp->n);
    if (st == QW_OK && stop >= 0) st = qw_request_set_stop_tokens(q, &stop, 1);
    if (st == QW_OK && sp->min_tokens) st = qw_request_set_int(q, QW_REQ_MIN_TOKENS, sp->min_tokens);
    /* parallel samples share one user_data; their rows are not checked */
    if (st == QW_OK && sp->n == 1) st = qw_request_set_logits_callback(q, on_row, r);
    if (st != QW_OK) {
        printf("e2e: features request %s: %s (%s)\n", sp->what, qw_status_string(st), qw_last_error());
        qw_request_release(q);
        return NULL;
    }
    return q;
}

/* Reads what a finished request left: tokens of each sample, finish
 * reason, logprobs and prompt logprobs. */
static void collect(ft_run *r) {
    const ft_spec *sp = r->sp;
    for (int s = 0; s < sp->n && s < 2; s++) {
        qw_request *h = NULL;
        if (qw_request_get_sample(r->req, (uint32_t)s, &h) != QW_OK ||
            qw_request_get_tokens(h, r->tokens[s], FT_TOKENS, &r->n_tokens[s]) != QW_OK)
            r->n_tokens[s] = 0;
        if (r->n_tokens[s] > FT_TOKENS) r->n_tokens[s] = FT_TOKENS;
    }
    r->finish = (int)qw_request_get_finish_reason(r->req);
    r->lp_status = QW_OK;
    for (size_t k = 0; sp->logprobs >= 0 && k < r->n_tokens[0]; k++) {
        qw_status st = qw_request_get_logprobs(r->req, k, &r->lp[k], r->lp_top[k], FT_TOP, &r->lp_ntop[k]);
        if (st != QW_OK) r->lp_status = (int)st;
    }
    r->plp_status = QW_OK;
    for (int i = 1; sp->prompt_logprobs >= 0 && i < sp->prompt_len; i++) {
        qw_status st = qw_request_get_prompt_logprobs(r->req, (size_t)i, &r->plp[i], r->plp_top[i], FT_TOP,
                                                      &r->plp_ntop[i]);
        if (st != QW_OK) r->plp_status = (int)st;
    }
}

/* Runs every request batched on e; 1 when the engine ran them all. */
static int run_engine(qw_engine *e, ft_run runs[NREQ], int32_t prompts[NREQ][FT_PROMPT]) {
    int32_t vocab = qw_engine_vocab_size(e);
    int ok = 1;
    for (int i = 0; i < NREQ; i++) {
        memset(&runs[i], 0, sizeof runs[i]);
        runs[i].sp = &specs[i];
        runs[i].vocab = vocab;
        memcpy(runs[i].prompt, prompts[i], sizeof runs[i].prompt);
    }
    for (int i = 0; i < NREQ && ok; i++) {
        runs[i].req = make_ft_request(&runs[i]);
        if (!runs[i].req) { ok = 0; break; }
        qw_status st = qw_engine_submit(e, runs[i].req);
        if (st != QW_OK) {
            printf("e2e: features submit %s: %s (%s)\n", specs[i].what, qw_status_string(st), qw_last_error());
            ok = 0;
        }
    }
    qw_request *reqs[NREQ];
    for (int i = 0; i < NREQ; i++) reqs[i] = runs[i].req;
    ok = e2e_run_requests(e, reqs, NREQ, NULL) && ok;
    for (int i = 0; i < NREQ && ok; i++) collect(&runs[i]);
    return ok;
}

static void free_runs(ft_run runs[NREQ]) {
    for (int i = 0; i < NREQ; i++) {
        for (int k = 0; k < FT_TOKENS; k++) free(runs[i].rows[k]);
        qw_request_release(runs[i].req);
        memset(&runs[i], 0, sizeof runs[i]);
    }
}

/* The bias on the penalties request's prompt[0] that puts it 15% above the
 * best other logit of the first output's raw row on e (the CPU engine): the
 * largest raw + bias then, the repetition penalty (1.3, the id is in the
 * prompt) takes it back below - so that output depends on the penalty
 * reaching prompt ids, not only output ids. PROMPT_BIAS_DEFAULT when the
 * row's best is not positive. */
#define PROMPT_BIAS_DEFAULT 3.0f
static void calibrate_prompt_bias(qw_engine *e, const int32_t *prompt, ft_spec *sp) {
    sp->bias[0] = PROMPT_BIAS_DEFAULT; /* not an earlier model's value */
    ft_run probe = {.sp = sp, .vocab = qw_engine_vocab_size(e)};
    memcpy(probe.prompt, prompt, sizeof probe.prompt);
    qw_request *q = e2e_make_request(prompt, sp->prompt_len, 1, &probe);
    if (q && qw_request_set_logits_callback(q, on_row, &probe) == QW_OK && qw_engine_submit(e, q) == QW_OK)
        e2e_run_requests(e, &q, 1, NULL); /* without its row the default stays */
    qw_request_release(q);
    if (probe.rows[0]) {
        float best = -INFINITY;
        for (int32_t i = 0; i < probe.vocab; i++)
            if (i != prompt[0] && probe.rows[0][i] > best) best = probe.rows[0][i];
        float b = 1.15f * best - probe.rows[0][prompt[0]];
        if (best > 0 && b > -100 && b < 100) sp->bias[0] = b;
    }
    free(probe.rows[0]);
}

/* ---- the host's definitions --------------------------------------------------------- */

/* out = raw row x with the bias and penalties of r applied as qwinfer.h
 * defines them, before output k (its prompt and tokens[0][0..k) seen).
 * Float arithmetic in the definition's order; the build's -std=c11 keeps
 * the multiply and the subtraction apart, as the library does. */
static void penalise(const ft_run *r, int k, const float *x, float *out) {
    const ft_spec *sp = r->sp;
    int32_t V = r->vocab;
    memcpy(out, x, sizeof(float) * (size_t)V);
    int32_t touched[FT_PROMPT + FT_TOKENS + 3];
    int nt = 0;
    for (int i = 0; i < sp->nbias; i++) touched[nt++] = bias_id(r, i);
    for (int i = 0; i < sp->prompt_len; i++) touched[nt++] = r->prompt[i];
    for (int i = 0; i < k; i++) touched[nt++] = r->tokens[0][i];
    for (int t = 0; t < nt; t++) {
        int32_t id = touched[t];
        int dup = 0;
        for (int u = 0; u < t && !dup; u++) dup = touched[u] == id;
        if (dup) continue;
        float v = x[id];
        for (int i = 0; i < sp->nbias; i++)
            if (bias_id(r, i) == id) v = v + sp->bias[i];
        int seen = 0, count = 0;
        for (int i = 0; i < sp->prompt_len; i++) seen |= r->prompt[i] == id;
        for (int i = 0; i < k; i++) count += r->tokens[0][i] == id;
        if ((seen || count) && sp->rep > 0.0f && sp->rep != 1.0f) v = v > 0.0f ? v / sp->rep : v * sp->rep;
        if (count > 0) {
            float fc = sp->freq * (float)count;
            v = v - fc;
            v = v - sp->pres;
        }
        out[id] = v;
    }
}

typedef struct { double e; int32_t id; } cand;
static int by_o(const void *pa, const void *pb) { /* descending e, lower id first */
    const cand *a = pa, *b = pb;
    if (a->e != b->e) return a->e > b->e ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}
static double dmin(double a, double b) { return a < b ? a : b; }

/* The token lib/sample.c's definition picks from the penalised row x
 * (banned: id or -1) at sequence position pos; *margin gets the smallest
 * relative distance of the decision from a boundary of the definition.
 * cand_buf holds V entries. */
static int32_t reference_pick(const ft_spec *sp, const float *x, int32_t V, int32_t banned, int64_t pos,
                              cand *c, double *margin) {
    *margin = INFINITY;
    double scale = 0;
    for (int32_t i = 0; i < V; i++) if (fabs(x[i]) > scale && isfinite(x[i])) scale = fabs(x[i]);
    if (scale == 0) scale = 1;
    int32_t n = 0;
    for (int32_t i = 0; i < V; i++)
        if (i != banned && !isnan(x[i]) && x[i] != -INFINITY) c[n++] = (cand){x[i], i};
    if (n == 0) return banned == 0 && V > 1 ? 1 : 0;
    qsort(c, (size_t)n, sizeof *c, by_o); /* by x: the same order as by e */
    if (!(sp->temperature > 0.0f)) {
        if (n > 1) *margin = (c[0].e - c[1].e) / scale;
        return c[0].id;
    }
    if (sp->top_k > 0 && sp->top_k < n) {
        *margin = dmin(*margin, (c[sp->top_k - 1].e - c[sp->top_k].e) / scale);
        n = sp->top_k;
    }
    const double m = c[0].e, T = (double)sp->temperature;
    int32_t w = 0;
    for (int32_t i = 0; i < n; i++) {
        double e = c[i].e == m ? 1.0 : exp((c[i].e - m) / T);
        if (e > 0) c[w++] = (cand){e, c[i].id};
    }
    n = w;
    /* Z is defined as a sum in ascending id order; summed here in order O,
     * which moves it by ~1e-16 relative, far inside MARGIN */
    double z = 0;
    for (int32_t i = 0; i < n; i++) z += c[i].e;
    if (sp->top_p < 1.0f) {
        double target = (double)sp->top_p * z, cum = 0;
        int32_t kept = n;
        for (int32_t i = 0; i < n; i++) {
            double before = cum;
            cum += c[i].e;
            if (cum >= target) {
                kept = i + 1;
                *margin = dmin(*margin, dmin(cum - target, target - before) / z);
                break;
            }
        }
        n = kept;
    }
    if (sp->min_p > 0.0f) {
        double th = (sp->min_p < 1.0f ? (double)sp->min_p : 1.0) * c[0].e;
        int32_t kept = 1;
        while (kept < n && c[kept].e >= th) kept++;
        for (int32_t i = 0; i < n; i++) *margin = dmin(*margin, fabs(c[i].e - th) / c[0].e);
        n = kept;
    }
    double z2 = 0;
    for (int32_t i = 0; i < n; i++) z2 += c[i].e;
    double target = qwi_philox_uniform(sp->seed, pos) * z2, cum = 0;
    for (int32_t i = 0; i < n; i++) {
        double before = cum;
        cum += c[i].e;
        if (cum > target) {
            *margin = dmin(*margin, dmin(cum - target, target - before) / z2);
            return c[i].id;
        }
    }
    return c[n - 1].id;
}

/* log of the sum of exp(x) over row x, in double (log-softmax of id i is
 * x[i] - this) */
static double row_logsumexp(const float *x, int32_t V) {
    double m = -INFINITY, s = 0;
    for (int32_t i = 0; i < V; i++) m = x[i] > m ? x[i] : m;
    for (int32_t i = 0; i < V; i++) s += exp((double)x[i] - m);
    return m + log(s);
}

/* ---- the checks --------------------------------------------------------------------- */

/* The DUT's tokens and logprobs of one request against its own raw rows.
 * Writes a reason into why on failure; 1 pass. */
static int check_own_rows(const ft_run *r, cand *cbuf, float *pen, char *why, size_t cap) {
    const ft_spec *sp = r->sp;
    int32_t V = r->vocab;
    if (r->bad_callback) { snprintf(why, cap, "%d bad logits callbacks", r->bad_callback); return 0; }
    int32_t stop = sp->stop_token >= 0 ? sp->stop_token % V : -1;
    int near = 0;
    for (size_t k = 0; k < r->n_tokens[0]; k++) {
        if (!r->rows[k]) { snprintf(why, cap, "no logits before output %zu", k); return 0; }
        penalise(r, (int)k, r->rows[k], pen);
        double margin;
        int32_t banned = (int)k < sp->min_tokens ? stop : -1;
        int32_t want = reference_pick(sp, pen, V, banned, sp->prompt_len + (int64_t)k, cbuf, &margin);
        int32_t got = r->tokens[0][k];
        if (got != want) {
            if (margin >= MARGIN) {
                snprintf(why, cap, "output %zu: token %d, the definition picks %d from its own logits (margin %.2e)",
                         k, (int)got, (int)want, margin);
                return 0;
            }
            near++;
        }
        if (sp->logprobs < 0) continue;
        const double lse = row_logsumexp(r->rows[k], V);
        double lp = (double)r->rows[k][got] - lse;
        if (r->lp[k].token != got || fabs(r->lp[k].logprob - lp) > LP_TOL_ABS + 1e-5 * fabs(lp)) {
            snprintf(why, cap, "output %zu: logprob of %d is %.6f, of its own raw row %.6f (token %d)", k,
                     (int)got, r->lp[k].logprob, lp, (int)r->lp[k].token);
            return 0;
        }
        size_t want_n = (size_t)sp->logprobs < (size_t)V ? (size_t)sp->logprobs : (size_t)V;
        if (r->lp_ntop[k] != want_n) { snprintf(why, cap, "output %zu: %zu top logprobs", k, r->lp_ntop[k]); return 0; }
        for (size_t j = 0; j < want_n; j++) {
            const qw_logprob *t = &r->lp_top[k][j];
            double v = t->token >= 0 && t->token < V ? (double)r->rows[k][t->token] - lse : NAN;
            int rank_ok = 1;
            if (!(fabs(t->logprob - v) <= LP_TOL_ABS + 1e-5 * fabs(v))) rank_ok = 0;
            if (j > 0 && t->logprob > r->lp_top[k][j - 1].logprob) rank_ok = 0;
            /* no id outside the list may beat it by more than the tolerance */
            int above = 0;
            for (int32_t i = 0; i < V && rank_ok; i++)
                if ((double)r->rows[k][i] > (double)r->rows[k][t->token] + LP_TOL_ABS) above++;
            if (above > (int)j) rank_ok = 0;
            if (!rank_ok) {
                snprintf(why, cap, "output %zu: top logprob %zu (%d, %.6f) is not the row's (log-softmax %.6f, %d ids above)",
                         k, j, (int)t->token, t->logprob, v, above);
                return 0;
            }
        }
    }
    if (r->lp_status != QW_OK && sp->logprobs >= 0) { snprintf(why, cap, "logprobs: status %d", r->lp_status); return 0; }
    snprintf(why, cap, "%zu tokens from their own logits%s", r->n_tokens[0], near ? " (near a boundary)" : "");
    return 1;
}

/* Raw rows against the CPU's up to the first divergence; greedy
 * divergences must be near-ties of the penalised rows. */
static int check_vs_cpu(const ft_run *g, const ft_run *c, double ptol, float *pen_g, float *pen_c, char *why,
                        size_t cap) {
    const ft_spec *sp = g->sp;
    int32_t V = g->vocab;
    size_t n = g->n_tokens[0] < c->n_tokens[0] ? g->n_tokens[0] : c->n_tokens[0], d = 0;
    while (d < n && g->tokens[0][d] == c->tokens[0][d]) d++;
    double worst = 0;
    for (size_t k = 0; k <= d && k < n; k++) {
        const float *a = g->rows[k], *b = c->rows[k];
        if (!a || !b) break;
        double rel = e2e_row_rel(a, b, V);
        if (rel > worst) worst = rel;
        if (!(rel <= ptol)) {
            snprintf(why, cap, "raw logits before output %zu: rel %.3e vs cpu > %.1e", k, rel, ptol);
            return 0;
        }
    }
    if (d < n && !(sp->temperature > 0.0f) && g->rows[d] && c->rows[d]) {
        penalise(g, (int)d, g->rows[d], pen_g);
        penalise(c, (int)d, c->rows[d], pen_c);
        double mb = 0;
        for (int32_t v = 0; v < V; v++) mb = fabs(c->rows[d][v]) > mb ? fabs(c->rows[d][v]) : mb;
        int32_t gt = g->tokens[0][d], ct = c->tokens[0][d];
        double gap = (double)pen_g[gt] - pen_g[ct];
        if (!(gap <= ptol * mb)) {
            snprintf(why, cap, "diverges from cpu at output %zu (%d vs %d), not a near-tie: gap %.4g > %.4g", d,
                     (int)gt, (int)ct, gap, ptol * mb);
            return 0;
        }
    }
    if (sp->prompt_logprobs >= 0) {
        double mb = 0;
        for (int32_t v = 0; c->rows[0] && v < V; v++) mb = fabs(c->rows[0][v]) > mb ? fabs(c->rows[0][v]) : mb;
        double tol = 2 * ptol * mb;
        if (g->plp_status != QW_OK || c->plp_status != QW_OK) {
            snprintf(why, cap, "prompt logprobs: status %d (cpu %d)", g->plp_status, c->plp_status);
            return 0;
        }
        for (int i = 1; i < sp->prompt_len; i++) {
            int bad = g->plp[i].token != g->prompt[i] || !(fabs(g->plp[i].logprob - c->plp[i].logprob) <= tol) ||
                      g->plp_ntop[i] != c->plp_ntop[i];
            for (size_t j = 0; !bad && j < g->plp_ntop[i] && j < FT_TOP; j++)
                bad = !(fabs(g->plp_top[i][j].logprob - c->plp_top[i][j].logprob) <= tol) ||
                      (j > 0 && g->plp_top[i][j].logprob > g->plp_top[i][j - 1].logprob);
            if (bad) {
                snprintf(why, cap, "prompt logprob %d: %d %.5f vs cpu %d %.5f (tol %.3g; sorted top values compared)",
                         i, (int)g->plp[i].token, g->plp[i].logprob, (int)c->plp[i].token, c->plp[i].logprob, tol);
                return 0;
            }
        }
    }
    snprintf(why, cap, "cpu agrees for %zu of %zu tokens, raw logits rel <= %.2e", d, n, worst);
    return 1;
}

static int report(const char *name, const char *what, int pass, const char *why) {
    printf("FEATURES %s %-18s %s %s\n", name, what, pass ? "PASS" : "FAIL", why);
    return pass;
}

int e2e_features(const char *name, const char *dir) {
    qw_engine *dut = NULL, *cpu = NULL;
    /* at most 12 sequences a step (the 9 here fit): the CUDA backend's
     * logits buffer then has 12 rows, so the 23 prompt-logprob rows of the
     * logprobs request take two passes */
    const e2e_engine_extra x = {.max_len = 1024, .gpu_frac = 0.5, .prefix_cache = 1, .max_seqs = 12};
    qw_status st = e2e_make_engine_with(dir, e2e_dut, &x, &dut);
    if (st == QW_ERR_NO_DEVICE) return -1;
    if (st != QW_OK) {
        printf("FEATURES %s FAIL engine: %s (%s)\n", name, qw_status_string(st), qw_last_error());
        return 0;
    }
    if ((st = e2e_make_engine_with(dir, "cpu", &x, &cpu)) != QW_OK) {
        printf("FEATURES %s FAIL cpu engine: %s (%s)\n", name, qw_status_string(st), qw_last_error());
        qw_engine_destroy(dut);
        return 0;
    }
    const double ptol = e2e_parity_tol(dir);

    int32_t V = qw_engine_vocab_size(cpu);
    static int32_t prompts[NREQ][FT_PROMPT];
    e2e_rng_reset();
    for (int i = 0; i < NREQ; i++) {
        const ft_spec *sp = &specs[i];
        if (sp->prompt_from >= 0) { memcpy(prompts[i], prompts[sp->prompt_from], sizeof prompts[i]); continue; }
        e2e_random_prompt(prompts[i], sp->prompt_len, V);
        /* a prompt from a few ids, so that the repetition penalty has
         * repeats to act on */
        for (int j = sp->repeats; sp->repeats && j < sp->prompt_len; j++) prompts[i][j] = prompts[i][j % sp->repeats];
    }
    calibrate_prompt_bias(cpu, prompts[R_PENALTIES], &specs[R_PENALTIES]);
    static ft_run g[NREQ], c[NREQ];
    double t0 = e2e_now_s();
    int ok = run_engine(cpu, c, prompts);
    double t1 = e2e_now_s();
    ok = run_engine(dut, g, prompts) && ok;
    printf("e2e: features %s: cpu %.2f s, %s %.2f s\n", name, t1 - t0, e2e_dut, e2e_now_s() - t1);
    cand *cbuf = malloc(sizeof(cand) * (size_t)V);
    float *pa = malloc(sizeof(float) * (size_t)V), *pb = malloc(sizeof(float) * (size_t)V);
    int npass = 0, nchecks = 0;
    char why[512];
    for (int i = 0; ok && cbuf && pa && pb && i < NREQ; i++) {
        const ft_spec *sp = &specs[i];
        int pass = 1;
        why[0] = 0;
        if (g[i].n_tokens[0] == 0) {
            pass = 0;
            snprintf(why, sizeof why, "no tokens");
        } else if (sp->n == 1) {
            pass = check_own_rows(&g[i], cbuf, pa, why, sizeof why);
            /* the same definition must hold for the CPU engine: a check of
             * this program's reference as much as of the CPU */
            char why_c[400];
            if (pass && !check_own_rows(&c[i], cbuf, pa, why_c, sizeof why_c)) {
                pass = 0;
                snprintf(why, sizeof why, "cpu engine: %s", why_c);
            }
            if (pass) {
                size_t len = strlen(why);
                why[len++] = ';', why[len++] = ' ';
                pass = check_vs_cpu(&g[i], &c[i], ptol, pa, pb, why + len, sizeof why - len);
            }
        }
        if (pass && i == R_N2) {
            for (int s = 0; s < 2 && pass; s++) {
                const ft_run *t = &g[s == 0 ? R_TWIN0 : R_TWIN1];
                if (g[i].n_tokens[s] != t->n_tokens[0] ||
                    memcmp(g[i].tokens[s], t->tokens[0], sizeof(int32_t) * t->n_tokens[0])) {
                    pass = 0;
                    snprintf(why, sizeof why, "sample %d differs from the separate request with seed %llu", s,
                             (unsigned long long)(sp->seed + (uint64_t)s));
                }
            }
            if (pass) snprintf(why, sizeof why, "samples 0 and 1 equal separate requests with seeds %llu, %llu",
                               (unsigned long long)sp->seed, (unsigned long long)sp->seed + 1);
        }
        if (pass && i == R_MIN_TOKENS) {
            /* the stop token (bias +100) is banned for the first min_tokens
             * outputs and taken, ending the request, at the first allowed one */
            int32_t stop = sp->stop_token % V;
            size_t n = g[i].n_tokens[0];
            int good = n == (size_t)sp->min_tokens + 1 && g[i].tokens[0][n - 1] == stop &&
                       g[i].finish == QW_FINISH_STOP;
            for (size_t k = 0; good && k + 1 < n; k++) good = g[i].tokens[0][k] != stop;
            if (!good) {
                pass = 0;
                snprintf(why, sizeof why, "%zu tokens, finish %d: not %d non-stop tokens then stop token %d", n,
                         g[i].finish, sp->min_tokens, (int)stop);
            }
        }
        nchecks++;
        npass += report(name, sp->what, pass, why);
    }
    if (!ok || !cbuf || !pa || !pb) printf("FEATURES %s FAIL the requests did not run\n", name);
    int pass = ok && cbuf && pa && pb && npass == nchecks;
    printf("FEATURES %s %s %d/%d requests\n", name, pass ? "PASS" : "FAIL", npass, nchecks);
    free(cbuf), free(pa), free(pb);
    free_runs(g);
    free_runs(c);
    qw_engine_destroy(cpu);
    qw_engine_destroy(dut);
    return pass;
}
