/*
 * test_plan_decode_rows.c - the plan's is_decode marks (lib/backend.h):
 * a sequence's one row is a decode row exactly when it is a generated
 * token; a one-row chunk of a prompt (a chunk boundary, the one uncached
 * token of a prompt whose blocks are in the prefix cache) is not. A
 * backend with separate prefill and decode attention routes by these marks
 * (the CUDA backend, docs/cuda.md "Limits"), so a wrong mark breaks
 * chunked == unchunked or cached == cold there. Recorded from a CPU
 * engine's real steps through a wrapped forward().
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "util/engine_util.h"
#include "util/testutil.h"

#define PROMPT 33

static const qwi_backend_ops *real_ops;
static qwi_backend_ops wrapped_ops;
static int n_prompt_one_row, n_decode_rows, n_multi_row, n_bad;

/* Checks each sequence's mark against its rows' positions (every request
 * here has a PROMPT-token prompt), then runs the real forward. */
static qw_status recording_forward(qwi_backend *b, const qwi_plan *p) {
    cr_assert_not_null(p->is_decode);
    for (int32_t i = 0; i < p->num_seqs; i++) {
        const int32_t r0 = p->query_start[i], n = p->query_start[i + 1] - r0;
        const bool generated = p->positions[r0] >= PROMPT;
        if (n > 1) {
            n_multi_row++;
            n_bad += p->is_decode[i] != 0;
        } else if (generated) {
            n_decode_rows++;
            n_bad += p->is_decode[i] != 1;
        } else {
            n_prompt_one_row++;
            n_bad += p->is_decode[i] != 0;
        }
    }
    return real_ops->forward(b, p);
}

Test(plan_decode_rows, marks_follow_generated_tokens) {
    char *dir = qwt_model("pdr-tiny-f32", "--shape tiny --dtype f32 --seed 9");
    cr_assert_not_null(dir);
    /* chunks of at most 32 tokens: the 33-token prompt's second chunk is
     * its last token alone */
    qwt_engine_cfg cfg = {.max_num_seqs = 4, .max_batched_tokens = 32, .block_size = 16, .threads = 1};
    qw_engine *e = qwt_engine_new(dir, &cfg);
    real_ops = e->backend->ops;
    wrapped_ops = *real_ops;
    wrapped_ops.forward = recording_forward;
    e->backend->ops = &wrapped_ops;

    int32_t prompt[PROMPT];
    qwt_make_prompt(prompt, PROMPT, qw_engine_vocab_size(e), 21);
    qwt_job job = {.prompt = prompt, .num_prompt = PROMPT, .max_tokens = 4, .ignore_eos = 1, .seed = -1};
    qwt_result cold, cached;
    qwt_run_jobs(e, &job, 1, &cold);
    cr_assert_eq(n_prompt_one_row, 1, "the chunk boundary's one-row chunk: %d", n_prompt_one_row);
    /* again: its two full blocks come from the prefix cache, its last
     * token is a one-row prompt chunk */
    qwt_run_jobs(e, &job, 1, &cached);
    cr_assert_geq(cached.cached_prompt_tokens, 32);
    cr_assert_eq(n_prompt_one_row, 2, "the cached prompt's one uncached row: %d", n_prompt_one_row);
    cr_assert_eq(n_decode_rows, 2 * 3, "decode rows: %d", n_decode_rows);
    cr_assert_eq(n_multi_row, 1);
    cr_assert_eq(n_bad, 0, "%d sequences marked wrong", n_bad);
    cr_assert_eq(cached.num_tokens, cold.num_tokens);
    cr_assert_arr_eq(cached.tokens, cold.tokens, sizeof(int32_t) * (size_t)cold.num_tokens);
    qwt_results_free(&cold, 1);
    qwt_results_free(&cached, 1);
    e->backend->ops = real_ops;
    qw_engine_destroy(e);
    free(dir);
}
