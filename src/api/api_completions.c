/* POST /v1/completions: raw text or token ids in, no harmony.
 *
 * `prompt` is a string (encoded with encode_ordinary: special-token names in it are plain text), an
 * array of token ids, or an array of those (several prompts, as vLLM takes them: one engine request
 * each, choices prompt × n + sample, up to API_MAX_PROMPTS). `logprobs` is OpenAI's integer (0..5 alternatives
 * per token); `prompt_logprobs` is vLLM's extension (0..20 alternatives per prompt position);
 * `echo` puts the prompt in front of the text. `suffix` is not supported (as in vLLM). */
#include "api/api_internal.h"

#include "base/error.h"
#include "base/xalloc.h"
#include "tokenizer/tok_utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An array of token ids → out (checked against the vocabulary). */
static int token_array(const json_t *a, const char *param, const tokenizer *tok, ivec *out,
                       api_error *err) {
    size_t i;
    json_t *v;
    long long vocab = tokenizer_vocab_size(tok);
    json_array_foreach(a, i, v) {
        char p[48];
        snprintf(p, sizeof p, "%s[%zu]", param, i);
        long long x;
        if (api_check_int(v, p, 0, vocab - 1, &x, err) < 0) return -1;
        ivec_push(out, (int32_t)x);
    }
    return 0;
}

/* One prompt (a string or an array of token ids) at `param` → *out, with its text for echo. */
static int one_prompt(const json_t *p, const char *param, const tokenizer *tok, bool echo,
                      api_prompt *out, api_error *err) {
    ivec ids = {0};
    if (json_is_string(p)) {
        const char *s = json_string_value(p);
        size_t n = json_string_length(p);
        if (tokenizer_encode_ordinary(tok, s, n, &ids) != 0) {
            api_error_set(err, 400, NULL, param, "The prompt cannot be tokenized: %s", err_msg());
            ivec_free(&ids);
            return -1;
        }
        if (echo) {
            out->text = xstrndup(s, n);
            out->text_len = n;
        }
    } else if (json_is_array(p)) {
        if (token_array(p, param, tok, &ids, err) < 0) {
            ivec_free(&ids);
            return -1;
        }
        if (echo && ids.len) {
            char *text;
            size_t n;
            tokenizer_decode(tok, ids.v, ids.len, &text, &n);
            out->text = xmalloc(3 * n + 1);
            out->text_len = utf8_repair((unsigned char *)text, n, (unsigned char *)out->text);
            out->text[out->text_len] = 0;
            free(text);
        }
    } else {
        api_error_set(
            err, 400, NULL, param,
            "Invalid type for '%s': expected a string or an array of token ids, but got %s", param,
            api_json_type_name(p));
        return -1;
    }
    out->ids = ids.v ? ids.v : xcalloc(1, sizeof *out->ids);
    out->n = (int)ids.len;
    return 0;
}

/* `prompt`: one prompt, or a list of them (strings or arrays of token ids), as vLLM takes. Each is
 * checked against the context with its own max_tokens. req gets the first prompt. */
static int parse_prompt(const json_t *root, const tokenizer *tok, const api_config *cfg,
                        api_call *call, api_opts *o, api_error *err) {
    json_t *p = json_object_get(root, "prompt");
    if (!p || json_is_null(p)) {
        api_error_set(err, 400, NULL, "prompt", "Missing required parameter: 'prompt'");
        return -1;
    }
    bool list =
        json_is_array(p) && json_array_size(p) >= 1 && !json_is_integer(json_array_get(p, 0));
    size_t n = list ? json_array_size(p) : 1;
    if (n > API_MAX_PROMPTS) {
        api_error_set(err, 400, NULL, "prompt",
                      "Invalid value for 'prompt': at most %d prompts per request, got %zu",
                      API_MAX_PROMPTS, n);
        return -1;
    }
    o->prompts = xcalloc(n, sizeof *o->prompts);
    /* echo_only: max_tokens (0) is not read; each prompt gets one token (not shown) to run. */
    static const char *const keys[] = {"max_tokens", NULL}, *const none[] = {NULL};
    for (size_t i = 0; i < n; i++) {
        char param[32] = "prompt";
        if (list) snprintf(param, sizeof param, "prompt[%zu]", i);
        api_prompt *ap = &o->prompts[o->n_prompts++];
        if (one_prompt(list ? json_array_get(p, i) : p, param, tok, call->echo, ap, err) < 0)
            return -1;
        /* The length checks read req: point it at this prompt for them. */
        call->req.prompt = ap->ids;
        call->req.n_prompt = ap->n;
        int rc = api_finish_lengths(root, o->echo_only ? none : keys, param, cfg, call, err);
        call->req.prompt = NULL;
        if (rc < 0) return -1;
        ap->max_tokens = o->echo_only ? 1 : call->req.max_tokens;
    }
    /* req owns its own copy of the first prompt (api_request_free frees it). */
    int32_t *first = xmalloc(((size_t)o->prompts[0].n + 1) * sizeof *first);
    memcpy(first, o->prompts[0].ids, (size_t)o->prompts[0].n * sizeof *first);
    call->req.prompt = first;
    call->req.n_prompt = o->prompts[0].n;
    call->req.max_tokens = o->prompts[0].max_tokens;
    return 0;
}

