/*
 * main.c - qw-serve: an OpenAI- and TGI-compatible HTTP server over
 * libqwinfer's public API (docs/serve.md is the user documentation).
 *
 * Design:
 *  - libmicrohttpd (Debian's libmicrohttpd-dev) in thread-per-connection
 *    mode serves HTTP (http.h says why); jansson reads and writes JSON.
 *  - One engine thread (engine_loop.c) owns the step loop and is the only
 *    thread that calls the "step thread only" getters; it copies each
 *    event's token, text piece, logprobs, stats and finish reason into the
 *    request's exchange (exchange.h), and HTTP threads wait on the
 *    exchange's condition variable and format answers from those copies.
 *    Submitting and cancelling, which the library allows from any thread,
 *    happen on the HTTP threads.
 *  - Startup: the socket listens first (the "listening" line), the model
 *    loads on the engine thread meanwhile (/health answers 503 until the
 *    "ready" line).
 *  - Signals: SIGTERM, SIGINT and SIGUSR1 are blocked in every thread (the
 *    mask is set before any thread starts) and the main thread takes them
 *    with sigwaitinfo, so no code runs in a signal handler at all. SIGUSR1
 *    is the engine thread's "the model failed to load" notice.
 *  - Graceful shutdown (SIGTERM/SIGINT): MHD_quiesce_daemon stops accepting
 *    connections; the server turns DRAINING (/health 503, new requests 503
 *    "shutting_down"); in-flight exchanges get --shutdown-timeout seconds
 *    (a second signal cuts that short), then whatever is left is cancelled
 *    (streams end with finish_reason "abort" and [DONE]) and given a few
 *    seconds to write that; then the daemon stops, the engine thread steps
 *    until the engine is empty, and the engine is destroyed. Exit 0.
 *  - Exit codes: 0 clean, 1 the model failed to load (or the server could
 *    not start), 2 usage error.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine_loop.h"
#include "exchange.h"
#include "http.h"
#include "server.h"

/* After the drain deadline, how long cancelled streams get to write their
 * final chunks before the daemon stops anyway. */
#define QWS_CANCEL_GRACE_S 5.0

/* The served model name: --served-model-name, else the last non-empty
 * component of the model path. */
static void model_name(const qws_config *c, char *out, size_t cap) {
    if (c->served_model_name) {
        snprintf(out, cap, "%s", c->served_model_name);
        return;
    }
    size_t len = strlen(c->model);
    while (len > 1 && c->model[len - 1] == '/') len--;
    size_t start = len;
    while (start > 0 && c->model[start - 1] != '/') start--;
    snprintf(out, cap, "%.*s", (int)(len - start), c->model + start);
}

/* Wait until no exchange is registered or the monotonic deadline passes;
 * returns early (1) when another signal arrives. */
static int wait_idle(qws_server *srv, const sigset_t *set, double deadline) {
    while (qws_registry_count(srv) > 0) {
        double left = deadline - qws_now();
        if (left <= 0) return 0;
        if (left > 0.1) left = 0.1;
        struct timespec ts = {0, (long)(left * 1e9)};
        int sig = sigtimedwait(set, NULL, &ts);
        if (sig == SIGTERM || sig == SIGINT) return 1;
    }
    return 0;
}

static void shutdown_server(qws_server *srv, struct MHD_Daemon *d, const sigset_t *set) {
    /* Stop accepting; the listening socket comes back to us to close. */
    MHD_socket lfd = MHD_quiesce_daemon(d);
    if (lfd != MHD_INVALID_SOCKET) close(lfd);
    pthread_mutex_lock(&srv->reg_mu);
    srv->reg_closed = 1;
    atomic_store(&srv->state, QWS_STATE_DRAINING);
    pthread_mutex_unlock(&srv->reg_mu);
    size_t busy = qws_registry_count(srv);
    if (busy)
        fprintf(stderr, "qw-serve: draining %zu request(s) (up to %.0f s)\n", busy, srv->cfg.shutdown_timeout);
    wait_idle(srv, set, qws_now() + srv->cfg.shutdown_timeout);
    busy = qws_registry_count(srv);
    if (busy) {
        fprintf(stderr, "qw-serve: cancelling %zu request(s)\n", busy);
        qws_registry_cancel_all(srv);
        wait_idle(srv, set, qws_now() + QWS_CANCEL_GRACE_S);
        /* anything registered meanwhile (a request racing the drain) too */
        qws_registry_cancel_all(srv);
    }
}

int main(int argc, char **argv) {
    static qws_server srv;   /* static: shared with every thread for the whole run */
    int rc = qws_config_parse(argc, argv, &srv.cfg);
    if (rc == 1) return 0;
    if (rc) return 2;
    model_name(&srv.cfg, srv.model_name, sizeof srv.model_name);
    if (!srv.model_name[0]) {
        fprintf(stderr, "qw-serve: cannot derive a model name from '%s': use --served-model-name\n", srv.cfg.model);
        return 2;
    }
    pthread_mutex_init(&srv.reg_mu, NULL);
    pthread_cond_init(&srv.reg_cv, NULL);
    srv.main_thread = pthread_self();

    /* Block the signals main waits for, before any thread exists, so every
     * thread inherits the mask; a dead client never kills us (SIGPIPE). */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    srv.metrics = qws_metrics_create(srv.model_name, qw_version_string());
    if (!srv.metrics) {
        fprintf(stderr, "qw-serve: out of memory\n");
        return 1;
    }
    long port = 0;
    int lfd = qws_http_listen(srv.cfg.host, srv.cfg.port, &port);
    if (lfd < 0) {
        qws_metrics_destroy(srv.metrics);
        return 1;
    }
    struct MHD_Daemon *d = qws_http_start(&srv, lfd);
    if (!d) {
        close(lfd);
        qws_metrics_destroy(srv.metrics);
        return 1;
    }
    const char *host = srv.cfg.host;
    int v6 = strchr(host, ':') != NULL;
    printf("qw-serve: listening on http://%s%s%s:%ld\n", v6 ? "[" : "", host, v6 ? "]" : "", port);
    fflush(stdout);

    pthread_t engine_thread;
    if (qws_engine_start(&srv, &engine_thread)) {
        MHD_stop_daemon(d);
        qws_metrics_destroy(srv.metrics);
        return 1;
    }

    int exit_code = 0;
    for (;;) {
        int sig = sigwaitinfo(&set, NULL);
        if (sig < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (sig == SIGUSR1) {
            if (atomic_load(&srv.state) == QWS_STATE_FAILED) {
                exit_code = 1;
                break;
            }
            continue;
        }
        break;   /* SIGTERM or SIGINT */
    }

    if (exit_code == 0) {
        /* A load still running is cancelled through its progress callback. */
        atomic_store(&srv.cancel_load, 1);
        int expected = QWS_STATE_LOADING;
        if (!atomic_compare_exchange_strong(&srv.state, &expected, QWS_STATE_DRAINING))
            shutdown_server(&srv, d, &set);
        else
            pthread_mutex_lock(&srv.reg_mu), srv.reg_closed = 1, pthread_mutex_unlock(&srv.reg_mu);
    }
    MHD_stop_daemon(d);
    /* Nothing can submit or cancel any more; the engine thread finishes
     * what is left (all cancelled) and returns. */
    qws_engine_stop(&srv, engine_thread);
    qw_engine_destroy(srv.engine);
    qws_metrics_destroy(srv.metrics);
    pthread_cond_destroy(&srv.reg_cv);
    pthread_mutex_destroy(&srv.reg_mu);
    if (exit_code == 0) fprintf(stderr, "qw-serve: stopped\n");
    return exit_code;
}
