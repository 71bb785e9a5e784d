/* gptoss serve: the OpenAI-compatible HTTP server. Options keep vLLM's names so existing launch
 * scripts carry over. */
#include "base/error.h"
#include "base/log.h"
#include "cli/args.h"
#include "cli/engine_args.h"
#include "cli/presets.h"
#include "cli/commands.h"
#include "server/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char USAGE[] =
    "usage: gptoss serve --model DIR|synthetic:tiny [options]\n"
    "Serves the OpenAI API (/v1/completions, /v1/chat/completions, /v1/responses, /v1/models,\n"
    "/v1/models/{id}) plus "
    "/tokenize, /detokenize, /health, /version and /metrics (Prometheus, vLLM's metric names),\n"
    "and a chat page for browsers at / (it asks for the --api-key itself).\n"
    "`--model synthetic:tiny` writes a tiny random-weight model into the cache folder once and "
    "serves it.\n"
    "\n"
    "server:\n"
    "  --host ADDR                    address to listen on (default 0.0.0.0)\n"
    "  --port N                       port (default 8000; 0 picks a free one, printed at start)\n"
    "  --api-key KEY                  require `Authorization: Bearer KEY` on every route but "
    "/health\n"
    "  --metrics-no-auth              serve /metrics without the key (scrapers on a private "
    "network)\n"
    "  --no-webui                     no chat page at / (404)\n"
    "  --served-model-name NAME       the model name clients use (default: the --model argument)\n"
    "  --api-server-threads N         HTTP event-loop threads (default 2)\n"
    "  --max-request-bytes N          larger request bodies get 413 (default 33554432)\n"
    "  --max-echo-bytes N             completions: n x the echoed prompt with its logprobs may "
    "make\n"
    "                                 at most about N response bytes, else 400 (default "
    "33554432)\n"
    "  --responses-store-size N       /v1/responses kept in memory for previous_response_id,\n"
    "                                 item_reference and GET (default 10000; 0 = none stored)\n"
    "  --responses-store-bytes N      ... and at most about N bytes of them (default 268435456)\n"
    "  --responses-store-ttl SECONDS  a stored response unused this long is dropped (default "
    "86400;\n"
    "                                 0 = never); least recently used go first at either bound\n"
    "  --max-header-bytes N           larger request heads get 413 (default 16384)\n"
    "  --max-connections N            connections beyond N wait in the listen queue (default 0 = "
    "the open-file limit)\n"
    "  --timeout-keep-alive SECONDS   idle/stalled connections are closed after this (default 60)\n"
    "  --shutdown-timeout SECONDS     on SIGTERM, in-flight requests get this long to finish "
    "(default 30)\n"
    "  --stats-interval SECONDS       period of the stats log line (default 10; 0 = off)\n"
    "  --max-waiting-requests N       more waiting requests are refused with 429 (default 0 = no "
    "limit)\n"
    "  --allowed-origins JSON         CORS: origins whose pages may call the API, a JSON list "
    "(default\n"
    "                                 [\"*\"]: all)\n"
    "  --allowed-methods JSON         CORS: methods a preflight may ask for (default [\"*\"])\n"
    "  --allowed-headers JSON         CORS: request headers a preflight may ask for (default "
    "[\"*\"])\n"
    "  --allow-credentials            CORS: let pages send cookies and read the answer (the "
    "origin is\n"
    "                                 echoed instead of *)\n" PRESETS_HELP ENGINE_ARGS_HELP;

static int opt_int(args_t *a, const char *name, long lo, long hi, int *out, bool *matched) {
    const char *v;
    *matched = args_opt(a, name, &v);
    if (!*matched) return 0;
    long x;
    if (args_int(name, v, lo, hi, &x) != 0) return -1;
    *out = (int)x;
    return 0;
}

static int serve(int argc, char **argv, server_options *o);

/* --headless (a node other than 0 under --nnodes > 1): no server, no engine; this node's GPU ranks
 * run the steps node 0 sends until node 0 stops (runtime_run_headless). The server options are
 * parsed and unused, so that every node can be started with the same command line plus
 * --node-rank and --headless. */
static int serve_headless(const args_t *a, const runtime_args *rt) {
    char *model = runtime_resolve_model(rt);
    if (!model) return args_error_exit(a, 1);
    log_info("serve: headless node %d of %d (-tp %d, %d ranks here): waiting for node 0 at %s",
             rt->node_rank, rt->nnodes, rt->tensor_parallel_size,
             rt->tensor_parallel_size / rt->nnodes, rt->master_addr);
    const int rc = runtime_run_headless(rt, model);
    free(model);
    if (rc != 0) return args_error_exit(a, 1);
    log_info("serve: node 0 stopped; headless node %d done", rt->node_rank);
    return 0;
}

int cmd_serve(int argc, char **argv) {
    server_options o;
    server_options_default(&o);
    int rc = serve(argc, argv, &o);
    /* The lists are the only options the parser allocates. */
    server_list_free(&o.allowed_origins);
    server_list_free(&o.allowed_methods);
    server_list_free(&o.allowed_headers);
    return rc;
}

