/*
 * exchange.c - qw-serve: the per-HTTP-request record shared with the engine
 * thread (exchange.h has the contract and the lifetime rules).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "exchange.h"

double qws_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *qws_finish_word(qw_finish_reason r) {
    switch (r) {
    case QW_FINISH_STOP: return "stop";
    case QW_FINISH_LENGTH: return "length";
    case QW_FINISH_CANCELLED: return "abort";
    case QW_FINISH_ERROR: return "error";
    case QW_FINISH_TIMEOUT: return "timeout";
    case QW_FINISH_NONE: break;
    }
    return NULL;
}

/* A response id: the prefix, '-', 32 hex digits (random, and a counter so
 * that ids stay distinct even if getrandom fails). */
static void make_id(char *out, size_t cap, const char *prefix) {
    static _Atomic uint64_t counter;
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
        r = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull;
    uint64_t c = atomic_fetch_add(&counter, 1) + 1;
    snprintf(out, cap, "%s-%016llx%016llx", prefix, (unsigned long long)r, (unsigned long long)c);
}

static void free_exchange(qws_exchange *x) {
    for (size_t j = 0; j < x->n_jobs; j++) {
        qws_job *job = &x->jobs[j];
        qw_request_release(job->req);   /* its samples go with it */
        if (job->samples)
            for (uint32_t s = 0; s < job->n; s++) {
                qws_sample *sm = &job->samples[s];
                free(sm->text);
                free(sm->tokens);
                free(sm->text_end);
                free(sm->lp);
                free(sm->top);
                free(sm->n_top);
            }
        free(job->samples);
        free(job->prompt_lp);
        free(job->prompt_top);
        free(job->prompt_n_top);
        free(job->prompt_text);
    }
    free(x->jobs);
    pthread_cond_destroy(&x->cv);
    pthread_mutex_destroy(&x->mu);
    free(x);
}

qws_exchange *qws_exchange_create(qws_server *srv, size_t n_jobs, uint32_t n, int k, int prompt_k,
                                  const char *id_prefix, qws_error *err) {
    qws_exchange *x = calloc(1, sizeof *x);
    if (!x) {
        qws_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&x->mu, NULL);
    /* CLOCK_MONOTONIC for the timed waits: immune to wall-clock jumps */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&x->cv, &ca);
    pthread_condattr_destroy(&ca);
    x->srv = srv;
    x->refs = 1;
    x->created = (long long)time(NULL);
    make_id(x->id, sizeof x->id, id_prefix);
    x->jobs = calloc(n_jobs ? n_jobs : 1, sizeof *x->jobs);
    x->n_jobs = n_jobs;
    int ok = x->jobs != NULL;
    for (size_t j = 0; ok && j < n_jobs; j++) {
        qws_job *job = &x->jobs[j];
        job->x = x;
        job->n = n;
        job->k = k;
        job->prompt_k = prompt_k;
        job->first_prompt_token = -1;
        job->samples = calloc(n, sizeof *job->samples);
        if (!job->samples || qw_request_create(&job->req) != QW_OK) ok = 0;
        for (uint32_t s = 0; ok && s < n; s++) {
            job->samples[s].stop_string = -1;
            job->samples[s].stop_token = -1;
        }
    }
    if (!ok) {
        if (!x->jobs) x->n_jobs = 0;
        free_exchange(x);
        qws_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    pthread_mutex_lock(&srv->reg_mu);
    if (srv->reg_closed || atomic_load(&srv->state) != QWS_STATE_READY) {
        pthread_mutex_unlock(&srv->reg_mu);
        free_exchange(x);
        qws_error_set(err, 503, "server_error", "shutting_down", NULL,
                      "the server is shutting down");
        return NULL;
    }
    x->next = srv->reg_head;
    if (srv->reg_head) srv->reg_head->prev = x;
    srv->reg_head = x;
    srv->reg_count++;
    x->registered = 1;
    pthread_mutex_unlock(&srv->reg_mu);
    return x;
}

/* Drop one reference (x->mu held); 1 when it was the last. */
static int unref_locked(qws_exchange *x) {
    return --x->refs == 0;
}

void qws_exchange_http_done(qws_exchange *x) {
    qws_server *srv = x->srv;
    pthread_mutex_lock(&srv->reg_mu);
    if (x->registered) {
        if (x->prev) x->prev->next = x->next;
        else srv->reg_head = x->next;
        if (x->next) x->next->prev = x->prev;
        x->registered = 0;
        srv->reg_count--;
        pthread_cond_broadcast(&srv->reg_cv);
    }
    pthread_mutex_unlock(&srv->reg_mu);
    pthread_mutex_lock(&x->mu);
    int last = unref_locked(x);
    pthread_mutex_unlock(&x->mu);
    if (last) free_exchange(x);
}

