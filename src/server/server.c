/* The server's life: listen, load, serve, and on SIGTERM/SIGINT drain and exit.
 *
 * Drain: the loops close their listening sockets (new connections are refused by the kernel),
 * requests arriving on open connections get 503, requests in flight may finish for up to
 * --shutdown-timeout seconds; then they are aborted (the engine sends each a final "abort" output,
 * so every response still ends properly), the loops stop and the engine thread is joined. */
#include "server/server_internal.h"

#include "base/error.h"
#include "base/log.h"
#include "base/timeutil.h"
#include "base/xalloc.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void server_options_default(server_options *o) {
    memset(o, 0, sizeof *o);
    o->host = "0.0.0.0";
    o->port = 8000;
    o->n_loops = 2;
    o->shutdown_timeout = 30;
    o->max_request_bytes = 32u << 20;
    o->max_echo_bytes = 32u << 20;
    o->responses_store_size = 10000;
    o->responses_store_bytes = (size_t)256 << 20;
    o->responses_store_ttl = 86400;
    o->max_header_bytes = 16u << 10;
    o->idle_timeout = 60;
    o->stats_interval = 10;
    runtime_args_default(&o->rt);
}

/* Waits up to `seconds` for in-flight requests to end; false if some remain. A second signal cuts
 * the wait short. */
static bool wait_idle(server *s, double seconds, const sigset_t *sigs) {
    double end = now_seconds() + seconds;
    while (atomic_load(&s->inflight) > 0) {
        double left = end - now_seconds();
        if (left <= 0) return false;
        double step = left < 0.05 ? left : 0.05;
        struct timespec ts = {0, (long)(step * 1e9)};
        if (sigtimedwait(sigs, NULL, &ts) > 0) {
            log_warn("second signal: not waiting any longer");
            return atomic_load(&s->inflight) == 0;
        }
    }
    return true;
}

static void drain(server *s, const sigset_t *sigs) {
    atomic_store(&s->state, SRV_DRAINING);
    loops_command(s, CMD_STOP_ACCEPT);
    int n = atomic_load(&s->inflight);
    if (n > 0)
        log_info("draining: %d request(s) in flight, waiting up to %.0f s", n,
                 s->opt.shutdown_timeout);
    if (!wait_idle(s, s->opt.shutdown_timeout, sigs)) {
        log_warn("draining: aborting %d request(s) still running", atomic_load(&s->inflight));
        loops_command(s, CMD_ABORT_ALL);
        /* Aborts take effect at the engine's next step. */
        if (!wait_idle(s, 10, sigs))
            log_warn("draining: %d request(s) did not end", atomic_load(&s->inflight));
    }
}

int server_run(const server_options *o) {
    server *s = xcalloc(1, sizeof *s);
    s->opt = *o;
    s->model_name = o->served_model_name ? o->served_model_name : o->rt.model;
    atomic_store(&s->state, SRV_LOADING);
    atomic_store(&s->next_id, 1);
    background_init(s);
    s->id_salt = ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid() ^ (uint64_t)(uintptr_t)s;
    log_info("gptoss serve %s: model %s, served as '%s'", GPTOSS_VERSION, o->rt.model,
             s->model_name);

    /* Signals go to the main thread only: block them before any thread starts (threads inherit the
     * mask) and collect them with sigwait. Writes to closed sockets must not kill the process. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* Every connection is a descriptor: take all the kernel allows us (admission.c). */
    admission_raise_fd_limit();
    int rc = 1;
    if (loops_create(s) != 0 || offload_start(s) != 0 || loops_start(s) != 0) {
        log_error("%s", err_msg());
        goto out;
    }
    log_info("listening on http://%s:%d (%d event loop%s)", o->host, s->port, s->n_loops,
             s->n_loops > 1 ? "s" : "");
    if (server_load_model(s) != 0) {
        log_error("%s", err_msg());
        atomic_store(&s->state, SRV_FAILED);
        goto out;
    }
    if (engine_start(s->eng) != 0) {
        log_error("%s", err_msg());
        goto out;
    }
    s->created = (long)time(NULL);
    admission_limit_connections(o->max_connections);
    atomic_store(&s->state, SRV_READY);
    log_info("ready: http://%s:%d/v1 (model '%s')", o->host, s->port, s->model_name);
    int sig = 0;
    sigwait(&sigs, &sig);
    log_info("%s: shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
    drain(s, &sigs);
    rc = 0;
out:
    if (s->loops) {
        loops_command(s, CMD_EXIT);
        loops_join(s);
    }
    offload_stop(s); /* before the loops' queues go: a worker may still hand a job over */
    /* The engine stops before the loops' objects go: its callbacks reference their queues. */
    if (s->eng) engine_destroy(s->eng);
    s->eng = NULL;
    if (s->loops) loops_free(s);
    if (s->gvocab) grammar_vocab_free(s->gvocab);
    if (s->tok) tokenizer_free(s->tok);
    resp_store_free(s->api.store); /* the loops that used it are gone */
    background_free(s);
    free(s->model_dir);
    free(s);
    if (rc == 0) log_info("stopped");
    return rc;
}
