/*
 * stress_threads.c - the threaded stress of the engine, for ThreadSanitizer
 * (make check-tsan; a short run in make test through tests/check_tsan.sh).
 *
 *   stress_threads MODEL_DIR SECONDS [SEED]
 *
 * While the main thread steps the engine, other threads use everything the
 * header allows from any thread:
 *   - SUBMITTERS threads submit requests with token-id, text and chat
 *     prompts, half of them on one of NSLOTS shared sessions, some with a
 *     deadline, some cancelled right after submit;
 *   - a canceller thread cancels random live requests and reads their state.
 * Between steps the main thread reads the stats, has_work and the free KV
 * blocks, reads the history of shared sessions (qw_session_get_tokens) and
 * forks them while submitters may be submitting on them, submits on the
 * forks itself, destroys forks, and replaces shared sessions whose history
 * grew long (a destroy that may race a submit whose request was already
 * set to that session: the submit must then fail cleanly).
 *
 * At the end (after SECONDS, the threads joined, the engine drained) it
 * checks exact accounting: every submitted request produced exactly one
 * finishing event with a valid reason and no event after it, token indexes
 * ran 0, 1, 2, ... within max tokens, the engine counted as many finished
 * requests as were submitted, every session could be destroyed, and every
 * KV block is free again. Any violation prints "stress: FAIL ..." and exits
 * 1; success prints a summary and exits 0. Thread-safety bugs themselves are
 * ThreadSanitizer's to report (the check script fails on any report).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "qwinfer.h"

#define SUBMITTERS 3
#define NSLOTS 4
#define MAX_FORKS 8
#define MAX_OUTSTANDING 48
#define EVENTS 32

enum { PROMPT_IDS, PROMPT_TEXT, PROMPT_CHAT };

/* One submitted request. Fields above the line are written before submit
 * and only read afterwards; the ones below belong to the step thread. */
typedef struct rec {
    qw_request *req;
    int kind;
    int slot;                 /* shared session slot, -2 fork, -1 none */
    int32_t max_tokens;
    int has_deadline;
    /* ---- step thread ---- */
    int finishes;
    int tokens;
    uint32_t reason;
    int events_after_finish;
} rec;

typedef struct slot {
    pthread_rwlock_t lock;    /* held to set a request's session and to
                                 destroy/replace it: the handle's lifetime */
    qw_session *ses;
    unsigned gen;             /* replacements so far                        */
} slot;

static qw_engine *engine;
static int32_t vocab;
static int32_t max_len;
static slot slots[NSLOTS];
static atomic_int stop_flag;
static atomic_int outstanding;
static atomic_int failures;

/* Registry: live = submitted and not yet released; all = every rec, for
 * the final accounting. */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static rec **live;
static size_t nlive, cap_live;
static rec **all;
static size_t nall, cap_all;

/* Counters of refusals, by the thread that saw them (atomics). */
static atomic_long n_submitted, n_busy, n_dead, n_too_long, n_queue_full, n_cancels_ok,
    n_cancels_late, n_forks, n_fork_busy, n_fork_destroys, n_replaced, n_replace_busy,
    n_get_tokens;

static const char *const texts[] = {
    "The quick brown fox jumps over the lazy dog.",
    "hello there, how are you today?",
    "<think>\nlet me see\n</think>\nanswer: 42",
    "Numbers 123 and 4567, and some punctuation!?",
    "\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c",
    "a",
};
#define NTEXTS (sizeof texts / sizeof texts[0])

static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "stress: FAIL: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    atomic_fetch_add(&failures, 1);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint32_t rnd(uint64_t *s, uint32_t n) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (uint32_t)(*s % n);
}

static void push(rec ***arr, size_t *n, size_t *cap, rec *r) {
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 256;
        rec **na = realloc(*arr, *cap * sizeof *na);
        if (!na) {
            fprintf(stderr, "stress: out of memory\n");
            exit(2);
        }
        *arr = na;
    }
    (*arr)[(*n)++] = r;
}

static void must(qw_status st, const char *what) {
    if (st != QW_OK) fail("%s: %s: %s", what, qw_status_string(st), qw_last_error());
}

