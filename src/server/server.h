/* The HTTP server: `gptoss serve`. An OpenAI-compatible API over libevent's evhttp, run by a few
 * event-loop threads that never touch engine state: they parse and tokenise requests (src/api),
 * submit them to the engine's thread-safe inbox, and get the engine's outputs back through a
 * per-loop hand-over queue (see server_internal.h for who owns what). */
#ifndef GPTOSS_SERVER_SERVER_H
#define GPTOSS_SERVER_SERVER_H

#include "engine/runtime.h"

#include <stdbool.h>
#include <stddef.h>

#define GPTOSS_VERSION "0.1.0"

/* A list of names from a flag; an entry "*" means "all", and so does v NULL (flag not given). */
typedef struct {
    char **v;
    int n;
} server_list;

typedef struct {
    const char *host;              /* default "0.0.0.0" */
    int port;                      /* default 8000; 0 = any free port (logged at start) */
    const char *api_key;           /* NULL: no authentication; else every route but /health */
    bool metrics_no_auth;          /* --metrics-no-auth: /metrics answers without the key */
    bool no_webui;                 /* --no-webui: no chat page at / (404) */
    const char *served_model_name; /* NULL: the --model argument */
    int n_loops;                   /* --api-server-threads */
    double shutdown_timeout;       /* seconds in-flight requests get to finish after SIGTERM */
    size_t max_request_bytes;      /* request bodies beyond this get 413 */
    size_t max_echo_bytes;         /* completions: n × echoed prompt response bytes (api.h) */
    /* The responses store (api/response_store.h): --responses-store-size (0 turns it off),
     * --responses-store-bytes, --responses-store-ttl (seconds of disuse; 0 = no expiry). */
    int responses_store_size;
    size_t responses_store_bytes;
    double responses_store_ttl;
    size_t max_header_bytes; /* request line + headers beyond this get 413 */
    int max_connections;     /* 0: as many as the open-file limit allows */
    int idle_timeout;        /* seconds a connection may sit idle or stall mid-request */
    double stats_interval;   /* seconds between stats log lines (only when there was activity) */
    /* CORS (vLLM's --allowed-origins, --allowed-methods, --allowed-headers, --allow-credentials):
     * not given means the default, all. */
    server_list allowed_origins, allowed_methods, allowed_headers;
    bool allow_credentials;
    /* --model, --backend and the engine options (runtime_build's); rt.eng.max_waiting is
     * --max-waiting-requests, which only the server takes. */
    runtime_args rt;
} server_options;

void server_options_default(server_options *o);

/* Parses a list flag the way vLLM does (a JSON array of strings, e.g. '["https://a.example"]') into
 * *out (replacing what was there); errors name the flag. server_list_free frees the strings. */
int server_list_parse(const char *flag, const char *json, server_list *out);
void server_list_free(server_list *l);

/* Runs the server until SIGTERM or SIGINT, then drains. Returns the process exit code (0 after a
 * clean drain). */
int server_run(const server_options *o);

#endif
