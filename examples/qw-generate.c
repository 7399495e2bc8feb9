/*
 * qw-generate.c - run N concurrent generations through one engine and
 * report throughput. Written against the public header only.
 *
 *   qw-generate --model DIR [--device cpu] [--threads N]
 *               [--prompt TEXT [--chat [--no-think | --think]] | --prompt-ids 1,2,3]
 *               [--num-requests N] [--max-tokens N] [--temperature T]
 *               [--top-k K] [--top-p P] [--min-p P] [--seed S]
 *               [--max-num-seqs N] [--max-batched-tokens N] [--kv-blocks N]
 *               [--shared-prefix N] [--session-turns N] [--quiet]
 *
 * Without --prompt-ids, request i gets a deterministic pseudo-random prompt
 * of 8 + 3*i tokens, so the requests differ in length and content; with
 * --shared-prefix N they all start with the same N tokens (a "system
 * prompt"), which the prefix cache serves after the first. --session-turns N
 * then runs an N-turn conversation on one qw_session and shows that each turn
 * prefills only its new tokens. The engine's statistics close the run.
 *
 * --prompt TEXT sends text (the model directory must have a tokenizer);
 * with --chat it is a user message rendered with Qwen3's chat template,
 * which lets the model think first, as Qwen3's official template does,
 * unless --no-think (--think says the default explicitly). When the model has a
 * tokenizer, the output is printed as text: streamed as it is generated for
 * one request, one line per token event ("[req i] piece") for several, and
 * each request's whole text in the summary.
 */
#define _POSIX_C_SOURCE 200809L   /* clock_gettime under plain -std=c11 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qwinfer.h"

typedef struct args {
    const char *model, *device, *prompt_ids, *prompt;
    long threads, num_requests, max_tokens, top_k, max_num_seqs, max_batched, kv_blocks;
    long shared_prefix, session_turns;
    long long seed;
    double temperature, top_p, min_p;
    int quiet, chat, think, no_think;
} args;

static void usage(FILE *f) {
    fprintf(f,
            "usage: qw-generate --model DIR [--device cpu] [--threads N]\n"
            "                   [--prompt TEXT [--chat [--no-think | --think]] | --prompt-ids 1,2,3]\n"
            "                   [--num-requests N] [--max-tokens N] [--temperature T]\n"
            "                   [--top-k K] [--top-p P] [--min-p P] [--seed S]\n"
            "                   [--max-num-seqs N] [--max-batched-tokens N] [--kv-blocks N]\n"
            "                   [--shared-prefix N] [--session-turns N] [--quiet]\n");
}

