/* GET / and /webui/(file): the built-in chat page (web/index.html, app.js, app.css; see webui.h).
 *
 * The page is static and holds nothing secret, so it answers without the API key: a browser's
 * navigation cannot send a Bearer header, and the page asks for the key itself before it calls the
 * API (which keeps requiring it). --no-webui removes these routes (router.c).
 *
 * Script and style are separate files, not inline, so the Content-Security-Policy can forbid
 * inline code outright: the page renders model output as text only, and even a mistake there could
 * not run injected script. connect-src 'self' keeps the page talking to this server alone. */
#include "server/server_internal.h"
#include "server/webui.h"

#include <string.h>

static const char CSP[] = "default-src 'none'; script-src 'self'; style-src 'self'; "
                          "connect-src 'self'; img-src 'self' data:; base-uri 'none'; "
                          "form-action 'none'; frame-ancestors 'none'";

static const char *content_type(const char *path) {
    const char *dot = strrchr(path, '.');
    if (dot && strcmp(dot, ".js") == 0) return "text/javascript; charset=utf-8";
    if (dot && strcmp(dot, ".css") == 0) return "text/css; charset=utf-8";
    return "text/html; charset=utf-8";
}

void handle_webui(srv_loop *l, struct evhttp_request *req) {
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (!path || !path[0]) path = "/";
    const webui_asset *a = webui_assets;
    while (a->path && strcmp(a->path, path) != 0) a++;
    if (!a->path) {
        reply_error(l->srv, req, 404, "invalid_request_error", "", "no route for %s", path);
        return;
    }
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Security-Policy", CSP);
    evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
    evhttp_add_header(h, "X-Frame-Options", "DENY");
    evhttp_add_header(h, "Referrer-Policy", "no-referrer");
    evhttp_add_header(h, "Cross-Origin-Opener-Policy", "same-origin");
    evhttp_add_header(h, "Cross-Origin-Resource-Policy", "same-origin");
    /* Revalidate every time: a new binary must not leave an old page in the browser's cache. */
    evhttp_add_header(h, "Cache-Control", "no-cache");
    reply_text(l->srv, req, 200, content_type(a->path), (const char *)a->data, a->len);
}
