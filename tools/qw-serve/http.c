/*
 * http.c - qw-serve: the libmicrohttpd daemon (http.h has the threading
 * model), routing, bounded request bodies, the small GET endpoints and the
 * response helpers.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "buf.h"
#include "http.h"

enum route_id { R_HEALTH, R_MODELS, R_METRICS, R_COMPLETIONS, R_CHAT, R_GENERATE, R_GENERATE_STREAM };

static const struct route {
    const char *path;
    const char *method;     /* GET routes also answer HEAD */
    int api;                /* 1: an inference endpoint (needs the engine) */
    int tgi;
} routes[] = {
    [R_HEALTH] = {"/health", "GET", 0, 0},
    [R_MODELS] = {"/v1/models", "GET", 1, 0},
    [R_METRICS] = {"/metrics", "GET", 0, 0},
    [R_COMPLETIONS] = {"/v1/completions", "POST", 1, 0},
    [R_CHAT] = {"/v1/chat/completions", "POST", 1, 0},
    [R_GENERATE] = {"/generate", "POST", 1, 1},
    [R_GENERATE_STREAM] = {"/generate_stream", "POST", 1, 1},
};
#define N_ROUTES ((int)(sizeof routes / sizeof routes[0]))

static int find_route(const char *url) {
    for (int i = 0; i < N_ROUTES; i++)
        if (!strcmp(url, routes[i].path)) return i;
    return -1;
}

static int method_ok(int route, const char *method) {
    if (!strcmp(routes[route].method, method)) return 1;
    return !strcmp(routes[route].method, "GET") && !strcmp(method, "HEAD");
}

int qws_client_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return 0;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

const char *qws_header(qws_call *c, const char *name) {
    return MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, name);
}

enum MHD_Result qws_reply(qws_call *c, int status, const char *content_type, char *body, size_t len,
                          const char *const *headers) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, body ? body : (char *)"", body ? MHD_RESPMEM_MUST_FREE
                                                                            : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    if (content_type) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    for (size_t i = 0; headers && headers[i]; i += 2) MHD_add_response_header(r, headers[i], headers[i + 1]);
    /* while draining, keep-alive connections close after this answer */
    if (atomic_load(&c->srv->state) == QWS_STATE_DRAINING)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(c->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    c->answered = 1;
    c->status = status;
    qws_metrics_count_http(c->srv->metrics, status);
    return ret;
}

enum MHD_Result qws_reply_json(qws_call *c, int status, json_t *j, const char *const *headers) {
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                                  "\"param\":null,\"code\":null}}";
        s = strdup(oom);
        if (!s) return MHD_NO;
        status = 500;
    }
    return qws_reply(c, status, "application/json", s, strlen(s), headers);
}

static json_t *str_or_null(const char *s) {
    return s && *s ? json_string(s) : json_null();
}

static const char *tgi_error_type(int status) {
    switch (status) {
    case 400: case 413: case 422: return "validation";
    case 404: return "not_found";
    case 405: return "method_not_allowed";
    case 503: return "overloaded";
    default: return "generation";
    }
}

enum MHD_Result qws_reply_error(qws_call *c, const qws_error *err) {
    json_t *j;
    if (c->tgi) {
        j = json_pack("{s:o, s:s}", "error", qws_json_text(err->message, strlen(err->message)),
                      "error_type", tgi_error_type(err->http_status));
    } else {
        j = json_pack("{s:{s:o, s:s, s:o, s:o}}", "error", "message",
                      qws_json_text(err->message, strlen(err->message)), "type",
                      err->type[0] ? err->type : "invalid_request_error", "param", str_or_null(err->param),
                      "code", str_or_null(err->code));
    }
    static const char *const retry[] = {"Retry-After", "1", NULL};
    return qws_reply_json(c, err->http_status, j, err->http_status == 503 ? retry : NULL);
}

static enum MHD_Result handle_models(qws_call *c) {
    qws_server *srv = c->srv;
    json_t *j = json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:I}]}", "object", "list", "data", "id",
                          srv->model_name, "object", "model", "created", (json_int_t)srv->created,
                          "owned_by", "qwinfer", "max_model_len", (json_int_t)srv->max_model_len);
    return qws_reply_json(c, 200, j, NULL);
}

static enum MHD_Result handle_metrics(qws_call *c) {
    size_t len = 0;
    char *text = qws_metrics_render(c->srv->metrics, &len);
    if (!text) {
        qws_error e;
        qws_error_set(&e, 500, "server_error", NULL, NULL, "out of memory rendering the metrics");
        return qws_reply_error(c, &e);
    }
    return qws_reply(c, 200, "text/plain; version=0.0.4; charset=utf-8", text, len, NULL);
}

