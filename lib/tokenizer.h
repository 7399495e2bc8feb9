/*
 * tokenizer.h - Qwen's byte-level BPE tokenizer: loading, encoding, decoding
 * and incremental (streaming) detokenisation. Internal: not installed.
 *
 * Encoding reproduces Hugging Face `tokenizers` for Qwen2/2.5/3 exactly:
 *   1. added tokens (<|im_end|>, <think>, ...) are matched on the raw text
 *      first, leftmost-longest (they are `normalized: false` in Qwen);
 *   2. every stretch of text between them is NFC-normalised (utf8proc);
 *   3. the pre-tokenizer regex (PCRE2, UTF+UCP, JIT) cuts it into pieces, the
 *      gaps between matches being pieces too (Split behaviour "Isolated");
 *   4. each piece is BPE-merged by merge rank over its bytes (the GPT-2
 *      byte-to-unicode mapping is applied at load time to the vocabulary
 *      instead of to the text, so the hot path works on raw bytes).
 *
 * Threading: a loaded qwi_tokenizer is immutable. Every function taking a
 * `const qwi_tokenizer *` may run concurrently from any number of threads
 * (encode keeps its scratch state per call). A qwi_detok belongs to one
 * thread at a time.
 *
 * Errors are reported as qw_status with a message in qwi_last_error().
 */
#ifndef QWI_TOKENIZER_H
#define QWI_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include "common.h"

typedef struct qwi_tokenizer qwi_tokenizer;

/* Token ids a standalone tokenizer accepts: below 2 * (tokens in its files)
 * + QWI_TOK_ID_SLACK, and below QWI_TOK_MAX_IDS, since the per-id tables are
 * sized by the largest id. A model's tokenizer is bounded by the model's
 * vocab_size instead. */
#define QWI_TOK_MAX_IDS (1 << 24)
#define QWI_TOK_ID_SLACK 65536

/* Load the tokenizer of a Hugging Face model directory.
 * Looks for, in order:
 *   - dir/tokenizer.json (model.vocab, model.merges as "a b" strings or
 *     ["a", "b"] pairs, added_tokens; the pre_tokenizer's Split regex if it
 *     has one, else Qwen's);
 *   - dir/vocab.json + dir/merges.txt, with added tokens from
 *     dir/tokenizer_config.json's added_tokens_decoder when that file exists.
 * On success *out is owned by the caller (qwi_tokenizer_free). On failure
 * *out is NULL, nothing leaks, and the status is QW_ERR_INVALID_ARGUMENT for
 * a NULL or empty dir, QW_ERR_IO when no tokenizer file is found or one
 * cannot be read or is not a regular file (a FIFO, a directory),
 * QW_ERR_FORMAT (message naming the file and entry) for bad JSON, a merge
 * naming an unknown token, a duplicate or negative id, an id beyond the
 * bound above QWI_TOK_MAX_IDS (naming the token and id), or a vocabulary
 * lacking a byte token; QW_ERR_UNSUPPORTED for a non-BPE model;
 * QW_ERR_OUT_OF_MEMORY. Ids in [vocab size, ...) are out of range for
 * decode. */
qw_status qwi_tokenizer_load_dir(const char *dir, qwi_tokenizer **out);

/* The same for the tokenizer of a model with model_vocab ids (> 0, else
 * QW_ERR_INVALID_ARGUMENT): every id in the files must be below model_vocab
 * (QW_ERR_FORMAT naming the file, token and id, checked before any table is
 * sized), and decode and the detokenizer accept ids in [vocab size,
 * model_vocab) as tokens that decode to nothing, as Hugging Face does for
 * the padding rows of a model's embedding that the model can still sample. */
qw_status qwi_tokenizer_load_dir_for_model(const char *dir, int32_t model_vocab,
                                           qwi_tokenizer **out);

/* Free a tokenizer. NULL is a no-op. No other thread may be using it. */
void qwi_tokenizer_free(qwi_tokenizer *tok);

/* Number of ids: the largest id of a regular or added token + 1. Ids below it
 * that name no token decode to nothing (as in Hugging Face). */
int32_t qwi_tokenizer_vocab_size(const qwi_tokenizer *tok);

