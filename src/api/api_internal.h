/* Internals shared by the src/api files (not for the server: it uses api.h only).
 *
 *   api_json.c       request bodies → json_t with OpenAI-style errors; typed field readers that
 *                    name the field; building and writing response JSON and SSE events
 *   api_params.c     what the three endpoints share: model, sampling parameters, stop, n, seed,
 *                    logit_bias, stream options, max_tokens against the context
 *   api_conv.c       a conversation under construction (harmony messages plus the strings they
 *                    borrow), rendered with harmony into prompt tokens
 *   api_hout.c       the harmony side of the output: sampled tokens → message events, per-token
 *                    attribution (for logprobs and reasoning-token counts), stop-string trimming
 *   api_logprobs.c   logprob entries in chat and completions shapes
 *   api_structured.c structured output: the fields that constrain sampling → an engine constraint
 *   api_*_parse.c / api_*_stream.c   one endpoint each */
#ifndef GPTOSS_API_API_INTERNAL_H
#define GPTOSS_API_API_INTERNAL_H

#include "api/api.h"
#include "harmony/harmony_parse.h"
#include "harmony/harmony_render.h"
#include "harmony/harmony_special.h"
#include "harmony/harmony_strbuf.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Nesting deeper than this is refused before anything walks the document (jansson itself stops at
 * 2048 levels; schemas in tools are rendered recursively, and no real request nests this deep). */
enum { API_MAX_JSON_DEPTH = 64 };
/* OpenAI's limits. */
enum {
    API_MAX_STOP = 4,
    API_MAX_COMPLETION_LOGPROBS = 5,
    API_MAX_TOP_LOGPROBS = 20,
    API_MAX_N = 128,
    /* completions: prompts in one request (each is an engine request with n samples) */
    API_MAX_PROMPTS = 1024
};

/* ---- api_json.c ------------------------------------------------------------------------------ */

/* Parses a request body into an object; NULL + a 400 naming the position otherwise. */
json_t *api_json_load(const char *body, size_t len, api_error *err);

/* "a string", "an array", ... for messages about wrong types. */
const char *api_json_type_name(const json_t *v);

/* Typed field readers. `param` is the field's full name for messages ("messages[2].content").
 * Return 0 when the field is absent or null (the output is left alone), 1 when it was read, -1 on
 * a wrong type or value (err filled, status 400, err->param = param). */
int api_get_bool(const json_t *obj, const char *key, const char *param, bool *out, api_error *err);
int api_get_string(const json_t *obj, const char *key, const char *param, const char **out,
                   api_error *err);
int api_get_object(const json_t *obj, const char *key, const char *param, json_t **out,
                   api_error *err);
/* Numbers in [lo, hi] (lo excluded when lo_open). */
int api_get_number(const json_t *obj, const char *key, const char *param, double lo, bool lo_open,
                   double hi, double *out, api_error *err);
/* Integers in [lo, hi]; a real with an integral value counts (pydantic's lax mode does the same).
 */
int api_get_int(const json_t *obj, const char *key, const char *param, long long lo, long long hi,
                long long *out, api_error *err);
/* The same checks on a value already at hand. */
int api_check_int(const json_t *v, const char *param, long long lo, long long hi, long long *out,
                  api_error *err);

/* Text of a message's content: a string, or an array of parts {type, text} whose types are in
 * `types` (NULL-terminated); parts are concatenated. NULL content gives "" (*out = NULL when
 * null_ok and the content is null or absent). The result is a heap string (or NULL). */
int api_content_text(const json_t *content, const char *param, const char *const *types,
                     bool null_ok, char **out, api_error *err);

/* A JSON string from text that must be UTF-8 (repaired with U+FFFD if it is not). */
json_t *api_jstr(const char *s, size_t n);
/* A logprob as JSON: -inf and NaN become -9999.0 (what vLLM sends; JSON has no infinities). */
json_t *api_jlogprob(float lp);

/* Output buffer: appends n bytes to the heap string *out of *out_len bytes (NUL-terminated). */
void api_out_add(char **out, size_t *out_len, const char *s, size_t n);
/* "data: <compact JSON>\n\n" (steals v). */
void api_out_sse(char **out, size_t *out_len, json_t *v);
/* "event: <type>\ndata: <compact JSON>\n\n" (steals v). */
void api_out_event(char **out, size_t *out_len, const char *type, json_t *v);
/* The compact JSON text of v (steals v), appended as it is. */
void api_out_json(char **out, size_t *out_len, json_t *v);

