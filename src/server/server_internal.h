/* Server internals shared by the files of src/server. Not for other modules.
 *
 * Threads and ownership (Redis-like: every object has one owning thread):
 *   main thread    creates the listening sockets and the loops, loads the model, then waits for
 *                  SIGTERM/SIGINT and runs the drain. It writes `server` fields once, before the
 *                  state becomes SRV_READY; afterwards they are read-only.
 *   loop threads   (--api-server-threads) each own an event_base, an evhttp bound to its own
 *                  SO_REUSEPORT socket (the kernel spreads connections), every connection accepted
 *                  there and every srv_req created there. Parsing, tokenising, JSON and socket
 *                  writes happen only here.
 *   engine thread  owns all scheduling state. Its output callback (handover_on_output) only copies
 *                  the output into a message, appends it to the owning loop's queue under that
 *                  loop's mutex and wakes the loop (event_active); it never touches a socket or
 *                  dereferences anything of the request but its (immutable) loop pointer.
 *
 * A srv_req lives until both sides are done with it: the engine has sent the final output of each
 * of its n sequences (after which the engine never mentions the request again), and the HTTP side
 * has finished the response or seen the client go away. Only its loop thread frees it. */
#ifndef GPTOSS_SERVER_SERVER_INTERNAL_H
#define GPTOSS_SERVER_SERVER_INTERNAL_H

#include "api/api.h"
#include "base/strmap.h"
#include "server/server.h"

#include <event2/event.h>
#include <event2/http.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

typedef enum { SRV_LOADING, SRV_READY, SRV_DRAINING, SRV_FAILED } srv_state;

/* Commands the main thread posts to a loop (bit flags, handled on the loop thread). */
enum { CMD_STOP_ACCEPT = 1, CMD_ABORT_ALL = 2, CMD_EXIT = 4 };

typedef struct srv_msg srv_msg;
typedef struct srv_req srv_req;
typedef struct server server;
typedef struct offload_job offload_job;
typedef struct offload_pool offload_pool;
typedef struct body_drain body_drain;

typedef struct srv_loop {
    server *srv;
    int index;
    struct event_base *base;
    struct evhttp *http;
    evutil_socket_t listen_fd;
    struct evhttp_bound_socket *bound;
    pthread_t thread;
    bool thread_started;
    struct event *wake;         /* activated from other threads: the queue or commands changed */
    struct event *stats_timer;  /* loop 0 only */
    struct event *accept_retry; /* turns the listener back on after EMFILE (admission.c) */
    /* Accepting at the descriptor limit (overflow.c). */
    struct event *overflow_ev; /* the listening socket, while evhttp's accepting is paused */
    bool overflow_on;
    int spares[4], n_spares; /* descriptors held for it (OVERFLOW_SPARES) */
    struct ov_conn *ov_live[4];

    /* The hand-over queue (engine thread → this loop) and commands (main → this loop). */
    pthread_mutex_t mu;
    srv_msg *head, *tail;
    int commands;

    /* Loop-thread only. */
    srv_req *live;          /* requests in flight here (doubly linked) */
    struct wire_conn *wire; /* per-descriptor scan state (wire.c) */
    size_t n_wire;
    body_drain *drains;                 /* refused bodies being read to their end (body_drain.c) */
    offload_job *done_head, *done_tail; /* finished off-loop work (offload.c), under mu */
    /* The most thread CPU time one of our callbacks (routing a request, a wake-up with engine
     * outputs) took on this loop: what every other connection of the loop waited at worst.
     * CPU time, not wall time, so a descheduled thread does not count. /metrics shows it. */
    _Atomic uint64_t max_cb_ns;
} srv_loop;

struct server {
    server_options opt;
    const char *model_name; /* served name */
    srv_loop *loops;
    int n_loops;
    int port; /* the bound port (opt.port, or the one the kernel picked for 0) */

    /* Set by the main thread before state becomes SRV_READY. */
    engine *eng;
    tokenizer *tok;
    grammar_vocab *gvocab; /* structured output: the token trie masks are built from */
    char *model_dir;
    api_config api;
    int max_model_len;
    offload_pool *offload; /* worker threads for large request bodies (offload.c) */
    long created;          /* unix time the model became ready */

