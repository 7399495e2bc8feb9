/*
 * sse.c - qw-serve: streaming responses (sse.h).
 */
#include <stdlib.h>
#include <string.h>

#include "sse.h"

typedef struct qws_stream {
    qws_exchange *x;
    qws_sse_produce produce;
    void *ctx;
    void (*ctx_free)(void *);
    int fd;
    qws_buf pending;     /* produced, not yet handed to MHD */
    size_t off;
    int complete;        /* the producer said the stream is complete */
} qws_stream;

static ssize_t reader(void *cls, uint64_t pos, char *buf, size_t max) {
    qws_stream *st = cls;
    while (st->off == st->pending.len) {
        if (st->complete) return MHD_CONTENT_READER_END_OF_STREAM;
        st->pending.len = 0;
        st->off = 0;
        qws_exchange *x = st->x;
        pthread_mutex_lock(&x->mu);
        for (;;) {
            int rc = st->produce(st->ctx, x, &st->pending);
            if (rc < 0 || st->pending.oom) {
                pthread_mutex_unlock(&x->mu);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
            if (rc == 1) st->complete = 1;
            if (rc == 1 || st->pending.len) break;
            if (qws_client_gone(st->fd)) {
                pthread_mutex_unlock(&x->mu);
                return MHD_CONTENT_READER_END_WITH_ERROR;   /* free_stream cancels */
            }
            qws_exchange_wait(x, 100);
        }
        pthread_mutex_unlock(&x->mu);
    }
    size_t n = st->pending.len - st->off;
    if (n > max) n = max;
    memcpy(buf, st->pending.p + st->off, n);
    st->off += n;
    return (ssize_t)n;
}

static void free_stream(void *cls) {
    qws_stream *st = cls;
    if (!st->complete) qws_exchange_cancel(st->x);
    qws_exchange_http_done(st->x);
    if (st->ctx_free) st->ctx_free(st->ctx);
    qws_buf_free(&st->pending);
    free(st);
}

enum MHD_Result qws_sse_respond(qws_call *c, qws_exchange *x, qws_sse_produce produce, void *ctx,
                                void (*ctx_free)(void *), const char *const *headers) {
    qws_stream *st = calloc(1, sizeof *st);
    if (!st) {
        qws_exchange_cancel(x);
        qws_exchange_http_done(x);
        if (ctx_free) ctx_free(ctx);
        return MHD_NO;
    }
    st->x = x;
    st->produce = produce;
    st->ctx = ctx;
    st->ctx_free = ctx_free;
    st->fd = c->fd;
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, reader, st, free_stream);
    if (!r) {
        free_stream(st);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    for (size_t i = 0; headers && headers[i]; i += 2) MHD_add_response_header(r, headers[i], headers[i + 1]);
    if (atomic_load(&c->srv->state) == QWS_STATE_DRAINING)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(c->conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);   /* frees st through free_stream if it was not queued */
    c->answered = 1;
    c->status = 200;
    qws_metrics_count_http(c->srv->metrics, 200);
    return ret;
}