static int parse_long(const char *flag, const char *s, long long lo, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo) {
        fprintf(stderr, "qw-generate: %s: bad value '%s'\n", flag, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_double(const char *flag, const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end) {
        fprintf(stderr, "qw-generate: %s: bad value '%s'\n", flag, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* 0 on success, -1 on a bad command line (message printed). */
static int parse_args(int argc, char **argv, args *a) {
    *a = (args){.device = "cpu", .threads = -1, .num_requests = 1, .max_tokens = 32,
                .temperature = 1.0, .top_p = 1.0, .seed = -1, .max_num_seqs = -1,
                .max_batched = -1, .kv_blocks = -1};
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--quiet") || !strcmp(f, "--chat") || !strcmp(f, "--think") || !strcmp(f, "--no-think")) {
            *(f[2] == 'q' ? &a->quiet : f[2] == 'c' ? &a->chat : f[2] == 't' ? &a->think : &a->no_think) = 1;
            continue;
        }
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            usage(stdout);
            exit(0);
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "qw-generate: %s needs a value\n", f);
            return -1;
        }
        const char *v = argv[++i];
        long long n;
        long *dst = NULL;
        long long lo = 0;
        if (!strcmp(f, "--model")) a->model = v;
        else if (!strcmp(f, "--device")) a->device = v;
        else if (!strcmp(f, "--prompt-ids")) a->prompt_ids = v;
        else if (!strcmp(f, "--prompt")) a->prompt = v;
        else if (!strcmp(f, "--threads")) dst = &a->threads;
        else if (!strcmp(f, "--num-requests")) dst = &a->num_requests, lo = 1;
        else if (!strcmp(f, "--max-tokens")) dst = &a->max_tokens, lo = 1;
        else if (!strcmp(f, "--top-k")) dst = &a->top_k, lo = -1;
        else if (!strcmp(f, "--max-num-seqs")) dst = &a->max_num_seqs, lo = 1;
        else if (!strcmp(f, "--max-batched-tokens")) dst = &a->max_batched, lo = 1;
        else if (!strcmp(f, "--kv-blocks")) dst = &a->kv_blocks, lo = 1;
        else if (!strcmp(f, "--shared-prefix")) dst = &a->shared_prefix;
        else if (!strcmp(f, "--session-turns")) dst = &a->session_turns;
        else if (!strcmp(f, "--seed")) {
            if (parse_long(f, v, 0, &a->seed)) return -1;
        } else if (!strcmp(f, "--temperature")) {
            if (parse_double(f, v, &a->temperature)) return -1;
        } else if (!strcmp(f, "--top-p")) {
            if (parse_double(f, v, &a->top_p)) return -1;
        } else if (!strcmp(f, "--min-p")) {
            if (parse_double(f, v, &a->min_p)) return -1;
        } else {
            fprintf(stderr, "qw-generate: unknown option %s\n", f);
            usage(stderr);
            return -1;
        }
        if (dst) {
            if (parse_long(f, v, lo, &n)) return -1;
            *dst = (long)n;
        }
    }
    if (!a->model) {
        fprintf(stderr, "qw-generate: --model is required\n");
        usage(stderr);
        return -1;
    }
    if (a->prompt && a->prompt_ids) {
        fprintf(stderr, "qw-generate: give --prompt or --prompt-ids, not both\n");
        return -1;
    }
    if ((a->chat || a->think || a->no_think) && !a->prompt) {
        fprintf(stderr, "qw-generate: --chat, --think and --no-think need --prompt TEXT\n");
        return -1;
    }
    if ((a->think || a->no_think) && !a->chat) {
        fprintf(stderr, "qw-generate: --think and --no-think need --chat\n");
        return -1;
    }
    if (a->think && a->no_think) {
        fprintf(stderr, "qw-generate: give --think or --no-think, not both\n");
        return -1;
    }
    return 0;
}

/* Parse "1,2,3" into a malloc'd array; NULL (message printed) if malformed. */
static int32_t *parse_ids(const char *s, size_t *n_out) {
    size_t cap = 1;
    for (const char *c = s; *c; c++) cap += *c == ',';
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return NULL;
    size_t n = 0;
    const char *c = s;
    for (;;) {
        char *end;
        errno = 0;
        long v = strtol(c, &end, 10);
        if (errno || end == c || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "qw-generate: --prompt-ids: bad list '%s'\n", s);
            free(ids);
            return NULL;
        }
        ids[n++] = (int32_t)v;
        if (!*end) break;
        c = end + 1;
    }
    *n_out = n;
    return ids;
}

