/*
 * prompt.h - qw-serve: the "prompt" of a completions request (and TGI's
 * "inputs") as token ids.
 */
#ifndef QWS_PROMPT_H
#define QWS_PROMPT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "params.h"
#include "server.h"

/* Most prompts in one completions batch. */
#define QWS_MAX_PROMPTS 256

typedef struct qws_prompts {
    size_t n;
    int32_t **ids;          /* [n] owned arrays                                */
    size_t *lens;           /* [n]                                             */
    char **texts;           /* [n] the prompt text when given as a string (owned),
                               else NULL                                       */
} qws_prompts;

/* Read a prompt: a string, an array of strings (a batch), an array of token
 * ids, or an array of arrays of ids (a batch). Strings are encoded with the
 * model's tokenizer, special tokens written in the text parsed (as vLLM and
 * Hugging Face do for a completions prompt). param names the field in
 * errors ("prompt", "inputs"). Returns 0 with *out filled (free with
 * qws_prompts_free), or -1 with *err: 400 for a missing, empty or
 * wrongly typed prompt, an id outside the vocabulary, text when the model
 * has no tokenizer, more than QWS_MAX_PROMPTS prompts; 500 on OOM. */
int qws_prompts_parse(const qws_server *srv, const json_t *prompt, const char *param, qws_prompts *out,
                      qws_error *err);

/* Free what qws_prompts_parse filled and zero *p. */
void qws_prompts_free(qws_prompts *p);

#endif /* QWS_PROMPT_H */
