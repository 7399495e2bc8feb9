/*
 * engine_loop.c - qw-serve: the one thread that owns the engine's step
 * loop.
 *
 *   for (;;) { qw_engine_wait(e, 250 ms); while (qw_engine_has_work(e)) step; }
 *
 * It sleeps in the engine's own wait primitive when idle (a submit or
 * cancel from an HTTP thread wakes it at once); the 250 ms timeout only
 * bounds how long a shutdown request waits to be seen. Every "step thread
 * only" getter of qwinfer.h is called here (qws_exchange_on_event), and
 * the engine-wide gauges and counters go to the metrics after every step.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "engine_loop.h"
#include "exchange.h"

#define QWS_EVENTS_PER_STEP 256

static int load_progress(void *user_data, uint64_t done, uint64_t total) {
    qws_server *srv = user_data;
    return atomic_load(&srv->cancel_load) ? 1 : 0;
}

/* Options from the command line; -1 when one is refused (message printed). */
static int set_options(qws_server *srv, qw_engine_options *o) {
    const qws_config *c = &srv->cfg;
    qw_status st = qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, c->model);
    if (st == QW_OK && c->device) st = qw_engine_options_set_string(o, QW_OPT_DEVICE, c->device);
    struct { qw_engine_option key; long long v; int set; } ints[] = {
        {QW_OPT_NUM_THREADS, c->threads, c->threads >= 0},
        {QW_OPT_MAX_NUM_SEQS, c->max_num_seqs, c->max_num_seqs > 0},
        {QW_OPT_MAX_NUM_BATCHED_TOKENS, c->max_num_batched_tokens, c->max_num_batched_tokens > 0},
        {QW_OPT_MAX_MODEL_LEN, c->max_model_len, c->max_model_len > 0},
        {QW_OPT_BLOCK_SIZE, c->block_size, c->block_size > 0},
        {QW_OPT_KV_CACHE_BYTES, c->kv_cache_bytes, c->kv_cache_bytes > 0},
        {QW_OPT_NUMERICS, c->numerics, c->numerics >= 0},
        {QW_OPT_KV_CACHE_DTYPE, c->kv_cache_dtype, c->kv_cache_dtype >= 0},
        {QW_OPT_SEED, c->seed, c->has_seed},
        {QW_OPT_ENABLE_PREFIX_CACHING, 0, c->no_prefix_caching},
        /* the bounded queue: the engine refuses the submit past it */
        {QW_OPT_MAX_WAITING_REQUESTS, c->max_queue, 1},
    };
    for (size_t i = 0; st == QW_OK && i < sizeof ints / sizeof ints[0]; i++)
        if (ints[i].set) st = qw_engine_options_set_int(o, ints[i].key, ints[i].v);
    if (st == QW_OK) st = qw_engine_options_set_progress(o, load_progress, srv);
    if (st != QW_OK) {
        char msg[512];
        size_t len;
        qw_engine_options_get_error(o, msg, sizeof msg, &len);
        fprintf(stderr, "qw-serve: engine option refused: %s\n", msg);
        return -1;
    }
    return 0;
}

static void fail_load(qws_server *srv) {
    atomic_store(&srv->state, QWS_STATE_FAILED);
    pthread_kill(srv->main_thread, SIGUSR1);
}

static void *engine_main(void *arg) {
    qws_server *srv = arg;
    qw_engine_options *o = NULL;
    if (qw_engine_options_create(&o) != QW_OK) {
        fprintf(stderr, "qw-serve: out of memory\n");
        fail_load(srv);
        return NULL;
    }
    if (set_options(srv, o)) {
        qw_engine_options_destroy(o);
        fail_load(srv);
        return NULL;
    }
    qw_engine *e = NULL;
    qw_status st = qw_engine_create(o, &e);
    qw_engine_options_destroy(o);
    if (st != QW_OK) {
        if (st == QW_ERR_CANCELLED && atomic_load(&srv->cancel_load)) {
            /* SIGTERM while loading: a clean stop, main is shutting down */
            return NULL;
        }
        fprintf(stderr, "qw-serve: cannot load the model from %s: %s: %s\n", srv->cfg.model,
                qw_status_string(st), qw_last_error());
        fail_load(srv);
        return NULL;
    }
    srv->engine = e;
    srv->tok = qw_engine_get_tokenizer(e);
    srv->vocab_size = qw_engine_vocab_size(e);
    srv->max_model_len = qw_engine_max_model_len(e);
    srv->created = (long long)time(NULL);
    qws_metrics_set_max_model_len(srv->metrics, srv->max_model_len);
    qw_engine_stats es;
    memset(&es, 0, sizeof es);
    if (qw_engine_get_stats(e, &es, sizeof es) == QW_OK) qws_metrics_set_engine(srv->metrics, &es);
    uint64_t last_tokens = es.prompt_tokens + es.generation_tokens;
    int expected = QWS_STATE_LOADING;
    /* release: the fields above are visible to whoever sees READY */
    if (!atomic_compare_exchange_strong(&srv->state, &expected, QWS_STATE_READY)) {
        /* SIGTERM arrived after loading finished: nothing was served */
        return NULL;
    }
    printf("qw-serve: ready (model %s)\n", srv->model_name);
    fflush(stdout);

    static qw_event events[QWS_EVENTS_PER_STEP];
    unsigned errors_logged = 0;
    for (;;) {
        int stopping = atomic_load(&srv->stop_engine);
        if (stopping && !qw_engine_has_work(e)) break;
        if (!stopping && !qw_engine_wait(e, 250)) continue;
        while (qw_engine_has_work(e)) {
            size_t n = 0;
            st = qw_engine_step(e, events, QWS_EVENTS_PER_STEP, sizeof events[0], &n);
            if (st != QW_OK && errors_logged < 100) {
                errors_logged++;
                char msg[512];
                size_t len;
                qw_engine_get_error(e, msg, sizeof msg, &len);
                fprintf(stderr, "qw-serve: engine step: %s: %s\n", qw_status_string(st), msg);
            }
            for (size_t i = 0; i < n; i++) qws_exchange_on_event(srv, &events[i]);
            if (qw_engine_get_stats(e, &es, sizeof es) == QW_OK) {
                qws_metrics_set_engine(srv->metrics, &es);
                uint64_t tokens = es.prompt_tokens + es.generation_tokens;
                if (tokens > last_tokens)
                    qws_metrics_observe(srv->metrics, QWS_H_ITERATION_TOKENS,
                                        (double)(tokens - last_tokens));
                last_tokens = tokens;
                atomic_store(&srv->num_waiting, es.num_waiting);
            }
            if (st != QW_OK && n == 0) {
                /* a failing step that delivered nothing: do not spin */
                struct timespec ts = {0, 10 * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
        }
    }
    return NULL;
}

int qws_engine_start(qws_server *srv, pthread_t *thread) {
    int rc = pthread_create(thread, NULL, engine_main, srv);
    if (rc) {
        fprintf(stderr, "qw-serve: cannot start the engine thread: %s\n", strerror(rc));
        return -1;
    }
    return 0;
}

void qws_engine_stop(qws_server *srv, pthread_t thread) {
    atomic_store(&srv->cancel_load, 1);
    atomic_store(&srv->stop_engine, 1);
    pthread_join(thread, NULL);
}