/* Encode len bytes of UTF-8 text (need not be NUL-terminated).
 * parse_special: 1 = added tokens marked `special` (<|im_start|>, ...) in the
 * text become their ids, as Hugging Face does by default; 0 = they are
 * encoded as plain text (HF's encode_special_tokens=True), which is what
 * untrusted user text should get. Non-special added tokens (<think>,
 * <tool_call>, ...) are matched either way, as in HF.
 * On success *ids is a malloc'd array of *n ids (NULL when *n is 0) that the
 * caller frees with free(). On failure *ids is NULL and *n is 0:
 * QW_ERR_INVALID_ARGUMENT for NULL arguments or text that is not valid UTF-8
 * (the message gives the byte offset), QW_ERR_OUT_OF_MEMORY (also when the
 * regex engine runs out of memory), QW_ERR_UNSUPPORTED when the
 * pre-tokenizer regex of the tokenizer file hits PCRE2's match, depth or
 * heap limit on this text (a pattern that backtracks catastrophically; the
 * message names the file and the byte offset), QW_ERR_INTERNAL for any other
 * regex engine failure. Thread-safe. */
qw_status qwi_tokenizer_encode(const qwi_tokenizer *tok, const char *text, size_t len,
                               int parse_special, int32_t **ids, size_t *n);

/* Decode ids to UTF-8 as Hugging Face's decode() does with the ByteLevel
 * decoder: the bytes of the tokens are concatenated and every invalid UTF-8
 * sequence is replaced by U+FFFD (one per maximal invalid subpart, like
 * Python's errors="replace" and Rust's from_utf8_lossy). skip_special: leave
 * out added tokens marked `special`. On success *out is a malloc'd
 * NUL-terminated string of *len bytes (caller frees with free()). Ids in
 * [vocab size, model vocab) of a model's tokenizer add nothing; ids < 0 or
 * beyond that give QW_ERR_TOKEN_OUT_OF_RANGE (message names the index);
 * *out is then NULL. Thread-safe. */
qw_status qwi_tokenizer_decode(const qwi_tokenizer *tok, const int32_t *ids, size_t n,
                               int skip_special, char **out, size_t *len);

/* The raw bytes of one token (not UTF-8 checked: a token may hold part of a
 * character). *len gets the length; returns NULL for an id out of range
 * (and "" with *len 0 for an id that names no token). The pointer lives as
 * long as the tokenizer. Thread-safe. */
const char *qwi_tokenizer_token_bytes(const qwi_tokenizer *tok, int32_t id, size_t *len);

/* Id of a token given its Hugging Face string form: an added token's content
 * ("<|im_end|>") or a regular token in byte-level form ("Ġthe").
 * Returns -1 when there is none. Thread-safe. */
int32_t qwi_tokenizer_token_id(const qwi_tokenizer *tok, const char *str);

/* 1 if id is an added token marked `special` (skipped by skip_special),
 * else 0 (also for out-of-range ids). Thread-safe. */
int qwi_tokenizer_is_special(const qwi_tokenizer *tok, int32_t id);

/* 1 if id is an added token (special or not), else 0. Thread-safe. */
int qwi_tokenizer_is_added(const qwi_tokenizer *tok, int32_t id);

/* ---------------------------------------------------------------------------
 * Incremental detokenizer, for streaming generated tokens as text.
 *
 * Feeding tokens one at a time and concatenating every piece plus the final
 * flush gives exactly qwi_tokenizer_decode() of all of them. Each piece holds
 * only complete UTF-8 characters: bytes that may still become a character
 * are held back until the token that completes it (it then comes out whole,
 * once); bytes that can no longer form one are emitted as U+FFFD as soon as
 * that is certain.
 * ------------------------------------------------------------------------- */
typedef struct qwi_detok qwi_detok;

/* Create a detokenizer over tok (which must outlive it). skip_special as in
 * qwi_tokenizer_decode. *out owned by the caller (qwi_detok_free). */
qw_status qwi_detok_init(const qwi_tokenizer *tok, int skip_special, qwi_detok **out);

/* Feed one token. *piece and *len get the text completed by it (possibly empty,
 * never NULL); the pointer is valid until the next call on this detokenizer.
 * QW_ERR_TOKEN_OUT_OF_RANGE for a bad id (state unchanged). */
qw_status qwi_detok_feed(qwi_detok *d, int32_t id, const char **piece, size_t *len);

/* End of stream: emit U+FFFD for held-back bytes of an unfinished character
 * (as decode does) and reset the detokenizer for reuse. Same piece contract. */
qw_status qwi_detok_flush(qwi_detok *d, const char **piece, size_t *len);

/* Free a detokenizer. NULL is a no-op. */
void qwi_detok_free(qwi_detok *d);

#endif
