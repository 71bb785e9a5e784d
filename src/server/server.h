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

typedef struct {
    const char *host;              /* default "0.0.0.0" */
    int port;                      /* default 8000; 0 = any free port (logged at start) */
    const char *api_key;           /* NULL: no authentication; else every route but /health */
    bool metrics_no_auth;          /* --metrics-no-auth: /metrics answers without the key */
    const char *served_model_name; /* NULL: the --model argument */
    int n_loops;                   /* --api-server-threads */
    double shutdown_timeout;       /* seconds in-flight requests get to finish after SIGTERM */
    size_t max_request_bytes;      /* request bodies beyond this get 413 */
    size_t max_echo_bytes;         /* completions: n × echoed prompt response bytes (api.h) */
    size_t max_header_bytes;       /* request line + headers beyond this get 413 */
    int max_connections;           /* 0: as many as the open-file limit allows */
    int idle_timeout;              /* seconds a connection may sit idle or stall mid-request */
    double stats_interval; /* seconds between stats log lines (only when there was activity) */
    /* --model, --backend and the engine options (runtime_build's); rt.eng.max_waiting is
     * --max-waiting-requests, which only the server takes. */
    runtime_args rt;
} server_options;

void server_options_default(server_options *o);

/* Runs the server until SIGTERM or SIGINT, then drains. Returns the process exit code (0 after a
 * clean drain). */
int server_run(const server_options *o);

#endif
