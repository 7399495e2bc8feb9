/*
 * test_load.c - 2000 requests of random lengths with shared prefixes, salts,
 * priorities, random cancellations, multi-turn sessions and forks, run once
 * with an unconstrained KV pool (the reference, no cancellations) and once
 * with a pool at 10% of the total demand. Every request must end exactly
 * once, outputs must equal the reference (a prefix of it when cancelled),
 * no block may stay held, and the statistics must add up.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qwinfer.h"
#include "util/engine_util.h"
#include "util/testutil.h"

#define NPLAIN 1680
#define NSESSIONS 100
#define TURNS 3
#define NFORKS 20
#define NJOBS (NPLAIN + NSESSIONS * TURNS + NFORKS)
#define NSYS 5
#define VOCAB 512

typedef struct job {
    int32_t prompt[128];
    int32_t num_prompt;
    int32_t max_tokens;
    int32_t priority;
    int64_t salt;
    double temperature;
    int ignore_eos;
    int session;        /* -1: none; else session index (forks: NSESSIONS + f) */
    int turn;
    int submit_step;    /* plain jobs and first turns                        */
    int cancel_step;    /* -1: never (constrained run only)                  */
} job;

typedef struct outcome {
    int32_t tokens[64];
    int32_t num_tokens;
    int finishes;
    int32_t finish_reason;
    uint64_t preemptions;
} outcome;