/* splitmix64: a fixed prompt generator, so runs are repeatable */
static uint64_t next_rand(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static const char *finish_name(qw_finish_reason r) {
    switch (r) {
    case QW_FINISH_NONE: return "none";
    case QW_FINISH_STOP: return "stop";
    case QW_FINISH_LENGTH: return "length";
    case QW_FINISH_CANCELLED: return "cancelled";
    case QW_FINISH_ERROR: return "error";
    case QW_FINISH_TIMEOUT: return "timeout";
    }
    return "unknown";
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Print an API failure; the caller then cleans up and exits 1. */
static int api_fail(const char *what, qw_status st) {
    fprintf(stderr, "qw-generate: %s: %s: %s\n", what, qw_status_string(st), qw_last_error());
    return 1;
}

static qw_status make_engine(const args *a, qw_engine **out) {
    qw_engine_options *o;
    qw_status st = qw_engine_options_create(&o);
    if (st != QW_OK) return st;
    st = qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, a->model);
    if (st == QW_OK) st = qw_engine_options_set_string(o, QW_OPT_DEVICE, a->device);
    if (st == QW_OK && a->threads >= 0) st = qw_engine_options_set_int(o, QW_OPT_NUM_THREADS, a->threads);
    if (st == QW_OK && a->max_num_seqs > 0)
        st = qw_engine_options_set_int(o, QW_OPT_MAX_NUM_SEQS, a->max_num_seqs);
    if (st == QW_OK && a->max_batched > 0)
        st = qw_engine_options_set_int(o, QW_OPT_MAX_NUM_BATCHED_TOKENS, a->max_batched);
    if (st == QW_OK && a->kv_blocks > 0)
        st = qw_engine_options_set_int(o, QW_OPT_NUM_KV_BLOCKS, a->kv_blocks);
    if (st == QW_OK && a->seed >= 0) st = qw_engine_options_set_int(o, QW_OPT_SEED, a->seed);
    if (st == QW_OK) st = qw_engine_create(o, out);
    qw_engine_options_destroy(o);
    return st;
}

/* Create request i with its prompt and sampling options; index i is its
 * user data, so events map back to it without a lookup. */
static qw_status make_request(const args *a, long i, const int32_t *ids, size_t n_ids,
                              int32_t vocab, qw_request **out, size_t *prompt_len) {
    qw_request *r;
    qw_status st = qw_request_create(&r);
    if (st != QW_OK) return st;
    *out = r;
    int32_t *own = NULL;
    if (a->prompt) {
        /* text: encoded at submit with the model's tokenizer */
        if (a->chat) {
            qw_chat *chat;
            st = qw_chat_create(&chat);
            if (st == QW_OK) st = qw_chat_add_message(chat, QW_CHAT_USER, a->prompt, strlen(a->prompt));
            if (st == QW_OK)
                st = qw_request_set_chat(r, chat, QW_CHAT_ADD_GENERATION_PROMPT |
                                                      (a->think ? QW_CHAT_ENABLE_THINKING : 0) |
                                                      (a->no_think ? QW_CHAT_DISABLE_THINKING : 0));
            qw_chat_destroy(chat);
        } else {
            st = qw_request_set_prompt_text(r, a->prompt, strlen(a->prompt));
        }
        if (st != QW_OK) return st;
        n_ids = 0;   /* known after submit: see qw_request_get_stats */
    } else if (!ids) {
        size_t shared = (size_t)a->shared_prefix;
        n_ids = shared + 8 + 3 * (size_t)i;
        own = malloc(n_ids * sizeof *own);
        if (!own) return QW_ERR_OUT_OF_MEMORY;
        uint64_t s = 0x5A4EDull;
        for (size_t k = 0; k < shared; k++) own[k] = (int32_t)(next_rand(&s) % (uint64_t)vocab);
        s = 0x51D5EEDull + (uint64_t)i;
        for (size_t k = shared; k < n_ids; k++) own[k] = (int32_t)(next_rand(&s) % (uint64_t)vocab);
        ids = own;
    }
    *prompt_len = n_ids;
    if (!a->prompt) st = qw_request_set_prompt(r, ids, n_ids);
    free(own);
    if (st == QW_OK) st = qw_request_set_int(r, QW_REQ_MAX_TOKENS, a->max_tokens);
    if (st == QW_OK) st = qw_request_set_double(r, QW_REQ_TEMPERATURE, a->temperature);
    if (st == QW_OK && a->top_k) st = qw_request_set_int(r, QW_REQ_TOP_K, a->top_k);
    if (st == QW_OK && a->top_p != 1.0) st = qw_request_set_double(r, QW_REQ_TOP_P, a->top_p);
    if (st == QW_OK && a->min_p != 0.0) st = qw_request_set_double(r, QW_REQ_MIN_P, a->min_p);
    /* distinct seeds per request, derived from --seed so runs repeat */
    if (st == QW_OK && a->seed >= 0) st = qw_request_set_int(r, QW_REQ_SEED, a->seed + i);
    if (st == QW_OK) st = qw_request_set_user_data(r, (void *)(intptr_t)i);
    return st;
}

/* Step until the engine is idle; prints nothing. */
static qw_status drain(qw_engine *engine, qw_event *ev, size_t cap) {
    size_t n;
    while (qw_engine_has_work(engine)) {
        qw_status st = qw_engine_step(engine, ev, cap, sizeof ev[0], &n);
        if (st != QW_OK) return st;
    }
    return QW_OK;
}

/* A multi-turn conversation on one session: each turn sends 8 new tokens
 * and the report shows how many prompt tokens the session's KV served. */
static int run_session(const args *a, qw_engine *engine, int32_t vocab, qw_event *ev, size_t cap) {
    qw_session *ses;
    qw_status st = qw_session_create(engine, &ses);
    if (st != QW_OK) return api_fail("create session", st);
    printf("session: %ld turns of 8 new tokens, %ld generated each\n", a->session_turns, a->max_tokens);
    uint64_t s = 0xC4A7ull;
    int rc = 0;
    for (long t = 0; t < a->session_turns && rc == 0; t++) {
        int32_t prompt[8];
        for (int k = 0; k < 8; k++) prompt[k] = (int32_t)(next_rand(&s) % (uint64_t)vocab);
        qw_request *r;
        if ((st = qw_request_create(&r)) != QW_OK) return api_fail("request", st);
        qw_request_set_prompt(r, prompt, 8);
        qw_request_set_int(r, QW_REQ_MAX_TOKENS, a->max_tokens);
        qw_request_set_double(r, QW_REQ_TEMPERATURE, a->temperature);
        qw_request_set_session(r, ses);
        st = qw_engine_submit(engine, r);
        if (st == QW_OK) st = drain(engine, ev, cap);
        if (st != QW_OK) {
            rc = api_fail("session turn", st);
        } else {
            qw_request_stats rs;
            qw_request_get_stats(r, &rs, sizeof rs);
            printf("  turn %ld: context %llu tokens, %llu from the session's KV, %llu generated, ttft %.2f ms\n",
                   t + 1, (unsigned long long)rs.prompt_tokens, (unsigned long long)rs.cached_prompt_tokens,
                   (unsigned long long)rs.generated_tokens, rs.time_to_first_token * 1e3);
        }
        qw_request_release(r);
    }
    qw_session_destroy(ses);
    return rc;
}

/* The whole generated text of a request (special tokens skipped). */
static int print_text(const qw_tokenizer *tok, const qw_request *r, size_t n) {
    int32_t *ids = malloc(n * sizeof *ids);
    size_t len = 0;
    qw_status st = ids ? qw_request_get_tokens(r, ids, n, &n) : QW_ERR_OUT_OF_MEMORY;
    if (st == QW_OK) st = qw_tokenizer_decode(tok, ids, n, 1, NULL, 0, &len);
    char *text = st == QW_OK ? malloc(len + 1) : NULL;
    if (st == QW_OK && !text) st = QW_ERR_OUT_OF_MEMORY;
    if (st == QW_OK) st = qw_tokenizer_decode(tok, ids, n, 1, text, len + 1, &len);
    if (st == QW_OK) printf("    text: \"%s\"\n", text);
    free(ids);
    free(text);
    return st == QW_OK ? 0 : api_fail("decode", st);
}

static void print_stats(const qw_engine *engine) {
    qw_engine_stats st;
    if (qw_engine_get_stats(engine, &st, sizeof st) != QW_OK) return;
    double hit = st.prefix_cache_queries ? 100.0 * (double)st.prefix_cache_hits / (double)st.prefix_cache_queries : 0;
    printf("engine: %llu steps, mean batch %.1f, %llu prompt tokens prefilled, %llu generated, %llu preemptions\n",
           (unsigned long long)st.num_steps, st.mean_batch_size, (unsigned long long)st.prompt_tokens,
           (unsigned long long)st.generation_tokens, (unsigned long long)st.num_preemptions);
    printf("prefix cache: %llu of %llu looked-up tokens hit (%.1f%%); KV blocks %llu total, %llu cached-free\n",
           (unsigned long long)st.prefix_cache_hits, (unsigned long long)st.prefix_cache_queries, hit,
           (unsigned long long)st.kv_blocks_total, (unsigned long long)st.kv_blocks_cached_free);
    printf("time: forward %.3f s, host %.3f s\n", st.forward_seconds, st.host_seconds);
}

int main(int argc, char **argv) {
    args a;
    if (parse_args(argc, argv, &a)) return 1;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (a.prompt_ids && !(ids = parse_ids(a.prompt_ids, &n_ids))) return 1;

    int rc = 0;
    qw_engine *engine = NULL;
    qw_request **reqs = calloc((size_t)a.num_requests, sizeof *reqs);
    enum { EVENT_CAP = 256 };
    qw_event *ev = malloc(EVENT_CAP * sizeof *ev);
    if (!reqs || !ev) {
        fprintf(stderr, "qw-generate: out of memory\n");
        rc = 1;
        goto done;
    }
    qw_status st = make_engine(&a, &engine);
    if (st != QW_OK) {
        rc = api_fail("create engine", st);
        goto done;
    }
    int32_t vocab = qw_engine_vocab_size(engine);

    size_t prompt_tokens = 0;
    double t0 = now_s();
    for (long i = 0; i < a.num_requests; i++) {
        size_t len = 0;
        st = make_request(&a, i, ids, n_ids, vocab, &reqs[i], &len);
        if (st == QW_OK) st = qw_engine_submit(engine, reqs[i]);
        if (st != QW_OK) {
            char what[64];
            snprintf(what, sizeof what, "request %ld", i);
            rc = api_fail(what, st);
            goto done;
        }
        if (a.prompt) {
            qw_request_stats rs;
            if (qw_request_get_stats(reqs[i], &rs, sizeof rs) == QW_OK) len = (size_t)rs.prompt_tokens;
        }
        prompt_tokens += len;
    }
    const qw_tokenizer *tok = qw_engine_get_tokenizer(engine);

    size_t generated = 0, steps = 0;
    while (qw_engine_has_work(engine)) {
        size_t n = 0;
        st = qw_engine_step(engine, ev, EVENT_CAP, sizeof ev[0], &n);
        if (st != QW_OK) {
            rc = api_fail("step", st);
            goto done;
        }
        steps++;
        for (size_t k = 0; k < n; k++) {
            long i = (long)(intptr_t)ev[k].user_data;
            if (ev[k].kind == QW_EVENT_TOKEN) generated++;
            if (a.quiet) continue;
            const char *piece;
            size_t plen;
            if (tok && qw_request_get_text_piece(ev[k].request, &piece, &plen) == QW_OK) {
                /* text: streamed as is for one request, one line per event for several */
                if (a.num_requests == 1) {
                    fwrite(piece, 1, plen, stdout);
                    if (ev[k].finish_reason)
                        printf("\n[%s]\n", finish_name((qw_finish_reason)ev[k].finish_reason));
                    fflush(stdout);
                } else {
                    printf("[req %ld] \"%.*s\"%s%s\n", i, (int)plen, piece, ev[k].finish_reason ? " " : "",
                           ev[k].finish_reason ? finish_name((qw_finish_reason)ev[k].finish_reason) : "");
                }
                continue;
            }
            if (ev[k].kind == QW_EVENT_TOKEN)
                printf("[req %ld] %d%s%s\n", i, (int)ev[k].token, ev[k].finish_reason ? " " : "",
                       ev[k].finish_reason ? finish_name((qw_finish_reason)ev[k].finish_reason) : "");
            else
                printf("[req %ld] finished: %s\n", i,
                       finish_name((qw_finish_reason)ev[k].finish_reason));
        }
    }
    double wall = now_s() - t0;

    printf("requests:          %ld\n", a.num_requests);
    printf("prompt tokens:     %zu\n", prompt_tokens);
    printf("generated tokens:  %zu\n", generated);
    printf("steps:             %zu\n", steps);
    printf("wall seconds:      %.3f\n", wall);
    printf("generated tok/s:   %.1f\n", wall > 0 ? (double)generated / wall : 0.0);
    for (long i = 0; i < a.num_requests; i++) {
        size_t n = 0;
        st = qw_request_get_tokens(reqs[i], NULL, 0, &n);
        if (st != QW_OK) {
            rc = api_fail("get tokens", st);
            goto done;
        }
        printf("  req %ld: %zu tokens, finish %s\n", i, n,
               finish_name(qw_request_get_finish_reason(reqs[i])));
        if (tok && n > 0 && (rc = print_text(tok, reqs[i], n)) != 0) goto done;
    }

    if (a.session_turns > 0 && (rc = run_session(&a, engine, vocab, ev, EVENT_CAP)) != 0) goto done;
    print_stats(engine);

done:
    /* the engine first: it may still hold references to the requests */
    qw_engine_destroy(engine);
    if (reqs)
        for (long i = 0; i < a.num_requests; i++) qw_request_release(reqs[i]);
    free(reqs);
    free(ev);
    free(ids);
    return rc;
}
