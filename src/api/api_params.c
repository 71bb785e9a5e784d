/* Request fields the three endpoints share: the model name, sampling parameters, stop conditions,
 * n, streaming options, and max_tokens checked against the context.
 *
 * Ranges are OpenAI's where OpenAI has the field (temperature [0, 2], top_p (0, 1], penalties
 * [-2, 2], n [1, 128], at most 4 stop strings, logit_bias [-100, 100]) and vLLM's for its
 * extensions (top_k -1 or >= 0, min_p [0, 1], repetition_penalty > 0). Unknown fields are ignored,
 * as vLLM does by default. */
#include "api/api_internal.h"

#include "base/rng.h"
#include "base/xalloc.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

api_opts *api_call_init(api_call *call, api_kind kind) {
    memset(call, 0, sizeof *call);
    call->kind = kind;
    call->req.params = sampling_params_default();
    call->req.n = 1;
    api_opts *o = xcalloc(1, sizeof *o);
    o->include_reasoning = true;
    o->skip_special_tokens = true;
    call->priv = o;
    return o;
}

int api_parse_model(const json_t *root, const api_config *cfg, api_call *call, api_error *err) {
    const char *model = NULL;
    if (api_get_string(root, "model", "model", &model, err) < 0) return -1;
    /* A missing model means the served one (vLLM does the same); a different one is a 404. */
    if (model && cfg->served_model_name && strcmp(model, cfg->served_model_name) != 0) {
        api_error_set(err, 404, "invalid_request_error", "model", "The model `%s` does not exist.",
                      model);
        snprintf(err->code, sizeof err->code, "model_not_found");
        return -1;
    }
    free(call->model);
    call->model = xstrdup(model ? model : cfg->served_model_name ? cfg->served_model_name : "");
    return 0;
}

static int parse_stop(const json_t *root, api_call *call, api_opts *opts, api_error *err) {
    json_t *v = json_object_get(root, "stop");
    if (!v || json_is_null(v)) return 0;
    const json_t *one = json_is_string(v) ? v : NULL;
    size_t n = one ? 1 : json_is_array(v) ? json_array_size(v) : 0;
    if (!one && !json_is_array(v)) {
        api_error_set(
            err, 400, NULL, "stop",
            "Invalid type for 'stop': expected a string or an array of strings, but got %s",
            api_json_type_name(v));
        return -1;
    }
    if (n > API_MAX_STOP) {
        api_error_set(err, 400, NULL, "stop",
                      "Invalid value for 'stop': at most %d stop sequences are allowed, got %zu",
                      API_MAX_STOP, n);
        return -1;
    }
    if (n == 0) return 0;
    char **stops = xcalloc(n, sizeof *stops);
    for (size_t i = 0; i < n; i++) {
        const json_t *s = one ? one : json_array_get(v, i);
        char p[32];
        snprintf(p, sizeof p, one ? "stop" : "stop[%zu]", i);
        if (!json_is_string(s) || json_string_length(s) == 0 ||
            strlen(json_string_value(s)) != json_string_length(s)) {
            for (size_t k = 0; k < i; k++) free(stops[k]);
            free(stops);
            if (!json_is_string(s))
                api_error_set(err, 400, NULL, p,
                              "Invalid type for '%s': expected a string, but got %s", p,
                              api_json_type_name(s));
            else
                api_error_set(err, 400, NULL, p,
                              "Invalid value for '%s': stop sequences must be non-empty text", p);
            return -1;
        }
        stops[i] = xstrdup(json_string_value(s));
    }
    call->req.stop_strings = (const char *const *)stops;
    call->req.n_stop_strings = (int)n;
    opts->n_stop = (int)n;
    opts->stop = xcalloc(n, sizeof *opts->stop);
    for (size_t i = 0; i < n; i++) opts->stop[i] = xstrdup(stops[i]);
    return 0;
}

static int parse_stop_ids(const json_t *root, const tokenizer *tok, api_call *call,
                          api_error *err) {
    json_t *v = json_object_get(root, "stop_token_ids");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_array(v)) {
        api_error_set(
            err, 400, NULL, "stop_token_ids",
            "Invalid type for 'stop_token_ids': expected an array of integers, but got %s",
            api_json_type_name(v));
        return -1;
    }
    size_t n = json_array_size(v);
    int32_t *ids = xmalloc((n + 1) * sizeof *ids);
    long long vocab = tok ? tokenizer_vocab_size(tok) : INT32_MAX;
    for (size_t i = 0; i < n; i++) {
        char p[40];
        snprintf(p, sizeof p, "stop_token_ids[%zu]", i);
        long long x;
        if (api_check_int(json_array_get(v, i), p, 0, vocab - 1, &x, err) < 0) {
            free(ids);
            return -1;
        }
        ids[i] = (int32_t)x;
    }
    call->req.stop_token_ids = ids;
    call->req.n_stop_token_ids = (int)n;
    return 0;
}

