/*
 * test_api_names.c - the static names of the public enums, option names in
 * setter errors, and qw_engine_get_model_info against the config that
 * qw-makemodel wrote (issue 14, item 1).
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qwinfer.h"
#include "util/testutil.h"

Test(api_names, finish_reasons_and_kinds) {
    const char *want[] = {"none", "stop", "length", "cancelled", "error", "timeout"};
    for (int r = 0; r <= 5; r++) cr_assert_str_eq(qw_finish_reason_string((qw_finish_reason)r), want[r]);
    cr_assert_str_eq(qw_finish_reason_string((qw_finish_reason)6), "unknown");
    cr_assert_str_eq(qw_finish_reason_string((qw_finish_reason)-1), "unknown");
    cr_assert_str_eq(qw_event_kind_string(QW_EVENT_TOKEN), "token");
    cr_assert_str_eq(qw_event_kind_string(QW_EVENT_FINISHED), "finished");
    cr_assert_str_eq(qw_event_kind_string((qw_event_kind)0), "unknown");
    cr_assert_str_eq(qw_request_state_string(QW_STATE_QUEUED), "queued");
    cr_assert_str_eq(qw_request_state_string((qw_request_state)9), "unknown");
}

/* Every key from 1 to the last has its own name, spelled as the constant. */
static void check_names(const char *(*name)(int), int last, const char *prefix) {
    for (int k = 1; k <= last; k++) {
        const char *n = name(k);
        cr_assert(strncmp(n, prefix, strlen(prefix)) == 0, "key %d: %s", k, n);
        for (int j = 1; j < k; j++) cr_assert_str_neq(n, name(j), "keys %d and %d", j, k);
    }
    cr_assert_str_eq(name(0), "unknown");
    cr_assert_str_eq(name(last + 1), "unknown");
}
static const char *eng_name(int k) { return qw_engine_option_name((qw_engine_option)k); }
static const char *req_name(int k) { return qw_request_option_name((qw_request_option)k); }

Test(api_names, option_names) {
    check_names(eng_name, QW_OPT_KV_CACHE_DTYPE, "QW_OPT_");
    check_names(req_name, QW_REQ_INCLUDE_STOP_STR_IN_OUTPUT, "QW_REQ_");
    cr_assert_str_eq(qw_engine_option_name(QW_OPT_MAX_NUM_SEQS), "QW_OPT_MAX_NUM_SEQS");
    cr_assert_str_eq(qw_request_option_name(QW_REQ_TOP_P), "QW_REQ_TOP_P");
}

Test(api_names, setter_errors_name_the_option) {
    qw_engine_options *o;
    cr_assert_eq(qw_engine_options_create(&o), QW_OK);
    cr_assert_eq(qw_engine_options_set_string(o, QW_OPT_NUM_THREADS, "4"), QW_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(qw_last_error(), "QW_OPT_NUM_THREADS") != NULL, "%s", qw_last_error());
    cr_assert_eq(qw_engine_options_set_double(o, QW_OPT_DEVICE, 0.5), QW_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(qw_last_error(), "QW_OPT_DEVICE") != NULL, "%s", qw_last_error());
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_MODEL_PATH, 1), QW_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(qw_last_error(), "QW_OPT_MODEL_PATH") != NULL, "%s", qw_last_error());
    cr_assert_eq(qw_engine_options_set_double(o, (qw_engine_option)99, 0.5), QW_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(qw_last_error(), "unknown option 99") != NULL, "%s", qw_last_error());
    qw_engine_options_destroy(o);
}

