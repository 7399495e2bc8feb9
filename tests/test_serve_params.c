/*
 * test_serve_params.c - qw-serve's request-field parser (tools/qw-serve/
 * params.c): OpenAI/vLLM/TGI fields to a qw_request, defaults, every
 * type/range refusal naming its field, and qws_params_apply landing each
 * value in the request (read back through lib/request.h, test-only).
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "params.h"
#include "request.h"
#include "stop_strings.h"

#define VOCAB 1000
#define MAXLEN 4096

static json_t *js(const char *text) {
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);
    cr_assert_not_null(j, "bad test JSON %s: %s", text, e.text);
    return j;
}

/* Parse text as api; expect success. */
static void ok(const char *text, qws_api api, qws_params *p) {
    json_t *j = js(text);
    qws_error err;
    memset(&err, 0, sizeof err);
    int rc = qws_params_parse(j, api, VOCAB, MAXLEN, p, &err);
    cr_assert_eq(rc, 0, "%s: %s (param %s)", text, err.message, err.param);
    json_decref(j);
}

/* Parse text as api; expect a 400 naming param (and code when not NULL). */
static void refused(const char *text, qws_api api, const char *param, const char *code) {
    json_t *j = js(text);
    qws_error err;
    memset(&err, 0, sizeof err);
    qws_params p;
    int rc = qws_params_parse(j, api, VOCAB, MAXLEN, &p, &err);
    cr_assert_eq(rc, -1, "%s was accepted", text);
    cr_assert_eq(err.http_status, 400, "%s: status %d", text, err.http_status);
    cr_assert_str_eq(err.type, "invalid_request_error");
    cr_assert_str_eq(err.param, param, "%s: param '%s', message %s", text, err.param, err.message);
    cr_assert_str_eq(err.code, code ? code : "", "%s: code '%s'", text, err.code);
    cr_assert_gt(strlen(err.message), 0);
    /* Nothing left to free, and freeing is harmless. */
    cr_assert_null(p.stop);
    cr_assert_null(p.logit_bias_ids);
    cr_assert_null(p.stop_token_ids);
    qws_params_free(&p);
    json_decref(j);
}

Test(serve_params, openai_defaults) {
    qws_params p;
    ok("{\"model\": \"m\", \"prompt\": \"hi\"}", QWS_API_COMPLETIONS, &p);
    cr_assert_eq(p.temperature, 1.0);
    cr_assert_eq(p.top_p, 1.0);
    cr_assert_eq(p.top_k, 0);
    cr_assert_eq(p.min_p, 0.0);
    cr_assert_eq(p.max_tokens, 16, "OpenAI's completions default");
    cr_assert_eq(p.n, 1);
    cr_assert_eq(p.n_stop, 0);
    cr_assert_eq(p.has_seed, 0);
    cr_assert_eq(p.logprobs, -1);
    cr_assert_eq(p.prompt_logprobs, -1);
    cr_assert_eq(p.repetition_penalty, 1.0);
    cr_assert_eq(p.skip_special_tokens, 1);
    cr_assert_eq(p.enable_thinking, 1);
    cr_assert_eq(p.stream, 0);
    cr_assert_eq(p.has_cache_salt, 0);
    cr_assert_eq(p.timeout_ms, 0);
    qws_params_free(&p);
}

