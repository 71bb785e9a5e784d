/* /v1/responses output: each harmony message becomes one output item.
 *
 *   analysis                        {type: "reasoning", id: "rs_…", summary: [],
 *                                    content: [{type: "reasoning_text", text}]}
 *   final, commentary w/o recipient {type: "message", id: "msg_…", role: "assistant", status,
 *                                    content: [{type: "output_text", text, annotations: []}]}
 *   to=functions.X                  {type: "function_call", id: "fc_…", call_id: "call_…",
 *                                    name: X, arguments, status}
 *   anything else                   no item
 * The response: {id: "resp_…", object: "response", created_at, status, model, output, usage
 * {input_tokens, output_tokens, total_tokens, input_tokens_details.cached_tokens,
 * output_tokens_details.reasoning_tokens}, incomplete_details, error, and the request's settings}.
 * status: "completed"; "incomplete" with incomplete_details.reason "max_output_tokens" when the
 * output hit the limit; "cancelled" when aborted; "failed" with an error when the engine failed.
 *
 * Streaming (OpenAI's event names and shapes; every event has `type` and a `sequence_number`
 * counting from 0, sent as "event: TYPE\ndata: {...}"):
 *   response.created, response.in_progress                  {response} (status "in_progress")
 *   per item: response.output_item.added                    {output_index, item}
 *     reasoning: response.content_part.added {item_id, output_index, content_index: 0, part},
 *                response.reasoning_text.delta {…, delta}, response.reasoning_text.done {…, text},
 *                response.content_part.done
 *     message:   the same with response.output_text.delta / .done ({…, logprobs: []})
 *     function_call: response.function_call_arguments.delta {item_id, output_index, delta},
 *                .done {…, name, arguments}
 *   response.output_item.done {output_index, item}
 *   and last response.completed, response.incomplete or response.failed {response}.
 * No "data: [DONE]" (OpenAI sends none for this endpoint). */
#include "api/api_internal.h"

#include "base/xalloc.h"

#include <string.h>

enum { ITEM_REASONING, ITEM_MESSAGE, ITEM_CALL };

typedef struct {
    int type;
    char id[48], call_id[48];
    char *name;
    hsb text;
    const char *status;
} resp_item;

struct api_resp_state {
    api_hout h;
    resp_item *items;
    int n_items;
    int open; /* the item receiving text, or -1 */
    long seq;
    bool started, finished;
    const char *finish_reason;
};

int api_resp_stream_init(api_stream *s) {
    s->resp = xcalloc(1, sizeof *s->resp);
    hout_init(&s->resp->h, s->tok);
    s->resp->open = -1;
    return 0;
}

void api_resp_stream_free(api_stream *s) {
    if (!s->resp) return;
    hout_free(&s->resp->h);
    for (int i = 0; i < s->resp->n_items; i++)
        free(s->resp->items[i].name), hsb_free(&s->resp->items[i].text);
    free(s->resp->items);
    free(s->resp);
    s->resp = NULL;
}

/* Sends an event: `type` and `sequence_number` first (as OpenAI writes them), then ev's fields. */
static void emit(api_stream *s, char **out, size_t *out_len, const char *type, json_t *ev) {
    json_t *e = json_pack("{sssI}", "type", type, "sequence_number", (json_int_t)s->resp->seq++);
    json_object_update(e, ev);
    json_decref(ev);
    api_out_event(out, out_len, type, e);
}

static json_t *part_json(const resp_item *it) {
    if (it->type == ITEM_REASONING)
        return json_pack("{ssso}", "type", "reasoning_text", "text",
                         api_jstr(it->text.s, it->text.len));
    return json_pack("{sssos[]s[]}", "type", "output_text", "text",
                     api_jstr(it->text.s, it->text.len), "annotations", "logprobs");
}

/* The item as it stands (done: with its text). */
static json_t *item_json(const resp_item *it, bool done) {
    switch (it->type) {
    case ITEM_REASONING:
        return json_pack("{sssss[]so}", "type", "reasoning", "id", it->id, "summary", "content",
                         done ? json_pack("[o]", part_json(it)) : json_array());
    case ITEM_MESSAGE:
        return json_pack("{ssssssssso}", "type", "message", "id", it->id, "status", it->status,
                         "role", "assistant", "content",
                         done ? json_pack("[o]", part_json(it)) : json_array());
    default:
        return json_pack("{sssssssssoss}", "type", "function_call", "id", it->id, "call_id",
                         it->call_id, "name", it->name, "arguments",
                         api_jstr(it->text.s, it->text.len), "status", it->status);
    }
}

