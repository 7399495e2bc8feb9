/*
 * params.h - qw-serve: the sampling and serving fields of a request body.
 *
 * Parses the fields of an OpenAI completions / chat completions body (with
 * vLLM's extensions) or of a TGI body's "parameters" object into a
 * qws_params, validating JSON types and ranges, and applies them to a
 * qw_request. The prompt and the messages are not parsed here (the request
 * handlers own them), nor "model" (the server checks it); "user" is
 * ignored. Uses only qwinfer.h, jansson and libc.
 *
 * Rules (docs of OpenAI and vLLM): unknown fields are ignored; a known field
 * that is null counts as absent; a known field with a wrong JSON type or an
 * out-of-range value is a 400 invalid_request_error whose param names the
 * field (dotted for nested ones: "stream_options.include_usage"; for TGI the
 * name inside "parameters", e.g. "temperature"). Integer fields also take a
 * real with an integral value (1.0), as pydantic's lax mode does; fields
 * holding a double take any finite JSON number.
 */
#ifndef QWS_PARAMS_H
#define QWS_PARAMS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "qwinfer.h"

/* An error to answer with. type: "invalid_request_error" or "server_error";
 * code: "" (JSON null) or e.g. "context_length_exceeded", "model_not_found",
 * "overloaded"; param: "" (JSON null) or the field at fault. All four strings
 * are always NUL-terminated (cut to fit). */
typedef struct qws_error {
    int http_status;
    char type[48];
    char code[48];
    char param[64];
    char message[512];
} qws_error;

/* Which API the body came from. */
typedef enum qws_api {
    QWS_API_COMPLETIONS,  /* POST /v1/completions                         */
    QWS_API_CHAT,         /* POST /v1/chat/completions                    */
    QWS_API_TGI           /* POST /generate, /generate_stream: "parameters" */
} qws_api;

/* Most logprobs alternatives, samples, stop strings and logit-bias entries a
 * request may ask for (OpenAI's and the engine's limits). */
#define QWS_MAX_LOGPROBS 20
#define QWS_MAX_N 16
#define QWS_MAX_STOP 64
#define QWS_MAX_STOP_BYTES 1024
#define QWS_MAX_LOGIT_BIAS 300

/* The parsed fields. Defaults (what qws_params_parse leaves for an absent
 * field) in brackets. Owned arrays are freed by qws_params_free. */
typedef struct qws_params {
    qws_api api;
    double temperature;          /* [1.0] 0..2; 0 = greedy. TGI: (0, 2], and
                                    0 (greedy) is set here unless do_sample is
                                    true or a sampling field (temperature != 1,
                                    top_k > 0, top_p < 1) is set, as TGI does */
    double top_p;                /* [1.0] (0, 1]                             */
    int32_t top_k;               /* [0] -1 and 0 = off, else >= 1 (vLLM)     */
    double min_p;                /* [0.0] [0, 1] (vLLM)                      */
    int64_t max_tokens;          /* [16 for completions (OpenAI's default),
                                    else -1 = up to the model length]
                                    >= 1; max_completion_tokens (chat) wins
                                    over max_tokens; TGI max_new_tokens       */
    char **stop;                 /* [NULL] n_stop owned copies, each non-empty,
                                    NUL-terminated, <= 1024 bytes             */
    size_t *stop_lens;           /* [NULL] their byte lengths                */
    size_t n_stop;               /* [0] <= 64                                */
    int32_t *stop_token_ids;     /* [NULL] owned; <= 1024 ids in [0, vocab)
                                    (vLLM)                                    */
    size_t n_stop_token_ids;     /* [0]                                      */
    int has_seed;                /* [0] 1 when "seed" was given              */
    int64_t seed;                /* [0] any int64 (TGI: uint64 bits)         */
    int32_t n;                   /* [1] 1..16                                */
    int32_t logprobs;            /* [-1 = off] 0..20 top alternatives per
                                    token: completions "logprobs"; chat
                                    "top_logprobs" when "logprobs" is true (0
                                    without it); TGI: always >= 0 (its tokens
                                    carry a logprob), "top_n_tokens"         */
    int32_t prompt_logprobs;     /* [-1 = off] 0..20 (vLLM); TGI
                                    decoder_input_details -> 0               */
    double presence_penalty;     /* [0] -2..2                                */
    double frequency_penalty;    /* [0] -2..2                                */
    double repetition_penalty;   /* [1] (0, 100] (vLLM; 100: engine limit)   */
    int32_t *logit_bias_ids;     /* [NULL] owned, distinct ids in [0, vocab) */
    float *logit_bias_values;    /* [NULL] owned, each in [-100, 100]        */
    size_t n_logit_bias;         /* [0] <= 300                               */
    int ignore_eos;              /* [0] (vLLM)                               */
    int32_t min_tokens;          /* [0] >= 0, <= max_tokens when given (vLLM) */
    int32_t priority;            /* [0] lower first, within +-2^30 (vLLM)   */
    int has_cache_salt;          /* [0] 1 when "cache_salt" was given        */
    uint64_t cache_salt;         /* [0] qws_cache_salt_hash of the string    */
    int64_t timeout_ms;          /* [0 = not given] "timeout" in seconds
                                    (qwinfer extension, > 0), as ms, >= 1     */
    int skip_special_tokens;     /* [1] (vLLM)                               */
    int include_stop_str_in_output; /* [0] (vLLM)                            */
    int echo;                    /* [0] completions only: prompt + output    */
    int stream;                  /* [0] (TGI: 0; the endpoint decides)        */
    int include_usage;           /* [0] stream_options.include_usage         */
    int continuous_usage_stats;  /* [0] stream_options.continuous_usage_stats */
    int enable_thinking;         /* [1] chat: chat_template_kwargs.enable_thinking */
    int details;                 /* [0] TGI: answer "details"                */
    int decoder_input_details;   /* [0] TGI: prefill tokens in "details"     */
    int return_full_text;        /* [0] TGI: generated_text = inputs + output */
} qws_params;

