/*
 * test_quant_cpu_backend.c - quantized checkpoints (AWQ int4, GPTQ int8,
 * Qwen3-FP8, GPTQ int4 with a quantized head, GPTQ with dynamic rules
 * mixing int4, int8 and a plain linear) on the CPU backend, end to end through the engine: in both
 * numerics modes a batch of requests gives bit for bit the logits each gets
 * alone (1 vs 2 threads, too); the quantized layers always run from the
 * repacked copy, so QWINFER_CPU_WEIGHTS=mmap changes no bit; the create
 * progress counts the quantized tensors' bytes and ends at done == total.
 * (Accuracy against the float64 reference and the unquantized twin is
 * tests/test_quant_reference.c; the kernels are tests/test_quant_kernels.c.)
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "qwinfer.h"
#include "util/engine_util.h"
#include "util/testutil.h"

#define NJOBS 4

static const char *const formats[][2] = {
    { "quant-cpu-awq", "--shape tiny --layers 2 --seed 5 --quant awq --group-size 32" },
    { "quant-cpu-gptq8", "--shape tiny --layers 2 --seed 5 --quant gptq --bits 8 --group-size 32" },
    { "quant-cpu-fp8", "--shape tiny --layers 2 --seed 5 --quant fp8 --fp8-block 32" },
    /* GPTQModel's lm_head=True: the head runs through the int4 kernels too */
    { "quant-cpu-gptq4-head",
      "--shape tiny --layers 2 --seed 5 --quant gptq --bits 4 --group-size 32 --gptq-lm-head" },
    /* GPTQModel "dynamic" rules: int4, int8 (group 16) and a plain linear in one model */
    { "quant-cpu-gptq-dyn",
      "--shape tiny --layers 2 --seed 5 --quant gptq --bits 4 --group-size 32 --gptq-dynamic "
      "'{\"-:model\\\\.layers\\\\.0\\\\.self_attn\\\\.o_proj\": {}, "
      "\"+:model\\\\.layers\\\\.1\\\\.mlp\\\\.\": {\"bits\": 8, \"group_size\": 16}}'" },
};
#define NFORMATS ((int)(sizeof formats / sizeof formats[0]))
static const bool format_int4[] = { true, false, false, true, true };

static char *model(int f) {
    char *dir = qwt_model(formats[f][0], formats[f][1]);
    cr_assert_not_null(dir, "model generation failed: %s", formats[f][1]);
    return dir;
}

static void make_jobs(qwt_job *jobs, int32_t prompts[NJOBS][64]) {
    for (int i = 0; i < NJOBS; i++) {
        int len = 3 + (i * 29) % 60;
        qwt_make_prompt(prompts[i], len, 512, 700 + (uint64_t)i);
        jobs[i] = (qwt_job){ .prompt = prompts[i], .num_prompt = len, .max_tokens = 4,
                             .temperature = 0, .seed = -1, .ignore_eos = 1, .keep_logits = 1 };
    }
}

static void assert_same(const qwt_result *a, const qwt_result *b, const char *what, int f) {
    for (int i = 0; i < NJOBS; i++) {
        cr_assert(a[i].num_logits == b[i].num_logits && a[i].num_logits > 0 &&
                      memcmp(a[i].logits, b[i].logits,
                             sizeof(float) * (size_t)a[i].vocab * (size_t)a[i].num_logits) == 0,
                  "%s (%s): job %d logits are not bit-identical", formats[f][0], what, i);
    }
}

/* Every mode; QW_NUMERICS_FAST_INT8 (int4's int8 activations) on the int4
 * model, where its batched run is also chunked (7-token steps). */
