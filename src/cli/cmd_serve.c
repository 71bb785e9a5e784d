/* gptoss serve: the OpenAI-compatible HTTP server. Options keep vLLM's names so existing launch
 * scripts carry over. */
#include "base/error.h"
#include "cli/args.h"
#include "cli/engine_args.h"
#include "cli/commands.h"
#include "server/server.h"

#include <stdio.h>
#include <string.h>

static const char USAGE[] =
    "usage: gptoss serve --model DIR|synthetic:tiny [options]\n"
    "Serves the OpenAI API (/v1/completions, /v1/chat/completions, /v1/responses, /v1/models) "
    "plus\n"
    "/tokenize, /detokenize, /health, /version and /metrics (Prometheus, vLLM's metric names).\n"
    "`--model synthetic:tiny` writes a tiny random-weight model into the cache folder once and "
    "serves it.\n"
    "\n"
    "server:\n"
    "  --host ADDR                    address to listen on (default 0.0.0.0)\n"
    "  --port N                       port (default 8000; 0 picks a free one, printed at start)\n"
    "  --api-key KEY                  require `Authorization: Bearer KEY` on /v1 routes\n"
    "  --served-model-name NAME       the model name clients use (default: the --model argument)\n"
    "  --api-server-threads N         HTTP event-loop threads (default 2)\n"
    "  --max-request-bytes N          larger request bodies get 413 (default 33554432)\n"
    "  --max-header-bytes N           larger request heads get 413 (default 16384)\n"
    "  --timeout-keep-alive SECONDS   idle/stalled connections are closed after this (default 60)\n"
    "  --shutdown-timeout SECONDS     on SIGTERM, in-flight requests get this long to finish "
    "(default 30)\n"
    "  --stats-interval SECONDS       period of the stats log line (default 10; 0 = off)\n"
    "engine:\n"
    "  --backend cpu                  the backend (cpu; cuda when built)\n"
    "  --max-num-seqs N               sequences running at once (default 256)\n"
    "  --max-num-batched-tokens N     tokens per step, the chunked-prefill budget (default 8192)\n"
    "  --max-model-len N              longest sequence (default: the model's)\n"
    "  --max-waiting-requests N       more waiting requests are refused with 429 (default 0 = no "
    "limit)\n"
    "  --stream-interval N            stream every N tokens (the first at once; default 1)\n"
    "  --[no-]enable-prefix-caching   (default on)\n"
    "  --[no-]async-scheduling        (default on)\n"
    "  --num-kv-blocks N              KV blocks (default: the backend's)\n"
    "  --block-size N                 tokens per KV block (default 32)\n"
    "  --gpu-memory-utilization F     fraction of GPU memory to use (CUDA backend)\n"
    "  --kv-cache-dtype auto|bf16|fp8 (fp8 needs the CUDA backend)\n";

static int opt_int(args_t *a, const char *name, long lo, long hi, int *out, bool *matched) {
    const char *v;
    *matched = args_opt(a, name, &v);
    if (!*matched) return 0;
    long x;
    if (args_int(name, v, lo, hi, &x) != 0) return -1;
    *out = (int)x;
    return 0;
}

int cmd_serve(int argc, char **argv) {
    args_t a;
    args_init(&a, argc, argv);
    server_options o;
    server_options_default(&o);
    o.eng.max_model_len = 0; /* the model's, unless given */
    const engine_args ea = {&o.eng, &o.num_kv_blocks, &o.block_size, &o.gpu_memory_utilization};
    while (a.i < argc) {
        const int em = engine_args_parse(&a, &ea);
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
        INT_OPT("--port", 0, 65535, o.port)
        INT_OPT("--api-server-threads", 1, 64, o.n_loops)
        INT_OPT("--timeout-keep-alive", 1, 86400, o.idle_timeout)
        INT_OPT("--max-waiting-requests", 0, 1 << 24, o.eng.max_waiting)
#undef INT_OPT
        if (args_opt(&a, "--model", &o.model)) {
            if (!o.model) return args_fail(&a);
        } else if (args_opt(&a, "--host", &o.host)) {
            if (!o.host) return args_fail(&a);
        } else if (args_opt(&a, "--api-key", &o.api_key)) {
            if (!o.api_key) return args_fail(&a);
        } else if (args_opt(&a, "--served-model-name", &o.served_model_name)) {
            if (!o.served_model_name) return args_fail(&a);
        } else if (args_opt(&a, "--backend", &o.backend)) {
            if (!o.backend) return args_fail(&a);
        } else if (args_opt(&a, "--kv-cache-dtype", &o.kv_cache_dtype)) {
            if (!o.kv_cache_dtype) return args_fail(&a);
        } else if (args_opt(&a, "--max-request-bytes", &v)) {
            if (args_int("--max-request-bytes", v, 1024, 1L << 40, &lv)) return args_fail(&a);
            o.max_request_bytes = (size_t)lv;
        } else if (args_opt(&a, "--max-header-bytes", &v)) {
            if (args_int("--max-header-bytes", v, 1024, 1L << 24, &lv)) return args_fail(&a);
            o.max_header_bytes = (size_t)lv;
        } else if (args_opt(&a, "--shutdown-timeout", &v)) {
            if (args_double("--shutdown-timeout", v, 0, 86400, &dv)) return args_fail(&a);
            o.shutdown_timeout = dv;
        } else if (args_opt(&a, "--stats-interval", &v)) {
            if (args_double("--stats-interval", v, 0, 86400, &dv)) return args_fail(&a);
            o.stats_interval = dv;
        } else {
            return args_unknown(&a, USAGE);
        }
    }
    if (!o.model) {
        return args_usage_error(&a, "--model is required", USAGE);
    }
    const char *kd = o.kv_cache_dtype;
    if (strcmp(kd, "auto") && strcmp(kd, "bf16") && strcmp(kd, "fp8") && strcmp(kd, "fp8_e4m3")) {
        fprintf(stderr, "gptoss serve: --kv-cache-dtype %s: expected auto, bf16 or fp8\n", kd);
        return 2;
    }
    if (!strcmp(o.backend, "cpu") && !strncmp(kd, "fp8", 3)) {
        fprintf(stderr,
                "gptoss serve: --kv-cache-dtype %s: the cpu backend keeps its KV cache in float32 "
                "(bf16 precision); fp8 needs --backend cuda\n",
                kd);
        return 2;
    }
    return server_run(&o);
}
