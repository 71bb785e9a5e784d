/* The small endpoints: /health, /version, /v1/models, /v1/models/{id}, /tokenize, /detokenize (vLLM's shapes). */
#include "server/server_internal.h"

#include "base/vec.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void reply_json_value(server *s, struct evhttp_request *req, int status, json_t *v) {
    char *body = json_dumps(v, JSON_COMPACT);
    json_decref(v);
    reply_json(s, req, status, body, strlen(body));
    free(body);
}

void handle_health(srv_loop *l, struct evhttp_request *req) {
    server *s = l->srv;
    int st = atomic_load(&s->state);
    if (st == SRV_READY) {
        reply_json(s, req, 200, "{\"status\":\"ok\"}", 15);
        return;
    }
    const char *why = st == SRV_LOADING    ? "loading"
                      : st == SRV_DRAINING ? "shutting down"
                                           : "failed";
    reply_error(s, req, 503, "service_unavailable", "", "%s", why);
}

void handle_version(srv_loop *l, struct evhttp_request *req) {
    reply_json_value(l->srv, req, 200, json_pack("{ss}", "version", GPTOSS_VERSION));
}

/* vLLM's ModelCard: OpenAI's model object (id, object, created, owned_by) plus root, parent,
 * max_model_len and permission; max_num_seqs is ours. */
static json_t *model_card(server *s) {
    json_t *perm =
        json_pack("{sssssIsbsbsbsbsbsbsssnsb}", "id", "modelperm-gptoss", "object",
                  "model_permission", "created", (json_int_t)s->created, "allow_create_engine", 0,
                  "allow_sampling", 1, "allow_logprobs", 1, "allow_search_indices", 0, "allow_view",
                  1, "allow_fine_tuning", 0, "organization", "*", "group", "is_blocking", 0);
    return json_pack("{sssssIsssssnsisis[o]}", "id", s->model_name, "object", "model", "created",
                     (json_int_t)s->created, "owned_by", "gptoss", "root", s->opt.rt.model,
                     "parent", "max_model_len", s->max_model_len, "max_num_seqs",
                     s->opt.rt.eng.max_num_seqs, "permission", perm);
}

void handle_models(srv_loop *l, struct evhttp_request *req) {
    server *s = l->srv;
    reply_json_value(s, req, 200, json_pack("{sss[o]}", "object", "list", "data", model_card(s)));
}

/* GET /v1/models/{id}: the id is the rest of the path, percent-decoded (SDKs encode the '/' of names
 * like "openai/gpt-oss-20b" as %2F). */
void handle_model(srv_loop *l, struct evhttp_request *req) {
    server *s = l->srv;
    const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
    size_t len = 0;
    char *id = evhttp_uridecode(path + strlen(MODELS_PREFIX), 0, &len);
    if (id && len == strlen(s->model_name) && memcmp(id, s->model_name, len) == 0) {
        free(id);
        reply_json_value(s, req, 200, model_card(s));
        return;
    }
    api_error e;
    api_error_set(&e, 404, "invalid_request_error", "model", "The model `%.200s` does not exist.",
                  id && strlen(id) == len ? id : "");
    snprintf(e.code, sizeof e.code, "model_not_found");
    free(id);
    reply_api_error(s, req, &e);
}

/* /tokenize and /detokenize are pure functions of the body (status and JSON answer), so that a
 * large body can be worked on off the loop (offload.c). Their errors are OpenAI's error shape. */
