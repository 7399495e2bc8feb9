/*
 * chat.h - Qwen3's chat template (ChatML) rendered in C, so hosts can turn a
 * conversation into the prompt text the model was trained on without a
 * Jinja engine. Internal: not installed.
 *
 * The output follows the official Qwen3 tokenizer_config.json chat_template:
 *   <|im_start|>system\n...<|im_end|>\n        (first message, if system)
 *   <|im_start|>user\n...<|im_end|>\n
 *   <|im_start|>assistant\n...<|im_end|>\n
 *   tool messages: one user turn per run of consecutive tool messages, each
 *   wrapped in \n<tool_response>\n...\n</tool_response>
 * Assistant turns after the last real user query keep their reasoning as
 * <think>\n...\n</think>\n\n; earlier ones have it stripped. The model ends a
 * turn with <|im_end|>, which is the stop token to use.
 */
#ifndef QWI_CHAT_H
#define QWI_CHAT_H

#include <stddef.h>
#include "common.h"

/* One message. Strings are UTF-8, NUL-terminated, only read. */
typedef struct qwi_chat_message {
    const char *role;              /* "system", "user", "assistant" or "tool" */
    const char *content;           /* NULL is taken as ""                     */
    const char *reasoning_content; /* assistant only: its thinking; NULL = take
                                      it from a <think>...</think> in content */
} qwi_chat_message;

/* Render messages[0..n) as a Qwen3 prompt.
 * tools_json: n_tools function definitions, each already serialised as JSON
 * (one line, as the template's tojson writes it); they go into the system
 * turn with Qwen3's tool-use instructions. NULL/0 for none.
 * add_generation_prompt: end with "<|im_start|>assistant\n" for the model to
 * continue; enable_thinking = 0 then also appends the empty think block
 * "<think>\n\n</think>\n\n" (Qwen3's switch for non-thinking answers).
 * On success *out is a malloc'd NUL-terminated string (caller frees with
 * free()) and *len its length (len may be NULL). QW_ERR_INVALID_ARGUMENT
 * for a NULL role or a role other than the four above (the message names
 * the index); QW_ERR_OUT_OF_MEMORY. Thread-safe (no shared state). */
qw_status qwi_chat_render(const qwi_chat_message *messages, size_t n,
                          const char *const *tools_json, size_t n_tools,
                          int add_generation_prompt, int enable_thinking, char **out,
                          size_t *len);

#endif
