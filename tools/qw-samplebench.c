/*
 * qw-samplebench - the CPU sampler's cost per logit row (issue #13's
 * benchmark): qwi_sample on one row of a synthetic vocabulary, with and
 * without the penalties and logit bias, top-p and logprobs(k), one thread.
 *
 *   qw-samplebench [--vocab N] [--prompt-len N] [--output-len N] [--bias N]
 *                  [--rows N] [--top-p P] [--logprobs K] [--json]
 *
 * Logits: a Gaussian body (sd 2.5) with 32 peaks, like a language model's
 * row; the histories are uniform ids (a worst case for the penalties: few
 * repeats, so almost every token is a distinct id to touch). Each case is
 * timed over --rows rows (each at another position, so every draw
 * differs), best of 5 repetitions, and reported in microseconds per row.
 * Links the library's internals (lib/sample.h, lib/penalties.h,
 * lib/logprobs.h), as qw-bench does.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "logprobs.h"
#include "penalties.h"
#include "sample.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double unif(uint64_t *s) { return (double)(mix(s) >> 11) * 0x1.0p-53; }

static void usage(void) {
    fprintf(stderr, "usage: qw-samplebench [--vocab N] [--prompt-len N] [--output-len N] [--bias N]\n"
                    "                      [--rows N] [--top-p P] [--logprobs K] [--json]\n");
    exit(2);
}

typedef struct bench_case {
    const char *name;
    float temp, top_p;
    int penalties, logprobs;
} bench_case;

int main(int argc, char **argv) {
    int32_t V = 151936, np = 1024, no = 256, nb = 16, rows = 200, lp = 5, json = 0;
    double top_p = 0.9;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "--json")) { json = 1; continue; }
        if (!v) usage();
        if (!strcmp(o, "--vocab")) V = atoi(v);
        else if (!strcmp(o, "--prompt-len")) np = atoi(v);
        else if (!strcmp(o, "--output-len")) no = atoi(v);
        else if (!strcmp(o, "--bias")) nb = atoi(v);
        else if (!strcmp(o, "--rows")) rows = atoi(v);
        else if (!strcmp(o, "--top-p")) top_p = atof(v);
        else if (!strcmp(o, "--logprobs")) lp = atoi(v);
        else usage();
        i++;
    }
    if (V < 64 || np < 0 || no < 0 || nb < 0 || nb > QW_MAX_LOGIT_BIAS || rows < 1 || lp < 0 || lp > QW_MAX_LOGPROBS ||
        !(top_p > 0 && top_p <= 1))
        usage();

    uint64_t s = 42;
    float *logits = malloc(sizeof(float) * (size_t)V);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)(np + no + 1));
    int32_t *bias_ids = malloc(sizeof(int32_t) * (size_t)(nb + 1));
    float *bias = malloc(sizeof(float) * (size_t)(nb + 1));
    qwi_sample_scratch *sc = qwi_sample_scratch_create(V);
    if (!logits || !toks || !bias_ids || !bias || !sc) {
        fprintf(stderr, "qw-samplebench: out of memory\n");
        return 1;
    }
    for (int32_t i = 0; i < V; i++) {
        double u = unif(&s) + 1e-300, w = unif(&s);
        logits[i] = (float)(2.5 * sqrt(-2 * log(u)) * cos(6.283185307179586 * w));
    }
    for (int i = 0; i < 32; i++) logits[mix(&s) % (uint64_t)V] = 12.0f + (float)(unif(&s) * 6.0);
    for (int32_t i = 0; i < np + no; i++) toks[i] = (int32_t)(mix(&s) % (uint64_t)V);
    for (int32_t i = 0; i < nb; i++) {
        bias_ids[i] = (int32_t)((uint64_t)i * 9973u % (uint64_t)V);   /* prime stride: distinct for i < V */
        bias[i] = (float)(unif(&s) * 10.0 - 5.0);
    }

    const bench_case cases[] = {
        {"greedy", 0.0f, 1.0f, 0, 0},
        {"greedy + penalties", 0.0f, 1.0f, 1, 0},
        {"top-p", 1.0f, (float)top_p, 0, 0},
        {"top-p + penalties", 1.0f, (float)top_p, 1, 0},
        {"top-p + penalties + logprobs", 1.0f, (float)top_p, 1, 1},
    };
    const int ncases = (int)(sizeof cases / sizeof cases[0]);
    double us[8];
    qw_logprob out[QW_MAX_LOGPROBS + 1];
    volatile int64_t sink = 0;
    for (int c = 0; c < ncases; c++) {
        qwi_sampling p;
        memset(&p, 0, sizeof p);
        p.temperature = cases[c].temp;
        p.top_p = cases[c].top_p;
        p.seed = 7;
        p.repetition_penalty = 1.0f;
        if (cases[c].penalties) {
            p.repetition_penalty = 1.1f;
            p.presence_penalty = 0.5f;
            p.frequency_penalty = 0.3f;
            p.prompt_tokens = toks;
            p.num_prompt_tokens = np;
            p.output_tokens = toks + np;
            p.num_output_tokens = no;
            p.bias_ids = bias_ids;
            p.bias = bias;
            p.num_bias = nb;
        }
        double best = INFINITY;
        for (int rep = 0; rep < 5; rep++) {
            double t0 = now();
            for (int32_t r = 0; r < rows; r++) {
                int32_t tok = qwi_sample(logits, V, &p, (int64_t)r, sc);
                if (cases[c].logprobs) qwi_logprobs_row(logits, V, tok, lp, out);
                sink += tok;
            }
            double dt = (now() - t0) / rows;
            best = dt < best ? dt : best;
        }
        us[c] = best * 1e6;
    }
    if (json) {
        printf("{\n  \"vocab\": %d,\n  \"prompt_len\": %d,\n  \"output_len\": %d,\n  \"bias_entries\": %d,\n"
               "  \"top_p\": %g,\n  \"logprobs\": %d,\n  \"rows\": %d,\n  \"us_per_row\": {\n",
               V, np, no, nb, top_p, lp, rows);
        for (int c = 0; c < ncases; c++) printf("    \"%s\": %.2f%s\n", cases[c].name, us[c], c + 1 < ncases ? "," : "");
        printf("  }\n}\n");
    } else {
        printf("qw-samplebench: vocab %d, prompt %d + output %d tokens, %d bias entries, repetition 1.1, "
               "presence 0.5, frequency 0.3, top-p %g, logprobs %d; best of 5 x %d rows, 1 thread\n",
               V, np, no, nb, top_p, lp, rows);
        for (int c = 0; c < ncases; c++) printf("  %-30s %9.2f us/row\n", cases[c].name, us[c]);
    }
    qwi_sample_scratch_free(sc);
    free(logits);
    free(toks);
    free(bias_ids);
    free(bias);
    (void)sink;
    return 0;
}
