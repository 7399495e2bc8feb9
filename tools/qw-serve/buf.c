/*
 * buf.c - qw-serve: growable byte buffer and JSON text helpers (buf.h).
 */
#include <stdlib.h>
#include <string.h>

#include "buf.h"

int qws_buf_add(qws_buf *b, const void *p, size_t n) {
    if (b->oom) return -1;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return -1;
        }
        b->p = q;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

int qws_buf_str(qws_buf *b, const char *s) {
    return qws_buf_add(b, s, strlen(s));
}

static int dump_cb(const char *buffer, size_t size, void *data) {
    return qws_buf_add(data, buffer, size);
}

int qws_buf_sse_json(qws_buf *b, const json_t *j) {
    if (qws_buf_str(b, "data: ")) return -1;
    if (json_dump_callback(j, dump_cb, b, JSON_COMPACT) || b->oom) {
        b->oom = 1;
        return -1;
    }
    return qws_buf_str(b, "\n\n");
}

size_t qws_utf8_chars(const char *p, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)p[i] & 0xC0) != 0x80;
    return c;
}

void qws_buf_free(qws_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* Length of the valid UTF-8 sequence at p[0..n), 0 if invalid. */
static size_t utf8_seq(const unsigned char *p, size_t n) {
    unsigned c = p[0];
    size_t len;
    unsigned min;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, min = 0x10000;
    else return 0;
    if (n < len) return 0;
    unsigned cp = c & (0xFF >> (len + 1));
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

json_t *qws_json_text(const char *p, size_t n) {
    if (!p) p = "", n = 0;
    json_t *j = json_stringn(p, n);
    if (j) return j;
    /* invalid UTF-8 (or a NUL, which jansson accepts): repair a copy */
    qws_buf b = {0};
    const unsigned char *u = (const unsigned char *)p;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq(u + i, n - i);
        if (l) {
            qws_buf_add(&b, u + i, l);
            i += l;
        } else {
            qws_buf_add(&b, "\xEF\xBF\xBD", 3);
            i++;
        }
    }
    j = b.oom ? NULL : json_stringn(b.p ? b.p : "", b.len);
    qws_buf_free(&b);
    return j;
}
