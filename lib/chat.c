/*
 * chat.c - Qwen3's ChatML chat template, written out as C (see chat.h).
 * The control flow mirrors the official Jinja template step by step so the
 * two can be compared; the Python string operations it uses (split, strip)
 * are spelled out as helpers on (pointer, length) spans.
 */
#include <stdlib.h>
#include <string.h>

#include "chat.h"

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = 1; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

typedef struct span {
    const char *p;
    size_t n;
} span;

static span span_of(const char *s) { return (span){s ? s : "", s ? strlen(s) : 0}; }

/* Python's str.find / rfind of a NUL-free needle within a span; -1 if absent. */
static long span_find(span s, const char *needle, int last) {
    size_t k = strlen(needle);
    long found = -1;
    for (size_t i = 0; i + k <= s.n; i++) {
        if (memcmp(s.p + i, needle, k) == 0) {
            found = (long)i;
            if (!last) break;
        }
    }
    return found;
}

static span lstrip_nl(span s) {
    while (s.n && s.p[0] == '\n') { s.p++; s.n--; }
    return s;
}

static span rstrip_nl(span s) {
    while (s.n && s.p[s.n - 1] == '\n') s.n--;
    return s;
}

static int starts_with(span s, const char *pre) {
    size_t k = strlen(pre);
    return s.n >= k && memcmp(s.p, pre, k) == 0;
}

static int ends_with(span s, const char *suf) {
    size_t k = strlen(suf);
    return s.n >= k && memcmp(s.p + s.n - k, suf, k) == 0;
}

static int is_role(const qwi_chat_message *m, const char *role) {
    return m->role && strcmp(m->role, role) == 0;
}

qw_status qwi_chat_render(const qwi_chat_message *msgs, size_t n,
                          const char *const *tools_json, size_t n_tools,
                          int add_generation_prompt, int enable_thinking, char **out,
                          size_t *len) {
    if (out) *out = NULL;
    if (len) *len = 0;
    if (!out || (!msgs && n) || (!tools_json && n_tools))
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "chat_render: NULL argument");
    for (size_t i = 0; i < n; i++) {
        const char *r = msgs[i].role;
        if (!r || (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") &&
                   strcmp(r, "tool")))
            return qwi_fail(QW_ERR_INVALID_ARGUMENT,
                            "chat_render: message %zu has role \"%s\" (want system, user, "
                            "assistant or tool)",
                            i, r ? r : "(null)");
    }
    sbuf b = {0};
    int first_is_system = n > 0 && is_role(&msgs[0], "system");

    /* The system turn: the first message if it is a system one, plus the
     * tool-use instructions when tools are given. */
    if (n_tools) {
        sb_str(&b, "<|im_start|>system\n");
        if (first_is_system) {
            sb_str(&b, msgs[0].content ? msgs[0].content : "");
            sb_str(&b, "\n\n");
        }
        sb_str(&b, "# Tools\n\nYou may call one or more functions to assist with the user "
                   "query.\n\nYou are provided with function signatures within <tools></tools> "
                   "XML tags:\n<tools>");
        for (size_t i = 0; i < n_tools; i++) {
            sb_str(&b, "\n");
            sb_str(&b, tools_json[i] ? tools_json[i] : "");
        }
        sb_str(&b, "\n</tools>\n\nFor each function call, return a json object with function "
                   "name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
                   "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
                   "</tool_call><|im_end|>\n");
    } else if (first_is_system) {
        sb_str(&b, "<|im_start|>system\n");
        sb_str(&b, msgs[0].content ? msgs[0].content : "");
        sb_str(&b, "<|im_end|>\n");
    }

    /* The last real user query: the latest user message that is not a
     * wrapped tool result. Reasoning is kept only after it. */
    size_t last_query = n ? n - 1 : 0;
    for (size_t k = n; k-- > 0;) {
        span c = span_of(msgs[k].content);
        if (is_role(&msgs[k], "user") &&
            !(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"))) {
            last_query = k;
            break;
        }
    }

    for (size_t i = 0; i < n; i++) {
        const qwi_chat_message *m = &msgs[i];
        span content = span_of(m->content);
        if (is_role(m, "user") || (is_role(m, "system") && i != 0)) {
            sb_str(&b, "<|im_start|>");
            sb_str(&b, m->role);
            sb_str(&b, "\n");
            sb_add(&b, content.p, content.n);
            sb_str(&b, "<|im_end|>\n");
        } else if (is_role(m, "assistant")) {
            span reasoning = {"", 0};
            if (m->reasoning_content) {
                reasoning = span_of(m->reasoning_content);
            } else {
                long close = span_find(content, "</think>", 0);
                if (close >= 0) {
                    /* content.split('</think>')[0].rstrip('\n')
                     *        .split('<think>')[-1].lstrip('\n') */
                    span before = rstrip_nl((span){content.p, (size_t)close});
                    long open = span_find(before, "<think>", 1);
                    if (open >= 0) {
                        before.p += open + 7;
                        before.n -= (size_t)open + 7;
                    }
                    reasoning = lstrip_nl(before);
                    /* content.split('</think>')[-1].lstrip('\n') */
                    long lastc = span_find(content, "</think>", 1);
                    content = lstrip_nl((span){content.p + lastc + 8,
                                               content.n - (size_t)lastc - 8});
                }
            }
            sb_str(&b, "<|im_start|>assistant\n");
            if (i > last_query && (i == n - 1 || reasoning.n)) {
                span r = lstrip_nl(rstrip_nl(reasoning));
                sb_str(&b, "<think>\n");
                sb_add(&b, r.p, r.n);
                sb_str(&b, "\n</think>\n\n");
                content = lstrip_nl(content);
            }
            sb_add(&b, content.p, content.n);
            sb_str(&b, "<|im_end|>\n");
        } else if (is_role(m, "tool")) {
            /* consecutive tool results share one user turn */
            if (i == 0 || !is_role(&msgs[i - 1], "tool")) sb_str(&b, "<|im_start|>user");
            sb_str(&b, "\n<tool_response>\n");
            sb_add(&b, content.p, content.n);
            sb_str(&b, "\n</tool_response>");
            if (i == n - 1 || !is_role(&msgs[i + 1], "tool")) sb_str(&b, "<|im_end|>\n");
        }
        /* a system message at index 0 was rendered above */
    }
    if (add_generation_prompt) {
        sb_str(&b, "<|im_start|>assistant\n");
        if (!enable_thinking) sb_str(&b, "<think>\n\n</think>\n\n");
    }
    sb_add(&b, "", 0);   /* an empty conversation still yields "" */
    if (b.oom) {
        free(b.p);
        return qwi_fail(QW_ERR_OUT_OF_MEMORY, "chat_render: out of memory");
    }
    *out = b.p;
    if (len) *len = b.n;
    return QW_OK;
}
