/*
 * test_no_chunking.c - QW_OPT_ENABLE_CHUNKED_PREFILL = 0 under contention:
 * with several prompts waiting (where the long-prefill threshold would cut
 * chunks), no scheduled prefill is ever part of a prompt; a prompt waits for
 * a step whose budget holds all of it. Checked on the scheduler alone and
 * through the engine, whose outputs must still equal the chunked run.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "kv.h"
#include "scheduler.h"
#include "util/engine_util.h"
#include "util/testutil.h"

#define NSEQ 12
#define CAP 160

typedef struct fixture {
    qwi_kv_pool pool;
    qwi_sched s;
    qwi_seq seqs[NSEQ];
    int32_t toks[NSEQ][CAP];
} fixture;

/* Chunking off, a threshold far below the prompts and a partial-prefill
 * limit that would allow cutting: only the chunking switch forbids it. */
static fixture *setup(int blocks, int budget) {
    fixture *f = calloc(1, sizeof *f);
    cr_assert_not_null(f);
    cr_assert_eq(qwi_kv_pool_init(&f->pool, blocks, 4, false), QW_OK);
    qwi_sched_config cfg = {.max_num_seqs = 8, .max_num_batched_tokens = budget, .chunked_prefill = false,
                            .max_num_partial_prefills = 4, .long_prefill_threshold = 4};
    cr_assert_eq(qwi_sched_init(&f->s, &f->pool, &cfg, CAP), QW_OK);
    return f;
}

static qwi_seq *add(fixture *f, int i, int prompt, int generated) {
    qwi_seq *q = &f->seqs[i];
    memset(q, 0, sizeof *q);
    q->tokens = f->toks[i];
    for (int k = 0; k < CAP; k++) q->tokens[k] = i * 1000 + k;   /* no prefix sharing */
    q->num_prompt_tokens = prompt;
    q->num_tokens = prompt + generated;
    q->capacity = CAP;
    q->arrival = (uint64_t)i;
    cr_assert_eq(qwi_block_table_init(&q->table, &f->pool, CAP), QW_OK);
    cr_assert_eq(qwi_sched_add(&f->s, q), QW_OK);
    return q;
}

/* One step as the engine would run it; a sequence whose prefill is done
 * samples a token, and finishes after `gen` generated tokens. whole: assert
 * that every entry takes all its sequence has left (no cut prompt). */
static void run(fixture *f, qwi_sched_output *o, int gen, bool whole, int step) {
    qwi_sched_schedule(&f->s, o);
    for (int i = 0; whole && i < o->num_entries; i++) {
        const qwi_seq *q = o->entries[i].seq;
        cr_assert_eq(o->entries[i].num_new_tokens, q->num_tokens - q->num_computed_tokens,
                     "step %d: seq %d gets %d tokens at %d of its %d: a cut prompt", step, (int)(q - f->seqs),
                     o->entries[i].num_new_tokens, q->num_computed_tokens, q->num_tokens);
    }
    qwi_sched_commit(&f->s, o);
    for (int i = 0; i < o->num_entries; i++) {
        qwi_seq *q = o->entries[i].seq;
        if (q->num_computed_tokens < q->num_tokens) continue;
        q->tokens[q->num_tokens++] = 1;
        if (q->num_tokens - q->num_prompt_tokens >= gen) {
            qwi_sched_remove(&f->s, q);
            qwi_kv_release(&f->pool, &q->table);
        }
    }
}

static void teardown(fixture *f, int n) {
    for (int i = 0; i < n; i++) {
        qwi_sched_remove(&f->s, &f->seqs[i]);
        qwi_kv_release(&f->pool, &f->seqs[i].table);
        qwi_block_table_destroy(&f->seqs[i].table);
    }
    cr_assert_eq(qwi_kv_num_available(&f->pool), f->pool.num_blocks, "no block leaked");
    qwi_sched_destroy(&f->s);
    qwi_kv_pool_destroy(&f->pool);
    free(f);
}

Test(no_chunking, scheduler_never_cuts_a_prompt_under_contention) {
    fixture *f = setup(400, 64);
    int prompts[NSEQ] = {40, 17, 64, 9, 33, 50, 2, 61, 28, 45, 12, 64};
    for (int i = 0; i < 8; i++) add(f, i, prompts[i], 0);
    qwi_sched_output o;
    int steps = 0, done = 0;
    while (qwi_sched_has_work(&f->s)) {
        if (steps == 3)
            for (int i = 8; i < NSEQ; i++) add(f, i, prompts[i], 0);   /* more arrive mid-run */
        run(f, &o, 6, true, steps);
        cr_assert_leq(o.num_batched_tokens, 64);
        steps++;
        cr_assert_lt(steps, 1000, "no progress");
    }
    for (int i = 0; i < NSEQ; i++) done += f->seqs[i].state == QWI_SEQ_FINISHED;
    cr_assert_eq(done, NSEQ);
    teardown(f, NSEQ);
}