/* A request with a random prompt of the given kind and random options;
 * NULL when building it failed (reported). */
static qw_request *make_request(uint64_t *rs, rec *rc) {
    qw_request *r = NULL;
    must(qw_request_create(&r), "qw_request_create");
    if (!r) return NULL;
    rc->kind = (int)rnd(rs, 3);
    if (rc->kind == PROMPT_IDS) {
        int32_t ids[48];
        int n = 1 + (int)rnd(rs, 24), pre = rnd(rs, 3) == 0 ? 20 : 0;
        for (int i = 0; i < pre; i++) ids[i] = (int32_t)((i * 7 + 3) % vocab); /* shared prefix */
        for (int i = pre; i < pre + n; i++) ids[i] = (int32_t)rnd(rs, (uint32_t)vocab);
        must(qw_request_set_prompt(r, ids, (size_t)(pre + n)), "qw_request_set_prompt");
    } else if (rc->kind == PROMPT_TEXT) {
        const char *t = texts[rnd(rs, NTEXTS)];
        must(qw_request_set_prompt_text(r, t, strlen(t)), "qw_request_set_prompt_text");
    } else {
        qw_chat *c = NULL;
        must(qw_chat_create(&c), "qw_chat_create");
        const char *t = texts[rnd(rs, NTEXTS)];
        must(qw_chat_add_message(c, QW_CHAT_USER, t, strlen(t)), "qw_chat_add_message");
        must(qw_request_set_chat(r, c, QW_CHAT_ADD_GENERATION_PROMPT), "qw_request_set_chat");
        qw_chat_destroy(c);
    }
    rc->max_tokens = 1 + (int32_t)rnd(rs, 12);
    must(qw_request_set_int(r, QW_REQ_MAX_TOKENS, rc->max_tokens), "max tokens");
    must(qw_request_set_double(r, QW_REQ_TEMPERATURE, rnd(rs, 2) ? 0.0 : 0.8), "temperature");
    must(qw_request_set_int(r, QW_REQ_SEED, (int64_t)rnd(rs, 1000000)), "seed");
    must(qw_request_set_int(r, QW_REQ_PRIORITY, (int64_t)rnd(rs, 3)), "priority");
    must(qw_request_set_int(r, QW_REQ_IGNORE_EOS, (int64_t)rnd(rs, 2)), "ignore eos");
    if (rnd(rs, 10) == 0) {
        rc->has_deadline = 1;
        must(qw_request_set_int(r, QW_REQ_DEADLINE_MS, 1 + (int64_t)rnd(rs, 5)), "deadline");
    }
    must(qw_request_set_user_data(r, rc), "qw_request_set_user_data");
    return r;
}

static void register_rec(rec *rc) {
    pthread_mutex_lock(&reg_mu);
    push(&live, &nlive, &cap_live, rc);
    push(&all, &nall, &cap_all, rc);
    pthread_mutex_unlock(&reg_mu);
}

/* Submit rc->req; on success register it, else release it. Returns the status. */
static qw_status submit(rec *rc, unsigned gen_at_set) {
    qw_status st = qw_engine_submit(engine, rc->req);
    if (st == QW_OK) {
        atomic_fetch_add(&n_submitted, 1);
        atomic_fetch_add(&outstanding, 1);
        return st;
    }
    switch ((int)st) {   /* int: QW_ERR_QUEUE_FULL is newer than some headers */
    case QW_ERR_SESSION_BUSY: atomic_fetch_add(&n_busy, 1); break;
    case QW_ERR_TOO_LONG: atomic_fetch_add(&n_too_long, 1); break;
    case 15: /* QW_ERR_QUEUE_FULL: back off a little */
        atomic_fetch_add(&n_queue_full, 1);
        usleep(300);
        break;
    case QW_ERR_INVALID_STATE:
        /* Only a session destroyed after the request was set to it. */
        if (rc->slot >= 0) {
            pthread_rwlock_rdlock(&slots[rc->slot].lock);
            unsigned g = slots[rc->slot].gen;
            pthread_rwlock_unlock(&slots[rc->slot].lock);
            if (g != gen_at_set) {
                atomic_fetch_add(&n_dead, 1);
                break;
            }
        }
        /* fall through */
    default:
        fail("qw_engine_submit (slot %d): %s: %s", rc->slot, qw_status_string(st), qw_last_error());
    }
    return st;
}

