/*
 * params.c - qw-serve: request sampling/serving fields -> qw_request (see
 * params.h for the rules). Ranges are OpenAI's where OpenAI has the field,
 * vLLM's for its extensions, and never wider than the engine's setters
 * accept, so qws_params_apply only fails on out-of-memory.
 */
#include "params.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STOP_TOKEN_IDS 1024
/* The engine's limits of QW_REQ_MAX_TOKENS / QW_REQ_MIN_TOKENS / priority. */
#define MAX_TOKENS_LIMIT (INT32_MAX / 2)
#define PRIORITY_LIMIT (1 << 30)
/* "timeout" above this many seconds (~31 years) is surely a unit mistake. */
#define MAX_TIMEOUT_S 1e9

static void copy_str(char *dst, size_t cap, const char *src) {
    snprintf(dst, cap, "%s", src ? src : "");
}

int qws_error_set(qws_error *err, int http_status, const char *type, const char *code,
                  const char *param, const char *fmt, ...) {
    if (!err) return -1;
    err->http_status = http_status;
    copy_str(err->type, sizeof err->type, type);
    copy_str(err->code, sizeof err->code, code);
    copy_str(err->param, sizeof err->param, param);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt ? fmt : "", ap);
    va_end(ap);
    return -1;
}

uint64_t qws_cache_salt_hash(const char *s, size_t len) {
    /* FNV-1a 64: offset basis and prime of the published definition. */
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h ? h : 1;
}

static void set_defaults(qws_params *p, qws_api api) {
    memset(p, 0, sizeof *p);
    p->api = api;
    p->temperature = 1.0;
    p->top_p = 1.0;
    /* OpenAI's (and vLLM's) documented default for completions is 16
     * tokens; chat and TGI run to the end of the sequence or the model. */
    p->max_tokens = api == QWS_API_COMPLETIONS ? 16 : -1;
    p->n = 1;
    p->logprobs = -1;
    p->prompt_logprobs = -1;
    p->repetition_penalty = 1.0;
    p->skip_special_tokens = 1;
    p->enable_thinking = 1;
}

void qws_params_free(qws_params *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_stop; i++) free(p->stop[i]);
    free(p->stop);
    free(p->stop_lens);
    free(p->stop_token_ids);
    free(p->logit_bias_ids);
    free(p->logit_bias_values);
    set_defaults(p, p->api);
}

/* ---- typed field readers -------------------------------------------------
 * Each returns 0 when the field is absent or null (out untouched), 1 when it
 * was read into *out, -1 with *err set. */

