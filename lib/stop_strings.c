/*
 * stop_strings.c - stop strings: the host's list, the KMP matcher that runs
 * over the detokenised output (stop_strings.h), and the request API around
 * them (qw_request_set_stop_strings, qw_request_get_stop_match). The text
 * itself is kept and streamed by request_text.c.
 */
#include <stdlib.h>
#include <string.h>

#include "request.h"
#include "stop_strings.h"
#include "utf8.h"

/* 1 when s[0..n) is well-formed UTF-8. */
static int is_utf8(const unsigned char *s, size_t n) {
    size_t i = 0, l;
    while (i < n) {
        if (qwi_utf8_step(s + i, n - i, &l) != U8_VALID) return 0;
        i += l;
    }
    return 1;
}

void qwi_stop_list_free(qwi_stop_list *list) {
    if (!list) return;
    for (int32_t i = 0; i < list->n; i++) {
        if (list->str) free(list->str[i]);
        if (list->fail) free(list->fail[i]);
    }
    free(list->str);
    free(list->fail);
    free(list->len);
    free(list);
}

/* An empty list of n strings, or NULL when out of memory. */
static qwi_stop_list *list_alloc(size_t n) {
    qwi_stop_list *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    l->str = calloc(n, sizeof *l->str);
    l->fail = calloc(n, sizeof *l->fail);
    l->len = calloc(n, sizeof *l->len);
    l->n = (int32_t)n;
    if (!l->str || !l->fail || !l->len) {
        qwi_stop_list_free(l);
        return NULL;
    }
    return l;
}

/* Copy s[0..n) into entry i with its failure function: fail[k] is the
 * length of the longest proper border of s[0..k). 0 or -1 (out of memory). */
static int list_set(qwi_stop_list *l, int32_t i, const char *s, size_t n) {
    char *copy = malloc(n + 1);
    int32_t *fail = malloc((n + 1) * sizeof *fail);
    if (!copy || !fail) {
        free(copy);
        free(fail);
        return -1;
    }
    memcpy(copy, s, n);
    copy[n] = '\0';
    fail[0] = 0;
    if (n > 0) fail[1] = 0;
    int32_t k = 0;
    for (size_t q = 1; q < n; q++) {
        while (k > 0 && s[q] != s[k]) k = fail[k];
        if (s[q] == s[k]) k++;
        fail[q + 1] = k;
    }
    l->str[i] = copy;
    l->fail[i] = fail;
    l->len[i] = n;
    if (n > l->max_len) l->max_len = n;
    return 0;
}

qw_status qwi_stop_list_create(const char *const *strings, const size_t *lens, size_t n,
                               const char *fn, qwi_stop_list **out) {
    if (!out) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (n == 0) return QW_OK;
    if (n > QW_MAX_STOP_STRINGS)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "%s: %zu stop strings, at most %d (QW_MAX_STOP_STRINGS)", fn, n,
                        QW_MAX_STOP_STRINGS);
    if (!strings) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "%s: strings is NULL with n = %zu", fn, n);
    /* Validate everything before allocating anything. */
    for (size_t i = 0; i < n; i++) {
        if (!strings[i]) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "%s: stop string %zu is NULL", fn, i);
        size_t len = lens ? lens[i] : strnlen(strings[i], (size_t)QW_MAX_STOP_STRING_BYTES + 1);
        if (len == 0) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "%s: stop string %zu is empty", fn, i);
        if (len > QW_MAX_STOP_STRING_BYTES)
            return qwi_fail(QW_ERR_INVALID_ARGUMENT, "%s: stop string %zu is longer than %d bytes (QW_MAX_STOP_STRING_BYTES)",
                            fn, i, QW_MAX_STOP_STRING_BYTES);
        if (!is_utf8((const unsigned char *)strings[i], len))
            return qwi_fail(QW_ERR_INVALID_ARGUMENT, "%s: stop string %zu is not valid UTF-8", fn, i);
    }
    qwi_stop_list *l = list_alloc(n);
    if (!l) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "%s: %zu stop strings", fn, n);
    for (size_t i = 0; i < n; i++) {
        if (list_set(l, (int32_t)i, strings[i], lens ? lens[i] : strlen(strings[i])) != 0) {
            qwi_stop_list_free(l);
            return qwi_fail(QW_ERR_OUT_OF_MEMORY, "%s: stop string %zu", fn, i);
        }
    }
    *out = l;
    return QW_OK;
}