    _Atomic int state;          /* srv_state */
    _Atomic uint64_t next_id;   /* engine request ids */
    _Atomic int inflight;       /* live srv_reqs, all loops */
    uint64_t id_salt;           /* makes response ids unpredictable across restarts */
    _Atomic bool accept_paused; /* a loop met EMFILE/ENFILE and has not accepted since */

    /* Background responses in flight (background.c). */
    pthread_mutex_t bg_mu;
    strmap bg; /* response id → its engine request */

    /* Stats log (loop 0's timer only). */
    uint64_t last_prompt, last_gen, last_queries, last_hits;
    double last_t;
};

struct srv_req {
    srv_loop *loop;
    struct evhttp_request *req; /* NULL once the response is finished or the client went away */
    struct evhttp_connection *evcon;
    struct event *watch; /* notices the client closing while we generate */
    uint64_t id;
    api_call call;
    api_stream *stream;
    int n_seqs, n_final; /* sequences, and final outputs received from the engine */
    /* Engine requests: one per prompt (completions with a list), ids id .. id + n_submitted - 1,
     * each with n_per sequences. */
    int n_prompts, n_submitted, n_per;
    bool streaming, started, http_done, aborted;
    bool background;  /* answered at once; generates on with no connection (background.c) */
    char resp_id[64]; /* background: the response id it is registered under */
    srv_req *prev, *next;
};

/* http.c: sockets and loops. */
uint64_t loop_cpu_ns(void);                         /* this thread's CPU time */
void loop_note_cpu(srv_loop *l, uint64_t start_ns); /* updates max_cb_ns */
int loops_create(server *s);
int loops_start(server *s);
void loops_command(server *s, int cmd);
void loops_join(server *s);
void loops_free(server *s);

/* handover.c */
void handover_on_output(const engine_output *o, void *user);   /* engine thread */
void handover_wake(evutil_socket_t fd, short what, void *arg); /* loop thread: drains the queue */
void handover_discard(srv_loop *l);                            /* teardown: drops queued messages */

/* admission.c: descriptor limits and pausing accept() at them. */
void admission_raise_fd_limit(void);                   /* soft RLIMIT_NOFILE to the hard one */
void admission_limit_connections(int max_connections); /* once ready; 0 = no limit */
int admission_setup(srv_loop *l);                      /* after the listener is bound */
void admission_teardown(srv_loop *l);                  /* after the loop stopped */

/* overflow.c: while accepting is paused at the descriptor limit, the loop still answers /health
 * (and 503 to the rest) with a few spare descriptors. */
enum { OVERFLOW_SPARES = 4 };
int overflow_setup(srv_loop *l); /* after the listener is bound */
void overflow_enable(srv_loop *l, bool on);
void overflow_stop_listening(srv_loop *l); /* before the listening socket closes */
void overflow_teardown(srv_loop *l);

/* The loop that owns an event base (for libevent callbacks that carry no argument of ours). */
srv_loop *admission_loop_of(struct event_base *base);

/* wire.c: raw-byte checks evhttp cannot make (obs-fold, head size) and its error pages as JSON. */
struct bufferevent;
void wire_attach(struct bufferevent *bev); /* each new connection's bufferevent */
/* 0, or the status (400, 431) a request must be refused with and closed, and why. */
int wire_check(srv_loop *l, struct evhttp_request *req, char *why, size_t why_len);
void wire_free(srv_loop *l);

/* body_drain.c: after a 413, the rest of the refused body is read from a duplicate of the
 * connection's descriptor, so that the client reads the answer instead of a reset. */
void body_drain_start(srv_loop *l, evutil_socket_t conn_fd);
void body_drain_free_all(srv_loop *l); /* at teardown: closes every drain */

/* offload.c: large request bodies are worked on by worker threads, off the loops. What runs there
 * (api_parse_*, tokenizing) must only read shared state (the tokenizer, the api config). */
