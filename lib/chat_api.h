/*
 * chat_api.h - the layout of the public qw_chat (a list of owned messages
 * and tool definitions) and rendering it to a malloc'd string, for the
 * request code. Internal: not installed.
 */
#ifndef QWI_CHAT_API_H
#define QWI_CHAT_API_H

#include "chat.h"

/* Render chat with qw_chat_flag bits into a malloc'd NUL-terminated string
 * (*out, caller frees) of *len bytes. Errors as qw_chat_render. */
qw_status qwi_chat_render_alloc(const qw_chat *chat, uint32_t flags, char **out, size_t *len,
                                const char *fn);

#endif