static void *submitter(void *arg) {
    uint64_t rs = 0x9E3779B97F4A7C15ull * (uint64_t)(uintptr_t)arg + 12345;
    while (!atomic_load(&stop_flag)) {
        if (atomic_load(&outstanding) >= MAX_OUTSTANDING) {
            usleep(200);
            continue;
        }
        rec *rc = calloc(1, sizeof *rc);
        if (!rc) exit(2);
        rc->slot = -1;
        rc->req = make_request(&rs, rc);
        if (!rc->req) {
            free(rc);
            continue;
        }
        unsigned gen = 0;
        if (rnd(&rs, 2)) {
            int s = (int)rnd(&rs, NSLOTS);
            pthread_rwlock_rdlock(&slots[s].lock);
            qw_status st = qw_request_set_session(rc->req, slots[s].ses);
            gen = slots[s].gen;
            pthread_rwlock_unlock(&slots[s].lock);
            if (st != QW_OK) fail("qw_request_set_session: %s: %s", qw_status_string(st), qw_last_error());
            rc->slot = s;
        }
        /* The submit itself may race the step thread destroying the session. */
        if (submit(rc, gen) != QW_OK) {
            qw_request_release(rc->req);
            free(rc);
            continue;
        }
        if (rnd(&rs, 16) == 0) {
            qw_status st = qw_engine_cancel(engine, rc->req);
            if (st == QW_OK) atomic_fetch_add(&n_cancels_ok, 1);
            else if (st == QW_ERR_INVALID_STATE) atomic_fetch_add(&n_cancels_late, 1);
            else fail("qw_engine_cancel after submit: %s", qw_status_string(st));
        }
        register_rec(rc);
    }
    return NULL;
}

static void *canceller(void *arg) {
    uint64_t rs = 0xD1B54A32D192ED03ull;
    (void)arg;
    while (!atomic_load(&stop_flag)) {
        pthread_mutex_lock(&reg_mu);
        if (nlive > 0) {
            rec *rc = live[rnd(&rs, (uint32_t)nlive)];
            qw_request_state s = qw_request_get_state(rc->req);
            if (s != QW_STATE_QUEUED && s != QW_STATE_RUNNING && s != QW_STATE_FINISHED)
                fail("state %d of a submitted request", (int)s);
            qw_status st = qw_engine_cancel(engine, rc->req);
            if (st == QW_OK) atomic_fetch_add(&n_cancels_ok, 1);
            else if (st == QW_ERR_INVALID_STATE) atomic_fetch_add(&n_cancels_late, 1);
            else fail("qw_engine_cancel: %s", qw_status_string(st));
        }
        pthread_mutex_unlock(&reg_mu);
        usleep(1000 + rnd(&rs, 8000));
    }
    return NULL;
}

