/*
 * reply_parser.h - qw-serve: splits a streamed Qwen3 chat reply into
 * reasoning, content and tool calls.
 *
 * Semantics follow vLLM's Qwen3 reasoning parser (thinking enabled: the
 * template leaves the <think> block to the model) and its Hermes tool
 * parser:
 *  - split_reasoning (pass 1 only when thinking is enabled; with
 *    enable_thinking=false the template closed the block in the prompt and
 *    vLLM routes every byte to content): the text before the first
 *    "</think>" is reasoning, the rest content. A "<think>" at the very
 *    start is dropped, and so are the newlines right after it, right before
 *    "</think>" and right after "</think>". Reasoning streams out as it
 *    comes (only trailing newlines and a possible tag prefix are held). A
 *    reply that never writes "</think>" is all reasoning: with thinking on,
 *    vLLM reads a missing end tag as output cut while thinking (its
 *    non-streaming extract_reasoning returns everything as reasoning then,
 *    and its streaming path labels every delta before the tag reasoning).
 *    vLLM's Qwen3.5 rule "<tool_call><function=..." ends reasoning
 *    implicitly is not applied: Qwen3 writes the Hermes JSON form, and only
 *    after "</think>".
 *  - parse_tools: each "<tool_call>" ... "</tool_call>" block of the
 *    content whose body is one JSON object {"name": string, "arguments":
 *    object, or a JSON string holding one} (whitespace around it allowed)
 *    becomes a tool call: id "call_" + 24 random alphanumerics, arguments
 *    re-serialised as JSON text with Python json.dumps' separators (", ",
 *    ": "; what vLLM sends). A malformed block stays content, verbatim with
 *    its tags. A block still open at finish is parsed the same way (vLLM's
 *    hermes regex also takes an unclosed last block) and stays content if
 *    malformed. Content between and after tool calls is kept, except
 *    whitespace-only runs between or after them (the template's "\n\n"
 *    separators; vLLM drops all content after the first call).
 *    Within one delta the order of content relative to tool calls is not
 *    kept: content is the concatenation of its released pieces.
 * Tags may arrive split across feeds at any byte: only a possible prefix of
 * a tag, the newlines a tag would drop, whitespace after a tool call and an
 * open tool-call block are held back; finish flushes them. Any cut of a
 * reply into feeds releases the same joined reasoning, content and tool
 * calls. Held-back text always starts at an ASCII byte ('<' or
 * whitespace), so when every feed is whole UTF-8 characters (as
 * qw_request_get_text_piece's pieces are), so is every released piece.
 */
#ifndef QWS_REPLY_PARSER_H
#define QWS_REPLY_PARSER_H

#include <stddef.h>

typedef struct qws_reply_parser qws_reply_parser;

/* One tool call. name and arguments are NUL-terminated, owned by the
 * parser, valid until the next call on it. */
typedef struct qws_tool_call {
    char id[40];              /* "call_" + 24 alphanumerics, NUL-terminated */
    const char *name;
    const char *arguments;    /* the arguments as JSON text (see above)      */
} qws_tool_call;

/* What one feed/finish released (reasoning always precedes content in the
 * reply). Pointers are owned by the parser and valid until the next call on
 * it; lengths may be 0 (the pointers are then non-NULL ""), tool_calls is
 * NULL when num_tool_calls is 0. */
typedef struct qws_reply_delta {
    const char *reasoning;
    size_t reasoning_len;
    const char *content;
    size_t content_len;
    size_t num_tool_calls;
    const qws_tool_call *tool_calls;
} qws_reply_delta;

/* Create a parser (flags 0/1; both 0 passes every byte through as content).
 * NULL on OOM. Free with qws_reply_parser_destroy. */
qws_reply_parser *qws_reply_parser_create(int split_reasoning, int parse_tools);

/* Feed len more bytes of the reply (text may be NULL when len is 0) and get
 * in *out what can be released now. Returns 0, or -1 on OOM (then *out is
 * empty and the parser must only be destroyed). After finish: -1. */
int qws_reply_parser_feed(qws_reply_parser *p, const char *text, size_t len,
                          qws_reply_delta *out);

/* End of the reply: release everything still held (see above) in *out.
 * Returns 0, -1 on OOM or when called twice. */
int qws_reply_parser_finish(qws_reply_parser *p, qws_reply_delta *out);

/* Free a parser. NULL: no-op. */
void qws_reply_parser_destroy(qws_reply_parser *p);

#endif /* QWS_REPLY_PARSER_H */
