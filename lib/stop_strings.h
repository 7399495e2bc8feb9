/*
 * stop_strings.h - stop strings: the host's list (with a KMP failure table
 * per string) and the matcher that runs over a request's output text as it
 * is detokenised, one token's bytes at a time.
 *
 * The matcher keeps, per string, the length of the longest suffix of the
 * text fed so far that is a prefix of the string (the KMP automaton state):
 * it finds a match the moment its last byte arrives, whatever the token
 * boundaries, and the largest state is exactly how many trailing bytes may
 * still start a match (what streaming must hold back). It keeps no text: each
 * byte costs amortised O(1) per string.
 */
#ifndef QWI_STOP_STRINGS_H
#define QWI_STOP_STRINGS_H

#include "common.h"

/* A validated, owned list of stop strings. */
typedef struct qwi_stop_list {
    int32_t n;              /* 1..QW_MAX_STOP_STRINGS               */
    size_t max_len;         /* longest string, bytes                */
    char **str;             /* [n], each len[i] bytes (+ a NUL)     */
    size_t *len;            /* [n]                                  */
    int32_t **fail;         /* [n][len + 1]: KMP failure function   */
} qwi_stop_list;

/* Build a list from the host's strings (lens NULL: NUL-terminated), copying
 * them. fn names the caller in messages. Refused with
 * QW_ERR_INVALID_ARGUMENT (naming the index): n > QW_MAX_STOP_STRINGS, a
 * NULL string, an empty one, one over QW_MAX_STOP_STRING_BYTES, or one that
 * is not UTF-8 (the text matched is UTF-8, so it could never match whole
 * characters). n == 0 gives *out = NULL (no list). QW_ERR_OUT_OF_MEMORY.
 * On failure *out is NULL and nothing is leaked. */
qw_status qwi_stop_list_create(const char *const *strings, const size_t *lens, size_t n,
                               const char *fn, qwi_stop_list **out);
/* Deep copy of src (NULL gives NULL). QW_ERR_OUT_OF_MEMORY leaves *out NULL. */
qw_status qwi_stop_list_copy(const qwi_stop_list *src, qwi_stop_list **out);
/* Free a list. NULL is a no-op. */
void qwi_stop_list_free(qwi_stop_list *list);

/* The run-time state over one text. Borrows the list, which must outlive it. */
typedef struct qwi_stop_matcher {
    const qwi_stop_list *list;
    int32_t *state;         /* [n]: matched prefix length of each string */
} qwi_stop_matcher;

/* Start a matcher over an empty text. QW_ERR_OUT_OF_MEMORY (m zeroed). */
qw_status qwi_stop_matcher_init(qwi_stop_matcher *m, const qwi_stop_list *list);
/* Free the matcher's state (m zeroed). */
void qwi_stop_matcher_free(qwi_stop_matcher *m);

/* Feed the next n bytes of the text. Returns the index of the stop string
 * whose match ends first in s (the earliest end; on the same end the longest
 * string, which starts first; then the lowest index), with *end = the bytes
 * of s up to and including that match's last byte; -1 (and *end = n) when
 * none ends in s. With may_stop false, matches ending in s are passed over
 * (and not reported later). After a match the rest of s is not fed: the
 * text ends there. */
int32_t qwi_stop_matcher_feed(qwi_stop_matcher *m, const char *s, size_t n, bool may_stop,
                              size_t *end);
/* How many trailing bytes of the text fed so far could still be the start
 * of a match: the longest such suffix over all strings (0..max_len - 1). */
size_t qwi_stop_matcher_hold(const qwi_stop_matcher *m);

#endif