static enum MHD_Result dispatch(qws_call *c) {
    qws_server *srv = c->srv;
    qws_error e;
    /* 404 and 405 are about the path, not an endpoint: OpenAI's shape
     * everywhere (TGI's shape is for what its endpoints answer). */
    if (c->route < 0 || !method_ok(c->route, c->method)) c->tgi = 0;
    if (c->route < 0) {
        qws_error_set(&e, 404, "invalid_request_error", NULL, NULL, "no such endpoint: %s %s", c->method,
                      c->path);
        return qws_reply_error(c, &e);
    }
    if (!method_ok(c->route, c->method)) {
        qws_error_set(&e, 405, "invalid_request_error", NULL, NULL, "method %s not allowed on %s (use %s)",
                      c->method, c->path, routes[c->route].method);
        return qws_reply_error(c, &e);
    }
    if (c->too_large) {
        qws_error_set(&e, 413, "invalid_request_error", NULL, NULL,
                      "request body larger than %lld bytes (--max-body-bytes)", srv->cfg.max_body_bytes);
        return qws_reply_error(c, &e);
    }
    int state = atomic_load(&srv->state);   /* acquire: engine facts below */
    if (c->route == R_HEALTH)
        return qws_reply(c, state == QWS_STATE_READY ? 200 : 503, NULL, NULL, 0, NULL);
    if (c->route == R_METRICS) return handle_metrics(c);
    if (state != QWS_STATE_READY) {
        if (state == QWS_STATE_LOADING)
            qws_error_set(&e, 503, "server_error", "loading", NULL, "the model is still loading");
        else if (state == QWS_STATE_DRAINING)
            qws_error_set(&e, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
        else
            qws_error_set(&e, 503, "server_error", "loading", NULL, "the model failed to load");
        return qws_reply_error(c, &e);
    }
    switch (c->route) {
    case R_MODELS: return handle_models(c);
    case R_COMPLETIONS: return qws_handle_completions(c);
    case R_CHAT: return qws_handle_chat(c);
    case R_GENERATE: return qws_handle_generate(c, 0);
    case R_GENERATE_STREAM: return qws_handle_generate(c, 1);
    }
    return MHD_NO;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
    qws_server *srv = cls;
    qws_call *c = *con_cls;
    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c) return MHD_NO;
        c->srv = srv;
        c->conn = conn;
        c->start = qws_now();
        c->route = find_route(url);
        c->tgi = c->route >= 0 && routes[c->route].tgi;
        snprintf(c->method, sizeof c->method, "%s", method);
        snprintf(c->path, sizeof c->path, "%s", url);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        c->fd = ci ? ci->connect_fd : -1;
        *con_cls = c;
        /* A declared body over the limit is refused before it is read. */
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl) {
            char *end;
            errno = 0;
            unsigned long long n = strtoull(cl, &end, 10);
            if (errno || end == cl || n > (unsigned long long)srv->cfg.max_body_bytes) {
                c->too_large = 1;
                return dispatch(c);
            }
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (c->answered || c->too_large) return MHD_YES;
        if (c->body_len + n > (size_t)srv->cfg.max_body_bytes) {
            /* a chunked body that grew past the limit */
            c->too_large = 1;
            free(c->body);
            c->body = NULL;
            c->body_len = c->body_cap = 0;
            return MHD_YES;
        }
        if (c->body_len + n + 1 > c->body_cap) {
            size_t cap = c->body_cap ? c->body_cap : 4096;
            while (cap < c->body_len + n + 1) cap *= 2;
            char *b = realloc(c->body, cap);
            if (!b) return MHD_NO;
            c->body = b;
            c->body_cap = cap;
        }
        memcpy(c->body + c->body_len, upload_data, n);
        c->body_len += n;
        c->body[c->body_len] = '\0';
        return MHD_YES;
    }
    if (c->answered) return MHD_YES;
    return dispatch(c);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    qws_server *srv = cls;
    qws_call *c = *con_cls;
    if (!c) return;
    if (srv->cfg.log_requests)
        fprintf(stderr, "qw-serve: %s %s %d %.3fs%s\n", c->method, c->path, c->status,
                qws_now() - c->start,
                toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection closed early)");
    free(c->body);
    free(c);
    *con_cls = NULL;
}

/* libmicrohttpd's own messages are mostly about clients that went away
 * (which qw-serve handles: the request is cancelled), so they are printed
 * only with --log-requests. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    const qws_server *srv = cls;
    if (!srv->cfg.log_requests) return;
    fputs("qw-serve: libmicrohttpd: ", stderr);
    vfprintf(stderr, fmt, ap);
}

int qws_http_listen(const char *host, long port, long *port_out) {
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char service[16];
    snprintf(service, sizeof service, "%ld", port);
    int rc = getaddrinfo(host, service, &hints, &res);
    if (rc) {
        fprintf(stderr, "qw-serve: --host %s: %s\n", host, gai_strerror(rc));
        return -1;
    }
    int fd = -1, err = 0;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 1024) == 0) break;
        err = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        fprintf(stderr, "qw-serve: cannot listen on %s:%ld: %s\n", host, port, strerror(err));
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    *port_out = port;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) *port_out = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        else if (ss.ss_family == AF_INET6) *port_out = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    return fd;
}

struct MHD_Daemon *qws_http_start(qws_server *srv, int listen_fd) {
    /* MHD_USE_ITC: needed by MHD_quiesce_daemon (graceful shutdown). */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG;
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, srv, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, srv,
        MHD_OPTION_LISTEN_SOCKET, (MHD_socket)listen_fd,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)srv->cfg.max_connections,
        /* idle keep-alive connections go after 5 minutes; a waiting handler
         * is not idle (it runs in the connection's own thread) */
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)300, MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
        MHD_OPTION_END);
    if (!d) fprintf(stderr, "qw-serve: cannot start the HTTP daemon (libmicrohttpd)\n");
    return d;
}