static int serve(int argc, char **argv, server_options *o) {
    args_t a;
    args_init(&a, argc, argv);
    /* --preset first, wherever it is: its values are defaults that the other options override. */
    const char *preset = NULL;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--preset")) {
            if (preset_apply(argv[i + 1], &o->rt) != 0) return args_fail(&a);
            preset = argv[i + 1];
        }
    while (a.i < argc) {
        const int em = engine_args_parse(&a, &o->rt);
        if (em < 0) return args_fail(&a);
        if (em > 0) continue;
        const char *v = NULL;
        bool m = false;
        int iv = 0;
        double dv = 0;
        long lv = 0;
        if (args_flag(&a, "--help") || args_flag(&a, "-h")) {
            fputs(USAGE, stdout);
            return 0;
        }
#define INT_OPT(name, lo, hi, dst)                                                                 \
    if (opt_int(&a, name, lo, hi, &iv, &m) != 0) return args_fail(&a);                             \
    if (m) {                                                                                       \
        dst = iv;                                                                                  \
        continue;                                                                                  \
    }
        INT_OPT("--port", 0, 65535, o->port)
        INT_OPT("--api-server-threads", 1, 64, o->n_loops)
        INT_OPT("--timeout-keep-alive", 1, 86400, o->idle_timeout)
        INT_OPT("--max-waiting-requests", 0, 1 << 24, o->rt.eng.max_waiting)
        INT_OPT("--max-connections", 0, 1 << 24, o->max_connections)
        INT_OPT("--responses-store-size", 0, 1 << 24, o->responses_store_size)
#undef INT_OPT
        if (args_opt(&a, "--preset", &v)) {
            if (!v) return args_fail(&a); /* applied above */
        } else if (args_opt(&a, "--host", &o->host)) {
            if (!o->host) return args_fail(&a);
        } else if (args_opt(&a, "--api-key", &o->api_key)) {
            if (!o->api_key) return args_fail(&a);
            /* An empty key would silently mean "no authentication". */
            if (!o->api_key[0])
                return args_usage_error(&a, "option --api-key: the key is empty", USAGE);
        } else if (args_opt(&a, "--allowed-origins", &v)) {
            if (!v || server_list_parse("--allowed-origins", v, &o->allowed_origins) != 0)
                return args_fail(&a);
        } else if (args_opt(&a, "--allowed-methods", &v)) {
            if (!v || server_list_parse("--allowed-methods", v, &o->allowed_methods) != 0)
                return args_fail(&a);
        } else if (args_opt(&a, "--allowed-headers", &v)) {
            if (!v || server_list_parse("--allowed-headers", v, &o->allowed_headers) != 0)
                return args_fail(&a);
        } else if (args_flag(&a, "--allow-credentials")) {
            o->allow_credentials = true;
        } else if (args_flag(&a, "--metrics-no-auth")) {
            o->metrics_no_auth = true;
        } else if (args_flag(&a, "--no-webui")) {
            o->no_webui = true;
        } else if (args_opt(&a, "--served-model-name", &o->served_model_name)) {
            if (!o->served_model_name) return args_fail(&a);
            if (!o->served_model_name[0])
                return args_usage_error(&a, "option --served-model-name: the name is empty", USAGE);
        } else if (args_opt(&a, "--max-request-bytes", &v)) {
            if (args_int("--max-request-bytes", v, 1024, 1L << 40, &lv)) return args_fail(&a);
            o->max_request_bytes = (size_t)lv;
        } else if (args_opt(&a, "--max-echo-bytes", &v)) {
            if (args_int("--max-echo-bytes", v, 1024, 1L << 40, &lv)) return args_fail(&a);
            o->max_echo_bytes = (size_t)lv;
        } else if (args_opt(&a, "--responses-store-bytes", &v)) {
            if (args_int("--responses-store-bytes", v, 4096, 1L << 40, &lv)) return args_fail(&a);
            o->responses_store_bytes = (size_t)lv;
        } else if (args_opt(&a, "--responses-store-ttl", &v)) {
            if (args_double("--responses-store-ttl", v, 0, 1e9, &dv)) return args_fail(&a);
            o->responses_store_ttl = dv;
        } else if (args_opt(&a, "--max-header-bytes", &v)) {
            if (args_int("--max-header-bytes", v, 1024, 1L << 24, &lv)) return args_fail(&a);
            o->max_header_bytes = (size_t)lv;
        } else if (args_opt(&a, "--shutdown-timeout", &v)) {
            if (args_double("--shutdown-timeout", v, 0, 86400, &dv)) return args_fail(&a);
            o->shutdown_timeout = dv;
        } else if (args_opt(&a, "--stats-interval", &v)) {
            if (args_double("--stats-interval", v, 0, 86400, &dv)) return args_fail(&a);
            o->stats_interval = dv;
        } else {
            return args_unknown(&a, USAGE);
        }
    }
    if (!o->rt.model) {
        return args_usage_error(&a, "--model is required", USAGE);
    }
    if (runtime_check(&o->rt) != 0) return args_fail(&a);
    if (o->rt.headless) return serve_headless(&a, &o->rt);
    log_info("engine: --max-num-seqs %d --max-num-batched-tokens %d --stream-interval %d "
             "--target-tpot-ms %g%s%s",
             o->rt.eng.max_num_seqs, o->rt.eng.max_num_batched_tokens, o->rt.eng.stream_interval,
             o->rt.eng.target_tpot_ms, preset ? ", from --preset " : "", preset ? preset : "");
    return server_run(o);
}