/* Process one step's events. */
static void on_events(const qw_event *ev, size_t n) {
    for (size_t k = 0; k < n; k++) {
        rec *rc = ev[k].user_data;
        if (!rc || rc->req != ev[k].request) {
            fail("event with user data %p for request %p", ev[k].user_data, (void *)ev[k].request);
            continue;
        }
        if (rc->finishes) rc->events_after_finish++;
        if (ev[k].kind == QW_EVENT_TOKEN) {
            if (ev[k].token < 0 || ev[k].token >= vocab) fail("token %d", ev[k].token);
            if (ev[k].index != (uint32_t)rc->tokens)
                fail("token index %u, expected %d", ev[k].index, rc->tokens);
            rc->tokens++;
            if (rc->kind != PROMPT_IDS) {
                const char *piece;
                size_t len;
                must(qw_request_get_text_piece(ev[k].request, &piece, &len), "qw_request_get_text_piece");
            }
        } else if (ev[k].kind != QW_EVENT_FINISHED) {
            fail("event kind %u", ev[k].kind);
        }
        if (ev[k].finish_reason == QW_FINISH_NONE) continue;
        rc->finishes++;
        rc->reason = ev[k].finish_reason;
        switch (ev[k].finish_reason) {
        case QW_FINISH_STOP:
        case QW_FINISH_CANCELLED: break;
        case QW_FINISH_LENGTH:
            if (rc->tokens != rc->max_tokens && rc->slot == -1)
                fail("length finish after %d of %d tokens", rc->tokens, rc->max_tokens);
            break;
        case QW_FINISH_TIMEOUT:
            if (!rc->has_deadline) fail("timeout finish without a deadline");
            break;
        default: fail("finish reason %u", ev[k].finish_reason);
        }
        if (rc->tokens > rc->max_tokens) fail("%d tokens for max tokens %d", rc->tokens, rc->max_tokens);
        if (qw_request_get_state(rc->req) != QW_STATE_FINISHED) fail("finished request not in FINISHED state");
    }
}

/* Release the finished requests (step thread: after their events). */
static void sweep(void) {
    pthread_mutex_lock(&reg_mu);
    size_t w = 0;
    for (size_t i = 0; i < nlive; i++) {
        rec *rc = live[i];
        if (rc->finishes) {
            must(qw_request_release(rc->req), "qw_request_release");
            rc->req = NULL;
            atomic_fetch_sub(&outstanding, 1);
        } else {
            live[w++] = rc;
        }
    }
    nlive = w;
    pthread_mutex_unlock(&reg_mu);
}

static qw_session *forks[MAX_FORKS];
static int nforks;

