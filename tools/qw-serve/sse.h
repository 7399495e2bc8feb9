/*
 * sse.h - qw-serve: a server-sent-events response fed from an exchange.
 *
 * The endpoint supplies a producer that turns what the engine added to the
 * exchange since its last call into SSE events. libmicrohttpd's content
 * reader (in the connection's own thread) calls it under the exchange's
 * mutex, and blocks on the exchange's condition variable while there is
 * nothing new, waking every 100 ms to poll the socket: a client that went
 * away gets its requests cancelled. Draining (SIGTERM past the deadline)
 * cancels through the registry; the producer then writes the final
 * "abort" chunks as for any finish.
 */
#ifndef QWS_SSE_H
#define QWS_SSE_H

#include "buf.h"
#include "http.h"

/* Append to out the events for everything new in x (x->mu held). Return 1
 * when the stream is complete (everything finished and written, final
 * events included), 0 to be called again when the engine adds more, -1 on
 * OOM (the stream ends with an error). */
typedef int (*qws_sse_produce)(void *ctx, qws_exchange *x, qws_buf *out);

/* Answer c with a streaming 200 (text/event-stream) driven by produce(ctx).
 * Takes over x's HTTP reference and ctx (ctx_free(ctx) when the response is
 * done, also on failure); extra headers as in qws_reply. When the stream
 * ends before the exchange finished (client gone), the exchange is
 * cancelled. */
enum MHD_Result qws_sse_respond(qws_call *c, qws_exchange *x, qws_sse_produce produce, void *ctx,
                                void (*ctx_free)(void *), const char *const *headers);

#endif /* QWS_SSE_H */
