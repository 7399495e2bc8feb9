/*
 * logprobs_json.c - qw-serve: logprobs in the shapes of the APIs
 * (logprobs_json.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "buf.h"
#include "logprobs_json.h"

json_t *qws_token_text(const qws_server *srv, int32_t id) {
    char small[128];
    size_t len = 0;
    if (!srv->tok || qw_tokenizer_decode(srv->tok, &id, 1, 0, small, sizeof small, &len) != QW_OK)
        return json_string("");
    if (len < sizeof small) return qws_json_text(small, len);
    char *big = malloc(len + 1);
    if (!big) return NULL;
    json_t *j = NULL;
    if (qw_tokenizer_decode(srv->tok, &id, 1, 0, big, len + 1, &len) == QW_OK) j = qws_json_text(big, len);
    free(big);
    return j;
}

json_t *qws_json_logprob(float v) {
    return json_real(isfinite(v) ? (double)v : -9999.0);
}



json_t *qws_logprobs_completions(const qws_server *srv, const qws_job *job, const qws_sample *s, size_t from,
                                 size_t to, size_t base) {
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    size_t scanned = 0, chars = 0;
    for (size_t i = from; i < to && i < s->n_tokens; i++) {
        json_array_append_new(tokens, qws_token_text(srv, s->tokens[i]));
        json_array_append_new(lps, qws_json_logprob(s->lp[i].logprob));
        json_t *top = json_object();
        for (size_t t = 0; t < s->n_top[i]; t++) {
            const qw_logprob *e = &s->top[i * (size_t)job->k + t];
            json_t *name = qws_token_text(srv, e->token);
            if (name && !json_object_get(top, json_string_value(name)))
                json_object_set_new(top, json_string_value(name), qws_json_logprob(e->logprob));
            json_decref(name);
        }
        json_t *own = qws_token_text(srv, s->tokens[i]);
        if (own && !json_object_get(top, json_string_value(own)))
            json_object_set_new(top, json_string_value(own), qws_json_logprob(s->lp[i].logprob));
        json_decref(own);
        json_array_append_new(tops, top);
        /* offsets count characters, as OpenAI's (Python str) do */
        size_t start = i ? s->text_end[i - 1] : 0;
        for (; scanned < start; scanned++) chars += ((unsigned char)s->text[scanned] & 0xC0) != 0x80;
        json_array_append_new(offs, json_integer((json_int_t)(base + chars)));
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops,
                     "text_offset", offs);
}

static json_t *bytes_of(const json_t *str) {
    json_t *a = json_array();
    const unsigned char *p = (const unsigned char *)json_string_value(str);
    size_t n = json_string_length(str);
    for (size_t i = 0; p && i < n; i++) json_array_append_new(a, json_integer(p[i]));
    return a;
}

static json_t *chat_entry(const qws_server *srv, const qw_logprob *e) {
    json_t *t = qws_token_text(srv, e->token);
    if (!t) return NULL;
    return json_pack("{s:o, s:o, s:o}", "token", t, "logprob", qws_json_logprob(e->logprob), "bytes", bytes_of(t));
}

json_t *qws_logprobs_chat(const qws_server *srv, const qws_job *job, const qws_sample *s, size_t from, size_t to) {
    json_t *content = json_array();
    for (size_t i = from; i < to && i < s->n_tokens; i++) {
        json_t *entry = chat_entry(srv, &s->lp[i]);
        if (!entry) continue;
        json_t *top = json_array();
        for (size_t t = 0; t < s->n_top[i]; t++)
            json_array_append_new(top, chat_entry(srv, &s->top[i * (size_t)job->k + t]));
        json_object_set_new(entry, "top_logprobs", top);
        json_array_append_new(content, entry);
    }
    return json_pack("{s:o}", "content", content);
}

json_t *qws_prompt_logprobs_json(const qws_server *srv, const qws_job *job) {
    if (job->prompt_k < 0 || !job->prompt_lp) return json_null();
    json_t *a = json_array();
    json_array_append_new(a, json_null());
    for (size_t j = 1; j < job->n_prompt_lp; j++) {
        json_t *o = json_object();
        const qw_logprob *act = &job->prompt_lp[j];
        int rank = 0;
        for (size_t t = 0; t < job->prompt_n_top[j]; t++) {
            const qw_logprob *e = &job->prompt_top[j * (size_t)job->prompt_k + t];
            if (e->token == act->token) rank = (int)t + 1;
            char key[16];
            snprintf(key, sizeof key, "%d", e->token);
            json_object_set_new(o, key, json_pack("{s:o, s:i, s:o}", "logprob", qws_json_logprob(e->logprob), "rank",
                                                  (int)t + 1, "decoded_token", qws_token_text(srv, e->token)));
        }
        if (act->token >= 0 && !rank) {
            char key[16];
            snprintf(key, sizeof key, "%d", act->token);
            /* rank unknown (beyond the top list): omitted */
            json_object_set_new(o, key, json_pack("{s:o, s:o}", "logprob", qws_json_logprob(act->logprob),
                                                  "decoded_token", qws_token_text(srv, act->token)));
        }
        json_array_append_new(a, o);
    }
    return a;
}