static int fail(char **out, size_t *out_len, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int fail(char **out, size_t *out_len, int status, const char *param, const char *fmt, ...) {
    api_error e;
    char msg[sizeof e.message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    api_error_set(&e, status, "invalid_request_error", param, "%s", msg);
    *out = api_error_json(&e);
    *out_len = strlen(*out);
    return status;
}

static int answer(char **out, size_t *out_len, json_t *v) {
    *out = json_dumps(v, JSON_COMPACT);
    json_decref(v);
    *out_len = *out ? strlen(*out) : 0;
    if (!*out) return fail(out, out_len, 500, "", "cannot build the answer");
    return 200;
}

/* Parses the body as a JSON object; NULL (and the error answer) if it is not one. */
static json_t *body_object(const char *body, size_t len, char **out, size_t *out_len, int *status) {
    json_error_t jerr;
    /* jansson refuses invalid UTF-8 and embedded NULs, and limits nesting depth. */
    json_t *v = json_loadb(body, len, 0, &jerr);
    if (!v) {
        *status = fail(out, out_len, 400, "", "invalid JSON body: %s", jerr.text);
        return NULL;
    }
    if (!json_is_object(v)) {
        json_decref(v);
        *status = fail(out, out_len, 400, "", "the body must be a JSON object");
        return NULL;
    }
    return v;
}

/* {"prompt": "...", "add_special_tokens": bool} → {"count", "max_model_len", "tokens"}. The chat
 * form ({"messages": [...]}) needs the harmony rendering of the api layer and comes with it. */
static int tokenize_body(server *s, const char *body, size_t len, char **out, size_t *out_len) {
    int status;
    json_t *v = body_object(body, len, out, out_len, &status);
    if (!v) return status;
    json_t *prompt = json_object_get(v, "prompt");
    json_t *ast = json_object_get(v, "add_special_tokens");
    bool has_messages = json_object_get(v, "messages") != NULL;
    if (ast && !json_is_boolean(ast)) {
        json_decref(v);
        return fail(out, out_len, 400, "add_special_tokens",
                    "add_special_tokens must be a boolean");
    }
    if (!prompt && has_messages) {
        json_decref(v);
        return fail(out, out_len, 400, "messages",
                    "tokenizing messages is not supported yet; send {\"prompt\": \"...\"}");
    }
    if (!json_is_string(prompt)) {
        json_decref(v);
        return fail(out, out_len, 400, "prompt", "prompt must be a string");
    }
    /* gpt-oss has no BOS token, so add_special_tokens changes nothing; special-token names in the
     * text stay ordinary text, as in every other user-text path. */
    ivec ids = {0};
    int rc = tokenizer_encode_ordinary(s->tok, json_string_value(prompt),
                                       json_string_length(prompt), &ids);
    json_decref(v);
    if (rc != 0) {
        ivec_free(&ids);
        return fail(out, out_len, 400, "prompt", "cannot tokenize the prompt");
    }
    json_t *toks = json_array();
    for (size_t i = 0; i < ids.len; i++) json_array_append_new(toks, json_integer(ids.v[i]));
    json_t *res = json_pack("{sIsisosn}", "count", (json_int_t)ids.len, "max_model_len",
                            s->max_model_len, "tokens", toks, "token_strs");
    ivec_free(&ids);
    return answer(out, out_len, res);
}

/* {"tokens": [ids]} → {"prompt": text}. Bytes that are not valid UTF-8 (a character split by the
 * ids) come out as U+FFFD so the answer is always valid JSON. */
static int detokenize_body(server *s, const char *body, size_t len, char **out, size_t *out_len) {
    int status;
    json_t *v = body_object(body, len, out, out_len, &status);
    if (!v) return status;
    json_t *toks = json_object_get(v, "tokens");
    if (!json_is_array(toks)) {
        json_decref(v);
        return fail(out, out_len, 400, "tokens", "tokens must be an array of token ids");
    }
    int vocab = tokenizer_vocab_size(s->tok);
    size_t n = json_array_size(toks);
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(toks, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= vocab) {
            json_decref(v);
            return fail(out, out_len, 400, "tokens", "tokens[%zu] must be a token id in [0, %d)", i,
                        vocab);
        }
    }
    tok_stream ts;
    tok_stream_init(&ts);
    char *text = NULL;
    size_t tlen = 0, tcap = 0;
    for (size_t i = 0; i <= n; i++) {
        const char *piece;
        size_t plen;
        if (i < n) {
            if (tok_stream_push(s->tok, &ts, (int32_t)json_integer_value(json_array_get(toks, i)),
                                &piece, &plen) != 0)
                plen = 0;
        } else {
            tok_stream_flush(&ts, &piece, &plen);
        }
        if (tlen + plen + 1 > tcap) {
            tcap = (tlen + plen + 1) * 2;
            text = xrealloc(text, tcap);
        }
        memcpy(text + tlen, piece, plen);
        tlen += plen;
    }
    tok_stream_free(&ts);
    json_decref(v);
    json_t *res = json_object();
    json_object_set_new(res, "prompt", json_stringn(text ? text : "", tlen));
    free(text);
    return answer(out, out_len, res);
}

void handle_tokenize(srv_loop *l, struct evhttp_request *req) {
    offload_body_fn(l, req, tokenize_body);
}

void handle_detokenize(srv_loop *l, struct evhttp_request *req) {
    offload_body_fn(l, req, detokenize_body);
}
