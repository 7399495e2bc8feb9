/*
 * server.h - qw-serve: the command-line configuration and the process-wide
 * server state every part of the program shares.
 *
 * Threads (see main.c for the whole design):
 *   - the main thread parses the command line, opens the listening socket,
 *     starts libmicrohttpd and then only waits for signals (sigwaitinfo) and
 *     runs the graceful shutdown;
 *   - the engine thread (engine_loop.c) creates the engine, then steps it
 *     and routes every event into the exchange that owns the request;
 *   - libmicrohttpd's threads, one per connection, parse requests, submit
 *     them and wait on their exchange's condition variable.
 * The fields below that several threads read after start are either set
 * before the threads exist (cfg, model_name, metrics) or atomics (state,
 * engine facts published with the READY state, num_waiting).
 */
#ifndef QWS_SERVER_H
#define QWS_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "metrics.h"
#include "qwinfer.h"

/* The command line (cli.c). Engine options left at -1 (or NULL) are not
 * set, so the library's defaults apply. */
typedef struct qws_config {
    const char *model;             /* --model DIR (required)                    */
    const char *host;              /* [127.0.0.1]                               */
    long port;                     /* [8000]; 0 = any free port                 */
    const char *served_model_name; /* [last path component of --model]          */
    const char *device;            /* [NULL: library default "cpu"]             */
    long threads, max_num_seqs, max_num_batched_tokens, max_model_len, block_size;
    long long kv_cache_bytes;
    int numerics;                  /* -1 or a qw_numerics value                  */
    int kv_cache_dtype;            /* -1 (unset) or a qw_kv_cache_dtype         */
    int has_seed;
    long long seed;
    int no_prefix_caching;
    long max_queue;                /* [256]                                     */
    long long max_body_bytes;      /* [4194304]                                 */
    double request_timeout;        /* [600] seconds; 0 = none                   */
    double shutdown_timeout;       /* [30] seconds                              */
    const char *cache_salt_header; /* [X-Cache-Salt]                            */
    long degrade_queue, degrade_max_tokens; /* [0, 0] = off                     */
    long max_connections;          /* [512]                                     */
    int log_requests;
} qws_config;

/* Parse argv into *cfg (strings point into argv). Returns 0, 1 when --help
 * was asked (usage printed on stdout), or 2 on a usage error (message and
 * usage on stderr): main's exit code. */
int qws_config_parse(int argc, char **argv, qws_config *cfg);

typedef enum qws_state {
    QWS_STATE_LOADING = 0,   /* listening, engine not created yet            */
    QWS_STATE_READY = 1,     /* serving                                     */
    QWS_STATE_DRAINING = 2,  /* SIGTERM: finishing in-flight work only       */
    QWS_STATE_FAILED = 3     /* the model failed to load                     */
} qws_state;

struct qws_exchange;

typedef struct qws_server {
    qws_config cfg;
    char model_name[256];          /* the served model id                      */
    qws_metrics *metrics;
    pthread_t main_thread;         /* gets SIGUSR1 when loading ends badly      */

    /* Published by the engine thread before state becomes READY (release);
     * readers load state (acquire) first. */
    qw_engine *engine;
    const qw_tokenizer *tok;       /* NULL when the model has no tokenizer     */
    int32_t vocab_size, max_model_len;
    long long created;             /* Unix time the engine became ready        */
    _Atomic int state;             /* qws_state                                */
    _Atomic int stop_engine;       /* main -> engine thread: leave the loop     */
    _Atomic int cancel_load;       /* main -> progress callback: stop loading   */
    _Atomic uint64_t num_waiting;  /* engine's num_waiting after the last step  */

    /* Registry of exchanges whose HTTP side is still open (exchange.c). */
    pthread_mutex_t reg_mu;
    pthread_cond_t reg_cv;
    struct qws_exchange *reg_head;
    size_t reg_count;
    int reg_closed;                /* draining: no new exchange registers       */
} qws_server;

/* Seconds on CLOCK_MONOTONIC (the clock of qw_request_stats). */
double qws_now(void);

#endif /* QWS_SERVER_H */