Test(serve_params, completions_all_fields) {
    qws_params p;
    ok("{\"temperature\": 0.5, \"top_p\": 0.9, \"top_k\": 40, \"min_p\": 0.05, \"max_tokens\": 32,"
       " \"stop\": [\"\\n\\n\", \"END\"], \"stop_token_ids\": [7, 9], \"seed\": -5, \"n\": 3,"
       " \"logprobs\": 5, \"prompt_logprobs\": 2, \"presence_penalty\": 0.5, \"frequency_penalty\": -1,"
       " \"repetition_penalty\": 1.1, \"logit_bias\": {\"12\": -100, \"999\": 2.5}, \"ignore_eos\": true,"
       " \"min_tokens\": 4, \"priority\": -3, \"cache_salt\": \"tenant-a\", \"timeout\": 1.5,"
       " \"skip_special_tokens\": false, \"include_stop_str_in_output\": true, \"echo\": true,"
       " \"user\": \"x\", \"stream\": true, \"stream_options\": {\"include_usage\": true,"
       " \"continuous_usage_stats\": true}, \"some_unknown_field\": [1, 2]}",
       QWS_API_COMPLETIONS, &p);
    cr_assert_eq(p.temperature, 0.5);
    cr_assert_eq(p.top_p, 0.9);
    cr_assert_eq(p.top_k, 40);
    cr_assert_eq(p.min_p, 0.05);
    cr_assert_eq(p.max_tokens, 32);
    cr_assert_eq(p.n_stop, 2);
    cr_assert_str_eq(p.stop[0], "\n\n");
    cr_assert_eq(p.stop_lens[0], 2);
    cr_assert_str_eq(p.stop[1], "END");
    cr_assert_eq(p.n_stop_token_ids, 2);
    cr_assert_eq(p.stop_token_ids[1], 9);
    cr_assert_eq(p.has_seed, 1);
    cr_assert_eq(p.seed, -5);
    cr_assert_eq(p.n, 3);
    cr_assert_eq(p.logprobs, 5);
    cr_assert_eq(p.prompt_logprobs, 2);
    cr_assert_eq(p.presence_penalty, 0.5);
    cr_assert_eq(p.frequency_penalty, -1.0);
    cr_assert_eq(p.repetition_penalty, 1.1);
    cr_assert_eq(p.n_logit_bias, 2);
    cr_assert_eq(p.logit_bias_ids[0], 12);
    cr_assert_eq(p.logit_bias_values[0], -100.0f);
    cr_assert_eq(p.logit_bias_ids[1], 999);
    cr_assert_eq(p.logit_bias_values[1], 2.5f);
    cr_assert_eq(p.ignore_eos, 1);
    cr_assert_eq(p.min_tokens, 4);
    cr_assert_eq(p.priority, -3);
    cr_assert_eq(p.has_cache_salt, 1);
    cr_assert_eq(p.cache_salt, qws_cache_salt_hash("tenant-a", 8));
    cr_assert_eq(p.timeout_ms, 1500);
    cr_assert_eq(p.skip_special_tokens, 0);
    cr_assert_eq(p.include_stop_str_in_output, 1);
    cr_assert_eq(p.echo, 1);
    cr_assert_eq(p.stream, 1);
    cr_assert_eq(p.include_usage, 1);
    cr_assert_eq(p.continuous_usage_stats, 1);
    qws_params_free(&p);
    /* freed params are the defaults again */
    cr_assert_eq(p.n_stop, 0);
    cr_assert_null(p.stop);
    cr_assert_eq(p.temperature, 1.0);
}

Test(serve_params, nulls_are_absent_and_stop_string) {
    qws_params p;
    ok("{\"temperature\": null, \"max_tokens\": null, \"stop\": \"###\", \"seed\": null,"
       " \"logit_bias\": null, \"top_k\": -1, \"n\": 2.0}",
       QWS_API_COMPLETIONS, &p);
    cr_assert_eq(p.temperature, 1.0);
    cr_assert_eq(p.max_tokens, 16, "null is absent: the completions default");
    cr_assert_eq(p.n_stop, 1);
    cr_assert_str_eq(p.stop[0], "###");
    cr_assert_eq(p.has_seed, 0);
    cr_assert_eq(p.top_k, 0, "top_k -1 means off");
    cr_assert_eq(p.n, 2, "an integral real is an integer");
    qws_params_free(&p);
}

Test(serve_params, chat_fields) {
    qws_params p;
    ok("{\"messages\": [], \"logprobs\": true, \"top_logprobs\": 3, \"max_tokens\": 10,"
       " \"max_completion_tokens\": 20, \"chat_template_kwargs\": {\"enable_thinking\": false, \"x\": 1},"
       " \"echo\": 5}",
       QWS_API_CHAT, &p);
    cr_assert_eq(p.logprobs, 3);
    cr_assert_eq(p.max_tokens, 20, "max_completion_tokens wins");
    cr_assert_eq(p.enable_thinking, 0);
    cr_assert_eq(p.echo, 0, "echo is a completions field; chat ignores it");
    qws_params_free(&p);

    ok("{\"logprobs\": true}", QWS_API_CHAT, &p);
    cr_assert_eq(p.logprobs, 0);
    qws_params_free(&p);
    ok("{\"logprobs\": false, \"top_logprobs\": 0}", QWS_API_CHAT, &p);
    cr_assert_eq(p.logprobs, -1);
    qws_params_free(&p);
    ok("{\"max_tokens\": 7}", QWS_API_CHAT, &p);
    cr_assert_eq(p.max_tokens, 7);
    qws_params_free(&p);
}

