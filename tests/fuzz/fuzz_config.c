/*
 * fuzz_config.c - libFuzzer harness for config.json and
 * generation_config.json: the parser (qwi_config_load) and, when the
 * weights of a matching model are at hand, everything engine creation
 * derives from the config (KV sizing, RoPE tables, EOS handling), followed
 * by one short greedy request.
 *
 * Input: a container (fuzz_util.h) of two files:
 *   0 config.json      1 generation_config.json
 *
 * $QWFUZZ_MODEL_DIR names a model directory written by qw-makemodel (the
 * make targets pass the one the seeds came from); its safetensors files are
 * linked into the scratch directory once, so a config whose shapes match
 * them reaches qw_engine_create. Without it only the parser is fuzzed.
 *
 * Checked beyond "no crash, no leak, no undefined behaviour": the status
 * contract (qwf_check_status) of every call; an accepted config has
 * positive sizes and EOS ids inside the vocabulary; an engine that was
 * created finishes its request exactly once and gives every KV block back.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model.h"
#include "fuzz/fuzz_util.h"

static const char *const names[] = {"config.json", "generation_config.json"};
#define NUM_NAMES ((int)(sizeof names / sizeof names[0]))

/* Link the weights of $QWFUZZ_MODEL_DIR into dir; 1 when there are some. */
static int link_weights(const char *dir) {
    const char *src = getenv("QWFUZZ_MODEL_DIR");
    if (!src || !*src) {
        fprintf(stderr, "fuzz_config: QWFUZZ_MODEL_DIR is not set: fuzzing the parser only\n");
        return 0;
    }
    static const char *const files[] = {
        "model.safetensors", "model.safetensors.index.json",
        "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
    };
    int linked = 0;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char from[4096], abs[8192];
        snprintf(from, sizeof from, "%s/%s", src, files[i]);
        if (access(from, R_OK) != 0) continue;
        if (from[0] == '/') {
            snprintf(abs, sizeof abs, "%s", from);
        } else {   /* the link lives in another directory */
            char cwd[2048];
            QWF_CHECK(getcwd(cwd, sizeof cwd) != NULL, "getcwd failed");
            snprintf(abs, sizeof abs, "%s/%s", cwd, from);
        }
        QWF_CHECK(symlink(abs, qwf_path(dir, files[i])) == 0, "symlink %s failed", abs);
        linked = 1;
    }
    if (!linked)
        fprintf(stderr, "fuzz_config: no safetensors in %s: fuzzing the parser only\n", src);
    return linked;
}

static void check_config(const qwi_config *c) {
    QWF_CHECK(c->vocab_size > 0 && c->hidden_size > 0 && c->intermediate_size > 0 &&
                  c->num_layers > 0 && c->num_heads > 0 && c->num_kv_heads > 0 &&
                  c->head_dim > 0 && c->max_position_embeddings > 0,
              "accepted config with a non-positive size");
    QWF_CHECK(c->num_heads % c->num_kv_heads == 0, "heads %d not a multiple of kv heads %d",
              c->num_heads, c->num_kv_heads);
    QWF_CHECK(isfinite(c->rope_theta) && c->rope_theta > 0, "rope_theta %g", c->rope_theta);
    QWF_CHECK(isfinite(c->rms_norm_eps) && c->rms_norm_eps > 0, "rms_norm_eps %g",
              c->rms_norm_eps);
    QWF_CHECK(c->num_eos >= 0 && c->num_eos <= QWI_MAX_EOS, "num_eos %d", c->num_eos);
    for (int i = 0; i < c->num_eos; i++)
        QWF_CHECK(c->eos_token_ids[i] >= 0 && c->eos_token_ids[i] < c->vocab_size,
                  "eos id %d outside the vocabulary %d", c->eos_token_ids[i], c->vocab_size);
    QWF_CHECK(c->bos_token_id >= -1 && c->bos_token_id < c->vocab_size, "bos id %d",
              c->bos_token_id);
}

/* libFuzzer's entry point: one input, a container of config.json and generation_config.json
 * (see the top of this file). Returns 0; aborts when a check fails. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int have_weights = -1;
    const char *dir = qwf_dir("config");
    if (have_weights < 0) have_weights = link_weights(dir);
    qwf_part parts[QWF_MAX_PARTS];
    int np = qwf_split(data, size, parts);
    qwf_write_files(dir, names, NUM_NAMES, parts, np);

    qwi_config cfg;
    memset(&cfg, 0, sizeof cfg);
    qwf_clear_error();
    qw_status st = qwf_check_status(qwi_config_load(dir, &cfg), "qwi_config_load");
    if (st != QW_OK) return 0;
    check_config(&cfg);
    if (have_weights) qwf_run_engine(dir);
    return 0;
}