/* ---- api_params.c ---------------------------------------------------------------------------- */

/* One prompt of a completions request (a list of prompts gives several). */
typedef struct {
    int32_t *ids;
    int n;
    char *text; /* with echo: the prompt as text (else NULL) */
    size_t text_len;
    int max_tokens; /* max_tokens against this prompt's length */
} api_prompt;

/* What the request asked for beyond the engine request: options the output side needs. A plain
 * value (strings owned, freed by api_opts_free), copied into every stream. */
typedef struct {
    bool logprobs;       /* chat: logprobs = true; completions: logprobs given */
    int top_logprobs;    /* alternatives per token shown */
    int prompt_logprobs; /* completions (vLLM extension): alternatives per prompt position shown */
    bool echo_only; /* completions: max_tokens 0 with echo (score the prompt, show no tokens) */
    bool include_reasoning;
    bool skip_special_tokens;
    api_prompt *prompts; /* completions: every prompt of the request, in order */
    int n_prompts;
    char **stop; /* the stop strings (to report stop_reason) */
    int n_stop;
    json_t *echo; /* responses: request fields the response object repeats */
    /* responses with store: where the finished response goes (not owned), and its input items
     * (the previous conversation, then the request's input with item references resolved). */
    resp_store *store;
    json_t *store_items;
} api_opts;

void api_opts_copy(api_opts *dst, const api_opts *src);
void api_opts_free(api_opts *o);

/* api_call.priv points to the call's api_opts. */
static inline api_opts *api_call_opts(const api_call *c) {
    return (api_opts *)c->priv;
}

/* Zeroes the call, sets the engine request's defaults (sampling_params_default, n = 1) and
 * attaches fresh options (reasoning shown, special tokens skipped). */
api_opts *api_call_init(api_call *call, api_kind kind);
/* Checks "model" against the served name (404 model_not_found) and copies it into call->model. */
int api_parse_model(const json_t *root, const api_config *cfg, api_call *call, api_error *err);
/* temperature, top_p, top_k, min_p, the three penalties, seed, logit_bias, n (when allow_n),
 * stop, stop_token_ids, ignore_eos, stream, stream_options.include_usage, skip_special_tokens. */
int api_parse_sampling(const json_t *root, const tokenizer *tok, bool allow_n, api_call *call,
                       api_opts *opts, api_error *err);
/* Sets req.max_tokens from the value read under `key` (or the default) once the prompt is known,
 * and refuses prompts that leave no room in the context (400, code context_length_exceeded). */
int api_finish_lengths(const json_t *root, const char *const *keys, const char *prompt_param,
                       const api_config *cfg, api_call *call, api_error *err);
/* Frees what api_parse_sampling and the parsers allocated in the engine request. */
void api_request_free(engine_request *r);

/* ---- api_conv.c ------------------------------------------------------------------------------ */

/* A conversation being built from a request: the system and developer settings, the messages
 * (whose strings are borrowed from the request JSON or owned here), then rendered to tokens. */
typedef struct {
    harmony_message *msgs;
    size_t n, cap;
    char **owned; /* strings this conversation allocated */
    size_t n_owned, cap_owned;
    harmony_effort effort;
    const char *current_date; /* NULL: no line */
    hsb instructions;         /* the developer message's "# Instructions" text */
    harmony_tool *tools;      /* function tools (borrowed strings) */
    size_t n_tools, cap_tools;
    hsb response_format; /* "# Response Formats" section (without the leading blank line) */
} api_conv;

void api_conv_init(api_conv *c, const api_config *cfg);
void api_conv_free(api_conv *c);

/* The fields of a conversation request (chat or responses) into out, through the conversation c. */
typedef int (*api_conv_fields_fn)(const json_t *root, const tokenizer *tok, const api_config *cfg,
                                  api_call *out, api_conv *c, api_error *err);
/* The shared frame of api_parse_chat and api_parse_responses: parse the body, run `fields` with a
 * fresh conversation, and leave nothing to free on failure. */