static int bad(qws_error *err, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(qws_error *err, const char *name, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return qws_error_set(err, 400, "invalid_request_error", NULL, name, "%s", msg);
}

static int oom(qws_error *err) {
    return qws_error_set(err, 500, "server_error", NULL, NULL, "out of memory parsing the request");
}

static const json_t *field(const json_t *obj, const char *key) {
    const json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

/* A JSON number in [lo, hi] (lo excluded when lo_open), finite. */
static int read_double(const json_t *obj, const char *key, const char *name, double lo, int lo_open,
                       double hi, double *out, qws_error *err) {
    const json_t *v = field(obj, key);
    if (!v) return 0;
    if (!json_is_number(v)) return bad(err, name, "'%s' must be a number", name);
    double d = json_number_value(v);
    if (!isfinite(d)) return bad(err, name, "'%s' must be a finite number", name);
    if (d < lo || (lo_open && d == lo) || d > hi)
        return bad(err, name, "'%s' must be in %s%g, %g], got %g", name, lo_open ? "(" : "[", lo, hi, d);
    *out = d;
    return 1;
}

/* A JSON integer (or a real with an integral value) in [lo, hi]. */
static int read_int(const json_t *obj, const char *key, const char *name, int64_t lo, int64_t hi,
                    int64_t *out, qws_error *err) {
    const json_t *v = field(obj, key);
    if (!v) return 0;
    int64_t i;
    if (json_is_integer(v)) {
        i = (int64_t)json_integer_value(v);
    } else if (json_is_real(v)) {
        double d = json_real_value(v);
        /* 2^63 is exact as a double; anything at or past it cannot be int64. */
        if (!isfinite(d) || d != floor(d) || d >= 9223372036854775808.0 || d < -9223372036854775808.0)
            return bad(err, name, "'%s' must be an integer", name);
        i = (int64_t)d;
    } else {
        return bad(err, name, "'%s' must be an integer", name);
    }
    if (i < lo || i > hi)
        return bad(err, name, "'%s' must be in [%lld, %lld], got %lld", name, (long long)lo, (long long)hi,
                   (long long)i);
    *out = i;
    return 1;
}

static int read_bool(const json_t *obj, const char *key, const char *name, int *out, qws_error *err) {
    const json_t *v = field(obj, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return bad(err, name, "'%s' must be a boolean", name);
    *out = json_is_true(v);
    return 1;
}

/* "stop": a string or an array of strings, each non-empty, <= 1024 bytes. */
static int read_stop(const json_t *obj, qws_params *p, qws_error *err) {
    const json_t *v = field(obj, "stop");
    if (!v) return 0;
    size_t n;
    if (json_is_string(v)) n = 1;
    else if (json_is_array(v)) n = json_array_size(v);
    else return bad(err, "stop", "'stop' must be a string or an array of strings");
    if (n > QWS_MAX_STOP) return bad(err, "stop", "'stop' has %zu strings, at most %d allowed", n, QWS_MAX_STOP);
    if (n == 0) return 0;
    p->stop = calloc(n, sizeof *p->stop);
    p->stop_lens = calloc(n, sizeof *p->stop_lens);
    if (!p->stop || !p->stop_lens) return oom(err);
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_is_string(v) ? v : json_array_get(v, i);
        if (!json_is_string(s)) return bad(err, "stop", "'stop[%zu]' must be a string", i);
        size_t len = json_string_length(s);
        if (len == 0) return bad(err, "stop", "'stop[%zu]' must not be empty", i);
        if (len > QWS_MAX_STOP_BYTES)
            return bad(err, "stop", "'stop[%zu]' is %zu bytes, at most %d allowed", i, len, QWS_MAX_STOP_BYTES);
        /* jansson allows no NUL inside strings unless asked to; the engine
         * needs none: a string is its bytes. */
        p->stop[i] = malloc(len + 1);
        if (!p->stop[i]) return oom(err);
        memcpy(p->stop[i], json_string_value(s), len);
        p->stop[i][len] = '\0';
        p->stop_lens[i] = len;
        p->n_stop = i + 1;
    }
    return 1;
}

static int read_stop_token_ids(const json_t *obj, int32_t vocab, qws_params *p, qws_error *err) {
    const char *name = "stop_token_ids";
    const json_t *v = field(obj, name);
    if (!v) return 0;
    if (!json_is_array(v)) return bad(err, name, "'%s' must be an array of integers", name);
    size_t n = json_array_size(v);
    if (n > MAX_STOP_TOKEN_IDS)
        return bad(err, name, "'%s' has %zu ids, at most %d allowed", name, n, MAX_STOP_TOKEN_IDS);
    if (n == 0) return 0;
    p->stop_token_ids = malloc(n * sizeof *p->stop_token_ids);
    if (!p->stop_token_ids) return oom(err);
    int64_t hi = vocab > 0 ? (int64_t)vocab - 1 : INT32_MAX;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(v, i);
        if (!json_is_integer(e)) return bad(err, name, "'%s[%zu]' must be an integer", name, i);
        json_int_t id = json_integer_value(e);
        if (id < 0 || id > hi)
            return bad(err, name, "'%s[%zu]' = %lld is not a token id (vocabulary: [0, %lld])", name, i,
                       (long long)id, (long long)hi);
        p->stop_token_ids[i] = (int32_t)id;
    }
    p->n_stop_token_ids = n;
    return 1;
}

/* "logit_bias": {"token id": bias}, ids decimal, distinct, in range. */
static int read_logit_bias(const json_t *obj, int32_t vocab, qws_params *p, qws_error *err) {
    const char *name = "logit_bias";
    const json_t *v = field(obj, name);
    if (!v) return 0;
    if (!json_is_object(v)) return bad(err, name, "'%s' must be an object mapping token ids to numbers", name);
    size_t n = json_object_size(v);
    if (n > QWS_MAX_LOGIT_BIAS)
        return bad(err, name, "'%s' has %zu entries, at most %d allowed", name, n, QWS_MAX_LOGIT_BIAS);
    if (n == 0) return 0;
    p->logit_bias_ids = malloc(n * sizeof *p->logit_bias_ids);
    p->logit_bias_values = malloc(n * sizeof *p->logit_bias_values);
    if (!p->logit_bias_ids || !p->logit_bias_values) return oom(err);
    int64_t hi = vocab > 0 ? (int64_t)vocab - 1 : INT32_MAX;
    const char *key;
    const json_t *val;
    size_t k = 0;
    json_object_foreach((json_t *)v, key, val) {
        const char *s = key;
        int ok = *s != '\0';
        for (const char *c = s; *c; c++)
            if (*c < '0' || *c > '9') ok = 0;
        errno = 0;
        long long id = ok ? strtoll(s, NULL, 10) : -1;
        if (!ok || errno == ERANGE)
            return bad(err, name, "'%s' key \"%.40s\" is not a token id (a decimal integer)", name, s);
        if (id > hi)
            return bad(err, name, "'%s' key %lld is not a token id (vocabulary: [0, %lld])", name, id,
                       (long long)hi);
        if (!json_is_number(val))
            return bad(err, name, "'%s' value of token %lld must be a number", name, id);
        double b = json_number_value(val);
        if (!isfinite(b) || b < -100 || b > 100)
            return bad(err, name, "'%s' value of token %lld must be in [-100, 100], got %g", name, id, b);
        for (size_t j = 0; j < k; j++)
            if (p->logit_bias_ids[j] == id)   /* "7" and "007" */
                return bad(err, name, "'%s' names token %lld twice", name, id);
        p->logit_bias_ids[k] = (int32_t)id;
        p->logit_bias_values[k] = (float)b;
        p->n_logit_bias = ++k;
    }
    return 1;
}

static int read_cache_salt(const json_t *obj, qws_params *p, qws_error *err) {
    const json_t *v = field(obj, "cache_salt");
    if (!v) return 0;
    if (!json_is_string(v) || json_string_length(v) == 0)
        return bad(err, "cache_salt", "'cache_salt' must be a non-empty string");
    p->has_cache_salt = 1;
    p->cache_salt = qws_cache_salt_hash(json_string_value(v), json_string_length(v));
    return 1;
}

static int read_timeout(const json_t *obj, qws_params *p, qws_error *err) {
    double t;
    int r = read_double(obj, "timeout", "timeout", 0, 1, MAX_TIMEOUT_S, &t, err);
    if (r <= 0) return r;
    double ms = ceil(t * 1000.0);
    p->timeout_ms = ms < 1 ? 1 : (int64_t)ms;
    return 1;
}

/* Fields that OpenAI completions and chat share (and vLLM's extensions). */
static int parse_openai(const json_t *b, qws_api api, int32_t vocab, int32_t max_len, qws_params *p,
                        qws_error *err) {
    int64_t i;
    int r;
    if (read_double(b, "temperature", "temperature", 0, 0, 2, &p->temperature, err) < 0) return -1;
    if (read_double(b, "top_p", "top_p", 0, 1, 1, &p->top_p, err) < 0) return -1;
    if ((r = read_int(b, "top_k", "top_k", -1, INT32_MAX, &i, err)) < 0) return -1;
    if (r) p->top_k = i < 0 ? 0 : (int32_t)i;
    if (read_double(b, "min_p", "min_p", 0, 0, 1, &p->min_p, err) < 0) return -1;

    /* Fields that would change what the client gets back and that qwinfer
     * cannot honour (no constrained decoding, no beam search) are refused:
     * ignoring them, as unknown fields are, would hand back free text to a
     * client that asked for JSON. */
    const json_t *rf = field(b, "response_format");
    if (rf) {
        if (!json_is_object(rf) || !json_is_string(json_object_get(rf, "type")))
            return bad(err, "response_format", "'response_format' must be an object with a string 'type'");
        if (strcmp(json_string_value(json_object_get(rf, "type")), "text") != 0)
            return bad(err, "response_format", "'response_format' type '%s' is not supported by qw-serve "
                       "(no constrained decoding); only 'text'", json_string_value(json_object_get(rf, "type")));
    }
    static const char *const unsupported[] = {"guided_json", "guided_regex", "guided_choice", "guided_grammar",
                                              "structured_outputs"};
    for (size_t k = 0; k < sizeof unsupported / sizeof unsupported[0]; k++)
        if (field(b, unsupported[k]) && !json_is_null(field(b, unsupported[k])))
            return bad(err, unsupported[k], "'%s' is not supported by qw-serve (no constrained decoding)",
                       unsupported[k]);
    int beam = 0;
    if (read_bool(b, "use_beam_search", "use_beam_search", &beam, err) < 0) return -1;
    if (beam) return bad(err, "use_beam_search", "'use_beam_search' is not supported by qw-serve");

    /* max_completion_tokens (chat) is OpenAI's newer name and wins. */
    const char *mt = "max_tokens";
    if (api == QWS_API_CHAT && field(b, "max_completion_tokens")) mt = "max_completion_tokens";
    if ((r = read_int(b, mt, mt, 1, MAX_TOKENS_LIMIT, &i, err)) < 0) return -1;
    if (r) {
        if (max_len > 0 && i > max_len)
            return qws_error_set(err, 400, "invalid_request_error", "context_length_exceeded", mt,
                                 "'%s' is %lld, but this model's maximum context length is %d tokens", mt,
                                 (long long)i, (int)max_len);
        p->max_tokens = i;
    }
    if (read_stop(b, p, err) < 0) return -1;
    if (read_stop_token_ids(b, vocab, p, err) < 0) return -1;
    if ((r = read_int(b, "seed", "seed", INT64_MIN, INT64_MAX, &p->seed, err)) < 0) return -1;
    p->has_seed = r;
    if ((r = read_int(b, "n", "n", 1, QWS_MAX_N, &i, err)) < 0) return -1;
    if (r) p->n = (int32_t)i;
    if ((r = read_int(b, "best_of", "best_of", 1, QWS_MAX_N, &i, err)) < 0) return -1;
    if (r && i != 1 && i != p->n)
        return bad(err, "best_of", "'best_of' other than n is not supported (qw-serve returns every sample)");

    if (api == QWS_API_CHAT) {
        int lp = 0;
        if (read_bool(b, "logprobs", "logprobs", &lp, err) < 0) return -1;
        if ((r = read_int(b, "top_logprobs", "top_logprobs", 0, QWS_MAX_LOGPROBS, &i, err)) < 0) return -1;
        if (r && i > 0 && !lp)
            return bad(err, "top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
        if (lp) p->logprobs = r ? (int32_t)i : 0;
    } else {
        if ((r = read_int(b, "logprobs", "logprobs", 0, QWS_MAX_LOGPROBS, &i, err)) < 0) return -1;
        if (r) p->logprobs = (int32_t)i;
        if (read_bool(b, "echo", "echo", &p->echo, err) < 0) return -1;
    }
    if ((r = read_int(b, "prompt_logprobs", "prompt_logprobs", 0, QWS_MAX_LOGPROBS, &i, err)) < 0) return -1;
    if (r) p->prompt_logprobs = (int32_t)i;

    if (read_double(b, "presence_penalty", "presence_penalty", -2, 0, 2, &p->presence_penalty, err) < 0)
        return -1;
    if (read_double(b, "frequency_penalty", "frequency_penalty", -2, 0, 2, &p->frequency_penalty, err) < 0)
        return -1;
    if (read_double(b, "repetition_penalty", "repetition_penalty", 0, 1, 100, &p->repetition_penalty, err) < 0)
        return -1;
    if (read_logit_bias(b, vocab, p, err) < 0) return -1;
    if (read_bool(b, "ignore_eos", "ignore_eos", &p->ignore_eos, err) < 0) return -1;
    if ((r = read_int(b, "min_tokens", "min_tokens", 0, MAX_TOKENS_LIMIT, &i, err)) < 0) return -1;
    if (r) {
        if (p->max_tokens > 0 && i > p->max_tokens)
            return bad(err, "min_tokens", "'min_tokens' (%lld) must not exceed '%s' (%lld)", (long long)i, mt,
                       (long long)p->max_tokens);
        p->min_tokens = (int32_t)i;
    }
    if ((r = read_int(b, "priority", "priority", -PRIORITY_LIMIT, PRIORITY_LIMIT, &i, err)) < 0) return -1;
    if (r) p->priority = (int32_t)i;
    if (read_cache_salt(b, p, err) < 0) return -1;
    if (read_timeout(b, p, err) < 0) return -1;
    if (read_bool(b, "skip_special_tokens", "skip_special_tokens", &p->skip_special_tokens, err) < 0) return -1;
    if (read_bool(b, "include_stop_str_in_output", "include_stop_str_in_output", &p->include_stop_str_in_output,
                  err) < 0)
        return -1;
    if (read_bool(b, "stream", "stream", &p->stream, err) < 0) return -1;

    const json_t *so = field(b, "stream_options");
    if (so) {
        if (!json_is_object(so)) return bad(err, "stream_options", "'stream_options' must be an object");
        if (!p->stream)  /* as OpenAI and vLLM answer */
            return bad(err, "stream_options", "'stream_options' is only allowed when 'stream' is true");
        if (read_bool(so, "include_usage", "stream_options.include_usage", &p->include_usage, err) < 0) return -1;
        if (read_bool(so, "continuous_usage_stats", "stream_options.continuous_usage_stats",
                      &p->continuous_usage_stats, err) < 0)
            return -1;
    }
    if (api == QWS_API_CHAT) {
        const json_t *k = field(b, "chat_template_kwargs");
        if (k) {
            if (!json_is_object(k))
                return bad(err, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
            if (read_bool(k, "enable_thinking", "chat_template_kwargs.enable_thinking", &p->enable_thinking,
                          err) < 0)
                return -1;
        }
    }
    return 0;
}

/* TGI's "parameters". Fields TGI has and qwinfer cannot honour are refused
 * when they ask for something (a silent no-op would change the output the
 * client asked for): typical_p (no typical sampling), watermark: true,
 * truncate (the prompt is never cut here: a too-long prompt is a 400),
 * grammar (no constrained decoding), adapter_id (no LoRA), best_of > 1. */
static int parse_tgi(const json_t *body, int32_t vocab, int32_t max_len, qws_params *p, qws_error *err) {
    /* Absent parameters read as {} (jansson's getters take NULL). */
    const json_t *b = field(body, "parameters");
    if (b && !json_is_object(b)) return bad(err, "parameters", "'parameters' must be an object");
    int64_t i;
    int r;
    static const char *const refused[] = {"typical_p", "truncate", "grammar", "adapter_id"};
    for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++)
        if (field(b, refused[k]))
            return bad(err, refused[k], "'%s' is not supported by qw-serve", refused[k]);
    int wm = 0;
    if (read_bool(b, "watermark", "watermark", &wm, err) < 0) return -1;
    if (wm) return bad(err, "watermark", "'watermark' is not supported by qw-serve");
    if ((r = read_int(b, "best_of", "best_of", 1, QWS_MAX_N, &i, err)) < 0) return -1;
    if (r && i != 1) return bad(err, "best_of", "'best_of' above 1 is not supported by qw-serve");

    /* TGI samples when do_sample is true or any sampling warper is set
     * (temperature != 1, top_k, top_p < 1), else decodes greedily. */
    int do_sample = 0, warped = 0;
    if (read_bool(b, "do_sample", "do_sample", &do_sample, err) < 0) return -1;
    if ((r = read_double(b, "temperature", "temperature", 0, 1, 2, &p->temperature, err)) < 0) return -1;
    if (r && p->temperature != 1.0) warped = 1;
    if ((r = read_double(b, "top_p", "top_p", 0, 1, 1, &p->top_p, err)) < 0) return -1;
    if (r && p->top_p < 1.0) warped = 1;
    if ((r = read_int(b, "top_k", "top_k", -1, INT32_MAX, &i, err)) < 0) return -1;
    if (r) {
        p->top_k = i < 0 ? 0 : (int32_t)i;
        if (p->top_k > 0) warped = 1;
    }
    if (!do_sample && !warped) p->temperature = 0.0;

    if ((r = read_int(b, "max_new_tokens", "max_new_tokens", 1, MAX_TOKENS_LIMIT, &i, err)) < 0) return -1;
    if (r) {
        if (max_len > 0 && i > max_len)
            return qws_error_set(err, 400, "invalid_request_error", "context_length_exceeded", "max_new_tokens",
                                 "'max_new_tokens' is %lld, but this model's maximum context length is %d tokens",
                                 (long long)i, (int)max_len);
        p->max_tokens = i;
    }
    if (read_double(b, "repetition_penalty", "repetition_penalty", 0, 1, 100, &p->repetition_penalty, err) < 0)
        return -1;
    if (read_double(b, "frequency_penalty", "frequency_penalty", -2, 0, 2, &p->frequency_penalty, err) < 0)
        return -1;
    if ((r = read_int(b, "seed", "seed", INT64_MIN, INT64_MAX, &p->seed, err)) < 0) return -1;
    p->has_seed = r;
    if (read_stop(b, p, err) < 0) return -1;
    (void)vocab;
    if (read_bool(b, "details", "details", &p->details, err) < 0) return -1;
    if (read_bool(b, "decoder_input_details", "decoder_input_details", &p->decoder_input_details, err) < 0)
        return -1;
    if (read_bool(b, "return_full_text", "return_full_text", &p->return_full_text, err) < 0) return -1;
    /* A TGI token always carries its logprob; top_n_tokens asks for the
     * alternatives too. */
    p->logprobs = 0;
    if ((r = read_int(b, "top_n_tokens", "top_n_tokens", 0, QWS_MAX_LOGPROBS, &i, err)) < 0) return -1;
    if (r) p->logprobs = (int32_t)i;
    if (p->decoder_input_details) p->prompt_logprobs = 0;
    return 0;
}

int qws_params_parse(const json_t *body, qws_api api, int32_t vocab_size, int32_t max_model_len,
                     qws_params *out, qws_error *err) {
    if (!out) return qws_error_set(err, 500, "server_error", NULL, NULL, "qws_params_parse: no output");
    set_defaults(out, api);
    if (!json_is_object(body))
        return qws_error_set(err, 400, "invalid_request_error", NULL, NULL, "the request body must be a JSON object");
    int rc;
    if (api == QWS_API_TGI) rc = parse_tgi(body, vocab_size, max_model_len, out, err);
    else if (api == QWS_API_COMPLETIONS || api == QWS_API_CHAT)
        rc = parse_openai(body, api, vocab_size, max_model_len, out, err);
    else rc = qws_error_set(err, 500, "server_error", NULL, NULL, "qws_params_parse: unknown API %d", (int)api);
    if (rc < 0) {
        qws_params_free(out);
        return -1;
    }
    return 0;
}

/* ---- apply ------------------------------------------------------------------ */

static int lib_fail(qw_status st, const char *name, qws_error *err) {
    if (st == QW_ERR_OUT_OF_MEMORY)
        return qws_error_set(err, 500, "server_error", NULL, NULL, "out of memory: %s", qw_last_error());
    return qws_error_set(err, 400, "invalid_request_error", NULL, name, "%s", qw_last_error());
}

#define SET_INT(key, v, name) \
    do { qw_status st_ = qw_request_set_int(req, key, v); if (st_ != QW_OK) return lib_fail(st_, name, err); } while (0)
#define SET_DBL(key, v, name) \
    do { qw_status st_ = qw_request_set_double(req, key, v); if (st_ != QW_OK) return lib_fail(st_, name, err); } while (0)

int qws_params_apply(const qws_params *p, qw_request *req, qws_error *err) {
    if (!p || !req) return qws_error_set(err, 500, "server_error", NULL, NULL, "qws_params_apply: NULL argument");
    SET_DBL(QW_REQ_TEMPERATURE, p->temperature, "temperature");
    SET_DBL(QW_REQ_TOP_P, p->top_p, "top_p");
    SET_INT(QW_REQ_TOP_K, p->top_k, "top_k");
    SET_DBL(QW_REQ_MIN_P, p->min_p, "min_p");
    if (p->max_tokens > 0) SET_INT(QW_REQ_MAX_TOKENS, p->max_tokens, "max_tokens");
    if (p->has_seed) SET_INT(QW_REQ_SEED, p->seed, "seed");
    SET_INT(QW_REQ_N, p->n, "n");
    if (p->logprobs >= 0) SET_INT(QW_REQ_LOGPROBS, p->logprobs, "logprobs");
    if (p->prompt_logprobs >= 0) SET_INT(QW_REQ_PROMPT_LOGPROBS, p->prompt_logprobs, "prompt_logprobs");
    SET_DBL(QW_REQ_PRESENCE_PENALTY, p->presence_penalty, "presence_penalty");
    SET_DBL(QW_REQ_FREQUENCY_PENALTY, p->frequency_penalty, "frequency_penalty");
    SET_DBL(QW_REQ_REPETITION_PENALTY, p->repetition_penalty, "repetition_penalty");
    SET_INT(QW_REQ_IGNORE_EOS, p->ignore_eos ? 1 : 0, "ignore_eos");
    SET_INT(QW_REQ_MIN_TOKENS, p->min_tokens, "min_tokens");
    SET_INT(QW_REQ_PRIORITY, p->priority, "priority");
    if (p->has_cache_salt) SET_INT(QW_REQ_CACHE_SALT, (int64_t)p->cache_salt, "cache_salt");
    if (p->timeout_ms > 0) SET_INT(QW_REQ_DEADLINE_MS, p->timeout_ms, "timeout");
    SET_INT(QW_REQ_SKIP_SPECIAL_TOKENS, p->skip_special_tokens ? 1 : 0, "skip_special_tokens");
    SET_INT(QW_REQ_INCLUDE_STOP_STR_IN_OUTPUT, p->include_stop_str_in_output ? 1 : 0,
            "include_stop_str_in_output");
    qw_status st;
    if (p->n_stop > 0 &&
        (st = qw_request_set_stop_strings(req, (const char *const *)p->stop, p->stop_lens, p->n_stop)) != QW_OK)
        return lib_fail(st, "stop", err);
    if (p->n_stop_token_ids > 0 &&
        (st = qw_request_set_stop_tokens(req, p->stop_token_ids, p->n_stop_token_ids)) != QW_OK)
        return lib_fail(st, "stop_token_ids", err);
    if (p->n_logit_bias > 0 &&
        (st = qw_request_set_logit_bias(req, p->logit_bias_ids, p->logit_bias_values, p->n_logit_bias)) != QW_OK)
        return lib_fail(st, "logit_bias", err);
    return 0;
}
