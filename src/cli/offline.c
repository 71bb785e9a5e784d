#include "cli/offline.h"

#include "base/error.h"
#include "base/files.h"
#include "base/xalloc.h"
#include "tokenizer/bpe.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One request's accumulated output: a JSON object per sample. */
typedef struct {
    int n;
    json_t *
        *choices; /* {"tokens":[], "logprobs":[] or null, "prompt_logprobs":…, "finish_reason":…} */
    int done;
} collected;

static json_t *top_rows(const int32_t *ids, const float *lps, int rows, int k) {
    json_t *arr = json_array();
    for (int r = 0; r < rows; r++) {
        json_t *row = json_array();
        for (int j = 0; j < k; j++)
            json_array_append_new(
                row, json_pack("[if]", ids[(size_t)r * k + j], (double)lps[(size_t)r * k + j]));
        json_array_append_new(arr, row);
    }
    return arr;
}

static void on_output(const engine_output *o, void *user) {
    collected *c = user;
    json_t *ch = c->choices[o->index];
    json_t *toks = json_object_get(ch, "tokens");
    for (int i = 0; i < o->n_tokens; i++) json_array_append_new(toks, json_integer(o->tokens[i]));
    json_t *lps = json_object_get(ch, "logprobs");
    if (json_is_array(lps) && o->top_k > 0 && o->n_tokens > 0) {
        json_t *rows = top_rows(o->top_ids, o->top_logprobs, o->n_tokens, o->top_k);
        json_array_extend(lps, rows);
        json_decref(rows);
    }
    if (o->n_prompt_rows > 0) {
        json_t *pl = json_array();
        json_array_append_new(pl, json_null());
        json_t *rows =
            top_rows(o->prompt_top_ids, o->prompt_top_logprobs, o->n_prompt_rows, o->prompt_k);
        json_array_extend(pl, rows);
        json_decref(rows);
        json_object_set_new(ch, "prompt_logprobs", pl);
    }
    if (o->finished) {
        json_object_set_new(ch, "finish_reason", json_string(o->finish_reason));
        c->done++;
    }
}

/* Reads an integer/number field with a type check that names the line and field. */
static int get_num(json_t *obj, const char *key, double lo, double hi, int line, double *out) {
    json_t *v = json_object_get(obj, key);
    if (!v) return 0;
    if (!json_is_number(v)) return err_set("line %d: field '%s' must be a number", line, key);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi))
        return err_set("line %d: field '%s' = %g is out of range [%g, %g]", line, key, d, lo, hi);
    *out = d;
    return 0;
}

static int int_array(json_t *obj, const char *key, int line, int32_t **out, int *n) {
    json_t *a = json_object_get(obj, key);
    *out = NULL, *n = 0;
    if (!a) return 0;
    if (!json_is_array(a))
        return err_set("line %d: field '%s' must be an array of integers", line, key);
    *out = xmalloc((json_array_size(a) + 1) * sizeof **out);
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
            free(*out);
            *out = NULL;
            return err_set("line %d: field '%s[%zu]' must be a non-negative integer", line, key, i);
        }
        (*out)[(*n)++] = (int32_t)json_integer_value(v);
    }
    return 0;
}

static const char *token_bytes(void *ctx, int32_t id, size_t *len) {
    /* Special tokens are not text a client sees: stop strings never match them. */
    if (tokenizer_is_special((const tokenizer *)ctx, id)) {
        *len = 0;
        return NULL;
    }
    return tokenizer_token_bytes((const tokenizer *)ctx, id, len);
}

/* "prompt" (text, needs the tokenizer) as an alternative to "prompt_ids". */
static int text_prompt(json_t *obj, int line, const tokenizer *tok, int32_t **ids, int *n) {
    const char *text = json_string_value(json_object_get(obj, "prompt"));
    if (!text) return 0;
    if (!tok)
        return err_set("line %d: field 'prompt' needs a tokenizer (none found for the model)",
                       line);
    ivec v = {0};
    if (tokenizer_encode_ordinary(tok, text, strlen(text), &v) != 0) return -1;
    *ids = v.v, *n = (int)v.len;
    return 0;
}

