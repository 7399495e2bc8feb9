/*
 * http.h - qw-serve: the libmicrohttpd daemon, routing, request bodies and
 * responses.
 *
 * Threading model: MHD_USE_THREAD_PER_CONNECTION |
 * MHD_USE_INTERNAL_POLLING_THREAD. Each connection has its own thread, so a
 * handler may simply block: a non-streaming request waits on its
 * exchange's condition variable inside the access handler, and a streaming
 * response's content reader blocks until the engine thread brings the next
 * piece. That keeps every handler straight-line code, with no
 * suspend/resume state machine, and the number of threads is bounded by
 * --max-connections (MHD_OPTION_CONNECTION_LIMIT). A waiting thread wakes
 * every 100 ms to poll its socket for POLLRDHUP/POLLHUP, so a client that
 * goes away gets its request cancelled within about one step.
 */
#ifndef QWS_HTTP_H
#define QWS_HTTP_H

#include <jansson.h>
#include <microhttpd.h>

#include "exchange.h"
#include "params.h"
#include "server.h"

/* One HTTP request being served (the access handler's per-request state). */
typedef struct qws_call {
    qws_server *srv;
    struct MHD_Connection *conn;
    int route;              /* index into http.c's route table, -1 = none   */
    int tgi;                /* answer errors in TGI's shape                 */
    char *body;             /* the request body, NUL-terminated             */
    size_t body_len, body_cap;
    int too_large;          /* the body passed --max-body-bytes             */
    int answered;           /* a response was queued                        */
    int status;             /* its status (for --log-requests)              */
    int fd;                 /* the connection's socket (disconnect polling) */
    double start;           /* qws_now() at the first call                  */
    char method[8];
    char path[96];
} qws_call;

/* Start the daemon on an already listening socket. Returns NULL (message
 * printed) on failure. */
struct MHD_Daemon *qws_http_start(qws_server *srv, int listen_fd);

/* Open, bind and listen on host:port (numeric or resolvable host, IPv4 or
 * IPv6). Returns the socket and the bound port in *port_out, or -1 with a
 * message printed. */
int qws_http_listen(const char *host, long port, long *port_out);

/* Queue body (malloc'd, taken over; len bytes) with status and content
 * type; extra headers as NULL-terminated name/value pairs (may be NULL).
 * Counts the status in the metrics. MHD_YES / MHD_NO as MHD expects. */
enum MHD_Result qws_reply(qws_call *c, int status, const char *content_type, char *body, size_t len,
                          const char *const *headers);
/* Queue j (stolen) as compact JSON. */
enum MHD_Result qws_reply_json(qws_call *c, int status, json_t *j, const char *const *headers);
/* Queue an error: OpenAI's {"error":{message,type,param,code}} or, for the
 * TGI routes, {"error": message, "error_type": kind}. 503s get
 * Retry-After: 1. */
enum MHD_Result qws_reply_error(qws_call *c, const qws_error *err);

/* 1 when the client closed its side of the connection (POLLRDHUP, POLLHUP
 * or POLLERR on fd). Never blocks. */
int qws_client_gone(int fd);

/* The value of request header name, or NULL. */
const char *qws_header(qws_call *c, const char *name);

/* Endpoint handlers (completions.c, chat.c, tgi.c): called once the body
 * is complete and the engine is ready; each queues exactly one response
 * and returns what MHD expects (MHD_NO closes the connection, used when the
 * client went away). */
enum MHD_Result qws_handle_completions(qws_call *c);
enum MHD_Result qws_handle_chat(qws_call *c);
enum MHD_Result qws_handle_generate(qws_call *c, int stream);

#endif /* QWS_HTTP_H */
