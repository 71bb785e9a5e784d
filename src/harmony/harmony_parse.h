/* The streaming harmony parser: sampled tokens, one at a time → message events.
 *
 * The model's output is a sequence of harmony messages (spec §5.4):
 *   <|channel|>analysis<|message|>…<|end|><|start|>assistant<|channel|>final<|message|>…<|return|>
 * (the prompt already ended in <|start|>assistant, so the first header starts without <|start|>).
 * The parser turns that into three kinds of events, delivered through a callback as tokens arrive:
 *   MESSAGE_START  the header is complete: role, channel, recipient, content type, and what the
 * message means to an API (reasoning, final content, a tool call, a preamble, ...); CONTENT a piece
 * of the message's text — always valid UTF-8, never a split character; MESSAGE_END    the message
 * is over, and why (<|end|>, <|return|>, <|call|>, cut short). Every MESSAGE_START is followed by
 * exactly one MESSAGE_END (after harmony_parser_finish at the latest), and no event falls outside a
 * START/END pair.
 *
 * Models make mistakes and outputs get cut off, so the parser never fails on its input: it
 * salvages.
 *   - A terminator inside a header (the model forgot <|message|>): the header's words after the
 * role and channel become the content ("<|channel|>analysis I must refuse<|end|>").
 *   - Text or <|channel|> where a <|start|> was expected: an assistant message whose header begins
 *     there (the model forgot "<|end|><|start|>assistant").
 *   - A <|start|> or <|channel|> inside content: the open message ends (MESSAGE_END with
 *     HARMONY_END_IMPLICIT) and a new one begins.
 *   - A header that never ends (no <|message|> within HARMONY_MAX_HEADER bytes): treated like the
 *     terminator case, and what follows streams as content.
 *   - A missing or empty channel: the message has channel NULL; unparseable header words are
 * dropped and the header is flagged `malformed`.
 *   - Reserved and other non-harmony special tokens: ignored. Ids the vocabulary does not know:
 * U+FFFD in content.
 *   - Output cut by max_tokens: harmony_parser_finish() closes the open message as
 *     HARMONY_END_TRUNCATED (flushing an unfinished character as U+FFFD).
 * Nothing is retained once a message is over: memory is bounded by one header plus 3 held-back
 * bytes. */
#ifndef GPTOSS_HARMONY_PARSE_H
#define GPTOSS_HARMONY_PARSE_H

#include "harmony/harmony_render.h"
#include "harmony/harmony_strbuf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    HARMONY_MAX_HEADER = 1024
}; /* header bytes after which the parser stops waiting for <|message|> */

/* What a message means to an OpenAI-style API (spec §5.5). */
typedef enum {
    HARMONY_KIND_REASONING, /* assistant, analysis channel, no recipient: chain of thought */
    HARMONY_KIND_FINAL,     /* assistant, final channel (or no channel): the answer */
    HARMONY_KIND_PREAMBLE,  /* assistant, commentary channel, no recipient: user-visible preamble */
    HARMONY_KIND_TOOL_CALL, /* assistant → a function (recipient "functions.X", or a bare name) */
    HARMONY_KIND_BUILTIN_CALL, /* assistant → a built-in tool: "browser.*", "python", "container.*"
                                */
    HARMONY_KIND_TOOL_RESULT,  /* a tool's output (role tool; author = the tool's name) */
    HARMONY_KIND_OTHER,        /* anything else: system/developer/user text, unknown channels */
} harmony_kind;

typedef enum {
    HARMONY_END_END,       /* <|end|>: the model may continue with another message */
    HARMONY_END_RETURN,    /* <|return|>: final answer done, stop */
    HARMONY_END_CALL,      /* <|call|>: tool call done, stop and run the tool */
    HARMONY_END_IMPLICIT,  /* the next message began without a terminator */
    HARMONY_END_TRUNCATED, /* harmony_parser_finish() with the message still open */
} harmony_end_reason;

