/*
 * reply_parser.c - qw-serve: streaming split of a Qwen3 chat reply into
 * reasoning, content and Hermes-style tool calls (semantics: reply_parser.h).
 *
 * The parser appends each feed to a pending buffer and releases from its
 * front everything whose role is already decided; what stays pending is
 * only text whose role the next bytes can still change: a possible prefix
 * of a tag, the newlines that would be dropped if a tag follows, a
 * whitespace run after a tool call, an open <tool_call> block. Because each
 * decision looks only at the text itself, never at where feeds were cut,
 * any split of a reply releases the same joined output as one feed.
 */
#include "reply_parser.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

static const char THINK_OPEN[] = "<think>";
static const char THINK_CLOSE[] = "</think>";
static const char CALL_OPEN[] = "<tool_call>";
static const char CALL_CLOSE[] = "</tool_call>";
#define LIT_LEN(s) (sizeof(s) - 1)

enum phase {
    P_START,      /* split_reasoning, nothing decided: is there a <think>? */
    P_REASON,     /* before </think>                                       */
    P_AFTER_END,  /* right after </think>: dropping newlines               */
    P_CONTENT
};

typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

struct qws_reply_parser {
    int split, tools;
    enum phase phase;
    int drop_nl;          /* P_REASON: still dropping newlines after <think> */
    int finished;
    int broken;           /* an allocation failed: only destroy is allowed    */
    buf pend;             /* fed, not yet released                            */
    buf reasoning, content; /* released by the current call                   */
    qws_tool_call *calls; /* released by the current call (owned strings)     */
    size_t n_calls, cap_calls;
    int inside;           /* pend holds an open <tool_call> block ...          */
    size_t block_at;      /* ... starting here (after ws_pre whitespace)       */
    size_t scan;          /* where to look for </tool_call> next               */
    int after_call;       /* the last content item was a tool call             */
    uint64_t rng;         /* fallback id generator state                       */
};

/* ---- small helpers ------------------------------------------------------ */

