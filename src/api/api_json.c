/* JSON in and out: loading request bodies, typed field readers whose errors name the field, and
 * writing response JSON and SSE events. */
#include "api/api_internal.h"

#include "base/xalloc.h"
#include "tokenizer/tok_utf8.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Depth of v, stopping early once it passes `limit` (so a hostile document costs little). */
static int depth_exceeds(const json_t *v, int depth, int limit) {
    if (depth > limit) return 1;
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) if (depth_exceeds(x, depth + 1, limit)) return 1;
    } else if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) if (depth_exceeds(x, depth + 1, limit)) return 1;
    }
    return 0;
}

json_t *api_json_load(const char *body, size_t len, api_error *err) {
    if (!body || len == 0) {
        api_error_set(err, 400, NULL, NULL, "The request body is empty: expected a JSON object");
        return NULL;
    }
    json_error_t je;
    /* JSON_ALLOW_NUL is left off: a NUL inside a string is refused rather than cutting the text. */
    json_t *root = json_loadb(body, len, 0, &je);
    if (!root) {
        api_error_set(err, 400, NULL, NULL,
                      "Invalid JSON in the request body at line %d, column %d (byte %d): %s",
                      je.line, je.column, je.position, je.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        api_error_set(err, 400, NULL, NULL, "The request body must be a JSON object, not %s",
                      api_json_type_name(root));
        json_decref(root);
        return NULL;
    }
    if (depth_exceeds(root, 1, API_MAX_JSON_DEPTH)) {
        api_error_set(err, 400, NULL, NULL, "The request body is nested more than %d levels deep",
                      API_MAX_JSON_DEPTH);
        json_decref(root);
        return NULL;
    }
    return root;
}

const char *api_json_type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "?";
}

static int wrong_type(const json_t *v, const char *param, const char *want, api_error *err) {
    api_error_set(err, 400, NULL, param, "Invalid type for '%s': expected %s, but got %s", param,
                  want, api_json_type_name(v));
    return -1;
}

/* The field, or NULL when absent or null. */
static json_t *field(const json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    return v && !json_is_null(v) ? v : NULL;
}