const char *harmony_kind_name(harmony_kind k);      /* "reasoning", "final", ... */
const char *harmony_end_name(harmony_end_reason r); /* "end", "return", "call", ... */

/* A parsed header. Strings are NUL-terminated, valid UTF-8, NULL when absent; they live until the
 * message's MESSAGE_END callback returns. */
typedef struct {
    harmony_role role;
    const char *author;       /* for role tool: the tool name that stood in the role's place */
    const char *channel;      /* "analysis", "commentary", "final", ... */
    const char *recipient;    /* "functions.get_weather", "browser.search", "assistant", ... */
    const char *content_type; /* "<|constrain|>json" (the token, spelled), "json", "code", ... */
    harmony_kind kind;
    const char *function; /* HARMONY_KIND_TOOL_CALL: the function name ("get_weather") */
    bool malformed;       /* something in the header had to be salvaged or dropped */
} harmony_header;

typedef enum {
    HARMONY_EV_MESSAGE_START,
    HARMONY_EV_CONTENT,
    HARMONY_EV_MESSAGE_END,
} harmony_event_kind;

typedef struct {
    harmony_event_kind kind;
    size_t message;               /* index of the message in this stream, from 0 */
    const harmony_header *header; /* the message's header (all three kinds) */
    const char *text;             /* CONTENT: the new text (valid UTF-8, not NUL-terminated) */
    size_t len;
    harmony_end_reason end; /* MESSAGE_END */
} harmony_event;

/* The bytes of an ordinary (non-special) token, or NULL for an id the vocabulary does not have. */
typedef const char *(*harmony_token_bytes_fn)(void *ctx, int32_t id, size_t *len);
typedef void (*harmony_event_fn)(void *ctx, const harmony_event *ev);

typedef struct {
    harmony_token_bytes_fn token_bytes;
    void *token_ctx;
    harmony_event_fn on_event;
    void *event_ctx;
    /* The prompt ended with <|start|>assistant (a completion): the first header's role is known and
     * the stream starts inside it. False: the stream starts before a <|start|>. */
    bool after_assistant_start;
} harmony_parser_config;

typedef struct {
    harmony_parser_config cfg;
    int state;          /* internal: expecting <|start|>, in a header, in content, finished */
    bool role_known;    /* the current header's role is given, not to be read from the header */
    bool implicit;      /* the current header began without <|start|> (salvaged) */
    harmony_role role;  /* that role */
    hsb header;         /* raw header text, specials spelled out */
    hsb pending;        /* content bytes held back: an unfinished UTF-8 character */
    hsb out;            /* scratch for the cleaned text of one CONTENT event */
    hsb fields;         /* storage of the current header's strings */
    harmony_header hdr; /* the open message's header */
    size_t n_messages;  /* messages started so far */
    size_t n_ignored;   /* special tokens ignored (reserved, <|endoftext|>, misplaced) */
} harmony_parser;

void harmony_parser_init(harmony_parser *p, const harmony_parser_config *cfg);
/* Feeds one sampled token; events for it are delivered before this returns. */
void harmony_parser_feed(harmony_parser *p, int32_t token);
/* End of output: closes an open message (HARMONY_END_TRUNCATED) or salvages an open header. Further
 * feeds are ignored. */
void harmony_parser_finish(harmony_parser *p);
void harmony_parser_free(harmony_parser *p);

/* Parses a header's text (ordinary bytes, with <|channel|> and <|constrain|> spelled out) into
 * `hdr`, storing its strings in `store` (cleared first; the strings live as long as it is not
 * changed). role_known: the role is `role` (the text need not start with it). salvage: NULL for a
 * header that ended with <|message|>; otherwise the header never got one, no recipient or content
 * type is read, and the text after the role word and the channel is appended to *salvage as the
 * message's content. */
void harmony_parse_header(const char *text, size_t len, bool role_known, harmony_role role,
                          hsb *store, harmony_header *hdr, hsb *salvage);

#endif