qw_status qwi_stop_list_copy(const qwi_stop_list *src, qwi_stop_list **out) {
    *out = NULL;
    if (!src) return QW_OK;
    qwi_stop_list *l = list_alloc((size_t)src->n);
    for (int32_t i = 0; l && i < src->n; i++) {
        if (list_set(l, i, src->str[i], src->len[i]) != 0) {
            qwi_stop_list_free(l);
            l = NULL;
        }
    }
    if (!l) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "copying %d stop strings", (int)src->n);
    *out = l;
    return QW_OK;
}

qw_status qwi_stop_matcher_init(qwi_stop_matcher *m, const qwi_stop_list *list) {
    memset(m, 0, sizeof *m);
    int32_t *state = calloc((size_t)list->n, sizeof *state);
    if (!state) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "stop string matcher for %d strings", (int)list->n);
    m->list = list;
    m->state = state;
    return QW_OK;
}

void qwi_stop_matcher_free(qwi_stop_matcher *m) {
    free(m->state);
    memset(m, 0, sizeof *m);
}

int32_t qwi_stop_matcher_feed(qwi_stop_matcher *m, const char *s, size_t n, bool may_stop, size_t *end) {
    const qwi_stop_list *l = m->list;
    for (size_t j = 0; j < n; j++) {
        char c = s[j];
        int32_t best = -1;
        for (int32_t i = 0; i < l->n; i++) {
            const char *p = l->str[i];
            const int32_t *fail = l->fail[i];
            /* state < len on entry: a full match was reported or reset */
            int32_t k = m->state[i];
            while (k > 0 && p[k] != c) k = fail[k];
            if (p[k] == c) k++;
            if ((size_t)k == l->len[i]) {
                /* Equal ends: the longer string starts first, so it wins. */
                if (may_stop && (best < 0 || l->len[i] > l->len[best])) best = i;
                k = fail[k];
            }
            m->state[i] = k;
        }
        if (best >= 0) {
            *end = j + 1;
            return best;
        }
    }
    *end = n;
    return -1;
}

size_t qwi_stop_matcher_hold(const qwi_stop_matcher *m) {
    int32_t h = 0;
    for (int32_t i = 0; m->list && i < m->list->n; i++) h = QWI_MAX(h, m->state[i]);
    return (size_t)h;
}

/* ---- request API ----------------------------------------------------------- */

QW_API qw_status qw_request_set_stop_strings(qw_request *r, const char *const *strings, const size_t *lens,
                                             size_t n) {
    QWI_ERR_SCOPE(r);
    qw_status st = qwi_request_check_mutable(r, "qw_request_set_stop_strings");
    if (st != QW_OK) return st;
    qwi_stop_list *l = NULL;
    if ((st = qwi_stop_list_create(strings, lens, n, "qw_request_set_stop_strings", &l)) != QW_OK) return st;
    qwi_stop_list_free(r->stop_list);
    r->stop_list = l;
    return QW_OK;
}

qw_status qwi_stop_strings_copy(qw_request *dst, const qw_request *src) {
    qwi_stop_list *l = NULL;
    qw_status st = qwi_stop_list_copy(src->stop_list, &l);
    if (st != QW_OK) return st;
    qwi_stop_list_free(dst->stop_list);
    dst->stop_list = l;
    dst->include_stop_str = src->include_stop_str;
    return QW_OK;
}

QW_API qw_status qw_request_get_stop_match(const qw_request *r, int32_t *stop_string, int32_t *stop_token) {
    QWI_ERR_SCOPE(r);
    if (stop_string) *stop_string = -1;
    if (stop_token) *stop_token = -1;
    if (!r) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_request_get_stop_match: request is NULL");
    /* The hits are written before finish_reason is published (atomically),
     * so they are final once it reads QW_FINISH_STOP. */
    if (atomic_load(&((qw_request *)r)->finish_reason) != QW_FINISH_STOP) return QW_OK;
    if (stop_string) *stop_string = r->stop_string_hit;
    if (stop_token) *stop_token = r->stop_token_hit;
    return QW_OK;
}