Test(serve_params, refusals_name_the_field) {
    const qws_api C = QWS_API_COMPLETIONS, H = QWS_API_CHAT;
    refused("{\"temperature\": \"hot\"}", C, "temperature", NULL);
    refused("{\"temperature\": 2.5}", C, "temperature", NULL);
    refused("{\"temperature\": -0.1}", C, "temperature", NULL);
    refused("{\"temperature\": 1e308}", C, "temperature", NULL);
    refused("{\"top_p\": 0}", C, "top_p", NULL);
    refused("{\"top_p\": 1.01}", C, "top_p", NULL);
    refused("{\"top_k\": -2}", C, "top_k", NULL);
    refused("{\"top_k\": 1.5}", C, "top_k", NULL);
    refused("{\"min_p\": 2}", C, "min_p", NULL);
    refused("{\"max_tokens\": 0}", C, "max_tokens", NULL);
    refused("{\"max_tokens\": \"10\"}", C, "max_tokens", NULL);
    refused("{\"max_tokens\": 9223372036854775807}", C, "max_tokens", NULL);
    refused("{\"max_tokens\": 1e300}", C, "max_tokens", NULL);
    refused("{\"max_tokens\": 4097}", C, "max_tokens", "context_length_exceeded");
    refused("{\"max_completion_tokens\": 5000}", H, "max_completion_tokens", "context_length_exceeded");
    refused("{\"n\": 0}", C, "n", NULL);
    refused("{\"n\": 17}", C, "n", NULL);
    refused("{\"n\": true}", C, "n", NULL);
    refused("{\"best_of\": 3}", C, "best_of", NULL);
    /* forms qwinfer cannot honour are refused, not silently dropped */
    refused("{\"response_format\": {\"type\": \"json_object\"}}", C, "response_format", NULL);
    refused("{\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {}}}", H, "response_format", NULL);
    refused("{\"response_format\": \"text\"}", H, "response_format", NULL);
    refused("{\"guided_json\": {}}", C, "guided_json", NULL);
    refused("{\"guided_choice\": [\"a\"]}", H, "guided_choice", NULL);
    refused("{\"use_beam_search\": true}", C, "use_beam_search", NULL);
    refused("{\"logprobs\": 21}", C, "logprobs", NULL);
    refused("{\"logprobs\": true}", C, "logprobs", NULL);
    refused("{\"logprobs\": 3}", H, "logprobs", NULL);
    refused("{\"top_logprobs\": 2}", H, "top_logprobs", NULL);
    refused("{\"logprobs\": true, \"top_logprobs\": 21}", H, "top_logprobs", NULL);
    refused("{\"prompt_logprobs\": -1}", C, "prompt_logprobs", NULL);
    refused("{\"presence_penalty\": 2.01}", C, "presence_penalty", NULL);
    refused("{\"frequency_penalty\": -3}", C, "frequency_penalty", NULL);
    refused("{\"repetition_penalty\": 0}", C, "repetition_penalty", NULL);
    refused("{\"repetition_penalty\": 101}", C, "repetition_penalty", NULL);
    refused("{\"stop\": 5}", C, "stop", NULL);
    refused("{\"stop\": [\"a\", 5]}", C, "stop", NULL);
    refused("{\"stop\": [\"\"]}", C, "stop", NULL);
    refused("{\"stop_token_ids\": [1, 1000]}", C, "stop_token_ids", NULL);
    refused("{\"stop_token_ids\": [-1]}", C, "stop_token_ids", NULL);
    refused("{\"stop_token_ids\": 5}", C, "stop_token_ids", NULL);
    refused("{\"logit_bias\": []}", C, "logit_bias", NULL);
    refused("{\"logit_bias\": {\"abc\": 1}}", C, "logit_bias", NULL);
    refused("{\"logit_bias\": {\"-1\": 1}}", C, "logit_bias", NULL);
    refused("{\"logit_bias\": {\"1000\": 1}}", C, "logit_bias", NULL);
    refused("{\"logit_bias\": {\"99999999999999999999999\": 1}}", C, "logit_bias", NULL);
    refused("{\"logit_bias\": {\"5\": 100.5}}", C, "logit_bias", NULL);
    refused("{\"logit_bias\": {\"5\": \"x\"}}", C, "logit_bias", NULL);
    refused("{\"logit_bias\": {\"7\": 1, \"007\": 2}}", C, "logit_bias", NULL);
    refused("{\"seed\": 1.5}", C, "seed", NULL);
    refused("{\"seed\": \"1\"}", C, "seed", NULL);
    refused("{\"ignore_eos\": 1}", C, "ignore_eos", NULL);
    refused("{\"min_tokens\": -1}", C, "min_tokens", NULL);
    refused("{\"max_tokens\": 5, \"min_tokens\": 6}", C, "min_tokens", NULL);
    refused("{\"priority\": 2000000000}", C, "priority", NULL);
    refused("{\"cache_salt\": \"\"}", C, "cache_salt", NULL);
    refused("{\"cache_salt\": 5}", C, "cache_salt", NULL);
    refused("{\"timeout\": 0}", C, "timeout", NULL);
    refused("{\"timeout\": -1}", C, "timeout", NULL);
    refused("{\"timeout\": 1e12}", C, "timeout", NULL);
    refused("{\"skip_special_tokens\": \"no\"}", C, "skip_special_tokens", NULL);
    refused("{\"include_stop_str_in_output\": 0}", C, "include_stop_str_in_output", NULL);
    refused("{\"echo\": \"yes\"}", C, "echo", NULL);
    refused("{\"stream\": 1}", C, "stream", NULL);
    refused("{\"stream_options\": {\"include_usage\": true}}", C, "stream_options", NULL);
    refused("{\"stream\": true, \"stream_options\": []}", C, "stream_options", NULL);
    refused("{\"stream\": true, \"stream_options\": {\"include_usage\": 1}}", C, "stream_options.include_usage",
            NULL);
    refused("{\"chat_template_kwargs\": 3}", H, "chat_template_kwargs", NULL);
    refused("{\"chat_template_kwargs\": {\"enable_thinking\": \"no\"}}", H,
            "chat_template_kwargs.enable_thinking", NULL);
    refused("[1, 2]", C, "", NULL);
}

