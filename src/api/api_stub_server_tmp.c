/* TEMPORARY (wt-server only; delete at merge when src/api lands): the smallest implementation of
 * api.h the server's tests need — /v1/completions with string or token-id prompts, sampling fields,
 * n, stop, seed, logprobs, stream and include_usage. Chat and responses answer 501 here; their
 * mapping belongs to the api layer. */
#include "api/api.h"

#include "base/xalloc.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void api_error_set(api_error *err, int status, const char *type, const char *param, const char *fmt,
                   ...) {
    memset(err, 0, sizeof *err);
    err->status = status;
    snprintf(err->type, sizeof err->type, "%s", type ? type : "");
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
}

char *api_error_json(const api_error *err) {
    json_t *e = json_pack("{s{sssssoso}}", "error", "message", err->message, "type", err->type,
                          "param", err->param[0] ? json_string(err->param) : json_null(), "code",
                          err->code[0] ? json_string(err->code) : json_integer(err->status));
    char *s = json_dumps(e, JSON_COMPACT);
    json_decref(e);
    return s;
}

typedef struct {
    char **stops;
    int n_stops;
    int32_t *stop_ids;
} stub_priv;

void api_call_free(api_call *c) {
    stub_priv *p = c->priv;
    free((void *)c->req.prompt);
    if (p) {
        for (int i = 0; i < p->n_stops; i++) free(p->stops[i]);
        free(p->stops), free(p->stop_ids), free(p);
    }
    free(c->model);
    memset(c, 0, sizeof *c);
}

static int bad(api_error *err, const char *param, const char *msg) {
    api_error_set(err, 400, "invalid_request_error", param, "%s: %s", param, msg);
    return -1;
}

static int num(json_t *o, const char *k, double lo, double hi, double *out, api_error *err) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return bad(err, k, "must be a number");
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) return bad(err, k, "is out of range");
    *out = d;
    return 0;
}

static int boolean(json_t *o, const char *k, bool *out, api_error *err) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return bad(err, k, "must be a boolean");
    *out = json_is_true(v);
    return 0;
}

static int parse_fields(json_t *root, const tokenizer *tok, const api_config *cfg, api_call *c,
                        stub_priv *p, api_error *err) {
    engine_request *r = &c->req;
    json_t *model = json_object_get(root, "model");
    if (model && !json_is_string(model)) return bad(err, "model", "must be a string");
    if (model && cfg->served_model_name &&
        strcmp(json_string_value(model), cfg->served_model_name)) {
        api_error_set(err, 404, "invalid_request_error", "model", "The model `%s` does not exist.",
                      json_string_value(model));
        snprintf(err->code, sizeof err->code, "model_not_found");
        return -1;
    }
    c->model = xstrdup(model ? json_string_value(model) : cfg->served_model_name);
    json_t *prompt = json_object_get(root, "prompt");
    if (json_is_array(prompt) && json_array_size(prompt) == 1 &&
        json_is_string(json_array_get(prompt, 0)))
        prompt = json_array_get(prompt, 0);
    ivec ids = {0};
    if (json_is_string(prompt)) {
        tokenizer_encode_ordinary(tok, json_string_value(prompt), json_string_length(prompt), &ids);
    } else if (json_is_array(prompt) && json_array_size(prompt) > 0) {
        size_t i;
        json_t *v;
        json_array_foreach(prompt, i, v) {
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) > INT32_MAX) {
                ivec_free(&ids);
                return bad(err, "prompt", "must be a string or an array of token ids");
            }
            ivec_push(&ids, (int32_t)json_integer_value(v));
        }
    } else {
        return bad(err, "prompt", "must be a string or an array of token ids");
    }
    if (ids.len == 0) {
        ivec_free(&ids);
        return bad(err, "prompt", "must not be empty");
    }
    r->prompt = ids.v, r->n_prompt = (int)ids.len;
    if ((int)ids.len >= cfg->max_model_len)
        return bad(err, "prompt", "is longer than the model's context");
    r->params = sampling_params_default();
    double d = 16;
    json_t *mt = json_object_get(root, "max_tokens");
    if (mt && !json_is_null(mt) && !json_is_integer(mt))
        return bad(err, "max_tokens", "must be an integer");
    if (num(root, "max_tokens", 1, 1 << 30, &d, err)) return -1;
    r->max_tokens = (int)d;
    d = 1;
    if (num(root, "temperature", 0, 2, &d, err)) return -1;
    r->params.temperature = (float)d;
    d = 1;
    if (num(root, "top_p", 1e-9, 1, &d, err)) return -1;
    r->params.top_p = (float)d;
    d = 0;
    if (num(root, "top_k", -1, 1 << 30, &d, err)) return -1;
    r->params.top_k = (int)d;
    d = 0;
    if (num(root, "min_p", 0, 1, &d, err)) return -1;
    r->params.min_p = (float)d;
    d = 0;
    if (num(root, "presence_penalty", -2, 2, &d, err)) return -1;
    r->params.presence_penalty = (float)d;
    d = 0;
    if (num(root, "frequency_penalty", -2, 2, &d, err)) return -1;
    r->params.frequency_penalty = (float)d;
    d = 1;
    if (num(root, "repetition_penalty", 1e-6, 100, &d, err)) return -1;
    r->params.repetition_penalty = (float)d;
    d = 0;
    if (num(root, "logprobs", 0, 20, &d, err)) return -1;
    r->params.logprobs = (int)d;
    d = 1;
    if (num(root, "n", 1, 128, &d, err)) return -1;
    r->n = (int)d;
    json_t *seed = json_object_get(root, "seed");
    if (seed && !json_is_null(seed)) {
        if (!json_is_integer(seed)) return bad(err, "seed", "must be an integer");
        r->params.seed = (uint64_t)json_integer_value(seed);
        r->params.has_seed = true;
    }
    if (boolean(root, "stream", &c->stream, err) ||
        boolean(root, "ignore_eos", &r->ignore_eos, err) || boolean(root, "echo", &c->echo, err))
        return -1;
    json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return bad(err, "stream_options", "must be an object");
        if (boolean(so, "include_usage", &c->include_usage, err)) return -1;
    }
    json_t *stop = json_object_get(root, "stop");
    if (json_is_string(stop)) {
        p->stops = xmalloc(sizeof *p->stops);
        p->stops[p->n_stops++] = xstrdup(json_string_value(stop));
    } else if (json_is_array(stop)) {
        p->stops = xcalloc(json_array_size(stop) + 1, sizeof *p->stops);
        size_t i;
        json_t *v;
        json_array_foreach(stop, i, v) {
            if (!json_is_string(v) || !json_string_length(v))
                return bad(err, "stop", "must be non-empty strings");
            p->stops[p->n_stops++] = xstrdup(json_string_value(v));
        }
    } else if (stop && !json_is_null(stop)) {
        return bad(err, "stop", "must be a string or an array of strings");
    }
    r->stop_strings = (const char *const *)p->stops, r->n_stop_strings = p->n_stops;
    return 0;
}

