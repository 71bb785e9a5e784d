/* The OpenAI API layer: HTTP request bodies → engine requests, engine outputs → response JSON.
 *
 * Pure functions of their inputs, no sockets and no threads, so every mapping is unit-tested without
 * a server; src/server calls them on its event-loop threads (never on the engine thread).
 *
 *   api_parse_*      validate a request body (every bad field gets an OpenAI-style error that names it)
 *                    and build the engine request: for chat and responses the conversation is
 *                    rendered with harmony and tokenised here.
 *   api_stream_*     per request: fed every engine_output of the request (in order), produces the
 *                    response: SSE events when streaming ("data: {...}\n\n" strings, and the final
 *                    "data: [DONE]\n\n" for chat/completions; typed events for responses), or the one
 *                    JSON body when not. For chat and responses it runs the streaming harmony parser
 *                    over the tokens: analysis → reasoning (fields `reasoning` and
 *                    `reasoning_content`), final → content, commentary to=functions.X → tool_calls
 *                    (finish_reason "tool_calls"), commentary without recipient → preamble content.
 *
 * Errors: {"error": {"message", "type", "param", "code"}} with the HTTP status in api_error.status. */
#ifndef GPTOSS_API_API_H
#define GPTOSS_API_API_H

#include "api/response_store.h"
#include "engine/engine.h"
#include "tokenizer/bpe.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum { API_COMPLETIONS, API_CHAT, API_RESPONSES } api_kind;

typedef struct {
    int status; /* 400, 401, 404, 413, 429, 503, 500 */
    char message[512];
    char type[64];  /* "invalid_request_error", ... */
    char param[64]; /* the offending field ("messages[2].content"), or "" */
    char code[64];  /* or "" */
} api_error;

/* Server-wide settings the mapping needs. */
typedef struct {
    const char *served_model_name; /* requests naming another model get 404 */
    int max_model_len;
    int default_max_tokens;   /* when the request gives none: max_model_len - prompt */
    const char *current_date; /* "YYYY-MM-DD" for the harmony system message; NULL: today
                                      (local time); "": no "Current date" line */
    size_t max_echo_bytes;    /* completions: n × the echoed prompt (text and logprobs) may make at
                              most about this many response bytes; 0: no limit */
    resp_store *store;        /* responses: previous_response_id, item_reference and store: true
                                 (NULL: nothing is stored; those inputs are a 400) */
} api_config;

/* A parsed request. Owns everything it points to (free with api_call_free). */
typedef struct api_call {
    api_kind kind;
    engine_request req; /* prompt, params, stops, n ... (on_output/user/id set by the server) */
    bool stream, include_usage, echo;
    bool background; /* responses: answer at once, generate on, keep the result in the store */
    char *model;     /* as given */
    void *priv;      /* per-kind state (tools, reasoning settings, prompt text for echo, ...) */
} api_call;

int api_parse_completions(const char *body, size_t len, const tokenizer *tok, const api_config *cfg,
                          api_call *out, api_error *err);
int api_parse_chat(const char *body, size_t len, const tokenizer *tok, const api_config *cfg,
                   api_call *out, api_error *err);
int api_parse_responses(const char *body, size_t len, const tokenizer *tok, const api_config *cfg,
                        api_call *out, api_error *err);
void api_call_free(api_call *c);
/* Completions with a list of prompts become one engine request per prompt, each with the call's
 * n samples; the stream's choice index is prompt × n + sample. api_call_request fills *out with
 * call->req for prompt p (its tokens and max_tokens; the pointers stay the call's). */
int api_call_n_prompts(const api_call *c);
void api_call_request(const api_call *c, int p, engine_request *out);

/* The output side of one request. */
typedef struct api_stream api_stream;

/* created/id: the response id ("chatcmpl-…", "cmpl-…", "resp_…") and creation time. The stream
 * copies what it needs from the call: the call may be freed once the request is submitted. */
api_stream *api_stream_new(const api_call *call, const tokenizer *tok, const char *id,
                           long created);
/* Appends to *out (a growing heap string, *out_len bytes) what the client must receive for this
 * engine output: zero or more SSE events when streaming; when not streaming nothing until the
 * final output, then the whole JSON body. Returns 1 when the response is complete. */
int api_stream_feed(api_stream *s, const engine_output *o, char **out, size_t *out_len);
void api_stream_free(api_stream *s);
/* A background response (call.background): stores it as "queued" and returns the body the POST
 * answers with at once (heap, *len bytes). The engine's outputs are fed as usual afterwards, with
 * nothing to send: the stream keeps the response in the store as "in_progress", then final. */
char *api_stream_background_start(api_stream *s, size_t *len);
/* The HTTP status for the non-streamed body once complete: 200, or 500 when the engine failed (the
 * body is then an error object). Streams always start 200; a failure mid-stream is sent as an
 * error event. */
int api_stream_status(const api_stream *s);

/* Fills err and returns the JSON error body (heap string). */
char *api_error_json(const api_error *err);
void api_error_set(api_error *err, int status, const char *type, const char *param, const char *fmt,
                   ...) __attribute__((format(printf, 5, 6)));

#endif
