/* The output side of a request: the per-kind streams behind one interface, and what they share
 * (usage, stop_reason, the error for a failed output). */
#include "api/api_internal.h"

#include "base/xalloc.h"

#include <string.h>

api_stream *api_stream_new(const api_call *call, const tokenizer *tok, const char *id,
                           long created) {
    api_stream *s = xcalloc(1, sizeof *s);
    s->kind = call->kind;
    s->stream = call->stream;
    s->include_usage = call->include_usage;
    s->echo = call->echo;
    s->background = call->background;
    s->id = xstrdup(id ? id : "");
    s->model = xstrdup(call->model ? call->model : "");
    s->created = created;
    s->tok = tok;
    if (call->priv) api_opts_copy(&s->opts, api_call_opts(call));
    s->n_per = call->req.n > 0 ? call->req.n : 1;
    s->n = s->n_per * api_call_n_prompts(call);
    s->prompt_tokens = call->req.n_prompt;
    if (s->opts.n_prompts > 1) {
        s->prompt_tokens = 0;
        for (int p = 0; p < s->opts.n_prompts; p++) s->prompt_tokens += s->opts.prompts[p].n;
    }
    s->status = 200;
    switch (s->kind) {
    case API_CHAT:
        api_chat_stream_init(s);
        break;
    case API_COMPLETIONS:
        api_cmpl_stream_init(s);
        break;
    case API_RESPONSES:
        api_resp_stream_init(s);
        break;
    }
    return s;
}

int api_stream_feed(api_stream *s, const engine_output *o, char **out, size_t *out_len) {
    if (s->done) return 1;
    if (o->index < 0 || o->index >= s->n) return 0; /* not one of ours: ignore rather than crash */
    switch (s->kind) {
    case API_CHAT:
        return api_chat_stream_feed(s, o, out, out_len);
    case API_COMPLETIONS:
        return api_cmpl_stream_feed(s, o, out, out_len);
    case API_RESPONSES:
        return api_resp_stream_feed(s, o, out, out_len);
    }
    return 0;
}

int api_stream_status(const api_stream *s) {
    return s->status;
}

void api_stream_free(api_stream *s) {
    if (!s) return;
    switch (s->kind) {
    case API_CHAT:
        api_chat_stream_free(s);
        break;
    case API_COMPLETIONS:
        api_cmpl_stream_free(s);
        break;
    case API_RESPONSES:
        api_resp_stream_free(s);
        break;
    }
    api_opts_free(&s->opts);
    free(s->id);
    free(s->model);
    free(s);
}

void api_stream_count(api_stream *s, const engine_output *o) {
    /* Several prompts: their sum, counted at the start (vLLM counts each prompt once). */
    if (o->prompt_tokens > 0 && s->opts.n_prompts <= 1) s->prompt_tokens = o->prompt_tokens;
    /* n > 1: each prompt's first sample's figure (the others share its prefix and may hit the
     * cache). */
    if (o->index % s->n_per == 0) s->cached_tokens += o->cached_tokens;
    s->completion_tokens += o->completion_tokens;
}

json_t *api_usage_json(const api_stream *s, bool with_reasoning) {
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(s->prompt_tokens));
    json_object_set_new(u, "completion_tokens", json_integer(s->completion_tokens));
    json_object_set_new(u, "total_tokens", json_integer(s->prompt_tokens + s->completion_tokens));
    json_object_set_new(u, "prompt_tokens_details",
                        json_pack("{si}", "cached_tokens", s->cached_tokens));
    if (with_reasoning)
        json_object_set_new(u, "completion_tokens_details",
                            json_pack("{si}", "reasoning_tokens", s->reasoning_tokens));
    return u;
}

json_t *api_stop_reason(const api_stream *s, const engine_output *o) {
    if (o->stop_string >= 0 && o->stop_string < s->opts.n_stop)
        return json_string(s->opts.stop[o->stop_string]);
    if (o->stop_token >= 0) return json_integer(o->stop_token);
    return json_null();
}

json_t *api_engine_error_json(void) {
    return json_pack("{sssssnsn}", "message", "The model failed while generating this response",
                     "type", "server_error", "param", "code");
}
