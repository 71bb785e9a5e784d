/* The harmony renderer: a conversation → the exact token sequence gpt-oss was trained on.
 *
 * A rendered conversation is a list of *pieces*: either one special token (<|start|>, <|message|>
 * ...) or a run of UTF-8 text that must be encoded with the tokenizer's `encode_ordinary` — on its
 * own, never merged with its neighbours, because BPE merges differ at piece boundaries ("assistant"
 * and " to=..." are separate runs). Keeping pieces separate from tokenisation lets the renderer be
 * tested against the reference's text renderings without a tokenizer, and lets any tokenizer turn
 * them into ids.
 *
 * Format of one message (spec §5.1):
 *   <|start|>ROLE[:NAME][ to=RECIPIENT][<|channel|>CHANNEL][ CONTENT_TYPE]<|message|>CONTENT END
 * where a tool message writes its NAME instead of the role, a content type "<|constrain|>json" is
 * written as " " <|constrain|> "json", and END is <|call|> for an assistant message that has a
 * recipient (a tool call) and <|end|> otherwise — also for a final answer that was sampled ending
 * in
 * <|return|>: history always stores <|end|>.
 *
 * The data model is a *view*: every pointer is borrowed from the caller (typically strings inside
 * the request's JSON), nothing is copied or freed by the renderer. Zero-initialise and fill in. */
#ifndef GPTOSS_HARMONY_RENDER_H
#define GPTOSS_HARMONY_RENDER_H

#include "base/vec.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    HARMONY_ROLE_SYSTEM,
    HARMONY_ROLE_DEVELOPER,
    HARMONY_ROLE_USER,
    HARMONY_ROLE_ASSISTANT,
    HARMONY_ROLE_TOOL, /* a tool's output; the header shows the tool's name (message.name) */
} harmony_role;

/* "system", "developer", "user", "assistant", "tool". */
const char *harmony_role_name(harmony_role role);

typedef enum {
    HARMONY_EFFORT_UNSET, /* no "Reasoning:" line */
    HARMONY_EFFORT_LOW,
    HARMONY_EFFORT_MEDIUM,
    HARMONY_EFFORT_HIGH,
} harmony_effort;

/* One callable tool: a function (developer message) or a built-in tool's operation. */
typedef struct {
    const char *name;         /* "get_weather" */
    const char *description;  /* one "// " comment line per line; NULL or "" for none */
    const json_t *parameters; /* JSON Schema of the arguments object; NULL: "() => any" */
} harmony_tool;

/* A group of tools under one name ("functions", "browser", "python"). */
typedef struct {
    const char *name;
    const char *description; /* NULL for none */
    const harmony_tool *tools;
    size_t n_tools;
} harmony_namespace;

/* Structured content of the system message (spec §5.2). harmony_system_defaults() gives the
 * reference's defaults: identity "You are ChatGPT, ...", cutoff 2024-06, effort medium, channels
 * analysis/commentary/final, required. */
typedef struct {
    const char *model_identity;   /* NULL: line omitted */
    const char *knowledge_cutoff; /* NULL: line omitted */
    const char *current_date;     /* "YYYY-MM-DD"; NULL: line omitted */
    harmony_effort effort;
    const char *const *valid_channels; /* NULL or empty: no "# Valid channels" section */
    size_t n_valid_channels;
    bool channel_required;          /* adds " Channel must be included for every message." */
    bool browser_tool;              /* the built-in browser namespace (search / open / find) */
    bool python_tool;               /* the built-in python namespace */
    const harmony_namespace *tools; /* further system-level tool namespaces; usually none */
    size_t n_tools;
} harmony_system;

/* Structured content of the developer message (spec §5.3). */
typedef struct {
    const char *instructions;      /* under "# Instructions"; NULL: no such section */
    const harmony_tool *functions; /* the "functions" namespace */
    size_t n_functions;
} harmony_developer;

typedef struct {
    harmony_role role;
    const char *name; /* author name; required for HARMONY_ROLE_TOOL ("functions.get_weather") */
    const char *recipient;    /* NULL (or "all"): none; "functions.get_weather" for a tool call */
    const char *channel;      /* "analysis" | "commentary" | "final" | NULL */
    const char *content_type; /* "<|constrain|>json", "code", "json" or NULL */
    const char *text;         /* text content (NULL = none) */
    const harmony_system *system;       /* only in system messages */
    const harmony_developer *developer; /* only in developer messages */
} harmony_message;

typedef struct {
    const harmony_message *messages;
    size_t n_messages;
} harmony_conversation;

/* The reference's default system content. */
harmony_system harmony_system_defaults(void);

/* ---- pieces ---------------------------------------------------------------------------------- */

typedef struct {
    int32_t special; /* a special token id, or -1 for a text run */
    size_t off, len; /* text run: bytes [off, off+len) of harmony_pieces.text */
} harmony_piece;

typedef struct {
    harmony_piece *v;
    size_t len, cap;
    char *text; /* all text runs, back to back (NUL-terminated) */
    size_t text_len, text_cap;
} harmony_pieces;

void harmony_pieces_free(harmony_pieces *p);
void harmony_pieces_add_special(harmony_pieces *p, int32_t id);
/* Appends a text run; an empty run adds nothing (it would encode to no tokens anyway). */
void harmony_pieces_add_text(harmony_pieces *p, const char *s, size_t n);

/* The debug/text form: text runs as they are, specials by name ("<|start|>"). This is the form of
 * the reference's golden .txt files. Heap string; *len_out (if not NULL) gets its length. */
char *harmony_pieces_to_text(const harmony_pieces *p, size_t *len_out);

/* Appends the token ids of text (no special-token handling: "<|end|>" typed by a user is just
 * text). Returns 0, or -1 with err_set(). tokenizer_encode_ordinary has this shape once wrapped. */
typedef int (*harmony_encode_fn)(void *ctx, const char *text, size_t len, ivec *out);

/* Appends the pieces' token ids to out: special ids as they are, each text run through `encode`. */
int harmony_pieces_to_tokens(const harmony_pieces *p, harmony_encode_fn encode, void *ctx,
                             ivec *out);

/* ---- rendering ------------------------------------------------------------------------------- */

/* Appends one message's pieces. has_function_tools: whether the conversation declares any function
 * tool (adds the "Calls to these tools must go to the commentary channel" line to a system
 * message). */
int harmony_render_message(const harmony_message *m, bool has_function_tools, harmony_pieces *out);

/* Appends the pieces of a whole conversation.
 *   for_completion: end with <|start|>assistant, the prompt for sampling the next assistant turn.
 *   auto_drop_analysis: the reference's chain-of-thought hygiene (spec §5.6): when the last
 * assistant message is on the final channel (the turn is over), leave out every analysis message
 * before the first final message. Analysis that belongs to an ongoing tool-calling chain is kept.
 * Returns 0, or -1 with err_set() naming the message and field (e.g. a tool message without a
 * name). */
int harmony_render_conversation(const harmony_conversation *conv, bool for_completion,
                                bool auto_drop_analysis, harmony_pieces *out);

#endif