int api_parse_completions(const char *body, size_t len, const tokenizer *tok, const api_config *cfg,
                          api_call *out, api_error *err) {
    memset(out, 0, sizeof *out);
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr);
    if (!root) {
        api_error_set(err, 400, "invalid_request_error", "", "invalid JSON body: %s", jerr.text);
        return -1;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        api_error_set(err, 400, "invalid_request_error", "", "the body must be a JSON object");
        return -1;
    }
    out->kind = API_COMPLETIONS;
    stub_priv *p = xcalloc(1, sizeof *p);
    out->priv = p;
    int rc = parse_fields(root, tok, cfg, out, p, err);
    json_decref(root);
    if (rc != 0) api_call_free(out);
    return rc;
}

static int not_here(api_call *out, api_error *err, const char *what) {
    memset(out, 0, sizeof *out);
    api_error_set(err, 501, "not_implemented", "",
                  "%s needs the API layer (src/api), not merged in this build", what);
    return -1;
}

int api_parse_chat(const char *body, size_t len, const tokenizer *tok, const api_config *cfg,
                   api_call *out, api_error *err) {
    (void)body, (void)len, (void)tok, (void)cfg;
    return not_here(out, err, "/v1/chat/completions");
}

int api_parse_responses(const char *body, size_t len, const tokenizer *tok, const api_config *cfg,
                        api_call *out, api_error *err) {
    (void)body, (void)len, (void)tok, (void)cfg;
    return not_here(out, err, "/v1/responses");
}

/* ---- output ---- */

typedef struct {
    tok_stream ts;
    char *text;
    size_t len;
    json_t *lp_tokens, *lp_values, *lp_top;
    char finish[16];
    int completion_tokens;
} stub_choice;

struct api_stream {
    const api_call *call;
    const tokenizer *tok;
    char id[64];
    long created;
    int n, n_done, prompt_tokens;
    stub_choice *ch;
};

api_stream *api_stream_new(const api_call *call, const tokenizer *tok, const char *id,
                           long created) {
    api_stream *s = xcalloc(1, sizeof *s);
    s->call = call, s->tok = tok, s->created = created;
    snprintf(s->id, sizeof s->id, "%s", id);
    s->n = call->req.n > 0 ? call->req.n : 1;
    s->ch = xcalloc((size_t)s->n, sizeof *s->ch);
    for (int i = 0; i < s->n; i++) tok_stream_init(&s->ch[i].ts);
    return s;
}

void api_stream_free(api_stream *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) {
        tok_stream_free(&s->ch[i].ts);
        free(s->ch[i].text);
        json_decref(s->ch[i].lp_tokens), json_decref(s->ch[i].lp_values),
            json_decref(s->ch[i].lp_top);
    }
    free(s->ch);
    free(s);
}

static void append(char **out, size_t *out_len, const char *s, size_t n) {
    *out = xrealloc(*out, *out_len + n + 1);
    memcpy(*out + *out_len, s, n);
    *out_len += n;
    (*out)[*out_len] = 0;
}

