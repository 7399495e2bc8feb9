/*
 * buf.h - qw-serve: a growable byte buffer (response bodies, SSE events).
 */
#ifndef QWS_BUF_H
#define QWS_BUF_H

#include <jansson.h>
#include <stddef.h>

typedef struct qws_buf {
    char *p;        /* NUL-terminated when non-NULL                          */
    size_t len, cap;
    int oom;        /* an append failed; the content is then incomplete       */
} qws_buf;

/* Append n bytes (p may be NULL when n is 0). Returns 0, or -1 on OOM (then
 * b->oom is set and later appends do nothing). */
int qws_buf_add(qws_buf *b, const void *p, size_t n);
/* Append a NUL-terminated string. */
int qws_buf_str(qws_buf *b, const char *s);
/* Append one server-sent event "data: <compact json>\n\n" (j not stolen). */
int qws_buf_sse_json(qws_buf *b, const json_t *j);
/* Number of characters (code points) in n bytes of UTF-8. */
size_t qws_utf8_chars(const char *p, size_t n);
/* Free the bytes and reset to empty. */
void qws_buf_free(qws_buf *b);

/* A JSON string of n bytes of UTF-8; invalid bytes (never expected: the
 * library's text pieces are whole characters) become U+FFFD instead of a
 * NULL that would lose the field. NULL only on OOM. */
json_t *qws_json_text(const char *p, size_t n);

#endif /* QWS_BUF_H */
