/*
 * test_weight_memory.c - one copy of the weights in memory (issue #11,
 * item 4): once the CPU backend has packed the weights into its own copy,
 * the pages of the model file's mapping are given back (the mapping itself
 * stays, so every tensor pointer of the model stays valid), and generation
 * from the packed copy (embedding rows faulting back in from the file) is
 * what it was.
 *
 * Residency is read from /proc/self/smaps: the Rss of the mapping of the
 * model's model.safetensors. Before the fix it was the whole file.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "engine.h"
#include "model.h"
#include "qwinfer.h"
#include "safetensors.h"
#include "util/engine_util.h"
#include "util/testutil.h"

static char *tiny(const char *dtype) {
    char name[64], args[128];
    snprintf(name, sizeof name, "wmem-tiny-%s", dtype);
    snprintf(args, sizeof args, "--shape tiny --dtype %s --seed 41", dtype);
    char *dir = qwt_model(name, args);
    cr_assert_not_null(dir);
    return dir;
}

/* Resident kB of this process's mappings of <dir>/model.safetensors, or -1
 * when the file is not mapped at all. */
static long mapped_rss_kb(const char *dir) {
    char path[PATH_MAX], real[PATH_MAX];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    cr_assert_not_null(realpath(path, real), "realpath %s", path);
    FILE *f = fopen("/proc/self/smaps", "r");
    cr_assert_not_null(f);
    char line[PATH_MAX + 256];
    long total = -1;
    bool in = false;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        int name_at = 0;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &name_at) == 2 && name_at > 0) {
            char *nl = strchr(line, '\n');
            if (nl) *nl = '\0';
            in = strcmp(line + name_at, real) == 0;
            if (in && total < 0) total = 0;
            continue;
        }
        long kb;
        if (in && sscanf(line, "Rss: %ld kB", &kb) == 1) total += kb;
    }
    fclose(f);
    return total;
}

static long file_kb(const char *dir) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    size_t len = 0;
    void *p = qwt_read_file(path, &len);
    cr_assert_not_null(p);
    free(p);
    return (long)(len / 1024);
}

static qw_engine *engine(const char *dir, int64_t numerics) {
    qw_engine_options *o = NULL;
    cr_assert_eq(qw_engine_options_create(&o), QW_OK);
    cr_assert_eq(qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, dir), QW_OK);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_NUM_THREADS, 2), QW_OK);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_NUM_KV_BLOCKS, 64), QW_OK);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_NUMERICS, numerics), QW_OK);
    /* the weight check reads every page before the backend packs */
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_CHECK_WEIGHTS, 1), QW_OK);
    qw_engine *e = NULL;
    cr_assert_eq(qw_engine_create(o, &e), QW_OK, "%s", qw_last_error());
    qw_engine_options_destroy(o);
    return e;
}

/* Greedy generation of two prompts, with logits. */
static void run(qw_engine *e, qwt_result *res) {
    int32_t p0[12], p1[5];
    qwt_make_prompt(p0, 12, 256, 7);
    qwt_make_prompt(p1, 5, 256, 8);
    qwt_job jobs[2] = {
        { .prompt = p0, .num_prompt = 12, .max_tokens = 12, .ignore_eos = 1, .keep_logits = 1, .seed = -1 },
        { .prompt = p1, .num_prompt = 5, .max_tokens = 12, .ignore_eos = 1, .keep_logits = 1, .seed = -1 },
    };
    qwt_run_jobs(e, jobs, 2, res);
}

/* Both numerics modes pack the weights (fast always does; exact does when
 * QWINFER_CPU_WEIGHTS=copy): afterwards none of the file's pages is resident,
 * though the weight check had read them all; the mapping is still there. */
static void check_released(const char *dtype, int64_t numerics) {
    setenv("QWINFER_CPU_WEIGHTS", "copy", 1);
    char *dir = tiny(dtype);
    qw_engine *e = engine(dir, numerics);
    long rss = mapped_rss_kb(dir);
    cr_assert_geq(rss, 0, "the model's mapping is gone: tensor pointers would dangle");
    cr_assert_eq(rss, 0, "%s, numerics %lld: %ld kB of the %ld kB file still resident after packing",
                 dtype, (long long)numerics, rss, file_kb(dir));
    /* Generation reads embedding rows from the mapping: only those fault in. */
    qwt_result res[2];
    run(e, res);
    cr_assert_eq(res[0].num_tokens, 12);
    rss = mapped_rss_kb(dir);
    cr_assert_lt(rss, file_kb(dir), "%ld kB resident after generation", rss);
    qwt_results_free(res, 2);
    qw_engine_destroy(e);
    free(dir);
}

Test(weight_memory, released_after_packing_bf16_fast) { check_released("bf16", QW_NUMERICS_FAST); }
Test(weight_memory, released_after_packing_f32_exact) { check_released("f32", QW_NUMERICS_EXACT); }
Test(weight_memory, released_after_packing_f16_exact) { check_released("f16", QW_NUMERICS_EXACT); }

/* The row-major path reads the weights in place: nothing is released, and
 * the exact-mode generation from the packed copy (whose embedding rows were
 * released and faulted back in) agrees with it: same greedy tokens, logits
 * equal to rounding (the two paths round differently, cpu_backend.c). */