static void sse(char **out, size_t *out_len, json_t *v) {
    char *j = json_dumps(v, JSON_COMPACT);
    json_decref(v);
    append(out, out_len, "data: ", 6);
    append(out, out_len, j, strlen(j));
    append(out, out_len, "\n\n", 2);
    free(j);
}

static json_t *usage(const api_stream *s) {
    int comp = 0;
    for (int i = 0; i < s->n; i++) comp += s->ch[i].completion_tokens;
    return json_pack("{sisisi}", "prompt_tokens", s->prompt_tokens, "completion_tokens", comp,
                     "total_tokens", s->prompt_tokens + comp);
}

static json_t *logprobs_json(const stub_choice *c) {
    if (!c->lp_tokens) return json_null();
    return json_pack("{sOsOsOs[]}", "tokens", c->lp_tokens, "token_logprobs", c->lp_values,
                     "top_logprobs", c->lp_top, "text_offset");
}

int api_stream_feed(api_stream *s, const engine_output *o, char **out, size_t *out_len) {
    if (o->index < 0 || o->index >= s->n) return -1;
    stub_choice *c = &s->ch[o->index];
    s->prompt_tokens = o->prompt_tokens;
    char *piece = NULL;
    size_t plen = 0;
    for (int i = 0; i < o->n_tokens; i++) {
        const char *t;
        size_t tl;
        if (tok_stream_push(s->tok, &c->ts, o->tokens[i], &t, &tl) != 0) tl = 0;
        append(&piece, &plen, t, tl);
        if (s->call->req.params.logprobs > 0) {
            if (!c->lp_tokens)
                c->lp_tokens = json_array(), c->lp_values = json_array(), c->lp_top = json_array();
            size_t bl;
            const char *b = tokenizer_token_bytes(s->tok, o->tokens[i], &bl);
            json_t *js = json_stringn(b ? b : "", b ? bl : 0);
            json_array_append_new(c->lp_tokens, js ? js : json_string("\xef\xbf\xbd"));
            json_array_append_new(c->lp_values, json_real(o->logprobs ? o->logprobs[i] : 0));
            json_t *top = json_object();
            for (int k = 0; k < o->top_k && o->top_ids; k++) {
                const char *tb = tokenizer_token_bytes(s->tok, o->top_ids[i * o->top_k + k], &bl);
                char key[64];
                snprintf(key, sizeof key, "%.*s", (int)(tb && bl < 60 ? bl : 0), tb ? tb : "");
                json_object_set_new(top, key, json_real(o->top_logprobs[i * o->top_k + k]));
            }
            json_array_append_new(c->lp_top, top);
        }
    }
    if (o->finished) {
        const char *t;
        size_t tl;
        tok_stream_flush(&c->ts, &t, &tl);
        append(&piece, &plen, t, tl);
        size_t trim = o->trim_bytes > 0 ? (size_t)o->trim_bytes : 0;
        if (!s->call->stream && c->len + plen >= trim) {
            append(&c->text, &c->len, piece ? piece : "", plen);
            c->len -= trim;
            while (c->len > 0 && ((unsigned char)c->text[c->len] & 0xC0) == 0x80) c->len--;
            plen = 0;
        } else if (trim <= plen) {
            plen -= trim;
        }
        snprintf(c->finish, sizeof c->finish, "%s", o->finish_reason ? o->finish_reason : "stop");
        c->completion_tokens = o->completion_tokens;
        s->n_done++;
    }
    if (s->call->stream) {
        if (plen > 0 || o->finished) {
            json_t *choice = json_pack("{sisososo}", "index", o->index, "text",
                                       json_stringn(piece ? piece : "", plen), "finish_reason",
                                       o->finished ? json_string(c->finish) : json_null(),
                                       "logprobs", json_null());
            sse(out, out_len,
                json_pack("{sssssIsss[o]}", "id", s->id, "object", "text_completion", "created",
                          (json_int_t)s->created, "model", s->call->model, "choices", choice));
        }
        free(piece);
        if (s->n_done < s->n) return 0;
        if (s->call->include_usage)
            sse(out, out_len,
                json_pack("{sssssIsss[]so}", "id", s->id, "object", "text_completion", "created",
                          (json_int_t)s->created, "model", s->call->model, "choices", "usage",
                          usage(s)));
        append(out, out_len, "data: [DONE]\n\n", 14);
        return 1;
    }
    if (!o->finished) append(&c->text, &c->len, piece ? piece : "", plen);
    free(piece);
    if (s->n_done < s->n) return 0;
    json_t *choices = json_array();
    for (int i = 0; i < s->n; i++)
        json_array_append_new(
            choices, json_pack("{sisososo}", "index", i, "text",
                               json_stringn(s->ch[i].text ? s->ch[i].text : "", s->ch[i].len),
                               "finish_reason", json_string(s->ch[i].finish), "logprobs",
                               logprobs_json(&s->ch[i])));
    json_t *body = json_pack("{sssssIsssoso}", "id", s->id, "object", "text_completion", "created",
                             (json_int_t)s->created, "model", s->call->model, "choices", choices,
                             "usage", usage(s));
    char *j = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    append(out, out_len, j, strlen(j));
    free(j);
    return 1;
}
