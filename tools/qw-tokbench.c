/*
 * qw-tokbench - encode throughput of the tokenizer on one core.
 *
 *   qw-tokbench [--dir TOKENIZER_DIR] [--mb N] [--file PATH]... [--ids-out PATH]
 *   qw-tokbench [--dir DIR] --encode TEXT      print the ids of TEXT
 *
 * Without --file it measures three built-in samples (English prose, Chinese
 * prose, C/Python code), each repeated with variations to about N MB
 * (default 4), and prints MB/s and tokens/s per sample. Those samples flatter
 * the piece cache; `make tokbench` (tools/tokbench-real.sh) measures varied
 * real text from Debian packages instead. --ids-out writes the ids of each
 * --file as one line, for comparison with another tokenizer. The default dir is
 * ../shared/data/qwen-tokenizer (or $QW_SHARED_DIR/data/qwen-tokenizer).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokenizer.h"

static const char sample_en[] =
    "The committee met on Tuesday to discuss the proposed changes to the city's "
    "transportation plan. Several members argued that the new bus routes, which "
    "would connect the northern suburbs with the downtown business district, "
    "weren't likely to reduce traffic unless fares were lowered as well. Others "
    "pointed out that the budget for 2025 had already been approved, and that any "
    "additional spending would require a vote by the full council. After nearly "
    "three hours of debate, they agreed to commission an independent study.\n\n";

static const char sample_zh[] =
    "人工智能是计算机科学的一个分支，它企图了解智能的实质，并生产出一种新的能以人类智能"
    "相似的方式做出反应的智能机器。该领域的研究包括机器人、语言识别、图像识别、自然语言"
    "处理和专家系统等。自从人工智能诞生以来，理论和技术日益成熟，应用领域也不断扩大。\n";

static const char sample_code[] =
    "static int parse_header(const char *buf, size_t len, struct header *out) {\n"
    "    if (len < 8) return -1;\n"
    "    for (size_t i = 0; i < len; i++) {\n"
    "        if (buf[i] == '\\n') { out->lines++; continue; }\n"
    "        out->checksum = (out->checksum * 31u + (unsigned char)buf[i]) & 0xffffu;\n"
    "    }\n"
    "    return 0;\n"
    "}\n\n"
    "def fibonacci(n: int) -> list[int]:\n"
    "    \"\"\"Return the first n Fibonacci numbers.\"\"\"\n"
    "    seq = [0, 1]\n"
    "    while len(seq) < n:\n"
    "        seq.append(seq[-1] + seq[-2])\n"
    "    return seq[:n]\n\n";

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Repeat a sample to about mb MB, numbering each copy so the text is not
 * one piece repeated verbatim (the piece cache would then flatter it). */
static char *make_text(const char *sample, double mb, size_t *len) {
    size_t want = (size_t)(mb * 1e6), sl = strlen(sample), n = 0, cap = want + sl + 64;
    char *s = malloc(cap);
    if (!s) return NULL;
    for (unsigned k = 0; n + sl + 32 < cap; k++) {
        n += (size_t)snprintf(s + n, cap - n, "%u. ", k);
        memcpy(s + n, sample, sl);
        n += sl;
    }
    s[n] = '\0';
    *len = n;
    return s;
}

static int bench(const qwi_tokenizer *tok, const char *name, const char *text, size_t len, FILE *ids_out) {
    int32_t *ids = NULL;
    size_t n = 0;
    /* one warm-up run, then the best of three */
    if (qwi_tokenizer_encode(tok, text, len, 1, &ids, &n)) {
        fprintf(stderr, "qw-tokbench: encode: %s\n", qwi_last_error());
        return 1;
    }
    if (ids_out) {
        for (size_t i = 0; i < n; i++) fprintf(ids_out, "%s%d", i ? " " : "", ids[i]);
        fprintf(ids_out, "\n");
    }
    free(ids);
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        double t0 = now_s();
        qwi_tokenizer_encode(tok, text, len, 1, &ids, &n);
        double dt = now_s() - t0;
        free(ids);
        if (dt < best) best = dt;
    }
    printf("%-28s %8.2f MB  %9zu tokens  %7.2f MB/s  %9.0f tokens/s  %.2f bytes/token\n", name,
           len / 1e6, n, len / 1e6 / best, n / best, (double)len / (double)n);
    return 0;
}

int main(int argc, char **argv) {
    const char *dir = NULL, *encode = NULL, *ids_path = NULL;
    double mb = 4;
    const char *files[16];
    int n_files = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--mb") && i + 1 < argc) mb = atof(argv[++i]);
        else if (!strcmp(argv[i], "--file") && i + 1 < argc && n_files < 16) files[n_files++] = argv[++i];
        else if (!strcmp(argv[i], "--encode") && i + 1 < argc) encode = argv[++i];
        else if (!strcmp(argv[i], "--ids-out") && i + 1 < argc) ids_path = argv[++i];
        else {
            fprintf(stderr, "usage: qw-tokbench [--dir DIR] [--mb N] [--file PATH]... [--ids-out PATH] | --encode TEXT\n");
            return 2;
        }
    }
    char defdir[4096];
    if (!dir) {
        const char *sh = getenv("QW_SHARED_DIR");
        snprintf(defdir, sizeof defdir, "%s/data/qwen-tokenizer", sh ? sh : "../shared");
        dir = defdir;
    }
    double t0 = now_s();
    qwi_tokenizer *tok;
    if (qwi_tokenizer_load_dir(dir, &tok)) {
        fprintf(stderr, "qw-tokbench: %s\n", qwi_last_error());
        return 1;
    }
    double load = now_s() - t0;
    if (encode) {
        int32_t *ids;
        size_t n;
        if (qwi_tokenizer_encode(tok, encode, strlen(encode), 1, &ids, &n)) {
            fprintf(stderr, "qw-tokbench: %s\n", qwi_last_error());
            qwi_tokenizer_free(tok);
            return 1;
        }
        for (size_t i = 0; i < n; i++) printf("%s%d", i ? " " : "", ids[i]);
        printf("\n");
        free(ids);
        qwi_tokenizer_free(tok);
        return 0;
    }
    printf("tokenizer %s: %d ids, loaded in %.0f ms\n", dir, qwi_tokenizer_vocab_size(tok),
           load * 1e3);
    int rc = 0;
    FILE *ids_out = NULL;
    if (ids_path && !(ids_out = fopen(ids_path, "w"))) {
        perror(ids_path);
        qwi_tokenizer_free(tok);
        return 1;
    }
    if (n_files) {
        for (int i = 0; i < n_files; i++) {
            FILE *f = fopen(files[i], "rb");
            if (!f) { perror(files[i]); rc = 1; continue; }
            fseek(f, 0, SEEK_END);
            long sz = ftell(f);
            fseek(f, 0, SEEK_SET);
            char *s = malloc((size_t)sz + 1);
            size_t got = s ? fread(s, 1, (size_t)sz, f) : 0;
            fclose(f);
            const char *base = strrchr(files[i], '/');
            if (s && got == (size_t)sz) rc |= bench(tok, base ? base + 1 : files[i], s, got, ids_out);
            free(s);
        }
    } else {
        const char *names[3] = {"english", "chinese", "code"};
        const char *samples[3] = {sample_en, sample_zh, sample_code};
        for (int k = 0; k < 3; k++) {
            size_t len;
            char *s = make_text(samples[k], mb, &len);
            if (!s) { rc = 1; break; }
            rc |= bench(tok, names[k], s, len, ids_out);
            free(s);
        }
    }
    if (ids_out) fclose(ids_out);
    qwi_tokenizer_free(tok);
    return rc;
}