void qws_exchange_cancel(qws_exchange *x) {
    /* Not once-only: a job submitted after an earlier cancel (a request
     * racing the shutdown) is cancelled by the next call. Cancelling a
     * request that finished meanwhile is refused harmlessly; the caller
     * holds a reference, so the requests stay valid. */
    for (size_t j = 0; j < x->n_jobs; j++) {
        pthread_mutex_lock(&x->mu);
        int running = x->jobs[j].submitted && x->jobs[j].n_finished < x->jobs[j].n;
        pthread_mutex_unlock(&x->mu);
        if (running) qw_engine_cancel(x->srv->engine, x->jobs[j].req);
    }
}

void qws_exchange_job_submitting(qws_job *job) {
    pthread_mutex_lock(&job->x->mu);
    job->submitted = 1;
    job->x->refs++;
    pthread_mutex_unlock(&job->x->mu);
}

void qws_exchange_job_unsubmit(qws_job *job) {
    /* the HTTP side still holds its reference: this is never the last */
    pthread_mutex_lock(&job->x->mu);
    job->submitted = 0;
    job->x->refs--;
    pthread_mutex_unlock(&job->x->mu);
}

int qws_exchange_done(const qws_exchange *x) {
    size_t submitted = 0;
    for (size_t j = 0; j < x->n_jobs; j++) submitted += x->jobs[j].submitted != 0;
    return x->jobs_done >= submitted;
}

void qws_exchange_wait(qws_exchange *x, int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&x->cv, &x->mu, &ts);
}

void qws_registry_cancel_all(qws_server *srv) {
    pthread_mutex_lock(&srv->reg_mu);
    for (qws_exchange *x = srv->reg_head; x; x = x->next) qws_exchange_cancel(x);
    pthread_mutex_unlock(&srv->reg_mu);
}

size_t qws_registry_count(qws_server *srv) {
    pthread_mutex_lock(&srv->reg_mu);
    size_t n = srv->reg_count;
    pthread_mutex_unlock(&srv->reg_mu);
    return n;
}

/* Grow the per-token arrays of a sample to hold one more token. */
static int reserve_token(qws_sample *s, int k) {
    if (s->n_tokens < s->tok_cap) return 0;
    size_t cap = s->tok_cap ? s->tok_cap * 2 : 16;
    int32_t *t = realloc(s->tokens, cap * sizeof *t);
    if (!t) return -1;
    s->tokens = t;
    size_t *e = realloc(s->text_end, cap * sizeof *e);
    if (!e) return -1;
    s->text_end = e;
    if (k >= 0) {
        qw_logprob *lp = realloc(s->lp, cap * sizeof *lp);
        if (!lp) return -1;
        s->lp = lp;
        if (k > 0) {
            qw_logprob *top = realloc(s->top, cap * (size_t)k * sizeof *top);
            if (!top) return -1;
            s->top = top;
        }
        uint8_t *nt = realloc(s->n_top, cap);
        if (!nt) return -1;
        s->n_top = nt;
    }
    s->tok_cap = cap;
    return 0;
}

static int append_text(qws_sample *s, const char *p, size_t n) {
    if (!n) return 0;
    if (s->text_len + n + 1 > s->text_cap) {
        size_t cap = s->text_cap ? s->text_cap : 256;
        while (cap < s->text_len + n + 1) cap *= 2;
        char *t = realloc(s->text, cap);
        if (!t) return -1;
        s->text = t;
        s->text_cap = cap;
    }
    memcpy(s->text + s->text_len, p, n);
    s->text_len += n;
    s->text[s->text_len] = '\0';
    return 0;
}

/* Copy the prompt logprobs of a job's request (engine thread, first token
 * of sample 0). On OOM the job simply has none. */
static void copy_prompt_logprobs(qws_job *job, qw_request *req, uint64_t prompt_tokens) {
    if (prompt_tokens < 2 || prompt_tokens > (uint64_t)INT32_MAX) return;
    size_t n = (size_t)prompt_tokens, k = (size_t)job->prompt_k;
    qw_logprob *lp = calloc(n, sizeof *lp);
    qw_logprob *top = k ? calloc(n * k, sizeof *top) : NULL;
    uint8_t *nt = calloc(n, 1);
    if (!lp || (k && !top) || !nt) {
        free(lp);
        free(top);
        free(nt);
        return;
    }
    for (size_t j = 1; j < n; j++) {
        size_t got = 0;
        if (qw_request_get_prompt_logprobs(req, j, &lp[j], k ? &top[j * k] : NULL, k, &got) != QW_OK)
            got = 0, lp[j].token = -1;
        nt[j] = (uint8_t)(got < k ? got : k);
    }
    pthread_mutex_lock(&job->x->mu);
    job->prompt_lp = lp;
    job->prompt_top = top;
    job->prompt_n_top = nt;
    job->n_prompt_lp = n;
    pthread_mutex_unlock(&job->x->mu);
}