/* The exception: a sequence preempted after its prompt + output grew past
 * the whole budget can only be recomputed in chunks; it must still run. */
Test(no_chunking, recompute_longer_than_the_budget_still_runs) {
    fixture *f = setup(400, 16);
    qwi_seq *q = add(f, 0, 10, 14);       /* 24 tokens to recompute, budget 16 */
    add(f, 1, 5, 0);
    qwi_sched_output o;
    int steps = 0;
    while (qwi_sched_has_work(&f->s)) {
        run(f, &o, 17, false, steps);
        cr_assert_lt(++steps, 100, "the long recompute never finishes");
    }
    cr_assert_eq(q->num_tokens, 10 + 17);
    teardown(f, 2);
}

/* Through the engine: after every step no running request sits in the
 * middle of its prefill (which a cut chunk would leave), and the outputs
 * equal the chunked run's. */
Test(no_chunking, engine_outputs_equal_chunked_and_no_partial_prefill) {
    char *dir = qwt_model("nochunk-tiny-f32", "--shape tiny --dtype f32 --seed 81");
    cr_assert_not_null(dir);
    enum { N = 6 };
    static int32_t prompts[N][64];
    int lens[N] = {60, 35, 48, 20, 64, 41};
    qwt_job jobs[N];
    memset(jobs, 0, sizeof jobs);
    /* Budget 64 and 4 partial prefills: the default threshold is 16. */
    qwt_engine_cfg chunked = {.threads = 1, .max_batched_tokens = 64, .max_model_len = 128};
    qwt_engine_cfg whole = chunked;
    whole.chunked = -1;
    qw_engine *e = qwt_engine_new(dir, &chunked);
    int32_t vocab = qw_engine_vocab_size(e);
    for (int i = 0; i < N; i++) {
        qwt_make_prompt(prompts[i], lens[i], vocab, 900 + (uint64_t)i);
        jobs[i] = (qwt_job){.prompt = prompts[i], .num_prompt = lens[i], .max_tokens = 5, .seed = -1,
                            .ignore_eos = 1, .submit_at_step = i < 4 ? 0 : 2};
    }
    qwt_result ref[N];
    qwt_run_jobs(e, jobs, N, ref);
    qw_engine_destroy(e);

    e = qwt_engine_new(dir, &whole);
    qw_request *reqs[N];
    int32_t out[N][8];
    int nout[N] = {0};
    for (int i = 0; i < N; i++) {
        cr_assert_eq(qw_request_create(&reqs[i]), QW_OK);
        cr_assert_eq(qw_request_set_prompt(reqs[i], prompts[i], (size_t)lens[i]), QW_OK);
        cr_assert_eq(qw_request_set_int(reqs[i], QW_REQ_MAX_TOKENS, 5), QW_OK);
        cr_assert_eq(qw_request_set_int(reqs[i], QW_REQ_IGNORE_EOS, 1), QW_OK);
        cr_assert_eq(qw_request_set_double(reqs[i], QW_REQ_TEMPERATURE, 0), QW_OK);
        cr_assert_eq(qw_request_set_user_data(reqs[i], &nout[i]), QW_OK);
    }
    qw_event ev[64];
    for (int step = 0; step < 1000; step++) {
        for (int i = 0; i < N; i++)
            if (jobs[i].submit_at_step == step) cr_assert_eq(qw_engine_submit(e, reqs[i]), QW_OK, "%s", qw_last_error());
        if (step > 2 && !qw_engine_has_work(e)) break;
        size_t n = 0;
        cr_assert_eq(qw_engine_step(e, ev, 64, sizeof ev[0], &n), QW_OK, "%s", qw_last_error());
        for (size_t k = 0; k < n; k++) {
            int i = (int)((int *)ev[k].user_data - nout);
            if (ev[k].kind == QW_EVENT_TOKEN) out[i][nout[i]++] = ev[k].token;
        }
        for (int32_t r = 0; r < e->sched.num_running; r++) {
            const qwi_seq *q = e->sched.running[r];
            cr_assert_leq(q->num_tokens - q->num_computed_tokens, 1,
                          "step %d: a running request has %d of %d tokens computed: its prompt was cut",
                          step, q->num_computed_tokens, q->num_tokens);
        }
    }
    cr_assert(!qw_engine_has_work(e));
    for (int i = 0; i < N; i++) {
        cr_assert_eq(nout[i], ref[i].num_tokens, "request %d", i);
        cr_assert_arr_eq(out[i], ref[i].tokens, sizeof(int32_t) * (size_t)nout[i], "request %d differs from the chunked run", i);
        cr_assert_eq(qw_request_release(reqs[i]), QW_OK);
    }
    qwt_results_free(ref, N);
    qw_engine_destroy(e);
    free(dir);
}