/* Session work between steps, on the step thread. */
static void session_ops(uint64_t *rs, int submitting) {
    int s = (int)rnd(rs, NSLOTS);
    /* The history while a submitter may be submitting on the session. */
    int32_t hist[1024];
    size_t n = 0;
    qw_status st = qw_session_get_tokens(slots[s].ses, hist, 1024, &n);
    must(st, "qw_session_get_tokens");
    atomic_fetch_add(&n_get_tokens, 1);
    if (st == QW_OK && n > (size_t)max_len) fail("session history of %zu tokens > max model len %d", n, max_len);

    /* Fork it, racing the same submitters. */
    if (nforks < MAX_FORKS && rnd(rs, 2) == 0) {
        qw_session *f = NULL;
        st = qw_session_fork(slots[rnd(rs, NSLOTS)].ses, &f);
        if (st == QW_OK) {
            forks[nforks++] = f;
            atomic_fetch_add(&n_forks, 1);
        } else if (st == QW_ERR_SESSION_BUSY) {
            atomic_fetch_add(&n_fork_busy, 1);
        } else {
            fail("qw_session_fork: %s: %s", qw_status_string(st), qw_last_error());
        }
    }
    /* A request on a fork, from this thread. */
    if (submitting && nforks > 0 && rnd(rs, 3) == 0) {
        rec *rc = calloc(1, sizeof *rc);
        if (!rc) exit(2);
        rc->slot = -2;
        rc->req = make_request(rs, rc);
        if (rc->req) {
            must(qw_request_set_session(rc->req, forks[rnd(rs, (uint32_t)nforks)]), "set fork session");
            if (submit(rc, 0) == QW_OK) {
                register_rec(rc);
                rc = NULL;
            } else {
                qw_request_release(rc->req);
            }
        }
        free(rc);
    }
    /* Destroy a fork (busy while its request runs). */
    if (nforks > 0 && rnd(rs, 4) == 0) {
        int i = (int)rnd(rs, (uint32_t)nforks);
        st = qw_session_destroy(forks[i]);
        if (st == QW_OK) {
            forks[i] = forks[--nforks];
            atomic_fetch_add(&n_fork_destroys, 1);
        } else if (st != QW_ERR_SESSION_BUSY) {
            fail("qw_session_destroy(fork): %s: %s", qw_status_string(st), qw_last_error());
        }
    }
    /* Replace a shared session whose history grew long, or at random: a
     * submitter may hold a request already set to it. */
    if (n > (size_t)max_len / 2 || rnd(rs, 64) == 0) {
        pthread_rwlock_wrlock(&slots[s].lock);
        st = qw_session_destroy(slots[s].ses);
        if (st == QW_OK) {
            slots[s].ses = NULL;
            must(qw_session_create(engine, &slots[s].ses), "qw_session_create");
            slots[s].gen++;
            atomic_fetch_add(&n_replaced, 1);
        } else if (st == QW_ERR_SESSION_BUSY) {
            atomic_fetch_add(&n_replace_busy, 1);
        } else {
            fail("qw_session_destroy(shared): %s: %s", qw_status_string(st), qw_last_error());
        }
        pthread_rwlock_unlock(&slots[s].lock);
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: stress_threads MODEL_DIR SECONDS [SEED]\n");
        return 2;
    }
    double seconds = atof(argv[2]);
    uint64_t rs = argc > 3 ? strtoull(argv[3], NULL, 10) * 2654435761ull + 1 : 88172645463325252ull;

    qw_engine_options *o = NULL;
    must(qw_engine_options_create(&o), "options");
    must(qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, argv[1]), "model path");
    must(qw_engine_options_set_int(o, QW_OPT_NUM_THREADS, 2), "threads");
    must(qw_engine_options_set_int(o, QW_OPT_NUM_KV_BLOCKS, 64), "kv blocks");
    must(qw_engine_options_set_int(o, QW_OPT_MAX_NUM_SEQS, 16), "max seqs");
    must(qw_engine_options_set_int(o, QW_OPT_MAX_NUM_BATCHED_TOKENS, 128), "budget");
    /* QW_OPT_MAX_WAITING_REQUESTS (18): the bounded queue, where the library
     * has it; QW_ERR_QUEUE_FULL (15) is then one more refusal. */
    (void)qw_engine_options_set_int(o, (qw_engine_option)18, 32);
    qw_status st = qw_engine_create(o, &engine);
    qw_engine_options_destroy(o);
    if (st != QW_OK) {
        fprintf(stderr, "stress: qw_engine_create: %s: %s\n", qw_status_string(st), qw_last_error());
        return 1;
    }
    if (!qw_engine_get_tokenizer(engine)) {
        fprintf(stderr, "stress: the model at %s has no tokenizer (text prompts need one)\n", argv[1]);
        return 1;
    }
    vocab = qw_engine_vocab_size(engine);
    max_len = qw_engine_max_model_len(engine);
    const int32_t total_blocks = qw_engine_num_kv_blocks(engine);
    for (int s = 0; s < NSLOTS; s++) {
        pthread_rwlock_init(&slots[s].lock, NULL);
        must(qw_session_create(engine, &slots[s].ses), "qw_session_create");
    }

    pthread_t th[SUBMITTERS + 1];
    for (int i = 0; i < SUBMITTERS; i++) pthread_create(&th[i], NULL, submitter, (void *)(uintptr_t)(i + 1));
    pthread_create(&th[SUBMITTERS], NULL, canceller, NULL);

    const double t_end = now() + seconds;
    int stopping = 0;
    long steps = 0, drain_steps = 0;
    qw_event ev[EVENTS];
    for (;;) {
        if (!stopping && now() >= t_end) {
            atomic_store(&stop_flag, 1);
            for (int i = 0; i <= SUBMITTERS; i++) pthread_join(th[i], NULL);
            stopping = 1;
        }
        size_t n = 0;
        st = qw_engine_step(engine, ev, EVENTS, sizeof ev[0], &n);
        if (st != QW_OK) fail("qw_engine_step: %s: %s", qw_status_string(st), qw_last_error());
        steps++;
        on_events(ev, n);
        sweep();
        qw_engine_stats es;
        must(qw_engine_get_stats(engine, &es, sizeof es), "qw_engine_get_stats");
        int32_t free_blocks = qw_engine_num_free_kv_blocks(engine);
        if (free_blocks < 0 || free_blocks > total_blocks) fail("%d free of %d blocks", free_blocks, total_blocks);
        int work = qw_engine_has_work(engine);
        session_ops(&rs, !stopping);
        if (stopping) {
            pthread_mutex_lock(&reg_mu);
            size_t left = nlive;
            pthread_mutex_unlock(&reg_mu);
            if (!work && left == 0) break;
            if (++drain_steps > 200000) {
                fail("the engine does not drain: %zu requests left", left);
                break;
            }
        } else if (!work) {
            sched_yield();
        }
        if (atomic_load(&failures) > 20) break;
    }
    if (!stopping) {
        atomic_store(&stop_flag, 1);
        for (int i = 0; i <= SUBMITTERS; i++) pthread_join(th[i], NULL);
    }

    /* ---- accounting ---- */
    long reasons[6] = {0};
    for (size_t i = 0; i < nall; i++) {
        rec *rc = all[i];
        if (rc->finishes != 1) fail("request %zu (slot %d) finished %d times", i, rc->slot, rc->finishes);
        if (rc->events_after_finish) fail("request %zu: %d events after its finish", i, rc->events_after_finish);
        if (rc->reason < 6) reasons[rc->reason]++;
    }
    if ((long)nall != atomic_load(&n_submitted))
        fail("%zu registered requests, %ld submitted", nall, atomic_load(&n_submitted));
    qw_engine_stats es;
    must(qw_engine_get_stats(engine, &es, sizeof es), "qw_engine_get_stats");
    if (es.num_finished != (uint64_t)nall)
        fail("engine counts %llu finished requests, %zu were submitted", (unsigned long long)es.num_finished, nall);
    if (es.num_running + es.num_waiting != 0)
        fail("%llu running and %llu waiting after the drain", (unsigned long long)es.num_running,
             (unsigned long long)es.num_waiting);
    for (int s = 0; s < NSLOTS; s++) {
        must(qw_session_destroy(slots[s].ses), "qw_session_destroy at the end");
        pthread_rwlock_destroy(&slots[s].lock);
    }
    for (int i = 0; i < nforks; i++) must(qw_session_destroy(forks[i]), "qw_session_destroy(fork) at the end");
    int32_t free_blocks = qw_engine_num_free_kv_blocks(engine);
    if (free_blocks != total_blocks) fail("%d of %d KV blocks free after every session was destroyed", free_blocks, total_blocks);
    must(qw_engine_get_stats(engine, &es, sizeof es), "qw_engine_get_stats");
    if (es.kv_blocks_used != 0) fail("%llu KV blocks still used", (unsigned long long)es.kv_blocks_used);
    qw_engine_destroy(engine);
    for (size_t i = 0; i < nall; i++) free(all[i]);
    free(all);
    free(live);

    printf("stress: %.0fs, %ld steps, %zu requests (stop %ld, length %ld, cancelled %ld, timeout %ld); "
           "refused: %ld busy, %ld destroyed session, %ld too long, %ld queue full; cancels %ld (+%ld late); "
           "forks %ld (%ld busy, %ld destroyed); sessions replaced %ld (%ld busy); %ld history reads\n",
           seconds, steps, nall, reasons[QW_FINISH_STOP], reasons[QW_FINISH_LENGTH],
           reasons[QW_FINISH_CANCELLED], reasons[QW_FINISH_TIMEOUT], atomic_load(&n_busy),
           atomic_load(&n_dead), atomic_load(&n_too_long), atomic_load(&n_queue_full),
           atomic_load(&n_cancels_ok), atomic_load(&n_cancels_late), atomic_load(&n_forks),
           atomic_load(&n_fork_busy), atomic_load(&n_fork_destroys), atomic_load(&n_replaced),
           atomic_load(&n_replace_busy), atomic_load(&n_get_tokens));
    if (atomic_load(&failures)) {
        printf("stress: %d failures\n", atomic_load(&failures));
        return 1;
    }
    if (nall == 0) {
        printf("stress: FAIL: no request was submitted\n");
        return 1;
    }
    printf("stress: ok\n");
    return 0;
}