Test(serve_params, stop_limits) {
    /* 64 strings of 1024 bytes pass; 65 strings or 1025 bytes do not. */
    char *big = malloc(70 * 1100 + 64);
    cr_assert_not_null(big);
    char *w = big;
    w += sprintf(w, "{\"stop\": [");
    for (int i = 0; i < 64; i++) {
        *w++ = i ? ',' : ' ';
        *w++ = '"';
        memset(w, 'a' + i % 26, 1024);
        w += 1024;
        *w++ = '"';
    }
    strcpy(w, "]}");
    qws_params p;
    ok(big, QWS_API_COMPLETIONS, &p);
    cr_assert_eq(p.n_stop, 64);
    cr_assert_eq(p.stop_lens[63], 1024);
    qws_params_free(&p);
    strcpy(w, ", \"x\"]}");
    refused(big, QWS_API_COMPLETIONS, "stop", NULL);
    strcpy(big, "{\"stop\": [\"");
    memset(big + 11, 'z', 1025);
    strcpy(big + 11 + 1025, "\"]}");
    refused(big, QWS_API_COMPLETIONS, "stop", NULL);
    free(big);
}

Test(serve_params, tgi_parameters) {
    qws_params p;
    ok("{\"inputs\": \"hi\"}", QWS_API_TGI, &p);
    cr_assert_eq(p.temperature, 0.0, "TGI decodes greedily by default");
    cr_assert_eq(p.logprobs, 0, "TGI tokens carry their logprob");
    cr_assert_eq(p.prompt_logprobs, -1);
    qws_params_free(&p);

    ok("{\"inputs\": \"hi\", \"parameters\": {\"do_sample\": true}}", QWS_API_TGI, &p);
    cr_assert_eq(p.temperature, 1.0);
    qws_params_free(&p);
    ok("{\"inputs\": \"hi\", \"parameters\": {\"top_k\": 5}}", QWS_API_TGI, &p);
    cr_assert_eq(p.temperature, 1.0, "a sampling warper turns sampling on");
    cr_assert_eq(p.top_k, 5);
    qws_params_free(&p);

    ok("{\"inputs\": \"hi\", \"parameters\": {\"temperature\": 0.7, \"top_p\": 0.95, \"max_new_tokens\": 20,"
       " \"repetition_penalty\": 1.2, \"frequency_penalty\": 0.1, \"seed\": 42, \"stop\": [\"\\n\"],"
       " \"details\": true, \"decoder_input_details\": true, \"return_full_text\": true,"
       " \"top_n_tokens\": 3, \"watermark\": false, \"typical_p\": null, \"truncate\": null, \"best_of\": 1}}",
       QWS_API_TGI, &p);
    cr_assert_eq(p.temperature, 0.7);
    cr_assert_eq(p.top_p, 0.95);
    cr_assert_eq(p.max_tokens, 20);
    cr_assert_eq(p.repetition_penalty, 1.2);
    cr_assert_eq(p.frequency_penalty, 0.1);
    cr_assert_eq(p.has_seed, 1);
    cr_assert_eq(p.seed, 42);
    cr_assert_eq(p.n_stop, 1);
    cr_assert_eq(p.details, 1);
    cr_assert_eq(p.decoder_input_details, 1);
    cr_assert_eq(p.prompt_logprobs, 0);
    cr_assert_eq(p.return_full_text, 1);
    cr_assert_eq(p.logprobs, 3);
    qws_params_free(&p);

    const qws_api T = QWS_API_TGI;
    refused("{\"parameters\": 5}", T, "parameters", NULL);
    refused("{\"parameters\": {\"temperature\": 0}}", T, "temperature", NULL);
    refused("{\"parameters\": {\"typical_p\": 0.5}}", T, "typical_p", NULL);
    refused("{\"parameters\": {\"truncate\": 10}}", T, "truncate", NULL);
    refused("{\"parameters\": {\"grammar\": {\"type\": \"json\"}}}", T, "grammar", NULL);
    refused("{\"parameters\": {\"watermark\": true}}", T, "watermark", NULL);
    refused("{\"parameters\": {\"best_of\": 2}}", T, "best_of", NULL);
    refused("{\"parameters\": {\"max_new_tokens\": 0}}", T, "max_new_tokens", NULL);
    refused("{\"parameters\": {\"max_new_tokens\": 5000}}", T, "max_new_tokens", "context_length_exceeded");
    refused("{\"parameters\": {\"do_sample\": \"yes\"}}", T, "do_sample", NULL);
    refused("{\"parameters\": {\"top_n_tokens\": 21}}", T, "top_n_tokens", NULL);
    refused("{\"parameters\": {\"details\": 1}}", T, "details", NULL);
}

