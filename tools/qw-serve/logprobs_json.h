/*
 * logprobs_json.h - qw-serve: token strings and the logprobs objects of the
 * OpenAI completions, chat and TGI answers, from an exchange's copies.
 */
#ifndef QWS_LOGPROBS_JSON_H
#define QWS_LOGPROBS_JSON_H

#include <jansson.h>

#include "exchange.h"

/* The text of one token id as the API shows it (special tokens included,
 * a partial character as U+FFFD), as a new JSON string; "" without a
 * tokenizer. NULL only on OOM. */
json_t *qws_token_text(const qws_server *srv, int32_t id);

/* A logprob as a JSON number. -inf (a token the raw logits made
 * impossible) has no JSON spelling: it becomes -9999.0, which OpenAI
 * clients read as "never". NULL only on OOM. */
json_t *qws_json_logprob(float v);

/* Completions' legacy object for tokens [from, to) of sample s of job:
 * {"tokens", "token_logprobs", "top_logprobs", "text_offset"}. Offsets
 * count characters (as OpenAI's do) from the start of the choice's text,
 * so the chunks of a stream continue them; base is the number of
 * characters in front of the sample's own text (an echoed prompt). */
json_t *qws_logprobs_completions(const qws_server *srv, const qws_job *job, const qws_sample *s, size_t from,
                                 size_t to, size_t base);

/* Chat's {"content": [{"token","logprob","bytes","top_logprobs"}...]} for
 * tokens [from, to). */
json_t *qws_logprobs_chat(const qws_server *srv, const qws_job *job, const qws_sample *s, size_t from, size_t to);

/* vLLM's prompt_logprobs list: [null, {"<id>": {"logprob", "rank"?,
 * "decoded_token"}}, ...] for every prompt token; JSON null when the job
 * has none. */
json_t *qws_prompt_logprobs_json(const qws_server *srv, const qws_job *job);

#endif /* QWS_LOGPROBS_JSON_H */