int api_get_bool(const json_t *obj, const char *key, const char *param, bool *out, api_error *err) {
    json_t *v = field(obj, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return wrong_type(v, param, "a boolean", err);
    *out = json_is_true(v);
    return 1;
}

int api_get_string(const json_t *obj, const char *key, const char *param, const char **out,
                   api_error *err) {
    json_t *v = field(obj, key);
    if (!v) return 0;
    if (!json_is_string(v)) return wrong_type(v, param, "a string", err);
    *out = json_string_value(v);
    return 1;
}

int api_get_object(const json_t *obj, const char *key, const char *param, json_t **out,
                   api_error *err) {
    json_t *v = field(obj, key);
    if (!v) return 0;
    if (!json_is_object(v)) return wrong_type(v, param, "an object", err);
    *out = v;
    return 1;
}

int api_get_number(const json_t *obj, const char *key, const char *param, double lo, bool lo_open,
                   double hi, double *out, api_error *err) {
    json_t *v = field(obj, key);
    if (!v) return 0;
    if (!json_is_number(v)) return wrong_type(v, param, "a number", err);
    double d = json_number_value(v);
    if (!(lo_open ? d > lo : d >= lo) || !(d <= hi)) {
        api_error_set(err, 400, NULL, param,
                      "Invalid value for '%s': %g is out of range, must be in %c%g, %g]", param, d,
                      lo_open ? '(' : '[', lo, hi);
        return -1;
    }
    *out = d;
    return 1;
}

int api_check_int(const json_t *v, const char *param, long long lo, long long hi, long long *out,
                  api_error *err) {
    /* JSON integers only: 3.0 is a number with a fraction part in JSON, and accepting it for one
     * field but not another (or rounding it) would make two readers of a body disagree. */
    if (!json_is_integer(v)) return wrong_type(v, param, "an integer", err);
    long long x = json_integer_value(v);
    if (x < lo || x > hi) {
        api_error_set(err, 400, NULL, param,
                      "Invalid value for '%s': %lld is out of range, must be in [%lld, %lld]",
                      param, x, lo, hi);
        return -1;
    }
    *out = x;
    return 1;
}

int api_get_int(const json_t *obj, const char *key, const char *param, long long lo, long long hi,
                long long *out, api_error *err) {
    json_t *v = field(obj, key);
    if (!v) return 0;
    return api_check_int(v, param, lo, hi, out, err);
}

int api_content_text(const json_t *content, const char *param, const char *const *types,
                     bool null_ok, char **out, api_error *err) {
    *out = NULL;
    if (!content || json_is_null(content)) {
        if (!null_ok) *out = xstrdup("");
        return 0;
    }
    if (json_is_string(content)) {
        *out = xstrndup(json_string_value(content), json_string_length(content));
        return 0;
    }
    if (!json_is_array(content))
        return wrong_type(content, param, "a string or an array of content parts", err);
    hsb text = {0};
    size_t i;
    json_t *part;
    char p[96];
    json_array_foreach(content, i, part) {
        snprintf(p, sizeof p, "%s[%zu]", param, i);
        if (json_is_string(part)) { /* a bare string part: taken as text, as vLLM does */
            hsb_addn(&text, json_string_value(part), json_string_length(part));
            continue;
        }
        if (!json_is_object(part)) {
            hsb_free(&text);
            return wrong_type(part, p, "a content part object", err);
        }
        const char *type = NULL;
        char pt[112];
        snprintf(pt, sizeof pt, "%s.type", p);
        if (api_get_string(part, "type", pt, &type, err) < 0) {
            hsb_free(&text);
            return -1;
        }
        bool ok = false;
        for (size_t k = 0; type && types[k]; k++) ok = ok || strcmp(type, types[k]) == 0;
        if (!ok) {
            if (type)
                api_error_set(err, 400, NULL, pt,
                              "Invalid value for '%s': content parts of type '%.40s' are not "
                              "supported (text only)",
                              pt, type);
            else
                api_error_set(err, 400, NULL, pt, "Missing required parameter: '%s'", pt);
            hsb_free(&text);
            return -1;
        }
        /* The text of a "refusal" part is under "refusal". */
        const char *key = strcmp(type, "refusal") == 0 ? "refusal" : "text";
        char ptext[112];
        snprintf(ptext, sizeof ptext, "%s.%s", p, key);
        json_t *t = json_object_get(part, key);
        if (!t || !json_is_string(t)) {
            hsb_free(&text);
            if (!t) {
                api_error_set(err, 400, NULL, ptext, "Missing required parameter: '%s'", ptext);
                return -1;
            }
            return wrong_type(t, ptext, "a string", err);
        }
        hsb_addn(&text, json_string_value(t), json_string_length(t));
    }
    *out = text.s ? text.s : xstrdup("");
    return 0;
}

json_t *api_jstr(const char *s, size_t n) {
    json_t *v = json_stringn(s ? s : "", s ? n : 0);
    if (v) return v;
    /* Invalid UTF-8 (or a NUL): repair so the client still gets the text. */
    unsigned char *fixed = xmalloc(3 * n + 1);
    size_t m = utf8_repair((const unsigned char *)s, n, fixed);
    for (size_t i = 0; i < m; i++)
        if (!fixed[i]) fixed[i] = ' ';
    v = json_stringn((const char *)fixed, m);
    free(fixed);
    return v ? v : json_string("");
}

json_t *api_jlogprob(float lp) {
    double d = lp;
    if (!(d >= -9999.0)) d = -9999.0; /* -inf, NaN */
    return json_real(d);
}

void api_out_add(char **out, size_t *out_len, const char *s, size_t n) {
    *out = xrealloc(*out, *out_len + n + 1);
    memcpy(*out + *out_len, s, n);
    *out_len += n;
    (*out)[*out_len] = 0;
}

/* Reals with 9 significant digits: a float's logprob round-trips, and no 17-digit noise. */
static char *dump(json_t *v) {
    char *s = json_dumps(v, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(v);
    return s ? s : xstrdup("null");
}

void api_out_json(char **out, size_t *out_len, json_t *v) {
    char *s = dump(v);
    api_out_add(out, out_len, s, strlen(s));
    free(s);
}

void api_out_sse(char **out, size_t *out_len, json_t *v) {
    char *s = dump(v);
    api_out_add(out, out_len, "data: ", 6);
    api_out_add(out, out_len, s, strlen(s));
    api_out_add(out, out_len, "\n\n", 2);
    free(s);
}

void api_out_event(char **out, size_t *out_len, const char *type, json_t *v) {
    char *s = dump(v);
    api_out_add(out, out_len, "event: ", 7);
    api_out_add(out, out_len, type, strlen(type));
    api_out_add(out, out_len, "\ndata: ", 7);
    api_out_add(out, out_len, s, strlen(s));
    api_out_add(out, out_len, "\n\n", 2);
    free(s);
}