Test(serve_params, cache_salt_hash_is_fnv1a_64) {
    /* Published FNV-1a 64 test vectors. */
    cr_assert_eq(qws_cache_salt_hash("a", 1), 0xaf63dc4c8601ec8cULL);
    cr_assert_eq(qws_cache_salt_hash("foobar", 6), 0x85944171f73967e8ULL);
    cr_assert_eq(qws_cache_salt_hash("", 0), 0xcbf29ce484222325ULL);
    cr_assert_neq(qws_cache_salt_hash("tenant-a", 8), qws_cache_salt_hash("tenant-b", 8));
}

Test(serve_params, apply_sets_every_field) {
    qws_params p;
    ok("{\"temperature\": 0.25, \"top_p\": 0.5, \"top_k\": 7, \"min_p\": 0.125, \"max_tokens\": 99,"
       " \"stop\": [\"xy\", \"z\"], \"stop_token_ids\": [3], \"seed\": 77, \"n\": 4, \"logprobs\": 2,"
       " \"prompt_logprobs\": 1, \"presence_penalty\": 0.5, \"frequency_penalty\": 0.75,"
       " \"repetition_penalty\": 1.5, \"logit_bias\": {\"11\": 5}, \"ignore_eos\": true, \"min_tokens\": 2,"
       " \"priority\": 9, \"cache_salt\": \"s\", \"timeout\": 0.0001, \"skip_special_tokens\": false,"
       " \"include_stop_str_in_output\": true}",
       QWS_API_COMPLETIONS, &p);
    qw_request *r = NULL;
    cr_assert_eq(qw_request_create(&r), QW_OK);
    qws_error err;
    cr_assert_eq(qws_params_apply(&p, r, &err), 0, "%s", err.message);
    cr_assert_eq(r->temperature, 0.25);
    cr_assert_eq(r->top_p, 0.5);
    cr_assert_eq(r->top_k, 7);
    cr_assert_eq(r->min_p, 0.125);
    cr_assert_eq(r->max_tokens, 99);
    cr_assert_not_null(r->stop_list);
    cr_assert_eq(r->stop_list->n, 2);
    cr_assert_str_eq(r->stop_list->str[0], "xy");
    cr_assert_eq(r->num_stop, 1);
    cr_assert_eq(r->stop_tokens[0], 3);
    cr_assert(r->has_seed);
    cr_assert_eq(r->seed, 77);
    cr_assert_eq(r->num_samples, 4);
    cr_assert_eq(r->lp.n, 2);
    cr_assert_eq(r->lp.prompt_n, 1);
    cr_assert_eq(r->presence_penalty, 0.5);
    cr_assert_eq(r->frequency_penalty, 0.75);
    cr_assert_eq(r->repetition_penalty, 1.5);
    cr_assert_eq(r->num_bias, 1);
    cr_assert_eq(r->bias_ids[0], 11);
    cr_assert_eq(r->bias_values[0], 5.0f);
    cr_assert(r->ignore_eos);
    cr_assert_eq(r->min_tokens, 2);
    cr_assert_eq(r->priority, 9);
    cr_assert_eq(r->cache_salt, qws_cache_salt_hash("s", 1));
    cr_assert_eq(r->deadline_ms, 1, "0.1 ms rounds up to 1 ms, never to 0 (= none)");
    cr_assert(r->keep_special);
    cr_assert(r->include_stop_str);
    qw_request_release(r);
    qws_params_free(&p);

    /* Defaults leave the request's own defaults in place. */
    ok("{}", QWS_API_CHAT, &p);
    cr_assert_eq(qw_request_create(&r), QW_OK);
    cr_assert_eq(qws_params_apply(&p, r, &err), 0, "%s", err.message);
    cr_assert_eq(r->temperature, 1.0);
    cr_assert_eq(r->max_tokens, -1);
    cr_assert(!r->has_seed);
    cr_assert_eq(r->lp.n, -1);
    cr_assert_eq(r->deadline_ms, 0);
    cr_assert_eq(r->cache_salt, 0);
    cr_assert(!r->keep_special);
    cr_assert_null(r->stop_list);
    qw_request_release(r);
    qws_params_free(&p);
}

