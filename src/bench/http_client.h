/* The benchmark's HTTP/1.1 client: libevent bufferevents with our own response parser
 * (bench/http_parse.h), one event loop, any number of requests in flight, keep-alive connections
 * reused across requests.
 *
 * Why not evhttp's client: the benchmark must see every body byte the moment it arrives (to time
 * the streamed tokens), must tell a failed request from a slow one with a precise message, and must
 * reuse connections the way aiohttp does in `vllm bench serve` (a pool, one request per connection
 * at a time). A small parser over bufferevents does all three and keeps the per-byte cost low
 * enough for thousands of concurrent streams on one core.
 *
 * A request takes an idle connection if there is one (most recently used first), else opens a new
 * one. When a reused connection turns out to have been closed by the server before it answered (the
 * usual keep-alive race), the request is sent again once on a fresh connection. */
#ifndef GPTOSS_BENCH_HTTP_CLIENT_H
#define GPTOSS_BENCH_HTTP_CLIENT_H

#include <stddef.h>

struct event_base;
typedef struct hc_pool hc_pool;

typedef struct {
    /* Body bytes (transfer encoding removed) as they arrive; t is when the read that brought them
     * began (now_seconds()), the same for every byte of one read. */
    void (*on_body)(void *user, const char *data, size_t len, double t);
    /* Called exactly once: the response is complete (status = its HTTP status, error = NULL), or
     * the request failed (status = the HTTP status if one was read, else 0; error = one line saying
     * why). The handler may start new requests from here. */
    void (*on_done)(void *user, int status, const char *error, double t);
} hc_handler;

/* "http://host[:port][/prefix]" (https is refused: the benchmark talks to servers next to it). */
typedef struct {
    char *host;
    int port;
    char *prefix; /* "" or "/something", no trailing slash */
} hc_url;

int hc_url_parse(const char *url, hc_url *out);
void hc_url_free(hc_url *u);

/* Resolves the host once; timeout_s is how long a busy connection may stay silent before its
 * request fails. NULL + err_set() when the host does not resolve. */
hc_pool *hc_pool_new(struct event_base *base, const char *host, int port, double timeout_s);
void hc_pool_free(hc_pool *p);

/* Starts a request. extra_headers: complete header lines ("Authorization: Bearer x\r\n") or NULL.
 * The body is copied. Returns 0, or -1 + err_set() when no connection could be started (the handler
 * is then not called). */
int hc_request(hc_pool *p, const char *method, const char *path, const char *extra_headers,
               const char *body, size_t body_len, const hc_handler *h, void *user);

/* Connections opened so far (a measure of keep-alive reuse) and currently open. */
int hc_pool_opened(const hc_pool *p);
int hc_pool_open_now(const hc_pool *p);

#endif
