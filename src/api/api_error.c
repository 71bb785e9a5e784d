/* OpenAI-style errors: {"error": {"message", "type", "param", "code"}}.
 *
 * `param` and `code` are JSON null when empty, as OpenAI sends them; clients (the openai SDKs)
 * show `message` and branch on the HTTP status, so the message carries the details. */
#include "api/api_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The error type OpenAI and vLLM use for each status, when the caller gives none. */
static const char *default_type(int status) {
    switch (status) {
    case 400:
    case 404:
    case 413:
        return "invalid_request_error";
    case 401:
        return "authentication_error";
    case 429:
        return "rate_limit_error";
    case 503:
        return "service_unavailable_error";
    default:
        return "server_error";
    }
}

void api_error_set(api_error *err, int status, const char *type, const char *param, const char *fmt,
                   ...) {
    if (!err) return;
    memset(err, 0, sizeof *err);
    err->status = status;
    snprintf(err->type, sizeof err->type, "%s", type && *type ? type : default_type(status));
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
}

char *api_error_json(const api_error *err) {
    json_t *e = json_object();
    json_object_set_new(e, "message", api_jstr(err->message, strlen(err->message)));
    json_object_set_new(e, "type",
                        json_string(err->type[0] ? err->type : default_type(err->status)));
    json_object_set_new(e, "param",
                        err->param[0] ? api_jstr(err->param, strlen(err->param)) : json_null());
    /* A code of digits goes out as a number: where we mirror vLLM's exact error (the responses
     * store's 404), vLLM puts the HTTP status there. */
    bool digits = err->code[0] != 0 && strspn(err->code, "0123456789") == strlen(err->code);
    json_object_set_new(e, "code",
                        !err->code[0] ? json_null()
                        : digits      ? json_integer(strtoll(err->code, NULL, 10))
                                      : json_string(err->code));
    json_t *root = json_pack("{so}", "error", e);
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}
