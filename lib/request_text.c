/*
 * request_text.c - a request's text side: prompts given as text or as a
 * chat (encoded at submit with the engine's tokenizer) and the streamed text
 * piece of each event (an incremental detokenizer per request).
 */
#include <stdlib.h>
#include <string.h>

#include "chat_api.h"
#include "engine.h"
#include "tokenizer_api.h"

/* Replace the request's text prompt with s[0..len) (taking ownership). */
static void set_text(qw_request *r, char *s, size_t len, bool chat) {
    free(r->prompt_text);
    r->prompt_text = s;
    r->prompt_text_len = len;
    r->has_prompt_text = true;
    r->prompt_is_chat = chat;
}

QW_API qw_status qw_request_set_prompt_text(qw_request *r, const char *text, size_t len) {
    qw_status st = qwi_request_check_mutable(r, "qw_request_set_prompt_text");
    if (st != QW_OK) return st;
    if (!text && len > 0) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_request_set_prompt_text: text is NULL with len %zu", len);
    char *copy = malloc(len + 1);
    if (!copy) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "qw_request_set_prompt_text: %zu bytes", len);
    if (len) memcpy(copy, text, len);
    copy[len] = '\0';
    set_text(r, copy, len, false);
    return QW_OK;
}

QW_API qw_status qw_request_set_chat(qw_request *r, const qw_chat *chat, uint32_t flags) {
    qw_status st = qwi_request_check_mutable(r, "qw_request_set_chat");
    if (st != QW_OK) return st;
    char *s;
    size_t len;
    if ((st = qwi_chat_render_alloc(chat, flags, &s, &len, "qw_request_set_chat")) != QW_OK) return st;
    set_text(r, s, len, true);
    return QW_OK;
}

qw_status qwi_request_prepare_text(qw_engine *e, qw_request *r) {
    const qw_tokenizer *tok = e->tokenizer;
    if (r->has_prompt_text) {
        if (!tok)
            return qwi_fail(QW_ERR_INVALID_STATE,
                            "qw_engine_submit: request %llu has a text prompt but the model has no tokenizer",
                            (unsigned long long)r->id);
        int32_t *ids = NULL;
        size_t n = 0;
        qw_status st = qwi_tokenizer_encode(tok->impl, r->prompt_text, r->prompt_text_len, 1, &ids, &n);
        if (st != QW_OK) return qwi_fail_prefix(st, "qw_engine_submit: request %llu's prompt text", (unsigned long long)r->id);
        if (n > INT32_MAX / 2) {
            free(ids);
            return qwi_fail(QW_ERR_TOO_LONG, "qw_engine_submit: prompt text of %zu tokens", n);
        }
        /* A chat answer ends with <|im_end|>: stop there (once in the list). */
        int32_t im_end = r->prompt_is_chat ? qwi_tokenizer_token_id(tok->impl, "<|im_end|>") : -1;
        bool listed = im_end < 0;
        for (int32_t i = 0; !listed && i < r->num_stop; i++) listed = r->stop_tokens[i] == im_end;
        if (!listed) {
            int32_t *stop = realloc(r->stop_tokens, sizeof *stop * (size_t)(r->num_stop + 1));
            if (!stop) {
                free(ids);
                return qwi_fail(QW_ERR_OUT_OF_MEMORY, "qw_engine_submit: stop tokens");
            }
            stop[r->num_stop++] = im_end;
            r->stop_tokens = stop;
        }
        free(r->prompt);
        r->prompt = ids;
        r->num_prompt = (int32_t)n;
    }
    /* Every request of an engine with a tokenizer streams text. */
    qwi_detok_free(r->detok);
    r->detok = NULL;
    r->text_len = 0;
    if (tok) return qwi_detok_init(tok->impl, !r->keep_special, &r->detok);
    return QW_OK;
}

/* Append s[0..n) to the request's piece; on failure (out of memory) the
 * piece is cut, which the host sees as missing text, never as a crash. */
static void piece_append(qw_request *r, const char *s, size_t n) {
    if (n == 0) return;
    if (r->text_len + n > r->text_cap) {
        size_t cap = QWI_MAX(r->text_cap * 2, r->text_len + n + 16);
        char *p = realloc(r->text_piece, cap);
        if (!p) return;
        r->text_piece = p;
        r->text_cap = cap;
    }
    memcpy(r->text_piece + r->text_len, s, n);
    r->text_len += n;
}

void qwi_request_text_event(qw_request *r, int32_t token, bool final) {
    if (!r->detok) return;
    r->text_len = 0;
    const char *p;
    size_t n;
    if (token >= 0 && qwi_detok_feed(r->detok, token, &p, &n) == QW_OK) piece_append(r, p, n);
    if (final && qwi_detok_flush(r->detok, &p, &n) == QW_OK) piece_append(r, p, n);
}

void qwi_request_text_free(qw_request *r) {
    free(r->prompt_text);
    qwi_detok_free(r->detok);
    free(r->text_piece);
}

QW_API qw_status qw_request_get_text_piece(const qw_request *r, const char **piece, size_t *len) {
    if (piece) *piece = "";
    if (len) *len = 0;
    if (!r || !piece || !len)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_request_get_text_piece: request, piece or len is NULL");
    if (!r->detok)
        return qwi_fail(QW_ERR_INVALID_STATE,
                        "qw_request_get_text_piece: request %llu is not submitted to an engine with a tokenizer",
                        (unsigned long long)r->id);
    if (r->text_len) *piece = r->text_piece;
    *len = r->text_len;
    return QW_OK;
}
