/* /v1/chat/completions output: harmony messages → reasoning, content and tool calls.
 *
 *   analysis                          `reasoning` and `reasoning_content` (the same text: vLLM
 *                                     renamed the field and clients read either; spec §3a)
 *   final, commentary w/o recipient   `content` (preambles are meant for the user)
 *   to=functions.X (any channel)      `tool_calls[{id: "call_…", type: "function",
 *                                     function: {name: X, arguments}}]`, finish_reason "tool_calls"
 *   built-in tool calls, other        dropped (no built-in tools are offered)
 * Several messages of one kind are joined by "\n" (as vLLM joins them), the same way in streamed
 * deltas and in the whole body. The stop tokens <|return|> and <|call|> never reach the text.
 *
 * Streaming follows OpenAI and vLLM: per choice a first chunk {role: "assistant", content: ""},
 * then one chunk per engine output whose delta carries whatever that output added (reasoning,
 * content, tool_calls entries: the opening {index, id, type, function: {name, arguments: ""}}, then
 * {index, function: {arguments}} pieces), the finish_reason on the choice's last chunk; a usage
 * chunk (choices: []) when stream_options.include_usage; then "data: [DONE]".
 *
 * finish_reason: "stop", "tool_calls" (a tool call was made and the model stopped), "length", and
 * vLLM's "abort" for a request cancelled by the server. An engine failure mid-stream is sent as
 * data: {"error": {...}}; without streaming the body is that error with status 500.
 *
 * Logprobs (`logprobs: true`, `top_logprobs` alternatives): `logprobs.content` lists the tokens of
 * the visible content, in order, so it lines up with `content`. Reasoning tokens are listed apart
 * in `logprobs.reasoning` (an extension; omitted with include_reasoning: false). Header tokens,
 * terminators and tool-call arguments carry none. */
#include "api/api_internal.h"

#include "base/xalloc.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    char id[48];
    char *name;
    hsb args;
} chat_call;

typedef struct {
    api_hout h;
    bool started, finished, errored;
    size_t content_len, reasoning_len; /* text emitted so far */
    bool content_sep, reasoning_sep;   /* a "\n" is due before the next text */
    int cur_call;
    chat_call *calls;
    int n_calls;
    hsb content, reasoning; /* whole texts (non-streaming) */
    json_t *lp_content, *lp_reasoning;
    const char *finish_reason;
    json_t *stop_reason;
} chat_choice;

struct api_chat_state {
    chat_choice *ch;
};

int api_chat_stream_init(api_stream *s) {
    s->chat = xcalloc(1, sizeof *s->chat);
    s->chat->ch = xcalloc((size_t)s->n, sizeof *s->chat->ch);
    for (int i = 0; i < s->n; i++) {
        hout_init(&s->chat->ch[i].h, s->tok);
        s->chat->ch[i].cur_call = -1;
        s->chat->ch[i].lp_content = json_array();
        s->chat->ch[i].lp_reasoning = json_array();
    }
    return 0;
}

void api_chat_stream_free(api_stream *s) {
    if (!s->chat) return;
    for (int i = 0; i < s->n; i++) {
        chat_choice *c = &s->chat->ch[i];
        hout_free(&c->h);
        for (int k = 0; k < c->n_calls; k++) free(c->calls[k].name), hsb_free(&c->calls[k].args);
        free(c->calls);
        hsb_free(&c->content);
        hsb_free(&c->reasoning);
        json_decref(c->lp_content);
        json_decref(c->lp_reasoning);
        json_decref(c->stop_reason);
    }
    free(s->chat->ch);
    free(s->chat);
    s->chat = NULL;
}

static bool is_content(int kind) {
    return kind == HARMONY_KIND_FINAL || kind == HARMONY_KIND_PREAMBLE;
}

/* What one engine output adds to a choice. */
typedef struct {
    hsb content, reasoning;
    json_t *calls; /* delta entries */
    json_t *lp_content, *lp_reasoning;
} chat_delta;

static void add_text(hsb *whole, hsb *part, size_t *emitted, bool *sep, const char *t, size_t n) {
    if (!n) return;
    if (*sep) {
        hsb_addc(part, '\n');
        hsb_addc(whole, '\n');
        *sep = false;
    }
    hsb_addn(part, t, n);
    hsb_addn(whole, t, n);
    *emitted += n;
}

/* Arguments of call k: appended to the delta's last entry when it is the same call's. */
static void add_args(chat_delta *d, int k, const char *t, size_t n) {
    size_t last = json_array_size(d->calls);
    json_t *e = last ? json_array_get(d->calls, last - 1) : NULL;
    /* (Never into the opening entry: like vLLM, it carries arguments "".) */
    if (e && json_integer_value(json_object_get(e, "index")) == k && !json_object_get(e, "id")) {
        json_t *fn = json_object_get(e, "function");
        const char *old = json_string_value(json_object_get(fn, "arguments"));
        hsb b = {0};
        hsb_add(&b, old ? old : "");
        hsb_addn(&b, t, n);
        json_object_set_new(fn, "arguments", api_jstr(b.s, b.len));
        hsb_free(&b);
        return;
    }
    json_array_append_new(d->calls, json_pack("{siso}", "index", k, "function",
                                              json_pack("{so}", "arguments", api_jstr(t, n))));
}