/* JSON-escaped length of text (what jansson writes: \uXXXX for control bytes). */
static size_t escaped_len(const char *s, size_t n) {
    size_t out = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        out += c == '"' || c == '\\' ? 2 : c < 0x20 ? 6 : 1;
    }
    return out;
}

/* echo × n × logprobs: a short request (a prompt of long tokens, n = 128) can ask for a response
 * thousands of times its size, all of it built in memory. The echoed part is known before any work:
 * n × (the prompt's text + per prompt token, with logprobs, its text and number in `tokens`,
 * `token_logprobs`, `text_offset` and each of the k + 1 `top_logprobs` entries). The alternatives'
 * texts are not known yet: they are counted at the prompt token's length. Refused with 400 naming
 * the limit when over cfg->max_echo_bytes. */
static int check_echo_size(const tokenizer *tok, const api_config *cfg, const api_call *call,
                           const api_opts *o, api_error *err) {
    if (!call->echo || !cfg->max_echo_bytes) return 0;
    double per_choice = 0; /* per sample: every prompt's echo */
    for (int p = 0; p < o->n_prompts; p++) {
        const api_prompt *ap = &o->prompts[p];
        per_choice += (double)escaped_len(ap->text ? ap->text : "", ap->text ? ap->text_len : 0);
        for (int i = 0; o->logprobs && i < ap->n; i++) {
            size_t len = 0;
            const char *b = tokenizer_token_bytes(tok, ap->ids[i], &len);
            per_choice += (double)(o->top_logprobs + 3) * (double)((b ? len : 0) + 24);
        }
    }
    int n = call->req.n > 0 ? call->req.n : 1;
    double total = per_choice * n;
    if (total <= (double)cfg->max_echo_bytes) return 0;
    api_error_set(err, 400, NULL, "echo",
                  "Invalid value for 'echo': n (%d) copies of the echoed prompt%s would make a "
                  "response of about %.0f bytes, over this server's limit of %zu bytes "
                  "(--max-echo-bytes); lower n, drop echo or logprobs, or shorten the prompt",
                  n, o->logprobs ? " with its logprobs" : "", total, cfg->max_echo_bytes);
    return -1;
}

static int parse_fields(const json_t *root, const tokenizer *tok, const api_config *cfg,
                        api_call *out, api_error *err) {
    api_opts *o = api_call_opts(out);
    if (api_parse_model(root, cfg, out, err) < 0) return -1;
    if (api_parse_sampling(root, tok, true, out, o, err) < 0) return -1;
    json_t *suffix = json_object_get(root, "suffix");
    if (suffix && !json_is_null(suffix)) {
        api_error_set(err, 400, NULL, "suffix", "'suffix' is not supported");
        return -1;
    }
    if (api_get_bool(root, "echo", "echo", &out->echo, err) < 0) return -1;
    /* max_tokens 0: scoring the prompt (OpenAI and vLLM take it with echo only). */
    json_t *mt = json_object_get(root, "max_tokens");
    if (json_is_number(mt) && json_number_value(mt) == 0) {
        if (!out->echo) {
            api_error_set(err, 400, NULL, "max_tokens",
                          "Invalid value for 'max_tokens': 0 is only allowed with 'echo' (scoring "
                          "the prompt); otherwise it must be at least 1");
            return -1;
        }
        o->echo_only = true;
    }
    long long k = 0;
    int r = api_get_int(root, "logprobs", "logprobs", 0, API_MAX_COMPLETION_LOGPROBS, &k, err);
    if (r < 0) return -1;
    if (r) {
        o->logprobs = true;
        o->top_logprobs = (int)k;
        out->req.params.logprobs = (int32_t)k;
    }
    r = api_get_int(root, "prompt_logprobs", "prompt_logprobs", 0, API_MAX_TOP_LOGPROBS, &k, err);
    if (r < 0) return -1;
    if (r) o->prompt_logprobs = (int)k;
    /* Echoed prompt tokens get logprobs from the engine's prompt rows: ask for at least one
     * alternative per position so the prompt token itself can be looked up there. */
    int want = o->prompt_logprobs;
    if (out->echo && o->logprobs) {
        int need = o->top_logprobs > 1 ? o->top_logprobs : 1;
        if (need > want) want = need;
    }
    out->req.params.prompt_logprobs = want;
    if (parse_prompt(root, tok, cfg, out, o, err) < 0) return -1;
    return check_echo_size(tok, cfg, out, o, err);
}

int api_parse_completions(const char *body, size_t len, const tokenizer *tok, const api_config *cfg,
                          api_call *out, api_error *err) {
    api_call_init(out, API_COMPLETIONS);
    json_t *root = api_json_load(body, len, err);
    int rc = root ? parse_fields(root, tok, cfg, out, err) : -1;
    json_decref(root);
    if (rc < 0) api_call_free(out);
    return rc < 0 ? -1 : 0;
}