static int parse_logit_bias(const json_t *root, const tokenizer *tok, api_call *call,
                            api_error *err) {
    json_t *v = json_object_get(root, "logit_bias");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_object(v)) {
        api_error_set(
            err, 400, NULL, "logit_bias",
            "Invalid type for 'logit_bias': expected an object of \"token id\": bias, but got %s",
            api_json_type_name(v));
        return -1;
    }
    size_t n = json_object_size(v), i = 0;
    logit_bias_entry *e = xmalloc((n + 1) * sizeof *e);
    long vocab = tok ? tokenizer_vocab_size(tok) : INT32_MAX;
    const char *key;
    json_t *b;
    json_object_foreach(v, key, b) {
        char p[96];
        snprintf(p, sizeof p, "logit_bias.%.60s", key);
        /* Decimal digits only, without a sign, spaces or leading zeros: " 5", "+5" and "05" are
         * not the key "5" to a JSON reader, so they must not reach token 5 here either. */
        bool canonical = key[0] >= '0' && key[0] <= '9' && !(key[0] == '0' && key[1]);
        for (const char *k = key; canonical && *k; k++) canonical = *k >= '0' && *k <= '9';
        char *end;
        errno = 0;
        long id = canonical ? strtol(key, &end, 10) : -1;
        if (!canonical || *end || errno || id < 0 || id >= vocab) {
            free(e);
            api_error_set(err, 400, NULL, "logit_bias",
                          "Invalid key in 'logit_bias': '%.60s' is not a token id in [0, %ld)", key,
                          vocab);
            return -1;
        }
        if (!json_is_number(b)) {
            free(e);
            api_error_set(err, 400, NULL, p, "Invalid type for '%s': expected a number, but got %s",
                          p, api_json_type_name(b));
            return -1;
        }
        double d = json_number_value(b);
        if (!(d >= -100 && d <= 100)) {
            free(e);
            api_error_set(err, 400, NULL, p,
                          "Invalid value for '%s': %g is out of range, must be in [-100, 100]", p,
                          d);
            return -1;
        }
        e[i].token = (int32_t)id;
        e[i].bias = (float)d;
        i++;
    }
    call->req.params.logit_bias = e;
    call->req.params.n_logit_bias = (int32_t)i;
    return 0;
}

int api_parse_sampling(const json_t *root, const tokenizer *tok, bool allow_n, api_call *call,
                       api_opts *opts, api_error *err) {
    sampling_params *p = &call->req.params;
    double d;
    long long x;
    int r;
#define NUM(key, lo, open, hi, dst)                                                                \
    if ((r = api_get_number(root, key, key, lo, open, hi, &d, err)) < 0) return -1;                \
    if (r) dst = (float)d;
    NUM("temperature", 0, false, 2, p->temperature);
    NUM("top_p", 0, true, 1, p->top_p);
    NUM("min_p", 0, false, 1, p->min_p);
    NUM("presence_penalty", -2, false, 2, p->presence_penalty);
    NUM("frequency_penalty", -2, false, 2, p->frequency_penalty);
    NUM("repetition_penalty", 0, true, 100, p->repetition_penalty);
#undef NUM
    if ((r = api_get_int(root, "top_k", "top_k", -1, INT32_MAX, &x, err)) < 0) return -1;
    if (r) p->top_k = (int32_t)x;
    if ((r = api_get_int(root, "seed", "seed", LLONG_MIN, LLONG_MAX, &x, err)) < 0) return -1;
    if (r) p->seed = (uint64_t)x, p->has_seed = true;
    if (allow_n) {
        if ((r = api_get_int(root, "n", "n", 1, API_MAX_N, &x, err)) < 0) return -1;
        if (r) call->req.n = (int)x;
    }
    if (parse_logit_bias(root, tok, call, err) < 0) return -1;
    if (parse_stop(root, call, opts, err) < 0) return -1;
    if (parse_stop_ids(root, tok, call, err) < 0) return -1;
    if (api_get_bool(root, "ignore_eos", "ignore_eos", &call->req.ignore_eos, err) < 0) return -1;
    if (api_get_bool(root, "skip_special_tokens", "skip_special_tokens", &opts->skip_special_tokens,
                     err) < 0)
        return -1;
    if (api_get_bool(root, "stream", "stream", &call->stream, err) < 0) return -1;
    /* stream_options without stream is accepted and has no effect (vLLM refuses it; being
     * lenient costs nothing). */
    json_t *so = NULL;
    const int has_so = api_get_object(root, "stream_options", "stream_options", &so, err);
    if (has_so < 0) return -1;
    if (has_so) {
        if (api_get_bool(so, "include_usage", "stream_options.include_usage", &call->include_usage,
                         err) < 0)
            return -1;
    }
    return 0;
}