int api_parse_conversation(const char *body, size_t len, api_kind kind, api_conv_fields_fn fields,
                           const tokenizer *tok, const api_config *cfg, api_call *out,
                           api_error *err);
/* Takes ownership of s (heap) and returns it. */
const char *api_conv_own(api_conv *c, char *s);
/* Appends a message (zeroed but for role) and returns it. */
harmony_message *api_conv_add(api_conv *c, harmony_role role);
void api_conv_add_instructions(api_conv *c, const char *text);
void api_conv_add_tool(api_conv *c, const char *name, const char *description,
                       const json_t *parameters);
/* Parses reasoning effort "low" | "medium" | "high" ("minimal" → low); 400 for others. */
int api_parse_effort(const json_t *v, const char *param, harmony_effort *out, api_error *err);
/* A json_schema response format → the developer message's "# Response Formats" section. */
void api_conv_set_response_format(api_conv *c, const char *name, const char *description,
                                  const json_t *schema);
/* Checks a function name (1..64 of [A-Za-z0-9_.:-]: it is written into a harmony header, where
 * whitespace or '<' would end it). */
int api_check_function_name(const char *name, const char *param, api_error *err);
/* A function definition {name, description, parameters} at `param` (e.g. "tools[0].function"):
 * checked, and added to the conversation's tools when `add`. */
int api_parse_function_def(const json_t *fn, const char *param, api_conv *c, bool add,
                           api_error *err);
/* The request's 'tools' array, as chat and responses both take it: 1 when it is an array, 0 when absent
 * or null, -1 (a 400 naming 'tools') otherwise. */
int api_tools_present(const json_t *tools, api_error *err);
/* Entry i of it: must be an object; *type gets its "type" string (NULL when absent). path and
 * type_path receive "tools[i]" and "tools[i].type" for the caller's own errors. */
typedef struct {
    char path[48], type_path[64];
} api_tool_paths;
int api_tool_entry(const json_t *t, size_t i, api_tool_paths *tp, const char **type,
                   api_error *err);
/* The request's 'tool_choice', as chat and responses both take it: absent, null, "auto" or
 * "required" → 1 (list the tools), "none" → 0 (hide them), an object → 1 with *object set to it
 * (its shape is each API's own); other strings and types → -1, a 400 naming 'tool_choice'. */
int api_tool_choice(const json_t *root, const json_t **object, api_error *err);
/* A response-format object at `path` ("response_format" in chat, "text.format" in responses): its
 * "type" is 0 for text or json_object, 1 for json_schema, -1 (a 400 naming path.type) otherwise. */
int api_format_type(const json_t *format, const char *path, api_error *err);
/* A json_schema format's name, description and schema, read from `def` at `path` (chat nests them
 * in "response_format.json_schema", responses keeps them in "text.format"), checked and set on c. */
int api_format_schema(const json_t *def, const char *path, api_conv *c, api_error *err);
/* system + developer (if instructions, tools or a response format) + the messages, with earlier
 * chain of thought dropped, ending in <|start|>assistant; tokens appended to out. */
int api_conv_render(api_conv *c, const tokenizer *tok, ivec *out, api_error *err);

/* ---- api_structured.c ------------------------------------------------------------------------ */

/* The request's structured-output fields (response_format, text.format, vLLM's structured_outputs
 * and guided_*, strict tools, tool_choice, thinking_token_budget) → call->req.constraint (NULL when
 * nothing is enforced). Runs after the endpoint's own parser has checked the shapes it knows; a
 * bad schema, regex or choice is a 400 naming its field. */
int api_structured_parse(const json_t *root, api_kind kind, const tokenizer *tok, api_call *call,
                         api_error *err);

/* ---- api_hout.c ------------------------------------------------------------------------------ */

typedef enum { HOUT_START, HOUT_TEXT, HOUT_END } hout_ev_kind;

typedef struct {
    hout_ev_kind kind;
    harmony_kind mkind; /* the message's kind */
    size_t msg;         /* the message's index in the output */
    size_t name_off;    /* START of a tool call: the function name in `text` */
    size_t off, len;    /* TEXT: bytes of `text` */
    harmony_end_reason end;
} hout_event;

/* Runs the harmony parser over one choice's sampled tokens. hout_feed collects what one engine
 * output produced; the caller reads ev/text/tok_kind and then calls hout_feed again. */