/* "stop": a string or an array of strings (copied into *out, freed by the caller). */
static int stop_strings(json_t *obj, int line, char ***out, int *n) {
    json_t *st = json_object_get(obj, "stop");
    *out = NULL, *n = 0;
    if (!st || json_is_null(st)) return 0;
    if (json_is_string(st)) {
        *out = xmalloc(sizeof **out);
        (*out)[(*n)++] = xstrdup(json_string_value(st));
        return 0;
    }
    if (!json_is_array(st))
        return err_set("line %d: field 'stop' must be a string or an array of strings", line);
    *out = xmalloc((json_array_size(st) + 1) * sizeof **out);
    size_t i;
    json_t *v;
    json_array_foreach(st, i, v) {
        if (!json_is_string(v))
            return err_set("line %d: field 'stop[%zu]' must be a string", line, i);
        (*out)[(*n)++] = xstrdup(json_string_value(v));
    }
    return 0;
}

/* Parses one request line into r (prompt and stop ids allocated; freed by the caller). */
static int parse_request(json_t *obj, int line, const tokenizer *tok, engine_request *r) {
    if (!json_is_object(obj)) return err_set("line %d: expected a JSON object", line);
    memset(r, 0, sizeof *r);
    r->params = sampling_params_default();
    r->params.temperature = 0; /* offline default: greedy, like `generate` */
    r->n = 1;
    int32_t *ids;
    int n;
    if (int_array(obj, "prompt_ids", line, &ids, &n)) return -1;
    if (!ids && text_prompt(obj, line, tok, &ids, &n)) return -1;
    if (!ids || n == 0) {
        free(ids);
        return err_set("line %d: field 'prompt_ids' (or 'prompt') is missing or empty", line);
    }
    r->prompt = ids, r->n_prompt = n;
    double v;
    v = 16;
    if (get_num(obj, "max_tokens", 0, 1 << 30, line, &v)) return -1;
    r->max_tokens = (int)v;
    v = r->params.temperature;
    if (get_num(obj, "temperature", 0, 1e4, line, &v)) return -1;
    r->params.temperature = (float)v;
    v = 1;
    if (get_num(obj, "top_p", 0, 1, line, &v)) return -1;
    r->params.top_p = (float)v;
    v = 0;
    if (get_num(obj, "top_k", -1, 1 << 30, line, &v)) return -1;
    r->params.top_k = (int)v;
    v = 0;
    if (get_num(obj, "min_p", 0, 1, line, &v)) return -1;
    r->params.min_p = (float)v;
    v = 0;
    if (get_num(obj, "presence_penalty", -2, 2, line, &v)) return -1;
    r->params.presence_penalty = (float)v;
    v = 0;
    if (get_num(obj, "frequency_penalty", -2, 2, line, &v)) return -1;
    r->params.frequency_penalty = (float)v;
    v = 1;
    if (get_num(obj, "repetition_penalty", 0, 100, line, &v)) return -1;
    r->params.repetition_penalty = (float)v;
    v = 0;
    if (get_num(obj, "logprobs", 0, 20, line, &v)) return -1;
    r->params.logprobs = (int)v;
    v = 0;
    if (get_num(obj, "prompt_logprobs", 0, 20, line, &v)) return -1;
    r->params.prompt_logprobs = (int)v;
    v = 1;
    if (get_num(obj, "n", 1, 128, line, &v)) return -1;
    r->n = (int)v;
    v = 0;
    if (get_num(obj, "priority", -1e9, 1e9, line, &v)) return -1;
    r->priority = (int)v;
    json_t *seed = json_object_get(obj, "seed");
    if (seed && !json_is_null(seed)) {
        if (!json_is_integer(seed) || json_integer_value(seed) < 0)
            return err_set("line %d: field 'seed' must be a non-negative integer", line);
        r->params.seed = (uint64_t)json_integer_value(seed);
        r->params.has_seed = true;
    }
    json_t *ie = json_object_get(obj, "ignore_eos");
    if (ie && !json_is_boolean(ie))
        return err_set("line %d: field 'ignore_eos' must be true or false", line);
    r->ignore_eos = ie && json_is_true(ie);
    int32_t *stops;
    if (int_array(obj, "stop_token_ids", line, &stops, &n)) return -1;
    r->stop_token_ids = stops, r->n_stop_token_ids = n;
    char **strs;
    if (stop_strings(obj, line, &strs, &n)) return -1;
    r->stop_strings = (const char *const *)strs, r->n_stop_strings = n;
    return 0;
}