/* Fill *err (any field may be NULL / "": stored as ""); message is printf
 * formatted and cut to fit. err NULL: no-op. Always returns -1, so a parser
 * can `return qws_error_set(...)`. */
int qws_error_set(qws_error *err, int http_status, const char *type, const char *code,
                  const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* The 64-bit FNV-1a hash of len bytes (the cache salt of a "cache_salt"
 * field or the salt header). A hash of 0 becomes 1, because salt 0 is the
 * engine's "no salt": a salted request never shares KV with unsalted ones. */
uint64_t qws_cache_salt_hash(const char *s, size_t len);

/* Parse the request fields of body into *out. body: for QWS_API_COMPLETIONS
 * and QWS_API_CHAT the whole request object; for QWS_API_TGI the whole body
 * too (its "parameters" member is read; absent or null = defaults).
 * vocab_size: ids of stop_token_ids and logit_bias must lie in
 * [0, vocab_size) (<= 0: not checked here, the engine checks at submit);
 * max_model_len: max_tokens above it is a 400 with code
 * "context_length_exceeded" (<= 0: not checked). Returns 0 with *out set
 * (free it with qws_params_free), or -1 with *err set (400
 * invalid_request_error naming the field; 500 server_error on OOM) and *out
 * holding nothing that needs freeing (qws_params_free on it is still
 * harmless). body not an object: 400 with param "". */
int qws_params_parse(const json_t *body, qws_api api, int32_t vocab_size,
                     int32_t max_model_len, qws_params *out, qws_error *err);

/* Set every field of p on req, a created and not yet submitted request:
 * temperature, top_p, top_k, min_p, max_tokens (when given), stop strings,
 * stop token ids, seed (when given), n, logprobs and prompt_logprobs (when
 * >= 0), the three penalties, logit bias, ignore_eos, min_tokens, priority,
 * cache salt (when given), QW_REQ_DEADLINE_MS = timeout_ms (when given; the
 * caller may set a smaller server deadline after this call, setters
 * replace), skip_special_tokens and include_stop_str_in_output. Neutral
 * values are set too (harmless). Returns 0, or -1 with *err: 500 server_error
 * when the library ran out of memory, else 400 invalid_request_error with the
 * library's message (a value parse let through that the engine refuses).
 * req may be partly set on failure: release it. */
int qws_params_apply(const qws_params *p, qw_request *req, qws_error *err);

/* Free the arrays of p and reset it to the defaults (a parsed-then-freed
 * params is an empty default one). NULL: no-op. */
void qws_params_free(qws_params *p);

#endif /* QWS_PARAMS_H */
