/*
 * fuzz_safetensors.c - libFuzzer harness for the safetensors loader: the
 * header parser of one file (qwi_st_open_file), the file set of a model
 * directory, single file or sharded through model.safetensors.index.json
 * (qwi_st_open_dir), the weight-layout check against config.json
 * (qwi_model_load) and, for a model it accepts, an engine on it with one
 * short greedy request (qwf_run_engine: the load-time weight scan, the CPU
 * backend packing every linear, bf16 or quantized, and the kernels).
 *
 * Input: a container (fuzz_util.h) of up to five files, in this order:
 *   0 model.safetensors                 3 model-00002-of-00002.safetensors
 *   1 model.safetensors.index.json      4 config.json
 *   2 model-00001-of-00002.safetensors
 * (the shard names are the ones qw-makemodel --shards 2 writes).
 *
 * Checked beyond "no crash, no leak, no undefined behaviour": every status
 * keeps the contract of qwf_check_status; an accepted set hands out tensors
 * whose bytes can all be read, whose byte count is shape x dtype size, and
 * that qwi_st_find finds by name; a failure leaves no set behind; an
 * engine that is created finishes its request exactly once and gives
 * every KV block back.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "model.h"
#include "safetensors.h"
#include "fuzz/fuzz_util.h"

static const char *const names[] = {
    "model.safetensors",
    "model.safetensors.index.json",
    "model-00001-of-00002.safetensors",
    "model-00002-of-00002.safetensors",
    "config.json",
};
#define NUM_NAMES ((int)(sizeof names / sizeof names[0]))

/* Walk an accepted set: every tensor's bytes are in the mapping (a read
 * past it would fault; ASan checks the heap parts), sizes add up, and
 * lookup by name returns the same entry. */
static void check_set(const qwi_st_set *set) {
    size_t n = qwi_st_count(set);
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < n; i++) {
        const qwi_tensor *t = qwi_st_at(set, i);
        QWF_CHECK(t && t->name && t->file, "tensor %zu has no name or file", i);
        QWF_CHECK(t->ndim >= 0 && t->ndim <= QWI_MAX_DIMS, "%s: ndim %d", t->name, t->ndim);
        uint64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            QWF_CHECK(t->shape[d] >= 0, "%s: negative shape[%d]", t->name, d);
            numel *= (uint64_t)t->shape[d];
        }
        QWF_CHECK(numel * qwi_dtype_size(t->dtype) == t->nbytes,
                  "%s: %zu bytes for %llu elements", t->name, t->nbytes,
                  (unsigned long long)numel);
        if (t->nbytes > 0) {
            const uint8_t *b = t->data;
            QWF_CHECK(b != NULL, "%s: %zu bytes but no data", t->name, t->nbytes);
            sink ^= b[0];
            sink ^= b[t->nbytes - 1];
            sink ^= b[t->nbytes / 2];
        }
        QWF_CHECK(qwi_st_find(set, t->name) == t, "%s: qwi_st_find does not find it", t->name);
    }
    QWF_CHECK(qwi_st_at(set, n) == NULL, "qwi_st_at past the end is not NULL");
    (void)sink;
}

/* libFuzzer's entry point: one input, a container of up to five files
 * (see the top of this file). Returns 0; aborts when a check fails. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = qwf_dir("safetensors");
    qwf_part parts[QWF_MAX_PARTS];
    int np = qwf_split(data, size, parts);
    qwf_write_files(dir, names, NUM_NAMES, parts, np);

    qwi_st_set *set = (qwi_st_set *)1;
    if (np > 0 && parts[0].len > 0) {
        qwf_clear_error();
        qw_status st = qwf_check_status(qwi_st_open_file(qwf_path(dir, names[0]), &set),
                                        "qwi_st_open_file");
        QWF_CHECK((st == QW_OK) == (set != NULL), "qwi_st_open_file: status %d with set %p",
                  (int)st, (void *)set);
        if (set) check_set(set);
        qwi_st_close(set);
    }

    set = (qwi_st_set *)1;
    qwf_clear_error();
    qw_status st = qwf_check_status(qwi_st_open_dir(dir, &set), "qwi_st_open_dir");
    QWF_CHECK((st == QW_OK) == (set != NULL), "qwi_st_open_dir: status %d with set %p", (int)st,
              (void *)set);
    if (set) check_set(set);
    qwi_st_close(set);

    if (np > 4 && parts[4].len > 0) {
        qwi_model *m = (qwi_model *)1;
        qwf_clear_error();
        st = qwf_check_status(qwi_model_load(dir, &m), "qwi_model_load");
        QWF_CHECK((st == QW_OK) == (m != NULL), "qwi_model_load: status %d with model %p",
                  (int)st, (void *)m);
        if (m) {
            QWF_CHECK(m->cfg.num_layers > 0 && m->layers != NULL, "model without layers");
            QWF_CHECK(m->embed.data != NULL, "model without embeddings");
        }
        const bool loaded = m != NULL;
        qwi_model_free(m);
        /* an accepted model goes on through the weight scan, the CPU
         * backend's packing (quantized panels included) and a request */
        if (loaded) qwf_run_engine(dir);
    }
    return 0;
}