/* Prints one request's result the way `gptoss generate` prints a single prompt. */
static void print_generate(json_t *out, const tokenizer *tok, int mode, bool with_text) {
    json_t *tokens = json_object_get(out, "tokens");
    size_t n = json_array_size(tokens), len = 0;
    int32_t *ids = xmalloc((n ? n : 1) * sizeof *ids);
    for (size_t i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(tokens, i));
    char *text = NULL;
    if (with_text && tok && tokenizer_decode(tok, ids, n, &text, &len) != 0) text = NULL;
    if (mode == 2) {
        if (text) json_object_set_new(out, "text", json_string(text));
        char *s = json_dumps(out, JSON_COMPACT | JSON_REAL_PRECISION(9));
        printf("%s\n", s);
        free(s);
    } else if (text) {
        printf("%s\n", text);
    } else {
        for (size_t i = 0; i < n; i++) printf("%s%d", i ? "," : "", ids[i]);
        printf("\n");
    }
    free(text), free(ids);
}

int run_offline(const offline_opts *o) {
    size_t len;
    const char *source = o->prompts_text ? "the prompt" : o->prompts_file;
    char *text = o->prompts_text ? xstrdup(o->prompts_text) : file_read_all(o->prompts_file, &len);
    if (!text) return -1;
    /* The tokenizer is optional here: it serves text prompts and stop strings. */
    tokenizer *tok = tokenizer_load_for_model(o->model_dir);
    runtime_args ra = o->rt;
    if (tok) ra.eng.token_bytes = token_bytes, ra.eng.token_bytes_ctx = tok;
    runtime rt;
    if (runtime_build(&ra, o->model_dir, &rt) != 0) {
        tokenizer_free(tok);
        free(text);
        return -1;
    }
    engine *e = rt.eng;
    int n_req = 0, cap = 16, rc = 0;
    /* One allocation per request: the engine keeps each one's address as its callback argument, so
     * they must never move (an array grown with realloc would). */
    collected **res = xcalloc((size_t)cap, sizeof *res);
    char *save = NULL;
    int line = 0;
    for (char *l = strtok_r(text, "\n", &save); l && rc == 0; l = strtok_r(NULL, "\n", &save)) {
        line++;
        if (strspn(l, " \t\r") == strlen(l)) continue;
        json_error_t jerr;
        json_t *obj = json_loads(l, 0, &jerr);
        if (!obj) {
            rc = err_set("%s line %d: invalid JSON: %s", source, line, jerr.text);
            break;
        }
        engine_request r;
        memset(&r, 0, sizeof r);
        if (parse_request(obj, line, tok, &r) == 0) {
            if (n_req == cap) res = xrealloc(res, (size_t)(cap *= 2) * sizeof *res);
            collected *c = res[n_req] = xcalloc(1, sizeof *c);
            c->n = r.n;
            c->choices = xcalloc((size_t)r.n, sizeof *c->choices);
            for (int i = 0; i < r.n; i++)
                c->choices[i] = json_pack("{s[]sosnsn}", "tokens", "logprobs",
                                          r.params.logprobs > 0 ? json_array() : json_null(),
                                          "prompt_logprobs", "finish_reason");
            r.id = (uint64_t)n_req;
            r.on_output = on_output;
            r.user = c;
            n_req++;
            if (engine_submit(e, &r) != 0) rc = err_prefix("%s line %d", source, line);
        } else {
            rc = err_prefix("%s", source);
        }
        free((void *)r.prompt), free((void *)r.stop_token_ids);
        for (int k = 0; k < r.n_stop_strings; k++) free((void *)r.stop_strings[k]);
        free((void *)r.stop_strings);
        json_decref(obj);
    }
    if (rc == 0 && engine_run_until_idle(e) < 0)
        rc = err_set("the backend failed: see the log above");
    for (int i = 0; i < n_req; i++) {
        collected *c = res[i];
        json_t *out = c->n == 1 ? json_incref(c->choices[0]) : json_pack("{s[]}", "choices");
        for (int j = 0; c->n > 1 && j < c->n; j++)
            json_array_append(json_object_get(out, "choices"), c->choices[j]);
        if (rc == 0 && o->print_as_generate) {
            print_generate(out, tok, o->print_as_generate, o->print_text);
        } else if (rc == 0) {
            char *s = json_dumps(out, JSON_COMPACT | JSON_REAL_PRECISION(9));
            printf("%s\n", s);
            free(s);
        }
        json_decref(out);
        for (int j = 0; j < c->n; j++) json_decref(c->choices[j]);
        free(c->choices);
        free(c);
    }
    free(res);
    engine_destroy(e);
    tokenizer_free(tok);
    free(text);
    return rc;
}