static json_t *response_json(api_stream *s, const char *status, bool final) {
    json_t *r = json_object();
    json_object_set_new(r, "id", json_string(s->id));
    json_object_set_new(r, "object", json_string("response"));
    json_object_set_new(r, "created_at", json_integer(s->created));
    json_object_set_new(r, "status", json_string(status));
    json_object_set_new(r, "model", json_string(s->model));
    json_t *output = json_array();
    for (int i = 0; final && i < s->resp->n_items; i++)
        json_array_append_new(output, item_json(&s->resp->items[i], true));
    json_object_set_new(r, "output", output);
    json_object_set_new(r, "error",
                        !strcmp(status, "failed")
                            ? json_pack("{ssss}", "code", "server_error", "message",
                                        "The model failed while generating this response")
                            : json_null());
    json_object_set_new(r, "incomplete_details",
                        !strcmp(status, "incomplete")
                            ? json_pack("{ss}", "reason", "max_output_tokens")
                            : json_null());
    if (final) {
        json_object_set_new(r, "usage",
                            json_pack("{sis{si}sis{si}si}", "input_tokens", s->prompt_tokens,
                                      "input_tokens_details", "cached_tokens", s->cached_tokens,
                                      "output_tokens", s->completion_tokens,
                                      "output_tokens_details", "reasoning_tokens",
                                      s->reasoning_tokens, "total_tokens",
                                      s->prompt_tokens + s->completion_tokens));
    } else {
        json_object_set_new(r, "usage", json_null());
    }
    if (s->opts.echo) json_object_update_missing(r, s->opts.echo);
    return r;
}

static void open_item(api_stream *s, const hout_event *e, char **out, size_t *out_len) {
    api_resp_state *st = s->resp;
    int type;
    if (e->mkind == HARMONY_KIND_REASONING && s->opts.include_reasoning)
        type = ITEM_REASONING;
    else if (e->mkind == HARMONY_KIND_FINAL || e->mkind == HARMONY_KIND_PREAMBLE)
        type = ITEM_MESSAGE;
    else if (e->mkind == HARMONY_KIND_TOOL_CALL)
        type = ITEM_CALL;
    else {
        st->open = -1;
        return;
    }
    st->items = xrealloc(st->items, (size_t)(st->n_items + 1) * sizeof *st->items);
    int k = st->n_items++;
    resp_item *it = &st->items[k];
    memset(it, 0, sizeof *it);
    it->type = type;
    it->status = "in_progress";
    static const char *const prefix[] = {"rs_", "msg_", "fc_"};
    api_make_id(it->id, sizeof it->id, prefix[type], s->id, 0, k);
    if (type == ITEM_CALL) {
        api_make_id(it->call_id, sizeof it->call_id, "call_", s->id, 1, k);
        it->name = xstrdup(hout_name(&st->h, e));
    }
    st->open = k;
    if (!s->stream) return;
    emit(s, out, out_len, "response.output_item.added",
         json_pack("{siso}", "output_index", k, "item", item_json(it, false)));
    if (type != ITEM_CALL)
        emit(s, out, out_len, "response.content_part.added",
             json_pack("{sssisiso}", "item_id", it->id, "output_index", k, "content_index", 0,
                       "part", part_json(it)));
}

static void item_text(api_stream *s, const char *t, size_t n, char **out, size_t *out_len) {
    api_resp_state *st = s->resp;
    if (st->open < 0 || !n) return;
    int k = st->open;
    resp_item *it = &st->items[k];
    hsb_addn(&it->text, t, n);
    if (!s->stream) return;
    if (it->type == ITEM_CALL)
        emit(s, out, out_len, "response.function_call_arguments.delta",
             json_pack("{sssiso}", "item_id", it->id, "output_index", k, "delta", api_jstr(t, n)));
    else if (it->type == ITEM_REASONING)
        emit(s, out, out_len, "response.reasoning_text.delta",
             json_pack("{sssisiso}", "item_id", it->id, "output_index", k, "content_index", 0,
                       "delta", api_jstr(t, n)));
    else
        emit(s, out, out_len, "response.output_text.delta",
             json_pack("{sssisisos[]}", "item_id", it->id, "output_index", k, "content_index", 0,
                       "delta", api_jstr(t, n), "logprobs"));
}

