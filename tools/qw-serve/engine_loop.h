/*
 * engine_loop.h - qw-serve: the engine thread (creates the engine, then
 * steps it and routes its events).
 */
#ifndef QWS_ENGINE_LOOP_H
#define QWS_ENGINE_LOOP_H

#include "server.h"

/* Start the engine thread on srv (whose cfg, metrics and main_thread are
 * set). The thread loads the model; on success it publishes the engine
 * facts, sets state READY and prints "qw-serve: ready (model NAME)"; on
 * failure it prints the error on stderr, sets state FAILED and sends
 * SIGUSR1 to srv->main_thread. Returns 0, or -1 when the thread could not
 * be created (message printed). */
int qws_engine_start(qws_server *srv, pthread_t *thread);

/* Stop the engine thread started by qws_engine_start and join it: it steps
 * until the engine has no work left (every request finished: cancel them
 * first) and returns. The engine itself is not destroyed (main does that
 * once no HTTP thread can touch it). */
void qws_engine_stop(qws_server *srv, pthread_t thread);

#endif /* QWS_ENGINE_LOOP_H */