static int buf_put(buf *b, const char *s, size_t n) {
    if (n == 0) return 0;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

/* Drop the first n bytes of pend. */
static void pend_consume(qws_reply_parser *p, size_t n) {
    if (n == 0) return;   /* pend.p may still be NULL */
    memmove(p->pend.p, p->pend.p + n, p->pend.len - n);
    p->pend.len -= n;
    p->pend.p[p->pend.len] = '\0';
}

static const char *find(const char *hay, size_t n, const char *needle, size_t m) {
    if (m == 0 || n < m) return NULL;
    return memmem(hay, n, needle, m);
}

/* The length of the longest suffix of s[0..n) that is a proper prefix of
 * tag (a tag that the next bytes may complete). */
static size_t tag_prefix_suffix(const char *s, size_t n, const char *tag, size_t m) {
    size_t k = n < m - 1 ? n : m - 1;
    for (; k > 0; k--)
        if (memcmp(s + n - k, tag, k) == 0) return k;
    return 0;
}

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

static void free_calls(qws_reply_parser *p) {
    for (size_t i = 0; i < p->n_calls; i++) {
        free((char *)p->calls[i].name);
        free((char *)p->calls[i].arguments);
    }
    p->n_calls = 0;
}

/* "call_" + 24 alphanumerics. getrandom is the source; if the kernel
 * refuses, a splitmix64 stream seeded from the clock keeps ids distinct
 * (they need to be unique within a reply, not secret). */
static void make_id(qws_reply_parser *p, char id[40]) {
    static const char ALNUM[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    unsigned char r[24];
    if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        for (size_t i = 0; i < sizeof r; i++) {
            uint64_t z = (p->rng += 0x9E3779B97F4A7C15ULL);
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
            r[i] = (unsigned char)(z ^ (z >> 31));
        }
    }
    memcpy(id, "call_", 5);
    for (size_t i = 0; i < sizeof r; i++) id[5 + i] = ALNUM[r[i] % (sizeof ALNUM - 1)];
    id[5 + sizeof r] = '\0';
}

/* Parse a tool-call body; on success append the call and return 1; 0 when
 * the body is not {"name": string, "arguments": object | JSON text of one};
 * -1 on OOM. */
static int try_tool_call(qws_reply_parser *p, const char *body, size_t n) {
    json_error_t e;
    json_t *root = json_loadb(body, n, 0, &e);
    if (!root) return 0;
    int rc = 0;
    json_t *args_owned = NULL;
    const json_t *name = json_object_get(root, "name");
    const json_t *args = json_object_get(root, "arguments");
    if (!json_is_object(root) || !json_is_string(name) || json_string_length(name) == 0 || !args) goto out;
    if (json_is_string(args)) {
        args_owned = json_loadb(json_string_value(args), json_string_length(args), 0, &e);
        args = args_owned;
    }
    if (!json_is_object(args)) goto out;
    if (p->n_calls == p->cap_calls) {
        size_t cap = p->cap_calls ? 2 * p->cap_calls : 4;
        qws_tool_call *c = realloc(p->calls, cap * sizeof *c);
        if (!c) {
            rc = -1;
            goto out;
        }
        p->calls = c;
        p->cap_calls = cap;
    }
    /* Python json.dumps' separators (", ", ": ": jansson's without
     * JSON_COMPACT), the key order as written, and reals printed with 16
     * significant digits so 0.1 stays "0.1". */
    char *a = json_dumps(args, JSON_REAL_PRECISION(16));
    char *nm = strdup(json_string_value(name));
    if (!a || !nm) {
        free(a);
        free(nm);
        rc = -1;
        goto out;
    }
    qws_tool_call *c = &p->calls[p->n_calls++];
    make_id(p, c->id);
    c->name = nm;
    c->arguments = a;
    rc = 1;
out:
    json_decref(args_owned);
    json_decref(root);
    return rc;
}

/* ---- the phases ------------------------------------------------------------
 * Each returns 1 to be called again (the phase changed or pend moved on), 0
 * when nothing more can be released now, -1 on OOM. */

static int step_start(qws_reply_parser *p, int final) {
    size_t n = p->pend.len, m = LIT_LEN(THINK_OPEN);
    if (n < m && !final && memcmp(p->pend.p ? p->pend.p : "", THINK_OPEN, n) == 0) return 0;
    if (n >= m && memcmp(p->pend.p, THINK_OPEN, m) == 0) {
        pend_consume(p, m);
        p->drop_nl = 1;
    }
    p->phase = P_REASON;
    return 1;
}

static int step_reason(qws_reply_parser *p, int final) {
    if (p->drop_nl) {
        size_t k = 0;
        while (k < p->pend.len && p->pend.p[k] == '\n') k++;
        pend_consume(p, k);
        if (p->pend.len == 0) return 0;
        p->drop_nl = 0;
    }
    const char *s = p->pend.p;
    size_t n = p->pend.len;
    const char *end = find(s, n, THINK_CLOSE, LIT_LEN(THINK_CLOSE));
    if (end) {
        size_t r = (size_t)(end - s);
        size_t keep = r;
        while (keep > 0 && s[keep - 1] == '\n') keep--;   /* newlines before </think> */
        if (buf_put(&p->reasoning, s, keep) < 0) return -1;
        pend_consume(p, r + LIT_LEN(THINK_CLOSE));
        p->phase = P_AFTER_END;
        return 1;
    }
    size_t hold = 0;
    if (!final) {
        hold = tag_prefix_suffix(s, n, THINK_CLOSE, LIT_LEN(THINK_CLOSE));
        while (hold < n && s[n - hold - 1] == '\n') hold++;  /* may precede </think> */
    }
    if (buf_put(&p->reasoning, s, n - hold) < 0) return -1;
    pend_consume(p, n - hold);
    return 0;
}

static int step_after_end(qws_reply_parser *p, int final) {
    size_t k = 0;
    while (k < p->pend.len && p->pend.p[k] == '\n') k++;
    pend_consume(p, k);
    if (p->pend.len == 0 && !final) return 0;
    p->phase = P_CONTENT;
    return 1;
}

/* Content outside a tool-call block. */
static int step_content_outside(qws_reply_parser *p, int final) {
    const char *s = p->pend.p;
    size_t n = p->pend.len;
    if (n == 0) return 0;
    const char *open = find(s, n, CALL_OPEN, LIT_LEN(CALL_OPEN));
    if (!open) {
        size_t hold = final ? 0 : tag_prefix_suffix(s, n, CALL_OPEN, LIT_LEN(CALL_OPEN));
        if (p->after_call) {
            size_t w = 0;
            while (w < n && is_ws(s[w])) w++;
            if (w + hold >= n) {
                /* Only whitespace (and maybe the start of another tag)
                 * since the last tool call: undecided until more comes;
                 * at the end of the reply it is dropped. */
                if (final) pend_consume(p, n);
                return 0;
            }
            p->after_call = 0;
        }
        if (buf_put(&p->content, s, n - hold) < 0) return -1;
        pend_consume(p, n - hold);
        return 0;
    }
    size_t pre = (size_t)(open - s);
    int ws_only = 1;
    for (size_t i = 0; i < pre; i++)
        if (!is_ws(s[i])) ws_only = 0;
    if (!(p->after_call && ws_only)) {
        /* Text before the block is content; a whitespace run right after a
         * tool call stays pending with the block, its fate decided by it. */
        if (buf_put(&p->content, s, pre) < 0) return -1;
        pend_consume(p, pre);
        p->after_call = 0;
        pre = 0;
    }
    p->inside = 1;
    p->block_at = pre;
    p->scan = pre + LIT_LEN(CALL_OPEN);
    return 1;
}

/* Content inside a tool-call block (pend = [whitespace] <tool_call> ...). */
static int step_content_inside(qws_reply_parser *p, int final) {
    const char *s = p->pend.p;
    size_t n = p->pend.len;
    size_t body_at = p->block_at + LIT_LEN(CALL_OPEN);
    const char *close = find(s + p->scan, n - p->scan, CALL_CLOSE, LIT_LEN(CALL_CLOSE));
    size_t body_end, block_end;
    if (close) {
        body_end = (size_t)(close - s);
        block_end = body_end + LIT_LEN(CALL_CLOSE);
    } else if (final) {
        body_end = block_end = n;    /* an unclosed last block, as vLLM's regex */
    } else {
        /* Rescan only what a split </tool_call> could still straddle. */
        size_t back = LIT_LEN(CALL_CLOSE) - 1;
        p->scan = n > body_at + back ? n - back : body_at;
        return 0;
    }
    int r = try_tool_call(p, s + body_at, body_end - body_at);
    if (r < 0) return -1;
    if (r == 0) {
        if (buf_put(&p->content, s, block_end) < 0) return -1;
        p->after_call = 0;
    } else {
        p->after_call = 1;
    }
    pend_consume(p, block_end);
    p->inside = 0;
    return 1;
}

static int step_content(qws_reply_parser *p, int final) {
    if (!p->tools) {
        if (buf_put(&p->content, p->pend.p, p->pend.len) < 0) return -1;
        pend_consume(p, p->pend.len);
        return 0;
    }
    return p->inside ? step_content_inside(p, final) : step_content_outside(p, final);
}

static int process(qws_reply_parser *p, int final) {
    for (;;) {
        int r;
        switch (p->phase) {
        case P_START: r = step_start(p, final); break;
        case P_REASON: r = step_reason(p, final); break;
        case P_AFTER_END: r = step_after_end(p, final); break;
        default: r = step_content(p, final); break;
        }
        if (r <= 0) return r;
    }
}

static void fill(const qws_reply_parser *p, qws_reply_delta *out) {
    out->reasoning = p->reasoning.len ? p->reasoning.p : "";
    out->reasoning_len = p->reasoning.len;
    out->content = p->content.len ? p->content.p : "";
    out->content_len = p->content.len;
    out->num_tool_calls = p->n_calls;
    out->tool_calls = p->n_calls ? p->calls : NULL;
}

static void empty(qws_reply_delta *out) {
    if (!out) return;
    out->reasoning = out->content = "";
    out->reasoning_len = out->content_len = 0;
    out->num_tool_calls = 0;
    out->tool_calls = NULL;
}

/* ---- public ---------------------------------------------------------------- */

qws_reply_parser *qws_reply_parser_create(int split_reasoning, int parse_tools) {
    qws_reply_parser *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->split = split_reasoning != 0;
    p->tools = parse_tools != 0;
    p->phase = p->split ? P_START : P_CONTENT;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    p->rng = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)(uintptr_t)p;
    return p;
}

static int run(qws_reply_parser *p, const char *text, size_t len, int final, qws_reply_delta *out) {
    empty(out);
    if (!p || !out || p->broken || p->finished || (!text && len > 0)) return -1;
    p->reasoning.len = p->content.len = 0;
    free_calls(p);
    if (buf_put(&p->pend, text, len) < 0 || process(p, final) < 0) {
        p->broken = 1;
        return -1;
    }
    if (final) p->finished = 1;
    fill(p, out);
    return 0;
}

int qws_reply_parser_feed(qws_reply_parser *p, const char *text, size_t len, qws_reply_delta *out) {
    return run(p, text, len, 0, out);
}

int qws_reply_parser_finish(qws_reply_parser *p, qws_reply_delta *out) {
    return run(p, NULL, 0, 1, out);
}

void qws_reply_parser_destroy(qws_reply_parser *p) {
    if (!p) return;
    free_calls(p);
    free(p->calls);
    free(p->pend.p);
    free(p->reasoning.p);
    free(p->content.p);
    free(p);
}