Test(quant_cpu_backend, batched_equals_alone_in_both_modes) {
    static int32_t prompts[NJOBS][64];
    qwt_job jobs[NJOBS];
    make_jobs(jobs, prompts);
    const int64_t modes[] = { QW_NUMERICS_EXACT, QW_NUMERICS_FAST, QW_NUMERICS_FAST_INT8 };
    const char *const names[] = { "exact", "fast", "fast-int8 chunked" };
    for (int f = 0; f < NFORMATS; f++) {
        char *dir = model(f);
        for (int mi = 0; mi < 3; mi++) {
            if (modes[mi] == QW_NUMERICS_FAST_INT8 && !format_int4[f]) continue;
            qwt_result *alone = calloc(NJOBS, sizeof *alone), *got = calloc(NJOBS, sizeof *got);
            qw_engine *e = qwt_engine_new(dir, &(qwt_engine_cfg){ .numerics = modes[mi], .threads = 1 });
            for (int i = 0; i < NJOBS; i++) qwt_run_jobs(e, &jobs[i], 1, &alone[i]);
            qw_engine_destroy(e);
            e = qwt_engine_new(dir, &(qwt_engine_cfg){
                                       .numerics = modes[mi], .threads = 2,
                                       .max_batched_tokens = modes[mi] == QW_NUMERICS_FAST_INT8 ? 7 : 0 });
            qwt_run_jobs(e, jobs, NJOBS, got);
            qw_engine_destroy(e);
            assert_same(alone, got, names[mi], f);
            qwt_results_free(alone, NJOBS);
            qwt_results_free(got, NJOBS);
            free(alone);
            free(got);
        }
        free(dir);
    }
}

/* QWINFER_CPU_WEIGHTS=mmap asks exact mode to run from the file mapping;
 * a quantized model is packed anyway (its kernels read only the packed
 * form), all of it, so the logits are those of the default copy. */
Test(quant_cpu_backend, quantized_models_always_run_from_the_copy) {
    static int32_t prompts[NJOBS][64];
    qwt_job jobs[NJOBS];
    make_jobs(jobs, prompts);
    char *dir = model(0);
    qwt_result *copy = calloc(NJOBS, sizeof *copy), *mm = calloc(NJOBS, sizeof *mm);
    qw_engine *e = qwt_engine_new(dir, &(qwt_engine_cfg){ .numerics = QW_NUMERICS_EXACT });
    qwt_run_jobs(e, jobs, NJOBS, copy);
    qw_engine_destroy(e);
    setenv("QWINFER_CPU_WEIGHTS", "mmap", 1);
    e = qwt_engine_new(dir, &(qwt_engine_cfg){ .numerics = QW_NUMERICS_EXACT });
    unsetenv("QWINFER_CPU_WEIGHTS");
    qwt_run_jobs(e, jobs, NJOBS, mm);
    qw_engine_destroy(e);
    assert_same(copy, mm, "QWINFER_CPU_WEIGHTS=mmap", 0);
    qwt_results_free(copy, NJOBS);
    qwt_results_free(mm, NJOBS);
    free(copy);
    free(mm);
    free(dir);
}

typedef struct {
    int calls, monotonic, at_total;
    uint64_t last_done, total;
} tracker;

static int on_progress(void *ud, uint64_t done, uint64_t total) {
    tracker *t = ud;
    t->calls++;
    if (done < t->last_done || done > total) t->monotonic = 0;
    t->last_done = done;
    t->total = total;
    t->at_total += done == total;
    return 0;
}

/* The packing reports each quantized linear's source bytes (its qweight,
 * qzeros, scales, g_idx): counting more (e.g. the [n, k] f32 size of its
 * placeholder tensor) would reach the total before the packing ends, so
 * only the last report may have done == total. */
Test(quant_cpu_backend, create_progress_counts_quantized_tensors) {
    for (int f = 0; f < NFORMATS; f++) {
        char *dir = model(f);
        for (int numerics = 0; numerics < 2; numerics++) {
            tracker t = { .monotonic = 1 };
            qw_engine_options *o;
            cr_assert_eq(qw_engine_options_create(&o), QW_OK);
            cr_assert_eq(qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, dir), QW_OK);
            cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_CHECK_WEIGHTS, 0), QW_OK);
            cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_NUMERICS,
                                                   numerics ? QW_NUMERICS_FAST : QW_NUMERICS_EXACT), QW_OK);
            cr_assert_eq(qw_engine_options_set_progress(o, on_progress, &t), QW_OK);
            qw_engine *e = NULL;
            cr_assert_eq(qw_engine_create(o, &e), QW_OK, "%s", qw_last_error());
            qw_engine_destroy(e);
            qw_engine_options_destroy(o);
            cr_assert(t.calls >= 2 && t.monotonic, "%s: %d calls", formats[f][0], t.calls);
            cr_assert_eq(t.last_done, t.total, "%s: ends at %llu of %llu", formats[f][0],
                         (unsigned long long)t.last_done, (unsigned long long)t.total);
            cr_assert_eq(t.at_total, 1, "%s: %d reports at done == total", formats[f][0], t.at_total);
        }
        free(dir);
    }
}