Test(api_names, model_info_matches_the_config) {
    char *dir = qwt_model("api-names-tiny", "--shape tiny --dtype bf16 --seed 3");
    cr_assert_not_null(dir);
    qw_engine_options *o;
    qw_engine *e;
    cr_assert_eq(qw_engine_options_create(&o), QW_OK);
    cr_assert_eq(qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, dir), QW_OK);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_MAX_MODEL_LEN, 300), QW_OK);
    cr_assert_eq(qw_engine_create(o, &e), QW_OK, "%s", qw_last_error());
    qw_engine_options_destroy(o);

    qw_model_info mi;
    memset(&mi, 0x5a, sizeof mi);
    cr_assert_eq(qw_engine_get_model_info(e, &mi, sizeof mi), QW_OK);
    cr_assert_eq(mi.size, sizeof mi);
    cr_assert_str_eq(mi.architecture, "Qwen3ForCausalLM");
    cr_assert_str_eq(mi.dtype, "bfloat16");
    /* the tiny shape of qw-makemodel (tools/qw-makemodel.c), read back from config.json */
    size_t len = 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *cfg = qwt_read_file(path, &len);
    cr_assert_not_null(cfg);
    char want[64];
    snprintf(want, sizeof want, "\"vocab_size\": %d", mi.vocab_size);
    cr_assert(strstr(cfg, want), "%s not in config", want);
    snprintf(want, sizeof want, "\"num_hidden_layers\": %d", mi.num_layers);
    cr_assert(strstr(cfg, want), "%s not in config", want);
    snprintf(want, sizeof want, "\"num_key_value_heads\": %d", mi.num_kv_heads);
    cr_assert(strstr(cfg, want), "%s not in config", want);
    snprintf(want, sizeof want, "\"head_dim\": %d", mi.head_dim);
    cr_assert(strstr(cfg, want), "%s not in config", want);
    free(cfg);
    cr_assert_eq(mi.vocab_size, qw_engine_vocab_size(e));
    cr_assert_eq(mi.max_model_len, 300);
    cr_assert_eq(mi.max_model_len, qw_engine_max_model_len(e));
    cr_assert_eq(mi.has_tokenizer, 1);
    cr_assert_eq(mi.tie_word_embeddings, 1);
    cr_assert(mi.num_eos >= 1 && mi.num_eos <= QW_MAX_EOS_IDS);
    for (int i = 0; i < mi.num_eos; i++)
        cr_assert(mi.eos_token_ids[i] >= 0 && mi.eos_token_ids[i] < mi.vocab_size);
    cr_assert(mi.rope_theta > 0 && mi.rms_norm_eps > 0);

    /* the size convention: 8 bytes get the size only; a bigger struct is zero-padded */
    uint64_t small = 0;
    cr_assert_eq(qw_engine_get_model_info(e, (qw_model_info *)&small, sizeof small), QW_OK);
    cr_assert_eq(small, sizeof small);
    unsigned char big[sizeof(qw_model_info) + 32];
    memset(big, 0xee, sizeof big);
    cr_assert_eq(qw_engine_get_model_info(e, (qw_model_info *)big, sizeof big), QW_OK);
    for (size_t i = sizeof(qw_model_info); i < sizeof big; i++) cr_assert_eq(big[i], 0);
    cr_assert_eq(qw_engine_get_model_info(e, &mi, 4), QW_ERR_BUFFER_TOO_SMALL);
    cr_assert_eq(qw_engine_get_model_info(NULL, &mi, sizeof mi), QW_ERR_INVALID_ARGUMENT);
    cr_assert_eq(qw_engine_get_model_info(e, NULL, sizeof mi), QW_ERR_INVALID_ARGUMENT);
    qw_engine_destroy(e);
    free(dir);
}

Test(api_names, request_setter_errors_name_the_option) {
    qw_request *r;
    cr_assert_eq(qw_request_create(&r), QW_OK);
    cr_assert_eq(qw_request_set_int(r, QW_REQ_TOP_P, 1), QW_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(qw_last_error(), "QW_REQ_TOP_P") != NULL, "%s", qw_last_error());
    cr_assert_eq(qw_request_set_double(r, QW_REQ_MAX_TOKENS, 3.0), QW_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(qw_last_error(), "QW_REQ_MAX_TOKENS") != NULL, "%s", qw_last_error());
    cr_assert_eq(qw_request_set_double(r, QW_REQ_TEMPERATURE, 0.0 / 0.0), QW_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(qw_last_error(), "QW_REQ_TEMPERATURE") != NULL, "%s", qw_last_error());
    qw_request_release(r);
}
