/*
 * request_text.c - a request's text side: prompts given as text or as a
 * chat (encoded at submit with the engine's tokenizer), the output text (an
 * incremental detokenizer per request; qw_request_get_text) and the streamed
 * piece of each event, which holds back what may start a stop string and
 * ends at a stop string's match (the matcher is stop_strings.c's).
 */
#include <stdlib.h>
#include <string.h>

#include "chat_api.h"
#include "engine.h"
#include "stop_strings.h"
#include "tokenizer_api.h"
#include "tokenizer.h"

/* Replace the request's text prompt with s[0..len) (taking ownership). */
static void set_text(qw_request *r, char *s, size_t len, bool chat) {
    free(r->prompt_text);
    r->prompt_text = s;
    r->prompt_text_len = len;
    r->has_prompt_text = true;
    r->prompt_is_chat = chat;
}

QW_API qw_status qw_request_set_prompt_text(qw_request *r, const char *text, size_t len) {
    QWI_ERR_SCOPE(r);
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
    QWI_ERR_SCOPE(r);
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
    /* Stop strings are matched on the text: they need the tokenizer. */
    if (r->stop_list && !tok)
        return qwi_fail(QW_ERR_INVALID_STATE,
                        "qw_engine_submit: request %llu has stop strings (qw_request_set_stop_strings) but the model has no "
                        "tokenizer to turn its tokens into text",
                        (unsigned long long)r->id);
    return qwi_request_text_start(r, tok ? tok->impl : NULL);
}

qw_status qwi_request_text_start(qw_request *r, const qwi_tokenizer *tok) {
    qwi_detok_free(r->detok);
    r->detok = NULL;
    if (r->stop_matcher) qwi_stop_matcher_free(r->stop_matcher);
    free(r->stop_matcher);
    r->stop_matcher = NULL;
    r->text_len = r->text_emitted = r->piece_off = r->piece_len = 0;
    r->stop_string_hit = r->stop_token_hit = -1;
    r->stop_cut = 0;
    /* Every request of an engine with a tokenizer streams text. */
    if (!tok) return QW_OK;
    if (r->stop_list) {
        qwi_stop_matcher *m = malloc(sizeof *m);
        qw_status st = m ? qwi_stop_matcher_init(m, r->stop_list)
                         : qwi_fail(QW_ERR_OUT_OF_MEMORY, "qw_engine_submit: stop string matcher");
        if (st != QW_OK) {
            free(m);
            return st;
        }
        r->stop_matcher = m;
    }
    return qwi_detok_init(tok, !r->keep_special, &r->detok);
}

/* Append s[0..n) to the request's text; on failure (out of memory) the
 * text is cut, which the host sees as missing text, never as a crash. */
static void text_append(qw_request *r, const char *s, size_t n) {
    if (n == 0) return;
    if (r->text_len + n > r->text_cap) {
        size_t cap = QWI_MAX(r->text_cap * 2, r->text_len + n + 16);
        char *p = realloc(r->text, cap);
        if (!p) return;
        r->text = p;
        r->text_cap = cap;
    }
    memcpy(r->text + r->text_len, s, n);
    r->text_len += n;
}

int32_t qwi_request_text_token(qw_request *r, int32_t token, bool may_stop) {
    const char *p;
    size_t n;
    if (!r->detok || qwi_detok_feed(r->detok, token, &p, &n) != QW_OK) return -1;
    if (!r->stop_matcher) {
        text_append(r, p, n);
        return -1;
    }
    size_t end;
    int32_t hit = qwi_stop_matcher_feed(r->stop_matcher, p, n, may_stop, &end);
    /* Bytes past the match's end never join the text. */
    text_append(r, p, end);
    if (hit >= 0) {
        r->stop_string_hit = hit;
        size_t cut = r->include_stop_str ? r->text_len : r->text_len - QWI_MIN(r->text_len, r->stop_list->len[hit]);
        /* The held-back bytes always cover a match's start. */
        r->stop_cut = QWI_MAX(cut, r->text_emitted);
    }
    return hit;
}

void qwi_request_text_event(qw_request *r, bool final) {
    if (!r->detok) return;
    size_t upto;
    if (final && r->stop_string_hit >= 0) {
        upto = r->text_len = r->stop_cut;
    } else if (final) {
        const char *p;
        size_t n;
        if (qwi_detok_flush(r->detok, &p, &n) == QW_OK) text_append(r, p, n);
        upto = r->text_len;
    } else {
        size_t hold = r->stop_matcher ? qwi_stop_matcher_hold(r->stop_matcher) : 0;
        upto = r->text_len - QWI_MIN(hold, r->text_len);
    }
    upto = QWI_MAX(upto, r->text_emitted);
    r->piece_off = r->text_emitted;
    r->piece_len = upto - r->text_emitted;
    r->text_emitted = upto;
}

void qwi_request_text_free(qw_request *r) {
    free(r->prompt_text);
    qwi_detok_free(r->detok);
    free(r->text);
    if (r->stop_matcher) qwi_stop_matcher_free(r->stop_matcher);
    free(r->stop_matcher);
    qwi_stop_list_free(r->stop_list);
}

QW_API qw_status qw_request_get_text_piece(const qw_request *r, const char **piece, size_t *len) {
    QWI_ERR_SCOPE(r);
    if (piece) *piece = "";
    if (len) *len = 0;
    if (!r || !piece || !len)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_request_get_text_piece: request, piece or len is NULL");
    if (!r->detok)
        return qwi_fail(QW_ERR_INVALID_STATE,
                        "qw_request_get_text_piece: request %llu is not submitted to an engine with a tokenizer",
                        (unsigned long long)r->id);
    if (r->piece_len) *piece = r->text + r->piece_off;
    *len = r->piece_len;
    return QW_OK;
}

QW_API qw_status qw_request_get_text(const qw_request *r, char *buf, size_t cap, size_t *len_out) {
    QWI_ERR_SCOPE(r);
    if (len_out) *len_out = 0;
    if (!r || !len_out)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_request_get_text: request or len_out is NULL");
    if (cap > 0 && !buf)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_request_get_text: buf is NULL with cap %zu", cap);
    if (!r->detok)
        return qwi_fail(QW_ERR_INVALID_STATE,
                        "qw_request_get_text: request %llu is not submitted to an engine with a tokenizer",
                        (unsigned long long)r->id);
    size_t n = r->text_emitted;
    if (cap > 0) {
        size_t copy = QWI_MIN(n, cap - 1);
        if (copy) memcpy(buf, r->text, copy);
        buf[copy] = '\0';
    }
    *len_out = n;
    return QW_OK;
}