static void close_item(api_stream *s, harmony_end_reason why, char **out, size_t *out_len) {
    api_resp_state *st = s->resp;
    if (st->open < 0) return;
    int k = st->open;
    st->open = -1;
    resp_item *it = &st->items[k];
    it->status = why == HARMONY_END_TRUNCATED ? "incomplete" : "completed";
    if (!s->stream) return;
    json_t *text = api_jstr(it->text.s, it->text.len);
    if (it->type == ITEM_CALL) {
        emit(s, out, out_len, "response.function_call_arguments.done",
             json_pack("{sssisssO}", "item_id", it->id, "output_index", k, "name", it->name,
                       "arguments", text));
    } else {
        if (it->type == ITEM_REASONING)
            emit(s, out, out_len, "response.reasoning_text.done",
                 json_pack("{sssisisO}", "item_id", it->id, "output_index", k, "content_index", 0,
                           "text", text));
        else
            emit(s, out, out_len, "response.output_text.done",
                 json_pack("{sssisisOs[]}", "item_id", it->id, "output_index", k, "content_index",
                           0, "text", text, "logprobs"));
        emit(s, out, out_len, "response.content_part.done",
             json_pack("{sssisiso}", "item_id", it->id, "output_index", k, "content_index", 0,
                       "part", part_json(it)));
    }
    json_decref(text);
    emit(s, out, out_len, "response.output_item.done",
         json_pack("{siso}", "output_index", k, "item", item_json(it, true)));
}

char *api_stream_background_start(api_stream *s, size_t *len) {
    json_t *r = response_json(s, "queued", false);
    if (s->opts.store)
        resp_store_put(s->opts.store, s->id, r, s->opts.store_items,
                       json_array_size(s->opts.store_items));
    char *body = json_dumps(r, JSON_COMPACT);
    json_decref(r);
    *len = body ? strlen(body) : 0;
    return body;
}

/* The conversation so far (input items, then this response's output items) under the response's
 * id, for previous_response_id, item_reference and GET. */
static void store_response(api_stream *s, const json_t *r) {
    json_t *items = s->opts.store_items ? s->opts.store_items : json_array();
    s->opts.store_items = NULL;
    size_t n_input = json_array_size(items);
    json_array_extend(items, json_object_get(r, "output"));
    resp_store_put(s->opts.store, s->id, r, items, n_input);
    json_decref(items);
}

int api_resp_stream_feed(api_stream *s, const engine_output *o, char **out, size_t *out_len) {
    api_resp_state *st = s->resp;
    if (st->finished) return 0;
    if (s->stream && !st->started) {
        emit(s, out, out_len, "response.created",
             json_pack("{so}", "response", response_json(s, "in_progress", false)));
        emit(s, out, out_len, "response.in_progress",
             json_pack("{so}", "response", response_json(s, "in_progress", false)));
    }
    /* A background response is polled: show that it has started. */
    if (!st->started && s->opts.store && s->background) {
        json_t *r = response_json(s, "in_progress", false);
        resp_store_put(s->opts.store, s->id, r, s->opts.store_items,
                       json_array_size(s->opts.store_items));
        json_decref(r);
    }
    st->started = true;
    hout_feed(&st->h, o->tokens, o->n_tokens, o->finished, o->trim_bytes);
    for (size_t i = 0; i < st->h.n_ev; i++) {
        const hout_event *e = &st->h.ev[i];
        if (e->kind == HOUT_START)
            open_item(s, e, out, out_len);
        else if (e->kind == HOUT_TEXT)
            item_text(s, st->h.text.s + e->off, e->len, out, out_len);
        else
            close_item(s, e->end, out, out_len);
    }
    if (!o->finished) return 0;
    st->finished = true;
    s->n_finished = s->n;
    s->reasoning_tokens = st->h.reasoning_tokens;
    api_stream_count(s, o);
    const char *fr = o->finish_reason ? o->finish_reason : "stop";
    const char *status = !strcmp(fr, "length")  ? "incomplete"
                         : !strcmp(fr, "abort") ? "cancelled"
                         : !strcmp(fr, "error") ? "failed"
                                                : "completed";
    json_t *r = response_json(s, status, true);
    /* Stored before the client hears of the end, so a GET right after it finds the response. */
    if (s->opts.store) store_response(s, r);
    if (s->stream) {
        const char *ev = !strcmp(status, "completed")    ? "response.completed"
                         : !strcmp(status, "incomplete") ? "response.incomplete"
                                                         : "response.failed";
        emit(s, out, out_len, ev, json_pack("{so}", "response", r));
    } else if (!strcmp(status, "failed")) {
        s->status = 500;
        json_decref(r);
        api_out_json(out, out_len, json_pack("{so}", "error", api_engine_error_json()));
    } else {
        api_out_json(out, out_len, r);
    }
    s->done = true;
    return 1;
}