typedef struct {
    harmony_parser p;
    const tokenizer *tok;
    hout_event *ev;
    size_t n_ev, cap_ev;
    hsb text;      /* text of this feed's events */
    int *tok_kind; /* per token of this feed: harmony_kind of the content it belongs to, -1 */
    size_t cap_tok;
    int n_tok;
    int open_kind; /* kind of the open message (-1 none) */
    bool finished;
    int reasoning_tokens; /* tokens spent inside reasoning messages so far */
} api_hout;

void hout_init(api_hout *h, const tokenizer *tok);
void hout_free(api_hout *h);
/* Feeds n tokens. When `finished`, closes the output and then drops trim_bytes bytes from the end
 * of this feed's text (a stop string), and the tokens entirely inside them (n_tok shrinks). */
void hout_feed(api_hout *h, const int32_t *tokens, int n, bool finished, int trim_bytes);
/* The function name of a START event. */
static inline const char *hout_name(const api_hout *h, const hout_event *e) {
    return h->text.s + e->name_off;
}

/* Number of whole tokens at the end of tokens[0..n) covered by the last trim_bytes bytes of their
 * decoded text (special tokens count as no bytes). */
int api_tokens_in_tail(const tokenizer *tok, const int32_t *tokens, int n, int trim_bytes);
/* Drops up to `bytes` bytes from the end of b, never leaving half a UTF-8 character. Returns the
 * bytes not dropped because b was shorter. */
size_t api_trim_utf8(char *s, size_t *len, size_t bytes);

/* ---- api_logprobs.c -------------------------------------------------------------------------- */

/* One token of chat logprobs: {token, logprob, bytes, top_logprobs[]}. i: the token's row in o. */
json_t *api_chat_logprob(const tokenizer *tok, const engine_output *o, int i, int top);
/* The text of a token for logprobs: its bytes, repaired to UTF-8 (heap). */
char *api_token_text(const tokenizer *tok, int32_t id, size_t *len);

/* ---- ids ------------------------------------------------------------------------------------- */

/* A deterministic id for the k-th item of a response: prefix + 24 characters of [A-Za-z0-9] drawn
 * from (response id, choice, k), so ids are unique per response and repeatable in tests. */
void api_make_id(char *buf, size_t cap, const char *prefix, const char *response_id, int choice,
                 int k);

/* ---- streams --------------------------------------------------------------------------------- */

typedef struct api_chat_state api_chat_state;
typedef struct api_cmpl_state api_cmpl_state;
typedef struct api_resp_state api_resp_state;

struct api_stream {
    api_kind kind;
    bool stream, include_usage, echo, background;
    char *id, *model;
    long created;
    const tokenizer *tok;
    api_opts opts;
    int n, n_finished; /* choices: prompts × samples per prompt */
    int n_per;         /* samples per prompt (the request's n) */
    int prompt_tokens, cached_tokens, completion_tokens, reasoning_tokens;
    int status; /* HTTP status of the non-streamed body */
    bool done;
    api_chat_state *chat;
    api_cmpl_state *cmpl;
    api_resp_state *resp;
};

/* Usage counters from a final output (prompt counted once, completion summed over choices). */
void api_stream_count(api_stream *s, const engine_output *o);
/* {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details"} */
json_t *api_usage_json(const api_stream *s, bool with_reasoning);
/* The stop_reason vLLM reports: the stop token id, the stop string, or null. */
json_t *api_stop_reason(const api_stream *s, const engine_output *o);
/* The error object for an output that finished with "error". */
json_t *api_engine_error_json(void);

int api_chat_stream_init(api_stream *s);
int api_chat_stream_feed(api_stream *s, const engine_output *o, char **out, size_t *out_len);
void api_chat_stream_free(api_stream *s);
int api_cmpl_stream_init(api_stream *s);
int api_cmpl_stream_feed(api_stream *s, const engine_output *o, char **out, size_t *out_len);
void api_cmpl_stream_free(api_stream *s);
int api_resp_stream_init(api_stream *s);
int api_resp_stream_feed(api_stream *s, const engine_output *o, char **out, size_t *out_len);
void api_resp_stream_free(api_stream *s);

#endif