Test(weight_memory, packed_generation_matches_mmap_path) {
    char *dir = tiny("f32");
    qwt_result a[2], b[2];
    setenv("QWINFER_CPU_WEIGHTS", "mmap", 1);
    qw_engine *e = engine(dir, QW_NUMERICS_EXACT);
    run(e, a);
    cr_assert_gt(mapped_rss_kb(dir), 0, "the mmap path reads the mapping, so it stays resident");
    qw_engine_destroy(e);
    setenv("QWINFER_CPU_WEIGHTS", "copy", 1);
    e = engine(dir, QW_NUMERICS_EXACT);
    cr_assert_eq(mapped_rss_kb(dir), 0);
    run(e, b);
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(a[r].num_tokens, b[r].num_tokens);
        for (int i = 0; i < a[r].num_tokens; i++)
            cr_assert_eq(a[r].tokens[i], b[r].tokens[i], "request %d token %d", r, i);
        cr_assert_eq(a[r].num_logits, b[r].num_logits);
        for (int64_t i = 0; i < (int64_t)a[r].num_logits * a[r].vocab; i++)
            cr_assert(fabsf(a[r].logits[i] - b[r].logits[i]) <= 1e-4f * (1.0f + fabsf(a[r].logits[i])),
                      "request %d logit %lld: %g vs %g", r, (long long)i, a[r].logits[i], b[r].logits[i]);
    }
    qwt_results_free(a, 2);
    qwt_results_free(b, 2);
    qw_engine_destroy(e);
    free(dir);
}

/* The backend only gives pages back: the model it borrowed keeps reading the
 * same bytes, and a second backend over the same model packs them again. */
Test(weight_memory, model_stays_readable_after_backend) {
    setenv("QWINFER_CPU_WEIGHTS", "copy", 1);
    char *dir = tiny("bf16");
    qwi_model *m = NULL;
    cr_assert_eq(qwi_model_load(dir, &m), QW_OK, "%s", qw_last_error());
    size_t n = qwi_st_count(m->weights), total = 0;
    for (size_t i = 0; i < n; i++) total += qwi_st_at(m->weights, i)->nbytes;
    char *before = malloc(total);
    cr_assert_not_null(before);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        const qwi_tensor *t = qwi_st_at(m->weights, i);
        memcpy(before + off, t->data, t->nbytes);
        off += t->nbytes;
    }
    qwi_backend_config bc = { .num_threads = 1, .num_blocks = 8, .block_size = 16,
                              .max_num_batched_tokens = 16, .max_num_seqs = 2,
                              .numerics = QW_NUMERICS_EXACT };
    for (int round = 0; round < 2; round++) {
        qwi_backend *b = NULL;
        cr_assert_eq(qwi_cpu_backend_create(m, &bc, &b), QW_OK, "%s", qw_last_error());
        cr_assert_eq(mapped_rss_kb(dir), 0, "round %d", round);
        off = 0;
        for (size_t i = 0; i < n; i++) {
            const qwi_tensor *t = qwi_st_at(m->weights, i);
            cr_assert(memcmp(before + off, t->data, t->nbytes) == 0, "%s changed", t->name);
            off += t->nbytes;
        }
        b->ops->destroy(b);
    }
    free(before);
    qwi_model_free(m);
    free(dir);
}

/* Eviction touches only the set's own mappings: heap memory (a model a test
 * built in memory) would be zeroed by MADV_DONTNEED, so it is refused. */
Test(weight_memory, evict_only_touches_mappings) {
    char *dir = tiny("f32");
    qwi_model *m = NULL;
    cr_assert_eq(qwi_model_load(dir, &m), QW_OK, "%s", qw_last_error());
    float *heap = malloc(1 << 16);
    cr_assert_not_null(heap);
    for (int i = 0; i < (1 << 14); i++) heap[i] = (float)i;
    cr_assert_eq(qwi_model_evict(m, heap, 1 << 16), 0);
    cr_assert_eq(qwi_st_evict(m->weights, heap, 1 << 16), 0);
    for (int i = 0; i < (1 << 14); i++) cr_assert_eq(heap[i], (float)i);
    /* a range that runs past the end of the mapping is refused too */
    const qwi_tensor *t = &m->embed;
    cr_assert_eq(qwi_st_evict(m->weights, t->data, SIZE_MAX / 2), 0);
    cr_assert_eq(qwi_model_evict(NULL, t->data, t->nbytes), 0);
    cr_assert_eq(qwi_st_evict(m->weights, NULL, 16), 0);
    /* a tensor in the mapping: its pages go, its bytes stay */
    float first = ((const float *)t->data)[0];
    cr_assert_gt(qwi_model_evict(m, t->data, t->nbytes), 0);
    cr_assert_eq(((const float *)t->data)[0], first);
    cr_assert_gt(qwi_model_evict_all(m), 0);
    cr_assert_eq(mapped_rss_kb(dir), 0);
    cr_assert_eq(((const float *)t->data)[0], first);
    free(heap);
    qwi_model_free(m);
    free(dir);
}