enum { OFFLOAD_MIN_BYTES = 16 << 10 };
/* A pure handler: the answer's status and JSON body (heap) for a request body. Thread-safe. */
typedef int (*body_fn)(server *s, const char *body, size_t len, char **out, size_t *out_len);
struct offload_job {
    offload_job *next;
    srv_loop *loop;
    struct evhttp_request
        *req;              /* NULL when the job is discarded at teardown: free, answer nothing */
    struct evbuffer *body; /* the request body, moved out of evhttp's buffer */
    void (*work)(server *s, offload_job *j, const char *body, size_t len); /* worker thread */
    void (*done)(srv_loop *l, offload_job *j); /* loop thread; answers and frees the job */
    body_fn fn;                                /* offload_body_fn's */
    int status;
    char *out;
    size_t out_len;
    api_kind kind; /* generate.c's */
    int rc;
    api_call call;
    api_error err;
};
int offload_start(server *s); /* after loops_create */
void offload_stop(server *s); /* after loops_join, before loops_free */
void offload_submit(srv_loop *l, struct evhttp_request *req, offload_job *j);
void offload_deliver(srv_loop *l); /* loop thread, from handover_wake */
void offload_discard(srv_loop *l); /* teardown */
void offload_job_free(offload_job *j);
/* Answers req with fn's result: inline for a small body, else from a worker. */
void offload_body_fn(srv_loop *l, struct evhttp_request *req, body_fn fn);

/* framing.c: false (and why) when the request's head frames its body ambiguously (RFC 9112). */
bool framing_check(struct evhttp_request *req, char *why, size_t why_len);

/* cors.c: answers a CORS preflight (true: done), or adds Access-Control-Allow-Origin for an allowed
 * Origin to the response that will follow (false: route the request). */
bool cors_handle(server *s, struct evhttp_request *req);

/* router.c: the evhttp callback for every request. */
void router_handle(struct evhttp_request *req, void *arg);
/* Adds "Connection: close" while draining, so keep-alive clients move on. */
void router_common_headers(server *s, struct evhttp_request *req);

/* reply.c */
void reply_json(server *s, struct evhttp_request *req, int status, const char *body, size_t len);
/* Like reply_json, taking over the heap body without copying it (large answers). */
void reply_json_owned(server *s, struct evhttp_request *req, int status, char *body, size_t len);
void reply_text(server *s, struct evhttp_request *req, int status, const char *ctype,
                const char *body, size_t len);
void reply_api_error(server *s, struct evhttp_request *req, const api_error *err);
void reply_error(server *s, struct evhttp_request *req, int status, const char *type,
                 const char *param, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* The request body as one contiguous buffer (not NUL-terminated). */
const char *request_body(struct evhttp_request *req, size_t *len);

/* generate.c: /v1/completions, /v1/chat/completions, /v1/responses. */
void generate_handle(srv_loop *l, struct evhttp_request *req, api_kind kind);
void generate_on_output(srv_req *r, const engine_output *o); /* loop thread */
void generate_abort_all(srv_loop *l);
void generate_free_all(srv_loop *l); /* teardown, after the engine has stopped */

/* background.c: background responses in flight by response id, for cancel from any loop. */
void background_init(server *s);
void background_free(server *s);
void background_add(server *s, const char *id, uint64_t engine_id, int n_requests);
void background_remove(server *s, const char *id);
bool background_cancel(server *s, const char *id); /* false: not in flight */

/* info.c */
void handle_health(srv_loop *l, struct evhttp_request *req);
void handle_version(srv_loop *l, struct evhttp_request *req);
void handle_models(srv_loop *l, struct evhttp_request *req);
/* GET MODELS_PREFIX{id}: the model object, or 404 model_not_found. */
#define MODELS_PREFIX "/v1/models/"
void handle_model(srv_loop *l, struct evhttp_request *req);

/* stored_responses.c: GET / DELETE RESPONSES_PREFIX{id}, GET …/{id}/input_items,
 * POST …/{id}/cancel (the responses store). */
#define RESPONSES_PREFIX "/v1/responses/"
void handle_stored_response(srv_loop *l, struct evhttp_request *req);
void handle_tokenize(srv_loop *l, struct evhttp_request *req);
void handle_detokenize(srv_loop *l, struct evhttp_request *req);

/* metrics_prom.c */
void handle_metrics(srv_loop *l, struct evhttp_request *req);
/* webui.c: the built-in chat page and its script and style. */
void handle_webui(srv_loop *l, struct evhttp_request *req);
/* The Prometheus text exposition of m (heap string). */
char *metrics_prom_render(const engine_metrics *m, const char *model_name, size_t *len);

/* stats_log.c */
void stats_log_tick(evutil_socket_t fd, short what, void *arg);

/* load.c: resolves the model (synthetic:tiny is written to the cache once), loads the tokenizer,
 * creates the backend and the engine. */
int server_load_model(server *s);

#endif
