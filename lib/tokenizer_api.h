/*
 * tokenizer_api.h - the public qw_tokenizer handle over the internal
 * qwi_tokenizer, and how an engine finds its model directory's tokenizer.
 * Internal: not installed.
 */
#ifndef QWI_TOKENIZER_API_H
#define QWI_TOKENIZER_API_H

#include <stdbool.h>

#include "tokenizer.h"

struct qw_tokenizer {
    qwi_tokenizer *impl;
    bool engine_owned;   /* the engine's: qw_tokenizer_destroy ignores it */
};

/* The tokenizer of a model directory for an engine of model_vocab ids.
 * *out is NULL (and QW_OK) when the directory has no tokenizer file
 * (neither tokenizer.json nor vocab.json nor merges.txt); a tokenizer file
 * that is there but malformed, unreadable or not a regular file, or a
 * token id >= model_vocab, is an error whose message names the file. Ids in
 * [tokenizer size, model_vocab) decode to nothing (the embedding's padding
 * rows). The result is engine-owned: free it with qwi_tokenizer_handle_free. */
qw_status qwi_tokenizer_open_model_dir(const char *dir, int32_t model_vocab, qw_tokenizer **out);

/* Free a handle whatever its owner. NULL is a no-op. */
void qwi_tokenizer_handle_free(qw_tokenizer *tok);

#endif