int api_finish_lengths(const json_t *root, const char *const *keys, const char *prompt_param,
                       const api_config *cfg, api_call *call, api_error *err) {
    long long max_tokens = 0;
    const char *given = NULL;
    for (size_t i = 0; keys[i] && !given; i++) {
        int r = api_get_int(root, keys[i], keys[i], 1, INT32_MAX, &max_tokens, err);
        if (r < 0) return -1;
        if (r) given = keys[i];
    }
    int n_prompt = call->req.n_prompt, len = cfg->max_model_len;
    if (n_prompt <= 0) {
        api_error_set(err, 400, NULL, prompt_param,
                      "The prompt is empty: it must have at least one token");
        return -1;
    }
    if (len > 0 && n_prompt >= len) {
        api_error_set(err, 400, NULL, prompt_param,
                      "This model's maximum context length is %d tokens. However, your request has "
                      "%d input tokens (in '%s'). Please reduce the length of the input.",
                      len, n_prompt, prompt_param);
        snprintf(err->code, sizeof err->code, "context_length_exceeded");
        return -1;
    }
    if (given && len > 0 && max_tokens > len - n_prompt) {
        api_error_set(err, 400, NULL, given,
                      "'%s' is too large: %lld. This model's maximum context length is %d tokens "
                      "and your request has %d input tokens (%lld > %d - %d).",
                      given, max_tokens, len, n_prompt, max_tokens, len, n_prompt);
        snprintf(err->code, sizeof err->code, "context_length_exceeded");
        return -1;
    }
    if (given) {
        call->req.max_tokens = (int)max_tokens;
    } else {
        /* The rest of the context, or the server's default when that is smaller. */
        int rest = len > 0 ? len - n_prompt : 0;
        int def = cfg->default_max_tokens;
        call->req.max_tokens = def > 0 && (rest <= 0 || def < rest) ? def : rest;
    }
    return 0;
}

void api_request_free(engine_request *r) {
    free((void *)r->prompt);
    free((void *)r->stop_token_ids);
    for (int i = 0; i < r->n_stop_strings; i++) free((void *)r->stop_strings[i]);
    free((void *)r->stop_strings);
    free((void *)r->params.logit_bias);
    memset(r, 0, sizeof *r);
}

void api_opts_copy(api_opts *dst, const api_opts *src) {
    *dst = *src;
    if (src->n_prompts) {
        dst->prompts = xcalloc((size_t)src->n_prompts, sizeof *dst->prompts);
        for (int i = 0; i < src->n_prompts; i++) {
            const api_prompt *a = &src->prompts[i];
            api_prompt *b = &dst->prompts[i];
            *b = *a;
            b->ids = xmalloc(((size_t)a->n + 1) * sizeof *b->ids);
            if (a->n) memcpy(b->ids, a->ids, (size_t)a->n * sizeof *b->ids);
            if (a->text) {
                b->text = xmalloc(a->text_len + 1);
                memcpy(b->text, a->text, a->text_len + 1);
            }
        }
    }
    if (src->n_stop) {
        dst->stop = xcalloc((size_t)src->n_stop, sizeof *dst->stop);
        for (int i = 0; i < src->n_stop; i++) dst->stop[i] = xstrdup(src->stop[i]);
    }
    /* A deep copy: the stream may live on another thread than the call, and jansson's reference
     * counts are only safe to share where its atomics are. */
    dst->echo = src->echo ? json_deep_copy(src->echo) : NULL;
    dst->store_items = src->store_items ? json_deep_copy(src->store_items) : NULL;
}

void api_opts_free(api_opts *o) {
    for (int i = 0; i < o->n_prompts; i++) free(o->prompts[i].ids), free(o->prompts[i].text);
    free(o->prompts);
    for (int i = 0; i < o->n_stop; i++) free(o->stop[i]);
    free(o->stop);
    json_decref(o->echo);
    json_decref(o->store_items);
    memset(o, 0, sizeof *o);
}

void api_call_free(api_call *c) {
    if (!c) return;
    api_request_free(&c->req);
    free(c->model);
    if (c->priv) {
        api_opts_free(c->priv);
        free(c->priv);
    }
    memset(c, 0, sizeof *c);
}

int api_call_n_prompts(const api_call *c) {
    const api_opts *o = c->priv ? api_call_opts(c) : NULL;
    return o && o->n_prompts > 0 ? o->n_prompts : 1;
}

void api_call_request(const api_call *c, int p, engine_request *out) {
    *out = c->req;
    const api_opts *o = c->priv ? api_call_opts(c) : NULL;
    if (!o || p <= 0 || p >= o->n_prompts) return;
    out->prompt = o->prompts[p].ids;
    out->n_prompt = o->prompts[p].n;
    out->max_tokens = o->prompts[p].max_tokens;
}

void api_make_id(char *buf, size_t cap, const char *prefix, const char *response_id, int choice,
                 int k) {
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a over the response id */
    for (const char *c = response_id ? response_id : ""; *c; c++)
        h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
    h = splitmix64(h ^ splitmix64(((uint64_t)(uint32_t)choice << 32) | (uint32_t)k));
    size_t o = (size_t)snprintf(buf, cap, "%s", prefix);
    for (int i = 0; i < 24 && o + 1 < cap; i++) {
        if (i % 8 == 0) h = splitmix64(h + (uint64_t)i);
        buf[o++] = alphabet[h % 62];
        h /= 62;
    }
    if (o < cap) buf[o] = 0;
}
