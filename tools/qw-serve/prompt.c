/*
 * prompt.c - qw-serve: completions prompts in their four forms (prompt.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "prompt.h"

void qws_prompts_free(qws_prompts *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n; i++) {
        if (p->ids) free(p->ids[i]);
        if (p->texts) free(p->texts[i]);
    }
    free(p->ids);
    free(p->lens);
    free(p->texts);
    memset(p, 0, sizeof *p);
}

static int oom(qws_error *err) {
    return qws_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
}

/* Encode text into out slot i. */
static int encode(const qws_server *srv, const char *text, size_t len, size_t i, const char *param,
                  qws_prompts *out, qws_error *err) {
    if (!srv->tok)
        return qws_error_set(err, 400, "invalid_request_error", NULL, param,
                             "the model has no tokenizer: send the %s as token ids", param);
    if (len == 0) return qws_error_set(err, 400, "invalid_request_error", NULL, param, "the %s is empty", param);
    size_t n = 0;
    qw_status st = qw_tokenizer_encode(srv->tok, text, len, 1, NULL, 0, &n);
    if (st != QW_OK)
        return st == QW_ERR_OUT_OF_MEMORY ? oom(err)
                                          : qws_error_set(err, 400, "invalid_request_error", NULL, param,
                                                          "cannot tokenize the %s: %s", param, qw_last_error());
    if (n == 0) return qws_error_set(err, 400, "invalid_request_error", NULL, param, "the %s is empty", param);
    int32_t *ids = malloc(n * sizeof *ids);
    char *copy = malloc(len + 1);
    if (!ids || !copy) {
        free(ids);
        free(copy);
        return oom(err);
    }
    size_t n2 = 0;
    if (qw_tokenizer_encode(srv->tok, text, len, 1, ids, n, &n2) != QW_OK || n2 != n) {
        free(ids);
        free(copy);
        return qws_error_set(err, 500, "server_error", NULL, NULL, "tokenizer failed: %s", qw_last_error());
    }
    memcpy(copy, text, len);
    copy[len] = '\0';
    out->ids[i] = ids;
    out->lens[i] = n;
    out->texts[i] = copy;
    return 0;
}

/* Read an array of token ids into out slot i. */
static int read_ids(const qws_server *srv, const json_t *arr, size_t i, const char *param, qws_prompts *out,
                    qws_error *err) {
    size_t n = json_array_size(arr);
    if (n == 0) return qws_error_set(err, 400, "invalid_request_error", NULL, param, "the %s is empty", param);
    int32_t *ids = malloc(n * sizeof *ids);
    if (!ids) return oom(err);
    for (size_t k = 0; k < n; k++) {
        const json_t *v = json_array_get(arr, k);
        long long id;
        if (json_is_integer(v)) {
            id = json_integer_value(v);
        } else if (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v) &&
                   fabs(json_real_value(v)) < 1e15) {
            id = (long long)json_real_value(v);
        } else {
            free(ids);
            return qws_error_set(err, 400, "invalid_request_error", NULL, param,
                                 "%s: token ids must be integers (element %zu)", param, k);
        }
        if (id < 0 || id >= srv->vocab_size) {
            free(ids);
            return qws_error_set(err, 400, "invalid_request_error", NULL, param,
                                 "%s: token id %lld at index %zu is outside the vocabulary [0, %d)", param,
                                 id, k, (int)srv->vocab_size);
        }
        ids[k] = (int32_t)id;
    }
    out->ids[i] = ids;
    out->lens[i] = n;
    return 0;
}

static int alloc_slots(qws_prompts *out, size_t n, qws_error *err) {
    out->ids = calloc(n, sizeof *out->ids);
    out->lens = calloc(n, sizeof *out->lens);
    out->texts = calloc(n, sizeof *out->texts);
    if (!out->ids || !out->lens || !out->texts) return oom(err);
    out->n = n;
    return 0;
}

int qws_prompts_parse(const qws_server *srv, const json_t *prompt, const char *param, qws_prompts *out,
                      qws_error *err) {
    memset(out, 0, sizeof *out);
    int rc;
    if (!prompt || json_is_null(prompt)) {
        rc = qws_error_set(err, 400, "invalid_request_error", NULL, param, "'%s' is required", param);
    } else if (json_is_string(prompt)) {
        rc = alloc_slots(out, 1, err);
        if (!rc) rc = encode(srv, json_string_value(prompt), json_string_length(prompt), 0, param, out, err);
    } else if (!json_is_array(prompt)) {
        rc = qws_error_set(err, 400, "invalid_request_error", NULL, param,
                           "'%s' must be a string, an array of strings, an array of token ids or an "
                           "array of arrays of token ids", param);
    } else if (json_array_size(prompt) == 0) {
        rc = qws_error_set(err, 400, "invalid_request_error", NULL, param, "the %s is empty", param);
    } else {
        const json_t *first = json_array_get(prompt, 0);
        size_t n = json_array_size(prompt);
        if (json_is_number(first)) {
            rc = alloc_slots(out, 1, err);
            if (!rc) rc = read_ids(srv, prompt, 0, param, out, err);
        } else if (n > QWS_MAX_PROMPTS) {
            rc = qws_error_set(err, 400, "invalid_request_error", NULL, param,
                               "at most %d prompts in one request (got %zu)", QWS_MAX_PROMPTS, n);
        } else {
            rc = alloc_slots(out, n, err);
            /* a batch is all strings or all id arrays (OpenAI's two forms) */
            int strings = json_is_string(first);
            for (size_t i = 0; !rc && i < n; i++) {
                const json_t *e = json_array_get(prompt, i);
                if (strings != json_is_string(e))
                    rc = qws_error_set(err, 400, "invalid_request_error", NULL, param,
                                       "%s: a batch must be all strings or all arrays of token ids "
                                       "(element %zu differs)", param, i);
                else if (json_is_string(e))
                    rc = encode(srv, json_string_value(e), json_string_length(e), i, param, out, err);
                else if (json_is_array(e))
                    rc = read_ids(srv, e, i, param, out, err);
                else
                    rc = qws_error_set(err, 400, "invalid_request_error", NULL, param,
                                       "%s[%zu] must be a string or an array of token ids", param, i);
            }
        }
    }
    if (rc) qws_prompts_free(out);
    return rc;
}
