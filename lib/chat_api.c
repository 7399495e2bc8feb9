/*
 * chat_api.c - the public conversation object (qw_chat_*): owned copies of
 * messages and tool definitions, rendered by chat.c's Qwen3 template.
 */
#include <stdlib.h>
#include <string.h>

#include "chat_api.h"

struct qw_chat {
    qwi_chat_message *msgs;   /* role points at a static name; strings owned */
    size_t n, cap;
    char **tools;
    size_t n_tools, cap_tools;
};

static const char *role_name(qw_chat_role role) {
    switch (role) {
    case QW_CHAT_SYSTEM: return "system";
    case QW_CHAT_USER: return "user";
    case QW_CHAT_ASSISTANT: return "assistant";
    case QW_CHAT_TOOL: return "tool";
    }
    return NULL;
}

/* A NUL-terminated copy of s[0..len); NULL (status set) when s holds a NUL
 * or memory runs out. */
static qw_status copy_text(const char *s, size_t len, char **out, const char *fn, const char *what) {
    *out = NULL;
    if (!s && len > 0) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "%s: %s is NULL with length %zu", fn, what, len);
    if (len > 0 && memchr(s, '\0', len))
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "%s: %s holds a NUL byte at offset %zu", fn, what,
                        (size_t)((const char *)memchr(s, '\0', len) - s));
    char *c = malloc(len + 1);
    if (!c) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu bytes", fn, len);
    if (len) memcpy(c, s, len);
    c[len] = '\0';
    *out = c;
    return QW_OK;
}

QW_API qw_status qw_chat_create(qw_chat **out) {
    if (!out) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_chat_create: out is NULL");
    *out = calloc(1, sizeof **out);
    return *out ? QW_OK : qwi_fail(QW_ERR_OUT_OF_MEMORY, "qw_chat_create: out of memory");
}

QW_API void qw_chat_destroy(qw_chat *chat) {
    if (!chat) return;
    for (size_t i = 0; i < chat->n; i++) {
        free((char *)chat->msgs[i].content);
        free((char *)chat->msgs[i].reasoning_content);
    }
    for (size_t i = 0; i < chat->n_tools; i++) free(chat->tools[i]);
    free(chat->msgs);
    free(chat->tools);
    free(chat);
}

QW_API qw_status qw_chat_add_message(qw_chat *chat, qw_chat_role role, const char *content, size_t len) {
    if (!chat) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_chat_add_message: chat is NULL");
    const char *name = role_name(role);
    if (!name) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_chat_add_message: unknown role %d", (int)role);
    if (chat->n == chat->cap) {
        size_t cap = chat->cap ? chat->cap * 2 : 8;
        qwi_chat_message *m = realloc(chat->msgs, cap * sizeof *m);
        if (!m) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "qw_chat_add_message: out of memory");
        chat->msgs = m;
        chat->cap = cap;
    }
    char *c;
    qw_status st = copy_text(content, len, &c, "qw_chat_add_message", "content");
    if (st != QW_OK) return st;
    chat->msgs[chat->n++] = (qwi_chat_message){.role = name, .content = c, .reasoning_content = NULL};
    return QW_OK;
}

QW_API qw_status qw_chat_set_reasoning(qw_chat *chat, const char *reasoning, size_t len) {
    if (!chat) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_chat_set_reasoning: chat is NULL");
    if (chat->n == 0 || strcmp(chat->msgs[chat->n - 1].role, "assistant") != 0)
        return qwi_fail(QW_ERR_INVALID_STATE, "qw_chat_set_reasoning: the last message is not an assistant one");
    char *c;
    qw_status st = copy_text(reasoning, len, &c, "qw_chat_set_reasoning", "reasoning");
    if (st != QW_OK) return st;
    qwi_chat_message *m = &chat->msgs[chat->n - 1];
    free((char *)m->reasoning_content);
    m->reasoning_content = c;
    return QW_OK;
}

QW_API qw_status qw_chat_add_tool(qw_chat *chat, const char *json, size_t len) {
    if (!chat || !json) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_chat_add_tool: chat or json is NULL");
    if (chat->n_tools == chat->cap_tools) {
        size_t cap = chat->cap_tools ? chat->cap_tools * 2 : 4;
        char **t = realloc(chat->tools, cap * sizeof *t);
        if (!t) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "qw_chat_add_tool: out of memory");
        chat->tools = t;
        chat->cap_tools = cap;
    }
    char *c;
    qw_status st = copy_text(json, len, &c, "qw_chat_add_tool", "json");
    if (st != QW_OK) return st;
    chat->tools[chat->n_tools++] = c;
    return QW_OK;
}

QW_API size_t qw_chat_num_messages(const qw_chat *chat) { return chat ? chat->n : 0; }

qw_status qwi_chat_render_alloc(const qw_chat *chat, uint32_t flags, char **out, size_t *len, const char *fn) {
    *out = NULL;
    *len = 0;
    if (!chat) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "%s: chat is NULL", fn);
    const uint32_t known = QW_CHAT_ADD_GENERATION_PROMPT | QW_CHAT_ENABLE_THINKING | QW_CHAT_DISABLE_THINKING;
    if (flags & ~known)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "%s: unknown chat flags 0x%x", fn, (unsigned)(flags & ~known));
    if ((flags & QW_CHAT_ENABLE_THINKING) && (flags & QW_CHAT_DISABLE_THINKING))
        return qwi_fail(QW_ERR_INVALID_ARGUMENT,
                        "%s: QW_CHAT_ENABLE_THINKING and QW_CHAT_DISABLE_THINKING are both set", fn);
    /* Qwen3's template thinks unless enable_thinking is false. */
    return qwi_chat_render(chat->msgs, chat->n, (const char *const *)chat->tools, chat->n_tools,
                           (flags & QW_CHAT_ADD_GENERATION_PROMPT) != 0, (flags & QW_CHAT_DISABLE_THINKING) == 0,
                           out, len);
}

QW_API qw_status qw_chat_render(const qw_chat *chat, uint32_t flags, char *buf, size_t cap, size_t *len_out) {
    if (len_out) *len_out = 0;
    if (!len_out) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_chat_render: len_out is NULL");
    if (cap > 0 && !buf) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "qw_chat_render: buf is NULL with cap %zu", cap);
    char *s;
    size_t len;
    qw_status st = qwi_chat_render_alloc(chat, flags, &s, &len, "qw_chat_render");
    if (st != QW_OK) return st;
    if (cap > 0) {
        size_t k = QWI_MIN(len, cap - 1);
        memcpy(buf, s, k);
        buf[k] = '\0';
    }
    free(s);
    *len_out = len;
    return QW_OK;
}
