/*
 * engine_util.c - see engine_util.h.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "util/engine_util.h"

qw_engine *qwt_engine_new(const char *model_dir, const qwt_engine_cfg *cfg) {
    qw_engine_options *o = NULL;
    cr_assert_eq(qw_engine_options_create(&o), QW_OK);
    cr_assert_eq(qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, model_dir), QW_OK);
    if (cfg) {
        if (cfg->max_num_seqs) cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_MAX_NUM_SEQS, cfg->max_num_seqs), QW_OK);
        if (cfg->max_batched_tokens)
            cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_MAX_NUM_BATCHED_TOKENS, cfg->max_batched_tokens), QW_OK);
        if (cfg->num_kv_blocks) cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_NUM_KV_BLOCKS, cfg->num_kv_blocks), QW_OK);
        if (cfg->block_size) cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_BLOCK_SIZE, cfg->block_size), QW_OK);
        if (cfg->threads) cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_NUM_THREADS, cfg->threads), QW_OK);
        if (cfg->max_model_len) cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_MAX_MODEL_LEN, cfg->max_model_len), QW_OK);
        if (cfg->partial_prefills)
            cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_MAX_NUM_PARTIAL_PREFILLS, cfg->partial_prefills), QW_OK);
        if (cfg->chunked < 0) cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_ENABLE_CHUNKED_PREFILL, 0), QW_OK);
        if (cfg->numerics) cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_NUMERICS, cfg->numerics), QW_OK);
        if (cfg->kv_cache_dtype)
            cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_KV_CACHE_DTYPE, cfg->kv_cache_dtype), QW_OK);
    }
    qw_engine *e = NULL;
    qw_status st = qw_engine_create(o, &e);
    qw_engine_options_destroy(o);
    cr_assert_eq(st, QW_OK, "qw_engine_create(%s): %s", model_dir, qw_last_error());
    return e;
}

typedef struct logits_sink {
    qwt_result *res;
} logits_sink;

static void keep_logits(void *user, qw_request *req, int32_t position, const float *logits, int32_t vocab) {
    (void)req;
    (void)position;
    qwt_result *res = user;
    res->logits = realloc(res->logits, sizeof(float) * (size_t)vocab * (size_t)(res->num_logits + 1));
    cr_assert_not_null(res->logits);
    memcpy(res->logits + (size_t)res->num_logits * (size_t)vocab, logits, sizeof(float) * (size_t)vocab);
    res->num_logits++;
    res->vocab = vocab;
}

static qw_request *make_request(const qwt_job *j, qwt_result *res) {
    qw_request *r = NULL;
    cr_assert_eq(qw_request_create(&r), QW_OK);
    cr_assert_eq(qw_request_set_prompt(r, j->prompt, (size_t)j->num_prompt), QW_OK);
    if (j->max_tokens) cr_assert_eq(qw_request_set_int(r, QW_REQ_MAX_TOKENS, j->max_tokens), QW_OK);
    cr_assert_eq(qw_request_set_double(r, QW_REQ_TEMPERATURE, j->temperature), QW_OK);
    if (j->top_k) cr_assert_eq(qw_request_set_int(r, QW_REQ_TOP_K, j->top_k), QW_OK);
    if (j->top_p > 0) cr_assert_eq(qw_request_set_double(r, QW_REQ_TOP_P, j->top_p), QW_OK);
    if (j->seed >= 0) cr_assert_eq(qw_request_set_int(r, QW_REQ_SEED, j->seed), QW_OK);
    if (j->ignore_eos) cr_assert_eq(qw_request_set_int(r, QW_REQ_IGNORE_EOS, 1), QW_OK);
    if (j->keep_logits) cr_assert_eq(qw_request_set_logits_callback(r, keep_logits, res), QW_OK);
    if (j->priority) cr_assert_eq(qw_request_set_int(r, QW_REQ_PRIORITY, j->priority), QW_OK);
    if (j->salt) cr_assert_eq(qw_request_set_int(r, QW_REQ_CACHE_SALT, j->salt), QW_OK);
    if (j->session) cr_assert_eq(qw_request_set_session(r, j->session), QW_OK);
    qw_request_set_user_data(r, res);
    return r;
}

int qwt_run_jobs(qw_engine *e, const qwt_job *jobs, int n, qwt_result *results) {
    qw_request **reqs = calloc((size_t)n, sizeof *reqs);
    cr_assert_not_null(reqs);
    memset(results, 0, sizeof *results * (size_t)n);
    for (int i = 0; i < n; i++) {
        results[i].first_token_step = -1;
        reqs[i] = make_request(&jobs[i], &results[i]);
    }
    int step = 0;
    qw_event ev[64];
    for (;;) {
        for (int i = 0; i < n; i++) {
            if (jobs[i].submit_at_step == step) {
                qw_status st = qw_engine_submit(e, reqs[i]);
                cr_assert_eq(st, QW_OK, "submit job %d: %s", i, qw_last_error());
            }
        }
        bool later = false;
        for (int i = 0; i < n; i++) later |= jobs[i].submit_at_step > step;
        if (!qw_engine_has_work(e) && !later) break;
        size_t got = 0;
        qw_status st = qw_engine_step(e, ev, 64, sizeof ev[0], &got);
        cr_assert_eq(st, QW_OK, "step %d: %s", step, qw_last_error());
        for (size_t k = 0; k < got; k++) {
            qwt_result *res = ev[k].user_data;
            cr_assert_not_null(res);
            if (ev[k].kind == QW_EVENT_TOKEN) {
                cr_assert_lt(res->num_tokens, 4096);
                cr_assert_eq(ev[k].index, (uint32_t)res->num_tokens, "event index");
                if (res->num_tokens == 0) res->first_token_step = step;
                res->tokens[res->num_tokens++] = ev[k].token;
            }
            if (ev[k].finish_reason != QW_FINISH_NONE) {
                res->finish_reason = (int32_t)ev[k].finish_reason;
                res->num_finish_events++;
                res->finish_step = step;
            }
        }
        step++;
        cr_assert_lt(step, 1000000, "engine does not terminate");
    }
    for (int i = 0; i < n; i++) {
        cr_assert_eq(results[i].num_finish_events, 1, "job %d ended %d times", i, results[i].num_finish_events);
        cr_assert_eq(qw_request_get_state(reqs[i]), QW_STATE_FINISHED);
        size_t nt = 0;
        cr_assert_eq(qw_request_get_tokens(reqs[i], NULL, 0, &nt), QW_OK);
        cr_assert_eq(nt, (size_t)results[i].num_tokens, "get_tokens agrees with events");
        qw_request_stats rs;
        cr_assert_eq(qw_request_get_stats(reqs[i], &rs, sizeof rs), QW_OK);
        cr_assert_eq(rs.size, sizeof rs);
        cr_assert_eq(rs.generated_tokens, (uint64_t)results[i].num_tokens);
        results[i].cached_prompt_tokens = rs.cached_prompt_tokens;
        results[i].prompt_tokens = rs.prompt_tokens;
        results[i].num_preemptions = rs.num_preemptions;
        cr_assert_eq(qw_request_release(reqs[i]), QW_OK);
    }
    free(reqs);
    return step;
}

void qwt_results_free(qwt_result *results, int n) {
    for (int i = 0; i < n; i++) {
        free(results[i].logits);
        results[i].logits = NULL;
    }
}

void qwt_make_prompt(int32_t *out, int n, int32_t vocab, uint64_t seed) {
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 12345;
    for (int i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out[i] = (int32_t)(x % (uint64_t)vocab);
    }
}