static void collect(api_stream *s, chat_choice *c, const engine_output *o, chat_delta *d) {
    api_hout *h = &c->h;
    bool show_reasoning = s->opts.include_reasoning;
    for (size_t i = 0; i < h->n_ev; i++) {
        const hout_event *e = &h->ev[i];
        if (e->kind == HOUT_START) {
            if (e->mkind == HARMONY_KIND_TOOL_CALL) {
                int k = c->n_calls++;
                c->calls = xrealloc(c->calls, (size_t)c->n_calls * sizeof *c->calls);
                chat_call *call = &c->calls[k];
                memset(call, 0, sizeof *call);
                api_make_id(call->id, sizeof call->id, "call_", s->id, o->index, k);
                call->name = xstrdup(hout_name(h, e));
                c->cur_call = k;
                json_array_append_new(d->calls, json_pack("{sisssss{ssss}}", "index", k, "id",
                                                          call->id, "type", "function", "function",
                                                          "name", call->name, "arguments", ""));
            } else if (is_content(e->mkind)) {
                c->content_sep = c->content_len > 0;
            } else if (e->mkind == HARMONY_KIND_REASONING) {
                c->reasoning_sep = c->reasoning_len > 0;
            }
        } else if (e->kind == HOUT_TEXT) {
            const char *t = h->text.s + e->off;
            if (is_content(e->mkind))
                add_text(&c->content, &d->content, &c->content_len, &c->content_sep, t, e->len);
            else if (e->mkind == HARMONY_KIND_REASONING && show_reasoning)
                add_text(&c->reasoning, &d->reasoning, &c->reasoning_len, &c->reasoning_sep, t,
                         e->len);
            else if (e->mkind == HARMONY_KIND_TOOL_CALL && c->cur_call >= 0 && e->len) {
                hsb_addn(&c->calls[c->cur_call].args, t, e->len);
                add_args(d, c->cur_call, t, e->len);
            }
        } else if (e->mkind == HARMONY_KIND_TOOL_CALL) {
            c->cur_call = -1;
        }
    }
    if (s->opts.logprobs) {
        for (int i = 0; i < h->n_tok && i < o->n_tokens; i++) {
            if (is_content(h->tok_kind[i]))
                json_array_append_new(d->lp_content,
                                      api_chat_logprob(s->tok, o, i, s->opts.top_logprobs));
            else if (h->tok_kind[i] == HARMONY_KIND_REASONING && show_reasoning)
                json_array_append_new(d->lp_reasoning,
                                      api_chat_logprob(s->tok, o, i, s->opts.top_logprobs));
        }
    }
}

static const char *finish_reason(const chat_choice *c, const engine_output *o) {
    const char *r = o->finish_reason ? o->finish_reason : "stop";
    if (!strcmp(r, "stop") && c->n_calls > 0) return "tool_calls";
    return r;
}

static json_t *chunk(const api_stream *s, json_t *choice) {
    json_t *ch = json_pack("{sssssIsss[o]}", "id", s->id, "object", "chat.completion.chunk",
                           "created", (json_int_t)s->created, "model", s->model, "choices", choice);
    if (s->include_usage) json_object_set_new(ch, "usage", json_null());
    return ch;
}

static json_t *logprobs_json(const api_stream *s, json_t *content, json_t *reasoning) {
    if (!s->opts.logprobs) return json_null();
    json_t *lp = json_pack("{sO}", "content", content);
    if (json_array_size(reasoning)) json_object_set(lp, "reasoning", reasoning);
    return lp;
}

