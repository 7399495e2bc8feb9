/*
 * exchange.h - qw-serve: the record one HTTP request shares with the engine
 * thread.
 *
 * An exchange holds one job per prompt (a completions batch has several;
 * chat and TGI have one), each job one qw_request with n samples. The
 * engine thread appends what each event brings (tokens, text pieces,
 * logprobs, finish reason, stats) under the exchange's mutex and
 * broadcasts its condition variable; the HTTP thread waits on it and
 * formats responses from the copies, so no "step thread only" getter is
 * ever called outside the engine thread.
 *
 * Lifetime: reference counted. The HTTP side holds one reference from
 * qws_exchange_create until qws_exchange_http_done; each submitted job holds
 * one until its last sample finished (the engine thread drops it). The last
 * drop releases every qw_request (exactly once) and frees the exchange.
 * While the HTTP side holds its reference the exchange is in the server's
 * registry, which the graceful shutdown walks to count and cancel work.
 */
#ifndef QWS_EXCHANGE_H
#define QWS_EXCHANGE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "params.h"
#include "qwinfer.h"
#include "server.h"

/* What the engine produced for one sample (one choice). */
typedef struct qws_sample {
    char *text;                /* every text piece so far, concatenated      */
    size_t text_len, text_cap;
    int32_t *tokens;           /* generated ids                              */
    size_t *text_end;          /* text_len right after token i's piece       */
    qw_logprob *lp;            /* token i's own logprob (logprobs >= 0)      */
    qw_logprob *top;           /* token i's alternatives: top[i * k ...]     */
    uint8_t *n_top;            /* how many of them token i has               */
    size_t n_tokens, tok_cap;
    int finished;
    qw_finish_reason finish;
    int32_t stop_string, stop_token; /* qw_request_get_stop_match            */
    uint64_t prompt_tokens, cached_tokens; /* from the stats, at first token and finish */
    double last_token_time;    /* for the inter-token latency histogram       */
    int oom;                   /* a copy failed: the sample is cut short      */
} qws_sample;

typedef struct qws_job {
    struct qws_exchange *x;
    qw_request *req;           /* owned: released when the exchange is freed */
    uint32_t n;                /* samples                                    */
    uint32_t n_finished;
    int submitted;
    int k;                     /* logprobs alternatives, -1 = no logprobs    */
    int prompt_k;              /* prompt logprobs alternatives, -1 = off     */
    qws_sample *samples;       /* [n]                                        */
    /* prompt logprobs (prompt_k >= 0), copied at the first token event:
     * entry j for prompt token j (j >= 1; entry 0 unused) */
    size_t n_prompt_lp;
    qw_logprob *prompt_lp;
    qw_logprob *prompt_top;    /* [n_prompt_lp * prompt_k]                   */
    uint8_t *prompt_n_top;
    int32_t first_prompt_token; /* TGI prefill details; -1 when unknown      */
    char *prompt_text;         /* echo / TGI return_full_text; owned, may be NULL */
    size_t prompt_text_len;
} qws_job;

typedef struct qws_exchange {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;                  /* under mu                                   */
    qws_server *srv;
    size_t n_jobs;
    qws_job *jobs;
    size_t jobs_done;          /* jobs whose every sample finished           */
    int degraded;              /* max_tokens was capped (X-Qwinfer-Degraded) */
    long long created;         /* Unix time of the request                   */
    char id[48];               /* "cmpl-..." / "chatcmpl-..."                */
    struct qws_exchange *prev, *next; /* registry, under srv->reg_mu         */
    int registered;
} qws_exchange;

/* Create an exchange of n_jobs jobs (each with a fresh qw_request, n samples
 * and k / prompt_k logprobs) for the HTTP thread, registered in srv's
 * registry. id_prefix starts the response id ("cmpl", "chatcmpl").
 * Returns NULL with *err set: 503 "shutting_down" once the server drains,
 * 500 on OOM. */
qws_exchange *qws_exchange_create(qws_server *srv, size_t n_jobs, uint32_t n, int k, int prompt_k,
                                  const char *id_prefix, qws_error *err);

/* The HTTP side is done: leave the registry and drop its reference (frees
 * the exchange when no job runs any more). Call once, without holding mu. */
void qws_exchange_http_done(qws_exchange *x);

/* Ask the engine to cancel every submitted job not finished yet (any
 * thread, without holding mu; the caller holds a reference or the
 * registry lock). Harmless to repeat. */
void qws_exchange_cancel(qws_exchange *x);

/* The job is about to be submitted: it takes the reference its samples
 * drop when they finish. Call BEFORE qw_engine_submit (the engine thread
 * may finish the job before qw_engine_submit even returns), and
 * qws_exchange_job_unsubmit when the submit fails. */
void qws_exchange_job_submitting(qws_job *job);
void qws_exchange_job_unsubmit(qws_job *job);

/* Engine thread only: copy what event ev brings into its job (found through
 * ev->user_data), observe the latency and length metrics, wake the waiter,
 * and drop the job's reference when its last sample finished. */
void qws_exchange_on_event(qws_server *srv, const qw_event *ev);

/* Wait on x->cv (x->mu held) at most ms milliseconds. */
void qws_exchange_wait(qws_exchange *x, int ms);

/* 1 when every submitted job finished (x->mu held). */
int qws_exchange_done(const qws_exchange *x);

/* Registry (srv->reg_mu): cancel every registered exchange; number still
 * registered. */
void qws_registry_cancel_all(qws_server *srv);
size_t qws_registry_count(qws_server *srv);

/* The word a finish reason has in the APIs and in the metrics:
 * "stop", "length", "abort" (cancelled or disconnected), "error",
 * "timeout"; NULL while not finished. */
const char *qws_finish_word(qw_finish_reason r);

#endif /* QWS_EXCHANGE_H */