static uint64_t rng_state;
static uint32_t rnd(uint32_t n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

static job jobs[NJOBS];
static int32_t sys_prompts[NSYS][96];
static int sys_len[NSYS];

/* Jobs 0..NPLAIN-1 plain; then session s turn t at NPLAIN + s*TURNS + t;
 * then fork f (of session f, after its turn 0) at NPLAIN + NSESSIONS*TURNS + f. */
static void make_workload(void) {
    rng_state = 0x2545F4914F6CDD1Dull;
    for (int i = 0; i < NSYS; i++) {
        sys_len[i] = 32 + (int)rnd(64);
        qwt_make_prompt(sys_prompts[i], sys_len[i], VOCAB, 500 + (uint64_t)i);
    }
    for (int i = 0; i < NJOBS; i++) {
        job *j = &jobs[i];
        memset(j, 0, sizeof *j);
        j->session = -1;
        j->cancel_step = -1;
        int n = 0;
        bool first_turn = i < NPLAIN || (i < NPLAIN + NSESSIONS * TURNS && (i - NPLAIN) % TURNS == 0);
        if (first_turn && rnd(3) != 0) {  /* two thirds start with a shared system prompt */
            int s = (int)rnd(NSYS);
            memcpy(j->prompt, sys_prompts[s], sizeof(int32_t) * (size_t)sys_len[s]);
            n = sys_len[s];
        }
        int extra = 1 + (int)rnd(first_turn ? 30 : 12);
        qwt_make_prompt(j->prompt + n, extra, VOCAB, 10000 + (uint64_t)i);
        j->num_prompt = n + extra;
        j->max_tokens = 1 + (int)rnd(i < NPLAIN ? 48 : 8);
        j->priority = (int)rnd(4);
        j->salt = rnd(5) == 0 ? 99 : 0;
        j->temperature = rnd(2) ? 0.0 : 0.9;
        j->ignore_eos = (int)rnd(2);
        if (i < NPLAIN) {
            j->submit_step = i / 200;   /* a burst: the pool cannot hold it */
            if (rnd(10) == 0) j->cancel_step = j->submit_step + (int)rnd(8);
        } else if (i < NPLAIN + NSESSIONS * TURNS) {
            j->session = (i - NPLAIN) / TURNS;
            j->turn = (i - NPLAIN) % TURNS;
            j->submit_step = j->session / 4;
        } else {
            j->session = NSESSIONS + (i - NPLAIN - NSESSIONS * TURNS);
            j->turn = 1;
        }
    }
}

/* Blocks of 16 the whole workload would hold if nothing were ever freed. */
static int64_t total_demand_blocks(void) {
    int64_t blocks = 0, hist[NSESSIONS + NFORKS] = {0}, after_turn0[NSESSIONS] = {0};
    for (int i = 0; i < NJOBS; i++) {
        int64_t base = 0;
        int s = jobs[i].session;
        if (s >= NSESSIONS) hist[s] = after_turn0[s - NSESSIONS];
        if (s >= 0) base = hist[s];
        int64_t len = base + jobs[i].num_prompt + jobs[i].max_tokens;
        if (s >= 0) {
            hist[s] = len;
            if (s < NSESSIONS && jobs[i].turn == 0) after_turn0[s] = len;
        }
        blocks += (len + 15) / 16;
    }
    return blocks;
}

static qw_request *make_request(int i, qw_session *ses) {
    const job *j = &jobs[i];
    qw_request *r;
    cr_assert_eq(qw_request_create(&r), QW_OK);
    cr_assert_eq(qw_request_set_prompt(r, j->prompt, (size_t)j->num_prompt), QW_OK);
    qw_request_set_int(r, QW_REQ_MAX_TOKENS, j->max_tokens);
    qw_request_set_double(r, QW_REQ_TEMPERATURE, j->temperature);
    qw_request_set_double(r, QW_REQ_TOP_P, 0.95);
    qw_request_set_int(r, QW_REQ_SEED, 7000 + i);
    qw_request_set_int(r, QW_REQ_PRIORITY, j->priority);
    qw_request_set_int(r, QW_REQ_CACHE_SALT, j->salt);
    qw_request_set_int(r, QW_REQ_IGNORE_EOS, j->ignore_eos);
    if (ses) qw_request_set_session(r, ses);
    qw_request_set_user_data(r, (void *)(intptr_t)i);
    return r;
}

static void run_workload(const char *model, int64_t kv_blocks, bool cancel, outcome *out, qw_engine_stats *st) {
    qw_engine *e = qwt_engine_new(model, &(qwt_engine_cfg){.num_kv_blocks = kv_blocks, .max_num_seqs = 256,
                                                           .max_batched_tokens = 1024,
                                                           .partial_prefills = 64});
    static qw_request *reqs[NJOBS];
    static qw_session *sessions[NSESSIONS + NFORKS];
    static bool submitted[NJOBS];
    memset(reqs, 0, sizeof reqs);
    memset(submitted, 0, sizeof submitted);
    memset(out, 0, sizeof *out * NJOBS);
    for (int s = 0; s < NSESSIONS; s++) cr_assert_eq(qw_session_create(e, &sessions[s]), QW_OK);
    for (int f = 0; f < NFORKS; f++) sessions[NSESSIONS + f] = NULL;

    qw_event ev[512];
    int finished = 0;
    for (int step = 0; finished < NJOBS; step++) {
        cr_assert_lt(step, 200000, "workload does not terminate");
        for (int i = 0; i < NJOBS; i++) {
            const job *j = &jobs[i];
            bool due = !submitted[i] && (j->session < 0 || j->turn == 0) && j->submit_step == step;
            if (due) {
                reqs[i] = make_request(i, j->session >= 0 ? sessions[j->session] : NULL);
                cr_assert_eq(qw_engine_submit(e, reqs[i]), QW_OK, "job %d: %s", i, qw_last_error());
                submitted[i] = true;
            }
            if (cancel && submitted[i] && j->cancel_step == step &&
                qw_request_get_state(reqs[i]) != QW_STATE_FINISHED)
                cr_assert_eq(qw_engine_cancel(e, reqs[i]), QW_OK);
        }
        size_t n = 0;
        cr_assert_eq(qw_engine_step(e, ev, 512, sizeof ev[0], &n), QW_OK, "%s", qw_last_error());
        for (size_t k = 0; k < n; k++) {
            int i = (int)(intptr_t)ev[k].user_data;
            outcome *o = &out[i];
            if (ev[k].kind == QW_EVENT_TOKEN) {
                cr_assert_lt(o->num_tokens, 64);
                o->tokens[o->num_tokens++] = ev[k].token;
            }
            if (ev[k].finish_reason == QW_FINISH_NONE) continue;
            o->finishes++;
            o->finish_reason = (int32_t)ev[k].finish_reason;
            qw_request_stats rs;
            qw_request_get_stats(ev[k].request, &rs, sizeof rs);
            o->preemptions = rs.num_preemptions;
            finished++;
        }
        /* follow-up turns and forks start once the previous turn finished */
        for (int i = NPLAIN; i < NJOBS; i++) {
            const job *j = &jobs[i];
            if (submitted[i] || j->turn == 0) continue;
            int prev = j->session < NSESSIONS ? i - 1 : NPLAIN + (j->session - NSESSIONS) * TURNS;
            if (!submitted[prev] || qw_request_get_state(reqs[prev]) != QW_STATE_FINISHED) continue;
            if (j->session >= NSESSIONS) {
                int src = j->session - NSESSIONS;
                /* fork right after turn 0, before turn 1 of the source starts */
                if (submitted[prev + 1]) continue;
                cr_assert_eq(qw_session_fork(sessions[src], &sessions[j->session]), QW_OK, "%s", qw_last_error());
            } else if (j->turn == 1 && j->session < NFORKS && !sessions[NSESSIONS + j->session]) {
                continue;  /* let the fork happen first */
            }
            reqs[i] = make_request(i, sessions[j->session]);
            cr_assert_eq(qw_engine_submit(e, reqs[i]), QW_OK, "job %d: %s", i, qw_last_error());
            submitted[i] = true;
        }
    }
    cr_assert_eq(qw_engine_has_work(e), 0);
    for (int i = 0; i < NJOBS; i++) qw_request_release(reqs[i]);
    for (int s = 0; s < NSESSIONS + NFORKS; s++) cr_assert_eq(qw_session_destroy(sessions[s]), QW_OK);
    cr_assert_eq(qw_engine_get_stats(e, st, sizeof *st), QW_OK);
    cr_assert_eq(st->kv_blocks_used, 0, "%llu blocks leaked", (unsigned long long)st->kv_blocks_used);
    cr_assert_eq(qw_engine_num_free_kv_blocks(e), qw_engine_num_kv_blocks(e));
    qw_engine_destroy(e);
}

Test(load, two_thousand_requests_at_ten_percent_kv, .timeout = 900) {
    char *model = qwt_model("load-tiny-f32", "--shape tiny --dtype f32 --seed 51");
    cr_assert_not_null(model);
    make_workload();
    int64_t demand = total_demand_blocks();
    static outcome ref[NJOBS], got[NJOBS];
    qw_engine_stats sr, sg;
    run_workload(model, demand + 64, false, ref, &sr);
    int64_t small = demand / 10;
    run_workload(model, small, true, got, &sg);
    cr_log_info("demand %lld blocks, constrained pool %lld; preemptions %llu; hits %llu/%llu tokens",
                (long long)demand, (long long)small, (unsigned long long)sg.num_preemptions,
                (unsigned long long)sg.prefix_cache_hits, (unsigned long long)sg.prefix_cache_queries);

    uint64_t gen = 0, pre = 0;
    int cancelled = 0;
    for (int i = 0; i < NJOBS; i++) {
        cr_assert_eq(ref[i].finishes, 1, "reference job %d ended %d times", i, ref[i].finishes);
        cr_assert_eq(got[i].finishes, 1, "job %d ended %d times", i, got[i].finishes);
        gen += (uint64_t)got[i].num_tokens;
        pre += got[i].preemptions;
        if (got[i].finish_reason == QW_FINISH_CANCELLED) {
            cancelled++;
            cr_assert_leq(got[i].num_tokens, ref[i].num_tokens);
            cr_assert_arr_eq(got[i].tokens, ref[i].tokens, sizeof(int32_t) * (size_t)got[i].num_tokens,
                             "cancelled job %d is not a prefix of its reference", i);
        } else {
            cr_assert_eq(got[i].finish_reason, ref[i].finish_reason, "job %d finish reason", i);
            cr_assert_eq(got[i].num_tokens, ref[i].num_tokens, "job %d: %d vs %d tokens", i, got[i].num_tokens,
                         ref[i].num_tokens);
            cr_assert_arr_eq(got[i].tokens, ref[i].tokens, sizeof(int32_t) * (size_t)got[i].num_tokens,
                             "job %d output differs from the unconstrained run", i);
        }
    }
    cr_assert_gt(cancelled, 10, "the workload was meant to cancel some requests");
    cr_assert_gt(sg.num_preemptions, 0, "a pool at 10%% of demand must preempt");
    cr_assert_gt(sg.prefix_cache_hits, 0);
    cr_assert_eq(sg.num_finished, NJOBS);
    cr_assert_eq(sg.generation_tokens, gen, "generated tokens add up");
    cr_assert_eq(sg.num_preemptions, pre, "per-request preemptions add up");
    cr_assert_eq(sg.num_running + sg.num_waiting, 0);
    cr_assert_leq(sg.prefix_cache_hits, sg.prefix_cache_queries);
    free(model);
}