void qws_exchange_on_event(qws_server *srv, const qw_event *ev) {
    qws_job *job = ev->user_data;
    if (!job || ev->sample_index >= job->n) return;
    qws_exchange *x = job->x;
    qws_metrics *m = srv->metrics;
    qw_request *req = ev->request;
    int is_token = ev->kind == QW_EVENT_TOKEN;
    qw_finish_reason fin = (qw_finish_reason)ev->finish_reason;

    /* Step-thread getters, read before taking the lock. */
    const char *piece = "";
    size_t plen = 0;
    if (qw_request_get_text_piece(req, &piece, &plen) != QW_OK) {
        piece = "";
        plen = 0;
    }
    qw_logprob lp = {ev->token, 0.0f}, top[QWS_MAX_LOGPROBS];
    size_t ntop = 0;
    if (is_token && job->k >= 0 &&
        qw_request_get_logprobs(req, ev->index, &lp, top, (size_t)job->k, &ntop) != QW_OK) {
        lp.token = ev->token;
        lp.logprob = 0.0f;
        ntop = 0;
    }
    if (ntop > (size_t)job->k) ntop = job->k > 0 ? (size_t)job->k : 0;
    int first = is_token && ev->index == 0;
    qw_request_stats st;
    memset(&st, 0, sizeof st);
    int have_stats = (first || fin != QW_FINISH_NONE) && qw_request_get_stats(req, &st, sizeof st) == QW_OK;
    int32_t stop_string = -1, stop_token = -1;
    if (fin == QW_FINISH_STOP) qw_request_get_stop_match(req, &stop_string, &stop_token);
    if (first && ev->sample_index == 0 && job->prompt_k >= 0 && have_stats)
        copy_prompt_logprobs(job, req, st.prompt_tokens);
    double now = qws_now();

    pthread_mutex_lock(&x->mu);
    qws_sample *s = &job->samples[ev->sample_index];
    double itl = -1;
    int oom = 0;
    if (is_token && !s->oom) {
        if (reserve_token(s, job->k) || append_text(s, piece, plen)) {
            oom = s->oom = 1;
        } else {
            size_t i = s->n_tokens++;
            s->tokens[i] = ev->token;
            s->text_end[i] = s->text_len;
            if (job->k >= 0) {
                s->lp[i] = lp;
                if (ntop) memcpy(&s->top[i * (size_t)job->k], top, ntop * sizeof top[0]);
                s->n_top[i] = (uint8_t)ntop;
            }
            if (i > 0) itl = now - s->last_token_time;
            s->last_token_time = now;
        }
    } else if (!s->oom && append_text(s, piece, plen)) {
        oom = s->oom = 1;
    }
    if (have_stats) {
        s->prompt_tokens = st.prompt_tokens;
        s->cached_tokens = st.cached_prompt_tokens;
    }
    int job_done = 0;
    if (fin != QW_FINISH_NONE && !s->finished) {
        s->finished = 1;
        s->finish = fin;
        s->stop_string = stop_string;
        s->stop_token = stop_token;
        if (++job->n_finished == job->n) {
            x->jobs_done++;
            job_done = 1;
        }
    }
    pthread_cond_broadcast(&x->cv);
    int last = job_done && unref_locked(x);
    pthread_mutex_unlock(&x->mu);

    if (first && have_stats && st.time_to_first_token >= 0)
        qws_metrics_observe(m, QWS_H_TTFT, st.time_to_first_token);
    if (itl >= 0) qws_metrics_observe(m, QWS_H_ITL, itl);
    if (fin != QW_FINISH_NONE && have_stats) {
        qws_metrics_count_finish(m, qws_finish_word(fin));
        if (st.arrival_time > 0) qws_metrics_observe(m, QWS_H_E2E, now - st.arrival_time);
        if (st.queue_time >= 0) {
            qws_metrics_observe(m, QWS_H_QUEUE, st.queue_time);
            if (st.arrival_time > 0)
                qws_metrics_observe(m, QWS_H_INFERENCE, now - st.arrival_time - st.queue_time);
        }
        if (st.time_to_first_token >= 0 && st.queue_time >= 0)
            qws_metrics_observe(m, QWS_H_PREFILL, st.time_to_first_token - st.queue_time);
        if (st.decode_time >= 0) qws_metrics_observe(m, QWS_H_DECODE, st.decode_time);
        qws_metrics_observe(m, QWS_H_PROMPT_TOKENS, (double)st.prompt_tokens);
        qws_metrics_observe(m, QWS_H_GENERATION_TOKENS, (double)st.generated_tokens);
    }
    /* Out of memory copying the output: stop generating what cannot be kept. */
    if (oom && fin == QW_FINISH_NONE) qw_engine_cancel(srv->engine, req);
    if (last) free_exchange(x);
}