Test(serve_params, apply_reports_library_refusal) {
    /* A hand-made params the library refuses (parse never makes it):
     * the library's message comes back as a 400 naming the field. */
    qws_params p;
    ok("{}", QWS_API_COMPLETIONS, &p);
    p.temperature = NAN;
    qw_request *r = NULL;
    cr_assert_eq(qw_request_create(&r), QW_OK);
    qws_error err;
    memset(&err, 0, sizeof err);
    cr_assert_eq(qws_params_apply(&p, r, &err), -1);
    cr_assert_eq(err.http_status, 400);
    cr_assert_str_eq(err.param, "temperature");
    cr_assert(strstr(err.message, "NaN") != NULL, "%s", err.message);
    qw_request_release(r);
    cr_assert_eq(qws_params_apply(NULL, NULL, &err), -1);
}

Test(serve_params, error_set_cuts_and_terminates) {
    qws_error err;
    char long_param[200];
    memset(long_param, 'p', sizeof long_param - 1);
    long_param[sizeof long_param - 1] = '\0';
    cr_assert_eq(qws_error_set(&err, 503, "server_error", "overloaded", long_param, "%0600d", 1), -1);
    cr_assert_eq(err.http_status, 503);
    cr_assert_str_eq(err.code, "overloaded");
    cr_assert_eq(strlen(err.param), sizeof err.param - 1);
    cr_assert_eq(strlen(err.message), sizeof err.message - 1);
    cr_assert_eq(qws_error_set(NULL, 400, NULL, NULL, NULL, "x"), -1);
}