static void stream_out(api_stream *s, chat_choice *c, const engine_output *o, chat_delta *d,
                       char **out, size_t *out_len) {
    if (!c->started) {
        c->started = true;
        json_t *role = json_pack("{sis{ssss}snsn}", "index", o->index, "delta", "role", "assistant",
                                 "content", "", "logprobs", "finish_reason");
        api_out_sse(out, out_len, chunk(s, role));
    }
    if (c->errored) {
        api_out_sse(out, out_len, json_pack("{so}", "error", api_engine_error_json()));
        return;
    }
    bool any = d->content.len || d->reasoning.len || json_array_size(d->calls) ||
               json_array_size(d->lp_content) || json_array_size(d->lp_reasoning);
    if (!any && !c->finished) return;
    json_t *delta = json_object();
    if (d->content.len)
        json_object_set_new(delta, "content", api_jstr(d->content.s, d->content.len));
    if (d->reasoning.len) {
        json_object_set_new(delta, "reasoning", api_jstr(d->reasoning.s, d->reasoning.len));
        json_object_set_new(delta, "reasoning_content", api_jstr(d->reasoning.s, d->reasoning.len));
    }
    if (json_array_size(d->calls)) json_object_set(delta, "tool_calls", d->calls);
    json_t *choice = json_pack("{siso}", "index", o->index, "delta", delta);
    json_object_set_new(choice, "logprobs",
                        json_array_size(d->lp_content) || json_array_size(d->lp_reasoning)
                            ? logprobs_json(s, d->lp_content, d->lp_reasoning)
                            : json_null());
    json_object_set_new(choice, "finish_reason",
                        c->finished ? json_string(c->finish_reason) : json_null());
    if (c->finished) json_object_set(choice, "stop_reason", c->stop_reason);
    api_out_sse(out, out_len, chunk(s, choice));
}

static json_t *message_json(const api_stream *s, const chat_choice *c) {
    json_t *m = json_pack("{ss}", "role", "assistant");
    bool empty = c->content.len == 0;
    json_object_set_new(m, "content",
                        empty && c->n_calls ? json_null() : api_jstr(c->content.s, c->content.len));
    if (s->opts.include_reasoning && c->reasoning.len) {
        json_object_set_new(m, "reasoning", api_jstr(c->reasoning.s, c->reasoning.len));
        json_object_set_new(m, "reasoning_content", api_jstr(c->reasoning.s, c->reasoning.len));
    }
    if (c->n_calls) {
        json_t *calls = json_array();
        for (int k = 0; k < c->n_calls; k++)
            json_array_append_new(
                calls, json_pack("{sssss{ssso}}", "id", c->calls[k].id, "type", "function",
                                 "function", "name", c->calls[k].name, "arguments",
                                 api_jstr(c->calls[k].args.s, c->calls[k].args.len)));
        json_object_set_new(m, "tool_calls", calls);
    }
    return m;
}

static void body_out(api_stream *s, char **out, size_t *out_len) {
    for (int i = 0; i < s->n; i++)
        if (s->chat->ch[i].errored) {
            s->status = 500;
            api_out_json(out, out_len, json_pack("{so}", "error", api_engine_error_json()));
            return;
        }
    json_t *choices = json_array();
    for (int i = 0; i < s->n; i++) {
        chat_choice *c = &s->chat->ch[i];
        json_t *ch = json_pack("{siso}", "index", i, "message", message_json(s, c));
        json_object_set_new(ch, "logprobs", logprobs_json(s, c->lp_content, c->lp_reasoning));
        json_object_set_new(ch, "finish_reason", json_string(c->finish_reason));
        json_object_set(ch, "stop_reason", c->stop_reason);
        json_array_append_new(choices, ch);
    }
    json_t *body = json_pack("{sssssIssso}", "id", s->id, "object", "chat.completion", "created",
                             (json_int_t)s->created, "model", s->model, "choices", choices);
    json_object_set_new(body, "usage", api_usage_json(s, true));
    api_out_json(out, out_len, body);
}

int api_chat_stream_feed(api_stream *s, const engine_output *o, char **out, size_t *out_len) {
    chat_choice *c = &s->chat->ch[o->index];
    if (c->finished) return 0;
    hout_feed(&c->h, o->tokens, o->n_tokens, o->finished, o->trim_bytes);
    chat_delta d = {
        .calls = json_array(), .lp_content = json_array(), .lp_reasoning = json_array()};
    collect(s, c, o, &d);
    json_array_extend(c->lp_content, d.lp_content);
    json_array_extend(c->lp_reasoning, d.lp_reasoning);
    if (o->finished) {
        c->finished = true;
        c->finish_reason = finish_reason(c, o);
        c->errored = !strcmp(c->finish_reason, "error");
        c->stop_reason = api_stop_reason(s, o);
        s->n_finished++;
        s->reasoning_tokens += c->h.reasoning_tokens;
        api_stream_count(s, o);
    }
    if (s->stream) stream_out(s, c, o, &d, out, out_len);
    hsb_free(&d.content);
    hsb_free(&d.reasoning);
    json_decref(d.calls);
    json_decref(d.lp_content);
    json_decref(d.lp_reasoning);
    if (s->n_finished < s->n) return 0;
    if (s->stream) {
        if (s->include_usage) {
            json_t *u = json_pack("{sssssIsss[]}", "id", s->id, "object", "chat.completion.chunk",
                                  "created", (json_int_t)s->created, "model", s->model, "choices");
            json_object_set_new(u, "usage", api_usage_json(s, true));
            api_out_sse(out, out_len, u);
        }
        api_out_add(out, out_len, "data: [DONE]\n\n", 14);
    } else {
        body_out(s, out, out_len);
    }
    s->done = true;
    return 1;
}
